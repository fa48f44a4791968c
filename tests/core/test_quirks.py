# SPDX-License-Identifier: Apache-2.0
"""Producer quirks at C speed (_quirks.pxi): PyTorch's conjugate and negative bit views,
whose memory holds other values than they show, on every front door."""

from __future__ import annotations

import pytest
from needs import needs

import tensorbridge as tb

pytestmark = needs("torch")


def test_torch_views_with_negative_or_conjugate_bits():
    # torch exports their raw memory, which holds other values than they show.
    import torch

    z = (torch.arange(3.0) * (1 + 1j)).conj()
    with pytest.raises(BufferError, match=r"negative bit set .*\.resolve_neg\(\) first"):
        tb.from_dlpack(z.imag)
    with pytest.raises(BufferError, match=r"conjugate bit set .*\.resolve_conj\(\) first"):
        tb.from_dlpack(z)
    assert tb.asarray(z.imag).tolist() == [-0.0, -1.0, -2.0]  # resolved: a copy
    assert tb.asarray(z).tolist() == [0j, 1 - 1j, 2 - 2j]
    with pytest.raises(ValueError, match="copy=False, but a torch view with the negative"):
        tb.asarray(z.imag, copy=False)


@pytest.mark.parametrize("via", ["from_dlpack", "asarray"])
def test_torch_bit_views_through_the_table(via):
    import torch

    z = torch.tensor([1 + 2j, 3 - 4j])
    neg = z.conj().imag  # the negative bit: memory holds +imag, the values are -imag
    conj = z.conj()
    if via == "from_dlpack":
        with pytest.raises(BufferError, match="negative bit"):
            tb.from_dlpack(neg)
        with pytest.raises(BufferError, match="conjugate bit"):
            tb.from_dlpack(conj)
    else:
        assert tb.asarray(neg).tolist() == [-2.0, 4.0]
        assert tb.asarray(conj).tolist() == [1 - 2j, 3 + 4j]


def test_torch_negative_bit_views_are_resolved():
    import torch

    z = (torch.arange(3.0) * (1 + 1j)).conj()
    view = z.imag
    assert tb.convert(view, "numpy").tolist() == [-0.0, -1.0, -2.0]
    assert tb.convert(z, "numpy").tolist() == [0j, 1 - 1j, 2 - 2j]
    with pytest.raises(BufferError, match="copy=False, but torch negative-bit views must"):
        tb.convert(view, "numpy", copy=False)


def test_torch_bits_on_tensors_that_are_not_views():
    # .detach(), .data and pickling keep the bit on a tensor that is no view (its
    # _base is None): the bit is asked of every torch tensor, view or not.
    import pickle

    import torch

    neg = (torch.arange(3.0) * (1 + 1j)).conj().imag
    for x in (neg.detach(), neg.data, pickle.loads(pickle.dumps(neg))):
        assert x._base is None and x.is_neg()
        with pytest.raises(BufferError, match="negative bit"):
            tb.from_dlpack(x)
        assert tb.asarray(x).tolist() == [-0.0, -1.0, -2.0]


def test_torch_bits_of_subclasses():
    import torch

    class Sub(torch.Tensor):  # defined outside torch: still a torch tensor type
        pass

    class SaysNegative(torch.Tensor):  # a Python is_neg is called, not torch's
        def is_neg(self):
            return True

    z = torch.tensor([1 + 2j, 3 - 4j]).conj()
    with pytest.raises(BufferError, match="conjugate bit"):
        tb.from_dlpack(z.as_subclass(Sub))
    with pytest.raises(BufferError, match="negative bit"):
        tb.from_dlpack(z.imag.as_subclass(Sub))
    assert tb.asarray(z.imag.as_subclass(Sub)).tolist() == [-2.0, 4.0]
    assert tb.from_dlpack(torch.arange(3.0).as_subclass(Sub)).tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(BufferError, match="negative bit"):
        tb.from_dlpack(torch.arange(3.0).as_subclass(SaysNegative))
    with pytest.raises(BufferError, match="conjugate bit"):
        tb.from_dlpack(torch.nn.Parameter(z, requires_grad=False))


# -- torch's own C++ readers of the bits ------------------------------------------------
# The bits are read with at::native::is_neg / is_conj on the at::Tensor in the tensor's
# Python object (a few ns) once these were checked against the methods (0.1 µs: they
# release the GIL); "off" is the methods' way. Both must give the same answers.


@pytest.fixture(params=["readers", "methods"])
def bit_reading(request):
    from tensorbridge import _core

    found = _core._torch_bit_readers("find" if request.param == "readers" else "off")
    if request.param == "readers" and not found:
        pytest.skip("torch's C++ bit readers are not found with this torch build")
    yield request.param
    _core._torch_bit_readers("find")


