#!/usr/bin/env bash
# kiri against the PyTorch a user would run (docs/performance.md, "Training: kiri vs PyTorch
# 2.15"): for each config and thread count, side by side,
#   kiri bench                 fp32: tokens/s, MFU, the step over its GEMMs alone
#   kiri bench --dtypes        fp32, bf16, fp16 and fp32 checkpointed, interleaved round by
#                              round; the bf16 row names its GEMM path (gemm_lowp) and the
#                              rates it was chosen by (gemm_lowp_gflops)
#   benchmarks/torch_peer.sh   PyTorch 2.15 (scripts/test-venv.sh's venv), each variant of
#                              BENCH_TORCH (eager, compile) in fp32 and bf16 autocast
# and appends the JSON lines to RESULTS, tagged "bench": "peers", each group after a
# {"impl": "load"} line with the load average before it; the peers' messages go to
# RESULTS less its extension + .torch.log.
#   bash benchmarks/peers.sh BUILD_DIR RESULTS
# BENCH_CONFIGS (default: tiny gpt2-124M tiny-llama smollm-135M), BENCH_THREADS (1 2),
# BENCH_TORCH ("eager compile"; "" runs kiri only), BENCH_STEPS (timed steps of tiny and
# tiny-llama, 5), BENCH_BIG_STEPS (of gpt2-124M and smollm-135M, 3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: benchmarks/peers.sh BUILD_DIR RESULTS}
results=${2:?usage: benchmarks/peers.sh BUILD_DIR RESULTS}
variants=${BENCH_TORCH-eager compile}
if [ -n "$variants" ] && ! bash "$root/benchmarks/torch_peer.sh" --check; then
  echo "bench: no PyTorch venv; kiri only" >&2
  variants=""
fi

# Tagged apart from run.sh's other kiri-dtype rows (its ZeRO section's).
tag() { sed 's/^{/{"bench": "peers", /' >> "$results"; }
log=${results%.*}.torch.log # what the PyTorch peers said
: > "$log"

load() {  # config threads: the load average, on stderr and as a JSON line
  local l
  l=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "bench: $1, $2 thread(s) (load $l)" >&2
  echo "{\"impl\": \"load\", \"config\": \"$1\", \"threads\": $2, \"load\": [${l// /, }]}" | tag
}

for config in ${BENCH_CONFIGS:-tiny gpt2-124M tiny-llama smollm-135M}; do
  case $config in
    tiny | gpt2-124M) arch=gpt2 ;;
    *) arch=llama ;;
  esac
  # The two ~130M models take seconds a step: fewer steps and one round keep the run short.
  steps=${BENCH_STEPS:-5} rounds=2 warmup=2
  case $config in
    gpt2-124M | smollm-135M) steps=${BENCH_BIG_STEPS:-3} rounds=1 warmup=1 ;;
  esac
  for threads in ${BENCH_THREADS:-1 2}; do
    load "$config" "$threads"
    OMP_NUM_THREADS=$threads "$build/kiri" bench --config "$config" --threads "$threads" \
      --steps "$steps" | tag
    OMP_NUM_THREADS=$threads "$build/kiri" bench --dtypes --config "$config" \
      --threads "$threads" --steps "$steps" --warmup "$warmup" --rounds "$rounds" | tag
    for variant in $variants; do
      for dtype in fp32 bf16; do
        flag=""
        [ "$variant" = compile ] && flag=--compile
        # shellcheck disable=SC2086
        OMP_NUM_THREADS=$threads bash "$root/benchmarks/torch_peer.sh" "$arch" \
          --config "$config" --threads "$threads" --dtype "$dtype" --steps "$steps" \
          --warmup-steps 2 $flag 2>> "$log" | tag ||
          echo "bench: PyTorch $variant $dtype failed on $config, $threads thread(s)" >&2
      done
    done
  done
done
