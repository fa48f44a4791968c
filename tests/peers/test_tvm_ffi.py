# SPDX-License-Identifier: Apache-2.0
"""What tvm-ffi's tensor and DLPack exchange-API suites check of tvm-ffi, asked of
tensorbridge in both roles.

The peer suites are apache/tvm-ffi ``tests/python/test_tensor.py`` and
``tests/python/test_dlpack_exchange_api.py``. Where they use PyTorch as the
framework on the other side of tvm-ffi, a tensorbridge Tensor takes its place:
``tvm_ffi.from_dlpack(tensor)`` and tvm-ffi's automatic conversion of arguments read
our tensors (through our C exchange table), and its return path builds Tensors
through our table's ``managed_tensor_to_py_object_no_sync``; ``tb.from_dlpack`` reads
tvm-ffi tensors. The exchange-API check, a C++ extension in the peer, is a ctypes
C-ABI consumer of ``tb.Tensor.__dlpack_c_exchange_api__`` here. GPU checks use
tensorbridge tensors of fake CUDA/ROCm memory (metadata only). See COVERAGE-B.md.
"""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from dlpack_ctypes import (
    VERSIONED_DELETER,
    Device,
    DLTensor,
    DType,
    ManagedTensorVersioned,
    Version,
)
from needs import framework

import tensorbridge as tb
from tensorbridge import _testing

tvm_ffi = framework("tvm_ffi")

FAKE_ADDRESS = 0x7F0000043000  # device memory: never dereferenced


