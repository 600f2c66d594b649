"""Full-Duplex-Bench on THE runner (:func:`spear_metrics.core.runner.run_resumable`): a task
folder, or the runs of the public FDB v1.0 model-outputs release, scored resumably (kill -9 and
rerun: nothing lost or scored twice) and sharded with ``accelerate launch``.

- :func:`score_task_folder`: ``spearbench fdb score --task T --root DIR --out OUT`` (one task).
- :func:`score_release_run`: ``spearbench fdb score --release R --run RUN --stimuli S --out OUT``:
  ``OUT/<run>/summary.json`` with the release leaderboard's ten columns (:data:`RELEASE_COLUMNS`),
  each with ``<key>_ci95`` and ``<key>_n``, and ``OUT/<run>/per_sample.jsonl`` (one line per
  row of ``metadata/<run>.jsonl``, in its order).
- :func:`write_leaderboard`: ``OUT/leaderboard.md`` over every release run scored into ``OUT``.

Layouts: :mod:`spear_datasets.sources.fdb`; definitions: :mod:`spear_metrics.full_duplex.definition`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from spear_datasets.files import atomic_path
from spear_datasets.sources.fdb import (
    RELEASE_AUDIO,
    RELEASE_CATEGORIES,
    FDBFormatError,
    FDBSample,
    read_release_metadata,
    release_sample,
)
from spear_metrics.core.records import SampleResult, claim_out, write_json_atomic, write_jsonl_atomic
from spear_metrics.core.runner import WORK_DIR, RunError, run_resumable
from spear_metrics.core.summary import build_summary, write_summary
from spear_metrics.core.vad import DEFAULT_BACKEND
from spear_metrics.full_duplex.definition import (
    READINGS,
    TIME_TOLERANCE_S,
    VERSION,
    FullDuplexScorer,
    aggregate,
    bootstrap_info,
    score_one,
    summarize,
)

#: the release leaderboard's ten columns, in its order: key -> (category, per-sample key).
#: Each is the mean over the category's scored samples, as FDB's script for that category prints it.
RELEASE_COLUMNS: dict[str, tuple[str, str]] = {
    "pause_tor_synthetic": ("synthetic_pause_handling", "tor"),
    "pause_tor_candor": ("candor_pause_handling", "tor"),
    "backchannel_tor": ("icc_backchannel", "tor"),
    "backchannel_frequency": ("icc_backchannel", "backchannel_frequency"),
    "backchannel_jsd": ("icc_backchannel", "jsd"),
    "turn_taking_tor": ("candor_turn_taking", "tor"),
    "turn_taking_latency_s": ("candor_turn_taking", "latency_s"),
    "interruption_tor": ("synthetic_user_interruption", "tor"),
    "interruption_rating": ("synthetic_user_interruption", "relevance"),
    "interruption_latency_s": ("synthetic_user_interruption", "latency_s"),
}
RELEASE_PROTOCOL = "Full-Duplex-Bench v1.0 (model-outputs release)"
#: a release reply may last this much more or less than its stimulus (s) before its row fails
RELEASE_DURATION_TOLERANCE_S = TIME_TOLERANCE_S


@dataclass
class WorkItem:
    """One sample as the runner sees it: ``row`` (its id in the run) and how to score it."""

    row: int
    sample: FDBSample
    task: str
    audio_path: str
    answer_audio_path: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ScoringSetup:
    """What every sample of a run is scored with (see :class:`FullDuplexScorer`)."""

    reference: dict[str, Any] | None = None
    reference_path: str | None = None
    judge: Any = None
    asr_name: str = "embedded"
    vad_backend: str = DEFAULT_BACKEND
    compat: str | None = None
    batch_size: int = 16
    n_resamples: int = 1000
    seed: int = 0
    retry_failed: bool = False
    overwrite: bool = False
    progress: bool = True
    #: judge calls in flight at once (``--judge-concurrency``): with a judge and ``> 1``, rows are
    #: scored by that many threads, each logged as it finishes (only the judge calls overlap:
    #: :meth:`FullDuplexScorer.score`)
    concurrency: int = 1

    def scorer(self, task: str, **kw: Any) -> FullDuplexScorer:
        return FullDuplexScorer(task=task, reference=self.reference, judge=self.judge, asr_name=self.asr_name,
                                vad_backend=self.vad_backend, compat=self.compat, **kw)

    def threads(self) -> int:
        """``run_resumable``'s ``concurrency``: :attr:`concurrency` with a judge, else 1."""
        return max(1, int(self.concurrency)) if self.judge is not None else 1

    def fingerprint(self) -> dict[str, Any]:
        """What per-sample values depend on beyond the inputs (bootstrap settings do not:
        the summary is recomputed on every run)."""
        judge = self.judge
        return {
            "version": VERSION,
            "reference_sha256": _sha256(self.reference_path) if self.reference_path else None,
            "judge": None if judge is None else (judge.describe() if hasattr(judge, "describe") else str(judge)),
            "asr": self.asr_name,
            "vad_backend": self.vad_backend,
            "compat": self.compat or "none",
        }


