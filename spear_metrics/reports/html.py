"""The per-run HTML report (``spearbench report``): one self-contained file a researcher can attach.

``REPORT_DIR/index.html`` holds, for one scored run:

1. provenance: where the run comes from, its metrics and versions, the models behind each key,
   the options, the bootstrap settings, counts, the failed rows with their reasons, and anything
   wrong with the run (:attr:`spear_metrics.reports.runs.RunData.problems`);
2. one section per SPEAR dimension: each aggregate key's value with its 95 % interval and ``n``
   next to the human answers' (``--human``, a results folder of the human answers scored by the
   same code), the published human row (``spear_metrics/space/data/spear_benchmark.csv``) and any
   ``--against`` runs; a key without a value says why (its note, ``n = 0``, or "not scored");
   the tests against the human answers (paired where rows match, and the unpaired tests of
   SPEAR's ``generate_short_report.py``: Welch, Mann-Whitney U, per subset and pooled, with
   Cliff's delta); plots of the per-sample distributions, model against human;
3. the timing evidence of a few samples (question and answer VAD on one time line, latency and
   overlap marked).

The plots are embedded as ``data:`` PNGs (no network, no script) and also written as PNG files
beside ``index.html``. Nothing in the page depends on the time it was made: the same inputs give
the same file.
"""

from __future__ import annotations

import base64
import csv
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from spear_metrics.reports import plots
from spear_metrics.reports.runs import RunData, compare

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

