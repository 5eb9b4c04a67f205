#!/usr/bin/env bash
# The main job: train the default small model (4 layers x 256, GPT-2 BPE) on
# Moby-Dick for a couple of minutes, save a checkpoint, sample from it.
set -euo pipefail
kiri=${1:-build/kiri}
run=runs/demo
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
"$kiri" train configs/demo.json --set checkpoint.dir=$run/checkpoints --set log.metrics=$run/metrics.jsonl
echo
echo "== kiri eval $run/checkpoints"
"$kiri" eval $run/checkpoints
echo
echo "== kiri sample $run/checkpoints --prompt 'Call me Ishmael.' --tokens 60"
"$kiri" sample $run/checkpoints --prompt "Call me Ishmael." --tokens 60 --temperature 0.8 --top-k 40 --seed 1
echo
echo "metrics: $run/metrics.jsonl, loss curve: $run/metrics.png, checkpoint: $run/checkpoints"
