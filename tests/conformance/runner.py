"""Runs a conformance case (interdist code + the value TensorFlow 2.21 gave) and compares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SEED = HERE / "seed_examples.json"  # the given examples (SEED_README.md); must all pass
# Our own recordings (recorder/record.py writes them; rounds 1, 2 and 3), reviewed before commit.
RECORDED = tuple(sorted(HERE.glob("tf_cases*.json"), key=lambda p: (len(p.name), p.name)))


def load(path: Path) -> list[dict[str, Any]]:
    """The cases of one file. A missing or empty file is an error, never an empty parametrization."""
    if not path.is_file():
        raise FileNotFoundError(f"conformance case file missing: {path}")
    cases = json.loads(path.read_text())
    if not isinstance(cases, list) or not cases:
        raise ValueError(f"conformance case file {path} holds no cases")
    return cases


def matches(got: Any, exp: Any) -> bool:
    """The comparison rules of SEED_README.md."""
    if isinstance(exp, dict):
        return isinstance(got, dict) and set(got) == set(exp) and all(matches(got[k], exp[k]) for k in exp)
    if isinstance(exp, list):
        return isinstance(got, (list, tuple)) and len(got) == len(exp) and all(
            matches(g, e) for g, e in zip(got, exp))
    if isinstance(exp, (bool, str)) or exp is None:
        return bool(got == exp) and type(got) is not np.ndarray
    try:
        return bool(np.allclose(got, exp, rtol=1e-5, atol=1e-6))
    except (TypeError, ValueError):
        return False


def run_case(case: dict[str, Any]) -> tuple[bool, str]:
    import interdist as idist

    exp = case["expected"]
    ns: dict[str, Any] = {"np": np, "idist": idist}
    try:
        exec(compile(case["code"], f"<case {case['id']}>", "exec"), ns)  # noqa: S102 - our own test data
    except BaseException as e:  # noqa: BLE001
        if isinstance(exp, dict) and set(exp) == {"raises"}:
            ok = any(k.__name__ == exp["raises"] for k in type(e).__mro__)
            return ok, f"raised {type(e).__name__}: {e}"
        return False, f"raised {type(e).__name__}: {e}"
    got = ns.get("result")
    if isinstance(exp, dict) and set(exp) == {"raises"}:
        return False, f"expected {exp['raises']} but got {got!r}"
    return matches(got, exp), f"got {got!r}, expected {exp!r}"
