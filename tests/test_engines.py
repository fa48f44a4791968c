# SPDX-License-Identifier: Apache-2.0
"""Processes and clusters: tensors through Ray, Dask distributed and multiprocessing.

What each engine does with a tensorbridge ``Tensor``, measured by address (issue 13).
``Tensor.__reduce_ex__`` gives protocol 5 its bytes out of band (a ``PickleBuffer``),
and earlier protocols a ``bytes`` copy:

- Ray pickles with protocol 5 and keeps the out-of-band buffers in its shared-memory
  object store: ``ray.put`` copies the bytes once into the store, and every ``ray.get``
  (in the driver or in a task) gives a read-only ``Tensor`` over the store's memory,
  at the same address each time, kept alive while the tensor lives. Ray does the same
  for NumPy arrays; a torch tensor it copies on every get (unless
  ``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS`` is set), so the zero-copy route for torch
  is a ``Tensor`` in the store and ``tb.convert(..., "torch")`` after the get.
- Dask distributed serializes a ``Tensor`` with pickle and out-of-band frames: the
  frame is the tensor's memory and the tensor rebuilt from it shares the frame (no
  copy either side); between processes the bytes cross a socket (a copy, writable on
  arrival).
- ``multiprocessing`` pickles in band: the tensor arrives as a writable copy.

Every wait is bounded (``timeout=60``); each engine is started once for the module and
shut down at its end.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import operator
import os
import warnings

import numpy as np
import pytest
from needs import framework, needs

import tensorbridge as tb

TIMEOUT = 60  # seconds: the bound on every wait for a task, a worker or a result

# The frameworks a converted array is made for: tensorbridge itself (the Tensor as it
# is), NumPy and, where installed, torch.
KINDS = [
    pytest.param("tensorbridge", id="tensor"),
    pytest.param("numpy", id="numpy"),
    pytest.param("torch", id="torch", marks=needs("torch")),
]


def _grid(dtype: str = "float64") -> tb.Tensor:
    """A 2-D tensor whose sums are exact (integers below 2**24 in every dtype used)."""
    return tb.asarray(np.arange(6000).reshape(60, 100) % 97, dtype=dtype)


def _as(kind: str, t: tb.Tensor) -> object:
    """``t`` as an array of framework ``kind`` (the tensor itself for tensorbridge)."""
    return t if kind == "tensorbridge" else tb.convert(t, kind)


def _values(x: object) -> np.ndarray:
    """The elements of an array of any kind, as NumPy (through a copy: for comparing)."""
    return np.array(tb.asarray(x).astype("float64"))


def _mapping(address: int) -> tuple[str, str] | None:
    """The permissions and the path of this process's memory mapping holding
    ``address`` (from Linux's ``/proc/self/maps``), or None where that file is missing."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                low, high = (int(end, 16) for end in fields[0].split("-"))
                if low <= address < high:
                    return fields[1], fields[5].strip() if len(fields) > 5 else ""
    except OSError:
        return None
    raise AssertionError(f"address {address:#x} is in no mapping of this process")


def _assert_in_shared_memory(address: int) -> None:
    """``address`` lies in a shared mapping of a file (Ray's object store is a shared
    mapping of a file under /dev/shm or its temporary directory); the heap, where the
    originals live, is a private one."""
    found = _mapping(address)
    if found is None:
        return  # not Linux: the addresses alone are checked
    permissions, path = found
    assert permissions.endswith("s") and path, (address, found)


# --------------------------------------------------------------------------
# Ray: a local instance with one CPU for the module
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_session():
    ray = framework("ray")
    if ray.is_initialized():
        pytest.fail("Ray is already initialized: another test left it running")
    try:
        with warnings.catch_warnings():
            # Ray forks helpers that exec at once; JAX, when an earlier test loaded it,
            # warns at every os.fork() (and warnings are errors here).
            warnings.filterwarnings("ignore", r"os\.fork\(\) was called", RuntimeWarning)
            ray.init(
                num_cpus=1,
                include_dashboard=False,
                log_to_driver=False,  # the workers' output is not this test's
                object_store_memory=128 * 2**20,
                logging_level=logging.WARNING,
            )
        yield ray
    finally:
        ray.shutdown()


@needs("ray")
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "bfloat16"])
def test_ray_get_of_a_tensor_is_read_only_in_the_object_store(ray_session, dtype):
    ray = ray_session
    t = _grid(dtype)
    expected = t.tolist()
    ref = ray.put(t)
    first = ray.get(ref, timeout=TIMEOUT)
    second = ray.get(ref, timeout=TIMEOUT)
    assert type(first) is tb.Tensor
    assert first.dtype == t.dtype and first.shape == t.shape and first.tolist() == expected
    # Zero-copy from the store: both gets read the same bytes, which are not the source's.
    assert first.data_ptr() == second.data_ptr() != t.data_ptr()
    _assert_in_shared_memory(first.data_ptr())
    assert first.readonly and second.readonly
    with pytest.raises(ValueError, match="read-only"):
        first[0, 0] = 1
    assert not t.readonly and t.tolist() == expected  # the source is untouched


