"""Expiring lock (SET NX PX): the grant lapses after ttl unless released."""
import time

import hilock
from _example import redis_url

with redis_url() as url, hilock.Client(url) as client:
    # The documents' `with lock(...)` form: acquire or raise LockTimeout.
    with client.lock("orders:42", ttl=5.0, timeout=2.0) as lk:
        print(f"holding {lk.name!r}: fence={lk.fence} validity={lk.validity:.2f}s")

    # A holder that outlives its TTL loses the lock, and learns it on release.
    slow = client.lock("report", ttl=0.2)
    slow.acquire()
    time.sleep(0.3)
    other = client.lock("report", ttl=5.0)
    print("another holder got it after expiry:", other.acquire(blocking=False))
    try:
        slow.release()
    except hilock.LockNotOwnedError as e:
        print("stale release refused:", e)
    print("the new holder still owns it:", other.owned())
    other.release()
