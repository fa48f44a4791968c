# SPDX-License-Identifier: Apache-2.0
"""What CuPy's DLPack suite checks of CuPy, asked of tensorbridge in both roles.

The peer suite is cupy/cupy ``tests/cupy_tests/core_tests/test_dlpack.py``. There is
no GPU here and no CuPy, so its device arrays are played by tensorbridge tensors of
memory on a made-up CUDA address (never touched: metadata only) and its managed
memory (``cuda.malloc_managed``) by NumPy memory labelled ``kDLCUDAManaged``, which
is host-accessible, so values can be compared. The producer role is a tensorbridge
Tensor; the consumer role is ``tb.from_dlpack``/``tb.asarray``, fed either through
``Forward`` (a producer object that forwards to a Tensor, so both ends of the
negotiation are ours) or through ``Dummy`` (CuPy's ``DLDummy``: one pre-made capsule,
whatever the keywords). See COVERAGE-B.md for the check-by-check table.
"""

from __future__ import annotations

import numpy as np
import pytest
from needs import framework
from producers import capsule_of

import tensorbridge as tb
from tensorbridge import _testing
from tensorbridge._core import FLAG_IS_COPIED, inspect_capsule

CUDA = (2, 0)
MANAGED = (13, 0)
ROCM = (10, 0)
FAKE_ADDRESS = 0x7F0000042000  # device memory: never dereferenced


def _settle():
    """Give the interpreter loop a turn. A producer's deleter that becomes due
    inside a capsule destructor is handed to the loop (Py_AddPendingCall) rather
    than called inline (design.md: a framework may hold a lock in its deleters),
    so memory is released a few bytecodes after the last reference goes."""
    for _ in range(3):
        pass


# Every dtype CuPy's for_all_dtypes(no_bool=False) covers, plus bfloat16
# (test_conversion_bfloat16).
DTYPES = [
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
    "bfloat16",
]


def _host_sample(name: str, shape=(2, 3)) -> np.ndarray:
    """Values in the spirit of CuPy's _gen_array (random, per kind), reproducible."""
    rng = np.random.default_rng(sum(map(ord, name)))
    if name == "bfloat16":
        ml_dtypes = framework("ml_dtypes")
        return rng.random(shape).astype(ml_dtypes.bfloat16)
    dtype = np.dtype(name)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dtype)
    if dtype.kind == "u":
        return rng.integers(0, 10, size=shape).astype(dtype)
    if dtype.kind == "i":
        return rng.integers(-10, 10, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.random(shape) + 1j * rng.random(shape)).astype(dtype)
    return rng.random(shape).astype(dtype)


def _dl_dtype(name: str) -> tuple[int, int, int]:
    dtype = getattr(tb, name)
    return (dtype.code, dtype.bits, 1)


