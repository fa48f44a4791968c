# SPDX-License-Identifier: Apache-2.0
"""asarray and the constructors: turning whatever a user holds into a Tensor."""

from __future__ import annotations

import sys
from _collections_abc import Sequence  # loaded at startup; collections.abc is not

from tensorbridge import _core
from tensorbridge._core import CopyNeeded, Tensor, from_dlpack
from tensorbridge._core import asarray as _asarray
from tensorbridge._devices import HOST_ACCESSIBLE, Device, as_device
from tensorbridge._dtypes import (
    DTYPES,
    DType,
    as_dtype,
    default_complex,
    get_default_dtype,
)
from tensorbridge._errors import NO_MOVES, DeviceError
from tensorbridge._known_types import loaded

TYPE_CHECKING = False  # typing costs ~10 ms of import time; annotations are strings
if TYPE_CHECKING:
    from typing import Any

__all__ = ["arange", "asarray", "empty", "full", "ones", "zeros"]

# The public tensorbridge.asarray is the compiled front door in _core, which
# calls asarray below for everything but its fast cases.

_CPU = Device("cpu")


_torch_quirks_module: Any = None


def _torch_quirks() -> Any:
    """tensorbridge._frameworks.torch once torch is loaded (no torch tensor can exist
    before), else None; imported once, as it loads the framework registry."""
    global _torch_quirks_module
    if _torch_quirks_module is None and "torch" in sys.modules:
        from tensorbridge._frameworks import torch as module

        _torch_quirks_module = module
    return _torch_quirks_module


def _numpy_ops() -> Any:
    from tensorbridge import _numpy

    return _numpy


# --------------------------------------------------------------------------
# asarray
# --------------------------------------------------------------------------


def _is_byte_container(obj: Any) -> bool:
    """Whether obj's buffer is raw bytes with no element type of their own: bytes,
    bytearray, mmap, io.BytesIO (and subclasses), and memoryviews of those (not
    array.array('B'), whose format says uint8)."""
    while type(obj) is memoryview:
        base = getattr(obj, "obj", None)  # (None: a view of C memory, no exporter)
        if base is None:
            return True
        obj = base
    if isinstance(obj, (bytes, bytearray)):
        return True
    mmap = sys.modules.get("mmap")
    io = sys.modules.get("io")
    return (mmap is not None and isinstance(obj, mmap.mmap)) or (
        io is not None and isinstance(obj, io.BytesIO)  # (its getbuffer() views)
    )


