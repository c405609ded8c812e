"""What every hilock lock object shares: the acquire contract, renewal and
loss reporting, properties, and the context manager."""
from __future__ import annotations

import functools
import math
import threading
import time
import warnings
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, Type, TypeVar

from . import _green, _notify
from . import _hilock as _h
from ._util import Name, Uncopyable, delay_to_ms, name_bytes, seconds_to_ms, wait_seconds
from .errors import (
    InvalidArgument,
    LockError,
    LockLost,
    LockNotOwnedError,
    LockTimeout,
    NotTransferable,
    UnsupportedError,
)

if TYPE_CHECKING:
    from ._client import Client
    from ._store import BoundStore, FencedStore

_L = TypeVar("_L", bound="LockBase")

# on_lost(lock): called with the lock object whose hold was lost; what it
# returns is ignored. LostCallback[Lock] for a Lock, and so on.
LostCallback = Callable[[_L], object]

# hilock.tracing's hook while it is instrumented (None: not traced). Each
# acquire and release reads it once; nothing else is done without it.
_tracer_hook: Any = None


def _counted(release: Callable[[_L], None]) -> Callable[[_L], None]:
    """Count a lock object's successful releases per thread, so a ``with``
    block can tell that its body released the lock on purpose."""
    @functools.wraps(release)
    def counted(self: _L) -> None:
        hook = _tracer_hook
        if hook is None:
            release(self)
        else:
            hook.release(self, release)
        t = self._releases()
        t.n = getattr(t, "n", 0) + 1
    return counted


def lost_error(name: Name, e: Optional[LockError]) -> LockLost:
    """What leaving a with-block raises when its lock was lost while the
    block ran (e: the release's own error, if it failed)."""
    if e is None:
        return LockLost(f"lock {name!r} was lost while the block ran")
    return LockLost(f"lock {name!r} was lost while the block ran: {e}", getattr(e, "code", 0))


def raise_on_leaving(name: Name, e: Optional[LockError], body_raised: bool, lost: bool,
                     released_in_body: bool) -> None:
    """Leaving a with-block: raise what its release calls for. e is the
    release's error (called in its except clause) or None (it succeeded);
    lost whether the lock was lost while the block ran; released_in_body
    whether the body released the lock itself."""
    # Losing the lock matters when the body succeeded; when it is
    # already raising, its own exception is the one to see.
    if body_raised:
        return
    if e is None:
        if lost:
            raise lost_error(name, None)
        return
    if released_in_body and not lost and isinstance(e, LockNotOwnedError):
        return  # released on purpose: nothing is left to release
    if lost or isinstance(e, LockNotOwnedError):
        raise lost_error(name, e) from e
    raise e


