#!/usr/bin/env bash
# The training benchmark: kiri and PyTorch 2.15 on the same model, batch and
# threads, side by side in one run. Prints the markdown tables of docs/performance.md
# and leaves the raw JSON lines in $out (BENCH_OUT, default runs/bench).
#   bash benchmarks/run.sh [BUILD_DIR]      (make bench)
# BENCH_PEERS=0, BENCH_DDP=0, BENCH_ZERO=0, BENCH_LAYOUTS=0 and BENCH_PLANNER=0 skip a part;
# BENCH_TORCH="eager" (or "") leaves out PyTorch's compiled (or every) variant.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${BENCH_OUT:-$root/runs/bench}
steps=${BENCH_STEPS:-5}
mkdir -p "$out"
: > "$out/results.jsonl"

start=$(date +%s)
echo "bench: start $(date -u '+%F %H:%M') UTC (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2

# kiri against PyTorch 2.15 (scripts/test-venv.sh's venv; benchmarks/torch_peer.sh): tiny,
# gpt2-124M, tiny-llama and smollm-135M at 1 and 2 threads, fp32 and bf16, PyTorch eager and
# compiled (benchmarks/peers.sh; BENCH_CONFIGS, BENCH_THREADS, BENCH_TORCH narrow it).
torch_ok=0
if [ "${BENCH_PEERS:-1}" = 1 ]; then
  BENCH_STEPS=$steps bash "$root/benchmarks/peers.sh" "$build" "$out/results.jsonl"
fi
if [ -n "${BENCH_TORCH-eager compile}" ] && bash "$root/benchmarks/torch_peer.sh" --check; then
  torch_ok=1
fi

# Data parallel: tiny on 1 and 2 ranks x 1 thread, kiri (MPI) and PyTorch DDP (gloo).
if [ "${BENCH_DDP:-1}" = 1 ]; then
  echo "bench: DDP, kiri 1 and 2 ranks" >&2
  OMP_NUM_THREADS=1 "$build/kiri" bench --ddp --config tiny --steps "$steps" >> "$out/results.jsonl"
  "$build/kiri" launch -n 2 --threads 1 -- bench --ddp --config tiny --steps "$steps" \
    2>/dev/null | grep '^{' >> "$out/results.jsonl"
  if [ $torch_ok = 1 ]; then
    for n in 1 2; do
      echo "bench: DDP, PyTorch $n rank(s)" >&2
      OMP_NUM_THREADS=1 bash "$root/benchmarks/torch_peer.sh" gpt2 --ranks "$n" --ddp --config tiny \
        --threads 1 --steps "$steps" --warmup-steps 2 >> "$out/results.jsonl"
    done
  fi
fi

# ZeRO stages and mixed precision (docs/performance.md): kiri's layouts interleaved
# round by round (ZeRO on 2 ranks x 1 thread, dtypes on 1 process x 1 thread), and
# PyTorch DDP and DDP + ZeroRedundancyOptimizer alternately (benchmarks/zero_torch.sh),
# whose lines are tagged "bench": "zero" to keep them apart from the DDP section's.
if [ "${BENCH_ZERO:-1}" = 1 ]; then
  rounds=${BENCH_ROUNDS:-3}
  echo "bench: ZeRO stages, kiri 2 ranks, $rounds rounds (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$build/kiri" launch -n 2 --threads 1 -- bench --zero --config tiny --steps "$steps" \
    --rounds "$rounds" 2>/dev/null | grep '^{' >> "$out/results.jsonl"
  echo "bench: dtypes, kiri 1 process (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  OMP_NUM_THREADS=1 "$build/kiri" bench --dtypes --config tiny --threads 1 --steps "$steps" \
    --rounds "$rounds" >> "$out/results.jsonl"
  if [ $torch_ok = 1 ]; then
    echo "bench: ZeRO, PyTorch DDP and ZeroRedundancyOptimizer, 2 ranks" >&2
    BENCH_STEPS=$steps BENCH_OUT=$out bash "$root/benchmarks/zero_torch.sh" "${BENCH_TORCH_ROUNDS:-2}" \
      | sed 's/^{/{"bench": "zero", /' >> "$out/results.jsonl"
  fi
fi

# Tensor and pipeline parallelism (docs/performance.md): the tiny model, a global batch of
# 8 x 128 tokens in every layout; 1x1x1 on 1 process x 1 thread, then dp2, tp2 and pp2
# (1F1B and GPipe at m = 1, 2, 4, 8) on 2 ranks x 1 thread, interleaved round by round.
if [ "${BENCH_LAYOUTS:-1}" = 1 ]; then
  rounds=${BENCH_ROUNDS:-3}
  echo "bench: layouts, kiri 1 process (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  OMP_NUM_THREADS=1 "$build/kiri" bench --layouts --config tiny --threads 1 --steps "$steps" \
    --rounds "$rounds" >> "$out/results.jsonl"
  echo "bench: layouts, kiri 2 ranks, $rounds rounds (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$build/kiri" launch -n 2 --threads 1 -- bench --layouts --config tiny --steps "$steps" \
    --rounds "$rounds" 2>/dev/null | grep '^{' >> "$out/results.jsonl"
fi

# The planner against kiri's own runs (docs/planner.md, "The tiny config"): calibrate this
# machine, then each layout's predicted and measured peak memory and step time.
if [ "${BENCH_PLANNER:-1}" = 1 ]; then
  echo "bench: planner, calibration and the tiny table (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$build/kiri" launch -n 2 --threads 1 -- plan --calibrate --out "$out/calibration.json" >&2
  echo "| layout | rank | predicted peak MiB | measured peak MiB | error | predicted step s | measured step s | error |" \
    > "$out/planner.md"
  echo "|---|---|---|---|---|---|---|---|" >> "$out/planner.md"
  KIRI_CALIBRATION="$out/calibration.json" KIRI_PLAN_TINY=1 OMP_NUM_THREADS=1 \
    "$build/tests/kiri_plan_measured_tests" --gtest_filter='*TinyTable' | grep '^|' >> "$out/planner.md"
fi

echo "bench: done in $(( ($(date +%s) - start) / 60 )) min (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
python3 "$root/benchmarks/table.py" "$out/results.jsonl"
if [ -s "$out/planner.md" ]; then
  echo
  echo "Planner, predicted vs measured (tiny, this machine calibrated):"
  cat "$out/planner.md"
fi
