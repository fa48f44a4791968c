# SPDX-License-Identifier: Apache-2.0
"""Test helpers: reading results back through each framework's own API."""

from __future__ import annotations

from typing import Any

import numpy as np
from needs import framework

from tensorbridge._cli.probes import probe
from tensorbridge._frameworks import names

#: Every bridge target of the registry, in its order, but those that need a GPU (cupy:
#: tests/test_frameworks.py checks its plans against a fake module).
NAMES = names(gpu=False)


def need(name: str) -> Any:
    """Import a framework and set it up as the matrix does (JAX: 64-bit types), or skip
    (CI installs them all, so they really run there)."""
    module = framework(name)
    probe(name).prepare()
    if name == "jax":
        import jax.dlpack  # noqa: F401  (read as need("jax").dlpack)
    return module


def values(name: str, obj: Any) -> list[Any]:
    """Elements (flattened, as float or bool) read through the framework's own API."""
    if name == "numpy":
        array = obj
    elif name == "torch":
        import torch

        array = (
            obj.detach()
            .to(
                torch.bool
                if obj.dtype == torch.bool
                else torch.complex128
                if obj.is_complex()
                else torch.float64
            )
            .numpy()
        )
    elif name == "jax":
        import jax.numpy as jnp

        array = np.asarray(
            obj
            if obj.dtype in (jnp.bool_, jnp.complex64, jnp.complex128)
            else obj.astype(jnp.float64)
        )
    elif name == "paddle":
        # .numpy() as users read it (astype first only for types NumPy lacks).
        special = str(obj.dtype) in (
            "paddle.bfloat16",
            "paddle.float8_e4m3fn",
            "paddle.float8_e5m2",
        )
        array = obj.astype("float64").numpy() if special else obj.numpy()
    elif name == "tensorflow":
        import tensorflow as tf

        array = (
            obj.numpy()
            if obj.dtype in (tf.bool, tf.complex64, tf.complex128)
            else tf.cast(obj, tf.float64).numpy()
        )
    elif name == "mlx":
        import mlx.core as mx

        array = np.array(
            obj if obj.dtype in (mx.bool_, mx.complex64, mx.float64) else obj.astype(mx.float32)
        )
    elif name == "pyarrow":
        array = np.asarray(obj.to_pylist() if hasattr(obj, "to_pylist") else obj.to_numpy())
    elif name == "array_api_strict":
        array = np.from_dlpack(obj)
    elif name == "tvm_ffi":
        import tensorbridge as tb

        array = (
            np.asarray(tb.from_dlpack(obj).astype("float64"))
            if str(obj.dtype) not in ("bool",)
            else np.from_dlpack(obj)
        )
    elif name == "tensorbridge":
        array = (
            obj.numpy()
            if obj.dtype.name in ("bool", "complex64", "complex128")
            else obj.astype("float64").numpy()
        )
    else:
        raise AssertionError(name)
    array = np.asarray(array)
    if array.dtype.kind not in "bc":
        array = array.astype(np.float64)
    return array.reshape(-1).tolist()


def shape(name: str, obj: Any) -> tuple[int, ...]:
    if name == "pyarrow" and hasattr(obj, "to_pylist"):
        return (len(obj),)
    return tuple(int(n) for n in obj.shape)


def pointer(name: str, obj: Any) -> int | None:
    """Address of element 0 as the framework exports it (None if it cannot say)."""
    from tensorbridge._core import inspect_capsule

    for call in (lambda: obj.__dlpack__(max_version=(1, 3)), lambda: obj.__dlpack__()):
        try:
            info = inspect_capsule(call())
        except Exception:
            continue
        return info["data"] + info["byte_offset"]
    return None


def is_protected(name: str, obj: Any) -> bool:
    """True when writing into obj through its own API is impossible."""
    # Pinned, not the registry's readonly facts: this is the oracle that checks them.
    if name in ("jax", "tensorflow", "pyarrow"):
        return True  # immutable arrays
    if name == "numpy":
        return not obj.flags.writeable
    if name == "tensorbridge":
        return obj.readonly
    if name == "array_api_strict":
        try:
            obj[(0,) * obj.ndim] = obj[(0,) * obj.ndim]
        except ValueError:
            return True
        return False
    return False  # torch, paddle, mlx, tvm_ffi: always writable
