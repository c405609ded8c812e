"""Damaged keys, against a real redis-server: a key of a lock's name that
holds what its family never writes there (another type, or no integer where
the scripts count: fence counters and records, ticket and sequence
counters, limits, hold counts, stock, queues, wake lists) fails the call
with WrongTypeError naming that key, never with the raw error of the
command or of the script's arithmetic that met it."""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Tuple

import pytest
import redis

import hilock
from helpers import wait_for

Make = Callable[[hilock.Client], Any]

FAMILIES: Dict[str, Make] = {
    "lock": lambda c: c.lock("dk", ttl=10),
    "rlock": lambda c: c.rlock("dk", ttl=10),
    "fair": lambda c: c.fair_lock("dk", ttl=10),
    "sequential": lambda c: c.sequential_lock("dk", ttl=10),
    "segmented": lambda c: c.segmented_lock("dk", 3, ttl=10),
    "write": lambda c: c.rwlock("dk", ttl=10).write(),
    "read": lambda c: c.rwlock("dk", ttl=10).read(),
    "semaphore": lambda c: c.semaphore("dk", 2, ttl=10),
    "multi": lambda c: c.multi_lock(["dk", "dk2"], ttl=10),
}

# (family, role of hilock:{dk}:<role>, damage, the call that reads the key).
# Damage "set": a type no family writes; "text": a string where a count is
# kept. "acquire": a one-shot acquire finds it; "release": a grant taken
# before the damage is released (the release rings the wake list).
CASES: List[Tuple[str, str, str, str]] = [
    ("lock", "lock", "set", "acquire"),
    ("lock", "fence", "set", "acquire"),
    ("lock", "fence", "text", "acquire"),
    ("lock", "wake", "set", "release"),
    ("rlock", "rlock", "set", "acquire"),
    ("rlock", "fence", "set", "acquire"),
    ("rlock", "fence", "text", "acquire"),
    ("rlock", "wake", "set", "release"),
    ("fair", "fair", "set", "acquire"),
    ("fair", "fence", "set", "acquire"),
    ("fair", "fence", "text", "acquire"),
    ("fair", "fair:queue", "set", "acquire"),
    ("fair", "fair:heartbeat", "set", "acquire"),
    ("fair", "fair:ticket", "set", "acquire"),
    ("fair", "fair:ticket", "text", "acquire"),
    ("sequential", "seq:queue", "set", "acquire"),
    ("sequential", "seq:session", "set", "acquire"),
    ("sequential", "seq:holder", "set", "acquire"),
    ("sequential", "seq:counter", "set", "acquire"),
    ("sequential", "seq:counter", "text", "acquire"),
    ("sequential", "fence", "set", "acquire"),
    ("sequential", "fence", "text", "acquire"),
    ("segmented", "seg:stock", "set", "acquire"),
    ("segmented", "seg:fence", "set", "acquire"),
    ("segmented", "seg:wake", "set", "release"),
    ("write", "rw:writer", "set", "acquire"),
    ("write", "rw:readers", "set", "acquire"),
    ("write", "rw:intents", "set", "acquire"),
    ("write", "rw:admitted", "set", "acquire"),
    ("write", "rw:waiting", "set", "release"),
    ("write", "fence", "set", "acquire"),
    ("write", "fence", "text", "acquire"),
    ("read", "rw:writer", "set", "acquire"),
    ("read", "rw:readers", "set", "acquire"),
    ("read", "rw:counts", "set", "acquire"),
    ("read", "rw:intents", "set", "acquire"),
    ("read", "rw:waiting", "set", "acquire"),
    ("read", "rw:admitted", "set", "acquire"),
    ("semaphore", "permits", "set", "acquire"),
    ("semaphore", "limit", "set", "acquire"),
    ("semaphore", "limit", "text", "acquire"),
    ("semaphore", "pwake", "set", "acquire"),
    ("multi", "lock", "set", "acquire"),
    ("multi", "fence", "set", "acquire"),
    ("multi", "fence", "text", "acquire"),
    ("multi", "wake", "set", "release"),
]


def plant(rds: redis.Redis, key: str, damage: str) -> None:
    rds.delete(key)
    if damage == "set":
        rds.sadd(key, "x")
    else:
        rds.set(key, "not a number")


def assert_names(e: BaseException, key: str) -> None:
    assert isinstance(e, hilock.WrongTypeError), repr(e)
    text = str(e)
    assert key in text, text
    assert "user_script" not in text, text  # not the raw error of a script line


@pytest.mark.parametrize("family,role,damage,op", CASES,
                         ids=["-".join(c) for c in CASES])
def test_damaged_key_is_wrongtype_naming_it(client: hilock.Client, rds: redis.Redis,
                                            family: str, role: str, damage: str,
                                            op: str) -> None:
    key = "hilock:{dk}:" + role
    lk = FAMILIES[family](client)
    if op == "release":
        assert lk.acquire(blocking=False)
        plant(rds, key, damage)
        with pytest.raises(hilock.WrongTypeError) as info:
            lk.release()
    else:
        plant(rds, key, damage)
        with pytest.raises(hilock.WrongTypeError) as info:
            lk.acquire(blocking=False)
    assert_names(info.value, key)
    if damage == "set":
        assert rds.smembers(key) == {b"x"}  # left as found, for the operator
    else:
        assert rds.get(key) == b"not a number"


