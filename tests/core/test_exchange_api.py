# SPDX-License-Identifier: Apache-2.0
"""The DLPack C exchange API (_exchange_api.pxi, DLPack 1.2/1.3): tensorbridge as
consumer and producer."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest
from needs import needs
from producers import capsule_of

import tensorbridge as tb
from tensorbridge import _core, _testing

# --------------------------------------------------------------------------
# Consumer: fake producer types whose class carries the fake table
# --------------------------------------------------------------------------


def _table_type(kind="capsule", attribute="__dlpack_c_exchange_api__", device=(1, 0), fail=False):
    """A fresh producer class: the table (if any) hands out a crafted capsule of the
    instance's array; __dlpack__ does the same and records its calls."""

    class TableProducer:
        def __init__(self, array):
            self.array = array
            self.dlpack_calls = []
            self.counters = []

        def _capsule(self):
            capsule, counter = capsule_of(self.array, device=device)
            self.counters.append(counter)
            return capsule

        def _table_capsule(self):
            if fail:
                raise BufferError("the fake table refuses")
            return self._capsule()

        def __dlpack_device__(self):
            return device

        def __dlpack__(self, **kwargs):
            self.dlpack_calls.append(kwargs)
            return self._capsule()

    if kind is not None:
        setattr(TableProducer, attribute, _testing.exchange_table(kind))
    return TableProducer


def _imported_through_table(cls, **kwargs):
    a = np.arange(6.0)
    p = cls(a)
    before = _testing.table_calls()
    t = tb.from_dlpack(p, **kwargs)
    used = _testing.table_calls() - before
    return p, a, t, used


@pytest.mark.parametrize(
    ("kind", "attribute"),
    [
        ("capsule", "__dlpack_c_exchange_api__"),  # DLPack 1.3
        ("int", "__c_dlpack_exchange_api__"),  # DLPack 1.2
        ("capsule", "__c_dlpack_exchange_api__"),  # transitional producers
        ("v2", "__dlpack_c_exchange_api__"),  # a newer major linking a major-1 table
    ],
)
def test_table_is_used_instead_of_dlpack(kind, attribute):
    p, a, t, used = _imported_through_table(_table_type(kind, attribute))
    assert used == 1 and p.dlpack_calls == []
    assert t.data_ptr() == a.ctypes.data and t.shape == (6,)
    np.asarray(t)[0] = -5
    assert a[0] == -5
    counter = p.counters[0]
    del t
    gc.collect()
    assert counter.calls == 1


@pytest.mark.parametrize("kind", ["v2-only", "null-fn", "wrong-name", None])
def test_unusable_table_falls_back_to_dlpack(kind):
    p, a, t, used = _imported_through_table(_table_type(kind))
    assert used == 0
    assert len(p.dlpack_calls) == 1 and p.dlpack_calls[0]["max_version"] == (1, 3)
    assert t.data_ptr() == a.ctypes.data


def test_refusing_table_falls_back_to_dlpack():
    p, a, t, used = _imported_through_table(_table_type(fail=True))
    assert used == 1 and len(p.dlpack_calls) == 1
    assert t.data_ptr() == a.ctypes.data


def test_table_added_to_a_type_later_is_seen():
    cls = _table_type(None)
    _, _, _, used = _imported_through_table(cls)
    assert used == 0
    cls.__dlpack_c_exchange_api__ = _testing.exchange_table()
    _, _, _, used = _imported_through_table(cls)
    assert used == 1
    del cls.__dlpack_c_exchange_api__
    _, _, _, used = _imported_through_table(cls)
    assert used == 0


