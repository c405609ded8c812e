"""The multi-key lock from Python: names, per-name fences shared with the
single lock, exclusion of and by single locks, owner-checked release,
renewal and loss of one name, and real processes taking random overlapping
sets of names, checked per name with the history checker. What every lock
type shares is tested in test_contract.py."""
from __future__ import annotations

import os
import random
import signal
import time
from typing import List

import pytest
import redis

import hilock
from hilock import _hilock as _h
from helpers import (FORK, acquire_interrupted, acquire_within, blocked_clients, blocked_worker,
                     open_gate, pass_gate, start_child, wait_for)
from history import FenceError, OverlapError, RedisHistory, check_fences_increase, check_no_overlap
from helpers import FENCE_AHEAD

POOL = ["n0", "n1", "n2", "n3", "n4"]


def lock_key(name: str) -> str:
    return f"hilock:{{{name}}}:lock"


# -- the contract -----------------------------------------------------------------

def test_acquire_release_fences_and_names(client: hilock.Client, rds: redis.Redis) -> None:
    rds.set("hilock:{a}:fence", FENCE_AHEAD)  # ahead of the clock: one more
    m = client.multi_lock(["c", "a", "c", "b"], ttl=10.0)
    assert m.names == ("a", "b", "c")
    assert m.keys == (b"hilock:{a}:lock", b"hilock:{b}:lock", b"hilock:{c}:lock")
    assert m.fence is None and m.token is None and not m.locked()
    assert m.acquire(blocking=False) is True
    first = m.fence
    assert first["a"] == FENCE_AHEAD + 1 and first["b"] > 10**15 and first["c"] > 10**15  # b, c new
    for n in m.names:
        assert rds.get(lock_key(n)) == m.token.encode()
        assert 9000 <= rds.pttl(lock_key(n)) <= 10000
    assert m.owned() and m.locked()
    assert 9.0 <= m.validity <= 10.0
    m.release()
    assert not any(rds.exists(lock_key(n)) for n in m.names)
    assert not m.owned() and not m.locked()
    with pytest.raises(hilock.LockNotOwnedError):
        m.release()
    with m as held:
        assert held is m
        assert m.fence["a"] == FENCE_AHEAD + 2
        assert m.fence["b"] > first["b"] and m.fence["c"] > first["c"]
    assert m.missing == ()


def _one_name_held(client: hilock.Client, held: str, names: List[str], **opts):
    """A plain lock holding the name held, and a multi-lock (made with
    opts) over names, held among them."""
    single = client.lock(held, ttl=10.0, auto_renew=False)
    assert single.acquire(blocking=False)
    return single, client.multi_lock(names, ttl=10.0, **opts)


def test_one_busy_name_takes_nothing_and_times_out(client: hilock.Client,
                                                    rds: redis.Redis) -> None:
    single, m = _one_name_held(client, "y", ["x", "y", "z"], timeout=0.3)
    assert m.acquire(blocking=False) is False
    assert not rds.exists(lock_key("x")) and not rds.exists(lock_key("z"))
    assert not rds.exists("hilock:{x}:fence")
    t0 = time.monotonic()
    assert m.acquire(timeout=0.3) is False
    # Bounded by the timeout, not the 10 s hold; 3 s leaves room for a
    # stalled, loaded machine.
    assert 0.25 <= time.monotonic() - t0 < 3.0
    with pytest.raises(hilock.LockTimeout):
        with m:
            pytest.fail("the body ran without the lock")
    with pytest.raises(ValueError):
        m.acquire(blocking=False, timeout=1.0)
    single.release()
    assert m.acquire(timeout=0)
    m.release()


def test_multi_and_single_locks_exclude_each_other(client: hilock.Client) -> None:
    m = client.multi_lock(["acct:1", "acct:2"], ttl=10.0)
    single = client.lock("acct:2", ttl=10.0)
    assert m.acquire(blocking=False)
    first = dict(m.fence)
    drawn = first["acct:2"]
    assert not single.acquire(blocking=False)
    m.release()
    assert single.acquire(blocking=False)
    assert single.fence > drawn  # the counter the multi-lock drew from
    assert not m.acquire(blocking=False)
    single.release()
    assert m.acquire(blocking=False)
    assert m.fence["acct:1"] > first["acct:1"] and m.fence["acct:2"] > single.fence
    m.release()


def test_bytes_and_unicode_names(client: hilock.Client, rds: redis.Redis) -> None:
    m = client.multi_lock([b"raw\x00name", "k\u00e9y"], ttl=5.0)
    assert m.names == ("k\u00e9y", b"raw\x00name")  # sorted by UTF-8 bytes
    with m:
        assert rds.exists(b"hilock:{raw\x00name}:lock")
        assert rds.exists("hilock:{k\u00e9y}:lock".encode())


