# SPDX-License-Identifier: Apache-2.0
"""Producers and consumers graded by the tests of tensorbridge.testing: importable by
name (``testing.subjects:...``), so the checker can probe them in child processes."""

from __future__ import annotations

from typing import Any

import numpy as np

import tensorbridge as tb
from tensorbridge.testing import CASES


def tensorbridge_tensor(case: str = "float32") -> Any:
    return tb.asarray(CASES[case]())


def numpy_array(case: str = "float32") -> Any:
    return CASES[case]()


# ---------------------------------------------------------------------------------------
# Producers that break one rule each (a Wrapped tensorbridge Tensor, altered)

import os  # noqa: E402
import time  # noqa: E402

from tensorbridge import _core, _testing  # noqa: E402


class Wrapped:
    """Delegates to a tensorbridge Tensor; subclasses break one rule."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.t = tb.asarray(array)

    def __dlpack_device__(self) -> Any:
        return self.t.__dlpack_device__()

    def __dlpack__(self, **kw: Any) -> Any:
        return self.t.__dlpack__(**kw)

    def craft(self, **fields: Any) -> Any:
        a = self.array
        base: dict[str, Any] = dict(
            shape=a.shape,
            strides=tuple(s // a.itemsize for s in a.strides),
            dtype=(2, 32, 1),
            owner=a,
        )
        base.update(fields)
        return _testing.make_capsule(base.pop("data", a.ctypes.data), **base)[0]


def wrapped(cls: type[Wrapped]) -> Any:
    def make(case: str = "float32") -> Any:
        return cls(CASES[case]())

    return make


class DeviceNone(Wrapped):
    def __dlpack_device__(self) -> Any:
        return (1, None)


class AlwaysVersioned(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        kw["max_version"] = (1, 3)
        return self.t.__dlpack__(**kw)


class NoMaxVersion(Wrapped):
    def __dlpack__(self, stream: Any = None) -> Any:
        return self.t.__dlpack__()


class NoStream(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if "stream" in kw:
            raise RuntimeError("no stream")
        return self.t.__dlpack__(**kw)


class NoDlDevice(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if kw.get("dl_device") is not None:
            raise BufferError("no dl_device")
        return self.t.__dlpack__(**kw)


class CopyIgnored(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        kw.pop("copy", None)
        return self.t.__dlpack__(**kw)


class CopyFalseCopies(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if kw.get("copy") is False:
            kw["copy"] = True
        return self.t.__dlpack__(**kw)


class SameCapsule(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if not hasattr(self, "capsule"):
            self.capsule = self.t.__dlpack__(**kw)
        return self.capsule


def _crafting(**fields: Any) -> type[Wrapped]:
    class Crafted(Wrapped):
        def __dlpack__(self, **kw: Any) -> Any:
            versioned = kw.get("max_version") is not None
            extra = dict(fields) if versioned else {}
            return self.craft(versioned=versioned, **extra)

    return Crafted


# make() only (no cases): float32 crafted capsules with one field wrong
NullStrides = _crafting(strides=None)
Version2 = _crafting(version=(2, 0))
UnknownDType = _crafting(dtype=(99, 32, 1))
WrongDevice = _crafting(device=(3, 0))
NegativeNdim = _crafting(ndim=-1)
NullData = _crafting(data=0)
UnknownFlags = _crafting(flags=1 << 10)


def float32_only(cls: type[Wrapped]) -> Any:
    def make() -> Any:
        return cls(CASES["float32"]())

    return make


class WrongValues(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        return tb.asarray(np.ascontiguousarray(self.array) + 1).__dlpack__(**kw)


class DropsReadOnly(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        return self.craft(versioned=kw.get("max_version") is not None, dtype=_dl(self.array))


def _dl(a: np.ndarray) -> tuple[int, int, int]:
    return ({"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}[a.dtype.kind], a.itemsize * 8, 1)


_kept: list[Any] = []


class Leaky(Wrapped):
    """Its exports keep the object alive for ever (the counters are never dropped)."""

    def __dlpack__(self, **kw: Any) -> Any:
        capsule, counter = _testing.make_capsule(
            self.array.ctypes.data, shape=(3, 4), strides=(4, 1), owner=self, deleter=False
        )
        _kept.append(counter)
        return capsule


class NullFunctionTable(Wrapped):
    __dlpack_c_exchange_api__ = _testing.exchange_table("null-fn")


class WrongNameTable(Wrapped):
    __dlpack_c_exchange_api__ = _testing.exchange_table("wrong-name")


class AbortsOnCopy(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if kw.get("copy"):
            os.abort()
        return self.t.__dlpack__(**kw)


class HangsOnStream(Wrapped):
    def __dlpack__(self, **kw: Any) -> Any:
        if "stream" in kw:
            time.sleep(600)
        return self.t.__dlpack__(**kw)


# ---------------------------------------------------------------------------------------
# Consumers that break one rule each


def no_retry(x: Any) -> Any:
    return tb.from_dlpack(x.__dlpack__(max_version=(1, 3)))


def versioned_names_only(x: Any) -> Any:
    capsule = x.__dlpack__(max_version=(1, 3))
    if _testing.capsule_name(capsule) != "dltensor_versioned":
        raise ValueError("PyCapsule_GetPointer called with incorrect name")
    return tb.from_dlpack(capsule)


def ignores_byte_offset(x: Any) -> Any:
    capsule = x.__dlpack__(max_version=(1, 3))
    info = _core.inspect_capsule(capsule)
    t = tb.from_dlpack(capsule)
    if info["byte_offset"]:
        return np.array(tb.from_dlpack(t).flatten())[: t.size - 4].copy()
    return t


def deletes_without_renaming(x: Any) -> Any:
    capsule = x.__dlpack__(max_version=(1, 3))
    name = _testing.capsule_name(capsule)
    t = tb.from_dlpack(capsule)
    values = np.array(t)
    del t  # the deleter runs
    _testing.set_capsule_name(capsule, name)  # as if never renamed
    return values


def ignores_read_only(x: Any) -> Any:
    return _core.set_readonly(tb.from_dlpack(x), False)


def cuda_as_cpu(x: Any) -> Any:
    if int(x.__dlpack_device__()[0]) != 1:
        return np.zeros((3, 4), np.float32)
    return tb.from_dlpack(x)


def takes_used(x: Any) -> Any:
    if _core.is_capsule(x):
        name = _testing.capsule_name(x)
        if name.startswith("used_"):
            _testing.set_capsule_name(x, name.removeprefix("used_"))
    return tb.from_dlpack(x)


def accepts_malformed(x: Any) -> Any:
    try:
        return tb.from_dlpack(x)
    except BufferError:
        return np.zeros(())


def aborts_on_negative_strides(x: Any) -> Any:
    info = _core.inspect_capsule(x.__dlpack__(max_version=(1, 3)))
    if any(s < 0 for s in info.get("strides") or ()):
        os.abort()
    return tb.from_dlpack(x)


def hangs_on_zero_strides(x: Any) -> Any:
    info = _core.inspect_capsule(x.__dlpack__(max_version=(1, 3)))
    if 0 in (info.get("strides") or ()):
        time.sleep(600)
    return tb.from_dlpack(x)


def aborts_on_copy() -> Any:
    return AbortsOnCopy(CASES["float32"]())


def hangs_on_stream() -> Any:
    return HangsOnStream(CASES["float32"]())


def torch_tensor() -> Any:
    import torch

    return torch.arange(12, dtype=torch.float32).reshape(3, 4)


# ---------------------------------------------------------------------------------------
# More that break one rule each (the checks added for `tensorbridge check --all`)

import ctypes  # noqa: E402
import threading  # noqa: E402

_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_callbacks: list[Any] = []


def _managed(capsule: Any) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address: int = get(capsule, _testing.capsule_name(capsule).encode())
    return address


def _deleter_field(capsule: Any) -> ctypes.c_void_p:
    """The deleter field of a capsule's managed struct (versioned or legacy)."""
    offset = 16 if _testing.capsule_name(capsule) == "dltensor_versioned" else 56
    return ctypes.c_void_p.from_address(_managed(capsule) + offset)


