"""``openai-audio``: OpenAI Chat Completions with audio in and out (GPT-audio), or any
OpenAI-compatible server that speaks the same request (e.g. vLLM-Omni serving Qwen-Omni), through
the official ``openai`` SDK (``AsyncOpenAI``).

The request follows SPEAR's GPT-audio proxy (``inference_help_code/bin/llm_proxies/gpt-audio-1.5.py``
in ``thomasthebaud/SPEAR-benchmark-website``): the input clip mixed to one channel (the mean of the
two participants' channels, as ``ffmpeg -ac 1``), 16 kHz 16-bit WAV, base64 in an ``input_audio``
part after the optional instruction text; a system message; ``modalities=["text", "audio"]``,
``audio={"voice", "format": "wav"}``, temperature 0.7. The answer's base64 audio is decoded (WAV, or
raw 16-bit PCM at ``pcm_rate`` Hz for ``audio_format=pcm16``), its transcript kept as the text.

Timing: half-duplex. SPEAR's onset is ``None`` (an EMPTY ``answer_start_time``: the answer is placed
at the question end; SPEAR's proxy returns 0.0 here, which its runner turns into an answer starting
at the clip's start — a known upstream fault the project does not copy). ``response_time_s`` is
measured: request sent -> response received (``stream=true``: -> first audio chunk).
"""

from __future__ import annotations

import asyncio
import base64
import io
from typing import Any, Optional

import numpy as np

from spear_metrics.agents.base import AgentError
from spear_metrics.agents.duplex import AudioRequest, NetworkAgentBase, OutputSink, ProtocolError, SessionConfig
from spear_metrics.agents.net import (
    REQUEST_ID_HEADER,
    NetError,
    ResponseTooLarge,
    RetryPolicy,
    api_key,
    bounded_http_client,
    http_error,
    mask_secrets,
    too_large_cause,
    request_id,
    with_retries,
)
from spear_metrics.core.secrets import register_url_secrets

#: SPEAR's GPT-audio proxy system message
SPEAR_SYSTEM_PROMPT = "You are a helpful assistant that can understand and respond to speech."
#: rate (Hz) of the mono WAV sent (SPEAR's proxy: ffmpeg -ar 16000)
INPUT_RATE = 16_000


def wav_base64(audio: np.ndarray, sample_rate: int, *, rate: int = INPUT_RATE) -> str:
    """``audio`` ``(C, n)`` or ``(n,)`` -> base64 of a mono 16-bit WAV at ``rate`` Hz (channels
    averaged, resampled with the project's resampler, :func:`spear_datasets.audio.wav_bytes`)."""
    from spear_datasets.audio import resample, wav_bytes

    a = np.asarray(audio, dtype=np.float32)
    a = a[None, :] if a.ndim == 1 else a
    mono = resample(a.mean(axis=0, keepdims=True), int(sample_rate), rate)
    return base64.b64encode(wav_bytes(mono, rate)).decode("ascii")


def decode_answer_audio(data: Any, audio_format: str, pcm_rate: int) -> tuple[np.ndarray, int]:
    """Base64 answer audio -> ``((C, n) float32, rate Hz)``.

    Raises:
        ProtocolError: not base64, not a decodable WAV, a WAV rate outside the loader's limits,
            odd-length 16-bit PCM, or no samples.
    """
    from spear_datasets.audio import MAX_SAMPLE_RATE, MIN_SAMPLE_RATE

    if not isinstance(data, str) or not data:
        raise ProtocolError("answer audio is missing or not a base64 string")
    try:
        raw = base64.b64decode(data, validate=True)
    except (ValueError, TypeError):
        raise ProtocolError("answer audio is not valid base64") from None
    if audio_format == "pcm16":
        if len(raw) % 2 or not raw:
            raise ProtocolError(f"answer audio of {len(raw)} bytes is not 16-bit PCM")
        return (np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0)[None, :], int(pcm_rate)
    import soundfile as sf

    try:
        info = sf.info(io.BytesIO(raw))
        if not MIN_SAMPLE_RATE <= info.samplerate <= MAX_SAMPLE_RATE:
            raise ProtocolError(f"answer audio has a sample rate of {info.samplerate} Hz "
                                f"(outside {MIN_SAMPLE_RATE}-{MAX_SAMPLE_RATE} Hz)")
        wav, sr = sf.read(io.BytesIO(raw), dtype="float32", always_2d=True)
    except ProtocolError:
        raise
    except Exception as e:
        raise ProtocolError(f"answer audio cannot be decoded as {audio_format}: {' '.join(str(e).split())[:120]}") from None
    if wav.shape[0] == 0:
        raise ProtocolError("answer audio has no samples")
    return np.ascontiguousarray(wav.T), int(sr)


