# SPDX-License-Identifier: Apache-2.0
"""convert's cached routes (_routes.pxi): decided once per (source type, target) by the
planner, run in C afterwards, never outliving their facts."""

from __future__ import annotations

import gc
import sys
import types
import warnings
import weakref

import numpy as np
import pytest
from needs import needs
from producers import Producer, capsule_of, fake_device_producer, numpy_producer

import tensorbridge as tb
from tensorbridge import _core, _testing
from tensorbridge._core import Tensor
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
    assert fast("numpy").route_of(a) == R["SAME"]  # its own array: returned itself
    assert tb.convert(a, "numpy") is a
    t = tb.asarray(a)
    tb.convert(t, "numpy")
    assert fast("numpy").route_of(t) == R["TENSOR"]
    assert tb.convert(t, "tensorbridge") is t and fast("tensorbridge").route_of(t) == R["SAME"]
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
    assert mode == R["TABLE"] | R["HANDOFF"] | R["CAPSULE"] | R["TORCH_BITS"]
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


def _arange_of(name, n):
    if name == "torch":
        import torch

        return torch.arange(float(n))
    import paddle

    return paddle.arange(n, dtype="float32")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("torch", marks=needs("torch", "tvm_ffi")),
        pytest.param("paddle", marks=needs("paddle", "tvm_ffi")),
    ],
)
def test_table_sources_reach_tvm_ffi_in_a_handed_tensor(name, no_planner):
    # tvm_ffi.from_dlpack takes the managed tensor through our table (a refusal
    # would turn the route into a read here): no planner, the same memory, and the
    # source's reference released with the result.
    import tvm_ffi

    tb.convert(_arange_of(name, 3), "tvm_ffi")
    mode = fast("tvm_ffi").route_of(_arange_of(name, 3))
    assert mode & 7 == R["TABLE"] and mode & R["HANDOFF"] and mode & R["CAPSULE"]
    no_planner("tvm_ffi")
    x = _arange_of(name, 6)
    if name == "torch":
        uses = x._use_count()
    outs = [tb.convert(x, "tvm_ffi") for _ in range(3)]
    for out in outs:
        assert type(out) is tvm_ffi.Tensor
        assert tb.from_dlpack(out).data_ptr() == x.data_ptr()
        assert np.from_dlpack(out).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert fast("tvm_ffi").route_of(x) == mode and not fast("tvm_ffi").uncarried(x)
    if name == "torch":
        assert x._use_count() > uses
        del outs, out
        gc.collect()
        assert x._use_count() == uses


@needs("torch", "tvm_ffi")
def test_an_importer_that_will_not_read_our_table_costs_one_refusal(monkeypatch):
    # tvm-ffi before 0.1.5 reads only __c_dlpack_exchange_api__: it asks a _Handed
    # for __dlpack__(), which refuses. Simulated on a fresh FastTarget: the route is
    # read here from then on, converts stay right, and explain says why.
    import torch
    import tvm_ffi

    framework = FRAMEWORKS["tvm_ffi"]
    original = framework.fast_target()
    refused = []

    def old_from_dlpack(obj):
        if type(obj) is _core._Handed:
            refused.append(obj.__dlpack_device__())
            obj.__dlpack__()  # BufferError: only through the table
        return tvm_ffi.from_dlpack(obj)

    monkeypatch.setattr(framework, "importer", classmethod(lambda cls: old_from_dlpack))
    monkeypatch.setattr(framework, "fast_cache", None)
    _core.clear_routes()  # (so the planner decides again, with the new target)
    try:
        x = torch.arange(4.0)
        tb.convert(x, "tvm_ffi")  # planned; the route is cached
        target = framework.fast_target()
        assert target is not original
        assert target.route_of(x) & R["CAPSULE"]
        for _ in range(3):
            out = tb.convert(x, "tvm_ffi")
            assert tb.from_dlpack(out).data_ptr() == x.data_ptr()
        assert refused == [(1, 0)]  # refused once; read and made after
        assert target.route_of(x) == R["TABLE"] | R["TORCH_BITS"]
        route = tb.explain(x, "tvm_ffi").route
        assert "read through its type's DLPack C exchange table, then made" in route
        assert "refused on the way to tvm_ffi's importer before" in route
    finally:
        _core.set_fast_target("tvm_ffi", original)
        _core.clear_routes()


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
    # Into pyarrow: its own arrays and tensors are returned themselves; its chunked
    # arrays are planned (one chunk is shared, more are combined).
    sliced = pa.array([1.0, 2.0, 3.0]).slice(1)
    tb.convert(sliced, "pyarrow")
    assert fast("pyarrow").route_of(sliced) == R["SAME"]
    assert tb.convert(sliced, "pyarrow") is sliced and tb.convert(bools, "pyarrow") is bools
    grid = pa.Tensor.from_numpy(np.arange(6.0).reshape(2, 3))
    assert tb.convert(grid, "pyarrow") is grid
    one = pa.chunked_array([[1.0, 2.0]])
    assert tb.convert(one, "pyarrow").to_pylist() == [1.0, 2.0]
    assert fast("pyarrow").route_of(one) == -1


@needs("pyarrow")
@pytest.mark.parametrize("target", [n for n in FRAMEWORKS if n not in ("cupy", "pyarrow")])
def test_pyarrow_is_never_asked_for_a_legacy_capsule(target, capfd):
    # PyArrow 26 answers __dlpack__() without max_version with a DeprecationWarning.
    # Importers that ask that way (MLX, TensorFlow, tvm-ffi), or fall back to it after a
    # TypeError (NumPy: PyArrow's ArrowTypeError for nulls) never get a PyArrow array.
    import pyarrow as pa

    framework = FRAMEWORKS[target]
    if not framework.available():
        pytest.skip(f"needs {target}")
    # (float32: JAX without 64-bit types takes it too)
    clean, nulls = pa.array([1.0, 2.0, 3.0], pa.float32()), pa.array([1.0, None], pa.float32())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):  # planned, then along the route
            assert tb.asarray(tb.convert(clean, target)).tolist() == [1.0, 2.0, 3.0]
            for call in (tb.convert, tb.explain):
                with pytest.raises(BufferError, match="1 null"):
                    call(nulls, target)
    assert [str(w.message) for w in caught] == []
    assert "DeprecationWarning" not in capfd.readouterr().err
    mode = fast(target).route_of(clean) if fast(target) is not None else -1
    if framework.importer_asks_legacy:
        assert mode == R["PROTOCOL"]  # read here, with max_version
    elif mode > 0 and mode & R["HANDOFF"]:
        assert mode & (R["NO_NULLS"] | R["COPY_FALSE"])


