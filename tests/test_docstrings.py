"""Every public name has a docstring with a one-sentence summary and an example that runs (issue 26).

The public names are those of ``interdist.__all__``, of the ``__all__`` of each public module it names
(``cluster_resolver``, ``data``, ``experimental``...) and of ``interdist.dashboard`` and
``interdist.experimental.partitioners``; a public module without ``__all__`` (``config``, ``debug``,
``optimizers``) counts the classes and functions it defines and the values it assigns, those with no
leading underscore. One object re-exported under several names is checked once, under its first name.

The examples are doctests: ``pytest --doctest-modules`` runs those of classes, functions and modules
with the package. A value that cannot hold a ``__doc__`` (``__version__``, ``data.AUTOTUNE``,
``config.settings``) is documented where it is assigned, as Sphinx reads it: a string right after the
assignment, or ``#:`` comments right above it; pytest does not see those, so this file runs them.

``python tests/test_docstrings.py`` prints the names that lack a docstring or an example.
"""

from __future__ import annotations

import ast
import doctest
import functools
import importlib
import inspect
import re
import sys
import types
from pathlib import Path
from typing import Any

import interdist

# Public modules besides those named in ``interdist.__all__``.
EXTRA_MODULES = ["interdist.dashboard", "interdist.partitioners"]

# Names exempt from needing an example (``>>>``), each with the reason. A docstring is still required.
NO_EXAMPLE: dict[str, str] = {}

# Names whose every example is marked ``# doctest: +SKIP``, each with the reason it cannot run here.
_PS = "needs a Dask cluster with ps and worker tasks (seconds to start); ParameterServerStrategy's example runs it"
SKIPPED_EXAMPLES: dict[str, str] = {
    "interdist.coordinator": _PS,
    "interdist.strategy.coordinator.ClusterCoordinator": _PS,
    "interdist.strategy.coordinator.PerWorkerDataset": _PS,
    "interdist.strategy.coordinator.PerWorkerIterator": _PS,
}


def public_modules() -> list[types.ModuleType]:
    mods = [interdist]
    mods += [getattr(interdist, n) for n in interdist.__all__ if inspect.ismodule(getattr(interdist, n))]
    mods += [importlib.import_module(m) for m in EXTRA_MODULES]
    return list({id(m): m for m in mods}.values())


@functools.cache
def _source(module_name: str) -> tuple[ast.Module, list[str]] | None:
    mod = sys.modules.get(module_name) or importlib.import_module(module_name)
    path = getattr(mod, "__file__", None)
    if not path or not path.endswith(".py"):
        return None
    text = Path(path).read_text()
    return ast.parse(text), text.splitlines()


def _module_names(mod: types.ModuleType) -> list[str]:
    """``__all__``, or what the module defines or assigns with no leading underscore."""
    names = getattr(mod, "__all__", None)
    if names is not None:
        return list(names)
    source = _source(mod.__name__)
    assert source is not None, mod.__name__
    found: list[str] = []
    for node in source[0].body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [t.id for t in targets if isinstance(t, ast.Name)]
    return [n for n in dict.fromkeys(found) if not n.startswith("_")]


def _is_value(obj: Any) -> bool:
    return not (inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj))


def public_names() -> list[tuple[str, Any]]:
    """``(qualified name, object)`` for each public name, one per object (the first name it has here)."""
    seen: set[Any] = set()
    out: list[tuple[str, Any]] = []
    for mod in public_modules():
        for name in _module_names(mod):
            obj = getattr(mod, name)
            qual = f"{mod.__name__}.{name}"
            key = qual if _is_value(obj) else id(obj)  # values by name: AUTOTUNE and INFINITE_CARDINALITY are -1
            if key not in seen:
                seen.add(key)
                out.append((qual, obj))
    return out


