/*
 * The entry points: every function of hoop.h that an application calls, with its argument checks
 * (the tables of names and sizes are base/tables.c's, which every layer reads directly; no library
 * code calls an entry point). A call with bad arguments fails here, with a sentence in
 * hoop_comm_last_error(), before anything is posted; the rest goes to the lifecycle (lifecycle.c)
 * or, as a hoop__call_t, to the scheduler (sched.c).
 */
#include <stdio.h>
#include <string.h>

#include "collectives/coll.h"
#include "runtime/comm.h"
#include "core/lifecycle.h"
#include "core/explain.h"
#include "core/shrink.h"
#include "core/record.h"
#include "core/sched.h"

/* ---- public tables (base/tables.c) ---- */

const char *hoop_error_string(hoop_result_t r) { return hoop__error_string(r); }
const char *hoop_dtype_name(hoop_dtype_t dt) { return hoop__dtype_name(dt); }
const char *hoop_op_name(hoop_op_t op) { return hoop__op_name(op); }
size_t hoop_dtype_size(hoop_dtype_t dt) { return hoop__dtype_size(dt); }
const char *hoop_version(void) { return HOOP_VERSION_STRING; }

const char *hoop_comm_last_error(const hoop_comm_t *c)
{
    if (c == NULL) return "communicator is NULL";
    return hoop__comm_last(c);
}

int hoop_comm_rank(const hoop_comm_t *c) { return c != NULL ? c->rank : -1; }
int hoop_comm_size(const hoop_comm_t *c) { return c != NULL ? c->size : -1; }

hoop_result_t hoop_comm_set_trace(hoop_comm_t *c, hoop_trace_fn fn, void *ctx)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    /* Under exec: a running collective never sees a half-changed tracer. */
    pthread_mutex_lock(&c->exec);
    c->trace_fn = fn;
    c->trace_ctx = ctx;
    pthread_mutex_unlock(&c->exec);
    return HOOP_OK;
}

hoop_result_t hoop_comm_dump(hoop_comm_t *c, const char *path)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    if (path != NULL && path[0] == '\0')
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "hoop_comm_dump: the path is empty");
    return hoop__rec_dump(c, path);
}

hoop_result_t hoop_comm_stats(const hoop_comm_t *c, hoop_stats_t *st)
{
    if (c == NULL || st == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    st->bytes_sent = atomic_load(&c->bytes_sent);
    st->bytes_received = atomic_load(&c->bytes_received);
    st->messages_sent = atomic_load(&c->messages_sent);
    st->messages_received = atomic_load(&c->messages_received);
    return HOOP_OK;
}

hoop_result_t hoop_comm_memory(const hoop_comm_t *c, hoop_memory_t *m)
{
    if (c == NULL || m == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    hoop__comm_memory((hoop_comm_t *)c, m);
    return HOOP_OK;
}

hoop_result_t hoop_reduce_local(void *out, const void *a, const void *b, size_t count,
                                hoop_dtype_t dt, hoop_op_t op)
{
    if ((unsigned)dt >= HOOP_DTYPE_COUNT || (unsigned)op >= HOOP_OP_COUNT)
        return HOOP_ERR_INVALID_ARGUMENT;
    if (count > 0 && (out == NULL || a == NULL || b == NULL)) return HOOP_ERR_INVALID_ARGUMENT;
    if (count > SIZE_MAX / hoop__dtype_size(dt)) return HOOP_ERR_INVALID_ARGUMENT;
    hoop__reduce(out, a, b, count, dt, op);
    return HOOP_OK;
}

/* ---- communicators ---- */

static hoop_result_t init(hoop_comm_t **out, const char *init_method, int rank, int world_size)
{
    if (out == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    return hoop__comm_init(out, init_method, rank, world_size);
}

hoop_result_t hoop_init(hoop_comm_t **out, const char *init_method, int rank, int world_size)
{
    return init(out, init_method, rank, world_size);
}

hoop_result_t hoop_init_from_env(hoop_comm_t **comm) { return init(comm, NULL, -1, -1); }

hoop_result_t hoop_comm_set_timeout(hoop_comm_t *c, double seconds)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    if (!(seconds >= 1e-3 && seconds <= 1e7))
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "hoop_comm_set_timeout: %g is not a timeout in seconds (from 0.001 "
                                "to 10000000)",
                                seconds);
    c->timeout_s = seconds;
    return HOOP_OK;
}

hoop_result_t hoop_comm_set_algo(hoop_comm_t *c, const char *algo)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    int a = hoop__wire_algo_parse(algo);
    if (a < 0) {
        char words[200];
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "hoop_comm_set_algo: \"%.60s\" is not %s", algo ? algo : "(null)",
                                hoop__algo_words(words, sizeof(words)));
    }
    /* Posting reads it on the posting thread; running calls already hold their choice. */
    c->algo = a;
    snprintf(c->agreed.algo, sizeof(c->agreed.algo), "%s", hoop__wire_algo_name(a));
    return HOOP_OK;
}

