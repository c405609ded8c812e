"""Misuse and defects found by using hilock as a user would: copies of a
client, a close while other threads are inside calls or hold locks, a
Redlock over one server listed twice, caller timeouts that must bound the
whole call, replies that come too late, fence counters that vanish, and a
block that releases its own lock."""
from __future__ import annotations

import copy
import pickle
import threading
import time
from typing import Any, Iterator, List

import pytest
import redis

import hilock
from helpers import RedisServer, debug_sleep, scripts_run, wait_for


@pytest.fixture(scope="module")
def debug_server() -> Iterator[RedisServer]:
    """A private server that allows DEBUG SLEEP (to hold a reply back)."""
    srv = RedisServer(extra_args=["--enable-debug-command", "yes"]).start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture
def dbg(debug_server: RedisServer) -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(debug_server.url)
    r.flushall()
    try:
        yield r
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
        r.close()


# -- copies ---------------------------------------------------------------------

@pytest.mark.parametrize("dup", [copy.copy, copy.deepcopy, pickle.dumps],
                         ids=["copy", "deepcopy", "pickle"])
def test_a_client_cannot_be_copied(redis_url, dup) -> None:
    c = hilock.Client(redis_url)
    with pytest.raises(TypeError, match="cannot be"):
        dup(c)
    # The original is untouched and works.
    lk = c.lock("after-copy", ttl=5)
    assert lk.acquire(blocking=False)
    lk.release()
    c.close()


# -- a concurrent close ------------------------------------------------------------

OPS = ("ping", "acquire", "wait", "release", "renewal")


@pytest.mark.parametrize("op", OPS)
def test_close_while_another_thread_is_inside_a_call(debug_server, dbg, op) -> None:
    for i in range(4):
        c = hilock.Client(debug_server.url)
        name = f"race-{op}-{i}"
        # A lock object keeps the C client alive: ping runs without one.
        lk: Any = None if op == "ping" else c.lock(name, ttl=0.09 if op == "renewal" else 5)
        if op == "wait":
            assert c.lock(name, ttl=5, auto_renew=False).acquire(blocking=False)
        if op in ("release", "renewal"):
            assert lk.acquire(blocking=False)
        out: List[Any] = []

        def call() -> None:
            try:
                if op == "ping":
                    out.append(c.ping())
                elif op == "acquire":
                    out.append(lk.acquire(blocking=False))
                elif op == "wait":
                    out.append(lk.acquire(timeout=5))
                elif op == "release":
                    out.append(lk.release())
                else:
                    time.sleep(0.15)  # the renewal thread is mid-batch
                    out.append(None)
            except BaseException as e:  # noqa: BLE001
                out.append(e)

        sock = debug_sleep(debug_server.port, 0.3)
        t = threading.Thread(target=call)
        t.start()
        time.sleep(0.01 + 0.01 * i)
        c.close()
        t.join(10)
        sock.close()
        assert not t.is_alive()
        assert len(out) == 1
        assert out[0] in (None, True, False) or isinstance(out[0], hilock.ConnectionError), out
        if op == "renewal":
            assert lk.lost
        del lk


# -- closing with locks held -----------------------------------------------------------

def test_close_stops_renewal_releases_and_reports(redis_url, rds) -> None:
    c = hilock.Client(redis_url)
    lost: List[Any] = []
    lk = c.lock("held", ttl=2, on_lost=lost.append)
    sem = c.semaphore("permits", 2, ttl=2)
    assert lk.acquire() and sem.acquire()
    c.close()
    # Released at once, and reported lost (the callback too).
    assert rds.exists(lk.key) == 0
    assert rds.zcard(b"hilock:{permits}:permits") == 0
    assert lk.lost and sem.lost
    assert lk.validity == 0.0
    deadline = time.monotonic() + 2
    while not lost and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lost == [lk]
    # Another client takes it at once; nothing renews the old grant.
    with hilock.Client(redis_url) as other:
        nxt = other.lock("held", ttl=2)
        assert nxt.acquire(blocking=False)
        nxt.release()
    with pytest.raises(hilock.ConnectionError, match="closed"):
        lk.release()


def test_close_inside_a_with_block_is_a_lost_lock(redis_url, rds) -> None:
    c = hilock.Client(redis_url)
    lk = c.lock("block", ttl=5)
    with pytest.raises(hilock.LockLost):
        with lk:
            c.close()
    assert rds.exists(lk.key) == 0


# -- a block that releases its own lock -----------------------------------------------------

def test_release_inside_its_own_with_block(client, rds) -> None:
    lk = client.lock("self-released", ttl=5)
    with lk:
        lk.release()
        assert rds.exists(lk.key) == 0
    # Released and taken again inside the block: the exit releases the new grant.
    with lk:
        lk.release()
        assert lk.acquire(blocking=False)
    assert rds.exists(lk.key) == 0
    rl = client.rlock("self-released-r", ttl=5)
    with rl:
        rl.release()
    # A lock that expired in the block is still reported lost.
    short = client.lock("expired-in-block", ttl=0.05, auto_renew=False)
    with pytest.raises(hilock.LockLost):
        with short:
            time.sleep(0.1)


