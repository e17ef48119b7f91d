/* The communicator's life (lifecycle.c), for the entry points: they have checked the arguments. */
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
