"""SPEAR scoring: metadata rows scored by the dimensions -> per-sample results -> summary, on
THE resumable loop (:func:`spear_metrics.core.runner.run_resumable`).

Contract (``spearbench score``):

- a row is its position in the CSV; every row gets exactly one :class:`SampleResult`;
- a bad row (unsafe path, impossible times, unreadable audio, duplicate ``audio_path``) is a
  failed row with its reason; every other row is scored;
- results are appended to ``OUT/.work/rank-<r>.jsonl`` after each batch (flushed + fsynced), so
  a killed run resumes where it stopped and never scores a row twice;
- under ``accelerate launch`` the pending rows are dealt round-robin (``rows[rank::world]``:
  no row repeated or dropped whatever the remainder), results are gathered by row id, and the
  main process writes ``per_sample.jsonl`` (row order) and ``summary.json``.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from spear_datasets.audio import AudioError, audio_info, input_clip_info
from spear_datasets.files import atomic_path
from spear_datasets.ownership import check_out_folder
from spear_datasets.schema import (
    RowError,
    SpearRow,
    check_times_against_clip,
    parse_row,
    read_metadata,
    resolve_path,
)
from spear_metrics.core.dimension import Dimension, Sample
from spear_metrics.core.models import ModelUnavailableError
from spear_metrics.core.records import SampleResult, claim_out, one_line, read_jsonl, write_json_atomic, write_jsonl_atomic
from spear_metrics.core.registry import load_dimensions, parse_metrics
from spear_metrics.core.runner import WORK_DIR, RunError, run_distributed_state, run_resumable
from spear_metrics.core.stats import BOOTSTRAP_UNITS, CONFIDENCE, DEFAULT_RESAMPLES
from spear_metrics.core.summary import build_summary, write_summary


@dataclass
class Prepared:
    """Rows of a metadata table, typed and checked: valid samples and already-failed rows."""

    rows: dict[int, SpearRow] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    failed: dict[int, SampleResult] = field(default_factory=dict)
    n_rows: int = 0


def prepare_rows(raw_rows: Sequence[dict[str, Any]], base_dir: str | os.PathLike) -> Prepared:
    """Type, resolve and de-duplicate raw metadata rows (no audio is decoded here).

    Relative paths resolve as :func:`spear_datasets.schema.resolve_path` says, against
    ``base_dir`` (the CSV's folder). A repeated input clip keeps its first row; the others are
    failed with ``"duplicate of row N"``.
    """
    prep = Prepared(n_rows=len(raw_rows))
    first_by_input: dict[str, int] = {}
    for i, raw in enumerate(raw_rows):
        audio = str(raw.get("audio_path") or "")
        answer = str(raw.get("answer_audio_path") or "") or None
        try:
            row = parse_row(raw, require_answer=True)
            prep.rows[i] = row
            a_path = resolve_path(row.audio_path, base_dir)
            b_path = resolve_path(row.answer_audio_path or "", base_dir)
            key = str(a_path)
            if key in first_by_input:
                raise RowError(f"duplicate of row {first_by_input[key]} (same audio_path)")
            first_by_input[key] = i
            prep.samples.append(Sample(row=i, meta=row, audio_path=a_path, answer_audio_path=b_path))
        except RowError as e:
            prep.failed[i] = SampleResult(row=i, audio_path=audio, answer_audio_path=answer).fail(str(e))
    return prep


def _check_sample(sample: Sample) -> None:
    """Checks that need the files' headers only (no decoding): both headers valid
    (:func:`spear_datasets.audio.audio_info`), the input clip stereo
    (:func:`spear_datasets.audio.input_clip_info`), the question inside the input clip."""
    check_times_against_clip(sample.meta, input_clip_info(sample.audio_path).duration)
    audio_info(sample.answer_audio_path)


def score_samples(
    dims: Sequence[Dimension],
    samples: Sequence[Sample],
    *,
    batch_size: int = 16,
    on_batch: Callable[[list[SampleResult]], None] | None = None,
    progress: Any = None,
) -> list[SampleResult]:
    """Score ``samples`` with every dimension, batch by batch.

    A sample that fails its file checks or any dimension becomes a failed result (reason:
    ``"<dimension>: <error>"``) and is not passed to the remaining dimensions; failed rows
    enter no mean and keep no values (not even those of the dimensions that scored them before).
    ``on_batch`` receives each finished batch (the runner's log).
    """
    results: list[SampleResult] = []
    for start in range(0, len(samples), max(1, batch_size)):
        batch = list(samples[start : start + batch_size])
        recs = {s.row: SampleResult(row=s.row, audio_path=s.meta.audio_path, answer_audio_path=s.meta.answer_audio_path) for s in batch}
        live = []
        for s in batch:
            try:
                _check_sample(s)
                live.append(s)
            except (RowError, AudioError) as e:
                recs[s.row].fail(str(e))
        for group in _dimension_groups(dims):
            if not live:
                break
            with _one_op_thread(light=not any(d.model_based for d in group)):
                if len(group) == 1:
                    scored = [_score_dimension(group[0], live)]
                else:  # light dimensions of one batch side by side (VAD and decoding release the GIL)
                    with ThreadPoolExecutor(len(group)) as pool:
                        scored = list(pool.map(lambda d: _score_dimension(d, live), group))
            for dim, (outs, dt) in zip(group, scored):
                for s, out in zip(live, outs):
                    rec = recs[s.row]
                    rec.timings[dim.name] = dt
                    if isinstance(out, BaseException):
                        rec.fail(f"{dim.name}: {one_line(out)}")
                        # the values of dimensions that scored it go too: a failed row's line must
                        # not read as partly scored (it enters no mean either way)
                        rec.values.clear()
                    elif rec.ok:
                        rec.values.update(out)
            live = [s for s in live if recs[s.row].ok]  # a failed row enters no mean: stop spending on it
        for s in batch:
            s.release()
        _return_freed_memory()
        done = [recs[s.row] for s in batch]
        results.extend(done)
        if on_batch:
            on_batch(done)
        if progress is not None:
            progress.update(len(batch))
    return results


@contextlib.contextmanager
def _one_op_thread(*, light: bool):
    """Light dimensions spread a batch's samples over threads themselves (``threaded_samples``,
    :func:`spear_metrics.core.dimension.cpu_share` threads): their torch ops (batched VAD,
    resampling) then run on one intra-op thread each, instead of every sample thread starting
    a pool of its own on the same cores (measured on 272 rows, 2 cores: 14.1 s -> 11.5 s of
    scoring, 1.2x). Model-based groups keep torch's thread count (their framework uses the cores).
    The count is restored afterwards; torch is not imported for this."""
    from spear_metrics.core.batching import one_torch_thread

    with one_torch_thread() if light else contextlib.nullcontext():
        yield


def _return_freed_memory() -> None:
    """Hand the pages of freed audio back to the OS (glibc ``malloc_trim(0)``; a no-op elsewhere).

    Without it the peak RSS of a run grew with its rows (+180 MB from 340 to 2,725 rows here)
    although the live Python/numpy memory stayed flat: glibc raises its mmap threshold after
    large frees, so later audio buffers come from heaps that fragment and keep their pages.
    """
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim  # noqa: B018 (glibc only)
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC = None


def _read_ahead(batch: Sequence[Sample]) -> None:
    """Decode the files of ``batch`` (rows whose file checks fail are left to the scoring loop)."""
    for s in batch:
        try:
            _check_sample(s)
        except Exception:
            continue
        s.prefetch()


def _dimension_groups(dims: Sequence[Dimension]) -> list[list[Dimension]]:
    """Consecutive light (not model-based) dimensions form one group scored concurrently;
    each model-based dimension is a group of its own (its framework uses the cores itself)."""
    groups: list[list[Dimension]] = []
    for d in dims:
        if groups and not d.model_based and not any(g.model_based for g in groups[-1]):
            groups[-1].append(d)
        else:
            groups.append([d])
    return groups


def _score_dimension(dim: Dimension, live: Sequence[Sample]) -> tuple[list, float]:
    """One dimension on a batch: its outputs (dict or exception per sample) and seconds per sample.

    Raises:
        ModelUnavailableError: the dimension's model cannot be had. That is no fault of a row:
            the run stops with the one-line reason instead of failing every row.
    """
    t0 = time.perf_counter()
    try:
        outs = dim.score_batch(live)
    except ModelUnavailableError:
        raise
    except Exception:  # a batch-level failure: isolate the bad row(s) one by one
        outs = []
        for s in live:
            try:
                outs.append(dim.score_batch([s])[0])
            except ModelUnavailableError:
                raise
            except Exception as e:
                outs.append(e)
    for out in outs:
        if isinstance(out, ModelUnavailableError):
            raise out
    return outs, (time.perf_counter() - t0) / len(live)


def aggregate(dims: Sequence[Dimension], rows: dict[int, SpearRow], results: Sequence[SampleResult], *,
              n_resamples: int = 0, seed: int = 0, keys_by_metric: dict[str, list[str]] | None = None,
              bootstrap_unit: str = "conversation") -> dict[str, Any]:
    """Summary values of every dimension from the ``ok`` results (row order), each measured key
    with ``<key>_ci95`` (``n_resamples`` > 0; resampling ``bootstrap_unit``: ``"conversation"`` or
    ``"row"``) and ``<key>_n`` (:meth:`Dimension.summarize`).
    ``keys_by_metric``, when given, receives each dimension's measured aggregate keys."""
    ok = sorted((r for r in results if r.ok), key=lambda r: r.row)
    out: dict[str, Any] = {}
    for dim in dims:
        part = dim.summarize([rows[r.row] for r in ok], [r.values for r in ok], n_resamples=n_resamples, seed=seed,
                             bootstrap_unit=bootstrap_unit)
        if keys_by_metric is not None:
            keys_by_metric[dim.name] = [k for k in part if f"{k}_n" in part]
        out.update(part)
    return out


def score_columns(metric: str, columns: dict[str, Sequence[Any]], *, base_dir: str | os.PathLike = ".", batch_size: int = 16,
                  n_resamples: int = 0, seed: int = 0, dimensions: Sequence[Dimension] | None = None,
                  bootstrap_unit: str = "conversation", **options: Any) -> dict[str, Any]:
    """Score in memory (what the ``evaluate`` modules call): columns of equal length in, the
    summary keys (with ``<key>_ci95`` from ``n_resamples`` bootstrap resamples and ``<key>_n``)
    plus ``per_sample`` (one flat dict per row) and the counts out.

    ``dimensions``: already built dimension objects for ``metric`` (an evaluate module keeps
    them, and the models they loaded, between calls); ``options`` are then ignored."""
    n = {len(v) for v in columns.values()}
    if len(n) != 1:
        raise ValueError(f"all inputs must have the same length, got lengths {sorted(n)}")
    (length,) = n
    raw = [{k: ("" if v[i] is None else v[i]) for k, v in columns.items()} for i in range(length)]
    dims = list(dimensions) if dimensions is not None else load_dimensions(parse_metrics(metric), options)
    batch_size = _batch_size(batch_size)
    prep = prepare_rows(raw, base_dir)
    results = score_samples(dims, prep.samples, batch_size=batch_size)
    all_results = sorted([*results, *prep.failed.values()], key=lambda r: r.row)
    out = aggregate(dims, prep.rows, all_results, n_resamples=n_resamples, seed=seed, bootstrap_unit=bootstrap_unit)
    out["per_sample"] = [r.to_json() for r in all_results]
    out["n_samples"] = length
    out["n_scored"] = sum(r.ok for r in all_results)
    out["n_failed"] = length - out["n_scored"]
    out["options"] = {d.name: d.options_in_effect() for d in dims}
    return out


def _numbers_where_declared(metrics: Sequence[str]) -> Callable[[SampleResult], bool]:
    """The trust check of logged records: values under declared metric keys must be numbers (or
    null, or flags); anything else (``"abc"`` for ``latency_ms``: an edited work log) is not
    trusted. Whether a key is declared is looked up once per key, not once per record."""
    from spear_metrics.core.columns import find_column

    declared: dict[str, bool] = {}

    def trusted(rec: SampleResult) -> bool:
        for k, v in rec.values.items():
            if k not in declared:
                declared[k] = find_column(k, tuple(metrics)) is not None
            if declared[k] and not (v is None or (isinstance(v, (int, float)) and math.isfinite(v))):
                return False
        return True

    return trusted


def _batch_size(value: Any) -> int:
    """A batch size >= 1 (THE number parser); ``RunError`` otherwise (0 would score nothing)."""
    from spear_datasets.schema import NumberError, parse_number

    try:
        return int(parse_number(value, what="batch size", integer=True, minimum=1))
    except NumberError as e:
        raise RunError(str(e)) from None


def _fingerprint(metadata: Path, dims: Sequence[Dimension]) -> dict[str, Any]:
    """What a resumed run must share with the first: the metadata bytes, the metrics and their
    versions (a logged row of another version means another rule) and the options in effect
    (typed, defaults included, secrets masked)."""
    return {
        "metadata": str(metadata.resolve()),
        "metadata_sha256": hashlib.sha256(metadata.read_bytes()).hexdigest(),
        "metrics": [d.name for d in dims],
        "metric_versions": {d.name: d.version for d in dims},
        "options": {d.name: d.options_in_effect() for d in dims},
    }


def scored_metadata(results: str | os.PathLike) -> Path | None:
    """The metadata CSV a scored run read: the ``metadata`` path of the run's fingerprint
    (``RESULTS/.work/run.json``, written by ``score``; ``summary.json`` holds no path, so a
    published summary names no local file). ``None`` when there is no readable record."""
    import json

    try:
        obj = json.loads((Path(results) / WORK_DIR / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    path = obj.get("metadata") if isinstance(obj, dict) else None
    return Path(path) if isinstance(path, str) and path else None


def bootstrap_record(unit: str, ok_rows: Sequence[SpearRow], *, n_resamples: int, seed: int) -> dict[str, Any]:
    """The summary's ``bootstrap`` block: how every ``<key>_ci95`` was computed.

    ``unit``: ``"conversation"`` (conversations resampled, every scored row of a drawn one comes
    along; ``n_clusters`` of them among the scored rows) or ``"row"``; ``note``: why no interval
    exists at all (a single conversation), else ``None``."""
    from spear_metrics.core.stats import MIN_CLUSTERS, Clusters, conversation_of, no_interval_reason

    out: dict[str, Any] = {"n_resamples": int(n_resamples), "seed": int(seed), "method": "percentile",
                           "confidence": CONFIDENCE, "unit": unit}
    if unit == "conversation":
        n = Clusters([conversation_of(r) for r in ok_rows]).n_clusters
        out["n_clusters"] = n
        out["description"] = ("conversation: conversations (conversation_id) resampled with replacement, every scored row of "
                              "a drawn conversation comes along, every aggregate recomputed on each resample; "
                              "<key>_n counts the units that entered the key (see each metric card)")
        out["note"] = no_interval_reason(n) if 0 < n < MIN_CLUSTERS and n_resamples >= 1 else None
    else:
        out["n_clusters"] = len(ok_rows)
        out["description"] = ("row: scored rows resampled with replacement, every aggregate recomputed on each resample; "
                              "<key>_n counts the units that entered the key (see each metric card)")
        out["note"] = None
    return out


def run_score(
    metadata: str | os.PathLike,
    metrics: str | Sequence[str],
    out_dir: str | os.PathLike,
    *,
    options: dict[str, Any] | None = None,
    batch_size: int = 16,
    retry_failed: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    inputs_metadata: str | os.PathLike | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    dimensions: Sequence[Dimension] | None = None,
    bootstrap_unit: str = "conversation",
    onset_kind: str | None = None,
) -> dict[str, Any] | None:
    """Score a metadata CSV into ``out_dir`` (see module docstring) through
    :func:`run_resumable`; returns the summary on the main process (``None`` on the others).

    ``n_resamples`` / ``seed``: the percentile bootstrap behind every ``<key>_ci95`` of the
    summary (0 = no intervals; same seed, same file); ``bootstrap_unit``: what it resamples,
    ``"conversation"`` (the default: every row of a drawn conversation comes along) or ``"row"``,
    recorded in the summary's ``bootstrap``. ``dimensions``: already-built instances of
    ``metrics`` (same names) to reuse their loaded models across runs (the demo); ``options``
    are then ignored. ``onset_kind``: the answers' onset rule
    (:data:`spear_metrics.core.onset.ONSET_KINDS`) when the caller made the answers itself (the
    demo's reference systems, which share one folder); ``None``: what ``infer``'s
    ``run_info.json`` beside ``metadata`` says, else ``"unstated"``.

    Raises:
        MetadataError: the CSV is unusable as a whole.
        UnknownDimensionError / ImportError: a metric that cannot be run.
        RunError: ``out_dir`` holds a run of other inputs/options (use ``overwrite``), or no row
            could be scored.
        spear_datasets.ownership.OutFolderError: ``out_dir`` holds files this tool did not write, the
            output of another command, or is being scored by a live process (one line; see
            :func:`spear_metrics.core.records.claim_out`).
    """
    options = dict(options or {})
    metadata = Path(metadata)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise RunError(f"--out {out} exists and is not a folder")
    check_out_folder(out)  # the rule first (cheap): a folder that cannot be used costs no loading
    names = parse_metrics(metrics)
    if n_resamples < 0:
        raise RunError(f"--bootstrap must be >= 0, got {n_resamples}")
    if bootstrap_unit not in BOOTSTRAP_UNITS:
        raise RunError(f"--bootstrap-unit must be one of {', '.join(BOOTSTRAP_UNITS)}, got {bootstrap_unit!r}")
    from spear_metrics.core.onset import ONSET_KINDS

    if onset_kind is not None and onset_kind not in ONSET_KINDS:
        raise RunError(f"onset_kind must be one of {', '.join(ONSET_KINDS)}, got {onset_kind!r}")
    # options checked before anything is read
    dims = list(dimensions) if dimensions is not None else load_dimensions(names, options)
    if [d.name for d in dims] != names:
        raise RunError(f"dimensions {[d.name for d in dims]} do not match metrics {names}")
    batch_size = _batch_size(batch_size)
    raw = read_metadata(metadata)
    state = run_distributed_state()

    prep = prepare_rows(raw, metadata.parent)
    _explain_infer_failures(prep, metadata.parent / "failures.jsonl")
    conflict = RunError(f"{out} holds results of another run (different metadata, metrics or options); "
                        "use a new --out folder or --overwrite")
    # --out: new, empty or this command's; --overwrite removes what earlier runs recorded, nothing else
    with claim_out(out, _fingerprint(metadata, dims), overwrite=overwrite, conflict=conflict, command="score",
                   state=state, activity="scored", adopt=SCORE_OUTPUTS):
        from spear_datasets.identity import data_identity

        data = data_identity([str(r.get("audio_path") or "") for r in raw], source=metadata.name)
        return _score_claimed(out, dims, names, prep, state, batch_size=batch_size, retry_failed=retry_failed,
                              progress=progress, inputs_metadata=inputs_metadata, n_resamples=n_resamples, seed=seed,
                              bootstrap_unit=bootstrap_unit, data=data,
                              answers_timing=_answers_timing(metadata) if onset_kind is None
                              else {"onset_kind": onset_kind})


def _answers_timing(metadata: Path) -> dict[str, Any]:
    """What the ``run_info.json`` ``infer`` wrote beside ``metadata`` says of the answers' timing,
    for the summary: ``onset_kind`` (:data:`spear_metrics.core.onset.ONSET_KINDS`; ``"unstated"``
    for answers ``infer`` did not write) and, when recorded, ``n_server_lag_flagged`` (rows whose
    frame-synchronous server lagged past its bound)."""
    from spear_metrics.core.onset import ONSET_KINDS
    from spear_metrics.core.records import read_run_info

    info = read_run_info(metadata.parent)
    kind = info.get("onset_kind")
    out: dict[str, Any] = {"onset_kind": kind if kind in ONSET_KINDS else "unstated"}
    flagged = info.get("n_server_lag_flagged")
    if isinstance(flagged, int) and not isinstance(flagged, bool) and flagged > 0:
        out["n_server_lag_flagged"] = flagged
    return out


#: The files ``score`` writes into ``--out`` (besides ``.work/``).
SCORE_OUTPUTS = ("summary.json", "per_sample.jsonl", "run_info.json", "missing_answers.txt")


def _score_claimed(out: Path, dims: Sequence[Dimension], names: list[str], prep: Prepared, state: Any, *,
                   batch_size: int, retry_failed: bool, progress: bool, inputs_metadata: str | os.PathLike | None,
                   n_resamples: int, seed: int, bootstrap_unit: str = "conversation",
                   data: dict[str, Any] | None = None,
                   answers_timing: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """:func:`run_score` once its ``--out`` is claimed (locks held, writes recorded). ``data``:
    what was scored (:func:`spear_datasets.identity.data_identity`), recorded in ``summary.json``
    and ``run_info.json``."""
    outcome = run_resumable(
        prep.samples,
        lambda batch: score_samples(dims, batch, batch_size=len(batch)),
        out / WORK_DIR,
        n_rows=prep.n_rows,
        failed=prep.failed,
        batch_size=batch_size,
        retry_failed=retry_failed,
        progress_desc=f"scoring {','.join(names)}" if progress else None,
        # similar answer durations together: less padding per batch
        order=(lambda s: -_answer_seconds(s)) if any(d.model_based for d in dims) else None,
        read_ahead=_read_ahead,
        state=state,
        trusted=_numbers_where_declared(names),
    )
    if outcome is None:
        return None
    results, new, world = outcome.results, outcome.new, outcome.n_processes

    metric_keys: dict[str, list[str]] = {}
    aggregates = aggregate(dims, prep.rows, results, n_resamples=n_resamples, seed=seed, keys_by_metric=metric_keys,
                           bootstrap_unit=bootstrap_unit)
    extra: dict[str, Any] = {
        **(answers_timing or {"onset_kind": "unstated"}),
        "metric_keys": metric_keys,
        "bootstrap": bootstrap_record(bootstrap_unit, [prep.rows[r.row] for r in results if r.ok],
                                      n_resamples=n_resamples, seed=seed),
    }
    if data is not None:
        extra["data"] = data
    calls = {d.name: c for d in dims if (c := d.judge_calls())}
    if calls:  # as every judged benchmark records them (one judging dimension: its report itself)
        extra["judge_calls"] = next(iter(calls.values())) if len(calls) == 1 else calls
    if inputs_metadata is not None:
        extra.update(_missing_answers(Path(inputs_metadata), prep, out))
    summary = build_summary(
        aggregates=aggregates,
        results=results,
        metrics=names,
        versions={d.name: d.version for d in dims},
        models={k: v for d in dims for k, v in d.models().items()},
        options={d.name: d.options_in_effect() for d in dims},
        n_processes=world,
        extra=extra,
    )
    write_jsonl_atomic(out / "per_sample.jsonl", (r.to_json() for r in results))
    write_summary(out, summary)
    audio_s = sum(_duration_or_zero(s) for s in outcome.mine)  # question + answer audio scored by this process
    write_json_atomic(
        out / "run_info.json",
        {
            "elapsed_s": outcome.elapsed_s,
            "rows_scored_this_run": len(new),
            "rows_resumed": outcome.n_resumed,
            "n_processes": world,
            "audio_s_this_run": audio_s,  # input clips + answers scored by the main process
            "x_real_time": (audio_s / outcome.elapsed_s) if outcome.elapsed_s > 0 and audio_s else None,  # audio seconds per wall second
            "real_time_factor": (outcome.elapsed_s / audio_s) if audio_s else None,  # wall seconds per audio second (RTF)
            "mean_seconds_per_sample": {d.name: _mean([r.timings.get(d.name) for r in new]) for d in dims},
            "data": data,
        },
    )
    if summary["n_scored"] == 0:
        first = results[0] if results else None
        why = f"; row 0: {first.error}" if first is not None and first.error else ""
        raise RunError(f"no row could be scored ({summary['n_failed']} failed{why}); every reason in {out / 'per_sample.jsonl'}")
    return summary


def _explain_infer_failures(prep: Prepared, failures: Path) -> None:
    """Rows that ``spearbench infer`` could not answer reach ``score`` with an empty
    ``answer_audio_path``; when the folder holds infer's ``failures.jsonl`` (keyed by metadata
    row), the failed row carries infer's own reason instead of just "answer_audio_path is empty"."""
    if not failures.is_file():
        return
    reasons = {o.get("row"): o.get("error") for o in read_jsonl(failures)}
    for i, rec in prep.failed.items():
        if rec.error == "answer_audio_path is empty" and reasons.get(i):
            rec.error = f"infer failed: {one_line(reasons[i])}"


def _missing_answers(inputs_csv: Path, prep: Prepared, out: Path) -> dict[str, Any]:
    """Inputs of the benchmark metadata that no answer row covers (written to ``missing_answers.txt``).

    An input is matched by its subset folder and file name (SPEAR's clip stems are unique within
    a subset; answers' metadata may point at copies of the inputs elsewhere)."""
    from spear_datasets.schema import subset_of

    def key(path: Any) -> tuple[str | None, str]:
        return subset_of(str(path)), Path(str(path)).name

    raw = read_metadata(inputs_csv, required=("audio_path",))
    answered = {key(s.audio_path) for s in prep.samples}
    missing = [r["audio_path"] for r in raw if key(r["audio_path"]) not in answered]
    with atomic_path(out / "missing_answers.txt") as tmp:
        tmp.write_text("".join(f"{m}\n" for m in missing), encoding="utf-8")
    return {"n_missing_answers": len(missing)}


def _answer_seconds(s: Sample) -> float:
    """Answer duration from the file header (0 for a file that cannot be read: it fails later).
    Duration, not file size: a 48 kHz or stereo answer is not longer than a 16 kHz mono one of
    the same length once the models see it."""
    try:
        return audio_info(s.answer_audio_path).duration
    except Exception:
        return 0.0


def _duration_or_zero(s: Sample) -> float:
    try:
        return audio_info(s.answer_audio_path).duration + audio_info(s.audio_path).duration
    except Exception:
        return 0.0


def _mean(xs: Iterable[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else None
