# SPDX-License-Identifier: Apache-2.0
"""``tensorbridge inspect EXPR``: what an expression's DLPack export looks like.

EXPR is evaluated with modules importable by the names users give them in code
(`NAMES`: the frameworks' np, torch, jax, jnp, paddle, tf, mx, pa, xp, tb...; the
data libraries' pd, pl, da, xr) and by their own names (any installed module, and
those of the working directory: ``mylib.make()``), each imported only when EXPR
names it, with its start-up output kept quiet; its capsules are read without being
consumed."""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import sys
import warnings
from collections.abc import Callable
from typing import Any

from tensorbridge._cli import interrupts
from tensorbridge._cli.probes import probe
from tensorbridge._cli.progress import Progress
from tensorbridge._cli.quiet import native_stderr_dropped, quiet
from tensorbridge._core import inspect_capsule, is_capsule
from tensorbridge._devices import device_name
from tensorbridge._dtypes import dtype_from_code
from tensorbridge._frameworks import FRAMEWORKS, import_names
from tensorbridge._known_types import aborting_export_type, check_import_order, export_refusal

__all__ = ["NAMES", "LazyNames", "describe_capsule", "owner", "run"]

#: Name in the expression -> the module it names: the frameworks' usual names (the
#: registry's), and those of the libraries users make arrays and frames with.
NAMES: dict[str, str] = {
    **import_names(),
    "pd": "pandas",
    "pl": "polars",
    "da": "dask.array",
    "xr": "xarray",
    "cp": "cupy",
}

_FLAGS = ((1, "READ_ONLY"), (2, "IS_COPIED"), (4, "IS_SUBBYTE_TYPE_PADDED"))


def owner(module_name: str) -> str | None:
    """The framework (of the registry) a module belongs to, or None."""
    top = module_name.partition(".")[0]
    return next((f.name for f in FRAMEWORKS.values() if top in f.modules), None)


def _module_for(key: str) -> str | None:
    """The module a free name of EXPR stands for: a usual name (`NAMES`), or an
    installed module of that name; None for anything else (a builtin, a typo)."""
    if key in NAMES:
        return NAMES[key]
    if not key.isidentifier() or hasattr(builtins, key):
        return None
    try:
        return key if importlib.util.find_spec(key) is not None else None
    except (ImportError, ValueError):
        return None


class LazyNames(dict[str, Any]):
    """Expression namespace importing modules by their usual names on first use
    (quietly; `progress` is told "importing tensorflow…" first)."""

    progress: Callable[[str], None] | None = None

    def __missing__(self, key: str) -> Any:
        module_name = _module_for(key)
        if module_name is None:
            raise KeyError(key)
        check_import_order(module_name)
        if self.progress is not None:
            self.progress(f"importing {module_name}…")
        with quiet():
            module = importlib.import_module(module_name)
            interrupts.check()  # (an interrupt the import swallowed)
            framework = owner(module_name)
            if framework is not None:
                probe(framework).prepare()  # JAX: 64-bit types on
        self[key] = module
        return module


def describe_capsule(info: dict[str, Any]) -> list[str]:
    """The lines describing a capsule read by `_core.inspect_capsule`."""
    lines = [f"  capsule:      {info['name']}"]
    if info.get("version"):
        lines.append(f"  version:      {info['version'][0]}.{info['version'][1]}")
    if "ndim" not in info:
        return lines
    code, bits, lanes = info["dtype"]
    dtype = dtype_from_code(code, bits)
    name = dtype.name if dtype and lanes == 1 else "unknown"
    flags = info.get("flags")
    flag_names = [n for bit, n in _FLAGS if flags and flags & bit]
    device_type, device_id = info["device"]
    aligned = info["data"] and not (info["data"] + info["byte_offset"]) % 64
    lines += [
        f"  device:       {device_name(device_type)}:{device_id} ({device_type}, {device_id})",
        f"  dtype:        {name} (code {code}, bits {bits}, lanes {lanes})",
        f"  shape:        {info['shape']}",
        f"  strides:      {info['strides'] if info['strides'] is not None else 'NULL'}"
        + ("  (elements)" if info["strides"] else ""),
        f"  byte_offset:  {info['byte_offset']}",
        f"  data:         0x{info['data']:x}" + (" (64-byte aligned)" if aligned else ""),
    ]
    if flags is not None:
        lines.append(f"  flags:        {flags} {' '.join(flag_names) or '(none)'}")
    lines.append(f"  deleter:      {'set' if info['deleter'] else 'NULL'}")
    return lines


