# SPDX-License-Identifier: Apache-2.0
"""`explain` is exactly `convert`: for every source kind, every installed
target and the layouts of the interop suite (tests/interop/test_convert_layouts.py),
what ``tb.explain(x, to)`` says is what ``tb.convert(x, to)`` then does.

The truth is measured, not planned: the result shares memory when the address of its
element 0 (read through DLPack) is the source's and, where the target's arrays can be
written, when a write through the result shows in the source (read back through the
source's own API). ``Plan.shares_memory`` must agree with both; ``Plan.dtype`` and
``Plan.shape`` must be the result's, and the result the target's own type (for PyArrow,
an Array or a Tensor as ``Plan.path`` says); ``explain`` raises exactly when ``convert``
does. Each case runs in several rounds on fresh sources (`ROUNDS`): by name and by
module, planner and compiled front door, ``copy=False`` and ``readonly="copy"``.

A source kind whose behaviour does not depend on the layout (Python values, bytes)
runs one or two shapes; a kind that cannot express a layout (a JAX array is never a
strided view, a legacy capsule never read-only) leaves it out. A mismatch found and
not yet fixed is a strict xfail in `MISMATCHES`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from needs import framework, needs

import tensorbridge as tb
from tensorbridge._cli.probes import pointer, probe
from tensorbridge._core import inspect_capsule
from tensorbridge._frameworks import FRAMEWORKS, framework_of, names

#: Every installed bridge target but those that need a GPU.
TARGETS = names(gpu=False)

#: Targets whose arrays can never be written in place (a write through them cannot be
#: seen anywhere): for these only the addresses are compared. MLX's item assignment
#: gives the array new memory (probe("mlx").write_first).
IMMUTABLE_TARGETS = frozenset({"jax", "tensorflow", "pyarrow", "mlx"})


@dataclasses.dataclass
class Source:
    """One source object and the means to tell whether a result shares its memory."""

    obj: Any
    #: Address of element 0 of the source's memory (None: it has none, e.g. a list).
    address: int | None
    #: Element 0 read through the source's own API (None with `address`).
    read: Callable[[], Any] | None
    #: Whether the source holds any element (sharing cannot be seen in nothing).
    size: int
    #: What must stay alive while the result is checked (the memory behind a capsule).
    keep: Any = None


def _index(ndim: int) -> tuple[int, ...]:
    return (0,) * ndim


# --------------------------------------------------------------------------
# NumPy layouts, and the source kinds built on them
# --------------------------------------------------------------------------


def _aligned(n: int, offset_bytes: int = 0) -> np.ndarray:
    """Fresh float32 memory with the values 1..n, `offset_bytes` past a 64-byte boundary
    (JAX and TensorFlow share only 64-byte aligned memory)."""
    raw = np.empty(n + 32, dtype=np.float32)
    start = ((-raw.ctypes.data) % 64 + offset_bytes) // 4
    a = raw[start : start + n]
    a[...] = np.arange(1, n + 1, dtype=np.float32)
    return a


def _base() -> np.ndarray:
    return _aligned(24).reshape(4, 6)


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


#: The interop suite's layouts (test_convert_layouts.NUMPY_LAYOUTS), in 64-byte aligned
#: memory where the layout allows it, and the contiguous cases on both sides of the
#: alignment JAX and TensorFlow need.
NUMPY_LAYOUTS: dict[str, Callable[[], np.ndarray]] = {
    "contiguous": _base,
    "unaligned": lambda: _aligned(24, 16).reshape(4, 6),
    "0-d": lambda: np.array(3.5, dtype=np.float32),
    "0-d view": lambda: _base()[1, 2, ...],
    "size-0": lambda: _base()[:0],
    "size-0 middle": lambda: np.zeros((2, 0, 3), dtype=np.float32),
    "transposed": lambda: _base().T,
    "step-sliced": lambda: _base().reshape(-1)[::3],
    "negative stride": lambda: _base()[:, ::-1],
    "offset view": lambda: _base()[1:, 2:],
    "broadcast": lambda: np.broadcast_to(_base()[0], (3, 6)),
    "read-only": lambda: _readonly(_base()),
    "read-only negative": lambda: _readonly(_base().reshape(-1))[::-2],
}
READONLY_LAYOUTS = frozenset({"broadcast", "read-only", "read-only negative"})
ALL_NUMPY = tuple(NUMPY_LAYOUTS)
WRITABLE_NUMPY = tuple(n for n in ALL_NUMPY if n not in READONLY_LAYOUTS)


def _over_numpy(view: np.ndarray, obj: Any, exported: Any = None) -> Source:
    """A source whose memory is `view`'s, read back through NumPy; `exported` (a
    DLPack object or capsule made from view) must not have copied it."""
    if exported is not None and view.size:
        address = _exported_address(exported)
        assert address == view.ctypes.data, "making the source copied the data"
    idx = _index(view.ndim)
    return Source(
        obj,
        view.ctypes.data if view.size else None,
        lambda: view[idx].item(),
        view.size,
        keep=view,
    )


def _exported_address(obj: Any) -> int | None:
    """Element 0 of a capsule (read, not consumed), or of a DLPack object's export."""
    if type(obj).__name__ == "PyCapsule":
        info = inspect_capsule(obj)
        return int(info["data"] + info["byte_offset"])
    return pointer(obj)


