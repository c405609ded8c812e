"""Looking at locks from outside, for operators: :class:`LockInfo`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

# The lock types, as inspect() reports them.
TYPES = ("none", "lock", "rlock", "semaphore", "fair_lock", "rwlock",
         "sequential_lock", "segmented_lock", "redlock", "unknown", "election", "latch")

FIELDS = ("name", "type", "held", "holder", "fence", "ttl", "waiters", "hold_count",
          "readers", "writer", "permits", "permits_used", "permits_free", "lock_delay",
          "delay_left")


@dataclass(frozen=True)
class LockInfo:
    """What one lock name holds, as :meth:`Client.inspect` found it.

    ``type``: ``"none"`` (nothing there but maybe its fence counter),
    ``"lock"`` (a plain, expiring, lease or simple lock, or one name of a
    multi-key lock), ``"rlock"``, ``"semaphore"``, ``"fair_lock"``,
    ``"rwlock"``, ``"sequential_lock"``, ``"segmented_lock"``,
    ``"redlock"`` (one Redlock node's view), ``"election"`` (a leader
    election: held while someone leads, ``holder`` the leader's token),
    ``"latch"`` (a countdown latch: held while its count is above 0 and it
    is not broken, ``hold_count`` the count left, ``waiters`` its live
    registered parties) or
    ``"unknown"`` (a key of the name holds a Redis type no lock writes).
    ``held``: anyone holds it (a reader counts). ``holder``: the holder's
    owner token, whole (None when nobody or several hold it).
    ``fence``: the last fencing token handed out on the name (None: none;
    a semaphore has none). ``ttl``: seconds left on the current hold (the
    longest of several), None when it has no expiry or nothing is held.
    ``waiters``: waiters registered on the server (fair and sequential
    locks: those in line; read-write lock: waiting writers and readers;
    0 for the others, whose waiters register nowhere).
    ``hold_count``: reentrant holds (reentrant lock, write hold), the read
    holds of all readers, the permits or segments held (semaphore,
    segmented lock); 1 for another lock held, 0 when not held.
    ``readers`` and ``writer``: read-write lock only (else None).
    ``permits``, ``permits_used``, ``permits_free``: semaphore (limit, live
    permits, free; ``permits`` None if no limit is stored) and segmented
    lock (segments known, held, free); None elsewhere.
    ``lock_delay``: the lock delay of the name's last grant that had one
    (seconds), None when no delay marker is there; ``delay_left``: seconds
    until the marker expires, the earliest another grant may come (while
    held: if the holder were lost now), None without a marker. A name with
    nothing but the marker is a ``"lock"`` that is not held.
    ``name``: the lock name as str (bytes that are not UTF-8 are kept as
    ``surrogateescape`` characters).
    """

    name: str
    type: str
    held: bool
    holder: Optional[str]
    fence: Optional[int]
    ttl: Optional[float]
    waiters: int
    hold_count: int
    readers: Optional[int]
    writer: Optional[bool]
    permits: Optional[int]
    permits_used: Optional[int]
    permits_free: Optional[int]
    lock_delay: Optional[float] = None
    delay_left: Optional[float] = None

    @classmethod
    def _from_c(cls, name: Union[str, bytes], t: Tuple[Any, ...]) -> LockInfo:
        """From py_inspect's tuple (see bindings/hilock.i)."""
        (tname, held, holder, fence, ttl_ms, count, readers, writer, permits, used,
         free, waiters, delay_ms, delay_left_ms) = t
        if isinstance(tname, bytes):
            tname = tname.decode()
        if isinstance(name, bytes):
            name = name.decode("utf-8", "surrogateescape")
        rw = tname == "rwlock"
        counted = tname in ("semaphore", "segmented_lock")
        return cls(
            name=name, type=tname, held=bool(held),
            holder=holder.decode("utf-8", "backslashreplace") if holder else None,
            fence=int(fence) or None,
            ttl=ttl_ms / 1000.0 if ttl_ms >= 0 else None,
            waiters=int(waiters), hold_count=int(count),
            readers=int(readers) if rw else None,
            writer=bool(writer) if rw else None,
            permits=int(permits) if counted and permits >= 0 else None,
            permits_used=int(used) if counted and used >= 0 else None,
            permits_free=int(free) if counted and free >= 0 else None,
            lock_delay=delay_ms / 1000.0 if delay_ms > 0 else None,
            delay_left=delay_left_ms / 1000.0 if delay_ms > 0 and delay_left_ms >= 0 else None)

    def as_dict(self) -> Dict[str, Any]:
        """A JSON-serialisable dict with exactly the keys of :data:`FIELDS`."""
        return {f: getattr(self, f) for f in FIELDS}
