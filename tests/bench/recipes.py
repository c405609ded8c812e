"""What the recipe benchmarks (election.py, latch.py, barrier.py) share:
their private redis-server, their worker processes, the percentiles, the
floor a pub/sub release is measured against (a raw redis-py PUBLISH to
subscriber processes) and the printing of the figures.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Sequence

import redis

from hilock._server import RedisServer

CTX = mp.get_context("fork")


@contextmanager
def private_server() -> Iterator[str]:
    """The url of a redis-server of its own, stopped on leaving."""
    with RedisServer() as srv:
        yield srv.url


def pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def spawn(n: int, target: Callable[..., None], *args: Any) -> List[Any]:
    """n daemon processes (forked) running target(*args), started."""
    procs = [CTX.Process(target=target, args=args, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    return procs


def join(procs: Sequence[Any], timeout: float = 30) -> None:
    for p in procs:
        p.join(timeout)


def kill_mid_ttl(proc: Any, ttl: float) -> float:
    """SIGKILL proc, a process whose lease (ttl, renewed by its client's
    thread) is held, after a few renewals: the lease is mid-TTL when
    killed. The time of the kill."""
    time.sleep(ttl)
    killed = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    return killed


def gather(r: redis.Redis, key: str, n: int, timeout: float = 60) -> List[bytes]:
    """n reports popped from the list at key, as they come."""
    out = []
    for _ in range(n):
        got = r.blpop([key], timeout=timeout)
        if got is None:
            raise RuntimeError(f"a process did not report on {key}")
        out.append(got[1])
    return out


def _subscriber(url: str, rounds: int) -> None:
    r = redis.Redis.from_url(url)
    ps = r.pubsub()
    ps.subscribe("bench:floor")
    ps.get_message(timeout=5)  # the subscription's confirmation
    r.rpush("subscribed", 1)
    got = 0
    while got < rounds:
        m = ps.get_message(timeout=30)
        if m and m["type"] == "message":
            r.rpush(f"floor:{got}", time.monotonic() - float(m["data"]))
            got += 1


def floor_latency(url: str, rounds: int, subscribers: int) -> List[List[float]]:
    """A raw redis-py PUBLISH to `subscribers` processes, `rounds` times:
    per round, the time from just before the PUBLISH to each subscriber's
    receipt. Every receipt is collected before the next round."""
    r = redis.Redis.from_url(url)
    procs = spawn(subscribers, _subscriber, url, rounds)
    gather(r, "subscribed", subscribers, timeout=30)
    out = []
    for i in range(rounds):
        r.publish("bench:floor", repr(time.monotonic()))
        out.append([float(x) for x in gather(r, f"floor:{i}", subscribers, timeout=30)])
    join(procs)
    return out


def arguments(doc: str, **defaults: Any) -> argparse.Namespace:
    """The command line: --json, and --NAME for each default (of its type)."""
    ap = argparse.ArgumentParser(description=doc)
    for name, default in defaults.items():
        ap.add_argument(f"--{name}", type=type(default), default=default)
    ap.add_argument("--json", action="store_true")
    return ap.parse_args()


def percentiles_ms(name: str, xs: List[float]) -> Dict[str, float]:
    """{name_p50_ms, name_p99_ms} of xs (in seconds)."""
    return {f"{name}_p50_ms": pct(xs, 50) * 1000, f"{name}_p99_ms": pct(xs, 99) * 1000}


def report(res: Dict[str, float], as_json: bool, against_floor: str) -> None:
    """The figures, as JSON or one a line, ending with the median of
    against_floor over the floor's."""
    res[f"{against_floor}_p50_over_floor"] = res[f"{against_floor}_p50_ms"] / res["floor_p50_ms"]
    if as_json:
        print(json.dumps(res, indent=1))
    else:
        for k, v in res.items():
            print(f"{k:26} {v:.3f}")
