#!/usr/bin/env bash
# Build the libFuzzer targets (clang, ASan + UBSan) and fuzz them.
#
#   tests/fuzz/run.sh [TARGET|all] [SECONDS] [libFuzzer options...]
#
# TARGET is url, name or reply (default all); each runs SECONDS (default
# 30) from its seed corpus (tests/fuzz/corpus/<target>, read only) plus
# what earlier runs found (build/fuzz/corpus/<target>). Fails on any crash,
# leak, sanitizer report or input that takes over 10 s; the input is left
# in build/fuzz/artifacts/ (replay: build/fuzz/tests/fuzz/fuzz_<target> FILE).
# Installs clang and libFuzzer (Debian packages) if they are missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/ensure_deps.sh

what=${1:-all}
secs=${2:-30}
shift $(($# > 2 ? 2 : $#))
case "$what" in
  all) targets=(url name reply) ;;
  url|name|reply) targets=("$what") ;;
  *) echo "usage: $0 [url|name|reply|all] [SECONDS] [libFuzzer options...]" >&2; exit 2 ;;
esac

hilock_ensure_fuzz_debs
CC=clang cmake -S . -B build/fuzz -DHILOCK_BUILD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHILOCK_BUILD_TESTS=OFF -DHILOCK_BUILD_PYTHON=OFF -DHILOCK_BUILD_EXAMPLES=OFF \
  -DHILOCK_BUILD_BENCH=OFF >/dev/null
cmake --build build/fuzz -j2 --target "${targets[@]/#/fuzz_}" >/dev/null

status=0
for t in "${targets[@]}"; do
  work=build/fuzz/corpus/$t log=build/fuzz/logs/$t.log
  mkdir -p "$work" build/fuzz/artifacts build/fuzz/logs
  echo "== fuzz_$t for ${secs}s"
  # -timeout: an input that hangs is a failure too; -rss_limit_mb: ASan's
  # quarantine included.
  if ! "build/fuzz/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 \
       -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="build/fuzz/artifacts/$t-" \
       "$@" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    status=1
  fi
  # Any report fails the run, even one that did not stop libFuzzer.
  if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|SUMMARY: " "$log"; then
    status=1
  fi
  if [ $status -ne 0 ]; then
    grep -E -A30 "ERROR:|runtime error:" "$log" | head -60
    echo "fuzz_$t FAILED (log: $log; inputs: build/fuzz/artifacts/)"
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  echo "fuzz_$t: $runs runs, $rate exec/s, no crash, leak or sanitizer report"
done
