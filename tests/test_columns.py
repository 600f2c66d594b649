"""One source for columns: every table of keys (leaderboard, benchmark keys, FDB, metric cards and
the docs' reference pages) derives from the MetricKey declarations; every metric folder is a complete Space."""

from __future__ import annotations

import csv
import importlib.util
import re
import subprocess
import sys

import pytest
import yaml

from conftest import REPO

from spear_metrics.core.columns import benchmark_keys, columns, find_column, groups, known_versions, metric_keys, metric_names
from spear_metrics.core.dimension import MetricKey


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_published_keys_are_the_published_table_in_its_order():
    header = next(csv.reader(open(REPO / "spear_metrics/space/data/spear_benchmark.csv", encoding="utf-8")))
    assert list(benchmark_keys()) == header[4:]
    orders = [c.order for c in columns(published_only=True)]
    assert sorted(orders) == list(range(1, len(header) - 3))  # 1..22, each once
    for c in columns():
        assert c.published == (c.order is not None), c.name  # a project key has no published position
        assert c.group and c.unit and c.description and c.better in ("higher", "lower", "closer_to_human")
    assert [g[0] for g in groups()] == ["speech_quality", "interruptions", "language_dialect", "turn_taking",
                                       "emotions", "stances", "explainable_features"]


def test_derived_tables_follow_the_declarations():
    """summary.BENCHMARK_KEYS and FDB's KEY_INFO are views of the MetricKeys, not copies."""
    from spear_metrics.core.summary import BENCHMARK_KEYS
    from spear_metrics.full_duplex.definition import KEY_INFO, KEYS

    assert BENCHMARK_KEYS == benchmark_keys()
    assert KEY_INFO == {k.name: (k.unit, k.better, k.description) for k in KEYS}
    assert set(KEY_INFO) == {"tor", "latency_s", "relevance", "backchannel_frequency", "jsd"}
    from spear_metrics.interruptions.definition import Interruptions

    # the class's own version and the earlier ones it declares compatible, no second list
    assert known_versions("interruptions") == {Interruptions.version, *Interruptions.compatible_versions} == {"2.0.0", "2.0.1"}


def test_template_keys_match_their_family_only():
    k = MetricKey("WER_%_<asr>", "%", "lower", "x", group="Speech quality")
    assert k.matches("WER_%_faster-whisper-base") and k.matches("WER_%_qwen3-asr-0.6b")
    assert not k.matches("WER_%") and not k.matches("WER_%_a b") and not k.matches("CER_%_x")
    assert find_column("CER_%_embedded").dimension == "speech_quality"
    assert find_column("UTMOS_note") is None and find_column("latency_ms", ("emotions",)) is None


def test_key_tables_in_cards_and_reference_pages_are_generated(tmp_path, monkeypatch):
    """The tables between the keys markers and the reference pages equal what scripts/gen_docs.py
    writes; a changed declaration makes --check fail."""
    gen = _gen_docs()
    assert gen.main(["--check"]) == 0
    for path, table in gen.targets().items():
        text = path.read_text(encoding="utf-8")
        assert table in text, path
    assert ("| [Interruptions](interruptions.md) | `latency_ms` | published | ms | closer to human (742.055) |"
            in (REPO / "docs" / "reference" / "index.md").read_text())
    # drift: a description edited in a declaration is caught
    from spear_metrics.interruptions.definition import Interruptions

    edited = tuple(MetricKey(k.name, k.unit, k.better, k.description + " (edited)", k.group, k.published, k.order)
                   for k in Interruptions.keys)
    monkeypatch.setattr(Interruptions, "keys", edited)
    from spear_metrics.core import columns as cols

    cols._spear_columns.cache_clear()
    try:
        assert gen.main(["--check"]) == 1
    finally:
        monkeypatch.undo()
        cols._spear_columns.cache_clear()


def _front_matter(path):
    text = path.read_text(encoding="utf-8")
    m = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert m, path
    return yaml.safe_load(m.group(1))


def _pins() -> dict[str, str]:
    out = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            out[name.strip().lower().replace("_", "-")] = version.strip()
    return out


@pytest.mark.parametrize("metric", metric_names())
def test_every_metric_folder_is_a_complete_space(metric):
    """Module, card with the Space YAML, app.py and a requirements.txt naming spearbench (the
    line `spearbench publish` pins the bundled wheel on)."""
    folder = REPO / "spear_metrics" / metric
    for f in (f"{metric}.py", "README.md", "app.py", "requirements.txt"):
        assert (folder / f).is_file(), f
    meta = _front_matter(folder / "README.md")
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py" and {"evaluate", "metric"} <= set(meta["tags"])
    assert meta["sdk_version"] == _pins()["gradio"] and meta["title"] and meta["description"]
    reqs = [line.strip() for line in (folder / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert reqs[0].startswith("spearbench[score")
    assert f'HERE / "{metric}.py"' in (folder / "app.py").read_text()
    assert metric_keys(metric)  # its keys are declared (the card's table is generated from them)


def test_leaderboard_space_pins_the_verified_set():
    pins = _pins()
    space = REPO / "spear_metrics" / "space"
    reqs = [line.strip() for line in (space / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert reqs[0] == "spearbench"
    for line in reqs[1:]:
        name, version = line.split("==")
        assert pins[name.lower().replace("_", "-")] == version, line
    assert _front_matter(space / "README.md")["sdk_version"] == pins["gradio"]


def test_missing_package_message_names_spearbench(tmp_path, real_dir):
    """evaluate.load of a copied metric folder where spear_metrics cannot be imported: one line
    naming the spearbench package and how to install it (evaluate's own hint named spear_metrics)."""
    import shutil

    shutil.copytree(REPO / "spear_metrics" / "interruptions", tmp_path / "interruptions")
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('spear_metrics', 'spear_datasets'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import evaluate\n"
        f"evaluate.load({str(tmp_path / 'interruptions')!r})\n"
    )
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PATH": "/usr/bin:/bin",
           "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: the SPEARBench metric 'interruptions' needs the Python package spearbench: "
                           "pip install 'spearbench[score]'"), last
    assert "spear_metrics' using" not in out.stderr
