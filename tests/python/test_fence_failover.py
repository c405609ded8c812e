"""Fences across a failover, with real processes: a master and a replica
(plain, under Sentinel, and in a Redis Cluster), replication cut, grants on
the master that never reach the replica, the master killed with SIGKILL and
the replica promoted. Every family that draws fences then hands out a fence
above every fence the dead master handed out: a draw is max(last + 1, the
server's clock in microseconds), and the failover took longer than the
clocks disagree. The last test shows the limit: a promoted replica whose
clock is behind the old master's by more than the failover took draws
below the lost fences.

The old rule (one more than the counter; the clock only for a missing
counter) repeats the lost fences in each of the first three tests.
"""
from __future__ import annotations

from typing import Any, Callable, Dict

import redis

import hilock
from helpers import FENCE_AHEAD, RedisServer, wait_for

# Each family that draws fences: a handle on a name, and where its counter
# lives (key, hash field or None).
FAMILIES: Dict[str, Callable[[hilock.Client, str], Any]] = {
    "lock": lambda c, n: c.lock(n, ttl=10.0),
    "rlock": lambda c, n: c.rlock(n, ttl=10.0),
    "fair_lock": lambda c, n: c.fair_lock(n, ttl=10.0),
    "sequential_lock": lambda c, n: c.sequential_lock(n, ttl=10.0),
    "rwlock_write": lambda c, n: c.rwlock(n, ttl=10.0).write(),
    "segmented_lock": lambda c, n: c.segmented_lock(n, 2, ttl=10.0),
    "multi_lock": lambda c, n: c.multi_lock([n], ttl=10.0),
}
FAST = ["--repl-diskless-sync-delay", "0"]


def _grant(c: hilock.Client, family: str, name: str) -> int:
    """One grant of family on name, released; its fence."""
    lk = FAMILIES[family](c, name)
    assert lk.acquire(blocking=False), f"{family} {name}: not granted"
    fence = lk.fence[name] if family == "multi_lock" else lk.fence
    lk.release()
    assert isinstance(fence, int) and fence > 0
    return fence


def _counter(r: redis.Redis, family: str, name: str) -> int:
    """The fence counter of name as server r has it (0: none)."""
    if family == "segmented_lock":
        v = r.hget(f"hilock:{{{name}}}:seg:fence", "n")
    else:
        v = r.get(f"hilock:{{{name}}}:fence")
    return int(v or 0)


def _set_counter(r: redis.Redis, family: str, name: str, value: int) -> None:
    if family == "segmented_lock":
        r.hset(f"hilock:{{{name}}}:seg:fence", "n", value)
    else:
        r.set(f"hilock:{{{name}}}:fence", value)


def _replicated(master: redis.Redis, marker: str) -> None:
    """Everything master wrote so far reached its replica: a write of our
    own, then WAIT for it (the stream is in order)."""
    master.set(marker, 1)
    assert master.execute_command("WAIT", 1, 10000) == 1, "the replica did not ack"


def _cut(master: redis.Redis, replica: redis.Redis) -> None:
    """Cut the replica off the master: it retries with a password the master
    does not expect, so later writes stay on the master."""
    replica.config_set("masterauth", "not-the-password")
    master.execute_command("CLIENT", "KILL", "TYPE", "replica")
    wait_for(lambda: master.info("replication")["connected_slaves"] == 0, 5,
             what="the master to drop its replica")


def _before_failover(c: hilock.Client, names: Dict[str, str], master: redis.Redis,
                     replica: redis.Redis, marker: str) -> Dict[str, int]:
    """A replicated grant of each family, then the link cut and three more
    grants each that the replica never sees. Returns each family's highest
    fence."""
    for fam, name in names.items():
        _grant(c, fam, name)
    _replicated(master, marker)
    _cut(master, replica)
    top = {}
    for fam, name in names.items():
        top[fam] = max(_grant(c, fam, name) for _ in range(3))
        # The replica missed them: its counter is behind the last fence.
        assert _counter(replica, fam, name) < top[fam]
        assert _counter(master, fam, name) == top[fam]
    return top


def _assert_above(c: hilock.Client, names: Dict[str, str], top: Dict[str, int]) -> None:
    below = {}
    for fam, name in names.items():
        f = _grant(c, fam, name)
        if f <= top[fam]:
            below[fam] = (f, top[fam])
    assert not below, f"fences not above the lost ones (new, lost): {below}"


def test_a_counter_behind_the_clock_jumps_to_the_clock(client, rds) -> None:
    """The draw itself, in every family: max(last + 1, TIME in us), stored
    as the counter. A counter behind the clock (a promoted replica's stale
    copy) gives the clock; one ahead of it counts by one."""
    for fam in FAMILIES:
        name = f"draw-{fam}"
        _set_counter(rds, fam, name, 5)
        sec, usec = rds.time()
        f = _grant(client, fam, name)
        assert f >= sec * 10**6 + usec, fam
        assert _counter(rds, fam, name) == f, fam
        _set_counter(rds, fam, name, FENCE_AHEAD)
        assert _grant(client, fam, name) == FENCE_AHEAD + 1, fam
        assert _counter(rds, fam, name) == FENCE_AHEAD + 1, fam


