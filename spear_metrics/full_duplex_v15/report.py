"""The HTML report of a Full-Duplex-Bench v1.5 run (``spearbench report RESULTS --out REPORT/``,
through the descriptor's ``report`` hook: :func:`write_report`).

``REPORT/index.html`` is built with the report's own page primitives
(:mod:`spear_metrics.reports.html`: :class:`~spear_metrics.reports.html.Page`, its sections, cells
and plots) and holds, in order:

1. **Behaviour tags**: per subset and over all, each tag's share (upstream's ``stats_by_axis``) with
   its 95 % interval over samples and ``n``, upstream's rounded printout, and a bar plot;
2. **Latency**: stop and response latency (s) per subset, with intervals and a bar plot;
3. **Before/after features**: the 5 % trimmed means of ``pre``/``post``/``clean`` per subset and
   upstream's paired t-tests (``pre_vs_post``, ``clean_vs_post``): mean difference with its t
   interval, ``t(df)``, ``p``, Holm's ``p_adj``, ``d_z``, pairs trimmed, and the tests skipped with
   upstream's reason;
4. **Samples**: one row per sample: subset/id, status, overlap window, the judge's tags and seed,
   both latencies, and players for ``input.wav``, ``output.wav`` and ``clean_output.wav`` when the
   sample's folder is on this machine, with the time line (Silero speech of both sides, overlap
   window shaded) of the first :data:`N_TIMELINES` scored samples;
5. **Provenance**: the models behind each key (judge, ASR, VAD, pitch), the judge's calls
   (requested and returned model ids, requests, cache), the judge prompt's sha256, where each
   transcript came from, the inference run of each subset folder (agent, time line, chunk) and the
   bootstrap settings.

Per-subset numbers are read from ``RESULTS/<subset>/summary.json`` (what ``fdb score`` wrote);
where the run has none (a results dataset, a copied folder), they are recomputed from the rows
with :func:`spear_metrics.full_duplex_v15.scoring.aggregate` and the run's recorded bootstrap
settings, and the page says so.

Audio players point at the sample files by a path relative to ``index.html`` (nothing is copied:
a v1.5 run holds hundreds of recordings); they play where the run's sample folders are, and a
sample folder whose relative path would name folders above a user's own (the common folder of
the report and the sample is ``/`` or one level below) gets no player. ``push-results`` publishes
the page and its PNG files, not the recordings.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from spear_metrics.full_duplex_v15 import BENCHMARK
from spear_metrics.full_duplex_v15.behaviour import PROMPT_SHA256, TAGS
from spear_metrics.reports.html import Notes, Page, Section, _e, fmt, fmt_p, value_cell, write_page
from spear_metrics.reports.runs import RunData

NAME = BENCHMARK.name
#: how many scored samples get a time line figure
N_TIMELINES = 6
LATENCIES = ("stop_latency_s", "response_latency_s")
#: the features shown per side (``<side>_<feature>``), upstream's before/after metrics first
FEATURES = ("wpm", "mean_pitch", "std_pitch", "mean_intensity", "std_intensity", "speech_dur_s", "utmosv2")
SIDES = ("pre", "post", "clean")
#: where ``spearbench fdb infer`` keeps its records in a task folder (its ``run_info.json``)
INFER_WORK = ".spearbench-fdb-infer"


class _Run:
    """What the sections read: the run, its per-subset summaries (``all`` last) as runs of their
    own (so :func:`~spear_metrics.reports.html.value_cell` reads them), the flat rows, the report
    folder and where the per-subset numbers came from."""

    def __init__(self, run: RunData, out: Path):
        from spear_metrics.full_duplex_v15.results import flat_row

        self.run = run
        self.out = out
        self.rows = sorted((flat_row(r) for r in run.rows), key=lambda r: r.get("row", 0))
        try:
            self.subsets, self.origin = subset_summaries(run)
        except Exception as e:  # noqa: BLE001 -- a summary of the wrong shape: no per-subset numbers, said
            from spear_metrics.core.records import one_line

            self.subsets, self.origin = {}, "unreadable"
            run.problems.append(f"per-subset numbers: none ({one_line(e)})")
        self.labelled = [(s, RunData(run.source, s, summ, [])) for s, summ in self.subsets.items()]
        if len(self.subsets) > 1 or not self.subsets:
            self.labelled.append(("all", RunData(run.source, "all", run.summary, [])))


def subset_summaries(run: RunData) -> tuple[dict[str, dict[str, Any]], str]:
    """``({subset: summary}, origin)`` of a v1.5 run, subsets in the run's order: each
    ``<source>/<subset>/summary.json`` that ``fdb score`` wrote (origin ``"summary.json"``), the run's
    own summary for a one-subset run, else recomputed from the run's ``ok`` rows (origin
    ``"recomputed"``, :func:`~spear_metrics.full_duplex_v15.scoring.aggregate` with the recorded
    bootstrap's resamples and seed)."""
    import json

    s = run.summary
    names = list(s.get("subsets") or {}) or list(dict.fromkeys(str(r.get("subset")) for r in run.rows if r.get("subset")))
    if s.get("subset") and names == [s["subset"]]:
        return {s["subset"]: s}, "summary.json"
    found: dict[str, dict[str, Any]] = {}
    for name in names:
        p = Path(str(run.source)) / name / "summary.json"
        try:
            obj = json.loads(p.read_text(encoding="utf-8")) if p.is_file() and p.stat().st_size < 2 ** 24 else None
        except (OSError, ValueError):
            obj = None
        if isinstance(obj, dict) and obj.get("benchmark") == NAME:
            found[name] = obj
    if names and len(found) == len(names):
        return found, "summary.json"
    return _recomputed(run, names), "recomputed"


