"""The per-run HTML report (``spearbench report``): one self-contained file a researcher can attach.

``REPORT_DIR/index.html`` answers first, then gives the details. Its sections, in order, are
built by the functions of :data:`SECTIONS` (a list of :class:`Section`: id, title, builder):

1. **Summary**: per scored dimension, the run's headline values next to the human answers'
   (``--human``: the human answers scored by the same code) and the published human row
   (``spear_metrics/space/data/spear_benchmark.csv``), the difference from the human answers
   with its paired 95 % interval, said in words, and one figure of every value with its
   interval; what the comparison rests on (shared samples, small-sample cautions);
2. **Problems**: inputs that could not be read and anything wrong with a run (only when there is);
3. one section per SPEAR dimension: each aggregate key's value with its 95 % interval and ``n``
   for every run; a key without a value says why, each reason written once per table as a
   numbered note; bars with the intervals; the tests against the human answers (paired where
   rows match, and the unpaired tests of SPEAR's ``generate_short_report.py``: Welch,
   Mann-Whitney U, per subset and pooled, with Cliff's delta; below
   :data:`spear_metrics.core.stats.SMALL_SAMPLE` pairs no bootstrap p-value and a caution);
   the per-sample distributions (one panel per run); for interruptions the timing evidence of
   a few samples;
4. **Runs** in the report and **Provenance** (source, versions, models behind each key, every
   option with its value in effect, bootstrap settings, failed rows with their reasons).

A table of contents links the sections. To add a section (e.g. a distributional comparison),
write ``builder(report: Report, page: Page) -> None`` and insert a :class:`Section` into
:data:`SECTIONS` where it belongs; the table of contents follows.

The page primitives the sections write with (:class:`~spear_metrics.reports.page.Page`, ``fmt``,
``value_cell``, ``CSS``...) are :mod:`spear_metrics.reports.page` (also importable from here).

The plots are embedded as ``data:`` PNGs (no network, no script) and also written as PNG files
beside ``index.html``. Nothing in the page depends on the time it was made: the same inputs give
the same file.
"""

from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from spear_metrics.reports import plots
from spear_metrics.reports.page import (  # noqa: F401  (the page primitives, also named from here by other reports)
    CSS, Figure, Notes, Page, _e, fmt, fmt_p, value_cell, why_missing, write_page,
)
from spear_metrics.reports.runs import RunData, compare, leaderboard_ties, onset_tie_note, tie_cell

#: the seven SPEAR dimensions in leaderboard order: (registry name, section title)
DIMENSIONS: tuple[tuple[str, str], ...] = (
    ("speech_quality", "Speech quality"),
    ("interruptions", "Interruptions"),
    ("language_dialect", "Language & dialect"),
    ("turn_taking", "Turn-taking"),
    ("emotions", "Emotions"),
    ("stances", "Stances"),
    ("explainable_features", "Explainable features"),
)

#: per-sample keys tested against the human answers, per dimension (patterns on key names;
#: question-side values are the same input for both runs and are not tested)
SAMPLE_KEYS: dict[str, tuple[str, ...]] = {
    "speech_quality": (r"^UTMOS$", r"^DNSMOS_\w+$", r"^DistillMOS$", r"^(WER|CER)_"),
    "interruptions": (r"^latency_ms$", r"^interrupted_time_ms$", r"^interruption$", r"^no_speech_answer$",
                      r"^answer_speech_after_skip$"),
    "language_dialect": (r"^english_answer$", r"^same_dialect_as_question$", r"^north_american_dialect$"),
    "turn_taking": (r"^turn_taking_",),
    "emotions": (r"^answer_(arousal|valence|dominance)$", r"^emotional_naturalness_logit$"),
    "stances": (r"^stance_q\d+_score$",),
    "explainable_features": (r"^explainable_", r"^f0_"),
}

#: the keys the summary shows per dimension, in order (those with a value in the run or the
#: human answers): the published columns, and where the published ones need models that are
#: not packaged, the project's offline keys beside them
SUMMARY_KEYS: dict[str, tuple[str, ...]] = {
    "speech_quality": ("UTMOS", "WER_%", "WER_norm_%", "DNSMOS_OVRL", "DistillMOS"),
    "interruptions": ("latency_ms", "interrupted_time_ms", "interruptions_%", "no_speech_answers_%"),
    "language_dialect": ("english_answers_%", "same_dialect_as_question_%", "north_american_dialect_%",
                         "dialectal_entrainment_spearman", "dialectal_variance"),
    "turn_taking": ("turn_taking_naturalness", "turn_taking_offset_loglik"),
    "emotions": ("emotional_naturalness_logit", "arousal_question_answer_corr", "valence_question_answer_corr",
                 "dominance_question_answer_corr"),
    "stances": ("stance_same_as_question_%", "stance_more_negative_%", "stance_more_positive_%"),
    "explainable_features": ("explainable_duration_s", "explainable_voiced_ratio", "explainable_normalized_f0_std_avg"),
}

#: aggregate keys that are a plain mean of a per-sample value of another name, times a scale:
#: their difference from the human answers gets the paired interval of that value
#: (``interruptions_%`` = 100 x the share of rows whose ``interruption`` is true, rows without
#: ``answer_start_time`` having none; ``no_speech_answers_%`` likewise of ``no_speech_answer``)
PER_SAMPLE_OF: dict[str, tuple[str, float]] = {
    "interruptions_%": ("interruption", 100.0),
    "no_speech_answers_%": ("no_speech_answer", 100.0),
}

