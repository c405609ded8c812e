#!/usr/bin/env python3
"""Countdown latch figures on a private redis-server:

- release: from the last count_down() to every one of W waiter processes
  returning True from wait() (p50/p99 of the slowest waiter per round),
  beside the floor measured in the same run: a raw PUBLISH to W redis-py
  subscriber processes, until every one has it;
- break: a registered party (ttl T, renewed by its client's thread) is
  killed with SIGKILL while W waiters wait; the time from the kill to
  every waiter's BrokenBarrier, against T.

    python3 tests/bench/latch.py [--rounds N] [--waiters W] [--ttl S] [--json]

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


def _channel(name: str) -> str:
    return "hilock:{" + name + "}:latch"


def _subscribed(r: redis.Redis, channel: str, n: int) -> None:
    """Until n clients listen on channel (every waiter sleeps in its wait)."""
    deadline = time.monotonic() + 30
    while int(r.pubsub_numsub(channel)[0][1]) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} waiters did not listen on {channel}")
        time.sleep(0.001)


def _waiter(url: str, prefix: str, rounds: int) -> None:
    r = redis.Redis.from_url(url)
    client = hilock.Client(url)
    for i in range(rounds):
        latch = client.latch(f"{prefix}:{i}", 1, ttl=30)
        try:
            ok = latch.wait(timeout=60)
            r.rpush(f"{prefix}:done:{i}", json.dumps([ok, time.monotonic()]))
        except hilock.BrokenBarrier:
            r.rpush(f"{prefix}:done:{i}", json.dumps(["broken", time.monotonic()]))


def _gather(r: redis.Redis, key: str, n: int) -> List[list]:
    out = []
    for _ in range(n):
        got = r.blpop([key], timeout=60)
        if got is None:
            raise RuntimeError(f"a waiter did not report on {key}")
        out.append(json.loads(got[1]))
    return out


def release(url: str, rounds: int, waiters: int) -> List[float]:
    r = redis.Redis.from_url(url)
    client = hilock.Client(url)
    procs = [mp.get_context("fork").Process(target=_waiter, args=(url, "bench:rel", rounds),
                                            daemon=True) for _ in range(waiters)]
    for p in procs:
        p.start()
    out = []
    for i in range(rounds):
        name = f"bench:rel:{i}"
        _subscribed(r, _channel(name), waiters)
        t0 = time.monotonic()
        client.latch(name, 1).count_down()
        done = _gather(r, f"bench:rel:done:{i}", waiters)
        assert all(ok is True for ok, _ in done), done
        out.append(max(t for _, t in done) - t0)
    for p in procs:
        p.join(10)
    return out


def _party(url: str, name: str, ttl: float) -> None:
    r = redis.Redis.from_url(url)
    party = hilock.Client(url).latch(name, 1, ttl=ttl).join()
    r.rpush("joined", 1)
    time.sleep(3600)
    party.count_down()  # never reached: killed before


def broken(url: str, rounds: int, waiters: int, ttl: float) -> List[float]:
    r = redis.Redis.from_url(url)
    procs = [mp.get_context("fork").Process(target=_waiter, args=(url, "bench:brk", rounds),
                                            daemon=True) for _ in range(waiters)]
    for p in procs:
        p.start()
    out = []
    for i in range(rounds):
        name = f"bench:brk:{i}"
        party = mp.get_context("fork").Process(target=_party, args=(url, name, ttl), daemon=True)
        party.start()
        r.blpop(["joined"], timeout=30)
        _subscribed(r, _channel(name), waiters)
        time.sleep(ttl)  # a few renewals: the lease is mid-TTL when killed
        killed = time.monotonic()
        os.kill(party.pid, signal.SIGKILL)
        done = _gather(r, f"bench:brk:done:{i}", waiters)
        assert all(ok == "broken" for ok, _ in done), done
        out.append(max(t for _, t in done) - killed)
        party.join(5)
    for p in procs:
        p.join(10)
    return out


def _subscriber(url: str, rounds: int) -> None:
    r = redis.Redis.from_url(url)
    ps = r.pubsub()
    ps.subscribe("bench:floor")
    ps.get_message(timeout=5)  # the subscription's confirmation
    got = 0
    while got < rounds:
        m = ps.get_message(timeout=30)
        if m and m["type"] == "message":
            r.rpush(f"floor:{got}", time.monotonic())
            got += 1


def floor_latency(url: str, rounds: int, waiters: int) -> List[float]:
    r = redis.Redis.from_url(url)
    procs = [mp.get_context("fork").Process(target=_subscriber, args=(url, rounds), daemon=True)
             for _ in range(waiters)]
    for p in procs:
        p.start()
    _subscribed(r, "bench:floor", waiters)
    out = []
    for i in range(rounds):
        t0 = time.monotonic()
        r.publish("bench:floor", "x")
        times = []
        for _ in range(waiters):
            got = r.blpop([f"floor:{i}"], timeout=30)
            assert got is not None
            times.append(float(got[1]))
        out.append(max(times) - t0)
    for p in procs:
        p.join(10)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--waiters", type=int, default=4)
    ap.add_argument("--breaks", type=int, default=5)
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
        rel = release(url, a.rounds, a.waiters)
        flo = floor_latency(url, a.rounds, a.waiters)
        brk = broken(url, a.breaks, a.waiters, a.ttl)
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(10)
        shutil.rmtree(d, ignore_errors=True)
    res: Dict[str, float] = {
        "waiters": a.waiters, "rounds": a.rounds, "ttl_s": a.ttl,
        "release_p50_ms": pct(rel, 50) * 1000, "release_p99_ms": pct(rel, 99) * 1000,
        "floor_p50_ms": pct(flo, 50) * 1000, "floor_p99_ms": pct(flo, 99) * 1000,
        "break_p50_s": pct(brk, 50), "break_max_s": max(brk),
        "break_p50_over_ttl": pct(brk, 50) / a.ttl,
    }
    res["release_p50_over_floor"] = res["release_p50_ms"] / res["floor_p50_ms"]
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        for k, v in res.items():
            print(f"{k:26} {v:.3f}")


if __name__ == "__main__":
    main()
