"""The fair (FIFO) lock."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from . import _hilock as _h
from ._base import ExclusiveBase, LostCallback
from ._util import Name, seconds_to_ms

if TYPE_CHECKING:
    from ._client import Client


class FairLock(ExclusiveBase):
    """An exclusive Redis lock granted in request order (first come, first
    served), with the ``threading.Lock`` contract and a fencing token.

    A blocking ``acquire()`` takes a ticket and joins the lock's queue; the
    lock goes to the live waiter with the lowest ticket. A newcomer never
    barges past the queue, not even with ``acquire(blocking=False)`` while
    the lock is momentarily free. A release wakes the head of the queue and
    nobody else.

    Waiters prove they are alive at least every ``heartbeat / 3`` seconds
    (judged on the Redis server's clock); a waiter that stops for a whole
    ``heartbeat`` (a crashed process) is skipped, while a live waiter keeps
    its place however long it waits. A waiter that times out or is
    interrupted leaves the queue before ``acquire()`` returns.

    Fairness is between lock objects: threads sharing one object queue on a
    local mutex first, as with :class:`hilock.Lock`. Not reentrant.
    """

    _c_acquire = _h.hilock_fair_lock_acquire
    _c_release = _h.hilock_fair_lock_release
    _kind_name = "fair_lock"

    def __init__(self, client: Client, name: Name, ttl: float, timeout: Optional[float],
                 auto_renew: bool = True, max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[FairLock]] = None) -> None:
        super().__init__(client, name, timeout, auto_renew, max_hold, on_lost)
        self._setup(client._new(_h.hilock_fair_lock_new, self._bname,
                                        seconds_to_ms(ttl, "ttl")))

    def locked(self) -> bool:
        """Whether anyone holds the lock (one round trip). False while the
        lock is free but reserved for the head of the queue."""
        return bool(_h.hilock_hold_locked(self._h))

    def owned(self) -> bool:
        """Whether this object's grant still holds the lock (one round trip)."""
        return bool(_h.hilock_hold_owned(self._h))

    def waiters(self) -> int:
        """How many waiters are queued with a live heartbeat (one round trip)."""
        return int(_h.hilock_fair_lock_waiters(self._h))

    def extend(self, seconds: float, replace: bool = False) -> None:
        """Add ``seconds`` to the remaining TTL, or set it (``replace=True``),
        only while still owned. Raises LockNotOwnedError otherwise."""
        _h.hilock_fair_lock_extend(self._h, seconds_to_ms(seconds, "extension"),
                                   1 if replace else 0)

    def renew(self) -> None:
        """Reset the TTL to the lock's ``ttl``."""
        _h.hilock_fair_lock_renew(self._h)

    @property
    def ticket(self) -> Optional[int]:
        """The ticket of the current or last grant: its place in the request
        order (strictly increasing per lock name), or None before the first
        grant."""
        return _h.hilock_fair_lock_ticket(self._h) or None

    @property
    def heartbeat(self) -> float:
        """Seconds a waiter may go silent before it is dropped from the
        queue; it re-checks every third of that. Defaults to ``ttl``, at
        most 5 s (at least 0.5 s). Settable; applies from the next
        re-check."""
        return _h.hilock_fair_lock_heartbeat_ms(self._h) / 1000.0

    @heartbeat.setter
    def heartbeat(self, seconds: float) -> None:
        _h.hilock_fair_lock_set_heartbeat(self._h, seconds_to_ms(seconds, "heartbeat"))
