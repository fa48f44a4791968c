# SPDX-License-Identifier: Apache-2.0
"""from_dlpack: negotiation with producers, raw capsules, validation of what arrives."""

from __future__ import annotations

import numpy as np
import pytest
from producers import (
    Producer,
    capsule_of,
    fake_device_producer,
    legacy_producer,
    numpy_producer,
)

import tensorbridge as tb
from tensorbridge import _testing

# --------------------------------------------------------------------------
# The negotiation ladder
# --------------------------------------------------------------------------


def test_asks_for_a_versioned_capsule_first():
    p = numpy_producer(np.arange(3.0))
    tb.from_dlpack(p)
    assert p.calls == [{"max_version": (1, 3)}]


def test_falls_back_to_the_legacy_call_once_on_typeerror():
    a = np.arange(3.0)
    p = legacy_producer(a)
    t = tb.from_dlpack(p)
    assert p.calls == [{"max_version": (1, 3)}, {}]
    assert t.data_ptr() == a.ctypes.data
    assert not t.readonly  # legacy imports are writable


@pytest.mark.parametrize("kwargs", [{"copy": False}, {"device": "cuda:0"}])
def test_no_fallback_when_a_new_keyword_was_requested(kwargs):
    p = legacy_producer(np.arange(3.0))
    with pytest.raises(TypeError, match="unexpected keyword"):
        tb.from_dlpack(p, **kwargs)
    assert len(p.calls) == 1


def test_never_calls_dlpack_more_than_twice():
    def always_typeerror(**kw):
        raise TypeError("broken producer")

    p = Producer(always_typeerror)
    p.__class__ = type("Broken", (Producer,), {})
    with pytest.raises(TypeError, match="broken producer"):
        tb.from_dlpack(p)
    assert len(p.calls) == 2


def test_copy_true_on_cpu_is_not_forwarded_so_legacy_producers_still_work():
    a = np.arange(3.0)
    p = legacy_producer(a)
    t = tb.from_dlpack(p, copy=True)
    assert p.calls == [{"max_version": (1, 3)}, {}]
    assert t.data_ptr() != a.ctypes.data
    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0]


def test_copy_false_is_forwarded():
    p = numpy_producer(np.arange(3.0))
    tb.from_dlpack(p, copy=False)
    assert p.calls == [{"max_version": (1, 3), "copy": False}]


def test_dl_device_is_not_sent_when_the_device_already_matches():
    p = numpy_producer(np.arange(3.0))
    tb.from_dlpack(p, device="cpu")
    tb.from_dlpack(p, device=tb.Device("cpu"))
    tb.from_dlpack(p, device=(1, 0))
    assert p.calls == [{"max_version": (1, 3)}] * 3


def test_dl_device_is_sent_for_a_device_move():
    p = fake_device_producer((2, 0))
    p.make = lambda **kw: capsule_of(np.arange(4.0))
    t = tb.from_dlpack(p, device="cpu")
    # "When kDLCPU is in use, stream must be None": no stream with dl_device=CPU.
    assert p.calls == [{"max_version": (1, 3), "dl_device": (1, 0)}]
    assert t.device == "cpu"


def test_producer_that_ignores_dl_device_is_caught():
    p = fake_device_producer((2, 0))  # keeps answering with CUDA memory
    with pytest.raises(BufferError, match=r"dl_device=\(1, 0\).*returned cuda:0"):
        tb.from_dlpack(p, device="cpu")


def test_producer_refusing_a_device_move_names_both_devices():
    a = np.arange(3.0)
    with pytest.raises(BufferError, match="cannot export its cpu data to cuda:1"):
        tb.from_dlpack(a, device="cuda:1")


# --------------------------------------------------------------------------
# Streams
# --------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [None, -1, 5, 2**40])
def test_no_stream_is_ever_passed_to_a_cpu_producer(stream):
    p = numpy_producer(np.arange(3.0))
    tb.from_dlpack(p, stream=stream)
    assert p.calls == [{"max_version": (1, 3)}]


@pytest.mark.parametrize("device", [(3, 0), (11, 0)])
def test_no_stream_is_passed_for_pinned_host_memory(device):
    p = fake_device_producer(device)
    tb.from_dlpack(p, stream=7)
    assert p.calls == [{"max_version": (1, 3)}]


