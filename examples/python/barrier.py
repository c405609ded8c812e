"""Barriers: parties released together, with liveness.

Three worker processes meet at "stage" three times (each generation hands
out the arrival indexes 0, 1 and 2). Then four processes wait for a fifth
party that never comes, and one of them is killed with SIGKILL while they
wait: the others raise hilock.BrokenBarrier within the ttl (1 s) instead
of waiting forever. Last, a double barrier round: nobody works before all
have entered, nobody goes on before all have left."""
import os
import signal
import time

import hilock
from _example import redis_url


def worker(url, rounds):
    with hilock.Client(url) as c:
        barrier = c.barrier("stage", 3, ttl=5)
        for g in range(rounds):
            time.sleep(0.02 * (os.getpid() % 3))
            print(f"generation {g}: pid {os.getpid()} arrived as {barrier.wait(timeout=10)}")
        db = c.double_barrier("round", 3, ttl=5)
        with db.enter(timeout=10):
            print(f"pid {os.getpid()} inside")
        print(f"pid {os.getpid()}: all left")


def waiter(url):
    with hilock.Client(url) as c:
        try:
            c.barrier("doomed", 5, ttl=1.0).wait(timeout=60)
        except hilock.BrokenBarrier as e:
            print(f"pid {os.getpid()}: {e}")


def fork(fn, *args):
    pid = os.fork()
    if pid == 0:
        fn(*args)
        os._exit(0)
    return pid


with redis_url() as url, hilock.Client(url) as client:
    for pid in [fork(worker, url, 3) for _ in range(3)]:
        os.waitpid(pid, 0)
    doomed = client.barrier("doomed", 5, ttl=1.0)
    pids = [fork(waiter, url) for _ in range(4)]
    while doomed.n_waiting < 4:
        time.sleep(0.05)
    print(f"4 of 5 parties wait; pid {pids[0]} is killed (SIGKILL)")
    killed = time.monotonic()
    os.kill(pids[0], signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)
    print(f"the others ended {time.monotonic() - killed:.2f} s later; broken: {doomed.broken}")
    doomed.delete()
    client.barrier("stage", 3).delete()
