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
    ticket: Optional[int] = None  # a fair lock's request order (enqueue)

    def to_json(self) -> str:
        return json.dumps({"pid": self.pid, "start": self.start, "end": self.end,
                           "fence": self.fence, "ticket": self.ticket})

    @classmethod
    def from_json(cls, text) -> "Interval":
        d = json.loads(text)
        return cls(int(d["pid"]), float(d["start"]), float(d["end"]),
                   None if d.get("fence") is None else int(d["fence"]),
                   None if d.get("ticket") is None else int(d["ticket"]))


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


class FifoError(AssertionError):
    """Grants did not follow the request order."""


def check_fifo(intervals: Iterable[Interval], max_report: int = 10) -> List[int]:
    """Raise FifoError unless the grants, in grant order (fence order), have
    strictly increasing tickets (request order): nobody was served before
    someone who asked earlier. Returns the tickets in grant order."""
    ivs = sorted(intervals, key=lambda iv: iv.fence if iv.fence is not None else -1)
    if any(iv.fence is None or iv.ticket is None for iv in ivs):
        raise FifoError("an interval has no fence or no ticket")
    bad = [(a, b) for a, b in zip(ivs, ivs[1:]) if not b.ticket > a.ticket]  # type: ignore[operator]
    if bad:
        lines = [f"{len(bad)} grant(s) out of request order among {len(ivs)}:"]
        for a, b in bad[:max_report]:
            lines.append(f"  fence {a.fence} went to ticket {a.ticket} (pid={a.pid}), "
                         f"then fence {b.fence} to ticket {b.ticket} (pid={b.pid})")
        raise FifoError("\n".join(lines))
    return [iv.ticket for iv in ivs]  # type: ignore[misc]


class RedisHistory:
    """Intervals in a Redis list (one JSON document per element)."""

    def __init__(self, redis_client, key: str = "history") -> None:
        self.r = redis_client
        self.key = key

    def record(self, start: float, end: float, fence: Optional[int] = None,
               pid: Optional[int] = None, ticket: Optional[int] = None) -> None:
        iv = Interval(os.getpid() if pid is None else pid, start, end, fence, ticket)
        self.r.rpush(self.key, iv.to_json())

    def load(self) -> List[Interval]:
        return [Interval.from_json(x) for x in self.r.lrange(self.key, 0, -1)]
