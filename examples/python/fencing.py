"""Fencing tokens: the protected resource rejects a holder whose lock expired.

A lock alone cannot stop a holder that paused (GC, swap, SIGSTOP) past its
TTL from writing after a new holder took over. Each grant carries a fence
that only grows; the storage remembers the highest fence it accepted and
refuses anything older."""
import time

import hilock
from _example import redis_url


class Storage:
    def __init__(self):
        self.highest = 0
        self.value = None

    def write(self, fence, value):
        if fence < self.highest:
            raise PermissionError(f"stale fence {fence} < {self.highest}: write refused")
        self.highest = fence
        self.value = value


with redis_url() as url, hilock.Client(url) as client:
    storage = Storage()
    a = client.lock("file", ttl=0.2)
    a.acquire()
    fence_a = a.fence
    time.sleep(0.3)  # a pauses past its TTL

    b = client.lock("file", ttl=5.0)
    b.acquire()
    storage.write(b.fence, "written by b")
    print(f"b wrote with fence {b.fence}")
    try:
        storage.write(fence_a, "written by a")
    except PermissionError as e:
        print(f"a tried with fence {fence_a}: {e}")
    b.release()
    print("storage holds:", storage.value)