def device_tensor(name="float32", shape=(2, 3), device=CUDA):
    """A Tensor of (fake) CUDA/ROCm device memory, and the counter of its producer."""
    strides = tuple(int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
    capsule, counter = _testing.make_capsule(
        FAKE_ADDRESS, shape=shape, strides=strides, dtype=_dl_dtype(name), device=device
    )
    return tb.from_dlpack(capsule, stream=-1), counter


def managed_tensor(host: np.ndarray, device=MANAGED):
    """A Tensor of host-accessible (managed) memory: the NumPy array's."""
    capsule, counter = _testing.make_capsule(
        host.__array_interface__["data"][0],
        shape=host.shape,
        strides=tuple(s // host.itemsize for s in host.strides),
        dtype=_dl_dtype(host.dtype.name),
        device=device,
        owner=host,
    )
    return tb.from_dlpack(capsule), counter


def sample_tensor(memory: str, name: str, shape=(2, 3)):
    """(tensor, host values or None) for CuPy's 'device' and 'managed' pools."""
    if memory == "managed":
        host = _host_sample(name, shape)
        t, _ = managed_tensor(host)
        return t, host
    t, _ = device_tensor(name, shape, device=ROCM if memory == "rocm" else CUDA)
    return t, None


class Forward:
    """A producer object forwarding the protocol to a Tensor (tensorbridge on both
    ends of the negotiation); records what the consumer asked."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.calls: list[dict] = []

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.tensor.__dlpack__(**kwargs)


class Dummy:
    """CuPy's DLDummy: hands out one pre-made capsule whatever it is asked, and
    claims a device of the caller's choosing."""

    def __init__(self, capsule, device):
        self.capsule = capsule
        self.device = device
        self.calls: list[dict] = []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def _values(t):
    return t.tolist()


# --------------------------------------------------------------------------
# TestDLPackConversion
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("memory", ["cpu", "device"])
def test_legacy_to_dlpack_round_trip(memory, name):
    """Mirrors TestDLPackConversion::test_conversion (toDlpack -> fromDlpack, every
    dtype: same values, same pointer, no warning but deprecations; here no warning
    at all, as filterwarnings=error enforces)."""
    if memory == "cpu":
        host = _host_sample(name)
        t = tb.asarray(host)
    else:
        t, _ = device_tensor(name)
    capsule = tb.to_dlpack(t)
    assert _testing.capsule_name(capsule) == "dltensor"
    out = tb.from_dlpack(capsule)
    assert _testing.capsule_name(capsule) == "used_dltensor"
    assert out.data_ptr() == t.data_ptr()
    assert (out.dtype, out.shape, out.device) == (t.dtype, t.shape, t.device)
    if memory == "cpu":
        assert _values(out) == tb.asarray(host).tolist()


# --------------------------------------------------------------------------
# TestNewDLPackConversion (pools: device memory and managed memory)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("memory", ["device", "managed"])
def test_from_dlpack_round_trip(memory, name):
    """Mirrors TestNewDLPackConversion::test_conversion and ::test_conversion_bfloat16:
    from_dlpack(producer) keeps values and pointer, on device and managed memory.
    The consumer must hand the CUDA producer the legacy default stream (1)."""
    t, host = sample_tensor(memory, name)
    producer = Forward(t)
    out = tb.from_dlpack(producer)
    assert out.data_ptr() == t.data_ptr()
    assert (out.dtype, out.shape, out.device) == (t.dtype, t.shape, t.device)
    assert 1 <= len(producer.calls) <= 2
    assert producer.calls[-1] == {"max_version": (1, 3), "stream": 1}
    if host is not None:
        assert _values(out) == tb.asarray(host).tolist()


def test_device_request_for_the_producers_own_device():
    """Mirrors TestNewDLPackConversion::test_from_dlpack_and_conv_errors, first half:
    CuPy raises NotImplementedError for from_dlpack(x, device=x.device); tensorbridge
    takes the request and does not forward a no-op dl_device (old producers break)."""
    t, _ = device_tensor(device=(2, 1))
    producer = Forward(t)
    out = tb.from_dlpack(producer, device="cuda:1")
    assert out.data_ptr() == t.data_ptr() and str(out.device) == "cuda:1"
    assert all("dl_device" not in call for call in producer.calls)
    assert producer.calls[-1]["stream"] == 1


def test_copy_true_of_device_memory_is_a_buffer_error_in_both_roles():
    """Mirrors TestNewDLPackConversion::test_from_dlpack_and_conv_errors, second half:
    a device producer that can copy only to the host refuses copy=True with
    BufferError, and the consumer lets that BufferError through (as a
    ProducerError that is still a BufferError, naming the producer and the call,
    caused by the producer's own exception)."""
    t, _ = device_tensor()
    with pytest.raises(BufferError, match="copy=True needs CPU-accessible memory"):
        t.__dlpack__(max_version=(1, 3), copy=True)  # the producer role
    producer = Forward(t)
    with pytest.raises(BufferError, match="copy=True needs CPU-accessible memory") as info:
        tb.from_dlpack(producer, copy=True)  # the consumer role
    assert producer.calls and producer.calls[-1]["copy"] is True
    assert isinstance(info.value, tb.ProducerError)
    assert "Forward" in str(info.value) and "__dlpack__" in str(info.value)
    assert type(info.value.__cause__) is BufferError


@pytest.mark.parametrize(
    ("kwargs", "versioned"),
    [
        ({}, False),
        ({"max_version": None}, False),
        ({"max_version": (1, 0)}, True),
        ({"max_version": (10, 10)}, True),
        ({"max_version": (0, 8)}, False),
    ],
)
def test_max_version_picks_the_capsule(kwargs, versioned):
    """Mirrors TestNewDLPackConversion::test_conversion_max_version: the capsule name
    follows max_version, and a consumer given that capsule by a DLDummy shares."""
    t, _ = device_tensor()
    capsule = t.__dlpack__(**kwargs)
    name = "dltensor_versioned" if versioned else "dltensor"
    assert _testing.capsule_name(capsule) == name
    if versioned:
        assert inspect_capsule(capsule)["version"] == (1, 3)
    # cupy.from_dlpack passes its current stream; so does this call (the null
    # stream, as 1), which also keeps this test independent of the first-import
    # case that test_dummy_of_device_memory_on_first_import covers.
    out = tb.from_dlpack(Dummy(capsule, t.__dlpack_device__()), stream=1)
    assert _testing.capsule_name(capsule) == "used_" + name
    assert out.data_ptr() == t.data_ptr() and out.device == t.device


@pytest.mark.parametrize("device", [CUDA, (2, 3), MANAGED, ROCM])
def test_dl_device_equal_to_the_tensors_own_device(device):
    """Mirrors TestNewDLPackConversion::test_conversion_device: dl_device naming the
    tensor's own device is supported, and the consumer shares the result."""
    t, _ = device_tensor(device=device)
    capsule = t.__dlpack__(max_version=(1, 3), dl_device=t.__dlpack_device__())
    info = inspect_capsule(capsule)
    assert info["device"] == device and info["data"] == FAKE_ADDRESS
    out = tb.from_dlpack(Dummy(capsule, device), stream=-1)
    assert out.data_ptr() == t.data_ptr() and out.device == t.device


@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_bad_dl_device_is_a_buffer_error(where):
    """Mirrors TestNewDLPackConversion::test_conversion_bad_device: an absurd device
    id of the tensor's own device type, and a foreign device type (kDLVPI), are
    refused with BufferError."""
    t = tb.arange(4.0) if where == "cpu" else device_tensor()[0]
    own_type = int(t.__dlpack_device__()[0])
    with pytest.raises(BufferError, match="dl_device"):
        t.__dlpack__(max_version=(1, 3), dl_device=(own_type, 2**30))
    with pytest.raises(BufferError, match="dl_device"):
        t.__dlpack__(max_version=(1, 3), dl_device=(9, 0))


def test_dl_device_cpu_of_managed_memory():
    """Mirrors TestNewDLPackConversion::test_conversion_device_to_cpu[managed]:
    dl_device=(1, 0) exports managed memory to the CPU without a copy (two exports
    share), copy=True gives a private copy that shares with neither, copy=False
    shares. NumPy is the consumer, as in the peer test."""
    host = _host_sample("float32")
    t, _ = managed_tensor(host)
    arr1 = np.from_dlpack(Dummy(t.__dlpack__(dl_device=(1, 0)), (1, 0)))
    arr2 = np.from_dlpack(Dummy(t.__dlpack__(dl_device=(1, 0)), (1, 0)))
    np.testing.assert_array_equal(arr1, host)
    assert arr1.dtype == host.dtype
    assert np.may_share_memory(arr1, arr2) and np.may_share_memory(arr1, host)

    capsule = t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=True)
    info = inspect_capsule(capsule)
    assert info["device"] == (1, 0) and info["flags"] & FLAG_IS_COPIED
    arr_copy = np.from_dlpack(Dummy(capsule, (1, 0)))
    assert not np.may_share_memory(arr_copy, arr1)
    np.testing.assert_array_equal(arr1, arr_copy)

    arr_nocopy = np.from_dlpack(Dummy(t.__dlpack__(dl_device=(1, 0), copy=False), (1, 0)))
    assert np.may_share_memory(arr_nocopy, arr1)


def test_dl_device_cpu_of_device_memory():
    """Mirrors TestNewDLPackConversion::test_conversion_device_to_cpu[device]: CuPy
    copies device memory to the host for dl_device=(1, 0); tensorbridge cannot read
    device memory, so it refuses (BufferError), also with copy=True, and copy=False
    (where CuPy raises ValueError) is a BufferError too, as tensorbridge's error
    policy puts impossible dl_device/copy combinations."""
    t, _ = device_tensor()
    for copy in (None, True, False):
        with pytest.raises(BufferError, match=r"dl_device|copy=True"):
            t.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=copy)


