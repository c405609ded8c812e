"""Endurance run: does hilock's process stay flat over a long life?

    PYTHONPATH=build/main/python python tests/soak/endurance.py [--minutes 60]

Two phases against one redis-server (started here on a free loopback port
unless --url names one):

1. ``--cycles`` lock cycles (default 1,000,000): a new handle, acquire,
   release, every other one with auto-renewal (registered and cancelled),
   names rotating over 1,000 keys.
2. ``--held`` locks (default 10,000) acquired with auto-renewal and a
   ``--ttl`` of 3 s, so the renewal thread renews every one of them about
   once a second, for ``--minutes`` (default 60); at the end every one must
   still be held.

Every ``--sample`` seconds (default 5) it reads this process's resident
memory (VmRSS of /proc/self/status), open file descriptors (/proc/self/fd)
and threads (/proc/self/task). Each phase has a warm-up (the first 10% of
the cycles; the first minute of holding, or a tenth of it if shorter); the
run fails (exit 1) if, after warm-up, resident memory grows by 1 MB or more
or the counts of descriptors or threads grow (a connection replaced after
a timed-out reply may dip the count meanwhile). Not part of CI: it takes
over an hour by default.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from dataclasses import dataclass
from typing import List, Optional

import hilock
from hilock._server import RedisServer, command

MB = 1024 * 1024


@dataclass
class Sample:
    t: float
    rss: int  # bytes
    fds: int
    threads: int


def sample(t0: float) -> Sample:
    rss = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return Sample(time.monotonic() - t0, rss, len(os.listdir("/proc/self/fd")),
                  len(os.listdir("/proc/self/task")))


def show(label: str, s: Sample) -> None:
    print(f"  {label:<28} t={s.t:8.1f}s  rss={s.rss / MB:8.2f} MB  "
          f"fds={s.fds}  threads={s.threads}", flush=True)


def judge(phase: str, after_warmup: List[Sample]) -> List[str]:
    """What went wrong in one phase's samples taken after its warm-up."""
    if len(after_warmup) < 2:
        return [f"{phase}: fewer than two samples after warm-up (run it longer)"]
    first, last = after_warmup[0], after_warmup[-1]
    growth = last.rss - first.rss
    print(f"{phase}: {len(after_warmup)} samples after warm-up over "
          f"{last.t - first.t:.0f}s; RSS {first.rss / MB:.2f} -> {last.rss / MB:.2f} MB "
          f"({growth / 1024:+.0f} kB; peak {max(s.rss for s in after_warmup) / MB:.2f} MB); "
          f"fds {sorted({s.fds for s in after_warmup})}; "
          f"threads {sorted({s.threads for s in after_warmup})}", flush=True)
    bad = []
    if growth >= MB:
        bad.append(f"{phase}: resident memory grew by {growth / MB:.2f} MB after warm-up")
    # A leak grows. A connection replaced after a timed-out reply (a loaded
    # machine) may dip the count while it is reopened; that is not a leak.
    if last.fds > first.fds or max(s.fds for s in after_warmup) > first.fds + 1:
        bad.append(f"{phase}: open file descriptors grew after warm-up")
    if last.threads > first.threads or max(s.threads for s in after_warmup) > first.threads + 1:
        bad.append(f"{phase}: threads grew after warm-up")
    return bad


def script_calls(port: Optional[int]) -> Optional[int]:
    """EVALSHA calls the server has counted (while holding: the renewal
    thread's batches), or None when the server is not ours to ask."""
    if port is None:
        return None
    for line in command(port, "INFO", "commandstats").decode().splitlines():
        if line.startswith("cmdstat_evalsha:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def cycles_phase(client: hilock.Client, n: int, every: float, t0: float) -> List[Sample]:
    print(f"phase 1: {n} lock cycles", flush=True)
    warmup = n // 10
    after: List[Sample] = []
    next_at = time.monotonic() + every
    start = time.monotonic()
    for i in range(n):
        lk = client.lock(f"soak:cycle:{i % 1000}", ttl=10, auto_renew=i % 2 == 0)
        if not lk.acquire(blocking=False):
            raise SystemExit(f"cycle {i}: lock not granted (another holder?)")
        lk.release()
        del lk
        if i + 1 == warmup or i + 1 == n or (i + 1 > warmup and time.monotonic() >= next_at):
            gc.collect()
            s = sample(t0)
            after.append(s)
            next_at = time.monotonic() + every
            if i + 1 == warmup:
                show(f"warm-up done ({warmup} cycles)", s)
    took = time.monotonic() - start
    show(f"{n} cycles done", after[-1])
    print(f"  {n / took:.0f} cycles/s ({took:.0f}s)", flush=True)
    return after


def hold_phase(client: hilock.Client, n: int, ttl: float, minutes: float, every: float,
               t0: float, port: Optional[int]) -> List[Sample]:
    print(f"phase 2: {n} locks held with auto-renewal (ttl {ttl}s) for {minutes} min",
          flush=True)
    locks = [client.lock(f"soak:held:{i}", ttl=ttl, auto_renew=True) for i in range(n)]
    for lk in locks:
        if not lk.acquire(blocking=False):
            raise SystemExit(f"{lk.name}: not granted")
    show(f"{n} locks acquired", sample(t0))
    duration = minutes * 60
    warmup = min(60.0, duration / 10)
    start = time.monotonic()
    calls0 = script_calls(port)
    after: List[Sample] = []
    while True:
        now = time.monotonic() - start
        if now >= duration:
            break
        time.sleep(min(every, duration - now))
        s = sample(t0)
        if time.monotonic() - start >= warmup:
            if not after:
                show("warm-up done", s)
            after.append(s)
    calls1 = script_calls(port)
    lost = [lk.name for lk in locks if lk.lost or lk.validity <= 0]
    if calls0 is not None and calls1 is not None:
        # The renewal thread renews up to 2,048 holds in one script call.
        print(f"  renewal script calls while holding: {calls1 - calls0} "
              f"({(calls1 - calls0) / duration:.1f}/s, each renewing a batch of holds)",
              flush=True)
    if after:
        show("end of holding", after[-1])
    print(f"  locks still held at the end: {n - len(lost)} of {n}", flush=True)
    for lk in locks:
        if not lk.lost:
            lk.release()
    if lost:
        raise SystemExit(f"{len(lost)} held locks were lost (first: {lost[0]!r})")
    return after


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a Redis server to use (default: start one)")
    ap.add_argument("--cycles", type=int, default=1_000_000)
    ap.add_argument("--held", type=int, default=10_000)
    ap.add_argument("--ttl", type=float, default=3.0, help="TTL of the held locks (s)")
    ap.add_argument("--minutes", type=float, default=60.0, help="how long to hold them")
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    args = ap.parse_args(argv)

    server = None
    url = args.url
    if url is None:
        server = RedisServer().start()
        url = server.url
    t0 = time.monotonic()
    try:
        show("start", sample(t0))
        with hilock.Client(url) as client:
            client.ping()
            bad = judge("cycles", cycles_phase(client, args.cycles, args.sample, t0))
            bad += judge("holding", hold_phase(client, args.held, args.ttl, args.minutes,
                                               args.sample, t0,
                                               server.port if server else None))
            st = client.stats()
            print(f"client: {st['reconnects']} reconnects, {st['renewals']} renewals, "
                  f"{st['renewal_failures']} renewal failures", flush=True)
    finally:
        if server is not None:
            server.cleanup()
    for b in bad:
        print("FAIL:", b)
    if not bad:
        print("OK: no growth after warm-up")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
