"""One module per ``spearbench`` subcommand (see :mod:`spear_metrics.cli`), and what their
consoles share: ``KEY=VALUE`` options, number flags, failed rows and null values with reasons."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Iterable, Mapping, Sequence

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


def null_reason(summary: Mapping[str, Any], key: str, dimension: str | None = None) -> str:
    """Why ``summary[key]`` is null: its ``<key>_note`` (or ``<stem>_note``: ``WER_note`` for
    ``WER_%``), else the dimension's ``<dimension>_note``, else that no scored row had a value."""
    for k in (f"{key}_note", f"{key.split('_')[0]}_note", f"{dimension}_note" if dimension else None):
        if k and summary.get(k):
            return str(summary[k])
    return "no scored row has a value"


def format_value(summary: Mapping[str, Any], key: str, dimension: str | None = None, *, digits: int = 3) -> str:
    """A summary value for the console: ``-`` plus the reason in parentheses when it is null."""
    v = summary.get(key)
    if v is None:
        return f"- ({null_reason(summary, key, dimension)})"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def add_bootstrap_arguments(p, what: str) -> None:
    """``--bootstrap N`` (resamples, >= 0, default 1000) and ``--seed`` (THE number parser)."""
    p.add_argument("--bootstrap", type=number(integer=True, minimum=0, maximum=MAX_RESAMPLES), default=1000, metavar="N",
                   help=f"bootstrap resamples of {what} (default 1000; 0 = none; at most {MAX_RESAMPLES})")
    p.add_argument("--seed", type=number(integer=True), default=0, help="bootstrap seed (same seed, same output)")


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
