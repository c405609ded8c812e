"""The module-level constructors (``hilock.lock`` and the others) on the
default client. A module of its own so that ``import hilock`` loads
nothing until a name is used, while these keep real globals for their
annotations (``typing.get_type_hints(hilock.lock)``)."""
from __future__ import annotations

from typing import Iterable, Optional, Union

from ._barrier import Barrier, DoubleBarrier
from ._base import LostCallback
from ._client import Client, default_client
from ._election import Election
from ._fair import FairLock
from ._latch import Latch
from ._lock import Lock
from ._multilock import MultiLock
from ._rlock import RLock
from ._rwlock import ReadLock, RWLock, WriteLock
from ._seglock import SegmentedLock
from ._semaphore import Semaphore
from ._seqlock import SequentialLock
from ._util import Name

# BEGIN generated factories
# Written by tools/gen_factories.py from its table of factories: edit
# the table and run the script, not the code between these lines.

__all__ = ["lock", "simple_lock", "lease", "rlock", "semaphore", "fair_lock", "rwlock",
           "multi_lock", "sequential_lock", "election", "latch", "barrier", "double_barrier",
           "segmented_lock"]


def _default() -> Client:
    return default_client()


def lock(name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *, auto_renew: bool = True,
         max_hold: Optional[float] = None, on_lost: Optional[LostCallback[Lock]] = None,
         lock_delay: float = 0) -> Lock:
    """An expiring lock on the default client (``$HILOCK_URL``, ``$REDIS_URL``)."""
    return _default().lock(name, ttl, timeout, auto_renew=auto_renew, max_hold=max_hold,
                           on_lost=on_lost, lock_delay=lock_delay)


def simple_lock(name: Name, timeout: Optional[float] = None) -> Lock:
    """A simple (non-expiring) lock on the default client."""
    return _default().simple_lock(name, timeout)


def lease(name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
          auto_renew: bool = True, max_hold: Optional[float] = None,
          on_lost: Optional[LostCallback[Lock]] = None, lock_delay: float = 0) -> Lock:
    """A lease on the default client."""
    return _default().lease(name, ttl, timeout, auto_renew=auto_renew, max_hold=max_hold,
                            on_lost=on_lost, lock_delay=lock_delay)


def rlock(name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
          auto_renew: bool = True, max_hold: Optional[float] = None,
          on_lost: Optional[LostCallback[RLock]] = None, lock_delay: float = 0) -> RLock:
    """A reentrant lock on the default client."""
    return _default().rlock(name, ttl, timeout, auto_renew=auto_renew, max_hold=max_hold,
                            on_lost=on_lost, lock_delay=lock_delay)


def semaphore(name: Name, permits: int, ttl: float = 30.0, timeout: Optional[float] = None, *,
              auto_renew: bool = True, max_hold: Optional[float] = None,
              on_lost: Optional[LostCallback[Semaphore]] = None) -> Semaphore:
    """A counting semaphore on the default client."""
    return _default().semaphore(name, permits, ttl, timeout, auto_renew=auto_renew,
                                max_hold=max_hold, on_lost=on_lost)


def fair_lock(name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
              auto_renew: bool = True, max_hold: Optional[float] = None,
              on_lost: Optional[LostCallback[FairLock]] = None, lock_delay: float = 0) -> FairLock:
    """A fair (FIFO) lock on the default client."""
    return _default().fair_lock(name, ttl, timeout, auto_renew=auto_renew, max_hold=max_hold,
                                on_lost=on_lost, lock_delay=lock_delay)


def rwlock(name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
           auto_renew: bool = True, max_hold: Optional[float] = None,
           on_lost: Optional[LostCallback[Union[ReadLock, WriteLock]]] = None,
           lock_delay: float = 0) -> RWLock:
    """A read-write lock on the default client."""
    return _default().rwlock(name, ttl, timeout, auto_renew=auto_renew, max_hold=max_hold,
                             on_lost=on_lost, lock_delay=lock_delay)


def multi_lock(names: Iterable[Name], ttl: float = 30.0, timeout: Optional[float] = None, *,
               auto_renew: bool = True, max_hold: Optional[float] = None,
               on_lost: Optional[LostCallback[MultiLock]] = None,
               lock_delay: float = 0) -> MultiLock:
    """A multi-key lock (all names or none) on the default client."""
    return _default().multi_lock(names, ttl, timeout, auto_renew=auto_renew, max_hold=max_hold,
                                 on_lost=on_lost, lock_delay=lock_delay)


def sequential_lock(name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
                    auto_renew: bool = True, max_hold: Optional[float] = None,
                    on_lost: Optional[LostCallback[SequentialLock]] = None,
                    lock_delay: float = 0) -> SequentialLock:
    """A sequential (ZooKeeper-style) lock on the default client."""
    return _default().sequential_lock(name, ttl, timeout, auto_renew=auto_renew, max_hold=max_hold,
                                      on_lost=on_lost, lock_delay=lock_delay)


def election(name: Name, ttl: float = 30.0, timeout: Optional[float] = None, *,
             auto_renew: bool = True, max_hold: Optional[float] = None,
             on_lost: Optional[LostCallback[Election]] = None) -> Election:
    """A leader election on the default client."""
    return _default().election(name, ttl, timeout, auto_renew=auto_renew, max_hold=max_hold,
                               on_lost=on_lost)


def latch(name: Name, count: int, ttl: float = 30.0) -> Latch:
    """A countdown latch on the default client."""
    return _default().latch(name, count, ttl)


def barrier(name: Name, parties: int, ttl: float = 30.0,
            timeout: Optional[float] = None) -> Barrier:
    """A barrier on the default client."""
    return _default().barrier(name, parties, ttl, timeout)


def double_barrier(name: Name, parties: int, ttl: float = 30.0,
                   timeout: Optional[float] = None) -> DoubleBarrier:
    """A double barrier on the default client."""
    return _default().double_barrier(name, parties, ttl, timeout)


def segmented_lock(name: Name, segments: int, ttl: float = 30.0, timeout: Optional[float] = None, *,
                   auto_renew: bool = True, max_hold: Optional[float] = None,
                   on_lost: Optional[LostCallback[SegmentedLock]] = None) -> SegmentedLock:
    """A segmented lock on the default client."""
    return _default().segmented_lock(name, segments, ttl, timeout, auto_renew=auto_renew,
                                     max_hold=max_hold, on_lost=on_lost)


for _f in (lock, simple_lock, lease, rlock, semaphore, fair_lock, rwlock, multi_lock,
           sequential_lock, election, latch, barrier, double_barrier, segmented_lock):
    _f.__module__ = "hilock"  # where users find them
# END generated factories
