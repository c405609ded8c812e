"""Lock delay (Chubby's, Consul's): a grant that ends without its holder's
release (its TTL ran out, its holder was killed) keeps the name from
everyone for lock_delay after that; a release frees it at once. The
holders here are real processes killed with SIGKILL; every timing check is
a lower bound (a grant must not come early), which a loaded machine only
makes easier to meet."""
from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any, Dict, List

import pytest

import hilock
from helpers import command_calls, kill_child, pop_report, run_with_client, start_child, wait_for
from hilock import _hilock as _h
from test_cli import run_cli

TTL = 1.0
DELAY = 2.5
# Redis keeps key expiry in whole ms; what a lower bound forgives for it.
SLACK = 0.05


def delay_key(name: str) -> str:
    return f"hilock:{{{name}}}:delay"


def lock_key(name: str) -> str:
    return f"hilock:{{{name}}}:lock"


# The holders killed below, each renewed by its client's renewal thread
# (the reentrant lock entered twice; the multi-key lock on MULTI).
HOLDERS: Dict[str, Any] = {
    "lock": lambda c, name: c.lock(name, ttl=TTL, lock_delay=DELAY),
    "multi": lambda c, name: c.multi_lock(MULTI, ttl=TTL, lock_delay=DELAY),
    "fair": lambda c, name: c.fair_lock(name, ttl=TTL, lock_delay=DELAY),
    "rlock": lambda c, name: c.rlock(name, ttl=TTL, lock_delay=DELAY),
    "write": lambda c, name: c.rwlock(name, ttl=TTL, lock_delay=DELAY).write(),
    "seq": lambda c, name: c.sequential_lock(name, ttl=TTL, lock_delay=DELAY),
}
MULTI = ["{dl}a", "{dl}b"]


def _hold_auto_renewed(url: str, kind: str, name: str) -> None:
    """A holder of HOLDERS[kind] renewed by the renewal thread, until killed:
    it reports its token, fence and the time of its grant."""
    import redis

    r = redis.Redis.from_url(url)
    lk = HOLDERS[kind](hilock.Client(url), name)
    for _ in range(2 if kind == "rlock" else 1):
        if not lk.acquire(timeout=5):
            raise RuntimeError("holder could not acquire")
    r.rpush("ready", json.dumps({"token": getattr(lk, "token", None), "fence": lk.fence,
                                 "t": time.monotonic()}))
    time.sleep(3600)


def _killed_past_the_delay(rds, redis_url: str, kind: str, name: str,
                           held: Any) -> float:
    """Start a holder of kind on name, keep it past ttl + lock_delay since
    its grant (only renewals that push the delay marker keep the marker
    alive that long), check held(report) and kill it with SIGKILL. Returns
    the monotonic time it was last seen holding: its grant expires after
    it, and its marker lock_delay later."""
    p = start_child(_hold_auto_renewed, redis_url, kind, name)
    try:
        report = pop_report(rds, "ready")
        wait_for(lambda: time.monotonic() > report["t"] + TTL + DELAY + 0.3, 10)
        checked = time.monotonic()
        assert held(report)
    finally:
        kill_child(p, signal.SIGKILL)
    return checked


def _granted_after_the_delay(lk: Any, checked: float) -> None:
    """lk is granted, and no earlier than the delay after checked."""
    assert lk.acquire(timeout=30)  # generous: the delay is 2.5 s
    granted = time.monotonic()
    assert granted - checked >= DELAY - SLACK, granted - checked
    lk.release()


def _hold_renewing_by_hand(url: str, name: str) -> None:
    """A lease holder that renews every 0.2 s itself and pushes, after
    each renewal, the monotonic time taken just before it was sent."""
    import redis

    r = redis.Redis.from_url(url)
    lk = hilock.Client(url).lease(name, ttl=TTL, auto_renew=False, lock_delay=DELAY)
    if not lk.acquire(timeout=5):
        raise RuntimeError("holder could not acquire")
    r.rpush("ready", json.dumps({"token": lk.token, "t": time.monotonic()}))
    while True:
        time.sleep(0.2)
        before = time.monotonic()
        lk.renew()
        r.rpush("renewed", before)


def _hold_until_told(url: str, name: str) -> None:
    """A holder that releases when "go" is pushed."""
    import redis

    r = redis.Redis.from_url(url)
    lk = hilock.Client(url).lock(name, ttl=30, lock_delay=30)
    if not lk.acquire(timeout=5):
        raise RuntimeError("holder could not acquire")
    r.rpush("ready", json.dumps({"token": lk.token}))
    if r.blpop(["go"], timeout=30) is None:
        raise RuntimeError("never told to release")
    lk.release()


