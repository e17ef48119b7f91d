/* The scheduler (sched.c): queues calls, runs them one at a time in posting order, drives the
 * point-to-point requests in flight, and hands out request handles. */
#ifndef HOOP_SCHED_H
#define HOOP_SCHED_H

#include "runtime/comm.h"

/* Posts call (numbered here, in posting order) and, when req is NULL, waits for it; otherwise
 * *req is its handle. One thread posts at a time: a second one at the same time fails with
 * HOOP_ERR_INVALID_ARGUMENT and aborts the communicator, naming what (the entry point). */
hoop_result_t hoop__sched_post(hoop_comm_t *c, const hoop__call_t *call, hoop_request_t **req,
                               const char *what);
/* hoop_wait and hoop_test on a handle (a stale or foreign one is HOOP_ERR_INVALID_ARGUMENT). */
hoop_result_t hoop__sched_wait(hoop_request_t *h);
hoop_result_t hoop__sched_test(hoop_request_t *h, int *done);

/* After hoop__comm_fail from outside the engine: makes the abort take effect now (the peers are
 * told and the transport shut if nobody holds the engine, else by whoever does as it gives the
 * engine back; waiters and the progress thread wake). */
void hoop__sched_abort(hoop_comm_t *c);
/* Waits, with the timeout, for the stream-ordered blocking calls already returned to end: they
 * told their caller HOOP_OK once queued, so hoop_comm_destroy lets them finish rather than abort
 * them. */
void hoop__sched_drain(hoop_comm_t *c);
/* Calls running, queued or in flight. */
int hoop__sched_pending(hoop_comm_t *c);
/* Stops the progress thread, fails what never ran, lets waiters leave and frees the request slots;
 * once, as the communicator is freed. */
void hoop__sched_stop(hoop_comm_t *c);

/* hoop_comm.reap (see there). */
void hoop__sched_reap(hoop_comm_t *c);

#endif
