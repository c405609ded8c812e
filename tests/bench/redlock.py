#!/usr/bin/env python3
"""Redlock cost: five masters against one, and hilock against pottery.

Five private redis-servers on loopback. Every contestant loops {non-blocking
acquire; release} on one uncontended lock for a few seconds per round;
rounds alternate between contestants and each reports the median of its
rounds. The acquire is timed on its own too (median of every acquire in the
round), since that is the latency a caller waits for.

  hilock Lock, 1 node      the single-master expiring lock (hilock.Client.lock)
  hilock Redlock, 1 node   Redlock over one master
  hilock Redlock, 5 nodes  Redlock over five masters, requests multiplexed
  pottery Redlock, 1 / 5   pottery.Redlock over the same masters
  floor, 1 / 5             one round of EXISTS to every node, all answers
                           awaited: what fanning out costs on this machine

Emulated round trips (--rtt-us 200,1000): on loopback every round trip is
CPU time, and five servers on a small machine need five times the CPU of
one, so the loopback ratio says little about a network. For each round-trip
time given, one delayproxy (tests/bench/delayproxy.c, built with the other
bench programs) sits in front of the five servers and holds every byte for
half the round trip in each direction. The same hilock and pottery
contestants then run through it, against floors measured in the same run
over raw sockets through the same proxy:

  floor: 1 round trip            one EXISTS to one node
  floor: parallel, 3rd of 5      EXISTS sent to all five at once, until the
                                 third reply (a majority: where Redlock stops)
  floor: parallel, all 5         the same, until every reply
  floor: sequential, 5           one node after the other: five round trips

Ratios, not times, are the result: the machine is small and shared. This is
a benchmark, not a test: nothing asserts on timing.

    python3 tests/bench/redlock.py [--rounds 3] [--seconds 1.5] [--json out.json]
        [--rtt-us 200,1000 [--no-loopback] [--delayproxy PATH]]
"""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import select
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
if "hilock" not in sys.modules:
    try:
        import hilock  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "build" / "python"))

import hilock  # noqa: E402
from hilock._server import RedisServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import find_binary, write_json  # noqa: E402

Cycle = Tuple[Callable[[], bool], Callable[[], None]]
Medians = Dict[str, Tuple[float, float]]
ACQ, CYCLE = 0, 1  # the columns of a Medians entry: acquire p50 µs, µs per cycle


def run(acquire: Callable[[], bool], release: Callable[[], None],
        seconds: float) -> Tuple[float, float]:
    """(median acquire us, mean cycle us) over `seconds` of cycles."""
    acq: List[float] = []
    end = time.perf_counter() + seconds
    n = 0
    t_start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        if not acquire():
            raise RuntimeError("uncontended acquire refused")
        acq.append(time.perf_counter() - t0)
        release()
        n += 1
        if t0 >= end:
            break
    total = time.perf_counter() - t_start
    return statistics.median(acq) * 1e6, total / n * 1e6


def measure(contestants: Dict[str, Cycle], rounds: int, seconds: float) -> Medians:
    """Per contestant: (median of the rounds' acquire p50, of their us/cycle)."""
    results: Dict[str, List[Tuple[float, float]]] = {k: [] for k in contestants}
    for a, r in contestants.values():  # warm-up: connections, scripts
        run(a, r, 0.2)
    for _ in range(rounds):
        for name, (a, r) in contestants.items():
            results[name].append(run(a, r, seconds))
    return {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
            for k, v in results.items()}


def add_hilock(contestants: Dict[str, Cycle], urls: Sequence[str],
               keep: List[object]) -> Tuple[hilock.Redlock, hilock.Redlock]:
    client = hilock.Client(urls[0])
    lk = client.lock("bench:lock", ttl=10, auto_renew=False)
    contestants["hilock Lock, 1 node"] = (lambda: lk.acquire(blocking=False), lk.release)
    r1 = hilock.Redlock(urls[:1], "bench:r1", ttl=10, auto_renew=False)
    contestants["hilock Redlock, 1 node"] = (lambda: r1.acquire(blocking=False), r1.release)
    r5 = hilock.Redlock(urls, "bench:r5", ttl=10, auto_renew=False)
    contestants["hilock Redlock, 5 nodes"] = (lambda: r5.acquire(blocking=False), r5.release)
    keep += [client, lk, r1, r5]
    return r1, r5


