"""Barriers and double barriers against a real redis-server, with real
processes: every generation's arrival indexes and its release (a history
checker over recorded arrivals and returns), parties SIGKILLed or
SIGSTOPped while others wait (the others raise BrokenBarrier, never hang
nor pass), timeouts, reset, a long wait that must not break, no polling
while blocked, the double barrier's enter and leave, bad input and the
asyncio API."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

import hilock
from helpers import command_calls, join_all, kill_child, start_child, wait_for

TTL = 1.0


def _record(r: Any, key: str, *event: Any) -> None:
    """Append event, ordered by one counter shared by every process."""
    r.rpush(key, json.dumps([r.incr(key + ":seq"), *event]))


def _history(r: Any, key: str) -> List[List[Any]]:
    return [json.loads(x) for x in r.lrange(key, 0, -1)]


def check_generations(events: List[List[Any]], parties: int, generations: int) -> None:
    """events: [seq, "arrive" | "pass", pid, generation, index]. Every
    generation handed out the indexes 0..parties-1 once each, and nobody
    passed generation g before every party had arrived at g (an arrival is
    recorded before the wait begins, so a pass recorded before it is one
    that did not wait for that party)."""
    arrived: Dict[int, List[int]] = {}
    passed: Dict[int, List[Tuple[int, int]]] = {}
    for seq, what, _pid, g, index in events:
        if what == "arrive":
            arrived.setdefault(g, []).append(seq)
        else:
            passed.setdefault(g, []).append((seq, index))
    assert sorted(arrived) == list(range(generations)), sorted(arrived)
    for g in range(generations):
        assert len(arrived[g]) == parties, (g, arrived[g])
        assert sorted(i for _, i in passed.get(g, [])) == list(range(parties)), (g, passed.get(g))
        last = max(arrived[g])
        early = [s for s, _ in passed[g] if s < last]
        assert not early, f"generation {g}: passed at {early} before the arrival at {last}"


def _party(url: str, name: str, parties: int, generations: int) -> None:
    import redis

    r = redis.Redis.from_url(url)
    barrier = hilock.Client(url).barrier(name, parties, ttl=5)
    for g in range(generations):
        _record(r, "events", "arrive", os.getpid(), g, -1)
        index = barrier.wait(timeout=60)
        _record(r, "events", "pass", os.getpid(), g, index)


def test_five_processes_twenty_generations(rds, redis_url: str) -> None:
    procs = [start_child(_party, redis_url, "b:gen", 5, 20) for _ in range(5)]
    join_all(procs, 120)
    check_generations(_history(rds, "events"), 5, 20)


def test_the_checker_catches_an_early_pass(rds) -> None:
    """The control: a history where a party passed generation 0 before the
    last arrival fails the checker, as do repeated indexes."""
    for pid in range(3):
        _record(rds, "control", "arrive", pid, 0, -1)
    for pid in range(3):
        _record(rds, "control", "pass", pid, 0, pid)
    check_generations(_history(rds, "control"), 3, 1)  # the good history passes
    rds.delete("control", "control:seq")
    for pid in range(2):
        _record(rds, "control", "arrive", pid, 0, -1)
    _record(rds, "control", "pass", 0, 0, 0)  # passed before the third arrived
    _record(rds, "control", "arrive", 2, 0, -1)
    _record(rds, "control", "pass", 1, 0, 1)
    _record(rds, "control", "pass", 2, 0, 2)
    with pytest.raises(AssertionError, match="before the arrival"):
        check_generations(_history(rds, "control"), 3, 1)
    rds.delete("control", "control:seq")
    for pid in range(2):
        _record(rds, "control", "arrive", pid, 0, -1)
    for pid in range(2):
        _record(rds, "control", "pass", pid, 0, 0)
    with pytest.raises(AssertionError):
        check_generations(_history(rds, "control"), 2, 1)


def _wait_and_report(url: str, name: str, parties: int, ttl: float, timeout: float) -> None:
    """Wait once; report the index or the exception's class and message."""
    import redis

    r = redis.Redis.from_url(url)
    barrier = hilock.Client(url).barrier(name, parties, ttl=ttl)
    try:
        index = barrier.wait(timeout=timeout)
        r.rpush("outcome", json.dumps(["index", index]))
    except hilock.BrokenBarrier as e:
        r.rpush("outcome", json.dumps(["broken", str(e)]))


