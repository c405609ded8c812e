"""Fork: a child made by os.fork() holds nothing of its parent's.

Each test forks with os.fork() itself (helpers.fork_call): the child runs a
function, sends its findings back through a pipe and leaves with os._exit.

- In the child the parent's lock refuses release/extend/renew with
  ForkedLockError (a LockNotOwnedError) and sends nothing, so the parent's
  key is untouched; owned() is False; the same holds for an rlock.
- The child can take locks of its own with the inherited client.
- The parent keeps renewing, undisturbed, during and after the child's life,
  and its connections see no protocol errors.
- No loss callback of the parent's locks ever runs in the child.
- Forking while another thread is blocked in acquire does not deadlock.

The parent's locks have a short TTL; if a loaded machine starves their
renewal, the scenario is retried (helpers.retry_stalled, helpers.lapsed).
"""
from __future__ import annotations

import os
import select
import threading
import time

import pytest

import hilock
from helpers import (Stalled, assert_held, blocked_worker, fork_call, lapsed, retry_stalled,
                     wait_for, within)

TTL = 0.3


class Losses:
    def __init__(self) -> None:
        self.calls = []
        self.event = threading.Event()

    def __call__(self, lock) -> None:
        self.calls.append((os.getpid(), lock))
        self.event.set()


def _refusals(lk) -> dict:
    """What the child sees when it touches its parent's lock."""
    seen = {}
    for verb, call in (("release", lk.release), ("extend", lambda: lk.extend(100.0)),
                       ("renew", lk.renew)):
        try:
            call()
            seen[verb] = "returned"
        except hilock.ForkedLockError as e:
            seen[verb] = ["ForkedLockError", isinstance(e, hilock.LockNotOwnedError),
                          e.code == hilock._hilock.HILOCK_EFORKED]
        except Exception as e:  # noqa: BLE001 - reported to the parent
            seen[verb] = f"{type(e).__name__}: {e}"
    return seen


def test_child_cannot_touch_parents_lock(client, rds) -> None:
    def scenario(i):
        name = f"parent-{i}"
        lost = Losses()
        lk = client.lock(name, ttl=TTL, on_lost=lost)
        assert lk.acquire(blocking=False)
        token, fence = lk.token.encode(), lk.fence
        t0 = time.monotonic()

        def child():
            out = {"refused": _refusals(lk)}
            out["owned"] = lk.owned()
            out["validity"] = lk.validity
            out["lost"] = lk.lost
            # The parent holds the name: the child's own object cannot get it.
            out["same_name"] = client.lock(name, ttl=5.0).acquire(blocking=False)
            # A lock of its own, renewed by the child's own watchdog, 3 TTLs.
            own = client.lock(f"child-own-{i}", ttl=TTL)
            out["own_acquired"] = own.acquire(timeout=2.0)
            time.sleep(3 * TTL)
            out["own_owned"] = own.owned()
            out["own_validity"] = own.validity
            try:
                own.release()
                out["own_release"] = "ok"
            except hilock.LockNotOwnedError:
                out["own_release"] = "lapsed"
            out["own_fence"] = own.fence
            out["callbacks"] = len(lost.calls)
            return out

        out, _ = fork_call(child, timeout=10)
        assert out["refused"] == {v: ["ForkedLockError", True, True]
                                  for v in ("release", "extend", "renew")}
        assert out["owned"] is False and out["validity"] == 0.0 and out["lost"] is False
        assert out["same_name"] is False
        assert out["own_acquired"] is True and out["own_fence"] > 10**15  # a new name
        assert out["callbacks"] == 0
        assert rds.exists(f"hilock:{{child-own-{i}}}:lock") == 0

        # The parent's key is untouched: same token, never extended to 100 s.
        assert_held(rds, lk, token)
        assert 0 < rds.pttl(lk.key) <= TTL * 1000
        # And the parent keeps renewing after the child is gone.
        time.sleep(max(0.0, t0 + 4 * TTL - time.monotonic()))
        assert_held(rds, lk, token)
        assert lk.lost is False and lk.validity > 0 and lk.owned()
        assert lk.fence == fence
        lk.release()
        assert rds.exists(lk.key) == 0
        assert lost.calls == []
        # The child's own lease, renewed in the child, held throughout (or,
        # starved, it knew: no validity left).
        if not (out["own_owned"] and out["own_release"] == "ok"):
            assert out["own_validity"] == 0.0, out
            raise Stalled("the child's own lease lapsed")

    retry_stalled(scenario)