#: how many samples get a timing timeline in the report
N_TIMELINES = 6


def published_human_row() -> dict[str, float | None]:
    """The ``human`` row of the published SPEAR leaderboard (the Space's table,
    ``spear_metrics/space/data/spear_benchmark.csv``, from ``thomasthebaud/SPEAR-benchmark-website``,
    MIT): key -> value (``None`` = "-" / empty)."""
    path = Path(__file__).resolve().parents[1] / "space" / "data" / "spear_benchmark.csv"
    with open(path, newline="", encoding="utf-8") as f:
        for rec in csv.DictReader(f):
            if rec.get("model") == "human":
                out: dict[str, float | None] = {}
                for k, v in rec.items():
                    try:
                        out[k] = float(v)
                    except (TypeError, ValueError):
                        out[k] = None
                return out
    return {}


def _key_info(dim: str, key: str) -> tuple[str, str, str]:
    """(unit, better, description) of ``key`` from its MetricKey (:mod:`spear_metrics.core.columns`;
    a template such as ``WER_%_<asr>`` covers its family); ``("-", "-", "")`` when undeclared."""
    from spear_metrics.core.columns import better_text, find_column

    c = find_column(key, (dim,))
    return (c.unit, better_text(c.better), c.description) if c is not None else ("-", "-", "")


def _aggregate_keys(dim: str, runs: Sequence[RunData]) -> list[str]:
    """The dimension's aggregate keys: what the runs' summaries list under ``metric_keys``,
    else its MetricKeys (published columns first)."""
    from spear_metrics.core.columns import columns

    keys: list[str] = []
    for r in runs:
        for k in (r.summary.get("metric_keys") or {}).get(dim, []):
            if k not in keys:
                keys.append(k)
    for k in (c.name for c in columns() if c.dimension == dim and not c.key.is_template):
        if k not in keys:
            keys.append(k)
    return keys


#: how the report reads the tie marks beside a value
TIE_MARKS_LEGEND = "★ best of the runs shown (not the human answers); ≈ tied with it; rank 1-2: its 95 % rank interval."


@dataclass
class Report:
    """What every section builder reads.

    Attributes:
        run: the run reported.
        human: the human answers scored by the same code, or ``None``.
        against: other runs shown beside.
        labelled: ``(label, run)`` for the run, the human answers and the others, labels unique.
        comp: :func:`spear_metrics.reports.runs.compare` of ``run`` against ``human`` (or ``None``).
        published: the published human row (:func:`published_human_row`).
        notes: lines about inputs that could not be read at all.
    """

    run: RunData
    human: RunData | None
    against: list[RunData]
    labelled: list[tuple[str, RunData]]
    comp: dict[str, Any] | None
    published: dict[str, float | None]
    notes: list[str]
    #: tie groups and rank intervals of the run and the others (not the human answers), key by
    #: key (:func:`spear_metrics.reports.runs.leaderboard_ties`); empty with fewer than 2
    ties: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.labelled[0][0]

    @property
    def human_label(self) -> str:
        return self.labelled[1][0] if self.human is not None else "human answers"


@dataclass
class Section:
    """One section of the report: its anchor ``id``, its ``title`` (also the table of contents'
    entry) and ``build(report, page)``, which adds the section's body; ``when(report)`` false
    leaves the section out."""

    id: str
    title: str
    build: Callable[[Report, Page], None]
    when: Callable[[Report], bool] = lambda report: True


# ---------------------------------------------------------------------------------------- helpers


def _series_rows(runs: Sequence[tuple[str, RunData]], key: str | None = None) -> list[tuple[str, list]]:
    return [(label, [r.get(key) for r in run.ok_rows] if key else run.ok_rows) for label, run in runs]


def _has(runs: Sequence[tuple[str, RunData]], key: str) -> bool:
    from spear_metrics.core.stats import as_number

    return any(as_number(r.get(key)) is not None for _, run in runs for r in run.ok_rows)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", s).strip("_") or "x"


def _scored(run: RunData | None, dim: str) -> bool:
    return run is not None and dim in (run.summary.get("metrics") or [])


def _number(run: RunData | None, key: str, dim: str) -> float | None:
    from spear_metrics.core.stats import as_number

    if not _scored(run, dim):
        return None
    v = run.summary.get(key)
    return None if isinstance(v, bool) else as_number(v)


def _ci(run: RunData | None, key: str) -> list[float] | None:
    ci = run.summary.get(f"{key}_ci95") if run is not None else None
    return ci if isinstance(ci, list) and len(ci) == 2 and None not in ci else None


def _unique_labels(runs: Sequence[tuple[str, RunData]]) -> list[tuple[str, RunData]]:
    """Labels made unique (a repeated one gets its source appended)."""
    seen: dict[str, int] = {}
    for label, _ in runs:
        seen[label] = seen.get(label, 0) + 1
    return [(f"{label} ({r.source})" if seen[label] > 1 else label, r) for label, r in runs]


