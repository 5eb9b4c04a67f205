#!/usr/bin/python3
"""PyTorch reference for kiri's training benchmark.

A small self-contained GPT-2 (pre-LN, causal self-attention written by hand
because torch 1.13 has no scaled_dot_product_attention, 4x GELU(tanh) MLP,
LM head tied to wte, HF init std 0.02) trained with AdamW on random tokens.
Times forward + backward + optimizer step after warm-up, as kiri measures,
and prints one JSON line.

--ddp wraps the model in DistributedDataParallel (gloo); --zero does the same
and replaces AdamW by torch.distributed.optim.ZeroRedundancyOptimizer(AdamW)
with the same hyper-parameters: ZeRO stage 1, each rank keeps the AdamW state
of its shard of the parameters only and broadcasts its updated shard after the
step. The JSON reports the optimizer state bytes held by each rank.

Run with the environment from benchmarks/torch_env.sh so torch uses OpenBLAS
(Debian may otherwise resolve libblas.so.3 to the slow reference BLAS):
  eval "$(benchmarks/torch_env.sh)" && /usr/bin/python3 benchmarks/torch_gpt2.py ...
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, seq_len):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        mask = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
        # A plain attribute, not a buffer: DDP would broadcast it, and gloo has no bool.
        self.mask = mask.view(1, 1, seq_len, seq_len)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        hd = c // self.n_head
        q = q.view(b, t, self.n_head, hd).transpose(1, 2)
        k = k.view(b, t, self.n_head, hd).transpose(1, 2)
        v = v.view(b, t, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, seq_len):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, seq_len)
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
        self.h = nn.ModuleList([Block(n_embd, n_head, seq_len) for _ in range(n_layer)])
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


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--dtype", choices=["fp32"], default="fp32")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--ddp", action="store_true",
                   help="DistributedDataParallel over gloo; start with "
                        "python3 -m torch.distributed.run --standalone --nproc_per_node=N "
                        "--redirects 2 --tee 2 benchmarks/torch_gpt2.py --ddp ...")
    p.add_argument("--zero", action="store_true",
                   help="--ddp with ZeroRedundancyOptimizer(AdamW) (ZeRO stage 1, optimizer "
                        "state sharded over the ranks); started like --ddp")
    args = p.parse_args()
    if args.n_embd % args.n_head != 0:
        p.error(f"n_embd {args.n_embd} is not divisible by n_head {args.n_head}")
    if args.steps < 1:
        p.error("--steps must be >= 1")
    return args


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)  # torch may start with 1 thread
    torch.manual_seed(args.seed)
    model = GPT(args.n_layer, args.n_embd, args.n_head, args.vocab, args.seq_len)
    params = sum(p.numel() for p in model.parameters())  # tied wte counted once
    rank, world = 0, 1
    distributed = args.ddp or args.zero
    if distributed:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        model = torch.nn.parallel.DistributedDataParallel(model)
    hyper = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    if args.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                      **hyper)
        local_opt = opt.optim  # the AdamW over this rank's shard
    else:
        opt = torch.optim.AdamW(model.parameters(), **hyper)
        local_opt = opt
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    shape = (args.batch, args.seq_len)

    def step():
        idx = torch.randint(args.vocab, shape, generator=gen)
        tgt = torch.randint(args.vocab, shape, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup_steps):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    loss = loss.item()
    step_s = (time.perf_counter() - t0) / args.steps
    tokens = args.batch * args.seq_len * world
    # Optimizer state held by this rank (AdamW: exp_avg, exp_avg_sq, step), and
    # the parameters it updates: all of them under DDP, its shard under ZeRO.
    state_bytes = sum(t.numel() * t.element_size() for st in local_opt.state.values()
                      for t in st.values() if torch.is_tensor(t))
    opt_params = sum(p.numel() for g in local_opt.param_groups for p in g["params"])
    per_rank = [(state_bytes, opt_params)]
    if distributed:
        per_rank = [None] * world
        dist.all_gather_object(per_rank, (state_bytes, opt_params))
    if rank == 0:
        mode = "zero1" if args.zero else "ddp" if args.ddp else "single"
        print(json.dumps({
            "impl": {"zero1": "pytorch-zero1", "ddp": "pytorch-ddp"}.get(mode, "pytorch"),
            "mode": mode,
            "ranks": world,
            "threads": torch.get_num_threads(),
            "tokens_per_s": tokens / step_s,
            "step_s": step_s,
            "params": params,
            "opt_state_bytes": [b for b, _ in per_rank],
            "opt_params": [n for _, n in per_rank],
        }), flush=True)
    print(f"final loss {loss:.4f} (random tokens: about ln(vocab) = {math.log(args.vocab):.4f})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
