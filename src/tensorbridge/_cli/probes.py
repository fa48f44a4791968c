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
from tensorbridge._dtypes import dtype_from_code
from tensorbridge._frameworks import FRAMEWORKS, Framework
from tensorbridge._frameworks.base import ML_DTYPES, SUBBYTE

__all__ = ["PROBES", "Probe", "capsule_name", "dlpack_dtype_name", "pointer", "probe"]


def pointer(obj: Any) -> int | None:
    """The address of obj's element 0 as its DLPack export says (None if it cannot)."""
    for kwargs in ({"max_version": (1, 3)}, {}):
        try:
            info = _core.inspect_capsule(obj.__dlpack__(**kwargs))
        except Exception:
            continue
        return int(info["data"] + info["byte_offset"])
    return None


def capsule_name(obj: Any, **kwargs: Any) -> str | None:
    """The name of the capsule ``obj.__dlpack__(**kwargs)`` gives (not consumed), or
    None if it gives none."""
    try:
        return str(_core.inspect_capsule(obj.__dlpack__(**kwargs))["name"])
    except Exception:
        return None


def dlpack_dtype_name(obj: Any) -> str:
    """The dtype name of obj's DLPack export ("unknown" for a type tensorbridge does
    not know, "?" without an export)."""
    for kwargs in ({"max_version": (1, 3)}, {}):
        try:
            info = _core.inspect_capsule(obj.__dlpack__(**kwargs))
        except Exception:
            continue
        code, bits, lanes = info["dtype"]
        dtype = dtype_from_code(code, bits)
        return dtype.name if dtype is not None and lanes == 1 else "unknown"
    return "?"


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

    #: How a user calls its own DLPack consumer (what `native_from_dlpack` does).
    native_name: ClassVar[str] = ""
    #: Dtypes the dtype sweep does not hand to `native_from_dlpack`, and why: the
    #: consumer's error path is costly (seconds), and what it gives is known.
    native_untried: ClassVar[frozenset[str]] = frozenset()
    native_untried_reason: ClassVar[str] = ""

    @classmethod
    def prepare(cls) -> list[str]:
        """Set the framework up for probing, once it is imported; what it changed in
        the process, for the matrix to say (empty: nothing)."""
        return []

    @classmethod
    def native(cls) -> str:
        """How a user calls its own DLPack consumer, as text."""
        return cls.native_name or f"{cls.framework().module_name or cls.name}.from_dlpack"

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
    native_name = "tensorbridge.from_dlpack"

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
    native_name = "jax.dlpack.from_dlpack"

    @classmethod
    def prepare(cls) -> list[str]:
        # Without 64-bit types JAX narrows 64-bit data, and no 64-bit dtype arrives.
        config = importlib.import_module("jax").config
        if getattr(config, "jax_enable_x64", False):
            return []  # the user's own setting (JAX_ENABLE_X64=1)
        config.update("jax_enable_x64", True)
        return [
            "JAX's jax_enable_x64 is switched on (without it JAX narrows 64-bit data to "
            "32 bits, and float64, int64, uint64 and complex128 could not be probed)"
        ]

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
    native_name = "paddle.utils.dlpack.from_dlpack"

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
    native_name = "tf.experimental.dlpack.from_dlpack"

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
                f"TensorFlow imported memory that is only {min(64, address & -address)}-byte "
                "aligned (it needs 64): its first operation on it would abort the process, "
                "so the matrix counts the exchange as failed without touching it"
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
    native_name = "pyarrow.Array.from_dlpack"

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
    native_untried = SUBBYTE
    native_untried_reason = (
        "tvm_ffi.from_dlpack refuses their padded capsules ('Subbyte type padded is not "
        "yet supported') through an error path whose first use costs about a second (a "
        "native backtrace through every loaded library), then falls back to a legacy "
        "capsule it reads as bit-packed: wrong values"
    )

    @classmethod
    def dtype_name(cls, obj: Any) -> str:
        # Its ``.dtype`` raises for types it has no name for (complex: "unknown
        # type_code=5"), and the first such error costs seconds: read the export.
        return dlpack_dtype_name(obj)

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