class LockBase(Uncopyable):
    """Base of the lock classes; see :class:`hilock.Lock`."""

    # The C functions of the family: acquire and release are each family's
    # own; the rest work on every handle's hold (a side of a read-write lock
    # overrides them). Always called on the class (type(self)._c_acquire),
    # so never bound to an instance.
    _c_acquire: ClassVar[Callable[[Any, int], int]]
    _c_release: ClassVar[Callable[[Any], int]]
    _c_free: ClassVar[Callable[[Any], None]] = _h.hilock_hold_free
    _c_set_renew: ClassVar[Callable[[Any, int, int, int], int]] = _h.py_set_auto_renew
    _c_lost: ClassVar[Callable[[Any], int]] = _h.hilock_hold_lost
    _c_validity: ClassVar[Callable[[Any], int]] = _h.hilock_hold_validity_ms
    _c_fence: ClassVar[Callable[[Any], int]] = _h.hilock_hold_fence
    _c_ttl: ClassVar[Callable[[Any], int]] = _h.hilock_hold_ttl_ms
    _c_key: ClassVar[Callable[[Any], bytes]] = _h.hilock_hold_key
    _c_token: ClassVar[Callable[[Any], bytes]] = _h.hilock_hold_token
    _kind_name = "lock"

    def __init__(self, client: Client, name: Name, timeout: Optional[float],
                 auto_renew: bool, max_hold: Optional[float],
                 on_lost: Optional[LostCallback[Any]]) -> None:
        self._client = client
        self._name = name
        self._bname = name_bytes(name)
        self._timeout = wait_seconds(timeout)
        if on_lost is not None and not callable(on_lost):
            raise InvalidArgument("on_lost must be callable")
        self._on_lost = on_lost
        self._auto_renew = bool(auto_renew)
        self._max_hold_ms = 0 if max_hold is None else seconds_to_ms(max_hold, "max_hold")
        self._notify_id = 0
        self._h: Any = None

    def _setup(self, handle: Any) -> None:
        """Adopt the C handle and configure renewal."""
        self._h = handle
        # on_lost runs for a lost grant whoever finds the loss: renewal, or
        # (auto_renew=False too) owned(), extend(), release() or the next
        # acquire after an unrenewed grant lapsed.
        if self._auto_renew or self._on_lost is not None:
            self._notify_id = _notify.register(self)
            type(self)._c_set_renew(handle, int(self._auto_renew), self._max_hold_ms,
                                    self._notify_id)

    def __del__(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h is None:
            return
        if self._notify_id:
            _notify.unregister(self._notify_id)
        if type(self)._c_validity(h) > 0:
            after = ("it lapses at its TTL" if type(self)._c_ttl(h) else
                     "it has no TTL: it stays held until force_release()")
            warnings.warn(f"hilock {self._kind_name} {self._name!r} collected while held; "
                          f"it is not released ({after})",
                          ResourceWarning, stacklevel=2)
        type(self)._c_free(h)

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "release" in cls.__dict__:
            cls.release = _counted(cls.__dict__["release"])  # type: ignore[method-assign]

    def _releases(self) -> Any:
        """This thread's count of explicit releases and its ``with`` marks."""
        t = self.__dict__.get("_release_tls")
        if t is None:
            t = self.__dict__.setdefault("_release_tls", threading.local())
        return t

    def __repr__(self) -> str:
        return f"<hilock.{type(self).__name__} {self._name!r} validity={self.validity:.3f}s>"

    # -- acquire ------------------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Acquire the lock; return True if granted.

        ``blocking=False`` tries once. Otherwise wait up to ``timeout``
        seconds (float); ``-1`` means the object's default ``timeout`` (None:
        no limit). A waiter sleeps until the holder's release wakes it (no
        polling), at most until the holder's TTL runs out. Other threads run
        meanwhile, and Ctrl-C interrupts the wait.
        """
        if not blocking:
            if timeout != -1:
                raise InvalidArgument("can't specify a timeout for a non-blocking call")
            wait: Optional[float] = 0.0
        elif timeout == -1:
            wait = self._timeout
        else:
            wait = wait_seconds(timeout)
        hook = _tracer_hook
        if hook is None:
            return self._acquire(wait)
        return hook.acquire(self, wait)  # type: ignore[no-any-return]

    def _acquire(self, wait: Optional[float]) -> bool:
        return self._c_call_acquire(wait)

    def _c_call_acquire(self, wait: Optional[float]) -> bool:
        # Under gevent or eventlet a wait runs on a pool thread (_green.py).
        return _green.wait(self._c_attempt, self._c_undo, wait)

    def _c_undo(self, granted: bool) -> None:
        """Give back a grant the caller did not wait for."""
        if granted:
            try:
                type(self)._c_release(self._h)
            except LockError:
                pass

    def _c_attempt(self, wait: Optional[float]) -> bool:
        wait_ms = -1 if wait is None else math.ceil(wait * 1000)
        held_before = type(self)._c_validity(self._h) > 0
        acquire = type(self)._c_acquire
        if _green.patched():
            # The greenlet is the grant's owner, not the pool thread the
            # wait runs on (deadlock detection's owners).
            acquire = _green.as_caller(acquire)
        try:
            return acquire(self._h, wait_ms) == _h.HILOCK_OK
        except LockError:
            raise  # the C call failed closed: nothing was granted
        except BaseException:
            # Ctrl-C racing a first grant: never leave it held behind the
            # caller's back. Not when this object held the lock before the
            # call (a re-entry, granted at once, never waits): releasing
            # would leave the level the caller already holds.
            if not held_before and type(self)._c_validity(self._h) > 0:
                try:
                    type(self)._c_release(self._h)
                except LockError:
                    pass
            raise

    @_counted
    def release(self) -> None:
        """Release the lock (owner-checked in one script). Raises
        LockNotOwnedError if this holder does not hold it (never acquired,
        expired, or taken by another owner); nothing is deleted then."""
        type(self)._c_release(self._h)

    # -- loss -----------------------------------------------------------------

    @property
    def lost(self) -> bool:
        """True once renewal found the hold lost (taken by another owner, or
        not renewable before its validity ran out), or ``owned()`` or
        ``extend()`` found it gone; also when the last grant's ``release()``
        found it gone (it lapsed, or another owner holds it). False again
        from the next grant on."""
        return bool(type(self)._c_lost(self._h))

    def _notify_lost(self) -> None:
        hook = _tracer_hook
        if hook is not None:
            hook.lost(self)
        if self._on_lost is not None:
            self._on_lost(self)

    # -- properties -------------------------------------------------------------

    @property
    def name(self) -> Name:
        return self._name

    @property
    def key(self) -> bytes:
        """The Redis key that holds the lock."""
        return type(self)._c_key(self._h)

    @property
    def ttl(self) -> Optional[float]:
        """The TTL in seconds (None: no expiry)."""
        ms = type(self)._c_ttl(self._h)
        return ms / 1000.0 if ms else None

    @property
    def timeout(self) -> Optional[float]:
        """The default wait of ``acquire()`` and ``with`` (None: no limit)."""
        return self._timeout

    @property
    def auto_renew(self) -> bool:
        return self._auto_renew

    def _set_delay(self, delay_ms: int) -> None:
        """After _setup: the handle's lock delay (0: none)."""
        if delay_ms:
            _h.hilock_hold_set_lock_delay(self._h, delay_ms)

    @property
    def lock_delay(self) -> float:
        """Seconds after a grant ends without its holder's release (expiry,
        a lost or killed holder) in which the name is granted to no one; 0:
        none, or a type without a delay (see ``lock_delay`` of
        :meth:`Client.lock`)."""
        return float(_h.hilock_hold_lock_delay_ms(self._h)) / 1000

    @property
    def fence(self) -> Optional[int]:
        """The fencing token of the current or last grant (strictly increasing
        per lock name), or None before the first grant."""
        return type(self)._c_fence(self._h) or None

    @property
    def validity(self) -> float:
        """Seconds of validity left for the current grant, measured locally on
        the monotonic clock less a drift allowance (no round trip); 0.0 if not
        held or lost, inf for a held simple lock."""
        ms = type(self)._c_validity(self._h)
        return math.inf if ms >= (1 << 62) else ms / 1000.0

    def store(self, store: Optional[FencedStore] = None, *,
              name: Optional[Name] = None) -> BoundStore:
        """The fenced store (``store``, default ``client.fenced_store()``)
        with this grant's fence bound: ``lk.store().incrby("stock", -1)``.
        A multi-key lock names whose fence (``name``). Raises
        LockNotOwnedError when nothing is held."""
        if self._h is None or type(self)._c_validity(self._h) <= 0:
            raise LockNotOwnedError(f"{self._name!r} is not held by this object: "
                                    "no fence to bind", _h.HILOCK_ENOTOWNED)
        fence: Any = self.fence
        if isinstance(fence, dict):
            if name is None:
                raise InvalidArgument("a multi-key lock has one fence per name: "
                                      "pass name=")
            fence = fence.get(name)
        if not fence:
            raise UnsupportedError(f"a {self._kind_name} hold has no fence (shared holders "
                                   "have no order): guard fenced data with an exclusive "
                                   "lock", _h.HILOCK_ENOTSUP)
        if store is None:
            client = getattr(self, "_client", None)
            if client is None:
                raise InvalidArgument("this lock has no client of its own (Redlock): "
                                      "pass store=hilock.FencedStore(url)")
            store = client.fenced_store()
        return store.bind(fence)

    # -- handing the grant over ------------------------------------------------

    def export(self) -> str:
        """Hand the grant over: an opaque text that :meth:`Client.adopt`, in
        another thread, process or asyncio task, turns into an object of
        this class holding the grant (same owner token and fence). This
        object stops renewing and forgets the grant (``validity`` 0, its
        ``release()`` raises LockNotOwnedError). The text is a capability:
        whoever has it can release the lock. Keep it secret (never log it).
        Raises LockNotOwnedError if nothing is held, and
        :class:`hilock.errors.NotTransferable` (a ValueError) for a
        reentrant or read-write lock, whose owner is the thread."""
        return self._c_export(self._h)

    def _c_export(self, handle: Any) -> str:
        try:
            data: bytes = _h.py_hold_export(handle)
        except UnsupportedError as e:
            raise NotTransferable(str(e), e.code) from None
        hook = _tracer_hook
        if hook is not None:
            hook.exported(self, handle)
        return data.decode("ascii")

    def _adopted(self, handle: Any) -> None:
        """Hold handle's adopted grant in place of this new object's handle."""
        old, self._h = self._h, handle
        if old is not None:
            type(self)._c_free(old)
        if self._auto_renew or self._on_lost is not None:
            type(self)._c_set_renew(handle, int(self._auto_renew), self._max_hold_ms,
                                    self._notify_id)

    # -- context manager --------------------------------------------------------

    def __enter__(self: _L) -> _L:
        if not self.acquire():
            raise LockTimeout(f"could not acquire {self._name!r} within {self._timeout} s")
        self._entered()
        return self

    def _entered(self) -> None:
        """A ``with`` block begins on this thread's grant: __exit__ tells a
        release made in the body from one it makes itself."""
        t = self._releases()
        t.marks = getattr(t, "marks", [])
        t.marks.append(getattr(t, "n", 0))

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        t = self._releases()
        marks = getattr(t, "marks", [])
        mark = marks.pop() if marks else None
        # The body released the lock itself (release() succeeded in it).
        released_in_body = mark is not None and getattr(t, "n", 0) > mark
        lost = self.lost
        try:
            self.release()
        except LockError as e:
            raise_on_leaving(self._name, e, exc_type is not None, lost, released_in_body)
        else:
            raise_on_leaving(self._name, None, exc_type is not None, lost, released_in_body)


