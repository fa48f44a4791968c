# SPDX-License-Identifier: Apache-2.0
"""What dmlc/dlpack's reference app ``apps/numpy_dlpack`` checks, asked of
tensorbridge in both roles.

The app is a ctypes producer (``from_numpy``: a legacy ``DLManagedTensor`` capsule of
a NumPy array, with a ctypes deleter and capsule destructor) and a ctypes consumer
(``to_numpy``: reads the struct of a ``dltensor`` capsule without consuming it, and
builds a NumPy array through ``__array_interface__`` with ``data=(ptr, True)``;
the ``offset`` it also passes is ignored by NumPy for tuple data, so in effect it
ignores ``byte_offset``). Its tests (``test.py`` with TVM, ``test_pure_numpy.py``)
check zero-copy exchange and that memory lives as long as it is used, and run
10,000 times "to make sure the conversions and memory management are stable".

Here an independent ctypes producer and consumer of our own play the app's parts,
with tensorbridge on the other side (and in the middle). See COVERAGE-B.md.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest
from dlpack_ctypes import Device, DType, ManagedTensor

import tensorbridge as tb
from tensorbridge import _testing


def _settle():
    """Give the interpreter loop a turn. A producer's deleter that becomes due
    inside a capsule destructor is handed to the loop (Py_AddPendingCall) rather
    than called inline (design.md: a framework may hold a lock in its deleters),
    so memory is released a few bytecodes after the last reference goes."""
    for _ in range(3):
        pass


# --------------------------------------------------------------------------
# A legacy DLPack producer and consumer in ctypes (our own, after the app's roles)
# --------------------------------------------------------------------------


_Device, _DType, _Managed = Device, DType, ManagedTensor


def _api(restype, name, *argtypes):
    # Private prototypes: other code (pydlpack) re-types ctypes.pythonapi's functions.
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_new_capsule = _api(
    ctypes.py_object, "PyCapsule_New", ctypes.c_void_p, ctypes.c_void_p, _DESTRUCTOR
)
_is_valid = _api(ctypes.c_int, "PyCapsule_IsValid", ctypes.py_object, ctypes.c_char_p)
_pointer = _api(ctypes.c_void_p, "PyCapsule_GetPointer", ctypes.py_object, ctypes.c_char_p)
# In a capsule destructor the capsule is dying: take it as a raw address, never
# as an object (which would resurrect it).
_is_valid_raw = _api(ctypes.c_int, "PyCapsule_IsValid", ctypes.c_void_p, ctypes.c_char_p)
_pointer_raw = _api(ctypes.c_void_p, "PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_char_p)

_NAME = ctypes.create_string_buffer(b"dltensor")  # capsule names must outlive capsules
_CODES = {"i": 0, "u": 1, "f": 2, "c": 5}
_KINDS = {0: "i", 1: "u", 2: "f", 5: "c"}


_LIVE: dict[int, Export] = {}  # address -> export, until its deleter runs


class Export:
    """One export of the ctypes producer: the struct, its shape and strides, the
    source array, and how many times the deleter ran."""

    def __init__(self, array, dtype=None, byte_offset=0, data=None):
        self.array = array
        self.deleter_calls = 0
        ndim = array.ndim
        self.shape = (ctypes.c_int64 * max(ndim, 1))(*array.shape)
        self.strides = (ctypes.c_int64 * max(ndim, 1))(
            *(s // array.itemsize for s in array.strides)
        )
        code_bits = dtype or (_CODES[array.dtype.kind], array.itemsize * 8, 1)
        self.managed = _Managed()
        dl = self.managed.dl_tensor
        dl.data = array.ctypes.data if data is None else data
        dl.device = _Device(1, 0)
        dl.ndim = ndim
        dl.dtype = _DType(*code_bits)
        dl.shape = self.shape
        dl.strides = self.strides
        dl.byte_offset = byte_offset
        self.managed.deleter = ctypes.cast(_deleter, ctypes.c_void_p).value
        self.address = ctypes.addressof(self.managed)
        _LIVE[self.address] = self
        self.capsule = _new_capsule(self.address, ctypes.addressof(_NAME), _destructor)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _deleter(address):
    export = _LIVE.pop(address)  # a second call would raise here (and be seen)
    export.deleter_calls += 1


@_DESTRUCTOR
def _destructor(capsule_address):
    if _is_valid_raw(capsule_address, b"dltensor"):  # unconsumed: ours to delete
        _deleter(_pointer_raw(capsule_address, b"dltensor"))


def produce(array, **kwargs):
    """A legacy capsule of the array's memory (and its Export record)."""
    export = Export(array, **kwargs)
    capsule = export.capsule
    del export.capsule
    return capsule, export


