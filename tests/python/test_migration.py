"""Migrating from redis-py's Lock: ``client.lock(name, compat="redis-py")``.

hilock's lock in redis-py's layout is the same lock as redis-py's
``redis.lock.Lock`` of that name: the key is the name, holding the token
with its PX expiry. These tests run redis-py's own Lock (the installed
redis package) against it on a real server: each excludes the other,
each's release frees the name for the other, and a fleet of processes
running both on one name never overlaps (history checker).
"""
from __future__ import annotations

import os
import threading
import time

import pytest
import redis
from redis.lock import Lock as RedisPyLock

import hilock
from helpers import FORK, counts_by_pid, kill_child, open_gate, pass_gate, sell_out, start_child
from history import RedisHistory, check_no_overlap

N_EACH = 3            # processes per library in the mixed fleet
STOCK = 60
LOCK_TTL = 10.0       # far longer than any critical section here
RUN_TIMEOUT = 60.0    # the whole fleet, on a loaded 2-core machine


def test_layout_is_redis_pys(client: hilock.Client, rds: redis.Redis) -> None:
    """The key is the bare name (no prefix), holding the token with a PX
    expiry; there is no fence key and no fence."""
    lk = client.lock("orders:42", ttl=5.0, compat="redis-py", auto_renew=False)
    assert lk.acquire(timeout=0)
    try:
        assert rds.get("orders:42") == lk.token.encode()
        assert 0 < rds.pttl("orders:42") <= 5000
        assert lk.fence is None
        assert sorted(rds.keys("*")) == [b"orders:42"]
        # redis-py's Lock sees the name taken, and its owner check fails.
        peer = RedisPyLock(rds, "orders:42", timeout=5)
        assert not peer.acquire(blocking=False)
        assert peer.locked()
        lk.extend(10.0, replace=True)  # redis-py's extend(replace_ttl=True)
        assert 5000 < rds.pttl("orders:42") <= 10000
    finally:
        lk.release()
    assert rds.exists("orders:42") == 0


def test_bad_compat_and_no_lock_delay(client: hilock.Client) -> None:
    with pytest.raises(hilock.InvalidArgument):
        client.lock("n", compat="redisson")  # type: ignore[arg-type]
    with pytest.raises(hilock.InvalidArgument):
        client.rlock("n", compat="redis-py")  # type: ignore[arg-type]
    with pytest.raises(hilock.InvalidArgument):
        client.lock("n", compat="redis-py", lock_delay=1.0)


def test_redis_py_holder_excludes_and_its_release_frees(client: hilock.Client,
                                                          rds: redis.Redis) -> None:
    """A name held by redis-py's Lock is not granted to hilock; redis-py's
    own release (which publishes nothing) lets the waiting hilock lock in
    (its waiters look again at least every 100 ms)."""
    peer = RedisPyLock(rds, "jobs", timeout=30)
    assert peer.acquire(blocking=False)
    lk = client.lock("jobs", ttl=5.0, compat="redis-py")
    assert not lk.acquire(timeout=0)
    got = []
    t = threading.Thread(target=lambda: got.append(lk.acquire(timeout=30)))
    t.start()
    deadline = time.monotonic() + 20
    while client.waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    peer.release()
    t.join(30)
    assert got == [True]
    assert rds.get("jobs") == lk.token.encode()
    lk.release()


def test_hilock_release_publishes_and_redis_py_takes_over(client: hilock.Client,
                                                          rds: redis.Redis) -> None:
    """hilock's release deletes only its own token and tells hilock's
    waiters on the name's channel; redis-py's Lock then takes the name."""
    lk = client.lock("jobs", ttl=5.0, compat="redis-py")
    assert lk.acquire(timeout=0)
    ps = rds.pubsub()
    ps.subscribe("hilock:redis-py:{jobs}")
    assert ps.get_message(timeout=5)["type"] == "subscribe"
    peer = RedisPyLock(rds, "jobs", timeout=30)
    assert not peer.acquire(blocking=False)
    lk.release()
    msg = ps.get_message(timeout=5)
    assert msg is not None and msg["channel"] == b"hilock:redis-py:{jobs}"
    ps.close()
    assert peer.acquire(blocking=False)
    # hilock's release checks the owner: a second one deletes nothing.
    with pytest.raises(hilock.LockNotOwnedError):
        lk.release()
    assert peer.owned()
    peer.release()


