"""Lease lock: hold a resource by renewing the lease before it runs out."""
import time

import hilock
from _example import redis_url

with redis_url() as url, hilock.Client(url) as client:
    lease = client.lease("leader", ttl=1.0)
    with lease:
        for step in range(3):
            time.sleep(0.4)  # work in steps shorter than the lease
            lease.renew()
            print(f"step {step}: renewed, {lease.validity:.2f}s left, owned={lease.owned()}")
        lease.extend(2.0)  # add two seconds to what is left
        print(f"extended: {lease.validity:.2f}s left")
