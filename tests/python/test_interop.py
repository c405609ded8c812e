"""Sharing locks with Java services: hilock's Redisson compatibility mode
against real Redisson (tests/interop, Redisson 3.52.0) on the session's
private redis-server (tests/python/conftest.py).

The Java side is tests/interop's Contend program, one JVM per contender,
driven line by line over its standard input; it reports times from
System.nanoTime, which on Linux reads CLOCK_MONOTONIC as Python's
time.monotonic_ns() does, so Java and Python holds go into one history.

The jar is built once per session with Maven into build/interop (Maven
fetches Redisson from Maven Central into ~/.m2 the first time). Without a
JDK and Maven the module skips, saying so; tests/run.sh installs both
first (tests/ensure_deps.sh, hilock_ensure_jdk).
"""
from __future__ import annotations

import os
import queue
import shutil
import signal
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple

import pytest
import redis

import hilock
from helpers import FORK, join_all, kill_child, subscribers, wait_for
from history import Interval, check_no_overlap

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "interop"
OUT = ROOT / "build" / "interop"
JAR = OUT / "interop.jar"


def _build_jar() -> Path:
    """tests/interop's jar, built unless newer than its sources."""
    sources = [PROJECT / "pom.xml", *(PROJECT / "src").rglob("*.java")]
    if JAR.exists() and JAR.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
        return JAR
    proc = subprocess.run(["mvn", "-q", "-B", "package", f"-Dinterop.build={OUT}"],
                          cwd=PROJECT, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0 or not JAR.exists():
        raise RuntimeError(f"building tests/interop failed:\n{proc.stdout}\n{proc.stderr}")
    return JAR


@pytest.fixture(scope="module")
def jar() -> Path:
    missing = [t for t in ("java", "javac", "mvn") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"no {' and '.join(missing)} on PATH: the Redisson interop suite needs "
                    "a JDK and Maven (tests/ensure_deps.sh hilock_ensure_jdk installs them)")
    return _build_jar()


class Java:
    """One Redisson contender (tests/interop Contend) on the lock name."""

    def __init__(self, jar: Path, url: str, name: str, kind: str = "rlock") -> None:
        self.proc = subprocess.Popen(["java", "-Xss512k", "-XX:TieredStopAtLevel=1", "-jar",
                                      str(jar), url, name, kind],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines: queue.Queue[Optional[str]] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.expect("ready", 60)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def expect(self, word: str, timeout: float) -> List[str]:
        """The next line, which must begin with word, split into words."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"Java: no {word!r} within {timeout} s") from None
        if line is None:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"Java exited (status {self.proc.wait()}) waiting for "
                                 f"{word!r}:\n{err}")
        words = line.split()
        assert words[0] == word, f"Java said {line!r}, expected {word!r}"
        return words

    def ask(self, command: str, word: str, timeout: float = 30) -> List[str]:
        self.send(command)
        return self.expect(word, timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


@pytest.fixture
def java(jar: Path, redis_url: str) -> Iterator[Any]:
    """java(name, kind="rlock"): a started contender, closed after the test."""
    started: List[Java] = []

    def start(name: str, kind: str = "rlock") -> Java:
        j = Java(jar, redis_url, name, kind)
        started.append(j)
        return j

    try:
        yield start
    finally:
        for j in started:
            j.close()


def channel(name: str) -> str:
    """Redisson's unlock channel of an RLock."""
    return f"redisson_lock__channel:{name}" if "{" in name else f"redisson_lock__channel:{{{name}}}"


# ## One counter, three Java and three Python processes -------------------

ROUNDS = 25


def _python_counter(url: str, name: str, rounds: int, tag: str) -> None:
    c = hilock.Client(url)
    r = redis.Redis.from_url(url)
    lk = c.rlock(name, compat="redisson", timeout=120)
    for _ in range(rounds):
        assert lk.acquire(), "acquire timed out"
        start = time.monotonic_ns()
        value = int(r.get("counter") or 0)
        time.sleep(0.002)
        r.set("counter", value + 1)
        end = time.monotonic_ns()
        lk.release()
        r.rpush(tag, f"{os.getpid()} {start} {end}")
    r.close()
    c.close()


def test_counter_across_languages(java: Any, rds: redis.Redis, redis_url: str) -> None:
    name = "orders:42"
    javas = [java(name) for _ in range(3)]
    for j in javas:
        j.send(f"count {ROUNDS} counter 2")
    procs = [FORK.Process(target=_python_counter, args=(redis_url, name, ROUNDS, "py"))
             for _ in range(3)]
    for p in procs:
        p.start()
    join_all(procs, 240)
    intervals = []
    for k, j in enumerate(javas):
        start = None
        for _ in range(2 * ROUNDS):
            word, t = j.expect("enter" if start is None else "leave", 240)
            if start is None:
                start = int(t)
            else:
                intervals.append(Interval(-1 - k, start / 1e9, int(t) / 1e9))
                start = None
        j.expect("done", 30)
    for raw in rds.lrange("py", 0, -1):
        pid, start, end = raw.decode().split()
        intervals.append(Interval(int(pid), int(start) / 1e9, int(end) / 1e9))
    assert len(intervals) == 6 * ROUNDS
    # The history across both languages: no two holds overlap, and the
    # non-atomic counter lost no increment.
    check_no_overlap(intervals)
    assert int(rds.get("counter") or 0) == 6 * ROUNDS
    assert not rds.exists(name)


# ## Reentry on each side --------------------------------------------------

def test_reentry_each_side(java: Any, client: hilock.Client, rds: redis.Redis) -> None:
    name = "reentry"
    j = java(name)
    lk = client.rlock(name, compat="redisson")
    assert lk.acquire(timeout=5) and lk.acquire(timeout=5)
    fields = rds.hgetall(name)
    assert list(fields.values()) == [b"2"], fields
    assert lk.hold_count() == 2 and lk.fence is None
    assert 25000 < rds.pttl(name) <= 30000  # Redisson's lease
    j.ask("trylock 0", "busy")
    lk.release()
    assert rds.hgetall(name) == fields | {next(iter(fields)): b"1"}
    j.ask("trylock 0", "busy")
    lk.release()
    assert not rds.exists(name)
    # Redisson re-enters; hilock stays out until its last unlock.
    assert j.ask("lock", "locked")[2] == "1"
    assert j.ask("lock", "locked")[2] == "2"
    jfields = rds.hgetall(name)
    assert list(jfields.values()) == [b"2"] and jfields.keys() != fields.keys(), jfields
    assert not lk.acquire(blocking=False)
    j.ask("unlock", "unlocking")
    j.expect("unlocked", 10)
    assert not lk.acquire(blocking=False)
    assert lk.locked() and not lk.owned()
    j.ask("unlock", "unlocking")
    j.expect("unlocked", 10)
    assert lk.acquire(blocking=False)
    lk.release()


def test_hilock_release_unknown_holder(client: hilock.Client, java: Any) -> None:
    """hilock cannot release what Redisson holds, nor the reverse."""
    name = "mine"
    j = java(name)
    j.ask("lock", "locked")
    lk = client.rlock(name, compat="redisson")
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()
    j.ask("unlock", "unlocking")
    j.expect("unlocked", 10)
    assert lk.acquire(timeout=5)
    j.send("unlock")
    j.expect("unlocking", 10)
    assert j.expect("error", 10)[1].startswith("java.lang.IllegalMonitorStateException")
    lk.release()


# ## Wake-ups across languages ---------------------------------------------

WAKE_ROUNDS = 15
WAIT = 10.0  # < the 30 s lease: only an unlock message can end the wait in time


def _p50(samples: List[float]) -> float:
    return statistics.median(samples)


def _acquire_release(lk: hilock.RLock, got: List[Tuple[bool, int]]) -> None:
    ok = lk.acquire()
    got.append((ok, time.monotonic_ns()))
    if ok:
        lk.release()


def test_java_release_wakes_python(java: Any, client: hilock.Client, rds: redis.Redis,
                                   record_property: Any) -> None:
    name = "wake:j2p"
    j = java(name)
    lk = client.rlock(name, compat="redisson", timeout=WAIT)
    latencies = []
    for _ in range(WAKE_ROUNDS):
        j.ask("lock", "locked")
        got: List[Tuple[bool, int]] = []
        t = threading.Thread(target=_acquire_release, args=(lk, got))
        t.start()
        wait_for(lambda: subscribers(rds, channel(name)) >= 1, 5)
        time.sleep(0.05)  # the waiter's subscription is confirmed and it sleeps
        released = int(j.ask("unlock", "unlocking")[1])
        j.expect("unlocked", 10)
        t.join(WAIT + 5)
        assert got and got[0][0], "the Python waiter missed Redisson's release"
        latencies.append((got[0][1] - released) / 1e6)
    p50 = _p50(latencies)
    record_property("java_to_python_wake_p50_ms", p50)
    print(" ".join(f"{x:.1f}" for x in latencies))
    print(f"\nJava release -> Python holder: p50 {p50:.2f} ms, max {max(latencies):.2f} ms "
          f"({len(latencies)} rounds)")


def test_python_release_wakes_java(java: Any, client: hilock.Client, rds: redis.Redis,
                                   record_property: Any) -> None:
    name = "wake:p2j"
    j = java(name)
    lk = client.rlock(name, compat="redisson")
    latencies = []
    for _ in range(WAKE_ROUNDS):
        assert lk.acquire(timeout=5)
        j.send(f"trylock {int(WAIT * 1000)}")
        wait_for(lambda: subscribers(rds, channel(name)) >= 1, 10)
        time.sleep(0.05)
        released = time.monotonic_ns()
        lk.release()
        words = j.expect("locked", WAIT + 5)  # "busy": Redisson missed the release
        latencies.append((int(words[1]) - released) / 1e6)
        j.ask("unlock", "unlocking")
        j.expect("unlocked", 10)
    p50 = _p50(latencies)
    record_property("python_to_java_wake_p50_ms", p50)
    print(f"\nPython release -> Java holder: p50 {p50:.2f} ms, max {max(latencies):.2f} ms "
          f"({len(latencies)} rounds)")


# ## A dead Python holder ---------------------------------------------------

LEASE = 2.0


def _hold_forever(url: str, name: str, tag: str) -> None:
    c = hilock.Client(url)
    lk = c.rlock(name, ttl=LEASE, compat="redisson")
    assert lk.acquire(timeout=5)
    redis.Redis.from_url(url).rpush(tag, "held")
    time.sleep(3600)


def test_killed_python_holder_frees_within_lease(java: Any, rds: redis.Redis,
                                                  redis_url: str) -> None:
    name = "{acct}:killed"  # a name with its own hash tag is used as given
    p = FORK.Process(target=_hold_forever, args=(redis_url, name, "held"), daemon=True)
    p.start()
    try:
        assert rds.blpop(["held"], 10), "the holder did not acquire"
        j = java(name)
        # The watchdog renews at a third of the lease: Redisson stays out
        # for longer than one lease while the holder lives.
        j.ask(f"trylock {int(LEASE * 1500)}", "busy", LEASE * 3)
        assert rds.exists(name)
        os.kill(p.pid, signal.SIGKILL)
        p.join(5)
        killed = time.monotonic_ns()
        assert rds.exists(name), "the lock vanished with the holder"
        # Nobody publishes an expiry: Redisson's bounded wait (the holder's
        # TTL) finds the lock free once the lease runs out.
        words = j.ask(f"trylock {int(LEASE * 1000) + 3000}", "locked", LEASE + 10)
        print(f"\nJava got the lock {(int(words[1]) - killed) / 1e6:.0f} ms after the "
              f"Python holder was killed (lease {LEASE * 1000:.0f} ms)")
        j.ask("unlock", "unlocking")
    finally:
        kill_child(p)


# ## RReadWriteLock ---------------------------------------------------------

def test_rwlock_readers_share_writers_exclude(java: Any, client: hilock.Client,
                                              rds: redis.Redis) -> None:
    name = "catalog"
    jr, jw = java(name, "read"), java(name, "write")
    rw = client.rwlock(name, compat="redisson")
    r, w = rw.read(), rw.write()
    # Readers of both languages share; writers of both stay out.
    jr.ask("lock", "locked")
    assert r.acquire(timeout=5) and r.acquire(timeout=5)
    assert r.hold_count() == 2 and r.fence is None
    assert rds.hget(name, "mode") == b"read"
    assert not w.acquire(blocking=False)
    jw.ask("trylock 0", "busy")
    r.release()
    r.release()
    jr.ask("unlock", "unlocking")
    jr.expect("unlocked", 10)
    assert not rds.exists(name)
    # A hilock writer excludes Redisson's readers and writers; its release
    # wakes a waiting Redisson reader (Redisson's write unlock message).
    assert w.acquire(timeout=5)
    assert rds.hget(name, "mode") == b"write"
    jr.ask("trylock 0", "busy")
    jw.ask("trylock 0", "busy")
    jr.send(f"trylock {int(WAIT * 1000)}")
    wait_for(lambda: subscribers(rds, f"redisson_rwlock:{{{name}}}") >= 1, 10)
    time.sleep(0.05)
    w.release()
    jr.expect("locked", WAIT + 5)  # "busy": Redisson missed the release
    jw.ask("trylock 0", "busy")
    jr.ask("unlock", "unlocking")
    jr.expect("unlocked", 10)
    # A Redisson writer excludes hilock's reader; its unlock wakes it.
    jw.ask("lock", "locked")
    assert not r.acquire(blocking=False)
    got: List[Tuple[bool, int]] = []
    t = threading.Thread(target=_acquire_release, args=(r, got))
    t.start()
    wait_for(lambda: subscribers(rds, f"redisson_rwlock:{{{name}}}") >= 1, 10)
    jw.ask("unlock", "unlocking")
    t.join(WAIT + 5)
    assert got and got[0][0], "the hilock reader missed Redisson's write unlock"
    assert not rds.exists(name)


def test_rwlock_downgrade_and_read_renewal(java: Any, client: hilock.Client,
                                           rds: redis.Redis) -> None:
    name = "{shop}:prices"
    jr, jw = java(name, "read"), java(name, "write")
    rw = client.rwlock(name, ttl=1.5, compat="redisson")
    r, w = rw.read(), rw.write()
    # Downgrade: the writer takes the read side, then leaves the write side.
    assert w.acquire(timeout=5) and r.acquire(timeout=5)
    jr.ask("trylock 0", "busy")
    w.release()
    assert rds.hget(name, "mode") == b"read"
    jw.ask("trylock 0", "busy")
    # The watchdog renews the read hold's own key as well, so a Redisson
    # reader that comes and goes (its release recomputes the hash's TTL
    # from every live hold) leaves the hilock reader's hold in place.
    time.sleep(3.0)  # two leases
    jr.ask("lock", "locked")
    jr.ask("unlock", "unlocking")
    jr.expect("unlocked", 10)
    assert r.owned() and rds.exists(name)
    jw.ask("trylock 200", "busy")
    r.release()
    assert not rds.exists(name)
    jw.ask("trylock 0", "locked")


# ## RFairLock --------------------------------------------------------------

def _queue(name: str) -> str:
    return f"redisson_lock_queue:{{{name}}}"


def _fair_waiter(lk: hilock.RLock, got: List[Tuple[bool, int]]) -> None:
    ok = lk.acquire()
    got.append((ok, time.monotonic_ns()))
    if ok:
        time.sleep(0.05)
        lk.release()


def test_fair_arrival_order_across_languages(java: Any, client: hilock.Client,
                                             rds: redis.Redis) -> None:
    name = "tickets"
    holder = client.fair_lock(name, compat="redisson")
    waiter = client.fair_lock(name, compat="redisson", timeout=30)
    assert holder.acquire(timeout=5)
    j1, j2 = java(name, "fair"), java(name, "fair")
    py1: List[Tuple[bool, int]] = []
    py2: List[Tuple[bool, int]] = []
    threads = []
    # Arrival order J1, P1, J2, P2: each queued before the next comes.
    for k, who in enumerate((j1, py1, j2, py2)):
        if isinstance(who, Java):
            who.send("trylock 30000")
        else:
            t = threading.Thread(target=_fair_waiter, args=(waiter, who))
            t.start()
            threads.append(t)
        wait_for(lambda k=k: rds.llen(_queue(name)) == k + 1, 10, what="the waiter queued")
    holder.release()
    grants = [("J1", int(j1.expect("locked", 20)[1]))]
    assert not py1, "a later waiter went first"
    j1.ask("unlock", "unlocking")
    wait_for(lambda: py1, 20, what="P1's grant")
    grants.append(("P1", py1[0][1]))
    grants.append(("J2", int(j2.expect("locked", 20)[1])))
    assert not py2, "a later waiter went first"
    j2.ask("unlock", "unlocking")
    for t in threads:
        t.join(20)
    assert py1[0][0] and py2 and py2[0][0]
    grants.append(("P2", py2[0][1]))
    assert [g for g, _ in sorted(grants, key=lambda g: g[1])] == ["J1", "P1", "J2", "P2"]
    assert rds.llen(_queue(name)) == 0


def _fair_queue_and_die(url: str, name: str, tag: str) -> None:
    c = hilock.Client(url)
    lk = c.fair_lock(name, ttl=1.0, compat="redisson", timeout=3600)
    r = redis.Redis.from_url(url)
    r.rpush(tag, "queued")  # just before its attempt queues it
    lk.acquire()


def test_fair_dead_waiters_are_passed_over(java: Any, client: hilock.Client, rds: redis.Redis,
                                           redis_url: str) -> None:
    name = "dead-waiters"
    holder = client.fair_lock(name, ttl=1.0, compat="redisson")
    assert holder.acquire(timeout=5)
    # A dead Python waiter at the head: a Java waiter behind it still gets in.
    p = FORK.Process(target=_fair_queue_and_die, args=(redis_url, name, "q"), daemon=True)
    p.start()
    try:
        assert rds.blpop(["q"], 10)
        wait_for(lambda: rds.llen(_queue(name)) == 1, 10, what="the Python waiter queued")
        os.kill(p.pid, signal.SIGKILL)
        p.join(5)
    finally:
        kill_child(p)
    j = java(name, "fair")
    j.send("trylock 15000")
    wait_for(lambda: rds.llen(_queue(name)) == 2, 10, what="the Java waiter queued")
    holder.release()
    j.expect("locked", 20)  # "busy": the dead waiter blocked the queue
    j.ask("unlock", "unlocking")
    j.expect("unlocked", 10)
    # A dead Java waiter at the head: a Python waiter behind it gets in.
    assert holder.acquire(timeout=5)
    dead = java(name, "fair")
    dead.send("trylock 2000")
    wait_for(lambda: rds.llen(_queue(name)) == 1, 10, what="the Java waiter queued")
    dead.proc.kill()
    dead.proc.wait(10)
    got: List[Tuple[bool, int]] = []
    waiter = client.fair_lock(name, ttl=1.0, compat="redisson", timeout=15)
    t = threading.Thread(target=_fair_waiter, args=(waiter, got))
    t.start()
    wait_for(lambda: rds.llen(_queue(name)) == 2, 10, what="the Python waiter queued")
    holder.release()
    t.join(20)
    assert got and got[0][0], "the dead Java waiter blocked the queue"
    # A waiter that gives up leaves the queue.
    assert holder.acquire(timeout=5)
    gave_up: List[bool] = []
    t = threading.Thread(target=lambda: gave_up.append(waiter.acquire(timeout=0.3)))
    t.start()
    t.join(10)
    assert gave_up == [False]
    assert rds.llen(_queue(name)) == 0 and rds.zcard(f"redisson_lock_timeout:{{{name}}}") == 0
    holder.release()


# ## asyncio ------------------------------------------------------------------

def _unlock(j: Java) -> None:
    j.ask("unlock", "unlocking")
    j.expect("unlocked", 10)


def test_asyncio_task_and_java_share_rlock_and_rwlock(java: Any, redis_url: str,
                                                       rds: redis.Redis) -> None:
    import asyncio

    import hilock.asyncio

    name, rwname = "async:rlock", "async:rw"
    j, jw = java(name), java(rwname, "write")

    async def main() -> None:
        c = hilock.asyncio.Client(redis_url)
        try:
            lk = c.rlock(name, compat="redisson", timeout=WAIT)
            rw = c.rwlock(rwname, compat="redisson", timeout=WAIT)

            async def hold_twice() -> bool:
                # The task that waited re-enters its hold; Redisson stays out.
                if not await lk.acquire():
                    return False
                assert await lk.acquire() and lk.fence is None
                assert list(rds.hgetall(name).values()) == [b"2"]
                await lk.release()
                await lk.release()
                return True

            async def read_once() -> bool:
                if not await rw.read().acquire():
                    return False
                assert rds.hget(rwname, "mode") == b"read"
                await rw.read().release()
                return True

            await asyncio.to_thread(j.ask, "lock", "locked")
            assert not await lk.acquire(blocking=False)
            task = asyncio.ensure_future(hold_twice())
            await asyncio.sleep(0.3)
            assert not task.done()
            await asyncio.to_thread(_unlock, j)
            assert await asyncio.wait_for(task, WAIT + 5), "the task missed Redisson's release"
            await asyncio.to_thread(jw.ask, "lock", "locked")
            read = asyncio.ensure_future(read_once())
            await asyncio.sleep(0.3)
            assert not read.done()
            await asyncio.to_thread(_unlock, jw)
            assert await asyncio.wait_for(read, WAIT + 5), "the reader missed the write unlock"
        finally:
            await c.close()

    asyncio.run(main())
    assert not rds.exists(name) and not rds.exists(rwname)


def test_without_shared_waiting_a_java_release_is_noticed(java: Any, redis_url: str) -> None:
    """With ``shared_waiting=False`` nothing subscribes to Redisson's
    channel: the waiter looks again every half second, not once per lease."""
    name = "no-hub"
    j = java(name)
    c = hilock.Client(redis_url, shared_waiting=False)
    try:
        lk = c.rlock(name, compat="redisson", timeout=WAIT)
        j.ask("lock", "locked")
        got: List[Tuple[bool, int]] = []
        t = threading.Thread(target=_acquire_release, args=(lk, got))
        t.start()
        time.sleep(0.3)
        _unlock(j)
        t.join(WAIT + 5)
        assert got and got[0][0], "the waiter slept through the lease"
    finally:
        c.close()
