# SPDX-License-Identifier: Apache-2.0
"""convert over every ordered pair of frameworks and every dtype both sides have.

For each (producer, consumer, dtype): the result has the source's dtype, shape and
values (read back through the consumer's own API); it shares memory exactly when
`explain` says so; shared memory stays protected when the source was; writes go
through when both sides can write. A dtype the consumer lacks raises BufferError.
"""

from __future__ import annotations

import warnings

import pytest

import tensorbridge as tb
from tensorbridge._cli.probes import probe
from tensorbridge._frameworks import FRAMEWORKS

from .frameworks import NAMES, is_protected, need, pointer, shape, values

pytestmark = pytest.mark.interop

VALUES = [1.0, 2.0, 4.0, 0.5]  # exact in every dtype (float8_e8m0fnu has no zero)

CASES = [
    pytest.param(p, c, d, id=f"{p}->{c}-{d}")
    for p in NAMES
    for c in NAMES
    for d in sorted(FRAMEWORKS[p].dtypes)
]


def expected(dtype):
    wide = "bool" if dtype == "bool" else "complex128" if "complex" in dtype else "float64"
    return tb.asarray(VALUES).astype(dtype).astype(wide)


@pytest.mark.parametrize(("producer", "consumer", "dtype"), CASES)
def test_convert(producer, consumer, dtype):
    need(producer)
    need(consumer)
    P, C = probe(producer), probe(consumer)
    source = P.sample(VALUES, dtype)
    if dtype not in FRAMEWORKS[consumer].dtypes:
        with pytest.raises(BufferError, match=f"convert\\(\\): .*{consumer}"):
            tb.convert(source, consumer)
        return
    plan = tb.explain(source, consumer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # paddle/TF chatter
        result = tb.convert(source, consumer)
    assert C.dtype_name(result) == dtype
    assert shape(consumer, result) == (4,)
    want = expected(dtype).tolist()
    assert values(consumer, result) == want

    src_ptr, dst_ptr = pointer(producer, source), pointer(consumer, result)
    if src_ptr is not None and dst_ptr is not None:
        assert (src_ptr == dst_ptr) is plan.shares_memory, str(plan)
    if plan.shares_memory:
        if is_protected(producer, source):
            # Shared writable only where the target cannot say read-only, and said.
            said = any("writable over read-only data" in n for n in plan.notes)
            assert is_protected(consumer, result) or said, "read-only data became writable"
            assert not said or not is_protected(consumer, result)
        elif (
            not is_protected(consumer, result)
            and dtype not in ("bool",)
            and P.write_first(source, 2.0)  # both sides can write: one memory
        ):
            assert values(consumer, result)[0] == 2.0


# Pinned, not derived from the registry's facts: the pairs that must share memory.
SHARED = [
    ("numpy", "numpy"),
    ("numpy", "torch"),
    ("numpy", "paddle"),
    ("numpy", "array_api_strict"),
    ("numpy", "pyarrow"),
    ("numpy", "tvm_ffi"),
    ("tensorbridge", "tensorflow"),
    ("numpy", "tensorbridge"),
    ("torch", "numpy"),
    ("torch", "jax"),
    ("torch", "paddle"),
    ("torch", "tvm_ffi"),
    ("torch", "tensorflow"),
    ("paddle", "torch"),
    ("tensorbridge", "jax"),
    ("tensorbridge", "torch"),
    ("jax", "numpy"),
    ("jax", "tensorflow"),
    ("tensorflow", "numpy"),
    ("pyarrow", "numpy"),
    ("pyarrow", "jax"),
    ("array_api_strict", "torch"),
    ("tvm_ffi", "numpy"),
]


@pytest.mark.parametrize(("producer", "consumer"), SHARED, ids=[f"{p}->{c}" for p, c in SHARED])
def test_zero_copy_where_the_target_can_share(producer, consumer):
    need(producer)
    need(consumer)
    source = probe(producer).sample([1.0, 2.0, 3.0, 4.0] * 16, "float32")
    if consumer in ("jax", "tensorflow"):
        assert pointer(producer, source) % 64 == 0  # the precondition they need
    result = tb.convert(source, consumer)
    assert pointer(consumer, result) == pointer(producer, source)


# Pinned, not read from the registry's readonly facts: immutable producers, and
# consumers whose tensors are always writable (mlx always copies anyway).
@pytest.mark.parametrize("consumer", ["torch", "paddle", "tvm_ffi"])
@pytest.mark.parametrize("producer", ["jax", "pyarrow", "tensorflow"])
def test_immutable_sources_are_shared_with_writable_only_targets(producer, consumer):
    # By default, as the consumer's own from_dlpack would (the Array API's rule).
    need(producer)
    need(consumer)
    source = probe(producer).sample([1.0, 2.0] * 16, "float32")
    plan = tb.explain(source, consumer)
    assert plan.shares_memory
    assert any("writable over read-only data" in n for n in plan.notes)
    result = tb.convert(source, consumer, copy=False)
    assert pointer(consumer, result) == pointer(producer, source)


@pytest.mark.parametrize("consumer", ["torch", "paddle", "tvm_ffi"])
@pytest.mark.parametrize("producer", ["jax", "pyarrow", "tensorflow"])
def test_immutable_sources_are_copied_for_writable_only_targets_on_request(producer, consumer):
    need(producer)
    need(consumer)
    source = probe(producer).sample([1.0, 2.0], "float32")
    with pytest.raises(BufferError, match="always writable and the data is read-only"):
        tb.convert(source, consumer, copy=False, readonly="copy")
    result = tb.convert(source, consumer, readonly="copy")
    assert pointer(consumer, result) != pointer(producer, source)
    probe(consumer).write_first(result, 9.0)
    assert values(producer, source) == [1.0, 2.0]
