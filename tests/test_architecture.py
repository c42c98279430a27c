"""The package's layers, enforced: every import points down, function-local imports included.

An import-linter "layers" contract, written out so that it also counts imports inside functions
(the ones that used to hide a 14-module cycle) and needs no extra tool. Each layer may import its
own layer and the layers below it; ``if TYPE_CHECKING:`` imports are annotations only and do not
count. The layers are documented in ``interdist/__init__.py``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import interdist

PACKAGE = Path(interdist.__file__).parent

# Bottom first. A module belongs to the first layer with a prefix that matches it.
LAYERS: list[tuple[str, list[str]]] = [
    ("core", ["interdist._context", "interdist._convert", "interdist._gpu", "interdist._nest",
              "interdist._reduction", "interdist._jit", "interdist.reduce_op", "interdist.errors", "interdist._event_types", "interdist.events",
              "interdist.chrome_trace",
              "interdist.config", "interdist.device", "interdist.autodiff"]),
    ("contract", ["interdist.protocol", "interdist.protocol_errors", "interdist.control"]),
    ("collectives", ["interdist.collectives", "interdist.cluster_resolver", "interdist.partitioners"]),
    ("values", ["interdist.values"]),
    ("input", ["interdist.input"]),
    ("replica", ["interdist.replica"]),
    ("worker", ["interdist.worker"]),
    # The views read events only; the notebook's side registers the Dask pages before a scheduler starts.
    ("views", ["interdist.dashboard", "interdist.lab"]),
    ("client", ["interdist.client"]),
    ("api", ["interdist.strategy", "interdist.optimizers", "interdist.metrics", "interdist.checkpoint",
             "interdist.checkpoint_collect", "interdist.checkpoint_format", "interdist.checkpoint_read",
             "interdist.checkpoint_restore", "interdist.checkpoint_state",
             "interdist.distribute_lib", "interdist.data", "interdist.debug", "interdist.nn", "interdist.losses",
             "interdist.layers", "interdist.initializers", "interdist.regularizers", "interdist.math", "interdist.random",
             "interdist.train"]),
    ("top", ["interdist.experimental", "interdist.server", "interdist.demo", "interdist"]),
]

# Function-local imports of interdist modules are allowed only where the target is heavy or optional
# (Bokeh, ipywidgets, jupyter_server behind it) and so must not load with ``import interdist``; and
# interdist.server, the command-line module, which ``import interdist`` loads only when ``interdist.Server``
# is first used (``python -m interdist.server`` must find it not yet imported: runpy's RuntimeWarning); and
# compiled kernels, which import numba (the optional ``fast`` extra) and compile on first use.
LAZY_OK = ("interdist.dashboard", "interdist.lab", "interdist.server", "interdist.collectives._ring_kernels",
           "interdist.replica._update_kernels", "interdist.collectives._sum_kernels")

# Modules that must not import Dask at all: the SPMD engine and what it stands on run without it
# (the default strategy runs the engine in the notebook; a fake transport is enough to test it).
DASK_FREE = ("interdist.replica", "interdist.values", "interdist.protocol", "interdist._")


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _layer(module: str) -> int:
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def _target(module: str, is_package: bool, node: ast.ImportFrom | ast.Import) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level:
        base = base[:len(base) - (node.level - 1)]
        prefix = ".".join(base) + ("." + node.module if node.module else "")
    else:
        prefix = node.module or ""
    out = []
    for alias in node.names:
        sub = f"{prefix}.{alias.name}"
        out.append(sub if sub in MODULES else prefix)
    return out


def _imports(module: str, typing: bool = False) -> list[tuple[str, bool, int]]:
    """(imported module, inside a function, line) for every import of ``module`` outside TYPE_CHECKING
    (with ``typing``, those inside it too)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    type_checking: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_checking.update(id(n) for n in ast.walk(node))
    found: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and (typing or id(child) not in type_checking):
                for name in _target(module, path.name == "__init__.py", child):
                    found.append((name, local, child.lineno))
            visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(tree, False)
    return found


def _internal(name: str) -> str | None:
    while name and name not in MODULES:
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return name or None


GRAPH = {m: [(t, local, line) for n, local, line in _imports(m) if (t := _internal(n)) and t != m]
         for m in MODULES}


def test_every_module_has_a_layer() -> None:
    # _layer raises AssertionError naming a module that is in no layer
    for module in MODULES:
        _layer(module)


