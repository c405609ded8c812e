#!/usr/bin/env python3
"""Write the lock constructors of the Python package from one table.

Each lock type is made three ways: a method of :class:`hilock.Client`
(``python/hilock/_client.py``), a module-level function on the default
client (``python/hilock/_default.py``) and a method of
:class:`hilock.asyncio.Client` (``python/hilock/asyncio.py``). Their
parameters, defaults, annotations, overloads and docstrings are described
once, in ``FACTORIES`` below; this script writes the three sets between the
``# BEGIN generated factories`` and ``# END generated factories`` lines of
those files. A new parameter or lock type goes into the table, then:

    python3 tools/gen_factories.py          # rewrite the files
    python3 tools/gen_factories.py --check  # exit 1 if any is stale

tests/python/test_factories.py fails while a file differs from what this
script writes, and checks the built package's signatures against the table.

The surfaces differ only where the table says so: ``on_lost`` is not on
the asyncio client (its callback would get a blocking lock) and
``cancel_on_loss`` is on the asyncio client only, ``compat`` is
not on the module-level functions, and the asyncio lease takes a ``ttl``
and no renewal options. Names in annotations are the module's own (the
asyncio module has lock classes of the same names), so each file imports
what its set uses.

The same run writes the registrations of each lock family from its row
of ``FAMILIES``: the family headers included by ``hilock/hilock.h``, the
handle types of ``HILOCK_HOLD`` in ``hilock/hold.h``, the SWIG interface's
``%include`` lines and handle lists (``bindings/hilock.i``), and the
package's lazy imports and ``__all__`` (``python/hilock/__init__.py``),
each between ``BEGIN generated families`` and ``END generated families``
lines; ``docs/gen_c_api.py`` reads the table for the reference's order.
"""
from __future__ import annotations

import difflib
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "hilock"

CLIENT = "client"  # hilock.Client's methods
DEFAULT = "default"  # the module-level functions on the default client
ASYNCIO = "asyncio"  # hilock.asyncio.Client's methods
SURFACES = (CLIENT, DEFAULT, ASYNCIO)
FILES = {CLIENT: "_client.py", DEFAULT: "_default.py", ASYNCIO: "asyncio.py"}

BEGIN = "# BEGIN generated factories"
END = "# END generated factories"
NOTE = ("# Written by tools/gen_factories.py from its table of factories: edit\n"
        "# the table and run the script, not the code between these lines.")
LINE = 100  # ruff's line-length (pyproject.toml)


@dataclass(frozen=True)
class Param:
    """One parameter: ``annotation`` is source text, in which ``{lost}``
    stands for the type ``on_lost`` is called with; ``default`` is source
    text too (None: required)."""
    name: str
    annotation: str
    default: Optional[str] = None
    keyword_only: bool = False
    surfaces: FrozenSet[str] = frozenset(SURFACES)


NAME = Param("name", "Name")
NAMES = Param("names", "Iterable[Name]")
PERMITS = Param("permits", "int")
SEGMENTS = Param("segments", "int")
COUNT = Param("count", "int")
PARTIES = Param("parties", "int")
TTL = Param("ttl", "float", "30.0")
TIMEOUT = Param("timeout", "Optional[float]", "None")
AUTO_RENEW = Param("auto_renew", "bool", "True", keyword_only=True)
MAX_HOLD = Param("max_hold", "Optional[float]", "None", keyword_only=True)
ON_LOST = Param("on_lost", "Optional[LostCallback[{lost}]]", "None", keyword_only=True,
                surfaces=frozenset({CLIENT, DEFAULT}))
COMPAT = Param("compat", "Optional[Compat]", "None", keyword_only=True,
               surfaces=frozenset({CLIENT, ASYNCIO}))
# The expiring lock's: redis-py's layout (the lock type stays Lock).
LOCK_COMPAT = Param("compat", "Optional[RedisPyCompat]", "None", keyword_only=True,
                    surfaces=frozenset({CLIENT, ASYNCIO}))
# The asyncio lock's own option (its ``async with`` block), not the blocking
# lock's: the asyncio method passes it to the lock it wraps, not to the call.
CANCEL_ON_LOSS = Param("cancel_on_loss", "bool", "False", keyword_only=True,
                       surfaces=frozenset({ASYNCIO}))
