#!/usr/bin/env bash
# Optimizer offload against the same run in memory, side by side in one run: the step time
# of a tiny byte-level GPT and of gpt2-124M (12 x 768, GPT-2 vocabulary), bf16, one process,
# each with and without offload.optimizer = nvme, and the planner's predicted slowdown for
# the same run; then the planner's predicted step against measured ones of one thread, fp32
# and bf16, with and without offload. Swap files under OFFLOAD_DIR (default /tmp), removed
# after.
#   benchmarks/offload_ratio.sh [build/kiri]
set -euo pipefail
kiri=${1:-build/kiri}
root=$(mktemp -d "${OFFLOAD_DIR:-/tmp}/kiri-offload-ratio.XXXXXX")
trap 'rm -rf "$root"' EXIT
steps=${STEPS:-4}
common=(--set train.steps="$steps" --set train.warmup=1 --set train.eval_every=0
  --set train.eval_batches=1 --set checkpoint.dir= --set train.dtype=bf16)
tiny=(--set data.tokenizer=byte --set model.n_layer=4 --set model.n_embd=128 --set model.n_head=4
  --set model.block_size=128 --set train.seq_len=128 --set train.micro_batch=8)
m124=(--set model.n_layer=12 --set model.n_embd=768 --set model.n_head=12
  --set model.block_size=256 --set train.seq_len=256 --set train.micro_batch=2)
# Mean step_s over the steps after the first (which faults the buffers in).
mean_step() {
  python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])][1:]; print(sum(x["step_s"] for x in r)/len(r))' "$1"
}
printf '%-10s %12s %12s %8s %12s\n' model "memory s" "offload s" ratio "wait s/step"
for name in tiny gpt2-124M; do
  if [ "$name" = tiny ]; then args=("${tiny[@]}"); else args=("${m124[@]}"); fi
  "$kiri" train "${common[@]}" "${args[@]}" --set run.dir="$root/$name-mem" >/dev/null 2>&1
  "$kiri" train "${common[@]}" "${args[@]}" --set run.dir="$root/$name-off" \
    --set offload.optimizer=nvme --set offload.path="$root/swap-$name" >/dev/null 2>&1
  a=$(mean_step "$root/$name-mem/metrics.jsonl")
  b=$(mean_step "$root/$name-off/metrics.jsonl")
  w=$(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])][1:]; print(sum(x.get("offload",{}).get("wait_s",0) for x in r)/len(r))' "$root/$name-off/metrics.jsonl")
  printf '%-10s %12.3f %12.3f %8.3f %12.3f\n' "$name" "$a" "$b" "$(echo "$b / $a" | bc -l)" "$w"
done
# The planner against measured steps. Its this-machine device is one core (a rank of one
# thread), so these runs take one OpenMP thread; the calibration is measured first, in this
# run (kiri plan --calibrate, offload.path's disk included), so the table compares like with
# like on whatever machine runs it.
cal="$root/calibration.json"
"$kiri" plan --calibrate --out "$cal" --offload-path "$root" >"$root/calibration.txt" 2>&1
grep -E "GEMM|disk" "$root/calibration.txt" || true
echo "planner (calibrated) against measured, one process of one thread, mean of steps 2-$steps:"
printf '%-10s %-5s %-8s %12s %12s %8s\n' model dtype offload "measured s" "predicted s" error
for name in tiny gpt2-124M; do
  if [ "$name" = tiny ]; then
    args=("${tiny[@]}")
    dims=(--layers 4 --hidden 128 --heads 4 --vocab 257 --micro-batch 8 --seq-len 128 --global-batch 8)
  else
    args=("${m124[@]}")
    dims=(--model gpt2-124M --micro-batch 2 --seq-len 256 --global-batch 2)
  fi
  for dtype in fp32 bf16; do
    for off in none nvme; do
      run="$root/$name-$dtype-$off-1t"
      OMP_NUM_THREADS=1 "$kiri" train "${common[@]}" "${args[@]}" --set train.dtype="$dtype" \
        --set run.dir="$run" --set offload.optimizer="$off" --set offload.path="$run-swap" \
        >/dev/null 2>&1
      m=$(mean_step "$run/metrics.jsonl")
      p=$(KIRI_CALIBRATION="$cal" "$kiri" plan "${dims[@]}" --cluster this-machine --dp 1 \
        --dtype "$dtype" --offload-optimizer "$off" --json | python3 -c \
        'import json,sys; print(json.load(sys.stdin)["step_time_s"])')
      printf '%-10s %-5s %-8s %12.3f %12.3f %+7.0f%%\n' "$name" "$dtype" "$off" "$m" "$p" \
        "$(echo "100 * ($p - $m) / $m" | bc -l)"
    done
  done
done
