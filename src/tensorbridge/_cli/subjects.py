# SPDX-License-Identifier: Apache-2.0
"""The frameworks ``tensorbridge check --all`` grades: each one's producer and consumer.

For every framework, a producer ``make(case=...)`` (see `tensorbridge.testing.
check_producer`) that makes the checker's cases with the framework's own operations,
and its DLPack consumer as users call it. Each is a module-level function, so the
checker finds it by name (``tensorbridge._cli.subjects:torch_make``) in the child
process it runs the probes in: only that child imports the framework. `SUBJECTS`
lists them in the order of the registry (PaddlePaddle before TensorFlow), with what
the page of grades says about how each was called.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tensorbridge._cli.probes import probe

__all__ = ["SUBJECTS", "Subject"]


@dataclass(frozen=True)
class Subject:
    """One graded framework: where its producer and consumer are, and how they are called."""

    #: The name in the table (the registry's, or ``pydlpack``).
    name: str
    #: The module that must be importable for it to be graded.
    module: str
    #: The distribution whose version is shown.
    distribution: str
    #: ``module:qualname`` of the producer's ``make`` (None: no producer graded).
    producer: str | None
    #: ``module:qualname`` of the consumer (None: no consumer graded).
    consumer: str | None
    #: How the producer's objects are made, and how the consumer is called, in words.
    producer_text: str
    consumer_text: str


def _np() -> Any:
    return importlib.import_module("numpy")


def _expected(case: str) -> Any:
    from tensorbridge.testing import CASES

    return CASES[case]()


#: The view each layout case takes of a base array (the case's own values: a 6x8
#: grid for the step slice, the 3x4 grid for the others).
_VIEWS: dict[str, Callable[[Any], Any]] = {
    "transposed": lambda a: a.T,
    "step-sliced": lambda a: a[::2, ::3],
    "negative-strides": lambda a: a[:, ::-1],
    "offset-view": lambda a: a[1:, 1:],
}


def _base(case: str) -> Any:
    """The NumPy array a case's view is taken of (the case itself for the others)."""
    np = _np()
    if case == "step-sliced":
        return np.arange(48, dtype=np.float32).reshape(6, 8)
    if case in _VIEWS or case == "read-only":
        return np.arange(12, dtype=np.float32).reshape(3, 4)
    return _expected(case)


def _made_with(
    convert: Callable[[Any], Any],
    case: str,
    *,
    view: Callable[[Any, str], Any] | None = None,
    read_only: Callable[[Any], Any] | None = None,
) -> Any:
    """A case made by a framework: ``convert`` copies a NumPy array into the
    framework's memory, then the case's view is taken with the framework's indexing
    (``view(obj, case)`` where that differs); ``read_only`` makes a read-only object
    (absent: the framework has none, NotImplementedError)."""
    if case == "read-only":
        if read_only is None:
            raise NotImplementedError("no read-only arrays")
        return read_only(_base(case))
    obj = convert(_base(case))
    if case in _VIEWS:
        return view(obj, case) if view is not None else _VIEWS[case](obj)
    return obj


def _supported(make: Callable[[], Any]) -> Any:
    """make(), or NotImplementedError when the framework cannot make it."""
    try:
        return make()
    except NotImplementedError:
        raise
    except Exception as exc:
        raise NotImplementedError(f"{type(exc).__name__}: {exc}") from exc


# ---------------------------------------------------------------------------------------
# Producers


def numpy_make(case: str = "float32") -> Any:
    """NumPy's own arrays: the checker's cases are NumPy arrays."""
    return _expected(case)


def torch_make(case: str = "float32") -> Any:
    torch = importlib.import_module("torch")
    if case == "negative-strides":
        raise NotImplementedError("PyTorch has no negative strides")
    return _supported(lambda: _made_with(lambda a: torch.tensor(a), case))


def jax_make(case: str = "float32") -> Any:
    probe("jax").prepare()  # 64-bit types on
    jnp = importlib.import_module("jax.numpy")
    # JAX arrays are immutable: every one is read-only.
    return _supported(lambda: _made_with(jnp.asarray, case, read_only=jnp.asarray))


def paddle_make(case: str = "float32") -> Any:
    paddle = importlib.import_module("paddle")
    return _supported(lambda: _made_with(paddle.to_tensor, case))


def tensorflow_make(case: str = "float32") -> Any:
    tf = importlib.import_module("tensorflow")

    def view(t: Any, case: str) -> Any:
        return tf.transpose(t) if case == "transposed" else _VIEWS[case](t)

    # EagerTensors are immutable: every one is read-only.
    return _supported(lambda: _made_with(tf.constant, case, view=view, read_only=tf.constant))


def mlx_make(case: str = "float32") -> Any:
    mx = importlib.import_module("mlx.core")

    def convert(a: Any) -> Any:
        name = "bool_" if a.dtype.name == "bool" else a.dtype.name
        return mx.array(a, dtype=getattr(mx, name))  # mx.array(float64) would narrow

    return _supported(lambda: _made_with(convert, case))


def pyarrow_make() -> Any:
    """Arrow arrays are 1-d: a float32 array of 12 values (no cases)."""
    pa = importlib.import_module("pyarrow")
    return pa.array(_np().arange(12, dtype=_np().float32))


def array_api_strict_make(case: str = "float32") -> Any:
    xp = importlib.import_module("array_api_strict")
    return _supported(lambda: _made_with(xp.asarray, case))


def tvm_ffi_make(case: str = "float32") -> Any:
    """tvm_ffi has no array operations: its tensors import tensorbridge's (through
    tensorbridge's C exchange table), read-only ones included."""
    tvm_ffi = importlib.import_module("tvm_ffi")
    import tensorbridge as tb

    return _supported(lambda: tvm_ffi.from_dlpack(tb.asarray(_expected(case))))


