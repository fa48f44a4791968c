# SPDX-License-Identifier: Apache-2.0
"""The compiled front doors (_front.pxi): convert's fast path gives what the planner
gives, and is taken for plain data only."""

from __future__ import annotations

import re

import numpy as np
import pytest
from needs import needs

import tensorbridge as tb
from tensorbridge import _core


def _sources():
    ro = np.arange(6.0)
    ro.flags.writeable = False
    return {
        "contiguous": np.arange(6.0),
        "2-d": np.arange(6, dtype=np.int32).reshape(2, 3),
        "transposed": np.arange(6.0).reshape(2, 3).T,
        "step slice": np.arange(12.0)[::3],
        "negative": np.arange(6.0)[::-1],
        "read-only": ro,
        "offset": np.arange(10, dtype=np.int16)[3:7],
        "0-d": np.array(2.5),
        "size-0": np.zeros((0, 2)),
        "bool": np.array([True, False]),
        "uint16": np.arange(3, dtype=np.uint16),
        "tensor": tb.arange(4, dtype="float32"),
        "tensor offset": tb.arange(8, dtype="float32")[2:],
    }


def _readonly(a):
    a.flags.writeable = False
    return a


# Every CPU framework has a cached route (_routes.pxi).
FAST_TARGETS = [
    "torch",
    "paddle",
    "numpy",
    "tensorbridge",
    "jax",
    "tensorflow",
    "mlx",
    "pyarrow",
    "array_api_strict",
    "tvm_ffi",
]


@pytest.mark.parametrize("target", [pytest.param(t, marks=needs(t)) for t in FAST_TARGETS])
@pytest.mark.parametrize("case", list(_sources()))
def test_fast_convert_agrees_with_the_planner(target, case):
    from tensorbridge._convert import convert_general

    source = _sources()[case]
    ptr = tb.asarray(source).data_ptr() if getattr(source, "size", 1) else None
    try:
        want = convert_general(source, target)  # the planner; registers the fast target
    except BufferError as exc:
        with pytest.raises(BufferError, match=re.escape(str(exc))):
            tb.convert(source, target)
        return
    try:
        got = tb.convert(source, target)
    except BufferError as exc:
        pytest.fail(f"the planner converted this, the route raised {exc}")
    assert type(got) is type(want)
    from tensorbridge._frameworks import FRAMEWORKS

    name_of = FRAMEWORKS[target].dtype_name
    assert name_of(got) == name_of(want)
    if target == "pyarrow" and case == "bool":  # bit-packed: no DLPack export to compare
        assert got.equals(want)
        return
    mine, theirs = tb.asarray(got), tb.asarray(want)
    assert list(mine.shape) == list(theirs.shape)
    assert mine.readonly == theirs.readonly
    assert np.array_equal(np.asarray(mine), np.asarray(theirs))
    if ptr is not None and source.size:
        assert (mine.data_ptr() == ptr) == (theirs.data_ptr() == ptr)


@needs("torch")
def test_fast_convert_is_taken_for_plain_data_only():
    import torch

    tb.convert(np.arange(2.0), "torch")  # registers the target
    from tensorbridge._frameworks import FRAMEWORKS

    fast = FRAMEWORKS["torch"].fast_target()
    assert _core._fast_convert(fast, np.arange(3.0)) is not None
    assert _core._fast_convert(fast, np.arange(3.0)[::-1]) is None  # torch: no negative
    ro = _readonly(np.arange(3.0))  # read-only: shared writable (readonly="share")
    shared = _core._fast_convert(fast, ro)
    assert shared is not None and shared.data_ptr() == ro.ctypes.data
    assert tb.convert(ro, "torch", readonly="copy").data_ptr() != ro.ctypes.data
    assert _core._fast_convert(fast, [1.0, 2.0]) is None  # values: the planner
    z = torch.tensor([1 + 2j]).conj().imag
    assert _core._fast_convert(fast, z) is None  # torch bit views: the planner copies
    assert tb.convert(z, "torch").tolist() == [-2.0]


@needs("torch")
def test_convert_with_options_is_planned():
    import torch

    a = np.arange(3.0)
    tb.convert(a, "torch")
    assert tb.convert(a, "torch", copy=True).data_ptr() != a.ctypes.data
    assert tb.convert(a, "torch", dtype="float32").dtype == torch.float32
    with pytest.raises(ValueError, match='readonly must be "share" or "copy"'):
        tb.convert(a, "torch", readonly="strict")  # an option: the planner checks it
    assert tb.convert(a, torch).data_ptr() == a.ctypes.data  # a module as target
    w = tb.convert(a, "torch", requires_grad=True)
    assert w.requires_grad and w.is_leaf
