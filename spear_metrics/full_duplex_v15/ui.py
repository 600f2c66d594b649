"""Full-Duplex-Bench v1.5 in the leaderboard Space: its tab (:data:`SPACE_TAB`: the table of the
loaded v1.5 results datasets) and the per-sample browser under it (:func:`build_samples`):
playback of ``input.wav``, ``output.wav`` and ``clean_output.wav`` (embedded by
``push-results --with-audio --with-inputs``) and the sample's time line: the user's and the
model's Silero speech segments (``user_segments``, ``model_segments``, s) with the overlap
window (``overlap``, upstream's ``metadata.json`` ``timestamps``, s) shaded. No gradio import at
module level (the Space imports it)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from spear_metrics.core.benchmark import SpaceTab
from spear_metrics.full_duplex_v15 import BENCHMARK

SPACE_TAB = SpaceTab(
    intro="**Full-Duplex-Bench v1.5** (overlap handling): per loaded results dataset, the behaviour judge's tag "
          "shares after the overlap (C_RESPOND, C_RESUME, C_UNCERTAIN_HANDLING, C_UNKNOWN), stop and response "
          "latency (s) and the reply's speech rate, pitch and intensity before and after the overlap and on the "
          "clean input, each with its 95 % interval over samples. Below: each sample's audio and time line.",
    none_line="No Full-Duplex-Bench v1.5 results dataset is loaded (publish a run with spearbench push-results).",
    elem_id="fdb15",
    table="spear_metrics.full_duplex_v15.results:leaderboard_frame",
    samples="spear_metrics.full_duplex_v15.ui:build_samples",
)


def sample_choices(results: Sequence[Any]) -> list[tuple[str, str]]:
    """``(label, value)`` of every sample of every loaded v1.5 results dataset: label
    ``<model> · <subset>/<id> · <status>``, value ``<source>\\t<row>``."""
    from spear_metrics.results.browser import row_choices

    return row_choices(results, BENCHMARK.name, lambda r, s: f"{r.model} · {s.get('subset')}/{s.get('id')} · {s.get('status')}")


def _segments(v: Any) -> list[tuple[float, float]]:
    try:
        return [(float(a), float(b)) for a, b in (v if v is not None else [])]
    except (TypeError, ValueError):
        return []


def _window(v: Any) -> tuple[float, float] | None:
    """``overlap`` as ``(start, end)`` s, ``None`` when the cell holds no such pair."""
    try:
        a, b = (float(x) for x in v)
    except (TypeError, ValueError):
        return None
    return (a, b) if a == a and b == b else None


def timeline_figure(sample: dict[str, Any]):
    """The sample's time line (matplotlib figure): user and model speech segments (s) as bars, the
    overlap window shaded and labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 2.2))
    for y, key, colour in ((1, "user_segments", "tab:blue"), (0, "model_segments", "tab:orange")):
        segs = _segments(sample.get(key))
        ax.broken_barh([(a, b - a) for a, b in segs], (y - 0.3, 0.6), facecolors=colour)
    ov = _window(sample.get("overlap"))
    if ov is not None:
        ax.axvspan(ov[0], ov[1], color="tab:red", alpha=0.25, label="overlap window")
        ax.legend(loc="upper right")
    ax.set_yticks([0, 1], ["model", "user"])
    ax.set_xlabel("time (s) on the input's time line")
    ax.set_ylim(-0.6, 1.6)
    fig.tight_layout()
    plt.close(fig)
    return fig


def sample_text(sample: dict[str, Any]) -> str:
    """One Markdown line on the sample: overlap window, latencies, the judge's tag."""
    ov = _window(sample.get("overlap"))
    ov_text = f"{ov[0]:.3f}–{ov[1]:.3f} s" if ov is not None else "-"

    def num(k: str) -> str:
        v = sample.get(k)
        return "-" if v is None or v != v else f"{float(v):.3f} s"

    return (f"overlap window {ov_text} · stop latency {num('stop_latency_s')} · response latency "
            f"{num('response_latency_s')} · behaviour {sample.get('behaviour') or '-'}")


def show(results: Sequence[Any], value: str | None, audio_file: Callable[[Any], str | None]) -> tuple:
    """What the browser shows for a :func:`sample_choices` value: ``(input file, output file,
    clean output file, figure, text)`` (a file ``None`` when the dataset embeds no such audio; all
    ``None`` and ``""`` when the value names no sample)."""
    from spear_metrics.results.browser import find_row

    s = find_row(results, BENCHMARK.name, value)
    if s is None:
        return None, None, None, None, ""
    return (audio_file(s.get("input_audio")), audio_file(s.get("output_audio")), audio_file(s.get("clean_output_audio")),
            timeline_figure(s), sample_text(s))


def build_samples(src_state: Any, *, load: Callable[[list[str]], Sequence[Any]],
                  audio_file: Callable[[Any], str | None]) -> None:
    """Build the per-sample browser inside the open v1.5 tab (:func:`spear_metrics.results.browser.sample_browser`;
    called by the Space with its sources state, ``load(sources) -> [Results]`` and
    ``audio_file(embedded audio) -> path | None``)."""
    from spear_metrics.results.browser import sample_browser

    sample_browser(src_state, load=load, choices=sample_choices,
                   show=lambda results, value: show(results, value, audio_file), elem="fdb15", heading="### Samples",
                   item="sample", players=(("fdb15_input", "input (with the overlap)"), ("fdb15_output", "output"),
                                           ("fdb15_clean", "clean output (reply to the clean input)")),
                   plot_label="time line: user and model speech, overlap window shaded")
