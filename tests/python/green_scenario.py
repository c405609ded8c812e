"""hilock under gevent or eventlet, in a process of its own (test_green.py
runs it with a timeout: the patching must not reach pytest's process, and
a thread the hub cannot leave must fail the test, not hang it).

    python green_scenario.py LIBRARY ORDER URL SCENARIO

LIBRARY: gevent or eventlet; ORDER: before or after (hilock imported
before or after the patching); SCENARIO: one of the functions below. The
last line printed is the JSON report.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

LIBRARY, ORDER, URL, SCENARIO = sys.argv[1:5]

if ORDER == "before":
    import hilock  # noqa: F401  (imported before the patching)

if LIBRARY == "gevent":
    from gevent import monkey
    monkey.patch_all()
    import gevent
    import gevent.event

    spawn = gevent.spawn
    sleep = gevent.sleep
    Event = gevent.event.Event
    Timeout = gevent.Timeout

    def join(greenlets: List[Any]) -> None:
        gevent.joinall(greenlets, raise_error=True)
else:
    import eventlet
    eventlet.monkey_patch()
    import eventlet.event

    spawn = eventlet.spawn
    sleep = eventlet.sleep
    Timeout = eventlet.Timeout  # type: ignore[misc]

    class Event:  # type: ignore[no-redef]
        def __init__(self) -> None:
            self._e = eventlet.event.Event()

        def set(self) -> None:
            if not self._e.ready():
                self._e.send(True)

        def wait(self) -> None:
            self._e.wait()

    def join(greenlets: List[Any]) -> None:
        for g in greenlets:
            g.wait()

import hilock  # noqa: E402

Events = List[Tuple[str, int]]


def overlaps(events: Events) -> int:
    """How often the enter/exit record shows two holders inside at once
    (an enter while someone is inside, or an exit of someone not inside)."""
    bad = 0
    inside = None
    for kind, i in events:
        if kind == "enter":
            bad += inside is not None
            inside = i
        else:
            bad += inside != i
            inside = None
    return bad


class Ticker:
    """A greenlet that sleeps 5 ms at a time and keeps the longest time it
    went without running: how long the hub was kept from its greenlets."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.stop = False
        self.g = spawn(self._run)

    def _run(self) -> None:
        last = time.monotonic()
        while not self.stop:
            sleep(0.005)
            now = time.monotonic()
            self.worst = max(self.worst, now - last)
            last = now

    def end(self) -> float:
        self.stop = True
        join([self.g])
        return self.worst


def run_contenders(n: int, make: Callable[[int], Any]) -> Events:
    """n greenlets, each taking make(i) in a with block that yields while
    inside; the enter/exit record."""
    events: Events = []

    def worker(i: int) -> None:
        with make(i):
            events.append(("enter", i))
            sleep(0.002)  # inside: let the others run into the lock
            events.append(("exit", i))

    join([spawn(worker, i) for i in range(n)])
    return events


class NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def contention(client: hilock.Client) -> Dict[str, Any]:
    """50 greenlets on one lock name, each with an object of its own, then
    50 on one shared object; a ticker runs meanwhile."""
    n = 50
    report: Dict[str, Any] = {"n": n}
    control = run_contenders(n, lambda i: NoLock())
    report["control_overlaps"] = overlaps(control)
    ticker = Ticker()
    own = run_contenders(n, lambda i: client.lock("green", ttl=30, timeout=60))
    report["waits"] = client.stats()["waits"]
    shared_lock = client.lock("green-shared", ttl=30, timeout=60)
    shared = run_contenders(n, lambda i: shared_lock)
    report["worst_gap"] = ticker.end()
    report["own_overlaps"], report["own_entered"] = overlaps(own), len(own) // 2
    report["shared_overlaps"], report["shared_entered"] = overlaps(shared), len(shared) // 2
    return report


