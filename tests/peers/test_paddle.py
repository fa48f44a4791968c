# SPDX-License-Identifier: Apache-2.0
"""What PaddlePaddle's own DLPack tests check of Paddle, asked of tensorbridge.

The checks come from Paddle's ``test/legacy_test/test_dlpack.py`` (read at commit
01243ccb): each test here names the Paddle test it mirrors. tensorbridge plays
both roles: *producer* (Paddle's ``paddle.from_dlpack`` /
``paddle.utils.dlpack.from_dlpack`` read a ``tb.Tensor`` or a capsule of ours)
and *consumer* (``tb.from_dlpack`` / ``tb.asarray`` read Paddle's tensors and
capsules). Paddle checks that are already asked of tensorbridge elsewhere are
pointed to, not repeated:

- ``test_to_dlpack_versioned`` (capsule names for each ``max_version``):
  tests/core/test_capsules_export.py::test_max_version_chooses_the_capsule_kind.
- the dtype x pair matrix with 1-d data: tests/interop/test_native.py.

Not mirrored: the CUDA / pinned / XPU halves of the device and copy tests and the
cross-device moves that succeed (Paddle runs them only on GPU builds; this
machine and CI are CPU only).

Importing PaddlePaddle into a process that has loaded TensorFlow crashes it, and
the whole suite runs in one process: ``tests/conftest.py`` imports Paddle before
any test module when both are installed.
"""

from __future__ import annotations

import sys
import weakref

import numpy as np
import pytest
from needs import framework, needs

import tensorbridge as tb
from tensorbridge import _testing
from tensorbridge._core import inspect_capsule

paddle = framework("paddle")

#: The dtypes Paddle and tensorbridge share (Paddle's test lists all but the
#: float8 types in test_dlpack_dtype_and_place_consistency, and those in
#: test_dlpack_low_precision; bfloat16 it tests on GPU builds only).
DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
]

#: Small integers: exact in every dtype above, float8 included.
SOURCE = (np.arange(24) % 5).reshape(2, 3, 4)


def _want(dtype: str) -> np.ndarray:
    if dtype == "bool":
        return SOURCE != 0
    return SOURCE.astype(np.complex128 if dtype.startswith("complex") else np.float64)


def _paddle_values(x) -> np.ndarray:
    if str(x.dtype) in ("paddle.bool", "paddle.complex64", "paddle.complex128"):
        return x.numpy()
    return x.astype("float64").numpy()


def _our_values(t) -> np.ndarray:
    if t.dtype.name in ("bool", "complex64", "complex128"):
        return t.numpy()
    return t.astype("float64").numpy()


def _assert_cpu(x) -> None:
    assert x.place.is_cpu_place(), str(x.place)


