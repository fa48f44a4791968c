# SPDX-License-Identifier: Apache-2.0
"""Producers and consumers that break the protocol never get tensorbridge to crash,
leak, free twice or lie (docs/design.md, "How `from_dlpack` negotiates")."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from needs import needs
from producers import Producer, capsule_of

import tensorbridge as tb
from tensorbridge import _testing
from tensorbridge._core import FLAG_IS_COPIED, inspect_capsule

# --------------------------------------------------------------------------
# Capsules whose struct is not what their name says
# --------------------------------------------------------------------------


def test_a_versioned_struct_in_a_legacy_named_capsule_is_left_alone():
    # pydlpack 0.2.1 does this. Read as a legacy struct its fields are nonsense;
    # the "deleter" at the legacy offset is something else. tensorbridge refuses
    # it without renaming it or calling anything, and the capsule's own
    # destructor (which knows its real kind) frees it once.
    a = np.arange(4.0)
    capsule, counter = capsule_of(a, versioned=True, name="dltensor")
    with pytest.raises(BufferError, match="from_dlpack"):
        tb.from_dlpack(capsule)
    assert _testing.capsule_name(capsule) == "dltensor"
    assert counter.calls == 0
    del capsule
    gc.collect()
    assert counter.calls == 1


def test_the_pydlpack_case_does_not_crash_the_process():
    # The same through a producer object, in a child process (it was a SIGSEGV).
    code = textwrap.dedent(
        """
        import numpy as np, tensorbridge as tb
        from producers import Producer, capsule_of
        a = np.arange(4.0)
        p = Producer(lambda **kw: capsule_of(a, versioned=True, name="dltensor"))
        try:
            tb.from_dlpack(p)
        except BufferError as exc:
            print("refused:", type(exc).__name__)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=_tests_dir()
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "refused: BufferError" in run.stdout


def _tests_dir():
    import pathlib

    return str(pathlib.Path(__file__).parent)


@pytest.mark.parametrize("via", ["from_dlpack", "asarray", "convert"])
def test_refused_capsules_are_untouched_on_every_front_door(via):
    a = np.arange(4.0)
    capsule, counter = capsule_of(a, dtype=(2, 24, 1))
    call = {
        "from_dlpack": tb.from_dlpack,
        "asarray": tb.asarray,
        "convert": lambda c: tb.convert(c, "numpy"),
    }[via]
    with pytest.raises(BufferError, match="bits=24"):
        call(capsule)
    assert _testing.capsule_name(capsule) == "dltensor_versioned"
    assert counter.calls == 0
    del capsule
    assert counter.calls == 1


# --------------------------------------------------------------------------
# Our capsules renamed by consumers
# --------------------------------------------------------------------------


@pytest.mark.parametrize("max_version", [None, (1, 3)], ids=["legacy", "versioned"])
@pytest.mark.parametrize("new_name", ["used_dltensor", "used_dltensor_versioned", "used_x"])
def test_any_used_name_means_consumed(max_version, new_name):
    # A consumer that took the tensor calls its deleter; the capsule must not.
    t = tb.asarray(np.arange(3.0))
    capsule = t.__dlpack__(max_version=max_version)
    _testing.set_capsule_name(capsule, new_name)
    del capsule  # was a SIGSEGV: the destructor re-entered the capsule's deallocation
    gc.collect()
    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0]


def test_a_foreign_name_is_reported_and_leaked_not_freed():
    seen = []
    hook = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        capsule = tb.asarray(np.arange(3.0)).__dlpack__(max_version=(1, 3))
        _testing.set_capsule_name(capsule, "renamed_by_someone")
        del capsule
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert len(seen) == 1
    assert seen[0].object is None  # never the dying capsule
    assert isinstance(seen[0].exc_value, RuntimeWarning)
    assert "renamed to 'renamed_by_someone'" in str(seen[0].exc_value)
    assert "leaked rather than risk freeing it twice" in str(seen[0].exc_value)


def test_an_unconsumed_capsule_frees_its_tensor():
    import weakref

    t = tb.asarray(np.arange(3.0))
    ref = weakref.ref(t)
    capsule = t.__dlpack__(max_version=(1, 3))
    del t
    assert ref() is not None  # the capsule holds it
    del capsule
    assert ref() is None


