"""Simple atomic lock (SETNX, no expiry).

If the holder dies without releasing, the lock stays held for good: an
operator must clear it with force_release(). Prefer client.lock() (expiring)
unless you really want that."""
import hilock
from _example import redis_url

with redis_url() as url, hilock.Client(url) as client:
    lk = client.simple_lock("nightly-job")
    if lk.acquire(blocking=False):
        try:
            print("running the job, fence", lk.fence, "validity", lk.validity)
        finally:
            lk.release()

    crashed = client.simple_lock("nightly-job")
    crashed.acquire()
    del crashed  # the holder "dies" without releasing
    waiter = client.simple_lock("nightly-job")
    print("acquire while a dead holder keeps it:", waiter.acquire(timeout=0.2))
    print("operator clears it:", client.simple_lock("nightly-job").force_release())
    print("acquire now:", waiter.acquire(timeout=0.2))
    waiter.release()
