#!/usr/bin/env python3
"""Leader election figures on a private redis-server:

- failover: a leader process (ttl T, renewed by its client's thread) is
  killed with SIGKILL while a standby waits in campaign(); the time from
  the kill to the standby's lead, against T;
- observe(): from a proclaim to an observer in another process seeing it
  (p50/p99), beside the floor measured in the same run: a raw PUBLISH to
  a redis-py subscriber in another process.

    python3 tests/bench/election.py [--rounds N] [--ttl S] [--json]

Needs hilock importable (PYTHONPATH=build/py/python) and redis-py.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Dict, List

import redis

import hilock


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def _leader(url: str, name: str, ttl: float) -> None:
    r = redis.Redis.from_url(url)
    lead = hilock.Client(url).election(name, ttl=ttl).campaign("old", timeout=30)
    r.rpush("led", lead.fence)
    time.sleep(3600)


def failover(url: str, rounds: int, ttl: float) -> List[float]:
    r = redis.Redis.from_url(url)
    client = hilock.Client(url)
    out = []
    for i in range(rounds):
        name = f"bench:failover:{i}"
        p = mp.get_context("fork").Process(target=_leader, args=(url, name, ttl), daemon=True)
        p.start()
        r.blpop(["led"], timeout=30)
        time.sleep(ttl)  # a few renewals: the lead is mid-TTL when killed
        standby = client.election(name, ttl=ttl)
        killed = time.monotonic()
        os.kill(p.pid, signal.SIGKILL)
        lead = standby.campaign("new", timeout=30)
        out.append(time.monotonic() - killed)
        lead.resign()
        p.join(5)
    return out


def _observer(url: str, name: str, n: int) -> None:
    r = redis.Redis.from_url(url)
    r.rpush("observing", 1)
    seen = 0
    for value, _ in hilock.Client(url).election(name).observe(timeout=30):
        now = time.monotonic()
        if isinstance(value, str) and value.startswith("t="):
            r.rpush("lat", now - float(value[2:]))
            seen += 1
            if seen == n:
                return


def observe_latency(url: str, n: int) -> List[float]:
    r = redis.Redis.from_url(url)
    client = hilock.Client(url)
    p = mp.get_context("fork").Process(target=_observer, args=(url, "bench:obs", n), daemon=True)
    p.start()
    r.blpop(["observing"], timeout=30)
    lead = client.election("bench:obs", ttl=30).campaign("start")
    for _ in range(n):
        before = r.llen("lat")
        lead.proclaim(f"t={time.monotonic()!r}")
        while r.llen("lat") == before:  # one change at a time: none coalesced
            time.sleep(0.0005)
    p.join(30)
    lead.resign()
    return [float(x) for x in r.lrange("lat", 0, -1)]


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
    p = mp.get_context("fork").Process(target=_subscriber, args=(url, n), daemon=True)
    p.start()
    r.blpop(["subscribed"], timeout=30)
    for _ in range(n):
        before = r.llen("floor")
        r.publish("bench:floor", repr(time.monotonic()))
        while r.llen("floor") == before:
            time.sleep(0.0005)
    p.join(30)
    return [float(x) for x in r.lrange("floor", 0, -1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--changes", type=int, default=200)
    ap.add_argument("--ttl", type=float, default=1.0)
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
        fo = failover(url, a.rounds, a.ttl)
        obs = observe_latency(url, a.changes)
        flo = floor_latency(url, a.changes)
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(10)
        shutil.rmtree(d, ignore_errors=True)
    res: Dict[str, float] = {
        "ttl_s": a.ttl,
        "failover_p50_s": pct(fo, 50), "failover_max_s": max(fo),
        "failover_p50_over_ttl": pct(fo, 50) / a.ttl,
        "observe_p50_ms": pct(obs, 50) * 1000, "observe_p99_ms": pct(obs, 99) * 1000,
        "floor_p50_ms": pct(flo, 50) * 1000, "floor_p99_ms": pct(flo, 99) * 1000,
    }
    res["observe_p50_over_floor"] = res["observe_p50_ms"] / res["floor_p50_ms"]
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        for k, v in res.items():
            print(f"{k:26} {v:.3f}")


if __name__ == "__main__":
    main()