# --------------------------------------------------------------------------
# Producers that ignore the request
# --------------------------------------------------------------------------


@pytest.mark.parametrize("device", [(3, 0), (11, 0)], ids=["cuda_host", "rocm_host"])
def test_copy_true_of_host_accessible_memory_is_copied_here(device):
    # Pinned memory the CPU reads: imported, then copied here into plain host
    # memory, whatever the producer would have done with copy=True.
    a = np.arange(4.0)
    p = Producer(lambda **kw: capsule_of(a, device=device), device=device)
    t = tb.from_dlpack(p, copy=True)
    assert "copy" not in p.calls[-1]
    assert t.data_ptr() != a.ctypes.data
    assert t.device == "cpu"
    np.from_dlpack(t)[0] = -1
    assert a[0] == 0


@pytest.mark.parametrize(
    ("device", "kwargs"),
    [((3, 0), {"device": "cuda_host"}), ((13, 0), {})],
    ids=["explicit cuda_host", "cuda_managed"],
)
def test_copy_true_on_pinned_or_managed_memory_ignored_by_the_producer_is_refused(device, kwargs):
    # The producer is asked to copy (managed memory needs its stream handshake; an
    # explicit device= wants that kind of memory), did not flag a copy, and
    # tensorbridge cannot allocate that memory.
    a = np.arange(4.0)
    name = str(tb.Device(device))
    p = Producer(lambda **kw: capsule_of(a, device=device), device=device)
    with pytest.raises(
        BufferError,
        match=rf"copy=True on {name}, but producers\.Producer "
        r"did not mark its export as a copy",
    ):
        tb.from_dlpack(p, copy=True, **kwargs)
    assert p.calls[-1].get("copy") is True
    gc.collect()
    assert all(c.calls == 1 for c in p.counters)


def test_copy_true_ignored_on_the_cpu_gives_a_private_copy():
    a = np.arange(4.0)
    p = Producer(lambda **kw: capsule_of(a))
    t = tb.asarray(p, copy=True)
    np.from_dlpack(t)[0] = -1
    assert a[0] == 0


def test_copy_true_honoured_by_the_producer_is_not_copied_again():
    a = np.arange(4.0)
    private = a.copy()
    p = Producer(
        lambda **kw: capsule_of(private, device=(3, 0), flags=FLAG_IS_COPIED), device=(3, 0)
    )
    t = tb.from_dlpack(p, device="cuda_host", copy=True)
    assert t.data_ptr() == private.ctypes.data
    assert t.device == "cuda_host"


@pytest.mark.parametrize(
    ("reported", "exported", "message"),
    [
        ((2, 0), (1, 0), "says cuda:0, but its __dlpack__\\(\\) exported cpu data"),
        ((3, 0), (1, 0), "says cuda_host:0, but its __dlpack__\\(\\) exported cpu data"),
        ((2, 0), (2, 1), "says cuda:0, but its __dlpack__\\(\\) exported cuda:1 data"),
    ],
)
@pytest.mark.parametrize("kwargs", [{"copy": True}, {"stream": -1}])
def test_a_capsule_on_another_device_than_reported_is_refused(reported, exported, message, kwargs):
    # Whenever __dlpack_device__ was asked. (A plain from_dlpack(x) of a type that
    # never exported GPU memory asks __dlpack__ directly: nothing was reported.)
    a = np.arange(4.0)
    p = Producer(lambda **kw: capsule_of(a, device=exported), device=reported)
    with pytest.raises(BufferError, match=message):
        tb.from_dlpack(p, **kwargs)
    gc.collect()
    assert all(c.calls == 1 for c in p.counters)  # imported, then released once


def test_a_capsule_on_another_device_than_requested_is_refused():
    a = np.arange(4.0)
    p = Producer(lambda **kw: capsule_of(a, device=(2, 0)), device=(2, 0))
    with pytest.raises(BufferError, match=r"dl_device=\(1, 0\)\) returned cuda:0 data"):
        tb.from_dlpack(p, device="cpu")


def test_at_most_two_calls_whatever_the_producer_does():
    def refuse(**kw):
        raise TypeError("no")

    p = Producer(refuse)
    with pytest.raises(TypeError):
        tb.from_dlpack(p)
    assert len(p.calls) == 2


