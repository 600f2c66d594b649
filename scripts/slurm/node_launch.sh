#!/usr/bin/env bash
# One node's part of a multi-node SPEARBench run: `srun` starts this once per node (see
# spearbench.sbatch); it starts `accelerate launch` with this node's rank, and accelerate starts
# one process per GPU (or PROCS_PER_NODE CPU processes where the node has no GPU).
#
#   bash scripts/slurm/node_launch.sh score --metadata M.csv --metrics ... --out RESULTS/
#
# Reads Slurm's SLURM_NNODES, SLURM_NODEID and SLURM_JOB_NODELIST; each can be set by hand
# (MAIN_PROCESS_IP instead of the node list) to run the same line without Slurm.
# SPEARBENCH and ACCELERATE name the programs when they are not on PATH (e.g. .venv/bin/spearbench).
# Anything missing is said in one line on stderr, exit 2, before anything starts.
set -euo pipefail
fail() { echo "node_launch.sh: $*" >&2; exit 2; }
MISSING=""
for NAME in spearbench accelerate; do  # set by hand (SPEARBENCH, ACCELERATE) or found on PATH
  VAR=$(echo "$NAME" | tr '[:lower:]' '[:upper:]')
  GIVEN=${!VAR:-}
  if [ -n "$GIVEN" ]; then
    command -v "$GIVEN" >/dev/null 2>&1 || MISSING="${MISSING:+$MISSING and }$NAME ($VAR=$GIVEN is no program)"
  elif FOUND=$(command -v "$NAME"); then
    printf -v "$VAR" '%s' "$FOUND"
  else
    MISSING="${MISSING:+$MISSING and }$NAME (not on PATH)"
  fi
done
if [ -n "$MISSING" ]; then
  fail "missing $MISSING: put the environment's bin folder on PATH (e.g. source .venv/bin/activate) or set" \
       "SPEARBENCH=/path/to/.venv/bin/spearbench ACCELERATE=/path/to/.venv/bin/accelerate"
fi
NNODES=${SLURM_NNODES:-1}
NODE_RANK=${SLURM_NODEID:-0}
if [ -z "${MAIN_PROCESS_IP:-}" ]; then
  # the first host of the allocation is the rendezvous point of every node
  if [ -z "${SLURM_JOB_NODELIST:-}" ] || ! command -v scontrol >/dev/null 2>&1; then
    fail "no rendezvous host: set MAIN_PROCESS_IP, or run under Slurm (SLURM_JOB_NODELIST and scontrol)"
  fi
  MAIN_PROCESS_IP=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
fi
PORT=${MAIN_PROCESS_PORT:-29500}
if [ -n "${PROCS_PER_NODE:-}" ]; then
  PER_NODE=$PROCS_PER_NODE
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  PER_NODE=$(nvidia-smi -L | wc -l)
else
  PER_NODE=1
fi
EXTRA=()
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  # accelerate's CPU trap: without GPUs, several processes need ACCELERATE_USE_CPU and --multi_gpu
  export ACCELERATE_USE_CPU=true
  EXTRA=(--mixed_precision no --dynamo_backend no)
fi
exec "$ACCELERATE" launch --multi_gpu \
  --num_machines "$NNODES" --machine_rank "$NODE_RANK" \
  --num_processes $((NNODES * PER_NODE)) \
  --main_process_ip "$MAIN_PROCESS_IP" --main_process_port "$PORT" \
  "${EXTRA[@]}" "$SPEARBENCH" "$@"
