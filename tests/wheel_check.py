"""Run by tests/wheel_check.sh with the Python of a fresh virtualenv that
has only the hilock wheel installed:

    python -I tests/wheel_check.py CHANGELOG.md core/include/hilock/version.h

Checks, printing each: hilock is imported from that virtualenv; its
extension module needs no libhiredis, libssl or libcrypto (ldd) and no
libhiredis is mapped once a lock was taken and released on a private
redis-server; the version of the wheel's metadata, hilock.__version__, the
C library's hilock_version() and hilock_version_string(), version.h and
CHANGELOG.md's newest heading are one; the wheel declares the pytest
plugin's entry point. Exits non-zero on the first failed check.
"""
from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        raise SystemExit(1)


def changelog_version(path: Path) -> str:
    """The version the newest heading names: '## 0.2.0' or '## 0.2.0 (unreleased)'."""
    first = re.search(r"^## +(.*)$", path.read_text(), re.M)
    m = re.match(r"v?(\d+\.\d+\.\d+)\b", first.group(1)) if first else None
    if not m:
        raise SystemExit(f"FAIL the newest heading of {path} names no version: "
                         f"{first.group(0) if first else None!r}")
    return m.group(1)


def header_version(path: Path) -> str:
    text = path.read_text()
    parts = [re.search(rf"#define HILOCK_VERSION_{p} (\d+)", text) for p in
             ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts if m)


def main() -> None:
    changelog, header = Path(sys.argv[1]), Path(sys.argv[2])
    import hilock
    from hilock import _hilock
    from hilock._server import RedisServer

    where = Path(hilock.__file__).resolve()
    check(Path(sys.prefix).resolve() in where.parents and sys.prefix != sys.base_prefix,
          f"hilock imported from the virtualenv: {where.parent}")
    ext = _hilock.__file__
    ldd = subprocess.run(["ldd", ext], capture_output=True, text=True, check=True).stdout
    for line in ldd.strip().splitlines():
        print("     " + line.strip())
    check("libhiredis" not in ldd, "the extension needs no libhiredis (ldd above)")
    check("libssl" not in ldd and "libcrypto" not in ldd,
          "the extension needs no libssl or libcrypto (ldd above)")

    with RedisServer() as srv, hilock.Client(srv.url) as client:
        lk = client.lock("wheel-check", ttl=10.0)
        check(lk.acquire(timeout=5.0), f"lock taken on {srv.url} (fence {lk.fence})")
        lk.release()
        check(not lk.owned(), "lock released")
    maps = Path("/proc/self/maps").read_text()
    check("libhiredis" not in maps, "no libhiredis mapped in this process")

    versions = {
        "wheel metadata": metadata.version("hilock"),
        "hilock.__version__": hilock.__version__,
        "hilock_version_string()": _hilock.hilock_version_string().decode(),
        "hilock_version()": "{}.{}.{}".format(*(
            (_hilock.hilock_version() >> s) & 0xFF for s in (16, 8, 0))),
        "version.h": header_version(header),
        "CHANGELOG.md": changelog_version(changelog),
    }
    check(len(set(versions.values())) == 1,
          "one version: " + ", ".join(f"{k} {v}" for k, v in versions.items()))

    eps = metadata.distribution("hilock").entry_points
    check(any(ep.group == "pytest11" and ep.name == "hilock.pytest_plugin"
              and ep.value == "hilock.pytest_plugin" for ep in eps),
          "the wheel declares the pytest11 entry point hilock.pytest_plugin")


if __name__ == "__main__":
    main()
