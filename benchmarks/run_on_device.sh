#!/usr/bin/env bash
# The GPU run recorded in tests/gpu/gpu_run.md. From the repo root, on a machine with an NVIDIA GPU and CuPy,
# where pip cannot reach an index: the wheels of dask, distributed & co. (same versions as the dev venv)
# wait in .whl/ (see tests/gpu/gpu_run.md). Logs go to $OUT (default /tmp/gpu-out).
#   bash benchmarks/run_on_device.sh [gpu|cpu|bench|all]   (default: all)
set -o pipefail
what=${1:-all}
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
# A device collective that never completes fails in 30 s, not the default 60: device time is short
export DASK_INTERDIST__COLLECTIVES__TIMEOUT=${DASK_INTERDIST__COLLECTIVES__TIMEOUT:-30}
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 - <<'PY'
import sys, numpy, cupy, dask, distributed, tornado
print("python", sys.version.split()[0], "| numpy", numpy.__version__, "| cupy", cupy.__version__,
      "| dask", dask.__version__, "| distributed", distributed.__version__, "| tornado", tornado.version)
print("CUDA runtime", cupy.cuda.runtime.runtimeGetVersion(), "| driver", cupy.cuda.runtime.driverGetVersion())
rt = cupy.cuda.runtime
print("GPUs", rt.getDeviceCount(), "| CUDA IPC calls:", all(hasattr(rt, f) for f in (
    "ipcGetMemHandle", "ipcOpenMemHandle", "ipcGetEventHandle", "ipcOpenEventHandle", "streamWaitEvent")))
try:
    from cupy.cuda import nccl
    print("NCCL available", nccl.available, nccl.get_version() if nccl.available else "")
except Exception as e:
    print("cupy.cuda.nccl does not import:", type(e).__name__, e)
try:
    import dask_cuda
    print("dask_cuda", dask_cuda.__version__, "imports with distributed", distributed.__version__)
except Exception as e:
    print("dask_cuda does not import:", type(e).__name__, e)
PY
} 2>&1 | tee "$OUT/env.txt"
rc=0
if [ "$what" = gpu ] || [ "$what" = all ]; then
    timeout 240 python3 -m pytest -p no:cacheprovider tests/gpu -q -rfEs --tb=long --timeout 90 --durations=15 \
        2>&1 | tee "$OUT/pytest_gpu.txt"
    rc=$((rc | $?))
fi
if [ "$what" = cpu ] || [ "$what" = all ]; then
    python3 -m pytest -p no:cacheprovider tests/collectives tests/strategy -q -rfE --tb=short --timeout 240 \
        2>&1 | tee "$OUT/pytest_cpu_subset.txt"
    rc=$((rc | $?))
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    (cd benchmarks && timeout 200 python3 bench_gpu_allreduce.py) 2>&1 | tee "$OUT/bench_gpu_allreduce.txt"
fi
exit $rc