@pytest.mark.parametrize("names,text", [
    ("ab", "not a single str"),
    (b"ab", "not a single bytes"),
    (42, "iterable"),
    ([], "the set of names is empty"),
    ([None], "str or bytes"),
    (["a", "}b"], "name 1: lock name may not begin with '}'"),
    (["a", ""], "name 1: lock name is empty"),
    (["x" * 1025], "name 0: lock name is 1025 bytes"),
    ([f"n{i}" for i in range(1025)], "1025 names; the limit is 1024"),
])
def test_bad_names_are_invalid_argument(client: hilock.Client, names, text: str) -> None:
    with pytest.raises(hilock.InvalidArgument) as info:
        client.multi_lock(names)
    assert text in str(info.value)


def test_limits_and_other_arguments(client: hilock.Client, rds: redis.Redis) -> None:
    with pytest.raises(hilock.InvalidArgument):
        client.multi_lock(["a"], ttl=0)
    with pytest.raises(hilock.InvalidArgument):
        client.multi_lock(["a"], timeout=-1)
    # The maximum set works end to end, renewal included.
    names = [f"m{i}" for i in range(_h.HILOCK_MULTI_LOCK_MAX)]
    m = client.multi_lock(names, ttl=5.0)
    with m:
        assert rds.exists(*[lock_key(n) for n in names[:50]]) == 50
        m.renew()
        assert m.owned()
    assert rds.exists(*[lock_key(n) for n in names[:50]]) == 0
    assert issubclass(hilock.CrossSlotError, hilock.InvalidArgument)
    err = hilock.errors.error_for(_h.HILOCK_ECROSSSLOT, "x")
    assert isinstance(err, hilock.CrossSlotError) and err.code == -17


# -- release, extend, renewal --------------------------------------------------------

def test_release_leaves_a_force_taken_name_alone(client: hilock.Client,
                                                   rds: redis.Redis) -> None:
    m = client.multi_lock(["r1", "r2", "r3"], ttl=10.0)
    assert m.acquire(blocking=False)
    rds.set(lock_key("r2"), "someone-else", px=10000)
    with pytest.raises(hilock.LockNotOwnedError) as info:
        m.release()
    assert '"r2"' in str(info.value) and "1 of 3" in str(info.value)
    assert m.missing == ("r2",)
    assert rds.get(lock_key("r2")) == b"someone-else"
    assert not rds.exists(lock_key("r1")) and not rds.exists(lock_key("r3"))
    # The object is free again: the next acquire waits for r2.
    assert not m.acquire(blocking=False)


def test_extend_refreshes_every_name_or_none(client: hilock.Client, rds: redis.Redis) -> None:
    m = client.multi_lock(["e1", "e2"], ttl=2.0, auto_renew=False)
    assert m.acquire(blocking=False)
    m.extend(8.0, replace=True)
    assert all(7000 <= rds.pttl(lock_key(n)) <= 8000 for n in m.names)
    m.extend(2.0)
    assert all(9000 <= rds.pttl(lock_key(n)) <= 10000 for n in m.names)
    rds.delete(lock_key("e2"))
    with pytest.raises(hilock.LockNotOwnedError):
        m.extend(60.0, replace=True)
    assert rds.pttl(lock_key("e1")) <= 10000
    assert m.missing == ("e2",) and m.lost and m.validity == 0.0
    with pytest.raises(hilock.LockNotOwnedError):
        m.release()
    assert not rds.exists(lock_key("e1"))


def test_renewal_keeps_every_name_and_reports_a_stolen_one(client: hilock.Client,
                                                            rds: redis.Redis) -> None:
    lost = []
    m = client.multi_lock(["w1", "w2", "w3"], ttl=0.6, on_lost=lost.append)
    with pytest.raises(hilock.LockLost):
        with m:
            time.sleep(1.5)  # 2.5 TTLs: only renewal keeps the names
            token = m.token.encode()
            assert [rds.get(lock_key(n)) for n in m.names] == [token] * 3
            rds.set(lock_key("w2"), "thief", px=10000)
            wait_for(lambda: m.lost, 3.0, what="the loss to be noticed")
            wait_for(lambda: lost, 3.0, what="on_lost")
    assert lost == [m]
    assert rds.get(lock_key("w2")) == b"thief"
    assert not rds.exists(lock_key("w1")) and not rds.exists(lock_key("w3"))


def test_max_hold_stops_renewal_and_every_name_lapses(client: hilock.Client,
                                                      rds: redis.Redis) -> None:
    m = client.multi_lock(["mh1", "mh2"], ttl=0.4, max_hold=0.5)
    assert m.acquire(blocking=False)
    t0 = time.monotonic()
    wait_for(lambda: m.lost, 3.0, what="the hold to end at max_hold + ttl")
    assert time.monotonic() - t0 >= 0.5
    wait_for(lambda: rds.exists(lock_key("mh1"), lock_key("mh2")) == 0, 2.0,
             what="both keys to lapse")
    with pytest.raises(hilock.LockNotOwnedError):
        m.release()


def test_waiter_sleeps_on_the_blocking_name_until_its_release(client: hilock.Client,
                                                               rds: redis.Redis) -> None:
    single, m = _one_name_held(client, "k2", ["k1", "k2"])
    w = blocked_worker(rds, m.acquire, True, 8.0)
    t0 = time.monotonic()
    single.release()
    assert w.outcome(5.0) is True
    assert w.finished_at - t0 < 2.0  # woken by the release, not the 10 s TTL
    m.release()


