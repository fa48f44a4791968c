# SPDX-License-Identifier: Apache-2.0
"""What the interoperability matrix needs from each framework, beyond converting.

A `Probe` per framework makes a small array of the framework's own
(``sample``), calls the framework's own DLPack consumer as a user would
(``native_from_dlpack``), writes through an array (``write_first``) and reads one
back (``to_list``, ``first_value``, ``dtype_name``) — the means to tell a shared
exchange from a copy. These are test instruments, not bridge facts, so they live
here rather than on `Framework`; the interop tests use them too (`probe`).
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

from tensorbridge import _core
from tensorbridge._frameworks import FRAMEWORKS, Framework
from tensorbridge._frameworks.base import ML_DTYPES

__all__ = ["PROBES", "Probe", "pointer", "probe"]


def pointer(obj: Any) -> int | None:
    """The address of obj's element 0 as its DLPack export says (None if it cannot)."""
    for kwargs in ({"max_version": (1, 3)}, {}):
        try:
            info = _core.inspect_capsule(obj.__dlpack__(**kwargs))
        except Exception:
            continue
        return int(info["data"] + info["byte_offset"])
    return None


class Probe:
    """How to make, write and read one framework's arrays (defaults: NumPy-like)."""

    #: The framework's name in the registry.
    name: ClassVar[str] = ""

    @classmethod
    def framework(cls) -> type[Framework]:
        return FRAMEWORKS[cls.name]

    @classmethod
    def module(cls) -> Any:
        return cls.framework().module()

    @classmethod
    def prepare(cls) -> None:
        """Set the framework up for probing, once it is imported."""

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        """The framework's own DLPack consumer, as a user would call it (by default
        the Array API's spelling, ``module.from_dlpack``)."""
        return cls.module().from_dlpack(obj)

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        """A small 1-d array of its own with these values."""
        raise NotImplementedError

    @classmethod
    def write_first(cls, obj: Any, value: float) -> bool:
        """Write value into element 0 in place; False if its arrays are immutable."""
        try:
            obj[0] = value
        except Exception:
            return False
        return True

    @classmethod
    def to_list(cls, obj: Any) -> list[Any]:
        return list(obj.tolist())

    @classmethod
    def first_value(cls, obj: Any) -> float:
        """Element 0, as a float."""
        return float(_core.asarray(obj).astype("float64").reshape(-1)[0].item())

    @classmethod
    def dtype_name(cls, obj: Any) -> str:
        """The DLPack dtype name of one of its arrays."""
        return cls.framework().dtype_name(obj)

    @classmethod
    def unusable(cls, obj: Any) -> str | None:
        """Why an array the framework imported cannot be used, though the import
        succeeded (None: it can)."""
        return None


class TensorbridgeProbe(Probe):
    name = "tensorbridge"

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return _core.from_dlpack(obj)

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        return _core.asarray(values, dtype=dtype_name)


class NumpyProbe(Probe):
    name = "numpy"

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        np = cls.module()
        if dtype_name in ML_DTYPES:  # ml_dtypes types: NumPy cannot cast floats to all
            return _core.asarray(values, dtype=dtype_name).numpy()
        return np.array(values, dtype=np.float64).astype(dtype_name)  # NumPy's own memory

    @classmethod
    def write_first(cls, obj: Any, value: float) -> bool:
        if not obj.flags.writeable:
            return False
        obj[0] = value
        return True


class TorchProbe(Probe):
    name = "torch"

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        torch = cls.module()
        return torch.tensor(values, dtype=torch.float64).to(getattr(torch, dtype_name))


class JaxProbe(Probe):
    name = "jax"

    @classmethod
    def prepare(cls) -> None:
        # Without 64-bit types JAX narrows 64-bit data, and no 64-bit dtype arrives.
        importlib.import_module("jax").config.update("jax_enable_x64", True)

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return cls.module().dlpack.from_dlpack(obj)

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        jnp = importlib.import_module("jax.numpy")
        return jnp.asarray(_core.asarray(values, dtype=dtype_name).numpy())

    @classmethod
    def write_first(cls, obj: Any, value: float) -> bool:
        return False  # JAX arrays are immutable


