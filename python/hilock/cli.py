"""The ``hilock`` command: run a command under a lock, inspect and release locks.

    hilock run [--ttl S] [--timeout S] [--type lock|fair|semaphore] NAME -- CMD [ARGS...]
    hilock status [--json] NAME
    hilock list [PATTERN]
    hilock release --force [--yes] NAME

See docs/cli.md for the options, the exit status table and examples.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Type, Union

from ._client import Client, default_url
from .errors import (
    AuthenticationError,
    ConnectionError,
    InvalidArgument,
    LockError,
    LockNotOwnedError,
    LockTimeout,
    NoPermissionError,
    UnsupportedError,
    WrongTypeError,
)

PROG = "hilock"

# Exit status (sysexits.h where one fits; see docs/cli.md).
EXIT_OK = 0
EXIT_NOT_HELD = 1          # release: nothing was held; a refused confirmation
EXIT_USAGE = 64            # EX_USAGE: bad command line, bad URL or option
EXIT_DATAERR = 65          # EX_DATAERR: the name holds a lock of another type
EXIT_UNAVAILABLE = 69      # EX_UNAVAILABLE: server unreachable, TLS failure
EXIT_SOFTWARE = 70         # EX_SOFTWARE: any other error Redis or hilock reported
EXIT_BUSY = 75             # EX_TEMPFAIL: not acquired in time (--conflict-exit-code)
EXIT_NOPERM = 77           # EX_NOPERM: authentication or ACL refused
EXIT_LOST = 79             # the lock was lost while the command ran (--lost-exit-code)
EXIT_CANNOT_EXEC = 126     # the command was found but could not be run
EXIT_NOT_FOUND = 127       # the command was not found

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class UsageError(Exception):
    """A bad command line: reported with the usage line, exit 64."""


class Signalled(Exception):
    """A forwarded signal arrived while waiting for the lock."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _say(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


