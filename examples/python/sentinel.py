"""Locks through Redis Sentinel, and why wait_replicas matters.

Uses $HILOCK_SENTINEL_URL (redis+sentinel://host:port[,...]/master) if set;
else starts a master, a replica and three sentinels on loopback. The demo
kill -9s that master, so never point it at a deployment you care about
unless you mean it: with $HILOCK_SENTINEL_URL it skips the killing.

1. A lock held across a failover: the client follows the sentinels to the
   promoted replica, and the watchdog keeps renewing there.
2. The failover double grant: a grant the replica never saw is lost when
   the replica is promoted, and a second client gets the same lock.
   With wait_replicas=1 the first grant is refused instead.
3. Against a server with no replica at all, wait_replicas=1 refuses every
   grant (redis_url(): $HILOCK_URL or a private server).
"""
import os
import time

import hilock
from _example import redis_url
from hilock._server import SentinelDeployment


def follow_failover(dep):
    with hilock.Client(dep.url, reconnect=15.0) as client:
        # The TTL must outlast the failover (here ~3 s): until the replica is
        # promoted nothing can renew the lock, and its TTL keeps running.
        with client.lock("orders", ttl=6.0) as lk:
            print(f"1. held through the sentinels, fence {lk.fence}")
            t0 = time.monotonic()
            took = dep.kill_master_and_fail_over()
            print(f"   master killed; failover took {took:.1f} s")
            # Past the TTL: only renewals on the new master can have kept it.
            time.sleep(max(0.0, t0 + 6.5 - time.monotonic()))
            print(f"   still ours on the promoted replica: owned={lk.owned()} lost={lk.lost}")


def double_grant(wait_replicas):
    with SentinelDeployment() as dep:
        dep.break_replication()  # the replica falls behind
        a = hilock.Client(dep.url, wait_replicas=wait_replicas, wait_timeout=0.3,
                          reconnect=15.0)
        lk_a = a.lock("payments", ttl=30.0, auto_renew=False)
        try:
            lk_a.acquire(timeout=1)
            print(f"   A: granted (fence {lk_a.fence}), on the master only")
        except hilock.NotEnoughReplicas as e:
            print(f"   A: refused: {e}")
        dep.kill_master_and_fail_over()
        with hilock.Client(dep.url, reconnect=15.0) as b:
            lk_b = b.lock("payments", ttl=30.0, auto_renew=False)
            lk_b.acquire(timeout=1)
            both = lk_a.validity > 0
            print(f"   B: granted after the failover (fence {lk_b.fence}); "
                  f"A still believes it holds it: {both}")
            lk_b.release()
        a.close()


url = os.environ.get("HILOCK_SENTINEL_URL")
if url:
    with hilock.Client(url, wait_replicas=1) as client, client.lock("orders", ttl=10) as lk:
        print(f"held through {url}, fence {lk.fence}, acknowledged by a replica")
else:
    with SentinelDeployment() as dep:
        follow_failover(dep)
    print("2. without wait_replicas:")
    double_grant(0)
    print("   with wait_replicas=1:")
    double_grant(1)

with redis_url() as plain, hilock.Client(plain, wait_replicas=1, wait_timeout=0.1) as client:
    try:
        with client.lock("orders", timeout=1):
            print("3. granted?!")
    except hilock.NotEnoughReplicas as e:
        print(f"3. no replica to acknowledge: acked={e.acked} wanted={e.wanted}")
