"""The documentation site's sources hold together, without building it (``make docs`` builds it).

Cheap checks of what a Sphinx build would otherwise only find late, or not at all: every toctree
entry names a page that exists, every page of ``docs/`` is reachable from the index (Sphinx warns
about orphans, and ``make docs`` turns warnings into errors), every lesson in ``notebooks/`` is on the
site, and every public name of interdist (``interdist.__all__`` and the public names of each namespace
it exports) is listed in the API reference, where the entry really is that object.
"""

from __future__ import annotations

import fnmatch
import importlib
import re
import types
from pathlib import Path
from typing import Any

import pytest

import interdist

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOKS = ROOT / "notebooks"
# Written by the build, not sources: autosummary's pages, the lessons copied from notebooks/, the site.
GENERATED = ("_build", "_templates", "api/generated")


def _sources() -> dict[str, Path]:
    """Every page of the site by its docname (path under docs/ without suffix)."""
    pages = {}
    for path in sorted(DOCS.rglob("*")):
        rel = path.relative_to(DOCS).as_posix()
        if path.suffix not in (".md", ".rst") or rel.startswith(GENERATED):
            continue
        pages[rel[: -len(path.suffix)]] = path
    for nb in sorted(NOTEBOOKS.glob("*.ipynb")):  # docs/conf.py copies each into docs/lessons/
        pages[f"lessons/{nb.stem}"] = nb
    return pages


def _toctrees(path: Path) -> list[tuple[list[str], bool]]:
    """The entries of each toctree of a page (MyST ```{toctree} fences and rST directives), and whether it globs."""
    lines = path.read_text(encoding="utf-8").splitlines()
    trees = []
    i = 0
    while i < len(lines):
        line = lines[i]
        md = line.strip().startswith("```{toctree}")
        rst = line.strip() == ".. toctree::"
        if not (md or rst):
            i += 1
            continue
        entries, glob = [], False
        i += 1
        while i < len(lines):
            body = lines[i]
            if md and body.strip().startswith("```"):
                break
            if rst and body.strip() and not body.startswith((" ", "\t")):
                break
            text = body.strip()
            if text.startswith(":"):
                glob = glob or text == ":glob:"
            elif text:
                entries.append(re.sub(r"^.*<(.+)>$", r"\1", text))  # "Title <page>" -> page
            i += 1
        trees.append((entries, glob))
    return trees


def _resolve(entry: str, page: str) -> str:
    if entry.startswith("/"):
        return entry[1:]
    base = page.rsplit("/", 1)[0] + "/" if "/" in page else ""
    parts: list[str] = []
    for part in (base + entry).split("/"):
        if part == "..":
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def test_every_toctree_entry_exists_and_every_page_is_reachable_from_the_index() -> None:
    pages = _sources()
    assert "index" in pages
    reachable, todo = {"index"}, ["index"]
    while todo:
        page = todo.pop()
        for entries, glob in _toctrees(pages[page]):
            for entry in entries:
                target = _resolve(entry, page)
                found = fnmatch.filter(pages, target) if glob else [target] if target in pages else []
                assert found, f"docs/{page}: toctree entry {entry!r} names no page"
                for name in found:
                    if name not in reachable:
                        reachable.add(name)
                        todo.append(name)
    orphans = sorted(set(pages) - reachable)
    assert not orphans, f"pages in no toctree reachable from docs/index.md: {orphans}"


def test_the_site_has_every_lesson_and_the_user_pages_the_readme_links() -> None:
    pages = _sources()
    notebooks = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
    assert len(notebooks) >= 10
    assert all(f"lessons/{n}" in pages for n in notebooks)
    assert all(re.fullmatch(r"\d\d_\w+", n) for n in notebooks), "docs/conf.py copies [0-9][0-9]_*.ipynb only"
    table = (DOCS / "lessons" / "index.md").read_text(encoding="utf-8")
    for n in notebooks:
        assert re.search(rf"^\| {n[:2]} ", table, re.M), f"docs/lessons/index.md's table has no row for {n}"
    linked = set(re.findall(r"docs/([\w/-]+)\.md", (ROOT / "README.md").read_text(encoding="utf-8")))
    assert linked, "the README links no docs page"
    for name in linked:
        assert name in pages, f"README.md names docs/{name}.md, which is not a page of the site"
    for name in (
        "install",
        "tutorial",
        "changelog",
        "api/index",
        "explanation/design",
        "explanation/collectives",
        "explanation/tf-differences",
        "reliability",
        "performance",
    ):
        assert name in pages, name
    for name in ("connect-dask-cluster", "deploy-dask-hosts", "tls", "gpu-workers", "jupyterhub"):
        assert f"how-to/{name}" in pages, name


