"""THE summary writer: ``summary.json`` of a scored run.

Flat: the benchmark keys named exactly as in the published leaderboard CSV
(``spear_benchmark.csv``), then ``n_samples``, ``n_scored``, ``n_failed``, ``n_processes``,
the metrics and their versions, the models behind each key, the options of each dimension
in effect (``options``) and the package version. No run
timings (those go to ``run_info.json``), so a resumed run writes the same file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from spear_metrics.core.records import SampleResult, write_json_atomic


def __getattr__(name: str):
    # ``BENCHMARK_KEYS``: the published leaderboard keys in the published table's column order,
    # derived from the dimensions' MetricKeys (spear_metrics.core.columns.benchmark_keys)
    if name == "BENCHMARK_KEYS":
        from spear_metrics.core.columns import benchmark_keys

        return benchmark_keys()
    raise AttributeError(name)


def spearbench_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spearbench")
    except PackageNotFoundError:
        return "0+unknown"


def build_summary(
    *,
    aggregates: dict[str, Any],
    results: Sequence[SampleResult],
    metrics: Sequence[str],
    versions: dict[str, str],
    models: dict[str, str],
    options: dict[str, dict[str, Any]] | None = None,
    n_processes: int = 1,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary dict: aggregates first, then counts and provenance.

    ``options``: per dimension, every declared option with the value in effect
    (:meth:`spear_metrics.core.dimension.Dimension.options_in_effect`), written as ``options``."""
    n_failed = sum(1 for r in results if not r.ok)
    summary: dict[str, Any] = dict(aggregates)
    summary.update(
        {
            "n_samples": len(results),
            "n_scored": len(results) - n_failed,
            "n_failed": n_failed,
            "n_processes": int(n_processes),
            "metrics": list(metrics),
            "metric_versions": dict(versions),
            "models": dict(models),
            "options": {k: dict(v) for k, v in (options or {}).items()},
            "spearbench_version": spearbench_version(),
        }
    )
    if extra:
        summary.update(extra)
    return summary


def write_summary(out_dir: str | os.PathLike, summary: dict[str, Any]) -> Path:
    """Write ``out_dir/summary.json`` atomically (NaN/inf -> ``null``)."""
    return write_json_atomic(Path(out_dir) / "summary.json", summary)
