"""Delivery of lock-loss callbacks and log records.

The C renewal thread reports a lost hold by writing the lock's id to a
pipe; a daemon thread here reads it and calls the lock's callback with the
GIL held, in Python's own thread. No Python object crosses into C, so a
callback can never race the collection of its lock. The C log callback of
every client (bindings/py_helpers.h) writes its records to the same pipe
(marker -1, level, name, message), and this thread hands them to the
"hilock" logger.
"""
from __future__ import annotations

import itertools
import logging
import os
import struct
import threading
import traceback
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

from . import _green
from . import _hilock as _h

# Real locks and a real thread whatever gevent or eventlet patched (the
# reader blocks in os.read: a greenlet there would stop its whole thread).
# Reentrant: a lock collected while this thread holds _mu (the garbage
# collector can run __del__ -> unregister() at any allocation, e.g. inside
# register()) must not deadlock on it.
_mu = _green.RLock()
# Serialises starting the reader thread. Thread.start() waits for the new
# thread, which may itself collect a lock (-> unregister() -> _mu): so the
# thread is never started while _mu is held.
_start_mu = _green.allocate_lock()
_ids = itertools.count(1)
_locks: Dict[int, weakref.ReferenceType[Any]] = {}
_fds: Optional[Tuple[int, int]] = None
_ID = struct.Struct("=q")
# A log record (bindings/py_helpers.h): -1, level, name and message lengths.
_LOG = struct.Struct("=qiII")
_log = logging.getLogger("hilock")
_logging = False  # some client sends log records: restart after a fork
# hilock.tracing's view of the records while instrumented (renewal failures).
_log_hook: Optional[Callable[[int, bytes, bytes], None]] = None


def _emit(level: int, name: bytes, msg: bytes) -> None:
    hook = _log_hook
    if hook is not None:
        try:
            hook(level, name, msg)
        except Exception:  # tracing never stops delivery
            traceback.print_exc()
    lock = name.decode("utf-8", "replace")
    text = msg.decode("utf-8", "replace")
    if lock:
        _log.log(level, "%s: %s", lock, text, extra={"hilock_lock": lock})
    else:
        _log.log(level, "%s", text, extra={"hilock_lock": None})


def _reader(rfd: int) -> None:
    buf = b""
    while True:
        try:
            chunk = os.read(rfd, 8 * 64)
        except OSError:
            return
        if not chunk:
            return
        buf += chunk
        while len(buf) >= _ID.size:
            (lock_id,) = _ID.unpack_from(buf)
            if lock_id == -1:
                if len(buf) < _LOG.size:
                    break
                _, level, namelen, msglen = _LOG.unpack_from(buf)
                end = _LOG.size + namelen + msglen
                if len(buf) < end:
                    break
                name = buf[_LOG.size:_LOG.size + namelen]
                msg = buf[_LOG.size + namelen:end]
                buf = buf[end:]
                try:
                    _emit(level, name, msg)
                except Exception:  # a handler's error must not stop delivery
                    traceback.print_exc()
                continue
            buf = buf[_ID.size:]
            with _mu:
                ref = _locks.get(lock_id)
            lock = ref() if ref is not None else None
            if lock is not None:
                try:
                    lock._notify_lost()
                except Exception:  # a callback's error must not stop delivery
                    traceback.print_exc()


def _start() -> None:
    global _fds
    with _start_mu:
        if _fds is not None:
            return
        rfd, wfd = os.pipe()
        os.set_blocking(wfd, False)  # never stall the renewal thread
        _fds = (rfd, wfd)
        _h._set_lost_fd(wfd)
        if _green.patched():
            _green.start_thread(_reader, (rfd,), "hilock-lost")
        else:
            threading.Thread(target=_reader, args=(rfd,), name="hilock-lost",
                             daemon=True).start()


def start_logging() -> None:
    """Make sure log records sent by the C layer are read."""
    global _logging
    _logging = True
    _start()


def register(lock: Any) -> int:
    """An id under which the C layer reports lock's loss."""
    _start()
    with _mu:
        lock_id = next(_ids)
        _locks[lock_id] = weakref.ref(lock)
        return lock_id


def unregister(lock_id: int) -> None:
    # No lock here: this runs from __del__, which the garbage collector may
    # call inside register() (while it holds _mu) or on the reader thread
    # as it starts (while register() holds _mu waiting for it). dict.pop is
    # atomic under the GIL.
    _locks.pop(lock_id, None)


def _after_fork_in_child() -> None:
    # The reader thread did not survive the fork: start afresh on first use.
    global _fds, _mu, _start_mu
    _mu = _green.RLock()
    _start_mu = _green.allocate_lock()
    if _fds is not None:
        for fd in _fds:
            try:
                os.close(fd)
            except OSError:
                pass
    _fds = None
    _h._set_lost_fd(-1)
    if _logging:
        # The child's clients still send log records: read them here too.
        try:
            _start()
        except Exception:
            traceback.print_exc()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