def test_device_cpu_request_as_a_consumer():
    """Mirrors TestNewDLPackConversion::test_conversion_device_to_cpu with
    tensorbridge as the consumer asking for the CPU: managed memory is shared
    (copy=None/False) or copied (copy=True); device memory is refused naming both
    devices."""
    host = _host_sample("float64")
    t, _ = managed_tensor(host)
    shared = tb.from_dlpack(Forward(t), device="cpu")
    assert str(shared.device) == "cpu" and shared.data_ptr() == t.data_ptr()
    assert tb.from_dlpack(Forward(t), device="cpu", copy=False).data_ptr() == t.data_ptr()
    copied = tb.from_dlpack(Forward(t), device="cpu", copy=True)
    assert copied.data_ptr() != t.data_ptr() and str(copied.device) == "cpu"
    assert copied.tolist() == host.tolist()

    d, _ = device_tensor()
    with pytest.raises(BufferError, match=r"cuda:0.*cpu|cpu.*cuda:0"):
        tb.from_dlpack(Forward(d), device="cpu")


@pytest.mark.parametrize("memory", ["device", "managed", "rocm"])
def test_stream_handshake_in_both_roles(memory):
    """Mirrors TestNewDLPackConversion::test_stream: for each consumer stream (the
    null stream, the per-thread default stream, a created stream) the consumer
    passes its stream, the null stream as 1 on CUDA (0 on ROCm/HIP, which has no
    per-thread stream), the producer accepts it, and memory is shared; the
    producer's capsule for that stream also imports by itself (from_dlpack of the
    capsule, as the peer does). CuPy's source-stream loop has no counterpart:
    tensorbridge enqueues no work, so no source stream can hold pending writes."""
    t, _ = sample_tensor(memory, "float32")
    created = 0x5A5A000
    # ROCm (HIP): the null stream is 0 and there is no per-thread stream.
    streams = {None: 0, created: created} if memory == "rocm" else {None: 1, 2: 2, created: created}
    for dst, expected in streams.items():
        producer = Forward(t)
        out = tb.from_dlpack(producer, stream=dst)
        assert producer.calls[-1]["stream"] == expected
        assert out.data_ptr() == t.data_ptr()
        capsule = t.__dlpack__(max_version=(1, 3), stream=expected)
        assert tb.from_dlpack(capsule).data_ptr() == t.data_ptr()


