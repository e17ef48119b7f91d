/*
 * The planner: the one place that decides who runs a call and how. It alone reads HOOP_ALGO
 * (hoop_comm.algo), the size thresholds, the measured exceptions and the engines' abilities; the
 * engines and schedules read the plan (hoop__plan_t, on the call).
 *
 * A plan is made as the call is posted, from what every rank knows alike (the agreed settings,
 * the ring's host layout, the call's kind and size), so every rank makes the same. It names the
 * engine (point-to-point schedules over transfers in src/collectives; the shared area or CUDA IPC
 * in src/local), the point-to-point schedule (which also runs where a one-host engine gives
 * way), the variant by size, whether the hierarchical stages inside a host may go over CUDA IPC,
 * and why. What only the run can know (whether the area exists, every rank's memory type,
 * whether CUDA IPC opens) comes from the agreement step (local/local.h), the same on every rank;
 * where it makes the plan impossible, hoop__plan_again makes the final one. run.c runs it.
 *
 * The choices:
 *
 * - Where every rank published the same host identity (the transports' key: hostname, boot id,
 *   namespaces, HOOP_HOSTID) and HOOP_TRANSPORT is auto or shm, all-reduce, broadcast, reduce,
 *   all-gather, reduce-scatter and barrier go to the shared area (the shm engine). Its first call
 *   maps it; where a rank cannot, every rank learns it alike and the point-to-point schedules run,
 *   for good. HOOP_ALGO=shm forces the area whatever the transport; HOOP_ALGO=p2p is auto without
 *   it. One exception was measured: a 2-rank all-gather of 32 to 256 KiB a rank, one message
 *   each way, is faster point to point on host buffers (docs/performance.md, "Which algorithm,
 *   measured"); the area's agreement step still comes first, since device buffers on every rank
 *   go to CUDA IPC instead. An all-reduce, reduce-scatter, all-gather or broadcast above
 *   HOOP_SMALL_BYTES in the area, on a communicator with symmetric memory (hoop_mem_alloc), is
 *   planned zero-copy (plan.sym): its first step says whether every rank's buffers lie there,
 *   and where not, the same call runs the area's usual way on every rank. Under HOOP_CMA=on, an
 *   all-reduce, reduce-scatter or all-gather above HOOP_SMALL_BYTES in the area is planned
 *   single copy (plan.cma): every rank reads its peers' buffers with process_vm_readv where the
 *   kernel lets every rank (a probe at the first such call decides, for the communicator, alike
 *   on every rank), else the same call runs in rounds. HOOP_CMA=auto plans it nowhere: the
 *   rounds measured faster at every size, 2 and 4 ranks (docs/performance.md, "Single copy").
 *
 * - Point to point: all-reduce by recursive doubling at or below HOOP_SMALL_BYTES (latency-bound:
 *   log2(p) rounds), the ring above (bandwidth-bound: 2(p-1)/p of the data per rank). HOOP_ALGO
 *   forces one, including Rabenseifner's and the parameter servers, which auto never picks:
 *   Rabenseifner's won nowhere it was measured, the parameter servers are there to be compared
 *   with. Broadcast: binomial tree up to HOOP_SMALL_BYTES, pipelined chain above. Reduce:
 *   binomial tree up to HOOP_SMALL_BYTES, and on up to 4 ranks up to 256 x HOOP_SMALL_BYTES (one
 *   hop per level beat Rabenseifner's two phases there; with more ranks the root's log2(p) full
 *   buffers cost more); ring reduce-scatter and gather above. The others have one schedule each.
 *
 * - Hierarchical, where the ranks are several on each of several hosts, as many on each (the
 *   ring's host layout, which every rank computed alike): all-reduce above HOOP_SMALL_BYTES;
 *   all-gather and reduce-scatter at every size (fewer steps as well as fewer bytes across
 *   hosts), unless HOOP_ALGO names one of the flat all-reduce algorithms; reduce where the flat
 *   one would leave its binomial tree (which brings each host's sum to the root's host once, as
 *   few bytes as the hierarchical one there, in fewer hops); broadcast under HOOP_ALGO=hier only
 *   (the flat chain already brings the buffer into each host once). HOOP_ALGO=hier where the
 *   layout does not fit runs the flat ones. Their stages inside a host may go over CUDA IPC
 *   where every rank of that host has device buffers: finding that out takes a round among the
 *   host's ranks, which host calls pay too, so auto tries from 64 x HOOP_SMALL_BYTES of the
 *   call's larger buffer only (docs/cuda.md), HOOP_ALGO=hier or ipc at every size.
 *
 * - CUDA device buffers: the IPC engine where the area's agreement step found device buffers on
 *   every rank (auto), or where HOOP_ALGO=ipc names it (a rank that cannot take part then fails
 *   the call, unless every rank has host buffers: those run as under auto); HOOP_ALGO=ipc where
 *   the hierarchical layout fits is HOOP_ALGO=hier, broadcast included. Otherwise device buffers
 *   are staged through host memory by whichever schedule runs.
 */
