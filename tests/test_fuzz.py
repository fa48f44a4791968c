# SPDX-License-Identifier: Apache-2.0
"""Property-based fuzzing.

1. Capsules crafted from random struct fields (both struct kinds, every dtype code and
   unknown ones, random bits/lanes/ndim/shape/strides/offsets/flags/versions/devices,
   NULL pointers, wrong names) fed to ``from_dlpack``, ``asarray`` and ``convert``:
   never a crash, only a value or one of tensorbridge's exceptions; the outcome agrees
   with a model of the validation rules (docs/design.md); a refused capsule is left as
   it was; every deleter runs exactly once over the capsule's life. The same managed
   tensors through the exchange table's managed_tensor_to_py_object_no_sync.
2. Struct kind mismatches: a versioned struct in a ``dltensor`` capsule (tensorbridge
   must refuse it without calling the misread deleter) and the reverse.
3. tensorbridge's own exported capsules renamed to random names (or never consumed) and
   dropped: no crash; ``used_*`` means nothing happens, the unconsumed name frees, any
   other name is an unraisable warning and a leak.
4. Tensor operations against NumPy as the oracle on random shapes, strides and dtypes.

Memory safety of the fuzz itself: crafted data pointers point into a 4 KiB buffer, and
an accepted capsule is only read (casts, copies, conversions, values) when the model
says every element lies in that buffer; other accepted capsules are only imported
(metadata), which reads no element.

CI runs a fixed, derandomized number of examples (about 20 s on an idle 2-core machine);
``TENSORBRIDGE_FUZZ_EXAMPLES=N`` runs N examples per test instead. Hypothesis writes no
example database (``database=None``).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import tensorbridge as tb
from tensorbridge import _core, _testing
from tensorbridge._errors import TensorbridgeError

try:
    import ml_dtypes
except ImportError:  # a NumPy-only install: the ml_dtypes types' values are not checked
    ml_dtypes = None

# --------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------

settings.register_profile(
    "tensorbridge-fuzz",
    derandomize=True,  # reproducible in CI: the same examples on every run
    database=None,  # nothing written into the repository
    deadline=None,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
_FUZZ = settings.get_profile("tensorbridge-fuzz")
_ENV_EXAMPLES = os.environ.get("TENSORBRIDGE_FUZZ_EXAMPLES")


def fuzz(examples: int) -> settings:
    """The profile with ``examples`` examples (or TENSORBRIDGE_FUZZ_EXAMPLES)."""
    return settings(_FUZZ, max_examples=int(_ENV_EXAMPLES) if _ENV_EXAMPLES else examples)


# --------------------------------------------------------------------------
# The rules (docs/design.md) as data
# --------------------------------------------------------------------------

#: what tensorbridge may raise for bad input (and, without ml_dtypes, for the values
#: of bfloat16/float8/6/4, ImportError naming the package)
ALLOWED = (BufferError, TypeError, ValueError, TensorbridgeError) + (
    () if ml_dtypes else (ImportError,)
)
LIMIT = 2**62  # bytes: the bound on extents, strides, spans and byte_offset
MAX_NDIM = _core.MAX_NDIM
READ_ONLY = _core.FLAG_READ_ONLY
IS_COPIED = _core.FLAG_IS_COPIED
PADDED = _core.FLAG_SUBBYTE_PADDED
DTYPES = {(d.code, d.bits): d for d in tb._DTYPES.values()}
DTYPES_BY_NAME = {d.name: d for d in tb._DTYPES.values()}
KNOWN_DEVICES = set(range(1, 19)) - {5, 6}
HOST = {1, 3, 11, 13}  # CPU, CUDA host, ROCm host, CUDA managed
ADDRESS_DEVICES = {1, 2, 3, 10, 11, 13, 14}  # + CUDA, ROCm, oneAPI: data is an address
HANDLE_DEVICES = {4, 7, 8, 15}  # OpenCL, Vulkan, Metal, WebGPU: data may be a handle
LEGACY, VERSIONED = "dltensor", "dltensor_versioned"
DLPACK_NAMES = {LEGACY, VERSIONED, "used_" + LEGACY, "used_" + VERSIONED}
BUF = 4096  # bytes of real memory behind every crafted data pointer
READ_LIMIT = 1 << 20  # accepted tensors larger than this are never read
ENTRIES = ("from_dlpack", "asarray", "asarray_dtype", "convert_numpy", "convert_tb")
READING = {"asarray_dtype", "convert_numpy", "convert_tb"}
STANDARD = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


CASTS = sorted(tb._DTYPES) if ml_dtypes else STANDARD


def np_dtype(d: tb.DType) -> np.dtype | None:
    if d.name in STANDARD:
        return np.dtype(d.name)
    return np.dtype(getattr(ml_dtypes, d.name)) if ml_dtypes else None


@contextlib.contextmanager
def unraisables():
    """Collect unraisable exceptions (capsule destructors report through them)."""
    seen: list[str] = []
    old = sys.unraisablehook

    def hook(u):
        seen.append(f"{u.exc_type.__name__}: {u.exc_value} ({u.err_msg})")

    sys.unraisablehook = hook
    try:
        yield seen
    finally:
        sys.unraisablehook = old


@contextlib.contextmanager
def quiet_casts():
    """Casting random bytes warns (NaN to int, complex to real): not our subject."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def collect():
    """Objects here die by reference counting (the test keeps no cycles); a full
    gc.collect() would cost ~80 ms per example with NumPy and ml_dtypes loaded."""
    gc.collect(0)


