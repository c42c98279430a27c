"""Checkpoints that detect every edit of their index (issue 25, item 4), and a ``CheckpointManager``
directory shared by two writers.

Format 2: every entry has its file's sha256 and a digest over its name and fields; the index has a
checksum over the rest. Any edit (a field deleted or changed, two entries' fields or whole entries
swapped) is refused with ``ValueError`` before anything is assigned. Format-1 checkpoints (an older
interdist's) still restore; with an entry lacking sha256 only when ``allow_unverified=True``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import interdist as idist
from interdist import checkpoint
from interdist.checkpoint import latest_checkpoint

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
DTYPES = ["float32", "float64", "int32", "int64", "uint8", "bool", "complex64"]


def _index(path: str | Path) -> dict[str, Any]:
    index: dict[str, Any] = json.loads((Path(path) / "index.json").read_text())
    return index


def _write_index(path: str | Path, index: dict[str, Any]) -> None:
    (Path(path) / "index.json").write_text(json.dumps(index, indent=1))


def _seal(index: dict[str, Any]) -> None:
    """Recompute every checksum, as a deliberate forger (or the format-1 writer, without them) would."""
    for name, entry in index["variables"].items():
        entry["digest"] = checkpoint._entry_digest(name, entry)
    index["index_sha256"] = checkpoint._index_digest(index)


def _three(tmp_path: Path) -> tuple[dict[str, idist.Variable], str]:
    """Three variables, two of the same shape and dtype (the ones a swap used to mix up silently), saved;
    then scribbled over, so that a restore that assigned anything shows."""
    variables = {
        "a": idist.Variable(np.arange(3, dtype=np.float32)),
        "b": idist.Variable(np.arange(3, 6, dtype=np.float32)),
        "c": idist.Variable(np.int64(7)),
    }
    path = idist.Checkpoint(**variables).save(tmp_path / "ckpt")
    for v in variables.values():
        v.assign(np.zeros_like(np.asarray(v)))
    return variables, path


def _untouched(variables: dict[str, idist.Variable]) -> bool:
    return all(not np.asarray(v).any() for v in variables.values())


def test_a_checkpoint_is_written_with_every_checksum(tmp_path: Path) -> None:
    variables, path = _three(tmp_path)
    index = _index(path)
    assert index["format"] == "interdist-checkpoint/2"
    assert index["index_sha256"] == checkpoint._index_digest(index)
    for name, entry in index["variables"].items():
        assert entry["sha256"] == checkpoint._sha256(Path(path) / entry["file"])
        assert entry["digest"] == checkpoint._entry_digest(name, entry)
    idist.Checkpoint(**variables).restore(path)
    assert np.asarray(variables["b"]).tolist() == [3.0, 4.0, 5.0] and int(np.asarray(variables["c"])) == 7


@pytest.mark.parametrize("reseal", [False, True])
def test_an_entry_without_sha256_is_refused_by_name(tmp_path: Path, reseal: bool) -> None:
    """Deleting ``sha256`` used to turn the check off; now refused, even with every digest recomputed."""
    variables, path = _three(tmp_path)
    index = _index(path)
    del index["variables"]["b"]["sha256"]
    if reseal:
        _seal(index)
    _write_index(path, index)
    with pytest.raises(ValueError, match=r"entry 'b' .*no sha256"):
        idist.Checkpoint(**variables).restore(path)
    with pytest.raises(ValueError, match=r"entry 'b' .*no sha256"):  # never relaxed for format 2
        idist.Checkpoint(**variables).restore(path, allow_unverified=True)
    assert _untouched(variables)


@pytest.mark.parametrize("swap", ["file", "entries"])
def test_swapped_entries_are_refused(tmp_path: Path, swap: str) -> None:
    """Two same-shaped entries' files (or whole entries) swapped used to swap the values silently."""
    variables, path = _three(tmp_path)
    index = _index(path)
    a, b = index["variables"]["a"], index["variables"]["b"]
    if swap == "file":
        a["file"], b["file"] = b["file"], a["file"]
        a["sha256"], b["sha256"] = b["sha256"], a["sha256"]  # consistent with the bytes: still refused
    else:
        index["variables"]["a"], index["variables"]["b"] = b, a
    _write_index(path, index)
    with pytest.raises(ValueError, match=r"entry '[ab]' .*does not match its digest"):
        idist.Checkpoint(**variables).restore(path)
    assert _untouched(variables)


def test_an_edit_outside_the_entries_is_refused(tmp_path: Path) -> None:
    variables, path = _three(tmp_path)
    index = _index(path)
    index["save_counter"] = 5
    _write_index(path, index)
    ck = idist.Checkpoint(**variables)
    with pytest.raises(ValueError, match="does not match its index_sha256"):
        ck.restore(path)
    assert _untouched(variables) and ck.save_counter == 0
    index = _index(path)
    del index["variables"]["c"]  # an entry removed whole (the others' digests still match)
    _write_index(path, index)
    with pytest.raises(ValueError, match="does not match its index_sha256"):
        idist.Checkpoint(a=variables["a"]).restore(path)
    assert _untouched(variables)