@pytest.mark.parametrize("memory", ["device", "managed"])
def test_zero_d_round_trip(memory):
    """Mirrors TestNewDLPackConversion::test_conversion_0d: a 0-d array keeps shape
    (), value and pointer."""
    if memory == "managed":
        host = np.array(1.5, dtype=np.float32)
        t, _ = managed_tensor(host)
    else:
        t, _ = device_tensor(shape=())
    out = tb.from_dlpack(Forward(t))
    assert out.shape == () and out.data_ptr() == t.data_ptr()
    if memory == "managed":
        assert out.item() == 1.5


# --------------------------------------------------------------------------
# TestDLTensorMemory
# --------------------------------------------------------------------------


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_unconsumed_capsule_holds_the_memory(max_version):
    """Mirrors TestDLTensorMemory::test_deleter: memory stays while an unconsumed
    capsule exists, after the array is gone, and is freed when the capsule dies."""
    t, counter = device_tensor(shape=(10,))
    capsule = t.__dlpack__(max_version=max_version)
    name = "dltensor" if max_version is None else "dltensor_versioned"
    assert _testing.capsule_name(capsule) == name
    assert counter.calls == 0
    del t
    _settle()
    assert counter.calls == 0
    del capsule
    _settle()
    assert counter.calls == 1


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_consumed_capsule_hands_the_memory_to_the_consumer(max_version):
    """Mirrors TestDLTensorMemory::test_deleter2: once consumed the capsule is named
    used_*, the memory lives as long as the consumer's array, and dropping the used
    capsule afterwards frees nothing twice."""
    t, counter = device_tensor(shape=(10,))
    device = t.__dlpack_device__()
    capsule = t.__dlpack__(max_version=max_version)
    name = "dltensor" if max_version is None else "dltensor_versioned"
    out = tb.from_dlpack(Dummy(capsule, device), stream=-1)
    assert _testing.capsule_name(capsule) == "used_" + name
    assert counter.calls == 0
    del t
    _settle()
    assert counter.calls == 0
    del out
    _settle()
    assert counter.calls == 1
    del capsule
    _settle()
    assert counter.calls == 1


