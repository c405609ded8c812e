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

import argparse
import json
import multiprocessing as mp
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Dict, List

import redis

import hilock

PARTIES = 8


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def _party(url: str, generations: int) -> None:
    r = redis.Redis.from_url(url)
    barrier = hilock.Client(url).barrier("bench:barrier", PARTIES, ttl=10)
    for g in range(generations):
        barrier.wait(timeout=60)
        r.rpush(f"back:{g}", time.monotonic())


def release_latency(url: str, generations: int) -> List[float]:
    r = redis.Redis.from_url(url)
    barrier = hilock.Client(url).barrier("bench:barrier", PARTIES, ttl=10)
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_party, args=(url, generations), daemon=True)
             for _ in range(PARTIES - 1)]
    for p in procs:
        p.start()
    out = []
    for g in range(generations):
        while barrier.n_waiting < PARTIES - 1:
            time.sleep(0.001)
        start = time.monotonic()
        assert barrier.wait(timeout=60) == PARTIES - 1
        for _ in range(PARTIES - 1):
            out.append(float(r.blpop([f"back:{g}"], timeout=30)[1]) - start)
    for p in procs:
        p.join(30)
    barrier.delete()
    return out


def _subscriber(url: str, n: int) -> None:
    r = redis.Redis.from_url(url)
    ps = r.pubsub()
    ps.subscribe("bench:floor")
    ps.get_message(timeout=5)  # the subscription's confirmation
    r.rpush("subscribed", 1)
    got = 0
    while got < n:
        m = ps.get_message(timeout=30)
        if m and m["type"] == "message":
            r.rpush("floor", time.monotonic() - float(m["data"]))
            got += 1


def floor_latency(url: str, n: int) -> List[float]:
    r = redis.Redis.from_url(url)
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_subscriber, args=(url, n), daemon=True)
             for _ in range(PARTIES)]
    for p in procs:
        p.start()
    for _ in procs:
        r.blpop(["subscribed"], timeout=30)
    out = []
    for _ in range(n):
        r.publish("bench:floor", repr(time.monotonic()))
        for _ in procs:  # as the barrier's: each receipt collected before the next
            out.append(float(r.blpop(["floor"], timeout=30)[1]))
    for p in procs:
        p.join(30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--generations", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    port, d = free_port(), tempfile.mkdtemp()
    srv = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(port),
                            "--save", "", "--appendonly", "no", "--dir", d],
                           stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        rel = release_latency(url, a.generations)
        flo = floor_latency(url, a.generations)
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(10)
        shutil.rmtree(d, ignore_errors=True)
    res: Dict[str, float] = {
        "parties": PARTIES, "generations": a.generations,
        "release_p50_ms": pct(rel, 50) * 1000, "release_p99_ms": pct(rel, 99) * 1000,
        "floor_p50_ms": pct(flo, 50) * 1000, "floor_p99_ms": pct(flo, 99) * 1000,
    }
    res["release_p50_over_floor"] = res["release_p50_ms"] / res["floor_p50_ms"]
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        for k, v in res.items():
            print(f"{k:26} {v:.3f}")


if __name__ == "__main__":
    main()
