# SPDX-License-Identifier: Apache-2.0
"""What JAX's interoperability suite checks of JAX, asked of tensorbridge in both roles.

The peer suite is jax-ml/jax ``tests/array_interoperability_test.py`` (DLPackTest,
CudaArrayInterfaceTest, Bfloat16Test). Producer role: ``jax.dlpack.from_dlpack`` /
``jnp.from_dlpack``, NumPy or TensorFlow read a ``tb.Tensor``. Consumer role:
``tb.from_dlpack``/``tb.asarray`` read JAX arrays, NumPy arrays of any alignment and
TensorFlow tensors. TensorFlow runs in a subprocess: it aborts the process on
memory that is not 64-byte aligned, and PaddlePaddle cannot be imported into a
process that has loaded it. GPU/TPU/CuPy checks have no counterpart here (see
tests/peers/COVERAGE.md, which maps every peer check to the test that covers it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from needs import framework, needs

import tensorbridge as tb

jax = framework("jax")
jax_dlpack = framework("jax.dlpack")
jnp = framework("jax.numpy")

# The dtypes jax.dlpack supports (jax._src.dlpack.SUPPORTED_DTYPES_SET).
JAX_DTYPES = [
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
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
NUMPY_DTYPES = [d for d in JAX_DTYPES if d != "bfloat16"]
# The peer's all_shapes: 0-d, non-empty, size-1 dimensions, empty.
SHAPES = [(), (4,), (3, 4), (2, 3, 4), (3, 1), (1, 4), (2, 1, 4), (0,), (0, 4), (3, 0)]


@pytest.fixture(autouse=True, scope="module")
def _x64():
    """64-bit dtypes, as the peer's x64 runs; restored for the other modules."""
    was = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", was)


def _np_dtype(name):
    if name == "bfloat16":
        return np.dtype(jnp.bfloat16)
    return np.dtype(name)


def _host(shape, name):
    """Distinct values of a dtype and shape, as NumPy data."""
    n = int(np.prod(shape))
    values = np.arange(n).reshape(shape)
    if name == "bool":
        return values % 2 == 0
    if name.startswith("complex"):
        return (values - 1j * values).astype(name)
    return values.astype(_np_dtype(name))


def _placed(array, alignment):
    """A copy of ``array`` whose first byte sits at an address that is a multiple of
    ``alignment`` but not of ``2 * alignment`` (so exactly that aligned)."""
    raw = np.empty(array.nbytes + 4 * alignment, dtype=np.uint8)
    address = raw.__array_interface__["data"][0]
    start = (-address) % (2 * alignment) + alignment  # a multiple of 2*alignment, plus one step
    placed = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    placed[...] = array
    if array.size:  # (an empty slice may point anywhere)
        assert placed.__array_interface__["data"][0] % (2 * alignment) == alignment
    return placed


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------
# DLPackTest
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", JAX_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_jax_arrays_into_tensorbridge(shape, name):
    """Mirrors testJaxArrayRoundTrip (cpu) and testJaxToNumpy, tensorbridge
    consuming: a JAX array imports, twice from the same array, keeping shape, dtype,
    device and values; NumPy then reads our import (testJaxToNumpy's dtypes)."""
    host = _host(shape, name)
    x = jnp.asarray(host)
    first, second = tb.from_dlpack(x), tb.from_dlpack(x)
    for t in (first, second):
        assert t.shape == shape and t.dtype == name and str(t.device) == "cpu"
        _same(t.numpy(), host)
    if name != "bfloat16":  # NumPy has no bfloat16 (the peer's numpy_dtypes)
        _same(np.from_dlpack(first), host)


