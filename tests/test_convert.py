# SPDX-License-Identifier: Apache-2.0
"""convert and explain (_convert.py, the planner): the rules, one at a time. Each
framework's own facts and quirks are in test_frameworks.py."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from needs import needs
from producers import capsule_of, fake_device_producer

import tensorbridge as tb
from tensorbridge import _testing


@needs("torch")
def test_plan_is_what_convert_does():
    import torch

    a = np.arange(6.0)[::-1]
    plan = tb.explain(a, "torch")
    assert isinstance(plan, tb.Plan)
    assert plan.target == "torch" and plan.dtype == "float64" and plan.shape == (6,)
    assert not plan.shares_memory
    assert plan.copies == ["torch cannot take negative strides"]
    text = str(plan)
    assert "memory:  copied: torch cannot take negative strides" in text
    assert text.startswith("convert numpy.ndarray float64 (6,) strides (-1,) on cpu -> torch")
    assert repr(plan) == text
    x = tb.convert(a, "torch")
    assert x.tolist() == a.tolist() and x.data_ptr() != a.ctypes.data
    shared = tb.explain(np.arange(3.0), torch)
    assert shared.shares_memory and "shared (zero-copy)" in str(shared)


def test_explain_does_not_consume_a_capsule_and_convert_does():
    a = np.arange(4.0)
    capsule, _ = capsule_of(a)
    plan = tb.explain(capsule, "numpy")
    assert plan.shares_memory and plan.source.startswith("DLPack capsule float64 (4,)")
    assert _testing.capsule_name(capsule) == "dltensor_versioned"
    b = tb.convert(capsule, "numpy")
    assert _testing.capsule_name(capsule) == "used_dltensor_versioned"
    assert b.__array_interface__["data"][0] == a.ctypes.data


@needs("torch")
def test_dtype_casts_and_copy_rules():
    import torch

    a = np.arange(4)
    x = tb.convert(a, "torch", dtype="float32")
    assert x.dtype == torch.float32 and x.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="copy=False, but casting int64 to float32 needs a copy"):
        tb.convert(a, "torch", dtype="float32", copy=False)
    y = tb.convert(a, "numpy", copy=True)
    assert y.__array_interface__["data"][0] != a.ctypes.data and y.tolist() == a.tolist()
    assert tb.explain(a, "numpy", copy=True).copies == ["copy=True"]
    with pytest.raises(TypeError, match="copy must be True, False or None"):
        tb.convert(a, "numpy", copy="no")


@needs("torch")
def test_readonly_sources_stay_protected_where_the_target_can_say_so():
    ro = np.arange(3.0)
    ro.flags.writeable = False
    for readonly in ("share", "copy"):
        y = tb.convert(ro, "numpy", readonly=readonly)
        assert not y.flags.writeable and y.ctypes.data == ro.ctypes.data
        t = tb.convert(ro, "tensorbridge", readonly=readonly)
        assert t.readonly and t.data_ptr() == ro.ctypes.data
    data = b"\x00\x00\x80?" * 2
    assert not tb.convert(data, "numpy").flags.writeable


@needs("torch")
def test_readonly_data_is_shared_with_writable_only_targets_by_default():
    # The Array API's rule, and what torch.from_dlpack does: torch cannot mark a
    # tensor read-only, so it gets the memory, writable; explain says so.
    ro = np.arange(3.0)
    ro.flags.writeable = False
    plan = tb.explain(ro, "torch")
    assert plan.shares_memory and not plan.copies
    assert any("writable over read-only data" in note for note in plan.notes)
    x = tb.convert(ro, "torch", copy=False)
    assert x.data_ptr() == ro.ctypes.data
    x[0] = 9.0
    assert ro[0] == 9.0


@needs("torch")
def test_readonly_copy_gives_writable_only_targets_a_private_copy():
    ro = np.arange(3.0)
    ro.flags.writeable = False
    plan = tb.explain(ro, "torch", readonly="copy")
    assert not plan.shares_memory and 'readonly="copy"' in plan.copies[0]
    assert not any("writable over" in note for note in plan.notes)
    x = tb.convert(ro, "torch", readonly="copy")
    x[0] = 9.0
    assert ro[0] == 0.0
    with pytest.raises(BufferError, match="torch tensors are always writable and the data is"):
        tb.convert(ro, "torch", copy=False, readonly="copy")
    w = np.arange(3.0)  # writable data: shared either way, no note
    assert tb.convert(w, "torch", readonly="copy").data_ptr() == w.ctypes.data
    assert tb.explain(w, "torch").notes == []
    with pytest.raises(ValueError, match='readonly must be "share" or "copy"; got \'no\''):
        tb.convert(ro, "torch", readonly="no")
    with pytest.raises(ValueError, match='readonly must be "share" or "copy"'):
        tb.convert(w, "numpy", readonly=True)


@needs("torch")
def test_requires_grad():
    import torch

    x = tb.convert(np.arange(3.0), "torch", requires_grad=True)
    assert x.requires_grad and x.is_leaf
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="only floating-point and complex tensors"):
        tb.convert(np.arange(3), "torch", requires_grad=True)
    with pytest.raises(ValueError, match="requires_grad=True, but numpy has no autograd"):
        tb.convert(np.arange(3.0), "numpy", requires_grad=True)
    # A source that requires grad is detached (its memory is shared, not copied).
    w = torch.ones(3, requires_grad=True)
    plan = tb.explain(w, "numpy")
    assert plan.shares_memory and "detached from autograd (shares memory)" in plan.notes


def test_device_memory_and_moves():
    t = tb.from_dlpack(fake_device_producer((2, 0)))
    with pytest.raises(BufferError, match="numpy holds CPU memory only; the data is on cuda:0"):
        tb.convert(t, "numpy")
    assert tb.convert(t, "tensorbridge").device == "cuda:0"
    with pytest.raises(BufferError, match="cannot move cpu data to cuda:0"):
        tb.convert(np.arange(3.0), "tensorbridge", device="cuda")


def test_the_target_is_given_positionally_or_as_to():
    a = np.arange(3.0)
    for call in (lambda: tb.convert(a, "numpy"), lambda: tb.convert(a, to="numpy")):
        out = call()
        assert type(out) is np.ndarray and out.ctypes.data == a.ctypes.data
    assert tb.convert(a, to="tensorbridge", copy=True).data_ptr() != a.ctypes.data
    assert tb.explain(a, to="numpy").shares_memory
    assert tb.explain(a, "numpy", copy=True).shares_memory is False
    for f in (tb.convert, tb.explain):
        with pytest.raises(TypeError, match="argument"):
            f(a)  # the target is required
        with pytest.raises(TypeError):
            f(obj=a, to="numpy")  # the source is positional only


def test_an_array_of_the_target_s_own_is_returned_itself():
    a = np.arange(3.0)
    assert tb.convert(a, "numpy") is a and tb.convert(a, "numpy") is a  # planner, then C
    assert tb.convert(a, "numpy", dtype="float64", device="cpu", copy=False) is a
    assert tb.convert(a, "numpy", dtype="float32") is not a
    assert tb.convert(a, "numpy", copy=True) is not a
    m = np.ma.masked_array(a)  # a subclass: a base-class view, as numpy.asarray gives
    out = tb.convert(m, "numpy")
    assert type(out) is np.ndarray and out.ctypes.data == a.ctypes.data
    t = tb.asarray(a)
    assert tb.convert(t, "tensorbridge") is t
    plan = tb.explain(a, "numpy")
    assert plan.shares_memory and plan.path.startswith("the source itself")


@needs("torch")
def test_autograd_is_kept_as_torch_asarray_keeps_it():
    import torch

    leaf = torch.ones(3, requires_grad=True)
    y = leaf * 2
    for _ in range(2):  # (the planner, then the compiled route)
        out = tb.convert(y, "torch")
        assert out is y and out.grad_fn is not None
    out.sum().backward()
    assert leaf.grad.tolist() == [2.0, 2.0, 2.0]
    # requires_grad=False: a detached alias, as torch.asarray(y, requires_grad=False)
    detached = tb.convert(y, "torch", requires_grad=False)
    assert detached is not y and not detached.requires_grad
    assert detached.data_ptr() == y.data_ptr()
    # requires_grad=True on a tensor that does not require grad: set in place
    plain = torch.ones(2)
    assert tb.explain(plain, "torch", requires_grad=True).notes == [
        "requires_grad is set on it, in place (as torch.asarray does)"
    ]
    assert not plain.requires_grad  # (explain changes nothing)
    assert tb.convert(plain, "torch", requires_grad=True) is plain and plain.requires_grad
    # Other sources become tensors that do not require grad, unless asked.
    assert not tb.convert(np.ones(2), "torch").requires_grad
    assert tb.convert(np.ones(2), "torch", requires_grad=True).requires_grad
    # From torch into another framework: detached, as before.
    assert tb.convert(y, "numpy").tolist() == [2.0, 2.0, 2.0]


@needs("pyarrow")
def test_explain_agrees_for_own_arrays_dlpack_cannot_export():
    import pyarrow as pa

    for arr in (pa.array(["x", "y"]), pa.array([1.0, None])):
        assert tb.convert(arr, "pyarrow") is arr
        plan = tb.explain(arr, "pyarrow")
        assert plan.shares_memory and plan.shape == (2,)
    strings = np.array(["a"])
    assert tb.convert(strings, "numpy") is strings
    assert tb.explain(strings, "numpy").shares_memory


@needs("torch")
def test_requires_grad_on_a_tensor_that_cannot_is_refused_by_both():
    import torch

    ints = torch.ones(2, dtype=torch.int64)
    with pytest.raises(ValueError, match="floating-point"):
        tb.convert(ints, "torch", requires_grad=True)
    assert not ints.requires_grad


def test_threads_converting_while_numpy_is_imported_all_succeed():
    # A fresh process where NumPy is not imported yet: the first conversions into it
    # race its import (a partly imported module has no ndarray yet).
    script = """
