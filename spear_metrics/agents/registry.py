"""Agent adapters by name: built-ins, runtime registrations, and Python entry points.

Lookup order of :func:`load_agent`: names registered at runtime (:func:`register_agent`), the
built-ins (:data:`BUILTIN_AGENTS`), then entry points of group :data:`ENTRY_POINT_GROUP`
(``spearbench.agents``), so a third-party package adds an agent without editing this project::

    [project.entry-points."spearbench.agents"]
    my-agent = "my_package.adapter:MyAgent"

The target is a class or factory called with the ``--agent-option`` pairs as keyword arguments.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

#: entry-point group third-party adapters register under
ENTRY_POINT_GROUP = "spearbench.agents"

#: built-in adapters (no downloads): name -> "module:attribute"
BUILTIN_AGENTS: dict[str, str] = {
    "human": "spear_metrics.agents.reference:HumanAgent",
    "silence": "spear_metrics.agents.reference:SilenceAgent",
    "fixed-delay": "spear_metrics.agents.reference:FixedDelayAgent",
    "barge-in": "spear_metrics.agents.reference:BargeInAgent",
    "cascade": "spear_metrics.agents.cascade:CascadeAgent",
}

_RUNTIME: dict[str, Callable[..., Any]] = {}


class UnknownAgentError(KeyError):
    """No adapter of that name (message lists the available ones)."""

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0]) if self.args else "unknown agent"


def register_agent(name: str, factory: Callable[..., Any], *, replace: bool = False) -> None:
    """Register ``factory(**options) -> adapter`` under ``name`` for this process.

    Raises:
        ValueError: ``name`` already registered at runtime (pass ``replace=True``).
    """
    if name in _RUNTIME and not replace:
        raise ValueError(f"agent {name!r} is already registered")
    _RUNTIME[name] = factory


def unregister_agent(name: str) -> None:
    """Remove a runtime registration (no error when absent)."""
    _RUNTIME.pop(name, None)


def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_agents() -> list[str]:
    """Names of every adapter that :func:`load_agent` can find."""
    return sorted({*_RUNTIME, *BUILTIN_AGENTS, *_entry_points()})


def _import(target: str) -> Any:
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def agent_factory(name: str) -> Callable[..., Any]:
    """The class/factory registered under ``name``.

    Raises:
        UnknownAgentError: no adapter of that name.
    """
    if name in _RUNTIME:
        return _RUNTIME[name]
    if name in BUILTIN_AGENTS:
        return _import(BUILTIN_AGENTS[name])
    eps = _entry_points()
    if name in eps:
        return eps[name].load()
    raise UnknownAgentError(f"unknown agent {name!r}; available: {', '.join(available_agents())}")


def load_agent(name: str, **options: Any) -> Any:
    """Build the adapter ``name`` with ``options`` (``--agent-option KEY=VALUE`` pairs).

    Raises:
        UnknownAgentError: no adapter of that name.
        TypeError / ValueError: options the adapter does not accept.
    """
    agent = agent_factory(name)(**options)
    if not callable(getattr(agent, "respond", None)):
        raise TypeError(f"agent {name!r} has no respond(audio, row, config) method")
    return agent
