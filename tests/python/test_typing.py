"""The package's types, as a user's type checker sees them: mypy --strict on
small programs that use the public API. ``with client.fair_lock(...) as lk``
must give a FairLock (``lk.ticket``), not the base class, and the checks must
fail where the program is wrong, so they can fail.

Runs mypy on the hilock that this interpreter imports (a built tree on
PYTHONPATH or the installed package), with the stubs of hilock._hilock that
the build generated. tests/run.sh installs mypy, so there it is never skipped.
"""
from __future__ import annotations

import os
import re
import site
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

import hilock

pytest.importorskip("mypy")

GOOD = '''
from typing import List, Optional

import hilock
from hilock import LockBase


def on_lock_lost(lk: hilock.Lock) -> None:
    print(lk.name)


def on_any_lost(lk: LockBase) -> bool:
    return lk.lost


def use(client: hilock.Client) -> List[Optional[int]]:
    out: List[Optional[int]] = []
    with client.fair_lock("x", ttl=5.0) as lk:
        reveal_type(lk)
        ticket: Optional[int] = lk.ticket
        token: Optional[str] = lk.token
        out += [ticket, lk.fence, lk.waiters()]
        print(token, lk.heartbeat + lk.validity)
    with client.lock("y", on_lost=on_lock_lost) as plain:
        reveal_type(plain)
        plain.extend(1.0)
        out.append(plain.fence)
    with hilock.lock("y", ttl=5.0, timeout=1.0, on_lost=on_any_lost) as module_lock:
        reveal_type(module_lock)
    with client.segmented_lock("stock", 4) as seg:
        reveal_type(seg)
        taken: int = seg.take(2, partial=True)
        everyone: int = seg.segments_held()
        out += [taken, everyone, seg.segment, seg.stock()]
    with client.semaphore("pool", 2) as sem:
        reveal_type(sem)
        mine: int = sem.held_count()
        permit: Optional[str] = sem.permit_id
        out += [mine, sem.available(), sem.fence]
        print(permit)
    rw = client.rwlock("catalog", on_lost=on_any_lost)
    with rw.read() as r:
        reveal_type(r)
        out.append(r.hold_count())
    with rw.write() as w:
        reveal_type(w)
        out.append(w.fence)
    with client.multi_lock(["a", "b"]) as ml:
        fences = ml.fence
        if fences is not None:
            out.append(sum(fences.values()))
        print(ml.names, ml.missing)
    with client.sequential_lock("seq") as sq, client.rlock("re") as rl:
        out += [sq.sequence, rl.hold_count()]
    return out


with hilock.Client("redis://127.0.0.1:6379/0") as c:
    reveal_type(c)
    use(c)
'''

REVEALED = ["hilock._fair.FairLock", "hilock._lock.Lock", "hilock._lock.Lock",
            "hilock._seglock.SegmentedLock", "hilock._semaphore.Semaphore",
            "hilock._rwlock.ReadLock", "hilock._rwlock.WriteLock", "hilock._client.Client"]

# Each line marked "# E: code" must fail with that error code, and no other
# line may fail.
BAD = '''
from typing import Optional

import hilock


def on_lock_lost(lk: hilock.Lock) -> None:
    pass


def use(client: hilock.Client) -> None:
    with client.fair_lock("x") as lk:
        lk.no_such_method()  # E: attr-defined
        ticket: str = lk.ticket  # E: assignment
        fence: Optional[int] = lk.fence
    with client.lock("y") as plain:
        print(plain.ticket)  # E: attr-defined
    with client.semaphore("pool", 2) as sem:
        sem.take(1)  # E: attr-defined
    client.fair_lock("z", on_lost=on_lock_lost)  # E: arg-type
    client.lock("z", auto_renw=False)  # E: call-arg
    ok: int = client.rwlock("z").acquire()  # E: attr-defined
    print(ticket, fence, ok)
'''


def _expected(source: str) -> Set[Tuple[int, str]]:
    return {(n, m.group(1)) for n, line in enumerate(source.splitlines(), 1)
            for m in [re.search(r"# E: ([\w-]+)", line)] if m}


def _errors(output: str, path: str) -> Set[Tuple[int, str]]:
    return {(int(m.group(1)), m.group(2)) for m in
            re.finditer(rf"^{re.escape(path)}:(\d+): error: .*\[([\w-]+)\]$", output, re.M)}


@pytest.fixture(scope="module")
def mypy_env(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """The environment that makes mypy check the hilock imported here."""
    parent = Path(hilock.__file__).parent.parent  # not resolved: a built tree links
    if not (parent / "hilock" / "_hilock.pyi").exists():
        pytest.fail(f"no generated stubs (_hilock.pyi) next to {hilock.__file__}")
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    site_dirs = [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
    if not any(parent.samefile(p) for p in site_dirs if p.is_dir()):
        env["MYPYPATH"] = str(parent)  # mypy finds site-packages by itself
    env["MYPY_CACHE_DIR"] = str(tmp_path_factory.mktemp("mypy-cache"))
    return env


def run_mypy(tmp_path: Path, env: Dict[str, str], source: str) -> Tuple[int, str]:
    (tmp_path / "snippet.py").write_text(textwrap.dedent(source))
    # No configuration file: the snippet alone, under --strict.
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", "mypy.ini",
         "--no-color-output", "--no-pretty", "snippet.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def test_public_api_type_checks_under_strict(tmp_path: Path, mypy_env: Dict[str, str]) -> None:
    rc, out = run_mypy(tmp_path, mypy_env, GOOD)
    assert rc == 0, out
    revealed: List[str] = re.findall(r'Revealed type is "([^"]+)"', out)
    assert revealed == REVEALED, out


def test_misuse_fails_type_checking(tmp_path: Path, mypy_env: Dict[str, str]) -> None:
    rc, out = run_mypy(tmp_path, mypy_env, BAD)
    assert rc == 1, out
    assert _errors(out, "snippet.py") == _expected(BAD), out
