"""The segmented lock: the Python API, stock that moves only under the lock,
empty segments skipped, sold out as its own outcome, dead holders, fork,
and the main claim under fire: 8 processes selling one stock over 4
segments never hold one segment twice at once (history checker per
segment) and sell exactly the stock loaded, not one unit more or less.

The same harness run with no lock must fail those checks: they can fail.
What every lock type shares is tested in test_contract.py (one segment).
"""
from __future__ import annotations

import os
import random
import threading
import time
from typing import Dict, List, Optional

import pytest
import redis

import hilock
from helpers import blocked_clients, join_all, kill_child, start_child, start_holder, wait_for
from history import Interval, OverlapError, RedisHistory, check_fences_increase, check_no_overlap


def seg_keys(name: str, k: int) -> List[str]:
    return [f"hilock:{{{name}}}:seg:{i}" for i in range(k)]


# -- grants ---------------------------------------------------------------------

def test_each_holder_gets_its_own_segment(client, rds) -> None:
    locks = [client.segmented_lock("inv", 4, ttl=10) for _ in range(5)]
    assert locks[0].segment is None and locks[0].fence is None
    assert locks[0].key == b"hilock:{inv}:seg:stock"
    segs = []
    for lk in locks[:4]:
        assert lk.acquire(blocking=False) is True
        segs.append(lk.segment)
        assert lk.key == f"hilock:{{inv}}:seg:{lk.segment}".encode()
        assert rds.get(lk.key).decode() == lk.token
        assert 9.0 <= lk.validity <= 10.0
    assert sorted(segs) == [0, 1, 2, 3]
    fences = [lk.fence for lk in locks[:4]]
    assert fences == sorted(fences) and len(set(fences)) == 4
    assert locks[4].acquire(blocking=False) is False
    t0 = time.monotonic()
    assert locks[4].acquire(timeout=0.2) is False
    # Bounded by the timeout, not the holders' 10 s TTLs; 2 s leaves room for
    # a stalled, loaded machine.
    assert 0.15 <= time.monotonic() - t0 <= 2.0
    assert locks[4].locked() is True and locks[4].segments_held() == 4
    assert locks[4].segment is None and locks[4].token is None

    freed = locks[1].segment
    locks[1].release()
    assert locks[4].acquire(blocking=False) and locks[4].segment == freed
    assert locks[4].fence > max(fences)
    for lk in locks:
        if lk is not locks[1]:
            assert lk.owned()
            lk.release()
    assert locks[0].locked() is False
    assert rds.exists(*seg_keys("inv", 4)) == 0
    with pytest.raises(hilock.LockNotOwnedError):
        locks[0].release()


def test_context_manager_and_properties(client, rds) -> None:
    seg = client.segmented_lock("ctx", 3, ttl=5, timeout=1.0)
    assert seg.segments == 3 and seg.ttl == 5.0 and seg.timeout == 1.0
    assert seg.auto_renew is True
    assert seg.segment_key(2) == b"hilock:{ctx}:seg:2"
    with seg as held:
        assert held is seg and seg.segment in (0, 1, 2) and seg.owned()
    assert seg.owned() is False and seg.segments_held() == 0
    assert "SegmentedLock" in repr(seg)
    assert hilock.segmented_lock is not None
    assert isinstance(seg, hilock.SegmentedLock) and isinstance(seg, hilock.LockBase)


def test_random_start_spreads_grants(client) -> None:
    seg = client.segmented_lock("spread", 8, ttl=10)
    counts: Dict[int, int] = {}
    for _ in range(400):
        assert seg.acquire(blocking=False)
        counts[seg.segment] = counts.get(seg.segment, 0) + 1
        seg.release()
    # A fixed start would give one segment all 400; uniform about 50 each.
    assert sorted(counts) == list(range(8))
    assert all(15 <= n <= 100 for n in counts.values()), counts


# -- stock -------------------------------------------------------------------------

