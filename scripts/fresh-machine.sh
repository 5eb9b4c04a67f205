#!/usr/bin/env bash
# The fresh-machine check: does the README's first command work on a new Debian 12 machine?
# It makes a clean bookworm root with `debootstrap --variant=minbase`, adds only `make` (a new
# machine has make), clones this checkout's committed HEAD into it at /root/work/main (so
# uncommitted files are not used) with a copy of ../shared at /root/work/shared, and runs
# `make demo` there (chroot, as root, no stdin). It exits 0 only when the command passed, so a
# package the build needs that scripts/bootstrap.sh does not install fails it. Needs root.
#
#   bash scripts/fresh-machine.sh [--command CMD] [--root DIR] [--keep] [--timeout MIN]
#                                 [--ccache-from DIR]
#
#   --command CMD  run CMD (bash -c, in /root/work/main) instead of `make demo`, e.g. "make test"
#   --root DIR     make the root in DIR (must not exist, or be empty); default: a new
#                  /var/tmp/kiri-fresh-machine.XXXXXX
#   --keep         leave the root (unmounted) afterwards for debugging: chroot DIR bash
#   --timeout MIN  stop the command after MIN minutes and fail (default 30: CI's 45 minutes
#                  less make test's)
#   --ccache-from DIR  let the root's ccache read (never write) this machine's cache DIR,
#                  mounted read-only, so that objects `make test` compiled from the same
#                  sources are not compiled again. It cannot hide a missing package: a hit
#                  needs every header the object was compiled from, unchanged, at its path in
#                  the root (otherwise ccache runs the compiler, which fails as it would
#                  anyway), and configure and the link run for real (docs/ci.md).
#
# Phases, each timed: host (debootstrap on the host, if missing), base (debootstrap, or the
# cached base), setup (apt sources, mounts, apt-get install make), clone, command.
# The base is cached as a tarball of the fresh minbase root, one per suite and architecture,
# in $KIRI_FRESH_CACHE (default /var/cache/kiri-fresh-machine); delete it to download again.
# Everything after the base runs fresh each time. The Debian mirror comes from this machine's
# apt sources, and its apt.conf.d files that say how to reach it (Acquire::http::Proxy,
# Check-Valid-Until and the like) are copied into the root. The command's output goes to a
# log outside the root, each line stamped with the seconds since the command started; on
# failure its last lines are printed.
#
# Everything that mounts (debootstrap, the chroot) runs in its own mount and PID namespace
# (unshare), so its mounts and processes end with it, even when this script is killed; the
# root is removed only when nothing is mounted under it, with rm --one-file-system.
set -euo pipefail

suite=bookworm
command="make demo"
root=""
keep=0
timeout_min=30
ccache_from=""
cache=${KIRI_FRESH_CACHE:-/var/cache/kiri-fresh-machine}

die() { echo "fresh-machine: error: $*" >&2; exit 2; }
say() { echo "fresh-machine: $*"; }
mounts_under() { findmnt -rn -o TARGET | awk -v r="$1" '$0 == r || index($0, r "/") == 1'; }

