#!/usr/bin/env python3
"""hilock.asyncio against the thread API, on one private redis-server.

  crowd      N tasks (default 2,000) of one loop wait on one held lock: the
             server connections and the extra threads of the process while
             they wait, then the time until every one was served in turn.
  stall      a ticker task sleeps 10 ms at a time on the same loop while
             another connection stalls the server (DEBUG SLEEP 0.4) and 50
             tasks acquire and release: the longest gap between ticks (the
             loop must not wait on the network).
  floors     what asyncio itself costs on this machine (see floors()): a
             wake-up of the loop from another thread, redis.asyncio's PING
             round trip and pub/sub delivery against redis-py's sync ones.
  cycle      the uncontended acquire + release of one lock: async
             (await both) against the thread API, rounds of the two sides
             interleaved.
  handoff    a holder thread releases while one waiter is blocked in
             acquire: from release() returning to acquire() returning, for
             an asyncio task and for a thread of the blocking API, rounds
             of the two sides interleaved; and from release() called
             ("from_call": the release's round trip included).
  handoff_process  the same with the holder in another process.
  raw_handoff, raw_handoff_process  the hand-over's floor: the same two
             measures with no lock library, a waiter blocked in BLPOP on a
             bare socket that then takes the lock with SET NX: a thread's
             blocking recv against an asyncio task's add_reader future.

Each timed figure is the median of the per-round medians, with the range
of the round medians (min, max): the spread on a shared machine. A ratio
is taken round by round (both sides of a round ran back to back), then
its median and range.

This is a benchmark, not a test: nothing here asserts on timing.

    python3 tests/bench/async_bench.py [--tasks 2000] [--rounds 5] [--samples 100]
        [--only crowd,stall,floors,cycle,handoff,handoff_process,raw_handoff,
        raw_handoff_process] [--loop uvloop] [--json out.json]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import load_redis_server, machine, write_json  # noqa: E402

import hilock  # noqa: E402
import hilock.asyncio as hla  # noqa: E402


def threads_now() -> int:
    return len(os.listdir("/proc/self/task"))


def crowd(url: str, rds: Any, n: int) -> Dict[str, Any]:
    holder = hilock.Client(url)
    held = holder.lock("bench:crowd", ttl=60, auto_renew=False)
    assert held.acquire(blocking=False)
    before = threads_now()
    out: Dict[str, Any] = {"tasks": n}

    async def main() -> None:
        c = hla.Client(url)
        served = 0

        async def one() -> None:
            nonlocal served
            async with c.lock("bench:crowd", ttl=60, timeout=120, auto_renew=False):
                served += 1

        tasks = [asyncio.ensure_future(one()) for _ in range(n)]
        while c.waiting < n:
            await asyncio.sleep(0.01)
        out["server_connections"] = int(rds.info("clients")["connected_clients"]) - 1
        out["extra_threads"] = threads_now() - before
        t0 = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(None, held.release)
        await asyncio.gather(*tasks)
        out["served"] = served
        out["seconds_to_serve_all"] = round(time.monotonic() - t0, 3)
        await c.close()

    run_loop(main())
    holder.close()
    return out


def stall(url: str) -> Dict[str, Any]:
    import redis
    out: Dict[str, Any] = {}

    async def main() -> None:
        c = hla.Client(url)
        stop = False
        gaps: List[float] = []

        async def ticker() -> None:
            last = time.monotonic()
            while not stop:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        async def worker(i: int) -> None:
            lk = c.lock(f"bench:stall:{i % 5}", ttl=10, auto_renew=False)
            while not stop:
                async with lk:
                    await asyncio.sleep(0)

        tick = asyncio.ensure_future(ticker())
        workers = [asyncio.ensure_future(worker(i)) for i in range(50)]
        await asyncio.sleep(0.3)
        sleeper = threading.Thread(
            target=lambda: redis.Redis.from_url(url).execute_command("DEBUG", "SLEEP", "0.4"))
        sleeper.start()
        await asyncio.sleep(1.0)
        stop = True
        await asyncio.gather(tick, *workers)
        sleeper.join()
        out["max_tick_gap_ms"] = round(max(gaps) * 1000, 1)
        out["ticks"] = len(gaps)
        await c.close()

    run_loop(main())
    return out


def run_loop(main: Any) -> Any:
    """main() on a new event loop: asyncio's default, or uvloop's with
    --loop uvloop."""
    if LOOP == "uvloop":
        import uvloop
        return uvloop.run(main)
    return asyncio.run(main)


LOOP = "asyncio"


def spread(rounds: List[float]) -> Dict[str, float]:
    """The median of per-round medians, and their range."""
    return {"p50": round(statistics.median(rounds), 1), "min": round(min(rounds), 1),
            "max": round(max(rounds), 1)}


def ratio(a: List[float], b: List[float]) -> Dict[str, float]:
    """a / b round by round (the two sides of one round ran back to back,
    under the same load), as the median and range of those ratios."""
    r = [x / y for x, y in zip(a, b)]
    return {"p50": round(statistics.median(r), 2), "min": round(min(r), 2),
            "max": round(max(r), 2)}


def alternate(rounds: int, sync_round: Callable[[], float],
              async_round: Callable[[], float]) -> Tuple[List[float], List[float]]:
    """rounds of each side, the first one first in even rounds and second
    in odd ones: the sync and the async rounds' figures."""
    s: List[float] = []
    a: List[float] = []
    for r in range(rounds):
        if r % 2:
            a.append(async_round())
        s.append(sync_round())
        if not r % 2:
            a.append(async_round())
    return s, a


