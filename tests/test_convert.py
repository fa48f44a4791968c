# SPDX-License-Identifier: Apache-2.0
"""convert and explain: the rules, one at a time."""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest
from producers import capsule_of, fake_device_producer

import tensorbridge as tb
from tensorbridge import _testing


def test_targets_by_name_alias_and_module():
    torch = pytest.importorskip("torch")
    a = np.arange(3.0)
    for to in ("torch", "pytorch", torch):
        assert isinstance(tb.convert(a, to), torch.Tensor)
    assert isinstance(tb.convert(a, np), np.ndarray)
    assert isinstance(tb.convert(a, "tb"), tb.Tensor)
    with pytest.raises(ValueError, match="unknown target framework 'torchx'"):
        tb.convert(a, "torchx")
    with pytest.raises(TypeError, match="must be a framework name or module"):
        tb.convert(a, 3)


def test_plan_is_what_convert_does():
    torch = pytest.importorskip("torch")
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


def test_dtype_casts_and_copy_rules():
    torch = pytest.importorskip("torch")
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


def test_readonly_sources_stay_protected():
    torch = pytest.importorskip("torch")
    ro = np.arange(3.0)
    ro.flags.writeable = False
    assert not tb.convert(ro, "numpy").flags.writeable
    assert tb.convert(ro, "tensorbridge").readonly
    x = tb.convert(ro, "torch")  # torch cannot say read-only: a copy
    x[0] = 9.0
    assert ro[0] == 0.0
    with pytest.raises(BufferError, match="torch tensors are always writable and the data is"):
        tb.convert(ro, "torch", copy=False)
    data = b"\x00\x00\x80?" * 2
    assert not tb.convert(data, "numpy").flags.writeable


def test_requires_grad():
    torch = pytest.importorskip("torch")
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


def test_requires_grad_paddle():
    pytest.importorskip("paddle")
    y = tb.convert(np.arange(3.0), "paddle", requires_grad=True)
    assert y.stop_gradient is False


def test_torch_negative_bit_views_are_resolved():
    torch = pytest.importorskip("torch")
    z = (torch.arange(3.0) * (1 + 1j)).conj()
    view = z.imag
    assert tb.convert(view, "numpy").tolist() == [-0.0, -1.0, -2.0]
    assert tb.convert(z, "numpy").tolist() == [0j, 1 - 1j, 2 - 2j]
    with pytest.raises(BufferError, match="copy=False, but torch negative-bit views must"):
        tb.convert(view, "numpy", copy=False)


def test_jax_without_x64_raises_with_the_fix():
    jax = pytest.importorskip("jax")
    was = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(BufferError, match=r"without 64-bit types.*jax.config.update\('jax_enable_x64', True\)"):
            tb.convert(np.arange(3.0), "jax")
        assert tb.convert(np.arange(3.0), "jax", dtype="float32").dtype == "float32"
    finally:
        jax.config.update("jax_enable_x64", was)


def test_jax_sources_are_read_only():
    pytest.importorskip("jax")
    import jax.numpy as jnp

    x = jnp.arange(4.0)
    b = tb.convert(x, "numpy")
    assert not b.flags.writeable
    plan = tb.explain(x, "numpy")
    assert "jax arrays are immutable: the data is treated as read-only" in plan.notes


def test_paddle_uint16_is_refused_not_relabelled():
    pytest.importorskip("paddle")
    with pytest.raises(BufferError, match="paddle has no uint16 type"):
        tb.convert(np.arange(3, dtype=np.uint16), "paddle")
    y = tb.convert(np.arange(3, dtype=np.uint16), "paddle", dtype="int32")
    assert str(y.dtype) == "paddle.int32" and y.tolist() == [0, 1, 2]


def test_mlx_keeps_float64_and_refuses_complex128():
    mx = pytest.importorskip("mlx.core")
    assert tb.convert(np.arange(3.0), "mlx").dtype == mx.float64
    with pytest.raises(BufferError, match="mlx has no complex128 type"):
        tb.convert(np.zeros(2, dtype=np.complex128), "mlx")
    with pytest.raises(BufferError, match="copy=False, but mlx always copies"):
        tb.convert(np.arange(3.0), "mlx", copy=False)


def test_pyarrow_sources_and_bool():
    pa = pytest.importorskip("pyarrow")
    chunked = pa.chunked_array([[1, 2], [3]])
    assert tb.convert(chunked, "numpy").tolist() == [1, 2, 3]
    assert "several chunks" in tb.explain(chunked, "numpy").copies[0]
    flags = pa.array([True, False, True])
    assert tb.convert(flags, "numpy").tolist() == [True, False, True]
    back = tb.convert(np.array([True, False]), "pyarrow")
    assert back.type == pa.bool_() and back.to_pylist() == [True, False]
    assert tb.convert(np.arange(6.0).reshape(2, 3), "pyarrow").shape == (2, 3)


def test_tensorflow_variables():
    tf = pytest.importorskip("tensorflow")
    v = tf.Variable([1.0, 2.0])
    assert tb.convert(v, "numpy").tolist() == [1.0, 2.0]


def test_device_memory_and_moves():
    t = tb.from_dlpack(fake_device_producer((2, 0)))
    with pytest.raises(BufferError, match="numpy holds CPU memory only; the data is on cuda:0"):
        tb.convert(t, "numpy")
    assert tb.convert(t, "tensorbridge").device == "cuda:0"
    with pytest.raises(BufferError, match="cannot move cpu data to cuda:0"):
        tb.convert(np.arange(3.0), "tensorbridge", device="cuda")


@pytest.fixture
def fake_cupy(monkeypatch):
    calls = []
    cupy = types.ModuleType("cupy")
    cupy.from_dlpack = lambda x: calls.append(("from_dlpack", x)) or x
    cupy.asarray = lambda x: calls.append(("asarray", x)) or x
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return calls


def test_cupy_copies_cpu_data_to_the_gpu(fake_cupy):
    a = np.arange(3.0)
    plan = tb.explain(a, "cupy")
    assert plan.copies == ["cupy holds GPU memory: the cpu data is copied to the GPU"]
    tb.convert(a, "cupy")
    assert fake_cupy[0][0] == "asarray"
    with pytest.raises(BufferError, match="copy=False, but cupy holds GPU memory"):
        tb.convert(a, "cupy", copy=False)


def test_cupy_shares_cuda_memory(fake_cupy):
    t = tb.from_dlpack(fake_device_producer((2, 0)))
    assert tb.explain(t, "cupy").shares_memory
    tb.convert(t, "cupy")
    assert fake_cupy == [("from_dlpack", t)]


def test_frameworks_are_imported_only_when_needed():
    code = (
        "import sys, numpy as np, tensorbridge as tb; "
        "tb.convert(np.arange(3.0), 'numpy'); tb.explain(np.arange(3.0), 'tensorbridge'); "
        "print(sorted(m for m in ('torch', 'jax', 'paddle', 'tensorflow', 'mlx', 'pyarrow') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.strip() == "[]"
