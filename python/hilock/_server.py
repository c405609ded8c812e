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
from typing import Callable, Iterable, List, Optional, Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# Ports a server of ours tries when the ones it picked were taken meanwhile.
PORT_TRIES = 5


class PortTaken(RuntimeError):
    """The server could not bind the port picked for it (after its last
    try, the launcher's caller sees this)."""


def kill(proc: Optional[subprocess.Popen[bytes]]) -> None:
    """SIGKILL proc if it still runs, and reap it."""
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def start_sentinels(procs: List[subprocess.Popen[bytes]], binary: str, conf_dir: str,
                    name: str, ports: Sequence[int], master_port: int, replica_port: int,
                    listen: Callable[[int], List[str]] = lambda port: [f"port {port}"],
                    ) -> None:
    """Start one sentinel on 127.0.0.1 per port, appending each process to
    procs as it starts (so that a failure leaves the caller the ones to
    stop); their configs and logs go to conf_dir. They watch the master
    ``name`` on master_port with a majority of them as quorum, and know each
    other and the replica on replica_port from their config, so a failover
    can start at once; down-after-milliseconds 1000, failover-timeout 3000.
    ``listen(port)`` gives the config lines that say where one listens (a
    plain port by default)."""
    ids = [f"{i + 1:040d}" for i in range(len(ports))]
    for i, port in enumerate(ports):
        conf = os.path.join(conf_dir, f"sentinel{i}.conf")
        lines = [*listen(port), "bind 127.0.0.1", f"dir {conf_dir}",
                 f"logfile {conf_dir}/sentinel{i}.log",
                 f"sentinel myid {ids[i]}",
                 f"sentinel monitor {name} 127.0.0.1 {master_port} {len(ports) // 2 + 1}",
                 f"sentinel down-after-milliseconds {name} 1000",
                 f"sentinel failover-timeout {name} 3000",
                 f"sentinel parallel-syncs {name} 1",
                 f"sentinel known-replica {name} 127.0.0.1 {replica_port}"]
        lines += [f"sentinel known-sentinel {name} 127.0.0.1 {p} {ids[j]}"
                  for j, p in enumerate(ports) if j != i]
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        procs.append(subprocess.Popen([binary, conf, "--sentinel"], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))


def command(port: int, *args: str, timeout: float = 2.0) -> bytes:
    """One command in RESP to 127.0.0.1:port on a fresh socket; the raw
    reply (b"" if the server cannot be reached)."""
    payload = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode()
        payload += b"$%d\r\n%s\r\n" % (len(b), b)
    try:
        # The file closes with the block: left to the garbage collector (the
        # recursive reader below is a reference cycle), it kept the socket's
        # descriptor open until a collection ran.
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s, \
                s.makefile("rb") as f:
            s.sendall(payload)
            out: List[bytes] = []

            def read() -> None:
                line = f.readline()
                out.append(line)
                if line[:1] == b"$" and int(line[1:]) >= 0:
                    out.append(f.read(int(line[1:]) + 2))
                elif line[:1] == b"*":
                    for _ in range(max(int(line[1:]), 0)):
                        read()

            read()
            return b"".join(out)
    except OSError:
        return b""


def server_binary() -> str:
    """The server to run: $HILOCK_REDIS_SERVER (a path or a name on PATH,
    such as valkey-server), else redis-server."""
    want = os.environ.get("HILOCK_REDIS_SERVER") or "redis-server"
    return shutil.which(want) or (want if os.sep in want else "/usr/bin/" + want)


