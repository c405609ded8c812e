"""OpenTelemetry traces (hilock.tracing): the spans every lock type makes,
their attributes, parents, hand-over links and losses, against a real
redis-server, recorded by the SDK's in-memory exporter."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import hilock
import hilock.asyncio
import hilock.tracing
from helpers import RedisServer, debug_sleep, wait_for

# Bounds on waits for what the test itself causes (a grant, a renewal's
# report): generous for a loaded 2-core machine, never reached when it works.
DEADLINE = 20.0


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    tp = TracerProvider()
    tp.exporter = InMemorySpanExporter()  # type: ignore[attr-defined]
    tp.add_span_processor(SimpleSpanProcessor(tp.exporter))  # type: ignore[attr-defined]
    hilock.tracing.instrument(tp)
    try:
        yield tp
    finally:
        hilock.tracing.uninstrument()
        tp.shutdown()


def spans(tp: TracerProvider, name: str = "") -> List[ReadableSpan]:
    got = tp.exporter.get_finished_spans()  # type: ignore[attr-defined]
    return [s for s in got if not name or s.name == name]


def attrs(s: ReadableSpan) -> Dict[str, Any]:
    return dict(s.attributes or {})


def test_outcomes_attributes_and_parents(provider: TracerProvider, client: hilock.Client,
                                         redis_url: str) -> None:
    tracer = provider.get_tracer("test")
    lk = client.lock("orders:42", ttl=10)
    other = client.lock("orders:42", ttl=10)
    with tracer.start_as_current_span("job") as job:
        assert lk.acquire()
        fence = lk.fence
        assert not other.acquire(blocking=False)
        assert not other.acquire(timeout=0.05)
        lk.release()
    acq = spans(provider, "hilock.acquire")
    assert [attrs(s)["hilock.acquire.outcome"] for s in acq] == ["granted", "busy", "timeout"]
    host, port = redis_url.split("//")[1].split("/")[0].split(":")
    for s in acq:
        a = attrs(s)
        assert a["db.system.name"] == "redis"
        assert a["hilock.lock.name"] == "orders:42"
        assert a["hilock.lock.type"] == "lock"
        assert a["hilock.lock.ttl"] == 10.0
        assert a["server.address"] == host and a["server.port"] == int(port)
        assert a["hilock.client.shared_waiting"] is True
        assert s.kind == trace.SpanKind.CLIENT
        assert s.parent is not None and s.parent.span_id == job.get_span_context().span_id
        assert s.status.status_code == trace.StatusCode.UNSET
    assert attrs(acq[0])["hilock.lock.fence"] == fence
    assert "hilock.acquire.timeout" not in attrs(acq[0])  # no limit
    assert attrs(acq[1])["hilock.acquire.timeout"] == 0.0
    assert attrs(acq[2])["hilock.acquire.timeout"] == 0.05
    (hold,) = spans(provider, "hilock.hold")
    assert hold.parent is not None and hold.parent.span_id == job.get_span_context().span_id
    assert attrs(hold)["hilock.hold.end"] == "released"
    assert attrs(hold)["hilock.lock.fence"] == fence
    assert hold.status.status_code == trace.StatusCode.OK
    assert hold.start_time is not None and acq[0].end_time is not None
    assert hold.start_time >= acq[0].end_time  # from the grant on


def test_error_outcome_records_the_exception(provider: TracerProvider, client: hilock.Client,
                                             rds: Any) -> None:
    lk = client.lock("damaged", ttl=10)
    rds.hset(lk.key, "not", "a lock")  # a key of the wrong type
    with pytest.raises(hilock.WrongTypeError):
        lk.acquire(blocking=False)
    (s,) = spans(provider)
    assert s.name == "hilock.acquire"
    assert attrs(s)["hilock.acquire.outcome"] == "error"
    assert attrs(s)["error.type"] == "WrongTypeError"
    assert s.status.status_code == trace.StatusCode.ERROR
    assert [e.name for e in s.events] == ["exception"]


def test_hold_ended_lost_by_the_renewal(provider: TracerProvider, client: hilock.Client,
                                        rds: Any) -> None:
    heard = threading.Event()
    lk = client.lock("lost:1", ttl=1.5, auto_renew=True, on_lost=lambda _: heard.set())
    assert lk.acquire()
    rds.delete(lk.key)  # the renewal finds it gone: a loss
    assert heard.wait(DEADLINE)
    # The span ends before the application's callback runs.
    (hold,) = spans(provider, "hilock.hold")
    assert attrs(hold)["hilock.hold.end"] == "lost"
    assert hold.status.status_code == trace.StatusCode.ERROR
    assert [e.name for e in hold.events] == ["hilock.lost"]
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()
    assert len(spans(provider, "hilock.hold")) == 1  # ended once


def test_hold_ended_lost_when_the_release_finds_it_gone(provider: TracerProvider,
                                                        client: hilock.Client,
                                                        rds: Any) -> None:
    # No renewal and no on_lost: nothing else reports the loss first.
    lk = client.lock("lost:2", ttl=10, auto_renew=False)
    assert lk.acquire()
    rds.delete(lk.key)
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()
    (hold,) = spans(provider, "hilock.hold")
    assert attrs(hold)["hilock.hold.end"] == "lost"
    (event,) = hold.events
    assert event.name == "hilock.lost"
    assert (event.attributes or {})["exception.type"] == "LockNotOwnedError"


def test_exported_grant_ends_its_hold(provider: TracerProvider, client: hilock.Client) -> None:
    lk = client.lock("handed", ttl=10)
    assert lk.acquire()
    text = lk.export()
    (hold,) = spans(provider, "hilock.hold")
    assert attrs(hold)["hilock.hold.end"] == "exported"
    client.adopt(text).release()


def test_every_lock_type(provider: TracerProvider, client: hilock.Client,
                         redis_url: str) -> None:
    rw = client.rwlock("t:rw", ttl=10)
    made: List[Any] = [
        (client.lock("t:lock", ttl=10), "lock"),
        (client.simple_lock("t:simple"), "simple_lock"),
        (client.lease("t:lease", ttl=10), "lease"),
        (client.rlock("t:rlock", ttl=10), "rlock"),
        (client.semaphore("t:sem", 2, ttl=10), "semaphore"),
        (client.fair_lock("t:fair", ttl=10), "fair_lock"),
        (rw.read(), "rwlock.read"),
        (rw.write(), "rwlock.write"),
        (client.multi_lock(["t:a", "t:b"], ttl=10), "multi_lock"),
        (client.sequential_lock("t:seq", ttl=10), "sequential_lock"),
        (client.segmented_lock("t:seg", 4, ttl=10), "segmented_lock"),
        (hilock.Redlock([redis_url], "t:redlock", ttl=10), "redlock"),
    ]
    for lk, _ in made:
        with lk:
            pass
    election = client.election("t:election", ttl=10)
    with election.campaign("me"):
        pass
    made.append((election, "election"))
    acq = spans(provider, "hilock.acquire")
    holds = spans(provider, "hilock.hold")
    want = [kind for _, kind in made]
    assert [attrs(s)["hilock.lock.type"] for s in acq] == want
    assert [attrs(s)["hilock.lock.type"] for s in holds] == want
    assert all(attrs(s)["hilock.acquire.outcome"] == "granted" for s in acq)
    assert all(attrs(s)["hilock.hold.end"] == "released" for s in holds)
    by_type = {attrs(s)["hilock.lock.type"]: attrs(s) for s in holds}
    assert by_type["multi_lock"]["hilock.lock.name"] == ("t:a", "t:b")
    assert len(by_type["multi_lock"]["hilock.lock.fence"]) == 2
    assert "hilock.lock.fence" not in by_type["semaphore"]  # permits have no fence
    assert by_type["redlock"]["hilock.redlock.nodes"] == 1
    assert by_type["election"]["hilock.lock.fence"] > 0


def test_reentry_nests_holds(provider: TracerProvider, client: hilock.Client) -> None:
    rl = client.rlock("t:re", ttl=10)
    with rl:
        with rl:
            pass
    holds = spans(provider, "hilock.hold")
    assert len(holds) == 2
    inner, outer = holds
    assert attrs(inner)["hilock.acquire.reentry"] is True
    assert "hilock.acquire.reentry" not in attrs(outer)


def test_asyncio_tasks_are_their_own_parents(provider: TracerProvider, redis_url: str,
                                             rds: Any) -> None:
    tracer = provider.get_tracer("test")

    async def task(n: int, c: hilock.asyncio.Client) -> int:
        with tracer.start_as_current_span(f"task{n}") as mine:
            async with c.lock(f"a:{n}", ttl=10):
                await asyncio.sleep(0)
            sem = c.semaphore("a:sem", 3, ttl=10)
            async with sem:
                await asyncio.sleep(0)
            async with c.rlock("a:rl", ttl=10):
                await asyncio.sleep(0)
            return mine.get_span_context().span_id

    async def main() -> List[int]:
        async with hilock.asyncio.Client(redis_url) as c:
            return list(await asyncio.gather(*(task(n, c) for n in range(3))))

    ids = asyncio.run(main())
    acq = spans(provider, "hilock.acquire")
    holds = spans(provider, "hilock.hold")
    assert len(acq) == len(holds) == 9  # once each, not once per layer
    for s in acq + holds:
        assert s.parent is not None and s.parent.span_id in ids
    for span_id in ids:  # each task's own three grants
        mine = [s for s in holds if s.parent is not None and s.parent.span_id == span_id]
        assert sorted(attrs(s)["hilock.lock.type"] for s in mine) == [
            "lock", "rlock", "semaphore"]
        assert all(attrs(s)["hilock.hold.end"] == "released" for s in mine)


def test_threads_are_their_own_parents(provider: TracerProvider, client: hilock.Client) -> None:
    tracer = provider.get_tracer("test")
    sem = client.semaphore("th:sem", 4, ttl=10)
    ids: Dict[int, int] = {}

    def work(n: int) -> None:
        with tracer.start_as_current_span(f"thread{n}") as mine:
            ids[n] = mine.get_span_context().span_id
            with sem:
                pass

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    holds = spans(provider, "hilock.hold")
    assert sorted(s.parent.span_id for s in holds if s.parent) == sorted(ids.values())
    assert all(attrs(s)["hilock.hold.end"] == "released" for s in holds)


def test_hand_over_links_the_waiter_to_the_releaser(provider: TracerProvider,
                                                    client: hilock.Client) -> None:
    holder = client.lock("ho", ttl=10)
    waiter = client.lock("ho", ttl=10)
    assert holder.acquire()
    got = threading.Event()

    def wait() -> None:
        if waiter.acquire(timeout=DEADLINE):
            got.set()
            waiter.release()

    t = threading.Thread(target=wait)
    t.start()
    wait_for(lambda: client.waiting >= 1, DEADLINE, what="the waiter to wait")
    holder.release()
    t.join(DEADLINE)
    assert got.is_set()
    first, second = spans(provider, "hilock.hold")
    acq = [s for s in spans(provider, "hilock.acquire") if s.links]
    assert len(acq) == 1  # the waiter's; the holder's own acquire waited for nobody
    for s in (acq[0], second):
        (link,) = s.links
        assert link.context.span_id == first.context.span_id
        assert (link.attributes or {})["hilock.link"] == "handover"
    assert not first.links


def test_renewal_failure_is_an_event(provider: TracerProvider) -> None:
    with RedisServer(extra_args=["--enable-debug-command", "yes"]) as srv:
        renewal_fails(provider, srv)


def renewal_fails(provider: TracerProvider, own_server: Any) -> None:
    c = hilock.Client(own_server.url, command_timeout=0.3, reconnect=0.2)
    try:
        lk = c.lock("slow", ttl=6, auto_renew=True)
        assert lk.acquire()
        span = hilock.tracing.hold_span(lk)
        assert span is not None
        # The server sleeps past a renewal (every ttl/3 = 2 s) and less
        # than the TTL: the renewal times out, is retried, and the grant
        # stays.
        sock = debug_sleep(own_server.port, 3.0)
        try:
            wait_for(lambda: any(e.name == "hilock.renewal_failed"
                                 for e in span.events),  # type: ignore[attr-defined]
                     DEADLINE, what="a renewal failure event")
        finally:
            sock.recv(16)
            sock.close()
        lk.release()
        (hold,) = spans(provider, "hilock.hold")
        assert attrs(hold)["hilock.hold.end"] == "released"
    finally:
        c.close()


def test_uninstrument_stops_the_spans(provider: TracerProvider, client: hilock.Client) -> None:
    assert hilock.tracing.is_instrumented()
    lk = client.lock("un", ttl=10)
    assert lk.acquire()
    hilock.tracing.uninstrument()
    assert not hilock.tracing.is_instrumented()
    (hold,) = spans(provider, "hilock.hold")  # ended, not left open
    assert attrs(hold)["hilock.hold.end"] == "uninstrumented"
    lk.release()
    with lk:
        pass
    assert len(spans(provider)) == 2  # the first acquire and its hold


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=60)


def test_hilock_does_not_import_opentelemetry(redis_url: str) -> None:
    r = _run_python(f"""
        import sys, hilock
        c = hilock.Client({redis_url!r})
        with c.lock("imp", ttl=10):
            pass
        import hilock.asyncio
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def _no_otel(tmp_path: Path) -> str:
    """A PYTHONPATH on which opentelemetry is missing: a module of that
    name, found first, that fails to import as a missing package does."""
    (tmp_path / "opentelemetry.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'opentelemetry'\", name='opentelemetry')\n")
    return os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])


