"""OpenTelemetry traces of hilock's locks (needs ``opentelemetry-api``:
``pip install 'hilock[tracing]'``).

    import hilock, hilock.tracing
    hilock.tracing.instrument()          # the global tracer provider
    with hilock.lock("orders:42", timeout=5):
        ...

Every lock type, blocking or asyncio, then makes a span ``hilock.acquire``
per acquire (its outcome: granted, busy, timeout or error) and a span
``hilock.hold`` per grant, from the grant to its release (``released``) or
its loss (``lost``), both children of the caller's current span (an
asyncio task's own context). A waiter granted after a release by a traced
holder of the same lock in this process links to that holder's hold span.
See docs/tracing.md for every attribute and event.

Not instrumented, hilock never imports OpenTelemetry, and a lock pays one
read of a module variable per acquire and release.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from typing import Any, Awaitable, Callable, Dict, List, Mapping, MutableMapping, Optional, Tuple
from urllib.parse import urlsplit

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "hilock.tracing needs the opentelemetry-api package: "
        "pip install 'hilock[tracing]' (or pip install opentelemetry-api)") from e

from . import _base, _green, _notify
from . import _hilock as _h
from ._semaphore import Semaphore
from .errors import LockNotOwnedError

__all__ = ["instrument", "uninstrument", "is_instrumented", "hold_span", "inject_env",
           "extract_env"]

ACQUIRE_SPAN = "hilock.acquire"
HOLD_SPAN = "hilock.hold"

# The lock types as traced (hilock.lock.type): the classes' own words, the
# read-write lock's sides as rwlock.read and rwlock.write.
_TYPES = {"rwlock read side": "rwlock.read", "rwlock write side": "rwlock.write"}
# Releases remembered for the hand-over links: at most this many lock names.
_HANDOVERS_MAX = 4096

_propagator = TraceContextTextMapPropagator()


def _text(name: Any) -> str:
    if isinstance(name, (bytes, bytearray)):
        return bytes(name).decode("utf-8", "backslashreplace")
    return str(name)


class _Hold:
    """One traced grant: its span, its C handle, its lock's name (as the
    C layer's log records name it) and its lock object."""

    __slots__ = ("span", "handle", "key", "lock")

    def __init__(self, span: trace.Span, handle: Any, key: bytes,
                 lock: weakref.ReferenceType[Any]) -> None:
        self.span = span
        self.handle = handle
        self.key = key
        self.lock = lock  # weak: tracing never keeps a lock object alive