@needs("ray")
def test_ray_strided_tensor_arrives_contiguous(ray_session):
    t = _grid()[::2, ::-3]
    got = ray_session.get(ray_session.put(t), timeout=TIMEOUT)
    assert got.shape == t.shape and got.tolist() == t.tolist()
    assert got.is_contiguous() and got.readonly


@needs("ray")
def test_ray_keeps_the_store_memory_alive_while_the_tensor_lives(ray_session):
    ray = ray_session
    ref = ray.put(tb.asarray(np.arange(2 * 10**6, dtype=np.float64)))  # 16 MB
    got = ray.get(ref, timeout=TIMEOUT)
    del ref
    gc.collect()
    # Put 240 MB of other objects through the 128 MB store: none may take its place.
    for _ in range(3):
        others = [ray.put(np.full(2 * 10**6, -1.0)) for _ in range(5)]
        del others
        gc.collect()
    values = np.asarray(got)  # (still the values put: the store did not reuse them)
    assert values[0] == 0 and values[-1] == 2 * 10**6 - 1
    assert np.array_equal(values, np.arange(2 * 10**6, dtype=np.float64))


@needs("ray")
def test_ray_numpy_from_convert_is_zero_copy_and_read_only(ray_session):
    ray = ray_session
    t = _grid("float32")
    a = tb.convert(t, "numpy")
    assert a.ctypes.data == t.data_ptr()  # convert shares, so the store copy is Ray's only
    ref = ray.put(a)
    first = ray.get(ref, timeout=TIMEOUT)
    second = ray.get(ref, timeout=TIMEOUT)
    assert type(first) is np.ndarray and first.dtype == np.float32
    assert np.array_equal(first, a)
    assert first.ctypes.data == second.ctypes.data != a.ctypes.data
    _assert_in_shared_memory(first.ctypes.data)
    assert not first.flags.writeable
    # Back to tensorbridge, and from a Tensor in the store to NumPy: shared, read-only.
    back = tb.asarray(first)
    assert back.data_ptr() == first.ctypes.data and back.readonly
    got = ray.get(ray.put(t), timeout=TIMEOUT)
    view = tb.convert(got, "numpy")
    assert view.ctypes.data == got.data_ptr() and not view.flags.writeable


@needs("ray", "torch")
def test_ray_torch_through_a_tensor_is_zero_copy(ray_session):
    ray = ray_session
    torch = framework("torch")
    t = _grid("float32")
    x = tb.convert(t, "torch")
    # Ray's own path for a torch tensor (a copy on every get by default): values only.
    plain = ray.get(ray.put(x), timeout=TIMEOUT)
    assert isinstance(plain, torch.Tensor) and torch.equal(plain, x)
    # Through a tensorbridge Tensor: every get converts to torch over the store's bytes.
    ref = ray.put(tb.asarray(x))
    first = tb.convert(ray.get(ref, timeout=TIMEOUT), "torch")
    second = tb.convert(ray.get(ref, timeout=TIMEOUT), "torch")
    assert isinstance(first, torch.Tensor) and torch.equal(first, x)
    assert first.data_ptr() == second.data_ptr() != x.data_ptr()
    _assert_in_shared_memory(first.data_ptr())
    # torch has no read-only tensors: readonly="copy" gives a private writable copy.
    private = tb.convert(ray.get(ref, timeout=TIMEOUT), "torch", readonly="copy")
    assert private.data_ptr() != first.data_ptr() and torch.equal(private, x)
    private[0, 0] = -1
    assert first[0, 0] == 0


