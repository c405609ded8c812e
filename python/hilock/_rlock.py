"""The reentrant lock."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from . import _green
from . import _hilock as _h
from ._base import LockBase, LostCallback
from ._util import Compat, Name, check_compat, delay_to_ms, seconds_to_ms

if TYPE_CHECKING:
    from ._client import Client


class RLock(LockBase):
    """A reentrant Redis lock, like ``threading.RLock``.

    The owner is the calling thread (of this process's client): the thread
    that holds it may acquire it again without blocking and must release it
    as many times; every other thread and process blocks. Hold counts live
    in a Redis hash, so re-entry refreshes the TTL and operators can read
    them. One object may be shared by threads.

    gevent and eventlet: once they have patched ``threading``, the owner is
    the calling greenlet (docs: "Threads and fork").

    asyncio: tasks of one event loop share one thread, so they count as one
    owner and would re-enter each other's hold. Give each task that needs
    mutual exclusion a non-reentrant :class:`hilock.Lock` object instead.

    ``compat="redisson"``: the same lock as Redisson's ``RLock`` of that
    name (Java services; see the "Sharing locks with Java" page): the key is
    the name as given, releases wake Redisson's waiters and Redisson's
    releases wake this lock's; ``fence`` is None.

    ``lock_delay``: after a grant ends without its final release (the
    holder was killed or lost), the lock is granted to no one for that long
    (see :meth:`Client.rlock`).
    """

    # The owner is the caller: under gevent or eventlet, the greenlet.
    _c_acquire = _green.as_caller(_h.hilock_hold_acquire)
    _c_release = _green.as_caller(_h.hilock_hold_release)
    _c_hold_count = _green.as_caller(_h.hilock_rlock_hold_count)
    _kind_name = "rlock"

    def __init__(self, client: Client, name: Name, ttl: float, timeout: Optional[float],
                 auto_renew: bool = True, max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[RLock]] = None,
                 compat: Optional[Compat] = None, *, lock_delay: float = 0,
                 _side: Any = None) -> None:
        delay_ms = delay_to_ms(lock_delay)
        super().__init__(client, name, timeout, auto_renew, max_hold, on_lost)
        # _side: a side of Redisson's read-write lock (RedissonRWLock), or
        # Redisson's fair lock (client.fair_lock(name, compat="redisson")).
        new = (_side if _side is not None else
               _h.hilock_rlock_new_redisson if check_compat(compat) else _h.hilock_rlock_new)
        self._setup(client._new(new, self._bname, seconds_to_ms(ttl, "ttl")))
        self._set_delay(delay_ms)

    def release(self) -> None:
        """Leave once; the last release frees the lock and wakes a waiter.
        Raises LockNotOwnedError if the calling thread does not hold it
        (nothing changes)."""
        type(self)._c_release(self._h)

    def hold_count(self) -> int:
        """How many times the calling thread holds it (one round trip)."""
        return int(type(self)._c_hold_count(self._h))

    def owned(self) -> bool:
        """Whether the calling thread holds it (one round trip)."""
        return self.hold_count() > 0

    def locked(self) -> bool:
        """Whether anyone holds it (one round trip)."""
        return bool(_h.hilock_hold_locked(self._h))


class RedissonRWLock:
    """Redisson's ``RReadWriteLock`` of a name, shared with Java services
    (``client.rwlock(name, compat="redisson")``; see the "Sharing locks with
    Java" page).

    ``rw.read()`` and ``rw.write()`` give the two sides, each a reentrant
    :class:`RLock` (per thread; ``fence`` is None). Readers of both
    libraries share; a writer of either excludes every other owner. As in
    Redisson, a writer may also take the read side (a downgrade), a reader
    asking for the write side waits for itself, and readers may starve
    writers.
    """

    def __init__(self, client: Client, name: Name, ttl: float, timeout: Optional[float],
                 auto_renew: bool = True, max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[RLock]] = None) -> None:
        self._name = name
        self._read = RLock(client, name, ttl, timeout, auto_renew, max_hold, on_lost,
                           _side=_h.hilock_rlock_new_redisson_read)
        self._write = RLock(client, name, ttl, timeout, auto_renew, max_hold, on_lost,
                            _side=_h.hilock_rlock_new_redisson_write)

    def read(self) -> RLock:
        """The shared side (the same object on every call)."""
        return self._read

    def write(self) -> RLock:
        """The exclusive side (the same object on every call)."""
        return self._write

    def locked(self) -> bool:
        """Whether anyone holds it, in either mode (one round trip)."""
        return self._read.locked()

    @property
    def name(self) -> Name:
        return self._name

    def __repr__(self) -> str:
        return f"<hilock.RedissonRWLock {self._name!r}>"
