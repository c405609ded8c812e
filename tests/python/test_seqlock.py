"""The sequential lock (ZooKeeper's recipe): sequence numbers and grant
order, the watch on the predecessor (one wake-up per removal, to the
successor only, counted with keyspace notifications), dead and departing
contenders, and 8 processes contending under the history checker.
Contenders that must be killed are processes.

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
from helpers import (FORK, acquire_within, check_default_timeout, check_heartbeat,
                     check_queue_contention, dead_head, grants_after_queueing,
                     interrupted_queued_waiter, join_all, kill_child, let_go, pass_gate, pop_report,
                     new_queue_locks, start_child, start_queued_waiter, wait_for,
                     waiting_processes)
from history import (FifoError, Interval, RedisHistory, check_fences_increase, check_fifo,
                     check_no_overlap)
from helpers import FENCE_AHEAD

NAME = "seq"
QUEUE = f"hilock:{{{NAME}}}:seq:queue"
SESSION = f"hilock:{{{NAME}}}:seq:session"
HOLDER = f"hilock:{{{NAME}}}:seq:holder"
FENCE = f"hilock:{{{NAME}}}:fence"
WAKE = f"hilock:{{{NAME}}}:seq:wake:"


def assert_no_residue(rds: redis.Redis, name: str = NAME) -> None:
    """Only the two counters (sequence, fence) may be left."""
    leftovers = sorted(k.decode() for k in rds.keys(f"hilock:{{{name}}}:*")
                       if not k.decode().endswith((":fence", ":seq:counter")))
    assert leftovers == [], f"keys left behind: {leftovers}"


def _seq(ttl: float = 10.0, session: float = 5.0):
    """make(client, name) for the shared harness: a sequential lock whose
    waiting entries live `session` seconds between re-checks."""
    def make(c, name):
        lk = c.sequential_lock(name, ttl=ttl)
        lk.heartbeat = session
        return lk
    return make


def _sequence(lk):
    return lk.sequence


def _start(url, name=NAME, ttl=10.0, session=5.0, wait=20.0, report="report"):
    return start_queued_waiter(url, _seq(ttl, session), _sequence, name, wait, report)


# -- API ----------------------------------------------------------------------------

def test_acquire_release_and_properties(client, rds) -> None:
    a, b = new_queue_locks(client.sequential_lock, NAME, hilock.SequentialLock,
                           "sequence")
    assert a.key == QUEUE.encode()

    assert a.acquire() is True
    assert rds.hget(HOLDER, "owner") == a.token.encode() and len(a.token) == 32
    assert a.sequence == 1 and a.fence > 10**15  # a new name: the server's clock
    assert rds.zscore(QUEUE, a.token) == 1
    assert a.locked() and a.owned() and 0 < a.validity <= 10.0
    assert b.acquire(blocking=False) is False
    assert b.sequence is None  # a refused try draws no number
    check_default_timeout(b)
    assert b.sequence == 2  # it was enqueued, then left
    assert not b.owned() and b.locked() and a.waiters() == 0
    assert rds.zcard(QUEUE) == 1
    with pytest.raises(hilock.LockNotOwnedError):
        b.release()
    a.release()
    assert not a.locked() and not a.owned() and a.validity == 0.0
    assert_no_residue(rds)
    with pytest.raises(hilock.LockNotOwnedError):
        a.release()
    with b:
        assert b.fence > a.fence and b.sequence == 3
    assert_no_residue(rds)


def test_heartbeat_follows_the_ttl_and_is_settable_within_bounds(client) -> None:
    check_heartbeat(client.sequential_lock)


def test_module_level_sequential_lock_uses_the_environment(default_client_env, rds) -> None:
    with hilock.sequential_lock(NAME, ttl=5, timeout=1) as lk:
        assert rds.hget(HOLDER, "owner") == lk.token.encode()


# -- sequence order -------------------------------------------------------------

def test_sequence_is_visible_while_waiting_and_grants_follow_it(client, rds) -> None:
    holder = client.sequential_lock(NAME)
    rds.set(FENCE, FENCE_AHEAD)  # counts the grants
    assert holder.acquire()
    locks = [client.sequential_lock(NAME) for _ in range(5)]
    # One at a time, so the numbers are known; each is readable while it waits.
    grants = grants_after_queueing(
        holder, locks, lambda i: locks[i].sequence == i + 2 and holder.waiters() == i + 1)
    assert grants == list(range(len(locks)))
    assert [lk.sequence for lk in locks] == [2, 3, 4, 5, 6]
    assert [lk.fence for lk in locks] == [holder.fence + k for k in range(1, 6)]
    assert_no_residue(rds)


def test_eight_processes_history_grants_in_sequence_order(rds, redis_url) -> None:
    # Exclusion, one fence per grant, and sequence order: nobody left the
    # queue, so grant k went to entry k exactly.
    check_queue_contention(rds, redis_url, "seq8", _seq(), _sequence, procs_n=8, budget=600)
    assert_no_residue(rds, "shop:seq8")


def _chaos_loop(url: str, name: str, gate, tag: str) -> None:
    """As the loop of helpers.contend_for_budget, with short sessions, and
    the grant's token published (inside the critical section) so the test
    can find and kill the holder."""
    r = redis.Redis.from_url(url)
    hist = RedisHistory(r, f"{tag}:history")
    lk = hilock.Client(url).sequential_lock(name, ttl=1.0)
    lk.heartbeat = 0.6
    pass_gate(gate)
    while True:
        start = acquire_within(lk, "acquire timed out: the line stalled")
        r.hset(f"{tag}:tokens", lk.token, os.getpid())
        left = r.decr(f"{tag}:budget")
        if left >= 0:
            time.sleep(0.004)
        end = time.monotonic()
        fence, seq = lk.fence, lk.sequence
        lk.release()
        hist.record(start, end, fence, ticket=seq)
        if left < 0:
            return


def test_sigkilled_holders_and_waiters_never_stall_the_line(rds, redis_url) -> None:
    """8 processes; two holders and two waiters are SIGKILLed mid-run. The
    survivors keep mutual exclusion and sequence order, every dead
    contender's turn passes within its session, and its keys lapse."""
    tag, name, ttl = "chaos", "shop:chaos", 1.0
    rds.set(f"{tag}:budget", 300)
    gate = FORK.Event()
    procs = [start_child(_chaos_loop, redis_url, name, gate, tag) for _ in range(8)]
    holder_key = f"hilock:{{{name}}}:seq:holder"
    killed: List[int] = []
    try:
        gate.set()
        for _ in range(2):
            time.sleep(0.3)
            # A live holder: the pid behind the grant's owner token (a
            # killed holder keeps its grant until its session lapses).
            def live_holder():
                owner = rds.hget(holder_key, "owner")
                pid = int(rds.hget(f"{tag}:tokens", owner) or 0) if owner else 0
                return pid if pid and pid not in killed else None
            pid = wait_for(live_holder, 5, interval=0.001, what="a live holder")
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            # A contender that is not the holder (with 8 in a tight loop,
            # almost surely waiting in line).
            time.sleep(0.05)
            owner = rds.hget(holder_key, "owner")
            busy = {int(rds.hget(f"{tag}:tokens", owner) or 0)} if owner else set()
            other = next(p for p in procs if p.pid not in killed and p.pid not in busy)
            os.kill(other.pid, signal.SIGKILL)
            killed.append(other.pid)
        survivors = [p for p in procs if p.pid not in killed]
        join_all(survivors, 40)
    finally:
        for p in procs:
            kill_child(p)
    assert int(rds.get(f"{tag}:budget")) < 0
    hist = RedisHistory(rds, f"{tag}:history").load()
    assert check_no_overlap(hist) == len(hist)
    fences = check_fences_increase(hist)
    check_fifo(hist)  # in grant order the sequence numbers strictly increase
    # Nothing waited on a dead contender for longer than its session: each
    # pause between one recorded grant's release and the next recorded
    # grant holds the killed holders' grants in between (the missing
    # fences, each lasting at most ttl) and at most one dead waiter's window
    # (0.6 s); the rest is margin for a loaded machine.
    ivs = sorted(hist, key=lambda iv: iv.fence)
    gap = max(b.start - a.end - (b.fence - a.fence - 1) * ttl for a, b in zip(ivs, ivs[1:]))
    print(f"\nchaos: {len(hist)} recorded grants, fences up to {fences[-1]}, longest pause "
          f"beyond the dead holders' ttl {gap:.3f} s, killed {killed}")
    assert gap <= 0.6 + 0.6, f"the line stood still {gap:.3f} s beyond dead holders' ttl"
    assert len(fences) >= 250 and len(set(killed)) == 4
    # The dead contenders' entries lapse with their sessions.
    wait_for(lambda: rds.keys(f"hilock:{{{name}}}:seq:[qsh]*") == [], 3,
             what="the dead contenders' keys lapsing")
    assert_no_residue(rds, name)