def test_stock_init_splits_evenly_and_take_sells_under_the_lock(client, rds) -> None:
    seg = client.segmented_lock("shop", 3, ttl=10)
    assert seg.stock() is None and seg.stock(0) is None and seg.sold_out() is False
    seg.stock_init(10)
    assert [seg.stock(i) for i in range(3)] == [4, 3, 3] and seg.stock() == 10
    assert rds.hget("hilock:{shop}:seg:stock", "segments") == b"3"
    assert rds.pttl("hilock:{shop}:seg:stock") == -1

    with pytest.raises(hilock.LockNotOwnedError):
        seg.take(1)                      # not held: nothing moves
    assert seg.stock() == 10
    assert seg.acquire(blocking=False)
    i = seg.segment
    have = seg.stock(i)
    assert seg.take(2) == 2 and seg.stock(i) == have - 2
    assert seg.take(have) == 0           # not enough: all or nothing
    assert seg.take(have, partial=True) == have - 2
    assert seg.stock(i) == 0
    assert seg.take(1, partial=True) == 0
    seg.release()
    # The emptied segment is skipped from now on.
    for _ in range(20):
        assert seg.acquire(blocking=False)
        assert seg.segment != i
        seg.release()
    with pytest.raises(hilock.InvalidArgument):
        seg.take(0)
    with pytest.raises(hilock.InvalidArgument):
        seg.stock_set(3, 1)
    with pytest.raises(hilock.InvalidArgument):
        seg.stock_init(-1)


def test_empty_segments_are_skipped(client) -> None:
    a = client.segmented_lock("skip", 4, ttl=10)
    b = client.segmented_lock("skip", 4, ttl=10)
    a.stock_init(0)
    a.stock_set(1, 3)
    for _ in range(20):
        assert a.acquire(blocking=False) and a.segment == 1
        # Three free but empty segments: busy, not sold out.
        assert b.acquire(blocking=False) is False
        a.release()


def test_restocking_wakes_a_waiter(client, rds) -> None:
    a = client.segmented_lock("restock", 2, ttl=30)
    b = client.segmented_lock("restock", 2, ttl=30)
    a.stock_init(0)
    a.stock_set(0, 5)
    assert a.acquire(blocking=False) and a.segment == 0
    got: List[object] = []
    t = threading.Thread(target=lambda: got.append((b.acquire(timeout=10), time.monotonic())))
    t.start()
    wait_for(lambda: blocked_clients(rds) == 1, 5.0,
             what="a blocked waiter")
    restocked = time.monotonic()
    a.stock_set(1, 3)                    # the holder's TTL is 30 s away
    t.join(10)
    # Woken by the restock, not the holder's 30 s TTL or its own 10 s
    # timeout: 4 s tells them apart with room for a stalled, loaded machine.
    assert got and got[0][0] is True and got[0][1] - restocked < 4.0
    assert b.segment == 1
    b.release()
    a.release()


def test_a_holder_that_lost_its_segment_sells_nothing(client, rds) -> None:
    lost: List[object] = []
    seg = client.segmented_lock("steal", 2, ttl=10, on_lost=lost.append)
    seg.stock_init(6)
    assert seg.acquire(blocking=False)
    rds.set(seg.key, "intruder")
    with pytest.raises(hilock.LockNotOwnedError):
        seg.take(1)
    assert seg.lost and seg.stock() == 6
    with pytest.raises(hilock.LockNotOwnedError):
        seg.release()


def test_other_segment_count_on_the_same_name_is_refused(client) -> None:
    seg = client.segmented_lock("count", 3)
    seg.stock_init(9)
    other = client.segmented_lock("count", 4)
    with pytest.raises(hilock.InvalidArgument, match="split into 3 segments"):
        other.acquire(blocking=False)


# -- sold out ------------------------------------------------------------------------

