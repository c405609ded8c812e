"""A TCP relay between clients and one Redis server that can lose replies.

It forwards bytes both ways and parses the clients' RESP requests. When
armed, a request that runs a chosen lock script (acquire, release or renew)
is forwarded to the server, the server's reply is swallowed, and the client
connection is reset (SO_LINGER 0): the server ran the command, the client
never learns the outcome. Scripts are told apart by their source: the first
call of each script on a fresh server is EVAL with the source (EVALSHA got
NOSCRIPT), whose SHA1 the relay then maps to a file of core/scripts.

Runs in a thread of the campaign process: ``Relay(target_port, scripts_dir)``,
``start()``, ``arm(p, verbs, times=None)`` (disarmed again after ``times``
resets), ``disarm()``, ``stop()``.
"""
from __future__ import annotations

import asyncio
import glob
import hashlib
import os
import random
import socket
import struct
import threading
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

VERBS = ("acquire", "release", "renew")
# The line the build puts before every script's text (cmake/EmbedScripts.cmake).
BODY_HEAD = "local function hilock_body()\n"


def script_prefixes(scripts_dir: str) -> List[Tuple[str, str]]:
    """(name, the file's text up to its first @include) per script."""
    out = []
    for p in glob.glob(os.path.join(scripts_dir, "*.lua")):
        with open(p) as f:
            text = f.read()
        cut = text.find("-- @include")
        prefix = text[:cut if cut > 0 else 400][:400]
        out.append((os.path.basename(p)[:-4], prefix))
    out.sort(key=lambda x: -len(x[1]))
    return out


def verb_of(script: str, args: List[bytes]) -> Optional[str]:
    """acquire / release / renew for a lock script call, else None."""
    if script == "fair_lock":
        try:
            nkeys = int(args[2])
            op = args[3 + nkeys]
        except (IndexError, ValueError):
            return None
        return {b"acquire": "acquire", b"try": "acquire", b"release": "release"}.get(op)
    if "acquire" in script:
        return "acquire"
    if "release" in script:
        return "release"
    if "renew" in script or "extend" in script:
        return "renew"
    return None


def parse_command(buf: bytes, pos: int) -> Optional[Tuple[List[bytes], int]]:
    """One RESP request at pos: (args, end) or None if incomplete."""
    if pos >= len(buf):
        return None
    if buf[pos:pos + 1] != b"*":  # inline command
        nl = buf.find(b"\r\n", pos)
        return None if nl < 0 else (buf[pos:nl].split(), nl + 2)
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return None
    n = int(buf[pos + 1:nl])
    p = nl + 2
    args = []
    for _ in range(n):
        nl = buf.find(b"\r\n", p)
        if nl < 0:
            return None
        ln = int(buf[p + 1:nl])
        s = nl + 2
        if len(buf) < s + ln + 2:
            return None
        args.append(buf[s:s + ln])
        p = s + ln + 2
    return args, p


