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
#define HOOP__CUDA_ABI 5
/* The one symbol a module exports: const hoop_cuda_module_t *hoop_cuda_module(void). */
#define HOOP__CUDA_ENTRY "hoop_cuda_module"
/* Bytes of an IPC handle (cudaIpcMemHandle_t's size). */
#define HOOP__CUDA_IPC_HANDLE 64

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
    /* The operations return 0, or -1 with the sentence of error(ctx), and leave the calling
     * thread as they found it: its current context (they make no context on another device
     * than ctx's, and none where the thread had none) and its stream capture mode. stream is a
     * cudaStream_t; NULL names the legacy default stream. The four below start after the work
     * queued on stream so far and are complete in memory when they return; with a stream they
     * wait for that stream only, with NULL for the legacy stream's work queued before them, not
     * for what the blocking streams queue later. */
    /* dst and src do not overlap; either may be host memory. */
    int (*copy)(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n, void *stream);
    /* dst and src may overlap. */
    int (*move)(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n, void *stream);
    /* out[i] = a[i] op b[i] in device memory, bit for bit what hoop__reduce (src/reduce) gives;
     * out may alias a or b exactly; HOOP_AVG reduces as HOOP_SUM. */
    int (*reduce)(hoop_cuda_ctx_t *ctx, void *out, const void *a, const void *b, size_t count,
                  hoop_dtype_t dt, hoop_op_t op, void *stream);
    /* buf[i] /= divisor, as hoop__reduce_avg_finish. */
    int (*avg_finish)(hoop_cuda_ctx_t *ctx, void *buf, size_t count, hoop_dtype_t dt, int divisor,
                      void *stream);
    /* Device memory on the context's device; NULL (and error(ctx) says why) when none is left. */
    void *(*alloc)(hoop_cuda_ctx_t *ctx, size_t bytes);
    void (*free)(hoop_cuda_ctx_t *ctx, void *p);
    /* Host memory the copies reach fastest (pinned, and mapped for the device, so that
     * stream_wait_word may watch it), for staging transfers. Neither free synchronizes the
     * device (a free during a stream-ordered call must not wait for the streams that wait for
     * it): device memory is freed in stream order, pinned memory may be kept until close. */
    void *(*host_alloc)(hoop_cuda_ctx_t *ctx, size_t bytes);
    void (*host_free)(hoop_cuda_ctx_t *ctx, void *p);
    /* The sentence of the last failed operation on ctx. */
    const char *(*error)(const hoop_cuda_ctx_t *ctx);

    /* ---- streams and events (ABI 2) ----
     * None of these waits for the device or for another stream; only stream_sync and
     * event_query look at completion, and only of their own stream or event. */
    /* A stream of the context's device that never waits implicitly for the legacy default
     * stream (cudaStreamNonBlocking); NULL with the sentence of error(ctx). */
    void *(*stream_create)(hoop_cuda_ctx_t *ctx);
    void (*stream_destroy)(hoop_cuda_ctx_t *ctx, void *stream);
    /* Blocks until the work queued on stream so far is done (tests; libhoop polls events). */
    int (*stream_sync)(hoop_cuda_ctx_t *ctx, void *stream);
    /* Queued on stream: a copy that returns at once (dst and src do not overlap; host memory
     * must stay valid and unchanged until it is done). */
    int (*copy_async)(hoop_cuda_ctx_t *ctx, void *dst, const void *src, size_t n, void *stream);
    /* Events without timing. event_record marks the work queued on stream so far; a later
     * event_query says 1 when that work is done, 0 while it is not (or -1), and a later
     * stream_wait_event makes the work queued on stream after it wait for that point (the
     * latest record when it was queued, as cudaStreamWaitEvent). */
    void *(*event_create)(hoop_cuda_ctx_t *ctx);
    void (*event_destroy)(hoop_cuda_ctx_t *ctx, void *event);
    int (*event_record)(hoop_cuda_ctx_t *ctx, void *event, void *stream);
    int (*event_query)(hoop_cuda_ctx_t *ctx, void *event);
    int (*stream_wait_event)(hoop_cuda_ctx_t *ctx, void *stream, void *event);
    /* The work queued on stream after this waits until the 32-bit word, in memory from
     * host_alloc, reaches value ((int32_t)(*word - value) >= 0, so that a counter may wrap),
     * which the host sets with an atomic store: how a stream waits for work done by the host
     * (cuStreamWaitValue32 on real CUDA). */
    int (*stream_wait_word)(hoop_cuda_ctx_t *ctx, void *stream, const uint32_t *word,
                            uint32_t value);

    /* ---- IPC between processes of one node (ABI 2) ---- */
    /* Device memory that other processes may open: its handle (HOOP__CUDA_IPC_HANDLE bytes) goes
     * to handle. NULL with the sentence of error(ctx). Freed with ipc_free. */
    void *(*ipc_alloc)(hoop_cuda_ctx_t *ctx, size_t bytes, void *handle);
    void (*ipc_free)(hoop_cuda_ctx_t *ctx, void *p);
    /* Another process's memory from its handle, as device memory this process's copies and
     * kernels may use (on the same device or a peer); NULL with the sentence of error(ctx). */
    void *(*ipc_open)(hoop_cuda_ctx_t *ctx, const void *handle);
    void (*ipc_close)(hoop_cuda_ctx_t *ctx, void *p);

    /* ---- asynchronous kernels and IPC events (ABI 3) ---- */
    /* As reduce and avg_finish, but queued on stream: they return at once, and the buffers
     * must stay valid until the work is done. (Pointers not aligned to their element go
     * through temporaries, synchronously, as in reduce.) */
    int (*reduce_async)(hoop_cuda_ctx_t *ctx, void *out, const void *a, const void *b, size_t count,
                        hoop_dtype_t dt, hoop_op_t op, void *stream);
    int (*avg_finish_async)(hoop_cuda_ctx_t *ctx, void *buf, size_t count, hoop_dtype_t dt,
                            int divisor, void *stream);
    /* An event that other processes of the node may open from its handle
     * (HOOP__CUDA_IPC_HANDLE bytes, to handle); used as event_create's, freed with
     * event_destroy. NULL with the sentence of error(ctx). */
    void *(*ipc_event_create)(hoop_cuda_ctx_t *ctx, void *handle);
    /* Another process's event from its handle, for event_query and stream_wait_event only
     * (only its owner records it); closed with event_destroy. NULL with the sentence. */
    void *(*ipc_event_open)(hoop_cuda_ctx_t *ctx, const void *handle);

    /* ---- capture, versions (ABI 4; ABI 5 dropped the thread binding) ---- */
    /* 1 when stream is being captured into a CUDA graph (or its capture was invalidated), 0
     * when not, -1 with the sentence of error(ctx) when CUDA refuses to say (the legacy stream
     * during another stream's capture). */
    int (*stream_capturing)(hoop_cuda_ctx_t *ctx, void *stream);
    /* The CUDA version of the module's runtime and of the driver (1000 x major + 10 x minor; 0
     * when unknown). It needs no context. */
    void (*versions)(int *runtime, int *driver);
} hoop_cuda_module_t;

typedef const hoop_cuda_module_t *(*hoop_cuda_entry_fn)(void);

#endif
