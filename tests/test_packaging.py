"""Packaging: one version, every imported distribution declared, ``import interdist`` off POSIX."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import interdist

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "interdist"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


# --- one version ---------------------------------------------------------------------------------


def test_version_is_single_sourced() -> None:
    """``extension/package.json`` holds the version; everything else derives from it."""
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project.get("dynamic", [])
    assert PYPROJECT["tool"]["hatch"]["version"] == {"source": "nodejs", "path": "extension/package.json"}

    source = json.loads((ROOT / "extension" / "package.json").read_text())["version"]
    lock = json.loads((ROOT / "extension" / "package-lock.json").read_text())
    built = json.loads((PACKAGE / "labextension" / "package.json").read_text())["version"]
    # Plain X.Y.Z, as npm and PEP 440 write it alike (hatch-nodejs-version would turn 1.0.0-alpha.1 into 1.0.0a1).
    assert interdist.__version__ == importlib.metadata.version("interdist") == source == built
    assert lock["version"] == lock["packages"][""]["version"] == source, "npm version ... updates the lockfile too"


# --- every imported third-party module declared --------------------------------------------------

# Imported modules that are declared in an extra instead of the dependencies, and which extra: their
# imports are optional (inside functions, behind a fallback), so a plain install still works.
OPTIONAL = {
    "cupy": "gpu", "dask_cuda": "gpu", "pynvml": "gpu", "cuda": "gpu",
    "ipywidgets": "lab", "jupyter_bokeh": "lab", "jupyter_server": "lab", "jupyter_core": "lab",
    "IPython": "lab",  # the inline dashboard drains at the end of each cell (a post_run_cell hook)
}
# Distributions of modules that are usually not installed here (no GPU): packages_distributions() knows
# installed ones only.
NOT_INSTALLED = {
    "cupy": {"cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x", "cupy"},
    "dask_cuda": {"dask-cuda"},
    "pynvml": {"nvidia-ml-py", "pynvml"},
    "cuda": {"cuda-bindings", "cuda-python"},
}
# Calls that import the module named by their first argument.
IMPORTING_CALLS = {"import_module", "find_spec", "__import__"}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(req: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    assert match, req
    return _normalize(match.group(1))


def _declared() -> dict[str, set[str]]:
    """Distribution names by where they are declared: ``""`` for the dependencies, else the extra."""
    project = PYPROJECT["project"]
    groups = {"": project["dependencies"], **project.get("optional-dependencies", {})}
    out: dict[str, set[str]] = {}

    def expand(group: str, seen: frozenset[str]) -> set[str]:
        names = set()
        for req in groups[group]:
            name = _requirement_name(req)
            if name == "interdist":  # "interdist[lab,dataframe]": the extras it names
                extras = re.search(r"\[([^\]]*)\]", req)
                for extra in (e.strip() for e in extras.group(1).split(",")) if extras else ():
                    if extra not in seen:
                        names |= expand(extra, seen | {extra})
            else:
                names.add(name)
        return names

    for group in groups:
        out[group] = expand(group, frozenset({group}))
    return out


def _imported_modules() -> dict[str, list[str]]:
    """Top-level names of every module imported by interdist (in functions too; not ``if TYPE_CHECKING:``)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)
                  and (node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None))
                  in IMPORTING_CALLS):
                names = [node.args[0].value]
            for name in names:
                top = name.split(".")[0]
                where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
                if top and top != "interdist" and top not in sys.stdlib_module_names:
                    found.setdefault(top, []).append(where)
    return found


def test_every_imported_distribution_is_declared() -> None:
    declared = _declared()
    installed = importlib.metadata.packages_distributions()
    imported = _imported_modules()
    assert {"numpy", "distributed", "msgpack"} <= imported.keys()  # the walk sees what it should
    problems = []
    for module, where in sorted(imported.items()):
        dists = {_normalize(d) for d in installed.get(module, ())} or NOT_INSTALLED.get(module, set())
        if not dists:
            problems.append(f"{module} ({where[0]}): not installed, so its distribution is unknown: "
                            "install it, or add it to NOT_INSTALLED")
            continue
        extra = OPTIONAL.get(module, "")
        if not dists & declared[extra]:
            place = f"the [{extra}] extra" if extra else "[project] dependencies"
            problems.append(f"{module} ({', '.join(where[:3])}): none of {sorted(dists)} is in {place}")
    assert not problems, "imported but not declared in pyproject.toml:\n" + "\n".join(problems)


def test_optional_modules_are_not_imported_with_interdist() -> None:
    """What the extras provide stays out of ``import interdist`` (else a plain install would fail)."""
    code = "import sys, interdist; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                cwd=ROOT, timeout=120).stdout.split())
    assert not loaded & set(OPTIONAL)


# --- import interdist on every OS ----------------------------------------------------------------

# The interpreter pretends to be Windows for interdist only: the modules that `import interdist` loads
# from elsewhere (stdlib, Dask, NumPy...) are imported first, as they are (those libraries choose their
# Windows branches themselves there); then POSIX-only modules become unimportable and POSIX-only
# attributes go away, and interdist is imported.
_NOT_POSIX = textwrap.dedent("""
    import importlib, importlib.abc, json, select, socket, sys

    for name in json.loads(sys.argv[1]):
        try:
            importlib.import_module(name)
        except Exception:
            pass

    BLOCKED = {"fcntl", "_posixshmem", "resource"}

    class NotOnWindows(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"No module named {name!r} (not on Windows)", name=name)
            return None

    for name in BLOCKED:
        sys.modules.pop(name, None)
    sys.meta_path.insert(0, NotOnWindows())
    del socket.AF_UNIX
    del select.poll

    import interdist
    print("imported", interdist.__version__)
""")


class NeedsPosix(Exception):
    """``import interdist`` failed on a module or attribute that Windows lacks."""


def test_import_without_posix_only_modules() -> None:
    list_modules = ("import json, sys, interdist; "
                    "print(json.dumps([m for m in sys.modules if m.split('.')[0] != 'interdist']))")
    others = subprocess.run([sys.executable, "-c", list_modules], capture_output=True, text=True, check=True,
                            cwd=ROOT, timeout=120).stdout
    run = subprocess.run([sys.executable, "-c", _NOT_POSIX, others], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    if run.returncode and ("(not on Windows)" in run.stderr or "AF_UNIX" in run.stderr or "'poll'" in run.stderr):
        raise NeedsPosix(run.stderr)
    assert run.returncode == 0, run.stderr  # any other failure is a failure, not this test's xfail
    assert run.stdout.startswith("imported")
