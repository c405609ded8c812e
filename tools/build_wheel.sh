#!/usr/bin/env bash
# Build a binary wheel of hilock that installs without hiredis or a compiler:
#   bash tools/build_wheel.sh [OUTDIR]        (default: dist/)
# hiredis is linked into the extension from libhiredis.a (libhiredis-dev);
# the build fails rather than fall back to the shared libhiredis. At run
# time the wheel needs what `readelf -d` lists below: glibc, and OpenSSL 3
# (libssl.so.3, libcrypto.so.3: the libssl3 package of Debian 12 and
# Ubuntu 22.04 and later). The CMake build tree is kept in build/wheel, so a
# second build only recompiles what changed. $PYTHON picks the interpreter
# (default: build/venv/bin/python, else python3); the wheel is for its
# CPython version.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x build/venv/bin/python ]; then py=build/venv/bin/python; else py=python3; fi
fi
# Build in this environment when it has the backend (no download); else pip
# fetches it into an isolated one.
isolation=()
"$py" -c 'import scikit_build_core' 2>/dev/null && isolation=(--no-build-isolation)
mkdir -p "$out"
rm -f "$out"/hilock-*.whl
"$py" -m pip wheel -q --disable-pip-version-check --no-deps "${isolation[@]}" -w "$out" \
  -C build-dir=build/wheel -C cmake.define.HILOCK_STATIC_HIREDIS=ON .
whl=$(ls "$out"/hilock-*.whl)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m zipfile -e "$whl" "$tmp"
ext=$(ls "$tmp"/hilock/_hilock*.so)
needed=$(readelf -d "$ext" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
glibc=$(objdump -T "$ext" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
echo "wheel: $whl"
echo "extension needs: ${needed}(symbols up to $glibc)"
case " $needed " in
  *libhiredis*) echo "error: the extension still needs the shared libhiredis" >&2; exit 1 ;;
esac
