"""hilock for asyncio: ``async with client.lock("orders:42"):``.

The event loop never waits on the network. An acquire makes one attempt on
a small fixed pool of threads in the C core and, when the lock is held,
waits on the client's shared waiting connection (no thread and no
connection per waiting task); finished operations reach the loop through
one file descriptor it watches (``hilock/async.h``).

    import hilock.asyncio

    async def main() -> None:
        client = hilock.asyncio.Client("redis://localhost:6379/0")
        async with client.lock("orders:42", ttl=10, timeout=5) as lk:
            ...                      # lk.fence, lk.validity, lk.lost
        await client.close()

Same keys and exceptions as the thread API: a task here and a thread of
``hilock.Client`` exclude each other on one name. Cancelling a task (or
``asyncio.timeout``) while it waits withdraws the wait, and a grant that
raced the cancellation is released; a cancelled ``release()`` still
finishes.

``cancel_on_loss=True`` (every lock that can be lost: all but
:meth:`Client.simple_lock`) makes a loss stop the work it protected. The
blocking API calls ``on_lost`` on a thread of its own; here a loss of the
hold while a task is inside ``async with`` on it cancels that task, where
it waits (``asyncio.sleep``, a socket read, another lock's acquire), and
the block then raises :class:`hilock.LockLost`, not ``CancelledError``::

    async with client.lock("orders:42", ttl=10, cancel_on_loss=True):
        await work()                 # cancelled at once if the lock is lost

A loss is renewal finding the grant gone, or unable to renew it before its
validity ran out; without renewal (``auto_renew=False``) the end of the
grant's validity. Only the cancellation of the loss becomes LockLost: a
``task.cancel()`` of the application, ``asyncio.timeout`` or ``wait_for``
still ends the block with ``CancelledError`` (and ``TimeoutError``), also
when it comes with a loss (Python 3.11+, which counts a task's cancel
requests; before 3.11 one that reaches the task together with the loss's
ends it with LockLost). A body that catches the cancellation and goes on
still ends with LockLost; one that raises another exception ends with that
one. A loss after the block ended (or after its body released the lock
itself), or of another task's block, cancels nothing; the option concerns
the block only, not ``acquire()`` (a cancelled acquire withdraws its wait,
as always) nor a lock held by ``acquire()`` and ``release()`` calls.
Without the option, a loss surfaces as LockLost when the block ends.

Every lock type of the blocking API: :meth:`Client.lock`,
:meth:`Client.simple_lock`, :meth:`Client.lease`, :meth:`Client.rlock` and
:meth:`Client.rwlock` (owned by the current task), :meth:`Client.semaphore`
(permits belong to tasks), :meth:`Client.fair_lock`,
:meth:`Client.sequential_lock`, :meth:`Client.multi_lock`,
:meth:`Client.segmented_lock`, and :class:`Redlock`.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import math
import os
import sys
import threading
import time
import weakref
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Deque,
    Dict,
    Generator,
    Generic,
    Iterable,
    List,
    Optional,
    Protocol,
    Tuple,
    Type,
    TypeVar,
    Union,
    overload,
)

from . import _base
from . import _hilock as _h
from ._barrier import Barrier as _SyncBarrier
from ._barrier import DoubleBarrier as _SyncDoubleBarrier
from ._barrier import Inside as _SyncInside
from ._barrier import wait_ms as _barrier_wait_ms
from ._base import ExclusiveBase, raise_on_leaving
from ._client import Client as _SyncClient
from ._election import Election as _SyncElection
from ._election import Value, _Lead, value_bytes, value_of
from ._fair import FairLock as _SyncFairLock
from ._inspect import LockInfo
from ._latch import Latch as _SyncLatch
from ._latch import LatchParty as _SyncLatchParty
from ._multilock import MultiLock as _SyncMultiLock
from ._redlock import Redlock as _SyncRedlock
from ._rlock import RedissonRWLock as _SyncRedissonRWLock
from ._rlock import RLock as _SyncRLock
from ._rwlock import RWLock as _SyncRWLock
from ._seglock import SegmentedLock as _SyncSegmentedLock
from ._semaphore import Semaphore as _SyncSemaphore
from ._seqlock import SequentialLock as _SyncSequentialLock
from ._util import Compat, Name, RedisPyCompat, Uncopyable, seconds_to_ms, wait_seconds
from .errors import (
    ForkedLockError,
    InvalidArgument,
    LockError,
    LockNotOwnedError,
    LockTimeout,
    error_for,
)

__all__ = ["Barrier", "Client", "DoubleBarrier", "Election", "FairLock", "Inside", "Latch",
           "LatchParty", "Leadership", "Lock", "MultiLock", "RLock", "RWLock", "ReadLock",
           "Redlock", "RedissonRWLock", "SegmentedLock", "Semaphore", "SequentialLock",
           "WriteLock"]


# A finished operation: its status, why it failed, and a query's answer.
Done = Tuple[int, str, int]

# Tasks count their cancellation requests (Task.cancelling, uncancel) from
# Python 3.11 on: a block with cancel_on_loss then tells its own
# cancellation from the application's or a timeout's. Before, a flag says
# it cancelled the task, and nothing tells a cancellation that came with it.
_COUNTED_CANCELS = sys.version_info >= (3, 11)


# The owner numbers of tasks, for the locks owned by their caller (the
# reentrant lock): a task is one owner, as a thread is in the blocking API.
_owners: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = weakref.WeakKeyDictionary()
_owner_numbers = itertools.count(1)


def _task() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("hilock.asyncio locks are acquired and released from a task")
    return task


def _task_owner() -> int:
    task = _task()
    n = _owners.get(task)
    if n is None:
        n = next(_owner_numbers) % _h.HILOCK_ASYNC_OWNER_MAX + 1
        _owners[task] = n
    return n


async def _settle(fut: asyncio.Future[Any]) -> None:
    """Wait for fut to finish, whatever cancellations come meanwhile."""
    while not fut.done():
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            continue


async def _through(fut: asyncio.Future[Any]) -> Any:
    """fut's result; a cancelled caller waits for fut to finish all the
    same, then goes on with its cancellation (a close that is cancelled
    still closes)."""
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        await _settle(fut)
        raise


_T = TypeVar("_T")


def _off_loop(fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
    """fn(*args) on a thread of the running loop's default executor: the
    blocking calls that have no operation of their own in the C runner."""
    return asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _unwatch_and_free(loop: Optional[asyncio.AbstractEventLoop], a: Any,
                      _free: Callable[[Any], None] = _h.hilock_async_free,
                      _fd: Callable[[Any], int] = _h.hilock_async_fd,
                      _running: Callable[[], Optional[asyncio.AbstractEventLoop]] = (
                          asyncio._get_running_loop)) -> None:
    """Free a runner that was not closed. Its descriptor leaves its loop
    first: a loop that still lists a closed descriptor's number does not
    watch the next descriptor given that number (the next client's runner,
    a socket), since add_reader finds the entry and only swaps its
    callback. From a thread other than the running loop's (a collection
    there), the loop does both on its own thread."""
    try:
        if loop is not None and not loop.is_closed():
            if loop.is_running() and _running() is not loop:
                loop.call_soon_threadsafe(_unwatch_and_free, loop, a)
                return
            loop.remove_reader(_fd(a))
    except Exception:
        pass  # the loop closed meanwhile: nothing watches the descriptor
    _free(a)


class _Runner:
    """The C runner (hilock/async.h) of one event loop: the loop watches its
    descriptor, and each finished operation completes its future."""

    def __init__(self, make: Callable[[], Any], what: str) -> None:
        self._make = make      # creates the C runner (on first use)
        self._what = what      # for messages
        self._a: Any = None
        self._pid = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._futures: Dict[int, asyncio.Future[Done]] = {}
        self._late: Dict[int, Done] = {}
        # The drainer's state (bindings/py_helpers.h): [closing, freed].
        self._state = bytearray(2)
        self._closer: Optional[asyncio.Future[None]] = None  # close() under way
        self._binding = threading.Lock()  # get() binds to one loop at a time

    def get(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._a is not None and self._pid != os.getpid():
            raise ForkedLockError(f"this {self._what}'s operations run in the parent "
                                  "process; make a new one in the child", _h.HILOCK_EFORKED)
        # One binding at a time: the first operations of two loops (two
        # threads) must not both make a runner; the second learns that the
        # first bound it, before it starts anything.
        with self._binding:
            return self._bind(loop)

    def _bind(self, loop: asyncio.AbstractEventLoop) -> Any:
        if self._a is None:
            a = self._make()
            state = bytearray(2)
            # Each finished operation's future gets (status, message,
            # value); one whose task was cancelled and has not run yet
            # leaves it in _late (run() takes it from there); while
            # closing, they stay for close() to tell. In C, all of it: no
            # Python frame per wake-up.
            fd = _h.hilock_async_fd(a)
            try:
                # A number the loop still lists is stale (its descriptor
                # was closed while watched): add_reader alone would only
                # swap the callback of that entry and never watch this one.
                loop.remove_reader(fd)
                loop.add_reader(fd, _h.py_async_drainer(a, self._futures, self._late, state))
            except BaseException:
                state[1] = 1
                _h.hilock_async_free(a)
                raise
            # Published once watched, the runner last: run() takes it
            # without the lock when it belongs to its loop.
            self._state = state
            self._pid = os.getpid()
            self._loop = loop
            self._a = a
        elif loop is not self._loop:
            assert self._loop is not None
            if not self._loop.is_closed() or _h.hilock_async_pending(self._a) > 0:
                raise RuntimeError(f"this {self._what} is bound to another event loop "
                                   "(one that is still open, or has operations in flight)")
            # Its loop is closed with nothing in flight (asyncio.run called
            # again, a test framework's loop per test): bind to this one.
            # The old runner's threads are idle; freeing it touches no
            # connection.
            a, self._a = self._a, None
            self._state[1] = 1
            _h.hilock_async_free(a)
            return self._bind(loop)
        return self._a

    async def run(self, start: Any, handle: Any, *args: Any, cancel: bool) -> Done:
        """Start an operation and wait for its status. A cancelled caller
        cancels an acquire (cancel=True) and in every case waits for the
        operation to finish before the cancellation goes on: nothing is
        left running on a lock object the caller may reuse."""
        loop = asyncio.get_running_loop()
        a = self._a
        if a is None or loop is not self._loop:
            a = self.get()
        # (A forked child has no running loop: asyncio refuses it above;
        # the C runner refuses a call from another process too.)
        op_id = start(a, handle, *args)
        fut: asyncio.Future[Done] = loop.create_future()
        self._futures[op_id] = fut
        try:
            done = await fut
        except asyncio.CancelledError:
            if fut.cancelled():
                # The cancellation cancelled fut too: wait on a new one (or
                # take the result that came meanwhile, see get). A fut
                # that had its result before the cancellation keeps it.
                fut = asyncio.get_running_loop().create_future()
                late = self._late.pop(op_id, None)
                if late is not None:
                    fut.set_result(late)
                else:
                    self._futures[op_id] = fut
            if cancel:
                try:
                    _h.hilock_async_cancel(a, op_id)
                except LockError:
                    pass  # it finished meanwhile
            await _settle(fut)
            if cancel and fut.result()[0] == _h.HILOCK_OK:
                # Granted before the cancel reached it: give it back.
                op_id = _h.hilock_async_release(a, handle, *args[:1])
                rel: asyncio.Future[Done] = asyncio.get_running_loop().create_future()
                self._futures[op_id] = rel
                await _settle(rel)
            raise
        return done


    def __del__(self, _getpid: Callable[[], int] = os.getpid,
                _unwatch_and_free: Callable[[Any, Any], None] = _unwatch_and_free) -> None:
        # A runner nobody closed (a client dropped without close(), one
        # whose first connection failed, Redlock's, which lives as long as
        # its loop): its descriptor leaves the loop and its threads stop
        # with it. (The defaults keep what it calls alive when the
        # interpreter tears the module down at exit.)
        a, self._a = getattr(self, "_a", None), None
        if a is not None and self._pid == _getpid():
            self._state[1] = 1
            _unwatch_and_free(self._loop, a)

    async def close(self) -> None:
        """Cancel what is in flight and stop watching the loop's descriptor.
        Runs to its end once begun: a cancelled caller still waits for it
        (every waiting task is told), and concurrent calls share one."""
        if self._closer is None or self._closer.done():
            self._closer = asyncio.ensure_future(self._close())
        await _through(self._closer)

    async def _close(self) -> None:
        a = self._a
        if a is None:
            return
        cancelled = False
        if self._loop is asyncio.get_running_loop():
            # Operations run on this loop's thread (on fibers of the C
            # core): end them here, while the loop turns (a wait is
            # withdrawn, an attempt on the wire finishes or, unanswered
            # for 100 ms, is left to its undo; a release completes); their
            # callers are told the client closed.
            self._state[0] = 1
            while _h.hilock_async_pending(a) > 0 and self._a is a:
                for op_id in list(self._futures):
                    try:
                        _h.hilock_async_cancel(a, op_id)
                    except LockError:
                        pass  # not an acquire, or it finished
                try:
                    await asyncio.sleep(0.001)
                except asyncio.CancelledError:
                    cancelled = True  # the loop shuts down: finish first
        a, self._a = self._a, None
        if a is None:
            return
        self._state[1] = 1
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(_h.hilock_async_fd(a))
        # Waits for attempts on the wire (each bounded by the command
        # timeout) without holding the loop's thread.
        freed = _off_loop(_h.hilock_async_free, a)
        try:
            await freed
        except asyncio.CancelledError:
            cancelled = True
            await _settle(freed)
        for fut in self._futures.values():
            if not fut.done():
                fut.set_result((_h.HILOCK_ECLOSED, "client closed while waiting", 0))
        self._futures.clear()
        if cancelled:
            raise asyncio.CancelledError()


class _Runs(Protocol):
    """What runs a lock's operations: a client, or Redlock's runner."""

    def _run(self, start: Any, handle: Any, *args: Any, cancel: bool) -> Awaitable[Done]: ...


# Redlocks drive their own connections: one runner without a client per
# event loop serves them all (two threads), and lives as long as the loop.
_redlock_runners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Runner] = (
    weakref.WeakKeyDictionary())


class _RedlockRuns:
    async def _run(self, start: Any, handle: Any, *args: Any, cancel: bool) -> Done:
        loop = asyncio.get_running_loop()
        runner = _redlock_runners.get(loop)
        if runner is None:
            runner = _Runner(lambda: _h.hilock_async_new(None, 0), "hilock.asyncio.Redlock")
            _redlock_runners[loop] = runner
        return await runner.run(start, handle, *args, cancel=cancel)


class Client(Uncopyable):
    """A pool of connections to one Redis deployment, for asyncio.

    Takes the arguments of :class:`hilock.Client`. Making one opens no
    connection (``connect=False`` by default here: the loop does not wait
    on the network): the first operation connects, on the loop, and raises
    what the connection met (a refused connection, a wrong password). The
    first operation also binds it to the running event loop; use it from
    that loop only. Once that loop is closed (``asyncio.run`` returned, a
    test's loop ended) with nothing in flight, the next operation binds it
    to the loop running then.
    """

    _copy_refusal = ("hilock.asyncio.Client cannot be copied: share the one client "
                     "(within its event loop) or make a new one")
    _pickle_refusal = "hilock.asyncio.Client cannot be pickled: make a new one from its url"

    def __init__(self, url: Optional[str] = None, **options: Any) -> None:
        options.setdefault("connect", False)
        self._sync = _SyncClient(url, **options)
        # A plain URL on a TLS port: the connection's error says so (net.c).
        self._runner = _Runner(self._new_runner, "hilock.asyncio.Client")

    def _new_runner(self) -> Any:
        with self._sync._use() as h:
            return _h.hilock_async_new(h, 0)

    def _run(self, start: Any, handle: Any, *args: Any, cancel: bool) -> Awaitable[Done]:
        # The runner's coroutine itself: no frame of its own on every call.
        return self._runner.run(start, handle, *args, cancel=cancel)

    @property
    def url(self) -> str:
        return self._sync.url

    @property
    def waiting(self) -> int:
        """Operations of this client waiting for a lock now (tasks here and
        threads of the blocking API)."""
        return self._sync.waiting

    def stats(self) -> Dict[str, Any]:
        """The client's counters, as :meth:`hilock.Client.stats` (tasks here
        and threads of the blocking API count together). A local read: no
        round trip, so not a coroutine."""
        return self._sync.stats()

    def reset_stats(self) -> None:
        """Set every counter of :meth:`stats` to zero."""
        self._sync.reset_stats()

    # BEGIN generated factories
    # Written by tools/gen_factories.py from its table of factories: edit
    # the table and run the script, not the code between these lines.
    def lock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
             auto_renew: bool = True, max_hold: Optional[float] = None,
             cancel_on_loss: bool = False, lock_delay: float = 0,
             compat: Optional[RedisPyCompat] = None) -> Lock:
        """An expiring lock, as :meth:`hilock.Client.lock`.
        ``cancel_on_loss``: a loss of the hold cancels the task inside
        ``async with`` on it, and the block raises :class:`hilock.LockLost`
        (every lock that can be lost takes it; see :mod:`hilock.asyncio`).
        ``compat="redis-py"``: redis-py's lock of the same name."""
        return Lock(self, self._sync.lock(name, ttl, timeout, auto_renew=auto_renew,
                                          max_hold=max_hold, lock_delay=lock_delay,
                                          compat=compat), cancel_on_loss)

    def simple_lock(self, name: Name, timeout: Optional[float] = None) -> Lock:
        """A lock without expiry, as :meth:`hilock.Client.simple_lock`."""
        return Lock(self, self._sync.simple_lock(name, timeout))

    def lease(self, name: Name, ttl: float, timeout: Optional[float] = None, *,
              cancel_on_loss: bool = False, lock_delay: float = 0) -> Lock:
        """A lease (expires, never renewed), as :meth:`hilock.Client.lease`."""
        return Lock(self, self._sync.lease(name, ttl, timeout,
                                           lock_delay=lock_delay), cancel_on_loss)

    def rlock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
              auto_renew: bool = True, max_hold: Optional[float] = None,
              cancel_on_loss: bool = False, lock_delay: float = 0,
              compat: Optional[Compat] = None) -> RLock:
        """A reentrant lock, as :meth:`hilock.Client.rlock`, owned by the
        current task: a task that holds it may acquire it again (and
        releases as often); other tasks, threads and processes wait.
        ``compat="redisson"``: Redisson's RLock of the same name."""
        return RLock(self, self._sync.rlock(name, ttl, timeout, auto_renew=auto_renew,
                                            max_hold=max_hold, lock_delay=lock_delay,
                                            compat=compat), cancel_on_loss)

    def semaphore(self, name: Name, permits: int, ttl: float = 30.0,
                  timeout: Optional[float] = None, *, auto_renew: bool = True,
                  max_hold: Optional[float] = None, cancel_on_loss: bool = False) -> Semaphore:
        """A counting semaphore, as :meth:`hilock.Client.semaphore`; a
        permit belongs to the task that acquired it."""
        return Semaphore(self, self._sync.semaphore(name, permits, ttl, timeout,
                                                    auto_renew=auto_renew,
                                                    max_hold=max_hold), cancel_on_loss)

    @overload
    def fair_lock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
                  auto_renew: bool = True, max_hold: Optional[float] = None,
                  cancel_on_loss: bool = False, lock_delay: float = 0,
                  compat: None = None) -> FairLock: ...

    @overload
    def fair_lock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
                  auto_renew: bool = True, max_hold: Optional[float] = None,
                  cancel_on_loss: bool = False, lock_delay: float = 0, compat: Compat) -> RLock: ...

    def fair_lock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
                  auto_renew: bool = True, max_hold: Optional[float] = None,
                  cancel_on_loss: bool = False, lock_delay: float = 0,
                  compat: Optional[Compat] = None) -> Union[FairLock, RLock]:
        """A fair (FIFO) lock, as :meth:`hilock.Client.fair_lock`: a
        cancelled waiter leaves the queue. ``compat="redisson"``: Redisson's
        RFairLock of the same name, a task-owned :class:`RLock` (a waiting
        task hears the release meant for it; one that gives up, cancelled or
        timed out, leaves the queue)."""
        if compat is not None:
            return RLock(self, self._sync.fair_lock(name, ttl, timeout, auto_renew=auto_renew,
                                                    max_hold=max_hold, lock_delay=lock_delay,
                                                    compat=compat), cancel_on_loss)
        return FairLock(self, self._sync.fair_lock(name, ttl, timeout, auto_renew=auto_renew,
                                                   max_hold=max_hold,
                                                   lock_delay=lock_delay), cancel_on_loss)

    @overload
    def rwlock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
               auto_renew: bool = True, max_hold: Optional[float] = None,
               cancel_on_loss: bool = False, lock_delay: float = 0,
               compat: None = None) -> RWLock: ...

    @overload
    def rwlock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
               auto_renew: bool = True, max_hold: Optional[float] = None,
               cancel_on_loss: bool = False, lock_delay: float = 0,
               compat: Compat) -> RedissonRWLock: ...

    def rwlock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
               auto_renew: bool = True, max_hold: Optional[float] = None,
               cancel_on_loss: bool = False, lock_delay: float = 0,
               compat: Optional[Compat] = None) -> Union[RWLock, RedissonRWLock]:
        """A read-write lock, as :meth:`hilock.Client.rwlock`, whose owner
        is the current task: ``.read()`` and ``.write()`` give its sides.
        ``compat="redisson"``: Redisson's RReadWriteLock of the same name."""
        if compat is not None:
            return RedissonRWLock(self, self._sync.rwlock(name, ttl, timeout, auto_renew=auto_renew,
                                                          max_hold=max_hold, lock_delay=lock_delay,
                                                          compat=compat), cancel_on_loss)
        return RWLock(self, self._sync.rwlock(name, ttl, timeout, auto_renew=auto_renew,
                                              max_hold=max_hold,
                                              lock_delay=lock_delay), cancel_on_loss)

    def multi_lock(self, names: Iterable[Name], ttl: float = 30.0, timeout: Optional[float] = None,
                   *, auto_renew: bool = True, max_hold: Optional[float] = None,
                   cancel_on_loss: bool = False, lock_delay: float = 0) -> MultiLock:
        """A lock on every name at once or none, as
        :meth:`hilock.Client.multi_lock`."""
        return MultiLock(self, self._sync.multi_lock(names, ttl, timeout, auto_renew=auto_renew,
                                                     max_hold=max_hold,
                                                     lock_delay=lock_delay), cancel_on_loss)

    def sequential_lock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
                        auto_renew: bool = True, max_hold: Optional[float] = None,
                        cancel_on_loss: bool = False, lock_delay: float = 0) -> SequentialLock:
        """A sequential lock, as :meth:`hilock.Client.sequential_lock`: a
        cancelled waiter leaves the queue."""
        return SequentialLock(self, self._sync.sequential_lock(
            name, ttl, timeout, auto_renew=auto_renew, max_hold=max_hold,
            lock_delay=lock_delay), cancel_on_loss)

    def election(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
                 auto_renew: bool = True, max_hold: Optional[float] = None,
                 cancel_on_loss: bool = False) -> Election:
        """A leader election, as :meth:`hilock.Client.election`:
        ``await campaign()``, ``async with`` the leadership, ``async for``
        over ``observe()``."""
        return Election(self, self._sync.election(name, ttl, timeout, auto_renew=auto_renew,
                                                  max_hold=max_hold), cancel_on_loss)

    def latch(self, name: Name, count: int, ttl: float = 30.0) -> Latch:
        """A countdown latch, as :meth:`hilock.Client.latch`: ``await wait()``,
        ``await count_down()``, ``async with latch.join()``."""
        return Latch(self, self._sync.latch(name, count, ttl))

    def barrier(self, name: Name, parties: int, ttl: float = 30.0,
                timeout: Optional[float] = None) -> Barrier:
        """A barrier, as :meth:`hilock.Client.barrier`: ``await wait()``; a
        cancelled wait breaks the barrier, as an interrupted one does."""
        return Barrier(self, self._sync.barrier(name, parties, ttl, timeout))

    def double_barrier(self, name: Name, parties: int, ttl: float = 30.0,
                       timeout: Optional[float] = None) -> DoubleBarrier:
        """A double barrier, as :meth:`hilock.Client.double_barrier`:
        ``async with await db.enter():``."""
        return DoubleBarrier(self, self._sync.double_barrier(name, parties, ttl, timeout))

    def segmented_lock(self, name: Name, segments: int, ttl: float = 30.0,
                       timeout: Optional[float] = None, *, auto_renew: bool = True,
                       max_hold: Optional[float] = None,
                       cancel_on_loss: bool = False) -> SegmentedLock:
        """A segmented lock, as :meth:`hilock.Client.segmented_lock`:
        ``acquire()`` takes a free segment that has stock and raises
        :class:`hilock.SoldOut` once every segment is empty."""
        return SegmentedLock(self, self._sync.segmented_lock(name, segments, ttl, timeout,
                                                             auto_renew=auto_renew,
                                                             max_hold=max_hold), cancel_on_loss)
    # END generated factories

    async def adopt(self, text: Union[str, bytes], timeout: Optional[float] = None, *,
                    auto_renew: bool = True, max_hold: Optional[float] = None,
                    cancel_on_loss: bool = False) -> Any:
        """Take over a grant handed over with ``lk.export()``, as
        :meth:`hilock.Client.adopt` (its round trip on a thread of the
        loop's default executor): the asyncio lock of the exported family
        (:class:`Lock`, :class:`FairLock`, ..., or a :class:`Semaphore`
        whose permit the current task holds). A caller cancelled meanwhile
        gets nothing: the adopted grant is released."""
        sync_adopt = self._sync.adopt

        def adopt() -> Tuple[Any, Any]:
            s = sync_adopt(text, timeout, auto_renew=auto_renew, max_hold=max_hold)
            if isinstance(s, _SyncSemaphore):
                return s, s._held().pop()  # the task holds it, not this thread
            s._drop_local()  # the asyncio object takes turns of its own
            return s, None

        fut = _off_loop(adopt)
        try:
            sync, permit = await asyncio.shield(fut)
        except asyncio.CancelledError:
            fut.add_done_callback(_give_back_adopted)
            raise
        if permit is not None:
            sem = Semaphore(self, sync, cancel_on_loss)
            sem._held.setdefault(_task(), []).append(permit)
            return sem
        cls = {_SyncFairLock: FairLock, _SyncSequentialLock: SequentialLock,
               _SyncMultiLock: MultiLock, _SyncSegmentedLock: SegmentedLock}.get(type(sync), Lock)
        lk = cls(self, sync, cancel_on_loss)
        lk._turns.held = True
        lk._granted = True
        return lk

    async def ping(self) -> None:
        """One round trip (PING), as :meth:`hilock.Client.ping` (on a
        thread of the loop's default executor)."""
        await _off_loop(self._sync.ping)

    async def list_locks(self, pattern: Name = "*") -> AsyncIterator[LockInfo]:
        """The locks present whose name matches ``pattern``, as
        :meth:`hilock.Client.list_locks`: ``async for info in
        client.list_locks("orders:*")``. Each step (a SCAN page, an inspect)
        runs on a thread of the loop's default executor."""
        walk = self._sync.list_locks(pattern)
        try:
            while True:
                info: Optional[LockInfo] = await _off_loop(next, walk, None)
                if info is None:
                    return
                yield info
        finally:
            walk.close()  # type: ignore[attr-defined]

    async def inspect(self, name: Name) -> LockInfo:
        """What the lock ``name`` holds now, as :meth:`hilock.Client.inspect`
        (one round trip, on a thread of the loop's default executor)."""
        return await _off_loop(self._sync.inspect, name)

    async def force_release(self, name: Name) -> bool:
        """Take the lock ``name`` away from whoever holds it, as
        :meth:`hilock.Client.force_release` (on a thread of the loop's
        default executor)."""
        return await _off_loop(self._sync.force_release, name)

    async def close(self) -> None:
        """Cancel what is in flight, stop watching the loop's descriptor and
        close the pool (as :meth:`hilock.Client.close`). Once begun it runs
        to its end: a caller cancelled meanwhile still waits for it, and
        every task waiting on the client learns it closed."""
        try:
            await self._runner.close()
        finally:
            self._sync.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self.close()