/* Local: a stream changes when the call runs on this rank, not what moves where. */
hoop_result_t hoop_comm_set_stream(hoop_comm_t *c, void *stream)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    c->stream = stream;
    return HOOP_OK;
}

void *hoop_comm_get_stream(const hoop_comm_t *c) { return c != NULL ? c->stream : NULL; }

/* Local too: a group changes when this rank's stream waits, not what moves where. */
hoop_result_t hoop_group_start(hoop_comm_t *c)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    c->group++;
    return HOOP_OK;
}

hoop_result_t hoop_group_end(hoop_comm_t *c)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    if (c->group == 0) {
        hoop__comm_set_last(c, "hoop_group_end: no group was started (hoop_group_start)");
        return HOOP_ERR_INVALID_ARGUMENT;
    }
    if (--c->group > 0) return HOOP_OK;
    return hoop__mem_group_end(c);
}

hoop_result_t hoop_comm_abort(hoop_comm_t *c)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    hoop__comm_abort(c);
    return HOOP_OK;
}

hoop_result_t hoop_comm_destroy(hoop_comm_t *c)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    hoop__comm_destroy(c);
    return HOOP_OK;
}

/* ---- argument checks ---- */

static hoop_result_t check_comm(hoop_comm_t *c, const char *fn)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
    if (ab) {
        /* An abort by a timeout, a loss or a disagreement, seen by no call yet. */
        hoop__explain_due(c);
        hoop__rec_dump_due(c);
        hoop__comm_set_last(c, "%s: the communicator was aborted: %.900s", fn,
                            c->explained[0] != '\0' ? c->explained : c->fatal_msg);
        return ab == HOOP_ERR_ABORTED ? HOOP_ERR_ABORTED : ab;
    }
    return HOOP_OK;
}

/* check_comm for a collective. Where every failure so far came in abort notices of peers that
 * had finished calls this rank has not, those calls may still start and end here: the scheduler
 * lets one through by its number (sched.c, may_start). */
static hoop_result_t check_coll(hoop_comm_t *c, const char *fn)
{
    if (c != NULL &&
        (atomic_load(&c->aborted) == 0 || atomic_load(&c->calls_done) < atomic_load(&c->fail_from)))
        return HOOP_OK;
    return check_comm(c, fn);
}

/* Validates a call: buffers, dtype, op, root, and that count * dtype size * mult fits. coll: a
 * collective (check_coll), not a point-to-point call. */
static hoop_result_t check_call(hoop_comm_t *c, const char *fn, int coll, const void *sbuf,
                                const void *rbuf, int need_rbuf, size_t count, size_t mult,
                                hoop_dtype_t dt, int has_op, hoop_op_t op, int root)
{
    hoop_result_t rc = coll ? check_coll(c, fn) : check_comm(c, fn);
    if (rc != HOOP_OK) return rc;
    if ((unsigned)dt >= HOOP_DTYPE_COUNT)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "%s: invalid dtype %d", fn, (int)dt);
    if (has_op && (unsigned)op >= HOOP_OP_COUNT)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "%s: invalid op %d", fn, (int)op);
    if (root != -1 && (root < 0 || root >= c->size))
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "%s: root %d is outside the communicator (size %d)", fn, root,
                                c->size);
    size_t es = hoop__dtype_size(dt);
    if (count > SIZE_MAX / es / mult || count * es * mult > (size_t)1 << 62)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "%s: count %zu of %s is too large",
                                fn, count, hoop__dtype_name(dt));
    if (count > 0 && sbuf == NULL)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "%s: sendbuf is NULL", fn);
    if (count > 0 && need_rbuf && rbuf == NULL)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "%s: recvbuf is NULL", fn);
    return HOOP_OK;
}

/* Every rank of c takes part, members or not (lifecycle.c). */
hoop_result_t hoop_comm_split(hoop_comm_t *c, int color, int key, hoop_comm_t **newcomm)
{
    hoop_result_t rc = check_comm(c, "hoop_comm_split");
    if (rc != HOOP_OK) return rc;
    if (newcomm == NULL)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "hoop_comm_split: newcomm is NULL");
    *newcomm = NULL;
    if (color < HOOP_SPLIT_NONE)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "hoop_comm_split: color %d is negative (use HOOP_SPLIT_NONE)",
                                color);
    return hoop__comm_split(c, color, key, newcomm);
}

