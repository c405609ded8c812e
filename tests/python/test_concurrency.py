"""Mutual exclusion across processes, for every lock kind.

An overselling scenario: a stock counter lives in Redis and several
processes sell from it until it reaches 0. A sale is a deliberately
non-atomic read-modify-write (GET, a short sleep, SET stock-1), so only the
lock keeps two sellers from selling the same unit. With a working lock the
units sold add up to the initial stock exactly, the recorded critical
sections never overlap, and the fencing tokens of successive grants are
consecutive. The same harness with a lock that excludes nothing must fail
all of that, which shows that the checks can fail.
"""
from __future__ import annotations

import time

import pytest
import redis

import hilock
from helpers import (FORK, KINDS, NoLock, counts_by_pid, make_lock, open_gate, pass_gate, sell_out,
                     start_child)
from helpers import FENCE_AHEAD
from history import (FenceError, Interval, OverlapError, RedisHistory, check_fences_increase,
                     check_no_overlap)

N_PROCS = 8
STOCK = 100
HOLD = 0.001          # sleep between GET and SET inside the critical section
LOCK_TTL = 10.0       # far longer than any critical section here
RUN_TIMEOUT = 40.0    # per scenario, all processes together


def _seller(url: str, kind: str, name: str, gate, tag: str) -> None:
    """One seller process: sell until the stock reads 0."""
    r = redis.Redis.from_url(url)
    if kind == "none":
        lk = NoLock()
    else:
        c = hilock.Client(url)
        lk = make_lock(c, kind, name, ttl=LOCK_TTL)

    def sell(stock: int) -> None:
        time.sleep(HOLD)  # widen the race window of the read-modify-write
        if kind == "lease":
            lk.renew()
        r.set(f"{tag}:stock", stock - 1)

    pass_gate(gate)
    sell_out(r, lk, tag, sell, "acquire timed out: the lock was never handed over")


def run_sellers(url: str, r: redis.Redis, kind: str, stock: int, tag: str):
    """Run N_PROCS sellers on one lock; return (sold per pid, history)."""
    r.set(f"{tag}:stock", stock)
    gate = FORK.Event()
    procs = [start_child(_seller, url, kind, f"shop:{tag}", gate, tag)
             for _ in range(N_PROCS)]
    open_gate(gate, procs, RUN_TIMEOUT)
    sold = counts_by_pid(r, f"{tag}:sold")
    hist = RedisHistory(r, f"{tag}:history").load()
    return sold, hist


@pytest.mark.parametrize("kind", KINDS)
def test_no_overselling(kind: str, rds: redis.Redis, redis_url: str) -> None:
    rds.set(f"hilock:{{shop:{kind}}}:fence", FENCE_AHEAD)  # counts the grants
    sold, hist = run_sellers(redis_url, rds, kind, STOCK, tag=kind)

    assert len(sold) == N_PROCS, f"only {len(sold)} of {N_PROCS} sellers reported"
    assert sum(sold.values()) == STOCK, f"sold {sum(sold.values())} of {STOCK}: {sold}"
    assert int(rds.get(f"{kind}:stock")) == 0

    # One critical section per sale, plus one per seller that found 0.
    assert len(hist) == STOCK + N_PROCS
    assert check_no_overlap(hist) == len(hist)
    # Real contention: several processes took turns.
    sellers = {iv.pid for iv in hist if iv.end > iv.start}
    assert len(sellers) >= 2, f"only {sellers} ever held the lock"

    # Every grant drew the next fence: strictly increasing and, since nothing
    # else used this name and its counter is ahead of the clock, consecutive
    # from the first with none missing.
    fences = check_fences_increase(hist)
    assert fences == list(range(fences[0], fences[0] + len(hist)))
    assert int(rds.get(f"hilock:{{shop:{kind}}}:fence")) == fences[-1]

    # Every seller released: the lock is free at the end.
    assert rds.exists(f"hilock:{{shop:{kind}}}:lock") == 0


def test_without_lock_the_harness_fails(rds: redis.Redis, redis_url: str) -> None:
    """Control group: the same sellers with a no-op lock oversell, and the
    history checker reports the overlapping critical sections."""
    stock = 40
    sold, hist = run_sellers(redis_url, rds, "none", stock, tag="nolock")

    assert len(sold) == N_PROCS
    total = sum(sold.values())
    assert total > stock, (f"no lock, yet exactly {total} of {stock} sold: the race "
                           f"window is too small to show lost updates")
    with pytest.raises(OverlapError) as info:
        check_no_overlap(hist)
    assert info.value.pairs
    assert "overlaps" in str(info.value)
    with pytest.raises(FenceError):
        check_fences_increase(hist)


# -- the checker on its own ------------------------------------------------

def test_checker_accepts_disjoint_and_touching_windows() -> None:
    ivs = [Interval(1, 0.0, 1.0, 1), Interval(2, 1.0, 2.0, 2), Interval(3, 2.5, 3.0, 3)]
    assert check_no_overlap(reversed(ivs)) == 3
    assert check_fences_increase(ivs) == [1, 2, 3]
    assert check_no_overlap([]) == 0


def test_checker_reports_overlap_details() -> None:
    ivs = [Interval(10, 0.0, 1.0), Interval(11, 0.5, 2.0)]
    with pytest.raises(OverlapError) as info:
        check_no_overlap(ivs)
    msg = str(info.value)
    assert "pid=10" in msg and "pid=11" in msg
    assert len(info.value.pairs) == 1


def test_checker_finds_window_hidden_behind_a_long_one() -> None:
    # [3, 4] does not overlap its neighbour [1, 2] but does overlap [0, 10].
    ivs = [Interval(1, 0.0, 10.0), Interval(2, 1.0, 2.0), Interval(3, 3.0, 4.0)]
    with pytest.raises(OverlapError) as info:
        check_no_overlap(ivs)
    assert len(info.value.pairs) == 2


def test_checker_rejects_fences_out_of_order() -> None:
    with pytest.raises(FenceError):
        check_fences_increase([Interval(1, 0.0, 1.0, 5), Interval(2, 2.0, 3.0, 5)])
    with pytest.raises(FenceError):
        check_fences_increase([Interval(1, 0.0, 1.0, 7), Interval(2, 2.0, 3.0, 6)])
