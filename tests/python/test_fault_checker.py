"""The fault campaign's checker (tests/faults/checker.py) must be able to fail.

Synthetic histories, written as the campaign's processes write them, with
one defect each: two holders inside their validity at once, a stale write
the store accepted, a loss the holder was never told about, a permit left
taken, a waiter left waiting on a free lock. Each must be counted, and a
clean history must count nothing.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import redis

import hilock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))

import checker  # noqa: E402
from relay import Relay  # noqa: E402

from helpers import FENCE_AHEAD  # noqa: E402

TTL = 1.5


class Run:
    """A run directory being written: histories, store log, faults, final state."""

    def __init__(self, d: Path, locks: Dict[str, Dict[str, Any]],
                 expected: Optional[List[str]] = None,
                 reproduce: Optional[List[str]] = None) -> None:
        self.d = d
        (d / "hist").mkdir(parents=True)
        self.locks = locks
        self.expected = expected or []
        self.reproduce = reproduce or []
        self.events: Dict[str, List[Dict[str, Any]]] = {}
        self.store: List[Dict[str, Any]] = []
        self.faults: List[Dict[str, Any]] = []
        self.final: Dict[str, Any] = {"permits_free": {}, "held": {}, "queued": {}}
        self.holds: Dict[str, int] = {}

    def ev(self, proc: str, lock: str, op: str, type_: str, t: float, **kw: Any) -> None:
        kind = self.locks[lock]["kind"]
        if op == "acquire" and type_ == "invoke":
            self.holds[proc] = self.holds.get(proc, 0) + 1
        e = dict(proc=proc, pid=1, kind=kind, lock=lock, hold=self.holds.get(proc, 0),
                 op=op, type=type_, mono=t, wall=t, **kw)
        self.events.setdefault(proc, []).append(e)

    def hold(self, proc: str, lock: str, invoke: float, grant: float, release: float,
             until: Optional[float] = None, fence: Optional[int] = None,
             outcome: str = "ok", lost: Optional[float] = None, mode: Optional[str] = None,
             ticket: Optional[int] = None) -> None:
        """One acquire-hold-release cycle; validity sampled up to ``until``
        (default: the release)."""
        self.ev(proc, lock, "acquire", "invoke", invoke, mode=mode)
        self.ev(proc, lock, "acquire", "ok", grant, fence=fence, mode=mode, ticket=ticket,
                validity=TTL)
        self.ev(proc, lock, "sample", "info", grant, until=until if until is not None
                else release + 0.01)
        if lost is not None:
            self.ev(proc, lock, "lost", "info", lost, source="callback")
        self.ev(proc, lock, "release", "invoke", release)
        if outcome == "ok":
            self.ev(proc, lock, "release", "ok", release + 0.001)
        else:
            self.ev(proc, lock, "release", "fail", release + 0.001, error=outcome)

    def write(self, res: str, fence: int, writer: str, accepted: bool, t: float) -> None:
        last = max([w["fence"] for w in self.store if w["res"] == res and w["accepted"]],
                   default=None)
        self.store.append(dict(seq=len(self.store) + 1, mono=t, wall=t, res=res, fence=fence,
                               writer=writer, accepted=accepted, last=last))

    def check(self, end: float = 100.0) -> checker.Result:
        meta = {"run": "synthetic", "deployment": "none", "seed": 0, "ttl": TTL,
                "locks": self.locks, "expected": self.expected,
                "reproduce": self.reproduce, "start": 0.0, "end": end,
                "duration": end}
        (self.d / "meta.json").write_text(json.dumps(meta))
        for proc, evs in self.events.items():
            (self.d / "hist" / f"{proc}.jsonl").write_text(
                "".join(json.dumps(e) + "\n" for e in evs))
        (self.d / "store.jsonl").write_text("".join(json.dumps(w) + "\n" for w in self.store))
        (self.d / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in self.faults))
        (self.d / "final.json").write_text(json.dumps(self.final))
        return checker.check_run(str(self.d))


EXCL = {"L": {"kind": "lock", "capacity": 1}}


def zero(res: checker.Result, but: str = "") -> None:
    for col in checker.COLUMNS:
        if col != but:
            assert getattr(res, col) == 0, (col, res.examples)


def test_clean_history_counts_nothing(tmp_path: Path) -> None:
    r = Run(tmp_path, dict(EXCL, S={"kind": "semaphore", "capacity": 2}))
    r.hold("a", "L", 0.0, 0.1, 1.0, fence=1)
    r.hold("b", "L", 0.2, 1.05, 2.0, fence=2)   # waited, granted after a's release
    r.write("L", 1, "a", True, 0.5)
    r.write("L", 2, "b", True, 1.5)
    r.write("L", 1, "a", False, 1.6)             # a late write, refused: fine
    r.hold("s1", "S", 0.0, 0.1, 2.0)
    r.hold("s2", "S", 0.0, 0.1, 2.0)
    r.hold("s3", "S", 0.0, 2.01, 3.0)
    r.final["permits_free"]["S"] = 2
    res = r.check(end=4.0)
    zero(res)
    assert res.grants == 5 and res.writes == 3 and res.refused_writes == 1
    assert res.unexpected() == []


def test_two_holders_at_once_is_an_overlap(tmp_path: Path) -> None:
    r = Run(tmp_path, EXCL)
    r.hold("a", "L", 0.0, 0.1, 2.0, fence=1, lost=1.9, outcome="LockNotOwnedError")
    r.hold("b", "L", 0.5, 1.0, 2.5, fence=2)     # inside a's validity (until 2.01)
    res = r.check()
    assert res.overlaps == 1
    assert res.unexpected() == ["overlaps"]
    assert "overlaps" in res.examples
    # The same history where the docs allow it (a restart without persistence).
    r2 = Run(tmp_path / "allowed", EXCL, expected=["overlaps"], reproduce=["overlaps"])
    r2.hold("a", "L", 0.0, 0.1, 2.0, fence=1, lost=1.9, outcome="LockNotOwnedError")
    r2.hold("b", "L", 0.5, 1.0, 2.5, fence=2)
    res2 = r2.check()
    assert res2.overlaps == 1 and res2.unexpected() == [] and res2.not_reproduced() == []
    assert "(expected)" in checker.table([res2])
    # A run meant to reproduce it that shows none is reported.
    r3 = Run(tmp_path / "missed", EXCL, expected=["overlaps"], reproduce=["overlaps"])
    r3.hold("a", "L", 0.0, 0.1, 1.0, fence=1)
    res3 = r3.check()
    assert res3.not_reproduced() == ["overlaps"]
    assert "not reproduced: overlaps" in checker.table([res3])


def test_fence_that_goes_back_is_a_regression(tmp_path: Path) -> None:
    r = Run(tmp_path, EXCL)
    r.hold("a", "L", 0.0, 0.1, 1.0, fence=7)
    r.hold("b", "L", 1.2, 1.3, 2.0, fence=7)    # asked after a's grant: needs > 7
    r.hold("c", "L", 2.1, 2.2, 3.0, fence=5)
    res = r.check()
    assert res.fence_regressions == 2
    zero(res, but="fence_regressions")
    # Concurrent askers may be granted in either order: no regression.
    r2 = Run(tmp_path / "ok", EXCL)
    r2.hold("a", "L", 0.0, 0.2, 1.0, fence=8)
    r2.hold("b", "L", 0.1, 1.1, 2.0, fence=9)
    assert r2.check().fence_regressions == 0


def test_an_overlap_outside_validity_is_not_one(tmp_path: Path) -> None:
    """A paused holder whose validity ended before the next grant: its
    conservative window overlaps, its validity window does not; it was told."""
    r = Run(tmp_path, EXCL)
    r.hold("a", "L", 0.0, 0.1, 4.0, until=1.5, fence=1, lost=3.9,
           outcome="LockNotOwnedError")
    r.hold("b", "L", 0.5, 1.7, 2.5, fence=2)
    res = r.check()
    zero(res)
    assert res.reported_losses == 1


def test_semaphore_over_its_limit_is_an_overlap(tmp_path: Path) -> None:
    r = Run(tmp_path, {"S": {"kind": "semaphore", "capacity": 2}})
    for p in ("s1", "s2", "s3"):
        r.hold(p, "S", 0.0, 0.1 + ("s1", "s2", "s3").index(p) * 0.1, 2.0)
    r.final["permits_free"]["S"] = 2
    res = r.check()
    assert res.overlaps == 1


def test_writer_overlapping_a_reader_is_an_overlap(tmp_path: Path) -> None:
    r = Run(tmp_path, {"RW": {"kind": "rwlock", "capacity": 1}})
    r.hold("r1", "RW", 0.0, 0.1, 2.0, mode="read")
    r.hold("r2", "RW", 0.0, 0.2, 2.0, mode="read")    # readers share: fine
    assert r.check().overlaps == 0
    r.hold("w", "RW", 0.0, 1.0, 3.0, mode="write", fence=5)
    res = r.check()
    assert res.overlaps == 2


def test_stale_write_accepted_is_caught(tmp_path: Path) -> None:
    r = Run(tmp_path, EXCL)
    r.hold("a", "L", 0.0, 0.1, 1.0, fence=1)
    r.hold("b", "L", 0.2, 1.05, 2.0, fence=2)
    r.write("L", 1, "a", True, 0.5)
    r.write("L", 2, "b", True, 1.5)
    r.write("L", 1, "a", True, 1.6)   # a store that let a lower fence through
    res = r.check()
    assert res.stale_writes == 1
    zero(res, but="stale_writes")
    assert res.unexpected() == ["stale_writes"]
    # Two writers with one fence (a fence handed out twice) are caught too.
    r2 = Run(tmp_path / "shared", EXCL)
    r2.write("L", 3, "a", True, 0.5)
    r2.write("L", 3, "a", True, 0.6)   # the same holder again: fine
    r2.write("L", 3, "b", True, 0.7)
    assert r2.check().stale_writes == 1


def test_unreported_loss_is_caught(tmp_path: Path) -> None:
    # b is granted while a still believes it holds (outside a's validity, so
    # no overlap); a's release then succeeds and a was never told.
    r = Run(tmp_path, EXCL)
    r.hold("a", "L", 0.0, 0.1, 3.0, until=1.0, fence=1)
    r.hold("b", "L", 0.5, 1.5, 2.5, fence=2)
    res = r.check()
    assert res.unreported_losses == 1
    zero(res, but="unreported_losses")
    # Told through on_lost, or by a refused release: not counted.
    for lost, outcome in ((2.0, "ok"), (None, "LockNotOwnedError"), (None, "LockLost")):
        d = tmp_path / f"told-{outcome}-{lost}"
        r2 = Run(d, EXCL)
        r2.hold("a", "L", 0.0, 0.1, 3.0, until=1.0, fence=1, lost=lost, outcome=outcome)
        r2.hold("b", "L", 0.5, 1.5, 2.5, fence=2)
        assert r2.check().unreported_losses == 0


def test_refused_write_without_a_loss_report_is_an_unreported_loss(tmp_path: Path) -> None:
    r = Run(tmp_path, EXCL)
    r.hold("a", "L", 0.0, 0.1, 1.0, fence=1)
    r.ev("a", "L", "write", "refused", 0.9, fence=1)
    r.write("L", 2, "x", True, 0.8)
    r.write("L", 1, "a", False, 0.9)
    res = r.check()
    assert res.unreported_losses == 1


def test_semaphore_unreported_loss(tmp_path: Path) -> None:
    r = Run(tmp_path, {"S": {"kind": "semaphore", "capacity": 1}})
    r.hold("s1", "S", 0.0, 0.1, 3.0, until=1.0)
    r.hold("s2", "S", 0.5, 1.5, 2.5)
    r.final["permits_free"]["S"] = 1
    assert r.check().unreported_losses == 1


def test_leaked_permit_and_held_lock_are_caught(tmp_path: Path) -> None:
    r = Run(tmp_path, dict(EXCL, S={"kind": "semaphore", "capacity": 3},
                           F={"kind": "fair_lock", "capacity": 1}))
    r.hold("s1", "S", 0.0, 0.1, 1.0)
    r.hold("a", "L", 0.0, 0.1, 1.0, fence=1)
    r.hold("f", "F", 0.0, 0.1, 1.0, fence=1, ticket=1)
    r.final["permits_free"]["S"] = 2     # one of 3 never came back
    res = r.check()
    assert res.leaked == 1
    assert res.unexpected() == ["leaked"]
    r.final["held"]["L"] = True
    r.final["queued"]["F"] = 2
    assert r.check().leaked == 4


def test_stranded_waiter_is_caught(tmp_path: Path) -> None:
    r = Run(tmp_path, EXCL)
    r.hold("a", "L", 0.0, 0.1, 1.0, fence=1)
    # b waits from 0.5 to its timeout at 9.5 while the lock is free from 1.0.
    r.ev("b", "L", "acquire", "invoke", 0.5)
    r.ev("b", "L", "acquire", "fail", 9.5, error="timeout")
    res = r.check()
    assert res.stranded == 1
    zero(res, but="stranded")
    # The same wait during a server fault (until 7.0) is no stranding.
    r.faults.append({"kind": "server_pause", "start": 1.0, "end": 7.0, "target": ""})
    assert r.check().stranded == 0


def test_killed_holder_keeps_the_lock_for_a_ttl(tmp_path: Path) -> None:
    """A waiter behind a killed holder waits out its TTL: no stranding, no
    loss to report (the holder is gone)."""
    r = Run(tmp_path, EXCL)
    r.ev("a", "L", "acquire", "invoke", 0.0)
    r.ev("a", "L", "acquire", "ok", 0.1, fence=1)
    r.ev("a", "L", "sample", "info", 0.2, until=1.6)
    r.faults.append({"kind": "holder_kill", "start": 0.5, "end": 0.5, "target": "a"})
    r.hold("b", "L", 0.3, 1.7, 2.5, fence=2)
    res = r.check()
    zero(res)
    assert res.faults == {"holder_kill": 1}
    assert res.max_recovery == pytest.approx(1.2, abs=0.01)


def test_fifo_inversion_is_caught(tmp_path: Path) -> None:
    r = Run(tmp_path, {"F": {"kind": "fair_lock", "capacity": 1}})
    r.hold("a", "F", 0.0, 0.1, 1.0, fence=1, ticket=1)
    r.hold("b", "F", 0.2, 1.1, 2.0, fence=2, ticket=3)
    r.hold("c", "F", 0.1, 2.1, 3.0, fence=3, ticket=2)   # asked before b, served after
    res = r.check()
    assert res.fifo_inversions == 1


def test_a_lock_never_granted_fails_the_run(tmp_path: Path) -> None:
    """Workers that never got going (an import error, no server) leave
    every column at zero: the run must still fail."""
    r = Run(tmp_path, dict(EXCL, S={"kind": "semaphore", "capacity": 2}))
    r.hold("a", "L", 0.0, 0.1, 1.0, fence=1)
    r.final["permits_free"]["S"] = 2
    res = r.check()
    zero(res)
    assert res.idle == ["S"]
    assert res.unexpected() == ["idle: S"]
    assert "FAIL: idle: S" in checker.table([res])


def test_main_exits_non_zero_on_a_defect(tmp_path: Path) -> None:
    r = Run(tmp_path / "bad", EXCL)
    r.hold("a", "L", 0.0, 0.1, 2.0, fence=1, lost=1.9, outcome="LockNotOwnedError")
    r.hold("b", "L", 0.5, 1.0, 2.5, fence=2)
    r.check()
    import subprocess
    out = subprocess.run([sys.executable, os.path.join(os.path.dirname(checker.__file__),
                                                       "checker.py"), str(tmp_path / "bad")],
                         capture_output=True, text=True)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL: overlaps" in out.stdout


def test_relay_loses_replies_after_the_server_ran_the_command(own_server) -> None:
    """The campaign's relay: an acquire or release whose reply it swallows
    was run by the server (the fence counter moved; the key is gone), and
    the client saw a connection error."""
    scripts = Path(__file__).resolve().parents[2] / "core" / "scripts"
    seen: List[str] = []
    relay = Relay(own_server.port, str(scripts), seed=1,
                  on_reset=lambda verb, script: seen.append(f"{verb}:{script}")).start()
    r = redis.Redis(port=own_server.port)
    try:
        with hilock.Client(f"redis://127.0.0.1:{relay.port}/0", command_timeout=2.0) as c:
            lk = c.lock("relayed", ttl=2, auto_renew=False)
            assert lk.acquire(blocking=False)   # the relay learns the scripts
            lk.release()
            fence_key = [k for k in r.keys("*relayed*") if k.endswith(b":fence")]
            assert len(fence_key) == 1
            first = FENCE_AHEAD   # ahead of the clock, the counter counts grants
            r.set(fence_key[0], first)

            relay.arm(1.0, ("acquire",))
            with pytest.raises(hilock.ConnectionError):
                lk.acquire(blocking=False)
            relay.disarm()
            # The client resends once on a fresh connection (its own grant is
            # recognised); the relay resets that one too.
            assert seen and set(seen) == {"acquire:lock_acquire"}
            assert int(r.get(fence_key[0])) == first + 1   # the server granted it

            assert lk.acquire(timeout=10)   # after the lost grant is undone or lapses
            assert lk.fence is not None and lk.fence >= first + 2
            relay.arm(1.0, ("release",))
            with pytest.raises(hilock.ConnectionError):
                lk.release()
            relay.disarm()
            assert seen[-1] == "release:lock_release"
            assert r.exists(lk.key) == 0   # released on the server all the same
            with pytest.raises(hilock.LockNotOwnedError):
                lk.release()
    finally:
        relay.stop()
        r.close()


def _owner_fields(r: redis.Redis[bytes], key: bytes) -> Dict[bytes, int]:
    """A hash's owner fields and counts: not 'fence', not '<owner>:op'."""
    return {k: int(v) for k, v in r.hgetall(key).items()
            if k != b"fence" and not k.endswith(b":op")}


