"""SPEARBench leaderboard Space (gradio Blocks).

- Leaderboard: the published SPEAR table (``data/spear_benchmark.csv``, from
  ``thomasthebaud/SPEAR-benchmark-website``, MIT, licence in ``data/LICENSE.spear-website``) is
  the table's initial value, merged with results datasets: local folders and Hub ids given at
  start (``SPEARBENCH_RESULTS`` env var, ``--results`` CLI argument) and Hub ids typed in the
  page or passed to the API. Columns are the published keys grouped by the seven SPEAR
  dimensions, each labelled with its unit and direction of "better", all from the dimensions'
  ``MetricKey`` declarations (:mod:`spear_metrics.core.columns`). Missing values show "-", never 0.
- What may be read: :class:`spear_metrics.results.SourcePolicy` (start sources by their public
  label, Hub ids; never a server path typed into the page or the API; no server path in any
  message or cell).
- One tab per registered benchmark with a Space tab (:func:`benchmark_tabs`: each descriptor's
  :class:`~spear_metrics.core.benchmark.SpaceTab`): its results datasets, one row each.
- Per-sample browser: input clip (both speakers), human answer and model answer, transcripts
  and that sample's scores; filters by subset and by a range of one per-sample value.
- Plots: latency and answer-duration distributions against the human ones; per-dimension bars
  with the 95 % intervals of results datasets as error bars.
- A results dataset's values show their 95 % bootstrap interval and ``n`` (``summary.json``
  ``<key>_ci95`` / ``<key>_n``); a sample's timing evidence is drawn as a timeline (both
  speakers' waveforms, the VAD segments, latency and overlap); the Report tab shows each results
  dataset's ``report/index.html`` (``spearbench report``) in a sandboxed frame.

The tables, the sample browser and the plots are :mod:`spear_metrics.space.tables`,
:mod:`spear_metrics.space.samples` and :mod:`spear_metrics.space.plots`; this module wires them
into the page (:func:`build_app`) and runs it (:func:`main`).

Run locally: ``python -m spear_metrics.space [--results SRC ...]`` (honours ``GRADIO_SERVER_NAME``
and ``GRADIO_SERVER_PORT``). On Hugging Face Spaces this file is the Space's ``app.py``
(``spearbench publish`` / ``scripts/build_space.py`` assemble the folder).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from spear_metrics.core.columns import groups
from spear_metrics.results import PROTOCOL
from spear_metrics.space.plots import dimension_plot, distribution_plot
from spear_metrics.space.samples import (
    ALL_SUBSETS, NO_METRIC, _audio_file, _report_choices, _sample_label, _samples_models, filtered_rows,
    numeric_sample_columns, report_view, sample_view, timeline_view,
)
from spear_metrics.space.tables import (
    ROW_COLUMNS, _table_css, all_rows, benchmark_table, benchmark_tabs, columns, display_frame, filter_sort,
    legend_markdown, load_sources, marks_markdown, published_rows, set_sources, split_sources, table_ids, write_csv,
)

HERE = Path(__file__).resolve().parent
SOURCE_URL = "https://github.com/thomasthebaud/SPEAR-benchmark-website"


# ------------------------------------------------------------------------------------------------
# UI


def _tab_view(frame: pd.DataFrame, none_line: str) -> tuple[dict, dict]:
    """Updates of a benchmark tab's table and its "none loaded" line: the table when it has rows,
    else the line alone (an empty gradio table would show placeholder headers "1 | 2 | 3")."""
    return gr.update(value=frame, visible=not frame.empty), gr.update(value=none_line, visible=frame.empty)


def benchmark_view(tab: Any, sources: list[str], *controls: str) -> tuple[dict, dict]:
    """A benchmark tab's table and "none loaded" line (:func:`benchmark_table`)."""
    return _tab_view(benchmark_table(tab, sources, *controls), tab.none_line)


