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
    aliases = ("jnp", "jax.numpy")
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

    #: jaxlib's import of a capsule onto its CPU device (`_cpu_importer`), False when
    #: this jaxlib has none that passes the probe.
    cpu_import: Any = None

    @classmethod
    def make(cls, t: Tensor) -> Any:
        t = writable_view(t)
        make = cls._cpu_importer()
        return make(t) if make is not None else cls.module().dlpack.from_dlpack(t)

    @classmethod
    def _cpu_importer(cls) -> Any:
        """A faster ``jax.dlpack.from_dlpack`` for a Tensor on the CPU: the jaxlib call
        that function ends in, without its Python layer, or None.

        On the CPU, ``jax.dlpack.from_dlpack`` asks the device for a stream, which
        raises there and is caught (about 11 µs; TensorFlow's tensors alone are spared
        it), then passes the result through ``jnp.asarray`` (17 µs), which returns it
        as it is when its dtype is canonical: 50 µs in all for 1000 float32, against 5
        µs for the call itself. The call is private to jaxlib, so it is used only when
        jaxlib declares the signature this was written against (extension version 467
        and later) and a probe of it gives the values and the memory it was given; the
        public function otherwise. A dtype JAX would canonicalise goes through
        ``jnp.asarray`` as there."""
        cached = cls.__dict__.get("cpu_import")
        if cached is None:
            cached = cls._probe_cpu_importer() or False
            cls.cpu_import = cached
        return cached or None

    @classmethod
    def _probe_cpu_importer(cls) -> Any:
        jax = cls.module()
        try:
            from jax._src import dtypes
            from jax._src.lib import _jax, jaxlib_extension_version

            if jaxlib_extension_version < 467:
                return None
            to_buffer = _jax.dlpack_managed_tensor_to_buffer
            canonical = dtypes.canonicalize_dtype
            # The device the public function picks: the local CPU device 0.
            device = next(d for d in jax.local_devices(backend="cpu") if d.local_hardware_id == 0)
        except Exception:  # (a jaxlib without them, or no CPU device 0)
            return None
        asarray = jax.numpy.asarray
        public = jax.dlpack.from_dlpack

        def make(t: Tensor) -> Any:
            if t.__dlpack_device__() != (1, 0):  # (CPU memory labelled otherwise)
                return public(t)
            arr = to_buffer(t.__dlpack__(), device, None, None, 1)  # 1: kDLCPU
            dtype = arr.dtype
            return arr if canonical(dtype) == dtype else asarray(arr, dtype=canonical(dtype))

        from tensorbridge._creation import arange

        probe = arange(4, dtype="float32")
        try:
            arr = make(probe)
            ok = arr.unsafe_buffer_pointer() == probe.data_ptr() and arr.tolist() == [0, 1, 2, 3]
        except Exception:
            return None
        return make if ok else None

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
        # The route checks alignment, layout and x64 first; it hands over CPU memory only.
        return cls._cpu_importer() or cls.importer()

    @classmethod
    def guard64(cls) -> Any:
        config = cls.module().config
        return lambda: bool(config.read("jax_enable_x64"))
