"""Watchdog renewal and loss detection.

With the default auto_renew=True the client's renewal thread keeps a held
lock alive; if the lock is lost anyway (taken by someone else, or Redis
unreachable past its validity) on_lost runs and leaving the block raises
hilock.LockLost."""
import time

import hilock
from _example import redis_url

with redis_url() as url, hilock.Client(url) as client:
    with client.lock("report:daily", ttl=0.6) as job:
        time.sleep(2.0)  # three TTLs and more
        print(f"after 2 s with a 0.6 s TTL: owned={job.owned()} validity={job.validity:.2f}s")

    def lost(lock):
        print(f"on_lost: {lock.name!r} is no longer ours")

    try:
        with client.lock("report:daily", ttl=0.6, on_lost=lost) as job:
            thief = client.lock("report:daily", ttl=5.0)
            thief.force_release()  # an operator steps in...
            thief.acquire()        # ...and someone else takes it
            time.sleep(0.5)
            print("lost flag:", job.lost)
    except hilock.LockLost as e:
        print("leaving the block:", type(e).__name__, "-", e)
    thief.release()
