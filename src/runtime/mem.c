/* The memory layer: host memory's table, the table of each memory type, and the communicator's
 * scratch space, which lives in the memory of the calls that use it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

static void host_copy(const hoop__call_t *c, void *dst, const void *src, size_t n)
{
    (void)c;
    memcpy(dst, src, n);
}
static void host_move(const hoop__call_t *c, void *dst, const void *src, size_t n)
{
    (void)c;
    memmove(dst, src, n);
}
static void host_reduce(const hoop__call_t *c, void *out, const void *a, const void *b,
                        size_t count, hoop_dtype_t dt, hoop_op_t op)
{
    (void)c;
    hoop__reduce(out, a, b, count, dt, op);
}
static void host_avg_finish(const hoop__call_t *c, void *buf, size_t count, hoop_dtype_t dt,
                            int divisor)
{
    (void)c;
    hoop__reduce_avg_finish(buf, count, dt, divisor);
}
static void *host_alloc(hoop_comm_t *c, size_t bytes)
{
    (void)c;
    return malloc(bytes);
}
static void host_free(hoop_comm_t *c, void *p)
{
    (void)c;
    free(p);
}

const hoop__mem_ops_t hoop__mem_host = {
    .name = "host",
    .copy = host_copy,
    .move = host_move,
    .reduce = host_reduce,
    .avg_finish = host_avg_finish,
    .alloc = host_alloc,
    .free = host_free,
    .host_alloc = host_alloc,
    .host_free = host_free,
};

const hoop__mem_ops_t *hoop__mem_ops(hoop__mem_type_t type)
{
    switch (type) {
    case HOOP__MEM_HOST: return &hoop__mem_host;
    case HOOP__MEM_CUDA: return &hoop__mem_cuda;
    default: return NULL;
    }
}

/* The communicator's buffer *buf (of *len bytes, in memory *mem) holding at least bytes in the
 * call's memory type: grown (never shrunk) as needed. */
static void *grow(const hoop__call_t *call, size_t bytes, void **buf, size_t *len,
                  hoop__mem_type_t *mem, const char *what)
{
    hoop_comm_t *c = call->comm;
    if (bytes == 0) bytes = 1; /* a valid pointer even for empty buffers */
    int same = call->mem == *mem;
    if (same && bytes <= *len) return *buf;
    /* Nothing in it outlives a call, so no copy; doubling keeps regrowth (and the page faults
     * of fresh memory, slow on VMs) to a few times in a job. */
    const hoop__mem_ops_t *mo = hoop__mem_ops(call->mem);
    size_t want = same && *len > 0 ? *len : 4096;
    while (want < bytes && want <= SIZE_MAX / 2) want *= 2;
    if (want < bytes) want = bytes;
    void *p = mo->alloc(c, want);
    if (p == NULL) p = mo->alloc(c, want = bytes);
    if (p == NULL) {
        /* Asked for in the middle of a collective: its peers are in the call too, so the
         * communicator cannot go on. */
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY,
                        "cannot allocate %zu bytes of %s for a collective on rank %d", bytes, what,
                        c->rank);
        return NULL;
    }
    if (*buf != NULL) hoop__mem_ops(*mem)->free(c, *buf);
    *buf = p;
    *len = want;
    *mem = call->mem;
    return p;
}

void *hoop__scratch(const hoop__call_t *call, size_t bytes)
{
    hoop_comm_t *c = call->comm;
    return grow(call, bytes, &c->scratch, &c->scratch_len, &c->scratch_mem, "scratch space");
}

void *hoop__input_copy(const hoop__call_t *call, size_t bytes)
{
    hoop_comm_t *c = call->comm;
    return grow(call, bytes, &c->in_copy, &c->in_copy_len, &c->in_copy_mem,
                "space for a copy of its input (which overlaps its output)");
}

void hoop__call_extents(const hoop__call_t *call, size_t *rd, size_t *wr)
{
    const hoop_comm_t *c = call->comm;
    size_t n = call->count * hoop__dtype_size(call->dtype), all = n * (size_t)c->size;
    int root = call->root == c->rank;
    switch (call->kind) {
    case HOOP__K_ALLREDUCE: *rd = n, *wr = n; break;
    case HOOP__K_BROADCAST: *rd = root ? n : 0, *wr = root ? 0 : n; break;
    case HOOP__K_REDUCE: *rd = n, *wr = root ? n : 0; break;
    case HOOP__K_ALLGATHER: *rd = n, *wr = all; break;
    case HOOP__K_GATHER: *rd = n, *wr = root ? all : 0; break;
    case HOOP__K_SCATTER: *rd = root ? all : 0, *wr = n; break;
    case HOOP__K_REDUCE_SCATTER: *rd = all, *wr = n; break;
    case HOOP__K_ALLTOALL: *rd = all, *wr = all; break;
    case HOOP__K_SEND: *rd = call->is_recv ? 0 : n, *wr = call->is_recv ? n : 0; break;
    default: *rd = 0, *wr = 0; break; /* a barrier, a split's exchange: no buffer of the caller */
    }
}

void hoop__scratch_free(hoop_comm_t *c)
{
    if (c->scratch != NULL) hoop__mem_ops(c->scratch_mem)->free(c, c->scratch);
    c->scratch = NULL;
    c->scratch_len = 0;
    if (c->in_copy != NULL) hoop__mem_ops(c->in_copy_mem)->free(c, c->in_copy);
    c->in_copy = NULL;
    c->in_copy_len = 0;
}

void hoop__mem_release(hoop_comm_t *c) { hoop__cuda_ipc_release(c); }

void hoop__mem_close(hoop_comm_t *c)
{
    /* Scratch and staging may be device memory: before the module's context goes. */
    hoop__scratch_free(c);
    hoop__stage_free(c);
    hoop__cuda_close(c);
}