def _fake_device_tensor(shape, device, dtype=(2, 32, 1)):
    strides = tuple(int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
    capsule, _ = _testing.make_capsule(
        FAKE_ADDRESS, shape=shape, strides=strides, dtype=dtype, device=device
    )
    return tb.from_dlpack(capsule, stream=-1)


def _echo():
    return tvm_ffi.get_global_func("testing.echo")


# --------------------------------------------------------------------------
# tests/python/test_tensor.py
# --------------------------------------------------------------------------


def test_tensor_attributes_both_ways():
    """Mirrors test_tensor.py::test_tensor_attributes: shape, ndim, element count,
    sizes, contiguity, strides, dtype and device of an int16 (10, 8, 4, 2) array,
    and the values after the round trip, with tensorbridge on both sides of
    tvm-ffi."""
    data = np.arange(640, dtype="int16").reshape(10, 8, 4, 2)
    t = tb.from_dlpack(data)  # consumer role (of NumPy)
    assert (t.shape, t.ndim, t.size, t.strides) == ((10, 8, 4, 2), 4, 640, (64, 8, 2, 1))
    assert t.shape[0] == 10 and t.shape[-1] == 2 and t.is_contiguous()
    assert t.dtype is tb.int16
    assert t.__dlpack_device__() == (tb.DLDeviceType.kDLCPU, 0)

    x = tvm_ffi.from_dlpack(t)  # producer role
    assert isinstance(x, tvm_ffi.Tensor)
    assert x.shape == (10, 8, 4, 2) and x.ndim == 4 and x.numel() == 640
    assert x.size(0) == 10 and x.size(-1) == 2
    assert x.is_contiguous() and x.strides == (64, 8, 2, 1)
    assert x.dtype == tvm_ffi.dtype("int16")
    assert x.device.dlpack_device_type() == tvm_ffi.DLDeviceType.kDLCPU
    assert x.device.index == 0
    assert x.data_ptr() == data.ctypes.data

    back = tb.from_dlpack(x)  # consumer role (of tvm-ffi)
    assert (back.shape, back.strides, back.dtype) == (t.shape, t.strides, t.dtype)
    assert str(back.device) == "cpu" and back.data_ptr() == data.ctypes.data
    np.testing.assert_equal(np.from_dlpack(back), data)
    np.testing.assert_equal(np.from_dlpack(x), data)


def test_tensor_data_ptr_both_ways():
    """Mirrors test_tensor.py::test_tensor_data_ptr: data_ptr() is the address of
    the first element, for a whole array and for an offset view, whichever side
    made the view; tvm-ffi's data_ptr adds byte_offset, so a Tensor imported with
    a byte_offset must arrive at the same address."""
    data = np.arange(8, dtype="int32")
    t = tb.asarray(data)
    assert tvm_ffi.from_dlpack(t).data_ptr() == data.ctypes.data
    view = t[2:]
    assert tvm_ffi.from_dlpack(view).data_ptr() == view.data_ptr() == data.ctypes.data + 8
    assert tb.from_dlpack(tvm_ffi.from_dlpack(data[2:])).data_ptr() == data[2:].ctypes.data

    capsule, _ = _testing.make_capsule(
        data, shape=(5,), strides=(1,), dtype=(0, 32, 1), byte_offset=12
    )
    offset = tb.from_dlpack(capsule)
    x = tvm_ffi.from_dlpack(offset)
    assert x.data_ptr() == offset.data_ptr() == data.ctypes.data + 12
    assert np.from_dlpack(x).tolist() == [3, 4, 5, 6, 7]


def test_empty_tensor_is_contiguous_both_ways():
    """Mirrors test_tensor.py::test_empty_tensor_is_contiguous: an empty (4, 0, 4)
    array is contiguous whatever strides its producer reports (NumPy 2.3+ reports
    (0, 0, 0))."""
    t = tb.from_dlpack(np.zeros((4, 0, 4), dtype="int16"))
    assert t.is_contiguous()
    capsule, _ = _testing.make_capsule(0, shape=(4, 0, 4), strides=(0, 0, 0), dtype=(0, 16, 1))
    odd = tb.from_dlpack(capsule)
    assert odd.is_contiguous()
    for source in (t, odd, tb.zeros((4, 0, 4), dtype="int16")):
        x = tvm_ffi.from_dlpack(source)
        assert x.shape == (4, 0, 4) and x.is_contiguous()
        assert tb.from_dlpack(x).is_contiguous()


def test_non_contiguous_tensor_attributes_both_ways():
    """Mirrors test_tensor.py::test_non_contiguous_tensor_attributes: the slice
    [1:3, :, 1:3] of a (4, 4, 4) array has shape (2, 4, 2), 16 elements, strides
    (16, 4, 1) and is not contiguous."""
    data = np.arange(64, dtype="int16").reshape(4, 4, 4)
    sliced = data[1:3, :, 1:3]
    for t in (tb.from_dlpack(sliced), tb.asarray(data)[1:3, :, 1:3]):
        assert t.shape == (2, 4, 2) and t.size == 16 and t.strides == (16, 4, 1)
        assert not t.is_contiguous()
        x = tvm_ffi.from_dlpack(t)
        assert isinstance(x, tvm_ffi.Tensor)
        assert x.shape == (2, 4, 2) and x.numel() == 16
        assert x.size(0) == 2 and x.size(-1) == 2
        assert not x.is_contiguous() and x.strides == (16, 4, 1)
        assert x.data_ptr() == sliced.ctypes.data
        np.testing.assert_equal(np.from_dlpack(x), sliced)
    back = tb.from_dlpack(tvm_ffi.from_dlpack(sliced))
    assert back.shape == (2, 4, 2) and back.strides == (16, 4, 1)
    assert not back.is_contiguous()
    np.testing.assert_equal(np.from_dlpack(back), sliced)


def test_tensor_auto_dlpack():
    """Mirrors test_tensor.py::test_tensor_auto_dlpack: a framework tensor passed to
    an FFI function comes back as a tensor of that framework sharing the memory,
    with its dtype, shape and device (here: tensorbridge, through our exchange
    table in both directions)."""
    x = tb.arange(128, dtype="int64")
    y = _echo()(x)
    assert type(y) is tb.Tensor
    assert y.data_ptr() == x.data_ptr()
    assert (y.dtype, y.shape, y.device) == (x.dtype, x.shape, x.device)
    np.testing.assert_equal(y.numpy(), x.numpy())
    y[0] = -5  # one memory
    assert x[0].item() == -5


def test_tensor_auto_dlpack_with_error():
    """Mirrors test_tensor.py::test_tensor_auto_dlpack_with_error: a Python function
    called through the FFI with a tensor argument raises, and the error reaches the
    caller (the argument path set up our allocator first); afterwards the FFI still
    works with our tensors."""

    def raise_error(x):
        raise ValueError("error XYZ")

    f = tvm_ffi.convert(raise_error)
    x = tb.arange(128, dtype="int64")
    with pytest.raises(ValueError, match="error XYZ"):
        f(x)
    assert type(_echo()(x)) is tb.Tensor


def test_rocm_device_both_ways():
    """Mirrors test_tensor.py::test_tensor_from_pytorch_rocm: data on a ROCm device
    reaches an FFI function as device type 'rocm' (PyTorch says 'cuda' for it),
    and comes back as ROCm data."""

    @tvm_ffi.register_global_func("tensorbridge_peers.check_device", override=True)
    def _check_device(x):
        return x.device.type

    t = _fake_device_tensor((128,), (10, 0))
    assert tvm_ffi.get_global_func("tensorbridge_peers.check_device")(t) == "rocm"
    x = tvm_ffi.from_dlpack(t)
    assert x.device.type == "rocm" and x.data_ptr() == FAKE_ADDRESS
    back = tb.from_dlpack(x)
    assert str(back.device) == "rocm:0" and back.data_ptr() == FAKE_ADDRESS


def test_optional_tensor_view():
    """Mirrors test_tensor.py::test_optional_tensor_view: an FFI function taking an
    optional tensor view sees None as empty and a tensor as present."""
    has_value = tvm_ffi.get_global_func("testing.optional_tensor_view_has_value")
    assert not has_value(None)
    assert has_value(tb.zeros(128, dtype="float32"))
    assert has_value(tb.zeros(128, dtype="float32")[::2])


# --------------------------------------------------------------------------
# tests/python/test_dlpack_exchange_api.py, as a ctypes C-ABI consumer
# --------------------------------------------------------------------------


_Version, _Device, _DType, _DLTensor = Version, Device, DType, DLTensor
_Managed, _DELETER = ManagedTensorVersioned, VERSIONED_DELETER

_SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
# The allocator and the stream query are pure C (no GIL needed): CFUNCTYPE releases
# the GIL around them. The PyObject functions need the GIL: PYFUNCTYPE keeps it.
_ALLOCATOR = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.POINTER(_DLTensor),
    ctypes.POINTER(ctypes.POINTER(_Managed)),
    ctypes.c_void_p,
    _SET_ERROR,
)
_FROM_PY = ctypes.PYFUNCTYPE(
    ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.POINTER(_Managed))
)
_TO_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.POINTER(_Managed), ctypes.POINTER(ctypes.c_void_p))
_DLTENSOR_FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(_DLTensor))
_STREAM = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p)
)