def _as_format_1(path: str, drop_sha256: tuple[str, ...] = ()) -> None:
    """Rewrite the index as an older interdist wrote it: format 1, no digests (sha256 optional)."""
    index = _index(path)
    index["format"] = "interdist-checkpoint/1"
    del index["index_sha256"]
    for name, entry in index["variables"].items():
        del entry["digest"]
        if name in drop_sha256:
            del entry["sha256"]
    _write_index(path, index)


def test_a_format_1_checkpoint_still_restores_and_its_bytes_are_checked(tmp_path: Path) -> None:
    variables, path = _three(tmp_path)
    _as_format_1(path)
    idist.Checkpoint(**variables).restore(path)
    assert np.asarray(variables["a"]).tolist() == [0.0, 1.0, 2.0]
    data = bytearray((Path(path) / "v000001.npy").read_bytes())
    data[-1] ^= 0xFF
    (Path(path) / "v000001.npy").write_bytes(bytes(data))
    variables["a"].assign(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"'b' \(v000001.npy\) cannot be restored: .*checksum"):
        idist.Checkpoint(**variables).restore(path)
    assert not np.asarray(variables["a"]).any()


def test_a_format_1_checkpoint_without_sha256_needs_allow_unverified(tmp_path: Path) -> None:
    variables, path = _three(tmp_path)
    _as_format_1(path, drop_sha256=("a", "c"))
    with pytest.raises(ValueError, match=r"no sha256 for \['a', 'c'\].*allow_unverified=True"):
        idist.Checkpoint(**variables).restore(path)
    assert _untouched(variables)
    idist.Checkpoint(**variables).restore(path, allow_unverified=True)
    assert np.asarray(variables["b"]).tolist() == [3.0, 4.0, 5.0] and int(np.asarray(variables["c"])) == 7


def test_a_format_1_label_on_a_format_2_index_is_refused(tmp_path: Path) -> None:
    """Its checksums are checked whenever present: relabelling the format is an edit like any other."""
    variables, path = _three(tmp_path)
    index = _index(path)
    index["format"] = "interdist-checkpoint/1"
    _write_index(path, index)
    with pytest.raises(ValueError, match="does not match its index_sha256"):
        idist.Checkpoint(**variables).restore(path)
    assert _untouched(variables)