def cycle(url: str, rounds: int, n: int = 1000) -> Dict[str, Any]:
    """Rounds of n cycles, the sync API and hilock.asyncio interleaved (the
    sync rounds run on the loop's thread, between async rounds)."""
    sync = hilock.Client(url)
    slk = sync.lock("bench:cycle:sync", ttl=10, auto_renew=False)

    def sync_round() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            slk.acquire(blocking=False)
            slk.release()
        return (time.perf_counter() - t0) / n * 1e6

    s: List[float] = []
    a: List[float] = []

    async def main() -> None:
        c = hla.Client(url)
        lk = c.lock("bench:cycle:async", ttl=10, auto_renew=False)
        await lk.acquire(blocking=False)  # binds the loop, starts the workers
        await lk.release()
        for r in range(rounds):
            if r % 2:
                s.append(sync_round())
            t0 = time.perf_counter()
            for _ in range(n):
                await lk.acquire(blocking=False)
                await lk.release()
            a.append((time.perf_counter() - t0) / n * 1e6)
            if not r % 2:
                s.append(sync_round())
        await c.close()

    run_loop(main())
    sync.close()
    out = {"rounds": rounds, "sync_us": spread(s), "async_us": spread(a)}
    out["async_over_sync"] = ratio(a, s)
    return out


class ThreadHolder:
    """The holder of a hand-over as a thread of this process."""

    def __init__(self, url: str) -> None:
        self.c = hilock.Client(url)
        self.h: Any = None

    def hold(self, name: str) -> None:
        self.h = self.c.lock(name, ttl=10, auto_renew=False)
        assert self.h.acquire(blocking=False)

    def release(self) -> Tuple[float, float]:
        """Release; when release() was called and when it returned."""
        t = time.monotonic()
        self.h.release()
        return t, time.monotonic()

    def close(self) -> None:
        self.c.close()


# ProcessHolder's process: holds the lock named on stdin, and on the next
# line releases it and prints when release() was called and returned.
_HOLDER = r'''
import sys, time, hilock
c = hilock.Client(sys.argv[1])
for name in sys.stdin:
    h = c.lock(name.strip(), ttl=10, auto_renew=False)
    assert h.acquire(blocking=False)
    print("held", flush=True)
    sys.stdin.readline()
    t = time.monotonic()
    h.release()
    print(t, time.monotonic(), flush=True)
'''


