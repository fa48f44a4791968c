# SPDX-License-Identifier: Apache-2.0
"""convert as a middleman on GPUs: the producer is asked with the consumer's current
stream, tensorbridge never copies device memory itself, and data that needs nothing
is handed to the consumer's own importer (which then makes the stream handshake).

There is no GPU here: fake producers report CUDA/ROCm devices and record every
keyword they are given; a fake consumer framework is registered for each test."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
from producers import Producer

import tensorbridge as tb
from tensorbridge import _testing
from tensorbridge._core import Tensor
from tensorbridge._frameworks import FRAMEWORKS, Framework
from tensorbridge._frameworks.cupy import CupyFramework
from tensorbridge._frameworks.torch import TorchFramework

ADDRESS = 0x7F0000001000  # never touched: the memory is "on the GPU"
STREAM = 0xBEEF


def gpu_producer(device=(2, 0), shape=(4,), strides=None, copy_strides=None):
    """A producer of device memory whose __dlpack__ records its keywords; asked for a
    copy (copy=True) it exports `copy_strides` (default: C order) and IS_COPIED."""

    def make(**kw: Any) -> object:
        copied = kw.get("copy") is True
        layout = copy_strides if copied else strides
        if layout is None:
            layout = tuple(int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
        return _testing.make_capsule(
            ADDRESS + (0x100000 if copied else 0),
            shape=shape,
            strides=layout,
            device=device,
            flags=2 if copied else 0,  # DLPACK_FLAG_BITMASK_IS_COPIED
        )

    return Producer(make, device=device)


@pytest.fixture
def fake_gpu(monkeypatch):
    """A consumer framework named "fakegpu" that holds CUDA/ROCm memory, has a current
    stream, refuses negative strides, and records what it is given."""
    calls: list[tuple[str, Any]] = []

    class FakeGpuFramework(Framework):
        name = "fakegpu"
        modules = ("fakegpu",)
        negative_strides = False
        path = "fakegpu.from_dlpack"
        stream: int | None = STREAM

        @classmethod
        def module(cls) -> Any:
            return types.SimpleNamespace(from_dlpack=cls.importer())

        @classmethod
        def importer(cls) -> Any:
            def import_(obj: Any) -> Any:  # as a real consumer: asks on its own stream
                calls.append(("importer", obj))
                if "max_version" in obj.accepts:
                    obj.__dlpack__(stream=cls.stream, max_version=(1, 3))
                else:  # a legacy producer
                    obj.__dlpack__(stream=cls.stream)
                return obj

            return import_

        @classmethod
        def current_stream(cls, device: Any) -> int | None:
            calls.append(("current_stream", device))
            return cls.stream

        @classmethod
        def make(cls, t: Tensor) -> Any:
            calls.append(("make", t))
            return t

        @classmethod
        def fast_maker(cls) -> Any:  # so that it has cached routes
            return lambda t: calls.append(("route make", t)) or t

        @classmethod
        def dtype_name(cls, obj: Any) -> str:
            # (The producers here make float32; reading one again would be recorded.)
            return obj.dtype.name if type(obj) is Tensor else "float32"

    monkeypatch.setitem(FRAMEWORKS, "fakegpu", FakeGpuFramework)
    FakeGpuFramework.calls = calls
    return FakeGpuFramework


def streams(producer: Producer) -> list[Any]:
    return [kw.get("stream", "absent") for kw in producer.calls]


def offset_producer(device=(2, 0)):
    """Device memory starting 8 bytes into its allocation (a consumer that ignores
    byte_offset needs it folded: a transform tensorbridge makes itself)."""

    def make(**kw: Any) -> object:
        return _testing.make_capsule(
            ADDRESS, shape=(2,), strides=(1,), device=device, byte_offset=8
        )

    return Producer(make, device=device)


def test_the_producer_is_asked_with_the_consumers_stream_and_handed_over(fake_gpu):
    x = gpu_producer()
    result = tb.convert(x, "fakegpu")
    # Read once with the consumer's current stream, then handed to its own importer:
    # the object itself, not a Tensor of ours (the consumer makes its own handshake).
    # Our read asks for no ordering (-1); the one ordering request is the consumer's.
    assert result is x
    assert streams(x) == [-1, STREAM]
    assert [c[0] for c in fake_gpu.calls] == ["current_stream", "importer"]
    assert fake_gpu.calls[0][1] == "cuda:0"


def test_explain_shows_the_stream_and_does_not_synchronise(fake_gpu):
    x = gpu_producer()
    plan = tb.explain(x, "fakegpu")
    assert plan.stream == STREAM and plan.shares_memory
    assert f"stream:  {STREAM:#x}, fakegpu's current stream" in str(plan)
    assert "own importer on the source object" in plan.path
    assert streams(x) == [-1]  # metadata only: no ordering asked of the producer


def test_a_framework_without_streams_gets_the_legacy_default(fake_gpu, monkeypatch):
    fake_gpu.stream = None
    monkeypatch.setattr(fake_gpu, "byte_offset", "fold")  # so that tensorbridge asks
    x = offset_producer()
    plan = tb.explain(x, "fakegpu")
    assert plan.stream is None
    assert "stream:  none: DLPack's default, the legacy default stream" in str(plan)
    tb.convert(x, "fakegpu")
    assert streams(x) == [-1, -1, 1]  # explain, the read, then CUDA's legacy default


def test_rocm_streams(fake_gpu, monkeypatch):
    fake_gpu.stream = 0  # ROCm's default stream is 0
    monkeypatch.setattr(fake_gpu, "byte_offset", "fold")
    x = offset_producer(device=(10, 1))
    tb.convert(x, "fakegpu")
    assert streams(x) == [-1, 0]
    assert fake_gpu.calls[0][1] == "rocm:1"


def test_a_needed_copy_is_asked_of_the_producer_on_the_stream(fake_gpu):
    x = gpu_producer(shape=(4,), strides=(-1,))  # negative strides: fakegpu refuses them
    plan = tb.explain(x, "fakegpu")
    assert not plan.shares_memory
    assert "fakegpu cannot take negative strides" in plan.copies
    assert any("asked of the producer" in n for n in plan.notes)
    result = tb.convert(x, "fakegpu")
    assert streams(x) == [-1, -1, STREAM]  # explain, the read, the copy request
    copy_call = x.calls[-1]
    assert copy_call["copy"] is True
    assert type(result) is Tensor and result.strides == (1,)
    assert result.data_ptr() == ADDRESS + 0x100000  # the producer's copy, not ours
    assert [c[0] for c in fake_gpu.calls if c[0] != "current_stream"] == ["make"]


def test_a_producer_copy_that_still_does_not_fit_is_refused(fake_gpu):
    x = gpu_producer(strides=(-1,), copy_strides=(-1,))
    with pytest.raises(BufferError, match="the producer's copy still does not fit fakegpu"):
        tb.convert(x, "fakegpu")


def test_device_memory_is_never_copied_or_cast_here(fake_gpu):
    t = tb.from_dlpack(gpu_producer(strides=(-1,)), stream=-1)  # a Tensor: no producer
    with pytest.raises(BufferError, match="tensorbridge does not copy cuda:0 memory itself"):
        tb.convert(t, "fakegpu")
    with pytest.raises(BufferError, match="tensorbridge does not compute on cuda:0 memory"):
        tb.convert(gpu_producer(), "fakegpu", dtype="float64")
    with pytest.raises(BufferError, match="copy=False, but fakegpu cannot take negative"):
        tb.convert(gpu_producer(strides=(-1,)), "fakegpu", copy=False)


def test_transforms_are_made_by_tensorbridge_after_the_stream_handshake(fake_gpu, monkeypatch):
    # A consumer that ignores byte_offset: the offset is folded by tensorbridge, so
    # the producer is asked with the consumer's stream and a Tensor is handed over.
    monkeypatch.setattr(fake_gpu, "byte_offset", "fold")
    x = offset_producer()
    result = tb.convert(x, "fakegpu")
    assert type(result) is Tensor and result.data_ptr() == ADDRESS + 8
    assert streams(x) == [-1, STREAM]  # the metadata, then the one ordered request
    assert [c[0] for c in fake_gpu.calls] == ["current_stream", "make"]


def test_host_memory_is_not_asked_with_a_stream(fake_gpu):
    a = np.arange(4.0)
    x = Producer(
        lambda **kw: _testing.make_capsule(a, shape=(4,), strides=(1,), dtype=(2, 64, 1)),
        device=(1, 0),
    )
    tb.convert(x, "fakegpu")
    assert all(kw.get("stream") is None for kw in x.calls)
    assert not any(c[0] == "current_stream" for c in fake_gpu.calls)


def test_torch_current_stream(monkeypatch):
    handles = {0: 0, 1: 0x1234}

    def current_stream(index):
        return types.SimpleNamespace(cuda_stream=handles[index])

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(current_stream=current_stream))
    monkeypatch.setattr(TorchFramework, "module", classmethod(lambda cls: fake))
    assert TorchFramework.current_stream(tb.Device("cuda:0")) == 1  # default: legacy
    assert TorchFramework.current_stream(tb.Device("cuda:1")) == 0x1234
    assert TorchFramework.current_stream(tb.Device("rocm:0")) == 0  # ROCm's default


def test_cupy_current_stream(monkeypatch):
    current = {"ptr": 0}

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    cuda = types.SimpleNamespace(
        Device=Device, get_current_stream=lambda: types.SimpleNamespace(ptr=current["ptr"])
    )
    monkeypatch.setattr(
        CupyFramework, "module", classmethod(lambda cls: types.SimpleNamespace(cuda=cuda))
    )
    assert CupyFramework.current_stream(tb.Device("cuda:0")) == 1
    current["ptr"] = 0xABC
    assert CupyFramework.current_stream(tb.Device("cuda:0")) == 0xABC


@pytest.mark.parametrize("legacy", [False, True])
def test_routes_leave_device_memory_to_the_planner(fake_gpu, legacy):
    # A producer type whose first objects held CPU memory has a __dlpack__ route;
    # its objects of device memory go to the planner, which asks them once, on the
    # target's stream: never built from a read made without ordering.
    from producers import capsule_of

    accepts = ("stream",) if legacy else ("stream", "max_version", "dl_device", "copy")
    cls = type("Mixed", (Producer,), {})
    a = np.arange(4.0)
    cpu = cls(lambda **kw: capsule_of(a, versioned=not legacy), device=(1, 0), accepts=accepts)
    tb.convert(cpu, "fakegpu")
    tb.convert(cpu, "fakegpu")
    assert FRAMEWORKS["fakegpu"].fast_target().route_of(cpu) == _core_routes()["PROTOCOL"]

    def make(**kw: Any) -> object:
        return _testing.make_capsule(
            ADDRESS, shape=(4,), strides=(1,), device=(2, 0), versioned=not legacy
        )

    gpu = cls(make, device=(2, 0), accepts=accepts)
    for i in range(3):
        gpu.calls.clear()
        assert tb.convert(gpu, "fakegpu") is gpu  # handed to the consumer's importer
        ordered = [s for s in streams(gpu) if s not in (-1, "absent")]
        assert ordered == [STREAM], (i, streams(gpu))
    assert streams(gpu) == [-1, STREAM]  # once the type is known: no extra request


def _core_routes():
    from tensorbridge import _core

    return _core._route_constants()


def test_a_producer_that_exports_other_memory_when_asked_again_is_refused(fake_gpu, monkeypatch):
    # The plan is made from a read with -1; the read on the target's stream must
    # give the same memory, or the plan does not hold.
    monkeypatch.setattr(fake_gpu, "byte_offset", "fold")
    addresses = iter([ADDRESS, ADDRESS + 0x1000])

    def make(**kw: Any) -> object:
        return _testing.make_capsule(
            next(addresses), shape=(2,), strides=(1,), device=(2, 0), byte_offset=8
        )

    with pytest.raises(BufferError, match="exported other memory when asked again"):
        tb.convert(Producer(make, device=(2, 0)), "fakegpu")


def test_explain_says_a_device_producer_type_is_planned(fake_gpu):
    from producers import capsule_of

    cls = type("Mixed", (Producer,), {})
    cpu = cls(lambda **kw: capsule_of(np.arange(4.0)), device=(1, 0))
    tb.convert(cpu, "fakegpu")
    assert tb.explain(cpu, "fakegpu").route.startswith("in C after the first call")
    gpu = cls(
        lambda **kw: _testing.make_capsule(ADDRESS, shape=(4,), strides=(1,), device=(2, 0)),
        device=(2, 0),
    )
    assert tb.explain(gpu, "fakegpu").route == (
        "planned on every call (device memory is asked for on the target's stream)"
    )
    tb.convert(gpu, "fakegpu")  # its type has now exported device memory
    assert tb.explain(cpu, "fakegpu").route == (
        "planned on every call (this type has exported device memory)"
    )