# -- dtypes, places and shared memory ---------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_paddle_imports_our_tensor_twice_in_every_dtype(dtype):
    # Paddle: test_dlpack_dygraph, test_dlpack_tensor_larger_than_2dim,
    # test_dlpack_dtype_and_place_consistency, test_dlpack_low_precision,
    # test_to_dlpack_data_ptr_consistency: two imports of one tensor, through both
    # of Paddle's entry points, keep dtype, place and values and share the memory.
    src = tb.asarray(SOURCE, dtype=dtype)
    imports = [
        paddle.from_dlpack(src),
        paddle.utils.dlpack.from_dlpack(tb.to_dlpack(src)),
    ]
    for y in imports:
        assert str(y.dtype) == f"paddle.{dtype}"
        _assert_cpu(y)
        assert y.shape == [2, 3, 4]
        assert y.data_ptr() == src.data_ptr()
        np.testing.assert_array_equal(_paddle_values(y), _want(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_we_import_a_paddle_tensor_twice_in_every_dtype(dtype):
    # Paddle: the same tests, tensorbridge consuming: the tensor itself, a capsule
    # from paddle.to_dlpack, and asarray.
    x = paddle.to_tensor(SOURCE, dtype="float64").astype(dtype)
    imports = [tb.from_dlpack(x), tb.from_dlpack(paddle.to_dlpack(x)), tb.asarray(x)]
    for t in imports:
        assert t.dtype == dtype
        assert str(t.device) == "cpu"
        assert t.shape == (2, 3, 4)
        assert t.data_ptr() == x.data_ptr()
        np.testing.assert_array_equal(_our_values(t), _want(dtype))


def test_numpy_arrays_reach_paddle_through_to_dlpack():
    # Paddle: test_to_dlpack_from_ext_tensor (paddle.from_dlpack of a NumPy array
    # shares its memory) and TestRaiseError (paddle.to_dlpack refuses a NumPy
    # array). tensorbridge's to_dlpack takes any DLPack object (docs/design.md), so
    # the NumPy array reaches Paddle through a capsule of ours, still shared.
    for _ in range(2):
        a = np.random.default_rng(0).standard_normal((3, 5))
        y = paddle.utils.dlpack.from_dlpack(tb.to_dlpack(a))
        assert y.data_ptr() == a.__array_interface__["data"][0]
        np.testing.assert_array_equal(y.numpy(), a)


# -- lifetime -----------------------------------------------------------------------


def test_paddle_imports_keep_our_memory_alive():
    # Paddle: test_dlpack_deletion (Paddle issue 47171) and test_to_dlpack_for_loop
    # (issue 50120): capsules made in a loop, some never consumed, and imports that
    # outlive the exporting tensor.
    for i in range(4):
        src = tb.asarray(np.arange(15.0).reshape(3, 5) + i)
        unused = tb.to_dlpack(src)
        first = paddle.from_dlpack(src)
        del src, unused
        np.testing.assert_array_equal(first.numpy(), np.arange(15.0).reshape(3, 5) + i)


def test_our_memory_is_released_when_the_paddle_import_dies():
    # Paddle: test_dlpack_deletion, the other half: nothing is leaked.
    a = np.arange(15.0).reshape(3, 5)
    alive = weakref.ref(a)
    src = tb.from_dlpack(a)
    y = paddle.from_dlpack(src)
    del a, src
    assert alive() is not None
    assert y.numpy().sum() == 105.0
    del y
    assert alive() is None


@pytest.mark.xfail(
    strict=True,
    reason="Paddle never calls the deleter of one of two live imports of the same "
    "memory (a leak; NumPy and torch producers leak the same way)",
)
def test_our_memory_is_released_when_two_paddle_imports_die():
    # Paddle: test_dlpack_deletion (two imports of one tensor, then deleted).
    a = np.arange(15.0).reshape(3, 5)
    alive = weakref.ref(a)
    src = tb.from_dlpack(a)
    first = paddle.from_dlpack(src)
    second = paddle.utils.dlpack.from_dlpack(tb.to_dlpack(src))
    del a, src, first, second
    assert alive() is None


def test_our_imports_keep_paddle_memory_alive():
    # Paddle: test_dlpack_deletion, tensorbridge consuming.
    for i in range(4):
        x = paddle.to_tensor(np.arange(15.0).reshape(3, 5) + i)
        unused = paddle.to_dlpack(x)
        first = tb.from_dlpack(x)
        second = tb.from_dlpack(paddle.to_dlpack(x))
        del x, unused
        for t in (first, second):
            np.testing.assert_array_equal(t.numpy(), np.arange(15.0).reshape(3, 5) + i)


# -- writes, strides, 0-d and size-0 ------------------------------------------------


def test_writes_through_a_paddle_import_reach_our_tensor():
    # Paddle: test_to_dlpack_modification.
    src = tb.zeros((3, 5))
    first = paddle.from_dlpack(src)
    second = paddle.utils.dlpack.from_dlpack(tb.to_dlpack(src))
    first[1:2, 2:5] = 2.0
    want = np.zeros((3, 5))
    want[1, 2:5] = 2.0
    np.testing.assert_array_equal(src.numpy(), want)
    np.testing.assert_array_equal(second.numpy(), want)


def test_writes_through_our_import_reach_the_paddle_tensor():
    # Paddle: test_to_dlpack_modification, tensorbridge consuming.
    x = paddle.zeros([3, 5])
    t = tb.from_dlpack(x)
    t[1:2, 2:5] = 2.0
    want = np.zeros((3, 5), dtype=np.float32)
    want[1, 2:5] = 2.0
    np.testing.assert_array_equal(x.numpy(), want)


def test_paddle_keeps_the_strides_of_our_views():
    # Paddle: test_to_dlpack_strides_consistency (x[::2, ::2] of a 10x10 tensor).
    src = tb.arange(100, dtype="float32").reshape(10, 10)[::2, ::2]
    want = np.arange(100, dtype=np.float32).reshape(10, 10)[::2, ::2]
    for y in (paddle.from_dlpack(src), paddle.utils.dlpack.from_dlpack(tb.to_dlpack(src))):
        assert y.strides == [20, 2]
        assert y.data_ptr() == src.data_ptr()
        np.testing.assert_array_equal(y.numpy(), want)


def test_we_keep_the_strides_of_paddle_views():
    # Paddle: test_to_dlpack_strides_consistency, tensorbridge consuming.
    x = paddle.arange(100, dtype="float32").reshape([10, 10])[::2, ::2]
    for t in (tb.from_dlpack(x), tb.from_dlpack(paddle.to_dlpack(x))):
        assert t.strides == tuple(x.strides) == (20, 2)
        assert t.data_ptr() == x.data_ptr()
        np.testing.assert_array_equal(t.numpy(), x.numpy())


def test_zero_d_both_ways():
    # Paddle: test_to_dlpack_from_zero_dim.
    src = tb.asarray(1.5, dtype="float32")
    for y in (paddle.from_dlpack(src), paddle.utils.dlpack.from_dlpack(tb.to_dlpack(src))):
        assert y.shape == [] and y.numel().item() == 1
        assert y.data_ptr() == src.data_ptr()
        assert y.item() == 1.5
    x = paddle.to_tensor(2.5)
    for t in (tb.from_dlpack(x), tb.from_dlpack(paddle.to_dlpack(x)), tb.asarray(x)):
        assert t.shape == () and t.size == 1
        assert t.data_ptr() == x.data_ptr()
        assert t.tolist() == 2.5


def test_size_zero_both_ways():
    # Paddle: test_to_dlpack_from_zero_size.
    src = tb.zeros((0, 10))
    for y in (paddle.from_dlpack(src), paddle.utils.dlpack.from_dlpack(tb.to_dlpack(src))):
        assert y.shape == [0, 10] and y.numel().item() == 0
        assert y.data_ptr() == src.data_ptr()
    x = paddle.zeros([0, 10])
    for t in (tb.from_dlpack(x), tb.from_dlpack(paddle.to_dlpack(x)), tb.asarray(x)):
        assert t.shape == (0, 10) and t.size == 0
        assert t.data_ptr() == x.data_ptr()


@pytest.mark.parametrize("shape", [(3,), (), (0, 10)], ids=["1-d", "0-d", "size-0"])
def test_dlpack_device_both_ways(shape):
    # Paddle: TestDLPackDevice.test_dlpack_device, _zero_dim and _zero_size (CPU:
    # Paddle answers (kDLCPU, None)).
    from paddle.utils.dlpack import DLDeviceType

    ours = tb.zeros(shape)
    device_type, device_id = ours.__dlpack_device__()
    assert device_type == DLDeviceType.kDLCPU and device_id == 0
    _assert_cpu(paddle.from_dlpack(ours))
    x = paddle.zeros(list(shape))
    assert x.__dlpack_device__() == (DLDeviceType.kDLCPU, None)
    t = tb.from_dlpack(x)
    assert str(t.device) == "cpu"
    assert t.__dlpack_device__() == (tb.DLDeviceType.kDLCPU, 0)


# -- static graph mode --------------------------------------------------------------


def test_static_mode_dense_tensors_both_ways():
    # Paddle: test_dlpack_static (a DenseTensor made in static graph mode).
    from paddle import base

    want = [[1], [2], [3], [4]]
    paddle.enable_static()
    try:
        dense = base.create_lod_tensor(np.array(want, dtype=np.int64), [[1, 3]], base.CPUPlace())
        t = tb.from_dlpack(paddle.utils.dlpack.to_dlpack(dense))
        assert t.dtype == "int64" and t.tolist() == want
        src = tb.asarray(want)
        for y in (
            paddle.utils.dlpack.from_dlpack(src),
            paddle.utils.dlpack.from_dlpack(tb.to_dlpack(src)),
        ):
            assert isinstance(y, base.core.DenseTensor)
            assert np.array(y).tolist() == want
    finally:
        paddle.disable_static()


# -- versioned capsules ----------------------------------------------------------------


@pytest.mark.parametrize("max_version", [None, (0, 8), (1, 0), (1, 1), (1, 3)])
def test_paddle_reads_each_capsule_kind_we_export(max_version):
    # Paddle: TestVersioned.test_from_dlpack_versioned (and the legacy kinds).
    src = tb.asarray([1, 2, 3])
    y = paddle.from_dlpack(src.__dlpack__(max_version=max_version))
    assert y.data_ptr() == src.data_ptr()
    assert y.tolist() == [1, 2, 3]


@pytest.mark.parametrize(
    ("max_version", "name"),
    [
        (None, "dltensor"),
        ((0, 8), "dltensor"),
        ((1, 0), "dltensor_versioned"),
        ((1, 1), "dltensor_versioned"),
    ],
)
def test_we_read_each_capsule_kind_paddle_exports(max_version, name):
    # Paddle: TestVersioned.test_to_dlpack_versioned and test_from_dlpack_versioned,
    # tensorbridge consuming Paddle's capsules.
    x = paddle.to_tensor([1, 2, 3])
    capsule = x.__dlpack__(max_version=max_version)
    assert inspect_capsule(capsule)["name"] == name
    t = tb.from_dlpack(capsule)
    assert _testing.capsule_name(capsule) == f"used_{name}"
    assert t.data_ptr() == x.data_ptr()
    assert t.tolist() == [1, 2, 3]


# -- copy semantics -------------------------------------------------------------------


@pytest.mark.parametrize("copy", [None, False, True])
def test_dl_device_cpu_and_copy_in_our_export(copy):
    # Paddle: TestCopySemanticDLPackProtocol.test_dlpack_same_place_cpu,
    # _cpu_force_copy and _cpu_disallow_copy.
    src = tb.asarray([1, 2, 3])
    capsule = src.__dlpack__(max_version=(1, 3), dl_device=(tb.DLDeviceType.kDLCPU, 0), copy=copy)
    y = paddle.from_dlpack(capsule)
    assert (y.data_ptr() == src.data_ptr()) is (copy is not True)
    assert y.tolist() == [1, 2, 3]


@pytest.mark.parametrize("copy", [None, False])
def test_our_export_to_another_device_is_refused(copy):
    # Paddle: test_dlpack_cross_device_cpu_to_cuda_disallow_copy (BufferError);
    # tensorbridge moves no data between devices, so it refuses with copy=None too.
    src = tb.asarray([1, 2, 3])
    with pytest.raises(
        BufferError,
        match=r"__dlpack__\(\): cannot export cpu memory to "
        r"dl_device=cuda:0",
    ):
        src.__dlpack__(max_version=(1, 3), dl_device=(tb.DLDeviceType.kDLCUDA, 0), copy=copy)


@pytest.mark.parametrize("copy", [None, False, True])
def test_paddle_from_dlpack_copy_of_our_tensor(copy):
    # Paddle: TestCopySemanticFromDLPack.test_from_dlpack_same_place, _force_copy
    # and _disallow_copy.
    src = tb.asarray([1, 2, 3])
    y = paddle.from_dlpack(src, copy=copy)
    assert (y.data_ptr() == src.data_ptr()) is (copy is not True)
    assert y.tolist() == [1, 2, 3]


@pytest.mark.parametrize("copy", [None, False, True])
@pytest.mark.parametrize("api", ["from_dlpack", "asarray"])
def test_our_copy_of_a_paddle_tensor(api, copy):
    # Paddle: TestCopySemanticFromDLPack.test_from_dlpack_same_place, _force_copy
    # and _disallow_copy, tensorbridge consuming.
    x = paddle.to_tensor([1.0, 2.0, 3.0])
    t = getattr(tb, api)(x, copy=copy)
    assert (t.data_ptr() == x.data_ptr()) is (copy is not True)
    assert t.tolist() == [1.0, 2.0, 3.0]
    if copy:
        x[0] = -1.0
        assert t.tolist() == [1.0, 2.0, 3.0]


def test_we_refuse_a_move_without_a_copy():
    # Paddle: TestCopySemanticFromDLPack.test_from_dlpack_cross_device_disallow_copy.
    x = paddle.to_tensor([1.0, 2.0, 3.0])
    # Refused before Paddle is asked: both a BufferError and a ValueError (the
    # standard's copy= and device= texts disagree).
    with pytest.raises(
        BufferError,
        match=r"from_dlpack\(\): copy=False, but moving "
        r"paddle\.Tensor's cpu data to cuda:0 needs a copy",
    ):
        tb.from_dlpack(x, device="cuda", copy=False)
    with pytest.raises(ValueError, match="needs a copy"):
        tb.from_dlpack(x, device="cuda", copy=False)
    with pytest.raises(
        ValueError,
        match=r"asarray\(\): copy=False, but moving cpu data to "
        r"cuda:0 needs a copy",
    ):
        tb.asarray(x, device="cuda", copy=False)


@pytest.mark.parametrize("copy", [None, False, True])
def test_we_read_paddle_capsules_made_for_the_cpu(copy):
    # Paddle: TestCopySemanticDLPackProtocol, Paddle producing with
    # dl_device=(kDLCPU, 0) and each copy= value.
    x = paddle.to_tensor([1.0, 2.0, 3.0])
    capsule = x.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=copy)
    t = tb.from_dlpack(capsule)
    assert (t.data_ptr() == x.data_ptr()) is (copy is not True)
    assert t.tolist() == [1.0, 2.0, 3.0]


# -- import order -----------------------------------------------------------------------


@needs("tensorflow")
def test_tensorbridge_refuses_to_import_paddle_after_tensorflow():
    # Not a Paddle check: the crash this module works around. tensorbridge must
    # raise ImportOrderError (an ImportError naming both and the fix) instead.
    import subprocess
    import textwrap

    code = textwrap.dedent(
        """
        import sys
        import tensorflow
        import tensorbridge as tb
        try:
            tb.convert(tb.asarray([1.0]), "paddle")
        except ImportError as exc:
            assert isinstance(exc, tb.ImportOrderError), type(exc)
            assert "paddle" not in sys.modules
            print(str(exc).replace("\\n", " "))
        else:
            sys.exit("convert imported paddle after tensorflow")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-1000:]
    message = result.stdout.strip().splitlines()[-1]
    assert "paddle" in message.lower() and "tensorflow" in message.lower()
