#!/usr/bin/env bash
# The outside clients that tests and benchmarks check kiri against, from PyPI (torch,
# transformers, tensorboard), in one virtual environment made once and cached under the
# user's cache directory, so that a clean clone (CI) reuses it:
#   ${XDG_CACHE_HOME:-~/.cache}/kiri/venv-<hash of the requirements below>.
# Not on `make demo`'s path. Prints the venv's python on stdout; exits 1 with the reason on
# stderr when it cannot be made (no python3-venv, no PyPI), and tests then skip naming it.
#   bash scripts/test-venv.sh                  make it when missing, print its python
#   bash scripts/test-venv.sh --path           print where it would be, make nothing
#   bash scripts/test-venv.sh --transformers4  also transformers 4.46 (the last 4.4x) beside it,
#       for folders both major versions must read the same: prints "PYTHONPATH=DIR PYTHON",
#       a command prefix whose python imports transformers 4.46 (and its tokenizers and hub)
#       from DIR ahead of the venv's 5.x, with the venv's torch
set -euo pipefail
requirements=(
  "torch==2.15.0"         # the performance peer and the reference math
  "transformers==5.23.0"  # the reader and writer of HF folders kiri must match
  "tokenizers==0.23.3"
  "safetensors==0.8.0"
  "numpy"
  "tensorboard==2.21.0"   # the reader of log.tensorboard's event files (tests/cli/loggers_test)
)
# transformers 4's own pins (it refuses tokenizers >= 0.21 and hub >= 1.0), without their
# dependencies: the rest (regex, safetensors, numpy, ...) is the venv's, and requests, which
# hub 0.x needs and 1.x dropped, is added with its own.
transformers4=("transformers==4.46.3" "tokenizers==0.20.3" "huggingface_hub==0.26.5")
hash=$(printf '%s\n' "${requirements[@]}" | sha256sum | cut -c1-12)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/kiri
venv=$cache/venv-$hash
overlay=$cache/transformers4-$(printf '%s\n' "$hash" "${transformers4[@]}" | sha256sum | cut -c1-12)
mode=${1:-}
if [ "$mode" = --path ]; then
  echo "$venv/bin/python"
  exit 0
fi
finish() {  # prints what the caller asked for, the venv (and overlay) being whole
  if [ "$mode" != --transformers4 ]; then
    echo "$venv/bin/python"
    exit 0
  fi
  if [ ! -f "$overlay/.complete" ]; then
    rm -rf "$overlay"
    if ! "$venv/bin/pip" install --quiet --disable-pip-version-check --target "$overlay" \
      --no-deps "${transformers4[@]}" >&2 ||
      ! "$venv/bin/pip" install --quiet --disable-pip-version-check --target "$overlay" \
        requests >&2; then
      rm -rf "$overlay"
      echo "test-venv: pip install ${transformers4[*]} failed (see pip's message above)" >&2
      exit 1
    fi
    touch "$overlay/.complete"
  fi
  echo "PYTHONPATH=$overlay $venv/bin/python"
  exit 0
}
if [ -f "$venv/.complete" ] && { [ "$mode" != --transformers4 ] || [ -f "$overlay/.complete" ]; }; then
  finish
fi
mkdir -p "$cache"
# One maker at a time (ctest runs tests in parallel); the others wait for it.
exec 9> "$cache/venv.lock"
flock 9
[ -f "$venv/.complete" ] && finish
python3 -c 'import venv, ensurepip' 2> /dev/null ||
  { echo "test-venv: python3's venv/ensurepip is missing (apt-get install python3-venv)" >&2; exit 1; }
# Made in place (a venv's scripts name its folder); .complete marks it whole, so one left
# half-made by a kill is made again.
rm -rf "$venv"
python3 -m venv "$venv" >&2
if ! "$venv/bin/pip" install --quiet --disable-pip-version-check "${requirements[@]}" >&2; then
  rm -rf "$venv"
  echo "test-venv: pip install ${requirements[*]} failed (see pip's message above)" >&2
  exit 1
fi
touch "$venv/.complete"
finish
