/* hoop_comm_shrink (shrink.c) and the listener every communicator keeps for it. */
#ifndef HOOP_SHRINK_H
#define HOOP_SHRINK_H

#include "runtime/comm.h"

/* Opens c's shrink listener on the interface facing host toward, or on the address of like (a
 * "host:port" whose host is taken) where like is set, and makes c->shrink_addrs with this rank's
 * entry. A failure leaves no listener (shrink then fails on c), with a warning. */
hoop_result_t hoop__shrink_open(hoop_comm_t *c, const char *toward, const char *like);
/* Stops the listener (and its fence, once shrunk); frees the addresses. */
void hoop__shrink_close(hoop_comm_t *c);
/* hoop_comm_shrink with exclude (n entries), *newcomm already NULL. */
hoop_result_t hoop__comm_shrink(hoop_comm_t *c, const int *exclude, int n, hoop_comm_t **newcomm);

#endif
