"""Small helpers shared by the test modules."""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib.util
import json
import linecache
import multiprocessing
import os
import random
import select
import signal
import socket
import statistics
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

# pure Python, next to this file
from history import RedisHistory, check_fences_increase, check_fifo, check_no_overlap

ROOT = Path(__file__).resolve().parents[2]


def _load_server_module():
    """hilock._server, even when the compiled extension does not import.

    ``import hilock._server`` runs hilock/__init__.py, which needs the SWIG
    module; the launcher itself is pure Python, so fall back to loading the
    file from the source tree and let the tests report the import failure.
    """
    try:
        from hilock import _server
        return _server
    except ImportError:
        path = ROOT / "python" / "hilock" / "_server.py"
        spec = importlib.util.spec_from_file_location("hilock_tests_server", path)
        if spec is None or spec.loader is None:
            raise
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod


_server = _load_server_module()
RedisServer = _server.RedisServer
free_port = _server.free_port

KINDS = ("expiring", "simple", "lease")

# 'fork' lets the child run a function of the test module without pickling,
# and exercises hilock's own fork handling (a fresh pool in the child).
FORK = multiprocessing.get_context("fork")


def make_lock(c, kind: str, name, ttl: float = 10.0, timeout=None):
    """A lock of the given kind on client c, without watchdog renewal (these
    suites test TTL semantics; test_renewal.py tests the watchdog)."""
    if kind == "expiring":
        return c.lock(name, ttl=ttl, timeout=timeout, auto_renew=False)
    if kind == "simple":
        return c.simple_lock(name, timeout=timeout)
    if kind == "lease":
        return c.lease(name, ttl=ttl, timeout=timeout, auto_renew=False)
    raise ValueError(f"unknown lock kind {kind!r}")


class NoLock:
    """A lock that excludes nothing: the control group of the harness."""

    fence = None
    token = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return True

    def release(self) -> None:
        pass

    def renew(self) -> None:
        pass


def child_main(fn: Callable[..., Any], *args: Any) -> None:
    """Process body: run fn, report a traceback to stderr and exit 1 on error.
    Always leaves with os._exit so no parent state (pytest, atexit) runs."""
    code = 0
    try:
        fn(*args)
    except BaseException:  # noqa: BLE001 - report anything, then exit non-zero
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def start_child(fn: Callable[..., Any], *args: Any):
    p = FORK.Process(target=child_main, args=(fn,) + args, daemon=True)
    p.start()
    return p


def join_all(procs: List[Any], timeout: float) -> None:
    """Join every process within timeout seconds in total; kill stragglers and
    fail if any did not finish or exited non-zero."""
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [p.pid for p in procs if p.is_alive()]
    for p in procs:
        if p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
            p.join(5)
    if hung:
        raise AssertionError(f"processes {hung} did not finish within {timeout} s")
    bad = [(p.pid, p.exitcode) for p in procs if p.exitcode != 0]
    if bad:
        raise AssertionError(f"worker processes failed (pid, exit code): {bad}")


def kill_child(p, sig: int = signal.SIGKILL) -> None:
    if p.is_alive():
        os.kill(p.pid, sig)
    p.join(5)


def grant_of(lk) -> dict:
    """What a holder process reports of its grant: pid, fence, token and
    the monotonic time."""
    return {"pid": os.getpid(), "fence": lk.fence, "token": lk.token, "t": time.monotonic()}


def _hold_until_killed(url: str, make: Callable[[Any], Any], report: Callable[[Any], Any],
                       renew_every: float) -> None:
    """A holder process: take the lock make(client) makes (5 s at most),
    push report(lock) on the list "ready", and hold on until killed,
    calling renew() every renew_every seconds if that is > 0 (a lock
    renewed automatically needs no help)."""
    import redis

    import hilock

    r = redis.Redis.from_url(url)
    lk = make(hilock.Client(url))
    if not lk.acquire(timeout=5):
        raise RuntimeError("holder could not acquire")
    r.rpush("ready", json.dumps(report(lk)))
    while True:
        if renew_every > 0:
            time.sleep(renew_every)
            lk.renew()
        else:
            time.sleep(3600)