class OpenAIAudioAgent(NetworkAgentBase):
    """OpenAI Chat Completions with audio in and out: GPT-audio, or any OpenAI-compatible server such as vLLM-Omni.

    Half-duplex: the whole input goes in one request; onset ``None`` (EMPTY ``answer_start_time``);
    ``response_time_s`` = request sent -> response (or first audio chunk with ``stream``).
    The key is read from the environment variable ``api_key_env`` (never from a file or option).

    Args:
        model: model name sent in the request (SPEAR: ``gpt-audio-1.5``).
        base_url: API root, e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:8000/v1``.
        voice: output voice.
        audio_format: answer audio format asked for: ``wav`` (SPEAR) or ``pcm16`` (forced with ``stream``).
        pcm_rate: rate (Hz) of ``pcm16`` answer audio (OpenAI: 24000).
        temperature: sampling temperature (SPEAR's proxy: 0.7).
        system_prompt: system message (default SPEAR's proxy's); ``none`` for no system message.
        instructions: text placed before the audio in the user message (SPEAR's ``--prompt``).
        stream: stream the answer (Server-Sent Events); ``response_time_s`` then ends at the first audio chunk.
        api_key_env: environment variable holding the key (``none``: send no key, e.g. a local server).
        timeout_s: time limit (s) of one HTTP request.
        max_tries: tries per request (retries: HTTP 429/5xx and connection errors, honouring Retry-After).
        max_wait_s: longest wait (s) for the answer after the request, retries included.
        send_row_id: send the row's identity (the clip's file name) in the ``X-Client-Request-Id`` tracing header.
    """

    paced = False
    onset_rule = "none: half-duplex (EMPTY answer_start_time, the answer is placed at the question end)"

    def __init__(self, model: str = "gpt-audio", base_url: str = "https://api.openai.com/v1", voice: str = "alloy",
                 audio_format: str = "wav", pcm_rate: int = 24_000, temperature: Optional[float] = 0.7,
                 system_prompt: Optional[str] = SPEAR_SYSTEM_PROMPT, instructions: Optional[str] = None,
                 stream: bool = False, api_key_env: Optional[str] = "OPENAI_API_KEY", timeout_s: float = 120.0,
                 max_tries: int = 4, max_wait_s: float = 300.0, send_row_id: bool = True):
        if audio_format not in ("wav", "pcm16"):
            raise ValueError(f"audio_format must be wav or pcm16, got {audio_format!r}")
        if timeout_s <= 0 or max_wait_s <= 0:
            raise ValueError("timeout_s and max_wait_s must be > 0")
        self.model = model
        register_url_secrets(base_url)  # a key typed inside the URL is masked wherever it would appear
        self.base_url = base_url.rstrip("/")
        self.voice = voice
        self.stream = bool(stream)
        self.audio_format = "pcm16" if self.stream else audio_format
        self.pcm_rate = int(pcm_rate)
        self.temperature = temperature
        self.system_prompt = optional_text(system_prompt)
        self.instructions = optional_text(instructions)
        self.api_key_env = optional_text(api_key_env)
        self.timeout_s = float(timeout_s)
        self.max_wait_s = float(max_wait_s)
        self.retry = RetryPolicy(max_tries=int(max_tries))
        self.send_row_id = bool(send_row_id)
        if self.api_key_env:
            api_key(self.api_key_env)  # fail early, before any row, when the key is missing
        self._client: Optional[tuple[Any, Any]] = None

    # ------------------------------------------------------------------ request
    def _clientfor_loop(self) -> Any:
        from openai import AsyncOpenAI

        loop = asyncio.get_running_loop()
        if self._client is None or self._client[0] is not loop:
            key = api_key(self.api_key_env) if self.api_key_env else "none"
            http = bounded_http_client(timeout_s=self.timeout_s, where=self.base_url)  # bodies cut at MAX_RESPONSE_BYTES
            self._client = (loop, AsyncOpenAI(api_key=key, base_url=self.base_url, max_retries=0, timeout=self.timeout_s,
                                              http_client=http))
        return self._client[1]

    def messages(self, request: AudioRequest) -> list[dict[str, Any]]:
        """The Chat Completions ``messages`` of ``request``: system prompt, history, then the user
        message (instruction text, the input audio, the second audio).

        Raises:
            AgentError: an assistant history turn without text (Chat Completions takes earlier
                assistant audio only by id).
        """
        msgs: list[dict[str, Any]] = []
        if self.system_prompt:
            msgs.append({"role": "system", "content": self.system_prompt})
        for turn in request.history:
            if turn.role == "assistant":
                if not turn.text:
                    raise AgentError("an assistant history turn needs its text for Chat Completions")
                msgs.append({"role": "assistant", "content": turn.text})
                continue
            parts: list[dict[str, Any]] = []
            if turn.text:
                parts.append({"type": "text", "text": turn.text})
            if turn.audio is not None:
                parts.append(_audio_part(turn.audio, int(turn.sample_rate)))
            msgs.append({"role": "user", "content": parts})
        parts = []
        instr = request.instructions or self.instructions
        if instr:
            parts.append({"type": "text", "text": instr})
        parts.append(_audio_part(request.audio, request.sample_rate))
        if request.audio2 is not None:
            parts.append(_audio_part(request.audio2, int(request.audio2_sample_rate)))
        msgs.append({"role": "user", "content": parts})
        return msgs

    def body(self, request: AudioRequest) -> dict[str, Any]:
        """Keyword arguments of ``chat.completions.create`` for ``request``."""
        kw: dict[str, Any] = {"model": self.model, "messages": self.messages(request),
                              "modalities": list(request.modalities)}
        if "audio" in request.modalities:
            kw["audio"] = {"voice": self.voice, "format": self.audio_format}
        if self.temperature is not None:
            kw["temperature"] = float(self.temperature)
        if self.send_row_id and request.row_id:
            kw["extra_headers"] = {REQUEST_ID_HEADER: request_id(request.row_id)}
        return kw

    def warm_up(self) -> None:
        """Import the SDK now (before any session starts)."""
        import openai  # noqa: F401
        import soundfile  # noqa: F401

    async def connect(self, request: AudioRequest, sink: OutputSink, config: SessionConfig) -> "_ChatCall":
        return _ChatCall(self, request, sink)

    # ------------------------------------------------------------------ one try
    async def _once(self, kw: dict[str, Any], sink: OutputSink) -> None:
        try:
            await self._try(kw, sink)
        except NetError as e:
            if sink.result.chunks:  # audio already arrived: a retry would duplicate it
                e.retryable = False
            raise

    async def _try(self, kw: dict[str, Any], sink: OutputSink) -> None:
        import openai

        client = self._clientfor_loop()
        sink.request_sent()
        try:
            if not self.stream:
                resp = await client.chat.completions.create(**kw)
                sink.usage(getattr(resp, "model", None) or self.model, getattr(resp, "usage", None))
                self._read_response(resp, sink)
                return
            stream = await client.chat.completions.create(**kw, stream=True)
            finish = "stop"
            async for chunk in stream:
                if getattr(chunk, "usage", None) is not None:  # the last chunk, when the server reports it
                    sink.usage(getattr(chunk, "model", None) or self.model, chunk.usage)
                for ch in getattr(chunk, "choices", None) or []:
                    delta = ch.delta
                    audio = getattr(delta, "audio", None)
                    if audio is None and getattr(delta, "model_extra", None):
                        audio = delta.model_extra.get("audio")
                    if audio:
                        a = audio if isinstance(audio, dict) else dict(audio)
                        if a.get("data"):
                            wav, sr = decode_answer_audio(a["data"], "pcm16", self.pcm_rate)
                            sink.audio(wav, sr)
                        sink.text(a.get("transcript") or "")
                    if getattr(delta, "content", None):
                        sink.text(delta.content)
                    if ch.finish_reason:
                        finish = ch.finish_reason
            sink.done(finish)
        except openai.APIStatusError as e:
            raise http_error(e.status_code, getattr(e, "message", "") or "", dict(e.response.headers),
                             what=self.base_url) from None
        except openai.APITimeoutError:
            raise NetError(f"{self.base_url} did not answer within {self.timeout_s:g} s", retryable=True) from None
        except openai.APIConnectionError as e:
            big = too_large_cause(e)
            if big is not None:
                raise ResponseTooLarge(str(big)) from None
            cause = e.__cause__ or e
            raise NetError(f"cannot reach {self.base_url}: {type(cause).__name__}: {mask_secrets(str(cause))[:160]}",
                           retryable=True) from None
        except (openai.APIResponseValidationError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            if isinstance(e, ProtocolError):
                raise
            raise ProtocolError(f"malformed response from {self.base_url}: {type(e).__name__}: "
                                f"{' '.join(mask_secrets(str(e)).split())[:160]}") from None

    def _read_response(self, resp: Any, sink: OutputSink) -> None:
        choices = getattr(resp, "choices", None)
        if not choices:
            raise ProtocolError(f"response from {self.base_url} has no choices")
        choice = choices[0]
        msg = choice.message
        if msg is None:
            raise ProtocolError(f"response from {self.base_url} has no message")
        audio = getattr(msg, "audio", None)
        if audio is not None and getattr(audio, "data", None):
            wav, sr = decode_answer_audio(audio.data, self.audio_format, self.pcm_rate)
            sink.audio(wav, sr)
        if audio is not None and getattr(audio, "transcript", None):
            sink.text(audio.transcript)
        elif getattr(msg, "content", None):
            sink.text(msg.content if isinstance(msg.content, str) else str(msg.content))
        sink.done(choice.finish_reason or "stop")


def optional_text(value: Optional[str]) -> Optional[str]:
    """A string option where ``none``/empty means "not set"."""
    if value is None or str(value).strip().lower() in ("", "none", "null"):
        return None
    return str(value)


def _audio_part(audio: np.ndarray, sample_rate: int) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": wav_base64(audio, sample_rate), "format": "wav"}}


class _ChatCall:
    """The "connection" of a half-duplex request: buffers nothing (the request holds the whole
    input), sends the request at :meth:`end_input` with retries."""

    def __init__(self, agent: OpenAIAudioAgent, request: AudioRequest, sink: OutputSink):
        self.agent, self.request, self.sink = agent, request, sink

    async def send_audio(self, chunk: np.ndarray) -> None:
        return None

    async def end_input(self) -> None:
        kw = await asyncio.to_thread(self.agent.body, self.request)  # WAV encoding off the loop
        wait = self.agent.max_wait_s
        try:
            async with asyncio.timeout(wait):
                await with_retries(lambda: self.agent._once(kw, self.sink), self.agent.retry)
        except TimeoutError:
            raise NetError(f"no answer from {self.agent.base_url} within max_wait_s={wait:g} s") from None

    async def close(self) -> None:
        return None
