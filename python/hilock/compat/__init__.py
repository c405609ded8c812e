"""Other libraries' lock APIs on hilock's core, for migrating services.

:mod:`hilock.compat.redis`: redis-py's ``redis.lock.Lock`` (and
:mod:`hilock.compat.redis.asyncio` for ``redis.asyncio``), on the same
keys as redis-py's own, so a fleet can move over one process at a time
(see the "Migrating" page).
"""
