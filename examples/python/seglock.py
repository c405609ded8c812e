"""Segmented lock: a flash sale of 100 units split over 5 segments.

Eight buyers sell at once, each holding one segment (any free one that
still has stock, from a random start) and taking 1-3 units from it under
the lock. A segment that reaches 0 is skipped; when all are empty, acquire
raises SoldOut and the buyers stop. Exactly 100 units are sold."""
import random
import threading
import time
from collections import Counter

import hilock
from _example import redis_url

SEGMENTS, STOCK, BUYERS = 5, 100, 8

with redis_url() as url, hilock.Client(url) as client:
    sale = client.segmented_lock("flash:sku-10111", SEGMENTS, ttl=10.0)
    sale.stock_init(STOCK)
    print("stock per segment:", [sale.stock(i) for i in range(SEGMENTS)])

    sold = Counter()
    grants = Counter()
    guard = threading.Lock()

    def buyer(i):
        seg = client.segmented_lock("flash:sku-10111", SEGMENTS, ttl=10.0, timeout=10.0)
        while True:
            try:
                with seg:
                    n = seg.take(random.randint(1, 3), partial=True)
                    time.sleep(0.002)  # the order's work, inside the segment
            except hilock.SoldOut:
                return
            with guard:
                sold[i] += n
                grants[seg.segment] += 1

    threads = [threading.Thread(target=buyer, args=(i,)) for i in range(BUYERS)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"sold {sum(sold.values())} of {STOCK} in {time.monotonic() - t0:.2f} s;",
          "left:", sale.stock(), "sold out:", sale.sold_out())
    print("orders per segment:", dict(sorted(grants.items())))
    print("units per buyer:   ", dict(sorted(sold.items())))

    # Restock one segment only: the empty ones are skipped.
    sale.stock_set(3, 2)
    with sale:
        print(f"after restocking segment 3: granted segment {sale.segment}",
              f"(fence {sale.fence}), took {sale.take(5, partial=True)}")
    try:
        sale.acquire()
    except hilock.SoldOut:
        print("and sold out again")