def test_sequence_checker_catches_a_grant_out_of_order() -> None:
    # Entry 6 served before entry 5, although 5 was live and lower.
    bad = [Interval(1, 0.0, 1.0, 1, 4), Interval(2, 1.0, 2.0, 2, 6), Interval(3, 2, 3, 3, 5)]
    with pytest.raises(FifoError):
        check_fifo(bad)


# -- the watch on the predecessor ------------------------------------------------

class KeyspaceCounter:
    """Counts RPUSH notifications per wake list, from the server's keyspace
    notifications (CONFIG SET notify-keyspace-events Kl), in order."""

    def __init__(self, rds: redis.Redis, pattern: str) -> None:
        self.rds = rds
        rds.config_set("notify-keyspace-events", "Kl")
        self.ps = rds.pubsub()
        self.ps.psubscribe(f"__keyspace@0__:{pattern}")
        self.ps.get_message(timeout=1.0)  # the subscribe confirmation
        self.pushes: List[str] = []

    def drain(self, quiet: float = 0.15) -> List[str]:
        """Collect notifications until none arrives for `quiet` seconds."""
        while True:
            m = self.ps.get_message(timeout=quiet)
            if m is None:
                return self.pushes
            if m["type"] == "pmessage" and m["data"] == b"rpush":
                self.pushes.append(m["channel"].decode().split(":seq:wake:")[1].lstrip("0"))

    def close(self) -> None:
        self.ps.close()
        self.rds.config_set("notify-keyspace-events", "")