@needs("pyarrow")
@pytest.mark.parametrize("copy_false", [True, False], ids=["NumPy 2.1+", "older NumPy"])
def test_a_pyarrow_handoff_to_numpy_never_lets_it_ask_the_legacy_way(
    copy_false, monkeypatch, no_planner
):
    # NumPy asks __dlpack__() after a TypeError unless copy= or device= was given:
    # from 2.1 the route gives copy=False; before, it reads null_count first.
    import pyarrow as pa

    if copy_false and not FRAMEWORKS["numpy"].importer_takes_copy_false():
        pytest.skip("NumPy before 2.1 has no copy= in from_dlpack")
    numpy = FRAMEWORKS["numpy"]
    monkeypatch.setattr(numpy, "importer_takes_copy_false", classmethod(lambda cls: copy_false))
    _core.clear_routes()
    check, other = ("COPY_FALSE", "NO_NULLS") if copy_false else ("NO_NULLS", "COPY_FALSE")
    arr = pa.array([1.0, 2.0])
    tb.convert(arr, "numpy")
    assert fast("numpy").route_of(arr) & R[check] and not fast("numpy").route_of(arr) & R[other]
    grid = pa.Tensor.from_numpy(np.arange(4.0).reshape(2, 2))
    tb.convert(grid, "numpy")
    mode = fast("numpy").route_of(grid)
    assert mode & R["HANDOFF"] and not mode & R["NO_NULLS"]  # (a Tensor has no nulls)
    said = "with copy=False" if copy_false else "when it has no nulls"
    assert said in tb.explain(arr, "numpy").route
    no_planner("numpy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tb.convert(pa.array([3.0]), "numpy").tolist() == [3.0]  # along the route
        assert tb.convert(grid, "numpy").tolist() == [[0.0, 1.0], [2.0, 3.0]]
        with pytest.raises(BufferError, match=r"1 null.*fill_null"):  # the planner's
            tb.convert(pa.array([3.0, None]), "numpy")
    assert [str(w.message) for w in caught] == []
    _core.clear_routes()


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


# -- a route gives what the planner gives, for every framework's arrays ----------


def _installed():
    from tensorbridge._frameworks import names

    return [n for n in names(gpu=False) if FRAMEWORKS[n].available()]


@pytest.mark.parametrize("target", _installed())
@pytest.mark.parametrize("source", _installed())
def test_a_route_gives_what_the_planner_gives(source, target):
    from tensorbridge._cli.probes import probe
    from tensorbridge._convert import convert_general

    name_of = FRAMEWORKS[target].dtype_name
    x = probe(source).sample([1.0, 2.0, 3.0, 4.0], "float32")
    want = convert_general(x, target)  # the planner (it also caches the route)
    got = tb.convert(x, target)  # the route, when there is one
    for _ in range(2):
        assert type(got) is type(want) and name_of(got) == name_of(want)
        mine, theirs = tb.asarray(got), tb.asarray(want)
        assert mine.tolist() == theirs.tolist() == [1.0, 2.0, 3.0, 4.0]
        assert mine.readonly == theirs.readonly, "read-only-ness differs from the plan"
        shared = tb.explain(x, target).shares_memory
        assert (mine.data_ptr() == theirs.data_ptr()) == shared
        got = tb.convert(x, target)


def test_ndarray_subclasses_are_read_as_the_planner_reads_them():
    class Frozen(np.ndarray):
        def __dlpack__(self, **kw):
            view = self.view(np.ndarray)
            view.flags.writeable = False
            return view.__dlpack__(**kw)

    x = np.arange(3.0).view(Frozen)
    first = tb.convert(x, "numpy")
    assert fast("numpy").route_of(x) == R["PROTOCOL"]  # its own __dlpack__, asked
    second = tb.convert(x, "numpy")
    assert not first.flags.writeable and not second.flags.writeable
    assert tb.explain(x, "numpy").source.endswith("read-only")


@needs("torch")
@pytest.mark.parametrize("target", ["numpy", "torch", "tensorbridge"])
def test_torch_subclasses_are_read_through_their_own_dlpack(target):
    # The torch.Tensor they inherit from has an exchange table and torch routes; an
    # override of __dlpack__ must still be what is read, on every call, as
    # numpy.from_dlpack and torch.from_dlpack read it (issue 33, item 5).
    import torch

    class Doubled(torch.Tensor):
        def __dlpack__(self, **kw):
            return (self.as_subclass(torch.Tensor) * 2).__dlpack__(**kw)

    class Plain(torch.Tensor):
        pass

    x = torch.arange(3.0).as_subclass(Doubled)
    assert np.from_dlpack(x).tolist() == [0.0, 2.0, 4.0]
    for _ in range(3):  # the planner, then the cached route
        assert tb.asarray(tb.convert(x, target)).tolist() == [0.0, 2.0, 4.0]
        assert tb.from_dlpack(x).tolist() == [0.0, 2.0, 4.0]
        assert tb.asarray(x).tolist() == [0.0, 2.0, 4.0]
    assert fast(target).route_of(x) == R["PROTOCOL"]
    # A subclass that overrides nothing is still PyTorch's: returned as it is.
    y = torch.arange(3.0).as_subclass(Plain)
    assert tb.convert(y, "torch") is y
    # One that sets PyTorch's own functions overrides nothing.
    Same = type("Same", (torch.Tensor,), {"__dlpack__": torch.Tensor.__dlpack__})
    z = torch.arange(3.0).as_subclass(Same)
    assert tb.convert(z, "torch") is z and tb.from_dlpack(z).tolist() == [0.0, 1.0, 2.0]
    # An override added later is seen (the type's version tag changes).
    Plain.__dlpack__ = Doubled.__dlpack__
    assert tb.convert(y, target) is not y
    assert tb.asarray(tb.convert(y, target)).tolist() == [0.0, 2.0, 4.0]


@needs("array_api_strict", "pyarrow")
def test_array_api_strict_is_handed_what_needs_no_mark(no_planner):
    import array_api_strict as xp
    import pyarrow as pa

    # Objects whose export says read-only or writable go to xp.from_dlpack as they are.
    arr = pa.array(np.arange(4.0))
    a = np.arange(3.0)
    ro = np.arange(3.0)
    ro.flags.writeable = False
    xs = (arr, a, ro)
    for x in xs:  # (the first round imports what reading the results needs)
        tb.asarray(tb.convert(x, "array_api_strict"))
    for x in xs:
        tb.convert(x, "array_api_strict")
        # (PyArrow arrays only when they have no nulls: see the legacy-call test)
        want = R["NDARRAY"] | R["HANDOFF"]
        if type(x) is not np.ndarray:
            want = R["PROTOCOL"] | R["HANDOFF"] | R["NO_NULLS"]
        assert fast("array_api_strict").route_of(x) == want
    no_planner("array_api_strict")
    got, shared, still_ro = (tb.convert(x, "array_api_strict") for x in xs)
    assert type(got) is type(xp.asarray(1.0)) and got.dtype == xp.float64
    assert tb.asarray(got).readonly and tb.asarray(got).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert not tb.asarray(shared).readonly
    assert tb.asarray(shared).data_ptr() == a.ctypes.data
    assert tb.asarray(still_ro).readonly


@needs("array_api_strict", "pyarrow")
def test_what_array_api_strict_refuses_on_a_handoff_goes_to_the_planner():
    import pyarrow as pa

    # Refused by array_api_strict.from_dlpack (float16), by pyarrow's export (nulls):
    # the planner's error, for objects of the types whose route is a handoff.
    for x in (np.arange(2.0), pa.array([1.0])):
        for _ in range(3):
            tb.convert(x, "array_api_strict")
        assert fast("array_api_strict").route_of(x) & R["HANDOFF"]
    with pytest.raises(BufferError, match="array_api_strict has no float16"):
        tb.convert(np.arange(2, dtype=np.float16), "array_api_strict")
    with pytest.raises(BufferError, match="1 null"):
        tb.convert(pa.array([1.0, None]), "array_api_strict")
    assert fast("array_api_strict").route_of(np.arange(2.0)) & R["HANDOFF"]  # it stays


@needs("array_api_strict", "pyarrow")
@pytest.mark.parametrize("to", ["array_api_strict", "numpy"])
def test_pyarrow_tensors_over_writable_memory_stay_read_only(to):
    # pyarrow.Tensor exports no READ_ONLY over writable memory (Tensor.from_numpy):
    # NumPy's import of it is marked read-only, as the planner makes it; an Array
    # cannot be marked, so array_api_strict is not handed one.
    import pyarrow as pa

    t = pa.Tensor.from_numpy(np.arange(6.0).reshape(2, 3))
    results = [tb.convert(t, to) for _ in range(3)]
    mode = fast(to).route_of(t)
    assert mode > 0
    if to == "numpy":
        assert mode & R["HANDOFF"] and mode & R["MARK_READONLY"]
    else:
        assert not mode & R["HANDOFF"]
    assert [tb.asarray(r).readonly for r in results] == [True] * 3
    assert tb.explain(t, to).shares_memory


@needs("array_api_strict", "tvm_ffi")
def test_tvm_ffi_tensors_are_handed_to_array_api_strict(no_planner):
    import tvm_ffi

    x = tvm_ffi.from_dlpack(np.arange(3.0))
    for _ in range(3):
        tb.convert(x, "array_api_strict")
    assert fast("array_api_strict").route_of(x) == R["PROTOCOL"] | R["HANDOFF"]
    no_planner("array_api_strict")
    got = tb.asarray(tb.convert(x, "array_api_strict"))
    assert not got.readonly and got.tolist() == [0.0, 1.0, 2.0]
    assert got.data_ptr() == tb.from_dlpack(x).data_ptr()


@needs("array_api_strict", "mlx")
def test_legacy_exporters_are_not_handed_to_array_api_strict():
    import mlx.core as mx

    x = mx.arange(3.0)
    first, second = tb.convert(x, "array_api_strict"), tb.convert(x, "array_api_strict")
    mode = fast("array_api_strict").route_of(x)
    assert mode > 0 and not mode & R["HANDOFF"]  # the result would need a mark
    assert not tb.asarray(first).readonly and not tb.asarray(second).readonly  # mutable


@needs("mlx")
def test_mutable_legacy_exporters_handed_to_numpy_stay_writable():
    import mlx.core as mx

    x = mx.arange(3.0)
    first, second = tb.convert(x, "numpy"), tb.convert(x, "numpy")
    assert (
        fast("numpy").route_of(x) & R["HANDOFF"] and fast("numpy").route_of(x) & R["MARK_WRITABLE"]
    )
    assert first.flags.writeable and second.flags.writeable  # as the plan says
    second[0] = 7.0  # MLX's memory, shared
    assert x.tolist()[0] == 7.0 and first[0] == 7.0


@needs("jax")
def test_jax_complex64_needs_no_x64():
    import jax

    enabled = jax.config.read("jax_enable_x64")
    try:
        jax.config.update("jax_enable_x64", False)
        z = np.array([1 + 2j], dtype=np.complex64)
        assert tb.explain(z, "jax").dtype == "complex64"
        assert tb.convert(z, "jax").dtype == np.complex64
        assert tb.convert(z, "jax").dtype == np.complex64  # along the route
    finally:
        jax.config.update("jax_enable_x64", enabled)


@needs("torch")
def test_a_producer_read_by_a_route_is_not_asked_again_by_the_planner():
    from producers import Producer, capsule_of

    base = np.arange(6.0)

    def make(**kw):
        return capsule_of(base[::-1])  # negative strides: torch needs a copy

    cls = type("Reversed", (Producer,), {})
    x = cls(make)
    tb.convert(x, "torch")
    x.calls.clear()
    out = tb.convert(x, "torch")  # the route reads, gives up, the planner copies
    assert out.tolist() == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]
    assert len(x.calls) == 1


