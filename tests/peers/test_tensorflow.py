# SPDX-License-Identifier: Apache-2.0
"""What TensorFlow's own DLPack tests check of TensorFlow, asked of tensorbridge.

The checks come from TensorFlow's ``tensorflow/python/dlpack/dlpack_test.py``
(read at commit 3175de16): each test here names the TensorFlow test it mirrors.
tensorbridge plays both roles: *producer* (``tf.experimental.dlpack.from_dlpack``
reads a capsule of ours) and *consumer* (``tb.from_dlpack`` / ``tb.asarray`` read
TensorFlow's capsules and tensors).

TensorFlow aborts the process when it works on imported memory that is not
64-byte aligned, so everything handed to it here is a fresh tensorbridge
allocation (64-byte aligned), checked before the hand-over.

Importing PaddlePaddle into a process that has loaded TensorFlow crashes it, and
the whole suite runs in one process: ``tests/conftest.py`` imports Paddle before
any test module when both are installed; TensorFlow itself is imported only by
the tests.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from needs import framework

import tensorbridge as tb
from tensorbridge import _testing


@pytest.fixture(scope="module")
def tf():
    return framework("tensorflow")


def _aligned(t):
    """t, after checking TensorFlow may be handed its memory without aborting."""
    assert t.data_ptr() % 64 == 0, "TensorFlow would abort on this memory"
    return t


#: TensorFlow's list (int_dtypes + float_dtypes + bfloat16), and the types
#: TensorFlow 2.21 exchanges too (bool, complex: its test's complex64 refusal is
#: older TensorFlow's).
DTYPES = [
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
    "bfloat16",
    "bool",
    "complex64",
    "complex128",
]
SHAPES = [(), (1,), (2, 3), (2, 0), (0, 7), (4, 1, 2)]


def _ints(shape):
    return np.random.default_rng(42).integers(0, 10, shape)


def _same(got: np.ndarray, ints: np.ndarray, dtype: str) -> bool:
    if dtype == "bool":
        return got.tolist() == (ints != 0).tolist()
    wide = np.complex128 if dtype.startswith("complex") else np.float64
    return np.asarray(got).astype(wide).tolist() == ints.astype(wide).tolist()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_tensorflow_reads_our_capsule_after_the_tensor_is_gone(tf, dtype, shape):
    # TensorFlow: testRoundTrip (to_dlpack, del the tensor, from_dlpack: values and
    # device kept), with tensorbridge producing.
    ints = _ints(shape)
    src = _aligned(tb.asarray(ints, dtype=dtype, copy=True))
    capsule = tb.to_dlpack(src)
    del src
    x = tf.experimental.dlpack.from_dlpack(capsule)
    assert x.dtype.name == dtype
    assert tuple(x.shape) == shape
    assert x.device.endswith("device:CPU:0")
    assert _same(x.numpy(), ints, dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_we_read_a_tensorflow_capsule_after_the_tensor_is_gone(tf, dtype, shape):
    # TensorFlow: testRoundTrip, with tensorbridge consuming: the capsule, the
    # tensor itself and asarray.
    ints = _ints(shape)
    x = tf.cast(tf.constant(ints), getattr(tf, dtype))
    imports = [tb.from_dlpack(x), tb.asarray(x)]
    capsule = tf.experimental.dlpack.to_dlpack(x)
    del x
    imports.append(tb.from_dlpack(capsule))
    for t in imports:
        assert t.dtype == dtype
        assert t.shape == shape
        assert str(t.device) == "cpu"
        got = (
            t.numpy()
            if dtype in ("bool", "complex64", "complex128")
            else t.astype("float64").numpy()
        )
        assert _same(got, ints, dtype)
    if ints.size:
        assert len({t.data_ptr() for t in imports}) == 1  # all share TensorFlow's buffer


def test_tensorflow_consumes_a_capsule_of_ours_once(tf):
    # TensorFlow: testTensorsCanBeConsumedOnceOnly, tensorbridge producing: after
    # TensorFlow took the capsule, neither it nor tensorbridge can take it again.
    capsule = tb.to_dlpack(_aligned(tb.asarray(_ints((2, 3, 4)), dtype="float32", copy=True)))
    x = tf.experimental.dlpack.from_dlpack(capsule)
    with pytest.raises(tf.errors.InvalidArgumentError, match="consumed at most once"):
        tf.experimental.dlpack.from_dlpack(capsule)
    with pytest.raises(
        BufferError,
        match=r"from_dlpack\(\): this DLPack capsule was "
        r"already consumed",
    ):
        tb.from_dlpack(capsule)
    assert _same(x.numpy(), _ints((2, 3, 4)), "float32")


def test_we_consume_a_tensorflow_capsule_once(tf):
    # TensorFlow: testTensorsCanBeConsumedOnceOnly, tensorbridge consuming.
    capsule = tf.experimental.dlpack.to_dlpack(tf.constant(_ints((2, 3, 4)), tf.float32))
    t = tb.from_dlpack(capsule)
    for again in (tb.from_dlpack, tb.asarray):
        with pytest.raises(
            BufferError,
            match=r"already consumed \(it is named "
            r"'used_dltensor'\)",
        ):
            again(capsule)
    with pytest.raises(tf.errors.InvalidArgumentError, match="consumed at most once"):
        tf.experimental.dlpack.from_dlpack(capsule)
    assert _same(t.numpy(), _ints((2, 3, 4)), "float32")


def test_capsules_survive_a_tensorflow_context_reset(tf):
    # TensorFlow: testDLPackFromWithoutContextInitialization, both roles. Resetting
    # TensorFlow's eager context would disturb the other tests: a process of its own.
    code = textwrap.dedent(
        """
        import tensorflow as tf
        import tensorbridge as tb
        from tensorflow.python.eager import context

        ours = tb.asarray([1.0, 2.0, 3.0], dtype="float32")
        assert ours.data_ptr() % 64 == 0
        ours_capsule = tb.to_dlpack(ours)
        del ours
        theirs = tf.experimental.dlpack.to_dlpack(tf.constant([4.0, 5.0]))
        context._reset_context()
        x = tf.experimental.dlpack.from_dlpack(ours_capsule)
        assert x.numpy().tolist() == [1.0, 2.0, 3.0], x
        t = tb.from_dlpack(theirs)
        assert t.tolist() == [4.0, 5.0], t
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-1000:]
    assert result.stdout.strip().endswith("ok")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: tb.arange(8, dtype="float8_e4m3fn"), "Unsupported Type Codes: 10"),
        (
            lambda: tb.arange(64, dtype="float32").reshape(4, 16)[:, ::2],
            "Invalid strides array from DLPack",
        ),
    ],
    ids=["float8", "strided"],
)
def test_a_capsule_tensorflow_refuses_stays_ours(tf, make, message):
    # TensorFlow: testUnsupportedTypeToDLPack, tensorbridge producing what TensorFlow
    # cannot take: TensorFlow refuses, and the capsule is left unconsumed, so it can
    # still be imported elsewhere (or is freed by its own destructor).
    src = _aligned(make())
    capsule = tb.to_dlpack(src)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        tf.experimental.dlpack.from_dlpack(capsule)
    assert _testing.capsule_name(capsule) == "dltensor"
    t = tb.from_dlpack(capsule)
    assert t.data_ptr() == src.data_ptr() and t.strides == src.strides
    unused = tb.to_dlpack(src)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        tf.experimental.dlpack.from_dlpack(unused)
    del unused  # its destructor frees it: no leak, no crash


def test_a_type_tensorflow_cannot_export(tf):
    # TensorFlow: testUnsupportedTypeToDLPack (qint16 is not supported by dlpack),
    # tensorbridge consuming: TensorFlow's refusal reaches the caller as a
    # tensorbridge.ProducerError that is still TensorFlow's InvalidArgumentError,
    # naming the producer and the call, chained to TensorFlow's exception.
    x = tf.constant([[1, 4], [5, 2]], dtype=tf.qint16)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="DT_QINT16 is not supported by dlpack"
    ) as info:
        tb.from_dlpack(x)
    assert isinstance(info.value, tb.ProducerError)
    assert "EagerTensor" in str(info.value) and "__dlpack__(" in str(info.value)
    assert isinstance(info.value.__cause__, tf.errors.InvalidArgumentError)


@pytest.mark.parametrize("obj", [[1], object()], ids=["list", "object"])
def test_to_dlpack_needs_a_dlpack_object(obj):
    # TensorFlow: testMustPassTensorArgumentToDLPack ("The argument to `to_dlpack`
    # must be a TF tensor, not Python object").
    with pytest.raises(TypeError, match=r"^to_dlpack\(\): .*__dlpack__"):
        tb.to_dlpack(obj)
