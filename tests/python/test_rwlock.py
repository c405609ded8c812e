"""The read-write lock: real processes contending (history-checked), writer
preference under a reader stream, SIGKILLed readers and waiting writers,
downgrade, the upgrade error, renewal, lapse, threads and fork, API. What
every lock type shares (each side on its own) is tested in test_contract.py.

An owner is a thread of one client: tests that need several owners use
threads or processes.
"""
from __future__ import annotations

import os
import pickle
import random
import signal
import threading
import time

import pytest
import redis

import hilock
from helpers import (FORK, acquire_within, fresh_grants, join_all, kill_child, open_gate,
                     pass_gate, pop_json, start_child, wait_for)
from helpers import FENCE_AHEAD
from history import (FenceError, Interval, OverlapError, RedisHistory, check_fences_increase,
                     check_rw_exclusion)

TTL = 10.0


def keys(name: str) -> dict:
    base = f"hilock:{{{name}}}:rw:"
    return {role: base + role for role in ("writer", "readers", "counts", "intents")}


def in_thread(fn, *args):
    """Run fn(*args) on a new thread (a new owner); return (thread, result
    dict with 'value' or 'error', and 'done' time)."""
    out: dict = {}

    def body():
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out["error"] = e
        out["done"] = time.monotonic()

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, out


def result(t, out, timeout=10.0):
    t.join(timeout)
    assert not t.is_alive(), "thread did not finish"
    if "error" in out:
        raise out["error"]
    return out["value"]


# -- many readers or one writer, across processes ------------------------------

class _NoSide:
    """A side that excludes nothing: the control group."""

    fence = None

    def acquire(self, blocking=True, timeout=-1):
        return True

    def release(self):
        pass


