# SPDX-License-Identifier: Apache-2.0
"""What pydlpack's suite checks of pydlpack, asked of tensorbridge in both roles.

The peer suite is pearu/pydlpack ``dlpack/tests/test_dlpack.py``. pydlpack
(``import dlpack``, PyPI ``pydlpack`` 0.2.1) wraps any object that speaks DLPack,
the array interface v3 or the buffer protocol in a ``DLPackObject`` whose
``__dlpack__(stream=None)`` gives capsules of its own (ctypes-built) structs.

- Producer role: a tensorbridge Tensor is the array pydlpack wraps, through each of
  the three protocols a Tensor speaks; ``dlpack.todict`` reads what pydlpack made of
  it (test_asdlpack_impl).
- Consumer role: ``tb.from_dlpack`` reads pydlpack's objects, wrapping NumPy arrays,
  Tensors and plain buffers (test_asdlpack_function, test_asdlpack_buffer).
- pydlpack 0.2.1 puts a versioned struct in a capsule named ``dltensor``: it must
  be refused without being touched, in a subprocess as it may crash.

See COVERAGE-B.md for the check-by-check table.
"""

from __future__ import annotations

import array
import gc
import mmap
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from needs import framework

import tensorbridge as tb
from tensorbridge import _testing

dlpack = framework("dlpack")
if not hasattr(dlpack, "asdlpack"):  # another distribution using the name
    pytest.skip("the dlpack module here is not pydlpack", allow_module_level=True)

DTYPES = [
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bfloat16",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "bool",
]
PROTOCOLS = ["dlpack", "array_interface_v3", "buffer"]
LABELS = {"i": "DLInt", "u": "DLUInt", "f": "DLFloat", "c": "DLComplex", "b": "DLBool"}

# The peer's shapes: 0-d, 1-d, 3-d, and a 3-d view with a step and a negative step.
SHAPES = [
    ((), None),
    ((2,), None),
    ((4, 6, 5), None),
    ((5, 6, 5), (slice(1, 3), slice(None, None, 2), slice(None, None, -1))),
]


def _host(shape, name):
    """1, 2, 3, ... in the dtype (complex: minus 1j times that), as the peer samples."""
    values = np.arange(1, int(np.prod(shape)) + 1).reshape(shape)
    if name == "bfloat16":
        ml_dtypes = framework("ml_dtypes")
        return values.astype(ml_dtypes.bfloat16)
    values = values.astype(name)
    if values.dtype.kind == "c":
        values -= 1j * values
    return values


def _samples(source, name):
    """The peer's samples, as NumPy arrays or as Tensors (sliced by tensorbridge)."""
    for shape, key in SHAPES:
        host = _host(shape, name)
        if source == "numpy":
            yield host if key is None else host[key]
        else:
            t = tb.asarray(host)
            yield t if key is None else t[key]


def _offset_tensor(name):
    """A Tensor imported from a capsule with a non-zero byte_offset."""
    host = _host((6,), name)
    dtype = getattr(tb, name)
    capsule, _ = _testing.make_capsule(
        host.ctypes.data,
        shape=(4,),
        strides=(1,),
        dtype=(dtype.code, dtype.bits, 1),
        byte_offset=2 * host.itemsize,
        owner=host,
    )
    return tb.from_dlpack(capsule)


def _protocol_can_carry(protocol, name):
    # The array interface and the buffer protocol have no bfloat16 (NumPy lacks it).
    return protocol == "dlpack" or name != "bfloat16"


