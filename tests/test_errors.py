# SPDX-License-Identifier: Apache-2.0
"""Every error that reaches the user begins with the function the user called,
whichever layer raised it: tensorbridge's own checks, another of its functions
used underneath (convert reads its source with asarray), a producer, or Python."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from needs import needs
from producers import numpy_producer

import tensorbridge as tb
from tensorbridge._errors import ProducerError, said_by


class Raising:
    """A producer whose __dlpack__ raises (a framework failing underneath)."""

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        raise RuntimeError("the producer's own words")


@pytest.mark.parametrize("api", ["convert", "explain"])
@pytest.mark.parametrize(
    ("call", "kind", "words"),
    [
        (lambda f: f([1.0], "torhc"), ValueError, "unknown target framework 'torhc'"),
        (lambda f: f([1.0], "numpy", dtype="float17"), TypeError, "dtype must be"),
        (lambda f: f(object(), "numpy"), TypeError, "cannot convert builtins.object"),
        (lambda f: f(Raising(), "tensorbridge"), RuntimeError, "the producer's own words"),
    ],
)
def test_convert_and_explain_errors_begin_with_their_name(api, call, kind, words):
    with pytest.raises(kind, match=rf"^{api}\(\): .*{words}"):
        call(getattr(tb, api))


def test_a_producer_error_keeps_its_type_and_cause_under_another_name():
    with pytest.raises(ProducerError) as info:
        tb.convert(Raising(), "tensorbridge")
    assert isinstance(info.value, RuntimeError)
    assert str(info.value).startswith("convert(): ")
    assert "from_dlpack()" not in str(info.value)
    assert str(info.value.__cause__) == "the producer's own words"


def test_asarray_errors_begin_with_its_name():
    with pytest.raises(TypeError, match=r"^asarray\(\): dtype must be"):
        tb.asarray([1], dtype="float17")
    with pytest.raises(ValueError, match=r"^asarray\(\): device"):
        tb.asarray([1], device="gpu:x")
    with pytest.raises(ValueError, match=r"^asarray\(\): copy=False"):
        tb.asarray([1.0], copy=False)


def test_a_device_that_cannot_be_had_is_one_public_error_named_by_the_caller():
    a = np.arange(3.0)
    capsule = a.__dlpack__(max_version=(1, 3))
    calls = {
        "asarray": lambda: tb.asarray(a, device="cuda"),
        "from_dlpack": lambda: tb.from_dlpack(a, device="cuda:1"),
        "convert": lambda: tb.convert(a, "numpy", device="cuda"),
        "explain": lambda: tb.explain(a, "numpy", device="rocm"),
        "to": lambda: tb.asarray(a).to("cuda"),
    }
    for api, call in calls.items():
        with pytest.raises(tb.DeviceError) as info:
            call()
        error = info.value
        assert type(error) is tb.DeviceError and isinstance(error, BufferError)
        assert str(error).startswith(f"{api}(): ")
        assert "tensorbridge moves no data between devices" in str(error)
        # The producer's refusal, where it was asked, is the cause, said in a word.
        assert "__dlpack__(max_version" not in str(error)
        if api in ("asarray", "from_dlpack"):
            assert isinstance(error.__cause__, BufferError)
            assert "(it refused: BufferError: " in str(error)
    with pytest.raises(tb.DeviceError, match=r"^from_dlpack\(\): cannot move a capsule's cpu"):
        tb.from_dlpack(capsule, device="cuda")
    assert tb.asarray(tb.from_dlpack(capsule)).tolist() == [0.0, 1.0, 2.0]  # left as it was
    with pytest.raises(tb.DeviceError, match=r"^__dlpack__\(\): cannot export cpu memory"):
        tb.asarray(a).__dlpack__(dl_device=(2, 0))
    assert pickle.loads(pickle.dumps(tb.DeviceError("x"))).args == ("x",)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param("torch.ones(3)", marks=needs("torch")),  # NotImplementedError
        pytest.param("jax.numpy.ones(3)", marks=needs("jax")),  # RuntimeError
        pytest.param("tensorflow.ones(3)", marks=needs("tensorflow")),  # RuntimeError
        pytest.param("mlx.core.ones(3)", marks=needs("mlx")),  # BufferError
        pytest.param("pyarrow.array([1.0])", marks=needs("pyarrow")),  # BufferError
    ],
)
def test_every_producers_device_refusal_is_a_device_error(make):
    import importlib

    top = make.partition(".")[0]
    names = {top: importlib.import_module(top)}
    if top in ("jax", "mlx"):
        importlib.import_module(make.rpartition(".")[0])
    x = eval(make, names)
    for call in (tb.asarray, tb.from_dlpack):
        with pytest.raises(tb.DeviceError) as info:
            call(x, device="cuda")
        assert str(info.value).startswith(f"{call.__name__}(): ")
        assert "cannot export its cpu data to cuda:0 (it refused: " in str(info.value)
        assert "\n" not in str(info.value) and info.value.__cause__ is not None


def test_the_fast_paths_keep_working_after_an_error():
    # (the compiled doors wrap their bodies: the next call still takes its route)
    with pytest.raises(ValueError):
        tb.convert([1.0], "torhc")
    t = tb.from_dlpack(numpy_producer(np.array([1.0, 2.0])))
    assert tb.convert(t, "tensorbridge") is t
    assert tb.asarray(numpy_producer(np.array([3.0]))).tolist() == [3.0]


def test_said_by_renames_ours_prefixes_others_and_keeps_the_object():
    exc = BufferError("asarray(): no")
    assert said_by(exc, "convert()") is exc and str(exc) == "convert(): no"
    assert str(said_by(BufferError("convert(): no"), "convert()")) == "convert(): no"
    assert str(said_by(KeyError("k"), "convert()")) == "'convert(): k'"
    assert str(said_by(ValueError("a(): not ours"), "convert()")) == "convert(): a(): not ours"
    missing = ImportError("needs cupy", name="cupy")
    said_by(missing, "convert()")
    assert str(missing) == "convert(): needs cupy" and missing.name == "cupy"
    several = OSError(2, "No such file")  # its message is not one argument: left alone
    assert said_by(several, "convert()").args == (2, "No such file")

    class Own(Exception):
        def __str__(self):
            return "fixed"

    own = Own("x")
    said_by(own, "convert()")
    assert own.args == ("x",)  # its __str__ ignores args: not changed


def test_a_renamed_producer_error_still_pickles():
    with pytest.raises(ProducerError) as info:
        tb.convert(Raising(), "tensorbridge")
    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == str(info.value)
