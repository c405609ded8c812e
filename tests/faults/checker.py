"""The fault campaign's history checker.

A run directory holds what the processes of one run recorded:

- ``meta.json``: the run's name, deployment, seed, duration, TTL, the lock
  names with their kind and capacity, ``expected`` (the columns the docs
  allow to be non-zero in this run, e.g. ``["overlaps"]`` for a restart
  without persistence) and ``reproduce`` (those the run must show non-zero);
- ``hist/*.jsonl``: each workload process's history (see worker.py);
- ``store.jsonl``: every write attempt the fenced store saw (see store.py);
- ``faults.jsonl``: every fault injected, ``{"kind", "start", "end",
  "target"}`` (monotonic seconds; ``target`` a process id for holder faults);
- ``final.json``: the state once every holder was gone and the TTLs passed:
  ``{"permits_free": {lock: n}, "held": {lock: bool}, "queued": {lock: n}}``.

``check_run(dir)`` returns a Result: the counts the table shows and, for
each non-zero count, the first offending events. Definitions (all times on
CLOCK_MONOTONIC, which every process of the machine shares):

- a hold's *validity window* is [grant, min(release invoked, the latest
  ``until`` it sampled)]: the time it may act, by its own measure. Two
  conflicting validity windows that overlap (an exclusive lock: any two; a
  semaphore: more than N at an instant; a read-write lock: a writer and
  anyone) are an *overlap inside validity*;
- a hold's *conservative window* is [grant, release invoked] (or its
  process's death): the time it believed it held. When a grant G falls
  inside conflicting conservative windows, those holds had lost the lock
  (for a semaphore: enough of them to make room). A hold that lost it and
  never heard (no on_lost, no ``lost`` flag, a release that succeeded) is an
  *unreported loss*; so is a hold whose write the store refused (someone
  with a later fence had written) while its release still succeeded;
- a *fence regression* is a grant whose fence is not above that of a grant
  which completed before its acquire began;
- a *stale write* is a write the store accepted with a fence lower than one
  it had accepted before for that resource, or equal to one another writer
  had used (two holders with one fence);
- *leaked*: permits not free, locks still held or queue entries left once
  every holder was gone and the TTLs had passed;
- a *stranded waiter* waited while the lock was free (no occupancy, no
  fault in progress) for longer than ``strand_after`` seconds;
- an *early release* (a barrier's): a wait that returned an index
  although at no instant between its invoke and its return were
  ``capacity`` (the barrier's parties) waits in progress, its own included
  (a wait is in progress from its invoke to its return, break or failure,
  or its process's death): it passed before every party had arrived;
- *recovery*: for each fault, the time from its end to the next grant of
  each lock; the longest is reported.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

COLUMNS = ("overlaps", "stale_writes", "unreported_losses", "fence_regressions", "leaked",
           "stranded", "fifo_inversions", "early_releases")
REPORTED_ERRORS = ("LockNotOwnedError", "LockLost", "StaleFence", "ForkedLockError")


@dataclass
class Hold:
    proc: str
    lock: str
    kind: str
    hold: int
    grant: float
    mode: Optional[str] = None
    fence: Optional[int] = None
    ticket: Optional[int] = None
    until: Optional[float] = None
    release_invoke: Optional[float] = None
    release_ok: Optional[float] = None
    release_error: Optional[str] = None
    lost: Optional[float] = None          # first loss report
    refused: List[float] = field(default_factory=list)
    end: Optional[float] = None            # conservative end
    died: bool = False
    invoke: Optional[float] = None         # its acquire's invoke

    @property
    def vend(self) -> float:
        """End of the validity window."""
        stop = self.end if self.end is not None else self.grant
        if self.until is None:
            return self.grant
        return max(self.grant, min(self.until, stop))

    @property
    def reported(self) -> bool:
        return self.lost is not None or (self.release_error is not None
                                         and self.release_error in REPORTED_ERRORS)

    @property
    def unknowable(self) -> bool:
        """It could not have been told: its process died, or its release
        failed for another reason (the outcome is unknown)."""
        return self.died or (self.release_error is not None and not self.reported) \
            or self.release_invoke is None

    def exclusive_with(self, other: Hold) -> bool:
        if self.kind == "rwlock":
            return self.mode == "write" or other.mode == "write"
        return True

    def describe(self) -> str:
        return (f"{self.proc} hold {self.hold} fence={self.fence} grant={self.grant:.3f} "
                f"until={self.until} end={self.end}")


@dataclass
class Attempt:
    proc: str
    lock: str
    kind: str
    mode: Optional[str]
    invoke: float
    done: Optional[float]


@dataclass
class Result:
    run: str
    meta: Dict[str, Any]
    operations: int = 0
    grants: int = 0
    writes: int = 0
    refused_writes: int = 0
    faults: Dict[str, int] = field(default_factory=dict)
    overlaps: int = 0
    stale_writes: int = 0
    unreported_losses: int = 0
    leaked: int = 0
    stranded: int = 0
    fifo_inversions: int = 0
    fence_regressions: int = 0
    early_releases: int = 0
    reported_losses: int = 0
    max_recovery: float = 0.0
    grants_by_lock: Dict[str, int] = field(default_factory=dict)
    examples: Dict[str, List[str]] = field(default_factory=dict)

    def note(self, col: str, text: str) -> None:
        ex = self.examples.setdefault(col, [])
        if len(ex) < 5:
            ex.append(text)

    @property
    def expected(self) -> List[str]:
        return list(self.meta.get("expected", []))

    @property
    def idle(self) -> List[str]:
        """Locks of the run that were never granted (workers that could not
        start or connect): a run that did nothing proves nothing."""
        return [lock for lock in self.meta.get("locks", {})
                if not self.grants_by_lock.get(lock)]

    def unexpected(self) -> List[str]:
        """The columns that are non-zero although the run must keep them
        zero, and "idle" if a lock was never granted."""
        bad = [c for c in COLUMNS if getattr(self, c) and c not in self.expected]
        return bad + (["idle: " + " ".join(self.idle)] if self.idle else [])

    def not_reproduced(self) -> List[str]:
        """The columns the run was meant to show non-zero and did not."""
        return [c for c in self.meta.get("reproduce", []) if not getattr(self, c)]


def _read_jsonl(path: str) -> List[Dict[str, Any]]:
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line cut short by SIGKILL
    return out


def load_run(d: str) -> Tuple[Dict[str, Any], List[Dict[str, Any]], List[Dict[str, Any]],
                              List[Dict[str, Any]], Dict[str, Any]]:
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    events: List[Dict[str, Any]] = []
    for p in sorted(glob.glob(os.path.join(d, "hist", "*.jsonl"))):
        events.extend(_read_jsonl(p))
    store = _read_jsonl(os.path.join(d, "store.jsonl"))
    faults = _read_jsonl(os.path.join(d, "faults.jsonl"))
    final: Dict[str, Any] = {}
    fp = os.path.join(d, "final.json")
    if os.path.exists(fp):
        with open(fp) as f:
            final = json.load(f)
    return meta, events, store, faults, final


def build(events: Iterable[Dict[str, Any]], faults: List[Dict[str, Any]],
          run_end: float) -> Tuple[List[Hold], List[Attempt]]:
    """Holds and acquire attempts from the histories, in each process's order."""
    deaths = {f["target"]: f["start"] for f in faults
              if f.get("kind") == "holder_kill" and f.get("target")}
    by_proc: Dict[str, List[Dict[str, Any]]] = {}
    for ev in events:
        by_proc.setdefault(ev["proc"], []).append(ev)
    holds: List[Hold] = []
    attempts: List[Attempt] = []
    for proc, evs in by_proc.items():
        evs.sort(key=lambda e: e["mono"])
        last_t = evs[-1]["mono"] if evs else run_end
        death = deaths.get(proc)
        stop_t = death if death is not None else last_t
        cur: Optional[Hold] = None
        att: Optional[Attempt] = None
        for ev in evs:
            op, ty, t = ev["op"], ev["type"], ev["mono"]
            if op == "acquire" and ty == "invoke":
                att = Attempt(proc, ev["lock"], ev["kind"], ev.get("mode"), t, None)
                attempts.append(att)
            elif op == "acquire" and ty in ("ok", "fail"):
                if att is not None:
                    att.done = t
                    att = None
                if ty == "ok":
                    cur = Hold(proc, ev["lock"], ev["kind"], ev.get("hold", 0), t,
                               mode=ev.get("mode"), fence=ev.get("fence"),
                               ticket=ev.get("ticket"),
                               invoke=attempts[-1].invoke if attempts and
                               attempts[-1].proc == proc else None)
                    holds.append(cur)
            elif cur is None:
                continue
            elif op == "sample":
                u = float(ev["until"])
                cur.until = u if cur.until is None else max(cur.until, u)
            elif op == "lost":
                if cur.lost is None:
                    cur.lost = t
            elif op == "write" and ty == "refused":
                cur.refused.append(t)
            elif op == "release" and ty == "invoke":
                cur.release_invoke = t
                cur.end = t
            elif op == "release" and ty == "ok":
                cur.release_ok = t
                cur = None
            elif op == "release" and ty == "fail":
                cur.release_error = ev.get("error", "?")
                cur = None
        if att is not None:
            att.done = stop_t
        if cur is not None and cur.end is None:
            cur.end = stop_t
            cur.died = True
        elif cur is not None:  # died inside release
            cur.died = True
    return holds, attempts