#define HOOP__LOG_SUBSYS HOOP__SUB_COLL /* of its INFO lines (base/log.h) */
#include <stdio.h>
#include <string.h>

#include "collectives/plan.h"

_Static_assert(HOOP__ALGO_COUNT == HOOP__WIRE_ALGO_COUNT, "an algorithm the wire cannot name");
_Static_assert(HOOP__WHY_COUNT <= 256 && HOOP__ALGO_COUNT <= 256, "a plan's fields are bytes");

/* Reduce's binomial tree on up to TREE_RANKS ranks: up to TREE_FACTOR x HOOP_SMALL_BYTES. */
#define TREE_RANKS 4
#define TREE_FACTOR 256
/* The 2-rank all-gather that point to point runs faster, bytes a rank. */
#define RING_LO ((size_t)32 << 10)
#define RING_HI ((size_t)256 << 10)
/* Auto tries the hierarchical stages over CUDA IPC from this multiple of HOOP_SMALL_BYTES. */
#define IPC_STAGES_FACTOR 64

static int small_variant(const hoop__plan_in_t *in)
{
    if (in->kind == HOOP__K_REDUCE)
        return (in->ranks <= TREE_RANKS ? in->bytes / TREE_FACTOR : in->bytes) <= in->small_bytes;
    return in->bytes <= in->small_bytes;
}

/* The point-to-point schedule; forced is HOOP_ALGO, with shm and p2p read as auto. */
static hoop__algo_t p2p_choose(const hoop__plan_in_t *in, int forced, int small,
                               hoop__plan_why_t *why)
{
    int hier = in->hosts >= 2 && in->per_host >= 2;
    if (forced == HOOP__ALGO_IPC && hoop__local_ipc.has(in->kind)) {
        *why = HOOP__WHY_FORCED;
        if (!hier) return HOOP__ALGO_IPC; /* which fails, saying why, where ranks span hosts */
        forced = HOOP__ALGO_HIER;         /* several hosts: IPC inside each, at every size */
    }
    hoop__plan_why_t by_size = small ? HOOP__WHY_SMALL : HOOP__WHY_LARGE;
    hoop__plan_why_t hier_why = forced == HOOP__ALGO_HIER ? HOOP__WHY_FORCED : HOOP__WHY_HOSTS;
    switch (in->kind) {
    case HOOP__K_BROADCAST:
        *why = hier && forced == HOOP__ALGO_HIER ? HOOP__WHY_FORCED : by_size;
        return hier && forced == HOOP__ALGO_HIER ? HOOP__ALGO_HIER : HOOP__ALGO_AUTO;
    case HOOP__K_ALLGATHER:
    case HOOP__K_REDUCE_SCATTER:
        if (hier && (forced == HOOP__ALGO_AUTO || forced == HOOP__ALGO_HIER)) {
            *why = hier_why;
            return HOOP__ALGO_HIER;
        }
        *why = HOOP__WHY_ONLY;
        return HOOP__ALGO_AUTO;
    case HOOP__K_REDUCE:
        if (hier && (forced == HOOP__ALGO_HIER || (forced == HOOP__ALGO_AUTO && !small))) {
            *why = hier_why;
            return HOOP__ALGO_HIER;
        }
        *why = by_size;
        return HOOP__ALGO_AUTO;
    case HOOP__K_ALLREDUCE: break;
    default: *why = HOOP__WHY_ONLY; return HOOP__ALGO_AUTO;
    }
    if (forced == HOOP__ALGO_HIER) {
        *why = hier ? HOOP__WHY_FORCED : HOOP__WHY_UNFIT;
        return hier ? HOOP__ALGO_HIER : HOOP__ALGO_RING;
    }
    if (forced != HOOP__ALGO_AUTO) {
        *why = HOOP__WHY_FORCED;
        return (hoop__algo_t)forced;
    }
    if (small) {
        *why = HOOP__WHY_SMALL;
        return HOOP__ALGO_RD;
    }
    *why = hier ? HOOP__WHY_HOSTS : HOOP__WHY_LARGE;
    return hier ? HOOP__ALGO_HIER : HOOP__ALGO_RING;
}

