#!/bin/bash
# The stall of a checkpoint, synchronous against asynchronous (checkpoint.async), for GPT-2
# 124M (12 x 768, GPT-2's vocabulary of 50257, fp32) on 2 ranks, one thread each: DDP (rank 0
# writes the model and all of the optimizer's states, 1.5 GB) and ZeRO-1 (each rank writes
# half of the states). Each run trains 10 steps of 1 x 64 tokens per rank and saves after
# steps 5 and 10. A synchronous save holds training for the whole save (rank 0's "saved
# checkpoint ... in X s"); an asynchronous one for the staging copy ("training stopped X s",
# less the time it waited for the previous save, printed apart), while the files are written
# in the background ("the files took X s in the background"). Also printed: the mean step time of
# steps 6-9 (while the step-5 save is written in the background, under async) and of 2-4.
#   benchmarks/checkpoint_stall.sh [KIRI] [REPEATS]
set -eu
kiri=${1:-build/kiri} reps=${2:-2}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiri-stall.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
common=(--set model.n_layer=12 --set model.n_embd=768 --set model.n_head=12
  --set model.block_size=1024 --set train.seq_len=64 --set train.micro_batch=1
  --set train.steps=10 --set checkpoint.every=5 --set checkpoint.keep_last=1
  --set train.eval_every=0 --set train.eval_batches=1 --set train.warmup=1)
printf "%-6s %-5s %3s %10s %10s %10s %12s %12s %12s\n" layout mode rep "stall 5 s" "stall 10 s" \
  "waited s" "background s" "steps 6-9 s" "steps 2-4 s"
for zero in 0 1; do
  for mode in sync async; do
    for rep in $(seq 1 "$reps"); do
      d=$tmp/$zero-$mode-$rep
      async=false
      [ $mode = async ] && async=true
      "$kiri" launch -n 2 --threads 1 -- train "${common[@]}" --set parallel.zero_stage=$zero \
        --set checkpoint.async=$async --set run.dir="$d" >"$d.log" 2>&1 || {
        cat "$d.log" >&2
        exit 1
      }
      if [ $mode = sync ]; then
        stalls=$(grep -o 'saved checkpoint .* in [0-9.]* s' "$d.log" | awk '{printf "%s ", $(NF-1)}')
        waited=0 bg=-
      else
        # "(training stopped X s, W s of it waiting for the previous save; the files took B s
        # in the background)": the staging alone is X - W.
        stalls=$(grep -o 'training stopped [0-9.]* s, [0-9.]* s of it' "$d.log" |
          tr -d ',' | awk '{printf "%.3f ", $3 - $5}')
        waited=$(grep -o ', [0-9.]* s of it waiting' "$d.log" | awk '{s += $2} END {printf "%.3f", s}')
        bg=$(grep -o 'took [0-9.]* s in the background' "$d.log" | head -1 | awk '{print $2}')
      fi
      read -r s5 s10 <<<"$stalls"
      steps=$(python3 - "$d/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = {r["step"]: r["step_s"] for r in rows}
print("%.3f %.3f" % (sum(t[s] for s in range(6, 10)) / 4, sum(t[s] for s in range(2, 5)) / 3))
PY
)
      read -r during before <<<"$steps"
      printf "%-6s %-5s %3d %10s %10s %10s %12s %12s %12s\n" "zero$zero" $mode "$rep" "$s5" "$s10" \
        "$waited" "$bg" "$during" "$before"
      rm -rf "$d"
    done
  done
done