def paired_difference(report: Report, key: str) -> dict[str, Any] | None:
    """The paired difference run − human answers behind aggregate ``key``: ``{"diff",
    "diff_ci95", "n", "caution", "per_sample"}`` from the comparison's per-sample key of the same
    name (or :data:`PER_SAMPLE_OF`, or ``<key>_<asr>`` when one ASR system ran), scaled to the
    key's unit; ``None`` when the key is not a plain mean of a per-sample value."""
    comp = report.comp
    if comp is None:
        return None
    sample_key, scale = PER_SAMPLE_OF.get(key, (key, 1.0))
    if sample_key not in comp["keys"]:
        asrs = report.run.summary.get("asr_models") or []
        if key in ("WER_norm_%", "CER_norm_%") and len(asrs) == 1:
            sample_key = f"{key}_{asrs[0]}"
    e = comp["keys"].get(sample_key)
    if e is None or e.get("diff") is None:
        return None
    ci = e.get("diff_ci95")
    return {"diff": e["diff"] * scale, "diff_ci95": None if ci is None else [ci[0] * scale, ci[1] * scale],
            "n": e["n"], "caution": e.get("caution"), "per_sample": sample_key}


def in_words(run_label: str, human_label: str, diff: float, ci: list[float] | None, unit: str, better: str,
             n_pairs: int | None) -> str:
    """The difference run − human answers in one sentence, e.g. ``cascade is 250.500 ms lower
    than human; the 95 % interval excludes 0 (closer to human is better)``."""
    from spear_metrics.core.stats import SMALL_SAMPLE

    u = "points" if unit == "%" else ("" if unit in ("-", "ratio", "r", "slope") else unit)
    if diff == 0 and (ci is None or ci == [0.0, 0.0]):
        text = f"{run_label} equals {human_label}" + (" on every sample" if ci == [0.0, 0.0] else "")
    else:
        text = f"{run_label} is {fmt(abs(diff))}{' ' + u if u else ''} {'higher' if diff > 0 else 'lower'} than {human_label}"
        if ci is not None:
            text += "; the 95 % interval " + ("includes 0" if ci[0] <= 0 <= ci[1] else "excludes 0")
    if better in ("higher", "lower"):
        text += f" ({better} is better)"
    elif better == "closer to human":
        text += " (closer to the human answers is better)"
    if n_pairs is not None and n_pairs < SMALL_SAMPLE:
        text += f"; only {n_pairs} pair{'s' if n_pairs != 1 else ''}: a description, not evidence"
    return text + "."


# --------------------------------------------------------------------------------------- sections


def summary_section(report: Report, page: Page) -> None:
    """The answer first: per dimension, the headline values, the difference from the human
    answers with its interval, in words, and one figure."""
    from spear_metrics.core.stats import SMALL_SAMPLE

    run, human, comp = report.run, report.human, report.comp
    who = _e(report.name)
    if human is None:
        page.add(f"<p>{who} alone: no human answers were given (<code>--human</code>), so no difference is "
                 "computed; the published human row is shown beside.</p>")
    else:
        n = comp["n_common"] if comp else 0
        page.add(f"<p>{who} against the human answers (<b>{_e(report.human_label)}</b>, scored by the same code) on "
                 f"<b>{n}</b> shared sample{'s' if n != 1 else ''}. Values are means over scored rows with a 95 % "
                 f"bootstrap interval; a difference is {who} − {_e(report.human_label)} over the shared samples, with "
                 "its paired bootstrap interval.</p>")
        if n == 1:
            page.add('<p class="caution">Only 1 shared sample: no interval and no test exist (they need at least 2 '
                     "pairs). Read the differences as descriptions of that sample, not as evidence.</p>")
        elif 0 < n < SMALL_SAMPLE:
            page.add(f'<p class="caution">Only {n} shared sample{"s" if n != 1 else ""}: too few for a bootstrap p-value '
                     f"(it needs at least {SMALL_SAMPLE} pairs) and the intervals rest on a handful of "
                     "distinct resamples. Read the differences as descriptions of these samples, not as evidence.</p>")
        elif n == 0:
            page.add('<p class="caution">No scored sample is shared with the human answers: no paired difference '
                     "exists; the values are shown side by side.</p>")
    rows, fig_rows, unscored, empty = [], [], [], []
    notes = Notes()  # each reason once, below the table
    for dim, title in DIMENSIONS:
        if not (_scored(run, dim) or _scored(human, dim)):
            unscored.append(title)
            continue
        titled = False  # the dimension's name on its first row only
        for key in SUMMARY_KEYS.get(dim, ()):
            mine, theirs = _number(run, key, dim), _number(human, key, dim)
            if mine is None and theirs is None:
                empty.append((title, key))
                continue
            unit, better, desc = _key_info(dim, key)
            pub = report.published.get(key)
            cells = [_e(title) if not titled else "", f'<code title="{_e(desc)}">{_e(key)}</code> <span class="n">{_e(unit)}</span>',
                     _e(better), value_cell(run, key, dim, notes)]
            if human is not None:
                cells.append(value_cell(human, key, dim, notes))
            cells.append(fmt(pub) if pub is not None else '<span class="n">-</span>')
            if human is not None:
                pd_ = paired_difference(report, key)
                if pd_ is not None:
                    ci = pd_["diff_ci95"]
                    cells.append(f"{fmt(pd_['diff'])}" + ("" if ci is None else f' <span class="ci">[{fmt(ci[0])}, {fmt(ci[1])}]</span>')
                                 + f' <span class="n">{pd_["n"]} pair{"s" if pd_["n"] != 1 else ""}</span>')
                    # the whole comparison's small-sample caution is written once above the table
                    shown = None if pd_["n"] == comp["n_common"] else pd_["n"]
                    cells.append(_e(in_words(report.name, report.human_label, pd_["diff"], ci, unit, better, shown)))
                elif mine is not None and theirs is not None:
                    cells.append(f'{fmt(mine - theirs)} <span class="n">(of the values; no paired interval)</span>')
                    cells.append(_e(in_words(report.name, report.human_label, mine - theirs, None, unit, better, None)[:-1]
                                    + "; a whole-set statistic: no paired interval."))
                else:
                    missing = report.name if mine is None else report.human_label
                    cells += ['<span class="why">-</span>', _e(f"no difference computed: {missing} has "
                                                                 "no value (the note below the table)")]
            rows.append(cells)
            titled = True
            fig_rows.append((f"{key} [{unit}] — {title}", [(label, _number(r, key, dim), _ci(r, key))
                                                           for label, r in report.labelled], pub))
    head = ["dimension", "key", "better", who]
    if human is not None:
        head.append(_e(report.human_label))
    head.append("published human")
    if human is not None:
        head += [f"difference ({who} − {_e(report.human_label)}) [95 % CI]", "in words"]
    if rows:
        page.table(head, rows, "summary")
        page.add(notes.html())
        page.figure("summary.png", "every run's value with its 95 % interval (line), per key on its own axis; "
                    "dashed: the published human value (full test set)", plots.summary_intervals(fig_rows))
    else:
        page.add('<p class="why">No headline key has a value in this run or the human answers.</p>')
    if empty:
        page.add('<p class="small">No value in either run (why: in each dimension\'s section): '
                 + ", ".join(f"<code>{_e(k)}</code>" for _, k in empty) + ".</p>")
    if unscored:
        page.add(f'<p class="small">Not scored: {_e(", ".join(unscored))}.</p>')
    if comp is not None:
        # the small-sample note is the caution box above; key notes go to their dimension
        general = [n for n in comp["notes"] if not _key_note(n) and "too few for a bootstrap p-value" not in n]
        if general:
            page.add('<p class="small">About the comparison: ' + "; ".join(_e(n) for n in general) + ".</p>")


