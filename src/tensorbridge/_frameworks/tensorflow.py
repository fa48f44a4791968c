# SPDX-License-Identifier: Apache-2.0
"""TensorFlow as a bridge target and a source: legacy capsules only, C-contiguous
and 64-byte aligned data only, immutable eager tensors, variables without export."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tensorbridge import _core
from tensorbridge._core import Tensor
from tensorbridge._frameworks.base import STANDARD, Framework, folded, writable_view

__all__ = ["TensorflowFramework"]


class TensorflowFramework(Framework):
    name = "tensorflow"
    aliases = ("tf",)
    modules = ("tensorflow", "tf_keras", "keras")
    import_names = (("tf", "tensorflow"), ("tensorflow", "tensorflow"))
    distribution = "tensorflow-cpu"
    label = "tf"
    importer_asks_legacy = True  # __dlpack__() with no keywords
    dtypes = STANDARD | {"bfloat16"}
    negative_strides = False
    noncompact_strides = False
    permuted = False
    byte_offset = "zero"
    alignment = 64
    readonly = "immutable"
    legacy_only = True
    legacy_export = True
    own_types = ("tensorflow.python.framework.ops.EagerTensor",)
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
    def prepare_source(cls, obj: Any, must_copy: Callable[[str], None], notes: list[str]) -> Any:
        if not hasattr(obj, "__dlpack__") and hasattr(obj, "read_value"):
            obj = obj.read_value()
            notes.append("read the tf.Variable's value")
        return obj

    @classmethod
    def reads_in_c(cls, tp: type) -> bool:
        return hasattr(tp, "__dlpack__")  # a tf.Variable's value is read first

    @classmethod
    def fast_maker(cls) -> Any:
        from_dlpack = cls.module().experimental.dlpack.from_dlpack
        to_dlpack = _core.to_dlpack
        return lambda t: from_dlpack(to_dlpack(t))

    @classmethod
    def capsule_importer(cls) -> Any:
        return cls.module().experimental.dlpack.from_dlpack  # it takes capsules only

    @classmethod
    def make(cls, t: Tensor) -> Any:
        tf = cls.module()
        return tf.experimental.dlpack.from_dlpack(_core.to_dlpack(writable_view(folded(t))))

    @classmethod
    def dtype_name(cls, obj: Any) -> str:
        return str(obj.dtype.name)
