# SPDX-License-Identifier: Apache-2.0
"""Fuzzing what tensorbridge reads from foreign structs: the Arrow C data interface
(``_arrow.pxi``) and the buffer protocol (``_buffers.pxi``). (DLPack capsules are
fuzzed in ``test_fuzz.py``.)

Arrow. Arrays of nested fixed-size lists over a primitive, built with ctypes, whose every
count and offset is drawn either honest or overflow-sized (2**31, 2**62, 2**63 - 1,
negative), with widths up to 18 digits, validity bitmaps present or not, null counts
that lie, missing children and buffers. Each is read by ``asarray`` as an array and as
a one-chunk stream. A model of the reader's rules in Python integers (which cannot
wrap) says whether the array must be refused, and if not the tensor's shape and where
its data starts: a reader whose 64-bit arithmetic wraps accepts what the model
refuses or points elsewhere. Accepted tensors are read when their elements lie in the
real buffer behind the structs, and compared with it.

Memory safety of the fuzz itself: the reader trusts buffer sizes (Arrow says nothing
of them), so examples whose accepted reads (validity bits, boolean values) would go
past the real buffers are discarded before the call; zero-copy tensors beyond them are
only checked for their metadata.

Buffers. ``Py_buffer`` fields from a C exporter made with ctypes (``buffer_ctypes``):
ndim, itemsize, shape, strides and len drawn honest or overflow-sized, NULL shapes and
data, suboffsets, formats with repeat counts and structs. The model (the PEP 3118
rules tensorbridge keeps, in Python integers) says refused or the shape and strides;
accepted buffers whose elements lie in the real memory are compared with it byte for
byte.

Runs under the sanitizers in CI (``.ci/sanitize``); ``TENSORBRIDGE_FUZZ_EXAMPLES=N``
runs N examples per test.
"""

from __future__ import annotations

import ctypes
import math
import os

import numpy as np
import pytest
from arrow_ctypes import (
    ARRAY_RELEASE,
    GET_NEXT,
    GET_SCHEMA,
    LAST_ERROR,
    SCHEMA_RELEASE,
    STREAM_RELEASE,
    ArrowArray,
    ArrowArrayStream,
    ArrowSchema,
    capsule_new,
)
from buffer_ctypes import CraftedBuffer
from hypothesis import HealthCheck, assume, event, given, note, settings
from hypothesis import strategies as st

import tensorbridge as tb

I64 = 2**63 - 1
LIMIT = 2**62  # bytes: the bound on what a tensor spans (_check_layout)
BUF = 512  # bytes of real memory behind the values and each validity bitmap
OVERFLOWING = [2**31 - 1, 2**31, 2**32, 2**62, 2**62 + 1, 2**63 - 1]
NEGATIVE = [-1, -(2**31), -(2**63)]
# format letter -> (itemsize in bytes, NumPy dtype); "b": bit-packed booleans
PRIMITIVES = {
    b"c": (1, "int8"),
    b"C": (1, "uint8"),
    b"s": (2, "int16"),
    b"S": (2, "uint16"),
    b"i": (4, "int32"),
    b"I": (4, "uint32"),
    b"l": (8, "int64"),
    b"L": (8, "uint64"),
    b"e": (2, "float16"),
    b"f": (4, "float32"),
    b"g": (8, "float64"),
    b"b": (1, "bool"),
}
_EXAMPLES = os.environ.get("TENSORBRIDGE_FUZZ_EXAMPLES")


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=int(_EXAMPLES) if _EXAMPLES else examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


# --------------------------------------------------------------------------
# What is drawn
# --------------------------------------------------------------------------


def _count(small: int = 8):
    return st.one_of(
        st.integers(0, small), st.integers(0, small), st.sampled_from(OVERFLOWING + NEGATIVE)
    )


@st.composite
def levels(draw, last: bool):
    """One level's ArrowArray fields (the leaf's when `last`)."""
    return dict(
        offset=draw(_count()),
        length=draw(_count()),
        null_count=draw(st.sampled_from([0, 0, 0, -1, 1, 3, I64, -(2**63)])),
        bitmap=draw(st.binary(min_size=1, max_size=4)) if draw(st.booleans()) else None,
        n_children=0 if last else draw(st.sampled_from([1, 1, 1, 1, 0, 2, -1, 2**62])),
        child_null=False if last else draw(st.integers(0, 15)) == 0,
        n_buffers=draw(st.sampled_from([2, 2, 2, 2, 0, 1, 3, -1, I64])) if last else 1,
        buffers_null=draw(st.integers(0, 15)) == 0,
        values_null=last and draw(st.integers(0, 15)) == 0,
    )