def c_strides(shape) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n if n > 0 else 1
    return tuple(reversed(out))


# --------------------------------------------------------------------------
# 1. Crafted capsules
# --------------------------------------------------------------------------

_BAD_EXTENTS = [-1, -(2**63), 2**31, 2**40, 2**62, 2**63 - 1]
_BAD_STRIDES = [2**31, 2**61, -(2**61), 2**62, 2**63 - 1, -(2**63)]
_foreign_name = st.one_of(
    st.sampled_from(
        [
            "not_a_tensor",
            "",
            "DLTENSOR",
            "dltensor ",
            "dltensor_versioned_",
            "used_dltensor_x",
            "torch.Tensor",
            "dlpack_exchange_api",
        ]
    ),
    st.text(alphabet="abcdelnorstuv_", max_size=20),
).filter(lambda s: s not in DLPACK_NAMES)
#: fields a spec may get wrong; the others are drawn from their valid values
CORRUPTIONS = [
    "name",
    "version",
    "dtype",
    "lanes",
    "device type",
    "device id",
    "ndim",
    "null shape",
    "extent",
    "stride",
    "null data",
    "bogus data",
    "byte_offset",
]


@st.composite
def capsule_specs(draw):
    """Every field of a capsule, as a dict: valid values, except for zero to two
    fields drawn from CORRUPTIONS (so that imports succeed often enough to check what
    they give). The struct kind and the name agree unless the name is corrupted."""
    bad = set(
        draw(st.lists(st.sampled_from(CORRUPTIONS), min_size=1, max_size=2))
        if draw(st.integers(0, 9)) >= 4
        else []
    )
    versioned = draw(st.booleans())
    name = VERSIONED if versioned else LEGACY
    if "name" in bad:
        name = draw(
            st.one_of(st.sampled_from(["used_" + LEGACY, "used_" + VERSIONED, None]), _foreign_name)
        )

    code, bits = draw(st.sampled_from(sorted(DTYPES)))
    if "dtype" in bad:
        code = draw(st.one_of(st.integers(0, 17), st.sampled_from([18, 19, 64, 255])))
        bits = draw(st.integers(0, 255))
    lanes = draw(st.sampled_from([0, 2, 4, 16, 65535])) if "lanes" in bad else 1

    if draw(st.integers(0, 5)):
        shape = draw(st.lists(st.sampled_from([1, 2, 2, 3, 4, 0]), max_size=6))
    else:
        shape = draw(
            st.lists(st.sampled_from([1, 1, 1, 1, 2, 0, 3]), min_size=7, max_size=MAX_NDIM)
        )
    if "extent" in bad:
        shape = shape or [1]
        shape[draw(st.integers(0, len(shape) - 1))] = draw(st.sampled_from(_BAD_EXTENTS))
    ndim_field = None
    if "ndim" in bad:
        ndim_field = draw(st.sampled_from([-1, -(2**31), 65, 66, 70, 100, 2**31 - 1]))
        if 0 < ndim_field <= 70:
            # The shape array is as long as ndim says where that is small enough to
            # build, so even a consumer that wrongly reads it stays inside the block.
            shape = [1] * ndim_field

    stride_mode = draw(st.sampled_from(["given", "given", "null", "c"]))
    if stride_mode == "null" and "stride" not in bad:
        strides = None
    elif stride_mode == "c":
        strides = [min(s, 2**63 - 1) for s in c_strides(shape)]  # (an int64 field)
    else:
        strides = [draw(st.integers(-8, 8)) for _ in shape]
    if "stride" in bad and shape:
        strides[draw(st.integers(0, len(shape) - 1))] = draw(st.sampled_from(_BAD_STRIDES))

    data_mode = "null" if "null data" in bad else "bogus" if "bogus data" in bad else "buf"
    if "byte_offset" in bad:
        byte_offset = draw(st.sampled_from([2**62 + 1, 2**63, 2**64 - 1]))
    else:
        byte_offset = draw(st.sampled_from([0, 0, 0, draw(st.integers(0, 512))]))
    if "version" in bad:
        version = (draw(st.sampled_from([0, 2, 3, 2**32 - 1])), draw(st.integers(0, 9)))
    else:
        version = (1, draw(st.sampled_from([0, 1, 2, 3, 3, 4, 99])))
    if "device type" in bad:
        device_type = draw(st.sampled_from([0, 5, 6, 19, -1, 2**31 - 1]))
    else:
        device_type = draw(st.sampled_from([1] * 8 + sorted(KNOWN_DEVICES)))
    device_id = draw(
        st.sampled_from([-1, -(2**31)]) if "device id" in bad else st.sampled_from([0, 0, 0, 1, 7])
    )
    flags = draw(
        st.one_of(
            st.sampled_from([0, 0, READ_ONLY, PADDED, IS_COPIED, READ_ONLY | PADDED]),
            st.integers(0, 2**64 - 1),
        )
    )
    return dict(
        versioned=versioned,
        name=name,
        dtype=(code, bits, lanes),
        shape=shape,
        ndim=ndim_field,
        strides=strides,
        data_mode=data_mode,
        base=draw(st.integers(0, BUF)),
        bogus=draw(st.sampled_from([1, 8, 0xDEAD0000, 2**63, 2**64 - 1])),
        byte_offset=byte_offset,
        flags=flags,
        version=version,
        device=(device_type, device_id),
        null_shape="null shape" in bad,
        deleter=draw(st.integers(0, 9)) > 0,
    )


