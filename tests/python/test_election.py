"""Leader election against a real redis-server, with real processes: one
leader at a time (a history checker over the leaders' fenced writes), a
killed or stopped leader replaced within its TTL and its late writes
refused by the fenced store, observers that see every leader in order,
and the asyncio API."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from typing import Any, List

import pytest

import hilock
from helpers import join_all, kill_child, pop_report, start_child, wait_for
from history import RedisHistory, check_fences_increase, check_no_overlap
from test_cli import start_cli

TTL = 1.0


def _campaigner(url: str, rounds: int) -> None:
    """Lead `rounds` times; each lead is a fenced write to the campaign's
    store and one recorded window, then a resignation."""
    import redis

    r = redis.Redis.from_url(url)
    client = hilock.Client(url)
    store = client.fenced_store()
    hist = RedisHistory(r, "history")
    election = client.election("el:race", ttl=5)
    for _ in range(rounds):
        with election.campaign(str(os.getpid()), timeout=60) as lead:
            start = time.monotonic()
            assert election.leader() == (str(os.getpid()), lead.fence)
            store.bind(lead.fence).incrby("leader-writes")
            end = time.monotonic()
        hist.record(start, end, lead.fence)


def test_five_processes_one_leader_at_a_time(rds, redis_url: str) -> None:
    procs = [start_child(_campaigner, redis_url, 20) for _ in range(5)]
    join_all(procs, 120)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    hist = RedisHistory(rds, "history").load()
    assert len(hist) == 100
    assert check_no_overlap(hist) == 100
    check_fences_increase(hist)  # fences strictly increase in lead order
    # Every write was accepted: each came with a fence above the last.
    with hilock.Client(redis_url) as c:
        last = max(iv.fence or 0 for iv in hist)
        assert int(c.fenced_store().get("leader-writes", fence=last) or 0) == 100


def test_the_checker_catches_two_leaders_at_once(rds) -> None:
    """The control run: without the election, the checker fails."""
    hist = RedisHistory(rds, "control")
    hist.record(1.0, 2.0, 10, pid=1)
    hist.record(1.5, 2.5, 11, pid=2)
    with pytest.raises(AssertionError):
        check_no_overlap(hist.load())


def _lead_and_report(url: str, name: str) -> None:
    """Lead name (renewed by the thread), report the fence, hold forever."""
    import redis

    r = redis.Redis.from_url(url)
    lead = hilock.Client(url).election(name, ttl=TTL).campaign("first", timeout=10)
    r.rpush("ready", json.dumps({"fence": lead.fence, "pid": os.getpid()}))
    if r.blpop(["write"], timeout=60) is not None:
        # Woken after a successor led: this late write must be refused.
        try:
            hilock.Client(url).fenced_store().set("data", "old leader", fence=lead.fence)
            r.rpush("late", "accepted")
        except hilock.StaleFence:
            r.rpush("late", "refused")
    time.sleep(3600)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["kill", "stop"])
def test_a_lost_leader_is_replaced_and_its_late_writes_refused(
        rds, client: hilock.Client, redis_url: str, sig: int) -> None:
    name = f"el:lost-{sig}"
    p = start_child(_lead_and_report, redis_url, name)
    try:
        first = pop_report(rds, "ready")
        assert client.election(name).leader() == ("first", first["fence"])
        os.kill(p.pid, sig)
        standby = client.election(name, ttl=TTL)
        # Generous: the lead lapses TTL (1 s) after the leader's last renewal.
        with standby.campaign("second", timeout=30) as lead:
            assert lead.fence > first["fence"]
            client.fenced_store().set("data", "new leader", fence=lead.fence)
            if sig == signal.SIGSTOP:
                rds.rpush("write", 1)
                os.kill(p.pid, signal.SIGCONT)
                assert rds.blpop(["late"], timeout=30)[1] == b"refused"
            assert standby.leader() == ("second", lead.fence)
        assert client.fenced_store().get("data", fence=lead.fence) == b"new leader"
    finally:
        if sig == signal.SIGSTOP:
            os.kill(p.pid, signal.SIGCONT)
        kill_child(p, signal.SIGKILL)


def _observer(url: str, name: str, count: int) -> None:
    """Observe name and push each (value, fence) seen, until count."""
    import redis

    r = redis.Redis.from_url(url)
    election = hilock.Client(url).election(name)
    r.rpush("observing", 1)
    seen = 0
    for value, fence in election.observe(timeout=60):
        r.rpush("seen", json.dumps([value, fence]))
        seen += 1
        if seen == count:
            return


def test_an_observer_in_another_process_sees_every_leader_in_order(
        rds, client: hilock.Client, redis_url: str) -> None:
    p = start_child(_observer, redis_url, "el:watch", 6)
    try:
        assert rds.blpop(["observing"], timeout=10)
        expected: List[Any] = []
        for i in range(3):
            election = client.election("el:watch", ttl=5)
            with election.campaign(f"leader-{i}") as lead:
                expected.append([f"leader-{i}", lead.fence])
                # Each change is held until the observer saw it: none is
                # coalesced away, so all must come, in order.
                wait_for(lambda: rds.llen("seen") == len(expected), 10, what="the observer")
                lead.proclaim(f"leader-{i}-moved")
                expected.append([f"leader-{i}-moved", lead.fence])
                wait_for(lambda: rds.llen("seen") == len(expected), 10, what="the observer")
        p.join(10)
        assert p.exitcode == 0
        assert [json.loads(x) for x in rds.lrange("seen", 0, -1)] == expected
    finally:
        kill_child(p, signal.SIGKILL)


def test_observe_coalesces_fast_changes_but_ends_on_the_latest(
        client: hilock.Client) -> None:
    observer = client.election("el:fast").observe(timeout=0.5)
    lead = client.election("el:fast", ttl=5).campaign("v0")
    try:
        assert next(observer) == ("v0", lead.fence)
        for i in range(1, 50):
            lead.proclaim(f"v{i}")
        seen = list(observer)  # ends when nothing changed for 0.5 s
        assert seen and seen[-1] == ("v49", lead.fence)
    finally:
        lead.resign()


def test_standbys_sleep_until_the_resignation(rds, client: hilock.Client) -> None:
    leader = client.election("el:queue", ttl=30).campaign("a")
    got: List[int] = []
    standby = client.election("el:queue", ttl=30)

    def wait() -> None:
        with standby.campaign("b", timeout=30) as lead:
            got.append(lead.fence)

    t = threading.Thread(target=wait)
    calls = rds.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    t.start()
    wait_for(lambda: client.waiting == 1, 10, what="the standby to wait")
    time.sleep(0.5)
    # A standby behind a 30 s lead attempts once and sleeps: no polling.
    after = rds.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    assert after - calls <= 2, after - calls
    leader.resign()
    t.join(10)
    assert got and got[0] > leader.fence


def test_lost_lead_raises_at_the_block_end_and_calls_back(
        rds, client: hilock.Client) -> None:
    told: List[Any] = []
    election = client.election("el:lose", ttl=5, on_lost=told.append)
    with pytest.raises(hilock.LockLost):
        with election.campaign("me") as lead:
            rds.delete("hilock:{el:lose}:elect")  # an operator deletes the lead
            with pytest.raises(hilock.LockNotOwnedError):
                lead.proclaim("again")
            assert lead.lost
    # The callback runs on a hilock thread: it may come just after the block.
    wait_for(lambda: told == [election], 10, what="on_lost")
    assert election.leader() is None


def test_bad_input_and_wrong_types(rds, client: hilock.Client) -> None:
    election = client.election("el:bad", ttl=5)
    with pytest.raises(hilock.InvalidArgument):
        election.campaign(b"x" * (64 * 1024 + 1))
    with pytest.raises(hilock.InvalidArgument):
        election.campaign(42)  # type: ignore[arg-type]
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError):
            client.election("el:bad", ttl=bad)
    with pytest.raises(ValueError):
        client.election("", ttl=5)
    # Binary values and names round-trip; a value that is not UTF-8 is bytes.
    with client.election(b"el:\x00bin", ttl=5).campaign(b"\xff\x00") as lead:
        assert client.election(b"el:\x00bin").leader() == (b"\xff\x00", lead.fence)
    # The largest value.
    with election.campaign("v" * 65536) as lead:
        assert election.leader() == ("v" * 65536, lead.fence)
    rds.set("hilock:{el:wrong}:elect", "a string")
    with pytest.raises(hilock.WrongTypeError):
        client.election("el:wrong", ttl=5).campaign("x", timeout=1)
    with pytest.raises(hilock.WrongTypeError):
        client.election("el:wrong").leader()


def test_asyncio_campaign_leader_observe_and_cancel(rds, redis_url: str) -> None:
    import hilock.asyncio as ha

    async def main() -> None:
        async with ha.Client(redis_url) as c:
            election = c.election("el:async", ttl=5)
            seen: List[Any] = []

            async def watch() -> None:
                async for change in c.election("el:async").observe(timeout=5):
                    seen.append(change)
                    if change[0] == "b":
                        return

            watcher = asyncio.ensure_future(watch())
            async with await election.campaign("a") as lead:
                assert await election.leader() == ("a", lead.fence)
                await lead.proclaim("b")
                # A standby task that is cancelled while it waits leaves
                # nothing behind.
                standby = c.election("el:async", ttl=5)
                task = asyncio.ensure_future(standby.campaign("c"))
                await asyncio.sleep(0.3)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert await election.leader() == ("b", lead.fence)
            await asyncio.wait_for(watcher, 10)
            # Changes faster than the reader may be coalesced, never the
            # last one.
            assert seen in ([("a", lead.fence), ("b", lead.fence)], [("b", lead.fence)]), seen
            assert await election.leader() is None
            assert not await standby.owned()

    asyncio.run(main())
    assert rds.keys("*el:async*elect*") == []


def test_cli_elect_runs_the_command_only_while_leading(
        rds, client: hilock.Client, redis_url: str) -> None:
    # The first leader's command waits for "go"; a second hilock elect waits
    # to lead, then runs its own command with the higher fence.
    script = ('import os, redis, sys; r = redis.Redis.from_url(os.environ["HILOCK_URL"]); '
              'r.rpush("running", os.environ["HILOCK_FENCE"] + " " + sys.argv[1]); '
              'r.blpop(["go"], 30) if sys.argv[1] == "first" else None')
    first = start_cli(redis_url, "elect", "el:cli", "--value", "host-1", "--ttl", "5", "--",
                 sys.executable, "-c", script, "first")
    try:
        fence1, who = rds.blpop(["running"], timeout=30)[1].decode().split()
        assert who == "first"
        assert client.election("el:cli").leader() == ("host-1", int(fence1))
        status = start_cli(redis_url, "status", "el:cli")
        out, _ = status.communicate(timeout=30)
        assert "type:       election" in out and "leader:     host-1" in out, out
        second = start_cli(redis_url, "elect", "el:cli", "--value", "host-2", "--ttl", "5", "--",
                      sys.executable, "-c", script, "second")
        wait_for(lambda: client.election("el:cli").leader() is not None, 10)
        assert rds.blpop(["running"], timeout=0.5) is None  # a standby runs nothing
        rds.rpush("go", 1)
        fence2, who = rds.blpop(["running"], timeout=30)[1].decode().split()
        assert who == "second" and int(fence2) > int(fence1)
        assert first.wait(30) == 0 and second.wait(30) == 0
        # Both resigned: nobody leads, and a busy election is exit 75.
        assert client.election("el:cli").leader() is None
        holder = client.election("el:cli", ttl=5).campaign("x")
        busy = start_cli(redis_url, "elect", "el:cli", "--timeout", "0.2", "--", "true")
        _, err = busy.communicate(timeout=30)
        assert busy.returncode == 75 and "another leads" in err
        holder.resign()
    finally:
        for p in (first,):
            if p.poll() is None:
                p.kill()


def test_inspect_and_force_release_of_an_election(rds, client: hilock.Client) -> None:
    election = client.election("el:ops", ttl=5)
    standby = client.election("el:ops", ttl=5)
    lead = election.campaign("v")
    info = client.inspect("el:ops")
    assert (info.type, info.held, info.holder, info.fence) == (
        "election", True, election.token, lead.fence)
    assert 0 < info.ttl <= 5
    got: List[int] = []
    t = threading.Thread(target=lambda: got.append(standby.campaign("w", timeout=30).fence))
    t.start()
    wait_for(lambda: client.waiting == 1, 10, what="the standby to wait")
    # The operator's release ends the lead and wakes the standby at once.
    assert client.force_release("el:ops")
    t.join(10)
    assert got and got[0] > lead.fence
    assert standby.leader() == ("w", got[0])
    standby.release()
    assert client.inspect("el:ops").type == "none"


def test_a_cancelled_async_observe_frees_its_handle_after_the_step(
        client: hilock.Client, redis_url: str) -> None:
    """An executor thread cannot be interrupted: an async iteration
    cancelled while its step waits leaves the C handle to that step, which
    frees it when it returns (freed under it before: a use after free that
    the suite under AddressSanitizer reports)."""
    import hilock.asyncio as ha

    async def main() -> None:
        async with ha.Client(redis_url) as c:
            async def watch() -> None:
                async for _ in c.election("el:cancel").observe():
                    pass

            task = asyncio.ensure_future(watch())
            await asyncio.sleep(0.3)  # the step waits on an executor thread
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The step ends within its second; then a change is observed
            # again by a new iteration, and nothing was freed twice.
            await asyncio.sleep(1.2)
            seen = c.election("el:cancel").observe(timeout=5)
            lead = client.election("el:cancel", ttl=5).campaign("v")
            assert await seen.__anext__() == ("v", lead.fence)
            await seen.aclose()
            lead.resign()

    asyncio.run(main())
