# SPDX-License-Identifier: Apache-2.0
"""convert's cached routes (_routes.pxi): decided once per (source type, target) by the
planner, run in C afterwards, never outliving their facts."""

from __future__ import annotations

import gc
import sys
import types
import weakref

import numpy as np
import pytest
from needs import needs
from producers import numpy_producer

import tensorbridge as tb
from tensorbridge import _core
from tensorbridge._frameworks import FRAMEWORKS

R = _core._route_constants()


def fast(name):
    return FRAMEWORKS[name].fast_target()


@pytest.fixture
def no_planner(monkeypatch):
    """Make every planner hook of the given targets raise: a conversion that still
    succeeds ran along its cached route."""

    def forbid(*names):
        def boom(*args, **kwargs):
            raise AssertionError("the planner was asked")

        for name in names:
            monkeypatch.setattr(FRAMEWORKS[name], "precopy_reasons", classmethod(boom))

    return forbid


@needs("torch")
def test_a_route_is_decided_once_then_runs_without_the_planner(no_planner):
    import torch

    a = np.arange(4.0)
    tb.convert(a, "torch")  # the planner decides, and caches the route
    assert fast("torch").route_of(a) == R["NDARRAY"]
    no_planner("torch")
    b = np.arange(5.0)
    x = tb.convert(b, "torch")
    assert isinstance(x, torch.Tensor) and x.data_ptr() == b.ctypes.data
    # What the route cannot take as it is goes back to the planner (here: refused).
    with pytest.raises(AssertionError, match="the planner was asked"):
        tb.convert(b[::-1], "torch")


def test_routes_by_source_kind():
    a = np.arange(3.0)
    tb.convert(a, "numpy")
    assert fast("numpy").route_of(a) == R["NDARRAY"] | R["HANDOFF"]
    t = tb.asarray(a)
    tb.convert(t, "numpy")
    assert fast("numpy").route_of(t) == R["TENSOR"]
    scalar = np.float64(1.0)  # a value: always planned (it is copied)
    tb.convert(scalar, "numpy")
    assert fast("numpy").route_of(scalar) == -1
    capsule = tb.to_dlpack(t)
    tb.convert(capsule, "numpy")
    assert fast("numpy").route_of(capsule) == -1
    producer = numpy_producer(np.arange(3.0))  # an unknown producer: read, never handed on
    tb.convert(producer, "numpy")
    assert fast("numpy").route_of(producer) == R["PROTOCOL"]


@needs("torch", "tvm_ffi")
def test_handoffs_check_what_the_importer_would_get_wrong():
    import torch

    x = torch.arange(4.0)
    tb.convert(x, "tvm_ffi")
    mode = fast("tvm_ffi").route_of(x)
    assert mode == R["TABLE"] | R["HANDOFF"] | R["CHECK_DTYPE"] | R["TORCH_BITS"]
    # tvm_ffi takes complex data without complaint and cannot hold it: refused.
    tb.convert(np.arange(3.0), "tvm_ffi")
    for z in (torch.tensor([1 + 2j]), np.array([1 + 2j])):
        with pytest.raises(BufferError, match=r"tvm_ffi has no complex(64|128) type"):
            tb.convert(z, "tvm_ffi")
    # A torch negative-bit view: resolved (the planner copies), not its raw memory.
    v = torch.tensor([1 + 2j]).conj().imag
    assert tb.from_dlpack(tb.convert(v, "tvm_ffi")).tolist() == [-2.0]
    # A read-only NumPy array: tvm_ffi's importer would refuse it; shared through a view.
    ro = np.arange(3.0)
    tb.convert(np.arange(3.0), "tvm_ffi")
    assert fast("tvm_ffi").route_of(ro) & R["WRITABLE_ONLY"]
    ro.flags.writeable = False
    assert tb.convert(ro, "tvm_ffi").data_ptr() == ro.ctypes.data