@st.composite
def arrays(draw):
    depth = draw(st.sampled_from([0, 1, 1, 2, 2, 3]))
    widths = [
        draw(st.one_of(st.integers(0, 4), st.sampled_from([2**31, 2**62, 999999999999999999])))
        for _ in range(depth)
    ]
    width_texts = [str(w).encode() for w in widths]
    if depth and draw(st.integers(0, 9)) == 0:
        bad = draw(st.sampled_from([b"", b"-1", b"+2", b"1e3", b"9" * 19, b"\xff"]))
        width_texts[draw(st.integers(0, depth - 1))] = bad
    leaf = draw(st.sampled_from(sorted(PRIMITIVES)))
    return dict(
        widths=widths,
        width_texts=width_texts,
        leaf=leaf,
        levels=[draw(levels(last=i == depth)) for i in range(depth + 1)],
        values=draw(st.integers(0, 255)),  # the first byte of a counting pattern
    )


# --------------------------------------------------------------------------
# The model: the reader's rules in Python integers
# --------------------------------------------------------------------------


class Refused(Exception):
    pass


def _memory(pattern: bytes | int) -> bytes:
    """BUF bytes: a bitmap's few bytes repeated, or bytes counting up from a number."""
    if isinstance(pattern, int):
        return bytes((pattern + i) % 256 for i in range(BUF))
    return (pattern * BUF)[:BUF]


def _bits(pattern: bytes, start: int, n: int) -> int:
    """Nulls (zero bits) among bits [start, start + n); the reads must lie in BUF."""
    assume(start + n <= 8 * BUF)  # a bitmap that short is a lie the reader cannot see
    bitmap = _memory(pattern)
    return sum(not (bitmap[i >> 3] >> (i & 7)) & 1 for i in range(start, start + n))


def _nulls(level: dict, start: int, n: int) -> int:
    if level["null_count"] == 0 or n == 0:
        return 0
    if level["buffers_null"] or level["bitmap"] is None:
        if level["null_count"] > 0:
            raise Refused("a null count without a bitmap")
        return 0
    if level["null_count"] > 0 and start == level["offset"] and n == level["length"]:
        return level["null_count"]
    return _bits(level["bitmap"], start, n)


def _elements(shape, item: int) -> None:
    """Refused when the non-zero extents hold more than 2**62 bytes."""
    elements = 1
    for extent in shape:
        if extent:
            elements *= extent
            if elements > LIMIT // item:
                raise Refused("more elements than a 64-bit address space")


def model(spec: dict, stream: bool = False) -> tuple[tuple[int, ...], int, int]:
    """(shape, first element, element count) of the tensor, or Refused. A stream
    skips a chunk of length 0 unread: the result is empty, of the schema's shape."""
    for text in spec["width_texts"]:
        if not (0 < len(text) <= 18 and text.isdigit()):
            raise Refused("a malformed width")
    top = spec["levels"][0]
    if stream and top["length"] == 0:
        _elements(spec["widths"], PRIMITIVES[spec["leaf"]][0])
        return (0, *spec["widths"]), 0, 0
    if top["length"] < 0 or top["offset"] < 0:
        raise Refused("negative length or offset")
    start, count = top["offset"], top["length"]
    if start + count > I64:
        raise Refused("offset + length past 2**63")
    shape = [top["length"]]
    depth = len(spec["widths"])
    for depth_i in range(depth + 1):
        level = spec["levels"][depth_i]
        if _nulls(level, start, count):
            raise Refused("nulls")
        if depth_i == depth:
            break
        if level["n_children"] != 1 or level["child_null"]:
            raise Refused("no child")
        width = spec["widths"][depth_i]
        shape.append(width)
        start, count = start * width, count * width
        if start > I64 or count > I64:
            raise Refused("extents past 2**63")
        child = spec["levels"][depth_i + 1]
        if child["offset"] < 0 or child["length"] < 0:
            raise Refused("a negative child offset or length")
        start += child["offset"]
        if start > I64:
            raise Refused("a child offset past 2**63")
        end, limit = start + count, child["offset"] + child["length"]
        if end > I64 or limit > I64 or end > limit:
            raise Refused("a child shorter than its parent says")
    leaf = spec["levels"][-1]
    if leaf["buffers_null"]:
        raise Refused("a NULL buffers pointer")
    if leaf["n_buffers"] != 2:
        raise Refused("not 2 buffers")
    if leaf["values_null"] and count > 0:
        raise Refused("a NULL values buffer")
    item = PRIMITIVES[spec["leaf"]][0]
    if start + count > I64:
        raise Refused("elements past 2**63")
    end_byte = (start + count) * (item if spec["leaf"] != b"b" else 1)
    if end_byte > LIMIT:  # (DLPack's bound on byte_offset: bits, for booleans)
        raise Refused("elements past 2**62 bytes from the buffer's start")
    _elements(shape, item)
    if spec["leaf"] == b"b" and count:
        assume(start + count <= 8 * BUF)  # booleans are unpacked: read at once
    return tuple(shape), start, count


