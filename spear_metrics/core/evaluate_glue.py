"""What the thin ``evaluate`` modules share: their ``MetricInfo`` and their ``_compute``.

Every module requires exactly the SPEAR timing columns as inputs (``audio_path``,
``answer_audio_path``, ``context_end_time``, ``question_end_time``, ``answer_start_time``;
absolute paths or paths relative to the working directory / ``base_dir``); any other
metadata column (``speakers``, ``transcript_question``, ``transcript_answer``...) and the
dimension's options are optional keyword arguments of ``compute()``.
"""

from __future__ import annotations

from typing import Any

from spear_metrics.core.registry import dimension_class

#: the inputs every SPEAR evaluate module declares as ``Features``
INPUT_COLUMNS = ("audio_path", "answer_audio_path", "context_end_time", "question_end_time", "answer_start_time")
#: metadata columns accepted as optional keyword lists
OPTIONAL_COLUMNS = ("answer_duration", "speakers", "conversation_id", "transcript_question", "transcript_answer")

#: The ``Args:`` head every module's inputs description starts with (the five inputs + metadata).
INPUTS_DOC = """
Args:
    audio_path (list of str): stereo 16 kHz input clips (context + question).
    answer_audio_path (list of str): answer audio, any rate or channel count.
    context_end_time (list of float): seconds, where the question starts in the clip.
    question_end_time (list of float): seconds, where the question ends.
    answer_start_time (list of float or None): answer onset minus question end, seconds
        (negative = overlap; None = placed at the question end).
    speakers, transcript_question, transcript_answer (list of str, optional): metadata columns.
    base_dir (str, optional): folder relative paths resolve against (default: working directory).
"""

CITATION = """\
@misc{spearbench,
  title  = {SPEARBench: how human-like is a spoken dialogue model in conversation},
  author = {Thebaud, Thomas and others},
  year   = {2026},
  note   = {https://github.com/thomasthebaud/SPEAR-benchmark-code}
}
"""


def spear_info(module, dimension: str, description: str, kwargs_description: str):
    """``evaluate.MetricInfo`` for a SPEAR dimension: the input features and the card texts."""
    import datasets
    import evaluate

    cls = dimension_class(dimension)
    keys = "; ".join(f"{k.name} ({k.unit}, {k.better.replace('_', ' ')} is better)" for k in cls.keys)
    if cls.option_schema:  # the declared options, so that help(module) lists them
        kwargs_description += "\nOptions (keyword arguments of compute(); any other key raises OptionError):\n" + "".join(
            f"    {o.describe()}\n" for o in cls.option_schema)
    return evaluate.MetricInfo(
        module_type="metric",
        description=f"{description}\n\nReturns: {keys}; plus per_sample, n_samples, n_scored, n_failed.",
        citation=CITATION,
        inputs_description=kwargs_description,
        features=datasets.Features(
            {
                "audio_path": datasets.Value("string"),
                "answer_audio_path": datasets.Value("string"),
                "context_end_time": datasets.Value("float64"),
                "question_end_time": datasets.Value("float64"),
                "answer_start_time": datasets.Value("float64"),
            }
        ),
        reference_urls=["https://github.com/thomasthebaud/SPEAR-benchmark-code"],
    )


def require_inputs(kwargs: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the SPEAR inputs missing from a ``compute()`` call
    (``evaluate`` itself fails with an opaque ``TypeError`` there)."""
    missing = [c for c in INPUT_COLUMNS if kwargs.get(c) is None]
    if missing:
        raise ValueError(f"missing required input(s): {', '.join(missing)} (required: {', '.join(INPUT_COLUMNS)})")


def spear_compute(dimension: str, inputs: dict[str, list], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Run one dimension on the evaluate inputs; optional metadata columns come from ``kwargs``."""
    from spear_metrics.core.runner import score_columns

    columns = {k: list(inputs[k]) for k in INPUT_COLUMNS}
    n = len(columns["audio_path"])
    for c in OPTIONAL_COLUMNS:
        if c in kwargs:
            values = list(kwargs.pop(c))
            if len(values) != n:
                raise ValueError(f"{c} has {len(values)} values for {n} samples")
            columns[c] = values
    base_dir = kwargs.pop("base_dir", ".")
    batch_size = kwargs.pop("batch_size", 16)  # checked (>= 1) by score_columns
    return score_columns(dimension, columns, base_dir=base_dir, batch_size=batch_size, **kwargs)


def _metric_base():
    import evaluate

    class SpearMetric(evaluate.Metric):
        """Base of every SPEAR ``evaluate`` module: subclasses set ``dimension``,
        ``description`` and ``kwargs_description`` and nothing else.

        ``compute()`` requires the five SPEAR inputs (:data:`INPUT_COLUMNS`); other metadata
        columns and the dimension's options are keyword arguments.
        """

        dimension: str = ""
        description: str = ""
        kwargs_description: str = ""

        def _info(self):
            return spear_info(self, self.dimension, self.description, self.kwargs_description)

        def compute(self, **kwargs):
            """Score the samples (inputs as in the module description); missing inputs raise ``ValueError``."""
            require_inputs(kwargs)
            return super().compute(**kwargs)

        def _compute(self, audio_path, answer_audio_path, context_end_time, question_end_time, answer_start_time, **kwargs):
            inputs = dict(audio_path=audio_path, answer_audio_path=answer_audio_path, context_end_time=context_end_time,
                          question_end_time=question_end_time, answer_start_time=answer_start_time)
            return spear_compute(self.dimension, inputs, kwargs)

    return SpearMetric


def __getattr__(name: str):
    # built on first use so that importing this module does not import ``evaluate``
    if name == "SpearMetric":
        cls = _metric_base()
        globals()["SpearMetric"] = cls
        return cls
    raise AttributeError(name)
