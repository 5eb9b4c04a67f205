#!/usr/bin/env python3
"""PyTorch peer for kiri's GPT-2 training benchmark (benchmarks/run.sh).

A small self-contained GPT-2 (pre-LN, causal self-attention by
F.scaled_dot_product_attention(is_causal=True), 4x GELU(tanh) MLP, LM head tied to wte, HF
init std 0.02) trained with AdamW on random tokens. Times forward + backward + optimizer step
after warm-up, as kiri bench does, and prints one JSON line (benchmarks/torch_peer.py: eager or
--compile, fp32 or --dtype bf16 autocast, --ddp / --zero over gloo).

Run it in the venv of scripts/test-venv.sh (PyTorch 2.15), e.g. through benchmarks/torch_peer.sh:
  bash benchmarks/torch_peer.sh gpt2 --n-layer 4 --n-embd 256 --n-head 4 --compile ...
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_peer  # noqa: E402


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        hd = c // self.n_head
        q = q.view(b, t, self.n_head, hd).transpose(1, 2)
        k = k.view(b, t, self.n_head, hd).transpose(1, 2)
        v = v.view(b, t, self.n_head, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.c_proj(h)


class GPT(nn.Module):
    def __init__(self, n_layer, n_embd, n_head, vocab, seq_len):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(seq_len, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        # HF GPT-2: normal(0, 0.02) weights, zero biases, LayerNorm (1, 0).
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        b, t = idx.shape
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = x @ self.wte.weight.t()  # LM head tied to wte
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# kiri bench's GPT-2 configs (src/kiri/bench/bench.cpp, bench_preset): --config NAME takes its
# shape, batch and sequence length; an option given beside it wins.
PRESETS = {
    "tiny": dict(n_layer=4, n_embd=256, n_head=4, vocab=50257, seq_len=128, batch=8),
    "gpt2-124M": dict(n_layer=12, n_embd=768, n_head=12, vocab=50257, seq_len=64, batch=4),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="tiny",
                   help=f"the name printed in the JSON line; one of {', '.join(PRESETS)} also "
                        "sets the shape")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    torch_peer.add_args(p)
    p.set_defaults(**PRESETS.get(p.parse_known_args()[0].config, {}))
    a = p.parse_args()
    if a.n_embd % a.n_head != 0:
        p.error(f"--n-embd {a.n_embd} is not divisible by --n-head {a.n_head}")
    torch_peer.check_args(p, a)
    return a


def main():
    a = parse_args()
    torch_peer.setup(a)
    model = GPT(a.n_layer, a.n_embd, a.n_head, a.vocab, a.seq_len)
    torch_peer.train(a, model, a.vocab, a.batch, a.seq_len, {"config": a.config, "arch": "gpt2"})


if __name__ == "__main__":
    main()
