#!/usr/bin/env python3
"""Write the Python API reference from the built package, as Markdown.

Imports hilock (a build tree's python/ directory on PYTHONPATH, or an
installed package) and documents what hilock.__all__ exports: the
module's functions, the Client, the lock classes and the exceptions, each
with its signature (inspect.signature) and docstring. A class's methods
and properties include those of its private bases; members of a public
base (LockBase) are listed by name with a link. Docstrings are reST-like:
``code`` and :class:`X` / :meth:`X` / :func:`X` / :attr:`X` become
Markdown code and links.

The documentation build runs this through the hook in docs/hooks.py, in a
subprocess with the caller's PYTHONPATH (tests/build_docs.sh sets it to
its build tree), so the page is never checked in. By hand:

    PYTHONPATH=build/h2/python python3 docs/gen_py_api.py [OUT.md]
"""
from __future__ import annotations

import builtins
import inspect
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

WIDTH = 88
# Classes shown first among the locks: the base of them all.
LOCK_ORDER_FIRST = ["LockBase"]


class _Ann:
    """An annotation kept as the text it was written as (the package uses
    ``from __future__ import annotations``): printed without quotes."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _ann(a: Any) -> Any:
    if a is inspect.Parameter.empty or a is inspect.Signature.empty:
        return a
    if isinstance(a, str):
        return _Ann(a.replace("'", "").replace('"', ""))   # "Client" written as a string
    return _Ann(inspect.formatannotation(a))


def signature(obj: Callable[..., Any], name: str, drop_self: bool) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return f"{name}(...)"
    params = list(sig.parameters.values())
    if drop_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    params = [p.replace(annotation=_ann(p.annotation)) for p in params]
    ret = _ann(sig.return_annotation) if not inspect.isclass(obj) else inspect.Signature.empty
    sig = sig.replace(parameters=params, return_annotation=ret)
    text = f"{name}{sig}"
    if len(text) <= WIDTH:
        return text
    # One parameter a line.
    parts: List[str] = []
    kinds = [p.kind for p in params]
    for i, p in enumerate(params):
        if p.kind == p.KEYWORD_ONLY and (i == 0 or kinds[i - 1] not in (p.KEYWORD_ONLY,
                                                                          p.VAR_POSITIONAL)):
            parts.append("*")
        parts.append(str(p))
        if p.kind == p.POSITIONAL_ONLY and (i + 1 == len(params)
                                            or kinds[i + 1] != p.POSITIONAL_ONLY):
            parts.append("/")
    ret = ""
    if sig.return_annotation is not inspect.Signature.empty:
        ret = f" -> {sig.return_annotation!r}"
    return f"{name}(\n" + "".join(f"    {p},\n" for p in parts) + f"){ret}"


# -- docstrings -----------------------------------------------------------------

ROLE = re.compile(r":(?:class|meth|func|attr|exc|data|obj):`~?([^`]+)`")


class Doc:
    def __init__(self, anchors: Dict[str, str], prefix: str = "hilock") -> None:
        self.anchors = anchors   # dotted name without the prefix -> anchor id
        self.prefix = prefix     # the module the page documents

    def resolve(self, target: str, context: Optional[str]) -> Optional[str]:
        if self.prefix != "hilock" and target.startswith("hilock.") and \
                not target.startswith(self.prefix + "."):
            # The blocking API, on its own page: the class's entry (a
            # member may be documented on a base there).
            return "python.md#" + ".".join(target.rstrip("()").split(".")[:2])
        own = self.prefix + "."
        t = target[len(own):] if target.startswith(own) else target
        t = t.rstrip("()")
        if context and f"{context}.{t}" in self.anchors:
            return self.anchors[f"{context}.{t}"]
        return self.anchors.get(t)

    def inline(self, text: str, context: Optional[str]) -> str:
        """One paragraph's text: roles and ``code`` to Markdown, the rest
        escaped where Markdown would read it as markup."""
        out: List[str] = []
        pos = 0
        pattern = re.compile(r"``(.+?)``|" + ROLE.pattern + r"|`([^`]+)`")
        for m in pattern.finditer(text):
            out.append(self.escape(text[pos:m.start()]))
            if m.group(1) is not None:
                out.append(code_span(m.group(1)))
            elif m.group(2) is not None:
                target = m.group(2)
                shown = target[len("hilock."):] if target.startswith("hilock.") else target
                anchor = self.resolve(target, context)
                href = anchor if anchor is None or ".md#" in anchor else f"#{anchor}"
                out.append(f"[{code_span(shown)}]({href})" if anchor else code_span(shown))
            else:
                out.append(code_span(m.group(3)))
            pos = m.end()
        out.append(self.escape(text[pos:]))
        return "".join(out)

    @staticmethod
    def escape(text: str) -> str:
        text = (text.replace("\\", "\\\\").replace("*", "\\*").replace("[", "\\[")
                .replace("]", "\\]").replace("<", "&lt;"))
        return re.sub(r"(?<!\w)_", r"\\_", text)

    def block(self, doc: Optional[str], context: Optional[str]) -> List[str]:
        """A docstring as Markdown: paragraphs and "- " lists are marked up,
        blocks indented under a paragraph become Python code blocks."""
        if not doc:
            return []
        lines = inspect.cleandoc(doc).split("\n")
        out: List[str] = []
        para: List[str] = []
        in_list = False

        def end_para() -> None:
            nonlocal in_list
            if para:
                out.append(self.inline(" ".join(p.strip() for p in para), context))
                para.clear()
                if not in_list:
                    out.append("")

        i = 0
        while i < len(lines):
            line = lines[i]
            if not line.strip():
                end_para()
                if in_list:
                    out.append("")
                    in_list = False
                i += 1
                continue
            if line.startswith("    ") and not para and not in_list:
                pre: List[str] = []
                while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                    pre.append(lines[i][4:])
                    i += 1
                while pre and not pre[-1].strip():
                    pre.pop()
                out += ["```python"] + pre + ["```", ""]
                continue
            starts_list = in_list or not para or para[-1].rstrip().endswith(":")
            if re.match(r"[-*] ", line) and starts_list:
                end_para()
                if not in_list and out and out[-1] != "":
                    out.append("")
                in_list = True
                para.append("- " + line[2:])
                # Keep the marker out of the escaping.
                j = i + 1
                while j < len(lines) and lines[j].startswith("  ") and lines[j].strip():
                    para.append(lines[j])
                    j += 1
                item = " ".join(p.strip() for p in para)
                out.append("- " + self.inline(item[2:], context))
                para.clear()
                i = j
                continue
            if in_list:
                out.append("")
                in_list = False
            para.append(line)
            i += 1
        end_para()
        while out and out[-1] == "":
            out.pop()
        return out + [""]


def code_span(text: str) -> str:
    return f"`` {text} ``" if "`" in text else f"`{text}`"


# -- collecting the API -----------------------------------------------------------

def public_api(mod: Any) -> List[Tuple[str, Any]]:
    return [(n, getattr(mod, n)) for n in mod.__all__]


def members(cls: type, public: Dict[type, str]) -> Tuple[List[Tuple[str, str, Any, type]],
                                                          Dict[str, List[str]]]:
    """(name, kind, object, defining class) for the members documented on
    cls, in definition order, and {public base name: inherited member names}."""
    own: List[Tuple[str, str, Any, type]] = []
    inherited: Dict[str, List[str]] = {}
    seen = set()
    for klass in cls.__mro__:
        if klass is object or klass.__module__ == "builtins":
            continue
        from_public_base = klass is not cls and klass in public
        for name, value in vars(klass).items():
            if name in seen:
                continue
            if name.startswith("_"):
                continue
            if isinstance(value, property):
                kind = "property"
            elif isinstance(value, (staticmethod, classmethod)):
                kind = "method"
                value = value.__func__
            elif inspect.isfunction(value):
                kind = "method"
            else:
                continue
            seen.add(name)
            if from_public_base:
                inherited.setdefault(public[klass], []).append(name)
            else:
                own.append((name, kind, value, klass))
    return own, inherited


def class_bases(cls: type, public: Dict[type, str]) -> List[str]:
    """The bases shown for cls: public ones by name, private ones replaced
    by their own bases, builtins by their names."""
    out: List[str] = []
    for b in cls.__bases__:
        if b is object:
            continue
        if b in public:
            out.append(public[b])
        elif b.__module__ == "builtins":
            # A builtin of the same name as a public class (ConnectionError).
            clash = b.__name__ in public.values()
            out.append(f"builtins.{b.__name__}" if clash else b.__name__)
        else:
            out += class_bases(b, public)
    return out


# -- writing the page ---------------------------------------------------------------

def render(mod: Any, prefix: str = "hilock") -> str:
    api = public_api(mod)
    classes = [(n, o) for n, o in api if inspect.isclass(o)]
    public = {o: n for n, o in classes}
    exc = [(n, o) for n, o in classes if issubclass(o, BaseException)]
    client = [(n, o) for n, o in classes if n == "Client"]
    locks = [(n, o) for n, o in classes if (n, o) not in exc and n != "Client"]
    locks.sort(key=lambda c: (c[0] not in LOCK_ORDER_FIRST,))
    funcs = [(n, o) for n, o in api if inspect.isfunction(o)]
    others = [(n, o) for n, o in api if not inspect.isclass(o) and not inspect.isfunction(o)]

    anchors: Dict[str, str] = {}
    for n, o in funcs:
        anchors[n] = f"{prefix}.{n}"
    for n, o in classes:
        anchors[n] = f"{prefix}.{n}"
        own, _ = members(o, public)
        for m, _kind, _v, _k in own:
            anchors[f"{n}.{m}"] = f"{prefix}.{n}.{m}"
    for n, o in classes:   # inherited members resolve to their base's entry
        _, inh = members(o, public)
        for base, names in inh.items():
            for m in names:
                anchors.setdefault(f"{n}.{m}", f"{prefix}.{base}.{m}")
    doc = Doc(anchors, prefix)

    if prefix == "hilock":
        out: List[str] = ["# Python API reference", ""]
        out += [f"Generated from the `hilock` package ({mod.__version__}) by "
                "`docs/gen_py_api.py` at every build of this site: everything "
                "`hilock.__all__` exports, with the signatures and docstrings of the built "
                "module. The user manual explains each type: see [Lock types](../locks.md), "
                "and [Errors](../errors.md) for the status code behind each exception. "
                "The asyncio API has [a page of its own](python-asyncio.md).", ""]
    else:
        out = [f"# Python API reference: {prefix}", ""]
        out += [f"Generated by `docs/gen_py_api.py` at every build of this site: "
                f"everything `{prefix}.__all__` exports. The exceptions are the "
                "[blocking API's](python.md); the manual is [Event loops](../async.md).", ""]
    out += doc.block(mod.__doc__, None)

    if funcs or others:
        out += ["## Functions", ""]
    for n, f in funcs:
        out += [f"### {n} {{#{prefix}.{n}}}", "", "```python",
                signature(f, f"{prefix}.{n}", False), "```", ""]
        out += doc.block(inspect.getdoc(f), None)
    for n, v in others:
        if n == "__version__":
            out += ["### \\_\\_version\\_\\_ {#hilock.__version__}", "", "```python",
                    f"hilock.__version__: str  # {v!r} here", "```", "",
                    "The version of the C library the module was built with "
                    "(`hilock_version_string()`).", ""]
        else:
            out += [f"### {n} {{#{prefix}.{n}}}", "", "```python", f"{prefix}.{n} = {v!r}",
                    "```", ""]

    def render_class(n: str, cls: type, level: int, with_members: bool) -> List[str]:
        h = "#" * level
        lines = [f"{h} {n} {{#{prefix}.{n}}}", ""]
        bases = class_bases(cls, public)
        sig = signature(cls, f"class {prefix}.{n}", False) if with_members else f"class {prefix}.{n}"
        lines += ["```python", sig, "```", ""]
        if bases:
            links = ", ".join(f"[`{b}`](#{prefix}.{b})" if b in public.values() else f"`{b}`"
                              for b in bases)
            lines += [f"Bases: {links}", ""]
        lines += doc.block(inspect.getdoc(cls) if cls.__doc__ else None, n)
        if not with_members:
            return lines
        if hasattr(cls, "__enter__") and hasattr(cls, "__exit__"):
            if f"{n}.acquire" in anchors:
                lines += ["`with` acquires within the default `timeout` (else `LockTimeout`) "
                          "and releases at the end of the block (`LockLost` if the lock was "
                          "lost meanwhile): see [Verbs](../locks.md#verbs-c-and-python).", ""]
            elif hasattr(cls, "close"):
                lines += ["`with` closes it at the end of the block.", ""]
        own, inherited = members(cls, public)
        for m, kind, v, _k in own:
            lines += [f"{h}# {n}.{m} {{#{prefix}.{n}.{m}}}", ""]
            if kind == "property":
                ret = ""
                if v.fget is not None:
                    try:
                        r = inspect.signature(v.fget).return_annotation
                        if r is not inspect.Signature.empty:
                            ret = f": {_ann(r)!r}"
                    except (TypeError, ValueError):
                        pass
                what = "property, settable" if v.fset is not None else "property, read-only"
                lines += ["```python", f"{m}{ret}  # {what}", "```", ""]
                lines += doc.block(v.__doc__ or (v.fget.__doc__ if v.fget else None), n)
            else:
                lines += ["```python", signature(v, m, True), "```", ""]
                lines += doc.block(inspect.getdoc(v), n)
        for base, names in inherited.items():
            refs = ", ".join(f"[`{m}`](#{anchors[f'{base}.{m}']})"
                             if f"{base}.{m}" in anchors else f"`{m}`" for m in names)
            lines += [f"Inherited from [`{base}`](#{prefix}.{base}): {refs}.", ""]
        return lines

    out += ["## Client", ""]
    for n, c in client:
        out += render_class(n, c, 3, True)
    out += ["## Locks", ""]
    for n, c in locks:
        out += render_class(n, c, 3, True)

    out += ["## Exceptions", "",
            "Every exception derives from `LockError` and carries `.code`, the C status "
            "(see [Errors](../errors.md)). The hierarchy, with the built-in classes each also "
            "derives from:", "", "```text"]

    ordered: List[Tuple[str, type]] = []

    def tree(cls: type, depth: int) -> None:
        extra = [b for b in class_bases(cls, public) if b not in public.values()
                 and b != "Exception"]
        out.append("    " * depth + public[cls] + (f" ({', '.join(extra)})" if extra else ""))
        ordered.append((public[cls], cls))
        for n, c in exc:
            if cls in c.__bases__:
                tree(c, depth + 1)
    roots = [c for n, c in exc if not any(b in public for b in c.__bases__)]
    for r in roots:
        tree(r, 0)
    out += ["```", ""]
    for n, c in ordered:
        out += render_class(n, c, 3, False)
    return "\n".join(out).rstrip() + "\n"


def main(argv: List[str]) -> int:
    try:
        import hilock
    except ImportError as e:
        print(f"gen_py_api.py: cannot import hilock ({e}); build the module and put the "
              "build's python/ directory on PYTHONPATH (tests/build_docs.sh does both)",
              file=sys.stderr)
        return 1
    if "--asyncio" in argv:
        import hilock.asyncio
        text = render(hilock.asyncio, "hilock.asyncio")
        argv = [a for a in argv if a != "--asyncio"]
    else:
        text = render(hilock)
    if len(argv) > 1:
        Path(argv[1]).write_text(text)
    else:
        sys.stdout.write(text)
    print(f"gen_py_api.py: documented hilock {hilock.__version__} from "
          f"{Path(hilock.__file__).parent}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