def asarray(
    obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None
) -> Tensor:
    """Turn ``obj`` into a Tensor, sharing its memory whenever possible.

    Accepted, in this order: a Tensor; an object with ``__dlpack__``; a DLPack
    capsule (consumed); a buffer-protocol object (the bytes of ``bytes``,
    ``bytearray``, ``mmap``, ``io.BytesIO`` and their memoryviews are reinterpreted
    as ``dtype``, by default the default float dtype; typed buffers such as
    ``array.array`` keep their type and shape); an object with the Arrow PyCapsule
    interface (``__arrow_c_array__``, ``__arrow_c_stream__``: PyArrow chunked arrays
    and table columns, polars Series, nanoarrow...), shared and read-only, with a
    stream of several chunks joined (a copy) and bit-packed booleans unpacked (a
    copy); an object with NumPy's ``__array__`` (pandas Series and DataFrames,
    polars and PyArrow tables as 2-d arrays, xarray...); a Python or NumPy scalar; a
    (nested) sequence of those (or a ``range``), of 0-d tensors or of DLPack
    objects. NumPy arrays in the other byte order are copied to native order; data
    DLPack cannot hold (strings, objects, datetimes, nulls) is refused with what to
    do.

    Parameters
    ----------
    obj : object
        What to read: any of the inputs above.
    dtype : dtype-like, optional
        The result's dtype; a different dtype than the source's means a copy.
    device : device-like, optional
        The result's device; data elsewhere is moved by its producer if it can.
    copy : bool, optional
        ``True``: always new memory. ``False``: never copy (ValueError when a copy
        would be needed). ``None``: copy only when needed.

    Returns
    -------
    Tensor
        Sharing ``obj``'s memory where it can (``obj`` itself when it is a Tensor and
        nothing is asked of it), else in new memory.

    Raises
    ------
    ValueError
        ``copy=False`` but a copy is needed; a ragged sequence; a byte buffer whose
        length is not a whole number of elements.
    TypeError
        An object of a kind asarray cannot read.
    BufferError
        Data that cannot be moved to ``device``.
    OverflowError
        A Python int that does not fit int64 (with no dtype given).
    """
    if copy is not None and copy is not True and copy is not False:
        raise TypeError(f"asarray(): copy must be True, False or None; got {copy!r}")
    target_dtype = None if dtype is None else as_dtype(dtype)
    target_device = None if device is None else as_device(device)

    fresh = False  # True when `tensor` is new memory nobody else sees
    if type(obj) is not Tensor and not hasattr(type(obj), "__dlpack__"):
        if is_arrow_source(obj):
            # The Arrow PyCapsule interface (PyArrow, polars, nanoarrow...): shared.
            arrow = from_arrow(obj, copy)
            if arrow is not None:
                obj, why = arrow
                fresh = why is not None
        if type(obj) is not Tensor:
            array_method = getattr(type(obj), "__array__", None)
            if array_method is not None and not _core.has_buffer(obj):
                # NumPy's protocol (pandas, polars DataFrames, xarray...): its array.
                obj = _from_array_protocol(obj, copy)
            elif is_arrow_source(obj):
                raise TypeError(
                    f"asarray(): {_type_name(obj)} is a table (its Arrow form is a struct "
                    "of columns); take one column, or a 2-d array of it (.to_numpy())"
                )
    if _is_plain_ndarray(obj):
        obj, fresh = _numpy_ready(obj, copy)
    if type(obj) is Tensor:
        tensor = obj
    elif _is_ml_dtypes_array(obj):
        tensor = _from_ml_dtypes_array(obj)
    elif hasattr(type(obj), "__dlpack__") or _core.is_capsule(obj):
        tensor, copied = _from_dlpack_source(obj, target_device, copy)
        fresh = fresh or copied
    elif isinstance(obj, (bool, int, float, complex)) or _is_numpy_scalar(obj):
        # (NumPy scalars also export the buffer protocol, read-only: they are
        # values, so they become new tensors like Python scalars.)
        _refuse_copy_false(copy, f"a {type(obj).__name__} scalar is always copied")
        tensor, fresh = _from_scalar(obj, target_dtype), True
    elif _core.has_buffer(obj):
        if _is_byte_container(obj):
            raw_dtype = target_dtype if target_dtype is not None else get_default_dtype()
        else:
            raw_dtype = None  # a typed buffer (array.array('B') is uint8)
        tensor = _core.import_buffer(obj, raw_dtype)
    elif isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
        _refuse_copy_false(copy, f"a Python {type(obj).__name__} is always copied")
        if type(obj) is not list and type(obj) is not tuple:
            obj = list(obj)  # range, and other sequences: their items, as NumPy reads them
        tensor, fresh = from_sequence(obj, target_dtype), True
    else:
        raise TypeError(
            f"asarray(): cannot convert {type(obj).__module__}.{type(obj).__qualname__}; "
            "expected a tensor, a DLPack object or capsule, a buffer, an object with "
            f"__array__, a scalar or a (nested) sequence of numbers{_conversion_hint(obj)}"
        )

    if target_device is not None and tensor.device != target_device:
        tensor = _move(tensor, target_device, copy)
    if target_dtype is not None and tensor.dtype is not target_dtype:
        _refuse_copy_false(copy, f"casting {tensor.dtype} to {target_dtype} needs a copy")
        tensor, fresh = tensor.astype(target_dtype), True
    if copy and not fresh:
        tensor = tensor.copy()
    return tensor


def _conversion_hint(obj: Any) -> str:
    """The method of obj that gives what asarray takes, said as the fix."""
    for method, what in (
        ("toarray", "a dense NumPy array (sparse data)"),
        ("to_numpy", "a NumPy array"),
        ("numpy", "a NumPy array"),
    ):
        if callable(getattr(obj, method, None)):
            return f"; {type(obj).__name__}.{method}() gives {what}"
    return ""


