"""The Python API: the threading.Lock contract, TTL handling, tokens,
module-level helpers, the client's lifetime, GIL release and Ctrl-C."""
from __future__ import annotations

import re
import threading
import time

import pytest

import hilock
from helpers import (KINDS, NOT_RETURNED, Worker, interrupt_acquire, make_lock, run_in_threads,
                     wait_for, wait_turn_waiter)


# -- acquire / release / locked / owned ------------------------------------

def test_non_blocking_on_held_lock_returns_false_at_once(client) -> None:
    holder = client.lock("nb", ttl=5)
    assert holder.acquire()
    lk = client.lock("nb", ttl=5)
    before = client.stats()
    assert lk.acquire(blocking=False) is False
    assert lk.acquire(False) is False
    assert lk.acquire(timeout=0) is False
    # At once: refused as busy, without a wait (what the client counted).
    after = client.stats()
    assert after["busy"] - before["busy"] == 3
    assert after["waits"] == before["waits"]
    assert holder.owned()
    holder.release()


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_returns_false_after_timeout(kind, client) -> None:
    holder = make_lock(client, kind, "slow", ttl=10)
    assert holder.acquire()
    lk = make_lock(client, kind, "slow", ttl=10)
    t0 = time.monotonic()
    assert lk.acquire(timeout=0.2) is False
    took = time.monotonic() - t0
    # The holder renews, so a wait that ignored the timeout would never end;
    # 2 s bounds it with room for a stalled, loaded machine.
    assert 0.19 <= took < 2.0, f"acquire(timeout=0.2) took {took:.3f} s"
    holder.release()


def test_default_timeout_of_the_lock(client) -> None:
    holder = client.lock("deft", ttl=10)
    assert holder.acquire()
    lk = client.lock("deft", ttl=10, timeout=0.2)
    assert lk.timeout == 0.2
    for call in (lk.acquire, lambda: lk.acquire(True, -1)):
        t0 = time.monotonic()
        assert call() is False
        # Bounded by the 0.2 s default, not the renewed holder's endless
        # hold; 2 s leaves room for a stalled, loaded machine.
        assert 0.19 <= time.monotonic() - t0 < 2.0
    # An explicit timeout overrides the default: well under a 10 s default.
    patient = client.lock("deft", ttl=10, timeout=10.0)
    t0 = time.monotonic()
    assert patient.acquire(timeout=0.05) is False
    assert time.monotonic() - t0 < 3.0
    holder.release()
    assert client.lock("x").timeout is None


def test_waiter_gets_lock_soon_after_release(client) -> None:
    holder = client.lock("handover", ttl=10)
    assert holder.acquire()
    released = []

    def release_later():
        wait_for(lambda: client.waiting == 1, 5, what="the waiter to wait")
        released.append(True)
        holder.release()

    t = threading.Thread(target=release_later)
    t.start()
    try:
        lk = client.lock("handover", ttl=10)
        # The holder renews its 10 s TTL: only the release's wake-up can end
        # this wait in time (how quickly is for tests/bench).
        assert lk.acquire(timeout=3.0) is True
    finally:
        t.join(5)
    assert released == [True]
    lk.release()


def test_waiter_gets_expiring_lock_when_ttl_runs_out(client) -> None:
    holder = client.lock("lapse", ttl=0.3, auto_renew=False)
    assert holder.acquire()
    t0 = time.monotonic()
    lk = client.lock("lapse", ttl=5)
    assert lk.acquire(timeout=10.0)
    took = time.monotonic() - t0
    # Woken when the TTL it was told runs out, not at its 10 s deadline:
    # 3 s tells the two apart with room for a stalled, loaded machine.
    assert 0.2 <= took < 3.0, f"took {took:.3f} s for a 0.3 s TTL"
    assert lk.fence > holder.fence
    lk.release()


