"""Plots of per-sample values, run against run (matplotlib, Agg canvas, no display needed).

Every function builds a ``matplotlib.figure.Figure`` on a ``FigureCanvasAgg`` (no pyplot and
no global backend state, so it is safe in a server such as the Space) and returns it; :func:`png`
renders a figure to PNG bytes. Missing values (``None``) are left out of every plot, never drawn
as 0; the legend (beside or below the panels, never over the data) gives each series' ``n``. Sources of the quantities: see each key's metric card.
"""

from __future__ import annotations

import io
from typing import Any, Sequence

import numpy as np

#: colours of the series in order: the run reported, the human answers, then other runs
COLOURS = ("#1f77b4", "#7f7f7f", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")


#: marker of each run in a scatter (with :data:`COLOURS`): runs that share points stay visible
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


#: the most characters of one text drawn in a figure; longer text (a clip name or run name of a
#: hostile results file) is cut there with "…" (:func:`png`): Agg draws text glyph by glyph, and
#: a 200,000-character title took a minute and a half
MAX_FIGURE_TEXT = 1000


def _clip(text: str) -> str:
    return text if len(text) <= MAX_FIGURE_TEXT else text[: MAX_FIGURE_TEXT - 1] + "…"


def fit_title(text: str, width_in: float, fontsize: float = 10.0) -> str:
    """``text`` folded at spaces into lines that fit ``width_in`` inches at ``fontsize`` points
    (about 0.55 em per character): a title longer than its figure is wrapped, not cut (unless it
    is over :data:`MAX_FIGURE_TEXT` characters)."""
    import textwrap

    chars = max(12, int(width_in * 72 / (fontsize * 0.55)))
    text = _clip(str(text))
    return "\n".join(textwrap.wrap(text, chars, break_long_words=False, break_on_hyphens=False)) or text


def _scatter_run(ax, i: int, n_runs: int, x: np.ndarray, y: np.ndarray, label: str, size: float) -> None:
    """Run ``i`` of ``n_runs`` as hollow markers of its own shape, earlier runs drawn larger: runs
    whose points coincide (the same answers) show as nested shapes instead of the last one hiding
    the others."""
    colour = COLOURS[i % len(COLOURS)]
    ax.scatter(x, y, s=size * (1.0 + 0.9 * (n_runs - 1 - i)), marker=MARKERS[i % len(MARKERS)], facecolors="none",
               edgecolors=colour, linewidths=1.2, label=label)


def _figure(width: float = 7.0, height: float = 3.6):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def message(text: str, width: float = 10.0, height: float = 1.6):
    """A figure that only says ``text`` (a plot that cannot be drawn says why)."""
    fig = _figure(width, height)
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=10, wrap=True)
    ax.set_axis_off()
    return fig


def png(fig) -> bytes:
    """The figure as PNG bytes (Agg); every text of it (titles, labels, legend entries, tick
    labels) cut at :data:`MAX_FIGURE_TEXT` characters first."""
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        s = t.get_text()
        if len(s) > MAX_FIGURE_TEXT:
            t.set_text(_clip(s))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _numbers(values: Sequence[Any]) -> np.ndarray:
    from spear_metrics.core.stats import as_number

    return np.asarray([x for x in (as_number(v) for v in values) if x is not None], dtype=np.float64)