def _state(r: redis.Redis, name: str) -> dict:
    """Everything Redis holds for the lock (for failure messages)."""
    t = r.time()
    out: dict = {"now_ms": t[0] * 1000 + t[1] // 1000}
    for role, key in keys(name).items():
        kind = r.type(key)
        if kind == b"zset":
            out[role] = r.zrange(key, 0, -1, withscores=True)
        elif kind == b"hash":
            out[role] = r.hgetall(key)
        out[role + "_pttl"] = r.pttl(key)
    for role in ("waiting", "admitted"):
        key = f"hilock:{{{name}}}:rw:{role}"
        out[role] = r.zrange(key, 0, -1, withscores=True)
    for role in ("rwake", "wwake"):
        out[role] = r.llen(f"hilock:{{{name}}}:rw:{role}")
    return out


def _rw_worker(url: str, role: str, name: str, gate, tag: str, seconds: float) -> None:
    r = redis.Redis.from_url(url)
    hist = RedisHistory(r, f"{tag}:{role}s")
    if tag.startswith("none"):
        side = _NoSide()
    else:
        rw = hilock.Client(url).rwlock(name, ttl=TTL)
        side = rw.read() if role == "read" else rw.write()
    rnd = random.Random(os.getpid())
    pass_gate(gate)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if not side.acquire(timeout=20):
            raise RuntimeError(f"{role} acquire timed out; lock state: {_state(r, name)}")
        start = time.monotonic()
        if role == "write":
            # A non-atomic read-modify-write, and a value readers must never
            # see change under them.
            v = int(r.get(f"{tag}:data"))
            time.sleep(0.002)
            r.set(f"{tag}:data", v + 1)
        else:
            before = r.get(f"{tag}:data")
            time.sleep(rnd.uniform(0.002, 0.006))
            if r.get(f"{tag}:data") != before:
                r.incr(f"{tag}:torn")
        end = time.monotonic()
        fence = side.fence
        side.release()
        hist.record(start, end, fence)
        time.sleep(0.015 if role == "write" else rnd.uniform(0, 0.002))


def run_rw(url: str, r: redis.Redis, tag: str, readers: int = 3, writers: int = 2,
           seconds: float = 1.5):
    r.set(f"{tag}:data", 0)
    r.set(f"hilock:{{doc:{tag}}}:fence", FENCE_AHEAD)  # counts the grants
    gate = FORK.Event()
    procs = [start_child(_rw_worker, url, "read", f"doc:{tag}", gate, tag, seconds)
             for _ in range(readers)]
    procs += [start_child(_rw_worker, url, "write", f"doc:{tag}", gate, tag, seconds)
              for _ in range(writers)]
    open_gate(gate, procs, seconds + 30)
    return (RedisHistory(r, f"{tag}:reads").load(), RedisHistory(r, f"{tag}:writes").load())


def test_processes_readers_share_writers_exclude(rds, redis_url) -> None:
    reads, writes = run_rw(redis_url, rds, "rw")
    assert len(writes) >= 10 and len(reads) >= 30, (len(reads), len(writes))
    shared = check_rw_exclusion(reads, writes)
    assert shared >= 5, f"readers never shared the lock ({shared} overlapping pairs)"
    assert len({iv.pid for iv in reads}) == 3 and len({iv.pid for iv in writes}) == 2
    # No reader saw a write; no write was lost.
    assert int(rds.get("rw:torn") or 0) == 0
    assert int(rds.get("rw:data")) == len(writes)
    # Every write grant drew the next fence of the name.
    fences = check_fences_increase(writes)
    assert fences == list(range(fences[0], fences[0] + len(writes)))
    assert all(iv.fence is None for iv in reads)
    k = keys("doc:rw")
    assert rds.exists(k["writer"], k["readers"], k["counts"], k["intents"]) == 0


def test_without_lock_the_rw_checker_fails(rds, redis_url) -> None:
    """Control group: the same workers with no lock break every check."""
    reads, writes = run_rw(redis_url, rds, "none", seconds=0.8)
    with pytest.raises(OverlapError) as info:
        check_rw_exclusion(reads, writes)
    assert "write" in str(info.value) and info.value.pairs
    assert int(rds.get("none:torn") or 0) > 0 or int(rds.get("none:data")) < len(writes)
    with pytest.raises(FenceError):
        check_fences_increase(writes)


def test_rw_checker_on_its_own() -> None:
    reads = [Interval(1, 0.0, 1.0), Interval(2, 0.5, 1.5), Interval(3, 0.6, 0.7)]
    writes = [Interval(4, 1.5, 2.0, 1), Interval(5, 2.0, 2.5, 2)]
    assert check_rw_exclusion(reads, writes) == 3
    with pytest.raises(OverlapError) as info:
        check_rw_exclusion(reads, writes + [Interval(6, 0.65, 0.66, 3)])
    assert len(info.value.pairs) == 3  # inside all three reads
    with pytest.raises(OverlapError):
        check_rw_exclusion([], [Interval(4, 0.0, 1.0), Interval(5, 0.9, 2.0)])
    assert check_rw_exclusion([], []) == 0


# -- writer preference ---------------------------------------------------------------

STREAM_HOLD = 0.05


def _stream(url: str, name: str, tag: str, role: str, hold: float, delay: float) -> None:
    """One process of a stream of readers or writers (role "read" or
    "write"): from delay seconds on, take the side, hold it for hold
    seconds, release and record the window (with its fence: None for a
    read) on {tag}:{role}s; until the key {tag}:stop appears."""
    r = redis.Redis.from_url(url)
    hist = RedisHistory(r, f"{tag}:{role}s")
    rw = hilock.Client(url).rwlock(name, ttl=TTL)
    side = rw.read() if role == "read" else rw.write()
    time.sleep(delay)
    while not r.exists(f"{tag}:stop"):
        start = acquire_within(side, f"{role} stream starved")
        time.sleep(hold)
        end = time.monotonic()
        fence = side.fence
        side.release()
        hist.record(start, end, fence)


def _max_gap(windows, lo: float, hi: float) -> float:
    """The longest stretch of [lo, hi] covered by no window."""
    gap, reach = 0.0, lo
    for iv in sorted(windows, key=lambda iv: iv.start):
        if iv.end <= reach:
            continue
        if iv.start > reach:
            gap = max(gap, min(iv.start, hi) - reach)
        reach = iv.end
        if reach >= hi:
            break
    return max(gap, hi - reach)


def test_writer_gets_in_under_a_reader_stream(client, rds, redis_url, capsys) -> None:
    """Readers take turns so that some reader always holds the lock. A
    writer that only tries never finds it free; a waiting writer's intent
    holds new readers back, so it gets in after the current holds end."""
    name, tag = "stream", "stream"
    procs = [start_child(_stream, redis_url, name, tag, "read", STREAM_HOLD, i * STREAM_HOLD / 4)
             for i in range(4)]
    try:
        rw = client.rwlock(name, ttl=TTL)
        w = rw.write()
        wait_for(lambda: len(RedisHistory(rds, f"{tag}:reads").load()) >= 8, 10,
                 what="the reader stream")
        t_try0 = time.monotonic()
        granted = 0
        for _ in range(25):
            if w.acquire(blocking=False):
                granted += 1
                w.release()
            time.sleep(0.008)
        t_try1 = time.monotonic()

        t0 = time.monotonic()
        assert w.acquire(timeout=5.0), "the writer starved"
        start = time.monotonic()
        waited = start - t0
        assert not rw.read().locked()
        time.sleep(0.02)
        end = time.monotonic()
        w.release()
        wait_for(lambda: any(iv.start > end for iv in RedisHistory(rds, f"{tag}:reads").load()),
                 10, what="the readers to resume")
    finally:
        rds.set(f"{tag}:stop", 1)
        join_all(procs, 30)
    reads = RedisHistory(rds, f"{tag}:reads").load()
    gap = _max_gap(reads, t_try0, t_try1)
    with capsys.disabled():
        print(f"\n    writer's wait under a stream of 4 readers ({STREAM_HOLD * 1000:.0f} ms "
              f"holds): {waited * 1000:.1f} ms; tries granted without waiting: {granted}/25; "
              f"longest gap in the stream while it tried: {gap * 1000:.2f} ms")
    assert granted == 0, "the stream had gaps: the test proves nothing"
    # How long the writer waited is the figure printed above; a writer the
    # stream starved would have failed its 5 s acquire.
    check_rw_exclusion(reads, [Interval(0, start, end)])
    assert any(iv.start > end for iv in reads), "readers did not resume after the write"


def test_reader_gets_in_under_a_writer_stream(client, rds, redis_url, capsys) -> None:
    """Two writer processes keep a writer's intent present at every moment
    (one holds while the other waits). Under plain writer preference no
    reader would ever get in; a waiting reader is admitted at the next
    write release, ahead of the waiting writer."""
    name, tag = "wstream", "wstream"
    procs = [start_child(_stream, redis_url, name, tag, "write", 0.03, i * 0.015)
             for i in range(2)]
    reads = []
    try:
        r = client.rwlock(name, ttl=TTL).read()
        wait_for(lambda: len(RedisHistory(rds, f"{tag}:writes").load()) >= 4, 10,
                 what="the writer stream")
        waits = []
        for _ in range(5):
            t0 = time.monotonic()
            assert r.acquire(timeout=3.0), "the reader starved behind the writers"
            start = time.monotonic()
            waits.append(start - t0)
            time.sleep(0.01)
            end = time.monotonic()
            r.release()
            reads.append(Interval(os.getpid(), start, end))
            time.sleep(0.02)
    finally:
        rds.set(f"{tag}:stop", 1)
        join_all(procs, 30)
    writes = RedisHistory(rds, f"{tag}:writes").load()
    with capsys.disabled():
        print(f"\n    reader's waits under a stream of 2 writers (30 ms holds): "
              + ", ".join(f"{w * 1000:.1f}" for w in waits) + " ms")
    # At most the write in progress and the one after it, plus round trips.
    assert max(waits) < 0.5, waits
    check_rw_exclusion(reads, writes)
    check_fences_increase(writes)


# -- crashes: real processes killed with SIGKILL ------------------------------

def _hold_and_hang(url: str, name: str, ttl: float, side: str, ready: str) -> None:
    rw = hilock.Client(url).rwlock(name, ttl=ttl)
    lk = rw.read() if side == "read" else rw.write()
    r = redis.Redis.from_url(url)
    if side == "wait-write":
        r.rpush(ready, "waiting")
        rw.write().acquire()
        raise RuntimeError("the waiting writer was granted")
    assert lk.acquire(blocking=False)
    r.rpush(ready, "held")
    time.sleep(60)


def test_crashed_reader_frees_its_share_within_ttl(client, rds, redis_url) -> None:
    p = start_child(_hold_and_hang, redis_url, "crash", 0.6, "read", "ready")
    assert pop_json(rds, "ready", 10) == b"held"
    w = client.rwlock("crash", ttl=TTL).write()
    time.sleep(0.9)  # past its TTL: renewed while the process lives
    assert not w.acquire(blocking=False)
    kill_child(p)
    t0 = time.monotonic()
    assert w.acquire(timeout=10)
    waited = time.monotonic() - t0
    # The share lapses at the reader's expiry, 2/3 to 1 TTL after the kill;
    # 2.5 s is well under the 10 s a share that outlived its process would
    # cost, with room for a stalled, loaded machine.
    assert 0.25 <= waited <= 2.5, waited
    assert rds.zcard(keys("crash")["readers"]) == 0
    w.release()


def test_dead_waiting_writer_holds_readers_back_for_one_ttl(client, rds, redis_url) -> None:
    holder = client.rwlock("ghost", ttl=TTL)
    assert holder.read().acquire(blocking=False)
    p = start_child(_hold_and_hang, redis_url, "ghost", 0.6, "wait-write", "ready")
    assert pop_json(rds, "ready", 10) == b"waiting"
    wait_for(lambda: rds.zcard(keys("ghost")["intents"]) == 1, 5, what="the writer's intent")
    newcomer = client.rwlock("ghost", ttl=TTL).read()
    time.sleep(0.9)  # the live waiter keeps refreshing its intent
    assert rds.zcard(keys("ghost")["intents"]) == 1
    t, out = in_thread(newcomer.acquire, False)
    assert result(t, out) is False
    kill_child(p)
    t0 = time.monotonic()
    t, out = in_thread(lambda: (newcomer.acquire(timeout=10), newcomer.release()))
    result(t, out)
    waited = out["done"] - t0
    # The dead writer's intent lapses within its 0.6 s TTL; 2.5 s is well
    # under the 10 s an intent that outlived its process would cost, with
    # room for a stalled, loaded machine.
    assert 0.25 <= waited <= 2.5, waited
    holder.read().release()


# -- downgrade and upgrade ------------------------------------------------------------

def test_downgrade_leaves_no_gap_for_a_waiting_writer(client, rds) -> None:
    rw = client.rwlock("down", ttl=TTL)
    other = client.rwlock("down", ttl=TTL)
    assert rw.write().acquire(blocking=False)
    first_fence = rw.write().fence

    def writer():
        assert other.write().acquire(timeout=5)
        granted = time.monotonic()
        fence = other.write().fence
        other.write().release()
        return granted, fence

    wt, wout = in_thread(writer)
    wait_for(lambda: rds.zcard(keys("down")["intents"]) == 1, 5, what="the writer's intent")
    t0 = time.monotonic()
    assert rw.read().acquire(timeout=5)  # the writer's own read: at once
    # Not queued behind the waiting writer (that would last its 5 s): 2.5 s
    # leaves room for a stalled, loaded machine.
    assert time.monotonic() - t0 < 2.5
    rw.write().release()
    assert rds.exists(keys("down")["writer"]) == 0
    time.sleep(0.15)
    assert wt.is_alive(), "a writer got in between the downgrade and the read release"
    assert rw.read().owned() and rw.read().hold_count() == 1
    t, out = in_thread(rw.read().acquire, False)  # a new reader queues behind the writer
    assert result(t, out) is False
    t_release = time.monotonic()
    rw.read().release()
    granted, fence = result(wt, wout)
    # Woken by the release, not the 10 s TTL: 3 s tells the two apart with
    # room for a stalled, loaded machine.
    assert granted - t_release < 3.0
    assert fence > first_fence


def test_downgrade_in_with_blocks(client) -> None:
    rw = client.rwlock("down2", ttl=TTL)
    with rw.write() as w:
        assert w.fence > 10**15  # a new name: the server's clock
        with rw.read() as r:
            assert r.owned() and w.owned()
        assert w.owned() and not r.owned()
    assert not rw.locked()


def test_upgrade_raises_deadlock_error_at_once(client, rds) -> None:
    rw = client.rwlock("up", ttl=TTL, timeout=5.0)
    with rw.read() as r:
        t0 = time.monotonic()
        with pytest.raises(hilock.DeadlockError) as info:
            rw.write().acquire()
        # At once, not after the object's 5 s timeout: 2.5 s leaves room for
        # a stalled, loaded machine.
        assert time.monotonic() - t0 < 2.5
        assert info.value.code == hilock._hilock.HILOCK_EDEADLK
        assert isinstance(info.value, RuntimeError) and isinstance(info.value, hilock.LockError)
        assert "would deadlock" in str(info.value)
        with pytest.raises(hilock.DeadlockError):
            with rw.write():
                pytest.fail("the body ran")
        # Another RWLock object for the same name, same thread: same owner.
        with pytest.raises(hilock.DeadlockError):
            client.rwlock("up", ttl=TTL).write().acquire(timeout=1)
        assert r.hold_count() == 1
        assert rds.exists(keys("up")["intents"]) == 0
    with rw.write():
        pass


# -- reentrancy, threads, timeouts ------------------------------------------------------

def test_reads_and_writes_reenter_per_thread(client, rds) -> None:
    rw = client.rwlock("re", ttl=TTL)
    r, w = rw.read(), rw.write()
    for n in (1, 2, 3):
        assert r.acquire(blocking=False)
        assert r.hold_count() == n
    for n in (2, 1, 0):
        r.release()
        assert r.hold_count() == n
    assert not r.owned()
    with pytest.raises(hilock.LockNotOwnedError):
        r.release()
    with w:
        first = w.fence
        with w:
            assert w.hold_count() == 2 and w.fence == first
        assert w.owned()
    assert not w.locked() and rds.exists(keys("re")["writer"]) == 0


def test_threads_sharing_one_rwlock_are_separate_owners(client) -> None:
    rw = client.rwlock("threads", ttl=TTL)
    with rw.write():
        t, out = in_thread(rw.read().acquire, False)
        assert result(t, out) is False
        t, out = in_thread(rw.write().release)
        with pytest.raises(hilock.LockNotOwnedError):
            result(t, out)
        assert rw.write().owned()
    # Readers on two threads at once.
    start = threading.Barrier(2)

    def read_together():
        with rw.read():
            start.wait(5)
            return rw.read().hold_count()

    t, out = in_thread(read_together)
    with rw.read():
        start.wait(5)
        assert result(t, out) == 1
    assert not rw.locked()


def test_with_block_raises_lock_timeout(client) -> None:
    holder = client.rwlock("busy", ttl=TTL)
    rw = client.rwlock("busy", ttl=TTL, timeout=0.2)
    ready, done = threading.Event(), threading.Event()

    def hold():
        with holder.write():
            ready.set()
            done.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert ready.wait(5)
        t0 = time.monotonic()
        with pytest.raises(hilock.LockTimeout):
            with rw.read():
                pytest.fail("the body ran unlocked")
        # Bounded by the 0.2 s timeout, not the 5 s hold: 2.5 s leaves room
        # for a stalled, loaded machine.
        assert 0.15 <= time.monotonic() - t0 < 2.5
        assert rw.read().acquire(timeout=0.1) is False
        assert not rw.read().owned()
    finally:
        done.set()
        t.join(5)
    assert rw.read().acquire(timeout=1)
    rw.read().release()


def test_last_reader_out_and_write_release_wake_waiters(client) -> None:
    """Woken by releases, not by TTLs (10 s here)."""
    rw = client.rwlock("wake", ttl=TTL)
    others = [client.rwlock("wake", ttl=TTL) for _ in range(3)]
    assert rw.read().acquire(blocking=False)
    wt, wout = in_thread(lambda: (others[0].write().acquire(timeout=5),
                                  time.sleep(0.1), others[0].write().release()))
    wait_for(lambda: client.waiting == 1, 5, what="the writer to wait")
    readers = [in_thread(lambda o=o: (o.read().acquire(timeout=5), time.sleep(0.1),
                                      o.read().release())) for o in others[1:]]
    wait_for(lambda: client.waiting == 3, 5, what="the readers to wait")
    t0 = time.monotonic()
    rw.read().release()  # last reader out: wakes the writer
    result(wt, wout)
    assert wout["value"][0] is True
    for t, out in readers:  # the write release: wakes every reader
        assert result(t, out)[0] is True
    # 0.2 s of holds, well under the 10 s TTLs and 5 s timeouts a missed
    # wake-up would cost.
    assert time.monotonic() - t0 < 2.0


# -- renewal and lapse --------------------------------------------------------------

def test_read_and_write_holds_are_renewed(client, rds) -> None:
    rw = client.rwlock("renew", ttl=0.3)
    other = client.rwlock("renew", ttl=0.3)
    with rw.read() as r:
        time.sleep(1.0)
        assert r.owned() and not r.lost
        assert 0 < rds.pttl(keys("renew")["readers"]) <= 300
        t, out = in_thread(other.write().acquire, False)
        assert result(t, out) is False
    with rw.write() as w:
        time.sleep(1.0)
        assert w.owned() and not w.lost and 0 < w.validity <= 0.3
        t, out = in_thread(other.read().acquire, False)
        assert result(t, out) is False
    assert not rw.locked()


def test_auto_renew_false_lets_holds_lapse(client, rds) -> None:
    rw = client.rwlock("lapse", ttl=0.2, auto_renew=False)
    assert rw.read().acquire(blocking=False)
    time.sleep(0.35)
    assert not rw.read().owned()
    with pytest.raises(hilock.LockNotOwnedError):
        rw.read().release()
    assert rw.write().acquire(blocking=False)


# -- fork -----------------------------------------------------------------------------

def _child_refuses(rw) -> None:
    with pytest.raises(hilock.ForkedLockError):
        rw.read().release()
    with pytest.raises(hilock.ForkedLockError):
        rw.write().release()
    assert rw.read().validity == 0 and rw.write().validity == 0
    assert rw.read().acquire(blocking=False) is False  # the parent's write


def test_forked_child_refuses_the_parents_holds(client, rds) -> None:
    rw = client.rwlock("fork", ttl=TTL)
    assert rw.write().acquire(blocking=False)
    assert rw.read().acquire(blocking=False)
    join_all([start_child(_child_refuses, rw)], 20)
    assert rw.read().owned() and rw.write().owned()
    rw.write().release()
    rw.read().release()


# -- API ----------------------------------------------------------------------------

def test_api_shape(client, rds) -> None:
    rw = client.rwlock("api", 12.5, 3.0, auto_renew=False, max_hold=None, on_lost=None)
    assert isinstance(rw, hilock.RWLock)
    assert rw.read() is rw.read() and rw.write() is rw.write()
    assert isinstance(rw.read(), hilock.ReadLock) and isinstance(rw.write(), hilock.WriteLock)
    assert isinstance(rw.read(), hilock.LockBase)
    assert rw.name == "api" and rw.ttl == 12.5 and rw.timeout == 3.0
    assert rw.read().key == b"hilock:{api}:rw:readers"
    assert rw.write().key == b"hilock:{api}:rw:writer"
    assert rw.read().ttl == 12.5 and rw.read().timeout == 3.0
    assert rw.read().fence is None and rw.write().fence is None
    assert "RWLock" in repr(rw) and "ReadLock" in repr(rw.read())
    with pytest.raises(TypeError):
        client.rwlock("api", 1.0, 1.0, True)  # keyword-only options
    for obj in (rw, rw.read(), rw.write()):
        with pytest.raises(TypeError):
            pickle.dumps(obj)
    with pytest.raises(hilock.InvalidArgument):
        rw.read().acquire(blocking=False, timeout=1)
    with pytest.raises(hilock.InvalidArgument):
        client.rwlock("api", ttl=0)
    with pytest.raises(hilock.InvalidArgument):
        client.rwlock("")
    with pytest.raises(hilock.InvalidArgument):
        client.rwlock("}x")
    with pytest.raises(hilock.InvalidArgument):
        client.rwlock("api", on_lost=5)
    assert callable(hilock.rwlock)
    with rw.write() as w:
        assert w.fence > 10**15 and rw.locked() and w.locked() and not rw.read().locked()
    assert rds.get("hilock:{api}:fence") == str(w.fence).encode()


def test_deadlock_error_in_the_error_table() -> None:
    e = hilock.errors.error_for(hilock._hilock.HILOCK_EDEADLK, "")
    assert isinstance(e, hilock.DeadlockError) and e.code == -16
    assert "deadlock" in str(e)
    assert hilock._hilock.hilock_err_name(-16) == b"EDEADLK"


def test_closed_client_fails_with_connection_error(redis_url, rds) -> None:
    c = hilock.Client(redis_url)
    rw = c.rwlock("closed", ttl=TTL)
    c.close()
    with pytest.raises(hilock.ConnectionError):
        rw.read().acquire(blocking=False)
    with pytest.raises(hilock.ConnectionError):
        c.rwlock("closed")


def test_collecting_a_cycle_never_touches_the_freed_handle(client) -> None:
    # The collector finalizes a cycle's objects in any order: the shared C
    # handle may be freed before a side's finalizer runs.
    import gc
    gc.collect()
    for i in range(50):
        rw = client.rwlock(f"gc-cycle-{i % 3}", ttl=5.0)
        rw.read().cycle = rw  # RWLock -> side -> RWLock
        rw.write().cycle = rw
        del rw
        gc.collect()
    assert not client.rwlock("gc-cycle-0").locked()


@pytest.mark.parametrize("side", ["write", "read"])
def test_attempt_whose_reply_timed_out_is_undone(side, own_server) -> None:
    """A waiting acquire whose attempt reaches a stopped server times out
    (ConnectionError); the server runs the attempt when it resumes, after
    the blocker lapsed, and grants. That grant must be undone: the owner's
    next acquire is a fresh grant with a new fence, its release frees the
    lock, and another owner gets it. Without the undo the owner re-entered
    its unknown grant: every later acquire returned the same fence, a
    release left one level held and renewed, and the lock stayed taken for
    as long as the process lived."""
    ttl = 1.5
    opts = dict(connect_timeout=2.0, command_timeout=1.0, reconnect=2.0)
    blocker_c = hilock.Client(own_server.url, **opts)
    c = hilock.Client(own_server.url, **opts)
    other = hilock.Client(own_server.url)
    pid = own_server.pid
    try:
        blocker = blocker_c.rwlock("ghost", ttl=ttl).write()
        assert blocker.acquire(blocking=False)
        rw = c.rwlock("ghost", ttl=ttl)
        me = rw.write() if side == "write" else rw.read()
        # The server stops once this owner waits (registered on the server),
        # and resumes once its acquire has failed and the blocker's TTL has
        # run out, so that the attempt left queued grants.
        waiting_key = "hilock:{ghost}:rw:" + ("intents" if side == "write" else "waiting")
        failed = threading.Event()

        def stop_server() -> None:
            r = redis.Redis(port=own_server.port)
            try:
                deadline = time.monotonic() + 30
                while not r.zcard(waiting_key) and time.monotonic() < deadline:
                    time.sleep(0.01)
            finally:
                r.close()
            os.kill(pid, signal.SIGSTOP)
            stopped = time.monotonic()
            failed.wait(60)
            time.sleep(max(0.0, 2 * ttl - (time.monotonic() - stopped)))
            os.kill(pid, signal.SIGCONT)

        t = threading.Thread(target=stop_server, daemon=True)
        t.start()
        try:
            with pytest.raises(hilock.ConnectionError):
                me.acquire(timeout=30)   # this thread is the owner
        finally:
            failed.set()
            t.join(60)
        assert not t.is_alive()
        time.sleep(0.3)

        fences = fresh_grants(me)
        if side == "write":
            assert fences[0] is not None and fences[1] > fences[0]
        w = other.rwlock("ghost", ttl=ttl).write()
        assert w.acquire(timeout=4 * ttl), "the lock stayed taken after its owner released"
        w.release()
    finally:
        os.kill(pid, signal.SIGCONT)
        other.close()
        c.close()
        blocker_c.close()
