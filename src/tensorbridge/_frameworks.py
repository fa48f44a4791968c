# SPDX-License-Identifier: Apache-2.0
"""What each framework can take, and how to hand it a tensorbridge Tensor.

One `Framework` per bridge target. Its class attributes describe the target's
*consumer*: dtypes, layouts, byte offsets, alignment, whether its arrays can be
read-only. `convert` plans from these facts alone (docs/design.md, "Bridges"),
so `explain` can say what will happen without doing it. Frameworks are imported
only when a conversion or the command line needs them.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, ClassVar

from tensorbridge import _core
from tensorbridge._core import Tensor
from tensorbridge._dtypes import DTYPES
from tensorbridge._known_types import check_import_order

__all__ = ["FRAMEWORKS", "Framework", "framework_of", "resolve_target"]

ALL_DTYPES = frozenset(DTYPES)
#: By DLPack type code: bfloat16 is 4, the float8 types 7-14, float6/float4 15-17.
FLOAT8 = frozenset(n for n, d in DTYPES.items() if 7 <= d.code <= 14)
SUBBYTE = frozenset(n for n, d in DTYPES.items() if 15 <= d.code <= 17)
ML_DTYPES = FLOAT8 | SUBBYTE | {"bfloat16"}
STANDARD = ALL_DTYPES - ML_DTYPES
#: The float8 types PyTorch has (PaddlePaddle has two of them).
TORCH_FLOAT8 = frozenset(
    {"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"}
)


class Framework:
    """A bridge target. Subclasses fill in the facts and `make`."""

    #: The name `convert` accepts (also the default module name).
    name: ClassVar[str] = ""
    #: Module names whose types belong to this framework (for detection).
    modules: ClassVar[tuple[str, ...]] = ()
    #: The module to import; `None` means `name`.
    module_name: ClassVar[str | None] = None
    #: How it is written in tables.
    label: ClassVar[str] = ""
    #: DLPack dtypes it can hold.
    dtypes: ClassVar[frozenset[str]] = ALL_DTYPES
    #: Layouts its consumer takes without a copy.
    negative_strides: ClassVar[bool] = True
    noncompact_strides: ClassVar[bool] = True  # step slices, broadcast (zero) strides
    permuted: ClassVar[bool] = True  # transposed but compact
    #: Whether its consumer honours DLTensor.byte_offset ("fold": we move it into
    #: the data pointer first; "zero": it refuses a nonzero offset, so we fold too).
    byte_offset: ClassVar[str] = "honours"
    #: Alignment in bytes its consumer needs to share memory (0: none).
    alignment: ClassVar[int] = 0
    #: "flag": honours READ_ONLY; "immutable": its arrays cannot be written anyway;
    #: "writable": gives only writable tensors (read-only data must be copied).
    readonly: ClassVar[str] = "writable"
    #: True when it always copies what it imports.
    always_copies: ClassVar[bool] = False
    #: True when it has autograd (requires_grad=).
    autograd: ClassVar[bool] = False
    #: The import path, as `explain` describes it; `fallback_path` when the
    #: framework's C exchange table is missing (older versions).
    path: ClassVar[str] = ""
    fallback_path: ClassVar[str] = ""
    #: Quirks tensorbridge handles for this framework: (what, how it is handled).
    quirks: ClassVar[tuple[tuple[str, str], ...]] = ()

    # -- modules --------------------------------------------------------------

    @classmethod
    def module(cls) -> Any:
        check_import_order(cls.module_name or cls.name)  # ImportOrderError passes through
        try:
            return importlib.import_module(cls.module_name or cls.name)
        except ImportError as exc:
            raise ImportError(
                f"converting to {cls.name} needs {cls.module_name or cls.name}, which is not "
                f"installed ({exc})"
            ) from exc

    @classmethod
    def available(cls) -> bool:
        try:
            cls.module()
        except ImportError:
            return False
        return True

    # -- what the planner asks -------------------------------------------------

    @classmethod
    def unsupported_dtype(cls, dtype_name: str) -> str | None:
        """Why it cannot hold this dtype, or None if it can."""
        if dtype_name in cls.dtypes:
            return None
        return f"{cls.name} has no {dtype_name} type"

    @classmethod
    def layout_problem(cls, t: Any) -> str | None:
        """Why its consumer cannot take t's layout as it is, or None."""
        if t.size <= 1:
            return None
        strides = [s for s, n in zip(t.strides, t.shape) if n != 1]
        if not cls.negative_strides and any(s < 0 for s in strides):
            return f"{cls.name} cannot take negative strides"
        if not cls.noncompact_strides and not _is_compact(t):
            return f"{cls.name} takes only compact layouts (no step slices or zero strides)"
        if not cls.permuted and not t.is_contiguous():
            return f"{cls.name} takes only C-contiguous layouts"
        return None

    #: True when it holds only CPU memory.
    host_only: ClassVar[bool] = False

    @classmethod
    def precopy_reasons(cls, t: Any) -> list[str]:
        """Why t must be copied before this framework can take it (layout,
        alignment, read-only data for writable-only frameworks)."""
        reasons = []
        layout = cls.layout_problem(t)
        if layout:
            reasons.append(layout)
        if cls.alignment and t.size and t.data_ptr() % cls.alignment:
            ptr = t.data_ptr()
            reasons.append(
                f"{cls.name} shares only {cls.alignment}-byte aligned memory; this is "
                f"{ptr & -ptr}-byte aligned"
            )
        if t.readonly and cls.readonly == "writable" and not cls.always_copies:
            reasons.append(f"{cls.name} tensors are always writable and the data is read-only")
        return reasons

    @classmethod
    def own_copy_reasons(cls, t: Any) -> list[str]:
        """Why the framework itself will copy what it is given."""
        return [f"{cls.name} always copies"] if cls.always_copies else []

    # -- doing it --------------------------------------------------------------

    @classmethod
    def exchange_type(cls) -> Any:
        """The type whose DLPack C exchange table builds this framework's tensors
        (``managed_tensor_to_py_object_no_sync``), or None."""
        return None

    @classmethod
    def fast_maker(cls) -> Any:
        """For frameworks without an exchange table: what makes the result from a
        Tensor it takes as it is ("identity" for the Tensor itself), or None."""
        return None

    #: The dtypes the fast path may hand over (default: `dtypes`).
    fast_dtypes: ClassVar[frozenset[str] | None] = None

    @classmethod
    def fast_target(cls) -> Any:
        """A `_core._FastTarget` for this framework (its exchange table, or its
        `fast_maker`), cached; None when it has neither."""
        cached = cls.__dict__.get("_fast")
        if cached is None:
            try:
                tp = cls.exchange_type()
            except ImportError:
                return None  # not installed: nothing to cache yet
            maker = cls.fast_maker() if tp is None else None
            cached = False
            if tp is not None or maker is not None:
                try:
                    cached = _core._FastTarget(
                        tp,
                        [DTYPES[n] for n in (cls.fast_dtypes or cls.dtypes)],
                        cls.negative_strides,
                        cls.noncompact_strides,
                        cls.permuted,
                        cls.byte_offset == "honours",
                        cls.readonly != "writable" or cls.always_copies,
                        cls.alignment,
                        maker,
                    )
                except TypeError:
                    cached = False  # no usable table: the Python-level importer
            cls._fast = cached
        return cached or None

    @classmethod
    def import_path(cls) -> str:
        """The path `make` takes here (with this framework's version)."""
        if cls.fallback_path and cls.fast_target() is None:
            return cls.fallback_path
        return cls.path

    @classmethod
    def make(cls, t: Tensor) -> Any:
        """Import t (already made acceptable by the planner) into the framework."""
        raise NotImplementedError

    @classmethod
    def dtype_name(cls, obj: Any) -> str:
        """The DLPack dtype name of one of its arrays."""
        return str(obj.dtype).rsplit(".", 1)[-1]

    @classmethod
    def set_requires_grad(cls, obj: Any) -> Any:
        raise ValueError(f"requires_grad=True: {cls.name} has no autograd")

    # -- for the interoperability matrix ----------------------------------------

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        """The framework's own DLPack consumer, as a user would call it."""
        raise NotImplementedError

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


