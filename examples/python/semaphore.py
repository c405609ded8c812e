"""Counting semaphore: at most 3 report builders at once, anywhere.

The seeds' INCR/DECR counter loses a permit for good whenever a holder dies.
Here every permit has an id and an expiry on the server's clock, renewed
while its holder lives, so a dead holder's permit comes back within its TTL.
One Semaphore object may be shared by threads: each thread takes a permit of
its own."""
import os
import threading
import time

import hilock
from _example import redis_url

with redis_url() as url, hilock.Client(url) as client:
    reports = client.semaphore("reports", 3, ttl=2.0)
    reports.set_limit(3)  # the stored limit wins; start from 3 on every run
    inside, most = [0], [0]
    mu = threading.Lock()

    def build(i):
        with reports:  # blocks while 3 others are building
            with mu:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            print(f"worker {i}: building, permit {reports.permit_id[:8]}..., "
                  f"{reports.available()} free")
            time.sleep(0.3)
            with mu:
                inside[0] -= 1

    t0 = time.monotonic()
    workers = [threading.Thread(target=build, args=(i,)) for i in range(5)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    print(f"5 workers, at most {most[0]} inside at once, {time.monotonic() - t0:.2f} s\n")

    # A holder process dies without releasing: its permit lapses at its TTL.
    reports.set_limit(1)
    pid = os.fork()
    if pid == 0:
        doomed = hilock.Client(url).semaphore("reports", 3, ttl=1.0)
        doomed.acquire()
        os._exit(0)  # no release
    os.waitpid(pid, 0)
    print("limit 1, its holder died: available =", reports.available())
    t0 = time.monotonic()
    with reports:
        print(f"a waiter got the permit after {time.monotonic() - t0:.2f} s\n")

    reports.limit = 5  # an operator raises it; holders keep their permits
    print("operator: limit", reports.limit, "available", reports.available())
    reports.set_limit(3)