# -- argument parsing ----------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse with exit status 64 (EX_USAGE) for a bad command line."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class _TrialParser(_Parser):
    """A parser whose errors raise (for a trial parse that may be wrong)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _seconds(least: float, what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number of seconds, "
                                             f"got {text!r}") from None
        if math.isnan(value) or math.isinf(value) or value < least or (least == 0 and
                                                                       value < 0):
            raise argparse.ArgumentTypeError(f"{what} must be a finite number of seconds "
                                             f"{'> 0' if least > 0 else '>= 0'}, got {text!r}")
        return value
    return parse


def _int_in(low: int, high: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be {low}..{high}, got {text!r}")
        return value
    return parse


def _signal_or_none(text: str) -> int:
    """A signal by name (TERM, SIGKILL, hup) or number; none: 0."""
    word = text.strip().upper()
    if word == "NONE":
        return 0
    try:
        signum = int(word) if word.isdigit() else int(
            signal.Signals[word if word.startswith("SIG") else "SIG" + word])
    except KeyError:
        signum = 0
    if signum not in signal.valid_signals() or signum == 0:
        raise argparse.ArgumentTypeError(f"--on-parent-death must be a signal (TERM, KILL, "
                                         f"HUP, ... or a number) or none, got {text!r}")
    return signum


def _connection_options(p: argparse.ArgumentParser) -> None:
    """Options every subcommand takes (also accepted before the subcommand).
    Their defaults are SUPPRESS so that one given at either place counts."""
    s = argparse.SUPPRESS
    g = p.add_argument_group("connection")
    g.add_argument("--url", default=s,
                   help="Redis URL (redis://, rediss://, unix://, redis+cluster://, "
                        "redis+sentinel://); default $HILOCK_URL, else $REDIS_URL, "
                        "else redis://127.0.0.1:6379/0")
    g.add_argument("--prefix", default=s, metavar="P",
                   help="key prefix of the locks, 1..64 bytes (default $HILOCK_PREFIX if "
                        "not empty, else hilock:); the same as the services' "
                        "Client(prefix=...)")
    g.add_argument("--connect-timeout", type=_seconds(1e-3, "--connect-timeout"), default=s,
                   metavar="S", help="seconds to connect to Redis (default 2)")
    g.add_argument("--tls-ca-certs", default=s, metavar="FILE",
                   help="CA bundle to verify the server's certificate (rediss://)")
    g.add_argument("--tls-ca-path", default=s, metavar="DIR",
                   help="directory of CA certificates (rediss://)")
    g.add_argument("--tls-cert", default=s, metavar="FILE",
                   help="client certificate for mutual TLS")
    g.add_argument("--tls-key", default=s, metavar="FILE",
                   help="client private key for mutual TLS (its passphrase, if any, "
                        "from $HILOCK_TLS_KEY_PASSWORD)")
    g.add_argument("--tls-verify", choices=("required", "optional", "none"), default=s,
                   help="server certificate verification (default required)")
    g.add_argument("--tls-no-check-hostname", action="store_true", default=s,
                   help="do not require the certificate to name the host dialled")
    g.add_argument("--tls-server-name", default=s, metavar="NAME",
                   help="name to send (SNI) and to expect in the certificate")


def build_parser(cls: Type[_Parser] = _Parser) -> argparse.ArgumentParser:
    parser = cls(
        prog=PROG,
        description="Run a command under a Redis distributed lock, or inspect and "
                    "release locks.",
        epilog="Exit status: the command's own status for 'run' (128+N if it was killed by "
               "signal N); 75 not acquired in time; 79 lock lost while the command ran; "
               "64 usage; 65 wrong lock type; 69 Redis unreachable; 77 authentication "
               "refused; 70 other errors; 126/127 command not executable/not found. "
               "See docs/cli.md.")
    _connection_options(parser)
    from . import __version__
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=cls)
    sub.required = True

    run = sub.add_parser(
        "run", help="run a command while holding a lock",
        usage=f"{PROG} run [OPTIONS] NAME -- CMD [ARGS...]",
        description="Acquire the lock NAME, run CMD while the lock is renewed in the "
                    "background, release it when CMD ends and exit with CMD's status. "
                    "CMD gets $HILOCK_NAME and $HILOCK_FENCE (the fencing token; not set "
                    "for a semaphore). SIGINT, SIGTERM and SIGHUP sent to hilock are "
                    "passed on to CMD.")
    run.add_argument("name", metavar="NAME", help="the lock's name")
    run.add_argument("--type", choices=("lock", "fair", "semaphore"), default="lock",
                     help="lock: exclusive expiring lock (default); fair: exclusive, "
                          "granted in request order; semaphore: at most --permits holders")
    run.add_argument("--permits", type=_int_in(1, 1 << 31, "--permits"), metavar="N",
                     help="the semaphore's limit (with --type semaphore; required there)")
    _hold_options(run)
    _connection_options(run)

    elect = sub.add_parser(
        "elect", help="run a command only while leading an election",
        usage=f"{PROG} elect [OPTIONS] NAME -- CMD [ARGS...]",
        description="Campaign in the election NAME (standbys wait, without polling), run "
                    "CMD while leading (the lead is renewed in the background), resign "
                    "when CMD ends and exit with CMD's status. CMD gets $HILOCK_NAME and "
                    "$HILOCK_FENCE (the lead's fencing token). A lost lead is handled as "
                    "a lost lock is by 'run' (--on-lost). 'hilock status NAME' shows the "
                    "leader.")
    elect.add_argument("name", metavar="NAME", help="the election's name")
    elect.add_argument("--value", default="", metavar="V",
                       help="the value observers of the election see while this "
                            "process leads (default: empty)")
    _hold_options(elect)
    _connection_options(elect)

    status = sub.add_parser("status", help="show one lock",
                            description="Show who holds the lock NAME, its fence, TTL and "
                                        "waiters.")
    status.add_argument("name", metavar="NAME")
    status.add_argument("--json", action="store_true",
                        help="print one JSON object (type, held, holder, fence, ttl, "
                             "waiters, ...)")
    _connection_options(status)

    lst = sub.add_parser("list", help="list locks",
                         description="List the locks whose names match PATTERN: one line "
                                     "each with name, type, state and TTL.")
    lst.add_argument("pattern", metavar="PATTERN", nargs="?", default="*",
                     help="glob pattern over lock names, as Redis SCAN MATCH (default *)")
    _connection_options(lst)

    rel = sub.add_parser("release", help="force-release a lock held by anyone",
                         description="Delete the lock NAME whoever holds it (an operator's "
                                     "tool for a holder that is gone), waking a waiter. "
                                     "Asks for confirmation on stdin, a terminal; "
                                     "without one, refuses unless --yes.")
    rel.add_argument("name", metavar="NAME")
    rel.add_argument("--force", action="store_true",
                     help="required: releasing a lock someone holds breaks their exclusion")
    rel.add_argument("-y", "--yes", action="store_true",
                     help="do not ask for confirmation (required when stdin is not a "
                          "terminal)")
    _connection_options(rel)
    return parser


def _hold_options(p: argparse.ArgumentParser) -> None:
    """The options of a command that runs CMD while it holds (run, elect)."""
    p.add_argument("--ttl", type=_seconds(1e-3, "--ttl"), default=30.0, metavar="S",
                   help="seconds the grant lasts unless renewed; renewed every ttl/3 "
                        "while CMD runs (default 30)")
    p.add_argument("--timeout", type=_seconds(0, "--timeout"), default=None, metavar="S",
                   help="seconds to wait for the lock; 0 tries once (default: wait "
                        "without limit)")
    p.add_argument("--conflict-exit-code", type=_int_in(0, 255, "--conflict-exit-code"),
                   default=EXIT_BUSY, metavar="N",
                   help=f"exit status when the lock is not acquired in time "
                        f"(default {EXIT_BUSY})")
    p.add_argument("--lost-exit-code", type=_int_in(0, 255, "--lost-exit-code"),
                   default=EXIT_LOST, metavar="N",
                   help=f"exit status when the lock was lost while CMD ran "
                        f"(default {EXIT_LOST})")
    p.add_argument("--on-lost", choices=("term", "kill", "ignore"), default="term",
                   help="what to do to CMD if the lock is lost: term sends SIGTERM, then "
                        "SIGKILL after --grace (default); kill sends SIGKILL; ignore lets "
                        "it run on")
    p.add_argument("--grace", type=_seconds(0, "--grace"), default=10.0, metavar="S",
                   help="seconds between SIGTERM and SIGKILL with --on-lost term "
                        "(default 10)")
    p.add_argument("--on-parent-death", type=_signal_or_none, default=None,
                   metavar="SIGNAL|none",
                   help="the signal CMD gets if hilock itself dies (killed with SIGKILL, "
                        "say), so that it never runs on without the lock; none lets it "
                        "run on (default TERM; Linux only)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing when the lock is busy")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The parsed command line; for ``run``, ``args.cmd`` is what follows the
    first ``--``."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        try:
            head = build_parser(_TrialParser).parse_args(argv[:i])
        except UsageError:
            head = None  # not "run ... NAME --": let the full parse report it
        if head is not None and head.command in ("run", "elect"):
            head.cmd = argv[i + 1:]
            return head
    args = build_parser().parse_args(argv)
    if args.command in ("run", "elect"):
        args.cmd = None
    return args


# -- the client ------------------------------------------------------------------


TLS_SCHEMES = ("rediss", "rediss+cluster", "rediss+sentinel")


def _is_tls_url(url: str) -> bool:
    scheme, sep, _ = url.partition("://")
    return bool(sep) and scheme.lower() in TLS_SCHEMES


def make_client(args: argparse.Namespace) -> Client:
    url = getattr(args, "url", None) or default_url()
    tls = _is_tls_url(url)
    kw: Dict[str, Any] = {}
    for opt, key in (("tls_ca_certs", "ssl_ca_certs"), ("tls_ca_path", "ssl_ca_path"),
                     ("tls_cert", "ssl_certfile"), ("tls_key", "ssl_keyfile"),
                     ("tls_verify", "ssl_cert_reqs"), ("tls_server_name", "ssl_server_name"),
                     ("tls_no_check_hostname", "ssl_check_hostname"),
                     ("connect_timeout", "connect_timeout")):
        if hasattr(args, opt):
            if key.startswith("ssl_") and not tls:
                raise UsageError(f"--{opt.replace('_', '-')} is a TLS option, but the URL "
                                 "is not a TLS one: use rediss:// (or rediss+cluster://, "
                                 "rediss+sentinel://)")
            kw[key] = False if opt == "tls_no_check_hostname" else getattr(args, opt)
    # --prefix as given ('' is refused, as Client(prefix='') is); an empty
    # $HILOCK_PREFIX counts as unset.
    prefix = getattr(args, "prefix", None)
    if prefix is None:
        prefix = os.environ.get("HILOCK_PREFIX") or None
    if prefix is not None:
        kw["prefix"] = prefix
    password = os.environ.get("HILOCK_TLS_KEY_PASSWORD")
    if password and tls:
        kw["ssl_password"] = password
    return Client(url, **kw)


def error_status(e: BaseException) -> int:
    """The exit status for an error hilock reported."""
    if isinstance(e, (AuthenticationError, NoPermissionError)):
        return EXIT_NOPERM
    if isinstance(e, ConnectionError):
        return EXIT_UNAVAILABLE
    if isinstance(e, WrongTypeError):
        return EXIT_DATAERR
    if isinstance(e, (InvalidArgument, UnsupportedError)):
        return EXIT_USAGE
    return EXIT_SOFTWARE


# -- run -------------------------------------------------------------------------


def _exit_status(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128+N for a
    command killed by signal N."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return EXIT_SOFTWARE  # stopped/continued: waitpid without WUNTRACED never reports these


_Handler = Union[Callable[[int, Optional[FrameType]], Any], int, None]


class _Signals:
    """Replace the handlers of some signals and restore them on exit. A
    signal that was ignored when hilock started stays ignored (so CMD
    inherits that too), unless ``always``: SIGCHLD must be caught even if
    the caller ignored it (an ignored SIGCHLD reaps children unasked)."""

    def __init__(self, handler: Callable[[int, Optional[FrameType]], Any],
                 signums: Sequence[int], always: bool = False) -> None:
        self._old: Dict[int, _Handler] = {}
        for s in signums:
            old = signal.getsignal(s)
            if old == signal.SIG_IGN and not always:
                continue
            self._old[s] = signal.signal(s, handler)

    def switch(self, handler: Callable[[int, Optional[FrameType]], Any]) -> None:
        """Another handler for the same signals (the first originals kept)."""
        for s in self._old:
            signal.signal(s, handler)

    def restore(self) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old.clear()


def _raise_signalled(signum: int, frame: Optional[FrameType]) -> NoReturn:
    raise Signalled(signum)


def _check_type(args: argparse.Namespace) -> None:
    if args.command == "elect":
        return
    if args.type == "semaphore" and args.permits is None:
        raise UsageError("--type semaphore needs --permits N")
    if args.type != "semaphore" and args.permits is not None:
        raise UsageError("--permits applies to --type semaphore only")


def _make_lock(client: Client, args: argparse.Namespace,
               on_lost: Callable[[Any], object]) -> Any:
    name = _name(args.name)
    kw: Dict[str, Any] = {"ttl": args.ttl, "timeout": args.timeout, "on_lost": on_lost}
    if args.command == "elect":
        return _Campaign(client.election(name, **kw), os.fsencode(args.value))
    if args.type == "semaphore":
        return client.semaphore(name, args.permits, **kw)
    if args.type == "fair":
        return client.fair_lock(name, **kw)
    return client.lock(name, **kw)


class _Campaign:
    """An election's campaign with the lock verbs 'run' uses."""

    def __init__(self, election: Any, value: bytes) -> None:
        self.election = election
        self.value = value

    def acquire(self) -> bool:
        try:
            self.election.campaign(self.value)
        except LockTimeout:
            return False
        return True

    def release(self) -> None:
        self.election.release()

    @property
    def fence(self) -> Optional[int]:
        return self.election.fence  # type: ignore[no-any-return]


