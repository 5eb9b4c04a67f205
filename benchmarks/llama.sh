#!/usr/bin/env bash
# The Llama training benchmark (docs/performance.md): kiri and PyTorch 2.15 on the same Llama,
# batch and threads, side by side in one run: `make bench`'s first part (benchmarks/peers.sh)
# on the Llama configs alone, at 1 and 2 threads, fp32 and bf16, PyTorch eager and compiled.
#   bash benchmarks/llama.sh [BUILD_DIR]
# Configs (kiri bench --config, src/kiri/bench/bench.cpp): tiny-llama (tiny's size) and
# smollm-135M (SmolLM-135M's shape). Raw JSON lines in $BENCH_OUT/llama.jsonl (default
# runs/bench). BENCH_CONFIGS, BENCH_THREADS, BENCH_TORCH, BENCH_STEPS and BENCH_BIG_STEPS
# narrow a run (benchmarks/peers.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${BENCH_OUT:-$root/runs/bench}
mkdir -p "$out"
results="$out/llama.jsonl"
: > "$results"
start=$(date +%s)
BENCH_CONFIGS=${BENCH_CONFIGS:-tiny-llama smollm-135M} bash "$root/benchmarks/peers.sh" \
  "$build" "$results"
echo "bench: done in $(( ($(date +%s) - start) / 60 )) min (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
python3 "$root/benchmarks/table.py" "$results"
