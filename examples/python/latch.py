"""Countdown latch: wait until every worker process has finished.

Three worker processes join the latch "batch" as registered parties and
count down when their work is done (leaving the ``with`` block); this
process waits. In a second round one worker is killed with SIGKILL before
it counts down: the wait raises BrokenBarrier within the party's ttl
(1 s) instead of waiting forever."""
import os
import signal
import time

import hilock
from _example import redis_url

WORKERS = 3


def worker(url, name, i, w):
    with hilock.Client(url) as c:
        with c.latch(name, WORKERS, ttl=1.0).join():
            os.write(w, b"j")
            time.sleep(0.2 * (i + 1))  # the work
    # Leaving the block counted down.


def round_of(url, client, name, kill_one):
    latch = client.latch(name, WORKERS, ttl=1.0)
    latch.delete()  # a fresh latch for the demo
    r, w = os.pipe()
    pids = []
    for i in range(WORKERS):
        pid = os.fork()
        if pid == 0:
            worker(url, name, i, w)
            os._exit(0)
        pids.append(pid)
    for _ in range(WORKERS):
        os.read(r, 1)  # every worker joined
    start = time.monotonic()
    if kill_one:
        os.kill(pids[-1], signal.SIGKILL)
        print(f"{name}: worker {pids[-1]} killed before it counted down")
    try:
        latch.wait(timeout=30)
        print(f"{name}: every worker finished ({time.monotonic() - start:.2f} s)")
    except hilock.BrokenBarrier as e:
        print(f"{name}: broken after {time.monotonic() - start:.2f} s: {e}")
    for pid in pids:
        os.waitpid(pid, 0)
    latch.delete()


with redis_url() as url, hilock.Client(url) as client:
    round_of(url, client, "batch", False)
    round_of(url, client, "batch-crash", True)