def _key_note(note: str) -> bool:
    """A comparison note about keys with values in one run only (shown in its dimension's section)."""
    return note.startswith("values in ")


def problems_section(report: Report, page: Page) -> None:
    """Inputs that could not be read, and what is wrong with each run."""
    for n in report.notes:
        page.add(f'<p class="problem">{_e(n)}</p>')
    for label, r in report.labelled:
        for p in r.problems:
            page.add(f'<p class="problem">{_e(label)}: {_e(p)}</p>')


def _has_problems(report: Report) -> bool:
    return bool(report.notes or any(r.problems for _, r in report.labelled))


def dimension_section(dim: str, report: Report, page: Page) -> None:
    """One dimension: values of every run (each reason once), bars, tests, distributions."""
    labelled, run, human = report.labelled, report.run, report.human
    title = dict(DIMENSIONS)[dim]
    scored_by = [label for label, r in labelled if _scored(r, dim)]
    if not scored_by:
        page.add(f'<p class="why">Not scored in any run of this report (run <code>spearbench score --metrics {dim}</code>).</p>')
        return
    notes = Notes()
    head = ["key", "unit", "better"] + [_e(label) for label, _ in labelled[:2 if human is not None else 1]]
    head.append("published human")
    head += [_e(label) for label, _ in labelled[2 if human is not None else 1:]]
    rows = []
    keys = _aggregate_keys(dim, [r for _, r in labelled])
    for k in keys:
        unit, better, desc = _key_info(dim, k)
        cells = [f'<code title="{_e(desc)}">{_e(k)}</code>', _e(unit), _e(better), value_cell(run, k, dim, notes)]
        if human is not None:
            cells.append(value_cell(human, k, dim, notes))
        pv = report.published.get(k)
        cells.append(fmt(pv) + ' <span class="n">full test set</span>' if pv is not None else
                     f'<span class="n">{"not a published column" if k not in report.published else "not published (-)"}</span>')
        cells += [value_cell(a, k, dim, notes) for a in report.against]
        if k in report.ties:  # the run's and the others' marks (the human answers are the reference)
            idx = [3] + list(range(len(cells) - len(report.against), len(cells)))
            for i, (label, _) in zip(idx, [labelled[0], *labelled[2 if human is not None else 1:]]):
                mark = tie_cell(report.ties, k, label)
                if mark:
                    cells[i] += f' <span class="tie">{_e(mark)}</span>'
        rows.append(cells)
    page.table(head, rows, "values")
    if any(k in report.ties for k in keys):
        page.add(f'<p class="small">{_e(TIE_MARKS_LEGEND)} {_e(next(iter(report.ties.values()))["rule"])}.</p>')
        note = onset_tie_note({k: report.ties[k] for k in keys if k in report.ties})
        if note:  # onset-derived keys: systems of a placed or unshared onset rule are not ranked
            page.add(f'<p class="small">{_e(note)}.</p>')
    page.add(notes.html())
    bar_keys = [k for k in keys if any(_number(r, k, dim) is not None for _, r in labelled)][:6]
    if bar_keys:
        page.figure(f"{dim}__values.png", "aggregate values with 95 % intervals (error bars), each run",
                    plots.bars_with_intervals(title, bar_keys, [(label, r.summary if _scored(r, dim) else {})
                                                                for label, r in labelled]))
    page.add("<h3>Tests against the human answers</h3>")
    _tests(page, dim, report)
    page.add("<h3>Distributions</h3>")
    for m in _plots_for(dim, page, labelled):
        page.add(f'<p class="why">{_e(m)}</p>')
    if dim == "interruptions":
        page.add("<h3>Timing evidence</h3>")
        _timelines(page, run)


