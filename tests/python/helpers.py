"""Small helpers shared by the test modules."""
from __future__ import annotations

import importlib.util
import multiprocessing
import os
import signal
import time
import traceback
from pathlib import Path
from typing import Any, Callable, List, Optional

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


def pop_json(r, key: str, timeout: float) -> Optional[bytes]:
    """BLPOP one element from key within timeout seconds (None if none)."""
    got = r.blpop([key], timeout=timeout)
    return None if got is None else got[1]
