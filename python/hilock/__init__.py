"""hilock: Redis distributed locks with fencing tokens.

    from hilock import lock

    with lock("orders:42", ttl=30, timeout=5) as lk:
        ...  # lk.fence: pass it to the storage you protect

The C core (hilock._hilock) does the work; this package gives it the
``threading.Lock`` contract, context managers and exceptions.
"""
from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any, List

if TYPE_CHECKING:
    from ._base import LockBase
    from ._base import LostCallback as LostCallback
    from ._client import Client, default_client, default_url, redlock
    from ._inspect import LockInfo
    from ._store import BoundStore, FencedStore
    from ._util import Name as Name
    from .errors import (
        AuthenticationError,
        BrokenBarrier,
        CertificateError,
        ClusterError,
        ConnectionError,
        CrossSlotError,
        DeadlockError,
        ForkedLockError,
        InvalidArgument,
        LockError,
        LockLost,
        LockNotOwnedError,
        LockTimeout,
        NoPermissionError,
        NoQuorumError,
        NotEnoughReplicas,
        NotTransferable,
        RedisError,
        SoldOut,
        StaleFence,
        TLSError,
        UnsupportedError,
        WrongTypeError,
    )

    __version__: str

# BEGIN generated families: imports
if TYPE_CHECKING:
    from ._barrier import Barrier, DoubleBarrier, Inside
    from ._default import (
        barrier,
        double_barrier,
        election,
        fair_lock,
        latch,
        lease,
        lock,
        multi_lock,
        rlock,
        rwlock,
        segmented_lock,
        semaphore,
        sequential_lock,
        simple_lock,
    )
    from ._election import Election, Leadership
    from ._fair import FairLock
    from ._latch import Latch, LatchParty
    from ._lock import Lock
    from ._multilock import MultiLock
    from ._redlock import Redlock
    from ._rlock import RedissonRWLock, RLock
    from ._rwlock import ReadLock, RWLock, WriteLock
    from ._seglock import SegmentedLock
    from ._semaphore import Semaphore
    from ._seqlock import SequentialLock
# END generated families

# Where each public name lives. They are imported on first use (PEP 562),
# so that a submodule which needs none of them (the pytest plugin, loaded
# into every pytest run where hilock is installed) does not load the C core.
_WHERE = {
    "LockBase": "_base", "LostCallback": "_base",
    "Client": "_client", "default_client": "_client", "default_url": "_client",
    "redlock": "_client", "LockInfo": "_inspect",
    "BoundStore": "_store", "FencedStore": "_store", "Name": "_util",
}
# BEGIN generated families: where
_WHERE.update({"Lock": "_lock", "RLock": "_rlock", "RedissonRWLock": "_rlock",
               "Semaphore": "_semaphore", "FairLock": "_fair", "RWLock": "_rwlock",
               "ReadLock": "_rwlock", "WriteLock": "_rwlock", "MultiLock": "_multilock",
               "SequentialLock": "_seqlock", "SegmentedLock": "_seglock", "Redlock": "_redlock",
               "Election": "_election", "Leadership": "_election", "Latch": "_latch",
               "LatchParty": "_latch", "Barrier": "_barrier", "DoubleBarrier": "_barrier",
               "Inside": "_barrier"})
_WHERE.update(dict.fromkeys(["lock", "simple_lock", "lease", "rlock", "semaphore", "fair_lock",
                             "rwlock", "multi_lock", "sequential_lock", "election", "latch",
                             "barrier", "double_barrier", "segmented_lock"], "_default"))
# END generated families
_WHERE.update(dict.fromkeys([
    "AuthenticationError", "BrokenBarrier", "CertificateError", "ClusterError", "ConnectionError",
    "CrossSlotError", "DeadlockError", "ForkedLockError", "InvalidArgument", "LockError",
    "LockLost", "LockNotOwnedError", "LockTimeout", "NoPermissionError", "NoQuorumError",
    "NotEnoughReplicas", "RedisError", "SoldOut", "StaleFence", "TLSError",
    "UnsupportedError", "WrongTypeError", "NotTransferable"], "errors"))

if not TYPE_CHECKING:  # type checkers see the imports above, and no catch-all
    def __getattr__(name: str) -> Any:
        if name == "__version__":
            value = importlib.import_module("._hilock", __name__).hilock_version_string().decode()
        elif name in _WHERE:
            value = getattr(importlib.import_module("." + _WHERE[name], __name__), name)
        elif name.startswith("__"):
            raise AttributeError(f"module 'hilock' has no attribute {name!r}")
        else:
            try:  # a submodule (hilock._hilock, hilock.errors, ...)
                return importlib.import_module("." + name, __name__)
            except ModuleNotFoundError:
                raise AttributeError(f"module 'hilock' has no attribute {name!r}") from None
        globals()[name] = value
        return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_WHERE) | {"__version__"})


# Losses, renewal failures, reconnects and failovers are logged on the
# "hilock" logger; nothing is printed unless the application configures it.
logging.getLogger("hilock").addHandler(logging.NullHandler())

__all__ = [
    "Client", "LockBase", "redlock", "default_client", "default_url",
    "DeadlockError", "CrossSlotError", "NoQuorumError", "SoldOut",
    "LockError", "LockNotOwnedError", "LockLost", "ForkedLockError", "LockTimeout",
    "ConnectionError", "TLSError", "CertificateError",
    "AuthenticationError", "InvalidArgument", "RedisError", "WrongTypeError",
    "NoPermissionError", "UnsupportedError", "__version__",
    "ClusterError",
    "NotEnoughReplicas",
    "NotTransferable",
    "FencedStore", "BoundStore", "StaleFence",
    "BrokenBarrier",
    "LockInfo",
]
# BEGIN generated families: all
__all__ += ["Lock", "RLock", "RedissonRWLock", "Semaphore", "FairLock", "RWLock", "ReadLock",
            "WriteLock", "MultiLock", "SequentialLock", "SegmentedLock", "Redlock", "Election",
            "Leadership", "Latch", "LatchParty", "Barrier", "DoubleBarrier", "Inside", "lock",
            "simple_lock", "lease", "rlock", "semaphore", "fair_lock", "rwlock", "multi_lock",
            "sequential_lock", "election", "latch", "barrier", "double_barrier", "segmented_lock"]
# END generated families
