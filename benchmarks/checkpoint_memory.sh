#!/bin/bash
# Checkpoints by streaming, side by side: the peak RSS (GNU time's maximum over the ranks) and
# wall time of a ZeRO-3 run on 2 ranks of a 12 x 768 byte-level GPT (85.3M parameters) that
# trains 1 step without a checkpoint, 1 step and saves one, and resumes it for 1 more step,
# for two kiri binaries (a build before streaming, and this one), with the ratios new / old,
# and whether the two checkpoints are byte-identical. The files (~1 GB per binary) go under
# a temporary folder that is removed at the end.
#   benchmarks/checkpoint_memory.sh OLD_KIRI NEW_KIRI
set -eu
old=$1 new=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--set model.n_layer=12 --set model.n_embd=768 --set model.n_head=12
  --set model.block_size=64 --set train.seq_len=64 --set train.micro_batch=1
  --set data.tokenizer=byte --set parallel.dp=2 --set parallel.zero_stage=3 --set log.metrics=)
# "KB seconds" of one run; a failed run stops the benchmark with its output.
measure() {
  local out
  out=$(/usr/bin/time -f "%M %e" "$@" 2>&1) || { echo "$out" >&2; exit 1; }
  echo "$out" | tail -n1
}
declare -A r
for which in old new; do
  bin=${!which}
  d=$tmp/$which
  r[$which,fresh]=$(measure "$bin" launch -n 2 --threads 1 -- train "${common[@]}" \
    --set train.steps=1 --set run.dir="$d/a" --set checkpoint.dir=)
  r[$which,save]=$(measure "$bin" launch -n 2 --threads 1 -- train "${common[@]}" \
    --set train.steps=1 --set run.dir="$d/b")
  r[$which,resume]=$(measure "$bin" launch -n 2 --threads 1 -- train "${common[@]}" \
    --set train.steps=2 --set run.dir="$d/b" --resume "$d/b/checkpoints" --set checkpoint.dir=)
done
printf "%-28s %10s %10s %7s %8s %8s %7s\n" run "old MiB" "new MiB" ratio "old s" "new s" ratio
for k in fresh save resume; do
  read -r om ot <<<"${r[old,$k]}"
  read -r nm nt <<<"${r[new,$k]}"
  case $k in fresh) label="1 step" ;; save) label="1 step + save" ;; resume) label="resume + 1 step" ;; esac
  printf "%-28s %10d %10d %7.3f %8.1f %8.1f %7.3f\n" "$label" \
    $((om / 1024)) $((nm / 1024)) "$(echo "$nm / $om" | bc -l)" "$ot" "$nt" "$(echo "$nt / $ot" | bc -l)"
done
same=yes
for f in "$tmp"/old/b/checkpoints/step_00000001/*.safetensors; do
  cmp -s "$f" "$tmp/new/b/checkpoints/step_00000001/$(basename "$f")" || same=no
done
echo "checkpoint files byte-identical: $same"
