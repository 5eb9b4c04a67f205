#!/usr/bin/env python3
"""Time from a rank's death to the first step after kiri launch --max-restarts restarted the job,
itemised, for the tiny byte-level model (1 x 32) on 2 and 4 ranks, one thread each.

A supervised run trains with checkpoints every 5 steps (asynchronous) and a 3 s collective
timeout; once it has logged step 22, rank 1 is SIGKILLed (or SIGSTOPped: then the others find
it only at the timeout). The phases, from the supervisor's and the ranks' timestamped stderr
lines and the run folder's records:

  detect    the fault -> the launcher has exited (mpirun ends the job; for a stopped rank the
            others wait parallel.timeout_s plus the hang diagnosis' grace first)
  decide    -> the next attempt starts (the ranks gone, the run folder read)
  start     -> every rank of the new attempt has started (mpirun, process start)
  build     -> the ranks have built the trainer (MPI init, config, data, model): "run folder"
  load      -> the checkpoint is loaded: "resumed from"
  step      -> the first step after the restart is printed

  benchmarks/restart_time.py [KIRI] [REPEATS]
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

KIRI = sys.argv[1] if len(sys.argv) > 1 else "build/kiri"
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
TINY = ("--set data.tokenizer=byte --set model.n_layer=1 --set model.n_embd=32 "
        "--set model.block_size=32 --set train.seq_len=32 --set train.micro_batch=2 "
        "--set train.warmup=1 --set train.eval_every=0 --set train.eval_batches=1 "
        "--set checkpoint.every=5 --set checkpoint.async=true --set parallel.timeout_s=3 "
        "--set log.every=1 --set train.steps=100000").split()


def one(ranks, sig, root):
    run = os.path.join(root, "run")
    cmd = [KIRI, "launch", "-n", str(ranks), "--threads", "1", "--max-restarts", "1", "--",
           "train", *TINY, "--set", "run.dir=" + run]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    lines = []  # (time, line) of stdout and stderr

    def read(stream):
        for line in stream:
            lines.append((time.time(), line))

    readers = [threading.Thread(target=read, args=(s,), daemon=True) for s in (p.stdout, p.stderr)]
    for t in readers:
        t.start()

    def first(pred, after=0.0):
        while True:
            for t, l in list(lines):
                if t >= after and pred(l):
                    return t, l
            if p.poll() is not None and not any(t >= after and pred(l) for t, l in lines):
                raise RuntimeError("the run ended:\n" + "".join(l for _, l in lines[-40:]))
            time.sleep(0.005)

    first(lambda l: l.startswith("step     22/"))
    with open(os.path.join(run, "launch", "attempt_1", "rank_1.start")) as f:
        pid = int(f.read().split()[0])
    t0 = time.time()
    os.kill(pid, sig)
    attempt2 = os.path.join(run, "launch", "attempt_2")
    t_resumed, _ = first(lambda l: "resumed from" in l, t0)
    t_built, _ = first(lambda l: "info: run folder" in l and ": config " in l, t0)
    resumed_step = int([l for t, l in lines if t >= t0 and "resumed from" in l][0].split()[-1])
    t_step, _ = first(lambda l: l.startswith("step %6d/" % (resumed_step + 1)), t0)
    with open(os.path.join(run, "launch", "attempts.jsonl")) as f:
        rec = json.loads(f.readline())
    started = max(os.path.getmtime(os.path.join(attempt2, "rank_%d.start" % r))
                  for r in range(ranks))
    os.killpg(p.pid, signal.SIGTERM)
    p.wait(60)
    # The second attempt's start: the supervisor's "attempt 2 of" line.
    t_attempt2 = [t for t, l in lines if "[kiri] launch: attempt 2 of" in l][0]
    return {
        "detect": rec["ended_at"] - t0,
        "decide": t_attempt2 - rec["ended_at"],
        "start": started - t_attempt2,
        "build": t_built - started,
        "load": t_resumed - t_built,
        "step": t_step - t_resumed,
        "total": t_step - t0,
        "lost": rec.get("steps_lost"),
    }


def main():
    keys = ["detect", "decide", "start", "build", "load", "step", "total"]
    print("%-5s %-8s %3s " % ("ranks", "fault", "rep") + " ".join("%8s" % k for k in keys) +
          " %5s" % "lost")
    for ranks in (2, 4):
        for sig, name in ((signal.SIGKILL, "SIGKILL"), (signal.SIGSTOP, "SIGSTOP")):
            for rep in range(1, REPEATS + 1):
                root = tempfile.mkdtemp(prefix="kiri-restart-")
                try:
                    r = one(ranks, sig, root)
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                print("%-5d %-8s %3d " % (ranks, name, rep) +
                      " ".join("%8.2f" % r[k] for k in keys) + " %5s" % r["lost"], flush=True)


if __name__ == "__main__":
    main()