class MainThreadDeleter(Wrapped):
    """Its deleter works on the main thread only (elsewhere it aborts): a deleter
    that cannot be called from any thread, without the GIL."""

    def __dlpack__(self, **kw: Any) -> Any:
        capsule = self.craft(versioned=True)
        field = _deleter_field(capsule)
        real = _DELETER(field.value)

        def deleter(managed: int) -> None:
            if threading.current_thread() is not threading.main_thread():
                os.abort()
            real(managed)

        callback = _DELETER(deleter)
        _callbacks.append(callback)
        field.value = ctypes.cast(callback, ctypes.c_void_p).value
        return capsule


def main_thread_deleter() -> Any:
    return MainThreadDeleter(CASES["float32"]())


class VersionedInLegacy(Wrapped):
    """A versioned struct in a capsule named 'dltensor' (as pydlpack 0.2.1 makes)."""

    def __dlpack__(self, **kw: Any) -> Any:
        return self.craft(versioned=True, name="dltensor")


def _consume(x: Any) -> tuple[Any, Any]:
    capsule = x.__dlpack__(max_version=(1, 3))
    return capsule, _core.inspect_capsule(capsule)


def calls_deleter_twice(x: Any) -> Any:
    """Consumes properly, and calls the deleter once more: a double free."""
    capsule = x.__dlpack__(max_version=(1, 3))
    deleter, managed = _DELETER(_deleter_field(capsule).value), _managed(capsule)
    t = tb.from_dlpack(capsule)
    deleter(managed)
    return t


