# SPDX-License-Identifier: Apache-2.0
"""The Arrow C data interface in (_arrow.pxi): arrays and streams read through the
PyCapsule protocol, first from a producer written here with ctypes (so the struct
rules and the release calls are checked without any Arrow library), then from
PyArrow and polars as users hold them."""

from __future__ import annotations

import ctypes
import gc

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
)
from arrow_ctypes import capsule_new as _capsule_new
from needs import needs

import tensorbridge as tb
from tensorbridge import _core


class Producer:
    """An Arrow producer of int32 data, one chunk per list given (a validity bitmap
    when a value is None), recording every release call it receives. Capsules are
    made without destructors: the producer keeps its structs, so what the consumer
    releases is seen here (and the consumer must release exactly what it took)."""

    def __init__(
        self, *chunks, fmt=b"i", offset=0, children=None, stream_error=None, null_count=None
    ):
        self.null_count = null_count  # what the arrays claim (None: the true count)
        self.released = []  # what was released, in order: ("array", i) / ("schema",)
        self.keep = []
        self.fmt, self.offset = fmt, offset
        self.chunks = [list(c) for c in chunks]
        self.stream_error = stream_error
        self._error = ctypes.create_string_buffer(stream_error or b"")
        self._next = 0
        self._release_array = ARRAY_RELEASE(self._on_array_release)
        self._release_schema = SCHEMA_RELEASE(self._on_schema_release)

    def _on_array_release(self, ptr):
        self.released.append(("array", ptr.contents.private_data or 0))
        ptr.contents.release = ARRAY_RELEASE()

    def _on_schema_release(self, ptr):
        self.released.append(("schema",))
        ptr.contents.release = SCHEMA_RELEASE()

    def schema(self, out=None):
        s = out if out is not None else ArrowSchema()
        s.format, s.name, s.metadata, s.flags, s.n_children = self.fmt, b"x", None, 0, 0
        s.children, s.dictionary, s.private_data = None, None, None
        s.release = self._release_schema
        self.keep.append(s)
        return s

    def array(self, index, out=None):
        values = self.chunks[index]
        data = (ctypes.c_int32 * (len(values) + self.offset))(
            *([0] * self.offset + [v or 0 for v in values])
        )
        buffers = (ctypes.c_void_p * 2)(None, ctypes.addressof(data))
        nulls = sum(v is None for v in values)
        if nulls or self.null_count == -1:  # (-1: a bitmap whose count is not computed)
            bits = bytearray((len(values) + self.offset + 7) // 8)
            for i, v in enumerate(values):
                if v is not None:
                    bits[(i + self.offset) >> 3] |= 1 << ((i + self.offset) & 7)
            bitmap = (ctypes.c_uint8 * len(bits)).from_buffer(bits)
            buffers[0] = ctypes.addressof(bitmap)
            self.keep.append((bits, bitmap))
        a = out if out is not None else ArrowArray()
        claimed = nulls if self.null_count is None else self.null_count
        a.length, a.null_count, a.offset = len(values), claimed, self.offset
        a.n_buffers, a.n_children, a.buffers = 2, 0, buffers
        a.children, a.dictionary = None, None
        a.release, a.private_data = self._release_array, index + 1
        self.keep.append((data, buffers, a))
        return a

    def __arrow_c_array__(self, requested_schema=None):
        s, a = self.schema(), self.array(0)
        return (
            _capsule_new(ctypes.addressof(s), b"arrow_schema", None),
            _capsule_new(ctypes.addressof(a), b"arrow_array", None),
        )

    def __arrow_c_stream__(self, requested_schema=None):
        self._callbacks = (
            GET_SCHEMA(lambda _, out: (self.schema(out.contents), 0)[1]),
            GET_NEXT(self._get_next),
            LAST_ERROR(lambda _: ctypes.addressof(self._error) if self.stream_error else None),
            STREAM_RELEASE(lambda _: None),
        )
        stream = ArrowArrayStream(*self._callbacks)
        self.keep.append(stream)
        return _capsule_new(ctypes.addressof(stream), b"arrow_array_stream", None)

    def _get_next(self, _, out):
        if self.stream_error is not None:
            return 5
        if self._next == len(self.chunks):
            out.contents.release = ARRAY_RELEASE()  # the end
        else:
            self.array(self._next, out.contents)
            self._next += 1
        return 0


class StreamOnly:
    def __init__(self, producer):
        self.producer = producer

    def __arrow_c_stream__(self, requested_schema=None):
        return self.producer.__arrow_c_stream__(requested_schema)


def test_an_arrow_array_is_shared_read_only_and_released_once_when_the_tensor_dies():
    p = Producer([1, 2, 3], offset=2)
    t = tb.asarray(p)
    assert t.tolist() == [1, 2, 3] and t.dtype == tb.int32 and t.readonly
    data = p.keep[1][0]  # the int32 buffer: the tensor starts past the offset
    assert t.data_ptr() == ctypes.addressof(data) + 2 * 4
    assert p.released == []  # moved into the tensor's keeping, not released
    del t
    gc.collect()
    assert p.released == [("array", 1)]  # once; the schema stays its capsule's


def test_copy_true_gives_new_writable_memory_and_releases_the_array():
    p = Producer([4, 5])
    t = tb.asarray(p, copy=True)
    assert not t.readonly and t.tolist() == [4, 5]
    gc.collect()
    assert p.released == [("array", 1)]


def test_nulls_are_refused_with_the_count_and_the_fix_and_nothing_leaks():
    p = Producer([1, None, None])
    with pytest.raises(
        BufferError, match=r"asarray\(\): .*Producer: the Arrow array holds 2 nulls.*fill"
    ):
        tb.asarray(p)
    gc.collect()
    assert p.released == [("array", 1)]  # taken over, then released with the error


def test_nulls_outside_the_slice_do_not_count():
    # null_count -1 means "not computed": the bitmap is read for the range, and the
    # element before the offset, whose bit is 0 (a null), is not in it.
    p = Producer([7, 8], offset=1, null_count=-1)
    assert tb.asarray(p).tolist() == [7, 8]
    with pytest.raises(BufferError, match="holds 1 null"):
        tb.asarray(Producer([7, None], offset=1, null_count=-1))


def test_a_null_count_without_a_bitmap_is_a_malformed_array():
    p = Producer([1, 2, 3], null_count=1)  # no None: no bitmap, yet one null claimed
    with pytest.raises(BufferError, match="says it holds 1 nulls but has no validity bitmap"):
        tb.asarray(p)
    gc.collect()
    assert p.released == [("array", 1)]


@pytest.mark.parametrize(
    ("fmt", "what"),
    [
        (b"u", "a string"),
        (b"tsu:", "a timestamp"),
        (b"d:10,2", "a decimal"),
        (b"+l", "a list"),
        (b"z", "a binary"),
    ],
)
def test_types_dlpack_cannot_hold_are_refused_by_name_before_the_array_is_taken(fmt, what):
    p = Producer([1], fmt=fmt)
    with pytest.raises(BufferError, match=rf"{what} \(Arrow format"):
        tb.asarray(p)
    assert p.released == []  # refused from the schema: the array stayed its capsule's


def test_a_stream_of_one_chunk_is_shared_and_of_several_is_joined():
    one = Producer([1, 2])
    t = tb.asarray(StreamOnly(one))
    assert t.readonly and t.tolist() == [1, 2]
    assert ("schema",) in one.released  # the stream's schema is ours to release
    several = Producer([1, 2], [], [3])
    joined = tb.asarray(StreamOnly(several))
    assert joined.tolist() == [1, 2, 3] and not joined.readonly
    gc.collect()
    assert sorted(r for r in several.released if r[0] == "array") == [
        ("array", 1),
        ("array", 2),
        ("array", 3),
    ]
    with pytest.raises(ValueError, match=r"copy=False, but the Arrow stream has 2 chunks"):
        tb.asarray(StreamOnly(Producer([1], [2])), copy=False)


def test_an_empty_stream_is_an_empty_tensor_of_its_type():
    t = tb.asarray(StreamOnly(Producer()), copy=False)
    assert t.shape == (0,) and t.dtype == tb.int32
    assert t.readonly  # as a stream of one chunk is


def test_explain_does_not_consume_a_one_shot_stream():
    class OneShot:
        def __init__(self):
            self.asked = 0

        def __arrow_c_stream__(self, requested_schema=None):
            self.asked += 1
            return Producer([1, 2]).__arrow_c_stream__(requested_schema)

    s = OneShot()
    with pytest.raises(TypeError, match=r"^explain\(\): .*OneShot offers only an Arrow stream"):
        tb.explain(s, "numpy")
    assert s.asked == 0
    assert tb.convert(s, "numpy").tolist() == [1, 2]


def test_a_failing_stream_says_its_own_error():
    p = Producer([1], stream_error=b"disk on fire")
    with pytest.raises(BufferError, match="failed to give a chunk: disk on fire"):
        tb.asarray(StreamOnly(p))
    assert ("schema",) in p.released


def test_a_producer_that_raises_is_named():
    class Broken:
        def __arrow_c_stream__(self, requested_schema=None):
            raise RuntimeError("no")

    with pytest.raises(
        BufferError, match=r"asarray\(\): .*Broken.__arrow_c_stream__\(\) raised RuntimeError: no"
    ):
        tb.asarray(Broken())


def test_convert_and_explain_say_their_own_name():
    with pytest.raises(BufferError, match=r"^convert\(\): .*holds 1 null"):
        tb.convert(Producer([None]), "tensorbridge")
    with pytest.raises(BufferError, match=r"^explain\(\): .*holds 1 null"):
        tb.explain(Producer([None]), "tensorbridge")


def test_the_core_functions_check_capsule_names():
    with pytest.raises(ValueError):
        _core.import_arrow_stream(Producer([1]).__arrow_c_array__()[0], True)


@needs("pyarrow")
def test_pyarrow_chunked_arrays_table_columns_and_record_batches():
    import pyarrow as pa

    chunked = pa.chunked_array([[1.5, 2.5]])
    t = tb.asarray(chunked, copy=False)
    assert t.data_ptr() == chunked.chunk(0).buffers()[1].address and t.readonly
    table = pa.table({"a": [1, 2], "b": [3, 4]})
    assert tb.asarray(table["b"]).tolist() == [3, 4]
    assert tb.asarray(table).tolist() == [[1, 3], [2, 4]]  # NumPy's reading of a table
    fixed = pa.array([[1, 2], [3, 4], [5, 6]], type=pa.list_(pa.float32(), 2))[1:]
    m = tb.asarray(pa.chunked_array([fixed]))
    assert m.shape == (2, 2) and m.tolist() == [[3, 4], [5, 6]]
    bits = pa.chunked_array([[True, False, True]])
    assert tb.asarray(bits).tolist() == [True, False, True]
    with pytest.raises(ValueError, match="bit-packed booleans"):
        tb.asarray(bits, copy=False)
    with pytest.raises(BufferError, match="dictionary-encoded"):
        tb.asarray(pa.chunked_array([pa.array([1, 1]).dictionary_encode()]))


@needs("polars")
def test_polars_series_and_frames():
    import polars as pl

    s = pl.Series([1.0, 2.0, 3.0])
    t = tb.asarray(s, copy=False)
    assert t.readonly and t.data_ptr() == s.to_arrow().buffers()[1].address
    frame = pl.DataFrame({"a": [1, 2], "b": [3, 4]})
    assert tb.asarray(frame).tolist() == [[1, 3], [2, 4]]
    # A frame's 2-D form is a copy; polars says so with RuntimeError, the refusal is ours.
    with pytest.raises(
        ValueError, match=r"^asarray\(\): copy=False, but polars.DataFrame can only"
    ):
        tb.asarray(frame, copy=False)
    with pytest.raises(BufferError, match=r"polars\.Series: the Arrow array holds 1 null"):
        tb.asarray(pl.Series([1, None]))
    with pytest.raises(BufferError, match=r"polars\.Series: a string"):
        tb.asarray(pl.Series(["a"]))
    assert tb.convert(s, "numpy").tolist() == [1.0, 2.0, 3.0]


def test_capsules_of_the_wrong_kind_are_the_producers_fault_not_a_copy_refusal():
    class Swapped(Producer):
        def __arrow_c_array__(self, requested_schema=None):
            schema, array = super().__arrow_c_array__(requested_schema)
            return array, schema

    with pytest.raises(
        BufferError, match=r"Swapped.__arrow_c_array__\(\) gave capsules that are not"
    ):
        tb.asarray(Swapped([1]))


@pytest.mark.parametrize("width", [b"99999999999999999999", b"+2", b" 2", b"1_0", b""])
def test_a_malformed_fixed_size_list_width_is_refused(width):
    with pytest.raises(BufferError, match="malformed Arrow format string"):
        tb.asarray(Producer([1], fmt=b"+w:" + width))


# -- crafted structs: every count and offset read is checked arithmetic ----------------


class FixedSizeLists:
    """A producer of fixed_size_list<int8>[width] arrays: `rows` rows from `offset`,
    over a child of `child` int8 values (None: no values buffer, for empty children),
    as one array or as a stream of one chunk per entry of `rows`."""

    def __init__(self, width, rows, offset=0, child=(), child_offset=0):
        self.width, self.rows, self.offset = width, list(rows), offset
        self.child, self.child_offset = list(child), child_offset
        self.keep = []
        self._release_array = ARRAY_RELEASE(
            lambda p: setattr(p.contents, "release", ARRAY_RELEASE())
        )
        self._release_schema = SCHEMA_RELEASE(
            lambda p: setattr(p.contents, "release", SCHEMA_RELEASE())
        )

    def schema(self, out=None):
        child = ArrowSchema(b"c", b"item", None, 0, 0, None, None, self._release_schema, None)
        children = (ctypes.POINTER(ArrowSchema) * 1)(ctypes.pointer(child))
        s = out if out is not None else ArrowSchema()
        s.format, s.name, s.metadata, s.flags = b"+w:%d" % self.width, b"x", None, 0
        s.n_children, s.children, s.dictionary = 1, children, None
        s.release, s.private_data = self._release_schema, None
        self.keep += [child, children, s]
        return s

    def array(self, length, out=None):
        values = (ctypes.c_int8 * max(1, len(self.child)))(*self.child)
        child_buffers = (ctypes.c_void_p * 2)(
            None, ctypes.addressof(values) if self.child else None
        )
        child = ArrowArray(
            len(self.child) - self.child_offset,
            0,
            self.child_offset,
            2,
            0,
            child_buffers,
            None,
            None,
            self._release_array,
            None,
        )
        children = (ctypes.POINTER(ArrowArray) * 1)(ctypes.pointer(child))
        buffers = (ctypes.c_void_p * 1)(None)
        a = out if out is not None else ArrowArray()
        a.length, a.null_count, a.offset, a.n_buffers = length, 0, self.offset, 1
        a.n_children, a.buffers, a.children, a.dictionary = 1, buffers, children, None
        a.release, a.private_data = self._release_array, None
        self.keep += [values, child_buffers, child, children, buffers, a]
        return a

    def __arrow_c_array__(self, requested_schema=None):
        s, a = self.schema(), self.array(self.rows[0])
        return (
            _capsule_new(ctypes.addressof(s), b"arrow_schema", None),
            _capsule_new(ctypes.addressof(a), b"arrow_array", None),
        )

    def __arrow_c_stream__(self, requested_schema=None):
        chunks = iter(self.rows)

        def get_next(_, out):
            length = next(chunks, None)
            if length is None:
                out.contents.release = ARRAY_RELEASE()
            else:
                self.array(length, out.contents)
            return 0

        self._callbacks = (
            GET_SCHEMA(lambda _, out: (self.schema(out.contents), 0)[1]),
            GET_NEXT(get_next),
            LAST_ERROR(lambda _: None),
            STREAM_RELEASE(lambda _: None),
        )
        stream = ArrowArrayStream(*self._callbacks)
        self.keep.append(stream)
        return _capsule_new(ctypes.addressof(stream), b"arrow_array_stream", None)


def test_a_fixed_size_list_is_read_as_rows_of_its_width():
    lists = FixedSizeLists(2, [3], offset=1, child=range(10), child_offset=2)
    # Row 1 onwards of a child that starts at its element 2: elements 4..9.
    assert tb.asarray(lists).tolist() == [[4, 5], [6, 7], [8, 9]]


def test_an_offset_that_wraps_past_2_63_is_refused_not_read():
    # Found by a fuzz under UBSan: start + count wrapped, the check passed, and the data
    # pointer was values + 2**63 - 2 (tolist() crashed).
    lists = FixedSizeLists(2, [1], offset=2**62 - 1, child=range(10))
    with pytest.raises(BufferError, match="child array is shorter than its parent says"):
        tb.asarray(lists)


@pytest.mark.parametrize(("width", "offset"), [(999999999999999999, 9), (2**31, 2**32)])
def test_widths_and_offsets_beyond_64_bits_are_refused(width, offset):
    with pytest.raises(BufferError, match=r"overflow 64 bits|shorter than its parent"):
        tb.asarray(FixedSizeLists(width, [1], offset=offset, child=range(4)))


def test_a_primitive_offset_beyond_the_address_space_is_refused():
    wide = Producer([1, 2], fmt=b"l")  # int64: offset * 8 bytes
    wide.array = lambda index, out=None, _array=wide.array: _shift(_array(index, out), 2**61)
    with pytest.raises(BufferError, match="reach beyond the 64-bit address space"):
        tb.asarray(wide)


def _shift(array, offset):
    array.offset = offset
    return array


@pytest.mark.parametrize("rows", [[2**62] * 4 + [5], [2**62, 2**62], [2**62, 2**62 - 1, 2]])
def test_a_stream_whose_rows_add_up_past_2_63_is_refused(rows):
    # Chunks of fixed_size_list<int8>[0] need no memory: 4 of 2**62 rows and one of 5
    # made a tensor of shape (5, 0).
    with pytest.raises(BufferError, match=r"hold more than 2\*\*63 - 1 rows"):
        tb.asarray(StreamOnly(FixedSizeLists(0, rows)))


def test_a_null_buffers_pointer_is_named():
    bare = Producer([1, 2])
    original = bare.array

    def without_buffers(index, out=None):
        a = original(index, out)
        a.buffers = None
        return a

    bare.array = without_buffers
    with pytest.raises(BufferError, match="buffers pointer is NULL"):
        tb.asarray(bare)


def test_a_stream_whose_format_changes_between_chunks_is_refused():
    # The join was sized by the schema as first read (int8) and filled with chunks read
    # with the schema as it read later (int64): 8 times the memory it had.
    fmt = ctypes.create_string_buffer(b"c", 4)
    keep = []
    release_array = ARRAY_RELEASE(lambda p: setattr(p.contents, "release", ARRAY_RELEASE()))
    release_schema = SCHEMA_RELEASE(lambda p: setattr(p.contents, "release", SCHEMA_RELEASE()))
    given = []

    def get_schema(_, out):
        s = out.contents
        s.format, s.name, s.release = ctypes.cast(fmt, ctypes.c_char_p), b"x", release_schema
        return 0

    def get_next(_, out):
        if len(given) == 2:
            out.contents.release = ARRAY_RELEASE()
            return 0
        if given:
            fmt.value = b"l"  # now the format string says int64
        given.append(1)
        data = (ctypes.c_int64 * 64)(*range(64))
        buffers = (ctypes.c_void_p * 2)(None, ctypes.addressof(data))
        keep.extend([data, buffers])
        a = out.contents
        a.length, a.null_count, a.offset, a.n_buffers, a.n_children = 64, 0, 0, 2, 0
        a.buffers, a.release = buffers, release_array
        return 0

    callbacks = (GET_SCHEMA(get_schema), GET_NEXT(get_next), LAST_ERROR(lambda _: None))
    callbacks += (STREAM_RELEASE(lambda _: None),)

    class Changing:
        def __arrow_c_stream__(self, requested_schema=None):
            stream = ArrowArrayStream(*callbacks)
            keep.append(stream)
            return _capsule_new(ctypes.addressof(stream), b"arrow_array_stream", None)

    with pytest.raises(BufferError, match="chunk 2 is not of its schema's type"):
        tb.asarray(Changing())


def test_an_offset_whose_end_wraps_is_refused_before_its_validity_bits_are_read():
    # A bitmap, and an offset near 2**63: the bits were read from far beyond it.
    wrapping = Producer([1, None, 3], null_count=-1)
    original = wrapping.array

    def far(index, out=None):
        a = original(index, out)
        a.offset = 2**63 - 2
        return a

    wrapping.array = far
    with pytest.raises(BufferError, match="reach beyond the 64-bit address space"):
        tb.asarray(wrapping)