def _op_fields(r: redis.Redis[bytes], key: bytes) -> int:
    return sum(1 for k in r.hkeys(key) if k.endswith(b":op"))


@pytest.fixture
def relayed(own_server) -> Any:
    """A relay in front of a server of the test's own, the reset replies
    seen, a raw connection to the server, and a client through the relay."""
    scripts = Path(__file__).resolve().parents[2] / "core" / "scripts"
    seen: List[str] = []
    relay = Relay(own_server.port, str(scripts), seed=1,
                  on_reset=lambda verb, script: seen.append(f"{verb}:{script}")).start()
    r = redis.Redis(port=own_server.port)
    c = hilock.Client(f"redis://127.0.0.1:{relay.port}/0", command_timeout=2.0)
    try:
        yield relay, seen, r, c
    finally:
        c.close()
        relay.stop()
        r.close()


def _lose_one(relay: Relay, seen: List[str], verb: str, script: str, call: Any) -> Any:
    """call() with the reply of its first script call lost after the server
    ran it; the client resends once on a fresh connection."""
    n = len(seen)
    relay.arm(1.0, (verb,), times=1)
    try:
        return call()
    finally:
        relay.disarm()
        assert seen[n:] == [f"{verb}:{script}"]


def _lost_acquire(relayed: Any, key: bytes, script: str, lk: Any, count: int) -> None:
    """A non-blocking acquire of lk whose reply is lost, resent: granted,
    and the hash at key counts count holds of one owner."""
    relay, seen, r, _ = relayed
    assert _lose_one(relay, seen, "acquire", script, lambda: lk.acquire(blocking=False))
    assert list(_owner_fields(r, key).values()) == [count]


