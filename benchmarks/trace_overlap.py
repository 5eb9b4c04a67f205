#!/usr/bin/env python3
"""The gradient collectives' timeline in kiri's traces (log.trace=true), per step.

For each rank's trace.rankN.json in RUN_DIR, and each step from --skip on: the backward's
length, and the tail: how long after backward's end the step's last gradient collective
(any collective of more than 8 bytes that starts before the optimizer) completed. Prints
one JSON object with the medians over the steps of every rank, in seconds:

  {"step_s": ..., "backward_s": ..., "tail_s": ...}

A DDP run's tail is the part of its all-reduce that backward did not hide; a run whose one
bucket is reduced after backward (naive DP) has the whole all-reduce as its tail.
  benchmarks/trace_overlap.py RUN_DIR [--skip N]
"""
import argparse
import glob
import json
import os
import statistics
import sys


def steps_of(path, skip):
    with open(path) as f:
        ev = json.load(f)
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    spans = [e for e in ev if e.get("ph") == "X"]
    steps = sorted(
        (e for e in spans if e.get("cat") == "step" and e["name"].startswith("step ")),
        key=lambda e: e["ts"],
    )
    rows = []
    for st in steps[skip:]:
        t0, t1 = st["ts"], st["ts"] + st["dur"]
        inside = [e for e in spans if t0 <= e["ts"] < t1 and e.get("cat") != "step"]
        backward = [e for e in inside if e["name"] == "backward"]
        optimizer = [e for e in inside if e["name"] == "optimizer"]
        if len(backward) != 1 or len(optimizer) != 1:
            sys.exit(f"{path}: step at {t0} us has {len(backward)} backward and "
                     f"{len(optimizer)} optimizer spans, expected one each (one micro-batch)")
        end = backward[0]["ts"] + backward[0]["dur"]
        grads = [e for e in inside if e.get("cat") == "comm" and e["ts"] < optimizer[0]["ts"]
                 and e.get("args", {}).get("bytes", 0) > 8]
        last = max((e["ts"] + e["dur"] for e in grads), default=end)
        rows.append((st["dur"], backward[0]["dur"], max(0, last - end)))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--skip", type=int, default=3, help="warm-up steps left out (default 3)")
    a = p.parse_args()
    paths = sorted(glob.glob(os.path.join(a.run_dir, "trace.rank*.json")))
    if not paths:
        sys.exit(f"{a.run_dir}: no trace.rank*.json (run with --set log.trace=true)")
    rows = [r for path in paths for r in steps_of(path, a.skip)]
    if not rows:
        sys.exit(f"{a.run_dir}: no step after the first {a.skip}")
    med = [statistics.median(r[i] for r in rows) / 1e6 for i in range(3)]
    print(json.dumps({"step_s": med[0], "backward_s": med[1], "tail_s": med[2]}))


if __name__ == "__main__":
    main()