def default_sources(argv_sources: list[str] | None = None) -> list[str]:
    """Sources given at start: ``results.txt`` beside this file (one per line, written by
    ``spearbench publish --results``), ``SPEARBENCH_RESULTS`` (comma/newline separated), then
    ``--results``."""
    listed = HERE / "results.txt"
    from_file = split_sources(listed.read_text(encoding="utf-8")) if listed.is_file() else []
    return from_file + split_sources(os.environ.get("SPEARBENCH_RESULTS")) + list(argv_sources or [])


def status_text(n_loaded: int, messages: list[str]) -> str:
    """The status line under the table: counts, then every message of the last load, whole."""
    msg = f"{len(published_rows())} published rows · {n_loaded} results dataset(s) loaded"
    return msg + "".join(f"  \n⚠️ {e}" for e in messages)


def build_app(sources: list[str] | None = None) -> gr.Blocks:
    """The Blocks app; ``sources`` = results datasets (local folders, Hub ids) the Space may
    read besides Hub ids typed in (:func:`set_sources`), shown by label."""
    start_all = set_sources(list(sources if sources is not None else default_sources()))
    loaded0, errors0 = load_sources(start_all)
    start = [r.source for r in loaded0]  # the start sources that loaded (the others are reported)
    rows0, _ = all_rows(start)
    modes0 = sorted({r["inference_mode"] or "not given" for r in rows0})
    group_labels = list(dict.fromkeys([g[1] for g in groups()] + [c.group for c in columns()]))
    sort_choices = ["model", *[c.name for c in columns()]]
    models0 = _samples_models(start)

    # gradio's copies of served files (tables, audio, reports) older than an hour go every hour
    with gr.Blocks(title="SPEARBench leaderboard", delete_cache=(3600, 3600)) as demo:
        gr.HTML(f"<style>{_table_css(table_ids())}</style>", padding=False, elem_id="table_css")
        src_state = gr.State(start)
        gr.Markdown(
            "# SPEARBench leaderboard\n"
            f"Protocol `{PROTOCOL}`, test split (improvised + naturalistic pooled). Published rows: "
            f"[SPEAR benchmark website]({SOURCE_URL}) (`spear_benchmark.csv`, MIT licence, "
            "© 2026 Thomas Thebaud; copy in `data/`). `-` = not measured / does not exist. "
            "↑ higher is better, ↓ lower is better, ≈human closer to the human row is better.")
        with gr.Tab("Leaderboard"):
            with gr.Row():
                modes = gr.CheckboxGroup(modes0, value=modes0, label="inference mode")
                open_w = gr.Radio(["all", "open weights", "closed weights"], value="all", label="open weights")
            with gr.Row():
                dims = gr.CheckboxGroup(group_labels, value=group_labels, label="dimensions shown")
            with gr.Row():
                sort_by = gr.Dropdown(sort_choices, value="model", label="sort by")
                order = gr.Radio(["best first", "ascending", "descending"], value="ascending", label="order")
            table = gr.Dataframe(value=display_frame(filter_sort(rows0, modes0, "all", "model", "ascending"), group_labels,
                                                     page=True),
                                 interactive=False, wrap=True, label="SPEAR leaderboard", elem_id="leaderboard",
                                 max_height=600, pinned_columns=1)  # pinned by _table_css
            status = gr.Markdown(status_text(len(start), errors0), elem_id="status")
            with gr.Row():
                src_box = gr.Textbox(label="add results datasets (Hub dataset ids OWNER/NAME, comma separated; "
                                           "server folders are read only when given at start)",
                                     scale=4, elem_id="sources")
                add_btn = gr.Button("Load", scale=1, elem_id="load")
            download = gr.File(value=write_csv(filter_sort(rows0, modes0, "all", "model", "ascending")),
                               label="download the table (CSV; empty cell = missing)")
            with gr.Accordion("Columns: dimensions, units, direction of better", open=False):
                gr.Markdown(legend_markdown())
            with gr.Accordion("Marks: ★ best, ≈ tied, rank interval, few events, onset rule", open=False):
                gr.Markdown(marks_markdown())
        tab_events = []  # (refresh, inputs, outputs) of each benchmark tab, rerun after a load
        for title, tab in benchmark_tabs():
            with gr.Tab(title):
                gr.Markdown(tab.intro)
                with gr.Accordion("Marks: ★ best, ≈ tied, rank interval, few events", open=False):
                    gr.Markdown(marks_markdown())
                controls = [gr.Radio(list(choices), value=default, label=label) for label, choices, default in tab.controls]
                frame0 = benchmark_table(tab, start, *(default for _, _, default in tab.controls))
                b_table = gr.Dataframe(value=frame0, interactive=False, wrap=True, elem_id=tab.elem_id,
                                       visible=not frame0.empty)
                b_none = gr.Markdown(tab.none_line, visible=frame0.empty, elem_id=f"{tab.elem_id}_none")
                if tab.samples:  # the benchmark's own components under its table
                    from spear_metrics.core.benchmark import resolve

                    resolve(tab.samples)(src_state, load=lambda s: load_sources(s)[0], audio_file=_audio_file)
                view = functools.partial(benchmark_view, tab)
                for c in controls:
                    c.change(view, [src_state, *controls], [b_table, b_none], api_visibility="private")
                tab_events.append((view, [src_state, *controls], [b_table, b_none]))
        with gr.Tab("Samples"):
            with gr.Row():
                model_dd = gr.Dropdown(models0, value=models0[0][1] if models0 else None, label="model",
                                       elem_id="model")
                subset_dd = gr.Dropdown([ALL_SUBSETS, "improvised", "naturalistic", "unknown"], value=ALL_SUBSETS,
                                        label="subset")
                metric_dd = gr.Dropdown([NO_METRIC], value=NO_METRIC, label="filter on value", allow_custom_value=True)
                lo = gr.Textbox(label="min (empty = none)", value="", elem_id="min")
                hi = gr.Textbox(label="max (empty = none)", value="", elem_id="max")
            with gr.Row():
                prev_btn = gr.Button("◀ previous", elem_id="prev")
                sample_dd = gr.Dropdown([], label="sample", elem_id="sample", scale=3)
                next_btn = gr.Button("next ▶", elem_id="next")
            info = gr.Markdown()
            with gr.Row():
                a_in = gr.Audio(label="input clip (both speakers)", type="filepath", elem_id="audio_input")
                a_h = gr.Audio(label="human answer", type="filepath", elem_id="audio_human")
                a_m = gr.Audio(label="model answer", type="filepath", elem_id="audio_model")
            with gr.Row():
                t_q = gr.Textbox(label="question transcript (context + question)", lines=4)
                t_h = gr.Textbox(label="human answer transcript", lines=4)
                t_m = gr.Textbox(label="model answer transcript", lines=4, elem_id="t_model")
            timeline = gr.Plot(label="timing: why this latency and overlap (s on the question's time line)",
                               elem_id="timeline")
            scores = gr.Dataframe(label="this sample's values (- = does not exist)", interactive=False)
        with gr.Tab("Plots"):
            dist = gr.Plot(label="latency and answer duration vs human")
            group_dd = gr.Dropdown(group_labels, value=group_labels[1], label="dimension")
            dim_plot = gr.Plot(label="per-dimension comparison")
            plot_btn = gr.Button("Refresh plots")
        with gr.Tab("Report"):
            reports0 = _report_choices(start)
            with_report = [v for label, v in reports0 if not label.endswith("no report")]
            report_dd = gr.Dropdown(reports0, value=(with_report or [None])[0] if reports0 else None,
                                    label="results dataset", elem_id="report_model")
            report_html = gr.HTML(elem_id="report")
            report_file = gr.File(label="download the report (index.html, self-contained)")

        # ---- leaderboard events
        def refresh(sources_, modes_, open_, dims_, sort_, order_):
            # the status line is the last load's report: a refresh never overwrites it
            rows, _ = all_rows(sources_)
            shown = filter_sort(rows, modes_, open_, sort_, order_)
            return display_frame(shown, dims_, page=True), write_csv(shown)

        lb_inputs = [src_state, modes, open_w, dims, sort_by, order]
        lb_outputs = [table, download]
        for comp in (modes, open_w, dims, sort_by, order):
            comp.change(refresh, lb_inputs, lb_outputs, api_visibility="private")

        def add_sources(sources_, text, modes_, open_):
            typed = [s for s in split_sources(text) if s not in sources_]
            loaded, errors = load_sources(typed)  # rejected ones are reported (whole), not kept
            kept = list(sources_) + [r.source for r in loaded if r.source not in sources_]
            rows, _ = all_rows(kept)
            all_modes = sorted({r["inference_mode"] or "not given" for r in rows})
            modes_ = sorted(set(modes_ or []) | (set(all_modes) - set(modes0)))
            models = _samples_models(kept)
            return (kept, gr.update(choices=all_modes, value=modes_), "",
                    gr.update(choices=models, value=models[-1][1] if models else None),
                    status_text(len(kept), errors), gr.update(choices=_report_choices(kept)))

        event = add_btn.click(add_sources, [src_state, src_box, modes, open_w],
                              [src_state, modes, src_box, model_dd, status, report_dd],
                              api_visibility="private").then(refresh, lb_inputs, lb_outputs, api_visibility="private")
        for view, inputs, outputs in tab_events:
            event = event.then(view, inputs, outputs, api_visibility="private")

        def leaderboard(sources_text: str = "", inference_modes: str = "", open_weights: str = "all",
                        sort: str = "model", sort_order: str = "ascending") -> dict:
            """The leaderboard table ``{"headers", "data", "errors"}`` (cells are strings; "-" =
            missing; ``source`` = "published" or a results dataset's label) for extra sources (Hub
            ids or labels of start sources, comma separated), inference modes (comma separated,
            empty = all), the open-weights filter ("all", "open weights", "closed weights"), sort
            column and order. ``errors``: the start sources' and the extra sources' rejections."""
            rows, errors = all_rows(start + [s for s in split_sources(sources_text) if s not in start])
            errors = errors0 + errors
            wanted = split_sources(inference_modes) or None
            df = display_frame(filter_sort(rows, wanted, open_weights, sort, sort_order), None)
            return {"headers": list(df.columns), "data": df.values.tolist(), "errors": errors}

        gr.api(leaderboard, api_name="leaderboard")

        def pick_row(evt: gr.SelectData, sources_):
            """Clicking a leaderboard row of a loaded results dataset opens it in the sample browser."""
            row = evt.row_value or []
            src = row[ROW_COLUMNS.index("source")] if len(row) > 1 else None
            models = _samples_models(sources_)
            if src in [m[1] for m in models]:
                return gr.update(value=src)
            return gr.update()

        table.select(pick_row, [src_state], [model_dd], api_visibility="private")

        # ---- sample browser events
        def update_samples(sources_, source, subset, metric, lo_, hi_):
            loaded, _ = load_sources(sources_)
            res = next((r for r in loaded if r.source == source), None)
            if res is None:
                return gr.update(choices=[], value=None), gr.update(choices=[NO_METRIC], value=NO_METRIC)
            rows = filtered_rows(res, subset, metric, lo_, hi_)
            metrics = [NO_METRIC, *numeric_sample_columns(res)]
            return (gr.update(choices=[(_sample_label(res, r), r) for r in rows], value=rows[0] if rows else None),
                    gr.update(choices=metrics, value=metric if metric in metrics else NO_METRIC))

        def step(sources_, source, subset, metric, lo_, hi_, current, delta):
            loaded, _ = load_sources(sources_)
            res = next((r for r in loaded if r.source == source), None)
            if res is None:
                return gr.update()
            rows = filtered_rows(res, subset, metric, lo_, hi_)
            if not rows:
                return gr.update(value=None)
            i = rows.index(current) if current in rows else -delta
            return gr.update(value=rows[(i + delta) % len(rows)])

        filt_inputs = [src_state, model_dd, subset_dd, metric_dd, lo, hi]
        view_outputs = [a_in, a_h, a_m, t_q, t_h, t_m, scores, info]
        for comp in (model_dd, subset_dd, metric_dd, lo, hi):
            # the view follows the model too: another model's first sample may keep the same row id,
            # and a dropdown whose value does not change fires no change event
            comp.change(update_samples, filt_inputs, [sample_dd, metric_dd], api_visibility="private").then(
                sample_view, [src_state, model_dd, sample_dd], view_outputs, api_visibility="private").then(
                timeline_view, [src_state, model_dd, sample_dd], [timeline], api_visibility="private")
        prev_btn.click(lambda *a: step(*a, -1), filt_inputs + [sample_dd], [sample_dd], api_visibility="private")
        next_btn.click(lambda *a: step(*a, 1), filt_inputs + [sample_dd], [sample_dd], api_visibility="private")
        sample_dd.change(sample_view, [src_state, model_dd, sample_dd], view_outputs, api_visibility="private")
        sample_dd.change(timeline_view, [src_state, model_dd, sample_dd], [timeline], api_visibility="private")
        report_dd.change(report_view, [src_state, report_dd], [report_html, report_file], api_visibility="private")

        def sample(source: str, row: float):
            """One sample of a results source (a start source's label or a Hub id; loaded when new):
            input clip, human answer, model answer, question / human / model transcripts, the
            sample's values, an info line (the rejection message when the source is refused)."""
            source = str(source or "").strip()
            return sample_view(start + [s for s in [source] if s not in start], source, row)

        api_source = gr.Textbox(visible=False)
        api_row = gr.Number(visible=False)  # no precision: 1.5 must reach sample_view, not be rounded to 2
        api_btn = gr.Button(visible=False)
        api_btn.click(sample, [api_source, api_row], view_outputs, api_name="sample")

        # ---- plots
        plot_btn.click(lambda s, g: (distribution_plot(s), dimension_plot(s, g)), [src_state, group_dd],
                       [dist, dim_plot], api_visibility="private")
        group_dd.change(dimension_plot, [src_state, group_dd], [dim_plot], api_visibility="private")

        def on_load(sources_, source, subset, metric, lo_, hi_, group, report_src):
            samples_upd, metric_upd = update_samples(sources_, source, subset, metric, lo_, hi_)
            return (samples_upd, metric_upd, distribution_plot(sources_), dimension_plot(sources_, group),
                    *report_view(sources_, report_src))

        demo.load(on_load, filt_inputs + [group_dd, report_dd],
                  [sample_dd, metric_dd, dist, dim_plot, report_html, report_file], api_visibility="private")
    check_public_api(demo)
    return demo


