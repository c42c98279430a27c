"""The tutorials' data and initial weights, drawn with NumPy only.

Both sides import this module: the TF recorders (``recorder/*.py``, run with TensorFlow's Python) and the
interdist ports (``test_*.py``). So TF and interdist start from the same arrays; ``digest`` lets a test check
that, since the recordings store the digests of what the recorder drew.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parent / "data"

# "Custom training with tf.distribute.Strategy": a Fashion-MNIST-shaped problem, small.
N_TRAIN = 288  # 4 full global batches of 64 and one partial batch of 32
N_TEST = 80  # one full batch of 64 and one partial batch of 16
GLOBAL_BATCH_SIZE = 64


def digest(*arrays: np.ndarray) -> str:
    """A short hash of the arrays' dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def glorot_uniform(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Keras' ``GlorotUniform``, drawn by NumPy: fans as Keras computes them (a conv kernel's receptive field)."""
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


def image_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_images, train_labels, test_images, test_labels): 28x28x1 float32 in [0, 1], int64 labels 0..9.

    Noise, plus a bright 8x6 patch whose place on a 3x4 grid is the label, so the CNN learns in a few steps.
    """
    rng = np.random.default_rng(seed)
    n = N_TRAIN + N_TEST
    labels = rng.integers(0, 10, size=n)
    images = 0.3 * rng.random((n, 28, 28, 1))
    for i, k in enumerate(labels):
        r, c = 1 + 9 * (k // 4), 1 + 7 * (k % 4)
        images[i, r : r + 8, c : c + 6, 0] += 0.7
    images = images.astype(np.float32)
    labels = labels.astype(np.int64)
    return images[:N_TRAIN], labels[:N_TRAIN], images[N_TRAIN:], labels[N_TRAIN:]


CNN_SHAPES = [(3, 3, 1, 32), (32,), (3, 3, 32, 64), (64,), (1600, 64), (64,), (64, 10), (10,)]


def cnn_weights(seed: int = 1) -> list[np.ndarray]:
    """The CNN's initial weights in Keras order (kernel, bias per layer): glorot-uniform kernels, zero biases."""
    rng = np.random.default_rng(seed)
    return [glorot_uniform(rng, s) if len(s) > 1 else np.zeros(s, np.float32) for s in CNN_SHAPES]


# "Distributed training with TensorFlow", the custom loop: a linear regression.
def regression_data(seed: int = 2, n: int = 100) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]]) + 0.7 + 0.1 * rng.standard_normal((n, 1))).astype(np.float32)
    return x, y


def dense_weights(seed: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [glorot_uniform(rng, (4, 1)), np.zeros((1,), np.float32)]


# "Parameter server training", the custom loop: the tutorial's yes/no problem on 3 distinct words out of 7, with
# its StringLookup layers applied beforehand (feature ids: OOV 0, the words 1..7; label ids: "yes" 0, "no" 1).
FEATURE_VOCAB = ["avenger", "ironman", "batman", "hulk", "spiderman", "kingkong", "wonder_woman"]
VOCAB_SIZE = len(FEATURE_VOCAB) + 1  # the lookup layer's vocabulary, the OOV token included
EMBED_DIM = 16  # the tutorial's 16384, made small


def ps_data(seed: int = 4, n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels): int64 ids (n, 3), int64 labels (n, 1), "yes" (0) when "avenger" is among the words.

    The examples come in a fixed random order, in place of the tutorial's ``shuffle(200)``.
    """
    rng = np.random.default_rng(seed)
    words = np.stack([rng.choice(len(FEATURE_VOCAB), size=3, replace=False) for _ in range(n)])
    ids = (words + 1).astype(np.int64)
    labels = np.where((words == 0).any(axis=1, keepdims=True), 0, 1).astype(np.int64)
    return ids, labels


def ps_weights(seed: int = 5) -> list[np.ndarray]:
    """[embedding (VOCAB_SIZE, EMBED_DIM), dense kernel (EMBED_DIM, 1), dense bias (1,)], Keras' initializers."""
    rng = np.random.default_rng(seed)
    return [
        rng.uniform(-0.05, 0.05, size=(VOCAB_SIZE, EMBED_DIM)).astype(np.float32),
        glorot_uniform(rng, (EMBED_DIM, 1)),
        np.zeros((1,), np.float32),
    ]


def load(name: str) -> dict[str, Any]:
    """A recording, ``data/<name>.json``."""
    return json.loads((DATA / f"{name}.json").read_text())


def save(name: str, record: dict[str, Any]) -> Path:
    path = DATA / f"{name}.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path