def _capacity(meta: Dict[str, Any], lock: str) -> int:
    return int(meta["locks"][lock].get("capacity", 1))


def check_overlaps(res: Result, holds: List[Hold], meta: Dict[str, Any]) -> None:
    by_lock: Dict[str, List[Hold]] = {}
    for h in holds:
        by_lock.setdefault(h.lock, []).append(h)
    for lock, hs in by_lock.items():
        kind = meta["locks"][lock]["kind"]
        if kind == "semaphore":
            n = _capacity(meta, lock)
            evs = []
            for h in hs:
                if h.vend > h.grant:
                    evs.append((h.grant, 1, h))
                    evs.append((h.vend, 0, h))
            evs.sort(key=lambda e: (e[0], e[1]))
            open_: List[Hold] = []
            for t, start, h in evs:
                if not start:
                    open_.remove(h)
                    continue
                open_.append(h)
                if len(open_) > n:
                    res.overlaps += 1
                    res.note("overlaps", f"{lock}: {len(open_)} > {n} permits inside validity "
                             f"at {t:.3f}: " + "; ".join(x.describe() for x in open_))
            continue
        hs = sorted(hs, key=lambda h: h.grant)
        for i, a in enumerate(hs):
            for b in hs[i + 1:]:
                if b.grant >= a.vend:
                    continue
                if b.grant < a.vend and a.grant < b.vend and a.exclusive_with(b) \
                        and (a.proc, a.hold) != (b.proc, b.hold):
                    res.overlaps += 1
                    res.note("overlaps", f"{lock}: {a.describe()}  overlaps  {b.describe()} "
                             f"by {min(a.vend, b.vend) - b.grant:.3f} s")