def _numpy(layout: str) -> Source:
    if layout == "numpy scalar":  # a value, not memory: always a copy
        value = _base()[1, 2]
        return Source(value, None, None, 1)
    view = NUMPY_LAYOUTS[layout]()
    return _over_numpy(view, view)


def _tensorbridge(layout: str) -> Source:
    view = NUMPY_LAYOUTS[layout]()
    t = tb.asarray(view)
    return _over_numpy(view, t, exported=t)


def _memoryview(layout: str) -> Source:
    view = NUMPY_LAYOUTS[layout]()
    return _over_numpy(view, memoryview(view))


def _capsule_versioned(layout: str) -> Source:
    view = NUMPY_LAYOUTS[layout]()
    capsule = view.__dlpack__(max_version=(1, 0))
    return _over_numpy(view, capsule, exported=capsule)


def _capsule_legacy(layout: str) -> Source:
    view = NUMPY_LAYOUTS[layout]()
    capsule = tb.to_dlpack(view)
    return _over_numpy(view, capsule, exported=capsule)


def _capsule_of_tensor(layout: str) -> Source:
    view = NUMPY_LAYOUTS[layout]()
    capsule = tb.asarray(view).__dlpack__(max_version=(1, 3))
    return _over_numpy(view, capsule, exported=capsule)


def _array_api_strict(layout: str) -> Source:
    xp = framework("array_api_strict")
    view = NUMPY_LAYOUTS[layout]()
    x = xp.asarray(view)
    return _over_numpy(view, x, exported=x)


def _tvm_ffi(layout: str) -> Source:
    tvm_ffi = framework("tvm_ffi")
    view = NUMPY_LAYOUTS[layout]()
    x = tvm_ffi.from_dlpack(view)
    return _over_numpy(view, x, exported=x)


# --------------------------------------------------------------------------
# The frameworks' own tensors
# --------------------------------------------------------------------------


def _own(obj: Any, address: int | None, ndim: int, size: int, read: Callable[[Any], Any]) -> Source:
    """A framework tensor, read back through the framework's own indexing."""
    idx = _index(ndim)
    return Source(obj, address if size else None, lambda: read(obj[idx]), size)


def _torch(layout: str) -> Source:
    torch = framework("torch")
    base = torch.arange(1, 25, dtype=torch.float32).reshape(4, 6)
    x = {
        "contiguous": lambda: base,
        "unaligned": lambda: base.reshape(-1)[4:],
        "0-d": lambda: torch.tensor(3.5),
        "0-d view": lambda: base[1, 2],
        "size-0": lambda: base[:0],
        "transposed": lambda: base.t(),
        "step-sliced": lambda: base.reshape(-1)[::3],
        "offset view": lambda: base[1:, 2:],
        "neg-bit view": lambda: (torch.arange(1.0, 4.0) * (1 + 1j)).conj().imag,
        "conjugate view": lambda: (torch.arange(1.0, 4.0) * (1 + 1j)).conj(),
        "requires grad": lambda: torch.arange(1.0, 4.0).requires_grad_(),
    }[layout]()
    return _own(x, x.data_ptr(), x.ndim, x.numel(), lambda e: e.detach().item())


TORCH_LAYOUTS = (
    "contiguous",
    "unaligned",
    "0-d",
    "0-d view",
    "size-0",
    "transposed",
    "step-sliced",
    "offset view",
    "neg-bit view",
    "conjugate view",
    "requires grad",
)


