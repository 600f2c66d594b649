"""What the thin ``evaluate`` modules share: their ``MetricInfo`` and their ``_compute``.

Every module requires exactly the SPEAR timing columns as inputs (``audio_path``,
``answer_audio_path``, ``context_end_time``, ``question_end_time``, ``answer_start_time``;
absolute paths or paths relative to the working directory / ``base_dir``), given to
``compute()`` or collected with ``add_batch()``; any other metadata column (``speakers``,
``transcript_question``, ``transcript_answer``...) and the dimension's options are optional
keyword arguments of ``compute()`` (per-row columns checked for length).

A module keeps its dimension objects, and the models they loaded, between ``compute()`` calls
with the same options (keyed by them, as ``evaluate``'s ``bertscore`` keeps its scorer).
"""

from __future__ import annotations

from typing import Any

from spear_metrics.core.registry import dimension_class
from spear_metrics.core.vad import DEFAULT_BACKEND as DEFAULT_VAD_BACKEND  # the evaluate modules name it through glue

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
    bootstrap (int, optional): resamples behind each ``<key>_ci95`` (default 1000; 0 = none); seed (int, optional).
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


def options_key(options: dict[str, Any]) -> str:
    """A stable key of a ``compute()`` call's dimension options: sorted names with the ``repr``
    of each value (an object option, e.g. a judge, counts by its ``repr``: by identity)."""
    return repr(sorted((str(k), repr(v)) for k, v in options.items()))


def spear_compute(dimension: str, inputs: dict[str, list], kwargs: dict[str, Any],
                  cache: dict[str, list] | None = None) -> dict[str, Any]:
    """Run one dimension on the evaluate inputs; optional metadata columns come from ``kwargs``.

    Args:
        cache: options key (:func:`options_key`) -> the dimension objects built for those
            options; reused when present, filled when not (the module's own dict).

    Raises:
        ValueError: an optional column whose length is not the number of samples.
    """
    from spear_metrics.core.registry import load_dimensions
    from spear_metrics.core.scoring import score_columns

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
    from spear_metrics.core.stats import DEFAULT_RESAMPLES

    n_resamples = int(kwargs.pop("bootstrap", DEFAULT_RESAMPLES))
    seed = int(kwargs.pop("seed", 0))
    if cache is None:
        return score_columns(dimension, columns, base_dir=base_dir, batch_size=batch_size, **kwargs)
    key = options_key(kwargs)
    if key not in cache:
        cache[key] = load_dimensions([dimension], kwargs)  # unknown options refused here (one line)
    return score_columns(dimension, columns, base_dir=base_dir, batch_size=batch_size, n_resamples=n_resamples,
                         seed=seed, dimensions=cache[key])


def _metric_base():
    import evaluate

    class SpearMetric(evaluate.Metric):
        """Base of every SPEAR ``evaluate`` module: subclasses set ``dimension``,
        ``description`` and ``kwargs_description`` and nothing else.

        ``compute()`` takes the five SPEAR inputs (:data:`INPUT_COLUMNS`), or none of them after
        ``add_batch()`` calls that gave them; other metadata columns and the dimension's options
        are keyword arguments. The dimension objects (and their models) are kept per options.
        """

        dimension: str = ""
        description: str = ""
        kwargs_description: str = ""

        def _info(self):
            return spear_info(self, self.dimension, self.description, self.kwargs_description)

        def compute(self, **kwargs):
            """Score the samples (inputs as in the module description).

            Raises:
                ValueError: some of the five inputs given but not all, or none given and no
                    ``add_batch()`` before.
            """
            if any(kwargs.get(c) is not None for c in INPUT_COLUMNS) or getattr(self, "writer", None) is None:
                require_inputs(kwargs)
            return super().compute(**kwargs)

        def _compute(self, audio_path, answer_audio_path, context_end_time, question_end_time, answer_start_time, **kwargs):
            inputs = dict(audio_path=audio_path, answer_audio_path=answer_audio_path, context_end_time=context_end_time,
                          question_end_time=question_end_time, answer_start_time=answer_start_time)
            cache = self.__dict__.setdefault("_spear_dimensions", {})
            return spear_compute(self.dimension, inputs, kwargs, cache=cache)

    return SpearMetric


def __getattr__(name: str):
    # built on first use so that importing this module does not import ``evaluate``
    if name == "SpearMetric":
        cls = _metric_base()
        globals()["SpearMetric"] = cls
        return cls
    raise AttributeError(name)


