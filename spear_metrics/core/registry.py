"""The explicit registry of SPEAR dimensions (no name scanning, no silent optional imports).

Each entry points at the class that defines the dimension in its own folder. Asking for a
dimension whose dependencies are missing raises a one-line error naming the missing package.
"""

from __future__ import annotations

import importlib
from typing import Any

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
    """An instance of dimension ``name`` configured with ``options``."""
    return dimension_class(name)(**options)


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
