"""Distributional dimension: SPEAR's distributional baselines (per-answer prosodic, temporal and
lexical features; per-feature discriminants fitted on a dev split; correlation clusters) and the
project's own overall score, ``human_likeness_auroc``.

Sources: upstream ``thomasthebaud/SPEAR-benchmark-code`` ``bin/distrib_baselines/``
(``extract_features.py``, ``compute_features_scores.py``, ``analyse_correlations.py``) and
``Ashish-Hallur/SPEAR-Metrics`` (the feature scripts it reuses). The features are in
:mod:`spear_metrics.distributional.features`, the baselines in
:mod:`spear_metrics.distributional.baseline`, the overall score in
:mod:`spear_metrics.distributional.likeness`.

Per answer, with the run's one decode of the answer file:

- F0: the project's Praat pitch (:func:`spear_metrics.core.pitch.answer_pitch`, 75-500 Hz, the
  file as Praat reads it), shared with ``explainable_features``;
- speech segments: the project's Silero VAD (:func:`spear_metrics.core.vad.answer_speech_segments`,
  the library defaults SPEAR's ``preprocess_audio_alignments.py`` passes, 0.1 s times), shared
  with ``interruptions``;
- words: the run's ASR with word timestamps (option ``asr``; SPEAR used WhisperX large-v2 with
  its alignment); the text of the lexical features is that ASR's text, else (empty, or
  ``asr=none``) ``transcript_answer`` with its speaker tags removed, as upstream's
  ``feature_text`` reads its preprocessed answers (the JSON's text first);
  ``text_source=transcript_answer`` puts ``transcript_answer`` first. Which one is written per row
  (``distrib_text_source``, ``temporal_alignment_source``). Without an ASR (``asr=none``) the word times are upstream's
  estimate: the words spread evenly over ``answer_duration``, one VAD segment over it.

Nothing here loads a model at import; ``sklearn``/``scipy``/``pandas`` are imported on use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from spear_datasets.schema import SpearRow, strip_speaker_tags
from spear_metrics.core.dimension import Dimension, MetricKey, Option, OptionError, Sample, keyed_resampler, mean_or_none, mean_resampler
from spear_metrics.core.vad import BACKENDS, DEFAULT_BACKEND
from spear_metrics.distributional import baseline as bl
from spear_metrics.distributional.features import (
    FEATURE_KEYS, POS_KEYS, UNSUPPORTED, estimated_words, f0_features, lexical_features, temporal_features, timed_words,
)
from spear_metrics.distributional.pos import load_tagger

GROUP = "Distributional baselines"
NO_ASR = "none"
NATURALNESS = "__naturalness_score"

_UPSTREAM = ("upstream `bin/distrib_baselines/compute_features_scores.py`")


class Distributional(Dimension):
    """Per-answer distributional features, SPEAR's dev-fitted baselines and ``human_likeness_auroc``."""

    name = "distributional"
    version = "1.0.0"
    keys = (
        MetricKey("average_naturalness_score", "P(human)", "higher",
                  "SPEAR's distributional baseline (" + _UPSTREAM + "): per answer, the mean over the features it has "
                  "of P(human | value) from each feature's 1-D linear discriminant fitted on the dev split (human answer "
                  "= 1, model answer = 0; `spearbench fit-baseline`); mean over the scored answers. **Null** without "
                  "`-o baseline=PATH`. Its part-of-speech features (`lexical_density`, content/function word counts) "
                  "need spaCy's en_core_web_sm 3.8.0 (`distributional/requirements-models.txt`); without it they are "
                  "null (`distributional_unsupported` says why) and the mean is over the other features", group=GROUP),
        MetricKey("general_explainable_feature_rho0p8", "z-score units", "closer_to_human",
                  "upstream `analyse_correlations.py`: the first principal component, over the dev answers, of the "
                  "per-cluster components of the z-scored features clustered at |Spearman rho| >= 0.8; mean over the "
                  "model's test answers (the human answers' mean with `-o human_run`: `..._human`)", group=GROUP),
        MetricKey("general_explainable_feature_rho0p8__auroc__<table>", "AUROC", "closer_to_human",
                  "AUROC of the general feature's value for the human test answers against the model's in one table; "
                  "0.5 (the human answers against themselves) is the target, on either side: the feature's sign comes "
                  "from upstream's loadings rule, not from which side is human",
                  group=GROUP),
        MetricKey("<feature>__naturalness_score", "P(human)", "higher",
                  "per feature (`f0_*`, `lexical_*`, `temporal_*`, named as upstream): P(human | value) of the answer "
                  "under that feature's dev-fitted discriminant; mean over the answers with a value", group=GROUP),
        MetricKey("<feature>__accuracy__<table>", "ratio", "lower",
                  "upstream's `evaluate_feature`: accuracy of the feature's discriminant telling the human test answers "
                  "from the model's, in one split/subset table (`improvised`, `naturalistic`, or `all` when the input "
                  "path names none); 0.5 = cannot tell. Needs `-o human_run=RESULTS` (the human answers' run)",
                  group=GROUP),
        MetricKey("<feature>__auroc__<table>", "AUROC", "lower",
                  "upstream's `evaluate_feature`: AUROC of P(human) of the feature's discriminant on the human and model "
                  "test answers of one table; 0.5 = cannot tell. Needs `-o human_run=RESULTS`", group=GROUP),
        MetricKey("human_likeness_auroc", "AUROC", "lower",
                  "**SPEARBench's own overall score** (not SPEAR's): a classifier two-sample test between the model's and "
                  "the human answers to the same questions over every per-answer value of every dimension the run scored "
                  "(distributional features included): AUROC of a regularised logistic regression on held-out folds "
                  "grouped by conversation (mean over the folds); 0.5 (the human answers against themselves) = no "
                  "listener-free classifier can tell the model from the humans, 1 = always can (lower is better down to "
                  "0.5; below is chance). Interval: the cross-validation refitted on resampled questions. Needs "
                  "`-o human_run=RESULTS`; null with a note below 10 answers a side or 2 conversations", group="Human likeness"),
    )
    option_schema = (
        Option("asr", str, "embedded", "ASR backend for the answers' word times (and text without transcript_answer): "
               "a spear_metrics.core.asr backend name (embedded, whisper-large-v3, qwen3-asr-0.6b...) or none "
               "(upstream's estimate from answer_duration)"),
        Option("text_source", str, "asr", "text of the lexical features: asr (the ASR text first, transcript_answer "
               "when it is empty or asr=none: upstream's feature_text on its preprocessed answers) or transcript_answer "
               "(speaker tags removed; the ASR text when empty)",
               choices=("asr", "transcript_answer")),
        Option("vad_backend", str, DEFAULT_BACKEND, "Silero VAD front end (see spear_metrics.core.vad)", choices=BACKENDS),
        Option("baseline", str, None, "fitted baseline JSON (spearbench fit-baseline): per-answer naturalness scores "
               "and the stage-2 cluster features"),
        Option("human_run", str, None, "results folder of the human answers to the same questions, scored with the "
               "same dimensions: per-feature accuracy/AUROC and human_likeness_auroc"),
        Option("likeness_features", str, None, "comma list of per-answer keys or fnmatch patterns (latency_ms,temporal_*) "
               "that human_likeness_auroc may use (default: every per-answer value both runs share)"),
    )

    def __init__(self, **options: Any):
        super().__init__(**options)
        self._asr_name = str(self.options.get("asr") or "embedded").strip()
        self._asr = None
        #: with an ASR the dimension runs a model: scored in a group of its own, left out by the demo
        #: when the model cannot be had
        self.model_based = self._asr_name != NO_ASR
        if self._asr_name != NO_ASR:
            from spear_metrics.core.asr import ASR_BACKENDS

            if self._asr_name not in ASR_BACKENDS:
                raise OptionError(f"distributional option asr must be none or an ASR backend "
                                  f"({', '.join(sorted(ASR_BACKENDS))}), got {self._asr_name!r}")
        self.baseline: dict[str, Any] | None = None
        self.baseline_sha256: str | None = None
        path = self.options.get("baseline")
        if path:
            try:
                self.baseline, self.baseline_sha256 = bl.read_baseline(path)
            except bl.BaselineError as e:
                raise OptionError(f"distributional option baseline: {e}") from None
        human = self.options.get("human_run")
        if human and not (Path(human) / "per_sample.jsonl").is_file():
            raise OptionError(f"distributional option human_run: {human} holds no per_sample.jsonl (a scored run "
                              "folder of the human answers)")
        pats = self.options.get("likeness_features")
        self.likeness_patterns = [p.strip() for p in str(pats).split(",") if p.strip()] if pats else None

    # ------------------------------------------------------------------ scoring

    def _backend(self):
        if self._asr is None:
            from spear_metrics.core.asr import load_asr

            self._asr = load_asr(self._asr_name)
        return self._asr

    def _transcript(self, sample: Sample):
        """The answer's ASR transcript with word times (once per sample and backend)."""
        backend = self._backend()
        return sample.cached(f"asr_words:{self._asr_name}", lambda: backend.transcribe(
            [sample.answer_audio()[0]], sr=16000, word_timestamps=True)[0])

    def score_sample(self, sample: Sample) -> dict[str, Any]:
        from spear_metrics.core.pitch import answer_pitch
        from spear_metrics.core.vad import answer_speech_segments

        meta = sample.meta
        track, duration = answer_pitch(sample)
        out: dict[str, Any] = f0_features(track.f0_hz if len(track.f0_hz) else None, duration)
        vad = answer_speech_segments(sample, backend=self.options.get("vad_backend", DEFAULT_BACKEND), time_resolution=1)
        transcript = None if self._asr_name == NO_ASR else self._transcript(sample)
        label = None if transcript is None else (transcript.model or self._backend().name)
        given = strip_speaker_tags(meta.transcript_answer, meta.speakers.split("|"))
        asr_text = (transcript.text or "").strip() if transcript is not None else ""
        if self.options.get("text_source", "asr") == "asr" and asr_text:
            text, source = asr_text, f"asr:{label}"
        elif given:
            text, source = given, "transcript_answer"
        elif asr_text:
            text, source = asr_text, f"asr:{label}"
        else:
            text, source = "", "none"
        out["distrib_text_source"] = source
        tagger, _, why = load_tagger()
        out.update(lexical_features(text, tagger))
        if tagger is None:
            out["lexical_pos_note"] = why
        if transcript is not None:
            out.update(temporal_features(timed_words(transcript.words), vad, f"asr_word_timestamps:{label}"))
        elif meta.answer_duration is None:
            out.update({"temporal_alignment_source": "estimated_from_metadata", "temporal_status": "NO_ANSWER_DURATION"})
        else:  # upstream's estimate: the words spread over answer_duration, one VAD segment over it
            dur = float(meta.answer_duration)
            words = estimated_words(text, dur)
            out.update(temporal_features(words, [(0.0, dur)] if words and dur > 0 else [], "estimated_from_metadata"))
        if self.baseline is not None:
            table = bl.baseline_table(self.baseline, meta.audio_path)
            if table is None:
                out["distrib_note"] = (f"no fitted table for {bl.table_of(meta.audio_path)!r} in the baseline "
                                       f"(tables: {', '.join(self.baseline['tables'])})")
            else:
                out.update(bl.score_answer(self.baseline, table, out))
        return out

    # ------------------------------------------------------------------ summary

    @staticmethod
    def _score_keys(values: Sequence[dict[str, Any]]) -> list[str]:
        """The per-feature naturalness keys the rows carry (first seen order), and the general feature."""
        seen = dict.fromkeys(k for v in values for k in v if k.endswith(NATURALNESS) or k == bl.general_key())
        return list(seen)

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"average_naturalness_score": mean_or_none([v.get("average_naturalness_score") for v in values])}
        for k in self._score_keys(values):
            out[k] = mean_or_none([v.get(k) for v in values])
        return out

    def resampled_aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]):
        """:meth:`aggregate` of a resample, bit-identical (every key a :func:`mean_resampler`)."""
        keys = ["average_naturalness_score", *self._score_keys(values)]
        return keyed_resampler({k: mean_resampler([v.get(k) for v in values]) for k in keys})

    def summarize(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]], *,
                  n_resamples: int = 0, seed: int = 0, bootstrap_unit: str = "conversation") -> dict[str, Any]:
        """:meth:`Dimension.summarize` plus what needs more than this run's rows: with a baseline,
        its provenance (``distributional_baseline``); with ``human_run``, the per-feature accuracy
        and AUROC per table, the stage-2 check on the test answers and ``human_likeness_auroc``,
        each with ``_ci95`` (questions resampled: a question's model and human answers together)
        and ``_n`` (answers that entered it)."""
        out = super().summarize(rows, values, n_resamples=n_resamples, seed=seed, bootstrap_unit=bootstrap_unit)
        if out.get("average_naturalness_score") is None:
            out["average_naturalness_score_note"] = (
                "needs a baseline fitted on the dev split: spearbench fit-baseline, then -o baseline=PATH"
                if self.baseline is None else "no scored answer has a feature value the baseline fitted")
        if self.baseline is not None:
            out["distributional_baseline"] = {
                "file": Path(str(self.options.get("baseline"))).name, "sha256": self.baseline_sha256,
                "format_version": self.baseline.get("format_version"), "tables": list(self.baseline["tables"]),
                "ignored_features": self.baseline.get("ignored_features"), "fitted_on": self.baseline.get("fitted_on"),
            }
        unsupported = dict(UNSUPPORTED)
        _, tagger_label, why = load_tagger()
        if tagger_label is None:  # the POS features (and so every key fitted on them) lack their tagger
            unsupported.update(dict.fromkeys(POS_KEYS, why))
        out["distributional_unsupported"] = unsupported
        human_src = self.options.get("human_run")
        if not human_src:
            out.update({"human_likeness_auroc": None, "human_likeness_auroc_ci95": None, "human_likeness_auroc_n": 0,
                        "human_likeness_note": "needs the human answers' run scored with the same dimensions: "
                                               "-o human_run=RESULTS"})
            return out
        from spear_metrics.reports.runs import input_id, load_run

        human_run = load_run(human_src)
        human = human_run.ok_rows
        model = [{**v, "audio_path": r.audio_path} for r, v in zip(rows, values)]
        conv = {input_id(m): r.conversation_id for m, r in zip(model, rows)}
        if self.baseline is not None:
            out.update(_evaluate_on_test(self.baseline, model, human, n_resamples=n_resamples, seed=seed))
        res = _likeness(model, human, conv, self.likeness_patterns, n_resamples=n_resamples, seed=seed)
        out.update(res.summary())
        # the dimensions both runs scored: this run's are its summary's "metrics"
        out["human_likeness_human_run_metrics"] = list(human_run.summary.get("metrics") or [])
        out["human_likeness_source"] = Path(str(human_src)).name
        return out

    def models(self) -> dict[str, str]:
        from importlib.metadata import version

        out = {"distributional:pitch": f"praat-parselmouth {version('praat-parselmouth')} to_pitch_ac(75, 500)",
               "distributional:vad": f"silero-vad {version('silero-vad')} ({self.options.get('vad_backend', DEFAULT_BACKEND)})"}
        if self._asr_name != NO_ASR:
            try:
                out["distributional:asr"] = self._backend().describe()
            except Exception:  # a backend that cannot even describe itself: the rows say why
                out["distributional:asr"] = self._asr_name
        _, tagger_label, why = load_tagger()
        out["distributional:pos_tagger"] = tagger_label or f"none ({why})"
        if self.baseline_sha256:
            out["distributional:baseline"] = f"{Path(str(self.options.get('baseline'))).name} sha256 {self.baseline_sha256[:16]}"
        return out