def _give_back_adopted(fut: asyncio.Future[Tuple[Any, Any]]) -> None:
    """An adoption whose caller was cancelled: release what it adopted (on
    a thread of the default executor: a round trip)."""
    if fut.cancelled() or fut.exception() is not None:
        return
    sync, permit = fut.result()

    def give_back() -> None:
        try:
            if permit is not None:
                _h.hilock_hold_release(permit)
            else:
                sync.release()
        except LockError:
            pass

    threading.Thread(target=give_back, daemon=True).start()


def _wait_ms(blocking: bool, timeout: float, default: Optional[float]) -> int:
    """acquire()'s arguments as the core's wait: ms, 0 (one attempt) or -1
    (no limit)."""
    if not blocking:
        if timeout != -1:
            raise InvalidArgument("can't specify a timeout for a non-blocking call")
        return 0
    wait = default if timeout == -1 else wait_seconds(timeout)
    return -1 if wait is None else math.ceil(wait * 1000)


def _outcome(status: int, message: str) -> bool:
    """An acquire's result: True granted, False timed out; else raise."""
    if status == _h.HILOCK_OK:
        return True
    if status == _h.HILOCK_BUSY:
        return False
    if status == _h.HILOCK_ECANCELED:
        raise asyncio.CancelledError()
    raise error_for(status, message or f"status {status}")


