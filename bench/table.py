"""Turns bench/run.sh's JSON lines into the markdown table of docs/performance.md."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
kiri = {(r["config"], r["threads"]): r for r in rows if r["impl"] == "kiri"}
torch = {(r["config"], r["threads"]): r for r in rows if r["impl"] == "pytorch"}
print("| config | threads | kiri tokens/s | PyTorch tokens/s | kiri / PyTorch | kiri MFU | "
      "kiri step / its GEMMs | GEMM peak GFLOP/s |")
print("|---|---|---|---|---|---|---|---|")
for key, k in kiri.items():
    t = torch.get(key)
    tt = f"{t['tokens_per_s']:.0f}" if t else "n/a"
    ratio = f"{k['tokens_per_s'] / t['tokens_per_s']:.2f}x" if t else "n/a"
    print(f"| {key[0]} | {key[1]} | {k['tokens_per_s']:.0f} | {tt} | {ratio} | "
          f"{100 * k['mfu']:.1f}% | {k['step_s'] / k['gemm_step_s']:.2f} | {k['peak_gflops']:.0f} |")

ddp = {r["ranks"]: r for r in rows if r["impl"] == "kiri-ddp"}
tddp = {r["ranks"]: r for r in rows if r["impl"] == "pytorch-ddp"}
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
