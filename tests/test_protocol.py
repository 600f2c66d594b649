import numpy as np
import pytest

from spear_datasets.audio import audio_info, load_audio
from spear_datasets.protocol import Turn, select_samples, write_samples
from spear_datasets.schema import read_metadata
from spear_datasets.sources.turns import map_speakers, read_rttm, read_stm, split_by_speaker


def test_selection_on_real_call_transcript(real_dir):
    turns = read_stm(real_dir / "pyannote-audio__sample.stm")
    assert len(turns) == 13
    samples = select_samples(turns)
    # "Hello?" by Diane (6.68 s) is answered by Sheila's 0.521 s "Hello?": shorter than 1 s, dropped.
    # Sheila's "Hello?" (7.634-8.155) is answered by Diane's two turns 8.436-9.798 (1.362 s).
    # Sheila's "... so what can I say?" (24.058-28.425) is answered by Diane 28.445-29.987.
    assert [s.question.start for s in samples] == [7.634, 24.058]
    first, second = samples
    assert [t.text for t in first.answer] == ["Oh, hello.", "I didn't know you were there."]
    assert first.answer_duration == pytest.approx(1.362)
    assert first.answer_start_time == pytest.approx(8.436 - 8.155)
    assert len(second.context) == 4  # context + question = 5 turns
    assert second.clip_start == 14.444
    assert second.answer_start_time == pytest.approx(0.02)


def test_overlapping_answer_has_negative_start_time():
    turns = [Turn("A", 0.0, 3.0, "Are you coming?"), Turn("B", 2.5, 4.0, "Yes I am coming")]
    (s,) = select_samples(turns)
    assert s.answer_start_time == pytest.approx(-0.5)


def test_write_samples_real_call(tmp_path, real_dir):
    segs = read_rttm(real_dir / "pyannote-audio__sample.rttm")
    turns = read_stm(real_dir / "pyannote-audio__sample.stm")
    mapping = map_speakers(turns, segs)
    assert mapping == {"Diane": "speaker90", "Sheila": "speaker91"}
    turns = [Turn(mapping[t.speaker], t.start, t.end, t.text) for t in turns]
    mono = load_audio(real_dir / "pyannote-audio__sample.wav", channels="mix")[0]
    channels = split_by_speaker(mono, segs, 16000)
    rows = write_samples(select_samples(turns), channels, tmp_path, conversation_id="sample")
    assert len(rows) == 2
    r = rows[1]
    assert r.context_end_time == pytest.approx(24.058 - 14.444)
    assert r.question_end_time == pytest.approx(28.425 - 14.444)
    clip = load_audio(tmp_path / r.audio_path)
    assert clip.shape == (2, round(28.425 * 16000) - round(14.444 * 16000))
    # 21.935-23.978 s only Sheila (speaker91, channel 1) speaks: channel 0 is digital silence there
    a, b = int((21.935 - 14.444 + 0.3) * 16000), int((23.978 - 14.444 - 0.3) * 16000)
    assert np.abs(clip[0, a:b]).max() == 0 and np.abs(clip[1, a:b]).max() > 0.01
    assert audio_info(tmp_path / r.answer_audio_path).duration == pytest.approx(1.542, abs=1e-3)
    assert r.transcript_answer == "speaker90: Oh, I don't hear that in New Jersey now."


def _upstream_select_restated(turns, n_max=5, min_answer=1.0):
    """``get_end_with_question`` of SPEAR's ``bin/prepare_data_from_seamless.py``, re-stated from
    reading it: turns sorted by (start, end, speaker, text); per question, (context_end_time,
    question_end_time, answer_duration, answer_start_time) relative to the clip start."""
    turns = sorted(turns, key=lambda t: (t["start"], t["end"], t["speaker_id"], t["text"]))
    out = []
    for row, turn in enumerate(turns[:-1]):
        if turn["text"].strip().endswith("?") and turn["speaker_id"] != turns[row + 1]["speaker_id"]:
            k = 1
            while row + k < len(turns) and turns[row + k]["speaker_id"] != turn["speaker_id"]:
                k += 1
            sel = turns[max(0, row - n_max + 1): row + k]
            start, end = sel[0]["start"], max(t["end"] for t in sel)
            dur = end - turns[row + 1]["start"]
            if dur < min_answer:
                continue
            out.append((turn["start"] - start, turn["end"] - start, dur, turns[row + 1]["start"] - turn["end"]))
    return out


def test_selection_side_by_side_with_upstream():
    """The selection equals upstream's on turns with a question that ends after its answer (the
    answer runs to the latest end of the exchange), a one-word answer dropped, ties in start time."""
    from spear_datasets.protocol import Turn, select_samples

    raw = [("A", 0.0, 2.0, "Hello there."), ("B", 2.5, 3.0, "Hi."), ("A", 3.2, 9.0, "So, do you come here often?"),
           ("B", 4.0, 4.6, "Mm-hmm."), ("A", 9.5, 10.0, "Really?"), ("B", 10.2, 10.6, "Yes."),
           ("A", 11.0, 12.0, "And then?"), ("B", 11.0, 14.0, "Then we left."), ("A", 15.0, 16.0, "Okay.")]
    turns = [Turn(s, a, b, t) for s, a, b, t in raw]
    want = _upstream_select_restated([{"speaker_id": s, "start": a, "end": b, "text": t} for s, a, b, t in raw])
    got = [(r.context_end_time, r.question_end_time, r.answer_duration, r.answer_start_time)
           for r in (smp.to_row("a.wav", "b.wav", ["A", "B"], "V0_S0_I0") for smp in select_samples(turns))]
    assert len(got) == len(want) and [x for g in got for x in g] == pytest.approx([x for w in want for x in w])
    # the long question (3.2-9.0 s) answered by a 0.6 s backchannel: the exchange ends at 9.0 s, so its
    # answer lasts 9.0 - 4.0 = 5.0 s and is kept; "Really?" answered by 0.4 s of "Yes." is dropped
    assert len(want) == 2 and want[0][2] == pytest.approx(5.0)