@pytest.mark.parametrize("method", ["__dlpack__", "__dlpack_device__"])
def test_a_subclass_that_exports_its_own_way_is_not_read_through_the_inherited_table(method):
    # A subclass overriding the protocol exports differently from its base: its
    # inherited table would bypass the override (issue 33, item 5).
    base = _table_type()

    def dlpack(self, **kwargs):
        self.dlpack_calls.append(kwargs)
        return capsule_of(self.array * 2)[0]

    def device(self):
        return (1, 0)

    child = type("Overriding", (base,), {method: dlpack if method == "__dlpack__" else device})
    _, a, t, used = _imported_through_table(child)
    assert used == 0
    assert np.asarray(t).tolist() == ((a * 2) if method == "__dlpack__" else a).tolist()
    # Its own table, defined beside the override, is the subclass's: used.
    own = type("OwnTable", (child,), {"__dlpack_c_exchange_api__": _testing.exchange_table()})
    _, _, _, used = _imported_through_table(own)
    assert used == 1
    # A subclass that only inherits keeps the base's table.
    plain = type("Plain", (base,), {})
    _, _, _, used = _imported_through_table(plain)
    assert used == 1


def test_cuda_data_from_a_table_uses_the_stream_handshake():
    # The table does not synchronise: CUDA data goes through __dlpack__(stream=...),
    # unless the caller asked for no synchronisation (stream=-1).
    cls = _table_type(device=(2, 0))
    p, _, t, used = _imported_through_table(cls)
    assert used == 1 and len(p.dlpack_calls) == 1 and p.dlpack_calls[0]["stream"] == 1
    assert str(t.device) == "cuda:0"
    gc.collect()
    assert p.counters[0].calls == 1  # the table's tensor was released, once
    p, _, t, used = _imported_through_table(cls, stream=-1)
    assert used == 1 and p.dlpack_calls == []
    p, _, t, used = _imported_through_table(cls, stream=7)
    assert p.dlpack_calls[0]["stream"] == 7


def test_a_type_known_for_gpu_data_skips_its_table_unless_stream_is_minus_one():
    cls = _table_type(device=(2, 0))
    _imported_through_table(cls)  # CUDA data from the table: the type is remembered
    p, _, _, used = _imported_through_table(cls)
    assert used == 0 and p.dlpack_calls == [{"max_version": (1, 3), "stream": 1}]
    p, _, _, used = _imported_through_table(cls, stream=-1)
    assert used == 1 and p.dlpack_calls == []


def test_rocm_data_from_a_table_uses_the_stream_handshake():
    p, _, _, _ = _imported_through_table(_table_type(device=(10, 0)))
    assert len(p.dlpack_calls) == 1 and p.dlpack_calls[0]["stream"] == 0


def test_pinned_host_memory_from_a_table_needs_no_stream():
    p, _, _, used = _imported_through_table(_table_type(device=(3, 0)))
    assert used == 1 and p.dlpack_calls == []


def test_copy_and_device_requests_with_a_table():
    p, a, t, used = _imported_through_table(_table_type(), copy=True)
    assert used == 1 and t.data_ptr() != a.ctypes.data and t.tolist() == a.tolist()
    p, a, t, used = _imported_through_table(_table_type(), copy=False)
    assert t.data_ptr() == a.ctypes.data
    # A device request goes to __dlpack__ (only it can move data).
    p, a, t, used = _imported_through_table(_table_type(), device="cpu")
    assert used == 0 and len(p.dlpack_calls) == 1


def test_asarray_uses_the_table():
    a = np.arange(3.0)
    p = _table_type()(a)
    before = _testing.table_calls()
    t = tb.asarray(p)
    assert _testing.table_calls() == before + 1 and p.dlpack_calls == []
    assert t.data_ptr() == a.ctypes.data


def test_table_tensors_are_validated_like_capsules():
    class Bad(_table_type()):
        def _table_capsule(self):
            capsule, counter = _testing.make_capsule(0, shape=(3,), dtype=(2, 32, 1))
            self.counters.append(counter)
            return capsule  # NULL data with 3 elements

    p = Bad(np.arange(3.0))
    with pytest.raises(BufferError, match=r"DLTensor\.data is NULL"):
        tb.from_dlpack(p)
    gc.collect()
    assert p.counters[0].calls == 1


def test_table_tensor_of_another_major_version_is_refused_and_released():
    class Future(_table_type()):
        def _table_capsule(self):
            capsule, counter = capsule_of(self.array, version=(2, 0))
            self.counters.append(counter)
            return capsule

    p = Future(np.arange(3.0))
    with pytest.raises(
        BufferError, match=r"Future's exchange table gave a tensor that holds DLPack version 2\.0"
    ):
        tb.from_dlpack(p)
    gc.collect()
    assert p.counters[0].calls == 1


