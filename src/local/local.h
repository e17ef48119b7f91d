/*
 * The one-host engines: collectives that run through memory the ranks of one host share, rather
 * than as messages. The shared area (shm_area.c, its steps; shm_coll.c, its collectives) and CUDA
 * IPC (ipc.c, the peers' device memory). Symmetric memory (sym.c: buffers every rank maps) is not
 * an engine of its own: the area's all-reduce reads and writes it in place where every rank's
 * buffers lie there (shm_coll.c), after the same first step. Another engine is one more table
 * below, one more hoop__engine_t and one more row in the planner's engine list.
 *
 * The planner (collectives/plan.c) asks an engine whether it has a call's kind and runs the call
 * through it. An engine's first step is the agreement: it says what only the run can know (whether
 * the area exists, every rank's memory type, whether CUDA IPC opened), alike on every rank, before
 * anything of the call's output is written. Where that makes the plan impossible, the engine
 * returns HOOP_OK with the verdict, and the planner plans again from it. What an engine keeps per
 * communicator is its own, behind hoop_comm.local.
 */
#ifndef HOOP_LOCAL_H
#define HOOP_LOCAL_H

#include <stdlib.h>

#include "runtime/runtime.h"

/* What an agreement step found, the same on every rank. */
typedef enum {
    HOOP__VERDICT_RAN = 0, /* nothing stood in the way: the engine ran the call */
    HOOP__VERDICT_HOST,    /* every rank's buffers are host memory */
    HOOP__VERDICT_DEVICE,  /* every rank's are device memory that may go over CUDA IPC */
    HOOP__VERDICT_MIXED,   /* some rank's buffers can take neither way: each rank stages its own */
    HOOP__VERDICT_NO_AREA, /* there is no area: one rank, or some rank could not map it */
    HOOP__VERDICT_NO_IPC,  /* CUDA IPC cannot run the call: an area not made, not opened, or too
                            * small on some rank (ipc.c: under auto, from then on) */
    HOOP__VERDICT_COUNT
} hoop__verdict_t;

/* "every rank's buffers are host memory", ...: for the plan's reason. */
const char *hoop__verdict_text(hoop__verdict_t v);

typedef struct hoop__engine_ops {
    const char *name;
    /* Whether it has a schedule for this kind of call: from the kind alone, so that every rank
     * answers alike. */
    int (*has)(hoop__kind_t kind);
    /* Runs call. Where its agreement finds that the call cannot run here on every rank, it
     * returns HOOP_OK with *v saying why and none of the call's output written; otherwise *v is
     * HOOP__VERDICT_RAN. An error has aborted the communicator. */
    hoop_result_t (*run)(hoop__call_t *call, hoop__verdict_t *v);
} hoop__engine_ops_t;

extern const hoop__engine_ops_t hoop__local_shm; /* shm_coll.c */
extern const hoop__engine_ops_t hoop__local_ipc; /* ipc.c */

/* The agreement step of a call that no engine here runs: one step of the area, which keeps every
 * call of a communicator that has one in step (a rank in another call is told) and says what
 * every rank's buffers are. make: make the area if there is none yet (a collective exchange: every
 * rank asks at the same call). *v: HOST, DEVICE or MIXED after a step; NO_AREA without one. */
hoop_result_t hoop__local_agree(hoop__call_t *call, int make, hoop__verdict_t *v);

/* The engines' state, per communicator (hoop_comm.local): each engine's own, behind a pointer
 * of its own type. */
struct hoop__local {
    struct hoop__shc *shc;      /* the area (shm_area.c); NULL before the first call wants it */
    struct hoop__ipc_comm *ipc; /* CUDA IPC's (ipc.c); NULL before its first call */
    struct hoop__sym *sym;      /* symmetric memory (sym.c); NULL before the first allocation */
};
/* hoop_comm.local, made at its first use; NULL without memory (the caller says so). Inline: the
 * area's every step begins with it. */
static inline struct hoop__local *hoop__local_of(hoop_comm_t *c)
{
    if (c->local == NULL) c->local = calloc(1, sizeof(*c->local));
    return c->local;
}
/* Frees every engine's state with the communicator. */
void hoop__local_close(hoop_comm_t *c);
/* After the communicator aborted: where the area is in use, it says there that the
 * communicator is aborted and why (its sentence), once, so that peers waiting in a step learn
 * the reason. Under exec. */
void hoop__local_abort(hoop_comm_t *c);

