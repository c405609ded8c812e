"""The counting semaphore."""
from __future__ import annotations

import functools
import math
import os
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

from . import _green, _notify
from . import _hilock as _h
from ._base import LockBase, LostCallback
from ._util import Name, seconds_to_ms
from .errors import InvalidArgument, LockError, LockNotOwnedError

if TYPE_CHECKING:
    from ._client import Client

PERMITS_MAX = 1 << 31

# Every live Semaphore, so that a forked child can replace their pool
# mutexes (another thread of the parent may have held one at the fork).
_live: weakref.WeakSet[Semaphore] = weakref.WeakSet()


def _count(value: Any, what: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, not {type(value).__name__}")
    if not least <= value <= PERMITS_MAX:
        raise InvalidArgument(f"{what} must be {least}..{PERMITS_MAX}, got {value!r}")
    return value


class _ThreadPermits:
    """The permits one thread holds on one Semaphore. A thread that ends
    while holding some drops this object: their renewal stops, so they lapse
    at their TTL (as a collected lock's would) instead of being renewed for
    as long as the Semaphore lives."""

    __slots__ = ("held", "gone", "sem", "pid")

    def __init__(self, sem: Semaphore) -> None:
        self.held: List[Any] = []
        # The last release found its permit gone (a loss): ``lost`` says so
        # until the thread's next grant.
        self.gone = False
        self.sem = weakref.ref(sem)
        self.pid = os.getpid()

    def __del__(self) -> None:
        sem = self.sem()
        if not self.held or sem is None or self.pid != os.getpid():
            return
        with sem._mu:
            if not sem._handles:
                return  # the Semaphore was freed with its handles
            for h in self.held:
                try:
                    _h.py_set_auto_renew(h, 0, 0, 0)
                except LockError:
                    pass
        warnings.warn(f"a thread ended holding {len(self.held)} permit(s) of hilock semaphore "
                      f"{sem._name!r}; they are not released (they lapse at their TTL)",
                      ResourceWarning, stacklevel=2)


class Semaphore(LockBase):
    """A counting semaphore in Redis: at most ``limit`` holders at once,
    across every thread and process.

    Each ``acquire()`` takes one permit and each ``release()`` gives the
    calling thread's latest permit back. Every permit has an id of its own
    and an expiry on the server's clock, renewed by the watchdog while held
    (``auto_renew=True``), so a holder that dies frees its permit within
    ``ttl``: permits are never leaked.

    Threads: one object may be shared by threads, but unlike
    ``threading.Semaphore`` and ``threading.BoundedSemaphore`` a permit
    belongs to the thread that acquired it, as a ``threading.RLock``'s hold
    does. Only that thread can release it: ``release()`` gives back the
    calling thread's most recent permit, and raises ``LockNotOwnedError``
    (not ``ValueError``) in a thread that holds none here, even while other
    threads hold permits, which stay held. So a permit cannot be handed
    over, e.g. taken by a producer and released by a worker thread; give
    such a worker an object of its own and let it acquire. A thread that
    acquires twice holds two permits and releases twice. A thread that ends
    still holding permits stops renewing them: they lapse at their TTL
    (with a ``ResourceWarning``) and are not released.

    The limit: the first acquire stores ``permits`` as the semaphore's limit
    if none is stored yet; after that the stored limit wins over any other
    object's ``permits`` until an operator calls :meth:`set_limit`. Read it
    with :attr:`limit` and the free count with :meth:`available`.

    ``lost``, ``validity``, ``permit_id``, ``owned()`` and ``renew()`` refer
    to the calling thread's latest permit, and :meth:`held_count` counts the
    calling thread's permits. ``fence`` is always None: a semaphore admits
    several holders, so there is no exclusive grant to fence.
    """

    _c_acquire = _h.hilock_hold_acquire
    _c_release = _h.hilock_hold_release
    _kind_name = "semaphore"

    def __init__(self, client: Client, name: Name, permits: int, ttl: float,
                 timeout: Optional[float], auto_renew: bool = True,
                 max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[Semaphore]] = None) -> None:
        super().__init__(client, name, timeout, auto_renew, max_hold, on_lost)
        self._permits = _count(permits, "permits", 1)
        self._ttl_ms = seconds_to_ms(ttl, "ttl")
        self._mu = _green.RLock()  # real: a pool thread may give a handle back
        _live.add(self)
        self._tls = threading.local()
        self._handles: List[Any] = []  # every C handle, for __del__
        self._idle: List[Any] = []     # handles holding no permit
        # The first handle answers the queries (key, ttl, limit, available)
        # and is the first one lent out to acquire.
        self._setup(self._new_handle(configure=False))

    # -- handles: one per permit held -------------------------------------------

    def _new_handle(self, configure: bool = True) -> Any:
        h = self._client._new(_h.hilock_semaphore_new, self._bname, self._permits,
                                self._ttl_ms)
        self._handles.append(h)
        if configure and (self._auto_renew or self._on_lost is not None):
            _h.py_set_auto_renew(h, int(self._auto_renew), self._max_hold_ms,
                                 self._notify_id)
        return h

    def _setup(self, handle: Any) -> None:
        super()._setup(handle)
        self._idle.append(handle)

    def _take_handle(self) -> Any:
        with self._mu:
            if self._idle:
                return self._idle.pop()
            return self._new_handle()

    def _put_handle(self, h: Any) -> None:
        with self._mu:
            self._idle.append(h)

    def _held(self) -> List[Any]:
        mine = getattr(self._tls, "permits", None)
        if mine is None:
            mine = self._tls.permits = _ThreadPermits(self)
        return mine.held

    def _latest(self, verb: str) -> Tuple[List[Any], Any]:
        """The calling thread's permits and its latest one; LockNotOwnedError
        (the message starts with verb) if it holds none here."""
        mine = getattr(self._tls, "permits", None)
        held = mine.held if mine is not None else None
        if not held:
            raise LockNotOwnedError(f"{verb}: the calling thread holds no permit of "
                                    f"semaphore {self._name!r}", _h.HILOCK_ENOTOWNED)
        return held, held[-1]

    def _mine(self) -> Optional[Any]:
        mine = getattr(self._tls, "permits", None)
        return mine.held[-1] if mine is not None and mine.held else None

    def __del__(self) -> None:
        mu = getattr(self, "_mu", None)
        if mu is None:
            return
        with mu:
            handles, self._handles = self._handles, []
        self._h = None
        if not handles:
            return
        if self._notify_id:
            _notify.unregister(self._notify_id)
        if any(_h.hilock_hold_validity_ms(h) > 0 for h in handles):
            warnings.warn(f"hilock semaphore {self._name!r} collected while holding "
                          "permits; they are not released (they lapse at their TTL)",
                          ResourceWarning, stacklevel=2)
        for h in handles:
            _h.hilock_hold_free(h)

    def __repr__(self) -> str:
        return (f"<hilock.Semaphore {self._name!r} permits={self._permits} "
                f"held_here={self.held_count()}>")

    # -- acquire / release ------------------------------------------------------------

    def _acquire(self, wait: Optional[float]) -> bool:
        self._report_lapsed()
        h = self._take_handle()
        # Under gevent or eventlet a wait runs on a pool thread (_green.py).
        granted = _green.wait(functools.partial(self._attempt, h),
                              functools.partial(self._undo, h), wait)
        if granted:
            self._held().append(h)
            self._tls.permits.gone = False
        else:
            self._put_handle(h)
        return granted

    def _attempt(self, h: Any, wait: Optional[float]) -> bool:
        wait_ms = -1 if wait is None else math.ceil(wait * 1000)
        try:
            return bool(_h.hilock_hold_acquire(h, wait_ms) == _h.HILOCK_OK)
        except BaseException:
            # Ctrl-C (or any exception) racing the grant: never keep a
            # permit behind the caller's back.
            self._undo(h, _h.hilock_hold_validity_ms(h) > 0)
            raise

    def _undo(self, h: Any, granted: bool) -> None:
        """Give back the permit of a grant nobody takes, and the handle."""
        if granted:
            try:
                _h.hilock_hold_release(h)
            except LockError:
                pass
        self._put_handle(h)

    def release(self) -> None:
        """Give the calling thread's latest permit back and wake one waiter.

        Raises LockNotOwnedError if the thread holds no permit here, or if
        its permit expired or was lost (nothing of anyone else's changes).
        """
        held, h = self._latest("release")
        try:
            _h.hilock_hold_release(h)
        except LockNotOwnedError:
            # Expired, lost, or the parent's (ForkedLockError): gone either way.
            held.pop()
            self._put_handle(h)
            self._tls.permits.gone = True
            raise
        # Any other error leaves the permit held (and renewed) for a retry.
        held.pop()
        self._put_handle(h)

    def export(self) -> str:
        """Hand the calling thread's latest permit over (see
        :meth:`LockBase.export`): the thread holds it no more."""
        held, h = self._latest("export")
        text = self._c_export(h)
        held.pop()
        self._put_handle(h)
        return text

    def _adopted(self, handle: Any) -> None:
        """The adopted permit, held by the calling thread."""
        with self._mu:
            self._handles.append(handle)
        if self._auto_renew or self._on_lost is not None:
            _h.py_set_auto_renew(handle, int(self._auto_renew), self._max_hold_ms,
                                 self._notify_id)
        self._held().append(handle)
        self._tls.permits.gone = False

    def _report_lapsed(self) -> None:
        """Before a new grant: the calling thread's permits whose validity ran
        out unrenewed are asked for on the server (one round trip each), so
        that one gone is reported lost (``lost``, stats, the log) as renewal
        would report it. They count in held_count until released."""
        mine = getattr(self._tls, "permits", None)
        for h in mine.held if mine is not None else ():
            if _h.hilock_hold_validity_ms(h) <= 0 and not _h.hilock_hold_lost(h):
                try:
                    _h.hilock_hold_owned(h)
                except LockError:
                    pass  # unknown: the next acquire asks again

    def renew(self) -> None:
        """Move the calling thread's permit expiry to now + ``ttl`` (server
        clock), only while it is live. Raises LockNotOwnedError otherwise."""
        h = self._mine()
        if h is None:
            raise LockNotOwnedError("renew: the calling thread holds no permit",
                                    _h.HILOCK_ENOTOWNED)
        _h.hilock_hold_renew(h)

    # -- the calling thread's permit --------------------------------------------------

    def owned(self) -> bool:
        """Whether the calling thread holds a live permit (one round trip)."""
        h = self._mine()
        return h is not None and bool(_h.hilock_hold_owned(h))

    def held_count(self) -> int:
        """How many permits the calling thread holds on this object: the ones
        it acquired here and has not released yet. Kept locally per thread,
        no round trip; other threads' and other objects' permits are not
        counted (see :meth:`available` for the semaphore as a whole). A
        permit that lapsed or was lost counts until ``release()`` drops it."""
        mine = getattr(self._tls, "permits", None)
        return 0 if mine is None else len(mine.held)

    @property
    def permit_id(self) -> Optional[str]:
        """The id (32 hex chars) of the calling thread's latest permit, or
        None. It is the member of the ``hilock:{name}:permits`` set."""
        h = self._mine()
        if h is None:
            return None
        pid = _h.hilock_hold_token(h)
        return pid.decode() if pid else None

    @property
    def lost(self) -> bool:
        """True once renewal found the calling thread's permit lost, or its
        last release found its permit gone (until its next grant)."""
        h = self._mine()
        if h is not None and _h.hilock_hold_lost(h):
            return True
        mine = getattr(self._tls, "permits", None)
        return mine is not None and mine.gone

    @property
    def validity(self) -> float:
        """Seconds of validity left on the calling thread's permit (local
        estimate, no round trip); 0.0 if it holds none."""
        h = self._mine()
        return 0.0 if h is None else _h.hilock_hold_validity_ms(h) / 1000.0

    @property
    def fence(self) -> None:
        """Always None: permits are not exclusive, so there is nothing to fence."""
        return None

    # -- the semaphore as a whole -----------------------------------------------------

    @property
    def permits(self) -> int:
        """This object's permit count: the limit it stores if none is stored."""
        return self._permits

    def available(self) -> int:
        """Free permits now: max(0, limit - live permits) (one round trip)."""
        return int(_h.hilock_semaphore_available(self._h))

    def locked(self) -> bool:
        """Whether no permit is free, i.e. acquire() would block (one round trip)."""
        return self.available() == 0

    def get_limit(self) -> int:
        """The limit in force: the stored one, or ``permits`` if none is
        stored yet (one round trip)."""
        return int(_h.hilock_semaphore_limit(self._h)[0])

    def set_limit(self, limit: int) -> None:
        """Operator: store a new limit (0 closes the semaphore to new
        holders). Holders keep their permits; a lower limit takes effect as
        they release, a higher one wakes waiters at once."""
        _h.hilock_semaphore_set_limit(self._h, _count(limit, "limit", 0))

    @property
    def limit(self) -> int:
        """The limit in force (round trip); assigning it calls set_limit."""
        return self.get_limit()

    @limit.setter
    def limit(self, value: int) -> None:
        self.set_limit(value)


def _after_fork_in_child() -> None:
    for sem in list(_live):
        sem._mu = _green.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
