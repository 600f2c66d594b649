"""Model-based scorers whose memory could grow with the answer's length: what reaches the model
is bounded. These tests assert the structure (windows per forward pass, samples fed to a
whole-answer model); the memory itself is measured by ``scripts/bench_scorer_memory.py``.

- DistillMOS reads its package's own windows (7.68 s, hop <= 1 s), ``window_batch`` per
  forward pass, and gives the package's own value (the package stacks every window at once:
  2.2 GB at 30 s, 4.1 GB at 60 s);
- UTMOS22 (SPEAR's whole-answer rule) and the language ID (whole answer, as SPEAR) never see an
  answer longer than their stated maximum: such a row gets null with the reason.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import STEREO_DIALOGUE
from spear_datasets.audio import load_audio, write_wav


@pytest.fixture(scope="module")
def speech_12s(real_dir):
    return load_audio(STEREO_DIALOGUE, channels="mix")[0][: 12 * 16000].copy()


def test_distillmos_reads_its_windows_a_few_at_a_time_with_the_package_value(speech_12s):
    import torch
    from distillmos import ConvTransformerSQAModel
    from distillmos.sqa import MAX_HOP_LEN, SEQ_LEN

    from spear_metrics.core.mos import load_mos

    m = load_mos("distillmos", device="cpu", window_batch=4)
    m.load()
    seen: list[int] = []
    hook = m._model.cnn.register_forward_pre_hook(lambda mod, args: seen.append(args[0].shape[0]))
    try:
        (got,) = m.score([speech_12s])
    finally:
        hook.remove()
    n_windows = int(np.ceil((len(speech_12s) - SEQ_LEN) / MAX_HOP_LEN)) + 1  # the package's recipe: ceil(4.32) + 1
    assert n_windows == 6 and len(m.windows(len(speech_12s))) == n_windows
    assert seen == [4, 2]  # never all 6 at once
    assert m.windows(1000) == [0] and m.windows(SEQ_LEN + 1) == [0, 1]  # short: one padded window
    # the package's own forward on the whole answer (every window in one batch): the same value
    ref = ConvTransformerSQAModel(load_weights=False)
    ref.load_state_dict(m._model.state_dict())
    with torch.inference_mode():
        want = float(ref.eval()(torch.from_numpy(speech_12s)[None]).reshape(-1)[0])
    assert got["DistillMOS"] == pytest.approx(want, abs=1e-5)
    assert 1.0 < want < 5.0


class _Recorder:
    """Stands in for UTMOS22's network: records the samples of each wave it is fed."""

    def __init__(self):
        self.fed: list[int] = []

    def score(self, x):
        import torch

        self.fed.append(int(x.shape[-1]))
        return torch.tensor([3.25])


def test_whole_answer_models_never_see_more_than_their_maximum(speech_12s, tmp_path, monkeypatch):
    import torch

    from helpers import known_asr
    from spear_datasets.schema import SpearRow
    from spear_metrics.core import asr as asr_mod
    from spear_metrics.core.dimension import Sample
    from spear_metrics.language_dialect.definition import LanguageDialect, LanguageID, language_decision
    from spear_metrics.speech_quality.definition import SpeechQuality

    # speech_quality: UTMOS (SPEAR's rule: the whole answer at once) up to utmos_max_s
    monkeypatch.setitem(asr_mod.ASR_BACKENDS, "known", known_asr("known", ["and so my fellow americans"]))
    dim = SpeechQuality(asr="known", mos="utmos", utmos_max_s=5.0)
    utmos = dim.moss[0]
    utmos._model, utmos._device = _Recorder(), torch.device("cpu")  # loaded: the recorder is its network
    q = tmp_path / "q.wav"
    write_wav(q, np.stack([speech_12s[:32000]] * 2))
    samples = []
    for k, seconds in enumerate((4.0, 12.0)):
        a = tmp_path / f"a{k}.wav"
        write_wav(a, speech_12s[: int(seconds * 16000)])
        meta = SpearRow(audio_path=str(q), answer_audio_path=str(a), context_end_time=0.5, question_end_time=2.0,
                        answer_duration=None, speakers="A|B", conversation_id="c", transcript_question="A: hi?",
                        transcript_answer="B: and so my fellow americans", answer_start_time=0.0)
        samples.append(Sample(row=k, meta=meta, audio_path=q, answer_audio_path=a))
    short, long = dim.score_batch(samples)
    assert utmos._model.fed == [4 * 16000]  # the 12 s answer never reached the model
    assert short["UTMOS"] == 3.25 and "UTMOS_note" not in short
    assert long["UTMOS"] is None and "longer than 5 s" in long["UTMOS_note"]
    assert long["WER_norm_%_known"] == 0.0  # the row is scored; only UTMOS is left out
    summary = dim.aggregate([], [short, long])
    assert summary["UTMOS"] == 3.25 and "longer than 5 s" in summary["UTMOS_note"]
    assert dim.aggregate_counts([], [short, long], list(summary))["UTMOS"] == 1

    # language_dialect: the language ID (a tiny mms-lid-layout model, not English) reads whole
    # answers up to lid_max_s
    from model_fixtures import tiny_lid

    assert language_decision(12.0, "eng", 0.9, ["eng"], max_s=5.0) == ("too_long", None)
    assert language_decision(4.0, "eng", 0.9, ["eng"], max_s=5.0) == ("ok", True)
    fed: list[int] = []
    probs = LanguageID._probs
    monkeypatch.setattr(LanguageID, "_probs", lambda self, batch: (fed.extend(len(w) for w in batch), probs(self, batch))[1])
    lid_dim = LanguageDialect(lid_model=str(tiny_lid(tmp_path / "lid", english_bias=-6.0)), lid_max_s=5.0)
    res = lid_dim.score_batch(samples)
    assert fed == [4 * 16000]  # the 12 s answer never reached the model
    assert res[0]["language"] is not None and res[0]["language_status"] in ("ok", "low_confidence")
    assert res[1]["language_status"] == "too_long" and res[1]["language"] is None and res[1]["english_answer"] is None
    assert lid_dim._lid_model().predict([speech_12s], batch_size=1) == [None]
