#!/usr/bin/env bash
# Every cut across hosts (docs/cluster.md): on a cluster of 2 network-namespace hosts made by
# scripts/cluster.sh, `kiri launch --hostfile` runs the layouts below on 2 hosts x 1 rank and
# 2 hosts x 2 ranks, and each run's loss and gradient norm at every step equal one process's
# on the same data, seed and global batch (within the layout matrix's fp32 tolerance).
# Exits 77 (skip) with the script's reason where namespaces cannot be made.
#   tests/cluster/cluster_layouts_test.sh build/kiri
set -euo pipefail

# shellcheck source=tests/cluster/cluster_lib.sh
source "$(dirname "$0")/cluster_lib.sh"
cluster_start cluster_layouts_test kl7 10.231.7.0/24 2 2 "${1:-}"
sed 's/slots=2/slots=1/' "$state/hostfile" > "$work/hostfile1"  # 2 hosts x 1 rank

# A tiny GPT-2 (or Llama) on bytes: 8 sequences per step on every layout.
tiny() {
  echo "--set data.tokenizer=byte --set model.n_layer=4 --set model.n_head=4" \
    "--set model.n_embd=32 --set model.block_size=32 --set train.seq_len=32" \
    "--set train.micro_batch=2 --set train.steps=4 --set train.warmup=1" \
    "--set train.eval_every=0 --set train.eval_batches=1 --set checkpoint.every=0" \
    "--set parallel.timeout_s=60 --global-batch 8 --set run.dir=$1"
}

# step loss grad_norm, one line per step, from a run's metrics.jsonl
steps_of() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if "loss" in m and "step" in m:
        print(m["step"], repr(m["loss"]), repr(m["grad_norm"]))' "$1/metrics.jsonl"
}

# Compares a run's steps with the reference's: relative 2e-5 on the loss, 2e-4 on the norm.
compare() {
  python3 - "$1" "$2" "$3" << 'EOF'
import sys
label, ref, got = sys.argv[1], sys.argv[2].splitlines(), sys.argv[3].splitlines()
if len(ref) != len(got) or not ref:
    sys.exit(f"{label}: {len(got)} steps against the reference's {len(ref)}")
bad = []
for r, g in zip(ref, got):
    s, rl, rn = r.split(); _, gl, gn = g.split()
    if abs(float(gl) - float(rl)) > 2e-5 * max(1.0, abs(float(rl))) or \
       abs(float(gn) - float(rn)) > 2e-4 * max(1.0, abs(float(rn))):
        bad.append(f"step {s}: loss {gl} vs {rl}, grad_norm {gn} vs {rn}")
if bad:
    sys.exit(f"{label}: differs from one process\n  " + "\n  ".join(bad))
print(f"{label}: {len(got)} steps equal one process")
EOF
}

failed=0
# run ARCH LABEL HOSTFILE RANKS SETS...
run() {
  local arch=$1 label=$2 hostfile=$3 n=$4
  shift 4
  local dir=$work/$arch-$label
  # shellcheck disable=SC2046
  if ! timeout 300 "$kiri" launch -n "$n" --threads 1 --hostfile "$hostfile" -- \
    train $(tiny "$dir") --set model.arch="$arch" "$@" > "$dir.log" 2>&1; then
    echo "$arch $label: the run failed:"
    tail -20 "$dir.log"
    failed=1
    return
  fi
  compare "$arch $label ($n ranks on 2 hosts)" "${ref[$arch]}" "$(steps_of "$dir")" || failed=1
}

declare -A ref
for arch in gpt2 llama; do
  # shellcheck disable=SC2046
  OMP_NUM_THREADS=1 "$kiri" train $(tiny "$work/$arch-single") --set model.arch="$arch" \
    > "$work/$arch-single.log" 2>&1 || {
    tail -20 "$work/$arch-single.log"
    exit 1
  }
  ref[$arch]=$(steps_of "$work/$arch-single")
done

# 2 hosts x 1 rank: every cut crosses the link.
run gpt2 ddp "$work/hostfile1" 2 --set parallel.dp=2
run gpt2 zero2 "$work/hostfile1" 2 --set parallel.dp=2 --set parallel.zero_stage=2
run gpt2 zero3 "$work/hostfile1" 2 --set parallel.dp=2 --set parallel.zero_stage=3
run llama tp2_sp "$work/hostfile1" 2 --set parallel.tp=2 --set parallel.sequence_parallel=true
run gpt2 pp2_1f1b "$work/hostfile1" 2 --set parallel.pp=2 --set parallel.microbatches=2 \
  --set parallel.schedule=1f1b