class ProcessHolder:
    """The holder in another process (a distributed lock's usual case): no
    interpreter lock shared with the waiter. time.monotonic() is the
    system's monotonic clock in both processes."""

    def __init__(self, url: str, script: str = _HOLDER) -> None:
        import subprocess
        self.p = subprocess.Popen([sys.executable, "-c", script, url], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def _say(self, line: str) -> str:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def hold(self, name: str) -> None:
        assert self._say(name) == "held"

    def release(self) -> Tuple[float, float]:
        called, returned = self._say("go").split()
        return float(called), float(returned)

    def close(self) -> None:
        self.p.kill()
        self.p.wait()


def handoff(url: str, rounds: int, samples: int, holder: Any) -> Dict[str, Any]:
    """samples per side in all, in rounds that alternate the two sides."""
    sync_c = hilock.Client(url)

    def sync_waiter(name: str, ready: threading.Event, t1: List[float]) -> None:
        lk = sync_c.lock(name, ttl=10, auto_renew=False)
        ready.set()
        assert lk.acquire(timeout=10)
        t1.append(time.monotonic())
        lk.release()

    def async_waiter(name: str, ready: threading.Event, t1: List[float]) -> None:
        async def main() -> None:
            c = hla.Client(url)
            lk = c.lock(name, ttl=10, auto_renew=False)
            assert not await lk.acquire(blocking=False)  # binds the loop
            ready.set()
            assert await lk.acquire(timeout=10)
            t1.append(time.monotonic())
            await lk.release()
            await c.close()
        run_loop(main())

    try:
        return handoffs(rounds, samples, holder, sync_waiter, async_waiter, "bench:handoff:")
    finally:
        sync_c.close()


def handoffs(rounds: int, samples: int, holder: Any, sync_waiter: Any, async_waiter: Any,
             prefix: str) -> Dict[str, Any]:
    """samples hand-overs per side in all, in rounds that alternate the
    sides: from the holder's release returning (and from its call) to the
    waiter, started in a thread of its own, having the lock."""

    def measure(waiter: Any, k: int) -> Tuple[float, float]:
        # One lock per side: the other side's client, still subscribed to
        # its wake list for a while (shared waiting lingers), hears nothing.
        name = prefix + ("sync" if waiter is sync_waiter else "async")
        out: List[float] = []
        out_call: List[float] = []
        for _ in range(k):
            holder.hold(name)
            ready = threading.Event()
            t1: List[float] = []
            t = threading.Thread(target=waiter, args=(name, ready, t1))
            t.start()
            ready.wait()
            time.sleep(0.01)  # the waiter is asleep in acquire
            called, returned = holder.release()
            t.join()
            out.append((t1[0] - returned) * 1e6)
            out_call.append((t1[0] - called) * 1e6)
        return statistics.median(out), statistics.median(out_call)

    k = max(1, samples // rounds)
    both: Dict[str, List[Tuple[float, float]]] = {"s": [], "a": []}
    try:
        alternate(rounds, lambda: both["s"].append(measure(sync_waiter, k)) or 0.0,
                  lambda: both["a"].append(measure(async_waiter, k)) or 0.0)
    finally:
        holder.close()
    s = [x[0] for x in both["s"]]
    a = [x[0] for x in both["a"]]
    out: Dict[str, Any] = {"rounds": rounds, "samples_per_round": k, "thread_us": spread(s),
                           "async_us": spread(a)}
    out["async_over_thread"] = ratio(a, s)
    # From the release call: the release's own round trip included on both
    # sides. "From release() returning" can come out negative: the waiter
    # may hold the lock before the holder's thread is back from its release
    # (it waits for the interpreter lock, or to be scheduled).
    s = [x[1] for x in both["s"]]
    a = [x[1] for x in both["a"]]
    out["from_call"] = {"thread_us": spread(s), "async_us": spread(a),
                        "async_over_thread": ratio(a, s)}
    return out


# The bare-socket hand-over (floors' "handoff"): the holder's "release" is
# LPUSH on the wake list; the waiter, blocked in BLPOP on it, then takes
# the lock with SET NX, as hilock's lone waiter does (BLPOP, then its
# attempt). RESP by hand, no client library.
def resp(*args: str) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def raw_connect(url: str) -> socket.socket:
    """A bare blocking socket to the server of url, logged in if it asks."""
    u = urlsplit(url)
    s = socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if u.password:
        s.sendall(resp("AUTH", u.password))
        assert s.recv(64).startswith(b"+OK")
    return s


# RawProcessHolder's process: its "hold" line is the release command (RESP,
# in hex); on the next line it sends it and prints when it was sent and
# when its reply came.
_RAW_HOLDER = r'''
import socket, sys, time
from urllib.parse import urlsplit
u = urlsplit(sys.argv[1])
s = socket.create_connection((u.hostname, u.port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for line in sys.stdin:
    push = bytes.fromhex(line.strip())
    print("held", flush=True)
    sys.stdin.readline()
    t = time.monotonic()
    s.sendall(push)
    got = b""
    while not got.endswith(b"\r\n"):
        got += s.recv(64)
    print(t, time.monotonic(), flush=True)
'''


def raw_release(name: str) -> bytes:
    return resp("LPUSH", name + ":wake", "1")


class RawThreadHolder:
    """The bare-socket hand-over's holder as a thread of this process."""

    def __init__(self, url: str) -> None:
        self.s = raw_connect(url)
        self.push = b""

    def hold(self, name: str) -> None:
        self.push = raw_release(name)

    def release(self) -> Tuple[float, float]:
        t = time.monotonic()
        self.s.sendall(self.push)
        assert self.s.recv(64) == b":1\r\n"
        return t, time.monotonic()

    def close(self) -> None:
        self.s.close()


class RawProcessHolder(ProcessHolder):
    """The bare-socket hand-over's holder in another process."""

    def __init__(self, url: str) -> None:
        super().__init__(url, _RAW_HOLDER)

    def hold(self, name: str) -> None:
        assert self._say(raw_release(name).hex()) == "held"


def raw_handoff(url: str, rounds: int, samples: int, holder: Any) -> Dict[str, Any]:
    """The hand-over with no lock library: the waiter blocked in BLPOP then
    taking the lock with SET NX, a thread on blocking sockets against an
    asyncio task on the loop's add_reader, measured as handoff() is."""

    def popped(name: str) -> int:
        """The length of BLPOP's reply: [list name, "1"]."""
        return len(resp(name + ":wake", "1"))

    def sync_waiter(name: str, ready: threading.Event, t1: List[float]) -> None:
        s = raw_connect(url)
        s.sendall(resp("BLPOP", name + ":wake", "10"))
        ready.set()
        got = b""
        while len(got) < popped(name):
            got += s.recv(256)
        s.sendall(resp("SET", name, "tok", "NX", "PX", "10000"))
        got = b""
        while len(got) < 5:
            got += s.recv(64)
        assert got == b"+OK\r\n", got
        t1.append(time.monotonic())
        s.sendall(resp("DEL", name))
        s.recv(64)
        s.close()

    def async_waiter(name: str, ready: threading.Event, t1: List[float]) -> None:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            s = raw_connect(url)
            s.setblocking(False)
            box: List[Any] = []  # [future, bytes wanted, bytes so far]

            def readable() -> None:
                box[2] += s.recv(256)
                if len(box[2]) >= box[1]:
                    box[0].set_result(box[2])

            loop.add_reader(s.fileno(), readable)
            box[:] = [loop.create_future(), popped(name), b""]
            s.send(resp("BLPOP", name + ":wake", "10"))
            ready.set()
            await box[0]
            box[:] = [loop.create_future(), 5, b""]
            s.send(resp("SET", name, "tok", "NX", "PX", "10000"))
            assert await box[0] == b"+OK\r\n"
            t1.append(time.monotonic())
            loop.remove_reader(s.fileno())
            s.setblocking(True)
            s.sendall(resp("DEL", name))
            s.recv(64)
            s.close()
        run_loop(main())

    return handoffs(rounds, samples, holder, sync_waiter, async_waiter, "bench:rawhandoff:")


def raw_pings(url: str, rounds: int, n: int = 1000) -> Tuple[List[float], List[float]]:
    """Per round, µs per pair of PING round trips on a bare socket: blocking
    recv, then an asyncio future resolved from the loop's add_reader
    callback (floors' "raw")."""
    blocking, nonblocking = raw_connect(url), raw_connect(url)
    nonblocking.setblocking(False)

    def sync_round() -> float:
        t0 = time.perf_counter()
        for _ in range(n * 2):
            blocking.sendall(b"PING\r\n")
            assert blocking.recv(64) == b"+PONG\r\n"
        return (time.perf_counter() - t0) / n * 1e6

    async def async_round() -> float:
        loop = asyncio.get_running_loop()
        box: List[asyncio.Future[bytes]] = []

        def readable() -> None:
            box.pop().set_result(nonblocking.recv(64))

        loop.add_reader(nonblocking.fileno(), readable)
        t0 = time.perf_counter()
        for _ in range(n * 2):
            nonblocking.send(b"PING\r\n")
            box.append(loop.create_future())
            assert await box[0] == b"+PONG\r\n"
        took = (time.perf_counter() - t0) / n * 1e6
        loop.remove_reader(nonblocking.fileno())
        return took

    s: List[float] = []
    a: List[float] = []

    async def main() -> None:
        for _ in range(rounds):
            s.append(sync_round())
            a.append(await async_round())

    run_loop(main())
    blocking.close()
    nonblocking.close()
    return s, a


def floors(url: str, rounds: int, samples: int) -> Dict[str, Any]:
    """What asyncio itself costs here, measured as the hilock figures are.

    wake     another thread wakes a task of the loop: time.monotonic() in
             the thread, then an eventfd write (the loop's add_reader
             callback resolves the task's future; hilock.asyncio's path) or
             call_soon_threadsafe, until the task runs again; the loop was
             asleep 0.1 ms (as between the operations of a cycle), 1 ms, or
             10 ms (as the handoff's waiter: on a virtual machine a long
             sleep makes the wake-up several times longer).
    raw      two PING round trips on a bare socket, no client library:
             an asyncio future resolved by the loop's add_reader callback
             against a blocking recv (per pair, 1,000 pairs per round):
             the least any asyncio client pays over a blocking one.
    ping     redis-py's PING round trip: redis.asyncio against the sync
             client (median of 200 per round).
    pubsub   PUBLISH called -> the subscriber has the message: a task
             awaiting redis.asyncio's get_message against a thread in the
             sync client's (the handoff's release publishes; its wake-up
             reaches the waiter before the release's reply).
    """
    import queue

    import redis
    import redis.asyncio as aredis

    k = max(1, samples // rounds)
    efd01_us: List[float] = []
    efd_us: List[float] = []
    efd10_us: List[float] = []
    cst_us: List[float] = []

    async def wake_rounds() -> None:
        loop = asyncio.get_running_loop()
        efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        box: List[asyncio.Future[None]] = []

        def readable() -> None:
            os.eventfd_read(efd)
            box[0].set_result(None)

        loop.add_reader(efd, readable)
        todo: queue.Queue[Any] = queue.Queue()
        t0: List[float] = []

        def thread() -> None:
            while True:
                how = todo.get()
                if how is None:
                    return
                # The loop is asleep in epoll by now.
                time.sleep({"10": 0.01, "01": 0.0001}.get(how[-2:], 0.001))
                t0.append(time.monotonic())
                if how.startswith("efd"):
                    os.eventfd_write(efd, 1)
                else:
                    loop.call_soon_threadsafe(box[0].set_result, None)

        th = threading.Thread(target=thread)
        th.start()
        for _ in range(rounds):
            for how, out in (("efd01", efd01_us), ("efd", efd_us), ("efd10", efd10_us),
                             ("cst10", cst_us)):
                got = []
                for _ in range(k):
                    box[:] = [loop.create_future()]
                    t0.clear()
                    todo.put(how)
                    await box[0]
                    got.append((time.monotonic() - t0[0]) * 1e6)
                out.append(statistics.median(got))
        todo.put(None)
        th.join()
        loop.remove_reader(efd)
        os.close(efd)

    run_loop(wake_rounds())

    rs_us, ra_us = raw_pings(url, rounds)
    sync = redis.Redis.from_url(url)
    ps_us: List[float] = []
    pa_us: List[float] = []

    def sync_pings(n: int = 200) -> float:
        got = []
        for _ in range(n):
            t0 = time.perf_counter()
            sync.ping()
            got.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(got)

    async def ping_rounds() -> None:
        ar = aredis.Redis.from_url(url)
        await ar.ping()
        for _ in range(rounds):
            ps_us.append(sync_pings())
            got = []
            for _ in range(200):
                t0 = time.perf_counter()
                await ar.ping()
                got.append((time.perf_counter() - t0) * 1e6)
            pa_us.append(statistics.median(got))
        await ar.aclose()

    run_loop(ping_rounds())

    def deliver(subscriber: Any, n: int) -> float:
        """n messages on channel bench:floor, each published once the
        subscriber (in its thread) is waiting for it."""
        got = []
        for _ in range(n):
            ready = threading.Event()
            t1: List[float] = []
            th = threading.Thread(target=subscriber, args=(ready, t1))
            th.start()
            ready.wait()
            time.sleep(0.01)  # the subscriber is asleep on its socket
            # From the call: the server may send the message before the
            # PUBLISH's own reply, so its return can come after delivery.
            t0 = time.monotonic()
            sync.publish("bench:floor", "1")
            th.join()
            got.append((t1[0] - t0) * 1e6)
        return statistics.median(got)

    def sync_sub(ready: threading.Event, t1: List[float]) -> None:
        ps = redis.Redis.from_url(url).pubsub()
        ps.subscribe("bench:floor")
        while ps.get_message(timeout=1) is None:  # the confirmation
            pass
        ready.set()
        while True:
            m = ps.get_message(timeout=10)
            if m is not None and m["type"] == "message":
                break
        t1.append(time.monotonic())
        ps.close()

    def async_sub(ready: threading.Event, t1: List[float]) -> None:
        async def main() -> None:
            ar = aredis.Redis.from_url(url)
            ps = ar.pubsub()
            await ps.subscribe("bench:floor")
            while await ps.get_message(timeout=1) is None:
                pass
            ready.set()
            while True:
                m = await ps.get_message(timeout=10)
                if m is not None and m["type"] == "message":
                    break
            t1.append(time.monotonic())
            await ps.aclose()
            await ar.aclose()
        run_loop(main())

    ss_us, sa_us = alternate(rounds, lambda: deliver(sync_sub, k), lambda: deliver(async_sub, k))
    sync.close()
    out: Dict[str, Any] = {
        "rounds": rounds,
        "wake_eventfd_0.1ms_asleep_us": spread(efd01_us),
        "wake_eventfd_1ms_asleep_us": spread(efd_us),
        "wake_eventfd_10ms_asleep_us": spread(efd10_us),
        "wake_call_soon_threadsafe_10ms_asleep_us": spread(cst_us),
        "raw_2pings_sync_us": spread(rs_us), "raw_2pings_async_us": spread(ra_us),
        "ping_sync_us": spread(ps_us), "ping_async_us": spread(pa_us),
        "pubsub_sync_us": spread(ss_us), "pubsub_async_us": spread(sa_us)}
    out["raw_async_over_sync"] = ratio(ra_us, rs_us)
    out["ping_async_over_sync"] = ratio(pa_us, ps_us)
    out["pubsub_async_over_sync"] = ratio(sa_us, ss_us)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=100,
                    help="handoff and floor samples per side, across the rounds")
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio",
                    help="the event loop of the asyncio side (uvloop: if installed)")
    ap.add_argument("--only", metavar="PARTS",
                    default="crowd,stall,floors,cycle,handoff,handoff_process,raw_handoff,"
                    "raw_handoff_process",
                    help="comma-separated parts to run (default: all)")
    args = ap.parse_args()
    global LOOP
    LOOP = args.loop
    import redis
    RedisServer = load_redis_server()
    # DEBUG SLEEP stalls the server for the stall measurement.
    with RedisServer(extra_args=["--enable-debug-command", "yes"]) as srv:
        rds = redis.Redis.from_url(srv.url)
        version = rds.info("server")["redis_version"]
        result: Dict[str, Any] = {"machine": machine(version), "loop": args.loop}
        parts = {
            "crowd": lambda: crowd(srv.url, rds, args.tasks),
            "stall": lambda: stall(srv.url),
            "floors": lambda: floors(srv.url, args.rounds, args.samples),
            "cycle": lambda: cycle(srv.url, args.rounds),
            "handoff": lambda: handoff(srv.url, args.rounds, args.samples,
                                       ThreadHolder(srv.url)),
            "handoff_process": lambda: handoff(srv.url, args.rounds, args.samples,
                                               ProcessHolder(srv.url)),
            "raw_handoff": lambda: raw_handoff(srv.url, args.rounds, args.samples,
                                               RawThreadHolder(srv.url)),
            "raw_handoff_process": lambda: raw_handoff(srv.url, args.rounds, args.samples,
                                                       RawProcessHolder(srv.url)),
        }
        for name in args.only.split(","):
            result[name] = parts[name]()
            print(f"{name}:", result[name])
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
