"""redis-py's ``Lock`` on hilock's core: a one-import migration.

``from hilock.compat.redis import Lock`` in place of ``from redis.lock
import Lock`` (or ``r.lock(name, lock_class=Lock)``): the same constructor,
methods and exceptions (``redis.exceptions.LockError``,
``LockNotOwnedError``), and the same lock in Redis (the key is the name,
holding the token with its PX expiry), so processes still on redis-py's
``Lock`` and processes on this one exclude each other on one name.

What differs is the waiting: a blocked ``acquire()`` is woken by a hilock
release at once and notices a redis-py release within 100 ms, instead of
polling every ``sleep`` seconds (``sleep`` is kept for the signature and
not used). hilock's extras: ``auto_renew=True`` keeps the TTL reset while
held, ``on_lost(lock)`` reports a loss; ``hilock_lock`` is the hilock lock
behind it (``validity``, ``lost``).

The connection is a :class:`hilock.Client` made from the redis-py client's
connection settings (host, port or unix socket, db, username, password,
TLS files and checks), one per connection pool.
"""
from __future__ import annotations

import logging
import threading
import uuid
import weakref
from types import SimpleNamespace
from typing import Any, Callable, Dict, Optional, Tuple, Union
from urllib.parse import quote

from redis.exceptions import LockError, LockNotOwnedError

from ... import _hilock as _h
from ... import errors as _errors
from ..._client import Client
from ..._lock import REDIS_PY
from ..._lock import Lock as _HiLock

__all__ = ["Lock", "LockError", "LockNotOwnedError", "client_for"]

logger = logging.getLogger(__name__)

_guard = threading.Lock()
_clients: weakref.WeakKeyDictionary[Any, Client] = weakref.WeakKeyDictionary()


def _url_of(kw: Dict[str, Any], tls: bool) -> str:
    auth = ""
    user, password = kw.get("username"), kw.get("password")
    if user or password:
        auth = (quote(str(user or ""), safe="") + ":" + quote(str(password or ""), safe="")
                + "@")
    db = int(kw.get("db") or 0)
    if kw.get("path"):
        # unix:///path?db=N&user=U&password=P (no userinfo on a socket URL)
        query = f"db={db}"
        if user:
            query += "&user=" + quote(str(user), safe="")
        if password:
            query += "&password=" + quote(str(password), safe="")
        return f"unix://{kw['path']}?{query}"
    host = str(kw.get("host") or "localhost")
    if ":" in host:
        host = f"[{host}]"
    return f"{'rediss' if tls else 'redis'}://{auth}{host}:{int(kw.get('port') or 6379)}/{db}"


def _pool_of(redis_client: Any) -> Any:
    pool = getattr(redis_client, "connection_pool", None)
    if pool is None:
        raise _errors.UnsupportedError(
            "hilock.compat.redis takes a redis.Redis client (a cluster client "
            "is not supported yet)")
    return pool


def _client_args(pool: Any) -> Tuple[str, Dict[str, Any]]:
    """A hilock client's URL and options for a redis-py connection pool
    (blocking or asyncio): host, port or socket, db, credentials, TLS."""
    kw = dict(pool.connection_kwargs)
    tls = "ssl_cert_reqs" in kw or "SSL" in getattr(pool.connection_class, "__name__", "")
    args: Dict[str, Any] = {}
    if tls:
        for k in ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile",
                  "ssl_password", "ssl_cert_reqs", "ssl_check_hostname"):
            if kw.get(k) is not None:
                args[k] = kw[k]
    if kw.get("socket_connect_timeout"):
        args["connect_timeout"] = float(kw["socket_connect_timeout"])
    if kw.get("socket_timeout"):
        args["command_timeout"] = float(kw["socket_timeout"])
    return _url_of(kw, tls), args


def client_for(redis_client: Any) -> Client:
    """The :class:`hilock.Client` that the compat locks of ``redis_client``
    use: one per connection pool, on the pool's host, port or socket, db,
    credentials and TLS settings; closed when the pool goes."""
    pool = _pool_of(redis_client)
    with _guard:
        c = _clients.get(pool)
        if c is None:
            url, args = _client_args(pool)
            c = Client(url, **args)
            _clients[pool] = c
            weakref.finalize(pool, c.close)
    return c


def _encode(redis_client: Any, token: Union[str, bytes]) -> bytes:
    try:
        encoder = redis_client.connection_pool.get_encoder()
    except AttributeError:
        encoder = redis_client.get_encoder()
    return encoder.encode(token)  # type: ignore[no-any-return]


def _set_token(lk: _HiLock, token: bytes, name: str) -> None:
    try:
        _h.hilock_lock_set_token(lk._h, token)
    except _errors.InvalidArgument as e:
        raise LockError(str(e), lock_name=name) from None