# --------------------------------------------------------------------------
# The structs
# --------------------------------------------------------------------------


# Children are released by their parent's release callback (the top-level one here).
_NO_RELEASE = SCHEMA_RELEASE(lambda p: None)


class Crafted:
    """The spec's schema and array as ctypes structs (kept alive here), offered as
    an array and as a stream of one chunk; counts the releases of each."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.keep: list = []
        self.released = {"schema": 0, "array": 0}
        self._release_schema = SCHEMA_RELEASE(self._schema_released)
        self._release_array = ARRAY_RELEASE(self._array_released)

    def _schema_released(self, p):
        self.released["schema"] += 1
        p.contents.release = SCHEMA_RELEASE()

    def _array_released(self, p):
        self.released["array"] += 1
        p.contents.release = ARRAY_RELEASE()

    def schema(self, out: ArrowSchema) -> ArrowSchema:
        child = None
        leaf = ArrowSchema(self.spec["leaf"], b"x", None, 0, 0, None, None, _NO_RELEASE, None)
        self.keep.append(leaf)
        child = leaf
        for text in reversed(self.spec["width_texts"]):
            children = (ctypes.POINTER(ArrowSchema) * 1)(ctypes.pointer(child))
            lists = ArrowSchema(b"+w:" + text, b"x", None, 0, 1, children, None, _NO_RELEASE, None)
            self.keep += [children, lists]
            child = lists
        ctypes.memmove(ctypes.addressof(out), ctypes.addressof(child), ctypes.sizeof(child))
        out.release = self._release_schema
        return out

    def _level(self, index: int, out: ArrowArray) -> ArrowArray:
        level = self.spec["levels"][index]
        last = index == len(self.spec["levels"]) - 1
        bitmap = values = None
        if level["bitmap"] is not None:
            bitmap = ctypes.create_string_buffer(_memory(level["bitmap"]), BUF)
        if last and not level["values_null"]:
            values = ctypes.create_string_buffer(_memory(self.spec["values"]), BUF)
            self.values_address = ctypes.addressof(values)
        slots = (ctypes.c_void_p * 3)(
            ctypes.addressof(bitmap) if bitmap is not None else None,
            ctypes.addressof(values) if values is not None else None,
            None,
        )
        out.length, out.offset = level["length"], level["offset"]
        out.null_count, out.n_buffers = level["null_count"], level["n_buffers"]
        out.n_children = level["n_children"]
        out.buffers = None if level["buffers_null"] else slots
        out.children = None
        if not last and not level["child_null"]:
            child = self._level(index + 1, ArrowArray())
            out.children = (ctypes.POINTER(ArrowArray) * 1)(ctypes.pointer(child))
            self.keep += [child, out.children]
        out.dictionary, out.private_data = None, None
        out.release = self._release_array
        self.keep += [bitmap, values, slots]
        return out

    def array(self, out: ArrowArray) -> ArrowArray:
        return self._level(0, out)

    def __arrow_c_array__(self, requested_schema=None):
        s, a = self.schema(ArrowSchema()), self.array(ArrowArray())
        self.keep += [s, a]
        return (
            capsule_new(ctypes.addressof(s), b"arrow_schema", None),
            capsule_new(ctypes.addressof(a), b"arrow_array", None),
        )

    def stream(self) -> Stream:
        return Stream(self)


class Stream:
    """A stream of the crafted array, once, over the crafted schema."""

    def __init__(self, crafted: Crafted) -> None:
        self.crafted = crafted
        self.given = False

    def __arrow_c_stream__(self, requested_schema=None):
        def get_schema(_, out):
            self.crafted.schema(out.contents)
            return 0

        def get_next(_, out):
            if self.given:
                out.contents.release = ARRAY_RELEASE()
            else:
                self.given = True
                self.crafted.array(out.contents)
            return 0

        def release(p):
            p.contents.release = STREAM_RELEASE()

        self.callbacks = (
            GET_SCHEMA(get_schema),
            GET_NEXT(get_next),
            LAST_ERROR(lambda _: None),
            STREAM_RELEASE(release),
        )
        stream = ArrowArrayStream(*self.callbacks)
        self.crafted.keep.append(stream)
        return capsule_new(ctypes.addressof(stream), b"arrow_array_stream", None)


# --------------------------------------------------------------------------
# The properties
# --------------------------------------------------------------------------


def _expected_values(spec: dict, start: int, count: int) -> np.ndarray | None:
    """The elements [start, start + count) from the real buffer, or None when they lie
    beyond it (never read)."""
    item, name = PRIMITIVES[spec["leaf"]]
    if spec["leaf"] == b"b":
        memory = np.frombuffer(_memory(spec["values"]), np.uint8)
        bits = np.unpackbits(memory, bitorder="little")
        return bits[start : start + count].astype(bool)
    if (start + count) * item > BUF:
        return None
    return np.frombuffer(_memory(spec["values"]), dtype=name, count=count, offset=start * item)


def check(spec: dict, source, crafted: Crafted, stream: bool = False) -> bool:
    """Read source as the model says; whether the reader took the array over (any
    refusal but the schema's comes after)."""
    try:
        want = model(spec, stream)
    except Refused as why:
        event(f"refused: {why}")
        note(f"the model refuses: {why}")
        with pytest.raises((BufferError, ValueError)) as refused:
            tb.asarray(source)
        assert "() raised" not in str(refused.value)  # the reader's refusal, not ours
        return str(why) != "a malformed width"
    shape, start, count = want
    event("accepted")
    t = tb.asarray(source)
    assert t.shape == shape
    # (booleans are unpacked into new memory; an empty stream gives a new empty tensor,
    # read-only as one chunk would be)
    skipped = stream and spec["levels"][0]["length"] == 0
    assert t.readonly == (spec["leaf"] != b"b" or skipped)
    if spec["leaf"] != b"b" and count:
        offset = t.data_ptr() - crafted.values_address
        assert offset == start * PRIMITIVES[spec["leaf"]][0], "the data pointer wrapped"
    expected = _expected_values(spec, start, count)
    if expected is not None:
        got = np.asarray(t.contiguous()).reshape(-1)
        assert got.tobytes() == expected.tobytes()
    del t
    return True


@fuzz(1500)
@given(spec=arrays())
def test_crafted_arrow_arrays_are_refused_or_read_exactly(spec):
    crafted = Crafted(spec)
    taken = check(spec, crafted, crafted)  # (no gc.collect: releases are by refcount)
    # The schema stays its capsule's; the array is released once when taken over.
    assert crafted.released == {"schema": 0, "array": int(taken)}


@fuzz(600)
@given(spec=arrays())
def test_crafted_arrow_streams_are_refused_or_read_exactly(spec):
    crafted = Crafted(spec)
    taken = check(spec, crafted.stream(), crafted, stream=True)
    # The stream's schema and chunk are the reader's: each released once.
    assert crafted.released == {"schema": 1, "array": int(taken)}


@fuzz(300)
@given(
    width=st.sampled_from([0, 0, 1, 2]),
    rows=st.lists(st.one_of(st.integers(0, 5), st.sampled_from(OVERFLOWING)), max_size=6),
)
def test_stream_rows_are_summed_without_wrapping(width, rows):
    # fixed_size_list<int8>[width] chunks: width 0 needs no memory, so any row count
    # is honest; the total must fit in 64 bits, or the stream is refused.
    chunks = [
        dict(
            widths=[width],
            width_texts=[str(width).encode()],
            leaf=b"c",
            levels=[_honest_level(n, last=False), _honest_level(n * width, last=True)],
            values=0,
        )
        for n in rows
    ]
    assume(all(n * width <= BUF for n in rows))  # memory honest for widths above 0
    schema = Crafted(dict(widths=[width], width_texts=[str(width).encode()], leaf=b"c"))
    stream = _Chunks(schema, [Crafted(c) for c in chunks])
    total = sum(rows)
    # One chunk, or the whole, over 2**62 rows is refused for its extent (NumPy's
    # bound, even with width 0); a total past 2**63 - 1 for its sum, which must not wrap.
    if max(rows, default=0) > LIMIT or total > LIMIT:
        why = "rows in all" if total > I64 and max(rows) <= LIMIT else "64-bit address space"
        with pytest.raises(BufferError, match=why):
            tb.asarray(stream)
        return
    t = tb.asarray(stream)
    assert t.shape == (total, width)


def _honest_level(length: int, last: bool) -> dict:
    """One level's fields as an honest producer fills them: no offset, no nulls, a
    child for a list level, validity and values buffers for the leaf."""
    return dict(
        offset=0,
        length=length,
        null_count=0,
        bitmap=None,
        n_children=0 if last else 1,
        child_null=False,
        n_buffers=2 if last else 1,
        buffers_null=False,
        values_null=False,
    )


class _Chunks:
    """A stream of several crafted arrays over one crafted schema."""

    def __init__(self, schema: Crafted, chunks: list[Crafted]) -> None:
        self.first, self.chunks = schema, chunks

    def __arrow_c_stream__(self, requested_schema=None):
        pending = iter(self.chunks)
        first = self.first

        def get_schema(_, out):
            first.schema(out.contents)
            return 0

        def get_next(_, out):
            chunk = next(pending, None)
            if chunk is None:
                out.contents.release = ARRAY_RELEASE()
            else:
                chunk.array(out.contents)
            return 0

        self.callbacks = (
            GET_SCHEMA(get_schema),
            GET_NEXT(get_next),
            LAST_ERROR(lambda _: None),
            STREAM_RELEASE(lambda p: setattr(p.contents, "release", STREAM_RELEASE())),
        )
        stream = ArrowArrayStream(*self.callbacks)
        first.keep.append(stream)
        return capsule_new(ctypes.addressof(stream), b"arrow_array_stream", None)


# --------------------------------------------------------------------------
# The buffer protocol: Py_buffer fields from a C exporter
# --------------------------------------------------------------------------

MEMORY = 256  # bytes behind every crafted buffer; its data pointer is in the middle
_FORMATS = [b"B", b"b", b"i", b"I", b"f", b"d", b"q", b"e", b"<i", b"=f", b"@d", None]
_BAD_FORMATS = [b"", b"1000000000000000000000i", b"T{i:a:}", b"(2,3)i", b"2i", b">i", b"\xff"]


def _extent():
    return st.one_of(st.integers(0, 3), st.integers(0, 3), st.sampled_from(OVERFLOWING + NEGATIVE))


@st.composite
def buffers(draw):
    ndim = draw(st.sampled_from([0, 1, 1, 2, 2, 3, -1, 64, 65]))
    itemsize = draw(st.sampled_from([1, 2, 4, 8, 8, 16, 0, -1, 17, I64]))
    rank = max(0, min(ndim, 66))
    shape = None if draw(st.integers(0, 5)) == 0 else [draw(_extent()) for _ in range(rank)]
    strides = None
    if draw(st.booleans()):
        strides = [
            draw(
                st.one_of(
                    st.integers(-3, 3).map(lambda k: k * max(itemsize, 1)),
                    st.sampled_from(OVERFLOWING + NEGATIVE + [3, 5]),
                )
            )
            for _ in range(rank)
        ]
    fmt = draw(st.sampled_from(_FORMATS + _BAD_FORMATS[: draw(st.integers(0, 1)) * 7]))
    return dict(
        ndim=ndim,
        itemsize=itemsize,
        shape=shape,
        strides=strides,
        format=fmt,
        suboffsets=[0] if draw(st.integers(0, 15)) == 0 else None,
        null_buf=draw(st.integers(0, 15)) == 0,
        len=draw(st.one_of(st.none(), st.sampled_from([-1, 0, 4, 2**62, I64]))),  # None: honest
    )


def _honest_dtype(fmt, itemsize: int):
    """The dtype tensorbridge gives this format and itemsize on an honest one-element
    buffer (None: it refuses them): the fuzz is of the other fields."""
    memory = ctypes.create_string_buffer(max(itemsize, 1))
    one = CraftedBuffer(
        buf=ctypes.addressof(memory), shape=[1], len=itemsize, itemsize=itemsize, format=fmt
    )
    try:
        return tb.asarray(one).dtype
    except (BufferError, ValueError, TypeError):
        return None


def buffer_model(spec: dict):
    """(shape, strides in elements) of the tensor, or Refused."""
    ndim, item, shape, strides = spec["ndim"], spec["itemsize"], spec["shape"], spec["strides"]
    if spec["suboffsets"] is not None:
        raise Refused("suboffsets")
    if ndim > 64 or ndim < 0:
        raise Refused("ndim")
    if not 1 <= item <= 16:
        raise Refused("itemsize")
    if _honest_dtype(spec["format"], item) is None:
        raise Refused("format")
    length = spec["len"]
    if shape is None:
        if ndim > 1:
            raise Refused("no shape")
        honest = length if length is not None else 4 * item
        shape = [honest // item] if ndim == 1 else []
    if strides is not None and any(s % item for s in strides):
        raise Refused("stride not a multiple of the itemsize")
    elements = [s // item for s in strides] if strides is not None else None
    if any(n < 0 for n in shape):
        raise Refused("negative extent")
    _elements(shape, item)
    size = math.prod(shape)
    if size and elements is not None:
        span = 0
        for n, s in zip(shape, elements, strict=True):
            if abs(s) > LIMIT // item:
                raise Refused("stride out of range")
            span += abs(s) * (n - 1) * item if n > 1 else 0
            if span > LIMIT:
                raise Refused("span")
    if length is not None and length != size * item:
        raise Refused("len disagrees with the shape")
    if spec["null_buf"] and size:
        raise Refused("NULL data")
    if not size or elements is None:
        elements = list(_c_strides(shape))
    return tuple(shape), tuple(elements), size


def _c_strides(shape):
    stride, out = 1, []
    for n in reversed(shape):
        out.append(stride)
        stride *= max(n, 1)
    return reversed(out)


@fuzz(800)
@given(spec=buffers())
def test_crafted_buffers_are_refused_or_read_exactly(spec):
    memory = ctypes.create_string_buffer(_memory(7)[:MEMORY], MEMORY)
    middle = ctypes.addressof(memory) + MEMORY // 2
    fields = dict(spec)
    fields.pop("null_buf")
    fields["buf"] = None if spec["null_buf"] else middle
    try:
        want = buffer_model(spec)
    except Refused as why:
        event(f"refused: {why}")
        note(f"the model refuses: {why}")
        with pytest.raises((BufferError, ValueError, TypeError)):
            tb.asarray(CraftedBuffer(**_honest_len(fields)))
        return
    event("accepted")
    shape, strides, size = want
    t = tb.asarray(CraftedBuffer(**_honest_len(fields)))
    assert t.shape == shape and t.strides == strides
    if not size:
        return
    assert t.data_ptr() == middle
    item = spec["itemsize"]
    low = sum(s * (n - 1) * item for n, s in zip(shape, strides, strict=True) if s < 0)
    high = sum(s * (n - 1) * item for n, s in zip(shape, strides, strict=True) if s > 0) + item
    if low >= -MEMORY // 2 and high <= MEMORY // 2:  # every element in the memory
        raw = np.frombuffer(_memory(7)[:MEMORY], np.uint8)
        want_bytes = bytearray()
        for index in np.ndindex(*shape):
            at = MEMORY // 2 + sum(i * s * item for i, s in zip(index, strides, strict=True))
            want_bytes += raw[at : at + item].tobytes()
        got = bytes(memoryview(t.contiguous()).cast("B")) if t.ndim else bytes(memoryview(t))
        assert got == bytes(want_bytes)


def _honest_len(fields: dict) -> dict:
    """len=None in a spec means the honest one: the product of shape and itemsize."""
    fields = dict(fields)
    if fields["len"] is None:
        shape = fields["shape"]
        if shape is None:
            fields["len"] = 4 * fields["itemsize"] if fields["ndim"] == 1 else 0
            fields["len"] = fields["itemsize"] if fields["ndim"] == 0 else fields["len"]
        else:
            fields["len"] = math.prod(shape) * fields["itemsize"]
            fields["len"] = min(max(fields["len"], -(2**63)), I64)
    return fields
