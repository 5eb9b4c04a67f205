#!/usr/bin/env bash
# The Llama training benchmark (docs/performance.md, "Llama"): kiri and PyTorch on the same
# Llama, batch and threads, side by side in one run, fp32 and bf16.
#   bash benchmarks/llama.sh [BUILD_DIR]
# Configs (kiri bench --config, src/kiri/bench/bench.cpp): tiny-llama (tiny's size) and
# smollm-135M (SmolLM-135M's shape). fp32 at 1 and 2 threads (kiri bench, which also times
# the step's GEMMs alone); bf16 at 1 thread (kiri bench --dtypes: fp32 and bf16 interleaved
# round by round; PyTorch under torch.autocast(bfloat16)). PyTorch is Debian's 1.13
# (/usr/bin/python3, OpenBLAS through benchmarks/torch_env.sh) and, when $TORCH_VENV/bin/python
# imports torch (e.g. python3 -m venv /work/venv && /work/venv/bin/pip install torch), the
# current PyTorch too. Raw JSON lines in $BENCH_OUT/llama.jsonl. BENCH_CONFIGS, BENCH_STEPS and
# BENCH_ROUNDS narrow a run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${BENCH_OUT:-$root/runs/bench}
steps=${BENCH_STEPS:-5}
venv=${TORCH_VENV:-/work/venv}
mkdir -p "$out"
results="$out/llama.jsonl"
: > "$results"

pythons=()
if /usr/bin/python3 -c 'import torch' 2>/dev/null && env_sh=$(bash "$root/benchmarks/torch_env.sh"); then
  pythons+=(/usr/bin/python3)
else
  echo "bench: Debian's PyTorch missing (apt-get install python3-torch libopenblas0-openmp)" >&2
fi
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  pythons+=("$venv/bin/python")
fi

run_torch() {  # config threads dtype
  local args
  case $1 in
    tiny-llama) args="--layers 4 --dim 256 --heads 4 --kv-heads 2 --ffn 688 --vocab 32000 --seq-len 128 --batch 8" ;;
    smollm-135M) args="--layers 30 --dim 576 --heads 9 --kv-heads 3 --ffn 1536 --vocab 49152 --tied --seq-len 64 --batch 4" ;;
  esac
  for py in "${pythons[@]}"; do
    # Debian's torch on the OpenMP OpenBLAS (torch_env.sh); the wheel brings its own BLAS.
    if [ "$py" = /usr/bin/python3 ]; then
      (eval "$env_sh" && OMP_NUM_THREADS=$2 "$py" "$root/benchmarks/torch_llama.py" --config "$1" \
        $args --threads "$2" --dtype "$3" --steps "$steps" --warmup-steps 2 2>/dev/null)
    else
      OMP_NUM_THREADS=$2 "$py" "$root/benchmarks/torch_llama.py" --config "$1" $args \
        --threads "$2" --dtype "$3" --steps "$steps" --warmup-steps 2 2>/dev/null
    fi >> "$results" || echo "bench: $py failed on $1" >&2
  done
}

for config in ${BENCH_CONFIGS:-tiny-llama smollm-135M}; do
  for threads in 1 2; do
    echo "bench: $config fp32, $threads thread(s) (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    OMP_NUM_THREADS=$threads "$build/kiri" bench --config "$config" --threads "$threads" \
      --steps "$steps" >> "$results"
    run_torch "$config" "$threads" fp32
  done
  echo "bench: $config fp32 and bf16, 1 thread (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  OMP_NUM_THREADS=1 "$build/kiri" bench --dtypes --config "$config" --threads 1 \
    --steps "$steps" --rounds "${BENCH_ROUNDS:-2}" >> "$results"
  run_torch "$config" 1 bf16
done

python3 - "$results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def torch_rows(config, threads, dtype):
    return [r for r in rows if r["impl"] == "pytorch" and r["config"] == config
            and r["threads"] == threads and r["dtype"] == dtype]
print("| config | dtype | threads | kiri tokens/s | PyTorch | PyTorch tokens/s | kiri / PyTorch "
      "| kiri step / its GEMMs |")
print("|---|---|---|---|---|---|---|---|")
for k in rows:
    if k["impl"] == "kiri":
        key, dtype, gemm = (k["config"], k["threads"]), "fp32", f"{k['step_s'] / k['gemm_step_s']:.2f}"
    elif k["impl"] == "kiri-dtype" and k["layout"] in ("fp32", "bf16"):
        key, dtype, gemm = (k["config"], k["threads"]), k["layout"], ""
        if dtype == "fp32":
            dtype = "fp32 (--dtypes)"
    else:
        continue
    ts = torch_rows(key[0], key[1], dtype.split()[0]) or [None]
    for t in ts:
        name = f"torch {t['torch']}" if t else "n/a"
        tt = f"{t['tokens_per_s']:.0f}" if t else "n/a"
        ratio = f"{k['tokens_per_s'] / t['tokens_per_s']:.2f}x" if t else "n/a"
        print(f"| {key[0]} | {dtype} | {key[1]} | {k['tokens_per_s']:.0f} | {name} | {tt} | "
              f"{ratio} | {gemm} |")
EOF
