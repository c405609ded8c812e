"""The client: one thread-safe pool of connections to a Redis server."""
from __future__ import annotations

import os
import ssl
import threading
from contextlib import contextmanager
from types import TracebackType
from typing import (
    Any,
    Callable,
    Iterable,
    Iterator,
    List,
    Optional,
    Type,
    TypeVar,
    Union,
    overload,
)

from . import _hilock as _h
from . import _notify, _stats
from ._barrier import Barrier, DoubleBarrier
from ._base import LostCallback
from ._election import Election
from ._fair import FairLock
from ._inspect import LockInfo
from ._latch import Latch
from ._lock import EXPIRING, LEASE, REDIS_PY, SIMPLE, Lock
from ._multilock import MultiLock
from ._redlock import Redlock
from ._rlock import RedissonRWLock, RLock
from ._rwlock import ReadLock, RWLock, WriteLock
from ._seglock import SegmentedLock
from ._semaphore import Semaphore
from ._seqlock import SequentialLock
from ._store import LINGER_DEFAULT, FencedStore
from ._util import (
    Compat,
    Name,
    PathLike,
    RedisPyCompat,
    Uncopyable,
    check_compat,
    check_redis_py,
    name_bytes,
    no_lock_delay,
    prefix_bytes,
    redact_url,
    seconds_to_ms,
    tls_args,
)
from .errors import ConnectionError, InvalidArgument, LockLost, LockNotOwnedError

DEFAULT_URL = "redis://127.0.0.1:6379/0"

_T = TypeVar("_T")
_C = TypeVar("_C", bound="Client")


def default_url() -> str:
    """``$HILOCK_URL``, else ``$REDIS_URL``, else redis://127.0.0.1:6379/0."""
    return os.environ.get("HILOCK_URL") or os.environ.get("REDIS_URL") or DEFAULT_URL