def test_a_pair_of_makers_is_chosen_by_ndim_in_c():
    made = []

    def one_d(t):
        made.append(("1-d", t.shape))
        return t

    def other(t):
        made.append(("n-d", t.shape))
        return t

    target, _ = _carried_target(maker=(one_d, other))
    for shape in [(4,), (2, 2), (), (1, 4)]:
        t = tb.zeros(shape, dtype="float32")
        assert target(t) is t
    assert made == [("1-d", (4,)), ("n-d", (2, 2)), ("n-d", ()), ("n-d", (1, 4))]
    for bad in [(one_d,), (one_d, other, other), (one_d, "x")]:
        with pytest.raises(TypeError, match=r"\(for 1-d tensors, for the others\)"):
            _carried_target(maker=bad)


@needs("pyarrow")
def test_pyarrow_arrays_and_tensors_are_made_by_the_route(no_planner):
    import pyarrow as pa

    a, grid = np.arange(4.0), np.arange(6.0).reshape(2, 3)
    tb.convert(a, "pyarrow"), tb.convert(grid, "pyarrow")  # (the first call plans)
    no_planner("pyarrow")
    vector, tensor = tb.convert(a, "pyarrow"), tb.convert(grid, "pyarrow")
    assert type(vector) is pa.DoubleArray and vector.to_pylist() == a.tolist()
    assert type(tensor) is pa.Tensor and tensor.to_numpy().tolist() == grid.tolist()


def test_remember_refuses_modes_that_would_misread_the_type():
    tb.convert(np.arange(2.0), "numpy")
    target = fast("numpy")
    for tp, mode in [(list, R["TENSOR"]), (_Producer, R["NDARRAY"]), (_Producer, R["TABLE"])]:
        with pytest.raises(ValueError, match="cannot read"):
            target.remember(tp, mode)
    with pytest.raises(TypeError, match="expected a type"):
        target.remember(np.arange(2.0), R["NDARRAY"])


def test_mark_readonly_and_writable_only_in_c():
    tb.convert(np.arange(2.0), "numpy")
    target = fast("numpy")
    try:
        target.remember(np.ndarray, R["NDARRAY"] | R["HANDOFF"] | R["MARK_READONLY"])
        a = np.arange(3.0)
        out = tb.convert(a, "numpy")
        assert not out.flags.writeable and a.flags.writeable
        assert np.shares_memory(out, a)
    finally:
        _core.clear_routes()


@needs("tvm_ffi")
def test_read_only_arrays_reach_tvm_ffi_through_the_route(no_planner):
    tb.convert(np.arange(3.0), "tvm_ffi")
    no_planner("tvm_ffi")
    ro = np.arange(3.0)
    ro.flags.writeable = False  # tvm_ffi's importer would refuse it: read and shared
    assert tb.from_dlpack(tb.convert(ro, "tvm_ffi")).data_ptr() == ro.ctypes.data


def test_explain_says_which_route():
    a = np.arange(3.0)
    assert tb.explain(a, "numpy").route == "in C after the first call: the source itself"
    assert tb.explain(tb.asarray(a), "tensorbridge").path.startswith("the source itself")
    p = _recording(a)  # (a type of its own, never marked by other tests)
    assert tb.explain(p, "numpy").route == (
        "in C after the first call: read through its __dlpack__, then made by numpy"
    )
    t = tb.asarray(a)
    assert "read through the Tensor as it is, then made by numpy" in tb.explain(t, "numpy").route
    assert tb.explain(a[::-1], "tensorbridge").route.endswith("then made by tensorbridge")
    assert tb.explain(a, "numpy", copy=True).route == "planned on every call (an option is given)"
    assert "a capsule is read once" in tb.explain(tb.to_dlpack(t), "numpy").route
    assert "needs fixing first" in tb.explain(np.float64(1.0), "numpy").route
    assert "route:   in C after the first call" in str(tb.explain(a, "numpy"))


@needs("tvm_ffi")
def test_explain_route_for_device_memory_handed_off_says_so():
    # CUDA managed memory from a type NumPy's route hands off (tvm-ffi's Tensor): the
    # cached handoff gives it to numpy.from_dlpack, which makes the stream handshake,
    # and explain says so (it said "planned on every call").
    fake_tvm = type("Tensor", (Producer,), {"__module__": "tvm_ffi.core"})

    def managed():
        x = fake_device_producer((13, 0))
        x.__class__ = fake_tvm
        return x

    for _ in range(3):
        tb.convert(managed(), "numpy")
    x = managed()
    assert fast("numpy").route_of(x) == R["PROTOCOL"] | R["HANDOFF"]
    assert tb.explain(x, "numpy").route == (
        "in C after the first call: the source object goes to numpy's own importer, "
        "which makes the stream handshake"
    )
    y = managed()
    tb.convert(y, "numpy")
    assert len(y.calls) == 1  # numpy.from_dlpack's request; the planner asked nothing


@needs("torch")
def test_explain_route_for_data_the_route_gives_back():
    plan = tb.explain(np.arange(3.0)[::-1], "torch")
    assert plan.route.endswith("data it cannot take as it is (as here) is planned")


@needs("torch", "tvm_ffi")
@pytest.mark.parametrize("to", ["tvm_ffi", "numpy", "tensorbridge"])
def test_explain_route_for_torch_bit_views_says_they_are_planned(to):
    import torch

    plain = torch.arange(3.0)
    tb.convert(plain, to)  # the route is cached
    planned = "data it cannot take as it is (as here) is planned"
    assert tb.explain(plain, to).route.startswith("in C after the first call")
    assert not tb.explain(plain, to).route.endswith(planned)
    assert tb.explain(torch._neg_view(plain), to).route.endswith(planned)


# -- carried routes: the target's importer asks the source through a checker ----------


#: The layout and dtype options of the hand-made FastTargets below: float32 host data,
#: C order only, offsets taken, read-only taken, no alignment.
FLOAT32_HOST = dict(
    target_type=None,
    dtypes=[tb.float32],
    negative_strides=False,
    noncompact=False,
    permuted=False,
    offset_ok=True,
    readonly_ok=True,
    alignment=0,
)


