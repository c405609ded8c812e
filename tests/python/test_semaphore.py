"""The counting semaphore: the Python API, the stored limit, renewal and
loss, dead holders, fork, and the main claim under fire: 16 processes on 3
permits, with holders SIGKILLed at random, never have more than 3 inside at
once, and every permit is free again within one TTL after the killing stops.

The same harness run with the seeds' INCR/DECR counter, and with no
semaphore at all, must fail those checks: the checks can fail. What every
lock type shares is tested in test_contract.py (1 permit, and 3 under the
history checker).
"""
from __future__ import annotations

import json
import os
import pickle
import random
import signal
import threading
import time
import warnings
from typing import Dict, List, Optional, Tuple

import pytest
import redis

import hilock
from helpers import (FORK, NoLock, Worker, interrupt_acquire, join_all, kill_child, pass_gate,
                     run_in_threads, start_child, start_holder, wait_for)
from history import (ConcurrencyError, Interval, OverlapError, RedisHistory,
                     check_max_concurrent, check_no_overlap)


def permits_of(rds: redis.Redis, name: str) -> Dict[str, float]:
    return {k.decode(): v for k, v in rds.zrange(f"hilock:{{{name}}}:permits", 0, -1,
                                                 withscores=True)}


def server_ms(rds: redis.Redis) -> int:
    sec, usec = rds.time()
    return sec * 1000 + usec // 1000


# -- acquire / release / available / locked -----------------------------------

def test_permits_up_to_the_limit(client, rds) -> None:
    sems = [client.semaphore("pool", 3, ttl=10) for _ in range(4)]
    assert sems[0].available() == 3 and sems[0].locked() is False
    for i in range(3):
        assert sems[i].acquire(blocking=False) is True
        assert sems[3].available() == 2 - i
    assert sems[3].acquire(blocking=False) is False
    assert sems[3].locked() is True
    assert sems[3].permit_id is None and sems[3].owned() is False

    # One member per holder, its score the expiry on the server's clock.
    held = permits_of(rds, "pool")
    assert sorted(held) == sorted(s.permit_id for s in sems[:3])
    now = server_ms(rds)
    assert all(now + 9000 <= score <= now + 10000 for score in held.values())
    assert rds.get("hilock:{pool}:limit") == b"3"
    assert all(s.owned() for s in sems[:3])
    assert sems[0].key == b"hilock:{pool}:permits"
    assert sems[0].ttl == 10.0 and sems[0].permits == 3 and sems[0].fence is None

    sems[1].release()
    assert sems[1].permit_id is None and sems[1].validity == 0.0
    assert sems[3].acquire(blocking=False) is True
    for s in (sems[0], sems[2], sems[3]):
        s.release()
    assert rds.exists("hilock:{pool}:permits") == 0
    assert sems[0].available() == 3


def test_release_without_a_permit_raises(client) -> None:
    sem = client.semaphore("unheld", 2)
    with pytest.raises(hilock.LockNotOwnedError) as info:
        sem.release()
    assert isinstance(info.value, RuntimeError)
    assert sem.acquire()
    sem.release()
    with pytest.raises(hilock.LockNotOwnedError):
        sem.release()
    with pytest.raises(hilock.LockNotOwnedError):
        sem.renew()


def test_timeout_returns_false_after_timeout(client) -> None:
    holder = client.semaphore("full", 1, ttl=10)
    assert holder.acquire()
    sem = client.semaphore("full", 1, ttl=10, timeout=0.3)
    t0 = time.monotonic()
    assert sem.acquire(timeout=0.3) is False
    # Bounded by the timeout, not the renewed holder's endless hold; 2.5 s
    # leaves room for a stalled, loaded machine.
    assert 0.28 <= time.monotonic() - t0 < 2.5
    t0 = time.monotonic()
    assert sem.acquire() is False  # the object's default timeout
    assert 0.28 <= time.monotonic() - t0 < 2.5
    with pytest.raises(hilock.InvalidArgument):
        sem.acquire(blocking=False, timeout=1)
    holder.release()


