# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Host memory in through the Arrow C data interface: the
# PyCapsule protocol's __arrow_c_array__ (a schema and an array capsule) and
# __arrow_c_stream__ (a stream capsule), read here so no Arrow library is needed.
#
# What becomes a tensor: a primitive array (int8-64, uint8-64, float16/32/64) as
# 1-d, and fixed-size lists of those (nested) as n-d, with the memory shared and
# read-only (Arrow data is immutable). Booleans are bit-packed in Arrow: they are
# unpacked into a new bool tensor. Nulls, dictionaries and every other type are
# refused, naming the type. A stream of one chunk shares it; several chunks are
# joined into new memory.

cimport cython
from libc.stdint cimport int64_t, uint8_t, uintptr_t, UINTPTR_MAX
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset, strcmp, strncmp, strlen


cdef extern from *:
    """
    #ifndef ARROW_C_DATA_INTERFACE
    #define ARROW_C_DATA_INTERFACE
    struct ArrowSchema {
      const char* format;
      const char* name;
      const char* metadata;
      int64_t flags;
      int64_t n_children;
      struct ArrowSchema** children;
      struct ArrowSchema* dictionary;
      void (*release)(struct ArrowSchema*);
      void* private_data;
    };
    struct ArrowArray {
      int64_t length;
      int64_t null_count;
      int64_t offset;
      int64_t n_buffers;
      int64_t n_children;
      const void** buffers;
      struct ArrowArray** children;
      struct ArrowArray* dictionary;
      void (*release)(struct ArrowArray*);
      void* private_data;
    };
    #endif
    #ifndef ARROW_C_STREAM_INTERFACE
    #define ARROW_C_STREAM_INTERFACE
    struct ArrowArrayStream {
      int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
      int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
      const char* (*get_last_error)(struct ArrowArrayStream*);
      void (*release)(struct ArrowArrayStream*);
      void* private_data;
    };
    #endif
    """
    struct ArrowSchema:
        const char* format
        const char* name
        int64_t n_children
        ArrowSchema** children
        ArrowSchema* dictionary
        void (*release)(ArrowSchema*) noexcept nogil

    struct ArrowArray:
        int64_t length
        int64_t null_count
        int64_t offset
        int64_t n_buffers
        int64_t n_children
        const void** buffers
        ArrowArray** children
        void (*release)(ArrowArray*) noexcept nogil

    struct ArrowArrayStream:
        int (*get_schema)(ArrowArrayStream*, ArrowSchema*) noexcept nogil
        int (*get_next)(ArrowArrayStream*, ArrowArray*) noexcept nogil
        const char* (*get_last_error)(ArrowArrayStream*) noexcept nogil
        void (*release)(ArrowArrayStream*) noexcept nogil


@cython.auto_pickle(False)
cdef class _ArrowArrayOwner:
    """Owns one ArrowArray moved out of its producer's capsule or stream: a tensor
    sharing its memory holds this, and the last reference releases the array."""
    cdef ArrowArray array

    def __cinit__(self):
        self.array.release = NULL

    def __dealloc__(self):
        if self.array.release != NULL:
            self.array.release(&self.array)


# Arrow format strings of the primitive types DLPack has, by their one letter.
cdef DLDataType _arrow_primitive(const char* fmt) noexcept:
    cdef DLDataType dt
    dt.code = 255   # none
    dt.bits = 0
    dt.lanes = 1
    if fmt == NULL or fmt[0] == 0 or fmt[1] != 0:
        return dt
    cdef char c = fmt[0]
    if c == b'c' or c == b's' or c == b'i' or c == b'l':
        dt.code = kDLInt
    elif c == b'C' or c == b'S' or c == b'I' or c == b'L':
        dt.code = kDLUInt
    elif c == b'e' or c == b'f' or c == b'g':
        dt.code = kDLFloat
    elif c == b'b':
        dt.code = kDLBool
        dt.bits = 8   # unpacked from bits into bytes
        return dt
    else:
        return dt
    if c == b'c' or c == b'C':
        dt.bits = 8
    elif c == b's' or c == b'S' or c == b'e':
        dt.bits = 16
    elif c == b'i' or c == b'I' or c == b'f':
        dt.bits = 32
    else:
        dt.bits = 64
    return dt


