"""What a replica prints, and how its failure reads, as a notebook user and a script user see them.

A replica's ``print`` (and ``warnings``, ``logging`` to stderr) travels back with its step's reply and is
printed as ``[replica r] ...`` in the cell that ran the step (``replica/user_code.py``,
``client/replies.py``). A replica's failure keeps its class, ends in one line ("ValueError on replica 1
of 2 in run #2 (bad_replica); replica 0 released"), and its traceback shows the user's frames only, with
the arrow on the failing line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import interdist as idist
from interdist.replica import user_code

ANSI = re.compile(r"\x1b\[[0-9;]*m")


# -- in this process (pytest): the reply's output and the error's text ------------------------------
def test_prints_come_back_labelled_in_replica_order(mirrored2: Any, capsys: pytest.CaptureFixture[str]) -> None:
    def chatty() -> None:
        r = idist.get_replica_context().replica_id_in_sync_group
        print("hello", r)
        print("partial line", end="")
        print("oops", file=sys.stderr)
        idist.debug.print("loss={:.2f}", 0.25 * (r + 1))

    mirrored2.run(chatty)
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "[replica 0] hello 0",
        "[replica 0] partial line",
        "[replica 0] loss=0.25",
        "[replica 1] hello 1",
        "[replica 1] partial line",
        "[replica 1] loss=0.50",
    ]
    assert err.splitlines() == ["[replica 0] oops", "[replica 1] oops"]
    mirrored2.run(lambda: None)
    assert capsys.readouterr() == ("", "")  # nothing left over for the next step


def test_warnings_of_a_replica_are_warnings_here_and_logging_is_labelled(
    mirrored2: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replica's warning is issued again in the notebook, as a warning (``pytest.warns`` and the notebook's
    filters see it: ``replica_output.issue_warnings``); what it logs is its output, labelled."""

    def warns() -> None:
        import logging
        import warnings

        warnings.warn("careful", UserWarning, stacklevel=1)
        logging.getLogger("user").warning("logged")

    with pytest.warns(UserWarning, match="^careful$") as caught:
        mirrored2.run(warns)
    assert [w.filename for w in caught] == [__file__] * 2  # one a replica, with the line of the user's code
    err = capsys.readouterr().err
    assert "[replica 0] logged" in err.splitlines() and "careful" not in err, err


def test_output_is_bounded_per_replica_and_step(mirrored2: Any, capsys: pytest.CaptureFixture[str]) -> None:
    mirrored2.run(lambda: print("x" * (user_code.OUTPUT_LIMIT + 999), end=""))
    out, err = capsys.readouterr()
    assert out.count("x") == 2 * user_code.OUTPUT_LIMIT
    assert err.splitlines().count(f"[replica 1] … 999 more characters (kept: {user_code.OUTPUT_LIMIT} a step)") == 1


def test_run_number_counts_the_users_calls(mirrored2: Any) -> None:
    runs = mirrored2._group.runs
    for _ in range(3):
        mirrored2.run(lambda: None)

    def bad_replica() -> object:
        ctx = idist.get_replica_context()
        if ctx.replica_id_in_sync_group == 1:
            raise KeyError("missing")
        return ctx.all_reduce("sum", np.float32(1.0))

    with pytest.raises(KeyError) as info:  # the replica's class
        mirrored2.run(bad_replica)
    assert (
        info.value.__notes__[-1]
        == f"KeyError on replica 1 of 2 in run #{runs + 4} ({_qualname(bad_replica)}); replica 0 released"
    )


def test_a_peer_that_skips_a_collective_is_named_at_once() -> None:
    """TF hangs here. interdist knows replica 0 returned, so replica 1's all_reduce fails within about a
    second (the notebook tells it after a second without replies), long before the 60 s timeout."""
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:

        def forgot_all_reduce() -> object:
            ctx = idist.get_replica_context()
            if ctx.replica_id_in_sync_group == 0:
                return np.float32(0.0)  # replica 0 never enters the all_reduce
            return ctx.all_reduce("sum", np.float32(1.0))

        t0 = time.monotonic()
        with pytest.raises(idist.errors.ReplicaMismatchError, match="can never complete") as info:
            s.run(forgot_all_reduce)
        assert time.monotonic() - t0 < 10.0
        last = info.value.__notes__[-1]
        assert last.startswith("ReplicaMismatchError on replica 1 of 2 in run #1"), last
        fn = _qualname(forgot_all_reduce)
        want = f"replica 0 finished; replica 0 returned from {fn} without entering all_reduce #1"
        assert last.endswith(want), last
        # and the strategy goes on
        out = s.run(lambda: idist.get_replica_context().all_reduce("sum", np.float32(1.0)))
        assert [float(v) for v in s.experimental_local_results(out)] == [2.0, 2.0]


