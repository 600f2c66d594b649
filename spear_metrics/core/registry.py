"""The explicit registries: SPEAR dimensions and benchmarks (no name scanning, no silent
optional imports).

- :data:`DIMENSIONS`: each entry points at the class that defines the dimension in its own
  folder. Asking for a dimension whose dependencies are missing raises a one-line error naming
  the missing package.
- :data:`BENCHMARKS`: each entry points at the :class:`~spear_metrics.core.benchmark.Benchmark`
  a benchmark folder exports (``BENCHMARK`` in its ``__init__.py``); third-party packages add
  theirs through entry points of group :data:`BENCHMARK_ENTRY_POINT_GROUP`
  (``spearbench.benchmarks``), as adapters do (``spearbench.agents``), or at run time with
  :func:`register_benchmark`. The core, the results checks, the CLI, the Space and the docs
  generator iterate :func:`benchmarks`; none of them names a benchmark.
"""

from __future__ import annotations

import importlib
from typing import Any, Sequence

from spear_metrics.core.benchmark import Benchmark, resolve
from spear_metrics.core.dimension import Dimension

#: dimension name -> "module:Class"
DIMENSIONS: dict[str, str] = {
    "interruptions": "spear_metrics.interruptions.definition:Interruptions",
    "explainable_features": "spear_metrics.explainable_features.definition:ExplainableFeatures",
    "speech_quality": "spear_metrics.speech_quality.definition:SpeechQuality",
    "language_dialect": "spear_metrics.language_dialect.definition:LanguageDialect",
    "emotions": "spear_metrics.emotions.definition:Emotions",
    "turn_taking": "spear_metrics.turn_taking.definition:TurnTaking",
    "stances": "spear_metrics.stances.definition:Stances",
    "distributional": "spear_metrics.distributional.definition:Distributional",
}


#: benchmark name -> "module:attr" of its :class:`~spear_metrics.core.benchmark.Benchmark`
#: (SPEAR first: its runs are the ones whose ``summary.json`` names no benchmark)
BENCHMARKS: dict[str, str] = {
    "spear": "spear_metrics.spear:BENCHMARK",
    "full_duplex": "spear_metrics.full_duplex:BENCHMARK",
    "full_duplex_v2": "spear_metrics.full_duplex_v2:BENCHMARK",
    "speechrole": "spear_metrics.speechrole:BENCHMARK",
    "dynamic_superb": "spear_metrics.dynamic_superb:BENCHMARK",
    "full_duplex_v15": "spear_metrics.full_duplex_v15:BENCHMARK",
}
#: the benchmark whose runs carry no ``"benchmark"`` key in ``summary.json``
DEFAULT_BENCHMARK = "spear"
#: entry-point group through which an installed package registers a benchmark
#: (``[project.entry-points."spearbench.benchmarks"] name = "pkg:BENCHMARK"``)
BENCHMARK_ENTRY_POINT_GROUP = "spearbench.benchmarks"


class UnknownBenchmarkError(ValueError):
    """A benchmark name that no registry line nor entry point declares."""


def register_benchmark(name: str, target: str | Benchmark) -> None:
    """Register a benchmark at run time: ``"package.module:BENCHMARK"`` or the descriptor itself."""
    if isinstance(target, Benchmark):
        _LOADED[name] = target
        BENCHMARKS[name] = f"<runtime>:{name}"
    else:
        _LOADED.pop(name, None)
        BENCHMARKS[name] = target


def unregister_benchmark(name: str) -> None:
    """Remove a benchmark registered with :func:`register_benchmark` (tests, plugins)."""
    BENCHMARKS.pop(name, None)
    _LOADED.pop(name, None)


_LOADED: dict[str, Benchmark] = {}


def _benchmark_entry_points() -> dict[str, str]:
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=BENCHMARK_ENTRY_POINT_GROUP)}


def benchmark_names() -> list[str]:
    """Registered benchmark names: registry order, then entry points (sorted). Imports nothing."""
    return list(dict.fromkeys([*BENCHMARKS, *sorted(_benchmark_entry_points())]))


