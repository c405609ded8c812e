"""Shared waiting: the threads of a client that wait for locks share one
subscriber connection, and commands share a bounded pool, so the number of
server connections does not grow with the number of waiters.

Connections are read from the server (INFO clients); every waiter is a real
thread blocked in acquire; holders live in another client.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, List, Tuple

import pytest
import redis

import hilock
from helpers import RedisServer, command_calls, wait_for

N_SHARED = 100  # threads waiting on one lock
N_OWN = 100     # threads waiting on locks of their own


def _connected(r: redis.Redis) -> int:
    return int(r.info("clients")["connected_clients"])


def test_two_hundred_waiters_use_at_most_eight_connections(rds, redis_url) -> None:
    holder = hilock.Client(redis_url)
    shared = holder.lock("crowd", ttl=30, auto_renew=False)
    own = [holder.lock(f"crowd:{i}", ttl=30, auto_renew=False) for i in range(N_OWN)]
    assert shared.acquire(blocking=False)
    for lk in own:
        assert lk.acquire(blocking=False)
    baseline = _connected(rds)  # the holder's pool and this connection

    c = hilock.Client(redis_url)
    inside = 0
    peak_inside = 0
    got: List[str] = []
    errors: List[BaseException] = []
    mu = threading.Lock()

    def wait_shared() -> None:
        nonlocal inside, peak_inside
        try:
            with c.lock("crowd", ttl=30, timeout=60, auto_renew=False):
                with mu:
                    inside += 1
                    peak_inside = max(peak_inside, inside)
                time.sleep(0.001)
                with mu:
                    inside -= 1
                    got.append("crowd")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def wait_own(i: int) -> None:
        try:
            with c.lock(f"crowd:{i}", ttl=30, timeout=60, auto_renew=False):
                with mu:
                    got.append(f"crowd:{i}")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=wait_shared) for _ in range(N_SHARED)]
    threads += [threading.Thread(target=wait_own, args=(i,)) for i in range(N_OWN)]
    for t in threads:
        t.start()
    wait_for(lambda: c.waiting == N_SHARED + N_OWN, 30,
             what=f"{N_SHARED + N_OWN} threads waiting")
    time.sleep(0.3)
    used = _connected(rds) - baseline
    assert used <= 8, f"200 waiting threads hold {used} connections"
    assert errors == []

    # Every release reaches its waiters; the crowd on one lock passes it on,
    # one at a time. Connections stay bounded throughout.
    peak = used
    shared.release()
    for lk in own:
        lk.release()
    deadline = time.monotonic() + 60
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        peak = max(peak, _connected(rds) - baseline)
        time.sleep(0.02)
    for t in threads:
        t.join(1)
    assert not any(t.is_alive() for t in threads), "some waiters never got their lock"
    assert errors == [], errors[:3]
    assert got.count("crowd") == N_SHARED
    assert sorted(x for x in got if x != "crowd") == sorted(f"crowd:{i}" for i in range(N_OWN))
    assert peak_inside == 1, "two threads held one lock at once"
    assert peak <= 8, f"the hand-over used {peak} connections"
    c.close()
    holder.close()


@pytest.mark.parametrize("max_connections", [None, 2])
def test_a_burst_of_threads_shares_a_bounded_pool(rds, redis_url, max_connections) -> None:
    c = (hilock.Client(redis_url) if max_connections is None
         else hilock.Client(redis_url, max_connections=max_connections))
    baseline = _connected(rds)
    start = threading.Event()
    errors: List[BaseException] = []

    def cycle(i: int) -> None:
        start.wait()
        try:
            for _ in range(20):
                with c.lock(f"burst:{i % 7}", ttl=10, timeout=30, auto_renew=False):
                    pass
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=cycle, args=(i,)) for i in range(200)]
    for t in threads:
        t.start()
    peak = 0
    start.set()
    while any(t.is_alive() for t in threads):
        peak = max(peak, _connected(rds) - baseline)
        time.sleep(0.005)
    assert errors == [], errors[:3]
    # The pooled connections (6 by default), the subscriber and (not here:
    # no renewal) the renewal thread's: 8 in all by default.
    bound = (6 if max_connections is None else max_connections) + 1
    assert peak <= bound, f"a burst of 200 threads opened {peak} connections"
    c.close()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4", 10**6])
def test_max_connections_is_checked(redis_url, bad) -> None:
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(redis_url, max_connections=bad)


@pytest.mark.parametrize("direct", [1, 0])
def test_a_restart_that_loses_the_holder_lets_the_waiter_in(own_server, direct) -> None:
    """direct 1: the waiter blocks in BLPOP (a direct wait), whose broken
    connection sends it to try again; 0: in the shared waiting, whose
    subscriber's reconnect does."""
    holder = hilock.Client(own_server.url)
    waiter = hilock.Client(own_server.url, reconnect=10, direct_waiters=direct)
    lk = holder.lock("restart", ttl=30, auto_renew=False)
    assert lk.acquire(blocking=False)
    result: List[float] = []

    def wait() -> None:
        t0 = time.monotonic()
        if waiter.lock("restart", ttl=30, auto_renew=False).acquire(timeout=25):
            result.append(time.monotonic() - t0)

    t = threading.Thread(target=wait)
    t.start()
    wait_for(lambda: waiter.waiting == 1, 5, what="the waiter asleep")
    own_server.stop()   # no persistence: the holder's key is gone
    own_server.start()
    t.join(20)
    assert result, "the waiter never got in"
    # Well before the holder's 30 s TTL: the broken BLPOP, or the
    # subscriber's reconnect, made the waiter try again.
    assert result[0] < 10, result
    holder.close()
    waiter.close()