class _Base:
    """The attributes redis-py's Lock has (and this module's extras), for
    the blocking and the asyncio class alike."""

    redis: Any
    name: str
    timeout: Optional[float]
    sleep: float
    blocking: bool
    blocking_timeout: Optional[float]
    thread_local: bool
    raise_on_release_error: bool
    local: Any
    _locks: Any

    # The hilock client for a redis-py client (blocking or asyncio).
    _client_for: Callable[[Any], Any]

    def __init__(self, redis: Any, name: str, timeout: Optional[float] = None,
                 sleep: float = 0.1, blocking: bool = True,
                 blocking_timeout: Optional[float] = None, thread_local: bool = True,
                 raise_on_release_error: bool = True, *, auto_renew: bool = False,
                 on_lost: Optional[Callable[[_HiLock], None]] = None) -> None:
        if timeout is not None and timeout <= 0:
            raise LockError("'timeout' must be a positive number of seconds", lock_name=name)
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.local = threading.local() if self.thread_local else SimpleNamespace()
        self.local.token = None
        self._auto_renew = auto_renew
        self._on_lost = on_lost
        # One hilock lock per token owner: per thread, or one for the object.
        self._locks = threading.local() if self.thread_local else SimpleNamespace()
        self._locks.lock = None
        self._client = type(self)._client_for(redis)


class Lock(_Base):
    """redis-py's ``redis.lock.Lock``, on hilock's core (see the module).

    ``timeout``: the lock's TTL in seconds (None: no expiry, as in
    redis-py). ``blocking``, ``blocking_timeout``: as redis-py's (the
    default wait of :meth:`acquire`). ``thread_local``: each thread has
    its own token (default), else the object's token is shared by its
    threads. ``raise_on_release_error``: whether leaving a ``with`` block
    raises when the release fails (else it logs a warning). ``sleep``:
    not used (waiters are woken, they do not poll).
    """

    _client_for = staticmethod(client_for)
    _client: Client

    @property
    def hilock_lock(self) -> _HiLock:
        """The hilock lock of the calling thread's token (``validity``,
        ``lost``; ``fence`` is None: the layout keeps none)."""
        lk = getattr(self._locks, "lock", None)
        if lk is None:
            lk = _HiLock(self._client, self.name, REDIS_PY, self.timeout, None,
                         self._auto_renew and self.timeout is not None, None, self._on_lost)
            self._locks.lock = lk
        return lk

    def __enter__(self) -> Lock:
        if self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified",
                        lock_name=self.name)

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        try:
            self.release()
        except LockError:
            if self.raise_on_release_error:
                raise
            logger.warning("Lock was unlocked or no longer owned when exiting context manager.")

    def acquire(self, sleep: Optional[float] = None, blocking: Optional[bool] = None,
                blocking_timeout: Optional[float] = None,
                token: Optional[Union[str, bytes]] = None) -> bool:
        """Take the lock; True if granted. ``blocking=False`` tries once;
        else wait up to ``blocking_timeout`` seconds (None: no limit).
        ``token``: the value to write (default: ``uuid1().hex``, as
        redis-py's). ``sleep`` is not used."""
        if token is None:
            btoken = uuid.uuid1().hex.encode()
        else:
            btoken = _encode(self.redis, token)
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        lk = self.hilock_lock
        _set_token(lk, btoken, self.name)
        wait = 0.0 if not blocking else blocking_timeout
        if wait is not None and wait < 0:
            wait = 0.0
        if lk.acquire(timeout=wait):  # type: ignore[arg-type]
            self.local.token = btoken
            return True
        return False

    def locked(self) -> bool:
        """Whether anyone holds it."""
        return self.redis.get(self.name) is not None

    def owned(self) -> bool:
        """Whether the calling thread's token holds it."""
        token = self.local.token
        if token is None:
            return False
        stored = self.redis.get(self.name)
        if stored is not None and not isinstance(stored, bytes):
            stored = _encode(self.redis, stored)
        return bool(stored == token)

    def release(self) -> None:
        """Delete the lock if the calling thread's token holds it: raises
        LockError if it holds none, LockNotOwnedError if the lock is no
        longer its (the token is forgotten either way)."""
        token = self.local.token
        if token is None:
            raise LockError("Cannot release an unlocked lock", lock_name=self.name)
        self.local.token = None
        try:
            self.hilock_lock.release()
        except _errors.LockNotOwnedError:
            raise LockNotOwnedError("Cannot release a lock that's no longer owned",
                                    lock_name=self.name) from None

    def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:
        """Add ``additional_time`` seconds to the lock's TTL, or set it
        (``replace_ttl=True``), while the calling thread's token holds it."""
        if self.local.token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self.name)
        if self.timeout is None:
            raise LockError("Cannot extend a lock with no timeout", lock_name=self.name)
        try:
            self.hilock_lock.extend(additional_time, replace=bool(replace_ttl))
        except _errors.LockNotOwnedError:
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned",
                                    lock_name=self.name) from None
        return True

    def reacquire(self) -> bool:
        """Reset the TTL to ``timeout`` while the calling thread's token
        holds it."""
        if self.local.token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self.name)
        if self.timeout is None:
            raise LockError("Cannot reacquire a lock with no timeout", lock_name=self.name)
        try:
            self.hilock_lock.extend(self.timeout, replace=True)
        except _errors.LockNotOwnedError:
            raise LockNotOwnedError("Cannot reacquire a lock that's no longer owned",
                                    lock_name=self.name) from None
        return True
