#!/usr/bin/env bash
# The main job: train the default small model (4 layers x 256, GPT-2 BPE) on
# Moby-Dick for a couple of minutes, save a checkpoint, sample from it. The run
# goes into its folder runs/demo (config.json, metrics, loss curve, checkpoints);
# --overwrite starts it over each time. Extra arguments go to kiri train
# (scripts/demo.sh build/kiri --set train.steps=20).
set -euo pipefail
kiri=${1:-build/kiri}
shift $(($# > 0 ? 1 : 0))
run=runs/demo
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
"$kiri" train configs/demo.json --overwrite --set run.name=demo "$@"
# MFU is against the peak (docs/metrics.md): a row above 100% means the peak is wrong.
awk -F'"mfu":' 'NF > 1 { split($2, v, /[,}]/); n++; if (v[1] + 0 > 1) { bad++; print "demo: step " NR " has mfu " v[1] " > 1" } }
  END { if (n == 0) { print "demo: no mfu in the metrics"; exit 1 } if (bad) exit 1 }' $run/metrics.jsonl
echo
echo "== kiri eval $run/checkpoints"
"$kiri" eval $run/checkpoints
echo
echo "== kiri sample $run/checkpoints --prompt 'Call me Ishmael.' --tokens 60"
"$kiri" sample $run/checkpoints --prompt "Call me Ishmael." --tokens 60 --temperature 0.8 --top-k 40 --seed 1
echo
echo "run folder $run: config $run/config.json, metrics $run/metrics.jsonl, loss curve $run/metrics.png, checkpoints $run/checkpoints"
echo "continue it: $kiri train --resume $run/checkpoints --set train.steps=500"