class RedisServer:
    """One redis-server process on 127.0.0.1.

    ``with RedisServer() as srv: use(srv.url)``. ``stop()`` and ``start()``
    restart it on the same port (data is lost: no persistence).
    """

    def __init__(self, port: Optional[int] = None, password: Optional[str] = None,
                 extra_args: Iterable[str] = (), binary: Optional[str] = None,
                 pick_port: Callable[[], int] = free_port) -> None:
        self.binary = binary or server_binary()
        if not os.path.exists(self.binary):
            raise FileNotFoundError("redis-server not found; install the redis-server package")
        # A port of our choosing may be taken by another process before the
        # server binds it: start() then picks another (pick_port).
        self._pick_port = None if port else pick_port
        self.port = port or pick_port()
        self.password = password
        self.extra_args = list(extra_args)
        self.dir = tempfile.mkdtemp(prefix="hilock-redis-")
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def listen_args(self) -> List[str]:
        """The arguments that say where and how it listens: the plain port
        (and the password). A subclass listening otherwise replaces them."""
        args = ["--port", str(self.port)]
        if self.password:
            args += ["--requirepass", self.password]
        return args

    def answers(self) -> bool:
        """Whether it answers a PING yet (PONG, or NOAUTH behind a password);
        OSError while it cannot be reached."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))

    def start(self, timeout: float = 10.0) -> RedisServer:
        for _ in range(PORT_TRIES - 1):
            try:
                return self._start(timeout)
            except PortTaken:
                assert self._pick_port is not None
                self.port = self._pick_port()
        return self._start(timeout)

    def _start(self, timeout: float) -> RedisServer:
        args = [self.binary, *self.listen_args(), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--daemonize", "no", "--logfile", os.path.join(self.dir, "redis.log"),
                *self.extra_args]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if self._pick_port is not None and self._port_taken():
                    raise PortTaken(f"redis-server could not bind port {self.port} (in use); "
                                    f"see {self.dir}/redis.log")
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}; "
                                   f"see {self.dir}/redis.log")
            try:
                if self.answers():
                    return self
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not start in time")

    def _port_taken(self) -> bool:
        """Whether the server that just exited said its port (or its
        cluster bus port) was in use."""
        try:
            with open(os.path.join(self.dir, "redis.log"), errors="replace") as f:
                return "Address already in use" in f.read()
        except OSError:
            return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        kill(proc)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        try:
            return self.start()
        except BaseException:
            self.cleanup()  # its directory too
            raise

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class SentinelDeployment:
    """A master, a replica and ``sentinels`` sentinels on 127.0.0.1, for
    demos and tests of ``redis+sentinel://`` URLs.

    Sentinels are configured with down-after-milliseconds 1000 and
    failover-timeout 3000, and know each other and the replica from their
    config, so a failover can start at once. Every process is stopped by
    its PID. ``url`` is the sentinel URL of the master named ``name``.
    """

    def __init__(self, sentinels: int = 3, name: str = "mymaster",
                 binary: Optional[str] = None) -> None:
        self.name = name
        # No 5 s diskless-sync delay before a replica's first sync.
        fast = ["--repl-diskless-sync-delay", "0"]
        self.master = RedisServer(binary=binary, extra_args=fast)
        self.replica = RedisServer(binary=binary, extra_args=fast + [
            "--replicaof", "127.0.0.1", str(self.master.port)])
        self.binary = self.master.binary
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        self.sentinel_procs: List[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.name}"

    _command = staticmethod(command)

    def start(self, timeout: float = 20.0) -> SentinelDeployment:
        self.master.start()
        self.replica.start()
        deadline = time.monotonic() + timeout
        while b"master_link_status:up" not in self._command(
                self.replica.port, "INFO", "replication"):
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not sync")
            time.sleep(0.05)
        # The master must count the replica too (state=online), or a first
        # WAIT can see 0 replicas on a busy machine.
        while self._command(self.master.port, "WAIT", "1", "1000")[:2] not in (
                b":1", b":2", b":3"):
            if time.monotonic() > deadline:
                raise RuntimeError("the master never counted the replica")
            time.sleep(0.05)
        start_sentinels(self.sentinel_procs, self.binary, self.master.dir, self.name,
                        self.sentinel_ports, self.master.port, self.replica.port)
        for port in self.sentinel_ports:
            while True:
                quorum = self._command(port, "SENTINEL", "ckquorum", self.name)
                replicas = self._command(port, "SENTINEL", "replicas", self.name)
                if quorum.startswith(b"+OK") and b"master-link-status\r\n$2\r\nok" in replicas:
                    break
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"sentinel on {port} is not ready")
                time.sleep(0.05)
        return self

    def master_port(self) -> Optional[int]:
        """The port the sentinels name as master now (None if none answers)."""
        for port in self.sentinel_ports:
            reply = self._command(port, "SENTINEL", "get-master-addr-by-name",
                                  self.name, timeout=0.5)
            parts = reply.split(b"\r\n")
            if reply.startswith(b"*2") and len(parts) >= 5:
                return int(parts[4])
        return None

    def kill_master_and_fail_over(self, timeout: float = 30.0) -> float:
        """kill -9 the master; wait until the sentinels name the replica and
        it answers ROLE as master. Returns the seconds it took."""
        t0 = time.monotonic()
        self.master.stop()
        while True:
            if self.master_port() == self.replica.port:
                if b"master" in self._command(self.replica.port, "ROLE")[:20]:
                    return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"no failover within {timeout} s")
            time.sleep(0.05)

    def graceful_failover(self, timeout: float = 30.0) -> float:
        """SENTINEL FAILOVER: the replica is promoted and the master, still
        running, becomes its replica. Returns the seconds it took."""
        t0 = time.monotonic()
        reply = self._command(self.sentinel_ports[0], "SENTINEL", "FAILOVER", self.name)
        if not reply.startswith(b"+OK"):
            raise RuntimeError(f"SENTINEL FAILOVER: {reply!r}")
        while True:
            if (self.master_port() == self.replica.port
                    and b"master" in self._command(self.replica.port, "ROLE")[:20]
                    and b"slave" in self._command(self.master.port, "ROLE")[:20]):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"no failover within {timeout} s")
            time.sleep(0.05)

    def break_replication(self) -> None:
        """Cut the replica off the master: writes stay unreplicated (the
        replica retries with a password the master does not expect)."""
        self._command(self.replica.port, "CONFIG", "SET", "masterauth", "not-the-password")
        self._command(self.master.port, "CLIENT", "KILL", "TYPE", "replica")
        deadline = time.monotonic() + 5
        while b"connected_slaves:0" not in self._command(self.master.port, "INFO",
                                                         "replication"):
            if time.monotonic() > deadline:
                raise RuntimeError("the master still lists the replica")
            time.sleep(0.02)

    def stop(self) -> None:
        for proc in self.sentinel_procs:
            kill(proc)
        self.sentinel_procs = []
        self.replica.cleanup()
        self.master.cleanup()

    def __enter__(self) -> SentinelDeployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Optional[List[str]] = None) -> int:
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
