"""Leader election: one leader at a time, with a value others can watch.

Three candidate processes campaign for "scheduler" with their host names as
values while this process observes every change of leader. The first
leader is killed with SIGKILL while it leads: a standby leads within the
lead's ttl (1 s) with a higher fence, and the others follow as each
resigns."""
import os
import signal
import threading
import time

import hilock
from _example import redis_url

NAME = "scheduler"


def candidate(url, me, w):
    with hilock.Client(url) as c:
        with c.election(NAME, ttl=1.0).campaign(me, timeout=30) as lead:
            os.write(w, f"{lead.fence}\n".encode())
            time.sleep(0.3)
            lead.proclaim(f"{me}:9090")
            time.sleep(0.3)


with redis_url() as url, hilock.Client(url) as client:
    election = client.election(NAME)

    def observe():
        for value, fence in election.observe(timeout=3):
            print(f"  observer: {value} leads (fence {fence})")

    watcher = threading.Thread(target=observe)
    watcher.start()
    r, w = os.pipe()
    pids = []
    for host in ("host-a", "host-b", "host-c"):
        pid = os.fork()
        if pid == 0:
            candidate(url, host, w)
            os._exit(0)
        pids.append(pid)
    os.read(r, 64)  # the first lead began
    value, fence = election.leader()
    print(f"{value} leads: its process is killed (SIGKILL), without resigning")
    killed = time.monotonic()
    os.kill(pids[["host-a", "host-b", "host-c"].index(value.split(":")[0])], signal.SIGKILL)
    while (cur := election.leader()) is None or cur[1] == fence:
        time.sleep(0.05)
    print(f"{cur[0]} leads {time.monotonic() - killed:.2f} s later, fence {cur[1]} > {fence}")
    for pid in pids:
        os.waitpid(pid, 0)
    watcher.join()
