"""Test helper: SPEAR samples cut from the real stereo call, scored, and written as results datasets.

The clip ``DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav`` (AMI
meeting, channel 0 = FEE016, channel 1 = MEO015; turns in the .json beside it) holds one question
turn of FEE016 (0.78-15.48 s) answered by MEO015 from 15.46 s. Each sample's input clip is the
first 15.48 s (both speakers); the human answer is MEO015's channel from 15.46 to 24.7 s. A
simulated "model" answers with the same speech placed differently (later, or interrupting).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from conftest import STEREO_DIALOGUE

SR = 16000
Q_END = 15.48
CTX_END = 8.74


def _turns() -> dict:
    return json.loads(STEREO_DIALOGUE.with_suffix(".json").read_text())["turns"]


def make_samples(root: Path) -> dict[str, Path]:
    """Write input clips, human and model answers and two metadata CSVs under ``root``.

    Returns ``{"human": human_metadata.csv, "model": model_metadata.csv}``. Rows: one clip in
    ``improvised/``, two in ``naturalistic/`` (copies of the same real cut, distinct files).
    """
    from spear_datasets.audio import load_audio, write_wav
    from spear_datasets.schema import SpearRow, write_metadata

    x = load_audio(STEREO_DIALOGUE)
    turns = _turns()
    q_text = " ".join(f"{t['speaker']}: {t['text']}" for t in turns if t["start"] < Q_END and t["end"] <= Q_END)
    a_text = next(f"{t['speaker']}: {t['text']}" for t in turns if t["speaker"] == "MEO015" and t["start"] >= 15.0)
    q = x[:, : int(Q_END * SR)]
    ans = x[1, int(15.46 * SR): int(24.7 * SR)]
    inputs = ["data/improvised/audios/c1_FEE016_MEO015_0.wav", "data/naturalistic/audios/c1_FEE016_MEO015_1.wav",
              "data/naturalistic/audios/c1_FEE016_MEO015_2.wav"]
    for p in inputs:
        write_wav(root / p, q, SR)
    write_wav(root / "human/ans.wav", np.stack([ans, ans]), SR)
    late = np.concatenate([np.zeros(int(0.7 * SR), np.float32), ans])
    write_wav(root / "model/ans_late.wav", np.stack([late, late]), SR)
    write_wav(root / "model/ans.wav", np.stack([ans, ans]), SR)
    human_rows, model_rows = [], []
    model_answers = [("model/ans_late.wav", 0.3), ("model/ans.wav", -1.0), ("model/ans_late.wav", 0.0)]
    for p, (m_ans, m_start) in zip(inputs, model_answers):
        common = dict(audio_path=p, context_end_time=CTX_END, question_end_time=Q_END, answer_duration=None,
                      speakers="FEE016|MEO015", conversation_id="AMI_seriously", transcript_question=q_text)
        human_rows.append(SpearRow(answer_audio_path="human/ans.wav", transcript_answer=a_text,
                                   answer_start_time=-0.02, **common))
        model_rows.append(SpearRow(answer_audio_path=m_ans, transcript_answer="MODEL: right, a menu on the remote.",
                                   answer_start_time=m_start, **common))
    out = {"human": root / "human_metadata.csv", "model": root / "model_metadata.csv"}
    write_metadata(out["human"], human_rows)
    model_rows.append(SpearRow(audio_path=inputs[0], answer_audio_path="model/missing.wav", context_end_time=CTX_END,
                               question_end_time=Q_END, speakers="FEE016|MEO015", conversation_id="AMI_seriously",
                               transcript_question=q_text, answer_start_time=None))  # a failed row (duplicate input)
    write_metadata(out["model"], model_rows)
    return out


def score_and_write(root: Path) -> dict[str, Path]:
    """Score both runs (interruptions, explainable_features), write the model's report against the
    human answers into its run (``RESULTS_model/report``) and write their results datasets.

    Returns ``{"human_run", "model_run", "human_ds", "model_ds"}`` folders.
    """
    from spear_metrics.core.scoring import run_score
    from spear_metrics.reports.html import build_report
    from spear_metrics.reports.runs import load_run
    from spear_metrics.results import write_results_dataset

    md = make_samples(root)
    out = {}
    for who in ("human", "model"):
        run = root / f"RESULTS_{who}"
        run_score(md[who], "interruptions,explainable_features", run, progress=False, n_resamples=200)
        if who == "model":
            build_report(load_run(run, name="toy-delayed-model"), run / "report", human=load_run(out["human_run"]),
                         n_resamples=200)
        out[f"{who}_run"] = run
        out[f"{who}_ds"] = write_results_dataset(
            run, root / f"ds_{who}", model_name="human" if who == "human" else "toy-delayed-model",
            inference_mode=None if who == "human" else "Full-duplex", open_weights=None if who == "human" else True,
            metadata=md[who], with_audio=True, with_inputs=(who == "human"))
    return out
