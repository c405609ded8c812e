"""User data stays data: every Lua script hilock embeds (core/scripts, with
its @include files expanded as the build does) is read, and the test fails
if a key a script touches could come from ARGV, or if a script could run
text it was given.

The rule checked: in every redis.call / redis.pcall, the key positions
(the first argument of a command; every argument of DEL, EXISTS, UNLINK,
MGET, WATCH and TOUCH; the channel of PUBLISH) hold expressions that do not
read ARGV, directly or through a variable or a function parameter that was
given a value read from ARGV. Keys come from KEYS, or from a KEYS prefix
and a value the server itself keeps (the fair and sequential locks' wake
lists of other waiters, named by the ids and numbers in their queues).
No script calls load, loadstring, dofile or loadfile. And the C side sends
only the embedded scripts: no C file outside the generated table holds Lua.
The checker is itself tested on scripts that break each rule."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "core" / "scripts"

ALL_KEYS = {"DEL", "EXISTS", "UNLINK", "MGET", "WATCH", "TOUCH"}
NO_KEY = {"TIME", "PING", "ECHO"}
CODE_RUNNERS = re.compile(r"\b(loadstring|load|dofile|loadfile)\s*\(")


def expand(path: Path, seen: Set[str]) -> str:
    """The script's text with its -- @include lines replaced, each library
    file once (as cmake/EmbedScripts.cmake does)."""
    out: List[str] = []
    for line in path.read_text().splitlines():
        m = re.match(r"-- @include ([a-z_]+\.lua)$", line)
        if m is None:
            out.append(line)
        elif m.group(1) not in seen:
            seen.add(m.group(1))
            out.append(expand(SCRIPTS / "lib" / m.group(1), seen))
    return "\n".join(out)


def mask(src: str) -> str:
    """Comments removed and string contents blanked (quotes kept), so that
    the parsing below sees only code."""
    out: List[str] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("--", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "'\"":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            body = src[i + 1:j]
            out.append(c + (body if re.fullmatch(r"[A-Za-z]*", body)
                            else " " * len(body)) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_args(src: str, start: int) -> Tuple[List[str], int]:
    """The top-level comma-separated arguments of the call whose '(' is at
    start, and the index after its ')'."""
    depth, i, cur, args = 0, start, [], []
    while i < len(src):
        c = src[i]
        if c in "({[":
            depth += 1
            if depth > 1:
                cur.append(c)
        elif c in ")}]":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i + 1
            cur.append(c)
        elif c == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    raise ValueError("unbalanced call")


def idents(expr: str, opaque: Set[str] = frozenset()) -> Set[str]:  # type: ignore[assignment]
    """The names an expression reads that could carry ARGV's data. KEYS[...]
    counts as one declared key whatever its index (an index from ARGV still
    picks a key the caller declared), and what redis.call returns is the
    server's own state (what a member of a set scores, a counter's value)."""
    while True:
        calls = "|".join(rf"\b{f}\s*\(" for f in sorted(opaque))
        m = re.search(r"\bKEYS\s*\[|\bredis\.p?call\s*\(" + ("|" + calls if calls else ""),
                      expr)
        if m is None:
            break
        try:
            _, end = split_args(expr, m.end() - 1)
        except ValueError:  # the call goes on past this line
            end = len(expr)
        expr = expr[:m.start()] + " " + expr[end:]
    return set(re.findall(r"\b[A-Za-z_]\w*\b", expr))


def tainted_names(code: str) -> Set[str]:
    """Variables and parameters that may hold a value read from ARGV."""
    tainted: Set[str] = {"ARGV"}
    assigns: List[Tuple[List[str], List[str]]] = []
    for m in re.finditer(r"(?:local\s+)?([A-Za-z_][\w\s,]*?)\s*=(?!=)\s*([^\n]+)", code):
        names = [x.strip() for x in m.group(1).split(",")]
        if all(re.fullmatch(r"[A-Za-z_]\w*", x) for x in names):
            try:
                values, _ = split_args("(" + m.group(2) + ")", 0)
            except ValueError:  # the value goes on past this line
                values = [m.group(2)]
            assigns.append((names, values))
    funcs: Dict[str, List[str]] = {}
    for m in re.finditer(r"function\s+([A-Za-z_]\w*)\s*\(([^)]*)\)", code):
        funcs[m.group(1)] = [p.strip() for p in m.group(2).split(",") if p.strip()]
    # Loop variables: "for i, v in ipairs(ARGV)" taints v.
    for m in re.finditer(r"\bfor\s+([\w\s,]+?)\s+in\s+([^\n]+?)\s+do\b", code):
        assigns.append(([x.strip() for x in m.group(1).split(",")], [m.group(2)] * 4))
    # A local function whose returns read neither its parameters nor ARGV
    # returns server state (as drop() returns a removed entry's number).
    opaque: Set[str] = set()
    for m in re.finditer(r"function\s+([A-Za-z_]\w*)\s*\(([^)]*)\)(.*?)\n(?:end|  end)\b",
                         code, flags=re.S):
        params = {p.strip() for p in m.group(2).split(",") if p.strip()}
        returns = re.findall(r"\breturn\b([^\n]*)", m.group(3))
        if not any(idents(r) & (params | {"ARGV"}) for r in returns):
            opaque.add(m.group(1))
    changed = True
    while changed:
        changed = False
        for names, values in assigns:
            for k, name in enumerate(names):
                value = values[k] if k < len(values) else (values[-1] if values else "")
                if name not in tainted and idents(value, opaque) & tainted:
                    tainted.add(name)
                    changed = True
        for fname, params in funcs.items():
            for m in re.finditer(rf"\b{fname}\s*\(", code):
                if code[max(0, m.start() - 9):m.start()].endswith("function "):
                    continue
                args, _ = split_args(code, m.end() - 1)
                for p, a in zip(params, args):
                    if p not in tainted and idents(a) & tainted:
                        tainted.add(p)
                        changed = True
    return tainted


def violations(name: str, src: str) -> List[str]:
    code = mask(src)
    found: List[str] = []
    if CODE_RUNNERS.search(code):
        found.append(f"{name}: runs text as code ({CODE_RUNNERS.search(code).group(1)})")
    tainted = tainted_names(code)
    for m in re.finditer(r"\bredis\.p?call\s*\(", code):
        args, _ = split_args(code, m.end() - 1)
        command = args[0].strip("'\"").upper() if args and args[0][:1] in "'\"" else ""
        if command in NO_KEY:
            continue
        keys = args[1:] if command in ALL_KEYS else args[1:2]
        for k in keys:
            bad = idents(k) & tainted
            if bad:
                found.append(f"{name}: {command or args[0]} key '{k}' may come from ARGV "
                             f"(through {', '.join(sorted(bad))})")
    return found


def embedded_scripts() -> Dict[str, str]:
    return {p.name: expand(p, set()) for p in sorted(SCRIPTS.glob("*.lua"))}


def test_every_embedded_script_takes_its_keys_from_keys() -> None:
    scripts = embedded_scripts()
    assert len(scripts) >= 30  # every family's scripts were read
    found = [v for name, src in scripts.items() for v in violations(name, src)]
    assert found == []


@pytest.mark.parametrize("bad", [
    "return redis.call('GET', ARGV[1])",
    "local k = ARGV[2]\nreturn redis.call('DEL', KEYS[1], k)",
    "local a, b = KEYS[1], ARGV[1]\nlocal c = 'x:' .. b\nreturn redis.call('SET', c, 1)",
    "local function f(key) return redis.call('INCR', key) end\nreturn f(ARGV[3])",
    "for _, k in ipairs(ARGV) do redis.call('EXPIRE', k, 5) end",
    "return redis.pcall('PUBLISH', ARGV[1], 'x')",
    "return loadstring(ARGV[1])()",
])
def test_the_checker_finds_each_kind_of_violation(bad: str) -> None:
    assert violations("bad.lua", bad) != []


@pytest.mark.parametrize("good", [
    "local list = KEYS[2]\nredis.call('RPUSH', list, ARGV[1])",
    "return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])",
    "local t = redis.call('TIME')",
    "-- redis.call('GET', ARGV[1]) in a comment\nreturn 1",
    "return redis.call('HSET', KEYS[1], 'f' .. ARGV[1], 1)",
])
def test_the_checker_accepts_keys_from_keys(good: str) -> None:
    assert violations("good.lua", good) == []


def test_c_sends_only_the_embedded_scripts() -> None:
    """No C source builds Lua at run time: Lua text appears only in the
    scripts table generated from core/scripts."""
    offenders = []
    for path in sorted((ROOT / "core" / "src").glob("*.c")):
        text = re.sub(r"/\*.*?\*/|//[^\n]*", "", path.read_text(), flags=re.S)
        if re.search(r"redis\.p?call|\bKEYS\[|\bARGV\[", text):
            offenders.append(path.name)
    assert offenders == []