def _type_name(obj: Any) -> str:
    return f"{type(obj).__module__.partition('.')[0]}.{type(obj).__qualname__}"


def is_arrow_source(obj: Any) -> bool:
    """obj speaks the Arrow PyCapsule interface and is read through it: pandas
    objects are not (their memory is NumPy's, which ``__array__`` shares; the Arrow
    form turns NaN into nulls and imports PyArrow)."""
    kind = type(obj)
    return (
        hasattr(kind, "__arrow_c_array__") or hasattr(kind, "__arrow_c_stream__")
    ) and kind.__module__.partition(".")[0] != "pandas"


def from_arrow(
    obj: Any, copy: bool | None, api: str = "asarray()"
) -> tuple[Tensor, str | None] | None:
    """obj read through ``__arrow_c_array__`` or ``__arrow_c_stream__``: the tensor
    and why it is a copy (None: shared, read-only), or None for a table (a struct
    of columns), which is read another way. ``copy=False`` refuses a copy."""
    name = _type_name(obj)
    kind = type(obj)
    array = hasattr(kind, "__arrow_c_array__")
    method = "__arrow_c_array__" if array else "__arrow_c_stream__"
    try:
        capsules = obj.__arrow_c_array__() if array else obj.__arrow_c_stream__()
    except Exception as exc:  # the producer's own failure
        raise BufferError(f"{api}: {name}.{method}() raised {type(exc).__name__}: {exc}") from exc
    try:
        if array:
            if not isinstance(capsules, tuple) or len(capsules) != 2:
                raise BufferError(
                    f"{method}() gave {type(capsules).__name__}, not a (schema, array) "
                    "pair of capsules"
                )
            result = _core.import_arrow_array(*capsules)
        else:
            result = _core.import_arrow_stream(capsules, copy is not False)
    except BufferError as exc:
        # (the layout check names asarray() itself: said once, as api)
        raise BufferError(f"{api}: {name}: {str(exc).removeprefix('asarray(): ')}") from None
    except ValueError as exc:
        if str(exc).startswith("copy=False"):  # (several chunks: joining is a copy)
            raise ValueError(f"{api}: {name}: {exc}") from None
        # PyCapsule_GetPointer's: a capsule of the wrong name
        raise BufferError(
            f"{api}: {name}.{method}() gave capsules that are not the Arrow interface's ({exc})"
        ) from None
    if result is None:
        return None
    tensor, copied = result
    why = None
    if copied:
        why = (
            f"{name} holds bit-packed booleans, which are unpacked into new memory"
            if tensor.dtype is DTYPES["bool"]
            else f"{name} comes in several chunks, joined into new memory"
        )
        if copy is False:
            raise ValueError(f"{api}: copy=False, but {why}")
    return tensor, why


def _refuse_copy_false(copy: bool | None, why: str) -> None:
    if copy is False:
        raise ValueError(f"asarray(): copy=False, but {why}")


def _move(tensor: Tensor, device: Device, copy: bool | None) -> Tensor:
    """Relabel host-accessible memory as CPU; anything else cannot move here."""
    if device == _CPU and int(tensor.device.device_type) in HOST_ACCESSIBLE:
        return tensor.to(device)
    _refuse_copy_false(copy, f"moving {tensor.device} data to {device} needs a copy")
    raise DeviceError(
        f"asarray(): cannot move {tensor.device} data to {device}: its source cannot "
        f"export it there; {NO_MOVES}"
    )


