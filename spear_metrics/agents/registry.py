"""Agent adapters by name: built-ins, runtime registrations, Python entry points, and classes
named by where they live.

Lookup order of :func:`load_agent`: a reference ``path/to/file.py:ClassName`` (the file is
imported) or ``package.module:ClassName`` (imported from ``sys.path``), then names registered
at runtime (:func:`register_agent`), the built-ins (:data:`BUILTIN_AGENTS`), then entry points
of group :data:`ENTRY_POINT_GROUP` (``spearbench.agents``), so a third-party package adds an
agent without editing this project::

    [project.entry-points."spearbench.agents"]
    my-agent = "my_package.adapter:MyAgent"

The target is a class or factory called with the ``--agent-option`` pairs as keyword arguments;
their names and types come from its signature (:func:`agent_options`): an unknown key is
refused with the valid ones, values are converted to the annotated (or default's) type.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Callable

from spear_metrics.core.options import Option, OptionError, signature_options, unknown_message

#: entry-point group third-party adapters register under
ENTRY_POINT_GROUP = "spearbench.agents"

#: built-in adapters: name -> "module:attribute" (the reference agents and cascade need no
#: downloads; openai-* and gemini-live call a network service: key from the environment; moshi
#: calls a Moshi-protocol server the user runs; fixed-text answers text-only benchmarks with a
#: constant, a pipeline check)
BUILTIN_AGENTS: dict[str, str] = {
    "human": "spear_metrics.agents.reference:HumanAgent",
    "silence": "spear_metrics.agents.reference:SilenceAgent",
    "fixed-delay": "spear_metrics.agents.reference:FixedDelayAgent",
    "barge-in": "spear_metrics.agents.reference:BargeInAgent",
    "cascade": "spear_metrics.agents.cascade:CascadeAgent",
    "openai-audio": "spear_metrics.agents.openai_audio:OpenAIAudioAgent",
    "openai-realtime": "spear_metrics.agents.openai_realtime:OpenAIRealtimeAgent",
    "gemini-live": "spear_metrics.agents.gemini_live:GeminiLiveAgent",
    "moshi": "spear_metrics.agents.moshi:MoshiAgent",
    "qwen-omni": "spear_metrics.agents.qwen_omni:QwenOmniAgent",
    "fixed-text": "spear_metrics.agents.text:FixedTextAgent",
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


def agent_help(what: str = "adapter") -> str:
    """The ``--agent`` help of every command, generated from :data:`BUILTIN_AGENTS` (never a hand
    copy of the list)."""
    return (f"{what}: a name (built-in: {', '.join(BUILTIN_AGENTS)}; or one registered under the "
            f"'{ENTRY_POINT_GROUP}' entry points), path/to/file.py:ClassName, or package.module:ClassName "
            "(spearbench infer --list-agents describes each)")


def available_agents() -> list[str]:
    """Names of every adapter that :func:`load_agent` can find."""
    return sorted({*_RUNTIME, *BUILTIN_AGENTS, *_entry_points()})


def _import(target: str) -> Any:
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def is_reference(name: str) -> bool:
    """``True`` for ``path/to/file.py:ClassName`` or ``package.module:ClassName`` (not a registry name)."""
    left, sep, right = name.rpartition(":")
    return bool(sep and left and right) and right.replace(".", "_").isidentifier()


def _load_reference(name: str) -> Any:
    """The object a ``file.py:Class`` / ``module:Class`` reference names.

    Raises:
        UnknownAgentError: the file or module cannot be imported (the reason on one line), or it
            has no such attribute.
    """
    left, _, attr = name.rpartition(":")
    try:
        if left.endswith(".py") or os.sep in left or "/" in left:
            path = Path(left).expanduser().resolve()
            if not path.is_file():
                raise UnknownAgentError(f"agent file not found: {left}")
            mod_name = f"spearbench_agent_{abs(hash(str(path)))}"
            if mod_name not in sys.modules:
                spec = importlib.util.spec_from_file_location(mod_name, path)
                if spec is None or spec.loader is None:
                    raise UnknownAgentError(f"cannot import agent file {left}")
                module = importlib.util.module_from_spec(spec)
                sys.modules[mod_name] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(mod_name, None)
                    raise
            obj: Any = sys.modules[mod_name]
        else:
            obj = importlib.import_module(left)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj
    except UnknownAgentError:
        raise
    except AttributeError:
        raise UnknownAgentError(f"agent {name!r}: {left} has no {attr!r}") from None
    except Exception as e:  # SyntaxError, ImportError, an error in the user's module...
        msg = " ".join(str(e).split()) or type(e).__name__
        raise UnknownAgentError(f"agent {name!r}: cannot import {left}: {type(e).__name__}: {msg}") from None


def agent_factory(name: str) -> Callable[..., Any]:
    """The class/factory registered under ``name``, or named by a ``file.py:Class`` /
    ``module:Class`` reference.

    Raises:
        UnknownAgentError: no adapter of that name, or a reference that cannot be imported.
    """
    if is_reference(name) and name not in _RUNTIME:
        return _load_reference(name)
    if name in _RUNTIME:
        return _RUNTIME[name]
    if name in BUILTIN_AGENTS:
        return _import(BUILTIN_AGENTS[name])
    eps = _entry_points()
    if name in eps:
        return eps[name].load()
    raise UnknownAgentError(f"unknown agent {name!r}; available: {', '.join(available_agents())}")


def agent_options(factory: Callable[..., Any]) -> tuple[tuple[Option, ...], bool]:
    """The options an adapter takes, from its signature: ``(options, takes_any_key)``
    (see :func:`spear_metrics.core.options.signature_options`)."""
    return signature_options(factory)


def describe_agent(name: str) -> tuple[str, tuple[Option, ...]]:
    """``(first sentence of the docstring, options)`` of adapter ``name`` (for ``infer
    --list-agents``), as plain text (docstring markup rendered by
    :func:`spear_metrics.core.options.plain_text`). Options that cannot be given as ``-a
    KEY=VALUE`` text are left out (:func:`python_only_options`).

    Raises:
        UnknownAgentError: as :func:`agent_factory`.
    """
    import dataclasses
    import inspect

    from spear_metrics.core.options import plain_text

    factory = agent_factory(name)
    doc = " ".join((inspect.getdoc(factory) or "").split("\n\n")[0].split())
    first = plain_text(doc.split(". ")[0].rstrip(".") + ".") if doc else "(no description)"
    hidden = set(python_only_options(factory))
    options = tuple(dataclasses.replace(o, doc=plain_text(o.doc)) for o in agent_options(factory)[0] if o.name not in hidden)
    return first, options


def python_only_options(factory: Callable[..., Any]) -> list[str]:
    """Constructor keywords of ``factory`` that take a Python object (annotated ``Any`` or a
    class, e.g. the ``cascade`` agent's ``asr_backend``, an injected ASR for tests and
    notebooks): they cannot be given as ``-a KEY=VALUE`` text, so ``--list-agents`` does not
    list them (Python callers pass them to the constructor)."""
    import inspect

    target = factory
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return []
    out = []
    for p in sig.parameters.values():
        a = p.annotation
        if a is inspect.Parameter.empty:
            continue
        text = a if isinstance(a, str) else getattr(a, "__name__", None) or str(a)
        if text in ("Any", "typing.Any", "object") or a is Any:
            out.append(p.name)
    return out


def load_agent(name: str, **options: Any) -> Any:
    """Build the adapter ``name`` with ``options`` (``--agent-option KEY=VALUE`` pairs, strings
    or Python values), converted to the types of its signature.

    Raises:
        UnknownAgentError: no adapter of that name, or a reference that cannot be imported.
        OptionError: a key the adapter does not take (the message lists the ones it takes) or a
            value of the wrong type.
        TypeError / ValueError: options the adapter itself refuses.
    """
    factory = agent_factory(name)
    schema, takes_any = agent_options(factory)
    by_name = {o.name: o for o in schema}
    typed: dict[str, Any] = {}
    for k, v in options.items():
        if k in by_name:
            typed[k] = by_name[k].coerce(v, owner=f"agent {name}")
        elif takes_any:
            from spear_metrics.core.secrets import register_url_secrets

            register_url_secrets(v)  # as Option.coerce does for the declared options
            typed[k] = v
        else:
            raise OptionError(unknown_message(k, f"agent {name}", by_name))
    agent = factory(**typed)
    from spear_metrics.agents.duplex import is_network_agent

    if not callable(getattr(agent, "respond", None)) and not is_network_agent(agent) \
            and not callable(getattr(agent, "respond_text", None)):
        raise TypeError(f"agent {name!r} has neither respond(audio, row, config), respond_text(request) "
                        "nor async connect(request, sink, config)")
    return agent
