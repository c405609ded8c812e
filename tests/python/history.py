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
import time
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


class ConcurrencyError(AssertionError):
    """More windows than allowed were open at the same instant."""

    def __init__(self, message: str, crowds: Sequence[Tuple[float, Tuple[Interval, ...]]]) -> None:
        super().__init__(message)
        self.crowds = list(crowds)


def check_max_concurrent(intervals: Iterable[Interval], n: int, max_report: int = 5) -> int:
    """Raise ConcurrencyError, with details, if more than n windows were open
    at any instant; return the largest number open at once.

    A sweep over start and end times, with the overlap rule of
    check_no_overlap: windows that merely touch (one ends exactly when
    another starts) are not open together, and a window of zero length counts
    only inside another window's interior.
    """
    ivs = list(intervals)
    for iv in ivs:
        if iv.end < iv.start:
            raise ValueError(f"interval ends before it starts: {iv}")
    # At one instant: ends first, then zero-length windows (which see only
    # the windows open across that instant), then starts.
    END, POINT, START = 0, 1, 2
    events = []
    for i, iv in enumerate(ivs):
        if iv.end == iv.start:
            events.append((iv.start, POINT, i))
        else:
            events.append((iv.start, START, i))
            events.append((iv.end, END, i))
    events.sort()
    open_: set = set()
    peak = 0
    crowds: List[Tuple[float, Tuple[Interval, ...]]] = []
    for t, kind, i in events:
        if kind == END:
            open_.discard(i)
            continue
        crowd = open_ | {i}
        if kind == START:
            open_.add(i)
        peak = max(peak, len(crowd))
        if len(crowd) > n:
            crowds.append((t, tuple(sorted((ivs[j] for j in crowd), key=lambda v: v.start))))
    if crowds:
        t0 = min(iv.start for iv in ivs)
        lines = [f"{len(crowds)} time(s) more than {n} of {len(ivs)} windows were open at once "
                 f"(at most {peak}; times relative to the first start):"]
        for t, crowd in crowds[:max_report]:
            lines.append(f"  at {(t - t0) * 1000:.3f} ms, {len(crowd)} open:")
            lines.extend(f"    {_fmt(iv, t0)}" for iv in crowd)
        if len(crowds) > max_report:
            lines.append(f"  ... and {len(crowds) - max_report} more")
        raise ConcurrencyError("\n".join(lines), crowds)
    return peak

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

    def record_interval(self, iv: Interval) -> None:
        self.r.rpush(self.key, iv.to_json())

    def load(self) -> List[Interval]:
        return [Interval.from_json(x) for x in self.r.lrange(self.key, 0, -1)]


# -- validity-bounded windows ----------------------------------------------
#
# A holder that is paused (SIGSTOP, a long GC, a swapped-out VM) may come
# back after its lock expired and another holder took it: its own
# acquire-to-release span then overlaps the next holder's, and nothing can
# prevent that. What the lock does promise is that the holder's *validity*
# (the local, drift-adjusted estimate of how long the grant lasts, moved on
# by every renewal) never overlaps another holder's grant. So a holder that
# may be paused records [grant, min(release, end of its last known
# validity)] instead of [grant, release].

class ValidityTracker:
    """The end of a lock's validity, sampled while the holder runs.

    ``sample()`` reads the monotonic clock and then ``lock.validity``; the
    validity is measured after the clock was read, so ``t + validity`` never
    lies beyond the real end of the validity (it is short of it by the
    moment between the two reads and the millisecond rounding). A sample
    with no validity left (lapsed, lost, or taken after a pause) adds
    nothing. ``until`` is the latest end seen, or None.
    """

    def __init__(self, lock) -> None:
        self.lock = lock
        self.until: Optional[float] = None

    def sample(self) -> Optional[float]:
        t = time.monotonic()
        v = self.lock.validity
        if 0 < v < float("inf"):
            end = t + v
            if self.until is None or end > self.until:
                self.until = end
        return self.until

    def window(self, start: float, release: float, fence: Optional[int] = None,
               pid: Optional[int] = None) -> Interval:
        """[start, min(release, until)] as an Interval (start if nothing
        was ever valid)."""
        end = start if self.until is None else min(release, self.until)
        return Interval(os.getpid() if pid is None else pid, start, max(start, end), fence)

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