def test_each_removal_pushes_to_the_successor_only(client, rds, redis_url) -> None:
    n = 6
    holder = client.sequential_lock(NAME)
    assert holder.acquire()
    counter = KeyspaceCounter(rds, WAKE + "*")
    procs = []
    try:
        seqs: List[int] = []
        for i in range(n):
            # Sessions of 30 s (re-checks every 10 s): only wake-ups move anyone.
            procs.append(_start(redis_url, session=30.0))
            wait_for(lambda: holder.waiters() == i + 1, 5, what=f"contender {i} enqueued")
        wait_for(lambda: waiting_processes(rds, f"hilock:{{{NAME}}}:*") == n, 5, what="all blocked")
        seqs = [int(sc) for _, sc in rds.zrange(QUEUE, 1, -1, withscores=True)]
        assert seqs == list(range(2, n + 2))
        assert counter.drain() == []
        holder.release()
        for i in range(n):
            got = pop_report(rds)
            assert got["pid"] == procs[i].pid and got["order"] == seqs[i], "out of sequence order"
            # Exactly one push, to this contender's own list; the others
            # still block and none of them was pushed.
            assert counter.drain() == [str(seqs[i])], f"pushes after removal {i}"
            counter.pushes.clear()
            # The woken contender's channel goes at its subscriber's next
            # turn (within a second), not on its way to the grant.
            wait_for(lambda: waiting_processes(rds, f"hilock:{{{NAME}}}:*") == n - 1 - i, 5,
                     what=f"{n - 1 - i} still waiting")
            let_go(rds, got)
        join_all(procs, 10)
        # The last release had no successor: no push at all.
        assert counter.drain() == []
    finally:
        counter.close()
        for p in procs:
            kill_child(p)
    assert_no_residue(rds)