class _Holder:
    def __init__(self, interface, capsule):
        self.__array_interface__ = interface
        self.capsule = capsule  # kept alive, never consumed


def consume(capsule):
    """A NumPy array over a legacy capsule's memory, reading the struct without
    consuming the capsule (it is kept alive by the array) and reading ``data``
    only: byte_offset is ignored, as by the app's consumer."""
    assert _is_valid(capsule, b"dltensor")
    dl = _Managed.from_address(_pointer(capsule, b"dltensor")).dl_tensor
    itemsize = dl.dtype.bits * dl.dtype.lanes // 8
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    strides = tuple(dl.strides[i] * itemsize for i in range(dl.ndim)) if dl.strides else None
    interface = {
        "version": 3,
        "shape": shape,
        "typestr": np.dtype(f"{_KINDS[dl.dtype.code]}{itemsize}").str,
        "data": (dl.data or 0, True),
        "strides": strides,
    }
    return np.asarray(_Holder(interface, capsule))


# The app's dtype table (its consumer reads these type codes only).
APP_DTYPES = [
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


def _random(shape, name, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) * 100).astype(name)


# --------------------------------------------------------------------------
# apps/numpy_dlpack/test.py
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", APP_DTYPES)
def test_to_numpy(name):
    """Mirrors apps/numpy_dlpack/test.py::test_to_numpy with a Tensor in TVM's place:
    a consumer that reads our legacy capsule without consuming it gets our memory
    (no copy) and keeps it alive after the Tensor is deleted."""
    t = tb.asarray(_random((10, 10), name))
    expected = t.numpy().copy()
    address = t.data_ptr()
    arr = consume(t.__dlpack__())
    assert arr.ctypes.data == address
    del t
    _settle()
    np.testing.assert_equal(arr, expected)


@pytest.mark.parametrize("name", APP_DTYPES)
def test_from_numpy(name):
    """Mirrors apps/numpy_dlpack/test.py::test_from_numpy with tb.from_dlpack in
    TVM's place: the ctypes producer's capsule imports without a copy, the source
    array can be dropped, and the producer's deleter runs once, when the Tensor dies
    (the consumed capsule's destructor does nothing)."""
    source = _random((10, 10), name)
    expected = source.copy()
    capsule, export = produce(source)
    t = tb.from_dlpack(capsule)
    assert _testing.capsule_name(capsule) == "used_dltensor"
    assert t.data_ptr() == source.ctypes.data
    del source  # the producer's export holds it until its deleter runs
    _settle()
    np.testing.assert_equal(np.from_dlpack(t), expected)
    assert export.deleter_calls == 0
    del capsule
    _settle()
    assert export.deleter_calls == 0
    del t
    _settle()
    assert export.deleter_calls == 1


# --------------------------------------------------------------------------
# apps/numpy_dlpack/test_pure_numpy.py
# --------------------------------------------------------------------------


def test_to_from_numpy_zero_copy():
    """Mirrors test_pure_numpy.py::test_to_from_numpy_zero_copy, with tensorbridge in
    the middle (consumer of the producer, producer for the consumer): the array
    at the end shares the first array's memory, so writes into the first array
    after every intermediate object is gone show up at the end."""
    small = _random((10, 10), "float64", seed=1)
    big = _random((12, 10), "float64", seed=2)
    capsule, export = produce(big)
    t = tb.from_dlpack(capsule)
    reconstructed = consume(t.__dlpack__())
    del capsule, t
    _settle()
    big[1:11] = small
    del big
    _settle()
    np.testing.assert_equal(reconstructed[1:11], small)
    assert export.deleter_calls == 0  # still in use, through our export
    del reconstructed
    _settle()
    assert export.deleter_calls == 1


def test_to_from_numpy_memory():
    """Mirrors test_pure_numpy.py::test_to_from_numpy_memory: a capsule keeps its
    source alive after the source is deleted, in both roles (the producer's
    capsule read by tensorbridge; our capsule read by the consumer)."""
    source = _random((10, 10), "float64", seed=3)
    expected = source.copy()
    capsule, export = produce(source)
    del source  # the producer's export holds it until its deleter runs
    _settle()
    t = tb.from_dlpack(capsule)
    del capsule
    _settle()
    np.testing.assert_equal(t.numpy(), expected)

    ours = t.__dlpack__()
    del t
    _settle()
    arr = consume(ours)
    del ours
    _settle()
    np.testing.assert_equal(arr, expected)
    assert export.deleter_calls == 0
    del arr
    _settle()
    assert export.deleter_calls == 1


