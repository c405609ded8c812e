"""Sentinel deployments and replica acknowledgement, with real processes:
a master, a replica and three sentinels on loopback (down-after 1000 ms),
killed with SIGKILL and stopped by PID.

- A lock through a ``redis+sentinel://`` URL; the client and its renewal
  follow kill -9 of the master to the promoted replica.
- The failover double grant: without ``wait_replicas`` a grant the replica
  never saw is lost in the failover and a second process is granted the
  same lock while the first holds it; the history checker finds the
  overlap. With ``wait_replicas=1`` the first grant fails with
  ``NotEnoughReplicas`` and the history has no overlap.
"""
from __future__ import annotations

import time

import pytest

import hilock
from helpers import FORK
from history import OverlapError, RedisHistory, check_no_overlap


def _key(name: str, role: str = "lock") -> str:
    return f"hilock:{{{name}}}:{role}"


def _master_redis(port: int):
    import redis
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=3)


def _wait_replicated(deployment, key: str) -> None:
    """Wait until the replica has key. WAIT on a connection of the test's
    own proves nothing (it wrote nothing), and just after its first sync a
    replica may get the write stream only with its first ACK, up to a
    second later: a master killed before then loses the write."""
    r = _master_redis(deployment.replica.port)
    deadline = time.monotonic() + 3
    while not r.exists(key):
        assert time.monotonic() < deadline, f"{key} did not reach the replica"
        time.sleep(0.005)


def test_url_resolves_the_master_and_survives_a_dead_sentinel(deployment):
    dead = hilock._server.free_port()
    hosts = deployment.url[len("redis+sentinel://"):]
    url = f"redis+sentinel://127.0.0.1:{dead},{hosts}"
    m = _master_redis(deployment.master.port)
    with hilock.Client(url) as c:
        with c.lock("py-sentinel", ttl=10, timeout=1) as lk:
            assert m.get(_key("py-sentinel")).decode() == lk.token
    assert m.exists(_key("py-sentinel")) == 0
    port = deployment.sentinel_ports[0]
    with pytest.raises(hilock.ConnectionError, match="does not know master 'nope'"):
        hilock.Client(f"redis+sentinel://127.0.0.1:{port}/nope")
    with pytest.raises(hilock.InvalidArgument, match="master name"):
        hilock.Client(f"redis+sentinel://127.0.0.1:{port}")


def test_client_and_renewal_follow_a_failover(deployment):
    lost = []
    with hilock.Client(deployment.url, reconnect=15.0) as c:
        # The TTL must outlast the failover (~3 s here; more on a busy host).
        lk = c.lock("follow", ttl=8.0, on_lost=lambda l: lost.append(l))
        with lk:
            fence = lk.fence
            _wait_replicated(deployment, _key("follow"))
            t0 = time.monotonic()
            took = deployment.kill_master_and_fail_over()
            assert took < 7, f"the failover took {took:.1f} s, near the 8 s TTL"
            # Past the TTL counted from the kill: only renewals on the
            # promoted replica can have kept the key.
            time.sleep(max(0.0, t0 + 9.0 - time.monotonic()))
            assert not lost and not lk.lost
            assert lk.owned()
            r = _master_redis(deployment.replica.port)
            assert r.get(_key("follow")).decode() == lk.token
        assert r.exists(_key("follow")) == 0
        with c.lock("follow", ttl=8.0, timeout=1) as again:
            assert again.fence > fence


def test_client_follows_a_graceful_failover(deployment):
    """SENTINEL FAILOVER: the old master keeps running as a replica, so a
    client that went on using it would be refused (READONLY) or read stale
    data; the client must end up on the promoted replica."""
    with hilock.Client(deployment.url, reconnect=15.0) as c:
        lk = c.lock("graceful", ttl=10.0)
        assert lk.acquire(timeout=1)
        _wait_replicated(deployment, _key("graceful"))
        deployment.graceful_failover()
        assert lk.owned()
        lk.release()
        new, old = (_master_redis(deployment.replica.port),
                    _master_redis(deployment.master.port))
        with c.lock("graceful", ttl=10.0, timeout=1) as again:
            assert new.get(_key("graceful")).decode() == again.token
        # Several pooled connections and a second client: all on the new master.
        with hilock.Client(deployment.url) as c2:
            for i in range(5):
                with c2.lock(f"graceful-{i}", ttl=5.0, timeout=1):
                    assert new.exists(_key(f"graceful-{i}")) == 1
        assert old.info("replication")["role"] == "slave"


