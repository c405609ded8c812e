"""The fair (FIFO) lock: request order, no barging, heartbeats, dead and
departing waiters, head-only wake-ups, and 8 processes contending under the
history checker. Waiters that must be stopped or killed are processes."""
from __future__ import annotations

import json
import os
import pickle
import signal
import statistics
import threading
import time
from typing import Dict, List

import pytest
import redis

import hilock
from helpers import waiting_processes, FORK, join_all, kill_child, pop_json, start_child, wait_for
from history import (FifoError, Interval, RedisHistory, check_fences_increase, check_fifo,
                     check_no_overlap)

NAME = "fair"
QUEUE = f"hilock:{{{NAME}}}:fair:queue"
BEATS = f"hilock:{{{NAME}}}:fair:heartbeat"
HOLDER = f"hilock:{{{NAME}}}:fair"


def assert_no_waiter_residue(rds: redis.Redis, name: str = NAME) -> None:
    """Nothing of any waiter is left: no queue entry, heartbeat or wake list."""
    leftovers = sorted(k.decode() for k in rds.keys(f"hilock:{{{name}}}:*")
                       if not k.decode().endswith((":fair", ":fence", ":fair:ticket")))
    assert leftovers == [], f"waiter keys left behind: {leftovers}"


def _waiter(url: str, name: str, beat: float, wait: float, report: str) -> None:
    """A waiter process: queue (heartbeat window `beat`), report the outcome
    on the `report` list, and on a grant hold until told to release (the
    key go:<pid> appears), then release."""
    r = redis.Redis.from_url(url)
    c = hilock.Client(url)
    lk = c.fair_lock(name, ttl=10.0)
    lk.heartbeat = beat
    ok = lk.acquire(timeout=wait)
    r.rpush(report, json.dumps({"pid": os.getpid(), "ok": ok, "t": time.monotonic(),
                                "ticket": lk.ticket, "fence": lk.fence}))
    if ok:
        while not r.exists(f"go:{os.getpid()}"):
            time.sleep(0.005)
        lk.release()


def _start_waiter(url, name=NAME, beat=5.0, wait=20.0, report="report"):
    return start_child(_waiter, url, name, beat, wait, report)


def _report(rds, key="report", timeout=10.0):
    raw = pop_json(rds, key, timeout)
    assert raw is not None, f"no report on {key!r} within {timeout} s"
    return json.loads(raw)


# -- the threading.Lock contract ----------------------------------------------

def test_acquire_release_and_properties(client, rds) -> None:
    a = client.fair_lock(NAME, ttl=10.0)
    b = client.fair_lock(NAME, ttl=10.0, timeout=0.2)
    assert isinstance(a, hilock.FairLock) and isinstance(a, hilock.LockBase)
    assert a.ttl == 10.0 and a.heartbeat == 5.0 and a.auto_renew is True
    assert a.fence is None and a.ticket is None and a.token is None
    assert a.key == HOLDER.encode()
    assert client.fair_lock("short", ttl=1.5).heartbeat == 1.5
    assert client.fair_lock("tiny", ttl=0.1).heartbeat == 0.5

    assert a.acquire() is True
    assert rds.get(HOLDER) == a.token.encode() and len(a.token) == 32
    assert a.ticket == 1 and a.fence > 10**15  # a new name: the server's clock
    assert a.locked() and a.owned() and 0 < a.validity <= 10.0
    assert b.acquire(blocking=False) is False
    t0 = time.monotonic()
    assert b.acquire() is False  # the object's default timeout, 0.2 s
    assert 0.15 < time.monotonic() - t0 < 1.0
    assert not b.owned() and b.locked()
    assert_no_waiter_residue(rds)
    with pytest.raises(hilock.LockNotOwnedError):
        b.release()
    a.release()
    assert not a.locked() and not a.owned() and a.validity == 0.0
    with pytest.raises(hilock.LockNotOwnedError):
        a.release()
    with b:
        # Ticket 2 went to b's wait that timed out; a ticket marks a request.
        assert (b.fence, b.ticket) == (a.fence + 1, 3)
    assert rds.get(HOLDER) is None


