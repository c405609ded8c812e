"""The campaign's fenced store: a tiny unix-socket server, one process.

Independent of hilock.FencedStore on purpose: the campaign checks the
library against storage it does not share code with. Protocol: one JSON
object per line, ``{"res": name, "fence": int, "writer": str}``; the reply is
``ok`` (accepted: fence >= the highest fence accepted for ``res``) or
``refused`` (a lower fence), one line. Every attempt is appended to the log
as a JSON line: ``{"seq", "mono", "wall", "res", "fence", "writer",
"accepted", "last"}`` (``last``: the highest fence accepted before it).

A unix socket is not affected by network namespaces, so partitions between a
client and Redis never cut the client off the store.

Run: ``python3 store.py SOCKET LOG``; SIGTERM stops it.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from typing import IO, Dict


class Store:
    def __init__(self, log: IO[str]) -> None:
        self.log = log
        self.last: Dict[str, int] = {}
        self.seq = 0
        self.mu = threading.Lock()

    def write(self, res: str, fence: int, writer: str) -> bool:
        with self.mu:
            last = self.last.get(res)
            ok = last is None or fence >= last
            if ok:
                self.last[res] = fence
            self.seq += 1
            self.log.write(json.dumps({
                "seq": self.seq, "mono": time.monotonic(), "wall": time.time(),
                "res": res, "fence": fence, "writer": writer, "accepted": ok,
                "last": last}) + "\n")
            self.log.flush()
            return ok


def serve_conn(store: Store, conn: socket.socket) -> None:
    try:
        with conn, conn.makefile("rwb") as f:
            for line in f:
                try:
                    req = json.loads(line)
                    ok = store.write(str(req["res"]), int(req["fence"]), str(req["writer"]))
                    f.write(b"ok\n" if ok else b"refused\n")
                except (ValueError, KeyError, TypeError):
                    f.write(b"error\n")
                f.flush()
    except OSError:
        pass  # a writer killed while its reply was on the way


def main() -> int:
    path, log_path = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    with open(log_path, "a") as log:
        store = Store(log)
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=serve_conn, args=(store, conn), daemon=True).start()


class StoreClient:
    """One connection to the store (reconnects after an error)."""

    def __init__(self, path: str, writer: str) -> None:
        self.path = path
        self.writer = writer
        self.f = None

    def write(self, res: str, fence: int) -> bool:
        if self.f is None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.path)
            self.f = s.makefile("rwb")
            s.close()  # the file object keeps the socket open
        try:
            self.f.write(json.dumps({"res": res, "fence": fence,
                                     "writer": self.writer}).encode() + b"\n")
            self.f.flush()
            reply = self.f.readline().strip()
        except OSError:
            self.f = None
            raise
        if reply not in (b"ok", b"refused"):
            raise RuntimeError(f"store replied {reply!r}")
        return reply == b"ok"


if __name__ == "__main__":
    raise SystemExit(main())
