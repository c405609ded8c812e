"""Client.stats(), the "hilock" logger and hilock.metrics, against real
redis-servers: exact counts of a scripted run, counters under threads, log
records of a loss, a renewal failure and a reconnect, a Prometheus scrape."""
from __future__ import annotations

import asyncio
import logging
import sys
import threading
from typing import Any, Dict, Iterator, List

import pytest

import hilock
import hilock.asyncio
from helpers import fork_call, hilock_log, wait_for

COUNTERS = ("acquired", "busy", "timeouts", "waits", "errors", "lost", "renewals",
            "renewal_failures", "reconnects", "redirections", "failovers")


class Records(logging.Handler):
    """Keeps the records of the "hilock" logger (they come from the thread
    that reads the C layer's reports)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: List[logging.LogRecord] = []
        self.mu = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self.mu:
            self.records.append(record)

    def find(self, level: int, lock: Any, part: str) -> List[logging.LogRecord]:
        with self.mu:
            return [r for r in self.records
                    if r.levelno == level and getattr(r, "hilock_lock", "?") == lock
                    and part in r.getMessage()]


@pytest.fixture
def records() -> Iterator[Records]:
    with hilock_log(Records()) as h:
        yield h


def check_histogram(h: Dict[str, Any]) -> None:
    """Cumulative buckets in rising order of le, ending at +Inf with count."""
    les = [le for le, _ in h["buckets"]]
    counts = [n for _, n in h["buckets"]]
    assert les == sorted(les) and les[-1] == float("inf") and les[0] == 0.0001
    assert counts == sorted(counts)
    assert counts[-1] == h["count"]


def test_nothing_printed_by_default() -> None:
    handlers = logging.getLogger("hilock").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_a_new_client_counts_nothing(client: hilock.Client) -> None:
    s = client.stats()
    assert set(COUNTERS) <= set(s)
    assert all(s[k] == 0 for k in COUNTERS)
    for key in ("wait_seconds", "hold_seconds"):
        check_histogram(s[key])
        assert s[key]["count"] == 0 and s[key]["sum"] == 0


def test_scripted_run_counts_exactly(client: hilock.Client, rds: Any, redis_url: str,
                                     records: Records) -> None:
    other = hilock.Client(redis_url)
    try:
        one = client.lock("py:one", ttl=10)
        assert one.acquire()
        one.release()
        # Held by the other client for long: two refusals, one timeout.
        held = other.lock("py:two", ttl=10, auto_renew=False)
        assert held.acquire()
        two = client.lock("py:two", ttl=10)
        assert not two.acquire(blocking=False)
        assert not two.acquire(blocking=False)
        assert not two.acquire(timeout=0.4)
        # Held for 0.3 s: two waits that end in grants.
        short = other.lock("py:three", ttl=0.3, auto_renew=False)
        assert short.acquire()
        three = client.lock("py:three", ttl=10)
        assert three.acquire(timeout=5)
        three.release()
        short_sem = other.semaphore("py:sem", 1, ttl=0.3, auto_renew=False)
        assert short_sem.acquire()
        sem = client.semaphore("py:sem", 1, ttl=10)
        assert sem.acquire(timeout=5)
        sem.release()
        rl = client.rlock("py:r", ttl=10)
        assert rl.acquire()
        rl.release()
        # Renewed, then lost: its key is deleted.
        lost = client.lock("py:lost", ttl=0.6)
        assert lost.acquire()
        wait_for(lambda: client.stats()["renewals"] >= 1, 5, what="a renewal")
        rds.delete("hilock:{py:lost}:lock")
        wait_for(lambda: client.stats()["lost"] == 1, 5, what="the loss")
        assert lost.lost
        wait_for(lambda: records.find(logging.ERROR, "py:lost", "lost"), 5,
                 what="the loss's log record")

        s = client.stats()
        assert {k: s[k] for k in ("acquired", "busy", "timeouts", "waits", "errors", "lost",
                                  "renewal_failures", "redirections")} == {
            "acquired": 5, "busy": 2, "timeouts": 1, "waits": 3, "errors": 0, "lost": 1,
            "renewal_failures": 0, "redirections": 0}
        assert s["renewals"] >= 1
        wait, hold = s["wait_seconds"], s["hold_seconds"]
        check_histogram(wait)
        check_histogram(hold)
        assert wait["count"] == 3
        assert hold["count"] == 4  # released: one, three, sem, rl (not the lost one)
        # Every wait lasted about 0.3 s or more.
        assert all(n == 0 for le, n in wait["buckets"] if le <= 0.2)
        assert wait["sum"] >= 3 * 0.2
        assert other.stats()["acquired"] == 3
        client.reset_stats()
        s = client.stats()
        assert all(s[k] == 0 for k in COUNTERS)
        assert s["wait_seconds"]["count"] == 0 and s["hold_seconds"]["sum"] == 0
    finally:
        other.close()


def test_counters_add_up_under_threads(client: hilock.Client) -> None:
    rounds = 100
    results: List[List[bool]] = [[] for _ in range(8)]

    def hammer(i: int) -> None:
        lk = client.lock("py:hot", ttl=10)
        for _ in range(rounds):
            got = lk.acquire(blocking=False)
            results[i].append(got)
            if got:
                lk.release()

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    ok = sum(sum(r) for r in results)
    busy = sum(len(r) for r in results) - ok
    assert ok + busy == 8 * rounds
    s = client.stats()
    assert (s["acquired"], s["busy"], s["hold_seconds"]["count"]) == (ok, busy, ok)
    assert s["waits"] == s["timeouts"] == s["errors"] == 0


def test_asyncio_acquires_are_counted(redis_url: str, rds: Any) -> None:
    async def main() -> List[Dict[str, Any]]:
        async with hilock.asyncio.Client(redis_url) as ac:
            lk = ac.lock("py:async", ttl=10)
            assert await lk.acquire()
            assert not await ac.lock("py:async", ttl=10).acquire(blocking=False)
            await lk.release()
            rl = hilock.asyncio.Redlock([redis_url], "py:async-red", ttl=10)
            assert await rl.acquire()
            await rl.release()
            return [ac.stats(), rl.stats()]

    s, red = asyncio.run(main())
    assert (s["acquired"], s["busy"], s["waits"]) == (1, 1, 0)
    assert s["hold_seconds"]["count"] == 1
    assert (red["acquired"], red["hold_seconds"]["count"]) == (1, 1)


def test_redlock_counts_for_itself(client: hilock.Client, redis_url: str) -> None:
    rl = hilock.redlock([redis_url], "py:red", ttl=10)
    rival = hilock.redlock([redis_url], "py:red", ttl=10)
    assert rl.acquire()
    assert not rival.acquire(blocking=False)
    rl.release()
    assert rl.stats()["acquired"] == 1 and rl.stats()["hold_seconds"]["count"] == 1
    assert rival.stats()["busy"] == 1 and rival.stats()["acquired"] == 0
    rival.reset_stats()
    assert rival.stats()["busy"] == 0
    assert client.stats()["acquired"] == 0


def test_renewal_failure_loss_and_reconnect_are_logged(own_server: Any,
                                                       records: Records) -> None:
    with hilock.Client(own_server.url, reconnect=1.0, command_timeout=2.0) as c:
        lk = c.lock("py:down", ttl=0.6)
        assert lk.acquire()
        own_server.stop()
        wait_for(lambda: records.find(logging.WARNING, "py:down", "renewal failed"), 5,
                 what="a renewal failure's record")
        wait_for(lambda: records.find(logging.ERROR, "py:down", "lost"), 5,
                 what="the loss's record")
        s = c.stats()
        assert s["renewal_failures"] >= 1 and s["lost"] == 1
        own_server.start()
        c.ping()
        wait_for(lambda: records.find(logging.INFO, None, "reconnecting"), 5,
                 what="a reconnect's record")
        assert c.stats()["reconnects"] >= 1


def test_a_forked_child_logs_its_own_losses(client: hilock.Client, redis_url: str,
                                             records: Records) -> None:
    """The parent's reader thread does not survive fork(): the child reads
    the records of the client it inherited with a reader of its own."""
    assert client.stats()["acquired"] == 0  # the parent's reader runs

    def child() -> int:
        import redis
        lk = client.lock("py:child", ttl=10, auto_renew=False)
        assert lk.acquire()
        redis.Redis.from_url(redis_url).delete("hilock:{py:child}:lock")
        assert not lk.owned()
        wait_for(lambda: records.find(logging.ERROR, "py:child", "lost"), 5,
                 what="the child's loss record")
        return int(client.stats()["lost"])

    lost, _ = fork_call(child, 20)
    assert lost == 1
    assert not records.find(logging.ERROR, "py:child", "lost")  # the child's own


def test_prometheus_scrape(client: hilock.Client) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    import hilock.metrics

    registry = CollectorRegistry()
    collector = hilock.metrics.register(client, registry, name="orders")
    lk = client.lock("py:prom", ttl=10)
    assert lk.acquire()
    lk.release()
    held = client.lock("py:prom-held", ttl=10)
    assert held.acquire()  # a second grant, not released
    text = generate_latest(registry).decode()
    assert 'hilock_acquired_total{client="orders"} 2.0' in text
    assert 'hilock_busy_total{client="orders"} 0.0' in text
    assert 'hilock_lost_total{client="orders"} 0.0' in text
    assert 'hilock_renewals_total{client="orders"}' in text
    assert 'hilock_hold_seconds_count{client="orders"} 1.0' in text
    assert 'hilock_hold_seconds_bucket{client="orders",le="+Inf"} 1.0' in text
    assert 'hilock_acquire_wait_seconds_count{client="orders"} 0.0' in text
    assert 'hilock_acquire_wait_seconds_bucket{client="orders",le="0.0001"} 0.0' in text
    assert "# TYPE hilock_acquire_wait_seconds histogram" in text
    assert "# TYPE hilock_timeouts_total counter" in text
    registry.unregister(collector)
    # Without a name there is no label; another prefix renames the metrics.
    hilock.metrics.register(client, registry, prefix="app_locks")
    text = generate_latest(registry).decode()
    assert "app_locks_acquired_total 2.0" in text


def test_metrics_without_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "hilock.metrics", raising=False)
    for mod in [m for m in sys.modules if m.startswith("prometheus_client")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match="pip install prometheus_client"):
        import hilock.metrics  # noqa: F401


def test_prometheus_scrape_after_close(redis_url: str, rds: Any) -> None:
    """A closed client's series end; the other collectors of the registry
    are still scraped, through prometheus_client's HTTP exposition."""
    import urllib.request

    from prometheus_client import CollectorRegistry, generate_latest, start_http_server

    import hilock.metrics

    registry = CollectorRegistry()
    a = hilock.Client(redis_url)
    b = hilock.Client(redis_url)
    try:
        hilock.metrics.register(a, registry, name="a")
        hilock.metrics.register(b, registry, name="b")
        with a.lock("py:prom-a", ttl=10), b.lock("py:prom-b", ttl=10):
            pass
        a.close()
        text = generate_latest(registry).decode()
        assert 'client="a"' not in text
        assert 'hilock_acquired_total{client="b"} 1.0' in text
        server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        try:
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            with urllib.request.urlopen(url, timeout=30) as resp:
                assert resp.status == 200
                body = resp.read().decode()
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
        assert 'hilock_acquired_total{client="b"} 1.0' in body
        assert 'client="a"' not in body
        # The closed client's collector gives way to a new client of that name.
        c = hilock.Client(redis_url)
        try:
            hilock.metrics.register(c, registry, name="a")
            assert 'hilock_acquired_total{client="a"} 0.0' in generate_latest(registry).decode()
        finally:
            c.close()
    finally:
        a.close()
        b.close()


def test_prometheus_two_clients_need_names(redis_url: str, rds: Any) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    import hilock.metrics

    registry = CollectorRegistry()
    with hilock.Client(redis_url) as a, hilock.Client(redis_url) as b:
        first = hilock.metrics.register(a, registry)
        with pytest.raises(ValueError, match="already has a collector without a name"):
            hilock.metrics.register(b, registry)
        named = hilock.metrics.register(a, registry, name="orders")
        with pytest.raises(ValueError, match="named 'orders'"):
            hilock.metrics.register(b, registry, name="orders")
        hilock.metrics.register(b, registry, name="billing")
        hilock.metrics.register(b, registry, prefix="other")  # other metric names
        text = generate_latest(registry).decode()
        assert text.count("\nhilock_acquired_total ") == 1
        assert text.count('hilock_acquired_total{client="orders"}') == 1
        assert text.count('hilock_acquired_total{client="billing"}') == 1
        # Unregistered, a collector no longer stands in the way.
        registry.unregister(first)
        registry.unregister(named)
        hilock.metrics.register(b, registry)
        hilock.metrics.register(a, registry, name="orders")
        # Another registry is another scrape: the same name is fine there.
        hilock.metrics.register(a, CollectorRegistry())
