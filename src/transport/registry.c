/* The table of transports (registry.h). One row per line: tests/transport/meson.build reads the
 * names of the rows from here, to run the conformance suite against each. */
#include <string.h>

#include "transport/registry.h"

extern const hoop__transport_ops_t hoop__shm_transport; /* shm.c */
extern const hoop__transport_ops_t hoop__tcp_transport; /* tcp.c */
#ifdef HOOP__HAVE_IBVERBS
extern const hoop__transport_ops_t hoop__ibverbs_transport; /* ibverbs.c */
#endif

/* One row per line, as the conformance suite's meson file reads them. */
/* clang-format off */
const hoop__tp_row_t hoop__tp_registry[] = {
    {.name = "shm", .what = "shared memory", .ops = &hoop__shm_transport, .reaches = hoop__tp_same_host},
#ifdef HOOP__HAVE_IBVERBS
    {.name = "ibverbs", .what = "RDMA verbs", .ops = &hoop__ibverbs_transport, .reaches = hoop__tp_both_published},
#endif
    {.name = "tcp", .what = "TCP", .ops = &hoop__tcp_transport, .reaches = hoop__tp_any_host},
};
/* clang-format on */
const int hoop__tp_registry_n = (int)(sizeof(hoop__tp_registry) / sizeof(hoop__tp_registry[0]));
_Static_assert(sizeof(hoop__tp_registry) / sizeof(hoop__tp_registry[0]) <= HOOP__TP_ROWS_MAX,
               "more transports than HOOP__TP_ROWS_MAX");

int hoop__tp_same_host(const hoop__tp_pub_t *me, const hoop__tp_pub_t *peer)
{
    return strcmp(me->host, peer->host) == 0;
}

int hoop__tp_any_host(const hoop__tp_pub_t *me, const hoop__tp_pub_t *peer)
{
    (void)me;
    (void)peer;
    return 1;
}

int hoop__tp_both_published(const hoop__tp_pub_t *me, const hoop__tp_pub_t *peer)
{
    return me->addr[0] != '\0' && peer->addr[0] != '\0';
}

int hoop__tp_find(const char *name)
{
    for (int t = 0; t < hoop__tp_registry_n; t++)
        if (strcmp(hoop__tp_registry[t].name, name) == 0) return t;
    return -1;
}