# 2 hosts x 2 ranks: tp and the shard group inside a host, dp and pp across.
run gpt2 hybrid "$state/hostfile" 4 --set parallel.dp=4 \
  --set parallel.sharding_strategy=HYBRID_SHARD --set parallel.shard_group_size=2
run gpt2 tp2_zero1 "$state/hostfile" 4 --set parallel.dp=2 --set parallel.tp=2 \
  --set parallel.zero_stage=1
run llama pp2_interleaved_tp2 "$state/hostfile" 4 --set parallel.pp=2 --set parallel.tp=2 \
  --set parallel.microbatches=2 --set parallel.schedule=interleaved \
  --set parallel.virtual_stages=2
run gpt2 zero3_offload "$state/hostfile" 4 --set parallel.dp=4 --set parallel.zero_stage=3 \
  --set offload.optimizer=nvme --set offload.parameters=nvme --set "offload.path=$work/swap" \
  --set offload.block_size=4KiB --set offload.buffer_mb=0.0625
# tp across hosts is allowed, with the planner's cost of it said once.
grep -q "a group spans hosts: the planner models this step at" "$work/llama-tp2_sp.log" || {
  echo "llama tp2_sp: no planner's cost of tp across hosts:"
  grep -i "span" "$work/llama-tp2_sp.log"
  failed=1
}
# Ranks placed round robin (mpirun --map-by node: ranks 0 and 2 on h0, 1 and 3 on h1): the
# mesh orders them by host, so tp 2 stays inside a host, and the run equals one process.
dir=$work/gpt2-round_robin
# shellcheck disable=SC2046
if timeout 300 mpirun --allow-run-as-root -n 4 --hostfile "$state/hostfile" --map-by node \
  --bind-to none -x OMP_NUM_THREADS=1 "$kiri" train $(tiny "$dir") --set parallel.dp=2 \
  --set parallel.tp=2 > "$dir.log" 2>&1; then
  compare "gpt2 round_robin (4 ranks on 2 hosts)" "${ref[gpt2]}" "$(steps_of "$dir")" || failed=1
  grep -q "host 0: ranks 0, 2; host 1: ranks 1, 3); tp inside hosts, dp across hosts (the launcher placed ranks round robin" "$dir.log" || {
    echo "gpt2 round_robin: the host map does not say tp stays inside hosts:"
    grep "hosts:" "$dir.log"
    failed=1
  }
else
  echo "gpt2 round_robin: the run failed:"
  tail -20 "$dir.log"
  failed=1
fi
# --auto across hosts: the planner sees 2 hosts x 2 ranks and the link as measured.
run gpt2 auto "$state/hostfile" 4 --auto
grep -q "auto layout: 2 hosts x 2 ranks; the link between hosts measured at" \
  "$work/gpt2-auto.log" || {
  echo "gpt2 auto: the planner did not see the hosts:"
  grep "auto layout" "$work/gpt2-auto.log"
  failed=1
}
# A 16 MiB all-reduce of two ranks on two hosts (the calibration's, docs/comm.md "Two ranks on
# two hosts") moves 16 MiB each way: at least 75% of the 1gbit link. In rendezvous messages,
# whose replies queued behind the peer's data, the two directions took turns (55%).
timeout 120 "$kiri" launch -n 2 --threads 1 --hostfile "$work/hostfile1" -- plan --calibrate \
  --disk-bytes 1MiB --offload-path "$work" --out "$work/cal.json" > "$work/cal.log" 2>&1 || {
  echo "plan --calibrate on 2 hosts failed:"
  tail -20 "$work/cal.log"
  failed=1
}
python3 - "$work/cal.json" << 'EOF' || failed=1
import json, sys
s = [x for x in json.load(open(sys.argv[1]))["link"]["samples"] if x["bytes"] == 16 << 20]
rate = s[0]["bytes"] / s[0]["seconds"] / 125e6 if s else 0
if rate < 0.75:
    sys.exit(f"a 16 MiB all-reduce on 2 hosts ran at {rate:.0%} of 1gbit (at least 75%): {s}")
print(f"a 16 MiB all-reduce on 2 hosts: {s[0]['seconds']:.3f} s, {rate:.0%} of 1gbit")
EOF
exit "$failed"
