"""hilock.asyncio against a real server: tasks of one loop and of several
processes contend on one name (exact counts, a history checker), waiting
tasks share a few connections and threads, cancellation and wait_for
withdraw a wait without leaving a grant, loss surfaces at the end of
``async with``, and tasks exclude threads of the blocking API.

The coroutines run on a loop each test makes and closes (asyncio.Runner in
plain pytest functions, no plugin), once on asyncio's own event loop and
once on uvloop's."""
from __future__ import annotations

import asyncio
import gc
import multiprocessing as mp
import os
import select
import socket
import threading
import time
from typing import Any, Awaitable, Callable, Iterator, List, Optional

import pytest

import hilock
import hilock.asyncio as hla
from helpers import Loops, debug_sleep, each_loop, run_with_client
from history import Interval, RedisHistory, check_fences_increase, check_no_overlap

FORK = mp.get_context("fork")


# The event loop the tests run on: asyncio's own, and uvloop's (the
# library watches one descriptor with add_reader, which both provide).


@pytest.fixture(autouse=True, params=["asyncio", "uvloop"])
def event_loop_kind(request: Any) -> Iterator[str]:
    yield from each_loop(request)


run = run_with_client


async def cancel_waiting(locks: List[Any], waiting: Callable[[], int]) -> None:
    """Start an acquire of each lock, wait until waiting() counts them all,
    cancel every one and check that each ends cancelled."""
    tasks = [asyncio.ensure_future(lk.acquire()) for lk in locks]
    while waiting() < len(locks):
        await asyncio.sleep(0.01)
    for t in tasks:
        t.cancel()
    for t in tasks:
        with pytest.raises(asyncio.CancelledError):
            await t


def threads_now() -> int:
    return len(os.listdir("/proc/self/task"))


async def count_up(lk: hla.Lock, rds: Any, key: str, spans: List[Interval]) -> None:
    async with lk:
        start = time.monotonic()
        v = int(rds.get(key) or 0)  # a read-modify-write the lock must protect
        await asyncio.sleep(0)
        rds.set(key, v + 1)
        spans.append(Interval(os.getpid(), start, time.monotonic(), lk.fence))


def test_300_tasks_count_exactly_and_never_overlap(rds, redis_url) -> None:
    spans: List[Interval] = []

    async def main(c: hla.Client) -> None:
        locks = [c.lock("aio:count", ttl=10, timeout=30) for _ in range(300)]
        await asyncio.gather(*(count_up(lk, rds, "aio:n", spans) for lk in locks))

    run(redis_url, main)
    assert int(rds.get("aio:n")) == 300
    check_no_overlap(spans)
    check_fences_increase(spans)


def _process(url: str, tasks: int) -> None:
    import redis
    r = redis.Redis.from_url(url)
    hist = RedisHistory(r, "aio:hist")

    async def one(lk: hla.Lock) -> None:
        async with lk:
            start = time.monotonic()
            v = int(r.get("aio:shared") or 0)
            await asyncio.sleep(0.001)
            r.set("aio:shared", v + 1)
            hist.record(start, time.monotonic(), lk.fence)

    async def main(c: hla.Client) -> None:
        await asyncio.gather(*(one(c.lock("aio:procs", ttl=10, timeout=60))
                               for _ in range(tasks)))

    run(url, main)


