"""The fenced store: Redis data that refuses a stale holder's reads and writes."""
from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Optional, Type, Union

from . import _hilock as _h
from ._util import Name, name_bytes, seconds_to_ms
from .errors import ConnectionError, InvalidArgument

if TYPE_CHECKING:
    from ._client import Client

Value = Union[bytes, bytearray, memoryview, str, int]

FENCE_MAX = 1 << 53
LINGER_DEFAULT = 86400.0


def _key(key: Name) -> bytes:
    if isinstance(key, (str, bytes, bytearray, memoryview)):
        return name_bytes(key)
    raise InvalidArgument(f"data key must be str or bytes, not {type(key).__name__}")


def _fence(fence: Any) -> int:
    if isinstance(fence, bool) or not isinstance(fence, int):
        raise InvalidArgument("fence must be an int (a grant's fence), not "
                              f"{type(fence).__name__}")
    if not 1 <= fence <= FENCE_MAX:
        raise InvalidArgument(f"fence must be 1..2**53 (a grant's fence), got {fence}")
    return fence


def _value(value: Value) -> bytes:
    if isinstance(value, bool):
        raise InvalidArgument("value must be bytes, str or int, not bool")
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgument(f"value must be bytes, str or int, not {type(value).__name__}")


def _ttl_ms(ttl: Optional[float]) -> int:
    return 0 if ttl is None else seconds_to_ms(ttl, "ttl")


class FencedStore:
    """Data in Redis that only the current holder of a lock may read or
    write.

    Each call carries the caller's fence (``lk.fence`` of an exclusive
    lock) and is one script: it keeps, beside the data key, the highest
    fence that has touched the key, and refuses an access with a lower one
    by raising :class:`hilock.StaleFence` without reading or changing
    anything. A holder that paused past its TTL therefore cannot overwrite
    the next holder's update, nor act on a value it read before that
    update.

    ``FencedStore(url_or_client)``: the store on another server (a URL, with
    the options of :class:`hilock.Client`, or a client), or
    ``client.fenced_store()`` on the lock's own server. ``linger`` (seconds,
    default one day; None keeps them forever) is how long a key's fence
    record outlives the key itself; ``max_value`` the largest value
    accepted (bytes, default 64 MiB). Guard one data key by one lock name:
    fences of different names do not compare. Thread-safe.
    """

    def __init__(self, url_or_client: Union[str, Client], *,
                 linger: Optional[float] = LINGER_DEFAULT,
                 max_value: Optional[int] = None, **client_options: Any) -> None:
        from ._client import Client

        self._h: Any = None
        self._owned: Optional[Client] = None
        if isinstance(url_or_client, Client):
            if client_options:
                raise InvalidArgument("client options go with a URL, not with a Client")
            client = url_or_client
        elif isinstance(url_or_client, str):
            client = self._owned = Client(url_or_client, **client_options)
        else:
            raise InvalidArgument("FencedStore takes a URL or a hilock.Client, not "
                                  f"{type(url_or_client).__name__}")
        linger_ms = -1 if linger is None else seconds_to_ms(linger, "linger")
        if max_value is not None and (isinstance(max_value, bool)
                                      or not isinstance(max_value, int) or max_value < 1):
            raise InvalidArgument("max_value must be an int >= 1 (bytes)")
        self._client = client
        self._lock = threading.Lock()
        try:
            # Past any size_t, it is still too large: the C check says so.
            self._h = client._new(_h.py_store_new, linger_ms, min(max_value or 0, 1 << 63))
        except BaseException:
            if self._owned is not None:
                self._owned.close()
            raise

    def _store(self) -> Any:
        h = self._h
        if h is None:
            raise ConnectionError("fenced store is closed", _h.HILOCK_ECLOSED)
        return h

    def get(self, key: Name, *, fence: int) -> Optional[bytes]:
        """The value of ``key`` (None if it does not exist), for the holder
        of ``fence``."""
        value: Optional[bytes] = _h.hilock_store_get(self._store(), _key(key), _fence(fence))
        return value

    def set(self, key: Name, value: Value, *, fence: int, ttl: Optional[float] = None) -> None:
        """Set ``key`` to ``value`` (bytes, str or int), expiring after
        ``ttl`` seconds (None: no expiry, and any earlier one is removed)."""
        _h.hilock_store_set(self._store(), _key(key), _fence(fence), _value(value),
                            _ttl_ms(ttl))

    def incrby(self, key: Name, n: int = 1, *, fence: int, ttl: Optional[float] = None) -> int:
        """Add ``n`` to the integer in ``key`` (missing: 0) and return the
        new value; ``ttl`` sets the key's expiry (None leaves it)."""
        if isinstance(n, bool) or not isinstance(n, int) or not -(1 << 63) <= n < (1 << 63):
            raise InvalidArgument("n must be an int that fits in 64 bits")
        result: int = _h.hilock_store_incrby(self._store(), _key(key), _fence(fence), n,
                                             _ttl_ms(ttl))
        return result

    def delete(self, key: Name, *, fence: int) -> bool:
        """Delete ``key``; True if it existed. Its fence record stays for
        ``linger``, so a stale holder cannot bring the key back."""
        return bool(_h.hilock_store_delete(self._store(), _key(key), _fence(fence)))

    def fence_of(self, key: Name) -> Optional[int]:
        """The highest fence that has touched ``key``, or None."""
        fence: int = _h.hilock_store_fence_of(self._store(), _key(key))
        return fence or None

    def bind(self, fence: int) -> BoundStore:
        """This store with ``fence`` given to every call."""
        return BoundStore(self, _fence(fence))

    def close(self) -> None:
        """Free the store (and close the client it made from a URL)."""
        with self._lock:
            h, self._h = self._h, None
        if h is not None:
            _h.hilock_store_free(h)
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> FencedStore:
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()

    def __del__(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h is not None:
            _h.hilock_store_free(h)

    def __reduce__(self) -> Any:
        raise TypeError("hilock.FencedStore cannot be pickled: pass the fence to a "
                        "worker and let it make its own store")


class BoundStore:
    """A :class:`FencedStore` with one grant's fence bound
    (``lk.store()`` inside ``with client.lock(name) as lk:``)."""

    def __init__(self, store: FencedStore, fence: int) -> None:
        self.store = store
        self.fence = fence

    def get(self, key: Name) -> Optional[bytes]:
        return self.store.get(key, fence=self.fence)

    def set(self, key: Name, value: Value, ttl: Optional[float] = None) -> None:
        self.store.set(key, value, fence=self.fence, ttl=ttl)

    def incrby(self, key: Name, n: int = 1, ttl: Optional[float] = None) -> int:
        return self.store.incrby(key, n, fence=self.fence, ttl=ttl)

    def delete(self, key: Name) -> bool:
        return self.store.delete(key, fence=self.fence)

    def fence_of(self, key: Name) -> Optional[int]:
        return self.store.fence_of(key)

    def __repr__(self) -> str:
        return f"<hilock.BoundStore fence={self.fence}>"


__all__ = ["FencedStore", "BoundStore"]
