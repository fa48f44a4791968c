# SPDX-License-Identifier: Apache-2.0
"""PyTorch as a bridge target and a source: its facts, and every torch quirk
tensorbridge handles on the Python side (bit views, autograd, no read-only tensors,
process aborts on negative strides)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensorbridge._core import Tensor
from tensorbridge._devices import Device
from tensorbridge._frameworks.base import STANDARD, Framework
from tensorbridge._known_types import loaded

__all__ = ["TORCH_FLOAT8", "TorchFramework", "has_view_bits", "resolve_view_bits"]

#: The float8 types PyTorch has (PaddlePaddle has two of them).
TORCH_FLOAT8 = frozenset(
    {"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"}
)


def has_view_bits(obj: Any) -> bool:
    """True for a torch tensor whose negative or conjugate bit is set (its export
    leaves the bit unresolved, or refuses): it must be resolved, a copy, first.
    Imports nothing: an object can be a torch tensor only once torch is loaded."""
    torch = loaded("torch")
    return (
        torch is not None and isinstance(obj, torch.Tensor) and bool(obj.is_neg() or obj.is_conj())
    )


def resolve_view_bits(obj: Any) -> Any:
    """A torch tensor with its negative and conjugate bits resolved (a copy when set)."""
    return obj.resolve_neg().resolve_conj()


class TorchFramework(Framework):
    name = "torch"
    aliases = ("pytorch",)
    modules = ("torch",)
    import_names = (("torch", "torch"),)
    distribution = "torch"
    label = "torch"
    # torch has five float8 types, and float4 only as float4_e2m1fn_x2 (2 per element)
    dtypes = STANDARD | TORCH_FLOAT8 | {"bfloat16"}
    negative_strides = False
    autograd = True
    bit_views = True
    own_types = ("torch.Tensor",)
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
    def prepare_source(cls, obj: Any, must_copy: Callable[[str], None], notes: list[str]) -> Any:
        if type(obj).__name__ not in ("Tensor", "Parameter"):
            return obj
        if obj.requires_grad:
            obj = obj.detach()
            notes.append("detached from autograd (shares memory)")
        if obj.is_conj():
            must_copy("torch conjugate views must be resolved (a copy)")
            obj = obj.resolve_conj()
        if obj.is_neg():
            must_copy("torch negative-bit views must be resolved (a copy)")
            obj = obj.resolve_neg()
        return obj

    @classmethod
    def reads_in_c(cls, tp: type) -> bool:
        # Bit views and tensors that require grad come through the exchange table
        # too: the table read gives None for bit views (the planner resolves them).
        return True

    @classmethod
    def importer(cls) -> Any:
        return cls.module().from_dlpack

    @classmethod
    def current_stream(cls, device: Device) -> int | None:
        # torch.cuda serves ROCm builds too; its default stream's handle is 0, which
        # DLPack spells 1 on CUDA (legacy default) and 0 on ROCm.
        handle = int(cls.module().cuda.current_stream(device.index).cuda_stream)
        if handle == 0 and device.type != "rocm":
            return 1
        return handle

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
    def requires_grad_of(cls, obj: Any) -> bool:
        return bool(obj.requires_grad)

    @classmethod
    def can_require_grad(cls, obj: Any) -> bool:
        return bool(obj.is_floating_point() or obj.is_complex()) and obj.is_leaf