class _Tracer:
    """The hook _base calls (its ``_tracer_hook``) while instrumented."""

    def __init__(self, provider: Optional[trace.TracerProvider]) -> None:
        self.set_provider(provider)
        self._mu = threading.Lock()
        # Every traced grant not ended yet (renewal failures are reported
        # by key; uninstrument() ends them).
        self._open: Dict[int, _Hold] = {}
        # (client, lock type, name) -> (the releaser's hold span, when).
        self._handovers: Dict[Tuple[Any, ...], Tuple[trace.SpanContext, float]] = {}

    def set_provider(self, provider: Optional[trace.TracerProvider]) -> None:
        try:
            from importlib.metadata import version
            v: Optional[str] = version("hilock")
        except Exception:
            v = None
        self.tracer = trace.get_tracer("hilock", v, tracer_provider=provider)

    # -- what a lock object says about itself (once per object) ---------------

    def _attrs(self, lock: Any) -> Dict[str, Any]:
        a: Optional[Dict[str, Any]] = lock.__dict__.get("_trace_attrs")
        if a is not None:
            return a
        name = lock.name
        a = {"db.system.name": "redis",
             "hilock.lock.name": ([_text(n) for n in name] if isinstance(name, tuple)
                                  else _text(name)),
             "hilock.lock.type": _TYPES.get(lock._kind_name, lock._kind_name)}
        try:
            ttl = lock.ttl
            if ttl is not None:
                a["hilock.lock.ttl"] = float(ttl)
        except Exception:
            pass
        client = getattr(lock, "_client", None)
        if client is not None:
            try:
                parts = urlsplit(client.url)
                if parts.hostname and "," not in parts.netloc:
                    a["server.address"] = parts.hostname
                    if parts.port:
                        a["server.port"] = parts.port
                elif parts.path and parts.scheme.startswith("unix"):
                    a["server.address"] = parts.path
            except Exception:
                pass
            shared = getattr(client, "_shared_waiting", None)
            if shared is not None:
                a["hilock.client.shared_waiting"] = bool(shared)
        nodes = getattr(lock, "_urls", None)
        if nodes is not None:
            a["hilock.redlock.nodes"] = len(nodes)
        lock.__dict__["_trace_attrs"] = a
        return a

    @staticmethod
    def _handover_key(lock: Any) -> Tuple[Any, ...]:
        client = getattr(lock, "_client", None)
        where = getattr(lock, "_urls", None) if client is None else id(client)
        return (where, lock._kind_name, lock._bname)

    @staticmethod
    def _holds(lock: Any) -> Dict[Any, List[_Hold]]:
        d: Optional[Dict[Any, List[_Hold]]] = lock.__dict__.get("_trace_holds")
        if d is None:
            d = lock.__dict__.setdefault("_trace_holds", {})
        return d

    # -- acquire ----------------------------------------------------------------

    def _start_acquire(self, lock: Any, wait: Optional[float]) -> trace.Span:
        attrs = self._attrs(lock)
        if wait is not None:
            attrs = dict(attrs)
            attrs["hilock.acquire.timeout"] = float(wait)
        return self.tracer.start_span(ACQUIRE_SPAN, kind=SpanKind.CLIENT, attributes=attrs)

    def _failed(self, span: trace.Span, e: BaseException) -> None:
        if span.is_recording():
            span.set_attributes({"hilock.acquire.outcome": "error",
                                 "error.type": type(e).__qualname__})
            span.record_exception(e)
            span.set_status(Status(StatusCode.ERROR, f"{type(e).__name__}: {e}"))
        span.end()

    def _refused(self, span: trace.Span, wait: Optional[float]) -> None:
        span.set_attribute("hilock.acquire.outcome", "busy" if wait == 0 else "timeout")
        span.end()

    def _granted(self, lock: Any, span: trace.Span, start: float, owner: Any,
                 handle: Any, parent: Optional[otel_context.Context]) -> None:
        """The acquire behind span was granted: end it, start the hold."""
        if not span.is_recording():
            # A no-op tracer (no SDK), or a trace sampled out: no hold span
            # either (its context would be the caller's: see hold_span).
            span.end()
            return
        ended = False
        try:
            attrs = dict(self._attrs(lock))
            fence: Any = lock.fence
            if isinstance(fence, dict):
                fence = [int(fence.get(n) or 0) for n in lock.names]
            if fence:
                attrs["hilock.lock.fence"] = fence
            holds = self._holds(lock)
            links: List[Link] = []
            prior = self._handovers.get(self._handover_key(lock))
            if prior is not None and prior[1] >= start and prior[0].is_valid:
                links.append(Link(prior[0], {"hilock.link": "handover"}))
            with self._mu:
                stack = holds.setdefault(owner, [])
                stale = stack[:] if owner is None else []
                if owner is None:
                    stack.clear()
                reentry = bool(stack)
            for old in stale:  # an exclusive object's grant that lapsed unreleased
                self._end(old, "lapsed", None)
            if reentry:
                attrs["hilock.acquire.reentry"] = True
            attrs["hilock.acquire.outcome"] = "granted"
            span.set_attributes({k: attrs[k] for k in (
                "hilock.acquire.outcome", "hilock.lock.fence", "hilock.acquire.reentry")
                if k in attrs})
            for link in links:
                span.add_link(link.context, link.attributes)
            span.end()
            ended = True
            del attrs["hilock.acquire.outcome"]
            hold = self.tracer.start_span(HOLD_SPAN, context=parent, kind=SpanKind.INTERNAL,
                                          attributes=attrs, links=links)
            rec = _Hold(hold, handle, lock._bname, weakref.ref(lock, self._collected))
            with self._mu:
                stack.append(rec)
                self._open[id(rec)] = rec
        except Exception:  # tracing never breaks a lock
            if not ended:
                span.end()

    def acquire(self, lock: Any, wait: Optional[float]) -> bool:
        """LockBase.acquire's wait (lock._acquire), traced."""
        span = self._start_acquire(lock, wait)
        start = time.monotonic()
        try:
            granted: bool = lock._acquire(wait)
        except BaseException as e:
            self._failed(span, e)
            raise
        if granted:
            if isinstance(lock, Semaphore):
                owner: Any = self._thread_owner()
                handle = lock._mine()
            else:
                owner = None if isinstance(lock, _base.ExclusiveBase) else self._thread_owner()
                handle = lock._h
            self._granted(lock, span, start, owner, handle, None)
        else:
            self._refused(span, wait)
        return granted

    async def acquire_async(self, hold: Any, run: Callable[..., Awaitable[bool]],
                            blocking: bool, timeout: float) -> bool:
        """An asyncio lock's acquire (run), traced in the task's context."""
        lock = hold._sync
        try:
            wait: Optional[float] = (0.0 if not blocking else lock.timeout if timeout == -1
                                     else float(timeout))
        except Exception:
            wait = None
        span = self._start_acquire(lock, wait)
        start = time.monotonic()
        try:
            granted = await run(hold, blocking, timeout)
        except BaseException as e:
            self._failed(span, e)
            raise
        if granted:
            task = asyncio.current_task()
            if isinstance(lock, Semaphore):
                owner: Any = task
                handle = hold._held[task][-1]
            else:
                owner = None if isinstance(lock, _base.ExclusiveBase) else task
                handle = lock._h
            self._granted(lock, span, start, owner, handle, None)
        else:
            self._refused(span, wait)
        return granted

    @staticmethod
    def _thread_owner() -> int:
        return _green.owner() or threading.get_ident()

    # -- the end of a hold ---------------------------------------------------------

    def _pop(self, lock: Any, owner: Any, handle: Any = None) -> Optional[_Hold]:
        holds: Optional[Dict[Any, List[_Hold]]] = lock.__dict__.get("_trace_holds")
        if not holds:
            return None
        with self._mu:
            stack = holds.get(owner)
            if not stack:
                return None
            if handle is None:
                rec = stack.pop()
            else:
                found = [r for r in stack if r.handle is handle]
                if not found:
                    return None
                rec = found[-1]
                stack.remove(rec)
            if not stack:
                del holds[owner]
            self._open.pop(id(rec), None)
        return rec

    def _end(self, rec: _Hold, how: str, e: Optional[BaseException]) -> None:
        span = rec.span
        if span.is_recording():
            span.set_attribute("hilock.hold.end", how)
            if how == "lost":
                attrs: Dict[str, Any] = {}
                if e is not None:
                    attrs["exception.type"] = type(e).__qualname__
                    attrs["exception.message"] = str(e)
                span.add_event("hilock.lost", attrs)
                span.set_status(Status(StatusCode.ERROR, "the lock was lost"))
            elif how == "released":
                span.set_status(Status(StatusCode.OK))
        span.end()

    def _releasing(self, lock: Any, owner: Any) -> Optional[Tuple[Any, ...]]:
        """Before a release: remember it for the hand-over link of the
        waiter it wakes (which may be granted before the release returns
        here). The entry, to withdraw if the release fails."""
        rec = self._peek(lock, owner)
        if rec is None:
            return None
        ctx = rec.span.get_span_context()
        if not ctx.is_valid:
            return None
        key = self._handover_key(lock)
        entry = (ctx, time.monotonic())
        with self._mu:
            self._handovers.pop(key, None)
            self._handovers[key] = entry
            if len(self._handovers) > _HANDOVERS_MAX:
                self._handovers.pop(next(iter(self._handovers)))
        return (key, entry)

    def _withdraw(self, pending: Optional[Tuple[Any, ...]]) -> None:
        if pending is not None:
            key, entry = pending
            with self._mu:
                if self._handovers.get(key) is entry:
                    del self._handovers[key]

    def _released(self, rec: Optional[_Hold], lock: Any) -> None:
        if rec is not None:
            self._end(rec, "released", None)

    def _release_failed(self, rec: Optional[_Hold], e: BaseException) -> None:
        if rec is not None and rec.span.is_recording():
            rec.span.add_event("hilock.release_failed",
                               {"exception.type": type(e).__qualname__,
                                "exception.message": str(e)})

    def _release_raised(self, lock: Any, owner: Any, handle: Any,
                        pending: Optional[Tuple[Any, ...]],
                        e: BaseException) -> None:
        """A release that raised e: a grant it found lost ends its hold span
        ("lost"); any other failure is an event on the span, left open."""
        self._withdraw(pending)
        if isinstance(e, LockNotOwnedError):
            rec = self._pop(lock, owner, handle)
            if rec is not None:
                self._end(rec, "lost", e)
        else:
            self._release_failed(self._peek(lock, owner), e)

    def _peek(self, lock: Any, owner: Any) -> Optional[_Hold]:
        holds: Optional[Dict[Any, List[_Hold]]] = lock.__dict__.get("_trace_holds")
        stack = holds.get(owner) if holds else None
        return stack[-1] if stack else None

    def _release_owner(self, lock: Any, task: Any) -> Tuple[Any, Any]:
        """(owner, handle) of the grant a release gives back."""
        if isinstance(lock, Semaphore):
            if task is None:
                return self._thread_owner(), lock._mine()
            return task, None
        if isinstance(lock, _base.ExclusiveBase):
            return None, None
        return (self._thread_owner() if task is None else task), None

    def release(self, lock: Any, run: Callable[[Any], None]) -> None:
        """A blocking lock's release (run(lock)), ending its hold span."""
        owner, handle = self._release_owner(lock, None)
        pending = self._releasing(lock, owner)
        try:
            run(lock)
        except BaseException as e:
            self._release_raised(lock, owner, handle, pending, e)
            raise
        self._released(self._pop(lock, owner, handle), lock)

    async def release_async(self, hold: Any, run: Callable[[Any], Awaitable[None]]) -> None:
        lock = hold._sync
        owner, _ = self._release_owner(lock, asyncio.current_task())
        handle = None
        if isinstance(lock, Semaphore):
            held = hold._held.get(owner)
            handle = held[-1] if held else None
        pending = self._releasing(lock, owner)
        try:
            await run(hold)
        except BaseException as e:
            self._release_raised(lock, owner, handle, pending, e)
            raise
        self._released(self._pop(lock, owner, handle), lock)

    # -- reports from elsewhere ----------------------------------------------------

    def lost(self, lock: Any) -> None:
        """The renewal (or a call) reported lock's grant lost."""
        holds = lock.__dict__.get("_trace_holds")
        if not holds:
            return
        gone: List[_Hold] = []
        with self._mu:
            for owner, stack in list(holds.items()):
                for rec in list(stack):
                    if isinstance(lock, Semaphore) and not _h.hilock_hold_lost(rec.handle):
                        continue
                    stack.remove(rec)
                    self._open.pop(id(rec), None)
                    gone.append(rec)
                if not stack:
                    del holds[owner]
        for rec in gone:
            self._end(rec, "lost", None)

    def exported(self, lock: Any, handle: Any) -> None:
        """lock's grant on handle was exported: its hold ends here."""
        holds = lock.__dict__.get("_trace_holds")
        if not holds:
            return
        for owner, stack in list(holds.items()):
            for rec in list(stack):
                if rec.handle is handle:
                    self._pop(lock, owner, handle)
                    self._end(rec, "exported", None)
                    return

    def log(self, level: int, name: bytes, msg: bytes) -> None:
        """A record of the C layer: a renewal failure is an event of the
        holds of the lock it names."""
        if level != logging.WARNING or not msg.startswith(b"renewal failed"):
            return
        with self._mu:
            recs = [r for r in self._open.values() if r.key == name]
        for rec in recs:
            if rec.span.is_recording():
                rec.span.add_event("hilock.renewal_failed",
                                   {"hilock.renewal.message": msg.decode("utf-8", "replace")})

    def _collected(self, ref: weakref.ReferenceType[Any]) -> None:
        """A lock object was collected while holding (it is not released:
        its grant lapses at its TTL): its holds end. Called by the garbage
        collector, maybe while this thread holds _mu: takes no lock."""
        for rec in [r for r in list(self._open.values()) if r.lock is ref]:
            if self._open.pop(id(rec), None) is not None:
                self._end(rec, "collected", None)

    def hold_span(self, lock: Any, owner: Any) -> Optional[trace.Span]:
        rec = self._peek(lock, owner)
        return None if rec is None else rec.span

    def end_all(self) -> None:
        with self._mu:
            recs = list(self._open.values())
            self._open.clear()
            for rec in recs:
                lock = rec.lock()
                holds = lock.__dict__.get("_trace_holds") if lock is not None else None
                if holds:
                    holds.clear()
        for rec in recs:
            self._end(rec, "uninstrumented", None)