def check_losses(res: Result, holds: List[Hold], meta: Dict[str, Any]) -> None:
    by_lock: Dict[str, List[Hold]] = {}
    for h in holds:
        by_lock.setdefault(h.lock, []).append(h)
    flagged = set()
    for lock, hs in by_lock.items():
        n = _capacity(meta, lock)
        for g in hs:
            crowd = [h for h in hs if h is not g and h.grant < g.grant
                     and h.end is not None and g.grant < h.end and h.exclusive_with(g)]
            if not crowd:
                continue
            if meta["locks"][lock]["kind"] == "semaphore":
                need = len(crowd) + 1 - n   # at least this many had lost their permit
                if need <= 0:
                    continue
                told = [h for h in crowd if h.reported or h.unknowable]
                if len(told) >= need:
                    continue
                culprits = [h for h in crowd if not (h.reported or h.unknowable)]
            else:
                culprits = [h for h in crowd if not (h.reported or h.unknowable)]
            for h in culprits:
                key = (h.proc, h.hold)
                if key not in flagged:
                    flagged.add(key)
                    res.unreported_losses += 1
                    res.note("unreported_losses",
                             f"{lock}: {h.describe()} released without a loss report, "
                             f"but {g.describe()} was granted at {g.grant:.3f} inside it")
        for h in hs:
            if h.refused and not (h.reported or h.unknowable) and (h.proc, h.hold) not in flagged:
                flagged.add((h.proc, h.hold))
                res.unreported_losses += 1
                res.note("unreported_losses", f"{lock}: {h.describe()}: the store refused its "
                         f"write at {h.refused[0]:.3f}, yet its release succeeded unreported")
    res.reported_losses = sum(1 for h in holds if h.reported)