hoop_result_t hoop_comm_shrink_exclude(hoop_comm_t *c, const int *exclude, int n,
                                       hoop_comm_t **newcomm)
{
    /* Not check_comm: a failed communicator is what shrink is for. */
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    if (newcomm == NULL)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "hoop_comm_shrink: newcomm is NULL");
    *newcomm = NULL;
    /* A bad list is not refused here: the call still meets the others, so that it fails on
     * every rank (shrink.c). */
    return hoop__comm_shrink(c, exclude, n, newcomm);
}

hoop_result_t hoop_comm_shrink(hoop_comm_t *c, hoop_comm_t **newcomm)
{
    return hoop_comm_shrink_exclude(c, NULL, 0, newcomm);
}

/* ---- calls ---- */

/* A stream-ordered call just queued for the engine: its stream's wait and copy back. When they
 * cannot be queued the communicator is aborted and the call fails; its request, which the caller
 * will never see, is waited for here (the abort ends the call at once), not left queued. */
static hoop_result_t order_queued(hoop_comm_t *c, const hoop__call_t *call, hoop_request_t **req,
                                  const char *fn)
{
    hoop_result_t rc = hoop__mem_order_queued(c, call, fn);
    if (rc != HOOP_OK && req != NULL && *req != NULL) {
        (void)hoop__sched_wait(*req);
        *req = NULL;
    }
    return rc;
}

/* fn, the entry point, is also "hoop_" ["i"] and the kind's name. */
static hoop_result_t submit(hoop_comm_t *c, hoop__kind_t kind, const void *sbuf, void *rbuf,
                            size_t count, hoop_dtype_t dt, hoop_op_t op, int root,
                            hoop_request_t **req, const char *fn)
{
    hoop__call_t call = {
        .comm = c,
        .kind = kind,
        .sendbuf = sbuf,
        .recvbuf = rbuf,
        .count = count,
        .dtype = dt,
        .op = op,
        .root = root,
    };
    /* The memory of the buffers this rank touches (a non-root's unused one may be anything;
     * with count 0 nothing is touched): host, or CUDA device memory. */
    size_t rd, wr;
    hoop__call_extents(&call, &rd, &wr);
    hoop__mem_type_t mem;
    hoop_result_t drc = hoop__mem_detect(c, rd > 0 ? sbuf : NULL, wr > 0 ? rbuf : NULL, &mem, fn);
    if (drc != HOOP_OK) return drc;
    call.mem = mem;
    /* A stream-ordered call becomes a host call on a pinned copy of its buffers (mem.h): its
     * plan is made for that. */
    if (mem == HOOP__MEM_CUDA && c->stream != NULL) {
        hoop_result_t orc = hoop__mem_order_post(c, &call, c->stream, fn);
        if (orc != HOOP_OK) return orc;
    }
    hoop__plan(&call);
    hoop_result_t rc = hoop__sched_post(c, &call, req, fn);
    if (rc != HOOP_OK) hoop__mem_order_cancel(&call); /* never queued: its stream goes on */
    if (rc == HOOP_OK && call.order != 0) rc = order_queued(c, &call, req, fn);
    if (rc != HOOP_OK && req == NULL) {
        /* The error text is the communicator's; make sure last_error holds it. */
        if (atomic_load(&c->aborted) && c->fatal_msg[0] != '\0') hoop__comm_show_fatal(c);
    }
    return rc;
}

#define NEED_REQ(req, fn)                                                                          \
    do {                                                                                           \
        if ((req) == NULL && c != NULL)                                                            \
            return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "%s: req is NULL", fn);          \
    } while (0)

static int is_root(hoop_comm_t *c, int root) { return c != NULL && c->rank == root; }

static hoop_result_t allreduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                               hoop_op_t op, hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, 1, s, r, 1, n, 1, dt, 1, op, -1);
    return rc != HOOP_OK ? rc : submit(c, HOOP__K_ALLREDUCE, s, r, n, dt, op, -1, req, fn);
}

static hoop_result_t broadcast(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int root,
                               hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, 1, b, b, 1, n, 1, dt, 0, HOOP_SUM, root < 0 ? -2 : root);
    return rc != HOOP_OK ? rc : submit(c, HOOP__K_BROADCAST, b, b, n, dt, HOOP_SUM, root, req, fn);
}

static hoop_result_t reduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                            hoop_op_t op, int root, hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, 1, s, r, is_root(c, root), n, 1, dt, 1, op,
                                  root < 0 ? -2 : root);
    return rc != HOOP_OK ? rc : submit(c, HOOP__K_REDUCE, s, r, n, dt, op, root, req, fn);
}