# --- the inner part: runs inside `unshare --mount --pid --fork`, as PID 1 of its namespace ---
if [ "${KIRI_FRESH_INNER:-}" = 1 ]; then
  root=$KIRI_FRESH_ROOT
  phase_start=$(date +%s)
  phase_end() {  # phase_end NAME [NOTE]
    local now; now=$(date +%s)
    echo "$1 $((now - phase_start))" >> "$KIRI_FRESH_TIMES"
    say "phase $1: $((now - phase_start)) s${2:+ ($2)}"
    phase_start=$now
  }

  # base: the minbase root, from the cache or from debootstrap.
  tarball="$cache/$suite-$KIRI_FRESH_ARCH-minbase.tar"
  # The root's / as on a machine: mktemp's 0700 would lock out apt's _apt user.
  chmod 755 "$root"
  if [ -f "$tarball" ]; then
    tar -C "$root" --numeric-owner -xpf "$tarball"
    chmod 755 "$root"
    phase_end base "cached: $tarball"
  else
    say "debootstrap --variant=minbase $suite from $KIRI_FRESH_MIRROR"
    debootstrap --variant=minbase --arch="$KIRI_FRESH_ARCH" "$suite" "$root" "$KIRI_FRESH_MIRROR" \
      >> "$KIRI_FRESH_LOG" 2>&1 || { tail -n 30 "$KIRI_FRESH_LOG" >&2; die "debootstrap failed (log: $KIRI_FRESH_LOG)"; }
    # debootstrap unmounts what it mounted; the cache must hold the bare root only.
    [ -z "$(mounts_under "$root")" ] || die "mounts left under $root after debootstrap"
    rm -f "$root"/var/cache/apt/archives/*.deb
    mkdir -p "$cache"
    tar -C "$root" --numeric-owner -cf "$tarball.tmp.$$" .
    mv "$tarball.tmp.$$" "$tarball"
    phase_end base "debootstrap, cached as $tarball"
  fi

  # setup: what a new machine has besides the base: apt sources, a resolver, make.
  printf '%s\n' "$KIRI_FRESH_SOURCES" > "$root/etc/apt/sources.list"
  for f in $KIRI_FRESH_APT_CONF; do cp "$f" "$root/etc/apt/apt.conf.d/"; done
  rm -f "$root/etc/resolv.conf"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  # A login's environment (nothing of this script's), no stdin.
  login_env=(/usr/bin/env -i HOME=/root USER=root LOGNAME=root TERM=dumb
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin ${CI:+CI=$CI})
  if [ -n "${KIRI_FRESH_CCACHE:-}" ]; then
    # Read-only twice over: the mount, and ccache's own read-only mode (no results, no
    # statistics written; its temporary files in the root's /tmp).
    mkdir -p "$root/var/cache/kiri-host-ccache"
    mount --bind "$KIRI_FRESH_CCACHE" "$root/var/cache/kiri-host-ccache"
    mount -o remount,bind,ro "$root/var/cache/kiri-host-ccache"
    login_env+=(CCACHE_DIR=/var/cache/kiri-host-ccache CCACHE_READONLY=1 CCACHE_NOSTATS=1
      CCACHE_TEMPDIR=/tmp)
    # ccache hashes the locale variables (they change the compiler's messages): the host's,
    # those its objects were compiled under.
    for v in LANG LC_ALL LC_CTYPE LC_MESSAGES; do
      [ -z "${!v:-}" ] || login_env+=("$v=${!v}")
    done
  fi
  in_root() { chroot "$root" "${login_env[@]}" "$@" < /dev/null; }
  { in_root apt-get update -qq &&
    in_root DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make; } \
    >> "$KIRI_FRESH_LOG" 2>&1 || { tail -n 30 "$KIRI_FRESH_LOG" >&2; die "apt-get install make in the root failed (log: $KIRI_FRESH_LOG)"; }
  phase_end setup "$(in_root make --version | head -n 1)"

  # clone: the committed HEAD only, and a copy of ../shared beside it (read-only in CI).
  mkdir -p "$root/root/work"
  git -c safe.directory="$KIRI_FRESH_REPO" clone --quiet --no-hardlinks "$KIRI_FRESH_REPO" "$root/root/work/main"
  git -C "$root/root/work/main" -c advice.detachedHead=false checkout --quiet --detach "$KIRI_FRESH_HEAD"
  if [ -d "$KIRI_FRESH_REPO/../shared" ]; then
    cp -r --preserve=mode,timestamps "$KIRI_FRESH_REPO/../shared" "$root/root/work/shared"
  fi
  phase_end clone "$KIRI_FRESH_HEAD"

  # command: the README's first command, to the end.
  say "running '$KIRI_FRESH_COMMAND' in the root (log: $KIRI_FRESH_LOG)"
  echo "==== $KIRI_FRESH_COMMAND (seconds since it started, output)" >> "$KIRI_FRESH_LOG"
  # Each line stamped with the time since the command started, so that the log shows
  # where the time went (bootstrap's installs, the build, the demo).
  stamp() {
    local t0=$SECONDS line
    while IFS= read -r line || [ -n "$line" ]; do printf '%5d %s\n' $((SECONDS - t0)) "$line"; done
  }
  set +e
  timeout -k 30 "${KIRI_FRESH_TIMEOUT}m" \
    chroot "$root" "${login_env[@]}" /bin/bash -c "cd /root/work/main && $KIRI_FRESH_COMMAND" < /dev/null 2>&1 |
    stamp >> "$KIRI_FRESH_LOG"
  rc=${PIPESTATUS[0]}
  set -e
  phase_end command "exit $rc"
  exit "$rc"
fi

# --- the outer part: options, the host, the mirror, then the inner part, then cleanup ---
# (one function, read whole before it runs, so that editing this file during a run is safe)
main() {
  while [ $# -gt 0 ]; do
    case $1 in
      --keep) keep=1 ;;
      --command) [ $# -ge 2 ] || die "--command needs a command"; command=$2; shift ;;
      --root) [ $# -ge 2 ] || die "--root needs a folder"; root=$2; shift ;;
      --timeout)
        [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--timeout needs a whole number of minutes"
        timeout_min=$2; shift ;;
      --ccache-from)
        [ $# -ge 2 ] && [ -d "$2" ] || die "--ccache-from needs an existing folder (a ccache cache_dir)"
        ccache_from=$(cd "$2" && pwd -P); shift ;;
      -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
      *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
  done
  [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mounts)"
  [ -n "$command" ] || die "--command is empty"
  repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel) || die "$(dirname "$0")/.. is not a git checkout"
  head=$(git -C "$repo" rev-parse HEAD)
  if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
    say "note: $repo has uncommitted changes; the check uses the committed HEAD ($head) only"
  fi

  # The Debian entries of this machine's apt sources, one "URI SUITE COMPONENTS..." a line
  # (one-line *.list files and deb822 *.sources files; disabled and deb-src entries skipped).
  apt_entries() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [ -f "$f" ] || continue
      awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                         line = $i; for (j = i + 1; j <= NF && $j !~ /^#/; j++) line = line " " $j; print line }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -f "$f" ] || continue
      awk 'function flush() { if (types ~ /(^| )deb( |$)/ && tolower(enabled) != "no")
                                { n = split(uris, u, " "); m = split(suites, s, " ")
                                  for (a = 1; a <= n; a++) for (b = 1; b <= m; b++) print u[a], s[b], comps }
                              types = uris = suites = comps = ""; enabled = "yes" }
           BEGIN { enabled = "yes" }
           /^#/ { next }
           /^[ \t]*$/ { flush(); next }
           /^[ \t]/ { next }
           { key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
             if (key == "types") types = val; else if (key == "uris") uris = val
             else if (key == "suites") suites = val; else if (key == "components") comps = val
             else if (key == "enabled") enabled = val }
           END { flush() }' "$f"
    done
  }
  entries=$(apt_entries | awk -v s="$suite" '$1 ~ /^(https?|ftp|file):/ && ($2 == s || $2 == s "-updates" || $2 == s "-security")')
  mirror=$(awk -v s="$suite" '$2 == s { print $1; exit }' <<< "$entries")
  [ -n "$mirror" ] || die "no '$suite' entry in this machine's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d/) to take the Debian mirror from"
  sources=$(awk '{ print "deb " $0 }' <<< "$entries")
  apt_conf=$(grep -lE 'Acquire::(https?|ftp|Check-Valid-Until|Check-Date|Retries|ForceIPv[46])' /etc/apt/apt.conf.d/* 2>/dev/null |
    tr '\n' ' ' || true)
  arch=$(dpkg --print-architecture)

  if [ -n "$root" ]; then
    if [ -e "$root" ]; then
      [ -d "$root" ] && [ -z "$(ls -A "$root")" ] || die "--root $root exists and is not an empty folder"
    fi
    mkdir -p "$root"
    root=$(cd "$root" && pwd -P)
    [ "$root" != / ] || die "--root / is not allowed"
  fi

  start=$(date +%s)
  times=$(mktemp /tmp/kiri-fresh-machine.times.XXXXXX)
  log=$(mktemp /var/tmp/kiri-fresh-machine.XXXXXX.log)
  inner=""
  cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "$rc" = 130 ] || [ "$rc" = 143 ]; then
      echo "fresh-machine: FAILED: interrupted; stopping the root's processes and removing it" >&2
    fi
    # unshare ignores SIGTERM; SIGKILL takes its namespace (processes and mounts) with it.
    if [ -n "$inner" ] && kill -0 "$inner" 2> /dev/null; then
      kill -KILL "$inner" 2> /dev/null || true
      wait "$inner" 2> /dev/null || true
    fi
    if [ -z "$root" ]; then
      :
    elif [ -n "$(mounts_under "$root")" ]; then
      echo "fresh-machine: error: still mounted under $root, not removing it:" >&2
      mounts_under "$root" >&2
      rc=1
    elif [ "$keep" = 1 ]; then
      say "kept the root: $root (chroot $root bash)"
    else
      local t0; t0=$(date +%s)
      rm -rf --one-file-system "$root"
      say "phase cleanup: $(($(date +%s) - t0)) s"
    fi
    rm -f "$times"
    exit "$rc"
  }
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  # host: debootstrap, only when the base is not cached.
  if [ ! -f "$cache/$suite-$arch-minbase.tar" ] && ! command -v debootstrap > /dev/null; then
    say "installing debootstrap on the host"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends debootstrap > /dev/null
  fi
  echo "host $(($(date +%s) - start))" >> "$times"
  say "phase host: $(($(date +%s) - start)) s"

  [ -n "$root" ] || root=$(mktemp -d /var/tmp/kiri-fresh-machine.XXXXXX)

  say "root $root, $suite/$arch, command '$command', HEAD $head${ccache_from:+, reading ccache $ccache_from}"
  export KIRI_FRESH_INNER=1 KIRI_FRESH_ROOT=$root KIRI_FRESH_ARCH=$arch KIRI_FRESH_MIRROR=$mirror \
    KIRI_FRESH_SOURCES=$sources KIRI_FRESH_APT_CONF=$apt_conf KIRI_FRESH_REPO=$repo \
    KIRI_FRESH_HEAD=$head KIRI_FRESH_COMMAND=$command KIRI_FRESH_TIMEOUT=$timeout_min \
    KIRI_FRESH_LOG=$log KIRI_FRESH_TIMES=$times KIRI_FRESH_CACHE=$cache KIRI_FRESH_CCACHE=$ccache_from
  # In the background, so that a signal reaches the traps at once rather than after the wait.
  unshare --mount --propagation private --pid --fork --kill-child bash "$0" < /dev/null &
  inner=$!
  rc=0
  wait "$inner" || rc=$?
  inner=""

  total=$(($(date +%s) - start))
  say "times (s): $(awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }' "$times"), total $total"
  if [ "$rc" = 0 ]; then
    tail -n 8 "$log"
    say "PASSED: '$command' in a fresh $suite root (log: $log)"
  else
    if [ -s "$log" ]; then
      echo "---- last 60 lines of $log ----" >&2
      tail -n 60 "$log" >&2
      echo "----" >&2
    fi
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      echo "fresh-machine: '$command' ran past --timeout $timeout_min min or was killed" >&2
    fi
    echo "fresh-machine: FAILED: '$command' in a fresh $suite root exited $rc (log: $log)" >&2
    exit 1
  fi
}
main "$@"
