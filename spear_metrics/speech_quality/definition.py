r"""Speech-quality dimension: ``UTMOS``, ``WER_%``, ``CER_%`` (+ embedded MOS keys, per-ASR and
normalised WER/CER).

Definitions: ``SPEAR_PROTOCOL.md`` sections 2 ("Speech quality") and 4; upstream
``thomasthebaud/SPEAR-benchmark-code`` ``bin/base_metrics.py`` (``clean_reference``,
``compute_wer``), ``bin/transcribe.py`` (how the ASR systems are called) and
``bin/reports/benchmark_line.py`` (pooling).

Published keys (SPEAR's rule, quirks included):

- ``UTMOS``: UTMOS22 strong predicted MOS (1-5) of the answer audio (channels averaged, 16 kHz).
  Only the ``utmos`` MOS backend writes it; otherwise ``null`` and the summary says why in
  ``UTMOS_note``.
- ``WER_%_<asr>`` / ``CER_%_<asr>`` per row and ASR: jiwer (default transforms) on RAW text:
  reference = :func:`spear_reference` of ``transcript_answer`` (speaker tags ``P\d{4}A?:``, a
  leading ``**heading**``, text before the last triple space removed; ``.? `` stripped at both
  ends), hypothesis stripped of ``.? `` at both ends. Case and punctuation count. Rows without a
  reference are left out; rows whose hypothesis from that ASR is empty are left out.
- ``WER_%`` / ``CER_%``: mean over every (row, ASR) value of SPEAR's two systems (Whisper
  large-v3 and Qwen3-ASR-0.6B, called as ``bin/transcribe.py`` calls them: no language forced,
  one 30 s window, their default token limits; Qwen3-ASR at most 256 new tokens). With any other
  ASR set they are ``null`` with ``WER_note``: the embedded Whisper base's values stand under
  their own keys (``WER_%_faster-whisper-base``).

Project keys (the project believes raw-text WER mostly measures punctuation and casing):

- ``WER_norm_%_<asr>`` / ``CER_norm_%_<asr>``: jiwer on both texts passed through Whisper's
  English normaliser (:func:`spear_metrics.core.textnorm.normalize_text`), the row's own speaker tags
  removed; an empty hypothesis with a reference counts 100 % (every word deleted;
  ``empty_hypothesis=skip`` leaves such rows out as SPEAR does).
- ``WER_norm_%`` / ``CER_norm_%``: mean over every (row, ASR) value of the ASR systems that ran.
- ``WER_numnorm_%_<asr>`` / ``WER_numnorm_%``: as ``WER_norm_%`` with the project's number-aware
  normaliser (:func:`spear_metrics.core.textnorm.normalize_text_numbers`): every number written out in
  words, so "$5" and "five dollars" are the same two words and "$5" and "5 euros" differ by one;
  Whisper's normaliser (``WER_norm_%``) drops the unit of quantities of 1 ("$1", "€1" and "1%"
  all become "one"), a detached "%" and the "¥" sign.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from spear_datasets.schema import SpearRow, strip_speaker_tags
from spear_metrics.core.asr import ASR_BACKENDS, load_asr
from spear_metrics.core.batching import device_or_default, one_torch_thread
from spear_metrics.core.dimension import (Dimension, MetricKey, Option, Sample, mean_or_none, mean_resampler,
                                          percent_or_none, percent_resampler)
from spear_metrics.core.models import ModelUnavailableError
from spear_metrics.core.mos import MOS_BACKENDS, UTMOS_MAX_SECONDS, load_mos
from spear_metrics.core.records import one_line
from spear_metrics.core.textnorm import normalize_text, normalize_text_numbers

#: ``--option profile=...`` presets; explicit ``asr=`` / ``mos=`` override them
PROFILES: dict[str, dict[str, str]] = {
    # offline: models shipped in PyPI wheels
    "embedded": {"asr": "embedded", "mos": "dnsmos,distillmos"},
    # the published table: SPEAR's two ASR systems (pooled per (row, ASR) value), UTMOS22 strong
    "reference": {"asr": "whisper-large-v3,qwen3-asr-0.6b", "mos": "utmos"},
}

#: SPEAR's ASR systems: backend name -> (column label as SPEAR names it, default Hub id).
#: ``WER_%``/``CER_%`` are written only when exactly these ran (default ids or local copies).
SPEAR_ASR_SYSTEMS: dict[str, tuple[str, str]] = {
    "whisper-large-v3": ("whisper-large-v3", "openai/whisper-large-v3"),
    "qwen3-asr-0.6b": ("Qwen3-ASR-0.6B", "Qwen/Qwen3-ASR-0.6B-hf"),
}

_SPEAR_TAG = re.compile(r"(?:P\d{4}A?:\s*)")
_SPEAR_HEADING = re.compile(r"^\s*\*\*[^*]+\*\*\s*[:\-\u2013\u2014]?\s*")


def spear_reference(transcript_answer: str | None) -> str | None:
    r"""The reference text SPEAR's WER uses (``clean_reference`` then ``.strip('.? ')``).

    Speaker tags ``P\d{4}A?:`` removed, then a leading ``**heading**`` (with an optional ``:``
    or dash), then, when the text holds three spaces in a row, only what follows the last
    triple space is kept (tags removed again); ``.``, ``?`` and spaces stripped at both ends.
    Nothing else: case and inner punctuation stay. ``None`` when there is no reference (empty
    cell, or nothing left after cleaning: "no reference", not an error).
    """
    if transcript_answer is None or str(transcript_answer) in ("", "nan"):
        return None
    text = _SPEAR_HEADING.sub("", _SPEAR_TAG.sub("", str(transcript_answer)))
    if "   " in text:
        text = text.split("   ")[-1]
    text = _SPEAR_TAG.sub("", text).strip(".? ")
    return text or None


def spear_error_rates(reference: str | None, hypothesis: str | None) -> tuple[float | None, float | None]:
    """``(WER, CER)`` fractions of one (row, ASR) pair under SPEAR's rule (``compute_wer``/``compute_cer``).

    Args:
        reference: the row's ``transcript_answer`` as written (cleaned here by :func:`spear_reference`).
        hypothesis: the ASR text (``None`` = the ASR did not run).

    Returns:
        ``(None, None)`` when there is no reference or the hypothesis is empty (SPEAR leaves
        such rows out of that ASR's column); else jiwer ``wer``/``cer`` with default transforms
        of the raw texts (values above 1 are kept).
    """
    import jiwer

    ref = spear_reference(reference)
    if ref is None or hypothesis is None or hypothesis == "":
        return None, None
    hyp = hypothesis.strip(".? ")
    return float(jiwer.wer(ref, hyp)), float(jiwer.cer(ref, hyp))


def error_rates(reference: str | None, hypothesis: str | None) -> tuple[float | None, float | None]:
    """``(WER, CER)`` fractions of the project's normalised variant (``WER_norm_%``) of one pair.

    Both texts pass through Whisper's English normaliser; ``reference`` has its speaker tags
    removed first. Empty reference -> ``(None, None)``; empty hypothesis with a reference ->
    ``(1.0, 1.0)``. Source: jiwer ``wer``/``cer``.
    """
    import jiwer

    ref = normalize_text(strip_speaker_tags(reference or ""))
    hyp = normalize_text(hypothesis or "")
    if not ref:
        return None, None
    if not hyp:
        return 1.0, 1.0
    return float(jiwer.wer(ref, hyp)), float(jiwer.cer(ref, hyp))


def numnorm_error_rate(reference: str | None, hypothesis: str | None) -> float | None:
    """WER fraction of ``WER_numnorm_%`` for one pair: both texts through
    :func:`spear_metrics.core.textnorm.normalize_text_numbers` (``reference`` with its speaker tags
    removed first), then jiwer ``wer``. Empty reference -> ``None``; empty hypothesis with a
    reference -> ``1.0`` (every word deleted), as :func:`error_rates`."""
    import jiwer

    ref = normalize_text_numbers(strip_speaker_tags(reference or ""))
    hyp = normalize_text_numbers(hypothesis or "")
    if not ref:
        return None
    if not hyp:
        return 1.0
    return float(jiwer.wer(ref, hyp))


def _is_spear_pair(labels: Sequence[str]) -> bool:
    """Exactly SPEAR's two ASR systems (by their key labels)."""
    return sorted(labels) == sorted(label for label, _ in SPEAR_ASR_SYSTEMS.values())


def _pooled(values: Sequence[dict[str, Any]], keys: Sequence[str]) -> float | None:
    """Mean over every (row, key) value that exists: SPEAR concatenates the per-ASR columns."""
    return mean_or_none([v.get(k) for v in values for k in keys])


def no_reference_note(n_rows: int) -> str:
    """``WER_note``/``CER_note`` when no scored row has a reference text: the cause, never a
    pointer to other WER keys (they are null for the same reason)."""
    return (f"no reference: transcript_answer is empty (or only tags) after SPEAR's cleaning in all {n_rows} scored "
            "rows (an agent that returns no text, AgentAnswer.text None, leaves it empty), so no WER or CER exists "
            "(no_reference_% = 100); give each answer the text it speaks")


def _no_reference_codes(values: Sequence[dict[str, Any]]) -> np.ndarray:
    """Per row: 1 = no reference after cleaning, 0 = a reference, -1 = not decided."""
    return np.array([-1 if v.get("reference_empty") is None else int(bool(v.get("reference_empty"))) for v in values],
                    dtype=np.int8)


def _all_without_reference(codes: np.ndarray) -> bool:
    """Some row decided and none of them has a reference (``codes`` from :func:`_no_reference_codes`)."""
    return bool((codes == 1).any() and not (codes == 0).any())


#: per-sample note key -> summary key (notes joined over the rows that carry one)
_NOTES = (("UTMOS_note", "UTMOS_note"), ("asr_note", "ASR_note"), ("mos_note", "MOS_note"))


def _with_notes(out: dict[str, Any], joined: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """``out`` with each summary note that some row carries (``(summary key, the rows' notes
    joined)``, ``""`` = none), then UTMOS's own when no row has a UTMOS value or note."""
    for summary_key, text in joined:
        if text:
            out[summary_key] = text
    if out.get("UTMOS") is None and "UTMOS_note" not in out:
        out["UTMOS_note"] = "UTMOS not computed for any scored row"
    return out


def _notes_resampler(notes: Sequence[Any]) -> Callable[[np.ndarray], str]:
    """``" | ".join(sorted({notes[i] for i in idx if notes[i]}))`` of a resample ``idx``, the
    distinct notes numbered once in sorted order ("" when no row of the resample has one)."""
    texts = sorted({n for n in notes if n})
    number = {t: i + 1 for i, t in enumerate(texts)}
    codes = np.array([number[n] if n else 0 for n in notes], dtype=np.intp)

    def joined(idx: np.ndarray) -> str:
        present = np.flatnonzero(np.bincount(codes[idx], minlength=len(texts) + 1)[1:])
        return " | ".join(texts[i] for i in present)

    return joined


#: the backends of every SpeechQuality of this process: (loader, name, options) -> backend, so that
#: each model is loaded once per process however many dimensions (systems, demo runs) score in it
_SHARED_BACKENDS: dict[tuple, Any] = {}


def _shared_backend(loader: Callable[..., Any], registry: dict[str, Callable[..., Any]], name: str,
                   kw: dict[str, Any]) -> Any:
    """``loader(name, **kw)`` made once per process for the same loader, factory registered under
    ``name`` in ``registry``, name and ``kw`` (models load lazily inside the backend, so each is
    then loaded once per process; a factory registered anew gets a backend of its own)."""
    factory = registry.get(name.strip(), registry.get(name.strip().lower()))
    key = (loader, factory, name, tuple(sorted((k, repr(v)) for k, v in kw.items())))
    if key not in _SHARED_BACKENDS:
        _SHARED_BACKENDS[key] = loader(name, **kw)
    return _SHARED_BACKENDS[key]


def cpu_lanes(requested: int = 0) -> int:
    """How many backends run side by side on CPU (each model on one intra-op thread): ``requested``
    when > 0, else the cores this process may use (``os.sched_getaffinity``)."""
    if requested > 0:
        return int(requested)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _names(spec: Any) -> list[str]:
    if isinstance(spec, (list, tuple)):
        return [str(s).strip() for s in spec if str(s).strip()]
    return [s.strip() for s in str(spec or "").split(",") if s.strip()]


class SpeechQuality(Dimension):
    """Speech quality (MOS) and intelligibility (WER/CER against the answer's transcript).

    Options (CLI ``--option key=value``):
        profile: ``embedded`` (default; offline, packaged Whisper base + DNSMOS + DistillMOS) or
            ``reference`` (SPEAR's Whisper large-v3 + Qwen3-ASR-0.6B, UTMOS22 strong).
        asr: comma list of ASR backends (:data:`spear_metrics.core.asr.ASR_BACKENDS`).
        mos: comma list of MOS backends (``utmos``, ``dnsmos``, ``distillmos``).
        whisper_model / qwen_asr_model / embedded_asr_model / utmos_model: model id or local path
            of the corresponding backend (through ``resolve_model``). A Hub id other than SPEAR's
            for ``whisper_model``/``qwen_asr_model`` makes ``WER_%``/``CER_%`` null (not SPEAR's systems).
        device: ``cpu``/``cuda``/``cuda:N`` (default: CUDA when available).
        asr_batch_size: waves per ASR call (default 8).
        language: ``en`` (default) or ``auto``, for ASR backends other than SPEAR's two (those are
            called as SPEAR calls them: no language forced).
        empty_hypothesis: ``error`` (default, 100 %) or ``skip`` (row left out): ``WER_norm_%`` only.
    """

    name = "speech_quality"
    version = "2.2.0"
    # 2.0.0 results read as 2.0.1's (same columns and rules); 2.0.1 transcribes answers over 30 s at
    # temperature 0 only, without faster-whisper's random sampling fallback. 2.1.0 adds WER_numnorm_%
    # (absent from older results), leaves UTMOS null for answers over utmos_max_s (180 s; 2.0.x ran out
    # of memory on them) and computes DistillMOS over the same windows a few at a time (equal to float
    # rounding): every value 2.0.x could write is 2.1.0's, so 2.0.x results stay readable. 2.2.0: the
    # WER_numnorm_% normaliser also reads clock times, fractions and numeric ranges as they are said
    # (every other key as 2.1.0; a 2.1.0 run's WER_numnorm_% is its own, recomputable from its rows)
    compatible_versions = ("2.0.0", "2.0.1", "2.1.0")
    model_based = True
    keys = (
        MetricKey("UTMOS", "MOS 1-5", "higher",
                  "UTMOS22 \"strong\" predicted MOS of the answer (channels averaged, 16 kHz; SPEAR_PROTOCOL.md §2). "
                  "**Null** unless the `utmos` backend ran, and for answers longer than `utmos_max_s` (180 s: the whole "
                  "answer is read at once); `UTMOS_note` says why",
                  group="Speech quality", published=True, order=1),
        MetricKey("WER_%", "%", "lower",
                  "**SPEAR's rule**: 100 × jiwer WER of raw text (case and punctuation count), mean over every (row, ASR) "
                  "value of SPEAR's two systems (Whisper large-v3, Qwen3-ASR-0.6B). **Null** with `WER_note` when other "
                  "ASR systems ran", group="Speech quality", published=True, order=2),
        MetricKey("CER_%", "%", "lower", "**SPEAR's rule**: 100 × jiwer CER, same texts and pooling as `WER_%`",
                  group="Speech quality", published=True, order=3),
        MetricKey("WER_%_<asr>", "%", "lower",
                  "SPEAR's rule for one ASR (`whisper-large-v3`, `Qwen3-ASR-0.6B`, `faster-whisper-base`...)",
                  group="Speech quality"),
        MetricKey("CER_%_<asr>", "%", "lower", "SPEAR's CER rule for one ASR", group="Speech quality"),
        MetricKey("WER_norm_%", "%", "lower",
                  "both texts through Whisper's English normaliser, the row's speaker tags removed, empty hypothesis = "
                  "100 %; mean over (row, ASR) values of the ASR systems that ran", group="Speech quality"),
        MetricKey("CER_norm_%", "%", "lower", "CER, same texts and pooling as `WER_norm_%`", group="Speech quality"),
        MetricKey("WER_norm_%_<asr>", "%", "lower", "`WER_norm_%` for one ASR", group="Speech quality"),
        MetricKey("CER_norm_%_<asr>", "%", "lower", "`CER_norm_%` for one ASR", group="Speech quality"),
        MetricKey("WER_numnorm_%", "%", "lower",
                  "as `WER_norm_%` with every number written out in words (the project's normaliser: \"$5\" = \"five "
                  "dollars\", \"50%\" = \"fifty percent\", \"3.5\" = \"three point five\", \"21st\" = \"twenty first\"; "
                  "\"3:30\" = \"three thirty\", \"3/4\" = \"three quarters\", \"5-10\" = \"five to ten\"; "
                  "\"$5\" ≠ \"5 euros\"; Whisper's normaliser drops the unit of quantities of 1); mean over (row, ASR) "
                  "values of the ASR systems that ran", group="Speech quality"),
        MetricKey("WER_numnorm_%_<asr>", "%", "lower", "`WER_numnorm_%` for one ASR", group="Speech quality"),
        MetricKey("DNSMOS_OVRL", "MOS 1-5", "higher", "DNSMOS P.835 overall (ONNX in `speechmos`), embedded",
                  group="Speech quality"),
        MetricKey("DNSMOS_SIG", "MOS 1-5", "higher", "DNSMOS P.835 signal quality", group="Speech quality"),
        MetricKey("DNSMOS_BAK", "MOS 1-5", "higher", "DNSMOS P.835 background-noise quality", group="Speech quality"),
        MetricKey("DNSMOS_P808", "MOS 1-5", "higher", "DNSMOS P.808 MOS", group="Speech quality"),
        MetricKey("DistillMOS", "MOS 1-5", "higher", "DistillMOS v7 (weights in the `distillmos` wheel), embedded",
                  group="Speech quality"),
        MetricKey("no_reference_%", "%", "lower",
                  "share of scored rows with no reference after SPEAR's cleaning (left out of `WER_%`)",
                  group="Speech quality"),
    )
    option_schema = (
        Option("profile", str, "embedded", "model preset: embedded (offline wheels) or reference (the published models)",
               choices=tuple(PROFILES)),
        Option("asr", str, None, "comma list of ASR backends pooled in order (default: the profile's)"),
        Option("mos", str, None, "comma list of MOS backends: utmos, dnsmos, distillmos (default: the profile's)"),
        Option("whisper_model", str, None, "Whisper model id or local folder (default: the backend's)"),
        Option("qwen_asr_model", str, None, "Qwen3-ASR model id or local folder (default: the backend's)"),
        Option("embedded_asr_model", str, None, "faster-whisper model folder (default: the packaged Whisper base)"),
        Option("utmos_model", str, None, "UTMOS22 weights id or local folder (default: the backend's)"),
        Option("device", str, None, "cpu, cuda or cuda:N (default: CUDA when available)"),
        Option("asr_batch_size", int, 8, "waves per ASR call", minimum=1),
        Option("language", str, "en", "ASR language: a language code, or auto (detect)"),
        Option("empty_hypothesis", str, "error", "empty ASR output: error (100 % WER) or skip (row left out, upstream)",
               choices=("error", "skip")),
        Option("cpu_lanes", int, 0, "on CPU: models run side by side on this many threads, each model on one intra-op "
               "thread (0 = the usable cores; 1 = one model after the other on the libraries' default threads)",
               minimum=0),
        Option("max_new_tokens", int, None, "Whisper (transformers) generation limit in tokens", minimum=1),
        Option("utmos_max_s", float, UTMOS_MAX_SECONDS, "longest answer (s) UTMOS scores (whole answer at once, as "
               "SPEAR; memory grows with the square of the length); longer answers get UTMOS null with UTMOS_note",
               minimum=1.0),
    )

    def __init__(self, **options: Any):
        super().__init__(**options)
        options = self.options  # typed and checked against option_schema
        profile = str(options.get("profile", "embedded"))
        self.profile = profile
        self.asr_names = _names(options.get("asr") or PROFILES[profile]["asr"])
        self.mos_names = _names(options.get("mos") or PROFILES[profile]["mos"])
        lang = options.get("language", "en")
        common = {k: options[k] for k in ("device",) if options.get(k)}
        # CPU thread split: with several lanes every model computes on one thread and the models
        # (and the waves of a MOS model) run side by side, one lane per core; on two shared cores
        # that is faster than each library's own threads one model after the other (docs/performance.md)
        self.lanes = cpu_lanes(int(options.get("cpu_lanes") or 0)) if device_or_default(options.get("device")) == "cpu" else 1
        one_thread = {"cpu_threads": 1} if self.lanes > 1 else {}
        batch = int(options.get("asr_batch_size", 8))
        self.asrs = []  # (label used in keys, backend)
        for n in self.asr_names:
            kw = dict(common, batch_size=batch, **(one_thread if n in ("embedded", "faster-whisper") else {}))
            if n not in SPEAR_ASR_SYSTEMS:  # SPEAR's systems keep SPEAR's call (no language forced)
                kw["language"] = None if lang == "auto" else lang
            override = None
            if n.startswith("whisper") and options.get("whisper_model"):
                override = kw["model"] = options["whisper_model"]
            if n.startswith("qwen3") and options.get("qwen_asr_model"):
                override = kw["model"] = options["qwen_asr_model"]
            if n in ("embedded", "faster-whisper") and options.get("embedded_asr_model"):
                kw["model"] = options["embedded_asr_model"]
            if n.startswith("whisper") and n not in SPEAR_ASR_SYSTEMS and options.get("max_new_tokens"):
                kw["max_new_tokens"] = int(options["max_new_tokens"])
            backend = _shared_backend(load_asr, ASR_BACKENDS, n, kw)
            label = backend.name
            if n in SPEAR_ASR_SYSTEMS:
                spear_label, default_id = SPEAR_ASR_SYSTEMS[n]
                # a local folder is taken as a copy of SPEAR's weights; another Hub id is another
                # model and keeps its own label (so its values never stand under SPEAR's name)
                if not override or str(override) == default_id or Path(str(override)).is_dir():
                    label = spear_label
            self.asrs.append((label, backend))
        self.spear_asr = _is_spear_pair([label for label, _ in self.asrs])
        self.moss = []
        for n in self.mos_names:
            kw = dict(common)
            if n.startswith("utmos") and options.get("utmos_model"):
                kw["model"] = options["utmos_model"]
            if n.startswith("utmos"):
                kw["max_seconds"] = float(options.get("utmos_max_s", UTMOS_MAX_SECONDS))
            if n == "dnsmos" and self.lanes > 1:
                kw["threads"] = 1
            self.moss.append(_shared_backend(load_mos, MOS_BACKENDS, n, kw))
        self._broken: dict[int, str] = {}  # id(backend) -> why it cannot load (asked once)

    # ------------------------------------------------------------------ scoring

    def _ready(self, backend) -> str | None:
        """``None`` when ``backend`` loads; else the one-line reason (remembered).

        Raises:
            ModelUnavailableError: ``profile=reference`` and one of its models cannot be had: the
                published table's models were asked for by name, so the run stops (one line, exit 2)
                instead of scoring every key null.
        """
        if id(backend) in self._broken:
            return self._broken[id(backend)]
        try:
            backend.load()
            return None
        except ModelUnavailableError as e:
            if self.profile == "reference":
                raise ModelUnavailableError(f"speech_quality -o profile=reference: {one_line(e)}") from None
            self._broken[id(backend)] = one_line(e)
            return self._broken[id(backend)]

    def _run_models(self, wl: list[np.ndarray]) -> tuple[dict[int, list[dict[str, Any]]], dict[str, list[str]]]:
        """Every model that loads on every wave of ``wl``: ``({id(MOS backend): one dict per wave},
        {ASR label: one text per wave})``; a backend that cannot load is absent (:meth:`_ready`).

        With one lane, one model after the other. With several (CPU), the models load side by
        side, then the ASR systems (each over all waves, its own batches) and each (MOS model,
        wave) pair run as tasks on :attr:`lanes` threads started with one torch intra-op thread
        (CTranslate2 and ONNX Runtime were given one thread each at construction), longest waves
        first. MOS backends score each wave on its own either way (:meth:`MOSBackend.score`), so
        the values are those of one model after the other, up to the float rounding of the
        libraries' thread split.
        """
        backends = [m for m in self.moss] + [a for _, a in self.asrs]
        mos: dict[int, list[dict[str, Any]]] = {}
        hyps: dict[str, list[str]] = {}
        if self.lanes <= 1 or not wl:
            for m in self.moss:
                if self._ready(m) is None:
                    mos[id(m)] = m.score(wl)
            for label, a in self.asrs:
                if self._ready(a) is None:
                    hyps[label] = [t.text for t in a.transcribe(wl, sr=16000)]
            return mos, hyps
        with one_torch_thread(), ThreadPoolExecutor(self.lanes, thread_name_prefix="speech-quality") as pool:
            ready = dict(zip(map(id, backends), pool.map(self._ready, backends)))
            asr_jobs = {label: pool.submit(a.transcribe, wl, 16000) for label, a in self.asrs if ready[id(a)] is None}
            order = sorted(range(len(wl)), key=lambda j: -len(wl[j]))
            mos_jobs = {id(m): {j: pool.submit(m.score, [wl[j]]) for j in order} for m in self.moss if ready[id(m)] is None}
            for key, jobs in mos_jobs.items():
                mos[key] = [jobs[j].result()[0] for j in range(len(wl))]
            for label, job in asr_jobs.items():
                hyps[label] = [t.text for t in job.result()]
        return mos, hyps

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

        # MOS: each backend its own keys; an answer a backend does not score (too long for a
        # whole-answer model) gets null with the reason on its own row
        mos_notes: list[str] = []
        row_notes: dict[int, dict[str, list[str]]] = {i: {} for i in live}
        scores, texts = self._run_models(wl)
        for m in self.moss:
            why = self._ready(m)
            if why is None:
                for i, v in zip(live, scores[id(m)]):
                    out[i].update(v)
                for i, w in zip(live, wl):
                    skipped = m.skip_reason(len(w))
                    if skipped:
                        row_notes[i].setdefault("UTMOS_note" if "UTMOS" in m.keys else "mos_note", []).append(skipped)
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

        # ASR: each system's own SPEAR-rule and normalised WER/CER
        hyps: dict[str, list[str | None]] = {}
        asr_notes: list[str] = []
        for label, a in self.asrs:
            why = self._ready(a)
            if why is None:
                hyps[label] = list(texts[label])
            else:
                asr_notes.append(why)
                hyps[label] = [None] * len(live)
        for j, i in enumerate(live):
            meta = samples[i].meta
            tagless = strip_speaker_tags(meta.transcript_answer, meta.speakers.split("|"))
            v = out[i]
            v["UTMOS"] = v.get("UTMOS")
            if utmos_note:
                v["UTMOS_note"] = utmos_note
            elif row_notes[i].get("UTMOS_note"):
                v["UTMOS_note"] = "; ".join(row_notes[i]["UTMOS_note"])
            v["reference_empty"] = spear_reference(meta.transcript_answer) is None
            for label, _ in self.asrs:
                h = hyps[label][j]
                v[f"asr_text_{label}"] = h
                w, c = spear_error_rates(meta.transcript_answer, h)
                v[f"WER_%_{label}"] = None if w is None else 100.0 * w
                v[f"CER_%_{label}"] = None if c is None else 100.0 * c
                wn, cn = (None, None) if h is None or (skip_empty and not normalize_text(h)) else error_rates(tagless, h)
                v[f"WER_norm_%_{label}"] = None if wn is None else 100.0 * wn
                v[f"CER_norm_%_{label}"] = None if cn is None else 100.0 * cn
                nn = None if h is None or (skip_empty and not normalize_text_numbers(h)) else numnorm_error_rate(tagless, h)
                v[f"WER_numnorm_%_{label}"] = None if nn is None else 100.0 * nn
            if asr_notes:
                v["asr_note"] = "; ".join(asr_notes)
            if mos_notes or row_notes[i].get("mos_note"):
                v["mos_note"] = "; ".join(mos_notes + row_notes[i].get("mos_note", []))
        return out

    # ------------------------------------------------------------------ summary

    def aggregate_counts(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, int]:
        """The pooled ``WER_%``, ``CER_%``, ``WER_norm_%``, ``CER_norm_%``: the (row, ASR) values
        that exist (each row carries its ASR values, so resampling rows keeps them together);
        ``no_reference_%``: every scored row with a reference decision; the rest: rows with a value."""
        out = super().aggregate_counts(rows, values, keys)
        labels = [label for label, _ in self.asrs]
        for base in ("WER_%", "CER_%", "WER_norm_%", "CER_norm_%", "WER_numnorm_%"):
            if base in keys:  # WER_%/CER_% exist only with SPEAR's ASR systems (else null: n = 0)
                pooled = self.spear_asr or "norm" in base
                out[base] = sum(1 for v in values for x in labels if v.get(f"{base}_{x}") is not None) if pooled else 0
        out["no_reference_%"] = sum(1 for v in values if v.get("reference_empty") is not None)
        return out

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        keys = ["UTMOS", *[k for m in self.moss for k in m.keys if k != "UTMOS"]]
        out: dict[str, Any] = {k: mean_or_none([v.get(k) for v in values]) for k in dict.fromkeys(keys)}
        # the ASR labels of the rows themselves (a results check rebuilds this dimension with its
        # defaults): SPEAR's rule applies when exactly SPEAR's two systems transcribed them
        seen = list(dict.fromkeys(k[len("asr_text_"):] for v in values for k in v if k.startswith("asr_text_")))
        labels = seen or [label for label, _ in self.asrs]
        spear_asr = _is_spear_pair(labels)
        for base in ("WER_%", "CER_%"):
            out[base] = _pooled(values, [f"{base}_{x}" for x in labels]) if spear_asr else None
        for base in ("WER_norm_%", "CER_norm_%", "WER_numnorm_%"):
            out[base] = _pooled(values, [f"{base}_{x}" for x in labels])
        for x in labels:
            for base in ("WER_%", "CER_%", "WER_norm_%", "CER_norm_%", "WER_numnorm_%"):
                out[f"{base}_{x}"] = mean_or_none([v.get(f"{base}_{x}") for v in values])
        out["no_reference_%"] = percent_or_none([v.get("reference_empty") for v in values])
        out["asr_models"] = labels
        if _all_without_reference(_no_reference_codes(values)):  # the cause, whatever the ASR systems
            out["WER_note"] = out["CER_note"] = no_reference_note(len(values))
        elif not spear_asr:
            out["WER_note"] = out["CER_note"] = (f"WER_%/CER_% need SPEAR's ASR systems (whisper-large-v3 and qwen3-asr-0.6b, "
                               f"--option profile=reference); this run used {', '.join(labels) or 'none'}: "
                               f"see WER_%_<asr> (SPEAR's text rule) and WER_norm_% (normalised)")
        return _with_notes(out, ((summary_key, " | ".join(sorted({v[note_key] for v in values if v.get(note_key)})))
                                 for note_key, summary_key in _NOTES))

    def resampled_aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]):
        """:meth:`aggregate` of one bootstrap resample ``idx`` (row positions, with repeats) from
        per-row arrays read once, bit-identical to it, keys and notes included: MOS and per-ASR
        means by :func:`mean_resampler`, the pooled ``WER_%``... over each row's (row, ASR)
        values in row-then-ASR order (as ``_pooled``), ``no_reference_%`` by
        :func:`percent_resampler`, the notes by their numbers.

        The ASR labels of a resample are those its rows carry (first seen). When every row
        carries the same labels in the same order (any run of one configuration) they are the
        same on every resample; otherwise the keys themselves depend on the resample, and the
        default recompute is used.
        """
        carried = {tuple(k[len("asr_text_"):] for k in v if k.startswith("asr_text_")) for v in values}
        if len(carried) != 1:
            return super().resampled_aggregate(rows, values)
        labels = list(carried.pop()) or [label for label, _ in self.asrs]
        spear_asr = _is_spear_pair(labels)
        keys = ["UTMOS", *[k for m in self.moss for k in m.keys if k != "UTMOS"]]
        fns: dict[str, Callable[[np.ndarray], Any]] = {k: mean_resampler([v.get(k) for v in values]) for k in dict.fromkeys(keys)}
        for base in ("WER_%", "CER_%", "WER_norm_%", "CER_norm_%", "WER_numnorm_%"):  # pooled over each row's (row, ASR) values
            fns[base] = (mean_resampler([[v.get(f"{base}_{x}") for x in labels] for v in values])
                         if spear_asr or "norm" in base else (lambda idx: None))
        for x in labels:
            for base in ("WER_%", "CER_%", "WER_norm_%", "CER_norm_%", "WER_numnorm_%"):
                fns[f"{base}_{x}"] = mean_resampler([v.get(f"{base}_{x}") for v in values])
        fns["no_reference_%"] = percent_resampler([v.get("reference_empty") for v in values])
        fixed: dict[str, Any] = {}
        if not spear_asr:  # the notes that depend on the labels only (a row with a reference: the ASR note)
            probe = self.aggregate(rows[:1], [{**values[0], "reference_empty": False}] if values else [])
            fixed = {"WER_note": probe["WER_note"], "CER_note": probe["CER_note"]}
        no_ref = _no_reference_codes(values)
        notes = [(summary_key, _notes_resampler([v.get(note_key) for v in values])) for note_key, summary_key in _NOTES]

        def aggregate(idx: np.ndarray) -> dict[str, Any]:
            out = {k: f(idx) for k, f in fns.items()}
            out["asr_models"] = list(labels)
            out.update(fixed)
            if _all_without_reference(no_ref[idx]):
                out["WER_note"] = out["CER_note"] = no_reference_note(len(idx))
            return _with_notes(out, ((summary_key, joined(idx)) for summary_key, joined in notes))

        return aggregate

    def models(self) -> dict[str, str]:
        out = {}
        for m in self.moss:
            out[",".join(m.keys)] = m.describe()
        for label, a in self.asrs:
            out[f"asr:{label}"] = a.describe()
        out["text_normalizer"] = ("WER_norm_%: Whisper EnglishTextNormalizer (transformers) + english.json spelling map; "
                                  "WER_numnorm_%: the same with numbers in words (spear_metrics.core.textnorm.normalize_text_numbers)")
        return out
