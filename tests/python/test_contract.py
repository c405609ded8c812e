"""The lock contract, once for every lock type.

Each entry of FAMILIES says how to make a lock object of one type and how
the type differs from the others: who owns a grant (the object, or the
calling thread), how many may hold at once, whether grants expire, carry a
fence or can be extended, which keys hold a grant and on which servers.
Every test below runs for each family its contract item applies to, so a
new lock type joins by adding one entry to FAMILIES.

 1. try, refuse, release, grant again; ``with`` acquires and releases, and
    on a held lock raises LockTimeout without running the body
 2. a timed-out wait returns False and leaves nothing behind; a waiter is
    granted when the holder releases meanwhile
 3. release by an object that does not hold it raises and changes nothing
 4. expiry: another object takes a lapsed grant; the stale holder can
    neither extend nor release it away from the new holder
 5. renewal keeps a grant over several TTLs
 6. loss: a grant removed on the server is reported (on_lost, ``lost``,
    release raises, LockLost when a ``with`` block ends)
 7. fork: a child cannot release its parent's grant
 8. fences strictly increase over grants (None where a type has no fence)
 9. exclusion: 8 processes, each with its own client, never hold more than
    the type allows at once (history checker), and every one progresses

and with them:

 a. bad arguments are refused (a non-blocking acquire with a timeout, a
    name that would break the hash tag, a TTL of 0, a loss callback that
    is not callable) and lock objects cannot be pickled
 e. extend and renew move a live grant's expiry
 o. the owner: one object is one holder across threads (as a
    threading.Lock), or another thread is another owner

Items 1-8 need a second owner to be refused; items 4-6 need an expiry.
Which families take part in which item:

    family           1 2 3 4 5 6 7 8 9 a e o  owner   fence
    lock             x x x x x x x x x x x x  object  yes
    lease            x x x x x x x x x x x x  object  yes
    simple_lock      x x x . . . x x x x . x  object  yes (no expiry)
    rlock            x x x x x x x x x x . x  thread  yes
    rwlock.write     x x x x x x x x x x . x  thread  yes
    rwlock.read      x x x x x x x x . x . x  thread  None (the rival is a writer)
    semaphore        x x x x x x x x x x . x  thread  None (1 permit; renew only)
    semaphore-3      . . . . . . . . x x . .  thread  None (never more than 3)
    fair_lock        x x x x x x x x x x x x  object  yes
    multi_lock       x x x x x x x x x x x x  object  yes (one per name)
    sequential_lock  x x x x x x x x x x x x  object  yes
    segmented_lock   x x x x x x x x x x x x  object  yes (1 segment)
    redlock-1        x x x x x x x x x x x x  object  yes (1 private node)
    redlock-3        x x x x x x x x x x x x  object  yes (3 private nodes)

Nothing here asserts how fast anything happens; every wait is bounded.
"""
from __future__ import annotations

import logging
import pickle
import queue
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest
import redis

import hilock
from helpers import (FORK, NoLock, Worker, acquire_within, fork_call, hilock_log, lapsed,
                     open_gate, pass_gate, retry_stalled, start_child_collected, wait_for,
                     wait_turn_waiter)
from history import (ConcurrencyError, FenceError, Interval, RedisHistory,
                     check_fences_increase, check_max_concurrent)

NAME = "contract"
LONG_TTL = 10.0  # a grant that must not lapse during the test


# -- the families -------------------------------------------------------------------

Make = Callable[..., Any]  # make(env, name, **options) -> lock object


def _extend(lk) -> None:
    lk.extend(5.0)


def _renew(lk) -> None:
    lk.renew()


def _one_fence(lk) -> Tuple[Optional[int], ...]:
    return (lk.fence,)


def _fence_per_name(lk) -> Tuple[Optional[int], ...]:
    fences = lk.fence
    return (None,) if fences is None else tuple(fences[n] for n in lk.names)


def _key(lk) -> Tuple[bytes, ...]:
    return (lk.key,)


def _seq_keys(lk) -> Tuple[bytes, ...]:
    # The holder's entry, its session and the grant: renewal checks the
    # last two, so all three are the hold.
    return tuple(f"hilock:{{{lk.name}}}:seq:{role}".encode()
                 for role in ("queue", "session", "holder"))


def _rwlock_write(env, name, **opts):
    return env.client.rwlock(name, **opts).write()