class _Turns:
    """The tasks that share one lock object take turns at it, first come
    first served; one at a time goes on to the server. (An asyncio.Lock
    would do, but under a timeout its acquire costs a task of its own on
    every call.)"""

    __slots__ = ("held", "_queue")

    def __init__(self) -> None:
        self.held = False  # a task has the turn
        self._queue: Deque[asyncio.Future[None]] = collections.deque()

    async def take(self, timeout_ms: int) -> bool:
        """Take the turn: at once (timeout_ms 0), within timeout_ms, or
        with no limit (-1). False if it did not come in time."""
        if not self.held:
            self.held = True
            return True
        if timeout_ms == 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(fut)
        try:
            if timeout_ms < 0:
                await fut
            else:
                await asyncio.wait_for(fut, timeout_ms / 1000)
        except BaseException as e:
            if fut.done() and not fut.cancelled():
                self.give()  # it came as this one left: pass it on
            else:
                fut.cancel()  # give() skips it
            if isinstance(e, asyncio.TimeoutError):
                return False
            raise
        return True

    def give(self) -> None:
        """End the turn: the next waiting task has it."""
        queue = self._queue
        while queue:
            fut = queue.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.held = False


class _Watch:
    """An ``async with`` block of a lock made with ``cancel_on_loss``: the
    task that entered it, its loop, the hold it protects (``what``: see
    _Hold._held_by), whether a loss cancelled the task, and whether the
    body released the lock itself (nothing is left to watch then)."""

    __slots__ = ("task", "loop", "what", "cancelled", "released", "timer")

    def __init__(self, task: asyncio.Task[Any], loop: asyncio.AbstractEventLoop,
                 what: Any) -> None:
        self.task = task
        self.loop = loop
        self.what = what
        self.cancelled = False
        self.released = False
        self.timer: Optional[asyncio.TimerHandle] = None


