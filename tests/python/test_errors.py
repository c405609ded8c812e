"""Bad input and hostile servers: every failure is a precise exception and
nothing crashes. Only loopback addresses are ever contacted."""
from __future__ import annotations

import builtins
import math
import os
import signal
import socket
import threading
import time
from urllib.parse import quote

import pytest
import redis

import hilock
from helpers import KINDS, RedisServer, free_port, make_lock


# -- names -----------------------------------------------------------------

BAD_NAMES = [
    None, "", b"", bytearray(), "}", "}x", b"}x",
    "x" * 1025, b"x" * 1025, "é" * 513,  # 1026 bytes of UTF-8
    5, 3.0, ["a"], ("a",), object(),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", BAD_NAMES, ids=[f"name{i}" for i in range(len(BAD_NAMES))])
def test_bad_names_are_invalid_argument(kind, name, client) -> None:
    with pytest.raises(hilock.InvalidArgument) as info:
        make_lock(client, kind, name, ttl=5)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, hilock.LockError)
    assert str(info.value)
    client.ping()  # the client is unharmed


def test_name_length_limit_is_in_bytes(client, rds) -> None:
    for name in ("x" * 1024, b"y" * 1024, "é" * 512):
        lk = client.lock(name, ttl=5)
        assert lk.acquire(blocking=False)
        raw = name.encode() if isinstance(name, str) else name
        assert rds.get(b"hilock:{" + raw + b"}:lock") == lk.token.encode()
        lk.release()


def test_names_are_binary_safe(client, rds) -> None:
    """NUL and non-UTF-8 bytes are part of the name: "a\\0b" is not "a"."""
    nul = client.lock(b"a\x00b", ttl=5)
    prefix = client.lock(b"a", ttl=5)
    as_str = client.lock("a\x00b", ttl=5)
    assert nul.key == b"hilock:{a\x00b}:lock"
    assert nul.acquire(blocking=False)
    assert prefix.acquire(blocking=False), "a NUL truncated the name"
    assert as_str.acquire(blocking=False) is False  # same bytes, same lock
    assert rds.get(b"hilock:{a\x00b}:lock") == nul.token.encode()
    assert rds.get(b"hilock:{a}:lock") == prefix.token.encode()
    for lk in (nul, prefix):
        lk.release()
    for name in (b"\x00", b"\xff\xfe", bytearray(b"ba"), memoryview(b"mv"), "{tag}", "x}"):
        lk = client.lock(name, ttl=5)
        assert lk.acquire(blocking=False)
        assert rds.exists(lk.key) == 1
        lk.release()


# -- TTLs, timeouts, extensions -------------------------------------------------

BAD_SECONDS = [0, 0.0, -0.0, -1, -0.5, math.nan, math.inf, -math.inf, 1e30, 1.2e9,
               "1", b"1", None, True, False, [1]]


@pytest.mark.parametrize("kind", ["expiring", "lease"])
@pytest.mark.parametrize("ttl", BAD_SECONDS, ids=repr)
def test_bad_ttl_is_invalid_argument(kind, ttl, client) -> None:
    with pytest.raises(hilock.InvalidArgument):
        make_lock(client, kind, "ttl", ttl=ttl)
    client.ping()


def test_ttl_limits_accepted(client, rds) -> None:
    big = client.lock("big", ttl=1e9)  # below the 2**40 ms limit
    assert big.acquire(blocking=False)
    assert rds.pttl(big.key) > 999_000_000_000
    big.release()
    small = client.lock("small", ttl=0.01)  # HILOCK_TTL_MIN_MS
    assert small.acquire(blocking=False)
    assert small.ttl == 0.01


@pytest.mark.parametrize("ttl", [1e-9, 0.001, 0.009], ids=repr)
def test_a_ttl_below_the_drift_allowance_is_refused(client, rds, ttl) -> None:
    # Its validity (TTL less 1% + 2 ms) would be gone on arrival.
    for make in (client.lock, client.lease, client.rlock, client.fair_lock,
                 client.rwlock, client.sequential_lock):
        with pytest.raises(hilock.InvalidArgument, match="ttl must be 10"):
            make("tiny", ttl=ttl)
    with pytest.raises(hilock.InvalidArgument, match="ttl must be 10"):
        client.semaphore("tiny", 2, ttl=ttl)
    with pytest.raises(hilock.InvalidArgument, match="ttl must be 10"):
        client.multi_lock(["a", "b"], ttl=ttl)
    with pytest.raises(hilock.InvalidArgument, match="ttl must be 10"):
        client.segmented_lock("tiny", 2, ttl=ttl)
    assert rds.keys("*") == []