def _carried_target(**overrides):
    """A FastTarget for float32 host data whose importer of objects records what it
    is given and imports it with tb.from_dlpack (as a real importer would)."""
    seen = []

    def importer(obj):
        seen.append(obj)
        return tb.from_dlpack(obj.__dlpack__(max_version=(1, 3)))

    options = dict(FLOAT32_HOST, maker=lambda t: t, carrier_importer=importer)
    options.update(overrides)
    target = _core.FastTarget(**options)
    return target, seen


def _recording(array):
    p = numpy_producer(array)
    p.__class__ = type("Carried", (type(p),), {})  # a type of its own: its own route
    return p


def test_a_carried_route_passes_on_the_capsule_the_importer_asked_for():
    a = np.arange(4, dtype=np.float32)
    p = _recording(a)
    target, seen = _carried_target()
    target.remember(type(p), R["PROTOCOL"] | R["CARRY"])
    out = _core._fast_convert(target, p)
    assert type(out) is Tensor and out.data_ptr() == a.ctypes.data
    assert p.calls == [{"max_version": (1, 3)}]  # the importer's own request, once
    assert len(seen) == 1 and seen[0] is not p  # through the carrier
    assert target.route_of(p) == R["PROTOCOL"] | R["CARRY"]


def test_a_capsule_the_target_does_not_take_is_read_here_not_asked_again():
    a = np.arange(4, dtype=np.float64)  # the target takes float32 only
    p = _recording(a)
    target, _ = _carried_target()
    target.remember(type(p), R["PROTOCOL"] | R["CARRY"])
    assert _core._fast_convert(target, p) is None  # the planner decides
    assert len(p.calls) == 1 and len(p.counters) == 1
    gc.collect()
    # read here (consumed), not dropped for the planner to ask again
    assert p.counters[0].calls == 1 and p.counters[0].capsule_frees == 0
    # A refusal costs an exception inside the importer: this type is read here now.
    assert target.route_of(p) == R["PROTOCOL"]


def _misaligned_float32(n):
    """0, 1, ..., n-1 as float32 at an address that is not 64-byte aligned."""
    buf = np.zeros(n + 16, dtype=np.float32)
    start = next(i for i in range(16) if (buf.ctypes.data + 4 * i) % 64)
    view = buf[start : start + n]
    view[:] = np.arange(n)
    return view


def test_misaligned_data_on_a_carried_route_is_copied_in_c():
    p = _recording(_misaligned_float32(8))
    target, _ = _carried_target(alignment=64)
    target.remember(type(p), R["PROTOCOL"] | R["CARRY"])
    out = _core._fast_convert(target, p)
    assert type(out) is Tensor and out.data_ptr() % 64 == 0
    assert out.tolist() == list(range(8)) and len(p.calls) == 1


def test_a_carried_route_never_passes_device_memory_on():
    p = fake_device_producer((2, 0))
    p.__class__ = type("CarriedGpu", (type(p),), {})
    target, seen = _carried_target()
    target.remember(type(p), R["PROTOCOL"] | R["CARRY"])
    assert _core._fast_convert(target, p) is None
    assert len(p.calls) == 1  # asked without a stream: no ordering request was made
    assert "stream" not in p.calls[0]
    # From now on the planner asks this type first, on the consumer's stream.
    assert target.asks_device_first(p)
    assert _core._fast_convert(target, p) is None and len(p.calls) == 1
    assert len(seen) == 1  # (the importer was not called again)


def test_a_carrier_passes_keywords_on_as_given():
    a = np.arange(2, dtype=np.float32)
    p = _recording(a)

    def importer(obj):
        assert obj.__dlpack_device__() == (1, 0)
        return tb.from_dlpack(obj.__dlpack__(stream=None, copy=False, max_version=(1, 2)))

    target, _ = _carried_target(carrier_importer=importer)
    target.remember(type(p), R["PROTOCOL"] | R["CARRY"])
    assert _core._fast_convert(target, p).tolist() == [0.0, 1.0]
    assert p.calls == [{"copy": False, "max_version": (1, 2)}]  # None keywords left out


def _swallowing(answer):
    """An importer that asks twice and answers whatever happened (as no good
    importer does)."""

    def importer(obj):
        for _ in range(2):
            try:
                obj.__dlpack__()
            except BufferError as exc:
                assert "asked once" in str(exc) or "does not take" in str(exc)
        return answer

    return importer


def test_an_importer_that_answers_after_a_refusal_is_not_believed():
    a = np.arange(2, dtype=np.float32)
    p = _recording(a)
    target, _ = _carried_target(carrier_importer=_swallowing("wrong"))
    target.remember(type(p), R["PROTOCOL"] | R["CARRY"])
    assert _core._fast_convert(target, p) is None  # (asked again: refused)
    assert len(p.calls) == 1 and target.route_of(p) == R["PROTOCOL"]
    b = np.arange(2, dtype=np.float64)
    q = _recording(b)
    target.remember(type(q), R["PROTOCOL"] | R["CARRY"])
    assert _core._fast_convert(target, q) is None  # float64: refused, read here
    assert len(q.calls) == 1


def test_a_source_that_raises_is_asked_once_and_read_here_from_then_on():
    def broken(**kw):
        raise BufferError("no export today")

    p = Producer(broken)
    p.__class__ = type("Broken", (Producer,), {})
    target, _ = _carried_target(carrier_importer=_swallowing(None))
    target.remember(type(p), R["PROTOCOL"] | R["CARRY"])
    assert _core._fast_convert(target, p) is None
    assert len(p.calls) == 1
    assert target.route_of(p) == R["PROTOCOL"] and target.uncarried(p)
    # The planner decides the type again: the carry stays off.
    target.remember(type(p), R["PROTOCOL"] | R["CARRY"])
    assert target.route_of(p) == R["PROTOCOL"]


@pytest.mark.parametrize("error", [KeyboardInterrupt, MemoryError])
def test_what_an_importer_must_not_swallow_is_raised(error):
    def interrupted(**kw):
        raise error()

    p = Producer(interrupted)
    p.__class__ = type("Interrupted", (Producer,), {})

    def importer(obj):  # as MLX's: any exception from __dlpack__ becomes a TypeError
        try:
            obj.__dlpack__()
        except BaseException as exc:
            raise TypeError("could not import") from exc

    target, _ = _carried_target(carrier_importer=importer)
    target.remember(type(p), R["PROTOCOL"] | R["CARRY"])
    with pytest.raises(error):
        _core._fast_convert(target, p)


def test_a_device_answer_is_refused_before_the_source_is_asked():
    p = fake_device_producer((2, 0))
    p.__class__ = type("CarriedGpu2", (type(p),), {})

    def importer(obj):  # a consumer that asks the device first
        device = obj.__dlpack_device__()
        raise AssertionError(f"not refused: {device}")

    target, _ = _carried_target(carrier_importer=importer)
    target.remember(type(p), R["PROTOCOL"] | R["CARRY"])
    assert _core._fast_convert(target, p) is None and p.calls == []
    assert target.asks_device_first(p)


def test_set_fast_target_replaces_the_remembered_target():
    a = np.arange(2.0)
    tb.convert(a, "numpy")
    old = fast("numpy")
    replacement, _ = _carried_target(maker="identity", dtypes=[tb.float64])
    replacement.remember(np.ndarray, R["NDARRAY"])
    try:
        _core.set_fast_target("numpy", replacement)
        assert type(tb.convert(a, "numpy")) is Tensor  # the new target, not a cached one
    finally:
        _core.set_fast_target("numpy", old)
    assert type(tb.convert(a, "numpy")) is np.ndarray


def test_remember_refuses_a_carry_without_an_importer_of_objects():
    target, _ = _carried_target(carrier_importer=None)
    with pytest.raises(ValueError, match="cannot read"):
        target.remember(_Producer, R["PROTOCOL"] | R["CARRY"])
    with pytest.raises(ValueError, match="cannot read"):
        fast("numpy").remember(np.ndarray, R["NDARRAY"] | R["CARRY"])