def _cancel_was_ours(task: asyncio.Task[Any], exc_type: Optional[Type[BaseException]]) -> bool:
    """Whether a block whose loss cancelled its task ends with LockLost:
    its body ended by that cancellation or went on after it. Withdraws the
    block's own cancellation request (Python 3.11+), so that a timeout or
    the application's cancel, which the task also got, goes on as
    CancelledError."""
    cancelled = exc_type is not None and issubclass(exc_type, asyncio.CancelledError)
    if _COUNTED_CANCELS:
        task.uncancel()
        if cancelled and task.cancelling() > 0:
            return False  # cancelled from outside too: that one goes on
    return exc_type is None or cancelled


def _traced_acquire(acquire: Callable[..., Awaitable[bool]]) -> Any:
    """An asyncio lock class's acquire, traced while hilock.tracing is
    instrumented."""
    @functools.wraps(acquire)
    async def traced(self: Any, blocking: bool = True, timeout: float = -1) -> bool:
        hook = _base._tracer_hook
        if hook is None:
            return await acquire(self, blocking, timeout)
        return await hook.acquire_async(self, acquire, blocking, timeout)  # type: ignore[no-any-return]
    return traced


def _traced_release(release: Callable[[Any], Awaitable[None]]) -> Any:
    @functools.wraps(release)
    async def traced(self: Any) -> None:
        hook = _base._tracer_hook
        if hook is None:
            await release(self)
        else:
            await hook.release_async(self, release)
    return traced