def _from_dlpack_source(obj: Any, device: Device | None, copy: bool | None) -> tuple[Tensor, bool]:
    """Import a DLPack object or capsule, asking the producer for device moves."""
    if type(obj).__module__.partition(".")[0] == "pyarrow":
        # PyArrow's export refuses some of its own arrays (nulls, strings, bit-packed
        # booleans) and says little: its framework says why, and unpacks booleans as
        # convert does (other frameworks' exports are read as they are).
        from tensorbridge._frameworks import framework_of  # (not at import: it is larger)

        owner = framework_of(obj)
        if owner is not None:
            problem = owner.export_problem(obj)
            if problem is not None:
                raise BufferError(f"asarray(): {problem}")
            copies: list[str] = []

            def must_copy(why: str) -> None:
                _refuse_copy_false(copy, why)
                copies.append(why)

            obj = owner.prepare_source(obj, must_copy, [])
            if copies:
                return from_dlpack(obj, device=device), True
    torch_quirks = _torch_quirks()
    if torch_quirks is not None and torch_quirks.has_view_bits(obj):
        # Its memory holds other values than it shows: only a resolved copy is right.
        _refuse_copy_false(
            copy, "a torch view with the negative/conjugate bit set must be resolved (copied)"
        )
        return from_dlpack(torch_quirks.resolve_view_bits(obj), device=device), True
    if copy is False and device is not None and not _core.is_capsule(obj):
        source = Device(obj)  # uses __dlpack_device__
        if source != device and not (device == _CPU and int(source.device_type) in HOST_ACCESSIBLE):
            raise ValueError(
                f"asarray(): copy=False, but moving {source} data to {device} needs a copy"
            )
    try:
        tensor = from_dlpack(obj, device=device, copy=copy)
    except CopyNeeded as exc:
        raise ValueError(
            f"asarray(): copy=False, but {type(obj).__name__} can only export a copy"
        ) from exc
    return tensor, copy is True


def _from_array_protocol(obj: Any, copy: bool | None) -> Any:
    """obj.__array__(), NumPy's protocol, asked not to copy when copy=False."""
    name = f"{type(obj).__module__.split('.')[0]}.{type(obj).__qualname__}"
    try:
        array = obj.__array__(copy=False) if copy is False else obj.__array__()
    except TypeError as exc:
        if copy is False:
            raise ValueError(
                f"asarray(): copy=False, but {name}.__array__ cannot be asked not to copy "
                "(it predates NumPy 2's copy keyword)"
            ) from None
        raise TypeError(f"asarray(): {name}.__array__() raised: {exc}") from exc
    except (ValueError, RuntimeError) as exc:
        # NumPy 2's protocol says ValueError; polars raises RuntimeError.
        if copy is False:
            raise ValueError(
                f"asarray(): copy=False, but {name} can only give a copy ({exc})"
            ) from exc
        raise
    numpy = loaded("numpy")
    if numpy is None or not isinstance(array, numpy.ndarray):
        raise TypeError(
            f"asarray(): {name}.__array__() returned {type(array).__name__}, not a NumPy array"
        )
    if array.dtype.kind not in _DLPACK_KINDS and not _is_ml_dtypes_array(array):
        raise BufferError(
            f"asarray(): {name} holds {array.dtype} data, which DLPack cannot hold; "
            f"{_dtype_fix(array.dtype)}"
        )
    return array


_DLPACK_KINDS = "biufc"


def _dtype_fix(dtype: Any) -> str:
    """What to do with NumPy data of a dtype DLPack has no equivalent of."""
    kind = dtype.kind
    if kind in "Mm":
        return "convert it to numbers first, e.g. .astype('int64') for the raw ticks"
    if kind in "US":
        return "strings have no tensor form: encode them as numbers first"
    if kind == "O":
        return "if the objects are numbers, convert first, e.g. .astype(float)"
    if dtype.names:
        return "take one field, e.g. array['name'], or a view of one numeric type"
    return "convert it to a bool, integer, float or complex dtype first"


def _is_plain_ndarray(obj: Any) -> bool:
    numpy = loaded("numpy")
    return numpy is not None and isinstance(obj, numpy.ndarray) and not _is_ml_dtypes_array(obj)


def _numpy_ready(array: Any, copy: bool | None) -> tuple[Any, bool]:
    """A NumPy array DLPack can export: refused with the fix for dtypes it has no
    equivalent of; byte-swapped data copied to native order (True: a copy)."""
    dtype = array.dtype
    if dtype.kind not in _DLPACK_KINDS:
        raise BufferError(
            f"asarray(): NumPy {dtype} arrays have no DLPack equivalent (DLPack holds "
            f"bool, integer, float and complex numbers); {_dtype_fix(dtype)}"
        )
    if not dtype.isnative:
        _refuse_copy_false(
            copy, f"{dtype.str} data is not in native byte order (a byte-swapped copy)"
        )
        return array.astype(dtype.newbyteorder("=")), True
    return array, False


