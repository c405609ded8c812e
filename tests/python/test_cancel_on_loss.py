"""``cancel_on_loss=True`` on hilock.asyncio locks, against real servers: a
loss of the hold cancels the task inside ``async with`` wherever it waits
(``asyncio.sleep``, a socket read, another lock's acquire) and the block
raises LockLost; an outside cancellation or a timeout stays
CancelledError / TimeoutError; a loss after the block, or of another
task's block, cancels nothing; without the option nothing is cancelled.

A loss is made by deleting the lock's keys (FLUSHALL) while the lock is
renewed every ttl/3: the next renewal finds the grant gone. Without
renewal, the grant's validity runs out. The bodies wait far longer than
any of that (BOUND) and fail if they are not cancelled meanwhile: the bound
only keeps a broken build from hanging the suite, nothing is timed.
"""
from __future__ import annotations

import asyncio
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

import hilock
import hilock.asyncio as hla
from helpers import Loops, each_loop, run_with_client

# What a body waits at most for its cancellation: renewal finds a loss
# within ttl/3 (0.2 s here); 30 s leaves room for a loaded machine.
BOUND = 30.0
TTL = 0.6



@pytest.fixture(autouse=True, params=["asyncio", "uvloop"])
def event_loop_kind(request: Any) -> Iterator[str]:
    """asyncio's own loop and uvloop's (a loss reaches the loop with
    call_soon_threadsafe, which both provide)."""
    yield from each_loop(request)


run = run_with_client


async def not_cancelled() -> None:
    """Where a body waits for the loss's cancellation."""
    await asyncio.sleep(BOUND)
    raise AssertionError("the loss did not cancel the body")


async def reached(event: asyncio.Event, task: asyncio.Future[Any]) -> None:
    """Wait until event is set, or task ended first (then raise what it
    raised, or fail): a broken task does not leave the test waiting."""
    waiter = asyncio.ensure_future(event.wait())
    await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
    if not event.is_set():
        waiter.cancel()
        task.result()
        raise AssertionError("the task ended before it got there")


async def cancel_inside(c: hla.Client, name: str) -> None:
    """task.cancel() of a body inside a block with the option on name: the
    task ends with CancelledError."""
    inside = asyncio.Event()

    async def work() -> None:
        async with c.lock(name, TTL, cancel_on_loss=True):
            inside.set()
            await not_cancelled()

    t = asyncio.ensure_future(work())
    await reached(inside, t)
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t


def chain(e: Optional[BaseException]) -> Iterator[BaseException]:
    """e and the exceptions it was raised from or while handling."""
    while e is not None:
        yield e
        e = e.__cause__ or e.__context__


# Every asyncio lock type that can be lost, made with cancel_on_loss=True:
# (the lock to enter, what keeps its other objects alive).
Make = Callable[[hla.Client, str], Any]


def _rw(side: str, compat: Optional[str] = None) -> Make:
    def make(c: hla.Client, name: str) -> Any:
        rw: Any = c.rwlock(name, TTL, cancel_on_loss=True, compat=compat)
        lk = rw.read() if side == "read" else rw.write()
        lk._keep = rw
        return lk
    return make


def _segmented(c: hla.Client, name: str) -> Any:
    lk = c.segmented_lock(name, 2, TTL, cancel_on_loss=True)
    lk._sync.stock_init(2)
    return lk


