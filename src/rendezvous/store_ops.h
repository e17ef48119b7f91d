/* What a kind of store implements, and the handle all kinds share; private to src/rendezvous.
 *
 * store.c checks every argument, takes the handle's lock and calls the kind's operation; a kind
 * (client.c: tcp, file.c: file) does only its own part and writes its sentences into st->err. A
 * new kind is one file with one table, and one row in store.c's list of kinds. */
#ifndef HOOP_STORE_OPS_H
#define HOOP_STORE_OPS_H

#include <pthread.h>
#include <stddef.h>

#include "rendezvous/store.h"

typedef struct hoop__store_ops {
    const char *method; /* the hoop__rdv_t.method that selects this kind */
    size_t state_size;  /* of st->state, which store.c allocates zeroed and frees */
    /* Whether rdv has what this kind needs, before anything is opened (a sentence into err). */
    hoop_result_t (*check)(const hoop__rdv_t *rdv, char *err, size_t errlen);
    /* Sets up st->state from rdv, within st->timeout_s. On failure close() still runs. */
    hoop_result_t (*open)(hoop__store_t *st, const hoop__rdv_t *rdv, char *err, size_t errlen);
    /* key is a checked C string of keylen bytes; val holds len bytes (at most the limit). */
    hoop_result_t (*set)(hoop__store_t *st, const char *key, size_t keylen, const void *val,
                         size_t len);
    /* As hoop__store_claim, *taken and *holder_len already zero. */
    hoop_result_t (*claim)(hoop__store_t *st, const char *key, size_t keylen, const void *val,
                           size_t len, int *taken, void *holder, size_t cap, size_t *holder_len);
    /* One look for key: *found, and when found its value as hoop__store_get gives it. A kind that
     * waits (waits set) waits up to wait_s seconds for the key to be set before it says not found;
     * one that does not returns at once, and store.c asks again with backoff. deadline bounds
     * the look itself. */
    hoop_result_t (*get)(hoop__store_t *st, const char *key, size_t keylen, void *buf, size_t cap,
                         size_t *len, int *found, double wait_s, double deadline);
    int waits;
    /* Connections turned away for failing authentication (NULL: a kind that has none). Called
     * without the lock. */
    unsigned (*auth_failures)(const hoop__store_t *st);
    /* Releases what st->state holds, which open may have left half set up. */
    void (*close)(hoop__store_t *st);
} hoop__store_ops_t;

struct hoop__store {
    const hoop__store_ops_t *ops;
    void *state; /* the kind's own, ops->state_size bytes */
    int rank;
    double timeout_s;       /* bounds set() and reconnects */
    const hoop__log_t *log; /* borrowed; must outlive the store */
    pthread_mutex_t mu;     /* one operation at a time */
    char err[512];
};

extern const hoop__store_ops_t hoop__store_tcp_ops;
extern const hoop__store_ops_t hoop__store_file_ops;

/* A key as it can appear in a message: printable, truncated. Returns buf. */
const char *hoop__store_printable(const char *key, size_t n, char *buf, size_t cap);
/* Sleeps s seconds (nothing for s <= 0), through signals. */
void hoop__store_sleep(double s);

#endif
