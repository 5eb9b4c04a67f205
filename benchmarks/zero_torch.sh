#!/usr/bin/env bash
# PyTorch DDP vs DDP + ZeroRedundancyOptimizer (ZeRO stage 1) on the `tiny` config of
# benchmarks/run.sh's data-parallel part (2 ranks x 1 thread, gloo, B 8 per rank), run
# alternately ROUNDS times, in PyTorch 2.15 (scripts/test-venv.sh's venv,
# benchmarks/torch_peer.sh). Prints each mode's JSON line (benchmarks/torch_gpt2.py), the load
# average before each run, and the step-time ratio ZeRO / DDP of each round.
#   bash benchmarks/zero_torch.sh [ROUNDS]      (BENCH_STEPS, default 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-1}
steps=${BENCH_STEPS:-5}

run() {  # ddp|zero
  OMP_NUM_THREADS=1 bash "$root/benchmarks/torch_peer.sh" gpt2 --ranks 2 --"$1" --config tiny \
    --threads 1 --steps "$steps" --warmup-steps 2
}

for r in $(seq "$rounds"); do
  echo "round $r: load average $(cut -d' ' -f1-3 /proc/loadavg) before DDP" >&2
  ddp=$(run ddp); echo "$ddp"
  echo "round $r: load average $(cut -d' ' -f1-3 /proc/loadavg) before ZeRO" >&2
  zero=$(run zero); echo "$zero"
  python3 - "$r" "$ddp" "$zero" >&2 <<'PY'
import json, sys
r, d, z = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
mib = lambda m: [round(b / 2**20, 1) for b in m["opt_state_bytes"]]
print(f"round {r}: step ZeRO/DDP = {z['step_s'] / d['step_s']:.3f} "
      f"({z['step_s']:.3f} s / {d['step_s']:.3f} s); optimizer state per rank, MiB: "
      f"ZeRO {mib(z)}, DDP {mib(d)}")
PY
done