def check_fences(res: Result, holds: List[Hold]) -> None:
    """A grant whose acquire began after another grant of the lock had
    completed must carry a higher fence."""
    by_lock: Dict[str, List[Hold]] = {}
    for h in holds:
        if h.fence is not None:
            by_lock.setdefault(h.lock, []).append(h)
    for lock, hs in by_lock.items():
        hs.sort(key=lambda h: h.grant)
        top: Optional[Hold] = None   # the highest fence among completed grants
        i = 0
        for g in sorted(hs, key=lambda h: h.invoke if h.invoke is not None else h.grant):
            start = g.invoke if g.invoke is not None else g.grant
            while i < len(hs) and hs[i].grant < start:
                if top is None or (hs[i].fence or 0) > (top.fence or 0):
                    top = hs[i]
                i += 1
            if top is not None and top is not g and (g.fence or 0) <= (top.fence or 0):
                res.fence_regressions += 1
                res.note("fence_regressions", f"{lock}: {g.describe()} got a fence not above "
                         f"{top.describe()}, granted before it asked")


def check_store(res: Result, store: List[Dict[str, Any]]) -> None:
    """Accepted writes must not go below the highest fence accepted before,
    nor share it with another writer (two holders with one fence: the store
    cannot tell them apart)."""
    top: Dict[str, Tuple[int, str]] = {}
    for w in sorted(store, key=lambda w: w["seq"]):
        res.writes += 1
        f, r, who = int(w["fence"]), w["res"], str(w["writer"])
        if w["accepted"]:
            if r in top and (f < top[r][0] or (f == top[r][0] and who != top[r][1])):
                res.stale_writes += 1
                res.note("stale_writes", f"{r}: fence {f} from {who} accepted after fence "
                         f"{top[r][0]} from {top[r][1]} (seq {w['seq']})")
            if r not in top or f > top[r][0]:
                top[r] = (f, who)
        else:
            res.refused_writes += 1


def check_final(res: Result, meta: Dict[str, Any], final: Dict[str, Any]) -> None:
    for lock, info in meta["locks"].items():
        if info["kind"] == "semaphore":
            free = final.get("permits_free", {}).get(lock)
            n = _capacity(meta, lock)
            if free is not None and free < n:
                res.leaked += n - free
                res.note("leaked", f"{lock}: {n - free} permit(s) not free at the end")
        elif final.get("held", {}).get(lock):
            res.leaked += 1
            res.note("leaked", f"{lock}: still held at the end")
        q = final.get("queued", {}).get(lock)
        if q:
            res.leaked += q
            res.note("leaked", f"{lock}: {q} queue entr(ies) left at the end")


