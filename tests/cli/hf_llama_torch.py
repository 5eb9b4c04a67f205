"""A Llama in plain PyTorch, written from Hugging Face's LlamaForCausalLM math (no transformers,
no safetensors package): the outside reference for kiri's Llama folders (hf_llama_test.cpp).

  logits DIR --ids 1,2,3 --out FILE   the logits [T, V] of the folder's model for the ids,
                                      float32 little-endian, row by row
  write DIR --config JSON --seed S [--max-shard-bytes N]
                                      a model folder of random weights under HF's names:
                                      config.json (the given LlamaConfig keys), the weights in
                                      float32, cut into model-0000k-of-0000n.safetensors with
                                      model.safetensors.index.json when they pass N bytes

The math (transformers' modeling_llama): RMSNorm x * rsqrt(mean(x^2) + eps) * w; rotary
embedding by rotate-half with inv_freq = 1 / theta^(2i/d), Llama 3's rope_scaling as
_compute_llama3_parameters adjusts it; grouped-query attention by repeat_kv (query head h
uses key/value head h // (heads / kv_heads)), scores scaled by 1/sqrt(head_dim), causal
softmax in float32; SwiGLU down(silu(gate(x)) * up(x)); the LM head lm_head.weight, or
model.embed_tokens.weight when tie_word_embeddings. All in float32, as torch computes it.

Exit status 3 with "torch is missing" when torch cannot be imported (the test skips then).
"""
import json
import math
import os
import struct
import sys

try:
    import torch
except ImportError as e:  # the test names this reason when it skips
    print(f"torch is missing: {e}", file=sys.stderr)
    sys.exit(3)
import numpy as np

DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2)}


def read_safetensors(path):
    """{name: float32 tensor} of one safetensors file: the 8-byte header length, the JSON
    header, the data (offsets relative to its start)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    data = blob[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        np_type, size = DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        a = np.frombuffer(data[begin:end], dtype=np.dtype(np_type).newbyteorder("<"))
        if info["dtype"] == "BF16":  # bf16 is float32's high half
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(a.astype(np.float32).reshape(info["shape"]))
    return out


def read_weights(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(folder, "model.safetensors"))
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(folder, name)))
    return weights


def inv_freq(config, head_dim):
    theta = float(config.get("rope_theta", 10000.0))
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return inv
    assert kind == "llama3", f"rope_scaling type {kind}"
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(config, w, ids):
    c = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    hd = c // heads
    eps = config.get("rms_norm_eps", 1e-6)
    t = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]  # [T, C]
    freqs = torch.outer(torch.arange(t).float(), inv_freq(config, hd))  # [T, hd/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [T, hd]
    mask = torch.full((t, t), float("-inf")).triu(1)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(t, heads, hd).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(t, kv_heads, hd).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(t, kv_heads, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = heads // kv_heads  # repeat_kv
        k = k[:, None].expand(kv_heads, rep, t, hd).reshape(heads, t, hd)
        v = v[:, None].expand(kv_heads, rep, t, hd).reshape(heads, t, hd)
        scores = q @ k.transpose(1, 2) / math.sqrt(hd) + mask  # [H, T, T]
        att = torch.softmax(scores.float(), dim=-1) @ v  # [H, T, hd]
        att = att.transpose(0, 1).reshape(t, c)
        x = x + att @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    tied = config.get("tie_word_embeddings", False)
    head = w["model.embed_tokens.weight"] if tied else w["lm_head.weight"]
    return x @ head.T  # [T, V]


def cmd_logits(folder, ids, out):
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    assert config.get("model_type") == "llama", config.get("model_type")
    with torch.no_grad():
        logits = forward(config, read_weights(folder), ids)
    logits.numpy().astype("<f4").tofile(out)
    print(f"logits {list(logits.shape)}")


def random_weights(config, seed):
    """HF's names in LlamaForCausalLM's state-dict order; random, far from the init's 1s and
    0.02s so that every piece matters (norm weights around 1, matrices of std 0.2)."""
    g = torch.Generator().manual_seed(seed)
    c, f = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv = (config.get("num_key_value_heads") or heads) * (c // heads)
    v = config["vocab_size"]

    def mat(rows, cols, std=0.2):
        return torch.randn(rows, cols, generator=g) * std

    def norm(n):
        return 1 + 0.2 * torch.randn(n, generator=g)

    w = [("model.embed_tokens.weight", mat(v, c, 1.0))]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w += [
            (p + "self_attn.q_proj.weight", mat(c, c)),
            (p + "self_attn.k_proj.weight", mat(kv, c)),
            (p + "self_attn.v_proj.weight", mat(kv, c)),
            (p + "self_attn.o_proj.weight", mat(c, c)),
            (p + "mlp.gate_proj.weight", mat(f, c)),
            (p + "mlp.up_proj.weight", mat(f, c)),
            (p + "mlp.down_proj.weight", mat(c, f)),
            (p + "input_layernorm.weight", norm(c)),
            (p + "post_attention_layernorm.weight", norm(c)),
        ]
    w.append(("model.norm.weight", norm(c)))
    if not config.get("tie_word_embeddings", False):  # tied: HF saves the embedding only
        w.append(("lm_head.weight", mat(v, c)))
    return w


def write_safetensors(path, tensors):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, t in tensors:
        n = t.numel() * 4
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data 8-byte aligned, as safetensors pads it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, t in tensors:
            f.write(t.contiguous().numpy().astype("<f4").tobytes())


def cmd_write(folder, config, seed, max_shard_bytes):
    os.makedirs(folder, exist_ok=True)
    config = dict(config)
    config.setdefault("architectures", ["LlamaForCausalLM"])
    config.setdefault("model_type", "llama")
    config.setdefault("torch_dtype", "float32")
    config.setdefault("transformers_version", "4.44.0")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    weights = random_weights(config, seed)
    shards, size = [[]], 0  # transformers' cut: a new shard when the next would overflow
    for name, t in weights:
        n = t.numel() * 4
        if shards[-1] and max_shard_bytes and size + n > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, t))
        size += n
    if len(shards) == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), shards[0])
    else:
        weight_map = {}
        for k, shard in enumerate(shards):
            name = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
            write_safetensors(os.path.join(folder, name), shard)
            weight_map.update({t: name for t, _ in shard})
        total = sum(t.numel() * 4 for _, t in weights)
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    print(f"wrote {len(weights)} tensors in {len(shards)} file(s)")


def option(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def main(argv):
    torch.set_num_threads(1)
    if len(argv) >= 2 and argv[0] == "logits":
        ids = [int(i) for i in option(argv, "--ids").split(",")]
        cmd_logits(argv[1], ids, option(argv, "--out"))
    elif len(argv) >= 2 and argv[0] == "write":
        cmd_write(argv[1], json.loads(option(argv, "--config")), int(option(argv, "--seed", "0")),
                  int(option(argv, "--max-shard-bytes", "0")))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