def test_context_manager(client, rds) -> None:
    sem = client.semaphore("ctx", 1, ttl=10, timeout=0.2)
    with sem as s:
        assert s is sem
        assert sem.owned() and rds.zcard("hilock:{ctx}:permits") == 1
        ran = []
        with pytest.raises(hilock.LockTimeout):
            with client.semaphore("ctx", 1, timeout=0.2):
                ran.append(1)
        assert ran == []
    assert rds.exists("hilock:{ctx}:permits") == 0
    with pytest.raises(ZeroDivisionError):
        with sem:
            1 / 0
    assert sem.available() == 1


def test_release_wakes_a_waiter_soon(client) -> None:
    holders = [client.semaphore("wake", 2, ttl=10) for _ in range(2)]
    for h in holders:
        assert h.acquire()
    waiter = client.semaphore("wake", 2, ttl=10)
    got: List[float] = []
    t = threading.Thread(target=lambda: got.append(time.monotonic())
                         if waiter.acquire(timeout=8) else None)
    t.start()
    wait_for(lambda: client.waiting == 1, 5, what="the waiter to wait")
    assert got == []
    holders[0].release()
    t.join(5)
    # Woken by the release: the holders renew their 10 s TTL and the waiter
    # gives up after 8 s, so only the release grants it within the join's
    # 5 s (how quickly is for the benchmarks).
    assert got, "the waiter was not granted"
    holders[1].release()


# -- threads sharing one object --------------------------------------------------

def test_threads_share_one_object_up_to_the_limit(client) -> None:
    sem = client.semaphore("shared", 2, ttl=10)
    inside = [0]
    peak = [0]
    mu = threading.Lock()

    def worker(_i: int) -> None:
        for _ in range(10):
            with sem:
                assert sem.held_count() == 1 and sem.permit_id is not None
                with mu:
                    inside[0] += 1
                    peak[0] = max(peak[0], inside[0])
                time.sleep(0.005)
                with mu:
                    inside[0] -= 1

    run_in_threads(worker, 6, 30)
    assert peak[0] == 2
    assert sem.available() == 2


def test_permit_belongs_to_the_thread_that_took_it(client) -> None:
    sem = client.semaphore("mine", 3, ttl=10)
    assert sem.acquire() and sem.acquire()
    assert sem.held_count() == 2 and sem.available() == 1
    first_two = set(permits_of_sem(sem))

    def other() -> None:
        assert sem.held_count() == 0 and sem.owned() is False
        sem.release()

    with pytest.raises(hilock.LockNotOwnedError):
        Worker(other).outcome(5)
    assert set(permits_of_sem(sem)) == first_two
    sem.release()
    sem.release()
    assert sem.held_count() == 0 and sem.available() == 3


def permits_of_sem(sem: hilock.Semaphore) -> List[str]:
    r = redis.Redis.from_url(sem._client.url)
    try:
        return [m.decode() for m in r.zrange(sem.key, 0, -1)]
    finally:
        r.close()


def test_keyboard_interrupt_stops_a_blocked_acquire(client) -> None:
    holder = client.semaphore("ctrl-c", 1, ttl=30)
    assert holder.acquire()
    sem = client.semaphore("ctrl-c", 1, ttl=30)
    intr = interrupt_acquire(sem)
    # Raised inside the wait, not when its 5 s timeout ends it: 3 s tells
    # the two apart with room for a stalled, loaded machine.
    assert intr.caught is not None and intr.caught - intr.began < 3.0
    # The interrupted waiter holds nothing and stays usable.
    assert sem.held_count() == 0 and sem.owned() is False
    holder.release()
    assert sem.acquire(blocking=False)
    sem.release()
    assert sem.available() == 1


# -- the limit ---------------------------------------------------------------------

