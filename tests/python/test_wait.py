"""Waiting: a blocked acquire sleeps in BLPOP on the lock's wake list.

What is checked here, against a real redis-server:

- a release wakes a blocked waiter at once, far inside the holder's TTL;
- a holder that dies, whose key is deleted behind hilock's back, or whose
  key simply expires, costs a waiter at most the TTL it was told;
- the wait is one BLPOP, not a polling loop (INFO commandstats);
- one release wakes one waiter (no thundering herd);
- float timeouts below a second are honoured, 0 tries exactly once;
- the GIL is released while waiting, Ctrl-C interrupts the wait and leaves
  nothing held, and closing the client ends the wait with ConnectionError.

Sub-second bounds that a stalled machine can miss go through
helpers.retry_stalled (see there).
"""
from __future__ import annotations

import json
import os
import time

import pytest
import redis

import hilock
from helpers import (Stalled, Worker, acquire_interrupted, blocked_clients, blocked_worker,
                     command_calls, join_all,
                     kill_child, pop_json, retry_stalled, start_child_collected, start_holder,
                     wait_blocked, wait_for, waiting_processes, within)

WAKE_MAX = 0.1   # a release must wake a waiter within this
SLACK = 0.5      # scheduling, round trips and the drift allowance


@pytest.fixture(params=[True, False], ids=["shared", "blpop"])
def client(request, rds, redis_url: str):
    """Every test here runs with the shared waiting (one subscriber
    connection per client) and with one BLPOP connection per waiter."""
    c = hilock.Client(redis_url, connect_timeout=2.0, command_timeout=5.0, reconnect=3.0,
                      shared_waiting=request.param)
    try:
        yield c
    finally:
        c.close()


# -- a release wakes a waiter -------------------------------------------------

@pytest.mark.parametrize("family", ["lock", "lease", "rlock"])
def test_release_wakes_blocked_waiter_promptly(family, client, rds, redis_url) -> None:
    other = hilock.Client(redis_url)

    def scenario(i):
        name = f"wake-{i}"
        holder = getattr(other, family)(name, ttl=10.0, auto_renew=False)
        waiter = getattr(client, family)(name, ttl=10.0, auto_renew=False)
        assert holder.acquire(blocking=False)

        def wait_then_release():
            # An rlock belongs to the thread that took it: release it here.
            if not waiter.acquire(True, 8.0):
                return None
            got = time.monotonic()
            seen = (rds.exists(waiter.key), waiter.fence)
            waiter.release()
            return got, seen

        w = blocked_worker(rds, wait_then_release)  # the waiter sits in its BLPOP, told ~10 s
        assert w.is_alive()
        released = time.monotonic()
        holder.release()
        res = w.outcome(10.0)
        assert res is not None, "the waiter timed out"
        got, (existed, fence) = res
        assert existed == 1 and fence > holder.fence
        # The holder's old grant is gone; the waiter released its own.
        with pytest.raises(hilock.LockNotOwnedError):
            holder.release()
        assert rds.exists(waiter.key) == 0
        within(got - released, WAKE_MAX, "waiter woke after the release (TTL 10 s)")

    try:
        retry_stalled(scenario)
    finally:
        other.close()


# -- holders that go away without a release ------------------------------------

def test_sigkilled_holder_wakes_blocked_waiter_at_ttl(client, rds, redis_url) -> None:
    ttl = 1.0

    def scenario(i):
        name = f"killed-{i}"
        # The holder's watchdog renews its lock (the default).
        p, grant = start_holder(rds, redis_url, lambda c: c.lock(name, ttl=ttl),
                                start=start_child_collected)
        try:
            waiter = client.lock(name, ttl=5.0, auto_renew=False)
            w = blocked_worker(rds, waiter.acquire, True, 10.0)
            # The holder renews: the waiter stays blocked well past one TTL.
            time.sleep(1.6 * ttl)
            if not w.is_alive():
                # A live holder's lease can lapse only if its renewal thread
                # was starved for most of a TTL.
                w.join()
                waiter.release()
                raise Stalled("the live holder's lease lapsed")
            assert rds.get(waiter.key) == grant["token"].encode()
        finally:
            kill_child(p)
        killed = time.monotonic()
        assert p.exitcode == -9

        assert w.outcome(ttl + SLACK + 5.0) is True
        took = w.finished_at - killed
        assert waiter.fence > grant["fence"]
        assert rds.get(waiter.key) == waiter.token.encode()
        waiter.release()
        # The key lapses one TTL after the holder's last renewal, which came
        # at most ttl/3 (plus a batch) before the kill.
        assert took >= ttl / 2, f"waiter got the lock only {took:.3f} s after SIGKILL"
        within(took, ttl + SLACK, "waiter got the dead holder's lock after SIGKILL",
               stall_limit=2 * ttl + SLACK)

    retry_stalled(scenario)


