"""Redlock: one lock over several independent Redis masters.

Five private redis-servers stand in for five independent masters (or set
$HILOCK_URL to use one node of your own). The lock is granted when a
majority (3 of 5) takes it: it survives two nodes going down, and with three
down it fails with NoQuorumError naming each node that did not answer."""
import os

import hilock
from _example import redis_url
from hilock._server import RedisServer

if os.environ.get("HILOCK_URL") or os.environ.get("REDIS_URL"):
    with redis_url() as url:
        with hilock.Redlock([url], "report", ttl=10.0, timeout=5.0) as lk:
            print("one node; fence", lk.fence)
    raise SystemExit(0)

nodes = [RedisServer().start() for _ in range(5)]
try:
    urls = [n.url for n in nodes]
    lk = hilock.Redlock(urls, "report", ttl=10.0, timeout=5.0)
    with lk:
        print(f"held on a majority of {len(urls)}: fence {lk.fence}, "
              f"{lk.validity:.2f} s of validity")

    nodes[0].stop()
    nodes[1].stop()
    with lk:
        print("two nodes down: still granted, fence", lk.fence)

    nodes[2].stop()
    try:
        lk.acquire(timeout=0.5)
    except hilock.NoQuorumError as e:
        print("three nodes down:", e)
finally:
    for n in nodes:
        n.cleanup()
