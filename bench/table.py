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