@pytest.mark.parametrize("how", ["plain-del", "expiry"])
def test_vanished_key_does_not_strand_waiters(how, client, rds) -> None:
    """Nobody pushes a wake-up when a key is deleted by a plain DEL or simply
    expires; the waiters still get the lock within the TTL they were told."""
    ttl = 1.2

    def scenario(i):
        name = f"vanish-{i}"
        holder = client.lock(name, ttl=ttl, auto_renew=False)
        before_grant = time.monotonic()
        assert holder.acquire(blocking=False)
        waiters = [client.lock(name, ttl=5.0, auto_renew=False) for _ in range(2)]

        def take(lk):
            if not lk.acquire(timeout=ttl + 5.0):
                return None
            got = time.monotonic()
            lk.release()  # wakes the other waiter at once
            return got

        ws = [Worker(take, lk) for lk in waiters]
        for w in ws:
            w.start()
        wait_blocked(rds, 2)
        deleted = None
        if how == "plain-del":
            assert rds.delete(holder.key) == 1  # no push to the wake list
            deleted = time.monotonic()
        got = [w.outcome(ttl + SLACK + 5.0) for w in ws]
        assert all(g is not None for g in got), "a waiter never got the lock"
        with pytest.raises(hilock.LockNotOwnedError):
            holder.release()
        assert rds.exists(holder.key) == 0
        if how == "expiry":
            # None got it before the holder's TTL ran out.
            assert min(got) - before_grant >= ttl - 0.01, "a waiter got the lock before expiry"
        else:
            assert min(got) > deleted
        # Told at most `ttl` when they blocked: none waits longer than that.
        within(max(got) - before_grant, ttl + SLACK, "a waiter was stranded (told 1.2 s)",
               stall_limit=2 * ttl)

    retry_stalled(scenario)


# -- no polling, no herd --------------------------------------------------------

def test_blocked_waiter_does_not_poll(client, rds) -> None:
    holder = client.lock("quiet", ttl=10.0, auto_renew=False)
    waiter = client.lock("quiet", ttl=10.0, auto_renew=False)
    assert holder.acquire(blocking=False)
    rds.config_resetstat()
    t0 = time.monotonic()
    assert waiter.acquire(timeout=1.5) is False
    took = time.monotonic() - t0
    calls = command_calls(rds)
    # Bounded by the timeout, not the holder's 10 s TTL; 2 s over it leaves
    # room for a stalled, loaded machine.
    assert 1.5 <= took < 1.5 + 2.0, f"took {took:.3f} s"
    scripts = calls.get("evalsha", 0) + calls.get("eval", 0)
    assert 1 <= scripts <= 2, f"waiter ran the acquire script {scripts} times in 1.5 s: {calls}"
    assert calls.get("blpop", 0) <= 2, f"waiter sent {calls.get('blpop')} BLPOPs: {calls}"
    holder.release()


def _herd_waiter(url: str, name: str) -> None:
    """Acquire name, say so, hold it until told to go, release."""
    r = redis.Redis.from_url(url)
    c = hilock.Client(url)
    lk = c.lock(name, ttl=10.0, auto_renew=False)
    if not lk.acquire(timeout=20):
        raise RuntimeError("waiter never got the lock")
    r.rpush("got", json.dumps({"pid": os.getpid(), "fence": lk.fence, "t": time.monotonic()}))
    if r.blpop(["go"], timeout=20) is None:
        raise RuntimeError("never told to go")
    lk.release()


