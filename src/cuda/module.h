/* The CUDA module's table: everything libhoop asks of a GPU runtime, behind one exported function.
 * libhoop never links the CUDA runtime: it dlopens a module (libhoop-cuda.so, or the test double
 * of tests/cuda/double) the first time a pointer may be device memory and calls it only through
 * this table (docs/cuda.md). Plain C, no CUDA header, so both sides build without the toolkit. */
#ifndef HOOP_CUDA_MODULE_H
#define HOOP_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "hoop.h"

/* Bumped on any change of the table's layout or meaning: libhoop refuses a module of another. */
#define HOOP__CUDA_ABI 1
/* The one symbol a module exports: const hoop_cuda_module_t *hoop_cuda_module(void). */
#define HOOP__CUDA_ENTRY "hoop_cuda_module"

enum {
    HOOP__CUDA_PTR_HOST = 0, /* host memory (pageable, pinned or registered): memcpy reaches it */
    HOOP__CUDA_PTR_DEVICE,   /* device or managed memory: only the module's copies and kernels do */
};

typedef struct hoop_cuda_ptr {
    int type;       /* HOOP_CUDA_PTR_* */
    int device;     /* device memory: the ordinal of its device */
    uintptr_t base; /* device memory: its allocation is [base, base + size); size 0 when unknown */
    size_t size;
} hoop_cuda_ptr_t;

/* The module's state for one communicator on one device (opaque to libhoop). */
typedef struct hoop_cuda_ctx hoop_cuda_ctx_t;

typedef struct hoop_cuda_module {
    uint32_t abi;     /* HOOP__CUDA_ABI */
    uint32_t size;    /* sizeof(hoop_cuda_module_t) as the module was built */
    const char *name; /* says what it is in messages: "CUDA runtime 13.0", "CUDA test double" */
    /* What p is. 0, or -1 with a sentence in err when the runtime cannot tell (no usable
     * driver, say). */
    int (*classify)(const void *p, hoop_cuda_ptr_t *out, char *err, size_t errlen);
    /* A context on device; NULL with a sentence in err. */
    hoop_cuda_ctx_t *(*open)(int device, char *err, size_t errlen);
    void (*close)(hoop_cuda_ctx_t *ctx);
    /* The operations return 0, or -1 with the sentence of error(ctx). Each is complete in memory
     * when it returns (stream-ordered variants come later), and leaves the calling thread's
     * current device as it found it. */
    /* dst and src do not overlap; either may be host memory. */
    int (*copy)(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n);
    /* dst and src may overlap. */
    int (*move)(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n);
    /* out[i] = a[i] op b[i] in device memory, bit for bit what hoop__reduce (src/reduce) gives;
     * out may alias a or b exactly; HOOP_AVG reduces as HOOP_SUM. */
    int (*reduce)(hoop_cuda_ctx_t *ctx, void *out, const void *a, const void *b, size_t count,
                  hoop_dtype_t dt, hoop_op_t op);
    /* buf[i] /= divisor, as hoop__reduce_avg_finish. */
    int (*avg_finish)(hoop_cuda_ctx_t *ctx, void *buf, size_t count, hoop_dtype_t dt, int divisor);
    /* Device memory on the context's device; NULL (and error(ctx) says why) when none is left. */
    void *(*alloc)(hoop_cuda_ctx_t *ctx, size_t bytes);
    void (*free)(hoop_cuda_ctx_t *ctx, void *p);
    /* Host memory the copies reach fastest (pinned), for staging transfers. */
    void *(*host_alloc)(hoop_cuda_ctx_t *ctx, size_t bytes);
    void (*host_free)(hoop_cuda_ctx_t *ctx, void *p);
    /* The sentence of the last failed operation on ctx. */
    const char *(*error)(const hoop_cuda_ctx_t *ctx);
} hoop_cuda_module_t;

typedef const hoop_cuda_module_t *(*hoop_cuda_entry_fn)(void);

#endif