_mu = threading.Lock()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held a mutex at the fork.
    global _mu
    _mu = threading.Lock()
    hook = _base._tracer_hook
    if isinstance(hook, _Tracer):
        hook._mu = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def instrument(tracer_provider: Optional[trace.TracerProvider] = None) -> None:
    """Trace every lock of this process, blocking and asyncio, from now on,
    with ``tracer_provider``'s tracer (default: OpenTelemetry's global
    provider, as set by ``trace.set_tracer_provider``). Calling it again
    switches to the new provider; grants already held keep their spans."""
    with _mu:
        hook = _base._tracer_hook
        if isinstance(hook, _Tracer):
            hook.set_provider(tracer_provider)
            return
        hook = _Tracer(tracer_provider)
        _notify._log_hook = hook.log
        _base._tracer_hook = hook


def uninstrument() -> None:
    """Stop tracing: no new spans from now on. Hold spans still open end
    with ``hilock.hold.end = "uninstrumented"``."""
    with _mu:
        hook = _base._tracer_hook
        _base._tracer_hook = None
        _notify._log_hook = None
    if isinstance(hook, _Tracer):
        hook.end_all()


def is_instrumented() -> bool:
    """Whether :func:`instrument` is in force."""
    return _base._tracer_hook is not None


def hold_span(lock: Any) -> Optional[trace.Span]:
    """The ``hilock.hold`` span of ``lock``'s current grant (blocking or
    asyncio lock object): of the object for an exclusive lock, of the
    calling thread (or task) for a reentrant lock, a read-write lock's side
    and a semaphore; None when not instrumented, nothing traced is held, or
    the trace is not recorded (no SDK, or sampled out: then the caller's
    span stands for it).
    ``with trace.use_span(hilock.tracing.hold_span(lk)):`` makes the work
    under the lock its child."""
    hook = _base._tracer_hook
    if not isinstance(hook, _Tracer):
        return None
    sync = getattr(lock, "_sync", lock)
    if isinstance(sync, _base.ExclusiveBase):
        owner: Any = None
    elif sync is not lock:
        owner = asyncio.current_task()
    else:
        owner = _Tracer._thread_owner()
    return hook.hold_span(sync, owner)


def inject_env(env: MutableMapping[str, str],
               context: Optional[otel_context.Context] = None) -> None:
    """Put the trace context (default: the current one) into ``env`` as
    ``TRACEPARENT`` (and ``TRACESTATE``), the W3C format the
    OpenTelemetry SDKs read from a process's environment. A context with
    no valid span leaves ``env`` as it is."""
    carrier: Dict[str, str] = {}
    _propagator.inject(carrier, context=context)
    if "traceparent" in carrier:
        env["TRACEPARENT"] = carrier["traceparent"]
        if carrier.get("tracestate"):
            env["TRACESTATE"] = carrier["tracestate"]
        else:
            env.pop("TRACESTATE", None)


def extract_env(env: Mapping[str, str]) -> otel_context.Context:
    """The trace context ``TRACEPARENT`` and ``TRACESTATE`` of ``env``
    carry (an empty one without them)."""
    carrier = {}
    if env.get("TRACEPARENT"):
        carrier["traceparent"] = env["TRACEPARENT"]
        if env.get("TRACESTATE"):
            carrier["tracestate"] = env["TRACESTATE"]
    return _propagator.extract(carrier)
