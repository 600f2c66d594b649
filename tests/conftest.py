"""Shared test fixtures: the real recordings in tests/fixtures (shipped with the repository; see
tests/fixtures/README.md for licences and provenance)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
REFERENCE = FIXTURES / "reference"
REAL = FIXTURES / "real"
FDB = FIXTURES / "fdb"
STEREO_DIALOGUE = REAL / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav"


@pytest.fixture(scope="session")
def real_dir() -> Path:
    if not REAL.is_dir():
        pytest.fail(f"real-speech fixtures not found at {REAL} (tests/fixtures is incomplete)")
    return REAL


@pytest.fixture(scope="session")
def fdb_dir() -> Path:
    if not FDB.is_dir():
        pytest.fail(f"Full-Duplex-Bench fixtures not found at {FDB} (tests/fixtures is incomplete)")
    return FDB


@pytest.fixture(scope="module", autouse=True)
def _judge_cache_of_the_module(tmp_path_factory):
    """The judge reply cache of a module's module-scoped fixtures (set up before them and before
    any test's own): a temporary folder of the module, never the user's cache nor another
    module's (whose replies would answer the same questions in place of the fixture's judge)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPEARBENCH_JUDGE_CACHE", str(tmp_path_factory.mktemp("judge-cache-module")))
        yield


@pytest.fixture(autouse=True)
def _judge_cache_in_tmp(tmp_path_factory, monkeypatch):
    """Every test's judge reply cache in its own temporary folder (never the user's cache)."""
    monkeypatch.setenv("SPEARBENCH_JUDGE_CACHE", str(tmp_path_factory.mktemp("judge-cache")))