def _plots_for(dim: str, page: Page, runs: Sequence[tuple[str, RunData]]) -> list[str]:
    """Add the dimension's distribution plots; returns a sentence per plot that had no data."""
    missing: list[str] = []

    def hist(key: str, xlabel: str, title: str) -> None:
        if _has(runs, key):
            page.figure(f"{dim}__{_slug(key)}.png", f"{title}: per-sample distribution, one panel per run",
                        plots.histogram(title, xlabel, _series_rows(runs, key)))
        else:
            missing.append(f"{title}: no run has per-sample values of {key}")

    if dim == "interruptions":
        hist("latency_ms", "latency (ms)", "latency_ms")
        hist("interrupted_time_ms", "overlap with question speech (ms)", "interrupted_time_ms")
    elif dim == "explainable_features":
        hist("explainable_duration_s", "answer file duration (s)", "answer duration")
        hist("explainable_voiced_ratio", "share of voiced pitch frames", "voiced ratio")
        f0 = ["f0_min_hz", "f0_p10_hz", "f0_p25_hz", "f0_median_hz", "f0_p75_hz", "f0_p90_hz", "f0_max_hz"]
        if any(_has(runs, k) for k in f0):
            page.figure(f"{dim}__f0_statistics.png", "F0 statistics of each answer (Hz; per-questioner normalisation "
                        "enters explainable_normalized_f0_std_avg)", plots.boxes("F0 statistics per answer", "Hz", f0, _series_rows(runs)))
        else:
            missing.append("F0 statistics: no run has voiced answers")
    elif dim == "speech_quality":
        for k in ("UTMOS", "DNSMOS_OVRL", "DistillMOS"):
            hist(k, "predicted MOS (1-5)", k)
        # the per-sample WER: SPEAR's text rule of the first ASR (WER_%_<asr>), else the normalised one
        cands = [k for _, run in runs for r in run.ok_rows for k in r if re.match(r"^WER_%_", k)]
        cands += [k for _, run in runs for r in run.ok_rows for k in r if re.match(r"^WER_norm_%_", k)]
        wer = cands[0] if cands else "WER_%"
        both = [(label, run) for label, run in runs
                if any(r.get(wer) is not None and r.get("explainable_duration_s") is not None for r in run.ok_rows)]
        if both:
            page.figure(f"{dim}__wer_vs_length.png", f"{wer} of each answer against its duration (explainable_duration_s)",
                        plots.scatter("WER against answer length", "answer duration (s)", "WER (%)",
                                      [(label, [r.get("explainable_duration_s") for r in run.ok_rows],
                                        [r.get(wer) for r in run.ok_rows]) for label, run in both]))
        elif _has(runs, wer):
            hist(wer, "WER (%)", wer)
            missing.append("WER against answer length: no answer durations (score explainable_features too)")
        else:
            missing.append("WER: no run has per-sample WER values")
    elif dim == "emotions":
        avd = ("arousal", "valence", "dominance")
        if any(_has(runs, f"answer_{d}") for d in avd):
            page.figure(f"{dim}__avd_scatter.png", "question vs answer arousal / valence / dominance, each sample",
                        plots.question_answer_scatter("question vs answer emotion", avd, _series_rows(runs)))
        else:
            missing.append("A/V/D scatter: no run has per-sample emotion values")
        hist("emotional_naturalness_logit", "logit", "emotional_naturalness_logit")
    elif dim == "language_dialect":
        if any(r.get("answer_dialect") for _, run in runs for r in run.ok_rows):
            page.figure(f"{dim}__answer_dialects.png", "answer dialect (English answers), share per run",
                        plots.category_bars("answer dialect", _series_rows(runs, "answer_dialect")))
        else:
            missing.append("dialect breakdown: no run has answer dialects")
    elif dim == "stances":
        scores = [(label, [v for r in run.ok_rows for k, v in r.items() if re.match(r"^stance_q\d+_score$", k)])
                  for label, run in runs]
        if any(v is not None for _, vals in scores for v in vals):
            page.figure(f"{dim}__stance_scores.png", "judged stance score (-2..+2) of every (row, question) pair, share per run",
                        plots.category_bars("stance score", scores, order=[-2, -1, 0, 1, 2]))
        else:
            missing.append("stance breakdown: no run has judged stances")
    elif dim == "turn_taking":
        hist("turn_taking_offset_loglik", "log-likelihood of the offset", "turn_taking_offset_loglik")
        hist("turn_taking_naturalness", "-DialogNLL", "turn_taking_naturalness")
    return missing


def _caution_once(page: Page, cautions: Sequence[str | None]) -> bool:
    """Write the small-sample cautions of a table once each; ``True`` when there was one."""
    shown = list(dict.fromkeys(c for c in cautions if c))
    for c in shown:
        page.add(f'<p class="caution">{_e(c)}</p>')
    return bool(shown)