def _lost_release(relayed: Any, key: bytes, script: str, lk: Any, count: int) -> None:
    """A release of lk whose reply is lost, resent: count holds are left,
    or with none left the key is gone and a further release is refused."""
    relay, seen, r, _ = relayed
    _lose_one(relay, seen, "release", script, lk.release)
    if count:
        assert list(_owner_fields(r, key).values()) == [count]
        return
    assert r.exists(key) == 0
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()


def test_relay_lost_rwlock_replies_count_once(relayed: Any) -> None:
    """A read or write acquire or release whose reply is lost is resent and
    counts once: the server's hold counts are exact, the fence is the first
    run's, the last release reports success and leaves nothing behind."""
    _, _, r, c = relayed
    warm = c.rwlock("warm", ttl=10)   # the relay learns the four scripts
    for side in (warm.write(), warm.read()):
        assert side.acquire(blocking=False)
        side.release()
    rw = c.rwlock("rwr", ttl=10)
    w, rd = rw.write(), rw.read()
    wkey, ckey = b"hilock:{rwr}:rw:writer", b"hilock:{rwr}:rw:counts"
    r.set(b"hilock:{rwr}:fence", FENCE_AHEAD)   # counts the grants

    _lost_acquire(relayed, wkey, "rwlock_write_acquire", w, 1)
    fence = w.fence
    assert fence is not None and fence == int(r.get(b"hilock:{rwr}:fence"))
    _lost_acquire(relayed, wkey, "rwlock_write_acquire", w, 2)
    assert w.fence == fence
    assert c.inspect("rwr").hold_count == 2
    _lost_release(relayed, wkey, "rwlock_write_release", w, 1)
    _lost_release(relayed, wkey, "rwlock_write_release", w, 0)

    _lost_acquire(relayed, ckey, "rwlock_read_acquire", rd, 1)
    _lost_acquire(relayed, ckey, "rwlock_read_acquire", rd, 2)
    assert rd.hold_count() == 2
    assert _op_fields(r, ckey) == 1
    _lost_release(relayed, ckey, "rwlock_read_release", rd, 1)
    _lost_release(relayed, ckey, "rwlock_read_release", rd, 0)
    assert r.exists(b"hilock:{rwr}:rw:readers") == 0

    # No orphan level: the next acquire of either side is a first grant.
    assert w.acquire(blocking=False) and w.fence == fence + 1
    assert list(_owner_fields(r, wkey).values()) == [1]
    w.release()
    assert rd.acquire(blocking=False) and rd.hold_count() == 1
    rd.release()
    assert r.exists(wkey) == 0 and r.exists(ckey) == 0


