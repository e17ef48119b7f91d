/* The shared-memory collectives, the first one-host engine (local.h): the area and its steps
 * (shm_area.c), the algorithms (shm_coll.c). How they work: shm_area.c. Included by local/ only. */
#ifndef HOOP_SHM_COLL_H
#define HOOP_SHM_COLL_H

#include <stdatomic.h>
#include <stdint.h>

#include "local/local.h"

/* Payload bytes per buffer (two per rank): what a round of a large call moves per rank. Small
 * enough that a round of every rank stays in cache. */
#define HOOP__SHC_DATA (256 * 1024)
#define HOOP__SHC_HOST 1u /* step flag: this rank's buffers are host memory */
/* step flag: this rank's buffers are CUDA device memory and it may take the CUDA IPC path */
#define HOOP__SHC_DEVICE 2u
/* step flag: this rank's buffers of an all-reduce lie in symmetric memory (sym.c), where the
 * peers may read and write them */
#define HOOP__SHC_SYM 4u
/* step flag of a single-copy all-reduce (shm_coll.c): this rank may read every peer's memory
 * with process_vm_readv (its probe, then each read of the call so far, succeeded) */
#define HOOP__SHC_CMA 8u

/* The first line of a buffer: the step it holds, the call's descriptor, then the payload. */
typedef struct hoop__shc_line {
    _Alignas(64) _Atomic uint64_t step;
    uint64_t seq, count;
    uint8_t kind, dtype, op, algo;
    int32_t root;
    uint32_t sched, flags;
    uint8_t data[]; /* HOOP__SHC_HEAD bytes in this line; a large payload's rest after the lines */
} hoop__shc_line_t;
#define HOOP__SHC_HEAD 24

/* The lines after the first: a small payload's next bytes, each line with its own step number
 * written after its bytes. A reader polls them together with the first line, so that their
 * transfers overlap, rather than fetching each once the first has said they are there. */
typedef struct hoop__shc_fline {
    _Alignas(64) uint8_t data[56];
    _Atomic uint64_t step;
} hoop__shc_fline_t;
#define HOOP__SHC_FLINE 56
#define HOOP__SHC_FLINES 4
/* The largest payload carried in lines: 248 bytes. */
#define HOOP__SHC_LINES_MAX (HOOP__SHC_HEAD + HOOP__SHC_FLINES * HOOP__SHC_FLINE)

struct hoop__shc {
    uint8_t *base;
    size_t len, slot_bytes, buf_bytes, data_bytes;
    size_t lines_off, data_off; /* where the lines and the payloads begin (shm_area.c) */
    int p, ready;
    int tried;     /* area_setup ran (once per communicator, whatever it found) */
    uint64_t step; /* this rank's last published step */
    int *pidfd;    /* per peer, opened at its first look: -2 not yet, -1 none */
    int sweep;     /* the next peer a wait's liveness sweep looks at (check_world) */
    double next_gone_check;
    /* What the last step found every rank's flags to say: HOST, DEVICE or MIXED. Every step of
     * a call after its first says HOST: only ranks with host buffers go on. */
    hoop__verdict_t verdict;
    uint32_t all_flags; /* the last step's flags of every rank, and-ed */
    /* Single copy (shm_coll.c): 0 before the probe, 1 where every rank could read every peer's
     * memory, -1 where some rank could not (the same on every rank, from one step's flags);
     * cma_word is what the peers read in the probe. */
    int cma;
    uint64_t cma_word;
};
typedef struct hoop__shc hoop__shc_t;

/* The communicator's area, made at the first call that asks (a collective exchange with every
 * rank: every rank asks at the same call). *a is NULL where there is none (one rank, a rank that
 * could not map it: then on every rank); an error aborted the communicator. */
hoop_result_t hoop__shc_get(const hoop__call_t *call, hoop__shc_t **a);
/* The area if it was made and every rank mapped it, else NULL; never makes one. */
static inline hoop__shc_t *hoop__shc_ready(const hoop_comm_t *c)
{
    hoop__shc_t *a = c->local != NULL ? c->local->shc : NULL;
    return a != NULL && a->ready ? a : NULL;
}
/* This rank's step flags for call: HOOP__SHC_HOST for host buffers, HOOP__SHC_DEVICE for device
 * buffers that may take CUDA IPC (hoop__ipc_may), 0 otherwise. */
uint32_t hoop__shc_flags(const hoop__call_t *call);
/* Rank r's buffer of the next step (the one this rank writes before hoop__shc_step). */
uint8_t *hoop__shc_next(const hoop__shc_t *a, int r);
/* The line of rank r's buffer for step s. */
hoop__shc_line_t *hoop__shc_line(const hoop__shc_t *a, int r, uint64_t s);
/* The payload of rank r's buffer for step s (data_bytes, 64-byte aligned), past the lines. */
uint8_t *hoop__shc_data(const hoop__shc_t *a, int r, uint64_t s);
/* Rank r's buffer of the step just made. */
static inline uint8_t *hoop__shc_cur(const hoop__shc_t *a, int r)
{
    return hoop__shc_line(a, r, a->step)->data;
}
/* Publishes the next step and waits until every rank has; compares the calls. HOOP_OK with
 * a->verdict what every rank's flags say (HOOP__VERDICT_HOST where all had HOOP__SHC_HOST, DEVICE
 * where all had HOOP__SHC_DEVICE, MIXED otherwise), or the error that aborted the communicator. */
hoop_result_t hoop__shc_step(const hoop__call_t *call, hoop__shc_t *a, uint32_t flags);

/* Payloads of at most HOOP__SHC_LINES_MAX bytes in lines. hoop__shc_put writes n bytes into rank
 * me's next step; hoop__shc_step_lines is hoop__shc_step where rank who (-1: every rank) put n
 * bytes; after it, hoop__shc_take gives rank q's n bytes: in its line, or copied into tmp (n
 * bytes), or NULL where q's lines do not hold this step (then the step's descriptors differed). */
void hoop__shc_put(const hoop__shc_t *a, int me, const void *src, size_t n);
hoop_result_t hoop__shc_step_lines(const hoop__call_t *call, hoop__shc_t *a, uint32_t flags,
                                   size_t n, int who);
const uint8_t *hoop__shc_take(const hoop__shc_t *a, int q, size_t n, uint8_t *tmp);
/* After the last step of a call failed, where the peers write into this rank's buffers until
 * they publish that step (step): waits until every peer has published it, failed, ended or closed (at
 * most the communicator's timeout), so that no peer still writes there once the call returns. */
void hoop__shc_drain(const hoop__call_t *call, hoop__shc_t *a, uint64_t step);

#endif
