#!/usr/bin/env python3
"""Write the C API reference from the public headers, as Markdown.

Each header core/include/hilock/<name>.h becomes one page, api/c/<name>.md.
The header's top comment is the page's introduction. Then come, in header
order, its declarations: every `HILOCK_API ...;` function (and every
static inline wrapper, as its prototype), type and constant, each with the
comment right above it. Declarations that follow
one another with no comment or blank line between them share the comment
above the first. A comment that starts with "## " opens a section.
api/c/index.md lists the pages: hold.h (the base handle every lock shares)
first, then client.h, errors.h and the lock families.

Names of the API in comments link to their entries, on any page.

The documentation build runs this through the hook in docs/hooks.py, so
the pages are never checked in. To look at them without MkDocs:

    python3 docs/gen_c_api.py OUT_DIR
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "core" / "include" / "hilock"


def _families() -> List[Tuple[str, Tuple[str, str]]]:
    """(header, (page, title)) of every lock family, from the table of
    tools/gen_factories.py (the one list of the families)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_factories
    return [(f.header, f.page) for f in gen_factories.FAMILIES]


# Reading order. hilock.h (the umbrella) and export.h (HILOCK_API) declare
# nothing of their own; the index page names them.
ORDER = (["hold", "client", "errors"] + [h for h, _ in _families()]
         + ["async", "inspect", "store", "stats", "version"])
NOTHING_TO_DECLARE = {"hilock", "export"}

# Where the user manual covers a header's subject.
MANUAL = {
    "hold": ("locks.md#verbs-c-and-python", "Lock types: verbs"),
    "client": ("client.md", "The client"),
    "errors": ("errors.md", "Errors"),
    **dict(_families()),
    "async": ("async.md", "Event loops"),
    "store": ("fencing.md", "Fenced data"),
    "inspect": ("inspect.md", "Inspecting locks"),
    "stats": ("observability.md", "Statistics and logging"),
}


@dataclass
class Entry:
    """One documented item: a comment and the code it stands above."""
    kind: str                     # "function", "type", "section", "text"
    names: List[str] = field(default_factory=list)
    code: List[str] = field(default_factory=list)   # verbatim or formatted lines
    comment: List[str] = field(default_factory=list)  # comment text, one item a line


@dataclass
class Header:
    name: str
    title: str
    intro: List[str]
    entries: List[Entry]
    orphans: List[str]            # comments with no declaration after them


# -- reading a header ---------------------------------------------------------

def comment_lines(raw: str) -> List[str]:
    """The text of a /* ... */ comment, one string a line, without the
    comment markers and the leading " * " of each line."""
    body = raw.strip()
    assert body.startswith("/*") and body.endswith("*/"), raw
    body = body[2:-2]
    lines = body.split("\n")
    out: List[str] = []
    for i, line in enumerate(lines):
        if i == 0:
            line = line.strip()
        else:
            m = re.match(r"^\s*\* ?(.*)$", line)
            line = m.group(1) if m else line.strip()
        out.append(line.rstrip())
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return out


def tokens(src: str) -> Iterator[Tuple[str, str]]:
    """Split a header into ("comment", text), ("code", line) and
    ("blank", "") items. A comment inside braces or a continued macro, or
    after code on the same line, is part of the code."""
    lines = src.split("\n")
    i, depth, cont, cplusplus = 0, 0, False, False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if re.match(r"#\s*ifdef\s+__cplusplus", stripped):
            cplusplus = True
        elif cplusplus and re.match(r"#\s*endif", stripped):
            cplusplus = False
        if not stripped:
            cont = False
            yield ("blank", "")
            i += 1
            continue
        if depth == 0 and not cont and stripped.startswith("/*"):
            text = [line]
            while "*/" not in lines[i]:
                i += 1
                text.append(lines[i])
            after = lines[i].split("*/", 1)[1].strip()
            yield ("comment", "\n".join(text))
            i += 1
            if after:
                raise ValueError(f"code after a comment on one line: {lines[i - 1]!r}")
            continue
        code_part = re.sub(r"/\*.*?(\*/|$)", "", line)
        if not cplusplus:   # extern "C" { ... } wraps the whole header
            depth += code_part.count("{") - code_part.count("}")
        cont = line.rstrip().endswith("\\")
        yield ("code", line)
        # A comment that starts inside code (a struct member's) may span lines.
        if "/*" in line and "*/" not in line.split("/*", 1)[1]:
            i += 1
            while i < len(lines) and "*/" not in lines[i]:
                yield ("code", lines[i])
                i += 1
            if i < len(lines):
                yield ("code", lines[i])
        i += 1


