#!/usr/bin/env python3
"""The fault campaign: workloads under injected faults, then the checker.

    python3 tests/faults/campaign.py --minutes 2 --seed 1      # CI
    python3 tests/faults/campaign.py --minutes 30 --seed 7     # a soak

Runs, each a fresh deployment with its own fenced store process and
workload processes (lock, rlock, multi_lock, fair_lock, sequential_lock,
semaphore, rwlock; see worker.py):

- ``single``: one redis-server with AOF (appendfsync always). Faults:
  holder SIGKILL and SIGSTOP (longer than the TTL), server SIGSTOP, DEBUG
  SLEEP, CLIENT PAUSE, kill -9 and restart with AOF (always, or everysec),
  and, as root where ``ip netns`` works, partitions of one client from the
  server: each client process and the server live in network namespaces
  of their own joined by veth links, and a link goes down for half a TTL or
  two TTLs;
- ``relay``: clients reach the server through a TCP relay that forwards an
  acquire, release or renewal script call and then resets the client's
  connection, so the reply is lost after the server ran it;
- ``nopersist``: kill -9 and immediate restart of a server without
  persistence while a lock is held: the documented double grant, which the
  run must reproduce (``overlaps`` expected non-zero).

The seed is printed and fixes every random choice (which fault, when,
which process). Every process started is stopped by its PID and every
namespace deleted, also on failure. Exit status 1 when a run shows a
non-zero column the docs do not allow (or does not reproduce the one it
must).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import checker  # noqa: E402
import worker  # noqa: E402
from relay import Relay  # noqa: E402

PY = sys.executable
TTL = 1.5


@contextlib.contextmanager
def _nothing() -> Iterator[Any]:
    yield None


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def stop_pid(p: Optional[subprocess.Popen], grace: float = 3.0) -> None:
    """SIGCONT (it may be stopped), SIGTERM, then SIGKILL: by its PID."""
    if p is None or p.poll() is not None:
        return
    for sig in (signal.SIGCONT, signal.SIGTERM):
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            return
    try:
        p.wait(grace)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)


def resp(sock_path: str, *args: str, timeout: float = 5.0) -> bytes:
    """One command over the server's unix socket (admin: never partitioned)."""
    import socket
    cmd = f"*{len(args)}\r\n".encode() + b"".join(
        f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall(cmd)
        return s.recv(65536)


class Netns:
    """A server namespace and one namespace per client slot, veth-linked."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.names: List[str] = []
        self.links: List[str] = []
        self.srv = f"{tag}-srv"
        self.slots: Dict[int, Tuple[str, str, str]] = {}  # slot -> (ns, srv veth, addr)

    @staticmethod
    def available() -> Tuple[bool, str]:
        if os.geteuid() != 0:
            return False, "not root"
        if shutil.which("ip") is None:
            return False, "no ip(8)"
        name = f"hlf-probe-{os.getpid()}"
        r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
        if r.returncode != 0:
            return False, r.stderr.strip()
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        return True, ""

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    def setup(self, slots: int) -> None:
        self._ip("netns", "add", self.srv)
        self.names.append(self.srv)
        self._ip("-n", self.srv, "link", "set", "lo", "up")
        for k in range(1, slots + 1):
            ns = f"{self.tag}-c{k}"
            a, b = f"{self.tag}s{k}", f"{self.tag}c{k}"
            self._ip("netns", "add", ns)
            self.names.append(ns)
            self.links.append(a)   # deleted in cleanup if still in the root namespace
            self._ip("link", "add", a, "type", "veth", "peer", "name", b)
            self._ip("link", "set", a, "netns", self.srv)
            self._ip("link", "set", b, "netns", ns)
            self._ip("-n", self.srv, "addr", "add", f"10.213.{k}.1/24", "dev", a)
            self._ip("-n", ns, "addr", "add", f"10.213.{k}.2/24", "dev", b)
            self._ip("-n", self.srv, "link", "set", a, "up")
            self._ip("-n", ns, "link", "set", b, "up")
            self._ip("-n", ns, "link", "set", "lo", "up")
            self.slots[k] = (ns, a, f"10.213.{k}.1")

    def cut(self, slot: int, down: bool) -> None:
        self._ip("-n", self.srv, "link", "set", self.slots[slot][1], "down" if down else "up")

    def cleanup(self) -> None:
        for ns in reversed(self.names):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in self.links:   # a pair left behind by a failed setup
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        self.names = []
        self.links = []


class Server:
    """One redis-server: TCP for the clients, a unix socket for the runner."""

    def __init__(self, d: str, aof: bool, netns: Optional[str]) -> None:
        import hilock._server as hs
        self.dir = d
        self.sock = os.path.join(d, "redis.sock")
        self.port = hs.free_port()
        self.aof = aof
        self.netns = netns
        self.proc: Optional[subprocess.Popen] = None
        self.binary = hs.server_binary()

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port),
                "--bind", "0.0.0.0" if self.netns else "127.0.0.1",
                "--protected-mode", "no", "--unixsocket", self.sock, "--unixsocketperm", "700",
                "--save", "", "--dir", self.dir, "--daemonize", "no",
                "--logfile", os.path.join(self.dir, "redis.log"),
                "--enable-debug-command", "local", "--maxmemory-policy", "noeviction"]
        args += (["--appendonly", "yes", "--appendfsync", "always"] if self.aof
                 else ["--appendonly", "no"])
        if self.netns:
            args = ["ip", "netns", "exec", self.netns] + args
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited; see {self.dir}/redis.log")
            try:
                if resp(self.sock, "PING", timeout=0.5).startswith(b"+PONG"):
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(5)
            self.proc = None

    def stop(self) -> None:
        stop_pid(self.proc)
        self.proc = None


class Run:
    """One run: a deployment, the store, the workers, a fault schedule."""

    def __init__(self, name: str, base: str, seed: int, seconds: float,
                 netns_ok: bool) -> None:
        self.name = name
        self.dir = os.path.join(base, name)
        os.makedirs(os.path.join(self.dir, "hist"), exist_ok=True)
        self.seed = seed
        self.rng = random.Random(f"{seed}:{name}")
        self.seconds = seconds
        self.ttl = TTL
        self.procs: Dict[str, subprocess.Popen] = {}   # proc id -> process
        self.slot_of: Dict[str, int] = {}
        self.gen: Dict[int, int] = {}
        self.specs: Dict[int, Dict[str, Any]] = {}
        self.faults = open(os.path.join(self.dir, "faults.jsonl"), "a", buffering=1)
        self.store_proc: Optional[subprocess.Popen] = None
        self.store_sock = os.path.join(self.dir, "store.sock")
        self.server: Optional[Server] = None
        self.netns: Optional[Netns] = None
        self.use_netns = netns_ok
        self.relay: Optional[Relay] = None
        self.locks: Dict[str, Dict[str, Any]] = {}
        self.expected: List[str] = []    # columns the docs allow to be non-zero here
        self.reproduce: List[str] = []   # columns this run must show non-zero
        self.deployment = "single"
        self.stopped: Dict[str, float] = {}
        self.sentinels: Any = None
        self.extra_urls: List[str] = []   # Redlock: the other nodes

    # -- processes --------------------------------------------------------------

    def fault(self, kind: str, start: float, end: float, target: str = "", **kw: Any) -> None:
        self.faults.write(json.dumps(dict(kind=kind, start=start, end=end, target=target,
                                          wall=time.time(), **kw)) + "\n")

    def url_for(self, slot: int) -> str:
        if self.sentinels is not None:
            return self.sentinels.url
        assert self.server is not None
        if self.relay is not None:
            return f"redis://127.0.0.1:{self.relay.port}/0"
        if self.netns is not None:
            return f"redis://{self.netns.slots[slot][2]}:{self.server.port}/0"
        return f"redis://127.0.0.1:{self.server.port}/0"

    def spawn(self, slot: int) -> str:
        spec = self.specs[slot]
        g = self.gen.get(slot, 0) + 1
        self.gen[slot] = g
        proc = f"{spec['kind']}-{slot}-{g}"
        args = [PY, os.path.join(HERE, "worker.py"), "--kind", spec["kind"],
                "--url", self.url_for(slot), "--name", spec["lock"], "--proc", proc,
                *[x for u in self.extra_urls for x in ("--url", u)],
                "--history", os.path.join(self.dir, "hist", f"{proc}.jsonl"),
                "--ttl", str(spec.get("ttl", self.ttl)), "--seed", str(self.seed),
                "--hold", str(spec.get("hold", 0.8)),
                "--permits", str(spec.get("permits", 1))]
        if spec.get("store"):
            args += ["--store", self.store_sock]
        if spec.get("asyncio"):
            args += ["--asyncio"]
        if self.wait_replicas:
            args += ["--wait-replicas", str(self.wait_replicas)]
        if self.netns is not None:
            args = ["ip", "netns", "exec", self.netns.slots[slot][0]] + args
        env = dict(os.environ)
        self.procs[proc] = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL)
        self.slot_of[proc] = slot
        return proc

    def add(self, kind: str, lock: str, count: int, **spec: Any) -> None:
        cap = spec.get("permits", 1) if kind in ("semaphore", "barrier") else 1
        self.locks[lock] = {"kind": kind, "capacity": cap}
        for _ in range(count):
            slot = len(self.specs) + 1
            self.specs[slot] = dict(spec, kind=kind, lock=lock,
                                    store=kind in ("lock", "rlock", "multi_lock", "fair_lock",
                                                   "sequential_lock", "rwlock", "redlock",
                                                   "election"))

    def live(self) -> List[str]:
        return [p for p, pr in self.procs.items() if pr.poll() is None]

    def tail(self, p: str, n: int = 1) -> List[Dict[str, Any]]:
        """The last n events of a worker's history."""
        try:
            with open(os.path.join(self.dir, "hist", f"{p}.jsonl"), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 400 * n))
                lines = f.read().splitlines()[1:][-n:]
            return [json.loads(x) for x in lines]
        except (OSError, ValueError):
            return []

    def holders(self, since: float = 0.0) -> List[str]:
        """Live workers whose history shows them inside a hold now (granted
        after ``since``)."""
        out = []
        for p in self.live():
            evs = self.tail(p, 8)
            if not evs:
                continue
            ev = evs[-1]
            if ev["op"] in ("sample", "write") or (ev["op"] == "acquire" and ev["type"] == "ok"):
                grants = [e["mono"] for e in evs if e["op"] == "acquire" and e["type"] == "ok"]
                if since == 0.0 or (grants and grants[-1] > since):
                    out.append(p)
        return out

    # -- lifecycle ----------------------------------------------------------------

    def setup(self) -> None:
        self.start_store()
        if self.use_netns:
            self.netns = Netns(f"hlf{os.getpid() % 100000}")
            self.netns.setup(len(self.specs))
            self.deployment = "single, netns"
        self.server = Server(self.dir, aof=self.aof, netns=self.netns.srv if self.netns else None)
        self.server.start()

    aof = True
    wait_replicas = 0

    def start_store(self) -> None:
        self.store_proc = subprocess.Popen(
            [PY, os.path.join(HERE, "store.py"), self.store_sock,
             os.path.join(self.dir, "store.jsonl")], stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.store_sock):
            if time.monotonic() > deadline or self.store_proc.poll() is not None:
                raise RuntimeError("the fenced store did not start")
            time.sleep(0.02)

    def start_workers(self) -> None:
        for slot in self.specs:
            self.spawn(slot)

    def finish(self) -> None:
        """Stop the workers, wait out the TTLs, record the final state."""
        if self.relay is not None:
            self.relay.disarm()
        if self.netns is not None:
            for k in self.netns.slots:
                try:
                    self.netns.cut(k, False)
                except subprocess.CalledProcessError:
                    pass
        for p in self.live():
            os.kill(self.procs[p].pid, signal.SIGCONT)
        for p in self.live():
            try:
                os.kill(self.procs[p].pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p, pr in self.procs.items():
            try:
                pr.wait(max(0.1, 6.0))
            except subprocess.TimeoutExpired:
                t = time.monotonic()
                pr.kill()
                pr.wait(5)
                self.fault("holder_kill", t, t, target=p, note="did not stop at the end")
        self.end = time.monotonic()
        # Holders are gone; a killed one's key lapses within one TTL.
        time.sleep(max(s.get("ttl", self.ttl) for s in self.specs.values()) + 1.0)
        final = {"permits_free": {}, "held": {}, "queued": {}}
        import hilock
        with hilock.Client(self.admin_url()) if self.locks else _nothing() as c:
            for lock, info in self.locks.items():
                kind = info["kind"]
                if kind == "semaphore":
                    final["permits_free"][lock] = c.semaphore(lock, info["capacity"]).available()
                elif kind == "lock":
                    final["held"][lock] = c.lock(lock).locked()
                elif kind == "rlock":
                    final["held"][lock] = c.rlock(lock).locked()
                elif kind == "multi_lock":
                    final["held"][lock] = c.multi_lock(worker.multi_names(lock)).locked()
                elif kind in ("fair_lock", "sequential_lock"):
                    fl = getattr(c, kind)(lock)
                    final["held"][lock] = fl.locked()
                    final["queued"][lock] = fl.waiters()
                elif kind == "rwlock":
                    final["held"][lock] = c.rwlock(lock).locked()
        with open(os.path.join(self.dir, "final.json"), "w") as f:
            json.dump(final, f)

    def admin_url(self) -> str:
        if self.sentinels is not None:
            return str(self.sentinels.url)
        assert self.server is not None
        return f"unix://{self.server.sock}"

    def cleanup(self) -> None:
        for pr in self.procs.values():
            stop_pid(pr, grace=1.0)
        if self.sentinels is not None:
            self.sentinels.stop()
        if self.relay is not None:
            self.relay.stop()
        if self.server is not None:
            self.server.stop()
        stop_pid(self.store_proc)
        if self.netns is not None:
            self.netns.cleanup()
        self.faults.close()

    def write_meta(self, t0: float) -> None:
        meta = {"run": self.name, "deployment": self.deployment, "seed": self.seed,
                "ttl": max([s.get("ttl", self.ttl) for s in self.specs.values()],
                           default=self.ttl),
                "locks": self.locks, "expected": self.expected,
                "reproduce": self.reproduce, "start": t0,
                "end": getattr(self, "end", time.monotonic()),
                "duration": getattr(self, "end", time.monotonic()) - t0,
                "workers": len(self.specs)}
        with open(os.path.join(self.dir, "meta.json"), "w") as f:
            json.dump(meta, f)

    def execute(self) -> checker.Result:
        t0 = time.monotonic()
        try:
            self.setup()
            self.start_workers()
            time.sleep(1.0)
            self.inject(t0 + self.seconds)
            self.finish()
        finally:
            self.write_meta(t0)
            self.cleanup()
        return checker.check_run(self.dir)

    def inject(self, deadline: float) -> None:
        raise NotImplementedError

    # -- faults ---------------------------------------------------------------------

    def pick_holder(self) -> Optional[str]:
        hs = self.holders()
        if hs and self.rng.random() < 0.8:
            return self.rng.choice(sorted(hs))
        live = sorted(self.live())
        return self.rng.choice(live) if live else None

    def holder_kill(self) -> None:
        p = self.pick_holder()
        if p is None:
            return
        t = time.monotonic()
        self.procs[p].kill()
        self.procs[p].wait(5)
        self.fault("holder_kill", t, t, target=p)
        self.spawn(self.slot_of[p])

    def holder_pause(self) -> None:
        p = self.pick_holder()
        if p is None:
            return
        d = 2 * self.ttl + self.rng.uniform(0, 0.5)
        t = time.monotonic()
        os.kill(self.procs[p].pid, signal.SIGSTOP)
        time.sleep(d)
        os.kill(self.procs[p].pid, signal.SIGCONT)
        self.fault("holder_pause", t, time.monotonic(), target=p)

    def server_pause(self) -> None:
        assert self.server is not None and self.server.proc is not None
        t = time.monotonic()
        os.kill(self.server.proc.pid, signal.SIGSTOP)
        time.sleep(2 * self.ttl)
        os.kill(self.server.proc.pid, signal.SIGCONT)
        self.fault("server_pause", t, time.monotonic())

    def debug_sleep(self) -> None:
        assert self.server is not None
        d = self.rng.choice([0.5, 1.2, 2.0])
        t = time.monotonic()
        try:
            resp(self.server.sock, "DEBUG", "SLEEP", str(d), timeout=d + 5)
        except OSError:
            pass
        self.fault("debug_sleep", t, time.monotonic(), seconds=d)

    def client_pause(self) -> None:
        assert self.server is not None
        ms = self.rng.choice([500, 1500, 3000])
        t = time.monotonic()
        resp(self.server.sock, "CLIENT", "PAUSE", str(ms), "ALL")
        time.sleep(ms / 1000)
        self.fault("client_pause", t, time.monotonic(), ms=ms)

    def restart(self, fsync: str) -> None:
        assert self.server is not None
        if fsync != "none":
            resp(self.server.sock, "CONFIG", "SET", "appendfsync", fsync)
            time.sleep(self.rng.uniform(0.0, 1.0))
        t = time.monotonic()
        self.server.kill9()
        self.server.start()
        self.fault(f"restart_{'aof_' + fsync if fsync != 'none' else 'nopersist'}",
                   t, time.monotonic())

    def partition(self, long: bool) -> None:
        if self.netns is None:
            return
        p = self.pick_holder()
        if p is None:
            return
        slot = self.slot_of[p]
        d = 2 * self.ttl if long else 0.5 * self.ttl
        t = time.monotonic()
        self.netns.cut(slot, True)
        try:
            time.sleep(d)
        finally:
            self.netns.cut(slot, False)
        self.fault("partition_long" if long else "partition_short", t, time.monotonic(),
                   target=p)


class SingleRun(Run):
    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.add("lock", "L", 2)
        self.add("fair_lock", "F", 2)
        self.add("sequential_lock", "Q", 2)
        self.add("rlock", "R", 2)
        self.add("multi_lock", "M", 2)
        self.add("semaphore", "S", 3, permits=2)
        self.add("rwlock", "RW", 2)
        self.add("election", "E", 2)
        # Three parties that wait at a barrier of three, over and over.
        self.add("barrier", "B", 3, permits=3)
        # A task of hilock.asyncio beside the threads on three of them.
        self.add("lock", "L", 1, asyncio=True)
        self.add("fair_lock", "F", 1, asyncio=True)
        self.add("rwlock", "RW", 1, asyncio=True)

    def inject(self, deadline: float) -> None:
        kinds: List[Tuple[str, Callable[[], None]]] = [
            ("holder_kill", self.holder_kill),
            ("holder_pause", self.holder_pause),
            ("server_pause", self.server_pause),
            ("debug_sleep", self.debug_sleep),
            ("client_pause", self.client_pause),
            ("restart_aof_always", lambda: self.restart("always")),
        ]
        if self.netns is not None:
            kinds += [("partition_short", lambda: self.partition(False)),
                      ("partition_long", lambda: self.partition(True))]
        while time.monotonic() < deadline - 4:
            time.sleep(self.rng.uniform(1.0, 2.5))
            name, fn = self.rng.choice(kinds)
            log(f"  {self.name}: {name}")
            fn()


class EverysecRun(SingleRun):
    """kill -9 and restart of a server whose AOF is switched to
    ``appendfsync everysec`` first: Redis answers before the write reaches
    the file whenever a background fsync is still running (it postpones
    the write for up to 2 s), so a grant made shortly before the kill can
    be lost and given again, and the fence counter's last increments with
    it: data loss, as in an unreplicated failover (overlaps, stale writes,
    unreported losses and fence regressions allowed; leaks, stranded
    waiters and FIFO inversions must stay zero)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.use_netns = False
        self.expected = DATA_LOSS

    def inject(self, deadline: float) -> None:
        while time.monotonic() < deadline - 4:
            time.sleep(self.rng.uniform(1.0, 2.5))
            log(f"  {self.name}: restart_aof_everysec")
            self.restart("everysec")


class RelayRun(Run):
    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.use_netns = False
        self.add("lock", "L", 2)
        self.add("fair_lock", "F", 2)
        self.add("semaphore", "S", 2, permits=1)
        # Their acquire and release are resent with the call's nonce.
        self.add("rwlock", "RW", 2)
        self.add("rlock", "R", 2)

    def setup(self) -> None:
        super().setup()
        assert self.server is not None
        self.deployment = "single, via relay"

        def on_reset(verb: str, script: str) -> None:
            t = time.monotonic()
            self.fault(f"reply_lost_{verb}", t, t, script=script)
        self.relay = Relay(self.server.port, os.path.join(ROOT, "core", "scripts"),
                           self.seed, on_reset).start()

    def inject(self, deadline: float) -> None:
        while time.monotonic() < deadline - 3:
            time.sleep(self.rng.uniform(0.5, 1.5))
            assert self.relay is not None
            verb = self.rng.choice(["acquire", "release", "renew"])
            self.relay.arm(0.5, (verb,))
            time.sleep(self.rng.uniform(0.5, 1.5))
            self.relay.disarm()
            if self.rng.random() < 0.15:
                self.holder_kill()


class NoPersistRun(Run):
    """kill -9 and at once restart a server without persistence while a
    lock is held: another process is granted the lock its holder still
    believes it has (the documented double grant)."""

    aof = False

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.use_netns = False
        self.ttl = 3.0
        self.expected = self.reproduce = ["overlaps"]
        self.add("lock", "L", 2, ttl=3.0, hold=2.5)
        self.add("fair_lock", "F", 2, ttl=3.0, hold=2.5)

    def inject(self, deadline: float) -> None:
        while time.monotonic() < deadline - 5:
            time.sleep(self.rng.uniform(1.0, 2.0))
            # Wait for a hold that has run a little, then lose the data.
            until = time.monotonic() + 3
            while time.monotonic() < until and len(self.holders()) < 2:
                time.sleep(0.05)
            log(f"  {self.name}: restart_nopersist")
            self.restart("none")


class RedlockRun(Run):
    """Redlock over three masters without persistence. Faults on one node
    (a minority): SIGKILL and a restart delayed past the TTL (the documented
    remedy), SIGSTOP for two TTLs, DEBUG SLEEP; and holder faults."""

    aof = False

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.use_netns = False
        self.add("redlock", "R", 3)
        self.nodes: List[Server] = []

    def setup(self) -> None:
        super().setup()
        assert self.server is not None
        self.nodes = [self.server]
        for i in (1, 2):
            d = os.path.join(self.dir, f"node{i}")
            os.makedirs(d, exist_ok=True)
            srv = Server(d, aof=False, netns=None)
            self.nodes.append(srv)
            srv.start()
        self.extra_urls = [f"redis://127.0.0.1:{n.port}/0" for n in self.nodes[1:]]
        self.deployment = "Redlock, 3 masters"

    def admin_url(self) -> str:
        return ""

    def finish(self) -> None:
        # The final state: the Redlock key on no node.
        saved = self.locks
        self.locks = {}
        try:
            super().finish()
        finally:
            self.locks = saved
        import hilock
        rl = hilock.Redlock([f"redis://127.0.0.1:{n.port}/0" for n in self.nodes], "R")
        with open(os.path.join(self.dir, "final.json")) as f:
            final = json.load(f)
        final["held"]["R"] = rl.locked()
        with open(os.path.join(self.dir, "final.json"), "w") as f:
            json.dump(final, f)

    def cleanup(self) -> None:
        super().cleanup()
        for n in self.nodes[1:]:
            n.stop()

    def inject(self, deadline: float) -> None:
        while time.monotonic() < deadline - 6:
            time.sleep(self.rng.uniform(1.0, 2.0))
            node = self.rng.choice(self.nodes)
            what = self.rng.choice(["node_kill_delayed", "node_pause", "node_debug_sleep",
                                    "holder_kill", "holder_pause"])
            log(f"  {self.name}: {what}")
            t = time.monotonic()
            if what == "node_kill_delayed":
                node.kill9()
                time.sleep(self.ttl + 0.5)   # delayed restart: past every TTL
                node.start()
                self.fault(what, t, time.monotonic())
            elif what == "node_pause":
                assert node.proc is not None
                os.kill(node.proc.pid, signal.SIGSTOP)
                time.sleep(2 * self.ttl)
                os.kill(node.proc.pid, signal.SIGCONT)
                self.fault(what, t, time.monotonic())
            elif what == "node_debug_sleep":
                try:
                    resp(node.sock, "DEBUG", "SLEEP", "1.0", timeout=6)
                except OSError:
                    pass
                self.fault(what, t, time.monotonic())
            elif what == "holder_kill":
                self.holder_kill()
            else:
                self.holder_pause()


class RedlockRestartRun(RedlockRun):
    """The documented Redlock hole: a node of the holder's majority restarts
    at once without persistence. One node stops (SIGSTOP), so a grant lands
    on the other two; one of those two is killed and restarted empty; the
    stopped node resumes. The two nodes that never saw the grant make a
    majority for the next client (``overlaps`` expected)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.expected = DATA_LOSS
        self.reproduce = ["overlaps"]

    def inject(self, deadline: float) -> None:
        while time.monotonic() < deadline - 6:
            time.sleep(self.rng.uniform(1.0, 2.0))
            stopped, restarted = self.rng.sample(self.nodes, 2)
            assert stopped.proc is not None
            log(f"  {self.name}: restart_nopersist_quorum")
            t = time.monotonic()
            os.kill(stopped.proc.pid, signal.SIGSTOP)
            until = time.monotonic() + 4
            while time.monotonic() < until and not self.holders(since=t + 0.1):
                time.sleep(0.02)
            restarted.kill9()
            restarted.start()
            os.kill(stopped.proc.pid, signal.SIGCONT)
            self.fault("restart_nopersist_quorum", t, time.monotonic())


# What a failover or restart that loses acknowledged grants may show: second
# holders inside validity, fences that go back (refused by the store, so the
# new holder's writes fail although its release succeeds; or one fence twice,
# which the store cannot tell apart).
# A barrier's early release is a lost write's too: the arrivals of a
# generation whose trip was lost stand again, and count for the next one.
DATA_LOSS = ["overlaps", "unreported_losses", "fence_regressions", "stale_writes",
             "early_releases"]
# An unreplicated failover between machines whose clocks agree: lost grants
# (second holders inside validity) but fences that keep going up.
FAILOVER_LOSS = ["overlaps", "unreported_losses"]


class RedlockRelayRun(RedlockRun):
    """Redlock over three masters, each reached through a relay that, while
    armed, forwards an acquire, release or extend script call, swallows the
    reply and resets the connection: the node ran it, the client never
    learns the outcome on that node. Everything must stay zero."""

    def setup(self) -> None:
        super().setup()

        def on_reset(verb: str, script: str) -> None:
            t = time.monotonic()
            self.fault(f"reply_lost_{verb}", t, t, script=script)
        self.relays = [Relay(n.port, os.path.join(ROOT, "core", "scripts"), self.seed + i,
                             on_reset).start() for i, n in enumerate(self.nodes)]
        self.extra_urls = [f"redis://127.0.0.1:{r.port}/0" for r in self.relays[1:]]
        self.deployment = "Redlock, 3 masters, via relays"

    def url_for(self, slot: int) -> str:
        return f"redis://127.0.0.1:{self.relays[0].port}/0"

    def finish(self) -> None:
        for r in self.relays:
            r.disarm()
        super().finish()

    def cleanup(self) -> None:
        for r in getattr(self, "relays", []):
            r.stop()
        super().cleanup()

    def inject(self, deadline: float) -> None:
        while time.monotonic() < deadline - 3:
            time.sleep(self.rng.uniform(0.5, 1.5))
            relay = self.rng.choice(self.relays)
            verb = self.rng.choice(["acquire", "release", "renew"])
            log(f"  {self.name}: replies lost ({verb}) on one node")
            relay.arm(0.5, (verb,))
            time.sleep(self.rng.uniform(0.5, 1.5))
            relay.disarm()
            if self.rng.random() < 0.15:
                self.holder_kill()


class FailoverRun(Run):
    """Base of the failover runs: a TTL (10 s) and holds (up to 8 s) well
    beyond the failover (2.5 to 5 s here), so that a grant the new master
    lost is often still held and valid when another holder is granted.
    Without ``wait_replicas`` the documented double grant may show."""

    def __init__(self, *a: Any, wait: int = 0, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.use_netns = False
        self.ttl = 10.0
        self.wait_replicas = wait
        if not wait:
            # Whether a lost grant is still held when another is granted is
            # a race with its holder's renewal: counted, not required. The
            # fences do not go back (a draw is max(last + 1, the server's
            # clock in microseconds), and the new master's clock is past
            # every lost draw), so the store refuses the first holder once
            # the second has written: no stale write, no fence regression.
            self.expected = FAILOVER_LOSS


class SentinelRun(FailoverRun):
    """A master, a replica and one sentinel. Fault: the replica is cut off
    so that grants and renewals stay unreplicated, the master is killed,
    the replica is promoted; the old master comes back as the new
    replica. Without ``wait_replicas`` the new master has lost
    grants its holders still count on: the documented double grant. With
    ``wait_replicas=1`` those grants and renewals were never confirmed (the
    grant given back, the renewal failed): no overlap."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.add("lock", "L", 2, ttl=10.0, hold=8.0)
        self.add("fair_lock", "F", 2, ttl=10.0, hold=8.0)

    def setup(self) -> None:
        from hilock._server import SentinelDeployment
        self.start_store()
        self.sentinels = SentinelDeployment(sentinels=1)
        self.sentinels.start()
        self.deployment = "sentinel" + (f", wait_replicas={self.wait_replicas}"
                                        if self.wait_replicas else "")

    def failover(self) -> None:
        from hilock._server import command
        dep = self.sentinels
        t = time.monotonic()
        # Cut the replica off (it retries with a password the master does
        # not expect): what the master grants from now on never reaches it.
        # (SIGSTOP would not do: the stream waits in the stopped replica's
        # socket buffer and arrives when it resumes.)
        dep.break_replication()
        # Kill the master once a grant was made that the replica never saw
        # (at most 4 s: a sentinel does not promote a replica whose link has
        # been down for over ten down-after periods).
        until = time.monotonic() + 4
        while time.monotonic() < until and not self.holders(since=t):
            time.sleep(0.02)
        dep.master.stop()  # SIGKILL
        command(dep.replica.port, "CONFIG", "SET", "masterauth", "")
        deadline = time.monotonic() + 60
        while not (dep.master_port() == dep.replica.port
                   and b"master" in command(dep.replica.port, "ROLE")[:20]):
            if time.monotonic() > deadline:
                raise RuntimeError("no failover within 60 s")
            time.sleep(0.05)
        end = time.monotonic()
        # The old master comes back empty, as the new master's replica.
        dep.master.extra_args = ["--repl-diskless-sync-delay", "0",
                                 "--replicaof", "127.0.0.1", str(dep.replica.port)]
        dep.master.start()
        dep.master, dep.replica = dep.replica, dep.master
        self.fault("failover_unreplicated", t, end)
        while b"master_link_status:up" not in command(dep.replica.port, "INFO",
                                                      "replication"):
            if time.monotonic() > deadline + 30:
                raise RuntimeError("the old master never rejoined as a replica")
            time.sleep(0.1)
        # The master must count its replica again before the next cut.
        while command(dep.master.port, "WAIT", "1", "1000")[:2] != b":1":
            if time.monotonic() > deadline + 60:
                raise RuntimeError("the master never counted its replica")

    def inject(self, deadline: float) -> None:
        while time.monotonic() < deadline - 12:
            time.sleep(self.rng.uniform(1.5, 3.0))
            log(f"  {self.name}: failover_unreplicated")
            self.failover()


class ClusterRun(FailoverRun):
    """A Redis Cluster of three masters and three replicas (cluster.py of
    the Python suites). Fault: the replica of the master that owns both
    locks is cut off, a grant is made on the master alone, the master is
    killed, the replica is elected; the old master comes back as its
    replica. Without ``wait_replicas`` the documented data loss may show;
    with ``wait_replicas=1``, none."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.cluster: Any = None

    def setup(self) -> None:
        sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
        from cluster import LocalCluster, name_slot
        self.name_slot = name_slot
        self.start_store()
        self.cluster = LocalCluster()
        self.cluster.start()
        m = self.cluster.owner(name_slot("L"))
        other = self.cluster.name_on(m, "F")
        self.add("lock", "L", 2, ttl=10.0, hold=8.0)
        self.add("fair_lock", other, 2, ttl=10.0, hold=8.0)
        self.deployment = "cluster, 3+3" + (f", wait_replicas={self.wait_replicas}"
                                            if self.wait_replicas else "")

    def url_for(self, slot: int) -> str:
        return str(self.cluster.url)

    def admin_url(self) -> str:
        return str(self.cluster.url)

    def cleanup(self) -> None:
        super().cleanup()
        if self.cluster is not None:
            self.cluster.cleanup()

    def failover(self) -> None:
        c = self.cluster
        slot = self.name_slot("L")
        m = c.owner(slot)
        r = c.replica_of(m)
        if r is None:
            raise RuntimeError("the master of the locks has no replica")
        from hilock._server import command
        t = time.monotonic()
        # Cut the replica off, as in the Sentinel run (SIGSTOP would leave
        # the stream in its socket buffer).
        command(c.nodes[r].port, "CONFIG", "SET", "masterauth", "wrong-on-purpose")
        command(c.nodes[m].port, "CLIENT", "KILL", "TYPE", "replica")
        until = time.monotonic() + 10
        while time.monotonic() < until and not self.holders(since=t):
            time.sleep(0.02)
        c.kill(m)
        command(c.nodes[r].port, "CONFIG", "SET", "masterauth", "")
        deadline = time.monotonic() + 30
        while True:
            try:
                if c.owner(slot) == r:
                    break
            except Exception:  # a node that just died, or no owner yet
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("no cluster failover within 30 s")
            time.sleep(0.05)
        end = time.monotonic()
        c.nodes[m].start()   # rejoins from nodes.conf as the new master's replica
        self.fault("failover_unreplicated", t, end)
        c.wait_ok(60, replicas=True)

    def inject(self, deadline: float) -> None:
        while time.monotonic() < deadline - 15:
            time.sleep(self.rng.uniform(1.5, 3.0))
            log(f"  {self.name}: failover_unreplicated")
            self.failover()


RUNS: Dict[str, Tuple[Callable[..., Run], float]] = {
    "single": (SingleRun, 0.5), "relay": (RelayRun, 0.3), "nopersist": (NoPersistRun, 0.2),
    "everysec": (EverysecRun, 0.2),
    "sentinel": (SentinelRun, 0.3), "redlock": (RedlockRun, 0.25),
    "redlock-restart": (RedlockRestartRun, 0.2),
    "redlock-relay": (RedlockRelayRun, 0.25),
    "sentinel-wait": (lambda *a, **kw: SentinelRun(*a, wait=1, **kw), 0.3),
    "cluster": (ClusterRun, 0.3),
    "cluster-wait": (lambda *a, **kw: ClusterRun(*a, wait=1, **kw), 0.3)}
CI_RUNS = "single,relay,nopersist,everysec,redlock"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--runs", default=CI_RUNS,
                    help=f"comma-separated, of {', '.join(RUNS)} (default {CI_RUNS})")
    ap.add_argument("--out", default=None, help="keep the histories here")
    ap.add_argument("--no-netns", action="store_true")
    a = ap.parse_args()

    def terminate(*_: Any) -> None:
        raise KeyboardInterrupt()   # run every cleanup (processes, namespaces)
    signal.signal(signal.SIGTERM, terminate)
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 30)
    names = [n for n in a.runs.split(",") if n]
    log(f"fault campaign: seed {seed}, {a.minutes} minute(s), runs {', '.join(names)}")
    ok, why = (False, "--no-netns") if a.no_netns else Netns.available()
    if not ok:
        log(f"network namespaces unavailable ({why}): no partition faults, "
            "every process on loopback")
    base = a.out or tempfile.mkdtemp(prefix="hilock-faults-")
    os.makedirs(base, exist_ok=True)
    # Overhead per run: start-up, the final TTL wait, the check.
    budget = max(20.0, a.minutes * 60 - 4 * len(names))
    weights = sum(RUNS[n][1] for n in names)
    results = []
    errors: List[str] = []
    try:
        for n in names:
            cls, w = RUNS[n]
            secs = max(12.0, budget * w / weights)
            log(f"run {n}: {secs:.0f} s")
            run = cls(n, base, seed, secs, ok)
            try:
                results.append(run.execute())
            except Exception:
                traceback.print_exc()
                errors.append(n)
    finally:
        print()
    print(f"seed {seed}; histories in {base}")
    print(checker.table(results))
    for r in results:
        if r.examples:
            print(checker.details(r))
    bad = [r.run for r in results if r.unexpected() or r.not_reproduced()] + errors
    if bad:
        print(f"FAILED: {', '.join(bad)}")
        return 1
    if a.out is None:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