@needs("jax")
def test_immutable_sources_handed_to_numpy_stay_read_only():
    import jax.numpy as jnp

    x = jnp.arange(4.0)
    first = tb.convert(x, "numpy")
    assert fast("numpy").route_of(x) & R["MARK_READONLY"]
    second = tb.convert(x, "numpy")
    assert not first.flags.writeable and not second.flags.writeable
    assert second.tolist() == [0.0, 1.0, 2.0, 3.0]


@needs("pyarrow")
def test_pyarrow_sources():
    import pyarrow as pa

    arr = pa.array([1.0, 2.0])
    tb.convert(arr, "numpy")
    out = tb.convert(arr, "numpy")
    assert not out.flags.writeable and out.tolist() == [1.0, 2.0]
    chunked = pa.chunked_array([[1.0], [2.0]])  # needs prepare_source: never routed
    tb.convert(chunked, "numpy")
    assert fast("numpy").route_of(chunked) == -1
    bools = pa.array([True, False])
    tb.convert(bools, "numpy")
    assert fast("numpy").route_of(bools) == -1


@needs("jax")
def test_jax_x64_is_asked_on_every_64_bit_call():
    import jax

    enabled = jax.config.read("jax_enable_x64")
    try:
        jax.config.update("jax_enable_x64", True)
        a = np.zeros(16)  # float64; a fresh NumPy buffer may be unaligned: copied
        assert tb.convert(a, "jax").dtype == np.float64
        assert fast("jax").route_of(a) == R["NDARRAY"]
        jax.config.update("jax_enable_x64", False)
        with pytest.raises(BufferError, match="jax is running without 64-bit types"):
            tb.convert(a, "jax")
        assert tb.convert(a.astype(np.float32), "jax").dtype == np.float32
    finally:
        jax.config.update("jax_enable_x64", enabled)


@needs("jax")
def test_misaligned_data_is_copied_in_c_as_the_planner_would(no_planner):
    import jax

    buf = np.zeros(1025, dtype=np.float32)
    tb.convert(buf, "jax")
    no_planner("jax")
    start = next(i for i in range(16) if (buf.ctypes.data + 4 * i) % 64)
    view = buf[start : start + 1000]
    view[:] = np.arange(1000)
    out = tb.convert(view, "jax")
    assert isinstance(out, jax.Array) and out[999] == 999.0


class _Producer:
    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return (1, 0)


def test_a_type_that_changes_is_decided_again():
    cls = type("Changing", (_Producer,), {})
    x = cls(np.arange(3.0))
    tb.convert(x, "numpy")
    assert fast("numpy").route_of(x) == R["PROTOCOL"]
    cls.__c_dlpack_exchange_api__ = 0  # gains (here: a bad) exchange table
    assert fast("numpy").route_of(x) == -1
    assert tb.convert(x, "numpy").tolist() == [0.0, 1.0, 2.0]
    assert fast("numpy").route_of(x) == R["PROTOCOL"]  # decided again


def test_an_import_or_clear_routes_forgets_every_route(monkeypatch):
    x = _Producer(np.arange(3.0))
    tb.convert(x, "numpy")
    assert fast("numpy").route_of(x) == R["PROTOCOL"]
    monkeypatch.setitem(sys.modules, "tb_test_new_framework", types.ModuleType("m"))
    assert fast("numpy").route_of(x) == -1
    tb.convert(x, "numpy")
    assert fast("numpy").route_of(x) == R["PROTOCOL"]
    _core.clear_routes()
    assert fast("numpy").route_of(x) == -1


def test_the_cache_is_bounded_and_keeps_no_type_alive():
    refs = []
    for i in range(100):  # more types than slots: older ones are evicted
        cls = type(f"P{i}", (_Producer,), {})
        x = cls(np.full(2, float(i)))
        assert tb.convert(x, "numpy").tolist() == [float(i)] * 2
        assert tb.convert(x, "numpy").tolist() == [float(i)] * 2
        refs.append(weakref.ref(cls))
    del cls, x
    gc.collect()
    assert all(r() is None for r in refs)