/* ---- between the engines ---- */

/* Whether this rank's call may take CUDA IPC (ipc.c): device buffers, elements to move, a kind it
 * has, and CUDA IPC not found unusable under auto. What the area's steps publish as
 * HOOP__SHC_DEVICE. */
int hoop__ipc_may(const hoop__call_t *c);
/* Frees each engine's part of hoop_comm.local (hoop__local_close calls them). */
void hoop__shc_close(hoop_comm_t *c);
void hoop__ipc_close(hoop_comm_t *c);
void hoop__sym_close(hoop_comm_t *c);

/* ---- symmetric memory (sym.c) ---- */

/* An all-gather of one record of bytes per rank over c, posted as a call of its own (the core's:
 * core/sym.c); fn names the entry point in its errors. */
typedef hoop_result_t (*hoop__xchg_fn)(hoop_comm_t *c, const void *mine, void *all, size_t bytes,
                                       const char *fn);
/* hoop_mem_alloc and hoop_mem_free past their argument checks (hoop.h says what they do). An
 * error other than a disagreement (which leaves c usable) has aborted c. */
hoop_result_t hoop__sym_alloc(hoop_comm_t *c, size_t bytes, void **ptr, hoop__xchg_fn exchange);
hoop_result_t hoop__sym_free(hoop_comm_t *c, void *ptr, hoop__xchg_fn exchange);
hoop_result_t hoop__sym_register(hoop_comm_t *c, int fd, size_t offset, size_t bytes, void **ptr,
                                 hoop__xchg_fn exchange);

/* Whether c has a live allocation of hoop_mem_alloc: the same on every rank, since allocating
 * and freeing are collective. The planner's (a call may take the zero-copy schedule). */
int hoop__sym_live(const hoop_comm_t *c);
/* Bytes of symmetric memory mapped (every allocation's p slices). Under exec. */
uint64_t hoop__sym_mapped(const hoop_comm_t *c);
/* Bytes the area maps (0 before it is made); *next: what it maps once made (0: none will be). */
uint64_t hoop__shc_mapped(const hoop_comm_t *c, uint64_t *next);
/* Whether [ptr, ptr + bytes) lies in this rank's slice of a live allocation: then 1, with the
 * allocation's number (the same on every rank) and the offset in the slice. */
int hoop__sym_find(const hoop_comm_t *c, const void *ptr, size_t bytes, uint32_t *id,
                   uint64_t *off);
/* Where this rank sees bytes at offset off of rank q's slice of allocation id; NULL where there
 * is no such allocation or they do not fit in it. */
uint8_t *hoop__sym_peer(const hoop_comm_t *c, uint32_t id, uint64_t off, size_t bytes, int q);
/* hoop__local_abort's part in the area (shm_area.c). */
void hoop__shc_abort(hoop_comm_t *c);

/* ---- engine services for the point-to-point schedules ---- */

/* The hierarchical collectives' stages inside one host over CUDA IPC (ipc.c): open makes a
 * session for the host's ranks local[0..L-1] (this rank is local[l]) after a round among them
 * that says what each has; *out is NULL where some rank of the host cannot take part (every rank
 * of the host alike; host buffers: this call only), and the host's ring stages run instead. A
 * session's first stage may also decline, at its first round, before it wrote anything: then it
 * returns HOOP_OK and hoop__ipc_hier_declined says so. Each stage works on n elements in hier.c's
 * L segments (local index l owns segment l+1) and is done on the device when it returns. close
 * ends the session whatever happened, and may turn *rc into the error that ending met. */
typedef struct hoop__ipc_hier hoop__ipc_hier_t;
hoop_result_t hoop__ipc_hier_open(const hoop__call_t *call, const int *local, int L, int l,
                                  hoop__ipc_hier_t **out);
int hoop__ipc_hier_declined(const hoop__ipc_hier_t *hx);
hoop_result_t hoop__ipc_hier_reduce_scatter(hoop__ipc_hier_t *hx, const void *in, void *out,
                                            size_t n);
hoop_result_t hoop__ipc_hier_allgather(hoop__ipc_hier_t *hx, void *buf, size_t n);
/* n bytes of buf from local index root to the host's other ranks */
hoop_result_t hoop__ipc_hier_broadcast(hoop__ipc_hier_t *hx, void *buf, size_t n, int root);
void hoop__ipc_hier_close(hoop__ipc_hier_t *hx, hoop_result_t *rc);

#endif
