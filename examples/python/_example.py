"""Where the examples find Redis: $HILOCK_URL or $REDIS_URL, else a private
redis-server on a free loopback port, stopped when the example ends."""
import contextlib
import os

from hilock._server import RedisServer


@contextlib.contextmanager
def redis_url():
    url = os.environ.get("HILOCK_URL") or os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    with RedisServer() as srv:
        os.environ["HILOCK_URL"] = srv.url
        try:
            yield srv.url
        finally:
            del os.environ["HILOCK_URL"]
