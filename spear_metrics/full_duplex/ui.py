"""Full-Duplex-Bench's pages: its tab of the leaderboard Space (:data:`SPACE_TAB`) and its
metric Space's input form (:func:`evaluate_form`), named by its descriptor (``BENCHMARK``)."""

from __future__ import annotations

from typing import Any, Callable

from spear_metrics.core.benchmark import SpaceTab

#: the leaderboard Space's Full-Duplex-Bench tab (:func:`spear_metrics.full_duplex.results.leaderboard_frame`)
SPACE_TAB = SpaceTab(
    intro="Full-Duplex-Bench v1.0 results datasets (`spearbench fdb score --task` + `push-results`): one row per "
          "task run, each key with its 95 % interval over samples (`tor`: take-over rate; latencies in s; "
          "`relevance` 0-5; `jsd` a distance). Published keys, meaning what FDB's own scripts compute.",
    none_line="No Full-Duplex-Bench results dataset loaded: pass one to --results (spearbench fdb score --task, "
              "then push-results --local-dir).",
    elem_id="fdb",
    table="spear_metrics.full_duplex.results:leaderboard_frame",
)


def evaluate_form(module: Any, options: Callable[[str], dict], one_line: Callable[[BaseException], str]):
    """The metric Space's form (inside the open ``gr.Blocks``): the task, ``input.wav``,
    ``output.wav``, the task's JSON file and optionally ``output.json`` -> ``compute()``;
    returns ``(inputs, fn)``."""
    import shutil
    import tempfile
    from pathlib import Path

    import gradio as gr

    from spear_datasets.sources.fdb import TASKS

    def run(task, input_wav, output_wav, task_json, output_json, options_text):
        if not (input_wav and output_wav and task_json):
            return {"error": "upload input.wav, output.wav and the task's JSON file"}
        try:
            with tempfile.TemporaryDirectory(prefix="spearbench-fdb-") as tmp:
                sample = Path(tmp) / "0"
                sample.mkdir()
                shutil.copy(input_wav, sample / "input.wav")
                shutil.copy(output_wav, sample / "output.wav")
                shutil.copy(task_json, sample / Path(task_json).name)
                if output_json:
                    shutil.copy(output_json, sample / "output.json")
                return module.compute(sample_dir=[str(sample)], task=task, **options(options_text))
        except Exception as e:
            return {"error": one_line(e)}

    with gr.Row():
        task = gr.Dropdown(list(TASKS), value="smooth_turn_taking", label="task")
        files = [gr.File(label=n, type="filepath") for n in
                 ("input.wav", "output.wav", "task JSON (e.g. turn_taking.json)", "output.json (optional)")]
    opts = gr.Textbox(label="options (JSON object)", value="{\"bootstrap\": 0}")
    return [task, *files, opts], run