# -- Redlock over one server -----------------------------------------------------------------

def test_redlock_refuses_one_server_listed_twice(redis_server) -> None:
    u = redis_server.url
    port = redis_server.port
    with pytest.raises(hilock.InvalidArgument, match="same server"):
        hilock.redlock([u, u, u], "dup", ttl=5)
    spelled = [f"redis://localhost:{port}", f"redis://127.0.0.1:{port}/0",
               f"redis://127.0.0.1:{port}"]
    with pytest.raises(hilock.InvalidArgument, match="nodes 0 and 1"):
        hilock.redlock(spelled, "dup", ttl=5)


# -- caller timeouts bound the whole call ---------------------------------------------------

def test_timeout_bounds_reconnect_to_a_dead_server() -> None:
    srv = RedisServer().start()
    try:
        c = hilock.Client(srv.url, reconnect=10.0)
        lk = c.lock("down", ttl=5)
        srv.stop()
        t0 = time.monotonic()
        with pytest.raises(hilock.ConnectionError):
            lk.acquire(timeout=1)
        took = time.monotonic() - t0
        # 1 s plus the stated 250 ms slack, not the 10 s reconnect budget:
        # 3 s leaves room for a stalled, loaded machine.
        assert 0.9 <= took < 3.0, took
        c.close()
    finally:
        srv.cleanup()


def test_timeout_bounds_a_paused_server_and_the_attempt_is_undone(debug_server, dbg) -> None:
    c = hilock.Client(debug_server.url)
    lk = c.lock("paused", ttl=10)
    c.ping()
    dbg.execute_command("CLIENT", "PAUSE", 4000, "WRITE")
    t0 = time.monotonic()
    with pytest.raises(hilock.ConnectionError, match="undone"):
        lk.acquire(timeout=0.8)
    took = time.monotonic() - t0
    # Bounded by the 0.8 s timeout, not the 4 s pause: 2.5 s leaves room for
    # a stalled, loaded machine.
    assert 0.7 <= took < 2.5, took
    assert not lk.validity
    time.sleep(max(0.0, 4.0 - took + 0.3))  # the pause ends
    # The server ran the attempt after the pause, then its undo.
    assert dbg.exists(lk.key) == 0
    assert c.lock("paused", ttl=10).acquire(blocking=False)
    c.close()


@pytest.mark.parametrize("retry", [True, False], ids=["retry", "gives-up"])
def test_a_late_reply_leaves_no_grant_nobody_owns(debug_server, dbg, retry) -> None:
    c = hilock.Client(debug_server.url, command_timeout=0.4)
    lk = c.lock("late", ttl=10)
    c.ping()
    before = scripts_run(dbg)
    sock = debug_sleep(debug_server.port, 1.0)
    try:
        with pytest.raises(hilock.ConnectionError, match="no reply in time"):
            lk.acquire()
        sock.settimeout(5)
        assert sock.recv(16).startswith(b"+OK")  # the server is awake again
        if retry:
            assert lk.acquire(timeout=3)  # not after the 10 s TTL
            lk.release()
        else:
            # The late attempt and its undo have run.
            wait_for(lambda: scripts_run(dbg) >= before + 2, 5, what="the attempt and its undo")
            assert dbg.exists(lk.key) == 0
    finally:
        sock.close()
        c.close()


# -- fences never go back ----------------------------------------------------------------------

def _fence(c: hilock.Client, name: str) -> int:
    lk = c.lock(name, ttl=5)
    assert lk.acquire(blocking=False)
    f = lk.fence
    lk.release()
    assert f is not None
    return f


def test_fences_survive_flushall_and_restart(client, rds) -> None:
    a = _fence(client, "fenced")
    assert _fence(client, "fenced") > a
    rds.flushall()
    assert _fence(client, "fenced") > a + 1
    srv = RedisServer().start()
    try:
        with hilock.Client(srv.url, reconnect=5) as c:
            before = _fence(c, "restarted")
            srv.stop()
            srv.start()
            assert _fence(c, "restarted") > before
    finally:
        srv.cleanup()


# -- small ones ----------------------------------------------------------------------------------

def test_empty_password_sends_no_auth(redis_server, rds) -> None:
    rds.config_resetstat()
    with hilock.Client(f"redis://:@127.0.0.1:{redis_server.port}") as c:
        c.ping()
    assert rds.info("commandstats").get("cmdstat_auth") is None


def test_maxclients_is_a_connection_error(redis_url, rds) -> None:
    n = rds.info("clients")["connected_clients"]
    rds.config_set("maxclients", n)
    try:
        with pytest.raises(hilock.ConnectionError, match="max number of clients"):
            c = hilock.Client(redis_url)
            c.ping()
    finally:
        rds.config_set("maxclients", 10000)