@pytest.mark.parametrize("bad", [-2, -0.001, math.nan, -math.inf, "1", b"1", True, [1]], ids=repr)
def test_bad_timeouts_are_invalid_argument(bad, client) -> None:
    lk = client.lock("timeouts", ttl=5)
    with pytest.raises(hilock.InvalidArgument):
        lk.acquire(timeout=bad)
    with pytest.raises(hilock.InvalidArgument):
        client.lock("timeouts", ttl=5, timeout=bad)
    assert lk.locked() is False
    assert lk.acquire(blocking=False)  # the object still works
    lk.release()


@pytest.mark.parametrize("huge", [1e10, 1e300], ids=repr)
def test_huge_finite_timeout(huge, client) -> None:
    lk = client.lock("huge-timeout", ttl=5)
    try:
        ok = lk.acquire(timeout=huge)
    except hilock.InvalidArgument:
        return
    assert ok is True
    lk.release()
    with client.lock("huge-timeout", ttl=5, timeout=huge) as held:
        assert held.owned()


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, 1e30, "2", None, True], ids=repr)
def test_bad_extension_is_invalid_argument(bad, client, rds) -> None:
    lk = client.lease("ext", ttl=5)
    assert lk.acquire()
    before = rds.pttl(lk.key)
    with pytest.raises(hilock.InvalidArgument):
        lk.extend(bad)
    assert lk.owned()
    assert before - 500 <= rds.pttl(lk.key) <= before
    lk.release()


# -- client arguments ------------------------------------------------------------

@pytest.mark.parametrize("opt", ["connect_timeout", "command_timeout", "reconnect"])
@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "1", None], ids=repr)
def test_bad_client_options(opt, bad, redis_url) -> None:
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(redis_url, **{opt: bad})


def test_client_option_edges(redis_url) -> None:
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(redis_url, connect_timeout=0)
    # The smallest values are accepted. A 1 ms connect (and first PING) on a
    # loaded machine may run out of time: that is a timeout, never a
    # refusal of the options.
    with hilock.Client(redis_url, reconnect=0, connect_timeout=0.001, command_timeout=0.5,
                       connect=False) as c:
        try:
            c.ping()
        except hilock.ConnectionError as e:
            assert e.code == hilock._hilock.HILOCK_ETIMEDOUT, e
    with hilock.Client(redis_url, reconnect=0, command_timeout=0.5) as c:
        c.ping()


def test_bad_urls(redis_server) -> None:
    port = redis_server.port  # even a mis-parse could only reach our own server
    bad = [
        123, b"redis://127.0.0.1", f"redis://127.0.0.1:{port}/0\0",
        f"http://127.0.0.1:{port}/0", f"127.0.0.1:{port}", "",
        "redis://127.0.0.1:0/0", "redis://127.0.0.1:65536/0", "redis://127.0.0.1:port/0",
        f"redis://127.0.0.1:{port}/db", f"redis://127.0.0.1:{port}/-1",
        f"redis://127.0.0.1:{port}/0?color=red", f"redis://:%zz@127.0.0.1:{port}/0",
        f"redis://:%00@127.0.0.1:{port}/0", f"redis://[::1:{port}/0", "unix://relative.sock",
    ]
    for url in bad:
        with pytest.raises(hilock.InvalidArgument):
            hilock.Client(url)


def test_rediss_to_a_plain_server_fails_within_the_connect_timeout(redis_server) -> None:
    t0 = time.monotonic()
    with pytest.raises(hilock.ConnectionError) as info:
        hilock.Client(f"rediss://127.0.0.1:{redis_server.port}/0", connect_timeout=0.5)
    # Bounded by the connect timeout, not a hang: 2 s over it leaves room for
    # a stalled, loaded machine.
    assert time.monotonic() - t0 < 0.5 + 2.0
    assert "TLS handshake" in str(info.value)