def _hold_through_failover(url, wait_replicas, history_url, conn) -> None:
    """Child: acquire, report, hold until told, record the interval."""
    import redis
    try:
        c = hilock.Client(url, wait_replicas=wait_replicas, wait_timeout=1.0,
                          reconnect=15.0)
        lk = c.lock("double", ttl=30.0, auto_renew=False)
        try:
            lk.acquire(timeout=2)
        except hilock.NotEnoughReplicas as e:
            conn.send(("refused", e.acked, e.wanted, lk.locked()))
            return
        start = time.monotonic()
        conn.send(("held", lk.fence, None, None))
        conn.poll(60)
        conn.recv()
        end = time.monotonic()
        RedisHistory(redis.Redis.from_url(history_url)).record(start, end, lk.fence)
        try:
            lk.release()
        except hilock.LockError:
            pass  # the promoted replica never had our grant
        conn.send(("done", None, None, None))
    except BaseException as e:  # reported, so the parent fails clearly
        conn.send(("error", repr(e), None, None))


def _failover_contest(deployment, rds, redis_url, wait_replicas):
    """Child A acquires while replication is cut; the master is killed and
    the replica promoted; then this process (B) acquires the same lock.
    Returns A's first message and the recorded history."""
    parent, child = FORK.Pipe()
    deployment.break_replication()
    p = FORK.Process(target=_hold_through_failover,
                     args=(deployment.url, wait_replicas, redis_url, child))
    p.start()
    try:
        assert parent.poll(20), "child A did not report"
        first = parent.recv()
        assert first[0] in ("held", "refused"), first
        deployment.kill_master_and_fail_over()
        with hilock.Client(deployment.url, reconnect=15.0) as c:
            lk = c.lock("double", ttl=30.0, auto_renew=False)
            assert lk.acquire(timeout=5)
            start = time.monotonic()
            time.sleep(0.2)
            end = time.monotonic()
            RedisHistory(rds).record(start, end, lk.fence)
            lk.release()
        if first[0] == "held":
            parent.send("release")
            assert parent.poll(20)
            assert parent.recv()[0] == "done"
    finally:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join()
    assert p.exitcode == 0
    return first, RedisHistory(rds).load()


def test_failover_double_grant_without_wait_replicas(deployment, rds, redis_url):
    first, history = _failover_contest(deployment, rds, redis_url, 0)
    assert first[0] == "held"
    assert len(history) == 2
    with pytest.raises(OverlapError):
        check_no_overlap(history)
    # The fencing counter was lost with the grant, yet the token did not go
    # back: the new master's missing counter starts at its clock, so a
    # fenced store still refuses the first (stale) holder.
    first_iv, second_iv = sorted(history, key=lambda iv: iv.start)
    assert second_iv.fence > first_iv.fence


def test_wait_replicas_detects_the_unreplicated_grant(deployment, rds, redis_url):
    first, history = _failover_contest(deployment, rds, redis_url, 1)
    assert first[0] == "refused", first
    assert (first[1], first[2]) == (0, 1)
    assert first[3] is False  # the grant was given back at once
    assert len(history) == 1
    check_no_overlap(history)


