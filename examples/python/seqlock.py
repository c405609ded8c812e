"""Sequential lock (ZooKeeper's recipe): numbered entries, watch the one
before you.

Workers line up for a busy resource one after another; each gets the next
sequence number at once (``lk.sequence``, readable while it waits). The lock
goes to the lowest live number and each release wakes only the next worker
in line. Then a holder process is killed with SIGKILL: the next in line is
let in when the dead holder's session (its ttl, 1 s) runs out."""
import os
import signal
import threading
import time

import hilock
from _example import redis_url

NAME = "resource"

with redis_url() as url, hilock.Client(url) as client:
    busy = client.sequential_lock(NAME, ttl=10.0)
    busy.acquire()
    print(f"busy (sequence {busy.sequence}); workers 0..3 line up")

    def work(lk, i):
        with lk:
            print(f"worker {i} holds it (sequence {lk.sequence}, fence {lk.fence})")
            time.sleep(0.03)

    workers = []
    for i in range(4):
        lk = client.sequential_lock(NAME, ttl=10.0, timeout=10.0)
        workers.append(threading.Thread(target=work, args=(lk, i)))
        workers[-1].start()
        while lk.sequence is None:
            time.sleep(0.001)
        print(f"worker {i} waits with sequence {lk.sequence}")
    print(busy.waiters(), "waiting")
    busy.release()
    for t in workers:
        t.join()

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a holder in another process, renewed until it is killed
        with hilock.Client(url) as c:
            lk = c.sequential_lock(NAME, ttl=1.0)
            lk.acquire()
            os.write(w, str(lk.sequence).encode())
            time.sleep(60)
        os._exit(0)
    print(f"process {pid} holds it (sequence {os.read(r, 32).decode()}); SIGKILL")
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    t0 = time.monotonic()
    with client.sequential_lock(NAME, ttl=10.0, timeout=5.0) as nxt:
        print(f"next in line got it {time.monotonic() - t0:.2f} s after the kill "
              f"(sequence {nxt.sequence}, fence {nxt.fence})")
