"""Emotions dimension: ``arousal_question_answer_corr``, ``valence_question_answer_corr``,
``dominance_question_answer_corr``, ``emotional_naturalness_logit``.

Definitions: ``SPEAR_PROTOCOL.md`` section 2 ("Emotions").

- A/V/D: Vox-Profile's dimensional emotion head (reference
  ``tiantiaf/whisper-large-v3-msp-podcast-emotion-dim``, scores in [0, 1], see
  :mod:`spear_metrics.core.vox_whisper`) on the **question turn** — the questioner's channel
  of the input clip between ``context_end_time`` and ``question_end_time`` (channel from
  ``speakers`` + the last tag of ``transcript_question``, else the louder one, see
  :mod:`spear_metrics.core.channels`) — and on the answer (channels averaged); the model reads
  the first 15 s of each. Summary: Pearson r across samples (:func:`pearson_or_none`).
- ``emotional_naturalness_logit``: a pluggable classifier (:class:`NaturalnessClassifier`) on the
  concatenated emotion embeddings of question turn and answer, its logit shifted so that 99 %
  of human dev-set logits are > 0 (:func:`dev_shift`). No public weights exist for the
  upstream classifier: without ``naturalness_classifier`` the key is ``null`` and
  ``emotional_naturalness_logit_note`` says why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from spear_datasets.schema import SpearRow
from spear_metrics.core.dimension import Dimension, MetricKey, Sample, mean_or_none

EMOTION_MODEL = "tiantiaf/whisper-large-v3-msp-podcast-emotion-dim"
AVD = ("arousal", "valence", "dominance")


def pearson_or_none(x: Sequence[float | None], y: Sequence[float | None]) -> float | None:
    """Pearson r between paired values (pairs with a ``None`` dropped); ``None`` with fewer than
    2 pairs or a constant side."""
    pairs = [(float(a), float(b)) for a, b in zip(x, y) if a is not None and b is not None]
    if len(pairs) < 2:
        return None
    a, b = np.array(pairs).T
    da, db = a - a.mean(), b - b.mean()
    den = float(np.sqrt((da * da).sum() * (db * db).sum()))
    return None if den == 0.0 else float((da * db).sum() / den)


def dev_shift(human_dev_logits: Sequence[float], share_positive: float = 0.99) -> float:
    """Shift ``c`` such that ``share_positive`` of ``human_dev_logits + c`` are > 0:
    ``c = -quantile(logits, 1 - share_positive)`` (linear interpolation, numpy default), so
    the 1st percentile of shifted human dev logits is 0.

    Raises:
        ValueError: no finite logits.
    """
    x = np.asarray([v for v in human_dev_logits if v is not None], dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        raise ValueError("no human dev logits to fit the naturalness shift")
    return float(-np.quantile(x, 1.0 - share_positive))


class NaturalnessClassifier:
    """A naturalness classifier over ``[question embedding, answer embedding]`` (``2 * d``).

    Layout (a local folder): ``config.json`` ``{"type": "spear_naturalness_mlp", "hidden": [h...],
    "input_dim": 2*d, "shift": c | null}`` + ``model.safetensors`` of the ``torch.nn.Sequential``
    ``Linear(2d, h1), ReLU, ..., Linear(h_last, 1)`` (parameter names ``net.<i>.weight``).
    ``shift`` is the dev-set normalisation (:func:`dev_shift`); the option
    ``naturalness_shift`` overrides it.
    """

    def __init__(self, path: str | Path, *, device=None):
        import torch
        from safetensors.torch import load_file
        from torch import nn

        from spear_metrics.core.batching import process_device
        from spear_metrics.core.models import resolve_model

        p = resolve_model(path, purpose="emotional naturalness classifier")
        cfg = json.loads((p / "config.json").read_text())
        if cfg.get("type") != "spear_naturalness_mlp":
            raise ValueError(f"{path}: config.json type {cfg.get('type')!r} is not 'spear_naturalness_mlp'")
        dims = [int(cfg["input_dim"]), *map(int, cfg.get("hidden", [])), 1]
        layers: list[Any] = []
        for i in range(len(dims) - 1):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if i < len(dims) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Module()
        self.net.net = nn.Sequential(*layers)
        self.net.load_state_dict(load_file(str(p / "model.safetensors")))
        self.device = device if device is not None else process_device()
        self.net.to(self.device).eval()
        self.shift = cfg.get("shift")
        self.input_dim = dims[0]
        self._torch = torch

    def logits(self, q_emb: np.ndarray, a_emb: np.ndarray) -> np.ndarray:
        """Raw logits ``(n,)`` for embeddings ``(n, d)`` each."""
        torch = self._torch
        x = torch.from_numpy(np.concatenate([q_emb, a_emb], axis=1).astype(np.float32)).to(self.device)
        with torch.inference_mode():
            return self.net.net(x)[:, 0].float().cpu().numpy()


class Emotions(Dimension):
    """Arousal/valence/dominance of question turn and answer; optional naturalness logit.

    Options: ``emotion_model`` (default ``tiantiaf/whisper-large-v3-msp-podcast-emotion-dim``),
    ``naturalness_classifier`` (local folder, see :class:`NaturalnessClassifier`; default none),
    ``naturalness_shift`` (float, overrides the classifier's stored shift), ``model_batch_size``.
    """

    name = "emotions"
    version = "1.0.0"
    model_based = True
    keys = (
        *(MetricKey(f"{d}_question_answer_corr", "r", "closer_to_human",
                    f"Pearson r across samples between question-turn and answer {d} (Vox-Profile emotion-dim, [0,1])") for d in AVD),
        MetricKey("emotional_naturalness_logit", "logit", "higher",
                  "mean shifted logit of a naturalness classifier on question+answer emotion embeddings (null without one)"),
    )

    def __init__(self, **options: Any):
        super().__init__(**options)
        self._model = None
        self._nat = None

    def _emotion(self):
        if self._model is None:
            from spear_metrics.core.vox_whisper import EMOTION_DIM_HEADS, VoxWhisper

            self._model = VoxWhisper(str(self.options.get("emotion_model", EMOTION_MODEL)), EMOTION_DIM_HEADS,
                                     purpose="emotion (arousal/valence/dominance)")
        return self._model

    def _naturalness(self) -> NaturalnessClassifier | None:
        path = self.options.get("naturalness_classifier")
        if not path:
            return None
        if self._nat is None:
            self._nat = NaturalnessClassifier(str(path))
        return self._nat

    def _shift(self, clf: NaturalnessClassifier) -> float | None:
        s = self.options.get("naturalness_shift", clf.shift)
        return None if s is None else float(s)

    def score_batch(self, samples: Sequence[Sample]) -> list[dict[str, Any] | BaseException]:
        from spear_metrics.core.channels import questioner_channel

        questions = []
        for s in samples:
            clip = s.input_audio("keep")
            ch = questioner_channel(s.meta, clip)
            lo, hi = int(round(s.meta.context_end_time * 16000)), int(round(s.meta.question_end_time * 16000))
            questions.append(clip[ch, lo:hi])
        answers = [s.answer_audio()[0] for s in samples]
        res = self._emotion().predict(questions + answers, batch_size=int(self.options.get("model_batch_size", 8)))
        n = len(samples)
        out = []
        for i in range(n):
            q, a = res[i], res[n + i]
            v: dict[str, Any] = {}
            for d in AVD:
                v[f"question_{d}"] = round(float(q[f"{d}_layer"][0]), 6)
                v[f"answer_{d}"] = round(float(a[f"{d}_layer"][0]), 6)
            v["emotional_naturalness_logit"] = None
            out.append(v)
        clf = self._naturalness()
        if clf is not None:
            shift = self._shift(clf)
            if shift is not None:
                q_emb = np.stack([res[i]["embedding"] for i in range(n)])
                a_emb = np.stack([res[n + i]["embedding"] for i in range(n)])
                if q_emb.shape[1] * 2 != clf.input_dim:
                    raise ValueError(f"naturalness classifier expects {clf.input_dim} inputs, emotion embeddings give {2 * q_emb.shape[1]}")
                for v, lg in zip(out, clf.logits(q_emb, a_emb)):
                    v["emotional_naturalness_logit"] = round(float(lg) + shift, 6)
        return out

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {
            f"{d}_question_answer_corr": pearson_or_none([v.get(f"question_{d}") for v in values], [v.get(f"answer_{d}") for v in values])
            for d in AVD
        }
        out["emotional_naturalness_logit"] = mean_or_none([v.get("emotional_naturalness_logit") for v in values])
        if out["emotional_naturalness_logit"] is None:
            if not self.options.get("naturalness_classifier"):
                out["emotional_naturalness_logit_note"] = (
                    "null: no naturalness classifier given (option naturalness_classifier); the upstream classifier's weights are not public")
            else:
                out["emotional_naturalness_logit_note"] = (
                    "null: the classifier has no dev-set shift (config.json 'shift' or option naturalness_shift)")
        return out

    def models(self) -> dict[str, str]:
        m = {"emotions_avd": str(self.options.get("emotion_model", EMOTION_MODEL))}
        if self.options.get("naturalness_classifier"):
            m["emotional_naturalness_logit"] = str(self.options["naturalness_classifier"])
        return m
