"""The reentrant lock: per-thread reentrancy with the counts in a Redis hash.

- Nested ``with`` blocks in one thread; hold_count; the hash an operator
  sees (one field, ``<client id>:<thread id>``, with the count).
- Another thread blocks until the final release, and wakes promptly then.
- A release from a thread that does not hold it raises LockNotOwnedError
  and changes nothing.
- Eight processes selling stock through nested acquisitions: exact count,
  no overlapping critical sections, one fence per outer grant.
- Re-entry refreshes the TTL and keeps the fence; the next owner's fence is
  higher; renewal keeps it past 3 TTLs; Ctrl-C ends a wait.

Sub-second bounds that a stalled machine can miss go through
helpers.retry_stalled (see there).
"""
from __future__ import annotations

import re
import threading
import time

import pytest
import redis

import hilock
from helpers import (FORK, Worker, acquire_interrupted, blocked_clients, blocked_worker,
                     counts_by_pid, fresh_grants, lapsed,
                     open_gate, pass_gate, retry_stalled, sell_out, start_child_collected,
                     scripts_run, stoppable_clients, times_out_while_stopped, wait_for, within)
from history import RedisHistory, check_fences_increase, check_no_overlap
from helpers import FENCE_AHEAD

TTL = 0.3
WAKE_MAX = 0.1
FIELD = re.compile(rb"^[0-9a-f]{32}:[0-9]+$")


def _owners(fields: dict) -> dict:
    """The owner fields of the lock's hash: not '<owner>:op', the nonce of
    the owner's last call (kept so that a resend counts once)."""
    return {k: v for k, v in fields.items() if not k.endswith(b":op")}


def _owner_field(rds, rl) -> bytes:
    fields = _owners(rds.hgetall(rl.key))
    assert len(fields) == 1, fields
    (field,) = fields
    return field


def test_nested_with_blocks_and_hold_count(client, rds) -> None:
    rl = client.rlock("nested", ttl=10.0)
    assert rl.hold_count() == 0 and rl.owned() is False and rl.locked() is False
    with rl:
        fence = rl.fence
        assert rl.hold_count() == 1
        with rl:
            assert rl.hold_count() == 2
            with rl:
                assert rl.hold_count() == 3
                # What an operator sees: one hash field for this thread.
                assert rds.type(rl.key) == b"hash"
                fields = _owners(rds.hgetall(rl.key))
                assert len(fields) == 1
                (field, count), = fields.items()
                assert FIELD.match(field), field
                assert field.endswith(b":%d" % threading.get_native_id())
                assert count == b"3"
                assert 0 < rds.pttl(rl.key) <= 10000
                assert rl.fence == fence
            assert rl.hold_count() == 2
            assert rds.hget(rl.key, field) == b"2"
        assert rl.hold_count() == 1 and rl.owned() and rl.locked()
    assert rl.hold_count() == 0 and rl.owned() is False and rl.locked() is False
    assert rds.exists(rl.key) == 0
    with pytest.raises(hilock.LockNotOwnedError):
        rl.release()


def test_other_thread_waits_for_final_release(client, rds) -> None:
    def scenario(i):
        rl = client.rlock(f"handover-{i}", ttl=10.0)
        assert rl.acquire() and rl.acquire()

        def other():
            if not rl.acquire(timeout=8.0):
                return None
            got = time.monotonic()
            count = rl.hold_count()
            rl.release()
            return got, count

        w = blocked_worker(rds, other)
        rl.release()  # count 2 -> 1: still held, nobody is woken
        time.sleep(0.3)
        assert w.is_alive(), "another thread got the lock while this thread still held it"
        assert blocked_clients(rds) == 1
        assert rl.hold_count() == 1
        released = time.monotonic()
        rl.release()  # the final release wakes the waiter
        res = w.outcome(10.0)
        assert res is not None, "the waiting thread never got the lock"
        got, count = res
        assert count == 1
        wait_for(lambda: rds.exists(rl.key) == 0, 1.0, what="the lock to be free")
        within(got - released, WAKE_MAX, "the waiting thread woke after the final release")

    retry_stalled(scenario)


def test_release_from_non_holding_thread_changes_nothing(client, rds) -> None:
    rl = client.rlock("mine", ttl=10.0, auto_renew=False)
    assert rl.acquire() and rl.acquire()
    field = _owner_field(rds, rl)
    time.sleep(0.05)
    pttl_before = rds.pttl(rl.key)

    def intruder():
        with pytest.raises(hilock.LockNotOwnedError):
            rl.release()
        return rl.hold_count()

    assert Worker(intruder).outcome(5.0) == 0
    assert _owners(rds.hgetall(rl.key)) == {field: b"2"}
    assert rds.pttl(rl.key) <= pttl_before  # not refreshed either
    assert rl.hold_count() == 2 and rl.lost is False and rl.validity > 0
    rl.release()
    rl.release()
    assert rds.exists(rl.key) == 0


