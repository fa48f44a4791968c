# SPDX-License-Identifier: Apache-2.0
"""tensorbridge: zero-copy tensor exchange between array frameworks over DLPack.

>>> import numpy as np, tensorbridge as tb
>>> t = tb.from_dlpack(np.arange(6, dtype=np.int32).reshape(2, 3))
>>> t.shape, t.strides, t.dtype
((2, 3), (3, 1), tensorbridge.int32)

Importing tensorbridge imports no array framework, not even NumPy.
"""

from tensorbridge import _core, _creation
from tensorbridge._core import DLPACK_VERSION, Tensor, asarray, convert, from_dlpack, to_dlpack
from tensorbridge._creation import arange, empty, full, ones, zeros
from tensorbridge._devices import Device, DLDeviceType
from tensorbridge._dtypes import DTYPES as _DTYPES
from tensorbridge._dtypes import DType, get_default_dtype, set_default_dtype
from tensorbridge._errors import (
    DeviceError,
    ImportOrderError,
    NotDLPackError,
    ProducerError,
    TensorbridgeError,
)
from tensorbridge._version import __version__


def _load_convert():
    from tensorbridge._convert import convert_general

    return convert_general


def _load_numpy_ops():
    from tensorbridge import _numpy

    return _numpy


# The compiled core never imports upward: it calls the Python layer through these.
_core.register_fallbacks(
    asarray=_creation.asarray, load_convert=_load_convert, load_numpy_ops=_load_numpy_ops
)


# The public functions are documented as tensorbridge's (help(), pickling, Sphinx),
# and the compiled asarray front door carries the Python layer's full docstring.
_core.asarray.__doc__ = _creation.asarray.__doc__
for _function in (asarray, convert, from_dlpack, to_dlpack, arange, empty, full, ones, zeros):
    _function.__module__ = __name__
for _function in (get_default_dtype, set_default_dtype):
    _function.__module__ = __name__
del _function
# So are the public classes defined in Python (Tensor is the compiled core's type).
for _class in (
    Device,
    DeviceError,
    DLDeviceType,
    DType,
    ImportOrderError,
    NotDLPackError,
    ProducerError,
):
    _class.__module__ = __name__
TensorbridgeError.__module__ = __name__
del _class


def __getattr__(name: str):
    # explain and Plan need the planner (dataclasses, the framework table), which
    # would double the import time; they are loaded on first use, as is TargetName
    # (typing's Literal costs import time too).
    if name in ("explain", "Plan"):
        from tensorbridge import _convert

        for public in (_convert.explain, _convert.Plan):
            public.__module__ = __name__
        return getattr(_convert, name)
    if name == "TargetName":
        from tensorbridge._targets import TargetName

        return TargetName
    raise AttributeError(f"module 'tensorbridge' has no attribute {name!r}")


# One module attribute per DType: tensorbridge.float32, tensorbridge.bool, ...
globals().update(_DTYPES)

__all__ = [
    "DLDeviceType",
    "DLPACK_VERSION",
    "DType",
    "DeviceError",
    "ImportOrderError",
    "NotDLPackError",
    "Plan",
    "ProducerError",
    "TargetName",
    "TensorbridgeError",
    "Device",
    "Tensor",
    "__version__",
    "arange",
    "asarray",
    "convert",
    "empty",
    "explain",
    "from_dlpack",
    "full",
    "get_default_dtype",
    "ones",
    "set_default_dtype",
    "to_dlpack",
    "zeros",
    *_DTYPES,
]
