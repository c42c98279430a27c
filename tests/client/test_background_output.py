"""Lines logged from background threads go to the cluster's log file, never under an old cell; the
recovery warning points at the user's line.

In a Jupyter kernel, what a thread writes to stderr lands under the cell its thread started in:
Dask's scheduler and client and interdist's worker supervisor (all on the embedded cluster's event
loop, in the notebook's process) printed "Retire worker addresses", "Lost all workers" and "worker 1
(pid …) exited with code -9; starting it again" under cell 1 while the class was at cell 24
(``interdist/client/logs.py``). The kernel test below records every output message of the kernel by
the cell it is addressed to, as JupyterLab shows them: nbclient (``tests/notebooks``) keeps only the
outputs of the cell that is running and drops late ones addressed to an old cell, the very lines
this is about.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interdist.client import logs, replies

REPO = Path(__file__).resolve().parents[2]
RESTART = re.compile(r"interdist: worker 1 \(pid \d+\) exited with code -9; starting it again")
RECOVERY = "UserWarning: replica(s) [1] of this MirroredStrategy were restarted on new workers"
# What Dask logs from the embedded scheduler's loop (in the notebook's process) around a kill and a close.
DASK_LINES = ("Retire worker addresses", "Lost all workers", "Remove worker addr")


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


# -- a notebook, in a real kernel ------------------------------------------------------------------------
def _wait_for(log: Path, *needles: str) -> str:
    """A cell that waits (in the kernel) until the log file holds every needle, then delivers any output
    still buffered for any cell: ipykernel's flush sends the buffers of every cell and waits for them."""
    return textwrap.dedent(f"""
        import pathlib, sys, time
        deadline = time.monotonic() + 60
        while not all(n in pathlib.Path({str(log)!r}).read_text() for n in {list(needles)!r}):
            assert time.monotonic() < deadline, "the log file never got " + repr({list(needles)!r})
            time.sleep(0.1)
        sys.stdout.flush(); sys.stderr.flush()
    """)


KILL = """\
idist.debug.inject(strategy, replica=1, fault="kill", at="step")
try:
    strategy.run(lambda: None)
except idist.WorkerLostError as e:
    print("lost:", e)
"""


@pytest.mark.timeout(300)
def test_a_notebooks_background_lines_go_to_the_log_file_and_the_warning_to_its_cell(tmp_path: Path) -> None:
    jupyter_client = pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    log = tmp_path / "cluster.log"
    cells = [
        # Two embedded clusters, the first closed while the second lives: Dask's silence_logs, undone
        # when the first one closed, had unsilenced the second one's INFO lines (lesson 08's report).
        # (the pool keeps both: the first is shut down by the next cell, while the second lives)
        'import numpy as np, interdist as idist\nfrom interdist.client import cluster\ncluster.IDLE_WORKERS_MAX = 8\n'
        'first = idist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])\n'
        'first.close()\nstrategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])\nwith strategy.scope():\n'
        "    w = idist.Variable(1.0)",
        "assert cluster.shutdown_idle(0) == 1  # the pool's idle timeout, now",
        KILL,
        _wait_for(log, "starting it again", "Lost all workers"),
        "steps = 0\nstrategy.run(lambda: None)\nsteps += 1",  # recovers: the warning, on line 2
        "for _ in range(3):\n    strategy.run(lambda: None)",
        _wait_for(log, "Register worker", "Remove worker addr"),
    ]
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(REPO), env=_env(DASK_INTERDIST__CLUSTER__WORKER_LOG=str(log)))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        outputs, errors = _run_cells(kc, [*cells, "strategy.close()"])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)

    assert not errors, errors
    text = log.read_text()
    # In the log file: the restart, and Dask's lines from the scheduler's loop, labelled as this process's.
    assert RESTART.search(text), text
    assert all(line in text for line in DASK_LINES), text
    assert re.search(r" - main pid \d+ - distributed\.scheduler - INFO - Lost all workers", text), text
    # Under no cell, old or current: neither the restart line nor any of Dask's.
    everywhere = "".join(t for per_cell in outputs.values() for t in per_cell)
    assert not RESTART.search(everywhere) and "starting it again" not in everywhere, outputs
    assert " - INFO - " not in everywhere and "distributed." not in everywhere, outputs
    assert not any(line in everywhere for line in DASK_LINES), outputs
    assert set(outputs) <= set(range(len(cells) + 1)), outputs  # nothing addressed to no cell
    # The failed call's error names the log file; the recovery warning is in the cell that recovered,
    # on that cell's line 2, with the line shown.
    assert f"is in {log}" in "".join(outputs[2]), outputs[2]
    assert [i for i, per_cell in outputs.items() if RECOVERY in "".join(per_cell)] == [4], outputs
    shown = "".join(outputs[4])
    where = re.search(r"^(.+):(\d+): " + re.escape(RECOVERY), shown, re.M)
    assert where is not None, shown
    cell_file, line = where.groups()
    assert line == "2" and re.search(r"ipykernel_\d+/\d+\.py$|<ipython-input-", cell_file), shown
    assert "interdist" not in cell_file and shown.splitlines()[1].strip() == "strategy.run(lambda: None)", shown
    assert " object at 0x" not in shown and "MirroredStrategy(" not in shown, shown  # no repr