def test_timeout_with_non_blocking_is_value_error(client) -> None:
    lk = client.lock("argcheck")
    with pytest.raises(hilock.InvalidArgument) as info:
        lk.acquire(blocking=False, timeout=1.0)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValueError):
        lk.acquire(False, 0)
    # Nothing was acquired by the rejected calls.
    assert lk.locked() is False
    assert lk.acquire(blocking=False, timeout=-1) is True
    lk.release()


# -- context manager ------------------------------------------------------

def test_context_manager_timeout_never_runs_body(client) -> None:
    holder = client.lock("cm-busy", ttl=10)
    assert holder.acquire()
    ran = []
    t0 = time.monotonic()
    with pytest.raises(hilock.LockTimeout) as info:
        with client.lock("cm-busy", ttl=10, timeout=0.2):
            ran.append(True)
    took = time.monotonic() - t0
    assert ran == []
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value, hilock.LockError)
    # Bounded by the 0.2 s timeout, not the renewed holder's endless hold;
    # 2 s leaves room for a stalled, loaded machine.
    assert 0.19 <= took < 2.0
    assert holder.owned()  # the failed attempt did not disturb the holder
    holder.release()


def test_context_manager_releases_when_body_raises(client, rds) -> None:
    lk = client.lock("cm-raise", ttl=5)
    with pytest.raises(KeyError):
        with lk:
            raise KeyError("boom")
    assert rds.exists(lk.key) == 0
    assert lk.acquire(blocking=False)  # the object is reusable
    lk.release()


def test_context_manager_reports_lost_lock(client, rds) -> None:
    thief = client.lock("cm-lost", ttl=5)
    with pytest.raises(hilock.LockNotOwnedError):
        with client.lock("cm-lost", ttl=0.1, auto_renew=False):
            time.sleep(0.25)
            assert thief.acquire(blocking=False)
    # The thief's lock was not deleted by the stale exit.
    assert rds.get(thief.key) == thief.token.encode()
    thief.release()

    # When the body raises, its exception is the one that propagates.
    with pytest.raises(ZeroDivisionError):
        with client.lock("cm-lost", ttl=0.1, auto_renew=False):
            time.sleep(0.25)
            1 / 0


def test_nested_lock_objects(client) -> None:
    outer = client.lock("nest-a", ttl=5, timeout=0.1)
    twin = client.lock("nest-a", ttl=5, timeout=0.1)
    with outer:
        # Another object on the same name is another holder: not reentrant.
        assert twin.acquire(blocking=False) is False
        with pytest.raises(hilock.LockTimeout):
            with twin:
                pass
        # The same object again, from the same thread: like threading.Lock,
        # a second acquire does not succeed.
        assert outer.acquire(blocking=False) is False
        assert outer.acquire(timeout=0.05) is False
        # Different names nest freely.
        with client.lock("nest-b", ttl=5, timeout=1) as inner:
            with client.simple_lock("nest-c", timeout=1) as innermost:
                assert outer.owned() and inner.owned() and innermost.owned()
            assert innermost.locked() is False
        assert inner.locked() is False
        assert outer.owned()
    assert outer.locked() is False
    with twin:
        assert twin.owned()


# -- threads ---------------------------------------------------------------

def test_same_object_second_thread_blocks_until_release(client) -> None:
    lk = client.lock("threads", ttl=10)
    assert lk.acquire()
    result = []

    def other():
        ok = lk.acquire(timeout=5.0)
        result.append(ok)
        if ok:
            lk.release()

    t = threading.Thread(target=other)
    t.start()
    wait_turn_waiter(lk, t)
    # Room for a wrong grant to show: the turn's wait wakes every 0.2 s to
    # look again.
    time.sleep(0.3)
    assert result == [], "a second thread acquired a held Lock object"
    # Non-blocking attempts from other threads fail meanwhile.
    probe = []
    p = threading.Thread(target=lambda: probe.append(lk.acquire(blocking=False)))
    p.start()
    p.join(5)
    assert probe == [False]
    lk.release()
    t.join(5)
    assert not t.is_alive()
    # Granted within its 5 s although the lock renews a 10 s TTL: woken by
    # the release.
    assert result == [True]
    assert lk.locked() is False