def _redlock(n: int) -> Make:
    def make(env, name, **opts):
        return hilock.Redlock(env.nodes[:n], name, retry_delay=0.02, **opts)
    return make


@dataclass(frozen=True)
class Family:
    id: str
    make: Make
    # The conflicting object of another owner (None: another of make's).
    rival: Optional[Make] = None
    # "object": one object is one holder, as a threading.Lock; "thread":
    # the calling thread owns the grant, so another owner is another thread.
    owner: str = "object"
    # How many may hold at once; None: any number (a shared side, excluded
    # only by its rival).
    holders: Optional[int] = 1
    expires: bool = True
    fenced: bool = True
    # extend(seconds, replace=False) and renew() move a live grant's expiry
    # on, and refuse a lapsed one.
    extends: bool = True
    renews: bool = True
    hold_keys: Callable[[Any], Sequence[bytes]] = _key
    fences: Callable[[Any], Tuple[Optional[int], ...]] = _one_fence
    # Redlock: how many private servers; 0: the session's server.
    nodes: int = 0
    # The TTL that renewal keeps reliably on a busy machine.
    short_ttl: float = 0.4
    # Options the constructor must refuse with InvalidArgument.
    bad_options: Tuple[Dict[str, Any], ...] = ({"ttl": 0}, {"on_lost": 42})

    @property
    def refresh(self) -> Tuple[Callable[[Any], None], ...]:
        """The verbs that move a grant's expiry on."""
        return (_extend,) * self.extends + (_renew,) * self.renews

    @property
    def contends(self) -> bool:
        """A second owner is refused while one holds (items 1-8)."""
        return self.holders == 1 or self.rival is not None

    def check_fences(self, ivs: List[Interval]) -> None:
        """Fences in grant order: strictly increasing, or all None."""
        if self.fenced:
            check_fences_increase(ivs)
        elif any(iv.fence is not None for iv in ivs):
            raise FenceError(f"{self.id} grants carry fences: {[iv.fence for iv in ivs]}")


FAMILIES = [
    Family("lock", lambda env, name, **o: env.client.lock(name, **o)),
    Family("lease", lambda env, name, **o: env.client.lease(name, **o)),
    Family("simple_lock",
           lambda env, name, timeout=None, **_: env.client.simple_lock(name, timeout=timeout),
           expires=False, extends=False, renews=False, bad_options=()),
    Family("rlock", lambda env, name, **o: env.client.rlock(name, **o),
           owner="thread", extends=False, renews=False),
    Family("rwlock.write", _rwlock_write, owner="thread", extends=False, renews=False),
    Family("rwlock.read", lambda env, name, **o: env.client.rwlock(name, **o).read(),
           rival=_rwlock_write, owner="thread", holders=None, fenced=False, extends=False,
           renews=False),
    Family("semaphore", lambda env, name, **o: env.client.semaphore(name, 1, **o),
           owner="thread", fenced=False, extends=False),
    Family("semaphore-3", lambda env, name, **o: env.client.semaphore(name, 3, **o),
           owner="thread", holders=3, fenced=False, extends=False),
    Family("fair_lock", lambda env, name, **o: env.client.fair_lock(name, **o)),
    Family("multi_lock",
           lambda env, name, **o: env.client.multi_lock([f"{name}:a", f"{name}:b"], **o),
           hold_keys=lambda lk: lk.keys, fences=_fence_per_name),
    Family("sequential_lock", lambda env, name, **o: env.client.sequential_lock(name, **o),
           hold_keys=_seq_keys),
    Family("segmented_lock", lambda env, name, **o: env.client.segmented_lock(name, 1, **o)),
    Family("election", lambda env, name, **o: env.client.election(name, **o), extends=False),
    Family("redlock-1", _redlock(1), nodes=1, short_ttl=0.6),
    Family("redlock-3", _redlock(3), nodes=3, short_ttl=0.6),
]

# The control group of the exclusion harness: a lock that excludes nothing.
NO_LOCK = Family("no-lock", lambda env, name, **o: NoLock(), fenced=False)


def families(pred: Callable[[Family], bool] = lambda f: True) -> List[Any]:
    return [pytest.param(f, id=f.id) for f in FAMILIES if pred(f)]


CONTENDING = families(lambda f: f.contends)
EXPIRING = families(lambda f: f.contends and f.expires)


# -- where a family's locks live ----------------------------------------------------

