# SPDX-License-Identifier: Apache-2.0
"""Allocation and copies (_alloc.pxi): memory of ours is 64-byte aligned; copies are
C-contiguous and private; casts and moves copy only when they must."""

from __future__ import annotations

import numpy as np
import pytest
from producers import fake_device_producer

import tensorbridge as tb


def grid():
    a = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    return a, tb.asarray(a)


@pytest.mark.parametrize("n", [1, 3, 17, 100, 4097, 1 << 20])
def test_allocations_are_64_byte_aligned(n):
    for t in (
        tb.empty(n),
        tb.zeros(n, dtype="int8"),
        tb.asarray([1.0] * min(n, 1000)),
        tb.asarray(np.arange(n), copy=True),
        tb.asarray(np.arange(n)).astype("int16"),
    ):
        assert t.data_ptr() % 64 == 0


@pytest.mark.parametrize("nbytes", [(32 << 20) - 1, 32 << 20, (32 << 20) + 1, 5 << 22])
@pytest.mark.parametrize("advise", [True, False])
def test_blocks_of_32_mib_and_more_are_2_mib_aligned(nbytes, advise):
    from tensorbridge import _core

    previous = _core.use_huge_pages(advise)
    try:
        t = tb.zeros(nbytes, dtype="uint8")
    finally:
        _core.use_huge_pages(previous)
    assert t.data_ptr() % (1 << 21 if advise and nbytes >= 32 << 20 else 64) == 0
    a = np.from_dlpack(t)
    a[:] = 7  # every byte is ours to write (AddressSanitizer checks the block's end)
    assert a[0] == a[-1] == 7


def test_small_tensors_made_and_freed_in_a_loop_stay_aligned_and_intact():
    # Each tensor's block goes back to malloc whole (see tb_alloc); its pointer is kept
    # below the aligned one, which a neighbour's write past its end would corrupt.
    kept = [tb.asarray([float(i)] * (i % 9 + 1)) for i in range(2000)]
    del kept[::2]
    for i in range(20_000):
        t = tb.asarray([float(i)] * (i % 5 + 1))
        assert t.data_ptr() % 64 == 0 and t.tolist()[-1] == float(i)
    assert [k.tolist()[0] for k in kept[:3]] == [1.0, 3.0, 5.0]


def test_copy_and_contiguous():
    _, t = grid()
    v = t[:, ::2]
    c = v.copy()
    assert c.is_contiguous() and c.tolist() == v.tolist() and c.data_ptr() != v.data_ptr()
    assert v.contiguous().is_contiguous()
    assert t.contiguous() is t
    with pytest.raises(BufferError, match="cannot copy cuda:0 memory"):
        tb.from_dlpack(fake_device_producer((2, 0))).copy()


def test_astype_and_to():
    t = tb.asarray([1.7, -2.5])
    assert t.astype(tb.int32).tolist() == [1, -2]
    assert t.astype("float32") is not t
    assert t.astype("float32", copy=False) is t
    assert t.to("float64").dtype == tb.float64
    assert t.to("cpu") is t
    assert t.to(device="cpu", dtype="int8").tolist() == [1, -2]
    assert t.to("cpu", copy=True) is not t
    with pytest.raises(BufferError, match="cannot move cpu memory to cuda:0"):
        t.to("cuda")


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32", "float64", "complex128"])
@pytest.mark.parametrize(
    ("shape", "order", "steps"),
    [
        ((70, 130), (1, 0), (1, 1)),  # a transpose, tiles cut at both edges
        ((130, 70), (1, 0), (-1, 2)),  # reversed rows, every other column
        ((3, 65, 33), (2, 0, 1), (1, 1, 1)),  # the source runs along the middle output dim
        ((5, 40, 3, 37), (1, 3, 0, 2), (1, -1, 1, 2)),  # four dims, outer planes
        ((33, 1, 65), (2, 1, 0), (1, 1, 1)),  # an extent-1 dimension between
        ((40, 70, 1), (1, 0, 2), (1, 1, 1)),  # a trailing extent-1 dimension
    ],
)
def test_copies_of_permuted_layouts_are_numpy_s_c_order_copies(dtype, shape, order, steps):
    """Layouts whose memory runs along another dimension than the last are copied in
    tiles (_memory.h): every element lands where NumPy's C-order copy puts it,
    across tile edges, outer planes and negative steps."""
    a = (np.arange(int(np.prod(shape))) % 253).astype(dtype).reshape(shape)
    if dtype == "complex128":
        a = a + 1j * a[::-1]
    view = a.transpose(order)[tuple(slice(None, None, s) for s in steps)]
    copied = tb.asarray(view).copy()
    assert copied.is_contiguous() and copied.shape == view.shape
    assert np.array_equal(np.asarray(copied), view)
    assert not np.shares_memory(np.asarray(copied), a)


def test_copies_of_broadcast_and_tied_layouts():
    """Stride-0 (broadcast) dimensions and dimensions tied on the smallest stride."""
    x = np.arange(70 * 40, dtype=np.float64).reshape(70, 40)
    cases = [
        np.broadcast_to(x.T[None], (3, 40, 70)),  # a broadcast outer dimension
        np.broadcast_to(x.T[:, :, None], (40, 70, 5)),  # a broadcast last dimension
        np.lib.stride_tricks.as_strided(x, (35, 35, 2), (8, 8, 320)),  # a tie, overlapping
    ]
    for view in cases:
        copied = tb.asarray(view).copy()
        assert np.array_equal(np.asarray(copied), view)
        assert copied.is_contiguous()
