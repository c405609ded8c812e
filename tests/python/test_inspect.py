"""Client.inspect, Client.force_release and Client.list_locks: every lock
type seen from outside, forced releases that wake waiters in other
processes, and the walk over names on one server and on a Cluster."""
from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Dict, Iterator

import pytest
import redis

import hilock
from cluster import LocalCluster
from helpers import join_all, pop_report, start_child, wait_for, waiting_processes

KEYS = {"name", "type", "held", "holder", "fence", "ttl", "waiters", "hold_count",
        "readers", "writer", "permits", "permits_used", "permits_free", "lock_delay",
        "delay_left"}


def test_nothing_there(client: hilock.Client) -> None:
    info = client.inspect("nobody")
    assert isinstance(info, hilock.LockInfo)
    assert info.type == "none" and not info.held
    assert info.holder is None and info.fence is None and info.ttl is None
    assert info.waiters == 0 and info.hold_count == 0
    assert info.readers is None and info.permits is None
    assert set(info.as_dict()) == KEYS
    json.dumps(info.as_dict())


def test_lock_held_and_released(client: hilock.Client) -> None:
    lk = client.lock("job", ttl=8, auto_renew=False)
    assert lk.acquire()
    info = client.inspect("job")
    assert info.type == "lock" and info.held and info.name == "job"
    assert info.holder == lk.token and info.fence == lk.fence
    assert info.ttl is not None and 4 < info.ttl <= 8  # set, less the time since
    assert info.hold_count == 1 and info.waiters == 0
    d = info.as_dict()
    assert set(d) == KEYS and d["holder"] == lk.token and d["type"] == "lock"
    json.dumps(d)
    fence = lk.fence
    lk.release()
    after = client.inspect(b"job")
    assert after.type == "none" and not after.held and after.fence == fence

    simple = client.simple_lock("forever")
    assert simple.acquire()
    info = client.inspect("forever")
    assert info.type == "lock" and info.held and info.ttl is None
    simple.release()


def test_rlock_reentered(client: hilock.Client) -> None:
    rl = client.rlock("re", ttl=8)
    for _ in range(3):
        assert rl.acquire()
    info = client.inspect("re")
    assert info.type == "rlock" and info.held and info.hold_count == 3
    assert info.holder is not None and info.fence == rl.fence
    for _ in range(3):
        rl.release()


def test_semaphore_partly_used(client: hilock.Client) -> None:
    s = [client.semaphore("pool", 5, ttl=8) for _ in range(2)]
    for x in s:
        assert x.acquire()
    info = client.inspect("pool")
    assert info.type == "semaphore" and info.held
    assert (info.permits, info.permits_used, info.permits_free) == (5, 2, 3)
    assert info.fence is None and info.holder is None
    assert info.ttl is not None and 4 < info.ttl <= 8  # set, less the time since
    for x in s:
        x.release()
    info = client.inspect("pool")
    assert info.type == "semaphore" and not info.held and info.permits_free == 5


def test_rwlock_read_and_write(client: hilock.Client) -> None:
    rw = client.rwlock("doc", ttl=8)
    r = rw.read()
    assert r.acquire() and r.acquire()
    info = client.inspect("doc")
    assert info.type == "rwlock" and info.held
    assert info.readers == 1 and info.writer is False and info.hold_count == 2
    r.release()
    r.release()
    w = rw.write()
    assert w.acquire()
    info = client.inspect("doc")
    assert info.writer is True and info.readers == 0 and info.fence == w.fence
    assert info.holder is not None
    w.release()


def test_waiters_in_line(client: hilock.Client, redis_url: str) -> None:
    other = hilock.Client(redis_url)
    try:
        holder = client.fair_lock("fifo", ttl=20)
        assert holder.acquire()
        done = threading.Event()

        def wait() -> None:
            w = other.fair_lock("fifo", ttl=20)
            assert w.acquire(timeout=15)
            w.release()
            done.set()

        t = threading.Thread(target=wait)
        t.start()
        wait_for(lambda: client.inspect("fifo").waiters == 1, 5, what="a waiter in line")
        info = client.inspect("fifo")
        assert info.type == "fair_lock" and info.holder == holder.token
        holder.release()
        t.join(20)
        assert done.is_set()
    finally:
        other.close()