class ExclusiveBase(LockBase):
    """Base of the exclusive lock classes with one holder per object
    (:class:`hilock.Lock`, :class:`hilock.FairLock`).

    One object stands for one holder, as a ``threading.Lock``: threads of
    this process that acquire the same object queue on a local mutex first
    (the C handle serves one thread at a time); other objects, in this or
    other processes, contend through Redis.
    """

    def __init__(self, client: Client, name: Name, timeout: Optional[float],
                 auto_renew: bool, max_hold: Optional[float],
                 on_lost: Optional[LostCallback[Any]]) -> None:
        super().__init__(client, name, timeout, auto_renew, max_hold, on_lost)
        self._local = threading.Lock()
        # Whether the thread that has the local turn got a grant; set and
        # read under _turn.
        self._granted = False
        self._turn = threading.Lock()

    def _acquire(self, wait: Optional[float]) -> bool:
        start = time.monotonic()
        while not self._local.acquire(True, self._turn_wait(wait, start)):
            if wait is not None and time.monotonic() - start >= wait:
                return False
        try:
            left = None if wait is None else max(0.0, wait - (time.monotonic() - start))
            if self._c_call_acquire(left):
                with self._turn:
                    self._granted = True
                return True
        except BaseException:
            self._local.release()
            raise
        self._local.release()
        return False

    def _turn_wait(self, wait: Optional[float], start: float) -> float:
        """Free the local turn of a grant that lapsed or was lost (the object
        holds nothing any more: any thread may acquire through it, the one
        that held it too); then how long to wait for the turn: no longer than
        the current grant may last (it may lapse too), nor than what is left
        of wait (-1: no limit)."""
        with self._turn:
            if self._granted and type(self)._c_validity(self._h) <= 0:
                self._end_turn()
            ms = type(self)._c_validity(self._h) if self._granted else -1
        if ms >= (1 << 62):
            turn = -1.0  # a simple lock's grant never lapses
        elif ms >= 0:
            turn = ms / 1000.0 + 0.01
        else:
            turn = 0.2  # another thread's acquire is under way: it may be granted
        if wait is None:
            return turn
        left = max(0.0, wait - (time.monotonic() - start))
        return left if turn < 0 else min(turn, left)

    def _hold_turn(self) -> bool:
        """Before a call that may end the grant (its validity reads 0 from
        then on): no waiting thread may take the local turn meanwhile, and
        the call's thread gives it up after. Whether a grant had the turn,
        for _turn_back."""
        with self._turn:
            granted, self._granted = self._granted, False
        return granted

    def _turn_back(self, granted: bool) -> None:
        """The call after _hold_turn failed and the grant is still held."""
        with self._turn:
            self._granted = granted

    def _end_turn(self) -> None:
        """The object's grant ended: free the local turn (call with _turn)."""
        self._granted = False
        if self._local.locked():
            try:
                self._local.release()
            except RuntimeError:
                pass

    def release(self) -> None:
        """Release the lock (owner-checked in one script).

        Raises LockNotOwnedError if this object does not hold it, or if it
        expired or was taken by another owner; nothing is deleted then.
        """
        if not type(self)._c_token(self._h):
            # No grant on this object: leave alone any thread that is
            # waiting in acquire() on it.
            raise LockNotOwnedError("release: this lock object does not hold the lock",
                                    _h.HILOCK_ENOTOWNED)
        granted = self._hold_turn()
        try:
            type(self)._c_release(self._h)
        except LockNotOwnedError:
            self._drop_local()
            raise
        except BaseException:
            # Any other error (Redis unreachable) keeps the grant: retry later.
            self._turn_back(granted)
            raise
        self._drop_local()

    def export(self) -> str:
        if self._h is None or not type(self)._c_token(self._h):
            raise LockNotOwnedError("export: this lock object does not hold the lock",
                                    _h.HILOCK_ENOTOWNED)
        granted = self._hold_turn()
        try:
            text = self._c_export(self._h)
        except BaseException:
            self._turn_back(granted)
            raise
        self._drop_local()
        return text

    export.__doc__ = LockBase.export.__doc__

    def _adopted(self, handle: Any) -> None:
        super()._adopted(handle)
        self._local.acquire()  # a new object: nobody has the turn
        with self._turn:
            self._granted = True

    @property
    def token(self) -> Optional[str]:
        """The owner token of the current grant (32 hex chars), or None."""
        t = type(self)._c_token(self._h)
        return t.decode() if t else None

    def _drop_local(self) -> None:
        with self._turn:
            self._end_turn()


