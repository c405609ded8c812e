"""The lock constructors come from one table: tools/gen_factories.py.

``hilock.Client``'s methods, the module-level functions on the default
client and ``hilock.asyncio.Client``'s methods are written by that script
between the ``# BEGIN generated factories`` and ``# END generated
factories`` lines of their files. These tests fail when a file differs
from what the script writes (an edit by hand, or a table changed without
running it), and when the imported package's constructors differ from the
table: names, parameters and their kinds, defaults, type hints, overloads
and docstrings. No server needed.
"""
from __future__ import annotations

import inspect
import sys
import typing
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, List, Tuple

import pytest

import hilock
import hilock._client
import hilock._default
import hilock.asyncio

ROOT = Path(__file__).resolve().parent.parent.parent

sys.path.insert(0, str(ROOT / "tools"))
import gen_factories as gen  # noqa: E402

SURFACES: Dict[str, Tuple[ModuleType, Any]] = {
    gen.CLIENT: (hilock._client, hilock.Client),
    gen.DEFAULT: (hilock._default, hilock._default),
    gen.ASYNCIO: (hilock.asyncio, hilock.asyncio.Client),
}
CASES = [(s, f) for s in gen.SURFACES for f in gen.FACTORIES]


def _ids(case: Tuple[str, Any]) -> str:
    return f"{case[0]}-{case[1].name}"


@pytest.mark.parametrize("surface", gen.SURFACES)
def test_generated_code_is_current(surface: str) -> None:
    """The file holds what tools/gen_factories.py writes from its table."""
    path = ROOT / "python" / "hilock" / gen.FILES[surface]
    text = path.read_text()
    assert text.count(gen.BEGIN) == 1 and text.count(gen.END) == 1
    assert gen.render(surface, text) == text, (
        f"python/hilock/{gen.FILES[surface]} differs from its table: edit FACTORIES in "
        "tools/gen_factories.py and run it (--check shows the difference)")


def test_check_mode_reports_stale_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``--check`` exits 1 and shows the difference when a file is stale."""
    package = tmp_path / "hilock"
    package.mkdir()
    for surface, name in gen.FILES.items():
        text = (ROOT / "python" / "hilock" / name).read_text()
        (package / name).write_text(gen.render(surface, text))
    monkeypatch.setattr(gen, "PACKAGE", package)
    assert gen.main(["gen_factories.py", "--check"]) == 0
    stale = (package / "_default.py").read_text().replace(
        "ttl: float = 30.0", "ttl: float = 10.0", 1)
    (package / "_default.py").write_text(stale)
    assert gen.main(["gen_factories.py", "--check"]) == 1
    assert "+def lock(name: Name, ttl: float = 30.0" in capsys.readouterr().out
    assert gen.main(["gen_factories.py"]) == 0
    assert gen.main(["gen_factories.py", "--check"]) == 0


def _expected(module: ModuleType, factory: Any, surface: str, overload: Any
              ) -> List[Tuple[str, Any, Any, Any]]:
    """(name, kind, default, type hint) of each parameter, from the table."""
    namespace = vars(module)
    rows = []
    for p, item in zip(factory.params_of(surface),
                       [i for i in gen._signature(factory, surface, False, overload)
                        if i != "*"]):
        annotation, _, default = item.partition(": ")[2].partition(" = ")
        assert item.startswith(p.name + ": ")
        kind = (inspect.Parameter.KEYWORD_ONLY if p.keyword_only
                else inspect.Parameter.POSITIONAL_OR_KEYWORD)
        hint = eval(annotation, namespace)
        hint = type(None) if hint is None else hint
        value = inspect.Parameter.empty if not default else eval(default, namespace)
        if value is None and hint is not Any and hint is not type(None):
            hint = typing.Optional[hint]  # what get_type_hints gives on Python 3.8-3.10
        rows.append((p.name, kind, value, hint))
    return rows


def _actual(fn: Callable[..., Any], method: bool) -> List[Tuple[str, Any, Any, Any]]:
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())[1 if method else 0:]
    rows = []
    for p in params:
        hint = hints[p.name]
        if p.default is None and hint is not Any and hint is not type(None):
            hint = typing.Optional[hint]
        rows.append((p.name, p.kind, p.default, hint))
    return rows


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_constructor_matches_table(case: Tuple[str, Any]) -> None:
    """Each constructor the package has is the table's: its parameters
    (name, kind, default, type hint), its result and its docstring."""
    surface, factory = case
    module, owner = SURFACES[surface]
    fn = getattr(owner, factory.name)
    method = surface != gen.DEFAULT
    assert _actual(fn, method) == _expected(module, factory, surface, None)
    returns = eval(gen._returns(factory, surface, None), vars(module))
    assert typing.get_type_hints(fn)["return"] == returns
    doc = {gen.CLIENT: factory.doc, gen.DEFAULT: factory.default_doc,
           gen.ASYNCIO: factory.async_doc}[surface]
    assert inspect.getdoc(fn) == inspect.cleandoc(doc)
    if surface == gen.DEFAULT:
        assert fn.__module__ == "hilock"
        assert fn is getattr(hilock, factory.name)


@pytest.mark.skipif(not hasattr(typing, "get_overloads"), reason="Python 3.11+")
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_overloads_match_table(case: Tuple[str, Any]) -> None:
    """Where ``compat`` makes another type, two overloads, one per type."""
    surface, factory = case
    module, owner = SURFACES[surface]
    overloads = typing.get_overloads(getattr(owner, factory.name))
    kinds = ("plain", "compat") if factory.compat and surface != gen.DEFAULT else ()
    assert len(overloads) == len(kinds)
    for fn, kind in zip(overloads, kinds):
        returns = eval(gen._returns(factory, surface, kind), vars(module))
        assert typing.get_type_hints(fn)["return"] == returns
        assert _actual(fn, True) == _expected(module, factory, surface, kind)


def test_every_factory_is_exported() -> None:
    """The module-level functions are hilock's, in its ``__all__``."""
    names = [f.name for f in gen.FACTORIES]
    assert hilock._default.__all__ == names
    assert set(names) <= set(hilock.__all__)
    assert all(hilock._WHERE[n] == "_default" for n in names)


