#!/usr/bin/env bash
# Tokenizer throughput (docs/performance.md): kiri's gpt2 and Llama 3 tokenizer.json
# encoders on 1 and 2 threads beside the JavaScript encoders (gpt-3-encoder, and
# @lenml/tokenizers, a port of Hugging Face's tokenizers) on the same text: Moby-Dick
# as ~8 KB documents (each encoded on its own) and as one text. Prints a markdown table.
#   bash benchmarks/tokenizer_throughput.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
data=${KIRI_DATA_DIR:-$root/data}
repeat=${BENCH_REPEAT:-3}
command -v node > /dev/null || { echo "tokenizer_throughput: node is not installed" >&2; exit 1; }
for f in "$data/npm/gpt-3-encoder-1.1.4.tgz" "$data/npm/lenml-tokenizers-3.7.2.tgz" \
  "$data/llama3/tokenizer.json" "$data/moby-dick.txt"; do
  [ -f "$f" ] || { echo "tokenizer_throughput: $f is missing (run scripts/bootstrap.sh)" >&2; exit 1; }
done
cmake --build "$build" --target tokenizer_bench > /dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/gpt3" "$tmp/lenml"
tar -xzf "$data/npm/gpt-3-encoder-1.1.4.tgz" -C "$tmp/gpt3"
tar -xzf "$data/npm/lenml-tokenizers-3.7.2.tgz" -C "$tmp/lenml"
# Documents: paragraphs gathered to just over 8,000 bytes, NUL-separated.
python3 - "$data/moby-dick.txt" "$tmp/docs.bin" <<'PY'
import sys
text = open(sys.argv[1], "rb").read()
docs, cur = [], b""
for p in text.split(b"\n\n"):
    cur += p + b"\n\n"
    if len(cur) > 8000:
        docs.append(cur)
        cur = b""
docs.append(cur)
open(sys.argv[2], "wb").write(b"\0".join(docs))
PY
cp "$data/moby-dick.txt" "$tmp/whole.txt"
bytes=$(stat -c %s "$tmp/docs.bin")
out="$tmp/results.jsonl"
js="$root/benchmarks/tokenizer_js.mjs"
for mode in docs whole; do
  for threads in 1 2; do
    OMP_NUM_THREADS=$threads "$build/benchmarks/tokenizer_bench" gpt2 "$data" "$tmp/docs.bin" "$threads" \
      "$mode" "$repeat" | sed 's/"kiri"/"kiri gpt2"/' >> "$out"
    OMP_NUM_THREADS=$threads "$build/benchmarks/tokenizer_bench" "$data/llama3" "$data" "$tmp/docs.bin" \
      "$threads" "$mode" "$repeat" | sed 's/"kiri"/"kiri llama3"/' >> "$out"
  done
  input=$tmp/docs.bin
  [ "$mode" = whole ] && input=$tmp/whole.txt
  # gpt-3-encoder slows down on long texts (minutes for the whole book): documents only.
  if [ "$mode" = docs ]; then
    node "$js" gpt3 "$tmp/gpt3/package" "$input" "$tmp/ids.bin" |
      sed "s/}\$/, \"mode\": \"$mode\", \"threads\": 1, \"bytes\": $bytes}/" >> "$out"
  fi
  node "$js" lenml "$tmp/lenml/package" "$data/llama3/tokenizer.json" \
    "$data/llama3/tokenizer_config.json" "$input" "$tmp/ids.bin" |
    sed "s/}\$/, \"mode\": \"$mode\", \"threads\": 1, \"bytes\": $bytes}/" >> "$out"
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    r["rate"] = r["bytes"] / 1e6 / r["seconds"]
# kiri's gpt2 against gpt-3-encoder, kiri's Llama 3 against @lenml, on the same input.
ref = {(r["encoder"], r["mode"]): r["rate"] for r in rows if not r["encoder"].startswith("kiri")}
against = {"kiri gpt2": "gpt3", "kiri llama3": "lenml"}
print("| encoder | input | threads | MB/s | MB/s per core | per core vs JS |")
print("| --- | --- | --- | --- | --- | --- |")
for r in rows:
    name = {"gpt3": "gpt-3-encoder (JS)", "lenml": "@lenml/tokenizers, Llama 3 (JS)"}.get(
        r["encoder"], r["encoder"])
    per_core = r["rate"] / r["threads"]
    base = ref.get((against.get(r["encoder"], ""), r["mode"])) or ref.get(
        (against.get(r["encoder"], ""), "docs"))
    ratio = f"{per_core / base:.0f}x" if r["encoder"].startswith("kiri") and base else ""
    print(f"| {name} | {r['mode']} | {r['threads']} | {r['rate']:.2f} | {per_core:.2f} | {ratio} |")
PY
