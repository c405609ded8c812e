"""Faults: holders that die, stale holders, lost scripts, a restarted server."""
from __future__ import annotations

import contextlib
import hashlib
import re
import os
import threading
import time
from typing import Any, Iterator, Tuple

import pytest
import redis

import hilock
from helpers import ROOT, kill_child, make_lock, start_child, start_holder, wait_for
from helpers import FENCE_AHEAD
from history import Interval, check_fences_increase

TTL = 1.0
SLACK = 0.6  # scheduling, backoff and the drift allowance


def _start_holder(url, r, kind, name, ttl=TTL, renew_every=0.0):
    """A process holding a lock of the kind until killed (renewing every
    renew_every seconds if > 0), and the grant it reported."""
    return start_holder(r, url, lambda c: make_lock(c, kind, name, ttl=ttl),
                        renew_every=renew_every)


@pytest.mark.parametrize("kind", ["expiring", "lease"])
def test_sigkilled_holder_frees_ttl_lock(kind, client, rds, redis_url) -> None:
    renew = TTL / 4 if kind == "lease" else 0.0
    p, grant = _start_holder(redis_url, rds, kind, "victim", renew_every=renew)
    key = f"hilock:{{victim}}:lock"
    try:
        if kind == "lease":
            # Renewing keeps the lease well past one TTL.
            time.sleep(TTL * 1.6)
            assert rds.get(key) == grant["token"].encode()
        assert rds.get(key) == grant["token"].encode()
    finally:
        kill_child(p)
    killed = time.monotonic()
    assert p.exitcode == -9

    waiter = make_lock(client, kind, "victim", ttl=TTL)
    # Still held right after the kill: killing frees nothing by itself.
    assert waiter.locked()
    assert waiter.acquire(blocking=False) is False

    assert waiter.acquire(timeout=TTL + SLACK + 2.0), "lock of a dead holder never lapsed"
    got = time.monotonic()
    took = got - killed
    # Freed by the TTL (a dead holder renews nothing): the acquire's own
    # bound above says "never"; 1.5 s over the TTL leaves room for a stalled,
    # loaded machine.
    assert took <= TTL + 1.5, f"free {took:.3f} s after SIGKILL, TTL is {TTL} s"
    if kind == "expiring":
        # Measured from the grant: not before the TTL ran out.
        since_grant = got - grant["t"]
        assert TTL - 0.05 <= since_grant <= TTL + 1.5, f"{since_grant:.3f} s"
    assert waiter.fence > grant["fence"]
    assert waiter.token != grant["token"]
    assert rds.get(key) == waiter.token.encode()
    waiter.release()


def test_sigkilled_holder_keeps_simple_lock(client, rds, redis_url) -> None:
    p, grant = _start_holder(redis_url, rds, "simple", "forever")
    kill_child(p)
    assert p.exitcode == -9
    key = "hilock:{forever}:lock"
    assert rds.pttl(key) == -1, "a simple lock must have no expiry"

    waiter = client.simple_lock("forever")
    time.sleep(TTL + 0.2)
    assert waiter.locked()
    t0 = time.monotonic()
    assert waiter.acquire(timeout=0.3) is False
    # Bounded by the timeout (the dead holder's key never lapses); 2.5 s
    # leaves room for a stalled, loaded machine.
    assert 0.25 <= time.monotonic() - t0 < 2.5
    assert rds.get(key) == grant["token"].encode()

    # The operator tool removes it whoever holds it; then the lock works.
    assert client.simple_lock("forever").force_release() is True
    assert waiter.locked() is False
    assert client.simple_lock("forever").force_release() is False
    assert waiter.acquire(blocking=False)
    assert waiter.fence > grant["fence"]
    waiter.release()
    assert rds.exists(key) == 0


@pytest.mark.parametrize("kind", ["expiring", "lease"])
def test_stale_release_after_expiry(kind, client, rds) -> None:
    old = make_lock(client, kind, "stale", ttl=0.2)
    new = make_lock(client, kind, "stale", ttl=5.0)
    assert old.acquire(blocking=False)
    old_fence = old.fence
    time.sleep(0.35)
    assert old.validity == 0.0
    assert new.acquire(blocking=False), "expired lock was not free"
    key = new.key

    with pytest.raises(hilock.LockNotOwnedError):
        old.release()
    # The new holder's key is intact: same token, TTL untouched.
    assert rds.get(key) == new.token.encode()
    assert rds.pttl(key) > 4000
    assert new.owned()
    assert new.fence > old_fence

    # A stale extend does not steal or touch it either.
    with pytest.raises(hilock.LockNotOwnedError):
        old.extend(10.0)
    with pytest.raises(hilock.LockNotOwnedError):
        old.release()
    assert rds.get(key) == new.token.encode()
    assert rds.pttl(key) <= 5000
    new.release()
    assert rds.exists(key) == 0