def _shared_statistics_note(page: Page, keys: Sequence[str], stats: Sequence[tuple[str, str, str]],
                            ns: Sequence[int]) -> None:
    """When several keys of a tests table show the very same p-values and effect size (related
    keys such as F0 percentiles, at a few pairs, where rank statistics take only a few values),
    say so under the table's heading, naming them: they are computed per key, not copied."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for k, st in zip(keys, stats):
        if st[0] not in ("-", "") or st[1] not in ("-", ""):
            groups.setdefault(st, []).append(k)
    for same in (g for g in groups.values() if len(g) >= 3):
        n = max(ns) if ns else 0
        page.add(f'<p class="caution">{_e(", ".join(same))} show the same p-values and d_z: each is computed on its '
                 f"own values, but with n = {n} pairs whose differences all have the same sign, rank statistics and "
                 "d_z take only a few values; read the differences and intervals, not the p-values.</p>")


def _tests(page: Page, dim: str, report: Report) -> None:
    from spear_metrics.core.stats import SMALL_SAMPLE

    comp, model, hlabel = report.comp, _e(report.name), _e(report.human_label)
    pats = [re.compile(p) for p in SAMPLE_KEYS.get(dim, ())]
    if comp is None:
        page.add('<p class="why">No human answers given (<code>--human</code>): no tests against them.</p>')
        return
    for n in comp["notes"]:
        if _key_note(n):
            ks = [k.strip() for k in n.rsplit(":", 1)[-1].split(",")]
            mine = [k for k in ks if any(p.search(k) for p in pats)]
            if mine:
                page.add(f'<p class="why">{_e(n.rsplit(":", 1)[0])}: {_e(", ".join(mine))} '
                         "(why: the values table above).</p>")
    keys = [k for k in comp["keys"] if any(p.search(k) for p in pats)]
    if not keys:
        page.add('<p class="why">No per-sample value of this dimension in both this run and the human answers: '
                 "not comparable (n = 0).</p>")
        return
    rows = []
    for k in keys:
        e = comp["keys"][k]
        ci = e["diff_ci95"]
        if e["p_value"] is None and e["n"] >= 2 and e["n"] < SMALL_SAMPLE and e.get("note") is None:
            p_boot = f'<span class="why">none (n = {e["n"]} &lt; {SMALL_SAMPLE})</span>'
        else:
            p_boot = fmt_p(e["p_value"], e.get("p_value_floor"))
        wil = fmt_p(e["wilcoxon_p"])
        if e.get("caution") and e.get("wilcoxon_floor") is not None and e["wilcoxon_p"] is not None:
            wil += f' <span class="n">(floor {fmt(e["wilcoxon_floor"])})</span>'
        rows.append([f"<code>{_e(k)}</code>", str(e["n"]), fmt(e["mean_a"]), fmt(e["mean_b"]), fmt(e["diff"]),
                     "-" if ci is None else f"[{fmt(ci[0])}, {fmt(ci[1])}]", p_boot,
                     fmt_p(e.get("p_value_holm")), wil,
                     fmt(e["d_z"]), _e(e["note"] or "")])
    unit = comp.get("bootstrap", {}).get("unit", "row")
    page.add(f"<p>Paired: rows matched by input clip ({comp['n_common']} shared); difference = {model} − {hlabel}; "
             f"the interval and the bootstrap p resample {_e(unit)}s"
             + (f" ({comp['n_clusters_common']} shared)" if comp.get("n_clusters_common") is not None else "")
             + "; p (Holm): the bootstrap p adjusted over the keys of this table.</p>")
    _caution_once(page, [comp["keys"][k].get("caution") for k in keys])
    _shared_statistics_note(page, keys, [(r[6], r[7], r[8]) for r in rows], [comp["keys"][k]["n"] for k in keys])
    page.table(["key", "n pairs", f"mean {model}", f"mean {hlabel}", "difference", "95 % CI", "p (bootstrap)",
                "p (Holm)", "p (Wilcoxon)", "d_z", "note"], rows, "tests")
    urows, ucautions = [], []
    for k in keys:
        for g, u in comp["keys"][k]["unpaired"].items():
            ucautions.append(u.get("caution"))
            urows.append([f"<code>{_e(k)}</code>", _e(g), f"{u['n_a']} / {u['n_b']}", fmt(u["diff"]), fmt_p(u["welch_p"]),
                          fmt_p(u["mannwhitney_p"]), fmt(u["cliffs_delta"]), _e(u["note"] or "")])
    page.add("<p>Unpaired, every scored row of each run (as SPEAR's <code>generate_short_report.py</code>: "
             "Welch's t-test by default, Mann-Whitney U; per subset and pooled) with Cliff's delta:</p>")
    _caution_once(page, ucautions)
    page.table(["key", "subset", f"n {model} / {hlabel}", "difference of means", "p (Welch)", "p (Mann-Whitney U)",
                "Cliff's delta", "note"], urows, "tests")


def _timelines(page: Page, run: RunData) -> None:
    rows = [r for r in run.ok_rows if r.get("question_vad_segments_s") is not None][:N_TIMELINES]
    if not rows:
        page.add('<p class="why">This run\'s per_sample.jsonl holds no timing evidence '
                 "(question_vad_segments_s...): scored by an older interruptions version or not scored.</p>")
        return
    page.add("<p>Why each latency and overlap is what it is: the input clip's VAD segments (both channels mixed), "
             "the answer's VAD segments placed on the question's time line, the overlap (red) and the latency from the "
             "end of question speech to the answer's first speech after the skip point.</p>")
    for r in rows:
        stem = Path(str(r.get("audio_path") or "")).stem
        overlap = ("overlap not measured (no answer_start_time)" if r.get("interrupted_time_ms") is None
                   else f"overlap {fmt(r.get('interrupted_time_ms'), 0)} ms")
        title = (f"row {r['row']} · {stem} · latency {fmt(r.get('latency_ms'), 0)} ms · {overlap} · "
                 f"skip point {fmt(r.get('skip_point_s'), 2)} s")
        page.figure(f"interruptions__timeline_row{r['row']}.png", title,
                    plots.timeline(r, title=title, question_end_time=r.get("question_end_time"),
                                   context_end_time=r.get("context_end_time")))


def runs_section(report: Report, page: Page) -> None:
    """Every run of the report: label, source, rows, problems."""
    page.table(["label", "source", "rows (scored / failed)", "problems"],
               [[_e(label), f"<code>{_e(r.source)}</code>", f"{len(r.rows)} ({len(r.ok_rows)} / {len(r.failed_rows)})",
                 _e("; ".join(r.problems) or "-")] for label, r in report.labelled])


def option_rows(options: dict[str, Any], summary: dict[str, Any] | None = None) -> list[tuple[str, str, str, str]]:
    """``(metric, option, value in effect, given or default)`` for a summary's ``options``.

    A value left at ``None`` is shown as what it means, from the option's declaration (its
    doc's ``(default: ...)``: e.g. ``asr`` -> "the profile's"), followed by what ran when the
    summary records it as ``<option>_models`` (``asr`` -> ``asr_models``: "the profile's:
    faster-whisper-base"); whether a value is the declared default is read from the dimension's
    ``option_schema``.
    """
    summary = summary or {}
    from spear_metrics.core.registry import dimension_class

    out = []
    for dim, opts in options.items():
        if not isinstance(opts, dict):
            out.append(("-", dim, _plain(opts), ""))
            continue
        try:
            schema = {o.name: o for o in dimension_class(dim).option_schema}
        except Exception:  # an unknown or unimportable metric: show the values as recorded
            schema = {}
        for k, v in opts.items():
            o = schema.get(k)
            if v is None:
                m = re.search(r"\(default: ([^)]*)\)", o.doc) if o is not None else None
                shown = m.group(1) if m else "not set"
                ran = summary.get(f"{k}_models")
                if isinstance(ran, list) and ran:
                    shown += ": " + ", ".join(map(str, ran))
            else:
                shown = _plain(v)
            origin = "" if o is None else ("default" if v == o.default else "given")
            out.append((dim, k, shown, origin))
    return out


def _plain(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)


def provenance_section(report: Report, page: Page) -> None:
    """Where the run comes from and how it was scored."""
    run = report.run
    s = run.summary
    rows = [["source", _e(run.source)], ["model", _e(run.name)], ["inference mode", _e(run.inference_mode or "not given")],
            ["spearbench", _e(s.get("spearbench_version", "-"))],
            ["metrics (versions)", _e(", ".join(f"{m} {(s.get('metric_versions') or {}).get(m, '?')}" for m in s.get("metrics") or []) or "-")],
            ["rows", f"{_e(s.get('n_samples', len(run.rows)))} (scored {_e(s.get('n_scored', len(run.ok_rows)))}, "
                     f"failed {_e(s.get('n_failed', len(run.failed_rows)))})"],
            ["processes", _e(s.get("n_processes", "-"))]]
    if "n_missing_answers" in s:
        rows.append(["inputs without an answer", _e(s["n_missing_answers"])])
    b = s.get("bootstrap") or {}
    rows.append(["intervals", _e(f"{b.get('method', 'percentile')} bootstrap, {b.get('n_resamples', '?')} resamples, "
                                 f"seed {b.get('seed', '?')}, {b.get('confidence', 0.95):.0%}; unit: {b.get('unit', 'scored row')}"
                                 + (f" ({b['n_clusters']} resampled)" if b.get("n_clusters") is not None else "")
                                 + (f"; {b['note']}" if b.get("note") else ""))
                 if b else '<span class="why">none in summary.json (scored without --bootstrap or by an older version)</span>'])
    page.table(["", ""], rows, "prov")
    models = s.get("models") or {}
    page.add("<h3>Models behind each key</h3>")
    if models:
        page.table(["keys", "model"], [[f"<code>{_e(k)}</code>", _e(v)] for k, v in models.items()])
    else:
        page.add('<p class="why">summary.json names no model.</p>')
    opts = s.get("options")
    if opts:  # per dimension: every option with the value in effect (older runs: one flat dict)
        orows = option_rows(opts, s)
        given = sum(1 for r in orows if r[3] == "given")
        page.add(f"<h3>Options</h3><details><summary>{len(orows)} options, {given} given, the others at their "
                 "defaults (shown as what they mean)</summary>")
        page.table(["metric", "option", "value in effect", ""],
                   [[_e(d), f"<code>{_e(k)}</code>", _e(v), _e(o)] for d, k, v, o in orows])
        page.add("</details>")
    else:
        page.add("<h3>Options</h3><p>" + ("Defaults (no option given)." if opts == {} else
                                          '<span class="why">not recorded in summary.json (older version)</span>') + "</p>")
    failed = run.failed_rows
    page.add(f"<h3>Failed rows ({len(failed)})</h3>")
    if failed:
        shown = failed[:100]
        page.table(["row", "input clip", "reason"],
                   [[_e(r.get("row")), f"<code>{_e(r.get('audio_path'))}</code>", _e(r.get("error") or "-")] for r in shown])
        if len(failed) > len(shown):
            page.add(f"<p>… and {len(failed) - len(shown)} more (see per_sample.jsonl).</p>")
        page.add("<p>Failed rows enter no mean and no test.</p>")
    else:
        page.add("<p>Every row was scored.</p>")


#: The report's sections, in order (see the module docstring to add one).
def distributional_section(report: Report, page: Page) -> None:
    """SPEAR's distributional baselines and SPEARBench's ``human_likeness_auroc``
    (:func:`spear_metrics.reports.distributional.distributional_section`)."""
    from spear_metrics.core.benchmark import resolve

    # a section module that uses this page's primitives, named (not imported) here: no import circle
    build = resolve("spear_metrics.reports.distributional:distributional_section")
    build(page, report.run, report.labelled, report.human)


SECTIONS: list[Section] = [
    Section("summary", "Summary", summary_section),
    Section("problems", "Problems with the inputs", problems_section, _has_problems),
    *(Section(f"dim-{dim}", title, functools.partial(dimension_section, dim)) for dim, title in DIMENSIONS),
    Section("dim-distributional", "Distributional baselines and human likeness", distributional_section),
    Section("runs", "Runs in this report", runs_section, lambda r: bool(r.human is not None or r.against)),
    Section("provenance", "Provenance", provenance_section),
]


def build_report(
    run: RunData,
    out_dir: str | Path,
    *,
    human: RunData | None = None,
    against: Sequence[RunData] = (),
    notes: Sequence[str] = (),
    n_resamples: int = 1000,
    seed: int = 0,
    sections: Sequence[Section] | None = None,
    bootstrap_unit: str = "conversation",
) -> Path:
    """Write ``out_dir/index.html`` and the plots as PNG files beside it; returns the HTML path.

    Args:
        run: the run reported.
        human: the human answers scored by the same code (tests and plots against them).
        against: other runs shown beside (values and plots).
        notes: lines about inputs that could not be read at all (shown under "Problems").
        n_resamples / seed: the paired bootstrap of the tests against the human answers (and of
            the tie groups of the runs shown); ``bootstrap_unit``: what it resamples,
            ``"conversation"`` or ``"row"``.
        sections: the sections to build (default :data:`SECTIONS`).
    """
    from spear_datasets.ownership import open_folder

    # --out: new, empty or a report folder this tool wrote; every file written is recorded
    with open_folder(out_dir, command="report") as folder:
        folder.remove_recorded()  # the previous report written here (its files only): a page never mixes two
        return _build_report(run, Path(out_dir), human=human, against=against, notes=notes, n_resamples=n_resamples,
                             seed=seed, sections=sections, bootstrap_unit=bootstrap_unit)


def _build_report(run: RunData, out: Path, *, human: RunData | None, against: Sequence[RunData], notes: Sequence[str],
                  n_resamples: int, seed: int, sections: Sequence[Section] | None,
                  bootstrap_unit: str = "conversation") -> Path:
    """:func:`build_report` once ``out`` is open (writes recorded)."""
    labelled: list[tuple[str, RunData]] = [(run.name, run)]
    if human is not None:
        labelled.append((f"human ({human.name})" if human.name != "human" else "human", human))
    labelled += [(a.name, a) for a in against]
    labelled = _unique_labels(labelled)
    comp = None
    if human is not None:
        comp = compare(run, human, n_resamples=n_resamples, seed=seed, names=(labelled[0][0], labelled[1][0]),
                       unit=bootstrap_unit)
    ties: dict[str, Any] = {}
    contestants = {label: r.rows for label, r in labelled if r is not human}
    if len(contestants) >= 2 and n_resamples >= 1:
        keys = list(dict.fromkeys(k for _, r in labelled if r is not human for k in r.summary if f"{k}_ci95" in r.summary))
        onsets = {label: r.summary.get("onset_kind") or "unstated" for label, r in labelled if r is not human}
        ties = leaderboard_ties(contestants, keys, n_resamples=n_resamples, seed=seed, unit=bootstrap_unit,
                                human=human.summary if human is not None else published_human_row(), onset_kinds=onsets)
    report = Report(run, human, list(against), labelled, comp, published_human_row(), list(notes), ties)

    page = Page()
    toc: list[str] = []
    for sec in sections if sections is not None else SECTIONS:
        if not sec.when(report):
            continue
        page.add(f'<section id="{_e(sec.id)}"><h2>{_e(sec.title)}</h2>')
        before = len(page.parts)
        page.section(sec.build, report)
        off = sec.id.startswith("dim-") and not any(_scored(r, sec.id[4:]) for _, r in labelled)
        toc.append(f'<li><a href="#{_e(sec.id)}"{" class=off" if off else ""}>{_e(sec.title)}</a>'
                   + (' <span class="off">(not scored)</span>' if off else "") + "</li>")
        if len(page.parts) == before:
            page.add('<p class="why">Nothing to show.</p>')
        page.add("</section>")

    from spear_datasets.identity import data_label

    lead = (f'<h1>SPEARBench report: {_e(run.name)}</h1>'
            f'<p class="small">Protocol <code>seamless_2t_2s_questions</code>; data scored: '
            f"{_e(data_label(run.summary.get('data')))} ({_e(str((run.summary.get('data') or {}).get('n_rows', '?')))} rows). "
            f'Human answers: '
            f"{_e(human.source) if human else 'not given'}; published human row: SPEAR leaderboard "
            f"(<code>thomasthebaud/SPEAR-benchmark-website</code>, test split, full set).</p>"
            f'<nav class="toc" id="contents"><b>Contents</b><ol>{"".join(toc)}</ol></nav>')
    return write_page(out, f"SPEARBench report: {run.name}", lead, page, run.source)


def load_for_report(source: str, label: str, loader: Callable[[str], RunData]) -> tuple[RunData | None, str | None]:
    """``(run, None)`` or ``(None, "<label> <source> could not be read: <reason>")``."""
    from spear_metrics.reports.runs import RunLoadError

    try:
        return loader(source), None
    except RunLoadError as e:
        return None, f"{label} {source} could not be read: {e}"
