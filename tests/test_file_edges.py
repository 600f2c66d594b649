"""Files that are almost right: a metadata CSV row with more or fewer cells than its header, an
unterminated quote, a 100 MB transcript, a WAV with a repeated header chunk, a pathological line
in a work log. Each becomes a failed row (with its reason) or a one-line refusal of the whole
file; never a silently shifted or swallowed row."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from spear_datasets.audio import AudioError, audio_info
from spear_datasets.schema import MAX_TEXT_CHARS, MetadataError, RowError, parse_row, read_metadata
from spear_metrics.agents.base import AgentAnswer, AgentOutputError, validate_answer
from spear_metrics.core.records import read_jsonl

HEADER = "audio_path,answer_audio_path,context_end_time,question_end_time\n"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "metadata.csv"
    p.write_text(text, encoding="utf-8")
    return p


def test_rows_with_more_or_fewer_cells_fail_in_place(tmp_path):
    """Row 1 has a fifth (non-empty) cell, row 2 only three: neither is matched to the columns
    (a shifted row would read a path as a time); both keep their place and fail with the count;
    rows 0 and 3 parse, and an extra EMPTY cell (a trailing comma) is harmless."""
    p = _write(tmp_path, HEADER + "a.wav,b.wav,0,1.5\n"
                                  "c.wav,d.wav,0,1.5,surprise\n"
                                  "e.wav,0,1.5\n"
                                  "g.wav,h.wav,0.5,2.0,\n")
    raw = read_metadata(p)
    assert len(raw) == 4
    assert parse_row(raw[0]).question_end_time == 1.5
    assert parse_row(raw[3]).context_end_time == 0.5
    with pytest.raises(RowError, match="CSV line 3 has 5 cells, the header 4"):
        parse_row(raw[1])
    with pytest.raises(RowError, match="CSV line 4 has 3 cells, the header 4"):
        parse_row(raw[2])
    assert raw[1]["audio_path"] == "c.wav" and raw[2]["audio_path"] == "e.wav"  # the failed rows keep their name


def test_an_unterminated_quote_refuses_the_file_in_one_line(tmp_path):
    """An opening quote never closed used to turn the rest of the file into one cell (rows 2 and
    3 vanished); it is now a one-line refusal naming the line."""
    p = _write(tmp_path, HEADER + 'a.wav,b.wav,0,"1.5\nc.wav,d.wav,0,1.5\ne.wav,f.wav,0,1.5\n')
    with pytest.raises(MetadataError, match="unterminated quote") as e:
        read_metadata(p)
    assert "\n" not in str(e.value)


def test_a_huge_transcript_is_a_failed_row_not_a_metadata_cell(tmp_path):
    """A transcript over MAX_TEXT_CHARS fails its row when read (parse_row) and when an adapter
    returns it (validate_answer), so it never enters metadata.csv; MAX_TEXT_CHARS itself passes."""
    ok = "x" * MAX_TEXT_CHARS
    raw = {"audio_path": "a.wav", "answer_audio_path": "b.wav", "context_end_time": "0",
           "question_end_time": "1.5", "transcript_answer": ok}
    assert len(parse_row(raw).transcript_answer) == MAX_TEXT_CHARS
    with pytest.raises(RowError, match=f"transcript_answer holds {MAX_TEXT_CHARS + 1} characters"):
        parse_row(raw | {"transcript_answer": ok + "y"})
    audio = np.zeros(1600, np.float32)
    validate_answer(AgentAnswer(audio, 16_000, text=ok))
    with pytest.raises(AgentOutputError, match="answer text holds"):
        validate_answer(AgentAnswer(audio, 16_000, text=ok + "y"))


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    out, pos = [], 12
    while pos + 8 <= len(data):
        cid, size = struct.unpack("<4sI", data[pos:pos + 8])
        out.append((cid, data[pos + 8:pos + 8 + size]))
        pos += 8 + size + (size & 1)
    return out


def _riff(chunks: list[tuple[bytes, bytes]]) -> bytes:
    body = b"WAVE" + b"".join(cid + struct.pack("<I", len(b)) + b + (b"\0" if len(b) & 1 else b"") for cid, b in chunks)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def test_a_wav_that_declares_its_format_twice_is_refused(real_dir, tmp_path):
    """A real 16 kHz recording with a second ``fmt `` chunk claiming 48 kHz: which one a decoder
    uses is not agreed, so the file is refused with the reason (the unmodified copy reads)."""
    src = real_dir / "pyannote-audio__dev00.wav"
    good = tmp_path / "good.wav"
    shutil.copy(src, good)
    assert audio_info(good).sample_rate == 16_000
    chunks = _chunks(good.read_bytes())
    fmt = next(b for c, b in chunks if c == b"fmt ")
    other = fmt[:4] + struct.pack("<I", 48_000) + fmt[8:]
    i = next(k for k, (c, _) in enumerate(chunks) if c == b"fmt ")
    bad = tmp_path / "twice.wav"
    bad.write_bytes(_riff(chunks[:i + 1] + [(b"fmt ", other)] + chunks[i + 1:]))
    with pytest.raises(AudioError, match="a second fmt chunk"):
        audio_info(bad)


def test_pathological_work_log_lines_are_skipped_not_fatal(tmp_path, monkeypatch):
    """A line nested 100,000 deep (RecursionError in the JSON parser: it crashed every resume) and
    a line longer than the line limit are skipped (their rows are redone); the records around them
    are read."""
    import spear_metrics.core.records as records

    monkeypatch.setattr(records, "MAX_JSONL_LINE_CHARS", 1_000)
    log = tmp_path / "rank-0.jsonl"
    good = [{"row": 0, "status": "ok"}, {"row": 2, "status": "failed"}, {"row": 3, "status": "ok"}]
    log.write_text(json.dumps(good[0]) + "\n" + "[" * 100_000 + "\n" + json.dumps(good[1]) + "\n"
                   + '{"row": 1, "text": "' + "z" * 5_000 + '"}\n' + json.dumps(good[2]) + "\n", encoding="utf-8")
    assert list(read_jsonl(log)) == good


def test_score_profile_reference_without_its_models_stops_in_one_line(tmp_path, capsys):
    """``-o profile=reference`` names the published table's models: when they cannot be had the
    run stops with one line naming the model and exit 2 (as the docs promise), instead of exit 0
    with every WER/CER/UTMOS key null. The model paths are local folders that do not exist (no
    network involved)."""
    from _spear_samples import make_samples

    from spear_metrics.cli import main

    md = make_samples(tmp_path / "data")
    missing = tmp_path / "no-such-model"
    rc = main(["score", "--metadata", str(md["model"]), "--metrics", "speech_quality", "--out", str(tmp_path / "r"),
               "--no-progress", "-o", "profile=reference", "-o", f"whisper_model={missing}",
               "-o", f"qwen_asr_model={missing}", "-o", f"utmos_model={missing}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert any("profile=reference" in line and "no-such-model" in line for line in err), err


def test_backends_of_the_same_whisper_weights_share_one_model():
    """The demo's cascade agent, speech_quality and distributional each make their own embedded
    Whisper backend (different batch size and language): the weights are loaded once."""
    from spear_metrics.core.asr import load_asr

    a = load_asr("embedded")
    b = load_asr("embedded", batch_size=8, language="en")
    a.load()
    b.load()
    assert a._model is b._model


def test_demo_next_steps_name_programs_that_run_without_activating(monkeypatch, tmp_path):
    """The README's setup leaves .venv inactive: a printed next step names this environment's
    spearbench/python by path unless PATH already finds this environment's own."""
    import os
    import sys
    from pathlib import Path

    from spear_metrics.commands import runnable

    monkeypatch.setenv("PATH", str(tmp_path))  # nothing of this environment on PATH
    assert runnable("python") == os.path.relpath(sys.executable) if Path(sys.executable).is_relative_to(Path.cwd()) \
        else runnable("python") == sys.executable
    beside = Path(sys.executable).parent / "spearbench"
    if beside.exists():
        assert Path(runnable("spearbench")).resolve() == beside.resolve()
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # an activated environment
    assert runnable("python") == "python" and (runnable("spearbench") == "spearbench" or not beside.exists())