class Other:
    """Calls on the lock object of another owner: run in this thread for
    families whose owner is the object, on a thread of its own (the same one
    for every call) for families whose owner is the calling thread."""

    def __init__(self, fam: Family, obj: Any) -> None:
        self.obj = obj
        self._pool = (ThreadPoolExecutor(1, thread_name_prefix="other-owner")
                      if fam.owner == "thread" else None)

    def call(self, fn: Callable[[Any], Any], timeout: float = 30.0) -> Any:
        if self._pool is None:
            return fn(self.obj)
        return self._pool.submit(fn, self.obj).result(timeout)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)


class Env:
    """A family's lock objects, the servers that hold their keys, and the
    other owners a test made."""

    def __init__(self, fam: Family, url: str, client: hilock.Client,
                 nodes: Sequence[str]) -> None:
        self.fam, self.url, self.client, self.nodes = fam, url, client, list(nodes)
        self.servers = [redis.Redis.from_url(u) for u in (self.nodes or [url])]
        self._others: List[Other] = []

    def make(self, name: str = NAME, **opts: Any) -> Any:
        return self.fam.make(self, name, **opts)

    def rival(self, name: str = NAME, **opts: Any) -> Any:
        return (self.fam.rival or self.fam.make)(self, name, **opts)

    def other(self, obj: Any) -> Other:
        o = Other(self.fam, obj)
        self._others.append(o)
        return o

    def hold(self) -> Tuple[Any, List[bytes], Any]:
        """A granted object of the family (long TTL, not renewed), the keys
        of its grant and their state."""
        lk = self.make(ttl=LONG_TTL, auto_renew=False)
        assert lk.acquire(blocking=False)
        keys = self.keys(lk)
        return lk, keys, self.state(keys)

    def keys(self, lk: Any) -> List[bytes]:
        return list(self.fam.hold_keys(lk))

    def existing(self, keys: Sequence[bytes]) -> int:
        """How many of keys exist, counted on every server."""
        return sum(r.exists(k) for r in self.servers for k in keys)

    def state(self, keys: Sequence[bytes]) -> Tuple[Dict[Any, Any], Dict[Any, int]]:
        """(every key's value as DUMP gives it, every key's PTTL) on every server."""
        dumps, pttls = {}, {}
        for i, r in enumerate(self.servers):
            for k in keys:
                dumps[i, k] = r.dump(k)
                pttls[i, k] = r.pttl(k)
        return dumps, pttls

    def assert_unchanged(self, keys: Sequence[bytes], before, what: str) -> None:
        """keys hold what they held, and no expiry was moved on."""
        dumps, pttls = self.state(keys)
        assert dumps == before[0], f"{what} changed the grant's keys"
        moved = {k: (before[1][k], v) for k, v in pttls.items() if v > before[1][k]}
        assert not moved, f"{what} moved an expiry on (before, after): {moved}"

    def close(self) -> None:
        for o in self._others:
            o.close()
        for r in self.servers:
            r.close()


@pytest.fixture
def env(request, fam: Family, client: hilock.Client, redis_url: str):
    nodes = request.getfixturevalue("redis_nodes")[:fam.nodes] if fam.nodes else []
    e = Env(fam, redis_url, client, [s.url for s in nodes])
    try:
        yield e
    finally:
        e.close()


# -- a. arguments -------------------------------------------------------------------

@pytest.mark.parametrize("fam", families())
def test_bad_arguments_are_refused(fam: Family, env: Env) -> None:
    for opts in fam.bad_options:
        with pytest.raises(hilock.InvalidArgument):
            env.make(**opts)
    with pytest.raises(hilock.InvalidArgument):
        env.make("}bad")  # would break the hash tag
    lk = env.make(ttl=LONG_TTL)
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError
        lk.acquire(blocking=False, timeout=1.0)
    assert lk.owned() is False
    with pytest.raises(TypeError):
        pickle.dumps(lk)


def _try(lk) -> bool:
    return lk.acquire(blocking=False)


def _release(lk) -> None:
    lk.release()


def _owned(lk) -> bool:
    return lk.owned()


# -- 1. try, refuse, release; with ---------------------------------------------------

