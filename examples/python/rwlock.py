"""Read-write lock: many readers at once, or one writer.

Readers share the lock; a writer that arrives holds new readers back, gets
the lock once the current readers are done, and may downgrade to a read
with no gap. Asking for the write side while reading raises DeadlockError
at once (Redisson's read lock would wait for itself forever)."""
import threading
import time

import hilock
from _example import redis_url

with redis_url() as url, hilock.Client(url) as client:
    catalog = client.rwlock("catalog", ttl=10.0, timeout=5.0)

    def reader(n):
        with catalog.read():  # each thread is its own reader
            print(f"reader {n}: reading, anyone writing? {catalog.write().locked()}")
            time.sleep(0.2)

    def writer():
        with catalog.write() as w:
            print(f"writer: writing with fence {w.fence}")
            time.sleep(0.1)
            catalog.read().acquire()  # downgrade: read first ...
        # ... then the write is released, and the read is still ours.
        print("writer: downgraded; other writers still wait, readers join")
        time.sleep(0.1)
        catalog.read().release()

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(3)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
        time.sleep(0.03)
    late = threading.Thread(target=reader, args=(3,))  # queues behind the writer
    late.start()
    for t in threads + [late]:
        t.join()

    with catalog.read():
        try:
            catalog.write().acquire()
        except hilock.DeadlockError as e:
            print("upgrade refused:", e)
    print("held by anyone:", catalog.locked())