class _Hold(Uncopyable):
    """What every asyncio lock shares: the blocking object it wraps (its
    keys, options and grant state), ``async with``, and the properties.

    ``cancel_on_loss``: a loss of the hold while a task is inside ``async
    with`` on it cancels that task, and the block then raises LockLost
    (module docstring)."""

    _sync: Any
    # Per task inside ``async with`` on this object: [releases that
    # succeeded meanwhile, then the count at each enter], so that leaving a
    # block can tell its body released the lock on purpose. Made by the
    # first ``async with``.
    _withs: Optional[weakref.WeakKeyDictionary[asyncio.Task[Any], List[int]]] = None

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        # Traced while hilock.tracing is instrumented (_base._tracer_hook).
        if "acquire" in cls.__dict__:
            cls.acquire = _traced_acquire(cls.__dict__["acquire"])  # type: ignore[method-assign]
        if "release" in cls.__dict__:
            cls.release = _traced_release(cls.__dict__["release"])  # type: ignore[method-assign]

    def __init__(self, client: _Runs, sync: Any, cancel_on_loss: bool = False) -> None:
        self._client = client
        self._sync = sync
        self._cancel_on_loss = bool(cancel_on_loss)
        # The blocks open on this object, with cancel_on_loss. A plain list:
        # the thread that delivers losses copies it (list() of a list holds
        # the interpreter lock throughout).
        self._watches: List[_Watch] = []
        if self._cancel_on_loss:
            self._hear_losses()

    # -- cancel_on_loss ----------------------------------------------------

    def _hear_losses(self) -> None:
        """Have the blocking lock's loss callback (called on the thread
        that delivers losses, hilock/_notify.py) reach this object."""
        ref = weakref.ref(self)
        previous = self._sync._on_lost  # Redlock's on_lost option

        def on_lost(sync: Any) -> None:
            hold = ref()
            if hold is not None:
                hold._heard_loss()
            if previous is not None:
                previous(sync)

        self._sync._on_lost = on_lost

    def _heard_loss(self) -> None:
        """A loss was reported (on the delivering thread): each loop with a
        block open on this object checks its blocks on its own thread."""
        for loop in {w.loop for w in list(self._watches)}:
            try:
                loop.call_soon_threadsafe(self._check_watches)
            except RuntimeError:
                pass  # the loop closed: its blocks are gone with it

    def _held_by(self, task: asyncio.Task[Any]) -> Any:
        """What a block of task protects, for _lost_now and _validity_ms
        (the object's grant; a semaphore's: the task's latest permit)."""
        return None

    def _lost_now(self, what: Any) -> bool:
        return bool(self._sync.lost)

    def _validity_ms(self, what: Any) -> float:
        return float(self._sync.validity) * 1000

    def _watch(self, task: asyncio.Task[Any]) -> None:
        """Watch the block task entered: its loss cancels task."""
        loop = asyncio.get_running_loop()
        w = _Watch(task, loop, self._held_by(task))
        self._watches.append(w)
        if not self._sync.auto_renew:
            # No renewal watches the grant: its end is its validity's.
            self._arm(w)
        if self._lost_now(w.what):
            # Lost before the block was watched: the body is cancelled at
            # its first wait, from the loop, as for a later loss.
            loop.call_soon(self._check_watches)

    def _arm(self, w: _Watch) -> None:
        ms = self._validity_ms(w.what)
        if ms < math.inf:
            w.timer = w.loop.call_later(max(0.0, ms) / 1000, self._lapse, w)

    def _lapse(self, w: _Watch) -> None:
        """An unrenewed grant's validity should have run out: cancel the
        block, or wait for the rest (extend() moved it)."""
        w.timer = None
        if w.released or w not in self._watches:
            return
        if self._validity_ms(w.what) > 0 and not self._lost_now(w.what):
            self._arm(w)
        else:
            self._cancel(w)

    def _check_watches(self) -> None:
        """On the loop's thread: cancel each block of this loop whose hold
        is lost."""
        loop = asyncio.get_running_loop()
        for w in list(self._watches):
            if w.loop is loop and not w.released and self._lost_now(w.what):
                self._cancel(w)

    def _cancel(self, w: _Watch) -> None:
        if w.cancelled or any(o.cancelled and o.task is w.task for o in self._watches):
            return  # one cancellation per task (a reentrant lock's nested blocks)
        w.cancelled = w.task.cancel()

    def _unwatch(self, task: asyncio.Task[Any]) -> Optional[_Watch]:
        """Stop watching task's innermost block on this object."""
        for i in range(len(self._watches) - 1, -1, -1):
            w = self._watches[i]
            if w.task is task:
                del self._watches[i]
                if w.timer is not None:
                    w.timer.cancel()
                return w
        return None

    def _released(self) -> None:
        """Count a release that succeeded, for the ``async with`` blocks
        of the current task (no task in one: nothing to count)."""
        withs = self._withs
        if withs:
            entry = withs.get(_task())
            if entry is not None:
                entry[0] += 1
        if self._watches:
            # The innermost block of the task that released: its grant is
            # over, and the next one (another task's) is not its own.
            task = _task()
            for w in reversed(self._watches):
                if w.task is task and not w.released:
                    w.released = True
                    if w.timer is not None:
                        w.timer.cancel()
                        w.timer = None
                    break

    async def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        raise NotImplementedError

    async def release(self) -> None:
        raise NotImplementedError

    def _call_target(self) -> Tuple[Any, int]:
        """The C handle a round trip on the current grant goes to, and its
        owner number (0: the handle's own)."""
        return self._sync._h, 0

    async def _call(self, start: Any, *args: Any) -> int:
        handle, owner = self._call_target()
        status, message, value = await self._client._run(start, handle, owner, *args,
                                                         cancel=False)
        if status < 0:
            raise error_for(status, message)
        return value

    async def owned(self) -> bool:
        """Whether this holder holds it (one round trip)."""
        return bool(await self._call(_h.hilock_async_owned))

    async def locked(self) -> bool:
        """Whether anyone holds it (one round trip)."""
        return bool(await self._call(_h.hilock_async_locked))

    async def extend(self, seconds: float, replace: bool = False) -> None:
        """Add ``seconds`` to the grant's TTL (``replace``: set it), as the
        blocking ``extend``."""
        await self._call(_h.hilock_async_extend, seconds_to_ms(seconds, "extension"),
                         int(bool(replace)))

    async def renew(self) -> None:
        """Move the grant's expiry to now + ``ttl``."""
        await self._call(_h.hilock_async_renew)

    @property
    def name(self) -> Any:
        return self._sync.name

    @property
    def validity(self) -> float:
        return float(self._sync.validity)

    @property
    def lost(self) -> bool:
        return bool(self._sync.lost)

    @property
    def key(self) -> bytes:
        return bytes(self._sync.key)

    async def __aenter__(self: _H) -> _H:
        if not await self.acquire():
            raise LockTimeout(f"could not acquire {self._sync.name!r} within "
                              f"{self._sync.timeout} s")
        self._entered()
        return self

    def _entered(self) -> None:
        """An ``async with`` block begins on the current task's grant."""
        if self._withs is None:
            self._withs = weakref.WeakKeyDictionary()
        task = _task()
        entry = self._withs.setdefault(task, [0])
        entry.append(entry[0])
        if self._cancel_on_loss:
            self._watch(task)

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        withs, task = self._withs, _task()
        # First, before any wait: a loss from now on cancels nothing.
        watch = self._unwatch(task) if self._watches else None
        lost_cancel = (watch is not None and watch.cancelled
                       and _cancel_was_ours(task, exc_type))
        if lost_cancel:
            # The loss's own cancellation ended (or interrupted) the body:
            # the block ends with LockLost, as a loss found at its end does.
            exc_type = None
        entry = withs.get(task) if withs is not None else None
        released_in_body = False
        if withs is not None and entry is not None:
            # The body released the lock itself (a release() in it succeeded).
            released_in_body = entry[0] > entry.pop()
            if len(entry) == 1:
                del withs[task]  # the task's outermost block
        lost = self.lost or lost_cancel  # (a lapse is not reported lost)
        try:
            await self.release()
        except LockError as e:
            raise_on_leaving(self._sync.name, e, exc_type is not None, lost, released_in_body)
        else:
            raise_on_leaving(self._sync.name, None, exc_type is not None, lost, released_in_body)

    def __repr__(self) -> str:
        return (f"<hilock.asyncio.{type(self).__name__} {self._sync.name!r} "
                f"validity={self.validity:.3f}s>")


_H = TypeVar("_H", bound=_Hold)