def test_import_without_opentelemetry_says_what_to_install(tmp_path: Path) -> None:
    r = _run_python("import hilock.tracing", PYTHONPATH=_no_otel(tmp_path))
    assert r.returncode != 0
    assert "ImportError: hilock.tracing needs the opentelemetry-api package" in r.stderr
    assert "hilock[tracing]" in r.stderr


TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
SHOW = ["--", sys.executable, "-c",
        "import os, json; print(json.dumps({k: os.environ.get(k) for k in "
        "('TRACEPARENT', 'TRACESTATE', 'HILOCK_FENCE')}))"]


def _cli(redis_url: str, *args: str, **env: str) -> Dict[str, Any]:
    e = dict(os.environ)
    e.pop("TRACEPARENT", None)
    e["HILOCK_URL"] = redis_url
    e.update(env)
    r = subprocess.run([sys.executable, "-m", "hilock", *args], env=e, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out: Dict[str, Any] = json.loads(r.stdout.splitlines()[-1])
    return out


def test_cli_passes_the_trace_context_on(redis_url: str, rds: Any, tmp_path: Path) -> None:
    # Nothing came in: nothing goes out.
    assert _cli(redis_url, "run", "cli:1", *SHOW)["TRACEPARENT"] is None
    # OpenTelemetry installed, no SDK set up: the command's parent is the
    # incoming one (hilock's spans are not recorded).
    got = _cli(redis_url, "run", "cli:1", *SHOW, TRACEPARENT=INCOMING, TRACESTATE="k=v")
    assert got["TRACEPARENT"] == INCOMING and got["TRACESTATE"] == "k=v"
    # Without OpenTelemetry: passed through as it came.
    got = _cli(redis_url, "elect", "cli:2", *SHOW, TRACEPARENT=INCOMING,
               PYTHONPATH=_no_otel(tmp_path))
    assert got["TRACEPARENT"] == INCOMING


def test_cli_command_runs_in_the_hold_span(redis_url: str, rds: Any, tmp_path: Path) -> None:
    """With an SDK set up in the hilock process (as opentelemetry-instrument
    does), the command's parent is the grant's hold span, itself a child
    of the incoming context."""
    out = tmp_path / "spans.json"
    boot = textwrap.dedent(f"""
        import atexit, json, sys
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter)
        exp = InMemorySpanExporter()
        tp = TracerProvider()
        tp.add_span_processor(SimpleSpanProcessor(exp))
        trace.set_tracer_provider(tp)
        from hilock.cli import main
        status = main(sys.argv[1:])
        with open({str(out)!r}, "w") as f:
            json.dump([dict(name=s.name, span=format(s.context.span_id, "016x"),
                            trace=format(s.context.trace_id, "032x"),
                            parent=format(s.parent.span_id, "016x") if s.parent else None,
                            attrs=dict(s.attributes))
                       for s in exp.get_finished_spans()], f)
        sys.exit(status)
        """)
    for command in ("run", "elect"):
        e = dict(os.environ, HILOCK_URL=redis_url, TRACEPARENT=INCOMING)
        r = subprocess.run([sys.executable, "-c", boot, command, f"cli:{command}", *SHOW],
                           env=e, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        seen = json.loads(r.stdout.splitlines()[-1])
        recorded = {s["name"]: s for s in json.loads(out.read_text())}
        hold = recorded["hilock.hold"]
        assert hold["trace"] == TRACE_ID and hold["parent"] == "00f067aa0ba902b7"
        assert hold["attrs"]["hilock.hold.end"] == "released"
        assert hold["attrs"]["hilock.lock.type"] == ("lock" if command == "run" else "election")
        assert str(hold["attrs"]["hilock.lock.fence"]) == seen["HILOCK_FENCE"]
        assert seen["TRACEPARENT"] == f"00-{TRACE_ID}-{hold['span']}-01"


def test_tracing_keeps_no_lock_alive(provider: TracerProvider, client: hilock.Client) -> None:
    import gc
    import warnings
    import weakref

    lk = client.lock("dropped", ttl=10)
    assert lk.acquire()
    ref = weakref.ref(lk)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # collected while held
        del lk
        gc.collect()
    assert ref() is None
    (hold,) = spans(provider, "hilock.hold")
    assert attrs(hold)["hilock.hold.end"] == "collected"


def test_unrecorded_traces_cost_no_hold(client: hilock.Client) -> None:
    """A trace sampled out (or a no-op tracer) records nothing: the locks
    work as ever and no hold is kept for them."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    tp = TracerProvider(sampler=ALWAYS_OFF)
    exporter = InMemorySpanExporter()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    hilock.tracing.instrument(tp)
    try:
        lk = client.lock("unsampled", ttl=10)
        assert lk.acquire()
        assert hilock.tracing.hold_span(lk) is None
        assert "_trace_holds" not in lk.__dict__
        lk.release()
        assert lk.acquire(blocking=False)
        lk.release()
    finally:
        hilock.tracing.uninstrument()
    assert exporter.get_finished_spans() == ()


def test_forked_child_traces_while_the_parent_held_the_tracer(provider: TracerProvider,
                                                              client: hilock.Client,
                                                              redis_url: str) -> None:
    import hilock._base
    from helpers import fork_call

    hook = hilock._base._tracer_hook
    hook._mu.acquire()  # as another thread's grant holds it at the fork
    try:
        def child() -> List[str]:
            c = hilock.Client(redis_url)
            try:
                with c.lock("forked", ttl=10):
                    pass
            finally:
                c.close()
            return [s.name for s in spans(provider)]

        names, _ = fork_call(child, DEADLINE)
    finally:
        hook._mu.release()
    assert names == ["hilock.acquire", "hilock.hold"]


def test_asyncio_outcomes_and_election(provider: TracerProvider, redis_url: str,
                                       rds: Any) -> None:
    async def main() -> None:
        async with hilock.asyncio.Client(redis_url) as c:
            holder = c.lock("ao", ttl=10)
            assert await holder.acquire()
            other = c.lock("ao", ttl=10)
            assert not await other.acquire(blocking=False)
            waiting = asyncio.ensure_future(other.acquire())
            while c.waiting == 0:  # the waiter is in the shared waiting
                await asyncio.sleep(0.001)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await holder.release()
            async with (await c.election("ae", ttl=10).campaign("me")):
                pass

    asyncio.run(main())
    acq = spans(provider, "hilock.acquire")
    assert [(attrs(s)["hilock.lock.type"], attrs(s)["hilock.acquire.outcome"]) for s in acq] == [
        ("lock", "granted"), ("lock", "busy"), ("lock", "error"), ("election", "granted")]
    assert attrs(acq[2])["error.type"] == "CancelledError"
    holds = spans(provider, "hilock.hold")
    assert [attrs(s)["hilock.lock.type"] for s in holds] == ["lock", "election"]
    assert all(attrs(s)["hilock.hold.end"] == "released" for s in holds)


def test_semaphore_loss_ends_only_the_lost_permits_hold(provider: TracerProvider,
                                                         client: hilock.Client,
                                                         rds: Any) -> None:
    heard = threading.Event()
    sem = client.semaphore("sl", 2, ttl=1.5, on_lost=lambda _: heard.set())
    assert sem.acquire()
    mine = sem.permit_id
    taken = threading.Event()
    done = threading.Event()
    theirs: List[Any] = []

    def other() -> None:
        assert sem.acquire()
        theirs.append(sem.permit_id)
        taken.set()
        done.wait(DEADLINE)
        try:
            sem.release()
        except hilock.LockNotOwnedError:
            theirs.append("gone")  # as it should: its permit was taken away

    t = threading.Thread(target=other)
    t.start()
    assert taken.wait(DEADLINE)
    rds.zrem(sem.key, theirs[0])  # the other thread's permit is gone
    assert heard.wait(DEADLINE)
    (lost,) = spans(provider, "hilock.hold")
    assert attrs(lost)["hilock.hold.end"] == "lost"
    assert mine is not None and mine != theirs[0]
    sem.release()  # this thread's permit was not lost
    done.set()
    t.join(DEADLINE)
    assert theirs[1:] == ["gone"]
    ends = sorted(attrs(s)["hilock.hold.end"] for s in spans(provider, "hilock.hold"))
    assert ends == ["lost", "released"]
