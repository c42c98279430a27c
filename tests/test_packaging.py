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
# (ipywidgets, jupyter_bokeh and IPython, which strategy.dashboard() needs, are dependencies: imported
# lazily all the same, they stay out of ``import interdist``.)
OPTIONAL = {
    "cupy": "gpu", "dask_cuda": "gpu", "pynvml": "gpu", "cuda": "gpu",
    "jupyter_server": "lab", "jupyter_core": "lab",
    "numba": "fast", "llvmlite": "fast",  # the ring's kernels (collectives/_ring_kernels.py), imported at first use
}
LAZY = {"ipywidgets", "jupyter_bokeh", "IPython"}  # dependencies, imported where they are used
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


def _parse(path: Path) -> ast.Module:
    """``ast.parse``, once more after CPython 3.11's spurious "AST constructor recursion depth mismatch"
    (CPython gh-106905: its AST builder's depth count goes wrong, seen rarely in threaded programs such as
    this suite's process, with Dask's and the dashboards' threads). A second failure is a real one."""
    try:
        return ast.parse(path.read_text(), str(path))
    except SystemError:
        return ast.parse(path.read_text(), str(path))


def _imported_modules() -> dict[str, list[str]]:
    """Top-level names of every module imported by interdist (in functions too; not ``if TYPE_CHECKING:``)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = _parse(path)
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
    assert not loaded & (set(OPTIONAL) | LAZY)


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


# --- metadata: license, links, scripts ----------------------------------------------------------------

REPO_URL = "https://github.com/interdist/interdist"


def test_license_file_and_expression() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "BSD-3-Clause" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "Copyright (c) 2026, The interdist developers" in text
    # PEP 639: with a license expression, no "License ::" classifier
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    assert json.loads((ROOT / "extension" / "package.json").read_text())["license"] == project["license"]


def test_project_urls_classifiers_keywords() -> None:
    project = PYPROJECT["project"]
    assert set(project["urls"]) == {"Homepage", "Documentation", "Source", "Issues", "Changelog"}
    assert all(u.startswith("https://") for u in project["urls"].values())
    for url in project["urls"].values():  # a file of the repository that it names exists
        if url.startswith(REPO_URL + "/blob/main/"):
            assert (ROOT / url.removeprefix(REPO_URL + "/blob/main/")).exists(), url
    assert project["keywords"] and "Typing :: Typed" in project["classifiers"] and (PACKAGE / "py.typed").exists()
    python = [c.rsplit(" :: ", 1)[1] for c in project["classifiers"] if re.fullmatch(r".*Python :: 3\.\d+", c)]
    assert python and min(python, key=lambda v: tuple(map(int, v.split(".")))) == project["requires-python"][2:]


def _long_description(monkeypatch: pytest.MonkeyPatch) -> str:
    """PyPI's page, built by hatch-fancy-pypi-readme from pyproject.toml as the build does."""
    from hatch_fancy_pypi_readme._builder import build_text
    from hatch_fancy_pypi_readme._config import load_and_validate_config

    monkeypatch.chdir(ROOT)  # the fragments' paths are the project's
    config = load_and_validate_config(PYPROJECT["tool"]["hatch"]["metadata"]["hooks"]["fancy-pypi-readme"])
    text: str = build_text(config.fragments, config.substitutions, "interdist", "0")
    return text


def test_long_description_works_off_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "readme" in PYPROJECT["project"]["dynamic"] and "readme" not in PYPROJECT["project"]
    assert "hatch-fancy-pypi-readme" in " ".join(PYPROJECT["build-system"]["requires"])
    text = _long_description(monkeypatch)
    assert text.startswith("# interdist") and "pip install interdist" in text
    # no make targets, no virtualenv of a clone: those need the repository (one pointer to it stays)
    assert not re.search(r"^\s*make \w", text, re.M), "a make command in the long description"
    assert len(re.findall(r"`make \w+`", text)) == 1, re.findall(r"`make \w+`", text)
    # every repository path is a link, and every link names a path that exists
    links = re.findall(re.escape(REPO_URL) + r"/(?:blob|tree)/main/([^)\s]*)", text)
    assert len(links) > 10
    missing = sorted({p for p in links if not (ROOT / p).exists()})
    assert not missing, f"links to paths that do not exist: {missing}"
    bare = r"(?<![\[/\w])`((?:docs|tests|benchmarks|notebooks|extension|interdist)/[^`]*)`(?!\])"
    assert not re.findall(bare, text), "repository paths that are not links in the long description"