def _is_compact(t: Any) -> bool:
    """Every element once, without gaps: some permutation of a C-contiguous layout."""
    dims = sorted(
        ((abs(s), n) for s, n in zip(t.strides, t.shape) if n != 1), key=lambda d: d[0]
    )
    expected = 1
    for stride, n in dims:
        if stride != expected:
            return False
        expected *= n
    return all(s >= 0 for s, n in zip(t.strides, t.shape) if n != 1)


def _is_packed(t: Any) -> bool:
    """Bit-packed float6/float4 (a Tensor, or explain's metadata of a capsule)."""
    return _core._is_packed_tensor(t) if type(t) is Tensor else t.packed


def _writable_view(t: Tensor) -> Tensor:
    """A writable-flagged view, for consumers whose arrays are immutable anyway
    (JAX, TensorFlow) or that copy (MLX) but only read legacy capsules."""
    return _core._set_readonly(t, False) if t.readonly else t


def _folded(t: Tensor) -> Tensor:
    """t with its byte_offset folded into the data pointer (CPU memory)."""
    return _core._fold_offset(t)


# --------------------------------------------------------------------------
# The frameworks
# --------------------------------------------------------------------------


class TensorbridgeFramework(Framework):
    name = "tensorbridge"
    modules = ("tensorbridge",)
    label = "tensorbridge"
    readonly = "flag"
    path = "tensorbridge.Tensor (a view, no protocol round trip)"

    @classmethod
    def make(cls, t: Tensor) -> Any:
        return t

    @classmethod
    def fast_maker(cls) -> Any:
        return "identity"

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return _core.from_dlpack(obj)

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        return _core.asarray(values, dtype=dtype_name)

    @classmethod
    def dtype_name(cls, obj: Any) -> str:
        return obj.dtype.name


