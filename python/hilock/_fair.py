"""The fair (FIFO) lock."""
from __future__ import annotations

from typing import Optional

from . import _hilock as _h
from ._base import QueuedBase


class FairLock(QueuedBase):
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

    _kind_name = "fair_lock"  # the C functions: hilock_fair_lock_*

    def locked(self) -> bool:
        """Whether anyone holds the lock (one round trip). False while the
        lock is free but reserved for the head of the queue."""
        return bool(_h.hilock_hold_locked(self._h))

    @property
    def ticket(self) -> Optional[int]:
        """The ticket of the current or last grant: its place in the request
        order (strictly increasing per lock name), or None before the first
        grant."""
        return _h.hilock_fair_lock_ticket(self._h) or None