def histogram(title: str, xlabel: str, series: Sequence[tuple[str, Sequence[Any]]]):
    """Small multiples of one per-sample value: one panel per run, stacked, on shared bins and a
    shared x axis (overlaid histograms hide each other), each with its mean as a dotted line;
    a run without values gets a panel that says so.

    Args:
        series: ``(label, values)`` per run; ``None`` values are dropped.
    """
    data = [(label, _numbers(v)) for label, v in series]
    n = max(1, len(data))
    fig = _figure(7.0, 0.9 + 1.25 * n)
    axes = fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0]
    allv = np.concatenate([v for _, v in data if v.size] or [np.zeros(0)])
    bins = np.histogram_bin_edges(allv, bins=min(30, max(5, int(np.sqrt(max(allv.size, 1)))))) if allv.size else 10
    if allv.size and np.ptp(allv) == 0:
        bins = np.linspace(allv[0] - 0.5, allv[0] + 0.5, 6)
    for i, (ax, (label, v)) in enumerate(zip(axes, data)):
        colour = COLOURS[i % len(COLOURS)]
        if v.size:
            ax.hist(v, bins=bins, color=colour, alpha=0.75)
            ax.axvline(v.mean(), color="black", linestyle=":", linewidth=1)
            ax.set_title(fit_title(f"{label}: n={v.size}, mean {v.mean():.3g}", 6.5, 8), fontsize=8, loc="left")
        else:
            ax.text(0.5, 0.5, f"{label}: no value", ha="center", va="center", transform=ax.transAxes, fontsize=8)
            ax.set_yticks([])
        ax.set_ylabel("samples", fontsize=7)
        ax.tick_params(labelsize=7)
    axes[-1].set_xlabel(xlabel)
    fig.suptitle(fit_title(title, 7.0), fontsize=10)
    return fig


def scatter(title: str, xlabel: str, ylabel: str, series: Sequence[tuple[str, Sequence[Any], Sequence[Any]]]):
    """One scatter per run of ``(x, y)`` per-sample pairs (pairs with a missing side dropped)."""
    from spear_metrics.core.stats import as_number

    fig = _figure()
    ax = fig.add_subplot()
    for i, (label, xs, ys) in enumerate(series):
        pts = [(a, b) for a, b in ((as_number(x), as_number(y)) for x, y in zip(xs, ys)) if a is not None and b is not None]
        arr = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
        _scatter_run(ax, i, len(series), arr[:, 0], arr[:, 1], f"{label} (n={len(arr)})", 18)
    ax.set_title(fit_title(title, 5.0))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    fig.legend(loc="outside right upper", fontsize=8, frameon=False)  # beside the plot, never over it
    return fig


def question_answer_scatter(title: str, dims: Sequence[str], series: Sequence[tuple[str, Sequence[dict[str, Any]]]]):
    """One panel per dimension ``d`` (e.g. arousal): per-sample ``question_<d>`` against
    ``answer_<d>``, one colour per run, with the diagonal."""
    from spear_metrics.core.stats import as_number

    fig = _figure(4.0 * len(dims), 3.8)
    axes = fig.subplots(1, len(dims), squeeze=False)[0]
    for ax, d in zip(axes, dims):
        for i, (label, rows) in enumerate(series):
            pts = [(as_number(r.get(f"question_{d}")), as_number(r.get(f"answer_{d}"))) for r in rows]
            arr = np.asarray([p for p in pts if None not in p], dtype=np.float64).reshape(-1, 2)
            _scatter_run(ax, i, len(series), arr[:, 0], arr[:, 1], f"{label} (n={len(arr)})", 14)
        ax.plot([0, 1], [0, 1], color="black", linewidth=0.5)
        ax.set_xlabel(f"question {d}")
        ax.set_ylabel(f"answer {d}")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(4, max(1, len(labels))), fontsize=7, frameon=False)
    fig.suptitle(fit_title(title, 4.0 * len(dims)))
    return fig


def boxes(title: str, ylabel: str, keys: Sequence[str], series: Sequence[tuple[str, Sequence[dict[str, Any]]]]):
    """Box plots of several per-sample keys (e.g. the F0 statistics), runs side by side per key."""
    fig = _figure(9.0, 3.8)
    ax = fig.add_subplot()
    n = max(1, len(series))
    width = 0.8 / n
    for i, (label, rows) in enumerate(series):
        data = [_numbers([r.get(k) for r in rows]) for k in keys]
        pos = [j + (i - (n - 1) / 2) * width for j in range(len(keys))]
        present = [(p, d) for p, d in zip(pos, data) if d.size]
        if present:
            bp = ax.boxplot([d for _, d in present], positions=[p for p, _ in present], widths=width * 0.9,
                            patch_artist=True, manage_ticks=False)
            for b in bp["boxes"]:
                b.set_facecolor(COLOURS[i % len(COLOURS)])
                b.set_alpha(0.5)
        ax.plot([], [], color=COLOURS[i % len(COLOURS)], linewidth=6, alpha=0.5,
                label=f"{label} (n={max((d.size for d in data), default=0)})")
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(keys, fontsize=8)
    ax.set_title(fit_title(title, 7.0))
    ax.set_ylabel(ylabel)
    fig.legend(loc="outside right upper", fontsize=8, frameon=False)  # beside the plot, never over it
    return fig


