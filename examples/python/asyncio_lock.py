"""hilock.asyncio: 200 tasks of one event loop update a shared counter
under one lock, plus a task-owned reentrant lock.

The counter update is a read-modify-write with an await in the middle: it
is only correct because the lock admits one task at a time. Waiting tasks
hold no thread and no connection of their own.

    python examples/python/asyncio_lock.py

Uses $HILOCK_URL/$REDIS_URL, or starts a private redis-server."""
import asyncio

import redis

import hilock.asyncio
from _example import redis_url


async def main(url: str) -> None:
    r = redis.Redis.from_url(url)
    r.set("demo:counter", 0)
    client = hilock.asyncio.Client(url)

    async def bump() -> None:
        async with client.lock("demo:counter", ttl=10, timeout=30):
            value = int(r.get("demo:counter"))
            await asyncio.sleep(0)  # other tasks run here; none gets the lock
            r.set("demo:counter", value + 1)

    await asyncio.gather(*(bump() for _ in range(200)))
    print("counter after 200 locked updates:", int(r.get("demo:counter")))

    rl = client.rlock("demo:reentrant", ttl=10)
    async with rl:
        async with rl:  # the same task re-enters
            other = asyncio.ensure_future(rl.acquire(blocking=False))
            print("another task while this one holds it:", await other)
    await client.close()


with redis_url() as url:
    asyncio.run(main(url))
