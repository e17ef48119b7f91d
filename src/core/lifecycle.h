/* The communicator's life (lifecycle.c; split.c), for the entry points: they have checked the
 * arguments. */
#ifndef HOOP_LIFECYCLE_H
#define HOOP_LIFECYCLE_H

#include "rendezvous/store.h"
#include "runtime/comm.h"

/* hoop_init: *out is the communicator, or NULL with the reason logged. */
hoop_result_t hoop__comm_init(hoop_comm_t **out, const char *method, int rank, int size);
/* hoop_comm_split on a healthy communicator, *newcomm already NULL, color valid. */
hoop_result_t hoop__comm_split(hoop_comm_t *c, int color, int key, hoop_comm_t **newcomm);
void hoop__comm_abort(hoop_comm_t *c);
void hoop__comm_destroy(hoop_comm_t *c);
/* hoop_comm_memory: what c holds, counted by each part that holds it. */
void hoop__comm_memory(hoop_comm_t *c, hoop_memory_t *m);

/* What init and split share (lifecycle.c). */
#define HOOP__ADDR_LEN 320 /* a transport's published address, NUL included */
/* A communicator of size ranks with the settings cfg (copied), before its transport; NULL (the
 * reason logged) without memory or for a size out of range. */
hoop_comm_t *hoop__comm_alloc(const hoop__config_t *cfg, int rank, int size);
void hoop__comm_free(hoop_comm_t *c);
/* Opens c's transport, listening; its address into addr (HOOP__ADDR_LEN). oob: the out-of-band
 * exchange for the transport, or NULL where there is none. */
hoop_result_t hoop__comm_listen(hoop_comm_t *c, char *addr, const hoop__tp_oob_t *oob);
/* The value of part name ("name=VALUE", parts separated by spaces) of a published address into
 * out; -1 where it has none or it does not fit n bytes. */
int hoop__addr_part(const char *addr, const char *name, char *out, size_t n);
/* An all-gather of fixed-size host records over c, for the library's own bookkeeping (split.c). */
hoop_result_t hoop__comm_exchange(hoop_comm_t *c, hoop__kind_t kind, const void *mine, void *all,
                                  size_t bytes, const char *fn);
/* Orders the ring host by host from the addresses every rank published (ptrs[rank] NULL: own). */
hoop_result_t hoop__comm_set_ring(hoop_comm_t *c, const char *const *ptrs, const char *own);

/* The out-of-band exchange init offers the transports (hoop__tp_oob_t in transport.h), over the
 * open store st, for rank of size; *ctx holds its state and must outlive every use of *oob.
 * Exposed for its tests. */
typedef struct hoop__oob_ctx {
    hoop__store_t *st;
    int rank, size;
    char err[320];
} hoop__oob_ctx_t;
void hoop__oob_over_store(hoop__oob_ctx_t *ctx, hoop__store_t *st, int rank, int size,
                          hoop__tp_oob_t *oob);

#endif