def test_wait_replicas_confirms_grants_on_a_healthy_replica(deployment):
    with hilock.Client(deployment.url, wait_replicas=1, wait_timeout=1.0) as c:
        assert c.wait_replicas == 1
        with c.lock("healthy", ttl=5, timeout=1) as lk:
            lk.renew()
        deployment.break_replication()
        lk = c.lock("healthy", ttl=5, auto_renew=False)
        t0 = time.monotonic()
        with pytest.raises(hilock.NotEnoughReplicas) as info:
            lk.acquire(timeout=1)
        # Bounded by the 1 s timeout, not a hang: 5 s leaves room for a
        # stalled, loaded machine.
        assert 0.4 <= time.monotonic() - t0 < 5
        assert info.value.code == hilock._hilock.HILOCK_ENOREPLICAS
        assert (info.value.acked, info.value.wanted) == (0, 1)
        assert "given back" in str(info.value)
        assert not lk.locked()
        with pytest.raises(hilock.NotEnoughReplicas):
            with c.lock("healthy-with", ttl=5, timeout=1):
                pytest.fail("the body ran without an acknowledged grant")


@pytest.mark.parametrize("kwargs", [
    {"wait_replicas": -1}, {"wait_replicas": 1.5}, {"wait_replicas": True},
    {"wait_replicas": 1, "wait_timeout": 0},
    {"wait_replicas": 1, "wait_timeout": 5.0, "command_timeout": 5.0},
])
def test_wait_options_are_checked(redis_url, kwargs):
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(redis_url, **kwargs)


def test_wait_replicas_without_replicas_refuses_every_grant(client, redis_url):
    with hilock.Client(redis_url, wait_replicas=1, wait_timeout=0.1) as c:
        lk = c.rlock("lonely", ttl=5)
        with pytest.raises(hilock.NotEnoughReplicas, match="0 of 1 replicas"):
            lk.acquire(timeout=1)
        assert not lk.locked()
        sem = c.semaphore("lonely-sem", 2, ttl=5)
        with pytest.raises(hilock.NotEnoughReplicas):
            sem.acquire(timeout=1)
        assert sem.available() == 2
        fl = c.fair_lock("lonely-fair", ttl=5)
        with pytest.raises(hilock.NotEnoughReplicas):
            fl.acquire(timeout=1)
        assert not fl.locked()


def test_coordination_types_confirm_grants_too(redis_url):
    # A lone server has no replica: every grant is unacknowledged, so each
    # type refuses it and gives it back, leaving nothing behind.
    import redis
    r = redis.Redis.from_url(redis_url)
    with hilock.Client(redis_url, wait_replicas=1, wait_timeout=0.1) as c:
        rw = c.rwlock("unconfirmed", ttl=5)
        for side in (rw.read(), rw.write()):
            with pytest.raises(hilock.NotEnoughReplicas, match="given back"):
                side.acquire(timeout=0.3)
            assert not side.locked()
        assert not rw.locked()
        ml = c.multi_lock(["unconfirmed:a", "unconfirmed:b"], ttl=5)
        with pytest.raises(hilock.NotEnoughReplicas):
            ml.acquire(timeout=0.3)
        assert not ml.locked()
        assert not any(r.exists(k) for k in ml.keys)
        sq = c.sequential_lock("unconfirmed", ttl=5)
        with pytest.raises(hilock.NotEnoughReplicas):
            sq.acquire(timeout=0.3)
        assert not sq.locked()
        sg = c.segmented_lock("unconfirmed", 2, ttl=5)
        sg.stock_init(4)
        with pytest.raises(hilock.NotEnoughReplicas):
            sg.acquire(timeout=0.3)
        assert not sg.locked()
        assert sg.segments_held() == 0 and sg.stock() == 4
        with pytest.raises(hilock.NotEnoughReplicas):
            with c.multi_lock(["unconfirmed:c"], ttl=5, timeout=0.3):
                pytest.fail("the body ran without an acknowledged grant")
    with hilock.Client(redis_url) as c:  # without it they grant
        assert c.rwlock("unconfirmed").write().acquire(blocking=False)


