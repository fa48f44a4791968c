# SPDX-License-Identifier: Apache-2.0
"""JAX as a bridge target and a source: immutable arrays, legacy capsules only,
64-byte alignment for sharing, 64-bit types only with jax_enable_x64."""

from __future__ import annotations

import importlib
from typing import Any

from tensorbridge._core import Tensor
from tensorbridge._devices import Device
from tensorbridge._dtypes import DTYPES
from tensorbridge._frameworks.base import FLOAT8, STANDARD, Framework, writable_view

__all__ = ["JaxFramework"]


class JaxFramework(Framework):
    name = "jax"
    modules = ("jax", "jaxlib")
    import_names = (("jax", "jax"), ("jnp", "jax.numpy"))
    distribution = "jax"
    label = "jax"
    dtypes = STANDARD | FLOAT8 | {"bfloat16"}
    noncompact_strides = False
    negative_strides = False
    alignment = 64
    readonly = "immutable"
    legacy_only = True
    legacy_export = True
    own_types = ("jax.Array",)
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
    def module(cls) -> Any:
        jax = super().module()
        importlib.import_module("jax.dlpack")  # a submodule `import jax` leaves out
        return jax

    @classmethod
    def unsupported_dtype(cls, dtype_name: str) -> str | None:
        problem = super().unsupported_dtype(dtype_name)
        if problem:
            return problem
        dtype = DTYPES[dtype_name]
        if (dtype.bits == 64 and dtype.code != 5) or dtype_name == "complex128":  # 5: complex
            jax = cls.module()
            if not jax.config.read("jax_enable_x64"):
                return (
                    f"jax is running without 64-bit types, so {dtype_name} data would "
                    "silently become 32-bit; call jax.config.update('jax_enable_x64', True) "
                    "or pass a 32-bit dtype="
                )
        return None

    @classmethod
    def make(cls, t: Tensor) -> Any:
        return cls.module().dlpack.from_dlpack(writable_view(t))

    @classmethod
    def importer(cls) -> Any:
        return cls.module().dlpack.from_dlpack

    @classmethod
    def current_stream(cls, device: Device) -> int | None:
        # JAX has no current stream of its own: its importer orders the producer's
        # work on the stream its device gives for external events.
        try:
            for d in cls.module().devices():
                if d.platform in ("gpu", "cuda", "rocm") and d.local_hardware_id == device.index:
                    handle = int(d.get_stream_for_external_ready_events())
                    # 0 is the default stream: DLPack's 1 on CUDA (legacy), 0 on ROCm.
                    return 1 if handle == 0 and device.type != "rocm" else handle
        except Exception:
            return None  # no such device or method: DLPack's default
        return None

    @classmethod
    def fast_maker(cls) -> Any:
        return cls.importer()  # the route checks alignment, layout and x64 first

    @classmethod
    def guard64(cls) -> Any:
        config = cls.module().config
        return lambda: bool(config.read("jax_enable_x64"))
