"""The all_reduce cost model (interdist/collectives/cost_model.py) and AUTO's use of it (algorithms.py)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from interdist.collectives import algorithms
from interdist.collectives import cost_model as cm
from interdist.reduce_op import ReduceOp

from ._harness import local_group, run_threads


def _params(alpha: float = 0.0, overhead: float = 0.0, beta: float = 0.0, gamma: float = 0.0,
            inter: cm.Link | None = None, cores: float = math.inf, shared: bool = True) -> cm.Params:
    return cm.Params("t", cm.Link(alpha, overhead, beta), inter or cm.Link(0.0, 0.0, 0.0), gamma, cores, shared)


# -- formulas -------------------------------------------------------------------------------
@pytest.mark.parametrize(("algorithm", "rounds"), [(cm.AG, 1), (cm.RS, 2), (cm.RB, 2), (cm.RING, 6), (cm.TREE, 4)])
def test_latency_rounds_on_one_host(algorithm: str, rounds: int) -> None:
    assert cm.predict(algorithm, 1000, 4, params=_params(alpha=1.0)) == rounds


def test_bytes_moved_through_shared_memory_and_point_to_point() -> None:
    shm, p2p = _params(beta=1.0), _params(beta=1.0, shared=False)
    # all-gather-reduce: one write of 100 bytes through shared memory; 3 sends + 3 receives point to point
    assert cm.predict(cm.AG, 100, 4, params=shm) == 100
    assert cm.predict(cm.AG, 100, 4, params=p2p) == 600
    # reduce-scatter + all-gather: 3 chunks of 25 written, then 25 written and 75 copied into place
    assert cm.predict(cm.RS, 100, 4, params=shm) == 175
    # reduce-broadcast: peers write 100, the root writes 100, the peers copy 100 out
    assert cm.predict(cm.RB, 100, 4, params=shm) == 300
    assert cm.predict(cm.RING, 100, 4, params=shm) == 300  # 4 (n-1)/n b sent + received
    # one replica: a copy of its own batch
    assert cm.predict(cm.AG, 100, 1, params=shm) == 100


def test_reduction_and_contention() -> None:
    # 4 replicas on 2 cores: all-gather-reduce adds 3 x 100 bytes on each, all 4 at once -> twice as slow
    assert cm.predict(cm.AG, 100, 4, params=_params(gamma=1.0, cores=2)) == 600
    assert cm.predict(cm.AG, 100, 4, params=_params(gamma=1.0)) == 300
    # reduce-broadcast: the root adds alone (no contention)
    assert cm.predict(cm.RB, 100, 4, params=_params(gamma=1.0, cores=2)) == 300


def test_hierarchical_uses_both_links() -> None:
    p = _params(alpha=1.0, inter=cm.Link(10.0, 0.0, 0.0))
    # 8 replicas on 2 hosts: ring inside each host (2 x 3 rounds), ring across the 2 hosts (2 x 1 rounds)
    assert cm.predict(cm.HIERARCHICAL, 1000, 8, hosts=2, params=p) == 6 * 1 + 2 * 10
    assert cm.predict(cm.RING, 1000, 8, hosts=2, params=p) == 14 * 10  # every step waits for the slow link
    # the shards of a host's 4 replicas share its link: 4 x (4 (h-1)/h x b/4) bytes
    q = _params(inter=cm.Link(0.0, 0.0, 1.0))
    assert cm.predict(cm.HIERARCHICAL, 1000, 8, hosts=2, params=q) == 2000


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="unknown all_reduce algorithm 'butterfly'"):
        cm.predict("butterfly", 10, 2)
    with pytest.raises(ValueError, match="need 1 <= hosts <= world_size"):
        cm.predict(cm.AG, 10, 2, hosts=3)
    with pytest.raises(ValueError, match="no cost model parameters for transport 'carrier-pigeon'"):
        cm.predict(cm.AG, 10, 2, transport="carrier-pigeon")


def test_reduce_broadcast_split_between_owners() -> None:
    """``owners``: each of k ranks adds a k-th of the sum at once (split.py), but every rank sends a message to
    each owner and reads k chunks."""
    n, b = 4, 100.0
    for p in (_params(alpha=1.0, overhead=1.0, beta=1.0, gamma=1.0), _params(gamma=1.0, cores=2)):
        assert cm.predict(cm.RB, b, n, params=p, owners=1) == cm.predict(cm.RB, b, n, params=p)
    # the additions: the root adds (n-1) b alone; k owners (k <= cores: no contention) add (n-1) b / k each
    assert cm.predict(cm.RB, b, n, params=_params(gamma=1.0, cores=2), owners=2) == 150
    # messages: a rank sends k, an owner takes n-1 and sends n-1 (written once), a rank takes k chunks; the four
    # ranks of the first and last phases share 2 cores
    assert cm.predict(cm.RB, b, n, params=_params(overhead=1.0, cores=2), owners=2) == 2 * 2 + 6 + 2 * 2
    # bytes through shared memory: every rank writes b in chunks, an owner writes b / k once, every rank reads b
    assert cm.predict(cm.RB, b, n, params=_params(beta=1.0), owners=2) == 100 + 50 + 100
    # point to point: an owner takes in and sends out (n - 1) chunks of b / k
    assert cm.predict(cm.RB, b, n, params=_params(beta=1.0, shared=False), owners=2) == 100 + 2 * 3 * 50 + 100
    # with this machine's preset: the split pays for large sums only (more messages, fewer adds on one core)
    assert cm.predict(cm.RB, 16 << 20, 4, owners=2) < cm.predict(cm.RB, 16 << 20, 4)
    assert cm.predict(cm.RB, 64 << 10, 4, owners=2) > cm.predict(cm.RB, 64 << 10, 4)
    for bad, match in (({"owners": 0}, "need 1 <= owners <= world_size"), ({"owners": 5}, "owners=5, world_size=4")):
        with pytest.raises(ValueError, match=match):
            cm.predict(cm.RB, b, n, **bad)
    with pytest.raises(ValueError, match="only reduce-broadcast on one host splits its sum between owners, not 'all-"):
        cm.predict(cm.AG, b, n, owners=2)
    with pytest.raises(ValueError, match="on 2 host"):
        cm.predict(cm.RB, b, n, hosts=2, owners=2)


def test_split_pays_where_the_model_predicts_the_split_faster() -> None:
    for elements in (1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22):
        for n, k in ((3, 2), (4, 2), (8, 4)):
            faster = cm.predict(cm.RB, 4 * elements, n, owners=k) < cm.predict(cm.RB, 4 * elements, n)
            assert cm.split_pays(elements, n, k) is faster, (elements, n, k)
        assert cm.split_pays(elements, 4, 1) is False  # the root alone: nothing to split
    # 4 replicas on 2 cores: not at 256 KB (measured 1.26-1.32x the root's time), at 4 MB (0.88-0.94x)
    assert not cm.split_pays(1 << 16, 4, 2) and cm.split_pays(1 << 20, 4, 2)


def test_the_pair_ring_overlaps_its_copy_with_its_additions() -> None:
    """Two replicas of one host (ring.py): a hello each way, then each copies its b bytes into the ring while it adds
    the peer's: the longer of the two counts, not their sum."""
    b = 100.0
    assert cm.predict(cm.PAIR_RING, b, 2, params=_params(alpha=1.0, overhead=10.0)) == 1 + 2 * 10
    assert cm.predict(cm.PAIR_RING, b, 2, params=_params(beta=3.0, gamma=1.0)) == 300  # the copy is the longer
    assert cm.predict(cm.PAIR_RING, b, 2, params=_params(beta=1.0, gamma=2.0)) == 200  # the additions are
    assert cm.predict(cm.AG, b, 2, params=_params(beta=1.0, gamma=2.0)) == 300  # all-gather-reduce: the sum of both
    # both replicas work at once: on one core, twice as slow (messages, copies and additions alike)
    assert cm.predict(cm.PAIR_RING, b, 2, params=_params(overhead=1.0, beta=1.0, gamma=2.0, cores=1)) == 4 + 400
    for kwargs, match in (
        ({"world_size": 3}, "not 3 replicas on 1 host"),
        ({"world_size": 2, "hosts": 2}, "not 2 replicas on 2 host"),
        ({"world_size": 2, "params": _params(shared=False)}, "point to point"),
    ):
        with pytest.raises(ValueError, match=f"the pair ring runs between 2 replicas of one host.*{match}"):
            cm.predict(cm.PAIR_RING, b, **kwargs)
    # its cost is not linear in the parameters: measured, it is compared with the model, not fitted
    with pytest.raises(ValueError, match="pair-ring's cost is not linear in the parameters"):
        cm.fit([cm.Measurement(cm.PAIR_RING, 4 << 20, 2, 1, 1e-3)])
    assert cm.PAIR_RING in cm.MODELLED and cm.PAIR_RING not in cm.IMPLEMENTED  # (best_algorithm's default: any n)


