"""Which autodiff library interdist's ``GradientTape`` stands on: the measured criteria (issue 24).

For each candidate that imports in this Python (autograd, JAX, PyTorch):

- the cost a worker pays to import it: wall time and resident memory over ``import numpy``
  (a fresh interpreter per sample, the median of 5);
- the overhead of one gradient at 1M parameters (a 1000x1000 float32 dense layer, batch 64,
  mean squared error) against the same gradient written by hand in NumPy, median of 30;
- the same through interdist's own ``GradientTape`` when interdist imports.

Run: ``python bench_autodiff_choice.py`` (any environment holding the candidates: the figures in
docs/autodiff.md came from a scratch venv with autograd, jax[cpu] and torch's CPU wheel).
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

_IMPORT = """
import json, os, sys, time, resource
t0 = time.perf_counter()
import numpy
t1 = time.perf_counter()
rss0 = int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
{stmt}
t2 = time.perf_counter()
rss1 = int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
print(json.dumps({{"s": t2 - t1, "mb": (rss1 - rss0) / 2**20}}))
"""

CANDIDATES = {
    "autograd": "import autograd, autograd.numpy",
    "jax": "import jax, jax.numpy; jax.numpy.zeros(1).block_until_ready()",
    "torch": "import torch",
}


def import_cost(stmt: str, samples: int = 5) -> tuple[float, float]:
    out = []
    for _ in range(samples):
        res = subprocess.run([sys.executable, "-c", _IMPORT.format(stmt=stmt)], capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(res.stderr.strip().splitlines()[-1])
        out.append(json.loads(res.stdout))
    return statistics.median(o["s"] for o in out), statistics.median(o["mb"] for o in out)


def paired_ms(reference: Callable[[], object], fn: Callable[[], object], n: int = 30) -> tuple[float, float]:
    """Medians (ms) of ``reference`` and ``fn`` timed alternately, so both see the same machine."""
    for _ in range(2):
        reference()
        fn()
    a, b = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        reference()
        t1 = time.perf_counter()
        fn()
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return statistics.median(a) * 1e3, statistics.median(b) * 1e3


def main() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1000, 1000)).astype(np.float32) * 0.01
    x = rng.standard_normal((64, 1000)).astype(np.float32)
    y = rng.standard_normal((64, 1000)).astype(np.float32)

    def by_hand() -> np.ndarray:
        err = x @ w - y
        return (x.T @ err) * np.float32(2 / err.size)

    reference = by_hand()
    print("1M parameters, batch 64, MSE; each gradient timed alternately with NumPy by hand (medians of 30)")
    for name, stmt in CANDIDATES.items():
        if importlib.util.find_spec(name) is None:
            print(f"{name}: not installed here")
            continue
        s, mb = import_cost(stmt)
        grad = None
        if name == "autograd":
            import autograd
            import autograd.numpy as anp

            g = autograd.grad(lambda w_: anp.mean((x @ w_ - y) ** 2))
            grad = lambda: g(w)
        elif name == "jax":
            import jax
            import jax.numpy as jnp

            gj = jax.grad(lambda w_: jnp.mean((x @ w_ - y) ** 2))
            gjit = jax.jit(gj)
            grad = lambda: np.asarray(gj(w))
            jit_ms = paired_ms(by_hand, lambda: np.asarray(gjit(w)))[1]
        elif name == "torch":
            import torch

            xt, yt = torch.from_numpy(x), torch.from_numpy(y)

            def grad() -> np.ndarray:
                wt = torch.from_numpy(w).requires_grad_(True)
                loss = torch.mean((xt @ wt - yt) ** 2)
                (gw,) = torch.autograd.grad(loss, wt)
                return gw.numpy()

        assert grad is not None
        np.testing.assert_allclose(np.asarray(grad()), reference, rtol=1e-3, atol=1e-6)
        hand, ms = paired_ms(by_hand, grad)
        extra = f", jit {jit_ms:.2f} ms" if name == "jax" else ""
        print(
            f"{name:9s} import +{s * 1e3:.0f} ms, +{mb:.0f} MB; gradient {ms:.2f} ms against {hand:.2f} ms "
            f"by hand ({ms / hand:.2f}x){extra}"
        )
    if importlib.util.find_spec("interdist") is not None:
        import interdist as idist

        v = idist.Variable(w)

        def tape() -> np.ndarray:
            with idist.GradientTape() as t:
                loss = np.mean((x @ v - y) ** 2)
            return t.gradient(loss, v)

        np.testing.assert_allclose(tape(), reference, rtol=1e-3, atol=1e-6)
        hand, ms = paired_ms(by_hand, tape)
        print(f"interdist GradientTape (autograd) gradient {ms:.2f} ms against {hand:.2f} ms by hand ({ms / hand:.2f}x)")


if __name__ == "__main__":
    main()
