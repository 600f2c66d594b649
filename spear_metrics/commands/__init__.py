"""One module per ``spearbench`` subcommand (see :mod:`spear_metrics.cli`), and what their
consoles share: ``KEY=VALUE`` options, number flags, failed rows and null values with reasons."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Iterable, Mapping, Sequence

from spear_metrics.core.records import read_run_info  # noqa: F401  (the commands read it from here)

#: failed rows printed on the console (the rest are in the run's files)
SHOWN_FAILURES = 5


def parse_options(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{k: v}``, values as strings: the dimension's or agent's option
    schema types them (:mod:`spear_metrics.core.options`).

    Raises:
        OptionError: a pair without ``=``.
    """
    from spear_metrics.core.options import parse_pairs

    return parse_pairs(pairs)


#: most bootstrap resamples a command accepts (more would not fit in memory for a full split)
MAX_RESAMPLES = 100_000


def number(*, integer: bool = False, minimum: float | None = None, above: float | None = None,
           maximum: float | None = None) -> Callable[[str], Any]:
    """An argparse ``type=`` reading a flag's value with THE number parser
    (:func:`spear_datasets.schema.parse_number`): ``--batch-size 0``, ``nan`` or ``1_000`` give
    argparse's one-line error and exit 2."""
    from spear_datasets.schema import NumberError, parse_number

    def convert(text: str) -> Any:
        try:
            x = parse_number(text, what="value", integer=integer, minimum=minimum, above=above)
            if maximum is not None and x > maximum:
                raise NumberError(f"value must be at most {maximum:g}, got {text!r}")
            return x
        except NumberError as e:
            raise argparse.ArgumentTypeError(str(e).replace("value ", "", 1)) from None

    convert.__name__ = "integer" if integer else "number"  # argparse names the type in its message
    return convert


def print_failures(failures: Iterable[tuple[Any, str]], where: str, *, total: int | None = None,
                   what: str = "row", file=None) -> None:
    """The first :data:`SHOWN_FAILURES` failures ``(id, reason)`` on stderr, then where all of
    them are (``where``: a file path)."""
    file = file or sys.stderr
    failures = list(failures)
    n = len(failures) if total is None else total
    if not n:
        return
    for ident, reason in failures[:SHOWN_FAILURES]:
        print(f"  failed {what} {ident}: {reason}", file=file)
    more = f"{n - SHOWN_FAILURES} more; " if n > SHOWN_FAILURES else ""
    print(f"  {more}every failed {what} with its reason: {where}", file=file)


#: widest console line of a table (wider tables wrap into blocks of columns)
CONSOLE_WIDTH = 120


def run_exit_status(n_answered: int, n_failed: int) -> int:
    """Exit status of an inference command (infer, fdb infer, speechrole infer, dsuperb infer) whose run
    ended: 1 when rows failed and none was answered (nothing to score), else 0 (failures, if any, are
    listed). Whole-run problems exit 2 before this is asked (docs/running.md, "Exit status")."""
    return 1 if n_failed and not n_answered else 0


def shown_path(base: Any, *names: str) -> str:
    """A path for the console, joined and normalised by :mod:`pathlib` (``results/`` +
    ``summary.json`` -> ``results/summary.json``, never ``results//summary.json``); ``names``
    may hold a placeholder such as ``<run>``. THE way commands print the paths they wrote."""
    from pathlib import Path

    return str(Path(str(base), *names))


def text_table(head: Sequence[str], rows: Sequence[Sequence[str]], *, width: int = CONSOLE_WIDTH,
               gap: str = "  ") -> str:
    """Rows of strings as aligned columns (the first left-aligned, the others right-aligned) in
    lines of at most ``width`` characters: when the table is wider, the columns after the first
    are dealt, in order, into blocks that fit, and each block is printed under the first column
    again, blocks separated by a blank line. A single column wider than ``width`` gets a block
    of its own (the only case a line is longer)."""
    table = [list(head)] + [list(r) for r in rows]
    n = len(head)
    widths = [max(len(str(r[i])) for r in table) for i in range(n)]
    blocks: list[list[int]] = []
    used = widths[0]
    for i in range(1, n):
        if not blocks or used + len(gap) + widths[i] > width:
            blocks.append([])
            used = widths[0]
        blocks[-1].append(i)
        used += len(gap) + widths[i]
    out: list[str] = []
    for b, cols in enumerate(blocks or [[]]):
        if b:
            out.append("")
        for r in table:
            cells = [str(r[0]).ljust(widths[0])] + [str(r[i]).rjust(widths[i]) for i in cols]
            out.append(gap.join(cells).rstrip())
    return "\n".join(out)