# Lock delay (Chubby's, Consul's): a type that has none refuses a nonzero one.
LOCK_DELAY = Param("lock_delay", "float", "0", keyword_only=True)
# What every lock with a TTL takes after its own arguments.
HOLD = (TTL, TIMEOUT, AUTO_RENEW, MAX_HOLD, ON_LOST, CANCEL_ON_LOSS)


@dataclass(frozen=True)
class Factory:
    """One lock constructor on the three surfaces.

    ``returns`` is the lock type made, ``lost`` the type ``on_lost`` is
    called with. ``compat``: (type made, type ``on_lost`` is called with)
    when ``compat="redisson"`` makes another type, which gives the blocking
    and asyncio methods two overloads. ``body``: the blocking method's
    code; the module-level function calls that method on the default
    client, and the asyncio method wraps its result (``async_params``: the
    asyncio method's parameters where they are not ``params``)."""
    name: str
    params: Tuple[Param, ...]
    returns: str
    lost: str
    doc: str
    body: str
    default_doc: str
    async_doc: str
    compat: Optional[Tuple[str, str]] = None
    async_params: Optional[Tuple[Param, ...]] = None

    def params_of(self, surface: str) -> Tuple[Param, ...]:
        params = self.async_params if surface == ASYNCIO and self.async_params else self.params
        return tuple(p for p in params if surface in p.surfaces)