def test_a_fused_loop_whose_replica_stops_early_fails_at_once() -> None:
    """run_steps: replica 0's function returns in its first step; replica 1 waits in step 2's all_reduce."""
    with idist.MirroredStrategy(["CPU:0", "CPU:1"]) as s:
        it = iter(s.experimental_distribute_dataset(idist.data.Dataset.range(40).batch(2)))

        def fn(batch: object) -> object:
            ctx = idist.get_replica_context()
            if ctx.replica_id_in_sync_group == 0 and int(np.asarray(batch).reshape(-1)[0]) >= 2:
                return np.float32(0.0)  # from its second step on, replica 0 skips the all_reduce
            return ctx.all_reduce("sum", np.float32(1.0))

        t0 = time.monotonic()
        with pytest.raises(idist.errors.ReplicaMismatchError, match="can never complete"):
            s.run_steps(fn, it, steps=5)
        assert time.monotonic() - t0 < 10.0


def _qualname(fn: Any) -> str:
    return str(fn.__qualname__)


# -- a script, as `python train.py` ---------------------------------------------------------------------
SCRIPT = textwrap.dedent("""
    import numpy as np
    import interdist as idist

    strategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])

    def step():
        r = idist.get_replica_context().replica_id_in_sync_group
        print("hello from", r)
        if r == 1:
            raise ValueError("bad input")
        return idist.get_replica_context().all_reduce("sum", np.float32(1.0))

    strategy.run(lambda: None)
    strategy.run(step)
""")


@pytest.mark.timeout(120)
def test_script_output_is_labelled_and_its_error_ends_in_one_line(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=110, cwd=tmp_path, env=env
    )
    assert out.returncode == 1
    assert out.stdout.splitlines() == ["[replica 0] hello from 0", "[replica 1] hello from 1"], out.stdout
    err = out.stderr.rstrip().splitlines()
    assert err[-1] == "ValueError on replica 1 of 2 in run #2 (step); replica 0 released", out.stderr
    assert err[-2] == "ValueError: bad input"
    # the user's frame, with its line; no frame of the replica's engine, no worker noise
    assert f'File "{script}", line 11, in step' in out.stderr and 'raise ValueError("bad input")' in out.stderr
    assert "user_code.py" not in out.stderr and "replica/replica.py" not in out.stderr
    assert "distributed." not in out.stderr


# -- a real kernel, as a notebook user runs cells -------------------------------------------------------
@pytest.mark.timeout(180)
def test_kernel_prints_land_in_the_cell_that_ran_the_step() -> None:
    jupyter_client = pytest.importorskip("jupyter_client")
    pytest.importorskip("ipykernel")
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(Path(__file__).resolve().parents[2]))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        setup = _cell(
            kc, 'import numpy as np, interdist as idist\nstrategy = idist.MirroredStrategy(["CPU:0", "CPU:1"])'
        )
        assert setup["error"] is None, setup
        cell = _cell(
            kc,
            "def bad_replica():\n"
            "    ctx = idist.get_replica_context()\n"
            "    print('hello', ctx.replica_id_in_sync_group)\n"
            "    if ctx.replica_id_in_sync_group == 1:\n"
            "        raise ValueError('bad input')\n"
            "    return ctx.all_reduce('sum', np.float32(1.0))\n"
            "\n"
            "strategy.run(lambda: print('first'))\n"
            "strategy.run(bad_replica)\n",
        )
        nxt = _cell(kc, "import time; time.sleep(1.0); print('next cell')")
        assert cell["stdout"].splitlines() == [
            "[replica 0] first",
            "[replica 1] first",
            "[replica 0] hello 0",
            "[replica 1] hello 1",
        ], cell
        assert nxt["stdout"] == "next cell\n" and nxt["stderr"] == "", nxt
        error = cell["error"]
        assert error is not None and error["ename"] == "ValueError"
        tb = ANSI.sub("", "\n".join(error["traceback"]))
        assert (
            tb.rstrip().splitlines()[-1] == "ValueError on replica 1 of 2 in run #2 (bad_replica); replica 0 released"
        )
        assert re.search(r"^----> 5\s+raise ValueError\('bad input'\)$", tb, re.M), tb  # the arrow on the raise
        assert "interdist/" not in tb, tb  # interdist's frames are hidden, here and on the replica
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _cell(kc: Any, code: str, timeout: float = 90) -> dict[str, Any]:
    msg_id = kc.execute(code)
    got: dict[str, Any] = {"stdout": "", "stderr": "", "error": None}
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            got[content["name"]] += content["text"]
        elif kind == "error":
            got["error"] = content
        elif kind == "status" and content["execution_state"] == "idle":
            return got
