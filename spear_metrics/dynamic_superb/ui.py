"""Dynamic-SUPERB's pages: its tab of the leaderboard Space (:data:`SPACE_TAB`) and its metric
Space's input form (:func:`evaluate_form`), named by its descriptor (``BENCHMARK``)."""

from __future__ import annotations

from typing import Any, Callable

from spear_metrics.core.benchmark import SpaceTab

#: the leaderboard Space's Dynamic-SUPERB tab (:func:`spear_metrics.dynamic_superb.results.leaderboard_frame`)
SPACE_TAB = SpaceTab(
    intro="Dynamic-SUPERB Phase-2 results datasets (`spearbench dsuperb score` + `push-results`): one "
          "column per task (SPEARBench's project key: `judge_accuracy`, `WER`, `BLEU`, `pearson_r`...; "
          "upstream's `llm_classification`, `word_error_rate`, `phoneme_error_rate` and `pos_estimation` beside them, "
          "by their public per-row rules; the other upstream bodies are not public), then each "
          "key's mean over tasks.",
    none_line="No Dynamic-SUPERB results dataset loaded: pass one to --results (spearbench dsuperb score, "
              "then push-results --local-dir).",
    elem_id="dsuperb",
    table="spear_metrics.dynamic_superb.results:leaderboard_frame",
)


def evaluate_form(module: Any, options: Callable[[str], dict], one_line: Callable[[BaseException], str]):
    """The metric Space's form (inside the open ``gr.Blocks``): the task instance and one answer,
    label and instruction per line -> ``compute()`` (judged tasks need a judge object: Python or
    the CLI); returns ``(inputs, fn)``."""
    import gradio as gr

    def run(task, predictions, references, instructions, options_text):
        preds, refs, instr = (str(x or "").splitlines() for x in (predictions, references, instructions))
        if not preds or len(preds) != len(refs) or len(refs) != len(instr):
            return {"error": "give one answer, one label and one instruction per line (as many lines each)"}
        try:
            return module.compute(predictions=preds, references=refs, instructions=instr, task=task,
                                  **options(options_text))
        except Exception as e:
            return {"error": one_line(e)}

    task = gr.Textbox(label="task instance (e.g. SuperbASR_LibriSpeech-TestClean)",
                      value="SuperbASR_LibriSpeech-TestClean")
    with gr.Row():
        preds = gr.Textbox(label="model answers (one per line)", lines=6)
        refs = gr.Textbox(label="labels (one per line)", lines=6)
        instr = gr.Textbox(label="instructions (one per line)", lines=6)
    opts = gr.Textbox(label="options (JSON object)", value="{\"bootstrap\": 1000}")
    return [task, preds, refs, instr, opts], run
