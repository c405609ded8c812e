"""Prometheus metrics of a hilock client (needs ``prometheus_client``).

    import hilock, hilock.metrics
    client = hilock.Client()
    hilock.metrics.register(client, name="orders")

adds a collector to prometheus_client's default registry (or ``registry``)
that reads :meth:`hilock.Client.stats` at every scrape: counters
``<prefix>_acquired_total``, ``_busy_total``, ``_timeouts_total``,
``_waits_total``, ``_errors_total``, ``_lost_total``, ``_renewals_total``,
``_renewal_failures_total``, ``_reconnects_total``,
``_redirections_total``, ``_failovers_total`` and the histograms
``<prefix>_acquire_wait_seconds`` and ``<prefix>_hold_seconds``. With
``name``, every sample carries the label ``client="<name>"``; a registry
takes one collector per prefix and name. Once its client is closed, a
collector's series end: a scrape never fails because of it.
"""
from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Dict, Iterator, List, Optional, Protocol, Tuple

try:
    from prometheus_client.core import (
        REGISTRY,
        CounterMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector, CollectorRegistry
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "hilock.metrics needs the prometheus_client package: "
        "pip install prometheus_client") from e

from . import _hilock as _h
from ._stats import COUNTERS
from .errors import ConnectionError

__all__ = ["HilockCollector", "register"]

_HELP = {
    "acquired": "Grants of locks (re-entries included)",
    "busy": "One-shot acquires refused because the lock was held",
    "timeouts": "Acquires that waited and ran out of time",
    "waits": "Acquires that had to wait",
    "errors": "Acquires that ended in an error",
    "lost": "Grants found lost (expired, taken or deleted)",
    "renewals": "Successful renewals of auto-renewed locks",
    "renewal_failures": "Renewals that could not reach or confirm the server",
    "reconnects": "Broken connections replaced",
    "redirections": "Redis Cluster MOVED and ASK redirections followed",
    "failovers": "Requests that found the master moved (Sentinel)",
}


class _HasStats(Protocol):
    def stats(self) -> Dict[str, Any]: ...


_log = logging.getLogger("hilock")
# The collectors register() put on each registry, to refuse a second one
# with the same prefix and name (its samples would repeat the first's).
_mu = threading.Lock()
_on: weakref.WeakKeyDictionary[CollectorRegistry, List[HilockCollector]] = \
    weakref.WeakKeyDictionary()


class HilockCollector(Collector):
    """Reads ``source.stats()`` (a :class:`hilock.Client`, a
    :class:`hilock.asyncio.Client` or a :class:`hilock.Redlock`) at every
    scrape."""

    def __init__(self, source: _HasStats, prefix: str = "hilock",
                 name: Optional[str] = None) -> None:
        self._source = source
        self._prefix = prefix
        self._labels: List[str] = ["client"] if name is not None else []
        self._values: List[str] = [name] if name is not None else []
        self._failed = False

    @property
    def key(self) -> Tuple[str, Optional[str]]:
        """(prefix, name): what tells this collector's samples apart."""
        return self._prefix, (self._values[0] if self._values else None)

    def _stats(self) -> Optional[Dict[str, Any]]:
        """The source's stats, or None once it is closed (its series end)
        or if reading them failed (logged once on the "hilock" logger): a
        collector that raised would fail the whole scrape."""
        try:
            s = self._source.stats()
        except ConnectionError as e:
            if e.code == _h.HILOCK_ECLOSED:
                return None
            err: Exception = e
        except Exception as e:
            err = e
        else:
            self._failed = False
            return s
        if not self._failed:
            self._failed = True
            _log.error("hilock.metrics: reading the stats of %r failed: %s",
                       self._source, err)
        return None

    def describe(self) -> Iterator[Metric]:
        return iter(())  # unchecked collector: read only when scraped

    def collect(self) -> Iterator[Metric]:
        s = self._stats()
        if s is None:
            return
        for key in COUNTERS:
            c = CounterMetricFamily(f"{self._prefix}_{key}", _HELP[key], labels=self._labels)
            c.add_metric(self._values, float(s[key]))
            yield c
        for key, metric, doc in (
                ("wait_seconds", "acquire_wait_seconds",
                 "Time from an acquire's first attempt to its end, for acquires that waited"),
                ("hold_seconds", "hold_seconds", "Time from a grant to its release")):
            hist = s[key]
            h = HistogramMetricFamily(f"{self._prefix}_{metric}", doc, labels=self._labels)
            buckets = [("+Inf" if le == float("inf") else repr(le), float(n))
                       for le, n in hist["buckets"]]
            h.add_metric(self._values, buckets, float(hist["sum"]))
            yield h


def register(client: _HasStats, registry: Optional[CollectorRegistry] = None,
             prefix: str = "hilock", name: Optional[str] = None) -> HilockCollector:
    """Register a collector of ``client``'s statistics on ``registry``
    (default: prometheus_client's global REGISTRY) and return it (pass it
    to ``registry.unregister`` to remove it). ``name``: the value of a
    ``client`` label on every sample, to tell clients apart.

    Raises ValueError if ``registry`` already has a collector of an open
    client with the same ``prefix`` and ``name`` (two clients without a
    name, say): their samples would be the same series, which Prometheus
    rejects. One whose client is closed is unregistered and replaced."""
    collector = HilockCollector(client, prefix, name)
    reg = REGISTRY if registry is None else registry
    with _mu:
        mine = _on.setdefault(reg, [])
        # prometheus_client's own record of what is registered: a collector
        # taken off with registry.unregister no longer counts.
        present = getattr(reg, "_collector_to_names", None)
        mine[:] = [c for c in mine if present is None or c in present]
        for c in list(mine):
            if c.key != collector.key:
                continue
            if c._stats() is not None:
                label = "without a name" if name is None else f"named {name!r}"
                raise ValueError(
                    f"hilock.metrics: this registry already has a collector {label} "
                    f"with prefix {prefix!r}, for {c._source!r}; give each client "
                    "its own name=")
            reg.unregister(c)
            mine.remove(c)
        reg.register(collector)
        mine.append(collector)
    return collector