def test_arguments_and_errors(client) -> None:
    lk = client.fair_lock(NAME)
    with pytest.raises(ValueError):
        lk.acquire(blocking=False, timeout=1.0)
    with pytest.raises(hilock.InvalidArgument):
        lk.heartbeat = 0.2
    with pytest.raises(hilock.InvalidArgument):
        client.fair_lock(NAME, ttl=0)
    with pytest.raises(hilock.InvalidArgument):
        client.fair_lock("}bad")
    with pytest.raises(hilock.InvalidArgument):
        client.fair_lock(NAME, on_lost=42)
    with pytest.raises(TypeError):
        pickle.dumps(lk)
    lk.heartbeat = 1.25
    assert lk.heartbeat == 1.25
    assert lk.acquire()
    with pytest.raises(hilock.InvalidArgument):
        lk.extend(-1)
    lk.extend(20, replace=True)
    assert 19.0 < lk.validity <= 20.0
    lk.renew()
    assert lk.validity <= 30.0
    lk.release()


def test_context_manager_timeout_never_runs_body(client) -> None:
    holder = client.fair_lock(NAME)
    assert holder.acquire()
    ran = []
    with pytest.raises(hilock.LockTimeout):
        with client.fair_lock(NAME, timeout=0.2):
            ran.append(1)
    assert ran == []
    holder.release()


def test_module_level_fair_lock_uses_the_environment(monkeypatch, rds, redis_url) -> None:
    monkeypatch.setenv("HILOCK_URL", redis_url)
    monkeypatch.setattr(hilock._client, "_default", None)
    with hilock.fair_lock(NAME, ttl=5, timeout=1) as lk:
        assert rds.get(HOLDER) == lk.token.encode()


def test_second_thread_on_one_object_waits_for_release(client) -> None:
    lk = client.fair_lock(NAME)
    assert lk.acquire()
    got: List[float] = []
    t = threading.Thread(target=lambda: got.append(lk.acquire(timeout=5) and time.monotonic()))
    t.start()
    time.sleep(0.2)
    assert got == []
    released = time.monotonic()
    lk.release()
    t.join(5)
    assert got and got[0] - released < 0.5
    lk.release()


def test_forked_child_cannot_release_the_parents_grant(client, rds, redis_url) -> None:
    lk = client.fair_lock(NAME)
    assert lk.acquire()

    def child():
        try:
            lk.release()
        except hilock.ForkedLockError:
            return
        raise AssertionError("the child released its parent's grant")

    p = start_child(child)
    join_all([p], 10)
    assert rds.get(HOLDER) == lk.token.encode()
    lk.release()


# -- FIFO ---------------------------------------------------------------------------

def test_grant_order_follows_enqueue_order(client, rds) -> None:
    holder = client.fair_lock(NAME)
    assert holder.acquire()
    grants: List[int] = []
    mu = threading.Lock()
    locks = [client.fair_lock(NAME) for _ in range(5)]

    def wait_turn(i: int) -> None:
        lk = locks[i]
        assert lk.acquire(timeout=10)
        with mu:
            grants.append(i)
        time.sleep(0.005)
        lk.release()

    threads = []
    for i in range(len(locks)):  # enqueue one at a time: a known order
        threads.append(threading.Thread(target=wait_turn, args=(i,)))
        threads[-1].start()
        wait_for(lambda: holder.waiters() == i + 1, 5, what=f"waiter {i} queued")
    holder.release()
    for t in threads:
        t.join(10)
    assert grants == list(range(len(locks)))
    # Enqueue order (tickets) and grant order (fences) recorded on the locks.
    assert [lk.ticket for lk in locks] == [2, 3, 4, 5, 6]
    assert [lk.fence for lk in locks] == [holder.fence + k for k in range(1, 6)]
    assert_no_waiter_residue(rds)


