/*
 * The registry: every transport this build has, in order of preference. mux.c (the per-peer
 * chooser, the one transport the engine drives) gives each peer the first row that both ends use
 * (HOOP_TRANSPORT=auto uses every row, HOOP_TRANSPORT=NAME only that one) and whose reach test
 * passes on what both published. Adding a transport is its file and one row in registry.c.
 */
#ifndef HOOP_REGISTRY_H
#define HOOP_REGISTRY_H

#include <stddef.h>

#include "transport/transport.h"

#define HOOP__TP_ROWS_MAX 8

/* What one rank published for one transport: its host identity and its address there ("" where
 * it does not use that transport). */
typedef struct hoop__tp_pub {
    const char *host;
    const char *addr;
} hoop__tp_pub_t;

typedef struct hoop__tp_row {
    const char *name; /* HOOP_TRANSPORT's word for it, and its tag in mux's address */
    const char *what; /* what sentences call it: "shared memory" */
    const hoop__transport_ops_t *ops;
    /* Can this rank (me) reach peer through this transport, judged only from what both
     * published? Both ends of a pair must get the same answer, so that they choose alike. */
    int (*reaches)(const hoop__tp_pub_t *me, const hoop__tp_pub_t *peer);
} hoop__tp_row_t;

extern const hoop__tp_row_t hoop__tp_registry[];
extern const int hoop__tp_registry_n;

/* Reach tests: peers with the same host identity; any peer. */
int hoop__tp_same_host(const hoop__tp_pub_t *me, const hoop__tp_pub_t *peer);
int hoop__tp_any_host(const hoop__tp_pub_t *me, const hoop__tp_pub_t *peer);

/* Both published an address for the row (verbs: both have an active port). */
int hoop__tp_both_published(const hoop__tp_pub_t *me, const hoop__tp_pub_t *peer);

/* The row called name, or -1. */
int hoop__tp_find(const char *name);

/* mux's address, "h=HOST NAME=ADDR ...", from a host identity and each row's address (NULL or ""
 * for a row this rank does not use). Addresses hold no space. 0, or -1 if it does not fit in n. */
int hoop__mux_addr(const char *host, const char *const addrs[], char *out, size_t n);
/* Splits such an address, copied into buf (n bytes): *host and addrs[row] point into buf ("" for a
 * row it does not name). 0, or -1 if it is not one. */
int hoop__mux_addr_split(const char *addr, char *buf, size_t n, const char **host,
                         const char *addrs[HOOP__TP_ROWS_MAX]);

#endif