def _card_body(readme: Any) -> str:
    """A metric card without its YAML header ("" when there is none)."""
    from pathlib import Path

    try:
        text = Path(readme).read_text(encoding="utf-8") if readme else ""
    except OSError:
        return ""
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        text = text[end + 5:] if end >= 0 else text
    return text


def module_file_name(module: Any) -> str:
    """The file name (no suffix) of an evaluate module's code: ``<name>`` for
    ``spear_metrics/<name>/<name>.py`` (``evaluate`` names a module after its class instead)."""
    import inspect
    from pathlib import Path

    try:
        return Path(inspect.getfile(type(module))).stem
    except (TypeError, OSError):
        return str(getattr(module, "name", "metric"))


def evaluate_form(name: str):
    """The metric-Space form builder of registered benchmark ``name``
    (:attr:`~spear_metrics.core.benchmark.Benchmark.evaluate_form`); ``None`` for a SPEAR
    dimension or a benchmark without one (the SPEAR form)."""
    from spear_metrics.core.registry import DIMENSIONS, benchmark, benchmark_names

    if name in DIMENSIONS or name not in benchmark_names():
        return None
    return benchmark(name).hook("evaluate_form")


def metric_space(module: Any, readme: Any = None):
    """The metric Space's page (gradio Blocks) for a loaded SPEAR evaluate ``module``: upload the
    input clip (stereo, both speakers) and the answer, give the times (seconds) and optional
    transcripts and options (JSON), get ``compute()``'s result as JSON (a failure as
    ``{"error": one line}``). The evaluate module of a registered benchmark
    (``spear_metrics/<name>/<name>.py``) gets its descriptor's form instead
    (:attr:`~spear_metrics.core.benchmark.Benchmark.evaluate_form`).

    ``evaluate.utils.launch_gradio_widget`` is not used: it calls gradio 3's ``gr.inputs``, gone
    since gradio 4. Each Space's ``app.py`` calls this and ``.launch()``.

    Args:
        readme: path of the metric card shown under the form (its YAML header dropped).
    """
    import json

    import gradio as gr

    from spear_metrics.core.records import one_line

    def options(text: str) -> dict[str, Any]:
        opts = json.loads(text) if text and text.strip() else {}
        if not isinstance(opts, dict):
            raise ValueError("options must be a JSON object, e.g. {\"vad_time_resolution\": 3}")
        return opts

    def run_spear(input_clip, answer, context_end, question_end, answer_start, transcript_question,
                  transcript_answer, options_text):
        if not input_clip or not answer:
            return {"error": "upload the input clip (stereo: both speakers) and the answer"}
        try:
            kw: dict[str, Any] = dict(
                audio_path=[input_clip], answer_audio_path=[answer], context_end_time=[float(context_end)],
                question_end_time=[float(question_end)],
                answer_start_time=[None if answer_start in (None, "") else float(answer_start)])
            for name, value in (("transcript_question", transcript_question), ("transcript_answer", transcript_answer)):
                if value and value.strip():
                    kw[name] = [value]
            return module.compute(**kw, **options(options_text))
        except Exception as e:  # the page shows the reason, never a traceback
            return {"error": one_line(e)}

    name = module_file_name(module)
    form = evaluate_form(name)
    with gr.Blocks(title=f"SPEARBench metric: {name}") as demo:
        gr.Markdown(f"# SPEARBench metric `{name}`")
        if form is not None:
            inputs, fn = form(module, options, one_line)
        else:
            with gr.Row():
                clip = gr.Audio(label="input clip (context + question, stereo: both speakers)", type="filepath")
                ans = gr.Audio(label="answer", type="filepath")
            with gr.Row():
                ctx = gr.Number(label="context_end_time (s)", value=0.0)
                qend = gr.Number(label="question_end_time (s)", value=0.0)
                ast = gr.Textbox(label="answer_start_time (s; empty = at the question end)", value="")
            with gr.Row():
                tq = gr.Textbox(label="transcript_question (optional, 'SPK: text')")
                ta = gr.Textbox(label="transcript_answer (optional, 'SPK: text')")
            opts = gr.Textbox(label="options (JSON object)", value="{}")
            inputs, fn = [clip, ans, ctx, qend, ast, tq, ta, opts], run_spear
        btn = gr.Button("compute")
        out = gr.JSON(label="result")
        btn.click(fn, inputs, out, api_name="compute")
        body = _card_body(readme)
        if body:
            gr.Markdown(body)
    return demo