def test_second_consumption_is_refused():
    """Mirrors TestDLTensorMemory::test_multiple_consumption_error (CuPy: ValueError
    'consumed multiple times'; tensorbridge: BufferError 'already consumed'), through
    from_dlpack and asarray, without a second free."""
    t, counter = device_tensor(shape=(10,))
    capsule = tb.to_dlpack(t)
    first = tb.from_dlpack(capsule)
    with pytest.raises(BufferError, match="already consumed"):
        tb.from_dlpack(capsule)
    with pytest.raises(BufferError, match="already consumed"):
        tb.asarray(capsule)
    del t, first, capsule
    _settle()
    assert counter.calls == 1


# --------------------------------------------------------------------------
# DLDummy-style producers (odd producers)
# --------------------------------------------------------------------------


def test_dummy_that_ignores_copy_true_is_not_taken_for_a_copy():
    """DLDummy ignores every keyword (CuPy's tests rely on it): asked for copy=True
    it shares memory without the IS_COPIED flag. Managed memory needs the
    producer's stream handshake before the host reads it, so tensorbridge asks the
    producer for the copy; one that shares without saying so is refused (never a
    "copy" that shares), and the shared import is released."""
    host = _host_sample("float32")
    capsule, counter = capsule_of(host, device=MANAGED)
    with pytest.raises(
        BufferError,
        match=r"copy=True on cuda_managed:0, but "
        r".*Dummy did not mark its export as a copy",
    ):
        tb.from_dlpack(Dummy(capsule, MANAGED), copy=True)
    _settle()
    assert counter.calls == 1
    np.testing.assert_array_equal(host, _host_sample("float32"))


def test_dummy_of_device_memory_on_first_import():
    """The consumer side of TestNewDLPackConversion::test_conversion_max_version and
    ::test_conversion_device, the first time a DLDummy-like type is seen: it hands
    out its one capsule per object, so a consumer must take the capsule it gets
    (CuPy and NumPy ask __dlpack_device__ first and call __dlpack__ once)."""
    fresh = type("FreshDummy", (Dummy,), {})
    t, counter = device_tensor()
    capsule = t.__dlpack__(max_version=(1, 3), stream=1)
    del t
    out = tb.from_dlpack(fresh(capsule, CUDA))
    assert out.data_ptr() == FAKE_ADDRESS and str(out.device) == "cuda:0"
    _settle()
    assert counter.calls == 0  # the memory is alive while `out` is


def test_dummy_whose_capsule_is_on_another_device_is_refused():
    """DLDummy states a device of the caller's choosing: a capsule on another device
    than __dlpack_device__ said is refused with BufferError naming both."""
    capsule, counter = _testing.make_capsule(FAKE_ADDRESS, shape=(4,), strides=(1,), device=(2, 1))
    with pytest.raises(BufferError, match=r"cuda:0.*cuda:1|cuda:1.*cuda:0"):
        tb.from_dlpack(Dummy(capsule, CUDA), stream=1)
    del capsule
    _settle()
    assert counter.calls == 1