@contextmanager
def _user_with_a_held_lock(rds, port: int, name: str, *rules: str,
                           direct: int = 0) -> Iterator[Tuple[Any, Any, List[float]]]:
    """A user with these ACL rules; a lock called name held by one of its
    clients; the wait() that another of its clients runs on it (the time of
    each grant is appended to the list). The waiting client waits in the
    shared waiting unless direct."""
    rds.execute_command("ACL", "SETUSER", name, "on", ">pw", *rules)
    url = f"redis://{name}:pw@127.0.0.1:{port}/0"
    holder = waiter = None
    try:
        holder = hilock.Client(url)
        waiter = hilock.Client(url, direct_waiters=direct)
        lk = holder.lock(name, ttl=30, auto_renew=False)
        assert lk.acquire(blocking=False)
        granted: List[float] = []

        def wait() -> None:
            w = waiter.lock(name, ttl=30, auto_renew=False)
            if w.acquire(timeout=20):
                granted.append(time.monotonic())
                w.release()

        t = threading.Thread(target=wait)
        t.start()
        yield lk, waiter, granted
        t.join(20)
    finally:
        for x in (holder, waiter):
            if x is not None:
                x.close()
        rds.execute_command("ACL", "DELUSER", name)


def test_without_channel_rights_waits_fall_back_to_blpop(rds, redis_server) -> None:
    with _user_with_a_held_lock(rds, redis_server.port, "nochan", "~*", "+@all",
                                "-subscribe", "resetchannels") as (lk, _, granted):
        # Refused SUBSCRIBE: the waiter blocks in BLPOP on the list itself.
        wait_for(lambda: int(rds.info("clients")["blocked_clients"]) == 1, 10,
                 what="the waiter in BLPOP")
        released = time.monotonic()
        lk.release()  # its PUBLISH is refused too; the release still works
        wait_for(lambda: granted, 5, what="the grant")
        # Woken by the release, not the 30 s TTL or the 20 s timeout: 2 s
        # leaves room for a stalled, loaded machine.
        assert granted[0] - released < 2.0


@pytest.mark.parametrize("direct", [0, 1])
@pytest.mark.parametrize("kind,grant,writes", [
    ("lock", "set", 2), ("semaphore", "zadd", 1), ("rlock", "hset", 1),
    ("write", "hset", 1), ("segmented_lock", "set", 1), ("multi_lock", "set", 4)])
