"""A researcher's first hour: every command says what to do next, a rerun says it resumed,
console tables fit 120 columns, paths print without a double slash, ``--list-agents`` reads as
plain text, the demo's data is accepted by ``build-dataset``, ``publish`` warns about what it
would publish, and the Space says so when ``--results`` names a folder of results datasets.

Samples are cut with the selection protocol from the real telephone call in the fixtures
(pyannote's sample.wav + RTTM + STM: 2 question/answer exchanges); the answers are the human
ones replayed by the built-in ``fixed-delay`` agent (no model), scored on ``interruptions``.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from spear_metrics.cli import main
from spear_metrics.commands import runnable

WIDTH = 120
#: how printed commands call spearbench here (its path when the environment is not activated)
SPEARBENCH = runnable("spearbench")


@pytest.fixture(scope="module")
def data(real_dir, tmp_path_factory):
    from spear_metrics.commands.demo import build_demo_data

    root = tmp_path_factory.mktemp("first_hour")
    human = build_demo_data(real_dir / "pyannote-audio__sample.wav", real_dir / "pyannote-audio__sample.rttm",
                            real_dir / "pyannote-audio__sample.stm", root / "data")
    return {"root": root, "human": human}


def _commands(out: str) -> list[str]:
    """The command lines printed under ``next:`` (two-space indent)."""
    return [line.strip() for line in out.splitlines() if line.startswith("  ") and not line.startswith("   ")]


def test_infer_then_score_print_next_steps_and_resume(data, capsys):
    root, human = data["root"], data["human"]
    out = root / "fixed"
    args = ["infer", "--agent", "fixed-delay", "-a", "delay=0.7", "--data", str(human), "--out", f"{out}/", "--no-progress"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "//" not in printed and f"-> {out / 'metadata.csv'}" in printed and "resumed" not in printed
    score_cmd = next(c for c in _commands(printed) if c.startswith(f"{SPEARBENCH} score"))
    assert f"--metadata {out / 'metadata.csv'}" in score_cmd
    assert main(args) == 0  # a rerun answers nothing again, and says so
    assert "resumed: 2 of 2 rows already done" in capsys.readouterr().out

    results = root / "fixed_results"
    sargs = ["score", "--metadata", str(out / "metadata.csv"), "--metrics", "interruptions", "--out", f"{results}/",
             "--no-progress"]
    assert main(sargs) == 0
    printed = capsys.readouterr().out
    assert "//" not in printed and f"wrote {results / 'summary.json'} and per_sample.jsonl" in printed
    cmds = _commands(printed)
    assert any(c.startswith(f"{SPEARBENCH} report {results} --human HUMAN_RESULTS --out {results / 'report'}") for c in cmds)
    assert any(c.startswith(f"{SPEARBENCH} push-results {results} --local-dir") and f"--metadata {out / 'metadata.csv'}" in c
               for c in cmds)
    assert all(len(line) <= WIDTH for line in printed.splitlines() if line not in [f"  {c}" for c in cmds])
    # the dataset's own (human) answers: no report against themselves
    hres = root / "human_results"
    assert main(["score", "--metadata", str(human), "--metrics", "interruptions", "--out", str(hres), "--no-progress"]) == 0
    hcmds = _commands(capsys.readouterr().out)
    assert f"{SPEARBENCH} report {hres} --out {hres / 'report'}" in hcmds and not any("--human" in c for c in hcmds)
    assert main(sargs) == 0
    resumed = capsys.readouterr().out
    assert re.search(r"resumed: 2 of 2 rows already done \(kept in \S+\.work", resumed)
    # report: the publish hint names the metadata CSV the run scored (recorded by score) and the
    # agent that answered it (infer's run_info.json beside that CSV) as the model name
    assert main(["report", str(results), "--out", str(results / "report"), "--bootstrap", "200"]) == 0
    rcmds = _commands(capsys.readouterr().out)
    push = next(c for c in rcmds if c.startswith(f"{SPEARBENCH} push-results {results} "))
    assert f"--metadata {out / 'metadata.csv'}" in push and "METADATA.csv" not in push
    assert "--model-name fixed-delay" in push
    # every reason once: the fixed-delay replay has onsets, so nothing is null here; the
    # half-duplex case (no answer_start_time) names its cause instead of "no scored row has a value"
    from spear_metrics.commands.score import print_summary

    print_summary({"interrupted_time_ms": None, "interrupted_time_ms_n": 0, "interruptions_%": None,
                   "interruptions_%_n": 0, "latency_ms": 1.0, "metrics": ["interruptions"]})
    text = capsys.readouterr().out
    assert re.search(r"interrupted_time_ms\s+- \(note 1\)", text) and re.search(r"interruptions_%\s+- \(note 1\)", text)
    assert text.count("no row has an answer_start_time") == 1


def test_infer_says_when_answers_carry_no_text(data, capsys):
    """The README's custom agent returns ``text=None``: ``infer`` says what that does to WER."""
    out = data["root"] / "silent"
    assert main(["infer", "--agent", "silence", "--data", str(data["human"]), "--out", str(out), "--no-progress"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "note: 2 of 2 answers came with no text (AgentAnswer.text None)" in printed
    assert "speech_quality has no reference to compute WER/CER against" in printed


def test_no_reference_note_names_the_cause():
    """An agent that returns no text leaves transcript_answer empty: every WER/CER key is null
    and its note says that, not "see WER_%_<asr>" (itself null)."""
    import numpy as np

    from spear_metrics.core.registry import load_dimension

    d = load_dimension("speech_quality")
    label = d.asrs[0][0]
    row = {"reference_empty": True, f"asr_text_{label}": "hello", **{f"{b}_{label}": None for b in
           ("WER_%", "CER_%", "WER_norm_%", "CER_norm_%")}}
    out = d.aggregate([None, None], [row, row])
    assert out["no_reference_%"] == 100.0 and out["WER_norm_%"] is None
    assert out["WER_note"].startswith("no reference: transcript_answer is empty") and "WER_%_<asr>" not in out["WER_note"]
    assert out["WER_note"] == out["CER_note"]
    # with one row that has a reference, the note is the ASR one again, and the array path agrees
    mixed = [row, {**row, "reference_empty": False, f"WER_norm_%_{label}": 10.0}]
    agg = d.aggregate([None, None], mixed)
    assert "need SPEAR's ASR systems" in agg["WER_note"]
    f = d.resampled_aggregate([None, None], mixed)
    for idx in ([0, 0], [0, 1], [1, 1]):
        assert f(np.array(idx)) == d.aggregate([None, None], [mixed[i] for i in idx])
    from spear_metrics.commands import null_reason

    assert null_reason(out, "WER_%_" + label, "speech_quality") == out["WER_note"]


def test_console_helpers():
    from spear_metrics.commands import numbered_notes, shown_path, text_table
    from spear_metrics.commands.demo import leaderboard_text

    assert shown_path("results/", "summary.json") == "results/summary.json"
    assert shown_path("results//x/", "<run>", "summary.json") == "results/x/<run>/summary.json"
    # key + 3 columns of 30 characters in 60: one value column a block (3 + 2 + 30 + 2 + 30 = 67 > 60), key repeated
    text = text_table(["key", "a" * 30, "b" * 30, "c" * 30], [["k1", "1", "2", "3"]], width=60)
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines) and lines.count("") == 2
    assert [line.split()[0] for line in lines if line] == ["key", "k1"] * 3
    assert numbered_notes(["x", "y", "x"]) == (["(note 1)", "(note 2)", "(note 1)"], ["note 1: x", "note 2: y"])
    # the demo's table: 18 keys x 4 systems within 120 columns; a key null for every system for one
    # reason carries the reference once, beside the key
    keys = ["model", "UTMOS", "WER_%", "CER_%", "latency_ms", "interrupted_time_ms", "explainable_normalized_f0_std_avg",
            "WER_norm_%", "DNSMOS_OVRL", "no_speech_answers_%", "n_samples"]
    base = {k: 1.0 for k in keys[1:]} | {"UTMOS": None, "UTMOS_note": "UTMOS not computed", "WER_%": None,
                                         "CER_%": None, "WER_note": "need SPEAR's ASR", "CER_note": "need SPEAR's ASR"}
    summaries = {n: dict(base) for n in ("human", "fixed-delay-0.7s", "barge-in-1s")}
    summaries["cascade"] = dict(base, interrupted_time_ms=None, interrupted_time_ms_n=0)
    board = leaderboard_text(keys, summaries)
    assert max(len(line) for line in board.splitlines()) <= WIDTH
    assert re.search(r"^UTMOS \(note 1\)\s+-\s+-\s+-\s+-$", board, re.M)
    assert re.search(r"^interrupted_time_ms\s+1\.000\s+1\.000\s+1\.000\s+- \(note 3\)$", board, re.M)
    assert board.count("note 2: need SPEAR's ASR") == 1 and "no row has an answer_start_time" in board


def test_demo_ranking_prints_each_reason_once(capsys):
    from spear_metrics.commands.demo import _print_ranking
    from spear_metrics.core.summary import null_reason

    why = "not computed: 2 model and 2 human answers and 1 conversation; " + "needs more answers " * 8
    none = {"human_likeness_auroc": None, "human_likeness_auroc_n": 4, "human_likeness_note": why}
    # the reason lives under human_likeness_note, not human_likeness_auroc_note
    assert null_reason(none, "human_likeness_auroc") == why
    _print_ranking({"human": {}, "a": none, "b": dict(none)})
    assert capsys.readouterr().out == ""  # no system ranked: the leaderboard's note says why, once
    _print_ranking({"human": {}, "a": none, "b": dict(none), "c": {"human_likeness_auroc": 0.61,
                                                                  "human_likeness_auroc_ci95": [0.5, 0.7],
                                                                  "human_likeness_auroc_n": 40}})
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[2].split() == ["c", "0.610", "[0.500,", "0.700]", "n=40"]  # ranked first
    assert out.count("(reason 1)") == 2 and out.count("not computed: 2 model") == 1
    assert all(len(line) <= WIDTH for line in lines)


def test_list_agents_is_plain_text(capsys):
    assert main(["infer", "--list-agents"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out and ":func:" not in out and ":class:" not in out
    assert "fixed-delay: The human answer replayed delay seconds after the question ends (answer_start_time = delay)." in out
    assert "-a asr_backend" not in out  # takes an object: for tests and notebooks, named as such
    assert "(Python only, not an -a option: asr_backend" in out
    assert all(len(line) <= WIDTH for line in out.splitlines())


def test_demo_data_builds_a_dataset_and_publish_warns(data, capsys):
    from spear_metrics.commands.demo import write_spear_layout
    from spear_metrics.publish import dataset_warnings

    root = data["root"]
    assert main(["build-dataset", "--source", str(data["human"].parent), "--out", str(root / "x"), "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())  # folded at 120 columns
    assert "is a metadata CSV, not the SPEAR layout" in err and "DEMO_OUT/spear_data" in err
    src = write_spear_layout(data["human"], root / "spear_data")
    assert (src / "inputs" / "test" / "naturalistic" / "metadata.csv").is_file()
    hub = root / "hub"
    assert main(["build-dataset", "--source", str(src), "--out", str(hub), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "naturalistic  test  2 rows" in out and "licence unknown" in out
    # "load it" calls this environment's python (the bare `python` of an unactivated .venv may be
    # another one, or none), and its code loads the dataset
    load = shlex.split(next(c for c in _commands(out) if " -c " in c))
    assert load[:2] == [runnable("python"), "-c"]
    exec(load[2], {})
    assert "num_rows: 2" in capsys.readouterr().out
    assert any(c.startswith(f"{SPEARBENCH} publish --dataset {hub}") for c in _commands(out))
    warnings = dataset_warnings(hub, "spearbench/seamless_2t_2s_questions")
    assert len(warnings) == 2 and "license: unknown" in warnings[0]
    assert "official SPEAR dataset" in warnings[1] and "2 rows" in warnings[1]
    assert dataset_warnings(hub, "me/my_call") == warnings[:1]
    # the command warns once the folders are written (a bad argument stays one line), then says how to upload
    wheel = root / "spearbench-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x05\x06" + b"\x00" * 18)  # an empty zip: bundled, never installed here
    assert main(["publish", "--dataset", str(hub), "--wheel", str(wheel), "--metrics", "interruptions",
                 "--dry-run", str(root / "dry")]) == 0
    cap = capsys.readouterr()
    err = " ".join(cap.err.split())
    assert "spearbench publish: warning: the dataset card states no licence" in err
    # the demo's clips are not SPEAR's split: published under the custom-data name, never the benchmark's
    assert "official SPEAR dataset" not in err
    assert (root / "dry" / "datasets" / "spearbench-custom-data").exists() or "spearbench-custom-data" in " ".join(cap.out.split())
    assert any(c.startswith(f"{SPEARBENCH} publish --dataset {hub} --namespace spearbench") for c in _commands(cap.out))


def test_space_expands_a_parent_folder_and_warns(data, tmp_path, monkeypatch, capsys):
    """``--results DEMO_OUT/datasets`` (a folder of results datasets) loads each, with a warning
    on the console; a folder of raw RESULTS folders is told what to make of them."""
    import importlib.util

    from spear_metrics.core.scoring import run_score
    from spear_metrics.results import expand_results_folders, write_results_dataset

    parent = tmp_path / "datasets"
    raw = tmp_path / "results"
    for name in ("human", "other"):
        run_score(data["human"], "interruptions", raw / name, progress=False, n_resamples=50)
        write_results_dataset(raw / name, parent / name, model_name=name, metadata=data["human"])
    sources, messages = expand_results_folders([str(parent), str(raw)])
    assert sources == [str(parent / "human"), str(parent / "other"), str(raw)]
    assert messages[0].startswith(f"--results {parent} is a folder of 2 results datasets, not one: loading each")
    assert f"--results {parent / 'human'} {parent / 'other'}" in messages[0]
    assert "holds scored RESULTS folders (human, other)" in messages[1] and "push-results" in messages[1]
    # what the page alone would say (it is opened later, if at all) is said on the console at start: a scored
    # RESULTS folder, a folder that is not there, a name that is not a folder here (read as a Hub id)
    gone = tmp_path / "gone"
    with monkeypatch.context() as m:
        m.chdir(tmp_path)  # where no demo_out/ is
        sources, messages = expand_results_folders([str(raw / "human"), str(gone), "demo_out/datasets"])
    assert sources == [str(raw / "human"), str(gone), "demo_out/datasets"]
    assert messages == [f"--results {raw / 'human'} is a scored RESULTS folder, not a results dataset: write one with "
                        f"`spearbench push-results {raw / 'human'} --local-dir DIR --model-name NAME` and pass DIR",
                        f"--results {gone}: no such folder",
                        "--results demo_out/datasets is not a folder here: reading it as the Hub dataset demo_out/datasets"]

    spec = importlib.util.spec_from_file_location("space_app_next", Path(__file__).parents[1] / "space" / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    started = {}

    class Stub:
        def launch(self):
            started["launched"] = True

    def build_app(sources):
        started["sources"] = sources
        return Stub()

    monkeypatch.setattr(app, "build_app", build_app)
    monkeypatch.delenv("SPEARBENCH_RESULTS", raising=False)
    app.main(["--results", str(parent)])
    assert started["sources"][-2:] == [str(parent / "human"), str(parent / "other")] and started["launched"]
    assert "warning: --results" in capsys.readouterr().err
    # the labels the page shows for them
    from spear_metrics.results import SourcePolicy

    assert SourcePolicy(started["sources"][-2:]).start_labels == ["local:human", "local:other"]
    assert json.loads((parent / "human" / "summary.json").read_text())["latency_ms_n"] == 2


def test_speechrole_summarize_names_a_and_b_and_ends_with_next(tmp_path, capsys):
    from conftest import FIXTURES

    src = FIXTURES / "speechrole" / "ali_cloud"
    if not src.is_dir():
        pytest.fail(f"SpeechRole fixtures not found at {src} (tests/fixtures is incomplete)")
    out = str(tmp_path / "sr") + "/"  # a trailing slash never becomes '//' in what is printed
    assert main(["speechrole", "summarize", "--results", str(src), "--out", out]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("A = the system's answers, B = the reference role speech")
    assert lines[-2].startswith("next: ") and lines[-1].startswith(f"  {SPEARBENCH} speechrole score ")
    assert not any("//" in line for line in lines)
    assert all(len(line) <= WIDTH for line in lines if not line.startswith(f"  {SPEARBENCH}"))


def test_push_results_space_hint_names_the_benchmark_tab_and_reads_summary_within_its_limit(tmp_path):
    """The hint after push-results: a Dynamic-SUPERB run's own tab; a SPEAR run (no benchmark
    named), an unreadable summary and a summary.json that is a FIFO (whose plain read would block
    for ever) get the leaderboard's hint: the summary is read by the bounded reader."""
    import os

    from spear_metrics.commands.push_results import _space_hint

    ds, spear, fifo = tmp_path / "ds", tmp_path / "spear", tmp_path / "fifo"
    for d in (ds, spear, fifo):
        d.mkdir()
    (ds / "summary.json").write_text(json.dumps({"benchmark": "dynamic_superb"}))
    (spear / "summary.json").write_text(json.dumps({"metrics": ["speech_quality"]}))
    os.mkfifo(fifo / "summary.json")
    assert _space_hint(str(ds)).startswith("its ") and _space_hint(str(ds)).endswith(" tab")
    leaderboard = "add the human answers' results dataset for the plots"
    assert _space_hint(str(spear)) == leaderboard
    assert _space_hint(str(fifo)) == leaderboard
    assert _space_hint(str(tmp_path / "missing")) == leaderboard
