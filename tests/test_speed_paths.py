"""The fast paths give the values of the plain paths: one decode per file shared by every view
and dimension, the runner's read-ahead, the cut-then-VAD pass only where the onset is negative,
threads per process. (Speed itself is measured by scripts/bench_full_split.py, not here.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from spear_datasets.audio import load_audio, write_wav
from spear_datasets.schema import read_metadata
from spear_metrics.core import dimension as dimension_mod
from spear_metrics.core.dimension import Sample, cpu_share
from spear_metrics.core.registry import load_dimension
from spear_metrics.core.scoring import prepare_rows, score_samples

from conftest import REAL, STEREO_DIALOGUE
from helpers import make_clips, row, write_rows

JFK = REAL / "faster-whisper__jfk.flac"  # 44.1 kHz, 2 channels, 24-bit FLAC
VCTK = REAL / "speechbrain__p225_002.wav"  # 48 kHz mono


def _counting_decode(monkeypatch) -> dict[str, int]:
    calls: dict[str, int] = {}
    real = dimension_mod.decode

    def counted(path):
        calls[Path(path).name] = calls.get(Path(path).name, 0) + 1
        return real(path)

    monkeypatch.setattr(dimension_mod, "decode", counted)
    return calls


def _folder(tmp_path: Path, answers: list[Path], onsets: list[float | None]) -> Path:
    q, _ = make_clips(STEREO_DIALOGUE, tmp_path)
    rows = []
    for i, (a, ast) in enumerate(zip(answers, onsets)):
        p = tmp_path / f"in{i}.wav"
        if not p.exists():
            os.link(q, p)
        rows.append(row(p.name, str(a), ast))
    return write_rows(tmp_path / "metadata.csv", rows)


def test_each_file_is_decoded_once_whatever_the_views(real_dir, tmp_path, monkeypatch):
    """Input clip as stereo and as a mix, answer resampled from 44.1 kHz: one decode per file,
    and each view equals what the audio loader gives for that file on its own."""
    calls = _counting_decode(monkeypatch)
    meta = _folder(tmp_path, [JFK], [None])
    (s,) = prepare_rows(read_metadata(meta), meta.parent).samples
    keep, mix, ans = s.input_audio("keep"), s.input_audio("mix"), s.answer_audio()
    assert calls == {"in0.wav": 1, JFK.name: 1}
    np.testing.assert_array_equal(keep, load_audio(s.audio_path, channels="keep", resampler="torchaudio"))
    np.testing.assert_array_equal(mix, load_audio(s.audio_path, channels="mix", resampler="torchaudio"))
    np.testing.assert_array_equal(ans, load_audio(JFK, channels="mix", resampler="torchaudio"))
    assert ans.shape == (1, round(11.0 * 16000))  # 11 s at 16 kHz, channels averaged
    assert keep.shape[0] == 2 and mix.shape[0] == 1
    s.release()
    assert s._cache == {}


def test_two_dimensions_share_one_decode_per_file(real_dir, tmp_path, monkeypatch):
    """interruptions + explainable_features in one run: each input clip and each answer is
    decoded once, and nothing stays cached once a batch is scored (memory does not grow with
    the rows)."""
    calls = _counting_decode(monkeypatch)
    answers = [JFK, VCTK, REAL / "lhotse__ES2011a.Headset-0-40s-46s.wav", JFK, VCTK]
    meta = _folder(tmp_path, answers, [None, -0.5, 0.3, -1.0, 0.0])
    prep = prepare_rows(read_metadata(meta), meta.parent)
    dims = [load_dimension("interruptions"), load_dimension("explainable_features")]
    res = score_samples(dims, prep.samples, batch_size=2)
    assert all(r.ok for r in res), [r.error for r in res]
    assert {f"in{i}.wav": 1 for i in range(5)}.items() <= calls.items()
    assert calls[JFK.name] == 2 and calls[VCTK.name] == 2  # two rows each: once per row
    assert all(s._cache == {} for s in prep.samples)


def test_batching_changes_no_value_and_no_failure_reason(real_dir, tmp_path):
    """The same rows scored one per batch and five per batch (one shared decode per file) give
    the same values; a missing answer fails with the loader's reason either way."""
    answers = [JFK, VCTK, tmp_path / "missing.wav", REAL / "lhotse__ES2011a.Headset-0-40s-46s.wav", JFK]
    meta = _folder(tmp_path, answers, [None, -0.5, 0.3, -1.0, 0.0])
    dims = [load_dimension("interruptions"), load_dimension("explainable_features")]
    out = []
    for bs in (1, 5):
        prep = prepare_rows(read_metadata(meta), meta.parent)
        out.append([json.dumps(r.to_json(), sort_keys=True) for r in score_samples(dims, prep.samples, batch_size=bs)])
    assert out[0] == out[1]
    failed = [json.loads(o) for o in out[0] if json.loads(o)["status"] != "ok"]
    assert len(failed) == 1 and "not found" in failed[0]["error"] and "missing.wav" in failed[0]["error"]