def test_newcomer_never_barges_past_a_stopped_head(client, rds, redis_url) -> None:
    holder = client.fair_lock(NAME)
    newcomer = client.fair_lock(NAME)
    assert holder.acquire()
    p = _start_waiter(redis_url, beat=3.0)
    try:
        wait_for(lambda: holder.waiters() == 1, 5, what="waiter queued")
        os.kill(p.pid, signal.SIGSTOP)  # alive (heartbeat good for 3 s), not running
        holder.release()
        # Free, but reserved for the head: nobody else gets in.
        assert newcomer.locked() is False
        assert newcomer.acquire(blocking=False) is False
        assert newcomer.acquire(timeout=0.3) is False
        assert holder.acquire(blocking=False) is False
        assert rds.get(HOLDER) is None
        assert newcomer.waiters() == 1
        os.kill(p.pid, signal.SIGCONT)
        got = _report(rds)
        assert got["ok"] and got["fence"] == holder.fence + 1
        rds.set(f"go:{got['pid']}", 1)
        join_all([p], 10)
    finally:
        if p.is_alive():
            os.kill(p.pid, signal.SIGCONT)
        kill_child(p)
    assert newcomer.acquire(blocking=False) is True
    newcomer.release()
    assert_no_waiter_residue(rds)


def _contender(url: str, kind: str, name: str, gate, tag: str, hold: float) -> None:
    """Take the lock until the shared budget of grants is spent, recording
    each critical section with its fence (grant order) and, for the fair
    lock, its ticket (request order)."""
    r = redis.Redis.from_url(url)
    hist = RedisHistory(r, f"{tag}:history")
    c = hilock.Client(url)
    lk = c.fair_lock(name, ttl=10.0) if kind == "fair" else c.lock(name, ttl=10.0)
    n = 0
    if not gate.wait(20):
        raise RuntimeError("start gate never opened")
    while True:
        if not lk.acquire(timeout=20):
            raise RuntimeError("acquire timed out: the queue stalled")
        start = time.monotonic()
        left = r.decr(f"{tag}:budget")
        if left >= 0:
            time.sleep(hold)
            n += 1
        end = time.monotonic()
        fence, ticket = lk.fence, getattr(lk, "ticket", None)
        lk.release()
        hist.record(start, end, fence, ticket=ticket)
        if left < 0:
            break
    r.rpush(f"{tag}:count", f"{os.getpid()}:{n}")


def _contend(rds, url: str, kind: str, procs_n: int, budget: int):
    """procs_n processes spend a budget of grants on one lock; returns
    (grants per pid, history, seconds, fairness = fewest/mean)."""
    tag = f"{kind}{procs_n}"
    rds.set(f"{tag}:budget", budget)
    gate = FORK.Event()
    procs = [start_child(_contender, url, kind, f"shop:{tag}", gate, tag, 0.001)
             for _ in range(procs_n)]
    time.sleep(0.05)
    t0 = time.monotonic()
    gate.set()
    join_all(procs, 45)
    took = time.monotonic() - t0
    counts: Dict[int, int] = {}
    for item in rds.lrange(f"{tag}:count", 0, -1):
        pid, n = item.decode().split(":")
        counts[int(pid)] = int(n)
    hist = RedisHistory(rds, f"{tag}:history").load()
    fairness = min(counts.values()) / statistics.mean(counts.values()) if counts else 0.0
    print(f"\n{kind}: {procs_n} processes, {budget} grants in {took:.2f} s, per-process "
          f"counts {sorted(counts.values())}, fairness (fewest/mean) {fairness:.3f}")
    return counts, hist, took, fairness


