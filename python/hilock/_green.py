"""hilock under gevent and eventlet.

Monkey-patching turns ``threading``'s threads, locks and thread-locals
into greenlets' and makes blocking calls give the hub a turn; hilock's C
calls give it none. So once gevent or eventlet has patched ``threading``
(whether hilock was imported before or after):

- hilock's own thread (the loss and log reader of _notify.py) is a real
  OS thread, started through the unpatched ``_thread``, and its locks are
  real ones;
- an acquire that may wait runs on a real thread (gevent: of a pool per
  hub; eventlet: one per wait) while the calling greenlet waits
  cooperatively, so the hub keeps running the thread's other greenlets;
  releases, one-shot acquires and queries are single round trips and run
  in place;
- the owner of a reentrant or read-write lock is the calling greenlet (a
  caller number of its own, passed to the C layer for each call), as a
  thread is without patching.
"""
from __future__ import annotations

import importlib
import itertools
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable, List, Optional, Tuple

from . import _hilock as _h


def _module(name: str) -> Any:
    """A module of gevent, eventlet or greenlet (they have no type hints)."""
    return importlib.import_module(name)


def _original(name: str) -> Any:
    """``_thread.<name>`` as it was before gevent or eventlet patched it."""
    gm = sys.modules.get("gevent.monkey")
    if gm is not None:
        return gm.get_original("_thread", name)
    ep = sys.modules.get("eventlet.patcher")
    if ep is not None:
        return getattr(ep.original("_thread"), name)
    import _thread
    return getattr(_thread, name)


_start_new_thread = _original("start_new_thread")
#: Real locks, whatever is patched: hilock's reader thread shares them.
allocate_lock: Callable[[], Any] = _original("allocate_lock")
RLock: Callable[[], Any] = _original("RLock")

_green = ""


def patched() -> str:
    """``"gevent"`` or ``"eventlet"`` once it has patched ``threading``,
    else ``""``."""
    global _green
    if not _green:
        gm = sys.modules.get("gevent.monkey")
        ep = sys.modules.get("eventlet.patcher")
        if gm is not None and gm.is_module_patched("threading"):
            _green = "gevent"
        elif ep is not None and ep.is_monkey_patched("thread"):
            _green = "eventlet"
    return _green


def start_thread(target: Callable[..., object], args: Tuple[Any, ...], name: str) -> None:
    """Start a real OS thread (a daemon: never joined) although
    ``threading`` is patched."""
    def run() -> None:
        try:
            threading.current_thread().name = name
        except Exception:  # only a name for logging's records
            pass
        target(*args)

    _start_new_thread(run, ())


# -- owners ------------------------------------------------------------------------

# The caller numbers of greenlets: below asyncio's task numbers, which the
# C layer takes as -1..-HILOCK_ASYNC_OWNER_MAX, and never a thread's id.
_OWNER_BASE = int(_h.HILOCK_ASYNC_OWNER_MAX) + 1
_owners: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_numbers = itertools.count(1)
# The greenlet a pool thread acquires for (its caller number).
_acting = _original("_local")()


def owner() -> int:
    """The caller number the C layer takes as the owner of a reentrant or
    read-write lock: 0 (the calling thread) unless gevent or eventlet has
    patched ``threading``, then the calling greenlet's own."""
    n: int = getattr(_acting, "n", 0)
    if n or not patched():
        return n
    g = _module("greenlet").getcurrent()
    n = _owners.get(g, 0)
    if not n:
        n = _owners[g] = -(_OWNER_BASE + next(_numbers))
    return n