def _is_numpy_scalar(obj: Any) -> bool:
    numpy = loaded("numpy")
    return numpy is not None and isinstance(obj, numpy.generic)


def _is_ml_dtypes_array(obj: Any) -> bool:
    """A NumPy array of an ml_dtypes type (NumPy cannot export those over DLPack)."""
    numpy = loaded("numpy")
    return (
        numpy is not None
        and isinstance(obj, numpy.ndarray)
        and obj.dtype.kind in "Vf"
        and obj.dtype.name in DTYPES
        and obj.dtype.name not in ("float16", "float32", "float64")
    )


def _from_ml_dtypes_array(array: Any) -> Tensor:
    carrier = {1: "uint8", 2: "uint16"}[array.dtype.itemsize]
    shared = from_dlpack(array.view(carrier))
    return shared.view(DTYPES[array.dtype.name])


def _from_scalar(value: Any, dtype: DType | None) -> Tensor:
    if dtype is None:
        if _is_numpy_scalar(value):
            copied: Tensor = _numpy_ops().from_numpy_copy(value.__array__())
            return copied
        if isinstance(value, bool):
            dtype = DTYPES["bool"]
        elif isinstance(value, int):
            dtype = DTYPES["int64"]
            if not -(2**63) <= value < 2**63:
                raise OverflowError(f"asarray(): the int {value} does not fit int64")
        elif isinstance(value, float):
            dtype = get_default_dtype()
        else:
            dtype = default_complex()
    fast = _core.from_sequence([value], dtype)
    if fast is not None:
        return fast.reshape(())
    out = _core.empty_tensor((), dtype)
    _numpy_ops().copy_into(out, _numpy_ops().np.asarray(value))
    return out


def from_sequence(obj: Any, dtype: DType | None) -> Tensor:
    fast = _core.from_sequence(obj, dtype)
    if fast is not None:
        return fast
    return _sequence_general(obj, dtype)


def _sequence_general(obj: Any, dtype: DType | None) -> Tensor:
    """Nested sequences holding NumPy scalars, tensors or DLPack objects: via NumPy."""
    ops = _numpy_ops()
    np = ops.np
    converted = _convert_leaves(obj, ())
    np_dtype = None if dtype is None else ops.numpy_dtype(dtype)
    try:
        array = np.asarray(converted, dtype=np_dtype)
    except ValueError as exc:
        position = _find_ragged(converted, ())
        if position is not None:
            raise ValueError(f"asarray(): ragged nested sequence: {position}") from None
        raise ValueError(f"asarray(): {exc}") from exc
    if dtype is None:
        if array.dtype.kind == "f" and array.dtype.itemsize == 8 and _only_python(obj):
            dtype = get_default_dtype()
        else:
            dtype = ops.dtype_of(array)
    result: Tensor = ops.from_numpy_copy(array, dtype)
    return result


def _position(pos: tuple[int, ...]) -> str:
    return "".join(f"[{i}]" for i in pos) or "the top"


def _convert_leaves(x: Any, pos: tuple[int, ...]) -> Any:
    if isinstance(x, (list, tuple, range)):
        return [_convert_leaves(item, (*pos, i)) for i, item in enumerate(x)]
    if isinstance(x, (bool, int, float, complex)) or _is_numpy_scalar(x):
        if _is_numpy_scalar(x) and x.dtype.kind not in "biufcV":
            raise TypeError(
                f"asarray(): the item at {_position(pos)} is a NumPy {x.dtype} scalar; "
                "expected a number"
            )
        return x
    ops = _numpy_ops()
    if isinstance(x, ops.np.ndarray):
        return x
    if type(x) is Tensor or hasattr(type(x), "__dlpack__"):
        return ops.to_numpy(_asarray(x), unpack=True)
    raise TypeError(
        f"asarray(): the item at {_position(pos)} is {type(x).__name__} {x!r:.40}; "
        "expected a number, a tensor or a DLPack object"
    )