def test_eight_processes_fifo_history_and_fairness(rds, redis_url) -> None:
    procs_n, budget = 8, 800
    counts, hist, took, fairness = _contend(rds, redis_url, "fair", procs_n, budget)
    assert len(counts) == procs_n and sum(counts.values()) == budget
    assert len(hist) == budget + procs_n  # one last look each at the spent budget

    # Mutual exclusion, and one fence per grant with none missing.
    assert check_no_overlap(hist) == len(hist)
    fences = check_fences_increase(hist)
    assert fences == list(range(fences[0], fences[0] + len(hist)))
    # FIFO: in grant order the request tickets strictly increase. Nobody
    # left the queue, so grant k went to ticket k exactly.
    assert check_fifo(hist) == list(range(1, len(hist) + 1))
    # Strict FIFO with every process re-queueing at once is a round robin;
    # the margin is for processes descheduled on a busy machine.
    assert fairness >= 0.7, f"fewest/mean = {fairness:.3f}: {counts}"
    assert rds.exists("hilock:{shop:fair8}:fair") == 0
    assert_no_waiter_residue(rds, "shop:fair8")

    # For comparison only (not asserted: an unfair lock may still share
    # well on a given run): the expiring lock under the same load.
    _, plain_hist, _, _ = _contend(rds, redis_url, "lock", procs_n, budget)
    assert check_no_overlap(plain_hist) == len(plain_hist)


# -- dead, departing and patient waiters -------------------------------------------

def test_sigkilled_head_is_skipped_within_the_heartbeat_bound(client, rds, redis_url) -> None:
    beat = 1.0  # a waiter re-checks every 1/3 s
    holder = client.fair_lock(NAME, ttl=10.0)  # a dead head must not cost this
    assert holder.acquire()
    head = _start_waiter(redis_url, beat=beat)
    second = None
    try:
        wait_for(lambda: holder.waiters() == 1, 5, what="head queued")
        second = _start_waiter(redis_url, beat=beat)
        wait_for(lambda: holder.waiters() == 2, 5, what="second queued")
        kill_child(head)
        killed = time.monotonic()
        holder.release()  # wakes the dead head, and only it
        got = _report(rds)
        took = got["t"] - killed
        assert got["ok"] and got["pid"] == second.pid and got["fence"] == holder.fence + 1
        assert took <= beat + beat / 3 + 0.6, f"next waiter got it {took:.3f} s after the kill"
        # The dead waiter's entry, heartbeat and wake list went with it.
        assert rds.zcard(QUEUE) == 0
        assert rds.keys(f"hilock:{{{NAME}}}:wake:*") == []
        rds.set(f"go:{got['pid']}", 1)
        join_all([second], 10)
    finally:
        kill_child(head)
        if second is not None:
            kill_child(second)
    assert_no_waiter_residue(rds)


def test_timed_out_waiter_leaves_no_queue_entry(client, rds) -> None:
    holder = client.fair_lock(NAME)
    assert holder.acquire()
    waiter = client.fair_lock(NAME)
    assert waiter.acquire(timeout=0.3) is False
    assert waiter.waiters() == 0
    assert_no_waiter_residue(rds)
    with pytest.raises(hilock.LockTimeout):
        with client.fair_lock(NAME, timeout=0.2):
            pass
    assert_no_waiter_residue(rds)
    holder.release()


def test_interrupted_waiter_leaves_no_queue_entry(client, rds) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.fail("signals need the main thread")
    holder = client.fair_lock(NAME)
    assert holder.acquire()
    waiter = client.fair_lock(NAME)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    caught = False
    try:
        timer.start()
        try:
            waiter.acquire(timeout=5.0)
            time.sleep(1.0)
        except KeyboardInterrupt:
            caught = True
    finally:
        timer.cancel()
        timer.join(5)
        signal.signal(signal.SIGINT, old)
    assert caught
    assert not waiter.owned()
    assert_no_waiter_residue(rds)
    holder.release()
    assert waiter.acquire(blocking=False)
    waiter.release()