FACTORIES = (
    Factory(
        "lock", (NAME, *HOLD, LOCK_DELAY, LOCK_COMPAT), "Lock", "Lock",
        doc="""\
An expiring lock (SET NX PX).

``ttl``: seconds until the grant lapses unless released or renewed.
``timeout``: default wait of ``acquire()`` and ``with`` (None: no
limit). ``auto_renew``: the client's renewal thread resets the TTL
every ttl/3 while held, so a live holder keeps it and a dead one
loses it within ``ttl``; pass False for a plain expiring lock.
``max_hold``: stop renewing this many seconds after the grant.
``on_lost(lock)``: called (on a hilock thread) if the hold is lost.
``lock_delay``: seconds after a grant ends without its holder's
release (the TTL ran out, the holder was lost or killed) in which the
name is granted to no one; a release frees it at once (0: none).
``compat="redis-py"``: the lock of redis-py's ``Lock`` of the same
name (the key is the name, holding the token; no fence, no
``lock_delay``; see the "Migrating" page).
""",
        body="""\
if check_redis_py(compat):
    no_lock_delay(lock_delay, "lock(compat='redis-py')")
return Lock(self, name, REDIS_PY if compat else EXPIRING, ttl, timeout, auto_renew,
            max_hold, on_lost, lock_delay)""",
        default_doc="An expiring lock on the default client (``$HILOCK_URL``, ``$REDIS_URL``).",
        async_doc="""\
An expiring lock, as :meth:`hilock.Client.lock`.
``cancel_on_loss``: a loss of the hold cancels the task inside
``async with`` on it, and the block raises :class:`hilock.LockLost`
(every lock that can be lost takes it; see :mod:`hilock.asyncio`).
``compat="redis-py"``: redis-py's lock of the same name."""),
    Factory(
        "simple_lock", (NAME, TIMEOUT), "Lock", "Lock",
        doc="""\
A simple lock (SETNX) with no expiry: if its holder dies it stays
held until :meth:`Lock.force_release`. Prefer :meth:`lock`.""",
        body="return Lock(self, name, SIMPLE, None, timeout)",
        default_doc="A simple (non-expiring) lock on the default client.",
        async_doc="A lock without expiry, as :meth:`hilock.Client.simple_lock`."),
    Factory(
        "lease", (NAME, *HOLD, LOCK_DELAY), "Lock", "Lock",
        doc="""\
A lease: an expiring lock held by renewing it before ``ttl`` runs
out, by the renewal thread (default) or by ``renew()``/``extend()``
(``auto_renew=False``). Other arguments as for :meth:`lock`.""",
        body="""\
return Lock(self, name, LEASE, ttl, timeout, auto_renew, max_hold, on_lost,
            lock_delay)""",
        default_doc="A lease on the default client.",
        async_doc="A lease (expires, never renewed), as :meth:`hilock.Client.lease`.",
        async_params=(NAME, Param("ttl", "float"), TIMEOUT, CANCEL_ON_LOSS, LOCK_DELAY)),
    Factory(
        "rlock", (NAME, *HOLD, LOCK_DELAY, COMPAT), "RLock", "RLock",
        doc="""\
A reentrant lock: reentrant per thread, like ``threading.RLock``.
``lock_delay``: as for :meth:`lock`; the first entry's grant has it,
and only the final release frees the lock at once.
``compat="redisson"``: Redisson's RLock of the same name, shared with
Java services (``ttl`` is then the lease, Redisson's 30 s by
default; no ``lock_delay``). Other arguments as for :meth:`lock`.""",
        body="""\
if check_compat(compat):
    no_lock_delay(lock_delay, "rlock(compat='redisson')")
return RLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost, compat,
             lock_delay=lock_delay)""",
        default_doc="A reentrant lock on the default client.",
        async_doc="""\
A reentrant lock, as :meth:`hilock.Client.rlock`, owned by the
current task: a task that holds it may acquire it again (and
releases as often); other tasks, threads and processes wait.
``compat="redisson"``: Redisson's RLock of the same name."""),
    Factory(
        "semaphore", (NAME, PERMITS, *HOLD), "Semaphore", "Semaphore",
        doc="""\
A counting semaphore: at most ``limit`` holders at once.

``permits``: the limit stored on first use if none is stored yet
(the stored limit wins afterwards; see :meth:`Semaphore.set_limit`).
Each ``acquire()`` takes one permit, which lapses ``ttl`` seconds
after the grant or last renewal; ``auto_renew`` (default) keeps it
alive while held, so a dead holder's permit is free within ``ttl``.
Other arguments as for :meth:`lock`.
""",
        body="return Semaphore(self, name, permits, ttl, timeout, auto_renew, max_hold, on_lost)",
        default_doc="A counting semaphore on the default client.",
        async_doc="""\
A counting semaphore, as :meth:`hilock.Client.semaphore`; a
permit belongs to the task that acquired it."""),
    Factory(
        "fair_lock", (NAME, *HOLD, LOCK_DELAY, COMPAT), "FairLock", "FairLock",
        compat=("RLock", "RLock"),
        doc="""\
A fair (FIFO) lock: granted in request order, a newcomer never
barges past a waiter, and a crashed waiter is skipped after its
heartbeat window (``FairLock.heartbeat``, by default ``ttl`` capped
at 5 s). ``lock_delay``: as for :meth:`lock` (not with ``compat``).
Other arguments as for :meth:`lock`.
``compat="redisson"``: Redisson's RFairLock of the same name, shared
with Java services, as a reentrant :class:`RLock` (a dead hilock
waiter is passed over ``ttl`` after the holder's TTL).""",
        body="""\
if check_compat(compat):
    no_lock_delay(lock_delay, "fair_lock(compat='redisson')")
    return RLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost,
                 _side=_h.hilock_rlock_new_redisson_fair)
return FairLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost, lock_delay)""",
        default_doc="A fair (FIFO) lock on the default client.",
        async_doc="""\
A fair (FIFO) lock, as :meth:`hilock.Client.fair_lock`: a
cancelled waiter leaves the queue. ``compat="redisson"``: Redisson's
RFairLock of the same name, a task-owned :class:`RLock` (a waiting
task hears the release meant for it; one that gives up, cancelled or
timed out, leaves the queue)."""),
    Factory(
        "rwlock", (NAME, *HOLD, LOCK_DELAY, COMPAT), "RWLock", "Union[ReadLock, WriteLock]",
        compat=("RedissonRWLock", "RLock"),
        doc="""\
A read-write lock: ``.read()`` and ``.write()`` give its shared and
exclusive sides, reentrant per thread, with writer preference.
``ttl`` applies to every read and write hold; ``timeout``,
``auto_renew``, ``max_hold`` and ``on_lost`` (called with the side
that lost its hold) apply to both sides, as for :meth:`lock`.
``lock_delay``: as for :meth:`lock`, for write grants: after one ends
without its release, neither writers nor readers are granted for that
long (read holds take no delay).
``compat="redisson"``: Redisson's RReadWriteLock of the same name,
shared with Java services (a :class:`RedissonRWLock`; no
``lock_delay``).""",
        body="""\
if check_compat(compat):
    no_lock_delay(lock_delay, "rwlock(compat='redisson')")
    return RedissonRWLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost)
return RWLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost, lock_delay)""",
        default_doc="A read-write lock on the default client.",
        async_doc="""\
A read-write lock, as :meth:`hilock.Client.rwlock`, whose owner
is the current task: ``.read()`` and ``.write()`` give its sides.
``compat="redisson"``: Redisson's RReadWriteLock of the same name."""),
    Factory(
        "multi_lock", (NAMES, *HOLD, LOCK_DELAY), "MultiLock", "MultiLock",
        doc="""\
A lock on every name of ``names`` at once, or none of them.

``names``: an iterable of names (str or bytes; duplicates ignored),
at most 1024. Each name is locked with the keys of :meth:`lock`, so
the two exclude each other; ``fence`` is a dict of one token per
name. On a Redis Cluster the names must share a hash tag
(``"{acct}:1"``, ``"{acct}:2"``), else CrossSlotError.
``lock_delay``: as for :meth:`lock`, for each name. Other arguments as
for :meth:`lock`.
""",
        body="""\
return MultiLock(self, names, ttl, timeout, auto_renew, max_hold, on_lost,
                 lock_delay)""",
        default_doc="A multi-key lock (all names or none) on the default client.",
        async_doc="""\
A lock on every name at once or none, as
:meth:`hilock.Client.multi_lock`."""),
    Factory(
        "sequential_lock", (NAME, *HOLD, LOCK_DELAY), "SequentialLock", "SequentialLock",
        doc="""\
A sequential lock (ZooKeeper's recipe): each contender gets the
next sequence number (``SequentialLock.sequence``) and the lowest
live one holds; each waiter watches its predecessor only, so a
release wakes exactly one process, and a dead predecessor passes the
turn within its heartbeat window (``SequentialLock.heartbeat``, by default
``ttl`` capped at 5 s). ``lock_delay``: as for :meth:`lock` (the head
of the line keeps its place and waits the delay out). Other arguments
as for :meth:`lock`.""",
        body="""\
return SequentialLock(self, name, ttl, timeout, auto_renew, max_hold, on_lost,
                      lock_delay)""",
        default_doc="A sequential (ZooKeeper-style) lock on the default client.",
        async_doc="""\
A sequential lock, as :meth:`hilock.Client.sequential_lock`: a
cancelled waiter leaves the queue."""),
    Factory(
        "election", (NAME, *HOLD), "Election", "Election",
        doc="""\
A leader election on ``name``: :meth:`Election.campaign` waits until
the caller leads and returns the :class:`Leadership`;
:meth:`Election.leader` and :meth:`Election.observe` read and watch
whoever leads. ``ttl``: a leader that stops renewing (dead, hung, cut
off) loses the lead within it; the renewal thread keeps a live one
(``auto_renew``). Other arguments as for :meth:`lock`.""",
        body="return Election(self, name, ttl, timeout, auto_renew, max_hold, on_lost)",
        default_doc="A leader election on the default client.",
        async_doc="""\
A leader election, as :meth:`hilock.Client.election`:
``await campaign()``, ``async with`` the leadership, ``async for``
over ``observe()``."""),
    Factory(
        "latch", (NAME, COUNT, TTL), "Latch", "LatchParty",
        doc="""\
A countdown latch on ``name``: :meth:`Latch.wait` returns True once
:meth:`Latch.count_down` was called ``count`` times (the first call
on a latch that does not exist makes it with ``count``; it stays until
:meth:`Latch.delete`). :meth:`Latch.join` registers a party whose
lease (``ttl``) the renewal thread keeps: if it dies before it counts
down, every waiter raises :class:`hilock.BrokenBarrier` within about
``ttl`` instead of waiting forever.""",
        body="return Latch(self, name, count, ttl)",
        default_doc="A countdown latch on the default client.",
        async_doc="""\
A countdown latch, as :meth:`hilock.Client.latch`: ``await wait()``,
``await count_down()``, ``async with latch.join()``."""),
    Factory(
        "barrier", (NAME, PARTIES, TTL, TIMEOUT), "Barrier", "Barrier",
        doc="""\
A barrier of ``parties`` across processes (as ``threading.Barrier``):
:meth:`Barrier.wait` returns each caller's arrival index once
``parties`` have arrived, generation after generation. ``ttl``: a party
that dies or hangs while others wait breaks the barrier for them
(:class:`hilock.BrokenBarrier`) within about that long; the renewal
thread keeps a live one. ``timeout``: the default wait (None: no limit);
a wait that runs out breaks the barrier, as threading's.""",
        body="return Barrier(self, name, parties, ttl, timeout)",
        default_doc="A barrier on the default client.",
        async_doc="""\
A barrier, as :meth:`hilock.Client.barrier`: ``await wait()``; a
cancelled wait breaks the barrier, as an interrupted one does."""),
    Factory(
        "double_barrier", (NAME, PARTIES, TTL, TIMEOUT), "DoubleBarrier", "DoubleBarrier",
        doc="""\
A double barrier of ``parties`` (Curator's DistributedDoubleBarrier):
:meth:`DoubleBarrier.enter` returns once ``parties`` have entered
(``with db.enter():`` leaves at the block's end), and leaving returns
once all of them have left. ``ttl``: a party that dies inside breaks the
round for the others (:class:`hilock.BrokenBarrier`) within about that
long. ``timeout``: the default wait (None: no limit).""",
        body="return DoubleBarrier(self, name, parties, ttl, timeout)",
        default_doc="A double barrier on the default client.",
        async_doc="""\
A double barrier, as :meth:`hilock.Client.double_barrier`:
``async with await db.enter():``."""),
    Factory(
        "segmented_lock", (NAME, SEGMENTS, *HOLD), "SegmentedLock", "SegmentedLock",
        doc="""\
A segmented lock for hot inventory: ``segments`` exclusive locks,
each with its own share of the stock. ``acquire()`` takes any free
segment that still has stock (random start), ``take(n)`` sells from
it under the lock, and :class:`hilock.SoldOut` is raised once every
segment is empty. Every object on one name must use the same
``segments``. Other arguments as for :meth:`lock`.""",
        body="""\
return SegmentedLock(self, name, segments, ttl, timeout, auto_renew, max_hold,
                     on_lost)""",
        default_doc="A segmented lock on the default client.",
        async_doc="""\
A segmented lock, as :meth:`hilock.Client.segmented_lock`:
``acquire()`` takes a free segment that has stock and raises
:class:`hilock.SoldOut` once every segment is empty."""),
)


