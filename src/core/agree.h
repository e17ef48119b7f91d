/*
 * What every rank of a communicator must agree on before any data moves.
 *
 * Two ranks that hold different values of a setting listed in base/agreed.h, or a different world
 * size or job, would build different schedules (which bytes go to whom, in what pieces) or
 * different wire layouts, and the headers of their messages can coincide, so the receiver alone
 * cannot always tell: the result would be HOOP_OK with wrong data. So init compares all of it,
 * rank by rank, and fails on every rank when any two differ.
 */
#ifndef HOOP_AGREE_H
#define HOOP_AGREE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/agreed.h"
#include "base/config.h"
#include "rendezvous/store.h"

/* The settings as "NAME value" lines, in list order; returns the length. */
size_t hoop__agree_settings(const hoop__config_t *cfg, char *buf, size_t cap);
/* A digest of those lines: equal on every rank once init has compared them (wire header sched). */
uint32_t hoop__agree_digest(const hoop__config_t *cfg);
/* A rank's hello (see agree.c): the fields to agree on, then who it is. Returns the length. */
size_t hoop__agree_hello(const hoop__config_t *cfg, const char *job, int rank, int size, char *buf,
                         size_t cap);
/* The value of field name in a hello into out; 0 (and "") when absent. */
int hoop__agree_field(const char *hello, const char *name, char *out, size_t cap);
/* 0 when two hellos agree; else 1 and a sentence naming both ranks and what each said:
 * "rank 1 says WORLD_SIZE=3 where rank 0 says WORLD_SIZE=2: ...", or, where theirs could not read
 * its settings, "rank 1 cannot use its settings: HOOP_CHUNK_BYTES=...". */
int hoop__agree_compare(const char *mine, int me, const char *theirs, int them, char *msg,
                        size_t n);

typedef struct hoop__agree_in {
    const hoop__config_t *cfg;
    const char *job; /* "" when the launcher names none */
    int rank, size;
    double deadline; /* monotonic seconds */
} hoop__agree_in_t;

#define HOOP__HELLO_MAX 1024

/* One rank's side of the agreement, from claim to verdict. */
typedef struct hoop__agree {
    hoop__agree_in_t in;
    char mine[HOOP__HELLO_MAX];
    char zero[HOOP__HELLO_MAX]; /* rank 0's hello (ranks > 0) */
} hoop__agree_t;

/* The agreement over an open store, in two steps so that a rank can listen for its peers
 * between them. Claim: publishes this rank's hello and gets the communicator id (HOOP_OK);
 * *stale = 1 (with HOOP_ERR_TIMEOUT) when the store is this process's previous one, about to
 * close: reopen it and claim again. Verdict: waits until every hello is compared. A disagreement
 * is HOOP_ERR_MISMATCH with the sentence in err, on every rank that takes part; store failures
 * are passed on with the store's message. */
hoop_result_t hoop__agree_claim(hoop__store_t *st, hoop__agree_t *a, uint64_t *comm_id, int *stale,
                                char *err, size_t errlen);
hoop_result_t hoop__agree_verdict(hoop__store_t *st, hoop__agree_t *a, char *err, size_t errlen);

/* Rank 0, at the end of init: HOOP_ERR_MISMATCH with the sentence when a process found its rank
 * claimed during the rendezvous (after rank 0 compared the hellos, it may have been the real one). */
hoop_result_t hoop__agree_conflict(hoop__store_t *st, char *msg, size_t n);

/* Per call, the header of every message carries the rest: the collective, dtype, op, count,
 * root, the call number and the algorithm with a digest of the settings above (wire.h), so a
 * setting changed after init (hoop_comm_set_algo) is caught by the first message it shapes. */

#endif
