"""Speech-quality dimension: ``UTMOS``, ``WER_%``, ``CER_%`` (+ embedded MOS keys, per-ASR WER/CER).

Definitions: ``SPEAR_PROTOCOL.md`` section 2 ("Speech quality"); upstream
``thomasthebaud/SPEAR-benchmark-code`` ``bin/base_metrics.py``.

- ``UTMOS``: UTMOS22 strong predicted MOS (1-5) of the answer audio (channels averaged, 16 kHz).
  Only the ``utmos`` MOS backend writes it; when it does not run (not requested, or weights
  unavailable) per-sample ``UTMOS`` is ``null`` and the summary says why in ``UTMOS_note``.
- ``DNSMOS_*`` / ``DistillMOS``: the embedded MOS predictors, each under its own key.
- ``WER_%`` / ``CER_%``: 100 x jiwer WER/CER between the reference ``transcript_answer``
  (speaker tags ``P\\d{4}A?:`` removed) and the ASR hypothesis of the answer audio, both
  normalised with Whisper's English normaliser (:func:`spear_metrics.core.asr.normalize_text`).
  Mean over rows where it is defined.

Empty texts (after tag removal and normalisation; the normaliser drops fillers such as "mm", "uh"):

- empty reference -> WER/CER ``None`` (undefined: no reference words); counted in ``no_reference_%``;
- non-empty reference, empty hypothesis -> WER = CER = 100 % (every word deleted). Upstream drops
  such rows instead (which favours silent models); ``empty_hypothesis=skip`` reproduces that.

Pooling of several ASR systems (``asr=a,b``): each ASR's own values are written as
``WER_%_<name>`` / ``CER_%_<name>``; the pooled ``WER_%``/``CER_%`` of a row use the FIRST
listed ASR whose hypothesis is not empty, else the next (upstream: Qwen3-ASR-0.6B first, then
Whisper large-v3 for rows Qwen3 left empty). ``asr_used`` names the ASR per row.

Deviations from upstream (documented in README.md): text normalisation (upstream compares raw
text stripped of ``.? `` and, by a bug, keeps the speaker tags in the reference).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from spear_datasets.schema import SpearRow, strip_speaker_tags
from spear_metrics.core.asr import load_asr, normalize_text
from spear_metrics.core.dimension import Dimension, MetricKey, Sample, mean_or_none, percent_or_none
from spear_metrics.core.models import ModelUnavailableError
from spear_metrics.core.mos import load_mos
from spear_metrics.core.records import one_line

#: ``--option profile=...`` presets; explicit ``asr=`` / ``mos=`` override them
PROFILES: dict[str, dict[str, str]] = {
    # offline: models shipped in PyPI wheels
    "embedded": {"asr": "embedded", "mos": "dnsmos,distillmos"},
    # the published table: pooled Qwen3-ASR-0.6B then Whisper large-v3 (upstream order), UTMOS22 strong
    "reference": {"asr": "qwen3-asr-0.6b,whisper-large-v3", "mos": "utmos"},
}


def error_rates(reference: str | None, hypothesis: str | None) -> tuple[float | None, float | None]:
    """``(WER, CER)`` as fractions (x100 for %) of one sample, on normalised texts.

    ``reference`` has its speaker tags removed here. Empty reference -> ``(None, None)``;
    empty hypothesis with a reference -> ``(1.0, 1.0)``. Source: jiwer ``wer``/``cer``.
    """
    import jiwer

    ref = normalize_text(strip_speaker_tags(reference or ""))
    hyp = normalize_text(hypothesis or "")
    if not ref:
        return None, None
    if not hyp:
        return 1.0, 1.0
    return float(jiwer.wer(ref, hyp)), float(jiwer.cer(ref, hyp))


def _names(spec: Any) -> list[str]:
    if isinstance(spec, (list, tuple)):
        return [str(s).strip() for s in spec if str(s).strip()]
    return [s.strip() for s in str(spec or "").split(",") if s.strip()]


class SpeechQuality(Dimension):
    """Speech quality (MOS) and intelligibility (WER/CER against the answer's transcript).

    Options (CLI ``--option key=value``):
        profile: ``embedded`` (default; offline, packaged Whisper base + DNSMOS + DistillMOS) or
            ``reference`` (Qwen3-ASR-0.6B + Whisper large-v3 pooled, UTMOS22 strong).
        asr: comma list of ASR backends (:data:`spear_metrics.core.asr.ASR_BACKENDS`), pooled in order.
        mos: comma list of MOS backends (``utmos``, ``dnsmos``, ``distillmos``).
        whisper_model / qwen_asr_model / embedded_asr_model / utmos_model: model id or local path
            of the corresponding backend (through ``resolve_model``).
        device: ``cpu``/``cuda``/``cuda:N`` (default: CUDA when available).
        asr_batch_size: waves per ASR call (default 8). language: ``en`` (default) or ``auto``.
        empty_hypothesis: ``error`` (default, 100 %) or ``skip`` (row left out of WER/CER, upstream).
    """

    name = "speech_quality"
    version = "1.0.0"
    model_based = True
    keys = (
        MetricKey("UTMOS", "MOS 1-5", "higher", "UTMOS22 strong predicted MOS of the answer (SPEAR_PROTOCOL.md 2); null + UTMOS_note when not run"),
        MetricKey("WER_%", "%", "lower", "jiwer WER x100, Whisper-normalised transcript_answer (tags removed) vs ASR of the answer; pooled over the ASR list"),
        MetricKey("CER_%", "%", "lower", "jiwer CER x100, same texts as WER_%"),
        MetricKey("DNSMOS_OVRL", "MOS 1-5", "higher", "DNSMOS P.835 overall (speechmos ONNX), embedded"),
        MetricKey("DistillMOS", "MOS 1-5", "higher", "DistillMOS v7 (distillmos wheel), embedded"),
        MetricKey("no_reference_%", "%", "lower", "share of scored rows whose transcript_answer is empty after normalisation (WER undefined)"),
    )

    def __init__(self, **options: Any):
        super().__init__(**options)
        profile = str(options.get("profile", "embedded"))
        if profile not in PROFILES:
            raise ValueError(f"unknown speech_quality profile {profile!r}; known: {', '.join(PROFILES)}")
        self.profile = profile
        self.asr_names = _names(options.get("asr") or PROFILES[profile]["asr"])
        self.mos_names = _names(options.get("mos") or PROFILES[profile]["mos"])
        if options.get("empty_hypothesis", "error") not in ("error", "skip"):
            raise ValueError("empty_hypothesis must be 'error' or 'skip'")
        lang = options.get("language", "en")
        common = {k: options[k] for k in ("device",) if options.get(k)}
        asr_kw = dict(common, batch_size=int(options.get("asr_batch_size", 8)), language=None if lang == "auto" else lang)
        self.asrs = []
        for n in self.asr_names:
            kw = dict(asr_kw)
            if n.startswith(("whisper",)) and options.get("whisper_model"):
                kw["model"] = options["whisper_model"]
            if n.startswith("qwen3") and options.get("qwen_asr_model"):
                kw["model"] = options["qwen_asr_model"]
            if n in ("embedded", "faster-whisper") and options.get("embedded_asr_model"):
                kw["model"] = options["embedded_asr_model"]
            if n.startswith("whisper") and options.get("max_new_tokens"):
                kw["max_new_tokens"] = int(options["max_new_tokens"])
            self.asrs.append(load_asr(n, **kw))
        self.moss = []
        for n in self.mos_names:
            kw = dict(common)
            if n.startswith("utmos") and options.get("utmos_model"):
                kw["model"] = options["utmos_model"]
            self.moss.append(load_mos(n, **kw))
        self._broken: dict[int, str] = {}  # id(backend) -> why it cannot load (asked once)

    # ------------------------------------------------------------------ scoring

    def _ready(self, backend) -> str | None:
        """``None`` when ``backend`` loads; else the one-line reason (remembered)."""
        if id(backend) in self._broken:
            return self._broken[id(backend)]
        try:
            backend.load()
            return None
        except ModelUnavailableError as e:
            self._broken[id(backend)] = one_line(e)
            return self._broken[id(backend)]

    def score_batch(self, samples: Sequence[Sample]) -> list[dict[str, Any] | BaseException]:
        out: list[dict[str, Any] | BaseException] = [dict() for _ in samples]
        waves: dict[int, np.ndarray] = {}
        for i, s in enumerate(samples):
            try:
                waves[i] = s.answer_audio()[0]
            except Exception as e:
                out[i] = e
        live = sorted(waves)
        wl = [waves[i] for i in live]
        skip_empty = self.options.get("empty_hypothesis", "error") == "skip"

        # MOS: each backend its own keys
        mos_notes: list[str] = []
        for m in self.moss:
            why = self._ready(m)
            if why is None:
                for i, v in zip(live, m.score(wl)):
                    out[i].update(v)
            else:
                mos_notes.append(why)
                for i in live:
                    out[i].update({k: None for k in m.keys})
        utmos_note = None
        if not any("UTMOS" in m.keys for m in self.moss):
            utmos_note = (f"UTMOS not computed: MOS backends {','.join(self.mos_names) or 'none'} do not include utmos "
                          "(UTMOS22 weights are not on PyPI); use --option profile=reference or mos=utmos,...")
        elif any("UTMOS" in m.keys and id(m) in self._broken for m in self.moss):
            utmos_note = "UTMOS unavailable: " + next(self._broken[id(m)] for m in self.moss if "UTMOS" in m.keys)

        # ASR: each system's own WER/CER, then the pooled ones
        hyps: dict[str, list[str | None]] = {}
        asr_notes: list[str] = []
        for a in self.asrs:
            why = self._ready(a)
            if why is None:
                hyps[a.name] = [t.text for t in a.transcribe(wl, sr=16000)]
            else:
                asr_notes.append(why)
                hyps[a.name] = [None] * len(live)
        for j, i in enumerate(live):
            meta = samples[i].meta
            ref = strip_speaker_tags(meta.transcript_answer, meta.speakers.split("|"))
            v = out[i]
            v["UTMOS"] = v.get("UTMOS")
            if utmos_note:
                v["UTMOS_note"] = utmos_note
            v["reference_empty"] = not normalize_text(strip_speaker_tags(ref or ""))
            used = None
            for a in self.asrs:
                h = hyps[a.name][j]
                v[f"asr_text_{a.name}"] = h
                w, c = (None, None) if h is None else error_rates(ref, h)
                if h is not None and skip_empty and not normalize_text(h):
                    w, c = None, None
                v[f"WER_%_{a.name}"] = None if w is None else 100.0 * w
                v[f"CER_%_{a.name}"] = None if c is None else 100.0 * c
                if used is None and h is not None and normalize_text(h):
                    used = a.name
            if used is None:  # every hypothesis empty (or every ASR unavailable): the first available one
                used = next((a.name for a in self.asrs if hyps[a.name][j] is not None), None)
            v["asr_used"] = used
            v["WER_%"] = None if used is None else v[f"WER_%_{used}"]
            v["CER_%"] = None if used is None else v[f"CER_%_{used}"]
            if asr_notes:
                v["asr_note"] = "; ".join(asr_notes)
            if mos_notes:
                v["mos_note"] = "; ".join(mos_notes)
        return out

    # ------------------------------------------------------------------ summary

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        keys = ["UTMOS", *[k for m in self.moss for k in m.keys if k != "UTMOS"], "WER_%", "CER_%"]
        out: dict[str, Any] = {k: mean_or_none([v.get(k) for v in values]) for k in dict.fromkeys(keys)}
        for a in self.asrs:
            for base in ("WER_%", "CER_%"):
                out[f"{base}_{a.name}"] = mean_or_none([v.get(f"{base}_{a.name}") for v in values])
        out["no_reference_%"] = percent_or_none([v.get("reference_empty") for v in values])
        out["asr_models"] = [a.name for a in self.asrs]
        out["WER_pooling"] = ("single ASR" if len(self.asrs) == 1 else
                              f"first non-empty hypothesis in order {', '.join(a.name for a in self.asrs)} (upstream rule)")
        used = [v.get("asr_used") for v in values if v.get("asr_used")]
        if len(self.asrs) > 1 and used:
            out["asr_used_%"] = {a.name: 100.0 * used.count(a.name) / len(used) for a in self.asrs}
        for note_key, summary_key in (("UTMOS_note", "UTMOS_note"), ("asr_note", "ASR_note"), ("mos_note", "MOS_note")):
            notes = sorted({v[note_key] for v in values if v.get(note_key)})
            if notes:
                out[summary_key] = " | ".join(notes)
        if out.get("UTMOS") is None and "UTMOS_note" not in out:
            out["UTMOS_note"] = "UTMOS not computed for any scored row"
        return out

    def models(self) -> dict[str, str]:
        out = {}
        for m in self.moss:
            out[",".join(m.keys)] = m.describe()
        for a in self.asrs:
            out[f"asr:{a.name}"] = a.describe()
        out["text_normalizer"] = "Whisper EnglishTextNormalizer (transformers) + english.json spelling map"
        return out