class NumpyFramework(Framework):
    host_only = True
    name = "numpy"
    modules = ("numpy",)
    label = "numpy"
    readonly = "flag"
    path = "a NumPy view of the memory (buffer protocol; ml_dtypes for bfloat16/float8)"
    quirks = (
        (
            "numpy.from_dlpack cannot import bfloat16 or float8 (NumPy 2.4 has no DLPack "
            "mapping for ml_dtypes types)",
            "tensorbridge makes the NumPy view itself, with the ml_dtypes dtype",
        ),
        (
            "NumPy refuses to export read-only arrays as legacy capsules",
            "tensorbridge asks for versioned capsules and keeps READ_ONLY",
        ),
    )

    @classmethod
    def unsupported_dtype(cls, dtype_name: str) -> str | None:
        if dtype_name in ML_DTYPES and "ml_dtypes" not in sys.modules:
            try:
                import ml_dtypes  # noqa: F401
            except ImportError:
                return f"numpy needs the ml_dtypes package for {dtype_name}"
        return None

    @classmethod
    def layout_problem(cls, t: Any) -> str | None:
        if _is_packed(t):
            return f"numpy stores {t.dtype.name} one element per byte (unpacking copies)"
        return None

    # Without the planner only NumPy's own dtypes (ml_dtypes ones need its checks).
    fast_dtypes = STANDARD

    @classmethod
    def make(cls, t: Tensor) -> Any:
        return t.numpy()

    @classmethod
    def fast_maker(cls) -> Any:
        return Tensor.numpy

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return cls.module().from_dlpack(obj)

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