def test_reentry_refreshes_ttl_and_keeps_fence(client, rds) -> None:
    # Bounds are computed from clock readings around each call, so a slow
    # machine weakens them but never makes them fail.
    ttl = 1.0
    drift = 0.01 * ttl + 0.002
    rl = client.rlock("refresh", ttl=ttl, auto_renew=False)
    assert rl.acquire(blocking=False)
    granted = time.monotonic()
    fence = rl.fence
    time.sleep(0.3)
    before = time.monotonic()
    left = rds.pttl(rl.key)
    assert 0 < left <= (granted + ttl - before) * 1000 + 1, "the TTL did not run down"

    def refreshed(what, call, local=True):
        t0 = time.monotonic()
        call()
        pttl = rds.pttl(rl.key)
        validity = rl.validity
        t1 = time.monotonic()
        assert pttl >= (ttl - (t1 - t0)) * 1000 - 1, f"{what} did not refresh the TTL: {pttl}"
        if local:
            assert validity >= ttl - (t1 - t0) - drift - 0.001, f"{what}: validity {validity}"
        return t0

    refreshed("re-entry", lambda: rl.acquire(blocking=False))
    assert rl.fence == fence and rl.hold_count() == 2
    time.sleep(0.3)
    # (The local validity is not moved on by a release: it stays on the
    # safe side of the refreshed TTL.)
    last = refreshed("a release to count 1", rl.release, local=False)
    assert rl.hold_count() == 1 and rl.fence == fence
    # Without renewal it lapses one TTL after the last re-entry or release.
    wait_for(lambda: rds.exists(rl.key) == 0, ttl + 2.0, interval=0.005,
             what="the rlock to lapse")
    assert time.monotonic() - last >= ttl - 0.01
    with pytest.raises(hilock.LockNotOwnedError):
        rl.release()


def test_fence_grows_for_next_owner(client, rds, redis_url) -> None:
    rl = client.rlock("fenced-r", ttl=10.0)
    rds.set("hilock:{fenced-r}:fence", FENCE_AHEAD)  # counts the grants
    with rl:
        first = rl.fence
        with rl:
            assert rl.fence == first
        assert rl.fence == first
    other = hilock.Client(redis_url)
    try:
        nxt = other.rlock("fenced-r", ttl=10.0)
        with nxt:
            assert nxt.fence == first + 1
            with nxt:
                assert nxt.fence == first + 1
    finally:
        other.close()

    # Another thread of this client is another owner, with the next fence.
    def in_thread():
        with rl:
            return rl.fence

    assert Worker(in_thread).outcome(5.0) == first + 2
    with rl:
        assert rl.fence == first + 3
    assert int(rds.get("hilock:{fenced-r}:fence")) == first + 3


def test_renewal_keeps_rlock_past_ttl(client, rds) -> None:
    def scenario(i):
        rl = client.rlock(f"renewed-r-{i}", ttl=TTL)
        t0 = time.monotonic()
        with rl:
            field = _owner_field(rds, rl)

            def expect(count):
                if rds.hget(rl.key, field) != str(count).encode():
                    lapsed(rl, "the rlock lapsed while held")

            for depth in range(2, 6):
                time.sleep(TTL * 0.8)
                expect(depth - 1)
                rl.acquire()
                expect(depth)
            while time.monotonic() - t0 < 4 * TTL:
                time.sleep(0.05)
                expect(5)
            assert rl.lost is False and rl.validity > 0
            for _ in range(4):
                rl.release()
            time.sleep(1.5 * TTL)
            expect(1)
            assert rl.hold_count() == 1
        assert rds.exists(rl.key) == 0
        assert rl.lost is False

    retry_stalled(scenario)


def test_ctrl_c_interrupts_waiting_for_rlock(client, rds) -> None:
    def scenario(i):
        rl = client.rlock(f"intr-r-{i}", ttl=10.0)
        go, inside = threading.Event(), threading.Event()

        def holder():
            with rl:
                with rl:
                    inside.set()
                    go.wait(10)

        h = Worker(holder)
        h.start()
        try:
            assert inside.wait(5.0), "the holder thread never got the lock"
            held = rds.hgetall(rl.key)
            assert list(_owners(held).values()) == [b"2"]
            intr = acquire_interrupted(rl)
            assert rl.hold_count() == 0
            assert rds.hgetall(rl.key) == held  # the holder's hold, untouched
            wait_for(lambda: blocked_clients(rds) == 0, 2.0, what="the BLPOP to be dropped")

            # Waiting again: the holder's final release wakes the waiter.
            def wait_and_leave():
                if not rl.acquire(timeout=5.0):
                    return None
                got = time.monotonic()
                rl.release()
                return got

            w = blocked_worker(rds, wait_and_leave)
            released_from = time.monotonic()
        finally:
            go.set()
        h.outcome(5.0)
        got = w.outcome(10.0)
        assert got is not None
        wait_for(lambda: rds.exists(rl.key) == 0, 1.0, what="the lock to be free")
        within(intr.caught - intr.sent, 0.25, "KeyboardInterrupt came after SIGINT")
        within(got - released_from, 0.2, "the waiter woke after the holder's release")

    retry_stalled(scenario)