class _RedisPySeller:
    """redis-py's Lock with the acquire(timeout=) and fence sell_out uses."""

    fence = None

    def __init__(self, r: redis.Redis, name: str) -> None:
        self.lock = RedisPyLock(r, name, timeout=LOCK_TTL, sleep=0.01)

    def acquire(self, timeout: float) -> bool:
        return bool(self.lock.acquire(blocking_timeout=timeout))

    def release(self) -> None:
        self.lock.release()


def _seller(url: str, lib: str, name: str, gate, tag: str) -> None:
    r = redis.Redis.from_url(url)
    if lib == "redis-py":
        lk = _RedisPySeller(r, name)
    else:
        lk = hilock.Client(url).lock(name, ttl=LOCK_TTL, compat="redis-py")

    def sell(stock: int) -> None:
        time.sleep(0.001)  # widen the race window of the read-modify-write
        r.set(f"{tag}:stock", stock - 1)

    pass_gate(gate)
    sell_out(r, lk, tag, sell, f"{lib}: acquire timed out")


def test_mixed_fleet_counts_exactly(rds: redis.Redis, redis_url: str) -> None:
    """3 processes on redis-py's Lock and 3 on hilock's, one name: every
    unit is sold once and no two critical sections overlap."""
    tag = "mixed"
    rds.set(f"{tag}:stock", STOCK)
    gate = FORK.Event()
    procs = [start_child(_seller, redis_url, lib, "shop", gate, tag)
             for lib in ("redis-py", "hilock") * N_EACH]
    open_gate(gate, procs, RUN_TIMEOUT)
    sold = counts_by_pid(rds, f"{tag}:sold")
    hist = RedisHistory(rds, f"{tag}:history").load()
    assert len(sold) == 2 * N_EACH
    assert sum(sold.values()) == STOCK, sold
    assert int(rds.get(f"{tag}:stock")) == 0
    assert len(hist) == STOCK + 2 * N_EACH
    assert check_no_overlap(hist) == len(hist)
    # Both libraries held it.
    libs = {pid: lib for pid, lib in zip((p.pid for p in procs),
                                         ("redis-py", "hilock") * N_EACH)}
    assert {libs[iv.pid] for iv in hist} == {"redis-py", "hilock"}
    assert rds.exists("shop") == 0


def _hold_forever(url: str, lib: str, name: str, ttl: float, path: str) -> None:
    """Take the name and hold it until killed (writing path once held)."""
    if lib == "redis-py":
        lk = RedisPyLock(redis.Redis.from_url(url), name, timeout=ttl)
        assert lk.acquire(blocking_timeout=20)
    else:
        # auto_renew=False: the lock lapses at its TTL once its holder dies,
        # as redis-py's does (with renewal it lapses at the TTL too, since
        # the renewal thread dies with the process).
        lk = hilock.Client(url).lock(name, ttl=ttl, compat="redis-py", auto_renew=False)
        assert lk.acquire(timeout=20)
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(1)


def _wait_file(path: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.01)


@pytest.mark.parametrize("holder", ["redis-py", "hilock"])
def test_killed_peer_holder_is_taken_over_at_its_ttl(holder: str, client: hilock.Client,
                                                    rds: redis.Redis, redis_url: str,
                                                    tmp_path) -> None:
    """A holder of either library killed while holding: the other library
    gets the name once the holder's TTL runs out, not before."""
    path = str(tmp_path / "held")
    p = start_child(_hold_forever, redis_url, holder, "killed", 3.0, path)
    try:
        _wait_file(path)
        kill_child(p)
    finally:
        kill_child(p)
    assert rds.exists("killed") == 1  # still held: the TTL has not run out
    if holder == "redis-py":
        lk = client.lock("killed", ttl=5.0, compat="redis-py")
        assert lk.acquire(timeout=30)
        assert rds.get("killed") == lk.token.encode()
        lk.release()
    else:
        peer = RedisPyLock(rds, "killed", timeout=5, sleep=0.01)
        assert peer.acquire(blocking_timeout=30)
        assert peer.owned()
        peer.release()