class TorchFramework(Framework):
    name = "torch"
    modules = ("torch",)
    label = "torch"
    # torch has five float8 types, and float4 only as float4_e2m1fn_x2 (2 per element)
    dtypes = STANDARD | TORCH_FLOAT8 | {"bfloat16"}
    negative_strides = False
    autograd = True
    path = "torch.Tensor's DLPack C exchange table (managed_tensor_to_py_object_no_sync)"
    fallback_path = "torch.from_dlpack on a versioned DLPack capsule"
    quirks = (
        (
            "torch.from_dlpack aborts the whole process on negative strides "
            "(c10::Error thrown through a noexcept function)",
            "negative-stride data is copied to a C-contiguous tensor first",
        ),
        (
            "PyTorch tensors cannot be read-only; torch imports READ_ONLY memory as writable",
            "read-only data (read-only NumPy, JAX, PyArrow, bytes) is copied",
        ),
        (
            "views with the negative bit (z.conj().imag) export their memory unresolved, "
            "so every consumer sees the wrong sign; conjugate views and tensors that "
            "require grad are refused by __dlpack__",
            "tensorbridge resolves negative/conjugate bits (a copy) and detaches "
            "(no copy) before exporting",
        ),
        (
            "torch's export leaves IS_COPIED clear after a copy=True export",
            "tensorbridge never relies on the flag for torch",
        ),
    )

    @classmethod
    def exchange_type(cls) -> Any:
        return cls.module().Tensor

    @classmethod
    def make(cls, t: Tensor) -> Any:
        importer = cls.fast_target()
        return importer(t) if importer else cls.module().from_dlpack(t)

    @classmethod
    def set_requires_grad(cls, obj: Any) -> Any:
        if not (obj.is_floating_point() or obj.is_complex()):
            raise ValueError(
                f"requires_grad=True: only floating-point and complex tensors can require "
                f"gradients; this one is {obj.dtype}"
            )
        return obj.requires_grad_(True)

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return cls.module().from_dlpack(obj)

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        torch = cls.module()
        return torch.tensor(values, dtype=torch.float64).to(getattr(torch, dtype_name))


class JaxFramework(Framework):
    name = "jax"
    modules = ("jax", "jaxlib")
    label = "jax"
    dtypes = STANDARD | FLOAT8 | {"bfloat16"}
    noncompact_strides = False
    negative_strides = False
    alignment = 64
    readonly = "immutable"
    path = "jax.dlpack.from_dlpack (JAX reads legacy capsules only)"
    quirks = (
        (
            "JAX imports without a copy only 64-byte aligned data, and copies (or with "
            "copy=False raises) otherwise",
            "tensorbridge allocates 64-byte aligned memory, so its copies are shared",
        ),
        (
            "JAX refuses step slices, broadcast and negative strides",
            "such data is copied to a C-contiguous array first",
        ),
        (
            "without jax_enable_x64, 64-bit inputs silently become 32-bit",
            "convert raises and names the fix (jax.config.update('jax_enable_x64', True))",
        ),
        (
            "JAX requests and exports legacy capsules only, so READ_ONLY is lost both ways",
            "JAX arrays are immutable: tensorbridge imports them read-only and shares "
            "read-only data with JAX",
        ),
    )

    @classmethod
    def unsupported_dtype(cls, dtype_name: str) -> str | None:
        problem = super().unsupported_dtype(dtype_name)
        if problem:
            return problem
        if DTYPES[dtype_name].bits == 64 or dtype_name == "complex128":
            jax = cls.module()
            if not jax.config.read("jax_enable_x64"):
                return (
                    f"jax is running without 64-bit types, so a {dtype_name} array would "
                    "silently become 32-bit; call jax.config.update('jax_enable_x64', True) "
                    "or pass a 32-bit dtype="
                )
        return None

    @classmethod
    def module(cls) -> Any:
        super().module()
        import jax.dlpack

        return jax

    @classmethod
    def make(cls, t: Tensor) -> Any:
        return cls.module().dlpack.from_dlpack(_writable_view(t))

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return cls.module().dlpack.from_dlpack(obj)

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        import jax.numpy as jnp

        return jnp.asarray(_core.asarray(values, dtype=dtype_name).numpy())

    @classmethod
    def write_first(cls, obj: Any, value: float) -> bool:
        return False  # JAX arrays are immutable


