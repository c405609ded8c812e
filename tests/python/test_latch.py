"""Countdown latch against a real redis-server, with real processes:
waiters in other processes return once the last count down is made (a
checker over the times each records), a registered party killed or
stopped before it counts down breaks the latch for every waiter within
its TTL, a party that counted down may die, live parties are kept by the
renewal thread, waiters sleep without polling, bad input, and the asyncio
API."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from typing import Any, List

import pytest

import hilock
from helpers import (
    join_all,
    kill_child,
    pop_report,
    scripts_run,
    start_child,
    subscribers,
    wait_for,
)

TTL = 1.0


def _channel(name: str) -> str:
    return "hilock:{" + name + "}:latch"


def _waiter(url: str, name: str, count: int, timeout: float) -> None:
    """Wait on the latch and report how it ended and when (time.time())."""
    import redis

    r = redis.Redis.from_url(url)
    latch = hilock.Client(url).latch(name, count, ttl=TTL)
    r.rpush("waiting", os.getpid())
    try:
        outcome = "true" if latch.wait(timeout=timeout) else "false"
    except hilock.BrokenBarrier:
        outcome = "broken"
    r.rpush("waited", json.dumps({"outcome": outcome, "at": time.time()}))


def _counter(url: str, name: str, count: int, downs: int) -> None:
    """Count down `downs` times, recording the time just before each."""
    import redis

    r = redis.Redis.from_url(url)
    latch = hilock.Client(url).latch(name, count, ttl=TTL)
    for _ in range(downs):
        time.sleep(0.05)
        r.rpush("downs", time.time())
        latch.count_down()


def check_none_early(downs: List[float], waited: List[dict]) -> None:
    """Every waiter returned True, after the last count down began."""
    last = max(downs)
    for w in waited:
        assert w["outcome"] == "true", w
        assert w["at"] >= last, (w["at"], last)


def test_waiters_in_other_processes_return_after_the_last_count_down(
        rds, redis_url: str) -> None:
    name = "latch:procs"
    waiters = [start_child(_waiter, redis_url, name, 8, 60) for _ in range(3)]
    try:
        # Every waiter listens before anyone counts down.
        wait_for(lambda: subscribers(rds, _channel(name)) >= 3, 20, what="the waiters")
        counters = [start_child(_counter, redis_url, name, 8, 2) for _ in range(4)]
        join_all(counters, 60)
        join_all(waiters, 60)
    finally:
        for p in waiters:
            kill_child(p)
    downs = [float(x) for x in rds.lrange("downs", 0, -1)]
    waited = [json.loads(x) for x in rds.lrange("waited", 0, -1)]
    assert len(downs) == 8 and len(waited) == 3
    check_none_early(downs, waited)
    assert hilock.Client(redis_url).latch(name, 8).count == 0


def test_the_checker_catches_an_early_waiter() -> None:
    """The control run: a waiter that returned before the last count down
    fails the check."""
    with pytest.raises(AssertionError):
        check_none_early([1.0, 2.0], [{"outcome": "true", "at": 1.5}])


def _party(url: str, name: str, count: int, count_down: bool, ttl: float = TTL) -> None:
    """Join name as a registered party (renewed by the thread), report,
    optionally count down, then sleep until killed."""
    import redis

    r = redis.Redis.from_url(url)
    party = hilock.Client(url).latch(name, count, ttl=ttl).join()
    if count_down:
        party.count_down()
    r.rpush("joined", json.dumps({"pid": os.getpid()}))
    time.sleep(3600)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["kill", "stop"])
def test_a_dead_party_breaks_the_latch_for_every_waiter(
        rds, redis_url: str, sig: int) -> None:
    name = f"latch:dead-{sig}"
    party = start_child(_party, redis_url, name, 2, False)
    waiters: List[Any] = []
    try:
        pop_report(rds, "joined")
        # 20 s: far past the party's TTL, so a latch that never breaks
        # ends the waits with False well within join_all's bound.
        waiters = [start_child(_waiter, redis_url, name, 2, 20) for _ in range(3)]
        wait_for(lambda: subscribers(rds, _channel(name)) >= 3, 20, what="the waiters")
        killed = time.time()
        os.kill(party.pid, sig)
        join_all(waiters, 60)
        waited = [json.loads(x) for x in rds.lrange("waited", 0, -1)]
        assert len(waited) == 3
        for w in waited:
            assert w["outcome"] == "broken", w
            # Generous: the lease ends TTL (1 s) after the party's last
            # renewal, and each waiter looks again just after it; 5 s more
            # for a loaded machine. Without the liveness they would wait 20 s.
            assert w["at"] - killed <= TTL + 5, w["at"] - killed
        with pytest.raises(hilock.BrokenBarrier):
            hilock.Client(redis_url).latch(name, 2).count_down()
    finally:
        if sig == signal.SIGSTOP:
            os.kill(party.pid, signal.SIGCONT)
        kill_child(party)
        for p in waiters:
            kill_child(p)


def test_a_party_that_counted_down_may_die(rds, redis_url: str,
                                            client: hilock.Client) -> None:
    name = "latch:done-then-dead"
    party = start_child(_party, redis_url, name, 2, True)
    try:
        pop_report(rds, "joined")
        kill_child(party)
        latch = client.latch(name, 2, ttl=TTL)
        # Three TTLs after its death: not broken, the count is what it left.
        assert latch.wait(timeout=3 * TTL) is False
        assert latch.count == 1
        assert not latch.broken
        latch.count_down()
        assert latch.wait(timeout=0) is True
    finally:
        kill_child(party)


def test_live_parties_are_kept_past_many_ttls(rds, redis_url: str,
                                              client: hilock.Client) -> None:
    name = "latch:alive"
    # 2 s: renewed every 0.67 s, a live party's renewal thread may stall
    # 1.3 s on a loaded machine before its lease ends.
    ttl = 2.0
    party = start_child(_party, redis_url, name, 1, False, ttl)
    try:
        pop_report(rds, "joined")
        mine = client.latch(name, 1, ttl=ttl).join()
        # Both leases (one in another process) renewed for 3 TTLs.
        assert client.latch(name, 1).wait(timeout=3 * ttl) is False
        assert not mine.lost
        mine.count_down()
        assert client.latch(name, 1).wait(timeout=0) is True
    finally:
        kill_child(party)


def test_a_waiter_sleeps_without_polling(rds, client: hilock.Client) -> None:
    latch = client.latch("latch:sleep", 1, ttl=30)
    got: List[bool] = []
    t = threading.Thread(target=lambda: got.append(latch.wait(timeout=30)))
    calls = scripts_run(rds)
    t.start()
    wait_for(lambda: client.waiting == 1, 10, what="the waiter to wait")
    time.sleep(0.5)
    # Its start: one look, and one or two more when its subscription was
    # confirmed after it (the shared waiting's rule); all within ms.
    started = scripts_run(rds)
    assert started - calls <= 3, started - calls
    time.sleep(2)
    # Two seconds asleep: no look (1 allowed for a stray script of another
    # test's process on the shared server); a look every 100 ms would be 20.
    assert scripts_run(rds) - started <= 1, scripts_run(rds) - started
    latch.count_down()
    t.join(10)
    assert got == [True]


def test_a_waiter_looks_once_per_lease_end(rds, redis_url: str,
                                           client: hilock.Client) -> None:
    """With a party renewed every ttl/3, a waiter looks again only when the
    lease it read would have ended: about once per 2/3 ttl."""
    other = hilock.Client(redis_url)
    try:
        party = other.latch("latch:lease", 1, ttl=1.5).join()
        latch = client.latch("latch:lease", 1, ttl=1.5)
        assert latch.count == 1
        calls, renewals = scripts_run(rds), other.stats()["renewals"]
        assert latch.wait(timeout=3) is False
        # The scripts the server ran meanwhile, but the party's renewals.
        looks = (scripts_run(rds) - calls) - (other.stats()["renewals"] - renewals)
        # 3 s / (2/3 * 1.5 s) = 3 looks, the last at the end, and up to
        # three at the start (see above); a look every 100 ms would be 30.
        assert looks <= 10, looks
        party.count_down()
    finally:
        other.close()


def test_a_party_counts_once_and_its_block_ends_it(client: hilock.Client) -> None:
    latch = client.latch("latch:party", 2, ttl=5)
    with latch.join() as party:
        assert party.validity > 0
        assert latch.count == 2
    assert latch.count == 1
    with pytest.raises(hilock.LockNotOwnedError):
        party.count_down()
    assert latch.count == 1
    party = latch.join()
    party.count_down()
    assert latch.wait(timeout=0)
    # Nothing left to join.
    with pytest.raises(hilock.InvalidArgument, match="count is 0"):
        latch.join()
    # Another object with another count does not change a latch that exists.
    assert client.latch("latch:party", 9).count == 0
    latch.delete()
    assert client.latch("latch:party", 9).count == 9


def test_a_failing_party_breaks_the_latch_at_once(client: hilock.Client) -> None:
    latch = client.latch("latch:fail", 1, ttl=30)
    got: List[Any] = []

    def wait() -> None:
        try:
            got.append(latch.wait(timeout=60))
        except hilock.BrokenBarrier as e:
            got.append(e)

    t = threading.Thread(target=wait)
    t.start()
    wait_for(lambda: client.waiting == 1, 10, what="the waiter to wait")
    with pytest.raises(RuntimeError):
        with latch.join():
            raise RuntimeError("the party's work failed")
    # Told at once (the 30 s lease is not waited out).
    t.join(10)
    assert len(got) == 1 and isinstance(got[0], hilock.BrokenBarrier)
    assert isinstance(got[0], threading.BrokenBarrierError)
    assert latch.broken
    for call in (latch.count_down, latch.join, lambda: latch.wait(0)):
        with pytest.raises(hilock.BrokenBarrier):
            call()
    latch.delete()
    assert not latch.broken and latch.count == 1


def test_bad_input_and_wrong_types(rds, client: hilock.Client) -> None:
    for bad in (0, -1, True, 1.5, "3", 1 << 51):
        with pytest.raises(hilock.InvalidArgument):
            client.latch("latch:bad", bad)  # type: ignore[arg-type]
    for ttl in (0, -1, float("nan")):
        with pytest.raises(ValueError):
            client.latch("latch:bad", 1, ttl=ttl)
    with pytest.raises(ValueError):
        client.latch("", 1)
    with pytest.raises(ValueError):
        client.latch("n" * 1025, 1)
    with pytest.raises(ValueError):
        client.latch("latch:bad", 1).wait(timeout=-1)
    assert client.latch("n" * 1024, 1).count == 1
    assert client.latch(b"latch:\x00bin", 1 << 50).count == 1 << 50
    rds.set("hilock:{latch:wrong}:latch", "a string")
    with pytest.raises(hilock.WrongTypeError):
        client.latch("latch:wrong", 1).wait(timeout=1)
    with pytest.raises(hilock.WrongTypeError):
        client.latch("latch:wrong", 1).count_down()
    rds.delete("hilock:{latch:wrong}:latch")
    rds.hset("hilock:{latch:wrong}:latch", "count", "many")
    with pytest.raises(hilock.WrongTypeError, match="holds no count"):
        client.latch("latch:wrong", 1).wait(timeout=0)


def test_asyncio_wait_count_down_join_and_cancel(rds, redis_url: str) -> None:
    import hilock.asyncio as ha

    async def main() -> None:
        async with ha.Client(redis_url) as c:
            latch = c.latch("latch:async", 2, ttl=5)
            assert await latch.count() == 2
            assert await latch.wait(timeout=0.2) is False
            # A cancelled wait leaves nothing behind: its step ends within
            # a second on its executor thread.
            task = asyncio.ensure_future(latch.wait())
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            waiter = asyncio.ensure_future(latch.wait(timeout=30))
            async with latch.join() as party:
                assert party.validity > 0
                assert await latch.count() == 2
            await latch.count_down()
            assert await asyncio.wait_for(waiter, 30) is True
            # A party whose block is cancelled breaks the latch.
            other = c.latch("latch:async2", 1, ttl=30)
            waiter = asyncio.ensure_future(other.wait(timeout=30))

            async def work() -> None:
                async with other.join():
                    await asyncio.sleep(30)

            worker = asyncio.ensure_future(work())
            await asyncio.sleep(0.3)
            worker.cancel()
            with pytest.raises(asyncio.CancelledError):
                await worker
            with pytest.raises(hilock.BrokenBarrier):
                await asyncio.wait_for(waiter, 30)
            assert await other.broken()
            await other.delete()
            party = await other.join()
            await party.count_down()
            assert await other.wait(0) is True

    asyncio.run(main())


def test_inspect_and_force_release_of_a_latch(rds, client: hilock.Client) -> None:
    latch = client.latch("latch:ops", 3, ttl=30)
    party = latch.join()
    latch.count_down()
    info = client.inspect("latch:ops")
    assert (info.type, info.held, info.hold_count, info.waiters, info.ttl) == (
        "latch", True, 2, 1, None)
    assert [i.name for i in client.list_locks("latch:o*")] == ["latch:ops"]
    got: List[Any] = []
    t = threading.Thread(target=lambda: got.append(latch.wait(timeout=30)))
    t.start()
    wait_for(lambda: client.waiting == 1, 10, what="the waiter to wait")
    # The operator's release deletes it; the waiter looks again (and makes
    # it anew with its count).
    assert client.force_release("latch:ops")
    wait_for(lambda: rds.hget("hilock:{latch:ops}:latch", "count") == b"3", 10,
             what="the waiter's look")
    assert client.inspect("latch:ops").hold_count == 3
    for _ in range(3):
        latch.count_down()
    t.join(10)
    assert got == [True]
    info = client.inspect("latch:ops")
    assert (info.type, info.held, info.hold_count) == ("latch", False, 0)
    # A broken latch is not held, its count above 0.
    broken = client.latch("latch:ops2", 2, ttl=30)
    broken.abort()
    info = client.inspect("latch:ops2")
    assert (info.type, info.held, info.hold_count) == ("latch", False, 2)
    with pytest.raises(hilock.LockNotOwnedError):
        party.count_down()  # its registration went with the force release


def test_a_cancelled_async_join_gives_up_once_through() -> None:
    """A join cancelled while its round trip is held back (DEBUG SLEEP):
    the party registered behind the caller's back gives up once through,
    so the latch is broken at once rather than kept by a party nobody
    holds (or left to its 30 s lease)."""
    import hilock.asyncio as ha
    from helpers import RedisServer, debug_sleep

    srv = RedisServer(extra_args=["--enable-debug-command", "yes"]).start()
    try:
        async def main() -> None:
            async with ha.Client(srv.url) as c:
                latch = c.latch("latch:cancel", 1, ttl=30)
                assert await latch.count() == 1
                sock = debug_sleep(srv.port, 0.5)
                task = asyncio.ensure_future(latch.join().__aenter__())
                await asyncio.sleep(0.1)  # the join is on its way, held back
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                sock.close()
                deadline = time.monotonic() + 10  # generous: it takes a round trip
                while not await latch.broken():
                    assert time.monotonic() < deadline, "the cancelled party did not give up"
                    await asyncio.sleep(0.05)

        asyncio.run(main())
    finally:
        srv.cleanup()
