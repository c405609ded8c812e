"""Deadlock detection across processes (Client(detect_deadlocks=True)): cycles
of waits between processes and between threads are found, exactly one wait
of each (the youngest) fails with DeadlockError naming the cycle, the others
get their locks; chains that resolve are never reported."""
import json
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List

import pytest

import hilock

# Each process takes its first lock, says so with a file, waits for the
# test's "go" file, then waits for its second lock (the next process's
# first), and prints what happened as JSON.
WORKER = r"""
import json, os, sys, time
import hilock
url, d, me, first, second, delay, detect, wait = sys.argv[1:]
c = hilock.Client(url, detect_deadlocks=detect == "1", deadlock_timeout=float(delay))
a = c.lock(first, ttl=120)
b = c.lock(second, ttl=120)
a.acquire()
open(os.path.join(d, "held." + me), "w").close()
while not os.path.exists(os.path.join(d, "go")):
    time.sleep(0.005)
t0 = time.monotonic()
try:
    ok = b.acquire(timeout=float(wait))
    out = {"ok": bool(ok)}
    if ok:
        b.release()
except hilock.DeadlockError as e:
    out = {"deadlock": str(e)}
out["waited"] = time.monotonic() - t0
a.release()
c.close()
print(json.dumps(out))
"""


def _ring(redis_url: str, tmp_path: Any, n: int, delay: float, detect: bool,
          wait: float) -> List[Dict[str, Any]]:
    """n processes in a ring: process i holds L<i> and waits for L<i+1>."""
    names = [f"dl-ring-{n}-{i}" for i in range(n)]
    procs = [subprocess.Popen(
        [sys.executable, "-c", WORKER, redis_url, str(tmp_path), str(i), names[i],
         names[(i + 1) % n], str(delay), "1" if detect else "0", str(wait)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]
    try:
        # Every process holds its first lock before any waits for its second.
        held = [tmp_path / f"held.{i}" for i in range(n)]
        limit = time.monotonic() + 60  # a stuck start fails instead of hanging
        while not all(p.exists() for p in held):
            assert time.monotonic() < limit, "workers did not take their first locks"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        (tmp_path / "go").touch()
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=wait + 60)
            assert p.returncode == 0, err
            outs.append(json.loads(out.strip().splitlines()[-1]))
        return outs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("n", [2, 3, 5])
def test_cycle_across_processes_has_one_victim(rds: Any, redis_url: str, tmp_path: Any,
                                               n: int) -> None:
    delay = 0.5
    outs = _ring(redis_url, tmp_path, n, delay, True, 60.0)
    victims = [o for o in outs if "deadlock" in o]
    assert len(victims) == 1, outs
    assert all(o.get("ok") is True for o in outs if "deadlock" not in o), outs
    msg = victims[0]["deadlock"]
    # The message names every lock of the cycle, in the order of the waits.
    for i in range(n):
        assert f"dl-ring-{n}-{i}" in msg, msg
    assert f"({n} owners)" in msg, msg
    # Found within the delay and a bound: the cycle closes when the last
    # wait begins; its check runs at the delay, or half a delay later when
    # another member had not recorded its wait yet. The 5 s on top is
    # generous for a loaded 2-core machine (the walk is a few round trips).
    assert victims[0]["waited"] < delay * 1.5 + 5.0, victims
    # Every record of the waits is gone once they end.
    assert not rds.keys("*:dlw"), rds.keys("*:dlw")


def test_cycle_without_detection_waits_out(rds: Any, redis_url: str, tmp_path: Any) -> None:
    outs = _ring(redis_url, tmp_path, 2, 0.2, False, 1.5)
    # Nobody is failed for a deadlock: the cycle ends only when a wait runs
    # out (the first to give up releases its lock, which may still reach
    # the other before its own wait runs out).
    assert not any("deadlock" in o for o in outs), outs
    assert any(o["ok"] is False for o in outs), outs
    assert not rds.keys("*:dl*")  # detection off writes nothing


def _thread_cycle(client: Any, names: List[str], kind: str = "lock") -> Dict[int, str]:
    """Threads of one client in a ring; what each thread's wait ended with."""
    n = len(names)
    make = getattr(client, kind)
    firsts = [make(nm, ttl=120) for nm in names]
    seconds = [make(names[(i + 1) % n], ttl=120) for i in range(n)]
    ready = threading.Barrier(n)
    res: Dict[int, str] = {}

    def run(i: int) -> None:
        firsts[i].acquire()
        ready.wait(timeout=30)
        try:
            res[i] = "ok" if seconds[i].acquire(timeout=60) else "timeout"
            if res[i] == "ok":
                seconds[i].release()
        except hilock.DeadlockError as e:
            res[i] = "deadlock: " + str(e)
        firsts[i].release()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return res


@pytest.mark.parametrize("kind", ["lock", "fair_lock"])
def test_cycle_across_threads_of_one_client(rds: Any, redis_url: str, kind: str) -> None:
    c = hilock.Client(redis_url, detect_deadlocks=True, deadlock_timeout=0.2)
    try:
        res = _thread_cycle(c, ["dl-t-a", "dl-t-b", "dl-t-c"], kind)
    finally:
        c.close()
    assert sorted(v.split(":")[0] for v in res.values()) == ["deadlock", "ok", "ok"], res


def _chain_round(c: Any, rds: Any, rnd: int) -> Dict[str, str]:
    """t1 holds a and waits for b, t2 holds b and waits for c, which this
    thread holds until both waits have recorded themselves."""
    a, b, cc = (f"dl-chain-{rnd}-{x}" for x in "abc")
    hold_c = c.lock(cc, ttl=60)
    assert hold_c.acquire()
    res: Dict[str, str] = {}
    b_held = threading.Event()

    def t2() -> None:
        lb, lc = c.lock(b, ttl=60), c.lock(cc, ttl=60)
        lb.acquire()
        b_held.set()
        try:
            res["t2"] = "ok" if lc.acquire(timeout=60) else "timeout"
            lc.release()
        except hilock.LockError as e:
            res["t2"] = repr(e)
        lb.release()

    def t1() -> None:
        la, lb = c.lock(a, ttl=60), c.lock(b, ttl=60)
        la.acquire()
        b_held.wait()
        try:
            res["t1"] = "ok" if lb.acquire(timeout=60) else "timeout"
            lb.release()
        except hilock.LockError as e:
            res["t1"] = repr(e)
        la.release()

    ts = [threading.Thread(target=t2), threading.Thread(target=t1)]
    for t in ts:
        t.start()
    limit = time.monotonic() + 30
    while len(rds.keys("*:dlw")) < 2:  # both waits recorded and walked
        assert time.monotonic() < limit, "the waits never recorded themselves"
        time.sleep(0.005)
    hold_c.release()
    for t in ts:
        t.join()
    return res


def test_chain_that_resolves_is_no_deadlock(rds: Any, redis_url: str) -> None:
    """A waits for B, B for C, C's holder releases once both waits have
    recorded themselves (their walks ran over the chain): nobody fails.
    Repeated with a short delay so that walks run while the chain moves."""
    c = hilock.Client(redis_url, detect_deadlocks=True, deadlock_timeout=0.05)
    try:
        for rnd in range(5):
            assert _chain_round(c, rds, rnd) == {"t1": "ok", "t2": "ok"}
    finally:
        c.close()


def test_deadlock_options_are_checked(redis_url: str) -> None:
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(redis_url, detect_deadlocks=1)  # type: ignore[arg-type]
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(redis_url, detect_deadlocks=True, deadlock_timeout=0)
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(redis_url, detect_deadlocks=True, deadlock_timeout=float("nan"))



def _thread_ring(c: hilock.Client, firsts: List[Callable[[], Any]],
                 seconds: List[Callable[[], Any]]) -> Dict[int, str]:
    """Thread i takes firsts[i]() and, once every thread holds its first,
    waits for seconds[i](): each thread's outcome ("ok", "timeout" or
    "deadlock: <message>"). Closes c."""
    ready = threading.Barrier(len(firsts))
    res: Dict[int, str] = {}

    def run(i: int) -> None:
        first, second = firsts[i](), seconds[i]()
        first.acquire()
        ready.wait(timeout=30)
        try:
            res[i] = "ok" if second.acquire(timeout=60) else "timeout"
            if res[i] == "ok":
                second.release()
        except hilock.DeadlockError as e:
            res[i] = "deadlock: " + str(e)
        first.release()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(firsts))]
    try:
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        c.close()
    return res