# What the command's process runs first when it must not outlive hilock: a
# tiny exec wrapper (nothing runs between fork and exec in hilock, whose
# threads might hold a lock there) that asks Linux to send it the signal when
# hilock dies (PR_SET_PDEATHSIG, kept across exec), stops at once if hilock
# died before that request took effect, and execs CMD in the same process.
_GUARD = r"""
import signal, sys
sig, parent, cmd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
for s in (signal.SIGPIPE, signal.SIGXFSZ):  # as subprocess leaves them to CMD
    signal.signal(s, signal.SIG_DFL)
import ctypes, os
if ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0) != 0:
    sys.stderr.write("hilock: prctl(PR_SET_PDEATHSIG): %s\n"
                     % os.strerror(ctypes.get_errno()))
    os._exit(70)
if os.getppid() != parent:
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)
try:
    os.execvp(cmd[0], cmd)
except FileNotFoundError:
    sys.stderr.write("hilock: %s: command not found\n" % cmd[0])
    os._exit(127)
except OSError as e:
    sys.stderr.write("hilock: %s: %s\n" % (cmd[0], e.strerror or e))
    os._exit(126)
"""


def _guarded(cmd: List[str], signum: int) -> List[str]:
    """The argv that runs cmd so that it gets signum when hilock dies."""
    return [sys.executable, "-I", "-S", "-c", _GUARD, str(int(signum)), str(os.getpid()), *cmd]