_leaked: list[Any] = []


def never_deletes(x: Any) -> Any:
    """Consumes the capsule and copies the values, but keeps the import for ever: its
    deleter is never called (a leak)."""
    t = tb.from_dlpack(x)
    _leaked.append(t)
    return np.array(t)


def reads_after_free(x: Any) -> Any:
    """Renames the capsule and calls the deleter, then copies the data."""
    capsule, info = _consume(x)
    count = int(np.prod(info["shape"]))
    _testing.consume_and_delete_without_gil(capsule)
    data = (ctypes.c_float * count).from_address(info["data"] + info["byte_offset"])
    return np.array(data, dtype=np.float32).reshape(info["shape"])


def ignores_copy(x: Any, copy: Any = None, device: Any = None) -> Any:
    return tb.from_dlpack(x)


def copies_anyway(x: Any, copy: Any = None, device: Any = None) -> Any:
    return tb.from_dlpack(x, copy=True)


def refuses_its_device(x: Any, copy: Any = None, device: Any = None) -> Any:
    if device is not None:
        raise BufferError(f"cannot export to {device}")
    return tb.from_dlpack(x, copy=copy)


def bfloat16_as_uint16(x: Any) -> Any:
    t = tb.from_dlpack(x)
    return t.view("uint16") if t.dtype.name == "bfloat16" else t


class _Labelled:
    """A tensor whose own dtype attribute names another dtype than its export."""

    def __init__(self, t: Any, dtype: str) -> None:
        self.t = t
        self.dtype = f"mylib.{dtype}"

    def __dlpack__(self, **kw: Any) -> Any:
        return self.t.__dlpack__(**kw)

    def __dlpack_device__(self) -> Any:
        return self.t.__dlpack_device__()


def uint16_labelled_bfloat16(x: Any) -> Any:
    t = tb.from_dlpack(x)
    return _Labelled(t, "bfloat16") if t.dtype.name == "uint16" else t


def one_d_only(x: Any, copy: Any = None, device: Any = None) -> Any:
    t = tb.from_dlpack(x, copy=copy, device=device)
    if t.ndim != 1:
        raise BufferError(f"only 1-d tensors; got {t.ndim}-d")
    return t


def aborts_with_a_message(x: Any) -> Any:
    """As a C++ library dying of an uncaught exception: the message, then many frames."""
    info = _core.inspect_capsule(x.__dlpack__(max_version=(1, 3)))
    if any(s < 0 for s in info.get("strides") or ()):
        lines = ["terminate called after throwing an instance of 'mylib::Error'"]
        lines += ["  what():  negative strides are not supported"]
        lines += [
            f"frame #{i}: mylib::f() + 0x{i:x} (0x7f00{i:08x} in libmylib.so)" for i in range(40)
        ]
        os.write(2, ("\n".join(lines) + "\n").encode())
        os.abort()
    return tb.from_dlpack(x)


def aborts_on_malformed_ndim(x: Any) -> Any:
    info = _core.inspect_capsule(x.__dlpack__(max_version=(1, 3)))
    if info["ndim"] < 0:
        os.abort()
    return tb.from_dlpack(x)


def abort_now() -> Any:
    """A target whose building kills the process."""
    os.abort()


def make_of(case: str) -> Any:
    """A Factory's function: the make of one case."""
    return lambda: tensorbridge_tensor(case)


# ---------------------------------------------------------------------------------------
# Review 14: one fake for every check, and the cases the checker misjudged

import atexit  # noqa: E402
import gc  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

IS_COPIED = 2


