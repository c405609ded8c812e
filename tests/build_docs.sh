#!/usr/bin/env bash
# Build the documentation site into build/site, with warnings as errors.
#
# Installs nothing: it needs a virtualenv ($HILOCK_VENV, default build/venv)
# with mkdocs and matplotlib, and what building the Python module needs
# (cmake, swig, libhiredis-dev, libssl-dev). It builds the module in
# $HILOCK_DOCS_BUILD (default build/docs; only what changed is rebuilt),
# because the Python API reference is read from the built package. The
# hook docs/hooks.py makes the generated pages and plots during the build.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${HILOCK_VENV:-$PWD/build/venv}
py=$venv/bin/python
build=${HILOCK_DOCS_BUILD:-build/docs}
case $build in /*) ;; *) build=$PWD/$build ;; esac

if ! "$py" -c 'import mkdocs, matplotlib' 2>/dev/null; then
  echo "build_docs.sh: $py lacks mkdocs or matplotlib (pip install mkdocs matplotlib)" >&2
  exit 1
fi

if [ -f "$build/CMakeCache.txt" ]; then
  # An existing build (build/main, say) keeps its other options: only the
  # Python module is switched on.
  cmake -S . -B "$build" -DHILOCK_BUILD_PYTHON=ON >/dev/null
else
  cmake -S . -B "$build" -DHILOCK_BUILD_TESTS=OFF -DHILOCK_BUILD_PYTHON=ON \
    -DHILOCK_BUILD_EXAMPLES=OFF -DHILOCK_BUILD_BENCH=OFF -DPython_EXECUTABLE="$py" >/dev/null
fi
cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" >/dev/null

PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$py" -m mkdocs build --strict --clean -d build/site