class Lock(_Hold):
    """An exclusive lock for asyncio (see :class:`hilock.Lock`). One object
    is one holder: tasks that acquire the same object take turns at it
    first, in the order they came, within their timeout; other objects
    contend through Redis."""

    _sync: ExclusiveBase

    def __init__(self, client: _Runs, sync: ExclusiveBase, cancel_on_loss: bool = False) -> None:
        super().__init__(client, sync, cancel_on_loss)
        self._turns = _Turns()
        self._granted = False  # the task that has the turn was granted

    async def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """As :meth:`hilock.Lock.acquire`, without blocking the loop: True
        once granted, False when ``timeout`` passed."""
        wait_ms = _wait_ms(blocking, timeout, self._sync.timeout)
        turns = self._turns
        if self._granted and self._sync.validity <= 0:
            # The grant lapsed or was lost: the object holds nothing.
            self._granted = False
            turns.give()
        if not turns.held:
            turns.held = True  # take()'s first case, with no coroutine
        else:
            start = time.monotonic()
            if not await turns.take(wait_ms):
                return False
            if wait_ms > 0:
                # A wait for the turn (another task of this object's had
                # it) comes out of the same timeout: it bounds the whole
                # call.
                wait_ms = max(0, wait_ms - int((time.monotonic() - start) * 1000))
        try:
            self._before_run()
            status, message, _ = await self._client._run(_h.hilock_async_acquire,
                                                      self._sync._h, 0, wait_ms, cancel=True)
        except BaseException:
            turns.give()
            raise
        if status != _h.HILOCK_OK:
            turns.give()
        else:
            self._granted = True
        return _outcome(status, message)

    def _before_run(self) -> None:
        """With the object's turn, before its acquire runs (a family's
        setting for the attempt)."""

    async def release(self) -> None:
        """As :meth:`hilock.Lock.release`; a cancelled caller still lets it
        finish."""
        if not self._turns.held or not self._sync.token:
            raise LockNotOwnedError("release: this lock object does not hold the lock",
                                    _h.HILOCK_ENOTOWNED)
        # No task takes the turn while the release runs (the validity reads
        # 0 meanwhile): this one gives it up after.
        granted, self._granted = self._granted, False
        try:
            status, message, _ = await self._client._run(_h.hilock_async_release,
                                                      self._sync._h, 0, cancel=False)
        except BaseException:
            self._granted = granted
            raise
        if status == _h.HILOCK_OK or status == _h.HILOCK_ENOTOWNED:
            self._turns.give()
        else:
            self._granted = granted
        if status < 0:
            raise error_for(status, message)
        self._released()

    def export(self) -> str:
        """Hand the grant over, as :meth:`hilock.Lock.export` (local: no
        round trip): :meth:`Client.adopt` elsewhere takes it, and this
        object holds nothing any more. The text is a secret."""
        if not self._turns.held or not self._sync.token:
            raise LockNotOwnedError("export: this lock object does not hold the lock",
                                    _h.HILOCK_ENOTOWNED)
        text = self._sync._c_export(self._sync._h)
        self._granted = False
        self._turns.give()
        return text

    @property
    def fence(self) -> Optional[int]:
        return self._sync.fence

    @property
    def token(self) -> Optional[str]:
        return self._sync.token


class FairLock(Lock):
    """A fair (FIFO) lock for asyncio (see :class:`hilock.FairLock`)."""

    _sync: _SyncFairLock

    @property
    def ticket(self) -> Optional[int]:
        """The place in line of the current or last request."""
        return self._sync.ticket


class SequentialLock(Lock):
    """A sequential lock for asyncio (see :class:`hilock.SequentialLock`)."""

    _sync: _SyncSequentialLock

    @property
    def sequence(self) -> Optional[int]:
        """The sequence number of the current or last request."""
        return self._sync.sequence


class MultiLock(Lock):
    """A multi-key lock for asyncio (see :class:`hilock.MultiLock`)."""

    _sync: _SyncMultiLock

    @property
    def names(self) -> Tuple[Name, ...]:
        return self._sync.names

    @property
    def fence(self) -> Optional[Dict[Name, int]]:  # type: ignore[override]
        """One fencing token per name of the current or last grant."""
        return self._sync.fence


class SegmentedLock(Lock):
    """A segmented lock for asyncio (see :class:`hilock.SegmentedLock`)."""

    _sync: _SyncSegmentedLock

    @property
    def segment(self) -> Optional[int]:
        """The segment held (None: none)."""
        return self._sync.segment

    @property
    def segments(self) -> int:
        return self._sync.segments


class Semaphore(_Hold):
    """A counting semaphore for asyncio (see :class:`hilock.Semaphore`):
    each acquire takes one permit, which belongs to the task that acquired
    it; release gives back that task's latest permit."""

    _sync: _SyncSemaphore

    def __init__(self, client: Client, sync: _SyncSemaphore, cancel_on_loss: bool = False) -> None:
        super().__init__(client, sync, cancel_on_loss)
        self._held: weakref.WeakKeyDictionary[asyncio.Task[Any], List[Any]] = (
            weakref.WeakKeyDictionary())

    def _held_by(self, task: asyncio.Task[Any]) -> Any:
        return self._held[task][-1]  # the permit the block took

    def _lost_now(self, what: Any) -> bool:
        return bool(_h.hilock_hold_lost(what))

    def _validity_ms(self, what: Any) -> float:
        return float(_h.hilock_hold_validity_ms(what))

    async def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take one permit: True once granted, False when ``timeout``
        passed."""
        wait_ms = _wait_ms(blocking, timeout, self._sync.timeout)
        task = _task()
        h = self._sync._take_handle()  # one C handle per permit held
        try:
            status, message, _ = await self._client._run(_h.hilock_async_acquire, h, 0, wait_ms,
                                                      cancel=True)
        except BaseException:
            self._sync._put_handle(h)  # a raced grant was released
            raise
        if status == _h.HILOCK_OK:
            self._held.setdefault(task, []).append(h)
        else:
            self._sync._put_handle(h)
        return _outcome(status, message)

    async def release(self) -> None:
        """Give the current task's latest permit back. Raises
        LockNotOwnedError if it holds none here, or it expired or was
        lost."""
        held = self._held.get(_task())
        if not held:
            raise LockNotOwnedError("release: the current task holds no permit of "
                                    f"semaphore {self._sync.name!r}", _h.HILOCK_ENOTOWNED)
        h = held[-1]
        status, message, _ = await self._client._run(_h.hilock_async_release, h, 0,
                                                  cancel=False)
        if status == _h.HILOCK_OK or status == _h.HILOCK_ENOTOWNED:
            held.pop()
            self._sync._put_handle(h)
        if status < 0:
            raise error_for(status, message)
        self._released()

    def _call_target(self) -> Tuple[Any, int]:
        held = self._held.get(_task())
        if not held:
            raise LockNotOwnedError("the current task holds no permit of semaphore "
                                    f"{self._sync.name!r}", _h.HILOCK_ENOTOWNED)
        return held[-1], 0

    def export(self) -> str:
        """Hand the current task's latest permit over (see
        :meth:`Lock.export`)."""
        held = self._held.get(_task())
        if not held:
            raise LockNotOwnedError("export: the current task holds no permit of "
                                    f"semaphore {self._sync.name!r}", _h.HILOCK_ENOTOWNED)
        h = held[-1]
        text = self._sync._c_export(h)
        held.pop()
        self._sync._put_handle(h)
        return text

    def held_count(self) -> int:
        """Permits the current task holds on this object (no round trip)."""
        return len(self._held.get(_task(), []))

    @property
    def lost(self) -> bool:
        """Whether the current task's latest permit was lost."""
        task = asyncio.current_task()
        held = self._held.get(task) if task is not None else None
        return held is not None and len(held) > 0 and bool(_h.hilock_hold_lost(held[-1]))


class _TaskOwned(_Hold):
    """A lock whose owner is the current task (the thread, in the blocking
    API): a task that holds it may acquire it again, and releases as
    often."""

    _acquire_start: Any = _h.hilock_async_acquire
    _release_start: Any = _h.hilock_async_release

    def export(self) -> str:
        """Refused: the owner is the task (the thread, in the blocking API),
        not a token. Raises :class:`hilock.NotTransferable` (a ValueError)."""
        return str(self._sync.export())

    async def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """True once the current task holds it (again), False when
        ``timeout`` passed."""
        wait_ms = _wait_ms(blocking, timeout, self._sync.timeout)
        status, message, _ = await self._client._run(type(self)._acquire_start,
                                                     self._sync._h, _task_owner(), wait_ms,
                                                     cancel=True)
        return _outcome(status, message)

    async def release(self) -> None:
        """Leave once; the last release frees it. Raises LockNotOwnedError
        if the current task does not hold it."""
        status, message, _ = await self._client._run(type(self)._release_start,
                                                     self._sync._h, _task_owner(),
                                                     cancel=False)
        if status < 0:
            raise error_for(status, message)
        self._released()

    def _call_target(self) -> Tuple[Any, int]:
        return self._sync._h, _task_owner()

    @property
    def fence(self) -> Optional[int]:
        fence: Optional[int] = self._sync.fence
        return fence


class RLock(_TaskOwned):
    """A reentrant lock for asyncio (see :class:`hilock.RLock`): the owner is
    the current task. One object may be shared by the tasks of its loop."""

    _sync: _SyncRLock