@pytest.mark.parametrize(
    ("device", "stream", "expected"),
    [
        ((2, 0), None, 1),  # CUDA: the legacy default stream, explicitly
        ((2, 1), -1, -1),
        ((2, 0), 2, 2),
        ((2, 0), 0xDEAD000, 0xDEAD000),
        ((13, 0), None, 1),  # managed memory is ordered like its GPU
        ((10, 0), None, 0),  # ROCm: the default stream
        ((10, 0), 0xBEEF, 0xBEEF),
    ],
)
def test_gpu_producers_get_the_callers_stream_or_the_default(device, stream, expected):
    tb.from_dlpack(fake_device_producer(device))  # the Producer type is known for GPU data
    p = fake_device_producer(device)
    t = tb.from_dlpack(p, stream=stream)
    assert p.calls == [{"max_version": (1, 3), "stream": expected}]
    assert t.device == device


def test_a_type_that_refused_max_version_is_asked_the_legacy_way_first():
    # At most two __dlpack__ calls in all, and from the second exchange on, one.
    first = legacy_producer(np.arange(3.0))
    tb.from_dlpack(first)
    assert first.calls == [{"max_version": (1, 3)}, {}]
    second = legacy_producer(np.arange(3.0))
    second.__class__ = first.__class__
    assert tb.from_dlpack(second).tolist() == [0.0, 1.0, 2.0]
    assert second.calls == [{}]
    gpu = fake_device_producer((2, 0), accepts=("stream",))
    gpu.__class__ = type("LegacyGPU", (type(gpu),), {})
    tb.from_dlpack(gpu)  # versioned refused, then the legacy call with the stream
    assert gpu.calls == [{"max_version": (1, 3)}, {"stream": 1}]
    again = fake_device_producer((2, 0), accepts=("stream",))
    again.__class__ = gpu.__class__
    tb.from_dlpack(again)  # known legacy and GPU: the device query, one call with the stream
    assert again.calls == [{"stream": 1}]


def test_a_wrapper_type_is_not_stuck_with_the_legacy_call():
    # One type whose objects forward __dlpack__ to producers of both kinds: the memo
    # of a legacy object must not make a read-only export of a later one fail or
    # lose its READ_ONLY flag.
    class Old:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, stream=None):
            return np.arange(3.0).__dlpack__()

    class Wrap:
        def __init__(self, inner):
            self.inner = inner

        def __dlpack_device__(self):
            return self.inner.__dlpack_device__()

        def __dlpack__(self, **kwargs):
            return self.inner.__dlpack__(**kwargs)

    ro = np.arange(3.0)
    ro.flags.writeable = False
    assert tb.from_dlpack(Wrap(ro)).readonly
    assert tb.from_dlpack(Wrap(Old())).tolist() == [0.0, 1.0, 2.0]
    assert tb.from_dlpack(Wrap(ro)).readonly  # legacy refused: asked again, versioned
    assert tb.from_dlpack(Wrap(Old())).tolist() == [0.0, 1.0, 2.0]


def test_device_is_not_asked_until_a_type_exports_gpu_memory():
    # __dlpack_device__ can cost microseconds (JAX: 1.7 µs). Types that only ever
    # exported host memory are asked for the capsule directly, with no stream (right
    # for host memory); a capsule of GPU memory is released, the handshake follows,
    # and that type gets the handshake first from then on.
    class Fresh(Producer):
        def __dlpack_device__(self):
            self.device_calls = getattr(self, "device_calls", 0) + 1
            return super().__dlpack_device__()

    host = Fresh(lambda **kw: capsule_of(np.arange(3.0)), device=(1, 0))
    tb.from_dlpack(host)
    assert host.calls == [{"max_version": (1, 3)}] and not hasattr(host, "device_calls")

    gpu = fake_device_producer((2, 0))
    gpu.__class__ = type("FreshGPU", (Fresh,), {})
    t = tb.from_dlpack(gpu)
    assert gpu.calls == [{"max_version": (1, 3)}, {"max_version": (1, 3), "stream": 1}]
    assert gpu.counters[0].calls == 1 and str(t.device) == "cuda:0"
    again = fake_device_producer((2, 0))
    again.__class__ = gpu.__class__
    tb.from_dlpack(again)
    assert again.calls == [{"max_version": (1, 3), "stream": 1}]


