#!/usr/bin/env python3
"""Lock handoff latency and contended throughput: hilock against Python locks.

Against one private redis-server on loopback:

  unit        p50 of one PING round trip, from redis-py and from hiredis (C);
              also hiredis with the server pinned, from the server's CPU and
              from another (on a VM a cross-CPU wake-up can cost several
              times a same-CPU round trip)
  handoff     a waiter process is blocked in acquire() while a holder process
              holds the lock; the holder releases. The handoff is the time
              from release() returning in the holder to acquire() returning
              in the waiter, both stamped on CLOCK_MONOTONIC (system-wide,
              so comparable across processes). Per sample the holder
              acquires, tells the waiter, which answers "started" and calls
              acquire(); the holder then sleeps 5-20 ms, so that the waiter
              is really blocked, and releases. The waiter may return first:
              the release reply still has to reach the holder.
  contention  8 worker processes loop { acquire; hold 1 ms (spinning on the
              monotonic clock); release } on one lock for 4 s. fairness is
              the fewest acquisitions of a worker / the mean.

Floors, same processes and timing with raw hiredis and no lock
(bench_handoff wake): the holder sends PING plus a script that RPUSHes
(BLPOP) or PUBLISHes (pub/sub); the waiter, blocked in BLPOP or reading its
subscription, makes one more script round trip, as a woken waiter's attempt
does. They are what each wake-up mechanism costs on this server and machine.

Contestants: hilock C (bench_handoff, fork()ed processes: as configured by
default, where the lone waiter waits direct in BLPOP; with every waiter in the
shared waiting, direct_waiters=0; with one BLPOP per waiter, shared_waiting=0),
hilock Python,
redis-py Lock (retries every 0.1 s, its default sleep, so its handoff is
about 0.1 s less the holder's sleep), python-redis-lock (BLPOP wake-ups),
and hilock Python's fair lock and 1-permit semaphore.
This is a benchmark, not a test: nothing here asserts on timing.

    python3 tests/bench/handoff.py [--quick] [--samples 250] [--seconds 4]
        [--workers 8] [--json out.json]
        [--bench-binary build/tests/bench/bench_handoff]
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (  # noqa: E402
    Skip,
    find_binary,
    load_redis_server,
    machine,
    require,
    versions_of,
    write_json,
)

WARMUP = 10      # handoff samples dropped at the start
TTL = 10         # seconds, every contestant
HOLD_S = 0.001   # contention: time held per acquisition
CTX = mp.get_context("fork")

Pair = Tuple[Callable[[], Any], Callable[[], Any]]  # (acquire, release)


def pct(xs: List[float], p: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


# -- lock makers (called in the child process, after fork) ----------------

def make_hilock(url: str, name: str) -> Pair:
    import hilock
    lk = hilock.Client(url).lock(name, ttl=TTL, auto_renew=False)
    return lk.acquire, lk.release


def make_hilock_fair(url: str, name: str) -> Pair:
    import hilock
    lk = hilock.Client(url).fair_lock(name, ttl=TTL, auto_renew=False)
    return lk.acquire, lk.release


def make_hilock_seqlock(url: str, name: str) -> Pair:
    import hilock
    lk = hilock.Client(url).sequential_lock(name, ttl=TTL, auto_renew=False)
    return lk.acquire, lk.release


def make_hilock_semaphore(url: str, name: str) -> Pair:
    import hilock
    sem = hilock.Client(url).semaphore(name, 1, ttl=TTL, auto_renew=False)
    return sem.acquire, sem.release


def make_redis_py(url: str, name: str) -> Pair:
    import redis
    lk = redis.Redis.from_url(url).lock(name, timeout=TTL)
    return lk.acquire, lk.release


def make_python_redis_lock(url: str, name: str) -> Pair:
    import redis
    import redis_lock
    lk = redis_lock.Lock(redis.Redis.from_url(url), name, expire=TTL)
    return lk.acquire, lk.release


# -- child processes --------------------------------------------------------

def child(body: Callable[..., Any], out: Any, others: List[Any], *args: Any) -> None:
    """Run body(*args) and send ("ok", result) or ("error", text) to out.
    others: inherited pipe ends of other processes, closed first, so that a
    peer's exit is seen as EOF."""
    for c in others:
        c.close()
    try:
        out.send(("ok", body(*args)))
    except BaseException as e:
        out.send(("error", f"{type(e).__name__}: {e}"))
        raise SystemExit(1)