def test_runtime_path_is_what_auto_runs() -> None:
    from interdist.collectives import ring
    from interdist.worker import affinity

    # 2 replicas: the all-gather-reduce, pipelined through the ring from its minimum size where numba is installed
    assert cm.runtime_path(4096, 2, 2) == (cm.AG, 1)
    assert cm.runtime_path(ring.MIN_BYTES - 4, 2, 2) == (cm.AG, 1)
    assert cm.runtime_path(ring.MIN_BYTES, 2, 2) == (cm.PAIR_RING, 1)
    assert cm.runtime_path(4 << 20, 2, 2, ring_runs=False) == (cm.AG, 1)
    # 4 replicas on 2 cores: reduce-broadcast, its sum split between an owner a core where the split pays
    assert cm.runtime_path(4096, 4, 2) == (cm.RB, 1)
    assert cm.runtime_path(64 << 10, 4, 2) == (cm.RB, 1)
    assert cm.runtime_path(4 << 20, 4, 2) == (cm.RB, 2)
    assert cm.runtime_path(4 << 20, 4, 1) == (cm.RB, 1)  # one core: no owner to split with
    for nbytes in (4096, 64 << 10, 1 << 20, 4 << 20, 16 << 20):
        for n in range(1, 9):
            for cores in range(1, 5):
                algorithm, owners = cm.runtime_path(nbytes, n, cores)
                assert algorithm in (cm.PAIR_RING, cm.auto_choice(nbytes // 4, n, False))
                # the owners are those the workers' join gives (affinity.reduce_owners), where the split pays
                joined = affinity.reduce_owners([f"tcp://127.0.0.1:{i}" for i in range(n)], list(range(cores)))
                split = algorithm == cm.RB and joined > 1 and cm.split_pays(nbytes // 4, n, joined)
                assert owners == (joined if split else 1), (nbytes, n, cores)
                assert cm.predict(algorithm, nbytes, n, owners=owners) > 0


# -- fitting --------------------------------------------------------------------------------
def test_fit_recovers_known_parameters() -> None:
    truth = cm.Params("truth", cm.Link(2e-5, 7e-5, 1e-10), cm.Link(1e-4, 2e-4, 8e-10), 3e-10, 2.0)
    data = [
        cm.Measurement(a, nbytes, n, h, cm.predict(a, nbytes, n, h, params=truth))
        for a in cm.IMPLEMENTED
        for nbytes in (4 << 10, 1 << 20, 16 << 20)
        for n in (2, 3, 4)
        for h in (1, n)
    ]
    start = dataclasses.replace(truth, intra=cm.Link(1.0, 1.0, 1.0), inter=cm.Link(1.0, 1.0, 1.0), gamma=1.0)
    got = cm.fit(data, start)
    np.testing.assert_allclose(got.vector(), truth.vector(), rtol=1e-6)


def test_fit_keeps_what_the_data_do_not_involve() -> None:
    truth = cm.preset("shm")
    one_host = [cm.Measurement(cm.AG, b, n, 1, cm.predict(cm.AG, b, n, params=truth))
                for b in (1 << 12, 1 << 20, 1 << 24) for n in (2, 3, 4)]
    base = dataclasses.replace(truth, inter=cm.Link(5.0, 6.0, 7.0))
    got = cm.fit(one_host, base, free=("intra.overhead", "intra.beta", "gamma"))
    assert got.inter == cm.Link(5.0, 6.0, 7.0)
    assert got.intra.alpha == truth.intra.alpha
    np.testing.assert_allclose([got.intra.overhead, got.intra.beta, got.gamma],
                               [truth.intra.overhead, truth.intra.beta, truth.gamma], rtol=1e-6)
    with pytest.raises(ValueError, match=r"unknown parameters \['delta'\]"):
        cm.fit(one_host, base, free=("delta",))
    with pytest.raises(ValueError, match="at least one measurement"):
        cm.fit([], base)


def test_nnls_keeps_parameters_non_negative() -> None:
    a = np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]])
    y = np.array([3.0, 2.0, 1.0])  # unconstrained: intercept 4, slope -1
    np.testing.assert_allclose(np.linalg.lstsq(a, y, rcond=None)[0], [4.0, -1.0])
    np.testing.assert_allclose(cm.nnls(a, y), [2.0, 0.0])


