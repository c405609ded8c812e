#!/usr/bin/env bash
# Install what building and testing hilock needs, if it is missing:
# Debian packages (as root, or with sudo) and a virtualenv at build/venv.
# Sourced by tests/run.sh and examples/demo.sh.
set -euo pipefail

hilock_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HILOCK_VENV=${HILOCK_VENV:-$hilock_root/build/venv}

hilock_ensure_debs() {
  # redis-cli: the cluster suites create a local cluster; valgrind: the
  # concurrent-close races run under memcheck too.
  local want=(cmake make gcc pkg-config libhiredis-dev libssl-dev openssl libcmocka-dev swig redis-server
              redis-tools valgrind)
  local py=${PYTHON:-python3}
  if ! command -v "$py" >/dev/null 2>&1; then
    want+=(python3 python3-dev python3-venv)
  elif ! "$py" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
    want+=(python3-dev)
  fi
  if command -v "$py" >/dev/null 2>&1 && ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
    want+=(python3-venv)
  fi
  hilock_apt_install "${want[@]}"
}

# The fuzz targets (tests/fuzz): clang and its libFuzzer and sanitizer
# runtimes.
hilock_ensure_fuzz_debs() {
  hilock_apt_install clang libclang-rt-14-dev
}

# The portable wheels (tools/build_manylinux.sh, tests/wheel_debian11.sh):
# dpkg-source unpacks Debian's source packages of hiredis and OpenSSL,
# debootstrap makes the Debian 11 root; qemu-user-static runs an arm64 one
# (with HILOCK_WHEEL_AARCH64=1).
hilock_ensure_wheel_debs() {
  hilock_apt_install dpkg-dev debootstrap redis-tools openssl
  if [ "${HILOCK_WHEEL_AARCH64:-0}" = 1 ]; then
    hilock_apt_install qemu-user-static binfmt-support
  fi
}

# hilock_apt_install packages...: install those not installed yet.
hilock_apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing Debian packages: ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q >/dev/null
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

# hilock_ensure_valkey: valkey-server, the second server the suites run on.
# Debian 12 has it in bookworm-backports (Valkey 8), added here if absent.
hilock_ensure_valkey() {
  command -v valkey-server >/dev/null 2>&1 && return 0
  local sudo=() codename
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  if ! apt-cache policy valkey-server 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    if [ -n "$codename" ] && [ ! -e /etc/apt/sources.list.d/$codename-backports.sources ]; then
      echo "adding $codename-backports for valkey-server"
      printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$codename" | "${sudo[@]}" tee /etc/apt/sources.list.d/$codename-backports.sources >/dev/null
    fi
    "${sudo[@]}" apt-get update -q >/dev/null
  fi
  echo "installing Debian package: valkey-server"
  "${sudo[@]}" apt-get install -y -q --no-install-recommends -t "$codename-backports" valkey-server \
      >/dev/null 2>&1 ||
    "${sudo[@]}" apt-get install -y -q --no-install-recommends valkey-server >/dev/null
  # The package starts a system service where systemd runs; the suites
  # start their own servers.
  "${sudo[@]}" systemctl disable --now valkey-server >/dev/null 2>&1 || true
}

# hilock_ensure_jdk: a JDK and Maven for the Redisson interoperability
# suite (tests/python/test_interop.py builds tests/interop with Maven, which
# fetches Redisson from Maven Central into ~/.m2 once).
hilock_ensure_jdk() {
  command -v javac >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 && return 0
  local sudo=() jdk=default-jdk-headless
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -q >/dev/null
  apt-cache policy openjdk-17-jdk-headless 2>/dev/null | grep -q 'Candidate: [0-9]' &&
    jdk=openjdk-17-jdk-headless
  echo "installing Debian packages: $jdk maven"
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "$jdk" maven >/dev/null
}

# hilock_ensure_venv [extra pip packages...]
hilock_ensure_venv() {
  local py=${PYTHON:-python3}
  if [ ! -x "$HILOCK_VENV/bin/python" ]; then
    "$py" -m venv "$HILOCK_VENV"
  fi
  # mypy and ruff: the typing and lint checks (tests/run.sh, test_typing.py).
  # mypy and ruff: the typing and lint checks; mkdocs and matplotlib: the
  # documentation site (tests/build_docs.sh).
  # uvloop: the asyncio tests run on its event loop too.
  # prometheus_client: hilock.metrics (test_stats.py).
  # pytest-xdist: tests/run.sh runs the Python suites on two workers.
  # gevent, eventlet: test_green.py runs locks under their monkey-patching.
  # opentelemetry-api and -sdk: hilock.tracing (test_tracing.py, with the
  # SDK's in-memory exporter), at the versions the suite was written for.
  local need=(pytest pytest-xdist redis "mypy>=1.8" "ruff>=0.4" "mkdocs>=1.6,<2" matplotlib
              uvloop prometheus_client gevent eventlet "opentelemetry-api==1.45.2"
              "opentelemetry-sdk==1.45.2" "$@") missing=()
  for p in "${need[@]}"; do
    # pip show takes a bare name: strip a version specifier.
    "$HILOCK_VENV/bin/python" -m pip show -q "${p%%[<>=!~]*}" >/dev/null 2>&1 || missing+=("$p")
  done
  # scikit-build-core: installed, or upgraded when older than 0.10 (the
  # build backend; pyproject.toml's minimum-version, which reads the
  # version from version.h).
  "$HILOCK_VENV/bin/python" -c 'import sys, scikit_build_core as s
sys.exit(tuple(int(x) for x in s.__version__.split(".")[:2]) < (0, 10))' 2>/dev/null ||
    missing+=("scikit-build-core>=0.10")
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing Python packages: ${missing[*]}"
    "$HILOCK_VENV/bin/python" -m pip install -q --disable-pip-version-check "${missing[@]}"
  fi
}

# Build and install the hilock Python package into the virtualenv.
hilock_install_python() {
  "$HILOCK_VENV/bin/python" -m pip install -q --disable-pip-version-check \
    --no-build-isolation --force-reinstall --no-deps "$hilock_root"
}
