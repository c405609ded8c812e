"""hilock.Redlock over five private redis-servers: the lock contract, node
failures (down, slowed with DEBUG SLEEP), the no-quorum error, the unsafety
of a restart without persistence, loss reporting, and mutual exclusion of
real processes checked with the history checker. The contract on one and
on three nodes, fork included, is also in test_contract.py."""
from __future__ import annotations

import socket
import threading
import time

import pytest
import redis

import hilock
from helpers import (FORK, NoLock, acquire_interrupted, acquire_within, debug_sleep, join_all,
                     pass_gate, start_child, wait_for)
from history import OverlapError, RedisHistory, check_fences_increase, check_no_overlap

KEY = "hilock:{rl}:redlock"


def urls_of(nodes):
    return [s.url for s in nodes]


def raw(node) -> redis.Redis:
    return redis.Redis.from_url(node.url)


def with_key(nodes) -> int:
    n = 0
    for s in nodes:
        if s.proc is not None and s.proc.poll() is None:
            r = raw(s)
            n += r.exists(KEY)
            r.close()
    return n


def sleep_done(s: socket.socket) -> None:
    s.settimeout(5)
    assert s.recv(16).startswith(b"+OK")
    s.close()


# -- contract -------------------------------------------------------------------

def test_lock_contract(redis_nodes) -> None:
    urls = urls_of(redis_nodes)
    a = hilock.Redlock(urls, "rl", ttl=10)
    b = hilock.redlock(urls, "rl", ttl=10, timeout=0.3)
    assert a.nodes == tuple(urls) and a.quorum == 3 and a.node_timeout == 0.05
    assert a.fence is None and a.token is None and a.validity == 0.0
    assert not a.locked()
    with a as held:
        assert held is a
        assert a.fence > 10**15 and len(a.token) == 32  # a new name: the clock
        assert 9.0 < a.validity <= 10.0 - 0.102
        assert a.owned() and a.locked() and b.locked()
        for s in redis_nodes:
            assert raw(s).get(KEY) == a.token.encode()
        t0 = time.monotonic()
        assert b.acquire() is False
        # Bounded by b's 0.3 s timeout, not a's 10 s hold; 2 s leaves room
        # for a stalled, loaded machine.
        assert 0.3 <= time.monotonic() - t0 < 2.0
        assert b.acquire(blocking=False) is False
        with pytest.raises(hilock.LockTimeout):
            with b:
                pass
    assert with_key(redis_nodes) == 0
    assert not a.owned()
    with pytest.raises(hilock.LockNotOwnedError):
        a.release()
    assert b.acquire(timeout=1)
    assert b.fence > a.fence  # each node's new counter started at its own clock
    b.extend(20, replace=True)
    assert 19 < b.validity <= 20
    b.renew()
    assert b.validity <= 10
    b.release()
    with pytest.raises(ValueError):
        a.acquire(blocking=False, timeout=1)
    with pytest.raises(TypeError):
        import pickle
        pickle.dumps(a)


def test_invalid_arguments(redis_nodes) -> None:
    urls = urls_of(redis_nodes)
    with pytest.raises(hilock.InvalidArgument):
        hilock.Redlock(urls[0], "rl")
    with pytest.raises(hilock.InvalidArgument):
        hilock.Redlock([], "rl")
    with pytest.raises(hilock.InvalidArgument):
        hilock.Redlock(urls + ["http://x"], "rl")
    with pytest.raises(hilock.InvalidArgument):
        hilock.Redlock(urls, "rl", ttl=0)
    with pytest.raises(hilock.InvalidArgument):
        hilock.Redlock(urls, "rl", ttl=1, node_timeout=1)
    with pytest.raises(hilock.InvalidArgument):
        hilock.Redlock(urls, "rl", retry_delay=-1)
    with pytest.raises(hilock.InvalidArgument):
        hilock.Redlock(urls, "")


# -- node failures ------------------------------------------------------------------