static hoop_result_t allgather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                               hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, 1, s, r, 1, n, c ? (size_t)c->size : 1, dt, 0, HOOP_SUM,
                                  -1);
    return rc != HOOP_OK ? rc : submit(c, HOOP__K_ALLGATHER, s, r, n, dt, HOOP_SUM, -1, req, fn);
}

static hoop_result_t gather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                            int root, hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, 1, s, r, is_root(c, root), n, c ? (size_t)c->size : 1, dt,
                                  0, HOOP_SUM, root < 0 ? -2 : root);
    return rc != HOOP_OK ? rc : submit(c, HOOP__K_GATHER, s, r, n, dt, HOOP_SUM, root, req, fn);
}

static hoop_result_t scatter(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                             int root, hoop_request_t **req, const char *fn)
{
    /* Only the root reads sendbuf; every rank writes recvbuf. */
    hoop_result_t rc = check_call(c, fn, 1, is_root(c, root) ? s : r, r, 1, n,
                                  c ? (size_t)c->size : 1, dt, 0, HOOP_SUM, root < 0 ? -2 : root);
    return rc != HOOP_OK ? rc : submit(c, HOOP__K_SCATTER, s, r, n, dt, HOOP_SUM, root, req, fn);
}

static hoop_result_t reduce_scatter(hoop_comm_t *c, const void *s, void *r, size_t n,
                                    hoop_dtype_t dt, hoop_op_t op, hoop_request_t **req,
                                    const char *fn)
{
    hoop_result_t rc = check_call(c, fn, 1, s, r, 1, n, c ? (size_t)c->size : 1, dt, 1, op, -1);
    return rc != HOOP_OK ? rc : submit(c, HOOP__K_REDUCE_SCATTER, s, r, n, dt, op, -1, req, fn);
}

static hoop_result_t alltoall(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                              hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, 1, s, r, 1, n, c ? (size_t)c->size : 1, dt, 0, HOOP_SUM,
                                  -1);
    return rc != HOOP_OK ? rc : submit(c, HOOP__K_ALLTOALL, s, r, n, dt, HOOP_SUM, -1, req, fn);
}

static hoop_result_t barrier(hoop_comm_t *c, hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_coll(c, fn);
    return rc != HOOP_OK
               ? rc
               : submit(c, HOOP__K_BARRIER, NULL, NULL, 0, HOOP_UINT8, HOOP_SUM, -1, req, fn);
}

/* any: a receive from any source (peer unused), which writes its sender into *source. */
static hoop_result_t p2p(hoop_comm_t *c, void *buf, size_t n, hoop_dtype_t dt, int peer,
                         int is_recv, int any, int *source, hoop_request_t **req, const char *fn)
{
    if (source != NULL) *source = -1;
    hoop_result_t rc = check_call(c, fn, 0, buf, buf, 1, n, 1, dt, 0, HOOP_SUM, -1);
    if (rc != HOOP_OK) return rc;
    if (any && c->size < 2)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "%s: the communicator has no other rank to receive from", fn);
    if (any) peer = -1;
    if (!any && (peer < 0 || peer >= c->size || peer == c->rank))
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "%s: peer %d is not another rank of the communicator (size %d)", fn,
                                peer, c->size);
    hoop__mem_type_t mem;
    rc = hoop__mem_detect(c, n > 0 ? buf : NULL, NULL, &mem, fn);
    if (rc != HOOP_OK) return rc;
    hoop__call_t call = {
        .comm = c,
        .kind = HOOP__K_SEND,
        .sendbuf = is_recv ? NULL : buf,
        .recvbuf = is_recv ? buf : NULL,
        .count = n,
        .dtype = dt,
        .op = HOOP_SUM,
        .root = peer,
        .mem = mem,
        .is_recv = is_recv,
        .any_source = any,
        .source = source,
    };
    if (mem == HOOP__MEM_CUDA && c->stream != NULL) {
        rc = hoop__mem_order_post(c, &call, c->stream, fn);
        if (rc != HOOP_OK) return rc;
    }
    rc = hoop__sched_post(c, &call, req, fn);
    if (rc != HOOP_OK) hoop__mem_order_cancel(&call);
    if (rc == HOOP_OK && call.order != 0) rc = order_queued(c, &call, req, fn);
    return rc;
}