def test_release_from_another_thread(client) -> None:
    """threading.Lock may be released by a thread other than the acquirer."""
    lk = client.lock("handoff", ttl=10)
    assert lk.acquire()
    Worker(lk.release).outcome(5)  # raises what release raised there
    assert lk.locked() is False
    assert lk.acquire(blocking=False)
    lk.release()


def _hammer(lock_for_thread, n_threads: int = 4, n_iter: int = 15):
    """Threads doing a non-atomic increment under a lock; returns the count
    and the number of times two threads were inside at once."""
    state = {"count": 0, "inside": 0, "overlaps": 0}

    def worker(i):
        lk = lock_for_thread(i)
        for _ in range(n_iter):
            assert lk.acquire(timeout=10)
            state["inside"] += 1
            if state["inside"] > 1:
                state["overlaps"] += 1
            v = state["count"]
            time.sleep(0.0005)
            state["count"] = v + 1
            state["inside"] -= 1
            lk.release()

    run_in_threads(worker, n_threads, 30)
    return state["count"], state["overlaps"], n_threads * n_iter


@pytest.mark.parametrize("kind", KINDS)
def test_threads_sharing_one_lock_object(kind, client) -> None:
    lk = make_lock(client, kind, "shared-object", ttl=10)
    count, overlaps, expected = _hammer(lambda i: lk)
    assert overlaps == 0
    assert count == expected


def test_threads_with_own_objects_on_one_client(client) -> None:
    count, overlaps, expected = _hammer(lambda i: client.lock("per-thread", ttl=10))
    assert overlaps == 0
    assert count == expected


# -- TTL: extend, renew, validity -------------------------------------------

@pytest.mark.parametrize("kind", ["expiring", "lease"])
def test_extend_renew_validity(kind, client, rds) -> None:
    lk = make_lock(client, kind, "ttl", ttl=1.0)
    assert lk.validity == 0.0
    assert lk.acquire()
    key = lk.key
    v = lk.validity
    assert 0.9 <= v <= 1.0
    assert 900 <= rds.pttl(key) <= 1000

    lk.extend(2.0)  # add
    assert 2800 <= rds.pttl(key) <= 3000
    assert 2.8 <= lk.validity <= 3.0

    lk.extend(0.5, replace=True)  # set
    assert 400 <= rds.pttl(key) <= 500
    assert 0.4 <= lk.validity <= 0.5

    lk.renew()  # back to the lock's ttl
    assert 900 <= rds.pttl(key) <= 1000
    t0 = time.monotonic()
    v1 = lk.validity
    time.sleep(0.2)
    v2 = lk.validity
    slept = time.monotonic() - t0
    # Validity counts down with the clock: by what passed between the reads
    # (measured, as a loaded machine may stretch the sleep).
    assert 0.15 <= v1 - v2 <= slept + 0.05, (v1, v2, slept)

    lk.release()
    assert lk.validity == 0.0


def test_validity_lapses_locally(client) -> None:
    lk = client.lock("lapse-local", ttl=0.2, auto_renew=False)
    assert lk.acquire()
    assert lk.validity > 0.1
    time.sleep(0.25)
    assert lk.validity == 0.0
    assert lk.owned() is False


def test_lease_held_by_renewing(client, rds) -> None:
    lease = client.lease("renewed", ttl=0.4, auto_renew=False)
    assert lease.acquire()
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        time.sleep(0.1)
        lease.renew()
        assert lease.validity > 0.3
    # 1 s later, 2.5 TTLs, still ours.
    assert lease.owned()
    assert rds.get(lease.key) == lease.token.encode()
    time.sleep(0.5)
    assert lease.owned() is False
    assert lease.locked() is False


