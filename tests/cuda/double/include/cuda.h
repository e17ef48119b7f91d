/* The CUDA driver API's types and constants that src/cuda/module.c uses, for building the module's
 * C code against the CUDA runtime test double (tests/cuda/double/runtime.c) on machines without
 * the toolkit. NOT the toolkit's header: only the names the module needs, with the toolkit's
 * values, so that the same module.c builds against either. The module calls no driver function
 * by name: it takes each from cudaGetDriverEntryPointByVersion. */
#ifndef HOOP_DOUBLE_CUDA_H
#define HOOP_DOUBLE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#define CUDA_VERSION 13000

typedef uint32_t cuuint32_t;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;

typedef enum cudaError_enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef enum CUstreamWaitValue_flags_enum {
    CU_STREAM_WAIT_VALUE_GEQ = 0x0
} CUstreamWaitValue_flags;

typedef enum CUpointer_attribute_enum {
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12
} CUpointer_attribute;

typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST = 0x01,
    CU_MEMORYTYPE_DEVICE = 0x02,
    CU_MEMORYTYPE_UNIFIED = 0x04
} CUmemorytype;

#endif
