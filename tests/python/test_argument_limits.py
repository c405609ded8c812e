"""Arguments past every limit raise InvalidArgument, never OverflowError.

Found by tests/fuzz/fuzz_python.py (atheris): numbers too large for a C
int or size_t reached the extension, and seconds too large for a float
(an int of 400 digits) or for milliseconds (1e306 * 1000 is infinite)
overflowed in the conversion.
"""
from __future__ import annotations

from typing import Any

import pytest

import hilock

HUGE_INT = 10 ** 400  # past any float
HUGE_FLOAT = 1e306  # finite, but infinite in milliseconds


@pytest.mark.parametrize("seconds", [HUGE_INT, HUGE_FLOAT, 2.0 ** 63, -HUGE_INT])
def test_ttl_past_every_limit_is_invalid(redis_url: str, seconds: Any) -> None:
    with hilock.Client(redis_url) as c:
        for make in (lambda: c.lock("limits", ttl=seconds),
                     lambda: c.lock("limits", max_hold=seconds),
                     lambda: c.semaphore("limits", 2, ttl=seconds),
                     lambda: c.fenced_store(linger=seconds)):
            with pytest.raises(hilock.InvalidArgument):
                make()


@pytest.mark.parametrize("option", ["connect_timeout", "command_timeout", "reconnect"])
@pytest.mark.parametrize("seconds", [HUGE_INT, HUGE_FLOAT])
def test_client_timeouts_past_every_limit_are_invalid(redis_url: str, option: str,
                                                       seconds: Any) -> None:
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(redis_url, **{option: seconds})


@pytest.mark.parametrize("n", [2 ** 31, 2 ** 64, HUGE_INT])
def test_wait_replicas_past_a_c_int_is_invalid(redis_url: str, n: int) -> None:
    with pytest.raises(hilock.InvalidArgument, match="wait_replicas"):
        hilock.Client(redis_url, wait_replicas=n)


@pytest.mark.parametrize("n", [2 ** 64, HUGE_INT])
def test_store_max_value_past_a_size_t_is_invalid(redis_url: str, n: int) -> None:
    with hilock.Client(redis_url) as c:
        with pytest.raises(hilock.InvalidArgument, match="max_value"):
            c.fenced_store(max_value=n)


def test_a_wait_past_every_float_is_no_limit(redis_url: str) -> None:
    # timeout: like float("inf"), no limit (the lock is free: no wait).
    with hilock.Client(redis_url) as c:
        lk = c.lock("limits:wait", ttl=5, timeout=HUGE_INT)
        assert lk.timeout is None
        assert lk.acquire(timeout=HUGE_INT)
        lk.release()
        with pytest.raises(hilock.InvalidArgument):
            c.lock("limits:wait", timeout=float("nan"))
