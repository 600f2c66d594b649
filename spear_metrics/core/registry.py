"""The explicit registry of SPEAR dimensions (no name scanning, no silent optional imports).

Each entry points at the class that defines the dimension in its own folder. Asking for a
dimension whose dependencies are missing raises a one-line error naming the missing package.
"""

from __future__ import annotations

import importlib
from typing import Any, Sequence

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