#: The only endpoints the Space offers to API clients; every other event (chained ones
#: included) is internal to the page (``api_visibility="private"``).
PUBLIC_API = ("leaderboard", "sample")


def check_public_api(demo: gr.Blocks) -> None:
    """Raise ``RuntimeError`` when an event other than :data:`PUBLIC_API` is callable by API
    clients (an event wired without ``api_visibility="private"``: a ``.then`` chain forgets it
    easily). Called when the app is built, so such an app never starts."""
    exposed = sorted(str(f.api_name) for f in demo.fns.values()
                     if getattr(f, "api_visibility", "public") != "private" and f.api_name not in PUBLIC_API)
    if exposed:
        raise RuntimeError(f"events exposed as API endpoints besides {', '.join(PUBLIC_API)}: {', '.join(exposed)}")


def main(argv: list[str] | None = None) -> None:
    """``python -m spear_metrics.space [--results SRC ...]`` (or ``python app.py`` in the Space
    folder); host/port from GRADIO_SERVER_NAME/PORT."""
    p = argparse.ArgumentParser(description="SPEARBench leaderboard Space")
    p.add_argument("--results", nargs="*", default=[], help="results datasets: Hub ids or local folders")
    args = p.parse_args(argv)
    from spear_metrics.results import expand_results_folders

    sources, messages = expand_results_folders(default_sources(args.results))
    for m in messages:  # a parent folder of results datasets (e.g. DEMO_OUT/datasets): said on the console
        print(f"warning: {m}", file=sys.stderr)
    build_app(sources).launch()


if __name__ == "__main__":
    main()