SKIP_CODE = re.compile(
    r"^\s*(#\s*include\b|#\s*ifndef\s+HILOCK_\w+_H\b|#\s*define\s+HILOCK_\w+_H\s*$|"
    r"#\s*ifdef\s+__cplusplus|#\s*endif\s*(/\*\s*HILOCK_\w+_H\s*\*/)?\s*$|"
    r"extern\s+\"C\"\s*\{|\}\s*$)")


def significant(code: List[str]) -> List[str]:
    """Drop include guards, #include lines and the extern "C" braces."""
    out: List[str] = []
    skip_endif = 0
    for line in code:
        s = line.strip()
        if re.match(r"#\s*ifdef\s+__cplusplus", s):
            skip_endif += 1
            continue
        if skip_endif and re.match(r"#\s*endif", s):
            skip_endif -= 1
            continue
        if skip_endif:   # extern "C" { or the closing brace
            continue
        if SKIP_CODE.match(line):
            continue
        out.append(line)
    return out


def split_decls(code: List[str]) -> List[List[str]]:
    """Group code lines into declarations: a HILOCK_API function runs to its
    ';', a braced type to its closing '};', a macro over its '\\' lines, an
    #if block to its #endif."""
    groups: List[List[str]] = []
    cur: List[str] = []
    depth = 0
    pp_depth = 0
    for line in code:
        s = line.strip()
        cur.append(line)
        if re.match(r"#\s*if", s):
            pp_depth += 1
        elif re.match(r"#\s*endif", s):
            pp_depth -= 1
        code_part = re.sub(r"/\*.*?(\*/|$)", "", line)
        depth += code_part.count("{") - code_part.count("}")
        if pp_depth or depth or line.rstrip().endswith("\\"):
            continue
        if s.startswith("#") or code_part.rstrip().endswith(";"):
            groups.append(cur)
            cur = []
    if cur:
        groups.append(cur)
    return groups


FUNC_NAME = re.compile(r"\**\s*(\w+)\s*\(")


def decl_names(decl: List[str]) -> Tuple[str, List[str]]:
    """The kind of a declaration and the names it defines."""
    text = "\n".join(decl)
    flat = " ".join(l.strip() for l in decl)
    if flat.startswith(("HILOCK_API", "static inline")):
        head = flat.split(None, 2)[2] if flat.startswith("static") else flat[len("HILOCK_API"):]
        m = FUNC_NAME.search(head)
        return "function", [m.group(1)] if m else []
    names: List[str] = []
    defines = [] if flat.startswith("typedef") else re.finditer(r"#\s*define\s+(\w+)", text)
    for m in defines:
        if m.group(1) not in names and not m.group(1).endswith("_"):
            names.append(m.group(1))
    m = re.match(r"typedef\s+(?:struct|enum|union)\s+\w*\s*\{.*\}\s*(\w+)\s*;", flat)
    if m:
        names.append(m.group(1))
    else:
        m = re.match(r"typedef\s+[^;(]*?\(\s*\*\s*(\w+)\s*\)", flat)   # function pointer
        if m:
            names.append(m.group(1))
        else:
            m = re.match(r"typedef\s+(?:struct|enum|union)\s+\w+\s+(\w+)\s*;", flat)
            if m:
                names.append(m.group(1))
    m = re.match(r"enum\s*\{(.*)\}\s*;", flat)
    if m:
        names += [e.split("=")[0].strip() for e in m.group(1).split(",") if e.strip()]
    if re.match(r"typedef\s+enum\s+\w*\s*\{", flat):
        body = flat[flat.index("{") + 1:flat.rindex("}")]
        for e in body.split(","):
            e = e.split("=")[0].strip()
            if re.fullmatch(r"HILOCK_\w+", e) and not e.endswith("_"):
                names.append(e)
    if not names and re.fullmatch(r"(struct\s+\w+\s*;\s*)+", flat):
        return "forward", []
    return "type", names


