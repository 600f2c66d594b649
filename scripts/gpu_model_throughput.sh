#!/usr/bin/env bash
# Issue 15, item 4: the model-based dimensions' throughput on ONE GPU, in a few minutes.
# Random-initialised real architectures (nothing downloaded), half precision (bf16 where the GPU
# has it), batch sizes from the free GPU memory, 256 rows shaped like SPEAR's test split; the
# one-at-a-time pass on 32 of them; float32 vs half precision compared; the time of the full
# test split (2,725 rows) projected. Writes $OUT/gpu_model_throughput.json (or ./ without $OUT).
#   bash scripts/gpu_model_throughput.sh            # on the GPU machine, from the repository root
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
OUT_DIR=${OUT:-.}
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv || true
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} "$PY" scripts/bench_model_throughput.py --device cuda --rows "${ROWS:-256}" \
  --single-rows "${SINGLE_ROWS:-32}" --dtype "${DTYPE:-auto}" --batch "${BATCH:-auto}" --steps "${STEPS:-32}" \
  --check-dtype --project --json "$OUT_DIR/gpu_model_throughput.json"