def _parent_death_signal(args: argparse.Namespace) -> int:
    """The signal CMD gets when hilock dies; 0: none."""
    signum: Optional[int] = args.on_parent_death
    if not sys.platform.startswith("linux"):
        if signum:
            raise UsageError("--on-parent-death needs Linux (PR_SET_PDEATHSIG); pass "
                             "--on-parent-death none")
        return 0
    return signal.SIGTERM if signum is None else signum


class _Child:
    """CMD, and the loop that waits for it to end, for signals to pass on,
    and for the lock's loss, all on one pipe: the signal wakeup fd (SIGCHLD
    and the forwarded signals) and the loss callback write to it, and the
    loop sleeps in poll() until one of them does (or the --grace deadline)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lost = threading.Event()
        self.done = False
        self.wake_r, self.wake_w = os.pipe()  # not inherited by CMD (PEP 446)
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.pending: List[int] = []
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def close(self) -> None:
        self.done = True
        os.close(self.wake_r)
        os.close(self.wake_w)

    def on_lost(self, _lock: Any) -> None:
        # On hilock's loss-report thread: wake the main loop.
        self.lost.set()
        if not self.done:
            try:
                os.write(self.wake_w, b"L")
            except OSError:
                pass  # the pipe is full: the loop is awake anyway

    def on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        # Runs in the main thread between the loop's steps; the loop passes
        # it on (the wakeup fd makes its poll() return).
        if signum != signal.SIGCHLD:
            self.pending.append(signum)

    def _kill(self, signum: int) -> None:
        assert self.proc is not None
        try:
            os.kill(self.proc.pid, signum)
        except ProcessLookupError:
            pass  # ended already: waitpid reports it next

    def run(self, cmd: List[str], env: Dict[str, str]) -> int:
        """Start CMD and wait for it; its exit status as a shell gives it."""
        old_wakeup = signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        handlers = _Signals(self.on_signal, (signal.SIGCHLD,), always=True)
        try:
            try:
                # close_fds=False: descriptors the caller gave (3>file) reach
                # CMD; hilock's own are close-on-exec.
                signum = _parent_death_signal(self.args)
                argv = _guarded(cmd, signum) if signum else cmd
                self.proc = subprocess.Popen(argv, env=env, close_fds=False)
            except FileNotFoundError:
                _say(f"{cmd[0]}: command not found")
                return EXIT_NOT_FOUND
            except OSError as e:
                _say(f"{cmd[0]}: {e.strerror or e}")
                return EXIT_CANNOT_EXEC
            return _exit_status(self._wait())
        finally:
            handlers.restore()
            signal.set_wakeup_fd(old_wakeup)

    def _wait(self) -> int:
        """Wait for CMD to end, passing signals on and acting on loss; its
        wait status."""
        assert self.proc is not None
        pid = self.proc.pid
        poller = select.poll()
        poller.register(self.wake_r, select.POLLIN)
        kill_at: Optional[float] = None
        acted = False
        while True:
            for s in self.pending:
                self._kill(s)
            self.pending.clear()
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                self.proc.returncode = _exit_status(status)
                return status
            if self.lost.is_set() and not acted:
                acted = True
                how = self.args.on_lost
                _say(f"lost the lock {self.args.name!r} while the command ran"
                     + {"term": "; sending SIGTERM to it", "kill": "; killing it",
                        "ignore": "; letting it run on (--on-lost ignore)"}[how])
                if how == "term":
                    self._kill(signal.SIGTERM)
                    kill_at = time.monotonic() + self.args.grace
                elif how == "kill":
                    self._kill(signal.SIGKILL)
            if kill_at is not None and time.monotonic() >= kill_at:
                _say(f"the command outlived --grace {self.args.grace:g} s; sending SIGKILL")
                self._kill(signal.SIGKILL)
                kill_at = None
            wait_ms = None if kill_at is None else max(0, math.ceil(
                (kill_at - time.monotonic()) * 1000))
            poller.poll(wait_ms)
            try:
                os.read(self.wake_r, 4096)  # drain: the loop looks at every source
            except BlockingIOError:
                pass


def cmd_run(args: argparse.Namespace) -> int:
    cmd: Optional[List[str]] = args.cmd
    if not cmd:
        raise UsageError("run needs a command after '--': hilock run NAME -- CMD [ARGS...]")
    _check_type(args)
    _parent_death_signal(args)
    args.tracing = _tracing()
    child = _Child(args)
    client = make_client(args)
    try:
        lk = _make_lock(client, args, child.on_lost)
        # While waiting, INT/TERM/HUP end the wait (the library's wait runs
        # signal handlers); once granted they are recorded for CMD instead.
        handlers = _Signals(_raise_signalled, FORWARDED)
        try:
            try:
                if not lk.acquire():
                    if not args.quiet:
                        timeout = "" if args.timeout is None else f" within {args.timeout:g} s"
                        what = ("election {!r}: another leads, not led{}" if args.command ==
                                "elect" else "lock {!r} is busy: not acquired{}")
                        _say(what.format(args.name, timeout))
                    return int(args.conflict_exit_code)
                handlers.switch(child.on_signal)
            except Signalled as e:
                _release(lk)  # a grant the signal raced, if any
                return 128 + e.signum
            try:
                status = child.run(cmd, _child_env(args, lk))
            finally:
                lost_at_release = _release(lk)
        finally:
            handlers.restore()
        if child.lost.is_set() or lost_at_release:
            if not child.lost.is_set():
                _say(f"lost the lock {args.name!r} while the command ran "
                     "(found at release)")
            return int(args.lost_exit_code)
        return status
    finally:
        client.close()
        child.close()


# Secrets hilock reads for itself, never passed on to CMD.
CHILD_ENV_DROPPED = ("HILOCK_TLS_KEY_PASSWORD",)


def _child_env(args: argparse.Namespace, lk: Any) -> Dict[str, str]:
    env = dict(os.environ)
    for var in CHILD_ENV_DROPPED:
        env.pop(var, None)
    env["HILOCK_NAME"] = args.name
    fence = lk.fence
    if fence is not None:
        env["HILOCK_FENCE"] = str(fence)
    else:
        env.pop("HILOCK_FENCE", None)
    tracing = getattr(args, "tracing", None)
    if tracing is not None:
        # The command runs in the grant's hold span (as its child).
        span = tracing.hold_span(getattr(lk, "election", lk))
        tracing.inject_env(env, None if span is None else tracing.trace.set_span_in_context(span))
    return env


def _tracing() -> Any:
    """hilock.tracing, instrumented, with the trace context of $TRACEPARENT
    made current, when a trace context came in or OpenTelemetry was set up
    in this process (``opentelemetry-instrument hilock run ...``); else
    None. Without OpenTelemetry a $TRACEPARENT reaches the command as it
    came."""
    otel = sys.modules.get("opentelemetry.trace")
    configured = otel is not None and not isinstance(otel.get_tracer_provider(),
                                                      otel.ProxyTracerProvider)
    if not os.environ.get("TRACEPARENT") and not configured:
        return None
    try:
        from opentelemetry import context

        from . import tracing
    except ImportError:
        return None
    tracing.instrument()
    if os.environ.get("TRACEPARENT"):
        context.attach(tracing.extract_env(os.environ))
    return tracing


def _release(lk: Any) -> bool:
    """Release lk after CMD ended; True if it turned out to be lost."""
    try:
        lk.release()
    except LockNotOwnedError:
        return True
    except LockError as e:
        _say(f"could not release the lock (it lapses at its TTL): {e}")
    return False


# -- status, list, release ----------------------------------------------------------


def _text(value: Any) -> str:
    """Printable text: bytes that are not UTF-8 (also as surrogate escapes
    in a str, as names read from the server or argv come) as \\x escapes."""
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogateescape")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "backslashreplace")
    return str(value)


def _name(text: str) -> bytes:
    """A name from the command line as the bytes given (argv is decoded
    with surrogate escapes)."""
    return os.fsencode(text)


def _short(token: Any) -> str:
    t = _text(token)
    return t if len(t) <= 12 else t[:8] + "..."


def _ttl_text(ttl: Optional[float]) -> str:
    return "-" if ttl is None else f"{ttl:.1f}s"


def _state(info: Any) -> str:
    """One word or two for the lock's state, by its type."""
    permits = getattr(info, "permits", None)
    if permits is not None:
        return f"{getattr(info, 'permits_used', 0) or 0}/{permits} used"
    if getattr(info, "writer", None):
        return "write-held"
    readers = getattr(info, "readers", None)
    if readers:
        return f"read-held x{readers}"
    return "held" if info.held else "free"


