/* The shared-memory collectives: the area and its steps (shm_area.c), the algorithms
 * (shm_coll.c). How they work: shm_area.c. Included by the collectives only. */
#ifndef HOOP_SHM_COLL_H
#define HOOP_SHM_COLL_H

#include <stdatomic.h>
#include <stdint.h>

#include "collectives/coll.h"

/* Payload bytes per buffer (two per rank): what a round of a large call moves per rank. Small
 * enough that a round of every rank stays in cache. */
#define HOOP__SHC_DATA (256 * 1024)
#define HOOP__SHC_HOST 1u /* step flag: this rank's buffers are host memory */
/* hoop__shc_step's answer when some rank's buffers are not host memory: every rank then runs the
 * point-to-point algorithm instead. Never returned to a caller of the library. */
#define HOOP__SHC_FALLBACK ((hoop_result_t)-1)

/* The first line of a buffer: the step it holds, the call's descriptor, then the payload. */
typedef struct hoop__shc_line {
    _Alignas(64) _Atomic uint64_t step;
    uint64_t seq, count;
    uint8_t kind, dtype, op, algo;
    int32_t root;
    uint32_t sched, flags;
    uint8_t data[]; /* 24 bytes in this line, the rest after it */
} hoop__shc_line_t;

struct hoop__shc {
    uint8_t *base;
    size_t len, slot_bytes, buf_bytes, data_bytes;
    int p, ready;
    uint64_t step; /* this rank's last published step */
    int *pidfd;    /* per peer, -1 where none */
    double next_gone_check;
};
typedef struct hoop__shc hoop__shc_t;

/* The communicator's area, made at the first call that asks (a collective exchange with every
 * rank: every rank asks at the same call). *a is NULL where there is none (one rank, a rank that
 * could not map it: then on every rank); an error aborted the communicator. */
hoop_result_t hoop__shc_get(const hoop__call_t *call, hoop__shc_t **a);
/* Rank r's buffer of the next step (the one this rank writes before hoop__shc_step). */
uint8_t *hoop__shc_next(const hoop__shc_t *a, int r);
/* The line of rank r's buffer for step s. */
hoop__shc_line_t *hoop__shc_line(const hoop__shc_t *a, int r, uint64_t s);
/* Rank r's buffer of the step just made. */
static inline uint8_t *hoop__shc_cur(const hoop__shc_t *a, int r)
{
    return hoop__shc_line(a, r, a->step)->data;
}
/* Publishes the next step and waits until every rank has; compares the calls. HOOP_OK,
 * HOOP__SHC_FALLBACK, or the error that aborted the communicator. */
hoop_result_t hoop__shc_step(const hoop__call_t *call, hoop__shc_t *a, uint32_t flags);

#endif