def build(spec, buf):
    """The capsule and counter a spec describes; crafted pointers point into ``buf``."""
    address = buf.__array_interface__["data"][0]
    data = {"buf": address + spec["base"], "null": 0, "bogus": spec["bogus"]}[spec["data_mode"]]
    return _testing.make_capsule(
        data,
        shape=spec["shape"],
        strides=spec["strides"],
        dtype=spec["dtype"],
        device=spec["device"],
        byte_offset=spec["byte_offset"],
        versioned=spec["versioned"],
        version=spec["version"],
        flags=spec["flags"],
        ndim=spec["ndim"],
        null_shape=spec["null_shape"],
        deleter=spec["deleter"],
        name=spec["name"],
        null_name=spec["name"] is None,
        owner=buf,
    )


def model(spec) -> dict:
    """What a correct tensorbridge does with the capsule (docs/design.md).

    ``outcome``: "ok" (imported), "refuse" (capsule untouched), "version" (renamed,
    deleter called, BufferError). ``early``: refused before any layout arithmetic, so no
    data pointer can matter."""
    name = spec["name"]
    if name not in (LEGACY, VERSIONED):
        if name in ("used_" + LEGACY, "used_" + VERSIONED):
            exc = (BufferError,)
        elif name is not None and name.startswith("used_"):
            exc = (BufferError, TypeError)
        else:
            exc = (TypeError,)
        return dict(outcome="refuse", exc=exc, early=True, why="name")
    versioned = name == VERSIONED
    assert versioned == spec["versioned"], "kind mismatches have their own test"

    def refuse(why, early):
        return dict(outcome="refuse", exc=(BufferError,), early=early, why=why)

    if versioned and spec["version"][0] != 1:
        return dict(outcome="version", exc=(BufferError,), early=True, why="version")
    code, bits, lanes = spec["dtype"]
    ndim = len(spec["shape"]) if spec["ndim"] is None else spec["ndim"]
    if not 0 <= ndim <= MAX_NDIM:
        return refuse("ndim", True)
    if lanes != 1:
        return refuse("lanes", True)
    if (code, bits) not in DTYPES:
        return refuse("dtype", True)
    dev_type, dev_id = spec["device"]
    if dev_type not in KNOWN_DEVICES or dev_id < 0:
        return refuse("device", True)
    if ndim > 0 and spec["null_shape"]:
        return refuse("null shape", True)
    shape = tuple(spec["shape"])
    if any(n < 0 for n in shape):
        return refuse("negative extent", True)
    item = (bits + 7) // 8
    if math.prod(n for n in shape if n > 0) > LIMIT // item:
        return refuse("too many elements", False)
    if spec["byte_offset"] > LIMIT:
        return refuse("byte_offset", False)
    size = math.prod(shape)
    if size == 0:
        strides = c_strides(shape)
    else:
        strides = c_strides(shape) if spec["strides"] is None else tuple(spec["strides"])
        if any(abs(s) > LIMIT // item for s in strides):
            return refuse("stride", False)
        pairs = zip(shape, strides, strict=True)
        if sum(abs(s) * (n - 1) * item for n, s in pairs if n > 1) > LIMIT:
            return refuse("span", False)
    flags = spec["flags"] if versioned else 0
    data = {"buf": 1, "null": 0, "bogus": spec["bogus"]}[spec["data_mode"]]
    if size > 0 and data == 0:
        return refuse("null data", False)
    if size > 0 and spec["device"][0] in ADDRESS_DEVICES and data + spec["byte_offset"] >= 2**64:
        return refuse("address past the end", False)
    contiguous = size == 0 or all(
        s == e for n, s, e in zip(shape, strides, c_strides(shape), strict=True) if n != 1
    )
    if bits < 8 and not flags & PADDED and not contiguous:
        return refuse("packed not contiguous", False)
    return dict(
        outcome="ok",
        exc=(),
        early=False,
        why="",
        shape=shape,
        strides=strides,
        size=size,
        item=item,
        readonly=bool(flags & READ_ONLY) if versioned else None,
    )


def readable(spec, expected) -> bool:
    """May tensorbridge read this capsule's elements without reading outside ``buf``?"""
    if expected["outcome"] != "ok":
        return expected["early"]  # refused before the data pointer matters
    if spec["device"][0] not in HOST or expected["size"] == 0:
        return True  # tensorbridge never reads device memory; nothing to read
    return span_in_buffer(spec, expected)


def span_in_buffer(spec, expected) -> bool:
    if spec["data_mode"] != "buf" or expected["size"] * expected["item"] > READ_LIMIT:
        return False
    item = expected["item"]
    first = spec["base"] + spec["byte_offset"]
    pairs = list(zip(expected["shape"], expected["strides"], strict=True))
    lo = first + sum(min(0, (n - 1) * s) * item for n, s in pairs)
    hi = first + sum(max(0, (n - 1) * s) * item for n, s in pairs) + item
    return lo >= 0 and hi <= BUF


def expected_values(spec, expected, buf):
    """The elements a valid, in-buffer capsule describes, read by NumPy from ``buf``."""
    dt = np_dtype(DTYPES[spec["dtype"][:2]])
    return np.ndarray(
        expected["shape"],
        dt,
        buffer=buf,
        offset=spec["base"] + spec["byte_offset"],
        strides=[s * dt.itemsize for s in expected["strides"]],
    )


def call(entry, capsule, cast):
    with quiet_casts():
        if entry == "from_dlpack":
            return tb.from_dlpack(capsule)
        if entry == "asarray":
            return tb.asarray(capsule)
        if entry == "asarray_dtype":
            return tb.asarray(capsule, dtype=cast)
        if entry == "convert_numpy":
            return tb.convert(capsule, "numpy")
        return tb.convert(capsule, "tensorbridge")


def attempt(entry, capsule, cast):
    """(result, None) or (None, exception); exceptions other than ALLOWED propagate.
    The exception comes back without tracebacks, whose frames would keep the capsule
    alive past the point where the test drops it."""
    try:
        return call(entry, capsule, cast), None
    except ALLOWED as exc:
        return None, detached(exc)


def detached(exc: BaseException) -> BaseException:
    """The exception (and those it chains to) without tracebacks."""
    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    return exc


def check_import(spec, expected, entry, result, buf):
    """An accepted capsule: the result describes exactly the capsule's fields."""
    shape = expected["shape"]
    if entry == "convert_numpy":
        assert isinstance(result, np.ndarray)
        assert result.shape == shape
    else:
        assert isinstance(result, tb.Tensor), type(result)
        assert result.shape == shape
    if entry not in ("from_dlpack", "asarray"):
        return
    t = result
    assert t.strides == expected["strides"]
    assert (t.dtype.code, t.dtype.bits) == spec["dtype"][:2]
    assert tuple(t.__dlpack_device__()) == tuple(spec["device"])
    if expected["size"] > 0:
        data = {"buf": buf.__array_interface__["data"][0] + spec["base"], "bogus": spec["bogus"]}[
            spec["data_mode"]
        ]
        assert t.data_ptr() == (data + spec["byte_offset"]) % 2**64
    if expected["readonly"] is not None:
        assert t.readonly == expected["readonly"]
    # Re-export and re-import: the same description. Where the data pointer is an
    # address, byte_offset is folded into it; where it may be a handle, it is kept.
    exported = t.__dlpack__(max_version=(1, 3))
    if expected["size"] > 0:
        info = _core.inspect_capsule(exported)
        assert (info["data"] + info["byte_offset"]) % 2**64 == t.data_ptr()
        if spec["device"][0] in ADDRESS_DEVICES:
            assert info["byte_offset"] == 0
        elif spec["device"][0] in HANDLE_DEVICES:
            assert info["byte_offset"] == spec["byte_offset"]
    again = tb.from_dlpack(exported)
    assert (again.shape, again.strides, again.dtype) == (t.shape, t.strides, t.dtype)
    assert again.readonly == t.readonly
    if expected["size"] > 0:
        assert again.data_ptr() == t.data_ptr()


def check_values(spec, expected, entry, result, buf):
    """An accepted capsule whose elements lie in ``buf``: the bytes read are the ones
    the fields describe."""
    want = expected_values(spec, expected, buf).tobytes()
    if entry == "convert_numpy":
        assert result.tobytes() == want
    elif entry in ("from_dlpack", "asarray", "convert_tb"):
        copy = result.copy()
        assert copy.is_contiguous() and not copy.readonly
        assert tb.convert(copy, "numpy").tobytes() == want


def run_capsule(spec, entries, cast):
    buf = np.random.default_rng(spec["base"]).integers(0, 256, BUF, dtype=np.uint8)
    expected = model(spec)
    if not readable(spec, expected):
        # Only import (metadata) what may point outside real memory.
        entries = ["from_dlpack" if e in READING else e for e in entries]
    note(f"model: {expected}; entries: {entries}")
    event(f"model: {expected['outcome']} {expected['why']}".strip())
    original = spec["name"]
    freed = 1 if spec["deleter"] else 0
    capsule, counter = build(spec, buf)
    with unraisables() as unraisable:
        result, exc = attempt(entries[0], capsule, cast)
        if result is not None:
            assert expected["outcome"] == "ok", (
                f"{entries[0]} accepted a capsule it must refuse ({expected['why']})"
            )
            assert _testing.capsule_name(capsule) == "used_" + original
            check_import(spec, expected, entries[0], result, buf)
            if entries[0] in ("from_dlpack", "asarray"):
                assert counter.calls == 0, "deleter called while the import lives"
            host = spec["device"][0] in HOST
            if (
                host
                and expected["size"] > 0
                and spec["dtype"][1] % 8 == 0
                and np_dtype(DTYPES[spec["dtype"][:2]]) is not None
                and entries[0] != "asarray_dtype"
                and span_in_buffer(spec, expected)
            ):
                check_values(spec, expected, entries[0], result, buf)
                event("values checked")
            elif not host and entries[0] in ("from_dlpack", "asarray"):
                with pytest.raises(BufferError, match="copy"):
                    result.copy()
            del result
            collect()
            assert counter.calls == freed, "deleter not called once when the import died"
            with pytest.raises(BufferError, match="consumed"):
                tb.from_dlpack(capsule)
        else:
            note(f"refused: {type(exc).__name__}: {exc}")
            if expected["outcome"] == "ok":
                assert entries[0] not in ("from_dlpack", "asarray"), (
                    f"{entries[0]} refused a valid capsule: {exc!r}"
                )
            elif entries[0] in ("from_dlpack", "asarray"):
                assert isinstance(exc, expected["exc"]), repr(exc)
            if expected["outcome"] == "version":
                # The spec: a major version tensorbridge cannot read is consumed and freed.
                assert isinstance(exc, BufferError), repr(exc)
                assert _testing.capsule_name(capsule) == "used_" + VERSIONED
                assert counter.calls == freed
            elif (
                expected["outcome"] == "ok" and _testing.capsule_name(capsule) == "used_" + original
            ):
                # A valid capsule, imported; what failed was the step after (a cast or
                # conversion the device or dtype does not allow): the import is gone.
                assert counter.calls == freed
            else:
                # Refused: left exactly as it was ...
                assert _testing.capsule_name(capsule) == original, (
                    f"a refused capsule was renamed ({type(exc).__name__}: {exc})"
                )
                assert counter.calls == 0, (
                    f"a refused capsule's deleter was called ({type(exc).__name__}: {exc})"
                )
                # ... so a second attempt (any entry point) gets the same answer.
                result, exc = attempt(entries[1], capsule, cast)
                if expected["outcome"] == "refuse":
                    assert result is None, f"{entries[1]} accepted what {entries[0]} refused"
                    assert _testing.capsule_name(capsule) == original
                    assert counter.calls == 0
                del result
                collect()
        del capsule
        collect()
        if expected["outcome"] == "refuse":
            assert counter.capsule_frees == 1, "the refused capsule's destructor did not free it"
    assert not unraisable, unraisable
    assert counter.calls == freed, f"deleter called {counter.calls} times over the capsule's life"


@fuzz(2000)
@given(
    spec=capsule_specs(),
    entries=st.lists(st.sampled_from(ENTRIES), min_size=2, max_size=2),
    cast=st.sampled_from(CASTS),
)
def test_crafted_capsules(spec, entries, cast):
    run_capsule(spec, entries, cast)


@fuzz(400)
@given(spec=capsule_specs())
def test_crafted_managed_tensors_through_the_exchange_table(spec):
    """managed_tensor_to_py_object_no_sync steals the managed tensor: the same
    validation as a capsule, and on refusal the deleter is called once, at once."""
    spec = dict(spec, versioned=True, name=VERSIONED)
    buf = np.zeros(BUF, np.uint8)
    expected = model(spec)
    note(f"model: {expected}")
    freed = 1 if spec["deleter"] else 0
    capsule, counter = build(spec, buf)
    with unraisables() as unraisable:
        try:
            t = _testing.table_to_py(tb.zeros(1), capsule)  # the Tensor type's table
        except ALLOWED as exc:
            detached(exc)
            assert expected["outcome"] != "ok", f"the table refused a valid tensor: {exc!r}"
            assert counter.calls == freed, "a refused, stolen tensor was not released"
        else:
            assert expected["outcome"] == "ok", (
                f"the table accepted a tensor it must refuse ({expected['why']})"
            )
            check_import(spec, expected, "from_dlpack", t, buf)
            assert counter.calls == 0
            del t
            collect()
            assert counter.calls == freed
        del capsule
        collect()
    assert not unraisable, unraisable
    assert counter.calls == freed
    assert counter.capsule_frees == 0


# --------------------------------------------------------------------------
# 2. Struct kind mismatches
# --------------------------------------------------------------------------


@fuzz(200)
@given(
    spec=capsule_specs(),
    entries=st.lists(st.sampled_from(ENTRIES), min_size=2, max_size=2),
    cast=st.sampled_from(CASTS),
)
def test_versioned_struct_in_a_legacy_capsule(spec, entries, cast):
    """The name decides the kind: read as a legacy struct, a versioned one has garbage
    fields (data = the version, device = manager_ctx, ndim/dtype = the deleter's
    address; the 'deleter' is the shape pointer). tensorbridge must refuse it without
    calling that deleter; the capsule's own destructor, which knows the real kind,
    frees it."""
    spec = dict(spec, versioned=True, name=LEGACY)
    buf = np.zeros(BUF, np.uint8)
    capsule, counter = build(spec, buf)
    with unraisables() as unraisable:
        for entry in entries:
            result, exc = attempt(entry, capsule, cast)
            assert result is None, f"{entry} imported a versioned struct as a legacy one"
            assert isinstance(exc, BufferError), repr(exc)
            assert _testing.capsule_name(capsule) == LEGACY
            assert counter.calls == 0
        del capsule
        collect()
    assert not unraisable, unraisable
    assert counter.calls == (1 if spec["deleter"] else 0)
    assert counter.capsule_frees == 1


@fuzz(100)
@given(
    spec=capsule_specs(),
    data=st.integers(0, 2**64 - 1).filter(lambda d: d & 0xFFFFFFFF != 1),
    entry=st.sampled_from(ENTRIES),
    cast=st.sampled_from(CASTS),
)
def test_legacy_struct_in_a_versioned_capsule(spec, data, entry, cast):
    """Read as versioned, a legacy struct's data pointer is the version (never 1 here)
    and its ndim/dtype the deleter. With ndim 0 and dtype zero that deleter is NULL, so
    the spec's rule (rename, call the deleter, BufferError) is safe to run."""
    spec = dict(
        spec,
        versioned=False,
        name=VERSIONED,
        shape=[],
        ndim=None,
        strides=None,
        dtype=(0, 0, 0),
        data_mode="bogus",
        bogus=data,
    )
    capsule, counter = build(spec, np.zeros(BUF, np.uint8))
    with unraisables() as unraisable:
        result, exc = attempt(entry, capsule, cast)
        assert result is None and isinstance(exc, BufferError), repr(exc)
        assert "version" in str(exc)
        assert _testing.capsule_name(capsule) == "used_" + VERSIONED
        del capsule
        collect()
    assert not unraisable, unraisable
    assert counter.calls == 0 and counter.capsule_frees == 0


# --------------------------------------------------------------------------
# 3. tensorbridge's own capsules, renamed and dropped
# --------------------------------------------------------------------------

_RENAMES = st.one_of(
    st.sampled_from(
        [
            "<keep>",
            "<own>",
            "<other kind>",
            "used_" + LEGACY,
            "used_" + VERSIONED,
            None,
            "",
            "not_a_tensor",
        ]
    ),
    st.text(alphabet="abdelnstuv_", max_size=12).map(lambda s: "used_" + s),
    st.text(alphabet="abdelnstuv_", max_size=12),
)


def export(t, how):
    return tb.to_dlpack(t) if how == "to_dlpack" else t.__dlpack__(max_version=how)


@fuzz(400)
@given(
    dtype=st.sampled_from(STANDARD),
    n=st.integers(0, 6),
    view=st.booleans(),
    readonly=st.booleans(),
    how=st.sampled_from([(1, 3), (1, 0), (2, 0), None, (0, 9), "to_dlpack"]),
    rename=_RENAMES,
    feed=st.booleans(),
)
def test_exported_capsules_renamed_and_dropped(dtype, n, view, readonly, how, rename, feed):
    a = np.arange(n * 2).astype(dtype)
    capsule, counter = _testing.make_capsule(
        a,
        shape=a.shape,
        strides=(1,),
        dtype=(DTYPES_BY_NAME[dtype].code, a.itemsize * 8, 1),
        flags=READ_ONLY if readonly else 0,
        owner=a,
    )
    source = tb.from_dlpack(capsule)
    del capsule
    t = source[::-2] if view else source
    versioned = how != "to_dlpack" and how is not None and how[0] >= 1
    if readonly and not versioned:
        with pytest.raises(BufferError, match="read-only"):
            export(t, how)
        return
    exported = export(t, how)
    own = VERSIONED if versioned else LEGACY
    name = {"<keep>": own, "<own>": own, "<other kind>": LEGACY if versioned else VERSIONED}.get(
        rename, rename
    )
    if rename != "<keep>":
        _testing.set_capsule_name(exported, name)
    assert _testing.capsule_name(exported) == name
    with unraisables() as unraisable:
        if feed and name != own and not (name == VERSIONED and not versioned):
            # Refused by name (or, a versioned struct under 'dltensor', by its misread
            # fields); never a legacy struct under 'dltensor_versioned', whose misread
            # version and deleter no consumer could survive.
            result, exc = attempt("from_dlpack", exported, None)
            assert result is None and isinstance(exc, (BufferError, TypeError)), repr(exc)
            assert _testing.capsule_name(exported) == name
        del exported
        collect()
    if name == own:
        assert not unraisable, unraisable
        released = True
    elif name is not None and name.startswith("used_"):
        assert not unraisable, unraisable  # consumed: the destructor does nothing
        released = False
    else:
        assert len(unraisable) == 1, unraisable  # reported, and leaked
        released = False
    assert counter.calls == 0
    del t, source
    collect()
    assert counter.calls == (1 if released else 0)


# --------------------------------------------------------------------------
# 4. Tensor operations against NumPy
# --------------------------------------------------------------------------


def random_values(rng, shape, dtype):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    values = rng.standard_normal(shape) * 100
    if values.size:
        flat = values.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] = [np.nan, np.inf, -0.0]
    if dt.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    with quiet_casts():
        return values.astype(dt)


