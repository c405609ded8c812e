"""The ``hilock`` command, run as a real process (``python -m hilock``, so
the package on PYTHONPATH or the installed one) against the session's
redis-server: exclusion between concurrent ``hilock run`` processes (exact
counter, history of windows, increasing fences), exit status pass-through,
the busy and error codes, signals passed on to the command, the command
stopped when the lock is lost, the fair and semaphore types, and the
status/list/release subcommands."""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

import hilock
from helpers import free_port
from history import Interval, check_fences_increase, check_max_concurrent, check_no_overlap
from tlsutil import TLSServer, make_pki

# Safety limits for a stuck run (a failure, never a measured duration).
DEADLINE = 60.0

# The command run under the lock: one critical section, recorded as an
# interval (monotonic clock, shared by the processes of one machine) with
# the fence it was given; with a counter file it does read-sleep-write.
CRITICAL = r"""
import json, os, sys, time
counter, log, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
start = time.monotonic()
if counter != "-":
    with open(counter) as f:
        n = int(f.read() or 0)
    time.sleep(pause)
    with open(counter, "w") as f:
        f.write(str(n + 1))
else:
    time.sleep(pause)
end = time.monotonic()
fence = os.environ.get("HILOCK_FENCE")
line = json.dumps({"pid": os.getpid(), "start": start, "end": end,
                   "fence": None if fence is None else int(fence)}) + "\n"
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, line.encode())
os.close(fd)
"""


def hilock_argv(*args: str) -> List[str]:
    return [sys.executable, "-m", "hilock", *args]


def cli_env(url: Optional[str], **extra: str) -> Dict[str, str]:
    """The environment of a hilock process: the test's (with PYTHONPATH, so
    the package under test is found), $HILOCK_URL set to url."""
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    env.pop("HILOCK_URL", None)
    if url is not None:
        env["HILOCK_URL"] = url
    env.update(extra)
    return env


def run_cli(url: Optional[str], *args: str, input: Optional[str] = None,
            **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(hilock_argv(*args), env=cli_env(url, **extra), input=input,
                          capture_output=True, text=True, timeout=DEADLINE)


def _default_signals() -> None:
    """In the hilock process: SIGHUP as a shell gets it. A suite started
    under nohup would pass SIGHUP on ignored, and a shell cannot trap a
    signal ignored on entry, so the tests that send HUP need this."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def start_cli(url: str, *args: str, stdin: Optional[int] = None) -> subprocess.Popen:
    """A hilock process whose stdout is a pipe (its command says "ready" on it)."""
    return subprocess.Popen(hilock_argv(*args), env=cli_env(url), stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_signals)


def read_line(proc: subprocess.Popen) -> str:
    """The next line proc writes (blocking, with a safety deadline)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], DEADLINE)
    assert ready, "the command never reported"
    return proc.stdout.readline()


@contextlib.contextmanager
def holding(url: str, name: str, *opts: str, sig: int = signal.SIGTERM,
            expect: Optional[int] = None) -> Iterator[str]:
    """For the with block, a ``hilock run`` holding NAME whose command
    sleeps; yields the fence it was given ("none" for a semaphore). Then
    sig is sent to hilock, which passes it on: it must exit with expect
    (default 128+sig, the sleep's death)."""
    proc = start_cli(url, "run", *opts, name, "--", "sh", "-c",
                     'echo "ready ${HILOCK_FENCE-none}"; exec sleep 60')
    try:
        line = read_line(proc)
        assert line.startswith("ready "), line
        yield line.split()[1]
    finally:
        proc.send_signal(sig)
        r = finish(proc)
    assert r.returncode == (128 + sig if expect is None else expect), r.stderr


def finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def trap_and_wait(got: Path, sig: str, code: int) -> str:
    """A sh script that prints "ready" and waits; on SIG it writes SIG to
    got and exits with code. Its sleep dies by KILL and holds no pipe: a
    TERM reaching sh's background child between its fork and its exec is
    lost, and the sleep would then keep our pipe open for its minute."""
    return (f'trap \'echo {sig} > "{got}"; kill -KILL $!; exit {code}\' {sig}; '
            'sleep 60 </dev/null >/dev/null 2>&1 & echo ready; wait')


