"""What counts as valid agent audio (``spear_metrics.agents.base.answer_samples``): float within
full scale, integer PCM converted by its scale, anything else a failed row with its reason.

The speech is the real JFK recording (11 s); an adapter that hands back its 16-bit PCM as an
int16 array must give the same answer as one that hands back floats, and an adapter that puts
int16 values into a float array must fail its row instead of being clipped into a square wave.
"""

from __future__ import annotations

import numpy as np
import pytest

from spear_datasets.audio import load_audio
from spear_metrics.agents import AgentAnswer, GenerationConfig
from spear_metrics.agents.base import FULL_SCALE_TOLERANCE, AgentOutputError, validate_answer
from spear_metrics.agents.harness import run_agent


@pytest.fixture(scope="module")
def speech(real_dir):
    x = load_audio(real_dir / "faster-whisper__jfk.flac", sr=16000, channels="mix")[0]
    pcm16 = np.round(x * 32767).astype(np.int16)  # what a 16-bit adapter holds
    return pcm16


def _offline(audio):
    class Agent:
        def respond(self, a, row, config):
            return AgentAnswer(audio, 16_000)

    clip = np.zeros((2, 16000), np.float32)
    return run_agent(Agent(), clip, None, GenerationConfig())


def test_integer_pcm_is_scaled_and_float_beyond_full_scale_fails(speech):
    ref = speech.astype(np.float32) / 32768.0
    # int16 through the harness's own call: the same samples as the float answer, not clipped
    _, wav16, sr, _ = _offline(speech)
    assert sr == 16_000 and wav16.shape == (1, len(speech))
    np.testing.assert_array_equal(wav16[0], ref)
    assert np.mean(np.abs(wav16) >= 1.0) == 0.0  # before: 87 % of the samples at full scale
    # int32 (the same PCM shifted up 16 bits) and 8-bit unsigned (centred on 128) by their scales
    np.testing.assert_array_equal(validate_answer(AgentAnswer(speech.astype(np.int32) << 16, 16_000))[0][0], ref)
    u8 = (speech.astype(np.int32) // 256 + 128).astype(np.uint8)
    np.testing.assert_allclose(validate_answer(AgentAnswer(u8, 16_000))[0][0], ref, atol=1 / 128 + 1e-9)
    assert validate_answer(AgentAnswer(np.array([0, 128, 255], np.uint8), 16_000))[0][0].tolist() == [-1.0, 0.0, 127 / 128]

    # the int16 values in a float array: refused with one line, whatever the harness would do next
    with pytest.raises(AgentOutputError, match="beyond full scale") as e:
        _offline(speech.astype(np.float32))
    assert "\n" not in str(e.value) and f"{float(np.abs(speech).max()):.6g}" in str(e.value)
    # float rounding (a bfloat16 cast of a full-scale peak) is inside the tolerance and clipped
    edge = ref.copy()
    edge[100] = 1.0 + FULL_SCALE_TOLERANCE
    edge[200] = -1.0 - FULL_SCALE_TOLERANCE / 2
    got = validate_answer(AgentAnswer(edge, 16_000))[0][0]
    assert got[100] == 1.0 and got[200] == -1.0 and np.array_equal(got[:100], ref[:100])
    edge[100] = 1.0 + 2 * FULL_SCALE_TOLERANCE
    with pytest.raises(AgentOutputError, match="beyond full scale"):
        validate_answer(AgentAnswer(edge, 16_000))
    # integer types without an agreed PCM scale (a list of Python ints is int64), and non-real data
    for bad, why in [(speech.astype(np.int64), "int64"), (speech.tolist(), "int64"), (speech.astype(np.uint16), "uint16"),
                     (ref.astype(np.complex64), "not a real numeric array"), (ref > 0, "not a real numeric array")]:
        with pytest.raises(AgentOutputError, match=why):
            validate_answer(AgentAnswer(bad, 16_000))