# -- processes ---------------------------------------------------------------------

N_PROCS = 8
STOCK = 60
RUN_TIMEOUT = 40.0


def _nested_seller(url: str, name: str, gate, tag: str) -> None:
    """Sell from the stock through nested acquisitions of one rlock: the read
    and the write each re-enter the outer hold."""
    r = redis.Redis.from_url(url)
    c = hilock.Client(url)
    rl = c.rlock(name, ttl=10.0)

    def read() -> int:
        fence = rl.fence
        with rl:
            stock = int(r.get(f"{tag}:stock"))
            if rl.fence != fence:
                raise RuntimeError("re-entry changed the fence")
        return stock

    def sell(stock: int) -> None:
        time.sleep(0.001)
        with rl:
            with rl:
                if rl.hold_count() != 3:
                    raise RuntimeError("hold count is not 3 at depth 3")
                r.set(f"{tag}:stock", stock - 1)

    pass_gate(gate)
    sell_out(r, rl, tag, sell, "outer acquire timed out", read=read)


def test_processes_contend_through_nested_acquisitions(rds, redis_url) -> None:
    tag = "rshop"
    rds.set(f"{tag}:stock", STOCK)
    rds.set("hilock:{shop:r}:fence", FENCE_AHEAD)  # counts the grants
    gate = FORK.Event()
    procs = [start_child_collected(_nested_seller, redis_url, "shop:r", gate, tag)
             for _ in range(N_PROCS)]
    open_gate(gate, procs, RUN_TIMEOUT)

    sold = counts_by_pid(rds, f"{tag}:sold")
    assert len(sold) == N_PROCS
    assert sum(sold.values()) == STOCK, sold
    assert int(rds.get(f"{tag}:stock")) == 0
    hist = RedisHistory(rds, f"{tag}:history").load()
    assert len(hist) == STOCK + N_PROCS
    assert check_no_overlap(hist) == len(hist)
    assert len({iv.pid for iv in hist}) >= 2
    # Re-entries draw no fence: one per outer grant, consecutive.
    fences = check_fences_increase(hist)
    assert fences == list(range(fences[0], fences[0] + len(hist)))
    assert rds.exists("hilock:{shop:r}:rlock") == 0


# -- known defects -------------------------------------------------------------------

def test_handoff_between_threads_keeps_new_owners_grant(client) -> None:
    rl = client.rlock("handoff", ttl=0.1)  # frequent renewals widen the race
    wiped = []
    slow = []  # no validity left, but the call took long enough to use it up
    stop = threading.Event()

    def worker(i):
        for k in range(400):
            if stop.is_set():
                return
            t0 = time.monotonic()
            assert rl.acquire(timeout=10)
            validity = rl.validity
            took = time.monotonic() - t0
            if validity == 0.0 and took < 0.05:
                # Half the TTL at most since the call began: a wipe.
                wiped.append((i, k))
                stop.set()
            elif validity == 0.0:
                slow.append(took)  # a stalled machine (sanitizers, load)
            rl.release()

    ws = [Worker(worker, i) for i in range(3)]
    for w in ws:
        w.start()
    for w in ws:
        w.outcome(30)
    assert wiped == [], f"grants wiped by the previous owner's release: {wiped}"
    assert len(slow) < 60, f"too few hand-overs were quick enough to tell: {slow}"


def test_max_hold_counts_from_the_first_grant(client, rds) -> None:
    rl = client.rlock("bounded-r", ttl=TTL, max_hold=2.0)
    t0 = time.monotonic()
    assert rl.acquire()
    time.sleep(1.5)
    assert rl.acquire()  # re-entry, not a new grant
    wait_for(lambda: rl.lost, 5.0, interval=0.005, what="the rlock to be lost")
    lost_after = time.monotonic() - t0
    # Lost about 2.4 s after the first grant (max_hold, then the TTL and a
    # renewal period); counted from the re-entry it would be 3.9 s. 3.1 s
    # tells the two apart with room for a stalled, loaded machine.
    assert lost_after <= 3.1, f"lost only after {lost_after:.3f} s"