@pytest.mark.parametrize("fam", CONTENDING)
def test_try_refuse_release_and_with(fam: Family, env: Env) -> None:
    lk = env.make(ttl=LONG_TTL, auto_renew=False)
    rival = env.other(env.rival(ttl=LONG_TTL, timeout=0.2, auto_renew=False))
    assert lk.locked() is False and lk.owned() is False

    assert lk.acquire(blocking=False) is True
    keys = env.keys(lk)
    assert env.existing(keys) == len(keys) * len(env.servers)
    assert lk.owned() is True and lk.locked() is True
    assert rival.call(_try) is False
    assert rival.call(_owned) is False and lk.owned() is True

    lk.release()
    assert env.existing(keys) == 0
    assert lk.owned() is False and lk.locked() is False
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()
    assert rival.call(_try) is True
    assert lk.acquire(blocking=False) is False
    rival.call(_release)

    ran: List[int] = []

    def blocked_with(o) -> None:
        with pytest.raises(hilock.LockTimeout):
            with o:
                ran.append(1)

    with lk as held:
        assert held is lk and lk.owned()
        rival.call(blocked_with)
        assert ran == [], "the body ran without the lock"
        assert lk.owned()
    assert lk.owned() is False and env.existing(keys) == 0
    assert rival.call(_try) is True
    rival.call(_release)


# -- 2. waiting ----------------------------------------------------------------------

@pytest.mark.parametrize("fam", CONTENDING)
def test_timed_out_wait_leaves_nothing_and_a_release_grants_a_waiter(fam: Family,
                                                                      env: Env) -> None:
    holder = env.make(ttl=LONG_TTL, auto_renew=False)
    assert holder.acquire(blocking=False)
    waiter = env.other(env.rival(ttl=LONG_TTL, auto_renew=False))
    assert waiter.call(lambda o: o.acquire(timeout=0.3)) is False
    assert waiter.call(lambda o: (o.owned(), o.validity)) == (False, 0.0)
    assert holder.owned()
    holder.release()
    # Nothing of the timed-out wait is left: the free lock grants at once.
    fresh = env.other(env.rival(ttl=LONG_TTL, auto_renew=False))
    assert fresh.call(_try) is True
    fresh.call(_release)

    # The holder releases while a waiter (on a thread of its own) waits.
    assert holder.acquire(blocking=False)
    obj = waiter.obj

    def wait_then_release() -> bool:
        if not obj.acquire(timeout=15.0):
            return False
        obj.release()
        return True

    w = Worker(wait_then_release, name="waiter")
    w.start()
    time.sleep(0.3)
    assert w.is_alive(), "the waiter was granted while the lock was held"
    holder.release()
    assert w.outcome(20.0) is True, "the waiter was not granted after the release"


# -- 3. release by a non-holder --------------------------------------------------------

@pytest.mark.parametrize("fam", CONTENDING)
def test_release_by_a_non_holder_raises_and_changes_nothing(fam: Family, env: Env) -> None:
    other = env.other(env.make(ttl=LONG_TTL, auto_renew=False))

    def refused(o) -> bool:
        with pytest.raises(hilock.LockNotOwnedError) as info:
            o.release()
        return isinstance(info.value, RuntimeError)  # as threading.Lock's release

    assert other.call(refused)  # nothing held anywhere
    holder, keys, before = env.hold()
    assert other.call(refused)
    env.assert_unchanged(keys, before, "a non-holder's release")
    assert holder.owned() is True
    holder.release()


# -- o. the owner --------------------------------------------------------------------

@pytest.mark.parametrize("fam", families(lambda f: f.contends and f.owner == "thread"))
def test_another_thread_is_another_owner(fam: Family, env: Env) -> None:
    """The same object from another thread: not the holder."""
    lk, keys, before = env.hold()

    def from_another_thread() -> bool:
        with pytest.raises(hilock.LockNotOwnedError):
            lk.release()
        return lk.owned()

    assert Worker(from_another_thread).outcome(10.0) is False
    env.assert_unchanged(keys, before, "another thread's release")
    assert lk.owned()
    lk.release()


@pytest.mark.parametrize("fam", families(lambda f: f.contends and f.owner == "object"))
def test_one_object_is_one_holder_across_threads(fam: Family, env: Env) -> None:
    """As threading.Lock: a second thread acquiring the held object waits
    for its release, and a try from it fails."""
    lk = env.make(ttl=LONG_TTL, auto_renew=False)
    assert lk.acquire(blocking=False)
    w = Worker(lk.acquire, True, 15.0, name="second-thread")
    w.start()
    assert Worker(lk.acquire, False).outcome(10.0) is False
    if hasattr(lk, "_local"):  # a family that queues an object's threads locally
        wait_turn_waiter(lk, w)
    # Room for a wrong grant to show: the turn's wait looks again every
    # 0.2 s (a family whose threads wait on the C handle shows that wait
    # nowhere).
    time.sleep(0.3)
    assert w.is_alive(), "a second thread acquired a held object"
    lk.release()
    assert w.outcome(20.0) is True
    assert lk.owned()
    lk.release()  # the holder is the object: any thread may release it
    assert not lk.locked()


