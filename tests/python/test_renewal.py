"""Renewal and loss: the client's watchdog keeps held locks alive, and tells
the holder when it cannot.

- With the default auto_renew a lock with a short TTL stays owned for many
  TTLs while its holder works, and stops being renewed once released.
- A holder that is paused (SIGSTOP) past its TTL loses the lock to another
  process; when it resumes it learns so (lost, on_lost, release and ``with``
  raise), and no two holders' validity windows overlap (history checker).
- on_lost gets the lock; a callback that raises does not stop others.
- max_hold bounds renewal; auto_renew=False lets the lock lapse at its TTL.
- ``with`` raises LockLost on a lost lock only when the body did not raise.

A lease of 0.3 s lapses if the machine starves its renewal thread for about
0.2 s. Where that can happen, a lapse must have been reported to the holder
(helpers.lapsed) and the scenario is tried again (helpers.retry_stalled).
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
import redis

import hilock
from helpers import (Stalled, assert_held, command_calls, kill_child, pop_json,
                     retry_stalled, start_child_collected, wait_for, within)
from history import (OverlapError, RedisHistory, ValidityTracker, check_fences_increase,
                     check_no_overlap)

TTL = 0.3
SLACK = 0.4


class Losses:
    """An on_lost callback that records what it was called with."""

    def __init__(self) -> None:
        self.calls = []
        self.threads = []
        self.event = threading.Event()

    def __call__(self, lock) -> None:
        self.calls.append(lock)
        self.threads.append(threading.current_thread())
        self.event.set()


def _work_for(seconds: float, check) -> int:
    """Busy Python work (holding the GIL) for seconds, calling check()
    every 50 ms; returns how many checks ran."""
    n = 0
    end = time.monotonic() + seconds
    next_check = 0.0
    x = 0
    while True:
        now = time.monotonic()
        if now >= end:
            return n
        if now >= next_check:
            check()
            n += 1
            next_check = now + 0.05
        x = (x * 31 + 7) % 1000003


# -- renewal keeps a live holder's lock ------------------------------------------

@pytest.mark.parametrize("family", ["lock", "lease"])
def test_auto_renew_keeps_lock_past_ttl(family, client, rds) -> None:
    def scenario(i):
        lost = Losses()
        lk = getattr(client, family)(f"kept-{i}", ttl=TTL, on_lost=lost)
        assert lk.auto_renew is True
        assert lk.acquire(blocking=False)
        token = lk.token.encode()

        def check():
            assert_held(rds, lk, token, "the lock lapsed while its holder worked")
            assert lk.lost is False

        t0 = time.monotonic()
        checks = _work_for(4 * TTL, check)
        assert time.monotonic() - t0 >= 3 * TTL
        assert checks >= 10
        assert_held(rds, lk, token)
        assert 0 < rds.pttl(lk.key) <= TTL * 1000
        assert lk.validity > 0 and lk.owned()
        lk.release()
        assert rds.exists(lk.key) == 0
        assert lost.calls == []

    retry_stalled(scenario)


def test_auto_renew_keeps_lock_in_with_block(client, rds) -> None:
    def scenario(i):
        lost = Losses()
        with client.lock(f"kept-with-{i}", ttl=TTL, on_lost=lost) as lk:
            token = lk.token.encode()
            fence = lk.fence
            for _ in range(int(4 * TTL / 0.05)):
                time.sleep(0.05)
                assert_held(rds, lk, token)  # Stalled leaves the block unreleased
            assert lk.fence == fence  # renewal draws no new fence
        assert rds.exists(lk.key) == 0  # left without LockLost, and released
        assert lost.calls == [] and lk.lost is False

    retry_stalled(scenario)


def test_release_stops_renewal(client, rds, redis_url) -> None:
    def scenario(i):
        lk = client.lock(f"stopped-{i}", ttl=TTL)
        assert lk.acquire(blocking=False)
        token = lk.token.encode()
        time.sleep(1.5 * TTL)  # renewed at least once
        assert_held(rds, lk, token)
        lk.release()
        return lk

    lk = retry_stalled(scenario)
    assert rds.exists(lk.key) == 0
    rds.config_resetstat()
    for _ in range(int(3 * TTL / 0.05)):
        time.sleep(0.05)
        assert rds.exists(lk.key) == 0, "a released lock came back"
    assert command_calls(rds).get("evalsha", 0) == 0, "renewals went on after the release"

    # A new holder's TTL runs down normally: nobody renews it behind its back.
    other = hilock.Client(redis_url)
    try:
        nxt = other.lock(lk.name, ttl=2.0, auto_renew=False)
        assert nxt.acquire(blocking=False)
        ttls = []
        for _ in range(6):
            ttls.append(rds.pttl(nxt.key))
            time.sleep(0.1)
        assert all(b < a for a, b in zip(ttls, ttls[1:])), ttls
        assert ttls[0] - ttls[-1] >= 400, ttls
        nxt.release()
    finally:
        other.close()
    assert lk.lost is False


# -- a paused holder ---------------------------------------------------------------

PAUSE_TTL = 0.5


def _paused_holder(url: str, ttl: float, prefix: str) -> None:
    """Hold <prefix>:a (acquire/release) inside a ``with`` on <prefix>:b,
    both auto-renewed with on_lost callbacks; run until both are lost, then
    report what the holder saw and its windows."""
    r = redis.Redis.from_url(url)
    c = hilock.Client(url)
    fired = {"a": Losses(), "b": Losses()}
    a = c.lock(f"{prefix}:a", ttl=ttl, on_lost=fired["a"])
    b = c.lock(f"{prefix}:b", ttl=ttl, on_lost=fired["b"])
    ta, tb = ValidityTracker(a), ValidityTracker(b)
    out = {}
    try:
        with b:
            start_b = time.monotonic()
            if not a.acquire(timeout=5):
                raise RuntimeError("could not acquire the first lock")
            start_a = time.monotonic()
            out["fence"] = {"a": a.fence, "b": b.fence}
            r.rpush(f"{prefix}:ready", json.dumps({"pid": os.getpid()}))
            deadline = time.monotonic() + 20
            while not (a.lost and b.lost):
                ta.sample()
                tb.sample()
                if time.monotonic() > deadline:
                    raise RuntimeError("the losses were never noticed")
                time.sleep(0.002)
            out["noticed"] = time.monotonic()
            time.sleep(0.4)  # a second callback would arrive by now
            out["lost"] = [a.lost, b.lost]
            out["validity"] = [a.validity, b.validity]
            out["calls"] = {k: len(v.calls) for k, v in fired.items()}
            out["arg_is_lock"] = [fired["a"].calls[:1] == [a], fired["b"].calls[:1] == [b]]
            out["on_main_thread"] = any(t is threading.main_thread()
                                        for v in fired.values() for t in v.threads)
            end_a = time.monotonic()
            try:
                a.release()
                out["release"] = "returned"
            except hilock.LockError as e:
                out["release"] = type(e).__name__
            end_b = time.monotonic()
    except hilock.LockLost:
        out["with_exit"] = "LockLost"
    except hilock.LockError as e:
        out["with_exit"] = type(e).__name__
    else:
        out["with_exit"] = "nothing"
    for n, start, end, tr, lk in (("a", start_a, end_a, ta, a), ("b", start_b, end_b, tb, b)):
        RedisHistory(r, f"{prefix}:valid:{n}").record_interval(tr.window(start, end, lk.fence))
        RedisHistory(r, f"{prefix}:naive:{n}").record(start, end, lk.fence)
    r.rpush(f"{prefix}:result", json.dumps(out))


def test_paused_holder_learns_it_lost_the_lock(client, rds, redis_url) -> None:
    """SIGSTOP a holder for two TTLs; another process takes its locks; after
    SIGCONT the holder is told (lost, on_lost once, release and ``with``
    raise), and the history of validity windows shows no overlap."""
    ttl = PAUSE_TTL

    def scenario(i):
        prefix = f"paused{i}"
        p = start_child_collected(_paused_holder, redis_url, ttl, prefix)
        try:
            assert pop_json(rds, f"{prefix}:ready", timeout=10), "holder never got its locks"
            time.sleep(1.2 * ttl)  # renewed while running
            if rds.exists(f"hilock:{{{prefix}:a}}:lock", f"hilock:{{{prefix}:b}}:lock") != 2:
                raise Stalled("the running holder's leases lapsed before the pause")
            os.kill(p.pid, signal.SIGSTOP)
            stopped = time.monotonic()

            # Another process takes both locks once the paused holder's TTL
            # runs out: its watchdog is stopped with it. (This holder is not
            # under test: a long TTL, renewed.)
            mine = {n: client.lock(f"{prefix}:{n}", ttl=5.0) for n in "ab"}
            starts, trackers = {}, {}
            for n, lk in mine.items():
                assert lk.acquire(timeout=ttl + 3.0), f"lock {n} of a stopped holder never lapsed"
                starts[n] = time.monotonic()
                trackers[n] = ValidityTracker(lk)
                trackers[n].sample()
            took = max(starts.values()) - stopped

            time.sleep(max(0.0, stopped + 2 * ttl - time.monotonic()))
            assert all(rds.get(lk.key) == lk.token.encode() for lk in mine.values())
            os.kill(p.pid, signal.SIGCONT)
            resumed = time.monotonic()

            # Keep holding (renewed) until the resumed holder has reported.
            raw = pop_json(rds, f"{prefix}:result", timeout=15)
            for n, lk in mine.items():
                trackers[n].sample()
                end = time.monotonic()
                assert lk.lost is False and lk.owned()
                lk.release()
                RedisHistory(rds, f"{prefix}:valid:{n}").record_interval(
                    trackers[n].window(starts[n], end, lk.fence))
                RedisHistory(rds, f"{prefix}:naive:{n}").record(starts[n], end, lk.fence)
            p.join(10)
        finally:
            if p.is_alive():
                os.kill(p.pid, signal.SIGCONT)
            kill_child(p)
        assert raw is not None, "the resumed holder never reported"
        assert p.exitcode == 0
        out = json.loads(raw)

        assert out["lost"] == [True, True]
        assert out["validity"] == [0.0, 0.0]
        assert out["calls"] == {"a": 1, "b": 1}, "on_lost must fire exactly once per lock"
        assert out["arg_is_lock"] == [True, True]
        assert out["on_main_thread"] is False
        assert out["release"] == "LockNotOwnedError"
        assert out["with_exit"] == "LockLost"

        for n in "ab":
            # Validity windows: [grant, min(release, end of the last validity
            # the holder saw)]. The paused holder's ends before the new grant.
            valid = RedisHistory(rds, f"{prefix}:valid:{n}").load()
            assert len(valid) == 2
            assert check_no_overlap(valid) == 2
            check_fences_increase(valid)
            # Its grant-to-release span does overlap the new holder's: the
            # pause really happened while it held the lock, and only the
            # validity-bounded windows are free of overlap.
            with pytest.raises(OverlapError):
                check_no_overlap(RedisHistory(rds, f"{prefix}:naive:{n}").load())

        within(took, ttl + SLACK, "locks of the stopped holder lapsed", stall_limit=2 * ttl)
        within(out["noticed"] - resumed, ttl + SLACK, "the loss was noticed after SIGCONT",
               stall_limit=3.0)

    retry_stalled(scenario)


# -- callbacks ------------------------------------------------------------------

def test_on_lost_receives_the_lock(client, rds) -> None:
    lost = Losses()
    lk = client.lock("taken", ttl=TTL, on_lost=lost)
    assert lk.acquire(blocking=False)
    rds.set(lk.key, "someone-else", px=5000)  # another owner, behind our back
    assert lost.event.wait(3.0), "on_lost never fired"
    time.sleep(TTL)
    assert lost.calls == [lk]
    assert lost.threads[0] is not threading.main_thread()
    assert lk.lost is True and lk.validity == 0.0
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()
    assert rds.get(lk.key) == b"someone-else"  # the other owner's key is intact


def test_raising_callback_does_not_stop_delivery(client, rds, capsys) -> None:
    def bad(lock):
        raise RuntimeError("callback failure on purpose")

    good1, good2 = Losses(), Losses()
    a = client.lock("cb:a", ttl=TTL, on_lost=bad)
    b = client.lock("cb:b", ttl=TTL, on_lost=good1)
    c = client.lock("cb:c", ttl=TTL, on_lost=good2)
    for lk in (a, b, c):
        assert lk.acquire(blocking=False)
    rds.delete(a.key, b.key)
    assert good1.event.wait(3.0), "a raising callback stopped the next one"
    wait_for(lambda: a.lost, 3.0, what="a to be lost")
    # Later losses are still delivered.
    rds.delete(c.key)
    assert good2.event.wait(3.0), "delivery stopped after a callback raised"
    assert good1.calls == [b] and good2.calls == [c]
    err = capsys.readouterr().err
    assert "callback failure on purpose" in err, "the callback's error was swallowed silently"


# -- max_hold, auto_renew=False, LockLost -----------------------------------------------

def test_max_hold_bounds_renewal(client, rds) -> None:
    max_hold = 0.6

    def scenario(i):
        lost = Losses()
        lk = client.lock(f"bounded-{i}", ttl=TTL, max_hold=max_hold, on_lost=lost)
        t0 = time.monotonic()
        with pytest.raises(hilock.LockLost):
            with lk:
                key, token = lk.key, lk.token.encode()
                time.sleep(max_hold - 0.1)
                assert_held(rds, lk, token, "renewal stopped before max_hold")
                assert lk.lost is False
                wait_for(lambda: lk.lost, 5.0, interval=0.005,
                         what="the bounded lock to be lost")
                when = time.monotonic() - t0
                assert lost.event.wait(3.0)
        wait_for(lambda: rds.exists(key) == 0, 1.0, what="the key to lapse")
        assert lost.calls == [lk]
        # Renewed until max_hold, then it ran out one TTL after the last
        # renewal (which came at most ttl/3 after max_hold).
        if when < max_hold + TTL - 0.05:
            raise Stalled(f"lost after {when:.3f} s, before max_hold + ttl")
        within(when, max_hold + TTL + TTL / 3 + SLACK, "the bounded lock was lost",
               stall_limit=3.0)

    retry_stalled(scenario)


def test_without_auto_renew_lock_lapses_at_ttl(client, rds) -> None:
    def scenario(i):
        lk = client.lock(f"lapsing-{i}", ttl=TTL, auto_renew=False)
        assert lk.auto_renew is False
        t0 = time.monotonic()
        assert lk.acquire(blocking=False)
        rds.config_resetstat()
        time.sleep(TTL * 0.5)
        early = rds.exists(lk.key)
        wait_for(lambda: rds.exists(lk.key) == 0, 3.0, interval=0.005,
                 what="the lock to lapse")
        gone = time.monotonic() - t0
        assert gone >= TTL - 0.02, f"lapsed after {gone:.3f} s, TTL {TTL} s"
        assert lk.validity == 0.0
        assert lk.lost is False  # nobody watched it
        assert command_calls(rds).get("evalsha", 0) == 0, "a lock without auto_renew was renewed"
        with pytest.raises(hilock.LockNotOwnedError):
            lk.release()
        if not early:
            raise Stalled("this thread slept past the TTL: nothing seen before the lapse")
        within(gone, TTL + 0.25, "the lock lapsed", stall_limit=2.0)

    retry_stalled(scenario)

    with pytest.raises(hilock.LockLost):
        with client.lock("lapsing-with", ttl=TTL, auto_renew=False):
            time.sleep(TTL + 0.1)


@pytest.mark.parametrize("body_raises", [False, True])
def test_lock_lost_only_when_body_did_not_raise(body_raises, client, rds) -> None:
    lost = Losses()
    lk = client.lock("exit", ttl=TTL, on_lost=lost)

    def body():
        with lk:
            rds.set(lk.key, "intruder", px=5000)
            wait_for(lambda: lk.lost, 3.0, what="loss")
            if body_raises:
                raise ValueError("the body's own error")

    if body_raises:
        with pytest.raises(ValueError, match="the body's own error"):
            body()
    else:
        with pytest.raises(hilock.LockLost) as info:
            body()
        assert isinstance(info.value, hilock.LockNotOwnedError)
    assert rds.get(lk.key) == b"intruder"  # never deleted another owner's key
    lost.event.wait(1.0)
    assert lost.calls == [lk]


def test_body_error_on_held_lock_releases_it(client, rds) -> None:
    lk = client.lock("exit-ok", ttl=5.0)
    with pytest.raises(KeyError):
        with lk:
            assert rds.exists(lk.key) == 1
            raise KeyError("x")
    assert rds.exists(lk.key) == 0
    assert lk.lost is False


def test_lock_collected_while_the_notify_registry_is_held(client) -> None:
    """The garbage collector may run a lock's __del__ (which unregisters its
    loss notification) at any allocation, also inside register() while the
    registry's mutex is held (starting the reader thread in a forked child
    did exactly that): it must not deadlock."""
    import gc

    from hilock import _notify

    def body() -> None:
        lk = client.lock("collected", ttl=5)   # auto_renew: registered
        cycle: list = [lk]
        cycle.append(cycle)                     # only the cycle collector frees it
        del lk, cycle
        with _notify._mu:                       # as register() holds it
            gc.collect()                        # __del__ -> unregister(), this thread

    was_enabled = gc.isenabled()
    gc.disable()                                # no collection before the with
    try:
        t = threading.Thread(target=body, daemon=True)
        t.start()
        t.join(5)
        assert not t.is_alive(), "unregister() deadlocked inside the registry's mutex"
    finally:
        if was_enabled:
            gc.enable()


def test_reader_thread_starts_outside_the_notify_registry(monkeypatch) -> None:
    """Thread.start() waits for the new thread, and the garbage collector
    may run a lock's __del__ -> unregister() in that new thread before it
    counts as started (seen in a forked child): register() must not hold
    the registry's mutex while it starts the reader thread."""
    from hilock import _notify

    blocked: list = []
    RealThread = threading.Thread

    class Starting:
        """Stands for the reader thread: its start waits for another thread
        that unregisters a lock, as a collection in the new thread would."""

        def __init__(self, **kw: object) -> None:
            pass

        def start(self) -> None:
            t = RealThread(target=_notify.unregister, args=(-1,), daemon=True)
            t.start()
            t.join(2.0)
            blocked.append(t.is_alive())

    class Held:
        pass

    held = Held()
    saved = _notify._fds
    monkeypatch.setattr(_notify, "_fds", None)
    monkeypatch.setattr(_notify.threading, "Thread", Starting)
    try:
        lock_id = _notify.register(held)
    finally:
        new = _notify._fds
        monkeypatch.undo()
        hilock._hilock._set_lost_fd(saved[1] if saved else -1)
        if new is not None:
            for fd in new:
                os.close(fd)
    _notify.unregister(lock_id)
    assert blocked == [False], "unregister() in the starting thread waited on register()"
