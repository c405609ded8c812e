"""hilock's exceptions, and the one table that maps C status codes to them."""
from __future__ import annotations

import builtins
import re
import threading
from typing import Dict, Optional, Type

from . import _hilock as _h

__all__ = [
    "LockError",
    "LockNotOwnedError",
    "LockLost",
    "ForkedLockError",
    "LockTimeout",
    "ConnectionError",
    "AuthenticationError",
    "InvalidArgument",
    "RedisError",
    "WrongTypeError",
    "NoPermissionError",
    "UnsupportedError",
    "DeadlockError",
    "error_for",
    "CrossSlotError",
    "ClusterError",
    "NoQuorumError",
    "SoldOut",
    "NotEnoughReplicas",
    "BrokenBarrier",
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


class TLSError(ConnectionError):
    """The TLS handshake or a TLS record failed: the server refused our
    certificate (or its absence), spoke no TLS, or offered nothing we
    accept. The message carries OpenSSL's reason."""


class CertificateError(TLSError):
    """The server's certificate was not accepted: unknown CA, host name or
    IP address mismatch, expired. The message carries the reason."""


class NoQuorumError(ConnectionError):
    """Redlock: fewer than a majority of the nodes answered (down, slow or
    refusing); the message names each failed node and its error."""


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


class NotTransferable(UnsupportedError, ValueError):
    """``export()`` on a lock whose owner is the calling thread (a reentrant
    or read-write lock), not a token: its grant cannot be handed over.
    Release it, and acquire it where it is needed."""


class DeadlockError(LockError, RuntimeError):
    """The request could only deadlock, so it was refused: a thread holding
    a read lock asked for the write lock of the same read-write lock
    (release the read lock first; nothing was changed in Redis), or, on a
    client made with ``detect_deadlocks=True``, this wait was the youngest
    of a cycle of waits across threads and processes, which its message
    names (back off: release what this owner holds and try again; the other
    waiters keep waiting and get their locks)."""


class CrossSlotError(InvalidArgument):
    """The keys of one multi-key lock fall in different Redis Cluster hash
    slots (or the server answered CROSSSLOT). Give the names a shared hash
    tag, e.g. "{acct}:1" and "{acct}:2"."""


class ClusterError(ConnectionError):
    """Redis Cluster routing failed: no node serves the key's hash slot, the
    cluster stayed down (CLUSTERDOWN, TRYAGAIN) beyond the reconnect budget,
    too many MOVED/ASK redirections, a redis+cluster:// URL on a server
    without cluster support, or a redis:// client sent to a cluster node."""


class SoldOut(LockError):
    """Every segment of a segmented lock is empty: the stock is sold out.
    An ordinary outcome (not a timeout): stop trying. ``code`` is
    HILOCK_SOLDOUT (2)."""


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


class StaleFence(LockLost):
    """A fenced store refused an access: a higher fence has touched the data
    key since this fence was granted, so its holder lost the lock (paused
    past its TTL, or force-released) and the next holder has been at the
    data. Nothing was read or changed. ``code`` is HILOCK_ESTALE (-24)."""


class BrokenBarrier(LockError, threading.BrokenBarrierError):
    """A latch or barrier is broken: a registered party died (its lease ran
    out before it counted down or while others waited), a wait timed out,
    or somebody called ``reset()``. Every waiter of that generation gets
    it. Also a ``threading.BrokenBarrierError``. ``code`` is
    HILOCK_EBROKEN (-25)."""


_BY_CODE: Dict[int, Type[BaseException]] = {
    _h.HILOCK_EINVAL: InvalidArgument,
    _h.HILOCK_ENOMEM: MemoryError,
    _h.HILOCK_EIO: ConnectionError,
    _h.HILOCK_ETIMEDOUT: ConnectionError,
    _h.HILOCK_ECLOSED: ConnectionError,
    _h.HILOCK_ETLS: TLSError,
    _h.HILOCK_ECERT: CertificateError,
    _h.HILOCK_EAUTH: AuthenticationError,
    _h.HILOCK_EPROTO: RedisError,
    _h.HILOCK_ESCRIPT: RedisError,
    _h.HILOCK_EREDIS: RedisError,
    _h.HILOCK_EWRONGTYPE: WrongTypeError,
    _h.HILOCK_ENOPERM: NoPermissionError,
    _h.HILOCK_ENOTOWNED: LockNotOwnedError,
    _h.HILOCK_ENOTSUP: UnsupportedError,
    _h.HILOCK_EFORKED: ForkedLockError,
    _h.HILOCK_EDEADLK: DeadlockError,
    _h.HILOCK_ECROSSSLOT: CrossSlotError,
    _h.HILOCK_ECLUSTER: ClusterError,
    _h.HILOCK_ENOQUORUM: NoQuorumError,
    _h.HILOCK_SOLDOUT: SoldOut,
    _h.HILOCK_ENOREPLICAS: NotEnoughReplicas,
    _h.HILOCK_ESTALE: StaleFence,
    _h.HILOCK_EBROKEN: BrokenBarrier,
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