def _jax(layout: str) -> Source:
    framework("jax")
    probe("jax").prepare()
    import jax.numpy as jnp

    x = {
        "contiguous": lambda: jnp.arange(1, 25, dtype=jnp.float32).reshape(4, 6),
        "0-d": lambda: jnp.asarray(3.5, dtype=jnp.float32),
        "size-0": lambda: jnp.zeros((0, 6), dtype=jnp.float32),
    }[layout]()
    return _own(x, pointer(x), x.ndim, x.size, lambda e: e.item())


JAX_LAYOUTS = ("contiguous", "0-d", "size-0")


def _paddle(layout: str) -> Source:
    paddle = framework("paddle")
    base = paddle.arange(1, 25, dtype="float32").reshape([4, 6])
    x = {
        "contiguous": lambda: base,
        "0-d": lambda: paddle.to_tensor(3.5, dtype="float32"),
        "0-d view": lambda: base[1, 2],
        "size-0": lambda: base[:0],
        "transposed": lambda: base.T,
        "step-sliced": lambda: base.reshape([-1])[::3],
        "negative stride": lambda: base[:, ::-1],
        "offset view": lambda: base[1:, 2:],
    }[layout]()
    return _own(x, pointer(x), x.ndim, int(x.size), lambda e: e.item())


PADDLE_LAYOUTS = (
    "contiguous",
    "0-d",
    "0-d view",
    "size-0",
    "transposed",
    "step-sliced",
    "negative stride",
    "offset view",
)


def _tensorflow(layout: str) -> Source:
    tf = framework("tensorflow")
    if layout == "variable":
        v = tf.Variable(np.arange(1, 25, dtype=np.float32).reshape(4, 6))
        # The variable's memory, as its value tensor exports it.
        return _own(v, pointer(v.read_value()), 2, 24, lambda e: e.numpy().item())
    x = {
        "contiguous": lambda: tf.reshape(tf.range(1, 25, dtype=tf.float32), (4, 6)),
        "0-d": lambda: tf.constant(3.5, dtype=tf.float32),
        "size-0": lambda: tf.zeros((0, 6), dtype=tf.float32),
    }[layout]()
    return _own(x, pointer(x), x.ndim, int(tf.size(x)), lambda e: e.numpy().item())


TENSORFLOW_LAYOUTS = ("contiguous", "0-d", "size-0", "variable")


def _mlx(layout: str) -> Source:
    mx = framework("mlx")
    base = mx.arange(1, 25, dtype=mx.float32).reshape(4, 6)
    x = {
        "contiguous": lambda: base,
        "0-d": lambda: mx.array(3.5, dtype=mx.float32),
        "0-d view": lambda: base[1, 2],
        "size-0": lambda: base[:0],
        "transposed": lambda: base.T,
        "step-sliced": lambda: base.reshape(-1)[::3],
        "negative stride": lambda: base[:, ::-1],
        "offset view": lambda: base[1:, 2:],
    }[layout]()
    mx.eval(x)
    return _own(x, pointer(x), x.ndim, x.size, lambda e: e.item())


MLX_LAYOUTS = PADDLE_LAYOUTS


def _pyarrow(layout: str) -> Source:
    pa = framework("pyarrow")
    if layout == "bool":
        x = pa.array([False, True, True])
        return Source(x, None, None, len(x))  # bit-packed: element 0 has no address
    x = {
        "contiguous": lambda: pa.array(_aligned(12)),
        "offset view": lambda: pa.array(_aligned(12)).slice(3),
        "size-0": lambda: pa.array(np.zeros(0, dtype=np.float32)),
        "tensor": lambda: pa.Tensor.from_numpy(_base()),
        "tensor transposed": lambda: pa.Tensor.from_numpy(_base().T),
    }[layout]()
    if layout.startswith("tensor"):
        return _over_numpy(x.to_numpy(), x, exported=x)  # to_numpy: a view
    return Source(x, pointer(x) if len(x) else None, lambda: x[0].as_py(), len(x))


PYARROW_LAYOUTS = ("contiguous", "offset view", "size-0", "bool", "tensor", "tensor transposed")


def _chunked(layout: str) -> Source:
    pa = framework("pyarrow")
    x = {
        "one chunk": lambda: pa.chunked_array([pa.array(_aligned(12))]),
        "one chunk, offset": lambda: pa.chunked_array([pa.array(_aligned(12)).slice(3)]),
        "table column": lambda: pa.table({"c": pa.array(_aligned(12))}).column("c"),
        "several chunks": lambda: pa.chunked_array([pa.array(_aligned(6)), pa.array(_aligned(6))]),
        "no chunks": lambda: pa.chunked_array([], type=pa.float32()),
    }[layout]()
    address = pointer(x.chunk(0)) if len(x) else None
    return Source(x, address, lambda: x[0].as_py(), len(x))


