/* The rendezvous store: a small key-value store through which ranks find each other at init.
 * tcp://HOST:PORT: rank 0 serves it from a thread, every rank (rank 0 too) is a client.
 * file:///PATH: one file per key in the directory PATH.d, written atomically (write, then rename).
 * Each kind is one table of operations (store_ops.h); this is the interface every caller sees. */
#ifndef HOOP_STORE_H
#define HOOP_STORE_H

#include <stddef.h>

#include "base/log.h"
#include "hoop.h"
#include "rendezvous/rendezvous.h"

#define HOOP__STORE_MAX_KEY 256
#define HOOP__STORE_MAX_VALUE (1u << 20)

typedef struct hoop__store hoop__store_t;

/* Opens the store. Rank 0 of a tcp store binds HOST:PORT (a port in use is HOOP_ERR_SYSTEM with a clear
 * message); the others connect, retrying with backoff until timeout_s (then HOOP_ERR_TIMEOUT).
 * With rdv->auth set, the server talks only to clients that prove the key (auth.h), and every client
 * checks that the server holds it too: a different key is HOOP_ERR_AUTH. The server serves its
 * clients concurrently; a connection that has not authenticated within a few seconds, fails to, or
 * sends a malformed request is dropped with a warning naming its address. */
hoop_result_t hoop__store_open(const hoop__rdv_t *rdv, double timeout_s, const hoop__log_t *log,
                               hoop__store_t **st, char *err, size_t errlen);
hoop_result_t hoop__store_set(hoop__store_t *st, const char *key, const void *val, size_t len);
/* Sets key to val only if it does not exist yet, atomically (the server decides, or link(2) in a
 * file store): *taken = 0 when this call set it; *taken = 1 when it existed, its value copied into
 * holder (at most cap bytes, *holder_len the full length). */
hoop_result_t hoop__store_claim(hoop__store_t *st, const char *key, const void *val, size_t len,
                                int *taken, void *holder, size_t cap, size_t *holder_len);
/* Waits until key exists (at most timeout_s), copies at most cap bytes; *len gets the full length. */
hoop_result_t hoop__store_get(hoop__store_t *st, const char *key, void *buf, size_t cap,
                              size_t *len, double timeout_s);
/* Rank 0 of a tcp store: connections the server has turned away for failing authentication. */
unsigned hoop__store_auth_failures(const hoop__store_t *st);
/* Detail of the last failure. */
const char *hoop__store_error(const hoop__store_t *st);
/* Closes the client; on rank 0 of a tcp store also stops the server (callers make sure every rank
 * has read what it needs first). */
void hoop__store_close(hoop__store_t *st);

#endif
