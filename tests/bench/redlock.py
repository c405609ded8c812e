#!/usr/bin/env python3
"""Redlock cost: five masters against one, and hilock against pottery.

Five private redis-servers on loopback. Every contestant loops {non-blocking
acquire; release} on one uncontended lock for a few seconds per round;
rounds alternate between contestants and each reports the median of its
rounds. The acquire is timed on its own too (median of every acquire in the
round), since that is the latency a caller waits for.

  hilock Lock, 1 node      the single-master expiring lock (hilock.Client.lock)
  hilock Redlock, 1 node   Redlock over one master
  hilock Redlock, 5 nodes  Redlock over five masters, requests multiplexed
  pottery Redlock, 1 / 5   pottery.Redlock over the same masters
  floor, 1 / 5             one round of EXISTS to every node, all answers
                           awaited: what fanning out costs on this machine

Ratios, not times, are the result: the machine is small and shared. This is
a benchmark, not a test: nothing asserts on timing.

    python3 tests/bench/redlock.py [--rounds 3] [--seconds 1.5] [--json out.json]
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
if "hilock" not in sys.modules:
    try:
        import hilock  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "build" / "python"))

import hilock  # noqa: E402
from hilock._server import RedisServer  # noqa: E402

Cycle = Tuple[Callable[[], bool], Callable[[], None]]


def run(acquire: Callable[[], bool], release: Callable[[], None],
        seconds: float) -> Tuple[float, float]:
    """(median acquire us, mean cycle us) over `seconds` of cycles."""
    acq: List[float] = []
    end = time.perf_counter() + seconds
    n = 0
    t_start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        if not acquire():
            raise RuntimeError("uncontended acquire refused")
        acq.append(time.perf_counter() - t0)
        release()
        n += 1
        if t0 >= end:
            break
    total = time.perf_counter() - t_start
    return statistics.median(acq) * 1e6, total / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--json")
    args = ap.parse_args()

    nodes = [RedisServer().start() for _ in range(5)]
    try:
        urls = [n.url for n in nodes]
        contestants: Dict[str, Cycle] = {}

        client = hilock.Client(urls[0])
        lk = client.lock("bench:lock", ttl=10, auto_renew=False)
        contestants["hilock Lock, 1 node"] = (lambda: lk.acquire(blocking=False), lk.release)
        r1 = hilock.Redlock(urls[:1], "bench:r1", ttl=10, auto_renew=False)
        contestants["hilock Redlock, 1 node"] = (lambda: r1.acquire(blocking=False), r1.release)
        r5 = hilock.Redlock(urls, "bench:r5", ttl=10, auto_renew=False)
        contestants["hilock Redlock, 5 nodes"] = (lambda: r5.acquire(blocking=False), r5.release)
        # The machine's own fan-out cost: one round of EXISTS (locked()) on
        # every node, waiting for all of them; no script, no lock.
        contestants["floor: EXISTS round, 1 node"] = (lambda: r1.locked() or True,
                                                      lambda: None)
        contestants["floor: EXISTS round, 5 nodes"] = (lambda: r5.locked() or True,
                                                       lambda: None)
        versions = {"hilock": hilock.__version__}
        try:
            import pottery
            import redis
            masters = [redis.Redis.from_url(u) for u in urls]
            p1 = pottery.Redlock(key="bench:p1", masters={masters[0]}, auto_release_time=10)
            p5 = pottery.Redlock(key="bench:p5", masters=set(masters), auto_release_time=10)
            contestants["pottery Redlock, 1 node"] = (lambda: p1.acquire(blocking=False),
                                                      p1.release)
            contestants["pottery Redlock, 5 nodes"] = (lambda: p5.acquire(blocking=False),
                                                       p5.release)
            versions["pottery"] = importlib.metadata.version("pottery")
            versions["redis"] = importlib.metadata.version("redis")
        except ImportError as e:
            print(f"pottery skipped: {e}", file=sys.stderr)

        results: Dict[str, List[Tuple[float, float]]] = {k: [] for k in contestants}
        for name, (a, r) in contestants.items():  # warm-up: connections, scripts
            run(a, r, 0.2)
        for _ in range(args.rounds):
            for name, (a, r) in contestants.items():
                results[name].append(run(a, r, args.seconds))
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
               for k, v in results.items()}
    finally:
        for n in nodes:
            n.cleanup()

    print(f"Redlock acquire + release, uncontended, 5 redis-servers on loopback, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"median of {args.rounds} rounds of {args.seconds} s")
    print()
    print("| contestant | acquire (or round) p50 µs | µs/cycle | cycles/s |")
    print("|---|---:|---:|---:|")
    for k, (acq, cyc) in med.items():
        print(f"| {k} | {acq:,.0f} | {cyc:,.0f} | {1e6 / cyc:,.0f} |")
    print()
    ratios = []

    def ratio(label: str, num: str, den: str, col: int) -> None:
        if num in med and den in med:
            ratios.append((label, med[num][col] / med[den][col]))

    ratio("floor: EXISTS round, 5 nodes / 1 node", "floor: EXISTS round, 5 nodes",
          "floor: EXISTS round, 1 node", 0)
    ratio("hilock Redlock acquire: 5 nodes / 1 node", "hilock Redlock, 5 nodes",
          "hilock Redlock, 1 node", 0)
    ratio("hilock Redlock 5 nodes acquire / hilock Lock acquire", "hilock Redlock, 5 nodes",
          "hilock Lock, 1 node", 0)
    ratio("hilock Redlock cycle: 5 nodes / 1 node", "hilock Redlock, 5 nodes",
          "hilock Redlock, 1 node", 1)
    ratio("pottery Redlock acquire: 5 nodes / 1 node", "pottery Redlock, 5 nodes",
          "pottery Redlock, 1 node", 0)
    ratio("pottery / hilock, acquire, 5 nodes", "pottery Redlock, 5 nodes",
          "hilock Redlock, 5 nodes", 0)
    ratio("pottery / hilock, cycle, 5 nodes", "pottery Redlock, 5 nodes",
          "hilock Redlock, 5 nodes", 1)
    print("| ratio | value |")
    print("|---|---:|")
    for label, v in ratios:
        print(f"| {label} | {v:.2f} |")
    print()
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"medians_us": med, "ratios": dict(ratios),
                                               "versions": versions}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