def test_db_in_url_is_selected(redis_server, rds) -> None:
    r3 = redis.Redis(host="127.0.0.1", port=redis_server.port, db=3)
    try:
        r3.flushdb()
        for url in (f"redis://127.0.0.1:{redis_server.port}/3",
                    f"redis://127.0.0.1:{redis_server.port}?db=3"):
            with hilock.Client(url) as c:
                lk = c.lock("in-db-3", ttl=5)
                assert lk.acquire(blocking=False)
                assert r3.get(lk.key) == lk.token.encode()
                assert rds.exists(lk.key) == 0  # not in db 0
                lk.release()
    finally:
        r3.flushdb()
        r3.close()


# -- unreachable, silent, restarted servers ---------------------------------------

def test_closed_port_is_connection_error_quickly() -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(hilock.ConnectionError) as info:
        hilock.Client(f"redis://127.0.0.1:{port}/0", connect_timeout=5.0, reconnect=10.0)
    took = time.monotonic() - t0
    # Reported at once, not after the 5 s connect timeout or retries within
    # the 10 s budget: 2.5 s leaves room for a stalled, loaded machine.
    assert took < 2.5, f"refused connection took {took:.3f} s to report"
    assert isinstance(info.value, builtins.ConnectionError)
    assert isinstance(info.value, hilock.LockError)
    assert str(port) in str(info.value)


def test_connect_false_defers_the_connection_to_the_first_call(redis_url) -> None:
    """connect=False: the constructor checks its arguments and opens no
    connection; the first call connects and raises what it met."""
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client(redis_url, connect="no")  # type: ignore[arg-type]
    with pytest.raises(hilock.InvalidArgument):
        hilock.Client("redis://127.0.0.1:notaport", connect=False)
    c = hilock.Client(f"redis://127.0.0.1:{free_port()}/0", connect=False)
    try:
        with pytest.raises(hilock.ConnectionError, match="refused"):
            c.lock("x").acquire(blocking=False)
    finally:
        c.close()
    r = hilock.Redlock([f"redis://127.0.0.1:{free_port()}/0"], "x", connect=False)
    with pytest.raises(hilock.ConnectionError):
        r.acquire(blocking=False)
    with hilock.Client(redis_url, connect=False) as c, c.lock("connect-later"):
        pass


def test_missing_unix_socket_is_connection_error(tmp_path) -> None:
    with pytest.raises(hilock.ConnectionError):
        hilock.Client(f"unix://{tmp_path}/no-such.sock")


def test_unix_socket_url(tmp_path) -> None:
    sock = tmp_path / "redis.sock"
    srv = RedisServer(extra_args=["--unixsocket", str(sock), "--unixsocketperm", "700"])
    try:
        srv.start()
        with hilock.Client(f"unix://{sock}?db=2") as c:
            lk = c.lock("over-unix", ttl=5)
            assert lk.acquire(blocking=False)
            r = redis.Redis(unix_socket_path=str(sock), db=2)
            assert r.get(lk.key) == lk.token.encode()
            r.close()
            lk.release()
    finally:
        srv.cleanup()


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.sock.settimeout(0.05)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
                self.conns.append(conn)
            except OSError:
                pass

    def close(self) -> None:
        self._stop = True
        self.thread.join(2)
        for c in self.conns:
            c.close()
        self.sock.close()


def test_a_silent_server_fails_the_constructor_within_the_connect_timeout() -> None:
    silent = SilentServer()
    try:
        # The new client's first round trip (PING, or AUTH) gets no answer.
        for url in (f"redis://127.0.0.1:{silent.port}/0",
                    f"redis://:pw@127.0.0.1:{silent.port}/0"):
            t0 = time.monotonic()
            with pytest.raises(hilock.ConnectionError) as info:
                hilock.Client(url, connect_timeout=0.3, command_timeout=0.3)
            took = time.monotonic() - t0
            # Bounded by the 0.3 s timeouts, not a hang: 2.5 s leaves room
            # for a stalled, loaded machine.
            assert took < 2.5, f"failed after {took:.3f} s"
            assert info.value.code == hilock._hilock.HILOCK_ETIMEDOUT, info.value
    finally:
        silent.close()


