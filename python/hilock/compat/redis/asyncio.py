"""redis-py's asyncio ``Lock`` (``redis.asyncio.lock.Lock``) on hilock's
core: ``from hilock.compat.redis.asyncio import Lock``.

As :mod:`hilock.compat.redis`, for ``redis.asyncio`` clients: the same
constructor, coroutine methods, exceptions and keys; a waiting
``acquire()`` is woken instead of polling and does not block the loop.
The connection is a :class:`hilock.asyncio.Client` made from the client's
connection settings, one per connection pool.
"""
from __future__ import annotations

import logging
import threading
import uuid
import weakref
from typing import Any, Optional, Union

from redis.exceptions import LockError, LockNotOwnedError

from ... import errors as _errors
from ..._lock import REDIS_PY
from ..._lock import Lock as _HiLock
from ...asyncio import Client
from ...asyncio import Lock as _AsyncLock
from . import _Base, _client_args, _encode, _pool_of, _set_token

__all__ = ["Lock", "LockError", "LockNotOwnedError", "client_for"]

logger = logging.getLogger(__name__)

_guard = threading.Lock()
_clients: weakref.WeakKeyDictionary[Any, Client] = weakref.WeakKeyDictionary()


def client_for(redis_client: Any) -> Client:
    """The :class:`hilock.asyncio.Client` that the compat locks of the
    ``redis.asyncio`` client use: one per connection pool."""
    pool = _pool_of(redis_client)
    with _guard:
        c = _clients.get(pool)
        if c is None:
            url, args = _client_args(pool)
            c = Client(url, **args)
            _clients[pool] = c
            weakref.finalize(pool, c._sync.close)
    return c


class Lock(_Base):
    """redis-py's ``redis.asyncio.lock.Lock`` on hilock's core (see
    :class:`hilock.compat.redis.Lock`: the same arguments, extras and
    differences; the methods are coroutines)."""

    _client_for = staticmethod(client_for)
    _client: Client

    @property
    def hilock_lock(self) -> _AsyncLock:
        """The hilock asyncio lock of the calling thread's token."""
        lk = getattr(self._locks, "lock", None)
        if lk is None:
            sync = _HiLock(self._client._sync, self.name, REDIS_PY, self.timeout, None,
                           self._auto_renew and self.timeout is not None, None, self._on_lost)
            lk = _AsyncLock(self._client, sync)
            self._locks.lock = lk
        return lk

    async def __aenter__(self) -> Lock:
        if await self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified",
                        lock_name=self.name)

    async def __aexit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        try:
            await self.release()
        except LockError:
            if self.raise_on_release_error:
                raise
            logger.warning("Lock was unlocked or no longer owned when exiting context manager.")

    async def acquire(self, blocking: Optional[bool] = None,
                      blocking_timeout: Optional[float] = None,
                      token: Optional[Union[str, bytes]] = None) -> bool:
        """As :meth:`hilock.compat.redis.Lock.acquire`, without blocking the
        loop."""
        btoken = uuid.uuid1().hex.encode() if token is None else _encode(self.redis, token)
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        lk = self.hilock_lock
        _set_token(lk._sync, btoken, self.name)  # type: ignore[arg-type]
        wait = 0.0 if not blocking else blocking_timeout
        if wait is not None and wait < 0:
            wait = 0.0
        if await lk.acquire(timeout=wait):  # type: ignore[arg-type]
            self.local.token = btoken
            return True
        return False

    async def locked(self) -> bool:
        """Whether anyone holds it."""
        return await self.redis.get(self.name) is not None

    async def owned(self) -> bool:
        """Whether the calling thread's token holds it."""
        token = self.local.token
        if token is None:
            return False
        stored = await self.redis.get(self.name)
        if stored is not None and not isinstance(stored, bytes):
            stored = _encode(self.redis, stored)
        return bool(stored == token)

    async def release(self) -> None:
        """As :meth:`hilock.compat.redis.Lock.release`."""
        if self.local.token is None:
            raise LockError("Cannot release a lock that's not owned or is already unlocked.",
                            lock_name=self.name)
        try:
            await self.hilock_lock.release()
        except _errors.LockNotOwnedError:
            self.local.token = None
            raise LockNotOwnedError("Cannot release a lock that's no longer owned",
                                    lock_name=self.name) from None
        self.local.token = None

    async def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:
        """As :meth:`hilock.compat.redis.Lock.extend`."""
        if self.local.token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self.name)
        if self.timeout is None:
            raise LockError("Cannot extend a lock with no timeout", lock_name=self.name)
        try:
            await self.hilock_lock.extend(additional_time, replace=bool(replace_ttl))
        except _errors.LockNotOwnedError:
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned",
                                    lock_name=self.name) from None
        return True

    async def reacquire(self) -> bool:
        """As :meth:`hilock.compat.redis.Lock.reacquire`."""
        if self.local.token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self.name)
        if self.timeout is None:
            raise LockError("Cannot reacquire a lock with no timeout", lock_name=self.name)
        try:
            await self.hilock_lock.extend(self.timeout, replace=True)
        except _errors.LockNotOwnedError:
            raise LockNotOwnedError("Cannot reacquire a lock that's no longer owned",
                                    lock_name=self.name) from None
        return True