def test_params_round_trip_through_json(tmp_path: Path) -> None:
    path = tmp_path / "params.json"
    cm.save(str(path), [cm.preset("shm"), cm.preset("nccl")])
    raw = json.loads(path.read_text())
    assert raw[1]["cores"] is None  # inf is not JSON
    back = cm.load(str(path))
    assert back == {"shm": cm.preset("shm"), "nccl": cm.preset("nccl")}


# -- choosing ---------------------------------------------------------------------------------
def test_best_algorithm_is_deterministic_and_breaks_ties_by_order() -> None:
    flat = _params()  # every algorithm costs 0
    assert cm.best_algorithm(1 << 20, 4, params=flat) == cm.AG
    assert cm.best_algorithm(1 << 20, 4, params=flat, candidates=(cm.RB, cm.AG)) == cm.RB
    picks = {cm.best_algorithm(b, n) for _ in range(3) for b in (4096,) for n in (4,)}
    assert len(picks) == 1


@pytest.mark.parametrize("elements", [1, 1 << 10, 1 << 16, 1 << 18, 1 << 22])
def test_auto_keeps_the_measured_behaviour_of_this_machine(elements: int) -> None:
    # one host, 2 replicas: all-gather-reduce at every size; 3 or more: reduce-broadcast
    assert cm.auto_choice(elements, 2, False) == cm.AG
    assert cm.auto_choice(elements, 4, False) == cm.RB
    assert cm.auto_choice(elements, 2, True) in cm.AUTO_CANDIDATES_HOSTS