def test_a_server_that_stops_answering_times_out(own_server) -> None:
    with hilock.Client(own_server.url, command_timeout=0.3, reconnect=0.3) as c:
        lk = c.lock("silence", ttl=5)
        os.kill(own_server.proc.pid, signal.SIGSTOP)
        try:
            for call in (c.ping, lambda: lk.acquire(blocking=False)):
                t0 = time.monotonic()
                with pytest.raises(hilock.ConnectionError) as info:
                    call()
                took = time.monotonic() - t0
                # Bounded by the 0.3 s timeouts, not a hang: 2.5 s leaves
                # room for a stalled, loaded machine.
                assert 0.25 <= took < 2.5, f"timed out after {took:.3f} s"
                assert info.value.code == hilock._hilock.HILOCK_ETIMEDOUT, info.value
        finally:
            os.kill(own_server.proc.pid, signal.SIGCONT)


# -- authentication and ACLs --------------------------------------------------------

PASSWORD = "p@ss:w/rd %x"


@pytest.fixture(scope="module")
def password_server():
    srv = RedisServer(password=PASSWORD)
    try:
        srv.start()
        yield srv
    finally:
        srv.cleanup()


def _pw_url(port: int, password: str, user: str = "") -> str:
    return f"redis://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{port}/0"


def test_wrong_password_is_authentication_error(password_server) -> None:
    port = password_server.port
    t0 = time.monotonic()
    with pytest.raises(hilock.AuthenticationError) as info:
        hilock.Client(_pw_url(port, "wrong"), reconnect=10.0)
    # Not retried through the 10 s reconnect budget: 2.5 s leaves room for a
    # stalled, loaded machine.
    assert time.monotonic() - t0 < 2.5
    assert isinstance(info.value, hilock.ConnectionError)
    assert isinstance(info.value, builtins.ConnectionError)
    assert "WRONGPASS" in str(info.value)
    with pytest.raises(hilock.AuthenticationError):
        hilock.Client(_pw_url(port, PASSWORD, user="nobody"))


def test_missing_password_is_authentication_error(password_server) -> None:
    # Reported by the constructor: its first round trip meets NOAUTH.
    with pytest.raises(hilock.AuthenticationError) as info:
        hilock.Client(f"redis://127.0.0.1:{password_server.port}/0")
    assert "NOAUTH" in str(info.value)


def test_right_password_works(password_server) -> None:
    with hilock.Client(_pw_url(password_server.port, PASSWORD)) as c:
        c.ping()
        with c.lock("authed", ttl=5, timeout=1) as lk:
            assert lk.owned()
    with hilock.Client(_pw_url(password_server.port, PASSWORD, user="default")) as c:
        c.ping()


@pytest.fixture
def acl_users(rds):
    made = []

    def make(name: str, *rules: str) -> str:
        rds.execute_command("ACL", "SETUSER", name, "reset", *rules)
        made.append(name)
        return name

    try:
        yield make
    finally:
        for name in made:
            rds.execute_command("ACL", "DELUSER", name)


def test_noperm_command_is_no_permission_error(acl_users, redis_server, rds) -> None:
    acl_users("pinger", "on", ">pw", "~*", "+ping")
    with hilock.Client(_pw_url(redis_server.port, "pw", user="pinger")) as c:
        c.ping()  # allowed
        lk = c.lock("acl", ttl=5)
        with pytest.raises(hilock.NoPermissionError) as info:
            lk.acquire(blocking=False)
        assert isinstance(info.value, PermissionError)
        assert isinstance(info.value, hilock.RedisError)
        assert "NOPERM" in str(info.value)
        with pytest.raises(hilock.NoPermissionError):
            lk.locked()
    assert rds.keys("hilock:*") == []


def test_noperm_key_is_no_permission_error(acl_users, redis_server, rds) -> None:
    acl_users("boxed", "on", ">pw", "~app:*", "+@all")
    with hilock.Client(_pw_url(redis_server.port, "pw", user="boxed")) as c:
        with pytest.raises(hilock.NoPermissionError) as info:
            c.lock("acl-key", ttl=5).acquire(blocking=False)
        assert "NOPERM" in str(info.value)
    assert rds.keys("hilock:*") == []


