/* The communicator's life (lifecycle.c), for the entry points: they have checked the arguments. */
#ifndef HOOP_LIFECYCLE_H
#define HOOP_LIFECYCLE_H

#include "runtime/comm.h"

/* hoop_init: *out is the communicator, or NULL with the reason logged. */
hoop_result_t hoop__comm_init(hoop_comm_t **out, const char *method, int rank, int size);
/* hoop_comm_split on a healthy communicator, *newcomm already NULL, color valid. */
hoop_result_t hoop__comm_split(hoop_comm_t *c, int color, int key, hoop_comm_t **newcomm);
void hoop__comm_abort(hoop_comm_t *c);
void hoop__comm_destroy(hoop_comm_t *c);

#endif