def test_console_script_and_python_m() -> None:
    assert PYPROJECT["project"]["scripts"] == {"interdist-server": "interdist.server:main"}
    script = Path(sys.executable).with_name("interdist-server")
    assert script.exists(), f"{script} is missing: install the package again (make setup)"
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("usage: interdist-server"), out.stdout + out.stderr
    # `python -m interdist.server`: `import interdist` does not import interdist.server first (runpy's warning)
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "interdist.server", "--help"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and "RuntimeWarning" not in out.stderr, out.stderr
    assert out.stdout.startswith("usage: python -m interdist.server"), out.stdout


# --- extras, floors and caps ---------------------------------------------------------------------------


def test_gpu_extras_for_cuda_12_and_13() -> None:
    declared = _declared()
    for extra, cupy in (("cuda12", "cupy-cuda12x"), ("cuda13", "cupy-cuda13x")):
        assert {cupy, "dask-cuda", "nvidia-ml-py"} <= declared[extra], extra
        dask_cuda = [r for r in PYPROJECT["project"]["optional-dependencies"][extra] if r.startswith("dask-cuda")]
        assert dask_cuda == [f"dask-cuda[cu{extra[-2:]}]>=25.10"], dask_cuda  # its CUDA bindings for that version
    assert declared["gpu"] == declared["cuda12"]  # the name of earlier versions


def test_dev_extra_is_published_without_exact_pins() -> None:
    dev = PYPROJECT["project"]["optional-dependencies"]["dev"]
    assert not [r for r in dev if "==" in r], dev
    pins = (ROOT / ".ci" / "constraints.txt").read_text()
    assert re.search(r"^ruff==\S+$", pins, re.M) and re.search(r"^mypy==\S+$", pins, re.M)
    assert "-c .ci/constraints.txt" in (ROOT / "Makefile").read_text()


def _floor(name: str) -> str:
    project = PYPROJECT["project"]
    for req in project["dependencies"] + project["optional-dependencies"]["lab"]:
        if _requirement_name(req) == name:
            found = re.search(r">=\s*([0-9][^,;\s]*)", req)
            assert found, req
            return found.group(1)
    raise AssertionError(f"{name} is not a dependency")


def test_floors_and_caps_are_documented() -> None:
    doc = (ROOT / "docs" / "compatibility.md").read_text()
    for name in ("dask", "distributed", "bokeh", "numpy", "jupyterlab"):
        assert f"| {name} | {_floor(name)} |" in doc, f"docs/compatibility.md: no row for {name}'s floor {_floor(name)}"
    # the JupyterLab floor is what the prebuilt extension asks for (^4.2.0: 4.2 and later 4.x)
    app = json.loads((ROOT / "extension" / "package.json").read_text())["dependencies"]["@jupyterlab/application"]
    assert app.startswith("^") and _floor("jupyterlab") == ".".join(app[1:].split(".")[:2])
    # every upper bound has its reason in the docs, and the floors are installed by make test-floors
    project = PYPROJECT["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    for req in reqs:
        cap = re.search(r"<\s*([0-9][^,;\s]*)", req)
        if cap:
            assert f"{_requirement_name(req)} <{cap.group(1)}" in doc, f"docs/compatibility.md: why {req}?"
    assert "test-floors:" in (ROOT / "Makefile").read_text() and (ROOT / ".ci" / "floors").exists()
