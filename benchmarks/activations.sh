#!/bin/bash
# Issue 16's activation table: tensor parallelism over 2 ranks (1 thread each) on `tiny`
# (4 x 256, T 128, micro-batch 8) and gpt2-124M (12 x 768, T 64, micro-batch 4), fp32:
# plain tp against sequence parallelism, selective recomputation (core_attn, Megatron's
# default, and every module: core_attn, layernorm, mlp_act) and full recomputation. The
# layouts run interleaved round by round in one run (kiri bench --activations), so the ratios
# to plain tp share the machine's noise. Beside each measurement, `kiri plan`'s prediction of
# the same layout on this machine (--cluster this-machine; a calibration file when
# `kiri plan --calibrate` wrote one): the step time, its ratio to plain tp, the activations'
# peak and the whole peak, per rank.
#   benchmarks/activations.sh [KIRI] [CONFIGS] [ROUNDS] [STEPS]
set -eu
kiri=${1:-build/kiri} configs=${2:-"tiny gpt2-124M"} rounds=${3:-3} steps=${4:-5}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiri-act.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for c in $configs; do
  "$kiri" launch -n 2 --threads 1 -- bench --activations --config "$c" --rounds "$rounds" \
    --steps "$steps" --warmup 2 | grep '^{' >"$tmp/$c.jsonl"
done
python3 - "$kiri" "$tmp" $configs <<'PY'
import json, subprocess, sys
kiri, tmp, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
dims = {"tiny": (4, 256, 4), "gpt2-124M": (12, 768, 12)}  # layers, hidden, heads (bench.cpp)
mib = lambda b: b / 2**20
print("| config | layout | step s | vs tp2 | plan step s | plan vs tp2 | activations MiB | plan MiB | peak MiB | plan peak MiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for c in configs:
    rows = [json.loads(l) for l in open(f"{tmp}/{c}.jsonl")]
    L, h, a = dims[c]
    plans = []
    for r in rows:
        cmd = [kiri, "plan", "--layers", str(L), "--hidden", str(h), "--heads", str(a),
               "--vocab", "50257", "--tp", str(r["tp"]), "--micro-batch", str(r["micro_batch"]),
               "--global-batch", str(r["micro_batch"]), "--seq-len", str(r["seq_len"]),
               "--dtype", "fp32", "--cluster", "this-machine", "--json",
               "--activation-checkpointing", r["activation_checkpointing"]]
        if r["sequence_parallel"]:
            cmd.append("--sequence-parallel")
        if r["recompute_modules"]:
            cmd += ["--recompute-modules", ",".join(r["recompute_modules"])]
        plans.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
    base, pbase = rows[0]["step_s"], plans[0]["step_time_s"]
    for r, p in zip(rows, plans):
        print(f"| {c} | {r['layout']} | {r['step_s']:.3f} | {r['step_s'] / base:.3f} | "
              f"{p['step_time_s']:.3f} | {p['step_time_s'] / pbase:.3f} | "
              f"{mib(r['activations_peak_bytes']):.1f} | {mib(p['memory']['activations']):.1f} | "
              f"{mib(r['peak_bytes']):.1f} | {mib(p['memory']['total']):.1f} |")
PY
