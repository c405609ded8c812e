"""hilock under gevent's and eventlet's monkey-patching (gunicorn's and
Celery's gevent and eventlet workers).

Each scenario runs in a process of its own (green_scenario.py), so the
patching never reaches pytest's process, with hilock imported after and
before the patching; a process that does not finish within PROCESS_LIMIT
fails the test (a hub kept from running never finishes)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from helpers import retry_stalled, within

SCENARIO = Path(__file__).resolve().parent / "green_scenario.py"
# Each scenario takes about a second; a hang is what this bounds.
PROCESS_LIMIT = 60.0
# The ticker greenlet sleeps 5 ms at a time; the hub may keep it waiting
# for one pool hand-off or one round trip to the local server (well under
# a millisecond each) between two of its turns. 100 ms is twenty ticks: a
# blocked hub (a wait of the lock itself, 2 ms per holder here and
# seconds in all) misses it by far, a loaded 2-core machine does not.
TICK_BOUND = 0.100

ORDERS = ["after", "before"]


def run(library: str, order: str, url: str, scenario: str) -> Dict[str, Any]:
    if importlib.util.find_spec(library) is None:  # not imported here: it acts on fork
        pytest.skip(f"{library} is not installed")
    try:
        p = subprocess.run([sys.executable, str(SCENARIO), library, order, url, scenario],
                           capture_output=True, text=True, timeout=PROCESS_LIMIT)
    except subprocess.TimeoutExpired as e:  # run() has killed it
        raise AssertionError(f"{library} ({order}) {scenario}: no result within "
                             f"{PROCESS_LIMIT:.0f} s\n{e.stderr!s}") from None
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 0 and lines, (
        f"{library} ({order}) {scenario}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    report: Dict[str, Any] = json.loads(lines[-1])
    assert report["constructed"] and report["closed"], report
    return report


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("library", ["gevent", "eventlet"])
def test_greenlets_contend_one_at_a_time_and_the_hub_runs(redis_url: str, library: str,
                                                          order: str) -> None:
    """50 greenlets on one lock (each with an object of its own, then all
    on one shared object), each yielding while inside: exactly one inside
    at a time, every one enters, the waits really waited, and a ticker
    greenlet keeps running meanwhile. The control (no lock) shows that the
    overlap check sees overlaps."""
    def scenario(attempt: int) -> Dict[str, Any]:
        report = run(library, order, redis_url, "contention")
        assert report["control_overlaps"] > 0, report
        assert report["own_overlaps"] == 0 and report["shared_overlaps"] == 0, report
        assert report["own_entered"] == report["shared_entered"] == report["n"], report
        assert report["waits"] > 0, report  # the contenders did wait in hilock
        within(report["worst_gap"], TICK_BOUND, "the ticker greenlet stalled")
        return report

    retry_stalled(scenario)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("library", ["gevent", "eventlet"])
def test_a_greenlet_owns_reentrant_and_rw_locks(redis_url: str, library: str,
                                                order: str) -> None:
    """Greenlet a holds a shared RLock object twice and the read side of an
    RWLock; greenlet b of the same thread does not re-enter a's hold, holds
    nothing, is refused the write side (not told it would wait for itself),
    and gets the RLock once a has released both levels."""
    report = run(library, order, redis_url, "owners")
    assert report["a_count"] == 2, report
    assert report["b_reenters"] is False and report["b_count"] == 0, report
    assert report["b_writes"] is False, report
    assert report["b_times_out"] is True, report
    assert report["b_waited"] is True and report["b_count_after"] == 1, report
    assert report["locked_after"] is False, report


@pytest.mark.parametrize("library", ["gevent", "eventlet"])
def test_an_interrupted_wait_ends_and_takes_nothing(redis_url: str, library: str) -> None:
    """A greenlet waiting for a lock, and one waiting for a semaphore,
    interrupted by the library's Timeout: the acquire raises once its wait
    has ended (the client has no waiter left), nothing is granted behind
    it (the holder's release goes to a new object), and the interrupted
    object acquires again afterwards."""
    report = run(library, "after", redis_url, "interrupted")
    for kind in ("lock", "semaphore"):
        assert report[kind + "_raised"] is True, report
        assert report[kind + "_waiting_after"] == 0, report
        assert report[kind + "_third_acquired"] is True, report
        assert report[kind + "_waiter_acquires_again"] is True, report


@pytest.mark.parametrize("library", ["gevent", "eventlet"])
def test_waits_work_in_a_forked_child(redis_url: str, library: str) -> None:
    """A wait in the parent, then fork(): a greenlet of the child waits for
    a lock and gets it at its release (the child has none of the parent's
    pool threads)."""
    report = run(library, "after", redis_url, "forked")
    assert report["parent"] is True, report
    assert report["child_status"] == 0, report


@pytest.mark.parametrize("library", ["gevent", "eventlet"])
def test_on_lost_runs_on_a_real_thread(redis_url: str, library: str) -> None:
    """A lock taken away from its holder: on_lost is called, on hilock's
    reader, a real OS thread (not the patched main thread)."""
    report = run(library, "after", redis_url, "lost")
    assert report["called"] == 1 and report["lost"] is True, report
    assert report["real_thread"] is True, report

