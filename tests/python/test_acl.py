"""Least privilege: a Redis ACL user limited to exactly the rule
docs/security.md publishes (read from that page, so the two cannot drift)
runs every lock type: waiting shared and not, renewal, extend, the fenced
store (with its data pattern added) and Redlock over three nodes. Taking
one command away makes the lock type that needs it fail loudly."""
from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List

import pytest
import redis

import hilock
from helpers import RedisServer, assert_a_timed_out_wait_breaks, wait_for

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def acl_rule() -> List[str]:
    """The words of the published ACL SETUSER command, without the user
    name and the password placeholder."""
    text = DOCS.read_text()
    block = text.split("<!-- acl-rule:", 1)[1].split("```", 2)[1]
    words = block.split()
    assert words[:3] == ["ACL", "SETUSER", "locks"]
    return [w for w in words[3:] if not w.startswith(">")]


def test_the_rule_names_every_command_the_scripts_run() -> None:
    """Every command of every embedded script is in the published rule (a
    script runs with its caller's permissions)."""
    from test_script_safety import embedded_scripts

    rule = {w[1:].split("|")[0].lower() for w in acl_rule() if w.startswith("+")}
    used = {c.lower() for src in embedded_scripts().values()
            for c in re.findall(r"redis\.p?call\(\s*'([A-Za-z]+)'", src)}
    used |= {"zrangebyscore", "zrevrangebyscore"}  # chosen at run time (seqlock)
    assert used - rule == set()


def make_user(r: redis.Redis, name: str, rule: List[str], extra: List[str] = ()) -> None:
    r.execute_command("ACL", "SETUSER", name, "reset", ">pw", *rule, *extra)


@pytest.fixture
def acl_server() -> Iterator[RedisServer]:
    srv = RedisServer().start()
    try:
        yield srv
    finally:
        srv.cleanup()


def user_url(srv: RedisServer, user: str) -> str:
    return f"redis://{user}:pw@127.0.0.1:{srv.port}"


FACTORIES: List[Callable[[hilock.Client], Any]] = [
    lambda c: c.lock("a", ttl=0.3),
    lambda c: c.simple_lock("b"),
    lambda c: c.lease("c", 0.3),
    lambda c: c.rlock("d", ttl=0.3),
    lambda c: c.fair_lock("e", ttl=0.3),
    lambda c: c.sequential_lock("f", ttl=0.3),
    lambda c: c.segmented_lock("g", 3, ttl=0.3),
    lambda c: c.rwlock("h", ttl=0.3).write(),
    lambda c: c.rwlock("h", ttl=0.3).read(),
    lambda c: c.semaphore("i", 1, ttl=0.3),
    lambda c: c.multi_lock(["j", "k"], ttl=0.3),
    lambda c: c.election("l", ttl=0.3),
]


def exercise(c: hilock.Client, make: Callable[[hilock.Client], Any]) -> None:
    """Hold past two renewal periods, with a second holder waiting (or, for
    a shared read, joining at once), then release."""
    a, b = make(c), make(c)
    got: List[Any] = []

    def wait() -> None:
        try:
            got.append(b.acquire(timeout=10))
            b.release()
        except Exception as e:  # noqa: BLE001  (reported below)
            got.append(e)

    with a:
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.5)  # the watchdog renews the 0.3 s grant meanwhile
        assert not a.lost
        if hasattr(a, "owned"):
            assert a.owned()
    t.join(15)
    assert got == [True], got


@pytest.mark.parametrize("shared", [True, False], ids=["shared-waiting", "blpop"])
def test_every_lock_type_runs_as_the_published_acl_user(acl_server: RedisServer,
                                                        shared: bool) -> None:
    r = redis.Redis.from_url(acl_server.url)
    make_user(r, "locks", acl_rule())
    r.execute_command("ACL", "LOG", "RESET")
    with hilock.Client(user_url(acl_server, "locks"), shared_waiting=shared) as c:
        for make in FACTORIES:
            exercise(c, make)
        lk = c.lock("x", ttl=5)
        with lk:
            lk.extend(5)
            assert lk.store().incrby("hilock:data:n") == 1  # data under hilock:*
        # An election's observer hears a change on its hilock:* channel.
        watch = c.election("obs").observe(timeout=10)
        with c.election("obs", ttl=5).campaign("v1") as lead:
            assert next(watch) == ("v1", lead.fence)
            lead.proclaim("v2")
            assert next(watch) == ("v2", lead.fence)
        # A latch: its party renewed past its 0.3 s lease, its waiter told
        # on its hilock:* channel (or looking every 500 ms without it).
        latch = c.latch("m", 2, ttl=0.3)
        done: List[Any] = []
        t = threading.Thread(target=lambda: done.append(latch.wait(timeout=10)))
        t.start()
        with latch.join():
            time.sleep(0.5)
        latch.count_down()
        t.join(15)
        assert done == [True]
    assert r.execute_command("ACL", "LOG") == []  # nothing was refused