class ReadLock(_TaskOwned):
    """The shared side of a read-write lock (see :class:`hilock.RWLock`)."""

    _acquire_start = _h.hilock_async_read_acquire
    _release_start = _h.hilock_async_read_release

    # Each owner has a read hold of its own: a block watches its task's,
    # and lost and validity read the current task's.
    def _held_by(self, task: asyncio.Task[Any]) -> Any:
        return _owners[task]

    def _own(self) -> Optional[int]:
        task = asyncio.current_task()
        return _owners.get(task) if task is not None else None

    @property
    def lost(self) -> bool:
        """Whether the current task's read hold was found lost."""
        owner = self._own()
        return owner is not None and self._lost_now(owner)

    @property
    def validity(self) -> float:
        """Seconds of validity left for the current task's read hold."""
        owner = self._own()
        return 0.0 if owner is None else self._validity_ms(owner) / 1000.0

    def _lost_now(self, what: Any) -> bool:
        return bool(self._as_owner(what, _h.hilock_rwlock_read_lost))

    def _validity_ms(self, what: Any) -> float:
        return float(self._as_owner(what, _h.hilock_rwlock_read_validity_ms))

    def _as_owner(self, owner: int, fn: Callable[[Any], Any]) -> Any:
        """fn(handle) for the read hold of the task whose owner number is
        owner (the C layer takes task owners as negative callers)."""
        _h.py_set_caller(-owner)
        try:
            return fn(self._sync._h)
        finally:
            _h.py_set_caller(0)


class WriteLock(_TaskOwned):
    """The exclusive side of a read-write lock (see :class:`hilock.RWLock`)."""


_R = TypeVar("_R", bound=_Hold)
_W = TypeVar("_W", bound=_Hold)


class _Sides(Uncopyable, Generic[_R, _W]):
    """A read-write lock's two sides, made once."""

    def __init__(self, sync: Any, read: _R, write: _W) -> None:
        self._sync = sync
        self._read = read
        self._write = write

    def read(self) -> _R:
        """The shared side (the same object on every call)."""
        return self._read

    def write(self) -> _W:
        """The exclusive side (the same object on every call)."""
        return self._write

    @property
    def name(self) -> Name:
        return self._sync.name  # type: ignore[no-any-return]


class RWLock(_Sides[ReadLock, WriteLock]):
    """A read-write lock for asyncio (see :class:`hilock.RWLock`): the
    owner of each side is the current task, and both sides are
    reentrant."""

    def __init__(self, client: Client, sync: _SyncRWLock, cancel_on_loss: bool = False) -> None:
        super().__init__(sync, ReadLock(client, sync.read(), cancel_on_loss),
                         WriteLock(client, sync.write(), cancel_on_loss))


class RedissonRWLock(_Sides[RLock, RLock]):
    """Redisson's RReadWriteLock for asyncio (see
    :class:`hilock.RedissonRWLock`): each side is a task-owned
    :class:`RLock`."""

    def __init__(self, client: Client, sync: _SyncRedissonRWLock,
                 cancel_on_loss: bool = False) -> None:
        super().__init__(sync, RLock(client, sync.read(), cancel_on_loss),
                         RLock(client, sync.write(), cancel_on_loss))


class Election(Lock):
    """A leader election for asyncio (see :class:`hilock.Election`): a
    campaign is owned by the task that awaits it; a cancelled campaign
    leaves nothing behind (its attempt's grant, if any, is given back)."""

    _sync: _SyncElection

    def __init__(self, client: _Runs, sync: _SyncElection, cancel_on_loss: bool = False) -> None:
        super().__init__(client, sync, cancel_on_loss)
        self._values: weakref.WeakKeyDictionary[asyncio.Task[Any], bytes] = (
            weakref.WeakKeyDictionary())

    def _before_run(self) -> None:
        # With the object's turn: this task's campaign is the one that runs.
        _h.hilock_election_set_value(self._sync._h, self._values.get(_task(), b""))

    async def campaign(self, value: Union[str, bytes] = b"",
                       timeout: Optional[float] = None) -> Leadership:
        """As :meth:`hilock.Election.campaign`, without blocking the loop:
        the :class:`Leadership` once this task leads; raises
        :class:`hilock.LockTimeout` when ``timeout`` runs out."""
        data = value_bytes(value)
        if len(data) > _h.HILOCK_ELECTION_VALUE_MAX:
            raise InvalidArgument(f"the value has {len(data)} bytes; the limit is "
                                  f"{_h.HILOCK_ELECTION_VALUE_MAX}")
        wait = self._sync.timeout if timeout is None else wait_seconds(timeout)
        self._values[_task()] = data
        if not await self.acquire(timeout=-1 if wait is None else wait):
            raise LockTimeout(f"did not lead {self._sync.name!r} within {wait} s")
        return Leadership(self, value_of(data))

    async def leader(self) -> Optional[Tuple[Value, int]]:
        """As :meth:`hilock.Election.leader`, on the loop's default executor."""
        return await asyncio.get_running_loop().run_in_executor(None, self._sync.leader)

    async def observe(self, timeout: Optional[float] = None) -> AsyncIterator[Tuple[Value, int]]:
        """As :meth:`hilock.Election.observe`, for ``async for``: each wait
        runs on the loop's default executor in steps of at most a second,
        so a cancelled iteration leaves no thread waiting long."""
        wait = wait_seconds(timeout)
        loop = asyncio.get_running_loop()
        reader = _Observer(self._sync._reader())
        try:
            while True:
                start = time.monotonic()
                fence = 0
                while not fence:
                    left = None if wait is None else wait - (time.monotonic() - start)
                    if left is not None and left <= 0:
                        return
                    step = 1000 if left is None else max(1, min(1000, int(left * 1000)))
                    fence = await loop.run_in_executor(None, reader.step, step)
                yield value_of(_h.hilock_election_value(reader.h)), fence
        finally:
            reader.close()


class _Observer:
    """An observing C handle whose steps run on executor threads: a step
    that outlives a cancelled iteration (an executor thread cannot be
    interrupted) frees the handle when it returns, never under it."""

    def __init__(self, h: Any) -> None:
        self.h = h
        self._lock = threading.Lock()
        self._running = False
        self._closed = False

    def step(self, ms: int) -> int:
        with self._lock:
            if self._closed:
                return 0
            self._running = True
        try:
            return int(_h.hilock_election_observe(self.h, ms))
        finally:
            self._stepped()

    def _stepped(self) -> None:
        with self._lock:
            self._running = False
            if self._closed:  # the iteration ended meanwhile
                self._free()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if not self._running:
                self._free()

    def _free(self) -> None:
        h, self.h = self.h, None
        if h is not None:
            _h.hilock_hold_free(h)


class Leadership(_Lead):
    """The lead of one :meth:`Election.campaign` for asyncio: ``async with``
    resigns at the block's end and raises :class:`hilock.LockLost` there
    if the lead was lost (see :class:`hilock.Leadership`)."""

    _election: Election

    def _sync(self) -> _SyncElection:
        return self._election._sync

    @property
    def election(self) -> Election:
        return self._election

    async def proclaim(self, value: Union[str, bytes]) -> None:
        """As :meth:`hilock.Leadership.proclaim`, on the loop's default
        executor."""
        data = value_bytes(value)
        await asyncio.get_running_loop().run_in_executor(
            None, _h.hilock_election_proclaim, self._election._sync._h, data)
        self._value = value_of(data)

    async def resign(self) -> None:
        """Give the lead up (the election's release)."""
        await self._election.release()

    async def __aenter__(self) -> Leadership:
        self._election._entered()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self._election.__aexit__(exc_type, exc, tb)