def _shape_of(x: Any) -> tuple[int, ...] | None:
    if isinstance(x, (list, tuple)):
        return (len(x),)
    shape = getattr(x, "shape", None)
    return tuple(shape) if shape is not None else ()


def _find_ragged(x: Any, pos: tuple[int, ...]) -> str | None:
    """Describe the first place where a nested structure stops being rectangular."""
    if not isinstance(x, (list, tuple)) or not x:
        return None
    first = _full_shape(x[0])
    for i, item in enumerate(x):
        shape = _full_shape(item)
        if shape != first:
            return (
                f"the item at {_position((*pos, i))} has shape {shape}, but the item at "
                f"{_position((*pos, 0))} has shape {first}"
            )
    for i, item in enumerate(x):
        found = _find_ragged(item, (*pos, i))
        if found:
            return found
    return None


def _full_shape(x: Any) -> tuple[int, ...]:
    if isinstance(x, (list, tuple)):
        return (len(x), *(_full_shape(x[0]) if x else ()))
    return _shape_of(x) or ()


def _only_python(x: Any) -> bool:
    if isinstance(x, (list, tuple)):
        return all(_only_python(item) for item in x)
    return type(x) in (bool, int, float, complex)


# --------------------------------------------------------------------------
# Constructors
# --------------------------------------------------------------------------


def _shape_arg(api: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(int(s.__index__()) for s in shape)
    except (TypeError, AttributeError):
        raise TypeError(
            f"{api}(): shape must be an int or a sequence of ints; got {shape!r}"
        ) from None
    for d in dims:
        if d < 0:
            raise ValueError(f"{api}(): negative extent {d} in shape {dims}")
    return dims


def _cpu_only(api: str, device: Any) -> None:
    if device is not None and as_device(device) != _CPU:
        raise BufferError(
            f"{api}(): tensorbridge allocates CPU memory only; cannot allocate on "
            f"{as_device(device)}"
        )


def empty(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A new uninitialised C-contiguous tensor (64-byte aligned memory)."""
    _cpu_only("empty", device)
    dtype = get_default_dtype() if dtype is None else as_dtype(dtype)
    return _core.empty_tensor(_shape_arg("empty", shape), dtype)


def zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A new tensor of zeros."""
    _cpu_only("zeros", device)
    dtype = get_default_dtype() if dtype is None else as_dtype(dtype)
    return _core.zero_fill(_core.empty_tensor(_shape_arg("zeros", shape), dtype))


def ones(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A new tensor of ones."""
    return full(shape, 1, dtype=get_default_dtype() if dtype is None else dtype, device=device)


def full(shape: Any, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    """A new tensor filled with ``fill_value`` (dtype inferred from it if not given)."""
    _cpu_only("full", device)
    dims = _shape_arg("full", shape)
    if dtype is None:
        value = _asarray(fill_value)
        if value.ndim != 0:
            raise ValueError(f"full(): fill_value must be a scalar; got shape {value.shape}")
        dtype = value.dtype
    else:
        dtype = as_dtype(dtype)
    out = _core.empty_tensor(dims, dtype)
    _numpy_ops().copy_into(out, _numpy_ops().to_numpy(_asarray(fill_value), unpack=True))
    return out


def arange(
    start: Any, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None
) -> Tensor:
    """Evenly spaced values in ``[start, stop)``: ints give int64, else the default float."""
    _cpu_only("arange", device)
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange(): step must not be zero")
    np = _numpy_ops().np
    if dtype is None:
        integral = all(
            isinstance(v, int) or (_is_numpy_scalar(v) and v.dtype.kind in "iu")
            for v in (start, stop, step)
        )
        dtype = DTYPES["int64"] if integral else get_default_dtype()
    else:
        dtype = as_dtype(dtype)
    values = np.arange(start, stop, step)
    result: Tensor = _numpy_ops().from_numpy_copy(values, dtype)
    return result
