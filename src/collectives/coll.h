/* The collectives: the planner (plan.c), the run of a call as planned (run.c), and one file per
 * point-to-point schedule. The schedules see the call, their peers and the runtime
 * (runtime/runtime.h: transfers, memory, scratch, tracing), never sockets; the one-host engines are
 * the floor below (local/local.h). */
#ifndef HOOP_COLL_H
#define HOOP_COLL_H

#include <stddef.h>

#include "runtime/runtime.h"

/* Plans call as it is posted (plan.c): call->plan, and call->algo, the name its messages carry.
 * From what every rank knows alike, so that every rank plans alike. */
void hoop__plan(hoop__call_t *call);
/* Runs call as planned (run.c): the agreement step, the engine, the schedule. */
hoop_result_t hoop__collective_run(hoop__call_t *call);
/* Frees what the engines keep with the communicator (run.c). */
void hoop__collectives_close(hoop_comm_t *c);
/* After the communicator aborted: the engines tell the peers that wait on them why (run.c). Under
 * exec. */
void hoop__collectives_abort(hoop_comm_t *c);
/* Symmetric memory, for hoop_mem_alloc and hoop_mem_free (local/sym.c, through run.c). xchg is
 * an all-gather of one record of bytes per rank, posted as a call; fn names the entry point. */
typedef hoop_result_t (*hoop__coll_xchg_fn)(hoop_comm_t *c, const void *mine, void *all,
                                            size_t bytes, const char *fn);
hoop_result_t hoop__collectives_mem_alloc(hoop_comm_t *c, size_t bytes, void **ptr,
                                          hoop__coll_xchg_fn xchg);
hoop_result_t hoop__collectives_mem_free(hoop_comm_t *c, void *ptr, hoop__coll_xchg_fn xchg);
hoop_result_t hoop__collectives_mem_register(hoop_comm_t *c, int fd, size_t offset, size_t bytes,
                                             void **ptr, hoop__coll_xchg_fn xchg);
/* Bytes the engines map (hoop_comm_memory): the area (*area_next: once made) and symmetric
 * memory. Under exec. */
void hoop__collectives_memory(const hoop_comm_t *c, uint64_t *area, uint64_t *area_next,
                              uint64_t *sym);

/* Algorithms: one file each. */
hoop_result_t hoop__allreduce_ring(hoop__call_t *c);
hoop_result_t hoop__allreduce_rd(hoop__call_t *c);
hoop_result_t hoop__allreduce_rabenseifner(hoop__call_t *c);
/* Where recursive doubling and Rabenseifner's start (allreduce_rd.c): the input copied into the
 * output unless in place, *tmp scratch for one whole buffer (NULL on one rank: nothing left to
 * do), *q the largest power of two not above the size. */
hoop_result_t hoop__allreduce_pow2_start(hoop__call_t *c, uint8_t **tmp, int *q);
hoop_result_t hoop__allreduce_ps(hoop__call_t *c);
hoop_result_t hoop__allreduce_ps_sharded(hoop__call_t *c);
/* Hierarchical (hier.c): where the plan says (several ranks on each of several hosts, as many on
 * each). */
hoop_result_t hoop__allreduce_hier(hoop__call_t *c);
hoop_result_t hoop__allgather_hier(hoop__call_t *c);
hoop_result_t hoop__reduce_scatter_hier(hoop__call_t *c);
hoop_result_t hoop__reduce_hier(hoop__call_t *c);
hoop_result_t hoop__broadcast_hier(hoop__call_t *c); /* HOOP_ALGO=hier or ipc only */
hoop_result_t hoop__broadcast(hoop__call_t *c); /* binomial tree small, pipelined chain large */
/* The pipelined chain's link on this rank, over any chain of ranks: n bytes of buf from left
 * (none: < 0), passed on to right (none: < 0). */
hoop_result_t hoop__broadcast_chain(const hoop__call_t *c, void *buf, size_t n, int left,
                                    int right);
/* binomial tree where the plan says small, ring reduce-scatter + gather otherwise */
hoop_result_t hoop__reduce_coll(hoop__call_t *c);
hoop_result_t hoop__allgather_ring(hoop__call_t *c);
hoop_result_t hoop__gather(hoop__call_t *c);
hoop_result_t hoop__scatter(hoop__call_t *c);
hoop_result_t hoop__reduce_scatter_ring(hoop__call_t *c);
/* The ring reduce-scatter core, shared with reduce (reduce_scatter.c). Scratch bytes (never 0) that
 * hoop__rs_ring needs for these buffers; out == NULL stands for an output that does not overlap in. */
size_t hoop__rs_ring_scratch(const hoop__call_t *c, const void *in, size_t total, const void *out);
/* Ring reduce-scatter of total elements at in: block r's result (AVG finished) goes to out.
 * scratch: at least hoop__rs_ring_scratch() bytes, aligned as malloc aligns. Needs p >= 2. */
hoop_result_t hoop__rs_ring(const hoop__call_t *c, const void *in, size_t total, void *out,
                            void *scratch);
hoop_result_t hoop__alltoall_pairwise(hoop__call_t *c);
hoop_result_t hoop__barrier_dissemination(hoop__call_t *c);

#endif
