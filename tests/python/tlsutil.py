"""Certificates made with the ``openssl`` command, and redis-servers that
speak only TLS, for the TLS tests.

``Pki(dir)`` makes a CA and, signed by it: a server certificate naming
localhost and 127.0.0.1 (and ::1), one naming only other.example, an expired
one, and a client certificate; plus a second CA nobody trusts, which signs
a server certificate of its own.
"""
from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.parse
from typing import Callable, Dict, Iterable, List, Optional

from cluster import cluster_port
from helpers import _load_server_module

_server = _load_server_module()
free_port = _server.free_port


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Pki:
    """Key pairs and certificates in ``dir`` (EC P-256: quick to make)."""

    def __init__(self, dir: str) -> None:
        self.dir = dir
        self._ca("ca", "hilock test CA")
        self._ca("rogue", "nobody trusts this CA")
        # Also a client certificate: servers present it to each other on
        # the cluster bus, which always asks for one.
        self._leaf("server", "ca", "localhost",
                   "DNS:localhost,IP:127.0.0.1,IP:0:0:0:0:0:0:0:1", "serverAuth,clientAuth")
        self._leaf("wrongname", "ca", "other.example", "DNS:other.example", "serverAuth")
        self._leaf("rogueserver", "rogue", "localhost", "DNS:localhost,IP:127.0.0.1",
                   "serverAuth")
        # notAfter == notBefore: expired a second after it was made.
        self._leaf("expired", "ca", "localhost", "DNS:localhost,IP:127.0.0.1",
                   "serverAuth", days=0)
        self._leaf("client", "ca", "hilock client", None, "clientAuth")
        # A key that belongs to no certificate here.
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-out", "stray.key", cwd=dir)
        # The client key again, encrypted with a passphrase.
        _openssl("pkey", "-in", "client.key", "-aes256", "-passout", "pass:s3cret",
                 "-out", "client-enc.key", cwd=dir)
        time.sleep(1.1)  # let "expired" expire

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def _ca(self, name: str, cn: str) -> None:
        _openssl("req", "-x509", "-new", "-nodes", "-newkey", "ec",
                 "-pkeyopt", "ec_paramgen_curve:prime256v1", "-keyout", f"{name}.key",
                 "-out", f"{name}.crt", "-days", "3650", "-subj", f"/CN={cn}",
                 cwd=self.dir)

    def _leaf(self, name: str, ca: str, cn: str, san: Optional[str], usage: str,
              days: int = 365) -> None:
        ext = os.path.join(self.dir, f"{name}.ext")
        with open(ext, "w") as f:
            if san:
                f.write(f"subjectAltName={san}\n")
            f.write(f"extendedKeyUsage={usage}\n")
        _openssl("req", "-new", "-nodes", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", f"/CN={cn}", cwd=self.dir)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey",
                 f"{ca}.key", "-CAcreateserial", "-out", f"{name}.crt", "-days", str(days),
                 "-extfile", ext, cwd=self.dir)


def make_pki() -> Pki:
    return Pki(tempfile.mkdtemp(prefix="hilock-pki-"))


def tls_args(pki: Pki, cert: str = "server", auth_clients: str = "no",
             port: Optional[int] = None) -> List[str]:
    """redis-server arguments for a TLS-only server (port 0: no plain port)."""
    port = port or free_port()
    return ["--port", "0", "--tls-port", str(port),
            "--tls-cert-file", pki.path(f"{cert}.crt"),
            "--tls-key-file", pki.path(f"{cert}.key"),
            "--tls-ca-cert-file", pki.path("ca.crt"),
            "--tls-auth-clients", auth_clients]


class TLSServer(_server.RedisServer):
    """One redis-server on 127.0.0.1 that listens only on a TLS port: the
    launcher of hilock._server with TLS arguments and a TLS readiness probe."""

    def __init__(self, pki: Pki, cert: str = "server", auth_clients: str = "no",
                 extra_args: Iterable[str] = (), port: Optional[int] = None,
                 pick_port: Callable[[], int] = _server.free_port) -> None:
        super().__init__(port=port, extra_args=extra_args, pick_port=pick_port)
        self.pki = pki
        self.cert = cert
        self.auth_clients = auth_clients

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def ssl_context(self) -> ssl.SSLContext:
        """What redis-py or a readiness probe uses to talk to it."""
        ctx = ssl.create_default_context(cafile=self.pki.path("ca.crt"))
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(self.pki.path("client.crt"), self.pki.path("client.key"))
        return ctx

    def redis(self):
        """A redis-py client on it (verification off: it is the test's own)."""
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port, ssl=True,
                           ssl_cert_reqs="none", ssl_certfile=self.pki.path("client.crt"),
                           ssl_keyfile=self.pki.path("client.key"))

    def listen_args(self) -> List[str]:
        return tls_args(self.pki, self.cert, self.auth_clients, self.port)

    def answers(self) -> bool:
        # ssl.SSLError is an OSError: the launcher retries on either.
        with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw:
            with self.ssl_context().wrap_socket(raw) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")


