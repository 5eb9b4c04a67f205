#!/usr/bin/env bash
# A cluster of "hosts" on one machine, each host a Linux network namespace joined to a
# bridge by a shaped veth link, so a multi-node MPI job can be tried on one box with the
# same hostfile/flags a real cluster would take (docs/cluster.md).
#
#   scripts/cluster.sh up --hosts H --ranks-per-host R --link RATE [--latency-ms L]
#                         [--burst-ms B] [--name N] [--subnet A.B.C.0/24]
#   scripts/cluster.sh down|status [--name N]
#   scripts/cluster.sh shape HOST RATE | cut HOST | heal HOST   [--name N]
#   scripts/cluster.sh run [up options] -- CMD...
#
# Exit 77 ("skip") when it cannot work here: not root, no `ip netns`, no tbf in tc.
set -euo pipefail

readonly SKIP=77
name=kiri
subnet=10.231.0.0/24
hosts=""
ranks=""
rate=""
latency_ms=""
burst_ms=5

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

skip() {
  echo "cluster.sh: skipped: $*" >&2
  exit "$SKIP"
}

usage() {
  sed -n '5,10p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# --- names: everything this script creates is named from the cluster name, so that
# down can find it (even after a SIGKILL) without touching anything else. ---

state_dir() { echo "${KIRI_CLUSTER_DIR:-/run/kiri-cluster}/$name"; }
ns_name() { echo "$name-h$1"; }
# Interface names must fit IFNAMSIZ (15 chars): "k" + name (<= 8) + "-b" + index (<= 3).
bridge_name() { echo "k$name-br"; }
port_name() { echo "k$name-b$1"; }  # bridge side of host i's veth (root namespace)
peer_name() { echo "k$name-n$1"; }  # namespace side before it is moved and renamed eth0
prefix3() { echo "${subnet%.0/24}"; }
host_ip() { echo "$(prefix3).$((10 + $1))"; }
bridge_ip() { echo "$(prefix3).1"; }

validate_name() {
  [[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
    die "bad --name '$name': 1-8 characters, [a-z][a-z0-9]* (interface names must fit 15 chars)"
}

validate_subnet() {
  [[ $subnet =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.0/24$ ]] ||
    die "bad --subnet '$subnet': expected A.B.C.0/24"
  local o
  for o in "${BASH_REMATCH[@]:1}"; do
    ((o <= 255)) || die "bad --subnet '$subnet': octet $o > 255"
  done
}

# RATE: tc's form, an integer with a unit (bit kbit mbit gbit tbit, or bps kbps mbps gbps
# for bytes), or `none` for an unshaped link.
validate_rate() {
  [[ $1 == none || $1 =~ ^[1-9][0-9]*(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$ ]] ||
    die "bad rate '$1': expected e.g. 200mbit, 1gbit, 500kbit, 10mbps or none"
}

# Bytes per second of a validated RATE (not none).
rate_bytes() {
  [[ $1 =~ ^([0-9]+)([a-z]+)$ ]]
  local n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  case $unit in
    bit) echo $((n / 8)) ;;
    kbit) echo $((n * 1000 / 8)) ;;
    mbit) echo $((n * 1000000 / 8)) ;;
    gbit) echo $((n * 1000000000 / 8)) ;;
    tbit) echo $((n * 1000000000000 / 8)) ;;
    bps) echo "$n" ;;
    kbps) echo $((n * 1000)) ;;
    mbps) echo $((n * 1000000)) ;;
    gbps) echo $((n * 1000000000)) ;;
  esac
}

# --- preconditions: a named reason and exit 77 where this machine cannot do it ---

check_tools() {
  [[ $(id -u) == 0 ]] || skip "needs root (network namespaces, bridges and tc)"
  command -v ip > /dev/null || skip "no 'ip' (iproute2)"
  command -v tc > /dev/null || skip "no 'tc' (iproute2)"
  ip netns list > /dev/null 2>&1 || skip "'ip netns' does not work here"
}

# Probes in a throwaway namespace of ours, so that no real interface is touched.
probe_kernel() {
  local probe="$name-probe" ok=1
  ip netns del "$probe" 2> /dev/null || true
  ip netns add "$probe" 2> /dev/null || skip "'ip netns add' fails here (no network namespaces?)"
  ip -n "$probe" link set lo up
  if ! ip netns exec "$probe" tc qdisc add dev lo root tbf rate 1mbit burst 32kb latency 50ms 2> /dev/null; then
    ok=0
  fi
  local netem=1
  ip netns exec "$probe" tc qdisc del dev lo root 2> /dev/null || true
  if [[ -n $latency_ms ]] && ! ip netns exec "$probe" tc qdisc add dev lo root netem delay 1ms 2> /dev/null; then
    netem=0
  fi
  ip netns del "$probe"
  ((ok)) || skip "tc lacks the tbf qdisc (sch_tbf) needed to shape links"
  # Refused, not ignored: a run that asked for latency must not silently get none.
  ((netem)) || die "--latency-ms $latency_ms: this kernel has no netem qdisc (sch_netem), so no link latency can be added"
}

