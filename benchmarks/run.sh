#!/usr/bin/env bash
# The training benchmark: kiri and PyTorch on the same model, batch and
# threads, side by side in one run. Prints a markdown table (the one in
# docs/performance.md) and leaves the raw JSON lines in $out.
#   bash benchmarks/run.sh [BUILD_DIR]      (make bench)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${BENCH_OUT:-$root/runs/bench}
steps=${BENCH_STEPS:-5}
mkdir -p "$out"
: > "$out/results.jsonl"

# PyTorch (Debian's python3-torch) is used by the benchmark only.
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch libopenblas0-openmp >/dev/null
  else
    echo "bench: PyTorch missing (apt-get install python3-torch libopenblas0-openmp); kiri only" >&2
  fi
fi
torch_ok=0
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  eval "$(bash "$root/benchmarks/torch_env.sh")"
  torch_ok=1
fi

run_torch() {  # config threads layer embd head seq batch
  [ $torch_ok = 1 ] || return 0
  /usr/bin/python3 "$root/benchmarks/torch_gpt2.py" --n-layer "$3" --n-embd "$4" --n-head "$5" \
    --vocab 50257 --seq-len "$6" --batch "$7" --threads "$2" --steps "$steps" --warmup-steps 2 \
    --dtype fp32 2>/dev/null | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); d['config']='$1'; print(json.dumps(d))" \
    >> "$out/results.jsonl"
}

for spec in "tiny 4 256 4 128 8" "gpt2-124M 12 768 12 64 4"; do
  set -- $spec
  for threads in 1 2; do
    echo "bench: $1, $threads thread(s)" >&2
    OMP_NUM_THREADS=$threads "$build/kiri" bench --config "$1" --threads "$threads" --steps "$steps" \
      >> "$out/results.jsonl"
    run_torch "$1" "$threads" "$2" "$3" "$4" "$5" "$6"
  done
done

# Data parallel: tiny on 1 and 2 ranks x 1 thread, kiri (MPI) and PyTorch DDP (gloo).
if [ "${BENCH_DDP:-1}" = 1 ]; then
  echo "bench: DDP, kiri 1 and 2 ranks" >&2
  OMP_NUM_THREADS=1 "$build/kiri" bench --ddp --config tiny --steps "$steps" >> "$out/results.jsonl"
  "$build/kiri" launch -n 2 --threads 1 -- bench --ddp --config tiny --steps "$steps" \
    2>/dev/null | grep '^{' >> "$out/results.jsonl"
  if [ $torch_ok = 1 ]; then
    for n in 1 2; do
      echo "bench: DDP, PyTorch $n rank(s)" >&2
      (cd "$out" && /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node=$n \
        --redirects 2 --tee 2 "$root/benchmarks/torch_gpt2.py" --ddp --n-layer 4 --n-embd 256 \
        --n-head 4 --vocab 50257 --seq-len 128 --batch 8 --threads 1 --steps "$steps" \
        --warmup-steps 2 2>/dev/null | grep '^{' | sed 's/^/{"config": "tiny", /; s/^{"config": "tiny", {/{"config": "tiny", /' \
        >> "$out/results.jsonl")
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

python3 "$root/benchmarks/table.py" "$out/results.jsonl"
if [ -s "$out/planner.md" ]; then
  echo
  echo "Planner, predicted vs measured (tiny, this machine calibrated):"
  cat "$out/planner.md"
fi
