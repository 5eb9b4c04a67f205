#!/usr/bin/env bash
# The seeds' network lessons on a cluster of network-namespace hosts (scripts/cluster.sh,
# docs/cluster.md): each pair of layouts side by side in one run, at each link rate, as the
# median step time of the last steps of a short `kiri train` (GPT-2, 4 layers x 256 wide,
# byte vocabulary, T 128, 8 sequences per step). Prints a markdown table of step times and
# ratios, each step beside the planner's prediction for the same layout and link
# (benchmarks/cluster_plan.sh; its compute from `kiri plan --calibrate`'s file) and the
# prediction's error (docs/performance.md).
#   benchmarks/cluster.sh build/kiri [RATE ...]     (default: 1gbit 200mbit 50mbit)
# BURST_MS: the links' tbf burst, milliseconds at the rate (scripts/cluster.sh --burst-ms;
# default 5); a smaller one keeps short messages at the rate, as a real wire does.
# Needs root and network namespaces (exits 77 naming the reason otherwise). Every host shares
# this machine's cores: 2 ranks per host on 2 cores oversubscribe them, so compute is slower
# than the link would make it on real hosts; the ratios inside a row pair are what it shows.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
kiri=$(realpath "${1:?usage: benchmarks/cluster.sh KIRI_BINARY [RATE ...]}")
shift
rates=("$@")
((${#rates[@]})) || rates=(1gbit 200mbit 50mbit)
steps=${STEPS:-8}
work=$(mktemp -d /tmp/kiri-cluster-bench.XXXXXX)
export KIRI_CLUSTER_DIR=$work/state
name=kb5
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
--set train.micro_batch=4 --set train.steps=$steps --set train.warmup=1 \
--set train.eval_every=0 --set train.eval_batches=1 --set checkpoint.every=0 \
--set parallel.timeout_s=300 --global-batch 8"

# The median step time (s) of a run's steps after the first 3.
median_step() {
  python3 -c '
import json, statistics, sys
s = [json.loads(l)["step_s"] for l in open(sys.argv[1]) if "step_s" in l]
print(f"{statistics.median(s[3:] or s):.4f}")' "$1/metrics.jsonl"
}

# step_time HOSTFILE RANKS LABEL SETS...: prints the median step time of that layout
step_time() {
  local hostfile=$1 n=$2 label=$3
  shift 3
  local dir=$work/run-$label
  rm -rf "$dir"
  # shellcheck disable=SC2086
  if ! "$kiri" launch -n "$n" --threads 1 --hostfile "$hostfile" -- train $model \
    --set run.dir="$dir" "$@" > "$dir.log" 2>&1; then
    echo "benchmarks/cluster.sh: $label failed:" >&2
    tail -20 "$dir.log" >&2
    exit 1
  fi
  median_step "$dir"
}

# The planner's step for row label $2 at rate $1: with the link at the tc rate, and (-m) with
# the link as kiri's all_reduce measured it across the hosts and the share of compute a
# transfer in flight took there ($measured_link).
predicted() { bash "$root/benchmarks/cluster_plan.sh" "$kiri" --row "$1" "$2"; }
predicted_m() { CLUSTER_PLAN_LINK=$measured_link predicted "$@"; }

# row RATE A_LABEL A_TIME A_ROW B_LABEL B_TIME B_ROW: one table row, each measured step
# beside the predicted ones (and their errors): tc's rate / the measured link; B / A measured
# and predicted (measured link).
row() {
  local pa pb ma mb
  pa=$(predicted "$1" "$4")
  pb=$(predicted "$1" "$7")
  ma=$(predicted_m "$1" "$4")
  mb=$(predicted_m "$1" "$7")
  python3 -c '
import sys
rate, a, ta, pa, ma, b, tb, pb, mb = sys.argv[1:]
ta, pa, ma, tb, pb, mb = map(float, (ta, pa, ma, tb, pb, mb))
err = lambda p, m: f"{p:.3f} ({(p - m) / m:+.0%})"
print(f"| {rate} | {a} | {ta:.3f} | {err(pa, ta)} / {err(ma, ta)} | {b} | {tb:.3f} | "
      f"{err(pb, tb)} / {err(mb, tb)} | {tb / ta:.2f}x | {mb / ma:.2f}x |")' \
    "$1" "$2" "$3" "$pa" "$ma" "$5" "$6" "$pb" "$mb"
}

# This machine's compute for the predictions, measured now (kiri plan --calibrate on 2 ranks
# of this host, 1 thread each), unless KIRI_CALIBRATION names a file: without one the
# this-machine preset would take its assumed rates.
if [[ -z ${KIRI_CALIBRATION:-} ]]; then
  export KIRI_CALIBRATION=$work/compute.json
  if ! "$kiri" launch -n 2 --threads 1 -- plan --calibrate --out "$KIRI_CALIBRATION" \
    --offload-path "$work/calibration" --disk-bytes 4MiB > "$work/compute.log" 2>&1; then
    echo "benchmarks/cluster.sh: measuring this machine's compute failed:" >&2
    tail -20 "$work/compute.log" >&2
    exit 1
  fi
fi
echo "compute for the predictions: $KIRI_CALIBRATION" >&2
echo "| link | A | A step (s) | predicted: rate / link (error) | B | B step (s) |" \
  "predicted: rate / link (error) | B / A | predicted B / A |"
echo "|---|---|---|---|---|---|---|---|---|"
for rate in "${rates[@]}"; do
  rc=0
  cluster up --name "$name" --subnet 10.231.5.0/24 --hosts 2 --ranks-per-host 2 --link "$rate" \
    --burst-ms "${BURST_MS:-5}" > "$work/up.log" 2>&1 || rc=$?
  if ((rc != 0)); then
    cat "$work/up.log" >&2
    exit "$rc"
  fi
  state=$KIRI_CLUSTER_DIR/$name
  # shellcheck disable=SC1091
  source "$state/mpirun.env"
  # One TCP socket per pair of ranks, Open MPI's default and kiri's (run 3 of
  # docs/performance.md set OMPI_MCA_btl_tcp_links=4, before kiri's pair collectives moved
  # in eager pieces: docs/cluster.md). The links are reshaped only between runs here.
  head -1 "$state/hostfile" > "$work/one_host"                             # 1 host x 2 ranks
  sed 's/slots=2/slots=1/' "$state/hostfile" > "$work/two_hosts"           # 2 hosts x 1 rank
  # The link as kiri's own all_reduce sees it across the two hosts (kiri plan --calibrate, 4
  # KiB to 16 MiB, median of 20 each): the planner's second prediction takes its latency and
  # the bulk rate of its largest all-reduce, 2α + bytes/β on 2 ranks. (The calibration's
  # least-squares fit weighs the small messages most, and those pass within tbf's burst, 5
  # ms at the rate: at 1gbit it fitted 261 MB/s, twice the wire.)
  if ! "$kiri" launch -n 2 --threads 1 --hostfile "$work/two_hosts" -- plan --calibrate \
    --out "$work/link-$rate.json" --offload-path "$work/calibration" --disk-bytes 4MiB \
    > "$work/link-$rate.log" 2>&1; then
    echo "benchmarks/cluster.sh: measuring the link failed:" >&2
    tail -20 "$work/link-$rate.log" >&2
    exit 1
  fi
  measured_link=$(python3 -c '
import json, sys
link = json.load(open(sys.argv[1]))["link"]
big = max(link["samples"], key=lambda s: s["bytes"])
print(big["bytes"] / (big["seconds"] - 2 * link["latency"]), link["latency"],
      link.get("transfer_compute_share", 0))
print(sys.argv[2] + ": all_reduce samples (bytes: s):", ", ".join(
    "%.0f: %.6f" % (s["bytes"], s["seconds"]) for s in link["samples"]), file=sys.stderr)' \
    "$work/link-$rate.json" "$rate")
  echo "$rate: kiri's all_reduce across the hosts: $measured_link (bytes/s, s, the share of" \
    "compute a transfer in flight took)" >&2
  ddp=(--set parallel.dp=2)
  a=$(step_time "$work/one_host" 2 ddp_in_host "${ddp[@]}")
  a_in_host=$a
  b=$(step_time "$work/two_hosts" 2 ddp_across "${ddp[@]}")
  row "$rate" "DDP, 1 host x 2" "$a" ddp_in_host "DDP, 2 hosts x 1" "$b" ddp_across
  a=$(step_time "$work/two_hosts" 2 zero2 --set parallel.dp=2 --set parallel.zero_stage=2)
  b=$(step_time "$work/two_hosts" 2 zero3 --set parallel.dp=2 --set parallel.zero_stage=3)
  row "$rate" "ZeRO-2, 2 hosts x 1" "$a" zero2 "ZeRO-3, 2 hosts x 1" "$b" zero3
  a=$(step_time "$state/hostfile" 4 hybrid --set parallel.dp=4 --set parallel.zero_stage=3 \
    --set parallel.sharding_strategy=HYBRID_SHARD --set parallel.shard_group_size=2)
  b=$(step_time "$state/hostfile" 4 zero3_all --set parallel.dp=4 --set parallel.zero_stage=3)
  row "$rate" "hybrid (shard in host), 2 x 2" "$a" hybrid "ZeRO-3 over all, 2 x 2" "$b" zero3_all
  # The model's 12.6 MB of fp32 gradients in 1 MB buckets, reduced as backward makes them,
  # against one bucket reduced after backward. The share of the all-reduce hidden under
  # backward, on the runs' traces (benchmarks/trace_overlap.py): 1 - DDP's tail / naive's,
  # a tail being how long after backward's end the last gradient collective completed; and
  # from the steps, (naive - DDP) / (naive - DDP in one host), which also counts what
  # carrying the transfers takes from backward (docs/performance.md, "DDP overlap on the
  # timeline").
  local_ddp=$a_in_host
  a=$(step_time "$work/two_hosts" 2 ddp_buckets "${ddp[@]}" --set parallel.bucket_mb=1 \
    --set log.trace=true)
  b=$(step_time "$work/two_hosts" 2 naive "${ddp[@]}" --set parallel.bucket_mb=100000 \
    --set log.trace=true)
  row "$rate" "DDP (1 MB buckets), 2 x 1" "$a" ddp_buckets "naive DP (one bucket), 2 x 1" "$b" naive
  python3 -c '
import json, sys
rate, a, b, local = sys.argv[1], *map(float, sys.argv[2:5])
ddp, naive = json.loads(sys.argv[5]), json.loads(sys.argv[6])
tail = naive["tail_s"]
hidden = 1 - ddp["tail_s"] / tail
print(f"| {rate} | DDP overlap: all-reduce hidden under backward (timeline; steps) | "
      f"{hidden:.0%} ({(b - a) / (b - local):.0%}) | | naive all-reduce after backward | "
      f"{tail:.3f} | | | |")' "$rate" "$a" "$b" "$local_ddp" \
    "$(python3 "$root/benchmarks/trace_overlap.py" "$work/run-ddp_buckets")" \
    "$(python3 "$root/benchmarks/trace_overlap.py" "$work/run-naive")"
  a=$(step_time "$work/one_host" 2 tp_in_host --set parallel.tp=2)
  b=$(step_time "$work/two_hosts" 2 tp_across --set parallel.tp=2)
  row "$rate" "tp 2 in a host" "$a" tp_in_host "tp 2 across hosts" "$b" tp_across
  cluster down --name "$name" > /dev/null
done