def test_an_old_signature_cannot_take_copy_false():
    old = Producer(lambda **kw: capsule_of(np.arange(2.0), versioned=False), accepts=("stream",))
    with pytest.raises(
        TypeError,
        match=r"does not take copy= \(a producer older than the "
        r"DLPack 2023\.12 keywords",
    ) as info:
        tb.from_dlpack(old, copy=False)
    assert isinstance(info.value, tb.ProducerError)
    assert "unexpected keyword argument" in str(info.value.__cause__)
    assert len(old.calls) == 1


def test_an_old_signature_cannot_take_dl_device():
    old = Producer(
        lambda **kw: capsule_of(np.arange(2.0), versioned=False, device=(3, 0)),
        device=(3, 0),
        accepts=("stream",),
    )
    with pytest.raises(TypeError, match="does not take dl_device="):
        tb.from_dlpack(old, device="cpu")


def test_an_old_signature_still_works_without_requests():
    a = np.arange(2.0)
    old = Producer(lambda **kw: capsule_of(a, versioned=False), accepts=("stream",))
    assert tb.from_dlpack(old).data_ptr() == a.ctypes.data
    assert tb.from_dlpack(old, copy=True).data_ptr() != a.ctypes.data  # copied here


@pytest.mark.parametrize("returned", [b"bytes", None, 3])
def test_a_producer_returning_no_capsule_is_named(returned):
    with pytest.raises(TypeError, match=r"producers\.Producer\.__dlpack__\(\) returned "):
        tb.from_dlpack(Producer(lambda **kw: returned))


@pytest.mark.parametrize("exc_type", [RuntimeError, ValueError, BufferError, KeyError])
def test_an_exception_inside_dlpack_names_the_producer(exc_type):
    def boom(**kw):
        raise exc_type("boom")

    with pytest.raises(exc_type) as info:
        tb.from_dlpack(Producer(boom))
    err = info.value
    assert isinstance(err, tb.ProducerError) and isinstance(err, tb.TensorbridgeError)
    assert err.args[0].startswith(
        "from_dlpack(): producers.Producer.__dlpack__(max_version=(1, 3)) raised: "
        f"{exc_type.__name__}: "
    )
    assert type(err.__cause__) is exc_type


def test_an_exception_inside_dlpack_device_names_the_producer():
    class Broken:
        def __dlpack__(self, **kw):
            raise AssertionError("not reached")

        def __dlpack_device__(self):
            raise RuntimeError("no device today")

    with pytest.raises(
        RuntimeError,
        match=r"Broken\.__dlpack_device__\(\) raised: "
        r"RuntimeError: no device today",
    ):
        tb.from_dlpack(Broken(), device="cpu")


def test_interrupts_and_memory_errors_are_not_wrapped():
    def interrupt(**kw):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        tb.from_dlpack(Producer(interrupt))
    assert not isinstance(info.value, tb.ProducerError)


def test_a_device_refusal_keeps_buffer_error():
    p = Producer(lambda **kw: (_ for _ in ()).throw(BufferError("cannot move")), device=(2, 0))
    with pytest.raises(
        BufferError, match=r"cannot export its cuda:0 data to cpu \(it refused: Buf"
    ):
        tb.from_dlpack(p, device="cpu")


# --------------------------------------------------------------------------
# Inputs that are not DLPack objects
# --------------------------------------------------------------------------


@pytest.mark.parametrize("obj", [object(), 3, "text"])
def test_no_dlpack_methods_is_an_attribute_error_and_a_type_error(obj):
    with pytest.raises(AttributeError, match="lacks __dlpack__ and __dlpack_device__"):
        tb.from_dlpack(obj)
    with pytest.raises(TypeError):
        tb.from_dlpack(obj)
    with pytest.raises(tb.NotDLPackError):
        tb.from_dlpack(obj)


# --------------------------------------------------------------------------
# Immutable producers
# --------------------------------------------------------------------------


@needs("jax")
def test_jax_arrays_are_imported_read_only():
    import jax.numpy as jnp

    x = jnp.arange(4.0)
    t = tb.from_dlpack(x)
    assert t.readonly
    with pytest.raises(ValueError, match="read-only"):
        np.from_dlpack(t)[0] = 1.0
    assert tb.asarray(x).readonly
    assert not tb.from_dlpack(x, copy=True).readonly  # a private copy may be written
    assert float(x[0]) == 0.0