# -- property tests: every edit of the index is refused, nothing assigned ---------------------------------


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every field of the index, as a path of keys (the nested tables' fields too)."""
    out: list[tuple[Any, ...]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((*prefix, k))
            out += _paths(v, (*prefix, k))
    return out


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        obj = obj[k]
    return obj


SAME = st.tuples(st.sampled_from(DTYPES), hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))


@st.composite
def _checkpoints(draw: st.DrawFn) -> dict[str, np.ndarray]:
    """2-4 arrays of one shape and dtype (swaps between them are invisible to dtype/shape checks), and
    maybe one other."""
    dtype, shape = draw(SAME)
    n = draw(st.integers(2, 4))
    names = draw(st.lists(st.text("abcxyz/_.", min_size=1, max_size=4), min_size=n, max_size=n, unique=True))
    items = {name: draw(hnp.arrays(np.dtype(dtype), shape)) for name in names}
    if draw(st.booleans()):
        items["other"] = draw(hnp.arrays(np.dtype("int16"), (2,)))
    return items


def _saved(tmp: Path, items: dict[str, np.ndarray]) -> tuple[dict[str, idist.Variable], str]:
    variables = {name: idist.Variable(value) for name, value in items.items()}
    path = idist.Checkpoint(**variables).save(tmp / "ckpt")
    for v in variables.values():  # a value no checkpoint holds: any assignment shows
        v.assign(np.ones_like(np.asarray(v)))
    return variables, path


def _refused(variables: dict[str, idist.Variable], path: str, index: dict[str, Any]) -> None:
    _write_index(path, index)
    ck = idist.Checkpoint(**variables)
    with pytest.raises(ValueError):
        ck.restore(path)
    for name, v in variables.items():
        assert (np.asarray(v) == np.ones_like(np.asarray(v))).all(), name
    assert ck.save_counter == 0


@SETTINGS
@given(items=_checkpoints(), data=st.data())
def test_deleting_any_field_is_refused(
    tmp_path_factory: pytest.TempPathFactory, items: dict[str, np.ndarray], data: st.DataObject
) -> None:
    # _refused asserts: restore raises ValueError, no variable changed, save_counter still 0
    variables, path = _saved(tmp_path_factory.mktemp("ck"), items)
    index = _index(path)
    field = data.draw(st.sampled_from(_paths(index)), label="field")
    del _get(index, field[:-1])[field[-1]]
    _refused(variables, path, index)


@SETTINGS
@given(items=_checkpoints(), data=st.data())
def test_swapping_two_entries_fields_or_the_entries_is_refused(
    tmp_path_factory: pytest.TempPathFactory, items: dict[str, np.ndarray], data: st.DataObject
) -> None:
    # _refused asserts: restore raises ValueError, no variable changed, save_counter still 0
    variables, path = _saved(tmp_path_factory.mktemp("ck"), items)
    index = _index(path)
    table = index["variables"]
    a, b = data.draw(st.lists(st.sampled_from(sorted(table)), min_size=2, max_size=2, unique=True), label="entries")
    field = data.draw(st.sampled_from([None, *sorted(table[a])]), label="field (None: the whole entries)")
    if field is None:
        table[a], table[b] = table[b], table[a]
    else:
        assume(table[a][field] != table[b][field])  # swapping equal values edits nothing
        table[a][field], table[b][field] = table[b][field], table[a][field]
    _refused(variables, path, index)


@SETTINGS
@given(items=_checkpoints(), data=st.data())
def test_changing_a_shape_or_dtype_is_refused(
    tmp_path_factory: pytest.TempPathFactory, items: dict[str, np.ndarray], data: st.DataObject
) -> None:
    # _refused asserts: restore raises ValueError, no variable changed, save_counter still 0
    variables, path = _saved(tmp_path_factory.mktemp("ck"), items)
    index = _index(path)
    entry = index["variables"][data.draw(st.sampled_from(sorted(index["variables"])), label="entry")]
    if data.draw(st.booleans(), label="shape (else dtype)"):
        shape = data.draw(st.lists(st.integers(0, 4), max_size=3), label="shape")
        assume(shape != entry["shape"])
        entry["shape"] = shape
    else:
        dtype = np.dtype(data.draw(st.sampled_from([*DTYPES, "int16", "float16"]), label="dtype")).str
        assume(dtype != entry["dtype"])
        entry["dtype"] = dtype
    _refused(variables, path, index)


# -- two writers of one CheckpointManager directory ----------------------------------------------------------

N = 12
KEEP = 3
_WRITER = """
import sys
import numpy as np
import interdist as idist

directory, writer, n, keep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
w = idist.Variable(np.float32(writer))
manager = idist.CheckpointManager(idist.Checkpoint(w=w), directory, max_to_keep=keep)
print("ready", flush=True)
sys.stdin.readline()  # the go: both writers start together
for _ in range(n):
    print(manager.save(), flush=True)
"""


def _check_shared_directory(directory: Path, saved: list[str]) -> None:
    numbers = sorted(int(Path(p).name.rsplit("-", 1)[1]) for p in saved)
    assert numbers == list(range(1, len(saved) + 1))  # all distinct, none skipped
    on_disk = sorted(p.name for p in directory.iterdir() if p.name.startswith("ckpt-"))
    expected = [f"ckpt-{n}" for n in range(len(saved) - KEEP + 1, len(saved) + 1)]
    assert on_disk == sorted(expected)  # what was dropped was deleted, and nothing else
    state = json.loads((directory / "checkpoint.json").read_text())
    assert [c["name"] for c in state["checkpoints"]] == expected  # every listed one exists
    assert latest_checkpoint(directory) == str(directory / expected[-1])
    fresh = idist.CheckpointManager(idist.Checkpoint(w=idist.Variable(np.float32(0))), directory, max_to_keep=KEEP)
    assert fresh.checkpoints == [str(directory / n) for n in expected]
    assert all((Path(p) / "index.json").is_file() for p in fresh.checkpoints)
    assert not [p.name for p in directory.iterdir() if p.name.startswith(".")]  # no lock or temporary left


def test_two_processes_share_a_manager_directory(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), str(i), str(N), str(KEEP)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (1, 2)
    ]
    try:
        for proc in procs:  # both imported and holding a manager before either saves
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.stderr
        outs = []
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err[-2000:]
            outs.append(out.split())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert all(len(o) == N for o in outs)
    _check_shared_directory(tmp_path, outs[0] + outs[1])
    # each writer's values are where its numbers say
    for writer, out in enumerate(outs, start=1):
        for p in out:
            if Path(p).is_dir():
                w = idist.Variable(np.float32(0))
                idist.Checkpoint(w=w).restore(p)
                assert float(w) == writer


def test_two_managers_in_one_process_share_a_directory(tmp_path: Path) -> None:
    barrier = threading.Barrier(2)
    saved: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            manager = idist.CheckpointManager(idist.Checkpoint(w=idist.Variable(np.float32(i))), tmp_path, KEEP)
            barrier.wait(timeout=60)
            saved[i] = [manager.save() for _ in range(N)]
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    _check_shared_directory(tmp_path, saved[0] + saved[1])


def test_a_directory_that_cannot_be_locked_uses_a_lock_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Some NFS mounts refuse flock on a directory: a ``.checkpoint.lock`` file in it is locked instead."""
    import fcntl
    import stat

    real = fcntl.flock
    locked: list[str] = []

    def flock(fd: int, op: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(9, "Bad file descriptor")
        locked.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)  # checkpoint imports fcntl when it locks
    manager = idist.CheckpointManager(idist.Checkpoint(w=idist.Variable(np.float32(1))), tmp_path, max_to_keep=1)
    assert Path(manager.save()).name == "ckpt-1" and Path(manager.save()).name == "ckpt-2"
    assert locked and all(Path(p) == tmp_path / checkpoint.LOCK_FILE for p in locked)
    assert [Path(p).name for p in manager.checkpoints] == ["ckpt-2"]
