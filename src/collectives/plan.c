/* Algorithm selection and dispatch.
 *
 * Where every rank published the same host identity (the transports' key: hostname, boot id,
 * namespaces, HOOP_HOSTID) and HOOP_TRANSPORT is auto or shm, all-reduce, broadcast, reduce,
 * all-gather, reduce-scatter and barrier run through the shared area (shm_coll.c, "shm"); whether
 * the ranks really share a host is learnt by the first such call, which maps the area, and the
 * answer is the same on every rank: where a rank cannot map it, every rank falls back to the
 * point-to-point algorithms below, for good. The choice depends on the agreed settings and the
 * kind only, never on the size or on what a rank has learnt, so every rank makes it alike.
 *
 * Point-to-point (HOOP_TRANSPORT=tcp, or HOOP_ALGO naming one of them): all-reduce by recursive
 * doubling at or below HOOP_SMALL_BYTES (latency-bound: log2(p) rounds), the ring above
 * (bandwidth-bound: 2(p-1)/p of the data per rank). HOOP_ALGO forces one, including Rabenseifner's
 * and the parameter servers, which auto never picks: Rabenseifner's won nowhere it was measured
 * (docs/performance.md), the parameter servers are there to be compared with. HOOP_ALGO=shm
 * forces the shared area whatever the transport; HOOP_ALGO=p2p is auto without it.
 *
 * CUDA device buffers (ipc.c, "ipc"): all-reduce, reduce, broadcast, all-gather and
 * reduce-scatter through peers' device memory where every rank's buffers are device memory and
 * the shared area is in use (auto: its first step says what every rank has, so every rank
 * decides alike), or forced by HOOP_ALGO=ipc; otherwise device buffers are staged through host
 * memory by whichever algorithm above runs, except that the hierarchical ones run their stages
 * inside a host over IPC where that host's ranks all have device buffers (hier.c). HOOP_ALGO=ipc
 * where the hierarchical layout fits is HOOP_ALGO=hier (whose stages inside hosts try IPC at
 * every size), broadcast included.
 *
 * Hierarchical (hier.c, "hier"), where the ranks are several on each of several hosts, as many
 * on each (the ring's host layout, which every rank computed alike): all-reduce above
 * HOOP_SMALL_BYTES; all-gather and reduce-scatter at every size (fewer steps as well as fewer
 * bytes across hosts), unless HOOP_ALGO names one of the flat all-reduce algorithms; reduce where
 * the flat one would leave its binomial tree (which brings each host's sum to the root's host
 * once, as few bytes as the hierarchical one there, in fewer hops: 0.86-0.90x at 1-4 MiB on 2
 * hosts of 2); broadcast under HOOP_ALGO=hier only (the flat chain already brings the buffer
 * into each host once). HOOP_ALGO=hier where the layout does not fit runs the flat ones. Other
 * collectives pick their own variant by size inside their file. */
#define HOOP__LOG_SUBSYS HOOP__SUB_COLL /* of its INFO and TRACE lines (base/log.h) */
#include <string.h>
#include <strings.h>

#include "collectives/coll.h"
#include "local/shm_coll.h"

_Static_assert(HOOP__ALGO_COUNT == HOOP__WIRE_ALGO_COUNT, "an algorithm the wire cannot name");

const char *hoop__algo_name(int algo) { return hoop__wire_algo_name(algo); }

int hoop__algo_parse(const char *s)
{
    for (int i = 0; i < HOOP__ALGO_COUNT; i++)
        if (strcasecmp(s, hoop__wire_algo_name(i)) == 0) return i;
    return -1;
}

static int has_shm(hoop__kind_t k)
{
    return k == HOOP__K_ALLREDUCE || k == HOOP__K_BROADCAST || k == HOOP__K_REDUCE ||
           k == HOOP__K_ALLGATHER || k == HOOP__K_REDUCE_SCATTER || k == HOOP__K_BARRIER;
}

/* The point-to-point choice; forced is HOOP_ALGO's value, AUTO for auto, shm and p2p. */
static hoop__algo_t p2p_choose(const hoop__call_t *call, int forced)
{
    size_t bytes = call->count * hoop__dtype_size(call->dtype);
    int hier = hoop__hier_fits(call->comm);
    if (forced == HOOP__ALGO_IPC && hoop__ipc_has(call->kind)) {
        if (!hier) return HOOP__ALGO_IPC; /* which fails, saying why, where ranks span hosts */
        forced = HOOP__ALGO_HIER;         /* several hosts: IPC inside each, at every size */
    }
    if (call->kind == HOOP__K_BROADCAST)
        return hier && forced == HOOP__ALGO_HIER ? HOOP__ALGO_HIER : HOOP__ALGO_AUTO;
    if (call->kind == HOOP__K_ALLGATHER || call->kind == HOOP__K_REDUCE_SCATTER)
        return hier && (forced <= 0 || forced == HOOP__ALGO_HIER) ? HOOP__ALGO_HIER
                                                                  : HOOP__ALGO_AUTO;
    if (call->kind == HOOP__K_REDUCE)
        return hier && (forced == HOOP__ALGO_HIER ||
                        (forced <= 0 && !hoop__reduce_tree_fits(call->comm, bytes)))
                   ? HOOP__ALGO_HIER
                   : HOOP__ALGO_AUTO;
    if (call->kind != HOOP__K_ALLREDUCE) return HOOP__ALGO_AUTO;
    if (forced == HOOP__ALGO_HIER) return hier ? HOOP__ALGO_HIER : HOOP__ALGO_RING;
    if (forced > 0) return (hoop__algo_t)forced;
    if (bytes <= call->comm->agreed.small_bytes) return HOOP__ALGO_RD;
    return hier ? HOOP__ALGO_HIER : HOOP__ALGO_RING;
}

