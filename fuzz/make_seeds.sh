#!/usr/bin/env bash
# Writes the fuzz targets' seed corpora under fuzz/corpus/<target>/ from real files: a
# 2-step run of a tiny byte model (and one with the GPT-2 tokenizer) saves checkpoints
# (model and optimizer safetensors, state.json), its config copy and its token shards.
# Also writes the JSON dictionaries fuzz/config.dict and fuzz/state.dict from `kiri config`, and
# fuzz/{hf_config,tokenizer_json,deepspeed}.dict from their seeds.
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

# The HF model folder, tokenizer.json and DeepSpeed seeds: written by hand (a GPT-2 folder as
# kiri export writes it, Llama folders as transformers 4 and 5 write them, an index after a
# NUL: fuzz/hf_config_fuzz.cpp), tokenizer.json files of a few byte-level BPE merges, and the
# DeepSpeed configs the tests use, and one more.
mkdir -p "$corpus"/{hf_config,tokenizer_json,deepspeed}
hf=$corpus/hf_config
printf '%s' '{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 1,
 "n_head": 1, "n_embd": 4, "n_positions": 8, "n_ctx": 8, "vocab_size": 257,
 "n_inner": null, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
 "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "scale_attn_weights": true,
 "scale_attn_by_inverse_layer_idx": false, "tie_word_embeddings": true,
 "bos_token_id": 256, "eos_token_id": 256, "torch_dtype": "float32",
 "kiri": {"data.tokenizer": "byte"}}' >"$hf/gpt2.json"
printf '%s' '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
 "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
 "num_key_value_heads": 1, "vocab_size": 257, "max_position_embeddings": 16,
 "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "hidden_act": "silu",
 "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
 "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
 "tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false,
 "torch_dtype": "bfloat16"}' >"$hf/llama-transformers4.json"
printf '%s' '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
 "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
 "num_key_value_heads": 2, "head_dim": 4, "vocab_size": 257, "max_position_embeddings": 16,
 "rms_norm_eps": 1e-06, "hidden_act": "silu", "dtype": "float32",
 "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
 "tie_word_embeddings": true, "transformers_version": "5.23.0"}' >"$hf/llama-transformers5.json"
{
  cat "$hf/gpt2.json"
  printf '\0%s' '{"metadata": {"total_size": 16}, "weight_map": {"transformer.wte.weight":
 "model-00001-of-00002.safetensors", "lm_head.weight": "model-00001-of-00002.safetensors"}}'
} >"$hf/gpt2-sharded.json"

# tokenizer.json: GPT-2's byte-to-unicode alphabet as the vocabulary, a few merges.
python3 - "$corpus/tokenizer_json" <<'EOF'
import json, sys
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): i for i, c in enumerate(sorted(cs, key=lambda c: bs[cs.index(c)]))}
merges = [["\u0120", "t"], ["h", "e"], ["\u0120t", "he"], ["a", "l"], ["\u0120", "w"]]
for a, b in merges:
    vocab[a + b] = len(vocab)
eot = {"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
       "rstrip": False, "normalized": False, "special": True}
base = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [eot],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab,
                  "merges": [a + " " + b for a, b in merges]}}
json.dump(base, open(sys.argv[1] + "/gpt2-style.json", "w"), ensure_ascii=False)
llama = json.loads(json.dumps(base))
llama["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
llama["post_processor"] = {"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|endoftext|>",
     "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
     "special_tokens": {}}]}
llama["model"]["ignore_merges"] = True
llama["model"]["merges"] = merges
json.dump(llama, open(sys.argv[1] + "/llama3-style.json", "w"), ensure_ascii=False)
EOF

ds=$corpus/deepspeed
cp "$root"/tests/cli/deepspeed/*.json "$ds/"  # the Hugging Face and DeepSpeed examples
printf '%s' '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
 "gradient_accumulation_steps": 8, "steps_per_print": 10, "wall_clock_breakdown": false,
 "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16,
 "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": true},
 "offload_param": {"device": "none"}, "stage3_gather_16bit_weights_on_model_save": true},
 "optimizer": {"type": "Adam", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
 "weight_decay": 0.1}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4,
 "warmup_num_steps": 100}}}' >"$ds/zero3-offload-fp16.json"
printf '{}' >"$ds/empty.json"
# Their dictionaries: the JSON tokens, and every key and string value of the seeds.
for t in hf_config tokenizer_json deepspeed; do
  python3 - "$corpus/$t" "$root/fuzz/$t.dict" <<'EOF'
import json, os, sys
words = set()
def walk(v):
    if isinstance(v, dict):
        for k, x in v.items():
            words.add(k); walk(x)
    elif isinstance(v, list):
        for x in v: walk(x)
    elif isinstance(v, str) and len(v) <= 40:
        words.add(v)
for name in sorted(os.listdir(sys.argv[1])):
    text = open(os.path.join(sys.argv[1], name), encoding="utf-8").read()
    for part in text.split("\0"):
        walk(json.loads(part))
def quoted(s):  # a libFuzzer dictionary entry: the JSON string, escaped for the dict
    j = json.dumps(s, ensure_ascii=True)
    return '"' + j.replace("\\", "\\\\").replace('"', '\\"') + '"'
lines = ['"{"', '"}"', '"["', '"]"', '":"', '","', '"true"', '"false"', '"null"', '"-1"',
         '"1e308"', '"0.5"', '"18446744073709551615"', '"9223372036854775808"', '"NaN"',
         '"\\"auto\\""']
lines += sorted(quoted(w) for w in words if w and len(w) <= 40)
open(sys.argv[2], "w").write("\n".join(dict.fromkeys(lines)) + "\n")
EOF
done

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