def owners(client: hilock.Client) -> Dict[str, Any]:
    """Two greenlets of one thread on one reentrant lock object and one
    read-write lock: each greenlet is an owner."""
    report: Dict[str, Any] = {}
    rl = client.rlock("green-r", ttl=30)
    rw = client.rwlock("green-rw", ttl=30)
    a_holds, b_tried = Event(), Event()

    def a() -> None:
        rl.acquire()
        rl.acquire()  # re-entry: at once
        rw.read().acquire()
        report["a_count"] = rl.hold_count()
        a_holds.set()
        b_tried.wait()
        rw.read().release()
        rl.release()
        rl.release()

    def b() -> None:
        a_holds.wait()
        report["b_reenters"] = rl.acquire(blocking=False)
        report["b_count"] = rl.hold_count()
        report["b_writes"] = rw.write().acquire(blocking=False)
        report["b_times_out"] = not rl.acquire(timeout=0.2)
        b_tried.set()
        report["b_waited"] = rl.acquire(timeout=20)
        report["b_count_after"] = rl.hold_count()
        rl.release()

    join([spawn(a), spawn(b)])
    report["locked_after"] = rl.locked()
    return report


def interrupted(client: hilock.Client) -> Dict[str, Any]:
    """Greenlets waiting for a lock and for a semaphore, interrupted by the
    library's Timeout: the call raises once the wait has ended (the client
    has no waiter left), and the holder's release then goes to a new
    object (nothing was granted behind the interrupted call)."""
    report: Dict[str, Any] = {}
    for kind in ("lock", "semaphore"):
        def make(kind: str = kind) -> Any:
            if kind == "lock":
                return client.lock("green-t", ttl=30)
            return client.semaphore("green-s", 1, ttl=30)
        holder, waiter = make(), make()
        holder.acquire()
        try:
            with Timeout(0.2):
                waiter.acquire()
            report[kind + "_raised"] = False
        except Timeout:
            report[kind + "_raised"] = True
        report[kind + "_waiting_after"] = client.waiting
        holder.release()
        third = make()
        report[kind + "_third_acquired"] = third.acquire(timeout=20)
        third.release()
        report[kind + "_waiter_acquires_again"] = waiter.acquire(timeout=20)
        waiter.release()
    return report


def contended_wait(client: hilock.Client, name: str) -> bool:
    """One greenlet waits for a lock another object holds, until its
    release: whether it got it."""
    holder, waiter = client.lock(name, ttl=30), client.lock(name, ttl=30)
    holder.acquire()
    got: List[bool] = []
    g = spawn(lambda: got.append(waiter.acquire(timeout=20)))
    deadline = time.monotonic() + 20
    while client.waiting < 1 and time.monotonic() < deadline:
        sleep(0.005)  # until the waiter waits in hilock
    holder.release()
    join([g])
    if got and got[0]:
        waiter.release()
    return bool(got and got[0])


def forked(client: hilock.Client) -> Dict[str, Any]:
    """A wait in the parent, then fork(): a wait in the child works too
    (the parent's pool threads did not survive the fork)."""
    report: Dict[str, Any] = {"parent": contended_wait(client, "green-f")}
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            with hilock.Client(URL) as child_client:
                code = 0 if contended_wait(child_client, "green-f-child") else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20  # bounds a hung child, not a timing
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = -1
            break
        sleep(0.01)
    report["child_status"] = status
    return report


def lost(client: hilock.Client) -> Dict[str, Any]:
    """on_lost and log records under the patching: hilock's reader is a
    real OS thread."""
    report: Dict[str, Any] = {}
    calls: List[int] = []
    lk = client.lock("green-lost", ttl=1.5, on_lost=lambda lock: calls.append(
        threading.get_native_id()))
    lk.acquire()
    with hilock.Client(URL) as other:
        other.force_release("green-lost")
    deadline = time.monotonic() + 20
    while not calls and time.monotonic() < deadline:
        sleep(0.01)
    report["called"] = len(calls)
    report["real_thread"] = bool(calls) and calls[0] != threading.get_native_id()
    report["lost"] = lk.lost
    return report


def main() -> None:
    client = hilock.Client(URL)
    report: Dict[str, Any] = {"constructed": True}
    report.update(globals()[SCENARIO](client))
    client.close()
    report["closed"] = True
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