def add_pottery(contestants: Dict[str, Cycle], urls: Sequence[str],
                versions: Dict[str, str], keep: List[object]) -> None:
    try:
        import pottery
        import redis
    except ImportError as e:
        print(f"pottery skipped: {e}", file=sys.stderr)
        return
    masters = [redis.Redis.from_url(u) for u in urls]
    p1 = pottery.Redlock(key="bench:p1", masters={masters[0]}, auto_release_time=10)
    p5 = pottery.Redlock(key="bench:p5", masters=set(masters), auto_release_time=10)
    contestants["pottery Redlock, 1 node"] = (lambda: p1.acquire(blocking=False), p1.release)
    contestants["pottery Redlock, 5 nodes"] = (lambda: p5.acquire(blocking=False), p5.release)
    versions["pottery"] = importlib.metadata.version("pottery")
    versions["redis"] = importlib.metadata.version("redis")
    keep += masters


def print_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """A Markdown table (the first column left-aligned, the others right),
    then a blank line."""
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 1))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


def ratios_of(med: Medians) -> List[Tuple[str, float]]:
    """For each of RATIOS whose two contestants med has: (label, num / den
    in that column); printed as a table, and returned."""
    ratios = [(label, med[num][col] / med[den][col])
              for label, num, den, col in RATIOS if num in med and den in med]
    print_table(["ratio", "value"], ([label, f"{v:.2f}"] for label, v in ratios))
    return ratios


def report(title: str, med: Medians, head: Sequence[str],
           cells: Callable[[float, float], List[str]]) -> List[Tuple[str, float]]:
    """The title; a table of the medians, a row per contestant (its name,
    its acquire p50 and the cells(acquire, cycle) under head); and the
    ratios (see ratios_of), which are returned."""
    print(title)
    print()
    print_table(["contestant", "acquire (or round) p50 µs", *head],
                ([k, f"{acq:,.0f}", *cells(acq, cyc)] for k, (acq, cyc) in med.items()))
    return ratios_of(med)


# The ratios reported (label, numerator, denominator, column): each where
# the measurement ran both contestants (see ratios_of).
RATIOS = [
    ("floor: EXISTS round, 5 nodes / 1 node", "floor: EXISTS round, 5 nodes",
     "floor: EXISTS round, 1 node", ACQ),
    ("hilock Redlock acquire: 5 nodes / 1 node", "hilock Redlock, 5 nodes",
     "hilock Redlock, 1 node", ACQ),
    ("hilock Redlock 5 nodes acquire / hilock Lock acquire", "hilock Redlock, 5 nodes",
     "hilock Lock, 1 node", ACQ),
    ("hilock Redlock cycle: 5 nodes / 1 node", "hilock Redlock, 5 nodes",
     "hilock Redlock, 1 node", CYCLE),
    ("floor: parallel, 3rd of 5 / 1 round trip", "floor: parallel, 3rd of 5",
     "floor: 1 round trip", ACQ),
    ("floor: parallel, all 5 / 1 round trip", "floor: parallel, all 5",
     "floor: 1 round trip", ACQ),
    ("floor: sequential, 5 / 1 round trip", "floor: sequential, 5",
     "floor: 1 round trip", ACQ),
    ("pottery Redlock acquire: 5 nodes / 1 node", "pottery Redlock, 5 nodes",
     "pottery Redlock, 1 node", ACQ),
    ("pottery / hilock, acquire, 5 nodes", "pottery Redlock, 5 nodes",
     "hilock Redlock, 5 nodes", ACQ),
    ("pottery / hilock, cycle, 5 nodes", "pottery Redlock, 5 nodes",
     "hilock Redlock, 5 nodes", CYCLE),
]


# -- loopback ---------------------------------------------------------------

