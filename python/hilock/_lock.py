"""The exclusive lock family: expiring, simple and lease locks."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from . import _hilock as _h
from ._base import ExclusiveBase, LostCallback
from ._util import Name, delay_to_ms, seconds_to_ms

if TYPE_CHECKING:
    from ._client import Client

EXPIRING = _h.HILOCK_LOCK_EXPIRING
SIMPLE = _h.HILOCK_LOCK_SIMPLE
LEASE = _h.HILOCK_LOCK_LEASE
# redis-py's layout: the key is the name, holding the token (no fence).
REDIS_PY = _h.HILOCK_LOCK_REDIS_PY


class Lock(ExclusiveBase):
    """A Redis lock with the ``threading.Lock`` contract.

    Made by :meth:`Client.lock` (expiring), :meth:`Client.simple_lock` and
    :meth:`Client.lease`. One object stands for one holder: a second thread
    acquiring the same object blocks until the first releases it, as with
    ``threading.Lock``; other objects, in this or other processes, contend
    through Redis.
    """

    _c_acquire = _h.hilock_hold_acquire
    _c_release = _h.hilock_hold_release

    def __init__(self, client: Client, name: Name, kind: int, ttl: Optional[float],
                 timeout: Optional[float], auto_renew: bool = False,
                 max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[Lock]] = None,
                 lock_delay: float = 0) -> None:
        super().__init__(client, name, timeout, auto_renew and kind != SIMPLE and ttl is not None,
                         max_hold, on_lost)
        self._kind = kind
        self._kind_name = {EXPIRING: "lock", SIMPLE: "simple_lock", LEASE: "lease",
                           REDIS_PY: "lock"}[kind]
        # redis-py's layout takes None: no expiry (its timeout=None).
        ttl_ms = (0 if kind == SIMPLE or (kind == REDIS_PY and ttl is None)
                  else seconds_to_ms(ttl, "ttl"))  # type: ignore[arg-type]
        delay_ms = delay_to_ms(lock_delay)
        if kind == SIMPLE:
            self._setup(client._new(_h.hilock_lock_new_simple, self._bname))
        elif kind == REDIS_PY:
            self._setup(client._new(_h.hilock_lock_new_kind, self._bname, REDIS_PY, ttl_ms))
        else:
            new = _h.hilock_lock_new_lease if kind == LEASE else _h.hilock_lock_new
            self._setup(client._new(new, self._bname, ttl_ms))
        self._set_delay(delay_ms)

    def locked(self) -> bool:
        """Whether anyone holds the lock (one round trip)."""
        return bool(_h.hilock_hold_locked(self._h))

    def owned(self) -> bool:
        """Whether this object's grant still holds the lock (one round trip)."""
        return bool(_h.hilock_hold_owned(self._h))

    def extend(self, seconds: float, replace: bool = False) -> None:
        """Add ``seconds`` to the remaining TTL, or set it (``replace=True``),
        only while still owned; an expired lock is never re-created.
        Raises LockNotOwnedError, or UnsupportedError for a simple lock."""
        _h.hilock_hold_extend(self._h, seconds_to_ms(seconds, "extension"), 1 if replace else 0)

    def renew(self) -> None:
        """Reset the TTL to the lock's ``ttl`` (a lease renewal)."""
        _h.hilock_hold_renew(self._h)

    def force_release(self) -> bool:
        """Operator tool: delete the lock whoever holds it, waking a waiter.
        True if it was held."""
        had_grant = bool(_h.hilock_hold_token(self._h))
        granted = self._hold_turn()
        try:
            deleted = bool(_h.hilock_lock_force_release(self._h))
        except BaseException:
            self._turn_back(granted)
            raise
        if had_grant:
            self._drop_local()
        else:
            self._turn_back(granted)
        return deleted
