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