@pytest.mark.parametrize("name", JAX_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_tensorbridge_tensors_into_jax(shape, name):
    """Mirrors testJaxArrayRoundTrip (cpu), tensorbridge producing: jax imports a
    tensor of ours, twice, onto the CPU device, with our dtype and values."""
    host = _host(shape, name)
    t = tb.asarray(host)
    cpu = jax.devices("cpu")[0]
    for _ in range(2):
        y = jax_dlpack.from_dlpack(t)
        assert y.devices() == {cpu}
        assert y.dtype == _np_dtype(name)
        _same(np.asarray(y), host)


@pytest.mark.parametrize("name", NUMPY_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_numpy_memory_of_any_alignment(shape, name):
    """Mirrors testNumpyToJax (copy None/False/True; memory aligned to 64 bytes or to
    exactly 2). Consuming, tensorbridge shares any alignment unless copy=True.
    Producing, jnp.from_dlpack(device=, copy=) of a tensor over such memory gives
    the values, and refuses copy=False for memory XLA cannot adopt (not 64-byte
    aligned; our empty tensors export a NULL pointer, which it can)."""
    cpu = jax.devices("cpu")[0]
    for alignment in (64, 2):
        host = _placed(_host(shape, name), alignment)
        for copy in (None, False, True):
            t = tb.from_dlpack(host, device="cpu", copy=copy)
            _same(t.numpy(), host)
            if host.size:
                shares = t.data_ptr() == host.__array_interface__["data"][0]
                assert shares is (copy is not True), (alignment, copy)

            source = tb.asarray(host)
            if copy is False and alignment == 2 and host.size:
                with pytest.raises(ValueError, match="requires a copy"):
                    jnp.from_dlpack(source, device=cpu, copy=copy)
            else:
                _same(np.asarray(jnp.from_dlpack(source, device=cpu, copy=copy)), host)


def test_old_signature_producer_of_pinned_style_memory():
    """Mirrors testTpuHostBufferDmaMap's wrapper (TPU-only there): a producer whose
    __dlpack__ only takes ``stream``, read without a copy, so that data written
    after the import shows through; copy=False, which it cannot take, is refused
    with an error that says so."""

    class OldWrapper:
        def __init__(self, array):
            self.array = array

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, stream=None):
            return self.array.__dlpack__(stream=stream)

    host = np.zeros(1024, dtype=np.uint32)
    t = tb.from_dlpack(OldWrapper(host))
    host[:] = np.arange(1024, dtype=np.uint32)
    assert t.tolist() == list(range(1024))
    with pytest.raises(TypeError, match=r"OldWrapper\.__dlpack__ does not take copy="):
        tb.from_dlpack(OldWrapper(host), copy=False)


def test_jax_arrays_stay_read_only():
    """JAX arrays are immutable; their legacy capsule cannot say so. Importing one
    (testJaxToNumpy's path, through tensorbridge) must not make it writable: the
    import and NumPy's view of it are read-only."""
    x = jnp.arange(4.0)
    t = tb.from_dlpack(x)
    assert t.readonly is True
    assert not np.from_dlpack(t).flags.writeable


# --------------------------------------------------------------------------
# CudaArrayInterfaceTest and Bfloat16Test, on the host interface
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", NUMPY_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_array_interface_matches_numpy(shape, name):
    """Mirrors testCudaArrayInterfaceWorks on the host interface (tensorbridge has no
    __cuda_array_interface__): shape and typestr are NumPy's for the same data."""
    t = tb.asarray(_host(shape, name))
    interface = t.__array_interface__
    assert interface["shape"] == shape
    assert interface["typestr"] == np.dtype(name).str
    assert interface["typestr"] == np.asarray(t).__array_interface__["typestr"]


def test_array_interface_refuses_bfloat16():
    """Mirrors testCudaArrayInterfaceBfloat16Fails (an AttributeError for BF16)."""
    t = tb.from_dlpack(jnp.ones((2, 2), jnp.bfloat16))
    assert not hasattr(t, "__array_interface__")
    with pytest.raises(AttributeError, match="bfloat16"):
        t.__array_interface__  # noqa: B018


def test_bfloat16_is_the_type_jax_uses():
    """Mirrors Bfloat16Test.testJaxAndTfHaveTheSameBfloat16Type for tensorbridge and
    JAX (TensorFlow's side is in the subprocess test below): our bfloat16 data
    comes out as JAX's NumPy bfloat16 type, and that type comes back as ours."""
    x = jnp.ones((2, 2), jnp.bfloat16)
    t = tb.from_dlpack(x)
    assert t.numpy().dtype == np.dtype(jnp.bfloat16)
    assert t.numpy().dtype.num == np.dtype(jnp.bfloat16).num
    assert tb.asarray(np.asarray(x)).dtype == tb.bfloat16


# --------------------------------------------------------------------------
# TensorFlow, in its own process
# --------------------------------------------------------------------------

_TENSORFLOW_SWEEP = """
import sys, warnings
warnings.simplefilter("ignore")
import numpy as np, ml_dtypes, tensorflow as tf, tensorbridge as tb

DTYPES = {dtypes!r}
SHAPES = {shapes!r}
problems = []

def host(shape, name):
    values = np.arange(int(np.prod(shape))).reshape(shape)
    if name == "bool":
        return values % 2 == 0
    if name.startswith("complex"):
        return (values - 1j * values).astype(name)
    return values.astype(ml_dtypes.bfloat16 if name == "bfloat16" else name)

def check(label, got, want, name):
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
        problems.append(f"{{label}}: got {{got.dtype}}{{got.shape}} {{got.tolist()}}")

for name in DTYPES:
    for shape in SHAPES:
        want = host(shape, name)
        where = f"{{name}}{{shape}}"
        # testTensorFlowToJax: TensorFlow produces, through the protocol and a capsule.
        x = tf.identity(tf.constant(want))
        t = tb.from_dlpack(x)
        if t.dtype != name or t.shape != shape:
            problems.append(f"tf->tb {{where}}: {{t.dtype}}{{t.shape}}")
        else:
            check(f"tf->tb {{where}}", t.numpy(), want, name)
        check(f"tf capsule->tb {{where}}",
              tb.from_dlpack(tf.experimental.dlpack.to_dlpack(x)).numpy(), want, name)
        # testJaxToTensorFlow: we produce a legacy capsule (x.__dlpack__()).
        listed = (want.astype(np.float32) if name == "bfloat16" else want).tolist()
        ours = tb.asarray(listed, dtype=name).reshape(shape)  # a fresh, aligned tensor
        if ours.size and ours.data_ptr() % 64:
            problems.append(f"tb->tf {{where}}: our allocation is not 64-byte aligned")
            continue
        y = tf.experimental.dlpack.from_dlpack(ours.__dlpack__())
        check(f"tb->tf {{where}}", y.numpy(), want, name)

# testTensorFlowToJaxInt64: int64 stays int64.
if tb.from_dlpack(tf.ones((2, 3), tf.int64)).dtype != "int64":
    problems.append("tf int64 did not stay int64")
# testTensorFlowToJaxNondefaultLayout: a transposed TensorFlow tensor.
x = tf.transpose(np.arange(4).reshape(2, 2))
if tb.from_dlpack(x).tolist() != x.numpy().tolist():
    problems.append("transposed tf tensor")
# Bfloat16Test: one bfloat16 type for TensorFlow and tensorbridge.
if np.dtype(tf.dtypes.bfloat16.as_numpy_dtype) != tb.zeros(2, dtype="bfloat16").numpy().dtype:
    problems.append("bfloat16 types differ")
print("\\n".join(problems) if problems else "ok")
"""


@needs("tensorflow")
def test_tensorflow_both_ways():
    """Mirrors testTensorFlowToJax, testJaxToTensorFlow (every shape and dtype),
    testTensorFlowToJaxInt64, testTensorFlowToJaxNondefaultLayout and Bfloat16Test,
    with tensorbridge in JAX's place."""
    code = textwrap.dedent(_TENSORFLOW_SWEEP).format(dtypes=JAX_DTYPES, shapes=SHAPES)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1:] == ["ok"], result.stdout[-3000:]
