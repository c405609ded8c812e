"""atheris target: hostile arguments to the Python layer.

    tests/fuzz/run_python.sh [SECONDS]

Client(...) with generated URLs (every scheme; user, password, database,
query and path made of fuzz input, the host always this machine) and
options of any type and value; every lock factory of a connected client
with generated names, TTLs, timeouts, permits, segments and renewal
settings, then a non-blocking acquire, extend and release; a FencedStore's
options and every call with generated keys, values, fences and TTLs.

Whatever the arguments, a call must return or raise hilock.LockError (its
subclasses), TypeError or ValueError: anything else (SystemError,
OverflowError, a crash of the interpreter) is a failure, reported with the
input that caused it. Needs HILOCK_URL: a redis-server of its own (run.sh
starts one).
"""
from __future__ import annotations

import math
import os
import sys
from typing import Any, Callable, List

import atheris

with atheris.instrument_imports():
    import hilock

ALLOWED = (hilock.LockError, TypeError, ValueError)
URL = os.environ.get("HILOCK_URL", "")
PORT = URL.rsplit(":", 1)[-1].split("/", 1)[0] if URL else "6379"
FLOATS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-9, 0.0005, 0.001, 0.0015, 1e300,
          2.0 ** 40 / 1000, 2.0 ** 40 / 1000 + 1, 2.0 ** 63, -1.0, 1e-320]
INTS = [0, 1, -1, 2 ** 31, 2 ** 32, 2 ** 40, 2 ** 40 + 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64,
        -(2 ** 63), -(2 ** 63) - 1, 10 ** 100, 1024, 1025, 65535, 65536, 100000, 100001]


def value(fdp: atheris.FuzzedDataProvider) -> Any:
    """An argument of any type."""
    kind = fdp.ConsumeIntInRange(0, 13)
    if kind == 0:
        return fdp.ConsumeInt(8)
    if kind == 1:
        return fdp.ConsumeRegularFloat()
    if kind == 2:
        return fdp.PickValueInList(FLOATS)
    if kind == 3:
        return fdp.PickValueInList(INTS)
    if kind == 4:
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 64))
    if kind == 5:
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
    if kind == 6:
        return None
    if kind == 7:
        return fdp.ConsumeBool()
    if kind == 8:
        return bytearray(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 16)))
    if kind == 9:
        return memoryview(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 16)))
    if kind == 10:
        return [value(fdp) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    if kind == 11:
        return object()
    if kind == 12:
        return fdp.ConsumeUnicode(1) * fdp.ConsumeIntInRange(0, 1100)
    return fdp.ConsumeFloatInRange(0.0, 5.0)


def name(fdp: atheris.FuzzedDataProvider) -> Any:
    """Mostly a name that passes the checks, on its own keys."""
    if fdp.ConsumeIntInRange(0, 3) == 0:
        return value(fdp)
    return "fz:" + fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 24))


