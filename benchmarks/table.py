"""Turns benchmarks/run.sh's JSON lines into the markdown table of docs/performance.md."""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
kiri = {(r["config"], r["threads"]): r for r in rows if r["impl"] == "kiri"}
torch = {(r["config"], r["threads"]): r for r in rows if r["impl"] == "pytorch"}
print("| config | threads | kiri tokens/s | PyTorch tokens/s | kiri / PyTorch | kiri MFU | "
      "kiri step / its GEMMs | FMA peak GFLOP/s | GEMM GFLOP/s |")
print("|---|---|---|---|---|---|---|---|---|")
for key, k in kiri.items():
    t = torch.get(key)
    tt = f"{t['tokens_per_s']:.0f}" if t else "n/a"
    ratio = f"{k['tokens_per_s'] / t['tokens_per_s']:.2f}x" if t else "n/a"
    print(f"| {key[0]} | {key[1]} | {k['tokens_per_s']:.0f} | {tt} | {ratio} | "
          f"{100 * k['mfu']:.1f}% | {k['step_s'] / k['gemm_step_s']:.2f} | {k['peak_gflops']:.0f} | "
          f"{k['gemm_gflops']:.0f} |")

ddp = {r["ranks"]: r for r in rows if r["impl"] == "kiri-ddp"}
# benchmarks/run.sh's ZeRO section also runs PyTorch DDP on 2 ranks; its lines carry "bench": "zero".
tddp = {r["ranks"]: r for r in rows if r["impl"] == "pytorch-ddp" and r.get("bench") != "zero"}
if 1 in ddp and 2 in ddp:
    print()
    print("| data parallel, tiny, 1 thread per rank | 1 rank tokens/s | 2 ranks tokens/s | "
          "scaling efficiency |")
    print("|---|---|---|---|")
    k1, k2 = ddp[1]["tokens_per_s"], ddp[2]["tokens_per_s"]
    print(f"| kiri DDP (MPI) | {k1:.0f} | {k2:.0f} | {100 * k2 / (2 * k1):.1f}% |")
    n2 = ddp[2]["naive_tokens_per_s"]
    print(f"| kiri naive DP (reduce to rank 0 + broadcast, per parameter) | {ddp[1]['naive_tokens_per_s']:.0f} | "
          f"{n2:.0f} | {100 * n2 / (2 * k1):.1f}% |")
    if 1 in tddp and 2 in tddp:
        t1, t2 = tddp[1]["tokens_per_s"], tddp[2]["tokens_per_s"]
        print(f"| PyTorch DDP (gloo) | {t1:.0f} | {t2:.0f} | {100 * t2 / (2 * t1):.1f}% |")
    d = ddp[2]
    print()
    print("| kiri DDP, 2 ranks | backward alone | backward + sync | the all-reduces alone | "
          "all-reduce time hidden |")
    print("|---|---|---|---|---|")
    print(f"| tiny | {1000 * d['backward_s']:.0f} ms | {1000 * d['backward_sync_s']:.0f} ms | "
          f"{1000 * d['allreduce_s']:.0f} ms | {100 * d['hidden_fraction']:.0f}% |")


def mib(b):
    return f"{b / 2**20:.1f}"


def goal(ratio, limit):
    return f"<= {limit:.2f}: {'met' if ratio <= limit else 'missed'}"