@needs("tvm_ffi", "mlx")
def test_capsule_routes_into_mlx_check_what_mx_from_dlpack_narrows(no_planner):
    import mlx.core as mx
    import tvm_ffi

    _core.clear_routes()
    x = tvm_ffi.from_dlpack(np.arange(4, dtype=np.float32))
    assert tb.convert(x, "mlx").tolist() == [0.0, 1.0, 2.0, 3.0]
    assert fast("mlx").route_of(x) == R["PROTOCOL"] | R["CAPSULE"]
    # float64: mx.from_dlpack would narrow it to float32; the route reads the capsule
    # instead, and the planner makes a float64 array from it.
    y = tvm_ffi.from_dlpack(np.arange(4, dtype=np.float64) + 0.1)
    out = tb.convert(y, "mlx")
    assert out.dtype == mx.float64 and out.tolist() == [0.1, 1.1, 2.1, 3.1]
    assert fast("mlx").route_of(x) == R["PROTOCOL"] | R["CAPSULE"]  # (no refusal to keep)
    assert "as mlx's importer asks it" in tb.explain(x, "mlx").route
    no_planner("mlx")
    z = tvm_ffi.from_dlpack(np.arange(3, dtype=np.float32))
    assert tb.convert(z, "mlx").tolist() == [0.0, 1.0, 2.0]


# -- carried routes: the capsule checked on its struct (FastTarget.plainly_takes) ------


def _capsule_targets():
    return {
        "float32, C order only": _carried_target()[0],
        "any layout, 64-byte aligned, no offsets": _carried_target(
            dtypes=[tb.float32, tb.float64, tb.int8, tb.complex64],
            negative_strides=True,
            noncompact=True,
            permuted=True,
            offset_ok=False,
            alignment=64,
        )[0],
        "64-bit types guarded": _carried_target(
            dtypes=[tb.float32, tb.float64, tb.int64], guard64=lambda: True
        )[0],
        "sub-byte types too": _carried_target(
            dtypes=[tb.float32, tb.float4_e2m1fn, tb.float6_e2m3fn]
        )[0],
    }


def _random_capsule(rng):
    from tensorbridge import _testing

    shape = rng.choice(
        [
            (),
            (1,),
            (4,),
            (2, 3),
            (3, 1, 2),
            (0,),
            (2, 0),
            (-1,),
            (2**31, 2**31, 4),
            (2**31, 2**31),
            (2**62, 3),
            (3, 2**61),
        ]
    )
    n = len(shape)
    c = []
    step = 1
    for extent in reversed(shape):
        c.insert(0, step)
        step *= max(extent, 1)
    strides = rng.choice(
        [
            None,
            tuple(c),
            tuple(reversed(c)),  # Fortran-like for 2-d
            tuple(-s for s in c),
            tuple(0 for _ in c),
            tuple(2 * s for s in c),
            # a huge and an odd stride of an extent-1 dimension (never used)
            tuple(2**61 if e == 1 else s for s, e in zip(c, shape, strict=True)),
            tuple(s if e != 1 else 7 for s, e in zip(c, shape, strict=True)),
            tuple(2**62 for _ in c),
            tuple(2**59 for _ in c),  # each stride within bounds, their span not
        ]
    )
    fields = dict(
        data=rng.choice([0x10000, 0x10004, 0, 2**64 - 8]),
        shape=shape,
        strides=strides,
        dtype=rng.choice(
            [(2, 32, 1)] * 6
            + [(17, 4, 1), (15, 6, 1)]
            + [
                (2, 64, 1),
                (0, 8, 1),
                (0, 64, 1),
                (5, 64, 1),
                (2, 32, 2),
                (17, 4, 1),
                (3, 64, 1),
                (99, 32, 1),
                (2, 0, 1),
                (2, 16, 1),
                (1, 8, 1),
                (6, 8, 1),
            ]
        ),
        device=rng.choice([(1, 0)] * 6 + [(1, -1), (2, 0), (3, 0), (99, 0)]),
        byte_offset=rng.choice([0, 0, 0, 4, 64, 2**62 + 1, 2**63]),
        versioned=rng.random() < 0.8,
        version=rng.choice([(1, 3)] * 5 + [(1, 0), (1, 9)]),
        flags=rng.choice([0, 0, 1, 2, 4, 1 << 40]),
        ndim=rng.choice([None] * 8 + [65, -1]),
        null_shape=rng.random() < 0.05,
    )
    if rng.random() < 0.5:
        # An ordinary capsule with one field from the draw (each boundary alone).
        key = rng.choice(sorted(fields))
        drawn = fields[key]
        fields = dict(data=0x10000, shape=(2, 3), strides=(3, 1), dtype=(2, 32, 1))
        fields[key] = drawn
        n = len(fields["shape"])
    if fields.get("ndim") is not None and fields["ndim"] > n:
        fields["ndim"] = None  # the shape array holds only len(shape) entries
    if fields.get("strides") is not None and len(fields["strides"]) != n:
        fields["strides"] = None
    capsule, _ = _testing.make_capsule(**fields)
    return capsule, fields


def test_a_capsule_plainly_taken_is_one_the_full_read_takes_as_it_is():
    import random

    rng = random.Random(20261126)
    targets = _capsule_targets()
    plain = dict.fromkeys(targets, 0)
    for _ in range(4000):
        capsule, fields = _random_capsule(rng)
        for name, target in targets.items():
            plainly, verdict = target.capsule_verdicts(capsule)
            if plainly:
                plain[name] += 1
                assert verdict == 1, (name, fields, verdict)
    # Not a check that says no to everything: the ordinary capsules pass it.
    assert all(count > 400 for count in plain.values()), plain


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        (dict(shape=(4,), strides=(1,)), "float32, C order only"),
        (dict(shape=(2, 3), strides=None, versioned=False), "float32, C order only"),
        (dict(shape=(3, 1, 2), strides=(2, 99, 1)), "float32, C order only"),  # extent-1 stride
        (dict(shape=(), strides=None), "float32, C order only"),
        (dict(shape=(4,), strides=(1,), byte_offset=4), "float32, C order only"),
        (
            dict(shape=(2, 3), strides=(1, -2), dtype=(2, 64, 1)),
            "any layout, 64-byte aligned, no offsets",
        ),
        (dict(shape=(4,), strides=(1,), dtype=(2, 32, 1)), "64-bit types guarded"),
    ],
)
def test_ordinary_capsules_are_plainly_taken(fields, name):
    from tensorbridge import _testing

    capsule, _ = _testing.make_capsule(**{"data": 0x10000, **fields})
    assert _capsule_targets()[name].capsule_verdicts(capsule) == (True, 1)


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        (dict(shape=(4,), strides=(-1,)), "float32, C order only"),  # the layout rules
        (dict(shape=(4,), strides=(1,), dtype=(2, 64, 1)), "64-bit types guarded"),  # asks Python
        (dict(shape=(4,), strides=(1,), byte_offset=64), "any layout, 64-byte aligned, no offsets"),
        (dict(shape=(0,), strides=(1,)), "float32, C order only"),  # empty: the full read
        (dict(shape=(4,), strides=(1,), byte_offset=4), "any layout, 64-byte aligned, no offsets"),
        (dict(shape=(4,), strides=(1,), version=(2, 0)), "float32, C order only"),
    ],
)
def test_capsules_out_of_the_ordinary_are_read_in_full(fields, name):
    from tensorbridge import _testing

    capsule, _ = _testing.make_capsule(**{"data": 0x10000, **fields})
    target = _capsule_targets()[name]
    assert target.capsule_verdicts(capsule)[0] is False


