#!/usr/bin/env bash
# The qwen-omni adapter on the REAL Qwen2.5-Omni-7B, on one GPU, in a few minutes.
#
# NEEDS THE WEIGHTS: Qwen/Qwen2.5-Omni-7B (about 22 GB) already in the Hugging Face cache
# ($HF_HOME / $HF_HUB_CACHE), or QWEN_OMNI_MODEL=/path/to/a/local/copy. Nothing is downloaded:
# HF_HUB_OFFLINE=1 is set, and without the weights the script says so and exits 3.
# Also needs the project's packages (pip install -e ".[score]") and torchvision.
# Settings (environment): DEVICE (cuda), MAX_ANSWER_S (30), TIMEOUT_S (480), AGENT_OPTIONS (extra
# "-a KEY=VALUE" words, e.g. "-a temperature=0"), QWEN_OMNI_MODEL, FIXTURES, OUT.
#
#   bash scripts/gpu_qwen_omni.sh [SPEAR_METADATA.csv]      # from the repository root
#
# Without a CSV it cuts 3 clips (13.48, 15.48 and 20 s) from the real stereo AMI dialogue of
# tests/fixtures/real (or FIXTURES=folder with the .wav). It runs
# `spearbench infer --agent qwen-omni` (bf16 on the GPU, SPEAR's prompts, seed 0) and prints per
# row: onset, clip duration, time to first text (= response_time_s), answer_start_time, answer
# duration, the whole generate time of the row, and the transcript; writes $OUT/qwen_omni_gpu.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
OUT_DIR=${OUT:-.}
MODEL=${QWEN_OMNI_MODEL:-Qwen/Qwen2.5-Omni-7B}
export HF_HUB_OFFLINE=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv || true

"$PY" - "$MODEL" <<'EOF' || exit 3
import importlib.util, os, sys
model = sys.argv[1]
missing = [m for m in ("torch", "transformers", "torchvision", "soundfile", "soxr", "datasets") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_qwen_omni.sh: missing Python packages: {', '.join(missing)} (pip install -e '.[score]' torchvision)")
if not os.path.isdir(model):
    from huggingface_hub import snapshot_download
    try:
        snapshot_download(model, local_files_only=True)
    except Exception:
        sys.exit(f"gpu_qwen_omni.sh NEEDS THE WEIGHTS of {model} in the Hugging Face cache "
                 f"(HF_HOME={os.environ.get('HF_HOME', '~/.cache/huggingface')}) or QWEN_OMNI_MODEL=/local/folder; "
                 "nothing is downloaded")
import torch, transformers
print(f"torch {torch.__version__}, transformers {transformers.__version__}, cuda {torch.cuda.is_available()}")
if os.environ.get("DEVICE", "cuda").startswith("cuda") and not torch.cuda.is_available():
    sys.exit("gpu_qwen_omni.sh: no CUDA device")
EOF

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CSV=${1:-}
if [ -z "$CSV" ]; then
  CSV=$WORK/metadata.csv
  "$PY" - "$WORK" <<'EOF'
import os, sys
from pathlib import Path
from spear_datasets.audio import load_audio, write_wav
from spear_datasets.schema import SpearRow, write_metadata
name = "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav"
places = [os.environ.get("FIXTURES", ""), "tests/fixtures/real"]
src = next((Path(p) / name for p in places if p and (Path(p) / name).is_file()), None)
if src is None:
    sys.exit(f"gpu_qwen_omni.sh: {name} not found in {places}: pass a SPEAR metadata CSV")
x, work, rows = load_audio(src), Path(sys.argv[1]), []
for k, end in enumerate([13.48, 15.48, 20.0]):  # FEE016 (left) speaks 0.78-15.48 s; MEO015 answers from 15.46 s
    write_wav(work / f"clip{k}.wav", x[:, : round(end * 16000)])
    rows.append(SpearRow(audio_path=f"clip{k}.wav", answer_audio_path=None, context_end_time=8.74,
                         question_end_time=min(end, 15.48), speakers="FEE016|MEO015"))
write_metadata(work / "metadata.csv", rows)
EOF
fi

T0=$(date +%s)
# shellcheck disable=SC2086  # AGENT_OPTIONS: extra "-a KEY=VALUE" words
timeout "${TIMEOUT_S:-480}" "$PY" -m spear_metrics.cli infer --agent qwen-omni -a "model=$MODEL" -a "device=${DEVICE:-cuda}" \
  ${AGENT_OPTIONS:-} --max-answer-s "${MAX_ANSWER_S:-30}" --data "$CSV" --out "$WORK/answers" --no-progress
echo "infer: $(( $(date +%s) - T0 )) s wall (loading included)"

"$PY" - "$WORK/answers" "$OUT_DIR/qwen_omni_gpu.json" <<'EOF'
import csv, json, sys
from pathlib import Path
from spear_datasets.audio import audio_info
out = Path(sys.argv[1])
recs = {r["row"]: r for r in map(json.loads, (out / ".work" / "rank-0.jsonl").read_text().splitlines())}
rows = list(csv.DictReader(open(out / "metadata.csv", newline="")))
report = []
for i, r in enumerate(rows):
    rec = recs.get(i, {})
    if rec.get("status") != "ok":
        print(f"row {i}: FAILED {rec.get('error')}")
        report.append({"row": i, "error": rec.get("error")})
        continue
    clip_s = audio_info(r["audio_path"]).frames / 16000
    ttft = None if rec["onset"] is None else rec["onset"] - clip_s
    item = {"row": i, "clip_s": clip_s, "onset_s": rec["onset"], "time_to_first_text_s": ttft,
            "answer_start_time": rec["answer_start_time"], "answer_duration_s": rec["answer_duration"],
            "row_wall_s": rec["elapsed_s"], "finish_reason": rec["finish_reason"], "text": rec["text"]}
    report.append(item)
    ttft_txt = "none" if ttft is None else f"{ttft * 1000:.0f} ms"
    print(f"row {i}: clip {clip_s:.2f} s, first text after {ttft_txt}, answer_start_time {rec['answer_start_time']}, "
          f"answer {rec['answer_duration']:.2f} s ({rec['finish_reason']}), row {rec['elapsed_s']:.1f} s: {rec['text']!r}")
Path(sys.argv[2]).write_text(json.dumps(report, indent=1))
EOF