def test_the_fenced_store_with_its_data_pattern(acl_server: RedisServer) -> None:
    r = redis.Redis.from_url(acl_server.url)
    make_user(r, "locks", acl_rule(), ["~stock:*"])
    with hilock.Client(user_url(acl_server, "locks")) as c:
        with c.lock("inv") as lk:
            assert lk.store().incrby("stock:sku1", 5) == 5
        with pytest.raises(hilock.NoPermissionError):
            c.fenced_store().get("orders:1", fence=lk.fence or 1)


def test_redlock_runs_as_the_published_acl_user(redis_nodes: list) -> None:
    urls = []
    for s in redis_nodes[:3]:
        r = redis.Redis.from_url(s.url)
        make_user(r, "locks", acl_rule())
        urls.append(user_url(s, "locks"))
    try:
        with hilock.Redlock(urls, "rl-acl", ttl=5) as rl:
            assert rl.fence
    finally:
        for s in redis_nodes[:3]:
            redis.Redis.from_url(s.url).execute_command("ACL", "DELUSER", "locks")


@pytest.mark.parametrize("missing,make", [
    ("+zadd", lambda c: c.fair_lock("e", ttl=0.3)),
    ("+evalsha", lambda c: c.lock("a", ttl=0.3)),
    ("+hset", lambda c: c.rlock("d", ttl=0.3)),
])
def test_one_command_less_fails_loudly(acl_server: RedisServer, missing: str,
                                       make: Callable[[hilock.Client], Any]) -> None:
    rule = acl_rule()
    assert missing in rule
    r = redis.Redis.from_url(acl_server.url)
    make_user(r, "less", [w for w in rule if w != missing] +
              (["-eval"] if missing == "+evalsha" else []))
    with hilock.Client(user_url(acl_server, "less")) as c:
        with pytest.raises(hilock.NoPermissionError) as e:
            make(c).acquire(timeout=1)
        assert "permission" in str(e.value) or "can't run" in str(e.value)


def tenant_rule(prefix: str) -> List[str]:
    """The published rule with hilock:* replaced by the tenant's prefix."""
    return [w.replace("hilock:", prefix) for w in acl_rule()]


def test_two_tenants_with_their_own_prefix_and_acl_user(acl_server: RedisServer) -> None:
    r = redis.Redis.from_url(acl_server.url)
    make_user(r, "t1", tenant_rule("t1:"))
    make_user(r, "t2", tenant_rule("t2:"))
    make_user(r, "op", tenant_rule("t1:"), ["+scan"])
    with hilock.Client(user_url(acl_server, "t1"), prefix="t1:") as one, \
            hilock.Client(user_url(acl_server, "t2"), prefix="t2:") as two:
        # The same names, held at once by each tenant: no key is shared.
        for make in FACTORIES:
            a, b = make(one), make(two)
            with a, b:
                assert not a.lost and not b.lost
        exercise(one, FACTORIES[0])
        exercise(two, FACTORIES[4])
        with one.lock("orders:42") as lk:
            assert lk.store().incrby("t1:data:n") == 1  # data under the prefix
            assert one.inspect("orders:42").held
            assert not two.inspect("orders:42").held
            with pytest.raises(hilock.NoPermissionError):
                list(one.list_locks())  # SCAN is an operator's command
            with hilock.Client(user_url(acl_server, "op"), prefix="t1:") as op:
                names = {i.name: i.held for i in op.list_locks()}
                assert names["orders:42"] is True  # (and what t1's locks left)
        keys = {k.decode() for k in r.keys("*")}
        assert keys and all(k.startswith(("t1:", "t2:")) for k in keys), keys
        assert any(k.startswith("t1:{orders:42}:") for k in keys)
        assert "t1:fence:{t1:data:n}" in keys
    # A tenant's user cannot touch the other tenant's locks.
    with hilock.Client(user_url(acl_server, "t1"), prefix="t2:") as wrong:
        with pytest.raises(hilock.NoPermissionError):
            wrong.lock("orders:42").acquire(timeout=1)