#: why a key has no unit at all, where the reason is known from the definition (else "n = 0")
EMPTY_REASONS: dict[str, str] = {
    "interrupted_time_ms": "n = 0: no row has an answer_start_time (answers placed at the question end, "
                           "the published '-' of half-duplex systems)",
    "interruptions_%": "n = 0: no row has an answer_start_time (answers placed at the question end, "
                       "the published '-' of half-duplex systems)",
    "latency_ms_speech": "n = 0: no answer holds speech after the skip point",
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


# ------------------------------------------------------------------------------------------- text


def fmt(v: Any, digits: int = 3) -> str:
    """A number for the page (never "nan": a missing value is "-")."""
    from spear_metrics.core.stats import as_number

    x = as_number(v)
    if x is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if x != 0 and (abs(x) < 10 ** -digits or abs(x) >= 1e6):
        return f"{x:.{digits}e}"
    return f"{x:.{digits}f}"


def fmt_p(p: Any) -> str:
    from spear_metrics.core.stats import as_number

    x = as_number(p)
    if x is None:
        return "-"
    return "&lt; 0.001" if x < 0.001 else f"{x:.3f}"


def _e(s: Any) -> str:
    """Text for the page: escaped, absolute local paths reduced to their public form
    (:func:`spear_metrics.results.public_text`: a report travels with a results dataset)."""
    from spear_metrics.results import public_text

    return html.escape(public_text(str(s)) or "", quote=True)


def why_missing(summary: dict[str, Any], key: str, dim: str, scored: bool) -> str:
    """Why a run has no value for ``key``: its note, ``n = 0``, or that it was not scored."""
    if not summary:
        return "no summary.json"
    if not scored:
        return "not scored in this run"
    if key not in summary:
        return "not in summary.json (missing key)"
    for note in (f"{key}_note", f"{key.split('_')[0]}_note", f"{dim}_note"):
        if summary.get(note):
            return str(summary[note])
    if summary.get(f"{key}_n") == 0:
        return EMPTY_REASONS.get(key, "n = 0: no scored row has a value")
    return "null in summary.json"


def value_cell(run: RunData | None, key: str, dim: str) -> str:
    """``value [lo, hi] (n = N)`` of ``key`` in ``run``'s summary, or why there is none."""
    if run is None:
        return '<span class="why">no run given</span>'
    s = run.summary
    scored = dim in (s.get("metrics") or [])
    v = s.get(key) if scored else None
    from spear_metrics.core.stats import as_number

    if as_number(v) is None or isinstance(v, bool):
        return f'<span class="why">{_e(why_missing(s, key, dim, scored))}</span>'
    ci = s.get(f"{key}_ci95")
    n = s.get(f"{key}_n")
    txt = fmt(v)
    if isinstance(ci, list) and len(ci) == 2 and None not in ci:
        txt += f' <span class="ci">[{fmt(ci[0])}, {fmt(ci[1])}]</span>'
    elif f"{key}_ci95" in s:
        txt += ' <span class="ci">[no interval]</span>'
    if n is not None:
        txt += f' <span class="n">n = {_e(n)}</span>'
    return txt


# ------------------------------------------------------------------------------------------- page


@dataclass
class Figure:
    """One plot: file name (PNG beside index.html), caption, PNG bytes."""

    name: str
    caption: str
    data: bytes


@dataclass
class Page:
    """The report being written: HTML parts and the figures (written once at the end)."""

    parts: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)

    def add(self, s: str) -> None:
        self.parts.append(s)

    def figure(self, name: str, caption: str, fig) -> None:
        data = plots.png(fig)
        self.figures.append(Figure(name, caption, data))
        b64 = base64.b64encode(data).decode("ascii")
        self.add(f'<figure><img src="data:image/png;base64,{b64}" alt="{_e(caption)}" data-file="{_e(name)}">'
                 f"<figcaption>{_e(caption)} <code>{_e(name)}</code></figcaption></figure>")

    def table(self, head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> None:
        """A table; cells are HTML already (escape text with :func:`_e`)."""
        self.add(f'<table class="{cls}"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>")
        for r in rows:
            self.add("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>")
        self.add("</tbody></table>")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}h3{margin-top:1.4em}
table{border-collapse:collapse;margin:.6em 0;font-size:.86em}td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}.ci{color:#555}.n{color:#888;font-size:.9em}.why{color:#a15c00;font-style:italic}
.problem{color:#b00020}figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.85em;color:#555}
code{font-size:.92em}.small{font-size:.85em;color:#555}
"""


def _series_rows(runs: Sequence[tuple[str, RunData]], key: str | None = None) -> list[tuple[str, list]]:
    return [(label, [r.get(key) for r in run.ok_rows] if key else run.ok_rows) for label, run in runs]


def _has(runs: Sequence[tuple[str, RunData]], key: str) -> bool:
    from spear_metrics.core.stats import as_number

    return any(as_number(r.get(key)) is not None for _, run in runs for r in run.ok_rows)


def _plots_for(dim: str, page: Page, runs: Sequence[tuple[str, RunData]]) -> list[str]:
    """Add the dimension's distribution plots; returns a sentence per plot that had no data."""
    missing: list[str] = []

    def hist(key: str, xlabel: str, title: str) -> None:
        if _has(runs, key):
            page.figure(f"{dim}__{_slug(key)}.png", f"{title}: per-sample distribution, each run",
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
            hist(wer, "WER (%)", "WER_%")
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


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", s).strip("_") or "x"


def _tests_section(page: Page, dim: str, comp: dict[str, Any] | None, model: str) -> None:
    pats = [re.compile(p) for p in SAMPLE_KEYS.get(dim, ())]
    if comp is None:
        page.add('<p class="why">No human answers given (<code>--human</code>): no tests against them.</p>')
        return
    keys = [k for k in comp["keys"] if any(p.search(k) for p in pats)]
    if not keys:
        page.add('<p class="why">No per-sample value of this dimension in both this run and the human answers: '
                 "not comparable (n = 0).</p>")
        return
    rows = []
    for k in keys:
        e = comp["keys"][k]
        ci = e["diff_ci95"]
        rows.append([f"<code>{_e(k)}</code>", str(e["n"]), fmt(e["mean_a"]), fmt(e["mean_b"]), fmt(e["diff"]),
                     "-" if ci is None else f"[{fmt(ci[0])}, {fmt(ci[1])}]", fmt_p(e["p_value"]), fmt_p(e["wilcoxon_p"]),
                     fmt(e["d_z"]), _e(e["note"] or "")])
    page.add(f"<p>Paired: rows matched by input clip ({comp['n_common']} shared); difference = {_e(model)} − human.</p>")
    page.table(["key", "n pairs", f"mean {_e(model)}", "mean human", "difference", "95 % CI", "p (bootstrap)",
                "p (Wilcoxon)", "d_z", "note"], rows, "tests")
    urows = []
    for k in keys:
        for g, u in comp["keys"][k]["unpaired"].items():
            urows.append([f"<code>{_e(k)}</code>", _e(g), f"{u['n_a']} / {u['n_b']}", fmt(u["diff"]), fmt_p(u["welch_p"]),
                          fmt_p(u["mannwhitney_p"]), fmt(u["cliffs_delta"]), _e(u["note"] or "")])
    page.add("<p>Unpaired, every scored row of each run (as SPEAR's <code>generate_short_report.py</code>: "
             "Welch's t-test by default, Mann-Whitney U; per subset and pooled) with Cliff's delta:</p>")
    page.table(["key", "subset", f"n {_e(model)} / human", "difference of means", "p (Welch)", "p (Mann-Whitney U)",
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


def _provenance(page: Page, run: RunData) -> None:
    s = run.summary
    page.add('<section id="provenance"><h2>Provenance</h2>')
    for p in run.problems:
        page.add(f'<p class="problem">Problem with this run: {_e(p)}</p>')
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
                                 f"seed {b.get('seed', '?')}, {b.get('confidence', 0.95):.0%}; unit: {b.get('unit', 'scored row')}")
                 if b else '<span class="why">none in summary.json (scored without --bootstrap or by an older version)</span>'])
    page.table(["", ""], rows, "prov")
    models = s.get("models") or {}
    page.add("<h3>Models behind each key</h3>")
    if models:
        page.table(["keys", "model"], [[f"<code>{_e(k)}</code>", _e(v)] for k, v in models.items()])
    else:
        page.add('<p class="why">summary.json names no model.</p>')
    page.add("<h3>Options</h3>")
    opts = s.get("options")
    if opts:  # per dimension: every option with the value in effect (older runs: one flat dict)
        rows_ = [[_e(d), f"<code>{_e(k)}</code>", _e(v)] for d, o in opts.items() if isinstance(o, dict) for k, v in o.items()]
        rows_ += [["-", f"<code>{_e(k)}</code>", _e(v)] for k, v in opts.items() if not isinstance(v, dict)]
        page.table(["metric", "option", "value in effect"], rows_)
    else:
        page.add("<p>" + ("Defaults (no option given)." if opts == {} else
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
        page.add("<p>None: every row was scored.</p>")
    page.add("</section>")


def build_report(
    run: RunData,
    out_dir: str | Path,
    *,
    human: RunData | None = None,
    against: Sequence[RunData] = (),
    notes: Sequence[str] = (),
    n_resamples: int = 1000,
    seed: int = 0,
) -> Path:
    """Write ``out_dir/index.html`` and the plots as PNG files beside it; returns the HTML path.

    Args:
        run: the run reported.
        human: the human answers scored by the same code (tests and plots against them).
        against: other runs shown beside (values and plots).
        notes: lines about inputs that could not be read at all (shown at the top).
        n_resamples / seed: the paired bootstrap of the tests against the human answers.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    page = Page()
    published = published_human_row()
    comp = compare(run, human, n_resamples=n_resamples, seed=seed) if human is not None else None
    labelled: list[tuple[str, RunData]] = [(run.name, run)]
    if human is not None:
        labelled.append((f"human ({human.name})" if human.name != "human" else "human", human))
    labelled += [(a.name, a) for a in against]

    page.add(f"<h1>SPEARBench report: {_e(run.name)}</h1>")
    page.add(f'<p class="small">Protocol <code>seamless_2t_2s_questions</code>. Values are means over scored rows '
             f"with a 95 % bootstrap interval [lo, hi] and n (units that entered the value). Human answers: "
             f"{_e(human.source) if human else 'not given'}; published human row: SPEAR leaderboard "
             f"(<code>thomasthebaud/SPEAR-benchmark-website</code>, test split, full set).</p>")
    for n in notes:
        page.add(f'<p class="problem">{_e(n)}</p>')
    if comp is not None:
        for n in comp["notes"]:
            page.add(f'<p class="why">Against the human answers: {_e(n)}</p>')
    _provenance(page, run)
    if against or human:
        page.add('<section id="runs"><h2>Runs in this report</h2>')
        page.table(["label", "source", "rows (scored / failed)", "problems"],
                   [[_e(label), f"<code>{_e(r.source)}</code>", f"{len(r.rows)} ({len(r.ok_rows)} / {len(r.failed_rows)})",
                     _e("; ".join(r.problems) or "-")] for label, r in labelled])
        page.add("</section>")

    for dim, title in DIMENSIONS:
        page.add(f'<section id="dim-{dim}"><h2>{_e(title)} <code class="small">{dim}</code></h2>')
        scored_by = [label for label, r in labelled if dim in (r.summary.get("metrics") or [])]
        if not scored_by:
            page.add(f'<p class="why">Not scored in any run of this report (run <code>spearbench score --metrics {dim}</code>).</p>')
        head = ["key", "unit", "better", _e(run.name)]
        if human is not None:
            head.append("human answers")
        head.append("published human")
        head += [_e(a.name) for a in against]
        rows = []
        for k in _aggregate_keys(dim, [r for _, r in labelled]):
            unit, better, desc = _key_info(dim, k)
            cells = [f'<code title="{_e(desc)}">{_e(k)}</code>', _e(unit), _e(better), value_cell(run, k, dim)]
            if human is not None:
                cells.append(value_cell(human, k, dim))
            pv = published.get(k)
            cells.append(fmt(pv) + ' <span class="n">full test set</span>' if pv is not None else
                         f'<span class="why">{"not a published column" if k not in published else "not published (-)"}</span>')
            cells += [value_cell(a, k, dim) for a in against]
            rows.append(cells)
        page.table(head, rows, "values")
        bar_keys = [k for k in _aggregate_keys(dim, [r for _, r in labelled])
                    if any(isinstance(r.summary.get(k), (int, float)) and not isinstance(r.summary.get(k), bool)
                           and dim in (r.summary.get("metrics") or []) for _, r in labelled)][:6]
        if bar_keys:
            page.figure(f"{dim}__values.png", "aggregate values with 95 % intervals (error bars), each run",
                        plots.bars_with_intervals(title, bar_keys, [(label, r.summary) for label, r in labelled]))
        if scored_by:
            page.add("<h3>Tests against the human answers</h3>")
            _tests_section(page, dim, comp, run.name)
            page.add("<h3>Distributions</h3>")
            for m in _plots_for(dim, page, labelled):
                page.add(f'<p class="why">{_e(m)}</p>')
            if dim == "interruptions":
                page.add("<h3>Timing evidence</h3>")
                _timelines(page, run)
        page.add("</section>")
    from spear_metrics.reports.distributional import distributional_section

    distributional_section(page, run, labelled)

    body = "\n".join(page.parts)
    doc = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>SPEARBench report: {_e(run.name)}</title>'
           f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>\n'
           f"<body>\n{body}\n</body></html>\n")
    for f in page.figures:
        (out / f.name).write_bytes(f.data)
    path = out / "index.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(path)
    return path


def load_for_report(source: str, label: str, loader: Callable[[str], RunData]) -> tuple[RunData | None, str | None]:
    """``(run, None)`` or ``(None, "<label> <source> could not be read: <reason>")``."""
    from spear_metrics.reports.runs import RunLoadError

    try:
        return loader(source), None
    except RunLoadError as e:
        return None, f"{label} {source} could not be read: {e}"
