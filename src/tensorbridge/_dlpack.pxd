# SPDX-License-Identifier: Apache-2.0
# Cython view of _dlpack.h: the DLPack 1.3 structs, enums, flags and capsule names.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "_dlpack.h" nogil:
    enum:
        TB_DLPACK_MAJOR
        TB_DLPACK_MINOR

    const uint64_t TB_FLAG_READ_ONLY
    const uint64_t TB_FLAG_IS_COPIED
    const uint64_t TB_FLAG_SUBBYTE_PADDED

    const char* TB_CAPSULE_LEGACY
    const char* TB_CAPSULE_LEGACY_USED
    const char* TB_CAPSULE_VERSIONED
    const char* TB_CAPSULE_VERSIONED_USED
    const char* TB_CAPSULE_EXCHANGE_API

    ctypedef struct DLPackVersion:
        uint32_t major
        uint32_t minor

    enum:
        kDLCPU
        kDLCUDA
        kDLCUDAHost
        kDLOpenCL
        kDLVulkan
        kDLMetal
        kDLVPI
        kDLROCM
        kDLROCMHost
        kDLExtDev
        kDLCUDAManaged
        kDLOneAPI
        kDLWebGPU
        kDLHexagon
        kDLMAIA
        kDLTrn

    ctypedef int32_t DLDeviceType

    ctypedef struct DLDevice:
        DLDeviceType device_type
        int32_t device_id

    enum:
        kDLInt
        kDLUInt
        kDLFloat
        kDLOpaqueHandle
        kDLBfloat
        kDLComplex
        kDLBool
        kDLFloat8_e3m4
        kDLFloat8_e4m3
        kDLFloat8_e4m3b11fnuz
        kDLFloat8_e4m3fn
        kDLFloat8_e4m3fnuz
        kDLFloat8_e5m2
        kDLFloat8_e5m2fnuz
        kDLFloat8_e8m0fnu
        kDLFloat6_e2m3fn
        kDLFloat6_e3m2fn
        kDLFloat4_e2m1fn

    ctypedef struct DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes

    ctypedef struct DLTensor:
        void* data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset

    ctypedef struct DLManagedTensor:
        DLTensor dl_tensor
        void* manager_ctx
        void (*deleter)(DLManagedTensor*) noexcept nogil

    ctypedef struct DLManagedTensorVersioned:
        DLPackVersion version
        void* manager_ctx
        void (*deleter)(DLManagedTensorVersioned*) noexcept nogil
        uint64_t flags
        DLTensor dl_tensor

    ctypedef int (*DLPackManagedTensorAllocator)(
        DLTensor*, DLManagedTensorVersioned**, void*,
        void (*)(void*, const char*, const char*) noexcept) noexcept
    ctypedef int (*DLPackManagedTensorFromPyObjectNoSync)(
        void*, DLManagedTensorVersioned**) noexcept
    ctypedef int (*DLPackManagedTensorToPyObjectNoSync)(
        DLManagedTensorVersioned*, void**) noexcept
    ctypedef int (*DLPackDLTensorFromPyObjectNoSync)(void*, DLTensor*) noexcept
    ctypedef int (*DLPackCurrentWorkStream)(DLDeviceType, int32_t, void**) noexcept

    ctypedef struct DLPackExchangeAPIHeader:
        DLPackVersion version
        DLPackExchangeAPIHeader* prev_api

    ctypedef struct DLPackExchangeAPI:
        DLPackExchangeAPIHeader header
        DLPackManagedTensorAllocator managed_tensor_allocator
        DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync
        DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync
        DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync
        DLPackCurrentWorkStream current_work_stream