# --------------------------------------------------------------------------
# tensorbridge as the producer: test_asdlpack_impl
# --------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["DLManagedTensor", "DLManagedTensorVersioned"])
@pytest.mark.parametrize(
    ("name", "protocol"),
    [(n, p) for n in DTYPES for p in PROTOCOLS if _protocol_can_carry(p, n)],
)
def test_asdlpack_impl(name, protocol, impl):
    """Mirrors test_dlpack.py::test_asdlpack_impl with a Tensor as the wrapped array:
    what pydlpack reads from a Tensor through DLPack (our legacy capsule), the array
    interface v3 and the buffer protocol has the Tensor's ndim, shape, strides,
    device (CPU, id 0), byte_offset 0, dtype width and data address; versioned
    output carries a version and the read-only flag."""
    make = getattr(dlpack, f"asdlpack_{protocol}")
    impl_cls = getattr(dlpack, impl)
    samples = [*_samples("tensorbridge", name), _offset_tensor(name)]
    for t in samples:
        wrapped = make(t, impl_cls=impl_cls)
        d = dlpack.todict(wrapped.__dlpack__())
        dl = d["dl_tensor"]
        assert dl["ndim"] == t.ndim
        assert dl["shape"] == t.shape
        assert dl["strides"] in (None, t.strides)
        assert dl["device"]["device_type"] == "DLCPU"
        assert dl["device"]["device_id"] == 0
        assert dl["byte_offset"] == 0
        assert dl["dtype"]["bits"] == t.itemsize * 8
        kind = "b" if name == "bool" else "f" if name == "bfloat16" else np.dtype(name).kind
        assert dl["dtype"]["code"] == ("DLBfloat" if name == "bfloat16" else LABELS[kind])
        assert dl["data"] == t.data_ptr()
        if protocol == "array_interface_v3":
            assert dl["data"] == t.__array_interface__["data"][0]
        if impl_cls is dlpack.DLManagedTensorVersioned:
            if protocol == "array_interface_v3":
                assert d["flags"] == t.__array_interface__["data"][1]
            assert d.get("version") is not None


# --------------------------------------------------------------------------
# tensorbridge as the consumer: test_asdlpack_function, test_asdlpack_buffer
# --------------------------------------------------------------------------


def _copy(a):
    return a.copy()


def _same_values(result, a):
    assert type(result) is tb.Tensor
    assert result.shape == tuple(a.shape)
    assert result.tolist() == tb.asarray(a).tolist()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("source", ["numpy", "tensorbridge"])
def test_asdlpack_function(source, protocol):
    """Mirrors test_dlpack.py::test_asdlpack_function with tb.from_dlpack as the
    consumer, for NumPy arrays and Tensors as the wrapped arrays: the eight
    lifetime scenarios (simple; the wrapper deleted after the import; the array
    deleted before it; wrappers and arrays local to a function; capsules never
    consumed; one wrapper imported twice) all give the array's values."""
    make = getattr(dlpack, f"asdlpack_{protocol}")
    wrappers = len(dlpack.MemoryManager.cache)

    def simple(a):
        _same_values(tb.from_dlpack(make(a)), a)

    def simple_del_dl(a):
        dl = make(a)
        a1 = tb.from_dlpack(dl)
        del dl
        _same_values(a1, a)

    def simple_del_array(a):
        b = _copy(a)
        dl = make(b)
        del b
        _same_values(tb.from_dlpack(dl), a)

    def local_dl(a):
        def array_from_local_dl():
            return tb.from_dlpack(make(a))

        _same_values(array_from_local_dl(), a)

    def local_array_and_dl(a):
        def array_from_local_array_and_dl():
            return tb.from_dlpack(make(_copy(a)))

        _same_values(array_from_local_array_and_dl(), a)

    def local_array(a):
        def dl_from_local_array():
            return make(_copy(a))

        a1 = tb.from_dlpack(dl_from_local_array())
        _same_values(a1, a)

    def unused(a):
        dl = make(a)
        c1 = dl.__dlpack__()
        c2 = dl.__dlpack__()
        del c1, c2

    def multiple_use(a):
        dl = make(a)
        a1 = tb.from_dlpack(dl)
        _same_values(a1, a)
        a2 = tb.from_dlpack(dl)
        _same_values(a2, a)
        assert a1.data_ptr() == a2.data_ptr()

    scenarios = [
        simple,
        simple_del_dl,
        simple_del_array,
        local_dl,
        local_array_and_dl,
        local_array,
        unused,
        multiple_use,
    ]
    names = [n for n in DTYPES if _protocol_can_carry(protocol, n)]
    if source == "numpy" and "bfloat16" in names:
        names.remove("bfloat16")  # NumPy cannot export it (the peer skips it too)
    for name in names:
        for a in _samples(source, name):
            for scenario in scenarios:
                scenario(a)
    gc.collect()
    assert len(dlpack.MemoryManager.cache) == wrappers  # every wrapper was released


def _buffer_samples(tmp_path):
    yield b"1234ABCD123489"
    yield bytearray([1, 2, 3, 4] * 8)
    yield array.array("d", [1.0, 2.0, 3.14])
    yield array.array("l", [1, 2, 3, 4, 5])
    path = tmp_path / "buffer.bin"
    fp = np.memmap(path, shape=(2, 3), dtype=np.int32, mode="w+")
    fp[0] = [1, 2, 3]
    fp[1] = [4, 5, 6]
    yield fp
    fp.flush()
    del fp
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    yield mapped
    gc.collect()
    mapped.close()  # raises BufferError if an export of it were still alive