class PaddleProbe(Probe):
    name = "paddle"

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return cls.module().utils.dlpack.from_dlpack(obj)

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        paddle = cls.module()
        if dtype_name in ("uint32", "uint64"):
            # Paddle holds these but cannot make them: import them (a DLPack-backed tensor).
            return paddle.utils.dlpack.from_dlpack(_core.asarray(values, dtype=dtype_name))
        return paddle.to_tensor(values, dtype="float64").astype(dtype_name)


class TensorflowProbe(Probe):
    name = "tensorflow"

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        tf = cls.module()
        return tf.experimental.dlpack.from_dlpack(obj.__dlpack__())

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        tf = cls.module()
        return tf.cast(tf.constant(values, dtype=tf.float64), getattr(tf, dtype_name))

    @classmethod
    def write_first(cls, obj: Any, value: float) -> bool:
        return False  # EagerTensors are immutable

    @classmethod
    def to_list(cls, obj: Any) -> list[Any]:
        return list(obj.numpy().tolist())

    @classmethod
    def first_value(cls, obj: Any) -> float:
        return float(obj.numpy().reshape(-1)[0])

    @classmethod
    def unusable(cls, obj: Any) -> str | None:
        address = pointer(obj)
        if address is not None and address % 64:
            return (
                "imported memory that is not 64-byte aligned: the first TensorFlow "
                "operation on it aborts the process"
            )
        return None


class MlxProbe(Probe):
    name = "mlx"

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        mx = cls.module()
        return mx.array(values, dtype=mx.float32).astype(
            getattr(mx, "bool_" if dtype_name == "bool" else dtype_name)
        )

    @classmethod
    def write_first(cls, obj: Any, value: float) -> bool:
        return False  # item assignment gives the array new memory (no write-through)


class CupyProbe(Probe):
    name = "cupy"


class PyarrowProbe(Probe):
    name = "pyarrow"

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return cls.module().Array.from_dlpack(obj)

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        pa = cls.module()
        return pa.array(_core.asarray(values, dtype=dtype_name).numpy())

    @classmethod
    def write_first(cls, obj: Any, value: float) -> bool:
        return False  # Arrow arrays are immutable

    @classmethod
    def to_list(cls, obj: Any) -> list[Any]:
        if hasattr(obj, "to_numpy") and not hasattr(obj, "to_pylist"):
            return list(obj.to_numpy().tolist())
        return list(obj.to_pylist())


class ArrayApiStrictProbe(Probe):
    name = "array_api_strict"

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        xp = cls.module()
        return xp.asarray(_core.asarray(values, dtype=dtype_name).numpy())

    @classmethod
    def to_list(cls, obj: Any) -> list[Any]:
        np = importlib.import_module("numpy")
        return list(np.asarray(obj._array).tolist())


class TvmFfiProbe(Probe):
    name = "tvm_ffi"

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        return cls.module().from_dlpack(_core.asarray(values, dtype=dtype_name))

    @classmethod
    def write_first(cls, obj: Any, value: float) -> bool:
        _core.from_dlpack(obj)[0] = value
        return True

    @classmethod
    def to_list(cls, obj: Any) -> list[Any]:
        return list(_core.from_dlpack(obj).tolist())


#: Every framework's probe, by name (the registry's names, in its order).
PROBES: dict[str, type[Probe]] = {
    p.name: p
    for p in sorted(
        (
            TensorbridgeProbe,
            NumpyProbe,
            TorchProbe,
            JaxProbe,
            PaddleProbe,
            TensorflowProbe,
            MlxProbe,
            CupyProbe,
            PyarrowProbe,
            ArrayApiStrictProbe,
            TvmFfiProbe,
        ),
        key=lambda p: list(FRAMEWORKS).index(p.name),
    )
}
if set(PROBES) != set(FRAMEWORKS):
    raise ImportError(f"frameworks without a probe: {sorted(set(FRAMEWORKS) - set(PROBES))}")


def probe(name: str) -> type[Probe]:
    """The probe of a framework, by its registry name."""
    return PROBES[name]
