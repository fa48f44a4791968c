# SPDX-License-Identifier: Apache-2.0
"""Leaks: every exchange path keeps memory flat.

For each path, after a warm-up, ``TENSORBRIDGE_LEAK_ITERATIONS`` exchanges (default
10**6) may grow the resident set size by less than ``RSS_BOUND`` (4 MiB, about 4 bytes
per exchange at the default count: a leak of the smallest malloc block, of a Python
object, a shape array or a managed struct per exchange would be 32 MB or more) in one
of ``RSS_ROUNDS`` (3) rounds (a leak grows it in every round; memory the allocator
takes once, as another test in the same process can make it do, in one), and must
leave the reference counts of the objects exchanged from unchanged (a reference leaked
to them would keep them alive without growing RSS). Then, under ``tracemalloc``,
``TRACE_ITERATIONS`` (10**4) more exchanges may leave at most ``TRACE_BLOCKS`` (16) new
live blocks and ``TRACE_BYTES`` (4 KiB) allocated in tensorbridge's modules and in this
file (C code that the test calls is charged to this file's line): a leak of one block
per exchange would be 10**4 blocks. Two tests check that both measurements see a leak.

RSS is read from /proc/self/statm (Linux only; skipped elsewhere, and under
AddressSanitizer, whose quarantine keeps freed memory resident on purpose).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
import tracemalloc
import types
from collections.abc import Callable
from itertools import repeat
from pathlib import Path

import numpy as np
import pytest
from needs import framework

import tensorbridge as tb
from tensorbridge import _testing

ITERATIONS = int(os.environ.get("TENSORBRIDGE_LEAK_ITERATIONS", str(10**6)))
WARMUP = max(1, min(ITERATIONS // 20, 20_000))
RSS_BOUND = 4 * 2**20
#: A leak grows RSS in every round of ITERATIONS; a one-time growth does not (an arena
#: the allocator opens, memory another test or pytest-xdist's I/O left fragmented).
RSS_ROUNDS = 3
TRACE_ITERATIONS = 10**4
TRACE_BLOCKS = 16
TRACE_BYTES = 4096

_STATM = Path("/proc/self/statm")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss() -> int:
    return int(_STATM.read_text().split()[1]) * _PAGE


class Forwarder:
    """Hands out its target's capsules, but is not the target's type: tensorbridge can
    only ask its ``__dlpack__`` (no NumPy struct, no exchange table)."""

    __slots__ = ("target",)

    def __init__(self, target: object) -> None:
        self.target = target

    def __dlpack__(self, **kwargs: object) -> object:
        return self.target.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.target.__dlpack_device__()


# --------------------------------------------------------------------------------------
# The paths. Each factory returns one exchange (whose result is dropped at once) and a
# check that the exchange gives the right values.
# --------------------------------------------------------------------------------------

Step = Callable[[], object]


def _source() -> np.ndarray:
    return np.arange(8, dtype=np.float32)


def _torch_source():
    torch = framework("torch")
    return torch, torch.arange(8, dtype=torch.float32)


def capsule_to_dlpack() -> Step:
    t = tb.from_dlpack(_source())
    return lambda: tb.from_dlpack(tb.to_dlpack(t))


def capsule_versioned() -> Step:
    t = tb.from_dlpack(_source())
    return lambda: tb.from_dlpack(t.__dlpack__(max_version=(1, 3)))


def capsule_crafted_legacy() -> Step:
    a = _source()
    address = a.__array_interface__["data"][0]

    def step():
        capsule, _counter = _testing.make_capsule(
            address, shape=(8,), strides=(1,), dtype=(2, 32, 1), versioned=False, owner=a
        )
        return tb.from_dlpack(capsule)

    return step


def capsule_unconsumed() -> Step:
    # Exported and dropped without a consumer: the capsule destructor frees it.
    t = tb.from_dlpack(_source())
    return lambda: t.__dlpack__(max_version=(1, 3))


def numpy_struct() -> Step:
    a = _source()
    return lambda: tb.from_dlpack(a)


def numpy_dunder() -> Step:
    f = Forwarder(_source())
    return lambda: tb.from_dlpack(f)


def torch_dunder() -> Step:
    _torch, x = _torch_source()
    f = Forwarder(x)
    return lambda: tb.from_dlpack(f)


def tensor_to_numpy() -> Step:
    t = tb.from_dlpack(_source())
    return lambda: np.from_dlpack(t)


def tensor_to_torch() -> Step:
    torch, _x = _torch_source()
    t = tb.from_dlpack(_source())
    return lambda: torch.from_dlpack(t)


def torch_table() -> Step:
    _torch, x = _torch_source()
    assert hasattr(type(x), "__dlpack_c_exchange_api__")
    return lambda: tb.from_dlpack(x)


def tvm_ffi_table() -> Step:
    tvm_ffi = framework("tvm_ffi")
    t = tb.from_dlpack(_source())
    return lambda: tvm_ffi.from_dlpack(t)


def asarray_numpy() -> Step:
    a = _source()
    return lambda: tb.asarray(a)


def asarray_list() -> Step:
    values = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    return lambda: tb.asarray(values)


def convert_numpy_to_torch() -> Step:
    _torch_source()
    a = _source()
    return lambda: tb.convert(a, "torch")


def convert_torch_to_numpy() -> Step:
    _torch, x = _torch_source()
    return lambda: tb.convert(x, "numpy")


PATHS: dict[str, Callable[[], Step]] = {
    "capsule: from_dlpack(to_dlpack(t))": capsule_to_dlpack,
    "capsule: from_dlpack(t.__dlpack__(max_version))": capsule_versioned,
    "capsule: crafted legacy": capsule_crafted_legacy,
    "capsule: exported, never consumed": capsule_unconsumed,
    "__dlpack__: from_dlpack(ndarray), struct path": numpy_struct,
    "__dlpack__: from_dlpack(ndarray.__dlpack__)": numpy_dunder,
    "__dlpack__: from_dlpack(torch.Tensor.__dlpack__)": torch_dunder,
    "__dlpack__: np.from_dlpack(Tensor)": tensor_to_numpy,
    "__dlpack__: torch.from_dlpack(Tensor)": tensor_to_torch,
    "table: from_dlpack(torch.Tensor)": torch_table,
    "table: tvm_ffi.from_dlpack(Tensor)": tvm_ffi_table,
    "asarray(ndarray)": asarray_numpy,
    "asarray(list)": asarray_list,
    'convert(ndarray, "torch")': convert_numpy_to_torch,
    'convert(torch.Tensor, "numpy")': convert_torch_to_numpy,
}


def _run(step: Step, n: int) -> None:
    for _ in repeat(None, n):
        step()


def _expected_values(result: object) -> np.ndarray:
    if isinstance(result, np.ndarray):
        return result
    if hasattr(result, "numpy") and not isinstance(result, tb.Tensor):
        return result.numpy()  # torch or tvm-ffi
    return np.from_dlpack(result)


def _step_for(name: str) -> Step:
    step = PATHS[name]()
    result = step()
    if type(result).__name__ == "PyCapsule":
        result = tb.from_dlpack(result)
    # The path really exchanges the source's values (so it cannot pass by doing nothing).
    np.testing.assert_array_equal(_expected_values(result), np.arange(8.0))
    return step


def _held(step: Step) -> list[object]:
    """The objects a step exchanges from (its closure), and a forwarder's target."""
    held = []
    for cell in step.__closure__ or ():
        obj = cell.cell_contents
        if isinstance(obj, (types.ModuleType, int)):
            continue
        held.append(obj)
        if isinstance(obj, Forwarder):
            held.append(obj.target)
    return held


