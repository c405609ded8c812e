"""The overselling demo: N processes sell from a stock of 100.

Each sale is a non-atomic read-modify-write (GET stock, check, SET stock-1),
the overselling bug of an unguarded inventory. Without a lock more than 100
items are sold; with each hilock lock type exactly 100 are. The semaphore
row uses one permit (a mutex). The segmented row splits the stock over 5
segments (the lock's own stock, sold with take() under each segment's lock),
so up to 5 sellers work at once.

    python examples/python/inventory_demo.py [--workers 8] [--stock 100] [--pause]

--pause: holders pause past their TTL (ttl 0.2 s, one sale in ten sleeps
0.3 s between its read and its write, as a garbage-collection stop would),
so a lock alone no longer keeps the count: the "lock" row oversells. The
"lock + fenced store" row keeps the stock in hilock.FencedStore, which
refuses the paused holder's late write (and read): it never oversells.

Uses $HILOCK_URL/$REDIS_URL, or starts a private redis-server."""
import argparse
import contextlib
import multiprocessing as mp
import time

import redis

import hilock
from _example import redis_url

STOCK, SOLD = "demo:stock", "demo:sold"
SEGMENTS = 5


def seller(url, kind, start, results):
    r = redis.Redis.from_url(url)
    client = hilock.Client(url)
    if kind == "lock":
        guard = client.lock("demo:inventory", ttl=10.0)
    elif kind == "simple_lock":
        guard = client.simple_lock("demo:inventory")
    elif kind == "lease":
        guard = client.lease("demo:inventory", ttl=10.0)
    elif kind == "rlock":
        guard = client.rlock("demo:inventory", ttl=10.0)
    elif kind == "rwlock":  # a sale writes: the exclusive side
        guard = client.rwlock("demo:inventory", ttl=10.0).write()
    elif kind == "semaphore":
        guard = client.semaphore("demo:inventory", 1, ttl=10.0)
    elif kind == "fair_lock":
        guard = client.fair_lock("demo:inventory", ttl=10.0)
    elif kind == "multi_lock":  # the stock and a ledger, taken together
        guard = client.multi_lock(["demo:inventory", "demo:ledger"], ttl=10.0)
    elif kind == "sequential_lock":
        guard = client.sequential_lock("demo:inventory", ttl=10.0)
    elif kind == "segmented":
        guard = client.segmented_lock("demo:inventory", SEGMENTS, ttl=10.0)
    else:
        guard = contextlib.nullcontext()
    start.wait()
    sold = 0
    while kind == "segmented":
        try:
            with guard:
                time.sleep(0.0005)  # the same work, inside the segment
                sold += guard.take(1)
        except hilock.SoldOut:
            break
        r.incr(SOLD)
    while kind != "segmented":
        with guard:
            stock = int(r.get(STOCK))
            if stock <= 0:
                break
            time.sleep(0.0005)  # work between the read and the write
            r.set(STOCK, stock - 1)
            r.incr(SOLD)
            sold += 1
    results.put(sold)
    client.close()


def seller_paused(url, kind, start, results):
    """One seller in --pause mode: auto-renewal off, one sale in ten paused
    past the TTL between read and write."""
    r = redis.Redis.from_url(url)
    client = hilock.Client(url)
    store = client.fenced_store()
    start.wait()
    sold = refused = i = 0
    while True:
        lk = client.lock("demo:inventory", ttl=0.2, auto_renew=False)
        lk.acquire()
        i += 1
        try:
            if kind == "lock":
                stock = int(r.get(STOCK))
            else:
                stock = int(store.get(STOCK, fence=lk.fence))
            if stock <= 0:
                break
            if i % 10 == 0:
                time.sleep(0.3)  # the pause: the lock expires meanwhile
            if kind == "lock":
                r.set(STOCK, stock - 1)
            else:
                store.set(STOCK, stock - 1, fence=lk.fence)
            sold += 1
        except hilock.StaleFence:
            refused += 1  # the store refused this stale holder: try again
        finally:
            with contextlib.suppress(hilock.LockNotOwnedError):
                lk.release()
    results.put(sold)
    client.close()


def run(url, kind, workers, stock):
    r = redis.Redis.from_url(url)
    r.set(STOCK, stock)
    r.set(SOLD, 0)
    if kind == "segmented":
        with hilock.Client(url) as c:
            c.segmented_lock("demo:inventory", SEGMENTS).stock_init(stock)
    ctx = mp.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    target = seller_paused if kind in ("lock (paused)", "fenced store") else seller
    procs = [ctx.Process(target=target, args=(url, kind.split()[0], start, results))
             for _ in range(workers)]
    for p in procs:
        p.start()
    t0 = time.monotonic()
    start.set()
    counts = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    secs = time.monotonic() - t0
    if kind == "segmented":
        with hilock.Client(url) as c:
            return sum(counts), c.segmented_lock("demo:inventory", SEGMENTS).stock(), secs
    return sum(counts), int(r.get(STOCK)), secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--stock", type=int, default=100)
    ap.add_argument("--pause", action="store_true",
                    help="holders pause past their TTL: a lock alone oversells, "
                         "the fenced store does not")
    args = ap.parse_args()
    with redis_url() as url:
        print(f"{args.workers} processes selling a stock of {args.stock} ({url})\n")
        print(f"| {'guard':<15} | {'sold':>5} | {'oversold':>8} | {'stock left':>10} | {'seconds':>7} |")
        print(f"|{'-' * 17}|{'-' * 7}|{'-' * 10}|{'-' * 12}|{'-' * 9}|")
        ok = True
        kinds = ("none", "lock", "simple_lock", "lease", "rlock", "rwlock", "semaphore",
                 "multi_lock", "sequential_lock", "fair_lock", "segmented")
        if args.pause:
            kinds = ("lock (paused)", "fenced store")
        for kind in kinds:
            sold, left, secs = run(url, kind, args.workers, args.stock)
            over = max(0, sold - args.stock)
            print(f"| {kind:<15} | {sold:>5} | {over:>8} | {left:>10} | {secs:>7.2f} |")
            if kind not in ("none", "lock (paused)") and (sold != args.stock or left != 0):
                ok = False
        if args.pause:
            print("\nwith the fenced store exactly", args.stock,
                  "sold" if ok else "NOT sold correctly")
        else:
            print("\nwith every lock type exactly", args.stock,
                  "sold" if ok else "NOT all correct")
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