def test_killed_holder_renewed_by_the_thread_passes_the_name_after_the_delay(
        rds, client: hilock.Client, redis_url: str) -> None:
    checked = _killed_past_the_delay(
        rds, redis_url, "lock", "dl:auto",
        lambda rep: rds.get(lock_key("dl:auto")) == rep["token"].encode())
    # No grant before checked + DELAY, to anyone: the successor has no delay
    # of its own.
    _granted_after_the_delay(client.lock("dl:auto", ttl=5), checked)


def test_killed_holder_passes_the_name_ttl_plus_delay_after_its_last_renewal(
        rds, client: hilock.Client, redis_url: str) -> None:
    p = start_child(_hold_renewing_by_hand, redis_url, "dl:hand")
    try:
        report = pop_report(rds, "ready")
        # Renewed for longer than ttl + lock_delay, then killed.
        wait_for(lambda: time.monotonic() > report["t"] + TTL + DELAY + 0.3, 10)
        assert rds.get(lock_key("dl:hand")) == report["token"].encode()
    finally:
        kill_child(p, signal.SIGKILL)
    # The last renewal the holder reported (one sent after it, its report
    # cut off by the kill, only ends the delay later).
    last = float(rds.lindex("renewed", -1))
    successor = client.lease("dl:hand", ttl=5, auto_renew=False, lock_delay=DELAY)
    assert successor.acquire(timeout=30)  # generous: the delay is 2.5 s
    granted = time.monotonic()
    assert granted - last >= TTL + DELAY - SLACK, granted - last
    successor.release()


def test_a_release_frees_the_name_at_once(rds, client: hilock.Client,
                                          redis_url: str) -> None:
    p = start_child(_hold_until_told, redis_url, "dl:rel")
    try:
        pop_report(rds, "ready")
        assert rds.pttl(delay_key("dl:rel")) > 30_000  # ttl + lock_delay
        waiter = client.lock("dl:rel", ttl=30, lock_delay=30)
        assert not waiter.acquire(blocking=False)
        rds.rpush("go", 1)
        # Far below the 30 s delay: a release's successor does not wait it out.
        assert waiter.acquire(timeout=10)
        p.join(10)
        assert p.exitcode == 0
    finally:
        kill_child(p, signal.SIGKILL)
    waiter.release()
    assert not rds.exists(delay_key("dl:rel"))
    again = client.lock("dl:rel", ttl=30, lock_delay=30)
    assert again.acquire(blocking=False)
    again.release()


def _lapsed_with_delay(rds, client: hilock.Client, name: str) -> None:
    """A lease of 0.2 s with a 20 s delay, left to expire."""
    lease = client.lease(name, ttl=0.2, auto_renew=False, lock_delay=20)
    assert lease.acquire(blocking=False)
    wait_for(lambda: not rds.exists(lock_key(name)), 10, what="the lease to expire")


def test_inspect_shows_the_delay_and_when_it_ends(rds, client: hilock.Client) -> None:
    lk = client.lock("dl:insp", ttl=10, auto_renew=False, lock_delay=20)
    assert lk.lock_delay == 20
    assert lk.acquire(blocking=False)
    info = client.inspect("dl:insp")
    assert info.held and info.lock_delay == 20
    assert info.delay_left is not None and 20 < info.delay_left <= 30  # ttl + delay
    assert set(info.as_dict()) >= {"lock_delay", "delay_left"}
    lk.release()
    info = client.inspect("dl:insp")
    assert info.lock_delay is None and info.delay_left is None

    _lapsed_with_delay(rds, client, "dl:insp")
    info = client.inspect("dl:insp")
    assert info.type == "lock" and not info.held and info.holder is None
    assert info.lock_delay == 20
    assert info.delay_left is not None and 0 < info.delay_left <= 20
    assert not client.lock("dl:insp", ttl=5, lock_delay=20).acquire(blocking=False)
    # The walk over names reports a name in its delay.
    assert [i.name for i in client.list_locks("dl:*")] == ["dl:insp"]
    # An operator's forced release ends the delay.
    assert client.force_release("dl:insp")
    assert not rds.exists(delay_key("dl:insp"))
    assert client.lock("dl:insp", ttl=5, lock_delay=20).acquire(blocking=False)