def _bit_tensors():
    """(name, tensor, 'negative'/'conjugate'/None): each way torch sets, keeps or drops
    the bits, on several dtypes and layouts."""
    import pickle

    import torch

    z = torch.tensor([[1 + 2j, 3 - 4j, 5 + 0j], [-1 - 1j, 2 + 0.5j, 0j]])
    neg = z.conj().imag
    in_place = torch.arange(6.0)
    torch._C._set_neg(in_place, True)
    conj_in_place = torch.tensor([1 + 1j, 2 - 2j])
    torch._C._set_conj(conj_in_place, True)
    cases = [
        ("plain", torch.arange(6.0), None),
        ("real part of a conjugate", z.conj().real, None),
        ("imaginary part", z.imag, None),
        ("conjugate", z.conj(), "conjugate"),
        ("conjugate, transposed", z.conj().T, "conjugate"),
        ("negative", neg, "negative"),
        ("negative, strided", neg[:, ::2], "negative"),
        ("negative, detached", neg.detach(), "negative"),
        ("negative, pickled", pickle.loads(pickle.dumps(neg)), "negative"),
        ("negative, resolved", neg.resolve_neg(), None),
        ("conjugate, resolved", z.conj().resolve_conj(), None),
        ("negative bit set in place", in_place, "negative"),
        ("conjugate bit set in place", conj_in_place, "conjugate"),
        (
            "negative float64",
            torch.tensor([1 + 2j], dtype=torch.complex128).conj().imag,
            "negative",
        ),
        ("negative int view", torch._neg_view(torch.arange(4)), "negative"),
        ("parameter", torch.nn.Parameter(neg.detach(), requires_grad=False), "negative"),
    ]
    return cases


def _bits_seen(x):
    """What from_dlpack says of x: the bit it refuses, or None when it imports it."""
    try:
        tb.from_dlpack(x)
    except BufferError as exc:
        for what in ("negative", "conjugate"):
            if f"{what} bit set" in str(exc):
                return what
        raise
    return None


def test_each_way_of_setting_the_bits_is_seen(bit_reading):
    import torch

    for name, x, bit in _bit_tensors():
        assert (bit == "negative") == x.is_neg() and (bit == "conjugate") == x.is_conj(), name
        for _ in range(2):  # the first call decides the routes, the second runs them
            assert _bits_seen(x) == bit, name
            expected = x.resolve_neg().resolve_conj().numpy()
            assert tb.convert(x, "numpy").tolist() == expected.tolist(), name
        if not x.is_conj():
            assert torch.equal(tb.convert(x, "torch"), x), name
    used = tb._core.torch_bits_read_directly(torch.Tensor)
    assert used is (bit_reading == "readers")
    assert tb._core.torch_bits_read_directly(torch.nn.Parameter) is used


def test_a_bit_set_after_the_route_is_cached_is_seen(bit_reading):
    import numpy as np
    import torch

    x = torch.arange(4.0)
    for _ in range(3):
        assert tb.convert(x, "numpy").tolist() == [0.0, 1.0, 2.0, 3.0]
    torch._C._set_neg(x, True)
    assert _bits_seen(x) == "negative"
    assert tb.convert(x, "numpy").tolist() == [-0.0, -1.0, -2.0, -3.0]
    torch._C._set_neg(x, False)
    assert np.shares_memory(tb.convert(x, "numpy"), x.numpy())