CHUNKED_LAYOUTS = ("one chunk", "one chunk, offset", "table column", "several chunks", "no chunks")


def _buffer(layout: str) -> Source:
    """bytes (read-only) and bytearray (writable): uint8, 1-d, contiguous; other layouts
    of buffers are the `memoryview` kind."""
    data = bytes(np.arange(1, 9, dtype=np.uint8).tobytes())  # fresh memory: written into
    obj = bytearray(data) if layout == "bytearray" else data
    view = np.frombuffer(obj, dtype=np.uint8)
    return Source(obj, view.ctypes.data, lambda: view[0].item(), view.size, keep=view)


BUFFER_LAYOUTS = ("bytes", "bytearray")


def _sequence(layout: str) -> Source:
    obj = {
        "list": lambda: [1.0, 2.0, 3.0],
        "nested list": lambda: [[1, 2, 3], [4, 5, 6]],
        "tuple": lambda: (1.0, 2.0),
        "float": lambda: 3.5,
        "empty list": lambda: [],
    }[layout]()
    return Source(obj, None, None, int(np.asarray(obj).size))


SEQUENCE_LAYOUTS = ("list", "nested list", "tuple", "float", "empty list")


#: source kind -> (framework it needs, or None; its builder; the layouts it can express).
KINDS: dict[str, tuple[str | None, Callable[[str], Source], tuple[str, ...]]] = {
    "numpy": (None, _numpy, (*ALL_NUMPY, "numpy scalar")),
    "tensorbridge": (None, _tensorbridge, ALL_NUMPY),
    "memoryview": (None, _memoryview, ALL_NUMPY),
    "bytes": (None, _buffer, BUFFER_LAYOUTS),
    "capsule numpy versioned": (None, _capsule_versioned, ALL_NUMPY),
    # Legacy capsules cannot say read-only: tb.to_dlpack refuses read-only data.
    "capsule tb.to_dlpack": (None, _capsule_legacy, WRITABLE_NUMPY),
    "capsule Tensor.__dlpack__": (None, _capsule_of_tensor, ALL_NUMPY),
    "sequence": (None, _sequence, SEQUENCE_LAYOUTS),
    "torch": ("torch", _torch, TORCH_LAYOUTS),
    "jax": ("jax", _jax, JAX_LAYOUTS),
    "paddle": ("paddle", _paddle, PADDLE_LAYOUTS),
    "tensorflow": ("tensorflow", _tensorflow, TENSORFLOW_LAYOUTS),
    "mlx": ("mlx", _mlx, MLX_LAYOUTS),
    "pyarrow": ("pyarrow", _pyarrow, PYARROW_LAYOUTS),
    "pyarrow chunked": ("pyarrow", _chunked, CHUNKED_LAYOUTS),
    "array_api_strict": ("array_api_strict", _array_api_strict, ALL_NUMPY),
    # tvm_ffi.from_dlpack asks NumPy for a legacy capsule, which read-only data refuses.
    "tvm_ffi": ("tvm_ffi", _tvm_ffi, WRITABLE_NUMPY),
}

#: (kind, layout, target) -> why explain and convert disagree there (issue 12): a strict
#: xfail, so the mismatch stays recorded until it is fixed.
MISMATCHES: dict[tuple[str, str, str], str] = {}


def _cases() -> list[Any]:
    cases = []
    for kind, (needed, _, layouts) in KINDS.items():
        for layout in layouts:
            for target in TARGETS:
                marks = [needs(target)] if needed is None else [needs(needed, target)]
                reason = MISMATCHES.get((kind, layout, target))
                if reason is not None:
                    marks.append(pytest.mark.xfail(strict=True, reason=reason))
                cases.append(
                    pytest.param(kind, layout, target, marks=marks, id=f"{kind}-{layout}-{target}")
                )
    return cases


# --------------------------------------------------------------------------
# The result: its address, and a write through it
# --------------------------------------------------------------------------


def _result_address(result: Any) -> int:
    address = pointer(result)
    assert address is not None, f"cannot read the address of a {type(result).__name__}"
    return address


def _element(target: str, result: Any) -> Any:
    """Element 0 of a writable target's array, read through the target's own API."""
    idx = _index(result.ndim)
    if target == "tvm_ffi":
        return np.from_dlpack(result)[idx].item()
    if target == "array_api_strict":
        return result._array[idx].item()
    return result[idx].item()


