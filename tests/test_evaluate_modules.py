"""evaluate modules keep their dimension objects (and models) per options; add_batch takes the
five required inputs; optional per-row columns are compute() keywords checked for length.
Real AMI stereo call (its question turn and MEO015's answer), tiny random VAP model."""

from __future__ import annotations

import pytest

from conftest import REPO, STEREO_DIALOGUE
from helpers import CONTEXT_END, QUESTION_END, make_clips


@pytest.fixture(scope="module")
def clips(tmp_path_factory, real_dir):
    from spear_metrics.turn_taking.vap import save_tiny_vap

    root = tmp_path_factory.mktemp("modules")
    q, a = make_clips(STEREO_DIALOGUE, root, answer_s=4.0)
    q2, late = make_clips(STEREO_DIALOGUE, root, pad_s=0.5, answer_s=4.0, name="in2")  # a second input file
    return {"q": [str(q), str(q2)], "answers": [str(a), str(late)], "vap": str(save_tiny_vap(root / "vap"))}


def _inputs(clips, i: int) -> dict:
    return dict(audio_path=[clips["q"][i]], answer_audio_path=[clips["answers"][i]], context_end_time=[CONTEXT_END],
                question_end_time=[QUESTION_END], answer_start_time=[[-0.02, 0.3][i]])


def _both(clips) -> dict:
    one, two = _inputs(clips, 0), _inputs(clips, 1)
    return {k: one[k] + two[k] for k in one}


def test_second_compute_loads_no_model_again(clips, monkeypatch):
    """Same options: the dimension object and its VAP model are reused (1 load for 2 calls);
    other options: a new dimension, one more load."""
    import evaluate

    import spear_metrics.core.models as models

    loads: list[str] = []
    real = models.resolve_model
    monkeypatch.setattr(models, "resolve_model", lambda ref, *a, **k: loads.append(str(ref)) or real(ref, *a, **k))
    m = evaluate.load(str(REPO / "spear_metrics" / "turn_taking"))
    tq = ["FEE016: ... a little L_C_D_ display?"] * 2
    r1 = m.compute(**_both(clips), transcript_question=tq, vap_model=clips["vap"])
    r2 = m.compute(**_both(clips), transcript_question=tq, vap_model=clips["vap"])
    assert loads == [clips["vap"]]
    assert r1["n_scored"] == 2 and r1["turn_taking_naturalness"] is not None
    assert r2["turn_taking_naturalness"] == r1["turn_taking_naturalness"]
    m.compute(**_both(clips), transcript_question=tq, vap_model=clips["vap"], vap_batch_size=1)
    assert loads == [clips["vap"]] * 2


def test_add_batch_with_the_five_inputs(clips):
    """add_batch() twice, then compute() with only keywords; the values equal one compute() call.
    An optional column of the wrong length, or a partial set of inputs, is refused."""
    import evaluate

    m = evaluate.load(str(REPO / "spear_metrics" / "interruptions"))
    whole = m.compute(**_both(clips))
    m.add_batch(**_inputs(clips, 0))
    m.add_batch(**_inputs(clips, 1))
    batched = m.compute(vad_time_resolution=1)
    assert batched["n_samples"] == 2 and batched["latency_ms"] == whole["latency_ms"]
    assert [r["latency_ms"] for r in batched["per_sample"]] == [r["latency_ms"] for r in whole["per_sample"]]
    # the second answer starts 0.5 s later in its file and 0.3 s after the question: a later onset
    assert batched["per_sample"][1]["latency_ms"] > batched["per_sample"][0]["latency_ms"]
    m.add_batch(**_inputs(clips, 0))
    m.add_batch(**_inputs(clips, 1))
    with pytest.raises(ValueError, match="transcript_answer has 1 values for 2 samples"):
        m.compute(transcript_answer=["MEO015: right"])
    with pytest.raises(ValueError, match="missing required input"):
        m.compute(audio_path=clips["q"])


def test_metric_space_form_computes(clips):
    """The metric Space's page (what each app.py launches) scores uploaded clips and reports a
    bad input as one line instead of a traceback."""
    import evaluate

    from spear_metrics.core.evaluate_glue import metric_space

    m = evaluate.load(str(REPO / "spear_metrics" / "interruptions"))
    demo = metric_space(m, readme=REPO / "spear_metrics" / "interruptions" / "README.md")
    (fn,) = [f.fn for f in demo.fns.values() if f.api_name == "compute"]
    r = fn(clips["q"][0], clips["answers"][0], CONTEXT_END, QUESTION_END, "-0.02", "", "", "{}")
    assert r["n_scored"] == 1 and r["latency_ms"] is not None
    bad = fn(clips["q"][0], clips["answers"][0], CONTEXT_END, QUESTION_END, "", "", "", "{\"vad_backend\": \"nope\"}")
    assert set(bad) == {"error"} and "vad_backend" in bad["error"] and "\n" not in bad["error"]
    assert fn(None, None, 0, 0, "", "", "", "{}") == {"error": "upload the input clip (stereo: both speakers) and the answer"}