@dataclass(frozen=True)
class Family:
    """One lock family: ``header`` is core/include/hilock/<header>.h,
    ``handles`` its C handle types (each begins with a ``hilock_hold``),
    ``module`` the Python module (python/hilock/<module>.py) that defines
    ``classes``, its public types, and ``page`` the user manual's page on
    it and that page's title (the C reference links to it)."""
    header: str
    handles: Tuple[str, ...]
    module: str
    classes: Tuple[str, ...]
    page: Tuple[str, str]


FAMILIES = (
    Family("lock", ("hilock_lock",), "_lock", ("Lock",), ("locks.md", "Lock types")),
    Family("rlock", ("hilock_rlock",), "_rlock", ("RLock", "RedissonRWLock"),
           ("locks.md", "Lock types")),
    Family("semaphore", ("hilock_semaphore",), "_semaphore", ("Semaphore",),
           ("semaphore.md", "Counting semaphore")),
    Family("fair_lock", ("hilock_fair_lock",), "_fair", ("FairLock",),
           ("fair-lock.md", "Fair lock")),
    Family("rwlock", ("hilock_rwlock",), "_rwlock", ("RWLock", "ReadLock", "WriteLock"),
           ("rwlock.md", "Read-write lock")),
    Family("multi_lock", ("hilock_multi_lock",), "_multilock", ("MultiLock",),
           ("multilock.md", "Multi-key lock")),
    Family("sequential_lock", ("hilock_sequential_lock",), "_seqlock", ("SequentialLock",),
           ("seqlock.md", "Sequential lock")),
    Family("segmented_lock", ("hilock_segmented_lock",), "_seglock", ("SegmentedLock",),
           ("seglock.md", "Segmented lock")),
    Family("redlock", ("hilock_redlock",), "_redlock", ("Redlock",), ("redlock.md", "Redlock")),
    Family("election", ("hilock_election",), "_election", ("Election", "Leadership"),
           ("election.md", "Leader election")),
    Family("latch", ("hilock_latch",), "_latch", ("Latch", "LatchParty"),
           ("latch.md", "Countdown latch")),
    Family("barrier", ("hilock_barrier", "hilock_double_barrier"), "_barrier",
           ("Barrier", "DoubleBarrier", "Inside"), ("barrier.md", "Barriers")),
)