def test_4_processes_of_20_tasks_share_one_counter(rds, redis_url) -> None:
    procs = [FORK.Process(target=_process, args=(redis_url, 20)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert int(rds.get("aio:shared")) == 80
    spans = RedisHistory(rds, "aio:hist").load()
    assert len(spans) == 80
    check_no_overlap(spans)
    check_fences_increase(spans)


def test_tasks_sharing_one_lock_object_take_turns(rds, redis_url) -> None:
    """One lock object is one holder: the tasks that share it go one at a
    time, in the order they came; a non-blocking acquire while another
    task has it says False; a task cancelled in the line passes its turn
    on; nothing is left held."""
    async def main(c: hla.Client) -> None:
        lk = c.lock("aio:turns", ttl=10, timeout=30)
        order: List[int] = []
        inside = 0

        async def one(i: int) -> None:
            nonlocal inside
            async with lk:
                inside += 1
                assert inside == 1
                order.append(i)
                await asyncio.sleep(0.02)
                inside -= 1

        assert await lk.acquire()
        tasks = [asyncio.ensure_future(one(i)) for i in range(6)]
        await asyncio.sleep(0.05)  # all six in the line, in order
        assert not await lk.acquire(blocking=False)
        tasks[2].cancel()
        await lk.release()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert tasks[2].cancelled()
        assert order == [0, 1, 3, 4, 5]
        assert not await lk.locked()
        assert await lk.acquire(blocking=False)  # the turn is free
        await lk.release()

    run(redis_url, main)
    assert rds.exists("hilock:{aio:turns}") == 0


def test_one_timeout_bounds_the_wait_for_the_turn_and_the_server(rds, redis_url) -> None:
    """A task that waits for its turn at a shared lock object, then for the
    server, has one timeout for both: the second wait gets what the first
    left (as the blocking API's threads)."""
    other = hilock.Client(redis_url)
    taker = other.lock("aio:turn-timeout", ttl=30, auto_renew=False)

    async def main(c: hla.Client) -> None:
        lk = c.lock("aio:turn-timeout", ttl=30, auto_renew=False)
        assert await lk.acquire()
        start = time.monotonic()
        waiter = asyncio.ensure_future(lk.acquire(timeout=3.0))
        await asyncio.sleep(2.5)
        await lk.release()
        # The waiter has the turn but has not run yet: the lock goes to
        # another client first, and the waiter meets it on the server.
        assert taker.acquire(blocking=False)
        assert await waiter is False
        took = time.monotonic() - start
        # 3 s in all; 5.5 s if the server's wait were given the whole
        # timeout again: 4.25 s tells the two apart with room for a stalled,
        # loaded machine.
        assert 2.95 <= took < 4.25, took

    try:
        run(redis_url, main)
    finally:
        taker.release()
        other.close()


def test_finished_operations_leave_nothing_behind(redis_url) -> None:
    """Each finished operation completes its future and lets go of it and
    of its result (the reader callback is C): 1,000 more operations leave
    no more futures alive, and the runner's tables empty."""
    def alive() -> int:
        gc.collect()
        return sum(isinstance(o, asyncio.Future) for o in gc.get_objects())

    async def main(c: hla.Client) -> None:
        lk = c.lock("aio:leftovers", ttl=10)
        for _ in range(20):
            assert await lk.acquire()
            await lk.release()
        before = alive()
        for _ in range(500):
            assert await lk.acquire()
            assert await lk.owned()
            await lk.release()
        assert alive() - before < 20
        assert not c._runner._futures and not c._runner._late

    run(redis_url, main)


def test_waiting_tasks_share_connections_and_threads(rds, redis_url) -> None:
    """300 tasks wait on a held lock: at most 8 server connections in all
    and at most 4 more threads; then all are served in turn."""
    holder = hilock.Client(redis_url)
    held = holder.lock("aio:crowd", ttl=30, auto_renew=False)
    assert held.acquire(blocking=False)
    before = threads_now()
    seen = {}

    async def main(c: hla.Client) -> None:
        done = 0

        async def one() -> None:
            nonlocal done
            async with c.lock("aio:crowd", ttl=30, timeout=60):
                done += 1

        tasks = [asyncio.ensure_future(one()) for _ in range(300)]
        while c.waiting < 300:
            await asyncio.sleep(0.01)
        seen["clients"] = int(rds.info("clients")["connected_clients"])
        seen["threads"] = threads_now() - before
        assert done == 0
        await asyncio.get_running_loop().run_in_executor(None, held.release)
        await asyncio.gather(*tasks)
        seen["done"] = done

    try:
        run(redis_url, main)
    finally:
        holder.close()
    # rds, the holder's pool, the subscriber and the pooled connections
    # of the operations in flight (on the loop's thread and the workers).
    assert seen["clients"] <= 8, seen
    assert seen["threads"] <= 4, seen
    assert seen["done"] == 300


def test_cancelled_waiters_leave_the_lock_free(rds, redis_url) -> None:
    """50 waiting tasks cancelled: none of them ends up holding the lock."""
    async def main(c: hla.Client) -> None:
        holder = c.lock("aio:cancel", ttl=30, auto_renew=False)
        assert await holder.acquire(blocking=False)
        waiters = [c.lock("aio:cancel", ttl=30, auto_renew=False) for _ in range(50)]
        await cancel_waiting(waiters, lambda: c.waiting)
        await holder.release()
        await asyncio.sleep(0.2)
        assert rds.exists("hilock:{aio:cancel}:lock") == 0
        assert not any(w.token and w.validity > 0 for w in waiters)
        # Still usable: the next acquire is granted at once.
        again = c.lock("aio:cancel", ttl=30)
        assert await again.acquire(blocking=False)
        await again.release()

    run(redis_url, main)


def test_wait_for_timeout_and_cancel_racing_a_grant(rds, redis_url) -> None:
    async def main(c: hla.Client) -> None:
        holder = c.lock("aio:wf", ttl=30, auto_renew=False)
        w = c.lock("aio:wf", ttl=30, auto_renew=False)
        assert await holder.acquire()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(w.acquire(), 0.2)
        assert not await w.acquire(timeout=0.1)
        await holder.release()
        # Cancel at moments around the grant, on a free lock (before the
        # attempt, while it is on the wire, after its result came but
        # before the task resumed): either the grant came first (held) or
        # the acquire ends cancelled and nothing is held. Never a hang.
        outcomes = set()
        for delay in [0.0, 0.0002, 0.0005, 0.001, 0.002, 0.004] * 8:
            t = asyncio.ensure_future(w.acquire())
            if delay:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            t.cancel()
            try:
                assert await asyncio.wait_for(asyncio.shield(t), 10)
                outcomes.add("granted")
                assert rds.get("hilock:{aio:wf}:lock").decode() == w.token
                await w.release()
            except asyncio.CancelledError:
                outcomes.add("cancelled")
                assert rds.exists("hilock:{aio:wf}:lock") == 0
        assert "cancelled" in outcomes

    run(redis_url, main)


def test_loss_inside_async_with_raises_lock_lost(rds, redis_url) -> None:
    async def main(c: hla.Client) -> None:
        with pytest.raises(hilock.LockLost):
            async with c.lock("aio:lost", ttl=0.3) as lk:
                rds.delete("hilock:{aio:lost}:lock")  # taken away behind its back
                for _ in range(100):
                    if lk.lost:
                        break
                    await asyncio.sleep(0.05)
                assert lk.lost

    run(redis_url, main)


def test_tasks_and_threads_exclude_each_other(rds, redis_url) -> None:
    sync = hilock.Client(redis_url)
    lk = sync.lock("aio:mixed", ttl=30)
    got = threading.Event()
    assert lk.acquire()

    async def main(c: hla.Client) -> None:
        a = c.lock("aio:mixed", ttl=30)
        assert not await a.acquire(blocking=False)
        t = asyncio.ensure_future(a.acquire(timeout=10))
        for _ in range(500):  # 5 s at most
            if c.waiting == 1:
                break
            await asyncio.sleep(0.01)
        assert c.waiting == 1, "the task never waited"
        assert not t.done()
        await asyncio.get_running_loop().run_in_executor(None, lk.release)
        assert await t
        got.set()
        assert a.fence is not None and a.fence > 0
        await a.release()

    try:
        run(redis_url, main)
    finally:
        sync.close()
    assert got.is_set()


def test_bad_input(rds, redis_url) -> None:
    async def main(c: hla.Client) -> None:
        lk = c.lock("aio:bad", ttl=5)
        with pytest.raises(hilock.InvalidArgument):
            await lk.acquire(blocking=False, timeout=1)
        with pytest.raises(hilock.InvalidArgument):
            await lk.acquire(timeout=-5)
        with pytest.raises(hilock.LockNotOwnedError):
            await lk.release()
        # A failure reported by the core carries its own message.
        assert await lk.acquire()
        rds.delete("hilock:{aio:bad}:lock")
        with pytest.raises(hilock.LockNotOwnedError, match="expired or another owner"):
            await lk.release()
        with pytest.raises(hilock.InvalidArgument):
            c.lock("", ttl=5)
        with pytest.raises(hilock.InvalidArgument):
            c.lock("aio:bad", ttl=-1)
        # Closed: no new locks.
        await c.close()
        with pytest.raises(hilock.ConnectionError):
            c.lock("aio:bad", ttl=5)

    run(redis_url, main)


def test_a_client_moves_to_the_next_loop_once_its_loop_is_closed(rds, redis_url) -> None:
    """One client (and its lock objects) over successive loops, as
    successive asyncio.run calls or a test framework's loop per test use
    it: each loop's first operation binds it anew once the loop before is
    closed, and the runner of the closed loop is freed (no thread is left
    behind per loop). A second loop while the first is open is refused."""
    c = hla.Client(redis_url)
    lk = c.lock("aio:loops", ttl=10)
    fences: List[int] = []

    async def cycle() -> None:
        async with lk:
            assert lk.fence is not None
            fences.append(lk.fence)

    threads: List[int] = []
    for _ in range(4):
        with asyncio.Runner(loop_factory=Loops.factory) as runner:
            runner.run(cycle())
        threads.append(threads_now())
    assert len(fences) == 4 and fences == sorted(set(fences))
    assert threads[3] <= threads[0], threads  # the closed loops' runners went

    first = asyncio.Runner(loop_factory=Loops.factory)
    second = asyncio.Runner(loop_factory=Loops.factory)
    try:
        first.run(cycle())
        with pytest.raises(RuntimeError, match="another event loop"):
            second.run(cycle())
        first.close()
        second.run(cycle())  # the first loop is closed now
        second.run(c.close())
    finally:
        first.close()
        second.close()
    assert len(fences) == 6
    assert not rds.exists("hilock:{aio:loops}:lock")


def test_clients_and_locks_refuse_copies(redis_url) -> None:
    """As in the blocking API: a copy of a client or a lock would be a
    second handle on one pool or one holder, so copies and pickles raise
    TypeError."""
    import copy
    import pickle

    async def main(c: hla.Client) -> None:
        objects = [c, c.lock("aio:copy"), c.rlock("aio:copy"), c.semaphore("aio:copy", 2),
                   c.rwlock("aio:copy"), c.rwlock("aio:copy").read(),
                   c.rwlock("aio:copy", compat="redisson")]
        for obj in objects:
            for how in (copy.copy, copy.deepcopy, pickle.dumps):
                with pytest.raises(TypeError, match="cannot be"):
                    how(obj)

    run(redis_url, main)


@pytest.mark.parametrize("kind", ["fair_lock", "sequential_lock"])
def test_cancelled_queue_waiters_leave_and_the_next_is_served(rds, redis_url, kind) -> None:
    """50 waiters cancelled on a queue lock leave the queue; the next waiter
    is then first in line."""
    sync = hilock.Client(redis_url)
    holder = getattr(sync, kind)("aio:queue", ttl=30, auto_renew=False)
    assert holder.acquire(blocking=False)

    async def main(c: hla.Client) -> None:
        waiters = [getattr(c, kind)("aio:queue", ttl=30, auto_renew=False)
                   for _ in range(50)]
        await cancel_waiting(waiters, holder.waiters)
        assert holder.waiters() == 0
        nxt = getattr(c, kind)("aio:queue", ttl=30, auto_renew=False)
        t = asyncio.ensure_future(nxt.acquire(timeout=20))
        while holder.waiters() < 1:
            await asyncio.sleep(0.01)
        await asyncio.get_running_loop().run_in_executor(None, holder.release)
        assert await t
        await nxt.release()

    try:
        run(redis_url, main)
    finally:
        sync.close()


async def _held_once(lk: Any, timeout: float) -> bool:
    """Acquire and release lk in one task (its owner): whether it was granted."""
    ok = await lk.acquire(timeout=timeout)
    if ok:
        await lk.release()
    return bool(ok)


async def _queued(rds: Any, queue: str, n: int) -> None:
    """Wait (2 s at most) until Redisson's queue holds n waiters."""
    for _ in range(200):
        if rds.llen(queue) == n:
            break
        await asyncio.sleep(0.01)
    assert rds.llen(queue) == n


def test_cancelled_redisson_fair_waiters_leave_its_queue(rds, redis_url) -> None:
    """Redisson's fair lock (compat="redisson") from tasks: waiters that are
    cancelled or time out leave Redisson's queue, so the waiter behind them
    is served once the holder lets go (a waiter left queued would hold the
    line until its own deadline, its lock's 30 s)."""
    name = "aio:rfair"
    queue = f"redisson_lock_queue:{{{name}}}"

    async def body(c: hla.Client) -> None:
        with hilock.Client(redis_url) as holder:
            held = holder.fair_lock(name, ttl=30, compat="redisson")
            assert held.acquire(blocking=False)
            gone = [c.fair_lock(name, ttl=30, compat="redisson") for _ in range(3)]
            tasks = [asyncio.ensure_future(lk.acquire()) for lk in gone]
            timed = c.fair_lock(name, ttl=30, compat="redisson")
            late = asyncio.ensure_future(timed.acquire(timeout=0.3))
            await _queued(rds, queue, 4)
            last = c.fair_lock(name, ttl=30, compat="redisson")
            served = asyncio.ensure_future(_held_once(last, 10))
            for t in tasks:
                t.cancel()
            for t in tasks:
                with pytest.raises(asyncio.CancelledError):
                    await t
            assert await late is False  # timed out
            assert rds.llen(queue) == 1  # only the last waiter is left
            held.release()  # owned by this thread (a blocking call, one round trip)
            assert await asyncio.wait_for(served, 5)

    run(redis_url, body)


def test_a_redisson_fair_waiter_hears_the_release_meant_for_it(rds, redis_url) -> None:
    """A task waiting on Redisson's fair lock hears the message Redisson's
    release sends on that waiter's own channel: it is served at once, not
    when its look again comes due (the holder's 30 s TTL)."""
    name = "aio:rfair-hear"

    async def body(c: hla.Client) -> None:
        with hilock.Client(redis_url) as holder:
            held = holder.fair_lock(name, ttl=30, compat="redisson")
            assert held.acquire(blocking=False)
            waiter = c.fair_lock(name, ttl=30, compat="redisson")
            served = asyncio.ensure_future(_held_once(waiter, 25))
            await _queued(rds, f"redisson_lock_queue:{{{name}}}", 1)
            for _ in range(500):  # until it sleeps in its wait, 5 s at most
                if c.waiting == 1:
                    break
                await asyncio.sleep(0.01)
            assert c.waiting == 1, "the waiter never slept in its wait"
            held.release()
            assert await asyncio.wait_for(served, 5)

    run(redis_url, body)


def test_multi_and_segmented_locks(rds, redis_url) -> None:
    async def main(c: hla.Client) -> None:
        m = c.multi_lock(["aio:a", "aio:b"], ttl=10)
        single = c.lock("aio:b", ttl=10)
        async with m:
            assert set(m.fence or {}) == {"aio:a", "aio:b"}
            assert not await single.acquire(blocking=False)  # names exclude
        assert await single.acquire(blocking=False)
        await single.release()

        seg = c.segmented_lock("aio:seg", 2, ttl=10)
        other = c.segmented_lock("aio:seg", 2, ttl=10)
        third = c.segmented_lock("aio:seg", 2, ttl=10)
        seg._sync.stock_init(2)  # one unit in each segment
        async with seg:
            async with other:
                assert {seg.segment, other.segment} == {0, 1}
                assert not await third.acquire(blocking=False)
        seg._sync.stock_set(0, 0)
        seg._sync.stock_set(1, 0)
        with pytest.raises(hilock.SoldOut):
            await third.acquire(timeout=2)

    run(redis_url, main)


def test_rlock_is_owned_by_the_task(rds, redis_url) -> None:
    """A task re-enters its own hold; another task on the same object waits
    until the first released as often as it acquired; a thread of the
    blocking API is another owner."""
    sync = hilock.Client(redis_url)

    async def main(c: hla.Client) -> None:
        rl = c.rlock("aio:r", ttl=10)
        order: List[str] = []
        first_in = asyncio.Event()
        go = asyncio.Event()

        async def first() -> None:
            async with rl:
                async with rl:  # re-entry: no wait
                    order.append("first in twice")
                    first_in.set()
                    await go.wait()
                order.append("first out once")
                await asyncio.sleep(0.1)
                order.append("first leaving")  # its last release comes next

        async def second() -> None:
            await first_in.wait()
            assert not await rl.acquire(blocking=False)
            go.set()
            async with rl:
                order.append("second in")

        await asyncio.gather(first(), second())
        assert order == ["first in twice", "first out once", "first leaving", "second in"]
        # A thread of the blocking API is another owner.
        async with rl:
            blocked = await asyncio.get_running_loop().run_in_executor(
                None, lambda: sync.rlock("aio:r", ttl=10).acquire(blocking=False))
            assert not blocked
        assert rds.exists("hilock:{aio:r}:rlock") == 0

    try:
        run(redis_url, main)
    finally:
        sync.close()


def test_semaphore_admits_its_limit_and_permits_belong_to_tasks(rds, redis_url) -> None:
    from history import check_max_concurrent
    spans: List[Interval] = []

    async def main(c: hla.Client) -> None:
        sem = c.semaphore("aio:sem", 2, ttl=10)

        async def one() -> None:
            async with sem:
                assert sem.held_count() == 1
                start = time.monotonic()
                await asyncio.sleep(0.02)
                spans.append(Interval(os.getpid(), start, time.monotonic()))

        await asyncio.gather(*(one() for _ in range(12)))
        # A task without a permit has nothing to release.
        with pytest.raises(hilock.LockNotOwnedError):
            await sem.release()
        # Two held by this task: a third waits out its timeout.
        assert await sem.acquire() and await sem.acquire()
        assert not await sem.acquire(timeout=0.2)
        assert sem.held_count() == 2
        await sem.release()
        await sem.release()
        assert rds.zcard("hilock:{aio:sem}:permits") == 0

    run(redis_url, main)
    assert len(spans) == 12
    assert check_max_concurrent(spans, 2) == 2  # both permits were used at once


def test_owned_locked_extend_renew_are_coroutines(rds, redis_url) -> None:
    async def main(c: hla.Client) -> None:
        lk = c.lock("aio:q", ttl=10, auto_renew=False)
        other = c.lock("aio:q", ttl=10)
        assert not await lk.locked()
        async with lk:
            assert await lk.owned() and await lk.locked()
            assert not await other.owned() and await other.locked()
            await lk.extend(50, replace=True)
            assert rds.pttl("hilock:{aio:q}:lock") > 20000
            await lk.renew()
            assert rds.pttl("hilock:{aio:q}:lock") <= 10000
            with pytest.raises(hilock.LockNotOwnedError):
                await other.extend(5)
        rl = c.rlock("aio:q2", ttl=10)

        async def other_task() -> bool:
            return await rl.owned()

        async with rl:
            assert await rl.owned()
            assert not await asyncio.ensure_future(other_task())
        sem = c.semaphore("aio:q3", 1, ttl=10)
        with pytest.raises(hilock.LockNotOwnedError):
            await sem.renew()
        async with sem:
            await sem.renew()
            assert await sem.owned()
            with pytest.raises(hilock.UnsupportedError):
                await sem.extend(5)

    run(redis_url, main)


def test_rwlock_readers_share_writers_exclude(rds, redis_url) -> None:
    spans: List[Interval] = []
    readers_together = 0

    async def main(c: hla.Client) -> None:
        nonlocal readers_together
        rw = c.rwlock("aio:rw", ttl=10)
        inside = 0

        async def reader() -> None:
            nonlocal inside, readers_together
            async with rw.read():
                async with rw.read():  # a task re-enters its side
                    inside += 1
                    readers_together = max(readers_together, inside)
                    await asyncio.sleep(0.05)
                    inside -= 1

        async def writer() -> None:
            async with rw.write() as w:
                assert inside == 0
                start = time.monotonic()
                await asyncio.sleep(0.01)
                spans.append(Interval(os.getpid(), start, time.monotonic(), w.fence))

        await asyncio.gather(*(reader() for _ in range(4)), *(writer() for _ in range(3)),
                             *(reader() for _ in range(2)))
        assert rds.exists("hilock:{aio:rw}:rw:writer", "hilock:{aio:rw}:rw:readers") == 0

    run(redis_url, main)
    assert readers_together >= 2  # readers really shared it
    assert len(spans) == 3
    check_no_overlap(spans)


def _child_uses_parents_client(c: hla.Client, q: Any) -> None:
    async def main() -> None:
        lk = c.lock("aio:fork", ttl=10)
        try:
            await lk.acquire(blocking=False)
            q.put("acquired")
        except hilock.ForkedLockError:
            q.put("forked")
        except BaseException as e:  # anything else is a failure to report
            q.put(f"{type(e).__name__}: {e}")

    try:
        asyncio.run(main())
    except BaseException as e:
        q.put(f"{type(e).__name__}: {e}")


def test_a_forked_child_cannot_use_the_parents_runner(redis_url) -> None:
    """The child refuses with ForkedLockError (no thread of the parent's
    runner exists there); the parent's client keeps working."""
    async def main(c: hla.Client) -> None:
        lk = c.lock("aio:fork", ttl=10)
        assert await lk.acquire(blocking=False)  # the runner exists now
        await lk.release()
        q = FORK.Queue()
        p = FORK.Process(target=_child_uses_parents_client, args=(c, q))
        p.start()
        p.join(30)
        assert q.get(timeout=5) == "forked"
        assert await lk.acquire(blocking=False)
        await lk.release()

    run(redis_url, main)


def test_closing_the_client_ends_waits_with_connection_error(rds, redis_url) -> None:
    """Tasks waiting when their client closes raise ConnectionError (not a
    cancellation they did not ask for), and nothing is left held."""
    sync = hilock.Client(redis_url)
    holder = sync.lock("aio:close", ttl=30, auto_renew=False)
    assert holder.acquire(blocking=False)

    async def main() -> None:
        c = hla.Client(redis_url)
        waiters = [c.lock("aio:close", ttl=30) for _ in range(5)]
        tasks = [asyncio.ensure_future(w.acquire()) for w in waiters]
        while c.waiting < 5:
            await asyncio.sleep(0.01)
        await c.close()
        for t in tasks:
            with pytest.raises(hilock.ConnectionError):
                await t

    try:
        with asyncio.Runner(loop_factory=Loops.factory) as runner:
            runner.run(main())
        holder.release()
        assert rds.exists("hilock:{aio:close}:lock") == 0
    finally:
        sync.close()


def test_the_loops_callback_outlives_its_runner_safely(redis_url) -> None:
    """The callback the loop calls when the runner's descriptor is readable
    (in C) does nothing once the runner is freed (a loop may call it once
    more), and refuses arguments of the wrong kind."""
    seen: List[Callable[[], Any]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        add = loop.add_reader

        def spy(fd: int, cb: Callable[..., Any], *args: Any) -> None:
            seen.append(cb)
            add(fd, cb, *args)

        loop.add_reader = spy  # type: ignore[method-assign]
        c = hla.Client(redis_url)
        async with c.lock("aio:drainer", ttl=5):
            pass
        assert len(seen) == 1
        seen[0]()  # nothing finished: nothing to do
        await c.close()
        assert seen[0]() is None  # the runner is freed: still nothing

    asyncio.run(main())
    from hilock import _hilock as _h
    a = _h.hilock_async_new(None, 0)
    try:
        for futures, late, state in [([], {}, bytearray(2)), ({}, None, bytearray(2)),
                                     ({}, {}, b"\0\0"), ({}, {}, bytearray(1))]:
            with pytest.raises(TypeError):
                _h.py_async_drainer(a, futures, late, state)
    finally:
        _h.hilock_async_free(a)


def test_a_cancelled_close_still_closes(rds, redis_url) -> None:
    """close() cancelled while it ends the waits (a shutdown cancelling the
    task that runs it) still runs to its end: the waiting tasks learn that
    the client closed instead of waiting forever, concurrent closes share
    it, and nothing is left held or queued."""
    sync = hilock.Client(redis_url)
    holder = sync.fair_lock("aio:cclose:fair", ttl=30, auto_renew=False)
    plain = sync.lock("aio:cclose", ttl=30, auto_renew=False)
    assert holder.acquire(blocking=False) and plain.acquire(blocking=False)

    async def main() -> None:
        c = hla.Client(redis_url)
        waiters = [c.fair_lock("aio:cclose:fair", ttl=30) for _ in range(3)]
        waiters += [c.lock("aio:cclose", ttl=30) for _ in range(3)]
        tasks = [asyncio.ensure_future(w.acquire()) for w in waiters]
        while c.waiting < len(waiters):
            await asyncio.sleep(0.01)
        closing = asyncio.ensure_future(c.close())
        await asyncio.sleep(0)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        for t in tasks:
            with pytest.raises(hilock.ConnectionError):
                await asyncio.wait_for(t, 10)
        await asyncio.wait_for(asyncio.gather(c.close(), c.close()), 10)

    try:
        # On a thread of its own: waits that nobody ends would hang the loop
        # for good (a cancelled task's wait too), and the test with it.
        run_bounded(main)
        holder.release()
        plain.release()
        # Nothing queued or held is left (fence and ticket counters stay).
        assert rds.exists("hilock:{aio:cclose}:lock", "hilock:{aio:cclose:fair}:lock") == 0
        assert rds.exists("hilock:{aio:cclose:fair}:fair:queue") == 0
    finally:
        sync.close()


def test_redlock_under_async_with(redis_nodes) -> None:
    """Tasks take turns on a Redlock (a majority of five nodes); a waiter
    retries after the retry delay and gets it on the release; a cancelled
    waiter leaves nothing on any node."""
    urls = [s.url for s in redis_nodes]
    spans: List[Interval] = []

    async def main() -> None:
        async def one(i: int) -> None:
            async with hla.Redlock(urls, "aio:red", ttl=10, timeout=20, retry_delay=0.02) as rl:
                start = time.monotonic()
                await asyncio.sleep(0.01)
                spans.append(Interval(i, start, time.monotonic(), rl.fence))

        await asyncio.gather(*(one(i) for i in range(6)))
        holder = hla.Redlock(urls, "aio:red", ttl=10)
        waiter = hla.Redlock(urls, "aio:red", ttl=10, retry_delay=0.02)
        assert await holder.acquire()
        t = asyncio.ensure_future(waiter.acquire(timeout=20))
        await asyncio.sleep(0.1)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        await holder.release()
        import redis
        for s in redis_nodes:
            assert redis.Redis.from_url(s.url).exists("hilock:{aio:red}:redlock") == 0

    with asyncio.Runner(loop_factory=Loops.factory) as runner:
        runner.run(main())
    assert len(spans) == 6
    check_no_overlap(spans)
    check_fences_increase(spans)


def test_tasks_and_threads_of_one_client_share_the_waiting(rds, redis_url) -> None:
    """Waiting threads and waiting tasks of one client take turns reading
    the shared waiting connection: every one of them is woken in turn,
    none waits out its timeout."""
    spans: List[Interval] = []

    async def main(c: hla.Client) -> None:
        holder = c.lock("aio:mix", ttl=30, auto_renew=False)
        assert await holder.acquire()

        def thread_waiter(i: int) -> None:
            lk = c._sync.lock("aio:mix", ttl=30, auto_renew=False)
            assert lk.acquire(timeout=20)
            start = time.monotonic()
            time.sleep(0.005)
            spans.append(Interval(i, start, time.monotonic(), lk.fence))
            lk.release()

        async def task_waiter(i: int) -> None:
            lk = c.lock("aio:mix", ttl=30, auto_renew=False)
            assert await lk.acquire(timeout=20)
            start = time.monotonic()
            await asyncio.sleep(0.005)
            spans.append(Interval(100 + i, start, time.monotonic(), lk.fence))
            await lk.release()

        loop = asyncio.get_running_loop()
        threads = [loop.run_in_executor(None, thread_waiter, i) for i in range(3)]
        tasks = [asyncio.ensure_future(task_waiter(i)) for i in range(3)]
        while c.waiting < 6:
            await asyncio.sleep(0.01)
        t0 = time.monotonic()
        await holder.release()
        await asyncio.gather(*threads, *tasks)
        # Woken by releases, not by the 30 s TTL or the 20 s timeouts.
        assert time.monotonic() - t0 < 10

    run(redis_url, main)
    assert len(spans) == 6
    check_no_overlap(spans)


def test_a_burst_of_releases_wakes_every_task_and_a_thread_after(rds, redis_url) -> None:
    """Four tasks wait on four locks that another client releases in one
    burst (several rings in one read of the shared waiting socket, run by
    the workers in turn): every task is granted. A thread of the same
    client that waits just after (while the runner still reads that socket)
    is woken by its lock's release too. The holders' TTL (30 s) is far
    beyond the waits' bounds: a missed ring fails the test."""
    other = hilock.Client(redis_url)
    holders = [other.lock(f"aio:burst:{i}", ttl=30, auto_renew=False) for i in range(5)]
    for h in holders:
        assert h.acquire(blocking=False)

    async def main(c: hla.Client) -> None:
        locks = [c.lock(f"aio:burst:{i}", ttl=30, auto_renew=False) for i in range(4)]
        tasks = [asyncio.ensure_future(lk.acquire(timeout=20)) for lk in locks]
        while c.waiting < 4:
            await asyncio.sleep(0.005)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: [h.release() for h in holders[:4]])
        assert await asyncio.gather(*tasks) == [True] * 4
        thread_lock = c._sync.lock("aio:burst:4", ttl=30, auto_renew=False)
        waiter = loop.run_in_executor(None, lambda: thread_lock.acquire(timeout=20))
        while c.waiting < 1:
            await asyncio.sleep(0.001)
        await loop.run_in_executor(None, holders[4].release)
        assert await waiter
        thread_lock.release()
        for lk in locks:
            await lk.release()

    try:
        run(redis_url, main)
    finally:
        other.close()


class Ticker:
    """A task of the running loop that notes the time every 10 ms into
    ticks, until stop(): while the loop's thread is held, it cannot."""

    def __init__(self, ticks: List[float]) -> None:
        self._stop = asyncio.Event()

        async def tick() -> None:
            while not self._stop.is_set():
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        self._task = asyncio.ensure_future(tick())

    async def stop(self) -> None:
        self._stop.set()
        await self._task


def _woken(sleeper: socket.socket) -> None:
    """Wait for the +OK of a DEBUG SLEEP (helpers.debug_sleep): the server
    is awake again."""
    sleeper.settimeout(10)
    assert sleeper.recv(16).startswith(b"+OK")
    sleeper.close()


def test_close_with_round_trips_on_the_wire_of_a_stalled_server(redis_nodes) -> None:
    """Acquires and releases whose round trips are on the wire (run on the
    loop's own thread) while the server sleeps: the loop keeps turning,
    close() ends them all (each task learns the client closed, or has its
    result), and nothing is left held once the server answers again."""
    import redis

    node = redis_nodes[0]
    rds = redis.Redis.from_url(node.url)
    ticks: List[float] = []
    stalled: List[float] = []  # the operations started; the server answered

    async def main() -> None:
        c = hla.Client(node.url, command_timeout=5.0)
        held = c.lock("aio:stalled:held", ttl=30)
        assert await held.acquire(blocking=False)
        ticker = Ticker(ticks)
        # Off the loop's thread, which the ticker watches.
        sleeper = await asyncio.to_thread(debug_sleep, node.port, 0.6)
        ops = [asyncio.ensure_future(c.lock(f"aio:stalled:{i}", ttl=30).acquire(blocking=False))
               for i in range(4)]
        ops.append(asyncio.ensure_future(held.release()))
        stalled.append(time.monotonic())
        # A grace for the round trips to go out: none can be seen on a
        # sleeping server, and one still on the loop is ended by close() all
        # the same, which the test accepts as well.
        await asyncio.sleep(0.05)
        await c.close()
        for op in ops:
            try:
                await op
            except hilock.ConnectionError:
                pass  # told the client closed
        await asyncio.to_thread(_woken, sleeper)
        stalled.append(time.monotonic())
        await ticker.stop()

    with asyncio.Runner(loop_factory=Loops.factory) as runner:
        runner.run(main())
    # The ticker ran while the operations waited on the sleeping server
    # (about 0.4 s: some 30 ticks; 2 when the waits held the loop).
    assert sum(1 for t in ticks if stalled[0] < t < stalled[1]) >= 8, (stalled, ticks)
    # Every grant was given back (a cancelled one) or released: nothing held.
    assert [k for k in rds.keys("hilock:{aio:stalled*") if k.endswith(b":lock")] == []


def test_a_cancel_does_not_wait_for_a_stalled_servers_reply(redis_nodes) -> None:
    """wait_for(acquire(), 0.2) while the server sleeps: the cancel ends
    each attempt on the wire shortly (it does not wait for the reply, up to
    the command timeout), those on the loop's thread and those the workers
    run alike, and for the queue locks too (their leave goes out behind the
    attempt instead of waiting on the same server); the server runs the
    attempts once it wakes, and each is undone then: every lock is free."""
    node = redis_nodes[0]
    stall_over: List[bool] = []
    kinds = ["lock", "lock", "fair_lock", "fair_lock", "sequential_lock", "sequential_lock"]

    async def main() -> None:
        c = hla.Client(node.url, command_timeout=30.0)
        locks = [getattr(c, kind)(f"aio:cut:{i}", ttl=30) for i, kind in enumerate(kinds)]
        assert await locks[0].acquire(blocking=False)  # connected, bound
        await locks[0].release()
        sleeper = await asyncio.to_thread(debug_sleep, node.port, 3.0)

        async def one(lk: Any) -> None:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(lk.acquire(), 0.2)

        await asyncio.gather(*(one(lk) for lk in locks))
        # Every cancel ended before the server woke (without the cut, each
        # waited for its reply, or its queue leave: after the 3 s sleep).
        stall_over.append(bool(select.select([sleeper], [], [], 0)[0]))  # its +OK came
        await asyncio.to_thread(_woken, sleeper)
        await c.close()

    with asyncio.Runner(loop_factory=Loops.factory) as runner:
        runner.run(main())
    assert stall_over == [False]
    # The attempts ran when the server woke, and their undo right after:
    # each lock can be taken at once (a queue lock's try grants only when
    # nobody is queued).
    with hilock.Client(node.url) as check:
        for i, kind in enumerate(kinds):
            lk = getattr(check, kind)(f"aio:cut:{i}", ttl=30)
            for _ in range(100):
                if lk.acquire(blocking=False):
                    break
                time.sleep(0.02)
            else:
                raise AssertionError(f"{kind} aio:cut:{i} is still taken")
            lk.release()


def test_an_operation_retrying_a_dead_server_keeps_the_loop_turning(redis_nodes) -> None:
    """The server is gone: an acquire retries its connection within the
    client's reconnect budget, pausing between tries on the loop's own
    thread; the loop keeps turning meanwhile, and the acquire fails with
    ConnectionError once the budget is spent."""
    node = redis_nodes[0]
    ticks: List[float] = []
    tried: List[float] = []

    async def main() -> None:
        c = hla.Client(node.url, connect_timeout=0.2, reconnect=0.6)
        try:
            lk = c.lock("aio:dead", ttl=10)
            assert await lk.acquire(blocking=False)  # connected, bound
            await lk.release()
            node.stop()
            ticker = Ticker(ticks)
            tried.append(time.monotonic())
            with pytest.raises(hilock.ConnectionError):
                await lk.acquire(blocking=False)
            tried.append(time.monotonic())
            await ticker.stop()
        finally:
            await c.close()

    with asyncio.Runner(loop_factory=Loops.factory) as runner:
        runner.run(main())
    # The ticker ran while the acquire retried (0.6 s of budget): about 60
    # times; pauses that held the loop's thread left it 3 to 6.
    assert sum(1 for t in ticks if tried[0] < t < tried[1]) >= 15, (tried, ticks)


def test_making_a_client_sends_nothing_and_its_first_call_connects_on_the_loop() -> None:
    """The loop never waits on the network, constructors included: making
    a client, its locks or a Redlock opens no connection; the first
    operation connects (on the loop, which keeps turning while it waits
    for a server that never answers) and raises what it met."""
    import socket

    from helpers import free_port

    silent = socket.socket()  # accepts (the kernel does) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    silent.setblocking(False)
    port = silent.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    ticks: List[float] = []
    tried: List[float] = []

    async def main() -> None:
        opts = dict(connect_timeout=0.3, command_timeout=0.3, reconnect=0.3)
        c = hla.Client(url, **opts)
        made = [c.lock("aio:later"), c.rlock("aio:later"), c.fair_lock("aio:later"),
                c.sequential_lock("aio:later"), c.semaphore("aio:later", 2),
                c.rwlock("aio:later"), c.multi_lock(["aio:a", "aio:b"]),
                c.segmented_lock("aio:later", 3), c.simple_lock("aio:later"),
                c.lease("aio:later", 5)]
        cluster = hla.Client(f"redis+cluster://127.0.0.1:{port}", **opts)
        red = hla.Redlock([url, f"redis://127.0.0.1:{free_port()}/0",
                           f"redis://127.0.0.1:{free_port()}/0"], "aio:later", ttl=5)
        with pytest.raises(BlockingIOError):
            silent.accept()  # nobody connected
        assert len(made) == 10
        ticker = Ticker(ticks)
        tried.append(time.monotonic())
        with pytest.raises(hilock.ConnectionError):
            await c.lock("aio:later").acquire(blocking=False)
        tried.append(time.monotonic())
        await ticker.stop()
        with pytest.raises(hilock.ConnectionError):
            await cluster.lock("aio:later").acquire(blocking=False)
        with pytest.raises(hilock.ConnectionError):
            await red.acquire(blocking=False)
        refused = hla.Client(f"redis://127.0.0.1:{free_port()}/0", **opts)
        with pytest.raises(hilock.ConnectionError, match="onnect"):
            await refused.lock("aio:later").acquire(blocking=False)
        for client in (c, cluster, refused):
            await client.close()

    try:
        with asyncio.Runner(loop_factory=Loops.factory) as runner:
            runner.run(main())
    finally:
        silent.close()
    # The first acquire waited 0.3 s for a reply on the loop's thread: about
    # 30 ticks meanwhile (none if it had blocked the loop).
    assert sum(1 for t in ticks if tried[0] < t < tried[1]) >= 8, (tried, ticks)


_SLOW_DNS_CHILD = r'''
import asyncio, json, sys, time
import hilock, hilock.asyncio as hla
url = "redis://locks.hilock-test.example:6379/0"
out = {}
try:
    hilock.Client(url, connect_timeout=0.4)
except hilock.LockError as e:
    out["sync"] = str(e)
ticks, tried = [], []
async def main():
    async def tick():
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)
    ticker = asyncio.ensure_future(tick())
    c = hla.Client(url, connect_timeout=0.4, reconnect=0.0)
    tried.append(time.monotonic())
    try:
        await c.lock("x").acquire(blocking=False)
    except hilock.LockError as e:
        out["async"] = str(e)
    tried.append(time.monotonic())
    ticker.cancel()
    await c.close()
asyncio.run(main())
out["ticks"] = sum(1 for t in ticks if tried[0] < t < tried[1])
print(json.dumps(out))
'''


def _mount_namespaces() -> bool:
    import subprocess
    if os.geteuid() != 0:
        return False
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.skipif(not _mount_namespaces(), reason="needs root and unshare -m")
def test_a_slow_name_server_neither_holds_the_loop_nor_outlasts_the_connect_timeout(
        tmp_path) -> None:
    """Resolving a host name may wait on DNS for seconds: it runs off the
    calling thread and is bounded by connect_timeout. The name server here
    never answers (a process in a mount namespace of its own, whose
    resolv.conf names a silent UDP socket): the blocking constructor fails
    with the resolution timed out, and an asyncio acquire does too while
    its loop keeps turning."""
    import json
    import socket
    import subprocess
    import sys

    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.53.53.53", 53))
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 127.53.53.53\noptions timeout:5 attempts:1\n")
    try:
        script = (f"mount --bind {conf} /etc/resolv.conf && "
                  f'exec "{sys.executable}" -c "$HILOCK_CHILD"')
        r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                           text=True, timeout=60,
                           env={**os.environ, "HILOCK_CHILD": _SLOW_DNS_CHILD})
    finally:
        silent.close()
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "resolving the name timed out" in out["sync"], out
    assert "resolving the name timed out" in out["async"], out
    # 0.4 s of resolving: some 40 ticks of the loop (none if it was held).
    assert out["ticks"] >= 8, out


def run_bounded(main: Callable[[], Awaitable[None]], bound: float = 60) -> None:
    """main() on a new loop on a thread of its own, joined within bound
    seconds: a wait nobody ends (one no cancellation reaches) fails the test
    instead of hanging it."""
    done: List[Optional[BaseException]] = []

    def loop() -> None:
        try:
            with asyncio.Runner(loop_factory=Loops.factory) as runner:
                runner.run(main())
            done.append(None)
        except BaseException as e:
            done.append(e)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    t.join(bound)
    assert done, f"still waiting after {bound} s"
    if done[0] is not None:
        raise done[0]


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


async def watched_again(fd: int) -> None:
    """The runner's descriptor number fd, closed, is watched again when a
    new descriptor (a pipe, here) takes it: the loop calls a reader added on
    it once it has a byte. A loop that still lists the closed descriptor
    never does (add_reader finds that entry and only swaps its callback)."""
    while _is_open(fd):  # a collection on another thread frees it on the loop
        await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    r, w = os.pipe()
    if w == fd:
        w, _ = os.dup(w), os.close(w)
    if r != fd:
        os.dup2(r, fd)
        os.close(r)
    fut = loop.create_future()
    loop.add_reader(fd, lambda: fut.done() or fut.set_result(None))
    try:
        os.write(w, b"x")
        await asyncio.wait_for(fut, 10)  # 10 s: at once unless the entry is stale
    finally:
        loop.remove_reader(fd)
        os.close(fd)
        os.close(w)


async def served(c: hla.Client, name: str) -> None:
    """c takes and gives back the lock name (free), within bounds: a runner
    its loop no longer watches fails this instead of hanging."""
    lk = c.lock(name, ttl=5)
    assert await asyncio.wait_for(lk.acquire(timeout=2), 10)
    await lk.release()


async def used(c: hla.Client, name: str) -> int:
    """c's runner's descriptor, once c made a round trip (or met its error)."""
    try:
        async with c.lock(name, ttl=5):
            pass
    except hilock.ConnectionError:
        pass
    return int(hla._h.hilock_async_fd(c._runner._a))


@pytest.mark.parametrize("path", ["close", "collected", "collected_on_a_thread",
                                  "refused", "tls_error"])
def test_a_runners_descriptor_leaves_the_loop_before_it_closes(rds, redis_url, path) -> None:
    """However a client's runner ends (close(), a client collected without
    close(), on the loop's thread or another, one whose connection failed),
    its descriptor leaves the loop first: the next client of the loop, whose
    runner gets the same descriptor number, is served and its timeout
    bounds its acquire."""
    from helpers import free_port

    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    first = {"refused": f"redis://127.0.0.1:{free_port()}/0",
             "tls_error": f"rediss://127.0.0.1:{port}/0"}.get(path, redis_url)

    async def main() -> None:
        c = hla.Client(first, connect_timeout=1, reconnect=0)
        fd = await used(c, "aio:fd")
        if path == "close":
            await c.close()
        elif path == "collected_on_a_thread":
            box = [c]
            del c

            def drop() -> None:
                box.clear()
                gc.collect()

            await asyncio.get_running_loop().run_in_executor(None, drop)
        else:
            del c
            gc.collect()
        await watched_again(fd)
        c2 = hla.Client(redis_url)
        try:
            await served(c2, "aio:fd")
        finally:
            await c2.close()

    run_bounded(main)
    assert rds.exists("hilock:{aio:fd}:lock") == 0


def test_a_client_collected_after_its_loop_closed_leaves_the_next_loop_served(
        rds, redis_url) -> None:
    """A client used on a loop that is closed since, then collected without
    close(), frees its runner quietly; a client of the next loop is served,
    and so is one that moves on to it."""
    moving = hla.Client(redis_url)
    dropped = [hla.Client(redis_url)]

    async def first() -> None:
        await used(moving, "aio:fd:a")
        await used(dropped[0], "aio:fd:b")

    async def second() -> None:
        for c in (hla.Client(redis_url), moving):
            try:
                await served(c, "aio:fd:a")
            finally:
                await c.close()

    run_bounded(first)
    dropped.clear()
    gc.collect()
    run_bounded(second)
    assert rds.exists("hilock:{aio:fd:a}:lock", "hilock:{aio:fd:b}:lock") == 0


_TWO_LOOPS_CHILD = r'''
import asyncio, json, sys, threading
import hilock.asyncio as hla
url, kind, trials = sys.argv[1], sys.argv[2], int(sys.argv[3])
factory = None
if kind == "uvloop":
    import uvloop
    factory = uvloop.new_event_loop
results = []
for trial in range(trials):
    c = hla.Client(url)
    out = [None, None]
    start, end = threading.Barrier(2, timeout=10), threading.Barrier(2, timeout=10)

    async def main(i):
        start.wait()
        try:
            async with c.lock("aio:two-loops", ttl=5, timeout=2):
                pass
            out[i] = "ok"
        except Exception as e:
            out[i] = type(e).__name__ + ": " + str(e)
        end.wait()  # both loops stay open until both tried

    def thread(i):
        try:
            with asyncio.Runner(loop_factory=factory) as runner:
                runner.run(main(i))
        except BaseException as e:
            out[i] = out[i] or type(e).__name__

    ts = [threading.Thread(target=thread, args=(i,), daemon=True) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    hung = sum(t.is_alive() for t in ts)
    results.append({"out": out, "hung": hung})
    if hung:
        break
    asyncio.run(c.close())
print(json.dumps(results), flush=True)
'''


def test_the_first_operations_of_two_loops_bind_the_client_to_one(rds, redis_url,
                                                                   event_loop_kind) -> None:
    """A new client's first operation started from two loops at once (two
    threads, each its own loop): the client binds to one of them, whose
    task gets the lock; the other task gets RuntimeError before anything is
    sent, and nothing is left held. 30 trials, in a process of their own
    (each thread joined within 20 s, the process within 120 s): a client
    bound twice hung a thread or corrupted the heap."""
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _TWO_LOOPS_CHILD, redis_url, event_loop_kind,
                        "30"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    results = json.loads(r.stdout)
    assert len(results) == 30 and not any(t["hung"] for t in results), results
    for t in results:
        lost, won = sorted(t["out"])
        assert won == "ok", results
        assert lost.startswith("RuntimeError: ") and "bound to another event loop" in lost, \
            results
    assert rds.exists("hilock:{aio:two-loops}:lock") == 0


def test_async_with_whose_body_released_ends_quietly(rds, redis_url, redis_nodes) -> None:
    """A body that releases the lock itself ends its ``async with``
    quietly, as ``with`` does, on every lock type; the lock is free after.
    A reentrant lock entered twice by its task and released once in the
    inner body ends both blocks quietly (as with: the inner block's end
    releases the other entry); a loss in the body still raises LockLost."""
    urls = [s.url for s in redis_nodes]

    async def main(c: hla.Client) -> None:
        rw = c.rwlock("aio:q:rw")
        redisson = c.rwlock("aio:q:rrw", compat="redisson")
        locks = [c.lock("aio:q"), c.simple_lock("aio:q:simple"), c.lease("aio:q:lease", 10),
                 c.rlock("aio:q:r"), c.fair_lock("aio:q:fair"),
                 c.fair_lock("aio:q:rfair", compat="redisson"),
                 c.sequential_lock("aio:q:seq"), c.multi_lock(["aio:q:m1", "aio:q:m2"]),
                 c.segmented_lock("aio:q:seg", 3), c.semaphore("aio:q:sem", 1),
                 rw.read(), rw.write(), redisson.read(), redisson.write(),
                 hla.Redlock(urls, "aio:q:red", ttl=10)]
        for lk in locks:
            if isinstance(lk, hla.SegmentedLock):
                lk._sync.stock_init(3)
            async with lk:
                await lk.release()
            assert await lk.acquire(blocking=False), lk  # free (one permit: released)
            await lk.release()
        rl = c.rlock("aio:q:r2")
        async with rl:
            async with rl:
                await rl.release()
            # As with: the inner block's end released the second entry.
            assert not await rl.locked()
        assert not await rl.locked()
        with pytest.raises(hilock.LockLost):
            async with c.lock("aio:q:lost", ttl=5) as lk:
                rds.delete("hilock:{aio:q:lost}:lock")
                with pytest.raises(hilock.LockNotOwnedError):
                    await lk.release()

    run(redis_url, main)


def test_waiters_ride_out_server_restarts(event_loop_kind) -> None:
    """100 tasks take turns at one lock while the server is killed (by PID)
    and restarted on its port, six times: a connection broken under an
    attempt, a release or the shared waiting is replaced within the
    caller's timeout, the resend going on a connection that answered (a
    server going down still accepts connections, then resets them), so
    every acquire gets the lock or times out; none raises ConnectionError.
    A release of a grant the restart took reports it (LockNotOwnedError)."""
    import collections

    from helpers import RedisServer, free_port

    srv = RedisServer(port=free_port())
    srv.start()
    outcomes: collections.Counter[str] = collections.Counter()

    async def main() -> None:
        c = hla.Client(srv.url)
        done = asyncio.Event()

        async def one() -> None:
            while not done.is_set():
                lk = c.lock("aio:restart", ttl=5, timeout=25)
                try:
                    got = await lk.acquire()
                except hilock.LockError as e:
                    outcomes[f"acquire raised {e!r}"] += 1
                    return
                if not got:
                    outcomes["timed out"] += 1
                    continue
                await asyncio.sleep(0.002)
                try:
                    await lk.release()
                    outcomes["released"] += 1
                except hilock.LockNotOwnedError:
                    outcomes["lost to a restart"] += 1
                except hilock.LockError as e:
                    outcomes[f"release raised {e!r}"] += 1

        loop = asyncio.get_running_loop()
        tasks = [asyncio.ensure_future(one()) for _ in range(100)]
        try:
            for _ in range(6):
                # Contending (most of them waiting) when the server dies,
                # on connections that served before (the request on a new
                # connection that breaks is not resent: the server is
                # taken for gone).
                since = outcomes["released"]
                for _ in range(3000):
                    if c.waiting >= 50 and outcomes["released"] >= since + 30:
                        break
                    await asyncio.sleep(0.01)
                assert c.waiting >= 50 and outcomes["released"] >= since + 30, \
                    (c.waiting, outcomes)
                await loop.run_in_executor(None, srv.stop)
                await loop.run_in_executor(None, srv.start)
        finally:
            done.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
            await c.close()

    try:
        run_bounded(main, 120)
    finally:
        srv.cleanup()
    assert not [k for k in outcomes if " raised " in k], outcomes


def test_a_runner_whose_watch_failed_is_freed_and_the_next_operation_binds(
        rds, redis_url) -> None:
    """The loop refuses to watch a new runner's descriptor (add_reader
    raises, as a loop out of resources would): the operation raises that,
    the runner is freed there (its descriptor closed, not left in the
    loop), and the next operation makes a runner that is watched."""
    seen: List[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        add = loop.add_reader

        def refuse_once(fd: int, cb: Callable[..., Any], *args: Any) -> None:
            seen.append(fd)
            if len(seen) == 1:
                raise OSError("no room to watch it")
            add(fd, cb, *args)

        loop.add_reader = refuse_once  # type: ignore[method-assign]
        c = hla.Client(redis_url)
        try:
            with pytest.raises(OSError, match="no room"):
                await c.lock("aio:watch").acquire()
            assert c._runner._a is None and not _is_open(seen[0])  # freed
            await served(c, "aio:watch")
        finally:
            await c.close()

    run_bounded(main)
    assert len(seen) == 2 and rds.exists("hilock:{aio:watch}:lock") == 0


def test_a_lapsed_grant_leaves_the_object_free_to_acquire_again(rds, redis_url) -> None:
    """Not renewed, a grant lapses at its TTL: the same object acquires again
    at once (the lapse is reported lost), as another object could."""
    async def main(c: hla.Client) -> None:
        lk = c.lock("aio:lapse", ttl=0.2, auto_renew=False)
        rival = c.lock("aio:lapse", ttl=10)
        assert await lk.acquire(blocking=False)
        # The rival is granted once the grant lapsed on the server.
        assert await rival.acquire(timeout=10.0)
        await rival.release()
        # Bounded so that the test fails rather than waits: the lock is free.
        assert await asyncio.wait_for(lk.acquire(timeout=5.0), 30.0)
        assert lk.lost is False and await lk.owned()
        await lk.release()
        assert c.stats()["lost"] == 1

    run(redis_url, main)


def test_a_read_side_reports_the_current_tasks_loss_and_validity(rds, redis_url) -> None:
    """lost and validity of an asyncio read side are the current task's read
    hold's (a task's hold is its own, as a thread's is in the blocking API):
    held, it has validity; its keys taken away, the renewal finds it lost."""
    async def main(c: hla.Client) -> None:
        side = c.rwlock("aio:read:lost", ttl=0.6).read()
        assert not side.lost and side.validity == 0.0
        async with side:
            assert side.validity > 0.0 and not side.lost
            rds.flushall()  # taken away behind its back
            for _ in range(300):  # the renewal looks every 0.2 s
                if side.lost:
                    break
                await asyncio.sleep(0.05)
            assert side.lost, "the task's read hold was not reported lost"
            assert side.validity == 0.0

    with pytest.raises(hilock.LockLost):
        run(redis_url, main)