def test_stream_zero_is_refused_for_cuda():
    p = fake_device_producer((2, 0))
    with pytest.raises(ValueError, match="stream=0 is ambiguous"):
        tb.from_dlpack(p, stream=0)
    assert p.calls == []


@pytest.mark.parametrize(("stream", "exc"), [("1", TypeError), (True, TypeError), (-2, ValueError)])
def test_bad_stream_arguments(stream, exc):
    with pytest.raises(exc, match="stream"):
        tb.from_dlpack(np.arange(2.0), stream=stream)


def test_legacy_fallback_keeps_the_stream():
    p = fake_device_producer((2, 0), accepts=("stream",))
    tb.from_dlpack(p, stream=9)
    assert p.calls == [{"max_version": (1, 3), "stream": 9}, {"stream": 9}]


# --------------------------------------------------------------------------
# copy=
# --------------------------------------------------------------------------


def test_copy_true_gives_private_memory_and_frees_the_import_at_once():
    a = np.arange(6.0).reshape(2, 3)[:, ::-1]
    p = numpy_producer(a)
    t = tb.from_dlpack(p, copy=True)
    assert p.counters[0].calls == 1  # the shared import is already released
    assert t.data_ptr() != a.ctypes.data
    assert t.is_contiguous()
    assert not t.readonly
    assert np.from_dlpack(t).tolist() == a.tolist()


def test_copy_true_trusts_a_producer_copy_flagged_is_copied():
    a = np.arange(3.0)
    p = Producer(lambda **kw: capsule_of(a, flags=tb._core.FLAG_IS_COPIED))
    t = tb.from_dlpack(p, copy=True)
    assert t.data_ptr() == a.ctypes.data  # no second copy


def test_copy_false_refuses_a_producer_copy():
    a = np.arange(3.0)
    p = Producer(lambda **kw: capsule_of(a, flags=tb._core.FLAG_IS_COPIED))
    with pytest.raises(BufferError, match="copy=False"):
        tb.from_dlpack(p, copy=False)


def test_copy_true_for_device_memory_asks_the_producer():
    p = fake_device_producer((2, 0))
    tb.from_dlpack(p, copy=True)
    assert p.calls == [{"max_version": (1, 3), "stream": 1, "copy": True}]


@pytest.mark.parametrize("copy", [1, "yes", 0])
def test_copy_must_be_a_bool_or_none(copy):
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        tb.from_dlpack(np.arange(2.0), copy=copy)


# --------------------------------------------------------------------------
# What a producer may hand back
# --------------------------------------------------------------------------


def test_not_a_dlpack_object():
    with pytest.raises(TypeError, match=r"lacks __dlpack__ and __dlpack_device__"):
        tb.from_dlpack([1, 2, 3])


def test_dlpack_without_dlpack_device():
    class OnlyDLPack:
        def __dlpack__(self, **kw):
            raise AssertionError("must not be called")

    with pytest.raises(TypeError, match="lacks __dlpack_device__"):
        tb.from_dlpack(OnlyDLPack())


def test_producer_exceptions_propagate():
    def refuse(**kw):
        raise BufferError("cannot export sparse tensors")

    with pytest.raises(BufferError, match="cannot export sparse tensors"):
        tb.from_dlpack(Producer(refuse))


def test_producer_returning_a_non_capsule():
    with pytest.raises(TypeError, match=r"__dlpack__\(\) returned bytes; expected a PyCapsule"):
        tb.from_dlpack(Producer(lambda **kw: b"not a capsule"))


def test_producer_returning_a_used_capsule():
    capsule, _ = capsule_of(np.arange(2.0))
    tb.from_dlpack(capsule)
    with pytest.raises(BufferError, match="already consumed"):
        tb.from_dlpack(Producer(lambda **kw: capsule))


def test_bad_dlpack_device_answers():
    p = numpy_producer(np.arange(2.0))
    p.device = "cpu"
    with pytest.raises(TypeError, match=r"__dlpack_device__\(\) must be a \(device_type"):
        tb.from_dlpack(p)
    p.device = (1, "zero")
    with pytest.raises(TypeError, match="must hold two ints"):
        tb.from_dlpack(p)