def holder(make: Callable[[str, str], Pair], url: str, name: str, n: int, w: Any) -> List[float]:
    acquire, release = make(url, name)
    rnd = random.Random(os.getpid())
    t0 = []
    for _ in range(n):
        if not acquire():
            raise RuntimeError("holder: acquire not granted")
        w.send_bytes(b"H")
        if w.recv_bytes() != b"S":
            raise RuntimeError("holder: protocol")
        time.sleep(rnd.uniform(0.005, 0.020))
        release()
        t0.append(time.monotonic())
        if w.recv_bytes() != b"R":
            raise RuntimeError("holder: protocol")
    return t0


def waiter(make: Callable[[str, str], Pair], url: str, name: str, n: int,
           h: Any) -> Tuple[List[float], float]:
    """acquire() return times, and the shortest time spent blocked in it."""
    acquire, release = make(url, name)
    t1 = []
    min_wait = float("inf")
    for _ in range(n):
        if h.recv_bytes() != b"H":
            raise RuntimeError("waiter: protocol")
        h.send_bytes(b"S")
        t = time.monotonic()
        if not acquire():
            raise RuntimeError("waiter: acquire not granted")
        t1.append(time.monotonic())
        if len(t1) > WARMUP:
            min_wait = min(min_wait, t1[-1] - t)
        release()
        h.send_bytes(b"R")
    return t1, min_wait


def worker(make: Callable[[str, str], Pair], url: str, name: str, ctl: Any) -> int:
    acquire, release = make(url, name)
    ctl.send("ready")
    start, end = ctl.recv()
    time.sleep(max(0.0, start - time.monotonic()))
    n = 0
    while True:
        if not acquire():
            raise RuntimeError("worker: acquire not granted")
        t = time.monotonic()
        if t >= end:
            release()
            return n
        n += 1
        until = t + HOLD_S
        while time.monotonic() < until:
            pass
        release()


def launch(procs: List[Any], theirs: List[Any]) -> None:
    """Start the children, then close the parent's copies of their pipe ends."""
    sys.stdout.flush()  # or a child could write buffered output again
    for p in procs:
        p.start()
    for c in theirs:
        c.close()


def but(conns: List[Any], *mine: Any) -> List[Any]:
    return [c for c in conns if all(c is not m for m in mine)]


def collect(procs: List[Any], outs: List[Any], timeout: float) -> List[Any]:
    """Each child's result; kills them all if one fails or is late."""
    results = []
    deadline = time.monotonic() + timeout
    try:
        for out in outs:
            if not out.poll(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"no result within {timeout:.0f} s")
            try:
                status, value = out.recv()
            except EOFError:
                raise RuntimeError("a child exited without a result") from None
            if status != "ok":
                raise RuntimeError(value)
            results.append(value)
    finally:
        for p in procs:
            if len(results) < len(outs):
                p.kill()
            p.join()
    return results


def py_handoff(make: Callable[[str, str], Pair], url: str, name: str, samples: int,
               timeout: float) -> Tuple[List[float], float]:
    n = samples + WARMUP
    h, w = CTX.Pipe()  # holder <-> waiter
    (r1, s1), (r2, s2) = CTX.Pipe(duplex=False), CTX.Pipe(duplex=False)  # results
    every = [h, w, r1, s1, r2, s2]
    procs = [CTX.Process(target=child, args=(holder, s1, but(every, w, s1), make, url, name,
                                             n, w)),
             CTX.Process(target=child, args=(waiter, s2, but(every, h, s2), make, url, name,
                                             n, h))]
    launch(procs, [h, w, s1, s2])
    t0, (t1, min_wait) = collect(procs, [r1, r2], timeout)
    return [(b - a) * 1e6 for a, b in zip(t0[WARMUP:], t1[WARMUP:])], min_wait * 1e6