def test_one_release_wakes_one_waiter(client, rds, redis_url) -> None:
    n = 4
    # One cycle first, so the server has every script loaded: the counts
    # below must not depend on which tests ran before (a first EVALSHA
    # answered NOSCRIPT is sent again as EVAL).
    with client.lock("herd:warm-up", ttl=10.0, auto_renew=False):
        pass
    holder = client.lock("herd", ttl=10.0, auto_renew=False)
    assert holder.acquire(blocking=False)
    procs = [start_child_collected(_herd_waiter, redis_url, "herd") for _ in range(n)]
    try:
        wait_for(lambda: waiting_processes(rds, "hilock:{herd}:*") == n, 10,
                 what=f"{n} waiting processes")
        rds.config_resetstat()
        holder.release()
        first = pop_json(rds, "got", timeout=3)
        assert first is not None, "a release woke no waiter"
        # n - 1 waiters still waiting, and the winner in its BLPOP on
        # "go" (a redis-py call).
        wait_for(lambda: waiting_processes(rds, "hilock:{herd}:*") == n, 3,
                 what=f"{n} waiting")
        time.sleep(0.4)  # room for a herd to show itself
        calls = command_calls(rds)
        scripts = calls.get("evalsha", 0) + calls.get("eval", 0)
        # The release, then one grant (one INCRBY of its fence counter, two
        # SETs: the counter and the lock): nobody else got in. With
        # the shared waiting each process's rung waiter runs its attempt,
        # which pops the wake-up first and goes no further without it.
        assert calls.get("incrby", 0) == 1, f"after one release: {calls}"
        assert calls.get("set", 0) == 2, f"after one release: {calls}"
        assert scripts <= 1 + n, f"{scripts} scripts after one release: a herd woke ({calls})"
        assert rds.llen("got") == 0, "more than one waiter got the lock"
        # At least: a waiter of an earlier test may still be blocked on the
        # server (in BLPOP mode it is counted by blocked_clients).
        assert waiting_processes(rds, "hilock:{herd}:*") >= n, \
            "the other waiters should still be waiting"

        # Hand it on: each release wakes the next; everyone gets a turn.
        rds.rpush("go", *["1"] * n)
        join_all(procs, 20)
    finally:
        for p in procs:
            kill_child(p)
    grants = [json.loads(first)] + [json.loads(x) for x in rds.lrange("got", 0, -1)]
    assert len(grants) == n
    assert len({g["pid"] for g in grants}) == n
    fences = [g["fence"] for g in sorted(grants, key=lambda g: g["t"])]
    assert fences == sorted(fences) and len(set(fences)) == n
    assert rds.exists(holder.key) == 0


# -- timeouts -------------------------------------------------------------------

@pytest.fixture(params=["lock", "rlock"])
def contended(request, client, rds, redis_url):
    """(holder, waiter) of one family on one name; the holder holds it from
    another client (so even an rlock in this thread is someone else's)."""
    other = hilock.Client(redis_url)
    holder = getattr(other, request.param)("busy", ttl=10.0, auto_renew=False)
    waiter = getattr(client, request.param)("busy", ttl=10.0, auto_renew=False)
    assert holder.acquire(blocking=False)
    try:
        yield holder, waiter
    finally:
        try:
            holder.release()
        except hilock.LockError:
            pass
        other.close()


def test_subsecond_timeout_is_honoured(contended, rds) -> None:
    holder, waiter = contended

    def scenario(i):
        for timeout, limit in ((0.15, 0.3), (0.15, 0.3), (0.05, 0.2)):
            t0 = time.monotonic()
            assert waiter.acquire(True, timeout) is False
            took = time.monotonic() - t0
            assert took >= timeout, f"timeout={timeout} returned after {took * 1000:.1f} ms"
            within(took, limit, f"timeout={timeout} returned late")

    retry_stalled(scenario)
    assert waiter.validity == 0.0


