"""The sequential lock (ZooKeeper's lock recipe on Redis)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from . import _hilock as _h
from ._base import LostCallback, QueuedBase
from ._util import Name, delay_to_ms

if TYPE_CHECKING:
    from ._client import Client


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

    def __init__(self, client: Client, name: Name, ttl: float, timeout: Optional[float],
                 auto_renew: bool = True, max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[SequentialLock]] = None,
                 lock_delay: float = 0) -> None:
        delay_ms = delay_to_ms(lock_delay)
        super().__init__(client, name, ttl, timeout, auto_renew, max_hold, on_lost)
        self._set_delay(delay_ms)

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
