/*
 * The settings every rank of a communicator must agree on (core/agree.c compares them at init).
 *
 * HOOP__AGREED_SETTINGS lists the configuration fields (hoop__config_t) that shape a schedule.
 * Code that chooses a schedule or a wire layout from a setting reads it from here and nowhere
 * else; the disagreement tests iterate over this same list, so a setting added here is tested,
 * and a setting that shapes a schedule but is missing here is a bug to fix here.
 *   X(field, environment variable, kind)   kind: SIZE (size_t), INT (int), WORD (char array)
 */
#ifndef HOOP_AGREED_H
#define HOOP_AGREED_H

#include <string.h>

#include "base/config.h"

#define HOOP__AGREED_SETTINGS(X)                                                                   \
    X(algo, "HOOP_ALGO", WORD)                        /* which all-reduce runs */                  \
    X(small_bytes, "HOOP_SMALL_BYTES", SIZE)          /* latency vs bandwidth variants */          \
    X(chunk_bytes, "HOOP_CHUNK_BYTES", SIZE)          /* pipelining pieces */                      \
    X(transport, "HOOP_TRANSPORT", WORD)              /* which transport each pair uses */         \
    X(sockets_per_peer, "HOOP_SOCKETS_PER_PEER", INT) /* TCP striping of large messages */         \
    X(shm_ring_bytes, "HOOP_SHM_RING_BYTES", SIZE)    /* shared-memory ring layout */              \
    X(cma, "HOOP_CMA", WORD)                          /* the area's single-copy all-reduce */

/* The agreed settings as the algorithms read them (hoop_comm.agreed): built from the list, so a
 * setting an algorithm can reach is one that init compared. */
#define HOOP__AGREED_DECL_SIZE(f) size_t f;
#define HOOP__AGREED_DECL_INT(f) int f;
#define HOOP__AGREED_DECL_WORD(f) char f[16];
typedef struct hoop__agreed {
#define X(field, env, kind) HOOP__AGREED_DECL_##kind(field)
    HOOP__AGREED_SETTINGS(X)
#undef X
} hoop__agreed_t;

static inline void hoop__agreed_from(hoop__agreed_t *a, const hoop__config_t *cfg)
{
#define X(field, env, kind) memcpy(&a->field, &cfg->field, sizeof(a->field));
    HOOP__AGREED_SETTINGS(X)
#undef X
}

#endif
