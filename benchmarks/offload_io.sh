#!/usr/bin/env bash
# The offload engine's disk bandwidth (docs/performance.md): O_DIRECT write then read
# of a scratch file (1 GiB by default) under DIR, for engine in {io_uring, threads} x
# queue_depth {1, 8, 32} x block_size {128 KiB, 1 MiB, 8 MiB}, each through
# measure_disk_bandwidth (benchmarks/offload_io_bench.cpp, the code behind
# `kiri plan --calibrate`). The two engines run back to back at each setting and the
# whole matrix REPEAT times over (best of), so that the machine's noise falls on both
# alike; once idle and once with every core spinning on arithmetic (training's GEMMs
# keep the cores busy while the swapper's I/O runs). Prints markdown tables: GB/s with
# the ratio to the best of its column, the CPU seconds per GB moved (the cores training
# would have used), and io_uring over threads at each setting.
#   bash benchmarks/offload_io.sh [BUILD_DIR] [DIR]
# Environment: BENCH_BYTES (1GiB), BENCH_REPEAT (3), and BENCH_QD ("1 8 32") and
# BENCH_BLOCKS ("128KiB 1MiB 8MiB") to measure fewer settings more often.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
dir=${2:-/tmp}
bytes=${BENCH_BYTES:-1GiB}
repeat=${BENCH_REPEAT:-3}
busy_threads=$(nproc)  # the second column: every core busy with arithmetic, as in training
cmake --build "$build" --target offload_io_bench > /dev/null
work=$(mktemp -d "$dir/kiri-offload-io.XXXXXX")
out=$(mktemp)
trap 'rm -rf "$work" "$out"' EXIT  # measure_disk_bandwidth removes its files; this is the folder
for ((r = 0; r < repeat; r++)); do
  for qd in ${BENCH_QD:-1 8 32}; do
    for bs in ${BENCH_BLOCKS:-128KiB 1MiB 8MiB}; do
      for busy in 0 "$busy_threads"; do
        for engine in io_uring threads; do
          "$build/benchmarks/offload_io_bench" "$work" "$bytes" "$engine" "$qd" "$bs" 1 "$busy" >> "$out"
        done
      done
    done
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
best = {}
for r in rows:  # the best of the repeats per setting
    k = (r["busy"], r["engine"], r["queue_depth"], r["block_size"])
    b = best.setdefault(k, dict(r))
    for f in ("write_gbps", "read_gbps"):
        b[f] = max(b[f], r[f])
    b["cpu_s_per_gb"] = min(b["cpu_s_per_gb"], r["cpu_s_per_gb"])
    b["direct"] = b["direct"] and r["direct"]
busy = max(r["busy"] for r in rows)
top = {(m, f): max(b[f] for k, b in best.items() if k[0] == m)
       for m in (0, busy) for f in ("write_gbps", "read_gbps")}
def size(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
def cell(m, engine, qd, bs):
    b = best[(m, engine, qd, bs)]
    return (f"{b['write_gbps']:.2f} ({b['write_gbps'] / top[(m, 'write_gbps')]:.2f}) | "
            f"{b['read_gbps']:.2f} ({b['read_gbps'] / top[(m, 'read_gbps')]:.2f})")
print(f"{rows[0]['bytes'] / 2**30:.2f} GiB scratch file, O_DIRECT: "
      f"{all(b['direct'] for b in best.values())}, best of {len(rows) // len(best)}; "
      f"GB/s (ratio to the best of its column)")
print()
print(f"| queue depth | block | engine | write, idle | read, idle | write, {busy} cores busy | "
      f"read, {busy} cores busy | CPU s per GB (idle) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
keys = sorted({(k[2], k[3], k[1]) for k in best})
for qd, bs, engine in keys:
    print(f"| {qd} | {size(bs)} | {engine} | {cell(0, engine, qd, bs)} | "
          f"{cell(busy, engine, qd, bs)} | {best[(0, engine, qd, bs)]['cpu_s_per_gb']:.3f} |")
print()
print("| io_uring / threads | write, idle | read, idle | write, busy | read, busy |")
print("| --- | --- | --- | --- | --- |")
for qd, bs in sorted({(k[2], k[3]) for k in best}):
    u = [best[(m, "io_uring", qd, bs)] for m in (0, busy)]
    t = [best[(m, "threads", qd, bs)] for m in (0, busy)]
    print(f"| qd {qd}, {size(bs)} | " + " | ".join(
        f"{u[i][f] / t[i][f]:.2f}" for i in (0, 1) for f in ("write_gbps", "read_gbps")) + " |")
PY