# ZeRO stages: kiri's layouts (interleaved rounds, median step) against stage 0, and
# PyTorch's ZeRO-1 (ZeroRedundancyOptimizer over DDP) against its own DDP, same model.
zero = [r for r in rows if r["impl"] == "kiri-zero"]
if zero:
    print()
    print(f"ZeRO stages ({zero[0]['config']}, {zero[0]['ranks']} ranks x {zero[0]['threads']} thread, "
          f"{zero[0]['timed_steps']} steps per layout over {zero[0]['rounds']} interleaved rounds); "
          "bytes per rank, MiB:")
    print()
    print("| layout | step | tokens/s | step vs stage 0 | goal | parameters | gradients | "
          "optimizer states | activations | buffers | peak, all | sent per step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    limits = {"stage1": 1.10, "stage2": 1.10, "stage3": 1.25}
    for r in zero:
        m, v = r["mem"], r["vs_stage0"]
        g = goal(v, limits[r["layout"]]) if r["layout"] in limits else ""
        print(f"| kiri {r['layout']} | {1000 * r['step_s']:.0f} ms | {r['tokens_per_s']:.0f} | "
              f"{v:.3f} | {g} | {mib(m['parameters'])} | {mib(m['gradients'])} | "
              f"{mib(m['optimizer_states'])} | {mib(m['activations'])} | {mib(m['buffers'])} | "
              f"{mib(m['total'])} | "
              f"{mib(r.get('sent_bytes_per_step', 0))} |")
    tz = [r for r in rows if r.get("bench") == "zero"]
    by = {mode: [r for r in tz if r["mode"] == mode] for mode in ("ddp", "zero1")}
    if by["ddp"] and by["zero1"]:
        d = statistics.median(r["step_s"] for r in by["ddp"])
        for mode, label in (("ddp", "PyTorch DDP (gloo)"),
                            ("zero1", "PyTorch ZeRO-1 (ZeroRedundancyOptimizer(AdamW) over DDP)")):
            s_ = statistics.median(r["step_s"] for r in by[mode])
            # ZeroRedundancyOptimizer shards whole tensors, so the ranks' shares differ.
            opt = " / ".join(mib(b) for b in by[mode][0]["opt_state_bytes"])
            print(f"| {label}, {len(by[mode])} run(s) | {1000 * s_:.0f} ms | "
                  f"{statistics.median(r['tokens_per_s'] for r in by[mode]):.0f} | {s_ / d:.3f} (vs its DDP) | "
                  f" | | | {opt} | | | | |")

dt = [r for r in rows if r["impl"] == "kiri-dtype"]
if dt:
    base = dt[0]["tokens_per_s"]
    print()
    print(f"dtype ({dt[0]['config']}, 1 process x {dt[0]['threads']} thread, stage 0, "
          f"{dt[0]['timed_steps']} steps per layout over {dt[0]['rounds']} interleaved rounds); "
          "peak bytes, MiB:")
    print()
    print("| layout | tokens/s | tokens/s vs fp32 | goal | activations | parameters | gradients | "
          "optimizer states | peak, all |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in dt:
        m, v = r["mem"], r["tokens_per_s"] / base
        g = f">= 1.50: {'met' if v >= 1.5 else 'missed'}" if r["layout"] == "bf16" else ""
        print(f"| {r['layout']} | {r['tokens_per_s']:.0f} | {v:.3f} | {g} | {mib(m['activations'])} | "
              f"{mib(m['parameters'])} | {mib(m['gradients'])} | {mib(m['optimizer_states'])} | "
              f"{mib(m['total'])} |")

# Tensor and pipeline parallelism: kiri bench --layouts on 1 process (1x1x1) and 2 ranks.
lay = [r for r in rows if r["impl"] == "kiri-layout"]
if lay:
    one = next((r for r in lay if r["ranks"] == 1), None)
    multi = [r for r in lay if r["ranks"] > 1]
    ops = sorted({k for r in lay for k in r["comm_share"]})
    r0 = multi[0] if multi else one
    print()
    print(f"Layouts ({r0['config']}, {r0['tokens_per_step']} tokens per step in every layout, "
          f"{r0['threads']} thread per rank, {r0['timed_steps']} steps per layout over "
          f"{r0['rounds']} interleaved rounds); shares of rank 0's step time from its trace:")
    print()
    print("| layout | ranks | dp x tp x pp | m x micro-batch | step | tokens/s | vs 1x1x1 | "
          "bubble (rank 0) | (p-1)/(m+p-1) | with the stages' measured costs | compute | "
          "comm, exposed | idle | " + " | ".join(ops) + " | peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(ops) + "---|")

    def pct(v):
        return f"{100 * v:.1f}%"

    for r in ([one] if one else []) + multi:
        same = one and r.get("vocab_size") == one.get("vocab_size")
        vs = f"{r['tokens_per_s'] / one['tokens_per_s']:.2f}x" if same else "n/a"
        b = pct(r["bubble"]) if "bubble" in r else ""
        f = pct(r["bubble_formula"]) if "bubble_formula" in r else ""
        u = pct(r["bubble_unequal_stages"]) if "bubble_unequal_stages" in r else ""
        shares = " | ".join(pct(r["comm_share"][k]) if k in r["comm_share"] else "" for k in ops)
        print(f"| {r['layout']} | {r['ranks']} | {r['dp']}x{r['tp']}x{r['pp']} | "
              f"{r['microbatches']} x {r['micro_batch']} | {1000 * r['step_s']:.0f} ms | "
              f"{r['tokens_per_s']:.0f} | {vs} | {b} | {f} | {u} | {pct(r['compute_share'])} | "
              f"{pct(r['exposed_comm_share'])} | {pct(r['idle_share'])} | {shares} | "
              f"{r['peak_mib']:.0f} |")
    print()
    print("| layout | stages (FLOPs share) | compute per step, by stage | "
          "communication time per operation and group, share of the step |")
    print("|---|---|---|---|")
    for r in ([one] if one else []) + multi:
        g = sorted(r["comm_share_by_group"].items(), key=lambda kv: -kv[1])
        st = (f"{r['stages'].replace(' | ', '; ')} "
              f"({' / '.join(pct(x) for x in r['stage_flops_share'])})"
              if "stages" in r else "")
        sc = " / ".join(f"{1000 * x:.0f} ms" for x in r.get("stage_compute_s", []))
        print(f"| {r['layout']} | {st} | {sc} | "
              + (", ".join(f"{k} {pct(v)}" for k, v in g) or "none") + " |")
