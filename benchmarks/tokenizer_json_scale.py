#!/usr/bin/env python3
"""Writes a tokenizer.json `factor` times the size of a byte-level BPE one (docs/performance.md,
"Loading a large tokenizer.json"): the same pipeline, and a vocabulary and merges grown by
new tokens made of two existing ones, each with the merge that makes it. Ids follow the
added tokens, so the file stays one kiri (and Hugging Face's tokenizers) loads.

    python3 benchmarks/tokenizer_json_scale.py data/llama3/tokenizer.json 8.5 /tmp/big/tokenizer.json
"""
import json
import sys


def main():
    src, factor, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    with open(src, encoding="utf-8") as f:
        j = json.load(f)
    model = j["model"]
    vocab, merges = model["vocab"], model["merges"]
    tokens = sorted(vocab, key=vocab.get)
    next_id = max(list(vocab.values()) + [a["id"] for a in j["added_tokens"]]) + 1
    extra = int(len(merges) * (factor - 1))
    # Pairs of common tokens (the lowest ids: short, so the merged token stays short too).
    base = tokens[256:256 + 2048]
    added = 0
    for a in base:
        for b in base:
            if added >= extra:
                break
            t = a + b
            if t in vocab:
                continue
            vocab[t] = next_id
            next_id += 1
            merges.append(f"{a} {b}" if isinstance(merges[0], str) else [a, b])
            added += 1
        if added >= extra:
            break
    with open(out, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=2)


if __name__ == "__main__":
    main()