def _tls_redis(pki: Pki, port: int, timeout: float = 2.0):
    import redis
    return redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_cert_reqs="none",
                       ssl_certfile=pki.path("client.crt"), ssl_keyfile=pki.path("client.key"),
                       socket_timeout=timeout, socket_connect_timeout=timeout)


def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if pred():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not within {timeout} s")
        time.sleep(0.05)


class _Deployment:
    """Servers started together. ``with`` starts them and cleans every one
    up on the way out, or at once when the start fails half-way."""

    def start(self) -> _Deployment:
        raise NotImplementedError

    def cleanup(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _tls_url(scheme: str, ports: Iterable[int], path: str, params: Dict[str, str]) -> str:
    """A rediss+ URL naming every port on 127.0.0.1, with params as its query."""
    hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
    query = "?" + urllib.parse.urlencode(params) if params else ""
    return f"{scheme}://{hosts}{path}{query}"


class TLSSentinel(_Deployment):
    """A master, a replica and three sentinels, every one listening only on
    TLS; replication and the sentinels' links run over TLS
    (tls-replication yes)."""

    def __init__(self, pki: Pki, name: str = "mymaster") -> None:
        self.pki, self.name = pki, name
        fast = ["--repl-diskless-sync-delay", "0", "--tls-replication", "yes"]
        self.master = TLSServer(pki, extra_args=fast)
        self.replica = TLSServer(pki, extra_args=fast + [
            "--replicaof", "127.0.0.1", str(self.master.port)])
        self.ports = [free_port() for _ in range(3)]
        self.procs: List[subprocess.Popen] = []
        self.dir = tempfile.mkdtemp(prefix="hilock-tls-sentinel-")

    def url(self, **params: str) -> str:
        return _tls_url("rediss+sentinel", self.ports, f"/{self.name}", params)

    def start(self, timeout: float = 30.0) -> TLSSentinel:
        self.master.start()
        self.replica.start()
        _wait(lambda: _tls_redis(self.pki, self.replica.port).info("replication")
              .get("master_link_status") == "up", timeout, "the replica's sync")
        _server.start_sentinels(self.procs, self.master.binary, self.dir, self.name,
                                self.ports, self.master.port, self.replica.port,
                                listen=self._listen)
        for port in self.ports:
            _wait(lambda port=port: _tls_redis(self.pki, port).execute_command(
                "SENTINEL", "ckquorum", self.name), timeout, f"sentinel {port}")
        return self

    def _listen(self, port: int) -> List[str]:
        """A sentinel's config lines: TLS only, to its peers and the servers too."""
        return ["port 0", f"tls-port {port}",
                f"tls-cert-file {self.pki.path('server.crt')}",
                f"tls-key-file {self.pki.path('server.key')}",
                f"tls-ca-cert-file {self.pki.path('ca.crt')}",
                "tls-auth-clients no", "tls-replication yes"]

    def master_port(self) -> int:
        host, port = _tls_redis(self.pki, self.ports[0]).execute_command(
            "SENTINEL", "get-master-addr-by-name", self.name)
        return int(port)

    def failover(self, timeout: float = 30.0) -> None:
        """SENTINEL FAILOVER: the replica becomes the master."""
        old = self.master_port()
        _wait(lambda: _tls_redis(self.pki, self.ports[0]).execute_command(
            "SENTINEL", "FAILOVER", self.name), 10, "SENTINEL FAILOVER accepted")
        _wait(lambda: self.master_port() != old and _tls_redis(
            self.pki, self.master_port()).execute_command("ROLE")[0] == b"master",
            timeout, "the failover")

    def cleanup(self) -> None:
        for p in self.procs:
            _server.kill(p)
        self.procs = []
        self.replica.cleanup()
        self.master.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)


def _cluster_ok(pki: Pki, port: int) -> bool:
    v = _tls_redis(pki, port).execute_command("CLUSTER", "INFO")
    if isinstance(v, dict):
        return v.get("cluster_state") == "ok"
    return b"cluster_state:ok" in (v if isinstance(v, bytes) else str(v).encode())


class TLSCluster(_Deployment):
    """Three masters and three replicas that listen only on TLS, with the
    cluster bus and replication over TLS (tls-cluster yes)."""

    def __init__(self, pki: Pki) -> None:
        self.pki = pki
        args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "1000", "--tls-cluster", "yes",
                "--tls-replication", "yes", "--repl-diskless-sync-delay", "0"]
        self.nodes = [TLSServer(pki, extra_args=args, pick_port=cluster_port) for _ in range(6)]

    def url(self, **params: str) -> str:
        return _tls_url("rediss+cluster", [n.port for n in self.nodes[:3]], "", params)

    def start(self, timeout: float = 40.0) -> TLSCluster:
        for n in self.nodes:
            n.start()
        subprocess.run(["redis-cli", "--tls", "--cacert", self.pki.path("ca.crt"),
                        "--cert", self.pki.path("client.crt"),
                        "--key", self.pki.path("client.key"), "--cluster", "create",
                        *[f"127.0.0.1:{n.port}" for n in self.nodes],
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=timeout)
        for n in self.nodes:
            _wait(lambda n=n: _cluster_ok(self.pki, n.port), timeout, f"node {n.port} ok")
        return self

    def cleanup(self) -> None:
        for n in self.nodes:
            n.cleanup()