def test_cut_answer_is_run_through_vad_only_when_the_onset_is_negative(real_dir, tmp_path, monkeypatch):
    """Per row: VAD on the mixed input clip and on the answer; a third pass on the answer cut
    at the skip point only where answer_start_time < 0 (skip 0 = the whole answer's VAD)."""
    _, talk = make_clips(STEREO_DIALOGUE, tmp_path, pad_s=0.5)
    meta = _folder(tmp_path, [talk] * 4, [None, 0.0, 0.4, -0.3])
    dim = load_dimension("interruptions")
    lengths: list[int] = []
    real_vad = dim._vad

    def counted(wav):
        lengths.append(np.asarray(wav).reshape(-1).size)
        return real_vad(wav)

    monkeypatch.setattr(dim, "_vad", counted)
    prep = prepare_rows(read_metadata(meta), meta.parent)
    for s in prep.samples[:3]:
        dim.score_sample(s)
    assert len(lengths) == 6
    dim.score_sample(prep.samples[3])
    assert len(lengths) == 9
    answer_n = prep.samples[3].answer_audio().shape[1]
    assert lengths[-1] == answer_n - round(0.3 * 16000)  # the cut answer


def test_cpu_share_divides_the_cores_among_local_processes(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert cpu_share() == cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores * 4))
    assert cpu_share() == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert cpu_share() == max(1, cores // 2)


def test_decoded_names_the_two_files_only(real_dir, tmp_path):
    q, a = make_clips(STEREO_DIALOGUE, tmp_path)
    write_wav(tmp_path / "x.wav", np.zeros(1600, np.float32))
    s = Sample(row=0, meta=None, audio_path=q, answer_audio_path=a)
    with pytest.raises(ValueError):
        s.decoded("question")
    wav, sr = s.decoded("input")
    assert sr == 16000 and wav.shape[0] == 2


# ------------------------------------------------- model-based dimensions: batch size, dtype, order


def test_batch_size_given_or_from_free_memory():
    from spear_metrics.core.batching import batch_size_for

    never = lambda: pytest.fail("no probe when the size is given or on CPU")  # noqa: E731
    assert batch_size_for(12, "cpu", never) == 12 and batch_size_for("3", "cpu", never) == 3
    assert batch_size_for("auto", "cpu", never, default=8) == 8  # CPU: the cores, not memory, set it
    # CUDA: 0.8 x free / per-item bytes, within [1, cap]; the probe runs once it is needed
    gib = 1 << 30
    assert batch_size_for("auto", "cuda:0", lambda: 0.5 * gib, free_bytes=lambda d: 20 * gib) == 32
    assert batch_size_for(None, "cuda:0", lambda: 0.5 * gib, free_bytes=lambda d: 20 * gib, cap=16) == 16
    assert batch_size_for("auto", "cuda:0", lambda: 40 * gib, free_bytes=lambda d: 20 * gib) == 1
    for bad in (0, -2, "many"):
        with pytest.raises(ValueError):
            batch_size_for(bad, "cpu", never)


def test_model_options_are_checked_before_any_row():
    from spear_metrics.core.batching import model_dtype
    from spear_metrics.core.dimension import OptionError

    import torch

    assert model_dtype(None, "cpu") == torch.float32 and model_dtype("auto", "cpu") == torch.float32
    assert model_dtype("bf16", "cpu") == torch.bfloat16 and model_dtype("float16", "cpu") == torch.float16
    for dim in ("emotions", "language_dialect"):
        load_dimension(dim, model_batch_size="auto", model_dtype="bfloat16")
        with pytest.raises(OptionError, match="model_batch_size"):
            load_dimension(dim, model_batch_size=0)
        with pytest.raises(OptionError, match="model_dtype"):
            load_dimension(dim, model_dtype="int8")


def test_half_precision_heads_stay_within_tolerance(real_dir, tmp_path):
    """Tiny random Vox-Profile emotion head and MMS-LID layout in bfloat16 vs float32 on real
    speech: A/V/D scores within 0.02, the same top language; ``auto`` batch size on CPU = 8."""
    from model_fixtures import tiny_lid, tiny_vox

    from spear_metrics.core.vox_whisper import EMOTION_DIM_HEADS, VoxWhisper
    from spear_metrics.language_dialect.definition import LanguageID

    waves = [load_audio(REAL / n, channels="mix", resampler="torchaudio")[0]
             for n in ("speechbrain__p225_002.wav", "faster-whisper__jfk.flac", "lhotse__ES2011a.Headset-0-40s-46s.wav")]
    emo = tiny_vox(tmp_path / "emo", EMOTION_DIM_HEADS, seed=1)
    full = VoxWhisper(str(emo), EMOTION_DIM_HEADS, device="cpu")
    half = VoxWhisper(str(emo), EMOTION_DIM_HEADS, device="cpu", dtype="bfloat16")
    import torch

    assert full.batch_size("auto") == 8 and half.net.backbone_model.encoder.conv1.weight.dtype == torch.bfloat16
    a, b = full.predict(waves, batch_size="auto"), half.predict(waves, batch_size=2)
    for x, y in zip(a, b):
        for h in EMOTION_DIM_HEADS:
            assert abs(float(x[h][0]) - float(y[h][0])) < 0.02
    lid = tiny_lid(tmp_path / "lid")
    p32 = LanguageID(str(lid), device="cpu").predict(waves, batch_size="auto")
    p16 = LanguageID(str(lid), device="cpu", dtype="bfloat16").predict(waves, batch_size=1)
    assert [l for l, _ in p32] == [l for l, _ in p16] == ["eng"] * 3
    assert all(abs(p - q) < 0.02 for (_, p), (_, q) in zip(p32, p16))


def test_model_rows_are_scored_longest_answer_first(real_dir, tmp_path):
    """For model-based dimensions the runner orders rows by answer duration read from the
    header (a 48 kHz file is bigger than a 16 kHz one of the same length, not longer)."""
    from spear_metrics.core import scoring

    seen: list[float] = []

    class Probe(dimension_mod.Dimension):
        name = "probe"
        model_based = True

        def score_batch(self, samples):
            seen.extend(s.answer_audio().shape[1] / 16000 for s in samples)
            return [{} for _ in samples]

        def aggregate(self, rows, values):
            return {}

    answers = [VCTK, JFK, REAL / "lhotse__ES2011a.Headset-0-40s-46s.wav"]  # 4.06 s at 48 kHz, 11 s, 6 s
    meta = _folder(tmp_path, answers, [None, None, None])
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(scoring, "load_dimensions", lambda names, options=None: [Probe()])
    monkeypatch.setattr(scoring, "parse_metrics", lambda m: ["probe"])
    try:
        scoring.run_score(meta, "probe", tmp_path / "out", batch_size=1, progress=False)
    finally:
        monkeypatch.undo()
    assert seen == sorted(seen, reverse=True) and len(seen) == 3


def test_loading_the_vad_leaves_torch_threads_alone(real_dir):
    """silero_vad's import sets torch to one thread for the whole process; loading the VAD must
    not leave the model-based dimensions of the same run on one core."""
    import subprocess
    import sys

    code = ("import torch; torch.set_num_threads(2); import numpy as np; from spear_metrics.core.vad import speech_segments; "
            "speech_segments(np.zeros(16000, np.float32)); speech_segments(np.zeros(16000, np.float32), backend='jit'); "
            "print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "2"


def test_freed_audio_memory_is_returned_after_each_batch(real_dir, tmp_path, monkeypatch):
    """The runner trims the C heap once per scored batch (glibc ``malloc_trim``): the peak RSS of
    a run must not grow with its rows (checked by scripts/bench_full_split.py; here: it is called)."""
    from spear_metrics.core import scoring

    calls = []
    monkeypatch.setattr(scoring, "_return_freed_memory", lambda: calls.append(1))
    meta = _folder(tmp_path, [VCTK, JFK, VCTK], [None, -0.5, 0.2])
    prep = prepare_rows(read_metadata(meta), meta.parent)
    score_samples([load_dimension("interruptions")], prep.samples, batch_size=2)
    assert len(calls) == 2  # two batches
    monkeypatch.undo()
    scoring._return_freed_memory()  # the real call is harmless here (glibc, or a no-op)


def test_score_reads_the_next_batch_ahead_and_decodes_each_file_once(real_dir, tmp_path, monkeypatch):
    """Through ``run_score`` (one batch per call, the read-ahead in ``run_resumable``): each
    file decoded once, no audio left cached on any row afterwards, the same values as an
    in-memory run."""
    from spear_metrics.core import scoring

    calls = _counting_decode(monkeypatch)
    answers = [JFK, VCTK, REAL / "lhotse__ES2011a.Headset-0-40s-46s.wav", JFK]
    meta = _folder(tmp_path, answers, [None, -0.5, 0.3, -1.0])
    seen: list = []
    real_prepare = scoring.prepare_rows

    def keep(*a, **k):
        prep = real_prepare(*a, **k)
        seen.extend(prep.samples)
        return prep

    monkeypatch.setattr(scoring, "prepare_rows", keep)
    scoring.run_score(meta, "interruptions,explainable_features", tmp_path / "out", batch_size=1, progress=False)
    assert {f"in{i}.wav": 1 for i in range(4)}.items() <= calls.items() and calls[JFK.name] == 2
    assert len(seen) == 4 and all(s._cache == {} for s in seen)
    ours = [json.loads(l) for l in (tmp_path / "out" / "per_sample.jsonl").read_text().splitlines()]
    mem = score_samples([load_dimension("interruptions"), load_dimension("explainable_features")],
                        real_prepare(read_metadata(meta), meta.parent).samples, batch_size=4)
    assert [o["latency_ms"] for o in ours] == [r.values["latency_ms"] for r in mem]