# --------------------------------------------------------------------------
# The app's consumer ignores byte_offset: tensorbridge folds it on export
# --------------------------------------------------------------------------


def _offset_import(values, skip):
    """A Tensor imported from a capsule whose byte_offset skips `skip` elements."""
    data = np.ascontiguousarray(values)
    capsule, export = produce(data[skip:], data=data.ctypes.data, byte_offset=skip * data.itemsize)
    return tb.from_dlpack(capsule), export


@pytest.mark.parametrize("export_call", ["__dlpack__", "to_dlpack"])
def test_byte_offset_is_folded_for_a_consumer_that_ignores_it(export_call):
    """The app's consumer reads `data` and ignores byte_offset (as PyTorch, Paddle
    and others did). tensorbridge exports byte_offset 0 with the offset folded into
    the pointer, so such a consumer reads the right elements: for a Tensor imported
    with a byte_offset, a 2-d view of it, and a view of an allocation of ours."""
    values = np.arange(20, dtype=np.int32)
    imported, _ = _offset_import(values, skip=3)
    assert imported.tolist() == values[3:].tolist()
    cases = [
        (imported, values[3:]),
        (imported.reshape(-1)[1:].reshape(4, 4)[1:, 2:], values[4:].reshape(4, 4)[1:, 2:]),
        (tb.arange(20, dtype="int32")[5:], values[5:]),
    ]
    for t, expected in cases:
        capsule = t.__dlpack__() if export_call == "__dlpack__" else tb.to_dlpack(t)
        dl = _Managed.from_address(_pointer(capsule, b"dltensor")).dl_tensor
        assert dl.byte_offset == 0
        assert dl.data == t.data_ptr()
        np.testing.assert_equal(consume(capsule), expected)


# --------------------------------------------------------------------------
# The app's producer maps bool to (kDLUInt, 1 bit): refused without being touched
# --------------------------------------------------------------------------


def test_one_bit_uint_from_the_app_producer_is_refused_untouched():
    """The app's from_numpy maps bool to (kDLUInt, bits=1, lanes=1), which is no
    DLPack dtype (kDLBool is (6, 8)). Validate, then own: the capsule is
    refused with BufferError, its name is unchanged, the deleter is not called,
    and the capsule's own destructor frees it later; through from_dlpack and
    asarray."""
    for consume_call in (tb.from_dlpack, tb.asarray):
        capsule, export = produce(np.array([True, False, True]), dtype=(1, 1, 1))
        with pytest.raises(BufferError, match=r"bits=1\b"):
            consume_call(capsule)
        assert _testing.capsule_name(capsule) == "dltensor"
        assert export.deleter_calls == 0
        del capsule
        _settle()
        assert export.deleter_calls == 1


def test_refused_capsule_from_a_producer_is_freed_by_its_own_destructor():
    """As above, with the capsule handed over by a producer object, so it dies
    inside tensorbridge: its destructor (Python code here, as in the app) must run
    normally and free it once, and the caller must get the BufferError."""

    class AppProducer:
        def __init__(self, capsule):
            self.capsule = capsule

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            capsule, self.capsule = self.capsule, None
            return capsule

    capsule, export = produce(np.array([True, False]), dtype=(1, 1, 1))
    producer = AppProducer(capsule)
    del capsule
    with pytest.raises(BufferError, match=r"bits=1\b"):
        tb.from_dlpack(producer)
    _settle()
    assert export.deleter_calls == 1


# --------------------------------------------------------------------------
# The app's __main__: 10,000 rounds "to make sure ... memory management is stable"
# --------------------------------------------------------------------------


def test_repeated_exchanges_are_stable():
    """Mirrors the app's __main__ loops (both tests, 10,000 times each), here 2,000
    rounds each way: every producer deleter runs exactly once, nothing stays
    registered, and the source's reference count is back where it started."""
    source = np.arange(100, dtype=np.float64).reshape(10, 10)
    refs = sys.getrefcount(source)
    exports = []
    for _ in range(2000):
        capsule, export = produce(source)
        t = tb.from_dlpack(capsule)
        arr = consume(t.__dlpack__())
        del capsule, t
        assert arr[3, 4] == 34.0
        del arr
        exports.append(export)
    _settle()
    assert not any(e.address in _LIVE for e in exports)
    assert {e.deleter_calls for e in exports} == {1}
    for e in exports:
        e.array = None
    assert sys.getrefcount(source) == refs