def _run_cells(kc: Any, cells: list[str], timeout: float = 120) -> tuple[dict[int, list[str]], list[Any]]:
    """Run ``cells`` in order; every stream text the kernel sent meanwhile, by the cell it is addressed
    to (-1: to none of them), and the errors."""
    cell_of: dict[str, int] = {}
    outputs: dict[int, list[str]] = {}
    errors: list[Any] = []
    for index, code in enumerate(cells):
        msg_id = kc.execute(code)
        cell_of[msg_id] = index
        deadline = time.monotonic() + timeout
        while True:
            msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            parent = msg["parent_header"].get("msg_id")
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                outputs.setdefault(cell_of.get(parent, -1), []).append(content["text"])
            elif kind == "error":
                errors.append((cell_of.get(parent, -1), content["ename"], content["evalue"]))
            elif kind == "status" and parent == msg_id and content["execution_state"] == "idle":
                break
    return outputs, errors


# -- a script -------------------------------------------------------------------------------------------
SCRIPT = textwrap.dedent("""\
    import interdist as idist

    strategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])
    with strategy.scope():
        w = idist.Variable(1.0)
    idist.debug.inject(strategy, replica=1, fault="kill", at="step")
    try:
        strategy.run(lambda: None)
    except idist.WorkerLostError as e:
        print("lost:", e)
    strategy.run(lambda: None)  # line 11: recovers
    print("done")
""")