def test_switch_turns_the_consumer_table_off():
    code = (
        "import numpy as np, tensorbridge as tb, tensorbridge._testing as T\n"
        "class P:\n"
        "    __dlpack_c_exchange_api__ = T.exchange_table()\n"
        "    def __init__(self): self.a = np.arange(3.0)\n"
        "    def _table_capsule(self): raise AssertionError('table used')\n"
        "    def __dlpack_device__(self): return (1, 0)\n"
        "    def __dlpack__(self, **k): return self.a.__dlpack__(**k)\n"
        "print(tb.from_dlpack(P()).tolist(), T.table_calls())\n"
    )
    env = dict(os.environ, TENSORBRIDGE_NO_C_EXCHANGE_API="1")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["[0.0,", "1.0,", "2.0]", "0"]


# --------------------------------------------------------------------------
# Consumer: PyTorch's own table
# --------------------------------------------------------------------------


@needs("torch")
def test_torch_through_its_table_shares_memory():
    import torch

    x = torch.arange(5.0)
    assert _core.exchange_api_info(x) == ((1, 3), True)
    t = tb.from_dlpack(x)
    np.asarray(t)[1] = 42
    assert x[1].item() == 42
    assert tb.asarray(x).data_ptr() == x.data_ptr()


@needs("torch")
def test_torch_through_its_table_keeps_the_tensor_alive():
    import weakref

    import torch

    x = torch.arange(12.0).reshape(3, 4)[1:, ::2]  # offset and strided
    t = tb.from_dlpack(x)
    assert (t.shape, t.strides, t.data_ptr()) == ((2, 2), (4, 2), x.data_ptr())
    alive = weakref.ref(x)
    del x
    gc.collect()
    assert alive() is not None and t.tolist() == [[4.0, 6.0], [8.0, 10.0]]
    del t
    gc.collect()
    assert alive() is None


@needs("torch")
def test_torch_tensor_requiring_grad_is_shared():
    import torch

    w = torch.ones(3, requires_grad=True)
    assert tb.from_dlpack(w).data_ptr() == w.data_ptr()


# --------------------------------------------------------------------------
# Producer: Tensor.__dlpack_c_exchange_api__
# --------------------------------------------------------------------------


def test_tensor_publishes_both_attribute_names():
    capsule = tb.Tensor.__dlpack_c_exchange_api__
    assert _testing.capsule_name(capsule) == "dlpack_exchange_api"
    assert _core.exchange_api_info(tb.asarray([1.0])) == ((1, 3), True)
    assert isinstance(tb.Tensor.__c_dlpack_exchange_api__, int)


def test_producer_from_py_shares_and_keeps_the_tensor_alive():
    a = np.arange(4.0)
    t = tb.asarray(a)
    capsule = _testing.table_from_py(t)
    info = _core.inspect_capsule(capsule)
    assert info["version"] == (1, 3) and info["data"] == a.ctypes.data
    del t
    gc.collect()
    u = tb.from_dlpack(capsule)
    u[0] = 9
    assert a[0] == 9


def test_producer_from_py_keeps_flags():
    ro = np.arange(3.0)
    ro.flags.writeable = False
    info = _core.inspect_capsule(_testing.table_from_py(tb.asarray(ro)))
    assert info["flags"] & _core.FLAG_READ_ONLY


def test_producer_from_py_refuses_other_objects():
    # The table may only be called with instances of its own type; a C consumer
    # that gets that wrong gets a TypeError, not a crash.
    class Impostor:
        __dlpack_c_exchange_api__ = tb.Tensor.__dlpack_c_exchange_api__

    with pytest.raises(TypeError, match=r"expected a tensorbridge\.Tensor; got Impostor"):
        _testing.table_from_py(Impostor())
    with pytest.raises(TypeError, match=r"expected a tensorbridge\.Tensor; got Impostor"):
        _testing.table_dltensor(Impostor())