def test_cycle_through_every_served_type(rds: Any, redis_url: str) -> None:
    """A ring of threads through a lock, a reentrant lock and the write side
    of a read-write lock: one of them fails, naming all three."""
    c = hilock.Client(redis_url, detect_deadlocks=True, deadlock_timeout=0.2)
    makers = [lambda: c.lock("dl-m-lock", ttl=60), lambda: c.rlock("dl-m-rlock", ttl=60),
              lambda: c.rwlock("dl-m-rw", ttl=60).write()]
    res = _thread_ring(c, makers, makers[1:] + makers[:1])
    victims = [v for v in res.values() if v.startswith("deadlock")]
    assert len(victims) == 1 and sorted(res.values())[1:] == ["ok", "ok"], res
    for name in ("dl-m-lock", "dl-m-rlock", "dl-m-rw"):
        assert name in victims[0], victims


def _soak(redis_url: str, rds: Any, ordered: bool, seed: int,
          hold: float) -> Dict[str, int]:
    """4 threads of 4 clients take random pairs of 4 locks, 15 rounds each,
    holding each pair up to hold seconds; ordered: always in name order (no
    cycle can form). A DeadlockError backs off (releases the first lock).
    "recorded": how many looks at the server found a wait recorded (checks
    ran)."""
    import random

    names = [f"dl-soak-{i}" for i in range(4)]
    counts = {"deadlock": 0, "timeout": 0, "done": 0, "recorded": 0}
    mu = threading.Lock()
    clients = [hilock.Client(redis_url, detect_deadlocks=True, deadlock_timeout=0.05)
               for _ in range(4)]

    def run(k: int) -> None:
        rnd = random.Random(seed * 10 + k)
        c = clients[k]
        for _ in range(15):
            pair = rnd.sample(names, 2)
            if ordered:
                pair.sort()
            first, second = c.lock(pair[0], ttl=60), c.lock(pair[1], ttl=60)
            outcome = "done"
            if not first.acquire(timeout=30):
                outcome = "timeout"
            else:
                try:
                    if second.acquire(timeout=30):
                        time.sleep(rnd.random() * hold)  # the hold: work, not sync
                        second.release()
                    else:
                        outcome = "timeout"
                except hilock.DeadlockError:
                    outcome = "deadlock"
                first.release()
            with mu:
                counts[outcome] += 1

    ts = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    try:
        for t in ts:
            t.start()
        while any(t.is_alive() for t in ts):
            counts["recorded"] += bool(rds.keys("*:dlw"))
            time.sleep(0.01)
        for t in ts:
            t.join()
    finally:
        for c in clients:
            c.close()
    return counts


