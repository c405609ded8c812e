"""One workload process of the fault campaign.

``python3 worker.py --kind lock|fair_lock|sequential_lock|semaphore|rwlock|election|barrier
--url URL --name NAME --proc ID --history FILE [--store SOCKET] [--ttl S]
[--permits N] [--seed S] [--hold S]``

It takes the lock over and over until SIGTERM, and appends every step to its
history file, one JSON object a line::

    {"proc", "pid", "kind", "lock", "hold", "op", "type", "mono", "wall", ...}

``op``/``type``: ``acquire`` invoke/ok/fail (ok: fence, token, validity,
ticket, mode), ``sample`` info (``until``: the end of the validity as the
holder measured it: monotonic time read before ``lock.validity``),
``write`` ok/refused (the fenced store's answer, with the fence), ``lost``
info (the on_lost callback or the ``lost`` flag), ``release``
invoke/ok/fail (``error``: the exception's class). ``mono`` is
time.monotonic() (CLOCK_MONOTONIC, one clock for the whole machine),
``wall`` time.time().

Exclusive holders (lock, fair_lock, the write side of rwlock, an election's
leader) write to the
campaign's fenced store with their fence, and check their validity before
each write, as a careful application does.

A barrier's workers (``--permits``: its parties) wait at it over and over
instead: ``wait`` invoke, then ok (``index``), ``broken`` (the
BrokenBarrier's message; the worker then resets the barrier if it is
still broken) or fail (another error).

``--asyncio``: the same loop as one task of ``hilock.asyncio`` (the lock,
fair lock, sequential lock, reentrant lock, semaphore and read-write lock),
so that tasks and threads of other workers contend under the same faults.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import threading
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from store import StoreClient  # noqa: E402

import hilock  # noqa: E402


class Stop(BaseException):
    """SIGTERM: finish up (release what is held) and exit."""


class History:
    def __init__(self, path: str, proc: str, kind: str, lock: str) -> None:
        self.f = open(path, "a", buffering=1)
        self.mu = threading.Lock()
        self.base = {"proc": proc, "pid": os.getpid(), "kind": kind, "lock": lock}
        self.hold = 0

    def log(self, op: str, type_: str, **kw: Any) -> None:
        ev: Dict[str, Any] = dict(self.base, hold=self.hold, op=op, type=type_,
                                  mono=time.monotonic(), wall=time.time())
        ev.update(kw)
        with self.mu:
            self.f.write(json.dumps(ev) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", required=True,
                    choices=["lock", "rlock", "multi_lock", "fair_lock", "sequential_lock",
                             "semaphore", "rwlock", "redlock", "election", "barrier"])
    ap.add_argument("--url", required=True, action="append")
    ap.add_argument("--name", required=True)
    ap.add_argument("--proc", required=True)
    ap.add_argument("--history", required=True)
    ap.add_argument("--store")
    ap.add_argument("--ttl", type=float, default=1.5)
    ap.add_argument("--permits", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hold", type=float, default=0.8, help="longest hold, seconds")
    ap.add_argument("--wait-replicas", type=int, default=0)
    ap.add_argument("--wait", type=float, default=8.0, help="acquire timeout, seconds")
    ap.add_argument("--asyncio", action="store_true", help="one task of hilock.asyncio")
    a = ap.parse_args()

    rng = random.Random(f"{a.seed}:{a.proc}")
    h = History(a.history, a.proc, a.kind, a.name)
    store = StoreClient(a.store, a.proc) if a.store else None
    if a.asyncio:
        return asyncio.run(amain(a, rng, h, store))

    def on_lost(_lk: Any) -> None:
        h.log("lost", "info", source="callback")

    def stop(*_: Any) -> None:
        raise Stop()

    signal.signal(signal.SIGTERM, stop)
    client: Optional[hilock.Client] = None
    try:
        opts: Dict[str, Any] = dict(connect_timeout=1.0, command_timeout=1.0, reconnect=1.0)
        if a.wait_replicas:
            opts.update(wait_replicas=a.wait_replicas, wait_timeout=0.5)
        if a.kind != "redlock":
            client = hilock.Client(a.url[0], **opts)
        if a.kind == "barrier":
            return barrier_loop(a, h, client, rng)
        def make() -> Tuple[Any, Any, Any]:
            c: Any = client
            if a.kind == "rwlock":
                return None, c.rwlock(a.name, ttl=a.ttl, on_lost=on_lost), None
            if a.kind == "semaphore":
                return None, None, c.semaphore(a.name, a.permits, ttl=a.ttl, on_lost=on_lost)
            if a.kind == "lock":
                return c.lock(a.name, ttl=a.ttl, on_lost=on_lost), None, None
            if a.kind == "fair_lock":
                return c.fair_lock(a.name, ttl=a.ttl, on_lost=on_lost), None, None
            if a.kind == "sequential_lock":
                return c.sequential_lock(a.name, ttl=a.ttl, on_lost=on_lost), None, None
            if a.kind == "rlock":
                return c.rlock(a.name, ttl=a.ttl, on_lost=on_lost), None, None
            if a.kind == "election":
                # A campaign with an empty value: the lead is the hold.
                return c.election(a.name, ttl=a.ttl, on_lost=on_lost), None, None
            if a.kind == "multi_lock":
                # Every worker of the run locks the same names: one
                # exclusive resource for the checker, written under the
                # first name's fence.
                return c.multi_lock(multi_names(a.name), ttl=a.ttl, on_lost=on_lost), None, None
            # node_timeout: ttl/10 rather than the default 50 ms, which a
            # loaded 2-core machine misses on every node at once.
            return hilock.Redlock(a.url, a.name, ttl=a.ttl, on_lost=on_lost,
                                  node_timeout=a.ttl / 10), None, None

        lk, rw, sem = make()
        h.log("start", "info", ttl=a.ttl, permits=a.permits)
        while True:
            mode = None
            cur: Any = lk
            if rw is not None:
                mode = "write" if rng.random() < 0.35 else "read"
                cur = rw.write() if mode == "write" else rw.read()
            elif sem is not None:
                cur = sem
            h.hold += 1
            h.log("acquire", "invoke", mode=mode)
            try:
                got = cur.acquire(timeout=a.wait)
            except Stop:
                raise
            except hilock.LockError as e:
                h.log("acquire", "fail", error=type(e).__name__, msg=str(e)[:200])
                time.sleep(rng.uniform(0.05, 0.3))
                continue
            if not got:
                h.log("acquire", "fail", error="timeout")
                continue
            fence = cur.fence if mode != "read" and a.kind != "semaphore" else None
            if isinstance(fence, dict):  # the multi-key lock: one per name
                fence = fence[multi_names(a.name)[0]]
            token = getattr(cur, "token", None) or getattr(cur, "permit_id", None)
            # The place in the queue: the fair lock's ticket, the sequential
            # lock's sequence number.
            ticket = (cur.ticket if a.kind == "fair_lock" else
                      cur.sequence if a.kind == "sequential_lock" else None)
            h.log("acquire", "ok", fence=fence, token=token, ticket=ticket, mode=mode,
                  validity=cur.validity)
            try:
                hold(h, cur, rng, a, store, fence)
            finally:
                if not release(h, cur, rng):
                    lk, rw, sem = make()  # give the stuck grant up: it lapses
            time.sleep(rng.uniform(0.0, 0.15))
    except Stop:
        h.log("stop", "info")
        return 0
    finally:
        if client is not None:
            client.close()


async def amain(a: argparse.Namespace, rng: random.Random, h: History,
                store: Optional[StoreClient]) -> int:
    """main() as one task of hilock.asyncio; SIGTERM cancels it, and what
    it holds is released on the way out."""
    import hilock.asyncio as hla

    me = asyncio.current_task()
    assert me is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, me.cancel)
    opts: Dict[str, Any] = dict(connect_timeout=1.0, command_timeout=1.0, reconnect=1.0)
    if a.wait_replicas:
        opts.update(wait_replicas=a.wait_replicas, wait_timeout=0.5)
    client = hla.Client(a.url[0], **opts)

    def make() -> Any:
        if a.kind == "semaphore":
            return client.semaphore(a.name, a.permits, ttl=a.ttl)
        return getattr(client, a.kind)(a.name, ttl=a.ttl)

    lk = make()
    h.log("start", "info", ttl=a.ttl, permits=a.permits, asyncio=True)
    try:
        while True:
            mode = None
            cur = lk
            if a.kind == "rwlock":
                mode = "write" if rng.random() < 0.35 else "read"
                cur = lk.write() if mode == "write" else lk.read()
            h.hold += 1
            h.log("acquire", "invoke", mode=mode)
            try:
                got = await cur.acquire(timeout=a.wait)
            except hilock.LockError as e:
                h.log("acquire", "fail", error=type(e).__name__, msg=str(e)[:200])
                await asyncio.sleep(rng.uniform(0.05, 0.3))
                continue
            if not got:
                h.log("acquire", "fail", error="timeout")
                continue
            fence = cur.fence if mode != "read" and a.kind != "semaphore" else None
            ticket = (cur.ticket if a.kind == "fair_lock" else
                      cur.sequence if a.kind == "sequential_lock" else None)
            h.log("acquire", "ok", fence=fence, token=getattr(cur, "token", None),
                  ticket=ticket, mode=mode, validity=cur.validity)
            try:
                await ahold(h, cur, rng, a, store, fence)
            finally:
                if not await arelease(h, cur, rng):
                    lk = make()  # give the stuck grant up: it lapses
            await asyncio.sleep(rng.uniform(0.0, 0.15))
    except asyncio.CancelledError:
        h.log("stop", "info")
        return 0
    finally:
        await client.close()


async def arelease(h: History, cur: Any, rng: random.Random) -> bool:
    """release(), awaited."""
    h.log("release", "invoke")
    deadline = time.monotonic() + 30
    while True:
        done = released(h, await afailure(cur.release), deadline)
        if done is not None:
            return done
        await asyncio.sleep(rng.uniform(0.05, 0.2))


async def ahold(h: History, cur: Any, rng: random.Random, a: argparse.Namespace,
                store: Optional[StoreClient], fence: Optional[int]) -> None:
    """hold(), on the loop: the store is written from a thread of its
    executor (its client blocks)."""
    end = hold_begin(h, cur, rng, a)
    while hold_on(h, cur):
        if a.kind == "rlock" and rng.random() < 0.3:
            try:
                got = await cur.acquire(blocking=False)
            except hilock.LockError as e:
                got = reentered(h, e)
            else:
                if reentered(h, got):
                    try:
                        await cur.release()
                    except hilock.LockError as e:
                        reentered_release(h, e)
        if store is not None and fence is not None:
            if not written(h, fence, await asyncio.to_thread(store_write, store, a.name, fence)):
                return
        wait = pause(end, rng)
        if wait <= 0:
            return
        await asyncio.sleep(wait)


def barrier_loop(a: argparse.Namespace, h: History, client: Any, rng: random.Random) -> int:
    """Wait at the barrier until SIGTERM (Stop, raised by main's caller)."""
    barrier = client.barrier(a.name, a.permits, ttl=a.ttl)
    h.log("start", "info", ttl=a.ttl, permits=a.permits)
    while True:
        h.hold += 1
        h.log("wait", "invoke")
        try:
            index = barrier.wait(timeout=a.wait)
        except hilock.BrokenBarrier as e:
            h.log("wait", "broken", msg=str(e)[:200])
            time.sleep(rng.uniform(0.05, 0.3))
            try:
                if barrier.broken:
                    barrier.reset()
            except hilock.LockError as e2:
                h.log("reset", "fail", error=type(e2).__name__, msg=str(e2)[:200])
            continue
        except hilock.LockError as e:
            h.log("wait", "fail", error=type(e).__name__, msg=str(e)[:200])
            time.sleep(rng.uniform(0.05, 0.3))
            continue
        h.log("wait", "ok", index=index)
        time.sleep(rng.uniform(0.0, 0.1))


def multi_names(name: str) -> List[str]:
    return [f"{name}:a", f"{name}:b", f"{name}:c"]


def reentered(h: History, got: Any) -> bool:
    """Log a re-entry's outcome (True, False or the exception): True when
    it is held once more (to be released)."""
    if isinstance(got, BaseException):
        h.log("reenter", "fail", error=type(got).__name__, msg=str(got)[:200])
        return False
    h.log("reenter", "ok" if got else "fail")
    return bool(got)


def reentered_release(h: History, e: BaseException) -> None:
    h.log("reenter_release", "fail", error=type(e).__name__, msg=str(e)[:200])


def reenter(h: History, cur: Any) -> None:
    """The reentrant lock, held: take it again and give the inner level
    back, as nested code would. A lost lock is not re-entered."""
    try:
        got = cur.acquire(blocking=False)
    except hilock.LockError as e:
        got = e
    if reentered(h, got):
        try:
            cur.release()
        except hilock.LockError as e:
            reentered_release(h, e)


def failure(call: Callable[[], Any]) -> Optional[hilock.LockError]:
    """What call() raised (a hilock error), or None when it returned."""
    try:
        call()
    except hilock.LockError as e:
        return e
    return None


async def afailure(call: Callable[[], Awaitable[Any]]) -> Optional[hilock.LockError]:
    """failure(), awaited."""
    try:
        await call()
    except hilock.LockError as e:
        return e
    return None


def released(h: History, e: Optional[BaseException], deadline: float) -> Optional[bool]:
    """A release attempt's outcome (e: what it raised, None when it
    returned): None to try again (the outcome is unknown: the server
    unreachable or the reply lost, and the deadline not passed), else what
    release() returns."""
    if e is None:
        h.log("release", "ok")
        return True
    if isinstance(e, (hilock.ConnectionError, hilock.RedisError)):
        if time.monotonic() > deadline:
            h.log("release", "fail", error=type(e).__name__, msg=str(e)[:200])
            return False
        h.log("release", "retry", error=type(e).__name__, msg=str(e)[:200])
        return None
    h.log("release", "fail", error=type(e).__name__, msg=str(e)[:200])
    return True


def release(h: History, cur: Any, rng: random.Random) -> bool:
    """Release; an unknown outcome (the server unreachable or the reply
    lost) keeps the grant in the object, so retry, as an application must,
    until the server answers: released, or not the owner any more."""
    h.log("release", "invoke")
    deadline = time.monotonic() + 30
    while True:
        done = released(h, failure(cur.release), deadline)
        if done is not None:
            return done
        time.sleep(rng.uniform(0.05, 0.2))


def sample(h: History, cur: Any) -> float:
    t = time.monotonic()
    v = cur.validity
    if 0 < v < float("inf"):
        h.log("sample", "info", until=t + v)
    return v


def hold_begin(h: History, cur: Any, rng: random.Random, a: argparse.Namespace) -> float:
    """A hold begins: its first sample; returns when it is to end."""
    sample(h, cur)
    return time.monotonic() + rng.uniform(0.02, a.hold)


def hold_on(h: History, cur: Any) -> bool:
    """Whether to act on the hold now: not lost, and enough validity left
    to act safely."""
    if cur.lost:
        h.log("lost", "info", source="flag")
        return False
    return sample(h, cur) > 0.05


def store_write(store: StoreClient, name: str, fence: int) -> Any:
    """store.write(name, fence): the store's answer, or the OSError it
    raised."""
    try:
        return store.write(name, fence)
    except OSError as e:
        return e


def pause(end: float, rng: random.Random) -> float:
    """How long to wait before acting on the hold again; 0 when the hold is
    to end."""
    left = end - time.monotonic()
    return min(left, rng.uniform(0.05, 0.2)) if left > 0 else 0.0


def written(h: History, fence: int, ok: Any) -> bool:
    """Log a store write's outcome (True, False or the OSError): False when
    the store refused the fence (the hold is over)."""
    if isinstance(ok, OSError):
        h.log("write", "fail", fence=fence, error=type(ok).__name__)
        return True
    h.log("write", "ok" if ok else "refused", fence=fence)
    return bool(ok)


def hold(h: History, cur: Any, rng: random.Random, a: argparse.Namespace,
         store: Optional[StoreClient], fence: Optional[int]) -> None:
    end = hold_begin(h, cur, rng, a)
    while hold_on(h, cur):
        if a.kind == "rlock" and rng.random() < 0.3:
            reenter(h, cur)
        if store is not None and fence is not None:
            if not written(h, fence, store_write(store, a.name, fence)):
                return
        wait = pause(end, rng)
        if wait <= 0:
            return
        time.sleep(wait)


if __name__ == "__main__":
    raise SystemExit(main())
