"""The evaluate modules' docstring examples run as doctests, as written (``Examples:`` of each
module's inputs description), in a folder holding the files they name: ``q.wav`` (a real stereo
two-speaker clip, 8 s), ``a.wav`` (2.5 s of real speech), FDB's example sample as
``fdb/smooth_turn_taking/1`` and SpeechRole's released judge outputs as ``ali_cloud/``.

The modules whose examples need a model download (ASR, MOS, emotion, dialect and judge models)
are listed in :data:`NEEDS_MODELS` and only checked to have an example."""

from __future__ import annotations

import doctest
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
#: modules whose example loads a model (a download) or needs a judge: checked to have one, not run
NEEDS_MODELS = ("emotions", "explainable_features", "language_dialect", "speech_quality", "stances")
RUN = ("interruptions", "turn_taking", "distributional", "full_duplex", "dynamic_superb", "speechrole")


def _examples(metric: str) -> str:
    """The inputs description (with its ``Examples:``) of the evaluate module
    ``spear_metrics/<metric>/<metric>.py``, as ``evaluate`` loads it (no model is loaded)."""
    import evaluate

    return evaluate.load(str(REPO / "spear_metrics" / metric)).inputs_description


def test_every_evaluate_module_has_an_example():
    from spear_metrics.core.columns import metric_names

    assert sorted(metric_names()) == sorted(NEEDS_MODELS + RUN)
    for m in metric_names():
        assert ">>> m = evaluate.load(" in _examples(m), m


@pytest.fixture(scope="module")
def example_folder(tmp_path_factory):
    from conftest import FDB, FIXTURES, STEREO_DIALOGUE
    from spear_datasets.audio import decode, write_wav

    d = tmp_path_factory.mktemp("examples")
    os.symlink(REPO / "spear_metrics", d / "spear_metrics")
    wav, sr = decode(STEREO_DIALOGUE)
    write_wav(d / "q.wav", wav[:, : 8 * sr], sr)  # context to 3.2 s, question to 5.0 s, both speakers
    write_wav(d / "a.wav", wav[1:, 10 * sr: int(12.5 * sr)], sr)  # 2.5 s of one speaker
    shutil.copytree(FDB / "example_data" / "smooth_turn_taking_example" / "1", d / "fdb" / "smooth_turn_taking" / "1")
    shutil.copytree(FIXTURES / "speechrole" / "ali_cloud", d / "ali_cloud")
    return d


@pytest.mark.slow
@pytest.mark.parametrize("metric", RUN)
def test_docstring_examples_run(metric, example_folder, monkeypatch):
    import evaluate

    monkeypatch.chdir(example_folder)
    test = doctest.DocTestParser().get_doctest(_examples(metric), {"evaluate": evaluate, "np": np}, metric,
                                               f"spear_metrics/{metric}/{metric}.py", 0)
    assert test.examples, metric
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{metric}: {result.failed} of {result.attempted} examples failed"
