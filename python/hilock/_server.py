"""A private redis-server for demos and tests.

Starts ``redis-server`` on a free loopback port with no persistence, in its
own directory, and stops it by PID. Not part of the public API.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Iterable, Optional


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server process on 127.0.0.1.

    ``with RedisServer() as srv: use(srv.url)``. ``stop()`` and ``start()``
    restart it on the same port (data is lost: no persistence).
    """

    def __init__(self, port: Optional[int] = None, password: Optional[str] = None,
                 extra_args: Iterable[str] = (), binary: Optional[str] = None) -> None:
        self.binary = binary or shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(self.binary):
            raise FileNotFoundError("redis-server not found; install the redis-server package")
        self.port = port or free_port()
        self.password = password
        self.extra_args = list(extra_args)
        self.dir = tempfile.mkdtemp(prefix="hilock-redis-")
        self.proc: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 10.0) -> "RedisServer":
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--daemonize", "no", "--logfile", os.path.join(self.dir, "redis.log")]
        if self.password:
            args += ["--requirepass", self.password]
        args += self.extra_args
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}; "
                                   f"see {self.dir}/redis.log")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    reply = s.recv(64)
                    if reply.startswith((b"+PONG", b"-NOAUTH")):
                        return self
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not start in time")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def main(argv: Optional[list] = None) -> int:
    """``python -m hilock._server CMD [ARGS...]``: run CMD with $HILOCK_URL
    pointing at a private redis-server, stopped when CMD exits."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m hilock._server CMD [ARGS...]", file=sys.stderr)
        return 2
    with RedisServer() as srv:
        env = dict(os.environ, HILOCK_URL=srv.url)
        return subprocess.call(args, env=env)


if __name__ == "__main__":
    raise SystemExit(main())
