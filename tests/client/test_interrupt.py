"""Kernel > Interrupt, as a notebook user presses it: a real kernel, a real SIGINT to its process group.

Jupyter interrupts a kernel by signalling the kernel's whole process group. Embedded workers run in
sessions of their own (``interdist/client/worker_process.py``), so the SIGINT reaches the kernel only;
the strategy aborts the step and interrupts the replica functions (``DaskGroup._interrupted``).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from typing import Any

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")
psutil = pytest.importorskip("psutil")

MESSAGE = re.compile(r"interdist: run #\d+ of .+ interrupted; replicas released; variables intact")

SETUP = """
import time, os, psutil
import numpy as np
import interdist as idist
strategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
    v = idist.Variable(1.0, aggregation=idist.VariableAggregation.SUM)

def step():
    ctx = idist.get_replica_context()
    v.assign_add(np.float32(1.0))
    return ctx.all_reduce("sum", np.float32(ctx.replica_id_in_sync_group + 1))

def show(out):
    print("out", [float(x) for x in strategy.experimental_local_results(out)],
          "v", [float(x) for x in strategy.experimental_local_results(v)])
show(strategy.run(step))
# the pids interdist knows: a worker forked from a zygote (client/zygote.py) is a grandchild, with the zygote's
# command line; the zygote itself is no worker
print("workers", sorted(w.pid for w in strategy._lease.cluster.workers.values()))
print("zygotes", sorted(z.process.pid for z in idist.client.zygote._zygotes.values()))
"""


class Cell:
    def __init__(self, kc: Any, code: str) -> None:
        self.kc = kc
        self.msg_id = kc.execute(code)
        self.started = time.monotonic()
        self.stdout = ""
        self.stderr = ""
        self.error: dict[str, Any] | None = None

    def wait(self, timeout: float) -> Cell:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") != self.msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    self.stdout += content["text"]
                else:
                    self.stderr += content["text"]
            elif kind == "error":
                self.error = content
            elif kind == "status" and content["execution_state"] == "idle":
                self.elapsed = time.monotonic() - self.started
                return self


def _values(cell: Cell) -> list[str]:
    return re.findall(r"^out .*$", cell.stdout, re.M)


def _interrupted(km: Any, kc: Any, code: str, after: float = 2.0) -> Cell:
    cell = Cell(kc, code)
    time.sleep(after)
    t0 = time.monotonic()
    km.interrupt_kernel()  # SIGINT to the kernel's process group, as Kernel > Interrupt
    cell.wait(30)
    cell.since_interrupt = time.monotonic() - t0  # type: ignore[attr-defined]
    return cell


@pytest.mark.timeout(120)
def test_kernel_interrupt_releases_the_replicas_and_keeps_the_variables() -> None:
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    workers: list[int] = []
    try:
        kc.wait_for_ready(timeout=60)
        setup = Cell(kc, SETUP).wait(90)
        assert setup.error is None, setup.error
        assert _values(setup) == ["out [3.0, 3.0] v [3.0, 3.0]"]
        workers = [int(p) for p in re.search(r"workers \[(.*)\]", setup.stdout).group(1).split(", ")]  # type: ignore[union-attr]
        assert len(workers) == 2 and all(psutil.Process(w).name() == "idist-worker" for w in workers)
        zygotes = [int(p) for p in re.findall(r"\d+", re.search(r"zygotes (.*)", setup.stdout).group(1))]  # type: ignore[union-attr]
        kernel = km.provisioner.process.pid  # type: ignore[union-attr]
        # out of the group Jupyter signals: the workers, and the zygote they were forked from
        assert all(os.getpgid(p) != os.getpgid(kernel) for p in workers + zygotes)

        # A replica function that sleeps: the interrupt ends the cell at once, with one clear line.
        cell = _interrupted(km, kc, "strategy.run(lambda: time.sleep(60))")
        assert cell.error is not None and cell.error["ename"] == "KeyboardInterrupt", cell.error
        assert MESSAGE.fullmatch(cell.error["evalue"]), cell.error["evalue"]
        assert cell.since_interrupt < 8.0  # type: ignore[attr-defined]
        assert "Traceback" not in cell.stdout + cell.stderr  # no worker crash noise
        assert all(psutil.pid_exists(p) for p in workers + zygotes)  # no replica died, nor their zygote

        # The strategy is usable at once, and the variable kept its value.
        after = Cell(kc, "show(strategy.run(step))").wait(30)
        assert after.error is None, after.error
        assert _values(after) == ["out [3.0, 3.0] v [5.0, 5.0]"]
        assert after.elapsed < 10.0

        # An update that needs an all-reduce, interrupted while replica 1 is still before it and replica 0
        # waits in it: applied on no replica.
        half = _interrupted(km, kc, (
            "def late():\n"
            "    if idist.get_replica_context().replica_id_in_sync_group == 1:\n"
            "        time.sleep(60)\n"
            "    v.assign_add(np.float32(100.0))\n"
            "strategy.run(late)"), after=1.5)
        assert half.error is not None and MESSAGE.fullmatch(half.error["evalue"]), half.error
        # An update every replica made before the interrupt: applied on every replica.
        done = _interrupted(km, kc, (
            "def early():\n"
            "    v.assign_add(np.float32(10.0))\n"
            "    time.sleep(60)\n"
            "strategy.run(early)"), after=1.5)
        assert done.error is not None and MESSAGE.fullmatch(done.error["evalue"]), done.error
        check = Cell(kc, "show(strategy.run(lambda: idist.get_replica_context().all_reduce('sum', np.float32(1.0))))").wait(30)
        assert _values(check) == ["out [2.0, 2.0] v [25.0, 25.0]"], check.stdout + str(check.error)
        assert all(psutil.pid_exists(w) for w in workers)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)  # as Kernel > Shut Down: the kernel exits, its clusters close
    deadline = time.monotonic() + 15
    while any(psutil.pid_exists(w) and psutil.Process(w).status() != psutil.STATUS_ZOMBIE for w in workers):
        assert time.monotonic() < deadline, f"worker processes {workers} outlived their kernel"
        time.sleep(0.2)


# -- the same, in this process: both ways of sending programs, and workers that cannot be interrupted --
def _interrupt_soon(after: float) -> threading.Timer:
    """SIGINT to this process after ``after`` s (what a terminal's Ctrl-C does to a script)."""
    timer = threading.Timer(after, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    return timer


@pytest.mark.parametrize("local_control", [True, False], ids=["socket", "dask"])
def test_interrupt_aborts_the_step_and_applies_no_half_update(mirrored2: Any, local_control: bool) -> None:
    import numpy as np

    import interdist as idist

    s = mirrored2
    old = idist.config.settings.local_control
    idist.config.settings.local_control = local_control
    try:
        with s.scope():
            v = idist.Variable(1.0, aggregation=idist.VariableAggregation.SUM)

        def late() -> None:  # replica 0 waits in the all-reduce of the update; replica 1 sleeps before it
            if idist.get_replica_context().replica_id_in_sync_group == 1:
                time.sleep(30)
            v.assign_add(np.float32(100.0))

        _interrupt_soon(1.0)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt) as info:
            s.run(late)
        assert time.monotonic() - t0 < 5.0
        assert MESSAGE.fullmatch(str(info.value)), str(info.value)
        assert info.value.__suppress_context__  # one line, not the wait it interrupted
        assert [float(x) for x in s.experimental_local_results(v)] == [1.0, 1.0]  # applied on no replica
        out = s.run(lambda: idist.get_replica_context().all_reduce("sum", np.float32(1.0)))
        assert [float(x) for x in s.experimental_local_results(out)] == [2.0, 2.0]
    finally:
        idist.config.settings.local_control = old


def test_interrupt_on_workers_that_cannot_be_interrupted_names_them() -> None:
    """Workers of a ``cluster=`` deployment run replica functions on threads: released, then waited for."""
    import numpy as np
    from distributed import LocalCluster

    import interdist as idist

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            idist.MirroredStrategy(["CPU:0", "CPU:1"], cluster=cluster) as s:
        _interrupt_soon(1.0)
        with pytest.raises(KeyboardInterrupt, match=r"replica\(s\) \[0, 1\] still running their replica function"):
            s.run(lambda: time.sleep(4))
        with pytest.raises(RuntimeError, match="is still running step"):
            s.run(lambda: 1)
        time.sleep(3.5)
        out = s.run(lambda: idist.get_replica_context().all_reduce("sum", np.float32(1.0)))
        assert [float(x) for x in s.experimental_local_results(out)] == [2.0, 2.0]
