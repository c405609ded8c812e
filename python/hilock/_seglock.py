"""The segmented lock, for hot inventory."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

from . import _hilock as _h
from ._base import ExclusiveBase, LostCallback
from ._util import Name, seconds_to_ms
from .errors import InvalidArgument, LockError, SoldOut

if TYPE_CHECKING:
    from ._client import Client

SEGMENTS_MAX = 1024
STOCK_MAX = 1 << 50


def _count(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidArgument(f"{what} must be {lo}..{hi}, got {value}")
    return value


def _segment_key(h: Any) -> bytes:
    """The key of the held (or last held) segment; before the first grant,
    the stock hash."""
    return _h.hilock_segmented_lock_key(h, _h.hilock_segmented_lock_segment(h))


class SegmentedLock(ExclusiveBase):
    """A resource split into ``segments`` parts, each with its own exclusive
    lock and its own share of the stock, so up to ``segments`` holders sell
    at once instead of one.

    ``acquire()`` takes any free segment that still has stock: one script
    tries the segments from a random start and grants the first free,
    non-empty one (one round trip). It returns True when granted
    (:attr:`segment` and :attr:`fence` say which), False on timeout, and
    raises :class:`hilock.SoldOut` when every segment is empty, so callers
    stop instead of waiting. ``with`` raises LockTimeout or SoldOut.

    While holding, :meth:`take` decrements the held segment's stock in one
    script that checks the holder's token: stock moves only under the lock,
    and a segment that reaches 0 is skipped from then on. Load the stock
    with :meth:`stock_init` (split evenly) or :meth:`stock_set`. Without
    any stock, the object is a plain ``segments``-way lock.

    One object stands for one holder of one segment, as a
    ``threading.Lock``; threads sharing an object queue on a local mutex.
    """

    _c_acquire = _h.hilock_hold_acquire
    _c_release = _h.hilock_hold_release
    _c_key = _segment_key
    _kind_name = "segmented_lock"

    def __init__(self, client: Client, name: Name, segments: int, ttl: float,
                 timeout: Optional[float], auto_renew: bool = True,
                 max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[SegmentedLock]] = None) -> None:
        super().__init__(client, name, timeout, auto_renew, max_hold, on_lost)
        _count(segments, "segments", 1, SEGMENTS_MAX)
        self._setup(client._new(_h.hilock_segmented_lock_new, self._bname, segments,
                                      seconds_to_ms(ttl, "ttl")))

    def _c_attempt(self, wait: Optional[float]) -> bool:
        wait_ms = -1 if wait is None else math.ceil(wait * 1000)
        try:
            rc = _h.hilock_hold_acquire(self._h, wait_ms)
        except BaseException:
            # Ctrl-C (or any exception) racing the grant: never leave a
            # segment held behind the caller's back.
            if _h.hilock_hold_validity_ms(self._h) > 0:
                try:
                    _h.hilock_hold_release(self._h)
                except LockError:
                    pass
            raise
        if rc == _h.HILOCK_SOLDOUT:
            raise SoldOut(f"every segment of {self._name!r} is empty (sold out)",
                          _h.HILOCK_SOLDOUT)
        return rc == _h.HILOCK_OK

    # -- the held segment -----------------------------------------------------

    @property
    def segment(self) -> Optional[int]:
        """The segment of the current or last grant (0..segments-1), or
        None before the first grant."""
        seg = _h.hilock_segmented_lock_segment(self._h)
        return None if seg == _h.HILOCK_SEGMENT_NONE else seg

    @property
    def segments(self) -> int:
        return int(_h.hilock_segmented_lock_segments(self._h))

    @property
    def key(self) -> bytes:
        """The Redis key of the held (or last held) segment; before the
        first grant, the stock hash."""
        return type(self)._c_key(self._h)

    def segment_key(self, segment: int) -> bytes:
        """The Redis key of one segment's lock."""
        _count(segment, "segment", 0, self.segments - 1)
        return _h.hilock_segmented_lock_key(self._h, segment)

    def take(self, n: int = 1, partial: bool = False) -> int:
        """Take ``n`` units from the held segment's stock, in one script that
        checks this object still holds the segment; return the units taken.
        If fewer than ``n`` are left, take nothing (0) or, with
        ``partial=True``, what is left. Raises LockNotOwnedError if the
        segment is no longer held (nothing moves), InvalidArgument if it has
        no stock. On a client with ``wait_replicas`` a take the replicas did
        not acknowledge is put back and NotEnoughReplicas raised."""
        _count(n, "n", 1, STOCK_MAX)
        return int(_h.hilock_segmented_lock_take(self._h, n, 1 if partial else 0)[0])

    def owned(self) -> bool:
        """Whether this object's grant still holds its segment (one round
        trip)."""
        return bool(_h.hilock_hold_owned(self._h))

    def extend(self, seconds: float, replace: bool = False) -> None:
        """Add ``seconds`` to the held segment's TTL, or set it
        (``replace=True``), only while still owned."""
        _h.hilock_hold_extend(self._h, seconds_to_ms(seconds, "extension"),
                                 1 if replace else 0)

    def renew(self) -> None:
        """Reset the held segment's TTL to ``ttl``."""
        _h.hilock_hold_renew(self._h)

    # -- the whole resource ----------------------------------------------------

    def locked(self) -> bool:
        """Whether any segment is held, by anyone (one round trip)."""
        return self.segments_held() > 0

    def segments_held(self) -> int:
        """How many of the ``segments`` are held now, by any holder in any
        process, this object included: one round trip that counts the live
        segment locks on the server. Not this object's own hold, which is
        at most one segment (see :meth:`owned` and :attr:`segment`)."""
        return int(_h.hilock_segmented_lock_segments_held(self._h))

    def stock_init(self, total: int) -> None:
        """Load ``total`` units split evenly over the segments (the first
        ``total % segments`` get one more), replacing any stock. Set-up
        for operators: do it before selling."""
        _h.hilock_segmented_lock_stock_init(self._h, _count(total, "total", 0, STOCK_MAX))

    def stock_set(self, segment: int, units: int) -> None:
        """Set one segment's stock (0 marks it empty)."""
        _count(segment, "segment", 0, self.segments - 1)
        _h.hilock_segmented_lock_stock_set(self._h, segment, _count(units, "units", 0, STOCK_MAX))

    def stock(self, segment: Optional[int] = None) -> Optional[int]:
        """Units left in one segment, or in all (``segment=None``); None if
        no stock was loaded (one round trip)."""
        if segment is None:
            segment = _h.HILOCK_SEGMENT_ALL
        else:
            _count(segment, "segment", 0, self.segments - 1)
        n = int(_h.hilock_segmented_lock_stock(self._h, segment))
        return None if n < 0 else n

    def sold_out(self) -> bool:
        """Whether stock was loaded and every segment is empty (one round
        trip)."""
        return self.stock() == 0
