"""Reentrant lock: the holding thread may take it again; others wait.

As in the documents' Python and Java examples (a per-thread counter), but the
counts live in Redis, where operators can read them."""
import threading

import hilock
from _example import redis_url

with redis_url() as url, hilock.Client(url) as client:
    account = client.rlock("account:7", ttl=10.0)

    def debit():
        with account:  # re-entered by the thread that already holds it
            print("debit: hold count", account.hold_count())

    def transfer():
        with account:
            print("transfer: hold count", account.hold_count(), "fence", account.fence)
            debit()

    with account:
        t = threading.Thread(target=lambda: print("other thread, try:",
                                                  account.acquire(blocking=False)))
        t.start()
        t.join()
        transfer()
    print("released; held by anyone:", account.locked())
