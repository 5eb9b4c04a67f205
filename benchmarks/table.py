"""Turns benchmarks/run.sh's JSON lines into the markdown table of docs/performance.md."""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]


def fmt_x(v):
    return f"{v:.2f}x"


def goal_min(v, limit):
    return f">= {limit}: {'met' if v >= limit else 'missed'}"


# kiri against PyTorch (benchmarks/peers.sh, whose lines carry "bench": "peers"): one row per
# config, thread count and dtype. kiri's fp32 is `kiri bench` (with MFU and the step over its
# GEMMs), its bf16 `kiri bench --dtypes` (bf16 / fp32 is within that run's interleaved rounds;
# its MFU is against the bf16 peak, its step over its bf16 GEMMs). MFU names its peak.
peers = [r for r in rows if r.get("bench") == "peers"]
loads = {(r["config"], r["threads"]): r["load"][0] for r in peers if r["impl"] == "load"}
kiri = {(r["config"], r["threads"]): r for r in peers if r["impl"] == "kiri"}
kdt = {(r["config"], r["threads"], r["layout"]): r for r in peers if r["impl"] == "kiri-dtype"}
peer = {(r["config"], r["threads"], r["dtype"], r["variant"]): r for r in peers
         if r["impl"].startswith("torch ") and r["mode"] == "single"}
version = next((r["impl"].split()[1] for r in peer.values()), "")
def mfu_cell(r):  # "48.5% of avx512 vfmadd231ps": MFU and the instruction of its peak
    peak = r.get("peak_instruction")
    return f"{100 * r['mfu']:.1f}%" + (f" of {peak}" if peak else "")


if kiri:
    print(f"| config | threads | dtype | kiri tokens/s | kiri GEMM path | PyTorch {version} eager | "
          f"PyTorch {version} compile | kiri / best PyTorch | goal | kiri bf16 / fp32 | goal | "
          "kiri MFU | kiri step / its GEMMs | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for key, k in kiri.items():
    for dtype in ("fp32", "bf16"):
        ts = {v: peer.get(key + (dtype, v)) for v in ("eager", "compile")}
        cells = [f"{t['tokens_per_s']:.0f}" if t else "n/a" for t in ts.values()]
        best = max((t["tokens_per_s"] for t in ts.values() if t), default=None)
        if dtype == "fp32":
            tok, path = k["tokens_per_s"], "sgemm (oneDNN)"
            mfu, gem, own, own_goal = mfu_cell(k), f"{k['step_s'] / k['gemm_step_s']:.2f}", "", ""
        else:
            b, f = kdt.get(key + ("bf16",)), kdt.get(key + ("fp32",))
            if not b or not f:
                continue
            tok, g = b["tokens_per_s"], b["gemm_lowp_gflops"]
            path = (f"{b['gemm_lowp']} (GFLOP/s: via_f32 {g['via_f32']:.0f}, "
                    f"onednn {g['onednn']:.0f}"
                    + (f", packed {g['packed']:.0f})" if "packed" in g else ")"))
            v = tok / f["tokens_per_s"]
            # Rows of a kiri older than these fields leave the cells empty.
            mfu = mfu_cell(b) if "mfu" in b else ""
            gem = f"{b['step_over_gemms']:.2f}" if "step_over_gemms" in b else ""
            own, own_goal = f"{v:.2f} (fp32 {f['tokens_per_s']:.0f})", goal_min(v, 1.4)
        ratio = tok / best if best else None
        limit = 3 if dtype == "fp32" else 1.5
        print(f"| {key[0]} | {key[1]} | {dtype} | {tok:.0f} | {path} | {cells[0]} | {cells[1]} | "
              f"{fmt_x(ratio) if ratio else 'n/a'} | {goal_min(ratio, limit) if ratio else ''} | "
              f"{own} | {own_goal} | {mfu} | {gem} | {loads.get(key, '')} |")

ddp = {r["ranks"]: r for r in rows if r["impl"] == "kiri-ddp"}
# benchmarks/run.sh's ZeRO section also runs PyTorch DDP on 2 ranks; its lines carry "bench": "zero".
tddp = {r["ranks"]: r for r in rows
        if r.get("mode") == "ddp" and r.get("bench") not in ("zero", "peers")}
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
        print(f"| PyTorch {tddp[1]['impl'].split()[1]} DDP (gloo) | {t1:.0f} | {t2:.0f} | {100 * t2 / (2 * t1):.1f}% |")
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
    tv = tz[0]["impl"].split()[1] if tz else ""
    by = {mode: [r for r in tz if r["mode"] == mode] for mode in ("ddp", "zero1")}
    if by["ddp"] and by["zero1"]:
        d = statistics.median(r["step_s"] for r in by["ddp"])
        for mode, label in (("ddp", f"PyTorch {tv} DDP (gloo)"),
                            ("zero1", f"PyTorch {tv} ZeRO-1 (ZeroRedundancyOptimizer(AdamW) over DDP)")):
            s_ = statistics.median(r["step_s"] for r in by[mode])
            # ZeroRedundancyOptimizer shards whole tensors, so the ranks' shares differ.
            opt = " / ".join(mib(b) for b in by[mode][0]["opt_state_bytes"])
            print(f"| {label}, {len(by[mode])} run(s) | {1000 * s_:.0f} ms | "
                  f"{statistics.median(r['tokens_per_s'] for r in by[mode]):.0f} | {s_ / d:.3f} (vs its DDP) | "
                  f" | | | {opt} | | | | |")

dt = [r for r in rows if r["impl"] == "kiri-dtype" and r.get("bench") != "peers"]
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