# -- Writing the code ----------------------------------------------------

def _wrap(head: str, items: List[str], tail: str, indent: str,
          brackets: Tuple[str, str] = ("(", ")")) -> List[str]:
    """``head(item, item, ...)tail`` in lines of at most LINE columns, the
    continuation lines aligned after the bracket (or, if that is too far
    right, the items on lines of their own, indented once more)."""
    opening, closing = brackets
    lines: List[str] = []
    line = indent + head + opening
    hang = " " * len(line)
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else closing + tail)
        if len(line + piece.rstrip()) > LINE and line.strip() and line != indent + head + opening:
            lines.append(line.rstrip())
            line = hang
        line += piece
    if not items:
        line += closing + tail
    lines.append(line.rstrip())
    if opening and max(map(len, lines)) > LINE:
        return [indent + head + opening] + _wrap("", items, tail, indent + "    ", ("", closing))
    return lines


def _signature(f: Factory, surface: str, method: bool, overload: Optional[str]) -> List[str]:
    """The parameters written out. ``overload``: None for the function
    itself, "plain" or "compat" for the overload of that ``compat``."""
    items = ["self"] if method else []
    star = False
    lost = f.lost
    if overload == "compat" and f.compat:
        lost = f.compat[1]
    for p in f.params_of(surface):
        if p.keyword_only and not star:
            items.append("*")
            star = True
        annotation = p.annotation.format(lost=lost)
        default = p.default
        if f.compat and p is ON_LOST and overload is None and surface != DEFAULT:
            annotation = "Any"
        if f.compat and p is COMPAT and overload == "plain":
            annotation = "None"
        if f.compat and p is COMPAT and overload == "compat":
            annotation, default = "Compat", None
        items.append(f"{p.name}: {annotation}" + ("" if default is None else f" = {default}"))
    return items