def test_live_waiter_outwaits_many_heartbeat_windows(client, rds) -> None:
    """A waiter is never dropped for waiting long, only for going silent
    (unlike a fixed wait budget, Redisson #3004)."""
    holder = client.fair_lock(NAME)
    assert holder.acquire()
    waiter = client.fair_lock(NAME)
    waiter.heartbeat = 1.0
    result: List[object] = []
    t = threading.Thread(target=lambda: result.append(waiter.acquire(timeout=20)))
    t.start()
    try:
        wait_for(lambda: holder.waiters() == 1, 5, what="waiter queued")
        for _ in range(25):  # 2.5 windows
            time.sleep(0.1)
            # Its deadline keeps moving ahead of the server's clock.
            (member, deadline), = rds.zrange(BEATS, 0, -1, withscores=True)
            secs, micros = rds.time()
            assert 0 < deadline - (secs * 1000 + micros // 1000) <= 1000
            assert rds.zcard(QUEUE) == 1 and holder.waiters() == 1
        released = time.monotonic()
        holder.release()
        t.join(5)
        assert result == [True]
        assert time.monotonic() - released < 0.5
    finally:
        if holder.owned():
            holder.release()
        t.join(5)
    waiter.release()
    assert_no_waiter_residue(rds)


def test_wake_ups_go_to_the_head_only(client, rds, redis_url) -> None:
    n = 4
    holder = client.fair_lock(NAME)
    assert holder.acquire()
    procs = []
    try:
        for i in range(n):
            # Re-checks every 10 s: during the test only wake-ups move anyone.
            procs.append(_start_waiter(redis_url, beat=30.0))
            wait_for(lambda: holder.waiters() == i + 1, 5, what=f"waiter {i} queued")
        time.sleep(0.05)
        assert waiting_processes(rds) == n
        beats = dict(rds.zrange(BEATS, 0, -1, withscores=True))
        holder.release()
        for i in range(n):
            got = _report(rds)
            assert got["pid"] == procs[i].pid, "granted out of queue order"
            # Exactly the head woke: the others still block, and none of
            # them ran a re-check (their heartbeat deadlines did not move).
            # The head's channel goes at its subscriber's next turn (within
            # a second), not on its way to the grant.
            wait_for(lambda: waiting_processes(rds) == n - 1 - i, 5,
                     what=f"{n - 1 - i} still waiting")
            now = dict(rds.zrange(BEATS, 0, -1, withscores=True))
            assert now == {k: v for k, v in beats.items() if k in now}
            assert len(now) == n - 1 - i
            assert rds.llen(f"report") == 0
            rds.set(f"go:{got['pid']}", 1)
        join_all(procs, 10)
    finally:
        for p in procs:
            kill_child(p)
    assert_no_waiter_residue(rds)


# -- renewal ---------------------------------------------------------------------------

def test_auto_renew_by_default_and_loss_reported(client, rds) -> None:
    lost: List[object] = []
    lk = client.fair_lock(NAME, ttl=0.5, on_lost=lost.append)
    with pytest.raises(hilock.LockLost):
        with lk:
            time.sleep(1.2)  # past two TTLs: renewed
            assert lk.owned()
            rds.set(HOLDER, "someone else")
            wait_for(lambda: lk.lost, 2, what="loss detected")
    wait_for(lambda: lost == [lk], 2, what="on_lost called")
    assert lk.validity == 0.0

    plain = client.fair_lock("plain", ttl=0.3, auto_renew=False)
    assert plain.acquire()
    time.sleep(0.45)
    assert not plain.owned()


# -- the checker on its own ---------------------------------------------------------------

def test_fifo_checker_reports_grants_out_of_request_order() -> None:
    ok = [Interval(1, 0.0, 1.0, 1, 4), Interval(2, 1.0, 2.0, 2, 7), Interval(3, 2, 3, 3, 9)]
    assert check_fifo(reversed(ok)) == [4, 7, 9]
    # Ticket 5 asked before ticket 6 but was served after it.
    bad = [Interval(1, 0.0, 1.0, 1, 4), Interval(2, 1.0, 2.0, 2, 6), Interval(3, 2, 3, 3, 5)]
    with pytest.raises(FifoError) as info:
        check_fifo(bad)
    assert "ticket 6" in str(info.value) and "ticket 5" in str(info.value)
    with pytest.raises(FifoError):
        check_fifo([Interval(1, 0.0, 1.0, 1, None)])
