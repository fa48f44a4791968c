/* SPDX-License-Identifier: Apache-2.0
 *
 * The DLPack 1.3 ABI as tensorbridge uses it, written from the published
 * layouts (field order, C types and enum values are fixed by the standard;
 * see docs/design.md).  Only what tensorbridge needs is declared here.
 *
 * LP64 sizes, checked at compile time below:
 *   DLTensor 48, DLManagedTensor 64, DLManagedTensorVersioned 80,
 *   DLPackExchangeAPI 56.
 */
#ifndef TENSORBRIDGE_DLPACK_H_
#define TENSORBRIDGE_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

/* The version tensorbridge implements (not merely the header it read). */
#define TB_DLPACK_MAJOR 1
#define TB_DLPACK_MINOR 3

#define TB_FLAG_READ_ONLY ((uint64_t)1)
#define TB_FLAG_IS_COPIED ((uint64_t)2)
#define TB_FLAG_SUBBYTE_PADDED ((uint64_t)4)

/* Capsule names are static strings: a capsule keeps the pointer, not a copy. */
#define TB_CAPSULE_LEGACY "dltensor"
#define TB_CAPSULE_LEGACY_USED "used_dltensor"
#define TB_CAPSULE_VERSIONED "dltensor_versioned"
#define TB_CAPSULE_VERSIONED_USED "used_dltensor_versioned"
#define TB_CAPSULE_EXCHANGE_API "dlpack_exchange_api"

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/* Device type values (DLDeviceType); 5 and 6 are unused by the standard. */
enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
  kDLTrn = 18
};
typedef int32_t DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

/* Type codes (DLDataTypeCode), stored in a uint8_t. */
enum {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
  kDLFloat8_e3m4 = 7,
  kDLFloat8_e4m3 = 8,
  kDLFloat8_e4m3b11fnuz = 9,
  kDLFloat8_e4m3fn = 10,
  kDLFloat8_e4m3fnuz = 11,
  kDLFloat8_e5m2 = 12,
  kDLFloat8_e5m2fnuz = 13,
  kDLFloat8_e8m0fnu = 14,
  kDLFloat6_e2m3fn = 15,
  kDLFloat6_e3m2fn = 16,
  kDLFloat4_e2m1fn = 17
};

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;          /* device pointer or opaque handle; add byte_offset */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;      /* ndim entries; may be NULL when ndim == 0 */
  int64_t *strides;    /* in elements; NULL meant C order before 1.2 */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* The C exchange API (DLPack 1.2 function table, 1.3 discovery). */
typedef int (*DLPackManagedTensorAllocator)(
    DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
    void (*SetError)(void *error_ctx, const char *kind, const char *message));
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(
    void *py_object, DLManagedTensorVersioned **out);
typedef int (*DLPackManagedTensorToPyObjectNoSync)(
    DLManagedTensorVersioned *tensor, void **out_py_object);
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out);
typedef int (*DLPackCurrentWorkStream)(
    DLDeviceType device_type, int32_t device_id, void **out_current_stream);

typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
  DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && UINTPTR_MAX == 0xffffffffffffffffu
_Static_assert(sizeof(DLTensor) == 48, "DLTensor layout");
_Static_assert(sizeof(DLManagedTensor) == 64, "DLManagedTensor layout");
_Static_assert(sizeof(DLManagedTensorVersioned) == 80, "DLManagedTensorVersioned layout");
_Static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) == 32, "dl_tensor offset");
_Static_assert(sizeof(DLPackExchangeAPI) == 56, "DLPackExchangeAPI layout");
#endif

#endif /* TENSORBRIDGE_DLPACK_H_ */
