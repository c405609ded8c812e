#!/usr/bin/env bash
# The portable binary wheel: build it (tools/build_manylinux.sh: manylinux
# x86_64, abi3), install it into a fresh virtualenv with nothing else in
# it, and run tests/wheel_check.py there against a private redis-server:
# the extension loads no libhiredis, a lock is taken and released, and the
# version agrees everywhere it is written. Then install it into a Debian 11
# root and run tests/wheel_smoke.py there (tests/wheel_debian11.sh).
# $PYTHON: the interpreter to base the virtualenv on.
# HILOCK_WHEEL_AARCH64=1: the aarch64 wheel too, checked in an arm64
# Debian 11 root under qemu-user where this machine allows it.
# What is slow the first time (the tools, OpenSSL's build, the Debian 11
# root) is kept in $HILOCK_CACHE (default ~/.cache/hilock).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/ensure_deps.sh
hilock_ensure_wheel_debs
py=${PYTHON:-build/venv/bin/python}
arches=(x86_64)
[ "${HILOCK_WHEEL_AARCH64:-0}" = 1 ] && arches+=(aarch64)
t0=$SECONDS
rm -f build/dist/hilock-*.whl
bash tools/build_manylinux.sh build/dist "${arches[@]}"
echo "wheels built in $((SECONDS - t0)) s"
whl=$(ls build/dist/hilock-*_x86_64.whl)
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

for w in build/dist/hilock-*.whl; do
  t0=$SECONDS
  rc=0
  bash tests/wheel_debian11.sh "$w" || rc=$?
  if [ "$rc" -eq 77 ]; then
    echo "$(basename "$w"): not run in Debian 11 here (see above)"
  elif [ "$rc" -ne 0 ]; then
    exit "$rc"
  fi
  echo "Debian 11 check of $(basename "$w") in $((SECONDS - t0)) s"
done