def _sha256(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _scorer_batch(scorers: dict[str, FullDuplexScorer]):
    def score_batch(batch: Sequence[WorkItem]) -> list[SampleResult]:
        return [score_one(it.sample, scorers[it.task], it.row, audio_path=it.audio_path,
                          answer_audio_path=it.answer_audio_path, extra=it.extra) for it in batch]
    return score_batch


def _state():
    """accelerate's process state (:func:`spear_metrics.core.batching.distributed_state`)."""
    from spear_metrics.core.runner import run_distributed_state

    return run_distributed_state()


def _run_info(out: Path, outcome, setup: ScoringSetup) -> None:
    write_json_atomic(out / "run_info.json", {
        "judge_concurrency": setup.threads(),
        "elapsed_s": outcome.elapsed_s,
        "rows_scored_this_run": len(outcome.new),
        "rows_resumed": outcome.n_resumed,
        "n_processes": outcome.n_processes,
    })


# ----------------------------------------------------------------------------- one task folder


def score_task_folder(task: str, samples: Sequence[FDBSample], root: str | os.PathLike, out: str | os.PathLike,
                      setup: ScoringSetup) -> tuple[dict[str, Any], list[SampleResult]] | None:
    """Score the sample folders of one task (``spearbench fdb score --task``) into ``out``
    (``summary.json``, ``per_sample.jsonl``, ``run_info.json``; resumable from ``out/.work``).

    Returns:
        ``(summary, results)`` on the main process, ``None`` on the others.

    Raises:
        RunError: ``out`` holds a run of other inputs or options (use ``overwrite``).
    """
    out = Path(out)
    items = [WorkItem(i, s, task, str(s.input_wav), str(s.output_wav)) for i, s in enumerate(samples)]
    fp = {"mode": "task", "task": task, "root": str(Path(root).resolve()),
          "samples": [s.id for s in samples], **setup.fingerprint()}
    conflict = RunError(f"{out} holds results of another run (other samples or options); use a new --out folder "
                        "or --overwrite")
    with claim_out(out, fp, overwrite=setup.overwrite, conflict=conflict, command="fdb", state=_state(),
                   activity="scored", adopt=("summary.json", "per_sample.jsonl", "run_info.json", "comparison.json")):
        outcome = run_resumable(
            items, _scorer_batch({task: setup.scorer(task)}), out / WORK_DIR, n_rows=len(items),
            batch_size=setup.batch_size, retry_failed=setup.retry_failed,
            progress_desc=f"fdb {task}" if setup.progress else None, concurrency=setup.threads())
        if outcome is None:
            return None
        summary = summarize(task, outcome.results, n_resamples=setup.n_resamples, seed=setup.seed, judge=setup.judge,
                            reference_given=setup.reference is not None, compat=setup.compat,
                            n_processes=outcome.n_processes, extra={"root": str(Path(root).resolve())})
        write_jsonl_atomic(out / "per_sample.jsonl", (r.to_json() for r in outcome.results))
        write_summary(out, summary)
        _run_info(out, outcome, setup)
        return summary, outcome.results


# ----------------------------------------------------------------------------- release runs


def release_items(release: Path, run: str, stimuli: Path) -> tuple[list[WorkItem], dict[int, SampleResult], list[dict], int]:
    """The rows of ``metadata/<run>.jsonl`` joined with their stimuli: items to score, rows
    already failed (malformed line, unknown category, missing stimulus folder or reply, a
    repeated ``<category>/<id>``), the raw rows, and the number of rows. No audio is read here.

    Raises:
        FDBFormatError: no readable ``metadata/<run>.jsonl`` (a whole-run problem).
    """
    rows = read_release_metadata(release, run)
    items: list[WorkItem] = []
    failed: dict[int, SampleResult] = {}
    first: dict[str, int] = {}
    raws = []
    for r in rows:
        raw = r.raw or {}
        raws.append(raw)
        cat, sid = str(raw.get("category") or ""), str(raw.get("sample_id") or "")
        rel_in = f"{cat}/{sid}/input.wav"
        rel_out = f"data/{run}/{cat}/{sid}/{RELEASE_AUDIO}"
        extra = {"category": cat or None, "stimulus": f"{cat}/{sid}" if cat and sid else None}
        try:
            if r.error:
                raise FDBFormatError(r.error)
            category, sample = release_sample(raw, release, run, stimuli)
            key = f"{category}/{sample.id}"
            if key in first:
                raise FDBFormatError(f"duplicate of row {first[key]} (same {key})")
            first[key] = r.row
            items.append(WorkItem(r.row, sample, sample.task, rel_in, rel_out, extra))
        except FDBFormatError as e:
            failed[r.row] = SampleResult(row=r.row, audio_path=rel_in, answer_audio_path=rel_out,
                                         values={"id": sid or None, "task": RELEASE_CATEGORIES.get(cat), **extra}).fail(str(e))
    return items, failed, raws, len(rows)


def release_aggregates(results: Sequence[SampleResult], *, n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The ten :data:`RELEASE_COLUMNS` from the ``ok`` results of one run: each the mean of its
    category's non-null per-sample values, with ``<key>_ci95`` (percentile bootstrap over samples,
    ``None`` below 2 values) and ``<key>_n``."""
    by_cat: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        if r.ok:
            by_cat.setdefault(str(r.values.get("category")), []).append(r.values)
    agg: dict[str, Any] = {}
    for cat, task in RELEASE_CATEGORIES.items():
        names = {k: col for col, (c, k) in RELEASE_COLUMNS.items() if c == cat}
        agg.update(aggregate(task, by_cat.get(cat, []), n_resamples=n_resamples, seed=seed, names=names))
    return {k: agg[k] for col in RELEASE_COLUMNS for k in (col, f"{col}_ci95", f"{col}_n")}


def score_release_run(release: str | os.PathLike, run: str, stimuli: str | os.PathLike, out_root: str | os.PathLike,
                      setup: ScoringSetup) -> tuple[dict[str, Any], list[SampleResult]] | None:
    """Score one run of the model-outputs release into ``out_root/<run>/`` (resumable from its
    ``.work/``): every category, each row's ``output.flac`` + ``output.json`` joined with its
    stimulus folder; a reply more than 0.5 s longer or shorter than its stimulus, a malformed
    ``output.json`` or a ``rating.json`` outside 0-5 fails its row; ``rating.json`` is the
    interruption rating where present (else ``setup.judge``, else null).

    Returns:
        ``(summary, results)`` on the main process, ``None`` on the others.

    Raises:
        FDBFormatError: the run has no readable ``metadata/<run>.jsonl``.
        RunError: ``out_root/<run>`` holds results of other inputs/options (use ``overwrite``).
    """
    release, stimuli = Path(release), Path(stimuli)
    out = Path(out_root) / run
    items, failed, raws, n_rows = release_items(release, run, stimuli)
    scorers = {t: setup.scorer(t, asr_fallback=False, max_duration_diff_s=RELEASE_DURATION_TOLERANCE_S)
               for t in set(RELEASE_CATEGORIES.values())}
    meta_path = release / "metadata" / f"{run}.jsonl"
    fp = {"mode": "release", "release": str(release.resolve()), "run": run, "metadata_sha256": _sha256(meta_path),
          "stimuli": str(stimuli.resolve()), **setup.fingerprint()}
    conflict = RunError(f"{out} holds results of another scoring of run {run} (other release files, stimuli or "
                        "options); use a new --out folder or --overwrite")
    with claim_out(out, fp, overwrite=setup.overwrite, conflict=conflict, command="fdb", state=_state(),
                   activity="scored", adopt=("summary.json", "per_sample.jsonl", "run_info.json", "vs_release.json")):
        outcome = run_resumable(
            items, _scorer_batch(scorers), out / WORK_DIR, n_rows=n_rows, failed=failed,
            batch_size=setup.batch_size, retry_failed=setup.retry_failed,
            progress_desc=f"fdb {run}" if setup.progress else None, concurrency=setup.threads())
        if outcome is None:
            return None
        results = outcome.results
        summary = release_summary(run, release, stimuli, results, raws, setup, n_processes=outcome.n_processes)
        write_jsonl_atomic(out / "per_sample.jsonl", (r.to_json() for r in results))
        write_summary(out, summary)
        _run_info(out, outcome, setup)
        return summary, results


def release_summary(run: str, release: Path, stimuli: Path, results: Sequence[SampleResult], raws: Sequence[dict],
                    setup: ScoringSetup, *, n_processes: int = 1) -> dict[str, Any]:
    """``summary.json`` of one release run: :func:`release_aggregates`, counts per category, the
    run's model as the release names it, which reading of the reply was used, and provenance."""
    agg = release_aggregates(results, n_resamples=setup.n_resamples, seed=setup.seed)
    first = next((r for r in raws if r.get("model") or r.get("label")), {})
    cats: dict[str, dict[str, int]] = {}
    for cat in RELEASE_CATEGORIES:
        rs = [r for r in results if r.values.get("category") == cat]
        cats[cat] = {"n_samples": len(rs), "n_scored": sum(r.ok for r in rs), "n_failed": sum(not r.ok for r in rs)}
    ok = [r.values for r in results if r.ok and r.values.get("category") == "synthetic_user_interruption"]
    n_file = sum(1 for v in ok if v.get("relevance_source") == "rating.json" and v.get("relevance") is not None)
    n_judge = sum(1 for v in ok if v.get("relevance_source") is None and v.get("relevance") is not None)
    models: dict[str, str] = {"backchannel_tor": "silero-vad (library defaults, 0.1 s times)",
                              "turn_taking_tor": "the release's output.json (its ASR)"}
    notes: dict[str, Any] = {}
    raters = (["the release's rating.json (FDB's judge, named in the release card)"] if n_file else []) + \
        ([setup.judge.describe() if hasattr(setup.judge, "describe") else str(setup.judge)] if n_judge else [])
    if raters:
        models["interruption_rating"] = "; ".join(raters)
    elif setup.judge is None:
        notes["interruption_rating_note"] = "no rating.json in the release and no judge configured: not computed"
    if setup.reference is None:
        notes["backchannel_jsd_note"] = "no human distribution given (--reference icc_gt_distribution.json): not computed"
    info = {
        "protocol": RELEASE_PROTOCOL, "run": run, "label": first.get("label"), "model": first.get("model"),
        "model_id": first.get("model_id"), "release": str(release.resolve()), "stimuli": str(stimuli.resolve()),
        "compat": setup.compat or "none", "reply_reading": READINGS[setup.compat],
        "n_interruption_ratings_from_rating_json": n_file, "n_interruption_ratings_from_judge": n_judge,
        "categories": cats,
        "bootstrap": bootstrap_info(setup.n_resamples, setup.seed), **notes,
    }
    return build_summary(aggregates=agg, results=results, metrics=["full_duplex"], versions={"full_duplex": VERSION},
                         models=models, n_processes=n_processes, extra=info)


# ----------------------------------------------------------------------------- leaderboard


def _cell(summary: dict[str, Any], key: str, tie: str = "") -> str:
    from spear_metrics.reports.runs import marked

    v = summary.get(key)
    if v is None:
        return "-"
    ci = summary.get(f"{key}_ci95")
    text = f"{v:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "") + f" (n={summary.get(f'{key}_n')})"
    return marked(text, tie, summary, key, rate=RELEASE_COLUMNS[key][1] == "tor")


def release_tie_spec():
    """The tie groups of the release leaderboard (:class:`spear_metrics.reports.runs.TieSpec`):
    rows paired by their stimulus (``<category>/<sample id>``), samples resampled one by one; a
    column's per-row value is its key on the rows of its category; its direction is the key's in
    that category's task (:func:`spear_metrics.full_duplex.definition.key_better`)."""
    from spear_datasets.sources.fdb import RELEASE_CATEGORIES
    from spear_metrics.full_duplex.definition import key_better
    from spear_metrics.reports.runs import TieSpec

    def value(r: dict[str, Any], col: str) -> Any:
        cat, key = RELEASE_COLUMNS[col]
        return r.get(key) if r.get("category") == cat else None

    return TieSpec(row_id=lambda r: r.get("stimulus"), unit="sample", value=value,
                   better=lambda col: key_better(RELEASE_CATEGORIES[RELEASE_COLUMNS[col][0]], RELEASE_COLUMNS[col][1]))


def write_leaderboard(out_root: str | os.PathLike) -> Path | None:
    """``out_root/leaderboard.md``: one row per release run scored into ``out_root`` (every
    ``<run>/summary.json`` of :data:`RELEASE_PROTOCOL`, by run name): the ten columns as
    ``mean [95 % CI] (n=values)``, the reading of the reply, and failed rows. ``None`` when
    there is no such run. With two runs or more, each cell also carries its tie mark and rank
    interval (★ best, ≈ tied with the best: :func:`spear_metrics.reports.runs.leaderboard_ties` on the
    ``per_sample.jsonl`` rows of the samples every run scored, :func:`release_tie_spec`; the rule
    is written under the table), and a take-over rate from fewer than 10 samples its few-events
    mark."""
    from spear_metrics.core.records import read_jsonl
    from spear_metrics.reports.runs import leaderboard_ties, tie_cell
    from spear_metrics.results.validate import ResultsError, read_summary_file

    out_root = Path(out_root)
    runs = []
    for p in sorted(out_root.glob("*/summary.json")):
        try:
            s = read_summary_file(p)  # bounded: a FIFO or a huge file is skipped, never a hang or a crash
        except ResultsError:
            continue
        if isinstance(s, dict) and s.get("protocol") == RELEASE_PROTOCOL:
            runs.append(s)
    if not runs:
        return None
    rows = {str(s.get("run")): list(read_jsonl(out_root / str(s.get("run")) / "per_sample.jsonl")) for s in runs}
    ties = leaderboard_ties(rows, list(RELEASE_COLUMNS), spec=release_tie_spec()) if len(rows) >= 2 else {}
    head = ["run", "model", *RELEASE_COLUMNS, "reading", "failed rows"]
    lines = ["# Full-Duplex-Bench v1.0: model-outputs release, rescored by SPEARBench", "",
             "Each cell: mean [95 % percentile-bootstrap interval over samples] (n = samples with a value). "
             "`reading`: `none` = reply resampled to 16 kHz (correct); `upstream` = FDB's own reading "
             "(reply samples read as 16 kHz). A take-over rate from fewer than 10 samples is marked "
             "`(few events: n = N)`.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in runs:
        cells = [str(s.get("run")), str(s.get("label") or s.get("model") or "-"),
                 *(_cell(s, k, tie_cell(ties, k, str(s.get("run")))) for k in RELEASE_COLUMNS),
                 str(s.get("compat")), f"{s.get('n_failed')} of {s.get('n_samples')}"]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    if ties:
        from spear_metrics.core.stats import ALPHA, SMALL_SAMPLE
        from spear_metrics.core.ties import TIE_RULE

        lines += ["", f"Tie marks: {TIE_RULE.format(unit='sample', alpha=ALPHA, min_units=SMALL_SAMPLE)}; only the "
                      "samples every run scored are compared (per column: "
                      + ", ".join(f"{k} {t['n_common']}" for k, t in ties.items()) + ")."]
    path = out_root / "leaderboard.md"
    with atomic_path(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