def test_asdlpack_buffer(tmp_path):
    """Mirrors test_dlpack.py::test_asdlpack_buffer with tb.from_dlpack as the
    consumer: bytes, bytearray, array.array of doubles and longs, a NumPy memmap and
    a read-only mmap, wrapped through the buffer protocol, import with the buffer's
    dtype, shape and values; a Tensor's own buffer does the same. Afterwards the
    mmap can close: nothing still holds its buffer."""
    count = 0
    for obj in _buffer_samples(tmp_path):
        expected = np.asarray(memoryview(obj))
        t = tb.from_dlpack(dlpack.asdlpack_buffer(obj))
        assert t.dtype == expected.dtype.name and t.shape == expected.shape
        assert t.tolist() == expected.tolist()
        assert t.data_ptr() == expected.ctypes.data
        del t, expected
        count += 1
    assert count == 6
    source = tb.arange(12, dtype="int16").reshape(3, 4)
    t = tb.from_dlpack(dlpack.asdlpack_buffer(source))
    assert t.tolist() == source.tolist() and t.data_ptr() == source.data_ptr()


# --------------------------------------------------------------------------
# pydlpack's quirks against the capsule rules
# --------------------------------------------------------------------------


def test_old_signature_producer_given_copy_false():
    """pydlpack's DLPackObject.__dlpack__(stream=None) predates max_version/copy:
    the legacy fallback is not taken when copy is requested, and the error says
    that its __dlpack__ does not take copy."""
    dl = dlpack.asdlpack(np.arange(3.0))
    with pytest.raises(TypeError, match=r"does not take .*copy"):
        tb.from_dlpack(dl, copy=False)
    assert tb.from_dlpack(dl).tolist() == [0.0, 1.0, 2.0]  # without copy: the legacy call


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_versioned_struct_in_a_dltensor_capsule_is_refused_untouched():
    """pydlpack 0.2.1 with impl_cls=DLManagedTensorVersioned puts a versioned struct
    in a capsule named 'dltensor' (test_asdlpack_impl builds such objects; NumPy
    fails on them with SystemError). The name decides how the struct is read, the
    fields are then nonsense, and the capsule must be refused before anything is
    touched: BufferError, the name unchanged, the deleter not called (pydlpack's
    cache keeps its entry) until the capsule's own destructor frees it. The same
    through a producer object, asarray and convert. Run in a subprocess: a consumer
    that owns first and validates later calls a garbage deleter."""
    result = _run(
        """
        import gc
        import numpy as np
        import dlpack
        import tensorbridge as tb
        from tensorbridge import _testing

        cache = dlpack.MemoryManager.cache
        source = np.arange(4.0)

        def wrap():
            # A fresh wrapper each time: pydlpack forgets a wrapper whose capsules
            # have all died, and a second __dlpack__() then raises KeyError.
            return dlpack.asdlpack_array_interface_v3(
                source, impl_cls=dlpack.DLManagedTensorVersioned
            )

        def refused(consume, obj):
            try:
                consume(obj)
            except BufferError:
                return
            raise AssertionError("accepted a versioned struct named dltensor")

        consumers = (tb.from_dlpack, tb.asarray, lambda c: tb.convert(c, "numpy"))
        for readonly in (False, True):
            source.flags.writeable = not readonly
            for consume in consumers:
                capsule = wrap().__dlpack__()
                assert _testing.capsule_name(capsule) == "dltensor"
                entries = len(cache)
                refused(consume, capsule)
                assert _testing.capsule_name(capsule) == "dltensor", "renamed"
                assert len(cache) == entries, "the deleter was called"
                del capsule
                gc.collect()
                assert len(cache) == entries - 1, "the capsule did not free it"
            for consume in consumers[:2]:
                dl = wrap()
                entries = len(cache)
                refused(consume, dl)  # the capsule dies inside tensorbridge
                gc.collect()
                assert len(cache) == entries - 1, "freed twice, or not by its destructor"
                del dl
        gc.collect()
        print("ok", len(cache))
        """
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["ok", "0"]
    assert "Exception ignored" not in result.stderr, result.stderr[-2000:]