def test_a_waiter_in_each_of_several_clients_one_release_one_grant(
        rds, redis_url, kind, grant, writes, direct) -> None:
    """In the shared waiting (direct 0), each client rings its one waiter,
    whose acquire script takes the release's one wake-up first ("woken": the
    acquire scripts of the lock, semaphore, reentrant lock, read-write
    lock's write side, segmented lock and multi-key lock) or, finding none,
    grants nothing. Waiting direct (1), each blocks in BLPOP and the server
    hands the one wake-up to one of them: one script more than the release.
    Either way one release, one grant (writes: the grant's writes of that
    command; a lock's SET comes with its fence counter's), and the other
    waiters sleep on."""
    def make(c: hilock.Client) -> Any:
        if kind == "semaphore":
            return c.semaphore("several", 1, ttl=30, auto_renew=False)
        if kind == "write":
            return c.rwlock("several", ttl=30, auto_renew=False).write()
        if kind == "segmented_lock":
            return c.segmented_lock("several", 1, ttl=30, auto_renew=False)
        if kind == "multi_lock":
            return c.multi_lock(["several:a", "several:b"], ttl=30, auto_renew=False)
        return getattr(c, kind)("several", ttl=30, auto_renew=False)

    holder = hilock.Client(redis_url)
    lk = make(holder)
    assert lk.acquire(blocking=False)
    clients = [hilock.Client(redis_url, direct_waiters=direct) for _ in range(4)]
    granted: List[int] = []
    go = threading.Event()

    def wait(i: int) -> None:
        w = make(clients[i])
        if w.acquire(timeout=20):
            granted.append(i)
            go.wait(10)
            w.release()

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    wait_for(lambda: sum(x.waiting for x in clients) == 4, 10, what="four waiters")
    rds.config_resetstat()
    lk.release()
    wait_for(lambda: len(granted) == 1, 5, what="one grant")
    time.sleep(0.3)
    calls = {k[len("cmdstat_"):]: v["calls"] for k, v in rds.info("commandstats").items()}
    # The release, then one attempt per rung waiter, each popping first (one
    # that ran before the grant, while the lock was still free, looks again
    # 1 ms later: at most one more attempt and one more pop each); no LPOP
    # of its own before an attempt.
    scripts = calls.get("evalsha", 0) + calls.get("eval", 0)
    if direct:
        assert scripts == 2, calls
        assert calls.get("lpop", 0) == 0, calls
    else:
        assert 1 + 4 <= scripts <= 1 + 4 + 3, calls
        assert calls.get("lpop", 0) <= 4 + 3, calls
    assert calls.get(grant, 0) == writes, calls
    assert len(granted) == 1
    assert sum(x.waiting for x in clients) == 3
    go.set()
    for t in threads:
        t.join(20)
    assert sorted(granted) == [0, 1, 2, 3]
    for x in clients:
        x.close()
    holder.close()


def test_a_lone_listener_is_rung_solo(rds, redis_url) -> None:
    """One process waits: a release rings its waiter, whose attempt takes
    the wake-up itself (no LPOP of its own between the release and the
    grant: the release and one script); the channel is given up after the
    grant. (Shared waiting: a lone waiter would otherwise wait direct.)"""
    holder = hilock.Client(redis_url)
    c = hilock.Client(redis_url, direct_waiters=0)
    h = holder.lock("lone", ttl=30, auto_renew=False)
    w = c.lock("lone", ttl=30, auto_renew=False)
    assert h.acquire(blocking=False)  # the scripts are loaded: no NOSCRIPT
    h.release()                       # fallback counts twice below
    for _ in range(5):
        assert h.acquire(blocking=False)
        got = threading.Event()

        def wait() -> None:
            if w.acquire(timeout=10):
                got.set()

        rds.config_resetstat()
        t = threading.Thread(target=wait)
        t.start()
        # Waiting, past its first look at the list (the one LPOP so far: its
        # attempt, not rung, pops nothing).
        wait_for(lambda: c.waiting == 1 and command_calls(rds).get("lpop", 0) == 1, 5,
                 what="the waiter's first look at the list")
        before = command_calls(rds)
        h.release()
        assert got.wait(5), "the waiter was not woken"
        t.join(5)
        calls = {k: v - before.get(k, 0) for k, v in command_calls(rds).items()}
        assert calls.get("lpop", 0) <= 1, calls  # inside the attempt's script
        assert calls.get("evalsha", 0) + calls.get("eval", 0) == 2, calls
        w.release()
    wait_for(lambda: rds.pubsub_numsub("hilock:{lone}:wake")[0][1] == 0, 5,
             what="the channel to be given up")
    c.close()
    holder.close()


def test_without_pubsub_numsub_a_release_still_rings(rds, redis_server) -> None:
    """A user that may publish and subscribe but not ask PUBSUB NUMSUB: the
    release script's question fails quietly, the message is not "solo", and
    the waiter pops its wake-up as with several listeners."""
    rds.config_resetstat()
    with _user_with_a_held_lock(rds, redis_server.port, "nonumsub", "~*", "&*", "+@all",
                                "-pubsub") as (lk, waiter, granted):
        # Waiting, past its first look at the list (the one LPOP so far).
        wait_for(lambda: waiter.waiting == 1 and command_calls(rds).get("lpop", 0) == 1, 10,
                 what="the waiter's first look at the list")
        lk.release()
        wait_for(lambda: granted, 5, what="the grant")
        calls = command_calls(rds)
        assert calls.get("lpop", 0) >= 2, calls  # the rung waiter popped its wake-up