# A family's typed wrapper: static inline, its one-line body on its own
# lines. The page shows its prototype, as for a HILOCK_API function.
INLINE_DEF = re.compile(r"^(static inline [^;{]*?\))\s*\{\n(?:[^\n]*\n)*?\}$", re.M)


def parse(path: Path) -> Header:
    src = INLINE_DEF.sub(lambda m: m.group(1) + ";", path.read_text())
    # tools/gen_factories.py's markers are not documentation.
    src = re.sub(r"^/\* (BEGIN|END) generated families.*\*/\n", "", src, flags=re.M)
    toks = list(tokens(src))
    # The top comment: the first comment of the file.
    first = next(i for i, (k, _) in enumerate(toks) if k != "blank")
    if toks[first][0] != "comment":
        raise ValueError(f"{path}: no top comment")
    top = comment_lines(toks[first][1])
    m = re.match(r"hilock:\s*(.*)", top[0])
    title = (m.group(1) if m else top[0]).rstrip(".")
    intro = top[1:]
    if m and title and not title.endswith(tuple(".:")) and len(top) > 1 and top[1].strip():
        # The title's sentence goes on: keep it whole in the introduction.
        first_line = top[0][len("hilock:"):].strip()
        intro = [first_line] + top[1:]
        title = re.split(r"[.,:;]", first_line)[0]
    entries: List[Entry] = []
    orphans: List[str] = []
    pending: List[List[str]] = []   # comments since the last code or blank
    code: List[str] = []

    def flush_code() -> None:
        nonlocal code, pending
        kept = significant(code)
        code = []
        if not kept:
            return
        comment = pending[-1] if pending else []
        for c in pending[:-1]:
            orphans.append(" ".join(c))
        pending = []
        entry: Optional[Entry] = None
        for decl in split_decls(kept):
            kind, names = decl_names(decl)
            if kind == "forward":
                # Forward declarations belong with what follows them.
                if entry is None:
                    entry = Entry("type", [], list(decl), comment)
                else:
                    entry.code += decl
                continue
            if entry is not None and (entry.kind == kind or not entry.names):
                if not entry.names:
                    entry.kind = kind
                entry.names += names
                entry.code += decl
            else:
                if entry is not None:
                    entries.append(entry)
                    comment = []
                entry = Entry(kind, names, list(decl), comment)
        if entry is not None:
            entries.append(entry)

    def flush_comments() -> None:
        nonlocal pending
        for c in pending:
            if c and c[0].startswith("## "):
                entries.append(Entry("section", comment=c))
            else:
                orphans.append(" ".join(c))
        pending = []

    for kind, text in toks[first + 1:]:
        if kind == "comment":
            if code:
                flush_code()
            pending.append(comment_lines(text))
        elif kind == "code":
            code.append(text)
        else:   # blank
            if code:
                flush_code()
            elif pending:
                flush_comments()
    if code:
        flush_code()
    flush_comments()
    # A section comment directly above declarations: its heading opens the
    # section, its other lines document the declarations.
    out: List[Entry] = []
    for e in entries:
        if e.comment and e.comment[0].startswith("## ") and e.kind != "section":
            out.append(Entry("section", comment=[e.comment[0]]))
            e.comment = e.comment[1:]
        out.append(e)
    for e in out:
        if e.kind == "function":
            e.code = format_functions(e.code)
        else:
            e.code = dedent(e.code)
    return Header(path.stem, title, intro, out, orphans)


def dedent(lines: List[str]) -> List[str]:
    ind = min((len(l) - len(l.lstrip()) for l in lines if l.strip()), default=0)
    return [l[ind:] for l in lines]


def format_functions(lines: List[str], width: int = 78) -> List[str]:
    """One prototype a declaration, without HILOCK_API (a typed wrapper
    keeps its "static inline"), wrapped at width with the parameters
    aligned after the '('."""
    text = " ".join(l.strip() for l in lines)
    out: List[str] = []
    for api, proto in re.findall(r"(HILOCK_API|static inline)\s+(.*?;)", text):
        if api != "HILOCK_API":
            proto = api + " " + proto
        proto = re.sub(r"\s+", " ", proto).replace("( ", "(").replace(" )", ")")
        if len(proto) <= width:
            out.append(proto)
            continue
        head, rest = proto.split("(", 1)
        params = [p.strip() for p in rest[:-2].split(",")]
        indent = " " * (len(head) + 1)
        line = head + "("
        for i, p in enumerate(params):
            piece = p + ("," if i < len(params) - 1 else ");")
            if line.endswith("(") or len(line) + 1 + len(piece) <= width:
                line += ("" if line.endswith("(") else " ") + piece
            else:
                out.append(line)
                line = indent + piece
        out.append(line)
    return out


