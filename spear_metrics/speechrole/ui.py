"""SpeechRole-Eval's pages: its tab of the leaderboard Space (:data:`SPACE_TAB`) and its metric
Space's input form (:func:`evaluate_form`), named by its descriptor (``BENCHMARK``)."""

from __future__ import annotations

from typing import Any, Callable

from spear_metrics.core.benchmark import SpaceTab

#: the leaderboard Space's SpeechRole-Eval tab (:func:`spear_metrics.speechrole.results.leaderboard_frame`)
SPACE_TAB = SpaceTab(
    intro="SpeechRole-Eval results datasets (`spearbench speechrole score` + `push-results`): per aspect "
          "`100·ΣA/ΣB` (system's over reference speech's judge scores, 95 % interval over dialogues). "
          "A project key: the aggregation behind the published scores is not in public code.",
    none_line="No SpeechRole-Eval results dataset loaded: pass one to --results (spearbench speechrole score, "
              "then push-results --local-dir).",
    elem_id="speechrole",
    table="spear_metrics.speechrole.results:leaderboard_frame",
    controls=(("dialogues", ("overall", "single", "multi"), "overall"),),
)


def evaluate_form(module: Any, options: Callable[[str], dict], one_line: Callable[[BaseException], str]):
    """The metric Space's form (inside the open ``gr.Blocks``): judge result files
    (``<role>.json``, one role each) and the mode -> ``compute()``; returns ``(inputs, fn)``."""
    import shutil
    import tempfile
    from pathlib import Path

    import gradio as gr

    def run(files, mode, options_text):
        if not files:
            return {"error": "upload judge result files (<role>.json), one role each"}
        try:
            paths = [f if isinstance(f, str) else getattr(f, "name", str(f)) for f in files]
            with tempfile.TemporaryDirectory(prefix="spearbench-speechrole-") as tmp:
                named = []  # the uploads keep their names (the role): copied under them
                for i, f in enumerate(paths):
                    d = Path(tmp) / str(i)
                    d.mkdir()
                    named.append(str(shutil.copy(f, d / Path(f).name)))
                return module.compute(result_file=named, mode=[mode] * len(named), **options(options_text))
        except Exception as e:
            return {"error": one_line(e)}

    with gr.Row():
        mode = gr.Dropdown(["single", "multi"], value="single", label="mode")
        files = gr.File(label="judge result files (<role>.json, one role each)", file_count="multiple",
                        type="filepath")
    opts = gr.Textbox(label="options (JSON object)", value="{\"bootstrap\": 1000}")
    return [files, mode, opts], run
