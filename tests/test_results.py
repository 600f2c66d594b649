"""Results datasets (spear_metrics.results, ``spearbench push-results``) and the leaderboard logic
of the Space (spear_metrics/space/app.py), on real samples cut from the AMI stereo call and scored
by the real runner."""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _spear_samples import score_and_write  # noqa: E402

from spear_metrics.results import PROTOCOL, ResultsError, load_results, read_run  # noqa: E402
from spear_metrics.space import plots, samples, tables  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory, real_dir):
    """Two scored runs (human answers, a toy model placing the same speech later/earlier) and their datasets."""
    return score_and_write(tmp_path_factory.mktemp("spear"))


@pytest.fixture(scope="module")
def app():
    spec = importlib.util.spec_from_file_location("spear_space_app", REPO / "spear_metrics" / "space" / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _per_sample(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "per_sample.jsonl").read_text().splitlines() if line.strip()]


def test_local_dir_round_trip_with_datasets(built, tmp_path):
    """The --local-dir folder loads with datasets.load_dataset; values, nulls, audio bytes and card survive."""
    import datasets
    from huggingface_hub import DatasetCard

    # a private cache: datasets caches a local folder by its name, not its path (stale rows otherwise)
    ds = datasets.load_dataset(str(built["model_ds"]), cache_dir=str(tmp_path / "c"))["test"]
    src = _per_sample(built["model_run"])
    assert ds.num_rows == len(src) == 4
    rows = ds.cast_column("answer_audio", datasets.Audio(decode=False)).to_list()
    for got, exp in zip(rows, src):
        assert got["row"] == exp["row"] and got["status"] == exp["status"]
        assert got["latency_ms"] == exp["latency_ms"]  # None stays None (row 3 failed), never 0
    assert rows[3]["status"] == "failed" and rows[3]["latency_ms"] is None and rows[3]["interruption"] is None
    assert rows[3]["error"].startswith("duplicate of row 0")
    # the toy model's second answer starts 1 s before the question ends: it interrupts
    assert rows[1]["interruption"] is True and rows[1]["interrupted_time_ms"] > 0
    # audio embedded byte for byte; SPEAR metadata and subset carried
    root = built["model_ds"].parent
    assert rows[0]["answer_audio"]["bytes"] == (root / "model/ans_late.wav").read_bytes()
    assert rows[3]["answer_audio"] is None  # the missing file is not invented
    assert [r["subset"] for r in rows] == ["improvised", "naturalistic", "naturalistic", "improvised"]
    assert rows[0]["transcript_answer"].startswith("MODEL:") and rows[0]["answer_start_time"] == 0.3
    summary = json.loads((built["model_run"] / "summary.json").read_text())
    assert json.loads((built["model_ds"] / "summary.json").read_text()) == summary
    card = DatasetCard.load(built["model_ds"] / "README.md").data.to_dict()["spearbench"]
    assert card["model_name"] == "toy-delayed-model" and card["inference_mode"] == "Full-duplex"
    assert card["open_weights"] is True and card["protocol"] == PROTOCOL and card["split"] == "test"
    assert card["metric_versions"] == summary["metric_versions"] and card["models"] == summary["models"]
    # what was scored: 4 rows of a toy layout, not SPEAR's split: labelled custom data everywhere
    run_info = json.loads((built["model_run"] / "run_info.json").read_text())
    assert run_info["data"] == summary["data"] and summary["data"]["label"] == "custom data"
    assert summary["data"]["n_rows"] == 4 and len(summary["data"]["fingerprint"]) == 64
    assert card["data"]["label"] == "custom data" and card["data"]["fingerprint"] == summary["data"]["fingerprint"]
    text = (built["model_ds"] / "README.md").read_text()
    assert "on **custom data** (4 rows" in text and "seamless_2t_2s_questions` (" not in text
    # the human dataset embeds the input clips (both speakers): stereo
    import soundfile as sf
    import io

    h = datasets.load_dataset(str(built["human_ds"]), cache_dir=str(tmp_path / "c"))["test"].cast_column("input_audio", datasets.Audio(decode=False))
    assert sf.info(io.BytesIO(h[0]["input_audio"]["bytes"])).channels == 2