def start_holder(r, url: str, make: Callable[[Any], Any],
                 report: Callable[[Any], Any] = grant_of, renew_every: float = 0.0,
                 start: Callable[..., Any] = start_child) -> Tuple[Any, Any]:
    """Start a holder process (see _hold_until_killed) with start (start_child
    or start_child_collected); returns it and its report. The process is
    killed when no report comes within 10 s."""
    p = start(_hold_until_killed, url, make, report, renew_every)
    try:
        return p, pop_report(r, "ready")
    except BaseException:
        kill_child(p)
        raise


@contextlib.contextmanager
def hilock_log(handler: Any) -> Iterator[Any]:
    """handler on the "hilock" logger, at DEBUG, for the with block."""
    import logging

    log = logging.getLogger("hilock")
    old = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(old)


def wait_for(pred: Callable[[], Any], timeout: float, interval: float = 0.01,
             what: str = "condition") -> Any:
    """Poll pred until it returns a true value; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def debug_sleep(port: int, seconds: float) -> socket.socket:
    """Send DEBUG SLEEP without waiting for it; returns once the server
    sleeps. The socket gets +OK when the sleep ends. A sleeping server runs
    nothing, so no command (CLIENT LIST, INFO) can show the sleep in
    progress. What shows it is a PING from another connection going
    unanswered for a third of the sleep; one answered sooner ran before the
    sleep, and another is sent."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"DEBUG SLEEP {seconds}\r\n".encode())
    deadline = time.monotonic() + 10
    while True:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as probe:
            probe.sendall(b"PING\r\n")
            probe.settimeout(seconds / 3)
            try:
                probe.recv(16)
            except socket.timeout:
                return s
        if time.monotonic() >= deadline:
            raise AssertionError(f"DEBUG SLEEP {seconds} not seen within 10 s")


def pop_json(r, key: str, timeout: float) -> Optional[bytes]:
    """BLPOP one element from key within timeout seconds (None if none)."""
    got = r.blpop([key], timeout=timeout)
    return None if got is None else got[1]


def pop_report(r, key: str = "report", timeout: float = 10.0) -> dict:
    """The next report (JSON) a child process pushed on list key; fails if
    none comes in time."""
    raw = pop_json(r, key, timeout)
    assert raw is not None, f"no report on {key!r} within {timeout} s"
    return json.loads(raw)


# -- contending processes -------------------------------------------------------
#
# The exclusion tests start their contenders behind a start gate (a FORK
# Event), so that all of them are running when the contention begins, and
# give every wait a generous bound: a contender that does not get its turn
# fails its process instead of hanging the test.

def pass_gate(gate) -> None:
    """In a contender: wait (20 s at most) for the start gate to open."""
    if not gate.wait(20):
        raise RuntimeError("start gate never opened")


def acquire_within(lk, what: str = "acquire timed out", timeout: float = 20) -> float:
    """Acquire lk, waiting timeout seconds at most, else raise
    RuntimeError(what); return the monotonic time of the grant."""
    if not lk.acquire(timeout=timeout):
        raise RuntimeError(what)
    return time.monotonic()


def open_gate(gate, procs: List[Any], timeout: float) -> float:
    """Open the start gate of procs (after a moment for the last of them to
    reach it) and join them all within timeout seconds (see join_all).
    Returns the monotonic time at which the gate opened."""
    time.sleep(0.05)
    opened = time.monotonic()
    gate.set()
    join_all(procs, timeout)
    return opened


def sell_out(r, lk, tag: str, sell: Callable[[int], None], what: str = "acquire timed out",
             read: Optional[Callable[[], int]] = None) -> None:
    """A seller's loop (the overselling scenario): take lk, read the stock
    {tag}:stock (read(), or a GET), and while any is left sell(stock) sells
    one unit (a non-atomic SET of stock - 1); record every critical section
    with the grant's fence on {tag}:history. Once the stock reads 0, push
    "<pid>:<units sold>" on {tag}:sold (see counts_by_pid)."""
    hist = RedisHistory(r, f"{tag}:history")
    rnd = random.Random(os.getpid())
    sold = 0
    while True:
        start = acquire_within(lk, what)
        fence = lk.fence
        stock = read() if read is not None else int(r.get(f"{tag}:stock"))
        if stock > 0:
            sell(stock)
            sold += 1
        end = time.monotonic()
        lk.release()
        hist.record(start, end, fence)
        if stock <= 0:
            break
        # Leave the lock alone for a moment so the others get their turns.
        time.sleep(rnd.uniform(0, 0.002))
    r.rpush(f"{tag}:sold", f"{os.getpid()}:{sold}")


