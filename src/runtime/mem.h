/* Memory types: what a kind of memory (host, CUDA devices) provides so that algorithms can
 * copy, reduce and stage data in it without knowing which one they hold. One ops table per type;
 * a new memory type is one new file with its table and one entry in hoop__mem_ops(). Algorithms
 * reach these through the call-level helpers of runtime.h; a call's transfers of device memory
 * are staged through host memory (stage.c). */
#ifndef HOOP_RUNTIME_MEM_H
#define HOOP_RUNTIME_MEM_H

#include <stddef.h>

#include "base/memtype.h"
#include "hoop.h"

struct hoop__call;

/* The copies and reductions take the call they serve (its communicator holds the state the type
 * may need, the CUDA module's context; a stream-ordered call runs on the communicator's
 * stream); allocations take the communicator. One that fails aborts the communicator with its
 * sentence (hoop__comm_fail): the algorithm notices at its next wait, the call's end at the
 * latest (plan.c). */
typedef struct hoop__mem_ops {
    const char *name;
    /* dst and src do not overlap; either may also be host memory. */
    void (*copy)(const struct hoop__call *call, void *dst, const void *src, size_t n);
    /* dst and src may overlap. */
    void (*move)(const struct hoop__call *call, void *dst, const void *src, size_t n);
    /* out[i] = a[i] op b[i], with the guarantees of hoop__reduce (reduce/reduce.h): out may alias
     * a or b exactly, and the result depends only on the order of (a, b). */
    void (*reduce)(const struct hoop__call *call, void *out, const void *a, const void *b,
                   size_t count, hoop_dtype_t dt, hoop_op_t op);
    /* buf[i] /= divisor: the last step of HOOP_AVG. */
    void (*avg_finish)(const struct hoop__call *call, void *buf, size_t count, hoop_dtype_t dt,
                       int divisor);
    /* Scratch space in this memory; NULL when none is left. */
    void *(*alloc)(hoop_comm_t *c, size_t bytes);
    void (*free)(hoop_comm_t *c, void *p);
    /* Host memory that this type's copies reach fastest (pinned, for CUDA): where transfers of
     * its buffers are staged for the transports, which read and write host memory only. */
    void *(*host_alloc)(hoop_comm_t *c, size_t bytes);
    void (*host_free)(hoop_comm_t *c, void *p);
} hoop__mem_ops_t;

extern const hoop__mem_ops_t hoop__mem_host;
extern const hoop__mem_ops_t hoop__mem_cuda;

/* The table of a memory type, NULL for one that has no implementation in this build. */
const hoop__mem_ops_t *hoop__mem_ops(hoop__mem_type_t type);

/* The memory type of a call's buffers: s and r are the ones this rank reads and writes (NULL for
 * none). Host unless the CUDA driver is in the process (mem_cuda.c: until then it costs a look at
 * the loader's count of loaded objects). A device buffer that cannot be served (no CUDA module,
 * host and device buffers in one call, another device than the communicator's) fails the call
 * with HOOP_ERR_UNSUPPORTED and a sentence saying what is missing; fn names the entry point. */
hoop_result_t hoop__mem_detect(hoop_comm_t *c, const void *s, const void *r, hoop__mem_type_t *type,
                               const char *fn);

/* HOOP_ERR_SYSTEM once an operation of this communicator on device memory has failed (it
 * aborted the communicator and said why), else HOOP_OK: how a call that ends in such operations,
 * with no wait after them, learns of it. A peer's abort is not counted: a call whose own work
 * completed succeeded. */
hoop_result_t hoop__mem_failed(hoop_comm_t *c);

/* Stream-ordered calls (hoop_comm_set_stream; mem_cuda_order.c, docs/cuda.md). A call on device
 * buffers posted while a stream is set runs on the host, on a pinned copy of its buffers, and
 * takes an ordering slot: at posting (hoop__mem_order_post, on the posting thread) the stream
 * gets a copy of what the call reads into the slot's buffer and an event after it, and the call
 * is turned into a host call on that buffer (call->mem, sendbuf, recvbuf). Once it is queued
 * (hoop__mem_order_queued) the stream gets a wait for the slot's word and the copy of what the
 * call writes back into the user's buffers. When the call starts (hoop__mem_order_start, under
 * exec) the engine polls the event, with the communicator's timeout; when it completes, whatever
 * the result (hoop__mem_order_end, any thread), the word is set and the stream moves on. No
 * device work of libhoop's is queued after the stream's wait, so no hardware queue shared with
 * that stream can hold it up. call->order is the slot + 1, 0 for none. Post fails (nothing
 * queued) with a sentence, a stream being captured into a CUDA graph included; start fails
 * having aborted the communicator. */
hoop_result_t hoop__mem_order_post(hoop_comm_t *c, struct hoop__call *call, void *stream,
                                   const char *fn);
/* After the call was queued for the engine: the stream's wait and copy back, or in a group
 * (c->group > 0) held back until its end. Failing aborts the communicator. */
hoop_result_t hoop__mem_order_queued(hoop_comm_t *c, const struct hoop__call *call, const char *fn);
/* Whether the call may start without waiting (1), or its stream's earlier work is not done yet
 * (0); never blocks. 1 as well once the communicator's timeout has passed, for start to say so.
 * The engine runs another thing meanwhile: point-to-point transfers in flight, which an earlier
 * call on the same stream may be. */
int hoop__mem_order_ready(const struct hoop__call *call);
hoop_result_t hoop__mem_order_start(const struct hoop__call *call);
void hoop__mem_order_end(struct hoop__call *call);
/* A posted call that was never queued: its slot is freed and nothing is written back. */
void hoop__mem_order_cancel(struct hoop__call *call);
/* The end of the outermost group (hoop_group_end): the streams of the calls posted in it are
 * made to wait for them now. */
hoop_result_t hoop__mem_group_end(hoop_comm_t *c);

/* As the communicator goes, once no call runs and while its log is open: what peers may still
 * use is let go of first (the CUDA IPC areas: hoop__cuda_ipc_release). */
void hoop__mem_release(hoop_comm_t *c);
/* Frees what the memory types hold for c (scratch, staging buffers, the CUDA module's context),
 * as the communicator goes. */
void hoop__mem_close(hoop_comm_t *c);

#endif
