#!/usr/bin/env python3
"""A GPT-2 of the Hugging Face layout in plain NumPy: code that is not kiri's, reading a model
folder as transformers' GPT2LMHeadModel.from_pretrained would (config.json, model.safetensors
or its shards and index, F32/BF16/F16), for the round-trip test (tests/cli/hf_export_test.cpp).

  hf_gpt2_numpy.py generate FOLDER --prompt-ids 1,2,3 --tokens N   greedy ids, prompt first
  hf_gpt2_numpy.py compare FOLDER OTHER                            max |a - b| over the weights
"""
import argparse
import json
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    """name -> float64 array, parsing the header with json and the data with frombuffer."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin : base + end]
        shape = info["shape"]
        dtype = info["dtype"]
        if dtype == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif dtype == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        elif dtype == "BF16":  # the high half of an fp32
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{path}: {name}: dtype {dtype} is not a float dtype")
        out[name] = a.astype(np.float64).reshape(shape)
    return out


def read_folder(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    weights = {}
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        for name in files:
            weights.update(read_safetensors(os.path.join(folder, name)))
    else:
        weights = read_safetensors(os.path.join(folder, "model.safetensors"))
    # GPT2LMHeadModel's names carry `transformer.`; GPT-2's own files do not.
    return {k[len("transformer.") :] if k.startswith("transformer.") else k: v
            for k, v in weights.items()}


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def logits_of(cfg, w, ids):
    n_head, eps = cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    t = len(ids)
    x = w["wte.weight"][ids] + w["wpe.weight"][:t]
    mask = np.triu(np.full((t, t), -np.inf), 1)
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = np.split(qkv, 3, axis=-1)
        hd = q.shape[-1] // n_head
        q, k, v = (a.reshape(t, n_head, hd).transpose(1, 0, 2) for a in (q, k, v))
        att = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(1, 0, 2).reshape(t, n_head * hd)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = gelu_new(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)
    head = w.get("lm_head.weight", w["wte.weight"])  # tied when absent
    return x @ head.T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["generate", "compare"])
    ap.add_argument("folder")
    ap.add_argument("other", nargs="?")
    ap.add_argument("--prompt-ids", default="10")
    ap.add_argument("--tokens", type=int, default=20)
    a = ap.parse_args()
    with open(os.path.join(a.folder, "config.json")) as f:
        cfg = json.load(f)
    w = read_folder(a.folder)
    if a.mode == "compare":
        o = read_folder(a.other)
        if sorted(o) != sorted(w):
            raise SystemExit(f"the folders hold other tensors: {sorted(w)} against {sorted(o)}")
        print(max(float(np.abs(w[k] - o[k]).max()) for k in w))
        return
    ids = [int(s) for s in a.prompt_ids.split(",")]
    block = cfg["n_positions"]
    # transformers' generate() ends at config.json's eos_token_id and keeps it; kiri sample
    # --stop-at-eos ends there too and prints the text without it.
    eos = cfg.get("eos_token_id")
    for _ in range(a.tokens):
        ids.append(int(np.argmax(logits_of(cfg, w, ids[-block:])[-1])))
        if ids[-1] == eos:
            ids.pop()
            break
    print(" ".join(str(i) for i in ids))


if __name__ == "__main__":
    sys.exit(main())
