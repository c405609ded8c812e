"""Countdown latch with registered parties (Java's CountDownLatch,
Redisson's RCountDownLatch), whose waiters learn of a dead party."""
from __future__ import annotations

import math
from types import TracebackType
from typing import TYPE_CHECKING, Any, Optional, Type

from . import _hilock as _h
from ._base import ExclusiveBase, LostCallback
from ._util import Name, Uncopyable, name_bytes, seconds_to_ms, wait_seconds
from .errors import BrokenBarrier, InvalidArgument, LockError, LockNotOwnedError

if TYPE_CHECKING:
    from ._client import Client


#: The largest count a latch starts with (the C API's HILOCK_LATCH_COUNT_MAX).
COUNT_MAX = 1 << 50


def check_count(count: int) -> int:
    """A latch's count: an int in 1..COUNT_MAX."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidArgument(f"count must be an int, not {type(count).__name__}")
    if not 1 <= count <= COUNT_MAX:
        raise InvalidArgument(f"count must be 1..{COUNT_MAX}, not {count}")
    return count


class Latch(Uncopyable):
    """A countdown latch on one name: :meth:`wait` returns True once
    :meth:`count_down` has been called ``count`` times, in any process.

    Made by :meth:`Client.latch`. The first call on a latch that does not
    exist makes it with this object's ``count``; an object with another
    count later changes nothing (as Redisson's ``trySetCount``). The latch
    stays in Redis (no TTL) until :meth:`delete`.

    Parties: :meth:`join` registers a :class:`LatchParty`, whose lease the
    client's renewal thread keeps (``ttl``, renewed every ``ttl/3``). If a
    party dies, hangs or is cut off before it counts down, its lease ends
    and the latch is broken: every waiter raises
    :class:`hilock.BrokenBarrier` within about ``ttl``, instead of waiting
    forever. The methods are safe to call from several threads (each call
    uses a C handle of its own).
    """

    def __init__(self, client: Client, name: Name, count: int, ttl: float = 30.0) -> None:
        self._client = client
        self._name = name
        self._bname = name_bytes(name)
        self._count = check_count(count)
        self._ttl_ms = seconds_to_ms(ttl, "ttl")
        # The constructor's own checks (name, count, ttl, a closed client).
        _h.hilock_hold_free(self._new())

    def _new(self) -> Any:
        return self._client._new(_h.hilock_latch_new, self._bname, self._count, self._ttl_ms)

    def _call(self, fn: Any, *args: Any) -> Any:
        h = self._new()
        try:
            return fn(h, *args)
        finally:
            _h.hilock_hold_free(h)

    def __repr__(self) -> str:
        return f"<hilock.Latch {self._name!r} count={self._count}>"

    @property
    def name(self) -> Name:
        return self._name

    @property
    def ttl(self) -> float:
        """A party's lease, in seconds."""
        return self._ttl_ms / 1000.0

    @property
    def count(self) -> int:
        """The count left (one round trip). Raises
        :class:`hilock.BrokenBarrier` if the latch is broken."""
        return int(self._call(_h.hilock_latch_count))

    @property
    def broken(self) -> bool:
        """Whether the latch is broken (one round trip)."""
        try:
            self._call(_h.hilock_latch_count)
        except BrokenBarrier:
            return True
        return False

    def count_down(self) -> None:
        """Take one off the count (never below 0); at 0 every waiter
        returns True. Raises :class:`hilock.BrokenBarrier` if the latch is
        broken. Sent once: a connection lost during the call raises, and the
        count may or may not have been taken."""
        self._call(_h.hilock_latch_count_down)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until the count is 0: True then, False when ``timeout``
        seconds pass first (None: no limit; 0: one look). Raises
        :class:`hilock.BrokenBarrier` if the latch is or becomes broken. The
        waiter sleeps until a message on the latch's channel or the earliest
        party's lease end, never polling (without the client's shared
        waiting: a look every 500 ms)."""
        wait = wait_seconds(timeout)
        wait_ms = -1 if wait is None else math.ceil(wait * 1000)
        return bool(self._call(_h.hilock_latch_wait, wait_ms) == _h.HILOCK_OK)

    def join(self, *, auto_renew: bool = True,
             on_lost: Optional[LostCallback[LatchParty]] = None) -> LatchParty:
        """Register a party and return it: its lease is renewed until it
        counts down (:meth:`LatchParty.count_down`, or leaving its ``with``
        block normally) or gives up (:meth:`LatchParty.abort`, or leaving
        the block with an exception: the waiters raise BrokenBarrier at
        once). Raises :class:`hilock.BrokenBarrier` if the latch is broken,
        :class:`hilock.InvalidArgument` if its count is 0 already."""
        party = LatchParty(self, auto_renew, on_lost)
        party._join()
        return party

    def abort(self) -> None:
        """Break the latch: every waiter raises BrokenBarrier at once, and
        so do later calls until :meth:`delete`. A latch at 0 stays done."""
        self._call(_h.hilock_latch_abort)

    def delete(self) -> None:
        """Delete the latch's keys (count, broken mark, parties): the name
        starts afresh, made by the next call with that object's count."""
        self._call(_h.hilock_latch_delete)