def loopback(urls: Sequence[str], args: argparse.Namespace,
             versions: Dict[str, str]) -> Tuple[Medians, List[Tuple[str, float]]]:
    contestants: Dict[str, Cycle] = {}
    keep: List[object] = []
    r1, r5 = add_hilock(contestants, urls, keep)
    # The machine's own fan-out cost: one round of EXISTS (locked()) on
    # every node, waiting for all of them; no script, no lock.
    contestants["floor: EXISTS round, 1 node"] = (lambda: r1.locked() or True,
                                                  lambda: None)
    contestants["floor: EXISTS round, 5 nodes"] = (lambda: r5.locked() or True,
                                                   lambda: None)
    add_pottery(contestants, urls, versions, keep)
    med = measure(contestants, args.rounds, args.seconds)

    title = (f"Redlock acquire + release, uncontended, 5 redis-servers on loopback, "
             f"{os.cpu_count()} CPUs, Python {platform.python_version()}; "
             f"median of {args.rounds} rounds of {args.seconds} s")
    ratios = report(title, med, ["µs/cycle", "cycles/s"],
                    lambda acq, cyc: [f"{cyc:,.0f}", f"{1e6 / cyc:,.0f}"])
    return med, ratios


# -- emulated round trips -----------------------------------------------------

EXISTS = b"*2\r\n$6\r\nEXISTS\r\n$10\r\nbench:none\r\n"  # reply: ":0\r\n"


class RawNodes:
    """Plain sockets to each node; EXISTS rounds with no client library.

    A round may stop before every node has answered (`need` < n). The late
    replies are counted and skipped when they arrive, as hilock does."""

    def __init__(self, ports: Sequence[int]) -> None:
        self.socks = []
        for p in ports:
            s = socket.create_connection(("127.0.0.1", p))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.socks.append(s)
        self.fds = [s.fileno() for s in self.socks]
        self.sent = [0] * len(ports)
        self.got = [0] * len(ports)
        self.poller = select.poll()
        for fd in self.fds:
            self.poller.register(fd, select.POLLIN)

    def _read(self, i: int) -> None:
        data = self.socks[i].recv(65536)
        if not data:
            raise RuntimeError("node closed the connection")
        self.got[i] += data.count(b"\n")  # each reply is one ":0\r\n" line

    def parallel(self, need: int) -> bool:
        for i, s in enumerate(self.socks):
            s.sendall(EXISTS)
            self.sent[i] += 1
        target = list(self.sent)
        index = {fd: i for i, fd in enumerate(self.fds)}
        while sum(g >= t for g, t in zip(self.got, target)) < need:
            for fd, _ in self.poller.poll(1000):
                self._read(index[fd])
        return True

    def sequential(self) -> bool:
        for i, s in enumerate(self.socks):
            s.sendall(EXISTS)
            self.sent[i] += 1
            while self.got[i] < self.sent[i]:
                self._read(i)
        return True

    def close(self) -> None:
        for s in self.socks:
            s.close()


def find_delayproxy(given: Optional[str]) -> Path:
    path = find_binary("delayproxy", given)
    if path is None:
        sys.exit("redlock.py: delayproxy not built (cmake --build <dir> --target delayproxy, "
                 "or pass --delayproxy)")
    return path