class FakeHfApi:
    """Records the calls the project makes on huggingface_hub.HfApi (no network)."""

    instances: list["FakeHfApi"] = []

    def __init__(self, token=None, **kw):
        self.token = token
        self.calls: list[tuple[str, dict]] = []
        self.uploaded: dict[str, bytes] = {}
        FakeHfApi.instances.append(self)

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", {"repo_id": repo_id, **kw}))

    def upload_folder(self, *, folder_path, **kw):
        self.calls.append(("upload_folder", {"folder_path": folder_path, **kw}))
        for p in Path(folder_path).rglob("*"):
            if p.is_file():
                self.uploaded[p.relative_to(folder_path).as_posix()] = p.read_bytes()

        class Info:
            commit_url = f"https://huggingface.co/datasets/{kw['repo_id']}/commit/abc"

        return Info()


def test_cli_push_results_at_the_hub_boundary(built, monkeypatch, capsys, tmp_path):
    """push-results creates a dataset repo and uploads parquet + summary + card in one commit; the token is never shown."""
    import huggingface_hub
    import pyarrow.parquet as pq

    from spear_metrics.cli import main

    secret = "hf_SECRETtoken1234567890"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    FakeHfApi.instances.clear()
    root = built["model_ds"].parent
    rc = main(["push-results", str(built["model_run"]), "--repo-id", "me/toy-results", "--private",
               "--model-name", "toy", "--inference-mode", "Half-duplex", "--no-open-weights",
               "--with-audio", "--metadata", str(root / "model_metadata.csv")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    (api,) = FakeHfApi.instances
    assert [c[0] for c in api.calls] == ["create_repo", "upload_folder"]
    assert api.calls[0][1] == {"repo_id": "me/toy-results", "repo_type": "dataset", "private": True, "exist_ok": True}
    assert api.calls[1][1]["repo_type"] == "dataset" and api.calls[1][1]["repo_id"] == "me/toy-results"
    # the run's report (RESULTS/report, written by the helper) travels with it: page and PNGs only
    report = {k for k in api.uploaded if k.startswith("report/")}
    assert set(api.uploaded) - report == {"README.md", "summary.json", "data/test-00000-of-00001.parquet"}
    assert "report/index.html" in report and all(k.endswith((".html", ".png")) for k in report)
    assert b"report/index.html" in api.uploaded["README.md"]
    (tmp_path / "t.parquet").write_bytes(api.uploaded["data/test-00000-of-00001.parquet"])
    table = pq.read_table(tmp_path / "t.parquet")
    assert table.num_rows == 4 and "answer_audio" in table.column_names
    assert b"open_weights: false" in api.uploaded["README.md"] and b"inference_mode: Half-duplex" in api.uploaded["README.md"]
    assert "commit/abc" in out.out
    assert secret not in out.out + out.err
    assert all(secret.encode() not in b for b in api.uploaded.values())


def _bad_copy(run: Path, dst: Path, *, summary=None, rows=None) -> Path:
    shutil.copytree(run, dst)
    if summary:
        s = json.loads((dst / "summary.json").read_text())
        summary(s)
        (dst / "summary.json").write_text(json.dumps(s))
    if rows:
        r = _per_sample(dst)
        rows(r)
        (dst / "per_sample.jsonl").write_text("".join(json.dumps(x) + "\n" for x in r))
    return dst


BAD_CASES = {
    "missing_column": (dict(rows=lambda r: r[1].pop("status")), "per_sample.jsonl line 2 is missing column 'status'"),
    "missing_summary_key": (dict(summary=lambda s: s.pop("latency_ms")), "summary.json is missing column 'latency_ms'"),
    "non_numeric_summary": (dict(summary=lambda s: s.update({"latency_ms": "fast"})), "'latency_ms' is not numeric: 'fast'"),
    "non_numeric_value": (dict(rows=lambda r: r[0].update({"explainable_duration_s": "9.9s"})),
                          "row 0 value 'explainable_duration_s' is not numeric: '9.9s'"),
    "bogus_options": (dict(summary=lambda s: s.update({"options": {"interruptions": {"vad_time_resolution": 99}}})),
                      "summary.json options: "),
    "unknown_option": (dict(summary=lambda s: s.update({"options": {"interruptions": {"foo": "<b>x</b>"}}})),
                       "summary.json options: "),
    "unknown_version": (dict(summary=lambda s: s["metric_versions"].update({"interruptions": "9.9.9"})),
                        "unknown metric version interruptions='9.9.9' (known: 2.0.0, 2.0.1)"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_results_rejected_with_one_line(built, tmp_path, capsys, case):
    """Missing column, non-numeric value, unknown metric version: ResultsError and CLI exit 2, one line."""
    from spear_metrics.cli import main

    mutate, expected = BAD_CASES[case]
    bad = _bad_copy(built["model_run"], tmp_path / "bad", **mutate)
    with pytest.raises(ResultsError) as e:
        read_run(bad)
    assert expected in str(e.value) and "\n" not in str(e.value)
    assert main(["push-results", str(bad), "--local-dir", str(tmp_path / "ds"), "--model-name", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spearbench push-results: ") and expected in err and "\n" not in err
    assert not (tmp_path / "ds" / "summary.json").exists()


EDITED_CASES = {
    "summary_value": (dict(summary=lambda s: s.update(latency_ms=1.0)), "summary.json 'latency_ms' is 1.0 but its rows give"),
    "row_value": (dict(rows=lambda r: r[0].update(latency_ms=1.0)), "summary.json 'latency_ms' is"),
    "row_deleted": (dict(rows=lambda r: r.pop(2)), "n_samples is 4 but per_sample.jsonl has 3 rows"),
    "row_id_repeated": (dict(rows=lambda r: r[2].update(row=1)), "repeats row 1"),
    "row_id_negative": (dict(rows=lambda r: r[3].update(row=-3)), "'row' is not a row id (an integer >= 0): -3"),
    "row_id_fraction": (dict(rows=lambda r: r[3].update(row=0.5)), "'row' is not a row id (an integer >= 0): 0.5"),
    "count_negative": (dict(summary=lambda s: s.update(n_scored=-5)), "'n_scored' is not a count"),
    "counts_not_the_rows": (dict(summary=lambda s: s.update(n_scored=4, n_failed=0)), "counts n_scored=4, n_failed=0"),
    "key_of_another_metric": (dict(summary=lambda s: s.update(UTMOS=4.9)),
                              "has 'UTMOS' but the run did not score metric 'speech_quality'"),
}


@pytest.mark.parametrize("case", sorted(EDITED_CASES))
def test_edited_results_are_refused(built, tmp_path, capsys, case):
    """A summary that its rows do not give, rows that are not exactly 0..n-1, counts that do not
    count them: push-results exits 2 with one line and writes nothing."""
    from spear_metrics.cli import main

    mutate, expected = EDITED_CASES[case]
    bad = _bad_copy(built["model_run"], tmp_path / "bad", **mutate)
    md = built["model_ds"].parent / "model_metadata.csv"
    assert main(["push-results", str(bad), "--local-dir", str(tmp_path / "ds"), "--model-name", "x",
                 "--metadata", str(md)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spearbench push-results: ") and expected in err and "\n" not in err, err
    assert not (tmp_path / "ds" / "summary.json").exists()


def test_edited_results_dataset_is_refused_by_the_loader(built, tmp_path):
    """An edited summary.json in a written results dataset is refused where it is shown too."""
    ds = tmp_path / "ds"
    shutil.copytree(built["model_ds"], ds)
    s = json.loads((ds / "summary.json").read_text())
    s["latency_ms"] = 1.0
    (ds / "summary.json").write_text(json.dumps(s))
    with pytest.raises(ResultsError, match="'latency_ms' is 1.0 but its rows give"):
        load_results(ds)


def test_push_results_needs_the_metadata_for_a_key_computed_from_it(built, tmp_path):
    """explainable_normalized_f0_std_avg groups answers by questioner (metadata): without
    --metadata it cannot be checked, and the run is refused with the reason."""
    from spear_metrics.results import write_results_dataset

    with pytest.raises(ResultsError, match="explainable_normalized_f0_std_avg.*give --metadata"):
        write_results_dataset(built["model_run"], tmp_path / "ds", model_name="x")


def test_leaderboard_columns_come_from_the_metric_keys(app):
    """The Space's columns are the published table's, in its order, each the MetricKey of its
    dimension, then the project's own overall score (never a published column)."""
    from spear_metrics.core.columns import groups
    from spear_metrics.core.registry import dimension_class

    header = next(csv.reader(open(REPO / "spear_metrics/space/data/spear_benchmark.csv", encoding="utf-8")))
    cols = tables.columns()
    published = [c for c in cols if c.published]
    assert [c.name for c in published] == header[4:]
    assert [c.name for c in cols[len(published):]] == list(tables.PROJECT_KEYS)
    assert len({c.group for c in published}) == len(groups()) == 7
    for c in cols:
        assert c.key in dimension_class(c.dimension).keys
    by = {c.name: c for c in cols}
    assert by["latency_ms"].unit == "ms" and by["explainable_duration_s"].unit == "s"


def test_leaderboard_merge_missing_and_bad(built, app, tmp_path):
    """Published rows + a results dataset; missing shows '-', never 0; a bad source is reported
    (by its label, never its server path), the rest renders."""
    bad = tmp_path / "bad_ds"
    shutil.copytree(built["model_ds"], bad)
    s = json.loads((bad / "summary.json").read_text())
    s["metric_versions"]["interruptions"] = "0.1"
    (bad / "summary.json").write_text(json.dumps(s))
    model_label, bad_label = tables.set_sources([str(built["model_ds"]), str(bad)])
    assert (model_label, bad_label) == ("local:ds_model", "local:bad_ds")
    rows, errors = tables.all_rows([model_label, bad_label])
    from spear_metrics.interruptions.definition import Interruptions

    known = ", ".join(sorted({Interruptions.version, *Interruptions.compatible_versions}))
    assert errors == [f"rejected local:bad_ds: unknown metric version interruptions='0.1' (known: {known})"]
    by = {(r["model"], r["source"]): r for r in rows}
    assert by[("human", "published")]["latency_ms"] == pytest.approx(742.055)
    assert by[("gpt-audio-1.5", "published")]["interrupted_time_ms"] is None
    toy = by[("toy-delayed-model", model_label)]
    summary = json.loads((built["model_run"] / "summary.json").read_text())
    assert toy["latency_ms"] == pytest.approx(summary["latency_ms"]) and toy["UTMOS"] is None
    df = tables.display_frame(rows, None)
    lat = next(h for h in df.columns if " latency_ms " in h)
    assert lat == "Interruptions · latency_ms [ms] ≈human"
    shown = dict(zip(df["model"] + "|" + df["source"], df[next(h for h in df.columns if "interrupted_time_ms" in h)]))
    assert shown["gpt-audio-1.5|published"] == "-" and shown["human|published"] == "520.914"
    assert df[df["model"] == "toy-delayed-model"][next(h for h in df.columns if "UTMOS" in h)].item() == "-"
    # filters and sorting
    half = tables.filter_sort(rows, ["Half-duplex"], "all", "model", "ascending")
    assert {r["model"] for r in half} == {"mini-omni", "Qwen2.5-Omni-7B"}
    closed = tables.filter_sort(rows, None, "closed weights", "model", "ascending")
    assert "mini-omni" not in {r["model"] for r in closed} and "gpt-realtime-2" in {r["model"] for r in closed}
    best = tables.filter_sort(rows, None, "all", "latency_ms", "best first")
    assert best[0]["model"] == "human" and best[0]["source"] == "published"  # closest to the human value
    best_wer = tables.filter_sort(rows, None, "all", "WER_%", "best first")
    assert best_wer[0]["model"] == "gpt-audio-1.5" and best_wer[-1]["WER_%"] is None  # missing last
    # CSV download: the published keys, empty cell for missing
    path = tables.write_csv(rows)
    text = open(path).read()
    got = {r["model"] + "|" + r["source"]: r for r in csv.DictReader(open(path))}
    assert got["gpt-audio-1.5|published"]["interrupted_time_ms"] == ""
    assert float(got["human|published"]["latency_ms"]) == pytest.approx(742.055)
    assert str(tmp_path) not in text and str(built["model_ds"]) not in text  # labels, not server paths


def test_sample_filters_and_view(built, app):
    """Subset and value-range filters; the sample view pairs the model answer with the human one."""
    srcs = tables.set_sources([str(built["human_ds"]), str(built["model_ds"])])
    res = load_results(built["model_ds"])
    assert samples.filtered_rows(res, "all", samples.NO_METRIC, "", "") == [0, 1, 2, 3]
    assert samples.filtered_rows(res, "naturalistic", samples.NO_METRIC, "", "") == [1, 2]
    assert samples.filtered_rows(res, "all", "interrupted_time_ms", "0.001", "") == [1]  # only interruptions
    assert samples.filtered_rows(res, "all", "latency_ms", "", "800") == [1, 2]  # row 3 has no latency: excluded
    inp, human, model, tq, th, tm, scores, info = samples.sample_view(srcs, srcs[1], 0)
    assert Path(inp).read_bytes()[:4] == b"RIFF" and human and model
    assert Path(model).read_bytes() == (built["model_ds"].parent / "model/ans_late.wav").read_bytes()
    assert Path(human).read_bytes() == (built["model_ds"].parent / "human/ans.wav").read_bytes()
    assert tq.startswith("FEE016:") and th.startswith("MEO015:") and tm.startswith("MODEL:")
    vals = dict(zip(scores["key"], scores["value"]))
    assert vals["interruption"] == "false" and vals["latency_ms"] == "1000.000"
    assert "`data/improvised/audios/c1_FEE016_MEO015_0.wav`" in info and str(built["model_ds"].parent) not in info
    *_, scores3, _ = samples.sample_view(srcs, srcs[1], 3)
    vals3 = dict(zip(scores3["key"], scores3["value"]))
    assert vals3["latency_ms"] == "-" and vals3["interruption"] == "-"


def test_plots_render(built, app):
    """Distribution and per-dimension figures build from the loaded data (axes labelled with the key)."""
    srcs = tables.set_sources([str(built["human_ds"]), str(built["model_ds"])])
    fig = plots.distribution_plot(srcs)
    labels = [ax.get_xlabel() for ax in fig.axes]
    assert labels == ["latency_ms: latency (ms)", "explainable_duration_s: answer audio duration (s)"]
    fig2 = plots.dimension_plot(srcs, "Interruptions")
    assert [ax.get_title() for ax in fig2.axes] == [
        "latency_ms [ms] ≈human", "interrupted_time_ms [ms] ≈human", "interruptions_% [%] ≈human"]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, real_dir):
    """A run whose metadata names non-audio files (an absolute /etc/passwd, an in-root symlink to it,
    a relative path escaping the root, /etc/passwd as an input clip), a non-numeric time and a path
    cell with spaces; scored by the real runner (the bad rows fail, two rows are ok)."""
    from _spear_samples import CTX_END, Q_END, make_samples

    from spear_datasets.audio import load_audio, write_wav
    from spear_datasets.schema import SPEAR_COLUMNS
    from spear_metrics.core.scoring import run_score

    root = tmp_path_factory.mktemp("hostile")
    md = make_samples(root)
    clip = root / "data/improvised/audios/c1_FEE016_MEO015_0.wav"
    x = load_audio(clip)
    inputs = [f"data/improvised/audios/h{i}.wav" for i in range(7)]
    for p in inputs:
        write_wav(root / p, x, 16000)
    (root / "model/passwd_link.wav").symlink_to("/etc/passwd")
    cells = [  # (audio_path, answer_audio_path, question_end_time)
        (inputs[0], "model/ans_late.wav", Q_END),                 # 0 ok
        (inputs[1], "/etc/passwd", Q_END),                       # 1 cannot decode audio
        (inputs[2], "model/passwd_link.wav", Q_END),             # 2 cannot decode audio (symlink)
        (inputs[3], "../../../../../../../../etc/passwd", Q_END),  # 3 escapes the data root
        (" " + inputs[4] + " ", " model/ans.wav ", Q_END),         # 4 ok: score strips cells
        (inputs[5], "model/ans.wav", "abc"),                     # 5 non-numeric time
        ("/etc/passwd", "model/ans.wav", Q_END),                 # 6 the input is not audio
    ]
    base = {c: "" for c in SPEAR_COLUMNS} | {"context_end_time": CTX_END, "speakers": "FEE016|MEO015",
                                             "transcript_answer": "MODEL: hm."}
    meta = root / "hostile_metadata.csv"
    with open(meta, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(SPEAR_COLUMNS))
        w.writeheader()
        for a, b, q in cells:
            w.writerow(base | {"audio_path": a, "answer_audio_path": b, "question_end_time": q})
    run = root / "RESULTS_hostile"
    run_score(meta, "interruptions", run, progress=False)
    return {"root": root, "metadata": meta, "run": run, "model_md": md["model"]}


def _table_rows(ds: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(ds / "data" / "test-00000-of-00001.parquet").to_pylist()


def test_push_results_embeds_only_real_answer_audio_of_ok_rows(hostile, tmp_path, capsys):
    """--with-audio/--with-inputs never embed /etc/passwd (absolute, symlinked, escaping, as an input);
    a non-numeric time of a failed row is null; a path cell with spaces matches as score read it."""
    from spear_metrics.cli import main

    src = _per_sample(hostile["run"])
    assert [r["status"] for r in src] == ["ok", "failed", "failed", "failed", "ok", "failed", "failed"]
    assert "cannot decode audio" in src[1]["error"] and "cannot decode audio" in src[2]["error"]
    assert "escapes the data root" in src[3]["error"] and "question_end_time is not a number" in src[5]["error"]
    out = tmp_path / "ds"
    rc = main(["push-results", str(hostile["run"]), "--local-dir", str(out), "--model-name", "hostile",
               "--with-audio", "--with-inputs", "--metadata", str(hostile["metadata"])])
    assert rc == 0, capsys.readouterr().err
    rows = _table_rows(out)
    root = hostile["root"]
    assert [r["status"] for r in rows] == [r["status"] for r in src]
    assert rows[0]["answer_audio"]["bytes"] == (root / "model/ans_late.wav").read_bytes()
    assert rows[4]["answer_audio"]["bytes"] == (root / "model/ans.wav").read_bytes()
    assert rows[4]["input_audio"]["bytes"] == (root / "data/improvised/audios/h4.wav").read_bytes()
    for i in (1, 2, 3, 5, 6):
        assert rows[i]["answer_audio"] is None and rows[i]["input_audio"] is None, i
    passwd = Path("/etc/passwd").read_bytes()[:64]
    assert all(passwd not in p.read_bytes() for p in out.rglob("*") if p.is_file())
    # the failed row's bad time is null (it exists nowhere), its error is the scorer's one line
    assert rows[5]["question_end_time"] is None and rows[5]["error"] == src[5]["error"]
    assert rows[0]["question_end_time"] == pytest.approx(15.48)


def test_push_results_decode_check_holds_even_for_a_row_marked_ok(hostile, tmp_path):
    """A per_sample.jsonl that calls the /etc/passwd rows ok still gets no bytes for them: the file must decode."""
    from spear_metrics.results import write_results_dataset

    def forge(rows):
        for r in rows[1:4]:
            r.update(status="ok", error=None)

    def counts(s):  # the counts follow the forged statuses (else the run is refused as edited)
        s.update(n_scored=s["n_scored"] + 3, n_failed=s["n_failed"] - 3)

    forged = _bad_copy(hostile["run"], tmp_path / "forged", rows=forge, summary=counts)
    out = write_results_dataset(forged, tmp_path / "ds", model_name="forged", metadata=hostile["metadata"],
                                with_audio=True)
    rows = _table_rows(out)
    assert [r["status"] for r in rows[:4]] == ["ok"] * 4
    assert rows[0]["answer_audio"] is not None
    assert rows[1]["answer_audio"] is None and rows[2]["answer_audio"] is None and rows[3]["answer_audio"] is None


def test_push_results_metadata_that_is_not_the_scored_one_is_refused(hostile, tmp_path):
    """A non-numeric time in a row the run scored ok, or another answer path, means another metadata file."""
    from spear_metrics.results import write_results_dataset

    for col, value, expected in [("question_end_time", "abc", "is not numeric"),
                                 ("answer_audio_path", "model/ans_late.wav", "answer_audio_path")]:
        with open(hostile["metadata"], newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header, cells = reader.fieldnames, list(reader)
        cells[4][col] = value  # row 4 was scored ok
        other = hostile["root"] / f"other_{col}.csv"
        with open(other, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=header)
            w.writeheader()
            w.writerows(cells)
        with pytest.raises(ResultsError) as e:
            write_results_dataset(hostile["run"], tmp_path / col, model_name="x", metadata=other)
        assert expected in str(e.value) and "row 4" in str(e.value) and "\n" not in str(e.value)


def test_card_records_the_options_the_run_was_scored_with(built, tmp_path):
    """summary.json's ``options`` (per metric) land in the card's spearbench block and its text."""
    from huggingface_hub import DatasetCard

    from spear_metrics.results import write_results_dataset

    opts = {"interruptions": {"vad_backend": "sequence", "vad_time_resolution": 1}}
    run = _bad_copy(built["model_run"], tmp_path / "run", summary=lambda s: s.update(options=opts))
    ds = write_results_dataset(run, tmp_path / "ds", model_name="toy",
                               metadata=built["model_ds"].parent / "model_metadata.csv")
    card = DatasetCard.load(ds / "README.md")
    assert card.data.to_dict()["spearbench"]["options"] == opts
    assert "  - interruptions: `vad_backend=sequence`, `vad_time_resolution=1`" in card.text


def test_leaderboard_tie_marks_of_results_datasets(built, app):
    """Two results datasets (the human answers and the toy model, the same few rows of one call):
    every key with a tie group marks one of them ★ and the other ≈ (too few shared conversations
    to tell them apart), as text in the cell; the rows are of one conversation, so no rank
    interval; published rows carry no mark. Neither dataset states its onset rule (their answers
    were not written by infer): on the keys computed from the onset (latency_ms...) neither is
    ranked, each cell says [unstated] instead."""
    from spear_metrics.core.onset import onset_derived

    labels = tables.set_sources([str(built["human_ds"]), str(built["model_ds"])])
    rows, errors = tables.all_rows(labels)
    assert not errors
    mine = [r for r in rows if r["source"] in labels]
    marked = sorted({k[: -len("_tie")] for r in mine for k, v in r.items() if k.endswith("_tie") and v})
    assert "latency_ms" in marked and "explainable_duration_s" in marked
    for key in marked:
        marks = sorted(r[f"{key}_tie"].split()[0] for r in mine)
        assert marks == (["[unstated]"] * 2 if onset_derived(key) else sorted(["★", "≈"])), (key, marks)
        assert not any("rank" in r[f"{key}_tie"] for r in mine)  # one call = one conversation: no rank interval
    df = tables.display_frame(rows, None)
    col = next(h for h in df.columns if " latency_ms " in h)
    cells = df[df["source"].isin(labels)][col].tolist()
    assert all("[unstated]" in c and "★" not in c and "≈" not in c for c in cells)
    col = next(h for h in df.columns if " explainable_duration_s " in h)
    cells = df[df["source"].isin(labels)][col].tolist()
    assert any("★" in c for c in cells) and any("≈" in c for c in cells)
    assert not any(("★" in c or "≈" in c) for c in df[df["source"] == "published"][col])


def test_the_onset_rule_travels_from_infer_to_the_leaderboard_row(tmp_path):
    """``score`` copies the answers' onset rule (and a count of lagging rows) from the ``run_info.json``
    ``infer`` wrote beside the metadata into ``summary.json``; the results dataset's card states it
    and its leaderboard row carries it. Answers ``infer`` did not write are ``unstated``."""
    from _spear_samples import make_samples
    from spear_metrics.core.scoring import run_score
    from spear_metrics.results import leaderboard_row, write_results_dataset

    md = make_samples(tmp_path / "data")
    (md["model"].parent / "run_info.json").write_text(json.dumps({"onset_kind": "frame", "n_server_lag_flagged": 2}))
    run = tmp_path / "RESULTS"
    summary = run_score(md["model"], "interruptions", run, progress=False, n_resamples=0)
    assert summary["onset_kind"] == "frame" and summary["n_server_lag_flagged"] == 2
    ds = write_results_dataset(run, tmp_path / "ds", model_name="toy", inference_mode="Full-duplex", open_weights=True,
                               metadata=md["model"])
    assert "onset rule (`answer_start_time`, `latency_ms`): `frame`" in (ds / "README.md").read_text()
    assert leaderboard_row(load_results(ds))["onset_kind"] == "frame"
    (md["model"].parent / "run_info.json").unlink()
    other = run_score(md["model"], "interruptions", tmp_path / "RESULTS2", progress=False, n_resamples=0)
    assert other["onset_kind"] == "unstated" and "n_server_lag_flagged" not in other
