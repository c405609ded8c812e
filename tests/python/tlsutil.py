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
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from typing import Iterable, List, Optional

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
        self._leaf("server", "ca", "localhost",
                   "DNS:localhost,IP:127.0.0.1,IP:0:0:0:0:0:0:0:1", "serverAuth")
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


class TLSServer:
    """One redis-server on 127.0.0.1 that listens only on a TLS port."""

    def __init__(self, pki: Pki, cert: str = "server", auth_clients: str = "no",
                 extra_args: Iterable[str] = (), port: Optional[int] = None) -> None:
        self.pki = pki
        self.cert = cert
        self.auth_clients = auth_clients
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.dir = tempfile.mkdtemp(prefix="hilock-tls-")
        self.proc: Optional[subprocess.Popen] = None

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

    def start(self, timeout: float = 10.0) -> "TLSServer":
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        args = [binary, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", self.dir, "--daemonize", "no",
                "--logfile", os.path.join(self.dir, "redis.log"),
                *tls_args(self.pki, self.cert, self.auth_clients, self.port),
                *self.extra_args]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ctx = self.ssl_context()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}; "
                                   f"see {self.dir}/redis.log")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw:
                    with ctx.wrap_socket(raw) as s:
                        s.sendall(b"PING\r\n")
                        if s.recv(64).startswith(b"+PONG"):
                            return self
            except (OSError, ssl.SSLError):
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("TLS redis-server did not start in time")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "TLSServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
