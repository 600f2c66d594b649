"""A per-sample browser for a benchmark's tab in the leaderboard Space: a choice of the loaded
results datasets' samples, audio players for the chosen one, a line of text and a plot
(:func:`sample_browser`; the samples listed by :func:`row_choices`, found by :func:`find_row`). A benchmark's ``SpaceTab.samples`` hook calls it with its own choices
and view (e.g. :func:`spear_metrics.full_duplex_v15.ui.build_samples`,
:func:`spear_metrics.full_duplex_v2.ui.build_samples`). gradio is imported when it is called."""

from __future__ import annotations

from typing import Any, Callable, Sequence


def row_choices(results: Sequence[Any], benchmark: str, label: Callable[[Any, dict[str, Any]], str]
                ) -> list[tuple[str, str]]:
    """``(label, value)`` of every row of every loaded results dataset of ``benchmark`` (its
    ``summary.json`` ``"benchmark"``), in row order: ``label(results, row)``, value
    ``<source>\\t<row>`` (what :func:`find_row` reads)."""
    out = []
    for r in results:
        if r.summary.get("benchmark") != benchmark:
            continue
        for _, s in r.samples.sort_values("row").iterrows():
            out.append((label(r, s.to_dict()), f"{r.source}\t{int(s['row'])}"))
    return out


def find_row(results: Sequence[Any], benchmark: str, value: str | None) -> dict[str, Any] | None:
    """The row (a dict) that a :func:`row_choices` value names, ``None`` when none does."""
    if not value:
        return None
    source, _, row = value.partition("\t")
    for r in results:
        if r.source == source and r.summary.get("benchmark") == benchmark:
            m = r.samples[r.samples["row"] == int(row)]
            return m.iloc[0].to_dict() if len(m) else None
    return None


def sample_browser(src_state: Any, *, load: Callable[[list[str]], Sequence[Any]],
                   choices: Callable[[Sequence[Any]], list[tuple[str, str]]],
                   show: Callable[[Sequence[Any], str | None], tuple], elem: str, heading: str, item: str,
                   players: Sequence[tuple[str, str]], plot_label: str) -> None:
    """Build the browser inside the open tab (gradio components).

    Args:
        src_state: the Space's state of the loaded sources; ``load(sources)`` -> the loaded
            :class:`spear_metrics.results.load.Results`.
        choices: ``choices(results)`` -> ``[(label, value)]`` of the samples.
        show: ``show(results, value)`` -> one file path (or ``None``) per player, then the figure
            (or ``None``) and the Markdown line.
        elem: the prefix of the components' HTML ids: ``<elem>_sample`` (the choice),
            ``<elem>_list`` (its refresh button), ``<elem>_info`` (the line), ``<elem>_timeline``
            (the plot); each player's id is given in ``players``.
        heading: the Markdown heading above; ``item``: what a sample is called (``"sample"``,
            ``"conversation"``).
        players: ``(HTML id, label)`` of each audio player, in ``show``'s order.
        plot_label: the plot's label.
    """
    import gradio as gr

    def refreshed(sources: list[str]):
        ch = choices(load(sources))
        return gr.update(choices=ch, value=ch[0][1] if ch else None)

    ch0 = choices(load(list(getattr(src_state, "value", None) or [])))
    gr.Markdown(heading)
    with gr.Row():
        dd = gr.Dropdown(ch0, value=None, label=item, elem_id=f"{elem}_sample", scale=3)
        refresh = gr.Button(f"refresh the {item} list", elem_id=f"{elem}_list", scale=1)
    info = gr.Markdown(elem_id=f"{elem}_info")
    with gr.Row():
        audios = [gr.Audio(label=label, type="filepath", elem_id=eid) for eid, label in players]
    plot = gr.Plot(label=plot_label, elem_id=f"{elem}_timeline")
    refresh.click(refreshed, [src_state], [dd], api_visibility="private")
    dd.change(lambda sources, value: show(load(sources), value), [src_state, dd], [*audios, plot, info],
              api_visibility="private")