import array, sys, threading
import tensorbridge as tb

assert "numpy" not in sys.modules
t = tb.asarray(array.array("f", range(6)))
start = threading.Barrier(4)
results = [None] * 4

def first(i):
    start.wait()
    results[i] = tb.convert(t, "numpy").tolist()

threads = [threading.Thread(target=first, args=(i,)) for i in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(results)
"""
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        assert out.stdout.strip() == str([[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]] * 4)


def test_a_module_counts_as_loaded_once_its_import_is_complete(monkeypatch):
    import importlib.machinery
    import types

    from tensorbridge._known_types import loaded

    module = types.ModuleType("tb_half_imported")
    module.__spec__ = importlib.machinery.ModuleSpec("tb_half_imported", None)
    module.__spec__._initializing = True  # what CPython sets while it runs the module
    monkeypatch.setitem(sys.modules, "tb_half_imported", module)
    assert loaded("tb_half_imported") is None
    module.__spec__._initializing = False
    assert loaded("tb_half_imported") is module
    module.__spec__ = None  # (a module made by hand has no spec)
    assert loaded("tb_half_imported") is module
    assert loaded("tb_never_imported") is None
    assert loaded("numpy") is np


def test_no_route_is_cached_while_numpy_is_half_imported(monkeypatch):
    from tensorbridge import _convert
    from tensorbridge._frameworks import FRAMEWORKS

    array = np.arange(3.0)
    target = FRAMEWORKS["tensorbridge"]
    assert _convert.route_mode(array, target) != 0
    # As another thread's unfinished import of NumPy looks (it is in sys.modules).
    monkeypatch.setattr(_convert, "loaded", lambda name: None)
    assert _convert.route_mode(array, target) == 0
    # A process that blocks NumPy's import (sys.modules["numpy"] = None) caches routes.
    tensor = tb.from_dlpack(array)
    monkeypatch.setitem(sys.modules, "numpy", None)
    assert _convert.route_mode(tensor, target) != 0