KINDS: Dict[str, Make] = {
    "lock": lambda c, n: c.lock(n, TTL, cancel_on_loss=True),
    "lease": lambda c, n: c.lease(n, TTL, cancel_on_loss=True),
    "rlock": lambda c, n: c.rlock(n, TTL, cancel_on_loss=True),
    "rlock-redisson": lambda c, n: c.rlock(n, TTL, cancel_on_loss=True, compat="redisson"),
    "semaphore": lambda c, n: c.semaphore(n, 2, TTL, cancel_on_loss=True),
    "fair_lock": lambda c, n: c.fair_lock(n, TTL, cancel_on_loss=True),
    "fair_lock-redisson": lambda c, n: c.fair_lock(n, TTL, cancel_on_loss=True,
                                                   compat="redisson"),
    "rwlock-read": _rw("read"),
    "rwlock-write": _rw("write"),
    "rwlock-redisson-read": _rw("read", "redisson"),
    "rwlock-redisson-write": _rw("write", "redisson"),
    "multi_lock": lambda c, n: c.multi_lock([n + ":a", n + ":b"], TTL, cancel_on_loss=True),
    "sequential_lock": lambda c, n: c.sequential_lock(n, TTL, cancel_on_loss=True),
    "segmented_lock": _segmented,
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_loss_cancels_the_body_and_the_block_raises_lock_lost(rds, redis_url,
                                                                kind) -> None:
    """Every lock type that can be lost: the body waits in asyncio.sleep,
    the lock's keys go, and the block ends with LockLost (raised while
    handling the cancellation), leaving no cancellation behind."""
    async def main(c: hla.Client) -> None:
        lk = KINDS[kind](c, "col:" + kind)
        with pytest.raises(hilock.LockLost) as raised:
            async with lk:
                rds.flushall()  # taken away behind its back
                await not_cancelled()
        assert any(isinstance(e, asyncio.CancelledError) for e in chain(raised.value))
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        assert not task.cancelled()
        await asyncio.sleep(0)  # no cancellation is left pending

    run(redis_url, main)


def test_a_redlock_loss_cancels_the_body(redis_nodes) -> None:
    import redis

    urls = [s.url for s in redis_nodes]

    async def main() -> None:
        rl = hla.Redlock(urls, "col:red", ttl=TTL, cancel_on_loss=True)
        with pytest.raises(hilock.LockLost):
            async with rl:
                for s in redis_nodes:
                    redis.Redis.from_url(s.url).flushall()
                await not_cancelled()

    with asyncio.Runner(loop_factory=Loops.factory) as runner:
        runner.run(main())


def test_a_loss_cancels_a_socket_read(rds, redis_url) -> None:
    """The body waits on an asyncio stream from a local server that never
    writes: the read is cancelled, the block raises LockLost."""
    async def main(c: hla.Client) -> None:
        accepted: List[asyncio.StreamWriter] = []

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer)

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            with pytest.raises(hilock.LockLost):
                async with c.lock("col:sock", TTL, cancel_on_loss=True):
                    rds.flushall()
                    got = await asyncio.wait_for(reader.read(1), BOUND)
                    raise AssertionError(f"the read ended: {got!r}")
        finally:
            writer.close()
            for w in accepted:
                w.close()
            server.close()
            await server.wait_closed()

    run(redis_url, main)


def test_a_loss_cancels_another_locks_acquire(rds, redis_url) -> None:
    """The body waits for another lock (held by someone else): the wait is
    withdrawn, the block raises LockLost, and the other lock is left as it
    was."""
    async def main(c: hla.Client) -> None:
        holder = c.lock("col:other", ttl=30)
        other = c.lock("col:other", ttl=30)
        assert await holder.acquire()
        with pytest.raises(hilock.LockLost):
            async with c.lock("col:acq", TTL, cancel_on_loss=True):
                rds.delete("hilock:{col:acq}:lock")
                await other.acquire(timeout=BOUND)
                raise AssertionError("the acquire ended")
        assert c.waiting == 0 and other.validity == 0
        assert await holder.owned()
        await holder.release()

    run(redis_url, main)


def test_without_the_option_a_loss_cancels_nothing(rds, redis_url) -> None:
    """As before: the body runs on (it sees lk.lost) and the block raises
    LockLost when it ends."""
    async def main(c: hla.Client) -> None:
        steps = 0
        with pytest.raises(hilock.LockLost):
            async with c.lock("col:plain", TTL) as lk:
                rds.delete("hilock:{col:plain}:lock")
                while not lk.lost:
                    steps += 1
                    assert steps < BOUND / 0.01, "the loss was never found"
                    await asyncio.sleep(0.01)
                for _ in range(3):
                    await asyncio.sleep(0.01)  # still not cancelled

    run(redis_url, main)