# -- 4. expiry -----------------------------------------------------------------------

@pytest.mark.parametrize("fam", EXPIRING)
def test_lapsed_grant_goes_to_another_and_the_stale_holder_cannot_touch_it(
        fam: Family, env: Env) -> None:
    stale = env.make(ttl=fam.short_ttl, auto_renew=False)
    assert stale.acquire(blocking=False)
    other = env.other(env.rival(ttl=LONG_TTL, auto_renew=False))
    assert other.call(lambda o: o.acquire(timeout=fam.short_ttl + 10.0)), \
        "the lapsed grant never went to a waiting object"
    assert stale.validity == 0.0 and stale.owned() is False
    keys = other.call(env.keys)
    before = env.state(keys)
    for refresh in fam.refresh:
        with pytest.raises(hilock.LockNotOwnedError):
            refresh(stale)
    with pytest.raises(hilock.LockNotOwnedError):
        stale.release()
    env.assert_unchanged(keys, before, "the stale holder")
    assert other.call(_owned) is True
    other.call(_release)


# -- e. extend and renew -------------------------------------------------------------

@pytest.mark.parametrize("fam", families(lambda f: f.contends and f.expires and f.extends))
def test_extend_and_renew_move_a_live_grants_expiry(fam: Family, env: Env) -> None:
    lk = env.make(ttl=LONG_TTL, auto_renew=False)
    assert lk.acquire(blocking=False)
    with pytest.raises(hilock.InvalidArgument):
        lk.extend(-1)
    lk.extend(2 * LONG_TTL, replace=True)
    assert LONG_TTL < lk.validity <= 2 * LONG_TTL
    lk.extend(LONG_TTL)  # added to what is left
    assert 2 * LONG_TTL < lk.validity <= 3 * LONG_TTL
    lk.renew()  # back to the lock's ttl
    assert 0 < lk.validity <= LONG_TTL
    assert lk.owned()
    lk.release()


# -- 5. renewal ----------------------------------------------------------------------

@pytest.mark.parametrize("fam", EXPIRING)
def test_renewal_keeps_the_grant_over_several_ttls(fam: Family, env: Env) -> None:
    ttl = fam.short_ttl

    def scenario(i: int) -> None:
        name = f"{NAME}-{i}"
        lk = env.make(name, ttl=ttl)  # auto_renew is the default
        rival = env.other(env.rival(name, ttl=LONG_TTL, auto_renew=False))
        assert lk.auto_renew is True
        assert lk.acquire(blocking=False)
        time.sleep(3.5 * ttl)
        taken = rival.call(_try)
        if taken:
            rival.call(_release)
        if taken or not lk.owned():
            # Starved of renewal on a busy machine, the holder must know it
            # (then the scenario is tried again); else this fails.
            lapsed(lk, "the renewed grant lapsed")
        assert lk.lost is False and lk.validity > 0
        lk.release()

    retry_stalled(scenario)


# -- 6. loss -------------------------------------------------------------------------

@pytest.mark.parametrize("fam", EXPIRING)
def test_grant_removed_on_the_server_is_reported_lost(fam: Family, env: Env) -> None:
    lost: List[Any] = []
    lk = env.make(ttl=fam.short_ttl, on_lost=lost.append)  # auto_renew is the default

    def remove_the_grant(n: int) -> None:
        assert lk.lost is False
        keys = env.keys(lk)
        for r in env.servers:
            r.delete(*keys)
        wait_for(lambda: lk.lost, 5.0, what="the loss to be noticed")
        wait_for(lambda: len(lost) == n, 5.0, what=f"on_lost call {n}")
        assert lk.validity == 0.0

    assert lk.acquire(blocking=False)
    remove_the_grant(1)
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()
    # Again in a with block, which raises LockLost; the object takes a new
    # grant as before.
    with pytest.raises(hilock.LockLost):
        with lk:
            remove_the_grant(2)
    assert lost == [lk, lk]
    assert lk.acquire(blocking=False)
    assert lk.lost is False and lk.owned()
    lk.release()