class Latch(Uncopyable):
    """A countdown latch for asyncio (see :class:`hilock.Latch`): each call
    runs on the loop's default executor; a wait in steps of at most a
    second, so a cancelled wait leaves no thread waiting long."""

    def __init__(self, client: Client, sync: _SyncLatch) -> None:
        self._client = client
        self._sync = sync

    def __repr__(self) -> str:
        return f"<hilock.asyncio.Latch {self._sync.name!r}>"

    @property
    def name(self) -> Name:
        return self._sync.name

    async def _off_loop(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def count(self) -> int:
        """The count left (:attr:`hilock.Latch.count`)."""
        return await self._off_loop(lambda: self._sync.count)

    async def broken(self) -> bool:
        """Whether the latch is broken (:attr:`hilock.Latch.broken`)."""
        return await self._off_loop(lambda: self._sync.broken)

    async def count_down(self) -> None:
        """As :meth:`hilock.Latch.count_down`."""
        await self._off_loop(self._sync.count_down)

    async def wait(self, timeout: Optional[float] = None) -> bool:
        """As :meth:`hilock.Latch.wait`, without blocking the loop: True
        once the count is 0, False when ``timeout`` passed first; raises
        :class:`hilock.BrokenBarrier` if the latch is or becomes broken.
        Each step looks at the latch once and sleeps until a message (or
        the earliest party's lease end) for at most a second."""
        wait = wait_seconds(timeout)
        start = time.monotonic()
        while True:
            left_ms = None if wait is None else math.ceil(
                (wait - (time.monotonic() - start)) * 1000)
            step = 1000 if left_ms is None else max(0, min(1000, left_ms))
            if await self._off_loop(self._sync.wait, step / 1000):
                return True
            if left_ms is not None and left_ms <= step:
                return False

    def join(self, *, auto_renew: bool = True) -> LatchParty:
        """Register a party (:meth:`hilock.Latch.join`): ``await
        latch.join()`` or ``async with latch.join() as party``. A join
        cancelled while it runs breaks the latch once it is through (a
        party that will not do its part)."""
        return LatchParty(self, auto_renew)

    async def abort(self) -> None:
        """As :meth:`hilock.Latch.abort`."""
        await self._off_loop(self._sync.abort)

    async def delete(self) -> None:
        """As :meth:`hilock.Latch.delete`."""
        await self._off_loop(self._sync.delete)


def _give_up(party: _SyncLatchParty) -> None:
    """A party whose join's caller was cancelled gives up (on a thread of
    its own: a round trip)."""

    def give_up() -> None:
        try:
            party.abort()
        except LockError:
            pass

    threading.Thread(target=give_up, daemon=True).start()


class LatchParty(Uncopyable):
    """A registered party of an asyncio :class:`Latch`: ``async with``
    counts down when the block ends normally and breaks the latch when it
    ends with an exception, cancellation included (see
    :class:`hilock.LatchParty`)."""

    def __init__(self, latch: Latch, auto_renew: bool = True) -> None:
        self._latch = latch
        self._auto_renew = auto_renew
        self._sync: Optional[_SyncLatchParty] = None

    def _party(self) -> _SyncLatchParty:
        if self._sync is None:
            raise LockNotOwnedError("this party has not joined: await it or use async with",
                                    _h.HILOCK_ENOTOWNED)
        return self._sync

    async def _join(self) -> LatchParty:
        if self._sync is None:
            sync, auto_renew = self._latch._sync, self._auto_renew
            # Whether the caller was cancelled, and the party once joined:
            # whichever comes second gives the party up (on the executor's
            # thread or the caller's, not through the loop, which may be
            # closing or blocked by then).
            lock = threading.Lock()
            state: Dict[str, Any] = {"cancelled": False, "party": None}

            def join() -> _SyncLatchParty:
                party = sync.join(auto_renew=auto_renew)
                with lock:
                    state["party"] = party
                    cancelled = state["cancelled"]
                if cancelled:
                    _give_up(party)
                return party

            fut = asyncio.get_running_loop().run_in_executor(None, join)
            try:
                self._sync = await asyncio.shield(fut)
            except asyncio.CancelledError:
                with lock:
                    state["cancelled"] = True
                    party = state["party"]
                if party is not None:
                    _give_up(party)
                raise
        return self

    def __await__(self) -> Generator[Any, None, LatchParty]:
        return self._join().__await__()

    @property
    def latch(self) -> Latch:
        return self._latch

    @property
    def lost(self) -> bool:
        """As :attr:`hilock.LatchParty.lost`."""
        return self._party().lost

    @property
    def validity(self) -> float:
        """As :attr:`hilock.LatchParty.validity`."""
        return self._party().validity

    async def count_down(self) -> None:
        """As :meth:`hilock.LatchParty.count_down`."""
        await self._latch._off_loop(self._party().count_down)

    async def abort(self) -> None:
        """As :meth:`hilock.LatchParty.abort`."""
        await self._latch._off_loop(self._party().abort)

    async def __aenter__(self) -> LatchParty:
        return await self._join()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        party = self._party()
        await self._latch._off_loop(party.__exit__, exc_type, exc, tb)


class Redlock(Lock):
    """Redlock for asyncio (see :class:`hilock.Redlock`): a lock held on a
    majority of N independent masters. Takes the arguments of
    :class:`hilock.Redlock` (``connect=False`` by default here: making one
    sends nothing, the first operation reaches the nodes); a waiting acquire
    tries again after the retry delay, as the blocking one does, on a runner
    its event loop's Redlocks share. ``cancel_on_loss``: as for
    :meth:`Client.lock`."""

    _sync: _SyncRedlock

    def __init__(self, urls: Iterable[str], name: Name, ttl: float = 30.0,
                 timeout: Optional[float] = None, *, cancel_on_loss: bool = False,
                 **options: Any) -> None:
        options.setdefault("connect", False)  # the first operation connects
        super().__init__(_RedlockRuns(), _SyncRedlock(urls, name, ttl, timeout, **options),
                         cancel_on_loss)

    def stats(self) -> Dict[str, Any]:
        """This Redlock's own counters, as :meth:`hilock.Redlock.stats`."""
        return self._sync.stats()


async def _stoppable(fn: Callable[[], _T]) -> _T:
    """fn() on an executor thread whose waits end (HILOCK_EINTR) within
    about 100 ms once the awaiting task is cancelled: the cancellation
    waits for the thread to return (a barrier's wait breaks the barrier on
    its way out, as an interrupted wait does), then goes on."""
    stop: List[int] = []

    def run() -> _T:
        _h.py_set_stop(stop)
        try:
            return fn()
        finally:
            _h.py_set_stop(None)

    fut = _off_loop(run)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        stop.append(1)
        try:
            await _settle(fut)
        except Exception:  # noqa: BLE001 - the wait's end (interrupted) is not news
            pass
        raise


class _Party(Uncopyable):
    """What the asyncio barriers share: the blocking object's reads and
    verbs on the loop's default executor."""

    def __init__(self, client: Client, sync: Any) -> None:
        self._client = client
        self._sync = sync

    @property
    def name(self) -> Name:
        return self._sync.name  # type: ignore[no-any-return]

    @property
    def parties(self) -> int:
        return self._sync.parties  # type: ignore[no-any-return]

    async def broken(self) -> bool:
        """Whether the barrier is broken (one round trip)."""
        return bool(await _off_loop(lambda: self._sync.broken))

    async def abort(self) -> None:
        """As :meth:`hilock.Barrier.abort`."""
        await _off_loop(self._sync.abort)

    async def reset(self) -> None:
        """As :meth:`hilock.Barrier.reset`."""
        await _off_loop(self._sync.reset)

    async def delete(self) -> bool:
        """As :meth:`hilock.Barrier.delete`."""
        return bool(await _off_loop(self._sync.delete))

    def __repr__(self) -> str:
        return f"<hilock.asyncio.{type(self).__name__} {self.name!r} parties={self.parties}>"


class Barrier(_Party):
    """A barrier for asyncio (see :class:`hilock.Barrier`): ``await
    wait()`` runs the blocking wait on the loop's default executor; a
    cancelled wait ends that thread's wait within about 100 ms and breaks
    the barrier for the other parties (as an interrupted wait does)."""

    _sync: _SyncBarrier

    async def wait(self, timeout: Optional[float] = None) -> int:
        """As :meth:`hilock.Barrier.wait`, without blocking the loop."""
        ms = _barrier_wait_ms(self._sync._wait(timeout))
        sync = self._sync
        return int(await _stoppable(
            lambda: sync._with_handle(lambda h: _h.hilock_barrier_wait(h, ms))))

    async def n_waiting(self) -> int:
        """As :attr:`hilock.Barrier.n_waiting`."""
        return await _off_loop(lambda: self._sync.n_waiting)


class DoubleBarrier(_Party):
    """A double barrier for asyncio (see :class:`hilock.DoubleBarrier`):
    ``async with await db.enter():``. A party is one :meth:`enter`'s
    :class:`Inside`; a cancelled enter withdraws its entry."""

    _sync: _SyncDoubleBarrier

    async def enter(self, timeout: Optional[float] = None) -> Inside:
        """As :meth:`hilock.DoubleBarrier.enter`, without blocking the loop."""
        sync = self._sync
        wait = sync._wait(timeout)

        def enter() -> _SyncInside:
            return _SyncInside(sync, sync._entered(wait))

        return Inside(self, await _stoppable(enter))

    async def n_inside(self) -> int:
        """As :attr:`hilock.DoubleBarrier.n_inside`."""
        return await _off_loop(lambda: self._sync.n_inside)


class Inside:
    """One party inside an asyncio :class:`DoubleBarrier` round: ``async
    with`` leaves at the block's end."""

    def __init__(self, barrier: DoubleBarrier, sync: _SyncInside) -> None:
        self._barrier = barrier
        self._sync = sync

    @property
    def barrier(self) -> DoubleBarrier:
        return self._barrier

    async def leave(self, timeout: Optional[float] = None) -> None:
        """As :meth:`hilock.DoubleBarrier.leave`, without blocking the loop."""
        sync = self._sync
        await _stoppable(lambda: sync.leave(timeout))

    async def __aenter__(self) -> Inside:
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if self._sync._h is not None:
            await self.leave()
