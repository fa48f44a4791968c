# SPDX-License-Identifier: Apache-2.0
"""NumPy arrays out (_ndarray.pxi): Tensor.numpy() and convert into NumPy make the
array through NumPy's C API table, which must give what numpy.from_dlpack gives of
the same tensor (memory, dtype, shape, strides, flags) with the tensor as its base."""

from __future__ import annotations

import gc
import subprocess
import sys

import numpy as np
import pytest
from needs import needs

import tensorbridge as tb
from tensorbridge import _core, _testing
from tensorbridge._frameworks import FRAMEWORKS
from tensorbridge._frameworks.base import STANDARD

DTYPES = sorted(STANDARD)  # NumPy's own dtypes

LAYOUTS = {
    "contiguous": lambda a: a,
    "transposed": lambda a: a.T,
    "strided": lambda a: a[::2, 1::3],
    "negative": lambda a: a[::-1, ::-2],
    "scalar": lambda a: a[1, 2, ...],
    "empty": lambda a: a[:0],
    "broadcast": lambda a: np.broadcast_to(a[:1], (3, 6)),
    "unit dimension": lambda a: a[1:2, ::5],
}


@pytest.fixture(params=[True, False], ids=["c api", "no c api"])
def numpy_api(request):
    previous = _core.use_numpy_api(request.param)
    yield request.param
    _core.use_numpy_api(previous)


def ptr(a):
    return a.__array_interface__["data"][0]


def described(a, exact_type=True):
    # The type number too (int64 is both "l" and "q" on LP64, equal as dtypes; the
    # buffer protocol's view, without the C API, says "q").
    kind = (a.dtype, a.dtype.num, a.dtype.char) if exact_type else (a.dtype,)
    if a.size == 0:
        # The pointer and strides of no elements (numpy.from_dlpack allocates for
        # the NULL pointer DLPack exports of empty tensors, and makes that writable).
        return (*kind, a.shape)
    return (
        *kind,
        a.shape,
        a.strides,
        ptr(a),
        a.flags.c_contiguous,
        a.flags.f_contiguous,
        a.flags.writeable,
        a.flags.aligned,
    )


def source(dtype, layout, readonly):
    base = (np.arange(24) % 7).astype(dtype).reshape(4, 6)
    view = LAYOUTS[layout](base)
    if readonly:
        view.flags.writeable = False
    return base, view


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "read-only"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_view_is_what_numpy_from_dlpack_makes(dtype, layout, readonly, numpy_api):
    _, view = source(dtype, layout, readonly)
    t = tb.from_dlpack(view)
    expected = np.from_dlpack(t)
    for made in (t.numpy(), tb.convert(t, "numpy"), tb.convert(t, "numpy")):
        assert type(made) is np.ndarray
        assert described(made, numpy_api) == described(expected, numpy_api)
        assert np.array_equal(made, view)
        if made.size or numpy_api:  # (numpy.from_dlpack: empty ones are its own)
            assert made.flags.writeable == (not t.readonly)
            assert not made.flags.owndata
        if numpy_api:
            assert isinstance(made.base, tb.Tensor)
    assert (t.numpy().base is t) == numpy_api


@pytest.mark.parametrize("offset", [1, 4, 8])
def test_a_byte_offset_is_where_the_data_starts(offset, numpy_api):
    data = bytearray(np.arange(16, dtype=np.uint8).tobytes())
    capsule, _ = _testing.make_capsule(
        data, shape=(2, 3), dtype=(1, 8, 1), byte_offset=offset, flags=1
    )
    t = tb.from_dlpack(capsule)
    assert t.readonly
    base = np.frombuffer(data, dtype=np.uint8)
    expected = base[offset : offset + 6].reshape(2, 3)
    for made in (t.numpy(), tb.convert(t, "numpy"), t[1:].numpy(), t.T[1:, 1:].numpy()):
        assert np.shares_memory(made, base) and not made.flags.writeable
    assert ptr(t.numpy()) == ptr(expected)
    assert np.array_equal(t.numpy(), expected)
    assert np.array_equal(tb.convert(t, "numpy"), expected)
    assert np.array_equal(t[1:].numpy(), expected[1:])
    assert np.array_equal(t.T[1:, 1:].numpy(), expected.T[1:, 1:])


def test_writes_go_through_to_the_memory(numpy_api):
    base = np.zeros((3, 4), dtype=np.float32)
    t = tb.from_dlpack(base[:, ::2])
    for made in (t.numpy(), tb.convert(t, "numpy")):
        made[1, 1] += 5
    assert base[1, 2] == 10 and base.sum() == 10