def test_stale_extend_does_not_recreate_expired_key(client, rds) -> None:
    lk = client.lease("gone", ttl=0.15, auto_renew=False)
    assert lk.acquire(blocking=False)
    key = lk.key
    time.sleep(0.3)
    assert rds.exists(key) == 0
    with pytest.raises(hilock.LockNotOwnedError):
        lk.extend(5.0)
    with pytest.raises(hilock.LockNotOwnedError):
        lk.renew()
    assert rds.exists(key) == 0
    assert lk.owned() is False


def _one_grant(url: str, name: str) -> None:
    r = redis.Redis.from_url(url)
    c = hilock.Client(url)
    lk = c.lock(name, ttl=5)
    assert lk.acquire(timeout=5)
    start = time.monotonic()
    fence = lk.fence
    end = time.monotonic()
    lk.release()
    r.rpush("grants", Interval(os.getpid(), start, end, fence).to_json())


def test_fence_increases_across_successive_holders(client, rds, redis_url) -> None:
    """Holders of every kind, in this process and in children, one after
    another on one name: each grant's fence is above all earlier ones."""
    other = hilock.Client(redis_url)
    rds.set("hilock:{fenced}:fence", FENCE_AHEAD)  # ahead of the clock: counts the grants
    try:
        seen = []
        for round_ in range(3):
            for c in (client, other):
                for kind in ("expiring", "simple", "lease"):
                    lk = make_lock(c, kind, "fenced", ttl=5)
                    assert lk.fence is None
                    assert lk.acquire(blocking=False)
                    seen.append(lk.fence)
                    lk.release()
                    assert lk.fence == seen[-1]  # the last grant's fence stays
            p = start_child(_one_grant, redis_url, "fenced")
            p.join(10)
            assert p.exitcode == 0
            iv = Interval.from_json(rds.lpop("grants"))
            seen.append(iv.fence)
        # A grant that lapses (not released) still moves the fence on.
        lapsing = client.lock("fenced", ttl=0.1, auto_renew=False)
        assert lapsing.acquire(blocking=False)
        seen.append(lapsing.fence)
        time.sleep(0.2)
        after = client.lock("fenced", ttl=5)
        assert after.acquire(blocking=False)
        seen.append(after.fence)
        after.release()
    finally:
        other.close()
    assert all(b > a for a, b in zip(seen, seen[1:])), seen
    assert seen == list(range(seen[0], seen[0] + len(seen)))  # none skipped
    # The history helper agrees.
    check_fences_increase([Interval(0, float(i), float(i), f) for i, f in enumerate(seen)])


def _commandstats(r) -> dict:
    stats = r.info("commandstats")
    return {k: v["calls"] for k, v in stats.items()}


def test_noscript_recovery_after_script_flush(client, rds) -> None:
    lk = client.lease("scripted", ttl=5, auto_renew=False)
    assert lk.acquire(blocking=False)
    lk.extend(1.0)
    lk.release()
    shas = _script_shas()
    assert shas and all(rds.script_exists(*shas)), "scripts were not cached by EVAL"

    rds.script_flush()
    assert not any(rds.script_exists(*shas))
    rds.config_resetstat()

    # Every scripted verb recovers from NOSCRIPT by sending the source.
    assert lk.acquire(blocking=False)
    lk.extend(2.0)
    lk.renew()
    lk.release()
    calls = _commandstats(rds)
    assert calls.get("cmdstat_evalsha", 0) >= 3
    assert calls.get("cmdstat_eval", 0) >= 3, calls

    # And the scripts are cached again: the next round uses EVALSHA only.
    rds.config_resetstat()
    assert lk.acquire(blocking=False)
    lk.renew()
    lk.release()
    calls = _commandstats(rds)
    assert calls.get("cmdstat_eval", 0) == 0, calls
    assert calls.get("cmdstat_evalsha", 0) == 3, calls