def test_prefix_is_checked() -> None:
    for bad in ("", "a{", "b}", "x" * 65, "nul\0", 5):
        with pytest.raises(hilock.InvalidArgument):
            hilock.Client("redis://127.0.0.1:1", prefix=bad)  # type: ignore[arg-type]


class ErrorRecords(logging.Handler):
    """The ERROR records of the "hilock" logger."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def error_records() -> Iterator[ErrorRecords]:
    log = logging.getLogger("hilock")
    h = ErrorRecords()
    log.addHandler(h)
    try:
        yield h
    finally:
        log.removeHandler(h)


def blocked_or_subscribed(r: redis.Redis) -> bool:
    """Some connection waits: blocked in BLPOP, or subscribed."""
    return any(cl.get("cmd") == "blpop" and "b" in cl.get("flags", "")
               or int(cl.get("sub", 0)) > 0 for cl in r.client_list())


def test_a_user_without_publish_is_told_and_its_waiters_still_woken(
        acl_server: RedisServer, error_records: ErrorRecords) -> None:
    """Without +publish a release cannot ring the shared waiting (its
    PUBLISH is refused inside the script, which still releases), and a
    waiter there slept until its bound ran out. The client finds out at
    its first shared wait, logs it once at ERROR and waits in BLPOP on the
    wake list, which the release fills. The bound below is no measurement:
    the wake-up takes milliseconds, and without it the waiter is granted
    only when its 40 s timeout (under the holder's renewed 60 s TTL) runs
    out, so 20 s leaves a loaded machine a wide margin either way."""
    r = redis.Redis.from_url(acl_server.url)
    rule = acl_rule()
    assert "+publish" in rule
    make_user(r, "nopub", [w for w in rule if w != "+publish"])
    with hilock.Client(user_url(acl_server, "nopub"), direct_waiters=0) as c:
        for round_ in range(2):
            holder = c.lock("np", ttl=60)
            assert holder.acquire()
            waiter = c.lock("np", ttl=60)
            got: List[Any] = []
            t = threading.Thread(target=lambda w=waiter, g=got: g.append(w.acquire(timeout=40)))
            t.start()
            wait_for(lambda: blocked_or_subscribed(r), 10, what="the waiter to wait")
            holder.release()
            wait_for(lambda g=got: g, 20, what=f"the grant to the waiter (round {round_})")
            t.join()
            assert got == [True]
            waiter.release()
    refused = [m for m in error_records.messages if "PUBLISH refused" in m]
    assert len(refused) == 1, error_records.messages  # once per client


def test_a_user_without_publish_or_blpop_fails_loudly(acl_server: RedisServer) -> None:
    """Neither wake-up works: the wait raises NoPermissionError instead of
    sleeping out its timeout."""
    r = redis.Redis.from_url(acl_server.url)
    make_user(r, "nowake", [w for w in acl_rule() if w not in ("+publish", "+blpop")])
    with hilock.Client(user_url(acl_server, "nowake")) as c:
        holder = c.lock("nw", ttl=30)
        assert holder.acquire()
        with pytest.raises(hilock.NoPermissionError):
            c.lock("nw", ttl=30).acquire(timeout=20)
        holder.release()


@pytest.mark.parametrize("missing", ["+rpush", "+lpop"])
def test_a_user_without_a_wake_list_right_fails_loudly(acl_server: RedisServer,
                                                       missing: str) -> None:
    """The release pushes the wake-up (RPUSH), a shared waiter takes it
    (LPOP): without either, the call that needs it raises."""
    r = redis.Redis.from_url(acl_server.url)
    make_user(r, "nolist", [w for w in acl_rule() if w != missing])
    with hilock.Client(user_url(acl_server, "nolist"), direct_waiters=0) as c:
        holder = c.lock("nl", ttl=30)
        assert holder.acquire()
        if missing == "+rpush":
            with pytest.raises(hilock.NoPermissionError):
                holder.release()
            assert not holder.locked()  # given up; only the wake-up failed
        else:
            with pytest.raises(hilock.NoPermissionError):
                c.lock("nl", ttl=30).acquire(timeout=20)
            holder.release()


def test_asyncio_waiters_of_a_user_without_publish_are_still_woken(
        acl_server: RedisServer, error_records: ErrorRecords) -> None:
    """As above, for the asyncio client's waits (which hold no connection:
    without the shared waiting they look again every 100 ms). The 20 s
    bound is no measurement: without a wake-up the waiters are granted
    only at their 40 s timeout, under the holder's renewed 60 s TTL."""
    import asyncio

    import hilock.asyncio

    r = redis.Redis.from_url(acl_server.url)
    make_user(r, "nopub", [w for w in acl_rule() if w != "+publish"])

    async def main() -> List[bool]:
        async with hilock.asyncio.Client(user_url(acl_server, "nopub")) as c:
            holder = c.lock("anp", ttl=60)
            assert await holder.acquire()
            waiters = [c.lock("anp", ttl=60) for _ in range(2)]

            async def wait(lk: Any) -> bool:
                got = bool(await lk.acquire(timeout=40))
                if got:
                    await lk.release()
                return got

            tasks = [asyncio.ensure_future(wait(w)) for w in waiters]
            while not blocked_or_subscribed(r) and not error_records.messages:
                await asyncio.sleep(0.01)  # until the waits began
            await holder.release()
            return list(await asyncio.wait_for(asyncio.gather(*tasks), 20))

    assert asyncio.run(main()) == [True, True]
    refused = [m for m in error_records.messages if "PUBLISH refused" in m]
    assert len(refused) == 1, error_records.messages


