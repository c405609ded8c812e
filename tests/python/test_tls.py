"""TLS: rediss:// against redis-servers that listen only on a TLS port, with
certificates made by the openssl command (tlsutil.py).

Verification is on by default (the system's CAs plus ssl_ca_certs, and the
host name), as in redis-py; each way it can fail has its own exception and
OpenSSL's reason in the message.
"""
from __future__ import annotations

import os
import shutil
import time
import urllib.parse

import pytest

import hilock
from helpers import (
    FENCE_AHEAD,
    FORK,
    join_all,
    open_gate,
    pass_gate,
    sell_out,
    start_child,
    wait_for,
)
from history import RedisHistory, check_fences_increase, check_no_overlap
from tlsutil import TLSServer, free_port, make_pki

KINDS = ["lock", "simple_lock", "lease", "rlock", "semaphore", "fair_lock", "read", "write",
         "multi_lock", "sequential_lock", "segmented_lock"]


@pytest.fixture(scope="module")
def pki():
    p = make_pki()
    yield p
    shutil.rmtree(p.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def tls(pki):
    with TLSServer(pki) as srv:
        yield srv


@pytest.fixture(scope="module")
def mtls(pki):
    """Requires a client certificate signed by the CA."""
    with TLSServer(pki, auth_clients="yes") as srv:
        yield srv


@pytest.fixture
def tls_client(tls, pki):
    """A client of the TLS server that trusts the test CA; closed after the
    test."""
    c = hilock.Client(tls.url, ssl_ca_certs=ca(pki))
    yield c
    c.close()


def q(url: str, **params: str) -> str:
    return url + "?" + urllib.parse.urlencode(params)


def ca(pki) -> str:
    return pki.path("ca.crt")


def ping_once(url: str, **opts) -> None:
    """A client on url with opts connects and answers a ping; then it is
    closed."""
    c = hilock.Client(url, **opts)
    try:
        c.ping()
    finally:
        c.close()


# -- verification -----------------------------------------------------------------


def test_a_trusted_ca_connects_and_every_lock_works(tls, tls_client) -> None:
    r = tls.redis()
    tls_client.ping()
    with tls_client.lock("tls:one") as lk:
        assert r.get("hilock:{tls:one}:lock") == lk.token.encode()
    assert not r.exists("hilock:{tls:one}:lock")


def test_the_ca_can_be_given_in_the_url(tls, pki) -> None:
    ping_once(q(tls.url, ssl_ca_certs=ca(pki)))


def test_an_untrusted_ca_is_a_certificate_error(tls) -> None:
    # The test CA is not in the system's store.
    with pytest.raises(hilock.CertificateError, match="not accepted: self-signed"):
        hilock.Client(tls.url)


def test_a_server_signed_by_another_ca_is_refused(pki) -> None:
    with TLSServer(pki, cert="rogueserver") as srv:
        with pytest.raises(hilock.CertificateError, match="not accepted"):
            hilock.Client(srv.url, ssl_ca_certs=ca(pki))
        # Verification off: anything goes (the caller's choice).
        for c in (hilock.Client(srv.url, ssl_cert_reqs="none"),
                  hilock.Client(q(srv.url, ssl_cert_reqs="none")),
                  hilock.Client(srv.url, ssl_cert_reqs=None)):
            c.ping()
            c.close()


def test_a_host_name_mismatch_then_without_the_check_then_with_a_server_name(pki) -> None:
    with TLSServer(pki, cert="wrongname") as srv:
        with pytest.raises(hilock.CertificateError, match="mismatch"):
            hilock.Client(srv.url, ssl_ca_certs=ca(pki))
        for c in (hilock.Client(srv.url, ssl_ca_certs=ca(pki), ssl_check_hostname=False),
                  hilock.Client(q(srv.url, ssl_ca_certs=ca(pki), ssl_check_hostname="false")),
                  hilock.Client(srv.url, ssl_ca_certs=ca(pki), ssl_server_name="other.example")):
            c.ping()
            c.close()
        # The name checked is the one given, not any name.
        with pytest.raises(hilock.CertificateError, match="mismatch"):
            hilock.Client(srv.url, ssl_ca_certs=ca(pki), ssl_server_name="third.example")


def test_a_dns_name_in_the_url_is_checked_against_the_certificate(tls, pki) -> None:
    ping_once(f"rediss://localhost:{tls.port}", ssl_ca_certs=ca(pki))


def test_an_expired_certificate_is_refused(pki) -> None:
    with TLSServer(pki, cert="expired") as srv:
        with pytest.raises(hilock.CertificateError, match="expired"):
            hilock.Client(srv.url, ssl_ca_certs=ca(pki))


# -- mutual TLS ----------------------------------------------------------------------


def test_mutual_tls_without_a_client_certificate_fails_at_creation(mtls, pki) -> None:
    with pytest.raises(hilock.TLSError) as info:
        hilock.Client(mtls.url, ssl_ca_certs=ca(pki))
    assert not isinstance(info.value, hilock.CertificateError)
    assert "certificate required" in str(info.value) or "closed" in str(info.value)


def test_mutual_tls_with_a_client_certificate(mtls, pki) -> None:
    c = hilock.Client(mtls.url, ssl_ca_certs=ca(pki), ssl_certfile=pki.path("client.crt"),
                      ssl_keyfile=pki.path("client.key"))
    try:
        with c.lock("tls:mutual", ttl=5):
            pass
    finally:
        c.close()
    # The same through the URL, and an encrypted key with its passphrase.
    url = q(mtls.url, ssl_ca_certs=ca(pki), ssl_certfile=pki.path("client.crt"),
            ssl_keyfile=pki.path("client-enc.key"), ssl_password="s3cret")
    ping_once(url)


# -- bad input: each a specific error at creation ------------------------------------


def test_bad_tls_settings_are_invalid_arguments(tls, pki, tmp_path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cases = [
        (dict(ssl_ca_certs=str(tmp_path / "missing.pem")), "No such file"),
        (dict(ssl_ca_certs=str(garbage)), "ssl_ca_certs"),
        (dict(ssl_ca_certs=ca(pki), ssl_certfile=str(tmp_path / "nope.crt")), "No such file"),
        (dict(ssl_ca_certs=ca(pki), ssl_certfile=str(garbage)), "ssl_certfile"),
        (dict(ssl_ca_certs=ca(pki), ssl_certfile=pki.path("client.crt"),
              ssl_keyfile=pki.path("stray.key")), "does not match"),
        (dict(ssl_ca_certs=ca(pki), ssl_certfile=pki.path("client.crt"),
              ssl_keyfile=pki.path("client-enc.key"), ssl_password="wrong"), "ssl_keyfile"),
        (dict(ssl_keyfile=pki.path("client.key")), "needs ssl_certfile"),
        (dict(ssl_cert_reqs="sometimes"), "ssl_cert_reqs"),
        (dict(ssl_check_hostname="yes"), "ssl_check_hostname"),
        (dict(ssl_server_name=""), "ssl_server_name"),
        (dict(ssl_ca_certs=42), "ssl_ca_certs"),
    ]
    for kw, part in cases:
        with pytest.raises(hilock.InvalidArgument, match=part):
            hilock.Client(tls.url, **kw)
    for params, part in [({"ssl_cert_reqs": "sometimes"}, "ssl_cert_reqs"),
                         ({"ssl_check_hostname": "maybe"}, "ssl_check_hostname"),
                         ({"ssl_verify": "yes"}, "unknown URL query parameter"),
                         ({"ssl_ca_certs": str(tmp_path / "missing.pem")}, "No such file")]:
        with pytest.raises(hilock.InvalidArgument, match=part):
            hilock.Client(q(tls.url, **params))
    with pytest.raises(hilock.InvalidArgument, match="need a TLS URL"):
        hilock.Client(q(f"redis://127.0.0.1:{tls.port}", ssl_ca_certs=ca(pki)))


# -- the wrong protocol on either side ------------------------------------------------


def test_a_plain_client_on_a_tls_port_fails_within_the_connect_timeout(tls) -> None:
    t0 = time.monotonic()
    with pytest.raises(hilock.ConnectionError, match="rediss://"):
        hilock.Client(f"redis://127.0.0.1:{tls.port}", connect_timeout=0.5)
    # Bounded by the connect timeout, not a hang: 1.5 s over it leaves room
    # for a stalled, loaded machine.
    assert time.monotonic() - t0 < 0.5 + 1.5


def test_tls_to_a_plain_port_fails_within_the_connect_timeout(redis_server) -> None:
    t0 = time.monotonic()
    with pytest.raises(hilock.ConnectionError, match="TLS handshake"):
        hilock.Client(f"rediss://127.0.0.1:{redis_server.port}", connect_timeout=0.5)
    # Bounded by the connect timeout, not a hang (as above).
    assert time.monotonic() - t0 < 0.5 + 1.5


# -- every lock type, renewal, fork, Redlock --------------------------------------------


def _make(c, kind: str, name: str):
    if kind in ("read", "write"):
        rw = c.rwlock(name, ttl=5)
        return rw.read() if kind == "read" else rw.write()
    if kind == "semaphore":
        return c.semaphore(name, 2, ttl=5)
    if kind == "multi_lock":
        return c.multi_lock([f"{{{name}}}:a", f"{{{name}}}:b"], ttl=5)
    if kind == "segmented_lock":
        return c.segmented_lock(name, 4, ttl=5)
    if kind == "simple_lock":
        return c.simple_lock(name)
    return getattr(c, kind)(name, ttl=5)


@pytest.mark.parametrize("kind", KINDS)
def test_every_lock_type_over_tls(kind: str, tls, pki) -> None:
    c = hilock.Client(tls.url, ssl_ca_certs=ca(pki))
    other = hilock.Client(tls.url, ssl_ca_certs=ca(pki))
    try:
        lk = _make(c, kind, f"tls:{kind}")
        assert lk.acquire(timeout=2)
        if kind not in ("read", "semaphore", "segmented_lock"):
            # Exclusive: another client cannot take it meanwhile.
            assert not _make(other, kind, f"tls:{kind}").acquire(blocking=False)
        lk.release()
        again = _make(other, kind, f"tls:{kind}")
        assert again.acquire(timeout=2)
        again.release()
    finally:
        other.close()
        c.close()


def test_a_blocked_waiter_is_woken_over_tls(tls_client) -> None:
    holder = tls_client.lock("tls:wake", ttl=30)
    holder.acquire()
    got = []

    def wait() -> None:
        t0 = time.monotonic()
        with tls_client.lock("tls:wake", ttl=30, timeout=10):
            got.append(time.monotonic() - t0)

    import threading
    t = threading.Thread(target=wait)
    t.start()
    wait_for(lambda: tls_client.waiting == 1, 5, what="the waiter to wait")
    holder.release()
    t.join(10)
    assert got and got[0] < 5, got  # woken by the release, not the 30 s TTL


def test_auto_renewal_keeps_a_hold_over_tls(tls, tls_client) -> None:
    r = tls.redis()
    with tls_client.lock("tls:renew", ttl=1.0) as lk:
        time.sleep(2.5)
        assert not lk.lost
        assert r.get("hilock:{tls:renew}:lock") == lk.token.encode()


def _child_uses_the_inherited_client(c) -> None:
    with c.lock("tls:child", ttl=5):  # exits 0 only if this worked
        pass


def test_a_forked_child_opens_its_own_tls_connections(tls_client) -> None:
    held = tls_client.lock("tls:parent", ttl=10)
    held.acquire()
    p = start_child(_child_uses_the_inherited_client, tls_client)
    join_all([p], 20)  # fails unless the child exited 0
    # The parent's TLS sessions were not disturbed by the child.
    tls_client.ping()
    held.release()
    with tls_client.lock("tls:parent", ttl=5):
        pass


def test_redlock_over_tls_nodes(pki) -> None:
    servers = [TLSServer(pki).start() for _ in range(3)]
    try:
        urls = [q(s.url, ssl_ca_certs=ca(pki)) for s in servers]
        # node_timeout: the default (50 ms) is about fast failure, not TLS;
        # a loaded test machine may stall longer than that.
        with hilock.Redlock(urls, "tls:red", ttl=5, node_timeout=1.0) as rl:
            assert rl.fence > 0
            held = sum(s.redis().exists("hilock:{tls:red}:redlock") for s in servers)
            assert held == 3
        # The keyword arguments reach every node too.
        rl = hilock.Redlock([s.url for s in servers], "tls:red2", ttl=5,
                            node_timeout=1.0, ssl_ca_certs=ca(pki))
        assert rl.acquire(timeout=2)
        rl.release()
        # Without the CA, every node refuses the certificates.
        with pytest.raises(hilock.CertificateError):
            hilock.Redlock([s.url for s in servers], "tls:red3", ttl=5)
        # Many rounds on new connections: a TLS connection reads whatever
        # has arrived each time it writes, so a node's whole reply can sit
        # in its reader with nothing more to come on the socket; a round
        # that only polled then waited out node_timeout and lost the quorum
        # (about one cycle in 30 did).
        for i in range(100):
            rl = hilock.Redlock(urls, f"tls:round{i}", ttl=5, node_timeout=1.0)
            assert rl.acquire(timeout=2)
            rl.release()
            assert rl.acquire(timeout=2)
            rl.release()
    finally:
        for s in servers:
            s.cleanup()


# -- mutual exclusion across processes, over TLS ----------------------------------------

N_PROCS = 8
STOCK = 60


def _seller(url: str, name: str, gate, tag: str) -> None:
    import redis
    r = redis.Redis.from_url(url)
    lk = hilock.Client(url).lock(name, ttl=10, auto_renew=False)

    def sell(stock: int) -> None:
        time.sleep(0.001)
        r.set(f"{tag}:stock", stock - 1)

    pass_gate(gate)
    sell_out(r, lk, tag, sell)


def test_eight_processes_never_overlap_over_tls(tls, pki) -> None:
    url = q(tls.url, ssl_ca_certs=ca(pki))
    r = tls.redis()
    tag = f"tlsfire{os.getpid()}"
    r.set(f"{tag}:stock", STOCK)
    r.set(f"hilock:{{shop:{tag}}}:fence", FENCE_AHEAD)  # counts the grants
    gate = FORK.Event()
    procs = [start_child(_seller, url, f"shop:{tag}", gate, tag) for _ in range(N_PROCS)]
    open_gate(gate, procs, 60)
    hist = RedisHistory(r, f"{tag}:history").load()
    assert int(r.get(f"{tag}:stock")) == 0
    assert len(hist) == STOCK + N_PROCS
    assert check_no_overlap(hist) == len(hist)
    fences = check_fences_increase(hist)
    assert fences == list(range(fences[0], fences[0] + len(hist)))
    assert len({iv.pid for iv in hist}) >= 2


# -- Sentinel and Cluster over TLS --------------------------------------------------------


def test_sentinel_over_tls_follows_a_failover(pki) -> None:
    from tlsutil import TLSSentinel
    with TLSSentinel(pki) as d:
        c = hilock.Client(d.url(ssl_ca_certs=ca(pki)), command_timeout=2, reconnect=10)
        try:
            # Sentinel names the master by IP: the certificate's IP name matches.
            with c.lock("tls:sentinel", ttl=5) as lk:
                assert lk.fence > 0
            d.failover()
            with c.lock("tls:sentinel", ttl=5, timeout=10):
                pass
        finally:
            c.close()
        # A server name the certificates do not carry is refused on every link.
        with pytest.raises(hilock.CertificateError):
            hilock.Client(d.url(ssl_ca_certs=ca(pki), ssl_server_name="other.example"))


def test_a_tls_cluster_routes_every_slot_over_tls(pki) -> None:
    from tlsutil import TLSCluster
    with TLSCluster(pki) as cl:
        c = hilock.Client(cl.url(ssl_ca_certs=ca(pki)))
        try:
            assert c.cluster
            # Names spread over the slots of every master, each node's TLS
            # connection learned from the slot map.
            for i in range(30):
                with c.lock(f"tls:cluster:{i}", ttl=5):
                    pass
            with c.semaphore("tls:csem", 2, ttl=5):
                pass
        finally:
            c.close()


def test_asyncio_tasks_are_woken_and_granted_over_tls(tls, pki) -> None:
    """hilock.asyncio over rediss://: tasks waiting on a lock another client
    holds are rung by its releases over TLS (the shared waiting connection
    and the woken attempts, which wake the loop once written) and granted
    one at a time, with increasing fences. The holder's TTL (30 s) is far
    beyond the waits' bound: a missed ring fails the test."""
    import asyncio

    import hilock.asyncio as hla

    holder_c = hilock.Client(tls.url, ssl_ca_certs=ca(pki))
    holder = holder_c.lock("tls:aio", ttl=30, auto_renew=False)
    assert holder.acquire(blocking=False)
    fences = []

    async def main() -> None:
        c = hla.Client(tls.url, ssl_ca_certs=ca(pki))
        try:
            async def one() -> None:
                lk = c.lock("tls:aio", ttl=30, auto_renew=False)
                assert await lk.acquire(timeout=20)
                fences.append(lk.fence)
                await asyncio.sleep(0.002)
                await lk.release()

            tasks = [asyncio.ensure_future(one()) for _ in range(5)]
            while c.waiting < 5:
                await asyncio.sleep(0.005)
            await asyncio.get_running_loop().run_in_executor(None, holder.release)
            await asyncio.gather(*tasks)
        finally:
            await c.close()

    try:
        asyncio.run(main())
    finally:
        holder_c.close()
    assert len(fences) == 5 and fences == sorted(fences)


def test_a_plain_client_on_a_tls_port_is_told_on_every_path(tls) -> None:
    """The "a TLS port? use rediss://" hint is not the constructor's alone:
    a client made with connect=False hears it at its first call and at
    each reconnect, with or without AUTH and SELECT to send first; so does
    the asyncio client's runner."""
    import asyncio

    import hilock.asyncio as hla

    for url in (f"redis://127.0.0.1:{tls.port}", f"redis://:pw@127.0.0.1:{tls.port}/3"):
        c = hilock.Client(url, connect=False, reconnect=0)
        try:
            for _ in range(2):
                with pytest.raises(hilock.ConnectionError, match=r"a TLS port\? use rediss://"):
                    c.ping()
            with pytest.raises(hilock.ConnectionError, match=r"a TLS port\? use rediss://"):
                c.lock("tls:plain").acquire(blocking=False)
        finally:
            c.close()

        async def main(url: str = url) -> None:
            ac = hla.Client(url, reconnect=0)
            try:
                with pytest.raises(hilock.ConnectionError,
                                   match=r"a TLS port\? use rediss://"):
                    await ac.lock("tls:plain").acquire(blocking=False)
            finally:
                await ac.close()

        asyncio.run(main())


def test_tls_options_with_a_plain_url_are_an_error(tls, pki) -> None:
    """docs/tls.md: TLS options with a redis:// URL are an error, not a
    plain connection (here to the TLS port, where it would fail later)."""
    for opts in ({"ssl_ca_certs": ca(pki)}, {"ssl_certfile": pki.path("client.crt")},
                 {"ssl_cert_reqs": "none"}):
        name = next(iter(opts))
        with pytest.raises(hilock.InvalidArgument, match=f"{name}.*use rediss://"):
            hilock.Client(f"redis://127.0.0.1:{tls.port}", **opts)
    ping_once(f"rediss://127.0.0.1:{tls.port}", ssl_ca_certs=ca(pki))


def test_an_asyncio_client_on_a_tls_port_says_use_rediss(tls) -> None:
    """The asyncio client connects at its first operation: a plain URL on a
    TLS port fails there with the blocking constructor's hint; a refused
    connection does not get it."""
    import asyncio

    import hilock.asyncio as hla

    async def main() -> None:
        c = hla.Client(f"redis://127.0.0.1:{tls.port}", connect_timeout=0.5)
        try:
            with pytest.raises(hilock.ConnectionError, match=r"\(a TLS port\? use rediss://\)"):
                await c.lock("aio:tls-hint").acquire(blocking=False)
        finally:
            await c.close()
        refused = hla.Client(f"redis://127.0.0.1:{free_port()}", connect_timeout=0.5,
                             reconnect=0)
        try:
            with pytest.raises(hilock.ConnectionError) as info:
                await refused.lock("aio:tls-hint").acquire(blocking=False)
            assert "rediss://" not in str(info.value)
        finally:
            await refused.close()

    asyncio.run(main())