def as_caller(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a C call on a lock owned by its caller) with the calling
    greenlet as the caller, under gevent or eventlet; else ``fn`` as is."""
    def call(*args: Any) -> Any:
        n = owner()
        if not n:
            return fn(*args)
        _h.py_set_caller(n)
        try:
            return fn(*args)
        finally:
            _h.py_set_caller(0)
    call.__name__ = getattr(fn, "__name__", "call")
    return call


# -- waits -------------------------------------------------------------------------

# Waits of one gevent hub that may run at once (one pool thread each; more
# wait for a free thread); an idle thread ends after _POOL_IDLE seconds.
POOL_MAX = 1024
_POOL_IDLE = 10.0


class _Job:
    """One acquire that may wait, run on a pool thread for a greenlet."""

    def __init__(self, attempt: Callable[[Optional[float]], bool],
                 undo: Callable[[bool], None], deadline: Optional[float], owner: int) -> None:
        self.attempt, self.undo = attempt, undo
        self.deadline, self.owner = deadline, owner
        self.mu = allocate_lock()
        # True once the greenlet is gone: the C layer's interrupt hook then
        # ends the wait (py_set_stop) within about 100 ms.
        self.stop: List[bool] = []
        self.state = "queued"  # then running, returned or raised; or dropped
        self.granted = False

    def __call__(self) -> bool:
        """On the pool thread."""
        with self.mu:
            self.state = "dropped" if self.stop else "running"
        if self.state == "dropped":
            self.undo(False)  # nobody waits: give back what the attempt took
            return False
        _acting.n = self.owner
        _h.py_set_stop(self.stop)
        state = "raised"
        try:
            left = None if self.deadline is None else max(0.0,
                                                          self.deadline - time.monotonic())
            self.granted = self.attempt(left)
            state = "returned"
            return self.granted
        except BaseException:
            if self.stop:
                return False  # the greenlet is gone: nobody is told
            raise
        finally:
            _h.py_set_stop(None)
            _acting.n = 0
            self.state = state

    def drop(self) -> None:
        """The job never reaches a pool thread."""
        with self.mu:
            self.stop.append(True)
            self.state = "dropped"
        self.undo(False)

    def abandon(self, sleep: Callable[[float], object]) -> None:
        """The greenlet was interrupted: end the wait, and once it has
        ended give back what it got (in this greenlet, so that the
        attempt's handle is free again when the interruption is raised)."""
        with self.mu:
            self.stop.append(True)
            if self.state in ("queued", "dropped"):
                return  # the pool thread drops it, if it ever runs it
        while self.state == "running":
            try:
                sleep(0.005)  # a short, bounded end: the hook's 100 ms
            except BaseException:  # a second interruption: the first is raised
                pass
        if self.state == "returned":
            self.undo(self.granted)


def _gevent_run(job: _Job) -> Optional[bool]:
    """job() on a thread of this hub's hilock pool; None if this thread
    has no running hub (nothing to keep running: block here)."""
    gevent = _module("gevent")
    try:
        hub = _module("gevent._hub_local").get_hub_if_exists()
    except (ImportError, AttributeError):  # another layout: take (or make) it
        hub = gevent.get_hub()
    if hub is None or gevent.getcurrent() is hub:
        return None
    pool: Any
    pid, pool = getattr(hub, "_hilock_pool", (0, None))
    if pid != os.getpid():  # none yet, or the parent's (its threads are gone)
        pool_class = _module("gevent.threadpool").ThreadPool
        try:
            pool = pool_class(POOL_MAX, hub, idle_task_timeout=_POOL_IDLE)
        except TypeError:  # gevent before 22.08: its threads stay
            pool = pool_class(POOL_MAX, hub)
        hub._hilock_pool = (os.getpid(), pool)
    try:
        result = pool.spawn(job)  # may wait for a free thread
    except BaseException:
        job.drop()
        raise
    return bool(result.get())


def _eventlet_run(job: _Job) -> Optional[bool]:
    """job() on a real thread of its own, while the greenthread waits for
    the byte the thread writes to a pipe when done (eventlet's tpool has 20
    threads: waits beyond would queue behind holders' own waits; and it
    has none in a forked child)."""
    rfd, wfd = os.pipe()
    out: List[Any] = []

    def run() -> None:
        try:
            out.append((True, job()))
        except BaseException as e:  # raised in the greenthread
            out.append((False, e))
        finally:
            try:
                os.write(wfd, b"x")
            except OSError:  # the greenthread is gone (interrupted)
                pass
            os.close(wfd)

    try:
        _start_new_thread(run, ())
    except BaseException:
        os.close(rfd)
        os.close(wfd)
        job.drop()
        raise
    try:
        _module("eventlet.hubs").trampoline(rfd, read=True)
    finally:
        os.close(rfd)
    ok, value = out[0]
    if not ok:
        raise value
    return bool(value)


def wait(attempt: Callable[[Optional[float]], bool], undo: Callable[[bool], None],
         seconds: Optional[float]) -> bool:
    """``attempt(left)``: an acquire that waits up to ``left`` seconds (None:
    no limit); True if granted. Under gevent or eventlet it runs on a pool
    thread, for the calling greenlet, while the greenlet waits
    cooperatively; ``seconds`` bounds the whole call, the wait for a pool
    thread included. If the greenlet is interrupted meanwhile (a
    ``gevent.Timeout``, a kill), the wait is ended and ``undo(granted)``
    gives back what the attempt got (a grant, and what the attempt used)
    before the interruption is raised; an attempt that has not started
    yet never starts, and ``undo(False)`` runs on the pool thread."""
    kind = patched()
    if not kind or seconds == 0:
        return attempt(seconds)
    deadline = None if seconds is None else time.monotonic() + seconds
    job = _Job(attempt, undo, deadline, owner())
    try:
        got = _gevent_run(job) if kind == "gevent" else _eventlet_run(job)
    except BaseException:
        job.abandon(_module(kind).sleep)
        raise
    return attempt(seconds) if got is None else got
