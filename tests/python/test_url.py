"""Connection URLs from Python: passwords never shown (messages, repr, str,
the ``url`` attribute, Redlock's ``nodes``), schemes in any case, and TLS
options refused with a URL that is not a TLS one (the blocking and asyncio
clients)."""
from __future__ import annotations

import asyncio

import pytest

import hilock
import hilock.asyncio as hla
from hilock._util import redact_url

SECRET = "TopSecret1"

# A URL with secrets, and how it is shown.
SHOWN = [
    (f"redis://:{SECRET}@127.0.0.1:1/0", "redis://:***@127.0.0.1:1/0"),
    (f"redis://me:{SECRET}@127.0.0.1:1/2", "redis://me:***@127.0.0.1:1/2"),
    (f"redis://{SECRET}@127.0.0.1:1", "redis://***@127.0.0.1:1"),
    (f"unix://:{SECRET}@/tmp/no.sock?db=1&password={SECRET}",
     "unix://:***@/tmp/no.sock?db=1&password=***"),
    (f"redis+sentinel://u:{SECRET}@127.0.0.1:1,127.0.0.1:2/m?sentinel_password={SECRET}"
     "&sentinel_user=s",
     "redis+sentinel://u:***@127.0.0.1:1,127.0.0.1:2/m?sentinel_password=***&sentinel_user=s"),
    (f"rediss://127.0.0.1:1?ssl_password={SECRET}&ssl_cert_reqs=none",
     "rediss://127.0.0.1:1?ssl_password=***&ssl_cert_reqs=none"),
    (f"REDIS://:{SECRET}@127.0.0.1:1", "REDIS://:***@127.0.0.1:1"),
]


@pytest.mark.parametrize("url,shown", SHOWN)
def test_client_shows_no_password(url: str, shown: str) -> None:
    c = hilock.Client(url, connect=False)
    try:
        assert c.url == shown
        for text in (repr(c), str(c), c.url):
            assert SECRET not in text
        assert shown in repr(c)
    finally:
        c.close()
    assert SECRET not in repr(c)


def test_asyncio_client_shows_no_password() -> None:
    async def main() -> None:
        c = hla.Client(f"redis://me:{SECRET}@127.0.0.1:1/0")
        try:
            assert c.url == "redis://me:***@127.0.0.1:1/0"
            assert SECRET not in repr(c) and SECRET not in str(c)
        finally:
            await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("url", [f"reddis://:{SECRET}@h/0", f"reddis://me:{SECRET}@h/0",
                                 f"Redis+Sentinal://:{SECRET}@s1,s2/m",
                                 f"redis+sentinal://s/m?sentinel_password={SECRET}",
                                 f"http://h?password={SECRET}", f":{SECRET}@h"])
def test_a_bad_url_error_shows_no_password(url: str) -> None:
    with pytest.raises(hilock.InvalidArgument, match="URL must start with") as e:
        hilock.Client(url)
    assert SECRET not in str(e.value) and "***" in str(e.value)
    with pytest.raises(hilock.InvalidArgument) as e:
        hilock.Redlock([url, "redis://127.0.0.1:1"], "x", connect=False)
    assert SECRET not in str(e.value)


def test_connection_errors_show_no_password(redis_url: str) -> None:
    host_port = redis_url.split("://", 1)[1].split("/")[0]
    # The session server has no password: AUTH is refused.
    for url in (f"redis://:{SECRET}@{host_port}/0", f"redis://me:{SECRET}@{host_port}/0"):
        with pytest.raises(hilock.LockError) as e:
            hilock.Client(url)
        assert SECRET not in str(e.value)
    with pytest.raises(hilock.ConnectionError) as e:
        hilock.Client(f"redis://:{SECRET}@127.0.0.1:1/0", connect_timeout=0.5)
    assert SECRET not in str(e.value)


def test_redlock_nodes_show_no_password() -> None:
    urls = [f"redis://:{SECRET}@127.0.0.1:1", f"redis://me:{SECRET}@127.0.0.1:2/3"]
    rl = hilock.Redlock(urls, "x", connect=False)
    assert rl.nodes == ("redis://:***@127.0.0.1:1", "redis://me:***@127.0.0.1:2/3")
    assert SECRET not in repr(rl)
    with pytest.raises(hilock.InvalidArgument) as e:
        hilock.Redlock([f"redis://:{SECRET}@h\n", "redis://127.0.0.1:1"], "x")
    assert SECRET not in str(e.value)


@pytest.mark.parametrize("url,shown", SHOWN + [
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("redis://u:@h", "redis://u:@h"),
    ("redis://:a/b@h/0", "redis://:***@h/0"),
    ("REDIS:/:s@h", "REDIS:/:***@h"),
    ("", ""),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_schemes_in_any_case(redis_url: str) -> None:
    scheme, rest = redis_url.split("://", 1)
    for s in (scheme.upper(), "Redis"):
        with hilock.Client(f"{s}://{rest}") as c:
            c.ping()
            with c.lock("case") as lk:
                assert lk.fence


@pytest.mark.parametrize("opt", [{"ssl_ca_certs": "/ca.pem"}, {"ssl_ca_path": "/etc/ca"},
                                 {"ssl_certfile": "/c.pem"}, {"ssl_keyfile": "/k.pem"},
                                 {"ssl_password": "pw"}, {"ssl_cert_reqs": "none"},
                                 {"ssl_cert_reqs": None}, {"ssl_check_hostname": False},
                                 {"ssl_server_name": "redis.test"}])
def test_tls_options_with_a_plain_url_are_refused(redis_url: str, opt: dict) -> None:
    name = next(iter(opt))
    for url in (redis_url, "unix:///tmp/no.sock", "redis+cluster://127.0.0.1:1"):
        with pytest.raises(hilock.InvalidArgument, match=f"{name}.*rediss://"):
            hilock.Client(url, connect=False, **opt)
        with pytest.raises(hilock.InvalidArgument, match=f"{name}.*rediss://"):
            hla.Client(url, **opt)