class PaddleFramework(Framework):
    name = "paddle"
    modules = ("paddle",)
    label = "paddle"
    dtypes = (STANDARD - {"uint16"}) | {"bfloat16", "float8_e4m3fn", "float8_e5m2"}
    negative_strides = False
    byte_offset = "fold"
    autograd = True
    path = "paddle.Tensor's DLPack C exchange table (managed_tensor_to_py_object_no_sync)"
    fallback_path = "paddle.utils.dlpack.from_dlpack on a versioned DLPack capsule"
    quirks = (
        (
            "Paddle ignores DLTensor.byte_offset: a view that starts inside its memory "
            "(a 0-d element, an offset slice) imports the wrong elements",
            "tensorbridge moves the offset into the data pointer before exporting",
        ),
        (
            "Paddle imports negative strides into a broken tensor (wrong values, then a "
            "MemoryError on use)",
            "negative-stride data is copied to a C-contiguous tensor first",
        ),
        (
            "Paddle has no uint16: a DLPack uint16 tensor arrives labelled bfloat16",
            "convert refuses uint16 for Paddle (pass dtype=) instead of relabelling",
        ),
        (
            "Paddle has only two float8 types (e4m3fn, e5m2); others fail deep inside its "
            "importer with NotImplementedError",
            "convert refuses the others with a BufferError naming the type",
        ),
        (
            "Paddle tensors cannot be read-only; READ_ONLY is ignored",
            "read-only data is copied",
        ),
        (
            "Paddle's __dlpack_device__ answers (kDLCPU, None)",
            "a None device id is read as 0",
        ),
        (
            "Paddle's DeleterBridge holds a non-recursive mutex while it runs a DLPack "
            "deleter, so releasing a Paddle import of a Paddle tensor that was itself "
            "imported through DLPack deadlocks the process",
            "tensorbridge never runs a producer's deleter from inside another framework's "
            "call of its own deleters (it is deferred to the interpreter loop), so chains "
            "through tensorbridge are safe; Paddle-to-Paddle chains are Paddle's own",
        ),
    )

    @classmethod
    def exchange_type(cls) -> Any:
        return cls.module().Tensor

    @classmethod
    def make(cls, t: Tensor) -> Any:
        importer = cls.fast_target()
        t = _folded(t)
        return importer(t) if importer else cls.module().utils.dlpack.from_dlpack(t)

    @classmethod
    def set_requires_grad(cls, obj: Any) -> Any:
        obj.stop_gradient = False
        return obj

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


class TensorflowFramework(Framework):
    name = "tensorflow"
    modules = ("tensorflow", "tf_keras", "keras")
    label = "tf"
    dtypes = STANDARD | {"bfloat16"}
    negative_strides = False
    noncompact_strides = False
    permuted = False
    byte_offset = "zero"
    alignment = 64
    readonly = "immutable"
    path = "tf.experimental.dlpack.from_dlpack on a legacy capsule (the only kind TF reads)"
    quirks = (
        (
            "TensorFlow imports memory that is not 64-byte aligned without complaint, and "
            "then aborts the process (Check failed: IsAligned()) in the first operation "
            "on it; NumPy's allocations are 16-byte aligned",
            "unaligned data is copied into 64-byte aligned memory first",
        ),
        (
            "tf.experimental.dlpack.from_dlpack takes only a legacy capsule, not an object",
            "tensorbridge makes the capsule",
        ),
        (
            "TensorFlow refuses any layout but C-contiguous, and any nonzero byte_offset",
            "other layouts are copied; offsets are moved into the data pointer",
        ),
        (
            "TensorFlow has no float8 types over DLPack",
            "convert refuses them (pass dtype=)",
        ),
        (
            "tf.Variable has no DLPack export",
            "convert reads its value first",
        ),
    )

    @classmethod
    def module(cls) -> Any:
        return super().module()

    @classmethod
    def make(cls, t: Tensor) -> Any:
        tf = cls.module()
        return tf.experimental.dlpack.from_dlpack(_core.to_dlpack(_writable_view(_folded(t))))

    @classmethod
    def dtype_name(cls, obj: Any) -> str:
        return obj.dtype.name

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