# -- The API reference -----------------------------------------------------------------------------
def _object(dotted: str) -> Any:
    """The object a dotted name documents: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _autosummaries(path: Path) -> list[str]:
    """The fully qualified names an rST page lists in its autosummary tables."""
    names, current = [], ""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith(".. currentmodule::"):
            current = line.split("::", 1)[1].strip()
        if line == ".. autosummary::":
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                entry = lines[i].strip()
                if entry and not entry.startswith(":"):
                    entry = entry.lstrip("~")
                    names.append(entry if not current else f"{current}.{entry}")
                i += 1
            continue
        i += 1
    return names


_ALIAS = re.compile(r"^- ``([\w.]+)`` is :py:obj:`([\w.]+)`", re.M)
_NAMESPACE = re.compile(r"^- ``(\w+)`` is the namespace :doc:`([\w.]+)`", re.M)


def _public(namespace: Any) -> list[str]:
    names = getattr(namespace, "__all__", None)
    if names is None and isinstance(namespace, types.ModuleType):  # no __all__: what it defines itself
        names = [
            n
            for n, v in vars(namespace).items()
            if not n.startswith("_") and getattr(v, "__module__", None) == namespace.__name__
        ]
    if names is None:  # a SimpleNamespace
        names = [n for n in vars(namespace) if not n.startswith("_")]
    return list(names)


API = DOCS / "api"
LISTED = {name for page in sorted(API.glob("*.rst")) for name in _autosummaries(page)}


def test_every_entry_of_the_api_reference_is_a_real_object() -> None:
    assert len(LISTED) > 150
    for name in sorted(LISTED):
        _object(name)  # raises when a page lists a name that does not exist
    for page in sorted(API.glob("*.rst")):
        text = page.read_text(encoding="utf-8")
        for alias, target in _ALIAS.findall(text):
            assert target in LISTED, f"{page.name}: {alias} points to {target}, which no autosummary lists"
        for alias, target in _NAMESPACE.findall(text):
            assert (API / f"{target}.rst").exists(), f"{page.name}: {alias} points to a missing page {target}"


def test_every_top_level_name_is_in_the_api_reference() -> None:
    index = (API / "index.rst").read_text(encoding="utf-8")
    assert "__version__" in index
    for name in interdist.__all__:
        value = getattr(interdist, name)
        if name == "__version__":
            continue
        if isinstance(value, types.ModuleType):
            assert (API / f"interdist.{name}.rst").exists(), f"no API page for the namespace interdist.{name}"
            assert f"   interdist.{name}\n" in index, f"api/index.rst's toctree misses interdist.{name}"
            continue
        assert f"interdist.{name}" in LISTED, f"interdist.{name} is in no autosummary of docs/api/"
        assert _object(f"interdist.{name}") is value


def _documents(page: Path, name: str, value: Any, where: str) -> bool:
    """Whether ``page`` lists ``value`` under ``name``, or says it is an object listed elsewhere."""
    listed = [n for n in _autosummaries(page) if n.rsplit(".", 1)[-1] == name]
    if any(_object(n) is value for n in listed):
        return True
    aliases = dict(_ALIAS.findall(page.read_text(encoding="utf-8")))
    return where in aliases and _object(aliases[where]) is value


@pytest.mark.parametrize(
    "namespace", sorted(n for n in interdist.__all__ if isinstance(getattr(interdist, n), types.ModuleType))
)
def test_every_name_of_each_namespace_is_on_its_page(namespace: str) -> None:
    page = API / f"interdist.{namespace}.rst"
    module = getattr(interdist, namespace)
    namespaces = dict(_NAMESPACE.findall(page.read_text(encoding="utf-8")))
    missing = []
    for name in _public(module):
        value = getattr(module, name)
        if name in namespaces:
            continue
        if isinstance(value, (types.ModuleType, types.SimpleNamespace)):  # a namespace inside: all its names here
            missing += [
                f"{name}.{sub}"
                for sub in _public(value)
                if not _documents(page, sub, getattr(value, sub), f"{name}.{sub}")
            ]
        elif not _documents(page, name, value, name):
            missing.append(name)
    assert not missing, f"docs/api/{page.name} does not list interdist.{namespace}'s {missing}"


# -- How the site is built -------------------------------------------------------------------------
def test_make_docs_builds_with_warnings_as_errors_and_ci_runs_it() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    target = re.search(r"^docs:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert target, "the Makefile has no docs target"
    assert re.search(r"sphinx-build .*-W .*docs docs/_build/html", target.group(1)), target.group(1)
    assert "make docs" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make docs" in (ROOT / "README.md").read_text(encoding="utf-8")
    conf = (DOCS / "conf.py").read_text(encoding="utf-8")
    assert "nb_execution_raise_on_error = True" in conf  # a lesson that fails fails the build
