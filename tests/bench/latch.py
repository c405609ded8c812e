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

import json
import sys
import time
from pathlib import Path
from typing import Dict, List

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recipes  # noqa: E402

import hilock  # noqa: E402


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
    return [json.loads(x) for x in recipes.gather(r, key, n)]


def release(url: str, rounds: int, waiters: int) -> List[float]:
    r = redis.Redis.from_url(url)
    client = hilock.Client(url)
    procs = recipes.spawn(waiters, _waiter, url, "bench:rel", rounds)
    out = []
    for i in range(rounds):
        name = f"bench:rel:{i}"
        _subscribed(r, _channel(name), waiters)
        t0 = time.monotonic()
        client.latch(name, 1).count_down()
        done = _gather(r, f"bench:rel:done:{i}", waiters)
        assert all(ok is True for ok, _ in done), done
        out.append(max(t for _, t in done) - t0)
    recipes.join(procs, 10)
    return out


def _party(url: str, name: str, ttl: float) -> None:
    r = redis.Redis.from_url(url)
    party = hilock.Client(url).latch(name, 1, ttl=ttl).join()
    r.rpush("joined", 1)
    time.sleep(3600)
    party.count_down()  # never reached: killed before


def broken(url: str, rounds: int, waiters: int, ttl: float) -> List[float]:
    r = redis.Redis.from_url(url)
    procs = recipes.spawn(waiters, _waiter, url, "bench:brk", rounds)
    out = []
    for i in range(rounds):
        name = f"bench:brk:{i}"
        party = recipes.spawn(1, _party, url, name, ttl)[0]
        recipes.gather(r, "joined", 1, timeout=30)
        _subscribed(r, _channel(name), waiters)
        killed = recipes.kill_mid_ttl(party, ttl)
        done = _gather(r, f"bench:brk:done:{i}", waiters)
        assert all(ok == "broken" for ok, _ in done), done
        out.append(max(t for _, t in done) - killed)
        party.join(5)
    recipes.join(procs, 10)
    return out


def main() -> None:
    a = recipes.arguments(__doc__, rounds=50, waiters=4, breaks=5, ttl=1.0)
    with recipes.private_server() as url:
        rel = release(url, a.rounds, a.waiters)
        flo = [max(times) for times in recipes.floor_latency(url, a.rounds, a.waiters)]
        brk = broken(url, a.breaks, a.waiters, a.ttl)
    res: Dict[str, float] = {
        "waiters": a.waiters, "rounds": a.rounds, "ttl_s": a.ttl,
        **recipes.percentiles_ms("release", rel),
        **recipes.percentiles_ms("floor", flo),
        "break_p50_s": recipes.pct(brk, 50), "break_max_s": max(brk),
        "break_p50_over_ttl": recipes.pct(brk, 50) / a.ttl,
    }
    recipes.report(res, a.json, against_floor="release")


if __name__ == "__main__":
    main()
