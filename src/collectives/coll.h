/* The algorithms: choice and dispatch (select.c), one file per schedule. They see the call, their
 * peers and the runtime (runtime/runtime.h: transfers, memory, scratch, tracing). Never sockets. */
#ifndef HOOP_COLL_H
#define HOOP_COLL_H

#include <stddef.h>

#include "runtime/runtime.h"

/* Picks and runs the algorithm of call (select.c). */
hoop_result_t hoop__collective_run(hoop__call_t *call);
/* The algorithm that will run call (resolves HOOP__ALGO_AUTO by size and rank count). */
hoop__algo_t hoop__algo_choose(const hoop__call_t *call);
const char *hoop__algo_name(int algo);
int hoop__algo_parse(const char *s); /* -1 if unknown */

/* Unmaps the shared-memory collectives' area (shm_area.c) when the communicator is freed. */
void hoop__shc_close(hoop_comm_t *c);
/* Where the area is in use, says in it that the communicator is aborted and why (its sentence),
 * once, so that peers waiting in a step learn the reason (shm_area.c). Under exec. */
void hoop__shc_abort(hoop_comm_t *c);

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
/* Hierarchical (hier.c): where hoop__hier_fits, several ranks on each of several hosts, as many on
 * each. */
int hoop__hier_fits(const hoop_comm_t *c);
hoop_result_t hoop__allreduce_hier(hoop__call_t *c);
hoop_result_t hoop__allgather_hier(hoop__call_t *c);
hoop_result_t hoop__reduce_scatter_hier(hoop__call_t *c);
hoop_result_t hoop__reduce_hier(hoop__call_t *c);
hoop_result_t hoop__broadcast_hier(hoop__call_t *c); /* HOOP_ALGO=hier or ipc only */
/* CUDA device buffers on one node through peers' memory (ipc.c): all-reduce, reduce, broadcast,
 * all-gather and reduce-scatter (hoop__ipc_has). automatic: a rank that cannot take part makes
 * every rank return HOOP__SHC_FALLBACK (and stop trying) instead of failing the call.
 * hoop__ipc_may: whether this rank's call may try it under auto. */
int hoop__ipc_has(hoop__kind_t k);
int hoop__ipc_may(const hoop__call_t *c);
hoop_result_t hoop__ipc_run(hoop__call_t *c, int automatic);
void hoop__ipc_close(hoop_comm_t *c); /* when the communicator is freed */
/* The hierarchical collectives' stages inside one host over CUDA IPC (ipc.c): open makes a
 * session for the host's ranks local[0..L-1] (this rank is local[l]), or says
 * HOOP__SHC_FALLBACK where some rank of the host cannot take part (every rank of the host alike;
 * host buffers: this call only), and the host's ring stages run instead. A session's first
 * stage may also fall back, at its first round, before it wrote anything. Each stage works on n
 * elements in hier.c's L segments (local index l owns segment l+1) and is done on the device
 * when it returns. close ends the session whatever happened, and may turn *rc into the error
 * that ending met. */
typedef struct hoop__ipc_hier hoop__ipc_hier_t;
hoop_result_t hoop__ipc_hier_open(const hoop__call_t *call, const int *local, int L, int l,
                                  hoop__ipc_hier_t **out);
hoop_result_t hoop__ipc_hier_reduce_scatter(hoop__ipc_hier_t *hx, const void *in, void *out,
                                            size_t n);
hoop_result_t hoop__ipc_hier_allgather(hoop__ipc_hier_t *hx, void *buf, size_t n);
/* n bytes of buf from local index root to the host's other ranks */
hoop_result_t hoop__ipc_hier_broadcast(hoop__ipc_hier_t *hx, void *buf, size_t n, int root);
void hoop__ipc_hier_close(hoop__ipc_hier_t *hx, hoop_result_t *rc);
hoop_result_t hoop__broadcast(hoop__call_t *c); /* binomial tree small, pipelined chain large */
/* The pipelined chain's link on this rank, over any chain of ranks: n bytes of buf from left
 * (none: < 0), passed on to right (none: < 0). */
hoop_result_t hoop__broadcast_chain(const hoop__call_t *c, void *buf, size_t n, int left,
                                    int right);
hoop_result_t hoop__reduce_coll(
    hoop__call_t *c); /* binomial tree small, ring reduce-scatter + gather large */
/* Whether hoop__reduce_coll runs its binomial tree for n bytes (reduce.c). */
int hoop__reduce_tree_fits(const hoop_comm_t *comm, size_t n);
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
/* Through the shared area (shm_coll.c), for ranks of one host; HOOP__SHC_FALLBACK (shm_coll.h)
 * where the area cannot be had or some rank's buffers are not host memory: the caller then runs
 * the point-to-point algorithm. hoop__shm_enter: the step that keeps the point-to-point calls of
 * a communicator with an area in step with the others (a no-op without one). */
hoop_result_t hoop__shm_allreduce(hoop__call_t *c);
hoop_result_t hoop__shm_broadcast(hoop__call_t *c);
hoop_result_t hoop__shm_reduce(hoop__call_t *c);
hoop_result_t hoop__shm_allgather(hoop__call_t *c);
hoop_result_t hoop__shm_reduce_scatter(hoop__call_t *c);
hoop_result_t hoop__shm_barrier(hoop__call_t *c);
hoop_result_t hoop__shm_enter(hoop__call_t *c);

#endif