def test_soak_random_orders_every_cycle_broken(rds: Any, redis_url: str) -> None:
    """Random orders: every cycle that forms is found and broken (no wait
    runs out its 30 s; an undetected cycle would), each by one victim."""
    counts = _soak(redis_url, rds, False, 1, 0.005)
    assert counts["timeout"] == 0, counts
    assert counts["done"] + counts["deadlock"] == 60, counts


def test_soak_ordered_never_reports(rds: Any, redis_url: str) -> None:
    """Name order: no cycle can form, so no DeadlockError, while checks run
    every 25 ms over chains that keep moving (holds up to 80 ms, longer than
    the 50 ms delay)."""
    counts = _soak(redis_url, rds, True, 2, 0.08)
    assert counts["recorded"] > 0, counts  # waits lasted the delay: walks ran
    del counts["recorded"]
    assert counts == {"deadlock": 0, "timeout": 0, "done": 60}, counts


GREEN = r"""
from gevent import monkey; monkey.patch_all()
import json, sys
import gevent
from gevent.event import Event
import hilock
c = hilock.Client(sys.argv[1], detect_deadlocks=True, deadlock_timeout=0.1)
out = {}
# Not a cycle: g1 holds GA until g2 is done; g2 holds GB and waits for GA
# (its waits run on the hub's pool threads, which g1's grant came from too).
held, done = Event(), Event()
def g1():
    a = c.lock("GA", ttl=60)
    a.acquire()
    held.set()
    done.wait()
    a.release()
def g2():
    held.wait()
    b, a = c.lock("GB", ttl=60), c.lock("GA", ttl=60)
    b.acquire()
    try:
        out["chain"] = a.acquire(timeout=0.8)
    except hilock.DeadlockError as e:
        out["chain"] = str(e)
    b.release()
    done.set()
gevent.joinall([gevent.spawn(g1), gevent.spawn(g2)])
# A cycle between two greenlets.
evs = [Event(), Event()]
ring = {}
def member(i, first, second):
    f, s = c.lock(first, ttl=60), c.lock(second, ttl=60)
    f.acquire()
    evs[i].set()
    evs[1 - i].wait()
    try:
        ring[i] = s.acquire(timeout=30)
        if ring[i]:
            s.release()
    except hilock.DeadlockError as e:
        ring[i] = "deadlock: " + str(e)
    f.release()
gevent.joinall([gevent.spawn(member, 0, "RA", "RB"), gevent.spawn(member, 1, "RB", "RA")])
out["ring"] = sorted(str(v).split(":")[0] for v in ring.values())
c.close()
print(json.dumps(out))
"""


