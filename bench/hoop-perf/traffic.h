/* The memory-traffic model of traffic.c, apart from hoop-perf.h so that a unit test can build it
 * without the rest of hoop-perf. */
#ifndef HOOP_PERF_TRAFFIC_H
#define HOOP_PERF_TRAFFIC_H

#include <stddef.h>
#include <stdio.h>

/* The model that a row of coll run with algo ("auto", "shm", "ring", ...) at p ranks and size
 * bytes follows on one host; small is the one-step all-reduce's limit (HOOP_SMALL_BYTES). NULL
 * where there is none. */
const char *traffic_model(const char *coll, const char *algo, int p, size_t size, size_t small,
                          int inplace);
/* Bytes moved through memory per byte of the size column; 0 for no model. */
double traffic_factor(const char *model, int p);
/* traffic_factor(traffic_model(...)) x size: 0 where there is no model. */
double traffic_bytes(const char *coll, const char *algo, int p, size_t size, size_t small,
                     int inplace);
/* --traffic: every model, its formula (and its value at p ranks when p >= 2) and why. */
void print_traffic(FILE *f, int p);

#endif
