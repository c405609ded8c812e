"""MkDocs hooks: the pages and images made at build time.

Nothing these add is checked in; each build makes them anew, in memory,
as files of the site (mkdocs.yml lists them in its nav):

  api/c/*.md        the C API reference, from core/include/hilock/*.h
                    (docs/gen_c_api.py)
  api/python.md     the Python API reference, from the built package
                    (docs/gen_py_api.py, run with this process's PYTHONPATH:
                    tests/build_docs.sh sets it to its build tree)
  bench/*.png       the benchmark plots, from docs/bench/results.json
                    (tests/bench/plot.py)
  changelog.md      CHANGELOG.md
  contributing.md   CONTRIBUTING.md, its links into docs/ made site-relative

Pages of docs/ link to the top-level files as ../CONTRIBUTING.md and
../CHANGELOG.md, which work in the repository; on_page_markdown points
those links at the site's copies.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.hilock")
DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"hilock_docs_{path.stem}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses look their module up there
    keep, sys.dont_write_bytecode = sys.dont_write_bytecode, True   # no __pycache__ in docs/
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.dont_write_bytecode = keep
    return mod


def _add(files: Files, config: Any, uri: str, content: Any) -> None:
    old = files.get_file_from_path(uri)
    if old is not None:   # a checked-in file would hide the generated one
        raise PluginError(f"docs/{uri} is generated at build time: remove the file")
    files.append(File.generated(config, uri, content=content))


def python_reference(*args: str) -> str:
    script = DOCS / "gen_py_api.py"
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          env=dict(os.environ), cwd=str(ROOT))
    if proc.returncode != 0:
        raise PluginError("the Python API reference needs the built hilock module: "
                          "run tests/build_docs.sh, or put a build's python/ directory "
                          f"on PYTHONPATH.\n{proc.stderr.strip()}")
    log.info(proc.stderr.strip())
    return proc.stdout


def on_files(files: Files, config: Any) -> Files:
    gen_c = _module(DOCS / "gen_c_api.py")
    for uri, text in gen_c.pages().items():
        _add(files, config, uri, text)
    for header, text in gen_c.orphans():
        log.info("%s.h: a comment above no declaration is left out: %.60s...", header, text)

    _add(files, config, "api/python.md", python_reference())
    _add(files, config, "api/python-asyncio.md", python_reference("--asyncio"))

    plot = _module(ROOT / "tests" / "bench" / "plot.py")
    try:
        plots = plot.render([DOCS / "bench" / "results.json"])
    except ImportError as e:
        raise PluginError(f"the benchmark plots need matplotlib ({e})") from e
    for name, png in plots.items():
        _add(files, config, f"bench/{name}", png)

    _add(files, config, "changelog.md", (ROOT / "CHANGELOG.md").read_text())
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    # Links from the repository's top level into docs/ are site-relative here.
    contributing = re.sub(r"\]\(docs/", "](", contributing)
    _add(files, config, "contributing.md", contributing)
    return files


TOP_LEVEL = re.compile(r"\]\(\.\./(CONTRIBUTING|CHANGELOG)\.md(#[^)]*)?\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if "/" in page.file.src_uri:   # only pages at the top of docs/ link up one level
        return markdown
    return TOP_LEVEL.sub(lambda m: f"]({m.group(1).lower()}.md{m.group(2) or ''})", markdown)