def _recomputed(run: RunData, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    from spear_metrics.full_duplex_v15.results import _mos_keys, _values, flat_row
    from spear_metrics.full_duplex_v15.scoring import aggregate

    boot = run.summary.get("bootstrap") or {}
    out = {}
    for name in names:
        rows = [flat_row(r) for r in run.ok_rows if r.get("subset") == name]
        agg = aggregate([_values(r, run.summary) for r in rows], n_resamples=int(boot.get("n_resamples") or 0),
                        seed=int(boot.get("seed") or 0), mos_keys=_mos_keys(run.summary))
        subset_rows = [r for r in run.rows if r.get("subset") == name]
        out[name] = {**agg, "metrics": [NAME], "benchmark": NAME, "bootstrap": boot,
                     "n_samples": len(subset_rows), "n_scored": len(rows), "n_failed": len(subset_rows) - len(rows)}
    return out


# ------------------------------------------------------------------------------------------ sections


def _values_table(page: Page, ctx: _Run, keys: Sequence[str]) -> None:
    """One row per subset (and ``all``), one column per key: value [interval] n, or why none."""
    notes = Notes()
    page.table(["subset", *(f"<code>{_e(k)}</code>" for k in keys)],
               [[_e(label), *(value_cell(r, k, NAME, notes) for k in keys)] for label, r in ctx.labelled])
    page.add(notes.html())


def _bars(page: Page, ctx: _Run, name: str, title: str, keys: Sequence[str]) -> None:
    from spear_metrics.reports import plots

    page.figure(name, f"{title}, 95 % intervals over samples",
                plots.bars_with_intervals(title, list(keys), [(label, r.summary) for label, r in ctx.labelled]))


def tags_section(ctx: _Run, page: Page) -> None:
    """The judge's tag shares per subset with intervals, upstream's printout, the plot."""
    page.add('<p class="small">Each tag\'s count over all tags counted in the subset (upstream\'s '
             "<code>stats_by_axis</code>; a sample may carry several tags), with a percentile bootstrap 95 % interval "
             "over samples. Upstream's printout: the same shares rounded to 2 decimals, unseen tags left out.</p>")
    _values_table(page, ctx, TAGS)
    page.table(["subset", "judged samples", "upstream's printout"],
               [[_e(label), _e(r.summary.get("n_judged", "-")),
                 _e(", ".join(f"{k}: {v}" for k, v in (r.summary.get("behaviour_ratios_upstream") or {}).items()) or "-")]
                for label, r in ctx.labelled])
    _bars(page, ctx, "fdb15__tags.png", "Behaviour tags per subset", TAGS)


def latency_section(ctx: _Run, page: Page) -> None:
    """Stop and response latency per subset (s)."""
    page.add('<p class="small">Means over samples (s). <code>stop_latency_s</code>: the length of the first '
             "intersection of user and model speech that meets the overlap window; <code>response_latency_s</code>: "
             "model start minus user end of the first response interval whose user end is at or after the overlap "
             "start (the docs give the full definitions).</p>")
    _values_table(page, ctx, LATENCIES)
    _bars(page, ctx, "fdb15__latency.png", "Latency per subset (s)", LATENCIES)


def features_section(ctx: _Run, page: Page) -> None:
    """The trimmed feature means per side and upstream's paired tests with Holm's correction."""
    page.add('<p class="small"><code>pre</code>: the reply before the word that holds or follows the overlap\'s '
             "end; <code>post</code>: the rest; <code>clean</code>: the reply to the clean input. 5 % trimmed means "
             "over samples.</p>")
    for f in FEATURES:
        keys = [f"{side}_{f}" for side in SIDES]
        if not any(k in r.summary for _, r in ctx.labelled for k in keys):
            continue
        page.add(f"<h3><code>{_e(f)}</code></h3>")
        _values_table(page, ctx, keys)
    page.add("<h3>Paired tests (upstream's significance_test.py)</h3>"
             '<p class="small">On the samples tagged <code>C_RESPOND</code> whose pre, post and clean WPM are not 0; '
             "pairs beyond median &plusmn; 3.5 &times; 1.4826 &times; MAD of the differences dropped; "
             "<code>scipy.stats.ttest_rel(after, before)</code>; &Delta; = after &minus; before with its t interval; "
             "<code>d_z</code> = &Delta; / sd of the differences; <code>p_adj</code>: Holm over the tests that ran in "
             "the subset.</p>")
    for label, r in ctx.labelled:
        for key, family in (("significance", "upstream's metrics"), ("significance_project_mos", "project MOS keys")):
            sig = r.summary.get(key)
            if not isinstance(sig, dict):
                continue
            page.add(f"<h4>{_e(label)}: {_e(family)} ({_e(sig.get('n_samples', 0))} samples)</h4>")
            tests = [t for t in sig.get("tests") or [] if isinstance(t, dict)]
            if tests:
                page.table(["pair", "metric", "n used (dropped)", "M before", "M after", "&Delta; [95 % CI]", "t (df)",
                            "p", "p_adj (Holm)", "d_z"],
                           [[_e(t.get("pair")), f"<code>{_e(t.get('metric'))}</code>",
                             f"{_e(t.get('n_used'))} ({_e(t.get('n_dropped'))})", fmt(t.get("mean_before")),
                             fmt(t.get("mean_after")),
                             f"{fmt(t.get('mean_diff'))} [{fmt(t.get('ci95_low'))}, {fmt(t.get('ci95_high'))}]",
                             f"{fmt(t.get('t'))} ({_e(t.get('df'))})", fmt_p(t.get("p_t")), fmt_p(t.get("p_adj")),
                             fmt(t.get("cohen_dz"))] for t in tests], "tests")
                notes = [f"{t.get('pair')}:{t.get('metric')}: {t.get('note')}" for t in tests if t.get("note")]
                page.add("".join(f'<p class="why">{_e(n)}</p>' for n in notes))
            skipped = [s for s in sig.get("skipped") or [] if isinstance(s, dict)]
            if skipped:
                by_reason: dict[str, list[str]] = {}
                for s in skipped:
                    by_reason.setdefault(str(s.get("reason")), []).append(f"{s.get('pair')}:{s.get('metric')}")
                page.add("".join(f'<p class="why">Skipped ({_e(why)}): {_e(", ".join(which))}</p>'
                                 for why, which in by_reason.items()))
            if not tests and not skipped:
                page.add('<p class="why">No test.</p>')


def audio_src(path: str | os.PathLike, out: Path) -> str | None:
    """The ``src`` of a player for the local file ``path`` in a page in ``out``: its path relative
    to ``out`` (POSIX separators); ``None`` when the file is not here, or when the two share no
    folder below a top-level one (the relative path would name folders above a user's own)."""
    p = Path(path)
    if not p.is_file():
        return None
    a, b = os.path.abspath(p), os.path.abspath(out)
    try:
        common = Path(os.path.commonpath([a, b]))
    except ValueError:  # other drives
        return None
    if len(common.parts) < 3:
        return None
    return Path(os.path.relpath(a, b)).as_posix()


def _player(row: dict[str, Any], name: str, out: Path) -> str:
    ap = row.get("audio_path")
    src = audio_src(Path(str(ap)).parent / name, out) if ap else None
    if src is None:
        return '<span class="n">-</span>'
    from urllib.parse import quote

    return f'<audio controls preload="none" src="{_e(quote(src))}" title="{_e(name)}"></audio>'


def samples_section(ctx: _Run, page: Page) -> None:
    """The per-sample table (players where the files are here) and a few time lines."""
    out = ctx.out
    players = any(r.get("audio_path") and audio_src(Path(str(r["audio_path"])).parent / "input.wav", out)
                  for r in ctx.rows)
    page.add('<p class="small">Overlap window: <code>metadata.json</code> <code>timestamps</code> (s on '
             "<code>input.wav</code>'s time line). " +
             ("The players read each sample's own files by a path relative to this page (nothing is copied): "
              "they play on a machine that holds the run's sample folders at the same place." if players else
              "No sample folder of this run is on this machine (or it lies outside the report's folder tree): "
              "no players.") + "</p>")
    body = []
    for r in ctx.rows:
        ov = r.get("overlap")
        window = (f"{fmt(ov[0])}&ndash;{fmt(ov[1])}" if isinstance(ov, (list, tuple)) and len(ov) == 2 else "-")
        ok = r.get("status") == "ok"
        body.append([_e(f"{r.get('subset')}/{r.get('id')}"),
                     _e(r.get("status")) if ok else f'<span class="problem">{_e(r.get("status"))}</span>',
                     window, _e(r.get("behaviour") or "-"), _e(r.get("judge_seed") if r.get("judge_seed") is not None else "-"),
                     fmt(r.get("stop_latency_s")), fmt(r.get("response_latency_s")),
                     _player(r, "input.wav", out), _player(r, "output.wav", out), _player(r, "clean_output.wav", out),
                     "" if ok else _e(r.get("error") or "-")])
    page.table(["sample", "status", "overlap window (s)", "behaviour", "judge seed", "stop latency (s)",
                "response latency (s)", "input", "output", "clean output", "reason"], body, "samples")
    from spear_metrics.full_duplex_v15.ui import sample_text, timeline_figure

    shown = [r for r in ctx.rows if r.get("status") == "ok" and r.get("user_segments") is not None][:N_TIMELINES]
    if shown:
        page.add("<h3>Time lines</h3>")
    for r in shown:
        title = f"{r.get('subset')}/{r.get('id')} · {sample_text(r)}"
        page.figure(f"fdb15__timeline_row{r.get('row')}.png", title, timeline_figure(r))


def provenance_section(ctx: _Run, page: Page) -> None:
    """Judge, ASR, VAD and inference provenance, bootstrap, failed rows."""
    from spear_metrics.core.records import read_run_info

    run, s = ctx.run, ctx.run.summary
    boot = s.get("bootstrap") or {}
    origin = ("each subset's <code>summary.json</code>" if ctx.origin == "summary.json" else
              "recomputed here from the rows (the run holds no per-subset summary.json) with the recorded bootstrap")
    page.table(["", ""], [
        ["source", f"<code>{_e(run.source)}</code>"], ["model", _e(run.name)],
        ["scoring", _e(f"{s.get('protocol', 'Full-Duplex-Bench v1.5')}, {NAME} "
                       f"{(s.get('metric_versions') or {}).get(NAME, '?')}, spearbench {s.get('spearbench_version', '-')}")],
        ["samples", _e(f"{s.get('n_samples', len(run.rows))} (scored {s.get('n_scored', len(run.ok_rows))}, "
                       f"failed {s.get('n_failed', len(run.failed_rows))})")],
        ["per-subset numbers", origin],
        ["intervals", _e(f"{boot.get('method', 'percentile')} bootstrap over samples, {boot.get('n_resamples', '?')} "
                         f"resamples, seed {boot.get('seed', '?')}") if boot else
         '<span class="why">none recorded</span>'],
    ], "prov")
    page.add("<h3>Models behind each key</h3>")
    models = s.get("models") or {}
    page.table(["part", "model"], [[f"<code>{_e(k)}</code>", _e(v)] for k, v in models.items()] or
               [["-", '<span class="why">summary.json names no model</span>']])
    page.add("<h3>Behaviour judge</h3>")
    j = s.get("judge_calls") or {}
    cache = j.get("cache") or {}
    prompt = s.get("judge_prompt_sha256")
    page.table(["", ""], [
        ["requested model", _e(j.get("requested_model", "-"))],
        ["returned model ids", _e(", ".join(f"{k} ({v})" for k, v in (j.get("returned_models") or {}).items()) or
                                  "none returned")],
        ["calls / answers / requests / answers from the cache",
         _e(" / ".join(str(j.get(k, "-")) for k in ("calls", "answers", "requests", "answers_from_cache")))],
        ["reply cache", _e(f"{cache.get('mode', '-')}, {cache.get('hits', '-')} hits, {cache.get('misses', '-')} misses")],
        ["prompt (upstream's behavior.txt) sha256",
         f"<code>{_e(prompt)}</code>" if prompt else
         f"<code>{_e(PROMPT_SHA256)}</code> <span class=\"n\">(the packaged prompt, the only one scoring accepts; "
         "the summary records none)</span>"],
    ] if j else [["-", _e(s.get("behaviour_note") or "no judge calls recorded")]], "prov")
    page.add("<h3>Transcripts</h3>")
    counts: dict[str, int] = {}
    for r in ctx.rows:
        src = r.get("asr_source")
        if isinstance(src, str):
            import json

            try:
                src = json.loads(src)
            except ValueError:
                src = None
        for name, where in (src or {}).items():
            counts[f"{name}: {where}"] = counts.get(f"{name}: {where}", 0) + 1
    page.table(["transcript: source", "samples"], [[_e(k), _e(n)] for k, n in sorted(counts.items())] or
               [["-", '<span class="why">not recorded</span>']])
    page.add("<h3>Inference (the replies and their time line)</h3>")
    root = s.get("root")
    infer_rows = []
    for name in ctx.subsets:
        info = read_run_info(Path(str(root)) / name / INFER_WORK) if root else {}
        if info:
            infer_rows.append([_e(name), _e(info.get("agent", "-")), _e(info.get("timeline", "-")),
                               _e(info.get("chunk_ms", "-")), _e(info.get("asr") or "none (transcribed when scored)"),
                               _e(f"{info.get('n_done', '-')} / {info.get('n_samples', '-')}")])
        else:
            infer_rows.append([_e(name), '<span class="why">no record of spearbench fdb infer in the subset folder '
                               "(replies written otherwise, or the folder is not on this machine)</span>", "", "", "", ""])
    page.table(["subset", "agent", "time line (onset rule)", "chunk (ms)", "ASR", "halves done / run"], infer_rows)
    failed = run.failed_rows
    page.add(f"<h3>Failed samples ({len(failed)})</h3>")
    if failed:
        page.table(["sample", "reason"], [[_e(f"{r.get('subset')}/{r.get('id')}"), _e(r.get("error") or "-")]
                                          for r in failed[:100]])
        page.add("<p>Failed samples enter no share, mean or test.</p>")
    else:
        page.add("<p>Every sample was scored.</p>")


SECTIONS: list[Section] = [
    Section("tags", "Behaviour tags", tags_section),
    Section("latency", "Stop and response latency", latency_section),
    Section("features", "Before/after features and their tests", features_section),
    Section("samples", "Samples", samples_section),
    Section("provenance", "Provenance", provenance_section),
]


def write_report(run: RunData, out_dir: str | Path) -> Path:
    """Write ``out_dir/index.html`` (and its plots as PNG files beside it) for a v1.5 run; returns
    the page's path. ``out_dir``: new, empty or a report folder this tool wrote (the previous
    report's files are replaced, nothing else is touched).

    Raises:
        spear_datasets.ownership.OutFolderError: ``out_dir`` holds what this tool did not write.
        spear_datasets.files.OutputError: a file cannot be written.
    """
    from spear_datasets.ownership import open_folder

    out = Path(out_dir)
    with open_folder(out, command="report") as folder:
        folder.remove_recorded()  # the previous report written here (its files only): a page never mixes two
        ctx = _Run(run, out)
        page = Page()
        toc = []
        for sec in SECTIONS:
            page.add(f'<section id="{_e(sec.id)}"><h2>{_e(sec.title)}</h2>')
            page.section(sec.build, ctx)
            page.add("</section>")
            toc.append(f'<li><a href="#{_e(sec.id)}">{_e(sec.title)}</a></li>')
        s = run.summary
        lead = (f"<h1>Full-Duplex-Bench v1.5 report: {_e(run.name)}</h1>"
                f'<p class="small">Subsets: {_e(", ".join(ctx.subsets) or "-")}; samples {_e(s.get("n_samples", len(run.rows)))} '
                f'(scored {_e(s.get("n_scored", len(run.ok_rows)))}). Definitions: docs/full-duplex-bench-v1.5.md.</p>'
                + "".join(f'<p class="problem">{_e(p)}</p>' for p in run.problems)
                + f'<nav class="toc" id="contents"><b>Contents</b><ol>{"".join(toc)}</ol></nav>')
        return write_page(out, f"Full-Duplex-Bench v1.5 report: {run.name}", lead, page, run.source)