def test_zero_timeout_tries_once(contended, rds) -> None:
    holder, waiter = contended
    for call in (lambda: waiter.acquire(timeout=0.0), lambda: waiter.acquire(blocking=False)):
        rds.config_resetstat()
        assert call() is False
        # One try and no wait, as the server counted them.
        calls = command_calls(rds)
        assert calls.get("evalsha", 0) + calls.get("eval", 0) == 1, calls
        assert calls.get("blpop", 0) == 0, calls
    # Free, the single try grants.
    holder.release()
    assert waiter.acquire(timeout=0.0) is True
    waiter.release()


# -- threads, signals, close ------------------------------------------------------

def _count_for(seconds: float) -> int:
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
    return n


def test_blocked_acquire_does_not_stop_other_threads(client, rds) -> None:
    holder = client.lock("gil", ttl=10.0, auto_renew=False)
    assert holder.acquire(blocking=False)

    def scenario(i):
        waiters = [client.lock("gil", ttl=10.0, auto_renew=False) for _ in range(2)]
        baseline = _count_for(0.3)
        ws = [Worker(lk.acquire, True, 1.0) for lk in waiters]
        for w in ws:
            w.start()
        wait_blocked(rds, 2)
        during = _count_for(0.3)
        still_blocked = blocked_clients(rds)
        for w in ws:
            assert w.outcome(5.0) is False
        assert still_blocked == 2
        # With the GIL held by a waiter this thread would barely count at all.
        msg = f"counted {during} in 0.3 s while two threads waited, {baseline} alone"
        if during < baseline * 0.4:
            if during > baseline * 0.05:
                raise Stalled(msg)
            raise AssertionError(msg)

    retry_stalled(scenario)
    holder.release()


def test_ctrl_c_interrupts_blocked_acquire(client, rds) -> None:
    def scenario(i):
        name = f"intr-{i}"
        holder = client.lock(name, ttl=10.0, auto_renew=False)
        waiter = client.lock(name, ttl=10.0, auto_renew=False)
        assert holder.acquire(blocking=False)
        try:
            intr = acquire_interrupted(waiter)

            # Nothing held or left behind by the interrupted waiter.
            assert waiter.validity == 0.0 and waiter.token is None and waiter.lost is False
            assert rds.get(holder.key) == holder.token.encode()
            wait_for(lambda: blocked_clients(rds) == 0, 2.0, what="the BLPOP to be dropped")
            with pytest.raises(hilock.LockNotOwnedError):
                waiter.release()
            # The object still works: the holder's release hands it over.
            w = blocked_worker(rds, waiter.acquire, True, 5.0)
            released = time.monotonic()
            holder.release()
            assert w.outcome(5.0) is True
            waiter.release()
            assert rds.exists(waiter.key) == 0
        finally:
            try:
                holder.release()
            except hilock.LockError:
                pass
        within(intr.caught - intr.sent, 0.25, "KeyboardInterrupt came after SIGINT")
        within(w.finished_at - released, WAKE_MAX, "the interrupted object woke after release")

    retry_stalled(scenario)


def test_close_wakes_blocked_acquire(client, rds, redis_url) -> None:
    holder = client.lock("closing", ttl=10.0, auto_renew=False)
    assert holder.acquire(blocking=False)

    def scenario(i):
        mine = hilock.Client(redis_url)
        waiter = mine.lock("closing", ttl=10.0, auto_renew=False)
        w = blocked_worker(rds, waiter.acquire, True, 8.0)
        closed = time.monotonic()
        mine.close()
        with pytest.raises(hilock.ConnectionError) as info:
            w.outcome(10.0)
        assert info.value.code == hilock._hilock.HILOCK_ECLOSED
        wait_for(lambda: blocked_clients(rds) == 0, 2.0, what="the BLPOP to be dropped")
        assert waiter.validity == 0.0
        with pytest.raises(hilock.ConnectionError):
            waiter.acquire(blocking=False)
        within(w.finished_at - closed, 0.3, "close() ended the wait")

    retry_stalled(scenario)
    # The holder, on another client, is untouched.
    assert rds.get(holder.key) == holder.token.encode()
    holder.release()
