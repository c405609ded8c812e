"""hilock's exceptions, and the one table that maps C status codes to them."""
from __future__ import annotations

import builtins
import re
from typing import Dict, Optional, Type

from . import _hilock as _h

__all__ = [
    "LockError", "LockNotOwnedError", "LockLost", "ForkedLockError", "LockTimeout", "ConnectionError",
    "AuthenticationError", "InvalidArgument", "RedisError", "WrongTypeError",
    "NoPermissionError", "UnsupportedError", "NotEnoughReplicas", "error_for",
]


class LockError(Exception):
    """Base of every hilock error. ``code`` is the C status (negative), or 0."""

    code: int = 0

    def __init__(self, message: str = "", code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class LockNotOwnedError(LockError, RuntimeError):
    """Release or extend of a lock this holder does not hold (never held,
    expired, or taken by another owner). Nothing was changed in Redis."""


class LockLost(LockNotOwnedError):
    """The lock was lost while held: renewal found another owner, or could
    not renew it before its validity ran out. Raised when a ``with`` block
    on a lost lock ends (unless the block is already raising)."""


class ForkedLockError(LockNotOwnedError):
    """A forked child used a lock its parent acquired: the child holds
    nothing, and nothing was sent to Redis."""


class LockTimeout(LockError, builtins.TimeoutError):
    """The lock was not acquired within the wait timeout."""


class ConnectionError(LockError, builtins.ConnectionError):
    """Redis could not be reached, the connection broke beyond the reconnect
    budget, a reply did not arrive in time, or the client is closed."""


class AuthenticationError(ConnectionError):
    """AUTH failed (WRONGPASS, NOAUTH)."""


class InvalidArgument(LockError, ValueError):
    """A bad name, TTL, timeout, URL or option."""


class RedisError(LockError):
    """Redis answered with an error (its text is in the message)."""


class WrongTypeError(RedisError):
    """A lock key holds a value of another type (WRONGTYPE)."""


class NoPermissionError(RedisError, builtins.PermissionError):
    """The ACL user may not run a command or touch a key (NOPERM)."""


class UnsupportedError(LockError):
    """The operation is not supported by this lock type or build."""


class NotEnoughReplicas(LockError):
    """``wait_replicas``: fewer replicas than asked acknowledged a grant
    within ``wait_timeout`` (WAIT), so a failover could have lost it. The
    grant was given back; nothing is held. ``acked`` and ``wanted`` give the
    counts (None if WAIT itself failed)."""

    acked: Optional[int] = None
    wanted: Optional[int] = None

    def __init__(self, message: str = "", code: int = 0) -> None:
        super().__init__(message, code)
        m = re.search(r"(\d+) of (\d+) replicas acknowledged", message)
        if m:
            self.acked, self.wanted = int(m.group(1)), int(m.group(2))


_BY_CODE: Dict[int, Type[BaseException]] = {
    _h.HILOCK_EINVAL: InvalidArgument,
    _h.HILOCK_ENOMEM: MemoryError,
    _h.HILOCK_EIO: ConnectionError,
    _h.HILOCK_ETIMEDOUT: ConnectionError,
    _h.HILOCK_ECLOSED: ConnectionError,
    _h.HILOCK_EAUTH: AuthenticationError,
    _h.HILOCK_EPROTO: RedisError,
    _h.HILOCK_ESCRIPT: RedisError,
    _h.HILOCK_EREDIS: RedisError,
    _h.HILOCK_EWRONGTYPE: WrongTypeError,
    _h.HILOCK_ENOPERM: NoPermissionError,
    _h.HILOCK_ENOTOWNED: LockNotOwnedError,
    _h.HILOCK_ENOTSUP: UnsupportedError,
    _h.HILOCK_EFORKED: ForkedLockError,
    _h.HILOCK_ENOREPLICAS: NotEnoughReplicas,
}


def error_for(code: int, message: str) -> BaseException:
    """The exception for a C status code (the extension raises what this
    returns)."""
    cls = _BY_CODE.get(code, LockError)
    text = message or _h.hilock_strerror(code).decode()
    if issubclass(cls, LockError):
        return cls(text, code)
    return cls(text)


_h._set_error_factory(error_for)