def test_stored_limit_wins_until_set_limit(client, rds) -> None:
    two = client.semaphore("cfg", 2)
    five = [client.semaphore("cfg", 5) for _ in range(3)]
    assert five[0].limit == 5          # nothing stored yet
    assert rds.exists("hilock:{cfg}:limit") == 0
    assert two.acquire(blocking=False)
    assert five[0].limit == 2 and five[0].permits == 5
    assert five[0].acquire(blocking=False)
    assert five[1].acquire(blocking=False) is False

    five[2].set_limit(3)
    assert two.get_limit() == 3
    assert five[1].acquire(blocking=False)
    assert five[2].available() == 0
    two.limit = 4
    assert rds.get("hilock:{cfg}:limit") == b"4"
    assert five[2].acquire(blocking=False)
    for s in (two, five[0], five[1], five[2]):
        s.release()


def test_set_limit_wakes_waiters_and_revokes_nothing(client, rds) -> None:
    holder = client.semaphore("gate", 1, ttl=10)
    assert holder.acquire()
    waiter = client.semaphore("gate", 1, ttl=10)   # shared by two threads
    got: List[float] = []
    done = threading.Event()

    def wait_then_hold() -> None:
        if waiter.acquire(timeout=8):
            got.append(time.monotonic())
            done.wait(10)
            waiter.release()

    threads = [threading.Thread(target=wait_then_hold) for _ in range(2)]
    for t in threads:
        t.start()
    wait_for(lambda: client.waiting == 2, 5, what="both threads to wait")
    assert got == []
    raised = time.monotonic()
    holder.set_limit(3)
    wait_for(lambda: len(got) == 2, 5.0, what="both waiters granted")
    # Woken by set_limit, not by the 10 s TTL or their 8 s timeout: 4 s
    # tells the two apart with room for a stalled, loaded machine.
    assert max(got) - raised < 4.0

    holder.set_limit(0)  # closes the gate; nobody loses a permit
    assert holder.owned() and rds.zcard(holder.key) == 3
    assert holder.available() == 0
    holder.release()
    assert client.semaphore("gate", 5).acquire(blocking=False) is False
    done.set()
    for t in threads:
        t.join(5)
    assert rds.exists(holder.key) == 0


