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
# Once more where no hiredis (library, archive, headers) and no C compiler
# can be found, when this machine allows a private mount namespace (root).
hide=()
for f in /usr/lib/*/libhiredis.so* /usr/lib/*/libhiredis.a /usr/bin/cc /usr/bin/gcc; do
  [ -e "$f" ] || continue
  f=$(readlink -f "$f")
  case " ${hide[*]-} " in *" $f "*) ;; *) hide+=("$f") ;; esac
done
if [ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null; then
  echo "again with ${hide[*]-} and /usr/include/hiredis hidden:"
  unshare -m bash -c 'set -e
    for f in "$@"; do mount --bind /dev/null "$f"; done
    [ -d /usr/include/hiredis ] && mount -t tmpfs none /usr/include/hiredis
    cd /tmp && "$0/'"$venv"'/bin/python" -I "$0/tests/wheel_check.py" \
      "$0/CHANGELOG.md" "$0/core/include/hilock/version.h"' "$PWD" ${hide[@]+"${hide[@]}"}
else
  echo "not checked again with hiredis hidden: no private mount namespace here"
fi