def test_a_carrier_the_importer_keeps_is_not_used_again():
    kept = []
    target, _ = _carried_target()

    def keeping(obj):  # keeps every carrier it is given
        kept.append(obj)
        return tb.from_dlpack(obj.__dlpack__(max_version=(1, 3)))

    def forgetting(obj):
        return tb.from_dlpack(obj.__dlpack__(max_version=(1, 3)))

    arrays = [np.full(3, float(i), dtype=np.float32) for i in range(4)]
    producers = [_recording(a) for a in arrays]
    for importer in (forgetting, keeping, forgetting, keeping):
        target, _ = _carried_target(carrier_importer=importer)
        for p, a in zip(producers, arrays, strict=True):
            target.remember(type(p), R["PROTOCOL"] | R["CARRY"])
            out = _core._fast_convert(target, p)
            assert out.tolist() == a.tolist() and out.data_ptr() == a.ctypes.data
    assert len({id(c) for c in kept}) == len(kept) == 8
    # A kept carrier still stands for its own source (asked once, so now refused).
    for c in kept:
        assert c.__dlpack_device__() == (1, 0)  # (a carrier reset for reuse has no source)
        with pytest.raises(BufferError, match="asked once"):
            c.__dlpack__()
    assert all(len(p.calls) == 4 for p in producers)


def test_a_carrier_for_a_maker_pair_passes_on_1_d_capsules_only():
    # PyArrow: the importer of objects is Array.from_dlpack, the 1-d maker.
    seen = []

    def importer(obj):
        seen.append("asked")
        return ("imported", tb.from_dlpack(obj.__dlpack__(max_version=(1, 3))))

    target, _ = _carried_target(
        maker=(lambda t: ("1-d", t), lambda t: ("n-d", t)), carrier_importer=importer
    )
    one = _recording(np.arange(4, dtype=np.float32))
    target.remember(type(one), R["PROTOCOL"] | R["CARRY"])
    kind, t = _core._fast_convert(target, one)
    assert target.route_of(one) == R["PROTOCOL"] | R["CARRY"]  # (before t.tolist imports)
    assert kind == "imported" and t.tolist() == [0.0, 1.0, 2.0, 3.0]
    two = _recording(np.arange(6, dtype=np.float32).reshape(2, 3))
    target.remember(type(two), R["PROTOCOL"] | R["CARRY"])
    kind, t = _core._fast_convert(target, two)
    # refused by the carrier (the importer raised), read here, made by the n-d maker
    assert kind == "n-d" and t.shape == (2, 3) and len(two.calls) == 1 and seen == ["asked"] * 2
    assert target.route_of(two) == R["PROTOCOL"]  # read here from now on


@needs("tvm_ffi", "pyarrow")
def test_tvm_ffi_arrays_are_carried_to_pyarrow(no_planner):
    import pyarrow as pa
    import tvm_ffi

    a = np.arange(5, dtype=np.float32)
    x = tvm_ffi.from_dlpack(a)
    tb.convert(x, "pyarrow")
    no_planner("pyarrow")
    assert fast("pyarrow").route_of(x) == R["PROTOCOL"] | R["CARRY"]
    out = tb.convert(x, "pyarrow")
    assert type(out) is pa.FloatArray and out.to_pylist() == a.tolist()
    assert out.buffers()[1].address == a.ctypes.data


@needs("mlx", "pyarrow")
def test_legacy_exporters_are_not_carried_to_pyarrow():
    import mlx.core as mx

    x = mx.arange(4.0)
    tb.convert(x, "pyarrow")
    mode = fast("pyarrow").route_of(x)
    assert mode == R["PROTOCOL"]  # read here: pyarrow refuses legacy capsules
    assert tb.convert(x, "pyarrow").to_pylist() == [0.0, 1.0, 2.0, 3.0]


# -- table routes: a table source's managed tensor, checked, handed to an importer ----


class _TableSource:
    """A producer type with the fake C exchange table (tensorbridge._testing): each
    table call hands out a crafted capsule of the array (fields overridable), whose
    deleter calls are counted."""

    __dlpack_c_exchange_api__ = _testing.exchange_table()

    def __init__(self, array, **fields):
        self.array = array
        self.fields = fields
        self.counters = []

    def _table_capsule(self):
        capsule, counter = capsule_of(self.array, **self.fields)
        self.counters.append(counter)
        return capsule

    def __dlpack_device__(self):
        return self.fields.get("device", (1, 0))

    def __dlpack__(self, **kwargs):
        raise AssertionError("a table route never asks __dlpack__")


TABLE_HANDED = R["TABLE"] | R["HANDOFF"] | R["CAPSULE"]


def _capsule_target(capsule_importer=None, importer=None, **overrides):
    """A FastTarget for float32 host data whose importers record what they are
    given. The importer of objects imports a _Handed through its type's table, as
    tvm_ffi.from_dlpack does (here by tb.from_dlpack, which reads tables too), and
    returns a source object (device memory) tagged; the importer of capsules
    imports with tb.from_dlpack; the maker returns tagged tuples."""
    seen = {"handed": [], "capsules": [], "objects": [], "made": []}

    def import_object(obj):
        if type(obj) is _core._Handed:
            seen["handed"].append(_core.exchange_api_info(obj))
            return tb.from_dlpack(obj)
        seen["objects"].append(obj)
        return ("imported", obj)

    def import_capsule(capsule):
        seen["capsules"].append(_testing.capsule_name(capsule))
        return tb.from_dlpack(capsule)

    def make(t):
        seen["made"].append(t)
        return ("made", t)

    options = dict(
        FLOAT32_HOST,
        maker=make,
        importer=importer or import_object,
        capsule_importer=capsule_importer or import_capsule,
    )
    options.update(overrides)
    target = _core.FastTarget(**options)
    return target, seen


def _released_once(source):
    gc.collect()
    return [(c.calls, c.capsule_frees) for c in source.counters]


def test_a_table_route_hands_the_managed_tensor_to_the_importer():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    p = _TableSource(a)
    target, seen = _capsule_target()
    target.remember(_TableSource, TABLE_HANDED)
    before = _testing.table_calls()
    out = _core._fast_convert(target, p)
    assert type(out) is Tensor and out.data_ptr() == a.ctypes.data and out.shape == (2, 3)
    assert _testing.table_calls() == before + 1
    # (a complete 1.3 table, without the optional DLTensor view)
    assert seen == {"handed": [((1, 3), False)], "capsules": [], "objects": [], "made": []}
    assert p.counters[0].calls == 0  # the importer owns it now
    del out
    assert _released_once(p) == [(1, 0)]
    assert target.route_of(p) == TABLE_HANDED
    # The next calls hand theirs over too, each released once.
    outs = [_core._fast_convert(target, p) for _ in range(3)]
    assert [o.data_ptr() for o in outs] == [a.ctypes.data] * 3
    del outs
    assert _released_once(p) == [(1, 0)] * 4


@pytest.mark.parametrize(
    "array, fields, made",
    [
        # a dtype the target does not hold: read here, the planner decides
        (np.arange(4.0), {}, None),
        # not C order, for a target with layout rules: the planner
        (np.arange(8, dtype=np.float32)[::2], {}, None),
        # empty: read in full, taken as it is, made
        (np.zeros(0, dtype=np.float32), {}, "view"),
        # another major version: refused by the full read (released there)
        (np.arange(4, dtype=np.float32), {"version": (2, 0)}, None),
        # sub-byte data is never passed plainly
        (np.zeros(4, dtype=np.uint8), {"dtype": (2, 4, 1)}, None),
    ],
)
def test_a_managed_tensor_the_target_does_not_plainly_take_is_read_here(array, fields, made):
    p = _TableSource(array, **fields)
    target, seen = _capsule_target()
    target.remember(_TableSource, TABLE_HANDED)
    out = _core._fast_convert(target, p)
    assert seen["handed"] == seen["capsules"] == seen["objects"] == []
    if made is None:
        assert out is None  # the planner decides (and asks the table again)
    else:
        assert out[0] == "made" and out[1].shape == array.shape
    del out
    seen.clear()
    assert _released_once(p) == [(1, 0)]  # read here (consumed), released once


def test_device_memory_on_a_table_route_goes_as_the_source_object():
    # The table does not synchronise: the source object goes to the target's own
    # importer, which makes the stream handshake with it, as a plain handoff does.
    p = _TableSource(np.arange(4, dtype=np.float32), device=(2, 0))
    target, seen = _capsule_target()
    target.remember(_TableSource, TABLE_HANDED)
    assert _core._fast_convert(target, p) == ("imported", p)
    assert seen["handed"] == [] and seen["objects"] == [p]
    assert _released_once(p) == [(1, 0)]  # the table's tensor, released (once)
    # A dtype the target does not hold: the planner, and the importer is not asked.
    q = _TableSource(np.arange(4.0), device=(2, 0))
    assert _core._fast_convert(target, q) is None
    assert seen["objects"] == [p] and _released_once(q) == [(1, 0)]


