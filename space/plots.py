"""The leaderboard Space's plots: per-sample distributions against the human answers'
(:func:`distribution_plot`) and per-dimension bars with the results datasets' intervals
(:func:`dimension_plot`). Wired into the page by :mod:`spear_metrics.space.app`.
"""

from __future__ import annotations

import math

from spear_metrics.core.columns import groups
from spear_metrics.results import Results
from spear_metrics.space.tables import ARROWS, _human_value, all_rows, columns, load_sources


def distribution_plot(sources: list[str]):
    """Per model: histograms of per-sample ``latency_ms`` and ``explainable_duration_s`` (answer
    audio file duration, s), with the human answers' distribution (results source named "human")
    drawn behind each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loaded, _ = load_sources(sources)
    human = next((r for r in loaded if r.model.lower() == "human"), None)
    models = [r for r in loaded if r is not human] or ([human] if human else [])
    keys = (("latency_ms", "latency (ms)"), ("explainable_duration_s", "answer audio duration (s)"))
    fig, axes = plt.subplots(max(1, len(models)), 2, figsize=(10, 2.6 * max(1, len(models))), squeeze=False)
    if not models:
        for ax in axes[0]:
            ax.text(0.5, 0.5, "no per-sample results loaded", ha="center", va="center")
            ax.set_axis_off()
        return fig
    for i, res in enumerate(models):
        for j, (key, label) in enumerate(keys):
            ax = axes[i][j]
            vals = _values(res, key)
            hv = _values(human, key) if human is not None and human is not res else []
            if hv:
                ax.hist(hv, bins=20, color="0.75", label=f"human (n={len(hv)})")
            if vals:
                ax.hist(vals, bins=20, histtype="step", linewidth=2, color="C0", label=f"{res.model} (n={len(vals)})")
            if not vals and not hv:
                ax.text(0.5, 0.5, f"no {key} values", ha="center", va="center", transform=ax.transAxes)
            ax.set_xlabel(f"{key}: {label}")
            ax.set_ylabel("samples")
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _values(res: Results | None, key: str) -> list[float]:
    if res is None or key not in res.samples:
        return []
    return [float(v) for v in res.samples[key] if v is not None and not (isinstance(v, float) and math.isnan(v))]


def dimension_plot(sources: list[str], group: str):
    """One bar panel per key of dimension ``group``: every leaderboard row with a value (rows
    without one get no bar and are marked "-"), a results dataset's 95 % interval as its error
    bar; the published human value as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, _ = all_rows(sources)
    cols = [c for c in columns() if c.group == group] or [c for c in columns() if c.group == groups()[0][1]]
    fig, axes = plt.subplots(1, len(cols), figsize=(4.2 * len(cols), 4), squeeze=False)
    names = [r["model"] if r["source"] == "published" else f"{r['model']} (results)" for r in rows]
    for ax, c in zip(axes[0], cols):
        vals = [r.get(c.name) for r in rows]
        xs = list(range(len(rows)))
        cis = [r.get(f"{c.name}_ci95") for r, v in zip(rows, vals) if v is not None]
        err = [[max(0.0, v - ci[0]) if ci else 0.0 for v, ci in zip([v for v in vals if v is not None], cis)],
               [max(0.0, ci[1] - v) if ci else 0.0 for v, ci in zip([v for v in vals if v is not None], cis)]]
        ax.bar([x for x, v in zip(xs, vals) if v is not None], [v for v in vals if v is not None], yerr=err, capsize=3,
               color=["0.6" if n.startswith("human") else "C0" for n, v in zip(names, vals) if v is not None])
        for x, v in zip(xs, vals):
            if v is None:
                ax.text(x, 0, "-", ha="center", va="bottom")
        h = _human_value(rows, c.name)
        if h is not None:
            ax.axhline(h, color="k", linestyle="--", linewidth=1, label="human (published)")
            ax.legend(fontsize=7)
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{c.name} [{c.unit}] {ARROWS.get(c.better, c.better)}", fontsize=9)
    fig.tight_layout()
    return fig