def test_thread_ending_with_a_permit_stops_renewing_it(client, rds) -> None:
    sem = client.semaphore("orphan", 2, ttl=0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = threading.Thread(target=sem.acquire)
        t.start()
        t.join(5)
        wait_for(lambda: any(issubclass(w.category, ResourceWarning) for w in caught), 2.0,
                 what="a ResourceWarning for the orphaned permit")
    assert "lapse at their TTL" in str(caught[-1].message)
    assert rds.zcard(sem.key) == 1
    # Not renewed for as long as the object lives: it lapses at its TTL.
    wait_for(lambda: sem.available() == 2, 1.5, what="the orphaned permit to lapse")
    assert sem.acquire(blocking=False) and sem.acquire(blocking=False)
    sem.release()
    sem.release()


@pytest.mark.parametrize("bad", [0, -1, 2 ** 31 + 1, 1.5, "3", True, None])
def test_bad_permits_are_invalid_argument(bad, client) -> None:
    with pytest.raises(hilock.InvalidArgument):
        client.semaphore("bad", bad)


@pytest.mark.parametrize("bad", [-1, 2 ** 31 + 1, 2.0, "1", False])
def test_bad_limits_are_invalid_argument(bad, client, rds) -> None:
    sem = client.semaphore("badlimit", 2)
    with pytest.raises(hilock.InvalidArgument):
        sem.set_limit(bad)
    assert rds.exists("hilock:{badlimit}:limit") == 0


def test_other_bad_arguments(client) -> None:
    with pytest.raises(hilock.InvalidArgument):
        client.semaphore("x", 2, ttl=0)
    with pytest.raises(hilock.InvalidArgument):
        client.semaphore("x", 2, timeout=-1)
    with pytest.raises(hilock.InvalidArgument):
        client.semaphore("}x", 2)
    with pytest.raises(hilock.InvalidArgument):
        client.semaphore("x", 2, on_lost=3)
    with pytest.raises(TypeError):
        pickle.dumps(client.semaphore("x", 2))


def test_damaged_limit_fails_closed_but_release_works(client, rds) -> None:
    sem = client.semaphore("dmg", 2, ttl=10)
    assert sem.acquire()
    rds.set("hilock:{dmg}:limit", "many")
    other = client.semaphore("dmg", 2)
    with pytest.raises(hilock.RedisError) as info:
        other.acquire(blocking=False)
    assert "no permit count" in str(info.value)
    assert other.permit_id is None
    sem.release()
    assert rds.exists("hilock:{dmg}:permits") == 0


# -- expiry, renewal, loss ----------------------------------------------------------

def test_expired_permit_release_changes_nothing(client, rds) -> None:
    old = client.semaphore("lapse", 2, ttl=0.2, auto_renew=False)
    live = client.semaphore("lapse", 2, ttl=10)
    assert old.acquire() and live.acquire()
    before = permits_of(rds, "lapse")[live.permit_id]
    time.sleep(0.35)
    assert old.validity == 0.0
    with pytest.raises(hilock.LockNotOwnedError):
        old.release()
    assert permits_of(rds, "lapse") == {live.permit_id: before}
    live.release()


def test_lost_permit_calls_back_and_with_raises(client, rds) -> None:
    called = threading.Event()
    seen = []
    sem = client.semaphore("lost", 2, ttl=0.6,
                           on_lost=lambda s: (seen.append(s), called.set()))
    with pytest.raises(hilock.LockLost):
        with sem:
            rds.zrem(sem.key, sem.permit_id)      # an operator removes it
            assert called.wait(2.0), "on_lost never ran"
            assert sem.lost and sem.validity == 0.0
    assert seen == [sem]
    assert sem.held_count() == 0


def test_max_hold_lets_the_permit_lapse(client) -> None:
    sem = client.semaphore("capped", 1, ttl=0.3, max_hold=0.3)
    other = client.semaphore("capped", 1, ttl=0.3)
    assert sem.acquire()
    t0 = time.monotonic()
    # Granted at all proves the cap (a renewed permit would hold for ever);
    # not before the capped hold's TTL.
    assert other.acquire(timeout=3.0)
    assert 0.25 <= time.monotonic() - t0
    wait_for(lambda: sem.lost, 1.0, what="the capped permit reported lost")
    other.release()


def test_sigkilled_holder_frees_its_permit_within_ttl(client, rds, redis_url) -> None:
    ttl = 1.0
    p, permit = start_holder(rds, redis_url, lambda c: c.semaphore("victim", 1, ttl=ttl),
                             lambda sem: sem.permit_id)
    time.sleep(ttl * 1.2)          # renewed past its first TTL while alive
    assert permit in permits_of(rds, "victim")
    kill_child(p)
    killed = time.monotonic()
    assert p.exitcode == -signal.SIGKILL

    waiter = client.semaphore("victim", 1, ttl=ttl)
    assert waiter.acquire(blocking=False) is False   # killing frees nothing itself
    assert waiter.acquire(timeout=ttl + 2.0)
    took = time.monotonic() - killed
    # Freed by the permit's TTL (a dead holder renews nothing); 1.5 s over it
    # leaves room for a stalled, loaded machine.
    assert took <= ttl + 1.5, f"free {took:.3f} s after SIGKILL; TTL {ttl} s"
    assert permits_of(rds, "victim").keys() == {waiter.permit_id}
    waiter.release()


def _forked_child_check(sem: hilock.Semaphore, url: str) -> None:
    with pytest.raises(hilock.ForkedLockError):
        sem.release()
    assert sem.held_count() == 0
    assert sem.acquire(blocking=False)   # a permit of the child's own
    sem.release()


def test_forked_child_holds_nothing(client, rds, redis_url) -> None:
    sem = client.semaphore("forked", 2, ttl=5)
    assert sem.acquire()
    p = start_child(_forked_child_check, sem, redis_url)
    join_all([p], 20)
    assert sem.owned() and rds.zcard(sem.key) == 1
    sem.release()


def test_module_level_semaphore(default_client_env, rds) -> None:
    with hilock.semaphore("module", 2, ttl=5) as sem:
        assert isinstance(sem, hilock.Semaphore)
        assert rds.zcard("hilock:{module}:permits") == 1
        assert rds.get("hilock:{module}:limit") == b"2"
    assert rds.exists("hilock:{module}:permits") == 0


# -- the checker on its own ---------------------------------------------------------

def test_max_concurrent_checker() -> None:
    ivs = [Interval(1, 0.0, 4.0), Interval(2, 1.0, 3.0), Interval(3, 2.0, 5.0),
           Interval(4, 5.0, 6.0)]              # touching 3 at 5.0: not open together
    assert check_max_concurrent(ivs, 3) == 3
    with pytest.raises(ConcurrencyError) as info:
        check_max_concurrent(ivs, 2)
    assert len(info.value.crowds) == 1
    t, crowd = info.value.crowds[0]
    assert t == 2.0 and [iv.pid for iv in crowd] == [1, 2, 3]
    assert "pid=3" in str(info.value)
    # A zero-length window inside another counts; touching ones do not (the
    # rule of check_no_overlap).
    inside = [Interval(1, 0.0, 2.0), Interval(2, 1.0, 1.0)]
    touching = [Interval(1, 0.0, 1.0), Interval(2, 1.0, 1.0), Interval(3, 1.0, 2.0),
                Interval(4, 1.0, 1.0)]
    assert check_max_concurrent(inside, 2) == 2
    with pytest.raises(ConcurrencyError):
        check_max_concurrent(inside, 1)
    with pytest.raises(OverlapError):
        check_no_overlap(inside)
    assert check_max_concurrent(touching, 1) == 1
    assert check_no_overlap(touching) == 4
    assert check_max_concurrent([], 1) == 0
    # Nested windows: the short one hidden in a long one is found.
    nested = [Interval(1, 0.0, 10.0), Interval(2, 1.0, 2.0), Interval(3, 3.0, 4.0),
              Interval(4, 3.5, 3.6)]
    assert check_max_concurrent(nested, 3) == 3
    with pytest.raises(ConcurrencyError) as info:
        check_max_concurrent(nested, 2)
    assert [iv.pid for iv in info.value.crowds[0][1]] == [1, 3, 4]


# -- 16 processes, 3 permits, holders killed at random --------------------------------

PERMITS = 3
TTL = 1.5
SLACK = 1.0           # scheduling, the drift allowance, waking the last waiter
KILLS = 12            # one every 0.3..0.8 s, each permit out for up to TTL


class CounterSemaphore:
    """The seeds' semaphore: an INCR/DECR counter with no owner and no TTL
    (a holder that dies never gives its permit back), made stoppable."""

    permit_id = None

    def __init__(self, r: redis.Redis, key: str, permits: int) -> None:
        self.r, self.key, self.permits = r, key, permits

    def acquire(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if int(self.r.get(self.key) or 0) < self.permits:
                if self.r.incr(self.key) <= self.permits:
                    return True
                self.r.decr(self.key)
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def release(self) -> None:
        self.r.decr(self.key)

    def available(self) -> int:
        return self.permits - int(self.r.get(self.key) or 0)


def _make(mode: str, url: str, r: redis.Redis, name: str):
    if mode == "semaphore":
        return hilock.Client(url).semaphore(name, PERMITS, ttl=TTL)
    if mode == "counter":
        return CounterSemaphore(r, f"counter:{name}", PERMITS)
    return NoLock()


def _worker(url: str, mode: str, name: str, tag: str, gate) -> None:
    """acquire -> record the open window -> short hold -> release -> record
    the closed window, until the stop key appears."""
    r = redis.Redis.from_url(url)
    sem = _make(mode, url, r, name)
    hist = RedisHistory(r, f"{tag}:history")
    rnd = random.Random(os.getpid())
    pid = os.getpid()
    pass_gate(gate)
    while not r.exists(f"{tag}:stop"):
        if not sem.acquire(timeout=0.5):
            continue
        start = time.monotonic()
        permit = getattr(sem, "permit_id", None)
        r.hset(f"{tag}:open", pid, json.dumps({"start": start, "permit": permit}))
        time.sleep(rnd.uniform(0.005, 0.02))
        end = time.monotonic()
        # Once the end is on record, a kill before release() leaves a
        # window that lasts until the permit expires; after it, one that
        # ended here.
        r.hset(f"{tag}:open", pid, json.dumps({"start": start, "permit": permit, "end": end}))
        sem.release()
        r.hdel(f"{tag}:open", pid)
        hist.record(start, end)
        if mode == "none":
            time.sleep(0.002)


def _server_offset(r: redis.Redis) -> float:
    """Redis's clock minus time.monotonic(), in seconds, from the quickest of
    a few TIME round trips."""
    best: Optional[Tuple[float, float]] = None
    for _ in range(5):
        t0 = time.monotonic()
        sec, usec = r.time()
        t1 = time.monotonic()
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, sec + usec / 1e6 - (t0 + t1) / 2)
    assert best is not None
    return best[1]


class Harness:
    """Workers, a killer, and the windows of the holders it killed."""

    def __init__(self, url: str, r: redis.Redis, mode: str, tag: str, procs: int) -> None:
        self.url, self.r, self.mode, self.tag = url, r, mode, tag
        self.name = f"sem:{tag}"
        self.gate = FORK.Event()
        self.procs = {}
        for _ in range(procs):
            self._spawn()
        self.killed: List[Interval] = []
        self.kills = 0
        self.live_at_death = 0   # killed holders whose permit was still held
        self.died_inside = 0     # killed before they began to release
        self.last_kill = 0.0

    def _spawn(self) -> None:
        p = start_child(_worker, self.url, self.mode, self.name, self.tag, self.gate)
        self.procs[p.pid] = p

    def start(self) -> None:
        time.sleep(0.1)
        self.gate.set()

    def kill_a_holder(self, wait: float = 2.0) -> bool:
        """SIGKILL one worker that is inside, replace it, and record its
        window: until its permit's expiry if the permit outlived it."""
        deadline = time.monotonic() + wait
        while True:
            inside = [int(p) for p in self.r.hkeys(f"{self.tag}:open")
                      if int(p) in self.procs]
            if inside:
                break
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        pid = random.choice(inside)
        p = self.procs.pop(pid)
        kill_child(p)
        self.last_kill = time.monotonic()
        self.kills += 1
        self._spawn()
        raw = self.r.hget(f"{self.tag}:open", pid)   # final: the writer is dead
        if raw is None:
            return True          # it had left the section before the signal
        rec = json.loads(raw)
        end = rec.get("end")
        if end is None:
            self.died_inside += 1
        if rec["permit"] is not None:
            time.sleep(0.02)     # a renewal it sent before dying has landed
            score = self.r.zscore(f"hilock:{{{self.name}}}:permits", rec["permit"])
            if score is not None:
                self.live_at_death += 1
                # Its expiry, on the monotonic clock, less 1 ms for the
                # mapping between the two clocks.
                end = score / 1000.0 - _server_offset(self.r) - 0.001
        if end is None:
            end = self.last_kill
        if self.mode == "counter" and "end" not in rec:
            end = float("inf")   # a counter permit of the dead is never returned
        self.killed.append(Interval(pid, rec["start"], max(end, rec["start"])))
        return True

    def stop(self, timeout: float = 20.0) -> None:
        self.r.set(f"{self.tag}:stop", 1)
        join_all(list(self.procs.values()), timeout)

    def history(self) -> List[Interval]:
        return RedisHistory(self.r, f"{self.tag}:history").load() + self.killed


def _all_free_within(available, deadline: float) -> Optional[float]:
    """Poll available() until it reports every permit free; the time that
    happened, or None if not by the deadline."""
    while True:
        if available() == PERMITS:
            return time.monotonic()
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def test_sixteen_processes_never_more_than_three_inside_while_holders_die(
        client, rds, redis_url) -> None:
    h = Harness(redis_url, rds, "semaphore", "fire", procs=16)
    h.start()
    for _ in range(KILLS):
        time.sleep(random.uniform(0.3, 0.8))
        # Nobody inside for 3 s would mean dead holders' permits never lapse.
        assert h.kill_a_holder(wait=3.0), "nobody was inside to kill"
    # The last kill is of a holder whose permit outlives it.
    for _ in range(20):
        before = h.live_at_death
        assert h.kill_a_holder(), "nobody was inside to kill"
        if h.live_at_death > before:
            break
    assert h.live_at_death > before, "no kill left a live permit behind"
    last_kill = h.last_kill
    h.stop()

    sem = client.semaphore(h.name, PERMITS, ttl=TTL)
    if time.monotonic() - last_kill < TTL - 0.3:
        # Everyone alive has released; the dead holder's permit is still out.
        assert sem.available() <= PERMITS - 1
    freed = _all_free_within(sem.available, last_kill + TTL + SLACK)
    assert freed is not None, (f"permits still out {TTL + SLACK} s after the last kill: "
                               f"{permits_of(rds, h.name)}")
    # The set's own PX is reclaimed by Redis's expiry cycle, a little later.
    wait_for(lambda: rds.exists(f"hilock:{{{h.name}}}:permits") == 0, 2.0,
             what="the permits key to expire")

    hist = h.history()
    peak = check_max_concurrent(hist, PERMITS)
    assert peak == PERMITS, f"never {PERMITS} inside at once (peak {peak}): not a semaphore"
    # Most kills left a live permit behind; the others landed between
    # release() and the end of the record, a window that grows when the
    # workers run slowly (under ASan, on a loaded machine).
    assert 2 * h.live_at_death >= h.kills, (h.kills, h.live_at_death)
    assert len(hist) >= 100, f"only {len(hist)} critical sections in the whole run"
    # Waiters kept being served while dead holders' permits lapsed.
    late = [iv for iv in hist if iv.start > last_kill - 3.0]
    assert late, "no grants in the last seconds of killing"


def test_counter_semaphore_of_the_seeds_leaks_permits(rds, redis_url) -> None:
    """Control group: the INCR/DECR counter never gets a dead holder's permit
    back, so the recovery check fails for it."""
    h = Harness(redis_url, rds, "counter", "leaky", procs=6)
    h.start()
    for _ in range(20):
        time.sleep(0.1)
        assert h.kill_a_holder(wait=5.0)
        if h.died_inside == 2:
            break
    last_kill = h.last_kill
    h.stop()
    counter = CounterSemaphore(rds, f"counter:{h.name}", PERMITS)
    assert _all_free_within(counter.available, last_kill + TTL + SLACK) is None
    assert counter.available() <= PERMITS - 2
    assert check_max_concurrent(h.history(), PERMITS) <= PERMITS


def test_without_a_semaphore_the_checker_fails(rds, redis_url) -> None:
    """Control group: with no semaphore, more than 3 are inside at once and
    check_max_concurrent says so."""
    h = Harness(redis_url, rds, "none", "open", procs=8)
    h.start()
    time.sleep(1.0)
    h.stop()
    with pytest.raises(ConcurrencyError) as info:
        check_max_concurrent(h.history(), PERMITS)
    assert info.value.crowds
