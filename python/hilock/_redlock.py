"""Redlock: one lock over N independent Redis masters."""
from __future__ import annotations

import math
from typing import Any, Iterable, Optional, Tuple

from . import _hilock as _h
from . import _notify, _stats
from ._base import ExclusiveBase, LostCallback
from ._util import TLS_OPTIONS, Name, prefix_bytes, redact_url, seconds_to_ms, tls_args
from .errors import InvalidArgument


class Redlock(ExclusiveBase):
    """A lock held on a majority of N independent Redis masters (Redlock).

    ``Redlock(["redis://a:6379", "redis://b:6379", "redis://c:6379"], "job")``

    Each acquire sends the same key and random token to every node at once
    (one connection per node, multiplexed with ``poll``), each bounded by
    ``node_timeout`` (default min(0.05, ttl/10) s). It is granted only if a
    majority (n/2 + 1) took it and time is left: ``validity = ttl - elapsed
    - (ttl * 0.01 + 0.002)`` must stay positive. A failed attempt removes
    the token from every node; a blocking acquire retries after a random
    delay of up to ``retry_delay`` seconds within its timeout.

    The lock contract is :class:`hilock.Lock`'s: ``acquire(blocking=True,
    timeout=-1) -> bool``, ``release()``, ``with`` (``LockTimeout``,
    ``LockLost``), ``auto_renew`` (renewal through a majority), ``max_hold``,
    ``on_lost``, ``fence``. When fewer than a majority of the nodes answer,
    calls raise :class:`hilock.NoQuorumError` (a ``hilock.ConnectionError``)
    whose message lists ``address: error`` for each failed node.

    Making one pings every node (a majority must answer, and none may refuse
    the credentials); ``connect=False`` skips that: the first call finds out.

    ``rediss://`` node URLs talk TLS; the ``ssl_*`` keyword arguments of
    :class:`hilock.Client` apply to every TLS node (each URL's own ``ssl_*``
    query parameters win).

    Redlock is safe only under its own timing assumptions (bounded pauses,
    network delays and clock drift, and nodes that do not forget: restarts
    delayed past the TTL or ``appendfsync always``). Check ``fence`` at the
    protected resource; see the README section on Redlock.
    """

    _c_acquire = _h.hilock_hold_acquire
    _c_release = _h.hilock_hold_release
    _kind_name = "redlock"

    def __init__(self, urls: Iterable[str], name: Name, ttl: float = 30.0,
                 timeout: Optional[float] = None, *, auto_renew: bool = True,
                 max_hold: Optional[float] = None, on_lost: Optional[LostCallback[Redlock]] = None,
                 node_timeout: Optional[float] = None, retry_delay: float = 0.2,
                 connect_timeout: float = 2.0, prefix: str = "hilock:", connect: bool = True,
                 **tls: Any) -> None:
        self._h = None
        if isinstance(urls, (str, bytes)):
            raise InvalidArgument("urls must be a list of node URLs, not one string")
        url_list = list(urls)
        if not url_list:
            raise InvalidArgument("a Redlock needs at least one node URL")
        for u in url_list:
            if not isinstance(u, str) or "\0" in u or "\n" in u or not u:
                shown = redact_url(u) if isinstance(u, str) else u
                raise InvalidArgument(f"bad node URL {shown!r}: a non-empty str without "
                                      "NUL or newline characters")
        super().__init__(None, name, timeout, auto_renew, max_hold, on_lost)  # type: ignore[arg-type]
        ttl_ms = seconds_to_ms(ttl, "ttl")
        node_ms = 0 if node_timeout is None else seconds_to_ms(node_timeout, "node_timeout")
        if (isinstance(retry_delay, bool) or not isinstance(retry_delay, (int, float))
                or math.isnan(retry_delay) or retry_delay < 0 or retry_delay > 60):
            raise InvalidArgument(f"retry_delay must be 0 .. 60 seconds, got {retry_delay!r}")
        connect_ms = seconds_to_ms(connect_timeout, "connect_timeout")
        if not isinstance(connect, bool):
            raise InvalidArgument("connect must be a bool")
        self._urls: Tuple[str, ...] = tuple(redact_url(u) for u in url_list)
        unknown = [k for k in tls if k not in TLS_OPTIONS]
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
        self._setup(_h.py_redlock_new([u.encode() for u in url_list], self._bname, ttl_ms,
                                      connect_ms, node_ms, math.ceil(retry_delay * 1000),
                                      *tls_args(**tls), prefix_bytes(prefix),
                                      int(not connect)))
        _notify.start_logging()
        _h.py_redlock_log(self._h, 1)

    def stats(self) -> _stats.Stats:
        """This Redlock's own counters, as :meth:`hilock.Client.stats` (a
        Redlock drives its own connections, so it counts for itself)."""
        return _stats.from_raw(_h.py_redlock_stats(self._h))

    def reset_stats(self) -> None:
        """Set every counter of :meth:`stats` to zero."""
        _h.hilock_redlock_stats_reset(self._h)

    def __repr__(self) -> str:
        return (f"<hilock.Redlock {self._name!r} on {len(self._urls)} nodes "
                f"validity={self.validity:.3f}s>")

    @property
    def nodes(self) -> Tuple[str, ...]:
        """The node URLs, in the order given (passwords masked)."""
        return self._urls

    @property
    def quorum(self) -> int:
        """Nodes that must agree: n/2 + 1."""
        return int(_h.hilock_redlock_quorum(self._h))

    @property
    def node_timeout(self) -> float:
        """Seconds each node has to answer in every round."""
        return _h.hilock_redlock_node_timeout_ms(self._h) / 1000.0

    def locked(self) -> bool:
        """Whether a majority of the nodes hold the key (one round)."""
        return bool(_h.hilock_hold_locked(self._h))

    def owned(self) -> bool:
        """Whether a majority still holds this object's token and the
        validity has not run out (one round)."""
        return bool(_h.hilock_hold_owned(self._h))

    def extend(self, seconds: float, replace: bool = False) -> None:
        """Add ``seconds`` to the TTL on every node still holding the token,
        or set it (``replace=True``). Counts only if a majority confirms
        within the validity; raises LockNotOwnedError if a majority lost
        it, NoQuorumError if too few nodes answered (validity unchanged)."""
        _h.hilock_hold_extend(self._h, seconds_to_ms(seconds, "extension"),
                                 1 if replace else 0)

    def renew(self) -> None:
        """Reset the TTL to ``ttl`` on a majority (``extend(ttl, replace=True)``)."""
        _h.hilock_hold_renew(self._h)
