"""Run by tests/wheel_debian11.sh inside a Debian 11 root, with the Python
of a virtualenv that has only the portable hilock wheel installed:

    python -I wheel_smoke.py REDIS_URL REDISS_URL CA_FILE ROGUE_CA_FILE

The servers are the host's. Checks, printing each: the extension needs
neither libhiredis nor OpenSSL's shared libraries; a lock is taken and
released; the same through hilock.asyncio; over TLS, verifying the
server's certificate with CA_FILE (and refusing it with ROGUE_CA_FILE);
the hilock command runs a command under a lock and shows its status over
TLS. Only the standard library and hilock: the root has nothing else.
Exits non-zero on the first failed check.
"""
import asyncio
import os
import subprocess
import sys
import time


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        raise SystemExit(1)


def main():
    url, tls_url, ca, rogue = sys.argv[1:5]
    t0 = time.perf_counter()
    import hilock
    import hilock.asyncio
    from hilock import _hilock
    took = time.perf_counter() - t0
    check(True, f"import hilock, hilock.asyncio: {took * 1e3:.0f} ms "
                f"(Python {sys.version.split()[0]})")

    ldd = subprocess.run(["ldd", _hilock.__file__], stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    for line in ldd.strip().splitlines():
        print("     " + line.strip())
    check(not any(n in ldd for n in ("libhiredis", "libssl", "libcrypto")),
          f"{os.path.basename(_hilock.__file__)} needs no libhiredis, libssl or libcrypto "
          "(ldd above)")

    with hilock.Client(url) as client:
        lk = client.lock("smoke", ttl=10.0)
        check(lk.acquire(timeout=5.0), f"lock taken on {url} (fence {lk.fence})")
        lk.release()
        check(not lk.owned(), "lock released")

    async def in_asyncio():
        client = hilock.asyncio.Client(url)
        try:
            async with client.lock("smoke-async", ttl=10.0, timeout=5.0) as alk:
                fence = alk.fence
            return fence
        finally:
            await client.close()
    check(asyncio.run(in_asyncio()) > 0, "asyncio: lock taken and released")

    with hilock.Client(tls_url, ssl_ca_certs=ca) as client:
        lk = client.lock("smoke-tls", ttl=10.0)
        check(lk.acquire(timeout=5.0),
              f"TLS: the server's certificate verified with {ca}, lock taken")
        lk.release()
    try:
        with hilock.Client(tls_url, ssl_ca_certs=rogue, connect_timeout=2.0) as client:
            client.lock("smoke-tls", ttl=10.0).acquire(timeout=2.0)
        refused = ""
    except hilock.LockError as e:
        refused = f"{type(e).__name__}: {e}"
    check(bool(refused), f"TLS: refused with a CA that did not sign it ({refused})")

    cli = os.path.join(os.path.dirname(sys.executable), "hilock")
    run = subprocess.run([cli, "--url", url, "run", "smoke-cli", "--", "sh", "-c",
                          'test -n "$HILOCK_FENCE"'])
    check(run.returncode == 0, "hilock run smoke-cli -- sh -c ...: exit 0")
    status = subprocess.run([cli, "--url", tls_url, "--tls-ca-certs", ca, "status",
                             "smoke-tls"], stdout=subprocess.PIPE,
                            text=True)
    print(status.stdout.rstrip())
    check(status.returncode == 0 and "smoke-tls" in status.stdout,
          f"hilock status over TLS: exit {status.returncode}")


if __name__ == "__main__":
    main()