def test_device_id_none_is_read_as_zero():
    # PaddlePaddle answers __dlpack_device__() with (kDLCPU, None).
    a = np.arange(2.0)
    p = numpy_producer(a, device=(1, None))
    assert tb.from_dlpack(p).data_ptr() == a.ctypes.data


# --------------------------------------------------------------------------
# Raw capsules
# --------------------------------------------------------------------------


@pytest.mark.parametrize("versioned", [True, False])
def test_a_capsule_is_consumed_once(versioned):
    a = np.arange(4.0)
    capsule, counter = capsule_of(a, versioned=versioned)
    t = tb.from_dlpack(capsule)
    used = "used_dltensor_versioned" if versioned else "used_dltensor"
    assert _testing.capsule_name(capsule) == used
    assert t.data_ptr() == a.ctypes.data
    with pytest.raises(BufferError, match=f"already consumed.*{used}"):
        tb.from_dlpack(capsule)
    del capsule
    assert counter.calls == 0
    del t
    assert counter.calls == 1


def test_capsule_with_another_name():
    capsule, _ = _testing.make_capsule(0, name="not_a_tensor")
    with pytest.raises(TypeError, match="got a capsule named 'not_a_tensor'"):
        tb.from_dlpack(capsule)


def test_capsule_device_request():
    a = np.arange(3.0)
    capsule, _ = capsule_of(a, device=(3, 0))  # pinned: host-accessible
    t = tb.from_dlpack(capsule, device="cpu")
    assert t.device == "cpu" and t.data_ptr() == a.ctypes.data
    capsule, _ = capsule_of(a)
    with pytest.raises(BufferError, match="cannot move a capsule's cpu data to cuda:0"):
        tb.from_dlpack(capsule, device="cuda")


def test_capsule_copy_true():
    a = np.arange(3.0)
    capsule, counter = capsule_of(a)
    t = tb.from_dlpack(capsule, copy=True)
    assert t.data_ptr() != a.ctypes.data
    assert counter.calls == 1


def test_capsule_of_device_memory_cannot_honour_a_stream():
    capsule, _ = _testing.make_capsule(0x1000, shape=(2,), strides=(1,), device=(2, 0))
    with pytest.raises(BufferError, match="cannot be synchronised with stream=5"):
        tb.from_dlpack(capsule, stream=5)
    capsule, _ = _testing.make_capsule(0x1000, shape=(2,), strides=(1,), device=(2, 0))
    assert tb.from_dlpack(capsule, stream=-1).device == "cuda:0"


# --------------------------------------------------------------------------
# Validation of the DLTensor (validated before it is owned, deleter called once)
# --------------------------------------------------------------------------

BAD_FIELDS = {
    "major version 2": (dict(version=(2, 0)), "DLPack version 2.0"),
    "major version 0": (dict(version=(0, 9)), "DLPack version 0.9"),
    "unknown code": (dict(dtype=(42, 32, 1)), "unknown DLTensor.dtype code 42"),
    "bad float bits": (dict(dtype=(2, 24, 1)), r"code 2 with bits=24; .*\[16, 32, 64\]"),
    "fp4 bits 8": (dict(dtype=(17, 8, 1)), r"code 17 with bits=8; .*\[4\]"),
    "fp6 bits 8": (dict(dtype=(15, 8, 1)), r"code 15 with bits=8; .*\[6\]"),
    "bool bits 1": (dict(dtype=(6, 1, 1)), r"code 6 with bits=1"),
    "opaque handle": (dict(dtype=(3, 64, 1)), "kDLOpaqueHandle"),
    "lanes": (dict(dtype=(2, 32, 4)), "lanes is 4"),
    "negative shape": (dict(shape=(2, -3), strides=(1, 1)), r"shape\[1\] is -3"),
    "ndim too large": (dict(ndim=65), "ndim is 65"),
    "ndim negative": (dict(ndim=-1), "ndim is -1"),
    "null shape": (dict(shape=(2,), strides=(1,), null_shape=True), "shape is NULL but ndim is 1"),
    "null data": (dict(data=0, shape=(2,), strides=(1,)), "data is NULL but the tensor has 2"),
    "device type 5": (dict(device=(5, 0)), "device_type 5"),
    "device type 99": (dict(device=(99, 0)), "device_type 99"),
    "device id": (dict(device=(2, -1)), "device_id is -1"),
    "huge shape": (dict(shape=(2**40, 2**40), strides=(1, 1)), "too many elements"),
    "huge byte_offset": (dict(byte_offset=2**63 - 1), "byte_offset 9223372036854775807 is out"),
    "huge span": (dict(shape=(2**20,), strides=(2**41,)), "span more memory"),
    "absurd stride": (dict(shape=(4,), strides=(2**61,)), r"strides\[0\] is 2305843009213693952; out"),
    "packed fp4 strided": (
        dict(dtype=(17, 4, 1), shape=(4,), strides=(2,)),
        "bit-packed float4_e2m1fn data must be C-contiguous",
    ),
}


