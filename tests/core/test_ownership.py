# SPDX-License-Identifier: Apache-2.0
"""Ownership (_ownership.pxi): deleters run exactly once, never early, never without the
GIL, never after exit, never inside one of our export deleters."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from needs import needs
from producers import capsule_of, numpy_producer

import tensorbridge as tb
from tensorbridge import _core, _testing


@pytest.mark.parametrize("versioned", [True, False])
def test_deleter_runs_once_when_the_tensor_dies(versioned):
    capsule, counter = capsule_of(np.arange(4.0), versioned=versioned)
    t = tb.from_dlpack(capsule)
    del capsule
    gc.collect()
    assert counter.calls == 0
    del t
    assert counter.calls == 1
    gc.collect()
    assert counter.calls == 1


def test_views_keep_the_producer_alive():
    capsule, counter = capsule_of(np.arange(4.0))
    t = tb.from_dlpack(capsule)
    keepers = [
        tb.from_dlpack(t),  # a view of a view
        np.asarray(t),  # NumPy through __array_interface__
        np.from_dlpack(t),  # NumPy through our capsule
        memoryview(t),
        t.__dlpack__(max_version=(1, 3)),  # an unconsumed capsule of ours
    ]
    del t, capsule
    while keepers:
        assert counter.calls == 0
        keepers.pop()
        gc.collect()
    assert counter.calls == 1


def test_views_of_views_point_at_the_owner():
    capsule, counter = capsule_of(np.arange(4.0))
    t = tb.from_dlpack(capsule)
    v = t
    for _ in range(100):
        v = tb.from_dlpack(v)
    del t, capsule
    assert counter.calls == 0
    del v
    assert counter.calls == 1


def test_unconsumed_capsules_free_their_tensor():
    capsule, counter = capsule_of(np.arange(4.0))
    assert counter.calls == 0
    del capsule
    assert counter.calls == 1


def test_a_producers_deleter_runs_when_the_import_dies():
    p = numpy_producer(np.arange(2.0))
    t = tb.from_dlpack(p)
    assert p.counters[0].calls == 0
    del t
    assert p.counters[0].calls == 1


@pytest.mark.parametrize("versioned", [True, False])
def test_our_deleter_takes_the_gil_itself(versioned):
    t = tb.from_dlpack(np.arange(4.0))
    before = sys.getrefcount(t)
    capsule = t.__dlpack__(max_version=(1, 3) if versioned else None)
    assert sys.getrefcount(t) == before + 1
    _testing.consume_and_delete_without_gil(capsule)
    assert sys.getrefcount(t) == before
    del capsule  # consumed: the destructor must not call the deleter again
    assert sys.getrefcount(t) == before


def test_deleter_called_from_another_thread():
    t = tb.from_dlpack(np.arange(4.0))
    before = sys.getrefcount(t)
    capsules = [t.__dlpack__(max_version=(1, 3)) for _ in range(8)]
    threads = [
        threading.Thread(target=_testing.consume_and_delete_without_gil, args=(c,))
        for c in capsules
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    del capsules, threads
    assert sys.getrefcount(t) == before


def test_deleter_after_interpreter_exit_does_nothing():
    code = textwrap.dedent(
        """
        import numpy as np, tensorbridge as tb
        from tensorbridge import _testing
        t = tb.from_dlpack(np.arange(4.0))
        _testing.delete_after_interpreter_exit(t.__dlpack__(max_version=(1, 3)))
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert result.stderr == ""


def test_refcounts_of_numpy_arrays_are_restored():
    a = np.arange(16.0)
    before = sys.getrefcount(a)
    for _ in range(100):
        t = tb.from_dlpack(a)
        b = np.from_dlpack(t)
        del t, b
    assert sys.getrefcount(a) == before


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_no_leak_over_a_million_exchanges():
    a = np.arange(8, dtype=np.float32)
    ref = sys.getrefcount(a)

    def exchange(n):
        for _ in range(n):
            t = tb.from_dlpack(a)  # numpy capsule in
            c = t.__dlpack__(max_version=(1, 3))  # our capsule out, unconsumed
            u = tb.from_dlpack(c)  # ... and consumed
            del t, c, u

    exchange(50_000)  # warm up allocators
    start = _rss_bytes()
    exchange(1_000_000)
    grown = _rss_bytes() - start
    assert sys.getrefcount(a) == ref
    # A leak of even one 80-byte struct per exchange would be 80 MB.
    assert grown < 8 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB"


def test_producer_deleters_never_run_inside_our_export_deleter():
    # A framework releasing our export may hold a lock its own deleters need
    # (PaddlePaddle deadlocks so). The producer's deleter is put off until the
    # interpreter loop runs again, and still runs exactly once.
    capsule, counter = capsule_of(np.arange(4.0))
    t = tb.from_dlpack(capsule)
    ours = t.__dlpack__(max_version=(1, 3))
    del t, capsule
    _testing.consume_and_delete_without_gil(ours)  # the last reference goes here
    for _ in range(3):
        pass  # a few bytecodes: pending calls run
    gc.collect()
    assert counter.calls == 1
    assert counter.nested_calls == 0


def _released_inside_our_export_deleter(count, last=None):
    """Drop `count` Tensors owning crafted producers' tensors (and then `last`) from
    inside one export deleter of ours: a buffer exporter holds them, and the Tensor
    over it is exported and released without the GIL. Returns their deleters'
    counters once pending calls have had a chance to run."""

    class Holder(bytearray):
        pass

    holder = Holder(8)
    holder.tensors, counters = [], []
    for _ in range(count):
        capsule, counter = capsule_of(np.arange(2.0))
        holder.tensors.append(tb.from_dlpack(capsule))
        counters.append(counter)
    del capsule
    if last is not None:
        holder.z_after = last  # released after the Tensors (attribute order)
    t = tb.asarray(holder)
    ours = t.__dlpack__(max_version=(1, 3))
    del t, holder, last
    _testing.consume_and_delete_without_gil(ours)  # the last reference goes here
    for _ in range(3):
        pass  # a few bytecodes: pending calls run
    gc.collect()
    return counters


@pytest.mark.parametrize("count", [2, 64, 65, 300])
def test_every_deleter_put_off_runs_once(count):
    # Every deleter is put off, past the queue's 64 C slots too, and each runs
    # exactly once.
    counters = _released_inside_our_export_deleter(count)
    assert [c.calls for c in counters] == [1] * count
    assert sum(c.nested_calls for c in counters) == 0
    assert _core._deferred_deleters() == 0


def test_the_drain_waits_while_an_export_deleter_of_ours_runs():
    # Python code run while our export deleter releases its owner (a __del__ here)
    # reaches the interpreter's pending calls: the deleters put off stay put off until
    # the export deleter has returned.
    class RunsBytecode:
        def __del__(self):
            for _ in range(20):
                len("x")

    counters = _released_inside_our_export_deleter(3, last=RunsBytecode())
    assert [c.calls for c in counters] == [1, 1, 1]
    assert [c.nested_calls for c in counters] == [0, 0, 0]
    assert _core._deferred_deleters() == 0


@needs("paddle")
def test_paddle_chain_through_tensorbridge_does_not_deadlock():
    code = textwrap.dedent(
        """
        import paddle, tensorbridge as tb
        x = paddle.utils.dlpack.from_dlpack(tb.asarray([1.0, 2.0]))
        t = tb.asarray(x)
        y = paddle.utils.dlpack.from_dlpack(t)
        del x, t
        del y   # Paddle -> our deleter -> (deferred) Paddle's deleter
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("ok")