def test_pooled_connection_answered_readonly_moves_to_the_new_master(deployment):
    """A real READONLY on a pooled connection. Sentinel's own demotion
    closes the old master's clients (CLIENT KILL TYPE normal with its
    REPLICAOF), so it never produces one; FAILOVER hands the master role to
    the replica and keeps them connected. The sentinels are re-pointed with
    SENTINEL REMOVE and MONITOR, as in a switch-over done by an operator."""
    import redis
    name = deployment.name
    old = _master_redis(deployment.master.port)
    new = _master_redis(deployment.replica.port)

    def client_conns():
        # Unnamed connections (sentinels name theirs) but this test's own.
        me = old.client_id()
        return {int(c["id"]) for c in old.client_list(_type="normal")
                if not c.get("name") and int(c["id"]) != me}

    def readonly_errors() -> int:
        return int(old.info("errorstats").get("errorstat_READONLY", {}).get("count", 0))

    others = client_conns()
    with hilock.Client(deployment.url, reconnect=15.0) as c:
        lk = c.lock("readonly", ttl=10.0, auto_renew=False)
        assert lk.acquire(blocking=False)
        lk.release()  # its connection goes back to the pool
        pooled = client_conns() - others
        assert len(pooled) == 1
        assert readonly_errors() == 0

        sentinels = [redis.Redis(host="127.0.0.1", port=p, socket_timeout=3)
                     for p in deployment.sentinel_ports]
        for s in sentinels:  # left alone they would reconfigure the servers
            s.execute_command("SENTINEL", "REMOVE", name)
        old.execute_command("FAILOVER")
        deadline = time.monotonic() + 10
        while not (new.execute_command("ROLE")[0] == b"master"
                   and old.execute_command("ROLE")[0] == b"slave"):
            assert time.monotonic() < deadline, "FAILOVER did not complete"
            time.sleep(0.02)
        for s in sentinels:
            s.execute_command("SENTINEL", "MONITOR", name, "127.0.0.1",
                              deployment.replica.port, 2)
            s.close()
        assert deployment.master_port() == deployment.replica.port
        assert pooled <= client_conns()  # it survived the demotion

        # Refused on the pooled connection, granted on the new master.
        assert lk.acquire(blocking=False)
        assert readonly_errors() > 0
        assert new.get(_key("readonly")).decode() == lk.token
        assert not pooled & client_conns()  # the client closed it
        assert c.stats()["failovers"] == 1  # the one READONLY, counted by the client
        lk.release()
        assert new.exists(_key("readonly")) == 0


def test_a_waiter_hears_a_release_after_a_failover(deployment):
    """The waiting client's subscriber follows the failover to the promoted
    replica, so the holder's release there wakes the waiter, long before
    the holder's TTL."""
    import threading
    with hilock.Client(deployment.url, reconnect=15.0) as holder, \
            hilock.Client(deployment.url, reconnect=15.0) as waiter:
        lk = holder.lock("failover-wake", ttl=30.0, auto_renew=False)
        assert lk.acquire(timeout=1)
        _wait_replicated(deployment, _key("failover-wake"))
        got = []

        def wait():
            w = waiter.lock("failover-wake", ttl=30.0, auto_renew=False)
            if w.acquire(timeout=25):
                got.append(time.monotonic())
                w.release()

        t = threading.Thread(target=wait)
        t.start()
        deadline = time.monotonic() + 5
        while waiter.waiting != 1:
            assert time.monotonic() < deadline, "the waiter never went to sleep"
            time.sleep(0.01)
        deployment.graceful_failover()
        # The waiter retried once when its subscriber came back (still
        # held) and sleeps again, subscribed on the new master.
        time.sleep(1.0)
        released = time.monotonic()
        lk.release()
        t.join(25)
        assert got, "the waiter never got the lock"
        assert got[0] - released < 3.0, f"woken {got[0] - released:.2f} s after the release"


def test_asyncio_through_sentinel_with_a_dead_sentinel_first(deployment):
    """hilock.asyncio resolves the master through Sentinel on the loop's
    thread (the first sentinel refuses the connection) and a task waiting
    on a held lock is woken by its release."""
    import asyncio

    import hilock.asyncio as hla

    dead = hilock._server.free_port()
    hosts = deployment.url[len("redis+sentinel://"):]
    url = f"redis+sentinel://127.0.0.1:{dead},{hosts}"
    m = _master_redis(deployment.master.port)
    holder = hilock.Client(url)

    async def main() -> None:
        c = hla.Client(url)
        try:
            async with c.lock("aio-sentinel", ttl=10, timeout=5) as lk:
                assert m.get(_key("aio-sentinel")).decode() == lk.token
            held = holder.lock("aio-sentinel-held", ttl=30, auto_renew=False)
            assert held.acquire(blocking=False)
            waiter = asyncio.ensure_future(c.lock("aio-sentinel-held", ttl=10).acquire(timeout=10))
            await asyncio.sleep(0.1)
            assert not waiter.done()
            await asyncio.get_running_loop().run_in_executor(None, held.release)
            assert await waiter
        finally:
            await c.close()

    try:
        asyncio.run(main())
    finally:
        holder.close()
    assert m.exists(_key("aio-sentinel")) == 0


