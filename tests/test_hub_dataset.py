"""Hub-layout dataset: an upstream-layout SPEAR folder cut from a REAL stereo dialogue ->
``spearbench build-dataset`` -> ``datasets.load_dataset`` with both channels intact.

Source: ``DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav`` (16 kHz,
int16 stereo; its .json: FEE016 speaks 0.78-15.48 s on channel 0, MEO015 answers from
15.46 s on channel 1). Read in place, never copied into the repository.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from spear_datasets.schema import SPEAR_COLUMNS

STEM = "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015"
SR = 16_000
Q_END_ABS = 15.48  # end of FEE016's question (s, in the source recording)
A_START_ABS = 15.46  # MEO015's answer onset (s)
A_LEN = 8.0  # seconds of answer kept (keeps VAD in the infer tests short)
OFFSETS = (0.0, 2.0, 4.0, 6.0)  # clip starts of the improvised/test rows (s)
SPEAKERS = "P0016A|P0015"
REL = "data/seamless_2t_2s_questions"


def load_source(real_dir: Path) -> np.ndarray:
    """The real dialogue as int16 ``(2, n)`` (the exact stored samples)."""
    data, sr = sf.read(str(real_dir / f"{STEM}.wav"), dtype="int16", always_2d=True)
    assert sr == SR and data.shape[1] == 2
    return np.ascontiguousarray(data.T)


def build_spear_source(real_dir: Path, root: Path, *, bad_rows: bool = True) -> dict:
    """Write an upstream-layout SPEAR folder under ``root`` (``root/data/seamless_2t_2s_questions``).

    improvised/test: one row per clip start in :data:`OFFSETS` (input = both channels from the
    offset to the question end; human answer = channel 1 from 15.46 s for :data:`A_LEN` s copied
    to both channels, ``answer_start_time`` = -0.02 s), plus (``bad_rows``) a row whose clip is
    missing and a row with an unsafe path. naturalistic/dev: one row (offset 1 s). Returns
    the expected int16 samples by file name.
    """
    turns = json.loads((real_dir / f"{STEM}.json").read_text())["turns"]
    question_text = turns[0]["text"]
    answer_text = turns[4]["text"]
    src = load_source(real_dir)
    q_end_n = round(Q_END_ABS * SR)
    a0 = round(A_START_ABS * SR)
    answer = np.stack([src[1, a0 : a0 + round(A_LEN * SR)]] * 2)
    expected: dict[str, np.ndarray] = {}

    def write_split(split: str, subset: str, offsets, extra_rows=()):
        base = root / REL / "inputs" / split / subset
        (base / "audios").mkdir(parents=True, exist_ok=True)
        ans_dir = root / REL / "answers" / split / subset
        ans_dir.mkdir(parents=True, exist_ok=True)
        rows = []
        for k, off in enumerate(offsets):
            name = f"V00_S0001_I0000000{1 if subset == 'improvised' else 2}_P0016A_P0015_{k}.wav"
            clip = src[:, round(off * SR) : q_end_n]
            sf.write(str(base / "audios" / name), clip.T, SR, subtype="PCM_16")
            sf.write(str(ans_dir / name), answer.T, SR, subtype="PCM_16")
            expected[name] = clip
            expected["answer:" + name] = answer
            rows.append({
                "audio_path": f"{REL}/inputs/{split}/{subset}/audios/{name}",
                "answer_audio_path": f"{REL}/answers/{split}/{subset}/{name}",
                "context_end_time": repr(max(0.0, 0.78 - off)),
                "question_end_time": repr(clip.shape[1] / SR),
                "answer_duration": repr(A_LEN),
                "speakers": SPEAKERS,
                "conversation_id": "V00_S0001_I00000001",
                "transcript_question": f"P0016A: {question_text}",
                "transcript_answer": f"P0015: {answer_text}",
                "answer_start_time": repr(round(A_START_ABS - Q_END_ABS, 6)),
            })
        rows.extend(extra_rows)
        with open(base / "metadata.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(SPEAR_COLUMNS))
            w.writeheader()
            w.writerows(rows)
        return base / "metadata.csv"

    bad = []
    if bad_rows:
        template = {c: "" for c in SPEAR_COLUMNS} | {"context_end_time": "0.0", "question_end_time": "1.0"}
        bad = [template | {"audio_path": f"{REL}/inputs/test/improvised/audios/missing_clip.wav"},
               template | {"audio_path": "../../../../etc/passwd"}]
    improvised = write_split("test", "improvised", OFFSETS, bad)
    naturalistic = write_split("dev", "naturalistic", (1.0,))
    return {"expected": expected, "improvised_csv": improvised, "naturalistic_csv": naturalistic,
            "source": root / REL, "answer_start_time": round(A_START_ABS - Q_END_ABS, 6)}


@pytest.fixture(scope="module")
def built(real_dir, tmp_path_factory):
    from spear_metrics.cli import main

    root = tmp_path_factory.mktemp("spear_src")
    info = build_spear_source(real_dir, root)
    hub = tmp_path_factory.mktemp("hub") / "seamless_2t_2s_questions"
    rc = main(["build-dataset", "--source", str(info["source"]), "--out", str(hub), "--no-progress"])
    assert rc == 0
    return info, hub


def _samples(decoder) -> np.ndarray:
    """The decoder's own samples, ``(channels, n)`` float32 (never ``["array"]``, which may mix)."""
    return decoder.get_all_samples().data.numpy()


