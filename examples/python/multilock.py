"""Multi-key lock: a transfer locks both accounts at once, or neither.

Transfers in opposite directions never deadlock (the names are sorted and
taken in one script), a single lock on one account excludes the transfer,
and each account gets a fencing token from its own counter."""
import threading

import hilock
from _example import redis_url

with redis_url() as url, hilock.Client(url) as client:

    def transfer(src: str, dst: str) -> None:
        for _ in range(3):
            with client.multi_lock([src, dst], ttl=10.0, timeout=5.0) as both:
                print(f"{src} -> {dst}: fences {both.fence}")

    threads = [threading.Thread(target=transfer, args=("acct:1", "acct:2")),
               threading.Thread(target=transfer, args=("acct:2", "acct:1"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    with client.lock("acct:2", ttl=5.0):  # an auditor reads one account
        both = client.multi_lock(["acct:2", "acct:1"], ttl=5.0)
        print("auditor holds acct:2; transfer try:", both.acquire(blocking=False))
    with both:
        print("auditor done; transfer holds", both.names, "fences", both.fence)