def test_auto_across_hosts_reduce_scatters_large_batches_only() -> None:
    assert cm.auto_choice(1 << 10, 4, True) == cm.AG
    assert cm.auto_choice(1 << 22, 4, True) == cm.RS


def test_collectives_follow_the_model_and_the_threshold_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    def algorithms_used(world: int) -> list[list[str]]:
        return run_threads(local_group(world), lambda r, c: [
            (c.all_reduce(1, seq, [np.full(n, r + 1.0)], ReduceOp.SUM, "t"), c.last_timing.algorithm)[1]
            for seq, n in ((1, 999), (2, 1000))])

    # the model: 4 replicas sharing 2 cores reduce once at the root even for tiny batches; 3 do not
    assert cm.auto_choice(999, 4, False) == cm.auto_choice(1000, 4, False) == cm.RB
    assert cm.auto_choice(999, 3, False) == cm.AG
    assert algorithms_used(4) == [[cm.RB, cm.RB]] * 4
    assert algorithms_used(3) == [[cm.AG, cm.AG]] * 3
    # any threshold set: AUTO goes by the thresholds, the unset ones at their former values
    monkeypatch.setattr(algorithms, "RB_MIN_ELEMENTS_ONE_HOST", 1000)
    assert algorithms_used(4) == [[cm.AG, cm.RB]] * 4
    assert algorithms.auto_algorithm(1 << 30, 3, True) == cm.RS  # RS_MIN_ELEMENTS at its former 1 << 18
    assert algorithms.auto_algorithm((1 << 18) - 1, 3, True) == cm.AG