def test_simple_lock_has_no_ttl(client, rds) -> None:
    lk = client.simple_lock("no-ttl")
    assert lk.ttl is None
    assert lk.validity == 0.0
    assert lk.acquire()
    assert lk.validity == float("inf")
    assert rds.pttl(lk.key) == -1
    with pytest.raises(hilock.UnsupportedError):
        lk.extend(1.0)
    with pytest.raises(hilock.UnsupportedError):
        lk.renew()
    assert lk.owned()
    lk.release()
    assert lk.validity == 0.0


# -- token, fence, properties ------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_token_and_fence(kind, client, rds) -> None:
    a = make_lock(client, kind, "tok", ttl=5)
    b = make_lock(client, kind, "tok", ttl=5)
    assert a.token is None and a.fence is None

    assert a.acquire()
    t1, f1 = a.token, a.fence
    assert re.fullmatch(r"[0-9a-f]{32}", t1)
    assert rds.get(a.key) == t1.encode()
    assert f1 > 10**15  # a new name's first fence: the server's clock in us
    a.release()
    assert a.token is None
    assert a.fence == f1  # the last grant's fence stays readable

    assert b.acquire()
    assert b.fence > f1
    assert b.token != t1
    b.release()

    assert a.acquire()
    assert a.fence > b.fence
    assert a.token not in (t1, None)
    a.release()
    assert int(rds.get(b"hilock:{tok}:fence")) == a.fence


def test_properties(client) -> None:
    lk = client.lock("orders:42", ttl=1.5, timeout=2)
    assert lk.name == "orders:42"
    assert lk.key == b"hilock:{orders:42}:lock"
    assert lk.ttl == 1.5
    assert lk.timeout == 2.0
    assert client.lease(b"raw\xff", ttl=0.25).key == b"hilock:{raw\xff}:lock"
    assert client.lease(b"raw", ttl=0.25).ttl == 0.25
    # str names are UTF-8.
    assert client.lock("zürich").key == "hilock:{zürich}:lock".encode()
    # A fractional millisecond rounds up, never to 0.
    assert client.lock("tiny", ttl=0.0101).ttl == 0.011
    assert "orders:42" in repr(lk)


# -- module level, default client --------------------------------------------

def test_default_url_order(monkeypatch) -> None:
    assert hilock.default_url() == "redis://127.0.0.1:6379/0"
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1111/0")
    assert hilock.default_url() == "redis://127.0.0.1:1111/0"
    monkeypatch.setenv("HILOCK_URL", "redis://127.0.0.1:2222/0")
    assert hilock.default_url() == "redis://127.0.0.1:2222/0"


def test_module_level_lock_uses_hilock_url(default_client_env, monkeypatch, rds,
                                           redis_url) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # must lose
    with hilock.lock("module", ttl=5, timeout=1) as lk:
        assert rds.get(b"hilock:{module}:lock") == lk.token.encode()
        assert 4000 < rds.pttl(b"hilock:{module}:lock") <= 5000
    assert rds.exists(b"hilock:{module}:lock") == 0
    dc = hilock.default_client()
    assert dc.url == redis_url
    assert hilock.default_client() is dc  # one per process

    s = hilock.simple_lock("module-simple")
    assert s.acquire(blocking=False)
    assert rds.pttl(b"hilock:{module-simple}:lock") == -1
    s.release()
    le = hilock.lease("module-lease", ttl=2)
    assert le.acquire(blocking=False)
    le.renew()
    le.release()


def test_client_without_url_reads_environment(monkeypatch, rds, redis_url) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    with hilock.Client() as c:
        assert c.url == redis_url
        c.ping()


# -- client lifetime ---------------------------------------------------------

def test_client_context_manager_and_close(rds, redis_url) -> None:
    with hilock.Client(redis_url) as c:
        assert c.url == redis_url
        assert c.ping() is None
        assert "open" in repr(c)
        lk = c.lock("lifetime", ttl=5)
        assert lk.acquire()
    assert "closed" in repr(c)

    with pytest.raises(hilock.ConnectionError):
        c.ping()
    with pytest.raises(hilock.ConnectionError):
        c.lock("after-close")
    # Closing released the lock and reported it lost.
    assert lk.lost and lk.validity == 0.0
    assert rds.exists(b"hilock:{lifetime}:lock") == 0
    with pytest.raises(hilock.ConnectionError):
        lk.release()
    with pytest.raises(hilock.ConnectionError):
        lk.locked()
    c.close()  # idempotent


