"""The exclusive lock family: expiring, simple and lease locks."""
from __future__ import annotations

import math
import threading
import time
import warnings
from types import TracebackType
from typing import TYPE_CHECKING, Any, Optional, Type

from . import _hilock as _h
from ._util import Name, name_bytes, seconds_to_ms, wait_seconds
from .errors import InvalidArgument, LockError, LockNotOwnedError, LockTimeout

if TYPE_CHECKING:
    from ._client import Client

# A blocked acquire returns to Python this often, so Ctrl-C is seen promptly.
_SLICE = 0.1

EXPIRING = _h.HILOCK_LOCK_EXPIRING
SIMPLE = _h.HILOCK_LOCK_SIMPLE
LEASE = _h.HILOCK_LOCK_LEASE
_KIND_NAMES = {EXPIRING: "lock", SIMPLE: "simple_lock", LEASE: "lease"}


class Lock:
    """A Redis lock with the ``threading.Lock`` contract.

    Made by :meth:`Client.lock` (expiring), :meth:`Client.simple_lock` and
    :meth:`Client.lease`. One object stands for one holder: a second thread
    acquiring the same object blocks until the first releases it, as with
    ``threading.Lock``; other objects, in this or other processes, contend
    through Redis.
    """

    def __init__(self, client: "Client", name: Name, kind: int,
                 ttl: Optional[float], timeout: Optional[float]) -> None:
        self._client = client
        self._name = name
        self._kind = kind
        self._timeout = wait_seconds(timeout)
        ttl_ms = 0 if kind == SIMPLE else seconds_to_ms(ttl, "ttl")  # type: ignore[arg-type]
        self._h = _h.py_lock_new(client._handle(), kind, name_bytes(name), ttl_ms)
        self._local = threading.Lock()

    def __del__(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h is not None:
            if _h.hilock_lock_held(h):
                warnings.warn(f"hilock lock {self._name!r} collected while held; it is not "
                              "released (an expiring lock lapses at its TTL)",
                              ResourceWarning, stacklevel=2)
            _h.hilock_lock_free(h)

    def __reduce__(self) -> Any:
        raise TypeError("hilock locks cannot be pickled: a lock object stands for one holder")

    def __repr__(self) -> str:
        state = "held" if self._local.locked() else "free"
        return f"<hilock.{type(self).__name__} {_KIND_NAMES[self._kind]} {self._name!r} {state}>"

    # -- the threading.Lock contract ------------------------------------

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Acquire the lock; return True if granted.

        ``blocking=False`` tries once. Otherwise wait up to ``timeout``
        seconds (float); ``-1`` means the lock's default ``timeout`` (None:
        wait without limit). The wait returns to Python every 100 ms, so
        Ctrl-C interrupts it; other threads run meanwhile (no GIL is held).
        """
        if not blocking:
            if timeout != -1:
                raise InvalidArgument("can't specify a timeout for a non-blocking call")
            wait: Optional[float] = 0.0
        elif timeout == -1:
            wait = self._timeout
        else:
            wait = wait_seconds(timeout)
        deadline = None if wait is None else time.monotonic() + wait
        if not self._local.acquire(True, -1 if wait is None else wait):
            return False
        try:
            while True:
                if deadline is None:
                    slice_ = _SLICE
                else:
                    slice_ = min(_SLICE, max(0.0, deadline - time.monotonic()))
                if _h.hilock_lock_acquire(self._h, math.ceil(slice_ * 1000)) == _h.HILOCK_OK:
                    return True
                if deadline is not None and time.monotonic() >= deadline:
                    break
        except BaseException:
            self._local.release()
            raise
        self._local.release()
        return False

    def release(self) -> None:
        """Release the lock (owner-checked in one script).

        Raises LockNotOwnedError if this object does not hold it, or if it
        expired or was taken by another owner; nothing is deleted then.
        """
        try:
            _h.hilock_lock_release(self._h)
        except LockNotOwnedError:
            self._drop_local()
            raise
        self._drop_local()

    def locked(self) -> bool:
        """Whether anyone holds the lock (one round trip)."""
        return bool(_h.py_lock_locked(self._h))

    def owned(self) -> bool:
        """Whether this object's grant still holds the lock (one round trip)."""
        return bool(_h.py_lock_owned(self._h))

    # -- TTL ---------------------------------------------------------------

    def extend(self, seconds: float, replace: bool = False) -> None:
        """Add ``seconds`` to the remaining TTL, or set it (``replace=True``),
        only while still owned; an expired lock is never re-created.
        Raises LockNotOwnedError, or UnsupportedError for a simple lock."""
        _h.hilock_lock_extend(self._h, seconds_to_ms(seconds, "extension"), 1 if replace else 0)

    def renew(self) -> None:
        """Reset the TTL to the lock's ``ttl`` (a lease renewal)."""
        _h.hilock_lock_renew(self._h)

    def force_release(self) -> bool:
        """Operator tool: delete the lock whoever holds it. True if it was held."""
        deleted = bool(_h.py_lock_force_release(self._h))
        self._drop_local()
        return deleted

    # -- properties --------------------------------------------------------

    @property
    def name(self) -> Name:
        return self._name

    @property
    def key(self) -> bytes:
        """The Redis key of the lock: ``hilock:{<name>}:lock``."""
        return _h.py_lock_key(self._h)

    @property
    def ttl(self) -> Optional[float]:
        """The lock's TTL in seconds (None for a simple lock)."""
        ms = _h.hilock_lock_ttl_ms(self._h)
        return ms / 1000.0 if ms else None

    @property
    def timeout(self) -> Optional[float]:
        """The default wait of ``acquire()`` and ``with`` (None: no limit)."""
        return self._timeout

    @property
    def token(self) -> Optional[str]:
        """The owner token of the current grant (32 hex chars), or None."""
        t = _h.hilock_lock_token(self._h)
        return t.decode() if t else None

    @property
    def fence(self) -> Optional[int]:
        """The fencing token of the current or last grant (strictly increasing
        per lock name), or None before the first grant."""
        f = _h.hilock_lock_fence(self._h)
        return f or None

    @property
    def validity(self) -> float:
        """Seconds of validity left for the current grant, measured locally on
        the monotonic clock less a drift allowance; 0.0 if not held, inf for
        a held simple lock."""
        ms = _h.hilock_lock_validity_ms(self._h)
        if ms >= (1 << 62):
            return math.inf
        return ms / 1000.0

    # -- context manager ---------------------------------------------------

    def __enter__(self) -> "Lock":
        if not self.acquire():
            raise LockTimeout(f"could not acquire {self._name!r} within {self._timeout} s")
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        try:
            self.release()
        except LockError:
            # Losing the lock matters when the body succeeded; when it is
            # already raising, its own exception is the one to see.
            if exc_type is None:
                raise

    def _drop_local(self) -> None:
        if self._local.locked():
            try:
                self._local.release()
            except RuntimeError:
                pass
