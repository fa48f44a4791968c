# SPDX-License-Identifier: Apache-2.0
"""``tensorbridge inspect EXPR``: what an expression's DLPack export looks like.

EXPR is evaluated with the installed frameworks importable by their usual names
(the registry's `import_names`: np, torch, jax, jnp, paddle, tf, mx, pa, tb...),
each imported on first use; its capsules are read without being consumed."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from tensorbridge._cli.probes import probe
from tensorbridge._core import inspect_capsule, is_capsule
from tensorbridge._devices import device_name
from tensorbridge._dtypes import dtype_from_code
from tensorbridge._frameworks import FRAMEWORKS, import_names
from tensorbridge._known_types import check_import_order

__all__ = ["NAMES", "LazyNames", "describe_capsule", "run"]

#: Name in the expression -> the module it names.
NAMES: dict[str, str] = {**import_names(), "ml_dtypes": "ml_dtypes"}
#: Name in the expression -> the framework whose module it names.
_OWNERS: dict[str, str] = {k: f.name for f in FRAMEWORKS.values() for k, _ in f.import_names}

_FLAGS = ((1, "READ_ONLY"), (2, "IS_COPIED"), (4, "IS_SUBBYTE_TYPE_PADDED"))


class LazyNames(dict[str, Any]):
    """Expression namespace importing frameworks by their usual names on first use."""

    def __missing__(self, key: str) -> Any:
        if key in NAMES:
            check_import_order(NAMES[key])
            module = importlib.import_module(NAMES[key])
            if key in _OWNERS:
                probe(_OWNERS[key]).prepare()  # JAX: 64-bit types on
            self[key] = module
            return module
        raise KeyError(key)


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
    """Evaluate expr and print its DLPack export (0; 1 without one; 2 on errors)."""
    namespace = LazyNames()
    try:
        obj = eval(expr, {"__builtins__": __builtins__}, namespace)  # the user's own code
    except Exception as exc:
        print(
            f"tensorbridge inspect: evaluating {expr!r} failed: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 2
    tp = type(obj)
    print(f"{expr}")
    print(f"  type:         {tp.__module__}.{tp.__qualname__}")
    if is_capsule(obj):
        for line in describe_capsule(inspect_capsule(obj)):
            print(line)
        return 0
    if not hasattr(tp, "__dlpack__"):
        print("  no DLPack export (__dlpack__ is missing)")
        return 1
    try:
        print(f"  __dlpack_device__(): {obj.__dlpack_device__()}")
    except Exception as exc:
        print(f"  __dlpack_device__(): fails: {type(exc).__name__}: {exc}")
    apis = [
        name
        for name in ("__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__")
        if hasattr(tp, name)
    ]
    print(f"  C exchange API: {', '.join(apis) if apis else 'none'}")
    for label, kwargs in (("max_version=(1, 3)", {"max_version": (1, 3)}), ("legacy ()", {})):
        print(f"  __dlpack__({label}):")
        try:
            capsule = obj.__dlpack__(**kwargs)
        except Exception as exc:
            print(
                f"    fails: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
            continue
        for line in describe_capsule(inspect_capsule(capsule)):
            print("  " + line)
        del capsule  # unconsumed: its destructor gives the tensor back to the producer
    return 0