def _copy_export(x: Wrapped, kw: dict[str, Any], flags: int) -> Any:
    copy = np.array(x.array, copy=True)
    versioned = kw.get("max_version") is not None and kw["max_version"][0] >= 1
    extra = {"flags": flags} if versioned else {}
    return x.craft(data=copy, owner=copy, versioned=versioned, **extra)


class AlwaysCopies(Wrapped):
    """Correct: every export is new memory (as a device-to-host exporter's), flagged
    IS_COPIED; copy=False is refused."""

    def __dlpack__(self, **kw: Any) -> Any:
        if kw.get("copy") is False:
            raise BufferError("this producer always copies")
        return _copy_export(self, kw, IS_COPIED)


class CopiesSilently(Wrapped):
    """Broken: copies for copy=False too, without IS_COPIED (each copy freed with its
    capsule, so the next one may get the same address)."""

    def __dlpack__(self, **kw: Any) -> Any:
        return _copy_export(self, kw, IS_COPIED if kw.get("copy") else 0)


class _Holder:
    """Owns an export: in a reference cycle, and old (moved out of the young
    generation by the allocations that follow it)."""

    def __init__(self, x: Any) -> None:
        self.x = x
        self.me = self


class CyclicOwner(Wrapped):
    """Correct: its exports are owned by an object in a reference cycle."""

    def __dlpack__(self, **kw: Any) -> Any:
        holder = _Holder(self)
        capsule = self.craft(versioned=kw.get("max_version") is not None, owner=holder)
        junk = [[i] for i in range(3000)]  # young collections run: the holder gets old
        del junk, holder
        gc.collect(0)
        return capsule


# make() only: float32 crafted capsules with one field out of the ordinary
AnyMajorVersioned = _crafting()  # a versioned capsule for max_version=(0, 8) too
HugeByteOffset = _crafting(byte_offset=(1 << 64) - 8)  # wraps: tensorbridge refuses it
ManyDims = _crafting(ndim=65)  # legal in DLPack, more than tensorbridge reads
NewerMinorFlags = _crafting(flags=1 << 10, version=(1, 4))  # bits a 1.4 may define
Fp4TwoLanes = _crafting(dtype=(17, 4, 2))  # not in dlpack.h (PyTorch's container)


# An exchange table of a newer major version (2.0) whose prev_api is a working major-1
# table, built here with ctypes: the 1.3 one is the one to grade and call.


class _ExchangeAPI(ctypes.Structure):
    """dlpack.h's DLPackExchangeAPI: the header (version, prev_api), five functions."""

    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("prev_api", ctypes.c_void_p),
        *((f, ctypes.c_void_p) for f in ("allocate", "from_py", "to_py", "dltensor", "stream")),
    ]


_FROM_PY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
_TO_PY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
_ALLOCATE = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)
_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p)
_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))
_incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))
_NAMES = (b"dltensor_versioned", b"dlpack_exchange_api")  # capsules keep the pointers


@_FROM_PY
def _table_from_py(obj: Any, out: Any) -> int:
    capsule = obj.t.__dlpack__(max_version=(1, 3))
    out[0] = _managed(capsule)
    _testing.set_capsule_name(capsule, "used_dltensor_versioned")
    return 0


@_TO_PY
def _table_to_py(managed: int, out: Any) -> int:
    obj = TableV2.__new__(TableV2)
    obj.t = tb.from_dlpack(_capsule_new(managed, _NAMES[0], None))
    obj.array = np.array(obj.t)
    _incref(obj)  # the new reference the caller owns
    out[0] = id(obj)
    return 0


@_ALLOCATE
def _table_allocate(prototype: int, out: int, context: int, set_error: int) -> int:
    return -1  # never called by the checker


@_STREAM
def _table_stream(device_type: int, device_id: int, out: int) -> int:
    ctypes.c_void_p.from_address(out).value = None
    return 0


_TABLE_1_3 = _ExchangeAPI(
    1,
    3,
    None,
    ctypes.cast(_table_allocate, ctypes.c_void_p),
    ctypes.cast(_table_from_py, ctypes.c_void_p),
    ctypes.cast(_table_to_py, ctypes.c_void_p),
    None,
    ctypes.cast(_table_stream, ctypes.c_void_p),
)
_HEADER_2_0 = (ctypes.c_uint32 * 4)(2, 0, 0, 0)  # major, minor, prev_api (8 bytes)
ctypes.c_void_p.from_address(ctypes.addressof(_HEADER_2_0) + 8).value = ctypes.addressof(_TABLE_1_3)


