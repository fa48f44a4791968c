# SPDX-License-Identifier: Apache-2.0
"""tensorbridge itself as a bridge target: the Tensor, a view, no protocol round trip."""

from __future__ import annotations

from typing import Any

from tensorbridge._core import Tensor
from tensorbridge._frameworks.base import Framework

__all__ = ["TensorbridgeFramework"]


class TensorbridgeFramework(Framework):
    name = "tensorbridge"
    aliases = ("tb",)
    modules = ("tensorbridge",)
    import_names = (("tb", "tensorbridge"), ("tensorbridge", "tensorbridge"))
    label = "tensorbridge"
    readonly = "flag"
    own_types = ("tensorbridge._core.Tensor",)
    path = "tensorbridge.Tensor (a view, no protocol round trip)"

    @classmethod
    def make(cls, t: Tensor) -> Any:
        return t

    @classmethod
    def fast_maker(cls) -> Any:
        return "identity"

    @classmethod
    def dtype_name(cls, obj: Any) -> str:
        return str(obj.dtype.name)