def test_layout_card_and_skipped_rows(built):
    info, hub = built
    shards = sorted(str(p.relative_to(hub)) for p in hub.rglob("*.parquet"))
    assert shards == ["data/improvised/test-00000-of-00001.parquet", "data/naturalistic/dev-00000-of-00001.parquet"]
    card = (hub / "README.md").read_text()
    header = yaml.safe_load(card.split("---\n")[1])
    configs = {c["config_name"]: c for c in header["configs"]}
    assert set(configs) == {"all", "improvised", "naturalistic"}
    assert configs["all"].get("default") is True and not configs["improvised"].get("default")
    # absent split/subset pairs are simply absent: naturalistic has no test, improvised no dev
    assert [d["split"] for d in configs["naturalistic"]["data_files"]] == ["dev"]
    assert [d["split"] for d in configs["improvised"]["data_files"]] == ["test"]
    assert {d["split"] for d in configs["all"]["data_files"]} == {"dev", "test"}
    skipped = [json.loads(line) for line in (hub / "skipped_rows.jsonl").read_text().splitlines()]
    reasons = {s["row"]: s["reason"] for s in skipped}
    assert len(skipped) == 2 and set(reasons) == {4, 5}  # the two bad rows after the four good ones
    assert "not found" in reasons[4] and "missing_clip.wav" in reasons[4]
    assert "escapes the data root" in reasons[5]
    report = json.loads((hub / "build_report.json").read_text())
    assert report["counts"] == {"improvised": {"test": 4}, "naturalistic": {"dev": 1}}


def test_parquet_holds_audio_bytes_not_paths(built):
    import pyarrow.parquet as pq

    _, hub = built
    t = pq.read_table(hub / "data/improvised/test-00000-of-00001.parquet")
    for cell in t.column("audio").to_pylist() + t.column("answer_audio").to_pylist():
        assert cell["bytes"] and cell["bytes"][:4] == b"RIFF"  # the WAV file itself, not a path
        assert "/" not in cell["path"]  # just the file name: nothing points outside the shard


