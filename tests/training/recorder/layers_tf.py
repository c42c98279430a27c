"""TF 2.21 side of tests/training: run with a TensorFlow install (tensorflow-cpu==2.21.0), not by pytest."""
import json, pathlib
import numpy as np, tensorflow as tf, keras

rng = np.random.default_rng(3)
x = rng.standard_normal((2, 10, 10, 1)).astype(np.float32)
y = np.array([1, 2])
model = keras.Sequential([
    keras.Input(shape=(10, 10, 1)),
    keras.layers.Conv2D(4, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(6, 3, activation="relu", padding="same"),
    keras.layers.Flatten(),
    keras.layers.Dense(8, activation="relu", kernel_regularizer=keras.regularizers.L2(0.01)),
    keras.layers.Dense(3),
])
weights = [(rng.standard_normal(w.shape) * 0.5).astype(np.float32) for w in model.get_weights()]
model.set_weights(weights)
loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
with tf.GradientTape() as tape:
    logits = model(x, training=True)
    per_example = loss_object(y, logits)
    loss = tf.nn.compute_average_loss(per_example, global_batch_size=4) + tf.nn.scale_regularization_loss(tf.add_n(model.losses))
grads = tape.gradient(loss, model.trainable_variables)
out = {
    "x": x.tolist(), "y": y.tolist(), "weights": [w.tolist() for w in weights],
    "paths": [v.path for v in model.variables], "params": model.count_params(),
    "logits": logits.numpy().tolist(), "per_example": per_example.numpy().tolist(), "loss": float(loss),
    "reg": [float(l) for l in model.losses], "grads": [g.numpy().tolist() for g in grads],
}
json.dump(out, open(pathlib.Path(__file__).parents[1] / "data" / "layers_tf.json", "w"))
print(out["paths"], out["params"], out["loss"])
