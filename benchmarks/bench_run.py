"""strategy.run(lambda x: x * 2) with results left on the workers, against client.run of a no-op.

Prints medians and ratios measured in the same run (and TF's eager MirroredStrategy when installed).
"""

from __future__ import annotations

import numpy as np

import interdist as idist
from _common import have_tensorflow, median_time


def _noop() -> None:
    return None


def tf_eager(n: int) -> float | None:
    """Median seconds of TF's eager ``MirroredStrategy.run(lambda v: v * 2)`` on n logical CPUs."""
    if not have_tensorflow():
        return None
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    if not tf.config.get_logical_device_configuration(cpu):
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
    ts = tf.distribute.MirroredStrategy([f"CPU:{i}" for i in range(n)])
    return median_time(lambda: ts.run(lambda v: v * 2, args=(tf.constant(3.0),)), repeat=200)


def main() -> None:
    x = np.float32(3.0)
    for n in (2, 4):
        with idist.MirroredStrategy([f"CPU:{i}" for i in range(n)]) as s:
            dv = s.experimental_distribute_values_from_function(lambda ctx: np.float32(ctx.replica_id_in_sync_group))
            t_run = median_time(lambda: s.run(lambda v: v * 2, args=(dv,)), repeat=200)
            t_const = median_time(lambda: s.run(lambda v: v * 2, args=(x,)), repeat=200)
            workers = s._lease.addresses
            t_client_run = median_time(lambda: s.client.run(_noop, workers=workers), repeat=200)
            t_tf = tf_eager(n)
            print(f"{n} replicas: strategy.run {t_run * 1e3:.3f} ms (PerReplica arg), {t_const * 1e3:.3f} ms "
                  f"(constant arg); client.run no-op {t_client_run * 1e3:.3f} ms; "
                  f"ratio run/client.run = {t_run / t_client_run:.2f}x (target <= 1.0)")
            if t_tf is not None:
                print(f"{n} replicas: TF eager MirroredStrategy.run {t_tf * 1e3:.3f} ms; "
                      f"ratio run/TF = {t_run / t_tf:.2f}x (target <= 1.0)")
    if not have_tensorflow():
        print("TensorFlow not installed: the TF baseline is skipped (INTERDIST_TF_SITE may point at its "
              "site-packages)")


if __name__ == "__main__":
    main()