def _write(target: str, result: Any, value: int) -> bool:
    """Write value into element 0 of result through the target's own API; True when
    the write took (element 0 of the result now reads value).

    False where the target's arrays cannot be written (immutable frameworks, read-only
    results), and where the write is lost: Paddle drops writes into a tensor with a
    zero stride (a broadcast source), so only the addresses tell there.
    (probe(target).write_first writes ``obj[0]``, which 0-d arrays and
    array-api-strict's n-d arrays refuse: every axis is indexed here.)
    """
    if target in IMMUTABLE_TARGETS:
        return False
    idx = _index(result.ndim)
    if target == "numpy":
        if not result.flags.writeable:
            return False
        result[idx] = value
    elif target == "torch":
        torch = importlib.import_module("torch")
        with torch.no_grad():
            result[idx] = value
    elif target == "paddle":
        result[idx] = value
    elif target == "array_api_strict":
        if not result._array.flags.writeable:  # read-only data stays read-only
            return False
        result[idx] = value
    elif target == "tvm_ffi":
        np.from_dlpack(result)[idx] = value
    elif target == "tensorbridge":
        if result.readonly:
            return False
        result[idx] = value
    else:
        raise AssertionError(f"no writer for {target}")
    return bool(_element(target, result) == value)


def _check_kind(target: str, result: Any, plan: Any) -> None:
    """The result is the target's own type, of the kind the plan's path names."""
    if target == "tensorbridge":
        assert type(result) is tb.Tensor
    else:
        assert framework_of(result) is FRAMEWORKS[target], type(result)
    if target == "pyarrow":  # "pyarrow.Array.from_dlpack (1-d) or pyarrow.Tensor..."
        assert type(result).__name__.endswith("Array" if len(plan.shape) == 1 else "Tensor")


def _shape(target: str, result: Any) -> tuple[int, ...]:
    if target == "pyarrow" and hasattr(result, "to_pylist"):
        return (len(result),)
    return tuple(int(n) for n in result.shape)


# --------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------


def _check_once(source: Source, target: str, to: Any, value: int, options: dict[str, Any]) -> None:
    try:
        plan = tb.explain(source.obj, to, **options)
    except Exception as exc:
        with pytest.raises(type(exc)):
            tb.convert(source.obj, to, **options)
        return
    result = tb.convert(source.obj, to, **options)  # raising: explain did not say so
    said = str(plan)
    if options.get("copy") is False:
        assert plan.shares_memory, said
    assert probe(target).dtype_name(result) == plan.dtype, said
    assert _shape(target, result) == plan.shape, said
    _check_kind(target, result, plan)
    if not source.size:
        return  # sharing nothing cannot be seen
    itself = result is source.obj  # the target's own array, with nothing to change
    assert itself == plan.path.startswith("the source itself"), said
    if source.address is None:
        # Values, not memory (a list, a NumPy scalar, Arrow booleans): nothing to share,
        # unless the result is the source itself.
        assert plan.shares_memory == itself, said
        return
    # (torch cannot export a tensor that requires grad: its address is the source's)
    same_address = itself or _result_address(result) == source.address
    assert source.read is not None
    before = source.read()
    wrote = _write(target, result, value)
    seen = wrote and source.read() != before
    if plan.shares_memory:
        assert same_address, f"explain says shared; the result has other memory\n{said}"
        assert not wrote or seen, f"explain says shared; a write did not go through\n{said}"
    else:
        assert not same_address, f"explain says copied; the result has the same address\n{said}"
        assert not seen, f"explain says copied; a write reached the source\n{said}"


#: (value written, target given as its module, keywords) per round, each on a fresh
#: source. The first conversion to a target may go through the planner, the second goes
#: through the compiled front door (which answers once the planner has converted to that
#: target, by name or by module: the module round runs after other tests did both);
#: copy=False must be refused by explain exactly when convert refuses it; readonly="copy"
#: is the private copy of read-only data. No source holds these values at element 0.
ROUNDS: tuple[tuple[int, bool, dict[str, Any]], ...] = (
    (77, False, {}),
    (99, False, {}),
    (33, True, {}),
    (55, False, {"copy": False}),
    (66, False, {"readonly": "copy"}),
)


@pytest.mark.parametrize(("kind", "layout", "target"), _cases())
def test_explain_is_what_convert_does(kind, layout, target):
    module = framework(target)
    probe(target).prepare()
    _, build, _ = KINDS[kind]
    for value, by_module, options in ROUNDS:
        _check_once(build(layout), target, module if by_module else target, value, options)
