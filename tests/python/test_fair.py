"""The fair (FIFO) lock: request order, no barging, heartbeats, dead and
departing waiters, head-only wake-ups, and 8 processes contending under the
history checker. Waiters that must be stopped or killed are processes.

What every lock type shares (try, wait, release, expiry, renewal, loss,
fork, fences, exclusion) is tested in test_contract.py."""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import List

import pytest
import redis

import hilock
from helpers import (check_default_timeout, check_heartbeat, check_queue_contention,
                     contend_for_budget, dead_head, grants_after_queueing,
                     interrupted_queued_waiter, join_all, kill_child, let_go,
                     new_queue_locks, pop_report, start_queued_waiter, wait_for,
                     waiting_processes)
from history import FifoError, Interval, check_fifo, check_no_overlap
from helpers import FENCE_AHEAD

NAME = "fair"
QUEUE = f"hilock:{{{NAME}}}:fair:queue"
BEATS = f"hilock:{{{NAME}}}:fair:heartbeat"
HOLDER = f"hilock:{{{NAME}}}:fair"


def assert_no_waiter_residue(rds: redis.Redis, name: str = NAME) -> None:
    """Nothing of any waiter is left: no queue entry, heartbeat or wake list."""
    leftovers = sorted(k.decode() for k in rds.keys(f"hilock:{{{name}}}:*")
                       if not k.decode().endswith((":fair", ":fence", ":fair:ticket")))
    assert leftovers == [], f"waiter keys left behind: {leftovers}"


def _fair(beat: float = 5.0):
    """make(client, name) for the shared harness: a fair lock whose waits
    heartbeat within `beat` seconds."""
    def make(c, name):
        lk = c.fair_lock(name, ttl=10.0)
        lk.heartbeat = beat
        return lk
    return make


def _ticket(lk):
    return lk.ticket


def _start_waiter(url, name=NAME, beat=5.0, wait=20.0, report="report"):
    return start_queued_waiter(url, _fair(beat), _ticket, name, wait, report)


# -- API ----------------------------------------------------------------------------

def test_acquire_release_and_properties(client, rds) -> None:
    a, b = new_queue_locks(client.fair_lock, NAME, hilock.FairLock, "ticket")
    assert a.key == HOLDER.encode()

    assert a.acquire() is True
    assert rds.get(HOLDER) == a.token.encode() and len(a.token) == 32
    assert a.ticket == 1 and a.fence > 10**15  # a new name: the server's clock
    assert a.locked() and a.owned() and 0 < a.validity <= 10.0
    assert b.acquire(blocking=False) is False
    check_default_timeout(b)
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
        assert b.fence > a.fence and b.ticket == 3
    assert rds.get(HOLDER) is None


def test_heartbeat_follows_the_ttl_and_is_settable_within_bounds(client) -> None:
    check_heartbeat(client.fair_lock)


def test_module_level_fair_lock_uses_the_environment(default_client_env, rds) -> None:
    with hilock.fair_lock(NAME, ttl=5, timeout=1) as lk:
        assert rds.get(HOLDER) == lk.token.encode()


# -- FIFO ---------------------------------------------------------------------------

def test_grant_order_follows_enqueue_order(client, rds) -> None:
    holder = client.fair_lock(NAME)
    rds.set(f"hilock:{{{NAME}}}:fence", FENCE_AHEAD)  # counts the grants
    assert holder.acquire()
    locks = [client.fair_lock(NAME) for _ in range(5)]
    # Enqueued one at a time: a known order.
    grants = grants_after_queueing(holder, locks, lambda i: holder.waiters() == i + 1)
    assert grants == list(range(len(locks)))
    # Enqueue order (tickets) and grant order (fences) recorded on the locks.
    assert [lk.ticket for lk in locks] == [2, 3, 4, 5, 6]
    assert [lk.fence for lk in locks] == [holder.fence + k for k in range(1, 6)]
    assert_no_waiter_residue(rds)