_Q = TypeVar("_Q", bound="QueuedBase")


class QueuedBase(ExclusiveBase):
    """Base of the exclusive locks whose waiters queue and prove they are
    alive by re-checking within a heartbeat window
    (:class:`hilock.FairLock`, :class:`hilock.SequentialLock`)."""

    # The family's C functions besides acquire and release (called on the
    # class, as LockBase's): hilock_<_kind_name>_<verb>, set for each
    # subclass by __init_subclass__.
    _c_new: ClassVar[Callable[..., Any]]
    _c_waiters: ClassVar[Callable[[Any], int]]
    _c_extend: ClassVar[Callable[[Any, int, int], int]]
    _c_renew: ClassVar[Callable[[Any], int]]
    _c_heartbeat_ms: ClassVar[Callable[[Any], int]]
    _c_set_heartbeat: ClassVar[Callable[[Any, int], int]]
    # The family's own calls; its verbs are the hold's (one set for every family).
    _C_OWN = ("new", "waiters")
    _C_HOLD = ("acquire", "release", "extend", "renew", "heartbeat_ms", "set_heartbeat")

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        for verb in cls._C_OWN:
            setattr(cls, "_c_" + verb, getattr(_h, f"hilock_{cls._kind_name}_{verb}"))
        for verb in cls._C_HOLD:
            setattr(cls, "_c_" + verb, getattr(_h, f"hilock_hold_{verb}"))

    def __init__(self: _Q, client: Client, name: Name, ttl: float, timeout: Optional[float],
                 auto_renew: bool = True, max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[_Q]] = None,
                 lock_delay: float = 0) -> None:
        delay_ms = delay_to_ms(lock_delay)
        super().__init__(client, name, timeout, auto_renew, max_hold, on_lost)
        self._setup(client._new(type(self)._c_new, self._bname, seconds_to_ms(ttl, "ttl")))
        self._set_delay(delay_ms)

    def owned(self) -> bool:
        """Whether this object's grant still holds the lock (one round trip)."""
        return bool(_h.hilock_hold_owned(self._h))

    def waiters(self) -> int:
        """How many live waiters are queued behind the holder (one round
        trip)."""
        return int(type(self)._c_waiters(self._h))

    def extend(self, seconds: float, replace: bool = False) -> None:
        """Add ``seconds`` to the holder's remaining TTL (the sequential
        lock's: its session), or set it (``replace=True``), only while still
        owned. Raises LockNotOwnedError otherwise."""
        type(self)._c_extend(self._h, seconds_to_ms(seconds, "extension"), 1 if replace else 0)

    def renew(self) -> None:
        """Reset the holder's TTL (session) to the lock's ``ttl``."""
        type(self)._c_renew(self._h)

    @property
    def heartbeat(self) -> float:
        """The heartbeat window: seconds a waiter may go without a re-check
        before it is dropped from the queue; it re-checks every third of
        that. Defaults to ``ttl``, at most 5 s (at least 0.5 s). Settable;
        applies from the next re-check."""
        return type(self)._c_heartbeat_ms(self._h) / 1000.0

    @heartbeat.setter
    def heartbeat(self, seconds: float) -> None:
        type(self)._c_set_heartbeat(self._h, seconds_to_ms(seconds, "heartbeat"))