def wrap(text: str, *, width: int = CONSOLE_WIDTH, indent: str = "    ") -> str:
    """One console message folded at ``width`` characters between words (continuation lines
    indented by ``indent``; a word longer than the line, e.g. a path, is never cut)."""
    import textwrap

    return textwrap.fill(text, width=width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or text


def numbered_notes(reasons: Sequence[str], prefix: str = "note") -> tuple[list[str], list[str]]:
    """Each distinct reason once: ``(refs, lines)`` where ``refs[i]`` is ``"(note k)"`` for
    ``reasons[i]`` and ``lines`` are ``"note k: reason"`` in order of first appearance."""
    order: list[str] = []
    refs = []
    for r in reasons:
        if r not in order:
            order.append(r)
        refs.append(f"({prefix} {order.index(r) + 1})")
    return refs, [f"{prefix} {i}: {r}" for i, r in enumerate(order, 1)]


#: the programs of this environment a printed command may start with (:func:`runnable` names them)
OWN_PROGRAMS = ("spearbench", "python")


def command(*parts: Any) -> str:
    """A command line to print: the parts joined by spaces, each shell-quoted where it needs it
    (a path with a space), so that it can be copied as it is and runs as printed: a first part
    ``"spearbench"`` or ``"python"`` is this environment's program (:func:`runnable`, e.g.
    ``.venv/bin/spearbench`` when the environment is not activated). THE way every ``next:``
    step and printed suggestion writes a command."""
    import shlex

    parts = tuple(parts)
    if parts and parts[0] in OWN_PROGRAMS:
        parts = (runnable(str(parts[0])), *parts[1:])
    return " ".join(shlex.quote(str(p)) for p in parts)


def runnable(name: str) -> str:
    """How to call program ``name`` (``"spearbench"``, ``"python"``) of THIS environment in a
    printed command: the bare name when ``PATH`` finds this environment's own (an activated
    virtual environment, an installed tool), else its path beside the running interpreter
    (``.venv/bin/spearbench``, ``.venv/bin/python``: the README's setup does not activate the
    environment). For ``python`` the running interpreter itself is the fallback."""
    import os
    import shutil
    from pathlib import Path

    here = Path(sys.executable).parent
    mine = sys.executable if name == "python" else str(here / name)
    found = shutil.which(name)
    if found and (os.path.realpath(found) == os.path.realpath(mine) or (name != "python" and not Path(mine).exists())):
        return name
    if Path(mine).exists():
        cwd = Path.cwd()
        try:  # a path under the current folder is shown relative to it (.venv/bin/spearbench)
            return str(Path(mine).relative_to(cwd)) if Path(mine).is_relative_to(cwd) else mine
        except ValueError:
            return mine
    return name


def resumed_line(n_done: int, n_total: int, where: Any, what: str = "rows") -> str | None:
    """``resumed: N of M rows already done (kept in WHERE; ...)`` when an earlier run had done
    ``n_done`` > 0 of the ``n_total``, else ``None``."""
    if not n_done:
        return None
    return (f"resumed: {n_done} of {n_total} {what} already done (kept in {shown_path(where)}; "
            "--overwrite starts again, --retry-failed reruns the failed ones)")


def next_steps(*steps: str | tuple[str, str], file=None) -> None:
    """What to do next, ending every command: each step a command, or ``(why, command)``,
    printed as ``next: why:`` and the command alone on the line below (so it can be copied)."""
    out = file or sys.stdout
    for step in steps:
        why, cmd = step if isinstance(step, tuple) else ("", step)
        if why:
            print(wrap(f"next: {why}:"), file=out)
            print(f"  {cmd}", file=out)
        else:
            print(f"next: {cmd}", file=out)


def null_reason(summary: Mapping[str, Any], key: str, dimension: str | None = None) -> str:
    """Why ``summary[key]`` is null (:func:`spear_metrics.core.summary.null_reason`)."""
    from spear_metrics.core.summary import null_reason as reason

    return reason(dict(summary), key, dimension)


def number_text(v: Any, digits: int = 3, *, missing: str = "-") -> str:
    """A value for the console: a float with ``digits`` decimals, a list item by item
    (``[0.1250, 0.5000]``), ``missing`` for ``None``, anything else as ``str`` (an int as is).
    THE console formatter of a bare value; with the reason a summary value is null:
    :func:`format_value`; with its interval: :func:`spear_metrics.core.summary.interval_text`."""
    if v is None:
        return missing
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(number_text(x, digits, missing=missing) for x in v) + "]"
    return str(v)


def format_value(summary: Mapping[str, Any], key: str, dimension: str | None = None, *, digits: int = 3) -> str:
    """A summary value for the console: ``-`` plus the reason in parentheses when it is null."""
    v = summary.get(key)
    if v is None:
        return f"- ({null_reason(summary, key, dimension)})"
    return number_text(v, digits)


def add_bootstrap_arguments(p, what: str, *, units: bool = False) -> None:
    """``--bootstrap N`` (resamples, >= 0, default 1000) and ``--seed`` (THE number parser); with
    ``units``, ``--bootstrap-unit conversation|row`` (SPEAR: what the intervals resample,
    :data:`spear_metrics.core.stats.BOOTSTRAP_UNITS`; docs/statistics.md)."""
    from spear_metrics.core.stats import BOOTSTRAP_UNITS, DEFAULT_BOOTSTRAP_UNIT, DEFAULT_RESAMPLES

    p.add_argument("--bootstrap", type=number(integer=True, minimum=0, maximum=MAX_RESAMPLES), default=DEFAULT_RESAMPLES,
                   metavar="N", help=f"bootstrap resamples of {what} (default {DEFAULT_RESAMPLES}; 0 = none; at most "
                                     f"{MAX_RESAMPLES})")
    p.add_argument("--seed", type=number(integer=True), default=0, help="bootstrap seed (same seed, same output)")
    if units:
        p.add_argument("--bootstrap-unit", choices=BOOTSTRAP_UNITS, default=DEFAULT_BOOTSTRAP_UNIT,
                       help="what the bootstrap resamples: conversation (default: every row of a drawn conversation "
                            "comes along, as SPEAR's rows are several questions of one conversation) or row")


def add_run_options(p, *, out: str | None = None, out_required: bool = True, retry_failed: str | None = None,
                    overwrite: str | None = None, progress: bool = True, bootstrap: str | None = None,
                    bootstrap_units: bool = False) -> None:
    """THE run options every command shares, each added when its text is given: ``--out``
    (``out``: its help; ``out_required``), ``--retry-failed`` (its help), ``--overwrite`` (its help:
    what this command may replace, ``docs/safety.md``), ``--no-progress`` (``progress``) and the
    bootstrap options (``bootstrap``: what the resamples make; ``bootstrap_units``: also
    ``--bootstrap-unit``, :func:`add_bootstrap_arguments`). The judge options are another helper's."""
    if out is not None:
        p.add_argument("--out", required=out_required, default=None, help=out)
    if retry_failed is not None:
        p.add_argument("--retry-failed", action="store_true", help=retry_failed)
    if overwrite is not None:
        p.add_argument("--overwrite", action="store_true", help=overwrite)
    if progress:
        p.add_argument("--no-progress", action="store_true", help="no progress bar (default: a bar on stderr)")
    if bootstrap is not None:
        add_bootstrap_arguments(p, bootstrap, units=bootstrap_units)


def add_process_options(p, *, processes_help: str | None = None, limit_help: str | None = None) -> None:
    """``--processes N|auto`` and ``--provider-limit NAME=N`` (repeatable) of the commands whose
    network sessions run through :mod:`spear_metrics.agents.processes` (docs/multiprocess.md);
    ``processes_help`` / ``limit_help``: a command's own help text for them."""

    def processes(text: str) -> int | str:
        from spear_metrics.agents.processes import ProcessesError, parse_processes

        try:
            return parse_processes(text)
        except ProcessesError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    p.add_argument("--processes", type=processes, default=1, metavar="N|auto",
                   help=processes_help or "network adapters: processes running the sessions, each with its own event "
                        "loop (default 1; this process stays the one writer of --out); auto: ceil(concurrency / 32), "
                        "at most the CPUs, one more while a process's loop lags (docs/multiprocess.md)")
    p.add_argument("--provider-limit", action="append", default=[], metavar="NAME=N",
                   help=limit_help or "at most N sessions of the adapter NAME (the --agent name) at once over every "
                        "process of this machine, other runs included (repeatable)")


def add_shard_option(p, *, units: str = "rows", merge: str = "writes the outputs") -> None:
    """``--shard K/N`` of the inference commands (:func:`spear_metrics.core.records.parse_shard`;
    which units a shard runs: :func:`spear_metrics.core.records.in_shard`; docs/multiprocess.md):
    ``units`` names the command's units, ``merge`` what the run without ``--shard`` does after."""

    def shard(text: str) -> tuple[int, int]:
        from spear_metrics.core.records import parse_shard

        try:
            return parse_shard(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    p.add_argument("--shard", type=shard, default=None, metavar="K/N",
                   help=f"run only shard K of N of the {units} (each {units[:-1]} in exactly one shard, by its id), beside "
                        "the other shards of the same run, writing the same folders (they may run at the same time, e.g. the tasks of "
                        f"a job array); when every shard has ended, the same command without --shard {merge}")


def add_price_table_option(p, *, what: str = "the tokens the service reported",
                           where: str = "run_info.json") -> None:
    """``--price-table FILE``, THE option of every command that reports token usage (``infer``,
    ``fdb infer``, ``speechrole infer``, ``dsuperb infer`` and the judge options of
    :mod:`spear_metrics.commands.judge_options`): a JSON table of prices per million tokens per
    model (format in docs/judges.md, read by :class:`spear_metrics.core.usage.PriceTable`);
    ``what`` is priced, printed at the end and recorded in ``where``. Read it with
    :func:`price_table_of`."""
    p.add_argument("--price-table", default=None, metavar="FILE",
                   help=f"JSON prices per million tokens per model (docs/judges.md): prints the cost of {what} "
                        f"and records it in {where}")


def price_table_of(args: argparse.Namespace) -> Any:
    """The :class:`~spear_metrics.core.usage.PriceTable` of ``--price-table`` (``None`` without
    one), read before any call is made.

    Raises:
        spear_metrics.core.usage.PriceTableError: an unusable table (one line: the file and what is wrong).
    """
    if not getattr(args, "price_table", None):
        return None
    from spear_metrics.core.usage import PriceTable

    return PriceTable(args.price_table)


def print_usage(summed: Mapping[str, Any] | None, *, prefix: str = "") -> None:
    """The tokens billed and, priced with ``--price-table``, their cost: one line
    (:func:`spear_metrics.core.usage.usage_line`) of a run's ``usage`` record
    (:meth:`spear_metrics.core.usage.UsageTally.to_json`); nothing when no call reported usage."""
    if not summed:
        return
    from spear_metrics.core.usage import usage_line

    print(wrap(prefix + usage_line(dict(summed))))


def add_deadline_option(p, what: str) -> None:
    """``--deadline-s S``, THE total time limit of a command's download (``data download``,
    ``data seamless --from-hub``, ``fdb score --release HUB_ID``): ``what`` it bounds (default
    :data:`spear_datasets.sources.download.DEFAULT_DEADLINE_S`); past it, one line and exit 2,
    what was received kept for a rerun to resume."""
    from spear_datasets.sources.download import DEFAULT_DEADLINE_S

    p.add_argument("--deadline-s", type=number(above=0), default=DEFAULT_DEADLINE_S, metavar="S",
                   help=f"total time limit of {what}, s (default {DEFAULT_DEADLINE_S:g}); past it the command stops "
                        "(exit 2) and a rerun resumes")


def overwrite_help(command_name: str) -> str:
    """``--overwrite``'s help for a command that owns its whole ``--out`` folder."""
    return (f"replace another run in --out: removes only the files runs of `{command_name}` recorded there "
            "(docs/safety.md); refused while a live process writes it")


def missing_package(prog: str, modules: Sequence[str], extra: str) -> bool:
    """``True`` (after one line on stderr naming the package and the extra that brings it) when
    one of ``modules`` cannot be imported."""
    import importlib

    for m in modules:
        try:
            importlib.import_module(m)
        except ModuleNotFoundError as e:
            print(f"spearbench {prog}: needs the Python package {e.name!r} (pip install 'spearbench[{extra}]')",
                  file=sys.stderr)
            return True
    return False
