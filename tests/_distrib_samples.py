"""Test helper: SPEAR samples cut at the speaker hand-overs of three real recorded conversations.

Conversations (``tests/fixtures/real``):

- ``sample``: pyannote.audio's 30 s telephone call (mono mix; RTTM turns, STM text), one channel
  per speaker cut from the mix with the RTTM turns (``split_by_speaker``, as the demo does);
- ``seriously``: the 60 s AMI excerpt, one headset recording per speaker, turns and text from
  the hand alignment in ``pyannote-audio__seriously_turns.json``;
- ``dev00``: 30 s AMI (mono float32 mix; RTTM turns, no text).

A sample is every turn of at least 0.3 s that follows another speaker's turn: the question is the
latest-ending earlier turn of another speaker (input clip: both speakers' channels up to its
end), the answer is the turn's speaker's channel over the turn, ``answer_start_time`` = turn start
minus question end (negative when they overlap).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from conftest import REAL

SR = 16000
MIN_ANSWER_S = 0.3


def _turns_sample():
    from spear_datasets.protocol import Turn
    from spear_datasets.sources.turns import map_speakers, read_rttm, read_stm

    segs = read_rttm(REAL / "pyannote-audio__sample.rttm")
    stm = read_stm(REAL / "pyannote-audio__sample.stm")
    mapping = map_speakers(stm, segs)
    text = [Turn(mapping[t.speaker], t.start, t.end, t.text) for t in stm]

    def words(seg):  # the STM utterances of the same speaker overlapping the segment
        return " ".join(t.text for t in text if t.speaker == seg.speaker and t.start < seg.end and t.end > seg.start)

    return [Turn(s.speaker, s.start, s.end, words(s)) for s in segs]


def _channels_from_mix(wav: Path, segs) -> dict[str, np.ndarray]:
    from spear_datasets.audio import load_audio
    from spear_datasets.sources.turns import split_by_speaker

    return split_by_speaker(load_audio(wav, sr=SR, channels="mix")[0], segs, SR)


def conversations():
    """``[(name, turns, channels)]`` of the three conversations (turns with text where known)."""
    from spear_datasets.audio import load_audio
    from spear_datasets.protocol import Turn
    from spear_datasets.sources.turns import read_rttm

    out = []
    segs = _turns_sample()
    out.append(("sample", segs, _channels_from_mix(REAL / "pyannote-audio__sample.wav", segs)))
    info = json.loads((REAL / "pyannote-audio__seriously_turns.json").read_text())
    chans = {v["speaker"]: load_audio(REAL / info["files"][k], sr=SR, channels="mix")[0] for k, v in info["channel_map"].items()}
    turns = [Turn(t["speaker"], t["start"], t["end"], "" if t["text"] == "(uncertain)" else t["text"])
             for t in info["turns_hand_alignment"]]
    out.append(("seriously", sorted(turns, key=lambda t: (t.start, t.end)), chans))
    segs = read_rttm(REAL / "pyannote-audio__dev00.rttm")
    out.append(("dev00", segs, _channels_from_mix(REAL / "pyannote-audio__dev00.wav", segs)))
    return out


def build_human(root: Path, names: tuple[str, ...] | None = None) -> Path:
    """Write the samples of the conversations (all, or ``names``) under ``root`` and return the
    human answers' metadata CSV (``root/human.csv``)."""
    from spear_datasets.audio import write_wav
    from spear_datasets.schema import SpearRow, write_metadata

    rows = []
    for conv, turns, chans in conversations():
        if names is not None and conv not in names:
            continue
        for i, b in enumerate(turns):
            if b.end - b.start < MIN_ANSWER_S:
                continue
            earlier = [a for a in turns[:i] if a.speaker != b.speaker and a.start < b.start]
            if not earlier:
                continue
            a = max(earlier, key=lambda t: t.end)
            ast = b.start - a.end
            if not -5.0 < ast < 3.0:
                continue
            q_end = int(round(a.end * SR))
            clip = np.stack([chans[a.speaker][:q_end], chans[b.speaker][:q_end]])
            ans = chans[b.speaker][int(round(b.start * SR)): int(round(b.end * SR))]
            stem = f"{conv}_{a.speaker}_{b.speaker}_{i}"
            write_wav(root / "audios" / f"{stem}.wav", clip, SR)
            write_wav(root / "answers" / f"{stem}.wav", ans[None, :], SR)
            rows.append(SpearRow(
                audio_path=f"audios/{stem}.wav", answer_audio_path=f"answers/{stem}.wav",
                context_end_time=round(a.start, 6), question_end_time=round(q_end / SR, 6),
                answer_duration=round(len(ans) / SR, 6), speakers=f"{a.speaker}|{b.speaker}", conversation_id=conv,
                transcript_question=f"{a.speaker}: {a.text}".strip(),
                transcript_answer=f"{b.speaker}: {b.text}" if b.text else "", answer_start_time=round(ast, 6)))
    return write_metadata(root / "human.csv", rows)


def fixed_delay(human_csv: Path, delay_s: float) -> Path:
    """The ``fixed-delay`` reference: the same answers, onset ``delay_s`` after the question end."""
    from spear_datasets.schema import parse_row, read_metadata, write_metadata

    rows = [replace(parse_row(r), answer_start_time=delay_s) for r in read_metadata(human_csv)]
    return write_metadata(human_csv.with_name("fixed-delay.csv"), rows)


def silence(human_csv: Path, duration_s: float = 2.0) -> Path:
    """The ``silence`` reference: ``duration_s`` of digital silence per question, no onset, no text."""
    from spear_datasets.audio import write_wav
    from spear_datasets.schema import parse_row, read_metadata, write_metadata

    root = human_csv.parent
    write_wav(root / "silence" / "silence.wav", np.zeros((1, int(duration_s * SR)), np.float32), SR)
    rows = [replace(parse_row(r), answer_audio_path="silence/silence.wav", answer_start_time=None,
                    transcript_answer="", answer_duration=duration_s) for r in read_metadata(human_csv)]
    return write_metadata(human_csv.with_name("silence.csv"), rows)


def pitched(human_csv: Path, factor: float, name: str = "pitched") -> Path:
    """A "model" that speaks the human answers ``factor`` times faster and higher (each answer
    resampled by ``1/factor`` and played at the original rate: F0 x factor, duration / factor)."""
    import soxr

    from spear_datasets.audio import load_audio, write_wav
    from spear_datasets.schema import parse_row, read_metadata, write_metadata

    root = human_csv.parent
    rows = []
    for r in read_metadata(human_csv):
        row = parse_row(r)
        wav = load_audio(root / row.answer_audio_path, sr=SR, channels="mix")[0]
        fast = soxr.resample(wav, SR * factor, SR).astype(np.float32)
        path = f"{name}/{Path(row.answer_audio_path).name}"
        write_wav(root / path, fast[None, :], SR)
        rows.append(replace(row, answer_audio_path=path, answer_duration=round(len(fast) / SR, 6)))
    return write_metadata(human_csv.with_name(f"{name}.csv"), rows)