cdef str _arrow_type_name(const char* fmt):
    """What an Arrow format string is, for an error message."""
    cdef bytes f = fmt if fmt != NULL else b""
    text = f.decode("utf-8", "replace")
    for prefix, name in (
        ("+s", "a struct (a table's rows)"), ("+m", "a map"), ("+l", "a list"),
        ("+L", "a large list"), ("+vl", "a list view"), ("+vL", "a large list view"),
        ("+u", "a union"), ("+r", "a run-end encoded array"), ("+w", "a fixed-size list"),
        ("vu", "a string view"), ("vz", "a binary view"), ("u", "a string"),
        ("U", "a large string"), ("z", "a binary"), ("Z", "a large binary"),
        ("w:", "a fixed-size binary"), ("d:", "a decimal"), ("n", "a null"),
        ("tD", "a duration"), ("td", "a date"), ("tt", "a time"), ("ts", "a timestamp"),
        ("ti", "an interval"),
    ):
        if text.startswith(prefix):
            return f"{name} (Arrow format {text!r})"
    return f"Arrow format {text!r}"


cdef str _arrow_type_fix(const char* fmt):
    cdef bytes f = fmt if fmt != NULL else b""
    if f[:1] == b"t":
        return "cast it to an integer type first for the raw ticks"
    if f[:1] in (b"u", b"U", b"z", b"Z", b"v"):
        return "strings and bytes have no tensor form: encode them as numbers first"
    if f[:2] == b"+s":
        return "take one column, or a 2-d NumPy array of the table (.to_numpy())"
    if f[:2] == b"d:":
        return "cast it to float64 first"
    return "cast it to a bool, integer or float type first"


cdef int _arrow_shape(ArrowSchema* schema, DLDataType* dt, int64_t* inner,
                      int* ndim) except -1:
    """Walk a schema: the element dtype and the extents of its fixed-size lists
    (inner[0..ndim-2]); ndim counts the rows dimension too."""
    cdef const char* fmt
    cdef int64_t width
    ndim[0] = 1
    while True:
        if schema == NULL or schema.format == NULL:
            raise BufferError("the Arrow schema is missing its format string")
        fmt = schema.format
        if schema.dictionary != NULL:
            raise BufferError(
                f"a dictionary-encoded array ({_arrow_type_name(fmt)} indices) has no DLPack "
                "equivalent; "
                "decode it first (e.g. .dictionary_decode())")
        if strncmp(fmt, b"+w:", 3) == 0:
            digits = fmt[3:strlen(fmt)]
            # (plain decimal digits only: int() would also take "+7", " 7" and "1_0")
            if not 0 < len(digits) <= 18 or not digits.isdigit():
                raise BufferError(f"malformed Arrow format string {fmt!r}")
            width = int(digits)
            if width < 0 or schema.n_children != 1 or schema.children == NULL:
                raise BufferError(f"malformed Arrow fixed-size list schema ({fmt!r})")
            if ndim[0] >= TB_MAX_NDIM:
                raise BufferError(f"Arrow fixed-size lists nested over {TB_MAX_NDIM} deep")
            inner[ndim[0] - 1] = width
            ndim[0] += 1
            schema = schema.children[0]
            continue
        dt[0] = _arrow_primitive(fmt)
        if dt[0].code == 255:
            raise BufferError(
                f"{_arrow_type_name(fmt)} has no DLPack equivalent (DLPack holds bool, "
                f"integer and float numbers); {_arrow_type_fix(fmt)}")
        return 0


cdef int64_t _count_nulls(ArrowArray* a, int64_t start, int64_t n) except -1:
    """Nulls among a's elements [start, start + n) (physical indices)."""
    if a.null_count == 0 or n == 0:
        return 0
    if a.n_buffers < 1 or a.buffers == NULL or a.buffers[0] == NULL:
        if a.null_count > 0:
            # The interface allows no bitmap only with null_count 0 (or -1, unknown).
            raise BufferError(
                f"the Arrow array says it holds {a.null_count} nulls but has no validity "
                "bitmap (a malformed array: its producer is at fault)")
        return 0   # no validity bitmap: all valid
    if a.null_count > 0 and start == a.offset and n == a.length:
        return a.null_count
    cdef const uint8_t* bits = <const uint8_t*>a.buffers[0]
    cdef int64_t i, nulls = 0
    for i in range(start, start + n):
        if not (bits[i >> 3] >> (i & 7)) & 1:
            nulls += 1
    return nulls


