"""hilock: Redis distributed locks with fencing tokens.

    from hilock import lock

    with lock("orders:42", ttl=30, timeout=5) as lk:
        ...  # lk.fence: pass it to the storage you protect

The C core (hilock._hilock) does the work; this package gives it the
``threading.Lock`` contract, context managers and exceptions.
"""
from __future__ import annotations

from typing import Any, Optional

from . import _hilock
from ._client import Client, default_client, default_url
from ._base import LockBase
from ._fair import FairLock
from ._lock import Lock
from ._rlock import RLock
from ._semaphore import Semaphore
from ._util import Name
from .errors import (AuthenticationError, ConnectionError, ForkedLockError, InvalidArgument,
                     LockError, LockLost, LockNotOwnedError, LockTimeout, NoPermissionError,
                     RedisError, UnsupportedError, WrongTypeError)
from .errors import NotEnoughReplicas

__version__ = _hilock.hilock_version_string().decode()

__all__ = [
    "Client", "Lock", "RLock", "LockBase", "lock", "simple_lock", "lease", "rlock",
    "Semaphore", "semaphore",
    "FairLock", "fair_lock",
    "default_client", "default_url",
    "LockError", "LockNotOwnedError", "LockLost", "ForkedLockError", "LockTimeout",
    "ConnectionError",
    "AuthenticationError", "InvalidArgument", "RedisError", "WrongTypeError",
    "NoPermissionError", "UnsupportedError", "__version__",
    "NotEnoughReplicas",
]


def lock(name: Name, ttl: float = 30.0, timeout: Optional[float] = None, **kw: Any) -> Lock:
    """An expiring lock on the default client (``$HILOCK_URL``, ``$REDIS_URL``)."""
    return default_client().lock(name, ttl=ttl, timeout=timeout, **kw)


def simple_lock(name: Name, timeout: Optional[float] = None) -> Lock:
    """A simple (non-expiring) lock on the default client."""
    return default_client().simple_lock(name, timeout=timeout)


def lease(name: Name, ttl: float = 30.0, timeout: Optional[float] = None, **kw: Any) -> Lock:
    """A lease on the default client."""
    return default_client().lease(name, ttl=ttl, timeout=timeout, **kw)


def rlock(name: Name, ttl: float = 30.0, timeout: Optional[float] = None, **kw: Any) -> RLock:
    """A reentrant lock on the default client."""
    return default_client().rlock(name, ttl=ttl, timeout=timeout, **kw)


def semaphore(name: Name, permits: int, ttl: float = 30.0, timeout: Optional[float] = None,
              **kw: Any) -> Semaphore:
    """A counting semaphore on the default client."""
    return default_client().semaphore(name, permits, ttl=ttl, timeout=timeout, **kw)

def fair_lock(name: Name, ttl: float = 30.0, timeout: Optional[float] = None,
              **kw: Any) -> FairLock:
    """A fair (FIFO) lock on the default client."""
    return default_client().fair_lock(name, ttl=ttl, timeout=timeout, **kw)
