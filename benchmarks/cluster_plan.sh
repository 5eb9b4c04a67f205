#!/usr/bin/env bash
# The planner's predictions for the rows of benchmarks/cluster.sh (docs/performance.md,
# "Across hosts"): the same model and layouts, on the namespace cluster of scripts/cluster.sh
# described to `kiri plan` in one line (docs/planner.md, "A cluster of hosts").
#   benchmarks/cluster_plan.sh KIRI --row RATE ROW   one row's predicted step time (s)
#   benchmarks/cluster_plan.sh KIRI [RATE ...]   a markdown table of every pair (default
#                                                rates: 1gbit 200mbit)
# ROW is one of cluster.sh's labels: ddp_in_host ddp_across zero2 zero3 hybrid zero3_all
# ddp_buckets naive tp_in_host tp_across. Compute comes from `kiri plan --calibrate`'s file
# ($KIRI_CALIBRATION, else runs/calibration/this-machine.json; the cluster is this-machine).
# Needs no root: it only runs `kiri plan`.
set -euo pipefail

kiri=${1:?usage: benchmarks/cluster_plan.sh KIRI [--row RATE ROW | RATE ...]}
shift

# The hosts share this machine's cores (every rank of every host), have one link each (tc
# shapes the host's veth, both ways), and the inter-host latency is an assumption: TCP
# through two veths and a bridge in the kernel, plus Open MPI's TCP transport. The fixed
# per-step cost is kiri train's own between steps (an assumption, not calibrated).
cores=${CLUSTER_PLAN_CORES:-$(nproc)}
latency=${CLUSTER_PLAN_LATENCY:-100us}
overhead=${CLUSTER_PLAN_OVERHEAD:-0}

model=(--set data.tokenizer=byte --set model.n_layer=4 --set model.n_head=4
  --set model.n_embd=256 --set model.block_size=128 --set train.seq_len=128
  --global-batch 8)

# The layout of a row: hosts, ranks per host, then its config keys (cluster.sh's, with
# train.micro_batch as kiri train's --global-batch 8 resolves it: 8 / dp, at most 4).
layout_of() {
  case $1 in
    ddp_in_host) echo "1 2 parallel.dp=2 train.micro_batch=4" ;;
    ddp_across) echo "2 1 parallel.dp=2 train.micro_batch=4" ;;
    zero2) echo "2 1 parallel.dp=2 parallel.zero_stage=2 train.micro_batch=4" ;;
    zero3) echo "2 1 parallel.dp=2 parallel.zero_stage=3 train.micro_batch=4" ;;
    hybrid)
      echo "2 2 parallel.dp=4 parallel.zero_stage=3 parallel.sharding_strategy=HYBRID_SHARD" \
        "parallel.shard_group_size=2 train.micro_batch=2"
      ;;
    zero3_all) echo "2 2 parallel.dp=4 parallel.zero_stage=3 train.micro_batch=2" ;;
    ddp_buckets) echo "2 1 parallel.dp=2 parallel.bucket_mb=1 train.micro_batch=4" ;;
    naive) echo "2 1 parallel.dp=2 parallel.bucket_mb=100000 train.micro_batch=4" ;;
    tp_in_host) echo "1 2 parallel.tp=2 train.micro_batch=4" ;;
    tp_across) echo "2 1 parallel.tp=2 train.micro_batch=4" ;;
    *)
      echo "benchmarks/cluster_plan.sh: unknown row '$1'" >&2
      return 2
      ;;
  esac
}

# predict RATE ROW: the planner's step time for that row, seconds. With CLUSTER_PLAN_LINK
# set to "BYTES_PER_S SECONDS [SHARE]" (kiri's all_reduce across the hosts, fitted by kiri
# plan --calibrate, and the share of a rank's compute a transfer in flight took:
# benchmarks/cluster.sh measures them), the link is that instead of RATE, and a transfer
# hidden behind compute costs that share of it (--transfer-compute-share).
predict() {
  local rate=$1 fields hosts rph sets=() link=(--inter-bandwidth "$1" --inter-latency "$latency")
  if [[ -n ${CLUSTER_PLAN_LINK:-} ]]; then
    read -r bw lat share <<< "$CLUSTER_PLAN_LINK"
    link=(--inter-bandwidth "$bw" --inter-latency "$lat")
    [[ -z ${share:-} ]] || link+=(--transfer-compute-share "$share")
  fi
  fields=$(layout_of "$2")
  read -r hosts rph rest <<< "$fields"
  for kv in $rest; do sets+=(--set "$kv"); done
  "$kiri" plan "${model[@]}" "${sets[@]}" --cluster this-machine --hosts "$hosts" \
    --ranks-per-host "$rph" --nics-per-node 1 "${link[@]}" --shared-cores "$cores" \
    --step-overhead "$overhead" --json |
    python3 -c 'import json, sys; print("%.4f" % json.load(sys.stdin)["step_time_s"])'
}

if [[ ${1:-} == --row ]]; then
  predict "${2:?--row RATE ROW}" "${3:?--row RATE ROW}"
  exit 0
fi
rates=("$@")
((${#rates[@]})) || rates=(1gbit 200mbit)
pairs=("ddp_in_host ddp_across" "zero2 zero3" "hybrid zero3_all" "ddp_buckets naive"
  "tp_in_host tp_across")
echo "| link | A | A predicted (s) | B | B predicted (s) | B / A |"
echo "|---|---|---|---|---|---|"
for rate in "${rates[@]}"; do
  for pair in "${pairs[@]}"; do
    read -r a b <<< "$pair"
    ta=$(predict "$rate" "$a")
    tb=$(predict "$rate" "$b")
    python3 -c '
import sys
rate, a, ta, b, tb = sys.argv[1:]
print(f"| {rate} | {a} | {float(ta):.3f} | {b} | {float(tb):.3f} | {float(tb)/float(ta):.2f}x |")' \
      "$rate" "$a" "$ta" "$b" "$tb"
  done
done