def test_read_only_memory_cannot_be_made_writable(numpy_api):
    data = np.arange(4.0)
    data.flags.writeable = False
    t = tb.from_dlpack(data)
    for made in (t.numpy(), tb.convert(t, "numpy")):
        assert not made.flags.writeable
        with pytest.raises(ValueError):
            made.flags.writeable = True
        with pytest.raises(ValueError):
            made[0] = 1


def test_the_array_keeps_the_producers_memory_alive(numpy_api):
    data = bytearray(np.arange(6, dtype=np.int32).tobytes())
    capsule, counter = _testing.make_capsule(data, shape=(2, 3), dtype=(0, 32, 1))
    t = tb.from_dlpack(capsule)
    made = t.numpy()
    del t, capsule
    gc.collect()
    assert counter.calls == 0
    assert made.tolist() == [[0, 1, 2], [3, 4, 5]]
    del made
    gc.collect()
    assert counter.calls == 1


def test_a_tensor_without_a_data_pointer(numpy_api):
    capsule, _ = _testing.make_capsule(0, shape=(0, 3), strides=(3, 1))
    t = tb.from_dlpack(capsule)
    for made in (t.numpy(), tb.convert(t, "numpy")):
        assert made.shape == (0, 3) and made.dtype == np.float32
        if numpy_api:  # not given to NumPy's C API, which would allocate for NULL
            assert not isinstance(made.base, tb.Tensor)


@pytest.mark.parametrize("ndim", [32, 40, 64])
def test_as_many_dimensions_as_numpy_holds(ndim, numpy_api):
    data = np.arange(2.0).reshape((2,) + (1,) * (ndim - 1))
    t = tb.from_dlpack(data)
    numpy_2 = np.lib.NumpyVersion(np.__version__) >= "2.0.0"
    for made in (t.numpy(), tb.convert(t, "numpy")):
        assert made.shape == data.shape and ptr(made) == ptr(data)
        assert isinstance(made.base, tb.Tensor) == (numpy_api and (ndim <= 32 or numpy_2))


def test_the_switch_says_its_previous_setting():
    previous = _core.use_numpy_api(False)
    try:
        assert _core.use_numpy_api(False) is False
        assert _core.use_numpy_api(True) is False
        t = tb.from_dlpack(np.arange(3.0))
        assert t.numpy().base is t  # loaded again, and checked
        assert _core.use_numpy_api(True) is True
    finally:
        _core.use_numpy_api(previous)


def test_device_memory_has_no_numpy_view(numpy_api):
    capsule, _ = _testing.make_capsule(0x1000, shape=(2,), strides=(1,), device=(2, 0))
    t = tb.from_dlpack(capsule)
    with pytest.raises(BufferError, match="cuda"):
        t.numpy()


@needs("ml_dtypes")
def test_ml_dtypes_types_are_still_viewed_through_the_buffer_protocol(numpy_api):
    import ml_dtypes

    data = np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16)
    t = tb.asarray(data)
    for made in (t.numpy(), tb.convert(t, "numpy")):
        assert made.dtype == ml_dtypes.bfloat16 and ptr(made) == ptr(data)


@needs("torch")
def test_table_sources_are_made_through_the_c_api(numpy_api):
    import torch

    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    for _ in range(3):  # the planner, then the route
        made = tb.convert(x, "numpy")
        assert ptr(made) == x.data_ptr() and made.flags.writeable
        assert isinstance(made.base, tb.Tensor) == numpy_api
    made[0, 0] = 7
    assert x[0, 0].item() == 7


def test_the_ndarray_maker_needs_an_importer_to_fall_back_on():
    kwargs = {
        "target_type": None,
        "dtypes": [tb.float32],
        "negative_strides": True,
        "noncompact": True,
        "permuted": True,
        "offset_ok": True,
        "readonly_ok": True,
        "alignment": 0,
    }
    with pytest.raises(TypeError, match="needs an importer"):
        _core.FastTarget(maker="ndarray", **kwargs)
    with pytest.raises(TypeError, match="a maker is"):
        _core.FastTarget(maker="nd-array", **kwargs)
    target = _core.FastTarget(maker="ndarray", importer=np.from_dlpack, **kwargs)
    t = tb.from_dlpack(np.arange(3.0))
    assert target(t).base is t
    assert FRAMEWORKS["numpy"].fast_target()(t).base is t


def test_threads_making_their_first_arrays_together_all_use_the_c_api():
    # A fresh process: the table is loaded by the first calls, which race here.
    script = """
import threading
import numpy as np
import tensorbridge as tb

ts = [tb.from_dlpack(np.arange(3.0)) for _ in range(4)]
start = threading.Barrier(4)
bases = [None] * 4

def first(i):
    start.wait()
    bases[i] = ts[i].numpy().base is ts[i]

threads = [threading.Thread(target=first, args=(i,)) for i in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(bases)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[True, True, True, True]"