class _Header(ctypes.Structure):
    pass


_Header._fields_ = [("version", _Version), ("prev_api", ctypes.POINTER(_Header))]


class _ExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("header", _Header),
        ("managed_tensor_allocator", _ALLOCATOR),
        ("managed_tensor_from_py_object_no_sync", _FROM_PY),
        ("managed_tensor_to_py_object_no_sync", _TO_PY),
        ("dltensor_from_py_object_no_sync", _DLTENSOR_FROM_PY),
        ("current_work_stream", _STREAM),
    ]


# Private prototypes: other code (pydlpack) re-types ctypes.pythonapi's functions.
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_decref = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(("Py_DecRef", ctypes.pythonapi))


def _is_null(fn) -> bool:
    return ctypes.cast(fn, ctypes.c_void_p).value is None


def _shape(dl: _DLTensor) -> tuple[int, ...]:
    return tuple(dl.shape[i] for i in range(dl.ndim))


def test_exchange_api_through_the_c_abi():
    """Mirrors test_dlpack_exchange_api.py::test_dlpack_exchange_api (run there on
    PyTorch's table from a C++ extension), on tensorbridge's table from ctypes:
    1. the capsule holds a non-NULL table of version 1.3 with all five functions;
    2. the allocator, called with a NULL error context and NULL SetError, makes a
       (3, 4, 5) float32 CPU tensor from a prototype with NULL strides;
    3. managed_tensor_from_py_object_no_sync gives a 1.3 tensor of (2, 3, 4) float32
       with data;
    4. managed_tensor_to_py_object_no_sync of that gives back a Tensor of the same
       shape and dtype;
    5. dltensor_from_py_object_no_sync describes the tensor;
    6. current_work_stream answers for the CPU."""
    capsule = tb.Tensor.__dlpack_c_exchange_api__
    address = _capsule_pointer(capsule, b"dlpack_exchange_api")
    assert address
    api = _ExchangeAPI.from_address(address)
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    for field, _ in _ExchangeAPI._fields_[1:]:
        assert not _is_null(getattr(api, field)), field

    # 2. managed_tensor_allocator
    dims = (ctypes.c_int64 * 3)(3, 4, 5)
    proto = _DLTensor(
        data=None,
        device=_Device(1, 0),
        ndim=3,
        dtype=_DType(2, 32, 1),
        shape=dims,
        strides=None,
        byte_offset=0,
    )
    out = ctypes.POINTER(_Managed)()
    no_set_error = ctypes.cast(None, _SET_ERROR)
    assert (
        api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out), None, no_set_error)
        == 0
    )
    assert out
    dl = out.contents.dl_tensor
    assert dl.ndim == 3 and _shape(dl) == (3, 4, 5)
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (2, 32, 1)
    assert dl.device.device_type == 1 and dl.data
    if not _is_null(out.contents.deleter):
        out.contents.deleter(out)

    # 3. managed_tensor_from_py_object_no_sync
    tensor = tb.arange(24, dtype="float32").reshape(2, 3, 4)
    refs = sys.getrefcount(tensor)
    managed = ctypes.POINTER(_Managed)()
    assert api.managed_tensor_from_py_object_no_sync(tensor, ctypes.byref(managed)) == 0
    assert managed
    m = managed.contents
    assert (m.version.major, m.version.minor) == (1, 3)
    assert m.dl_tensor.ndim == 3 and _shape(m.dl_tensor) == (2, 3, 4)
    assert (m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits) == (2, 32)
    assert m.dl_tensor.data
    m.deleter(managed)
    assert sys.getrefcount(tensor) == refs  # the export released the Tensor

    # 4. managed_tensor_to_py_object_no_sync(managed_tensor_from_py_object_no_sync(x))
    managed = ctypes.POINTER(_Managed)()
    assert api.managed_tensor_from_py_object_no_sync(tensor, ctypes.byref(managed)) == 0
    result = ctypes.c_void_p()
    assert api.managed_tensor_to_py_object_no_sync(managed, ctypes.byref(result)) == 0
    assert result.value
    made = ctypes.cast(result.value, ctypes.py_object).value
    _decref(result.value)  # the table handed over a new reference: it is ours now
    assert type(made) is tb.Tensor
    assert made.shape == (2, 3, 4) and made.dtype is tb.float32
    assert made.data_ptr() == tensor.data_ptr()
    del made
    gc.collect()
    assert sys.getrefcount(tensor) == refs

    # 5. dltensor_from_py_object_no_sync
    view = _DLTensor()
    assert api.dltensor_from_py_object_no_sync(tensor, ctypes.byref(view)) == 0
    assert view.ndim == 3 and _shape(view) == (2, 3, 4)
    assert (view.dtype.code, view.dtype.bits) == (2, 32)
    assert view.data

    # 6. current_work_stream for the CPU
    stream = ctypes.c_void_p(1)
    assert api.current_work_stream(1, 0, ctypes.byref(stream)) == 0