def test_child_cannot_touch_parents_rlock(client, rds) -> None:
    def scenario(i):
        rl = client.rlock(f"parent-r-{i}", ttl=TTL)
        assert rl.acquire(blocking=False) and rl.acquire(blocking=False)
        before = rds.hgetall(rl.key)
        # The owner's count (and '<owner>:op', the nonce of its last call).
        assert [v for k, v in before.items() if not k.endswith(b":op")] == [b"2"]

        def child():
            out = {}
            try:
                rl.release()
                out["release"] = "returned"
            except hilock.ForkedLockError:
                out["release"] = "ForkedLockError"
            out["hold_count"] = rl.hold_count()
            out["owned"] = rl.owned()
            out["locked"] = rl.locked()
            out["validity"] = rl.validity
            # The child is another owner (new client id): it may not re-enter.
            out["reenter"] = rl.acquire(blocking=False)
            return out

        out, _ = fork_call(child, timeout=10)
        if rds.hgetall(rl.key) != before:
            lapsed(rl, "the parent's rlock lapsed")
        assert out == {"release": "ForkedLockError", "hold_count": 0, "owned": False,
                       "locked": True, "validity": 0.0, "reenter": False}
        time.sleep(2 * TTL)  # still renewed by the parent
        if rds.hgetall(rl.key) != before:
            lapsed(rl, "the parent's rlock lapsed")
        assert rl.hold_count() == 2 and rl.lost is False
        rl.release()
        rl.release()
        assert rds.exists(rl.key) == 0

    retry_stalled(scenario)


def test_parent_renews_undisturbed_through_childs_life(client, rds) -> None:
    """Parent threads keep using the client (and its watchdog renews) while a
    child hammers the inherited client: no reply goes astray."""
    def scenario(i):
        lost = Losses()
        lk = client.lock(f"steady-{i}", ttl=TTL, on_lost=lost)
        assert lk.acquire(blocking=False)
        token = lk.token.encode()
        stop = threading.Event()
        errors = []
        rounds = [0]

        def parent_traffic():
            other = client.lock(f"parent-traffic-{i}", ttl=5.0, auto_renew=False)
            while not stop.is_set():
                try:
                    client.ping()
                    assert other.acquire(timeout=1.0)
                    assert other.owned()
                    other.release()
                    lk.locked()
                    rounds[0] += 1
                except Exception as e:  # noqa: BLE001 - collected for the test
                    errors.append(repr(e))
                    return

        t = threading.Thread(target=parent_traffic, daemon=True)
        t.start()
        try:
            def child():
                n = 0
                # Not auto-renewed: this test is about traffic on the inherited
                # pool (repeated auto-renewed grants in a child are
                # test_child_takes_auto_renewed_locks_repeatedly).
                mine = client.lock(f"child-traffic-{i}", ttl=5.0, auto_renew=False)
                end = time.monotonic() + 2 * TTL
                while time.monotonic() < end:
                    client.ping()
                    assert mine.acquire(timeout=1.0)
                    mine.release()
                    n += 1
                return n

            t0 = time.monotonic()
            n_child, _ = fork_call(child, timeout=10)
            n_parent_during = rounds[0]
            # Keep going after the child's exit: past 3 TTLs in all.
            time.sleep(max(0.0, t0 + 4 * TTL - time.monotonic()))
        finally:
            stop.set()
            t.join(5)
        assert errors == []
        assert n_child > 5 and n_parent_during > 5 and rounds[0] > n_parent_during
        assert_held(rds, lk, token)
        assert lk.lost is False and lost.calls == []
        assert lk.owned()
        lk.release()

    retry_stalled(scenario)