def _refcounts(objs: list[object]) -> list[int]:
    return [sys.getrefcount(o) for o in objs]


def _trim() -> None:
    """Hand the C heap's free memory back to the system (glibc), so that RSS grows with
    what is allocated next rather than being absorbed by memory freed earlier."""
    with contextlib.suppress(AttributeError, OSError):  # (not glibc)
        ctypes.CDLL(None).malloc_trim(0)


def _rss_growth(step: Step, n: int) -> int:
    """Bytes the resident set grew by over ``n`` steps, after a warm-up."""
    gc.collect()
    _trim()  # (memory other tests freed would otherwise absorb what the steps take)
    _run(step, WARMUP)  # (then the steps' own working set is resident again)
    gc.collect()
    before = _rss()
    _run(step, n)
    gc.collect()
    return _rss() - before


_WATCHED = [
    tracemalloc.Filter(True, str(Path(tb.__file__).parent / "*")),
    tracemalloc.Filter(True, __file__),
]


def _traced_growth(step: Step, n: int) -> tuple[int, int, str]:
    """Live blocks and bytes that ``n`` steps added in the watched files, after a warm-up,
    and the top growing lines."""
    tracemalloc.start()
    try:
        _run(step, 1000)
        gc.collect()
        before = tracemalloc.take_snapshot().filter_traces(_WATCHED)
        _run(step, n)
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(_WATCHED)
    finally:
        tracemalloc.stop()
    stats = after.compare_to(before, "lineno")
    blocks = sum(s.count_diff for s in stats)
    size = sum(s.size_diff for s in stats)
    return blocks, size, "\n".join(str(s) for s in stats[:5] if s.size_diff > 0)


needs_statm = pytest.mark.skipif(not _STATM.exists(), reason="reads /proc/self/statm (Linux)")
not_under_asan = pytest.mark.skipif(
    "libasan" in os.environ.get("LD_PRELOAD", ""),
    reason="AddressSanitizer's quarantine keeps freed memory resident",
)


