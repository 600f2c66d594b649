"""``spearbench publish`` at the Hub boundary (a recording HfApi, no network): one dataset and
nine Spaces (eight metrics, the leaderboard), each uploaded from exactly its dry-run folder; the
token is never printed or written; bad input is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from spear_metrics.cli import main


class RecordingHfApi:
    """What the project asks of huggingface_hub.HfApi, recorded."""

    instances: list["RecordingHfApi"] = []

    def __init__(self, token=None, **kw):
        self.token = token
        self.repos: list[dict] = []
        self.uploads: dict[str, set[str]] = {}
        RecordingHfApi.instances.append(self)

    def create_repo(self, repo_id=None, **kw):
        self.repos.append({"repo_id": repo_id, **kw})

    def upload_folder(self, *, folder_path, repo_id, **kw):
        self.uploads[repo_id] = {p.relative_to(folder_path).as_posix() for p in Path(folder_path).rglob("*")
                                 if p.is_file()}
        self.contents = getattr(self, "contents", b"") + b"".join(
            p.read_bytes() for p in Path(folder_path).rglob("*") if p.is_file() and p.suffix in (".txt", ".md", ".py"))
        return f"https://huggingface.co/{repo_id}/commit/1"


@pytest.fixture()
def dataset(tmp_path):
    """A folder with the layout build-dataset writes (card + one shard; contents are not read here)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    hub = tmp_path / "hub"
    (hub / "data" / "all").mkdir(parents=True)
    (hub / "README.md").write_text("---\nconfigs: []\n---\n# dataset\n")
    pq.write_table(pa.table({"x": [1]}), hub / "data" / "all" / "test-00000-of-00001.parquet")
    wheel = tmp_path / "spearbench-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x05\x06" + b"\x00" * 18)  # an empty zip: it is bundled, never installed here
    return hub, wheel


def test_publish_uploads_each_dry_run_folder(dataset, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    hub, wheel = dataset
    secret = "hf_SECRETtoken1234567890"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingHfApi)
    RecordingHfApi.instances.clear()
    assert main(["publish", "--dataset", str(hub), "--namespace", "me", "--wheel", str(wheel),
                 "--dry-run", str(tmp_path / "out")]) == 0
    assert RecordingHfApi.instances == []  # a dry run makes no client at all
    dry = {p.name: {q.relative_to(p).as_posix() for q in p.rglob("*") if q.is_file()}
           for p in [*(tmp_path / "out" / "spaces").iterdir(), *(tmp_path / "out" / "datasets").iterdir()]}
    assert main(["publish", "--dataset", str(hub), "--namespace", "me", "--wheel", str(wheel),
                 "--results", "me/my-model-spear"]) == 0
    out = capsys.readouterr()
    (api,) = RecordingHfApi.instances
    spaces = [r for r in api.repos if r.get("repo_type") == "space"]
    assert len(spaces) == 12 and all(r["space_sdk"] == "gradio" for r in spaces)  # 7 dimensions, distributional, FDB, SpeechRole, Dynamic-SUPERB, leaderboard
    # data that is not SPEAR's split is never named after the benchmark
    assert [r["repo_id"] for r in api.repos if r.get("repo_type") == "dataset"] == ["me/spearbench-custom-data"]
    assert api.uploads["me/interruptions"] == dry["interruptions"] == {
        "interruptions.py", "README.md", "app.py", "requirements.txt", wheel.name}
    assert api.uploads["me/leaderboard"] == dry["leaderboard"] | {"results.txt"}
    assert api.uploads["me/spearbench-custom-data"] == dry["spearbench-custom-data"]
    assert secret not in out.out + out.err and secret.encode() not in api.contents
    assert "me/turn_taking: https://huggingface.co/me/turn_taking/commit/1" in out.out


@pytest.mark.parametrize("args, expected", [
    (["--dataset", "{tmp}/nothing"], "--dataset nothing: not a folder written by `spearbench build-dataset`"),
    (["--metrics", "interruptions,nope"], "unknown metric 'nope'"),
    (["--results", "/srv/results"], "--results takes Hub dataset ids OWNER/NAME"),
    (["--namespace", "../x"], "is not a Hub repository id"),
])
def test_publish_bad_input_is_one_line(dataset, tmp_path, capsys, args, expected):
    hub, wheel = dataset
    argv = ["publish", "--dataset", str(hub), "--wheel", str(wheel), "--dry-run", str(tmp_path / "out")]
    argv += [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spearbench publish: ") and expected in err and "\n" not in err, err


def test_publish_names_only_spears_split_after_the_benchmark(dataset, tmp_path, capsys):
    """The benchmark's dataset name goes to SPEAR's own split only: Seamless recordings with the
    published rows per subset (994 + 1,731 test); other counts or other recordings get another name,
    and asking for the benchmark's name on them is one line, exit 2."""
    import json

    from spear_datasets.hub import REPORT_FILE, SEAMLESS
    from spear_metrics.publish import CUSTOM_DATASET_NAME, dataset_repo_name

    hub, wheel = dataset
    (hub / "README.md").write_text(f"---\nlicense: {SEAMLESS.license}\n---\n# from {SEAMLESS.name}\n")
    (hub / REPORT_FILE).write_text(json.dumps({"counts": {"improvised": {"test": 994}, "naturalistic": {"test": 1731}}}))
    assert dataset_repo_name(hub, None) == "seamless_2t_2s_questions"
    (hub / REPORT_FILE).write_text(json.dumps({"counts": {"improvised": {"test": 994}, "naturalistic": {"test": 1730}}}))
    assert dataset_repo_name(hub, None) == CUSTOM_DATASET_NAME  # one row short: not SPEAR's split
    assert main(["publish", "--dataset", str(hub), "--wheel", str(wheel), "--dry-run", str(tmp_path / "out"),
                 "--dataset-name", "seamless_2t_2s_questions"]) == 2
    err = capsys.readouterr().err.strip()
    assert "names SPEAR's own split" in err and "\n" not in err
