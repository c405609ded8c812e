"""Leader election: one leader at a time per name, with a value that
anyone can read and watch (etcd's Election, Curator's LeaderLatch)."""
from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Iterator, Optional, Tuple, Type, Union

from . import _base
from . import _hilock as _h
from ._base import ExclusiveBase, LostCallback
from ._util import Name, seconds_to_ms, wait_seconds
from .errors import InvalidArgument, LockTimeout

if TYPE_CHECKING:
    from ._client import Client

#: A leader's value: str when it is valid UTF-8, else bytes.
Value = Union[str, bytes]


def value_bytes(value: Union[str, bytes, bytearray, memoryview]) -> bytes:
    """A value as the C core takes it (str is UTF-8 encoded)."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgument(f"value must be str or bytes, not {type(value).__name__}")


def value_of(data: bytes) -> Value:
    """A value read back: str when it is valid UTF-8, else bytes."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


class Election(ExclusiveBase):
    """An election among the callers of :meth:`campaign` on one name.

    Made by :meth:`Client.election`. The lead is held as a lock is: the
    client's renewal thread keeps it while the leader lives, and a leader
    that dies, hangs or is cut off loses it within ``ttl``; then a standby
    leads. ``campaign()`` returns a :class:`Leadership`; ``leader()`` and
    ``observe()`` read and watch whoever leads, from any object.
    """

    _c_acquire = _h.hilock_hold_acquire
    _c_release = _h.hilock_hold_release
    _kind_name = "election"

    def __init__(self, client: Client, name: Name, ttl: float, timeout: Optional[float],
                 auto_renew: bool = True, max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[Election]] = None) -> None:
        super().__init__(client, name, timeout, auto_renew, max_hold, on_lost)
        self._ttl_ms = seconds_to_ms(ttl, "ttl")
        self._campaigner = threading.local()
        self._setup(client._new(_h.hilock_election_new, self._bname, self._ttl_ms))

    # -- leading --------------------------------------------------------------

    def campaign(self, value: Union[str, bytes] = b"",
                 timeout: Optional[float] = None) -> Leadership:
        """Wait until this object leads, with ``value`` (str or bytes, at
        most 64 KiB) for observers to see, and return the
        :class:`Leadership` (a context manager: leaving the block resigns).
        A standby sleeps until the leader resigns or its TTL runs out, never
        polling. ``timeout``: seconds (None: the object's default, no limit
        by default); raises :class:`hilock.LockTimeout` when it runs out."""
        data = value_bytes(value)
        if len(data) > _h.HILOCK_ELECTION_VALUE_MAX:
            raise InvalidArgument(f"the value has {len(data)} bytes; the limit is "
                                  f"{_h.HILOCK_ELECTION_VALUE_MAX}")
        wait = self._timeout if timeout is None else wait_seconds(timeout)
        self._campaigner.value = data
        hook = _base._tracer_hook
        if not (self._acquire(wait) if hook is None else hook.acquire(self, wait)):
            raise LockTimeout(f"did not lead {self._name!r} within {wait} s")
        return Leadership(self, value_of(data))

    def _c_call_acquire(self, wait: Optional[float]) -> bool:
        # With the object's local turn: no other thread's campaign runs on
        # the C handle now, so the value is this thread's.
        _h.hilock_election_set_value(self._h, getattr(self._campaigner, "value", b""))
        return super()._c_call_acquire(wait)

    def owned(self) -> bool:
        """Whether this object's lead is still the election's (one round
        trip)."""
        return bool(_h.hilock_hold_owned(self._h))

    def locked(self) -> bool:
        """Whether anyone leads (one round trip)."""
        return bool(_h.hilock_hold_locked(self._h))

    def renew(self) -> None:
        """Reset the lead's TTL to ``ttl`` (the renewal thread does this by
        itself with ``auto_renew``). Raises LockNotOwnedError if lost."""
        _h.hilock_hold_renew(self._h)

    # -- watching ---------------------------------------------------------------

    def _reader(self) -> Any:
        """A C handle of its own for reads (the campaign's may be busy)."""
        return self._client._new(_h.hilock_election_new, self._bname, self._ttl_ms)

    def leader(self) -> Optional[Tuple[Value, int]]:
        """The current leader's ``(value, fence)``, or None when nobody
        leads, in one round trip."""
        h = self._reader()
        try:
            fence = _h.hilock_election_leader(h)
            return (value_of(_h.hilock_election_value(h)), fence) if fence else None
        finally:
            _h.hilock_hold_free(h)

    def observe(self, timeout: Optional[float] = None) -> Iterator[Tuple[Value, int]]:
        """Iterate over ``(value, fence)`` of the leader, now and each time
        the leader or its value changes, woken by a message the changes
        publish (never by polling, while the client's shared waiting can
        subscribe). Changes faster than the loop reads may be coalesced, but
        the latest is never missed. A lead that lapses without a successor
        yields nothing until the next leader. ``timeout``: the iteration
        ends when no change comes within that many seconds (None: never)."""
        wait = wait_seconds(timeout)
        wait_ms = -1 if wait is None else int(wait * 1000)
        h = self._reader()
        try:
            while True:
                fence = _h.hilock_election_observe(h, wait_ms)
                if not fence:
                    return
                yield value_of(_h.hilock_election_value(h)), fence
        finally:
            _h.hilock_hold_free(h)


class _Lead:
    """What a lead shows, for the blocking and the asyncio leadership."""

    def __init__(self, election: Any, value: Value) -> None:
        self._election = election
        self._value = value

    def _sync(self) -> Election:
        return self._election  # type: ignore[no-any-return]

    @property
    def fence(self) -> int:
        """The lead's fencing token: strictly increasing across leaders."""
        return self._sync().fence or 0

    @property
    def value(self) -> Value:
        """The value observers see (the campaign's, or the last proclaimed)."""
        return self._value

    @property
    def lost(self) -> bool:
        """True once the lead was found lost (see :attr:`hilock.Lock.lost`)."""
        return self._sync().lost

    @property
    def validity(self) -> float:
        """Seconds the lead is known to last (see :attr:`hilock.Lock.validity`)."""
        return self._sync().validity

    def __repr__(self) -> str:
        return (f"<hilock.{type(self).__name__} {self._sync().name!r} fence={self.fence} "
                f"validity={self.validity:.3f}s>")


class Leadership(_Lead):
    """The lead of one :meth:`Election.campaign`: a context manager whose
    block resigns when it ends and raises :class:`hilock.LockLost` there if
    the lead was lost meanwhile (as a lock's ``with`` block does)."""

    _election: Election

    @property
    def election(self) -> Election:
        return self._election

    def proclaim(self, value: Union[str, bytes]) -> None:
        """Change the value observers see, keeping the lead and its fence.
        Raises :class:`hilock.LockNotOwnedError` if the lead was lost."""
        data = value_bytes(value)
        _h.hilock_election_proclaim(self._election._h, data)
        self._value = value_of(data)

    def resign(self) -> None:
        """Give the lead up: a standby leads next, observers hear of it."""
        self._election.release()

    def __enter__(self) -> Leadership:
        self._election._entered()
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self._election.__exit__(exc_type, exc, tb)
