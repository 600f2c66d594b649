"""THE table of columns: every summary key of every metric, derived from the dimensions'
:class:`~spear_metrics.core.dimension.MetricKey` declarations (their only source).

The leaderboard's columns and groups, the published benchmark keys (``summary.json``), the
metric versions a results dataset may carry, the Space's headers and legend, the results
dataset card and the key tables of ``README.md`` and of every metric card
(``scripts/gen_docs.py``) all come from here.

Import cost: the standard library and the dimensions' ``definition`` modules, which import
numpy and nothing that loads a model (torch, transformers... are imported when a model is
first used), so this module works in the light install (``pip install spearbench``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from spear_metrics.core.dimension import MetricKey

@dataclass(frozen=True)
class Column:
    """One column: its :class:`MetricKey` and the metric (a registered dimension or benchmark
    name) that writes it. ``name``, ``unit``, ``better``, ``description``, ``group``, ``published`` and
    ``order`` are the key's."""

    key: MetricKey
    dimension: str

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def unit(self) -> str:
        return self.key.unit

    @property
    def better(self) -> str:
        return self.key.better

    @property
    def description(self) -> str:
        return self.key.description

    @property
    def group(self) -> str:
        return self.key.group

    @property
    def published(self) -> bool:
        return self.key.published

    @property
    def order(self) -> int | None:
        return self.key.order


def metric_names() -> tuple[str, ...]:
    """Every metric folder that is an evaluate module: the registered SPEAR dimensions in
    registry order, then each registered benchmark that has one
    (:attr:`~spear_metrics.core.benchmark.Benchmark.has_metric_module`), in registry order."""
    from spear_metrics.core.registry import DIMENSIONS, benchmarks

    return (*DIMENSIONS, *(b.name for b in benchmarks() if b.has_metric_module))


def metric_keys(metric: str) -> tuple[MetricKey, ...]:
    """The declared keys of ``metric``: a registered dimension's ``keys``, or a registered
    benchmark's (:meth:`~spear_metrics.core.benchmark.Benchmark.metric_keys`).

    Raises:
        UnknownDimensionError: neither a registered dimension nor a registered benchmark.
    """
    from spear_metrics.core.registry import DIMENSIONS, benchmark, benchmark_names, dimension_class

    if metric not in DIMENSIONS and metric in benchmark_names():
        return benchmark(metric).metric_keys()
    return tuple(dimension_class(metric).keys)


@functools.lru_cache(maxsize=8)
def _spear_columns(registry: tuple[tuple[str, str], ...]) -> tuple[Column, ...]:
    by_dim = {name: metric_keys(name) for name, _ in registry}

    def first_order(name: str) -> float:
        orders = [k.order for k in by_dim[name] if k.published and k.order is not None]
        return min(orders) if orders else float("inf")

    out: list[Column] = []
    dims = sorted(by_dim, key=lambda n: (first_order(n), [r[0] for r in registry].index(n)))
    for name in dims:
        keys = by_dim[name]
        published = sorted((k for k in keys if k.published), key=lambda k: (k.order is None, k.order or 0))
        out += [Column(k, name) for k in published]
        out += [Column(k, name) for k in keys if not k.published]
    return tuple(out)


def columns(*, published_only: bool = False) -> list[Column]:
    """The SPEAR columns in leaderboard order: dimensions ordered by their first published
    column, each dimension's published keys by ``order`` and then its project keys in
    declaration order. ``published_only``: the published table's columns only."""
    from spear_metrics.core.registry import DIMENSIONS

    cols = list(_spear_columns(tuple(DIMENSIONS.items())))
    return [c for c in cols if c.published] if published_only else cols


def leaderboard_columns() -> list[Column]:
    """The published SPEAR leaderboard columns, in the published table's order."""
    return sorted(columns(published_only=True), key=lambda c: c.order or 0)


def benchmark_keys() -> tuple[str, ...]:
    """Names of the published leaderboard columns (``spear_benchmark.csv`` order)."""
    return tuple(c.name for c in leaderboard_columns())


def groups() -> list[tuple[str, str, tuple[str, ...]]]:
    """``(dimension, group label, published keys)`` per dimension, in leaderboard order."""
    out: dict[str, tuple[str, list[str]]] = {}
    for c in leaderboard_columns():
        out.setdefault(c.dimension, (c.group, []))[1].append(c.name)
    return [(d, label, tuple(keys)) for d, (label, keys) in out.items()]


@functools.lru_cache(maxsize=8)
def _benchmark_columns(names: tuple[str, ...]) -> tuple[Column, ...]:
    return tuple(Column(k, n) for n in names for k in metric_keys(n))


def benchmark_columns() -> list[Column]:
    """The declared keys of every registered benchmark other than SPEAR (whose keys are its
    dimensions': :func:`columns`), each as a :class:`Column` of its benchmark, in registry order
    and declaration order. Not leaderboard columns: :func:`columns` and :func:`leaderboard_columns`
    stay SPEAR's."""
    from spear_metrics.core.registry import DIMENSIONS, benchmarks

    return list(_benchmark_columns(tuple(b.name for b in benchmarks() if b.name not in DIMENSIONS and b.keys)))


def find_column(name: str, metrics: tuple[str, ...] | list[str] | None = None) -> Column | None:
    """The column that summary key ``name`` is (templates such as ``WER_%_<asr>`` match their
    family); ``metrics`` restricts the search to those dimensions or benchmarks. SPEAR's
    columns are searched first, then every registered benchmark's (:func:`benchmark_columns`).
    ``None`` when no declared key matches."""
    for c in (*columns(), *benchmark_columns()):
        if (metrics is None or c.dimension in metrics) and c.key.matches(name):
            return c
    return None


def known_versions(dimension: str) -> frozenset[str]:
    """Metric versions of ``dimension`` whose results this code reads: the class ``version``
    and its ``compatible_versions``.

    Raises:
        UnknownDimensionError: not a registered dimension.
    """
    from spear_metrics.core.registry import dimension_class

    cls = dimension_class(dimension)
    return frozenset({str(cls.version), *map(str, getattr(cls, "compatible_versions", ()))})


def better_text(better: str) -> str:
    """``"closer_to_human"`` -> ``"closer to human"`` (the cards' and tables' wording)."""
    return better.replace("_", " ")
