# SPDX-License-Identifier: Apache-2.0
"""What NumPy's DLPack suite checks of NumPy, asked of tensorbridge in both roles.

The peer suite is numpy/numpy ``numpy/_core/tests/test_dlpack.py``. Producer role:
NumPy (``np.from_dlpack``), or NumPy through a wrapper that only knows the old
``__dlpack__(stream=None)`` signature, reads a ``tb.Tensor``. Consumer role:
``tb.from_dlpack``/``tb.asarray`` read NumPy arrays (also an ndarray subclass with
the old signature). Checks that older tests already make are not repeated here;
tests/peers/COVERAGE.md maps every peer check to the test that covers it.
"""

from __future__ import annotations

import operator
import sys

import numpy as np
import pytest

import tensorbridge as tb
from tensorbridge._core import FLAG_IS_COPIED, FLAG_READ_ONLY, inspect_capsule

NUMPY_DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


class OldSignatureArray(np.ndarray):
    """An ndarray whose __dlpack__ predates max_version/dl_device/copy (DLPack 0.x)."""

    def __dlpack__(self, stream=None):
        return np.ndarray.__dlpack__(self, stream=stream)


class OldSignatureTensor:
    """A producer of a tb.Tensor that only offers the old ``__dlpack__(stream=None)``."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, stream=None):
        return self.tensor.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def _sample(dtype, n=5):
    """n values of a NumPy dtype (bool alternates, so both values occur)."""
    values = np.arange(n)
    return (values % 2 == 0) if dtype == "bool" else values.astype(dtype)


def _read_only(array):
    array = np.array(array)
    array.flags.writeable = False
    return array


# --------------------------------------------------------------------------
# References held by capsules and imports
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_version", "name"),
    [
        ((0, 0), "dltensor"),
        (None, "dltensor"),
        ((1, 0), "dltensor_versioned"),
        ((100, 3), "dltensor_versioned"),
    ],
)
def test_an_unconsumed_capsule_holds_one_reference(max_version, name):
    """Mirrors TestDLPack.test_dunder_dlpack_refcount: whatever max_version asks for
    (a major version far beyond ours included), the capsule holds exactly one
    reference to the exporting tensor and drops it when it dies."""
    t = tb.arange(5)
    capsule = t.__dlpack__(max_version=max_version)
    assert inspect_capsule(capsule)["name"] == name
    held = sys.getrefcount(t)
    del capsule
    assert held - sys.getrefcount(t) == 1


def test_an_unconsumed_capsule_of_a_read_only_0d_tensor_holds_one_reference():
    """Mirrors TestScalarDLPack.test_dunder_dlpack_refcount (a read-only 0-d value,
    as NumPy scalars are, exported as a versioned capsule)."""
    t = tb.from_dlpack(_read_only(2.0))
    capsule = t.__dlpack__(max_version=(1, 0))
    assert inspect_capsule(capsule)["flags"] == FLAG_READ_ONLY
    held = sys.getrefcount(t)
    del capsule
    assert held - sys.getrefcount(t) == 1


@pytest.mark.parametrize("old_signature", [False, True], ids=["ndarray", "old-signature"])
def test_an_import_holds_one_reference_to_the_array(old_signature):
    """Mirrors TestDLPack.test_from_dlpack_refcount, tensorbridge consuming: the
    imported tensor keeps the array alive with one reference (through NumPy's
    capsule for the old-signature subclass), released with the tensor."""
    a = np.arange(5.0)
    if old_signature:
        a = a.view(OldSignatureArray)
    t = tb.from_dlpack(a)
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    held = sys.getrefcount(a)
    del t
    assert held - sys.getrefcount(a) == 1


@pytest.mark.parametrize("old_signature", [False, True], ids=["versioned", "old-signature"])
def test_a_numpy_import_holds_one_reference_to_the_tensor(old_signature):
    """Mirrors TestDLPack.test_from_dlpack_refcount, tensorbridge producing: NumPy's
    array keeps the tensor alive with exactly one reference."""
    t = tb.arange(5, dtype="float64")
    a = np.from_dlpack(OldSignatureTensor(t) if old_signature else t)
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    held = sys.getrefcount(t)
    del a
    assert held - sys.getrefcount(t) == 1


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_a_capsule_dropped_while_an_exception_propagates(max_version):
    """Mirrors TestDLPack.test_dlpack_destructor_exception. The unconsumed capsule
    is freed while the TypeError is already set (the interpreter drops the map and
    its list as it unwinds); the destructor must leave that exception as it is and
    still release the tensor."""
    t = tb.arange(5, dtype="float64")
    before = sys.getrefcount(t)
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
        list(map(operator.index, [t.__dlpack__(max_version=max_version)]))
    assert sys.getrefcount(t) == before


# --------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------


def test_copy_argument_that_is_an_array_is_a_type_error():
    """Mirrors TestDLPack.test_dunder_dlpack_copy (copy=np.array([1, 2, 3]), whose
    truth value is ambiguous): refused as a bad argument in both roles, without
    asking the array for its truth value."""
    t = tb.arange(5)
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        t.__dlpack__(copy=np.array([1, 2, 3]))
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        tb.from_dlpack(np.arange(5), copy=np.array([1, 2, 3]))


# --------------------------------------------------------------------------
# What NumPy cannot export, tensorbridge must refuse as BufferError
# --------------------------------------------------------------------------


@pytest.mark.parametrize("via", ["from_dlpack", "asarray"])
def test_strides_that_are_not_whole_elements_are_refused(via):
    """Mirrors TestDLPack.test_strides_not_multiple_of_itemsize: an int32 field of
    a 5-byte record (stride 5 bytes) cannot be described in elements."""
    records = np.zeros(5, dtype=[("int", np.int32), ("char", np.int8)])
    with pytest.raises(BufferError, match="multiple of itemsize"):
        getattr(tb, via)(records["int"])


@pytest.mark.parametrize("via", ["from_dlpack", "asarray"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: np.asarray(np.datetime64("2021-05-27")),
        lambda: np.array(["12", "23"]),
        lambda: np.array([b"a"], dtype="S1"),
    ],
    ids=["datetime64", "str", "bytes"],
)
def test_dtypes_without_a_dlpack_code_are_refused(make, via):
    """Mirrors TestDLPack.test_invalid_dtype, TestScalarDLPack.test_invalid_dtype and
    the unregistered-dtype refusal in TestRegisterDlpackDtype.test_register_conflict."""
    # from_dlpack passes NumPy's own refusal on; asarray names the dtype and the fix.
    match = "only supports signed/unsigned integers" if via == "from_dlpack" else "no DLPack"
    with pytest.raises(BufferError, match=match):
        getattr(tb, via)(make())


def test_byte_swapped_arrays_are_refused_by_from_dlpack_and_copied_by_asarray():
    """Mirrors TestDLPack.test_invalid_byte_swapping (from_dlpack, as a consumer); asarray
    copies such data to native order, as numpy.asarray(x, dtype=native) would."""
    swapped = np.arange(5, dtype=np.dtype("=i8").newbyteorder())
    with pytest.raises(BufferError, match="native byte order"):
        tb.from_dlpack(swapped)
    assert tb.asarray(swapped).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="native byte order"):
        tb.asarray(swapped, copy=False)


# --------------------------------------------------------------------------
# Dtypes and layouts
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_dtypes_pass_through_an_old_signature_numpy_export(dtype):
    """Mirrors TestDLPack.test_dtype_passthrough[OldDLPack], tensorbridge consuming:
    the legacy capsule of an old-signature ndarray keeps dtype, values and memory."""
    a = _sample(dtype).view(OldSignatureArray)
    t = tb.from_dlpack(a)
    assert t.dtype == dtype
    assert t.data_ptr() == a.ctypes.data
    assert t.tolist() == a.tolist()


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_dtypes_pass_through_our_legacy_export_into_numpy(dtype):
    """Mirrors TestDLPack.test_dtype_passthrough[OldDLPack] and test_writeable,
    tensorbridge producing through the old signature: NumPy gets the dtype, the
    values and our memory, read-only (NumPy's rule for legacy capsules)."""
    t = tb.asarray(_sample(dtype).tolist(), dtype=dtype)
    a = np.from_dlpack(OldSignatureTensor(t))
    assert a.dtype == np.dtype(dtype)
    assert a.tolist() == t.tolist()
    assert a.__array_interface__["data"][0] == t.data_ptr()
    assert not a.flags.writeable


@pytest.mark.parametrize("ndim", [0, 1, 2, 8, 9, 16, 32, 33, 64])
def test_many_dimensions_both_ways(ndim):
    """Mirrors TestDLPack.test_higher_dims (ndim 0..32), up to NumPy's limit of 64
    (9 and up leave tensorbridge's inline shape storage)."""
    shape = (1,) * ndim
    assert tb.from_dlpack(np.zeros(shape)).shape == shape
    assert tb.asarray(np.zeros(shape)).shape == shape
    t = tb.zeros(shape, dtype="float64")
    assert np.from_dlpack(t).shape == shape
    assert np.from_dlpack(OldSignatureTensor(t)).shape == shape


def test_size_one_dimensions_with_odd_strides_both_ways():
    """Mirrors TestDLPack.test_size1dims_arrays: a size-1 dimension whose byte
    stride is not a whole float64 (it never moves, so it does not matter)."""
    x = np.ndarray(
        shape=(10, 5, 1), dtype="f8", buffer=np.arange(1000, dtype=np.uint8), strides=(8, 80, 4)
    )
    for t in (tb.from_dlpack(x), tb.asarray(x)):
        assert t.shape == (10, 5, 1)
        assert t.data_ptr() == x.ctypes.data
        np.testing.assert_array_equal(np.asarray(t), x)
        np.testing.assert_array_equal(np.from_dlpack(t), x)


def test_dlpack_device_of_imports_views_and_0d():
    """Mirrors TestDLPack.test_dlpack_device and TestScalarDLPack.test_dlpack_device."""
    t = tb.from_dlpack(np.arange(5))
    for x in (t, t[::2], tb.asarray(np.arange(5))[1:], tb.from_dlpack(np.array(2.0))):
        assert x.__dlpack_device__() == (1, 0)
    assert np.from_dlpack(t[::2]).__dlpack_device__() == (1, 0)


# --------------------------------------------------------------------------
# copy= and read-only data
# --------------------------------------------------------------------------


def test_copy_keyword_both_ways():
    """Mirrors TestDLPack.test_copy: shared for copy=None/False, private for True."""
    a = np.arange(5)
    assert np.may_share_memory(a, np.asarray(tb.from_dlpack(a)))
    assert np.may_share_memory(a, np.asarray(tb.from_dlpack(a, copy=False)))
    copied = tb.from_dlpack(a, copy=True)
    assert not np.may_share_memory(a, np.asarray(copied))
    assert copied.tolist() == a.tolist()

    t = tb.arange(5)
    assert np.from_dlpack(t).__array_interface__["data"][0] == t.data_ptr()
    assert np.from_dlpack(t, copy=False).__array_interface__["data"][0] == t.data_ptr()
    private = np.from_dlpack(t, copy=True)
    assert private.__array_interface__["data"][0] != t.data_ptr()
    assert private.tolist() == t.tolist() and private.flags.writeable


@pytest.mark.parametrize(
    "dtype", ["bool", "uint8", "int32", "int64", "float16", "float32", "float64", "complex128"]
)
def test_read_only_0d_values_both_ways(dtype):
    """Mirrors TestScalarDLPack.test_dlpack, test_dlpack_copy and
    test_dlpack_read_only. NumPy 2.4's scalars have no __dlpack__, so read-only 0-d
    arrays and tensors play them: copy=None/False keep the value, the dtype and
    read-only memory; copy=True gives a writable value of its own."""
    source = _read_only(np.array(2, dtype=dtype))
    value = source.item()
    t = tb.from_dlpack(source)
    assert t.shape == () and t.dtype == dtype and t.item() == source.item()
    assert t.readonly
    assert tb.from_dlpack(source, copy=False).readonly
    mine = tb.from_dlpack(source, copy=True)
    assert not mine.readonly and mine.item() == source.item()
    mine[()] = 0
    assert source.item() == value and mine.item() == 0

    shared = np.from_dlpack(t, copy=False)
    assert shared.shape == () and shared.dtype == source.dtype and shared == source
    with pytest.raises(ValueError, match="read-only"):
        shared[()] = 0
    private = np.from_dlpack(t, copy=True)
    private[()] = 0
    assert t.item() == value and private == 0


def test_read_only_0d_tensor_exports_a_legacy_capsule_only_as_a_copy():
    """Mirrors TestScalarDLPack.test_dunder_dlpack_version: max_version None or
    (0, 0) cannot say read-only, so copy=False is a BufferError; copy=True makes a
    writable copy that a legacy capsule can carry."""
    t = tb.from_dlpack(_read_only(2.0))
    for max_version in ((0, 0), None):
        with pytest.raises(BufferError, match="cannot export a read-only tensor as a legacy"):
            t.__dlpack__(max_version=max_version, copy=False)
        info = inspect_capsule(t.__dlpack__(max_version=max_version, copy=True))
        assert info["name"] == "dltensor" and info["data"] != t.data_ptr()
    info = inspect_capsule(t.__dlpack__(max_version=(1, 0), copy=True))
    assert info["flags"] == FLAG_IS_COPIED


# --------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------


def test_device_requests_both_ways():
    """Mirrors TestDLPack.test_device and TestScalarDLPack.test_device. NumPy calls
    "gpu" an unknown device (ValueError); tensorbridge refuses it too (ValueError: it
    does not say whose GPU memory), and "cuda" is a device NumPy's CPU array cannot
    be exported to (BufferError); a name that is no device at all is a ValueError
    here too."""
    t = tb.arange(5)
    assert inspect_capsule(t.__dlpack__(max_version=(1, 3), dl_device=(1, 0)))["device"] == (1, 0)
    with pytest.raises(BufferError, match="dl_device=rocm:0"):
        t.__dlpack__(max_version=(1, 3), dl_device=(10, 0))
    assert np.from_dlpack(t, device="cpu").tolist() == t.tolist()

    a = np.arange(5)
    for device in ("cpu", None, (1, 0)):
        assert tb.from_dlpack(a, device=device).data_ptr() == a.ctypes.data
    with pytest.raises(BufferError, match="cannot export its cpu data to cuda:0"):
        tb.from_dlpack(a, device="cuda")
    with pytest.raises(ValueError, match="device 'gpu' does not say whose GPU memory"):
        tb.from_dlpack(a, device="gpu")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        tb.from_dlpack(a, device="tpu")

    zero_d = tb.from_dlpack(_read_only(2.0))
    capsule = zero_d.__dlpack__(max_version=(1, 0), dl_device=(1, 0))
    assert inspect_capsule(capsule)["device"] == (1, 0)
    with pytest.raises(BufferError, match="dl_device=rocm:0"):
        zero_d.__dlpack__(max_version=(1, 0), dl_device=(10, 0))
