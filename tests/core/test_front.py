# SPDX-License-Identifier: Apache-2.0
"""The compiled front doors (_front.pxi): convert's fast path gives what the planner
gives, and is taken for plain data only."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from needs import needs

import tensorbridge as tb
from tensorbridge import _core


def _sources():
    ro = np.arange(6.0)
    ro.flags.writeable = False
    return {
        "contiguous": np.arange(6.0),
        "2-d": np.arange(6, dtype=np.int32).reshape(2, 3),
        "transposed": np.arange(6.0).reshape(2, 3).T,
        "step slice": np.arange(12.0)[::3],
        "negative": np.arange(6.0)[::-1],
        "read-only": ro,
        "offset": np.arange(10, dtype=np.int16)[3:7],
        "0-d": np.array(2.5),
        "size-0": np.zeros((0, 2)),
        "bool": np.array([True, False]),
        "uint16": np.arange(3, dtype=np.uint16),
        "tensor": tb.arange(4, dtype="float32"),
        "tensor offset": tb.arange(8, dtype="float32")[2:],
    }


def _readonly(a):
    a.flags.writeable = False
    return a


# Every CPU framework has a cached route (_routes.pxi).
FAST_TARGETS = [
    "torch",
    "paddle",
    "numpy",
    "tensorbridge",
    "jax",
    "tensorflow",
    "mlx",
    "pyarrow",
    "array_api_strict",
    "tvm_ffi",
]


@pytest.mark.parametrize("target", [pytest.param(t, marks=needs(t)) for t in FAST_TARGETS])
@pytest.mark.parametrize("case", list(_sources()))
def test_fast_convert_agrees_with_the_planner(target, case):
    from tensorbridge._convert import convert_general

    source = _sources()[case]
    ptr = tb.asarray(source).data_ptr() if getattr(source, "size", 1) else None
    try:
        want = convert_general(source, target)  # the planner; registers the fast target
    except BufferError as exc:
        with pytest.raises(BufferError, match=re.escape(str(exc))):
            tb.convert(source, target)
        return
    try:
        got = tb.convert(source, target)
    except BufferError as exc:
        pytest.fail(f"the planner converted this, the route raised {exc}")
    assert type(got) is type(want)
    from tensorbridge._frameworks import FRAMEWORKS

    name_of = FRAMEWORKS[target].dtype_name
    assert name_of(got) == name_of(want)
    if target == "pyarrow" and case == "bool":  # bit-packed: no DLPack export to compare
        assert got.equals(want)
        return
    mine, theirs = tb.asarray(got), tb.asarray(want)
    assert list(mine.shape) == list(theirs.shape)
    assert mine.readonly == theirs.readonly
    assert np.array_equal(np.asarray(mine), np.asarray(theirs))
    if ptr is not None and source.size:
        assert (mine.data_ptr() == ptr) == (theirs.data_ptr() == ptr)


@needs("torch")
def test_fast_convert_is_taken_for_plain_data_only():
    import torch

    _core.clear_routes()  # (a torch tensor converted to torch before has a route: itself)
    tb.convert(np.arange(2.0), "torch")  # registers the target
    from tensorbridge._frameworks import FRAMEWORKS

    fast = FRAMEWORKS["torch"].fast_target()
    assert _core._fast_convert(fast, np.arange(3.0)) is not None
    assert _core._fast_convert(fast, np.arange(3.0)[::-1]) is None  # torch: no negative
    ro = _readonly(np.arange(3.0))  # read-only: shared writable (readonly="share")
    shared = _core._fast_convert(fast, ro)
    assert shared is not None and shared.data_ptr() == ro.ctypes.data
    assert tb.convert(ro, "torch", readonly="copy").data_ptr() != ro.ctypes.data
    assert _core._fast_convert(fast, [1.0, 2.0]) is None  # values: the planner
    z = torch.tensor([1 + 2j]).conj().imag
    assert _core._fast_convert(fast, z) is None  # torch bit views: the planner copies
    assert tb.convert(z, "torch").tolist() == [-2.0]


@needs("torch")
def test_convert_with_options_is_planned():
    import torch

    a = np.arange(3.0)
    tb.convert(a, "torch")
    assert tb.convert(a, "torch", copy=True).data_ptr() != a.ctypes.data
    assert tb.convert(a, "torch", dtype="float32").dtype == torch.float32
    with pytest.raises(ValueError, match='readonly must be "share" or "copy"'):
        tb.convert(a, "torch", readonly="strict")  # an option: the planner checks it
    assert tb.convert(a, torch).data_ptr() == a.ctypes.data  # a module as target
    w = tb.convert(a, "torch", requires_grad=True)
    assert w.requires_grad and w.is_leaf


# -- convert's C door (_door.h) ------------------------------------------------


def test_convert_door_keeps_the_python_signature_and_identity():
    import inspect
    import pickle

    params = inspect.signature(tb.convert).parameters
    assert list(params) == ["obj", "to", "dtype", "device", "copy", "requires_grad", "readonly"]
    assert params["obj"].kind is inspect.Parameter.POSITIONAL_ONLY
    assert params["to"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert params["readonly"].default == "share" and params["copy"].default is None
    assert tb.convert.__doc__.startswith("Convert ``obj`` into framework ``to``")
    assert tb.convert.__name__ == "convert" and tb.convert.__module__ == "tensorbridge"
    assert pickle.loads(pickle.dumps(tb.convert)) is tb.convert


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: tb.convert(np.arange(2.0)), "convert() takes exactly 2 positional"),
        (lambda: tb.convert(np.arange(2.0), "numpy", None), "convert() takes exactly 2"),
        (lambda: tb.convert(np.arange(2.0), "numpy", dtyp=1), "unexpected keyword"),
        (lambda: tb.convert(obj=np.arange(2.0), to="numpy"), "convert() takes exactly 2"),
    ],
)
def test_convert_door_passes_other_calls_to_the_python_signature(call, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        call()


def test_convert_door_runs_keyword_and_two_argument_calls_alike():
    a = np.arange(4.0)
    for _ in range(3):  # the first call plans; later ones run the cached route
        assert tb.convert(a, "numpy") is a and tb.convert(a, to="numpy") is a
        assert tb.convert(a, "numpy", readonly="share") is a
        assert tb.convert(a, "tensorbridge").data_ptr() == a.ctypes.data


class _Raises:
    """A producer whose __dlpack__ raises what it is given."""

    def __init__(self, exc):
        self.exc = exc

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        raise self.exc


def test_convert_door_names_errors_as_the_python_signature_does():
    with pytest.raises(ValueError, match=r"^convert\(\): unknown target framework 'nope'"):
        tb.convert(np.arange(2.0), "nope")
    with pytest.raises(RuntimeError, match=r"^convert\(\): .*broken producer") as info:
        tb.convert(_Raises(RuntimeError("broken producer")), "numpy")
    assert info.value.__traceback__ is not None
    # Not an Exception: passed as it is (the Python signature's except clause alike).
    stop = KeyboardInterrupt("stop")
    with pytest.raises(KeyboardInterrupt) as caught:
        tb.convert(_Raises(stop), "numpy")
    assert caught.value is stop and str(stop) == "stop"


class _Unnamable(Exception):
    """An exception that refuses to be named convert()'s (its args setter raises)."""

    @property
    def args(self):
        return self.__dict__.get("_args", ("x",))

    @args.setter
    def args(self, value):
        if value and str(value[0]).startswith("convert(): "):
            raise LookupError("cannot be renamed")
        self.__dict__["_args"] = value


