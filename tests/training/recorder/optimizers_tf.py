"""TF 2.21 side of tests/training/_optimizer_cases.py: run with TensorFlow 2.21 (Keras 3), not by pytest.

    python tests/training/recorder/optimizers_tf.py > optimizers_tf.json

Prints, per case, the variable after each step and the slots at the end (eager, one CPU device), and
whether MirroredStrategy (2 replicas, each given half of each gradient, in a tf.function) gives the
same values bit for bit (SGD and Adam do; RMSprop and Adagrad are 1-2 ulp off there: grappler rewrites
x / sqrt(y) as x * rsqrt(y) in graphs). Also: ParameterServerStrategy (1 worker, 1 ps, in-process
servers), the same steps scheduled one after the other through a ClusterCoordinator, equals the eager
values bit for bit (the slots are placed on /job:chief there, not on the ps).
"""


def main() -> None:
    import json
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    k = tf.keras.optimizers
    w0 = np.array([0.5, -1.25, 2.0, 0.0], np.float32)
    grads = np.array(
        [[0.1, -0.2, 0.3, -0.4], [0.25, 0.5, -0.75, 1.0], [-1.5, 0.125, 0.0625, 2.0], [0.3, -0.3, 0.7, -0.9]],
        np.float32,
    )
    cases = {
        "sgd": lambda: k.SGD(0.1),
        "sgd_momentum": lambda: k.SGD(0.1, momentum=0.9),
        "sgd_nesterov": lambda: k.SGD(0.1, momentum=0.9, nesterov=True),
        "adam": lambda: k.Adam(0.1),
        "adam_default": lambda: k.Adam(),
        "rmsprop_default": lambda: k.RMSprop(),
        "rmsprop": lambda: k.RMSprop(0.1),
        "rmsprop_centered_momentum": lambda: k.RMSprop(0.05, rho=0.8, momentum=0.5, epsilon=1e-6, centered=True),
        "adagrad_default": lambda: k.Adagrad(),
        "adagrad": lambda: k.Adagrad(0.1),
    }
    out = {}
    for name, make in cases.items():
        w = tf.Variable(w0)
        opt = make()
        steps = []
        for g in grads:
            opt.apply_gradients([(tf.constant(g), w)])
            steps.append([float(x) for x in w.numpy()])
        slots = {
            v.path.split("/")[-1].split("_", 2)[2]: [float(x) for x in np.ravel(v.numpy())]
            for v in opt.variables
            if v.path.split("/")[-1] not in ("iteration", "learning_rate")
        }
        strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
        with strategy.scope():
            wm = tf.Variable(w0)
            om = make()
            om.build([wm])  # Keras 3 cannot make slots inside a tf.function under MirroredStrategy

        @tf.function
        def step(g, strategy=strategy, om=om, wm=wm):
            strategy.run(lambda: om.apply_gradients([(g * 0.5, wm)]))

        for g in grads:
            step(tf.constant(g))
        out[name] = {
            "steps": steps,
            "slots": slots,
            "iterations": int(opt.iterations.numpy()),
            "mirrored_equal": bool(np.array_equal(wm.numpy(), w.numpy())),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
