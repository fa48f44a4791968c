# SPDX-License-Identifier: Apache-2.0
"""Type stubs for the compiled core (`_core.pyx` and the `.pxi` files it includes).

Every name the Python modules and the public API use is declared here; there is no
module-level ``__getattr__``, so a misspelt name is a type error. The names below the
public API are the package-internal interface of the core (docs/design.md): the Python
layer calls them, users should not. Private test helpers (``_fast_convert``,
``_ndarray_struct_state``, ...) are left out on purpose.

stubtest (run by .ci/lint) checks these declarations against the compiled module;
stubtest-allowlist.txt lists the few runtime names that cannot be typed, with reasons.
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
from types import ModuleType
from typing import Any, Final, Literal, SupportsIndex, TypeAlias, final, overload

# convert's return types: the frameworks are optional, so a missing one (or one
# without type information) is Any, never an error in a user's type check.
import array_api_strict._array_object  # type: ignore[import-not-found, import-untyped, unused-ignore]
import cupy  # type: ignore[import-not-found, import-untyped, unused-ignore]
import jax  # type: ignore[import-not-found, import-untyped, unused-ignore]
import mlx.core  # type: ignore[import-not-found, import-untyped, unused-ignore]
import paddle  # type: ignore[import-not-found, import-untyped, unused-ignore]
import pyarrow  # type: ignore[import-not-found, import-untyped, unused-ignore]
import tensorflow  # type: ignore[import-not-found, import-untyped, unused-ignore]
import torch  # type: ignore[import-not-found, import-untyped, unused-ignore]
import tvm_ffi  # type: ignore[import-not-found, import-untyped, unused-ignore]
from numpy.typing import NDArray
from typing_extensions import CapsuleType

from tensorbridge._devices import Device, DLDeviceType
from tensorbridge._dtypes import DType
from tensorbridge._targets import TargetName

# What `dtype=` accepts (checked at run time by `_dtypes.as_dtype`): a DType, its name,
# or a NumPy/ml_dtypes/framework dtype.
_DTypeLike: TypeAlias = object
# What `device=` accepts (checked at run time by `_devices.as_device`): a Device,
# "cpu" / "cuda:1", a (DLDeviceType, index) pair, or a framework's device object.
_DeviceLike: TypeAlias = object
# A framework for `convert`: its name ("torch", "numpy", ...), an alias of one, or its
# module (tensorbridge._targets.TargetName: a typo is a type error).
_Target: TypeAlias = TargetName | ModuleType

# -- constants ---------------------------------------------------------------

#: The DLPack version tensorbridge implements, as (major, minor).
DLPACK_VERSION: Final[tuple[int, int]]
#: The ``flags`` bits of DLManagedTensorVersioned.
FLAG_READ_ONLY: Final = 1
FLAG_IS_COPIED: Final = 2
FLAG_SUBBYTE_PADDED: Final = 4
#: The largest ndim an import accepts (NumPy's limit).
MAX_NDIM: Final = 64
#: Alignment of every buffer tensorbridge allocates.
ALIGNMENT: Final = 64

#: Cython's doctest table: the docstrings with examples of the module's functions.
__test__: dict[str, str]

# -- the Tensor ----------------------------------------------------------------

@final
class Tensor:
    """A strided, typed view of memory shared through DLPack (not constructible)."""

    # Always raises TypeError: use tensorbridge.from_dlpack or tensorbridge.asarray.
    def __init__(self, *args: object, **kwargs: object) -> None: ...

    # metadata
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def dtype(self) -> DType: ...
    @property
    def device(self) -> Device: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def readonly(self) -> bool: ...
    def data_ptr(self) -> int: ...
    def is_contiguous(self) -> bool: ...

    # DLPack producer
    __dlpack_c_exchange_api__: CapsuleType
    __c_dlpack_exchange_api__: int
    def __dlpack_device__(self) -> tuple[DLDeviceType, int]: ...
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...

    # Python protocols
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Tensor]: ...
    def __bool__(self) -> bool: ...
    def __int__(self) -> int: ...
    def __float__(self) -> float: ...
    def __complex__(self) -> complex: ...
    def __index__(self) -> int: ...
    def __getitem__(self, key: object, /) -> Tensor: ...
    def __setitem__(self, key: object, value: object, /) -> None: ...
    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]: ...

    # shape manipulation (views)
    @property
    def T(self) -> Tensor: ...
    @overload
    def permute(self, dims: Sequence[SupportsIndex], /) -> Tensor: ...
    @overload
    def permute(self, *dims: SupportsIndex) -> Tensor: ...
    @overload
    def transpose(self) -> Tensor: ...
    @overload
    def transpose(self, dims: Sequence[SupportsIndex], /) -> Tensor: ...
    @overload
    def transpose(self, dim0: SupportsIndex, dim1: SupportsIndex, /) -> Tensor: ...
    @overload
    def reshape(self, shape: Sequence[SupportsIndex], /) -> Tensor: ...
    @overload
    def reshape(self, *shape: SupportsIndex) -> Tensor: ...
    def flatten(self) -> Tensor: ...
    def view(self, dtype: _DTypeLike) -> Tensor: ...

    # copies and conversions
    def copy(self) -> Tensor: ...
    def contiguous(self) -> Tensor: ...
    def astype(self, dtype: _DTypeLike, *, copy: bool = True) -> Tensor: ...
    def to(
        self,
        *args: _DTypeLike | _DeviceLike,
        dtype: _DTypeLike | None = None,
        device: _DeviceLike | None = None,
        copy: bool = False,
    ) -> Tensor: ...
    def numpy(self) -> NDArray[Any]: ...
    def __array__(
        self, dtype: _DTypeLike | None = None, copy: bool | None = None
    ) -> NDArray[Any]: ...
    # The element types depend on the dtype (bool, int, float or complex), as in NumPy.
    def tolist(self) -> Any: ...
    def item(self) -> Any: ...

    # NumPy's array interface and the buffer protocol (CPU-accessible memory only)
    @property
    def __array_interface__(self) -> dict[str, Any]: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

# -- public functions ------------------------------------------------------------

def from_dlpack(
    x: object,
    /,
    *,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    stream: int | None = None,
) -> Tensor: ...
def to_dlpack(tensor: object, /) -> CapsuleType: ...
def asarray(
    obj: object,
    /,
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
) -> Tensor: ...
@overload
def convert(
    obj: object,
    /,
    to: Literal["numpy", "np"],
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> NDArray[Any]: ...
@overload
def convert(
    obj: object,
    /,
    to: Literal["torch", "pytorch"],
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> torch.Tensor: ...
@overload
def convert(
    obj: object,
    /,
    to: Literal["jax", "jnp", "jax.numpy"],
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> jax.Array: ...
@overload
def convert(
    obj: object,
    /,
    to: Literal["paddle"],
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> paddle.Tensor: ...
@overload
def convert(
    obj: object,
    /,
    to: Literal["tensorflow", "tf"],
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> tensorflow.Tensor: ...
@overload
def convert(
    obj: object,
    /,
    to: Literal["mlx", "mx", "mlx.core"],
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> mlx.core.array: ...
@overload
def convert(
    obj: object,
    /,
    to: Literal["cupy"],
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> cupy.ndarray: ...
@overload
def convert(
    obj: object,
    /,
    to: Literal["pyarrow", "pa"],
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> pyarrow.Array | pyarrow.Tensor: ...
@overload
def convert(
    obj: object,
    /,
    to: Literal["array_api_strict", "xp"],
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> array_api_strict._array_object.Array: ...
@overload
def convert(
    obj: object,
    /,
    to: Literal["tvm_ffi"],
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> tvm_ffi.Tensor: ...
@overload
def convert(
    obj: object,
    /,
    to: Literal["tensorbridge", "tb"],
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> Tensor: ...
@overload
def convert(
    obj: object,
    /,
    to: ModuleType,
    *,
    dtype: _DTypeLike | None = None,
    device: _DeviceLike | None = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: Literal["share", "copy"] = "share",
) -> Any: ...

class CopyNeeded(BufferError, ValueError):
    """copy=False was asked, but only a copy would do."""

# -- package-internal interface (used by the Python layer) -------------------------

# the Python layer's entry points, registered by tensorbridge/__init__.py
def register_fallbacks(
    *,
    asarray: Callable[..., Tensor],
    load_convert: Callable[[], Callable[..., Any]],
    load_numpy_ops: Callable[[], ModuleType],
) -> None: ...

# allocation
def empty_tensor(
    shape: Sequence[int], dtype: DType, device: _DeviceLike | None = None
) -> Tensor: ...
def zero_fill(t: Tensor) -> Tensor: ...

# views with other flags or layout
def set_readonly(t: Tensor, readonly: bool) -> Tensor: ...
def fold_offset(t: Tensor) -> Tensor: ...
def is_packed(t: Tensor) -> bool: ...
def is_host(t: Tensor) -> bool: ...
def meta_repr(t: Tensor) -> str: ...
def export_release_depth() -> int: ...

# host inputs: the buffer protocol and nested sequences
def has_buffer(obj: object) -> bool: ...
def import_buffer(obj: object, raw_dtype: DType | None) -> Tensor: ...
def as_bytes_view(t: Tensor) -> Tensor: ...
def import_arrow_array(
    schema_capsule: object, array_capsule: object
) -> tuple[Tensor, bool] | None: ...
def import_arrow_stream(stream_capsule: object, allow_copy: bool) -> tuple[Tensor, bool] | None: ...
def reinterpret(raw: Tensor, dtype: DType, shape: tuple[int, ...], packed: bool) -> Tensor: ...
def from_sequence(obj: object, dtype: DType | None) -> Tensor | None: ...
def set_default_float(dtype: DType) -> None: ...
def use_huge_pages(advise: bool) -> bool: ...
def use_portable_casts(portable: bool) -> bool: ...
def use_numpy_api(use: bool) -> bool: ...
def f16_cast_kind() -> str: ...

# PyTorch's bit views
def torch_bits_read_directly(tp: type) -> bool | None: ...
def _torch_bit_readers(
    what: Literal["off", "find"], neg_symbol: bytes = ..., conj_symbol: bytes = ...
) -> bool: ...

# capsules
def is_capsule(obj: object) -> bool: ...
def inspect_capsule(capsule: CapsuleType) -> dict[str, Any]: ...

# the C exchange API and convert's fast path
def exchange_api_info(obj: object) -> tuple[tuple[int, int], bool] | None: ...

@final
class FastTarget:
    """What a target framework's importer takes as it is, and how to make its object."""

    def __init__(
        self,
        *,
        target_type: type | None,
        dtypes: Iterable[DType],
        negative_strides: bool,
        noncompact: bool,
        permuted: bool,
        offset_ok: bool,
        readonly_ok: bool,
        alignment: int,
        maker: Callable[[Tensor], object]
        | tuple[Callable[[Tensor], object], Callable[[Tensor], object]]
        | Literal["identity", "ndarray"]
        | None = None,
        importer: Callable[[Any], object] | None = None,
        carrier_importer: Callable[[Any], object] | None = None,
        capsule_importer: Callable[[Any], object] | None = None,
        guard64: Callable[[], bool] | None = None,
    ) -> None: ...
    def __call__(self, t: Tensor) -> Any: ...
    def remember(self, tp: type, mode: int) -> None: ...
    def route_of(self, obj: object) -> int: ...
    def verdict(self, t: Tensor) -> int: ...
    def capsule_verdicts(self, capsule: object) -> tuple[bool, int | None]: ...
    def asks_device_first(self, obj: object) -> bool: ...
    def uncarried(self, obj: object) -> bool: ...

def set_fast_target(to: str | ModuleType, target: FastTarget) -> None: ...
def clear_routes() -> None: ...
def _route_constants() -> dict[str, int]: ...
def _fast_convert(target: FastTarget, obj: object) -> Any: ...