# --- shaping ---

# tbf on one interface (in namespace $2, or the root namespace when empty): burst is
# --burst-ms (5 ms) at the rate, queue 50 ms. A burst lets a message that finds the bucket
# full cross faster than the rate, which a real wire does not (docs/cluster.md). The burst
# is at least 96 KiB because tbf never sends a packet longer than its bucket: one queued
# under a larger burst (before `shape` lowered it) would wait forever, and the host's link
# with it. The largest packet queued here is a 64 KiB TCP GSO send, 68130 bytes as tbf
# counts it (45 segments of 1448 with their 66-byte headers); a 64 KiB floor stranded one
# in 3 of 3 tries (docs/cluster.md).
shape_dev() {
  local dev=$1 ns=$2 r=$3 tcx=(tc)
  [[ -n $ns ]] && tcx=(ip netns exec "$ns" tc)
  if [[ $r == none ]]; then
    "${tcx[@]}" qdisc del dev "$dev" root 2> /dev/null || true
    return
  fi
  local bytes burst
  bytes=$(rate_bytes "$r")
  burst=$(awk -v b="$bytes" -v ms="${burst_ms:-5}" 'BEGIN { printf "%d", b * ms / 1000 }')
  ((burst >= 98304)) || burst=98304
  local delay=()
  [[ -n ${latency_ms:-} ]] && delay=(netem delay "${latency_ms}ms")
  if ((${#delay[@]})); then
    # netem (when the kernel has it) as root, tbf below it.
    "${tcx[@]}" qdisc replace dev "$dev" root handle 1: "${delay[@]}"
    "${tcx[@]}" qdisc replace dev "$dev" parent 1:1 handle 10: tbf rate "$r" burst "$burst" latency 50ms
  elif "${tcx[@]}" qdisc show dev "$dev" root 2> /dev/null | grep '^qdisc tbf' > /dev/null; then
    # A running link is reshaped in place: `replace` would drop the packets queued in the
    # old qdisc, and a job mid-step then saw a rank stall.
    "${tcx[@]}" qdisc change dev "$dev" root tbf rate "$r" burst "$burst" latency 50ms
  else
    "${tcx[@]}" qdisc replace dev "$dev" root tbf rate "$r" burst "$burst" latency 50ms
  fi
}

# Both directions of host i's link: egress on the namespace side (host -> bridge) and on
# the bridge side (bridge -> host).
shape_host() {
  shape_dev eth0 "$(ns_name "$1")" "$2"
  shape_dev "$(port_name "$1")" "" "$2"
}

# --- state ---

record() { echo "$*" >> "$(state_dir)/created"; }

load_state() {
  local dir
  dir=$(state_dir)
  [[ -f $dir/cluster.env ]] || die "no cluster '$name' (no $dir/cluster.env); run 'up' first"
  # shellcheck disable=SC1091
  source "$dir/cluster.env"
}

# HOST as h1, 1, <name>-h1 or its IP address -> index; dies naming a host that is not there.
host_index() {
  local h=$1 i=""
  case $h in
    [0-9] | [0-9][0-9] | [0-9][0-9][0-9]) i=$h ;;
    h[0-9]*) i=${h#h} ;;
    "$name"-h[0-9]*) i=${h#"$name"-h} ;;
    "$(prefix3)".*) i=$((${h##*.} - 10)) ;;
  esac
  if ! [[ $i =~ ^[0-9]+$ ]] || ((10#$i >= hosts)); then
    die "no host '$h' in cluster '$name' (hosts: h0..h$((hosts - 1)))"
  fi
  echo $((10#$i))
}

# --- down: found by name, not only by the record, so that a SIGKILLed up is cleaned too ---

cmd_down() {
  local dir ns link pids i
  dir=$(state_dir)
  # An `ip` command of a killed up may still be running (a SIGKILL ends the script, not its
  # child): let it finish, so that what it makes is found below.
  for ((i = 0; i < 20; i++)); do
    pgrep -f "^ip (netns add|link add|-n) k?$name-" > /dev/null 2>&1 || break
    sleep 0.1
  done
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^$name-(h[0-9]+|probe)\$" || true); do
    # What still runs on a host (a rank or an Open MPI daemon left by a job whose link was
    # cut) would keep the namespace alive after `ip netns del`.
    pids=$(ip netns pids "$ns" 2> /dev/null || true)
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill -KILL $pids 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
  done
  # Deleting a namespace deletes its veth end, and with it the bridge-side peer; these are
  # the links left when up died between creating a pair and moving it.
  for link in $(ip -o link show 2> /dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
    grep -E "^k$name-(b[0-9]+|n[0-9]+|br)\$" || true); do
    ip link del "$link" 2> /dev/null || true
  done
  rm -rf "$dir"
  # The default parent too, once empty (a KIRI_CLUSTER_DIR of the user's is left alone).
  [[ -n ${KIRI_CLUSTER_DIR:-} ]] || rmdir /run/kiri-cluster 2> /dev/null || true
}

# --- up ---

# Refuses a subnet that an interface not of this cluster already has an address in.
check_subnet_free() {
  local used
  used=$(ip -o -4 addr show | awk -v p="$(prefix3)." 'index($4, p) == 1 {print $2}' |
    grep -vE "^k$name-br\$" || true)
  [[ -z $used ]] || die "subnet $subnet is already in use on: $used (choose another --subnet)"
}

write_agent() {
  local dir=$1
  # Open MPI's rsh launcher runs: AGENT [options] HOST CMD...; like ssh, the words of CMD
  # are joined and run by a shell, here inside the host's namespace. Each host needs its
  # own hostname too (a UTS namespace): with one hostname for all hosts, ranks crashed in
  # mca_btl_vader_poll_handle_frag, most likely as vader's shared-memory segments (named
  # by hostname) of two hosts collided.
  cat > "$dir/agent" << EOF
#!/bin/sh
# Written by scripts/cluster.sh for cluster '$name': Open MPI's plm_rsh_agent.
while [ \$# -gt 0 ]; do
  case "\$1" in
    -o | -l | -p | -i | -F) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=\$1
shift
ns=\$(awk -v h="\$host" '\$1 == h || \$2 == h || \$3 == h { print \$3; exit }' "$dir/hosts")
if [ -z "\$ns" ]; then
  echo "cluster agent: no host '\$host' in cluster '$name'" >&2
  exit 255
fi
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$ns" "\$*"
EOF
  chmod +x "$dir/agent"
}

write_state() {
  local dir=$1 i
  : > "$dir/hostfile"
  : > "$dir/hosts"
  for ((i = 0; i < hosts; i++)); do
    echo "$(host_ip "$i") slots=$ranks" >> "$dir/hostfile"
    echo "$(host_ip "$i") h$i $(ns_name "$i")" >> "$dir/hosts"
  done
  write_agent "$dir"
  # pml ob1 and no UCX osc: the btl list below then decides every transport (vader only
  # within a host, tcp over the shaped links). No tree spawn: every daemon is launched
  # from the root namespace, by the agent. One TCP socket per pair of ranks, Open MPI's
  # default: kiri's collectives on a pair fill a link both ways with it (docs/cluster.md).
  # OMPI_MCA_btl_tcp_links=4 opts in to more.
  echo "--mca plm_rsh_agent $dir/agent --mca plm_rsh_no_tree_spawn 1 --mca pml ob1 --mca osc ^ucx" \
    "--mca btl tcp,vader,self --mca btl_tcp_if_include $subnet --mca oob_tcp_if_include $subnet" \
    > "$dir/mpirun.flags"
  # The same as Open MPI's environment variables, for launchers that take no mpirun flags
  # (`kiri launch --hostfile`): `source mpirun.env` first.
  cat > "$dir/mpirun.env" << EOF
export OMPI_MCA_plm_rsh_agent=$dir/agent
export OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_pml=ob1
export OMPI_MCA_osc=^ucx
export OMPI_MCA_btl=tcp,vader,self
export OMPI_MCA_btl_tcp_if_include=$subnet
export OMPI_MCA_oob_tcp_if_include=$subnet
EOF
  cat > "$dir/cluster.env" << EOF
name=$name
subnet=$subnet
hosts=$hosts
ranks=$ranks
rate=$rate
latency_ms=$latency_ms
burst_ms=$burst_ms
EOF
}

make_host() {
  local i=$1 ns port peer
  ns=$(ns_name "$i")
  port=$(port_name "$i")
  peer=$(peer_name "$i")
  record "netns $ns"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  record "veth $port $peer"
  ip link add "$port" type veth peer name "$peer"
  ip link set "$peer" netns "$ns"
  ip -n "$ns" link set "$peer" name eth0
  ip -n "$ns" addr add "$(host_ip "$i")/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip link set "$port" master "$(bridge_name)"
  ip link set "$port" up
  shape_host "$i" "$rate"
}

# up's trap: a failed or interrupted up removes what it half-made (SIGKILL cannot be
# caught: the next up or down removes that by name).
up_cleanup() {
  local rc=$1
  trap - EXIT INT TERM
  echo "cluster.sh: up failed or was interrupted; removing what it made" >&2
  cmd_down
  exit $((rc ? rc : 1))
}

cmd_up() {
  [[ -n $hosts ]] || die "up needs --hosts H"
  [[ -n $ranks ]] || die "up needs --ranks-per-host R"
  [[ -n $rate ]] || die "up needs --link RATE (e.g. 200mbit, 1gbit or none)"
  if ! [[ $hosts =~ ^[0-9]{1,4}$ ]] || ((10#$hosts < 1 || 10#$hosts > 245)); then
    die "bad --hosts '$hosts': expected 1..245 (addresses .10 to .254)"
  fi
  if ! [[ $ranks =~ ^[0-9]{1,4}$ ]] || ((10#$ranks < 1)); then
    die "bad --ranks-per-host '$ranks': expected 1..9999"
  fi
  validate_rate "$rate"
  [[ -z $latency_ms || $latency_ms =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
    die "bad --latency-ms '$latency_ms': expected a number of milliseconds"
  [[ $burst_ms =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
    die "bad --burst-ms '$burst_ms': expected a number of milliseconds"
  hosts=$((10#$hosts))
  ranks=$((10#$ranks))
  probe_kernel
  cmd_down  # a leftover of the same name: up is safe to run again
  check_subnet_free
  trap 'up_cleanup $?' EXIT
  trap 'up_cleanup 130' INT
  trap 'up_cleanup 143' TERM
  local dir br i
  dir=$(state_dir)
  mkdir -p "$dir"
  br=$(bridge_name)
  record "bridge $br"
  ip link add "$br" type bridge forward_delay 0 stp_state 0
  # The root namespace's address on the subnet, so that mpirun (run here) reaches the
  # hosts. Only the connected /24 route: no forwarding, NAT or default route is added.
  ip addr add "$(bridge_ip)/24" dev "$br"
  ip link set "$br" up
  for ((i = 0; i < hosts; i++)); do
    make_host "$i"
  done
  write_state "$dir"
  trap - EXIT INT TERM
  echo "cluster '$name': $hosts hosts x $ranks ranks, links $rate (burst ${burst_ms} ms)${latency_ms:+, latency ${latency_ms} ms}, subnet $subnet"
  echo "  state:    $dir"
  echo "  run:      mpirun --allow-run-as-root \$(cat $dir/mpirun.flags) --hostfile $dir/hostfile -n $((hosts * ranks)) hostname"
  echo "  a shell:  ip netns exec $(ns_name 0) bash"
  echo "  remove:   $0 down --name $name"
}

# --- status, shape, cut, heal ---

link_rate() {
  local out
  out=$("$@" 2> /dev/null | grep -o 'rate [^ ]*' | head -1 || true)
  echo "${out#rate }"
}

cmd_status() {
  load_state
  echo "cluster '$name': subnet $subnet, bridge $(bridge_name) $(bridge_ip), $hosts hosts x $ranks ranks"
  printf '%-5s %-12s %-14s %-12s %-10s %-10s %s\n' host netns address port rate-out rate-in link
  local i ns port out in state
  for ((i = 0; i < hosts; i++)); do
    ns=$(ns_name "$i")
    port=$(port_name "$i")
    out=$(link_rate ip netns exec "$ns" tc qdisc show dev eth0)
    in=$(link_rate tc qdisc show dev "$port")
    state=down
    if ip -o link show "$port" 2> /dev/null | grep 'state UP' > /dev/null &&
      ip -n "$ns" -o link show eth0 2> /dev/null | grep 'state UP' > /dev/null; then
      state=up
    fi
    ip netns list | grep -E "^$ns( |\$)" > /dev/null || state=missing
    printf '%-5s %-12s %-14s %-12s %-10s %-10s %s\n' "h$i" "$ns" "$(host_ip "$i")" "$port" \
      "${out:-none}" "${in:-none}" "$state"
  done
}

cmd_shape() {
  (($# == 2)) || die "usage: shape HOST RATE"
  load_state
  local i
  i=$(host_index "$1")
  validate_rate "$2"
  probe_kernel
  shape_host "$i" "$2"
  echo "h$i: link $2"
}

# cut / heal: the bridge side of a host's link down or up (its tbf shaping stays).
set_link() {
  local state=$1 said=$2
  shift 2
  (($# == 1)) || die "usage: $([[ $state == down ]] && echo cut || echo heal) HOST"
  load_state
  local i
  i=$(host_index "$1")
  ip link set "$(port_name "$i")" "$state"
  if [[ $state == up ]]; then
    # Neighbour entries that failed while the link was down would fail the first connect
    # after it (Open MPI's TCP transport then hangs); the link is usable once both ends are up.
    local ns t
    for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^$name-h[0-9]+\$" || true); do
      ip -n "$ns" neigh flush all 2> /dev/null || true
    done
    for ((t = 0; t < 50; t++)); do
      [[ $(cat "/sys/class/net/$(port_name "$i")/operstate" 2> /dev/null) == up ]] &&
        [[ $(ip netns exec "$name-h$i" cat /sys/class/net/eth0/operstate 2> /dev/null) == up ]] &&
        break
      sleep 0.1
    done
  fi
  echo "h$i: link $said"
}

cmd_cut() { set_link down cut "$@"; }
cmd_heal() { set_link up up "$@"; }

# --- run: up, CMD, down, whatever happens to CMD ---

# run's trap: stop CMD (TERM, then KILL after 5 s) and remove the cluster.
run_cleanup() {
  trap - EXIT INT TERM
  if [[ -n ${child:-} ]] && kill -0 "$child" 2> /dev/null; then
    kill -TERM "$child" 2> /dev/null || true
    local t
    for ((t = 0; t < 50; t++)); do
      kill -0 "$child" 2> /dev/null || break
      sleep 0.1
    done
    kill -KILL "$child" 2> /dev/null || true
  fi
  cmd_down
}

cmd_run() {
  (($#)) || die "run needs -- CMD..."
  cmd_up
  trap 'rc=$?; run_cleanup; exit $rc' EXIT
  trap 'run_cleanup; exit 130' INT
  trap 'run_cleanup; exit 143' TERM
  local dir rc=0
  dir=$(state_dir)
  # In the background with `wait`, since bash runs a trap only after a foreground command
  # ends; stdin is passed on explicitly (a background command's is /dev/null otherwise).
  # shellcheck disable=SC1091
  source "$dir/mpirun.env"  # kiri launch --hostfile $KIRI_CLUSTER_HOSTFILE works as it is
  KIRI_CLUSTER_HOSTFILE=$dir/hostfile KIRI_CLUSTER_MPIRUN_FLAGS=$(cat "$dir/mpirun.flags") \
    "$@" 0<&0 &
  child=$!
  wait "$child" || rc=$?
  child=""
  exit "$rc"
}

main() {
  (($#)) || usage
  local cmd=$1 args=()
  shift
  while (($#)); do
    case $1 in
      --hosts) hosts=${2:?--hosts needs a value}; shift 2 ;;
      --ranks-per-host) ranks=${2:?--ranks-per-host needs a value}; shift 2 ;;
      --link) rate=${2:?--link needs a value}; shift 2 ;;
      --latency-ms) latency_ms=${2:?--latency-ms needs a value}; shift 2 ;;
      --burst-ms) burst_ms=${2:?--burst-ms needs a value}; shift 2 ;;
      --name) name=${2:?--name needs a value}; shift 2 ;;
      --subnet) subnet=${2:?--subnet needs a value}; shift 2 ;;
      --) shift; args+=("$@"); break ;;
      -h | --help) usage ;;
      --*) die "unknown option '$1'" ;;
      *) args+=("$1"); shift ;;
    esac
  done
  validate_name
  validate_subnet
  check_tools
  case $cmd in
    up) (("${#args[@]}" == 0)) || die "up takes no argument '${args[0]}'"; cmd_up ;;
    down) cmd_down; echo "cluster '$name': removed" ;;
    status) cmd_status ;;
    shape) cmd_shape "${args[@]}" ;;
    cut) cmd_cut "${args[@]}" ;;
    heal) cmd_heal "${args[@]}" ;;
    run) cmd_run "${args[@]}" ;;
    *) die "unknown command '$cmd' (up, down, status, shape, cut, heal, run)" ;;
  esac
}

main "$@"
