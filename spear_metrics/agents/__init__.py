"""Speech-agent adapters and the inference harness of ``spearbench infer``.

- :mod:`.base`: the interface (:class:`Agent`, :class:`StreamingAgent`, :class:`StreamSession`,
  :class:`AgentAnswer`, :class:`GenerationConfig`, :func:`validate_answer`).
- :mod:`.registry`: adapters by name (built-ins, :func:`register_agent`, entry points of group
  ``spearbench.agents``).
- :mod:`.reference`: ``human``, ``silence``, ``fixed-delay``, ``barge-in``; :mod:`.cascade`: ``cascade``.
- :mod:`.duplex`: the interface of real-time network adapters (:class:`NetworkAgent`,
  :class:`AudioRequest`, :class:`OutputSink`, :func:`run_session`, :class:`SessionResult`).
- :mod:`.harness`: :func:`run_inference` (resumable, accelerate-sharded).
"""

from spear_metrics.agents.base import (
    Agent,
    AgentAnswer,
    AgentError,
    AgentOutputError,
    GenerationConfig,
    StreamingAgent,
    StreamSession,
    validate_answer,
)
from spear_metrics.agents.duplex import (
    AudioRequest,
    DialogueTurn,
    DuplexConnection,
    NetworkAgent,
    NetworkAgentBase,
    OutputSink,
    SessionConfig,
    SessionResult,
    run_session,
)
from spear_metrics.agents.registry import (
    BUILTIN_AGENTS,
    ENTRY_POINT_GROUP,
    UnknownAgentError,
    available_agents,
    load_agent,
    register_agent,
    unregister_agent,
)

__all__ = [
    "AudioRequest", "DialogueTurn", "DuplexConnection", "NetworkAgent", "NetworkAgentBase", "OutputSink",
    "SessionConfig", "SessionResult", "run_session",
    "Agent", "AgentAnswer", "AgentError", "AgentOutputError", "BUILTIN_AGENTS", "ENTRY_POINT_GROUP",
    "GenerationConfig", "StreamSession", "StreamingAgent", "UnknownAgentError", "available_agents",
    "load_agent", "register_agent", "unregister_agent", "validate_answer",
]
