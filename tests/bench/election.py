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

import sys
import time
from pathlib import Path
from typing import Dict, List

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recipes  # noqa: E402

import hilock  # noqa: E402


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
        p = recipes.spawn(1, _leader, url, name, ttl)[0]
        recipes.gather(r, "led", 1, timeout=30)
        standby = client.election(name, ttl=ttl)
        killed = recipes.kill_mid_ttl(p, ttl)
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
    p = recipes.spawn(1, _observer, url, "bench:obs", n)[0]
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


def main() -> None:
    a = recipes.arguments(__doc__, rounds=10, changes=200, ttl=1.0)
    with recipes.private_server() as url:
        fo = failover(url, a.rounds, a.ttl)
        obs = observe_latency(url, a.changes)
        flo = [t for (t,) in recipes.floor_latency(url, a.changes, 1)]
    res: Dict[str, float] = {
        "ttl_s": a.ttl,
        "failover_p50_s": recipes.pct(fo, 50), "failover_max_s": max(fo),
        "failover_p50_over_ttl": recipes.pct(fo, 50) / a.ttl,
        **recipes.percentiles_ms("observe", obs),
        **recipes.percentiles_ms("floor", flo),
    }
    recipes.report(res, a.json, against_floor="observe")


if __name__ == "__main__":
    main()