def no_traceback(r: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in (r.stderr or ""), r.stderr


def lock_key(client: hilock.Client, name: str, kind: str = "lock") -> bytes:
    if kind == "semaphore":
        return client.semaphore(name, 1).key
    return (client.fair_lock(name) if kind == "fair" else client.lock(name)).key


@pytest.fixture
def crit(tmp_path: Path) -> Path:
    p = tmp_path / "critical.py"
    p.write_text(CRITICAL)
    return p


def read_intervals(log: Path) -> List[Interval]:
    return [Interval.from_json(line) for line in log.read_text().splitlines()]


def workers(url: str, n: int, rounds: int, run_args: Sequence[str],
            cmd: Sequence[str]) -> List[int]:
    """n shells, each running ``hilock run RUN_ARGS -- CMD`` rounds times in
    a row (stopping at the first failure); their exit statuses."""
    loop = ('i=0; while [ "$i" -lt "$0" ]; do "$@" || exit $?; i=$((i+1)); done')
    argv = ["sh", "-c", loop, str(rounds), *hilock_argv("run", *run_args, "--", *cmd)]
    procs = [subprocess.Popen(argv, env=cli_env(url)) for _ in range(n)]
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=DEADLINE * 2))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    return codes


# -- help and usage -----------------------------------------------------------------