cdef str _nulls_error(int64_t nulls, int level, int ndim, const int64_t* inner):
    """What to do about nulls found at `level` of an array of fixed-size lists (0:
    the array itself); the fix is one that works at that level."""
    cdef str many = f"{nulls} null{'s' if nulls != 1 else ''}"
    if level == 0:
        return (f"the Arrow array holds {many}, which a tensor cannot hold; fill them first "
                f"(e.g. .fill_null({_fill_literal(ndim, inner)})), or drop them")
    return (f"the values inside the Arrow array's lists (level {level}) hold {many}, which "
            "a tensor cannot hold; fill them first (for lists of numbers, e.g. "
            "pyarrow.FixedSizeListArray.from_arrays(array.flatten().fill_null(0), "
            f"{inner[0]})), or drop the lists that hold them")


cdef str _fill_literal(int ndim, const int64_t* inner):
    """The Python value of one element of an array of fixed-size lists with every
    number 0: 0, [0, 0], [[0, 0], [0, 0]] (a short form beyond 4 numbers)."""
    cdef str text = "0"
    cdef int i
    for i in range(ndim - 2, -1, -1):
        text = f"[{', '.join([text] * <Py_ssize_t>inner[i])}]" if inner[i] <= 4 and \
            len(text) < 40 else f"[{text}] * {inner[i]}"
    return text


cdef Tensor _arrow_tensor(ArrowSchema* schema, ArrowArray* array, object owner,
                          bint* copied):
    """A tensor of one Arrow array (rows first, then its fixed-size list extents):
    its memory shared, read-only, and kept alive by owner; booleans unpacked into
    new memory (copied set)."""
    cdef DLDataType dt
    cdef int64_t inner[64]
    cdef int64_t shape[64]
    cdef int ndim, level
    _arrow_shape(schema, &dt, inner, &ndim)
    cdef ArrowArray* a = array
    if a.length < 0 or a.offset < 0:
        raise BufferError(
            f"the Arrow array has length {a.length} and offset {a.offset}; both must be >= 0")
    shape[0] = a.length
    cdef int64_t start = a.offset, count = a.length, nulls, end, limit
    cdef int64_t first_byte = 0, end_byte = 0
    if tb_add_overflow(start, count, &end):   # (before the validity bits are read)
        raise BufferError(
            f"the Arrow array's offset {start} and length {count} reach beyond the 64-bit "
            "address space (a malformed array: its producer is at fault)")
    for level in range(ndim):
        nulls = _count_nulls(a, start, count)
        if nulls:
            raise BufferError(_nulls_error(nulls, level, ndim, inner))
        if level == ndim - 1:
            break
        if a.n_children != 1 or a.children == NULL or a.children[0] == NULL:
            raise BufferError("the Arrow fixed-size list array has no child array")
        shape[level + 1] = inner[level]
        if tb_mul_overflow(start, inner[level], &start) or \
                tb_mul_overflow(count, inner[level], &count):
            raise BufferError("the Arrow array's extents overflow 64 bits")
        a = a.children[0]
        if a.offset < 0 or a.length < 0 or tb_add_overflow(start, a.offset, &start):
            raise BufferError(
                f"the Arrow child array has offset {a.offset} and length {a.length}")
        # (checked: a crafted offset made start + count wrap past 2**63, and the data
        # pointer land anywhere)
        if tb_add_overflow(start, count, &end) or tb_add_overflow(a.offset, a.length, &limit) \
                or end > limit:
            raise BufferError(
                "the Arrow fixed-size list's child array is shorter than its parent says")
    if a.buffers == NULL:
        raise BufferError(
            f"the Arrow {_dtype_obj(dt)} array's buffers pointer is NULL (a malformed "
            "array: its producer is at fault)")
    if a.n_buffers != 2:
        raise BufferError(
            f"the Arrow {_dtype_obj(dt)} array has {a.n_buffers} buffers; a primitive "
            "array has 2 (validity, values)")
    cdef const uint8_t* values = <const uint8_t*>a.buffers[1]
    if values == NULL and count > 0:
        raise BufferError("the Arrow array's values buffer is NULL")
    # The elements [start, start + count) must be addressable: their bytes (bits, for
    # booleans) within 2**62 bytes of the buffer's start, as DLPack's byte_offset is,
    # and not wrapping the address space.
    if tb_add_overflow(start, count, &end) or end > BYTE_LIMIT:
        end_byte = -1
    elif dt.code == kDLBool:
        end_byte = (end + 7) >> 3
    elif tb_mul_overflow(start, <int64_t>_itemsize(dt), &first_byte) \
            or tb_mul_overflow(end, <int64_t>_itemsize(dt), &end_byte):
        end_byte = -1
    if end_byte < 0 or end_byte > BYTE_LIMIT \
            or <uintptr_t>values > UINTPTR_MAX - <uintptr_t>end_byte:
        raise BufferError(
            f"the Arrow array's offset {start} and length {count} reach beyond the 64-bit "
            "address space (a malformed array: its producer is at fault)")
    cdef Tensor t
    cdef int64_t i, bit
    cdef uint8_t* out
    if dt.code == kDLBool:
        t = _alloc_tensor(ndim, shape, dt, _cpu_device, 0)
        out = <uint8_t*>t._data
        for i in range(count):
            bit = start + i
            out[i] = (values[bit >> 3] >> (bit & 7)) & 1
        copied[0] = True
        return t
    t = _new_tensor()
    t._set_ndim(ndim)
    for level in range(ndim):
        t._shape[level] = shape[level]
    _c_strides(ndim, t._shape, t._strides)
    t._dtype = dt
    t._device = _cpu_device
    t._flags = TB_FLAG_READ_ONLY
    _check_layout(t, "asarray()", "Arrow array")
    t._data = <void*>(values + first_byte) if values != NULL else NULL
    Py_INCREF(owner)
    t._managed = <void*>owner
    t._owner_kind = OWN_OBJECT
    copied[0] = False
    return t


