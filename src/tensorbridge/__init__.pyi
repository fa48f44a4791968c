# SPDX-License-Identifier: Apache-2.0
"""Type stubs for the package's front module.

`__init__.py` sets one attribute per DType with ``globals().update`` and loads
`explain` and `Plan` lazily through a module ``__getattr__``; neither is visible to a
type checker, so this stub declares the public names explicitly (and no
``__getattr__``: a misspelt attribute is a type error). stubtest checks it against the
runtime module, so a name added to `__init__.py` or to `_dtypes.DTYPES` and missing
here fails the lint step.
"""

from tensorbridge._convert import Plan, explain
from tensorbridge._core import DLPACK_VERSION, Tensor, asarray, convert, from_dlpack, to_dlpack
from tensorbridge._creation import arange, empty, full, ones, zeros
from tensorbridge._devices import Device, DLDeviceType
from tensorbridge._dtypes import DType, get_default_dtype, set_default_dtype
from tensorbridge._errors import (
    DeviceError,
    ImportOrderError,
    NotDLPackError,
    ProducerError,
    TensorbridgeError,
)
from tensorbridge._targets import TargetName

__version__: str

# One attribute per DType (tensorbridge._dtypes.DTYPES, in its order).
bool: DType
int8: DType
int16: DType
int32: DType
int64: DType
uint8: DType
uint16: DType
uint32: DType
uint64: DType
float16: DType
float32: DType
float64: DType
bfloat16: DType
complex64: DType
complex128: DType
float8_e3m4: DType
float8_e4m3: DType
float8_e4m3b11fnuz: DType
float8_e4m3fn: DType
float8_e4m3fnuz: DType
float8_e5m2: DType
float8_e5m2fnuz: DType
float8_e8m0fnu: DType
float6_e2m3fn: DType
float6_e3m2fn: DType
float4_e2m1fn: DType

__all__ = [
    "DLPACK_VERSION",
    "DLDeviceType",
    "DType",
    "Device",
    "DeviceError",
    "ImportOrderError",
    "NotDLPackError",
    "Plan",
    "ProducerError",
    "TargetName",
    "Tensor",
    "TensorbridgeError",
    "__version__",
    "arange",
    "asarray",
    "bfloat16",
    "bool",
    "complex64",
    "complex128",
    "convert",
    "empty",
    "explain",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float16",
    "float32",
    "float64",
    "from_dlpack",
    "full",
    "get_default_dtype",
    "int8",
    "int16",
    "int32",
    "int64",
    "ones",
    "set_default_dtype",
    "to_dlpack",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "zeros",
]