def test_producer_to_py_adopts_and_validates():
    a = np.arange(5, dtype=np.int32)
    capsule, counter = capsule_of(a)
    t = _testing.table_to_py(tb.asarray([0.0]), capsule)
    assert type(t) is tb.Tensor and t.data_ptr() == a.ctypes.data and t.dtype == "int32"
    del t
    gc.collect()
    assert counter.calls == 1
    bad, counter = _testing.make_capsule(0, shape=(2,), version=(2, 0))
    with pytest.raises(BufferError, match=r"holds DLPack version 2\.0"):
        _testing.table_to_py(tb.asarray([0.0]), bad)
    gc.collect()
    assert counter.calls == 1  # stolen, so released on failure


def test_producer_dltensor_view():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[1:, ::2]
    t = tb.asarray(a)
    view = _testing.table_dltensor(t)
    assert (view["data"], view["byte_offset"]) == (t.data_ptr(), 0)  # offset folded
    assert view["shape"] == (2, 2) and view["strides"] == (4, 2)
    assert view["dtype"] == (2, 32, 1) and view["device"] == (1, 0)
    ro = np.arange(3.0)
    ro.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):
        _testing.table_dltensor(tb.asarray(ro))
    with pytest.raises(BufferError, match="sub-byte"):
        _testing.table_dltensor(tb.zeros(4, dtype="float4_e2m1fn"))


def test_producer_allocator():
    owner = tb.asarray([0.0])
    capsule = _testing.table_allocate(owner, (2, 3), dtype=(0, 16, 1))
    t = tb.from_dlpack(capsule)
    assert t.shape == (2, 3) and t.strides == (3, 1) and t.dtype == "int16"
    assert t.data_ptr() % 64 == 0
    t[...] = 7
    assert t.tolist() == [[7, 7, 7], [7, 7, 7]]
    assert tb.from_dlpack(_testing.table_allocate(owner, ())).shape == ()
    assert tb.from_dlpack(_testing.table_allocate(owner, (0, 5))).size == 0
    packed = tb.from_dlpack(_testing.table_allocate(owner, (3,), dtype=(17, 4, 1)))
    assert packed.dtype == "float4_e2m1fn" and packed.nbytes == 3  # one per byte (padded)
    with pytest.raises(RuntimeError, match="BufferError: tensorbridge allocates CPU memory"):
        _testing.table_allocate(owner, (2,), device=(2, 0))
    with pytest.raises(RuntimeError, match=r"BufferError: .*unknown dtype code 2 bits 24"):
        _testing.table_allocate(owner, (2,), dtype=(2, 24, 1))
    with pytest.raises(RuntimeError, match=r"BufferError: .*negative or too large"):
        _testing.table_allocate(owner, (2, -1))
    with pytest.raises(RuntimeError, match=r"BufferError: .*ndim 65"):
        _testing.table_allocate(owner, (1,), ndim=65)
    # Zero extents do not excuse the others from the size limit (no overflow later).
    with pytest.raises(RuntimeError, match=r"BufferError: .*negative or too large"):
        _testing.table_allocate(owner, (0, 2**62, 2**62))
    with pytest.raises(RuntimeError, match=r"BufferError: .*negative device_id"):
        _testing.table_allocate(owner, (2,), device=(1, -1))


def test_producer_current_work_stream_is_the_default_stream():
    owner = tb.asarray([0.0])
    assert _testing.table_stream(owner, 1, 0) == 0
    assert _testing.table_stream(owner, 2, 1) == 0


@needs("tvm_ffi")
def test_tvm_ffi_reads_tensors_through_the_table():
    import tvm_ffi

    a = np.arange(4.0)
    t = tb.asarray(a)
    x = tvm_ffi.from_dlpack(t)
    back = np.from_dlpack(x)
    back[2] = -1
    assert a[2] == -1


@needs("torch")
def test_torch_makes_tensors_from_ours_through_its_table():
    import torch

    t = tb.arange(6, dtype="float32").reshape(2, 3)
    x = _core._to_py_via_api(torch.Tensor, t)
    assert isinstance(x, torch.Tensor) and x.data_ptr() == t.data_ptr()
    assert x.tolist() == t.tolist()
    del t
    gc.collect()
    assert x.sum().item() == 15  # x keeps the memory alive
    assert _core._to_py_via_api(type(None), tb.asarray([1.0])) is None