def test_force_release_deletes_a_redis_py_holders_lock(client: hilock.Client,
                                                       rds: redis.Redis) -> None:
    """The operator tool on redis-py's layout deletes the key, whoever holds
    it, and says whether it was held."""
    peer = RedisPyLock(rds, "stuck", timeout=30)
    assert peer.acquire(blocking=False)
    lk = client.lock("stuck", ttl=5.0, compat="redis-py")
    assert lk.force_release() is True
    assert rds.exists("stuck") == 0
    assert lk.force_release() is False
    assert not peer.owned()


# -- hilock.compat.redis.Lock: redis-py's API on hilock's core --------------


def test_compat_lock_takes_the_callers_token_and_excludes_redis_py(rds: redis.Redis) -> None:
    from hilock.compat.redis import Lock

    lk = Lock(rds, "orders", timeout=10)
    assert lk.acquire(blocking=False, token="caller-chosen")
    assert rds.get("orders") == b"caller-chosen" == lk.local.token
    peer = RedisPyLock(rds, "orders", timeout=10)
    assert not peer.acquire(blocking=False)
    assert lk.owned() and lk.locked() and not peer.owned()
    lk.release()
    assert lk.local.token is None and rds.get("orders") is None
    # No expiry, as redis-py's timeout=None: the key has no TTL.
    forever = Lock(rds, "orders")
    assert forever.acquire(blocking=False)
    assert rds.pttl("orders") == -1
    with pytest.raises(redis.exceptions.LockError):
        forever.extend(1)
    forever.release()


def test_compat_lock_is_granted_again_after_its_grant_lapsed(rds: redis.Redis) -> None:
    """A grant that expired (the holder overran its timeout) is forgotten
    at the next acquire, which is granted again."""
    from hilock.compat.redis import Lock

    lk = Lock(rds, "lapse", timeout=0.05)
    assert lk.acquire(blocking=False)
    deadline = time.monotonic() + 20
    while rds.exists("lapse") and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lk.release()
    assert lk.acquire(blocking=False)
    assert rds.get("lapse") == lk.local.token
    lk.release()


def test_compat_lock_extend_and_reacquire_are_redis_pys(rds: redis.Redis) -> None:
    from hilock.compat.redis import Lock

    lk = Lock(rds, "ext", timeout=10)
    assert lk.acquire(blocking=False)
    assert lk.extend(10)
    assert 10000 < rds.pttl("ext") <= 20000
    assert lk.extend(5, replace_ttl=True)
    assert rds.pttl("ext") <= 5000
    assert lk.reacquire()
    assert 5000 < rds.pttl("ext") <= 10000
    rds.set("ext", "someone else")
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lk.extend(1)
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lk.reacquire()


def test_compat_lock_waiter_is_woken_by_a_redis_py_release(rds: redis.Redis) -> None:
    from hilock.compat.redis import Lock, client_for

    peer = RedisPyLock(rds, "w", timeout=30)
    assert peer.acquire(blocking=False)
    lk = Lock(rds, "w", timeout=30)
    got = []
    t = threading.Thread(target=lambda: got.append(lk.acquire(blocking_timeout=30)))
    t.start()
    deadline = time.monotonic() + 20
    while client_for(rds).waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    peer.release()
    t.join(30)
    assert got == [True]
    # Each thread has its own token (thread_local=True, as redis-py): the
    # grant is the waiting thread's, not this one's.
    assert lk.local.token is None
    with pytest.raises(redis.exceptions.LockError):
        lk.release()
    rds.delete("w")


