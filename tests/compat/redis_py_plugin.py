"""pytest plugin: redis-py's own lock tests against hilock.compat.redis.

redis-py's tests/test_lock.py picks its lock class in one place, the
module-level name ``Lock`` that its ``get_lock`` fixture method passes as
``lock_class`` (tests/test_asyncio/test_lock.py likewise). This plugin
rebinds that name, in the collected test modules only, to hilock's compat
class; nothing else of the tests changes. The session fails if no module
was rebound (the tests would otherwise run redis-py's own class).
"""
from __future__ import annotations

_rebound = {}


def _targets():
    import hilock.compat.redis as sync_compat

    targets = {"tests.test_lock": sync_compat.Lock}
    try:
        import hilock.compat.redis.asyncio as async_compat
    except ImportError:
        pass
    else:
        targets["tests.test_asyncio.test_lock"] = async_compat.Lock
    return targets


def pytest_collection_modifyitems(session, config, items):
    targets = _targets()
    for item in items:
        module = getattr(item, "module", None)
        name = getattr(module, "__name__", "")
        cls = targets.get(name)
        if cls is not None:
            module.Lock = cls
            _rebound[name] = f"{cls.__module__}.{cls.__qualname__}"
    if items and not _rebound:
        raise RuntimeError("no redis-py lock test module was collected")


def pytest_terminal_summary(terminalreporter):
    for name, cls in sorted(_rebound.items()):
        terminalreporter.write_line(f"hilock: {name}.Lock is {cls}")