def test_sold_out_is_raised_not_a_timeout(client) -> None:
    seg = client.segmented_lock("gone", 3, ttl=10)
    seg.stock_init(0)
    assert seg.sold_out()
    t0 = time.monotonic()
    with pytest.raises(hilock.SoldOut) as info:
        seg.acquire()                    # no timeout: still returns at once
    # Not a wait for ever: 2.5 s leaves room for a stalled, loaded machine.
    assert time.monotonic() - t0 < 2.5
    assert info.value.code == hilock._hilock.HILOCK_SOLDOUT
    assert not isinstance(info.value, hilock.LockTimeout)
    with pytest.raises(hilock.SoldOut):
        seg.acquire(blocking=False)
    with pytest.raises(hilock.SoldOut):
        with seg:
            pass
    # The object stays usable: restocking opens it again.
    seg.stock_set(2, 1)
    with seg:
        assert seg.segment == 2
        assert seg.take(1) == 1
    with pytest.raises(hilock.SoldOut):
        seg.acquire(timeout=5)


def test_blocked_waiters_all_learn_sold_out(client, rds) -> None:
    holders = [client.segmented_lock("last", 2, ttl=30) for _ in range(2)]
    holders[0].stock_init(2)
    for h in holders:
        assert h.acquire(blocking=False)
    outcomes: List[object] = []
    done: List[float] = []

    def wait() -> None:
        w = client.segmented_lock("last", 2, ttl=30)
        try:
            outcomes.append(w.acquire())
        except hilock.SoldOut as e:
            outcomes.append(e)
        done.append(time.monotonic())

    threads = [threading.Thread(target=wait) for _ in range(3)]
    for t in threads:
        t.start()
    wait_for(lambda: blocked_clients(rds) == 3, 5.0,
             what="three blocked waiters")
    for h in holders:
        assert h.take(1) == 1
    released = time.monotonic()
    for h in holders:
        h.release()
    for t in threads:
        t.join(10)
    # Without the passed-on wake-ups they would sleep out the 30 s TTL.
    assert all(isinstance(o, hilock.SoldOut) for o in outcomes), outcomes
    assert len(done) == 3 and max(done) - released < 3.0


# -- dead holders, renewal, fork ---------------------------------------------------

def test_sigkilled_holders_segment_frees_within_ttl(client, rds, redis_url) -> None:
    ttl = 1.0
    seg = client.segmented_lock("victim", 2, ttl=ttl)
    seg.stock_init(0)
    seg.stock_set(1, 5)                  # one non-empty segment: the child's
    p, segment = start_holder(rds, redis_url, lambda c: c.segmented_lock("victim", 2, ttl=ttl),
                              lambda seg: seg.segment)
    assert segment == 1
    time.sleep(ttl * 1.3)                # renewed past its TTL while alive
    assert seg.acquire(blocking=False) is False
    kill_child(p)
    killed = time.monotonic()
    assert seg.acquire(timeout=ttl + 2.0)
    took = time.monotonic() - killed
    # Freed by the segment's TTL (a dead holder renews nothing); 1.5 s over
    # it leaves room for a stalled, loaded machine.
    assert took <= ttl + 1.5, f"free {took:.3f} s after SIGKILL; TTL {ttl} s"
    assert seg.segment == 1
    seg.release()


def _forked_child_check(seg: hilock.SegmentedLock) -> None:
    with pytest.raises(hilock.ForkedLockError):
        seg.take(1)
    with pytest.raises(hilock.ForkedLockError):
        seg.release()


def test_forked_child_holds_nothing(client, rds) -> None:
    seg = client.segmented_lock("forked", 2, ttl=5)
    seg.stock_init(4)
    assert seg.acquire(blocking=False)
    p = start_child(_forked_child_check, seg)
    join_all([p], 10)
    assert seg.owned() and seg.stock() == 4
    seg.release()


