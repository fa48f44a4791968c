# SPDX-License-Identifier: Apache-2.0
"""The peers' own from_dlpack, over every ordered pair, dtype and awkward layout.

A native import may refuse (a clean failure is fine). When it succeeds it must
keep the dtype, the values and a READ_ONLY flag the producer sent. Known
violations by the peers are strict xfails naming the quirk, so a fixed peer shows
up as a failure here and in docs/compatibility.md; the ones that kill the process
run in a subprocess. tensorbridge, on either side, must never violate.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from needs import needs

import tensorbridge as tb
from tensorbridge._cli.probes import probe
from tensorbridge._core import FLAG_READ_ONLY, inspect_capsule
from tensorbridge._frameworks import FRAMEWORKS

from .frameworks import NAMES, is_protected, need, pointer, values

pytestmark = pytest.mark.interop

VALUES = [1.0, 2.0, 4.0, 0.5]

# (producer, consumer, case): why it is known to break. "*" matches anything.
KNOWN = {
    ("pyarrow", "torch", "*"): "torch ignores READ_ONLY (Arrow memory becomes writable)",
    ("pyarrow", "paddle", "*"): "Paddle ignores READ_ONLY (Arrow memory becomes writable)",
    ("pyarrow", "tvm_ffi", "*"): "pyarrow exports read-only memory as a legacy capsule, which "
    "cannot say read-only, to tvm_ffi (which asks for legacy capsules)",
    ("tensorbridge", "tvm_ffi", "read-only"): "tvm_ffi reads our tensors through their C "
    "exchange table and ignores the READ_ONLY flag of the managed tensor",
    ("*", "mlx", "float64"): "mx.from_dlpack narrows float64 to float32",
    ("*", "torch", "read-only"): "torch ignores READ_ONLY",
    ("*", "paddle", "read-only"): "Paddle ignores READ_ONLY",
    ("numpy", "paddle", "negative stride"): "Paddle mangles negative strides (wrong values)",
    ("tensorbridge", "paddle", "negative stride"): "Paddle mangles negative strides",
}
# Paddle ignores byte_offset; tensorbridge exports views with the offset folded into
# the data pointer (byte_offset 0), as NumPy and PyTorch do, so Paddle reads them right.
# Cases that abort the process in-process; each has a subprocess test below.
CRASHES = {
    ("*", "torch", "negative stride"): "torch aborts the process on negative strides",
    # Paddle makes uint32/uint64 only through DLPack; importing such a tensor into
    # Paddle again deadlocks when it is released.
    ("paddle", "paddle", "uint32"): "Paddle deadlocks on its own DLPack chains",
    ("paddle", "paddle", "uint64"): "Paddle deadlocks on its own DLPack chains",
}


def _match(table, producer, consumer, case):
    for (p, c, k), reason in table.items():
        if p in ("*", producer) and c in ("*", consumer) and k in ("*", case):
            return reason
    return None


def _param(producer, consumer, case):
    # pyarrow cannot export bool at all (Arrow booleans are bits): nothing to violate.
    exportable = not (producer == "pyarrow" and case == "bool")
    reason = _match(KNOWN, producer, consumer, case) if exportable else None
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(producer, consumer, case, marks=marks, id=f"{producer}->{consumer}-{case}")


def _flagged_read_only(source) -> bool:
    try:
        info = inspect_capsule(source.__dlpack__(max_version=(1, 3)))
    except Exception:
        return False
    return bool((info["flags"] or 0) & FLAG_READ_ONLY)


def _native_contract(producer, consumer, source, dtype, want):
    """Import natively; return the contract violations (empty when fine or refused)."""
    C = probe(consumer)
    try:
        with warnings.catch_warnings():
            # The peers' deprecation chatter must not turn into refusals here.
            warnings.simplefilter("ignore")
            result = C.native_from_dlpack(source)
    except Exception:
        return []  # refused: a clean failure
    problems = []
    got = C.dtype_name(result)
    if got != dtype:
        problems.append(f"dtype {dtype} became {got}")
    ptr = pointer(consumer, result)
    if consumer == "tensorflow" and ptr is not None and ptr % 64:
        pytest.xfail(
            "TensorFlow imports memory that is not 64-byte aligned and aborts on "
            "its first operation (this run's buffer was not aligned)"
        )
    if not problems:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got_values = values(consumer, result)
        except Exception as exc:  # the import "worked" but the result cannot be used
            problems.append(f"unusable result: {type(exc).__name__}")
        else:
            if got_values != want:
                problems.append("wrong values")
    if (
        _flagged_read_only(source)
        and ptr == pointer(producer, source)
        and not is_protected(consumer, result)
    ):
        problems.append("READ_ONLY memory became writable")
    return problems


DTYPE_CASES = [
    _param(p, c, d)
    for p in NAMES
    for c in NAMES
    for d in sorted(FRAMEWORKS[p].dtypes & FRAMEWORKS[c].dtypes)
    if not _match(CRASHES, p, c, d)
]


@pytest.mark.parametrize(("producer", "consumer", "dtype"), DTYPE_CASES)
def test_native_dtypes(producer, consumer, dtype):
    need(producer)
    need(consumer)
    source = probe(producer).sample(VALUES, dtype)
    wide = "bool" if dtype == "bool" else "complex128" if "complex" in dtype else "float64"
    want = tb.asarray(VALUES).astype(dtype).astype(wide).tolist()
    assert _native_contract(producer, consumer, source, dtype, want) == []


def _readonly(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


LAYOUTS = {
    "0-d view": lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[1, 2, ...],
    "size-0": lambda: np.zeros((0, 3), dtype=np.float32),
    "transposed": lambda: np.arange(12, dtype=np.float32).reshape(3, 4).T,
    "step-sliced": lambda: np.arange(24, dtype=np.float32)[::3],
    "negative stride": lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::-1],
    "offset view": lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[1:, 2:],
    "read-only": lambda: _readonly(np.arange(6, dtype=np.float32).reshape(2, 3)),
}


def _layout_source(producer, layout):
    if producer == "numpy":
        return LAYOUTS[layout]()
    grid = tb.arange(24, dtype="float32")[:12].reshape(3, 4)  # 64-byte aligned memory
    return {
        "0-d view": lambda: grid[1, 2],
        "size-0": lambda: tb.zeros((0, 3)),
        "transposed": lambda: grid.T,
        "step-sliced": lambda: tb.arange(24, dtype="float32")[::3],
        "negative stride": lambda: grid[:, ::-1],
        "offset view": lambda: grid[1:, 2:],
        "read-only": lambda: tb.asarray(LAYOUTS["read-only"]()),
    }[layout]()


LAYOUT_CASES = [
    _param(p, c, layout)
    for p in ("numpy", "tensorbridge")
    for c in NAMES
    for layout in LAYOUTS
    if not _match(CRASHES, p, c, layout)
]


@pytest.mark.parametrize(("producer", "consumer", "layout"), LAYOUT_CASES)
def test_native_layouts(producer, consumer, layout):
    need(consumer)
    source = _layout_source(producer, layout)
    want = np.asarray(tb.asarray(source).astype("float64")).reshape(-1).tolist()
    assert _native_contract(producer, consumer, source, "float32", want) == []


# -- the quirks that kill the process, each in its own process --------------------


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )


@needs("torch")
@pytest.mark.xfail(strict=True, reason="torch.from_dlpack aborts the process on negative strides")
def test_torch_native_negative_strides_survive():
    result = _run(
        """
        import numpy as np, torch
        x = torch.from_dlpack(np.arange(6, dtype=np.float32)[::-1])
        assert x.tolist() == [5, 4, 3, 2, 1, 0]
        """
    )
    assert result.returncode == 0, result.stderr[-500:]


@needs("tensorflow")
@pytest.mark.xfail(strict=True, reason="TensorFlow aborts on imported memory not 64-byte aligned")
def test_tensorflow_native_unaligned_memory_survives():
    result = _run(
        """
        import tensorflow as tf, tensorbridge as tb
        unaligned = tb.zeros(80, dtype="uint8")[8:72].view("float32")
        x = tf.experimental.dlpack.from_dlpack(tb.to_dlpack(unaligned))
        assert float(tf.reduce_sum(tf.cast(x, tf.float64))) == 0.0
        """
    )
    assert result.returncode == 0, result.stderr[-500:]


@needs("paddle")
@pytest.mark.xfail(
    strict=True,
    reason="Paddle deadlocks releasing a Paddle import of a DLPack-backed Paddle tensor",
)
def test_paddle_native_chain_survives():
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                textwrap.dedent(
                    """
                import numpy as np, paddle
                x = paddle.utils.dlpack.from_dlpack(np.arange(2.0))
                y = paddle.utils.dlpack.from_dlpack(x)
                del x
                del y
                """
                ),
            ],
            capture_output=True,
            text=True,
            timeout=15,  # (importing Paddle takes 3 to 8 s here; the deadlock is for ever)
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("the process hung") from None
    assert result.returncode == 0


@needs("torch", "tensorflow")
def test_tensorbridge_handles_what_crashes_the_peers():
    result = _run(
        """
        import numpy as np, tensorflow as tf, tensorbridge as tb
        x = tb.convert(np.arange(6, dtype=np.float32)[::-1], "torch")
        assert x.tolist() == [5, 4, 3, 2, 1, 0]
        unaligned = tb.zeros(80, dtype="uint8")[8:72].view("float32")
        y = tb.convert(unaligned, "tensorflow")
        assert float(tf.reduce_sum(tf.cast(y, tf.float64))) == 0.0
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stdout.strip().endswith("ok")
