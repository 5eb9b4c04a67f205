#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets (clang++, ASan + UBSan) in build-fuzz/ and runs
# each for FUZZ_SECONDS (default 60) from its seeds in fuzz/corpus/<target>/. Fails when any
# target crashes, hangs (an input over 10 s), leaks or trips a sanitizer, leaving the input in
# build-fuzz/findings/<target>/ and the fuzzer's log beside it.
#   FUZZ_SECONDS=600 FUZZ_TARGETS="safetensors shard" make fuzz
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD:-$root/build-fuzz}
case $build in /*) ;; *) build=$root/$build ;; esac
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-safetensors config state shard tokens hf_config tokenizer_json deepspeed}
jobs=${JOBS:-2}

start=$(date +%s)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DKIRI_FUZZ=ON ${FUZZ_CMAKE_FLAGS:-} >/dev/null
cmake --build "$build" -j "$jobs" --target $(printf 'fuzz_%s ' $targets)
echo "fuzz: built in $(($(date +%s) - start)) s"

failed=()
for t in $targets; do
  findings=$build/findings/$t
  corpus=$build/corpus/$t  # the seeds plus what the fuzzer keeps; not committed
  mkdir -p "$findings" "$corpus"
  touch "$findings/.start"  # what this run found is newer; earlier runs' findings stay
  dict=()
  [ -f "$root/fuzz/$t.dict" ] && dict=(-dict="$root/fuzz/$t.dict")
  log=$findings/fuzz.log
  echo "fuzz: $t for $seconds s (log $log)"
  # -timeout: one input over 10 s is a hang; -rss_limit_mb: 3 GiB, a 24 GiB machine runs
  # two of these beside the other builds. The outer timeout catches a fuzzer that hangs itself.
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    timeout --kill-after=10 $((seconds + 120)) "$build/fuzz_$t" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=3072 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$findings/" "${dict[@]}" "$corpus" "$root/fuzz/corpus/$t" >"$log" 2>&1; then
    grep -h '^stat::number_of_executed_units' "$log" | sed "s/^/fuzz: $t: /" || true
  else
    echo "fuzz: FAILED: fuzz_$t found a crash, hang, leak or sanitizer report" >&2
    find "$findings" -type f -newer "$findings/.start" ! -name fuzz.log |
      sed "s|^|fuzz:   input: |" >&2
    echo "fuzz:   reproduce: $build/fuzz_$t <input>; the end of $log:" >&2
    tail -n 40 "$log" >&2
    failed+=("$t")
  fi
done
echo "fuzz: done in $(($(date +%s) - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