# -- 7. fork -------------------------------------------------------------------------

@pytest.mark.parametrize("fam", CONTENDING)
def test_forked_child_cannot_release_the_parents_grant(fam: Family, env: Env) -> None:
    lk, keys, before = env.hold()

    def child() -> dict:
        out: dict = {}
        try:
            lk.release()
            out["release"] = "returned"
        except hilock.ForkedLockError as e:
            out["release"] = ["ForkedLockError", isinstance(e, hilock.LockNotOwnedError)]
        except Exception as e:  # noqa: BLE001 - reported to the parent
            out["release"] = f"{type(e).__name__}: {e}"
        out["validity"] = lk.validity
        # The parent's grant still holds against the child's own objects.
        out["rival"] = env.rival(ttl=LONG_TTL, auto_renew=False).acquire(blocking=False)
        return out

    out, _ = fork_call(child, timeout=20.0)
    assert out == {"release": ["ForkedLockError", True], "validity": 0.0, "rival": False}
    env.assert_unchanged(keys, before, "the child")
    assert lk.owned()
    lk.release()


# -- 8. fences -----------------------------------------------------------------------

@pytest.mark.parametrize("fam", families(lambda f: f.contends and f.fenced))
def test_fences_strictly_increase_over_grants(fam: Family, env: Env) -> None:
    seen = []
    for _ in range(3):
        lk = env.make(ttl=LONG_TTL, auto_renew=False)
        assert lk.acquire(blocking=False)
        seen.append(fam.fences(lk))
        lk.release()
        assert fam.fences(lk) == seen[-1]  # the last grant's fence stays readable
    assert all(f is not None for fences in seen for f in fences), seen
    for prev, cur in zip(seen, seen[1:]):
        assert all(b > a for a, b in zip(prev, cur)), f"fences did not increase: {seen}"


@pytest.mark.parametrize("fam", families(lambda f: f.contends and not f.fenced))
def test_unfenced_grants_carry_no_fence(fam: Family, env: Env) -> None:
    lk = env.make(ttl=LONG_TTL, auto_renew=False)
    assert lk.fence is None
    assert lk.acquire(blocking=False)
    assert lk.fence is None
    lk.release()
    assert lk.fence is None


# -- 9. exclusion across processes -----------------------------------------------------

PROCS = 8
ROUNDS = 6


def _contender(fam: Family, url: str, nodes: Sequence[str], tag: str, gate,
               rounds: int) -> None:
    """One process with its own client: acquire, hold briefly, release,
    record the window; rounds times."""
    r = redis.Redis.from_url(url)
    hist = RedisHistory(r, f"{tag}:history")
    env = Env(fam, url, hilock.Client(url), nodes)
    lk = env.make(ttl=LONG_TTL)
    rnd = random.Random()
    pass_gate(gate)
    for _ in range(rounds):
        start = acquire_within(lk, "acquire timed out: the lock was never handed over")
        time.sleep(rnd.uniform(0.001, 0.003))
        end = time.monotonic()
        fence = fam.fences(lk)[0]
        lk.release()
        hist.record(start, end, fence)
        time.sleep(rnd.uniform(0, 0.002))


def run_contenders(fam: Family, env: Env, tag: str) -> List[Interval]:
    gate = FORK.Event()
    procs = [start_child_collected(_contender, fam, env.url, env.nodes, tag, gate, ROUNDS)
             for _ in range(PROCS)]
    open_gate(gate, procs, 60.0)
    r = redis.Redis.from_url(env.url)  # the history is on the session's server
    try:
        hist = RedisHistory(r, f"{tag}:history").load()
    finally:
        r.close()
    assert Counter(iv.pid for iv in hist) == {p.pid: ROUNDS for p in procs}, \
        "not every process made all its rounds"
    return hist


@pytest.mark.parametrize("fam", families(lambda f: f.holders is not None))
def test_processes_never_exceed_the_holders_allowed(fam: Family, env: Env) -> None:
    hist = run_contenders(fam, env, "excl")
    assert check_max_concurrent(hist, fam.holders) <= fam.holders
    fam.check_fences(hist)


@pytest.mark.parametrize("fam", [pytest.param(NO_LOCK, id=NO_LOCK.id)])
def test_the_exclusion_harness_fails_without_a_lock(fam: Family, env: Env) -> None:
    """Control group: the same processes holding nothing overlap, and the
    checker says so."""
    hist = run_contenders(fam, env, "none")
    with pytest.raises(ConcurrencyError) as info:
        check_max_concurrent(hist, 1)
    assert info.value.crowds