def run(expr: str) -> int:
    """Evaluate expr and print its DLPack export (0; 1 without one; 2 on errors).
    What frameworks write to the process's stderr meanwhile is dropped (`quiet`)."""
    progress = Progress()
    try:
        with native_stderr_dropped():
            return _run(expr, progress)
    finally:
        progress.clear()


def _run(expr: str, progress: Progress) -> int:
    # The names are the globals, so that lambdas and comprehensions of EXPR see them.
    namespace = LazyNames(__builtins__=__builtins__)
    namespace.progress = progress
    try:
        obj = eval(expr, namespace)  # the user's own code
    except Exception as exc:
        interrupts.check()  # an interrupt turned into another error is an interrupt
        progress.clear()
        print(
            f"tensorbridge inspect: evaluating {expr!r} failed: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 2
    progress.clear()
    tp = type(obj)
    print(f"{expr}")
    print(f"  type:         {_type_name(tp)}")
    if is_capsule(obj):
        lines, ok = _capsule_lines(obj)
        for line in lines:
            print(line)
        return 0 if ok else 1
    if not hasattr(tp, "__dlpack__"):
        print("  no DLPack export (__dlpack__ is missing)")
        return 1
    try:
        print(f"  __dlpack_device__(): {obj.__dlpack_device__()}")
    except Exception as exc:
        interrupts.check()
        print(f"  __dlpack_device__(): fails: {type(exc).__name__}: {exc}")
    apis = [
        name
        for name in ("__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__")
        if hasattr(tp, name)
    ]
    print(f"  C exchange API: {', '.join(apis) if apis else 'none'}")
    refusal = export_refusal(obj) if aborting_export_type(tp) else None
    if refusal is not None:
        print(f"  __dlpack__(): not asked: {refusal}")
        return 1
    status = 0
    for label, kwargs in (("max_version=(1, 3)", {"max_version": (1, 3)}), ("legacy ()", {})):
        print(f"  __dlpack__({label}):")
        try:
            with warnings.catch_warnings():
                # Asked for on purpose: PyArrow's deprecation of the legacy call is
                # not news here.
                warnings.simplefilter("ignore", DeprecationWarning)
                capsule = obj.__dlpack__(**kwargs)
        except Exception as exc:
            interrupts.check()
            print(
                f"    fails: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
            continue
        if not is_capsule(capsule):
            print(f"    gives {_type_name(type(capsule))}, not a DLPack capsule")
            status = 1
            continue
        lines, ok = _capsule_lines(capsule)
        for line in lines:
            print("  " + line)
        status = status if ok else 1
        del capsule  # unconsumed: its destructor gives the tensor back to the producer
    return status


_DLPACK_NAMES = ("dltensor", "dltensor_versioned", "used_dltensor", "used_dltensor_versioned")


def _capsule_lines(capsule: Any) -> tuple[list[str], bool]:
    """describe_capsule's lines, and whether it is a DLPack capsule at all."""
    try:
        info = inspect_capsule(capsule)
    except (TypeError, ValueError) as exc:  # (no name)
        return [f"  capsule:      not a DLPack capsule ({exc})"], False
    lines = describe_capsule(info)
    if info["name"] not in _DLPACK_NAMES:
        lines[0] += "  (not a DLPack capsule's name: no consumer takes it)"
        return lines, False
    return lines, True


def _type_name(tp: type) -> str:
    """module.qualname, or the qualname alone for a class without a module (one made
    by type() in EXPR, whose namespace has no __name__)."""
    module = getattr(tp, "__module__", None)
    qualname = getattr(tp, "__qualname__", None) or getattr(tp, "__name__", "?")
    return f"{module}.{qualname}" if isinstance(module, str) else str(qualname)