cdef _ArrowArrayOwner _move_arrow_array(ArrowArray* source):
    """Take an ArrowArray over (a bitwise move: the source is marked released)."""
    cdef _ArrowArrayOwner owner = _ArrowArrayOwner()
    memcpy(&owner.array, source, sizeof(ArrowArray))
    source.release = NULL
    return owner


cdef inline bint _is_struct(ArrowSchema* schema) noexcept:
    return schema.format != NULL and strcmp(schema.format, b"+s") == 0


def import_arrow_array(schema_capsule, array_capsule):
    """``(tensor, copied)`` from the capsules of ``__arrow_c_array__``: the array is
    moved out of its capsule into the tensor's keeping. None for a struct array (a
    table's rows), which the caller reads another way or refuses."""
    cdef ArrowSchema* schema = <ArrowSchema*>PyCapsule_GetPointer(schema_capsule,
                                                                  b"arrow_schema")
    cdef ArrowArray* array = <ArrowArray*>PyCapsule_GetPointer(array_capsule, b"arrow_array")
    if schema.release == NULL or array.release == NULL:
        raise BufferError("the Arrow capsules hold a released schema or array")
    if _is_struct(schema):
        return None
    cdef DLDataType dt
    cdef int64_t inner[64]
    cdef int ndim
    _arrow_shape(schema, &dt, inner, &ndim)   # refuse before taking the array over
    cdef _ArrowArrayOwner owner = _move_arrow_array(array)
    cdef bint copied = False
    t = _arrow_tensor(schema, &owner.array, owner, &copied)
    return t, copied


cdef str _stream_error(ArrowArrayStream* stream, int code):
    cdef const char* message = NULL
    if stream.get_last_error != NULL:
        message = stream.get_last_error(stream)
    if message != NULL:
        return (<bytes>message).decode("utf-8", "replace")
    return f"error code {code}"


cdef bint _same_chunk_layout(Tensor t, DLDataType dt, int ndim, const int64_t* inner) noexcept:
    """t (a stream's chunk) has the dtype and the inner extents the schema gave."""
    if t._dtype.code != dt.code or t._dtype.bits != dt.bits or t._dtype.lanes != dt.lanes \
            or t._ndim != ndim:
        return False
    cdef int i
    for i in range(1, ndim):
        if t._shape[i] != inner[i - 1]:
            return False
    return True