def test_close_is_safe_from_many_threads(redis_url) -> None:
    c = hilock.Client(redis_url)
    lk = c.lock("closing", ttl=5)
    barrier = threading.Barrier(4)

    def closer(_i: int) -> None:
        barrier.wait(5)
        c.close()

    run_in_threads(closer, 4, 5)
    with pytest.raises(hilock.ConnectionError):
        lk.acquire(blocking=False)


def test_close_wakes_a_blocked_acquire(rds, redis_url) -> None:
    c = hilock.Client(redis_url)
    holder = c.lock("wake", ttl=10)
    assert holder.acquire()
    waiter = c.lock("wake", ttl=10)
    out = []

    def wait():
        try:
            out.append(waiter.acquire(timeout=5.0))
        except BaseException as e:  # noqa: BLE001
            out.append(e)
        out.append(time.monotonic())

    t = threading.Thread(target=wait)
    t.start()
    wait_for(lambda: c.waiting == 1, 5, what="the waiter to wait")
    closed = time.monotonic()
    c.close()
    t.join(6)
    assert not t.is_alive()
    assert isinstance(out[0], hilock.ConnectionError), out
    # Woken by close(), not by its 5 s timeout: 2.5 s tells the two apart
    # with room for a stalled, loaded machine.
    assert out[1] - closed < 2.5, f"woke {out[1] - closed:.3f} s after close()"
    # Closing released the holder's grant too.
    assert rds.exists(b"hilock:{wake}:lock") == 0
    assert holder.lost


# -- GIL and signals ---------------------------------------------------------

def _count_while(action) -> int:
    """Iterations a busy Python thread completes while action() runs here."""
    stop = threading.Event()
    out = []

    def counter():
        n = 0
        while not stop.is_set():
            n += 1
        out.append(n)

    t = threading.Thread(target=counter)
    t.start()
    try:
        action()
    finally:
        stop.set()
        t.join(5)
    return out[0]


def test_gil_released_while_blocked_in_acquire(client) -> None:
    holder = client.lock("gil", ttl=10)
    assert holder.acquire()
    waiter = client.lock("gil", ttl=10)

    baseline = _count_while(lambda: time.sleep(1.0))
    results = []

    def blocked():
        t0 = time.monotonic()
        results.append(waiter.acquire(timeout=1.0))
        results.append(time.monotonic() - t0)

    during = _count_while(blocked)
    assert results[0] is False
    assert results[1] >= 0.95  # the whole timeout passed (the ratio below is the point)
    assert baseline > 0
    ratio = during / baseline
    # Holding the GIL through the waits would starve the counter to a few
    # percent of its free-running rate.
    assert ratio > 0.4, f"counter ran at {ratio:.0%} of its rate while acquire() waited"
    holder.release()


def test_keyboard_interrupt_stops_blocked_acquire(client) -> None:
    holder = client.lock("ctrl-c", ttl=30)
    assert holder.acquire()
    waiter = client.lock("ctrl-c", ttl=30)
    # A late interrupt lands in the second after acquire, and is caught too.
    intr = interrupt_acquire(waiter)
    assert intr.sent is not None, "the timer never fired"
    assert intr.caught is not None, f"no KeyboardInterrupt; acquire returned {intr.returned!r}"
    assert intr.returned == NOT_RETURNED, "acquire finished before the interrupt"
    latency = intr.caught - intr.sent
    # Raised from inside the wait, not when its 5 s timeout ends it: 2.5 s
    # tells the two apart with room for a stalled, loaded machine.
    assert latency < 2.5, f"KeyboardInterrupt took {latency * 1000:.0f} ms"

    # The interrupted waiter holds nothing and remains usable.
    assert waiter.owned() is False
    assert holder.owned()
    holder.release()
    assert waiter.acquire(blocking=False)
    waiter.release()