class MlxFramework(Framework):
    host_only = True
    name = "mlx"
    modules = ("mlx",)
    module_name = "mlx.core"
    label = "mlx"
    dtypes = (STANDARD - {"complex128"}) | {"bfloat16"}
    negative_strides = False
    always_copies = True
    path = "mlx.core.from_dlpack (MLX always copies into its own memory)"
    quirks = (
        (
            "mx.from_dlpack silently narrows float64 to float32 and complex128 to complex64",
            "float64 goes through mx.array(..., dtype=mx.float64); complex128 is refused",
        ),
        (
            "mx.from_dlpack calls the producer's deleter without renaming a capsule, so a "
            "capsule used twice is read after it was freed (a segfault)",
            "tensorbridge never hands MLX a capsule, only a fresh object each time",
        ),
        (
            "MLX refuses negative strides",
            "such data is copied to a C-contiguous array first",
        ),
    )

    @classmethod
    def make(cls, t: Tensor) -> Any:
        mx = cls.module()
        if t.dtype.name == "float64":
            return mx.array(t.numpy(), dtype=mx.float64)
        return mx.from_dlpack(_writable_view(t))

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return cls.module().from_dlpack(obj)

    @classmethod
    def write_first(cls, obj: Any, value: float) -> bool:
        return False  # item assignment gives the array new memory (no write-through)

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        mx = cls.module()
        return mx.array(values, dtype=mx.float32).astype(
            getattr(mx, "bool_" if dtype_name == "bool" else dtype_name)
        )


class CupyFramework(Framework):
    name = "cupy"
    modules = ("cupy",)
    label = "cupy"
    dtypes = STANDARD
    path = "cupy.from_dlpack (CUDA memory); cupy.asarray copies CPU memory to the GPU"
    quirks = (
        (
            "cupy.from_dlpack refuses CPU producers with TypeError",
            "CPU data is copied to the GPU with cupy.asarray when copy= allows it",
        ),
    )

    @classmethod
    def own_copy_reasons(cls, t: Any) -> list[str]:
        if t.device.type in ("cuda", "cuda_managed"):
            return []
        return [f"cupy holds GPU memory: the {t.device} data is copied to the GPU"]

    @classmethod
    def make(cls, t: Tensor) -> Any:
        cupy = cls.module()
        if t.device.type in ("cuda", "cuda_managed", "rocm"):
            return cupy.from_dlpack(t)
        return cupy.asarray(t.numpy())

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return cls.module().from_dlpack(obj)


class PyarrowFramework(Framework):
    host_only = True
    name = "pyarrow"
    modules = ("pyarrow",)
    label = "pa"
    dtypes = frozenset(
        {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "float16", "float32", "float64"}
    )
    negative_strides = False
    readonly = "immutable"
    path = "pyarrow.Array.from_dlpack (1-d) or pyarrow.Tensor.from_dlpack (other shapes)"
    quirks = (
        (
            "Arrow booleans are bit-packed, so pyarrow neither exports nor imports bool "
            "over DLPack",
            "bool arrays are converted through pyarrow.array (a copy), both ways",
        ),
        (
            "pyarrow insists on a versioned capsule after asking max_version=(1, 3)",
            "tensorbridge always answers versioned requests with versioned capsules",
        ),
        (
            "pyarrow.Array.from_dlpack takes only 1-d contiguous data; Tensor takes no "
            "negative strides",
            "1-d strided data is copied; negative strides are copied",
        ),
        (
            "pyarrow.ChunkedArray has no DLPack export",
            "convert joins the chunks first (a copy when there is more than one)",
        ),
        (
            "asked for a legacy capsule, pyarrow exports its read-only memory anyway, so "
            "legacy-only consumers (tvm-ffi) get writable access to Arrow buffers",
            "tensorbridge imports PyArrow data read-only and copies it for writable-only "
            "targets",
        ),
    )

    @classmethod
    def layout_problem(cls, t: Any) -> str | None:
        problem = super().layout_problem(t)
        if problem is None and t.ndim == 1 and not t.is_contiguous():
            return "pyarrow.Array takes only contiguous 1-d data"
        return problem

    @classmethod
    def own_copy_reasons(cls, t: Any) -> list[str]:
        return ["Arrow booleans are bit-packed (pyarrow copies them)"] if t.dtype.name == "bool" \
            else []

    @classmethod
    def make(cls, t: Tensor) -> Any:
        pa = cls.module()
        if t.dtype.name == "bool":
            values = pa.array(t.numpy().reshape(-1))
            return values if t.ndim == 1 else pa.Tensor.from_numpy(t.numpy())
        if t.ndim == 1:
            return pa.Array.from_dlpack(t)
        return pa.Tensor.from_dlpack(t)

    @classmethod
    def dtype_name(cls, obj: Any) -> str:
        pa = cls.module()
        arrow_type = obj.type
        if arrow_type == pa.bool_():
            return "bool"
        name = str(arrow_type)
        return {"halffloat": "float16", "float": "float32", "double": "float64"}.get(name, name)

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