def test_set_token_is_for_redis_py_layout_only(client: hilock.Client) -> None:
    from hilock import _hilock

    lk = client.lock("plain", ttl=5.0)
    with pytest.raises(hilock.InvalidArgument):
        _hilock.hilock_lock_set_token(lk._h, b"mine")
    py = client.lock("py", ttl=5.0, compat="redis-py")
    with pytest.raises(hilock.InvalidArgument):
        _hilock.hilock_lock_set_token(py._h, b"x" * 64)
    with pytest.raises(hilock.InvalidArgument):
        _hilock.hilock_lock_set_token(py._h, b"a\0b")


def test_asyncio_compat_lock_shares_redis_pys_lock(redis_url: str) -> None:
    """hilock.compat.redis.asyncio.Lock against redis.asyncio's own Lock on
    one name: the caller's token, exclusion both ways, a waiting acquire
    (not blocking the loop) granted after the peer's release, extend."""
    import asyncio

    import redis.asyncio as aredis
    from redis.asyncio.lock import Lock as AsyncRedisPyLock

    from hilock.compat.redis.asyncio import Lock, client_for

    async def main() -> None:
        r = aredis.Redis.from_url(redis_url)
        await r.flushall()
        try:
            lk = Lock(r, "a", timeout=10)
            peer = AsyncRedisPyLock(r, "a", timeout=10)
            assert await lk.acquire(blocking=False, token="mine")
            assert await r.get("a") == b"mine"
            assert not await peer.acquire(blocking=False)
            await lk.release()
            assert await peer.acquire(blocking=False)
            waiter = asyncio.ensure_future(lk.acquire(blocking_timeout=30))
            deadline = time.monotonic() + 20
            while client_for(r).waiting == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert not waiter.done()
            await peer.release()
            assert await waiter
            assert await lk.owned() and not await peer.owned()
            assert await lk.extend(10)
            assert 10000 < await r.pttl("a") <= 20000
            await lk.release()
            async with Lock(r, "a") as forever:
                assert await r.pttl("a") == -1
                with pytest.raises(redis.exceptions.LockError):
                    await forever.reacquire()
            assert not await lk.locked()
        finally:
            await r.aclose()

    asyncio.run(main())


def test_redis_py_layout_on_a_cluster(cluster) -> None:
    """On Redis Cluster the key is the bare name on the node that masters
    its slot (the wake channel hashes to the same slot, so the scripts
    never cross slots), with or without a hash tag in the name."""
    from cluster import key_slot

    with hilock.Client(cluster.url, connect_timeout=1.0, command_timeout=5.0,
                       reconnect=15.0) as c:
        for m in cluster.masters():
            for name in (cluster.name_on(m, "py-"), "a{" + cluster.name_on(m, "t-") + "}b"):
                assert cluster.owner(key_slot(name.encode())) == m
                lk = c.lock(name, ttl=5.0, compat="redis-py")
                assert lk.acquire(timeout=5)
                node = cluster.conn(m)
                try:
                    assert node.get(name) == lk.token.encode()
                    peer = RedisPyLock(node, name, timeout=5)
                    assert not peer.acquire(blocking=False)
                    lk.release()
                    assert node.exists(name) == 0
                    assert peer.acquire(blocking=False)
                    assert not lk.acquire(timeout=0)
                    peer.release()
                finally:
                    node.close()


def test_hilock_waiter_listens_on_the_names_channel(client: hilock.Client,
                                                    other_client: hilock.Client,
                                                    rds: redis.Redis) -> None:
    """A hilock waiter on a name in redis-py's layout is subscribed to the
    channel a hilock release publishes on (so it is woken at once, not at
    its next 100 ms look), and gets the lock after that release."""
    holder = client.lock("chan", ttl=30.0, compat="redis-py")
    assert holder.acquire(timeout=0)
    lk = other_client.lock("chan", ttl=30.0, compat="redis-py")
    got = []
    t = threading.Thread(target=lambda: got.append(lk.acquire(timeout=30)))
    t.start()
    deadline = time.monotonic() + 20
    while other_client.waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    channel = "hilock:redis-py:{chan}"
    while dict(rds.pubsub_numsub(channel)).get(channel.encode(), 0) == 0:
        assert time.monotonic() < deadline, "the waiter never subscribed"
        time.sleep(0.01)
    holder.release()
    t.join(30)
    assert got == [True]
    lk.release()


