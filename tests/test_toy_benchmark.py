"""``docs/CONTRIBUTING.md`` "Add a benchmark", built as written: its code blocks (``# file: ...``)
become a temporary package, registered at run time, then scored end to end through the
generic machinery: its CLI group, ``push-results`` -> ``datasets.load_dataset``, its column table,
its Space tab, ``report`` refusing it in one line. Nothing outside the package names it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _doc_files() -> dict[str, str]:
    text = (REPO / "docs" / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text[text.index("## Add a benchmark"):text.index("## Add an adapter")]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    files = {}
    for b in blocks:
        first, _, body = b.partition("\n")
        if first.startswith("# file: "):
            files[first[len("# file: "):].strip()] = body
    return files


@pytest.fixture()
def toy(tmp_path, monkeypatch):
    from spear_metrics.core.registry import register_benchmark, unregister_benchmark

    files = _doc_files()
    assert sorted(files) == ["toybench/__init__.py", "toybench/cli.py", "toybench/results.py"]
    for name, body in files.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(body, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    register_benchmark("toy_bench", "toybench:BENCHMARK")
    try:
        yield tmp_path
    finally:
        unregister_benchmark("toy_bench")
        import sys

        for m in [m for m in sys.modules if m == "toybench" or m.startswith("toybench.")]:
            del sys.modules[m]


@pytest.mark.slow
def test_toy_benchmark_from_the_docs_end_to_end(toy, monkeypatch, capsys):
    import datasets

    from spear_metrics.cli import main
    from spear_metrics.core.columns import metric_keys
    from spear_metrics.results import SourcePolicy
    import spear_metrics.space.tables as tables

    answers = toy / "answers.jsonl"
    # 3 good lines, 2 of them right (case and spaces ignored), and one bad line: accuracy 2/3 by construction
    answers.write_text("\n".join([json.dumps({"id": "a", "answer": " Paris ", "label": "paris"}),
                                  json.dumps({"id": "b", "answer": "Lyon", "label": "Nice"}),
                                  "not json",
                                  json.dumps({"id": "c", "answer": "ROME", "label": "rome"})]) + "\n")
    out = toy / "run"
    assert main(["toy", "score", "--answers", str(answers), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accuracy"] == pytest.approx(2 / 3) and summary["accuracy_n"] == 3
    assert (summary["n_samples"], summary["n_scored"], summary["n_failed"]) == (4, 3, 1)
    assert [k.name for k in metric_keys("toy_bench")] == ["accuracy"]  # the column table reads its descriptor

    ds_dir = toy / "DS"
    assert main(["push-results", str(out), "--local-dir", str(ds_dir), "--model-name", "echo"]) == 0
    ds = datasets.load_dataset(str(ds_dir), split="test", cache_dir=str(toy / "hf_cache"))
    assert ds.num_rows == 4 and ds["correct"] == [1, 0, None, 1] and ds["status"] == ["ok", "ok", "failed", "ok"]

    monkeypatch.setattr(tables, "POLICY", SourcePolicy([str(ds_dir)]))
    tabs = dict(tables.benchmark_tabs())
    assert "Toy-Bench" in tabs
    table = tables.benchmark_table(tabs["Toy-Bench"], ["local:DS"])
    # the Space shows numbers as its leaderboard does: 3 decimals (2 of 3 answers right)
    assert list(table["model"]) == ["echo"] and table.loc[0, "accuracy"] == "0.667"
    rows, errors = tables.all_rows(["local:DS"])
    assert errors == [] and all(r["source"] == "published" for r in rows)  # not on the SPEAR leaderboard

    capsys.readouterr()
    assert main(["report", str(out), "--out", str(toy / "rep")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Toy-Bench run has no report page" in err

    summary["accuracy"] = 1.0  # an edited figure is refused by its own checks
    (out / "summary.json").write_text(json.dumps(summary))
    assert main(["push-results", str(out), "--local-dir", str(toy / "DS2"), "--model-name", "echo"]) == 2
    assert "'accuracy' is not what its rows give" in capsys.readouterr().err