def test_segmented_and_multi(client: hilock.Client) -> None:
    seg = client.segmented_lock("stock", 4, ttl=8)
    seg.stock_init(100)
    assert seg.acquire()
    info = client.inspect("stock")
    assert info.type == "segmented_lock" and info.held
    assert (info.permits, info.permits_used, info.permits_free) == (4, 1, 3)
    assert info.fence == seg.fence
    seg.release()
    m = client.multi_lock(["a", "b"], ttl=8)
    assert m.acquire()
    info = client.inspect("b")
    assert info.type == "lock" and info.held and info.holder == m.token
    m.release()


# ## Force release ----------------------------------------------------------

MAKERS: Dict[str, Callable[[hilock.Client, str], Any]] = {
    "lock": lambda c, n: c.lock(n, ttl=60),
    "simple": lambda c, n: c.simple_lock(n),
    "rlock": lambda c, n: c.rlock(n, ttl=60),
    "semaphore": lambda c, n: c.semaphore(n, 1, ttl=60),
    "fair_lock": lambda c, n: c.fair_lock(n, ttl=60),
    "write": lambda c, n: c.rwlock(n, ttl=60).write(),
    "read": lambda c, n: c.rwlock(n, ttl=60).read(),
    "sequential_lock": lambda c, n: c.sequential_lock(n, ttl=60),
    "segmented_lock": lambda c, n: c.segmented_lock(n, 1, ttl=60),
}
FENCED = {"lock", "simple", "rlock", "fair_lock", "write", "sequential_lock",
          "segmented_lock"}


def _waiter(url: str, kind: str, name: str) -> None:
    """Another process: wait up to 20 s for the lock, report, release."""
    r = redis.Redis.from_url(url)
    with hilock.Client(url) as c:
        lk = MAKERS[kind](c, name)
        got = lk.acquire(timeout=20)
        r.rpush("report", json.dumps({"got": got, "t": time.time(), "fence": lk.fence}))
        if got:
            lk.release()


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_force_release_wakes_a_waiter_in_another_process(
        client: hilock.Client, rds: Any, redis_url: str, kind: str) -> None:
    name = f"forced-{kind}"
    # The holder writes (a reader waits for a writer), else the same kind.
    holder = MAKERS["write" if kind == "read" else kind](client, name)
    assert holder.acquire()
    before = client.inspect(name)
    assert before.held
    p = start_child(_waiter, redis_url, kind, name)
    wait_for(lambda: waiting_processes(rds, f"hilock:{{{name}}}:*") >= 1, 10,
             what="the other process to wait")
    t0 = time.time()
    assert client.force_release(name) is True
    report = pop_report(rds, timeout=25)
    join_all([p], 10)
    assert report["got"] is True
    # Woken at once, not at the end of its 20 s wait (sane bound).
    assert report["t"] - t0 < 10
    if kind in FENCED:
        assert report["fence"] > holder.fence
    # The old holder finds its lock lost.
    with pytest.raises(hilock.LockNotOwnedError):
        holder.release()
    assert client.force_release(name) is False


def test_holder_renewal_sees_the_loss(client: hilock.Client) -> None:
    lost = threading.Event()
    lk = client.lock("renewed", ttl=0.6, on_lost=lambda _lk: lost.set())
    assert lk.acquire()
    assert client.force_release("renewed")
    assert lost.wait(5)
    assert lk.lost


def test_fences_keep_increasing_after_force(client: hilock.Client) -> None:
    last = 0
    for _ in range(5):
        lk = client.lock("mono", ttl=5)
        assert lk.acquire()
        assert lk.fence is not None and lk.fence > last
        last = lk.fence
        assert client.force_release("mono")
        assert client.inspect("mono").fence == last


# ## Listing ----------------------------------------------------------------

def _names(it: Iterator[hilock.LockInfo]) -> Dict[str, str]:
    return {i.name: i.type for i in it}