@st.composite
def strided_arrays(draw):
    """A NumPy array of a standard dtype with random strides: steps (also negative),
    offsets, a permutation, sometimes a broadcast (zero-stride, read-only) dimension."""
    dtype = draw(st.sampled_from(STANDARD))
    ndim = draw(st.integers(0, 4))
    shape = [draw(st.integers(0, 5)) for _ in range(ndim)]
    steps = [draw(st.sampled_from([1, 1, 2, 3])) for _ in range(ndim)]
    starts = [draw(st.integers(0, 2)) for _ in range(ndim)]
    flips = [draw(st.booleans()) for _ in range(ndim)]
    dims = list(zip(starts, shape, steps, strict=True))
    parent_shape = [s + n * k + draw(st.integers(0, 1)) for s, n, k in dims]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    parent = random_values(rng, parent_shape, dtype)
    # (the trailing Ellipsis keeps 0-d results arrays, not NumPy scalars)
    a = parent[(*(slice(s, s + n * k, k) for s, n, k in dims), ...)]
    a = a[(*(slice(None, None, -1 if f else 1) for f in flips), ...)]
    a = a.transpose(draw(st.permutations(range(ndim))))
    if draw(st.integers(0, 4)) == 0 and a.ndim < 4:
        axis = draw(st.integers(0, a.ndim))
        new_shape = list(a.shape)
        new_shape.insert(axis, draw(st.integers(0, 3)))
        a = np.broadcast_to(np.expand_dims(a, axis), new_shape)
    return a


