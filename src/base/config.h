/* Configuration from the environment (HOOP_*), parsed once per communicator. */
#ifndef HOOP_CONFIG_H
#define HOOP_CONFIG_H

#include <stddef.h>

#include "base/auth.h"
#include "hoop.h"

typedef struct hoop__config {
    int log_level;       /* HOOP_DEBUG: WARN (default), INFO, TRACE, NONE */
    unsigned log_subsys; /* HOOP_DEBUG_SUBSYS: HOOP__SUB_* bits (default all) */
    char log_file[256];  /* HOOP_DEBUG_FILE: "" = stderr */
    char transport[16];  /* HOOP_TRANSPORT: auto (default), tcp, shm, ibverbs */
    char algo[16];       /* HOOP_ALGO: auto (default), ring, rd, rabenseifner, ps, ... */
    char ifname[128]; /* HOOP_SOCKET_IFNAME: "" = automatic; prefix list, '^' excludes, '=' exact */
    int sockets_per_peer;  /* HOOP_SOCKETS_PER_PEER: 1..16 */
    size_t chunk_bytes;    /* HOOP_CHUNK_BYTES: pipelining unit of large collectives */
    size_t small_bytes;    /* HOOP_SMALL_BYTES: at or below, latency-bound algorithms are chosen */
    double timeout_s;      /* HOOP_TIMEOUT: seconds, every blocking wait */
    int trace;             /* HOOP_TRACE: 1 = log every collective's schedule */
    size_t shm_ring_bytes; /* HOOP_SHM_RING_BYTES: per peer and direction, a power of two */
    size_t shm_cma_bytes;  /* HOOP_SHM_CMA_BYTES: single copy from this size up; 0 = never */
    int shm_spin_us;
    /* HOOP_SHM_STREAM_BYTES: the shared-area collectives write outputs of this size and larger
     * with streaming stores (hoop__copy_stream); 0 = never. Local: it changes no byte. */
    size_t shm_stream_bytes;
    char host_id[64];         /* HOOP_HOSTID: overrides the host identity ("" = hostname, boot id and
                               * namespaces); ranks with equal ids are on one host */          /* HOOP_SHM_SPIN_US: spin before sleeping (when cores allow) */
    hoop__auth_key_t auth; /* HOOP_AUTH_KEY or HOOP_AUTH_KEY_FILE; auth.set = 0 when neither */
} hoop__config_t;

/* Looks a variable up; returns NULL when unset. */
typedef const char *(*hoop__getenv_fn)(const char *name, void *ctx);

void hoop__config_defaults(hoop__config_t *c);
/* Fills c from get (defaults for what is unset). On a bad value returns HOOP_ERR_INVALID_ARGUMENT
 * and writes a sentence naming the variable into err. */
hoop_result_t hoop__config_parse(hoop__config_t *c, hoop__getenv_fn get, void *ctx, char *err,
                                 size_t errlen);
/* Wipes the secrets of c (the key) before it goes away. */
void hoop__config_wipe(hoop__config_t *c);
/* hoop__config_parse over the process environment. */
hoop_result_t hoop__config_load(hoop__config_t *c, char *err, size_t errlen);

/* "64", "512K", "4M", "1G" (powers of 1024). Returns 0 on success. */
int hoop__parse_size(const char *s, size_t *out);

#endif
