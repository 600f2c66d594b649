"""Text answers to audio: the adapter protocol of instruction benchmarks (Dynamic-SUPERB).

An instruction benchmark sends an audio clip (and sometimes a second one) with a text
instruction and scores the system's *text* answer. Two kinds of adapter give one:

- a **network adapter** (:class:`spear_metrics.agents.duplex.NetworkAgent`, e.g. ``openai-audio``
  for OpenAI-compatible servers): one session of :func:`spear_metrics.agents.duplex.run_session`
  with ``AudioRequest.modalities == ("text",)``; the answer is ``SessionResult.text``
  (:func:`network_text_answer`);
- a **local text adapter** (:class:`TextAgent`): any object with
  ``respond_text(request: AudioRequest) -> str``, e.g. a transformers audio-language model run
  in this process. The harness calls it on a worker thread with a time limit.

:func:`is_text_capable` says whether an adapter gives text answers at all. ``fixed-text``
(:class:`FixedTextAgent`) answers every request with the same text: a pipeline check that needs
no model, never a system under test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable

from spear_metrics.agents.base import AgentError
from spear_metrics.agents.duplex import AudioRequest, is_network_agent


class NoTextAnswerError(AgentError):
    """The system ended its answer without any text (one line; the row fails)."""


@runtime_checkable
class TextAgent(Protocol):
    """A local adapter that answers an :class:`AudioRequest` with text.

    ``respond_text(request)``: ``request.audio`` ``(C, n)`` float32 at ``request.sample_rate``
    Hz (every channel of the benchmark's clip, unmixed), ``request.audio2`` the second clip
    when the item has one, ``request.instructions`` the item's instruction. Returns the answer
    text; raise :class:`~spear_metrics.agents.base.AgentError` (or anything) to fail the row.
    """

    def respond_text(self, request: AudioRequest) -> str: ...


def is_text_agent(agent: Any) -> bool:
    """``True`` when ``agent`` has a callable ``respond_text`` (:class:`TextAgent`)."""
    return callable(getattr(agent, "respond_text", None))


def is_text_capable(agent: Any) -> bool:
    """``True`` when ``agent`` can answer with text: a :class:`TextAgent` or a network adapter."""
    return is_text_agent(agent) or is_network_agent(agent)


@dataclass(frozen=True)
class TextAnswer:
    """A text answer: ``text`` (stripped, non-empty), ``elapsed_s`` (wall-clock seconds from the
    call to the complete answer: the adapter call, or the whole session with its paced input and
    retries), ``finish_reason`` and ``usage`` (what the service billed)."""

    text: str
    elapsed_s: Optional[float] = None
    finish_reason: str = "stop"
    #: tokens the service billed for the answer, ``{model: usage fields}``
    #: (:class:`spear_metrics.core.usage.Usage`); ``None`` when not reported
    usage: Optional[dict] = None


async def network_text_answer(agent: Any, request: AudioRequest, *, chunk_ms: float = 40.0,
                              limit_s: Optional[float] = None, sessions: Any = None, tag: Any = None) -> TextAnswer:
    """One session of network adapter ``agent`` asking for text only; with ``limit_s``, under
    that time limit (s) and run where ``sessions`` runs it
    (:func:`spear_metrics.agents.processes.run_one_session`: this event loop, or a session
    process of ``--processes``; ``tag``: the row's id there).

    Raises:
        ValueError: ``request.modalities`` is not ``("text",)``.
        NoTextAnswerError: the session ended without text.
        RowTimeout: past ``limit_s``.
        Whatever :func:`spear_metrics.agents.duplex.run_session` raises (the adapter's errors).
    """
    import time

    from spear_metrics.agents.duplex import run_session, session_config

    if tuple(request.modalities) != ("text",):
        raise ValueError(f"a text answer is asked with modalities=('text',), got {request.modalities!r}")
    t0 = time.perf_counter()
    scfg = session_config(agent, chunk_ms=chunk_ms)
    if limit_s is None:
        result = await run_session(agent, request, scfg)
    else:
        from spear_metrics.agents.processes import run_one_session

        result = await run_one_session(agent, request, scfg, limit_s, sessions=sessions, tag=tag)
    text = (result.text or "").strip()
    if not text:
        raise NoTextAnswerError(f"the system sent no text ({result.finish_reason})")
    return TextAnswer(text=text, elapsed_s=time.perf_counter() - t0, finish_reason=result.finish_reason,
                      usage=dict(result.usage) or None)


def local_text_answer(agent: Any, request: AudioRequest) -> TextAnswer:
    """``agent.respond_text(request)`` checked: a non-empty ``str``.

    Raises:
        NoTextAnswerError: an empty answer. AgentError: not a string. Whatever the adapter raises.
    """
    import time

    t0 = time.perf_counter()
    text = agent.respond_text(request)
    if not isinstance(text, str):
        raise AgentError(f"respond_text returned {type(text).__name__}, expected str")
    if not text.strip():
        raise NoTextAnswerError("the adapter returned an empty answer")
    return TextAnswer(text=text.strip(), elapsed_s=time.perf_counter() - t0)


class FixedTextAgent:
    """Answers every request with the same text: a pipeline check without a model (never a system under test).

    Args:
        text: the answer.
    """

    def __init__(self, text: str = "I cannot tell."):
        if not str(text).strip():
            raise ValueError("fixed-text needs a non-empty text")
        self.text = str(text)

    def respond_text(self, request: AudioRequest) -> str:
        return self.text

    def respond(self, audio: Any, row: Any, config: Any) -> Any:
        raise AgentError("fixed-text answers with text only (Dynamic-SUPERB); it has no speech answer")


__all__ = ["FixedTextAgent", "NoTextAnswerError", "TextAgent", "TextAnswer", "is_text_agent", "is_text_capable",
           "local_text_answer", "network_text_answer"]
