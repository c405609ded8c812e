"""The sequential lock (ZooKeeper's lock recipe on Redis)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from . import _hilock as _h
from ._base import ExclusiveBase, LostCallback
from ._util import Name, seconds_to_ms

if TYPE_CHECKING:
    from ._client import Client


class SequentialLock(ExclusiveBase):
    """An exclusive Redis lock in the manner of ZooKeeper's lock recipe, with
    the ``threading.Lock`` contract and a fencing token.

    Every ``acquire()`` creates an entry with the next sequence number of the
    lock (:attr:`sequence`), an "ephemeral sequential node" that lives only
    while its session does: the holder's for ``ttl`` after the grant or its
    last renewal, a waiter's for :attr:`heartbeat` seconds after its last
    re-check (it re-checks at least every third of that). The live entry with
    the lowest sequence number holds the lock.

    Each waiter watches its predecessor only (the live entry just below its
    own) through its own wake list: a release, a waiter giving up, or the
    purge of a dead entry wakes the successor of that entry and nobody else,
    so a release wakes exactly one process. A waiter also wakes when its
    predecessor's session would run out, so a crashed predecessor (SIGKILL)
    passes the turn within its session TTL. A waiter that times out or is
    interrupted removes its entry before ``acquire()`` returns.

    Ordering is between lock objects: threads sharing one object queue on a
    local mutex first. Not reentrant.
    """

    _c_acquire = _h.hilock_sequential_lock_acquire
    _c_release = _h.hilock_sequential_lock_release
    _kind_name = "sequential_lock"

    def __init__(self, client: Client, name: Name, ttl: float, timeout: Optional[float],
                 auto_renew: bool = True, max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[SequentialLock]] = None) -> None:
        super().__init__(client, name, timeout, auto_renew, max_hold, on_lost)
        self._setup(client._new(_h.hilock_sequential_lock_new, self._bname,
                                      seconds_to_ms(ttl, "ttl")))

    def locked(self) -> bool:
        """Whether a live contender holds the lock (one round trip). False
        between a release and the successor's grant."""
        return bool(_h.hilock_hold_locked(self._h))

    def owned(self) -> bool:
        """Whether this object's grant still holds the lock (one round trip)."""
        return bool(_h.hilock_hold_owned(self._h))

    def waiters(self) -> int:
        """How many live contenders wait behind the holder (one round trip)."""
        return int(_h.hilock_sequential_lock_waiters(self._h))

    def extend(self, seconds: float, replace: bool = False) -> None:
        """Add ``seconds`` to the holder's remaining session, or set it
        (``replace=True``), only while still owned. Raises
        LockNotOwnedError otherwise."""
        _h.hilock_sequential_lock_extend(self._h, seconds_to_ms(seconds, "extension"),
                                 1 if replace else 0)

    def renew(self) -> None:
        """Reset the holder's session to the lock's ``ttl``."""
        _h.hilock_sequential_lock_renew(self._h)

    @property
    def sequence(self) -> Optional[int]:
        """The sequence number of this object's entry: of the acquire in
        progress as soon as it is enqueued (readable from another thread),
        then of the current or last grant. Strictly increasing per lock
        name; None before the first entry."""
        return _h.hilock_sequential_lock_sequence(self._h) or None

    @property
    def heartbeat(self) -> float:
        """The heartbeat window: seconds a waiting entry lives without a
        re-check; it re-checks every third of that (the fair lock's
        ``heartbeat``). Defaults to ``ttl``, at most 5 s (at least
        0.5 s). Settable; applies from the next re-check."""
        return _h.hilock_sequential_lock_heartbeat_ms(self._h) / 1000.0

    @heartbeat.setter
    def heartbeat(self, seconds: float) -> None:
        _h.hilock_sequential_lock_set_heartbeat(self._h, seconds_to_ms(seconds, "heartbeat"))
