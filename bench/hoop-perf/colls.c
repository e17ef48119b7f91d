/*
 * The collectives hoop-perf measures, one row of COLLS each: how its counts relate to the size
 * column (nccl-tests' conventions), its bus factor, how it is called (blocking, or posted for a
 * later wait) and, from check.c, what every rank sends and must receive.
 */
#include <string.h>

#include "hoop.h"
#include "hoop-perf.h"

size_t kind_count(count_kind_t ck, size_t bytes, size_t es, int n)
{
    if (ck == CK_NONE) return 0;
    return ck == CK_SAME ? bytes / es : bytes / es / (size_t)n;
}

size_t kind_send(count_kind_t ck, size_t count, int n)
{
    if (ck == CK_NONE) return 0;
    return ck == CK_SCATTER || ck == CK_ALLTOALL ? count * (size_t)n : count;
}

size_t kind_recv(count_kind_t ck, size_t count, int n)
{
    if (ck == CK_NONE) return 0;
    return ck == CK_GATHER || ck == CK_ALLTOALL ? count * (size_t)n : count;
}

/* In place, both buffers live in the receive buffer, at these element offsets (as nccl-tests). */
size_t kind_send_offset(count_kind_t ck, size_t count, int rank)
{
    return ck == CK_GATHER ? count * (size_t)rank : 0;
}

size_t kind_recv_offset(count_kind_t ck, size_t count, int rank)
{
    return ck == CK_SCATTER ? count * (size_t)rank : 0;
}

static double bus_allreduce(int n) { return 2.0 * (n - 1) / n; }
static double bus_spread(int n) { return (double)(n - 1) / n; }
static double bus_one(int n)
{
    (void)n;
    return 1.0;
}

/* Counts a posted request, so that the caller waits for it. */
static hoop_result_t posted(hoop_result_t e, int *nreqs)
{
    if (e == HOOP_OK) ++*nreqs;
    return e;
}

static hoop_result_t allreduce_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs
               ? posted(hoop_iallreduce(k->comm, k->s, k->r, k->count, k->dt, k->op, &reqs[*nreqs]),
                        nreqs)
               : hoop_allreduce(k->comm, k->s, k->r, k->count, k->dt, k->op);
}

static hoop_result_t broadcast_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_ibroadcast(k->comm, k->r, k->count, k->dt, k->root, &reqs[*nreqs]),
                         nreqs)
                : hoop_broadcast(k->comm, k->r, k->count, k->dt, k->root);
}

/* hoop_broadcast works in place: out of place, the root's input is copied to its receive buffer
 * first, outside the timing (the copy is not what is being measured). */
static void broadcast_prep(const call_t *k)
{
    if (k->rank == k->root && k->s != k->r && k->count > 0) memcpy(k->r, k->s, k->count * k->es);
}

static hoop_result_t reduce_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_ireduce(k->comm, k->s, k->r, k->count, k->dt, k->op, k->root,
                                      &reqs[*nreqs]),
                         nreqs)
                : hoop_reduce(k->comm, k->s, k->r, k->count, k->dt, k->op, k->root);
}

static hoop_result_t allgather_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs
               ? posted(hoop_iallgather(k->comm, k->s, k->r, k->count, k->dt, &reqs[*nreqs]), nreqs)
               : hoop_allgather(k->comm, k->s, k->r, k->count, k->dt);
}

static hoop_result_t gather_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_igather(k->comm, k->s, k->r, k->count, k->dt, k->root, &reqs[*nreqs]),
                         nreqs)
                : hoop_gather(k->comm, k->s, k->r, k->count, k->dt, k->root);
}

static hoop_result_t scatter_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs
               ? posted(hoop_iscatter(k->comm, k->s, k->r, k->count, k->dt, k->root, &reqs[*nreqs]),
                        nreqs)
               : hoop_scatter(k->comm, k->s, k->r, k->count, k->dt, k->root);
}

static hoop_result_t reducescatter_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_ireduce_scatter(k->comm, k->s, k->r, k->count, k->dt, k->op,
                                              &reqs[*nreqs]),
                         nreqs)
                : hoop_reduce_scatter(k->comm, k->s, k->r, k->count, k->dt, k->op);
}

static hoop_result_t alltoall_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_ialltoall(k->comm, k->s, k->r, k->count, k->dt, &reqs[*nreqs]), nreqs)
                : hoop_alltoall(k->comm, k->s, k->r, k->count, k->dt);
}

/* Every rank sends to the next and receives from the previous at once, as nccl-tests' sendrecv. */
static hoop_result_t sendrecv_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    hoop_request_t *mine[2], **q = reqs ? &reqs[*nreqs] : mine;
    int to = (k->rank + 1) % k->size, from = (k->rank - 1 + k->size) % k->size;
    hoop_result_t e = hoop_isend(k->comm, k->s, k->count, k->dt, to, &q[0]);
    if (e != HOOP_OK) return e;
    hoop_result_t e2 = hoop_irecv(k->comm, k->r, k->count, k->dt, from, &q[1]);
    if (reqs) {
        *nreqs += e2 == HOOP_OK ? 2 : 1;
        return e2;
    }
    hoop_result_t w2 = e2 == HOOP_OK ? hoop_wait(q[1]) : e2, w1 = hoop_wait(q[0]);
    return w2 != HOOP_OK ? w2 : w1;
}

static hoop_result_t barrier_run(const call_t *k, hoop_request_t **reqs, int *nreqs)
{
    return reqs ? posted(hoop_ibarrier(k->comm, &reqs[*nreqs]), nreqs) : hoop_barrier(k->comm);
}

const coll_t COLLS[] = {
    {"allreduce", CK_SAME, F_OP, bus_allreduce, allreduce_run, NULL, reduce_in, reduced_expect},
    {"broadcast", CK_SAME, F_ROOT | F_ROOT_SENDS, bus_one, broadcast_run, broadcast_prep, own_value,
     root_value},
    {"reduce", CK_SAME, F_OP | F_ROOT | F_ROOT_RECEIVES, bus_one, reduce_run, NULL, reduce_in,
     reduced_expect},
    {"allgather", CK_GATHER, 0, bus_spread, allgather_run, NULL, own_value, blocks_value},
    {"gather", CK_GATHER, F_ROOT | F_ROOT_RECEIVES, bus_spread, gather_run, NULL, own_value,
     blocks_value},
    {"scatter", CK_SCATTER, F_ROOT | F_ROOT_SENDS, bus_spread, scatter_run, NULL, blocks_value,
     own_value},
    {"reducescatter", CK_SCATTER, F_OP, bus_spread, reducescatter_run, NULL, reduce_in, rs_expect},
    {"alltoall", CK_ALLTOALL, 0, bus_spread, alltoall_run, NULL, alltoall_in, alltoall_expect},
    {"sendrecv", CK_SAME, F_NO_INPLACE, bus_one, sendrecv_run, NULL, own_value, prev_value},
    {"barrier", CK_NONE, F_NO_INPLACE, NULL, barrier_run, NULL, NULL, NULL},
};
const size_t NCOLLS = sizeof COLLS / sizeof COLLS[0];

const coll_t *find_coll(const char *name)
{
    char flat[32];
    size_t n = 0;
    for (const char *p = name; *p && n + 1 < sizeof flat; p++)
        if (*p != '_') flat[n++] = *p;
    flat[n] = '\0';
    for (size_t i = 0; i < NCOLLS; i++)
        if (!strcmp(flat, COLLS[i].name)) return &COLLS[i];
    return NULL;
}