@pytest.mark.parametrize(
    "error, propagates",
    [(ValueError, False), (MemoryError, True), (KeyboardInterrupt, True)],
)
def test_an_importer_error_on_a_table_route(error, propagates):
    def refuse(handed):
        raise error()  # (a new one: a shared one's traceback would keep the object)

    p = _TableSource(np.arange(4, dtype=np.float32))
    target, seen = _capsule_target(importer=refuse)
    target.remember(_TableSource, TABLE_HANDED)
    if propagates:
        for _ in range(2):
            with pytest.raises(error):
                _core._fast_convert(target, p)
        assert target.route_of(p) == TABLE_HANDED
    else:
        assert _core._fast_convert(target, p) is None  # the planner says what is wrong
        # The importer did not take the tensor: objects of this type are read here
        # from now on (made by the target's maker), and stay so when remembered.
        assert target.route_of(p) == R["TABLE"] and target.uncarried(p)
        target.remember(_TableSource, TABLE_HANDED)
        assert target.route_of(p) == R["TABLE"]
        kind, t = _core._fast_convert(target, p)
        assert kind == "made" and t.data_ptr() == p.array.ctypes.data
        del t
        seen.clear()
    assert _released_once(p) == [(1, 0), (1, 0)]  # each released once


def test_an_importer_that_does_not_read_the_handed_table_is_told_why():
    # tvm-ffi before 0.1.5 reads only __c_dlpack_exchange_api__: it would ask the
    # _Handed for __dlpack__(), which says why it cannot answer.
    seen = []

    def protocol_only(obj):
        try:
            obj.__dlpack__()
        except BufferError as exc:
            seen.append((obj.__dlpack_device__(), str(exc)))
            raise

    p = _TableSource(np.arange(4, dtype=np.float32))
    target, _ = _capsule_target(importer=protocol_only)
    target.remember(_TableSource, TABLE_HANDED)
    assert _core._fast_convert(target, p) is None
    assert seen == [
        (
            (1, 0),
            "tensorbridge: a _Handed gives its managed tensor through its "
            "type's C exchange table (__dlpack_c_exchange_api__) only",
        )
    ]
    assert target.route_of(p) == R["TABLE"]  # read here from now on
    assert _released_once(p) == [(1, 0)]
    emptied = _core._Handed()
    for ask in (emptied.__dlpack__, emptied.__dlpack_device__):
        with pytest.raises(BufferError, match="handed over already"):
            ask()


def test_a_handed_tensor_is_given_away_once():
    # An importer that asks twice gets a BufferError the second time; one that keeps
    # the object and takes the tensor later gets it, and the route does not reuse
    # the object it kept.
    kept = []

    def twice(handed):
        first = tb.from_dlpack(_testing.table_from_py(handed))  # as a C consumer asks
        with pytest.raises(BufferError, match="handed over already"):
            _testing.table_from_py(handed)
        return first

    def later(handed):
        kept.append(handed)
        return "later"

    p = _TableSource(np.arange(4, dtype=np.float32))
    target, _ = _capsule_target(importer=twice)
    target.remember(_TableSource, TABLE_HANDED)
    out = _core._fast_convert(target, p)
    assert out.data_ptr() == p.array.ctypes.data
    del out
    assert _released_once(p) == [(1, 0)]

    target, _ = _capsule_target(importer=later)
    target.remember(_TableSource, TABLE_HANDED)
    assert _core._fast_convert(target, p) == "later"
    assert _core._fast_convert(target, p) == "later"
    assert len(kept) == 2 and kept[0] is not kept[1]
    late = tb.from_dlpack(kept[0])
    assert late.data_ptr() == p.array.ctypes.data
    assert _released_once(p)[1:] == [(0, 0), (0, 0)]  # one taken, one still held
    del late, kept[:]
    assert _released_once(p)[1:] == [(1, 0), (1, 0)]


def test_the_handed_table_rebuilds_an_object_from_a_managed_tensor():
    # managed_tensor_to_py_object_no_sync gives a _Handed holding the tensor, which
    # a later from_py call gives away (the table is complete, as the standard asks).
    a = np.arange(3, dtype=np.float32)
    handed = _core._to_py_via_api(_core._Handed, tb.asarray(a))
    assert type(handed) is _core._Handed
    capsule = _testing.table_from_py(handed)  # as a C consumer asks
    assert tb.from_dlpack(capsule).data_ptr() == a.ctypes.data
    with pytest.raises(BufferError, match="handed over already"):
        _testing.table_from_py(handed)
    with pytest.raises(BufferError, match="handed over already"):
        _testing.table_from_py(_core._Handed())  # an empty one


def test_a_table_that_refuses_on_a_table_route():
    class Refusing(_TableSource):
        def _table_capsule(self):
            raise BufferError("the fake table refuses")

    p = Refusing(np.arange(4, dtype=np.float32))
    target, seen = _capsule_target()
    target.remember(Refusing, TABLE_HANDED)
    assert _core._fast_convert(target, p) is None
    assert seen == {"handed": [], "capsules": [], "objects": [], "made": []}


def test_capsule_routes_need_a_table_or_the_protocol_and_an_importer():
    target, _ = _capsule_target()
    with pytest.raises(ValueError, match="cannot read"):
        target.remember(np.ndarray, R["NDARRAY"] | R["CAPSULE"])
    with pytest.raises(ValueError, match="cannot read"):
        target.remember(Tensor, R["TENSOR"] | R["CAPSULE"])
    bare = _core.FastTarget(**FLOAT32_HOST, maker=lambda t: t)  # no importers
    for tp, mode in [(_TableSource, TABLE_HANDED), (_CapsuleSource, PROTOCOL_CAPSULE)]:
        with pytest.raises(ValueError, match="cannot read"):
            bare.remember(tp, mode)
    # A table route hands the managed tensor to the importer of objects; a protocol
    # route gives its capsule to the importer of capsules.
    objects_only = _core.FastTarget(**FLOAT32_HOST, maker=lambda t: t, importer=tb.from_dlpack)
    objects_only.remember(_TableSource, TABLE_HANDED)
    with pytest.raises(ValueError, match="cannot read"):
        objects_only.remember(_CapsuleSource, PROTOCOL_CAPSULE)
    capsules_only = _core.FastTarget(
        **FLOAT32_HOST, maker=lambda t: t, capsule_importer=tb.from_dlpack
    )
    capsules_only.remember(_CapsuleSource, PROTOCOL_CAPSULE)
    with pytest.raises(ValueError, match="cannot read"):
        capsules_only.remember(_TableSource, TABLE_HANDED)


# -- capsule routes of protocol sources: asked here as the importer asks, checked ----


PROTOCOL_CAPSULE = R["PROTOCOL"] | R["CAPSULE"]


class _CapsuleSource(Producer):
    """A producer type of its own (routes are per type) whose __dlpack__ records its
    calls and gives a crafted legacy capsule of the array (fields overridable), whose
    deleter calls are counted."""


def _capsule_source(array, **fields):
    return _CapsuleSource(
        lambda **kw: capsule_of(array, versioned=False, **fields),
        device=fields.get("device", (1, 0)),
    )


def test_a_capsule_route_asks_the_source_as_the_importer_does_and_passes_the_capsule():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    p = _capsule_source(a)
    target, seen = _capsule_target()
    target.remember(_CapsuleSource, PROTOCOL_CAPSULE)
    out = _core._fast_convert(target, p)
    assert type(out) is Tensor and out.data_ptr() == a.ctypes.data and out.shape == (2, 3)
    assert p.calls == [{}]  # __dlpack__() with no keywords, once
    assert seen == {"handed": [], "capsules": ["dltensor"], "objects": [], "made": []}
    assert p.counters[0].calls == 0  # the importer owns it now
    del out
    assert _released_once(p) == [(1, 0)]
    assert target.route_of(p) == PROTOCOL_CAPSULE


