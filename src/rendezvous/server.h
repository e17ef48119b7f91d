/* The tcp store's server (server.c), which rank 0 runs for the store's clients (client.c). */
#ifndef HOOP_STORE_SERVER_H
#define HOOP_STORE_SERVER_H

#include <stddef.h>

#include "base/auth.h"
#include "base/log.h"
#include "hoop.h"

typedef struct hoop__store_server hoop__store_server_t;

/* Binds every address host resolves to on port and serves the store from a thread of its own.
 * With key set, a client must prove it (auth.h) before its first request. log is borrowed. */
hoop_result_t hoop__store_server_start(const char *host, int port, const hoop__auth_key_t *key,
                                       const hoop__log_t *log, hoop__store_server_t **out,
                                       char *err, size_t errlen);
/* Connections turned away for failing authentication so far (any thread may ask). */
unsigned hoop__store_server_auth_failures(const hoop__store_server_t *s);
/* Stops the thread, closes every connection and frees s. */
void hoop__store_server_stop(hoop__store_server_t *s);

#endif