def test_greenlets_are_owners(rds: Any, redis_url: str) -> None:
    """Under gevent the owner is the greenlet, not the pool thread its wait
    runs on: a wait for a lock another greenlet holds is no cycle, a ring of
    greenlets is one."""
    pytest.importorskip("gevent")
    p = subprocess.run([sys.executable, "-c", GREEN, redis_url], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out == {"chain": False, "ring": ["True", "deadlock"]}, out


def test_grant_handed_over_is_no_cycle(rds: Any, redis_url: str) -> None:
    """t1's wait recorded that t1 holds A; t1 then hands A over (export,
    adopt by t2) and waits for X, which this thread holds while it waits
    for A. The record of A's token still names t1 (its lease runs), but
    t1's current wait no longer lists A's token: no cycle, for either."""
    c = hilock.Client(redis_url, detect_deadlocks=True, deadlock_timeout=0.1)
    hb, hx = c.lock("dl-adopt-b", ttl=60), c.lock("dl-adopt-x", ttl=60)
    assert hb.acquire() and hx.acquire()
    handed, adopted = threading.Event(), threading.Event()
    box: Dict[str, Any] = {}

    def t1() -> None:
        a, b, x = (c.lock(f"dl-adopt-{n}", ttl=60) for n in "abx")
        a.acquire()
        box["b"] = b.acquire(timeout=0.5)  # waits past the delay: recorded
        box["text"] = a.export()
        handed.set()
        adopted.wait(30)
        try:
            box["t1"] = x.acquire(timeout=30)
            x.release()
        except hilock.LockError as e:
            box["t1"] = repr(e)

    def t2() -> None:
        handed.wait(30)
        box["a2"] = c.adopt(box["text"])
        adopted.set()

    ts = [threading.Thread(target=t1), threading.Thread(target=t2)]
    try:
        for t in ts:
            t.start()
        limit = time.monotonic() + 30
        while not any(b"dl-adopt-x" in (rds.get(k) or b"") for k in rds.keys("*:dlw")):
            assert time.monotonic() < limit, "t1 never recorded its wait for X"
            time.sleep(0.005)
        token = rds.get("hilock:{dl-adopt-a}:lock").decode()
        # The scenario: A's token still maps to t1.
        assert rds.get("hilock:{" + token + "}:dl") is not None
        a = c.lock("dl-adopt-a", ttl=60)
        try:
            got = a.acquire(timeout=1.0)
        except hilock.DeadlockError as e:
            got = repr(e)
        assert got is False, got
        hx.release()
        for t in ts:
            t.join()
        assert box["b"] is False and box["t1"] is True, box
        box["a2"].release()
        hb.release()
    finally:
        c.close()


def test_cycle_across_cluster_slots(cluster: Any) -> None:
    """On a Redis Cluster every record has a hash tag of its own, so the
    walk's reads go to several masters: a ring through three locks (each in
    its own slot) still has one victim."""
    c = hilock.Client(cluster.url, detect_deadlocks=True, deadlock_timeout=0.2,
                      reconnect=15.0)
    try:
        res = _thread_cycle(c, ["dl-cl-a", "dl-cl-b", "dl-cl-c"])
    finally:
        c.close()
    assert sorted(v.split(":")[0] for v in res.values()) == ["deadlock", "ok", "ok"], res


def test_read_write_cycle(rds: Any, redis_url: str) -> None:
    """t0 holds a read of R and waits for lock A; t1 holds A and waits for
    the write side of R (it waits for every reader): one victim."""
    c = hilock.Client(redis_url, detect_deadlocks=True, deadlock_timeout=0.2)
    makers = [lambda: c.rwlock("dl-rw-r", ttl=60).read(), lambda: c.lock("dl-rw-a", ttl=60)]
    seconds = [lambda: c.lock("dl-rw-a", ttl=60), lambda: c.rwlock("dl-rw-r", ttl=60).write()]
    res = _thread_ring(c, makers, seconds)
    victims = [v for v in res.values() if v.startswith("deadlock")]
    assert len(victims) == 1 and "ok" in res.values(), res
    assert "dl-rw-r" in victims[0] and "dl-rw-a" in victims[0], victims


def test_cycle_through_sentinel(deployment: Any) -> None:
    """Through Sentinel the records go to the master the sentinels name."""
    c = hilock.Client(deployment.url, detect_deadlocks=True, deadlock_timeout=0.2,
                      reconnect=15.0)
    try:
        res = _thread_cycle(c, ["dl-sn-a", "dl-sn-b"])
    finally:
        c.close()
    assert sorted(v.split(":")[0] for v in res.values()) == ["deadlock", "ok"], res
