"""Handing a grant over: ``lk.export()`` and ``client.adopt(text)``, in
another thread, a spawned process and a forked child; every family whose
holder is a token; what is refused (damaged or foreign text, a grant that is
gone, the reentrant and read-write locks) and that a refusal leaves the lock
as it was."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import hilock
from helpers import Stalled, assert_held, fork_call, lapsed, retry_stalled, wait_for

# Every family whose holder is a token: (id, factory on a client).
FAMILIES = {
    "lock": lambda c, n, ttl=10.0: c.lock(n, ttl=ttl),
    "simple": lambda c, n, ttl=10.0: c.simple_lock(n),
    "lease": lambda c, n, ttl=10.0: c.lease(n, ttl=ttl),
    "fair": lambda c, n, ttl=10.0: c.fair_lock(n, ttl=ttl),
    "sequential": lambda c, n, ttl=10.0: c.sequential_lock(n, ttl=ttl),
    "multi": lambda c, n, ttl=10.0: c.multi_lock([f"{n}-a", f"{n}-b"], ttl=ttl),
    "segmented": lambda c, n, ttl=10.0: c.segmented_lock(n, 3, ttl=ttl),
    "semaphore": lambda c, n, ttl=10.0: c.semaphore(n, 2, ttl=ttl),
}


def _free(client, family: str, name: str) -> bool:
    """Whether a fresh object of the family is granted at once (and give it
    back): nobody holds the lock."""
    probe = FAMILIES[family](client, name, 5.0)
    if not probe.acquire(blocking=False):
        return False
    probe.release()
    return True


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_another_thread_adopts_every_family(client, family) -> None:
    lk = FAMILIES[family](client, f"adopt-{family}")
    assert lk.acquire(blocking=False)
    fence = lk.fence
    text = lk.export()
    assert text.startswith("hilock2:")
    # The exporter forgot the grant: not held, nothing to release.
    assert lk.validity == 0.0 and lk.lost is False
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()

    out = {}

    def worker() -> None:
        a = client.adopt(text)
        out["type"] = type(a)
        out["fence"] = a.fence
        out["validity"] = a.validity
        out["owned"] = a.owned()
        if family != "simple":
            a.renew()
        out["locked_while_held"] = (lk.available() == 1 if family == "semaphore"
                                    else lk.locked())
        a.release()
        out["lost"] = a.lost

    t = threading.Thread(target=worker)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert out["type"] is type(lk)
    assert out["fence"] == fence
    assert out["validity"] > 0 and out["owned"] is True
    assert out["locked_while_held"] is True
    assert out["lost"] is False
    assert (lk.available() == 2 if family == "semaphore" else lk.locked() is False)
    if family not in ("segmented", "semaphore"):  # several holders may hold those
        assert _free(client, family, f"adopt-{family}")
    # The text is spent: the grant it names is gone.
    with pytest.raises(hilock.LockLost):
        client.adopt(text)


def test_adopted_object_extends_and_keeps_its_name(client, rds) -> None:
    lk = client.lock(b"adopt-bin\x00name", ttl=10.0)
    assert lk.acquire(blocking=False)
    token = lk.token
    a = client.adopt(lk.export())
    assert a.name == "adopt-bin\x00name" and a.key == lk.key and a.token == token
    a.extend(50.0, replace=True)
    assert 40_000 < rds.pttl(a.key) <= 50_000
    assert a.ttl == 10.0
    a.release()
    assert rds.exists(lk.key) == 0


def test_segmented_lock_adopts_its_segment(client) -> None:
    lk = client.segmented_lock("adopt-seg", 4, ttl=10.0)
    assert lk.acquire(blocking=False)
    seg = lk.segment
    a = client.adopt(lk.export())
    assert a.segment == seg and a.segments == 4
    a.release()


CHILD = r"""
import sys, hilock
url, text = sys.stdin.read().split("\n")[:2]
c = hilock.Client(url)
a = c.adopt(text)
assert a.validity > 0, a.validity
a.release()
print(type(a).__name__, a.lost)
c.close()
"""


def test_a_spawned_process_adopts_and_releases(client, rds, redis_url) -> None:
    lk = client.lock("adopt-proc", ttl=10.0)
    assert lk.acquire(blocking=False)
    text = lk.export()
    # The text goes through stdin: it is a secret (never on a command line).
    p = subprocess.run([sys.executable, "-c", CHILD], input=f"{redis_url}\n{text}\n",
                       capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["Lock", "False"]
    assert rds.exists(lk.key) == 0
    assert lk.validity == 0.0 and lk.locked() is False
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()


def test_a_forked_child_adopts_the_parents_grant(client, rds) -> None:
    lk = client.lock("adopt-fork", ttl=10.0)
    assert lk.acquire(blocking=False)
    text = lk.export()

    def child():
        a = client.adopt(text)
        held = a.validity > 0
        a.release()
        return [held, a.lost]

    out, _ = fork_call(child, timeout=30)
    assert out == [True, False]
    assert rds.exists(lk.key) == 0
    assert lk.validity == 0.0 and lk.lost is False


def test_a_grant_gone_before_adoption_is_lost(client) -> None:
    lk = client.lock("adopt-gone", ttl=10.0)
    assert lk.acquire(blocking=False)
    text = lk.export()
    assert lk.force_release() is True
    with pytest.raises(hilock.LockLost, match="gone"):
        client.adopt(text)
    # Taken by another owner meanwhile: not ours either.
    other = client.lock("adopt-gone", ttl=10.0)
    assert other.acquire(blocking=False)
    with pytest.raises(hilock.LockLost):
        client.adopt(text)
    assert other.owned()
    other.release()


def test_an_adopted_grant_deleted_later_is_reported_lost(client, rds) -> None:
    lk = client.fair_lock("adopt-later", ttl=10.0)
    assert lk.acquire(blocking=False)
    calls = []
    a = client.adopt(lk.export(), on_lost=calls.append)
    rds.delete(a.key)
    assert a.owned() is False
    assert a.lost is True and a.validity == 0.0
    # Loss callbacks run on hilock's notifier thread.
    wait_for(lambda: calls, timeout=10)
    assert calls == [a]


def test_damaged_or_foreign_text_is_invalid(client, rds, redis_url) -> None:
    lk = client.lock("adopt-bad", ttl=10.0)
    assert lk.acquire(blocking=False)
    token = lk.token.encode()
    spare = client.lock("adopt-bad2", ttl=10.0)
    assert spare.acquire(blocking=False)
    text = spare.export()
    bad = ["", "hilock2:", "garbage", "hilock3:" + text[8:], text + "=",
           text[:-1] + "+", text.replace("hilock2:", "HILOCK2:"), "hilock2:" + "A" * 200,
           "hilock1:" + text[8:]]
    bad += [text[:i] for i in range(0, len(text), 7)]
    # One character changed anywhere after the version: the name, the
    # family, the owner, the fence.
    bad += [text[:i] + ("A" if text[i] != "A" else "B") + text[i + 1:]
            for i in range(8, len(text))]
    for b in bad:
        with pytest.raises(hilock.InvalidArgument):
            client.adopt(b)
    for b in ("hilock2:\u00e9", 42, None):
        with pytest.raises(hilock.InvalidArgument):
            client.adopt(b)  # type: ignore[arg-type]
    # Another deployment's grant (another key prefix).
    with hilock.Client(redis_url, prefix="other:") as other:
        with pytest.raises(hilock.InvalidArgument, match="prefix"):
            other.adopt(text)
    # None of it touched the held lock, nor the exported one.
    assert rds.get(lk.key) == token and lk.owned()
    a = client.adopt(text)
    a.release()
    lk.release()


def test_the_text_stays_secret(client) -> None:
    lk = client.lock("adopt-secret", ttl=10.0)
    assert lk.acquire(blocking=False)
    token = lk.token
    r = repr(lk)
    text = lk.export()
    a = client.adopt(text)
    assert token not in r and token not in repr(a) and text not in repr(a)
    a.release()


def test_an_adopted_grant_auto_renews(client, rds) -> None:
    ttl = 0.3

    def scenario(i):
        lk = client.lock(f"adopt-renew-{i}", ttl=ttl)
        assert lk.acquire(blocking=False)
        a = client.adopt(lk.export())
        token = a.token.encode()
        t0 = time.monotonic()
        # Four TTLs: still held only if the adopted object renews it.
        time.sleep(4 * ttl)
        assert_held(rds, a, token)
        if not a.owned():
            lapsed(a, "the adopted lease lapsed")
        if time.monotonic() - t0 > 20 * ttl:
            raise Stalled("the test thread stalled")
        a.release()

    retry_stalled(scenario)


def test_reentrant_and_read_write_locks_refuse(client) -> None:
    r = client.rlock("adopt-r", ttl=10.0)
    assert r.acquire(blocking=False)
    with pytest.raises(ValueError, match="thread id") as e:
        r.export()
    assert isinstance(e.value, hilock.NotTransferable)
    assert isinstance(e.value, hilock.UnsupportedError)
    assert r.validity > 0
    r.release()
    rw = client.rwlock("adopt-rw", ttl=10.0)
    for side in (rw.read(), rw.write()):
        assert side.acquire(blocking=False)
        with pytest.raises(hilock.NotTransferable):
            side.export()
        assert side.validity > 0
        side.release()


def test_export_without_a_grant_is_not_owned(client) -> None:
    lk = client.lock("adopt-none", ttl=10.0)
    with pytest.raises(hilock.LockNotOwnedError):
        lk.export()
    sem = client.semaphore("adopt-none-sem", 1, ttl=10.0)
    with pytest.raises(hilock.LockNotOwnedError):
        sem.export()


ASYNC_FAMILIES = {
    "lock": lambda c, n: c.lock(n, ttl=10.0),
    "fair": lambda c, n: c.fair_lock(n, ttl=10.0),
    "sequential": lambda c, n: c.sequential_lock(n, ttl=10.0),
    "multi": lambda c, n: c.multi_lock([f"{n}-a", f"{n}-b"], ttl=10.0),
    "segmented": lambda c, n: c.segmented_lock(n, 2, ttl=10.0),
    "semaphore": lambda c, n: c.semaphore(n, 1, ttl=10.0),
}


@pytest.mark.parametrize("family", sorted(ASYNC_FAMILIES))
def test_another_task_adopts_with_asyncio(rds, redis_url, family) -> None:
    import asyncio

    import hilock.asyncio as ha

    async def main() -> None:
        c = ha.Client(redis_url)
        try:
            lk = ASYNC_FAMILIES[family](c, f"adopt-aio-{family}")
            assert await lk.acquire(blocking=False)
            text = lk.export()
            with pytest.raises(hilock.LockNotOwnedError):
                await lk.release()

            async def other() -> None:
                a = await c.adopt(text)
                assert type(a) is type(lk)
                if family == "semaphore":
                    assert a.held_count() == 1  # the permit is this task's
                else:
                    assert a.validity > 0
                await a.release()

            await asyncio.create_task(other())
            # Free again: this object (which exported) is granted at once.
            assert await lk.acquire(blocking=False)
            await lk.release()
            with pytest.raises(hilock.LockLost):
                await c.adopt(text)
            r = c.rlock(f"adopt-aio-r-{family}")
            assert await r.acquire(blocking=False)
            with pytest.raises(hilock.NotTransferable):
                r.export()
            await r.release()
        finally:
            await c.close()

    asyncio.run(main())


def test_a_lock_delay_goes_with_the_grant(client, rds) -> None:
    """The exporter's lock delay is part of the grant: the adopter's
    renewals push the marker along with the lock, and its release clears
    it; an export of the older layout (without the delay) is refused by
    name."""
    for make in (lambda: client.lock("adopt-delay", ttl=2.0, auto_renew=False, lock_delay=20),
                 lambda: client.fair_lock("adopt-delay", ttl=2.0, auto_renew=False, lock_delay=20),
                 lambda: client.multi_lock(["adopt-delay"], ttl=2.0, auto_renew=False,
                                           lock_delay=20)):
        lk = make()
        assert lk.acquire(blocking=False)
        text = lk.export()
        a = client.adopt(text, auto_renew=False)
        assert a.lock_delay == 20
        a.extend(30, replace=True)
        # 30 s of TTL and the 20 s delay: without the delay in the grant the
        # marker would keep the 2 s + 20 s of the exporter's grant.
        assert rds.pttl("hilock:{adopt-delay}:delay") > 40_000
        a.release()
        assert not rds.exists("hilock:{adopt-delay}:delay")
    with pytest.raises(hilock.InvalidArgument, match="older hilock"):
        client.adopt("hilock1:" + text[8:])