def counts_by_pid(r, key: str) -> Dict[int, int]:
    """The "<pid>:<count>" items the contenders pushed on list key, as
    {pid: count}."""
    counts = {}
    for item in r.lrange(key, 0, -1):
        pid, n = item.decode().split(":")
        counts[int(pid)] = int(n)
    return counts


# -- shared by test_wait, test_renewal, test_fork and test_rlock ----------------

def command_calls(r) -> dict:
    """INFO commandstats as {command name: calls}, e.g. {"evalsha": 3}."""
    return {k[len("cmdstat_"):] if k.startswith("cmdstat_") else k: v["calls"]
            for k, v in r.info("commandstats").items()}


def scripts_run(r) -> int:
    """Scripts the server has run (EVAL and EVALSHA calls, NOSCRIPT refusals
    included): what to wait on until commands sent to a stopped server have
    run once it resumes."""
    calls = command_calls(r)
    return calls.get("eval", 0) + calls.get("evalsha", 0)


def blocked_clients(r) -> int:
    """Waiters asleep in a wait for a lock: clients the server has blocked
    in BLPOP (shared_waiting=False), plus the threads of this process that
    wait in a client's shared waiting."""
    from hilock import _hilock
    return int(r.info("clients")["blocked_clients"]) + _hilock.py_waiting_all()


def waiting_processes(r, channel: str = "hilock:*") -> int:
    """Waiters of other processes (one waiter each): clients blocked in
    BLPOP, plus each client subscribed to a wake list's channel (those
    matching channel: name the lock's own, as another test's client may
    still linger on its channel for a while)."""
    chans = r.pubsub_channels(channel)
    subs = sum(n for _, n in r.pubsub_numsub(*chans)) if chans else 0
    return int(r.info("clients")["blocked_clients"]) + subs


def subscribers(r, channel: str) -> int:
    """Clients subscribed to a wake list's channel (each has a thread, in
    any process, waiting on that list in the shared waiting)."""
    return int(r.pubsub_numsub(channel)[0][1])


def wait_blocked(r, n: int, timeout: float = 5.0) -> None:
    """Wait until exactly n clients are blocked on the server."""
    wait_for(lambda: blocked_clients(r) == n, timeout, what=f"{n} blocked client(s)")


