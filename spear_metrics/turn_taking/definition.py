"""Turn-taking dimension: ``turn_taking_naturalness`` (VAP model) and the model-free
``turn_taking_offset_loglik``.

Definitions: ``SPEAR_PROTOCOL.md`` section 2 ("Turn-taking").

``turn_taking_naturalness`` = mean over samples of −DialogNLL (nats) of a VAP model
(:mod:`spear_metrics.turn_taking.vap`) on the dialog built from the sample: the stereo input
clip, and the answer (channels averaged) added on the answerer's channel (the channel that is
not the questioner's, :mod:`spear_metrics.core.channels`) from ``len(clip) +
answer_start_time`` (empty start time = at the question end). Voice activity of each channel
of the dialog: Silero VAD (as elsewhere, 0.1 s times by default). Units: 2 s windows ending
at each utterance start/end of either speaker; DialogNLL = ½ mean + ½ mean of the worst 25 %
units. No public VAP checkpoint is on the Hub: without ``vap_model`` the key is ``null``
with a note.

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
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from spear_datasets.schema import SpearRow
from spear_metrics.core.dimension import Dimension, MetricKey, Sample, mean_or_none
from spear_metrics.core.records import one_line
from spear_metrics.core.vad import speech_segments
from spear_metrics.turn_taking.vap import FRAME_HZ, activity_frames, dialog_nll, load_vap, vap_labels

SR = 16000


def build_dialog(clip: np.ndarray, answer: np.ndarray, answerer_channel: int, answer_start_time: float | None) -> np.ndarray:
    """Stereo dialog ``(2, n)``: ``clip`` ``(2, nq)`` with ``answer`` ``(na,)`` added on
    ``answerer_channel`` from sample ``nq + round(answer_start_time * 16000)`` (``None`` -> 0;
    a start before the clip's beginning is cut at 0)."""
    nq = clip.shape[1]
    start = nq + int(round(float(answer_start_time or 0.0) * SR))
    a = np.asarray(answer, dtype=np.float32).reshape(-1)
    if start < 0:
        a, start = a[-start:], 0
    n = max(nq, start + len(a))
    out = np.zeros((2, n), dtype=np.float32)
    out[:, :nq] = clip[:2]
    out[answerer_channel, start:start + len(a)] += a
    return out


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

    Raises:
        ValueError: fewer than 2 distinct offsets.
    """

    def __init__(self, csv_path: str | Path, *, onset: str = "vad", vad_time_resolution: int = 1):
        from scipy.stats import gaussian_kde

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
                    wav = load_audio(resolve_path(str(r["answer_audio_path"]), path.parent), sr=SR, channels="mix")
                    off = response_offset_s(ast, speech_segments(wav, time_resolution=vad_time_resolution))
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
    """VAP DialogNLL and the response-offset log-likelihood.

    Options: ``vap_model`` (TorchScript file or tiny-VAP folder; default none -> null),
    ``vap_frame_hz`` (50), ``vap_batch_size`` (4), ``offset_reference`` (SPEAR metadata CSV of
    human answers; default none -> null), ``offset_reference_onset`` (``vad``|``none``),
    ``vad_time_resolution`` (1).
    """

    name = "turn_taking"
    version = "1.0.0"
    model_based = True
    keys = (
        MetricKey("turn_taking_naturalness", "-nats", "higher",
                  "mean -DialogNLL of a VAP model (256 classes) on question+answer as one stereo dialog (null without a VAP model)"),
        MetricKey("turn_taking_offset_loglik", "log(1/s)", "higher",
                  "mean log density of the response offset under a KDE of human offsets of a reference set (null without one)"),
    )

    def __init__(self, **options: Any):
        super().__init__(**options)
        self._vap = None
        self._ref: OffsetReference | None = None
        self._ref_error: str | None = None

    def _vad(self, wav):
        return speech_segments(wav, backend=self.options.get("vad_backend", "sequence"),
                               time_resolution=int(self.options.get("vad_time_resolution", 1)))

    def _reference(self) -> OffsetReference | None:
        src = self.options.get("offset_reference")
        if not src or self._ref_error:
            return None
        if self._ref is None:
            try:
                self._ref = OffsetReference(str(src), onset=str(self.options.get("offset_reference_onset", "vad")),
                                            vad_time_resolution=int(self.options.get("vad_time_resolution", 1)))
            except Exception as e:
                self._ref_error = one_line(e)
                return None
        return self._ref

    def score_batch(self, samples: Sequence[Sample]) -> list[dict[str, Any] | BaseException]:
        from spear_metrics.core.channels import questioner_channel

        ref = self._reference()
        out: list[dict[str, Any]] = []
        dialogs, bounds = [], []
        for s in samples:
            a_segs = s.cached("vad:answer", lambda s=s: self._vad(s.answer_audio()))
            off = response_offset_s(s.meta.answer_start_time, a_segs)
            out.append({"response_offset_s": None if off is None else round(off, 6),
                        "turn_taking_offset_loglik": None if (ref is None or off is None) else round(ref.loglik(off), 6),
                        "turn_taking_naturalness": None, "vap_units": None})
            if self.options.get("vap_model"):
                clip = s.input_audio("keep")
                qc = questioner_channel(s.meta, clip)
                d = build_dialog(clip, s.answer_audio()[0], 1 - qc if clip.shape[0] > 1 else 0, s.meta.answer_start_time)
                segs = [self._vad(d[c]) for c in range(2)]
                dialogs.append(d)
                bounds.append(segs)
        if self.options.get("vap_model"):
            self._score_vap(dialogs, bounds, out)
        return out

    def _score_vap(self, dialogs: list[np.ndarray], segs: list[list], out: list[dict[str, Any]]) -> None:
        import torch

        from spear_metrics.core.batching import duration_batches

        if self._vap is None:
            self._vap = load_vap(str(self.options["vap_model"]), frame_hz=int(self.options.get("vap_frame_hz", FRAME_HZ)))
        vap = self._vap
        for idx in duration_batches([d.shape[1] for d in dialogs], max_items=int(self.options.get("vap_batch_size", 4))):
            n_max = max(dialogs[i].shape[1] for i in idx)
            x = np.zeros((len(idx), 2, n_max), dtype=np.float32)  # zero tail: VAP is causal, frames before it are unaffected
            for j, i in enumerate(idx):
                x[j, :, : dialogs[i].shape[1]] = dialogs[i]
            lp = vap.log_probs(torch.from_numpy(x)).cpu().numpy()  # (B, T, 256)
            for j, i in enumerate(idx):
                n_frames = min(lp.shape[1], int(dialogs[i].shape[1] * vap.frame_hz // SR))
                act = np.stack([activity_frames(segs[i][c], n_frames, vap.frame_hz) for c in range(2)])
                labels = vap_labels(act, vap.frame_hz)
                nll = -lp[j, np.arange(len(labels)), labels]
                boundaries = [t for c in range(2) for seg in segs[i][c] for t in seg]
                dn, n_units = dialog_nll(nll, boundaries, vap.frame_hz)
                out[i]["turn_taking_naturalness"] = None if dn is None else round(-dn, 6)
                out[i]["vap_units"] = n_units

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "turn_taking_naturalness": mean_or_none([v.get("turn_taking_naturalness") for v in values]),
            "turn_taking_offset_loglik": mean_or_none([v.get("turn_taking_offset_loglik") for v in values]),
        }
        if not self.options.get("vap_model"):
            out["turn_taking_naturalness_note"] = "null: no VAP model given (option vap_model); no public VAP checkpoint on the Hub"
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
        if self.options.get("offset_reference"):
            m["turn_taking_offset_loglik"] = f"gaussian_kde of {self.options['offset_reference']}"
        return m