# -- writing Markdown ---------------------------------------------------------

CODE_TOKEN = re.compile(
    r"(?P<key>\bhilock:\{[^\s,;)]*)"                       # key names
    r"|(?P<glob>\b\w+_\*\w*(?:\*\w*)*)"                   # hilock_*_lost, ssl_*
    r"|(?P<tmpl>\b\w+(?:<\w+>\w*)+)"                      # hilock_<object>_<verb>
    r"|(?P<call>\b[A-Za-z_]\w*\([\w ,*.=]*\))"              # owned(), HILOCK_HOLD(lk)
    r"|(?P<ptr>(?<![\w*)])\*{1,2}[A-Za-z_]\w*)"            # *out, **out
    r"|(?P<ident>\b[A-Za-z_]\w*_\w*\b)"                    # names with '_'
)


def escape(text: str) -> str:
    text = (text.replace("\\", "\\\\").replace("*", "\\*").replace("[", "\\[")
            .replace("]", "\\]").replace("<", "&lt;").replace("`", "\\`"))
    return re.sub(r"(?<!\w)_", r"\\_", text)


class Linker:
    def __init__(self, where: Dict[str, str]) -> None:
        self.where = where   # name -> page stem

    def code(self, name: str, page: str) -> str:
        target = self.where.get(name)
        if target is None:
            return f"`{name}`"
        href = f"#{name}" if target == page else f"{target}.md#{name}"
        return f"[`{name}`]({href})"

    def prose(self, text: str, page: str) -> str:
        out: List[str] = []
        pos = 0
        for m in CODE_TOKEN.finditer(text):
            out.append(escape(text[pos:m.start()]))
            tok = m.group(0)
            if m.lastgroup == "call":
                base = tok[:tok.index("(")]
                out.append(self.code(base, page).replace(f"`{base}`", f"`{tok}`"))
            elif m.lastgroup == "ident":
                out.append(self.code(tok, page))
            else:
                out.append(f"`{tok}`")
            pos = m.end()
        out.append(escape(text[pos:]))
        # "(see the key layout)": the manual's table of every key.
        return "".join(out).replace("the key layout",
                                    "the [key layout](../../design.md#key-layout)")

    def block(self, lines: List[str], page: str) -> List[str]:
        """Comment text to Markdown: paragraphs are joined and marked up;
        runs of lines indented deeper than the comment (examples, lists
        laid out in columns) stay as they are, in a code block."""
        out: List[str] = []
        para: List[str] = []
        i = 0

        def end_para() -> None:
            if para:
                out.append(self.prose(" ".join(p.strip() for p in para), page))
                out.append("")
                para.clear()

        while i < len(lines):
            line = lines[i]
            if not line.strip():
                end_para()
                i += 1
                continue
            if line.startswith("  ") and (not para or para[-1].rstrip().endswith(":")
                                          or para[-1].rstrip().endswith(",")):
                end_para()
                pre: List[str] = []
                while i < len(lines) and (lines[i].startswith("  ") or
                                          (not lines[i].strip() and i + 1 < len(lines)
                                           and lines[i + 1].startswith("  "))):
                    pre.append(lines[i])
                    i += 1
                lang = "c" if any(re.search(r";\s*$|\{\s*$|^\s*\}", p) or
                                  p.lstrip().startswith("#") for p in pre) else "text"
                out += [f"```{lang}"] + dedent(pre) + ["```", ""]
                continue
            para.append(line)
            i += 1
        end_para()
        return out


def heading_text(names: List[str]) -> str:
    if len(names) <= 3:
        return ", ".join(names)
    return f"{names[0]}, ..."