def test_compat_lock_takes_the_clients_connection_settings(tmp_path) -> None:
    """The compat lock connects where the redis-py client does: here a unix
    socket, db 3, with a password (redis-py's own keys, in that db)."""
    from helpers import RedisServer
    from hilock.compat.redis import Lock, client_for

    sock = tmp_path / "redis.sock"
    srv = RedisServer(extra_args=["--unixsocket", str(sock), "--unixsocketperm", "700",
                                  "--requirepass", "p@ss word"])
    try:
        srv.start()
        r = redis.Redis(unix_socket_path=str(sock), db=3, password="p@ss word")
        lk = Lock(r, "over-unix", timeout=5)
        assert lk.acquire(blocking=False)
        assert r.get("over-unix") == lk.local.token
        assert RedisPyLock(r, "over-unix").acquire(blocking=False) is False
        assert "***" in client_for(r).url  # the password is masked
        lk.release()
        r.close()
    finally:
        srv.cleanup()


def test_compat_lock_over_mutual_tls() -> None:
    """TLS settings come from the redis-py client: the CA it verifies the
    server with and its client certificate (the server requires one)."""
    import shutil

    from hilock.compat.redis import Lock, client_for
    from tlsutil import TLSServer, make_pki

    pki = make_pki()
    try:
        with TLSServer(pki, auth_clients="yes") as srv:
            r = redis.Redis(host="127.0.0.1", port=srv.port, ssl=True,
                            ssl_ca_certs=pki.path("ca.crt"),
                            ssl_certfile=pki.path("client.crt"),
                            ssl_keyfile=pki.path("client.key"))
            lk = Lock(r, "tls", timeout=5)
            assert lk.acquire(blocking=False)
            assert client_for(r).url.startswith("rediss://")
            assert r.get("tls") == lk.local.token
            assert not RedisPyLock(r, "tls").acquire(blocking=False)
            lk.release()
            r.close()
    finally:
        shutil.rmtree(pki.dir, ignore_errors=True)


def test_compat_lock_extras_renew_and_report_a_loss(rds: redis.Redis) -> None:
    """auto_renew=True resets the TTL while held (seen as the PTTL going
    up again); on_lost is called once another value replaces the token."""
    from hilock.compat.redis import Lock

    lost = threading.Event()
    lk = Lock(rds, "renewed", timeout=3, auto_renew=True, on_lost=lambda _lk: lost.set())
    assert lk.acquire(blocking=False)
    deadline = time.monotonic() + 20
    low = rds.pttl("renewed")
    while True:
        # The PTTL only falls until a renewal resets it to the full TTL.
        now = rds.pttl("renewed")
        if now > low:
            break
        low = now
        assert time.monotonic() < deadline, "never renewed"
        time.sleep(0.05)
    assert lk.owned()
    rds.set("renewed", "taken over", px=30000)
    assert lost.wait(20), "on_lost was never called"
    assert not lk.owned()
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lk.release()


def test_a_grant_in_redis_pys_layout_is_handed_over(client: hilock.Client,
                                                    rds: redis.Redis) -> None:
    """export() and adopt() keep the layout: the adopted lock names the
    bare key and releases it with the grant's token."""
    lk = client.lock("handed", ttl=10.0, compat="redis-py")
    assert lk.acquire(timeout=0)
    token = lk.token
    adopted = client.adopt(lk.export())  # the exporter gives its grant up
    assert adopted.token == token
    assert rds.get("handed") == adopted.token.encode()
    adopted.release()
    assert rds.exists("handed") == 0