def test_relay_lost_rlock_replies_count_once(relayed: Any) -> None:
    """The same for the reentrant lock."""
    _, _, r, c = relayed
    warm = c.rlock("warm", ttl=10)
    assert warm.acquire(blocking=False)
    warm.release()
    rl = c.rlock("rlr", ttl=10)
    key = b"hilock:{rlr}:rlock"
    r.set(b"hilock:{rlr}:fence", FENCE_AHEAD)   # counts the grants

    _lost_acquire(relayed, key, "rlock_acquire", rl, 1)
    fence = rl.fence
    assert fence is not None and fence == int(r.get(b"hilock:{rlr}:fence"))
    info = c.inspect("rlr")
    assert info.hold_count == 1 and not info.holder.endswith(":op")
    _lost_acquire(relayed, key, "rlock_acquire", rl, 2)
    assert rl.fence == fence
    _lost_release(relayed, key, "rlock_release", rl, 1)
    assert rl.hold_count() == 1
    _lost_release(relayed, key, "rlock_release", rl, 0)
    assert rl.acquire(blocking=False) and rl.fence == fence + 1
    assert list(_owner_fields(r, key).values()) == [1]
    rl.release()
    assert r.exists(key) == 0


def test_relay_lost_call_and_resend_leave_no_level(relayed: Any) -> None:
    """Both the call's reply and its resend's lost: a failed acquire is
    given back (a re-entry's too), and a failed nested release is completed,
    once, before the outer release, which then frees the lock."""
    relay, seen, r, c = relayed
    warm = c.rwlock("warm", ttl=10)
    assert warm.write().acquire(blocking=False)
    warm.write().release()
    wl = c.rlock("warm-r", ttl=10)
    assert wl.acquire(blocking=False)
    wl.release()
    for make, key, acq, rel in (
            (lambda: c.rlock("rl2", ttl=10), b"hilock:{rl2}:rlock",
             "rlock_acquire", "rlock_release"),
            (lambda: c.rwlock("rw2", ttl=10).write(), b"hilock:{rw2}:rw:writer",
             "rwlock_write_acquire", "rwlock_write_release")):
        lk = make()
        n = len(seen)
        relay.arm(1.0, ("acquire",), times=2)
        with pytest.raises(hilock.ConnectionError):
            lk.acquire(blocking=False)
        relay.disarm()
        assert seen[n:] == [f"acquire:{acq}"] * 2
        assert r.exists(key) == 0   # the grant was given back
        assert lk.acquire(blocking=False)
        relay.arm(1.0, ("acquire",), times=2)
        with pytest.raises(hilock.ConnectionError):
            lk.acquire(blocking=False)   # a re-entry
        relay.disarm()
        assert list(_owner_fields(r, key).values()) == [1]
        assert lk.acquire(blocking=False)
        relay.arm(1.0, ("release",), times=2)
        with pytest.raises(hilock.ConnectionError):
            lk.release()
        relay.disarm()
        assert seen[-2:] == [f"release:{rel}"] * 2
        assert list(_owner_fields(r, key).values()) == [1]   # it ran
        lk.release()   # completes the failed one, then leaves the last level
        assert r.exists(key) == 0
        with pytest.raises(hilock.LockNotOwnedError):
            lk.release()