def _outcomes(rds: Any, n: int, timeout: float) -> List[List[Any]]:
    got = []
    for _ in range(n):
        item = rds.blpop(["outcome"], timeout=timeout)
        assert item is not None, f"{len(got)} of {n} outcomes within {timeout} s: {got}"
        got.append(json.loads(item[1]))
    return got


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["kill", "stop"])
def test_a_party_that_dies_while_others_wait_breaks_the_barrier(
        rds, client: hilock.Client, redis_url: str, sig: int) -> None:
    name = f"b:dead-{sig}"
    barrier = client.barrier(name, 4, ttl=TTL)
    victim = start_child(_wait_and_report, redis_url, name, 4, TTL, 600)
    wait_for(lambda: barrier.n_waiting == 1, 10, what="the victim to wait")
    others = [start_child(_wait_and_report, redis_url, name, 4, TTL, 600) for _ in range(2)]
    try:
        wait_for(lambda: barrier.n_waiting == 3, 10, what="three parties to wait")
        os.kill(victim.pid, sig)
        # Generous (the others would wait 600 s): the victim's lease ends
        # TTL (1 s) after its last renewal, and the first look after that
        # breaks the barrier for both.
        got = _outcomes(rds, 2, 30)
        assert [g[0] for g in got] == ["broken", "broken"], got
        assert all("lease ran out" in g[1] for g in got), got
        assert barrier.broken
        with pytest.raises(hilock.BrokenBarrier):
            barrier.wait(timeout=5)
        join_all(others, 10)
    finally:
        if sig == signal.SIGSTOP:
            os.kill(victim.pid, signal.SIGCONT)
        for p in [victim, *others]:
            kill_child(p)


def test_a_wait_timeout_breaks_the_barrier_for_the_others(
        rds, client: hilock.Client, redis_url: str) -> None:
    barrier = client.barrier("b:timeout", 3, ttl=5)
    other = start_child(_wait_and_report, redis_url, "b:timeout", 3, 5, 600)
    try:
        wait_for(lambda: barrier.n_waiting == 1, 10, what="the other party to wait")
        with pytest.raises(hilock.BrokenBarrier, match="timed out"):
            barrier.wait(timeout=0.2)
        # A threading.BrokenBarrierError too, as threading's timeout raises.
        with pytest.raises(threading.BrokenBarrierError):
            barrier.wait(timeout=0.2)
        got = _outcomes(rds, 1, 30)
        assert got[0][0] == "broken" and "timed out" in got[0][1], got
        assert barrier.broken
        join_all([other], 10)
    finally:
        kill_child(other)


def test_reset_wakes_the_waiters_and_the_next_generation_works(
        client: hilock.Client) -> None:
    barrier = client.barrier("b:reset", 3, ttl=5)
    errors: List[BaseException] = []

    def wait() -> None:
        try:
            barrier.wait(timeout=60)
        except BaseException as e:  # noqa: BLE001 - the outcome is the point
            errors.append(e)

    threads = [threading.Thread(target=wait) for _ in range(2)]
    for t in threads:
        t.start()
    wait_for(lambda: barrier.n_waiting == 2, 10, what="two waiters")
    barrier.reset()
    for t in threads:
        t.join(30)
    assert len(errors) == 2 and all(isinstance(e, hilock.BrokenBarrier) for e in errors), errors
    assert not barrier.broken
    # The next generation releases all three, with indexes 0, 1 and 2.
    indexes: List[int] = []
    threads = [threading.Thread(target=lambda: indexes.append(barrier.wait(timeout=60)))
               for _ in range(2)]
    for t in threads:
        t.start()
    wait_for(lambda: barrier.n_waiting == 2, 10, what="two waiters")
    last = barrier.wait(timeout=60)
    for t in threads:
        t.join(30)
    assert last == 2 and sorted(indexes) == [0, 1]
    # Abort breaks it until the next reset; delete ends it.
    barrier.abort()
    assert barrier.broken
    with pytest.raises(hilock.BrokenBarrier, match="aborted"):
        barrier.wait(timeout=5)
    barrier.reset()
    assert barrier.delete()
    assert not barrier.delete()


