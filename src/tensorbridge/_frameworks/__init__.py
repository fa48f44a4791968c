# SPDX-License-Identifier: Apache-2.0
"""The framework registry: every bridge target tensorbridge knows, in one place.

Each framework is a `Framework` subclass in a module of this package holding its
facts, its quirks and how to read its tensors; this registry lists them, in the
order they must be imported in (PaddlePaddle before TensorFlow: importing it after
crashes the process), with their aliases, module names and distributions, and
answers "which framework is this name, module or object?". The planner, the
command line, the tests and the benchmarks take their framework lists from here.

Nothing here imports a framework: each is imported when a conversion needs it
(`Framework.module`).
"""

from __future__ import annotations

from typing import Any

from tensorbridge._frameworks.array_api_strict import ArrayApiStrictFramework
from tensorbridge._frameworks.base import Framework
from tensorbridge._frameworks.cupy import CupyFramework
from tensorbridge._frameworks.jax import JaxFramework
from tensorbridge._frameworks.mlx import MlxFramework
from tensorbridge._frameworks.numpy import NumpyFramework
from tensorbridge._frameworks.paddle import PaddleFramework
from tensorbridge._frameworks.pyarrow import PyarrowFramework
from tensorbridge._frameworks.tensorbridge import TensorbridgeFramework
from tensorbridge._frameworks.tensorflow import TensorflowFramework
from tensorbridge._frameworks.torch import TorchFramework
from tensorbridge._frameworks.tvm_ffi import TvmFfiFramework

__all__ = [
    "ALIASES",
    "DISTRIBUTIONS",
    "FRAMEWORKS",
    "MODULE_NAMES",
    "ORDER",
    "Framework",
    "framework_of",
    "import_names",
    "known_targets",
    "names",
    "resolve_target",
    "version",
]

#: Every bridge target, by name, in import order (paddle before tensorflow).
FRAMEWORKS: dict[str, type[Framework]] = {
    f.name: f
    for f in (
        NumpyFramework,
        TorchFramework,
        JaxFramework,
        PaddleFramework,
        TensorflowFramework,
        MlxFramework,
        CupyFramework,
        PyarrowFramework,
        ArrayApiStrictFramework,
        TvmFfiFramework,
        TensorbridgeFramework,
    )
}
#: The names of `FRAMEWORKS`, in import order.
ORDER: tuple[str, ...] = tuple(FRAMEWORKS)
#: Other names `convert` accepts: alias -> name ("tf" -> "tensorflow").
ALIASES: dict[str, str] = {a: f.name for f in FRAMEWORKS.values() for a in f.aliases}
#: name -> the module imported for it ("mlx" -> "mlx.core").
MODULE_NAMES: dict[str, str] = {n: f.module_name or n for n, f in FRAMEWORKS.items()}
#: name -> the distribution that gives its version (absent: the module's __version__).
DISTRIBUTIONS: dict[str, str] = {
    n: f.distribution for n, f in FRAMEWORKS.items() if f.distribution is not None
}


def names(*, gpu: bool = True) -> list[str]:
    """The framework names in import order; without those that need a GPU
    (cupy) when ``gpu=False``."""
    return [n for n, f in FRAMEWORKS.items() if gpu or not f.needs_gpu]


def import_names() -> dict[str, str]:
    """The names users give the frameworks' modules in code (``np``, ``jnp``,
    ``tf``...), each with the module it names."""
    return {k: v for f in FRAMEWORKS.values() for k, v in f.import_names}


def version(name: str) -> str:
    """The installed version of a framework (importing it when its distribution
    is unknown or not installed under that name)."""
    import importlib.metadata  # ~40 ms: only the command line asks for versions

    distribution = DISTRIBUTIONS.get(name)
    if distribution is not None:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            pass
    return str(getattr(FRAMEWORKS[name].module(), "__version__", "?"))


def known_targets() -> str:
    """The target names, each with its aliases: "numpy (np), torch (pytorch), ..."."""
    return ", ".join(
        f"{name} ({', '.join(f.aliases)})" if f.aliases else name for name, f in FRAMEWORKS.items()
    )


def resolve_target(to: Any) -> type[Framework]:
    """The Framework for a name (``"torch"``) or a module (``torch``, ``jax.numpy``)."""
    if isinstance(to, str):
        name = ALIASES.get(to, to)
        if name in FRAMEWORKS:
            return FRAMEWORKS[name]
        raise ValueError(f"unknown target framework {to!r}; expected one of {known_targets()}")
    module_name = getattr(to, "__name__", None)
    if isinstance(module_name, str):
        root = module_name.split(".")[0]
        for framework in FRAMEWORKS.values():
            if root in framework.modules:
                return framework
    raise TypeError(
        f"convert(): the target must be a framework name or module; got {type(to).__name__}"
    )


def framework_of(obj: Any) -> type[Framework] | None:
    """The framework an object belongs to, judged by its type's module (no imports)."""
    root = (getattr(type(obj), "__module__", "") or "").split(".")[0]
    for framework in FRAMEWORKS.values():
        if root in framework.modules:
            return framework
    return None