def emulated(nodes: Sequence[RedisServer], rtt_us: int, proxy_bin: Path,
             args: argparse.Namespace, versions: Dict[str, str]) -> Dict[str, object]:
    """Every contestant through one delayproxy holding each direction rtt/2."""
    proxy = subprocess.Popen([str(proxy_bin), str(rtt_us // 2)] +
                             [f"127.0.0.1:{n.port}" for n in nodes],
                             stdout=subprocess.PIPE, text=True)
    keep: List[object] = []
    try:
        assert proxy.stdout is not None
        ports = [int(p) for p in proxy.stdout.readline().split()]
        if len(ports) != len(nodes):
            raise RuntimeError(f"delayproxy did not start (exit {proxy.poll()})")
        urls = [f"redis://127.0.0.1:{p}/0" for p in ports]
        contestants: Dict[str, Cycle] = {}
        add_hilock(contestants, urls, keep)
        one, par3, par5, seq = (RawNodes(ports[:1]), RawNodes(ports), RawNodes(ports),
                                RawNodes(ports))
        keep += [one, par3, par5, seq]
        contestants["floor: 1 round trip"] = (lambda: one.parallel(1), lambda: None)
        contestants["floor: parallel, 3rd of 5"] = (lambda: par3.parallel(3), lambda: None)
        contestants["floor: parallel, all 5"] = (lambda: par5.parallel(5), lambda: None)
        contestants["floor: sequential, 5"] = (seq.sequential, lambda: None)
        add_pottery(contestants, urls, versions, keep)
        med = measure(contestants, args.rounds, args.seconds)
    finally:
        for k in keep:
            if isinstance(k, RawNodes) or isinstance(k, hilock.Client):
                k.close()
        keep.clear()
        proxy.terminate()
        proxy.wait(timeout=5)

    rt = med["floor: 1 round trip"][0]
    title = (f"Emulated round trip {rtt_us} µs (delayproxy: {rtt_us // 2} µs each way), "
             f"5 redis-servers on loopback; median of {args.rounds} rounds of {args.seconds} s; "
             f"one measured round trip: {rt:,.0f} µs")
    ratios = report(title, med, ["in round trips", "µs/cycle"],
                    lambda acq, cyc: [f"{acq / rt:.2f}", f"{cyc:,.0f}"])
    return {"medians_us": med, "ratios": dict(ratios)}


def summary(by_rtt: Dict[int, Dict[str, object]]) -> None:
    """One line per round-trip time: the 5-node / 1-node acquire ratios."""
    cols = [("hilock Redlock acquire: 5 nodes / 1 node", "hilock 5/1"),
            ("floor: parallel, 3rd of 5 / 1 round trip", "parallel 3rd of 5 / 1"),
            ("floor: parallel, all 5 / 1 round trip", "parallel all 5 / 1"),
            ("floor: sequential, 5 / 1 round trip", "sequential 5 / 1"),
            ("pottery Redlock acquire: 5 nodes / 1 node", "pottery 5/1"),
            ("pottery / hilock, acquire, 5 nodes", "pottery / hilock, 5 nodes")]
    print("Acquire (or round) p50, 5 nodes / 1 node, by emulated round trip:")
    print()
    print("| RTT µs | 1 round trip µs | hilock 1 node µs | hilock 5 nodes µs | " +
          " | ".join(c[1] for c in cols) + " |")
    print("|---:|---:|---:|---:|" + "---:|" * len(cols))
    for rtt, res in by_rtt.items():
        med: Medians = res["medians_us"]  # type: ignore[assignment]
        ratios: Dict[str, float] = res["ratios"]  # type: ignore[assignment]
        cells = [f"{ratios[c[0]]:.2f}" if c[0] in ratios else "-" for c in cols]
        print(f"| {rtt} | {med['floor: 1 round trip'][0]:,.0f} | "
              f"{med['hilock Redlock, 1 node'][0]:,.0f} | "
              f"{med['hilock Redlock, 5 nodes'][0]:,.0f} | " + " | ".join(cells) + " |")
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--json")
    ap.add_argument("--rtt-us", metavar="LIST", default="",
                    help="comma-separated round-trip times in µs to emulate with delayproxy "
                         "(e.g. 200,1000); each runs after the loopback measurement")
    ap.add_argument("--no-loopback", action="store_true",
                    help="only the emulated round trips")
    ap.add_argument("--delayproxy", metavar="PATH",
                    help="delayproxy (default: looked for under build*/tests/bench/)")
    args = ap.parse_args()
    try:
        rtts = [int(x) for x in args.rtt_us.split(",") if x.strip()]
    except ValueError:
        ap.error("--rtt-us wants integers, e.g. 200,1000")
    if any(r < 2 for r in rtts):
        ap.error("--rtt-us: each round trip must be at least 2 µs")
    if args.no_loopback and not rtts:
        ap.error("--no-loopback needs --rtt-us")
    proxy_bin = find_delayproxy(args.delayproxy) if rtts else None

    versions = {"hilock": hilock.__version__}
    out: Dict[str, object] = {}
    nodes = [RedisServer().start() for _ in range(5)]
    try:
        if not args.no_loopback:
            med, ratios = loopback([n.url for n in nodes], args, versions)
            out.update({"medians_us": med, "ratios": dict(ratios)})
        by_rtt: Dict[int, Dict[str, object]] = {}
        for rtt in rtts:
            assert proxy_bin is not None
            by_rtt[rtt] = emulated(nodes, rtt, proxy_bin, args, versions)
        if by_rtt:
            summary(by_rtt)
            out["emulated_rtt"] = {str(k): v for k, v in by_rtt.items()}
    finally:
        for n in nodes:
            n.cleanup()

    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    if args.json:
        out["versions"] = versions
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
