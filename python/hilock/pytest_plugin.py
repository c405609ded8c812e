"""pytest fixtures for code that uses hilock: a private redis-server.

Installing hilock registers this module as a pytest plugin (entry point
group ``pytest11``, named ``hilock.pytest_plugin`` after the module), so a
project's tests can ask for the fixtures by name:

    def test_one_worker_at_a_time(hilock_redis_url):
        with hilock.Client(hilock_redis_url) as c, c.lock("job"):
            ...

Without an installed hilock (the package found through PYTHONPATH), a
conftest.py loads it with ``pytest_plugins = ["hilock.pytest_plugin"]``;
an installed plugin of the same name is then not loaded twice. Disable it
with ``-p no:hilock.pytest_plugin``.

The server is ``redis-server`` from $PATH (or /usr/bin) on a free port of
127.0.0.1, with no persistence, in a temporary directory of its own; it is
stopped by its PID and the directory removed when the session ends. A
missing ``redis-server`` is an error of every test that uses it, not a skip.
"""
from __future__ import annotations

from typing import Iterator

import pytest

from hilock._server import RedisServer, command

__all__ = ["hilock_redis_server", "hilock_redis_url", "hilock_redis_clean_url"]


@pytest.fixture(scope="session")
def hilock_redis_server() -> Iterator[RedisServer]:
    """The session's redis-server. ``.url``, ``.port`` and ``.pid``;
    ``.stop()`` kills it and ``.start()`` starts it again on the same port
    (empty: nothing is persisted)."""
    with RedisServer() as srv:
        yield srv


@pytest.fixture(scope="session")
def hilock_redis_url(hilock_redis_server: RedisServer) -> str:
    """The URL of the session's redis-server: ``redis://127.0.0.1:PORT/0``.
    Tests share it: use keys of their own, or ``hilock_redis_clean_url``."""
    return hilock_redis_server.url


@pytest.fixture
def hilock_redis_clean_url(hilock_redis_server: RedisServer) -> str:
    """The session server's URL after FLUSHALL: every test starts on an
    empty server (started again first if an earlier test stopped it)."""
    if hilock_redis_server.proc is None or hilock_redis_server.proc.poll() is not None:
        hilock_redis_server.start()
    reply = command(hilock_redis_server.port, "FLUSHALL")
    if not reply.startswith(b"+OK"):
        raise RuntimeError(f"FLUSHALL on the test redis-server: {reply!r}")
    return hilock_redis_server.url