def as_numpy(x) -> np.ndarray:
    return np.from_dlpack(x) if isinstance(x, tb.Tensor) else np.asarray(x)


def assert_same(got, want: np.ndarray, *, strides=True):
    """Same shape, dtype and bytes (NaNs included); same strides where they matter."""
    g = as_numpy(got)
    assert (g.shape, g.dtype) == (want.shape, want.dtype)
    assert g.tobytes() == want.tobytes(), (g, want)
    if strides and isinstance(got, tb.Tensor) and want.size > 0:
        item = want.itemsize
        for n, s, w in zip(want.shape, got.strides, want.strides, strict=True):
            if n > 1:
                assert s * item == w, (got.strides, want.strides)


@st.composite
def basic_indices(draw, shape):
    """A basic index for ``shape``: ints (sometimes out of range), slices with any step,
    None and at most one Ellipsis."""
    ndim = len(shape)
    use_ellipsis = draw(st.booleans())
    n_lead = draw(st.integers(0, ndim))
    n_tail = draw(st.integers(0, ndim - n_lead)) if use_ellipsis else 0
    dims = list(range(n_lead)) + list(range(ndim - n_tail, ndim))

    def item(n):
        kind = draw(st.sampled_from(["int", "slice", "slice", "none"]))
        if kind == "int":
            if draw(st.integers(0, 19)) == 0:
                return draw(st.sampled_from([n, -n - 1, n + 3]))  # out of range
            return draw(st.integers(-n, n - 1)) if n > 0 else slice(None)
        if kind == "none":
            return None
        bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
        step = draw(st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2, -3])))
        return slice(draw(bound), draw(bound), step)

    lead = []
    for d in dims[:n_lead]:
        while (it := item(shape[d])) is None:
            lead.append(None)
        lead.append(it)
    tail = []
    for d in dims[n_lead:]:
        while (it := item(shape[d])) is None:
            tail.append(None)
        tail.append(it)
    key = (*lead, Ellipsis, *tail) if use_ellipsis else tuple(lead)
    if draw(st.booleans()):
        key = (*key, None)
    if len(key) == 1 and draw(st.booleans()):
        return key[0]
    return key


