"""Scripts as TensorFlow's tutorials write them, and workers that end with the process that made them.

Embedded workers are started as fresh ``python`` processes that never run the script's ``__main__``
again (``interdist/client/worker_process.py``), so top-level code needs no
``if __name__ == "__main__":`` guard: as a file, from stdin and with ``-c``. And workers, in sessions
of their own, still end when their parent is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

# No __main__ guard, as in TF's tutorials: top-level code that makes a strategy and trains.
SCRIPT = textwrap.dedent("""
    import numpy as np
    import interdist as idist

    strategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    with strategy.scope():
        w = idist.Variable(0.0, aggregation=idist.VariableAggregation.MEAN)

    def train_step(x):
        ctx = idist.get_replica_context()
        grad = ctx.all_reduce("mean", np.float32(w.numpy() - x))  # pulls w towards the replicas' mean target
        w.assign_sub(np.float32(0.5) * grad)
        return grad

    targets = strategy.experimental_distribute_values_from_function(
        lambda ctx: np.float32(2.0 + 2.0 * ctx.replica_id_in_sync_group))  # 2 and 4: mean 3
    for _ in range(20):
        strategy.run(train_step, args=(targets,))
    print("result", round(float(strategy.experimental_local_results(w)[0]), 3))
""")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    return env


def _check(out: subprocess.CompletedProcess[str]) -> None:
    assert out.returncode == 0, out.stdout + out.stderr
    assert "result 3.0" in out.stdout, out.stdout + out.stderr
    assert "Nanny failed to start" not in out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.mark.timeout(120)
def test_script_without_main_guard(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    t0 = time.monotonic()
    _check(subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90,
                          cwd=tmp_path, env=_env(), check=False))
    assert time.monotonic() - t0 < 30


@pytest.mark.timeout(120)
def test_script_from_stdin(tmp_path: Path) -> None:
    # _check asserts the exit code, the printed result and a stderr without tracebacks
    _check(subprocess.run([sys.executable, "-"], input=SCRIPT, capture_output=True, text=True, timeout=90,
                          cwd=tmp_path, env=_env(), check=False))


@pytest.mark.timeout(120)
def test_script_with_dash_c(tmp_path: Path) -> None:
    # _check asserts the exit code, the printed result and a stderr without tracebacks
    _check(subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=90,
                          cwd=tmp_path, env=_env(), check=False))


HOLDER = textwrap.dedent("""
    import time, psutil
    import interdist as idist
    strategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    # the pids interdist knows: a worker forked from a zygote (client/zygote.py) is a grandchild with the
    # zygote's command line; the zygote's own are "zygotes" (none when workers start fresh)
    kids = [w.pid for w in strategy._lease.cluster.workers.values()]
    zygotes = [z.process.pid for z in idist.client.zygote._zygotes.values()]
    print("workers", *kids, "zygotes", *zygotes, flush=True)
    time.sleep(120)
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_end_with_a_killed_parent(sig: signal.Signals, tmp_path: Path) -> None:
    """SIGKILL or SIGTERM (no atexit runs) of the process that made a strategy: its workers exit too."""
    parent = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, cwd=tmp_path,
                              env=_env())
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.startswith("workers") and " zygotes" in line, line
        said, _, forked_from = line.partition(" zygotes")
        workers = [int(p) for p in said.split()[1:]]
        zygotes = [int(p) for p in forked_from.split()]
        assert len(workers) == 2 and len(zygotes) <= 1, line
        assert all(psutil.Process(w).name() == "idist-worker" for w in workers)
        workers += zygotes  # the zygote, too, ends with the parent
        assert all(os.getsid(w) != os.getsid(parent.pid) for w in workers)  # sessions of their own
        parent.send_signal(sig)
        parent.wait(10)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    deadline = time.monotonic() + 15
    while any(_alive(w) for w in workers):
        assert time.monotonic() < deadline, f"worker processes {workers} outlived their parent ({sig.name})"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.timeout(120)
def test_gpu_cluster_workers_are_worker_processes_with_their_gpu() -> None:
    """``local_gpu_cluster`` starts ``WorkerProcess``es too: each sees its GPU first, and this process's
    Dask config (NVML off here: no GPU needed to start them)."""
    import dask
    from distributed import Client

    from interdist.client.gpus import local_gpu_cluster

    with dask.config.set({"distributed.diagnostics.nvml": False}), local_gpu_cluster(["5", "6"]) as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2, timeout=60)
        env = client.run(lambda: (os.environ["CUDA_VISIBLE_DEVICES"], os.environ["INTERDIST_GPU"], os.getsid(0),
                                  dask.config.get("distributed.diagnostics.nvml")))
        assert sorted((cvd, gpu) for cvd, gpu, _, _ in env.values()) == [("5,6", "5"), ("6,5", "6")]
        assert all(sid != os.getsid(0) and nvml is False for _, _, sid, nvml in env.values())


