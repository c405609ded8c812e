"""Barriers across processes, with liveness: :class:`Barrier` (as
``threading.Barrier``) and :class:`DoubleBarrier` (as Curator's
DistributedDoubleBarrier). A party that dies, hangs or is cut off while
others wait breaks the barrier for them (:class:`hilock.BrokenBarrier`)
within about ``ttl``, instead of leaving them waiting forever."""
from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Tuple, Type

from . import _hilock as _h
from ._util import Name, Uncopyable, name_bytes, seconds_to_ms, wait_seconds
from .errors import InvalidArgument, LockTimeout

if TYPE_CHECKING:
    from ._client import Client


def check_parties(parties: int) -> int:
    """A party count as the C core takes it."""
    if isinstance(parties, bool) or not isinstance(parties, int):
        raise InvalidArgument(f"parties must be an int, not {type(parties).__name__}")
    if not 1 <= parties <= _h.HILOCK_BARRIER_PARTIES_MAX:
        raise InvalidArgument(f"parties must be 1..{_h.HILOCK_BARRIER_PARTIES_MAX} "
                              f"(got {parties})")
    return parties


def wait_ms(wait: Optional[float]) -> int:
    """A wait in seconds (None: no limit) as the C core's milliseconds."""
    return -1 if wait is None else int(wait * 1000)


class _Party(Uncopyable):
    """What both barriers share: the name, parties, TTL and default wait,
    and C handles made per party (each wait is a party of its own)."""

    # The family's C functions, always called on the class.
    _c_new: ClassVar[Callable[..., Any]]
    _c_state: ClassVar[Callable[[Any], Any]]
    _c_abort: ClassVar[Callable[[Any], int]]
    _c_reset: ClassVar[Callable[[Any], int]]
    _c_delete: ClassVar[Callable[[Any], int]]

    def __init__(self, client: Client, name: Name, parties: int, ttl: float,
                 timeout: Optional[float]) -> None:
        self._client = client
        self._name = name
        self._bname = name_bytes(name)
        self._parties = check_parties(parties)
        self._ttl_ms = seconds_to_ms(ttl, "ttl")
        self._timeout = wait_seconds(timeout)
        # Checks the name and TTL now, as a lock's constructor does.
        _h.hilock_hold_free(self._handle())

    def _handle(self) -> Any:
        """A new C handle: one party."""
        return self._client._new(type(self)._c_new, self._bname, self._parties, self._ttl_ms)

    def _with_handle(self, fn: Callable[[Any], Any]) -> Any:
        h = self._handle()
        try:
            return fn(h)
        finally:
            _h.hilock_hold_free(h)

    def _wait(self, timeout: Optional[float]) -> Optional[float]:
        return self._timeout if timeout is None else wait_seconds(timeout)

    @property
    def name(self) -> Name:
        return self._name

    @property
    def parties(self) -> int:
        """The number of parties that release each other."""
        return self._parties

    @property
    def ttl(self) -> float:
        """Seconds a party's lease lasts unless renewed (the renewal
        thread renews it every ttl/3 while the party waits)."""
        return self._ttl_ms / 1000.0

    @property
    def timeout(self) -> Optional[float]:
        """The default wait (None: no limit)."""
        return self._timeout

    def _state(self) -> Tuple[int, int]:
        state = self._with_handle(type(self)._c_state)
        return int(state[0]), int(state[1])

    @property
    def broken(self) -> bool:
        """Whether the barrier is broken (one round trip)."""
        return bool(self._state()[0])

    def abort(self) -> None:
        """Break the barrier: every waiter, and every later arrival until
        :meth:`reset`, raises :class:`hilock.BrokenBarrier`."""
        self._with_handle(type(self)._c_abort)

    def reset(self) -> None:
        """Start a new generation, empty and unbroken; the waiters of the
        current one raise :class:`hilock.BrokenBarrier`."""
        self._with_handle(type(self)._c_reset)

    def delete(self) -> bool:
        """Delete the barrier's keys (they stay until then); waiters raise
        :class:`hilock.BrokenBarrier`. True if there were any."""
        return bool(self._with_handle(type(self)._c_delete))

    def __repr__(self) -> str:
        return f"<hilock.{type(self).__name__} {self._name!r} parties={self._parties}>"


class Barrier(_Party):
    """A barrier of ``parties`` across processes, reusable generation after
    generation as ``threading.Barrier``: :meth:`wait` returns once
    ``parties`` callers (threads or processes, on any client) have arrived.

    Made by :meth:`Client.barrier`. While a party waits, the client's
    renewal thread renews its lease every ``ttl``/3; a party that dies,
    hangs or is cut off stops renewing, and the others raise
    :class:`hilock.BrokenBarrier` within about ``ttl``. A wait that times
    out or is interrupted breaks the barrier for all (as threading's). The
    barrier stays broken until :meth:`reset`. Every object on one name must
    use the same ``parties``; an arrival with another count raises
    :class:`hilock.InvalidArgument`.
    """

    _c_new = _h.hilock_barrier_new
    _c_state = _h.hilock_barrier_state
    _c_abort = _h.hilock_barrier_abort
    _c_reset = _h.hilock_barrier_reset
    _c_delete = _h.hilock_barrier_delete

    def wait(self, timeout: Optional[float] = None) -> int:
        """Arrive and wait until ``parties`` have arrived in this
        generation; return this arrival's index (0 for the first to
        arrive, ``parties - 1`` for the last, whose arrival released the
        others). ``timeout``: seconds (None: the object's default, no
        limit by default); when it runs out the barrier breaks and
        :class:`hilock.BrokenBarrier` is raised, here and in every other
        waiter. Waiters sleep until a message or the earliest lease end of
        another party, never polling."""
        ms = wait_ms(self._wait(timeout))
        return int(self._with_handle(lambda h: _h.hilock_barrier_wait(h, ms)))

    @property
    def n_waiting(self) -> int:
        """The parties waiting in the current generation (one round trip)."""
        return int(self._state()[1])


