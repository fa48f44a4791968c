# SPDX-License-Identifier: Apache-2.0
"""MLX as a bridge target: it always copies, narrows 64-bit floats in
``from_dlpack``, and must never be handed a capsule."""

from __future__ import annotations

from typing import Any

from tensorbridge._core import Tensor
from tensorbridge._frameworks.base import STANDARD, Framework, writable_view

__all__ = ["MlxFramework"]


class MlxFramework(Framework):
    name = "mlx"
    aliases = ("mx", "mlx.core")
    modules = ("mlx",)
    module_name = "mlx.core"
    import_names = (("mlx", "mlx"), ("mx", "mlx.core"))
    distribution = "mlx"
    label = "mlx"
    importer_asks_legacy = True  # __dlpack__() with no keywords
    host_only = True
    dtypes = (STANDARD - {"complex128"}) | {"bfloat16"}
    negative_strides = False
    always_copies = True
    legacy_only = True
    legacy_export = True
    handoff = True  # refuses negative strides itself; narrows float64: dtypes checked
    importer_refuses_dtypes = False
    # float64 goes through mx.array (the planner): mx.from_dlpack narrows it.
    fast_dtypes = (STANDARD - {"complex128", "float64"}) | {"bfloat16"}
    own_types = ("mlx.core.array",)
    path = "mlx.core.from_dlpack (MLX always copies into its own memory)"
    quirks = (
        (
            "mx.from_dlpack silently narrows float64 to float32 and complex128 to complex64",
            "float64 goes through mx.array(..., dtype=mx.float64); complex128 is refused",
        ),
        (
            "mx.from_dlpack(obj) calls the deleter of the capsule obj gave it without "
            "renaming that capsule, so a producer that gives out one capsule twice has it "
            "read after it was freed (a segfault); a capsule given to it is renamed",
            "tensorbridge hands MLX a capsule, or an object that gives a new capsule each time",
        ),
        (
            "MLX refuses negative strides",
            "such data is copied to a C-contiguous array first",
        ),
    )

    @classmethod
    def importer(cls) -> Any:
        return cls.module().from_dlpack

    @classmethod
    def capsule_importer(cls) -> Any:
        # It asks an object for __dlpack__() (a legacy capsule) and imports the
        # capsule as it imports one it is given, except that it renames only the
        # latter (the quirk above).
        return cls.importer()

    @classmethod
    def make(cls, t: Tensor) -> Any:
        mx = cls.module()
        if t.dtype.name == "float64":
            return mx.array(t.numpy(), dtype=mx.float64)
        return mx.from_dlpack(writable_view(t))
