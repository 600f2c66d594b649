"""Checking a scored run before it is published or shown: its files, its columns, its rows and
its summary against its rows.

A run (``summary.json`` + ``per_sample.jsonl``, or a results dataset's ``summary.json`` + parquet
rows) is accepted only when

- every file parses, every required summary key and per-sample column is there, and each metric
  and metric version is one this code knows (:func:`spear_metrics.core.columns.known_versions`);
- each per-sample column holds one kind of value (numbers, booleans, text, or lists of numbers;
  null anywhere), and a column that is a declared key (:class:`MetricKey`) holds numbers: notes
  such as ``UTMOS_note`` are text and welcome;
- the rows are exactly ``0..n-1`` (integers, each once) with ``n = n_samples``, and
  ``n_scored`` / ``n_failed`` count the ``ok`` / ``failed`` rows;
- every summary value of a declared key equals what the metric's own
  :meth:`~spear_metrics.core.dimension.Dimension.aggregate` gives on the ``ok`` rows
  (:func:`check_summary_values`): an edited ``summary.json`` or an edited row is refused.

Every refusal is a :class:`ResultsError` with a one-line message naming the place (``where``)
and the first problem.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

#: The protocol every SPEARBench results dataset of this version is scored on.
PROTOCOL = "seamless_2t_2s_questions"
#: Accepted inference modes (as in the published leaderboard; ``Human`` only for the human row).
INFERENCE_MODES: tuple[str, ...] = ("Full-duplex", "Half-duplex", "Non-streaming")
#: Splits of the protocol.
SPLITS: tuple[str, ...] = ("test", "dev")
#: Per-sample columns every ``per_sample.jsonl`` row carries (``SampleResult.to_json``).
BASE_SAMPLE_COLUMNS: tuple[str, ...] = ("row", "audio_path", "answer_audio_path", "status", "error")
#: Summary keys every ``summary.json`` carries (``build_summary``).
REQUIRED_SUMMARY_KEYS: tuple[str, ...] = ("n_samples", "n_scored", "n_failed", "metrics", "metric_versions")
#: SPEAR metadata columns copied next to the scores when ``--metadata`` is given (times in s).
METADATA_COLUMNS: tuple[str, ...] = (
    "context_end_time", "question_end_time", "answer_duration", "speakers", "conversation_id",
    "transcript_question", "transcript_answer", "answer_start_time",
)
METADATA_FLOATS = frozenset({"context_end_time", "question_end_time", "answer_duration", "answer_start_time"})
#: Per-sample columns that hold text (or null) whatever the run.
TEXT_SAMPLE_COLUMNS: frozenset[str] = frozenset(
    {"audio_path", "answer_audio_path", "status", "error", "speakers", "conversation_id",
     "transcript_question", "transcript_answer", "subset", "model"}
)
#: The two row statuses (``SampleResult.status``).
STATUSES = ("ok", "failed")
#: Tolerance when a summary value is compared with its recomputation (floating-point sums in
#: another order; an edit of a published figure is far larger).
REL_TOL, ABS_TOL = 1e-6, 1e-9


#: the longest :class:`ResultsError` message (characters); longer ones are cut with "…"
MAX_MESSAGE_CHARS = 2000


class ResultsError(ValueError):
    """A results folder or results dataset that cannot be published or shown. One-line message
    (whitespace collapsed), cut at :data:`MAX_MESSAGE_CHARS`: a refusal that quotes a value of the
    file (a metric version, a summary value, a column name) never echoes megabytes of it."""

    def __init__(self, message: str = ""):
        text = " ".join(str(message).split())
        super().__init__(text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "…")


def benchmark_checks(summary: Any):
    """The results-checks module of the benchmark whose run wrote ``summary``
    (:func:`spear_metrics.core.registry.benchmark_of_summary`, its descriptor's ``results``);
    ``None`` for a SPEAR run (this module's own checks).

    Raises:
        ResultsError: the summary names a benchmark that is not registered, or one whose runs
            cannot be published (it declares no results checks).
    """
    import sys

    from spear_metrics.core.registry import UnknownBenchmarkError, benchmark_of_summary

    try:
        bench = benchmark_of_summary(summary)
    except UnknownBenchmarkError as e:
        raise ResultsError(f"results: {e}") from None
    module = bench.results_module()
    if module is None:
        raise ResultsError(f"results: {bench.title} runs cannot be published as results datasets "
                           "(its benchmark declares no results checks)")
    return None if module is sys.modules[__name__] else module


def is_number(v: Any) -> bool:
    """A JSON number (not a bool) that is finite as a float (an integer of 400 digits is not)."""
    from spear_metrics.core.stats import as_number

    return isinstance(v, (int, float)) and not isinstance(v, bool) and as_number(v) is not None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def value_kind(v: Any) -> str | None:
    """The kind of one per-sample value: ``None`` (null), ``"bool"``, ``"number"``, ``"text"``,
    ``"numbers"`` (a list of numbers/nulls) or ``"segments"`` (a list of ``[start, end]`` pairs
    of numbers: the VAD evidence ``*_segments_s``), ``"empty"`` (an empty list, which fits a
    column of either list kind); ``"invalid"`` for anything else (NaN, inf, objects, other
    nested lists)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number" if is_number(v) else "invalid"
    if isinstance(v, str):
        return "text"
    if isinstance(v, (list, tuple)) and not v:
        return "empty"
    if isinstance(v, (list, tuple)) and all(x is None or is_number(x) for x in v):
        return "numbers"
    if isinstance(v, (list, tuple)) and all(isinstance(x, (list, tuple)) and len(x) == 2 and all(is_number(y) for y in x)
                                            for x in v):
        return "segments"
    return "invalid"


def is_count(v: Any) -> bool:
    """Whether ``v`` is a count: a non-negative integer (not a bool)."""
    return _is_int(v) and v >= 0


#: the largest ``summary.json`` read (bytes; a benchmark's is well under 1 MB)
MAX_SUMMARY_BYTES = 64 * 2 ** 20


def read_summary_file(path: str | os.PathLike, *, where: str = "results") -> Any:
    """The parsed ``summary.json`` at ``path``, at most :data:`MAX_SUMMARY_BYTES` read
    (:func:`spear_datasets.files.read_json`): a huge file, a pipe or JSON nested past the parser's
    depth is refused in one line, never a crash or a full memory.

    Raises:
        ResultsError: ``<where>: summary.json is not valid JSON: <why>`` (unreadable, too large,
            not UTF-8 JSON)."""
    from spear_datasets.files import read_json

    try:
        return read_json(path, MAX_SUMMARY_BYTES)
    except (OSError, ValueError) as e:
        raise ResultsError(f"{where}: summary.json is not valid JSON: {' '.join(str(e).split())[:300]}") from None


def check_counts(summary: dict[str, Any], *, where: str = "results", total: bool = True) -> None:
    """The row counts of a ``summary.json``: ``n_samples``, ``n_scored``, ``n_failed`` each a count
    (:func:`is_count`) and, with ``total``, ``n_scored + n_failed == n_samples``.

    Raises:
        ResultsError: one line naming the first count that is not one (or the sum that differs)."""
    for k in ("n_samples", "n_scored", "n_failed"):
        if not is_count(summary.get(k)):
            raise ResultsError(f"{where}: summary.json {k!r} is not a count (a non-negative integer): "
                               f"{short_repr(summary.get(k))}")
    if total and summary["n_scored"] + summary["n_failed"] != summary["n_samples"]:
        raise ResultsError(f"{where}: summary.json n_scored + n_failed != n_samples")


def short_repr(v: Any) -> str:
    """``repr(v)`` cut to 60 characters (``...`` at the end when cut), as refusals quote a value."""
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def check_run_head(summary: Any, *, name: str, title: str, required: Sequence[str], known_versions: Iterable[str],
                   where: str = "results") -> None:
    """The checks every benchmark's ``summary.json`` shares (a benchmark's ``validate_summary``
    starts here): ``benchmark == name`` and ``metrics == [name]``, the ``required`` keys, the
    counts ``n_samples = n_scored + n_failed`` (non-negative integers), ``metric_versions[name]``
    one of ``known_versions``.

    Raises:
        ResultsError: one line naming the first problem.
    """
    if not isinstance(summary, dict) or summary.get("metrics") != [name] or summary.get("benchmark") != name:
        raise ResultsError(f"{where}: not a {title} summary (benchmark and metrics [{name!r}])")
    for k in required:
        if k not in summary:
            raise ResultsError(f"{where}: summary.json is missing column {k!r}")
    check_counts(summary, where=where)
    vers = summary.get("metric_versions")
    ver = vers.get(name) if isinstance(vers, dict) else None
    known = sorted(set(known_versions))
    if str(ver) not in known:
        raise ResultsError(f"{where}: unknown metric version {name}={ver!r} (known: {', '.join(known)})")


def interval_base(key: str, summary: dict[str, Any]) -> str | None:
    """The aggregate key that ``key`` gives the interval (``<base>_ci95``) or unit count
    (``<base>_n``) of, when ``<base>`` is in the summary; else ``None``."""
    for suffix in ("_ci95", "_n"):
        if key.endswith(suffix) and key[: -len(suffix)] in summary:
            return key[: -len(suffix)]
    return None


def check_key_values(summary: dict[str, Any], keys: Sequence[str], *, where: str = "results") -> None:
    """A benchmark summary's keys ``keys``: each a number or null, its ``<key>_ci95`` an interval
    ``[lo, hi]`` or null, its ``<key>_n`` a count (the benchmarks' results checks share this).

    Raises:
        ResultsError: one line naming the first key that is not so.
    """
    for key, v in summary.items():
        base = interval_base(key, summary)
        if base is not None and base in keys:
            if key.endswith("_ci95") and v is not None and not (
                    isinstance(v, list) and len(v) == 2 and all(is_number(x) for x in v) and v[0] <= v[1]):
                raise ResultsError(f"{where}: summary.json {key!r} is not an interval [lo, hi] or null: {short_repr(v)}")
            if key.endswith("_n") and not (_is_int(v) and v >= 0):
                raise ResultsError(f"{where}: summary.json {key!r} is not a count (a non-negative integer): {short_repr(v)}")
        elif key in keys and v is not None and not is_number(v):
            raise ResultsError(f"{where}: summary.json {key!r} is not numeric: {short_repr(v)}")


def check_benchmark_rows(summary: dict[str, Any], rows: Sequence[dict[str, Any]], keys: Sequence[str], *,
                         where: str = "results", row_check: Any = None) -> None:
    """A benchmark's per-sample rows: columns ``row``/``id``/``status``, ``row`` exactly
    ``0..n-1``, ``status`` ``ok``/``failed``, each of ``keys`` a number or null,
    ``row_check(row, rid)`` (optional, raises :class:`ResultsError`), and the summary's counts.

    Raises:
        ResultsError: one line naming the first problem.
    """
    if not rows:
        raise ResultsError(f"{where}: per_sample.jsonl has no rows")
    seen: set[int] = set()
    n_ok = 0
    for i, r in enumerate(rows):
        for c in ("row", "id", "status"):
            if c not in r:
                raise ResultsError(f"{where}: per_sample line {i + 1} is missing column {c!r}")
        rid = r["row"]
        if not (_is_int(rid) and rid >= 0) or rid in seen:
            raise ResultsError(f"{where}: per_sample line {i + 1}: row id {short_repr(rid)} is not a new integer >= 0")
        seen.add(rid)
        if r["status"] not in STATUSES:
            raise ResultsError(f"{where}: row {rid} status is not 'ok' or 'failed': {short_repr(r['status'])}")
        for k in keys:
            v = r.get(k)
            if v is not None and not is_number(v):
                raise ResultsError(f"{where}: row {rid} value {k!r} is not numeric: {short_repr(v)}")
        if row_check is not None:
            row_check(r, rid)
        n_ok += r["status"] == "ok"
    n = len(rows)
    if summary.get("n_samples") != n or seen != set(range(n)):
        raise ResultsError(f"{where}: rows must be 0..{n - 1}, each once, and n_samples {summary.get('n_samples')} = {n}")
    if summary.get("n_scored") != n_ok or summary.get("n_failed") != n - n_ok:
        raise ResultsError(f"{where}: summary.json counts n_scored={summary.get('n_scored')}, n_failed="
                           f"{summary.get('n_failed')} but the rows hold {n_ok} ok and {n - n_ok} failed rows")


def check_recomputed(summary: dict[str, Any], got: dict[str, Any], keys: Sequence[str], *,
                     where: str = "results") -> None:
    """Each of ``keys`` and its ``<key>_n`` that the summary holds equals its recomputation
    ``got`` (rel 1e-6, abs 1e-9; null only equals null).

    Raises:
        ResultsError: the first value that differs.
    """
    for k in keys:
        for name in (k, f"{k}_n"):
            if name in summary and not same_value(summary.get(name), got.get(name)):
                raise ResultsError(f"{where}: summary.json {name!r} is {summary.get(name)!r} but its rows give "
                                   f"{got.get(name)!r} (edited results? a summary must be the one its rows were "
                                   "scored into)")


def validate_summary(summary: Any, *, where: str = "results") -> None:
    """Check ``summary.json`` alone: required keys, counts, metrics, versions, the published keys
    of each scored metric (present), every declared key (number or null), and no declared key
    of a metric the run did not score.

    Raises:
        ResultsError: one line naming the first problem.
    """
    from spear_metrics.core.columns import columns, known_versions
    from spear_metrics.core.registry import DIMENSIONS

    if not isinstance(summary, dict):
        raise ResultsError(f"{where}: summary.json is not a JSON object")
    if (bench := benchmark_checks(summary)) is not None:
        return bench.validate_summary(summary, where=where)
    for k in REQUIRED_SUMMARY_KEYS:
        if k not in summary:
            raise ResultsError(f"{where}: summary.json is missing column {k!r}")
    check_counts(summary, where=where, total=False)
    metrics, versions = summary["metrics"], summary["metric_versions"]
    if not isinstance(metrics, list) or not isinstance(versions, dict):
        raise ResultsError(f"{where}: summary.json 'metrics' must be a list and 'metric_versions' an object")
    for name in metrics:
        if not isinstance(name, str) or name not in DIMENSIONS:
            raise ResultsError(f"{where}: unknown metric {short_repr(name)} (known: {', '.join(sorted(DIMENSIONS))})")
        if name not in versions:
            raise ResultsError(f"{where}: summary.json has no metric version for {name!r}")
        ok = known_versions(name)
        if str(versions[name]) not in ok:
            raise ResultsError(f"{where}: unknown metric version {name}={versions[name]!r} (known: {', '.join(sorted(ok))})")
    _validate_options(summary.get("options"), metrics, where)
    for c in columns(published_only=True):  # project keys depend on options (e.g. which MOS backends ran)
        if c.dimension in metrics and c.name not in summary:
            raise ResultsError(f"{where}: summary.json is missing column {c.name!r} (metric {c.dimension!r})")
    for key, v in summary.items():
        base = interval_base(key, summary)
        if base is not None:  # <key>_ci95: [lo, hi] or null; <key>_n: a count
            if key.endswith("_ci95") and v is not None and not (
                    isinstance(v, list) and len(v) == 2 and all(is_number(x) for x in v) and v[0] <= v[1]):
                raise ResultsError(f"{where}: summary.json {key!r} is not an interval [lo, hi] or null: {short_repr(v)}")
            if key.endswith("_n") and not (_is_int(v) and v >= 0):
                raise ResultsError(f"{where}: summary.json {key!r} is not a count (a non-negative integer): {short_repr(v)}")
            continue
        col = next((c for c in columns() if c.key.matches(key)), None)
        if col is None:
            continue
        if col.dimension not in metrics:
            raise ResultsError(f"{where}: summary.json has {key!r} but the run did not score metric {col.dimension!r}")
        if v is not None and not is_number(v):
            raise ResultsError(f"{where}: summary.json {key!r} is not numeric: {short_repr(v)}")


def _validate_options(options: Any, metrics: Sequence[str], where: str) -> None:
    """``options`` of ``summary.json`` (per metric, as ``score`` records them), when present: each
    metric's options must be ones its option schema declares, with values it accepts (what the
    pushed card shows as "the options the run was scored with")."""
    from spear_metrics.core.options import OptionError, validate_options
    from spear_metrics.core.registry import dimension_class

    if options is None:
        return
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise ResultsError(f"{where}: summary.json 'options' must be an object of per-metric objects")
    for name, given in options.items():
        if name not in metrics:
            raise ResultsError(f"{where}: summary.json has options for {short_repr(name)}, a metric the run did not score")
        try:
            validate_options(dimension_class(name).option_schema, given, name)
        except OptionError as e:
            raise ResultsError(f"{where}: summary.json options: {e}") from None


def validate_rows(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results") -> None:
    """Check the per-sample rows against themselves and the summary's counts.

    Rows may come in any order; their ``row`` ids must be exactly ``0..n_samples-1``.

    Raises:
        ResultsError: a missing column, a bad ``row`` id (not an integer, negative, repeated,
            missing), a status other than ``ok``/``failed``, counts that do not match the rows,
            a value of another kind than the rest of its column, or a non-number under a key.
    """
    from spear_metrics.core.columns import find_column

    if (bench := benchmark_checks(summary)) is not None:
        return bench.validate_rows(summary, rows, where=where)
    if not rows:
        raise ResultsError(f"{where}: per_sample.jsonl has no rows")
    metrics = tuple(summary.get("metrics") or ())
    seen: dict[int, int] = {}
    kinds: dict[str, tuple[str, int]] = {}
    n_ok = 0
    for i, r in enumerate(rows):
        line = f"per_sample.jsonl line {i + 1}"
        for c in BASE_SAMPLE_COLUMNS:
            if c not in r:
                raise ResultsError(f"{where}: {line} is missing column {c!r}")
        rid = r["row"]
        if not _is_int(rid) or rid < 0:
            raise ResultsError(f"{where}: {line} 'row' is not a row id (an integer >= 0): {short_repr(rid)}")
        if rid in seen:
            raise ResultsError(f"{where}: {line} repeats row {rid} (also line {seen[rid] + 1})")
        seen[rid] = i
        if r["status"] not in STATUSES:
            raise ResultsError(f"{where}: row {rid} status is not 'ok' or 'failed': {short_repr(r['status'])}")
        n_ok += r["status"] == "ok"
        for k, v in r.items():
            if k == "row" or k.endswith("_audio") or k == "timings":
                continue
            kind = value_kind(v)
            if kind is None:
                continue
            if kind == "empty" and k not in TEXT_SAMPLE_COLUMNS and k not in METADATA_FLOATS \
                    and find_column(k, metrics) is None:
                continue  # an empty list fits a column of lists of either kind
            if kind == "invalid":
                raise ResultsError(f"{where}: row {rid} value {k!r} is not a number, text, boolean or list of numbers: {short_repr(v)}")
            if k in TEXT_SAMPLE_COLUMNS and kind != "text":
                raise ResultsError(f"{where}: row {rid} value {k!r} is not text: {short_repr(v)}")
            if (k in METADATA_FLOATS or find_column(k, metrics) is not None) and kind != "number":
                raise ResultsError(f"{where}: row {rid} value {k!r} is not numeric: {short_repr(v)}")
            if k not in kinds:
                kinds[k] = (kind, rid)
            elif kinds[k][0] != kind:
                raise ResultsError(f"{where}: row {rid} value {k!r} is {kind} ({short_repr(v)}) where row "
                                   f"{kinds[k][1]} holds {kinds[k][0]}")
    n = len(rows)
    if summary.get("n_samples") != n:
        raise ResultsError(f"{where}: summary.json n_samples is {summary.get('n_samples')} but per_sample.jsonl has {n} rows")
    missing = next((i for i in range(n) if i not in seen), None)
    if missing is not None:
        raise ResultsError(f"{where}: per_sample.jsonl has no row {missing} (rows must be 0..{n - 1}, each once)")
    if summary.get("n_scored") != n_ok or summary.get("n_failed") != n - n_ok:
        raise ResultsError(f"{where}: summary.json counts n_scored={summary.get('n_scored')}, n_failed="
                           f"{summary.get('n_failed')} but per_sample.jsonl has {n_ok} ok and {n - n_ok} failed rows")


def _spear_rows(rows: Sequence[dict[str, Any]], variant: str):
    """SpearRows for a dimension's ``aggregate``: from the rows' metadata columns (``"meta"``),
    or two stand-ins that differ in every metadata field (``"a"``/``"b"``) to tell whether an
    aggregate depends on metadata the rows do not carry."""
    from spear_datasets.schema import SpearRow

    out = []
    for i, r in enumerate(rows):
        if variant == "meta":
            out.append(SpearRow(
                audio_path=str(r.get("audio_path") or ""), answer_audio_path=r.get("answer_audio_path"),
                context_end_time=float(r.get("context_end_time") or 0.0),
                question_end_time=float(r.get("question_end_time") or 0.0),
                answer_duration=r.get("answer_duration"), speakers=r.get("speakers") or "",
                conversation_id=r.get("conversation_id") or "", transcript_question=r.get("transcript_question") or "",
                transcript_answer=r.get("transcript_answer") or "", answer_start_time=r.get("answer_start_time")))
        elif variant == "a":
            out.append(SpearRow(audio_path=str(r.get("audio_path") or ""), answer_audio_path=r.get("answer_audio_path"),
                                context_end_time=0.0, question_end_time=0.0))
        else:
            out.append(SpearRow(audio_path=str(r.get("audio_path") or ""), answer_audio_path=r.get("answer_audio_path"),
                                context_end_time=float(i + 1), question_end_time=float(i + 2), answer_duration=float(i + 1),
                                speakers=f"Q{i}|A{i}", conversation_id=f"c{i}", transcript_question=f"Q{i}: q",
                                transcript_answer=f"A{i}: a", answer_start_time=float(i)))
    return out


def _dimension_for_check(name: str, summary: dict[str, Any], use_options: bool):
    """The dimension object whose ``aggregate`` recomputes the summary. With ``use_options``,
    the options recorded in ``summary.json`` (``options``: per metric or shared) when the
    dimension accepts them; otherwise (and on a refusal) its defaults: the aggregates of the
    declared keys do not depend on options, only which per-backend keys exist does."""
    from spear_metrics.core.registry import dimension_class

    cls = dimension_class(name)
    opts = summary.get("options") if use_options else None
    if isinstance(opts, dict):
        per = opts.get(name) if isinstance(opts.get(name), dict) else (
            None if any(k in opts for k in summary.get("metrics", ())) else opts)
        if per:
            try:
                return cls(**per)
            except Exception:
                pass
    return cls()


def same_value(a: Any, b: Any) -> bool:
    """Whether a recorded value and its recomputation agree, as every results check compares
    them: both missing (``None`` or NaN), numbers equal within :data:`REL_TOL` / :data:`ABS_TOL`,
    anything else equal (``==``)."""
    def missing(v: Any) -> bool:
        return v is None or (isinstance(v, float) and math.isnan(v))

    if missing(a) or missing(b):
        return missing(a) and missing(b)
    if is_number(a) and is_number(b):
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return a == b


def check_summary_values(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results",
                         use_options: bool = False) -> None:
    """Recompute each scored metric's summary from the ``ok`` rows (row order) with the metric's
    own :meth:`Dimension.aggregate` and compare every declared key the summary holds.

    The rows' metadata columns (``transcript_question``...) are used when present; an
    aggregate that depends on metadata the rows do not carry cannot be checked and is refused
    (push with ``--metadata``).

    Args:
        use_options: build the dimensions with the options recorded in ``summary.json`` (on the
            machine that scored the run; never in the Space, where an option could name a server
            file).

    Raises:
        ResultsError: a value that differs from its recomputation (``rel 1e-6``), or one that
            cannot be recomputed.
    """
    from spear_metrics.core.columns import find_column

    if (bench := benchmark_checks(summary)) is not None:
        return bench.check_summary_values(summary, rows, where=where, use_options=use_options)
    ok = sorted((r for r in rows if r.get("status") == "ok"), key=lambda r: r["row"])
    has_meta = bool(ok) and all("transcript_question" in r for r in ok)
    for name in summary.get("metrics", ()):
        dim = _dimension_for_check(name, summary, use_options)
        try:
            if has_meta:
                got, unsure = dim.aggregate(_spear_rows(ok, "meta"), ok), set()
            else:
                got = dim.aggregate(_spear_rows(ok, "a"), ok)
                other = dim.aggregate(_spear_rows(ok, "b"), ok)
                unsure = {k for k in got if find_column(k, (name,)) and not same_value(got[k], other.get(k))}
        except Exception as e:  # values of a kind the aggregate cannot use
            raise ResultsError(f"{where}: the per-sample values of metric {name!r} cannot be aggregated: "
                               f"{' '.join(str(e).split()) or type(e).__name__}") from None
        for k, v in got.items():
            if k not in summary or find_column(k, (name,)) is None:
                continue
            if k in unsure:
                raise ResultsError(f"{where}: summary.json {k!r} cannot be checked against the rows without the "
                                   "metadata it is computed from: give --metadata (the CSV the run scored)")
            if not same_value(summary[k], v):
                raise ResultsError(f"{where}: summary.json {k!r} is {summary[k]!r} but its rows give {v!r} "
                                   "(edited results? a summary must be the one its rows were scored into)")


def validate_run(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results",
                 use_options: bool = False) -> None:
    """Every check of this module, in order: :func:`validate_summary`, :func:`validate_rows`,
    :func:`check_summary_values`.

    Raises:
        ResultsError: one line naming ``where`` and the first problem.
    """
    validate_summary(summary, where=where)
    validate_rows(summary, rows, where=where)
    check_summary_values(summary, rows, where=where, use_options=use_options)


def read_run_files(results_dir: str | os.PathLike, *, where: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Parse ``RESULTS/summary.json`` and ``RESULTS/per_sample.jsonl`` (no checks beyond JSON;
    ``timings`` dropped).

    Raises:
        ResultsError: a file is missing or is not JSON (objects, one per line).
    """
    d = Path(results_dir)
    where = where or str(d)
    sp, pp = d / "summary.json", d / "per_sample.jsonl"
    for p in (sp, pp):
        if not p.is_file():
            raise ResultsError(f"{where}: {p.name} not found (is this a scored RESULTS folder?)")
    summary = read_summary_file(sp, where=where)
    rows = []
    try:
        text = pp.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ResultsError(f"{where}: per_sample.jsonl cannot be read: {' '.join(str(e).split())}") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:  # RecursionError: a line nested past the parser's depth
            raise ResultsError(f"{where}: per_sample.jsonl line {n} is not valid JSON: "
                               f"{' '.join(str(e).split())[:200] or type(e).__name__}") from None
        if not isinstance(obj, dict):
            raise ResultsError(f"{where}: per_sample.jsonl line {n} is not a JSON object")
        obj.pop("timings", None)
        rows.append(obj)
    return summary, rows


def read_run(results_dir: str | os.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read a scored ``RESULTS/`` folder and check its summary and rows
    (:func:`validate_summary`, :func:`validate_rows`); rows returned in row order. The summary
    is compared with its recomputation (:func:`check_summary_values`) once the metadata
    columns are merged in (:func:`spear_metrics.results.write.write_results_dataset`).

    Raises:
        ResultsError: a file is missing or unparsable, or a check refuses it.
    """
    summary, rows = read_run_files(results_dir)
    validate_summary(summary, where=str(results_dir))
    validate_rows(summary, rows, where=str(results_dir))
    rows.sort(key=lambda r: r["row"])
    return summary, rows