BAD_CASES = [
    pytest.param(fields, message, versioned, id=f"{case}-{'versioned' if versioned else 'legacy'}")
    for case, (fields, message) in BAD_FIELDS.items()
    for versioned in (True, False)
    if versioned or "version" not in fields  # legacy capsules carry no version
]


@pytest.mark.parametrize(("fields", "message", "versioned"), BAD_CASES)
def test_malformed_tensors_are_refused_precisely(fields, message, versioned):
    a = np.zeros(8, dtype=np.float32)
    fields = {"shape": (2,), "strides": (1,), **fields}
    capsule, counter = capsule_of(a, versioned=versioned, **fields)
    with pytest.raises(BufferError, match=message):
        tb.from_dlpack(capsule)
    if "version" in fields:
        # Another major version: the header says the consumer calls the deleter
        # (renaming first, so the capsule's destructor does not call it again).
        assert _testing.capsule_name(capsule).startswith("used_")
        assert counter.calls == 1
    else:
        # Refused before it was owned: left exactly as it was, and freed once by
        # its own destructor.
        assert _testing.capsule_name(capsule) == ("dltensor_versioned" if versioned else "dltensor")
        assert counter.calls == 0
    del capsule
    assert counter.calls == 1


def test_a_failing_import_through_a_producer_frees_the_capsule():
    a = np.zeros(2)
    p = Producer(lambda **kw: capsule_of(a, dtype=(2, 24, 1)))
    with pytest.raises(BufferError, match="bits=24"):
        tb.from_dlpack(p)
    assert p.counters[0].calls == 1


def test_null_deleter_is_allowed():
    a = np.arange(3.0)
    capsule, counter = capsule_of(a, deleter=False)
    t = tb.from_dlpack(capsule)
    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0]
    del t, capsule
    assert counter.calls == 0


def test_unknown_flag_bits_are_ignored():
    a = np.arange(3.0)
    capsule, _ = capsule_of(a, flags=1 << 40)
    t = tb.from_dlpack(capsule)
    assert not t.readonly
    assert t.__dlpack__(max_version=(1, 3)) is not None


# --------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------


@pytest.mark.parametrize("version", [None, (1, 0), (1, 1)], ids=["legacy", "v1.0", "v1.1"])
def test_null_strides_mean_c_order(version):
    a = np.arange(24.0).reshape(2, 3, 4)
    kwargs = {"versioned": False} if version is None else {"version": version}
    capsule, _ = capsule_of(a, strides=None, **kwargs)
    t = tb.from_dlpack(capsule)
    assert t.strides == (12, 4, 1)
    assert np.from_dlpack(t).tolist() == a.tolist()


LAYOUTS = {
    "0-d": lambda: np.array(3.5),
    "size-0": lambda: np.zeros((0, 3)),
    "size-0 middle": lambda: np.zeros((2, 0, 3)),
    "contiguous": lambda: np.arange(12.0).reshape(3, 4),
    "transposed": lambda: np.arange(12.0).reshape(3, 4).T,
    "step": lambda: np.arange(20.0)[::3],
    "negative": lambda: np.arange(12.0).reshape(3, 4)[::-1, ::-2],
    "zero stride": lambda: np.broadcast_to(np.arange(4.0), (3, 4)),
    "offset view": lambda: np.arange(12.0).reshape(3, 4)[1:, 1:],
    "fortran": lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    "size-1 dims odd strides": lambda: np.arange(6.0).reshape(6, 1)[::2],
}


