#!/usr/bin/env bash
# Runs a PyTorch peer (benchmarks/torch_gpt2.py or torch_llama.py) in the venv of
# scripts/test-venv.sh: PyTorch 2.15 from PyPI, made on first use (a few minutes) and cached.
# Prints the peer's JSON line(s) on stdout; the peer's own messages go to stderr.
#   bash benchmarks/torch_peer.sh gpt2|llama [--ranks N] PEER_ARGS...
#   bash benchmarks/torch_peer.sh --check     exit 0 when the venv is there or can be made
# --ranks N starts N processes (N = 1 too) with python -m torch.distributed.run --standalone
# (gloo; give the peer --ddp or --zero). OMP_NUM_THREADS is the caller's: set it to the peer's --threads.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$(bash "$root/scripts/test-venv.sh") || {
  echo "torch_peer.sh: no PyTorch venv (scripts/test-venv.sh said why above)" >&2
  exit 1
}
[ "${1:-}" = --check ] && exit 0
case ${1:-} in
  gpt2 | llama) script=$root/benchmarks/torch_$1.py ;;
  *)
    echo "torch_peer.sh: the first argument must be gpt2, llama or --check, got '${1:-}'" >&2
    exit 2
    ;;
esac
shift
if [ "${1:-}" != --ranks ]; then
  exec "$python" "$script" "$@"
fi
ranks=${2:?torch_peer.sh: --ranks needs a number}
shift 2
# torch.distributed.run prefixes and interleaves the ranks' output; only rank 0 prints the
# JSON line, which is all that goes to stdout here.
log=$(mktemp /tmp/torch_peer.XXXXXX)
trap 'rm -f "$log"' EXIT
rc=0
"$python" -m torch.distributed.run --standalone --nproc_per_node="$ranks" "$script" "$@" \
  > "$log" 2>&1 || rc=$?
grep -o '{"impl".*' "$log" || true
if [ "$rc" != 0 ]; then
  tail -20 "$log" >&2
  echo "torch_peer.sh: $ranks-rank run failed (exit $rc)" >&2
  exit "$rc"
fi