def test_load_dataset_keeps_both_channels_exactly(built):
    from datasets import load_dataset

    info, hub = built
    ds = load_dataset(str(hub), "improvised", split="test")
    assert len(ds) == len(OFFSETS)
    assert {"audio", "answer_audio", "subset", *SPEAR_COLUMNS} <= set(ds.column_names)
    for i, off in enumerate(OFFSETS):
        row = ds[i]
        name = Path(row["audio_path"]).name
        assert row["subset"] == "improvised"
        assert row["answer_start_time"] == pytest.approx(info["answer_start_time"], abs=1e-12)
        got = _samples(row["audio"])
        assert row["audio"].metadata.sample_rate == 16_000
        want = info["expected"][name].astype(np.float32) / 32768.0
        assert got.shape == want.shape and got.shape[0] == 2
        np.testing.assert_array_equal(got, want)  # int16 -> float, bit-exact, channels not mixed
        # the two speakers really are different signals (FEE016 talks, MEO015 mostly listens)
        assert np.abs(got[0]).mean() > 3 * np.abs(got[1]).mean()
        assert row["question_end_time"] == pytest.approx(got.shape[1] / 16_000, abs=1e-9)
        ans = _samples(row["answer_audio"])
        np.testing.assert_array_equal(ans, info["expected"]["answer:" + name].astype(np.float32) / 32768.0)


def test_all_config_is_default_and_pools_subsets(built):
    from datasets import load_dataset

    _, hub = built
    dev = load_dataset(str(hub), split="dev")  # default config = all
    assert len(dev) == 1 and dev[0]["subset"] == "naturalistic"
    test = load_dataset(str(hub), "all", split="test")
    assert len(test) == len(OFFSETS)
    nat = load_dataset(str(hub), "naturalistic", split="dev")
    assert _samples(nat[0]["audio"]).shape[0] == 2


def test_rebuild_refuses_without_overwrite(built, capsys):
    from spear_metrics.cli import main

    info, hub = built
    assert main(["build-dataset", "--source", str(info["source"]), "--out", str(hub), "--no-progress"]) == 2
    assert "--overwrite" in capsys.readouterr().err


class FakeHfApi:
    """Stands in for ``huggingface_hub.HfApi`` at the boundary: records calls, no network."""

    instances: list["FakeHfApi"] = []

    def __init__(self, token=None, **kw):
        self.token = token
        self.calls: list[tuple[str, dict]] = []
        FakeHfApi.instances.append(self)

    def create_repo(self, **kw):
        self.calls.append(("create_repo", kw))

    def upload_folder(self, **kw):
        self.calls.append(("upload_folder", kw))

        class Info:
            commit_url = f"https://huggingface.co/datasets/{kw['repo_id']}/commit/abc"

        return Info()


def test_push_dataset_uploads_the_folder_as_a_dataset(built):
    from spear_datasets.hub import push_dataset

    _, hub = built
    api = FakeHfApi()
    url = push_dataset(hub, "someone/spear-test", api=api)
    assert url.endswith("/commit/abc")
    (name, create), (name2, up) = api.calls
    assert name == "create_repo" and create["repo_type"] == "dataset" and create["exist_ok"] is True
    assert name2 == "upload_folder" and up["repo_type"] == "dataset" and up["repo_id"] == "someone/spear-test"
    assert Path(up["folder_path"]) == hub and "data/**" in up["allow_patterns"] and "README.md" in up["allow_patterns"]


def test_push_from_cli_never_prints_the_token(built, monkeypatch, capsys, tmp_path):
    import huggingface_hub

    from spear_metrics.cli import main

    info, hub = built
    secret = "hf_THIS_IS_A_SECRET_TOKEN_123"
    monkeypatch.setenv("HF_TOKEN", secret)
    FakeHfApi.instances.clear()
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    out = tmp_path / "hub2"
    rc = main(["build-dataset", "--source", str(info["source"]), "--out", str(out), "--no-progress", "--push", "me/spear"])
    captured = capsys.readouterr()
    assert rc == 0 and "pushed to https://huggingface.co/datasets/me/spear" in captured.out
    assert secret not in captured.out + captured.err
    (api,) = FakeHfApi.instances
    assert api.token is None  # left to huggingface_hub (HF_TOKEN / login), never handled by us
