"""strategy.run(lambda x: x * 2) with results left on the workers, against client.run of a no-op.

Prints medians and ratios measured in the same run (and TF's eager MirroredStrategy when installed).
"""

from __future__ import annotations

import numpy as np

import interdist as idist
from _common import have_tensorflow, median_time


def _noop() -> None:
    return None


def main() -> None:
    x = np.float32(3.0)
    for n in (2, 4):
        with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
            dv = s.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group))
            t_run = median_time(lambda: s.run(lambda v: v * 2, args=(dv,)), repeat=200)
            t_const = median_time(lambda: s.run(lambda v: v * 2, args=(x,)), repeat=200)
            workers = s._lease.addresses
            t_client_run = median_time(lambda: s.client.run(_noop, workers=workers), repeat=200)
            print(f"{n} replicas: strategy.run {t_run * 1e3:.3f} ms (PerReplica arg), {t_const * 1e3:.3f} ms "
                  f"(constant arg); client.run no-op {t_client_run * 1e3:.3f} ms; "
                  f"ratio run/client.run = {t_run / t_client_run:.2f}x (target <= 1.0)")
    if have_tensorflow():
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        ts = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
        t_tf = median_time(lambda: ts.run(lambda v: v * 2, args=(tf.constant(3.0),)), repeat=200)
        print(f"TensorFlow eager MirroredStrategy (2 logical CPUs): {t_tf * 1e3:.3f} ms")
    else:
        print("TensorFlow not installed: the TF baseline is skipped")


if __name__ == "__main__":
    main()