EXITS = textwrap.dedent("""
    import sys
    import interdist as idist

    how = sys.argv[1]
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        s.run(lambda: sys.exit(3) if how == "code" else sys.exit("fatal: bad config"))
    print("not reached")
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("how", "status", "printed"), [("code", 3, ""), ("message", 1, "fatal: bad config")])
def test_sys_exit_in_a_replica_ends_the_script_with_its_status(tmp_path: Path, how: str, status: int,
                                                               printed: str) -> None:
    """``sys.exit(3)`` in a replica function ends the script with status 3 (in TF the replica runs in the script's
    process); ``sys.exit("message")`` with 1 and the message on stderr. The script exited 0 without a word:
    distributed's tblib rebuilds a ``SystemExit`` without its ``code``."""
    script = tmp_path / "exits.py"
    script.write_text(EXITS)
    out = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, timeout=90,
                         cwd=tmp_path, env=_env(), check=False)
    assert out.returncode == status, out.stdout + out.stderr
    assert "not reached" not in out.stdout
    assert printed in out.stderr, out.stderr


WARNS = textwrap.dedent("""
    import sys
    import warnings
    import numpy as np
    import interdist as idist

    class MyWarning(UserWarning):
        pass

    if sys.argv[1] == "ignore":
        warnings.simplefilter("ignore")

    def step():
        warnings.warn("custom thing", MyWarning)
        return float((np.zeros(2) / np.zeros(2))[0])

    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        for _ in range(3):
            s.run(step)
        warnings.simplefilter("error", MyWarning)
        try:
            s.run(step)
        except MyWarning as e:
            print("raised", e)
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("filters", ["default", "ignore"])
def test_a_scripts_warning_filters_decide_what_replicas_warnings_show(tmp_path: Path, filters: str) -> None:
    """Replicas' warnings are issued again in the script, under its filters: by default each place shows once,
    labelled with the first replica that raised it (it showed once per replica and step, 6 times here, and a
    script's ``simplefilter("ignore")`` hid none); ``ignore`` hides them; ``error`` raises the script's own
    class."""
    script = tmp_path / "warns.py"
    script.write_text(WARNS)
    out = subprocess.run([sys.executable, str(script), filters], capture_output=True, text=True, timeout=90,
                         cwd=tmp_path, env=_env(), check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "raised custom thing" in out.stdout, out.stdout + out.stderr
    shown = [line for line in out.stderr.splitlines() if "Warning: " in line]
    if filters == "ignore":
        assert shown == [], out.stderr
    else:
        assert shown == [f"[replica 0] {script}:14: MyWarning: custom thing",
                         f"[replica 0] {script}:15: RuntimeWarning: invalid value encountered in divide"], out.stderr


@pytest.mark.timeout(120)
def test_log_files_of_processes_that_are_gone_do_not_pile_up(tmp_path: Path) -> None:
    """Each process that starts a cluster has a log file in ``$TMPDIR/interdist-<uid>``; 1,465 of them (21 MB)
    had piled up on the development machine. A script's own goes at exit when empty; the next script removes
    the empty ones of processes that are gone, and those with lines once a week old."""
    env = {**_env(), "TMPDIR": str(tmp_path)}
    folder = tmp_path / f"interdist-{os.getuid()}"
    folder.mkdir(mode=0o700)
    gone = 2**22 + 12345  # above any pid this machine gives (pid_max is at most 2**22)
    (folder / f"workers-{gone}.log").write_text("")
    (folder / f"workers-{gone + 1}.log").write_text("a failure's story\n")
    old = folder / f"workers-{gone + 2}.log"
    old.write_text("old lines\n")
    os.utime(old, (time.time() - 8 * 24 * 3600,) * 2)
    alive = folder / f"workers-{os.getpid()}.log"
    alive.write_text("")
    script = "import interdist as idist\nwith idist.MirroredStrategy(['CPU:0', 'CPU:1']) as s:\n    s.run(lambda: 1)\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90, cwd=tmp_path,
                         env=env, check=False)
    assert out.returncode == 0, out.stderr
    left = sorted(p.name for p in folder.iterdir())
    assert f"workers-{gone}.log" not in left and old.name not in left  # empty, and a week old: gone
    assert f"workers-{gone + 1}.log" in left and alive.name in left  # kept: lines, and a live process's