def test_no_parent_callbacks_in_child(client, rds) -> None:
    """The parent's lock is lost while the child lives: its callback runs in
    the parent, once, and never in the child."""
    lost = Losses()
    lk = client.lock("lost-in-parent", ttl=TTL, on_lost=lost)
    assert lk.acquire(blocking=False)
    r, w = os.pipe()
    forked_r, forked_w = os.pipe()

    def child():
        os.close(w)
        os.write(forked_w, b"x")  # the child lives, the lock still held
        os.read(r, 1)  # the parent has taken the key away
        time.sleep(3 * TTL)
        return {"calls": len(lost.calls), "lost": lk.lost}

    results = {}
    t = threading.Thread(target=lambda: results.update(out=fork_call(child, timeout=10)[0]),
                         daemon=True)
    t.start()
    assert select.select([forked_r], [], [], 10)[0], "the child never started"
    os.read(forked_r, 1)
    rds.set(lk.key, "someone-else", px=5000)
    os.write(w, b"x")
    assert lost.event.wait(3.0), "the parent never learned its loss"
    t.join(10)
    for fd in (r, w, forked_r, forked_w):
        os.close(fd)
    assert results["out"] == {"calls": 0, "lost": False}
    assert lost.calls == [(os.getpid(), lk)]
    assert rds.get(lk.key) == b"someone-else"


def test_fork_while_a_thread_waits_in_acquire(client, rds) -> None:
    def scenario(i):
        name = f"contended-{i}"
        holder = client.lock(name, ttl=10.0)  # renewed by the watchdog
        waiter = client.lock(name, ttl=10.0)
        assert holder.acquire(blocking=False)
        w = blocked_worker(rds, waiter.acquire, True, 10.0)
        time.sleep(0.15)  # inside the BLPOP, past an interrupt-hook slice

        def child():
            client.ping()
            mine = client.lock(f"child-side-{i}", ttl=TTL)
            assert mine.acquire(timeout=1.0)
            mine.release()
            rl = client.rlock(f"child-side-r-{i}", ttl=TTL, auto_renew=False)
            with rl:
                with rl:
                    pass
            other = client.lock(name, ttl=TTL)
            free = other.acquire(timeout=0.1)
            return {"contended_free": free, "holder_refused": _refusals(holder)["release"]}

        out, took = fork_call(child, timeout=5.0)
        assert out["contended_free"] is False
        assert out["holder_refused"][0] == "ForkedLockError"

        # The parent's blocked waiter is unharmed: the release hands it over.
        assert w.is_alive()
        released = time.monotonic()
        holder.release()
        assert w.outcome(5.0) is True
        waiter.release()
        wait_for(lambda: rds.exists(holder.key) == 0, 1.0, what="the lock to be free")
        within(took, 2.0, "the child finished", stall_limit=5.0)
        within(w.finished_at - released, 0.2, "the parent's waiter woke after the release")

    retry_stalled(scenario)


def test_child_takes_auto_renewed_locks_repeatedly(client, rds) -> None:
    """A child of a process whose watchdog ran takes auto-renewed locks one
    after another with the inherited client."""
    # A long TTL: the parent's watchdog spends the fork asleep on its
    # condition variable (renewal every 10 s), as it does most of the time.
    lk = client.lock("renewed-in-parent", ttl=30.0)
    assert lk.acquire(blocking=False)
    # A grace for the watchdog, woken by the grant, to go back to sleep. Its
    # thread is unnamed and its wait shows nowhere (no server command, no
    # count), so nothing can be waited on; at worst a stalled machine forks
    # it awake, a case that must work too.
    time.sleep(0.2)

    def child():
        fences = []
        for i in range(3):
            mine = client.lock(f"child-renewed-{i}", ttl=TTL)
            assert mine.acquire(timeout=1.0)
            fences.append(mine.fence)
            mine.release()
        return fences

    try:
        out, _ = fork_call(child, timeout=2.0)
        assert len(out) == 3 and all(f > 10**15 for f in out)  # three new names
    finally:
        lk.release()


def test_child_can_free_inherited_client(rds, redis_url) -> None:
    """A child frees a client (and its lock) made, and renewed, before the
    fork."""
    c = hilock.Client(redis_url)
    lk = c.lock("freed-in-child", ttl=30.0)
    assert lk.acquire(blocking=False)
    lk.release()
    # A grace for the watchdog, started by the grant, to sleep on its
    # wake-up: nothing shows that wait (see above), and a fork that caught
    # it awake must work as well.
    time.sleep(0.2)

    def child():
        nonlocal lk
        lk = None  # the lock's handle goes first, then the client
        c.close()
        return "closed"

    try:
        out, _ = fork_call(child, timeout=2.0)
        assert out == "closed"
    finally:
        c.close()