@pytest.mark.parametrize("shared", [True, False], ids=["shared-waiting", "blpop"])
def test_barriers_run_as_the_published_acl_user(acl_server: RedisServer, shared: bool) -> None:
    """Waiters renewed past their 0.3 s TTL (the party renewal), woken on
    the barrier's hilock:* channel, and a double barrier round."""
    r = redis.Redis.from_url(acl_server.url)
    make_user(r, "locks", acl_rule())
    r.execute_command("ACL", "LOG", "RESET")
    with hilock.Client(user_url(acl_server, "locks"), shared_waiting=shared) as c:
        barrier = c.barrier("bar", 2, ttl=0.3)
        got: List[Any] = []
        t = threading.Thread(target=lambda: got.append(barrier.wait(timeout=10)))
        t.start()
        time.sleep(0.5)  # the watchdog renews the waiter's 0.3 s lease meanwhile
        assert not barrier.broken
        assert barrier.wait(timeout=10) == 1
        t.join(15)
        assert got == [0]
        assert barrier.delete()
        # A wait that times out breaks a barrier of 3 for the other waiter.
        three = c.barrier("bar3", 3, ttl=0.3)
        assert_a_timed_out_wait_breaks(three, timeout=10)
        assert three.broken
        three.reset()
        assert three.delete()
        db = c.double_barrier("dbar", 2, ttl=0.3)
        t = threading.Thread(target=lambda: db.enter(timeout=10).leave(timeout=10))
        t.start()
        with db.enter(timeout=10):
            time.sleep(0.5)
        t.join(15)
        assert not db.broken
    assert r.execute_command("ACL", "LOG") == []  # nothing was refused


def test_the_recipes_under_a_tenant_prefix_and_its_acl_user(acl_server: RedisServer) -> None:
    """The election, the latch and the barriers keep every key and channel
    under the client's prefix, so a tenant's user restricted to its prefix
    (~t3:* and &t3:*) runs them, waiters woken through its channels; no
    key is written outside the prefix."""
    r = redis.Redis.from_url(acl_server.url)
    make_user(r, "t3", tenant_rule("t3:"))
    with hilock.Client(user_url(acl_server, "t3"), prefix="t3:") as c:
        with c.election("rec-el", ttl=5.0).campaign("me") as lead:
            assert c.election("rec-el").leader() == ("me", lead.fence)
        latch = c.latch("rec-latch", 2, ttl=5.0)
        party = latch.join()
        got: List[object] = []
        waiter = threading.Thread(target=lambda: got.append(latch.wait(timeout=30)))
        waiter.start()
        party.count_down()
        latch.count_down()
        waiter.join(30)
        assert got == [True]
        barrier = c.barrier("rec-barrier", 2, ttl=5.0)
        arrived: List[int] = []
        other = threading.Thread(target=lambda: arrived.append(barrier.wait(timeout=30)))
        other.start()
        arrived.append(barrier.wait(timeout=30))
        other.join(30)
        assert sorted(arrived) == [0, 1]
    keys = {k.decode() for k in r.keys("*")}
    assert keys and all(k.startswith("t3:") for k in keys), keys
    assert any(k.startswith("t3:{rec-latch}:") for k in keys)
    assert any(k.startswith("t3:{rec-barrier}:") for k in keys)
