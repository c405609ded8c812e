#!/usr/bin/env bash
# The binary wheel: build it (tools/build_wheel.sh), install it into a fresh
# virtualenv with nothing else in it, and run tests/wheel_check.py there
# against a private redis-server: the extension loads no libhiredis, a lock
# is taken and released, and the version agrees everywhere it is written.
# $PYTHON: the interpreter to build with and to base the virtualenv on.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-build/venv/bin/python}
PYTHON=$py bash tools/build_wheel.sh build/dist
whl=$(ls build/dist/hilock-*.whl)
venv=build/wheel-venv
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-index --no-deps "$whl"
# Outside the source tree, with no PYTHONPATH (-I): only the installed
# package can be imported.
(cd /tmp && "$OLDPWD/$venv/bin/python" -I "$OLDPWD/tests/wheel_check.py" \
  "$OLDPWD/CHANGELOG.md" "$OLDPWD/core/include/hilock/version.h")
