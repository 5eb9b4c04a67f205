#!/usr/bin/env bash
# scripts/cluster.sh end to end on this machine: up, status, reachability, cut/heal,
# shape (also under a bulk send), an mpirun across the namespace hosts, down, and a SIGKILLed up cleaned by down.
# Exit 77 (skip) with the script's reason where it cannot run (not root, no netns, no tbf).
# Its own cluster name, subnet and state dir, so that it touches no other cluster.
set -euo pipefail
# No "cmd | grep -q" here: grep -q exits at its first match, and the writer's SIGPIPE then
# fails the pipe under pipefail (CI saw "h1 has no 10.231.9.11" with the address present).

here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../../scripts/cluster.sh
name=kt9
subnet=10.231.9.0/24
ip0=10.231.9.10
ip1=10.231.9.11
KIRI_CLUSTER_DIR=$(mktemp -d /tmp/kiri-cluster-test.XXXXXX)
export KIRI_CLUSTER_DIR
readonly state=$KIRI_CLUSTER_DIR/$name

cleanup() {
  "$cluster" down --name "$name" > /dev/null 2>&1 || true
  rm -rf "$KIRI_CLUSTER_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

step() { echo "== $*"; }

up() {
  "$cluster" up --name "$name" --subnet "$subnet" "$@"
}

# Whether host h0 reaches IP within 2 s: ping where installed, otherwise a TCP connect to
# a closed port, which a reachable host answers at once with "Connection refused".
reaches() {
  if command -v ping > /dev/null; then
    ip netns exec "$name-h0" ping -c 1 -W 2 "$1" > /dev/null 2>&1
  else
    local err
    err=$(ip netns exec "$name-h0" timeout 2 bash -c "exec 3<> /dev/tcp/$1/9" 2>&1) && return 0
    [[ $err == *"Connection refused"* ]]
  fi
}

# Nothing of the cluster left: no namespace, no link named after it.
assert_nothing_left() {
  local ns links
  ns=$(ip netns list | grep -E "^$name-" || true)
  links=$(ip -o link show | grep -E ": k$name-" || true)
  [[ -z $ns ]] || fail "$1: namespaces left: $ns"
  [[ -z $links ]] || fail "$1: links left: $links"
  [[ ! -e $state ]] || fail "$1: state dir $state left"
}

# The skip reasons are the script's own (exit 77, reason on stderr).
precheck() {
  local rc=0
  up --hosts 2 --ranks-per-host 1 --link 200mbit > /dev/null || rc=$?
  if ((rc == 77)); then
    exit 77
  fi
  ((rc == 0)) || fail "up exited $rc"
  command -v mpirun > /dev/null || { echo "skipped: no mpirun (openmpi-bin)" >&2; exit 77; }
}

check_status() {
  step "status shows both hosts"
  local out
  out=$("$cluster" status --name "$name")
  echo "$out"
  grep -qE "^h0 +$name-h0 +$ip0 .* 200Mbit +200Mbit +up\$" <<< "$out" || fail "status: no h0 line"
  grep -qE "^h1 +$name-h1 +$ip1 .* 200Mbit +200Mbit +up\$" <<< "$out" || fail "status: no h1 line"
}

check_cut_heal() {
  step "hosts reach each other"
  reaches "$ip1" || fail "h0 does not reach h1"
  ip netns exec "$name-h1" ip -o addr show eth0 | grep "$ip1/24" > /dev/null || fail "h1 has no $ip1"
  step "cut h1: h0 no longer reaches it within 2 s"
  "$cluster" cut h1 --name "$name"
  ! reaches "$ip1" || fail "h0 still reaches h1 after cut"
  "$cluster" status --name "$name" | grep -E "^h1 .* down\$" > /dev/null || fail "status does not show h1 down"
  step "heal h1: reachable again"
  "$cluster" heal h1 --name "$name"
  local t ok=0
  for ((t = 0; t < 3; t++)); do
    if reaches "$ip1"; then
      ok=1
      break
    fi
  done
  ((ok)) || fail "h0 does not reach h1 after heal"
}

check_shape() {
  step "shape h1 50mbit, then none"
  "$cluster" shape h1 50mbit --name "$name"
  tc qdisc show dev "k$name-b1" | grep "tbf .*rate 50Mbit" > /dev/null || fail "bridge side of h1 not at 50Mbit"
  ip netns exec "$name-h1" tc qdisc show dev eth0 | grep "tbf .*rate 50Mbit" > /dev/null ||
    fail "namespace side of h1 not at 50Mbit"
  tc qdisc show dev "k$name-b0" | grep "rate 200Mbit" > /dev/null || fail "h0 changed with h1"
  "$cluster" shape h1 none --name "$name"
  ! tc qdisc show dev "k$name-b1" | grep tbf > /dev/null || fail "h1 still shaped after shape none"
}

# A bulk TCP send from h0 to h1 keeps flowing when h0's link is slowed under it: tbf never
# sends a packet longer than its burst, so a burst lowered below a queued 64 KiB GSO send
# stranded it and the link went dead (3 of 3 tries with a 64 KiB burst; docs/cluster.md).
check_reshape_under_load() {
  step "shape h0 1gbit -> 100mbit under a bulk TCP send: the bytes keep flowing"
  "$cluster" shape h0 1gbit --name "$name"
  "$cluster" shape h1 1gbit --name "$name"
  local count=$KIRI_CLUSTER_DIR/received recv send c1 c2
  ip netns exec "$name-h1" python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5001)); s.listen(1); c, _ = s.accept(); c.settimeout(0.1)