def test_a_long_wait_with_every_party_alive_does_not_break(
        rds, client: hilock.Client, redis_url: str) -> None:
    """Four parties wait 3 x TTL for a slow fifth: their renewals keep them,
    and nothing breaks."""
    barrier = client.barrier("b:slow", 5, ttl=TTL)
    procs = [start_child(_wait_and_report, redis_url, "b:slow", 5, TTL, 600)
             for _ in range(4)]
    try:
        wait_for(lambda: barrier.n_waiting == 4, 10, what="four parties to wait")
        time.sleep(3 * TTL)
        assert not barrier.broken
        assert barrier.wait(timeout=30) == 4
        got = _outcomes(rds, 4, 30)
        assert sorted(g[1] for g in got) == [0, 1, 2, 3], got
        join_all(procs, 10)
    finally:
        for p in procs:
            kill_child(p)


def test_a_waiter_sleeps_without_polling(rds, client: hilock.Client) -> None:
    barrier = client.barrier("b:sleep", 2, ttl=30)
    got: List[int] = []
    t = threading.Thread(target=lambda: got.append(barrier.wait(timeout=60)))
    t.start()
    wait_for(lambda: barrier.n_waiting == 1, 10, what="the waiter")
    before = command_calls(rds).get("evalsha", 0)
    time.sleep(1.0)
    # Asleep on the channel until a message or the other leases' end (none
    # here but its own, renewed every 10 s): no look in a second but the
    # end of its start (the look after it listens may fall in the window on
    # a loaded machine); a waiter polling every 50 ms would make 20.
    assert command_calls(rds).get("evalsha", 0) - before <= 3
    assert barrier.wait(timeout=30) == 1
    t.join(10)
    assert got == [0]


def test_parties_must_agree_and_bad_input_is_refused(rds, client: hilock.Client) -> None:
    for bad in (0, -1, hilock._hilock.HILOCK_BARRIER_PARTIES_MAX + 1):
        with pytest.raises(hilock.InvalidArgument, match="parties must be"):
            client.barrier("b:bad", bad)
        with pytest.raises(hilock.InvalidArgument, match="parties must be"):
            client.double_barrier("b:bad", bad)
    for wrong in (True, 2.0, "2", None):
        with pytest.raises(hilock.InvalidArgument):
            client.barrier("b:bad", wrong)  # type: ignore[arg-type]
    for ttl in (0, -1, float("nan")):
        with pytest.raises(ValueError):
            client.barrier("b:bad", 2, ttl=ttl)
    for name in ("", "x" * 1025, "}x"):
        with pytest.raises(hilock.InvalidArgument):
            client.barrier(name, 2)
    with pytest.raises(ValueError):
        client.barrier("b:bad", 2).wait(timeout=-1)
    # The first arrival sets the count: another is refused, naming both.
    two = client.barrier("b:count", 2, ttl=5)
    with pytest.raises(hilock.BrokenBarrier):
        two.wait(timeout=0)
    with pytest.raises(hilock.InvalidArgument,
                       match="has 2 parties; this handle was made with 3"):
        client.barrier("b:count", 3).wait(timeout=1)
    # Keys of the name holding something else.
    rds.set("hilock:{b:wrong}:barrier", "x")
    with pytest.raises(hilock.WrongTypeError):
        client.barrier("b:wrong", 2).wait(timeout=1)
    with pytest.raises(hilock.WrongTypeError):
        _ = client.barrier("b:wrong", 2).broken
    rds.set("hilock:{b:wrong}:inside", "x")
    with pytest.raises(hilock.WrongTypeError):
        client.double_barrier("b:wrong", 2).enter(timeout=1)
    db = client.double_barrier("b:bad", 2)
    with pytest.raises(hilock.InvalidArgument, match="did not enter"):
        db.leave()


def _double_party(url: str, name: str, parties: int, rounds: int) -> None:
    import redis

    r = redis.Redis.from_url(url)
    db = hilock.Client(url).double_barrier(name, parties, ttl=5)
    for g in range(rounds):
        _record(r, "events", "enter", os.getpid(), g, -1)
        with db.enter(timeout=60):
            _record(r, "events", "inside", os.getpid(), g, -1)
            time.sleep(0.01 * (os.getpid() % 5))
            _record(r, "events", "leave", os.getpid(), g, -1)
        _record(r, "events", "left", os.getpid(), g, -1)


