"""``qwen-omni``: Qwen2.5-Omni and Qwen3-Omni run in-process with transformers, as SPEAR ran them.

SPEAR's proxies for these models (``inference_help_code/bin/llm_proxies/`` of the SPEAR
benchmark website repository, ``Qwen2.5-Omni-7B`` and ``Qwen3-Omni-30B-A3B-Instruct``) load
``Qwen2_5OmniForConditionalGeneration`` / ``Qwen3OmniMoeForConditionalGeneration`` with their
processor, put the whole input clip (both channels mixed to mono at 16 kHz) in a user turn after a
system prompt, append the runner's instruction as text, and call ``generate`` with a text
streamer; the answer is the 24 kHz speech ``generate`` returns. Their onset rule, kept here::

    onset (s from the clip start) = clip duration + wall time from the generate call to the
                                    first non-empty text fragment of the streamer

so ``answer_start_time = onset - question_end_time`` (the runner's subtraction). That time is the
model's time to first text (prefill of the whole clip included), also returned as
``AgentAnswer.response_time_s``. What differs from the proxies is listed in
``docs/adapters_qwen.md``.

The checkpoint's class comes from its ``config.json`` (``model_type`` ``qwen2_5_omni`` or
``qwen3_omni_moe``), never from the model id. Weights are found by
:func:`spear_metrics.core.models.resolve_model` (Hub id, cache, ``HF_HUB_OFFLINE``, local folder)
when the adapter is built and loaded on the first row.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

from spear_datasets.audio import TARGET_SR, convert
from spear_datasets.schema import SpearRow
from spear_metrics.agents.base import AgentAnswer, AgentError, GenerationConfig
from spear_metrics.core.models import ModelUnavailableError, resolve_model

#: the checkpoint SPEAR's Qwen2.5-Omni proxy loads (the adapter's default ``model``)
DEFAULT_MODEL = "Qwen/Qwen2.5-Omni-7B"
#: rate (Hz) of the speech both models' ``generate`` returns (24 kHz, as the proxies write it)
OUTPUT_SR = 24_000
#: ``model_type`` of ``config.json`` -> the transformers class that runs it
MODEL_CLASSES: dict[str, str] = {
    "qwen2_5_omni": "Qwen2_5OmniForConditionalGeneration",
    "qwen3_omni_moe": "Qwen3OmniMoeForConditionalGeneration",
}
#: the system prompt of SPEAR's proxy for each model type. Qwen2.5-Omni's is the model card's
#: audio-output prompt without "developed by the Qwen Team, Alibaba Group," (as the proxy has it).
SYSTEM_PROMPTS: dict[str, str] = {
    "qwen2_5_omni": ("You are Qwen, a virtual human capable of perceiving auditory and visual inputs, "
                     "as well as generating text and speech."),
    "qwen3_omni_moe": ("You are a helpful voice assistant. Respond naturally and concisely. "
                       "Your output should be only the spoken content that the user should hear."),
}
#: the instruction SPEAR's runner (``run_LLM_inference.sh``, ``--prompt``) appends to the user turn,
#: byte for byte: bash's backslash-newline inside the quotes leaves the next line's 4-space indent.
SPEAR_INSTRUCTION = (
    "You are participating in a natural spoken conversation."
    "    Answer when it feels natural, not only at the very end."
    "    Keep responses conversational and concise."
    "    If the user interrupts, stop and respond to the latest user speech."
)
#: the proxies' thinker sampling besides the temperature (nucleus and top-k)
THINKER_TOP_P = 0.95
THINKER_TOP_K = 20


def checkpoint_type(folder: str | Path) -> str:
    """``model_type`` of the checkpoint in ``folder`` (from its ``config.json``).

    Raises:
        ModelUnavailableError: no readable ``config.json``.
        ValueError: a model type this adapter does not run (one line naming it).
    """
    from transformers import AutoConfig

    try:
        model_type = AutoConfig.from_pretrained(str(folder)).model_type
    except Exception as e:
        raise ModelUnavailableError(f"Qwen-Omni model {str(folder)!r}: cannot read its config.json "
                                    f"({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
    if model_type not in MODEL_CLASSES:
        raise ValueError(f"model {str(folder)!r} is a {model_type!r} checkpoint; qwen-omni runs "
                         f"{' or '.join(sorted(MODEL_CLASSES))}")
    return model_type


def samples_per_code(config: Any) -> int:
    """Output samples (at :data:`OUTPUT_SR`) per speech code the talker generates, from the
    checkpoint's config: Qwen2.5-Omni: DiT ``repeats`` mel frames per code x BigVGAN's upsampling
    (2 x 240 = 480, 20 ms); Qwen3-Omni: code2wav's total upsampling (1920, 80 ms)."""
    if config.model_type == "qwen2_5_omni":
        t2w = config.token2wav_config
        return int(t2w.dit_config.repeats * math.prod(t2w.bigvgan_config.upsample_rates))
    c2w = config.code2wav_config
    return int(math.prod(list(c2w.upsample_rates) + list(c2w.upsampling_ratios)))