def import_arrow_stream(stream_capsule, bint allow_copy):
    """``(tensor, copied)`` from the capsule of ``__arrow_c_stream__``: one chunk is
    shared; several are joined into new memory, which ``allow_copy=False`` refuses
    (ValueError); none gives an empty tensor. None for a stream of structs (a
    table), which the caller reads another way or refuses."""
    cdef ArrowArrayStream* stream = <ArrowArrayStream*>PyCapsule_GetPointer(
        stream_capsule, b"arrow_array_stream")
    if stream.release == NULL:
        raise BufferError("the arrow_array_stream capsule holds a released stream")
    cdef ArrowSchema schema
    memset(&schema, 0, sizeof(schema))
    cdef ArrowArray chunk
    cdef int code = stream.get_schema(stream, &schema)
    if code != 0:
        raise BufferError(f"the Arrow stream could not give its schema: "
                          f"{_stream_error(stream, code)}")
    cdef DLDataType dt
    cdef int64_t inner[64]
    cdef int64_t shape[64]
    cdef int ndim, i
    cdef list tensors = []
    cdef bint copied = False, any_copied = False
    cdef _ArrowArrayOwner owner
    cdef Tensor t, out
    cdef int64_t rows = 0, row_bytes, done = 0
    try:
        if _is_struct(&schema):
            return None
        _arrow_shape(&schema, &dt, inner, &ndim)
        while True:
            memset(&chunk, 0, sizeof(chunk))
            code = stream.get_next(stream, &chunk)
            if code != 0:
                raise BufferError(f"the Arrow stream failed to give a chunk: "
                                  f"{_stream_error(stream, code)}")
            if chunk.release == NULL:
                break   # the end of the stream
            owner = _move_arrow_array(&chunk)
            if owner.array.length == 0:
                continue
            t = _arrow_tensor(&schema, &owner.array, owner, &copied)
            # Each chunk is read with the schema as it reads now, and the joined
            # tensor is made from the schema as it read first: a producer whose format
            # string changed in between (int8, then int64) made the join copy 8 times
            # the memory it had (a heap overflow).
            if not _same_chunk_layout(t, dt, ndim, inner):
                raise BufferError(
                    f"the Arrow stream's chunk {len(tensors) + 1} is not of its schema's "
                    f"type and shape ({_dtype_obj(t._dtype)} {t.shape}, against "
                    f"{_dtype_obj(dt)}; a malformed stream: its producer is at fault)")
            any_copied |= copied
            tensors.append(t)
        if len(tensors) == 1:
            return tensors[0], any_copied
        if not tensors:
            copied = False   # (nothing to share: new and empty, not a copy)
        if tensors and not allow_copy:
            raise ValueError(
                f"copy=False, but the Arrow stream has {len(tensors)} chunks: joining "
                "them needs a copy (combine the chunks first to share one buffer)")
        shape[0] = 0
        for t in tensors:
            if tb_add_overflow(shape[0], t._shape[0], &shape[0]):
                raise BufferError(
                    f"the Arrow stream's {len(tensors)} chunks hold more than 2**63 - 1 "
                    "rows in all (a malformed stream: its producer is at fault)")
        for i in range(1, ndim):
            shape[i] = inner[i - 1]
        try:
            out = _alloc_tensor(ndim, shape, dt, _cpu_device, 0)
        except ValueError as exc:   # (the schema's extents: no chunk was read)
            raise BufferError(f"the Arrow stream's schema describes {exc}") from None
        for t in tensors:
            row_bytes = t._nbytes()
            if row_bytes > out._nbytes() - done:   # (the chunks are the schema's: never)
                raise BufferError("the Arrow stream's chunks outgrew the joined tensor")
            if row_bytes:
                memcpy(<uint8_t*>out._data + done, t._data, <size_t>row_bytes)
            done += row_bytes
        if not tensors:
            out._flags = TB_FLAG_READ_ONLY   # (as a stream's one chunk is: one rule)
        return out, bool(tensors)
    finally:
        if schema.release != NULL:
            schema.release(&schema)