def source_tensor(a: np.ndarray, how: str) -> tb.Tensor:
    t = tb.from_dlpack(a) if how == "from_dlpack" else tb.asarray(a)
    assert t.shape == a.shape
    assert t.readonly == (not a.flags.writeable)
    assert_same(t, a)
    return t


@fuzz(400)
@given(data=st.data(), a=strided_arrays(), how=st.sampled_from(["from_dlpack", "asarray"]))
def test_basic_indexing_matches_numpy(data, a, how):
    t = source_tensor(a, how)
    key = data.draw(basic_indices(a.shape), label="key")
    try:
        want = a[key]
    except IndexError:
        with pytest.raises(IndexError):
            t[key]
        return
    got = t[key]
    assert_same(got, np.asarray(want))
    if isinstance(got, tb.Tensor):
        assert got.readonly == t.readonly
        if got.size > 0:
            assert np.shares_memory(as_numpy(got), a)


@st.composite
def new_shapes(draw, size):
    """A shape of ``size`` elements (with a -1 sometimes)."""
    if size == 0:
        shape = draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
        if 0 not in shape:
            shape[draw(st.integers(0, len(shape) - 1))] = 0
        return tuple(shape)
    factors, n, p = [], size, 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    ndim = draw(st.integers(max(1 if factors else 0, 0), 4))
    shape = [1] * ndim
    for f in factors:
        shape[draw(st.integers(0, ndim - 1))] *= f
    if ndim and draw(st.booleans()):
        shape[draw(st.integers(0, ndim - 1))] = -1
    return tuple(shape)