n, last = 0, 0
while True:
    try:
        b = c.recv(1 << 20)
        if not b: break
        n += len(b)
    except socket.timeout: pass
    if time.time() - last > 0.1:
        open(sys.argv[2] + ".tmp", "w").write(str(n)); __import__("os").replace(sys.argv[2] + ".tmp", sys.argv[2]); last = time.time()
' "$ip1" "$count" &
  recv=$!
  sleep 0.5
  ip netns exec "$name-h0" timeout 15 python3 -c '
import socket, sys, time
s = socket.create_connection((sys.argv[1], 5001)); b = b"x" * (1 << 20); t = time.time()
while time.time() - t < 8: s.sendall(b)
' "$ip1" > /dev/null 2>&1 &
  send=$!
  sleep 1
  "$cluster" shape h0 100mbit --name "$name"
  sleep 1
  c1=$(cat "$count")
  sleep 2
  c2=$(cat "$count")
  kill "$send" "$recv" 2> /dev/null || true
  wait "$send" "$recv" 2> /dev/null || true
  echo "received $(((c2 - c1) / 1000)) kB in the 2 s after the reshape (100 Mbit/s is 25000 kB)"
  # At 100 Mbit/s, 2 s carry 25 MB; a stranded queue carries nothing.
  ((c2 - c1 > 5000000)) || fail "the reshaped link stalled: $((c2 - c1)) bytes in 2 s"
  "$cluster" shape h0 200mbit --name "$name"
  "$cluster" shape h1 200mbit --name "$name"
}

check_mpirun() {
  step "mpirun across the two hosts"
  local flags out
  read -r -a flags < "$state/mpirun.flags"
  # shellcheck disable=SC2016 # expanded by the ranks' shell
  out=$(timeout 60 mpirun --allow-run-as-root "${flags[@]}" --hostfile "$state/hostfile" -n 2 \
    sh -c 'echo "$(hostname) $(ip netns identify)"' | sort)
  echo "$out"
  [[ $out == "$name-h0 $name-h0"$'\n'"$name-h1 $name-h1" ]] ||
    fail "mpirun did not run one rank in each host namespace"
}

check_down() {
  step "down leaves nothing; a second down is safe"
  "$cluster" down --name "$name" > /dev/null
  assert_nothing_left "after down"
  "$cluster" down --name "$name" > /dev/null
}

check_sigkill() {
  step "SIGKILL in the middle of up, then down, then a fresh up"
  local pid
  up --hosts 20 --ranks-per-host 1 --link 1gbit > /dev/null 2>&1 &
  pid=$!
  sleep 0.5
  # As a terminal or CI kills a job: the script and the command it was running (an
  # `ip netns add` left running on its own finished after down once, leaving its namespace).
  kill -STOP "$pid" 2> /dev/null || true
  pkill -KILL -P "$pid" 2> /dev/null || true
  kill -KILL "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  ip netns list | grep -E "^$name-" > /dev/null || echo "(up had made nothing yet)"
  "$cluster" down --name "$name" > /dev/null
  assert_nothing_left "after SIGKILLed up and down"
  up --hosts 2 --ranks-per-host 1 --link none > /dev/null
  reaches "$ip1" || fail "fresh up after SIGKILL: h0 does not reach h1"
  "$cluster" down --name "$name" > /dev/null
  assert_nothing_left "after the fresh up's down"
}

main() {
  precheck
  check_status
  check_cut_heal
  check_shape
  check_reshape_under_load
  check_mpirun
  check_down
  check_sigkill
  echo "PASS"
}

main