def test_scatter_keeps_runs_that_share_points_visible_and_titles_whole():
    """Four runs with the same (x, y) points (the demo's systems share their answer audio): each
    run keeps its own marker shape, hollow, earlier runs larger, so none hides another; a title
    longer than its figure is folded at spaces, never cut."""
    from spear_metrics.reports import plots

    xs, ys = [1.0, 2.0, 3.0], [10.0, 20.0, 15.0]
    fig = plots.scatter("WER against answer length " * 6, "answer duration (s)", "WER (%)",
                        [(f"run{k}", xs, ys) for k in range(4)])
    ax = fig.axes[0]
    cols = ax.collections
    assert len(cols) == 4
    paths = {tuple(map(tuple, c.get_paths()[0].vertices.round(3))) for c in cols}
    assert len(paths) == 4  # four different marker shapes
    sizes = [float(c.get_sizes()[0]) for c in cols]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 4
    assert all(len(c.get_facecolors()) == 0 or c.get_facecolors()[0][3] == 0 for c in cols)  # hollow
    title = ax.get_title()
    assert "\n" in title and title.replace("\n", " ").split() == ("WER against answer length " * 6).split()


def test_report_tests_table_says_why_several_keys_share_one_p_value():
    """Six F0 keys tested on 3 pairs share p = 0.500 (floor) and d_z = 1.155 (every difference
    has the same sign): the table says they are computed per key and why they coincide, naming
    the keys; a key with its own values (f0_max_hz) is not named."""
    from types import SimpleNamespace

    from spear_metrics.reports.html import _tests
    from spear_metrics.reports.page import Page

    def entry(diff, p_w, dz):
        return {"n": 3, "mean_a": 100.0 + diff, "mean_b": 100.0, "diff": diff, "diff_ci95": [0.0, diff],
                "p_value": None, "p_value_floor": None, "wilcoxon_p": p_w, "wilcoxon_floor": 0.5, "caution": None,
                "d_z": dz, "note": None, "unpaired": {}}

    keys = {f"f0_p{q}_hz": entry(0.01 * q, 0.5, 1.155) for q in (10, 25, 50, 75, 90)}
    keys["f0_mean_hz"] = entry(0.03, 0.5, 1.155)
    keys["f0_max_hz"] = entry(2.0, 0.25, 3.0)
    report = SimpleNamespace(comp={"notes": [], "keys": keys, "n_common": 3}, name="model", human_label="human")
    page = Page()
    _tests(page, "explainable_features", report)
    html = "".join(page.parts)
    note = next(p for p in page.parts if "show the same p-values" in p)
    assert all(k in note for k in keys if k != "f0_max_hz") and "f0_max_hz" not in note
    assert "n = 3 pairs" in note and html.count("show the same p-values") == 1