hoop_result_t hoop_allreduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                             hoop_op_t op)
{
    return allreduce(c, s, r, n, dt, op, NULL, "hoop_allreduce");
}
hoop_result_t hoop_broadcast(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int root)
{
    return broadcast(c, b, n, dt, root, NULL, "hoop_broadcast");
}
hoop_result_t hoop_reduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                          hoop_op_t op, int root)
{
    return reduce(c, s, r, n, dt, op, root, NULL, "hoop_reduce");
}
hoop_result_t hoop_allgather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt)
{
    return allgather(c, s, r, n, dt, NULL, "hoop_allgather");
}
hoop_result_t hoop_gather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                          int root)
{
    return gather(c, s, r, n, dt, root, NULL, "hoop_gather");
}
hoop_result_t hoop_scatter(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                           int root)
{
    return scatter(c, s, r, n, dt, root, NULL, "hoop_scatter");
}
hoop_result_t hoop_reduce_scatter(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                                  hoop_op_t op)
{
    return reduce_scatter(c, s, r, n, dt, op, NULL, "hoop_reduce_scatter");
}
hoop_result_t hoop_alltoall(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt)
{
    return alltoall(c, s, r, n, dt, NULL, "hoop_alltoall");
}
hoop_result_t hoop_barrier(hoop_comm_t *c) { return barrier(c, NULL, "hoop_barrier"); }
hoop_result_t hoop_send(hoop_comm_t *c, const void *b, size_t n, hoop_dtype_t dt, int peer)
{
    return p2p(c, (void *)b, n, dt, peer, 0, 0, NULL, NULL, "hoop_send");
}
hoop_result_t hoop_recv(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int peer)
{
    return p2p(c, b, n, dt, peer, 1, 0, NULL, NULL, "hoop_recv");
}
hoop_result_t hoop_recv_any(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int *source)
{
    return p2p(c, b, n, dt, -1, 1, 1, source, NULL, "hoop_recv_any");
}

hoop_result_t hoop_iallreduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                              hoop_op_t op, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_iallreduce");
    return allreduce(c, s, r, n, dt, op, req, "hoop_iallreduce");
}
hoop_result_t hoop_ibroadcast(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int root,
                              hoop_request_t **req)
{
    NEED_REQ(req, "hoop_ibroadcast");
    return broadcast(c, b, n, dt, root, req, "hoop_ibroadcast");
}
hoop_result_t hoop_ireduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                           hoop_op_t op, int root, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_ireduce");
    return reduce(c, s, r, n, dt, op, root, req, "hoop_ireduce");
}
hoop_result_t hoop_iallgather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                              hoop_request_t **req)
{
    NEED_REQ(req, "hoop_iallgather");
    return allgather(c, s, r, n, dt, req, "hoop_iallgather");
}
hoop_result_t hoop_igather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                           int root, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_igather");
    return gather(c, s, r, n, dt, root, req, "hoop_igather");
}
hoop_result_t hoop_iscatter(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                            int root, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_iscatter");
    return scatter(c, s, r, n, dt, root, req, "hoop_iscatter");
}
hoop_result_t hoop_ireduce_scatter(hoop_comm_t *c, const void *s, void *r, size_t n,
                                   hoop_dtype_t dt, hoop_op_t op, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_ireduce_scatter");
    return reduce_scatter(c, s, r, n, dt, op, req, "hoop_ireduce_scatter");
}
hoop_result_t hoop_ialltoall(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                             hoop_request_t **req)
{
    NEED_REQ(req, "hoop_ialltoall");
    return alltoall(c, s, r, n, dt, req, "hoop_ialltoall");
}
hoop_result_t hoop_ibarrier(hoop_comm_t *c, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_ibarrier");
    return barrier(c, req, "hoop_ibarrier");
}
hoop_result_t hoop_isend(hoop_comm_t *c, const void *b, size_t n, hoop_dtype_t dt, int peer,
                         hoop_request_t **req)
{
    NEED_REQ(req, "hoop_isend");
    return p2p(c, (void *)b, n, dt, peer, 0, 0, NULL, req, "hoop_isend");
}
hoop_result_t hoop_irecv(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int peer,
                         hoop_request_t **req)
{
    NEED_REQ(req, "hoop_irecv");
    return p2p(c, b, n, dt, peer, 1, 0, NULL, req, "hoop_irecv");
}
hoop_result_t hoop_irecv_any(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int *source,
                             hoop_request_t **req)
{
    NEED_REQ(req, "hoop_irecv_any");
    return p2p(c, b, n, dt, -1, 1, 1, source, req, "hoop_irecv_any");
}

hoop_result_t hoop_wait(hoop_request_t *req) { return hoop__sched_wait(req); }
hoop_result_t hoop_test(hoop_request_t *req, int *done) { return hoop__sched_test(req, done); }