def test_failed_release_does_not_disturb_a_waiting_thread(client) -> None:
    """threading.Lock: release() of an unheld lock raises and changes nothing."""
    holder = client.lock("waiting", ttl=10)
    assert holder.acquire()
    lk = client.lock("waiting", ttl=10)
    got = []
    t = threading.Thread(target=lambda: got.append(lk.acquire(timeout=5.0)))
    t.start()
    try:
        wait_for(lambda: client.waiting == 1, 5, what="t to wait inside lk.acquire()")
        with pytest.raises(hilock.LockNotOwnedError):
            lk.release()
    finally:
        holder.release()
        t.join(10)
    assert got == [True]
    # The object is held (by t): a non-blocking attempt must simply fail.
    assert lk.acquire(blocking=False) is False
    lk.release()


def test_interrupt_at_grant_time_leaves_nothing_held(client) -> None:
    holder = client.lock("ctrl-c-grant", ttl=0.25, auto_renew=False)
    assert holder.acquire()
    waiter = client.simple_lock("ctrl-c-grant")
    # The signal comes 20 ms before the holder's TTL runs out, inside the
    # wait slice that ends with the grant.
    result = interrupt_acquire(waiter, delay=0.23, timeout=2.0, linger=0.5).returned
    try:
        if result is not True:
            # acquire() did not report a grant, so none may exist.
            assert waiter.owned() is False, "interrupted acquire left the lock held"
            time.sleep(0.3)  # past the holder's TTL, whenever Ctrl-C landed
            assert waiter.acquire(blocking=False) is True
    finally:
        waiter.force_release()


def test_collected_held_lock_warns_what_becomes_of_it(client) -> None:
    """A held lock that is garbage-collected is not released: the
    ResourceWarning says what happens to it, by type (a simple lock has no
    TTL to lapse at)."""
    import gc
    import warnings

    def collected(lk) -> str:
        assert lk.acquire(blocking=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del lk
            gc.collect()
        texts = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
        assert len(texts) == 1, texts
        return texts[0]

    text = collected(client.simple_lock("collected-simple"))
    assert "no TTL" in text and "force_release()" in text and "lapses" not in text
    client.simple_lock("collected-simple").force_release()
    text = collected(client.lock("collected-lock", ttl=10, auto_renew=False))
    assert "lapses at its TTL" in text


def test_release_after_a_force_release_reports_the_loss_once(client) -> None:
    """A release that finds the grant gone raises LockNotOwnedError and is a
    loss: counted once per grant (not again after owned() found it), never
    as a hold, and ``lost`` stays set after the failed release."""
    lk = client.lock("forced", ttl=10, auto_renew=False)
    other = client.lock("forced", ttl=10)
    before = client.stats()

    def grew() -> tuple:
        s = client.stats()
        return (s["lost"] - before["lost"],
                s["hold_seconds"]["count"] - before["hold_seconds"]["count"])

    assert lk.acquire(blocking=False)
    assert other.force_release()
    assert lk.owned() is False and lk.lost is True
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()
    assert lk.lost is True and grew() == (1, 0)

    assert lk.acquire(blocking=False) and lk.lost is False
    assert other.force_release()
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()
    assert lk.lost is True and grew() == (2, 0)
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()
    assert lk.lost is True and grew() == (2, 0)


def test_a_thread_waiting_on_the_object_gets_it_when_the_grant_lapses(client) -> None:
    """One object is one holder across threads: when its grant lapses
    unrenewed, a thread waiting on the object is granted, as a waiter on
    another object would be."""
    lk = client.lock("lapse-waiter", ttl=0.3, auto_renew=False)
    assert lk.acquire()
    # The bound is generous: the grant lapses 0.3 s after it was made.
    w = Worker(lambda: lk.acquire(timeout=20.0), name="waiter")
    assert w.outcome(30.0) is True
    assert lk.owned()
    assert client.stats()["lost"] == 1
    lk.release()