def _info_dict(info: Any) -> Dict[str, Any]:
    d = dict(info.as_dict())
    for k in ("name", "type", "held", "holder", "fence", "ttl", "waiters"):
        d.setdefault(k, getattr(info, k, None))
    return {k: _text(v) if isinstance(v, (bytes, bytearray)) else v for k, v in d.items()}


def cmd_status(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        c: Any = client  # inspect() and LockInfo: see docs/cli.md
        info = c.inspect(_name(args.name))
        # An election's leader: its value too (a second round trip).
        lead = c.election(_name(args.name)).leader() if info.type == "election" else None
        if args.json:
            d = _info_dict(info)
            if info.type == "election":
                d["leader"] = None if lead is None else _text(lead[0])
            print(json.dumps(d, sort_keys=True))
            return EXIT_OK
        rows = [("name", _text(info.name)), ("type", _text(info.type)),
                ("state", "led" if lead is not None else _state(info))]
        if lead is not None:
            rows.append(("leader", _text(lead[0])))
        if info.holder:
            rows.append(("holder", _short(info.holder)))
        if info.fence is not None:
            rows.append(("fence", str(info.fence)))
        rows.append(("ttl", _ttl_text(info.ttl)))
        for attr in ("waiters", "hold_count", "readers", "permits", "permits_used",
                     "permits_free"):
            value = getattr(info, attr, None)
            if value is not None and not (attr == "hold_count" and not info.held):
                rows.append((attr.replace("_", " "), str(value)))
        delay = getattr(info, "lock_delay", None)
        if delay is not None:
            left = getattr(info, "delay_left", None)
            # While held: when the delay would end if the holder were lost now.
            rows.append(("lock delay", f"{delay:g}s, ends in {_ttl_text(left)}"
                         + (" if the holder is lost" if info.held else "")))
        width = max(len(k) for k, _ in rows) + 1
        for k, v in rows:
            print(f"{k + ':':<{width}} {v}")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        c: Any = client
        rows = [(_text(i.name), _text(i.type), _state(i), _ttl_text(i.ttl))
                for i in c.list_locks(_name(args.pattern))]
    rows.sort()
    if rows:
        widths = [max(len(r[k]) for r in rows) for k in range(3)]
        for r in rows:
            print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}")
    return EXIT_OK