def short_wait(v: Any) -> Any:
    """Keep a valid wait short (a generated one could be endless); keep
    every invalid one as it is."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and not (
            isinstance(v, float) and math.isnan(v)) and v > 0.01:
        return 0.01
    return v


def url(fdp: atheris.FuzzedDataProvider) -> str:
    scheme = fdp.PickValueInList(["redis", "rediss", "unix", "redis+cluster",
                                  "rediss+cluster", "redis+sentinel", "rediss+sentinel",
                                  fdp.ConsumeUnicode(8)])
    part = lambda: fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 24))  # noqa: E731
    if scheme == "unix":
        return f"unix://{part()}?{part()}"
    auth = f"{part()}:{part()}@" if fdp.ConsumeBool() else ""
    port = PORT if fdp.ConsumeBool() else part()
    return f"{scheme}://{auth}127.0.0.1:{port}/{part()}?{part()}"


OPTIONS = ["connect_timeout", "command_timeout", "reconnect", "wait_replicas", "wait_timeout",
           "shared_waiting", "direct_waiters", "max_connections", "ssl_ca_certs", "ssl_ca_path",
           "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_cert_reqs", "ssl_check_hostname",
           "ssl_server_name"]


def options(fdp: atheris.FuzzedDataProvider) -> dict[str, Any]:
    opts = {k: value(fdp) for k in OPTIONS if fdp.ConsumeIntInRange(0, 3) == 0}
    # A connection attempt must stay short: keep a valid timeout small.
    for k in ("connect_timeout", "command_timeout", "wait_timeout"):
        if k in opts:
            opts[k] = short_wait(opts[k])
    return opts


def new_client(fdp: atheris.FuzzedDataProvider) -> None:
    u = url(fdp) if fdp.ConsumeIntInRange(0, 4) else value(fdp)
    c = hilock.Client(u, **options(fdp))
    c.close()


def renewal(fdp: atheris.FuzzedDataProvider) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    if fdp.ConsumeBool():
        kw["auto_renew"] = value(fdp)
    if fdp.ConsumeBool():
        kw["max_hold"] = value(fdp)
    return kw


def use(fdp: atheris.FuzzedDataProvider, lk: Any) -> None:
    """One non-blocking attempt; extend and release what was granted."""
    if isinstance(lk, hilock.RWLock):
        lk = lk.write() if fdp.ConsumeBool() else lk.read()
    if fdp.ConsumeBool():
        got = lk.acquire(blocking=False)
    else:
        timeout = value(fdp)
        if timeout is None or timeout == -1:
            timeout = 0.01  # else: no limit, or the handle's own (any) timeout
        got = lk.acquire(value(fdp) if fdp.ConsumeBool() else True, short_wait(timeout))
    if not got:
        return
    try:
        if fdp.ConsumeBool() and hasattr(lk, "extend"):
            lk.extend(short_wait(value(fdp)), fdp.ConsumeBool())
        _ = (lk.validity, lk.fence, lk.key, lk.lost)
    finally:
        lk.release()


def new_lock(fdp: atheris.FuzzedDataProvider, c: hilock.Client) -> None:
    ttl = value(fdp) if fdp.ConsumeBool() else fdp.ConsumeFloatInRange(0.0, 60.0)
    timeout = value(fdp)
    kw = renewal(fdp)
    which = fdp.ConsumeIntInRange(0, 9)
    makers: List[Callable[[], Any]] = [
        lambda: c.lock(name(fdp), ttl, timeout, **kw),
        lambda: c.simple_lock(name(fdp), timeout),
        lambda: c.lease(name(fdp), ttl, timeout, **kw),
        lambda: c.rlock(name(fdp), ttl, timeout, **kw),
        lambda: c.semaphore(name(fdp), value(fdp) if fdp.ConsumeBool() else
                            fdp.ConsumeIntInRange(-1, 5), ttl, timeout, **kw),
        lambda: c.fair_lock(name(fdp), ttl, timeout, **kw),
        lambda: c.rwlock(name(fdp), ttl, timeout, **kw),
        lambda: c.multi_lock([name(fdp) for _ in range(fdp.ConsumeIntInRange(0, 4))]
                             if fdp.ConsumeBool() else value(fdp), ttl, timeout, **kw),
        lambda: c.sequential_lock(name(fdp), ttl, timeout, **kw),
        lambda: c.segmented_lock(name(fdp), value(fdp) if fdp.ConsumeBool() else
                                 fdp.ConsumeIntInRange(-1, 5), ttl, timeout, **kw),
    ]
    lk = makers[which]()
    use(fdp, lk)


def store(fdp: atheris.FuzzedDataProvider, c: hilock.Client) -> None:
    kw = {k: value(fdp) for k in ("linger", "max_value") if fdp.ConsumeBool()}
    s = c.fenced_store(**kw)
    try:
        for _ in range(fdp.ConsumeIntInRange(1, 4)):
            op = fdp.ConsumeIntInRange(0, 5)
            key = name(fdp)
            fence = value(fdp) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 2 ** 64)
            try:
                if op == 0:
                    s.get(key, fence=fence)
                elif op == 1:
                    s.set(key, value(fdp), fence=fence, ttl=value(fdp))
                elif op == 2:
                    s.incrby(key, value(fdp), fence=fence, ttl=value(fdp))
                elif op == 3:
                    s.delete(key, fence=fence)
                elif op == 4:
                    s.fence_of(key)
                else:
                    s.bind(fence).set(key, value(fdp))
            except ALLOWED:
                pass
    finally:
        if kw:
            s.close()


CLIENT: Any = None


def one_input(data: bytes) -> None:
    global CLIENT
    fdp = atheris.FuzzedDataProvider(data)
    if CLIENT is None:
        CLIENT = hilock.Client(URL, connect_timeout=2, command_timeout=2)
    try:
        op = fdp.ConsumeIntInRange(0, 3)
        if op == 0:
            new_client(fdp)
        elif op == 1:
            store(fdp, CLIENT)
        else:
            new_lock(fdp, CLIENT)
    except ALLOWED:
        pass


def main() -> None:
    if not URL:
        sys.exit("set HILOCK_URL to a redis-server of its own (tests/fuzz/run_python.sh)")
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
