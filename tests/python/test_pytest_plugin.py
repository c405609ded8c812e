"""hilock's pytest plugin (hilock.pytest_plugin) as a user's project meets
it: a small project of its own, run by pytest in a subprocess, takes a
lock on the server of ``hilock_redis_url``; when that pytest session ends
its redis-server process and directory are gone.

Two ways to load the plugin: the ``pytest11`` entry point an installed
hilock declares (from pyproject.toml; when hilock is not installed, found
through PYTHONPATH, a stand-in distribution on the subprocess's path
declares the same entry point), and a conftest's ``pytest_plugins`` list,
which must not load it a second time when it is installed.
"""
from __future__ import annotations

import json
import os
import re
from importlib import metadata
from pathlib import Path

import pytest

from helpers import RedisServer

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = "hilock.pytest_plugin"

USER_TEST = '''
import json, os
import hilock
from hilock._server import command

def test_lock(hilock_redis_url, hilock_redis_server):
    with hilock.Client(hilock_redis_url) as c:
        lk = c.lock("orders:42", ttl=10)
        assert lk.acquire(timeout=5)
        assert lk.fence > 0
        lk.release()
        with c.lock("orders:42", ttl=10, timeout=5):
            pass
    with open(os.environ["SEEN_FILE"], "w") as f:
        json.dump({"pid": hilock_redis_server.pid, "dir": hilock_redis_server.dir,
                   "url": hilock_redis_url}, f)

def test_leave_a_key(hilock_redis_server):
    assert command(hilock_redis_server.port, "SET", "left", "1") == b"+OK\\r\\n"

def test_clean(hilock_redis_clean_url, hilock_redis_url, hilock_redis_server):
    assert hilock_redis_clean_url == hilock_redis_url
    assert command(hilock_redis_server.port, "DBSIZE") == b":0\\r\\n"
'''


def _declared_entry_point() -> str:
    """The pytest11 entry point line pyproject.toml declares for hilock."""
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r"^\[project\.entry-points\.pytest11\]\n(?:#.*\n)*(.+)$", text, re.M)
    assert m, "pyproject.toml declares no pytest11 entry point"
    name, value = (part.strip().strip('"') for part in m.group(1).split("="))
    assert name == PLUGIN and value == PLUGIN, m.group(1)
    return f"{name} = {value}"


def _installed() -> bool:
    eps = metadata.entry_points()
    group = (eps.select(group="pytest11") if hasattr(eps, "select")
             else eps.get("pytest11", []))  # Python < 3.10
    return any(ep.name == PLUGIN for ep in group)


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Run the user's project in a pytest subprocess; its tests must pass.
    What the session's server was (pid, dir, url)."""
    pytester.makepyfile(test_user=USER_TEST)
    seen = pytester.path / "seen.json"
    monkeypatch.setenv("SEEN_FILE", str(seen))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=3)
    info: dict = json.loads(seen.read_text())
    return info


def _assert_gone(info: dict) -> None:
    """The server process of an ended session is no longer running, and its
    directory is removed."""
    pid = info["pid"]
    assert isinstance(pid, int) and pid > 0
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        cmdline = b""
    assert b"redis-server" not in cmdline, f"redis-server {pid} still runs"
    assert not os.path.exists(info["dir"]), info["dir"]


def test_entry_point(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    line = _declared_entry_point()
    if not _installed():
        # The package is found through PYTHONPATH: a stand-in distribution
        # declares the entry point pyproject.toml declares.
        site = pytester.path / "site"
        dist = site / "hilock_entry_point-0.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hilock-entry-point\n"
                                       "Version: 0\n")
        (dist / "entry_points.txt").write_text(f"[pytest11]\n{line}\n")
        path = os.environ.get("PYTHONPATH")
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), path])))
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    _assert_gone(_run(pytester, monkeypatch))


def test_conftest_pytest_plugins(pytester: pytest.Pytester,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed, the entry point has loaded the module before the conftest
    names it: it must be found registered, not registered twice (pluggy
    would raise). Not installed, the conftest is what loads it."""
    pytester.makeconftest(f"pytest_plugins = [{PLUGIN!r}]\n")
    _assert_gone(_run(pytester, monkeypatch))


def test_redis_server_is_the_plugins(redis_server: RedisServer,
                                     hilock_redis_server: RedisServer,
                                     hilock_redis_url: str) -> None:
    """hilock's own suite runs on the plugin's server."""
    assert redis_server is hilock_redis_server
    assert hilock_redis_url == redis_server.url


def test_command_closes_its_socket_at_once() -> None:
    """hilock._server.command (the fixtures' one-shot RESP call) closes its
    socket before it returns, not when the garbage collector runs: its
    reader is a reference cycle, which kept one descriptor per call open."""
    import gc
    import os

    from hilock._server import RedisServer, command

    with RedisServer() as srv:
        gc.disable()
        try:
            before = len(os.listdir("/proc/self/fd"))
            for _ in range(5):
                assert command(srv.port, "PING").startswith(b"+PONG")
            assert len(os.listdir("/proc/self/fd")) == before
        finally:
            gc.enable()


def test_a_port_taken_before_the_server_binds_it_is_replaced() -> None:
    """A port picked free can be taken by another process before the server
    binds it (parallel tests start servers all the time): the launcher
    picks another instead of failing. A port the caller chose is kept,
    and its refusal is the caller's to see."""
    import socket

    from hilock._server import RedisServer, free_port

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        picks = [port]

        def pick() -> int:
            return picks.pop() if picks else free_port()

        with RedisServer(pick_port=pick) as srv:
            assert not picks and srv.port != port
            assert srv.answers()
        with pytest.raises(RuntimeError, match="exited"):
            with RedisServer(port=port):
                pass


def test_loading_the_plugin_leaves_the_c_core_unloaded() -> None:
    """The plugin is loaded into every pytest run where hilock is
    installed, whether its tests use hilock or not: importing it (and so
    the hilock package) must not load the C core and the lock classes.
    The package's names still resolve on first use."""
    import subprocess
    import sys

    code = ("import sys, hilock.pytest_plugin\n"
            "print(sorted(m for m in sys.modules if m.startswith('hilock')))\n"
            "import hilock\n"
            "assert hilock.Client.__name__ == 'Client' and hilock.__version__\n"
            "assert issubclass(hilock.LockTimeout, hilock.LockError)\n"
            "assert 'lock' in dir(hilock) and hilock._hilock.HILOCK_OK == 0\n"
            "import typing\n"
            "assert typing.get_type_hints(hilock.lock)['return'] is hilock.Lock\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=os.environ)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['hilock', 'hilock._server', 'hilock.pytest_plugin']"
