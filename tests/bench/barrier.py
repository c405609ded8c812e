#!/usr/bin/env python3
"""Barrier release latency on a private redis-server: 8 party processes
(7 waiting, an 8th arriving last once the 7 wait) meet N times; the time
from just before the last arrival to each waiting party's return
(p50/p99), beside the floor measured in the same run: a raw redis-py
PUBLISH to 8 subscriber processes (time from before the PUBLISH to each
subscriber's receipt). Both collect every party's report before the next
round.

    python3 tests/bench/barrier.py [--generations N] [--json]

Needs hilock importable (PYTHONPATH=build/py/python) and redis-py.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Dict, List

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recipes  # noqa: E402

import hilock  # noqa: E402

PARTIES = 8


def _party(url: str, generations: int) -> None:
    r = redis.Redis.from_url(url)
    barrier = hilock.Client(url).barrier("bench:barrier", PARTIES, ttl=10)
    for g in range(generations):
        barrier.wait(timeout=60)
        r.rpush(f"back:{g}", time.monotonic())


def release_latency(url: str, generations: int) -> List[float]:
    r = redis.Redis.from_url(url)
    barrier = hilock.Client(url).barrier("bench:barrier", PARTIES, ttl=10)
    procs = recipes.spawn(PARTIES - 1, _party, url, generations)
    out = []
    for g in range(generations):
        while barrier.n_waiting < PARTIES - 1:
            time.sleep(0.001)
        start = time.monotonic()
        assert barrier.wait(timeout=60) == PARTIES - 1
        out += [float(t) - start for t in recipes.gather(r, f"back:{g}", PARTIES - 1, timeout=30)]
    recipes.join(procs)
    barrier.delete()
    return out


def main() -> None:
    a = recipes.arguments(__doc__, generations=50)
    with recipes.private_server() as url:
        rel = release_latency(url, a.generations)
        flo = [t for times in recipes.floor_latency(url, a.generations, PARTIES) for t in times]
    res: Dict[str, float] = {
        "parties": PARTIES, "generations": a.generations,
        **recipes.percentiles_ms("release", rel),
        **recipes.percentiles_ms("floor", flo),
    }
    recipes.report(res, a.json, against_floor="release")


if __name__ == "__main__":
    main()