def test_a_barrier_released_early_is_caught(tmp_path: Path) -> None:
    """Three parties: a generation all three waited in passes clean (so
    does one whose third party was killed after the release, while still
    counted waiting up to its death); a wait that returned while only two
    were waiting is an early release."""
    r = Run(tmp_path, {"B": {"kind": "barrier", "capacity": 3}})
    for p, start in (("a", 0.0), ("b", 0.1), ("c", 0.2)):
        r.ev(p, "B", "wait", "invoke", start)
        r.ev(p, "B", "wait", "ok", 0.3, index=int(start * 10))
    r.ev("a", "B", "wait", "invoke", 1.0)
    r.ev("b", "B", "wait", "invoke", 1.1)
    r.ev("c", "B", "wait", "invoke", 1.2)       # killed at 1.5, after the release
    r.ev("a", "B", "wait", "ok", 1.3, index=0)
    r.ev("b", "B", "wait", "ok", 1.3, index=1)
    r.faults.append({"kind": "holder_kill", "start": 1.5, "end": 1.5, "target": "c"})
    res = r.check(end=4.0)
    zero(res)
    assert res.grants_by_lock == {"B": 5} and res.unexpected() == []
    r2 = Run(tmp_path / "early", {"B": {"kind": "barrier", "capacity": 3}})
    r2.ev("a", "B", "wait", "invoke", 0.0)
    r2.ev("b", "B", "wait", "invoke", 0.1)
    r2.ev("a", "B", "wait", "ok", 0.2, index=0)  # c never arrived
    r2.ev("b", "B", "wait", "broken", 0.3)
    res2 = r2.check(end=4.0)
    zero(res2, but="early_releases")
    assert res2.early_releases == 1
    assert "FAIL: early_releases" in checker.table([res2])