def test_ctrl_c_interrupts_a_blocked_multi_acquire(client: hilock.Client,
                                                   rds: redis.Redis) -> None:
    holder, m = _one_name_held(client, "i2", ["i1", "i2"])
    intr = acquire_interrupted(m)
    # Raised inside the wait, not when its 8 s timeout ends it.
    assert intr.caught - intr.began < 3.0
    assert m.token is None and m.validity == 0.0
    assert not rds.exists(lock_key("i1"))
    wait_for(lambda: blocked_clients(rds) == 0, 2.0, what="the BLPOP to be dropped")
    holder.release()
    assert m.acquire(timeout=1.0)
    m.release()


# -- processes -------------------------------------------------------------------------

def _random_sets(url: str, seed: int, rounds: int, gate, tag: str, nolock: bool) -> None:
    r = redis.Redis.from_url(url)
    c = hilock.Client(url)
    rnd = random.Random(seed)
    pass_gate(gate)
    for i in range(rounds):
        names = [n for n in POOL if rnd.random() < 0.5] or [rnd.choice(POOL)]
        rnd.shuffle(names)
        if rnd.random() < 0.2:
            names.append(names[0])
        m = c.multi_lock(names, ttl=10.0)
        if not nolock and not m.acquire(timeout=20):
            raise RuntimeError("acquire timed out: a deadlock or a lost hand-over")
        start = time.monotonic()
        time.sleep(rnd.uniform(0.0005, 0.003))
        end = time.monotonic()
        fences = m.fence if not nolock else {}
        if not nolock:
            m.release()
        for n in set(names):
            RedisHistory(r, f"{tag}:{n}").record(start, end, fences.get(n))
    c.close()


def _single_on_n0(url: str, rounds: int, gate, tag: str) -> None:
    r = redis.Redis.from_url(url)
    c = hilock.Client(url)
    lk = c.lock("n0", ttl=10.0)
    pass_gate(gate)
    for _ in range(rounds):
        start = acquire_within(lk, "single lock acquire timed out")
        time.sleep(0.001)
        end = time.monotonic()
        fence = lk.fence
        lk.release()
        RedisHistory(r, f"{tag}:n0").record(start, end, fence)
    c.close()


def _run(url: str, tag: str, nolock: bool, procs: int = 6, rounds: int = 40):
    gate = FORK.Event()
    ps = [start_child(_random_sets, url, 1000 + i, rounds, gate, tag, nolock)
          for i in range(procs)]
    if not nolock:
        ps.append(start_child(_single_on_n0, url, rounds, gate, tag))
    open_gate(gate, ps, 50.0)  # every process finished: nobody deadlocked


def test_processes_with_random_overlapping_sets(rds: redis.Redis, redis_url: str) -> None:
    """Six processes take random subsets of five names (listed in random
    order, with duplicates) while a seventh takes a single lock on n0: per
    name the critical sections never overlap and the fences strictly
    increase, and every process finishes."""
    _run(redis_url, "ml", nolock=False)
    total = 0
    for n in POOL:
        hist = RedisHistory(rds, f"ml:{n}").load()
        assert check_no_overlap(hist) == len(hist)
        check_fences_increase(hist)
        assert len({iv.pid for iv in hist}) >= 2
        total += len(hist)
        assert not rds.exists(lock_key(n))
    assert total >= 6 * 40 + 40


def test_without_the_lock_the_checker_fails(rds: redis.Redis, redis_url: str) -> None:
    """Control group: the same processes without acquiring overlap on some
    name, and the checker reports it."""
    _run(redis_url, "nl", nolock=True)
    failures = 0
    for n in POOL:
        try:
            check_no_overlap(RedisHistory(rds, f"nl:{n}").load())
        except OverlapError:
            failures += 1
    assert failures >= 1
    with pytest.raises((FenceError, TypeError)):
        check_fences_increase(RedisHistory(rds, "nl:n0").load())


def _hold_until_killed(url: str, ready) -> None:
    c = hilock.Client(url)
    m = c.multi_lock(["d1", "d2", "d3"], ttl=0.8)
    if not m.acquire(timeout=5):
        raise RuntimeError("could not acquire")
    ready.set()
    while True:
        time.sleep(1)


def test_killed_holder_frees_every_name_within_its_ttl(client: hilock.Client,
                                                      rds: redis.Redis, redis_url: str) -> None:
    ready = FORK.Event()
    p = start_child(_hold_until_killed, redis_url, ready)
    try:
        assert ready.wait(10)
        time.sleep(1.2)  # renewed past its TTL while alive
        assert rds.exists(*[lock_key(n) for n in ("d1", "d2", "d3")]) == 3
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.join(5)
    t0 = time.monotonic()
    m = client.multi_lock(["d3", "d1", "d2"], ttl=5.0)
    assert m.acquire(timeout=5.0)
    # Freed by the 0.8 s TTL, well before the 5 s timeout; 2 s over the TTL
    # leaves room for a stalled, loaded machine.
    assert time.monotonic() - t0 < 0.8 + 2.0
    m.release()
