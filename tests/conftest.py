"""Shared test fixtures: the real recordings in ../shared/fixtures (read in place, never copied)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures"
REAL = FIXTURES / "real"
FDB = FIXTURES / "fdb"
STEREO_DIALOGUE = REAL / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav"


@pytest.fixture(scope="session")
def real_dir() -> Path:
    if not REAL.is_dir():
        pytest.skip(f"real-speech fixtures not found at {REAL} (../shared is absent)")
    return REAL


@pytest.fixture(scope="session")
def fdb_dir() -> Path:
    if not FDB.is_dir():
        pytest.skip(f"Full-Duplex-Bench fixtures not found at {FDB} (../shared is absent)")
    return FDB
