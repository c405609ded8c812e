"""Threads of the blocking API taking turns at one lock while the server is
killed (by PID) and restarted on its port: every acquire gets the lock or
times out, and no call fails with ConnectionError inside its timeout (the
asyncio side: test_asyncio.py)."""
from __future__ import annotations

import collections
import threading
import time

import hilock
from helpers import RedisServer, free_port


def test_threads_ride_out_server_restarts() -> None:
    """40 threads, six kill-and-restarts, each once the threads contend
    (most waiting) on connections that served before: a connection broken
    under an acquire, a release or the shared waiting is replaced and the
    call resent within its timeout, on a connection that answered (a server
    going down still accepts connections, then resets them). A release of a
    grant the restart took reports it (LockNotOwnedError)."""
    srv = RedisServer(port=free_port())
    srv.start()
    c = hilock.Client(srv.url)
    outcomes: collections.Counter[str] = collections.Counter()
    count = threading.Lock()
    done = threading.Event()

    def note(what: str) -> None:
        with count:
            outcomes[what] += 1

    def one() -> None:
        while not done.is_set():
            lk = c.lock("restart", ttl=5, timeout=25)
            try:
                got = lk.acquire()
            except hilock.LockError as e:
                note(f"acquire raised {e!r}")
                return
            if not got:
                note("timed out")
                continue
            time.sleep(0.002)
            try:
                lk.release()
                note("released")
            except hilock.LockNotOwnedError:
                note("lost to a restart")
            except hilock.LockError as e:
                note(f"release raised {e!r}")

    threads = [threading.Thread(target=one, daemon=True) for _ in range(40)]
    try:
        for t in threads:
            t.start()
        for _ in range(6):
            since = outcomes["released"]
            for _ in range(3000):  # up to 30 s on a loaded machine
                if c.waiting >= 20 and outcomes["released"] >= since + 30:
                    break
                time.sleep(0.01)
            assert c.waiting >= 20 and outcomes["released"] >= since + 30, (c.waiting,
                                                                             outcomes)
            srv.stop()
            srv.start()
    finally:
        done.set()
        for t in threads:
            t.join(60)  # each acquire is bounded by its 25 s timeout
        alive = sum(t.is_alive() for t in threads)
        if not alive:
            c.close()
        srv.cleanup()
    assert alive == 0, outcomes
    assert not [k for k in outcomes if " raised " in k], outcomes