def _returns(f: Factory, surface: str, overload: Optional[str]) -> str:
    if not f.compat or surface == DEFAULT or overload == "plain":
        return f.returns
    if overload == "compat":
        return f.compat[0]
    return f"Union[{f.returns}, {f.compat[0]}]"


def _docstring(doc: str, indent: str) -> List[str]:
    lines = doc.split("\n")
    out = [indent + '"""' + lines[0]]
    out += [(indent + line) if line else "" for line in lines[1:]]
    if doc.endswith("\n"):
        out[-1] = indent + '"""'
    else:
        out[-1] += '"""'
    return out


def _call(head: str, f: Factory, surface: str, tail: str, indent: str,
          compat: bool = True) -> List[str]:
    """A call of the blocking method with the surface's own parameters:
    the positional ones by position, the keyword-only ones by keyword
    (``cancel_on_loss`` is the asyncio lock's, see _asyncio)."""
    args = [p.name if not p.keyword_only else f"{p.name}={p.name}"
            for p in f.params_of(surface)
            if (compat or p is not COMPAT) and p is not CANCEL_ON_LOSS]
    return _wrap(head, args, tail, indent)


def _def(f: Factory, surface: str, method: bool, doc: Optional[str], body: List[str],
         overload: Optional[str] = None) -> List[str]:
    indent = "    " if method else ""
    out = [indent + "@overload"] if overload else []
    out += _wrap(f"def {f.name}", _signature(f, surface, method, overload),
                 f" -> {_returns(f, surface, overload)}:" + (" ..." if overload else ""), indent)
    if overload:
        return out
    assert doc is not None
    return out + _docstring(doc, indent + "    ") + body


def _overloads(f: Factory, surface: str) -> List[str]:
    if not f.compat:
        return []
    return (_def(f, surface, True, None, [], "plain") + [""]
            + _def(f, surface, True, None, [], "compat") + [""])