def build_messages(model_type: str, system_prompt: str, instruction: str, mono: np.ndarray) -> list[dict]:
    """The chat of one clip, as SPEAR's proxies build it: a system turn, then a user turn holding
    the clip (``mono``: 16 kHz ``(n,)``) and, unless ``instruction`` is empty, the instruction
    after it. Qwen2.5-Omni's proxy gives the system prompt as a text part, Qwen3-Omni's as a
    string."""
    system: Any = ([{"type": "text", "text": system_prompt}] if model_type == "qwen2_5_omni" else system_prompt)
    user: list[dict] = [{"type": "audio", "audio": mono}]
    if instruction:
        user.append({"type": "text", "text": instruction})
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def prepare_inputs(processor: Any, messages: list[dict], mono: np.ndarray) -> Any:
    """Model inputs of one clip: the processor's chat template rendered with the generation
    prompt, then ``processor(text=..., audio=[mono])`` (its feature extractor and audio
    placeholder expansion, e.g. Qwen2.5-Omni's pads or cuts the audio to 30 s, Qwen3-Omni's
    does not cut). ``mono``: float32 ``(n,)`` at the feature extractor's rate. Returns the
    processor's ``BatchFeature`` (``input_ids``, ``attention_mask``, ``input_features``,
    ``feature_attention_mask``), batch of 1."""
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return processor(text=text, audio=[mono], return_tensors="pt", padding=True)


def _first_text_clock(tokenizer: Any):
    """A transformers ``TextStreamer`` for the thinker that prints nothing and records
    ``time.monotonic()`` of the first generated token (``first_token_t``) and of the first
    non-empty text fragment (``first_text_t``), the moment SPEAR's ``TextIteratorStreamer`` loop
    would see it (fragments end at a space or line end, or at the end of generation)."""
    from transformers import TextStreamer

    class FirstTextClock(TextStreamer):
        def __init__(self):
            super().__init__(tokenizer, skip_prompt=True, skip_special_tokens=True)
            self.first_token_t: Optional[float] = None
            self.first_text_t: Optional[float] = None
            self.parts: list[str] = []

        def put(self, value):
            if self.first_token_t is None and not self.next_tokens_are_prompt:
                self.first_token_t = time.monotonic()
            super().put(value)

        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            if text and self.first_text_t is None:
                self.first_text_t = time.monotonic()
            self.parts.append(text)

    return FirstTextClock()


