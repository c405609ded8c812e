"""A history checker for mutual exclusion.

Every holder records one interval per critical section: its pid, the time
right after ``acquire()`` returned and the time right before ``release()``
was called, both on ``time.monotonic()``. On Linux that is CLOCK_MONOTONIC,
one clock for the whole machine, so intervals recorded by different
processes are comparable.

The recorded window lies inside the real holding time, so two recorded
windows that overlap prove that two holders were inside the critical section
at once. Windows that merely touch (one ends exactly when the next starts)
are not an overlap.

Intervals go to a Redis list (RPUSH is atomic, so concurrent writers never
interleave) as JSON, after the holder has released: the recording itself is
never inside the measured window.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence, Tuple


@dataclass(frozen=True)
class Interval:
    pid: int
    start: float  # monotonic seconds, just after acquire returned
    end: float    # monotonic seconds, just before release was called
    fence: Optional[int] = None

    def to_json(self) -> str:
        return json.dumps({"pid": self.pid, "start": self.start, "end": self.end,
                           "fence": self.fence})

    @classmethod
    def from_json(cls, text) -> "Interval":
        d = json.loads(text)
        return cls(int(d["pid"]), float(d["start"]), float(d["end"]),
                   None if d.get("fence") is None else int(d["fence"]))


class OverlapError(AssertionError):
    """Two or more critical sections overlapped in time."""

    def __init__(self, message: str, pairs: Sequence[Tuple[Interval, Interval]]) -> None:
        super().__init__(message)
        self.pairs = list(pairs)


class FenceError(AssertionError):
    """Fencing tokens did not strictly increase in grant order."""


def _fmt(iv: Interval, t0: float) -> str:
    fence = "" if iv.fence is None else f" fence={iv.fence}"
    return (f"pid={iv.pid} [{(iv.start - t0) * 1000:.3f} ms, "
            f"{(iv.end - t0) * 1000:.3f} ms]{fence}")


def check_no_overlap(intervals: Iterable[Interval], max_report: int = 10) -> int:
    """Raise OverlapError, with details, if any two windows overlap.

    Returns the number of intervals checked. Every interval is compared with
    the one that reaches furthest among those that started earlier, so a
    short window hidden inside a long one is found as well as neighbours.
    """
    ivs = sorted(intervals, key=lambda iv: (iv.start, iv.end))
    for iv in ivs:
        if iv.end < iv.start:
            raise ValueError(f"interval ends before it starts: {iv}")
    if not ivs:
        return 0
    t0 = ivs[0].start
    pairs: List[Tuple[Interval, Interval]] = []
    reach: Optional[Interval] = None  # the earlier interval that ends last
    for iv in ivs:
        if reach is not None and iv.start < reach.end:
            pairs.append((reach, iv))
        if reach is None or iv.end > reach.end:
            reach = iv
    if pairs:
        lines = [f"{len(pairs)} overlapping critical section(s) among {len(ivs)} "
                 f"(times relative to the first acquire):"]
        for a, b in pairs[:max_report]:
            lines.append(f"  {_fmt(a, t0)}  overlaps  {_fmt(b, t0)} by "
                         f"{(min(a.end, b.end) - b.start) * 1000:.3f} ms")
        if len(pairs) > max_report:
            lines.append(f"  ... and {len(pairs) - max_report} more")
        raise OverlapError("\n".join(lines), pairs)
    return len(ivs)


def check_fences_increase(intervals: Iterable[Interval]) -> List[int]:
    """Raise FenceError unless the fences, in grant order, strictly increase.

    Returns the fences in grant order.
    """
    ivs = sorted(intervals, key=lambda iv: iv.start)
    fences = [iv.fence for iv in ivs]
    if any(f is None for f in fences):
        raise FenceError("an interval has no fencing token")
    for prev, cur in zip(ivs, ivs[1:]):
        if not cur.fence > prev.fence:  # type: ignore[operator]
            t0 = ivs[0].start
            raise FenceError(f"fence did not increase: {_fmt(prev, t0)} then {_fmt(cur, t0)}")
    return fences  # type: ignore[return-value]


class RedisHistory:
    """Intervals in a Redis list (one JSON document per element)."""

    def __init__(self, redis_client, key: str = "history") -> None:
        self.r = redis_client
        self.key = key

    def record(self, start: float, end: float, fence: Optional[int] = None,
               pid: Optional[int] = None) -> None:
        iv = Interval(os.getpid() if pid is None else pid, start, end, fence)
        self.r.rpush(self.key, iv.to_json())

    def load(self) -> List[Interval]:
        return [Interval.from_json(x) for x in self.r.lrange(self.key, 0, -1)]


def check_rw_exclusion(reads: Iterable[Interval], writes: Iterable[Interval],
                       max_report: int = 10) -> int:
    """Raise OverlapError if a write window overlaps any other window (read
    or write); read windows may overlap each other.

    Returns the number of overlapping pairs of read windows, so a caller can
    also prove that readers really shared the lock.
    """
    rs = sorted(reads, key=lambda iv: (iv.start, iv.end))
    ws = sorted(writes, key=lambda iv: (iv.start, iv.end))
    for iv in rs + ws:
        if iv.end < iv.start:
            raise ValueError(f"interval ends before it starts: {iv}")
    if not rs and not ws:
        return 0
    t0 = min(iv.start for iv in rs + ws)
    pairs: List[Tuple[Interval, Interval]] = []
    lines: List[str] = []
    for i, w in enumerate(ws):
        others = [(iv, "read") for iv in rs] + [(iv, "write") for iv in ws[i + 1:]]
        for iv, kind in others:
            if iv.start < w.end and w.start < iv.end:
                pairs.append((w, iv))
                if len(lines) < max_report:
                    lines.append(f"  write {_fmt(w, t0)}  overlaps  {kind} {_fmt(iv, t0)}")
    if pairs:
        raise OverlapError(f"{len(pairs)} write window(s) overlapped other windows "
                           f"(times relative to the first acquire):\n" + "\n".join(lines),
                           pairs)
    shared = 0
    for i, a in enumerate(rs):
        for b in rs[i + 1:]:
            if b.start >= a.end:
                break
            shared += 1
    return shared
