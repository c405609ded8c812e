"""The read-write lock."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Union

from . import _green, _notify
from . import _hilock as _h
from ._base import LockBase, LostCallback
from ._util import Name, Uncopyable, delay_to_ms, name_bytes, seconds_to_ms

if TYPE_CHECKING:
    from ._client import Client


class _Handle:
    """Owns the C handle shared by an RWLock's two sides; frees it when the
    last of them is gone."""

    def __init__(self, handle: Any) -> None:
        self.h = handle

    def __del__(self) -> None:
        h, self.h = getattr(self, "h", None), None
        if h is not None:
            _h.hilock_hold_free(h)


def _not_freed_here(handle: Any) -> None:
    """The sides do not free the shared handle (_Handle does)."""


def _no_fence(handle: Any) -> int:
    """Reads carry no fence."""
    return 0


def _read_key(handle: Any) -> bytes:
    return _h.hilock_rwlock_key(handle, 0)


def _write_key(handle: Any) -> bytes:
    return _h.hilock_rwlock_key(handle, 1)


class _Side(LockBase):
    """What both sides of an RWLock share."""

    _c_free = _not_freed_here
    _c_hold_count: ClassVar[Callable[[Any], int]]

    def __init__(self, owner: _Handle, client: Client, name: Name,
                 timeout: Optional[float], auto_renew: bool, max_hold: Optional[float],
                 on_lost: Optional[LostCallback[Any]]) -> None:
        super().__init__(client, name, timeout, auto_renew, max_hold, on_lost)
        self._owner = owner  # keeps the C handle alive as long as this side
        self._setup(owner.h)

    def __del__(self) -> None:
        # In a reference cycle the collector runs finalizers in any order:
        # the shared handle may already be freed (_Handle went first). Then
        # only the loss registration is left to drop.
        owner = getattr(self, "_owner", None)
        if owner is None or owner.h is None:
            self._h = None
            if getattr(self, "_notify_id", 0):
                _notify.unregister(self._notify_id)
            return
        super().__del__()

    def release(self) -> None:
        """Leave once. Raises LockNotOwnedError if the calling thread does
        not hold this side (nothing changes)."""
        type(self)._c_release(self._h)

    def hold_count(self) -> int:
        """How many times the calling thread holds this side (one round
        trip)."""
        return int(type(self)._c_hold_count(self._h))

    def owned(self) -> bool:
        """Whether the calling thread holds this side (one round trip)."""
        return self.hold_count() > 0


class ReadLock(_Side):
    """The shared side of an :class:`RWLock` (``rw.read()``).

    Any number of owners may hold it at once, unless a writer holds the lock
    or waits for it. The owner is the calling thread; re-acquiring counts
    up and never waits, even while a writer waits. Each owner's hold
    expires on its own ``ttl`` after its grant or last renewal, so a
    crashed reader frees its share within one TTL. Reads carry no fence.
    """

    # The owner is the caller: under gevent or eventlet, the greenlet.
    _c_acquire = _green.as_caller(_h.hilock_rwlock_read_acquire)
    _c_release = _green.as_caller(_h.hilock_rwlock_read_release)
    _c_set_renew = _h.py_rwlock_read_set_auto_renew
    _c_lost = _green.as_caller(_h.hilock_rwlock_read_lost)
    _c_validity = _green.as_caller(_h.hilock_rwlock_read_validity_ms)
    _c_hold_count = _green.as_caller(_h.hilock_rwlock_read_hold_count)
    _c_fence = _no_fence
    _c_key = _read_key
    _kind_name = "rwlock read side"

    def locked(self) -> bool:
        """Whether any reader holds it (one round trip)."""
        readers, _ = _h.hilock_rwlock_state(self._h)
        return readers > 0


class WriteLock(_Side):
    """The exclusive side of an :class:`RWLock` (``rw.write()``).

    One owner, the calling thread, at a time, and no readers meanwhile.
    Once it waits, new readers queue behind it. Re-acquiring by the owner
    counts up; asking for it while holding the read side raises
    :class:`hilock.DeadlockError` at once. Every grant carries ``fence``.
    """

    _c_acquire = _green.as_caller(_h.hilock_rwlock_write_acquire)
    _c_release = _green.as_caller(_h.hilock_rwlock_write_release)
    _c_hold_count = _green.as_caller(_h.hilock_rwlock_write_hold_count)
    _c_key = _write_key
    _kind_name = "rwlock write side"

    def locked(self) -> bool:
        """Whether a writer holds it (one round trip)."""
        _, writer = _h.hilock_rwlock_state(self._h)
        return bool(writer)


class RWLock(Uncopyable):
    """A Redis read-write lock: many readers or one writer.

    ``rw.read()`` and ``rw.write()`` return the two sides, each with the
    ``threading.Lock`` contract (``acquire``/``release``, ``with``)::

        rw = client.rwlock("catalog", ttl=30.0, timeout=5.0)
        with rw.read():
            ...                      # alongside other readers
        with rw.write() as w:
            store.save(fence=w.fence)

    The owner is the calling thread, as with :class:`hilock.RLock`, and both
    sides are reentrant. A writer holding the lock may take the read side
    and then release the write (a downgrade, with no gap in between); a
    reader asking for the write side gets :class:`hilock.DeadlockError`
    (an upgrade would wait for itself). Writers are preferred: once one
    waits, new readers queue behind it; readers that waited are admitted
    together at the next write release, so neither side starves the other.

    One object may be shared by threads; each thread is a separate owner
    (under gevent's or eventlet's patching, each greenlet). asyncio tasks
    of one event loop share a thread and so count as one owner.

    ``lock_delay`` applies to write grants: after one ends without its
    final release (the writer was killed or lost), neither writers nor
    readers are granted for that long, since the lost writer may still be
    writing. Read holds take no delay.
    """

    def __init__(self, client: Client, name: Name, ttl: float, timeout: Optional[float],
                 auto_renew: bool = True, max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[Union[ReadLock, WriteLock]]] = None,
                 lock_delay: float = 0) -> None:
        self._name = name
        delay_ms = delay_to_ms(lock_delay)
        owner = _Handle(client._new(_h.hilock_rwlock_new, name_bytes(name),
                                         seconds_to_ms(ttl, "ttl")))
        if delay_ms:
            _h.hilock_hold_set_lock_delay(owner.h, delay_ms)
        self._read = ReadLock(owner, client, name, timeout, auto_renew, max_hold, on_lost)
        self._write = WriteLock(owner, client, name, timeout, auto_renew, max_hold, on_lost)
        self._owner = owner

    def read(self) -> ReadLock:
        """The shared side (the same object on every call)."""
        return self._read

    def write(self) -> WriteLock:
        """The exclusive side (the same object on every call)."""
        return self._write

    def locked(self) -> bool:
        """Whether anyone holds it, in either mode (one round trip)."""
        return bool(_h.hilock_hold_locked(self._owner.h))

    @property
    def name(self) -> Name:
        return self._name

    @property
    def lock_delay(self) -> float:
        """Seconds after a write grant ends without its final release in
        which the lock is granted to no one, reader or writer; 0: none."""
        return float(_h.hilock_hold_lock_delay_ms(self._owner.h)) / 1000

    @property
    def ttl(self) -> float:
        """The TTL of every read and write hold, in seconds."""
        return _h.hilock_hold_ttl_ms(self._owner.h) / 1000.0

    @property
    def timeout(self) -> Optional[float]:
        """The default wait of ``acquire()`` and ``with`` (None: no limit)."""
        return self._read.timeout

    def __repr__(self) -> str:
        return f"<hilock.RWLock {self._name!r}>"
