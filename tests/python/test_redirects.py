"""Every lock type while its hash slot migrates (ASK, then MOVED), and a
direct BLPOP wait across a Sentinel failover, with real servers.

A slot moves as ``redis-cli --cluster reshard`` moves it: CLUSTER SETSLOT
IMPORTING on the destination and MIGRATING on the source, the slot's keys
moved one MIGRATE at a time (the ASK phase: some keys on each side, so a
script over several keys gets TRYAGAIN until they are together again), then
SETSLOT NODE on every master (the MOVED phase). Each test moves the slot of
names of its own, from the master that owns it to another, while locks are
acquired, waited on (the direct BLPOP wait and the shared waiting), renewed
by the watchdog, or inspected. The migration steps are driven by what the
servers report (errorstats of ASK/TRYAGAIN replies, blocked clients) and
by the clients' own counters, never by sleeps.

What every case asserts: each call succeeds within the caller's timeout
(no error reaches the caller, no hang), never more holders at once than the
type allows (history.py's checkers), and the watchdog reports no loss.

Then a waiter across a cluster manual failover (CLUSTER FAILOVER), and a
slot left half-moved past the client's reconnect budget or past the
caller's timeout: the caller's timeout, not the budget, bounds the retries
of TRYAGAIN, and a timeout is reported as one.

One local cluster (tests/python/cluster.py) serves the module; the Sentinel
cases start a deployment of their own each.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import pytest
import redis

import hilock
import hilock.cli
from cluster import name_slot
from helpers import wait_for
from history import Interval, check_max_concurrent, check_no_overlap, check_rw_exclusion

# A caller's timeout in these tests: far beyond what a migration step takes,
# so that a call that does not return within it has hung.
TIMEOUT = 20.0
# How long a woken waiter may take to get the lock after the event that must
# wake it (a release, the slot handed over): generous for a loaded 2-core
# machine, and far below the holder's TTL and the waiter's timeout, so that
# a waiter that was never woken is told apart from one that was.
WOKEN_WITHIN = 10.0


# -- lock types ----------------------------------------------------------------

Maker = Callable[..., Any]  # (client, name, ttl, on_lost) -> lock object


def _simple(c, n, ttl, on_lost):
    return c.simple_lock(n)


class Kind(NamedTuple):
    holder: Maker   # the side that holds while the other waits
    waiter: Maker   # the side under test (the one that waits, or renews)
    limit: int      # holders of `holder` that fill the lock
    rw: bool        # holder and waiter are the two sides of a read-write lock
    renews: bool    # the watchdog renews it


def _same(make: Maker, limit: int = 1, renews: bool = True) -> Kind:
    return Kind(make, make, limit, False, renews)


def _read(c, n, ttl, on_lost):
    return c.rwlock(n, ttl=ttl, on_lost=on_lost).read()


def _write(c, n, ttl, on_lost):
    return c.rwlock(n, ttl=ttl, on_lost=on_lost).write()


# The second name of the multi-key lock, n + "}b", has the hash tag of n
# (hilock:{n}b}:lock), so both names live in one slot.
KINDS: Dict[str, Kind] = {
    "lock": _same(lambda c, n, ttl, cb: c.lock(n, ttl=ttl, on_lost=cb)),
    "lease": _same(lambda c, n, ttl, cb: c.lease(n, ttl=ttl, on_lost=cb)),
    "simple_lock": _same(_simple, renews=False),
    "rlock": _same(lambda c, n, ttl, cb: c.rlock(n, ttl=ttl, on_lost=cb)),
    "fair_lock": _same(lambda c, n, ttl, cb: c.fair_lock(n, ttl=ttl, on_lost=cb)),
    "sequential_lock": _same(lambda c, n, ttl, cb: c.sequential_lock(n, ttl=ttl, on_lost=cb)),
    "multi_lock": _same(lambda c, n, ttl, cb: c.multi_lock([n, n + "}b"], ttl=ttl,
                                                           on_lost=cb)),
    "semaphore": _same(lambda c, n, ttl, cb: c.semaphore(n, 2, ttl=ttl, on_lost=cb), 2),
    "segmented_lock": _same(lambda c, n, ttl, cb: c.segmented_lock(n, 2, ttl=ttl,
                                                                    on_lost=cb), 2),
    # A reader waits behind a writer; a writer behind a reader.
    "rwlock_read": Kind(_write, _read, 1, True, True),
    "rwlock_write": Kind(_read, _write, 1, True, True),
}
KIND_NAMES = list(KINDS)
RENEWING = [k for k in KIND_NAMES if KINDS[k].renews]

_seq = [0]
_slots_used: set = set()


def fresh_name(tag: str) -> str:
    """A name no earlier test used, in a slot no earlier test moved."""
    while True:
        _seq[0] += 1
        name = f"rd-{tag}-{_seq[0]}"
        if name_slot(name) not in _slots_used:
            _slots_used.add(name_slot(name))
            return name


# -- the migration -------------------------------------------------------------

def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _masters(cl) -> List[int]:
    out = []
    for i in range(len(cl.nodes)):
        if cl.alive(i):
            r = cl.conn(i)
            try:
                if r.info("replication").get("role") == "master":
                    out.append(i)
            finally:
                r.close()
    return out


class Migration:
    """The slot of a name, moved from its master to another master."""

    def __init__(self, cl, name: str) -> None:
        self.cl = cl
        self.slot = name_slot(name)
        self.src = cl.owner(self.slot)
        self.masters = _masters(cl)
        self.dst = next(m for m in self.masters if m != self.src)
        self.conns = {i: cl.conn(i) for i in self.masters}
        self.ids = {i: _text(r.execute_command("CLUSTER MYID")) for i, r in self.conns.items()}
        self.s, self.d = self.conns[self.src], self.conns[self.dst]

    def close(self) -> None:
        for r in self.conns.values():
            r.close()

    def begin(self) -> None:
        self.d.execute_command("CLUSTER SETSLOT", self.slot, "IMPORTING", self.ids[self.src])
        self.s.execute_command("CLUSTER SETSLOT", self.slot, "MIGRATING", self.ids[self.dst])

    def src_keys(self) -> List[bytes]:
        return list(self.s.execute_command("CLUSTER GETKEYSINSLOT", self.slot, 1000))

    def move(self, key: bytes) -> None:
        """One key to the destination (gone meanwhile: nothing to move)."""
        self.s.execute_command("MIGRATE", "127.0.0.1", self.cl.nodes[self.dst].port, key, 0,
                               5000)

    def move_all(self, between: Optional[Callable[[], None]] = None) -> int:
        """Every key of the slot, one at a time, calling between() after each
        (the ASK phase with keys on both sides); returns how many moved."""
        moved = 0
        while True:
            keys = self.src_keys()
            if not keys:
                return moved
            for k in keys:
                self.move(k)
                moved += 1
                if between is not None:
                    between()

    def finish(self) -> None:
        """Move the keys left, then SETSLOT NODE on the destination, the
        source and the other masters (the MOVED phase); wait until every
        node names the destination. (A node that learns it lost a slot
        deletes the keys it still has there: every key moves first.)"""
        self.move_all()
        self.d.execute_command("CLUSTER SETSLOT", self.slot, "NODE", self.ids[self.dst])
        self.s.execute_command("CLUSTER SETSLOT", self.slot, "NODE", self.ids[self.dst])
        for i, r in self.conns.items():
            if i not in (self.src, self.dst):
                r.execute_command("CLUSTER SETSLOT", self.slot, "NODE", self.ids[self.dst])
        port = self.cl.nodes[self.dst].port
        wait_for(lambda: all(any(e[0] <= self.slot <= e[1] and int(e[2][1]) == port
                                 for e in self.cl._slots(i))
                             for i in range(len(self.cl.nodes)) if self.cl.alive(i)),
                 10, what=f"every node to name the new owner of slot {self.slot}")

    def redirects(self) -> int:
        """ASK, TRYAGAIN and MOVED replies the two masters sent so far."""
        n = 0
        for r in (self.s, self.d):
            stats = r.info("errorstats")
            for code in ("ASK", "TRYAGAIN", "MOVED"):
                n += int(stats.get(f"errorstat_{code}", {}).get("count", 0))
        return n

    def tryagains(self) -> int:
        n = 0
        for r in (self.s, self.d):
            n += int(r.info("errorstats").get("errorstat_TRYAGAIN", {}).get("count", 0))
        return n


def blocked_blpops(cl, node: int) -> int:
    """Clients blocked in BLPOP on a node now (CLIENT LIST)."""
    r = cl.conn(node)
    try:
        return sum(1 for c in r.client_list() if c.get("cmd") == "blpop" and "b" in c["flags"])
    finally:
        r.close()


@pytest.fixture
def mig(cluster):
    made: List[Migration] = []

    def make(name: str) -> Migration:
        m = Migration(cluster, name)
        made.append(m)
        return m

    try:
        yield make
    finally:
        for m in made:
            m.close()


def cclient(cluster, **kw) -> hilock.Client:
    kw.setdefault("reconnect", 15.0)
    return hilock.Client(cluster.url, connect_timeout=1.0, command_timeout=5.0, **kw)


class Recorder:
    """What the threads of one test saw: critical sections, errors, losses."""

    def __init__(self) -> None:
        self.mu = threading.Lock()
        self.intervals: Dict[str, List[Interval]] = {"x": [], "r": []}
        self.errors: List[str] = []
        self.lost: List[str] = []
        self.rounds: Dict[int, int] = {}

    def error(self, what: str) -> None:
        with self.mu:
            self.errors.append(what)

    def on_lost(self, lk: Any) -> None:
        with self.mu:
            self.lost.append(repr(lk))

    def interval(self, side: str, who: int, start: float, end: float) -> None:
        with self.mu:
            self.intervals[side].append(Interval(who, start, end))
            self.rounds[who] = self.rounds.get(who, 0) + 1

    def total(self) -> int:
        with self.mu:
            return sum(self.rounds.values())

    def check(self, kind: Kind) -> None:
        assert not self.errors, "\n".join(self.errors)
        assert not self.lost, f"the watchdog reported losses: {self.lost}"
        x, r = self.intervals["x"], self.intervals["r"]
        if kind.rw:
            check_rw_exclusion(r, x)
        elif kind.limit == 1:
            check_no_overlap(x)
        else:
            check_max_concurrent(x, kind.limit)


def _side(kind: Kind, make: Maker) -> str:
    """The history a side records in: "r" for a read-write lock's read
    side, "x" for the others (exclusive, or checked by count)."""
    return "r" if kind.rw and make is _read else "x"


def _hold_all(kind: Kind, c: hilock.Client, name: str) -> List[Any]:
    """kind.limit holders of name on c, each granted (30 s TTL)."""
    holders = [kind.holder(c, name, 30.0, None) for _ in range(kind.limit)]
    for h in holders:
        assert h.acquire(timeout=5)
    return holders


def _join(threads: List[threading.Thread], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"{what}: {hung} still running {timeout} s later (a hang)"


def _waiter(waiter: Any, got: List[float], error: Callable[[str], None],
            released: Optional[Callable[[float], None]] = None) -> threading.Thread:
    """A thread (not started) in which waiter acquires, waiting up to
    TIMEOUT + 10 s: the time of the grant in got, then a release, after
    which released(the time just before the release) runs; a timeout or an
    error goes to error."""
    def wait() -> None:
        try:
            if not waiter.acquire(timeout=TIMEOUT + 10):
                error("the waiter timed out")
                return
            got.append(time.monotonic())
            end = time.monotonic()
            waiter.release()
            if released is not None:
                released(end)
        except Exception as e:
            error(f"waiter: {type(e).__name__}: {e}")

    return threading.Thread(target=wait, name="waiter")


# -- (a) acquired: contenders race while the slot moves --------------------------

@pytest.mark.parametrize("kind_name", KIND_NAMES)
def test_contenders_through_ask_and_moved(kind_name: str, cluster, mig) -> None:
    """Three threads, each with a client of its own, take and give back the
    lock in a loop while its slot migrates. After every key moved, the test
    goes on once a contender made progress or met a redirection; after the
    hand-over, once each made two more rounds."""
    kind = KINDS[kind_name]
    name = fresh_name(f"a-{kind_name}")
    rec = Recorder()
    stop = threading.Event()
    makers = [kind.holder] + [kind.waiter] * 2

    def worker(i: int) -> None:
        make = makers[i]
        try:
            with cclient(cluster) as c:
                lk = make(c, name, 10.0, rec.on_lost)
                while not stop.is_set():
                    t0 = time.monotonic()
                    if not lk.acquire(timeout=TIMEOUT):
                        rec.error(f"worker {i}: acquire timed out after "
                                  f"{time.monotonic() - t0:.1f} s")
                        return
                    start = time.monotonic()
                    time.sleep(0.001)  # the critical section
                    end = time.monotonic()
                    lk.release()
                    rec.interval(_side(kind, make), i, start, end)
        except Exception as e:  # reported, so the test fails with the reason
            rec.error(f"worker {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(i,), name=f"w{i}") for i in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: rec.total() >= 6 or rec.errors, 20, what="the contenders to start")
        m = mig(name)
        m.begin()

        def step() -> None:
            done, seen = rec.total(), m.redirects()
            wait_for(lambda: rec.total() > done or m.redirects() > seen or rec.errors, 20,
                     what="a contender to meet the moved key")

        step()  # the slot is migrating, no key moved yet
        assert m.move_all(step) > 0
        asks = m.redirects()
        m.finish()
        before = dict(rec.rounds)
        wait_for(lambda: rec.errors or all(rec.rounds.get(i, 0) >= before.get(i, 0) + 2
                                           for i in range(3)),
                 20, what="every contender to take the lock after the hand-over")
        assert asks > 0, "no contender ever met the migrating slot"
    finally:
        stop.set()
        _join(threads, TIMEOUT + 10, "contenders")
    rec.check(kind)


# -- (b) waited on: a blocked waiter while the slot moves ------------------------

@pytest.mark.parametrize("phases", ["before-ask", "before-moved", "ask-moved"])
@pytest.mark.parametrize("mode", ["direct", "shared"])
@pytest.mark.parametrize("kind_name", KIND_NAMES)
def test_waiter_through_ask_and_moved(kind_name: str, mode: str, phases: str,
                                      cluster, mig) -> None:
    """A waiter blocks on a held lock: in BLPOP ("direct", the default
    client's lone waiter, seen in CLIENT LIST) or in the client's shared
    waiting ("shared", direct_waiters=0). It starts waiting before the
    migration (on the slot's master) or in the ASK phase (every key moved:
    its attempt and its wait follow ASK, or wait out TRYAGAIN); the holder
    releases in the ASK phase (the release waits out TRYAGAIN until the
    hand-over) or in the MOVED phase. The waiter must get the lock, woken,
    within its timeout."""
    wait_from, release_in = phases.split("-")
    kind = KINDS[kind_name]
    name = fresh_name(f"b-{kind_name}-{mode}-{release_in}")
    rec = Recorder()
    opts = {"direct_waiters": 0} if mode == "shared" else {}
    hc = cclient(cluster)
    wc = cclient(cluster, **opts)
    t: Optional[threading.Thread] = None
    go = threading.Event()
    try:
        # The holders take and give back the lock on one thread of their
        # own (reentrant types are held per thread).
        holders = [kind.holder(hc, name, 30.0, rec.on_lost) for _ in range(kind.limit)]
        held = threading.Event()

        def hold() -> None:
            try:
                starts = []
                for h in holders:
                    if not h.acquire(timeout=5):
                        rec.error("a holder timed out")
                    starts.append(time.monotonic())
                held.set()
                go.wait(TIMEOUT + 10)
                for h, s in zip(holders, starts):
                    end = time.monotonic()
                    h.release()
                    rec.interval(_side(kind, kind.holder), 100 + len(rec.intervals["x"]),
                                 s, end)
            except Exception as e:
                rec.error(f"holder: {type(e).__name__}: {e}")
            finally:
                held.set()

        rel = threading.Thread(target=hold, name="holder")
        rel.start()
        held.wait(10)
        assert not rec.errors, rec.errors
        waiter = kind.waiter(wc, name, 30.0, rec.on_lost)
        m = mig(name)
        got: List[float] = []
        t = _waiter(waiter, got, rec.error,
                    lambda end: rec.interval(_side(kind, kind.waiter), 99, got[0], end))
        if wait_from == "before":
            t.start()
            wait_for(lambda: wc.waiting == 1 or rec.errors, 10, what="the waiter to wait")
            if mode == "direct":
                wait_for(lambda: blocked_blpops(cluster, m.src) >= 1 or rec.errors, 10,
                         what="the waiter's BLPOP on the slot's master")
            assert not rec.errors, rec.errors
            m.begin()
            assert m.move_all() > 0
        else:
            m.begin()
            assert m.move_all() > 0
            seen = m.redirects()
            t.start()
            # Waiting (after an attempt that followed ASK), or retrying an
            # attempt that met TRYAGAIN.
            wait_for(lambda: wc.waiting == 1 or m.redirects() > seen + 1 or rec.errors, 10,
                     what="the waiter to meet the migrating slot")
            assert not rec.errors, rec.errors
        if release_in == "ask":
            seen = m.redirects()
            go.set()
            # The release met the migrating slot (ASK, then TRYAGAIN: its
            # wake list exists on neither side) before the hand-over.
            wait_for(lambda: m.redirects() > seen or not rel.is_alive(), 10,
                     what="the release to meet the migrating slot")
            m.finish()
        else:
            m.finish()
            go.set()
        _join([rel], TIMEOUT, "the release")
        # Woken by the release, not by its timeout (30 s) or the holder's
        # TTL (30 s): see WOKEN_WITHIN.
        t.join(WOKEN_WITHIN)
        assert not rec.errors, "\n".join(rec.errors)
        assert not t.is_alive(), (f"the waiter was not woken within {WOKEN_WITHIN} s of the "
                                  f"release and the hand-over ({mode} wait, released in the "
                                  f"{release_in} phase)")
    finally:
        go.set()
        if t is not None:
            t.join(TIMEOUT + 15)
        hc.close()
        wc.close()
    rec.check(kind)


# -- (c) renewed: the watchdog keeps a short hold while the slot moves ------------

def _renew_through(c: hilock.Client, locks: List[Any], m: Migration, rec: Recorder) -> None:
    """Hold locks (acquired) while m moves their slot: one renewal round
    with the keys split between the two masters, two with every key on the
    importing master (ASK), two after the hand-over (MOVED)."""

    def attempts() -> int:
        s = c.stats()
        return int(s["renewals"] + s["renewal_failures"])

    def renewals() -> int:
        return int(c.stats()["renewals"])

    first = [True]

    def split() -> None:
        if first[0] and m.src_keys():
            first[0] = False
            a = attempts()
            wait_for(lambda: attempts() > a, 10, what="a renewal round, keys split")

    m.begin()
    assert m.move_all(split) > 0
    r = renewals()
    wait_for(lambda: renewals() >= r + 2 * len(locks) or rec.lost, 10,
             what="two renewals in the ASK phase")
    m.finish()
    r = renewals()
    wait_for(lambda: renewals() >= r + 2 * len(locks) or rec.lost, 10,
             what="two renewals in the MOVED phase")
    assert not rec.lost, f"the watchdog reported losses: {rec.lost}"
    for lk in locks:
        assert not lk.lost, f"{lk!r} lost"
        assert lk.owned(), f"{lk!r} not owned"
        lk.release()


@pytest.mark.parametrize("kind_name", RENEWING)
def test_watchdog_renews_through_ask_and_moved(kind_name: str, cluster, mig) -> None:
    """A hold of 1.2 s, renewed every 0.4 s, while its slot migrates: it is
    never reported lost and is still owned after (see _renew_through)."""
    kind = KINDS[kind_name]
    name = fresh_name(f"c-{kind_name}")
    rec = Recorder()
    with cclient(cluster) as c:
        lk = kind.waiter(c, name, 1.2, rec.on_lost)
        assert lk.acquire(timeout=5)
        _renew_through(c, [lk], mig(name), rec)


def test_watchdog_renews_every_type_in_one_slot_through_ask_and_moved(cluster, mig) -> None:
    """A hold of every renewing type, all under one hash tag: the watchdog
    renews them together (one batch script over all their keys, on the
    slot's master), and the slot migrates as above. None is lost."""
    base = fresh_name("c-all")
    rec = Recorder()
    with cclient(cluster) as c:
        locks = [KINDS[k].waiter(c, f"{base}}}{k}", 1.2, rec.on_lost) for k in RENEWING]
        for lk in locks:
            assert lk.acquire(timeout=5)
        _renew_through(c, locks, mig(base), rec)


# -- (d) inspected: inspect, list and `hilock status` while the slot moves --------

def _view(info) -> Dict[str, Any]:
    d = info.as_dict()
    d.pop("ttl", None)
    return d


@pytest.mark.parametrize("kind_name", KIND_NAMES)
def test_inspect_and_list_through_ask_and_moved(kind_name: str, cluster, mig,
                                                capsys) -> None:
    """inspect() and list_locks() started with the keys split between the
    two masters wait out TRYAGAIN and report the lock as before, once (the
    list names it once although its keys were on two masters); after the
    hand-over they and `hilock status` report it from the new master."""
    kind = KINDS[kind_name]
    name = fresh_name(f"d-{kind_name}")
    with cclient(cluster) as c, cclient(cluster) as hc:
        holders = _hold_all(kind, hc, name)
        want = _view(c.inspect(name))
        assert want["held"]
        m = mig(name)
        out: Dict[str, Any] = {}

        def look() -> None:
            try:
                out["inspect"] = _view(c.inspect(name))
            except Exception as e:
                out["inspect"] = f"{type(e).__name__}: {e}"

        def listing() -> None:
            try:
                out["list"] = [(i.name, _view(i)) for i in c.list_locks(name)]
            except Exception as e:
                out["list"] = f"{type(e).__name__}: {e}"

        m.begin()
        keys = m.src_keys()
        assert keys
        m.move(keys[0])
        threads = [threading.Thread(target=look), threading.Thread(target=listing)]
        seen = m.redirects()
        for t in threads:
            t.start()
        if len(keys) > 1:
            # Keys on both sides: the inspect script meets TRYAGAIN.
            wait_for(lambda: m.redirects() > seen or not any(t.is_alive() for t in threads),
                     10, what="inspect to meet the split slot")
        m.move_all()
        m.finish()
        _join(threads, TIMEOUT, "inspect and list")
        assert out["inspect"] == want
        assert out["list"] == [(name, want)], out["list"]
        assert _view(c.inspect(name)) == want
        assert [(i.name, _view(i)) for i in c.list_locks(name)] == [(name, want)]
        capsys.readouterr()
        assert hilock.cli.main(["status", "--json", "--url", cluster.url, name]) == 0
        assert f'"{name}"' in capsys.readouterr().out
        for h in holders:
            h.release()


# -- (2) a direct BLPOP wait across a Sentinel failover ---------------------------

def _node(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=3)


def _blpops(port: int) -> int:
    r = _node(port)
    try:
        return sum(1 for c in r.client_list() if c.get("cmd") == "blpop" and "b" in c["flags"])
    finally:
        r.close()


@pytest.mark.parametrize("failover,end", [("graceful", "release"), ("kill", "release"),
                                          ("kill", "expire")])
def test_direct_waiter_across_a_sentinel_failover(deployment, failover: str, end: str) -> None:
    """A waiter blocked in BLPOP (shared_waiting=False: its own connection)
    on a held lock; the master fails over (SENTINEL FAILOVER, or kill -9
    and the sentinels promote the replica); the holder then releases on the
    new master, or its 4 s TTL lapses there. The waiter gets the lock once,
    after the holder's end, within its timeout: no error, no hang."""
    key = "hilock:{failover-wait}:lock"
    ttl = 30.0 if end == "release" else 4.0
    errors: List[str] = []
    got: List[float] = []
    with hilock.Client(deployment.url, reconnect=15.0) as hc, \
            hilock.Client(deployment.url, reconnect=15.0, shared_waiting=False) as wc:
        holder = hc.lock("failover-wait", ttl=ttl, auto_renew=False)
        granted_after = time.monotonic()
        assert holder.acquire(timeout=2)
        replica = _node(deployment.replica.port)
        wait_for(lambda: replica.exists(key), 5, interval=0.005,
                 what="the grant to reach the replica")
        waiter = wc.lock("failover-wait", ttl=10.0)
        t = _waiter(waiter, got, errors.append)
        t.start()
        try:
            wait_for(lambda: _blpops(deployment.master.port) >= 1 or errors, 10,
                     what="the waiter's BLPOP on the master")
            assert not errors, errors
            if failover == "graceful":
                deployment.graceful_failover()
            else:
                deployment.kill_master_and_fail_over()
            assert not errors, errors
            if end == "release":
                released = time.monotonic()
                holder.release()
                # Woken by the release on the new master, not by the 30 s
                # TTL or the waiter's timeout: see WOKEN_WITHIN.
                t.join(WOKEN_WITHIN)
                assert not t.is_alive(), (f"the waiter was not woken within {WOKEN_WITHIN} s "
                                          f"of the release on the new master")
                assert got and got[0] >= released, (got, released)
            else:
                # The grant lapses 4 s after it was made on the old master;
                # the replica kept its TTL: the waiter gets it then.
                t.join(ttl + WOKEN_WITHIN)
                assert not t.is_alive(), "the waiter was not granted after the TTL lapsed"
                # Never before the holder's key lapsed (granted_after + ttl
                # at the earliest; 10 ms for the server's clock against ours).
                assert got and got[0] >= granted_after + ttl - 0.01, (got, granted_after)
        finally:
            t.join(TIMEOUT + 15)
        assert not errors, errors
        assert len(got) == 1


# -- a cluster failover during a wait ------------------------------------------------

@pytest.mark.parametrize("mode", ["direct", "shared"])
def test_waiter_across_a_cluster_manual_failover(mode: str, cluster) -> None:
    """A waiter blocks on a held lock (in BLPOP on the slot's master, or in
    the shared waiting); the master's replica takes over (CLUSTER FAILOVER:
    the old master, still running, becomes its replica); the holder
    releases on the new master. The waiter gets the lock, woken, within its
    timeout: no error, no hang."""
    cluster.wait_ok(20, replicas=True)  # every replica in sync: it can take over
    name = fresh_name(f"h-{mode}")
    key = f"hilock:{{{name}}}:lock"
    slot = name_slot(name)
    master = cluster.owner(slot)
    replica = cluster.replica_of(master)
    assert replica is not None
    rec = Recorder()
    got: List[float] = []
    opts = {"direct_waiters": 0} if mode == "shared" else {}
    with cclient(cluster) as hc, cclient(cluster, **opts) as wc:
        holder = hc.lock(name, ttl=30.0, on_lost=rec.on_lost)
        assert holder.acquire(timeout=5)
        start = time.monotonic()
        rr = cluster.conn(replica)
        rr.execute_command("READONLY")
        wait_for(lambda: rr.exists(key), 5, interval=0.005,
                 what="the grant to reach the replica")
        waiter = wc.lock(name, ttl=30.0, on_lost=rec.on_lost)
        t = _waiter(waiter, got, rec.error,
                    lambda end: rec.interval("x", 2, got[0], end))
        t.start()
        try:
            wait_for(lambda: wc.waiting == 1 or rec.errors, 10, what="the waiter to wait")
            if mode == "direct":
                wait_for(lambda: blocked_blpops(cluster, master) >= 1 or rec.errors, 10,
                         what="the waiter's BLPOP on the slot's master")
            rr.execute_command("CLUSTER FAILOVER")
            wait_for(lambda: cluster.owner(slot) == replica, 20, what="the failover")
            cluster.wait_ok(20)
            end = time.monotonic()
            holder.release()
            rec.interval("x", 1, start, end)
            # Woken by the release, not by the 30 s TTL or timeout: see
            # WOKEN_WITHIN.
            t.join(WOKEN_WITHIN)
            assert not rec.errors, "\n".join(rec.errors)
            assert not t.is_alive(), (f"the waiter was not woken within {WOKEN_WITHIN} s of "
                                      f"the release on the new master")
        finally:
            t.join(TIMEOUT + 15)
            rr.close()
    rec.check(KINDS["lock"])


# -- a long ASK phase ------------------------------------------------------------

@pytest.mark.parametrize("kind_name", ["lock", "multi_lock", "semaphore", "fair_lock"])
def test_an_ask_phase_longer_than_the_reconnect_budget(kind_name: str, cluster, mig) -> None:
    """A slot that stays half-moved longer than the client's reconnect
    budget (0.5 s here): an acquire with 20 s to wait keeps answering
    TRYAGAIN with retries and is granted once the slot is handed over,
    instead of failing on a cluster state the caller's timeout covers."""
    kind = KINDS[kind_name]
    name = fresh_name(f"e-{kind_name}")
    out: List[Any] = []
    with cclient(cluster, reconnect=0.5) as c:
        lk = kind.waiter(c, name, 10.0, None)
        assert lk.acquire(timeout=5)  # the keys exist: counters, fences
        lk.release()
        m = mig(name)
        m.begin()
        assert m.move_all() > 0

        def take() -> None:
            try:
                got = lk.acquire(timeout=TIMEOUT)
                out.append(got)
                if got is True:
                    lk.release()  # on the thread that holds it (a permit)
            except Exception as e:
                out.append(f"{type(e).__name__}: {e}")

        t = threading.Thread(target=take)
        before = m.tryagains()
        t.start()
        # 12 TRYAGAIN replies: over 1.5 s of the router's back-off (10 ms
        # doubling to 250 ms), three times the reconnect budget.
        wait_for(lambda: m.tryagains() >= before + 12 or not t.is_alive(), 20,
                 what="the acquire to retry TRYAGAIN")
        m.finish()
        _join([t], TIMEOUT + 5, "the acquire")
        assert out == [True], out


def _split(m: Migration) -> None:
    """Begin m and move one key of several: the slot's keys on both sides."""
    m.begin()
    keys = m.src_keys()
    assert len(keys) > 1, keys
    m.move(keys[0])


@pytest.mark.parametrize("kind_name", ["lock", "multi_lock", "semaphore", "fair_lock"])
def test_a_timeout_that_ends_in_the_ask_phase_is_a_timeout(kind_name: str, cluster,
                                                           mig) -> None:
    """With the slot's keys split between two masters, an acquire with 1 s
    to wait (and a reconnect budget of 15 s) ends when its timeout does and
    says "not acquired" (False): the caller's timeout bounds the TRYAGAIN
    retries, and a cluster in the middle of a reshard is not an error."""
    kind = KINDS[kind_name]
    name = fresh_name(f"f-{kind_name}")
    with cclient(cluster) as hc, cclient(cluster) as c:
        holders = _hold_all(kind, hc, name)
        m = mig(name)
        _split(m)
        lk = kind.waiter(c, name, 10.0, None)
        t0 = time.monotonic()
        try:
            got: Any = lk.acquire(timeout=1.0)
        except Exception as e:
            got = f"{type(e).__name__}: {e}"
        took = time.monotonic() - t0
        m.finish()
        for h in holders:
            h.release()
        assert got is False, f"{got} (after {took:.2f} s)"
        # Bounded by the 1 s timeout, not the 15 s budget: 5 s leaves room
        # for a stalled, loaded machine.
        assert took < 6.0, took


@pytest.mark.parametrize("kind_name", ["fair_lock", "sequential_lock", "rwlock_write"])
def test_a_queued_waiter_that_times_out_in_the_ask_phase_leaves_the_line(
        kind_name: str, cluster, mig) -> None:
    """A waiter registered on the server (in a fair or sequential lock's
    line, or a read-write lock's waiting writers) whose timeout ends while
    the slot's keys are split: its acquire returns False within its
    timeout, and once the slot is handed over and the holder releases, the
    line is empty (inspect reports no waiters) and a newcomer is granted at
    once, not after the gone waiter's registration lapses."""
    kind = KINDS[kind_name]
    name = fresh_name(f"g-{kind_name}")
    out: List[Any] = []
    # The waiter's reconnect budget (8 s) is well past its timeout.
    with cclient(cluster) as hc, cclient(cluster, reconnect=8.0) as wc, \
            cclient(cluster) as nc:
        holder = kind.holder(hc, name, 30.0, None)
        assert holder.acquire(timeout=5)
        waiter = kind.waiter(wc, name, 30.0, None)
        m = mig(name)

        def wait() -> None:
            t0 = time.monotonic()
            try:
                out.append(waiter.acquire(timeout=1.5))
            except Exception as e:
                out.append(f"{type(e).__name__}: {e}")
            out.append(time.monotonic() - t0)

        t = threading.Thread(target=wait)
        t.start()
        wait_for(lambda: hc.inspect(name).waiters == 1 or not t.is_alive(), 10,
                 what="the waiter to join the line")
        _split(m)
        _join([t], TIMEOUT, "the timed-out waiter")
        m.finish()
        holder.release()
        # The line empties (at once, or as soon as a leave put off by the
        # split slot has run): 10 s for a loaded machine, short of the gone
        # waiter's 30 s registration.
        try:
            wait_for(lambda: nc.inspect(name).waiters == 0, 10, what="the line to empty")
        except AssertionError:
            pass
        info = nc.inspect(name)
        newcomer = kind.holder(nc, name, 30.0, None)
        granted = newcomer.acquire(blocking=False)
        if granted:
            newcomer.release()
        problems = []
        if out[0] is not False:
            problems.append(f"the timed-out acquire gave {out[0]!r}")
        # Bounded by its 1.5 s timeout: 4 s more leaves room for a stalled,
        # loaded machine, and is short of the reconnect budget.
        if out[1] > 5.5:
            problems.append(f"the acquire with a 1.5 s timeout took {out[1]:.1f} s")
        if info.waiters != 0:
            problems.append(f"{info.waiters} waiter(s) left in the line: {info}")
        if not granted:
            problems.append("a newcomer was refused after the hand-over and the release")
        assert not problems, "; ".join(problems)
