#!/usr/bin/env bash
# scripts/check_layers.py fails on planted violations, naming each: a base header that
# includes train (an include running back up), a folder the table lacks, and an nn header
# that includes the CPU backend (kernels/cpu is private to kernels: the others call the
# front); and passes the same tree without them, where kernels' own front includes the
# backend. Usage: planted_violation.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/docs" "$tmp/src/kiri/base" "$tmp/src/kiri/train" "$tmp/src/kiri/nn" \
  "$tmp/src/kiri/kernels/cpu"
cp "$src/docs/design.md" "$tmp/docs/"
printf '#include "kiri/base/error.h"\n' > "$tmp/src/kiri/train/fine.h"
printf '#pragma once\n#include "kiri/base/log.h"\n' > "$tmp/src/kiri/base/fine.h"
printf '#include "kiri/kernels/cpu/ops.h"\n' > "$tmp/src/kiri/kernels/ops.cpp"
printf '#pragma once\n#include "kiri/kernels/ops.h"\n' > "$tmp/src/kiri/nn/fine.h"
python3 "$src/scripts/check_layers.py" --root "$tmp" > "$tmp/clean.out" \
  || { echo "FAIL: the clean tree was refused:"; cat "$tmp/clean.out"; exit 1; }
printf '#pragma once\n#include "kiri/train/trainer.h"\n' > "$tmp/src/kiri/base/bad.h"
mkdir "$tmp/src/kiri/newlayer"
printf '#pragma once\n#include "kiri/kernels/cpu/ops.h"\n' > "$tmp/src/kiri/nn/bad.h"
if python3 "$src/scripts/check_layers.py" --root "$tmp" > "$tmp/out" 2>&1; then
  echo "FAIL: a base header including train passed:"; cat "$tmp/out"; exit 1
fi
for needle in "src/kiri/base/bad.h:2 includes kiri/train/: layer base may include only" \
              "src/kiri/newlayer/ is a folder that design.md's layer table does not name" \
              "src/kiri/nn/bad.h:2 includes kiri/kernels/cpu/: only kernels may"; do
  grep -qF "$needle" "$tmp/out" || { echo "FAIL: lacks '$needle':"; cat "$tmp/out"; exit 1; }
done
echo "OK: the three planted violations named"