def _confirm(question: str) -> bool:
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def cmd_release(args: argparse.Namespace) -> int:
    if not args.force:
        raise UsageError("release deletes the lock whoever holds it: pass --force "
                         "to confirm that this is what you want")
    if not args.yes and not sys.stdin.isatty():
        raise UsageError("release asks for confirmation on a terminal, and stdin is not "
                         "one: pass --yes to release without asking")
    with make_client(args) as client:
        c: Any = client
        if not args.yes and sys.stdin.isatty():
            info = c.inspect(_name(args.name))
            who = f" (held by {_short(info.holder)})" if info.holder else ""
            if not _confirm(f"force-release lock {args.name!r}{who}?"):
                _say("not released")
                return EXIT_NOT_HELD
        if c.force_release(_name(args.name)):
            _say(f"released {args.name!r}")
            return EXIT_OK
    _say(f"{args.name!r} was not held")
    return EXIT_NOT_HELD


COMMANDS: Dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run, "elect": cmd_run, "status": cmd_status, "list": cmd_list,
    "release": cmd_release,
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``hilock`` command; returns the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return COMMANDS[args.command](args)
    except UsageError as e:
        _say(f"error: {e}")
        return EXIT_USAGE
    except LockError as e:
        _say(f"error: {e}")
        return error_status(e)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except BrokenPipeError:
        # Output piped into a command that stopped reading (hilock list | head).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