@pytest.mark.parametrize("family", ["rlock", "write"])
def test_damaged_hold_count_on_reentry(client: hilock.Client, rds: redis.Redis,
                                       family: str) -> None:
    """The holder's own count in the owners hash holds no integer: the
    re-entry's count fails naming the hash and the field."""
    key = "hilock:{dk}:" + ("rlock" if family == "rlock" else "rw:writer")
    lk = FAMILIES[family](client)
    assert lk.acquire(blocking=False)
    owner = next(f for f in rds.hkeys(key)
                 if not f.endswith(b":op") and f != b"fence")
    rds.hset(key, owner, "many")
    with pytest.raises(hilock.WrongTypeError) as info:
        lk.acquire(blocking=False)
    assert_names(info.value, key)
    assert f"field {owner.decode()} holds no integer" in str(info.value)


def test_damaged_segment_stock_and_fence(client: hilock.Client, rds: redis.Redis) -> None:
    seg = client.segmented_lock("dk", 1, ttl=10)
    seg.stock_init(5)
    rds.hset("hilock:{dk}:seg:stock", "0", "lots")
    with pytest.raises(hilock.WrongTypeError) as info:
        seg.acquire(blocking=False)
    assert_names(info.value, "hilock:{dk}:seg:stock")
    seg.stock_init(5)
    rds.hset("hilock:{dk}:seg:fence", "n", "high")  # the last fence drawn
    with pytest.raises(hilock.WrongTypeError) as info:
        seg.acquire(blocking=False)
    assert_names(info.value, "hilock:{dk}:seg:fence")
    rds.delete("hilock:{dk}:seg:fence")
    assert seg.acquire(blocking=False)
    rds.hset("hilock:{dk}:seg:stock", "0", "lots")
    with pytest.raises(hilock.WrongTypeError) as info:
        seg.take(1)
    assert_names(info.value, "hilock:{dk}:seg:stock")
    seg.release()


def test_damaged_fence_record_of_the_store(client: hilock.Client, rds: redis.Redis) -> None:
    st = client.fenced_store()
    record = "hilock:fence:{orders:1}"
    for damage in ("hash", "text"):
        rds.delete(record)
        if damage == "hash":
            rds.hset(record, "f", "1")
        else:
            rds.set(record, "not a number")
        for call in (lambda: st.get("orders:1", fence=5),
                     lambda: st.set("orders:1", b"v", fence=5),
                     lambda: st.fence_of("orders:1")):
            with pytest.raises(hilock.WrongTypeError) as info:
                call()
            assert_names(info.value, record)
    assert not rds.exists("orders:1")
    st.close()


def test_damaged_redlock_fence_counter(redis_url: str, rds: redis.Redis) -> None:
    """A Redlock counts a node whose keys are damaged as a failed node; the
    refusal it reports names the key."""
    for damage in ("hash", "text"):
        rds.delete("hilock:{rdk}:fence")
        if damage == "hash":
            rds.hset("hilock:{rdk}:fence", "f", "1")
        else:
            rds.set("hilock:{rdk}:fence", "not a number")
        rl = hilock.Redlock([redis_url], "rdk", ttl=10)
        with pytest.raises(hilock.NoQuorumError) as info:
            rl.acquire(blocking=False)
        text = str(info.value)
        assert "WRONGTYPE" in text and "hilock:{rdk}:fence" in text, text
        assert "user_script" not in text, text
        assert not rds.exists("hilock:{rdk}:redlock")


def fair_wake(rds: redis.Redis) -> str:
    return "hilock:{dk}:wake:" + rds.zrange("hilock:{dk}:fair:queue", 0, 0)[0].decode()


def seq_wake(rds: redis.Redis) -> str:
    (_, s), = rds.zrange("hilock:{dk}:seq:queue", -1, -1, withscores=True)
    return f"hilock:{{dk}}:seq:wake:{int(s):020d}"


# (holder, waiter, what shows the waiter queued, its wake list).
WAITERS = {
    "fair": (FAMILIES["fair"], FAMILIES["fair"],
             lambda r: r.zcard("hilock:{dk}:fair:queue") == 1, fair_wake),
    "sequential": (FAMILIES["sequential"], FAMILIES["sequential"],
                   lambda r: r.zcard("hilock:{dk}:seq:queue") == 2, seq_wake),
    "read-behind-write": (FAMILIES["write"], FAMILIES["read"],
                          lambda r: r.zcard("hilock:{dk}:rw:waiting") == 1,
                          lambda r: "hilock:{dk}:rw:rwake"),
    "write-behind-write": (FAMILIES["write"], FAMILIES["write"],
                           lambda r: r.zcard("hilock:{dk}:rw:intents") == 1,
                           lambda r: "hilock:{dk}:rw:wwake"),
}


@pytest.mark.parametrize("case", list(WAITERS))
def test_damaged_wake_list_of_a_waiter(client: hilock.Client, rds: redis.Redis,
                                       redis_url: str, case: str) -> None:
    """A release wakes the next waiter by its wake list (its own, for the
    fair and sequential locks): a damaged one is named."""
    make_holder, make_waiter, queued, wake_of = WAITERS[case]
    holder = make_holder(client)
    assert holder.acquire(blocking=False)
    other = hilock.Client(redis_url, shared_waiting=False)
    t = threading.Thread(target=lambda: _try(make_waiter(other)))
    try:
        t.start()
        wait_for(lambda: queued(rds), 10, what="the waiter to queue")
        key = wake_of(rds)
        plant(rds, key, "set")
        with pytest.raises(hilock.WrongTypeError) as info:
            holder.release()
        assert_names(info.value, key)
    finally:
        other.close()  # ends the waiter's wait
        t.join()


def _try(lk: Any) -> None:
    try:
        lk.acquire(timeout=30)
    except hilock.LockError:
        pass  # the client closed under the wait