class _ArrayRaises:
    def __init__(self, exc):
        self.exc = exc

    def __array__(self, *args, **kwargs):
        raise self.exc


@pytest.mark.parametrize("options", [{}, {"copy": True}], ids=["door", "signature"])
def test_convert_door_gives_a_naming_failure_the_original_as_context(options):
    # Both doors: the naming error propagates, the original as its context.
    original = _Unnamable()
    with pytest.raises(LookupError, match=r"^cannot be renamed$") as info:
        tb.convert(_ArrayRaises(original), "numpy", **options)
    assert info.value.__context__ is original
    assert info.value.__traceback__ is not None


class _UnnamableInside(Exception):
    """Its args setter raises while handling another exception, or raises itself."""

    def __init__(self, how):
        super().__init__("x")
        self.how = how

    @property
    def args(self):
        return self.__dict__.get("_args", ("x",))

    @args.setter
    def args(self, value):
        if not (value and str(value[0]).startswith("convert(): ")):
            self.__dict__["_args"] = value
        elif self.how == "nested":
            try:
                raise KeyError("inner")
            except KeyError:
                raise LookupError("cannot be renamed") from None
        else:
            raise self


def _chain(exc):
    seen = []
    while exc is not None and len(seen) < 10:
        seen.append(type(exc).__name__)
        exc = exc.__context__
    return seen


@pytest.mark.parametrize("how", ["nested", "itself"])
def test_convert_door_chains_a_naming_failure_as_the_python_signature_does(how):
    chains = []
    for options in ({}, {"copy": None}):  # the C door, then Cython's signature
        try:
            raise OSError("the caller's own")
        except OSError:
            with pytest.raises(Exception) as info:
                tb.convert(_ArrayRaises(_UnnamableInside(how)), "numpy", **options)
            assert isinstance(sys.exc_info()[1], OSError)  # the caller's, restored
        chains.append(_chain(info.value))
        assert info.value.__context__ is not info.value
    assert chains[0] == chains[1]
