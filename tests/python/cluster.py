"""A local Redis Cluster for the tests: 3 masters and 3 replicas on loopback.

Each node is a private ``redis-server --cluster-enabled yes`` (helpers'
RedisServer, stopped by PID); ``redis-cli --cluster create --cluster-replicas
1`` joins them. Start it once per test module: it takes a few seconds.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from typing import Iterator, List, Optional

import redis

from helpers import RedisServer, free_port

SLOTS = 16384


def key_slot(key: bytes) -> int:
    """The hash slot of a key (CRC16/XMODEM of its hash tag, mod 16384)."""
    s = key.find(b"{")
    if s >= 0:
        e = key.find(b"}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    crc = 0
    for b in key:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc % SLOTS


def name_slot(name: str) -> int:
    return key_slot(f"hilock:{{{name}}}:lock".encode())


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port for a cluster node. The cluster bus listens on port +
    10000: free as well, or the node exits at start (another cluster on the
    machine may hold it)."""
    for _ in range(1000):
        p = free_port()
        if p <= 55535 and _bindable(p + 10000):
            return p
    raise RuntimeError("no free port pair below 55536")


class LocalCluster:
    """password: every node requires it (requirepass, and masterauth so that
    replicas sync); ``url`` and ``conn`` then log in with it."""

    def __init__(self, node_timeout_ms: int = 1000, nodes: int = 6,
                 password: Optional[str] = None) -> None:
        if shutil.which("redis-cli") is None:
            raise FileNotFoundError("redis-cli not found; install the redis-tools package")
        args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(node_timeout_ms),
                "--cluster-replica-validity-factor", "0",
                # Replicas sync at once (not after 5 s), and CLUSTER SLOTS
                # lists a replica only once its offset moved: the master's
                # pings move it each second instead of each 10 s.
                "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1"]
        self.password = password
        if password is not None:
            args += ["--masterauth", password]
        self.nodes: List[RedisServer] = [RedisServer(pick_port=cluster_port, password=password,
                                                     extra_args=args)
                                         for _ in range(nodes)]

    # -- lifecycle -----------------------------------------------------------

    def start(self, timeout: float = 90.0) -> "LocalCluster":
        for n in self.nodes:
            n.start()
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        auth = ["-a", self.password, "--no-auth-warning"] if self.password else []
        subprocess.run(["redis-cli", *auth, "--cluster", "create", *addrs,
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=timeout)
        self.wait_ok(timeout, replicas=True)
        return self

    def cleanup(self) -> None:
        for n in self.nodes:
            n.cleanup()

    @property
    def hosts(self) -> str:
        """The seeds of ``url``: host:port of the first three nodes."""
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:3])

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis+cluster://{auth}{self.hosts}"

    # -- state ---------------------------------------------------------------

    def alive(self, i: int) -> bool:
        p = self.nodes[i].proc
        return p is not None and p.poll() is None

    def conn(self, i: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.nodes[i].port, socket_timeout=2,
                           password=self.password)

    def _slots(self, i: int):
        r = self.conn(i)
        try:
            return r.execute_command("CLUSTER SLOTS")
        finally:
            r.close()

    def owner(self, slot: int) -> int:
        """Index of the node that masters slot, as a live node sees it."""
        for i in range(len(self.nodes)):
            if not self.alive(i):
                continue
            try:
                entries = self._slots(i)
            except redis.RedisError:
                continue
            for e in entries:
                if e[0] <= slot <= e[1]:
                    port = int(e[2][1])
                    return next(j for j, n in enumerate(self.nodes) if n.port == port)
        raise AssertionError(f"no live node knows the owner of slot {slot}")

    def masters(self) -> List[int]:
        return sorted({self.owner(s) for s in (0, 8000, SLOTS - 1)})

    def name_on(self, node: int, prefix: str) -> str:
        """A lock name whose keys the node at index node masters."""
        ranges = []
        for i in range(len(self.nodes)):
            if self.alive(i):
                ranges = [(e[0], e[1], int(e[2][1])) for e in self._slots(i)]
                break
        port = self.nodes[node].port
        for k in range(100000):
            name = f"{prefix}{k}"
            s = name_slot(name)
            if any(a <= s <= b and p == port for a, b, p in ranges):
                return name
        raise AssertionError(f"no name maps to node {node}")

    def replica_of(self, m: int) -> Optional[int]:
        for i in range(len(self.nodes)):
            if i == m or not self.alive(i):
                continue
            info = self.conn(i).info("replication")
            if info.get("role") == "slave" and int(info.get("master_port", 0)) == self.nodes[m].port:
                return i
        return None

    def _node_ok(self, i: int, replicas: bool) -> bool:
        try:
            r = self.conn(i)
            info = r.execute_command("CLUSTER INFO")
            if isinstance(info, bytes):
                info = dict(line.split(":", 1) for line in info.decode().split()
                            if ":" in line)
            if info.get("cluster_state") != "ok" or int(info.get("cluster_slots_ok", 0)) != SLOTS:
                return False
            repl = r.info("replication")
            if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                return False
            slots = r.execute_command("CLUSTER SLOTS")
            if replicas and any(len(e) < 4 for e in slots):
                return False
            return True
        except redis.RedisError:
            return False

    def wait_ok(self, timeout: float = 20.0, replicas: bool = False) -> float:
        """Wait until every live node reports cluster_state:ok and they agree
        on the owner of sample slots; returns the seconds it took."""
        t0 = time.monotonic()
        while True:
            live = [i for i in range(len(self.nodes)) if self.alive(i)]
            if all(self._node_ok(i, replicas) for i in live):
                views = set()
                try:
                    for i in live:
                        views.add(tuple(sorted((e[0], e[1], int(e[2][1]))
                                               for e in self._slots(i))))
                except redis.RedisError:
                    views = {1, 2}
                if len(views) == 1:
                    return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"cluster not ok within {timeout} s")
            time.sleep(0.05)

    def kill(self, i: int) -> None:
        """SIGKILL node i by its PID."""
        proc = self.nodes[i].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextlib.contextmanager
def running_cluster() -> Iterator[LocalCluster]:
    """A started LocalCluster (node timeout 1 s), cleaned up on leaving."""
    cl = LocalCluster(node_timeout_ms=1000)
    try:
        cl.start()
        yield cl
    finally:
        cl.cleanup()