def _assignment_doc(module_name: str, name: str, depth: int = 0) -> str | None:
    """The docstring of a value: the string after its assignment, or the ``#:`` comments above it;
    followed through ``from X import name`` to the module that assigns it."""
    source = _source(module_name)
    if source is None or depth > 5:
        return None
    tree, lines = source
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _assignment_doc(node.module, alias.name, depth + 1)
    for parent in ast.walk(tree):
        body = getattr(parent, "body", None)
        if not isinstance(body, list):
            continue
        for i, node in enumerate(body):
            if not isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if not any(isinstance(t, ast.Name) and t.id == name for t in targets):
                continue
            after = body[i + 1] if i + 1 < len(body) else None
            value = after.value if isinstance(after, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return inspect.cleandoc(value.value)
            comments: list[str] = []
            line = node.lineno - 2
            while line >= 0 and lines[line].strip().startswith("#:"):
                comments.insert(0, lines[line].strip()[3:])
                line -= 1
            if comments:
                return "\n".join(comments)
    return None


def _source_doc(obj: Any) -> str | None:
    """The docstring of the top-level ``def``/``class`` of the object's name in its module's source: for a
    class the module replaces at run time (``autodiff.Traced`` becomes autograd's box at the first tape)."""
    module_name, name = getattr(obj, "__module__", None), getattr(obj, "__name__", None)
    if not module_name or not name or not module_name.startswith("interdist"):
        return None
    source = _source(module_name)
    for node in source[0].body if source else []:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return ast.get_docstring(node)
    return None


def docstring(qual: str, obj: Any) -> str | None:
    """The object's own docstring (not one inherited, not the signature ``@dataclass`` writes)."""
    if _is_value(obj):
        module_name, _, name = qual.rpartition(".")
        return _assignment_doc(module_name, name)
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if (not isinstance(doc, str) or not doc.strip()) and not inspect.ismodule(obj):
        doc = _source_doc(obj)
    if not isinstance(doc, str) or not doc.strip():
        return None
    if inspect.isclass(obj) and doc.startswith(obj.__name__ + "("):
        return None
    return inspect.cleandoc(doc)


_STARTS_A_SENTENCE = re.compile(r"^[A-Z0-9`\"'(*:]")


def summary_problem(doc: str) -> str | None:
    """Why the summary (the first paragraph) is not a sentence, or None."""
    first = doc.strip().split("\n\n")[0].strip()
    if not _STARTS_A_SENTENCE.match(first):
        return f"the summary should start a sentence: {first[:60]!r}"
    if not first.rstrip(")").endswith((".", "!", "?")) and not first.endswith(".)"):
        return f"the summary should end with a full stop: {first[-60:]!r}"
    return None


def _examples(qual: str, doc: str) -> list[doctest.Example]:
    return doctest.DocTestParser().get_examples(doc, qual)


def only_skipped(qual: str, doc: str) -> bool:
    """Whether the docstring has examples and every one of them is ``# doctest: +SKIP``."""
    examples = _examples(qual, doc)
    return bool(examples) and all(e.options.get(doctest.SKIP) for e in examples)


def problems() -> dict[str, str]:
    """Each public name whose docstring is missing, has no summary sentence, or has no example."""
    out: dict[str, str] = {}
    for qual, obj in public_names():
        doc = docstring(qual, obj)
        if doc is None:
            out[qual] = "no docstring"
            continue
        bad = summary_problem(doc)
        if bad:
            out[qual] = bad
        elif ">>>" not in doc and qual not in NO_EXAMPLE:
            out[qual] = "no example (>>>)"
        elif only_skipped(qual, doc) and qual not in SKIPPED_EXAMPLES:
            out[qual] = "every example is +SKIP: make one run, or add the name to SKIPPED_EXAMPLES with the reason"
    return out


def test_every_public_name_has_a_docstring_with_an_example() -> None:
    bad = problems()
    assert not bad, "\n".join(f"{k}: {v}" for k, v in sorted(bad.items()))


def test_the_allow_lists_are_current() -> None:
    """Each exemption names a public name that still needs it: an example that runs retires it."""
    names = dict(public_names())
    for qual in NO_EXAMPLE:
        assert qual in names, f"{qual} is not a public name (any more)"
        assert ">>>" not in (docstring(qual, names[qual]) or ""), f"{qual} has an example now: take it off NO_EXAMPLE"
    for qual in SKIPPED_EXAMPLES:
        assert qual in names, f"{qual} is not a public name (any more)"
        doc = docstring(qual, names[qual]) or ""
        assert only_skipped(qual, doc), f"{qual} has an example that runs now: take it off SKIPPED_EXAMPLES"


def test_the_examples_of_values_run() -> None:
    """The examples in the docstrings of values (``data.AUTOTUNE``...), which ``--doctest-modules`` cannot
    see (they are not an object's ``__doc__``)."""
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    ran = 0
    for qual, obj in public_names():
        doc = docstring(qual, obj) if _is_value(obj) else None
        if not doc or ">>>" not in doc:
            continue
        test = doctest.DocTestParser().get_doctest(doc, {}, qual, None, 0)
        result = runner.run(test, out=report.append)
        ran += 1
        assert not result.failed, "".join(report)
    assert ran >= 5  # __version__, data.AUTOTUNE, data.experimental, config.settings, config.KEYS...


if __name__ == "__main__":
    names = public_names()
    bad = problems()
    print(f"{len(names)} public names (objects), {len(bad)} lacking:")
    for k, v in sorted(bad.items()):
        print(f"  {k}: {v}")