@pytest.mark.parametrize("sub", [[], ["run"], ["status"], ["list"], ["release"]])
def test_help(sub: List[str]) -> None:
    r = run_cli(None, *sub, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: hilock")
    assert "--url" in r.stdout
    if sub == ["run"]:
        for opt in ("--ttl", "--timeout", "--type", "--permits", "--grace", "--on-lost",
                    "--conflict-exit-code"):
            assert opt in r.stdout


@pytest.mark.parametrize("args", [
    [],                                              # no subcommand
    ["run", "x"],                                    # no command
    ["run", "x", "--"],                              # empty command
    ["run", "--ttl", "0", "x", "--", "true"],        # bad number
    ["run", "--timeout", "-1", "x", "--", "true"],
    ["run", "--type", "semaphore", "x", "--", "true"],  # no --permits
    ["run", "--permits", "2", "x", "--", "true"],       # --permits without semaphore
    ["run", "--conflict-exit-code", "300", "x", "--", "true"],
    ["release", "x"],                                # no --force
    ["frobnicate"],
])
def test_usage_errors(redis_url: str, args: List[str]) -> None:
    r = run_cli(redis_url, *args)
    assert r.returncode == 64, (r.returncode, r.stderr)
    assert "hilock" in r.stderr
    no_traceback(r)


# -- connection errors ------------------------------------------------------------------


def test_bad_url() -> None:
    r = run_cli(None, "--url", "bogus://x", "run", "x", "--", "true")
    assert r.returncode == 64, r.stderr
    assert "URL" in r.stderr
    no_traceback(r)


def test_unreachable_server(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    url = f"redis://127.0.0.1:{free_port()}"
    r = run_cli(None, "run", "--url", url, "x", "--", "touch", str(marker))
    assert r.returncode == 69, r.stderr
    assert "refused" in r.stderr.lower()
    assert not marker.exists()
    no_traceback(r)
    # The same through $REDIS_URL, before the subcommand as well.
    r = run_cli(None, "status", "x", REDIS_URL=url)
    assert r.returncode == 69, r.stderr
    no_traceback(r)


def test_url_sources(redis_url: str, tmp_path: Path) -> None:
    """--url wins over $HILOCK_URL, which wins over $REDIS_URL."""
    bad = f"redis://127.0.0.1:{free_port()}"
    assert run_cli(bad, "--url", redis_url, "run", "x", "--", "true").returncode == 0
    assert run_cli(bad, "run", "x", "--url", redis_url, "--", "true").returncode == 0
    assert run_cli(redis_url, "run", "x", "--", "true", REDIS_URL=bad).returncode == 0
    assert run_cli(None, "run", "x", "--", "true", REDIS_URL=redis_url).returncode == 0
    assert run_cli(bad, "run", "x", "--", "true", REDIS_URL=redis_url).returncode == 69


def test_mutual_tls_options() -> None:
    """The TLS options reach the client: a server that requires a client
    certificate, with the CA, certificate and an encrypted key."""
    pki = make_pki()
    try:
        with TLSServer(pki, auth_clients="yes") as srv:
            tls = ["--tls-ca-certs", pki.path("ca.crt"), "--tls-cert", pki.path("client.crt"),
                   "--tls-key", pki.path("client-enc.key")]
            r = run_cli(None, "run", "--url", srv.url, *tls, "t", "--", "echo", "in",
                        HILOCK_TLS_KEY_PASSWORD="s3cret")
            assert (r.returncode, r.stdout) == (0, "in\n"), r.stderr
            # Without the CA the server's certificate is refused: unreachable.
            r = run_cli(None, "run", "--url", srv.url, *tls[2:], "t", "--", "true",
                        HILOCK_TLS_KEY_PASSWORD="s3cret")
            assert r.returncode == 69, r.stderr
            assert "certificate" in r.stderr.lower()
            no_traceback(r)
    finally:
        shutil.rmtree(pki.dir, ignore_errors=True)


# -- run: exclusion, fences, exit status --------------------------------------------------


@pytest.mark.parametrize("kind", ["lock", "fair"])
def test_concurrent_runs_exclude(rds, client, redis_url: str, tmp_path: Path, crit: Path,
                                 kind: str) -> None:
    counter, log = tmp_path / "counter", tmp_path / "log"
    counter.write_text("0")
    n, rounds = 4, 4
    codes = workers(redis_url, n, rounds, ["--type", kind, "--ttl", "5", "count"],
                    [sys.executable, str(crit), str(counter), str(log), "0.05"])
    assert codes == [0] * n
    # Read-sleep-write loses updates unless the sections exclude each other.
    assert int(counter.read_text()) == n * rounds
    ivs = read_intervals(log)
    assert len(ivs) == n * rounds
    check_no_overlap(ivs)
    check_fences_increase(ivs)  # HILOCK_FENCE given to every run, increasing
    assert not rds.exists(lock_key(client, "count", kind))  # the last run released


def test_fence_and_name_in_environment(redis_url: str) -> None:
    show = ["sh", "-c", 'echo "$HILOCK_NAME $HILOCK_FENCE"']
    first = run_cli(redis_url, "run", "job:1", "--", *show)
    second = run_cli(redis_url, "run", "job:1", "--", *show)
    assert first.returncode == 0 and second.returncode == 0
    (n1, f1), (n2, f2) = first.stdout.split(), second.stdout.split()
    assert n1 == n2 == "job:1"
    assert int(f2) > int(f1) > 0


@pytest.mark.parametrize("code", [0, 1, 3, 42, 255])
def test_exit_status_passed_through(redis_url: str, code: int) -> None:
    r = run_cli(redis_url, "run", "x", "--", "sh", "-c", f"exit {code}")
    assert r.returncode == code, r.stderr
    assert r.stderr == ""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
def test_killed_command_gives_128_plus_signal(redis_url: str, sig: int) -> None:
    r = run_cli(redis_url, "run", "x", "--", "sh", "-c", f"kill -{int(sig)} $$")
    assert r.returncode == 128 + sig, r.stderr


def test_command_not_found_or_not_executable(redis_url: str, tmp_path: Path) -> None:
    r = run_cli(redis_url, "run", "x", "--", str(tmp_path / "no-such-command"))
    assert r.returncode == 127
    assert "not found" in r.stderr
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    r = run_cli(redis_url, "run", "x", "--", str(script))
    assert r.returncode == 126
    no_traceback(r)
    # The lock was released in both cases.
    assert run_cli(redis_url, "run", "--timeout", "0", "x", "--", "true").returncode == 0


def test_descriptors_and_raw_names_reach_the_command(rds, client, redis_url: str,
                                                     tmp_path: Path) -> None:
    """A descriptor the caller passes (3>file) stays open in the command,
    and a name that is not UTF-8 is the lock's name byte for byte."""
    out = tmp_path / "out"
    raw = b"raw:\xff"
    with open(out, "w") as f:
        fd = f.fileno()
        r = subprocess.run([os.fsencode(a) for a in hilock_argv("run")]
                           + [raw, b"--", os.fsencode(sys.executable), b"-c",
                              b"import os, sys; "
                              b"os.write(int(sys.argv[1]), os.environb[b'HILOCK_NAME'])",
                              str(fd).encode()],
                           env=cli_env(redis_url), pass_fds=(fd,), capture_output=True,
                           timeout=DEADLINE)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == raw
    # The lock held is the one named raw, byte for byte.
    with holding(redis_url, os.fsdecode(raw)):
        assert rds.exists(client.lock(raw).key)


def test_busy_returns_at_once_with_timeout_0(redis_url: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with holding(redis_url, "busy"):
        r = run_cli(redis_url, "run", "--timeout", "0", "busy", "--", "touch", str(marker))
        assert r.returncode == 75, r.stderr
        assert "busy" in r.stderr
        r = run_cli(redis_url, "run", "--timeout", "0", "--conflict-exit-code", "9", "-q",
                    "busy", "--", "touch", str(marker))
        assert (r.returncode, r.stderr) == (9, "")
        r = run_cli(redis_url, "run", "--timeout", "0.2", "busy", "--", "touch", str(marker))
        assert r.returncode == 75
        assert not marker.exists()
    # Released: the next one gets it at once.
    assert run_cli(redis_url, "run", "--timeout", "0", "busy", "--", "true").returncode == 0


def test_waiter_runs_after_holder(redis_url: str, tmp_path: Path) -> None:
    """Without --timeout a run waits for the holder's release."""
    with holding(redis_url, "w", sig=signal.SIGHUP):
        # It waits (blocked before its command) until the holder is gone.
        waiter = start_cli(redis_url, "run", "w", "--", "echo", "second")
    w = finish(waiter)
    assert (w.returncode, w.stdout) == (0, "second\n")


# -- signals ---------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_forwarded(redis_url: str, tmp_path: Path, sig: int) -> None:
    got = tmp_path / "got"
    name = signal.Signals(sig).name[3:]
    script = trap_and_wait(got, name, 7)
    proc = start_cli(redis_url, "run", "sig", "--", "sh", "-c", script)
    try:
        assert read_line(proc) == "ready\n"
        proc.send_signal(sig)
    finally:
        r = finish(proc)
    assert r.returncode == 7, r.stderr
    assert got.read_text() == f"{name}\n"
    assert run_cli(redis_url, "run", "--timeout", "0", "sig", "--", "true").returncode == 0


def test_signal_while_waiting_ends_the_wait(client, redis_url: str, tmp_path: Path) -> None:
    """A signal while hilock waits in the (fair) queue ends the wait with
    128+N; the command never runs and the waiter leaves the queue."""
    marker = tmp_path / "ran"
    fl = client.fair_lock("sw")
    with holding(redis_url, "sw", "--type", "fair"):
        waiter = subprocess.Popen(hilock_argv("run", "--type", "fair", "sw", "--", "touch",
                                              str(marker)),
                                  env=cli_env(redis_url), stderr=subprocess.PIPE, text=True)
        try:
            # Queued means waiting inside acquire (handlers set before it).
            deadline = time.monotonic() + DEADLINE
            while fl.waiters() == 0:
                assert time.monotonic() < deadline and waiter.poll() is None
                time.sleep(0.05)
            waiter.send_signal(signal.SIGTERM)
        finally:
            w = finish(waiter)
        assert w.returncode == 128 + signal.SIGTERM, w.stderr
        assert fl.waiters() == 0
    assert not marker.exists()
    no_traceback(w)


# -- loss ---------------------------------------------------------------------------------




@pytest.mark.parametrize("kind,how", [("lock", "delete"), ("lock", "overwrite"),
                                      ("fair", "delete"), ("semaphore", "delete")])
def test_lost_lock_stops_command(rds, client, redis_url: str, tmp_path: Path,
                                 kind: str, how: str) -> None:
    got = tmp_path / "got"
    permits = ["--permits", "2"] if kind == "semaphore" else []
    proc = start_cli(redis_url, "run", "--type", kind, *permits, "--ttl", "1", "lost", "--",
                     "sh", "-c", trap_and_wait(got, "TERM", 5))
    try:
        assert read_line(proc) == "ready\n"
        key = lock_key(client, "lost", kind)
        assert rds.exists(key)
        if how == "delete":
            rds.delete(key)
        else:
            rds.set(key, "someone-else")
    finally:
        r = finish(proc)
    assert r.returncode == 79, r.stderr
    assert "lost" in r.stderr
    assert got.read_text() == "TERM\n"
    if how == "overwrite":
        assert rds.get(key) == b"someone-else"  # the other owner's lock untouched
    no_traceback(r)


@pytest.mark.parametrize("opts,says", [
    (["--on-lost", "kill", "--grace", "600"], "killing"),  # SIGKILL at once
    (["--grace", "0.5"], "SIGKILL"),                      # SIGTERM, SIGKILL after --grace
])
def test_lost_lock_kills_a_command_that_ignores_term(rds, client, redis_url: str,
                                                     opts: List[str], says: str) -> None:
    proc = start_cli(redis_url, "run", "--ttl", "1", *opts, "lk", "--",
                     "sh", "-c", "trap '' TERM; echo ready; exec sleep 60")
    try:
        assert read_line(proc) == "ready\n"
        rds.delete(lock_key(client, "lk"))
    finally:
        r = finish(proc)
    assert r.returncode == 79, r.stderr
    assert says in r.stderr


def test_lost_lock_on_lost_ignore(rds, client, redis_url: str, tmp_path: Path) -> None:
    """--on-lost ignore lets the command finish; hilock still reports the
    loss with its own status, and --lost-exit-code changes it."""
    done = tmp_path / "done"
    proc = start_cli(redis_url, "run", "--ttl", "1", "--on-lost", "ignore",
                     "--lost-exit-code", "33", "li", "--", "sh", "-c",
                     f'echo ready; read x; touch "{done}"', stdin=subprocess.PIPE)
    try:
        assert read_line(proc) == "ready\n"
        rds.delete(lock_key(client, "li"))
        # The loss is reported on stderr while the command runs on.
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], DEADLINE)
        assert ready
        assert "lost" in proc.stderr.readline()
        assert not done.exists()
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    finally:
        r = finish(proc)
    assert r.returncode == 33, r.stderr
    assert done.exists()  # the command ran to its end


# -- fair and semaphore --------------------------------------------------------------------


def test_semaphore_admits_permits_and_no_more(redis_url: str) -> None:
    sem = ("--type", "semaphore", "--permits", "2")
    with contextlib.ExitStack() as stack:
        for _ in range(2):  # two are inside at once, with no fence
            assert stack.enter_context(holding(redis_url, "sem", *sem)) == "none"
        r = run_cli(redis_url, "run", *sem, "--timeout", "0", "sem", "--", "true")
        assert r.returncode == 75, r.stderr  # a third is refused
    r = run_cli(redis_url, "run", *sem, "--timeout", "0", "sem", "--", "true")
    assert r.returncode == 0


def test_semaphore_history_never_more_than_permits(redis_url: str, tmp_path: Path,
                                                   crit: Path) -> None:
    log = tmp_path / "log"
    n, rounds = 5, 3
    codes = workers(redis_url, n, rounds,
                    ["--type", "semaphore", "--permits", "2", "--ttl", "5", "semh"],
                    [sys.executable, str(crit), "-", str(log), "0.2"])
    assert codes == [0] * n
    ivs = read_intervals(log)
    assert len(ivs) == n * rounds
    assert all(iv.fence is None for iv in ivs)  # no fence for a semaphore
    check_max_concurrent(ivs, 2)  # raises, listing them, if 3 were ever inside


def test_fair_lock_busy_and_release(redis_url: str) -> None:
    with holding(redis_url, "fq", "--type", "fair") as fence:
        assert int(fence) > 0
        r = run_cli(redis_url, "run", "--type", "fair", "--timeout", "0", "fq", "--", "true")
        assert r.returncode == 75
    r = run_cli(redis_url, "run", "--type", "fair", "--timeout", "0", "fq", "--", "true")
    assert r.returncode == 0


# -- status, list, release -----------------------------------------------------------------


def test_status_of_a_held_and_a_free_lock(redis_url: str) -> None:
    with holding(redis_url, "st:1", "--ttl", "20") as fence:
        r = run_cli(redis_url, "status", "--json", "st:1")
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        assert (d["type"], d["held"], d["fence"], d["waiters"]) == ("lock", True, int(fence), 0)
        assert 0 < d["ttl"] <= 20
        assert len(d["holder"]) > 12  # the whole token in JSON
        r = run_cli(redis_url, "status", "st:1")
        assert r.returncode == 0, r.stderr
        fields = dict(line.split(":", 1) for line in r.stdout.splitlines())
        assert fields["state"].strip() == "held"
        assert fields["fence"].strip() == fence
        assert fields["holder"].strip() == d["holder"][:8] + "..."  # shortened
    d = json.loads(run_cli(redis_url, "status", "--json", "st:1").stdout)
    assert d["held"] is False
    r = run_cli(redis_url, "status", "st:1")
    assert r.returncode == 0 and "free" in r.stdout


def test_status_of_a_semaphore(client, redis_url: str) -> None:
    with client.semaphore("st:sem", 3):
        d = json.loads(run_cli(redis_url, "status", "--json", "st:sem").stdout)
        assert d["type"] == "semaphore"
        assert (d["permits"], d["permits_used"], d["permits_free"]) == (3, 1, 2)
        r = run_cli(redis_url, "status", "st:sem")
        assert "1/3 used" in r.stdout


def test_list(client, redis_url: str) -> None:
    with holding(redis_url, "ls:a"), client.semaphore("ls:sem", 3), \
            client.fair_lock("other"):
        r = run_cli(redis_url, "list", "ls:*")
        assert r.returncode == 0, r.stderr
        lines = [line.split() for line in r.stdout.splitlines()]
        assert [x[:3] for x in lines] == [["ls:a", "lock", "held"],
                                          ["ls:sem", "semaphore", "1/3"]]
        assert lines[0][3].endswith("s")  # a ttl
        r = run_cli(redis_url, "list")
        assert {x.split()[0] for x in r.stdout.splitlines()} >= {"ls:a", "ls:sem", "other"}
    assert run_cli(redis_url, "list", "nothing:*").stdout == ""


def test_release_force(rds, client, redis_url: str) -> None:
    with holding(redis_url, "rf", expect=79):  # the holder sees its lock go
        r = run_cli(redis_url, "release", "rf")  # refused without --force
        assert r.returncode == 64 and "--force" in r.stderr
        assert rds.exists(lock_key(client, "rf"))
        r = run_cli(redis_url, "release", "--force", "--yes", "rf")  # no question
        assert r.returncode == 0, r.stderr
        assert not rds.exists(lock_key(client, "rf"))
        r = run_cli(redis_url, "release", "--force", "--yes", "rf")
        assert r.returncode == 1  # nothing held any more


def release_on_terminal(url: str, name: str, answer: str, *opts: str) -> Tuple[int, str]:
    """hilock release --force with a terminal as stdin, answering answer."""
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen(hilock_argv("release", "--force", *opts, name), stdin=slave,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=cli_env(url))
        os.write(master, answer.encode() + b"\n")
        r = finish(proc)
    finally:
        os.close(master)
        os.close(slave)
    return r.returncode, r.stderr


def test_release_asks_on_a_terminal(rds, client, redis_url: str) -> None:
    with holding(redis_url, "rt", expect=79) as fence:
        code, err = release_on_terminal(redis_url, "rt", "n")
        assert code == 1 and "?" in err and "not released" in err
        assert rds.exists(lock_key(client, "rt"))
        code, err = release_on_terminal(redis_url, "rt", "y")
        assert code == 0, err
        assert not rds.exists(lock_key(client, "rt"))
    assert int(fence) > 0
    with holding(redis_url, "rt", expect=79):
        code, err = release_on_terminal(redis_url, "rt", "", "--yes")  # no question
        assert code == 0 and "?" not in err


def test_prefix_option_and_environment(redis_url: str) -> None:
    """--prefix (or $HILOCK_PREFIX) names the locks of a client with that
    prefix: a lock held under prefix app1: is busy for hilock --prefix app1:
    and free for the default prefix."""
    with hilock.Client(redis_url, prefix="app1:") as c, c.lock("job") as lk:
        assert lk.fence
        busy = run_cli(None, "--url", redis_url, "--prefix", "app1:", "run", "--timeout", "0",
                       "job", "--", "true")
        assert busy.returncode == 75, busy.stderr
        env_busy = run_cli(redis_url, "run", "--timeout", "0", "job", "--", "true",
                           HILOCK_PREFIX="app1:")
        assert env_busy.returncode == 75, env_busy.stderr
        free = run_cli(redis_url, "run", "--timeout", "0", "job", "--", "true")
        assert free.returncode == 0, free.stderr
        st = run_cli(redis_url, "--prefix", "app1:", "status", "--json", "job")
        assert st.returncode == 0 and '"held": true' in st.stdout, st.stdout + st.stderr


# -- secrets, TLS options, prefix, schemes, parent death, release without a terminal --


SECRET = "TopSecret1"


def no_secret(r: subprocess.CompletedProcess) -> None:
    assert SECRET not in (r.stdout or "") + (r.stderr or ""), (r.stdout, r.stderr)


def test_passwords_are_never_printed(redis_url: str) -> None:
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    for url, code in [(f"reddis://:{SECRET}@h/0", 64),          # mistyped scheme
                      (f"reddis://me:{SECRET}@h/0", 64),
                      (f"redis+sentinal://:{SECRET}@s1,s2/m", 64),
                      (f"redis+sentinal://s/m?sentinel_password={SECRET}", 64),
                      (f"redis+clustr://h?password={SECRET}", 64),
                      (f"redis://:{SECRET}@127.0.0.1:{free_port()}/0", 69),  # refused
                      (f"redis://:{SECRET}@127.0.0.1:{port}/0", 77)]:     # AUTH refused
        r = run_cli(None, "--url", url, "status", "x")
        assert r.returncode == code, (url, r.stderr)
        no_secret(r)
        no_traceback(r)
    r = run_cli(f"reddis://:{SECRET}@h/0", "status", "x")  # from $HILOCK_URL
    assert r.returncode == 64 and ":***@h/0" in r.stderr, r.stderr
    no_secret(r)


def test_run_passes_no_secret_to_the_command() -> None:
    """$HILOCK_TLS_KEY_PASSWORD is hilock's: it decrypts --tls-key and is
    not in the command's environment."""
    pki = make_pki()
    try:
        with TLSServer(pki, auth_clients="yes") as srv:
            tls = ["--tls-ca-certs", pki.path("ca.crt"), "--tls-cert", pki.path("client.crt"),
                   "--tls-key", pki.path("client-enc.key")]
            r = run_cli(None, "run", "--url", srv.url, *tls, "t", "--", "env",
                        HILOCK_TLS_KEY_PASSWORD="s3cret")
            assert r.returncode == 0, r.stderr
            assert "HILOCK_NAME=t\n" in r.stdout
            assert "s3cret" not in r.stdout
            assert "HILOCK_TLS_KEY_PASSWORD" not in r.stdout
    finally:
        shutil.rmtree(pki.dir, ignore_errors=True)


@pytest.mark.parametrize("opt", [["--tls-ca-certs", "/ca.pem"], ["--tls-ca-path", "/etc/ca"],
                                 ["--tls-cert", "/c.pem"], ["--tls-key", "/k.pem"],
                                 ["--tls-verify", "none"], ["--tls-no-check-hostname"],
                                 ["--tls-server-name", "redis.test"]])
def test_tls_options_with_a_plain_url_are_refused(redis_url: str, tmp_path: Path,
                                                  opt: List[str]) -> None:
    marker = tmp_path / "ran"
    for where in (["--url", redis_url], []):  # given, or from $HILOCK_URL
        r = run_cli(redis_url, "run", *where, *opt, "x", "--", "touch", str(marker))
        assert r.returncode == 64, r.stderr
        assert opt[0] in r.stderr and "rediss://" in r.stderr, r.stderr
        no_traceback(r)
    assert not marker.exists()


def test_an_empty_prefix_is_refused(redis_url: str, tmp_path: Path) -> None:
    """--prefix '' is an error, as Client(prefix='') is; an empty
    $HILOCK_PREFIX counts as unset."""
    marker = tmp_path / "ran"
    r = run_cli(redis_url, "--prefix", "", "run", "x", "--", "touch", str(marker))
    assert r.returncode == 64, r.stderr
    assert "prefix" in r.stderr
    no_traceback(r)
    assert not marker.exists()
    with hilock.Client(redis_url) as c, c.lock("pfx") as lk:
        assert lk.fence
        r = run_cli(redis_url, "run", "--timeout", "0", "pfx", "--", "true", HILOCK_PREFIX="")
        assert r.returncode == 75, r.stderr  # the default prefix's lock: busy


def test_url_schemes_in_any_case(redis_url: str) -> None:
    scheme, rest = redis_url.split("://", 1)
    for s in (scheme.upper(), "Redis"):
        r = run_cli(None, "--url", f"{s}://{rest}", "run", "x", "--", "true")
        assert r.returncode == 0, r.stderr


def pid_gone(pid: int) -> bool:
    """pid has ended (a zombie nobody reaped yet counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
@pytest.mark.parametrize("opts", [[], ["--on-parent-death", "hup"]])
def test_command_dies_with_a_killed_hilock(rds, client, redis_url: str,
                                           opts: List[str]) -> None:
    """hilock killed with SIGKILL: its command gets --on-parent-death's
    signal (default TERM) instead of running on without the lock, and the
    lock is not renewed any more: it lapses at its TTL."""
    proc = start_cli(redis_url, "run", "--ttl", "1", *opts, "pd", "--", "sh", "-c",
                     'echo "ready $$"; exec sleep 60')
    pid = 0
    try:
        line = read_line(proc)
        assert line.startswith("ready "), line
        pid = int(line.split()[1])
        assert rds.exists(lock_key(client, "pd"))
        proc.kill()
        proc.wait(timeout=DEADLINE)
        # Bounded: a failure, never a measured duration.
        deadline = time.monotonic() + DEADLINE / 2
        while not pid_gone(pid):
            assert time.monotonic() < deadline, "the command outlived hilock"
            time.sleep(0.02)
        while rds.exists(lock_key(client, "pd")):
            assert time.monotonic() < deadline + DEADLINE / 2, "the lock is still renewed"
            time.sleep(0.05)
    finally:
        if pid and not pid_gone(pid):
            os.kill(pid, signal.SIGKILL)
        finish(proc)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
def test_on_parent_death_none_lets_the_command_run_on(redis_url: str,
                                                      tmp_path: Path) -> None:
    done = tmp_path / "done"
    proc = start_cli(redis_url, "run", "--on-parent-death", "none", "pn", "--", "sh", "-c",
                     f'echo ready; read x; echo "$x" > "{done}"', stdin=subprocess.PIPE)
    try:
        assert read_line(proc) == "ready\n"
        proc.kill()
        proc.wait(timeout=DEADLINE)
        assert proc.stdin is not None
        proc.stdin.write("on\n")  # read by the command, which outlived hilock
        proc.stdin.flush()
        deadline = time.monotonic() + DEADLINE
        while not (done.exists() and done.read_text() == "on\n"):
            assert time.monotonic() < deadline, "the command did not run on"
            time.sleep(0.02)
    finally:
        finish(proc)


def test_on_parent_death_bad_value_is_a_usage_error(redis_url: str) -> None:
    r = run_cli(redis_url, "run", "--on-parent-death", "bogus", "x", "--", "true")
    assert r.returncode == 64 and "--on-parent-death" in r.stderr, r.stderr


def test_release_without_a_terminal_needs_yes(rds, client, redis_url: str) -> None:
    """With no terminal to ask on, release --force refuses (64, saying to
    pass --yes), whatever stdin holds; --yes releases."""
    lk = client.lock("rny", auto_renew=False)
    assert lk.acquire(blocking=False)
    for stdin in (None, "y\n"):
        r = run_cli(redis_url, "release", "--force", "rny", input=stdin)
        assert r.returncode == 64, r.stderr
        assert "--yes" in r.stderr
        no_traceback(r)
        assert rds.exists(lock_key(client, "rny"))
    r = run_cli(redis_url, "release", "--force", "--yes", "rny")
    assert r.returncode == 0, r.stderr
    assert not rds.exists(lock_key(client, "rny"))
