#!/usr/bin/env bash
# benchmarks/cluster_plan.sh without root: the planner's predictions for the rows of
# benchmarks/cluster.sh (docs/performance.md, "Across hosts") with a fixed calibration of the
# machine they were measured on (tests/plan/data/cluster_calibration.json: kiri plan
# --calibrate on 2 ranks) and each rate's link as kiri's all_reduce measured it across the
# namespace hosts, with the share of a rank's compute that a transfer in flight took there
# (benchmarks/cluster.sh prints both; run 5 of docs/performance.md), must agree with what the
# cluster measured: in every pair the planner picks the faster layout (every measured B was
# slower than its A; ZeRO-3 against ZeRO-2 at 1gbit by 0-10% in runs 4 and 5, which the
# planner picks only with the share: 0.96x without it), and each pair's predicted B / A grows
# from 1gbit to 200mbit, as measured in every run (DDP's buckets against naive DP excepted:
# its B / A went 1.43x -> 1.63x, 1.51x -> 1.52x and 1.72x -> 1.58x in three runs, so no
# direction was measured).
#   tests/plan/cluster_plan_test.sh KIRI SOURCE_ROOT
set -euo pipefail
kiri=${1:?usage: cluster_plan_test.sh KIRI SOURCE_ROOT}
root=${2:?usage: cluster_plan_test.sh KIRI SOURCE_ROOT}
export KIRI_CALIBRATION=$root/tests/plan/data/cluster_calibration.json
export CLUSTER_PLAN_CORES=2  # the machine of the calibration and the measurements
declare -A link=(
  [1gbit]="117589090 1.78e-06 0.308"
  [200mbit]="23857727 1e-09 0.178"
)
pairs=("ddp_in_host ddp_across" "zero2 zero3" "hybrid zero3_all" "ddp_buckets naive"
  "tp_in_host tp_across")
out=""
for rate in 1gbit 200mbit; do
  for pair in "${pairs[@]}"; do
    read -r a b <<< "$pair"
    ta=$(CLUSTER_PLAN_LINK=${link[$rate]} bash "$root/benchmarks/cluster_plan.sh" "$kiri" --row "$rate" "$a")
    tb=$(CLUSTER_PLAN_LINK=${link[$rate]} bash "$root/benchmarks/cluster_plan.sh" "$kiri" --row "$rate" "$b")
    echo "$rate $a $ta $b $tb"
    out+="$rate $a $ta $b $tb"$'\n'
  done
done
python3 - "$out" <<'PY'
import sys
ratio, bad = {}, []
for line in sys.argv[1].split("\n"):
    if not line:
        continue
    rate, a, ta, b, tb = line.split()
    ta, tb = float(ta), float(tb)
    if not tb > ta:
        bad.append(f"{rate}: {b} predicted {tb} s, not slower than {a}'s {ta} s (measured: slower)")
    ratio.setdefault(a, {})[rate] = tb / ta
for a, r in ratio.items():
    if a != "ddp_buckets" and not r["200mbit"] > r["1gbit"]:
        bad.append(f"{a}'s pair: predicted B / A {r['200mbit']:.2f} at 200mbit, not above "
                   f"{r['1gbit']:.2f} at 1gbit (measured: above)")
if len(ratio) != 5:
    bad.append(f"expected 5 pairs, got {len(ratio)}")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