def check_double(events: List[List[Any]], parties: int, rounds: int) -> None:
    """Nobody was inside round g before every party called enter, nor left
    it before every party called leave."""
    at: Dict[Tuple[str, int], List[int]] = {}
    for seq, what, _pid, g, _ in events:
        at.setdefault((what, g), []).append(seq)
    for g in range(rounds):
        for what in ("enter", "inside", "leave", "left"):
            assert len(at[(what, g)]) == parties, (what, g)
        assert min(at[("inside", g)]) > max(at[("enter", g)]), f"round {g}: inside early"
        assert min(at[("left", g)]) > max(at[("leave", g)]), f"round {g}: left early"


def test_double_barrier_enter_and_leave_with_processes(rds, redis_url: str) -> None:
    procs = [start_child(_double_party, redis_url, "db:race", 4, 5) for _ in range(4)]
    join_all(procs, 120)
    check_double(_history(rds, "events"), 4, 5)
    # The control: an early leave fails the checker.
    events = [[1, "enter", 1, 0, -1], [2, "enter", 2, 0, -1], [3, "inside", 1, 0, -1],
              [4, "inside", 2, 0, -1], [5, "leave", 1, 0, -1], [6, "left", 1, 0, -1],
              [7, "leave", 2, 0, -1], [8, "left", 2, 0, -1]]
    with pytest.raises(AssertionError, match="left early"):
        check_double(events, 2, 1)


def _enter_and_hang(url: str, name: str, parties: int, ttl: float) -> None:
    import redis

    r = redis.Redis.from_url(url)
    db = hilock.Client(url).double_barrier(name, parties, ttl=ttl)
    db.enter(timeout=60)
    r.rpush("inside", os.getpid())
    time.sleep(3600)


def test_a_party_that_dies_inside_breaks_the_others_leave(
        rds, client: hilock.Client, redis_url: str) -> None:
    victim = start_child(_enter_and_hang, redis_url, "db:dead", 2, TTL)
    try:
        db = client.double_barrier("db:dead", 2, ttl=TTL)
        with pytest.raises(hilock.BrokenBarrier, match="lease ran out"):
            with db.enter(timeout=30):
                assert rds.blpop(["inside"], timeout=10)
                os.kill(victim.pid, signal.SIGKILL)
                # Leaving at the block's end would wait forever for the
                # victim; its lease ends TTL (1 s) after its last renewal.
        assert db.broken
        db.reset()
        assert not db.broken and db.n_inside == 0
    finally:
        kill_child(victim)


def test_double_barrier_enter_timeout_withdraws(client: hilock.Client) -> None:
    db = client.double_barrier("db:to", 2, ttl=5)
    with pytest.raises(hilock.LockTimeout, match="withdrawn"):
        db.enter(timeout=0.1)
    assert db.n_inside == 0 and not db.broken
    one = client.double_barrier("db:one", 1, ttl=5)
    with one.enter() as inside:
        assert inside.barrier is one
        with pytest.raises(hilock.InvalidArgument, match="inside already"):
            one.enter()
    with pytest.raises(hilock.InvalidArgument):
        one.leave()


def test_asyncio_wait_and_a_cancelled_wait_breaks_it(client: hilock.Client,
                                                     redis_url: str) -> None:
    import hilock.asyncio as ha

    async def main() -> None:
        async with ha.Client(redis_url) as c:
            barrier = c.barrier("b:async", 3, ttl=5)
            assert barrier.parties == 3
            got = await asyncio.gather(*(barrier.wait(timeout=30) for _ in range(3)))
            assert sorted(got) == [0, 1, 2]
            # A cancelled wait breaks the generation for the other waiter.
            other = client.barrier("b:async", 3, ttl=5)
            errors: List[BaseException] = []

            def wait() -> None:
                try:
                    other.wait(timeout=60)
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)

            t = threading.Thread(target=wait)
            t.start()
            task = asyncio.ensure_future(barrier.wait())
            while await barrier.n_waiting() < 2:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await barrier.broken()
            await asyncio.get_running_loop().run_in_executor(None, t.join, 30)
            assert len(errors) == 1 and isinstance(errors[0], hilock.BrokenBarrier), errors
            await barrier.reset()
            assert not await barrier.broken()
            # The double barrier: async with await enter().
            db = c.double_barrier("db:async", 2, ttl=5)

            async def party() -> None:
                async with await db.enter(timeout=30) as inside:
                    assert inside.barrier is db

            await asyncio.gather(party(), party())
            assert await db.n_inside() == 0
            assert await db.delete()

    asyncio.run(main())