def test_bad_arguments(client) -> None:
    for k in (0, -1, 1025, 2.0, True, "3"):
        with pytest.raises(hilock.InvalidArgument):
            client.segmented_lock("a", k)
    with pytest.raises(hilock.InvalidArgument):
        client.segmented_lock("a", 2, ttl=0)
    with pytest.raises(hilock.InvalidArgument):
        client.segmented_lock("", 2)
    seg = client.segmented_lock("a", 2)
    with pytest.raises(hilock.InvalidArgument):
        seg.acquire(blocking=False, timeout=1)
    with pytest.raises(hilock.InvalidArgument):
        seg.stock(2)
    with pytest.raises(hilock.InvalidArgument):
        seg.segment_key(-1)


# -- under fire: 8 processes selling one stock ------------------------------------

SELLERS = 8
SEGMENTS = 4
STOCK = 1000


class NoSegLock:
    """The control group: picks a random segment and sells from it with a
    read-modify-write of the stock, holding nothing."""

    def __init__(self, r: redis.Redis, name: str, k: int) -> None:
        self.r, self.stock_key, self.k = r, f"hilock:{{{name}}}:seg:stock", k
        self.segment: Optional[int] = None
        self.fence = None

    def acquire(self, timeout: float) -> bool:
        left = [i for i in range(self.k) if int(self.r.hget(self.stock_key, str(i))) > 0]
        if not left:
            raise hilock.SoldOut("sold out")
        self.segment = random.choice(left)
        return True

    def take(self, n: int, partial: bool) -> int:
        units = int(self.r.hget(self.stock_key, str(self.segment)))
        n = min(n, units)
        time.sleep(0.001)
        self.r.hset(self.stock_key, str(self.segment), units - n)
        return n

    def release(self) -> None:
        pass


def _seller(url: str, name: str, mode: str) -> None:
    r = redis.Redis.from_url(url)
    rng = random.Random(os.getpid())
    if mode == "seglock":
        seg = hilock.Client(url).segmented_lock(name, SEGMENTS, ttl=10)
    else:
        seg = NoSegLock(r, name, SEGMENTS)
    while True:
        try:
            if not seg.acquire(timeout=10):
                raise AssertionError("no segment within 10 s")
        except hilock.SoldOut:
            return
        start = time.monotonic()
        taken = seg.take(rng.randint(1, 3), partial=True)
        time.sleep(rng.uniform(0.0005, 0.002))
        end = time.monotonic()
        segment = seg.segment
        fence = seg.fence
        seg.release()
        RedisHistory(r, f"history:{segment}").record(start, end, fence)
        r.rpush("sold", taken)


def _sell_out(rds: redis.Redis, url: str, mode: str) -> int:
    name = f"sale-{mode}"
    hilock.Client(url).segmented_lock(name, SEGMENTS).stock_init(STOCK)
    procs = [start_child(_seller, url, name, mode) for _ in range(SELLERS)]
    join_all(procs, 50)
    return sum(int(x) for x in rds.lrange("sold", 0, -1))


def test_eight_processes_never_share_a_segment_nor_oversell(client, rds, redis_url) -> None:
    sold = _sell_out(rds, redis_url, "seglock")
    assert sold == STOCK, f"sold {sold} of {STOCK}"
    seg = client.segmented_lock("sale-seglock", SEGMENTS)
    assert seg.stock() == 0 and seg.sold_out()
    for i in range(SEGMENTS):
        ivs = RedisHistory(rds, f"history:{i}").load()
        assert len(ivs) > 10, f"segment {i} sold only {len(ivs)} times"
        check_no_overlap(ivs)
        check_fences_increase(ivs)
        assert len({iv.pid for iv in ivs}) > 1


def test_the_checks_catch_sellers_without_the_lock(rds, redis_url) -> None:
    sold = _sell_out(rds, redis_url, "none")
    overlaps = 0
    for i in range(SEGMENTS):
        try:
            check_no_overlap(RedisHistory(rds, f"history:{i}").load())
        except OverlapError:
            overlaps += 1
    assert overlaps > 0 and sold > STOCK, (overlaps, sold)
