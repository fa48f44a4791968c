# SPDX-License-Identifier: Apache-2.0
"""PaddlePaddle as a bridge target: an exchange table, but byte offsets ignored,
negative strides broken, no uint16, two float8 types. (Importing it after
TensorFlow crashes the process: `tensorbridge._known_types.check_import_order`.)"""

from __future__ import annotations

from typing import Any

from tensorbridge._core import Tensor
from tensorbridge._frameworks.base import STANDARD, Framework, folded

__all__ = ["PaddleFramework"]


class PaddleFramework(Framework):
    name = "paddle"
    modules = ("paddle",)
    import_names = (("paddle", "paddle"),)
    distribution = "paddlepaddle"
    label = "paddle"
    dtypes = (STANDARD - {"uint16"}) | {"bfloat16", "float8_e4m3fn", "float8_e5m2"}
    negative_strides = False
    byte_offset = "fold"
    trusted_export = False  # __dlpack_device__ answers (kDLCPU, None)
    autograd = True
    own_types = ("paddle.Tensor",)
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
            "convert shares read-only data writable by default, as paddle's own "
            'from_dlpack does, and says so; readonly="copy" copies it',
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
    def importer(cls) -> Any:
        return cls.module().utils.dlpack.from_dlpack

    @classmethod
    def make(cls, t: Tensor) -> Any:
        importer = cls.fast_target()
        t = folded(t)
        return importer(t) if importer else cls.module().utils.dlpack.from_dlpack(t)

    @classmethod
    def set_requires_grad(cls, obj: Any) -> Any:
        obj.stop_gradient = False
        return obj

    @classmethod
    def requires_grad_of(cls, obj: Any) -> bool:
        return not obj.stop_gradient