@pytest.mark.timeout(180)
def test_a_script_sees_the_restart_as_it_happens_and_the_warning_at_its_line(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    log = tmp_path / "cluster.log"
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=tmp_path,
        env=_env(DASK_INTERDIST__CLUSTER__WORKER_LOG=str(log)),
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == "done" and f"is in {log}" in out.stdout, out.stdout
    err = out.stderr.splitlines()
    # A terminal has no old cells: interdist's WARNING as it happens, then the warning at the script's line.
    assert len(err) == 3, out.stderr
    assert RESTART.fullmatch(err[0]), out.stderr
    assert err[1].startswith(f"{script}:11: {RECOVERY}"), out.stderr
    assert err[2].strip() == "strategy.run(lambda: None)  # line 11: recovers", out.stderr
    text = log.read_text()
    assert RESTART.search(text) and "Remove worker addr" in text, text  # and the file has the story


# -- the handlers, in fresh processes (they change process-wide logging) --------------------------------
def _probe(code: str, **env: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; the JSON it prints last."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(**env),
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    result["stderr"] = out.stderr
    return result


SCHEDULER_LINE = """
    import json, logging, sys
    from interdist.client import logs
    path = logs.install()
    logging.getLogger("distributed.scheduler").info("scheduler says hi")
    logging.getLogger("distributed.scheduler").error("scheduler failed")
    logging.getLogger("interdist").warning("interdist warns")
    names = [type(h).__name__ for h in logging.getLogger("distributed").handlers]
    print(json.dumps({"path": path, "handlers": names, "log": open(path).read() if path else ""}))
"""


def test_dasks_default_handler_is_replaced_by_the_file_and_a_terminals_console(tmp_path: Path) -> None:
    log = tmp_path / "cluster.log"
    got = _probe(SCHEDULER_LINE, DASK_INTERDIST__CLUSTER__WORKER_LOG=str(log))
    assert got["path"] == str(log)
    assert "StreamHandler" not in got["handlers"] and {"_FileHandler", "_Console"} <= set(got["handlers"])
    assert "distributed.scheduler - INFO - scheduler says hi" in got["log"]
    assert "interdist - WARNING - interdist warns" in got["log"]
    # A terminal: Dask's ERROR in Dask's format (as silence_logs=ERROR showed it), interdist's WARNING.
    err = got["stderr"].splitlines()
    assert len(err) == 2 and err[0].endswith(" - distributed.scheduler - ERROR - scheduler failed"), err
    assert err[1] == "interdist warns", err


def test_the_users_own_dask_logging_config_is_kept(tmp_path: Path) -> None:
    """A new-style ``distributed.logging`` config (logging's dictConfig) is the user's: its handler stays,
    and the file handler is added beside it."""
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"mine": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout"}},
        "loggers": {"distributed": {"level": "INFO", "handlers": ["mine"], "propagate": False}},
    }
    log = tmp_path / "cluster.log"
    got = _probe(SCHEDULER_LINE, DASK_INTERDIST__CLUSTER__WORKER_LOG=str(log), DASK_DISTRIBUTED__LOGGING=repr(config))
    assert got["handlers"] == ["StreamHandler", "_FileHandler"]
    assert "scheduler says hi" in got["log"]
    assert "scheduler failed" not in got["stderr"]  # theirs went to stdout; nothing of ours to a terminal


def test_a_configured_root_logger_gets_interdists_lines_once(tmp_path: Path) -> None:
    """``logging.basicConfig()`` before distributed's import: Dask adds no handler of its own, lines
    propagate to the user's root handler, and interdist's console (a last resort) stays silent."""
    code = "import logging, sys\nlogging.basicConfig(stream=sys.stdout, format='ROOT %(message)s')\n" + textwrap.dedent(
        SCHEDULER_LINE
    )
    got = _probe(code, DASK_INTERDIST__CLUSTER__WORKER_LOG=str(tmp_path / "cluster.log"))
    assert got["handlers"] == ["_FileHandler"]
    assert "interdist warns" not in got["stderr"] and "scheduler" not in got["stderr"], got["stderr"]
    assert "interdist - WARNING - interdist warns" in got["log"]


def test_worker_log_dash_leaves_logging_as_it_was() -> None:
    got = _probe(SCHEDULER_LINE, DASK_INTERDIST__CLUSTER__WORKER_LOG="-")
    assert got["path"] is None and got["handlers"] == ["StreamHandler"]


class _KernelStream:
    """Stands for ipykernel's ``OutStream`` (the class's module is what ``logs`` looks at)."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> int:
        self.text += s
        return len(s)

    def flush(self) -> None:
        pass


_KernelStream.__module__ = "ipykernel.iostream"


def test_in_a_kernel_only_the_cells_thread_reaches_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _KernelStream()
    monkeypatch.setattr(sys, "stderr", stream)
    console = logs._Console(logging.WARNING, None, last_resort=False)

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("interdist", logging.WARNING, __file__, 1, msg, None, None)

    background = threading.Thread(target=lambda: console.handle(record("from the loop")))
    background.start()
    background.join()
    console.handle(record("from the cell"))
    assert stream.text == "from the cell\n"


# -- user_stacklevel: the user's line, past interdist's frames and a library's -------------------------
def _in(directory: str, name: str, source: str) -> dict[str, Any]:
    """The functions of ``source``, as if defined in file ``name`` of ``directory``."""
    namespace: dict[str, Any] = {
        "contextlib": contextlib,
        "warnings": warnings,
        "user_stacklevel": replies.user_stacklevel,
    }
    exec(compile(textwrap.dedent(source), os.path.join(directory, name), "exec"), namespace)
    return namespace


INTERDIST = _in(
    replies._PACKAGE_DIR,
    "_fake_for_tests.py",
    """
    def warn():
        warnings.warn("recovered", UserWarning, stacklevel=user_stacklevel())

    def deeper():
        warn()

    @contextlib.contextmanager
    def warns_on_enter():
        deeper()
        yield
""",
)
LIBRARY = _in(
    sysconfig.get_paths()["purelib"],
    "_fake_library_for_tests.py",
    """
    def call(fn, *args):
        return fn(*args)
""",
)


def _warned(fn: Callable[[], object]) -> warnings.WarningMessage:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    assert len(caught) == 1
    return caught[0]


def test_user_stacklevel_points_at_the_users_line() -> None:
    w, line = _warned(lambda: INTERDIST["deeper"]()), sys._getframe().f_lineno
    assert (w.filename, w.lineno) == (__file__, line)
    w, line = _warned(lambda: LIBRARY["call"](INTERDIST["deeper"])), sys._getframe().f_lineno
    assert (w.filename, w.lineno) == (__file__, line)  # past the library's frame (IPython's display, numpy's)


def test_user_stacklevel_passes_the_standard_librarys_frames() -> None:
    def enter() -> None:
        with INTERDIST["warns_on_enter"]():  # contextlib's __enter__ is between this line and interdist
            pass

    w = _warned(enter)
    assert w.filename == __file__
    assert 'with INTERDIST["warns_on_enter"]():' in Path(__file__).read_text().splitlines()[w.lineno - 1]


def test_user_stacklevel_without_a_users_frame_names_the_first_outside_interdist() -> None:
    """A thread that runs interdist's code straight from threading's frames has no line of the user's."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thread = threading.Thread(target=INTERDIST["warn"])
        thread.start()
        thread.join()
    assert [Path(w.filename).name for w in caught] == ["threading.py"]