def _pair(replica_extra=()):
    master = RedisServer(extra_args=FAST)
    master.start()
    replica = RedisServer(extra_args=FAST + ["--replicaof", "127.0.0.1", str(master.port),
                                             *replica_extra])
    replica.start()
    r = redis.Redis(port=replica.port, socket_timeout=3)
    wait_for(lambda: r.info("replication").get("master_link_status") == "up", 10,
             what="the replica to sync")
    return master, replica


def _promote_after_loss(extra_on_master: Callable[[redis.Redis, Dict[str, str]], None]
                        = lambda m, names: None):
    """The plain pair: grants lost with the master, the replica promoted by
    REPLICAOF NO ONE. Returns (the lost fences, the fences drawn after)."""
    master, replica = _pair()
    m = redis.Redis(port=master.port, socket_timeout=3)
    rep = redis.Redis(port=replica.port, socket_timeout=3)
    names = {fam: f"ff-{fam}" for fam in FAMILIES}
    try:
        with hilock.Client(master.url) as c:
            top = _before_failover(c, names, m, rep, "ff-marker")
            extra_on_master(m, names)
            for fam, name in names.items():
                top[fam] = max(top[fam], _grant(c, fam, name))
        master.stop()  # SIGKILL
        rep.execute_command("REPLICAOF", "NO", "ONE")
        assert rep.info("replication")["role"] == "master"
        with hilock.Client(replica.url) as c:
            after = {fam: _grant(c, fam, name) for fam, name in names.items()}
        return top, after
    finally:
        m.close()
        rep.close()
        replica.cleanup()
        master.cleanup()


def test_promoted_replica_draws_above_the_lost_fences() -> None:
    top, after = _promote_after_loss()
    below = {fam: (after[fam], top[fam]) for fam in FAMILIES if after[fam] <= top[fam]}
    assert not below, f"fences not above the lost ones (new, lost): {below}"


def test_promoted_replica_behind_the_old_clock_repeats_fences() -> None:
    """The limit: the old master's clock an hour ahead of the replica's
    (its draws stored what a draw on such a clock stores: the clock plus an
    hour, never replicated). The replica, promoted within seconds, draws
    from its own clock and the counter it has: below the lost fences."""
    def clock_ahead(m: redis.Redis, names: Dict[str, str]) -> None:
        sec, usec = m.time()
        for fam, name in names.items():
            _set_counter(m, fam, name, (sec + 3600) * 10**6 + usec)

    top, after = _promote_after_loss(clock_ahead)
    for fam in FAMILIES:
        assert after[fam] < top[fam], (fam, after[fam], top[fam])


def test_sentinel_failover_draws_above_the_lost_fences(deployment) -> None:
    m = redis.Redis(port=deployment.master.port, socket_timeout=3)
    rep = redis.Redis(port=deployment.replica.port, socket_timeout=3)
    names = {fam: f"sf-{fam}" for fam in FAMILIES}
    try:
        with hilock.Client(deployment.url) as c:
            top = _before_failover(c, names, m, rep, "sf-marker")
        deployment.kill_master_and_fail_over()
        with hilock.Client(deployment.url, reconnect=15.0) as c:
            _assert_above(c, names, top)
    finally:
        m.close()
        rep.close()


def test_cluster_failover_draws_above_the_lost_fences(cluster) -> None:
    """CLUSTER FAILOVER TAKEOVER on the replica of a killed master whose
    last grants never reached it."""
    master = cluster.masters()[0]
    replica = cluster.replica_of(master)
    assert replica is not None
    names = {fam: cluster.name_on(master, f"cf-{fam}-") for fam in FAMILIES}
    marker = f"hilock:{{{names['lock']}}}:marker"  # a key of that master's
    m = cluster.conn(master)
    # One connection, READONLY: a replica answers reads of its master's keys.
    rep = redis.Redis(port=cluster.nodes[replica].port, socket_timeout=2,
                      single_connection_client=True)
    rep.execute_command("READONLY")
    try:
        with hilock.Client(cluster.url) as c:
            top = _before_failover(c, names, m, rep, marker)
        cluster.kill(master)
        rep.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
        wait_for(lambda: rep.info("replication")["role"] == "master", 20,
                 what="the replica to take over")
        cluster.wait_ok(30)
        with hilock.Client(cluster.url, reconnect=15.0) as c:
            _assert_above(c, names, top)
    finally:
        m.close()
        rep.close()