def test_algorithm_names_match() -> None:
    assert (cm.AG, cm.RS, cm.RB) == (algorithms.AG, algorithms.RS, algorithms.RB)


def _child(code: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


def test_environment_overrides(tmp_path: Path) -> None:
    # a parameter file from the benchmark replaces the preset of its name; copies made dear there:
    # reduce-broadcast copies each batch 3 times (in, out, back), all-gather-reduce once
    path = tmp_path / "p.json"
    cm.save(str(path), [dataclasses.replace(cm.preset("shm"), intra=cm.Link(0.0, 0.0, 1e-6))])
    code = ("from interdist.collectives import algorithms as a, cost_model as c; "
            "print(a.auto_algorithm(999, 3, False), a.auto_algorithm(1000, 3, False), a.RS_MIN_ELEMENTS, "
            "c.PRESETS['shm'].intra.beta, c.auto_choice(1 << 20, 4, False))")
    got = _child(code, INTERDIST_RB_MIN_ELEMENTS_ONE_HOST="1000", INTERDIST_COST_MODEL=str(path))
    assert got == f"{cm.AG} {cm.RB} None 1e-06 {cm.AG}"


# -- GPU replicas' device paths (issue 27) ---------------------------------------------------------
def test_the_parameter_sets_moved_to_cost_params_and_are_re_exported() -> None:
    from interdist.collectives import cost_params

    assert cm.Params is cost_params.Params and cm.Link is cost_params.Link and cm.PRESETS is cost_params.PRESETS
    assert cm.load is cost_params.load and cm.save is cost_params.save and cm.preset is cost_params.preset
    assert {"shm", "tcp", "nccl", "cuda_ipc", "nccl-device"} <= set(cm.PRESETS)


def test_the_device_presets_say_where_they_come_from(tmp_path: Path) -> None:
    assert cm.preset("nccl-device").source.startswith("ASSUMED (not measured)")  # no machine with 2 GPUs yet
    assert cm.preset("cuda_ipc").source.startswith("fitted to bench_gpu_allreduce.py on one NVIDIA H200")
    for name in ("cuda_ipc", "nccl-device"):
        p = cm.preset(name)
        assert p.intra.beta > 0 and p.gamma > 0
    assert cm.preset("cuda_ipc").cores == 1.0 and cm.preset("cuda_ipc").shared  # one GPU's memory, written once
    assert math.isinf(cm.preset("nccl-device").cores) and not cm.preset("nccl-device").shared
    path = tmp_path / "gpu.json"  # a measured file replaces them as it replaces the fitted ones
    cm.save(str(path), [cm.preset("cuda_ipc"), cm.preset("nccl-device")])
    assert cm.load(str(path)) == {"cuda_ipc": cm.preset("cuda_ipc"), "nccl-device": cm.preset("nccl-device")}


def test_device_path_times() -> None:
    mb16 = 16 << 20
    # the replicas of one GPU share its memory: 4 of them take longer than 2, on one GPU more than on 4
    assert cm.device_path_time("cuda_ipc", mb16, 4) > cm.device_path_time("cuda_ipc", mb16, 2)
    assert cm.device_path_time("cuda_ipc", mb16, 4) > cm.device_path_time("cuda_ipc", mb16, 4, shared_gpu=False)
    # host staging: the copies of replicas on one GPU share its link
    assert cm.device_path_time("host", mb16, 4) > cm.device_path_time("host", mb16, 4, shared_gpu=False)
    for path in cm.DEVICE_PATHS:
        times = [cm.device_path_time(path, b, 2) for b in (0, 1 << 10, 1 << 20, mb16)]
        assert times == sorted(times) and times[0] > 0  # grows with the size; a latency at 0 bytes
    # the NCCL path across hosts pays the inter-host link
    assert cm.device_path_time("nccl", mb16, 4, hosts=2, shared_gpu=False) > cm.device_path_time(
        "nccl", mb16, 4, shared_gpu=False)


#: ``ctx.all_reduce`` of float32 CuPy values on replicas sharing one NVIDIA H200, median ms, as
#: benchmarks/bench_gpu_allreduce.py printed them on 2026-11-29 in four calls (tests/gpu/gpu_run.md).
H200_CUDA_IPC_MS = {
    2: {1: (0.573, 0.592, 0.972, 0.949), 16: (0.724, 0.682, 0.707, 1.097), 64: (1.051, 0.976, 0.973, 0.984),
        256: (2.425, 2.426, 2.424, 2.427)},
    4: {1: (1.190, 1.297, 1.359, 1.194), 16: (1.597, 1.588, 1.696, 1.573), 64: (2.704, 2.695, 2.694, 2.699),
        256: (7.113, 7.101, 7.102, 7.102)},
}
H200_HOST_STAGED_MS = {16: (20.17, 19.10, 20.70), 64: (75.13, 75.51, 80.65)}  # 2 replicas, the 'dask' backend


def test_the_cuda_ipc_preset_reproduces_the_h200_measurements() -> None:
    for n, table in H200_CUDA_IPC_MS.items():
        for mb, runs in table.items():
            predicted = cm.device_path_time("cuda_ipc", mb << 20, n) * 1e3
            measured = statistics.median(runs)
            assert abs(predicted - measured) <= 0.2 * measured, (n, mb, predicted, measured)  # calls differ by 60%
            if n == 4:  # (4 replicas' points: within 1%)
                assert abs(predicted - measured) <= 0.01 * measured, (n, mb, predicted, measured)
    for mb, runs in H200_HOST_STAGED_MS.items():  # host staging's model: within 25% (pageable copies vary)
        predicted = cm.device_path_time("host", mb << 20, 2) * 1e3
        assert all(abs(predicted - m) <= 0.25 * m for m in runs), (mb, predicted, runs)
    # and so the choice it makes on one GPU is the faster path measured: host staging for a few KB
    # (0.47-0.54 against 0.59-0.74 ms, warmed up), cuda_ipc from a MB up (0.6 against 1.4-2.6 ms at 1 MB)
    for nbytes in (4 << 10, 16 << 10):
        assert cm.device_choice(nbytes, 2, [cm.HOST, cm.CUDA_IPC]) == cm.HOST
    for nbytes in (1 << 20, 16 << 20, 256 << 20):
        assert cm.device_choice(nbytes, 2, [cm.HOST, cm.CUDA_IPC]) == cm.CUDA_IPC


def test_device_choice_follows_the_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cm.device_choice(16 << 20, 2, [cm.HOST, cm.CUDA_IPC]) == cm.CUDA_IPC
    slow = dataclasses.replace(cm.preset("cuda_ipc"), intra=cm.Link(1.0, 0.0, 0.0))
    monkeypatch.setitem(cm.PRESETS, "cuda_ipc", slow)
    assert cm.device_choice(16 << 20, 2, [cm.HOST, cm.CUDA_IPC]) == cm.HOST
    assert cm.device_choice(16 << 20, 2, [cm.CUDA_IPC]) == cm.CUDA_IPC  # the only candidate
