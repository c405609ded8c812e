"""The reentrant lock."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from . import _hilock as _h
from ._base import LockBase, LostCallback
from ._util import Compat, Name, check_compat, seconds_to_ms

if TYPE_CHECKING:
    from ._client import Client


class RLock(LockBase):
    """A reentrant Redis lock, like ``threading.RLock``.

    The owner is the calling thread (of this process's client): the thread
    that holds it may acquire it again without blocking and must release it
    as many times; every other thread and process blocks. Hold counts live
    in a Redis hash, so re-entry refreshes the TTL and operators can read
    them. One object may be shared by threads.

    asyncio: tasks of one event loop share one thread, so they count as one
    owner and would re-enter each other's hold. Give each task that needs
    mutual exclusion a non-reentrant :class:`hilock.Lock` object instead.

    ``compat="redisson"``: the same lock as Redisson's ``RLock`` of that
    name (Java services; see the "Sharing locks with Java" page): the key is
    the name as given, releases wake Redisson's waiters and Redisson's
    releases wake this lock's; ``fence`` is None.
    """

    _c_acquire = _h.hilock_rlock_acquire
    _c_release = _h.hilock_rlock_release
    _kind_name = "rlock"

    def __init__(self, client: Client, name: Name, ttl: float, timeout: Optional[float],
                 auto_renew: bool = True, max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[RLock]] = None,
                 compat: Optional[Compat] = None) -> None:
        super().__init__(client, name, timeout, auto_renew, max_hold, on_lost)
        new = _h.hilock_rlock_new_redisson if check_compat(compat) else _h.hilock_rlock_new
        self._setup(client._new(new, self._bname, seconds_to_ms(ttl, "ttl")))

    def release(self) -> None:
        """Leave once; the last release frees the lock and wakes a waiter.
        Raises LockNotOwnedError if the calling thread does not hold it
        (nothing changes)."""
        _h.hilock_rlock_release(self._h)

    def hold_count(self) -> int:
        """How many times the calling thread holds it (one round trip)."""
        return int(_h.hilock_rlock_hold_count(self._h))

    def owned(self) -> bool:
        """Whether the calling thread holds it (one round trip)."""
        return self.hold_count() > 0

    def locked(self) -> bool:
        """Whether anyone holds it (one round trip)."""
        return bool(_h.hilock_hold_locked(self._h))