def _client(f: Factory) -> List[str]:
    body = [("        " + line) if line else "" for line in f.body.split("\n")]
    return _overloads(f, CLIENT) + _def(f, CLIENT, True, f.doc, body)


def _default(f: Factory) -> List[str]:
    body = _call(f"return _default().{f.name}", f, DEFAULT, "", "    ")
    return _def(f, DEFAULT, False, f.default_doc, body)


def _asyncio(f: Factory) -> List[str]:
    sync = f"self._sync.{f.name}"
    # The asyncio lock takes cancel_on_loss itself: Lock(self, sync, cancel_on_loss).
    tail = ", cancel_on_loss)" if CANCEL_ON_LOSS in f.params_of(ASYNCIO) else ")"
    if f.compat:
        body = ["        if compat is not None:"]
        body += _call(f"return {f.compat[0]}(self, {sync}", f, ASYNCIO, tail, " " * 12)
        body += _call(f"return {f.returns}(self, {sync}", f, ASYNCIO, tail, " " * 8,
                      compat=False)
    else:
        body = _call(f"return {f.returns}(self, {sync}", f, ASYNCIO, tail, " " * 8)
    return _overloads(f, ASYNCIO) + _def(f, ASYNCIO, True, f.async_doc, body)


def generate(surface: str) -> str:
    """The text between the BEGIN and END lines of the surface's file."""
    indent = "" if surface == DEFAULT else "    "
    blocks: List[List[str]] = []
    if surface == DEFAULT:
        names = [f.name for f in FACTORIES]
        blocks.append(_wrap("__all__ = ", [f'"{n}"' for n in names], "", "", ("[", "]")))
        blocks.append(["def _default() -> Client:", "    return default_client()"])
    make = {CLIENT: _client, DEFAULT: _default, ASYNCIO: _asyncio}[surface]
    blocks += [make(f) for f in FACTORIES]
    if surface == DEFAULT:
        blocks.append(_wrap("for _f in ", [f.name for f in FACTORIES], ":", "")
                      + ['    _f.__module__ = "hilock"  # where users find them'])
    gap = "\n\n\n" if surface == DEFAULT else "\n\n"
    text = gap.join("\n".join(block) for block in blocks)
    note = textwrap.indent(NOTE, indent)
    sep = "\n\n" if surface == DEFAULT else "\n"
    return f"{indent}{BEGIN}\n{note}{sep}{text}\n{indent}{END}\n"


def render(surface: str, text: str) -> str:
    """``text`` (the surface's file) with its generated part rewritten."""
    begin = text.find(BEGIN)
    end = text.find(END)
    if begin < 0 or end < begin:
        raise SystemExit(f"{FILES[surface]}: no '{BEGIN}' ... '{END}' lines")
    start = text.rfind("\n", 0, begin) + 1
    stop = text.index("\n", end) + 1
    return text[:start] + generate(surface) + text[stop:]


# ## The families' registrations ---------------------------------------------

FBEGIN = "BEGIN generated families"
FEND = "END generated families"


def _continued(lines: List[str]) -> List[str]:
    """A C macro's lines with their backslashes aligned (the last has none)."""
    width = max(75, max(len(x) for x in lines[:-1]) + 1) if len(lines) > 1 else 0
    return [x.ljust(width) + "\\" for x in lines[:-1]] + lines[-1:]


def _c_headers(prefix: str) -> List[str]:
    return [f'{prefix} "hilock/{f.header}.h"' for f in FAMILIES]


def _hold_h() -> List[str]:
    handles = [h for f in FAMILIES for h in f.handles]
    rows = ["struct hilock_hold"] + [f"struct {h}" for h in handles]
    generic = ["#define HILOCK_HOLD(lk)", "  _Generic((lk),"]
    generic += [f"      {r} *: (hilock_hold *)(lk)," for r in rows]
    generic += [f"      const {r} *: (const hilock_hold *)(lk)," for r in rows]
    generic[-1] = generic[-1][:-1] + ")"
    return ([f"struct {h};" for h in handles]
            + ["#if !defined(__cplusplus) && defined(__STDC_VERSION__) && \\",
               "    __STDC_VERSION__ >= 201112L"]
            + _continued(generic)
            + ["#else", "#define HILOCK_HOLD(lk) ((hilock_hold *)(lk))", "#endif"])


