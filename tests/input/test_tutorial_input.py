"""Input as TF's tutorials use it, against TF 2.21 recorded on 1, 2 and 4 logical CPUs.

* ``Dataset.from_generator`` (``output_signature``, or ``output_types`` with ``output_shapes`` as the
  "Distributed input" tutorial writes it): the generator runs where the dataset is iterated (the
  notebook for ``experimental_distribute_dataset``, the workers for ``distribute_datasets_from_function``).
* ``experimental_distribute_dataset`` splits every element along its first axis, batched or not:
  elements of shape (4,) over 2 replicas give (2,) each; a scalar component raises ``IndexError``.
* A replica whose ``distribute_datasets_from_function`` pipeline ran out gets TF's dummy batch, shaped
  from the element spec (unknown dimensions 0; the first 0 when the shape is fully known): the tutorial's
  ``(None, None, 1)`` gives ``(0, 0, 1)``, ``(2, None, 1)`` gives ``(2, 0, 1)``. With a fully known spec
  (``drop_remainder=True``, scalars) TF pads nothing: the data ends at the first step a replica lacks.

``TF`` below is what TF 2.21 gave (``MirroredStrategy()`` with N logical CPUs): per case, the per-replica
element spec's shapes and, per step, per component, per replica ``[shape, values]`` (values ``None`` for
more than 8 of them), or the exception class.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle
import numpy as np
import pytest

import interdist as idist
from interdist.input.distributed_dataset import PerReplicaSpec

D = idist.data.Dataset
TS = idist.data.TensorSpec
GLOBAL_BATCH = 16

TF: dict[int, dict[str, Any]] = {
    1: {
        "ddff_dict": {
            "spec": {"a": [None, 2], "b": [None]},
            "steps": [
                {"a": [[[2, 2], [[0.0, 1.0], [2.0, 3.0]]]], "b": [[[2], [0, 1]]]},
                {"a": [[[1, 2], [[4.0, 5.0]]]], "b": [[[1], [2]]]},
            ],
        },
        "ddff_generator": {
            "spec": [[None], [None, 2]],
            "steps": [
                [[[[4], [0, 1, 2, 3]]], [[[4, 2], [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]]]],
                [[[[1], [4]]], [[[1, 2], [[4.0, 4.0]]]]],
            ],
        },
        "ddff_generator_dict": {
            "spec": {"x": [None, None]},
            "steps": [{"x": [[[2, 3], [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]]]}, {"x": [[[1, 3], [[2.0, 2.0, 2.0]]]]}],
        },
        "ddff_known_first_dim": {"spec": [2, None, 1], "steps": [[[[2, 16, 1], None]], [[[2, 16, 1], None]]]},
        "ddff_range3_b2_drop": {"spec": [2], "steps": [[[[2], [0, 1]]]]},
        "ddff_range5_b2": {"spec": [None], "steps": [[[[2], [0, 1]]], [[[2], [2, 3]]], [[[1], [4]]]]},
        "ddff_scalars": {"spec": [], "steps": [[[[], 0]], [[[], 1]], [[[], 2]]]},
        "ddff_strings": {"spec": [None], "steps": [[[[2], ["a", "b"]]], [[[1], ["c"]]]]},
        "ddff_tensors_2x3_b1": {"spec": [None, 2, 3], "steps": [[[[1, 2, 3], [[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]]]]},
        "ddff_tutorial": {
            "spec": [[None, None, 1], [None, None, 1]],
            "steps": [[[[[4, 16, 1], None]], [[[4, 16, 1], None]]]],
        },
        "ddff_tutorial_both_drop": {"spec": [[16, 16, 1], [16, 16, 1]], "steps": []},
        "ddff_tutorial_inner_drop": {
            "spec": [[None, 16, 1], [None, 16, 1]],
            "steps": [[[[[4, 16, 1], None]], [[[4, 16, 1], None]]]],
        },
        "ddff_unknown_dims": {"spec": [None, None, 1], "steps": [[[[1, 3, 1], [[[1.0], [1.0], [1.0]]]]]]},
        "edd_generator_b2": {
            "spec": [[None], [None, 2]],
            "steps": [
                [[[[2], [0, 1]]], [[[2, 2], [[0.0, 0.0], [1.0, 1.0]]]]],
                [[[[2], [2, 3]]], [[[2, 2], [[2.0, 2.0], [3.0, 3.0]]]]],
                [[[[1], [4]]], [[[1, 2], [[4.0, 4.0]]]]],
            ],
        },
        "edd_generator_b4": {
            "spec": [[None], [None, 2]],
            "steps": [
                [[[[4], [0, 1, 2, 3]]], [[[4, 2], [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]]]],
                [[[[1], [4]]], [[[1, 2], [[4.0, 4.0]]]]],
            ],
        },
        "edd_generator_none_dim_b1": {
            "spec": [None, None],
            "steps": [[[[1, 1], [[0]]]], [[[1, 2], [[0, 1]]]], [[[1, 3], [[0, 1, 2]]]]],
        },
        "edd_range9_b2": {
            "spec": [None],
            "steps": [[[[2], [0, 1]]], [[[2], [2, 3]]], [[[2], [4, 5]]], [[[2], [6, 7]]], [[[1], [8]]]],
        },
        "edd_tensors_16x1_b2": {"spec": [None, 16, 1], "steps": [[[[2, 16, 1], None]], [[[1, 16, 1], None]]]},
        "edd_tutorial_generator": {
            "spec": [4],
            "steps": [
                [[[4], [0.0, 1.0, 2.0, 3.0]]],
                [[[4], [10.0, 11.0, 12.0, 13.0]]],
                [[[4], [20.0, 21.0, 22.0, 23.0]]],
            ],
        },
        "edd_unbatched_2x4x2": {
            "spec": [4, 2],
            "steps": [[[[4, 2], [[0, 1], [2, 3], [4, 5], [6, 7]]]], [[[4, 2], [[8, 9], [10, 11], [12, 13], [14, 15]]]]],
        },
        "edd_unbatched_3x1": {"spec": [1], "steps": [[[[1], [0]]], [[[1], [1]]], [[[1], [2]]]]},
        "edd_unbatched_3x3": {"spec": [3], "steps": [[[[3], [0, 1, 2]]], [[[3], [3, 4, 5]]], [[[3], [6, 7, 8]]]]},
        "edd_unbatched_3x4": {
            "spec": [4],
            "steps": [[[[4], [0, 1, 2, 3]]], [[[4], [4, 5, 6, 7]]], [[[4], [8, 9, 10, 11]]]],
        },
        "edd_unbatched_generator_scalar": {
            "spec": [[], [2]],
            "steps": [
                [[[[], 0]], [[[2], [0.0, 0.0]]]],
                [[[[], 1]], [[[2], [1.0, 1.0]]]],
                [[[[], 2]], [[[2], [2.0, 2.0]]]],
                [[[[], 3]], [[[2], [3.0, 3.0]]]],
                [[[[], 4]], [[[2], [4.0, 4.0]]]],
            ],
        },
        "edd_unbatched_scalars": {"spec": [], "steps": [[[[], 0]], [[[], 1]], [[[], 2]], [[[], 3]]]},
        "edd_unbatched_tuple": {
            "spec": [[4], [3]],
            "steps": [[[[[4], [0, 1, 2, 3]]], [[[3], [0, 1, 2]]]], [[[[4], [4, 5, 6, 7]]], [[[3], [3, 4, 5]]]]],
        },
        "edd_unbatched_with_scalar": {
            "spec": [[4], []],
            "steps": [[[[[4], [0, 1, 2, 3]]], [[[], 0]]], [[[[4], [4, 5, 6, 7]]], [[[], 1]]]],
        },
    },
    2: {
        "ddff_dict": {
            "spec": {"a": [None, 2], "b": [None]},
            "steps": [
                {"a": [[[2, 2], [[0.0, 1.0], [2.0, 3.0]]], [[1, 2], [[4.0, 5.0]]]], "b": [[[2], [0, 1]], [[1], [2]]]}
            ],
        },
        "ddff_generator": {
            "spec": [[None], [None, 2]],
            "steps": [
                [
                    [[[2], [0, 1]], [[2], [2, 3]]],
                    [[[2, 2], [[0.0, 0.0], [1.0, 1.0]]], [[2, 2], [[2.0, 2.0], [3.0, 3.0]]]],
                ],
                [[[[1], [4]], [[0], []]], [[[1, 2], [[4.0, 4.0]]], [[0, 2], []]]],
            ],
        },
        "ddff_generator_dict": {
            "spec": {"x": [None, None]},
            "steps": [{"x": [[[2, 3], [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]], [[1, 3], [[2.0, 2.0, 2.0]]]]}],
        },
        "ddff_known_first_dim": {"spec": [2, None, 1], "steps": [[[[2, 16, 1], None], [[2, 16, 1], None]]]},
        "ddff_range3_b2_drop": {"spec": [2], "steps": []},
        "ddff_range5_b2": {"spec": [None], "steps": [[[[2], [0, 1]], [[2], [2, 3]]], [[[1], [4]], [[0], []]]]},
        "ddff_scalars": {"spec": [], "steps": [[[[], 0], [[], 1]]]},
        "ddff_strings": {"spec": [None], "steps": [[[[2], ["a", "b"]], [[1], ["c"]]]]},
        "ddff_tensors_2x3_b1": {
            "spec": [None, 2, 3],
            "steps": [[[[1, 2, 3], [[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]], [[0, 2, 3], []]]],
        },
        "ddff_tutorial": {
            "spec": [[None, None, 1], [None, None, 1]],
            "steps": [[[[[4, 16, 1], None], [[0, 0, 1], []]], [[[4, 16, 1], None], [[0, 0, 1], []]]]],
        },
        "ddff_tutorial_both_drop": {"spec": [[8, 16, 1], [8, 16, 1]], "steps": []},
        "ddff_tutorial_inner_drop": {
            "spec": [[None, 16, 1], [None, 16, 1]],
            "steps": [[[[[4, 16, 1], None], [[0, 16, 1], []]], [[[4, 16, 1], None], [[0, 16, 1], []]]]],
        },
        "ddff_unknown_dims": {
            "spec": [None, None, 1],
            "steps": [[[[1, 3, 1], [[[1.0], [1.0], [1.0]]]], [[0, 0, 1], []]]],
        },
        "edd_generator_b2": {
            "spec": [[None], [None, 2]],
            "steps": [
                [[[[1], [0]], [[1], [1]]], [[[1, 2], [[0.0, 0.0]]], [[1, 2], [[1.0, 1.0]]]]],
                [[[[1], [2]], [[1], [3]]], [[[1, 2], [[2.0, 2.0]]], [[1, 2], [[3.0, 3.0]]]]],
                [[[[1], [4]], [[0], []]], [[[1, 2], [[4.0, 4.0]]], [[0, 2], []]]],
            ],
        },
        "edd_generator_b4": {
            "spec": [[None], [None, 2]],
            "steps": [
                [
                    [[[2], [0, 1]], [[2], [2, 3]]],
                    [[[2, 2], [[0.0, 0.0], [1.0, 1.0]]], [[2, 2], [[2.0, 2.0], [3.0, 3.0]]]],
                ],
                [[[[1], [4]], [[0], []]], [[[1, 2], [[4.0, 4.0]]], [[0, 2], []]]],
            ],
        },
        "edd_generator_none_dim_b1": {
            "spec": [None, None],
            "steps": [
                [[[1, 1], [[0]]], [[0, 1], []]],
                [[[1, 2], [[0, 1]]], [[0, 2], []]],
                [[[1, 3], [[0, 1, 2]]], [[0, 3], []]],
            ],
        },
        "edd_range9_b2": {
            "spec": [None],
            "steps": [
                [[[1], [0]], [[1], [1]]],
                [[[1], [2]], [[1], [3]]],
                [[[1], [4]], [[1], [5]]],
                [[[1], [6]], [[1], [7]]],
                [[[1], [8]], [[0], []]],
            ],
        },
        "edd_tensors_16x1_b2": {
            "spec": [None, 16, 1],
            "steps": [[[[1, 16, 1], None], [[1, 16, 1], None]], [[[1, 16, 1], None], [[0, 16, 1], []]]],
        },
        "edd_tutorial_generator": {
            "spec": [2],
            "steps": [
                [[[2], [0.0, 1.0]], [[2], [2.0, 3.0]]],
                [[[2], [10.0, 11.0]], [[2], [12.0, 13.0]]],
                [[[2], [20.0, 21.0]], [[2], [22.0, 23.0]]],
            ],
        },
        "edd_unbatched_2x4x2": {
            "spec": [2, 2],
            "steps": [
                [[[2, 2], [[0, 1], [2, 3]]], [[2, 2], [[4, 5], [6, 7]]]],
                [[[2, 2], [[8, 9], [10, 11]]], [[2, 2], [[12, 13], [14, 15]]]],
            ],
        },
        "edd_unbatched_3x1": {
            "spec": [None],
            "steps": [[[[1], [0]], [[0], []]], [[[1], [1]], [[0], []]], [[[1], [2]], [[0], []]]],
        },
        "edd_unbatched_3x3": {
            "spec": [None],
            "steps": [[[[2], [0, 1]], [[1], [2]]], [[[2], [3, 4]], [[1], [5]]], [[[2], [6, 7]], [[1], [8]]]],
        },
        "edd_unbatched_3x4": {
            "spec": [2],
            "steps": [[[[2], [0, 1]], [[2], [2, 3]]], [[[2], [4, 5]], [[2], [6, 7]]], [[[2], [8, 9]], [[2], [10, 11]]]],
        },
        "edd_unbatched_generator_scalar": {"raises": "IndexError"},
        "edd_unbatched_scalars": {"raises": "IndexError"},
        "edd_unbatched_tuple": {
            "spec": [[2], [None]],
            "steps": [
                [[[[2], [0, 1]], [[2], [2, 3]]], [[[2], [0, 1]], [[1], [2]]]],
                [[[[2], [4, 5]], [[2], [6, 7]]], [[[2], [3, 4]], [[1], [5]]]],
            ],
        },
        "edd_unbatched_with_scalar": {"raises": "IndexError"},
    },
    4: {
        "ddff_dict": {
            "spec": {"a": [None, 2], "b": [None]},
            "steps": [
                {
                    "a": [[[2, 2], [[0.0, 1.0], [2.0, 3.0]]], [[1, 2], [[4.0, 5.0]]], [[0, 2], []], [[0, 2], []]],
                    "b": [[[2], [0, 1]], [[1], [2]], [[0], []], [[0], []]],
                }
            ],
        },
        "ddff_generator": {
            "spec": [[None], [None, 2]],
            "steps": [
                [
                    [[[1], [0]], [[1], [1]], [[1], [2]], [[1], [3]]],
                    [[[1, 2], [[0.0, 0.0]]], [[1, 2], [[1.0, 1.0]]], [[1, 2], [[2.0, 2.0]]], [[1, 2], [[3.0, 3.0]]]],
                ],
                [
                    [[[1], [4]], [[0], []], [[0], []], [[0], []]],
                    [[[1, 2], [[4.0, 4.0]]], [[0, 2], []], [[0, 2], []], [[0, 2], []]],
                ],
            ],
        },
        "ddff_generator_dict": {
            "spec": {"x": [None, None]},
            "steps": [
                {
                    "x": [
                        [[2, 3], [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]],
                        [[1, 3], [[2.0, 2.0, 2.0]]],
                        [[0, 0], []],
                        [[0, 0], []],
                    ]
                }
            ],
        },
        "ddff_known_first_dim": {
            "spec": [2, None, 1],
            "steps": [[[[2, 16, 1], None], [[2, 16, 1], None], [[2, 0, 1], [[], []]], [[2, 0, 1], [[], []]]]],
        },
        "ddff_range3_b2_drop": {"spec": [2], "steps": []},
        "ddff_range5_b2": {"spec": [None], "steps": [[[[2], [0, 1]], [[2], [2, 3]], [[1], [4]], [[0], []]]]},
        "ddff_scalars": {"spec": [], "steps": []},
        "ddff_strings": {"spec": [None], "steps": [[[[2], ["a", "b"]], [[1], ["c"]], [[0], []], [[0], []]]]},
        "ddff_tensors_2x3_b1": {
            "spec": [None, 2, 3],
            "steps": [
                [[[1, 2, 3], [[[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]], [[0, 2, 3], []], [[0, 2, 3], []], [[0, 2, 3], []]]
            ],
        },
        "ddff_tutorial": {
            "spec": [[None, None, 1], [None, None, 1]],
            "steps": [
                [
                    [[[4, 16, 1], None], [[0, 0, 1], []], [[0, 0, 1], []], [[0, 0, 1], []]],
                    [[[4, 16, 1], None], [[0, 0, 1], []], [[0, 0, 1], []], [[0, 0, 1], []]],
                ]
            ],
        },
        "ddff_tutorial_both_drop": {"spec": [[4, 16, 1], [4, 16, 1]], "steps": []},
        "ddff_tutorial_inner_drop": {
            "spec": [[None, 16, 1], [None, 16, 1]],
            "steps": [
                [
                    [[[4, 16, 1], None], [[0, 16, 1], []], [[0, 16, 1], []], [[0, 16, 1], []]],
                    [[[4, 16, 1], None], [[0, 16, 1], []], [[0, 16, 1], []], [[0, 16, 1], []]],
                ]
            ],
        },
        "ddff_unknown_dims": {
            "spec": [None, None, 1],
            "steps": [[[[1, 3, 1], [[[1.0], [1.0], [1.0]]]], [[0, 0, 1], []], [[0, 0, 1], []], [[0, 0, 1], []]]],
        },
        "edd_generator_b2": {
            "spec": [[None], [None, 2]],
            "steps": [
                [
                    [[[1], [0]], [[1], [1]], [[0], []], [[0], []]],
                    [[[1, 2], [[0.0, 0.0]]], [[1, 2], [[1.0, 1.0]]], [[0, 2], []], [[0, 2], []]],
                ],
                [
                    [[[1], [2]], [[1], [3]], [[0], []], [[0], []]],
                    [[[1, 2], [[2.0, 2.0]]], [[1, 2], [[3.0, 3.0]]], [[0, 2], []], [[0, 2], []]],
                ],
                [
                    [[[1], [4]], [[0], []], [[0], []], [[0], []]],
                    [[[1, 2], [[4.0, 4.0]]], [[0, 2], []], [[0, 2], []], [[0, 2], []]],
                ],
            ],
        },
        "edd_generator_b4": {
            "spec": [[None], [None, 2]],
            "steps": [
                [
                    [[[1], [0]], [[1], [1]], [[1], [2]], [[1], [3]]],
                    [[[1, 2], [[0.0, 0.0]]], [[1, 2], [[1.0, 1.0]]], [[1, 2], [[2.0, 2.0]]], [[1, 2], [[3.0, 3.0]]]],
                ],
                [
                    [[[1], [4]], [[0], []], [[0], []], [[0], []]],
                    [[[1, 2], [[4.0, 4.0]]], [[0, 2], []], [[0, 2], []], [[0, 2], []]],
                ],
            ],
        },
        "edd_generator_none_dim_b1": {
            "spec": [None, None],
            "steps": [
                [[[1, 1], [[0]]], [[0, 1], []], [[0, 1], []], [[0, 1], []]],
                [[[1, 2], [[0, 1]]], [[0, 2], []], [[0, 2], []], [[0, 2], []]],
                [[[1, 3], [[0, 1, 2]]], [[0, 3], []], [[0, 3], []], [[0, 3], []]],
            ],
        },
        "edd_range9_b2": {
            "spec": [None],
            "steps": [
                [[[1], [0]], [[1], [1]], [[0], []], [[0], []]],
                [[[1], [2]], [[1], [3]], [[0], []], [[0], []]],
                [[[1], [4]], [[1], [5]], [[0], []], [[0], []]],
                [[[1], [6]], [[1], [7]], [[0], []], [[0], []]],
                [[[1], [8]], [[0], []], [[0], []], [[0], []]],
            ],
        },
        "edd_tensors_16x1_b2": {
            "spec": [None, 16, 1],
            "steps": [
                [[[1, 16, 1], None], [[1, 16, 1], None], [[0, 16, 1], []], [[0, 16, 1], []]],
                [[[1, 16, 1], None], [[0, 16, 1], []], [[0, 16, 1], []], [[0, 16, 1], []]],
            ],
        },
        "edd_tutorial_generator": {
            "spec": [1],
            "steps": [
                [[[1], [0.0]], [[1], [1.0]], [[1], [2.0]], [[1], [3.0]]],
                [[[1], [10.0]], [[1], [11.0]], [[1], [12.0]], [[1], [13.0]]],
                [[[1], [20.0]], [[1], [21.0]], [[1], [22.0]], [[1], [23.0]]],
            ],
        },
        "edd_unbatched_2x4x2": {
            "spec": [1, 2],
            "steps": [
                [[[1, 2], [[0, 1]]], [[1, 2], [[2, 3]]], [[1, 2], [[4, 5]]], [[1, 2], [[6, 7]]]],
                [[[1, 2], [[8, 9]]], [[1, 2], [[10, 11]]], [[1, 2], [[12, 13]]], [[1, 2], [[14, 15]]]],
            ],
        },
        "edd_unbatched_3x1": {
            "spec": [None],
            "steps": [
                [[[1], [0]], [[0], []], [[0], []], [[0], []]],
                [[[1], [1]], [[0], []], [[0], []], [[0], []]],
                [[[1], [2]], [[0], []], [[0], []], [[0], []]],
            ],
        },
        "edd_unbatched_3x3": {
            "spec": [None],
            "steps": [
                [[[1], [0]], [[1], [1]], [[1], [2]], [[0], []]],
                [[[1], [3]], [[1], [4]], [[1], [5]], [[0], []]],
                [[[1], [6]], [[1], [7]], [[1], [8]], [[0], []]],
            ],
        },
        "edd_unbatched_3x4": {
            "spec": [1],
            "steps": [
                [[[1], [0]], [[1], [1]], [[1], [2]], [[1], [3]]],
                [[[1], [4]], [[1], [5]], [[1], [6]], [[1], [7]]],
                [[[1], [8]], [[1], [9]], [[1], [10]], [[1], [11]]],
            ],
        },
        "edd_unbatched_generator_scalar": {"raises": "IndexError"},
        "edd_unbatched_scalars": {"raises": "IndexError"},
        "edd_unbatched_tuple": {
            "spec": [[1], [None]],
            "steps": [
                [[[[1], [0]], [[1], [1]], [[1], [2]], [[1], [3]]], [[[1], [0]], [[1], [1]], [[1], [2]], [[0], []]]],
                [[[[1], [4]], [[1], [5]], [[1], [6]], [[1], [7]]], [[[1], [3]], [[1], [4]], [[1], [5]], [[0], []]]],
            ],
        },
        "edd_unbatched_with_scalar": {"raises": "IndexError"},
    },
}


def _cases() -> dict[str, tuple[str, Callable[..., Any]]]:
    """name -> ("edd", make dataset) or ("ddff", dataset_fn). Generators are local functions: pickled by value."""

    def input_gen() -> Iterator[np.ndarray]:  # the tutorial's, made deterministic
        for i in range(3):
            yield np.arange(4, dtype=np.float64) + 10 * i

    def pairs() -> Iterator[tuple[int, list[float]]]:
        for i in range(5):
            yield i, [float(i)] * 2

    def ragged() -> Iterator[np.ndarray]:
        for i in range(1, 4):
            yield np.arange(i)

    sig = (TS((), np.int32), TS((2,), np.float32))

    def tutorial(ctx: Any) -> Any:  # "Distributed input", distribute_datasets_from_function
        b = ctx.get_per_replica_batch_size(GLOBAL_BATCH)
        d = D.from_tensors(([1.0], [1.0])).repeat(64).batch(16)
        d = d.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return d.batch(b).prefetch(2)

    return {
        "edd_tutorial_generator": (
            "edd",
            lambda: D.from_generator(input_gen, output_types=np.float32, output_shapes=[4]),
        ),
        "edd_unbatched_3x4": ("edd", lambda: D.from_tensor_slices(np.arange(12).reshape(3, 4))),
        "edd_unbatched_3x3": ("edd", lambda: D.from_tensor_slices(np.arange(9).reshape(3, 3))),
        "edd_unbatched_3x1": ("edd", lambda: D.from_tensor_slices(np.arange(3).reshape(3, 1))),
        "edd_unbatched_2x4x2": ("edd", lambda: D.from_tensor_slices(np.arange(16).reshape(2, 4, 2))),
        "edd_unbatched_tuple": (
            "edd",
            lambda: D.from_tensor_slices((np.arange(8).reshape(2, 4), np.arange(6).reshape(2, 3))),
        ),
        "edd_unbatched_with_scalar": ("edd", lambda: D.from_tensor_slices((np.arange(8).reshape(2, 4), np.arange(2)))),
        "edd_unbatched_scalars": ("edd", lambda: D.range(4)),
        "edd_unbatched_generator_scalar": ("edd", lambda: D.from_generator(pairs, output_signature=sig)),
        "edd_generator_b2": ("edd", lambda: D.from_generator(pairs, output_signature=sig).batch(2)),
        "edd_generator_b4": ("edd", lambda: D.from_generator(pairs, output_signature=sig).batch(4)),
        "edd_generator_none_dim_b1": (
            "edd",
            lambda: D.from_generator(ragged, output_signature=TS((None,), np.int64)).batch(1),
        ),
        "edd_range9_b2": ("edd", lambda: D.range(9).batch(2)),
        "edd_tensors_16x1_b2": ("edd", lambda: D.from_tensors(np.zeros((16, 1), np.float32)).repeat(3).batch(2)),
        "ddff_tutorial": ("ddff", tutorial),
        "ddff_tutorial_inner_drop": (
            "ddff",
            lambda ctx: (
                D.from_tensors(([1.0], [1.0]))
                .repeat(64)
                .batch(16, drop_remainder=True)
                .batch(ctx.get_per_replica_batch_size(GLOBAL_BATCH))
            ),
        ),
        "ddff_tutorial_both_drop": (
            "ddff",
            lambda ctx: (
                D.from_tensors(([1.0], [1.0]))
                .repeat(64)
                .batch(16, drop_remainder=True)
                .batch(ctx.get_per_replica_batch_size(GLOBAL_BATCH), drop_remainder=True)
            ),
        ),
        "ddff_known_first_dim": (
            "ddff",
            lambda ctx: D.from_tensors([1.0]).repeat(64).batch(16).batch(2, drop_remainder=True),
        ),
        "ddff_unknown_dims": ("ddff", lambda ctx: D.from_tensors([1.0]).repeat(3).batch(16).batch(1)),
        "ddff_range5_b2": ("ddff", lambda ctx: D.range(5).batch(2)),
        "ddff_range3_b2_drop": ("ddff", lambda ctx: D.range(3).batch(2, drop_remainder=True)),
        "ddff_scalars": ("ddff", lambda ctx: D.range(3)),
        "ddff_tensors_2x3_b1": ("ddff", lambda ctx: D.from_tensors(np.zeros((2, 3), np.float32)).batch(1)),
        "ddff_dict": (
            "ddff",
            lambda ctx: D.from_tensor_slices({"a": np.arange(6.0).reshape(3, 2), "b": np.arange(3)}).batch(2),
        ),
        "ddff_strings": ("ddff", lambda ctx: D.from_tensor_slices(["a", "b", "c"]).batch(2)),
        "ddff_generator": (
            "ddff",
            lambda ctx: D.from_generator(pairs, output_signature=sig).batch(ctx.get_per_replica_batch_size(4)),
        ),
        "ddff_generator_dict": (
            "ddff",
            lambda ctx: D.from_generator(
                lambda: ({"x": np.full((3,), i, np.float32)} for i in range(3)),
                output_signature={"x": TS((None,), np.float32)},
            ).batch(2),
        ),
    }


CASES = _cases()


@pytest.fixture(scope="module", params=[1, 2, 4])
def logical(request: pytest.FixtureRequest) -> Iterator[tuple[int, Any]]:
    """``MirroredStrategy()`` with N logical CPUs and no GPU: N replicas, as TF."""
    n = request.param
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDA_VISIBLE_DEVICES", "")
        idist.config.set_logical_cpu_devices(n)
        try:
            s = idist.MirroredStrategy()
        finally:
            idist.config.set_logical_cpu_devices(1)
    assert s.num_replicas_in_sync == n
    yield n, s
    s.close()


def _spec(es: Any) -> Any:
    if isinstance(es, dict):
        return {k: _spec(v) for k, v in es.items()}
    if isinstance(es, tuple):
        return [_spec(v) for v in es]
    spec = es.spec if isinstance(es, PerReplicaSpec) else es
    return list(spec.shape)


def _replicas(s: Any, x: Any) -> list[Any]:
    out = []
    for r, part in enumerate(s.experimental_local_results(x)):
        assert str(part.device).endswith(f"CPU:{r}"), (r, part.device)  # every replica's batch on its device
        a = np.asarray(part)
        out.append([list(a.shape), a.tolist() if a.size <= 8 else None])
    return out


def _step(s: Any, x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _replicas(s, v) for k, v in x.items()}
    if isinstance(x, tuple):
        return [_replicas(s, v) for v in x]
    return _replicas(s, x)


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_tf(logical: tuple[int, Any], case: str) -> None:
    n, s = logical
    kind, make = CASES[case]
    want = TF[n][case]
    if "raises" in want:
        assert want["raises"] == "IndexError"
        with pytest.raises(IndexError, match="scalar components"):
            s.experimental_distribute_dataset(make())
        return
    dd = s.experimental_distribute_dataset(make()) if kind == "edd" else s.distribute_datasets_from_function(make)
    assert _spec(dd.element_spec) == want["spec"]
    assert [_step(s, x) for x in dd] == want["steps"]


def test_tf_recorded_what_the_issue_names() -> None:
    """The recorded shapes the tests above compare with, spelled out for the cases the issue names."""
    assert TF[2]["ddff_tutorial"]["steps"][0][0] == [[[4, 16, 1], None], [[0, 0, 1], []]]
    assert TF[4]["ddff_known_first_dim"]["steps"][0][2] == [[2, 0, 1], [[], []]]
    assert TF[2]["edd_tutorial_generator"]["steps"][0] == [[[2], [0.0, 1.0]], [[2], [2.0, 3.0]]]
    assert TF[2]["edd_unbatched_scalars"] == {"raises": "IndexError"}
    assert TF[1]["edd_unbatched_scalars"]["steps"] == [[[[], 0]], [[[], 1]], [[[], 2]], [[[], 3]]]
    assert TF[2]["ddff_range3_b2_drop"]["steps"] == []  # a static spec: no padding, the data ends


# -- where the generator runs ------------------------------------------------------------------------------


def test_generator_runs_where_the_dataset_is_iterated(mirrored2: Any) -> None:
    s = mirrored2
    here = os.getpid()

    def pids() -> Iterator[int]:
        for _ in range(2):
            yield os.getpid()

    spec = TS((), np.int64)
    edd = s.experimental_distribute_dataset(D.from_generator(pids, output_signature=spec).batch(2))
    assert [[int(v) for v in np.asarray(c)] for x in edd for c in s.experimental_local_results(x)] == [[here], [here]]
    ddff = s.distribute_datasets_from_function(lambda ctx: D.from_generator(pids, output_signature=spec).batch(1))
    got = [int(np.asarray(c)[0]) for x in ddff for c in s.experimental_local_results(x)]
    assert len(got) == 2 and here not in got and got[0] != got[1]  # each replica's worker ran it


def test_a_generator_dataset_pickles_by_value() -> None:
    scale = 3

    def gen() -> Iterator[int]:
        yield from (i * scale for i in range(3))

    ds = D.from_generator(gen, output_signature=TS((), np.int64)).batch(2)
    back = cloudpickle.loads(cloudpickle.dumps(ds))
    assert [x.tolist() for x in back] == [[0, 3], [6]]
    assert back.element_spec == TS((None,), np.int64)


# -- Dataset.from_generator itself (TF 2.21: tf.data.Dataset.from_generator, eager) -------------------------


def _values(ds: Any) -> list[Any]:
    return [(type(x).__name__, x.dtype.name, x.tolist()) for x in ds]


def test_element_specs() -> None:
    def none() -> Iterator[Any]:
        return iter(())

    assert D.from_generator(none, output_signature=TS((3,), np.float32, name="x")).element_spec == TS(
        (3,), np.float32, name="x"
    )
    assert D.from_generator(none, output_types=np.float32, output_shapes=[4]).element_spec == TS((4,), np.float32)
    assert D.from_generator(none, output_types=np.int32, output_shapes=4).element_spec == TS((4,), np.int32)
    assert D.from_generator(none, output_types=(np.int32, np.float32), output_shapes=([], [None])).element_spec == (
        TS((), np.int32),
        TS((None,), np.float32),
    )
    assert D.from_generator(
        none, output_types={"a": np.int64, "b": np.float32}, output_shapes={"a": (), "b": (None,)}
    ).element_spec == {"a": TS((), np.int64), "b": TS((None,), np.float32)}
    assert D.from_generator(none, output_signature=(TS((), np.int32),)).element_spec == (TS((), np.int32),)
    assert D.from_generator(none, output_signature=TS((3,), np.float32)).batch(2).element_spec == TS(
        (None, 3), np.float32
    )
    assert D.from_generator(none, output_signature=TS((3,), np.float32)).map(lambda x: x[:2] * 2).element_spec == TS(
        (2,), np.float32
    )
    assert D.from_generator(none, output_signature=TS((), np.int32)).cardinality() == idist.data.UNKNOWN_CARDINALITY


def test_yielded_values_are_converted_as_tf_does() -> None:
    def of(*values: Any) -> Callable[[], Iterator[Any]]:
        return lambda: iter(values)

    assert _values(D.from_generator(of(1.7, np.float64(2.5)), output_signature=TS((), np.int32))) == [
        ("int32", "int32", 1),
        ("int32", "int32", 2),
    ]
    assert _values(D.from_generator(of(1, np.int64(3)), output_signature=TS((), np.float32))) == [
        ("float32", "float32", 1.0),
        ("float32", "float32", 3.0),
    ]
    assert _values(D.from_generator(of(np.array([1, 2], np.int64)), output_signature=TS((2,), np.int32))) == [
        ("ndarray", "int32", [1, 2])
    ]
    assert _values(D.from_generator(of(True, 0), output_signature=TS((), np.bool_))) == [
        ("bool", "bool", True),
        ("bool", "bool", False),
    ]
    nan = next(iter(D.from_generator(of(None), output_signature=TS((), np.float32))))
    assert nan.dtype == np.float32 and np.isnan(nan)  # TF: float32 nan as well
    got = list(D.from_generator(of(np.zeros((2, 3)), np.zeros((2, 5))), output_signature=TS((2, None), np.float64)))
    assert [x.shape for x in got] == [(2, 3), (2, 5)]
    (d,) = D.from_generator(
        of({"a": 1, "b": [1.0, 2.0]}), output_types={"a": np.int64, "b": np.float32}, output_shapes={"a": (), "b": (2,)}
    )
    assert type(d["a"]) is np.int64 and d["a"] == 1
    assert d["b"].dtype == np.float32 and d["b"].tolist() == [1.0, 2.0]
    # TF yields bytes for tf.string; interdist's strings are str throughout (TextLineDataset too).
    assert [str(x) for x in D.from_generator(of("ab", b"cd"), output_signature=TS((), np.str_))] == ["ab", "cd"]
    pairs = list(
        D.from_generator(of((1, 2)), output_signature=(TS((), np.int32), TS((), np.int32))).map(lambda a, b: a + b)
    )
    assert pairs == [3] and type(pairs[0]) is np.int32


def test_each_iteration_calls_the_generator_again_with_args() -> None:
    calls: list[tuple[Any, ...]] = []

    def gen(*args: Any) -> list[int]:
        calls.append(tuple((type(a).__name__, np.asarray(a).dtype.name) for a in args))
        return [1, 2]  # any iterable, as TF

    ds = D.from_generator(gen, args=(3, "x", 1.5, [1, 2]), output_signature=TS((), np.int32))
    assert [int(x) for x in ds] == [1, 2] and [int(x) for x in ds] == [1, 2]
    # TF: np.int32, bytes (str here), np.float32, an int32 array.
    assert calls == [(("int32", "int32"), ("str_", "str32"), ("float32", "float32"), ("ndarray", "int32"))] * 2


def test_elements_that_do_not_fit_raise_tf_messages() -> None:
    def of(*values: Any) -> Callable[[], Iterator[Any]]:
        return lambda: iter(values)

    # TF raises InvalidArgumentError (ValueError here) around these TypeError messages.
    cases = [
        (
            of(np.zeros(3)),
            TS((2,), np.float64),
            "`generator` yielded an element of shape (3,) where an element of shape (2,) was expected.",
        ),
        (
            of(np.zeros((2, 1))),
            TS((2,), np.float64),
            "`generator` yielded an element of shape (2, 1) where an element of shape (2,) was expected.",
        ),
        (
            of([1, 2.0]),
            (TS((), np.int32), TS((), np.float32)),
            "`generator` yielded an element that did not match the expected structure. The expected structure was "
            "(tf.int32, tf.float32), but the yielded element was [1, 2.0].",
        ),
        (
            of((1, 2, 3)),
            (TS((), np.int32), TS((), np.int32)),
            "`generator` yielded an element that did not match the expected structure. The expected structure was "
            "(tf.int32, tf.int32), but the yielded element was (1, 2, 3).",
        ),
        (
            of({"a": 1}),
            {"a": TS((), np.int64), "b": TS((2,), np.float32)},
            "`generator` yielded an element that did not match the expected structure. The expected structure was "
            "{'a': tf.int64, 'b': tf.float32}, but the yielded element was {'a': 1}.",
        ),
        (
            of("ab"),
            TS((), np.int32),
            "`generator` yielded an element that could not be converted to the expected type. The expected type was "
            "int32, but the yielded element was ab.",
        ),
        (
            of(None),
            TS((), np.int32),
            "`generator` yielded an element that could not be converted to the expected type. The expected type was "
            "int32, but the yielded element was None.",
        ),
    ]
    for gen, signature, message in cases:
        with pytest.raises(ValueError) as info:
            list(D.from_generator(gen, output_signature=signature))
        assert str(info.value) == message

    def boom() -> Iterator[int]:
        yield 1
        raise KeyError("boom")  # TF: UnknownError around it; here the generator's own exception

    it = iter(D.from_generator(boom, output_signature=TS((), np.int32)))
    assert int(next(it)) == 1
    with pytest.raises(KeyError, match="boom"):
        next(it)


def test_bad_arguments_raise_tf_errors() -> None:
    def gen() -> Iterator[int]:
        yield 1

    spec = TS((), np.int32)
    with pytest.raises(TypeError, match=r"^`generator` must be a Python callable\.$"):
        D.from_generator([1, 2], output_signature=spec)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError,
        match=re.escape("The `output_types` argument can not be used together with the `output_signature` argument."),
    ):
        D.from_generator(gen, output_types=np.int32, output_signature=spec)
    with pytest.raises(
        TypeError,
        match=re.escape("The `output_shapes` argument can not be used together with the `output_signature` argument."),
    ):
        D.from_generator(gen, output_shapes=(), output_signature=spec)
    no_types: list[dict[str, Any]] = [{}, {"output_shapes": ()}]
    for kwargs in no_types:
        with pytest.raises(
            TypeError,
            match=re.escape(
                "To specify the output signature you need to provide either "
                "the `output_signature` argument or the `output_types` argument."
            ),
        ):
            D.from_generator(gen, **kwargs)
    with pytest.raises(
        TypeError,
        match=r"`output_signature` must contain objects that are subclass of "
        r"`tf.TypeSpec` but found <class 'type'> which is not.",
    ):
        D.from_generator(gen, output_signature=np.int32)
    with pytest.raises(TypeError, match=r"but found <class 'list'> which is not"):  # tf.data: a list is no structure
        D.from_generator(gen, output_signature=[spec, spec])
    # TF reads output_types alone as components of unknown rank, which interdist's TensorSpec cannot describe.
    with pytest.raises(NotImplementedError, match="output_shapes"):
        D.from_generator(gen, output_types=np.float32)


def test_components_split_by_their_own_first_dimension(logical: tuple[int, Any]) -> None:
    """TF 2.21: ``range(8).batch(4).map(lambda x: (x, x[:3]))`` splits 4 rows and 3 rows separately."""
    n, s = logical
    want = {
        1: [[[[0, 1, 2, 3]], [[0, 1, 2]]], [[[4, 5, 6, 7]], [[4, 5, 6]]]],
        2: [[[[0, 1], [2, 3]], [[0, 1], [2]]], [[[4, 5], [6, 7]], [[4, 5], [6]]]],
        4: [[[[0], [1], [2], [3]], [[0], [1], [2], []]], [[[4], [5], [6], [7]], [[4], [5], [6], []]]],
    }[n]
    for drop in (False, True):
        dd = s.experimental_distribute_dataset(D.range(8).batch(4, drop_remainder=drop).map(lambda x: (x, x[:3])))
        got = [[[np.asarray(p).tolist() for p in s.experimental_local_results(c)] for c in x] for x in dd]
        assert got == want
        if n > 1:
            assert _spec(dd.element_spec) == [[4 // n if drop else None], [None]]