def _likeness(model: list[dict[str, Any]], human: list[dict[str, Any]], conv: dict[str, str],
              patterns: Sequence[str] | None, *, n_resamples: int, seed: int):
    from spear_metrics.distributional.likeness import run_rows_likeness
    from spear_metrics.reports.runs import input_id

    return run_rows_likeness(model, human, question=input_id, conversation=lambda r: conv.get(input_id(r)),
                             patterns=patterns, n_resamples=n_resamples, seed=seed)


def _evaluate_on_test(baseline: dict[str, Any], model: list[dict[str, Any]], human: list[dict[str, Any]], *,
                      n_resamples: int, seed: int) -> dict[str, Any]:
    """Per (table, feature): ``<feature>__accuracy__<table>``, ``<feature>__auroc__<table>`` (+ ``_ci95``,
    ``_n``); the general feature's AUROC per table and its human mean; the clusters with upstream's
    check on the test answers (``validates_in_test``) and the features upstream's test-side rule
    would have left out (``distributional_note``)."""
    from spear_metrics.core.stats import aggregate_intervals
    from spear_metrics.reports.runs import input_id

    gkey = bl.general_key()
    human = [{**h, **(bl.score_answer(baseline, t, h) if (t := bl.baseline_table(baseline, h.get("audio_path"))) else {})}
             for h in human]
    m_tab = np.array([bl.baseline_table(baseline, r.get("audio_path")) or "" for r in model], dtype=object)
    h_tab = np.array([bl.baseline_table(baseline, r.get("audio_path")) or "" for r in human], dtype=object)
    out: dict[str, Any] = {}
    specs: list[tuple[str, str, str, dict[str, Any] | None]] = []  # (key base, table, feature, fit)
    for t, table in baseline["tables"].items():
        for f, fit in table["features"].items():
            specs.append((f"{f}__{{}}__{t}", t, f, fit))
        if table.get("stage2"):
            specs.append((f"{gkey}__{{}}__{t}", t, gkey, None))
    cols_m = {f: bl.column(model, f) for _, _, f, _ in specs}
    cols_h = {f: bl.column(human, f) for _, _, f, _ in specs}

    counts: dict[str, int] = {}

    def evaluate(m_idx: np.ndarray, h_idx: np.ndarray, exact: bool) -> dict[str, Any]:
        res: dict[str, Any] = {}
        for base, t, f, fit in specs:
            xm = cols_m[f][m_idx][m_tab[m_idx] == t]
            xh = cols_h[f][h_idx][h_tab[h_idx] == t]
            if fit is not None:
                if exact:
                    ev = bl.evaluate_feature(fit, xh, xm)
                    res[base.format("accuracy")], res[base.format("auroc")] = ev["accuracy"], ev["auroc"]
                    counts[base] = ev["n_original_test"] + ev["n_model_test"]
                    continue
                xm, xh = xm[np.isfinite(xm)], xh[np.isfinite(xh)]
                if not len(xm) or not len(xh):
                    res[base.format("accuracy")] = res[base.format("auroc")] = None
                    continue
                x = np.concatenate([xh, xm])
                y = np.concatenate([np.ones(len(xh), int), np.zeros(len(xm), int)])
                res[base.format("accuracy")] = float(np.mean(bl.predict_human(fit, x) == y))
                res[base.format("auroc")] = bl.auroc(y, bl.p_human(fit, x))
            else:
                xm, xh = xm[np.isfinite(xm)], xh[np.isfinite(xh)]
                y = np.concatenate([np.ones(len(xh), int), np.zeros(len(xm), int)])
                res[base.format("auroc")] = bl.auroc(y, np.concatenate([xh, xm])) if len(xm) and len(xh) else None
                if exact:
                    counts[base] = int(len(xm) + len(xh))
        return res

    # units: questions (a question's answers on both sides move together)
    codes: dict[str, int] = {}
    m_unit = np.array([codes.setdefault(input_id(r), len(codes)) for r in model], dtype=np.intp)
    h_unit = np.array([codes.setdefault(input_id(r), len(codes)) for r in human], dtype=np.intp)
    n_units = len(codes)
    m_members = [np.flatnonzero(m_unit == k) for k in range(n_units)]
    h_members = [np.flatnonzero(h_unit == k) for k in range(n_units)]
    point = evaluate(np.arange(len(model)), np.arange(len(human)), exact=True)
    keys = [k for k in point if point[k] is not None]

    def statistic(idx: np.ndarray) -> dict[str, Any]:
        mi = np.concatenate([m_members[k] for k in idx]) if len(idx) else np.zeros(0, np.intp)
        hi = np.concatenate([h_members[k] for k in idx]) if len(idx) else np.zeros(0, np.intp)
        return evaluate(mi.astype(np.intp), hi.astype(np.intp), exact=False)

    cis = aggregate_intervals(statistic, n_units, keys, n_resamples=n_resamples, seed=seed) if n_resamples >= 1 else {}
    for base, t, f, fit in specs:
        n = counts.get(base, 0)
        for what in (("accuracy", "auroc") if fit is not None else ("auroc",)):
            k = base.format(what)
            out[k] = point.get(k)
            out[f"{k}_ci95"] = cis.get(k)
            out[f"{k}_n"] = int(n)
    out[f"{gkey}_human"] = mean_or_none([h.get(gkey) for h in human])
    out.update(_stage2_on_test(baseline, model, human))
    return out


