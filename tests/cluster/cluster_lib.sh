# Sourced by the tests/cluster/*_test.sh scripts: one namespace cluster for the test, removed
# on exit or a signal, and the helpers the runs share.
#   cluster_start TEST NAME SUBNET HOSTS RANKS_PER_HOST KIRI_BINARY
# sets root, kiri, work (a scratch folder), state (the cluster's folder, mpirun.env sourced)
# and exits 77 (skip) with scripts/cluster.sh's reason where namespaces cannot be made.

cluster() { bash "$root/scripts/cluster.sh" "$@"; }

cluster_start() {
  test_name=$1 name=$2
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  kiri=$(realpath "${6:?usage: $1.sh KIRI_BINARY}")
  work=$(mktemp -d "/tmp/kiri-$1.XXXXXX")
  export KIRI_CLUSTER_DIR=$work/state
  trap 'cluster down --name "$name" > /dev/null 2>&1 || true; rm -rf "$work"' EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  local rc=0
  cluster up --name "$name" --subnet "$3" --hosts "$4" --ranks-per-host "$5" --link 1gbit \
    > "$work/up.log" 2>&1 || rc=$?
  if ((rc != 0)); then
    cat "$work/up.log"
    exit $((rc == 77 ? 77 : 1))
  fi
  state=$KIRI_CLUSTER_DIR/$name
  # shellcheck disable=SC1091
  source "$state/mpirun.env"
}

fail() {
  echo "$test_name: $*" >&2
  exit 1
}

# A tiny GPT-2 on bytes, dp over the hosts; steps slow enough (about 0.05 s) to cut one in
# the middle. tiny RUN_DIR STEPS TIMEOUT_S [GLOBAL_BATCH]
tiny() {
  echo "--set data.tokenizer=byte --set model.n_layer=2 --set model.n_head=4" \
    "--set model.n_embd=128 --set model.block_size=64 --set train.seq_len=64" \
    "--set train.micro_batch=8 --set train.steps=$2 --set train.warmup=1" \
    "--set train.eval_every=0 --set train.eval_batches=1 --set checkpoint.every=4" \
    "--set parallel.timeout_s=$3 --global-batch ${4:-16} --set run.dir=$1"
}

last_step() {
  python3 -c '
import json, sys
try:
    s = [json.loads(l).get("step", 0) for l in open(sys.argv[1])]
except OSError:
    s = []
print(max(s or [0]))' "$1/metrics.jsonl"
}

# wait_step RUN STEP SECONDS: until RUN's metrics reach STEP (RUN.log is its output)
wait_step() {
  local t=0
  until (($(last_step "$1") >= $2)); do
    sleep 0.2
    t=$((t + 1))
    ((t < $3 * 5)) || fail "step $2 not reached in $3 s:
$(cat "$1.log")"
  done
}