def benchmark(name: str) -> Benchmark:
    """The descriptor of benchmark ``name``.

    Raises:
        UnknownBenchmarkError: not registered (the message lists the known ones).
        ImportError: its folder needs a package that is missing (one line).
    """
    if name in _LOADED:
        return _LOADED[name]
    target = BENCHMARKS.get(name) or _benchmark_entry_points().get(name)
    if target is None:
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}; known: {', '.join(benchmark_names())}")
    obj = resolve(target)
    if not isinstance(obj, Benchmark):
        raise UnknownBenchmarkError(f"benchmark {name!r}: {target} is not a Benchmark descriptor")
    _LOADED[name] = obj
    return obj


def benchmarks() -> list[Benchmark]:
    """Every registered benchmark's descriptor, in :func:`benchmark_names` order (each folder's
    ``__init__`` is imported: they import nothing heavy)."""
    return [benchmark(n) for n in benchmark_names()]


def benchmark_of_summary(summary: Any) -> Benchmark:
    """The benchmark whose run wrote ``summary`` (``summary.json``): its ``"benchmark"`` value,
    :data:`DEFAULT_BENCHMARK` when it names none.

    Raises:
        UnknownBenchmarkError: a ``"benchmark"`` value that is not registered.
    """
    if not isinstance(summary, dict):
        return benchmark(DEFAULT_BENCHMARK)
    name = summary.get("benchmark")
    if isinstance(name, str) and name:
        return benchmark(name)
    metrics = summary.get("metrics")
    if isinstance(metrics, list) and len(metrics) == 1 and isinstance(metrics[0], str) \
            and metrics[0] != DEFAULT_BENCHMARK and metrics[0] in benchmark_names():
        return benchmark(metrics[0])  # a run that names its benchmark as its one metric (Full-Duplex-Bench)
    return benchmark(DEFAULT_BENCHMARK)


class UnknownDimensionError(ValueError):
    """A metric name that is not a registered SPEAR dimension."""


def register(name: str, target: str) -> None:
    """Register a dimension class (``"package.module:Class"``) under ``name``."""
    DIMENSIONS[name] = target


def dimension_class(name: str) -> type[Dimension]:
    """The class of dimension ``name``.

    Raises:
        UnknownDimensionError: ``name`` is not registered (the message lists the known ones).
        ImportError: a package the dimension needs is missing (one line, names the package).
    """
    if name not in DIMENSIONS:
        raise UnknownDimensionError(f"unknown metric {name!r}; known: {', '.join(sorted(DIMENSIONS))}")
    module, cls = DIMENSIONS[name].split(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            raise UnknownDimensionError(f"metric {name!r} is registered but its module {module} is not installed") from None
        raise ImportError(f"metric {name!r} needs the Python package {e.name!r}: pip install it") from None
    return getattr(mod, cls)


def load_dimension(name: str, **options: Any) -> Dimension:
    """An instance of dimension ``name`` configured with ``options``.

    Raises:
        OptionError: an option ``name`` does not declare, or a bad value (one line).
    """
    return dimension_class(name)(**options)


def load_dimensions(names: Sequence[str], options: dict[str, Any] | None = None) -> list[Dimension]:
    """Instances of several dimensions sharing one option set (``spearbench score -o k=v``):
    each dimension gets the keys it declares in its ``option_schema`` (a key such as
    ``vad_time_resolution`` goes to every dimension that declares it).

    Raises:
        OptionError: a key no dimension of ``names`` declares (the message lists the valid
            keys), or a value a dimension refuses.
    """
    from spear_metrics.core.options import OptionError, unknown_message

    options = dict(options or {})
    classes = [dimension_class(n) for n in names]
    declared = {n: {o.name for o in c.option_schema} for n, c in zip(names, classes)}
    valid = set().union(*declared.values()) if declared else set()
    for key in options:
        if key not in valid:
            raise OptionError(unknown_message(key, ", ".join(names), valid))
    return [c(**{k: v for k, v in options.items() if k in declared[n]}) for n, c in zip(names, classes)]


def parse_metrics(spec: str | list[str]) -> list[str]:
    """``"a,b"`` or ``["a", "b"]`` -> validated, de-duplicated list of dimension names."""
    names = [n.strip() for n in (spec.split(",") if isinstance(spec, str) else spec) if n and n.strip()]
    if not names:
        raise UnknownDimensionError("no metric given")
    out = []
    for n in names:
        if n not in DIMENSIONS:
            raise UnknownDimensionError(f"unknown metric {n!r}; known: {', '.join(sorted(DIMENSIONS))}")
        if n not in out:
            out.append(n)
    return out