def test_allocator_failure_with_null_set_error():
    """Extends test_dlpack_exchange_api.py::test_dlpack_exchange_api's allocator call
    (NULL error context, NULL SetError) to a prototype the allocator must refuse
    (CUDA memory): a consumer that passes no SetError, as the peer's own test does,
    must get -1, not a crash. The standard is silent on a NULL SetError. Run in a
    subprocess, as it can crash."""
    code = textwrap.dedent(
        f"""
        import ctypes, sys
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parent.parent)!r}]
        import tensorbridge as tb
        import test_tvm_ffi as m
        api = m._ExchangeAPI.from_address(
            m._capsule_pointer(tb.Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api"))
        dims = (ctypes.c_int64 * 1)(3)
        proto = m._DLTensor(data=None, device=m._Device(2, 0), ndim=1,
                            dtype=m._DType(2, 32, 1), shape=dims, strides=None)
        out = ctypes.POINTER(m._Managed)()
        rc = api.managed_tensor_allocator(
            ctypes.byref(proto), ctypes.byref(out), None, ctypes.cast(None, m._SET_ERROR))
        print(rc, bool(out))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["-1", "False"]


@pytest.mark.parametrize("shape", [(512,), (512, 512), (2, 3, 4)])
def test_gpu_tensor_metadata(shape):
    """Mirrors test_dlpack_exchange_api.py::test_dlpack_exchange_api_gpu_tensor_metadata:
    float16 tensors on a CUDA device keep shape and dtype in tvm_ffi.from_dlpack, and
    echo returns a tensor of the same shape, dtype and device."""
    t = _fake_device_tensor(shape, (2, 0), dtype=(2, 16, 1))
    x = tvm_ffi.from_dlpack(t)
    assert x.shape == shape and x.dtype == tvm_ffi.dtype("float16")
    assert x.device.type == "cuda" and x.data_ptr() == FAKE_ADDRESS
    echoed = _echo()(t)
    assert type(echoed) is tb.Tensor
    assert echoed.shape == shape and echoed.dtype is tb.float16
    assert echoed.device == t.device and echoed.data_ptr() == FAKE_ADDRESS


def test_from_dlpack_paths():
    """Mirrors test_dlpack_exchange_api.py::test_from_dlpack_torch (tvm_ffi.from_dlpack
    keeps shape and dtype), through each path tvm-ffi takes: our exchange table,
    a legacy capsule and a versioned capsule."""
    t = tb.arange(24, dtype="float32").reshape(2, 3, 4)
    for source in (t, tb.to_dlpack(t), t.__dlpack__(max_version=(1, 3))):
        x = tvm_ffi.from_dlpack(source)
        assert x.shape == (2, 3, 4) and x.dtype == tvm_ffi.float32
        assert x.data_ptr() == t.data_ptr()