class Client(Uncopyable):
    """A connection pool to one Redis server, shared by all threads.

    ``url``: ``redis://[[user]:password@]host[:port][/db]``,
    ``unix:///path.sock[?db=N&user=U&password=P]``, or
    ``redis+cluster://[[user]:password@]host:port[,host:port...]`` for a
    Redis Cluster (the hosts are seeds; each lock's keys live on the master
    of their hash slot), or
    ``redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master[/db]
    [?sentinel_password=P&sentinel_user=U&db=N]`` (the master the sentinels
    name, followed through failovers); default :func:`default_url`. Times
    are float seconds. One connection is opened (and authenticated) here, so
    a bad URL or password fails at once; ``connect=False`` opens none (the
    URL and options are still checked): the first call connects, and raises
    what the connection met.

    TLS: ``rediss://``, ``rediss+cluster://`` and ``rediss+sentinel://``
    are the same over TLS (to every node and sentinel). The server's
    certificate is verified by default against the system's CAs and
    ``ssl_ca_certs`` / ``ssl_ca_path``, and must name the host dialled
    (``ssl_check_hostname``) or ``ssl_server_name``. ``ssl_certfile`` and
    ``ssl_keyfile`` (with ``ssl_password``) give a client certificate for
    mutual TLS; ``ssl_cert_reqs="none"`` turns verification off. The same
    names work as URL query parameters, which win. With a URL that is not a
    TLS one, any of them set (other than to its default) raises
    :class:`InvalidArgument`. A refused certificate raises
    :class:`CertificateError`, another TLS failure :class:`TLSError`.
    ``client.url`` and ``repr(client)`` show the URL with its passwords
    masked (``redis://user:***@host/0``).

    Waiting: a client's first waiting thread blocks in BLPOP on a pooled
    connection (up to ``direct_waiters`` threads at once, default 1: the
    server hands it the release's wake-up itself); the others sleep in the
    client, and one subscriber connection per client hears the releases
    (``shared_waiting``, the default). ``shared_waiting=False`` gives each
    waiting thread a connection of its own, blocked in BLPOP. Commands share
    at most ``max_connections`` pooled connections (default 6; 0: no limit);
    with the subscriber and the renewal thread's, a client holds at most 8.

    ``prefix`` (default ``"hilock:"``) starts every key and channel name this
    client's locks use, so tenants sharing a server each take their own and
    an ACL user per tenant restricted to ``~<prefix>*`` and ``&<prefix>*``
    keeps them apart (docs/security.md). Clients that share a lock must use
    the same prefix.

    ``detect_deadlocks=True``: a blocking acquire of a :class:`Lock`,
    :class:`FairLock`, :class:`RLock` or a write lock that has waited
    ``deadlock_timeout`` seconds (default 1.0) records in Redis what its
    owner (the calling thread of this client, or greenlet under gevent or
    eventlet) waits for and holds, and follows the graph through the other
    processes' records; the youngest wait of a confirmed cycle raises
    :class:`DeadlockError` naming the cycle's locks, the others keep
    waiting (docs/contention.md). Off by default: nothing is written.

    ``wait_replicas=n``: every grant and renewal is confirmed by ``WAIT n``
    on the same connection; a grant fewer than ``n`` replicas acknowledged
    within ``wait_timeout`` seconds is given back and raises
    :class:`NotEnoughReplicas`, and such a renewal counts as failed. On a
    cluster, WAIT runs on the master that owns the lock's slot.
    """

    _copy_refusal = ("hilock.Client cannot be copied: share the one client "
                     "(it is thread-safe) or make a new one")
    _pickle_refusal = "hilock.Client cannot be pickled: make a new one from its url"

    def __init__(self, url: Optional[str] = None, *, connect_timeout: float = 2.0,
                 command_timeout: float = 5.0, reconnect: float = 3.0,
                 wait_replicas: int = 0, wait_timeout: float = 1.0,
                 shared_waiting: bool = True, direct_waiters: int = 1,
                 max_connections: int = 6,
                 ssl_ca_certs: Optional[PathLike] = None,
                 ssl_ca_path: Optional[PathLike] = None,
                 ssl_certfile: Optional[PathLike] = None,
                 ssl_keyfile: Optional[PathLike] = None,
                 ssl_password: Optional[Union[str, bytes]] = None,
                 ssl_cert_reqs: Union[str, ssl.VerifyMode, None] = "required",
                 ssl_check_hostname: bool = True,
                 ssl_server_name: Optional[str] = None, prefix: str = "hilock:",
                 connect: bool = True, detect_deadlocks: bool = False,
                 deadlock_timeout: float = 1.0) -> None:
        self._h: Any = None
        self._calls = 0  # calls on the C client in flight (see _use)
        self._closing: Any = None  # the C handle close() left to the last call
        self._close_lock = threading.Lock()
        self._default_store: Optional[FencedStore] = None
        url = default_url() if url is None else url
        if not isinstance(url, str) or "\0" in url:
            raise InvalidArgument("url must be a str without NUL characters")
        #: The URL with its passwords masked (``redis://:***@host/0``).
        self.url = redact_url(url)
        connect_ms = seconds_to_ms(connect_timeout, "connect_timeout")
        # command_timeout=0: wait for replies without limit.
        command_ms = 0 if command_timeout == 0 else seconds_to_ms(command_timeout,
                                                                   "command_timeout")
        reconnect_ms = 0 if reconnect == 0 else seconds_to_ms(reconnect, "reconnect")
        if (not isinstance(wait_replicas, int) or isinstance(wait_replicas, bool)
                or not 0 <= wait_replicas < 2 ** 31):
            raise InvalidArgument("wait_replicas must be an int >= 0 (a C int)")
        self.wait_replicas = wait_replicas
        wait_ms = seconds_to_ms(wait_timeout, "wait_timeout") if wait_replicas else 0
        tls = tls_args(ssl_ca_certs, ssl_ca_path, ssl_certfile, ssl_keyfile, ssl_password,
                       ssl_cert_reqs, ssl_check_hostname, ssl_server_name)
        if not isinstance(shared_waiting, bool):
            raise InvalidArgument("shared_waiting must be a bool")
        if (not isinstance(direct_waiters, int) or isinstance(direct_waiters, bool)
                or not 0 <= direct_waiters <= 100000):
            raise InvalidArgument("direct_waiters must be an int >= 0")
        if (not isinstance(max_connections, int) or isinstance(max_connections, bool)
                or not 0 <= max_connections <= 100000):
            raise InvalidArgument("max_connections must be an int >= 0 (0: no limit)")
        if not isinstance(connect, bool):
            raise InvalidArgument("connect must be a bool")
        if not isinstance(detect_deadlocks, bool):
            raise InvalidArgument("detect_deadlocks must be a bool")
        deadlock_ms = seconds_to_ms(deadlock_timeout, "deadlock_timeout")
        if deadlock_ms < 1 or deadlock_ms > 86400000:
            raise InvalidArgument("deadlock_timeout must be 0.001 to 86400 seconds")
        self._h = _h.py_client_new(url.encode(), connect_ms, command_ms, reconnect_ms,
                                   int(shared_waiting), direct_waiters, max_connections,
                                   wait_replicas,
                                   wait_ms, *tls, prefix_bytes(prefix), int(not connect),
                                   int(detect_deadlocks), deadlock_ms)
        self.prefix = prefix
        self._shared_waiting = shared_waiting  # what traces report
        # Losses, renewal failures, reconnects and failovers go to the
        # "hilock" logger (see docs/observability.md).
        _notify.start_logging()
        _h.py_client_log(self._h, 1)

    @contextmanager
    def _use(self) -> Iterator[Any]:
        """The C handle for one call on the client itself. A close() while
        calls are in flight frees the handle when the last of them returns,
        so no call ever runs on freed memory."""
        with self._close_lock:
            h = self._h
            if h is None:
                raise ConnectionError("client is closed", _h.HILOCK_ECLOSED)
            self._calls += 1
        try:
            yield h
        finally:
            with self._close_lock:
                self._calls -= 1
                last = self._calls == 0 and self._closing is not None
                h, self._closing = (self._closing, None) if last else (None, self._closing)
            if h is not None:
                _h.hilock_client_free(h)

    def _new(self, fn: Callable[..., _T], *args: Any) -> _T:
        """fn(C client, *args): a lock constructor, run as a call on the client."""
        with self._use() as h:
            return fn(h, *args)

    def close(self) -> None:
        """Close the pool. Every lock held through this client stops renewing,
        is released (best effort, within about 2 s) and reports ``lost``;
        locks made from this client fail afterwards with ConnectionError.
        Safe while other threads are inside calls on the client."""
        with self._close_lock:
            h, self._h = self._h, None
            if h is not None and self._calls > 0:
                self._closing, h = h, None  # the last call in flight frees it
        if h is not None:
            _h.hilock_client_free(h)

    def __del__(self) -> None:
        if getattr(self, "_h", None) is not None:
            self.close()

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._h is None else "open"
        return f"<hilock.Client {self.url!r} {state}>"

    @property
    def cluster(self) -> bool:
        """True if this client talks to a Redis Cluster."""
        with self._use() as h:
            return bool(_h.hilock_client_is_cluster(h))

    @property
    def waiting(self) -> int:
        """Threads of this client waiting for a lock now."""
        with self._use() as h:
            return int(_h.hilock_client_waiting(h))

    def stats(self) -> _stats.Stats:
        """This client's counters since it was made (or :meth:`reset_stats`),
        for every lock made from it, blocking or asyncio: ``acquired``,
        ``busy`` (one-shot acquires refused), ``timeouts`` (acquires that
        waited in vain), ``waits``, ``errors``, ``lost``, ``renewals``,
        ``renewal_failures``, ``reconnects``, ``redirections``,
        ``failovers`` (ints), and the histograms ``wait_seconds`` (acquires
        that waited) and ``hold_seconds`` (grant to release), each
        ``{"buckets": [(le, cumulative count), ...], "sum": seconds,
        "count": n}`` with ``le`` in seconds, the last ``inf``. A local read:
        no round trip."""
        with self._use() as h:
            return _stats.from_raw(_h.py_client_stats(h))

    def reset_stats(self) -> None:
        """Set every counter of :meth:`stats` to zero."""
        with self._use() as h:
            _h.hilock_client_stats_reset(h)

    def ping(self) -> None:
        """One round trip (PING)."""
        with self._use() as h:
            _h.hilock_client_ping(h)

    def fenced_store(self, *, linger: Optional[float] = LINGER_DEFAULT,
                     max_value: Optional[int] = None) -> FencedStore:
        """A :class:`hilock.FencedStore` on this client's server. Without
        arguments, one store per client (the one ``lk.store()`` uses)."""
        if linger == LINGER_DEFAULT and max_value is None:
            with self._close_lock:
                store = self._default_store
            if store is None:
                store = FencedStore(self)
                with self._close_lock:
                    if self._default_store is None:
                        self._default_store = store
                    store = self._default_store
            return store
        return FencedStore(self, linger=linger, max_value=max_value)

    def inspect(self, name: Name) -> LockInfo:
        """What the lock ``name`` holds now, whatever its type, in one round
        trip: a :class:`LockInfo` (type ``"none"`` if nothing is there).
        Reads only; safe on a name of any type."""
        raw = name_bytes(name)
        shown = name if isinstance(name, str) else raw
        with self._use() as h:
            return LockInfo._from_c(shown, _h.py_inspect(h, raw))

    def force_release(self, name: Name) -> bool:
        """Operator tool: take the lock ``name`` away from whoever holds it,
        whatever its type, and wake its waiters so they try again at once.
        The holder finds its lock lost at its next renewal, extend or
        release. Fence counters stay, so fences keep increasing; so do a
        semaphore's stored limit and a segmented lock's stock. True if
        anything was removed. Raises :class:`WrongTypeError` (nothing changes)
        if a key of the name holds a Redis type no lock writes."""
        raw = name_bytes(name)
        with self._use() as h:
            return bool(_h.hilock_client_force_release(h, raw))

    def list_locks(self, pattern: Name = "*") -> Iterator[LockInfo]:
        """The locks present whose name matches ``pattern``, each once, with
        its state (as :meth:`inspect`). ``pattern`` is a Redis glob over the
        lock name, not the key (``*``, ``?``, ``[abc]``, ``[^a-z]``, backslash
        escapes). Walks the keys with SCAN (never KEYS; on a Cluster, every
        master) lazily, one page and one inspect per name at a time; names
        with nothing but a fence counter are skipped. Names created or
        removed during the walk may or may not be reported."""
        raw = name_bytes(pattern)
        with self._use() as h:
            scan = _h.hilock_client_list_locks(h, raw)
        try:
            while True:
                nxt = _h.py_scan_next(scan)
                if nxt is None:
                    return
                yield LockInfo._from_c(nxt[0], nxt[1])
        finally:
            _h.hilock_scan_free(scan)

    def adopt(self, text: Union[str, bytes], timeout: Optional[float] = None, *,
              auto_renew: bool = True, max_hold: Optional[float] = None,
              on_lost: Optional[LostCallback[Any]] = None) -> Any:
        """Take over a grant handed over with ``lk.export()`` (in this or
        another thread or process): an object of the exported lock's class
        (:class:`Lock`, :class:`FairLock`, :class:`SequentialLock`,
        :class:`MultiLock`, :class:`SegmentedLock`, or a :class:`Semaphore`
        whose calling thread holds the permit) that holds the grant, with
        its owner token and fence, and extends, renews, releases and
        auto-renews it like any. One round trip confirms the grant (the
        family's renewal) and sets ``validity``. Its name is a str when it
        is valid UTF-8, else bytes. Other arguments as for :meth:`lock`.

        Raises :class:`InvalidArgument` for text that is not an unchanged
        export (malformed, truncated, edited, or made by a client with
        another ``prefix``; nothing is sent), and :class:`LockLost` if the
        grant is gone (lapsed, released or force-released). The text is a
        secret: whoever has it can release the lock."""
        if isinstance(text, str):
            try:
                data = text.encode("ascii")
            except UnicodeEncodeError:
                raise InvalidArgument("adopt: not an exported hilock grant") from None
        elif isinstance(text, (bytes, bytearray, memoryview)):
            data = bytes(text)
        else:
            raise InvalidArgument(f"adopt: text must be str or bytes, not {type(text).__name__}")
        try:
            with self._use() as h:
                family, handle, names, a = _h.py_client_adopt(h, data)
        except LockLost:
            raise
        except LockNotOwnedError as e:
            raise LockLost(str(e), e.code) from None
        try:
            lk = self._adopted(family, handle, names, a, timeout, auto_renew, max_hold,
                               on_lost)
        except BaseException:
            _h.hilock_hold_free(handle)  # not released: it lapses at its TTL
            raise
        return lk

    def _adopted(self, family: str, handle: Any, names: List[bytes], a: int,
                 timeout: Optional[float], auto_renew: bool, max_hold: Optional[float],
                 on_lost: Any) -> Any:
        """A new object of the family's class, given handle's grant."""
        def name(b: bytes) -> Name:
            try:
                return b.decode()
            except UnicodeDecodeError:
                return b
        ttl_ms = _h.hilock_hold_ttl_ms(handle)
        ttl = ttl_ms / 1000.0
        lk: Any
        if family == "lock":
            kind = _h.hilock_lock_kind_of(handle)
            lk = Lock(self, name(names[0]), kind, None if kind == SIMPLE else ttl, timeout,
                      auto_renew, max_hold, on_lost)
        elif family == "fair lock":
            lk = FairLock(self, name(names[0]), ttl, timeout, auto_renew, max_hold, on_lost)
        elif family == "sequential lock":
            lk = SequentialLock(self, name(names[0]), ttl, timeout, auto_renew, max_hold,
                                on_lost)
        elif family == "multi-key lock":
            lk = MultiLock(self, [name(n) for n in names], ttl, timeout, auto_renew, max_hold,
                           on_lost)
        elif family == "segmented lock":
            lk = SegmentedLock(self, name(names[0]), a, ttl, timeout, auto_renew, max_hold,
                               on_lost)
        else:
            lk = Semaphore(self, name(names[0]), a, ttl, timeout, auto_renew, max_hold,
                           on_lost)
        lk._adopted(handle)
        return lk

    # BEGIN generated factories
    # Written by tools/gen_factories.py from its table of factories: edit
    # the table and run the script, not the code between these lines.
    def lock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
             auto_renew: bool = True, max_hold: Optional[float] = None,
             on_lost: Optional[LostCallback[Lock]] = None, lock_delay: float = 0,
             compat: Optional[RedisPyCompat] = None) -> Lock:
        """An expiring lock (SET NX PX).

        ``ttl``: seconds until the grant lapses unless released or renewed.
        ``timeout``: default wait of ``acquire()`` and ``with`` (None: no
        limit). ``auto_renew``: the client's renewal thread resets the TTL
        every ttl/3 while held, so a live holder keeps it and a dead one
        loses it within ``ttl``; pass False for a plain expiring lock.
        ``max_hold``: stop renewing this many seconds after the grant.
        ``on_lost(lock)``: called (on a hilock thread) if the hold is lost.
        ``lock_delay``: seconds after a grant ends without its holder's
        release (the TTL ran out, the holder was lost or killed) in which the
        name is granted to no one; a release frees it at once (0: none).
        ``compat="redis-py"``: the lock of redis-py's ``Lock`` of the same
        name (the key is the name, holding the token; no fence, no
        ``lock_delay``; see the "Migrating" page).
        """
        if check_redis_py(compat):
            no_lock_delay(lock_delay, "lock(compat='redis-py')")
        return Lock(self, name, REDIS_PY if compat else EXPIRING, ttl, timeout, auto_renew,
                    max_hold, on_lost, lock_delay)

    def simple_lock(self, name: Name, timeout: Optional[float] = None) -> Lock:
        """A simple lock (SETNX) with no expiry: if its holder dies it stays
        held until :meth:`Lock.force_release`. Prefer :meth:`lock`."""
        return Lock(self, name, SIMPLE, None, timeout)

    def lease(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
              auto_renew: bool = True, max_hold: Optional[float] = None,
              on_lost: Optional[LostCallback[Lock]] = None, lock_delay: float = 0) -> Lock:
        """A lease: an expiring lock held by renewing it before ``ttl`` runs
        out, by the renewal thread (default) or by ``renew()``/``extend()``
        (``auto_renew=False``). Other arguments as for :meth:`lock`."""
        return Lock(self, name, LEASE, ttl, timeout, auto_renew, max_hold, on_lost,
                    lock_delay)

    def rlock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
              auto_renew: bool = True, max_hold: Optional[float] = None,
              on_lost: Optional[LostCallback[RLock]] = None, lock_delay: float = 0,
              compat: Optional[Compat] = None) -> RLock:
        """A reentrant lock: reentrant per thread, like ``threading.RLock``.
        ``lock_delay``: as for :meth:`lock`; the first entry's grant has it,
        and only the final release frees the lock at once.
        ``compat="redisson"``: Redisson's RLock of the same name, shared with
        Java services (``ttl`` is then the lease, Redisson's 30 s by
        default; no ``lock_delay``). Other arguments as for :meth:`lock`."""
        if check_compat(compat):
            no_lock_delay(lock_delay, "rlock(compat='redisson')")
        return RLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost, compat,
                     lock_delay=lock_delay)

    def semaphore(self, name: Name, permits: int, ttl: float = 30.0,
                  timeout: Optional[float] = None, *, auto_renew: bool = True,
                  max_hold: Optional[float] = None,
                  on_lost: Optional[LostCallback[Semaphore]] = None) -> Semaphore:
        """A counting semaphore: at most ``limit`` holders at once.

        ``permits``: the limit stored on first use if none is stored yet
        (the stored limit wins afterwards; see :meth:`Semaphore.set_limit`).
        Each ``acquire()`` takes one permit, which lapses ``ttl`` seconds
        after the grant or last renewal; ``auto_renew`` (default) keeps it
        alive while held, so a dead holder's permit is free within ``ttl``.
        Other arguments as for :meth:`lock`.
        """
        return Semaphore(self, name, permits, ttl, timeout, auto_renew, max_hold, on_lost)

    @overload
    def fair_lock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
                  auto_renew: bool = True, max_hold: Optional[float] = None,
                  on_lost: Optional[LostCallback[FairLock]] = None, lock_delay: float = 0,
                  compat: None = None) -> FairLock: ...

    @overload
    def fair_lock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
                  auto_renew: bool = True, max_hold: Optional[float] = None,
                  on_lost: Optional[LostCallback[RLock]] = None, lock_delay: float = 0,
                  compat: Compat) -> RLock: ...

    def fair_lock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
                  auto_renew: bool = True, max_hold: Optional[float] = None, on_lost: Any = None,
                  lock_delay: float = 0, compat: Optional[Compat] = None) -> Union[FairLock, RLock]:
        """A fair (FIFO) lock: granted in request order, a newcomer never
        barges past a waiter, and a crashed waiter is skipped after its
        heartbeat window (``FairLock.heartbeat``, by default ``ttl`` capped
        at 5 s). ``lock_delay``: as for :meth:`lock` (not with ``compat``).
        Other arguments as for :meth:`lock`.
        ``compat="redisson"``: Redisson's RFairLock of the same name, shared
        with Java services, as a reentrant :class:`RLock` (a dead hilock
        waiter is passed over ``ttl`` after the holder's TTL)."""
        if check_compat(compat):
            no_lock_delay(lock_delay, "fair_lock(compat='redisson')")
            return RLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost,
                         _side=_h.hilock_rlock_new_redisson_fair)
        return FairLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost, lock_delay)

    @overload
    def rwlock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
               auto_renew: bool = True, max_hold: Optional[float] = None,
               on_lost: Optional[LostCallback[Union[ReadLock, WriteLock]]] = None,
               lock_delay: float = 0, compat: None = None) -> RWLock: ...

    @overload
    def rwlock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
               auto_renew: bool = True, max_hold: Optional[float] = None,
               on_lost: Optional[LostCallback[RLock]] = None, lock_delay: float = 0,
               compat: Compat) -> RedissonRWLock: ...

    def rwlock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
               auto_renew: bool = True, max_hold: Optional[float] = None, on_lost: Any = None,
               lock_delay: float = 0,
               compat: Optional[Compat] = None) -> Union[RWLock, RedissonRWLock]:
        """A read-write lock: ``.read()`` and ``.write()`` give its shared and
        exclusive sides, reentrant per thread, with writer preference.
        ``ttl`` applies to every read and write hold; ``timeout``,
        ``auto_renew``, ``max_hold`` and ``on_lost`` (called with the side
        that lost its hold) apply to both sides, as for :meth:`lock`.
        ``lock_delay``: as for :meth:`lock`, for write grants: after one ends
        without its release, neither writers nor readers are granted for that
        long (read holds take no delay).
        ``compat="redisson"``: Redisson's RReadWriteLock of the same name,
        shared with Java services (a :class:`RedissonRWLock`; no
        ``lock_delay``)."""
        if check_compat(compat):
            no_lock_delay(lock_delay, "rwlock(compat='redisson')")
            return RedissonRWLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost)
        return RWLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost, lock_delay)

    def multi_lock(self, names: Iterable[Name], ttl: float = 30.0, timeout: Optional[float] = None,
                   *, auto_renew: bool = True, max_hold: Optional[float] = None,
                   on_lost: Optional[LostCallback[MultiLock]] = None,
                   lock_delay: float = 0) -> MultiLock:
        """A lock on every name of ``names`` at once, or none of them.

        ``names``: an iterable of names (str or bytes; duplicates ignored),
        at most 1024. Each name is locked with the keys of :meth:`lock`, so
        the two exclude each other; ``fence`` is a dict of one token per
        name. On a Redis Cluster the names must share a hash tag
        (``"{acct}:1"``, ``"{acct}:2"``), else CrossSlotError.
        ``lock_delay``: as for :meth:`lock`, for each name. Other arguments as
        for :meth:`lock`.
        """
        return MultiLock(self, names, ttl, timeout, auto_renew, max_hold, on_lost,
                         lock_delay)

    def sequential_lock(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
                        auto_renew: bool = True, max_hold: Optional[float] = None,
                        on_lost: Optional[LostCallback[SequentialLock]] = None,
                        lock_delay: float = 0) -> SequentialLock:
        """A sequential lock (ZooKeeper's recipe): each contender gets the
        next sequence number (``SequentialLock.sequence``) and the lowest
        live one holds; each waiter watches its predecessor only, so a
        release wakes exactly one process, and a dead predecessor passes the
        turn within its heartbeat window (``SequentialLock.heartbeat``, by default
        ``ttl`` capped at 5 s). ``lock_delay``: as for :meth:`lock` (the head
        of the line keeps its place and waits the delay out). Other arguments
        as for :meth:`lock`."""
        return SequentialLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost,
                              lock_delay)

    def election(self, name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
                 auto_renew: bool = True, max_hold: Optional[float] = None,
                 on_lost: Optional[LostCallback[Election]] = None) -> Election:
        """A leader election on ``name``: :meth:`Election.campaign` waits until
        the caller leads and returns the :class:`Leadership`;
        :meth:`Election.leader` and :meth:`Election.observe` read and watch
        whoever leads. ``ttl``: a leader that stops renewing (dead, hung, cut
        off) loses the lead within it; the renewal thread keeps a live one
        (``auto_renew``). Other arguments as for :meth:`lock`."""
        return Election(self, name, ttl, timeout, auto_renew, max_hold, on_lost)

    def latch(self, name: Name, count: int, ttl: float = 30.0) -> Latch:
        """A countdown latch on ``name``: :meth:`Latch.wait` returns True once
        :meth:`Latch.count_down` was called ``count`` times (the first call
        on a latch that does not exist makes it with ``count``; it stays until
        :meth:`Latch.delete`). :meth:`Latch.join` registers a party whose
        lease (``ttl``) the renewal thread keeps: if it dies before it counts
        down, every waiter raises :class:`hilock.BrokenBarrier` within about
        ``ttl`` instead of waiting forever."""
        return Latch(self, name, count, ttl)

    def barrier(self, name: Name, parties: int, ttl: float = 30.0,
                timeout: Optional[float] = None) -> Barrier:
        """A barrier of ``parties`` across processes (as ``threading.Barrier``):
        :meth:`Barrier.wait` returns each caller's arrival index once
        ``parties`` have arrived, generation after generation. ``ttl``: a party
        that dies or hangs while others wait breaks the barrier for them
        (:class:`hilock.BrokenBarrier`) within about that long; the renewal
        thread keeps a live one. ``timeout``: the default wait (None: no limit);
        a wait that runs out breaks the barrier, as threading's."""
        return Barrier(self, name, parties, ttl, timeout)

    def double_barrier(self, name: Name, parties: int, ttl: float = 30.0,
                       timeout: Optional[float] = None) -> DoubleBarrier:
        """A double barrier of ``parties`` (Curator's DistributedDoubleBarrier):
        :meth:`DoubleBarrier.enter` returns once ``parties`` have entered
        (``with db.enter():`` leaves at the block's end), and leaving returns
        once all of them have left. ``ttl``: a party that dies inside breaks the
        round for the others (:class:`hilock.BrokenBarrier`) within about that
        long. ``timeout``: the default wait (None: no limit)."""
        return DoubleBarrier(self, name, parties, ttl, timeout)

    def segmented_lock(self, name: Name, segments: int, ttl: float = 30.0,
                       timeout: Optional[float] = None, *, auto_renew: bool = True,
                       max_hold: Optional[float] = None,
                       on_lost: Optional[LostCallback[SegmentedLock]] = None) -> SegmentedLock:
        """A segmented lock for hot inventory: ``segments`` exclusive locks,
        each with its own share of the stock. ``acquire()`` takes any free
        segment that still has stock (random start), ``take(n)`` sells from
        it under the lock, and :class:`hilock.SoldOut` is raised once every
        segment is empty. Every object on one name must use the same
        ``segments``. Other arguments as for :meth:`lock`."""
        return SegmentedLock(self, name, segments, ttl, timeout, auto_renew, max_hold,
                             on_lost)
    # END generated factories


def redlock(urls: Iterable[str], name: Name, ttl: float = 30.0,
            timeout: Optional[float] = None, *, auto_renew: bool = True,
            max_hold: Optional[float] = None, on_lost: Optional[LostCallback[Redlock]] = None,
            **kw: Any) -> Redlock:
    """A Redlock over the independent masters ``urls`` (a majority must
    agree). Other arguments as for :meth:`Client.lock`; ``node_timeout``,
    ``retry_delay`` and ``connect_timeout`` as for :class:`Redlock`."""
    return Redlock(urls, name, ttl, timeout, auto_renew=auto_renew, max_hold=max_hold,
                   on_lost=on_lost, **kw)


_default_lock = threading.Lock()
_default: Optional[Client] = None
_default_pid = 0


def default_client() -> Client:
    """The module's shared client on :func:`default_url` (one per process)."""
    global _default, _default_pid
    with _default_lock:
        if _default is None or _default_pid != os.getpid():
            _default = Client()
            _default_pid = os.getpid()
        return _default