def test_cli_status_shows_the_delay(rds, client: hilock.Client, redis_url: str) -> None:
    _lapsed_with_delay(rds, client, "dl:cli")
    r = run_cli(redis_url, "status", "--json", "dl:cli")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["type"], d["held"], d["lock_delay"]) == ("lock", False, 20)
    assert 0 < d["delay_left"] <= 20
    r = run_cli(redis_url, "status", "dl:cli")
    assert r.returncode == 0, r.stderr
    fields = dict(line.split(":", 1) for line in r.stdout.splitlines())
    assert fields["state"].strip() == "free"
    assert fields["lock delay"].strip().startswith("20s, ends in ")


def test_no_delay_writes_and_reads_no_marker(rds, client: hilock.Client) -> None:
    before = command_calls(rds)
    lk = client.lock("dl:none", ttl=5, auto_renew=False)
    assert lk.lock_delay == 0
    assert lk.acquire(blocking=False)
    lk.renew()
    assert not rds.exists(delay_key("dl:none"))
    lk.release()
    after = command_calls(rds)
    # The grant of a free lock reads the marker's PTTL (every grant honours
    # another holder's delay) once: the renewal sets the TTL without
    # reading one, and nothing writes a marker (checked above and below).
    assert after.get("pttl", 0) == before.get("pttl", 0) + 1
    lease = client.lease("dl:none", ttl=5, lock_delay=0)
    with lease:
        lease.extend(1)
        assert not rds.exists(delay_key("dl:none"))
    assert rds.keys("*delay*") == []


@pytest.mark.parametrize("make", [
    lambda c: c.rlock("dl:x", lock_delay=1, compat="redisson"),
    lambda c: c.fair_lock("dl:x", lock_delay=1, compat="redisson"),
    lambda c: c.rwlock("dl:x", lock_delay=1, compat="redisson"),
], ids=["redisson_rlock", "redisson_fair_lock", "redisson_rwlock"])
def test_types_without_a_delay_refuse_one(client: hilock.Client, make: Any) -> None:
    with pytest.raises(ValueError, match="lock_delay"):
        make(client)


def test_bad_delays_are_refused(client: hilock.Client) -> None:
    for bad in (-1, float("nan"), float("inf"), "1", True):
        with pytest.raises(ValueError):
            client.lock("dl:bad", lock_delay=bad)  # type: ignore[arg-type]
    # The C core: a simple lock never lapses, and a delay is set before a grant.
    simple = client.simple_lock("dl:simple")
    with pytest.raises(ValueError):
        _h.hilock_hold_set_lock_delay(simple._h, 1000)
    lk = client.lock("dl:bad", ttl=5, auto_renew=False)
    assert lk.acquire(blocking=False)
    with pytest.raises(ValueError):
        _h.hilock_hold_set_lock_delay(lk._h, 1000)
    lk.release()


def test_killed_multi_key_holder_passes_each_name_after_the_delay(
        rds, client: hilock.Client, redis_url: str) -> None:
    checked = _killed_past_the_delay(
        rds, redis_url, "multi", "",
        lambda rep: rds.get(lock_key("{dl}b")) == rep["token"].encode())
    # Either name alone, by a lock with the delay, waits the delay out too.
    _granted_after_the_delay(client.lock("{dl}b", ttl=5, lock_delay=DELAY), checked)
    m = client.multi_lock(MULTI, ttl=5, lock_delay=DELAY)
    assert m.acquire(blocking=False)
    m.release()


def test_multi_key_delay_extend_release_and_no_delay(rds, client: hilock.Client) -> None:
    m = client.multi_lock(MULTI, ttl=2, auto_renew=False, lock_delay=20)
    assert m.lock_delay == 20
    assert m.acquire(blocking=False)
    for name in MULTI:
        assert 20_000 < rds.pttl(delay_key(name)) <= 22_000
    m.extend(30, replace=True)
    for name in MULTI:
        assert 48_000 < rds.pttl(delay_key(name)) <= 50_000  # 30 s + the delay
    m.release()
    assert rds.keys("*delay*") == []
    # A release frees the names at once, to either kind of lock.
    lk = client.lock("{dl}a", ttl=5, lock_delay=20)
    assert lk.acquire(blocking=False)
    lk.release()
    # A lapsed multi-key grant holds each name back from every lock, with a
    # delay of its own or without.
    m = client.multi_lock(MULTI, ttl=0.2, auto_renew=False, lock_delay=20)
    assert m.acquire(blocking=False)
    wait_for(lambda: not rds.exists(lock_key("{dl}a")), 10, what="the grant to lapse")
    assert not client.lock("{dl}a", ttl=5, lock_delay=20).acquire(blocking=False)
    assert not client.lock("{dl}a", ttl=5).acquire(blocking=False)
    assert not client.multi_lock(MULTI, ttl=5, lock_delay=20).acquire(blocking=False)
    assert not client.multi_lock(MULTI, ttl=5).acquire(blocking=False)
    assert client.force_release("{dl}a") and client.force_release("{dl}b")
    # Without a delay: no marker.
    m = client.multi_lock(MULTI, ttl=5, auto_renew=False)
    assert m.lock_delay == 0
    assert m.acquire(blocking=False)
    m.renew()
    assert rds.keys("*delay*") == []
    m.release()