def test_minority_down_still_acquires_and_releases(redis_nodes) -> None:
    lk = hilock.Redlock(urls_of(redis_nodes), "rl", ttl=10)
    redis_nodes[0].stop()
    redis_nodes[4].stop()
    assert lk.acquire(blocking=False)
    assert with_key(redis_nodes) == 3
    assert lk.owned()
    lk.release()
    assert with_key(redis_nodes) == 0


def test_minority_slowed_still_acquires_within_the_node_timeout(redis_nodes) -> None:
    lk = hilock.Redlock(urls_of(redis_nodes), "rl", ttl=10)
    socks = [debug_sleep(redis_nodes[i].port, 5.0) for i in (1, 3)]
    t0 = time.monotonic()
    assert lk.acquire(blocking=False)
    took = time.monotonic() - t0
    lk.release()
    # The slow nodes cost one node timeout (0.05 s), not their 5 s sleep:
    # 2.5 s tells the two apart with room for a stalled, loaded machine.
    assert took < 2.5, took
    for s in socks:
        sleep_done(s)
    # The slow nodes ran the grant, then the release behind it (a key left
    # behind would live 10 s).
    wait_for(lambda: with_key(redis_nodes) == 0, 5, what="the slow nodes to release")


def test_majority_down_raises_no_quorum_in_time_and_leaves_no_lock(redis_nodes) -> None:
    lk = hilock.Redlock(urls_of(redis_nodes), "rl", ttl=10, retry_delay=0.05)
    down = redis_nodes[:3]
    for s in down:
        s.stop()
    t0 = time.monotonic()
    with pytest.raises(hilock.NoQuorumError) as info:
        lk.acquire(timeout=0.5)
    took = time.monotonic() - t0
    # The timeout bounds the call, retries included; 2 s leaves room for a
    # stalled, loaded machine.
    assert 0.5 <= took < 2.0, took
    err = info.value
    assert isinstance(err, hilock.ConnectionError)
    assert err.code == hilock._hilock.HILOCK_ENOQUORUM
    for s in down:
        assert f"127.0.0.1:{s.port}: connect" in str(err)
    assert with_key(redis_nodes) == 0
    assert lk.validity == 0.0


def test_constructor_with_a_majority_down_raises(redis_nodes) -> None:
    for s in redis_nodes[2:]:
        s.stop()
    with pytest.raises(hilock.NoQuorumError, match="2 of 5 nodes answered"):
        hilock.Redlock(urls_of(redis_nodes), "rl", connect_timeout=0.5)


def test_restart_without_persistence_lets_a_second_holder_in(redis_nodes) -> None:
    """The unsafety the Redlock description documents: a node of the
    holder's majority restarts empty, and a second client reaches a
    majority while the first still holds a valid lock."""
    urls = urls_of(redis_nodes)
    a = hilock.Redlock(urls, "rl", ttl=5, auto_renew=False)
    b = hilock.Redlock(urls, "rl", ttl=5, auto_renew=False)
    redis_nodes[3].stop()
    redis_nodes[4].stop()
    assert a.acquire(blocking=False)        # on nodes 0, 1, 2
    redis_nodes[3].start()
    redis_nodes[4].start()
    redis_nodes[2].stop()                   # crash ...
    redis_nodes[2].start()                  # ... and restart at once, empty
    assert b.acquire(blocking=False)        # on nodes 2, 3, 4
    assert a.validity > 0 and b.validity > 0
    # The node that forgot the lock forgot its fence counter too, but the
    # counter starts again at the server's clock: the newer grant's fence is
    # larger, so a fenced store refuses the older holder.
    assert b.fence > a.fence