def test_an_outside_cancel_stays_cancelled_error(rds, redis_url) -> None:
    """The application's task.cancel() of a body in a block with the option
    ends it with CancelledError, and the lock is released."""
    async def main(c: hla.Client) -> None:
        await cancel_inside(c, "col:out")
        assert rds.exists("hilock:{col:out}:lock") == 0

    run(redis_url, main)


def test_a_timeout_stays_timeout_error(rds, redis_url) -> None:
    """wait_for and asyncio.timeout around a block with the option end it
    with TimeoutError, and the lock is released."""
    async def main(c: hla.Client) -> None:
        lk = c.lock("col:to", TTL, cancel_on_loss=True)

        async def work() -> None:
            async with lk:
                await not_cancelled()

        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(work(), 0.2)
        assert rds.exists("hilock:{col:to}:lock") == 0
        if sys.version_info >= (3, 11):
            loop = asyncio.get_running_loop()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(None) as cm:
                    async with lk:
                        cm.reschedule(loop.time() + 0.05)  # expires inside the block
                        await not_cancelled()
            assert rds.exists("hilock:{col:to}:lock") == 0

    run(redis_url, main)


def test_a_loss_then_an_outside_cancel_is_cancelled_error(rds, redis_url) -> None:
    """A body that caught the loss's cancellation and is then cancelled by
    the application ends with CancelledError (Python 3.11+ tells the two
    apart)."""
    if sys.version_info < (3, 11):
        pytest.skip("Task.cancelling(): Python 3.11+")

    async def main(c: hla.Client) -> None:
        caught = asyncio.Event()

        async def work() -> None:
            async with c.lock("col:both", TTL, cancel_on_loss=True):
                rds.flushall()
                try:
                    await not_cancelled()
                except asyncio.CancelledError:
                    caught.set()
                await not_cancelled()  # the application's cancel comes here

        t = asyncio.ensure_future(work())
        await reached(caught, t)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    run(redis_url, main)


async def swallow_the_cancellation(c: hla.Client, rds: Any, name: str) -> None:
    """A body that catches its loss's cancellation and goes on: the block
    raises LockLost all the same."""
    seen = []
    with pytest.raises(hilock.LockLost):
        async with c.lock(name, TTL, cancel_on_loss=True):
            rds.flushall()
            try:
                await not_cancelled()
            except asyncio.CancelledError:
                seen.append("cancelled")
            await asyncio.sleep(0)  # goes on: no second cancellation
            seen.append("went on")
    assert seen == ["cancelled", "went on"]


def test_a_body_that_swallows_the_cancellation_still_raises_lock_lost(rds,
                                                                      redis_url) -> None:
    async def main(c: hla.Client) -> None:
        await swallow_the_cancellation(c, rds, "col:swallow")
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0

    run(redis_url, main)


def test_a_body_error_after_the_cancellation_is_the_one_raised(rds, redis_url) -> None:
    async def main(c: hla.Client) -> None:
        with pytest.raises(KeyError):
            async with c.lock("col:err", TTL, cancel_on_loss=True):
                rds.flushall()
                try:
                    await not_cancelled()
                except asyncio.CancelledError:
                    raise KeyError("cleanup failed") from None

    run(redis_url, main)