class TableV2(Wrapped):
    __dlpack_c_exchange_api__ = _capsule_new(ctypes.addressof(_HEADER_2_0), _NAMES[1], None)


class TableV2Only(Wrapped):
    __dlpack_c_exchange_api__ = _testing.exchange_table("v2-only")


_helpers: list[Any] = []


def spawns_helper(pidfile: str) -> Any:
    """A make() whose library starts a helper process on first use (a compile server,
    a pool of workers): it inherits the checker child's output pipe and outlives it
    unless it is killed. Its pid is written to ``pidfile``."""

    def make() -> Any:
        if not _helpers:
            helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            _helpers.append(helper)
            with open(pidfile, "w") as f:
                f.write(str(helper.pid))
        return tensorbridge_tensor()

    return make


class _HangsTellingPid(Wrapped):
    pidfile = ""

    def __dlpack__(self, **kw: Any) -> Any:
        if "stream" in kw:
            with open(self.pidfile, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(600)
        return self.t.__dlpack__(**kw)


def hangs_telling_pid(pidfile: str) -> Any:
    """A make() whose objects hang on stream=, after writing the process's pid."""

    def make() -> Any:
        x = _HangsTellingPid(CASES["float32"]())
        x.pidfile = pidfile
        return x

    return make


def exits_badly() -> Any:
    """A make() of a library that ends the process with status 3 at exit."""
    if not _helpers:
        _helpers.append(atexit.register(os._exit, 3))
    return tensorbridge_tensor()


def exits_badly_consumer(x: Any) -> Any:
    exits_badly()
    return tb.from_dlpack(x)


def wrong_values(x: Any) -> Any:
    return np.array(tb.from_dlpack(x)) + 1


def legacy_only(x: Any) -> Any:
    """A pre-1.0 consumer: never passes max_version."""
    return tb.from_dlpack(x.__dlpack__())


def garbles_versioned_only(x: Any) -> Any:
    """Asks legacy first; reads the versioned answer of a producer refusing legacy
    export wrongly (reversed)."""
    try:
        return tb.from_dlpack(x.__dlpack__())
    except BufferError:
        return np.array(tb.from_dlpack(x.__dlpack__(max_version=(1, 3))))[::-1].copy()


def refuses_null_data(x: Any) -> Any:
    capsule = x.__dlpack__(max_version=(1, 3))
    if _core.inspect_capsule(capsule)["data"] == 0:
        raise BufferError("NULL data")
    return tb.from_dlpack(capsule)


def _strides(x: Any) -> tuple[Any, Any]:
    capsule = x.__dlpack__(max_version=(1, 3))
    return capsule, _core.inspect_capsule(capsule).get("strides") or ()


def zero_strides_as_zeros(x: Any) -> Any:
    capsule, strides = _strides(x)
    t = tb.from_dlpack(capsule)
    return np.zeros(t.shape, np.float32) if 0 in strides else t


def drops_stride_signs(x: Any) -> Any:
    capsule, strides = _strides(x)
    values = np.array(tb.from_dlpack(capsule))
    return np.flip(values, [i for i, s in enumerate(strides) if s < 0]).copy()


def passes_stream_to_cpu(x: Any) -> Any:
    """Passes a stream to a CPU producer (NumPy's raises on it)."""
    return tb.from_dlpack(x.__dlpack__(stream=0, max_version=(1, 3)))


def via_type(x: Any) -> Any:
    """Looks __dlpack__ up on the type, as Python does for special methods."""
    return tb.from_dlpack(type(x).__dlpack__(x, max_version=(1, 3)))


class _Cyclic:
    def __init__(self, t: Any) -> None:
        self.t = t
        self.me = self

    def __dlpack__(self, **kw: Any) -> Any:
        return self.t.__dlpack__(**kw)

    def __dlpack_device__(self) -> Any:
        return self.t.__dlpack_device__()


def cyclic_result(x: Any) -> Any:
    """Correct: its result sits in a reference cycle and, after some work, in an
    older generation than the young one."""
    result = _Cyclic(tb.from_dlpack(x))
    junk = [[i] for i in range(3000)]
    del junk
    gc.collect(0)
    return result


def aborts_on_transposed(case: str = "float32") -> Any:
    """A make() that kills the process when asked for a transposed view (only the
    struct probe asks for the cases)."""
    if case == "transposed":
        os.abort()
    return tensorbridge_tensor(case)