@pytest.mark.parametrize(
    "array, fields, made, consumed",
    [
        # a dtype the target does not hold: read here, the planner gets the Tensor (the
        # source is asked once)
        (np.arange(4.0), {}, None, True),
        # not C order, for a target with layout rules: the same
        (np.arange(8, dtype=np.float32)[::2], {}, None, True),
        # empty: read in full, taken as it is, made
        (np.zeros(0, dtype=np.float32), {}, "view", True),
        # sub-byte data in a legacy capsule (padded or not?): dropped unused, the
        # planner asks for a versioned one
        (np.zeros(4, dtype=np.uint8), {"dtype": (2, 4, 1)}, None, False),
    ],
)
def test_a_protocol_capsule_the_target_does_not_plainly_take_is_read_here(
    array, fields, made, consumed
):
    p = _capsule_source(array, **fields)
    target, seen = _capsule_target()
    target.remember(_CapsuleSource, PROTOCOL_CAPSULE)
    out = _core._fast_convert(target, p)
    assert len(p.calls) == 1 and seen["capsules"] == [] and seen["objects"] == []
    if made is None:
        assert out is None  # the planner decides
    else:
        assert out[0] == "made" and out[1].shape == array.shape
    del out
    seen.clear()
    # (consumed: released by the Tensor read; else by the capsule's own destructor)
    assert _released_once(p) == [(1, 0 if consumed else 1)]
    assert target.route_of(p) == PROTOCOL_CAPSULE  # (no refusal to remember)


@pytest.mark.parametrize(
    "source, mode",
    [(_TableSource, TABLE_HANDED), (_capsule_source, PROTOCOL_CAPSULE)],
    ids=["table", "protocol"],
)
def test_misaligned_data_on_a_capsule_route_is_copied_in_c(source, mode):
    p = source(_misaligned_float32(8))
    target, seen = _capsule_target(alignment=64)
    target.remember(type(p), mode)
    kind, t = _core._fast_convert(target, p)
    assert kind == "made" and t.data_ptr() % 64 == 0 and t.tolist() == list(range(8))
    assert seen["capsules"] == seen["handed"] == []
    del t
    seen.clear()
    assert _released_once(p) == [(1, 0)]


def test_device_memory_on_a_protocol_capsule_route_goes_to_the_planner():
    # Asked with no stream, as the importer asks: the capsule is dropped unused and
    # the planner asks again on the consumer's stream; the type is asked first from
    # now on, so the route leaves it to the planner without asking.
    p = fake_device_producer((2, 0))
    p.__class__ = type("DeviceCapsuleSource", (Producer,), {})
    target, seen = _capsule_target()
    target.remember(type(p), PROTOCOL_CAPSULE)
    assert _core._fast_convert(target, p) is None
    assert p.calls == [{}] and seen == {"handed": [], "capsules": [], "objects": [], "made": []}
    assert target.asks_device_first(p)
    assert _core._fast_convert(target, p) is None
    assert p.calls == [{}]


@pytest.mark.parametrize(
    "error, propagates",
    [(ValueError, False), (MemoryError, True), (KeyboardInterrupt, True)],
)
def test_errors_on_a_protocol_capsule_route(error, propagates):
    def refuse(capsule):
        raise error()

    def raising(**kw):
        raise error()

    p = _capsule_source(np.arange(4, dtype=np.float32))
    target, _ = _capsule_target(capsule_importer=refuse)
    target.remember(_CapsuleSource, PROTOCOL_CAPSULE)
    q = _CapsuleSource(raising)
    for source in (p, q):  # the importer raises; the source's __dlpack__ raises
        if propagates:
            with pytest.raises(error):
                _core._fast_convert(target, source)
        else:
            assert _core._fast_convert(target, source) is None  # the planner says what
    assert _released_once(p) == [(1, 1)]  # unconsumed: released by its capsule, once


def test_a_source_that_refuses_the_importer_s_request_is_read_here_from_then_on():
    # NumPy refuses to export a read-only array as a legacy capsule (which cannot say
    # read-only): asked as the importer asks, it raises; the route then reads it as
    # from_dlpack asks (max_version), and does so for its type from then on.
    a = np.arange(4, dtype=np.float32)

    def make(**kw):
        if "max_version" not in kw:
            raise BufferError("cannot export as a legacy capsule")
        return capsule_of(a, flags=1)  # DLPACK_FLAG_BITMASK_READ_ONLY

    p = _CapsuleSource(make)
    p.__class__ = type("ReadOnlySource", (_CapsuleSource,), {})
    target, seen = _capsule_target()
    target.remember(type(p), PROTOCOL_CAPSULE)
    out = _core._fast_convert(target, p)
    assert seen["capsules"] == [] and out[0] == "made"
    assert out[1].data_ptr() == a.ctypes.data and out[1].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert [sorted(kw) for kw in p.calls] == [[], ["max_version"]]
    assert target.route_of(p) == R["PROTOCOL"] and target.uncarried(p)
    _core._fast_convert(target, p)
    assert [sorted(kw) for kw in p.calls][2:] == [["max_version"]]  # asked once now
    target.remember(type(p), PROTOCOL_CAPSULE)  # decided again: the refusal stays
    assert target.route_of(p) == R["PROTOCOL"]


@needs("mlx")
def test_read_only_numpy_memory_reaches_mlx_on_its_route(no_planner, monkeypatch, tmp_path):
    import mlx.core as mx

    path = tmp_path / "data"
    np.arange(6, dtype=np.float32).tofile(path)
    m = np.memmap(path, dtype=np.float32, mode="r")  # read-only, a subclass of ndarray
    _core.clear_routes()
    assert tb.convert(m, "mlx").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    no_planner("mlx")
    out = tb.convert(m, "mlx")  # refused as mlx asks: read here instead, in C
    assert out.dtype == mx.float32 and out.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert fast("mlx").route_of(m) == R["PROTOCOL"] and fast("mlx").uncarried(m)
    assert tb.convert(m, "mlx").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    monkeypatch.undo()  # (explain asks the planner)
    assert "refused on the way to mlx's importer" in tb.explain(m, "mlx").route
    del m, out
    gc.collect()


def test_a_protocol_capsule_route_given_no_capsule_leaves_it_to_the_planner():
    p = _CapsuleSource(lambda **kw: object())
    target, seen = _capsule_target()
    target.remember(_CapsuleSource, PROTOCOL_CAPSULE)
    assert _core._fast_convert(target, p) is None
    assert p.calls == [{}] and seen == {"handed": [], "capsules": [], "objects": [], "made": []}


# -- into tensorbridge itself: the route's read is the answer ----------------------


def test_routes_into_tensorbridge_give_the_tensor_they_read(no_planner):
    source = np.arange(4, dtype=np.float16)
    p = _recording(source)  # a producer type of its own (no other test marks it)
    tb.convert(p, "tensorbridge")
    a = np.arange(6.0).reshape(2, 3)
    # (After p: the cache evicts the first-written entry of a full set, which could be
    # ndarray's from an earlier test when p's type shares its set.)
    tb.convert(a, "tensorbridge")
    assert fast("tensorbridge").route_of(a) == R["NDARRAY"]
    assert fast("tensorbridge").route_of(p) == R["PROTOCOL"]
    no_planner("tensorbridge")
    for x in (a, a[:, ::-2], a.T, np.arange(0.0)):
        out = tb.convert(x, "tensorbridge")
        assert type(out) is Tensor and out.shape == x.shape and not out.readonly
        assert out.data_ptr() == x.__array_interface__["data"][0]
    ro = np.arange(3, dtype=np.int8)
    ro.flags.writeable = False
    out = tb.convert(ro, "tensorbridge")
    assert out.readonly and out.data_ptr() == ro.ctypes.data
    # A producer's capsule: read through __dlpack__, the Tensor itself.
    assert fast("tensorbridge").route_of(p) == R["PROTOCOL"]
    out = tb.convert(p, "tensorbridge")
    assert type(out) is Tensor and out.dtype == tb.float16
    assert out.data_ptr() == source.ctypes.data
    assert out.tolist() == [0, 1, 2, 3]  # (last: a first tolist imports a module)
