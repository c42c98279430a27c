"""Run inside the first network namespace: a MultiWorkerMirroredStrategy over both "hosts"; prints JSON."""

from __future__ import annotations

import json

import numpy as np

import interdist as idist
from interdist.experimental import CommunicationOptions


def main() -> None:
    s = idist.MultiWorkerMirroredStrategy(communication_options=CommunicationOptions(timeout_seconds=30))
    try:
        with s.scope():
            v = idist.Variable(np.zeros(4, np.float32), aggregation=idist.VariableAggregation.SUM)

        def step() -> object:
            ctx = idist.get_replica_context()
            r = int(ctx.replica_id_in_sync_group)
            v.assign_add(np.full(4, r + 1, np.float32))
            return ctx.all_reduce("sum", np.float32(r + 1))

        out = s.run(step)
        print(json.dumps({
            "addresses": s._lease.addresses,
            "devices": list(s.extended.worker_devices),
            "all_reduce": [float(x) for x in s.experimental_local_results(out)],
            "variable": [np.asarray(c).tolist() for c in s.experimental_local_results(v)],
        }), flush=True)
    finally:
        s.close()


if __name__ == "__main__":
    main()