hoop__plan_t hoop__plan_make(const hoop__plan_in_t *in, hoop__algo_t *wire)
{
    hoop__plan_t p = {.forced = (uint8_t)in->forced, .small = (uint8_t)small_variant(in)};
    int forced = in->forced == HOOP__ALGO_SHM || in->forced == HOOP__ALGO_P2P ? HOOP__ALGO_AUTO
                                                                              : in->forced;
    hoop__plan_why_t why;
    hoop__algo_t algo = p2p_choose(in, forced, p.small, &why);
    int area = in->forced == HOOP__ALGO_SHM || (in->forced == HOOP__ALGO_AUTO && in->one_host);
    if (area && hoop__local_shm.has(in->kind)) {
        /* algo is auto's here: what runs where the area gives way */
        *wire = HOOP__ALGO_SHM;
        p.engine = HOOP__ENGINE_SHM;
        p.algo = (uint8_t)algo;
        p.why = in->forced == HOOP__ALGO_SHM ? HOOP__WHY_FORCED : HOOP__WHY_ONE_HOST;
        if (in->kind == HOOP__K_ALLGATHER && in->ranks == 2 && in->bytes >= RING_LO &&
            in->bytes <= RING_HI && in->forced != HOOP__ALGO_SHM) {
            p.engine = HOOP__ENGINE_P2P;
            p.agree = 1;
            p.why = HOOP__WHY_MEASURED;
        }
        /* Symmetric memory: the area's all-reduce, reduce-scatter, all-gather and broadcast
         * above HOOP_SMALL_BYTES may read and write every rank's buffers where they lie; only
         * their first step can tell whether every rank's do, and says it to every rank alike
         * (ordinary buffers anywhere: the area's usual schedule). */
        p.sym = (uint8_t)(in->sym && p.engine == HOOP__ENGINE_SHM && !p.small &&
                          (in->kind == HOOP__K_ALLREDUCE || in->kind == HOOP__K_REDUCE_SCATTER ||
                           in->kind == HOOP__K_ALLGATHER || in->kind == HOOP__K_BROADCAST));
        /* Single copy: only the run can tell whether the kernel lets every rank read its peers
         * (local/shm_coll.c); where not, the rounds on every rank alike. */
        /* Under HOOP_CMA=on only: auto keeps the rounds, which measured faster at every size,
         * 2 and 4 ranks (docs/performance.md, "Single copy"). */
        p.cma = (uint8_t)(in->cma == 2 && p.engine == HOOP__ENGINE_SHM && !p.small &&
                          (in->kind == HOOP__K_ALLREDUCE || in->kind == HOOP__K_REDUCE_SCATTER ||
                           in->kind == HOOP__K_ALLGATHER));
    } else if (algo == HOOP__ALGO_IPC) {
        *wire = HOOP__ALGO_IPC;
        p.engine = HOOP__ENGINE_IPC;
        p.why = HOOP__WHY_FORCED;
        /* every rank's buffers in host memory: as under auto */
        p.algo = (uint8_t)p2p_choose(in, HOOP__ALGO_AUTO, p.small, &why);
    } else {
        *wire = algo;
        p.algo = (uint8_t)algo;
        p.why = (uint8_t)why;
    }
    size_t larger = in->kind == HOOP__K_ALLGATHER || in->kind == HOOP__K_REDUCE_SCATTER
                        ? in->bytes * (size_t)in->ranks
                        : in->bytes;
    p.ipc_stages = p.algo == HOOP__ALGO_HIER &&
                   (in->forced == HOOP__ALGO_HIER || in->forced == HOOP__ALGO_IPC ||
                    larger >= IPC_STAGES_FACTOR * in->small_bytes);
    return p;
}

