#!/usr/bin/env python3
"""Lock cycle throughput: hilock against a raw hiredis floor and Python locks.

Every contestant runs acquire (non-blocking) + release on one uncontended
lock, in a loop, against one private redis-server:

  (a) floor              bench_c floor: hiredis SET NX PX + EVALSHA release
  (b) hilock C           bench_c hilock: try_acquire + release
  (b2) the same with auto-renew (bench_c renew): what registering each hold
      with the renewal thread costs
  (c) hilock Python      hilock.Client(url).lock(...) (auto-renew on)
  (c2) the same with auto_renew=False
  (c3) the same (c) traced: hilock.tracing.instrument() with OpenTelemetry's
      default (no-op) tracer provider, and (c4) with the SDK's provider and
      no exporter (spans recorded, then dropped)
  (d) redis-py           redis.Redis(...).lock(...)
  (e) python-redis-lock  redis_lock.Lock(conn, ...)
  (f) pottery            pottery.Redlock with a single master
  (g) semaphore C        bench_c semaphore: a counting semaphore of 1 permit
  (h) fair lock C        bench_c fair: a fair (FIFO) lock
  (i) segmented lock C   bench_c seglock: a segmented lock of 8 segments
  (j) hilock C multi-key bench_c multi2 / multi8: a multi-key lock of 2 and
      8 names, try_acquire + release (one script each way)
  (k) read-write lock C  bench_c rwread / rwwrite: the read or the write side of a
      read-write lock, try_acquire + release

Contestants take turns, round after round, and each reports the median of
its rounds, to damp the noise of a small machine. This is a benchmark, not a
test: nothing here asserts on timing.

By default the scheduler places client and server, so most cycles pay two
cross-CPU wake-ups (on a VM these dominate, and a round in which both land
on one CPU runs several times faster: see the spread column). --pin CPU puts
the server, this process and bench_c on one CPU, which measures the CPU cost
of a cycle instead.

    python3 tests/bench/bench.py [--rounds 3] [--seconds 2] [--pin CPU]
        [--json out.json] [--bench-binary build/tests/bench/bench_c]
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[2]
WARMUP_S = 0.25


class Skip(Exception):
    """A contestant that can not run here (a package is missing)."""


def load_redis_server():
    """hilock._server.RedisServer; by file path if the package can't import
    (its native extension may not be built yet)."""
    if importlib.util.find_spec("hilock") is None:
        sys.path.insert(0, str(ROOT / "python"))
    try:
        from hilock._server import RedisServer
        return RedisServer
    except ImportError:
        path = ROOT / "python" / "hilock" / "_server.py"
        spec = importlib.util.spec_from_file_location("hilock_bench_server", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        return mod.RedisServer


def find_binary(name: str, given: Optional[str] = None) -> Optional[Path]:
    """The bench program `name` from a build directory (or `given`, which
    must be executable); None if it was not built. Sanitizer builds are
    passed over: they would skew the numbers."""
    if given:
        path = Path(given).resolve()
        if not os.access(path, os.X_OK):
            sys.exit(f"{Path(sys.argv[0]).name}: {given} is not an executable")
        return path
    candidates = [ROOT / f"build/tests/bench/{name}", ROOT / f"build/main/tests/bench/{name}"]
    candidates += sorted(ROOT.glob(f"build*/tests/bench/{name}"))
    candidates += sorted(ROOT.glob(f"build*/*/tests/bench/{name}"))
    for path in candidates:
        if os.access(path, os.X_OK) and "asan" not in str(path):
            return path
    return None


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def require(*modules: str) -> List[Any]:
    """The modules, imported; Skip if one of them is not importable (its
    package is not installed)."""
    found = []
    for m in modules:
        try:
            found.append(importlib.import_module(m))
        except ImportError:
            raise Skip(f"skipped ({m} not importable)") from None
    return found


def versions_of(*dists: str) -> Dict[str, str]:
    """The installed versions of dists (hilock's from the module when it is
    imported: it may be importable without being pip-installed); printed on
    one line, and returned."""
    versions = {d: version(d) for d in dists}
    if "hilock" in versions and "hilock" in sys.modules:
        versions["hilock"] = getattr(sys.modules["hilock"], "__version__", versions["hilock"])
    print("\nversions: " + ", ".join(f"{d} {v}" for d, v in versions.items()))
    return versions


def machine(server_version: str) -> Dict[str, Any]:
    """What a JSON result starts with: the server's and Python's versions
    and the number of CPUs."""
    return {"redis_version": server_version, "python": platform.python_version(),
            "cpus": os.cpu_count()}


def write_json(path: str, result: Dict[str, Any]) -> None:
    """The results, as indented JSON, to the file at path (--json)."""
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


# -- contestants ----------------------------------------------------------

class Contestant:
    def __init__(self, key: str, label: str) -> None:
        self.key = key
        self.label = label
        self.runs: List[Dict[str, float]] = []
        self.skipped: Optional[str] = None

    def setup(self, url: str) -> None:
        pass

    def run(self, url: str, seconds: float) -> Dict[str, float]:
        raise NotImplementedError

    @property
    def cycles_per_s(self) -> Optional[float]:
        if self.skipped or not self.runs:
            return None
        return statistics.median(r["cycles_per_s"] for r in self.runs)


class CBench(Contestant):
    """One bench_c run per round (it does its own warm-up)."""

    def __init__(self, key: str, label: str, mode: str, binary: Optional[Path]) -> None:
        super().__init__(key, label)
        self.mode = mode
        self.binary = binary

    def setup(self, url: str) -> None:
        if self.binary is None:
            raise Skip("skipped (bench_c not built: cmake --build <dir> --target bench_c, "
                       "or pass --bench-binary)")

    def run(self, url: str, seconds: float) -> Dict[str, float]:
        proc = subprocess.run([str(self.binary), self.mode, url, f"{seconds:g}"],
                              capture_output=True, text=True, timeout=seconds + 30)
        if proc.returncode != 0:
            raise RuntimeError(f"bench_c {self.mode} exited {proc.returncode}: "
                               f"{proc.stderr.strip()}")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        return {"cycles": int(out["cycles"]), "seconds": float(out["seconds"]),
                "cycles_per_s": float(out["cycles_per_s"])}


class PyBench(Contestant):
    """An in-process loop of cycle() (set up once, outside the timing)."""

    def __init__(self, key: str, label: str, make: Callable[[str], Callable[[], None]]) -> None:
        super().__init__(key, label)
        self.make = make
        self.cycle: Optional[Callable[[], None]] = None

    def setup(self, url: str) -> None:
        self.cycle = self.make(url)

    def run(self, url: str, seconds: float) -> Dict[str, float]:
        cycle = self.cycle
        assert cycle is not None
        end = time.perf_counter() + WARMUP_S
        while time.perf_counter() < end:
            cycle()
        n = 0
        t0 = t = time.perf_counter()
        while t - t0 < seconds:
            cycle()
            n += 1
            t = time.perf_counter()
        return {"cycles": n, "seconds": t - t0, "cycles_per_s": n / (t - t0)}


def granted(ok: bool, who: str) -> None:
    if not ok:
        raise RuntimeError(f"{who}: an uncontended acquire was not granted")


def cycle_of(lk: Any, who: str) -> Callable[[], None]:
    """One cycle on lk: a non-blocking acquire (which must be granted) and
    a release."""
    def cycle() -> None:
        granted(lk.acquire(blocking=False), who)
        lk.release()
    return cycle


def make_hilock(url: str, auto_renew: bool = True) -> Callable[[], None]:
    hilock, = require("hilock")
    return cycle_of(hilock.Client(url).lock("bench", ttl=30, auto_renew=auto_renew), "hilock")


class TracedPyBench(PyBench):
    """hilock Python with hilock.tracing instrumented during its rounds
    only (tracing is global to the process): provider() gives the tracer
    provider (None: OpenTelemetry's global one, a no-op without an SDK)."""

    def __init__(self, key: str, label: str, provider: Callable[[], Any]) -> None:
        super().__init__(key, label, make_hilock)
        self.provider = provider

    def setup(self, url: str) -> None:
        require("opentelemetry.trace")
        super().setup(url)

    def run(self, url: str, seconds: float) -> Dict[str, float]:
        import hilock.tracing
        hilock.tracing.instrument(self.provider())
        try:
            return super().run(url, seconds)
        finally:
            hilock.tracing.uninstrument()


def sdk_provider() -> Any:
    """The SDK's tracer provider with no span processor: every span is
    made and recorded, none is exported."""
    sdk, = require("opentelemetry.sdk.trace")
    return sdk.TracerProvider()


def make_redis_py(url: str) -> Callable[[], None]:
    redis, = require("redis")
    return cycle_of(redis.Redis.from_url(url).lock("bench2", timeout=30), "redis-py")


def make_python_redis_lock(url: str) -> Callable[[], None]:
    redis, redis_lock = require("redis", "redis_lock")
    return cycle_of(redis_lock.Lock(redis.Redis.from_url(url), "bench3", expire=30),
                    "python-redis-lock")


def make_pottery(url: str) -> Callable[[], None]:
    pottery, redis = require("pottery", "redis")
    return cycle_of(pottery.Redlock(key="bench4", masters={redis.Redis.from_url(url)},
                                    auto_release_time=30), "pottery")


# -- report ---------------------------------------------------------------

def ratio(x: Optional[float], y: Optional[float]) -> Optional[float]:
    return x / y if x and y else None


def fmt_ratio(r: Optional[float]) -> str:
    return f"{r:.2f}" if r is not None else "n/a"


def table(contestants: List[Contestant], floor: Optional[float]) -> str:
    rows = ["| contestant | cycles/s | µs/cycle | time/cycle vs floor | spread |",
            "|---|---:|---:|---:|---:|"]
    for c in contestants:
        cps = c.cycles_per_s
        if cps is None:
            rows.append(f"| {c.label} | {c.skipped or 'no result'} | | | |")
            continue
        rates = [r["cycles_per_s"] for r in c.runs]
        spread = (max(rates) - min(rates)) / cps * 100
        vs = f"{floor / cps:.2f}x" if floor else "n/a"
        rows.append(f"| {c.label} | {cps:,.0f} | {1e6 / cps:.1f} | {vs} | {spread:.0f}% |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds per contestant (default 3)")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds per round (default 2)")
    ap.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    ap.add_argument("--pin", type=int, metavar="CPU",
                    help="run the server, this process and bench_c on this one CPU")
    ap.add_argument("--bench-binary", metavar="PATH",
                    help="bench_c (default: looked for under build*/tests/bench/)")
    args = ap.parse_args()
    if args.rounds < 1 or args.seconds <= 0:
        ap.error("--rounds must be >= 1 and --seconds > 0")
    if args.pin is not None and args.pin not in os.sched_getaffinity(0):
        ap.error(f"--pin: CPU {args.pin} is not available here")

    binary = find_binary("bench_c", args.bench_binary)
    contestants: List[Contestant] = [
        CBench("floor", "(a) floor: hiredis SET NX PX + EVALSHA", "floor", binary),
        CBench("hilock_c", "(b) hilock C", "hilock", binary),
        CBench("hilock_c_renew", "(b2) hilock C, auto-renew", "renew", binary),
        PyBench("hilock_py", "(c) hilock Python (auto-renew, the default)", make_hilock),
        PyBench("hilock_py_norenew", "(c2) hilock Python, auto_renew=False",
                lambda url: make_hilock(url, auto_renew=False)),
        TracedPyBench("hilock_py_traced", "(c3) hilock Python, traced (no-op tracer)",
                      lambda: None),
        TracedPyBench("hilock_py_traced_sdk", "(c4) hilock Python, traced (SDK, no exporter)",
                      sdk_provider),
        PyBench("redis_py", "(d) redis-py Lock", make_redis_py),
        PyBench("python_redis_lock", "(e) python-redis-lock", make_python_redis_lock),
        PyBench("pottery", "(f) pottery Redlock, 1 master", make_pottery),
        CBench("semaphore_c", "(g) hilock C semaphore, 1 permit", "semaphore", binary),
        CBench("fair_c", "(h) hilock C fair lock", "fair", binary),
        CBench("seglock_c", "(i) hilock C segmented lock, 8 segments", "seglock", binary),
        CBench("multi2_c", "(j2) hilock C multi-key lock, 2 names", "multi2", binary),
        CBench("multi8_c", "(j8) hilock C multi-key lock, 8 names", "multi8", binary),
        CBench("rwread_c", "(kr) hilock C read-write lock, read side", "rwread", binary),
        CBench("rwwrite_c", "(kw) hilock C read-write lock, write side", "rwwrite", binary),
    ]
    RedisServer = load_redis_server()
    with RedisServer() as srv:
        url = srv.url
        if args.pin is not None:  # bench_c inherits this process's affinity
            os.sched_setaffinity(srv.pid, {args.pin})
            os.sched_setaffinity(0, {args.pin})
        server_version = "unknown"
        try:
            import redis
            server_version = redis.Redis.from_url(url).info("server")["redis_version"]
        except Exception:  # only for the report header
            pass
        for c in contestants:
            try:
                c.setup(url)
            except Skip as e:
                c.skipped = str(e)
        live = [c for c in contestants if not c.skipped]
        print(f"redis-server {server_version} on {url}; {len(live)} contestants, "
              f"{args.rounds} rounds of {args.seconds:g} s each; bench_c: {binary}",
              file=sys.stderr)
        for rnd in range(args.rounds):
            order = live[rnd % len(live):] + live[:rnd % len(live)] if live else []
            for c in order:
                if c.skipped:
                    continue
                try:
                    c.runs.append(c.run(url, args.seconds))
                except Exception as e:  # report it, keep the others going
                    c.skipped = f"failed: {e}"
                    print(f"{c.label}: {c.skipped}", file=sys.stderr)
            print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)

    by = {c.key: c.cycles_per_s for c in contestants}
    floor = by["floor"]
    ratios = {"b/a": ratio(by["hilock_c"], floor), "c/a": ratio(by["hilock_py"], floor),
              "c/d": ratio(by["hilock_py"], by["redis_py"]),
              "j2/a": ratio(by["multi2_c"], floor), "j8/a": ratio(by["multi8_c"], floor),
              "kr/a": ratio(by["rwread_c"], floor), "kw/a": ratio(by["rwwrite_c"], floor),
              "g/a": ratio(by["semaphore_c"], floor), "h/a": ratio(by["fair_c"], floor),
              "i/a": ratio(by["seglock_c"], floor)}

    print(f"\nLock cycle (non-blocking acquire + release, uncontended), redis-server "
          f"{server_version} on loopback, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; median of {args.rounds} rounds of "
          f"{args.seconds:g} s; "
          + (f"all on CPU {args.pin}" if args.pin is not None else "unpinned") + ".\n")
    print(table(contestants, floor))
    print("\nspread: (fastest - slowest round) / median.")
    print("\n| ratio of cycles/s | value |\n|---|---:|")
    print(f"| b/a: hilock C / floor | {fmt_ratio(ratios['b/a'])} |")
    print(f"| c/a: hilock Python / floor | {fmt_ratio(ratios['c/a'])} |")
    print(f"| c/d: hilock Python / redis-py | {fmt_ratio(ratios['c/d'])} |")
    print(f"| g/a: semaphore C / floor | {fmt_ratio(ratios['g/a'])} |")
    print(f"| h/a: fair lock C / floor | {fmt_ratio(ratios['h/a'])} |")
    print(f"| i/a: segmented lock C / floor | {fmt_ratio(ratios['i/a'])} |")
    print(f"| j2/a: hilock C multi-key, 2 names / floor | {fmt_ratio(ratios['j2/a'])} |")
    print(f"| j8/a: hilock C multi-key, 8 names / floor | {fmt_ratio(ratios['j8/a'])} |")
    print(f"| kr/a: read-write lock C, read side / floor | {fmt_ratio(ratios['kr/a'])} |")
    print(f"| kw/a: read-write lock C, write side / floor | {fmt_ratio(ratios['kw/a'])} |")

    def cost(on: str, off: str) -> str:
        if not by.get(on) or not by.get(off):
            return "n/a"
        return f"{1e6 / by[on] - 1e6 / by[off]:+.1f} µs"
    print("\n| auto-renew: what it adds to a cycle | µs |\n|---|---:|")
    print(f"| C: b2 - b | {cost('hilock_c_renew', 'hilock_c')} |")
    print(f"| Python: c - c2 | {cost('hilock_py', 'hilock_py_norenew')} |")
    print("\n| tracing (hilock.tracing): what it adds to a cycle | µs | c / c3, c / c4 |"
          "\n|---|---:|---:|")
    print(f"| no-op tracer: c3 - c | {cost('hilock_py_traced', 'hilock_py')} | "
          f"{fmt_ratio(ratio(by['hilock_py'], by['hilock_py_traced']))} |")
    print(f"| SDK, no exporter: c4 - c | {cost('hilock_py_traced_sdk', 'hilock_py')} | "
          f"{fmt_ratio(ratio(by['hilock_py'], by['hilock_py_traced_sdk']))} |")
    versions = versions_of("hilock", "redis", "python-redis-lock", "pottery",
                           "opentelemetry-api", "opentelemetry-sdk")

    if args.json:
        result = {
            **machine(server_version),
            "rounds": args.rounds,
            "seconds": args.seconds,
            "pin": args.pin,
            "bench_binary": str(binary) if binary else None,
            "versions": versions,
            "contestants": [{"key": c.key, "label": c.label, "cycles_per_s": c.cycles_per_s,
                             "skipped": c.skipped, "runs": c.runs} for c in contestants],
            "ratios": ratios,
        }
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