def test_newcomer_never_barges_past_a_stopped_head(client, rds, redis_url) -> None:
    holder = client.fair_lock(NAME)
    newcomer = client.fair_lock(NAME)
    rds.set(f"hilock:{{{NAME}}}:fence", FENCE_AHEAD)  # counts the grants
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
        got = pop_report(rds)
        assert got["ok"] and got["fence"] == holder.fence + 1
        let_go(rds, got)
        join_all([p], 10)
    finally:
        if p.is_alive():
            os.kill(p.pid, signal.SIGCONT)
        kill_child(p)
    assert newcomer.acquire(blocking=False) is True
    newcomer.release()
    assert_no_waiter_residue(rds)


def test_eight_processes_fifo_history_and_fairness(rds, redis_url) -> None:
    procs_n, budget = 8, 800
    # Exclusion, one fence per grant, and FIFO: nobody left the queue, so
    # grant k went to ticket k exactly.
    check_queue_contention(rds, redis_url, "fair8", _fair(), _ticket, procs_n, budget)
    assert rds.exists("hilock:{shop:fair8}:fair") == 0
    assert_no_waiter_residue(rds, "shop:fair8")

    # For comparison only (not asserted: an unfair lock may still share
    # well on a given run): the expiring lock under the same load.
    _, plain_hist, _, _ = contend_for_budget(rds, redis_url, "lock8",
                                             lambda c, name: c.lock(name, ttl=10.0),
                                             lambda lk: None, procs_n, budget)
    assert check_no_overlap(plain_hist) == len(plain_hist)


# -- dead, departing and patient waiters -------------------------------------------

def test_sigkilled_head_is_skipped_within_the_heartbeat_bound(client, rds, redis_url) -> None:
    beat = 1.0  # a waiter re-checks every 1/3 s
    holder = client.fair_lock(NAME, ttl=10.0)  # a dead head must not cost this
    rds.set(f"hilock:{{{NAME}}}:fence", FENCE_AHEAD)  # counts the grants
    assert holder.acquire()
    with dead_head(rds, holder, lambda: _start_waiter(redis_url, beat=beat),
                   lambda: _start_waiter(redis_url, beat=beat)) as (got, took):
        assert got["ok"] and got["fence"] == holder.fence + 1
        # The heartbeat bound (beat + one re-check, 1.33 s); a dead head
        # that kept its place would stall the line for good. 4 s leaves room
        # for a stalled, loaded machine.
        assert took <= 4.0, f"next waiter got it {took:.3f} s after the kill"
        # The dead waiter's entry, heartbeat and wake list went with it.
        assert rds.zcard(QUEUE) == 0
        assert rds.keys(f"hilock:{{{NAME}}}:wake:*") == []
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
    holder, waiter = interrupted_queued_waiter(client.fair_lock, NAME)
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
        holder.release()
        t.join(5)
        # Granted within the join's 5 s, well before its 20 s timeout: the
        # release woke it (how quickly is for the benchmarks).
        assert result == [True]
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
        wait_for(lambda: waiting_processes(rds, f"hilock:{{{NAME}}}:*") == n, 5,
                 what=f"{n} waiters asleep")
        beats = dict(rds.zrange(BEATS, 0, -1, withscores=True))
        holder.release()
        for i in range(n):
            got = pop_report(rds)
            assert got["pid"] == procs[i].pid, "granted out of queue order"
            # Exactly the head woke: the others still block, and none of
            # them ran a re-check (their heartbeat deadlines did not move).
            # The head's channel goes at its subscriber's next turn (within
            # a second), not on its way to the grant.
            wait_for(lambda: waiting_processes(rds, f"hilock:{{{NAME}}}:*") == n - 1 - i, 5,
                     what=f"{n - 1 - i} still waiting")
            now = dict(rds.zrange(BEATS, 0, -1, withscores=True))
            assert now == {k: v for k, v in beats.items() if k in now}
            assert len(now) == n - 1 - i
            assert rds.llen("report") == 0
            let_go(rds, got)
        join_all(procs, 10)
    finally:
        for p in procs:
            kill_child(p)
    assert_no_waiter_residue(rds)


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
