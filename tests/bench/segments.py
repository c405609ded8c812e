#!/usr/bin/env python3
"""Segmented lock throughput: one stock sold by N processes, K = 1 vs more.

Against one private redis-server on loopback, 8 worker processes (by
default) sell one stock, each sale being

    acquire a segment; hold it HOLD ms (the order's work: a sleep, so the
    CPUs stay free); take(1); release

until acquire raises SoldOut. With K = 1 the segmented lock is a single
lock and the sales queue on it; with K segments up to K sales run at once.
The same run with an ordinary hilock Lock around a stock key (GET, SET)
is the single-lock baseline. Every run checks that exactly the stock was
sold. This is a benchmark, not a test: nothing here asserts on timing.

    python3 tests/bench/segments.py [--workers 8] [--stock 2000] [--hold-ms 1]
        [--segments 1,2,4,8] [--rounds 1] [--json out.json]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import load_redis_server, version, write_json  # noqa: E402

CTX = mp.get_context("fork")
NAME = "bench:segments"


def seller(url: str, k: Optional[int], hold: float, go: Any, out: Any) -> None:
    """k = None: the baseline (one Lock around a stock key)."""
    import hilock
    import redis
    try:
        client = hilock.Client(url)
        r = redis.Redis.from_url(url)
        if k is None:
            lk = client.lock(NAME + ":lock", ttl=10, auto_renew=False)
        else:
            seg = client.segmented_lock(NAME + f":{k}", k, ttl=10, auto_renew=False)
        go.wait()
        sold = 0
        while True:
            if k is None:
                with lk:
                    left = int(r.get(NAME + ":stock"))
                    if left <= 0:
                        break
                    time.sleep(hold)
                    r.set(NAME + ":stock", left - 1)
                    sold += 1
                continue
            try:
                if not seg.acquire(timeout=30):
                    raise RuntimeError("no segment within 30 s")
            except hilock.SoldOut:
                break
            try:
                time.sleep(hold)
                sold += seg.take(1)
            finally:
                seg.release()
        out.put(("ok", sold))
    except BaseException as e:  # report, never hang the parent
        out.put(("error", f"{type(e).__name__}: {e}"))


def run(url: str, k: Optional[int], workers: int, stock: int, hold: float) -> Dict[str, Any]:
    import hilock
    import redis
    r = redis.Redis.from_url(url)
    if k is None:
        r.set(NAME + ":stock", stock)
    else:
        with hilock.Client(url) as c:
            c.segmented_lock(NAME + f":{k}", k).stock_init(stock)
    go, out = CTX.Event(), CTX.Queue()
    procs = [CTX.Process(target=seller, args=(url, k, hold, go, out)) for _ in range(workers)]
    for p in procs:
        p.start()
    time.sleep(0.3)  # every worker connected
    t0 = time.monotonic()
    go.set()
    results = [out.get(timeout=300) for _ in procs]
    secs = time.monotonic() - t0
    for p in procs:
        p.join()
    errors = [v for s, v in results if s != "ok"]
    if errors:
        raise RuntimeError(errors[0])
    counts = [v for _, v in results]
    if k is None:
        left = int(r.get(NAME + ":stock"))
    else:
        with hilock.Client(url) as c:
            left = c.segmented_lock(NAME + f":{k}", k).stock()
    if sum(counts) != stock or left != 0:
        raise RuntimeError(f"sold {sum(counts)} of {stock}, {left} left")
    return {"seconds": secs, "sales_per_s": stock / secs, "counts": counts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--stock", type=int, default=2000)
    ap.add_argument("--hold-ms", type=float, default=1.0)
    ap.add_argument("--segments", default="1,2,4,8", help="comma-separated K values")
    ap.add_argument("--rounds", type=int, default=1, help="runs per row (median)")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    ks = [int(x) for x in args.segments.split(",")]
    if args.workers < 1 or args.stock < 1 or args.hold_ms < 0 or not ks or min(ks) < 1:
        ap.error("--workers, --stock, --segments must be >= 1, --hold-ms >= 0")
    hold = args.hold_ms / 1000.0

    rows: List[Dict[str, Any]] = []
    RedisServer = load_redis_server()
    with RedisServer() as srv:
        import redis
        server_version = redis.Redis.from_url(srv.url).info("server")["redis_version"]
        for k in [None] + ks:
            label = "Lock + stock key (GET/SET)" if k is None else f"segmented, K = {k}"
            runs = [run(srv.url, k, args.workers, args.stock, hold) for _ in range(args.rounds)]
            rate = statistics.median(x["sales_per_s"] for x in runs)
            counts = runs[len(runs) // 2]["counts"]
            rows.append({"label": label, "segments": k, "sales_per_s": rate,
                         "seconds": statistics.median(x["seconds"] for x in runs),
                         "counts": counts})
            print(f"{label}: {rate:,.0f} sales/s", file=sys.stderr)

    base = next((r["sales_per_s"] for r in rows if r["segments"] == 1), None)
    try:
        import hilock
        hilock_version = hilock.__version__
    except ImportError:
        hilock_version = version("hilock")
    print(f"\n{args.workers} processes sell {args.stock} units, each sale holding its "
          f"lock {args.hold_ms:g} ms (a sleep); redis-server {server_version} on loopback, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, hilock "
          f"{hilock_version}; median of {args.rounds} run(s). Exactly {args.stock} "
          f"sold in every run.\n")
    print("| guard | sales/s | seconds | vs K = 1 | sales per worker |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        vs = f"{r['sales_per_s'] / base:.2f}x" if base else "n/a"
        print(f"| {r['label']} | {r['sales_per_s']:,.0f} | {r['seconds']:.2f} | {vs} | "
              f"{min(r['counts'])}..{max(r['counts'])} |")
    if args.json:
        write_json(args.json, {"workers": args.workers, "stock": args.stock,
                               "hold_ms": args.hold_ms, "redis_version": server_version,
                               "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