void hoop__plan(hoop__call_t *call)
{
    const hoop_comm_t *c = call->comm;
    hoop__plan_in_t in = {.kind = call->kind,
                          .bytes = call->count * hoop__dsize(call),
                          .ranks = c->size,
                          .hosts = c->nhosts,
                          .per_host = c->local_size,
                          .one_host = c->shm_auto,
                          .forced = c->algo,
                          .small_bytes = c->agreed.small_bytes,
                          .sym = hoop__sym_live(c),
                          .cma = !strcmp(c->agreed.cma, "off")  ? 0
                                 : !strcmp(c->agreed.cma, "on") ? 2
                                                                : 1};
    call->plan = hoop__plan_make(&in, &call->algo);
}

hoop__plan_t hoop__plan_again(hoop__plan_t p, hoop__verdict_t v)
{
    p.agree = 0;
    if (v == HOOP__VERDICT_RAN || v >= HOOP__VERDICT_COUNT) return p;
    /* Device buffers on every rank, each of which may take CUDA IPC (local/shm_area.c). */
    p.engine = v == HOOP__VERDICT_DEVICE ? HOOP__ENGINE_IPC : HOOP__ENGINE_P2P;
    /* Host buffers confirm the measured exception; anything else is its own reason. */
    if (!(v == HOOP__VERDICT_HOST && p.why == HOOP__WHY_MEASURED))
        p.why = (uint8_t)(HOOP__WHY_VERDICT + v);
    return p;
}

/* ---- saying it ---- */

