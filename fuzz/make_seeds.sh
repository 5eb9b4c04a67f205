#!/usr/bin/env bash
# Writes the fuzz targets' seed corpora under fuzz/corpus/<target>/ from real files: a
# 2-step run of a tiny byte model (and one with the GPT-2 tokenizer) saves checkpoints
# (model and optimizer safetensors, state.json), its config copy and its token shards.
# Also writes the JSON dictionaries fuzz/config.dict and fuzz/state.dict from `kiri config`.
#   fuzz/make_seeds.sh [path/to/kiri]      (default build/kiri)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kiri=${1:-$root/build/kiri}
[ -x "$kiri" ] || { echo "make_seeds: no kiri binary at $kiri (run make build)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
corpus=$root/fuzz/corpus
rm -rf "$corpus"
mkdir -p "$corpus"/{safetensors,config,state,shard,tokens}

# 2,000 bytes of Moby-Dick: shards of a few KB, a model of 1 layer of width 4 (6.7 KB).
head -c 3000 "$root/data/moby-dick.txt" 2>/dev/null | tail -c 2000 >"$tmp/text.txt" ||
  true
[ -s "$tmp/text.txt" ] || printf 'Call me Ishmael. Some years ago, never mind how long.\n%.0s' \
  $(seq 40) >"$tmp/text.txt"
tiny=(--set data.corpus="$tmp/text.txt" --set model.n_layer=1 --set model.n_head=1
  --set model.n_embd=4 --set model.block_size=8 --set train.seq_len=8 --set train.micro_batch=1
  --set train.steps=2 --set checkpoint.every=2 --set train.eval_every=0 --set log.plot=)
run() {  # run NAME TOKENIZER DTYPE
  "$kiri" train "${tiny[@]}" --set data.tokenizer="$2" --set train.dtype="$3" \
    --set run.dir="$tmp/$1" >"$tmp/$1.log" 2>&1 || { cat "$tmp/$1.log" >&2; exit 1; }
}
run fp32 byte fp32
run bf16 byte bf16
run gpt2 gpt2 fp32  # for its shards: a GPT-2 model would be 800 KB, too big for a seed

step=$tmp/fp32/checkpoints/step_00000002  # bf16 runs save the same fp32 master weights
cp "$step/model.safetensors" "$corpus/safetensors/model.safetensors"
cp "$step"/optimizer-00000-of-00001.safetensors "$corpus/safetensors/optimizer.safetensors"
for r in fp32 bf16; do
  cp "$tmp/$r/checkpoints/step_00000002/state.json" "$corpus/state/$r-state.json"
  cp "$tmp/$r/config.json" "$corpus/config/$r-run-config.json"
done
for t in byte gpt2; do
  cp "$tmp/text.txt.kiri-$t/train.bin" "$corpus/shard/$t-train.bin"
  cp "$tmp/text.txt.kiri-$t/val.bin" "$corpus/shard/$t-val.bin"
done
# tokens: the first byte picks the reader (0 token file, 1 JSON Lines, 2 text on "\n\n").
{ printf '\0'; cat "$corpus/shard/byte-val.bin"; } >"$corpus/tokens/kiri-val.bin"
{ printf '\0'; printf '\x88\xd8\x34\x01\x01\0\0\0\x03\0\0\0'; head -c 1012 /dev/zero
  printf 'a\0b\0c\0'; } >"$corpus/tokens/llmc.bin"
{ printf '\0'; head -c 64 "$tmp/text.txt" | od -An -v -tu1 | tr -s ' ' '\n' | grep . |
  while read -r b; do printf "$(printf '\\x%02x\\0' "$b")"; done; } >"$corpus/tokens/nanogpt.bin"
{ printf '\1{"text": "Call me Ishmael."}\n\n{"text": "Some years ago"}\n'; } \
  >"$corpus/tokens/docs.jsonl"
{ printf '\2'; head -c 300 "$tmp/text.txt"; printf '\n\n'; tail -c 300 "$tmp/text.txt"; } \
  >"$corpus/tokens/text.txt"
cp "$root"/configs/*.json "$corpus/config/"
# The flat form ({"model.n_layer": 2}), comments, and the smallest inputs.
printf '// flat keys\n{"model.n_layer": 2, "train.lr": "3e-3", "train.mem_limit": "1GiB"}\n' \
  >"$corpus/config/flat.json"
printf '{}' >"$corpus/config/empty.json"
printf '\0\0\0\0\0\0\0\0' >"$corpus/safetensors/empty-header.safetensors"
printf '\x10\0\0\0\0\0\0\0{"__metadata__":{}}' >"$corpus/safetensors/metadata-only.safetensors"
# Every dtype kiri reads, an empty tensor, and an F64 at an unaligned offset (15).
hdr='{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[1,2],'
hdr+='"data_offsets":[4,8]},"c":{"dtype":"I32","shape":[1],"data_offsets":[8,12]},"d":{"dtype":'
hdr+='"U8","shape":[3],"data_offsets":[12,15]},"e":{"dtype":"F64","shape":[1],"data_offsets":'
hdr+='[15,23]},"f":{"dtype":"U16","shape":[],"data_offsets":[23,25]},"z":{"dtype":"F32",'
hdr+='"shape":[0,5],"data_offsets":[25,25]}}'
{
  printf "$(printf '\\x%02x\\x%02x' $((${#hdr} & 255)) $((${#hdr} >> 8)))"
  printf '\0\0\0\0\0\0'
  printf '%s' "$hdr"
  printf '\x80\x3f\x00\x40\x00\x3c\x00\x40\x07\x00\x00\x00\x01\x02\x03'
  printf '\x00\x00\x00\x00\x00\x00\xf0\x3f\x05\x00'
} >"$corpus/safetensors/every-dtype.safetensors"

# The findings so far (docs/fuzzing.md), so every run checks them again.
printf '{"train": {"lr": 1e400}}' >"$corpus/config/finding-number-overflow.json"
hdr='{"x":{"dtype":"U8","shape":[4611686018427387904,3,0],"data_offsets":[0,0]}}'
{
  printf "$(printf '\\x%02x' ${#hdr})"
  printf '\0\0\0\0\0\0\0'
  printf '%s' "$hdr"
} >"$corpus/safetensors/finding-numel-overflow.safetensors"

# Dictionaries: the JSON tokens, every key, section and enum value kiri's config prints.
"$kiri" config >"$tmp/config.json"
{
  printf '"{"\n"}"\n"["\n"]"\n":"\n","\n"\\""\n"true"\n"false"\n"null"\n"-1"\n"1e308"\n'
  printf '"18446744073709551615"\n"9223372036854775808"\n"0.5"\n"NaN"\n"//"\n"/*"\n'
  awk '
    /^  "[a-z_]+": \{/ { gsub(/[":{ ]/, ""); section = $0; print "\"\\\"" section "\\\"\""; next }
    /^    "[a-z_]+":/ { key = $1; gsub(/[":]/, "", key)
                        print "\"\\\"" key "\\\"\""; print "\"\\\"" section "." key "\\\"\"" }
    /^    "[a-z_]+": "[a-z0-9_]+",?$/ { v = $2; gsub(/[",]/, "", v); print "\"\\\"" v "\\\"\"" }
  ' "$tmp/config.json" | sort -u
} >"$root/fuzz/config.dict"
{
  cat "$root/fuzz/config.dict"
  for k in config step data position seed format_version layout optimizer_files \
    optimizer_step rng kind counter dtype F32 BF16 segments; do
    printf '"\\"%s\\""\n' "$k"
  done
} | sort -u >"$root/fuzz/state.dict"
du -sh "$corpus"/*
