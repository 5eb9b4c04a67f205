#!/usr/bin/env bash
# Issue 14's headline: GPT-2 1.5B (48 x 1600, 25 heads, GPT-2 vocabulary), sequence 1024,
# micro-batch 1, full activation checkpointing, bf16 with fp32 master weights, on this
# machine: the planner's verdict, the run without offload (a named OOM at once under
# --mem-limit 20GiB), then 5 steps with optimizer offload and with parameter offload too.
# Reports peak RSS (VmHWM), page-cache growth, step time and the metrics' I/O split.
# Needs ~25 GB free under OFFLOAD_DIR (default /tmp/kiri-offload-bench); removes it after.
# RUNS may also name parameters-grads-in-ram (parameter offload with offload.gradients=none).
#   [STEPS=5] [LR=1e-4] [RUNS="none optimizer parameters"] [EXTRA="--mem-limit 4.5GiB"] \
#     benchmarks/offload_gpt2_xl.sh [build/kiri]
# EXTRA: more kiri train arguments for the offload runs (a --mem-limit also caps the
# allocator's cache of freed blocks, which it drops before passing the limit).
set -euo pipefail
kiri=${1:-build/kiri}
dir=${OFFLOAD_DIR:-/tmp/kiri-offload-bench}
steps=${STEPS:-5}
lr=${LR:-1e-4}             # 6e-4 after one warm-up step makes a fresh 1.5B model's loss rise
runs=${RUNS:-"none optimizer parameters"}
rm -rf "$dir"
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
model=(--set model.n_layer=48 --set model.n_head=25 --set model.n_embd=1600
  --set model.block_size=1024 --set train.seq_len=1024 --set train.micro_batch=1
  --set train.dtype=bf16 --set parallel.activation_checkpointing=full
  --set train.steps="$steps" --set train.warmup=1 --set train.lr="$lr" --set train.eval_every=0
  --set train.eval_batches=1 --set checkpoint.dir= --set log.every=1)
cached_kib() { awk '/^Cached:/ {print $2}' /proc/meminfo; }

echo "== kiri plan --model gpt2-1.5B --cluster this-machine"
"$kiri" plan --model gpt2-1.5B --cluster this-machine 2>&1 | tail -n 12 || true

if [[ " $runs " == *" none "* ]]; then
echo "== without offload, --mem-limit 20GiB (expect a named out-of-memory error)"
start=$(date +%s.%N)
if "$kiri" train "${model[@]}" --set run.dir="$dir/none" --mem-limit 20GiB >"$dir/none.log" 2>&1; then
  echo "unexpected: trained without offload"
else
  echo "exit $? after $(echo "$(date +%s.%N) - $start" | bc) s:"
  grep -m1 -E "out of memory|error" "$dir/none.log" | cut -c1-300
fi
fi

run() {  # name, extra --set args...
  local name=$1
  shift
  sync
  echo 1 >/proc/sys/vm/drop_caches 2>/dev/null || true
  local before
  before=$(cached_kib)
  echo "== $name"
  /usr/bin/time -v "$kiri" train "${model[@]}" --set run.dir="$dir/$name" \
    --set offload.path="$dir/swap-$name" "$@" ${EXTRA:-} >"$dir/$name.log" 2>"$dir/$name.time" || {
    tail -n 20 "$dir/$name.log" "$dir/$name.time"
    return 1
  }
  grep -E "^step|offload" "$dir/$name.log" | tail -n $((steps + 2))
  echo "peak RSS (VmHWM): $(awk -F: '/Maximum resident/ {print $2}' "$dir/$name.time") KiB;" \
    "page cache grew by $(( ($(cached_kib) - before) / 1024 )) MiB"
  python3 - "$dir/$name/metrics.jsonl" "$(awk -F: '/Maximum resident/ {print $2}' "$dir/$name.time")" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    keys = {k: r[k] for k in r if k.startswith("offload") or k in ("step", "loss", "step_s", "tokens_per_s")}
    wait = r.get("offload", {}).get("wait_s", 0)
    keys["step_over_compute"] = round(r["step_s"] / (r["step_s"] - wait), 3)
    print(json.dumps(keys))
# kiri's RAM: what its allocator held at most (live tensors and cached blocks), against the OS's.
hwm = int(sys.argv[2]) * 1024
held = max(r["mem"]["peak_reserved"] for r in rows)
live = max(r["mem"]["peak"] for r in rows)
print(f"kiri RAM: peak live {live / 2**30:.2f} GiB, peak held (peak_reserved) {held / 2**30:.2f} GiB;"
      f" VmHWM / peak held = {hwm / held:.3f}")
PY
}
if [[ " $runs " == *" optimizer "* ]]; then run optimizer --set offload.optimizer=nvme; fi
if [[ " $runs " == *" parameters "* ]]; then  # offload.gradients' auto: the gradients too
  run parameters --set offload.optimizer=nvme --set offload.parameters=nvme \
    --set parallel.zero_stage=3
fi
if [[ " $runs " == *" parameters-grads-in-ram "* ]]; then
  run parameters-grads-in-ram --set offload.optimizer=nvme --set offload.parameters=nvme \
    --set offload.gradients=none --set parallel.zero_stage=3
fi