static const char *bytes_text(size_t b, char *buf, size_t n)
{
    if (b >= (1u << 20) && b % (1u << 20) == 0)
        snprintf(buf, n, "%zu MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0)
        snprintf(buf, n, "%zu KiB", b >> 10);
    else
        snprintf(buf, n, "%zu B", b);
    return buf;
}

/* The schedule a point-to-point plan runs: its algorithm, or the collective's own. */
static const char *schedule(const hoop__call_t *call);

const char *hoop__plan_schedule(const hoop__call_t *call)
{
    switch (call->plan.engine) {
    case HOOP__ENGINE_SHM: return call->plan.cma ? "cma" : "shm";
    case HOOP__ENGINE_IPC: return "ipc";
    default: return call->kind == HOOP__K_SEND ? "p2p" : schedule(call);
    }
}

static const char *schedule(const hoop__call_t *call)
{
    const hoop__plan_t *p = &call->plan;
    if (p->algo != HOOP__ALGO_AUTO) return hoop__wire_algo_name(p->algo);
    switch (call->kind) {
    case HOOP__K_BROADCAST: return p->small ? "binomial tree" : "pipelined chain";
    case HOOP__K_REDUCE: return p->small ? "binomial tree" : "ring reduce-scatter and gather";
    case HOOP__K_ALLGATHER:
    case HOOP__K_SPLIT:
    case HOOP__K_REDUCE_SCATTER: return "ring";
    case HOOP__K_ALLTOALL: return "pairwise";
    case HOOP__K_BARRIER: return "dissemination";
    default: return "direct";
    }
}

const char *hoop__plan_describe(const hoop__call_t *call, int sized, char *buf, size_t n)
{
    static const char *const engine[HOOP__ENGINE_COUNT] = {"p2p", "shm area", "CUDA IPC"};
    const hoop__plan_t *p = &call->plan;
    const hoop_comm_t *c = call->comm;
    char b[32] = "the call", s[32], why[160];
    if (sized) bytes_text(call->count * hoop__dsize(call), b, sizeof b);
    bytes_text(c->agreed.small_bytes, s, sizeof s);
    switch (p->why) {
    case HOOP__WHY_OWN: snprintf(why, sizeof why, "the communicator's own exchange"); break;
    case HOOP__WHY_FORCED:
        snprintf(why, sizeof why, "HOOP_ALGO=%s", hoop__wire_algo_name(p->forced));
        break;
    case HOOP__WHY_UNFIT:
        snprintf(why, sizeof why, "HOOP_ALGO=hier, but not several ranks on each of several hosts");
        break;
    case HOOP__WHY_ONE_HOST: snprintf(why, sizeof why, "every rank on one host"); break;
    case HOOP__WHY_MEASURED:
        snprintf(why, sizeof why,
                 "a 2-rank all-gather of 32 to 256 KiB a rank measured faster point to point");
        break;
    case HOOP__WHY_SMALL:
    case HOOP__WHY_LARGE:
        if (call->kind == HOOP__K_REDUCE && c->size <= TREE_RANKS)
            snprintf(why, sizeof why, "%s %s %d x HOOP_SMALL_BYTES (%s) on %d ranks", b,
                     p->why == HOOP__WHY_SMALL ? "<=" : ">", TREE_FACTOR, s, c->size);
        else
            snprintf(why, sizeof why, "%s %s HOOP_SMALL_BYTES (%s)", b,
                     p->why == HOOP__WHY_SMALL ? "<=" : ">", s);
        break;
    case HOOP__WHY_HOSTS:
        snprintf(why, sizeof why, "%d hosts of %d ranks", c->nhosts, c->local_size);
        break;
    case HOOP__WHY_ONLY: snprintf(why, sizeof why, "its one schedule"); break;
    default:
        snprintf(why, sizeof why, "%s",
                 hoop__verdict_text((hoop__verdict_t)(p->why - HOOP__WHY_VERDICT)));
        break;
    }
    char extra[256] = "";
    if (p->engine == HOOP__ENGINE_SHM && call->kind != HOOP__K_ALLREDUCE && (p->sym || p->cma))
        snprintf(extra, sizeof extra, "; %s%s%s",
                 p->sym ? "zero copy where every rank's buffers are symmetric" : "",
                 p->sym && p->cma ? ", else " : "",
                 p->cma ? "single copy (process_vm_readv) where the kernel allows it" : "");
    else if (p->engine == HOOP__ENGINE_SHM && call->kind == HOOP__K_ALLREDUCE)
        snprintf(extra, sizeof extra, "; %s %s HOOP_SMALL_BYTES (%s): %s", b, p->small ? "<=" : ">",
                 s,
                 p->small ? "one step"
                 : p->sym && p->cma
                     ? "zero copy where every rank's buffers are symmetric, else single copy "
                       "(process_vm_readv) where the kernel allows it, else in rounds"
                 : p->sym ? "zero copy where every rank's buffers are symmetric, else in rounds"
                 : p->cma ? "single copy (process_vm_readv) where the kernel allows it, else in "
                            "rounds"
                          : "in rounds");
    else if (p->engine == HOOP__ENGINE_P2P && p->ipc_stages)
        snprintf(extra, sizeof extra, "; the stages inside a host may go over CUDA IPC");
    if (p->engine == HOOP__ENGINE_P2P)
        snprintf(buf, n, "p2p %s (%s%s)", schedule(call), why, extra);
    else
        snprintf(buf, n, "%s (%s%s)", engine[p->engine < HOOP__ENGINE_COUNT ? p->engine : 0], why,
                 extra);
    return buf;
}

void hoop__plan_say(const hoop__call_t *call)
{
    hoop_comm_t *c = call->comm;
    int info = c->log.level >= HOOP__LOG_INFO && (c->log.subsys & HOOP__SUB_COLL) != 0;
    if (!hoop__plan_heard(c)) return;
    char what[448];
    if (c->trace_fn != NULL)
        HOOP__TRACE_STEP(call, -1, "plan: %s", hoop__plan_describe(call, 1, what, sizeof what));
    if (!info || (unsigned)call->kind >= HOOP__K_COUNT) return;
    hoop__plan_describe(call, 0, what, sizeof what);
    /* The plans INFO said of this kind, the last few, by their sentence: a program that
     * alternates between small and large calls is told each once. */
    uint32_t key = 2166136261u; /* FNV-1a */
    for (const char *q = what; *q != '\0'; q++) key = (key ^ (uint8_t)*q) * 16777619u;
    key |= 1u; /* never 0, which marks an empty place */
    uint32_t *said = c->plan_said[call->kind];
    for (int i = 0; i < HOOP__PLANS_SAID; i++)
        if (said[i] == key) return;
    memmove(said + 1, said, (HOOP__PLANS_SAID - 1) * sizeof *said);
    said[0] = key;
    HOOP__INFO(&c->log, "%s: %s", hoop__kind_name(call->kind), what);
}
