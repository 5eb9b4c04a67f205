"""Reads a run folder's TensorBoard event files with TensorBoard's own reader (the PyPI
package, in the test venv of scripts/test-venv.sh) and prints what it found as one JSON
object: {"files": N, "scalars": {tag: [[step, value], ...]}}. tests/cli/loggers_test.cpp
compares the values with metrics.jsonl.

    python tensorboard_read.py RUN_DIR
"""
import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator


def main(run_dir):
    files = [f for f in os.listdir(run_dir) if f.startswith("events.out.tfevents.")]
    # 0: keep every event (the default samples scalars down to 10,000 per tag).
    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    scalars = {tag: [[e.step, e.value] for e in acc.Scalars(tag)]
               for tag in acc.Tags()["scalars"]}
    print(json.dumps({"files": len(files), "scalars": scalars}))


if __name__ == "__main__":
    main(sys.argv[1])