class Relay:
    def __init__(self, target_port: int, scripts_dir: str, seed: int,
                 on_reset: Optional[Callable[[str, str], None]] = None,
                 target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.prefixes = script_prefixes(scripts_dir)
        self.shas: Dict[bytes, str] = {}
        self.rng = random.Random(seed)
        self.p = 0.0
        self.verbs: Set[str] = set()
        self.left: Optional[int] = None
        self.on_reset = on_reset
        self.resets: Dict[str, int] = {}
        self.port = 0
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.thread: Optional[threading.Thread] = None
        self.ready = threading.Event()
        self.server: Optional[asyncio.base_events.Server] = None
        self.conns: Set[asyncio.StreamWriter] = set()

    def arm(self, p: float, verbs: Tuple[str, ...] = VERBS,
            times: Optional[int] = None) -> None:
        self.p, self.verbs, self.left = p, set(verbs), times

    def disarm(self) -> None:
        self.p = 0.0

    def _learn(self, source: bytes) -> None:
        text = source.decode(errors="replace")
        # The build runs each script's text inside this function (and ends
        # it with lib/damage.lua): the file's own text follows the line.
        if text.startswith(BODY_HEAD):
            text = text[len(BODY_HEAD):]
        for name, prefix in self.prefixes:
            if text.startswith(prefix):
                self.shas[hashlib.sha1(source).hexdigest().encode()] = name
                return

    def _classify(self, args: List[bytes]) -> Optional[Tuple[str, str]]:
        if len(args) < 3:
            return None
        cmd = args[0].upper()
        if cmd == b"SCRIPT" and args[1].upper() == b"LOAD":
            self._learn(args[2])  # Redlock loads its scripts so after NOSCRIPT
            return None
        if cmd == b"EVAL":
            self._learn(args[1])
            name = self.shas.get(hashlib.sha1(args[1]).hexdigest().encode())
        elif cmd == b"EVALSHA":
            name = self.shas.get(args[1].lower())
        else:
            return None
        if name is None:
            return None
        verb = verb_of(name, args)
        return None if verb is None else (verb, name)

    async def _pipe_s2c(self, sr: asyncio.StreamReader, cw: asyncio.StreamWriter,
                        state: Dict[str, bool]) -> None:
        try:
            while True:
                data = await sr.read(65536)
                if not data:
                    break
                if state["drop"]:
                    continue
                cw.write(data)
                await cw.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not state["drop"]:
                cw.close()

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            sr, sw = await asyncio.open_connection(*self.target)
        except OSError:
            self._reset(cw)
            return
        self.conns.add(cw)
        state = {"drop": False}
        s2c = asyncio.ensure_future(self._pipe_s2c(sr, cw, state))
        buf = b""
        try:
            while True:
                data = await cr.read(65536)
                if not data:
                    break
                buf += data
                pos = 0
                while True:
                    parsed = parse_command(buf, pos)
                    if parsed is None:
                        break
                    args, end = parsed
                    hit = self._classify(args)
                    if hit and hit[0] in self.verbs and self.p > 0 \
                            and self.rng.random() < self.p:
                        # Forward up to and including this request, swallow
                        # every reply, and reset the client once the server
                        # has had the time to run it.
                        state["drop"] = True
                        if self.left is not None:
                            self.left -= 1
                            if self.left <= 0:
                                self.disarm()
                        sw.write(buf[:end])
                        await sw.drain()
                        await asyncio.sleep(0.1)
                        self.resets[hit[0]] = self.resets.get(hit[0], 0) + 1
                        if self.on_reset:
                            self.on_reset(*hit)
                        self._reset(cw)
                        sw.close()
                        return
                    pos = end
                if pos:
                    sw.write(buf[:pos])
                    await sw.drain()
                    buf = buf[pos:]
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            self.conns.discard(cw)
            s2c.cancel()
            sw.close()
            if not state["drop"]:
                cw.close()

    @staticmethod
    def _reset(w: asyncio.StreamWriter) -> None:
        sock = w.get_extra_info("socket")
        try:
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        w.transport.abort()

    async def _main(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        async with self.server:
            await self.server.serve_forever()

    def start(self) -> Relay:
        def run() -> None:
            self.loop = asyncio.new_event_loop()
            try:
                self.loop.run_until_complete(self._main())
            except asyncio.CancelledError:
                pass
            finally:
                # Let the handlers see their aborted connections and end.
                self.loop.run_until_complete(asyncio.sleep(0.2))
                self.loop.close()
        self.thread = threading.Thread(target=run, name="relay", daemon=True)
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError("the relay did not start")
        return self

    def stop(self) -> None:
        if self.loop is not None and self.server is not None:
            def shut() -> None:
                assert self.server is not None
                for w in list(self.conns):
                    w.transport.abort()
                self.server.close()   # serve_forever() returns
            self.loop.call_soon_threadsafe(shut)
        if self.thread is not None:
            self.thread.join(5)
        time.sleep(0)