def test_immutable_types_are_known_by_name():
    from tensorbridge._known_types import immutable_type

    jax_type = type("ArrayImpl", (), {"__module__": "jaxlib._jax"})
    eager = type("EagerTensor", (), {"__module__": "tensorflow.python.framework.ops"})
    variable = type("ResourceVariable", (), {"__module__": "tensorflow.python.ops"})
    lookalike = type("ArrayImpl", (), {"__module__": "jax_helpers"})
    assert immutable_type(jax_type) and immutable_type(eager)
    assert immutable_type(type("Sub", (jax_type,), {}))  # subclasses too
    assert not immutable_type(variable) and not immutable_type(lookalike)
    assert not immutable_type(np.ndarray)


def test_an_exported_view_reads_right_through_a_consumer_that_ignores_byte_offset():
    # What dlpack's reference C consumer does: read data, ignore byte_offset.
    import ctypes

    t = tb.asarray(np.arange(12.0).reshape(3, 4))[1:, 2:]
    info = inspect_capsule(t.__dlpack__(max_version=(1, 3)))
    first = ctypes.c_double.from_address(info["data"]).value
    assert first == 6.0


# --------------------------------------------------------------------------
# Import orders that crash the process
# --------------------------------------------------------------------------


@needs("tensorflow", "paddle")
def test_paddle_is_never_imported_after_tensorflow():
    code = textwrap.dedent(
        """
        import sys, numpy as np
        import tensorflow
        import tensorbridge as tb
        from tensorbridge._cli import matrix
        try:
            tb.convert(np.ones(3), "paddle")
        except ImportError as exc:
            print(type(exc).__name__, isinstance(exc, tb.TensorbridgeError))
            print(exc)
        skipped = {}
        found = matrix.available(["numpy", "tensorflow", "paddle"], skipped)
        print(sorted(found), sorted(skipped))
        print("paddle" in sys.modules)
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0] == "ImportOrderError True"
    assert (
        "paddle cannot be imported into this process because tensorflow is already "
        "loaded" in lines[1]
    )
    assert "import paddle before tensorflow, or convert in another process" in lines[1]
    assert lines[2] == "['numpy', 'tensorflow'] ['paddle']"
    assert lines[3] == "False"


@needs("paddle", "tensorflow")
def test_the_matrix_imports_paddle_before_tensorflow():
    # Asked in the order that would crash, the matrix imports in its own order.
    code = (
        "from tensorbridge._cli import matrix; "
        "print(list(matrix.available(['tensorflow', 'paddle'])))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[-1] == "['paddle', 'tensorflow']"


def test_a_producer_exception_with_its_own_constructor_keeps_its_attributes():
    # TensorFlow's OpError takes (node_def, op, message): wrapped all the same.
    class OpError(Exception):
        def __init__(self, node_def, op, message):
            super().__init__(message)
            self.error_code = 3

    def boom(**kw):
        raise OpError(None, None, "unsupported type")

    with pytest.raises(
        OpError,
        match=r"Producer\.__dlpack__\(max_version=\(1, 3\)\) raised: "
        r"OpError: unsupported type",
    ) as info:
        tb.from_dlpack(Producer(boom))
    assert isinstance(info.value, tb.ProducerError)
    assert info.value.error_code == 3


@pytest.mark.parametrize("obj", [[1.0], object()])
def test_to_dlpack_names_itself(obj):
    with pytest.raises(tb.NotDLPackError, match=r"^to_dlpack\(\): expected an object with"):
        tb.to_dlpack(obj)


# --------------------------------------------------------------------------
# Found by review
# --------------------------------------------------------------------------


def _capsule_pointer(capsule, name):
    import ctypes

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, name)


def test_another_major_version_is_read_before_its_deleter_frees_it():
    # Our own export really frees its struct in its deleter: the message must be
    # made from the version read before that (it was a use-after-free).
    import ctypes

    t = tb.asarray(np.arange(3.0))
    capsule = t.__dlpack__(max_version=(1, 3))
    address = _capsule_pointer(capsule, b"dltensor_versioned")
    ctypes.c_uint32.from_address(address).value = 2
    with pytest.raises(BufferError, match=r"holds DLPack version 2\.3;"):
        tb.from_dlpack(capsule)
    assert _testing.capsule_name(capsule) == "used_dltensor_versioned"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stream": 5}, "cannot be synchronised with stream=5"),
        ({"device": "cuda:1"}, "cannot move a capsule's cuda:0 data to cuda:1"),
        ({"copy": True}, "copy=True of a capsule's cuda:0 data to cuda:0 needs the producer"),
    ],
)
def test_a_raw_capsule_refused_for_the_request_is_left_as_it_was(kwargs, message):
    capsule, counter = _testing.make_capsule(
        0x7F0000001000, shape=(4,), strides=(1,), device=(2, 0)
    )
    with pytest.raises(BufferError, match=message):
        tb.from_dlpack(capsule, **kwargs)
    assert _testing.capsule_name(capsule) == "dltensor_versioned"
    assert counter.calls == 0
    assert tb.from_dlpack(capsule, stream=-1).device == "cuda:0"  # still importable


def test_a_raw_pinned_capsule_can_be_copied():
    a = np.arange(4.0)
    capsule, _ = capsule_of(a, device=(3, 0))
    t = tb.from_dlpack(capsule, copy=True)
    assert t.device == "cpu" and t.data_ptr() != a.ctypes.data
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_half_the_protocol_is_not_dlpack():
    class OnlyDevice:
        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(tb.NotDLPackError, match=r"lacks __dlpack__$"):
        tb.from_dlpack(OnlyDevice())
    with pytest.raises(tb.NotDLPackError, match=r"lacks __dlpack__$"):
        tb.from_dlpack(OnlyDevice(), device="cpu")


def test_a_legacy_producer_gets_the_device_check_too():
    # Refuses max_version: asked its device, then the legacy call; the capsule
    # must be where it said.
    a = np.arange(4.0)
    p = Producer(lambda **kw: capsule_of(a, versioned=False), device=(2, 0), accepts=("stream",))
    with pytest.raises(BufferError, match=r"says cuda:0, but its __dlpack__\(\) exported cpu"):
        tb.from_dlpack(p)
    assert len(p.calls) == 2


def test_a_known_legacy_type_that_turns_to_gpu_memory_is_asked_at_most_twice():
    a = np.arange(4.0)
    kind = type("OldProducer", (Producer,), {})
    host = kind(lambda **kw: capsule_of(a, versioned=False), accepts=("stream",))
    tb.from_dlpack(host)  # the type is now known to refuse max_version
    gpu = kind(
        lambda **kw: _testing.make_capsule(
            0x7F0000001000, shape=(4,), strides=(1,), device=(2, 0), versioned=False
        ),
        device=(2, 0),
        accepts=("stream",),
    )
    t = tb.from_dlpack(gpu)
    assert t.device == "cuda:0"
    assert gpu.calls == [{"stream": 1}]  # asked its device first: one legacy call


def test_a_type_error_that_is_not_about_keywords_is_not_called_one():
    def refuse(**kw):
        raise TypeError("bfloat16 is not supported")

    with pytest.raises(
        TypeError,
        match=r"__dlpack__\(max_version=\(1, 3\), copy=False\) "
        r"raised: TypeError: bfloat16",
    ) as info:
        tb.from_dlpack(Producer(refuse), copy=False)
    assert "does not take" not in str(info.value)


def test_producer_errors_pickle():
    import pickle

    def boom(**kw):
        raise BufferError("no")

    with pytest.raises(BufferError) as info:
        tb.from_dlpack(Producer(boom))
    again = pickle.loads(pickle.dumps(info.value))
    assert isinstance(again, BufferError) and isinstance(again, tb.ProducerError)
    assert str(again) == str(info.value)


@needs("jax")
def test_a_jax_array_has_no_legacy_capsule():
    # Read-only (immutable) data cannot go into a legacy capsule, which cannot say so.
    import jax.numpy as jnp

    with pytest.raises(BufferError, match="cannot export a read-only tensor as a legacy"):
        tb.to_dlpack(jnp.arange(3.0))
    capsule = tb.from_dlpack(jnp.arange(3.0)).__dlpack__(max_version=(1, 3))
    assert inspect_capsule(capsule)["flags"] & 1


class _PythonDestructorCapsule:
    """A versioned DLPack capsule whose destructor is Python code (through ctypes),
    as pydlpack's is: it must never run with an exception pending."""

    def __init__(self, array, device=(1, 0)):
        import ctypes

        from dlpack_ctypes import Device, DType, ManagedTensorVersioned, Version

        self.array = array
        self.shape = (ctypes.c_int64 * 1)(array.size)
        self.strides = (ctypes.c_int64 * 1)(1)
        self.struct = ManagedTensorVersioned()  # no deleter: the array is kept here
        self.struct.version = Version(1, 3)
        dl = self.struct.dl_tensor
        dl.data, dl.device, dl.ndim = array.ctypes.data, Device(*device), 1
        dl.dtype = DType(2, 64, 1)
        dl.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        dl.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
        self.destructions = []

        def destroy(capsule):
            self.destructions.append(sys.exc_info()[0])

        self.destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(destroy)  # never the object
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        self.name = b"dltensor_versioned"
        self.capsule = new(
            ctypes.addressof(self.struct), self.name, ctypes.cast(self.destructor, ctypes.c_void_p)
        )


@pytest.mark.parametrize(
    ("device", "kwargs", "message"),
    [
        ((2, 0), {"copy": True}, "says cuda:0, but its __dlpack__"),
        ((1, 0), {"copy": False}, "could only export a copy"),
    ],
)
def test_refusals_reach_the_caller_past_a_python_capsule_destructor(device, kwargs, message):
    a = np.arange(4.0)
    made = []

    def make(**kw):
        holder = _PythonDestructorCapsule(a)
        if kwargs.get("copy") is False:
            holder.struct.flags = FLAG_IS_COPIED
        made.append(holder)
        capsule, holder.capsule = holder.capsule, None
        return capsule

    p = Producer(make, device=device)
    with pytest.raises(BufferError, match=message):  # not SystemError
        tb.from_dlpack(p, **kwargs)
    gc.collect()
    assert [h.destructions for h in made] == [[None]]  # ran once, nothing pending


def test_a_raw_pinned_capsule_copied_to_its_own_device_needs_the_producer():
    capsule, counter = capsule_of(np.arange(4.0), device=(3, 0))
    with pytest.raises(BufferError, match="to cuda_host:0 needs the producer"):
        tb.from_dlpack(capsule, device="cuda_host", copy=True)
    assert counter.calls == 0 and _testing.capsule_name(capsule) == "dltensor_versioned"


def test_a_gpu_producer_without_stream_support_is_asked_twice_at_most():
    kind = type("NoStreams", (Producer,), {})
    p = kind(
        lambda **kw: _testing.make_capsule(0x7F0000001000, shape=(4,), strides=(1,), device=(2, 0)),
        device=(2, 0),
        accepts=("max_version", "dl_device", "copy"),
    )
    with pytest.raises(TypeError, match="unexpected keyword argument 'stream'"):
        tb.from_dlpack(p)
    assert p.calls == [{"max_version": (1, 3)}, {"max_version": (1, 3), "stream": 1}]


def test_builtin_attributes_survive_the_wrapping():
    import pickle

    def missing(**kw):
        raise FileNotFoundError(2, "no such file", "weights.bin")

    with pytest.raises(FileNotFoundError) as info:
        tb.from_dlpack(Producer(missing))
    for err in (info.value, pickle.loads(pickle.dumps(info.value))):
        assert (err.errno, err.filename) == (2, "weights.bin")
        assert isinstance(err, tb.ProducerError)


def test_copies_made_here_are_host_memory_whatever_the_source():
    # Pinned or managed memory copied into memory of ours is plain host memory: cpu,
    # as PyTorch's clone of a pinned tensor is not pinned.
    a = np.arange(4.0)
    for device in [(3, 0), (13, 0), (11, 0)]:
        capsule, _ = capsule_of(a, device=device)
        u = tb.from_dlpack(capsule)
        for copy in (
            u.copy(),
            u.contiguous() if not u.is_contiguous() else u.copy(),
            tb.asarray(u, copy=True),
        ):
            assert copy.device == "cpu" and copy.data_ptr() != a.ctypes.data
            assert copy.tolist() == [0.0, 1.0, 2.0, 3.0]
