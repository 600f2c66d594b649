"""Full-Duplex-Bench v1.0 (``full_duplex``): take-over rate, latency, backchannel, relevance."""

import datasets
import evaluate

try:  # the code lives in the spearbench package (an indented import: evaluate's own check would name the wrong package)
    from spear_metrics.core import evaluate_glue as glue
except ModuleNotFoundError as e:
    if not (e.name or "").startswith(("spear_metrics", "spear_datasets")):
        raise
    raise ImportError(
        "the SPEARBench metric 'full_duplex' needs the Python package spearbench: pip install 'spearbench[score]' "
        "(until it is on PyPI: pip install './spearbench-<version>-py3-none-any.whl[score]' with the wheel "
        "from the files of the Space spearbench/full_duplex)"
    ) from None

_DESCRIPTION = """\
Full-Duplex-Bench v1.0 (arXiv 2503.04721) scored by SPEARBench, values as the upstream scripts.
Each input is one sample folder of the upstream layout (input.wav, output.wav, output.json and
the task file). tor: take-over rate (share of samples where the model took the turn);
latency_s: first reply word minus end of the user's turn, seconds, TOR = 1 samples, negatives
as 0; relevance: LLM-judge 0-5 rating of the reply to an interruption (null without a judge);
backchannel_frequency: counted backchannel segments per second; jsd: Jensen-Shannon distance
of their timing to FDB's human distribution (null without one).
"""

_KWARGS_DESCRIPTION = """
Args:
    sample_dir (list of str): sample folders (<task_dir>/<id>/) of one task.
    task (str): pause_handling, smooth_turn_taking, backchannel or user_interruption.
    reference (str or dict, optional): backchannel: path of FDB's icc_gt_distribution.json or
        the loaded dict (id -> histogram); folder names are the ids.
    judge (Judge, optional): user_interruption: a spear_metrics.core.judge.Judge.
    asr (object, optional): ASR backend for folders without output.json.
    vad_backend (str, optional): "batched" (default), "sequence" or "jit" (spear_metrics.core.vad).
    compat (str, optional): None (default: the reply resampled to 16 kHz for the backchannel
        VAD) or "upstream" (its samples read as 16 kHz without resampling, as FDB's script).
    bootstrap (int, optional): resamples for the *_ci95 intervals (default 1000; 0 = none).
    seed (int, optional): bootstrap seed (default 0).
Returns:
    the summary keys of the task (tor, latency_s, relevance, backchannel_frequency, jsd, their
    *_ci95 intervals and *_n counts), n_samples, n_scored, n_failed, and per_sample (list of dicts).
Examples:
    >>> m = evaluate.load("spear_metrics/full_duplex")
    >>> r = m.compute(sample_dir=["fdb/smooth_turn_taking/1"], task="smooth_turn_taking")
    >>> r["tor"], round(r["latency_s"], 2)
    (1.0, 1.35)
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class FullDuplex(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=glue.CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"sample_dir": datasets.Value("string")}),
            reference_urls=["https://github.com/DanielLin94144/Full-Duplex-Bench", "https://arxiv.org/abs/2503.04721"],
        )

    def _compute(self, sample_dir, task, reference=None, judge=None, asr=None, vad_backend=None,
                 bootstrap=1000, seed=0, compat=None):
        from pathlib import Path

        from spear_datasets.sources.fdb import FDBSample, read_reference_distribution
        from spear_metrics.full_duplex.definition import FullDuplexScorer, score_samples, summarize

        # the scorer (and the models it loads) is kept between calls with the same options
        cache = self.__dict__.setdefault("_spear_scorers", {})
        key = glue.options_key(dict(task=task, reference=reference, judge=judge, asr=asr, vad_backend=vad_backend,
                                    compat=compat))
        if key not in cache:
            if isinstance(reference, (str, Path)):
                reference = read_reference_distribution(reference)
            cache[key] = FullDuplexScorer(task=task, reference=reference, judge=judge, asr=asr, compat=compat,
                                          vad_backend=vad_backend or glue.DEFAULT_VAD_BACKEND)
        scorer = cache[key]
        reference = scorer.reference
        samples = [FDBSample(id=Path(d).name, task=task, dir=Path(d)) for d in sample_dir]
        results = score_samples(samples, scorer)
        out = summarize(task, results, n_resamples=int(bootstrap), seed=int(seed), judge=judge,
                        reference_given=reference is not None, compat=compat)
        out["per_sample"] = [r.to_json() for r in results]
        return out
