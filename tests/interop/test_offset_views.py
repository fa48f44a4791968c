# SPDX-License-Identifier: Apache-2.0
"""Views that start inside their memory, read by every peer's own from_dlpack.

A tensorbridge view such as ``t[1:]`` starts some bytes into its owner's memory.
tensorbridge exports it with that offset folded into ``DLTensor.data`` and
``byte_offset = 0`` (docs/design.md): PaddlePaddle ignores ``byte_offset`` (it
would read the owner's first elements) and TensorFlow refuses any nonzero one.
Each consumer here is called the way its users call it, and must see the same
values NumPy sees on the same data.

A consumer that cannot take a layout for a reason unrelated to offsets is left
out of that layout (``EXCLUDED``, with the reason), not marked xfail.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorbridge as tb
from tensorbridge import _testing
from tensorbridge._core import inspect_capsule

from .frameworks import NAMES, need

pytestmark = pytest.mark.interop

#: Each layout, applied alike to a (4, 16) float32 grid (rows of 64 bytes) and to
#: a flat run of 64 float32, of tensorbridge and of NumPy.
LAYOUTS = {
    "t[1:]": lambda grid, flat: grid[1:],
    "flat t[16:]": lambda grid, flat: flat[16:],
    "t[:, 2:]": lambda grid, flat: grid[:, 2:],
    "transposed slice": lambda grid, flat: grid[1:3, 2:10].T,
    "step slice": lambda grid, flat: flat[5::3],
    "2-d step slice": lambda grid, flat: grid[1:, 1::3],
    "0-d element": lambda grid, flat: grid[3, 0],
    "reversed slice": lambda grid, flat: flat[40:20:-2],
}

COMPACT = {"t[1:]", "flat t[16:]", "0-d element"}  # C-contiguous, 64-byte aligned
NON_COMPACT = set(LAYOUTS) - COMPACT


def _excluded(consumer, layouts, reason):
    return {(consumer, layout): reason for layout in layouts}


#: (consumer, layout): why the consumer cannot take that layout whatever the offset.
EXCLUDED = {
    **_excluded(
        "pyarrow",
        set(LAYOUTS) - {"flat t[16:]"},
        "pa.Array.from_dlpack takes contiguous 1-d tensors only",
    ),
    **_excluded("jax", NON_COMPACT, "JAX imports only compact layouts (row-major or permuted)"),
    # Also keeps TensorFlow off memory that is not 64-byte aligned, which aborts it.
    **_excluded("tensorflow", NON_COMPACT, "TensorFlow takes C-contiguous layouts only"),
    ("mlx", "reversed slice"): "MLX refuses negative strides",
    ("torch", "reversed slice"): "torch.from_dlpack aborts the process on negative strides",
    ("torch capsule", "reversed slice"): "torch.from_dlpack aborts the process on negative strides",
}

#: (consumer, layout): a peer's own bug, seen with NumPy's arrays too.
PEER_BUGS = {
    ("paddle", "reversed slice"): "Paddle mangles negative strides (MemoryError or "
    "wrong values), NumPy's arrays too",
    ("paddle capsule", "reversed slice"): "Paddle mangles negative strides (MemoryError or "
    "wrong values), NumPy's arrays too",
}


def _read(consumer, view):
    """The consumer's own import of view, as a NumPy array of what it holds."""
    if consumer == "numpy":
        return np.from_dlpack(view)
    if consumer == "torch":
        return need("torch").from_dlpack(view).numpy()
    if consumer == "torch capsule":
        torch = need("torch")
        return torch.utils.dlpack.from_dlpack(tb.to_dlpack(view)).numpy()
    if consumer == "jax":
        return np.asarray(need("jax").dlpack.from_dlpack(view))
    if consumer == "paddle":
        return need("paddle").from_dlpack(view).numpy()
    if consumer == "paddle capsule":
        return need("paddle").utils.dlpack.from_dlpack(tb.to_dlpack(view)).numpy()
    if consumer == "tensorflow":
        tf = need("tensorflow")
        assert view.data_ptr() % 64 == 0, "TensorFlow would abort on this memory"
        return tf.experimental.dlpack.from_dlpack(view.__dlpack__()).numpy()
    if consumer == "mlx":
        return np.array(need("mlx").from_dlpack(view))
    if consumer == "pyarrow":
        return need("pyarrow").Array.from_dlpack(view).to_numpy(zero_copy_only=False)
    if consumer == "array_api_strict":
        return np.from_dlpack(need("array_api_strict").from_dlpack(view))
    if consumer == "tvm_ffi":
        return np.from_dlpack(need("tvm_ffi").from_dlpack(view))
    raise AssertionError(consumer)


#: Frameworks whose users also hand them a raw capsule (a second consumer each).
CAPSULE_CONSUMERS = ("torch", "paddle")
#: Every framework but tensorbridge (the producer here), in the registry's order.
CONSUMERS = [
    consumer
    for name in NAMES
    if name != "tensorbridge"
    for consumer in ((name, f"{name} capsule") if name in CAPSULE_CONSUMERS else (name,))
]


def _case(consumer, layout):
    reason = PEER_BUGS.get((consumer, layout))
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(consumer, layout, marks=marks, id=f"{consumer}-{layout}")


CASES = [
    _case(consumer, layout)
    for consumer in CONSUMERS
    for layout in LAYOUTS
    if (consumer, layout) not in EXCLUDED
]


def _views(layout):
    ours = LAYOUTS[layout](
        tb.arange(64, dtype="float32").reshape(4, 16), tb.arange(64, dtype="float32")
    )
    want = LAYOUTS[layout](
        np.arange(64, dtype=np.float32).reshape(4, 16), np.arange(64, dtype=np.float32)
    )
    return ours, np.asarray(want)


@pytest.mark.parametrize(("consumer", "layout"), CASES)
def test_consumer_reads_the_view_not_its_owner(consumer, layout):
    view, want = _views(layout)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Paddle/TF import-time chatter
        got = _read(consumer, view)
    assert got.shape == want.shape
    assert got.tolist() == want.tolist()


EXPORTS = {
    "__dlpack__(max_version=(1, 3))": lambda v: inspect_capsule(v.__dlpack__(max_version=(1, 3))),
    "__dlpack__()": lambda v: inspect_capsule(v.__dlpack__()),
    "to_dlpack": lambda v: inspect_capsule(tb.to_dlpack(v)),
    "exchange table managed tensor": lambda v: inspect_capsule(_testing.table_from_py(v)),
    "exchange table DLTensor": _testing.table_dltensor,
}

#: The layouts, plus an element at an offset no alignment would round to.
STRUCT_VIEWS = {**LAYOUTS, "0-d element t[2, 5]": lambda grid, flat: grid[2, 5]}


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize("layout", STRUCT_VIEWS)
def test_the_offset_is_folded_into_data(layout, export):
    owner = tb.arange(64, dtype="float32")
    view = STRUCT_VIEWS[layout](owner.reshape(4, 16), owner)
    assert view.data_ptr() != owner.data_ptr()  # the view starts inside the memory
    info = EXPORTS[export](view)
    assert info["byte_offset"] == 0
    assert info["data"] == view.data_ptr()
    assert info["shape"] == view.shape and info["strides"] == view.strides
