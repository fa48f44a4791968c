# SPDX-License-Identifier: Apache-2.0
"""PyArrow as a bridge target and a source: immutable arrays, bit-packed booleans,
1-d ``Array`` or n-d ``Tensor``, chunked arrays without export."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensorbridge._core import Tensor
from tensorbridge._frameworks.base import Framework, TensorInfo
from tensorbridge._known_types import loaded

__all__ = ["PyarrowFramework"]


class PyarrowFramework(Framework):
    name = "pyarrow"
    aliases = ("pa",)
    modules = ("pyarrow",)
    import_names = (("pa", "pyarrow"), ("pyarrow", "pyarrow"))
    distribution = "pyarrow"
    label = "pa"
    host_only = True
    dtypes = frozenset(
        {
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
            "float32",
            "float64",
        }
    )
    negative_strides = False
    readonly = "immutable"
    # Booleans are bit-packed in Arrow: the planner converts them.
    fast_dtypes = dtypes - {"bool"}
    fast_contiguous_only = True
    versioned_only = True
    legacy_export_deprecated = True  # (PyArrow 26)
    counts_nulls = True
    own_types = ("pyarrow.Array", "pyarrow.Tensor")
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
            "pyarrow's __dlpack__ refuses fixed-size lists (and says to make a Tensor)",
            "asarray and convert read them as n-d tensors through the Arrow C data "
            "interface, shared",
        ),
        (
            "pyarrow.ChunkedArray has no DLPack export",
            "convert reads a single chunk as it is and joins several (a copy)",
        ),
        (
            "asked for a legacy capsule, pyarrow exports its read-only memory anyway, so "
            "legacy-only consumers (tvm-ffi) get writable access to Arrow buffers",
            "tensorbridge imports PyArrow data read-only; convert shares it with "
            'writable-only targets and says so, or copies it under readonly="copy"',
        ),
        (
            "pyarrow (26) answers the legacy __dlpack__() with a DeprecationWarning, and "
            "NumPy, MLX, TensorFlow and tvm-ffi make that call (NumPy after a TypeError, "
            "which pyarrow raises for nulls)",
            "tensorbridge asks pyarrow arrays for versioned capsules only and hands the "
            "importers a Tensor of its own",
        ),
    )

    @classmethod
    def prepare_source(cls, obj: Any, must_copy: Callable[[str], None], notes: list[str]) -> Any:
        if type(obj).__name__ == "ChunkedArray":
            if obj.num_chunks == 1:
                obj = obj.chunk(0)  # shared; combine_chunks() would copy even one chunk
            else:
                if obj.num_chunks > 1:
                    must_copy("a pyarrow.ChunkedArray with several chunks is joined (a copy)")
                obj = obj.combine_chunks()
        if str(getattr(obj, "type", "")) == "bool":
            must_copy("Arrow booleans are bit-packed; they are unpacked (a copy)")
            obj = obj.to_numpy(zero_copy_only=False)
        elif _is_fixed_size_list(obj):
            obj = _read_lists(obj, must_copy, notes)
        return obj

    @classmethod
    def export_problem(cls, obj: Any) -> str | None:
        kind = type(obj).__name__
        nulls = getattr(obj, "null_count", 0)
        if nulls:
            return (
                f"a pyarrow {kind} with {nulls} null{'s' if nulls > 1 else ''} has no tensor "
                "form (DLPack cannot mark missing values): fill them first "
                "(pyarrow.compute.fill_null(array, value)) or drop them (array.drop_null())"
            )
        pa = loaded("pyarrow")
        arrow_type = getattr(obj, "type", None)
        if pa is not None and isinstance(arrow_type, pa.DataType):
            leaf = arrow_type
            while pa.types.is_fixed_size_list(leaf):
                leaf = leaf.value_type  # (read as an n-d tensor: prepare_source)
            numeric = (
                pa.types.is_boolean(leaf) or pa.types.is_integer(leaf) or pa.types.is_floating(leaf)
            )
            if not numeric:
                return (
                    f"pyarrow {arrow_type} arrays have no DLPack equivalent (DLPack holds "
                    "numbers): cast them to a numeric type first (array.cast(...))"
                )
        return None

    @classmethod
    def unmarked_export(cls, tp: type) -> bool:
        # A pyarrow.Tensor over writable memory (Tensor.from_numpy) exports versioned
        # capsules without READ_ONLY; pyarrow.Array sets it always.
        return tp.__name__ == "Tensor"

    @classmethod
    def reads_in_c(cls, tp: type) -> bool:
        # (fixed-size lists: read through the Arrow C data interface by the planner)
        return tp.__name__ not in ("ChunkedArray", "BooleanArray", "FixedSizeListArray")

    @classmethod
    def importer(cls) -> Any:
        return cls.module().Array.from_dlpack

    @classmethod
    def carry_importer(cls) -> Any:
        # 1-d capsules only: carriers refuse the others, which the route then reads
        # and makes with Tensor.from_dlpack (the maker pair).
        return cls.module().Array.from_dlpack

    @classmethod
    def fast_maker(cls) -> Any:
        pa = cls.module()
        return (pa.Array.from_dlpack, pa.Tensor.from_dlpack)  # 1-d, others: chosen in C

    @classmethod
    def layout_problem(cls, t: TensorInfo) -> str | None:
        problem = super().layout_problem(t)
        if problem is None and t.ndim == 1 and not t.is_contiguous():
            return "pyarrow.Array takes only contiguous 1-d data"
        return problem

    @classmethod
    def own_copy_reasons(cls, t: TensorInfo) -> list[str]:
        if t.dtype.name == "bool":
            return ["Arrow booleans are bit-packed (pyarrow copies them)"]
        return []

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


def _is_fixed_size_list(obj: Any) -> bool:
    pa = loaded("pyarrow")
    arrow_type = getattr(obj, "type", None)
    return (
        pa is not None
        and isinstance(arrow_type, pa.DataType)
        and pa.types.is_fixed_size_list(arrow_type)
        and isinstance(obj, pa.Array)
    )


def _read_lists(obj: Any, must_copy: Callable[[str], None], notes: list[str]) -> Tensor:
    """A FixedSizeListArray as the n-d tensor its Arrow C data interface describes
    (pyarrow's __dlpack__ refuses it): shared, but for bit-packed booleans."""
    from tensorbridge._creation import from_arrow  # (not at import: a cycle)

    read = from_arrow(obj, None)
    assert read is not None  # (only a struct array reads as None)
    tensor, why = read
    if why is not None:
        must_copy(why)
    notes.append(
        f"a pyarrow {obj.type} array is read as a {tensor.ndim}-d tensor through the Arrow C "
        "data interface (its __dlpack__ refuses lists)"
    )
    return tensor
