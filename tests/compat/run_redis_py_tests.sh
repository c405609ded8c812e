#!/usr/bin/env bash
# redis-py's own lock tests against hilock.compat.redis: tests/test_lock.py
# (and tests/test_asyncio/test_lock.py when pytest-asyncio is installed)
# from redis-py's sdist, unmodified; only their lock class is rebound
# (redis_py_plugin.py). The tests listed in redis_py_refused.txt are
# deselected: hilock fails them on purpose (docs/migration.md says why).
#
# The sdist is pinned to the installed redis package's version (the tests
# of one release against another's library would test the mismatch) and
# downloaded once into $HILOCK_CACHE (default ~/.cache/hilock). A private
# redis-server on a free port, stopped by PID on exit.
#
#   PY=python3 tests/compat/run_redis_py_tests.sh [pytest args]
# (PY must import hilock and redis; PYTHONPATH=build/py/python for a
# development build.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-python3}
cache=${HILOCK_CACHE:-$HOME/.cache/hilock}
version=$("$PY" -c 'import redis; print(redis.__version__)')
tests=$cache/redis-py-tests-$version
if [ ! -f "$tests/tests/test_lock.py" ]; then
  mkdir -p "$cache"
  if [ ! -f "$cache/redis-$version.tar.gz" ]; then
    "$PY" -m pip download -q --no-deps --no-binary :all: "redis==$version" -d "$cache"
  fi
  rm -rf "$tests.tmp" && mkdir -p "$tests.tmp"
  # Only the tests and their pytest settings (asyncio_mode = "auto"): the
  # sdist's redis package must not shadow the installed one.
  tar xzf "$cache/redis-$version.tar.gz" -C "$tests.tmp" --strip-components=1 \
    "redis-$version/tests" "redis-$version/pyproject.toml"
  mv "$tests.tmp" "$tests"
fi

files=(tests/test_lock.py)
if "$PY" -c 'import pytest_asyncio' 2>/dev/null; then
  files+=(tests/test_asyncio/test_lock.py)
else
  echo "pytest-asyncio is not installed: tests/test_asyncio/test_lock.py not run" >&2
fi
deselect=()
while read -r id; do
  deselect+=(--deselect "$id")
done < <(grep -v '^#' "$here/redis_py_refused.txt" | grep -v '^[[:space:]]*$')

port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
  >"$tests/redis-server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.05
done

cd "$tests"
PYTHONPATH="$here:$tests${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest "${files[@]}" \
  -p redis_py_plugin -p no:cacheprovider -q -p no:warnings \
  --redis-url="redis://127.0.0.1:$port/0" "${deselect[@]}" "$@"