def render_header(h: Header, link: Linker, after_intro: str = "") -> str:
    out = [f"# {h.name}.h: {h.title}", ""]
    out.append(f"`#include <hilock/{h.name}.h>` (or `<hilock/hilock.h>`, which includes "
               "every header).")
    if h.name in MANUAL:
        href, what = MANUAL[h.name]
        out.append(f"The user manual's page: [{what}](../../{href}).")
    out.append("")
    out += link.block(h.intro, h.name)
    if after_intro:
        out += [after_intro]
    for e in h.entries:
        if e.kind == "section":
            title = re.sub(r"^##\s*", "", e.comment[0]).rstrip("-").strip()
            out += [f"## {title}", ""]
            if len(e.comment) > 1:
                out += link.block(e.comment[1:], h.name)
            continue
        if not e.names:
            out += link.block(e.comment, h.name) if e.comment else []
            out += ["```c"] + e.code + ["```", ""]
            continue
        first = e.names[0]
        out += [f"### {heading_text(e.names)} {{#{first}}}", ""]
        extra = [n for n in e.names[1:]]
        if extra:
            out += ["".join(f'<span id="{n}"></span>' for n in extra), ""]
        out += ["```c"] + e.code + ["```", ""]
        if e.comment:
            out += link.block(e.comment, h.name)
    return "\n".join(out).rstrip() + "\n"


def render_errors_table(h: Header, link: Linker) -> str:
    """The status codes of errors.h as a table (from HILOCK_ERRNO_MAP)."""
    src = (INCLUDE / "errors.h").read_text()
    rows = re.findall(r'XX\((\w+),\s*(-?\d+),\s*"([^"]*)"\)', src)
    out = ["## Status codes", "",
           "Read from `HILOCK_ERRNO_MAP`. The Python exception of each code is in the "
           "[error table](../../errors.md).", "",
           "| code | value | `hilock_strerror` |", "|---|---:|---|"]
    for name, value, text in rows:
        out.append(f'| <span id="HILOCK_{name}"></span>`HILOCK_{name}` | {value} | '
                   f"{escape(text)} |")
    return "\n".join(out) + "\n"


def render_index(headers: List[Header], link: Linker) -> str:
    out = ["# C API reference", "",
           "Generated from the public headers in `core/include/hilock/` by "
           "`docs/gen_c_api.py` at every build of this site: each page is one header, its "
           "introduction the header's top comment, then every declaration with the comment "
           "above it, in header order.", "",
           "`#include <hilock/hilock.h>` includes them all; `hilock/export.h` defines "
           "`HILOCK_API`, the mark of an exported function. Naming: "
           "`hilock_<object>_<verb>`. Every fallible call returns a status "
           "([errors.h](errors.md)); what every lock type shares is on its hold "
           "([hold.h](hold.md)).", "",
           "| header | what it declares | functions |", "|---|---|---:|"]
    for h in headers:
        n = sum(len(e.names) for e in h.entries if e.kind == "function")
        out.append(f"| [{h.name}.h]({h.name}.md) | {escape(h.title)} | {n} |")
    total = sum(len(e.names) for h in headers for e in h.entries if e.kind == "function")
    out += ["", f"{total} exported functions in all.", ""]
    return "\n".join(out)


def headers() -> List[Header]:
    present = {p.stem for p in INCLUDE.glob("*.h")}
    unknown = present - set(ORDER) - NOTHING_TO_DECLARE
    names = ORDER + sorted(unknown)   # a new header is listed last until ORDER names it
    return [parse(INCLUDE / f"{n}.h") for n in names if n in present]


def pages() -> Dict[str, str]:
    """{path under docs/: Markdown} for every page of the reference."""
    hs = headers()
    where: Dict[str, str] = {}
    for h in hs:
        for e in h.entries:
            for n in e.names:
                where.setdefault(n, h.name)
    errors_src = (INCLUDE / "errors.h").read_text()
    for name in re.findall(r'XX\((\w+),\s*-?\d+,', errors_src):
        where.setdefault(f"HILOCK_{name}", "errors")
    link = Linker(where)
    out = {"api/c/index.md": render_index(hs, link)}
    for h in hs:
        extra = render_errors_table(h, link) if h.name == "errors" else ""
        out[f"api/c/{h.name}.md"] = render_header(h, link, extra)
    return out


def orphans() -> List[Tuple[str, str]]:
    """Comments that stand above no declaration (header, text)."""
    return [(h.name, o) for h in headers() for o in h.orphans]


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    out = Path(argv[1])
    for rel, text in pages().items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(path)
    for name, text in orphans():
        print(f"note: {name}.h: a comment above no declaration: {text[:70]}...",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