def test_killed_fair_lock_holder_passes_the_lock_after_the_delay(
        rds, client: hilock.Client, redis_url: str) -> None:
    checked = _killed_past_the_delay(
        rds, redis_url, "fair", "dl:fair",
        lambda rep: rds.get("hilock:{dl:fair}:fair") == rep["token"].encode())
    successor = client.fair_lock("dl:fair", ttl=5, lock_delay=DELAY)
    assert successor.lock_delay == DELAY
    _granted_after_the_delay(successor, checked)
    assert not rds.exists(delay_key("dl:fair"))


def test_fair_lock_release_frees_at_once_and_no_delay_writes_no_marker(
        rds, client: hilock.Client) -> None:
    a = client.fair_lock("dl:fair", ttl=30, lock_delay=30)
    b = client.fair_lock("dl:fair", ttl=30, lock_delay=30)
    assert a.acquire(blocking=False)
    assert 30_000 < rds.pttl(delay_key("dl:fair")) <= 60_000
    a.renew()
    assert 30_000 < rds.pttl(delay_key("dl:fair")) <= 60_000
    a.release()
    assert b.acquire(blocking=False)  # a release: no delay
    b.release()
    # A lapsed grant's delay holds the line back; an operator's forced
    # release ends it.
    lapsing = client.fair_lock("dl:fair", ttl=0.2, auto_renew=False, lock_delay=30)
    assert lapsing.acquire(blocking=False)
    assert not b.acquire(blocking=False)
    waiter = client.fair_lock("dl:fair", ttl=5, lock_delay=30)
    no_delay = client.fair_lock("dl:fair", ttl=5)
    wait_for(lambda: not rds.exists("hilock:{dl:fair}:fair"), 10, what="the grant to lapse")
    assert not waiter.acquire(timeout=0.3)  # far shorter than the delay
    assert not no_delay.acquire(blocking=False)  # the delay holds for everyone
    info = client.inspect("dl:fair")
    assert not info.held and info.lock_delay == 30
    assert client.force_release("dl:fair")
    assert waiter.acquire(blocking=False)
    waiter.release()
    plain = client.fair_lock("dl:fair", ttl=5)
    assert plain.lock_delay == 0
    with plain:
        assert rds.keys("*delay*") == []


# -- Reentrant lock and read-write lock (its write side) ----------------------

def rlock_key(name: str) -> str:
    return f"hilock:{{{name}}}:rlock"


def writer_key(name: str) -> str:
    return f"hilock:{{{name}}}:rw:writer"


def test_killed_rlock_holder_renewed_by_the_thread_passes_the_name_after_the_delay(
        rds, client: hilock.Client, redis_url: str) -> None:
    # Entered twice, renewed by the renewal thread's batch.
    checked = _killed_past_the_delay(
        rds, redis_url, "rlock", "dl:rl",
        lambda rep: list(rds.hvals(rlock_key("dl:rl"))).count(b"2") == 1)
    successor = client.rlock("dl:rl", ttl=5)
    assert successor.lock_delay == 0
    _granted_after_the_delay(successor, checked)

def test_rlock_delay_from_first_entry_to_final_release(rds, client: hilock.Client,
                                                       other_client: hilock.Client) -> None:
    other = other_client  # another owner
    rl = client.rlock("dl:rl", ttl=30, lock_delay=30)
    assert rl.lock_delay == 30
    assert rl.acquire(blocking=False) and rl.acquire(blocking=False)
    assert 30_000 < rds.pttl(delay_key("dl:rl")) <= 60_000  # ttl + lock_delay
    rl.release()  # a re-entry's release: still held, the marker stays
    assert rds.pttl(delay_key("dl:rl")) > 30_000
    assert not other.rlock("dl:rl", ttl=5).acquire(blocking=False)
    rl.release()
    assert not rds.exists(delay_key("dl:rl"))
    # A final release frees the name at once, to a lock with or without a delay.
    nxt = other.rlock("dl:rl", ttl=5, lock_delay=30)
    assert nxt.acquire(blocking=False)
    nxt.release()
    plain = other.rlock("dl:rl", ttl=5)
    with plain:
        assert not rds.exists(delay_key("dl:rl"))
    # Renewal by the renewal thread pushes the marker: held past its
    # first TTL, a marker not pushed would have less than the delay left.
    renewed = client.rlock("dl:rl", ttl=1, lock_delay=20)
    assert renewed.acquire(blocking=False)
    t0 = time.monotonic()
    wait_for(lambda: time.monotonic() > t0 + 1.5, 5)
    assert renewed.owned()
    assert rds.pttl(delay_key("dl:rl")) > 20_000
    renewed.release()
    assert rds.keys("*delay*") == []


