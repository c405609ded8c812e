#!/usr/bin/env python3
"""What the limited API (abi3) costs the Python bindings: bench.py's hilock
Python contestant, (c) acquire + release with auto-renew, in two builds of
the extension, and a bare wrapper call (1e6 calls of hilock_version(), the
SWIG wrapper's own cost), taking turns round after round against one
redis-server:

    taskset -c 1 python3 tests/bench/abi3_cost.py BUILD_A BUILD_B [--rounds 7] [--seconds 2]

BUILD_A and BUILD_B are build trees configured with and without
-DHILOCK_PYTHON_LIMITED_API=ON (their python/ holds the package). Each
round runs in a fresh interpreter; the medians of the cycles per second
and of the nanoseconds per wrapper call are printed. Pinned to one CPU
(taskset: the server inherits it) a cycle's CPU cost is measured;
unpinned, the scheduler's placement of client and server varies the rate
twofold from round to round. A benchmark, not a test: nothing asserts on
timing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

ROUND = """
import sys, time
import bench, hilock
from hilock import _hilock
cycle = bench.make_hilock(sys.argv[1])
for _ in range(200):
    cycle()
n, t0 = 0, time.perf_counter()
end = t0 + float(sys.argv[2])
while time.perf_counter() < end:
    for _ in range(50):
        cycle()
    n += 50
rate = n / (time.perf_counter() - t0)
f = _hilock.hilock_version
t0 = time.perf_counter()
for _ in range(1000000):
    f()
print(rate, (time.perf_counter() - t0) * 1e3, _hilock.__file__)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.builds[0]) / "python"))
    from hilock._server import RedisServer

    rates: dict[str, list[float]] = {b: [] for b in args.builds}
    calls: dict[str, list[float]] = {b: [] for b in args.builds}
    names: dict[str, str] = {}
    with RedisServer() as srv:
        for _ in range(args.rounds):
            for b in args.builds:
                env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                    [str(Path(b) / "python"), str(HERE)]))
                out = subprocess.run([sys.executable, "-c", ROUND, srv.url, str(args.seconds)],
                                     env=env, check=True, capture_output=True,
                                     text=True).stdout.split()
                rates[b].append(float(out[0]))
                calls[b].append(float(out[1]))  # ms per 1e6 calls: ns per call
                names[b] = os.path.basename(out[2])
    base = statistics.median(rates[args.builds[1]])
    base_call = statistics.median(calls[args.builds[1]])
    for b in args.builds:
        med = statistics.median(rates[b])
        call = statistics.median(calls[b])
        print(f"{names[b]:42} median {med:8.0f} cycles/s "
              f"({(med / base - 1) * 100:+.1f}%), {call:.0f} ns per wrapper call "
              f"({(call / base_call - 1) * 100:+.1f}%); cycles/s of the rounds: "
              f"{', '.join(f'{r:.0f}' for r in rates[b])}")


if __name__ == "__main__":
    main()
