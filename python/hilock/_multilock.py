"""The multi-key lock."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Tuple

from . import _hilock as _h
from ._base import ExclusiveBase, LostCallback
from ._util import Name, delay_to_ms, name_bytes, seconds_to_ms
from .errors import InvalidArgument

if TYPE_CHECKING:
    from ._client import Client

MAX_NAMES = _h.HILOCK_MULTI_LOCK_MAX


def _names_list(names: Iterable[Name]) -> List[Name]:
    if isinstance(names, (str, bytes, bytearray, memoryview)):
        raise InvalidArgument("names must be an iterable of lock names, not a single "
                              f"{type(names).__name__} (use [name] for one name)")
    try:
        return list(names)
    except TypeError:
        raise InvalidArgument(f"names must be an iterable of lock names, not "
                              f"{type(names).__name__}") from None


class MultiLock(ExclusiveBase):
    """An exclusive lock on a set of names, taken all at once or not at all.

    Made by :meth:`Client.multi_lock`. Each name uses the keys of
    ``client.lock(name)``, so a multi-lock on ``{"a", "b"}`` excludes
    ``client.lock("a")`` and the other way round. Names are de-duplicated
    and sorted; one script takes every name or none, so overlapping sets
    never deadlock whatever order they are listed in.

    ``fence`` is a dict ``{name: fencing token}``: each name's token comes
    from the counter a single lock of that name uses, so a resource guarded
    by one name checks that name's token.

    ``release()`` frees exactly the names this holder still holds; if one had
    expired or was taken, the others are released, that one is left alone,
    and LockNotOwnedError names it (see :attr:`missing`). Renewal refreshes
    every name or reports the hold lost. Same ``threading.Lock`` contract as
    :class:`hilock.Lock` (one object, one holder; not reentrant).
    """

    _c_acquire = _h.hilock_hold_acquire
    _c_release = _h.hilock_hold_release
    _kind_name = "multi_lock"

    def __init__(self, client: Client, names: Iterable[Name], ttl: float,
                 timeout: Optional[float], auto_renew: bool = True,
                 max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[MultiLock]] = None,
                 lock_delay: float = 0) -> None:
        given = _names_list(names)
        delay_ms = delay_to_ms(lock_delay)
        encoded = [name_bytes(n) for n in given]
        # The first spelling of each name, for fence/missing/names.
        self._by_bytes: Dict[bytes, Name] = {}
        for b, n in zip(encoded, given):
            self._by_bytes.setdefault(b, n)
        label = ",".join(repr(n) for n in given[:4]) + (",..." if len(given) > 4 else "")
        super().__init__(client, f"{{{label}}}", timeout, auto_renew, max_hold, on_lost)
        handle = client._new(_h.py_multilock_new, encoded, seconds_to_ms(ttl, "ttl"))
        count = _h.hilock_multi_lock_count(handle)
        self._names: Tuple[Name, ...] = tuple(
            self._by_bytes[_h.hilock_multi_lock_name(handle, i)] for i in range(count))
        self._setup(handle)
        self._set_delay(delay_ms)

    def __repr__(self) -> str:
        return (f"<hilock.MultiLock {list(self._names)!r} "
                f"validity={self.validity:.3f}s>")

    @property
    def names(self) -> Tuple[Name, ...]:
        """The distinct names, in the order they are locked (sorted by their
        UTF-8 bytes)."""
        return self._names

    @property
    def name(self) -> Tuple[Name, ...]:  # type: ignore[override]
        return self._names

    @property
    def key(self) -> bytes:
        """The lock key of the first name (see :attr:`keys`)."""
        return bytes(_h.hilock_multi_lock_key(self._h, 0))

    @property
    def keys(self) -> Tuple[bytes, ...]:
        """The Redis lock key of every name (``hilock:{name}:lock``)."""
        return tuple(bytes(_h.hilock_multi_lock_key(self._h, i)) for i in range(len(self._names)))

    @property
    def fence(self) -> Optional[Dict[Name, int]]:  # type: ignore[override]
        """``{name: fencing token}`` of the current or last grant, or None
        before the first grant. Each token is the next value of that name's
        counter, shared with ``client.lock(name)``."""
        fences = {n: int(_h.hilock_multi_lock_fence(self._h, i))
                  for i, n in enumerate(self._names)}
        if not any(fences.values()):
            return None
        return fences

    @property
    def missing(self) -> Tuple[Name, ...]:
        """The names the last ``release()``, ``extend()``, ``renew()`` or
        ``owned()`` found not held by this holder (expired or taken)."""
        return tuple(n for i, n in enumerate(self._names)
                     if _h.hilock_multi_lock_missing(self._h, i))

    def locked(self) -> bool:
        """Whether anyone holds any of the names (one round trip)."""
        return bool(_h.hilock_hold_locked(self._h))

    def owned(self) -> bool:
        """Whether this object's grant still holds every name (one round
        trip)."""
        return bool(_h.hilock_hold_owned(self._h))

    def extend(self, seconds: float, replace: bool = False) -> None:
        """Add ``seconds`` to every name's remaining TTL, or set it
        (``replace=True``), only while every name is still held; otherwise
        nothing changes and LockNotOwnedError is raised."""
        _h.hilock_hold_extend(self._h, seconds_to_ms(seconds, "extension"),
                                   1 if replace else 0)

    def renew(self) -> None:
        """Reset every name's TTL to ``ttl``."""
        _h.hilock_hold_renew(self._h)