def tensorbridge_make(case: str = "float32") -> Any:
    import tensorbridge as tb

    return tb.asarray(_expected(case))


def pydlpack_make() -> Any:
    """pydlpack's DLPack 1.x mode: ``dlpack.asdlpack(array, impl_cls=
    DLManagedTensorVersioned)`` over a NumPy array (a single-use object: one per call)."""
    dlpack = importlib.import_module("dlpack")
    array = _np().arange(12, dtype=_np().float32).reshape(3, 4)
    return dlpack.asdlpack(array, impl_cls=dlpack.DLManagedTensorVersioned)


# ---------------------------------------------------------------------------------------
# Consumers that need a word of their own


def jax_from_dlpack(x: Any, **kwargs: Any) -> Any:
    """``jax.dlpack.from_dlpack`` with 64-bit types on (without them JAX narrows
    64-bit data to 32 bits on purpose, as its configuration documents)."""
    probe("jax").prepare()
    return importlib.import_module("jax.dlpack").from_dlpack(x, **kwargs)


def tensorflow_from_dlpack(x: Any) -> Any:
    """``tf.experimental.dlpack.from_dlpack`` takes a capsule, not an array: it gets
    ``x.__dlpack__()`` (what TensorFlow's documentation shows)."""
    tf = importlib.import_module("tensorflow")
    capsule = x if type(x).__name__ == "PyCapsule" else x.__dlpack__()
    return tf.experimental.dlpack.from_dlpack(capsule)


def pydlpack_from_dlpack(x: Any) -> Any:
    """pydlpack has no ``from_dlpack``: ``dlpack.asdlpack(x)`` reads ``x.__dlpack__()``
    and wraps what it read."""
    return importlib.import_module("dlpack").asdlpack(x)


_HERE = __name__


def _subject(
    name: str,
    module: str,
    distribution: str,
    consumer: str | None,
    consumer_text: str,
    producer_text: str,
    *,
    producer: str | None = None,
) -> Subject:
    return Subject(
        name=name,
        module=module,
        distribution=distribution,
        producer=producer or f"{_HERE}:{name}_make",
        consumer=consumer,
        producer_text=producer_text,
        consumer_text=consumer_text,
    )


#: Every graded framework, in import order (PaddlePaddle before TensorFlow). The
#: texts are Markdown (docs/conformance.md shows them).
SUBJECTS: dict[str, Subject] = {
    s.name: s
    for s in (
        _subject(
            "numpy",
            "numpy",
            "numpy",
            "numpy:from_dlpack",
            "`numpy.from_dlpack`",
            "NumPy arrays (the checker's own cases)",
        ),
        _subject(
            "torch",
            "torch",
            "torch",
            "torch:from_dlpack",
            "`torch.from_dlpack`",
            "`torch.tensor(...)` and its views (no negative strides, no read-only tensors)",
        ),
        _subject(
            "jax",
            "jax",
            "jax",
            f"{_HERE}:jax_from_dlpack",
            "`jax.dlpack.from_dlpack`, with 64-bit types on (`jax_enable_x64`)",
            "`jnp.asarray(...)` and its slices, with 64-bit types on (JAX arrays are "
            "immutable: every one is read-only)",
        ),
        _subject(
            "paddle",
            "paddle",
            "paddlepaddle",
            "paddle.utils.dlpack:from_dlpack",
            "`paddle.utils.dlpack.from_dlpack`",
            "`paddle.to_tensor(...)` and its views (no read-only tensors)",
        ),
        _subject(
            "tensorflow",
            "tensorflow",
            "tensorflow-cpu",
            f"{_HERE}:tensorflow_from_dlpack",
            "`tf.experimental.dlpack.from_dlpack(x.__dlpack__())` (it takes capsules only, "
            "and no keywords)",
            "`tf.constant(...)` and its slices (EagerTensors are immutable: every one is "
            "read-only)",
        ),
        _subject(
            "mlx",
            "mlx.core",
            "mlx",
            "mlx.core:from_dlpack",
            "`mlx.core.from_dlpack`",
            "`mx.array(..., dtype=...)` and its views (no read-only arrays)",
        ),
        _subject(
            "pyarrow",
            "pyarrow",
            "pyarrow",
            "pyarrow:Array.from_dlpack",
            "`pyarrow.Array.from_dlpack`",
            "`pa.array(...)` of 12 float32 (Arrow arrays are 1-d: `make()` only, no cases)",
        ),
        _subject(
            "array_api_strict",
            "array_api_strict",
            "array-api-strict",
            "array_api_strict:from_dlpack",
            "`array_api_strict.from_dlpack`",
            "`xp.asarray(...)` and its views (no read-only arrays)",
        ),
        _subject(
            "tvm_ffi",
            "tvm_ffi",
            "apache-tvm-ffi",
            "tvm_ffi:from_dlpack",
            "`tvm_ffi.from_dlpack`",
            "`tvm_ffi.from_dlpack(tensorbridge tensor)` for every case, the read-only one "
            "included (tvm_ffi has no array operations)",
        ),
        _subject(
            "pydlpack",
            "dlpack",
            "pydlpack",
            f"{_HERE}:pydlpack_from_dlpack",
            "`dlpack.asdlpack(x)` (pydlpack has no `from_dlpack`)",
            "`dlpack.asdlpack(numpy array, impl_cls=dlpack.DLManagedTensorVersioned)`, its "
            "DLPack 1.x mode (`make()` only, no cases)",
        ),
        _subject(
            "tensorbridge",
            "tensorbridge",
            "tensorbridge",
            "tensorbridge:from_dlpack",
            "`tensorbridge.from_dlpack`",
            "`tb.asarray(...)` of the checker's cases",
        ),
    )
}