def test_attempt_whose_reply_timed_out_is_undone(own_server) -> None:
    """An acquire sent to a stopped server times out (ConnectionError); the
    server runs it when it resumes, and grants. That grant must be undone
    (the owner's release goes out behind it on the same connection): the
    owner's next acquires are fresh grants with new fences, and once it has
    released, another client gets the lock at once. Without the undo the
    owner re-entered its unknown grant: the same fence every time, and each
    release left one level held."""
    import os
    import signal

    ttl = 3.0
    pid = own_server.pid
    with stoppable_clients(own_server) as (c, other, r):
        me = c.rlock("ghost", ttl=ttl)
        # A pooled connection and the scripts loaded, before the stop (an
        # EVALSHA the server does not know grants nothing).
        assert me.acquire(blocking=False)
        me.release()
        before = scripts_run(r)
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(hilock.ConnectionError):
                me.acquire(timeout=30)   # this thread is the owner
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: scripts_run(r) >= before + 2, 5,
                 what="the attempt, then its undo, to run on the server")

        fences = fresh_grants(me)
        assert fences[1] > fences[0], fences
        assert other.rlock("ghost", ttl=ttl).acquire(blocking=False), \
            "a level stayed held after its owner released"


REENTRANT = ["rlock", "rwlock-read", "rwlock-write"]


def _reentrant(c, kind: str, name: str):
    """The reentrant lock, or a read-write lock's read or write side."""
    if kind == "rlock":
        return c.rlock(name, ttl=30)
    rw = c.rwlock(name, ttl=30)
    return rw.read() if kind == "rwlock-read" else rw.write()


def _exclusive(c, kind: str, name: str):
    """What excludes every holder of _reentrant(kind, name)."""
    return c.rlock(name, ttl=30) if kind == "rlock" else c.rwlock(name, ttl=30).write()


@pytest.mark.parametrize("kind", REENTRANT)
def test_reentry_whose_reply_timed_out_keeps_the_hold(kind, own_server) -> None:
    """A re-entry whose reply times out and that never ran (after a restart
    or a script flush its EVALSHA fails: NOSCRIPT) is not undone: an undo
    would leave the level the thread already held, the lock free while its
    holder believes it holds it. The undo carries the re-entry's nonce and
    leaves a level only if the re-entry ran."""
    with stoppable_clients(own_server) as (c, other, r):
        me = _reentrant(c, kind, "reenter")
        assert me.acquire(blocking=False)
        r.script_flush()
        before = scripts_run(r)
        times_out_while_stopped(own_server.pid, lambda: me.acquire(blocking=False))
        wait_for(lambda: scripts_run(r) >= before + 2, 5,
                 what="the re-entry (NOSCRIPT) and its undo to run on the server")
        assert me.hold_count() >= 1
        assert not me.lost
        assert not _exclusive(other, kind, "reenter").acquire(blocking=False), \
            "the holder's level was given back by an undo of a re-entry that never ran"


@pytest.mark.parametrize("kind", REENTRANT)
def test_reentry_whose_reply_timed_out_is_undone_if_it_ran(kind, own_server) -> None:
    """A re-entry that ran on the server but whose reply timed out is
    given back by the undo behind it (it carries the re-entry's nonce, so
    it leaves a level only if the re-entry ran): the hold count stays 1,
    and the owner's release frees the lock."""
    with stoppable_clients(own_server) as (c, other, r):
        me = _reentrant(c, kind, "reenter-ran")
        assert me.acquire(blocking=False)
        before = scripts_run(r)
        times_out_while_stopped(own_server.pid, lambda: me.acquire(blocking=False))
        wait_for(lambda: scripts_run(r) >= before + 2, 5,
                 what="the re-entry and its undo to run on the server")
        assert me.hold_count() == 1, "the re-entry whose reply was lost stayed counted"
        me.release()
        assert _exclusive(other, kind, "reenter-ran").acquire(blocking=False), \
            "a level stayed held after its owner released"


def test_reentry_on_a_broken_connection_keeps_the_outer_level(own_server) -> None:
    """A re-entry that fails (its pooled connection was closed by the
    server, and its resend failed too) raises
    ConnectionError and leaves the level the thread already held: nothing
    may release it behind the caller's back, which is still inside its
    outer ``with``."""
    c = hilock.Client(own_server.url)
    r = redis.Redis(port=own_server.port)
    other = None
    try:
        me = c.rlock("broken", ttl=30)
        assert me.acquire(blocking=False)
        assert me.acquire(blocking=False)
        me.release()
        r.client_kill_filter(_type="normal", skipme=True)
        try:
            assert me.acquire(blocking=False)   # a fresh connection may serve it
            me.release()
        except hilock.ConnectionError:
            pass
        assert me.hold_count() == 1
        other = hilock.Client(own_server.url)
        assert not other.rlock("broken", ttl=30).acquire(blocking=False), \
            "the outer level was released after a failed re-entry"
    finally:
        r.close()
        if other is not None:
            other.close()
        c.close()