def test_ctrl_c_interrupts_a_blocked_acquire(redis_nodes) -> None:
    urls = urls_of(redis_nodes)
    holder = hilock.Redlock(urls, "rl", ttl=10, auto_renew=False)
    waiter = hilock.Redlock(urls, "rl", ttl=10, auto_renew=False, retry_delay=5.0)
    assert holder.acquire(blocking=False)
    intr = acquire_interrupted(waiter)
    # Interrupted within the hook's period (100 ms), not at the end of a
    # delay of up to 5 s: 1 s is ten periods, room for a loaded machine.
    assert intr.caught - intr.sent < 1.0, intr.caught - intr.sent
    assert waiter.validity == 0.0 and waiter.token is None
    for s in redis_nodes:
        assert raw(s).get(KEY) == holder.token.encode()
    holder.release()
    assert waiter.acquire(timeout=2)
    waiter.release()


# -- renewal and loss ------------------------------------------------------------------

def test_on_lost_runs_when_a_majority_loses_the_key(redis_nodes) -> None:
    lost = threading.Event()
    lk = hilock.Redlock(urls_of(redis_nodes), "rl", ttl=0.6,
                        on_lost=lambda l: lost.set())
    with pytest.raises(hilock.LockLost):
        with lk:
            time.sleep(1.5)                 # renewed through the majority
            assert lk.validity > 0 and not lk.lost
            for s in redis_nodes[:3]:
                raw(s).delete(KEY)
            assert lost.wait(2.0)
            assert lk.lost


# -- mutual exclusion across processes -------------------------------------------------

N_PROCS = 6
ROUNDS = 12


def _worker(urls, counter_url: str, tag: str, use_lock: bool, gate, rounds: int) -> None:
    r = redis.Redis.from_url(counter_url)
    hist = RedisHistory(r, f"{tag}:history")
    lk = hilock.Redlock(urls, "rl", ttl=5, retry_delay=0.02) if use_lock else NoLock()
    pass_gate(gate)
    for _ in range(rounds):
        start = acquire_within(lk)
        n = int(r.get(f"{tag}:counter") or 0)
        time.sleep(0.002)                   # widen the read-modify-write race
        r.set(f"{tag}:counter", n + 1)
        end = time.monotonic()
        fence = lk.fence
        lk.release()
        hist.record(start, end, fence)


def _run(redis_nodes, tag: str, use_lock: bool, stop_minority_after: float = 0.0,
         rounds: int = ROUNDS):
    counter = redis_nodes[0].url
    gate = FORK.Event()
    procs = [start_child(_worker, urls_of(redis_nodes), counter, tag, use_lock, gate, rounds)
             for _ in range(N_PROCS)]
    time.sleep(0.05)
    gate.set()
    killed = None
    if stop_minority_after:
        time.sleep(stop_minority_after)
        redis_nodes[3].stop()               # SIGKILL two nodes mid-run
        redis_nodes[4].stop()
        killed = time.monotonic()
    join_all(procs, 50)
    r = raw(redis_nodes[0])
    hist = RedisHistory(r, f"{tag}:history").load()
    if killed is not None:
        after = sum(1 for iv in hist if iv.start > killed)
        assert after >= 10, f"only {after} grants after the kill: it came too late"
    return int(r.get(f"{tag}:counter")), hist


@pytest.mark.parametrize("stop_minority_after", [0.0, 0.1],
                         ids=["all-nodes-up", "two-nodes-killed-mid-run"])
def test_processes_over_five_nodes_never_overlap(redis_nodes, stop_minority_after) -> None:
    rounds = ROUNDS * 3 if stop_minority_after else ROUNDS
    total, hist = _run(redis_nodes, "with", True, stop_minority_after, rounds)
    assert len(hist) == N_PROCS * rounds
    assert check_no_overlap(hist) == len(hist)
    assert total == N_PROCS * rounds
    fences = check_fences_increase(hist)
    assert fences == sorted(set(fences))
    assert len({iv.pid for iv in hist}) == N_PROCS
    assert with_key(redis_nodes) == 0


def test_the_same_harness_without_the_lock_fails(redis_nodes) -> None:
    total, hist = _run(redis_nodes, "without", False)
    assert total < N_PROCS * ROUNDS
    with pytest.raises(OverlapError):
        check_no_overlap(hist)
