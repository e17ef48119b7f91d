/*
 * A call, run as planned (plan.c). Every call of a communicator that has a shared area takes one
 * step of it first, so that the ranks stay in step and a rank in another call is told at once:
 * the shm engine's own first step where it runs the call, otherwise the agreement step of
 * local/local.h, which for a plan that asks (plan.agree) also makes the area and says what every
 * rank's buffers are. Then the plan's engine runs it; where an engine's agreement finds that the
 * call cannot run there, the planner plans again from the verdict (hoop__plan_again), alike on
 * every rank, and the next engine runs it: the shared area may give way to CUDA IPC, either to
 * the point-to-point schedules, which always run.
 */
#define HOOP__LOG_SUBSYS HOOP__SUB_COLL /* of its INFO and TRACE lines (base/log.h) */
#include "collectives/plan.h"

/* The point-to-point engine: the plan's schedule for the call's kind. */
static hoop_result_t p2p_run(hoop__call_t *call, hoop__verdict_t *v)
{
    hoop__algo_t algo = (hoop__algo_t)call->plan.algo;
    *v = HOOP__VERDICT_RAN;
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

static int p2p_has(hoop__kind_t k)
{
    (void)k;
    return 1;
}

static const hoop__engine_ops_t p2p_engine = {.name = "p2p", .has = p2p_has, .run = p2p_run};

static const hoop__engine_ops_t *const engines[HOOP__ENGINE_COUNT] = {
    [HOOP__ENGINE_P2P] = &p2p_engine,
    [HOOP__ENGINE_SHM] = &hoop__local_shm,
    [HOOP__ENGINE_IPC] = &hoop__local_ipc,
};

static hoop_result_t run_planned(hoop__call_t *call)
{
    hoop__verdict_t v = HOOP__VERDICT_RAN;
    hoop_result_t rc;
    if (call->plan.engine != HOOP__ENGINE_SHM) {
        rc = hoop__local_agree(call, call->plan.agree, &v);
        if (rc != HOOP_OK) return rc;
        if (call->plan.agree) call->plan = hoop__plan_again(call->plan, v);
    }
    if (hoop__plan_heard(call->comm)) hoop__plan_say(call);
    /* Each engine gives way at most once, to one further down the table's order of preference:
     * the loop ends with the point-to-point engine at the latest. */
    for (int tries = 0; tries < HOOP__ENGINE_COUNT; tries++) {
        rc = engines[call->plan.engine]->run(call, &v);
        if (rc != HOOP_OK || v == HOOP__VERDICT_RAN) return rc;
        call->plan = hoop__plan_again(call->plan, v);
        if (hoop__plan_heard(call->comm)) hoop__plan_say(call);
    }
    return HOOP_ERR_INTERNAL;
}

hoop_result_t hoop__collective_run(hoop__call_t *call)
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
                hoop__wire_algo_name(call->algo));
    /* count 0 still exchanges (empty) messages or steps, so a rank that passed another count is
     * told. */
    hoop_result_t st = run_planned(call);
    /* A failed copy or kernel of device memory aborted the communicator with its sentence; a
     * call whose last steps were such operations has no wait after them to notice. */
    if (st == HOOP_OK && call->mem != HOOP__MEM_HOST) st = hoop__mem_failed(c);
    return st;
}

void hoop__collectives_close(hoop_comm_t *c) { hoop__local_close(c); }

void hoop__collectives_abort(hoop_comm_t *c) { hoop__local_abort(c); }

hoop_result_t hoop__collectives_mem_alloc(hoop_comm_t *c, size_t bytes, void **ptr,
                                          hoop__coll_xchg_fn xchg)
{
    return hoop__sym_alloc(c, bytes, ptr, xchg);
}

hoop_result_t hoop__collectives_mem_free(hoop_comm_t *c, void *ptr, hoop__coll_xchg_fn xchg)
{
    return hoop__sym_free(c, ptr, xchg);
}

hoop_result_t hoop__collectives_mem_register(hoop_comm_t *c, int fd, size_t offset, size_t bytes,
                                             void **ptr, hoop__coll_xchg_fn xchg)
{
    return hoop__sym_register(c, fd, offset, bytes, ptr, xchg);
}

void hoop__collectives_memory(const hoop_comm_t *c, uint64_t *area, uint64_t *area_next,
                              uint64_t *sym)
{
    *area = hoop__shc_mapped(c, area_next);
    *sym = hoop__sym_mapped(c);
}