# -- wrong types at the lock's keys ------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_wrongtype_at_lock_key(kind, client, rds) -> None:
    key = b"hilock:{typed}:lock"
    rds.hset(key, "field", "value")
    lk = make_lock(client, kind, "typed", ttl=5)
    with pytest.raises(hilock.WrongTypeError) as info:
        lk.acquire(blocking=False)
    msg = str(info.value)
    assert "WRONGTYPE" in msg and "wrong kind of value" in msg  # Redis's own text
    assert isinstance(info.value, hilock.RedisError)
    # Nothing was changed: no fence drawn, the hash intact.
    assert rds.exists(b"hilock:{typed}:fence") == 0
    assert rds.hgetall(key) == {b"field": b"value"}
    assert lk.token is None
    assert lk.locked() is True  # EXISTS does not care about the type
    # The operator tool clears it; then the lock works.
    assert lk.force_release() is True
    assert lk.acquire(blocking=False)
    lk.release()


def test_wrongtype_when_key_is_replaced_while_held(client, rds) -> None:
    lk = client.lock("replaced", ttl=5)
    assert lk.acquire()
    rds.delete(lk.key)
    rds.rpush(lk.key, "x")
    with pytest.raises(hilock.WrongTypeError):
        lk.owned()
    with pytest.raises(hilock.WrongTypeError):
        lk.extend(1.0)
    with pytest.raises(hilock.WrongTypeError):
        lk.release()
    assert rds.lrange(lk.key, 0, -1) == [b"x"]
    assert lk.force_release() is True
    assert lk.acquire(blocking=False)
    lk.release()


def test_damaged_fence_counter(client, rds) -> None:
    """The fence is drawn before the lock is written, so a damaged counter
    fails the grant and leaves no lock behind."""
    rds.set(b"hilock:{fc}:fence", b"not a number")
    lk = client.lock("fc", ttl=5)
    with pytest.raises(hilock.WrongTypeError) as info:
        lk.acquire(blocking=False)
    assert "hilock:{fc}:fence holds no integer" in str(info.value)
    assert rds.exists(lk.key) == 0

    rds.delete(b"hilock:{fc}:fence")
    rds.sadd(b"hilock:{fc}:fence", b"member")
    with pytest.raises(hilock.WrongTypeError):
        lk.acquire(blocking=False)
    assert rds.exists(lk.key) == 0

    rds.delete(b"hilock:{fc}:fence")
    assert lk.acquire(blocking=False)
    assert lk.fence > 10**15  # a missing counter starts at the server's clock
    lk.release()


def test_exception_hierarchy() -> None:
    E = hilock
    assert issubclass(E.LockNotOwnedError, (E.LockError, RuntimeError))
    assert issubclass(E.LockTimeout, E.LockError) and issubclass(E.LockTimeout, TimeoutError)
    assert issubclass(E.ConnectionError, E.LockError)
    assert issubclass(E.ConnectionError, builtins.ConnectionError)
    assert E.ConnectionError is not builtins.ConnectionError
    assert issubclass(E.AuthenticationError, E.ConnectionError)
    assert issubclass(E.InvalidArgument, E.LockError) and issubclass(E.InvalidArgument, ValueError)
    assert issubclass(E.RedisError, E.LockError)
    assert issubclass(E.WrongTypeError, E.RedisError)
    assert issubclass(E.NoPermissionError, E.RedisError)
    assert issubclass(E.NoPermissionError, PermissionError)
    assert issubclass(E.UnsupportedError, E.LockError)
    for name in ("LockNotOwnedError", "LockTimeout", "ConnectionError", "AuthenticationError",
                 "InvalidArgument", "RedisError", "WrongTypeError", "NoPermissionError",
                 "UnsupportedError"):
        assert issubclass(getattr(E, name), E.LockError), name


def test_errors_carry_codes(client) -> None:
    with pytest.raises(hilock.LockNotOwnedError) as info:
        client.lock("codes").release()
    assert info.value.code < 0
    with pytest.raises(hilock.ConnectionError) as info:
        hilock.Client(f"redis://127.0.0.1:{free_port()}/0")
    assert info.value.code < 0