class ArrayApiStrictFramework(Framework):
    host_only = True
    name = "array_api_strict"
    modules = ("array_api_strict",)
    label = "xp-strict"
    dtypes = STANDARD - {"float16"}
    readonly = "flag"
    path = "array_api_strict.from_dlpack on a versioned DLPack capsule"
    quirks = (("array-api-strict has no float16", "convert refuses it (pass dtype=)"),)

    @classmethod
    def make(cls, t: Tensor) -> Any:
        return cls.module().from_dlpack(t)

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return cls.module().from_dlpack(obj)

    @classmethod
    def sample(cls, values: list[float], dtype_name: str) -> Any:
        xp = cls.module()
        return xp.asarray(_core.asarray(values, dtype=dtype_name).numpy())

    @classmethod
    def to_list(cls, obj: Any) -> list[Any]:
        import numpy as np

        return list(np.asarray(obj._array).tolist())


class TvmFfiFramework(Framework):
    name = "tvm_ffi"
    modules = ("tvm_ffi",)
    label = "tvm_ffi"
    dtypes = ALL_DTYPES - {"complex64", "complex128"} - SUBBYTE
    path = "tvm_ffi.from_dlpack"
    quirks = (
        (
            "tvm_ffi.from_dlpack asks generic producers for legacy capsules, and ignores "
            "READ_ONLY in the managed tensors of C exchange tables (ours included), so "
            "read-only data arrives writable",
            "read-only data is copied",
        ),
        (
            "tvm-ffi has no complex types ('unknown type_code=5')",
            "convert refuses complex64/complex128",
        ),
        (
            "tvm-ffi re-exports float6/float4 tensors without IS_SUBBYTE_TYPE_PADDED, so "
            "one-element-per-byte data is read back as bit-packed (wrong values)",
            "convert refuses float6/float4 for tvm-ffi",
        ),
    )

    @classmethod
    def make(cls, t: Tensor) -> Any:
        return cls.module().from_dlpack(t)

    @classmethod
    def native_from_dlpack(cls, obj: Any) -> Any:
        return cls.module().from_dlpack(obj)

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


#: Every bridge target, by name.
FRAMEWORKS: dict[str, type[Framework]] = {
    f.name: f
    for f in (
        NumpyFramework,
        TorchFramework,
        JaxFramework,
        PaddleFramework,
        TensorflowFramework,
        MlxFramework,
        CupyFramework,
        PyarrowFramework,
        ArrayApiStrictFramework,
        TvmFfiFramework,
        TensorbridgeFramework,
    )
}
_ALIASES = {"tf": "tensorflow", "np": "numpy", "pytorch": "torch", "pa": "pyarrow",
            "mx": "mlx", "xp": "array_api_strict", "tb": "tensorbridge"}


def resolve_target(to: Any) -> type[Framework]:
    """The Framework for a name (``"torch"``) or a module (``torch``, ``jax.numpy``)."""
    if isinstance(to, str):
        name = _ALIASES.get(to, to)
        if name in FRAMEWORKS:
            return FRAMEWORKS[name]
        raise ValueError(f"unknown target framework {to!r}; expected one of {sorted(FRAMEWORKS)}")
    module_name = getattr(to, "__name__", None)
    if isinstance(module_name, str):
        root = module_name.split(".")[0]
        for framework in FRAMEWORKS.values():
            if root in framework.modules:
                return framework
    raise TypeError(
        f"convert(): the target must be a framework name or module; got {type(to).__name__}"
    )


def framework_of(obj: Any) -> type[Framework] | None:
    """The framework an object belongs to, judged by its type's module (no imports)."""
    root = (getattr(type(obj), "__module__", "") or "").split(".")[0]
    for framework in FRAMEWORKS.values():
        if root in framework.modules:
            return framework
    return None