# -- 4b. a lapsed grant is a loss, and its object acquires again ---------------------

class OwnThread:
    """Calls on one daemon thread of its own (a grant the calling thread owns
    stays with it), each bounded: a call that hangs fails the test, and the
    thread it hangs on does not keep the interpreter from exiting."""

    def __init__(self) -> None:
        self._q: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=self._run, name="own-thread", daemon=True).start()

    def _run(self) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box.append((False, e))
            done.set()

    def call(self, fn: Callable[[], Any], timeout: float = 60.0) -> Any:
        box: List[Tuple[bool, Any]] = []
        done = threading.Event()
        self._q.put((fn, box, done))
        if not done.wait(timeout):
            raise AssertionError(f"the call did not return within {timeout} s")
        ok, v = box[0]
        if ok:
            return v
        raise v

    def close(self) -> None:
        self._q.put(None)


class LossRecords(logging.Handler):
    """The "hilock" logger's loss records (they come from a reader thread)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.n = 0
        self.mu = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno == logging.ERROR and "lock lost" in record.getMessage():
            with self.mu:
                self.n += 1


@pytest.fixture
def loss_records():
    with hilock_log(LossRecords()) as h:
        yield h


@pytest.mark.parametrize("fam", EXPIRING)
def test_lapsed_grant_is_a_loss_and_its_object_acquires_again(
        fam: Family, env: Env, loss_records: LossRecords) -> None:
    """Not renewed, a grant lapses at its TTL. The object that held it is
    free to acquire again (timed, untimed, at once), as another object is;
    a release after the lapse raises LockNotOwnedError. Either way the lapse
    is reported once as a loss (``lost``, stats, the "hilock" logger, the
    ``on_lost`` callback, which runs without renewal too), never as a hold,
    and a failed release leaves ``lost`` set."""
    told: List[Any] = []
    lk = env.make(ttl=fam.short_ttl, auto_renew=False, on_lost=told.append)
    rival = env.other(env.rival(ttl=LONG_TTL, auto_renew=False))
    stats = getattr(lk, "stats", env.client.stats)  # a Redlock counts for itself
    me = OwnThread()
    lost0 = stats()["lost"]
    holds = [stats()["hold_seconds"]["count"]]  # grants that ended in a release

    def release(obj: Any, call: Callable[[Callable[[], Any]], Any]) -> None:
        call(obj.release)
        if obj is lk or not hasattr(obj, "stats"):  # counted where lk counts
            holds[0] += 1

    def lapse() -> None:
        """lk is granted, and its grant lapses: a rival gets it meanwhile."""
        assert me.call(lambda: lk.acquire(blocking=False))
        assert rival.call(lambda o: o.acquire(timeout=fam.short_ttl + 10.0)), \
            "the lapsed grant never went to a waiting object"
        release(rival.obj, lambda fn: rival.call(lambda _: fn()))

    def losses(n: int) -> None:
        assert stats()["lost"] == lost0 + n
        assert stats()["hold_seconds"]["count"] == holds[0]  # a lapse is no hold
        wait_for(lambda: loss_records.n >= n, 5.0, what=f"loss record {n}")
        assert loss_records.n == n
        # The callback runs on hilock's notifier thread: wait for it.
        wait_for(lambda: len(told) >= n, 5.0, what=f"on_lost call {n}")
        assert len(told) == n and all(t is lk for t in told)

    try:
        lapse()
        # Bounded so that the test fails rather than waits: the grant is
        # free at once.
        assert me.call(lambda: lk.acquire(timeout=5.0)), "a timed acquire was refused"
        losses(1)
        assert me.call(lambda: lk.lost) is False and me.call(lk.owned) is True
        release(lk, me.call)

        lapse()
        assert me.call(lambda: lk.acquire()), "an untimed acquire was refused"
        losses(2)
        release(lk, me.call)

        lapse()
        for _ in range(2):
            with pytest.raises(hilock.LockNotOwnedError):
                me.call(lambda: lk.release())
            assert me.call(lambda: lk.lost) is True
            losses(3)  # once per grant
        assert me.call(lambda: lk.acquire(blocking=False))
        assert me.call(lambda: lk.lost) is False
        release(lk, me.call)
        losses(3)
    finally:
        me.close()
