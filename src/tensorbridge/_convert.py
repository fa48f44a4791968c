# SPDX-License-Identifier: Apache-2.0
"""The planner: `Plan`, `explain`, and the general `convert`.

`convert_general` makes a `Plan` once, from the source's metadata and the target's
facts (`tensorbridge._frameworks`), and then carries it out; `explain` returns the
same Plan without carrying it out. Everything a framework does differently is a
hook of its `Framework` class: nothing here names a framework. The compiled front
door (`tensorbridge.convert`) answers the calls that need no planning and hands the
rest to `convert_general`. See docs/design.md, "Bridges".
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any

from tensorbridge import _core, _creation
from tensorbridge._core import Tensor
from tensorbridge._devices import HOST_ACCESSIBLE, Device, as_device
from tensorbridge._dtypes import DType, as_dtype, dtype_from_code
from tensorbridge._errors import NO_MOVES, DeviceError, said_by
from tensorbridge._frameworks import Framework, framework_of, resolve_target
from tensorbridge._frameworks.base import writable_view
from tensorbridge._known_types import aborting_export_type, loaded, repeatable_arrow_stream
from tensorbridge._targets import TargetName

__all__ = ["Plan", "TargetName", "convert_general", "explain"]


# --------------------------------------------------------------------------
# The source: whatever the user holds, as a Tensor
# --------------------------------------------------------------------------


@dataclasses.dataclass
class _Source:
    tensor: Any  # a Tensor, or a metadata stand-in for a capsule `explain` must not consume
    kind: str  # what the user passed, for messages
    notes: list[str]
    copied: str | None  # why reading the source already copied it (None: it did not)
    #: A producer of CUDA/ROCm memory (after prepare_source), which the result may be
    #: asked of again (handoffs, device copies); None for everything else.
    producer: Any = None
    #: The stream that producer is asked with: the target's current stream.
    stream: int | None = None


#: DLPack device types whose producers take a stream: CUDA, CUDA managed, ROCm.
_STREAM_DEVICES = frozenset({2, 10, 13})


def _stream_device(obj: Any) -> Device | None:
    """The device of a producer object of CUDA/ROCm memory, else None."""
    if type(obj) is Tensor or _core.is_capsule(obj):
        return None
    query = getattr(type(obj), "__dlpack_device__", None)
    if query is None:
        return None
    try:
        device_type, index = query(obj)
    except Exception:
        return None  # reading it says what is wrong
    if int(device_type) not in _STREAM_DEVICES:
        return None
    return as_device((int(device_type), 0 if index is None else int(index)))


def _read_source(
    obj: Any,
    copy: bool | None,
    consume: bool,
    target: type[Framework] = Framework,
    read: Tensor | None = None,
) -> _Source:
    """Turn obj into a Tensor, fixing what its framework's own export gets wrong.

    A producer of CUDA/ROCm memory is read with stream -1 (no ordering: the metadata
    is all the plan needs); `_carry_out` then makes the one request that orders the
    producer's work before the target's, on the target's current stream. `read`:
    what a cached route already read of obj through __dlpack__ (asked once)."""
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    framework = framework_of(obj)
    notes: list[str] = []
    copied: str | None = None

    def must_copy(why: str) -> None:
        nonlocal copied
        if copy is False:
            raise BufferError(f"convert(): copy=False, but {why}")
        copied = why

    if _core.is_capsule(obj) and not consume:
        return _Source(_CapsuleMeta(obj), "DLPack capsule", notes, None)
    if framework is not None:
        obj = framework.prepare_source(obj, must_copy, notes)
    if isinstance(obj, (bool, int, float, complex, list, tuple)):
        must_copy(f"a {type(obj).__name__} is a value, not memory to share")
    producer = stream = None
    if read is not None and int(read.device.device_type) in _STREAM_DEVICES:
        read = None  # (routes never hand back device memory: asked here, on the stream)
    device = _stream_device(obj) if read is None else None
    if device is not None:
        producer, stream = obj, target.current_stream(device)
        tensor = _core.from_dlpack(obj, stream=-1)
    else:
        api = "convert()" if consume else "explain()"
        tensor = _read_plain(obj, api, must_copy) if read is None else read
    if framework is not None and framework.readonly == "immutable":
        notes.append(f"{framework.name} arrays are immutable: the data is treated as read-only")
    return _Source(_immutable(tensor, framework), kind, notes, copied, producer, stream)


def _read_plain(obj: Any, api: str, must_copy: Any) -> Tensor:
    """obj as asarray reads it, with the copies the Arrow interface makes reported to
    must_copy (api: the function the user called, for messages)."""
    if (
        type(obj) is not Tensor
        and not hasattr(type(obj), "__dlpack__")
        and _creation.is_arrow_source(obj)
    ):
        if (
            api == "explain()"
            and not hasattr(type(obj), "__arrow_c_array__")
            and not repeatable_arrow_stream(type(obj))
        ):
            raise TypeError(
                f"explain(): {type(obj).__module__}.{type(obj).__qualname__} offers only "
                "an Arrow stream (__arrow_c_stream__), which may be readable only once: "
                "explain cannot look at it without consuming it. convert reads it (shared "
                "when it holds one chunk, joined into new memory when it holds several); "
                "or collect it first, e.g. pyarrow.chunked_array(stream), and explain that"
            )
        arrow = _creation.from_arrow(obj, None, api)
        if arrow is not None:
            tensor, why = arrow
            if why is not None:
                must_copy(why)
            return tensor
    return _core.asarray(obj)  # (its errors are said as api's by the public door)


def _immutable(tensor: Tensor, framework: type[Framework] | None) -> Tensor:
    """The arrays of immutable frameworks are read-only whatever their export said
    (from_dlpack already imports them read-only)."""
    if framework is not None and framework.readonly == "immutable" and not tensor.readonly:
        return _core.set_readonly(tensor, True)
    return tensor


class _CapsuleMeta:
    """The metadata of a capsule, read without consuming it (for explain)."""

    def __init__(self, capsule: Any) -> None:
        info = _core.inspect_capsule(capsule)
        if "shape" not in info:
            raise BufferError(f"explain(): cannot read a capsule named {info['name']!r}")
        dtype = dtype_from_code(info["dtype"][0], info["dtype"][1])
        if dtype is None:
            raise BufferError(f"explain(): the capsule's dtype {info['dtype']} is not DLPack's")
        flags = info["flags"] or 0
        self.dtype: DType = dtype
        self.shape: tuple[int, ...] = info["shape"] or ()
        self.ndim: int = info["ndim"]
        self.strides: tuple[int, ...] = info["strides"] or _c_strides(self.shape)
        self.device: Device = as_device(info["device"])
        self.readonly = bool(flags & _core.FLAG_READ_ONLY)
        self.packed = dtype.bits < 8 and not flags & _core.FLAG_SUBBYTE_PADDED
        self._ptr: int = info["data"] + info["byte_offset"]
        self.size = 1
        for n in self.shape:
            self.size *= n

    def data_ptr(self) -> int:
        return self._ptr

    def is_contiguous(self) -> bool:
        return self.size == 0 or all(
            s == c
            for s, c, n in zip(self.strides, _c_strides(self.shape), self.shape, strict=True)
            if n != 1
        )


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order strides, in elements, of a capsule that gives none."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


# --------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Plan:
    """What `convert` does for one source and target (what `explain` returns).

    Attributes
    ----------
    source, target : str
        What is converted, and into which framework.
    path : str
        The protocol path to the target.
    shares_memory : bool
        True when the result will share the source's memory.
    copies : list of str
        Why the data is copied (empty when it is shared).
    notes : list of str
        What else happens on the way (detaching, read-only handling, offset folding).
    dtype, shape
        The result's dtype name and shape.
    stream : int or None
        For CUDA/ROCm data: the stream the producer is asked to order its work on
        (the target's current stream; None: DLPack's default, the legacy default
        stream). None for other memory.
    route : str
        How later calls with this kind of source and target run: from a route cached
        in C after the first call (how it reads the source, or that it hands the
        source to the target's own importer), or planned on every call, and why.
    """

    source: str
    target: str
    path: str
    shares_memory: bool
    copies: list[str]
    notes: list[str]
    dtype: str
    shape: tuple[int, ...]
    _framework: type[Framework] = dataclasses.field(repr=False, default=Framework)
    _cast: DType | None = dataclasses.field(repr=False, default=None)
    _precopy: bool = dataclasses.field(repr=False, default=False)
    _fold: bool = dataclasses.field(repr=False, default=False)
    _requires_grad: bool = dataclasses.field(repr=False, default=False)
    _writable: bool = dataclasses.field(repr=False, default=False)
    stream: int | None = None
    route: str = ""
    _on_stream_device: bool = dataclasses.field(repr=False, default=False)
    _handoff: bool = dataclasses.field(repr=False, default=False)
    _ask_copy: bool = dataclasses.field(repr=False, default=False)

    def __str__(self) -> str:
        memory = "shared (zero-copy)" if self.shares_memory else "copied: " + "; ".join(self.copies)
        lines = [
            f"convert {self.source} -> {self.target}",
            f"  path:    {self.path}",
            *([f"  route:   {self.route}"] if self.route else []),
            f"  memory:  {memory}",
            f"  result:  {self.target} {self.dtype} {self.shape}",
        ]
        if self._on_stream_device:
            which = (
                "none: DLPack's default, the legacy default stream"
                if self.stream is None
                else f"{self.stream:#x}, {self.target}'s current stream"
            )
            lines.append(f"  stream:  {which}")
        for note in self.notes:
            lines.append(f"  note:    {note}")
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython
        printer.text(str(self))


def _describe(kind: str, t: Any) -> str:
    layout = "" if t.is_contiguous() else f" strides {t.strides}"
    flags = " read-only" if t.readonly else ""
    return f"{kind} {t.dtype.name} {t.shape}{layout} on {t.device}{flags}"


def _make_plan(
    source: _Source,
    framework: type[Framework],
    dtype: Any,
    device: Any,
    copy: bool | None,
    requires_grad: bool,
    readonly: str,
) -> Plan:
    t = source.tensor
    name = framework.name
    cast = None
    copies: list[str] = []
    notes = list(source.notes)

    if copy is not None and copy is not True and copy is not False:
        raise TypeError(f"convert(): copy must be True, False or None; got {copy!r}")
    if readonly != "share" and readonly != "copy":
        raise ValueError(f'convert(): readonly must be "share" or "copy"; got {readonly!r}')
    target_dtype = t.dtype if dtype is None else as_dtype(dtype)
    problem = framework.unsupported_dtype(target_dtype.name)
    if problem:
        raise BufferError(f"convert(): {problem}")
    if target_dtype is not t.dtype:
        if copy is False:
            raise ValueError(
                f"convert(): copy=False, but casting {t.dtype.name} to {target_dtype.name} "
                "needs a copy"
            )
        cast = target_dtype
        copies.append(f"casting {t.dtype.name} to {target_dtype.name}")
    if requires_grad and not framework.autograd:
        raise ValueError(f"convert(): requires_grad=True, but {name} has no autograd")

    if device is not None:
        wanted = as_device(device)
        if wanted != t.device and not (
            wanted.type == "cpu" and int(t.device.device_type) in HOST_ACCESSIBLE
        ):
            raise DeviceError(f"convert(): cannot move {t.device} data to {wanted}; {NO_MOVES}")
    if int(t.device.device_type) not in HOST_ACCESSIBLE and framework.host_only:
        raise DeviceError(
            f"convert(): {name} holds CPU memory only; the data is on {t.device} (move it "
            "to the CPU with its framework first)"
        )

    precopy_reasons = [] if cast is not None else framework.precopy_reasons(t, readonly)
    copies += precopy_reasons + framework.own_copy_reasons(t)
    if copy is True and not copies and not source.copied:
        copies.append("copy=True")
        precopy_reasons.append("copy=True")
    if copy is False and copies:
        raise BufferError(f"convert(): copy=False, but {'; '.join(copies)}")

    fold = framework.byte_offset != "honours" and cast is None and not precopy_reasons
    if fold:
        notes.append(
            f"{name} does not honour byte_offset: the offset is moved into the data pointer"
        )
    # Read-only data shared with a framework that cannot mark it read-only: as the
    # framework's own from_dlpack does (the Array API's rule), and said.
    writable = not copies and not source.copied and framework.unprotected(t)
    if writable:
        notes.append(
            f"{name} cannot mark tensors read-only: the result is writable over read-only "
            'data, and writes through it change the source (readonly="copy" gives a '
            "private copy)"
        )
    # CUDA/ROCm memory: tensorbridge never copies it itself. A copy is asked of the
    # producer; data that needs nothing is handed to the target's own importer, so
    # that producer and consumer make their stream handshake between themselves.
    on_stream_device = int(t.device.device_type) in _STREAM_DEVICES
    ask_copy = handoff = False
    path = framework.import_path()
    if on_stream_device and precopy_reasons and cast is None:
        if source.producer is None:
            raise BufferError(
                f"convert(): {'; '.join(precopy_reasons)}, and tensorbridge does not copy "
                f"{t.device} memory itself; convert the producer's own object (which is "
                "asked for the copy), or make the data fit first in its own framework"
            )
        ask_copy = True
        notes.append("the copy is asked of the producer (__dlpack__(copy=True)) on the stream")
    elif on_stream_device and cast is not None:
        raise BufferError(
            f"convert(): casting {t.dtype.name} to {target_dtype.name} needs a copy, and "
            f"tensorbridge does not compute on {t.device} memory; cast in the producer's "
            "framework first"
        )
    elif (
        on_stream_device
        and source.producer is not None
        and not copies
        and not source.copied
        and not writable
        and not (fold and _core.fold_offset(t) is not t)  # (a view when it moves)
        and framework.importer() is not None
    ):
        handoff = True
        path = (
            f"{framework.name}'s own importer on the source object (producer and consumer "
            "make their stream handshake)"
        )
    if source.copied:
        copies = [source.copied, *copies]
    return Plan(
        source=_describe(source.kind, t),
        target=name,
        path=path,
        shares_memory=not copies,
        copies=copies,
        notes=notes,
        dtype=target_dtype.name,
        shape=tuple(t.shape),
        _framework=framework,
        _cast=cast,
        _precopy=bool(precopy_reasons) and cast is None,
        _fold=fold,
        _requires_grad=requires_grad,
        _writable=writable,
        stream=source.stream,
        _on_stream_device=on_stream_device,
        _handoff=handoff,
        _ask_copy=ask_copy,
    )


def _stream_value(stream: int | None, t: Tensor) -> int:
    """The stream to ask a producer of t's device with: the target's, or DLPack's
    default spelled out (1, CUDA's legacy default stream; 0 on ROCm), so that the
    request is one call whatever the producer's type did before."""
    if stream is not None:
        return stream
    return 0 if t.device.type == "rocm" else 1


def _carry_out(plan: Plan, t: Tensor, producer: Any = None) -> Any:
    framework = plan._framework
    if plan._handoff:
        # The target's own importer asks the producer itself, with its own stream.
        result = framework.importer()(producer)
    else:
        if producer is not None and not plan._ask_copy:
            # The one request on the target's stream (the plan was made from a read
            # with -1); the same memory and layout again.
            stream = _stream_value(plan.stream, t)
            again = _immutable(_core.from_dlpack(producer, stream=stream), framework_of(producer))
            if (again.data_ptr(), again.shape, again.strides, again.dtype) != (
                t.data_ptr(),
                t.shape,
                t.strides,
                t.dtype,
            ):
                raise BufferError(
                    f"convert(): {type(producer).__name__}.__dlpack__ exported other memory "
                    "when asked again on the target's stream; the plan was made for the "
                    "first export"
                )
            t = again
        if plan._ask_copy:
            t = _core.from_dlpack(producer, copy=True, stream=_stream_value(plan.stream, t))
            still = framework.precopy_reasons(t)
            if still:
                raise BufferError(
                    f"convert(): the producer's copy still does not fit {framework.name} "
                    f"({'; '.join(still)}), and tensorbridge does not copy {t.device} "
                    "memory itself; make the data contiguous in its own framework first"
                )
        elif plan._cast is not None:
            t = t.astype(plan._cast)
        elif plan._precopy:
            # Bit-packed float6/float4 copies unpack (one element per byte); others memcpy.
            t = t.astype(t.dtype) if _core.is_packed(t) else t.copy()
        elif plan._writable:
            t = writable_view(t)
        result = framework.make(t)
    got = framework.dtype_name(result)
    if got != plan.dtype:
        raise BufferError(
            f"convert(): {framework.name} produced an array of {got} instead of {plan.dtype}"
        )
    if plan._requires_grad:
        result = framework.set_requires_grad(result)
    return result


# --------------------------------------------------------------------------
# The public functions
# --------------------------------------------------------------------------


def convert_general(
    obj: Any,
    /,
    to: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: str = "share",
    _read: Tensor | None = None,
) -> Any:
    """The planner's convert (the public `convert` is the compiled front door,
    which answers plan-free calls in C and calls this for the rest; `_read` is what
    its route already read of obj)."""
    framework = resolve_target(to)
    no_option = (
        dtype is None
        and device is None
        and copy is None
        and requires_grad is None
        and readonly == "share"
        and (type(to) is str or type(to) is types.ModuleType)
    )
    itself = _itself(obj, framework, dtype, device, copy, requires_grad, readonly)
    if itself:
        if itself == "set":
            framework.set_requires_grad(obj)  # in place, as torch.asarray does
        if no_option:
            _remember_route(obj, to, framework)
        return obj
    source = _read_source(obj, copy, consume=True, target=framework, read=_read)
    plan = _make_plan(source, framework, dtype, device, copy, bool(requires_grad), readonly)
    result = _carry_out(plan, source.tensor, source.producer)
    if no_option:
        _remember_route(obj, to, framework)
    return result


def _itself(
    obj: Any,
    framework: type[Framework],
    dtype: Any,
    device: Any,
    copy: Any,  # (not checked yet: anything else than None/False goes to the planner)
    requires_grad: bool | None,
    readonly: str,
) -> bool | str:
    """Whether convert returns obj itself: one of the target's own arrays with
    nothing asked that it does not already have (as ``torch.asarray`` and
    ``numpy.asarray`` return their argument), its autograd state included. "set":
    it only needs ``requires_grad=True`` set, which torch.asarray sets in place."""
    if copy is True or not framework.owns(obj):
        return False
    if readonly != "share" and readonly != "copy":
        return False  # (the planner says what is wrong)
    if copy is not None and copy is not False:
        return False
    if dtype is not None and as_dtype(dtype).name != framework.dtype_name(obj):
        return False
    if device is not None:
        try:
            here = as_device(obj.__dlpack_device__())
        except Exception:  # (no device to compare: the planner decides)
            return False
        if as_device(device) != here:
            return False
    if requires_grad is None or bool(requires_grad) == framework.requires_grad_of(obj):
        return True
    if requires_grad and framework.autograd and framework.can_require_grad(obj):
        return "set"
    # False on a tensor that requires grad: a detached alias (torch.asarray clears the
    # flag of a leaf in place; tensorbridge leaves the caller's tensor as it was). True
    # on a tensor that cannot require grad: the planner says why.
    return False


# --------------------------------------------------------------------------
# Routes: what the compiled front door may do without the planner
# --------------------------------------------------------------------------

_ROUTE = _core._route_constants()


def route_mode(obj: Any, target: type[Framework]) -> int:
    """How later conversions of objects of type(obj) to `target` may run in C (see
    docs/design.md, "Routes"): how the source is read, and whether it is handed to
    the target's own importer as it is. 0: the planner decides every time."""
    tp = type(obj)
    if target.owns(obj):
        return _ROUTE["SAME"]  # its own array: returned as it is
    numpy = loaded("numpy")
    if numpy is None and sys.modules.get("numpy") is not None:
        return 0  # another thread is importing NumPy: decided again on a later call
    exact_ndarray = numpy is not None and tp is numpy.ndarray
    source = framework_of(obj)
    if tp is Tensor:
        read = _ROUTE["TENSOR"]
    elif exact_ndarray:
        read = _ROUTE["NDARRAY"]  # (subclasses are read as the planner reads them)
    elif (source is not None and not source.reads_in_c(tp)) or _core.is_capsule(obj):
        return 0
    elif _core.exchange_api_info(obj) is not None:
        read = _ROUTE["TABLE"]
    elif hasattr(tp, "__dlpack__") and hasattr(tp, "__dlpack_device__"):
        read = _ROUTE["PROTOCOL"]
    else:
        return 0
    if read == _ROUTE["PROTOCOL"] and source is not None and source.legacy_export_deprecated:
        # No importer of another framework may ask it the legacy way (PyArrow warns):
        # it is read here, with max_version, and the target gets a Tensor; or handed
        # to an importer that asks that way only after a TypeError: called with
        # copy=False (after which NumPy does not), or when the type says
        # (null_count) that no TypeError can come.
        if target.importer_asks_legacy or not target.hands_off(source, tp):
            return read
        mode = _handoff_mode(read, source, target, tp)
        if not mode:
            return read
        if target.importer_takes_copy_false():
            mode |= _ROUTE["COPY_FALSE"]  # (no legacy call after copy=False)
        elif source.counts_nulls and hasattr(tp, "null_count"):
            mode |= _ROUTE["NO_NULLS"]
        return mode
    # A trusted source read through __dlpack__ may instead be asked here as the
    # target's importer would ask it, and the capsule passed on to the target's
    # importer of capsules once it is checked; or carried to the target's importer
    # of objects, which gets the capsule it asks for once it is checked.
    carried = read
    if (
        read == _ROUTE["PROTOCOL"]
        and source is not None
        and source.trusted_export
        and not source.bit_views
        and target.readonly != "flag"
        and not (source.legacy_export and target.versioned_only)
    ):
        if target.capsule_importer() is not None:
            carried = read | _ROUTE["CAPSULE"]
        elif target.carry_importer() is not None:
            carried = read | _ROUTE["CARRY"]
    if source is None or not target.hands_off(source, tp):
        return carried
    return _handoff_mode(read, source, target, tp) or carried


def _handoff_mode(read: int, source: type[Framework], target: type[Framework], tp: type) -> int:
    """The mode of a route that hands objects of type tp, read as `read` says, to the
    target's own importer (which `target.hands_off`), with the checks that importer
    lacks; 0 when it cannot be handed over cheaply."""
    if (read == _ROUTE["PROTOCOL"] and source.trusted_export) or (read == _ROUTE["NDARRAY"]):
        mode = read | _ROUTE["HANDOFF"]
    elif read == _ROUTE["TABLE"] and target.importer_reads_tables:
        # It reads the table, not the Python protocol: the table's managed tensor,
        # checked here (its dtype too), goes to it in an object whose type's table
        # gives it away, the same import without asking the dtype first.
        mode = read | _ROUTE["HANDOFF"] | _ROUTE["CAPSULE"]
    else:
        return 0
    if not target.importer_refuses_dtypes and not mode & _ROUTE["CAPSULE"]:
        if read != _ROUTE["PROTOCOL"]:
            mode |= _ROUTE["CHECK_DTYPE"]
        elif not source.dtypes <= (target.fast_dtypes or target.dtypes):
            return 0  # no cheap way to see the dtype first: the carrier checks it
    if target.readonly == "flag" and source.unmarked_export(tp):
        # Its capsule may not say read-only or writable (a legacy capsule; a
        # pyarrow.Tensor's), so a NumPy importer guesses (legacy capsules read-only
        # since NumPy 2, flagless versioned ones writable): the result is marked as
        # the plan says, read-only for immutable sources, writable for mutable ones
        # (MLX).
        mode |= _ROUTE["MARK_READONLY" if source.readonly == "immutable" else "MARK_WRITABLE"]
    if source.bit_views:
        mode |= _ROUTE["TORCH_BITS"]
    if read == _ROUTE["NDARRAY"] and target.readonly == "writable":
        mode |= _ROUTE["WRITABLE_ONLY"]  # read-only arrays: shared through a view
    return mode


def _remember_route(obj: Any, to: str | types.ModuleType, framework: type[Framework]) -> None:
    """From now on the compiled front door runs conversions of type(obj) to this
    target along a cached route (when the target has one)."""
    fast = framework.fast_target()
    if fast is None:
        return
    _core.set_fast_target(to, fast)
    mode = route_mode(obj, framework)
    if mode and mode not in (_ROUTE["SAME"], _ROUTE["TENSOR"]) and aborting_export_type(type(obj)):
        # Each object is asked first whether its export would abort the process.
        mode |= _ROUTE["CHECK_EXPORT"]
    if mode:
        fast.remember(type(obj), mode)


def explain(
    obj: Any,
    /,
    to: TargetName | types.ModuleType,
    *,
    dtype: Any = None,
    device: Any = None,
    copy: bool | None = None,
    requires_grad: bool | None = None,
    readonly: str = "share",
) -> Plan:
    """What ``convert(obj, to, ...)`` would do, as a `Plan` (printed nicely).

    Nothing is converted and a capsule is not consumed; errors `convert` would raise
    about the request are raised here too.
    """
    try:
        return _explain(obj, to, dtype, device, copy, requires_grad, readonly)
    except Exception as exc:
        said_by(exc, "explain()")
        raise


def _explain(
    obj: Any,
    to: Any,
    dtype: Any,
    device: Any,
    copy: bool | None,
    requires_grad: bool | None,
    readonly: str,
) -> Plan:
    framework = resolve_target(to)
    options = dtype is not None or device is not None or copy is not None
    options = options or requires_grad is not None or readonly != "share"
    itself = _itself(obj, framework, dtype, device, copy, requires_grad, readonly)
    if itself:
        # Described from its own metadata: it is not read (convert returns even what
        # DLPack could not export, such as strings, nulls or JAX tracers).
        notes = ["requires_grad is set on it, in place (as torch.asarray does)"]
        shape = getattr(obj, "shape", None)
        plan = Plan(
            source=f"{type(obj).__module__.split('.')[0]}.{type(obj).__qualname__}",
            target=framework.name,
            path=f"the source itself: already a {framework.name} array, with nothing to change",
            shares_memory=True,
            copies=[],
            notes=notes if itself == "set" else [],
            dtype=framework.dtype_name(obj),
            shape=tuple(shape) if shape is not None else (len(obj),),
            _framework=framework,
        )
        plan.route = _route_text(obj, framework, plan, None, options)
        return plan
    source = _read_source(obj, copy, consume=False, target=framework)
    plan = _make_plan(source, framework, dtype, device, copy, bool(requires_grad), readonly)
    plan.route = _route_text(obj, framework, plan, source.tensor, options, source.copied)
    return plan


_READERS = {
    _ROUTE["TENSOR"]: "the Tensor as it is",
    _ROUTE["NDARRAY"]: "NumPy's array struct",
    _ROUTE["TABLE"]: "its type's DLPack C exchange table",
    _ROUTE["PROTOCOL"]: "its __dlpack__",
}


def _route_text(
    obj: Any,
    framework: type[Framework],
    plan: Plan,
    t: Any,
    options: bool,
    read_copied: str | None = None,
) -> str:
    """What Plan.route says (see route_mode and docs/design.md, "Routes"); t is what
    the plan was made from, read_copied why reading the source copied it (a torch
    bit view, which routes leave to the planner)."""
    if options:
        return "planned on every call (an option is given)"
    fast = framework.fast_target()
    if fast is None:
        return f"planned on every call ({framework.name} has no route)"
    mode = route_mode(obj, framework)
    if mode == _ROUTE["SAME"]:
        return "in C after the first call: the source itself"
    if not mode:
        why = (
            "a capsule is read once"
            if _core.is_capsule(obj)
            else "the source needs fixing first, or is not a DLPack producer"
        )
        return f"planned on every call ({why})"
    # A carrier, a capsule or a _Handed was refused for this type: read here.
    refused = bool(mode & (_ROUTE["CARRY"] | _ROUTE["CAPSULE"])) and fast.uncarried(obj)
    if plan._on_stream_device:
        # A handoff gives device memory to the importer too (a table route
        # releases the managed tensor and hands the object over); carried and capsule
        # routes of __dlpack__ sources leave it to the planner.
        if (
            mode & _ROUTE["HANDOFF"]
            and not (
                mode & 7 == _ROUTE["PROTOCOL"] and mode & (_ROUTE["CAPSULE"] | _ROUTE["CARRY"])
            )
            and not refused
        ):
            return (
                f"in C after the first call: the source object goes to {framework.name}'s "
                "own importer, which makes the stream handshake"
            )
        return "planned on every call (device memory is asked for on the target's stream)"
    if mode & 7 == _ROUTE["PROTOCOL"] and fast.asks_device_first(obj):
        return "planned on every call (this type has exported device memory)"
    if refused:
        text = (
            f"in C after the first call: read through {_READERS[mode & 7]}, then made "
            f"by {framework.name} (data of this type was refused on the way to "
            f"{framework.name}'s importer before)"
        )
    elif mode & _ROUTE["CAPSULE"] and mode & 7 == _ROUTE["TABLE"]:
        text = (
            "in C after the first call: the source's managed tensor, from "
            f"{_READERS[mode & 7]}, goes to {framework.name}'s importer once it is checked "
            "(as a tensorbridge Tensor when it is out of the ordinary, such as empty)"
        )
    elif mode & _ROUTE["CAPSULE"]:
        text = (
            f"in C after the first call: the source is asked for a capsule as "
            f"{framework.name}'s importer asks it, and the capsule goes to that importer "
            "once it is checked (as a tensorbridge Tensor when it is out of the ordinary, "
            "such as empty)"
        )
    elif mode & _ROUTE["HANDOFF"]:
        text = (
            f"in C after the first call: the source object goes to {framework.name}'s own "
            "importer as it is"
        )
        if mode & _ROUTE["NO_NULLS"]:
            text += " (when it has no nulls)"
        elif mode & _ROUTE["COPY_FALSE"]:
            text += " (with copy=False, so it never asks the legacy way)"
        if read_copied:
            text += "; data it cannot take as it is (as here) is planned"
        return text
    elif mode & _ROUTE["CARRY"]:
        text = (
            f"in C after the first call: {framework.name}'s own importer asks the source, "
            "and gets the capsule once it is checked"
        )
    else:
        text = (
            f"in C after the first call: read through {_READERS[mode & 7]}, then made "
            f"by {framework.name}"
        )
    verdict = fast.verdict(t) if type(t) is Tensor and not read_copied else 0
    if verdict == 0:
        text += "; data it cannot take as it is (as here) is planned"
    elif verdict == 2:
        text += "; misaligned data (as here) is copied in C first"
    return text
