# SPDX-License-Identifier: Apache-2.0
"""from_dlpack's negotiation with producers (_negotiate.pxi): which __dlpack__ call,
streams, devices, copy=, and what a producer may hand back."""

from __future__ import annotations

import numpy as np
import pytest
from producers import Producer, capsule_of, fake_device_producer, legacy_producer, numpy_producer

import tensorbridge as tb

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


@pytest.mark.parametrize("stream", [None, -1])
def test_a_typeerror_subclass_is_the_producers_refusal_not_a_missing_keyword(stream):
    # PyArrow raises ArrowTypeError (a TypeError) for an array with nulls: the legacy
    # call would refuse it again, after a DeprecationWarning of PyArrow's.
    class NullsError(TypeError):
        pass

    def refuse(**kw):
        raise NullsError("Can only use DLPack on arrays with no nulls.")

    for kwargs in ({}, {"stream": stream}):
        p = Producer(refuse)
        p.__class__ = type("Refusing", (Producer,), {})
        with pytest.raises(NullsError, match="no nulls") as info:
            tb.from_dlpack(p, **kwargs)
        assert p.calls == [{"max_version": (1, 3)}] or p.calls == [
            {"max_version": (1, 3), "stream": stream}
        ]
        assert isinstance(info.value.__cause__, NullsError)


def test_a_typeerror_subclass_naming_an_argument_is_a_signature_without_max_version():
    # Boost.Python raises ArgumentError (a TypeError) when no overload takes the call.
    class ArgumentError(TypeError):
        pass

    a = np.arange(3.0)

    def old_style(**kw):
        if kw:
            raise ArgumentError(
                "Python argument types in\n    Producer.__dlpack__(Producer)\n"
                "did not match C++ signature"
            )
        return capsule_of(a, versioned=False)

    p = Producer(old_style)
    p.__class__ = type("BoostProducer", (Producer,), {})
    assert tb.from_dlpack(p).tolist() == [0.0, 1.0, 2.0]
    assert p.calls == [{"max_version": (1, 3)}, {}]


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