def _merge(iv: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    out: List[Tuple[float, float]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _occupancy(h: Hold, ttl: float) -> Tuple[float, float]:
    if h.release_ok is not None:
        return (h.grant, h.release_ok)
    if h.reported:
        return (h.grant, h.lost if h.lost is not None else (h.end or h.grant))
    # Killed, or an unknown outcome: the key may live one TTL past the last
    # validity the holder knew of.
    return (h.grant, max(h.until or h.grant, h.end or h.grant) + ttl + 0.5)


def check_stranded(res: Result, holds: List[Hold], attempts: List[Attempt],
                   faults: List[Dict[str, Any]], meta: Dict[str, Any]) -> None:
    ttl = float(meta["ttl"])
    # A waiter wakes at the release, or at the latest when the holder's TTL
    # runs out; a dead head of a fair queue costs one heartbeat (<= TTL).
    limit = float(meta.get("strand_after", 2 * ttl + 2.0))
    busy_all = _merge([(f["start"], f["end"] + ttl + 0.5) for f in faults
                       if not f.get("target")])
    own: Dict[str, List[Tuple[float, float]]] = {}
    for f in faults:
        if f.get("target"):
            own.setdefault(f["target"], []).append((f["start"], f["end"] + ttl + 0.5))
    for lock, info in meta["locks"].items():
        n = _capacity(meta, lock) if info["kind"] == "semaphore" else 1
        occ = [_occupancy(h, ttl) for h in holds if h.lock == lock]
        for a in attempts:
            if a.lock != lock or a.done is None:
                continue
            # Points where the occupancy count changes, inside the attempt.
            cuts = {a.invoke, a.done}
            for s, e in occ:
                for t in (s, e):
                    if a.invoke < t < a.done:
                        cuts.add(t)
            for s, e in busy_all + own.get(a.proc, []):
                for t in (s, e):
                    if a.invoke < t < a.done:
                        cuts.add(t)
            pts = sorted(cuts)
            run_start: Optional[float] = None
            longest = 0.0
            mine = [o for o in occ]  # includes this proc's earlier holds
            for t0, t1 in zip(pts, pts[1:]):
                mid = (t0 + t1) / 2
                count = sum(1 for s, e in mine if s <= mid < e)
                blocked = any(s <= mid < e for s, e in busy_all + own.get(a.proc, []))
                free = count < n and not blocked
                if free:
                    if run_start is None:
                        run_start = t0
                    longest = max(longest, t1 - run_start)
                else:
                    run_start = None
            if longest > limit:
                res.stranded += 1
                res.note("stranded", f"{lock}: {a.proc} waited from {a.invoke:.3f} to "
                         f"{a.done:.3f} with the lock free for {longest:.2f} s")


def check_fifo(res: Result, holds: List[Hold], faults: List[Dict[str, Any]],
               meta: Dict[str, Any]) -> None:
    ttl = float(meta["ttl"])
    spans = [(f["start"] - ttl, f["end"] + 2 * ttl + 5.0) for f in faults]
    for lock, info in meta["locks"].items():
        if info["kind"] not in ("fair_lock", "sequential_lock"):
            continue
        gs = sorted((h for h in holds if h.lock == lock and h.fence is not None
                     and h.ticket is not None), key=lambda h: h.fence or 0)
        for a, b in zip(gs, gs[1:]):
            if b.ticket is not None and a.ticket is not None and b.ticket < a.ticket:
                # b asked first but was served after a: explained if a fault
                # was in progress around either grant.
                if any(s <= b.grant <= e or s <= a.grant <= e for s, e in spans):
                    continue
                res.fifo_inversions += 1
                res.note("fifo_inversions", f"{lock}: ticket {a.ticket} ({a.proc}) served "
                         f"before ticket {b.ticket} ({b.proc})")


def check_recovery(res: Result, holds: List[Hold], faults: List[Dict[str, Any]],
                   meta: Dict[str, Any], run_end: float) -> None:
    grants: Dict[str, List[float]] = {}
    for h in holds:
        grants.setdefault(h.lock, []).append(h.grant)
    for g in grants.values():
        g.sort()
    for f in faults:
        e = f["end"]
        for lock in meta["locks"]:
            later = [t for t in grants.get(lock, []) if t >= e]
            rec = (later[0] if later else run_end) - e
            res.max_recovery = max(res.max_recovery, rec)


def check_barriers(res: Result, events: List[Dict[str, Any]], faults: List[Dict[str, Any]],
                   meta: Dict[str, Any], run_end: float) -> None:
    """Early releases of the barriers (see the module's docstring); a
    barrier's returned waits count as its grants."""
    deaths = {f["target"]: f["start"] for f in faults
              if f.get("kind") == "holder_kill" and f.get("target")}
    for lock, info in meta.get("locks", {}).items():
        if info.get("kind") != "barrier":
            continue
        parties = _capacity(meta, lock)
        by_proc: Dict[str, List[Dict[str, Any]]] = {}
        for ev in events:
            if ev.get("lock") == lock and ev.get("op") == "wait":
                by_proc.setdefault(ev["proc"], []).append(ev)
        waits: List[Tuple[float, float]] = []
        passed: List[Tuple[str, float, float]] = []
        for proc, evs in by_proc.items():
            evs.sort(key=lambda e: e["mono"])
            start: Optional[float] = None
            for ev in evs:
                if ev["type"] == "invoke":
                    start = ev["mono"]
                elif start is not None:
                    waits.append((start, ev["mono"]))
                    if ev["type"] == "ok":
                        passed.append((proc, start, ev["mono"]))
                    start = None
            if start is not None:  # died or stopped while waiting
                waits.append((start, deaths.get(proc, run_end)))
        res.grants_by_lock[lock] = res.grants_by_lock.get(lock, 0) + len(passed)
        res.grants += len(passed)
        for proc, s, e in passed:
            # Waits in progress peak at one of their starts within [s, e].
            points = [s] + [a for a, _ in waits if s <= a <= e]
            most = max(sum(1 for a, b in waits if a <= t <= b) for t in points)
            if most < parties:
                res.early_releases += 1
                res.note("early_releases", f"{lock}: {proc} passed at {e:.3f} with at most "
                                           f"{most} of {parties} parties waiting since {s:.3f}")


def check(meta: Dict[str, Any], events: List[Dict[str, Any]], store: List[Dict[str, Any]],
          faults: List[Dict[str, Any]], final: Dict[str, Any]) -> Result:
    res = Result(meta.get("run", "?"), meta)
    run_end = float(meta.get("end", max([e["mono"] for e in events] or [0.0])))
    for f in faults:
        res.faults[f["kind"]] = res.faults.get(f["kind"], 0) + 1
    holds, attempts = build(events, faults, run_end)
    res.operations = sum(1 for e in events if e["type"] == "invoke")
    res.grants = len(holds)
    for h in holds:
        res.grants_by_lock[h.lock] = res.grants_by_lock.get(h.lock, 0) + 1
    check_overlaps(res, holds, meta)
    check_losses(res, holds, meta)
    check_fences(res, holds)
    check_store(res, store)
    check_final(res, meta, final)
    check_stranded(res, holds, attempts, faults, meta)
    check_fifo(res, holds, faults, meta)
    check_recovery(res, holds, faults, meta, run_end)
    check_barriers(res, events, faults, meta, run_end)
    return res


def check_run(d: str) -> Result:
    return check(*load_run(d))


def table(results: List[Result]) -> str:
    """One markdown table, a row per run."""
    head = ("| run | deployment | s | ops | grants | writes (refused) | faults | overlaps "
            "| stale writes | unreported losses | reported losses | fence regressions | leaked "
            "| stranded | FIFO inversions | early releases | longest recovery s | verdict |")
    lines = [head, "|" + "---|" * 18]
    for r in results:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(r.faults.items())) or "none"
        def cell(col: str, r: Result = r) -> str:
            v = getattr(r, col)
            return f"{v} (expected)" if v and col in r.expected else str(v)
        bad = r.unexpected()
        verdict = "FAIL: " + ", ".join(bad) if bad else "ok"
        if r.not_reproduced():
            verdict += " (not reproduced: " + ", ".join(r.not_reproduced()) + ")"
        lines.append(f"| {r.run} | {r.meta.get('deployment', '?')} "
                     f"| {r.meta.get('duration', 0):.0f} | {r.operations} | {r.grants} "
                     f"| {r.writes} ({r.refused_writes}) | {faults} | {cell('overlaps')} "
                     f"| {cell('stale_writes')} | {cell('unreported_losses')} "
                     f"| {r.reported_losses} | {cell('fence_regressions')} | {cell('leaked')} "
                     f"| {cell('stranded')} | {cell('fifo_inversions')} "
                     f"| {cell('early_releases')} | {r.max_recovery:.2f} "
                     f"| {verdict} |")
    return "\n".join(lines)


def details(r: Result) -> str:
    out = []
    for col, ex in r.examples.items():
        out.append(f"  {r.run} {col}:")
        out.extend(f"    {x}" for x in ex)
    return "\n".join(out)


if __name__ == "__main__":
    import sys
    rs = [check_run(d) for d in sys.argv[1:]]
    print(table(rs))
    for r in rs:
        if r.examples:
            print(details(r))
    raise SystemExit(1 if any(r.unexpected() for r in rs) else 0)