def _pings(rds) -> int:
    return int(rds.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))


@pytest.mark.parametrize("kind", ["lock", "rlock", "semaphore", "fair_lock", "read",
                                  "write", "multi_lock", "sequential_lock"])
def test_a_release_sends_ping_first_an_acquire_does_not(rds, redis_url, kind) -> None:
    """Redis answers the clients of one event-loop turn last-queued first:
    a release that PUBLISHes a wake-up would hear back before the waiter it
    woke. A PING in the same write queues the releaser before its script
    runs, so the waiter's message goes out first. One PING per release,
    none per acquire (a script the server does not know yet goes again as
    EVAL, with its own PING: a first cycle loads them)."""
    c = hilock.Client(redis_url)
    make = {
        "lock": lambda: c.lock("pf", auto_renew=False),
        "rlock": lambda: c.rlock("pf", auto_renew=False),
        "semaphore": lambda: c.semaphore("pf", 2, auto_renew=False),
        "fair_lock": lambda: c.fair_lock("pf", auto_renew=False),
        "read": lambda: c.rwlock("pf", auto_renew=False).read(),
        "write": lambda: c.rwlock("pf", auto_renew=False).write(),
        "multi_lock": lambda: c.multi_lock(["pf1", "pf2"], auto_renew=False),
        "sequential_lock": lambda: c.sequential_lock("pf", auto_renew=False),
    }
    lk = make[kind]()
    try:
        assert lk.acquire(blocking=False)
        lk.release()
        for _ in range(3):
            rds.config_resetstat()
            assert lk.acquire(blocking=False)
            assert _pings(rds) == 0
            lk.release()
            assert _pings(rds) == 1
    finally:
        c.close()



def test_a_lone_waiter_waits_direct_the_next_shares(rds, redis_url) -> None:
    """A client's first waiter blocks in BLPOP (the server hands it the
    wake-up itself); a second waiter of the same client on the same lock
    joins the shared waiting; grants follow the order of arrival."""
    holder = hilock.Client(redis_url)
    c = hilock.Client(redis_url)
    h = holder.lock("direct", ttl=30, auto_renew=False)
    assert h.acquire(blocking=False)
    order: List[int] = []
    locks = [c.lock("direct", ttl=30, auto_renew=False) for _ in range(2)]

    def wait(i: int) -> None:
        if locks[i].acquire(timeout=20):
            order.append(i)
            time.sleep(0.05)
            locks[i].release()

    def split() -> Tuple[int, int]:
        blocked = int(rds.info("clients")["blocked_clients"])
        return blocked, int(rds.pubsub_numsub("hilock:{direct}:wake")[0][1])

    t0 = threading.Thread(target=wait, args=(0,))
    t0.start()
    wait_for(lambda: split() == (1, 0), 5, what="the first waiter in BLPOP")
    t1 = threading.Thread(target=wait, args=(1,))
    t1.start()
    wait_for(lambda: c.waiting == 2 and split() == (1, 1), 5,
             what="the second in the shared waiting")
    h.release()
    t0.join(10)
    t1.join(10)
    assert order == [0, 1]
    c.close()
    holder.close()


def test_without_blpop_rights_a_lone_waiter_shares_the_subscriber(rds, redis_server) -> None:
    with _user_with_a_held_lock(rds, redis_server.port, "noblpop", "~*", "&*", "+@all",
                                "-blpop", direct=1) as (lk, waiter, granted):
        wait_for(lambda: waiter.waiting == 1 and
                 rds.pubsub_numsub("hilock:{noblpop}:wake")[0][1] == 1, 10,
                 what="the waiter in the shared waiting")
        released = time.monotonic()
        lk.release()
        wait_for(lambda: granted, 5, what="the grant")
        # Woken by the release, not the 30 s TTL or the 20 s timeout: 2 s
        # leaves room for a stalled, loaded machine.
        assert granted[0] - released < 2.0


@pytest.mark.parametrize("bad", [-1, True, 1.5, "1", None])
def test_direct_waiters_is_checked(redis_url, bad) -> None:
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(redis_url, direct_waiters=bad)