def _stage2_on_test(baseline: dict[str, Any], model: list[dict[str, Any]], human: list[dict[str, Any]]) -> dict[str, Any]:
    """The clusters of each table with upstream's test-side figures (min/mean |rho| on the pooled
    test answers, ``validates_in_test`` = min >= threshold) and the features whose test answers
    fail upstream's entry rule (``min_valid`` values, 2 distinct, on each side)."""
    import pandas as pd

    clusters, notes = {}, []
    for t, table in baseline["tables"].items():
        s2 = table.get("stage2")
        if not s2:
            continue
        mt = [r for r in model if bl.baseline_table(baseline, r.get("audio_path")) == t]
        ht = [r for r in human if bl.baseline_table(baseline, r.get("audio_path")) == t]
        feats = s2["features"]
        frames = [{f: bl.column(ht, f) for f in feats}, {f: bl.column(mt, f) for f in feats}]
        failing = [f for f in feats if f not in bl.usable_features(frames, [f], s2["min_valid"])]
        if failing:
            notes.append(f"{t}: {', '.join(failing)} fail upstream's test-side entry rule ({s2['min_valid']} values, 2 "
                         "distinct on each side); upstream would have clustered without them")
        test = pd.DataFrame({f: np.concatenate([frames[0][f], frames[1][f]]) for f in feats})
        norm = (test - pd.Series(s2["means"])[feats]) / pd.Series(s2["stds"])[feats]
        corr = bl.abs_spearman(norm) if len(test) else None
        rows = []
        for c in s2["clusters"]:
            pair = bl.pairwise_abs(corr, c["features"]) if corr is not None else np.array([])
            rows.append({"name": c["name"], "features": c["features"],
                         "explained_variance_ratio": c["explained_variance_ratio"],
                         "dev_min_abs_spearman": c["dev_min_abs_spearman"],
                         "test_min_abs_spearman": float(np.nanmin(pair)) if len(pair) else None,
                         "validates_in_test": True if len(c["features"]) == 1 else bool(
                             len(pair) and float(np.nanmin(pair)) >= s2["threshold_abs_rho"])})
        clusters[t] = rows
    out: dict[str, Any] = {"distributional_clusters": clusters}
    if notes:
        out["distributional_note"] = "; ".join(notes)
    return out