class DoubleBarrier(_Party):
    """A double barrier of ``parties`` (Curator's DistributedDoubleBarrier):
    :meth:`enter` returns once ``parties`` have entered, :meth:`leave` once
    all of them have left::

        with db.enter():
            ...  # every party is inside
        # every party has left

    Made by :meth:`Client.double_barrier`. A party's lease is renewed from
    its enter to its leave; one that dies inside breaks the round and the
    others' leave (or enter) raises :class:`hilock.BrokenBarrier` instead
    of waiting forever. Rounds follow each other: an enter made while a
    round's parties are inside waits for the next round. A broken double
    barrier stays broken until :meth:`reset`.
    """

    _c_new = _h.hilock_double_barrier_new
    _c_state = _h.hilock_double_barrier_state
    _c_abort = _h.hilock_double_barrier_abort
    _c_reset = _h.hilock_double_barrier_reset
    _c_delete = _h.hilock_double_barrier_delete

    def __init__(self, client: Client, name: Name, parties: int, ttl: float,
                 timeout: Optional[float]) -> None:
        super().__init__(client, name, parties, ttl, timeout)
        self._local = threading.local()

    def _entered(self, wait: Optional[float]) -> Any:
        """A new party's handle, entered (waiting up to wait seconds, None:
        no limit); LockTimeout when the wait ran out (the entry withdrawn,
        the handle freed)."""
        h = self._handle()
        try:
            if _h.hilock_double_barrier_enter(h, wait_ms(wait)) == _h.HILOCK_BUSY:
                raise LockTimeout(_h.hilock_hold_errmsg(h).decode())
        except BaseException:
            _h.hilock_hold_free(h)
            raise
        return h

    def enter(self, timeout: Optional[float] = None) -> Inside:
        """Enter, and wait until ``parties`` have entered this round.
        Returns the :class:`Inside` (a context manager whose block leaves
        at its end). ``timeout``: seconds (None: the object's default);
        when it runs out the entry is withdrawn (nothing breaks) and
        :class:`hilock.LockTimeout` is raised. A thread enters once at a
        time; its :meth:`leave` leaves."""
        if getattr(self._local, "inside", None) is not None:
            raise InvalidArgument("this thread is inside already; leave first")
        inside = Inside(self, self._entered(self._wait(timeout)))
        self._local.inside = inside
        return inside

    def leave(self, timeout: Optional[float] = None) -> None:
        """Leave the round this thread entered, and wait until every party
        has left. ``timeout``: seconds (None: the object's default); when
        it runs out :class:`hilock.LockTimeout` is raised (this party has
        left; the others were still inside). Raises
        :class:`hilock.BrokenBarrier` if a party's lease ran out inside."""
        inside = getattr(self._local, "inside", None)
        if inside is None:
            raise InvalidArgument("this thread did not enter")
        inside.leave(timeout)

    def _left(self, inside: Inside) -> None:
        if getattr(self._local, "inside", None) is inside:
            self._local.inside = None

    @property
    def n_inside(self) -> int:
        """The parties entered in the current round (one round trip)."""
        return int(self._state()[1])


class Inside:
    """One party inside a :class:`DoubleBarrier` round: ``with`` leaves at
    the block's end (waiting until every party has left)."""

    def __init__(self, barrier: DoubleBarrier, h: Any) -> None:
        self._barrier = barrier
        self._h: Any = h

    @property
    def barrier(self) -> DoubleBarrier:
        return self._barrier

    def leave(self, timeout: Optional[float] = None) -> None:
        """As :meth:`DoubleBarrier.leave`."""
        h = self._h
        if h is None:
            raise InvalidArgument("this party has left")
        ms = wait_ms(self._barrier._wait(timeout))
        try:
            if _h.hilock_double_barrier_leave(h, ms) == _h.HILOCK_BUSY:
                raise LockTimeout(_h.hilock_hold_errmsg(h).decode())
        except LockTimeout:
            raise  # left; may wait again
        except BaseException:
            self._close()
            raise
        self._close()

    def _close(self) -> None:
        h, self._h = self._h, None
        self._barrier._left(self)
        if h is not None:
            _h.hilock_hold_free(h)

    def __enter__(self) -> Inside:
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if self._h is not None:
            self.leave()

    def __del__(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h is not None:
            _h.hilock_hold_free(h)
