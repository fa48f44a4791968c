# SPDX-License-Identifier: Apache-2.0
"""Stress: eight threads exchange, view and drop tensors among NumPy, PyTorch and
tensorbridge at the same time.

Each thread writes values of its own (``base`` is unique per thread and iteration),
reads them back through another framework, and hands some of its objects (Tensors,
views, unconsumed capsules, NumPy arrays and torch tensors over our memory) to the
next thread, which checks their values and drops them: so capsules are consumed,
destructors run and deleters are called on threads other than the one that made them.
Any exception in any thread fails the test with that thread's traceback; a crash
kills the run. Duration: ``TENSORBRIDGE_STRESS_SECONDS`` (default 2) for the whole test
file, shared between its tests.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from needs import needs

import tensorbridge as tb

N_THREADS = 8
SECONDS = float(os.environ.get("TENSORBRIDGE_STRESS_SECONDS", "2"))

# A handed-over object: (what it is, the object, the values it must show, a reader that
# turns it into a NumPy array through some framework; None: just drop it).
Item = tuple[str, Any, "np.ndarray | None", "Callable[[Any], np.ndarray] | None"]


def _capsule_reader(capsule: object) -> np.ndarray:
    return np.from_dlpack(tb.from_dlpack(capsule))


def _check(got: Any, expected: np.ndarray, what: str) -> None:
    got = np.asarray(got)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    assert np.array_equal(got, expected), f"{what}: {got!r} != {expected!r}"


# ---------------------------------------------------------------------------------------
# One round of each kind of exchange. ``base`` is unique to this thread and round; each
# returns the items it hands over to the next thread.
# ---------------------------------------------------------------------------------------


def numpy_round(base: int) -> list[Item]:
    a = np.arange(base, base + 12, dtype=np.int64).reshape(3, 4)
    t = tb.from_dlpack(a)
    _check(np.from_dlpack(t), a, "np.from_dlpack(tb.from_dlpack(ndarray))")
    # Shared memory: a write through NumPy's view of the Tensor shows in the source.
    np.from_dlpack(t)[1, 2] = -base
    assert a[1, 2] == -base
    a[1, 2] = base + 6
    b = tb.asarray(a)
    assert np.shares_memory(np.from_dlpack(b), a)
    _check(np.from_dlpack(b), a, "tb.asarray(ndarray)")
    expected = a.copy()
    return [("Tensor over a NumPy array", t, expected, np.from_dlpack)]


def capsule_round(base: int) -> list[Item]:
    values = [[base, base + 1, base + 2], [base + 3, base + 4, base + 5]]
    expected = np.array(values, dtype=np.int64)
    t = tb.asarray(values)
    _check(np.from_dlpack(t), expected, "tb.asarray(list)")
    # A capsule consumed here, on each path.
    _check(np.from_dlpack(tb.from_dlpack(tb.to_dlpack(t))), expected, "to_dlpack round trip")
    versioned = t.__dlpack__(max_version=(1, 3))
    _check(np.from_dlpack(tb.from_dlpack(versioned)), expected, "versioned __dlpack__")
    legacy = t.__dlpack__()
    _check(np.from_dlpack(tb.from_dlpack(legacy)), expected, "legacy __dlpack__")
    # Capsules consumed, and capsules dropped unconsumed, by the next thread.
    return [
        ("to_dlpack capsule", tb.to_dlpack(t), expected, _capsule_reader),
        ("versioned capsule", t.__dlpack__(max_version=(1, 3)), expected, _capsule_reader),
        ("unconsumed legacy capsule", t.__dlpack__(), None, None),
        ("unconsumed versioned capsule", t.__dlpack__(max_version=(1, 3)), None, None),
    ]


def view_round(base: int) -> list[Item]:
    a = np.arange(base, base + 24, dtype=np.int64).reshape(2, 3, 4)
    t = tb.from_dlpack(a)
    views = {
        "t[:, 1:, ::2]": (t[:, 1:, ::2], a[:, 1:, ::2]),
        "t[::-1, :, 1]": (t[::-1, :, 1], a[::-1, :, 1]),
        "t.T": (t.T, a.T),
        "t.transpose(0, 2)": (t.transpose(0, 2), a.swapaxes(0, 2)),
        "t.transpose((2, 0, 1))": (t.transpose((2, 0, 1)), a.transpose(2, 0, 1)),
        "t.reshape(6, 4)": (t.reshape(6, 4), a.reshape(6, 4)),
        "t.reshape(-1)": (t.reshape(-1), a.reshape(-1)),
        "t[1]": (t[1], a[1]),
    }
    for what, (view, ref) in views.items():
        _check(np.from_dlpack(view), ref, what)
        _check(np.from_dlpack(tb.from_dlpack(view.__dlpack__(max_version=(1, 3)))), ref, what)
    # A write through a view lands in the source array.
    np.from_dlpack(t.T)[3, 2, 1] = -base
    assert a[1, 2, 3] == -base
    view, ref = views["t[::-1, :, 1]"]
    out = [
        ("transposed view", t.T, a.T.copy(), np.from_dlpack),
        ("reversed view", view, ref.copy(), np.from_dlpack),
        ("NumPy array over a view", np.from_dlpack(t[1]), a[1].copy(), np.asarray),
    ]
    del t, views  # the views handed over keep the source alive on their own
    return out


def convert_numpy_round(base: int) -> list[Item]:
    a = np.arange(base, base + 6, dtype=np.int64)
    n = tb.convert(tb.from_dlpack(a), "numpy")
    _check(n, a, 'convert(Tensor, "numpy")')
    assert np.shares_memory(n, a)
    return [('convert(..., "numpy") result', n, a.copy(), np.asarray)]


def torch_round(base: int) -> list[Item]:
    import torch

    src = torch.arange(base, base + 10, dtype=torch.int64)
    t = tb.from_dlpack(src)
    _check(np.from_dlpack(t), src.numpy(), "tb.from_dlpack(torch tensor)")
    np.from_dlpack(t)[3] = -base  # shared: torch sees it
    assert int(src[3]) == -base
    src[3] = base + 3
    back = torch.from_dlpack(t)
    assert back.data_ptr() == src.data_ptr()
    _check(back.numpy(), np.arange(base, base + 10), "torch.from_dlpack(tb Tensor)")

    mine = tb.asarray([[base, base + 1], [base + 2, base + 3]])
    theirs = torch.from_dlpack(mine)
    theirs[1, 0] = -base  # a write through torch shows in our memory
    _check(np.from_dlpack(mine), np.array([[base, base + 1], [-base, base + 3]]), "torch write")
    _check(theirs.T.numpy(), np.from_dlpack(mine.T), "torch view vs our view")

    x = np.arange(base, base + 8, dtype=np.int64)
    y = tb.convert(x, "torch")
    assert isinstance(y, torch.Tensor)
    y[0] = -base  # shared memory
    assert x[0] == -base
    z = tb.convert(y, "numpy")
    assert np.shares_memory(z, x)
    _check(z, x, 'convert(torch, "numpy")')
    w = tb.asarray(y)
    _check(np.from_dlpack(w), x, "tb.asarray(torch tensor)")

    return [
        ("torch tensor over our memory", theirs, theirs.numpy().copy(), lambda o: o.numpy()),
        ("Tensor over torch memory", t, src.numpy().copy(), np.from_dlpack),
        ('convert(ndarray, "torch") result', y, x.copy(), lambda o: o.numpy()),
        ("capsule of a torch-backed Tensor", tb.to_dlpack(w), x.copy(), _capsule_reader),
    ]


# ---------------------------------------------------------------------------------------


def _stress(rounds: list[Callable[[int], list[Item]]], seconds: float) -> int:
    """Run ``rounds`` on N_THREADS threads for ``seconds``; return the rounds done."""
    inboxes: list[queue.Queue[tuple[int, Item]]] = [
        queue.Queue(maxsize=64) for _ in range(N_THREADS)
    ]
    errors: list[str] = []
    done = [0] * N_THREADS
    handed = [0] * N_THREADS
    start = threading.Barrier(N_THREADS)

    def receive(me: int, origin: int, item: Item) -> None:
        what, obj, expected, reader = item
        assert origin != me
        if reader is not None:
            assert expected is not None
            _check(reader(obj), expected, f"{what} from thread {origin}")
        # The last reference to obj dies here, on a thread that did not make it.

    def worker(me: int) -> None:
        try:
            start.wait()
            deadline = time.monotonic() + seconds
            k = 0
            while time.monotonic() < deadline:
                # Distinct values per thread and round (exact in int64 and float64).
                base = (me + 1) * 10_000_000 + k * 100
                items = rounds[k % len(rounds)](base)
                while items:
                    try:
                        inboxes[(me + 1) % N_THREADS].put_nowait((me, items.pop()))
                        handed[me] += 1
                    except queue.Full:
                        pass  # dropped here instead
                try:
                    while True:
                        origin, got = inboxes[me].get_nowait()
                        receive(me, origin, got)
                        del got
                except queue.Empty:
                    pass
                k += 1
            done[me] = k
        except BaseException:
            errors.append(f"thread {me}:\n{traceback.format_exc()}")
            start.abort()

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: more interleavings per second
    try:
        threads = [
            threading.Thread(target=worker, args=(i,), name=f"tb-stress-{i}")
            for i in range(N_THREADS)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=seconds + 120)
        assert not any(th.is_alive() for th in threads), "a stress thread hung"
    finally:
        sys.setswitchinterval(old_interval)
    if errors:
        pytest.fail(f"{len(errors)} thread(s) raised:\n" + "\n".join(errors), pytrace=False)
    # Items left over are checked (and dropped) here, on the main thread.
    for box in inboxes:
        while not box.empty():
            origin, item = box.get_nowait()
            receive(-1, origin, item)
    assert all(n > 0 for n in done), f"a thread did no round: {done}"
    assert sum(handed) > 0
    return sum(done)


def _share() -> float:
    # The file's time budget, split between its two tests.
    return SECONDS / 2


def test_threads_numpy_and_tensorbridge():
    rounds = [numpy_round, capsule_round, view_round, convert_numpy_round]
    assert _stress(rounds, _share()) >= N_THREADS


@needs("torch")
def test_threads_with_torch():
    rounds = [torch_round, numpy_round, capsule_round, view_round, torch_round]
    assert _stress(rounds, _share()) >= N_THREADS