def _script_shas() -> list:
    """SHA1s of the scripts in core/scripts as the library embeds them
    (cmake/EmbedScripts.cmake): "-- @include NAME" lines stand for the text
    of lib/NAME, and the whole runs as the function hilock_body, called by
    lib/damage.lua."""
    root = ROOT / "core" / "scripts"
    used = ("lock_acquire.lua", "lock_extend.lua", "lock_release.lua")
    damage = (root / "lib" / "damage.lua").read_bytes()

    def embedded(n: str) -> bytes:
        # As EmbedScripts.cmake does it: in up to five passes, each include
        # line takes lib/NAME's text at its first place (a library may
        # include another), and every later line naming it goes.
        body = (root / n).read_bytes()
        seen: list = []
        for _ in range(5):
            for inc in re.findall(rb"-- @include [a-z_]+\.lua", body):
                line, name = inc + b"\n", inc[len(b"-- @include "):].decode()
                at = body.find(line)
                if name in seen or at < 0:
                    body = body.replace(line, b"")
                    continue
                seen.append(name)
                rest = body[at + len(line):].replace(line, b"")
                body = body[:at] + (root / "lib" / name).read_bytes() + rest
        return b"local function hilock_body()\n" + body + b"end\n" + damage

    shas = [hashlib.sha1(embedded(n)).hexdigest() for n in used]
    assert shas, f"no Lua scripts under {root}"
    return shas


def test_reconnect_after_server_restart(own_server) -> None:
    url = own_server.url
    with hilock.Client(url, reconnect=3.0) as c:
        lk = c.lock("restart", ttl=10)
        assert lk.acquire(blocking=False)
        lk.release()
        held = c.lock("held-across", ttl=10)
        assert held.acquire(blocking=False)

        own_server.stop()
        own_server.start()

        # The pooled connection is dead; the next call reconnects (and the
        # scripts, lost with the server, are sent again).
        t0 = time.monotonic()
        assert lk.acquire(timeout=2.0)
        # Within the call's timeout (its 250 ms slack and a loaded machine's
        # stalls aside): the reconnect does not hang.
        assert time.monotonic() - t0 < 3.5
        assert lk.owned()
        lk.release()
        c.ping()
        # The restarted server has no persistence: the old grant is gone.
        with pytest.raises(hilock.LockNotOwnedError):
            held.release()


@contextlib.contextmanager
def _server_gone(srv, reconnect: float, name: str) -> Iterator[Tuple[hilock.Client, Any]]:
    """A client on srv (with the given reconnect budget) and a lock object
    named name; the client has connected (a PING), then srv is stopped."""
    with hilock.Client(srv.url, reconnect=reconnect) as c:
        lk = c.lock(name, ttl=10)
        c.ping()
        srv.stop()
        yield c, lk


def test_command_waits_for_server_within_reconnect_budget(own_server) -> None:
    with _server_gone(own_server, 5.0, "patience") as (c, lk):
        t = threading.Timer(0.5, own_server.start)
        t.start()
        try:
            t0 = time.monotonic()
            assert lk.acquire(timeout=5.0)
            took = time.monotonic() - t0
        finally:
            t.join(15)
        # Granted once the server is back (0.5 s), not at the end of the 5 s
        # budget: 4 s leaves room for a stalled, loaded machine.
        assert 0.3 <= took < 4.0, f"took {took:.3f} s"
        lk.release()


def test_server_down_fails_with_connection_error(own_server) -> None:
    with _server_gone(own_server, 0.5, "down") as (c, lk):
        t0 = time.monotonic()
        with pytest.raises(hilock.ConnectionError) as info:
            lk.acquire(timeout=1.0)
        took = time.monotonic() - t0
        assert isinstance(info.value, ConnectionError)  # the builtin, too
        # The 0.5 s reconnect budget and the 1 s timeout bound the failure,
        # not a hang; 2.5 s leaves room for a stalled, loaded machine.
        assert took < 2.5, f"failing took {took:.3f} s"
        with pytest.raises(hilock.ConnectionError):
            c.ping()
        # The failed acquire left the object usable once the server is back.
        own_server.start()
        assert lk.acquire(timeout=3.0)
        lk.release()


def test_lock_survives_client_fork(client, rds, redis_url) -> None:
    """A client made before fork works in the child (with connections of
    its own) and still works in the parent afterwards."""
    lk = client.lock("forked", ttl=5)
    client.ping()

    def child():
        mine = client.lock("forked", ttl=5)
        assert mine.acquire(timeout=5)
        redis.Redis.from_url(redis_url).rpush("child", mine.token)
        mine.release()

    p = start_child(child)
    p.join(10)
    assert p.exitcode == 0
    assert len(rds.lpop("child")) == 32
    client.ping()
    assert lk.acquire(blocking=False)
    assert lk.owned()
    lk.release()
    wait_for(lambda: not lk.locked(), 1.0, what="lock to be free")
