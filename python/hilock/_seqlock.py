"""The sequential lock (ZooKeeper's lock recipe on Redis)."""
from __future__ import annotations

from typing import Optional

from . import _hilock as _h
from ._base import QueuedBase


class SequentialLock(QueuedBase):
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

    _kind_name = "sequential_lock"  # the C functions: hilock_sequential_lock_*

    def locked(self) -> bool:
        """Whether a live contender holds the lock (one round trip). False
        between a release and the successor's grant."""
        return bool(_h.hilock_hold_locked(self._h))

    @property
    def sequence(self) -> Optional[int]:
        """The sequence number of this object's entry: of the acquire in
        progress as soon as it is enqueued (readable from another thread),
        then of the current or last grant. Strictly increasing per lock
        name; None before the first entry."""
        return _h.hilock_sequential_lock_sequence(self._h) or None