class LatchParty(ExclusiveBase):
    """A registered party of a :class:`Latch` (made by :meth:`Latch.join`):
    a context manager whose block counts down when it ends normally and
    breaks the latch when it ends with an exception (its :meth:`abort`), so
    a failing participant never leaves the waiters hanging. A party counts
    down once; its lease (``lost``, ``validity``) is kept by the client's
    renewal thread as a lock's."""

    _c_acquire = _h.hilock_hold_acquire
    _c_release = _h.hilock_hold_release
    _kind_name = "latch party"

    def __init__(self, latch: Latch, auto_renew: bool,
                 on_lost: Optional[LostCallback[LatchParty]]) -> None:
        super().__init__(latch._client, latch._name, None, auto_renew, None, on_lost)
        self._latch = latch
        self._setup(latch._new())

    @property
    def latch(self) -> Latch:
        return self._latch

    def _join(self) -> None:
        self._acquire(0.0)

    def _c_undo(self, granted: bool) -> None:
        """A join the caller did not wait for (a green thread killed): the
        party gives up (a count down would count for work never done)."""
        if granted:
            try:
                _h.hilock_latch_abort(self._h)
            except LockError:
                pass

    def _c_attempt(self, wait: Optional[float]) -> bool:
        try:
            return bool(type(self)._c_acquire(self._h, 0) == _h.HILOCK_OK)
        except LockError:
            raise  # refused or failed closed: no party
        except BaseException:
            # Ctrl-C racing the join: never leave a party behind the caller.
            self._c_undo(type(self)._c_validity(self._h) > 0)
            raise

    def count_down(self) -> None:
        """Count down as this party, which leaves the parties in the same
        step (its lease ends). Raises :class:`hilock.LockNotOwnedError` if
        it counted down already (a party counts once) or its lease was lost,
        :class:`hilock.BrokenBarrier` if the latch is broken."""
        if not type(self)._c_token(self._h):
            raise LockNotOwnedError("count_down: this party counted down already, gave up "
                                    "or was lost", _h.HILOCK_ENOTOWNED)
        try:
            self.release()
        except BrokenBarrier:
            self._drop_local()  # the party's lease ended with the latch
            raise

    def abort(self) -> None:
        """Give up: the latch is broken and its waiters raise BrokenBarrier
        at once. If Redis cannot be told, the party stops renewing all the
        same (its lease ends and breaks the latch within ``ttl``)."""
        self._hold_turn()
        try:
            _h.hilock_latch_abort(self._h)
        finally:
            self._drop_local()

    def __enter__(self) -> LatchParty:
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if not type(self)._c_token(self._h):
            return  # the body counted down or gave up itself
        if exc_type is None:
            self.count_down()
            return
        try:
            self.abort()
        except LockError:
            pass  # the body's exception is the one to see; the lease ends anyway

    def __repr__(self) -> str:
        return f"<hilock.LatchParty {self._name!r} validity={self.validity:.3f}s>"
