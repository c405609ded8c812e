"""Statistics of a client (or a Redlock) as a dict.

The C core counts with atomic counters (hilock/stats.h); this turns a
snapshot into plain Python values: counters as ints, the wait and hold
histograms as Prometheus-style cumulative buckets in seconds.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple, Union

from . import _hilock as _h

COUNTERS = ("acquired", "busy", "timeouts", "waits", "errors", "lost", "renewals",
            "renewal_failures", "reconnects", "redirections", "failovers")

# Upper bounds of the buckets in seconds (1-2-5 steps, 100 us to 100 s),
# then +Inf.
BOUNDS: Tuple[float, ...] = tuple(us / 1e6 for us in _h.py_stats_bounds()) + (float("inf"),)

Histogram = Dict[str, Any]
Stats = Dict[str, Union[int, Histogram]]


def _histogram(raw: Tuple[int, int, List[int]]) -> Histogram:
    count, sum_us, buckets = raw
    cumulative: List[Tuple[float, int]] = []
    total = 0
    for le, n in zip(BOUNDS, buckets):
        total += n
        cumulative.append((le, total))
    return {"buckets": cumulative, "sum": sum_us / 1e6, "count": count}


def from_raw(raw: Tuple[Any, ...]) -> Stats:
    """The dict of :meth:`hilock.Client.stats` from the C snapshot."""
    out: Stats = {name: int(v) for name, v in zip(COUNTERS, raw)}
    out["wait_seconds"] = _histogram(raw[len(COUNTERS)])
    out["hold_seconds"] = _histogram(raw[len(COUNTERS) + 1])
    return out
