# SPDX-License-Identifier: Apache-2.0
"""The target names of `convert` and `explain`, as a type (a module of its own so the
stubs of the compiled core can use it without importing the planner)."""

from typing import Literal

__all__ = ["TargetName"]

#: The names `convert` and `explain` take for ``to`` (each framework's and its
#: aliases; tensorbridge._frameworks.FRAMEWORKS and ALIASES, which a test compares).
#: Type checkers reject any other string; a name held in a ``str`` variable is
#: annotated ``tb.TargetName``, or the framework's module is passed instead.
TargetName = Literal[
    "numpy",
    "np",
    "torch",
    "pytorch",
    "jax",
    "jnp",
    "jax.numpy",
    "paddle",
    "tensorflow",
    "tf",
    "mlx",
    "mx",
    "mlx.core",
    "cupy",
    "pyarrow",
    "pa",
    "array_api_strict",
    "xp",
    "tvm_ffi",
    "tensorbridge",
    "tb",
]