class Worker(threading.Thread):
    """A daemon thread that keeps fn's result or exception and the monotonic
    time at which fn returned or raised."""

    def __init__(self, fn: Callable[..., Any], *args: Any, name: Optional[str] = None) -> None:
        super().__init__(name=name, daemon=True)
        self._fn = fn
        self._args = args
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.finished_at: Optional[float] = None

    def run(self) -> None:
        try:
            self.result = self._fn(*self._args)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.error = e
        finally:
            self.finished_at = time.monotonic()

    def outcome(self, timeout: float) -> Any:
        """Join within timeout (starting the thread first if it was not);
        re-raise fn's exception, else return its result."""
        if self.ident is None:
            self.start()
        self.join(timeout)
        if self.is_alive():
            raise AssertionError(f"thread {self.name} still running after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.result


def blocked_worker(r, fn: Callable[..., Any], *args: Any) -> Worker:
    """A Worker running fn(*args), started, once it is asleep in its wait
    (one client blocked on the server r)."""
    w = Worker(fn, *args)
    w.start()
    wait_blocked(r, 1)
    return w


def wait_turn_waiter(lk, t: threading.Thread, timeout: float = 5.0) -> None:
    """Until thread t waits in acquire() for lock object lk's own turn. A
    second thread of one object waits on the object's local mutex, which
    neither client.waiting nor the server counts: the thread's frame, blocked
    on that mutex, shows it."""
    def waiting() -> bool:
        f = sys._current_frames().get(t.ident) if t.ident is not None else None
        return (f is not None and f.f_locals.get("self") is lk
                and "_local.acquire(" in linecache.getline(f.f_code.co_filename, f.f_lineno))

    wait_for(waiting, timeout, what="the thread to wait for the object's turn")


def run_in_threads(fn: Callable[[int], Any], n: int, timeout: float) -> List[Any]:
    """Run fn(0) .. fn(n - 1) at once, each in a Worker thread, and join
    each within timeout seconds: fails if one is still running, re-raises
    what one raised, else returns their results."""
    workers = [Worker(fn, i, name=f"worker-{i}") for i in range(n)]
    for w in workers:
        w.start()
    return [w.outcome(timeout) for w in workers]


def start_child_collected(fn: Callable[..., Any], *args: Any):
    """start_child, after collecting this process's garbage.

    A forked child inherits every uncollected hilock object of earlier
    tests; if its garbage collector frees the last of a client whose
    renewal thread ran in the parent, the child hangs (see
    test_fork.test_child_can_free_inherited_client). Collecting first keeps
    tests that are not about fork clear of that defect."""
    gc.collect()
    return start_child(fn, *args)


def fork_call(fn: Callable[[], Any], timeout: float) -> Tuple[Any, float]:
    """Run fn in a child made by os.fork() (no multiprocessing machinery).

    The child sends fn's JSON-encodable result, or its traceback, through a
    pipe and leaves with os._exit. Returns (result, seconds the child took,
    fork to exit). Fails if fn raised, or if the child did not exit within
    timeout seconds (it is then killed)."""
    gc.collect()  # see start_child_collected
    rfd, wfd = os.pipe()
    with warnings.catch_warnings():
        # Python >= 3.12 warns about fork() in a process with threads: that
        # is exactly the situation these tests are about.
        warnings.simplefilter("ignore", DeprecationWarning)
        t0 = time.monotonic()
        pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(rfd)
            try:
                payload = {"ok": True, "result": fn()}
            except BaseException:  # noqa: BLE001 - report anything
                payload = {"ok": False, "error": traceback.format_exc()}
                code = 1
            data = json.dumps(payload).encode()
            while data:
                data = data[os.write(wfd, data):]
        except BaseException:  # noqa: BLE001
            code = 2
        finally:
            os._exit(code)
    os.close(wfd)
    chunks = []
    deadline = t0 + timeout
    status = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([rfd], [], [], min(left, 0.05))
            if ready:
                chunk = os.read(rfd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            status = None
            time.sleep(0.005)
        took = time.monotonic() - t0
    finally:
        os.close(rfd)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if status is None:
        raise AssertionError(f"forked child {pid} did not exit within {timeout} s")
    raw = b"".join(chunks)
    if not raw:
        raise AssertionError(f"forked child {pid} reported nothing (wait status {status})")
    payload = json.loads(raw)
    if not payload["ok"]:
        raise AssertionError(f"forked child {pid} failed:\n{payload['error']}")
    assert os.waitstatus_to_exitcode(status) == 0, f"child exit status {status}"
    return payload["result"], took


@contextlib.contextmanager
def sigint_raises_keyboardinterrupt() -> Iterator[None]:
    """Python's own SIGINT handler (KeyboardInterrupt) for the duration."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


NOT_RETURNED = "not returned"


@dataclasses.dataclass
class Interrupt:
    """How a SIGINT into a wait went (monotonic times)."""

    began: float                    # just before the wait began
    sent: Optional[float] = None    # when SIGINT was sent (None: never)
    caught: Optional[float] = None  # when KeyboardInterrupt was caught (None: never)
    returned: Any = NOT_RETURNED    # what acquire returned (NOT_RETURNED: it raised)


def interrupt_acquire(lk, delay: float = 0.3, timeout: float = 5.0,
                      linger: float = 1.0) -> Interrupt:
    """Send SIGINT to this process delay seconds into lk.acquire(timeout=
    timeout), from a timer thread, with Python's own SIGINT handler (the
    handler runs in the main thread). Should acquire return, a late SIGINT
    is still caught during the linger seconds after it."""
    if threading.current_thread() is not threading.main_thread():
        raise AssertionError("signals need the main thread")
    out = Interrupt(began=time.monotonic())

    def fire() -> None:
        out.sent = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(delay, fire)
    with sigint_raises_keyboardinterrupt():
        try:
            timer.start()
            try:
                out.returned = lk.acquire(timeout=timeout)
                time.sleep(linger)
            except KeyboardInterrupt:
                out.caught = time.monotonic()
        finally:
            timer.cancel()
            timer.join(5)
    return out


def acquire_interrupted(lk, timeout: float = 8.0) -> Interrupt:
    """interrupt_acquire, which must end in a KeyboardInterrupt raised by
    the acquire itself."""
    i = interrupt_acquire(lk, timeout=timeout)
    assert i.sent is not None, "SIGINT was never sent"
    assert i.caught is not None and i.returned is NOT_RETURNED, \
        f"no KeyboardInterrupt out of acquire, which returned {i.returned!r}"
    return i


# -- timing on a loaded machine -------------------------------------------------
#
# Tests of waking, interrupting and renewing use sub-second bounds. A machine
# busy with other work can stall a process (or only its renewal thread) for
# hundreds of milliseconds, which no library can prevent; what it must still
# do then is tell the holder (validity 0, lost). Such a miss raises Stalled,
# and retry_stalled runs the scenario again: a deterministic defect misses
# every time and fails, a stall does not recur on every try.

class Stalled(Exception):
    """A timing bound was missed in a way a scheduler stall explains."""


def retry_stalled(scenario: Callable[[int], Any], tries: int = 3) -> Any:
    """Run scenario(try_number) until it does not raise Stalled; fail with
    every reason if all tries stalled."""
    reasons = []
    for i in range(tries):
        try:
            return scenario(i)
        except Stalled as e:
            reasons.append(str(e))
    raise AssertionError(f"timing missed in all {tries} tries: {reasons}")


def within(value: float, limit: float, what: str, stall_limit: float = 1.0) -> None:
    """value (seconds) must be <= limit. Above limit but within stall_limit
    raises Stalled; beyond that it fails outright."""
    if value <= limit:
        return
    msg = f"{what}: {value * 1000:.1f} ms, bound {limit * 1000:.0f} ms"
    if value <= stall_limit:
        raise Stalled(msg)
    raise AssertionError(msg)


def lapsed(lk, what: str) -> None:
    """lk's grant is gone from Redis although its holder kept working.

    With renewal starved by a stalled machine that may happen, but the
    holder must never believe in a grant that Redis no longer has: its local
    validity (which ends before the key's TTL does) must already be 0, and
    the watchdog must report the loss. Then raise Stalled; else fail."""
    v = lk.validity
    if v != 0.0:
        raise AssertionError(f"{what}, yet the holder still counts {v:.3f} s of validity")
    wait_for(lambda: lk.lost, 3.0, what="the lapsed lock to be reported lost")
    raise Stalled(f"{what}; reported lost (renewal starved)")


def assert_held(r, lk, token: bytes, what: str = "the lock lapsed while held") -> None:
    """lk's key still holds token, or lk lapsed and knows it (Stalled)."""
    if r.get(lk.key) != token:
        lapsed(lk, what)


# -- queue locks: shared by test_fair and test_seqlock ---------------------------
#
# The fair and the sequential lock both grant in the order of a queue (the
# fair lock's tickets, the sequential lock's sequence numbers). Their tests
# run waiters as processes, so that a waiter can be stopped or killed, and
# spend a budget of grants from several processes under the history checker.
# ``make(client, name)`` makes the lock; ``order(lock)`` reads the grant's
# place in the queue.

MakeLock = Callable[[Any, Any], Any]
OrderOf = Callable[[Any], Optional[int]]


def _queued_waiter(url: str, make: MakeLock, order: OrderOf, name: str, wait: float,
                   report: str) -> None:
    """A waiter process: queue, report the outcome on the `report` list
    ({pid, ok, t, order, fence}), and on a grant hold until told to release
    (the key go:<pid> appears), then release."""
    import hilock
    import redis

    r = redis.Redis.from_url(url)
    lk = make(hilock.Client(url), name)
    ok = lk.acquire(timeout=wait)
    r.rpush(report, json.dumps({"pid": os.getpid(), "ok": ok, "t": time.monotonic(),
                                "order": order(lk), "fence": lk.fence}))
    if ok:
        while not r.exists(f"go:{os.getpid()}"):
            time.sleep(0.005)
        lk.release()


def start_queued_waiter(url: str, make: MakeLock, order: OrderOf, name: str,
                        wait: float = 20.0, report: str = "report"):
    return start_child(_queued_waiter, url, make, order, name, wait, report)


def let_go(r, report: dict) -> None:
    """Tell the queued waiter that sent report to release its grant."""
    r.set(f"go:{report['pid']}", 1)


@contextlib.contextmanager
def dead_head(r, holder, start_head: Callable[[], Any],
              start_next: Callable[[], Any]) -> Iterator[Tuple[dict, float]]:
    """holder holds the lock; a waiter process queues behind it
    (start_head()), then a second one (start_next()). The first is
    SIGKILLed and holder releases: the release wakes the dead head, and only
    it. The second must be granted next: yields its report and the seconds
    from the kill to its grant while it holds; then lets it release. Both
    processes are killed on the way out in any case."""
    head = start_head()
    nxt = None
    try:
        wait_for(lambda: holder.waiters() == 1, 5, what="head queued")
        nxt = start_next()
        wait_for(lambda: holder.waiters() == 2, 5, what="second queued")
        kill_child(head)
        killed = time.monotonic()
        holder.release()
        got = pop_report(r)
        assert got["pid"] == nxt.pid, "not the live waiter was granted next"
        yield got, got["t"] - killed
        let_go(r, got)
        join_all([nxt], 10)
    finally:
        kill_child(head)
        if nxt is not None:
            kill_child(nxt)


def interrupted_queued_waiter(make: Callable[[str], Any], name: str) -> Tuple[Any, Any]:
    """A holder of a new lock make(name) and a waiter behind it whose wait
    a SIGINT ended: returns (holder, waiter); the waiter holds nothing."""
    holder = make(name)
    assert holder.acquire()
    waiter = make(name)
    # KeyboardInterrupt ended the wait (a late one, landing after acquire
    # returned, still counts: nothing may be held then either).
    assert interrupt_acquire(waiter).caught is not None
    assert not waiter.owned()
    return holder, waiter


def new_queue_locks(make: Callable[..., Any], name: str, cls: type,
                    place: str) -> Tuple[Any, Any]:
    """Two handles on the queue lock name, make(name, ttl=10.0, ...): a, as
    made a cls (and a LockBase), the heartbeat 5 s, renewed automatically,
    and no grant yet: no fence, no place in the queue (the attribute named
    place) and no token; and b, whose acquire waits 0.2 s by default."""
    import hilock

    lk = make(name, ttl=10.0)
    other = make(name, ttl=10.0, timeout=0.2)
    assert isinstance(lk, cls) and isinstance(lk, hilock.LockBase)
    assert lk.ttl == 10.0 and lk.heartbeat == 5.0 and lk.auto_renew is True
    assert lk.fence is None and getattr(lk, place) is None and lk.token is None
    return lk, other


def check_default_timeout(lk) -> None:
    """lk (made with a timeout of 0.2 s) on a lock another holds and renews:
    acquire() gives up after that timeout."""
    t0 = time.monotonic()
    assert lk.acquire() is False  # the object's default timeout, 0.2 s
    # Bounded by the timeout, not the holder's renewed hold; 2.5 s leaves
    # room for a stalled, loaded machine.
    assert 0.15 < time.monotonic() - t0 < 2.5


def check_heartbeat(make: Callable[..., Any]) -> None:
    """A queue lock's heartbeat, how long a waiter may go silent before it
    loses its place (make(name, ttl=...) makes the lock): the TTL when that
    is shorter than 5 s, but never under 0.5 s; it can be set, not below
    0.5 s."""
    import hilock

    assert make("short", ttl=1.5).heartbeat == 1.5
    assert make("tiny", ttl=0.1).heartbeat == 0.5
    lk = make("settable")
    with pytest.raises(hilock.InvalidArgument):
        lk.heartbeat = 0.2  # below 0.5 s
    lk.heartbeat = 1.25
    assert lk.heartbeat == 1.25


def _budget_loop(url: str, make: MakeLock, order: OrderOf, name: str, gate, tag: str,
                 hold: float) -> None:
    """Take the lock until the shared budget of grants is spent, recording
    each critical section with its fence (grant order) and its place in the
    queue (the ticket field: request order)."""
    import hilock
    import redis

    r = redis.Redis.from_url(url)
    hist = RedisHistory(r, f"{tag}:history")
    lk = make(hilock.Client(url), name)
    n = 0
    pass_gate(gate)
    while True:
        start = acquire_within(lk, "acquire timed out: the queue stalled")
        left = r.decr(f"{tag}:budget")
        if left >= 0:
            time.sleep(hold)
            n += 1
        end = time.monotonic()
        fence, place = lk.fence, order(lk)
        lk.release()
        hist.record(start, end, fence, ticket=place)
        if left < 0:
            break
    r.rpush(f"{tag}:count", f"{os.getpid()}:{n}")


def contend_for_budget(r, url: str, tag: str, make: MakeLock, order: OrderOf, procs_n: int,
                       budget: int, hold: float = 0.001):
    """procs_n processes spend a budget of grants on the lock "shop:<tag>";
    returns (grants per pid, history, seconds, fairness = fewest/mean)."""
    r.set(f"{tag}:budget", budget)
    gate = FORK.Event()
    procs = [start_child(_budget_loop, url, make, order, f"shop:{tag}", gate, tag, hold)
             for _ in range(procs_n)]
    t0 = open_gate(gate, procs, 45)
    took = time.monotonic() - t0
    counts = counts_by_pid(r, f"{tag}:count")
    hist = RedisHistory(r, f"{tag}:history").load()
    fairness = min(counts.values()) / statistics.mean(counts.values()) if counts else 0.0
    print(f"\n{tag}: {procs_n} processes, {budget} grants in {took:.2f} s, per-process "
          f"counts {sorted(counts.values())}, fairness (fewest/mean) {fairness:.3f}")
    return counts, hist, took, fairness


def grants_after_queueing(holder, locks: List[Any], queued: Callable[[int], Any]) -> List[int]:
    """Queue each of locks behind holder's grant, one at a time, from a
    thread each (queued(i) tells when lock i is in the queue); then release
    the holder and return the indices of locks in the order they were
    granted."""
    grants: List[int] = []
    mu = threading.Lock()

    def wait_turn(i: int) -> None:
        lk = locks[i]
        if not lk.acquire(timeout=10):
            raise AssertionError(f"lock {i} was never granted")
        with mu:
            grants.append(i)
        time.sleep(0.005)
        lk.release()

    workers = []
    for i in range(len(locks)):
        workers.append(Worker(wait_turn, i, name=f"queued-{i}"))
        workers[-1].start()
        wait_for(lambda: queued(i), 5, what=f"lock {i} queued")
    holder.release()
    for w in workers:
        w.outcome(15)
    return grants


def check_queue_contention(r, url: str, tag: str, make: MakeLock, order: OrderOf,
                           procs_n: int, budget: int) -> None:
    """contend_for_budget on a queue lock, where nobody leaves the queue;
    it must show that every process took part and the budget was spent
    exactly, mutual exclusion, one fence per grant with none missing, grant
    k to queue place k, and a share for everyone."""
    r.set(f"hilock:{{shop:{tag}}}:fence", FENCE_AHEAD)  # counts the grants
    counts, hist, _, fairness = contend_for_budget(r, url, tag, make, order, procs_n, budget)
    assert len(counts) == procs_n and sum(counts.values()) == budget
    assert len(hist) == budget + procs_n  # one last look each at the spent budget
    assert check_no_overlap(hist) == len(hist)
    fences = check_fences_increase(hist)
    assert fences == list(range(fences[0], fences[0] + len(hist)))
    # In grant order the places strictly increase, one by one.
    assert check_fifo(hist) == list(range(1, len(hist) + 1))
    # Strict FIFO with every process re-queueing at once is a round robin;
    # the margin is for processes descheduled on a busy machine.
    assert fairness >= 0.7, f"fewest/mean = {fairness:.3f}: {counts}"


def times_out_while_stopped(pid: int, call: Callable[[], Any]) -> None:
    """call() with the server process pid stopped (SIGSTOP) raises
    hilock.ConnectionError (its reply timed out); the server is resumed
    (SIGCONT) whatever happens."""
    import hilock

    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(hilock.ConnectionError):
            call()
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def stoppable_clients(server) -> Iterator[Tuple[Any, Any, Any]]:
    """(c, other, r) on server, a test's own server that it may stop
    (SIGSTOP): c a client whose replies time out after 0.5 s, other a
    client with the default options, r a redis-py connection. At the end
    the server is resumed (SIGCONT) and the three are closed."""
    import hilock
    import redis

    c = hilock.Client(server.url, connect_timeout=2.0, command_timeout=0.5,
                      reconnect=2.0)
    other = hilock.Client(server.url)
    r = redis.Redis(port=server.port)
    try:
        yield c, other, r
    finally:
        os.kill(server.pid, signal.SIGCONT)
        r.close()
        other.close()
        c.close()


def fresh_grants(lk, n: int = 2) -> List[Any]:
    """Acquire and release lk n times (each acquire retried while a loaded
    machine times its reply out), checking the thread holds nothing after
    each release; the fences of the n grants."""
    import hilock

    def acquire() -> bool:
        for _ in range(5):
            try:
                return bool(lk.acquire(timeout=5))
            except hilock.ConnectionError:
                time.sleep(0.2)
        return bool(lk.acquire(timeout=5))

    fences = []
    for _ in range(n):
        assert acquire()
        fences.append(lk.fence)
        lk.release()
        assert lk.hold_count() == 0
    return fences


# A fence counter ahead of every server's clock (the year 2223, still exact
# in a Lua double): a grant draws max(last + 1, clock), so from here each
# grant adds exactly one and a test counts grants by the counter.
FENCE_AHEAD = 8 * 10**15


# ## Event loops: each asyncio test on asyncio's own loop and on uvloop's --------


class Loops:
    """The loop factory of the test that runs now: None for asyncio's own
    loop, uvloop's for the uvloop run (see each_loop)."""
    factory: Optional[Callable[[], Any]] = None


def each_loop(request: Any) -> Iterator[str]:
    """The body of a module's autouse fixture parametrised over
    ["asyncio", "uvloop"]: sets Loops.factory for the test."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        Loops.factory = uvloop.new_event_loop
    else:
        Loops.factory = None
    yield request.param
    Loops.factory = None


def run_with_client(redis_url: str, body: Callable[[Any], Awaitable[None]]) -> None:
    """body(client) on a new event loop of the test's kind, with a
    hilock.asyncio client it closes after."""
    import asyncio

    import hilock.asyncio as hla

    async def main() -> None:
        c = hla.Client(redis_url)
        try:
            await body(c)
        finally:
            await c.close()

    with asyncio.Runner(loop_factory=Loops.factory) as runner:
        runner.run(main())


def assert_a_timed_out_wait_breaks(barrier: Any, timeout: float = 30) -> None:
    """A wait on barrier that times out breaks it for another party waiting
    (in a thread, up to timeout seconds): both end in BrokenBarrier."""
    import hilock
    broken: List[BaseException] = []

    def wait() -> None:
        try:
            barrier.wait(timeout=timeout)
        except hilock.BrokenBarrier as e:
            broken.append(e)

    t = threading.Thread(target=wait)
    t.start()
    wait_for(lambda: barrier.n_waiting == 1, 10, what="a waiter")
    with pytest.raises(hilock.BrokenBarrier):
        barrier.wait(timeout=0.1)
    t.join(timeout + 5)
    assert len(broken) == 1