def test_sigkilled_holder_passes_the_turn_within_its_session(client, rds, redis_url) -> None:
    ttl = 1.0  # the holder's session; it renews every 1/3 s while alive
    rds.set(FENCE, FENCE_AHEAD)  # counts the grants
    p = _start(redis_url, ttl=ttl)
    try:
        got = pop_report(rds)
        assert got["ok"] and got["order"] == 1
        time.sleep(1.5 * ttl)  # renewed past its first ttl
        waiter = client.sequential_lock(NAME, ttl=10.0)
        waiter.heartbeat = 30.0  # our own re-checks (10 s) must not be what saves us
        result: List[float] = []
        t = threading.Thread(target=lambda: result.append(waiter.acquire(timeout=10)
                                                          and time.monotonic()))
        t.start()
        wait_for(lambda: waiter.sequence == 2, 5, what="waiter enqueued")
        kill_child(p)
        killed = time.monotonic()
        t.join(10)
        assert result and result[0], "never granted"
        took = result[0] - killed
        # Within the dead holder's 1 s session, not at the waiter's own 10 s
        # re-check: 3 s tells the two apart with room for a stalled, loaded
        # machine.
        assert took <= 3.0, f"granted {took:.3f} s after the kill"
        assert (waiter.sequence, waiter.fence) == (2, got["fence"] + 1)
        waiter.release()
    finally:
        kill_child(p)
    assert_no_residue(rds)


def test_sigkilled_waiter_passes_the_turn_within_its_session(client, rds, redis_url) -> None:
    session = 1.0
    holder = client.sequential_lock(NAME, ttl=10.0)  # a dead waiter must not cost this
    rds.set(FENCE, FENCE_AHEAD)  # counts the grants
    assert holder.acquire()
    # The release pushes to the dead predecessor's list, and nobody reads it.
    with dead_head(rds, holder, lambda: _start(redis_url, session=session),
                   lambda: _start(redis_url, session=30.0)) as (got, took):
        assert got["ok"] and got["order"] == 3 and got["fence"] == FENCE_AHEAD + 2
        # Within the dead waiter's 1 s session, not at the successor's own
        # 10 s re-check: 3 s tells the two apart with room for a stalled,
        # loaded machine.
        assert took <= 3.0, f"successor got it {took:.3f} s after the kill"
    assert_no_residue(rds)


# -- leaving ------------------------------------------------------------------------

def test_timed_out_waiters_leave_no_residue(client, rds) -> None:
    holder = client.sequential_lock(NAME)
    assert holder.acquire()
    waiters = [client.sequential_lock(NAME) for _ in range(5)]
    results: List[bool] = []
    threads = [threading.Thread(target=lambda w=w: results.append(w.acquire(timeout=0.4)))
               for w in waiters]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert results == [False] * 5
    assert rds.zcard(QUEUE) == 1 and rds.zcard(SESSION) == 1
    assert rds.keys(WAKE + "*") == []
    assert holder.waiters() == 0
    holder.release()
    assert_no_residue(rds)


def test_interrupted_waiter_leaves_no_residue(client, rds) -> None:
    holder, waiter = interrupted_queued_waiter(client.sequential_lock, NAME)
    assert rds.zcard(QUEUE) == 1 and rds.keys(WAKE + "*") == []
    holder.release()
    assert_no_residue(rds)
    assert waiter.acquire(blocking=False)
    waiter.release()