hoop__algo_t hoop__algo_choose(const hoop__call_t *call)
{
    int forced = call->comm->algo;
    int shm = forced == HOOP__ALGO_SHM || (forced == HOOP__ALGO_AUTO && call->comm->shm_auto);
    if (shm && has_shm(call->kind)) return HOOP__ALGO_SHM;
    if (forced == HOOP__ALGO_SHM || forced == HOOP__ALGO_P2P) forced = HOOP__ALGO_AUTO;
    return p2p_choose(call, forced);
}

static hoop_result_t dispatch(hoop__call_t *call);
static hoop_result_t dispatch_p2p(hoop__call_t *call);

hoop_result_t hoop__collective_run(hoop__call_t *call)
{
    hoop_result_t st = dispatch(call);
    /* A failed copy or kernel of device memory aborted the communicator with its sentence; a
     * call whose last steps were such operations has no wait after them to notice. */
    if (st == HOOP_OK && call->mem != HOOP__MEM_HOST) st = hoop__mem_failed(call->comm);
    return st;
}

static hoop_result_t dispatch(hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    char what[128];
    hoop__wire_hdr_t h = {.kind = (uint8_t)call->kind,
                          .dtype = (uint8_t)call->dtype,
                          .op = (uint8_t)call->op,
                          .root = call->root,
                          .count = call->count};
    HOOP__TRACE_STEP(call, -1, "%s by rank %d of %d", hoop__wire_describe(&h, what, sizeof(what)),
                     c->rank, c->size);
    HOOP__TRACE(&c->log, "call #%llu: %s count=%zu %s %s root=%d algo=%s",
                (unsigned long long)call->seq, hoop__kind_name(call->kind), call->count,
                hoop__dtype_name(call->dtype), hoop__op_name(call->op), call->root,
                hoop__algo_name(call->algo));
    /* count 0 still exchanges (empty) messages or steps, so a rank that passed another count is
     * told. */
    hoop_result_t rc = HOOP__SHC_FALLBACK;
    if (call->algo == HOOP__ALGO_SHM) {
        switch (call->kind) {
        case HOOP__K_ALLREDUCE: rc = hoop__shm_allreduce(call); break;
        case HOOP__K_BROADCAST: rc = hoop__shm_broadcast(call); break;
        case HOOP__K_REDUCE: rc = hoop__shm_reduce(call); break;
        case HOOP__K_ALLGATHER: rc = hoop__shm_allgather(call); break;
        case HOOP__K_REDUCE_SCATTER: rc = hoop__shm_reduce_scatter(call); break;
        case HOOP__K_BARRIER: rc = hoop__shm_barrier(call); break;
        default: break;
        }
        if (rc == HOOP__SHC_IPC) rc = hoop__ipc_run(call, 1);
    } else {
        rc = hoop__shm_enter(call);
        if (rc == HOOP_OK) rc = HOOP__SHC_FALLBACK;
    }
    return rc == HOOP__SHC_FALLBACK ? dispatch_p2p(call) : rc;
}

static hoop_result_t dispatch_p2p(hoop__call_t *call)
{
    if (call->algo == HOOP__ALGO_IPC && hoop__ipc_has(call->kind)) {
        hoop_result_t rc = hoop__ipc_run(call, 0);
        if (rc != HOOP__SHC_FALLBACK) return rc; /* else host buffers on every rank */
    }
    hoop__algo_t algo = call->algo;
    if (algo == HOOP__ALGO_SHM || algo == HOOP__ALGO_IPC) algo = p2p_choose(call, HOOP__ALGO_AUTO);
    switch (call->kind) {
    case HOOP__K_ALLREDUCE:
        switch (algo) {
        case HOOP__ALGO_RD: return hoop__allreduce_rd(call);
        case HOOP__ALGO_RABEN: return hoop__allreduce_rabenseifner(call);
        case HOOP__ALGO_PS: return hoop__allreduce_ps(call);
        case HOOP__ALGO_PS_SHARDED: return hoop__allreduce_ps_sharded(call);
        case HOOP__ALGO_HIER: return hoop__allreduce_hier(call);
        default: return hoop__allreduce_ring(call);
        }
    case HOOP__K_BROADCAST:
        if (algo == HOOP__ALGO_HIER) return hoop__broadcast_hier(call);
        return hoop__broadcast(call);
    case HOOP__K_REDUCE:
        if (algo == HOOP__ALGO_HIER) return hoop__reduce_hier(call);
        return hoop__reduce_coll(call);
    case HOOP__K_ALLGATHER:
        if (algo == HOOP__ALGO_HIER) return hoop__allgather_hier(call);
        return hoop__allgather_ring(call);
    case HOOP__K_SPLIT: return hoop__allgather_ring(call);
    case HOOP__K_GATHER: return hoop__gather(call);
    case HOOP__K_SCATTER: return hoop__scatter(call);
    case HOOP__K_REDUCE_SCATTER:
        if (algo == HOOP__ALGO_HIER) return hoop__reduce_scatter_hier(call);
        return hoop__reduce_scatter_ring(call);
    case HOOP__K_ALLTOALL: return hoop__alltoall_pairwise(call);
    case HOOP__K_BARRIER: return hoop__barrier_dissemination(call);
    default: return HOOP_ERR_INTERNAL;
    }
}
