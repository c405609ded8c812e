"""Shared fixtures: one private redis-server for the session, a clean
database and a fresh hilock.Client for every test.

Run from the repository root after building the extension:

    PYTHONPATH=build-py/python python3 -m pytest tests/python -q

The suite needs a real ``redis-server`` binary. When it is missing the
session fixture raises (every test errors out): it never skips.
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

HERE = Path(__file__).resolve().parent

# helpers.py and history.py sit next to this file.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from helpers import RedisServer  # noqa: E402  (pure Python, needs no extension)

# pytest-xdist's workers start with SIGINT ignored, and an ignored signal
# stays ignored in the processes a test starts (the CLI keeps it so, as
# nohup asks): give them Python's own handler, reset at their exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The session server comes from hilock's own pytest plugin, as in a user's
# project. Installed, hilock registers it under this same name (the
# entry point is named after the module), so listing it here does not load
# it twice; found through PYTHONPATH, this line is what loads it.
# pytester: test_pytest_plugin.py runs pytest on small projects of its own.
pytest_plugins = ["hilock.pytest_plugin", "pytester"]


@pytest.fixture(scope="session")
def redis_server(hilock_redis_server: RedisServer) -> RedisServer:
    """One redis-server on 127.0.0.1 for the whole session (the plugin's
    ``hilock_redis_server``).

    Fails (FileNotFoundError / RuntimeError) when redis-server is missing or
    does not start: a lock library tested without Redis is not tested.
    """
    return hilock_redis_server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    if redis_server.proc is None or redis_server.proc.poll() is not None:
        # A test must never leave the shared server dead; restart it so the
        # next tests report their own results, and fail loudly meanwhile.
        redis_server.start()
        pytest.fail("the session redis-server was found dead and restarted")
    return redis_server.url


@pytest.fixture
def rds(redis_url: str):
    """A redis-py connection to the session server, after FLUSHALL."""
    import redis

    r = redis.Redis.from_url(redis_url)
    r.flushall()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture
def client(rds, redis_url: str):
    """A hilock.Client on the freshly flushed session server."""
    import hilock

    c = hilock.Client(redis_url, connect_timeout=2.0, command_timeout=5.0, reconnect=3.0)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def other_client(redis_url: str):
    """A second hilock.Client on the session server: another owner."""
    import hilock

    c = hilock.Client(redis_url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A redis-server of the test's own, for tests that stop or restart it."""
    with RedisServer() as srv:  # stopped and its directory removed after
        yield srv


@pytest.fixture
def default_client_env(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> Iterator[None]:
    """For the module-level functions (hilock.lock() and the like): $HILOCK_URL
    names the session server and the default client is made afresh; the one
    the test made is closed after it."""
    import hilock._client as client_mod

    monkeypatch.setenv("HILOCK_URL", redis_url)
    monkeypatch.setattr(client_mod, "_default", None)
    try:
        yield
    finally:
        d = client_mod._default
        if d is not None:
            d.close()


@pytest.fixture(autouse=True)
def _no_env_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a developer's $HILOCK_URL / $REDIS_URL (possibly a real server)
    out of the tests: only the private loopback servers may be contacted."""
    monkeypatch.delenv("HILOCK_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)


@pytest.fixture(scope="session")
def redis_node_servers() -> Iterator[list]:
    """Five independent redis-servers for Redlock, for the whole session
    (DEBUG enabled, so tests can slow a node with DEBUG SLEEP)."""
    srvs = []
    try:
        for _ in range(5):
            srvs.append(RedisServer(extra_args=["--enable-debug-command", "yes"]).start())
        yield srvs
    finally:
        for s in srvs:
            s.cleanup()


@pytest.fixture
def redis_nodes(redis_node_servers: list) -> list:
    """The five Redlock nodes, every one running (a test may stop or restart
    them) and flushed."""
    import redis

    for s in redis_node_servers:
        if s.proc is None or s.proc.poll() is not None:
            s.start()
        r = redis.Redis.from_url(s.url)
        r.flushall()
        r.close()
    return redis_node_servers


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A local Redis Cluster (3 masters, 3 replicas; tests/python/cluster.py)
    for the tests of one module: it takes a few seconds to start."""
    from cluster import running_cluster

    with running_cluster() as cl:
        yield cl


@pytest.fixture
def deployment() -> Iterator[Any]:
    """A master, a replica and sentinels watching them (stopped after the
    test): hilock._server.SentinelDeployment."""
    from hilock._server import SentinelDeployment
    d = SentinelDeployment()
    try:
        d.start()
        yield d
    finally:
        d.stop()