def test_a_loss_after_the_block_or_of_another_task_cancels_nothing(rds, redis_url) -> None:
    """Task A's block is lost: A alone is cancelled, B's block (another
    lock) runs on. After A's block ended, the same object held by a plain
    acquire() and lost: nothing is cancelled (the option concerns the
    block)."""
    async def main(c: hla.Client) -> None:
        lk = c.lock("col:a", TTL, cancel_on_loss=True)
        other = c.lock("col:b", ttl=30, cancel_on_loss=True)
        a_done = asyncio.Event()
        b_inside = asyncio.Event()

        async def a() -> None:
            await reached(b_inside, tb)
            try:
                async with lk:
                    rds.delete("hilock:{col:a}:lock")
                    await not_cancelled()
            finally:
                a_done.set()

        async def b() -> str:
            async with other:
                b_inside.set()
                await a_done.wait()
                await asyncio.sleep(0)
                return "ran on"

        tb = asyncio.ensure_future(b())
        ta = asyncio.ensure_future(a())
        with pytest.raises(hilock.LockLost):
            await ta
        assert await tb == "ran on"

        # After the block: the object acquired without a block, and lost.
        async with lk:
            pass
        assert await lk.acquire()
        rds.delete("hilock:{col:a}:lock")
        steps = 0
        while not lk.lost:
            steps += 1
            assert steps < BOUND / 0.01, "the loss was never found"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)  # not cancelled
        with pytest.raises(hilock.LockNotOwnedError):
            await lk.release()

    run(redis_url, main)


def test_an_unrenewed_grant_ends_the_block_when_its_validity_runs_out(rds,
                                                                     redis_url) -> None:
    """auto_renew=False: no renewal finds a loss; the end of the grant's
    validity cancels the body. extend() moves that end. (A TTL of 1 s: the
    acquire and the extend must come before it runs out, also on a loaded
    machine.)"""
    async def main(c: hla.Client) -> None:
        lk = c.lock("col:lapse", 1.0, auto_renew=False, cancel_on_loss=True)
        extended = []
        with pytest.raises(hilock.LockLost):
            async with lk:
                await lk.extend(0.5)
                extended.append(lk.validity > 1.0)
                await not_cancelled()
        assert extended == [True]

    run(redis_url, main)


def test_a_body_that_released_the_lock_is_not_cancelled(rds, redis_url) -> None:
    """A body that released the lock itself has nothing left to lose: the end
    of the grant's validity does not cancel it."""
    async def main(c: hla.Client) -> None:
        # A TTL of 1 s: the release must come before it runs out, also on a
        # loaded machine.
        lk = c.lock("col:rel", 1.0, auto_renew=False, cancel_on_loss=True)
        async with lk:
            await lk.release()
            # Past the grant's validity: the loop runs a timer due at its
            # end before this sleep's.
            await asyncio.sleep(1.2)
        assert lk.validity == 0

    run(redis_url, main)


def test_nested_blocks_of_a_reentrant_lock_cancel_once(rds, redis_url) -> None:
    """A task inside two blocks of one reentrant lock is cancelled once; the
    outer block raises LockLost."""
    async def main(c: hla.Client) -> None:
        rl = c.rlock("col:nested", TTL, cancel_on_loss=True)
        inner_saw = []
        with pytest.raises(hilock.LockLost):
            async with rl:
                try:
                    async with rl:
                        rds.flushall()
                        await not_cancelled()
                except asyncio.CancelledError:
                    inner_saw.append("cancelled")
                    raise
        assert inner_saw == ["cancelled"]
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0

    run(redis_url, main)


def test_without_counted_cancels_a_flag_tells_the_loss_cancellation(
        rds, redis_url, monkeypatch) -> None:
    """The path of Pythons before 3.11 (no Task.cancelling): the block's
    flag alone turns its cancellation into LockLost, also when the body
    caught it and went on."""
    monkeypatch.setattr(hla, "_COUNTED_CANCELS", False)

    async def main(c: hla.Client) -> None:
        with pytest.raises(hilock.LockLost):
            async with c.lock("col:flag", TTL, cancel_on_loss=True):
                rds.flushall()
                await not_cancelled()
        await swallow_the_cancellation(c, rds, "col:flag2")

    async def outside(c: hla.Client) -> None:
        await cancel_inside(c, "col:flag3")

    run(redis_url, main)
    run(redis_url, outside)