def test_family_registrations_are_current() -> None:
    """hilock.h, hold.h, the SWIG interface and the package's __init__ list
    every family of the table, as tools/gen_factories.py writes them."""
    for name in dict.fromkeys(r[0] for r in gen.REGISTRY):
        text = (ROOT / name).read_text()
        assert gen.render_registry(name, text) == text, (
            f"{name} differs from the table of families: edit FAMILIES in "
            "tools/gen_factories.py and run it (--check shows the difference)")


def test_every_family_header_is_in_the_table() -> None:
    """A public header that declares a handle on a hold (it includes
    hilock/hold.h and typedefs its handle) is a family of the table, and the
    table's modules define the classes it names: a family added by hand in
    one place and not the others fails here."""
    include = ROOT / "core" / "include" / "hilock"
    listed = {f.header for f in gen.FAMILIES}
    for header in sorted(include.glob("*.h")):
        text = header.read_text()
        if header.stem in ("hilock", "async") or '#include "hilock/hold.h"' not in text:
            continue
        assert f"typedef struct hilock_{header.stem} " in text, header.name
        assert header.stem in listed, f"{header.name} declares a family the table does not list"
    for f in gen.FAMILIES:
        assert (include / f"{f.header}.h").exists(), f.header
        for handle in f.handles:
            assert f"typedef struct {handle} {handle};" in (include / f"{f.header}.h").read_text()
        for cls in f.classes:
            assert getattr(hilock, cls).__module__ == f"hilock.{f.module}", cls
            assert cls in hilock.__all__
    for fac in gen.FACTORIES:
        assert fac.name in hilock.__all__ and callable(getattr(hilock, fac.name))


def test_a_family_missing_from_the_registrations_is_reported() -> None:
    """A stale registration (a family's row added, its files not rewritten)
    is what --check reports: drop one family's lines and compare."""
    name = "bindings/hilock.i"
    text = (ROOT / name).read_text()
    stale = text.replace("  HILOCK_AS_HOLD(hilock_election)\n", "", 1)
    assert stale != text
    assert gen.render_registry(name, stale) == text