def _swig_handles() -> List[str]:
    handles = [h for f in FAMILIES for h in f.handles]
    items = [f"{h} *" for h in handles] + [f"const {h} *" for h in handles]
    lines, line = [], " "
    for i, item in enumerate(items):
        piece = " " + item + ("," if i < len(items) - 1 else "")
        if len(line + piece) > 74:
            lines.append(line)
            line = " "
        line += piece
    return _continued(["#define HILOCK_HANDLES"] + lines + [line])


def _swig_as_hold() -> List[str]:
    return [f"  HILOCK_AS_HOLD({h})" for f in FAMILIES for h in f.handles]


def _import(module: str, names: List[str]) -> List[str]:
    names = sorted(names, key=lambda n: (not n[:1].isupper(), n.lower()))
    line = f"    from .{module} import {', '.join(names)}"
    if len(line) <= LINE:
        return [line]
    return [f"    from .{module} import ("] + [f"        {n}," for n in names] + ["    )"]


def _py_imports() -> List[str]:
    modules = {f.module: list(f.classes) for f in FAMILIES}
    modules["_default"] = [f.name for f in FACTORIES]
    out = ["if TYPE_CHECKING:"]
    for module in sorted(modules):
        out += _import(module, modules[module])
    return out


def _py_where() -> List[str]:
    items = [f'"{c}": "{f.module}"' for f in FAMILIES for c in f.classes]
    out = _wrap("_WHERE.update(", items, ")", "", ("{", "}"))
    return out + _wrap("_WHERE.update(dict.fromkeys(", [f'"{f.name}"' for f in FACTORIES],
                       ', "_default"))', "", ("[", "]"))


def _py_all() -> List[str]:
    names = [n for f in FAMILIES for n in f.classes] + [f.name for f in FACTORIES]
    return _wrap("__all__ += ", [f'"{n}"' for n in names], "", "", ("[", "]"))


# (file under the root, part, comment leader, writer of its lines)
REGISTRY = (
    ("core/include/hilock/hilock.h", "headers", "/*", lambda: _c_headers("#include")),
    ("core/include/hilock/hold.h", "handles", "/*", _hold_h),
    ("bindings/hilock.i", "handles", "/*", _swig_handles),
    ("bindings/hilock.i", "as hold", "/*", _swig_as_hold),
    ("bindings/hilock.i", "headers", "/*", lambda: _c_headers("%include")),
    ("python/hilock/__init__.py", "imports", "#", _py_imports),
    ("python/hilock/__init__.py", "where", "#", _py_where),
    ("python/hilock/__init__.py", "all", "#", _py_all),
)


def render_registry(path: str, text: str) -> str:
    """``text`` (the file at ``path``) with its generated parts rewritten."""
    for where, part, leader, lines in REGISTRY:
        if where != path:
            continue
        close = " */" if leader == "/*" else ""
        begin = f"{leader} {FBEGIN}: {part}{close}\n"
        end = f"{leader} {FEND}{close}\n"
        start = text.find(begin)
        stop = text.find(end, start + 1) if start >= 0 else -1
        if start < 0 or stop < 0:
            raise SystemExit(f"{path}: no '{begin.strip()}' ... '{end.strip()}' lines")
        start += len(begin)
        text = text[:start] + "\n".join(lines()) + "\n" + text[stop:]
    return text


def main(argv: List[str]) -> int:
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        print(__doc__, file=sys.stderr)
        return 2
    stale: Dict[str, Tuple[str, str]] = {}
    jobs = [(PACKAGE / FILES[surface], f"python/hilock/{FILES[surface]}",
             lambda text, surface=surface: render(surface, text)) for surface in SURFACES]
    jobs += [(ROOT / name, name, lambda text, name=name: render_registry(name, text))
             for name in dict.fromkeys(r[0] for r in REGISTRY)]
    for path, name, rewrite in jobs:
        old = path.read_text()
        new = rewrite(old)
        if new != old:
            stale[name] = (old, new)
            if not check:
                path.write_text(new)
    for name, (old, new) in stale.items():
        if check:
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), new.splitlines(True), name, name + " (generated)"))
        else:
            print(f"wrote {name}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
