"""Language & dialect dimension: ``english_answers_%``, ``same_dialect_as_question_%``,
``north_american_dialect_%``, ``dialectal_entrainment_spearman``, ``dialectal_variance``.

Definitions: ``SPEAR_PROTOCOL.md`` section 2 ("Language & dialect"), following upstream
``bin/language_id.py`` and ``bin/dialect_id.py`` (SPEAR-benchmark-code):

- spoken language ID of the **answer** (channels averaged, 16 kHz) with an audio
  classifier (reference ``facebook/mms-lid-126``, ``Wav2Vec2ForSequenceClassification``);
  an answer shorter than 1.0 s or whose top probability is < 0.5 is *unknown* and left out of
  ``english_answers_%`` (as upstream: ``benchmark_line.language_counts`` drops "unknown" labels);
- English dialect ID (reference ``tiantiaf/voxlect-english-dialect-whisper-large-v3``,
  16 classes, see :mod:`spear_metrics.core.vox_whisper`) of the **input clip** (both channels
  averaged, first 15 s as the model reads it) and of the answer (first 15 s), only for
  answers identified as English (as upstream); dialect *log-scores* are the natural-log
  softmax probabilities of the 16 classes;
- the three dialect keys are computed over the English answers.

``dialectal_entrainment_spearman`` is **not** a Spearman correlation: the published column is
the least-squares slope of the answers' dialect log-scores on the questions' (see
:func:`dialect_entrainment_slope`); the name is kept for compatibility with the table.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from spear_datasets.schema import SpearRow
from spear_metrics.core.dimension import Dimension, MetricKey, Option, OptionError, Sample, percent_or_none

LID_MODEL = "facebook/mms-lid-126"
DIALECT_MODEL = "tiantiaf/voxlect-english-dialect-whisper-large-v3"
#: Voxlect English dialect classes in output order. Source: the 16-class English accent list of
#: Vox-Profile (``vox_profile/example/narrow_accent_whisper.py``, hyperion-voxprofile 0.1.0),
#: which the Voxlect English model card's "16 English varieties" follows. A ``labels`` or
#: ``id2label`` entry in the checkpoint's config.json, or the ``dialect_labels`` option, wins.
ENGLISH_DIALECTS = (
    "East Asia", "English", "Germanic", "Irish", "North America", "Northern Irish", "Oceania", "Other",
    "Romance", "Scottish", "Semitic", "Slavic", "South African", "Southeast Asia", "South Asia", "Welsh",
)
NORTH_AMERICA = "North America"
MIN_LID_SECONDS = 1.0
MIN_LID_PROB = 0.5
#: longest answer (s) the language ID reads by default. It reads the whole answer in one pass (its
#: own recipe and SPEAR's ``bin/language_id.py``), and wav2vec 2.0's attention makes memory grow
#: with the square of the length; SPEAR's answers are human turns (mean 8.8 s).
LID_MAX_SECONDS = 180.0


def language_decision(duration_s: float, label: str | None, prob: float | None, english_labels: Sequence[str],
                      max_s: float | None = None) -> tuple[str, bool | None]:
    """Status of one answer's language ID and whether it is English.

    Returns ``("too_short", None)`` for answers < 1.0 s, ``("too_long", None)`` for answers
    longer than ``max_s`` (not read: the same outcome as upstream's "unknown" when its model
    call fails), ``("low_confidence", None)`` when the top probability is < 0.5 (or missing),
    else ``("ok", label in english_labels)``.
    """
    if duration_s < MIN_LID_SECONDS:
        return "too_short", None
    if max_s is not None and duration_s > max_s:
        return "too_long", None
    if prob is None or not np.isfinite(prob) or prob < MIN_LID_PROB or label is None:
        return "low_confidence", None
    return "ok", label.strip().lower() in {e.strip().lower() for e in english_labels}


def _minmax(x: np.ndarray) -> np.ndarray | None:
    lo, hi = float(np.min(x)), float(np.max(x))
    return None if hi <= lo else (x - lo) / (hi - lo)


def dialect_entrainment_slope(question_logscores: np.ndarray, answer_logscores: np.ndarray) -> float | None:
    """Least-squares slope of answer dialect log-scores on question dialect log-scores.

    Both ``(n, k)`` arrays (n samples x k dialects) are flattened to ``n*k`` points, each side
    is min-max normalised to [0, 1] over all its values, and the slope of the ordinary
    least-squares line ``a ~ s * q + c`` is returned: ``cov(q, a) / var(q)``. ``None`` when
    there are no points or either side is constant. This is what the published column
    ``dialectal_entrainment_spearman`` holds despite its name (upstream SPEAR-benchmark-code).
    """
    q = np.asarray(question_logscores, dtype=np.float64).reshape(-1)
    a = np.asarray(answer_logscores, dtype=np.float64).reshape(-1)
    if q.size == 0 or q.size != a.size or not (np.all(np.isfinite(q)) and np.all(np.isfinite(a))):
        return None
    qn, an = _minmax(q), _minmax(a)
    if qn is None or an is None:
        return None
    dq = qn - qn.mean()
    return float((dq * (an - an.mean())).sum() / (dq * dq).sum())


def dialectal_variance(answer_logscores: np.ndarray) -> float | None:
    """Trace of the covariance matrix (ddof 1) of answers' dialect log-score vectors
    ``(n, k)``: the sum over dialects of the across-answer variance. 0.0 for a single answer
    (``benchmark_line.answer_total_variance``), ``None`` for none."""
    a = np.asarray(answer_logscores, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0:
        return None
    if a.shape[0] == 1:
        return 0.0
    return float(np.trace(np.cov(a, rowvar=False, ddof=1)))


class LanguageID:
    """Spoken language ID with a ``transformers`` audio classifier (``mms-lid-126`` layout:
    ``Wav2Vec2ForSequenceClassification`` + its ``AutoFeatureExtractor``), batched by length
    with attention masks, on this process's device.

    Each wave is read whole (SPEAR's call), so a wave longer than ``max_seconds`` (default
    :data:`LID_MAX_SECONDS`) is not read at all: its prediction is ``None``."""

    def __init__(self, model: str, *, device=None, dtype: str | None = None, max_seconds: float | None = None):
        import torch
        from transformers import AutoFeatureExtractor, AutoModelForAudioClassification

        from spear_metrics.core.batching import model_dtype, process_device
        from spear_metrics.core.models import resolve_model

        path = resolve_model(model, purpose="language ID", allow_patterns=["*.json", "*.safetensors", "*.txt"])
        self.extractor = AutoFeatureExtractor.from_pretrained(str(path))
        self.device = device if device is not None else process_device()
        self.dtype = model_dtype(dtype, self.device)
        self.model = AutoModelForAudioClassification.from_pretrained(str(path), dtype=self.dtype).to(self.device).eval()
        self.id2label = {int(k): str(v) for k, v in self.model.config.id2label.items()}
        self._torch = torch
        self._second_bytes: float | None = None
        self.max_seconds = float(max_seconds) if max_seconds else LID_MAX_SECONDS

    def _probs(self, batch: list[np.ndarray]) -> np.ndarray:
        torch = self._torch
        feats = self.extractor([np.asarray(w, np.float32).reshape(-1) for w in batch], sampling_rate=16000,
                               return_tensors="pt", padding=True, return_attention_mask=True)
        feats = {k: v.to(self.device, self.dtype) if v.is_floating_point() else v.to(self.device) for k, v in feats.items()}
        with torch.inference_mode():
            return torch.softmax(self.model(**feats).logits.float(), dim=-1).cpu().numpy()

    def predict(self, waves: Sequence[np.ndarray], *, batch_size: int | str | None = 8,
                max_batch_seconds: float = 240.0) -> list[tuple[str, float] | None]:
        """Top label and its softmax probability for each mono 16 kHz wave ``(n,)``; ``None`` for
        a wave longer than :attr:`max_seconds` (never fed to the model).

        Batches group similar lengths, at most ``batch_size`` waves and ``max_batch_seconds`` of
        padded audio. ``batch_size="auto"``: on CUDA, the padded seconds a batch may hold come from
        the free memory (one probe of 2 x 10 s measures a second's cost; up to 256 waves); on CPU
        8 waves and ``max_batch_seconds``."""
        from spear_metrics.core.batching import batch_size_for, duration_batches, free_memory_bytes, peak_bytes_per_item

        def per_second() -> float:
            if self._second_bytes is None:
                probe = [np.zeros(10 * 16000, np.float32)] * 2
                self._second_bytes = peak_bytes_per_item(lambda k: self._probs(probe[:k]), self.device, 2) / 10.0
            return self._second_bytes

        auto = batch_size is None or str(batch_size).strip().lower() == "auto"
        if auto and free_memory_bytes(self.device) is not None:  # CUDA: the memory sets the padded seconds
            items, seconds = 256, float(batch_size_for("auto", self.device, per_second, cap=1 << 20))
        else:
            items, seconds = (8 if auto else batch_size_for(batch_size, self.device, lambda: 0.0)), max_batch_seconds
        out: list[tuple[str, float] | None] = [None] * len(waves)
        read = [i for i, w in enumerate(waves) if len(w) <= self.max_seconds * 16000]
        for idx in duration_batches([len(waves[i]) for i in read], max_items=items, max_padded_samples=int(seconds * 16000)):
            probs = self._probs([waves[read[i]] for i in idx])
            for j, i in enumerate(idx):
                k = int(np.argmax(probs[j]))
                out[read[i]] = (self.id2label.get(k, str(k)), round(float(probs[j, k]), 6))
        return out


class LanguageDialect(Dimension):
    """Spoken language of the answer and English dialect of question clip and answer.

    Options: ``lid_model`` (default ``facebook/mms-lid-126``), ``dialect_model`` (default
    ``tiantiaf/voxlect-english-dialect-whisper-large-v3``), ``english_labels`` (comma list,
    default ``eng,en,english``), ``dialect_labels`` (comma list overriding the class names),
    ``model_batch_size`` (int, or ``auto`` (default): 8 on CPU, from the free memory on CUDA),
    ``model_dtype`` (``float32`` default; ``float16``/``bfloat16``/``auto``: see :func:`spear_metrics.core.batching.model_dtype`).
    """

    name = "language_dialect"
    version = "1.1.0"
    # 1.1.0: the dialect head uses the position table its checkpoint stores (1.0.0 replaced it with
    # computed sinusoids, which the Voxlect wrapper's forward does not do); answers longer than
    # lid_max_s are not read by the language ID. 1.0.0 results are not taken as 1.1.0's: their
    # dialect keys came from another position table
    model_based = True
    keys = (
        MetricKey("english_answers_%", "%", "closer_to_human",
                  "share of answers that `facebook/mms-lid-126` identifies as English (`eng`); answers < 1.0 s or with top "
                  "probability < 0.5 are *unknown* and excluded (as upstream's language_counts)",
                  group="Language & dialect", published=True, order=7),
        MetricKey("same_dialect_as_question_%", "%", "closer_to_human",
                  "among English answers: Voxlect English dialect (16 classes) of the answer equals that of the input clip",
                  group="Language & dialect", published=True, order=8),
        MetricKey("north_american_dialect_%", "%", "closer_to_human",
                  "among English answers: share classified `North America`",
                  group="Language & dialect", published=True, order=9),
        MetricKey("dialectal_entrainment_spearman", "slope", "closer_to_human",
                  "**not a Spearman r** (name kept for the published table): least-squares slope of the answers' dialect "
                  "log-scores on the questions', all (sample, dialect) pairs flattened, each side min–max normalised to [0, 1]",
                  group="Language & dialect", published=True, order=10),
        MetricKey("dialectal_variance", "log-prob^2", "closer_to_human",
                  "trace of the covariance (ddof 1) of the English answers' 16-dim dialect log-score vectors",
                  group="Language & dialect", published=True, order=11),
    )
    option_schema = (
        Option("lid_model", str, LID_MODEL, "language-ID model id or local folder"),
        Option("dialect_model", str, DIALECT_MODEL, "English dialect model id or local folder (Voxlect Whisper head)"),
        Option("english_labels", str, "eng,en,english", "comma list of the language-ID labels that mean English"),
        Option("dialect_labels", str, None, "comma list of dialect class names overriding the model's"),
        Option("model_batch_size", str, "auto", "waves per model call: a positive integer, or auto (from the free GPU "
               "memory, probed once; 8 on CPU)"),
        Option("lid_max_s", float, LID_MAX_SECONDS, "longest answer (s) the language ID reads (whole answer at once, "
               "as SPEAR; memory grows with the square of the length); longer answers are 'too_long' (left out, as "
               "upstream's failed predictions)", minimum=MIN_LID_SECONDS),
        Option("model_dtype", str, "float32", "precision of the models: float32 (the reference), float16, bfloat16, or auto "
               "(half precision on CUDA)", choices=("float32", "float16", "bfloat16", "auto")),
    )

    def __init__(self, **options: Any):
        super().__init__(**options)
        from spear_metrics.core.batching import check_model_options

        try:
            check_model_options(self.options)
        except ValueError as e:
            raise OptionError(str(e)) from None
        self._lid: LanguageID | None = None
        self._dialect = None

    # lazy models: evaluate.load and registry lookups never touch them
    def _lid_model(self) -> LanguageID:
        if self._lid is None:
            self._lid = LanguageID(str(self.options.get("lid_model", LID_MODEL)), dtype=self.options.get("model_dtype"),
                                   max_seconds=float(self.options.get("lid_max_s", LID_MAX_SECONDS)))
        return self._lid

    def _dialect_model(self):
        if self._dialect is None:
            from spear_metrics.core.vox_whisper import DIALECT_HEADS, VoxWhisper

            # the position table the checkpoint stores, installed as the wrapper's forward does
            self._dialect = VoxWhisper(str(self.options.get("dialect_model", DIALECT_MODEL)), DIALECT_HEADS,
                                       purpose="English dialect ID", positions="wrapper",
                                       dtype=self.options.get("model_dtype"))
        return self._dialect

    def _dialect_labels(self, n: int) -> list[str]:
        opt = self.options.get("dialect_labels")
        labels = [x.strip() for x in str(opt).split(",")] if opt else (self._dialect_model().labels or list(ENGLISH_DIALECTS))
        if len(labels) != n:
            raise ValueError(f"dialect model has {n} classes but {len(labels)} class names are known (option dialect_labels)")
        return labels

    def score_batch(self, samples: Sequence[Sample]) -> list[dict[str, Any] | BaseException]:
        from spear_metrics.core.vox_whisper import log_softmax

        bs = self.options.get("model_batch_size", "auto")
        english_labels = str(self.options.get("english_labels", "eng,en,english")).split(",")
        answers = [s.answer_audio()[0] for s in samples]
        out: list[dict[str, Any]] = [{} for _ in samples]
        max_s = float(self.options.get("lid_max_s", LID_MAX_SECONDS))  # longer answers: predict gives None
        long_idx = [i for i, a in enumerate(answers) if len(a) / 16000 >= MIN_LID_SECONDS]
        preds = dict(zip(long_idx, self._lid_model().predict([answers[i] for i in long_idx], batch_size=bs))) if long_idx else {}
        english_idx = []
        for i, a in enumerate(answers):
            label, prob = preds.get(i) or (None, None)
            status, is_en = language_decision(len(a) / 16000, label, prob, english_labels, max_s=max_s)
            out[i].update({"language": label, "language_prob": prob, "language_status": status, "english_answer": is_en,
                           "question_dialect": None, "answer_dialect": None, "same_dialect_as_question": None,
                           "north_american_dialect": None, "question_dialect_logscores": None, "answer_dialect_logscores": None})
            if is_en:
                english_idx.append(i)
        if english_idx:
            model = self._dialect_model()
            waves = [samples[i].input_audio("mix")[0] for i in english_idx] + [answers[i] for i in english_idx]
            res = model.predict(waves, batch_size=bs)
            n = len(english_idx)
            labels = self._dialect_labels(len(res[0]["out_layer"]))
            for j, i in enumerate(english_idx):
                ql, al = log_softmax(res[j]["out_layer"]), log_softmax(res[n + j]["out_layer"])
                qd, ad = labels[int(np.argmax(ql))], labels[int(np.argmax(al))]
                out[i].update({
                    "question_dialect": qd, "answer_dialect": ad, "same_dialect_as_question": qd == ad,
                    "north_american_dialect": (ad == NORTH_AMERICA) if NORTH_AMERICA in labels else None,
                    "question_dialect_logscores": [round(float(x), 6) for x in ql],
                    "answer_dialect_logscores": [round(float(x), 6) for x in al],
                })
        return out

    def aggregate_counts(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, int]:
        """``english_answers_%``: rows with a language decision; the dialect keys: English
        answers with dialect log-scores (the rows :meth:`aggregate` uses for them)."""
        en = [v for v in values if v.get("english_answer") and v.get("answer_dialect_logscores") is not None]
        out = super().aggregate_counts(rows, values, keys)
        out["english_answers_%"] = sum(1 for v in values if v.get("english_answer") is not None)
        out["same_dialect_as_question_%"] = sum(1 for v in en if v.get("same_dialect_as_question") is not None)
        out["north_american_dialect_%"] = sum(1 for v in en if v.get("north_american_dialect") is not None)
        out["dialectal_entrainment_spearman"] = out["dialectal_variance"] = len(en)
        return out

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        en = [v for v in values if v.get("english_answer") and v.get("answer_dialect_logscores") is not None]
        q = np.array([v["question_dialect_logscores"] for v in en], dtype=np.float64)
        a = np.array([v["answer_dialect_logscores"] for v in en], dtype=np.float64)
        return {
            "english_answers_%": percent_or_none([v.get("english_answer") for v in values]),
            "same_dialect_as_question_%": percent_or_none([v.get("same_dialect_as_question") for v in en]),
            "north_american_dialect_%": percent_or_none([v.get("north_american_dialect") for v in en]),
            "dialectal_entrainment_spearman": dialect_entrainment_slope(q, a) if len(en) else None,
            "dialectal_variance": dialectal_variance(a) if len(en) else None,
        }

    def models(self) -> dict[str, str]:
        return {"english_answers_%": str(self.options.get("lid_model", LID_MODEL)),
                "dialect": str(self.options.get("dialect_model", DIALECT_MODEL))}
