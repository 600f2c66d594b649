"""Full-Duplex-Bench runs as results datasets: ``fdb score`` -> ``push-results`` ->
``datasets.load_dataset`` round trip, its tab of the leaderboard Space, and ``report`` refusing it
in one line (exit 2). Real FDB example samples (tests/fixtures/fdb)."""

from __future__ import annotations

import json
import shutil

import pytest


@pytest.fixture()
def fdb_run(fdb_dir, tmp_path):
    """A scored smooth_turn_taking run of two samples: FDB's example sample and a copy of it
    (so every mean is that sample's value, by construction, with n = 2)."""
    from spear_metrics.cli import main

    root = tmp_path / "tt"
    shutil.copytree(fdb_dir / "example_data" / "smooth_turn_taking_example", root)
    shutil.copytree(root / "1", root / "2")
    out = tmp_path / "run"
    assert main(["fdb", "score", "--task", "smooth_turn_taking", "--root", str(root), "--out", str(out),
                 "--bootstrap", "50", "--no-progress"]) == 0
    return out


@pytest.mark.slow
def test_push_results_load_dataset_round_trip(fdb_run, tmp_path, capsys):
    import datasets

    from spear_metrics.cli import main
    from spear_metrics.results import load_results_folder

    rows = [json.loads(x) for x in (fdb_run / "per_sample.jsonl").read_text().splitlines()]
    summary = json.loads((fdb_run / "summary.json").read_text())
    assert [r["status"] for r in rows] == ["ok", "ok"] and rows[0]["tor"] == rows[1]["tor"]
    assert summary["tor"] == rows[0]["tor"] and summary["tor_n"] == 2  # the mean of two equal values
    ds_dir = tmp_path / "DS"
    assert main(["push-results", str(fdb_run), "--local-dir", str(ds_dir), "--model-name", "example"]) == 0
    ds = datasets.load_dataset(str(ds_dir), split="test", cache_dir=str(tmp_path / "hf_cache"))
    assert ds.num_rows == 2 and sorted(ds["id"]) == ["1", "2"]
    assert ds["tor"] == [r["tor"] for r in rows] and ds["latency_s"] == [r["latency_s"] for r in rows]
    card = (ds_dir / "README.md").read_text(encoding="utf-8")
    assert "benchmark: full_duplex" in card and "task: smooth_turn_taking" in card
    res = load_results_folder(ds_dir, where="DS")  # what the Space reads: checked again on load
    assert res.summary["tor"] == summary["tor"]
    # an edited summary is refused, in one line, before anything is written
    summary["tor"] = 0.5 if summary["tor"] != 0.5 else 0.25
    (fdb_run / "summary.json").write_text(json.dumps(summary))
    capsys.readouterr()
    assert main(["push-results", str(fdb_run), "--local-dir", str(tmp_path / "DS2"), "--model-name", "x"]) == 2
    err = capsys.readouterr().err
    assert "'tor'" in err and "its rows give" in err and err.count("\n") == 1
    assert not (tmp_path / "DS2").exists()


@pytest.mark.slow
def test_space_tab_and_report_refusal(fdb_run, tmp_path, monkeypatch, capsys):
    from spear_metrics.cli import main
    from spear_metrics.full_duplex.ui import SPACE_TAB
    from spear_metrics.results import SourcePolicy
    import spear_metrics.space.tables as tables

    ds_dir = tmp_path / "DS"
    assert main(["push-results", str(fdb_run), "--local-dir", str(ds_dir), "--model-name", "example"]) == 0
    monkeypatch.setattr(tables, "POLICY", SourcePolicy([str(ds_dir)]))
    rows, errors = tables.all_rows(["local:DS"])
    assert errors == [] and all(r["source"] == "published" for r in rows)  # not a SPEAR row
    assert ("Full-Duplex-Bench v1.0", SPACE_TAB) in tables.benchmark_tabs()
    table = tables.benchmark_table(SPACE_TAB, ["local:DS"])
    summary = json.loads((fdb_run / "summary.json").read_text())
    assert list(table["model"]) == ["example"] and table.loc[0, "task"] == "smooth_turn_taking"
    assert table.loc[0, "tor"].startswith(f"{summary['tor']:.3f} [") and table.loc[0, "relevance"] == "-"  # not this task's
    capsys.readouterr()
    assert main(["report", str(fdb_run), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Full-Duplex-Bench v1.0 run has no report page" in err
    assert not (tmp_path / "rep").exists()
