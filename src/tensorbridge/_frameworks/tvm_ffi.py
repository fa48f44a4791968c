# SPDX-License-Identifier: Apache-2.0
"""tvm-ffi as a bridge target: legacy capsules, READ_ONLY ignored, no complex types,
sub-byte floats re-exported wrongly."""

from __future__ import annotations

from typing import Any

from tensorbridge._core import Tensor
from tensorbridge._frameworks.base import ALL_DTYPES, SUBBYTE, Framework

__all__ = ["TvmFfiFramework"]


class TvmFfiFramework(Framework):
    name = "tvm_ffi"
    modules = ("tvm_ffi",)
    import_names = (("tvm_ffi", "tvm_ffi"),)
    distribution = "apache-tvm-ffi"
    label = "tvm_ffi"
    importer_asks_legacy = True  # __dlpack__() with no keywords
    dtypes = ALL_DTYPES - {"complex64", "complex128"} - SUBBYTE
    own_types = ("tvm_ffi.Tensor",)
    path = "tvm_ffi.from_dlpack"
    handoff = True
    importer_refuses_dtypes = False
    importer_reads_tables = True
    quirks = (
        (
            "tvm_ffi.from_dlpack asks generic producers for legacy capsules, and ignores "
            "READ_ONLY in the managed tensors of C exchange tables (ours included), so "
            "read-only data arrives writable",
            "convert shares read-only data writable by default, as tvm_ffi.from_dlpack "
            'does, and says so; readonly="copy" copies it',
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
    def importer(cls) -> Any:
        return cls.module().from_dlpack

    @classmethod
    def capsule_importer(cls) -> Any:
        # A capsule or an object: the same managed-tensor import (an object with no
        # exchange table is asked __dlpack__(), a legacy capsule).
        return cls.importer()