def test_subclasses_with_their_own_torch_function_keep_the_methods():
    # A __torch_function__ of the subclass's own sees is_neg asked, as it would
    # without tensorbridge; torch's default one (or none) only calls the method, so
    # those subclasses are read directly.
    import torch

    from tensorbridge import _core

    seen = []

    class Watched(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return super().__torch_function__(func, types, args, kwargs or {})

    class Plain(torch.Tensor):
        pass

    if not _core._torch_bit_readers("find"):
        pytest.skip("torch's C++ bit readers are not found with this torch build")
    neg = torch.tensor([1 + 2j]).conj().imag
    assert _bits_seen(neg.as_subclass(Watched)) == "negative"
    assert "is_neg" in seen
    assert _core.torch_bits_read_directly(Watched) is False
    assert _bits_seen(neg.as_subclass(Plain)) == "negative"
    assert _bits_seen(torch.arange(2.0).as_subclass(Plain)) is None
    assert _core.torch_bits_read_directly(Plain) is True


def test_the_readers_are_found_with_the_torch_ci_installs():
    # The speed of torch tensors depends on them (a method call costs about 0.1 µs):
    # on Linux and macOS, with the torch this project tests, they must be found.
    import sys

    from tensorbridge import _core

    if sys.platform not in ("linux", "darwin"):
        pytest.skip("the readers are looked up with dlopen/dlsym")
    assert _core._torch_bit_readers("find") is True
    with pytest.raises(ValueError, match="'off' or 'find'"):
        _core._torch_bit_readers("on")


def test_a_torch_function_assigned_later_is_seen():
    # The choice is kept with the type's version tag: a __torch_function__ given to
    # the class after its tensors were read is asked from then on.
    import torch

    from tensorbridge import _core

    if not _core._torch_bit_readers("find"):
        pytest.skip("torch's C++ bit readers are not found with this torch build")

    class Late(torch.Tensor):
        pass

    x = torch.arange(3.0).as_subclass(Late)
    assert _bits_seen(x) is None
    assert _core.torch_bits_read_directly(Late) is True
    seen = []

    def watching(cls, func, types, args=(), kwargs=None):
        seen.append(getattr(func, "__name__", str(func)))
        return torch.Tensor.__torch_function__.__func__(cls, func, types, args, kwargs or {})

    Late.__torch_function__ = classmethod(watching)
    assert _bits_seen(x) is None
    assert "is_neg" in seen
    assert _core.torch_bits_read_directly(Late) is False
    del Late.__torch_function__  # back to torch's default: read directly again
    assert _bits_seen(x) is None
    assert _core.torch_bits_read_directly(Late) is True


def test_only_torchs_own_methods_are_replaced_by_the_readers():
    # A C method of torch under the name is_neg is not torch's is_neg: it is called.
    import torch

    from tensorbridge import _core

    class Alias(torch.Tensor):
        is_neg = torch._C.TensorBase.is_floating_point

    class AliasConj(torch.Tensor):
        is_conj = torch._C.TensorBase.is_complex

    if not _core._torch_bit_readers("find"):
        pytest.skip("torch's C++ bit readers are not found with this torch build")
    x = torch.arange(3.0).as_subclass(Alias)
    assert x.is_neg() is True
    assert _bits_seen(x) == "negative"
    assert _core.torch_bits_read_directly(Alias) is False
    z = torch.tensor([1 + 2j]).as_subclass(AliasConj)
    assert z.is_conj() is True
    assert _bits_seen(z) == "conjugate"
    assert _core.torch_bits_read_directly(AliasConj) is False


def test_torch_function_modes_see_the_methods_only_when_they_are_called(bit_reading):
    # With the readers, the answer is the tensor's own bit and a TorchFunctionMode is
    # not asked (documented in docs/design.md); with the methods, it is.
    import torch
    from torch.overrides import TorchFunctionMode

    seen = []

    class Watching(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    neg = torch.tensor([1 + 2j]).conj().imag
    with Watching():
        assert _bits_seen(neg) == "negative"
        assert _bits_seen(torch.arange(2.0)) is None
    assert ("is_neg" in seen) is (bit_reading == "methods")


def test_the_readers_are_checked_before_they_are_used():
    # Readers that disagree with the methods (here the two swapped), or that are not
    # there, are refused by the check: the methods stay, and the answers are right.
    import torch

    from tensorbridge import _core

    neg_symbol = b"_ZN2at6native6is_negERKNS_6TensorE"
    conj_symbol = b"_ZN2at6native7is_conjERKNS_6TensorE"
    try:
        for names in ((conj_symbol, neg_symbol), (b"no_such_symbol", conj_symbol)):
            assert _core._torch_bit_readers("find", *names) is False
            z = torch.tensor([1 + 2j]).conj()
            assert _bits_seen(z) == "conjugate"
            assert _bits_seen(z.imag) == "negative"
            assert _bits_seen(torch.arange(2.0)) is None
            assert _core.torch_bits_read_directly(torch.Tensor) is False
    finally:
        _core._torch_bit_readers("find")


def test_the_readers_are_found_inside_torch_modes():
    # The check makes its tensors with the user's modes off: a FakeTensor mode, or a
    # mode that refuses every call, does not leave the process on the methods.
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    from tensorbridge import _core

    class Refusing(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            raise RuntimeError("no torch calls here")

    class RefusingDispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            raise RuntimeError("no torch ops here")

    expected = _core._torch_bit_readers("find")
    if not expected:
        pytest.skip("torch's C++ bit readers are not found with this torch build")
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError:  # pragma: no cover - older torch
        FakeTensorMode = None
    modes = [Refusing, RefusingDispatch] + ([FakeTensorMode] if FakeTensorMode else [])
    try:
        for mode in modes:
            with mode():
                assert _core._torch_bit_readers("find") is True, mode
    finally:
        _core._torch_bit_readers("find")