@needs("ray")
@pytest.mark.parametrize("kind", KINDS)
def test_ray_task_computes_on_a_tensor(ray_session, kind):
    ray = ray_session
    source = _as(kind, _grid())

    @ray.remote
    def double(x):
        import numpy as np

        import tensorbridge as tb

        readonly = tb.asarray(x).readonly
        return type(x).__module__, os.getpid(), readonly, tb.asarray(np.asarray(x) * 2)

    for argument in (source, ray.put(source)):  # by value and by reference
        module, pid, readonly, doubled = ray.get(double.remote(argument), timeout=TIMEOUT)
        assert module.partition(".")[0] == type(source).__module__.partition(".")[0]
        assert pid != os.getpid()
        if kind != "torch":  # Ray copies torch tensors into writable memory
            # Ray hands the task read-only bytes: the store's, or (a small argument
            # passed by value) the task's own inline copy.
            assert readonly
        assert type(doubled) is tb.Tensor and doubled.dtype == tb.float64
        assert np.array_equal(_values(doubled), 2 * _values(source))


@needs("ray")
def test_ray_task_returns_a_tensor(ray_session):
    ray = ray_session

    @ray.remote
    def make(n):
        import tensorbridge as tb

        return tb.arange(n, dtype="int32").reshape(n // 100, 100)

    # Small results come back inline, large ones through the store: read-only both ways.
    for n in (100, 100_000):
        got = ray.get(make.remote(n), timeout=TIMEOUT)
        assert type(got) is tb.Tensor and got.dtype == tb.int32 and got.readonly
        assert np.array_equal(np.asarray(got).ravel(), np.arange(n))


# --------------------------------------------------------------------------
# Dask distributed: a local cluster of one worker process with one thread
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dask_client():
    distributed = framework("distributed")
    # processes=True: the worker is another process, so every tensor is serialized
    # and crosses a socket (about 1 s to start; processes=False would pass the
    # objects themselves and test nothing of the kind).
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@needs("distributed")
@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
def test_dask_serialization_shares_the_tensor(readonly):
    from distributed.protocol import deserialize, serialize

    a = np.arange(10**5, dtype=np.float64)
    a.flags.writeable = not readonly
    t = tb.asarray(a)
    header, frames = serialize(t)
    # The bytes go out of band: one frame is the tensor's memory itself.
    addresses = [np.frombuffer(frame, np.uint8).ctypes.data for frame in frames]
    assert t.data_ptr() in addresses
    back = deserialize(header, frames)
    assert type(back) is tb.Tensor and back.dtype == t.dtype and back.shape == t.shape
    assert back.data_ptr() == t.data_ptr() and back.readonly == readonly


@needs("distributed")
@pytest.mark.parametrize("kind", KINDS)
def test_dask_scatter_submit_gather(dask_client, kind):
    from distributed import wait

    client = dask_client
    source = _as(kind, _grid("float32"))

    def describe(x):
        import numpy as np

        import tensorbridge as tb

        t = tb.asarray(x)
        return {
            "module": type(x).__module__,
            "pid": os.getpid(),
            "dtype": t.dtype.name,
            "shape": t.shape,
            "doubled": tb.asarray(np.asarray(x) * 2),
        }

    [scattered] = client.scatter([source], timeout=TIMEOUT)
    future = client.submit(describe, scattered, pure=False)
    seen = future.result(timeout=TIMEOUT)
    assert seen["module"].partition(".")[0] == type(source).__module__.partition(".")[0]
    assert seen["pid"] != os.getpid()  # another process: the data was serialized
    assert seen["dtype"] == "float32" and seen["shape"] == (60, 100)
    assert type(seen["doubled"]) is tb.Tensor
    assert np.array_equal(_values(seen["doubled"]), 2 * _values(source))

    wait([scattered], timeout=TIMEOUT)
    back = client.gather(scattered)
    assert type(back) is type(source)
    assert tb.asarray(back).dtype == tb.float32
    assert np.array_equal(_values(back), _values(source))


@needs("distributed", "dask")
@pytest.mark.parametrize("dtype", ["float64", "int32", "float32"])
def test_dask_array_from_tensors(dask_client, dtype):
    import dask.array as da

    t = _grid(dtype)
    expected = np.asarray(t)
    for x in (da.from_array(t, chunks=(25, 40)), da.asarray(t)):
        assert x.dtype == np.dtype(dtype) and x.shape == t.shape
        total = dask_client.compute(x.sum()).result(timeout=TIMEOUT)
        assert total == expected.sum()  # exact: small integers in every dtype
        column_sums = dask_client.compute(x.sum(axis=0)).result(timeout=TIMEOUT)
        assert np.array_equal(np.asarray(column_sums), expected.sum(axis=0))
        whole = dask_client.compute(x).result(timeout=TIMEOUT)
        assert np.array_equal(np.asarray(whole), expected)


@needs("distributed", "dask")
def test_dask_array_of_several_tensors(dask_client):
    import dask.array as da

    parts = [_grid() for _ in range(3)]
    stacked = da.concatenate([da.from_array(p, chunks=(30, 100)) for p in parts])
    total = dask_client.compute(stacked.sum()).result(timeout=TIMEOUT)
    assert total == 3 * np.asarray(parts[0]).sum()


# --------------------------------------------------------------------------
# multiprocessing: a spawned worker, so every tensor is pickled both ways
# --------------------------------------------------------------------------


def test_multiprocessing_spawn_round_trip():
    readonly_source = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    readonly_source.flags.writeable = False
    tensors = [
        _grid("float32"),
        _grid()[::3, ::-7],
        tb.asarray([1.5, -2.0, 0.25], dtype="bfloat16"),
        tb.asarray([True, False, True]),
        tb.asarray(readonly_source),
        tb.asarray(7, dtype="complex64"),
    ]
    context = multiprocessing.get_context("spawn")
    pool = context.Pool(1)
    try:
        for t in tensors:
            # The worker receives the tensor and sends it back (tb.asarray of a Tensor
            # is the tensor itself), or sends back a complex128 copy it computed.
            back = pool.apply_async(tb.asarray, (t,)).get(timeout=TIMEOUT)
            widened = pool.apply_async(operator.methodcaller("astype", "complex128"), (t,))
            widened = widened.get(timeout=TIMEOUT)
            assert type(back) is tb.Tensor and back.dtype == t.dtype
            assert back.shape == t.shape and back.tolist() == t.tolist()
            assert not back.readonly and back.data_ptr() != t.data_ptr()
            assert widened.dtype == tb.complex128 and widened.shape == t.shape
            assert np.array_equal(np.asarray(widened), np.asarray(t.astype("complex128")))
    finally:
        pool.terminate()  # (a hung worker must not hold the test: no close-and-wait)
        pool.join()


def test_tensor_pickles_out_of_band_with_protocol_5():
    # What Ray and Dask rely on: the data leaves as a buffer, not in the payload.
    import pickle

    t = _grid()
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(t, protocol=5, buffer_callback=buffers.append)
    assert len(payload) < 300 and len(buffers) == 1
    assert np.frombuffer(buffers[0], np.uint8).ctypes.data == t.data_ptr()
    back = pickle.loads(payload, buffers=buffers)
    assert back.data_ptr() == t.data_ptr() and back.tolist() == t.tolist()
    # In band (what multiprocessing does): a copy of its own.
    copied = pickle.loads(pickle.dumps(t, protocol=5))
    assert copied.data_ptr() != t.data_ptr() and copied.tolist() == t.tolist()