def test_an_election_and_its_observer_follow_a_graceful_failover(deployment):
    """The lead is renewed on the promoted replica, a proclaim after the
    failover reaches an observer that listened before it, and the next
    leader's fence is higher."""
    with hilock.Client(deployment.url, reconnect=15.0) as c:
        watch = c.election("sent-el").observe(timeout=30)
        lead = c.election("sent-el", ttl=10.0).campaign("before")
        assert next(watch) == ("before", lead.fence)
        _wait_replicated(deployment, _key("sent-el", "elect"))
        deployment.graceful_failover()
        lead.proclaim("after")
        assert next(watch) == ("after", lead.fence)
        assert c.election("sent-el").leader() == ("after", lead.fence)
        lead.resign()
        with c.election("sent-el", ttl=10.0).campaign("next") as again:
            assert again.fence > lead.fence
            assert next(watch) == ("next", again.fence)


def test_a_latch_follows_a_graceful_failover(deployment):
    """A party that joined before the failover is renewed on the promoted
    replica (the latch is not broken after it), and a waiter that listened
    before it is told when the count reaches 0 after it. The TTL is longer
    than the failover (about 10 s here), during which the old master still
    takes writes while the renewals go to the new one: a waiter looking at
    the old master then would see the lease end (docs/latch.md, Limits)."""
    import threading

    with hilock.Client(deployment.url, reconnect=15.0) as c:
        latch = c.latch("sent-latch", 2, ttl=30.0)
        party = latch.join()
        got = []

        def wait() -> None:
            try:
                got.append(latch.wait(timeout=60))
            except Exception as e:  # noqa: BLE001  (reported below)
                got.append(e)

        t = threading.Thread(target=wait)
        t.start()
        _wait_replicated(deployment, _key("sent-latch", "latch:parties"))
        deployment.graceful_failover()
        assert latch.wait(timeout=1.0) is False
        party.count_down()
        latch.count_down()
        t.join(60)
        assert got == [True], got


def test_barriers_follow_a_graceful_failover(deployment):
    """Two parties wait at a barrier of three through a failover: their
    leases are renewed on the promoted replica (the barrier is not broken
    after it), and the third, arriving after it, releases all three with
    the indices 0..2. Then a double barrier round runs on the new master.
    The TTL is longer than the failover, as for the latch (docs/latch.md,
    Limits)."""
    import threading

    with hilock.Client(deployment.url, reconnect=15.0) as c:
        barrier = c.barrier("sent-barrier", 3, ttl=30.0)
        got = []

        def wait() -> None:
            try:
                got.append(barrier.wait(timeout=90))
            except Exception as e:  # noqa: BLE001  (reported below)
                got.append(e)

        threads = [threading.Thread(target=wait) for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while barrier.n_waiting < 2:
            assert time.monotonic() < deadline, "the two parties did not arrive"
            time.sleep(0.02)
        _wait_replicated(deployment, _key("sent-barrier", "arrived"))
        deployment.graceful_failover()
        assert not barrier.broken
        got.append(barrier.wait(timeout=60))
        for t in threads:
            t.join(90)
        assert sorted(got) == [0, 1, 2], got

        db = c.double_barrier("sent-dbarrier", 2, ttl=30.0)
        entered = []

        def round_trip() -> None:
            with db.enter(timeout=60):
                entered.append(True)

        other = threading.Thread(target=round_trip)
        other.start()
        round_trip()
        other.join(60)
        assert entered == [True, True] and not db.broken
