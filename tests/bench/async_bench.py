#!/usr/bin/env python3
"""hilock.asyncio against the thread API, on one private redis-server.

  crowd      N tasks (default 2,000) of one loop wait on one held lock: the
             server connections and the extra threads of the process while
             they wait, then the time until every one was served in turn.
  stall      a ticker task sleeps 10 ms at a time on the same loop while
             another connection stalls the server (DEBUG SLEEP 0.4) and 50
             tasks acquire and release: the longest gap between ticks (the
             loop must not wait on the network).
  cycle      the uncontended acquire + release of one lock: async
             (await both) against the thread API, median of rounds.
  handoff    a holder thread releases while one waiter is blocked in
             acquire: from release() returning to acquire() returning, for
             an asyncio task and for a thread of the blocking API.

This is a benchmark, not a test: nothing here asserts on timing.

    python3 tests/bench/async_bench.py [--tasks 2000] [--rounds 5] [--samples 100]
        [--only crowd,stall,cycle,handoff] [--json out.json]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

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

    asyncio.run(main())
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

    asyncio.run(main())
    return out


def cycle(url: str, rounds: int, n: int = 2000) -> Dict[str, Any]:
    sync = hilock.Client(url)
    slk = sync.lock("bench:cycle:sync", ttl=10, auto_renew=False)

    def sync_round() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            slk.acquire(blocking=False)
            slk.release()
        return (time.perf_counter() - t0) / n * 1e6

    async def async_rounds() -> List[float]:
        c = hla.Client(url)
        lk = c.lock("bench:cycle:async", ttl=10, auto_renew=False)
        out = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(n):
                await lk.acquire(blocking=False)
                await lk.release()
            out.append((time.perf_counter() - t0) / n * 1e6)
        await c.close()
        return out

    s = [sync_round() for _ in range(rounds)]
    a = asyncio.run(async_rounds())
    sync.close()
    return {"sync_us": round(statistics.median(s), 1), "async_us": round(statistics.median(a), 1),
            "async_over_sync": round(statistics.median(a) / statistics.median(s), 2)}


def handoff(url: str, samples: int) -> Dict[str, Any]:
    holder_c = hilock.Client(url)

    def measure(waiter_acquire: Any) -> List[float]:
        out = []
        for i in range(samples):
            h = holder_c.lock("bench:handoff", ttl=10, auto_renew=False)
            assert h.acquire(blocking=False)
            ready = threading.Event()
            t1: List[float] = []
            t = threading.Thread(target=waiter_acquire, args=(ready, t1))
            t.start()
            ready.wait()
            time.sleep(0.01)  # the waiter is asleep in acquire
            h.release()
            t0 = time.monotonic()
            t.join()
            out.append((t1[0] - t0) * 1e6)
        return out

    sync_c = hilock.Client(url)

    def sync_waiter(ready: threading.Event, t1: List[float]) -> None:
        lk = sync_c.lock("bench:handoff", ttl=10, auto_renew=False)
        ready.set()
        assert lk.acquire(timeout=10)
        t1.append(time.monotonic())
        lk.release()

    def async_waiter(ready: threading.Event, t1: List[float]) -> None:
        async def main() -> None:
            c = hla.Client(url)
            lk = c.lock("bench:handoff", ttl=10, auto_renew=False)
            assert not await lk.acquire(blocking=False)  # binds the loop
            ready.set()
            assert await lk.acquire(timeout=10)
            t1.append(time.monotonic())
            await lk.release()
            await c.close()
        asyncio.run(main())

    s = measure(sync_waiter)
    a = measure(async_waiter)
    sync_c.close()
    holder_c.close()
    p50s, p50a = statistics.median(s), statistics.median(a)
    return {"samples": samples, "thread_p50_us": round(p50s, 1), "async_p50_us": round(p50a, 1),
            "async_over_thread": round(p50a / p50s, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--only", metavar="PARTS", default="crowd,stall,cycle,handoff",
                    help="comma-separated parts to run (default: all four)")
    args = ap.parse_args()
    import redis
    RedisServer = load_redis_server()
    # DEBUG SLEEP stalls the server for the stall measurement.
    with RedisServer(extra_args=["--enable-debug-command", "yes"]) as srv:
        rds = redis.Redis.from_url(srv.url)
        version = rds.info("server")["redis_version"]
        result: Dict[str, Any] = {"machine": machine(version)}
        parts = {
            "crowd": lambda: crowd(srv.url, rds, args.tasks),
            "stall": lambda: stall(srv.url),
            "cycle": lambda: cycle(srv.url, args.rounds),
            "handoff": lambda: handoff(srv.url, args.samples),
        }
        for name in args.only.split(","):
            result[name] = parts[name]()
            print(f"{name}:", result[name])
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