@needs_statm
@not_under_asan
@pytest.mark.parametrize("name", list(PATHS))
def test_rss_stays_flat(name):
    step = _step_for(name)
    held = _held(step)
    assert held, "a step exchanges from the objects it holds"
    refs = _refcounts(held)
    rounds = []
    for _ in range(RSS_ROUNDS):
        rounds.append(_rss_growth(step, ITERATIONS))
        if rounds[-1] < RSS_BOUND:
            break
    # A reference leaked to the source each time would keep it alive without growing RSS.
    assert _refcounts(held) == refs, f"{name}: the sources' reference counts changed"
    said = ", ".join(f"{grown / 2**20:+.2f}" for grown in rounds)
    print(f"{name}: RSS {said} MiB over {ITERATIONS} exchanges")
    assert rounds[-1] < RSS_BOUND, (
        f"{name}: RSS grew in each of {RSS_ROUNDS} rounds of {ITERATIONS} exchanges "
        f"({said} MiB; {min(rounds) / ITERATIONS:.1f} bytes each at least; "
        f"bound {RSS_BOUND / 2**20:.0f} MiB)"
    )


@pytest.mark.parametrize("name", list(PATHS))
def test_no_python_allocations_accumulate(name):
    blocks, size, growing = _traced_growth(_step_for(name), TRACE_ITERATIONS)
    print(f"{name}: {blocks:+d} blocks, {size:+d} bytes over {TRACE_ITERATIONS} exchanges")
    assert blocks <= TRACE_BLOCKS and size <= TRACE_BYTES, (
        f"{name}: {blocks} new blocks, {size} bytes after {TRACE_ITERATIONS} exchanges "
        f"(bounds {TRACE_BLOCKS} blocks, {TRACE_BYTES} bytes):\n{growing}"
    )


# The measurements themselves see a leak of one Tensor (a 352-byte object) per exchange.


def _leaky_step() -> Step:
    a = _source()
    kept: list[object] = []
    return lambda: kept.append(tb.from_dlpack(a))


@needs_statm
@not_under_asan
def test_rss_measurement_sees_a_leak():
    # As many steps as the RSS checks take: one tensor leaked per step must show.
    n = max(ITERATIONS, 10**5)
    grown = _rss_growth(_leaky_step(), n)
    assert grown >= RSS_BOUND, f"{n} leaked tensors grew RSS by only {grown} bytes"


def test_tracemalloc_measurement_sees_a_leak():
    blocks, size, growing = _traced_growth(_leaky_step(), TRACE_ITERATIONS)
    assert blocks >= TRACE_ITERATIONS and size > TRACE_BYTES, (blocks, size)
    assert Path(__file__).name in growing


# -- caches keyed by the producers' own types ------------------------------------------
#
# A program may make a new producer type, or a new exception type, on every call (a
# class defined in a function, type(), a framework's per-call wrapper): what tensorbridge
# remembers per type must not keep them all. Each test makes many more types than any
# bound, and checks that the first one is freed once nothing else holds it.


def _made_types_die(make: Callable[[int], type], use: Callable[[type], None], count=600):
    import weakref

    first = make(0)
    use(first)
    gone = weakref.ref(first)
    del first
    for i in range(1, count):
        use(make(i))
    gc.collect()
    return gone() is None


def test_producer_exception_classes_are_not_kept_for_every_type():
    from tensorbridge import _errors

    def make(i):
        return type(f"Refusal{i}", (RuntimeError,), {})

    def use(error_type):
        class Raising:
            def __dlpack_device__(self):
                return (1, 0)

            def __dlpack__(self, **kwargs):
                raise error_type("no")

        with pytest.raises(error_type) as info:
            tb.from_dlpack(Raising())
        assert isinstance(info.value, tb.ProducerError)
        info.value.__cause__ = info.value.__context__ = None  # (frames hold the class)
        del info

    assert _made_types_die(make, use)
    assert len(_errors._producer_classes) <= _errors.PRODUCER_CLASSES_KEPT


def test_producer_types_remembered_as_legacy_are_not_kept():
    from producers import legacy_producer

    array = np.arange(3.0)

    def make(i):
        return type(legacy_producer(array))  # (each old-style producer: a type of its own)

    def use(tp):
        p = legacy_producer(array)
        p.__class__ = tp
        tb.from_dlpack(p)  # refused max_version: the type is remembered as legacy

    assert _made_types_die(make, use)


def test_torch_tensor_subclasses_are_not_kept():
    torch = framework("torch")

    def make(i):
        return type(f"Sub{i}", (torch.Tensor,), {})

    def use(tp):
        tb.from_dlpack(torch.ones(2).as_subclass(tp))

    assert _made_types_die(make, use)
