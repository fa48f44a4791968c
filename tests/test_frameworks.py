# SPDX-License-Identifier: Apache-2.0
"""The framework registry (_frameworks/): targets by name, alias and module, frameworks
imported only when needed, and each framework's facts and quirks as convert applies
them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
from needs import needs
from producers import fake_device_producer

import tensorbridge as tb
from tensorbridge._frameworks import FRAMEWORKS

# --------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------


@needs("torch")
def test_targets_by_name_alias_and_module():
    import torch

    a = np.arange(3.0)
    for to in ("torch", "pytorch", torch):
        assert isinstance(tb.convert(a, to), torch.Tensor)
    assert isinstance(tb.convert(a, np), np.ndarray)
    assert isinstance(tb.convert(a, "tb"), tb.Tensor)
    with pytest.raises(ValueError, match="unknown target framework 'torchx'") as info:
        tb.convert(a, "torchx")
    # Answered with every name and its aliases.
    for name in ("numpy (np)", "torch (pytorch)", "jax (jnp, jax.numpy)", "mlx (mx, mlx.core)"):
        assert name in str(info.value)
    with pytest.raises(TypeError, match="must be a framework name or module"):
        tb.convert(a, 3)


@needs("jax")
def test_jax_by_the_names_of_its_numpy_module():
    import jax.numpy as jnp

    a = np.arange(3, dtype=np.float32)
    for to in ("jnp", "jax.numpy", jnp, "jax"):
        assert tb.asarray(tb.convert(a, to)).tolist() == [0.0, 1.0, 2.0]
        assert tb.explain(a, to).target == "jax"


def test_frameworks_are_imported_only_when_needed():
    others = sorted({m for f in FRAMEWORKS.values() for m in f.modules} - {"numpy", "tensorbridge"})
    code = (
        "import sys, numpy as np, tensorbridge as tb; "
        "tb.convert(np.arange(3.0), 'numpy'); tb.explain(np.arange(3.0), 'tensorbridge'); "
        f"print(sorted(m for m in {others!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.strip() == "[]"


# --------------------------------------------------------------------------
# Each framework
# --------------------------------------------------------------------------


@needs("paddle")
def test_requires_grad_paddle():
    y = tb.convert(np.arange(3.0), "paddle", requires_grad=True)
    assert y.stop_gradient is False


@needs("jax")
def test_jax_without_x64_raises_with_the_fix():
    import jax

    was = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(
            BufferError, match=r"without 64-bit types.*jax.config.update\('jax_enable_x64', True\)"
        ):
            tb.convert(np.arange(3.0), "jax")
        assert tb.convert(np.arange(3.0), "jax", dtype="float32").dtype == "float32"
    finally:
        jax.config.update("jax_enable_x64", was)


@needs("jax")
def test_jax_sources_are_read_only():
    import jax.numpy as jnp

    x = jnp.arange(4.0)
    b = tb.convert(x, "numpy")
    assert not b.flags.writeable
    plan = tb.explain(x, "numpy")
    assert "jax arrays are immutable: the data is treated as read-only" in plan.notes


JAX_DTYPES = sorted(FRAMEWORKS["jax"].dtypes)


@needs("jax")
@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("dtype", JAX_DTYPES)
def test_jax_cpu_import_is_jax_from_dlpack_without_its_python_layer(dtype, x64):
    # The fast import (jaxlib's call, not jax.dlpack.from_dlpack) gives what the public
    # function gives: type, dtype (canonicalised alike without x64), values, and memory.
    import jax

    framework = FRAMEWORKS["jax"]
    make = framework._cpu_importer()
    assert make is not None, "this jaxlib's import was not taken: the fast path is untested"
    was = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", x64)
    try:
        t = tb.asarray(np.arange(1, 7).reshape(2, 3)).astype(dtype)
        ours, theirs = make(t), jax.dlpack.from_dlpack(t)
        assert type(ours) is type(theirs)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape == (2, 3)
        assert np.array_equal(np.asarray(ours), np.asarray(theirs))
        if ours.dtype == t.dtype.name:
            assert ours.unsafe_buffer_pointer() == theirs.unsafe_buffer_pointer() == t.data_ptr()
        converted = tb.convert(t, "jax") if x64 or t.dtype.bits < 64 else None
        if converted is not None:
            assert np.array_equal(np.asarray(converted), np.asarray(theirs))
    finally:
        jax.config.update("jax_enable_x64", was)


@needs("jax")
def test_jax_cpu_import_falls_back_to_the_public_function(monkeypatch):
    import jax
    import jax._src.lib

    framework = FRAMEWORKS["jax"]
    # A jaxlib older than the signature the fast import was written against.
    monkeypatch.setattr(jax._src.lib, "jaxlib_extension_version", 466)
    monkeypatch.setattr(framework, "cpu_import", None)  # probed again
    monkeypatch.setattr(framework, "fast_cache", None)
    assert framework._cpu_importer() is None
    called = []
    public = jax.dlpack.from_dlpack
    monkeypatch.setattr(jax.dlpack, "from_dlpack", lambda x: called.append(x) or public(x))
    a = np.arange(16, dtype=np.float32)
    assert np.array_equal(np.asarray(framework.make(tb.asarray(a))), a)
    assert called


@needs("paddle")
def test_paddle_uint16_is_refused_not_relabelled():
    with pytest.raises(BufferError, match="paddle has no uint16 type"):
        tb.convert(np.arange(3, dtype=np.uint16), "paddle")
    y = tb.convert(np.arange(3, dtype=np.uint16), "paddle", dtype="int32")
    assert str(y.dtype) == "paddle.int32" and y.tolist() == [0, 1, 2]


@needs("mlx")
def test_mlx_keeps_float64_and_refuses_complex128():
    import mlx.core as mx

    assert tb.convert(np.arange(3.0), "mlx").dtype == mx.float64
    with pytest.raises(BufferError, match="mlx has no complex128 type"):
        tb.convert(np.zeros(2, dtype=np.complex128), "mlx")
    with pytest.raises(BufferError, match="copy=False, but mlx always copies"):
        tb.convert(np.arange(3.0), "mlx", copy=False)


@needs("pyarrow")
def test_pyarrow_chunked_arrays_of_several_chunks_are_joined():
    import pyarrow as pa

    chunked = pa.chunked_array([[1, 2], [3]])
    assert tb.convert(chunked, "numpy").tolist() == [1, 2, 3]
    assert "several chunks" in tb.explain(chunked, "numpy").copies[0]
    with pytest.raises(BufferError, match=r"copy=False, but a pyarrow\.ChunkedArray with several"):
        tb.convert(chunked, "numpy", copy=False)


@needs("pyarrow")
@pytest.mark.parametrize(
    "target", ["numpy", "tensorbridge", pytest.param("torch", marks=needs("torch")), "pyarrow"]
)
def test_pyarrow_fixed_size_lists_are_read_as_tensors_alone_or_chunked(target):
    # Its __dlpack__ refuses lists, and the advice was to cast (which cannot work);
    # the chunked form was read as a 2-d tensor by asarray but refused by convert
    # (issue 33, item 8). Both are read through the Arrow C data interface.
    import pyarrow as pa

    values = pa.array(np.arange(6.0))
    lists = pa.FixedSizeListArray.from_arrays(values, 2)
    want = [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    for source in (lists, pa.chunked_array([lists]), lists[1:]):
        rows = want[3 - len(source) :]
        assert tb.asarray(source).tolist() == rows
        plan = tb.explain(source, target)
        out = tb.convert(source, target)
        if target == "pyarrow" and isinstance(source, pa.Array):
            assert out is source  # its own array, returned as it is
            continue
        assert tb.asarray(out).tolist() == rows and plan.shape == (len(rows), 2)
        assert plan.shares_memory  # (torch shares read-only data, and says so)
        start = values.buffers()[1].address + 8 * 2 * (3 - len(rows))
        assert tb.from_dlpack(out).data_ptr() == start
        assert "Arrow C data interface" in " ".join(plan.notes)
    joined = tb.convert(pa.chunked_array([lists, lists]), target)
    assert tb.asarray(joined).tolist() == want + want
    with pytest.raises(BufferError, match="several chunks"):
        tb.convert(pa.chunked_array([lists, lists]), target, copy=False)


@needs("pyarrow")
def test_nulls_in_fixed_size_lists_get_a_fix_that_works():
    import pyarrow as pa

    tensor_of = tb.asarray
    inner = pa.FixedSizeListArray.from_arrays(pa.array([1.0, None, 3.0, 4.0]), 2)
    outer = pa.array([[[1, 2], [3, 4]], None], pa.list_(pa.list_(pa.int64(), 2), 2))
    with pytest.raises(BufferError, match=r"lists \(level 1\) hold 1 null") as info:
        tb.convert(inner, "numpy")
    assert "from_arrays(array.flatten().fill_null(0), 2)" in str(info.value)
    fixed = pa.FixedSizeListArray.from_arrays(inner.flatten().fill_null(0), 2)
    assert tensor_of(fixed).tolist() == [[1.0, 0.0], [3.0, 4.0]]
    with pytest.raises(BufferError, match=r"\.fill_null\(\[\[0, 0\], \[0, 0\]\]\)"):
        tb.convert(pa.chunked_array([outer]), "numpy")
    assert tensor_of(outer.fill_null([[0, 0], [0, 0]])).tolist()[1] == [[0, 0], [0, 0]]


@needs("pyarrow")
def test_a_one_chunk_chunked_array_is_shared_as_explain_says():
    # Every column of a pyarrow.Table is a ChunkedArray, mostly of one chunk: its
    # buffer is shared (combine_chunks() would copy it), also under copy=False.
    import pyarrow as pa

    column = pa.table({"x": np.arange(5.0)}).column("x")
    assert column.num_chunks == 1
    address = column.chunk(0).buffers()[1].address
    for target in ("numpy", "tensorbridge"):  # (targets that can hold read-only memory)
        plan = tb.explain(column, target)
        assert plan.shares_memory and not plan.copies, target
        out = tb.convert(column, target, copy=False)
        assert tb.from_dlpack(out).data_ptr() == address, target
        assert tb.from_dlpack(out).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    empty = pa.chunked_array([], type=pa.float64())
    assert tb.convert(empty, "numpy", copy=False).shape == (0,)


@needs("pyarrow")
def test_pyarrow_bool_and_nd():
    import pyarrow as pa

    flags = pa.array([True, False, True])
    assert tb.convert(flags, "numpy").tolist() == [True, False, True]
    back = tb.convert(np.array([True, False]), "pyarrow")
    assert back.type == pa.bool_() and back.to_pylist() == [True, False]
    assert tb.convert(np.arange(6.0).reshape(2, 3), "pyarrow").shape == (2, 3)


ABORTING = textwrap.dedent(
    """
    import tensorflow as tf, tensorbridge as tb
    made = {
        "string": tf.constant(["a", "b"]),
        "resource": tf.Variable([1.0]).handle,
        "variant": tf.data.experimental.to_variant(tf.data.Dataset.range(2)),
    }
    numbers = tf.constant([1.0, 2.0])
    from tensorbridge._frameworks import FRAMEWORKS
    candidates = ("numpy", "torch", "tensorbridge", "mlx", "jax", "pyarrow", "tvm_ffi")
    targets = [t for t in candidates if FRAMEWORKS[t].available()]
    for target in targets:
        tb.convert(numbers, target)
        tb.convert(numbers, target)  # (a route for EagerTensor, cached)
    for name, x in made.items():
        calls = [lambda: tb.asarray(x), lambda: tb.from_dlpack(x), lambda: tb.explain(x, "numpy")]
        calls += [lambda t=t: tb.convert(x, t) for t in targets]
        for call in calls:
            try:
                call()
            except BufferError as exc:
                assert f"a TensorFlow {name} tensor has no DLPack form" in str(exc), exc
            else:
                raise AssertionError(f"{name}: no error")
    print("refused, not aborted")
    """
)


@needs("tensorflow")
def test_tensorflow_exports_that_abort_are_never_asked():
    # TensorFlow's __dlpack__ aborts the process on string, resource and variant
    # tensors (Check failed: DataTypeCanUseMemcpy), as numpy.from_dlpack finds: they
    # are refused before it is called, on every path (in a child: an abort ends it).
    run = subprocess.run(
        [sys.executable, "-c", ABORTING], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "refused, not aborted" in run.stdout
    inspected = subprocess.run(
        [sys.executable, "-m", "tensorbridge", "inspect", "tf.constant(['a'])"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert inspected.returncode == 1, inspected.stderr[-2000:]
    assert "__dlpack__(): not asked: a TensorFlow string tensor" in inspected.stdout


@needs("tensorflow")
def test_tensorflow_variables():
    import tensorflow as tf

    v = tf.Variable([1.0, 2.0])
    assert tb.convert(v, "numpy").tolist() == [1.0, 2.0]


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
