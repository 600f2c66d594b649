"""Turn-taking dimension: ``turn_taking_naturalness`` (VAP model) and the model-free
``turn_taking_offset_loglik``.

Definitions: ``SPEAR_PROTOCOL.md`` section 2 ("Turn-taking").

``turn_taking_naturalness`` = mean over samples of −DialogNLL (nats) of a VAP checkpoint
(:mod:`spear_metrics.turn_taking.vap`) on the dialog SPEAR builds
(``bin/turntaking/run_turntaking_inference.py`` ``merged_question_answer_audio``, re-stated in
:func:`spear_dialog`): input clip and answer each made stereo (a mono file on both channels, a
stereo one keeps its first two) and resampled to the model's rate, the answer **added to both
channels** from sample ``max(0, len(q) + round(answer_start_time * sr))`` (empty start time =
0), the sum divided by its peak only when the peak exceeds 1. The model reads this dialog at
its own rate (16 kHz for a VAP backbone); the VAD reads the same dialog built at 16 kHz:
Silero per channel (threshold 0.5, minimum speech 100 ms, minimum silence 50 ms, 30 ms pad),
50 Hz frames, DualTurn clean-up to 150/150 ms; units, 3 s context and DialogNLL as in
:mod:`spear_metrics.turn_taking.vap`. No public checkpoint of SPEAR's model exists: without
``vap_model`` the key is ``null`` with a note.

``turn_taking_offset_loglik`` (project key, not in the published table) = mean over samples of
``log p(offset)`` (log of a density in 1/s) where offset (s) = answer onset − question end =
``answer_start_time`` (empty = 0) + onset of the answer's first VAD speech, and ``p`` is a
Gaussian KDE (scipy, Scott's rule) fitted once on the offsets of the human answers of a
reference SPEAR metadata CSV (option ``offset_reference``, e.g. the dataset's dev split).
No reference is invented: without one the key is ``null`` with a note. The fitted reference
(source, sha256, offsets, bandwidth) is written into the summary.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from spear_datasets.schema import SpearRow
from spear_metrics.core.dimension import Dimension, MetricKey, Option, Sample, mean_or_none
from spear_metrics.core.records import one_line
from spear_metrics.core.vad import BACKENDS, DEFAULT_BACKEND, answer_vad_key, speech_segments
from spear_metrics.turn_taking.vap import (CONTEXT_S, FRAME_HZ, MIN_UNIT_FRAMES, clean_vad, dialog_nll, future_vad_labels,
                                          load_vap, unit_nlls, utterance_units, vad_frames, vad_to_model_frames)

SR = 16000


def stereo_at(wav: np.ndarray, file_sr: int, sr: int) -> np.ndarray:
    """``(2, n)`` float32 at ``sr`` as SPEAR's ``load_stereo_for_merge``: a mono ``wav`` ``(1, n)``
    on both channels, more than two channels cut to the first two, then
    ``torchaudio.functional.resample`` (THE loader's ``resampler="torchaudio"``) when
    ``file_sr != sr``."""
    from spear_datasets.audio import resample

    x = np.asarray(wav, dtype=np.float32)
    if x.ndim == 1:
        x = x[None]
    x = np.repeat(x, 2, axis=0) if x.shape[0] == 1 else x[:2]
    return np.ascontiguousarray(resample(x, int(file_sr), int(sr), "torchaudio"), dtype=np.float32)


def spear_dialog(question: np.ndarray, answer: np.ndarray, answer_start_time: float | None, sr: int) -> tuple[np.ndarray, int]:
    """The dialog SPEAR gives its turn-taking checkpoint (``merged_question_answer_audio``).

    Args:
        question: input clip ``(2, nq)`` at ``sr`` (:func:`stereo_at`).
        answer: answer ``(2, na)`` at ``sr`` (:func:`stereo_at`; a mono answer is on both channels).
        answer_start_time: seconds from the question end (``None`` or non-finite -> 0, as
            SPEAR's ``parse_float``).
        sr: sample rate (Hz) of both.

    Returns:
        ``(dialog (2, n) float32, answer start sample)``: the answer is **added to both
        channels** from ``max(0, nq + round(answer_start_time * sr))`` (an answer placed before
        the clip's start is not cut, it starts at 0), ``n = max(nq, start + na)``, and the sum is
        divided by its absolute peak only when that peak exceeds 1.
    """
    ast = float(answer_start_time) if answer_start_time is not None and np.isfinite(answer_start_time) else 0.0
    nq, na = question.shape[1], answer.shape[1]
    start = max(0, nq + int(round(ast * sr)))
    out = np.zeros((2, max(nq, start + na)), dtype=np.float32)
    out[:, :nq] += question[:2]
    out[:, start:start + na] += answer[:2]
    peak = float(np.abs(out).max()) if out.size else 0.0
    if peak > 1.0:
        out /= peak
    return out, start


def spear_vad50(dialog16k: np.ndarray, *, backend: str = DEFAULT_BACKEND) -> np.ndarray:
    """Cleaned 50 Hz VAD ``(n // 320, 2)`` int8 of a 16 kHz stereo dialog, as SPEAR's
    ``observed_vad_50hz``: Silero per channel (threshold 0.5, min speech 100 ms, min silence
    50 ms, library pad 30 ms, segments in samples), :func:`vad.vad_frames`, then
    :func:`vad.clean_vad` (150/150 ms). ``backend``: a :mod:`spear_metrics.core.vad` backend
    (``"jit"`` is SPEAR's streaming call)."""
    from spear_metrics.core.vad import speech_timestamps

    chans = []
    for c in range(2):
        x = np.ascontiguousarray(dialog16k[c], dtype=np.float32)
        ts = speech_timestamps(x, backend=backend, threshold=0.5, min_speech_duration_ms=100, min_silence_duration_ms=50)
        chans.append(vad_frames([(t["start"], t["end"]) for t in ts], len(x)))
    n = min(len(chans[0]), len(chans[1]))
    return np.stack([clean_vad(chans[0][:n]), clean_vad(chans[1][:n])], axis=1)


def response_offset_s(answer_start_time: float | None, answer_segments: Sequence[tuple[float, float]]) -> float | None:
    """Answer speech onset minus question end (s): ``answer_start_time`` (``None`` -> 0) + start
    of the first answer VAD segment; ``None`` when the answer has no speech."""
    if not answer_segments:
        return None
    return float(answer_start_time or 0.0) + float(min(s for s, _ in answer_segments))


class OffsetReference:
    """Gaussian KDE of human response offsets (s) from a SPEAR metadata CSV.

    Rows need ``answer_start_time``; with ``onset="vad"`` (default) the human answer audio is
    read and the onset of its first VAD speech added (same definition as the scored side);
    rows whose answer cannot be read or has no speech are skipped and counted. ``onset="none"``
    uses ``answer_start_time`` alone (human answer clips start at the turn's onset).
    ``vad_backend`` / ``vad_time_resolution``: the scored side's VAD settings, so both sides of
    the comparison find onsets the same way.

    Raises:
        ValueError: fewer than 2 distinct offsets.
    """

    def __init__(self, csv_path: str | Path, *, onset: str = "vad", vad_time_resolution: int = 1,
                 vad_backend: str = DEFAULT_BACKEND):
        from scipy.stats import gaussian_kde

        from spear_metrics.core.vad import check_backend

        check_backend(vad_backend)  # up front, not left to every row's VAD call (each would be skipped)

        from spear_datasets.audio import load_audio
        from spear_datasets.schema import read_metadata, resolve_path

        path = Path(csv_path)
        raw = read_metadata(path, required=("answer_start_time",))
        offsets, skipped = [], 0
        for r in raw:
            v = str(r.get("answer_start_time") or "").strip()
            if not v:
                skipped += 1
                continue
            try:
                ast = float(v)
                if onset == "vad":
                    wav = load_audio(resolve_path(str(r["answer_audio_path"]), path.parent), sr=SR, channels="mix",
                                      resampler="torchaudio")  # as Sample.answer_audio on the scored side
                    off = response_offset_s(ast, speech_segments(wav, backend=vad_backend, time_resolution=vad_time_resolution))
                else:
                    off = ast
            except Exception:
                off = None
            if off is None or not np.isfinite(off):
                skipped += 1
            else:
                offsets.append(float(off))
        x = np.array(offsets, dtype=np.float64)
        if len(np.unique(x)) < 2:
            raise ValueError(f"offset reference {path}: fewer than 2 distinct human offsets ({len(x)} usable rows)")
        self.kde = gaussian_kde(x)
        self.offsets = x
        self.info = {
            "source": str(path.resolve()),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "onset": onset,
            "n": int(len(x)),
            "n_skipped": int(skipped),
            "kde": "scipy.stats.gaussian_kde, Scott's rule",
            "bandwidth_s": float(np.sqrt(self.kde.covariance[0, 0])),
            "offsets_s": [round(float(v), 4) for v in x],
        }

    def loglik(self, offset_s: float) -> float:
        """``log`` of the KDE density at ``offset_s`` (density in 1/s)."""
        return float(self.kde.logpdf(np.array([offset_s]))[0])


class TurnTaking(Dimension):
    """VAP DialogNLL (SPEAR's procedure) and the response-offset log-likelihood.

    Options: ``vap_model`` (TorchScript file or tiny-VAP folder; default none -> null),
    ``vap_sample_rate`` (16000) and ``vap_frame_hz`` (50) of a TorchScript model,
    ``vap_threshold_ratio`` (0.5, the checkpoint's ``threshold_ratio``), ``vap_batch_size``
    (1, as SPEAR: a batch zero-pads shorter dialogs, which only a causal model ignores),
    ``vad_backend`` (``batched``|``sequence``|``jit``), ``vap_separated`` (false; true also scores the
    project key ``turn_taking_naturalness_separated``), ``offset_reference`` (SPEAR metadata CSV of human
    answers; default none -> null), ``offset_reference_onset`` (``vad``|``none``),
    ``vad_time_resolution`` (1).
    """

    name = "turn_taking"
    version = "2.0.1"
    # 2.0.0 results read as 2.0.1's (same columns and values); 2.0.1 finds the offset reference's onsets with
    # the run's vad_backend and fails rows whose audio reaches the VAD as NaN/inf or far out of scale
    compatible_versions = ("2.0.0",)
    model_based = True
    keys = (
        MetricKey("turn_taking_naturalness", "-nats", "higher",
                  "mean over samples of −DialogNLL of a VAP checkpoint (256 classes) on SPEAR's question+answer dialog; "
                  "**null** without `vap_model`", group="Turn-taking", published=True, order=12),
        MetricKey("turn_taking_naturalness_separated", "-nats", "higher",
                  "the same with the answer on the answerer's channel only; **null** unless `vap_separated=true`",
                  group="Turn-taking"),
        MetricKey("turn_taking_offset_loglik", "log(1/s)", "higher",
                  "mean log density of the response offset under a Gaussian KDE of the human offsets of a reference set; "
                  "**null** without `offset_reference`", group="Turn-taking"),
    )
    option_schema = (
        Option("vap_model", str, None, "TorchScript VAP model file or folder (none: turn_taking_naturalness null with a note)"),
        Option("vap_sample_rate", int, SR, "audio rate (Hz) of a TorchScript VAP model", minimum=1),
        Option("vap_frame_hz", float, FRAME_HZ, "VAP frame rate (Hz) of a TorchScript model", minimum=1),
        Option("vap_threshold_ratio", float, 0.5, "the checkpoint's threshold_ratio", minimum=0, maximum=1),
        Option("vap_batch_size", int, 1, "dialogs per VAP call (1 as SPEAR: padding is ignored by causal models only)",
               minimum=1),
        Option("vap_separated", bool, False, "also score turn_taking_naturalness_separated (answer on its own channel)"),
        Option("offset_reference", str, None, "SPEAR metadata CSV of human answers for the offset KDE (none: key null)"),
        Option("offset_reference_onset", str, "vad", "human onset: vad (first VAD speech) or none (answer_start_time alone)",
               choices=("vad", "none")),
        Option("vad_time_resolution", int, 1, "decimals of VAD times in seconds", minimum=0, maximum=6),
        Option("vad_backend", str, DEFAULT_BACKEND, "Silero VAD front end (see spear_metrics.core.vad): batched (default), "
               "sequence (packaged ONNX) or jit (upstream's streaming call)", choices=BACKENDS),
    )

    def __init__(self, **options: Any):
        super().__init__(**options)
        self._vap = None
        self._ref: OffsetReference | None = None
        self._ref_error: str | None = None

    def _vad(self, wav):
        return speech_segments(wav, backend=self.options.get("vad_backend", DEFAULT_BACKEND),
                               time_resolution=int(self.options.get("vad_time_resolution", 1)))

    def _reference(self) -> OffsetReference | None:
        src = self.options.get("offset_reference")
        if not src or self._ref_error:
            return None
        if self._ref is None:
            try:
                self._ref = OffsetReference(str(src), onset=str(self.options.get("offset_reference_onset", "vad")),
                                            vad_time_resolution=int(self.options.get("vad_time_resolution", 1)),
                                            vad_backend=str(self.options.get("vad_backend", DEFAULT_BACKEND)))
            except Exception as e:
                self._ref_error = one_line(e)
                return None
        return self._ref

    def _model(self):
        if self._vap is None:
            self._vap = load_vap(str(self.options["vap_model"]), frame_hz=float(self.options.get("vap_frame_hz", FRAME_HZ)),
                                 sample_rate=int(self.options.get("vap_sample_rate", SR)))
        return self._vap

    def prepare(self, s: Sample, model_sr: int, *, separated: bool = False) -> dict[str, Any]:
        """SPEAR's prepared item of one sample: dialog at the model's rate, cleaned 50 Hz VAD of
        the dialog built at 16 kHz, units and duration (s). ``separated`` (project variant): the
        answer, channels averaged, goes on the answerer's channel only (the channel that is not
        the questioner's, :func:`spear_metrics.core.channels.questioner_channel`)."""
        from spear_datasets.audio import decode
        from spear_metrics.core.channels import questioner_channel

        q_wav, q_sr = s.cached("native:input", lambda: decode(s.audio_path))
        a_wav, a_sr = s.cached("native:answer", lambda: decode(s.answer_audio_path))
        if separated:
            ch = 1 - questioner_channel(s.meta, s.input_audio("keep"))
            mono = np.asarray(a_wav, dtype=np.float32).mean(axis=0)
            a_wav = np.zeros((2, mono.shape[0]), np.float32)
            a_wav[ch] = mono
        ast = s.meta.answer_start_time
        dialog, start = spear_dialog(stereo_at(q_wav, q_sr, model_sr), stereo_at(a_wav, a_sr, model_sr), ast, model_sr)
        d16 = dialog if model_sr == SR else spear_dialog(stereo_at(q_wav, q_sr, SR), stereo_at(a_wav, a_sr, SR), ast, SR)[0]
        vad = spear_vad50(d16, backend=str(self.options.get("vad_backend", DEFAULT_BACKEND)))
        duration = dialog.shape[1] / model_sr
        return {"audio": dialog, "answer_start": start, "vad": vad, "units": utterance_units(vad, duration), "duration_s": duration}

    def score_batch(self, samples: Sequence[Sample]) -> list[dict[str, Any] | BaseException]:
        ref = self._reference()
        out: list[dict[str, Any] | BaseException] = []
        prepared: list[tuple[int, dict[str, Any]]] = []
        vap = self._model() if self.options.get("vap_model") else None
        for i, s in enumerate(samples):
            try:
                a_segs = s.cached(answer_vad_key(self.options.get("vad_backend", DEFAULT_BACKEND),
                                                 int(self.options.get("vad_time_resolution", 1))),
                                  lambda s=s: self._vad(s.answer_audio()))
                off = response_offset_s(s.meta.answer_start_time, a_segs)
                v = {"response_offset_s": None if off is None else round(off, 6),
                     "turn_taking_offset_loglik": None if (ref is None or off is None) else round(ref.loglik(off), 6),
                     "turn_taking_naturalness": None, "vap_units": None,
                     "turn_taking_naturalness_separated": None, "vap_units_separated": None}
                if vap is not None:
                    prepared.append((i, "", self.prepare(s, vap.sample_rate)))
                    if self._separated():
                        prepared.append((i, "_separated", self.prepare(s, vap.sample_rate, separated=True)))
            except Exception as e:  # a bad file fails this row only
                out.append(e)
                continue
            out.append(v)
        if vap is not None and prepared:
            self._score_vap(vap, prepared, out)
        return out

    def _separated(self) -> bool:
        return str(self.options.get("vap_separated", "false")).strip().lower() in ("1", "true", "yes", "on")

    def _score_vap(self, vap, prepared: list[tuple[int, str, dict[str, Any]]], out: list) -> None:
        import torch

        from spear_metrics.core.batching import duration_batches

        spf = vap.sample_rate / vap.frame_hz  # samples per model frame
        thr = float(self.options.get("vap_threshold_ratio", 0.5))
        items = [p for _, _, p in prepared]
        for idx in duration_batches([p["audio"].shape[1] for p in items], max_items=int(self.options.get("vap_batch_size", 1))):
            n_max = max(items[j]["audio"].shape[1] for j in idx)
            x = np.zeros((len(idx), 2, n_max), dtype=np.float32)  # zero tail, as SPEAR's batches
            for b, j in enumerate(idx):
                x[b, :, : items[j]["audio"].shape[1]] = items[j]["audio"]
            lp = vap.log_probs(torch.from_numpy(x)).float().cpu().numpy()  # (B, T, 256)
            for b, j in enumerate(idx):
                it = items[j]
                T = lp.shape[1]
                valid = min(T, int(math.ceil(it["audio"].shape[1] / spf)))
                labels = future_vad_labels(it["vad"], T, valid, frame_hz=vap.frame_hz, threshold_ratio=thr)
                nll = np.full(T, np.nan, dtype=np.float64)
                ok = labels >= 0
                nll[ok] = -lp[b, np.flatnonzero(ok), labels[ok]]
                units = unit_nlls(nll, it["units"], vad_to_model_frames(it["vad"], T, vap.frame_hz), frame_hz=vap.frame_hz,
                                  context_s=CONTEXT_S, min_unit_frames=MIN_UNIT_FRAMES)
                dn = dialog_nll(units)
                i, suffix, _ = prepared[j]
                out[i][f"turn_taking_naturalness{suffix}"] = None if dn is None else round(-dn["dialog_nll"], 6)
                out[i][f"vap_units{suffix}"] = len(units)

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "turn_taking_naturalness": mean_or_none([v.get("turn_taking_naturalness") for v in values]),
            "turn_taking_offset_loglik": mean_or_none([v.get("turn_taking_offset_loglik") for v in values]),
            "turn_taking_naturalness_separated": mean_or_none([v.get("turn_taking_naturalness_separated") for v in values]),
        }
        if not self.options.get("vap_model"):
            out["turn_taking_naturalness_note"] = "null: no VAP model given (option vap_model); no public VAP checkpoint on the Hub"
        if not (self.options.get("vap_model") and self._separated()):
            out["turn_taking_naturalness_separated_note"] = ("null: project key, scored with vap_model and vap_separated=true "
                                                             "(answer on the answerer's channel only)")
        if not self.options.get("offset_reference"):
            out["turn_taking_offset_loglik_note"] = ("null: no reference of human answer offsets given "
                                                     "(option offset_reference=<SPEAR metadata CSV, e.g. the dev split>)")
        else:
            ref = self._reference()
            if ref is None:
                out["turn_taking_offset_loglik_note"] = f"null: offset reference unusable: {self._ref_error}"
            else:
                out["turn_taking_offset_reference"] = ref.info
        return out

    def models(self) -> dict[str, str]:
        m = {}
        if self.options.get("vap_model"):
            m["turn_taking_naturalness"] = str(self.options["vap_model"])
            if self._separated():
                m["turn_taking_naturalness_separated"] = str(self.options["vap_model"])
        if self.options.get("offset_reference"):
            m["turn_taking_offset_loglik"] = f"gaussian_kde of {self.options['offset_reference']}"
        return m