def test_rlock_lapsed_grant_blocks_every_owner_until_force_release(
        rds, client: hilock.Client, other_client: hilock.Client) -> None:
    other = other_client
    lapsing = client.rlock("dl:rl", ttl=0.2, auto_renew=False, lock_delay=20)
    assert lapsing.acquire(blocking=False)
    wait_for(lambda: not rds.exists(rlock_key("dl:rl")), 10, what="the grant to lapse")
    assert not other.rlock("dl:rl", ttl=5).acquire(blocking=False)
    assert not other.rlock("dl:rl", ttl=5, lock_delay=20).acquire(blocking=False)
    # A waiter sleeps until the marker ends (its pttl), not in a loop of attempts.
    before = command_calls(rds).get("evalsha", 0)
    assert not other.rlock("dl:rl", ttl=5).acquire(timeout=0.5)
    assert command_calls(rds).get("evalsha", 0) - before < 10
    info = client.inspect("dl:rl")
    assert not info.held and info.lock_delay == 20
    assert info.delay_left is not None and 0 < info.delay_left <= 20
    assert client.force_release("dl:rl")
    late = other.rlock("dl:rl", ttl=5)
    assert late.acquire(blocking=False)
    late.release()


def test_rlock_bad_delays_and_redisson_refuse(client: hilock.Client) -> None:
    for bad in (-1, float("nan"), "1", True):
        with pytest.raises(ValueError):
            client.rlock("dl:bad", lock_delay=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lock_delay"):
        client.rlock("dl:bad", lock_delay=1, compat="redisson")
    with pytest.raises(ValueError, match="lock_delay"):
        client.rwlock("dl:bad", lock_delay=1, compat="redisson")
    rl = client.rlock("dl:bad", ttl=5, auto_renew=False)
    assert rl.acquire(blocking=False)
    with pytest.raises(ValueError):  # set while held
        _h.hilock_hold_set_lock_delay(rl._h, 1000)
    rl.release()
    rw = client.rwlock("dl:bad", ttl=5, auto_renew=False)
    with pytest.raises(ValueError):
        client.rwlock("dl:bad", lock_delay=-1)
    with rw.write():
        with pytest.raises(ValueError):
            _h.hilock_hold_set_lock_delay(rw.write()._h, 1000)
    redisson = client.rlock("dl:bad", compat="redisson")
    with pytest.raises(hilock.UnsupportedError):
        _h.hilock_hold_set_lock_delay(redisson._h, 1000)


def test_killed_writer_keeps_writers_and_readers_out_for_the_delay(
        rds, client: hilock.Client, redis_url: str) -> None:
    checked = _killed_past_the_delay(
        rds, redis_url, "write", "dl:rw",
        lambda rep: rds.hget(writer_key("dl:rw"), "fence") == str(rep["fence"]).encode())
    # A reader and a writer, neither with a delay of its own, wait (in
    # threads of their own: separate owners) until the delay ends.
    rw = client.rwlock("dl:rw", ttl=5)
    assert rw.lock_delay == 0
    granted: Dict[str, float] = {}

    def take(side: Any, what: str) -> None:
        if side.acquire(timeout=30):  # generous: the delay is 2.5 s
            granted[what] = time.monotonic()
            side.release()

    threads = [threading.Thread(target=take, args=(rw.read(), "reader")),
               threading.Thread(target=take, args=(rw.write(), "writer"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert set(granted) == {"reader", "writer"}, granted
    for what, t in granted.items():
        assert t - checked >= DELAY - SLACK, (what, t - checked)


def test_rwlock_write_delay_release_renewal_and_no_read_marker(
        rds, client: hilock.Client, other_client: hilock.Client) -> None:
    other = other_client
    rw = client.rwlock("dl:rw", ttl=30, lock_delay=30)
    assert rw.lock_delay == 30
    # A read hold takes no delay.
    with rw.read():
        assert not rds.exists(delay_key("dl:rw"))
    w = rw.write()
    assert w.acquire(blocking=False) and w.acquire(blocking=False)
    assert 30_000 < rds.pttl(delay_key("dl:rw")) <= 60_000
    w.release()
    assert rds.pttl(delay_key("dl:rw")) > 30_000
    w.release()
    assert not rds.exists(delay_key("dl:rw"))
    # Released: the next writer and reader go at once.
    o = other.rwlock("dl:rw", ttl=5)
    assert o.write().acquire(blocking=False)
    o.write().release()
    assert o.read().acquire(blocking=False)
    o.read().release()
    # The renewal thread pushes the marker along with the write hold.
    renewed = client.rwlock("dl:rw", ttl=1, lock_delay=20)
    assert renewed.write().acquire(blocking=False)
    t0 = time.monotonic()
    wait_for(lambda: time.monotonic() > t0 + 1.5, 5)
    assert renewed.write().owned()
    assert rds.pttl(delay_key("dl:rw")) > 20_000
    renewed.write().release()
    # A reader's own lapsed grant leaves no marker (shared holds take no delay).
    reader = client.rwlock("dl:rw", ttl=0.2, auto_renew=False, lock_delay=20)
    assert reader.read().acquire(blocking=False)
    wait_for(lambda: not rds.exists("hilock:{dl:rw}:rw:readers"), 10,
             what="the read grant to lapse")
    assert rds.keys("*delay*") == []
    assert o.write().acquire(blocking=False)
    o.write().release()


def test_rwlock_lapsed_write_blocks_readers_and_writers_until_force_release(
        rds, client: hilock.Client, other_client: hilock.Client) -> None:
    other = other_client
    lapsing = client.rwlock("dl:rw", ttl=0.2, auto_renew=False, lock_delay=20)
    assert lapsing.write().acquire(blocking=False)
    wait_for(lambda: not rds.exists(writer_key("dl:rw")), 10, what="the grant to lapse")
    o = other.rwlock("dl:rw", ttl=5)
    assert not o.write().acquire(blocking=False)
    assert not o.read().acquire(blocking=False)
    assert not other.rwlock("dl:rw", ttl=5, lock_delay=20).write().acquire(blocking=False)
    # Waiters sleep until the marker ends, or their own refresh (ttl/3),
    # not in a loop of attempts.
    before = command_calls(rds).get("evalsha", 0)
    assert not o.read().acquire(timeout=0.5)
    assert not o.write().acquire(timeout=0.5)
    assert command_calls(rds).get("evalsha", 0) - before < 20
    info = client.inspect("dl:rw")
    assert not info.held and info.lock_delay == 20
    assert info.delay_left is not None and 0 < info.delay_left <= 20
    assert client.force_release("dl:rw")
    assert not rds.exists(delay_key("dl:rw"))
    assert o.read().acquire(blocking=False)
    o.read().release()


def _delays_on_master(c: hilock.Client, cluster: Any, m: int) -> None:
    node = cluster.conn(m)
    try:
        rl_name = cluster.name_on(m, "dl-rl-")
        rw_name = cluster.name_on(m, "dl-rw-")
        rl = c.rlock(rl_name, ttl=1, lock_delay=20)
        rw = c.rwlock(rw_name, ttl=1, lock_delay=20)
        assert rl.acquire(blocking=False) and rw.write().acquire(blocking=False)
        t0 = time.monotonic()
        # Held past the first TTL by renewals: the markers were pushed.
        wait_for(lambda: time.monotonic() > t0 + 1.5, 5)
        assert rl.owned() and rw.write().owned()
        assert node.pttl(delay_key(rl_name)) > 20_000
        assert node.pttl(delay_key(rw_name)) > 20_000
        rl.release()
        rw.write().release()
        assert not node.exists(delay_key(rl_name))
        assert not node.exists(delay_key(rw_name))
        # A lapsed grant's marker holds the name back there too (another
        # thread: another owner).
        lapsing = c.rlock(rl_name, ttl=0.2, auto_renew=False, lock_delay=20)
        assert lapsing.acquire(blocking=False)
        wait_for(lambda: not node.exists(rlock_key(rl_name)), 10)
        got: List[bool] = []
        t = threading.Thread(target=lambda: got.append(
            c.rlock(rl_name, ttl=5).acquire(blocking=False)))
        t.start()
        t.join(10)
        assert got == [False]
        assert c.force_release(rl_name)
    finally:
        node.close()


def test_rlock_and_write_delays_on_a_cluster(cluster) -> None:
    """The marker shares the lock's hash tag, so on a cluster it lives on the
    slot's master with the lock: set there, pushed by the renewal thread's
    per-slot batches, honoured and deleted there."""
    c = hilock.Client(cluster.url, connect_timeout=1.0, command_timeout=5.0, reconnect=15.0)
    try:
        for m in cluster.masters():
            _delays_on_master(c, cluster, m)
    finally:
        c.close()


# -- Sequential lock --------------------------------------------------------

SEQ = "dl:seq"


def seq_key(name: str, role: str) -> str:
    return f"hilock:{{{name}}}:seq:{role}"


def _seq_held_by(rds, name: str, token: str) -> bool:
    """Whether token's grant holds the sequential lock now (its session on
    the server's clock)."""
    now_s, now_us = rds.time()
    expiry = rds.zscore(seq_key(name, "session"), token)
    return (rds.hget(seq_key(name, "holder"), "owner") == token.encode() and
            expiry is not None and expiry > now_s * 1000 + now_us // 1000)


def _acquire_in_thread(lk: Any, timeout: float, log: List[Any]) -> threading.Thread:
    """lk.acquire(timeout) in a thread that appends (lk, granted, monotonic
    time of the return) to log."""
    def run() -> None:
        ok = lk.acquire(timeout=timeout)
        log.append((lk, ok, time.monotonic()))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_killed_sequential_lock_holder_passes_the_turn_after_the_delay_in_order(
        rds, client: hilock.Client, redis_url: str) -> None:
    p = start_child(_hold_auto_renewed, redis_url, "seq", SEQ)
    other = hilock.Client(redis_url)
    log: List[Any] = []
    threads = []
    try:
        report = pop_report(rds, "ready")
        # Two successors already waiting in line (without a delay of their
        # own), in another client and in this one.
        first = other.sequential_lock(SEQ, ttl=5)
        threads.append(_acquire_in_thread(first, 30, log))
        wait_for(lambda: first.sequence is not None, 10, what="the first to enqueue")
        second = client.sequential_lock(SEQ, ttl=5)
        threads.append(_acquire_in_thread(second, 30, log))
        wait_for(lambda: second.sequence is not None, 10, what="the second to enqueue")
        assert first.sequence < second.sequence
        # Held past ttl + lock_delay since the grant: only the renewal
        # thread's batches, pushing the marker, keep it alive until the kill.
        wait_for(lambda: time.monotonic() > report["t"] + TTL + DELAY + 0.3, 10)
        checked = time.monotonic()
        assert _seq_held_by(rds, SEQ, report["token"])
        assert rds.pttl(delay_key(SEQ)) > DELAY * 1000
        kill_child(p, signal.SIGKILL)
        # The grant was there after `checked`: its session ends after it and
        # the marker lock_delay later; nobody is granted before, and then
        # the head of the line is.
        wait_for(lambda: log, 30, what="the first in line to be granted")  # generous: 2.5 s delay
        lk, ok, granted = log[0]
        assert lk is first and ok
        assert granted - checked >= DELAY - SLACK, granted - checked
        assert len(log) == 1
        assert first.waiters() == 1  # the second still waits, in its place
        first.release()  # a release: the second goes on at once
        threads[1].join(20)
        assert [(x is second, ok) for x, ok, _ in log[1:]] == [(True, True)]
        second.release()
        assert not rds.exists(delay_key(SEQ))
    finally:
        kill_child(p, signal.SIGKILL)
        other.close()  # ends a wait still in progress after a failure
        for t in threads:
            t.join(30)


def test_sequential_lock_release_frees_at_once_and_renewal_pushes_the_marker(
        rds, client: hilock.Client) -> None:
    lk = client.sequential_lock(SEQ, ttl=2, auto_renew=False, lock_delay=20)
    assert lk.lock_delay == 20
    assert lk.acquire(blocking=False)
    assert 20_000 < rds.pttl(delay_key(SEQ)) <= 22_000  # ttl + the delay
    info = client.inspect(SEQ)
    assert info.type == "sequential_lock" and info.held and info.lock_delay == 20
    assert info.delay_left is not None and 20 < info.delay_left <= 22
    lk.extend(30, replace=True)
    assert 48_000 < rds.pttl(delay_key(SEQ)) <= 50_000  # 30 s + the delay
    lk.renew()
    assert 20_000 < rds.pttl(delay_key(SEQ)) <= 22_000
    # A waiter in line (no delay of its own) gets the lock on the release,
    # far sooner than the delay.
    log: List[Any] = []
    waiter = client.sequential_lock(SEQ, ttl=5)
    t = _acquire_in_thread(waiter, 15, log)
    wait_for(lambda: lk.waiters() == 1, 10, what="the waiter to enqueue")
    lk.release()
    assert not rds.exists(delay_key(SEQ))
    t.join(15)
    assert [ok for _, ok, _ in log] == [True]
    waiter.release()
    # A handle without a delay writes no marker.
    plain = client.sequential_lock(SEQ, ttl=5, auto_renew=False)
    assert plain.lock_delay == 0
    with plain:
        plain.renew()
        plain.extend(1)
        assert rds.keys("*delay*") == []


def test_lapsed_sequential_grant_holds_the_line_until_the_delay_ends_or_force_release(
        rds, client: hilock.Client) -> None:
    lapsing = client.sequential_lock(SEQ, ttl=0.2, auto_renew=False, lock_delay=30)
    assert lapsing.acquire(blocking=False)
    token = lapsing.token
    wait_for(lambda: not _seq_held_by(rds, SEQ, token), 10, what="the grant to lapse")
    assert not lapsing.owned()
    # Granted to no one, with a delay of its own or without, try or wait.
    plain = client.sequential_lock(SEQ, ttl=5)
    assert not plain.acquire(blocking=False)
    assert not client.sequential_lock(SEQ, ttl=5, lock_delay=30).acquire(blocking=False)
    assert not plain.acquire(timeout=0.3)  # far shorter than the delay
    assert rds.zcard(seq_key(SEQ, "queue")) == 0  # each left the line
    # A waiter in line sleeps (the delay's end or its heartbeat bound its
    # sleep: one re-check per third of its 5 s window at most).
    log: List[Any] = []
    before = command_calls(rds).get("evalsha", 0)
    t = _acquire_in_thread(plain, 60, log)
    wait_for(lambda: client.waiting == 1, 10, what="the waiter to sleep")
    time.sleep(1.0)
    # Generous: a waiter that spun would have run the script hundreds of
    # times in that second; a sleeping one runs it a few times.
    assert command_calls(rds).get("evalsha", 0) - before < 20
    info = client.inspect(SEQ)
    assert info.type == "sequential_lock" and not info.held and info.waiters == 1
    assert info.lock_delay == 30
    assert info.delay_left is not None and 0 < info.delay_left <= 30
    # An operator's forced release ends the delay: the waiter is granted.
    assert client.force_release(SEQ)
    assert not rds.exists(delay_key(SEQ))
    t.join(20)  # generous, and far shorter than the 30 s delay
    assert [ok for _, ok, _ in log] == [True]
    plain.release()


def test_adopted_sequential_grant_honours_another_grants_delay(
        rds, client: hilock.Client) -> None:
    lk = client.sequential_lock(SEQ, ttl=5, auto_renew=False, lock_delay=20)
    assert lk.acquire(blocking=False)
    adopted = client.adopt(lk.export())
    assert adopted.lock_delay == 20  # the delay goes with the export
    adopted.release()  # the grant's release frees the name at once
    assert not rds.exists(delay_key(SEQ))
    lapsing = client.sequential_lock(SEQ, ttl=0.2, auto_renew=False, lock_delay=20)
    assert lapsing.acquire(blocking=False)
    wait_for(lambda: not _seq_held_by(rds, SEQ, lapsing.token), 10, what="the grant to lapse")
    assert not adopted.acquire(blocking=False)
    assert client.force_release(SEQ)
    assert adopted.acquire(blocking=False)
    adopted.release()


def test_sequential_lock_bad_delays_and_the_other_factories(
        rds, client: hilock.Client, redis_url: str, default_client_env: None) -> None:
    for bad in (-1, float("nan"), float("inf"), "1", True):
        with pytest.raises(ValueError):
            client.sequential_lock(SEQ, lock_delay=bad)  # type: ignore[arg-type]
    lk = client.sequential_lock(SEQ, ttl=5, auto_renew=False)
    assert lk.acquire(blocking=False)
    with pytest.raises(ValueError):  # set before a grant, not while held
        _h.hilock_hold_set_lock_delay(lk._h, 1000)
    lk.release()
    # The module-level factory.
    mod = hilock.sequential_lock(SEQ, ttl=0.2, auto_renew=False, lock_delay=20)
    assert mod.lock_delay == 20
    assert mod.acquire(blocking=False)
    assert 0 < rds.pttl(delay_key(SEQ)) <= 20_200
    wait_for(lambda: not _seq_held_by(rds, SEQ, mod.token), 10, what="the grant to lapse")

    # The asyncio client's: its handle waits the delay out as well.
    async def body(c: Any) -> None:
        a = c.sequential_lock(SEQ, ttl=5, lock_delay=20)
        assert not await a.acquire(blocking=False)
        assert client.force_release(SEQ)
        assert await a.acquire(blocking=False)
        assert 20_000 < rds.pttl(delay_key(SEQ)) <= 25_000
        await a.release()
        assert not rds.exists(delay_key(SEQ))

    run_with_client(redis_url, body)