def test_list_with_patterns(client: hilock.Client, rds: Any) -> None:
    held = [client.lock("orders:1", ttl=9), client.rwlock("orders:2", ttl=9).write(),
            client.semaphore("pool", 3, ttl=9), client.lock("a}:b", ttl=9)]
    for lk in held:
        assert lk.acquire()
    gone = client.lock("orders:3", ttl=9)
    assert gone.acquire()
    gone.release()  # only its fence counter is left
    rds.set("notours", "x")
    assert _names(client.list_locks()) == {
        "orders:1": "lock", "orders:2": "rwlock", "pool": "semaphore", "a}:b": "lock"}
    assert _names(client.list_locks("orders:*")) == {"orders:1": "lock", "orders:2": "rwlock"}
    assert _names(client.list_locks(b"orders:[^1]")) == {"orders:2": "rwlock"}
    assert _names(client.list_locks("a")) == {}
    infos = list(client.list_locks("orders:1"))
    assert len(infos) == 1 and infos[0].holder == held[0].token
    for lk in held:
        lk.release()


def test_bad_input(client: hilock.Client, rds: Any) -> None:
    with pytest.raises(hilock.InvalidArgument):
        client.inspect("")
    with pytest.raises(hilock.InvalidArgument):
        client.inspect("x" * 1025)
    with pytest.raises(hilock.InvalidArgument):
        client.inspect("}x")
    with pytest.raises(hilock.InvalidArgument):
        client.inspect(42)  # type: ignore[arg-type]
    with pytest.raises(hilock.InvalidArgument):
        client.force_release("")
    with pytest.raises(hilock.InvalidArgument):
        list(client.list_locks(""))
    assert client.inspect("x" * 1024).type == "none"
    assert client.inspect(b"a\0b").type == "none"
    rds.set("hilock:{mine}:rlock", "not a hash")
    assert client.inspect("mine").type == "unknown"
    with pytest.raises(hilock.WrongTypeError, match="hilock:{mine}:rlock"):
        client.force_release("mine")
    assert rds.exists("hilock:{mine}:rlock")
    client.close()
    with pytest.raises(hilock.ConnectionError):
        client.inspect("a")


# ## Cluster ----------------------------------------------------------------


def test_cluster(cluster: LocalCluster) -> None:
    with hilock.Client(cluster.url, reconnect=15.0) as c:
        locks = [c.lock(f"cl-{k:02d}", ttl=9) for k in range(30)]
        for lk in locks:
            assert lk.acquire()
        rw = c.rwlock("cl-rw", ttl=9).read()
        assert rw.acquire()
        found = _names(c.list_locks("cl-*"))
        assert len(found) == 31 and found["cl-rw"] == "rwlock"
        assert _names(c.list_locks("cl-1?")) == {f"cl-1{k}": "lock" for k in range(10)}
        info = c.inspect("cl-07")
        assert info.held and info.holder == locks[7].token
        assert c.force_release("cl-rw") and c.force_release("cl-07")
        assert "cl-rw" not in _names(c.list_locks("cl-*"))
        with pytest.raises(hilock.LockNotOwnedError):
            locks[7].release()
        for lk in locks[:7] + locks[8:]:
            lk.release()


def test_asyncio_inspect_and_force_release(redis_url: str, rds: Any) -> None:
    import asyncio

    import hilock.asyncio as hio

    async def main() -> None:
        async with hio.Client(redis_url) as c:
            lk = c.lock("aio", ttl=9)
            assert await lk.acquire()
            info = await c.inspect("aio")
            assert info.type == "lock" and info.holder == lk.token
            assert await c.force_release("aio") is True
            assert (await c.inspect("aio")).type == "none"
            with pytest.raises(hilock.LockNotOwnedError):
                await lk.release()

    asyncio.run(main())


def test_asyncio_ping_and_list_locks(redis_url: str, rds: Any) -> None:
    """The asyncio client's ping() and list_locks() (an async iterator);
    a bad pattern raises from the first step, and leaving the walk early
    frees it."""
    import asyncio

    import hilock.asyncio as hio

    async def main() -> None:
        async with hio.Client(redis_url) as c:
            assert await c.ping() is None
            locks = [c.lock(f"aio-list-{i}", ttl=9) for i in range(5)]
            for lk in locks:
                assert await lk.acquire()
            names = sorted([info.name async for info in c.list_locks("aio-list-*")])
            assert names == [f"aio-list-{i}" for i in range(5)]
            async for info in c.list_locks("aio-list-*"):
                assert info.held and info.type == "lock"
                break  # the walk is closed, not left open
            assert [i async for i in c.list_locks("aio-none-*")] == []
            with pytest.raises(hilock.InvalidArgument):
                async for _ in c.list_locks("x" * 100_000):
                    pass
            for lk in locks:
                await lk.release()

    asyncio.run(main())
