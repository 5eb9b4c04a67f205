#!/usr/bin/env bash
# DDP overlap across hosts (issue 27): the share of the gradient all-reduce hidden under
# backward, by bucket size, on a 2-host namespace cluster (scripts/cluster.sh) at each link
# rate. GPT-2, 4 layers x 256 wide (12.6 MB of fp32 gradients), byte vocabulary, T 128, 8
# sequences per step, dp 2 on 2 hosts x 1 rank, 1 thread each; medians of steps 4-20.
# Two measures, from the same runs:
#   hidden (steps) = (naive - DDP) / (naive - DDP in one host), step times: naive is one
#     bucket reduced after backward, and naive less the in-host step is the all-reduce's
#     exposed time. A backward slowed by the work of communicating counts as not hidden.
#   hidden (timeline) = 1 - DDP's tail / naive's tail, from the traces (log.trace=true,
#     benchmarks/trace_overlap.py): a tail is how long after backward's end the step's last
#     gradient collective completed, so naive's tail is its whole all-reduce.
#   backward = DDP's backward over naive's (in whose backward nothing travels): what
#     carrying the transfers during backward costs the compute on these shared cores.
#   benchmarks/ddp_overlap.sh build/kiri [RATE ...]     (default: 2gbit 1gbit)
# Needs root and network namespaces (exits 77 naming the reason otherwise).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
kiri=$(realpath "${1:?usage: benchmarks/ddp_overlap.sh KIRI_BINARY [RATE ...]}")
shift
rates=("$@")
((${#rates[@]})) || rates=(2gbit 1gbit)
work=$(mktemp -d /tmp/kiri-ddp-overlap.XXXXXX)
export KIRI_CLUSTER_DIR=$work/state
name=ko6
cluster() { bash "$root/scripts/cluster.sh" "$@"; }
cleanup() {
  cluster down --name "$name" > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

model="--set data.tokenizer=byte --set model.n_layer=4 --set model.n_head=4 \
--set model.n_embd=256 --set model.block_size=128 --set train.seq_len=128 \
--set train.micro_batch=4 --set train.steps=20 --set train.warmup=1 --set train.eval_every=0 \
--set train.eval_batches=1 --set checkpoint.every=0 --set parallel.timeout_s=300 \
--global-batch 8 --set parallel.dp=2 --set log.trace=true"

# step HOSTFILE LABEL SETS...: the median step time (s) of steps 4-20, then the traces'
# median backward and tail (s)
step() {
  local hostfile=$1 dir=$work/run-$2
  shift 2
  rm -rf "$dir"
  # shellcheck disable=SC2086
  if ! "$kiri" launch -n 2 --threads 1 --hostfile "$hostfile" -- train $model \
    --set run.dir="$dir" "$@" > "$dir.log" 2>&1; then
    echo "benchmarks/ddp_overlap.sh: $2 failed:" >&2
    tail -20 "$dir.log" >&2
    exit 1
  fi
  python3 -c '
import json, statistics, sys
s = [json.loads(l)["step_s"] for l in open(sys.argv[1]) if "step_s" in l]
t = json.loads(sys.argv[2])
backward, tail = t["backward_s"], t["tail_s"]
print(f"{statistics.median(s[3:]):.4f} {backward:.4f} {tail:.4f}")' \
    "$dir/metrics.jsonl" "$(python3 "$root/benchmarks/trace_overlap.py" "$dir")"
}

echo "| link | in one host (s) | naive, one bucket (s) | bucket_mb | DDP step (s) | hidden (steps) | naive's tail (ms) | DDP's tail (ms) | hidden (timeline) | backward: DDP / naive |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for rate in "${rates[@]}"; do
  rc=0
  cluster up --name "$name" --subnet 10.231.6.0/24 --hosts 2 --ranks-per-host 2 --link "$rate" \
    > "$work/up.log" 2>&1 || rc=$?
  ((rc == 0)) || {
    cat "$work/up.log" >&2
    exit "$rc"
  }
  state=$KIRI_CLUSTER_DIR/$name
  # shellcheck disable=SC1091
  source "$state/mpirun.env"
  # One TCP socket per pair of ranks, Open MPI's default and kiri's (run 3 of
  # docs/performance.md set OMPI_MCA_btl_tcp_links=4, before kiri's pair collectives moved
  # in eager pieces: docs/cluster.md). The links are reshaped only between runs here.
  head -1 "$state/hostfile" > "$work/one_host"
  sed 's/slots=2/slots=1/' "$state/hostfile" > "$work/two_hosts"
  out=$(step "$work/one_host" local)
  read -r local_s _ _ <<< "$out"
  out=$(step "$work/two_hosts" naive --set parallel.bucket_mb=100000)
  read -r naive naive_bw naive_tail <<< "$out"
  for mb in 0.25 1 2 25; do
    out=$(step "$work/two_hosts" "b$mb" --set parallel.bucket_mb="$mb")
    read -r t bw tail <<< "$out"
    python3 -c '
import sys
rate, mb = sys.argv[1:3]
local, naive, t, naive_tail, tail, naive_bw, bw = map(float, sys.argv[3:])
print(f"| {rate} | {local:.3f} | {naive:.3f} | {mb} | {t:.3f} | {(naive - t) / (naive - local):.0%} | "
      f"{naive_tail * 1e3:.1f} | {tail * 1e3:.1f} | {1 - tail / naive_tail:.0%} | {bw / naive_bw:.2f} |")' \
      "$rate" "$mb" "$local_s" "$naive" "$t" "$naive_tail" "$tail" "$naive_bw" "$bw"
  done
  cluster down --name "$name" > /dev/null
done
