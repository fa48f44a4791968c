# SPDX-License-Identifier: Apache-2.0
# Included by _core.pyx. Constants, the owner kinds, and the dtype and device
# lookup tables every other concern reads.

from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memset
from tensorbridge._dlpack cimport *

from tensorbridge._dtypes import DTYPES as _DTYPES
from tensorbridge._devices import DLDeviceType as _DLDeviceType, cached_device as _make_device
from tensorbridge._known_types import (
    immutable_type as _known_immutable_type, loaded as _loaded,   # (completely imported)
    aborting_export_type as _known_aborting_export_type,
    export_refusal as _known_export_refusal,
    ABORTING_DTYPE_METHOD as _aborting_dtype_method,
    ABORTING_DTYPE_CODES as _aborting_dtype_codes,
)


# --------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------

#: The DLPack version tensorbridge implements, as (major, minor).
DLPACK_VERSION = (TB_DLPACK_MAJOR, TB_DLPACK_MINOR)
#: The ``flags`` bits of DLManagedTensorVersioned.
FLAG_READ_ONLY = TB_FLAG_READ_ONLY
FLAG_IS_COPIED = TB_FLAG_IS_COPIED
FLAG_SUBBYTE_PADDED = TB_FLAG_SUBBYTE_PADDED
#: The largest ndim an import accepts (NumPy's limit).
MAX_NDIM = 64
#: Alignment of every buffer tensorbridge allocates (what XLA and TF ask for).
ALIGNMENT = 64

cdef enum:
    TB_MAX_NDIM = 64
    TB_INLINE_NDIM = 8
    OWN_NONE = 0          # a view: _base owns the memory
    OWN_LEGACY = 1        # _managed is a producer's DLManagedTensor*
    OWN_VERSIONED = 2     # _managed is a producer's DLManagedTensorVersioned*
    OWN_BUFFER = 3        # _buffer holds a Py_buffer to release
    OWN_ALLOC = 4         # _managed is memory from tb_alloc (tb_free())
    OWN_OBJECT = 5        # _managed is a strong reference to a NumPy array or torch tensor

# Tensor's DLPack C exchange table (filled by _make_exchange_capsule).
cdef DLPackExchangeAPI _tensor_api

cdef uint64_t KNOWN_FLAGS = TB_FLAG_READ_ONLY | TB_FLAG_IS_COPIED | TB_FLAG_SUBBYTE_PADDED
# Keep byte arithmetic far from int64 overflow.
cdef int64_t BYTE_LIMIT = (<int64_t>1) << 62

# --------------------------------------------------------------------------
# dtype and device tables
# --------------------------------------------------------------------------

cdef list _dtype_keepalive = list(_DTYPES.values())
cdef PyObject* _dtype_table[18][129]
memset(_dtype_table, 0, sizeof(_dtype_table))
for _d in _dtype_keepalive:
    _dtype_table[<int>_d.code][<int>_d.bits] = <PyObject*>_d
del _d

cdef inline object _dtype_obj(DLDataType dt):
    return <object>_dtype_table[dt.code][dt.bits]

cdef inline bint _dtype_known(DLDataType dt) noexcept nogil:
    return dt.code < 18 and dt.bits <= 128 and _dtype_table[dt.code][dt.bits] != NULL

cdef inline bint _device_known(int32_t device_type) noexcept:
    return 1 <= device_type <= 18 and device_type != 5 and device_type != 6

cdef inline bint _host_accessible(int32_t device_type) noexcept:
    return (device_type == kDLCPU or device_type == kDLCUDAHost
            or device_type == kDLROCMHost or device_type == kDLCUDAManaged)

cdef inline bint _pointer_is_address(int32_t device_type) noexcept nogil:
    """True where DLTensor.data is an address that arithmetic may move (exports fold
    byte_offset into it); elsewhere (OpenCL, Vulkan, Metal, WebGPU, ...) it may be an
    opaque handle, and the offset must stay in byte_offset."""
    return (device_type == kDLCPU or device_type == kDLCUDA or device_type == kDLCUDAHost
            or device_type == kDLROCM or device_type == kDLROCMHost
            or device_type == kDLCUDAManaged or device_type == kDLOneAPI)


cdef inline size_t _itemsize(DLDataType dt) noexcept nogil:
    return (dt.bits + 7) // 8

# Cached __dlpack_device__() answers for device_id 0, per device type.
cdef dict _dlpack_device_cache = {}

cdef object _cpu_device_tuple = None
cdef DLDevice _cpu_device
_cpu_device.device_type = kDLCPU
_cpu_device.device_id = 0

cdef object _dlpack_device_tuple(DLDevice dev):
    global _cpu_device_tuple
    if dev.device_type == kDLCPU and dev.device_id == 0:
        if _cpu_device_tuple is None:
            _cpu_device_tuple = (_DLDeviceType(kDLCPU), 0)
        return _cpu_device_tuple
    key = (<int64_t>dev.device_type << 32) | <uint32_t>dev.device_id
    result = _dlpack_device_cache.get(key)
    if result is None:
        result = (_DLDeviceType(dev.device_type), dev.device_id)
        _dlpack_device_cache[key] = result
    return result

cdef str _dev_str(DLDevice dev):
    return str(_make_device(dev.device_type, dev.device_id)) if _device_known(dev.device_type) \
        else f"device_type={dev.device_type}:{dev.device_id}"

# A valid address for zero-size buffers whose data pointer is NULL.
cdef char _empty_byte = 0

# Interned names and keyword tuples for calling producers.
cdef object _s_dlpack = "__dlpack__"
cdef object _s_dlpack_device = "__dlpack_device__"
cdef object _max_version_arg = (TB_DLPACK_MAJOR, TB_DLPACK_MINOR)