@pytest.mark.parametrize("make", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_layouts_round_trip_with_shared_memory(make):
    a = make()
    t = tb.from_dlpack(a)
    assert t.shape == a.shape
    assert t.ndim == a.ndim and t.size == a.size
    if a.size:
        assert t.strides == tuple(s // a.itemsize for s in a.strides)
        assert t.data_ptr() == a.__array_interface__["data"][0]
    assert np.from_dlpack(t).tolist() == a.tolist()
    assert np.asarray(t).tolist() == a.tolist()


def test_byte_offset_is_honoured():
    a = np.arange(8, dtype=np.int32)
    base = a.ctypes.data
    capsule, _ = capsule_of(a, data=base, byte_offset=12, shape=(5,), strides=(1,))
    t = tb.from_dlpack(capsule)
    assert t.data_ptr() == base + 12
    assert np.from_dlpack(t).tolist() == [3, 4, 5, 6, 7]


def test_size_zero_with_null_data():
    capsule, _ = _testing.make_capsule(0, shape=(0, 3), strides=(3, 1))
    t = tb.from_dlpack(capsule)
    assert t.shape == (0, 3) and t.size == 0 and t.nbytes == 0
    assert np.from_dlpack(t).shape == (0, 3)
    assert memoryview(t).shape == (0, 3)


def test_size_zero_extents_must_still_fit():
    # NumPy's rule (PyTorch's too): the non-zero extents must fit the address space.
    capsule, _ = _testing.make_capsule(0, shape=(2**40, 2**40, 0), strides=(1, 1, 1))
    with pytest.raises(BufferError, match=r"shape \(1099511627776, 1099511627776, 0\) has too"):
        tb.from_dlpack(capsule)


def test_size_zero_strides_are_normalised():
    capsule, _ = _testing.make_capsule(0, shape=(3, 0, 5), strides=(2**61, -7, 0))
    t = tb.from_dlpack(capsule)
    assert t.shape == (3, 0, 5) and t.strides == (5, 5, 1)


def test_zero_d_with_null_shape_and_strides():
    a = np.array([7], dtype=np.int16)
    capsule, _ = capsule_of(a, shape=(), strides=None, null_shape=True)
    t = tb.from_dlpack(capsule)
    assert t.shape == () and t.strides == () and t.size == 1
    assert np.from_dlpack(t).item() == 7


# --------------------------------------------------------------------------
# Every DLPack dtype
# --------------------------------------------------------------------------

ALL_DTYPES = {
    "bool": (6, 8),
    "int8": (0, 8),
    "int16": (0, 16),
    "int32": (0, 32),
    "int64": (0, 64),
    "uint8": (1, 8),
    "uint16": (1, 16),
    "uint32": (1, 32),
    "uint64": (1, 64),
    "float16": (2, 16),
    "float32": (2, 32),
    "float64": (2, 64),
    "bfloat16": (4, 16),
    "complex64": (5, 64),
    "complex128": (5, 128),
    "float8_e3m4": (7, 8),
    "float8_e4m3": (8, 8),
    "float8_e4m3b11fnuz": (9, 8),
    "float8_e4m3fn": (10, 8),
    "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8),
    "float8_e5m2fnuz": (13, 8),
    "float8_e8m0fnu": (14, 8),
    "float6_e2m3fn": (15, 6),
    "float6_e3m2fn": (16, 6),
    "float4_e2m1fn": (17, 4),
}


@pytest.mark.parametrize(("name", "code_bits"), ALL_DTYPES.items(), ids=ALL_DTYPES.keys())
@pytest.mark.parametrize("padded", [False, True], ids=["packed", "padded"])
def test_every_dlpack_dtype_imports_and_reexports(name, code_bits, padded):
    code, bits = code_bits
    memory = np.arange(16, dtype=np.uint8)
    flags = tb._core.FLAG_SUBBYTE_PADDED if padded and bits < 8 else 0
    capsule, _ = _testing.make_capsule(
        memory, shape=(2, 4), strides=(4, 1), dtype=(code, bits, 1), flags=flags, owner=memory
    )
    t = tb.from_dlpack(capsule)
    assert t.dtype == name and t.dtype is getattr(tb, name)
    assert t.dtype.code == code and t.dtype.bits == bits
    expected = (8 * bits + 7) // 8 if bits < 8 and not padded else 8 * t.itemsize
    assert t.nbytes == expected
    info = tb._core._inspect_capsule(t.__dlpack__(max_version=(1, 3)))
    assert info["dtype"] == (code, bits, 1)
    assert info["flags"] == flags
