"""Fair (FIFO) lock: first come, first served.

Workers queue for a busy printer one after another and get it in the order
they asked (their tickets). A latecomer's non-blocking try is refused even at
the moment the printer is free, because others are already waiting. A worker
that dies while queued is skipped once its heartbeat lapses."""
import threading
import time

import hilock
from _example import redis_url

with redis_url() as url, hilock.Client(url) as client:
    busy = client.fair_lock("printer", ttl=10.0)
    busy.acquire()
    print("the printer is busy; workers 0..4 queue in that order")

    def work(i):
        with client.fair_lock("printer", ttl=10.0, timeout=10.0) as lk:
            print(f"worker {i} prints (ticket {lk.ticket}, fence {lk.fence})")
            time.sleep(0.05)

    workers = []
    for i in range(5):
        workers.append(threading.Thread(target=work, args=(i,)))
        workers[-1].start()
        time.sleep(0.02)  # worker i takes its ticket before the next asks
    print(busy.waiters(), "waiting; a waiter proves it is alive every",
          f"{busy.heartbeat / 3:.2f} s")

    busy.release()
    latecomer = client.fair_lock("printer")
    got = latecomer.acquire(blocking=False)
    print("latecomer's try right after the release:",
          "granted" if got else "refused (others are queued)")
    if got:
        latecomer.release()
    for t in workers:
        t.join()