def category_bars(title: str, series: Sequence[tuple[str, Sequence[Any]]], order: Sequence[Any] | None = None):
    """Share (%) of each category (dialect label, stance score...) per run, grouped bars."""
    counts = []
    cats: list[Any] = list(order or [])
    for _, values in series:
        vals = [v for v in values if v is not None]
        c: dict[Any, int] = {}
        for v in vals:
            c[v] = c.get(v, 0) + 1
            if v not in cats:
                cats.append(v)
        counts.append((c, len(vals)))
    fig = _figure(max(7.0, 0.45 * len(cats) * max(1, len(series))), 3.8)
    ax = fig.add_subplot()
    n = max(1, len(series))
    width = 0.8 / n
    for i, ((label, _), (c, total)) in enumerate(zip(series, counts)):
        ys = [100.0 * c.get(k, 0) / total if total else 0.0 for k in cats]
        ax.bar([j + (i - (n - 1) / 2) * width for j in range(len(cats))], ys, width=width,
               color=COLOURS[i % len(COLOURS)], label=f"{label} (n={total})")
    ax.set_xticks(range(len(cats)))
    ax.set_xticklabels([str(k) for k in cats], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("% of samples")
    ax.set_title(fit_title(title, 5.0))
    fig.legend(loc="outside right upper", fontsize=8, frameon=False)  # beside the plot, never over it
    return fig


def panel_title(key: str, width: int = 24) -> str:
    """A key as a narrow panel's title: folded after an underscore into lines of at most
    ``width`` characters where it can be (``explainable_normalized_`` / ``f0_std_avg``), never cut."""
    lines, line = [], ""
    for part in key.split("_"):
        piece = part if not line else "_" + part
        if line and len(line) + len(piece) > width:
            lines.append(line + "_")
            line = part
        else:
            line += piece
    return "\n".join([*lines, line])


def bars_with_intervals(title: str, keys: Sequence[str], series: Sequence[tuple[str, dict[str, Any]]]):
    """Aggregate values per run with their 95 % intervals as error bars (from ``summary.json``:
    ``<key>`` and ``<key>_ci95``), one panel per key, each bar labelled with its value (a bar of
    height 0 is still read as 0). A run without a value for a key has no bar and is marked "no
    value" in that panel; a key no run has a value for gets no panel (callers leave it out). One
    legend for the whole figure, below the panels (never over a bar).
    """
    from matplotlib.patches import Patch

    from spear_metrics.core.stats import as_number

    keys = [k for k in keys if any(as_number(s.get(k)) is not None for _, s in series)]
    if not keys:
        return message("no run has a value for these keys")
    fig = _figure(max(6.0, 2.1 * len(keys)), 3.9)
    axes = fig.subplots(1, len(keys), squeeze=False)[0]
    for ax, k in zip(axes, keys):
        values = [as_number(s.get(k)) for _, s in series]
        tops = [max(v, (s.get(f"{k}_ci95") or [v, v])[1] or v) for v, (_, s) in zip(values, series) if v is not None]
        if all(v >= 0 for v in values if v is not None):  # a panel of zeros still shows its axis and labels
            ax.set_ylim(0, 1.15 * max(tops) if max(tops) > 0 else 1.0)
        for i, (label, summary) in enumerate(series):
            v = values[i]
            ci = summary.get(f"{k}_ci95")
            if v is None:
                ax.text(i, 0, "no\nvalue", ha="center", va="bottom", fontsize=6, color="#a15c00")
                continue
            err = None
            if isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in ci:
                err = [[max(0.0, v - ci[0])], [max(0.0, ci[1] - v)]]
            ax.bar([i], [v], yerr=err, capsize=4, color=COLOURS[i % len(COLOURS)])
            top = v if err is None else v + err[1][0]  # above the interval, not on its cap
            ax.annotate(f"{v:.3g}", (i, top), xytext=(0, 3), textcoords="offset points", ha="center",
                        va="bottom", fontsize=6)
        ax.set_title(panel_title(k), fontsize=8)
        ax.set_xticks([])
        ax.set_xlim(-0.6, len(series) - 0.4)
        ax.tick_params(labelsize=7)
    handles = [Patch(color=COLOURS[i % len(COLOURS)], label=label) for i, (label, _) in enumerate(series)]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    return fig


def summary_intervals(rows: Sequence[tuple[str, Sequence[tuple[str, Any, Any]], Any]], ncols: int = 2):
    """The report's summary figure: one panel per key (each on its own x axis: keys have their
    own units), ``ncols`` panels a row, every run's value as a dot with its 95 % interval as a
    line, and the published human value as a dashed vertical line where there is one.

    Args:
        rows: ``(title, [(run label, value, [lo, hi] or None), ...], published value or None)``
            per key; a run without a value is written "no value" on its line.
    """
    from spear_metrics.core.stats import as_number

    n = max(1, len(rows))
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    labels = list(dict.fromkeys(label for _, runs, _ in rows for label, _, _ in runs))
    fig = _figure(5.6 * ncols, nrows * (0.55 + 0.24 * max(1, len(labels))))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (title, runs, published) in zip(axes, rows):
        for label, v, ci in runs:
            y = labels.index(label)
            colour = COLOURS[y % len(COLOURS)]
            x = as_number(v)
            if x is None:
                ax.text(0.01, y, "no value", transform=ax.get_yaxis_transform(), va="center", fontsize=7, color="#a15c00")
                continue
            if isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in ci:
                ax.plot([ci[0], ci[1]], [y, y], color=colour, linewidth=2)
            ax.plot([x], [y], "o", color=colour, markersize=5)
        p = as_number(published)
        if p is not None:
            ax.axvline(p, color="black", linestyle="--", linewidth=0.8)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.margins(x=0.08)
        ax.set_title(title, fontsize=8, loc="left")
        ax.tick_params(axis="x", labelsize=7)
    for ax in axes[n:]:
        ax.set_axis_off()
    return fig


def timeline(
    evidence: dict[str, Any],
    *,
    title: str = "",
    question_end_time: float | None = None,
    context_end_time: float | None = None,
    input_wave: np.ndarray | None = None,
    answer_wave: np.ndarray | None = None,
    sample_rate: int = 16000,
):
    """One sample on the question's time line (s): why its latency and overlap are what they are.

    Draws the input clip's VAD segments (``question_vad_segments_s``, both channels mixed) and
    the whole answer's VAD segments placed on the question's time line
    (``answer_vad_segments_s``), the overlap spans (``overlap_segments_s``, red), and the latency
    span from the end of question speech (``question_speech_end_s``, or the question end when
    earlier) to the answer's speech onset found after the skip point (``answer_speech_start_s``).
    The keys are those :func:`spear_metrics.interruptions.definition.timing_evidence` writes.

    Args:
        evidence: a per-sample row holding those keys (plus ``latency_ms`` / ``interrupted_time_ms``).
        question_end_time / context_end_time: s (metadata), drawn as markers when given.
        input_wave: ``(channels, n)`` input clip at ``sample_rate``; drawn (channels averaged) when given.
        answer_wave: ``(n,)`` or ``(channels, n)`` answer; drawn from where it is placed,
            ``question_end_time + answer_start_time`` (the row's ``answer_start_time`` when it has one).
    """
    fig = _figure(10.0, 3.2)
    ax = fig.add_subplot()
    q = evidence.get("question_vad_segments_s") or []
    a = evidence.get("answer_vad_segments_s") or []
    ov = evidence.get("overlap_segments_s") or []
    lanes = {"question": 1.0, "answer": 0.0}
    ends = [e for _, e in [*q, *a]] + [x for x in (question_end_time, evidence.get("answer_speech_start_s")) if x is not None]
    if input_wave is not None and np.size(input_wave):
        w = np.atleast_2d(np.asarray(input_wave, dtype=np.float32))
        peak = max(1e-6, float(np.abs(w).max()))
        t = np.arange(w.shape[1]) / sample_rate
        for ch, colour in zip(range(w.shape[0]), ("#6baed6", "#74c476")):  # one colour per speaker (channel)
            ax.plot(t, lanes["question"] + 0.3 * w[ch] / peak, color=colour, linewidth=0.4,
                    label=f"input channel {ch}")
        ends.append(float(t[-1]) if t.size else 0.0)
    if answer_wave is not None and np.size(answer_wave) and question_end_time is not None:
        w = np.asarray(answer_wave, dtype=np.float32)
        w = w.mean(axis=0) if w.ndim == 2 else w
        # the answer starts at question_end + answer_start_time (empty: at the question end);
        # without the metadata column, a skip point s says answer_start_time = -s
        ast = evidence.get("answer_start_time")
        placed = question_end_time + (float(ast) if ast is not None else -float(evidence.get("skip_point_s") or 0.0))
        t = placed + np.arange(w.size) / sample_rate
        ax.plot(t, lanes["answer"] + 0.3 * w / max(1e-6, float(np.abs(w).max())), color="#fd8d3c", linewidth=0.4,
                label="answer")
        ends.append(float(t[-1]) if t.size else 0.0)
    # VAD segments as bars under each lane's waveform
    for s, e in q:
        ax.broken_barh([(s, e - s)], (lanes["question"] - 0.42, 0.08), color=COLOURS[0])
    for s, e in a:
        ax.broken_barh([(s, e - s)], (lanes["answer"] - 0.42, 0.08), color=COLOURS[5])
    for s, e in ov:
        ax.axvspan(s, e, color=COLOURS[2], alpha=0.25)
    qse = evidence.get("question_speech_end_s")
    start = evidence.get("answer_speech_start_s")
    lat_from = qse if qse is not None else question_end_time
    if question_end_time is not None and lat_from is not None:
        lat_from = min(lat_from, question_end_time)
    if lat_from is not None and start is not None:
        ax.annotate("", xy=(start, 0.5), xytext=(lat_from, 0.5), arrowprops=dict(arrowstyle="<->", color="black"))
        lat = evidence.get("latency_ms")
        # below the arrow: the input lane's VAD bars lie just above it (0.58 to 0.66)
        ax.text((lat_from + start) / 2, 0.44, f"latency {lat:.0f} ms" if lat is not None else "latency", ha="center",
                va="top", fontsize=8)
    if question_end_time is not None:
        ax.axvline(question_end_time, color="black", linestyle="--", linewidth=0.8)
        ax.text(question_end_time, 1.42, "question end", fontsize=7, ha="center")
    if context_end_time is not None:
        ax.axvline(context_end_time, color="gray", linestyle=":", linewidth=0.8)
        ax.text(context_end_time, 1.42, "context end", fontsize=7, ha="center")
    it = evidence.get("interrupted_time_ms")
    if ov:
        ax.text(ov[0][0], -0.56, f"overlap {it:.0f} ms" if it is not None else "overlap", color=COLOURS[2], fontsize=8)
    ax.set_yticks([lanes["answer"], lanes["question"]])
    ax.set_yticklabels(["answer (placed)\n+ its VAD", "input clip\n+ its VAD (mixed)"])
    ax.set_ylim(-0.6, 1.55)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left")
    if ends:
        ax.set_xlim(min([0.0] + [s for s, _ in [*q, *a]]), max(ends) + 0.2)
    ax.set_xlabel("s on the question's time line")
    ax.set_title(title, fontsize=9)
    return fig