def py_contend(make: Callable[[str, str], Pair], url: str, name: str, workers: int,
               seconds: float) -> List[int]:
    # One pipe per worker: "ready", then (start, end), then the result.
    pipes = [CTX.Pipe() for _ in range(workers)]
    every = [c for pipe in pipes for c in pipe]
    procs = [CTX.Process(target=child, args=(worker, b, but(every, b), make, url, name, b))
             for _, b in pipes]
    conns = [a for a, _ in pipes]
    launch(procs, [b for _, b in pipes])
    try:
        for c in conns:
            msg = c.recv() if c.poll(30) else None
            if msg != "ready":
                raise RuntimeError(msg[1] if isinstance(msg, tuple) else "a worker did not start")
    except (EOFError, RuntimeError) as e:
        for p in procs:
            p.kill()
            p.join()
        raise RuntimeError(str(e) or "a worker exited") from None
    t0 = time.monotonic() + 0.05  # every worker is connected: start together
    for c in conns:
        c.send((t0, t0 + seconds))
    return collect(procs, conns, seconds + 60)


def run_c(binary: Optional[Path], *args: Any, timeout: float = 120,
          cpu: Optional[int] = None, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    if binary is None:
        raise Skip("skipped (bench_handoff not built: cmake --build <dir> --target "
                   "bench_handoff, or pass --bench-binary)")
    pin = None if cpu is None else lambda: os.sched_setaffinity(0, {cpu})
    proc = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=pin,
                          env={**os.environ, **env} if env else None)
    if proc.returncode != 0:
        raise RuntimeError(f"bench_handoff {args[0]} exited {proc.returncode}: "
                           f"{proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- contestants ------------------------------------------------------------

class Contestant:
    def __init__(self, key: str, label: str, make: Optional[Callable[[str, str], Pair]],
                 modules: Tuple[str, ...] = (), wake: Optional[str] = None,
                 env: Optional[Dict[str, str]] = None) -> None:
        self.key = key
        self.label = label
        self.make = make
        self.modules = modules
        self.wake = wake  # a floor (bench_handoff wake): no lock, no contention run
        self.env = env
        self.handoff_us: List[float] = []
        self.min_wait_us = 0.0
        self.counts: List[int] = []
        self.seconds = 0.0
        self.skipped: Optional[str] = None

    def handoff(self, url: str, binary: Optional[Path], samples: int) -> None:
        if self.make is None:
            how = ("wake", self.wake) if self.wake else ("handoff",)
            out = run_c(binary, *how, url, samples, env=self.env)
            self.handoff_us, self.min_wait_us = out["us"], out["min_wait_us"]
        else:
            require(*self.modules)
            self.handoff_us, self.min_wait_us = py_handoff(self.make, url, f"handoff:{self.key}", samples,
                                         timeout=samples * 0.3 + 30)

    def contend(self, url: str, binary: Optional[Path], workers: int, seconds: float) -> None:
        if self.wake:
            return
        if self.make is None:
            self.counts = run_c(binary, "contend", url, workers, seconds,
                                timeout=seconds + 60, env=self.env)["counts"]
        else:
            require(*self.modules)
            self.counts = py_contend(self.make, url, f"contend:{self.key}", workers, seconds)
        self.seconds = seconds

    @property
    def p50(self) -> Optional[float]:
        return statistics.median(self.handoff_us) if self.handoff_us else None

    @property
    def p99(self) -> Optional[float]:
        return pct(self.handoff_us, 99) if self.handoff_us else None

    @property
    def rate(self) -> Optional[float]:
        return sum(self.counts) / self.seconds if self.counts else None

    @property
    def fairness(self) -> Optional[float]:
        if not self.counts or not sum(self.counts):
            return None
        return min(self.counts) / statistics.mean(self.counts)


# -- report -----------------------------------------------------------------

def handoff_table(cs: List[Contestant], ping_c: Optional[float], ping_py: float) -> str:
    rows = ["| contestant | samples | p50 µs | p99 µs | max µs | p50 ÷ hiredis PING "
            "| p50 ÷ redis-py PING | waiter blocked ≥ |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in cs:
        if c.p50 is None:
            rows.append(f"| {c.label} | {c.skipped or 'no result'} | | | | | | |")
            continue
        in_c = f"{c.p50 / ping_c:,.1f}" if ping_c else "n/a"
        rows.append(f"| {c.label} | {len(c.handoff_us)} | {c.p50:,.0f} | {c.p99:,.0f} | "
                    f"{max(c.handoff_us):,.0f} | {in_c} | {c.p50 / ping_py:,.1f} | "
                    f"{c.min_wait_us / 1e3:.1f} ms |")
    return "\n".join(rows)


def contend_table(cs: List[Contestant]) -> str:
    rows = ["| contestant | acquisitions/s | lock busy | per worker | fairness |",
            "|---|---:|---:|---|---:|"]
    for c in cs:
        if c.wake:
            continue  # a floor has no lock to contend for
        if c.rate is None:
            rows.append(f"| {c.label} | {c.skipped or 'no result'} | | | |")
            continue
        fair = f"{c.fairness:.2f}" if c.fairness is not None else "n/a"
        rows.append(f"| {c.label} | {c.rate:,.0f} | {c.rate * HOLD_S:.0%} | "
                    f"{' '.join(map(str, c.counts))} | {fair} |")
    return "\n".join(rows)


def f(v: Optional[float], spec: str) -> str:
    return format(v, spec) if v is not None else "n/a"


def redis_py_pings(url: str, count: int) -> List[float]:
    import redis
    r = redis.Redis.from_url(url)
    us = []
    for i in range(count + 200):  # 200 warm-up round trips
        t0 = time.perf_counter_ns()
        r.ping()
        t1 = time.perf_counter_ns()
        if i >= 200:
            us.append((t1 - t0) / 1e3)
    r.close()
    return us


def placement_pings(binary: Path, url: str, server_pid: int,
                    count: int) -> Optional[Tuple[float, float]]:
    """hiredis PING p50 with the server pinned to one CPU and the client on
    that CPU, then on another one (None with fewer than 2 CPUs)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    saved = os.sched_getaffinity(server_pid)
    try:
        os.sched_setaffinity(server_pid, {cpus[0]})
        same, other = (statistics.median(run_c(binary, "ping", url, count, cpu=cpu)["us"])
                       for cpu in cpus[:2])
        return same, other
    finally:
        os.sched_setaffinity(server_pid, saved)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, help="handoff samples per contestant (default 250)")
    ap.add_argument("--seconds", type=float, help="contention run per contestant (default 4)")
    ap.add_argument("--workers", type=int, default=8, help="contending processes (default 8)")
    ap.add_argument("--quick", action="store_true", help="a short run: 40 samples, 1 s")
    ap.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    ap.add_argument("--bench-binary", metavar="PATH",
                    help="bench_handoff (default: looked for under build*/tests/bench/)")
    ap.add_argument("--only", metavar="KEYS",
                    help="run only these contestants (comma-separated keys, e.g. "
                         "hilock_py,hilock_py_seq); the others are reported as skipped")
    args = ap.parse_args()
    samples = args.samples or (40 if args.quick else 250)
    seconds = args.seconds or (1.0 if args.quick else 4.0)
    pings = 500 if args.quick else 2000
    if samples < 1 or seconds <= 0 or not 1 <= args.workers <= 64:
        ap.error("--samples must be >= 1, --seconds > 0, --workers in 1..64")

    binary = find_binary("bench_handoff", args.bench_binary)
    cs = [
        Contestant("wake_blpop", "floor: raw hiredis, BLPOP wake-up + 1 round trip", None,
                   wake="blpop"),
        Contestant("wake_pubsub", "floor: raw hiredis, pub/sub wake-up + 1 round trip", None,
                   wake="pubsub"),
        Contestant("hilock_c", "hilock C", None),
        Contestant("hilock_c_shared", "hilock C, shared waiting only (direct_waiters=0)", None,
                   env={"HILOCK_BENCH_WAITING": "shared"}),
        Contestant("hilock_c_blpop", "hilock C, one BLPOP per waiter (shared_waiting=0)", None,
                   env={"HILOCK_BENCH_WAITING": "blpop"}),
        Contestant("hilock_py", "hilock Python", make_hilock, ("hilock",)),
        Contestant("hilock_py_fair", "hilock Python fair lock", make_hilock_fair, ("hilock",)),
        Contestant("hilock_py_seq", "hilock Python sequential lock", make_hilock_seqlock,
                   ("hilock",)),
        Contestant("redis_py", "redis-py Lock (sleep 0.1 s)", make_redis_py, ("redis",)),
        Contestant("python_redis_lock", "python-redis-lock", make_python_redis_lock,
                   ("redis", "redis_lock")),
        Contestant("hilock_sem_py", "hilock Python semaphore, 1 permit", make_hilock_semaphore,
                   ("hilock",)),
    ]
    if args.only:
        keep = set(args.only.split(","))
        for c in cs:
            if c.key not in keep:
                c.skipped = "not selected (--only)"
    t_start = time.monotonic()
    RedisServer = load_redis_server()
    with RedisServer() as srv:
        url = srv.url
        import redis
        server_version = redis.Redis.from_url(url).info("server")["redis_version"]
        print(f"redis-server {server_version} on {url}; bench_handoff: {binary}",
              file=sys.stderr)
        ping_py = statistics.median(redis_py_pings(url, pings))
        ping_c = statistics.median(run_c(binary, "ping", url, pings)["us"]) if binary else None
        placed = placement_pings(binary, url, srv.pid, pings) if binary else None
        for c in cs:
            if c.skipped:
                continue
            try:
                c.handoff(url, binary, samples)
                print(f"handoff {c.label}: p50 {c.p50:,.0f} µs", file=sys.stderr)
            except (Skip, RuntimeError, subprocess.TimeoutExpired) as e:
                c.skipped = str(e) if isinstance(e, Skip) else f"failed: {e}"
                print(f"handoff {c.label}: {c.skipped}", file=sys.stderr)
        for c in cs:
            if c.skipped or c.wake:
                continue
            try:
                c.contend(url, binary, args.workers, seconds)
                print(f"contention {c.label}: {c.rate:,.0f}/s", file=sys.stderr)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                c.skipped = f"failed: {e}"
                print(f"contention {c.label}: {c.skipped}", file=sys.stderr)
    elapsed = time.monotonic() - t_start

    print(f"\nredis-server {server_version} on loopback, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; {elapsed:.0f} s in all.\n")
    print(f"Unit: PING round trip p50 = {f(ping_c, '.1f')} µs from hiredis (C), "
          f"{ping_py:.1f} µs from redis-py (unpinned).")
    if placed:
        print(f"hiredis PING with the server pinned: {placed[0]:.1f} µs from its CPU, "
              f"{placed[1]:.1f} µs from another (a cross-CPU wake-up can dominate a round "
              f"trip, so the unit depends on where the scheduler puts each process).")
    print()
    print(f"Handoff: holder's release() returning -> blocked waiter's acquire() returning "
          f"({samples} samples after {WARMUP} warm-up; holder sleeps 5-20 ms first; "
          f"waiter blocked ≥: the shortest time a waiter spent in acquire()).\n")
    print(handoff_table(cs, ping_c, ping_py))
    print(f"\nContention: {args.workers} processes loop {{acquire; spin {HOLD_S * 1e3:g} ms; "
          f"release}} on one lock for {seconds:g} s; lock busy = acquisitions x hold time; "
          f"fairness = fewest / mean.\n")
    print(contend_table(cs))

    by = {c.key: c for c in cs}
    hp, hc, rp = by["hilock_py"], by["hilock_c"], by["redis_py"]
    summary: Dict[str, Optional[float]] = {
        "hilock_py_vs_redis_py_p50": rp.p50 / hp.p50 if hp.p50 and rp.p50 else None,
        "hilock_c_p50_rtt": hc.p50 / ping_c if hc.p50 and ping_c else None,
        "hilock_py_p50_rtt": hp.p50 / ping_c if hp.p50 and ping_c else None,
        "hilock_c_p99_ms": hc.p99 / 1e3 if hc.p99 is not None else None,
        "hilock_py_p99_ms": hp.p99 / 1e3 if hp.p99 is not None else None,
    }
    for c in cs:
        summary[f"{c.key}_fairness"] = c.fairness

    print("\nSummary:")
    print(f"- hilock Python handoff p50 is {f(summary['hilock_py_vs_redis_py_p50'], '.0f')} "
          f"times lower than redis-py's ({f(hp.p50, ',.0f')} µs vs {f(rp.p50, ',.0f')} µs).")
    print(f"- hilock handoff p50 in PING round trips (hiredis): C "
          f"{f(summary['hilock_c_p50_rtt'], '.1f')}, Python "
          f"{f(summary['hilock_py_p50_rtt'], '.1f')}"
          + (f"; {hc.p50 / placed[1]:.1f} and {hp.p50 / placed[1]:.1f} of a cross-CPU "
             f"PING ({placed[1]:.1f} µs)" if placed and hc.p50 and hp.p50 else "") + ".")
    print(f"- hilock handoff p99: C {f(summary['hilock_c_p99_ms'], '.2f')} ms, Python "
          f"{f(summary['hilock_py_p99_ms'], '.2f')} ms.")
    fb, fp, hb = by["wake_blpop"], by["wake_pubsub"], by["hilock_c_blpop"]
    # The lone waiter of the default waits in BLPOP; shared waiting reads
    # pub/sub.
    for mine, floor in ((hc, fb), (by["hilock_c_shared"], fp), (hb, fb)):
        if mine.p50 and floor.p50 and mine.p99 and floor.p99:
            summary[f"{mine.key}_over_{floor.key}_p50"] = mine.p50 / floor.p50
            summary[f"{mine.key}_over_{floor.key}_p99"] = mine.p99 / floor.p99
            print(f"- {mine.label} over its floor ({floor.label}): p50 "
                  f"{mine.p50 / floor.p50:.2f}x, p99 {mine.p99 / floor.p99:.2f}x.")
    print("- fairness (fewest / mean): " + ", ".join(
        f"{c.label} {f(c.fairness, '.2f')}" for c in cs if not c.wake) + ".")
    versions = versions_of("hilock", "redis", "python-redis-lock")

    if args.json:
        result = {
            **machine(server_version),
            "samples": samples,
            "seconds": seconds,
            "workers": args.workers,
            "bench_binary": str(binary) if binary else None,
            "versions": versions,
            "ping_p50_us": {"hiredis": ping_c, "redis_py": ping_py,
                            "hiredis_same_cpu": placed[0] if placed else None,
                            "hiredis_other_cpu": placed[1] if placed else None},
            "contestants": [{
                "key": c.key, "label": c.label, "skipped": c.skipped,
                "handoff": {"p50_us": c.p50, "p99_us": c.p99, "min_wait_us": c.min_wait_us,
                            "samples_us": c.handoff_us},
                "contention": {"per_s": c.rate, "counts": c.counts,
                               "fairness": c.fairness},
            } for c in cs],
            "summary": summary,
        }
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
