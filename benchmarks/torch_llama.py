#!/usr/bin/python3
"""PyTorch reference for kiri's Llama training benchmark (benchmarks/llama.sh).

A small self-contained Llama in the Hugging Face LlamaForCausalLM math: RMSNorm, rotary
positions by rotate-half, grouped-query attention (each key/value head serves
heads / kv_heads query heads; written by hand, since torch 1.13 has no
scaled_dot_product_attention), SwiGLU MLP down(silu(gate(x)) * up(x)), no biases, the LM
head untied or tied to the embedding; init normal(0, 0.02). Trained with AdamW on random
tokens; times forward + backward + optimizer step after warm-up, as `kiri bench` does, and
prints one JSON line.

--dtype bf16 runs forward and backward under torch.autocast("cpu", torch.bfloat16) with
fp32 parameters and AdamW (PyTorch's mixed precision on CPU), beside kiri's bf16.

Run with the environment from benchmarks/torch_env.sh when it is Debian's torch:
  eval "$(benchmarks/torch_env.sh)" && /usr/bin/python3 benchmarks/torch_llama.py ...
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads  # HF's repeat_kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        att = att.masked_fill(~mask[:t, :t], float("-inf"))
        att = F.softmax(att.float(), dim=-1).to(q.dtype)
        y = (att @ v).transpose(1, 2).reshape(b, t, self.heads * self.hd)
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

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
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
        self.mask = torch.tril(torch.ones(a.seq_len, a.seq_len, dtype=torch.bool))

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:t], self.sin[:t]
        for block in self.layers:
            x = block(x, cos, sin, self.mask)
        x = self.norm(x)
        w = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = x @ w.t()
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="tiny-llama", help="the name printed in the JSON line")
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
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args()
    if a.dim % a.heads or a.heads % a.kv_heads:
        p.error(f"--heads {a.heads} must divide --dim {a.dim}, --kv-heads {a.kv_heads} --heads")
    if a.steps < 1:
        p.error("--steps must be >= 1")
    return a


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Llama(a)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    gen = torch.Generator().manual_seed(a.seed + 1)
    shape = (a.batch, a.seq_len)

    def step():
        idx = torch.randint(a.vocab, shape, generator=gen)
        tgt = torch.randint(a.vocab, shape, generator=gen)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup_steps):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step().item()
        times.append(time.perf_counter() - t0)
    step_s = sorted(times)[len(times) // 2]  # the median, as kiri bench
    print(json.dumps({"impl": "pytorch", "config": a.config, "arch": "llama", "dtype": a.dtype,
                      "threads": torch.get_num_threads(), "torch": torch.__version__,
                      "tokens_per_s": a.batch * a.seq_len / step_s, "step_s": step_s,
                      "params": params}), flush=True)
    print(f"final loss {loss:.4f} (random tokens: about ln(vocab) = {math.log(a.vocab):.4f})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