class QwenOmniAgent:
    onset_kind = "first_text_token"  # spear_metrics.agents.base.ONSET_KINDS
    """Qwen2.5-Omni or Qwen3-Omni in-process (transformers), with SPEAR's prompts and onset rule.

    Half-duplex: it hears the whole input clip, both channels mixed to mono, and answers with
    speech; onset = clip duration + measured time to the first text (s).

    Args:
        model: Hub id (``Qwen/Qwen2.5-Omni-7B``, ``Qwen/Qwen3-Omni-30B-A3B-Instruct``) or local folder of a checkpoint with a talker; the class comes from its config.json.
        dtype: auto (bfloat16 on CUDA, float32 on CPU), bfloat16, float16 or float32.
        device: auto (this process's GPU, else CPU), cpu, cuda or cuda:N; the whole model goes there.
        speaker: voice of the talker (Qwen2.5-Omni: Chelsie, Ethan; Qwen3-Omni: Ethan, Chelsie, Aiden); SPEAR used Ethan.
        system_prompt: system turn; empty = the SPEAR proxy's prompt for the checkpoint's model type.
        instruction: text after the audio in the user turn (default: SPEAR's runner prompt); empty = none.
        temperature: thinker sampling temperature (SPEAR: 0.7, with top_p 0.95, top_k 20); 0 = greedy.
        max_new_tokens: most text tokens of the thinker (SPEAR: 8192).

    Raises (when built): ModelUnavailableError (one line: a Hub id not in the cache under
    ``HF_HUB_OFFLINE``, a missing folder, no ``config.json``, torchvision missing), ValueError (a
    checkpoint of another model type, or a bad option).
    """

    def __init__(self, model: str = DEFAULT_MODEL, dtype: str = "auto", device: str = "auto", speaker: str = "Ethan",
                 system_prompt: str = "", instruction: str = SPEAR_INSTRUCTION, temperature: float = 0.7,
                 max_new_tokens: int = 8192):
        if not (math.isfinite(float(temperature)) and float(temperature) >= 0):
            raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
        if int(max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens!r}")
        if str(dtype).lower() not in ("auto", "bfloat16", "float16", "float32"):
            raise ValueError(f"dtype must be auto, bfloat16, float16 or float32, got {dtype!r}")
        self.model_ref = str(model)
        self.dtype_name = str(dtype).lower()
        self.device_name = str(device)
        self.speaker = str(speaker)
        self.instruction = str(instruction)
        self.temperature = float(temperature)
        self.max_new_tokens = int(max_new_tokens)
        self.path = resolve_model(self.model_ref, purpose="Qwen-Omni", option="model", flag="-a")
        self.model_type = checkpoint_type(self.path)
        if importlib.util.find_spec("torchvision") is None:  # the processors' video part, even for audio only
            raise ModelUnavailableError("the Qwen-Omni processors of transformers need torchvision: pip install torchvision")
        self.system_prompt = str(system_prompt) or SYSTEM_PROMPTS[self.model_type]
        self.model: Any = None
        self.processor: Any = None
        self._load_error: Optional[str] = None
        #: timings of the last :meth:`respond` (s): ``first_token_s``, ``first_text_s``, ``generate_s``
        self.last_timing: dict[str, Optional[float]] = {}

    # ------------------------------------------------------------------ loading
    def load(self) -> None:
        """Load the model and processor (once). Raises :class:`AgentError` with the reason (the
        same one again on later calls, without retrying a load that failed)."""
        if self.model is not None:
            return
        if self._load_error is not None:
            raise AgentError(self._load_error)
        try:
            self._load()
        except Exception as e:
            self._load_error = f"cannot load Qwen-Omni model {self.model_ref!r}: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
            raise AgentError(self._load_error) from None

    def _load(self) -> None:
        import torch
        import transformers
        from transformers import AutoProcessor

        from spear_metrics.core.batching import model_dtype, process_device

        device = process_device() if self.device_name == "auto" else torch.device(self.device_name)
        dtype = model_dtype(self.dtype_name, device)
        cls = getattr(transformers, MODEL_CLASSES[self.model_type])
        model = cls.from_pretrained(str(self.path), dtype=dtype, device_map=str(device)).eval()
        if not getattr(model, "has_talker", False):
            raise RuntimeError("the checkpoint has no talker (enable_audio_output is false): it cannot speak")
        voices = (list(model.speaker_map) if self.model_type == "qwen2_5_omni"
                  else [v for v in model.config.talker_config.speaker_id or {}])
        if self.speaker not in voices and self.speaker.lower() not in voices:
            raise ValueError(f"speaker {self.speaker!r} is not a voice of this checkpoint ({', '.join(voices)})")
        processor = AutoProcessor.from_pretrained(str(self.path))
        self.model, self.processor, self.device, self.dtype = model, processor, device, dtype
        self.samples_per_code = samples_per_code(model.config)
        self._warm_up()

    def _warm_up(self) -> None:
        """One 1-token pass of the thinker over 1 s of silence in the real prompt, so that the
        first row's time to first text is measured warm (no kernel or allocator start-up in it)."""
        import torch

        silence = np.zeros(int(self.processor.feature_extractor.sampling_rate), np.float32)
        messages = build_messages(self.model_type, self.system_prompt, self.instruction, silence)
        inputs = prepare_inputs(self.processor, messages, silence).to(self.model.device).to(self.dtype)
        with torch.inference_mode():
            self.model.thinker.generate(**inputs, max_new_tokens=1, do_sample=False)

    # ------------------------------------------------------------------ one row
    def respond(self, audio: np.ndarray, row: SpearRow, config: GenerationConfig) -> AgentAnswer:
        """Answer one clip (``audio``: ``(2, n)`` float32 at 16 kHz).

        Returns 24 kHz mono speech; ``onset`` = ``n / 16000`` + time to the first text fragment
        (``None`` when the model wrote no text); ``response_time_s`` = that time; ``text`` = the
        thinker's text; ``finish_reason`` ``"length"`` when the thinker stopped at
        ``max_new_tokens`` or the speech reached ``config.max_answer_s``, else ``"stop"``.

        Raises:
            AgentError: the model cannot be loaded, or returned no audio.
            Anything ``generate`` raises (the row fails with it).
        """
        import torch

        self.load()
        fe_sr = int(self.processor.feature_extractor.sampling_rate)
        mono = convert(np.asarray(audio, dtype=np.float32), TARGET_SR, sr=fe_sr, channels="mix")[0]
        clip_s = audio.shape[-1] / TARGET_SR
        inputs = prepare_inputs(self.processor, build_messages(self.model_type, self.system_prompt, self.instruction, mono), mono)
        inputs = inputs.to(self.model.device).to(self.dtype)
        prompt_len = int(inputs["input_ids"].shape[1])

        max_codes = max(1, math.ceil(config.max_answer_s * OUTPUT_SR / self.samples_per_code))
        clock = _first_text_clock(self.processor.tokenizer)
        kwargs: dict[str, Any] = {
            "speaker": self.speaker,
            "thinker_streamer": clock,
            "thinker_max_new_tokens": self.max_new_tokens,
            "thinker_do_sample": self.temperature > 0,
            "talker_do_sample": False,
            "talker_max_new_tokens": max_codes,
        }
        if self.temperature > 0:
            kwargs.update(thinker_temperature=self.temperature, thinker_top_p=THINKER_TOP_P, thinker_top_k=THINKER_TOP_K)
        if "return_audio" in inspect.signature(self.model.generate).parameters:
            kwargs["return_audio"] = True  # Qwen3-Omni; Qwen2.5-Omni returns audio whenever it has a talker
        torch.manual_seed(int(config.seed))
        with torch.inference_mode():
            t0 = time.monotonic()
            result = self.model.generate(**inputs, **kwargs)
            t_end = time.monotonic()
        sequences, wav = result if isinstance(result, tuple) else (result, None)
        sequences = getattr(sequences, "sequences", sequences)
        if wav is None:
            raise AgentError("the model returned no audio (its generate gave text only)")
        speech = np.clip(wav.reshape(-1).float().cpu().numpy(), -1.0, 1.0).astype(np.float32)
        if speech.size == 0:
            raise AgentError("the model returned no audio (0 samples)")

        generated = sequences[0, prompt_len:]
        text = self.processor.batch_decode(generated[None], skip_special_tokens=True,
                                           clean_up_tokenization_spaces=False)[0].strip()
        text = text or "".join(clock.parts).strip()
        ttft = None if clock.first_text_t is None else clock.first_text_t - t0
        self.last_timing = {
            "first_token_s": None if clock.first_token_t is None else clock.first_token_t - t0,
            "first_text_s": ttft,
            "generate_s": t_end - t0,
        }
        capped = speech.size > (max_codes - 3) * self.samples_per_code
        finish = "length" if (generated.numel() >= self.max_new_tokens or capped) else "stop"
        return AgentAnswer(audio=speech, sample_rate=OUTPUT_SR, onset=None if ttft is None else clip_s + ttft,
                           text=text or None, finish_reason=finish, response_time_s=ttft)
