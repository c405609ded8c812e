#!/usr/bin/env bash
# Fuzz the Python layer's arguments with atheris (tests/fuzz/fuzz_python.py).
#
#   tests/fuzz/run_python.sh [SECONDS] [libFuzzer options...]
#
# Makes a virtualenv at build/atheris-venv (PYTHON, default python3, with
# atheris from PyPI), builds the extension for it in build/pyfuzz (unless
# HILOCK_PYFUZZ_BUILD names a build tree that has it), starts a
# redis-server of its own on a free loopback port (stopped at the end) and
# fuzzes for SECONDS (default 30). Fails on a crash of the interpreter or
# an exception other than hilock.LockError, TypeError or ValueError; the
# input is left in build/pyfuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-30}
shift $(($# > 1 ? 1 : $#))
py=${PYTHON:-python3}
venv=build/atheris-venv

if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -c 'import atheris' 2>/dev/null ||
  "$venv/bin/python" -m pip install -q --disable-pip-version-check atheris
# HILOCK_PYFUZZ_BUILD: a build tree whose python/ already has the extension
# for this interpreter (tests/run.sh passes its build/typing).
pybuild=${HILOCK_PYFUZZ_BUILD:-build/pyfuzz}
if [ -z "${HILOCK_PYFUZZ_BUILD:-}" ]; then
  cmake -S . -B build/pyfuzz -DHILOCK_BUILD_PYTHON=ON -DHILOCK_BUILD_TESTS=OFF \
    -DHILOCK_BUILD_EXAMPLES=OFF -DHILOCK_BUILD_BENCH=OFF \
    -DPython_EXECUTABLE="$PWD/$venv/bin/python" >/dev/null
  cmake --build build/pyfuzz -j2 >/dev/null
fi

port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p build/pyfuzz/redis build/pyfuzz/artifacts build/pyfuzz/corpus
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$PWD/build/pyfuzz/redis" --logfile redis.log --daemonize no >/dev/null &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.05
done

echo "== fuzz_python (atheris) for ${secs}s"
log=build/pyfuzz/fuzz_python.log
if ! HILOCK_URL="redis://127.0.0.1:$port/0" PYTHONPATH="$PWD/$pybuild/python" \
     "$venv/bin/python" tests/fuzz/fuzz_python.py -max_total_time="$secs" -timeout=20 \
     -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=build/pyfuzz/artifacts/ \
     "$@" build/pyfuzz/corpus >"$log" 2>&1; then
  grep -E -B5 -A40 "Uncaught Python exception|ERROR:|Traceback" "$log" | head -80
  echo "fuzz_python FAILED (log: $log; inputs: build/pyfuzz/artifacts/)"
  exit 1
fi
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
echo "fuzz_python: $runs runs, $rate exec/s, no crash and no unexpected exception"
