"""What benchmarks/torch_gpt2.py and torch_llama.py share: the options, the training loop
and its timing, and the JSON line they print.

The peer is PyTorch as a user would run it today (the venv of scripts/test-venv.sh, PyTorch
2.15 from PyPI with its own oneDNN and MKL): AdamW with its defaults' implementation,
torch.set_num_threads, and the variant chosen by the options:
  --compile     torch.compile(model) (inductor); the steps that compile are warm-up steps, so
                compile time is not in the timed steps (it is reported as first_step_s)
  --dtype bf16  forward and loss under torch.autocast("cpu", torch.bfloat16), parameters,
                gradients and AdamW in fp32 (PyTorch's mixed precision on a CPU)
  --ddp/--zero  DistributedDataParallel over gloo (ZeroRedundancyOptimizer(AdamW) for --zero);
                start with python -m torch.distributed.run --standalone --nproc_per_node=N
"""
import json
import math
import sys
import time

import torch


def add_args(p):
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=5, help="timed steps (the median is reported)")
    p.add_argument("--warmup-steps", type=int, default=2,
                   help="untimed steps first (with --compile at least 2: compiling happens in "
                        "the first)")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--compile", action="store_true", help="torch.compile(model) (inductor)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--ddp", action="store_true",
                   help="DistributedDataParallel over gloo; start with python -m "
                        "torch.distributed.run --standalone --nproc_per_node=N ...")
    p.add_argument("--zero", action="store_true",
                   help="--ddp with ZeroRedundancyOptimizer(AdamW) (ZeRO stage 1, optimizer "
                        "state sharded over the ranks); started like --ddp")


def check_args(p, a):
    if a.steps < 1:
        p.error(f"--steps must be >= 1, got {a.steps}")
    if a.threads < 1:
        p.error(f"--threads must be >= 1, got {a.threads}")
    # The first compiled step compiles, a second may recompile (e.g. for the grad mode);
    # timing either would time the compiler.
    low = 2 if a.compile else 0
    if a.warmup_steps < low:
        p.error(f"--warmup-steps must be >= {low}{' with --compile' if a.compile else ''}, "
                f"got {a.warmup_steps}")


def setup(a):
    torch.set_num_threads(a.threads)  # the wheel may start with another count
    torch.manual_seed(a.seed)


def train(a, model, vocab, batch, seq_len, fields):
    """Trains `model` (forward(idx, targets) -> loss) on random tokens for the warm-up and the
    timed steps and prints the JSON line from rank 0; `fields` are added to it."""
    params = sum(p.numel() for p in model.parameters())  # a tied weight counted once
    rank, world = 0, 1
    distributed = a.ddp or a.zero
    if distributed:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        model = torch.nn.parallel.DistributedDataParallel(model)
    hyper = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    if a.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                      **hyper)
        local_opt = opt.optim  # the AdamW over this rank's shard
    else:
        opt = torch.optim.AdamW(model.parameters(), **hyper)
        local_opt = opt
    run = torch.compile(model) if a.compile else model
    gen = torch.Generator().manual_seed(a.seed + 1 + rank)
    shape = (batch, seq_len)

    def step():
        idx = torch.randint(vocab, shape, generator=gen)
        tgt = torch.randint(vocab, shape, generator=gen)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = run(idx, tgt)
        loss.backward()
        opt.step()
        return loss.item()

    first_s = None
    for _ in range(a.warmup_steps):
        t0 = time.perf_counter()
        step()
        first_s = first_s if first_s is not None else time.perf_counter() - t0
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    step_s = sorted(times)[len(times) // 2]  # the median, as kiri bench
    # Optimizer state held by this rank (AdamW: exp_avg, exp_avg_sq, step).
    state_bytes = sum(t.numel() * t.element_size() for st in local_opt.state.values()
                      for t in st.values() if torch.is_tensor(t))
    per_rank = [state_bytes]
    if distributed:
        per_rank = [None] * world
        dist.all_gather_object(per_rank, state_bytes)
    if rank == 0:
        variant = "compile" if a.compile else "eager"
        mode = "zero1" if a.zero else "ddp" if a.ddp else "single"
        line = {"impl": f"torch {torch.__version__.split('+')[0]} {variant}",
                "torch": torch.__version__, "variant": variant, "mode": mode,
                "dtype": a.dtype, "ranks": world, "threads": torch.get_num_threads(),
                "batch": batch, "seq_len": seq_len, "step_s": step_s,
                "tokens_per_s": batch * seq_len * world / step_s, "timed_steps": a.steps,
                "warmup_steps": a.warmup_steps, "first_step_s": first_s, "params": params,
                "opt_state_bytes": per_rank}
        line.update(fields)
        print(json.dumps(line), flush=True)
    print(f"final loss {loss:.4f} (random tokens: about ln(vocab) = {math.log(vocab):.4f})",
          file=sys.stderr)
    if distributed:
        dist.destroy_process_group()
