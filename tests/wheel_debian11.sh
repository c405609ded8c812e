#!/usr/bin/env bash
# A portable wheel on another system: install it into a Debian 11 root
# (bullseye: glibc 2.31, Python 3.9; made by debootstrap from Debian's own
# packages, with no compiler, no hiredis and no OpenSSL development files)
# and run tests/wheel_smoke.py there (a lock, asyncio, TLS with the CA file
# given, the CLI) against redis-servers of this machine, which the chroot
# reaches on the shared loopback.
#   bash tests/wheel_debian11.sh WHEEL      (as root)
# The wheel's architecture picks the root's: x86_64 runs natively, aarch64
# under qemu-user (qemu-user-static and binfmt_misc; where this machine has
# no binfmt_misc, the script says so and exits 77).
# The root is made once and kept as a tarball in $HILOCK_CACHE (default
# ~/.cache/hilock), keyed by its suite, architecture and package list; each
# run unpacks a fresh copy under build/.
set -euo pipefail
cd "$(dirname "$0")/.."
whl=$(readlink -f "$1")
cache=${HILOCK_CACHE:-$HOME/.cache/hilock}
mirror=${HILOCK_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bullseye
include=python3,python3-venv
case $(basename "$whl") in
  *_x86_64.whl) arch=amd64 ;;
  *_aarch64.whl) arch=arm64 ;;
  *) echo "wheel_debian11: no architecture in $(basename "$whl")" >&2; exit 2 ;;
esac
say() { echo "wheel_debian11: $*"; }
[ "$(id -u)" -eq 0 ] || { echo "wheel_debian11: needs root (debootstrap, chroot)" >&2; exit 2; }

foreign=()
if [ "$arch" != "$(dpkg --print-architecture)" ]; then
  # The arm64 root's programs run under qemu-aarch64, found by the kernel
  # through binfmt_misc.
  [ -e /proc/sys/fs/binfmt_misc/status ] ||
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
  if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
  fi
  if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    say "no binfmt_misc entry for qemu-aarch64 on this machine (the container cannot"
    say "mount or register one): the $arch root cannot run here; skipped"
    exit 77
  fi
  foreign=(--foreign)
fi

key=$(echo "$suite $arch $include $mirror" | md5sum | cut -c1-10)
tarball=$cache/roots/debian11-$arch-$key.tar.gz
if [ ! -f "$tarball" ]; then
  t0=$SECONDS
  say "making the Debian 11 $arch root (debootstrap, once): $tarball"
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/hilock-debian11.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  debootstrap --variant=minbase --arch="$arch" "${foreign[@]}" --include="$include" \
    "$suite" "$tmp/root" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
    { tail -20 "$tmp/debootstrap.log" >&2; exit 1; }
  if [ ${#foreign[@]} -gt 0 ]; then
    cp /usr/bin/qemu-aarch64-static "$tmp/root/usr/bin/"
    chroot "$tmp/root" /debootstrap/debootstrap --second-stage >"$tmp/debootstrap2.log" 2>&1 ||
      { tail -20 "$tmp/debootstrap2.log" >&2; exit 1; }
  fi
  rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
  mkdir -p "$cache/roots"
  tar -C "$tmp/root" -czf "$tarball.part" . && mv "$tarball.part" "$tarball"
  rm -rf "$tmp"
  trap - EXIT
  say "root made in $((SECONDS - t0)) s ($(du -m "$tarball" | cut -f1) MB)"
fi

t0=$SECONDS
root=$PWD/build/debian11-$arch
rm -rf "$root"
mkdir -p "$root"
tar -C "$root" -xzf "$tarball"
say "root unpacked from the cache in $((SECONDS - t0)) s: $root"

# What the root must not have: a C compiler, hiredis, OpenSSL's headers.
for f in usr/bin/cc usr/bin/gcc usr/bin/clang usr/include/openssl usr/include/hiredis; do
  [ ! -e "$root/$f" ] || { echo "wheel_debian11: the root has /$f" >&2; exit 1; }
done
if ls "$root"/usr/lib/*/libhiredis* >/dev/null 2>&1; then
  echo "wheel_debian11: the root has libhiredis" >&2; exit 1
fi

# The host's servers: a plain one and a TLS one (a CA of this run signs
# its certificate; a second CA, not trusted, must be refused).
work=$(mktemp -d "${TMPDIR:-/tmp}/hilock-debian11-run.XXXXXX")
pids=()
cleanup() {
  local p
  for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
  for p in ${pids[@]+"${pids[@]}"}; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
(cd "$work"
 ossl() { openssl "$@" >/dev/null 2>&1; }
 for ca in ca rogue; do
   ossl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
     -keyout $ca.key -out $ca.crt -days 2 -subj "/CN=hilock $ca"
 done
 printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
 ossl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
   -keyout server.key -out server.csr -subj /CN=localhost
 ossl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt \
   -days 2 -extfile server.ext)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
plain=$(port)
tls=$(port)
redis-server --port "$plain" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  --logfile "$work/plain.log" >/dev/null 2>&1 &
pids+=($!)
redis-server --port 0 --tls-port "$tls" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$work" --logfile "$work/tls.log" --tls-cert-file "$work/server.crt" \
  --tls-key-file "$work/server.key" --tls-ca-cert-file "$work/ca.crt" \
  --tls-auth-clients no >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  redis-cli -p "$plain" ping >/dev/null 2>&1 &&
    redis-cli -p "$tls" --tls --cacert "$work/ca.crt" ping >/dev/null 2>&1 && break
  sleep 0.1
done

mkdir -p "$root/check"
cp "$whl" tests/wheel_smoke.py "$work/ca.crt" "$work/rogue.crt" "$root/check/"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
t0=$SECONDS
# In a private mount namespace: /proc and /dev for the chroot, unmounted
# with it.
unshare -m bash -c '
  set -e
  mount -t proc proc "$1/proc"
  mount --rbind /dev "$1/dev"
  exec chroot "$1" /bin/sh -c "
    set -e
    . /etc/os-release; echo \"in \$PRETTY_NAME, \$(ldd --version | head -1), \$(python3 -V)\"
    python3 -m venv /opt/venv
    /opt/venv/bin/python -m pip install -q --no-index --disable-pip-version-check /check/$2
    cd / && /opt/venv/bin/python -I /check/wheel_smoke.py \
      redis://127.0.0.1:$3/0 rediss://127.0.0.1:$4/0 /check/ca.crt /check/rogue.crt"
' _ "$root" "$(basename "$whl")" "$plain" "$tls"
say "smoke test passed in the Debian 11 $arch root in $((SECONDS - t0)) s"
