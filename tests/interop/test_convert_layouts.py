# SPDX-License-Identifier: Apache-2.0
"""convert of awkward layouts into every framework: 0-d, size-0, transposed,
step-sliced, negative-stride, offset and read-only sources.

The peers crash, abort or read wrong values on several of these (PyTorch aborts on
negative strides, Paddle ignores byte_offset and mangles negative strides, TF
aborts on unaligned memory); convert must hand each a form it takes correctly.
"""

from __future__ import annotations

import numpy as np
import pytest
from needs import needs

import tensorbridge as tb
from tensorbridge._cli.probes import probe

from .frameworks import NAMES, is_protected, need, pointer, shape, values

pytestmark = pytest.mark.interop


def _readonly(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


NUMPY_LAYOUTS = {
    "0-d": lambda: np.array(3.5, dtype=np.float32),
    "0-d view": lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[1, 2, ...],
    "numpy scalar": lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[1, 2],
    "size-0": lambda: np.zeros((0, 3), dtype=np.float32),
    "size-0 middle": lambda: np.zeros((2, 0, 3), dtype=np.float32),
    "transposed": lambda: np.arange(12, dtype=np.float32).reshape(3, 4).T,
    "step-sliced": lambda: np.arange(24, dtype=np.float32)[::3],
    "negative stride": lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::-1],
    "offset view": lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[1:, 2:],
    "broadcast": lambda: np.broadcast_to(np.arange(4, dtype=np.float32), (3, 4)),
    "read-only": lambda: _readonly(np.arange(6, dtype=np.float32).reshape(2, 3)),
    "read-only negative": lambda: _readonly(np.arange(6, dtype=np.float32))[::-2],
}


def _torch_layouts():
    import torch

    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "torch 0-d": base[1, 2],
        "torch size-0": base[:0],
        "torch transposed": base.t(),
        "torch step-sliced": base[:, ::2],
        "torch offset view": base[1:, 3:],
        "torch neg-bit view": (torch.arange(3.0) * (1 + 1j)).conj().imag,
        "torch requires grad": torch.ones(3, requires_grad=True),
    }


TORCH_LAYOUTS = [
    "torch 0-d",
    "torch size-0",
    "torch transposed",
    "torch step-sliced",
    "torch offset view",
    "torch neg-bit view",
    "torch requires grad",
]


def _expected(source):
    if hasattr(source, "detach"):
        import torch

        return source.detach().resolve_neg().resolve_conj().to(torch.float64).numpy()
    return np.asarray(source, dtype=np.float64)


def _check(consumer, source, source_name, readonly="share"):
    plan = tb.explain(source, consumer, readonly=readonly)
    result = tb.convert(source, consumer, readonly=readonly)
    want = _expected(source)
    assert probe(consumer).dtype_name(result) == "float32"
    assert shape(consumer, result) == want.shape
    assert values(consumer, result) == want.reshape(-1).tolist()
    src_ptr = (
        pointer(source_name, source)
        if source_name != "torch"
        else (source.data_ptr() if not source.requires_grad else None)
    )
    dst_ptr = pointer(consumer, result)
    if want.size and src_ptr is not None and dst_ptr is not None:
        assert (src_ptr == dst_ptr) is plan.shares_memory, str(plan)
    if (
        plan.shares_memory
        and source_name == "numpy"
        and not source.flags.writeable
        and isinstance(source, np.ndarray)
    ):
        # Writable over read-only data only by default, only where the target cannot
        # say read-only, and said.
        said = any("writable over read-only data" in n for n in plan.notes)
        assert is_protected(consumer, result) or said, "read-only data became writable"
        assert not said or (readonly == "share" and not is_protected(consumer, result))
    return plan


@pytest.mark.parametrize("consumer", NAMES)
@pytest.mark.parametrize("layout", NUMPY_LAYOUTS)
def test_numpy_layouts(layout, consumer):
    need(consumer)
    _check(consumer, NUMPY_LAYOUTS[layout](), "numpy")


@pytest.mark.parametrize("consumer", NAMES)
@pytest.mark.parametrize("layout", [k for k in NUMPY_LAYOUTS if "read-only" in k])
def test_numpy_read_only_layouts_with_readonly_copy(layout, consumer):
    need(consumer)
    plan = _check(consumer, NUMPY_LAYOUTS[layout](), "numpy", readonly="copy")
    assert not any("writable over" in n for n in plan.notes)


@needs("torch")
@pytest.mark.parametrize("consumer", NAMES)
@pytest.mark.parametrize("layout", TORCH_LAYOUTS)
def test_torch_layouts(layout, consumer):
    need(consumer)
    source = _torch_layouts()[layout]
    plan = _check(consumer, source, "torch")
    if layout == "torch neg-bit view":
        # The negative bit has to be applied (a copy), except for torch itself, which
        # gets its own tensor back.
        assert plan.shares_memory == (consumer == "torch")


# Pinned, not read from the registry's negative_strides: the test checks that fact.
@pytest.mark.parametrize("consumer", ["torch", "paddle", "jax", "tensorflow", "mlx", "pyarrow"])
def test_negative_strides_with_copy_false_say_what_the_target_cannot_take(consumer):
    need(consumer)
    source = np.arange(6, dtype=np.float32)[::-1]
    with pytest.raises(
        BufferError,
        match=f"copy=False, but {consumer} .*negative strides|"
        f"copy=False, but {consumer} (always copies|takes)",
    ):
        tb.convert(source, consumer, copy=False)


def test_paddle_gets_the_offset_it_would_ignore():
    need("paddle")
    source = np.arange(12, dtype=np.float32).reshape(3, 4)[1:, 2:]
    plan = tb.explain(source, "paddle")
    assert plan.shares_memory and any("byte_offset" in n for n in plan.notes)
    result = tb.convert(source, "paddle")
    assert result.numpy().tolist() == source.tolist()
    result[0, 0] = -1.0
    assert source[0, 0] == -1.0


def test_tensorflow_never_gets_unaligned_memory():
    need("tensorflow")
    import tensorflow as tf

    base = tb.zeros(64 + 16, dtype="uint8")
    unaligned = base[8:72].view("float32")  # 8 bytes past a 64-byte boundary
    plan = tb.explain(unaligned, "tensorflow")
    assert not plan.shares_memory and "64-byte aligned" in plan.copies[0]
    result = tb.convert(unaligned, "tensorflow")
    assert float(tf.reduce_sum(tf.cast(result, tf.float64))) == 0.0  # TF would abort here
