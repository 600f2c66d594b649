"""Emotions dimension: ``arousal_question_answer_corr``, ``valence_question_answer_corr``,
``dominance_question_answer_corr``, ``emotional_naturalness_logit``.

Definitions: ``SPEAR_PROTOCOL.md`` section 2 ("Emotions"), as SPEAR's code computes them
(``bin/naturalness/extract_features.py`` ``process_question_answer`` / ``compute_turn_scores``,
``bin/naturalness/aggregate_AVD_emotions.py``, ``bin/reports/benchmark_line.py``
``avd_correlation``; stage script ``20_naturalness_feats.sh``):

- A/V/D: Vox-Profile's dimensional emotion head (reference
  ``tiantiaf/whisper-large-v3-msp-podcast-emotion-dim``, scores in [0, 1], see
  :mod:`spear_metrics.core.vox_whisper`), each side scored as **one whole turn** (SPEAR's
  ``turn_*`` scores: one forward pass per side, not a mean of windows): the question = the
  input clip with both channels averaged, samples ``round(context_end_time * sr)`` to
  ``round(question_end_time * sr)``; the answer = the whole answer file, channels averaged.
  The log-mel is taken over the whole turn and its frames cut to 1500 (15 s) or zero-padded
  (``padding="mel"`` of :meth:`VoxWhisper.predict`); the checkpoint's position table is used
  (SPEAR calls the encoder directly). Scores are kept to 6 decimals (SPEAR's CSVs).
- Rows whose ``question_end_time - context_end_time`` is below ``min_question_s`` (default 1.0 s,
  SPEAR's current stage script; older versions passed 3.0) are not scored (no pair); an empty
  turn gives no score for that side.
- Summary: Pearson r across the rows with both values (:func:`avd_correlation`): ``None``
  with fewer than 2 pairs or a side with fewer than 2 distinct values.
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
from spear_metrics.core.dimension import Dimension, MetricKey, Option, OptionError, Sample, mean_or_none

EMOTION_MODEL = "tiantiaf/whisper-large-v3-msp-podcast-emotion-dim"
AVD = ("arousal", "valence", "dominance")
MIN_QUESTION_S = 1.0  # seconds; SPEAR's current 20_naturalness_feats.sh passes --min-len-question 1.0


def avd_correlation(question: Sequence[float | None], answer: Sequence[float | None]) -> float | None:
    """Pearson r between question and answer scores over the rows where both exist.

    Source: ``bin/reports/benchmark_line.py`` ``avd_correlation`` (pairs with both values;
    NaN, here ``None``, when fewer than 2 pairs or when either side has fewer than 2 distinct
    values).
    """
    from scipy.stats import pearsonr

    pairs = [(float(a), float(b)) for a, b in zip(question, answer)
             if a is not None and b is not None and np.isfinite(a) and np.isfinite(b)]
    if len(pairs) < 2:
        return None
    q, a = np.array(pairs).T
    if len(np.unique(q)) < 2 or len(np.unique(a)) < 2:
        return None
    return float(pearsonr(q, a).statistic)


def question_turn(clip_mix: np.ndarray, context_end_time: float, question_end_time: float, sr: int = 16000) -> np.ndarray:
    """The question turn as SPEAR cuts it: mono clip ``(n,)`` (channels already averaged) from
    sample ``round(context_end_time * sr)`` (at least 0) to ``round(question_end_time * sr)``
    (at most ``n``, at least the start). Source: ``extract_features.py`` ``load_audio``."""
    x = np.asarray(clip_mix, dtype=np.float32).reshape(-1)
    lo = max(0, int(round(float(context_end_time) * sr)))
    hi = min(len(x), max(lo, int(round(float(question_end_time) * sr))))
    return x[lo:hi]


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
    ``min_question_s`` (float seconds, default 1.0: shorter questions are not scored; the value
    is written to the summary as ``emotions_min_question_s``), ``naturalness_classifier``
    (local folder, see :class:`NaturalnessClassifier`; default none), ``naturalness_shift``
    (float, overrides the classifier's stored shift), ``model_batch_size`` (int, or ``auto``
    (default): 8 on CPU, from the free memory on CUDA), ``model_dtype`` (``float32`` default).

    Raises (at construction, before any row): :class:`OptionError` for a ``min_question_s``
    that is not a finite number >= 0.
    """

    name = "emotions"
    version = "2.0.0"
    model_based = True
    setting_keys = frozenset({"emotions_min_question_s"})  # an option echoed into the summary
    keys = (
        *(MetricKey(f"{d}_question_answer_corr", "r", "closer_to_human",
                    f"Pearson r across samples between the question turn's and the answer's predicted {d} (Vox-Profile "
                    "emotion-dim, [0, 1], one whole-turn pass per side: SPEAR's full-turn scores)",
                    group="Emotions", published=True, order=14 + i) for i, d in enumerate(AVD)),
        MetricKey("emotional_naturalness_logit", "logit", "higher",
                  "mean logit of a naturalness classifier on [question, answer] emotion embeddings, shifted so 99 % of "
                  "human dev logits are > 0; **null** without a classifier",
                  group="Emotions", published=True, order=13),
    )
    option_schema = (
        Option("emotion_model", str, EMOTION_MODEL, "Vox-Profile emotion-dim model id or local folder"),
        Option("min_question_s", float, MIN_QUESTION_S, "questions shorter than this (s) are not scored (SPEAR's "
               "--min-len-question)", minimum=0),
        Option("naturalness_classifier", str, None, "local folder of a naturalness classifier (none: key null with a note)"),
        Option("naturalness_shift", float, None, "logit shift overriding the classifier's stored one"),
        Option("model_batch_size", str, "auto", "waves per model call: a positive integer, or auto (from the free GPU "
               "memory, probed once; 8 on CPU)"),
        Option("model_dtype", str, "float32", "precision of the models: float32 (the reference), float16, bfloat16, or auto "
               "(half precision on CUDA)", choices=("float32", "float16", "bfloat16", "auto")),
    )

    def __init__(self, **options: Any):
        super().__init__(**options)  # option_schema: min_question_s a finite number >= 0 (OptionError otherwise)
        from spear_metrics.core.batching import check_model_options

        try:
            check_model_options(self.options)
        except ValueError as e:
            raise OptionError(str(e)) from None
        self.min_question_s = float(self.options.get("min_question_s", MIN_QUESTION_S))
        self._model = None
        self._nat = None

    def _emotion(self):
        if self._model is None:
            from spear_metrics.core.vox_whisper import EMOTION_DIM_HEADS, VoxWhisper

            self._model = VoxWhisper(str(self.options.get("emotion_model", EMOTION_MODEL)), EMOTION_DIM_HEADS,
                                     purpose="emotion (arousal/valence/dominance)", positions="checkpoint",
                                     dtype=self.options.get("model_dtype"))
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
        out: list[dict[str, Any] | BaseException] = []
        todo: list[int] = []
        waves: list[np.ndarray] = []
        for i, s in enumerate(samples):
            v: dict[str, Any] = {f"{side}_{d}": None for side in ("question", "answer") for d in AVD}
            v["emotional_naturalness_logit"] = None
            # extract_features.py skips the whole row (no question, no answer score) when the question is short
            v["emotions_question_too_short"] = (s.meta.question_end_time - s.meta.context_end_time) < self.min_question_s
            out.append(v)
            if not v["emotions_question_too_short"]:
                try:
                    q = question_turn(s.input_audio("mix")[0], s.meta.context_end_time, s.meta.question_end_time)
                    a = s.answer_audio()[0]
                except Exception as e:  # an unreadable file fails this row only
                    out[i] = e
                    continue
                todo.append(i)
                waves.extend([q, a])
        if not todo:
            return out
        try:
            res = self._emotion().predict(waves, batch_size=self.options.get("model_batch_size", "auto"), padding="mel")
        except ValueError:  # a turn too short for the log-mel: score one by one so only its row fails
            res = []
            for w in waves:
                try:
                    res.extend(self._emotion().predict([w], padding="mel"))
                except ValueError as e:
                    res.append(e)
        for k, i in enumerate(todo):
            q, a = res[2 * k], res[2 * k + 1]
            bad = next((r for r in (q, a) if isinstance(r, BaseException)), None)
            if bad is not None:
                out[i] = bad
                continue
            v = out[i]
            for side, r in (("question", q), ("answer", a)):
                if r is not None:
                    for d in AVD:
                        v[f"{side}_{d}"] = round(float(r[f"{d}_layer"][0]), 6)
        self._score_naturalness(samples, todo, res, out)
        return out

    def _score_naturalness(self, samples, todo, res, out) -> None:
        clf = self._naturalness()
        if clf is None:
            return
        shift = self._shift(clf)
        if shift is None:
            return
        ok = [k for k, i in enumerate(todo) if isinstance(out[i], dict)
              and isinstance(res[2 * k], dict) and isinstance(res[2 * k + 1], dict)]
        if not ok:
            return
        q_emb = np.stack([res[2 * k]["embedding"] for k in ok])
        a_emb = np.stack([res[2 * k + 1]["embedding"] for k in ok])
        if q_emb.shape[1] * 2 != clf.input_dim:
            raise ValueError(f"naturalness classifier expects {clf.input_dim} inputs, emotion embeddings give {2 * q_emb.shape[1]}")
        for k, lg in zip(ok, clf.logits(q_emb, a_emb)):
            out[todo[k]]["emotional_naturalness_logit"] = round(float(lg) + shift, 6)

    def aggregate_counts(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, int]:
        """The three correlations: rows with both the question's and the answer's value (pairs)."""
        out = super().aggregate_counts(rows, values, keys)
        for d in AVD:
            out[f"{d}_question_answer_corr"] = sum(
                1 for v in values if v.get(f"question_{d}") is not None and v.get(f"answer_{d}") is not None)
        return out

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {
            f"{d}_question_answer_corr": avd_correlation([v.get(f"question_{d}") for v in values], [v.get(f"answer_{d}") for v in values])
            for d in AVD
        }
        # rows with both sides scored (the same rows for the three dimensions)
        out["emotions_n_pairs"] = sum(1 for v in values if v.get("question_arousal") is not None and v.get("answer_arousal") is not None)
        out["emotions_min_question_s"] = self.min_question_s
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
