"""Argument checks shared by the lock classes."""
from __future__ import annotations

import math
import threading
from typing import Optional, Union

from .errors import InvalidArgument

TTL_MAX_MS = 1 << 40
NAME_MAX = 1024

Name = Union[str, bytes, bytearray, memoryview]


def name_bytes(name: Name) -> bytes:
    """A lock name as bytes (str is UTF-8 encoded)."""
    if isinstance(name, str):
        return name.encode("utf-8", "surrogatepass")
    if isinstance(name, (bytes, bytearray, memoryview)):
        return bytes(name)
    raise InvalidArgument(f"lock name must be str or bytes, not {type(name).__name__}")


def seconds_to_ms(value: float, what: str) -> int:
    """Positive float seconds to whole ms (rounded up), within TTL_MAX_MS."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a number of seconds, not {type(value).__name__}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise InvalidArgument(f"{what} must be a finite number of seconds > 0, got {value!r}")
    ms = math.ceil(value * 1000)
    if ms > TTL_MAX_MS:
        raise InvalidArgument(f"{what} of {value!r} s is above the limit of {TTL_MAX_MS // 1000} s")
    return ms


def wait_seconds(value: Optional[float], what: str = "timeout") -> Optional[float]:
    """A wait: None for no limit, else a finite number >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a number of seconds or None")
    if math.isnan(value) or value < 0:
        raise InvalidArgument(f"{what} must be >= 0 seconds or None, got {value!r}")
    if math.isinf(value) or value > threading.TIMEOUT_MAX:
        return None  # beyond any wait a thread can make: no limit
    return float(value)