@fuzz(300)
@given(data=st.data(), a=strided_arrays())
def test_reshape_and_permutations_match_numpy(data, a):
    t = source_tensor(a, "from_dlpack")
    new = data.draw(new_shapes(a.size), label="shape")
    want = a.reshape(new)
    got = t.reshape(new)
    assert_same(got, want, strides=False)
    if got.size > 0 and np.shares_memory(want, a):
        # NumPy could make a view: so must tensorbridge ("a view whenever the strides
        # allow it").
        assert np.shares_memory(as_numpy(got), a), "reshape copied where a view exists"
    perm = data.draw(st.permutations(range(a.ndim)), label="perm")
    assert_same(t.permute(*perm), a.transpose(perm))
    assert_same(t.transpose(tuple(perm)), a.transpose(perm))
    assert_same(t.T, a.T)
    assert_same(t.transpose(), a.T)
    if a.ndim >= 1:
        d0 = data.draw(st.integers(-a.ndim, a.ndim - 1), label="d0")
        d1 = data.draw(st.integers(-a.ndim, a.ndim - 1), label="d1")
        assert_same(t.transpose(d0, d1), np.swapaxes(a, d0, d1))
    assert_same(t.flatten(), a.reshape(-1), strides=False)


@fuzz(300)
@given(a=strided_arrays(), how=st.sampled_from(["from_dlpack", "asarray"]))
def test_copies_and_round_trips_match_numpy(a, how):
    t = source_tensor(a, how)
    assert t.is_contiguous() == a.flags.c_contiguous
    c = t.copy()
    assert c.is_contiguous() and not c.readonly
    assert_same(c, a.copy(order="C"), strides=False)
    if a.size:
        assert c.data_ptr() != t.data_ptr()
        assert c.data_ptr() % 64 == 0
    contiguous = t.contiguous()
    assert (contiguous is t) == t.is_contiguous()
    assert contiguous.is_contiguous()
    assert_same(contiguous, a.copy(order="C"), strides=False)
    # NumPy reading us shares our memory.
    back = np.from_dlpack(t)
    assert_same(back, a)
    if a.size:  # (NumPy makes every empty import writable: nothing can be written)
        assert back.flags.writeable == (not t.readonly)
        assert back.__array_interface__["data"][0] == t.data_ptr()
    # Our capsule into ourselves: the same description and memory.
    again = tb.from_dlpack(t.__dlpack__(max_version=(1, 3)))
    assert (again.shape, again.strides, again.dtype, again.readonly) == (
        t.shape,
        t.strides,
        t.dtype,
        t.readonly,
    )
    assert_same(again, a)
    if a.size:
        assert again.data_ptr() == t.data_ptr()
    if not t.readonly:
        legacy = tb.from_dlpack(tb.to_dlpack(t))
        assert_same(legacy, a)


@fuzz(300)
@given(a=strided_arrays(), target=st.sampled_from(STANDARD), via_tensor=st.booleans())
def test_asarray_casts_match_numpy(a, target, via_tensor):
    source = tb.from_dlpack(a) if via_tensor else a
    with quiet_casts():
        want = a.astype(target)
        got = tb.asarray(source, dtype=target)
    assert got.dtype == target
    assert_same(got, want, strides=False)
    if target == a.dtype.name:
        assert got.size == 0 or np.shares_memory(as_numpy(got), a)
