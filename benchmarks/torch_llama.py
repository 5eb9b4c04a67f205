#!/usr/bin/env python3
"""PyTorch peer for kiri's Llama training benchmark (benchmarks/llama.sh, benchmarks/run.sh).

A small self-contained Llama in the Hugging Face LlamaForCausalLM math: RMSNorm, rotary
positions by rotate-half, grouped-query attention by
F.scaled_dot_product_attention(is_causal=True, enable_gqa=True), SwiGLU MLP
down(silu(gate(x)) * up(x)), no biases, the LM head untied or tied to the embedding; init
normal(0, 0.02). Trained with AdamW on random tokens; times forward + backward + optimizer
step after warm-up, as `kiri bench` does, and prints one JSON line (benchmarks/torch_peer.py:
eager or --compile, fp32 or --dtype bf16 autocast).

Run it in the venv of scripts/test-venv.sh (PyTorch 2.15), e.g. through benchmarks/torch_peer.sh:
  bash benchmarks/torch_peer.sh llama --config smollm-135M --dtype bf16 ...
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_peer  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # Each key/value head serves heads / kv_heads query heads (HF's repeat_kv, done by SDPA).
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        y = y.transpose(1, 2).reshape(b, t, self.heads * self.hd)
        return self.o_proj(y)


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn, eps):
        super().__init__()
        self.input_layernorm = RMSNorm(dim, eps)
        self.self_attn = Attention(dim, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(dim, eps)
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(
            [Block(a.dim, a.heads, a.kv_heads, a.ffn, a.eps) for _ in range(a.layers)])
        self.norm = RMSNorm(a.dim, a.eps)
        self.lm_head = None if a.tied else nn.Linear(a.dim, a.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
        hd = a.dim // a.heads
        inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(a.seq_len).float(), inv_freq)
        ang = torch.cat((ang, ang), dim=-1)  # [T, hd], rotate-half's layout
        self.cos, self.sin = ang.cos(), ang.sin()

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:t], self.sin[:t]
        for block in self.layers:
            x = block(x, cos, sin)
        x = self.norm(x)
        w = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = x @ w.t()
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


# kiri bench's Llama configs (src/kiri/bench/bench.cpp, bench_preset): --config NAME takes its
# shape, batch and sequence length; an option given beside it wins.
PRESETS = {
    "tiny-llama": dict(layers=4, dim=256, heads=4, kv_heads=2, ffn=688, vocab=32000,
                       tied=False, seq_len=128, batch=8),
    "smollm-135M": dict(layers=30, dim=576, heads=9, kv_heads=3, ffn=1536, vocab=49152,
                        tied=True, seq_len=64, batch=4),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="tiny-llama",
                   help=f"the name printed in the JSON line; one of {', '.join(PRESETS)} also "
                        "sets the shape")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=688)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--tied", action="store_true", help="the LM head is the embedding")
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    torch_peer.add_args(p)
    p.set_defaults(**PRESETS.get(p.parse_known_args()[0].config, {}))
    a = p.parse_args()
    if a.dim % a.heads or a.heads % a.kv_heads:
        p.error(f"--heads {a.heads} must divide --dim {a.dim}, --kv-heads {a.kv_heads} --heads")
    torch_peer.check_args(p, a)
    return a


def main():
    a = parse_args()
    torch_peer.setup(a)
    model = Llama(a)
    torch_peer.train(a, model, a.vocab, a.batch, a.seq_len, {"config": a.config, "arch": "llama"})


if __name__ == "__main__":
    main()
