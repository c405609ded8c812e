#!/usr/bin/env bash
# The demo: 8 processes sell from a stock of 100, first with no lock
# (oversold), then with each lock type (exactly 100 sold; the segmented lock
# sells its own stock over 5 segments, faster), in Python and in C, one row
# per lock type in each. Installs what is missing; with no
# $HILOCK_URL/$REDIS_URL it runs a private redis-server on a free loopback
# port and stops it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/ensure_deps.sh
hilock_ensure_debs
hilock_ensure_venv
PY=$HILOCK_VENV/bin/python

cmake -S . -B build/main -DHILOCK_BUILD_TESTS=ON -DPython_EXECUTABLE="$PY" >/dev/null
cmake --build build/main -j"$(nproc 2>/dev/null || echo 2)" --target inventory >/dev/null
hilock_install_python

run() {
  if [ -n "${HILOCK_URL:-${REDIS_URL:-}}" ]; then "$@"; else "$PY" -m hilock._server "$@"; fi
}
echo "== Python"
(cd examples/python && run "$PY" inventory_demo.py "$@")
echo
echo "== C"
run build/main/examples/inventory