def test_imports_point_down() -> None:
    upward = [f"{MODULES[m].relative_to(PACKAGE.parent)}:{line}: {m} ({LAYERS[_layer(m)][0]}) imports "
              f"{t} ({LAYERS[_layer(t)][0]})"
              for m, edges in GRAPH.items() for t, _, line in edges
              if _layer(t) > _layer(m) and m != "interdist"]
    assert not upward, "\n".join(upward)


def test_imports_for_typing_point_down_too() -> None:
    """An ``if TYPE_CHECKING:`` import names nothing of a layer above either: a module that needs the type of
    an object from above says what it uses of it instead (a ``typing.Protocol``, e.g. protocol.ResolvingReplica)."""
    upward = [f"{MODULES[m].relative_to(PACKAGE.parent)}:{line}: {m} ({LAYERS[_layer(m)][0]}) names "
              f"{t} ({LAYERS[_layer(t)][0]}) for typing"
              for m in MODULES if m != "interdist"
              for n, _, line in _imports(m, typing=True)
              if (t := _internal(n)) and t != m and _layer(t) > _layer(m)]
    assert not upward, "\n".join(upward)


def test_the_contract_names_no_module_of_interdist() -> None:
    """protocol.py, the contract every layer above it imports, imports nothing of interdist, not even for
    typing, and no annotation in it names an interdist module (its docstring says so; replica/, worker/ and
    the notebook's side stand on it)."""
    module = "interdist.protocol"
    named = [f"line {line}: imports {n}" for n, _, line in _imports(module, typing=True)
             if n.split(".")[0] == "interdist"]
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        annotations: list[ast.expr | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            annotations += [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
            annotations += [args.vararg and args.vararg.annotation, args.kwarg and args.kwarg.annotation, node.returns]
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        named += [f"line {a.lineno}: annotation {ast.unparse(a)}" for a in annotations
                  if a is not None and "interdist" in ast.unparse(a)]
    assert not named, "\n".join(named)


def test_no_import_cycles() -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _, _ in GRAPH[v]:
            if w == "interdist":
                continue  # the public package re-exports; nothing below imports it for a name
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            strongconnect(v)
    assert not cycles, cycles


def test_function_local_imports_only_for_optional_parts() -> None:
    lazy = [f"{MODULES[m].relative_to(PACKAGE.parent)}:{line}: {t}"
            for m, edges in GRAPH.items() for t, local, line in edges
            if local and not t.startswith(LAZY_OK)]
    assert not lazy, "import these at the top of the module:\n" + "\n".join(lazy)


@pytest.mark.parametrize("prefix", DASK_FREE)
def test_the_engine_does_not_import_dask(prefix: str) -> None:
    bad = [f"{MODULES[m].relative_to(PACKAGE.parent)}:{line}: {n}"
           for m in MODULES if m.startswith(prefix)
           for n, _, line in _imports(m) if n.split(".")[0] in ("dask", "distributed")]
    assert not bad, "\n".join(bad)



# The modules still over MAX_LINES, each with its size when the limit came (issue 26) as its ceiling. This list
# only shrinks: a module here may get shorter, never longer, and leaves the list once it is within the limit
# (split along a real seam, the original module re-exporting what moved); no module joins it.
MAX_LINES = 400
OVERSIZE: dict[str, int] = {}


def _line_counts() -> dict[str, int]:
    return {path.relative_to(PACKAGE.parent).as_posix(): len(path.read_text().splitlines())
            for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_module_is_over_400_lines() -> None:
    counts = _line_counts()
    over = [f"{name}: {n} lines (at most {MAX_LINES}: split it along a seam; OVERSIZE only shrinks)"
            for name, n in counts.items() if n > MAX_LINES and name not in OVERSIZE]
    grown = [f"{name}: {counts[name]} lines, over its ceiling of {ceiling} in OVERSIZE (it may only shrink)"
             for name, ceiling in OVERSIZE.items() if name in counts and counts[name] > ceiling]
    done = [f"{name}: {counts[name]} lines now, within {MAX_LINES}: remove it from OVERSIZE"
            for name in OVERSIZE if name in counts and counts[name] <= MAX_LINES]
    gone = [f"{name}: no such module any more: remove it from OVERSIZE" for name in OVERSIZE if name not in counts]
    assert not (over or grown or done or gone), "\n".join(over + grown + done + gone)
