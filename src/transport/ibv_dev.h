/* Which RDMA devices and ports hoop uses, and with which GID: the ports that HOOP_IB_HCA's list
 * (base/hca.h) selects, found through the verbs table (ibv_sym.h), and the choice said at
 * HOOP_DEBUG=INFO. The list's parser and the GID choice are pure functions
 * (tests/unit/test_ibv_dev.c). */
#ifndef HOOP_IBV_DEV_H
#define HOOP_IBV_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "base/hca.h"
#include "base/log.h"
#include "transport/ibv_sym.h"

/* GID entries read per port (rxe has 1024, almost all empty); HOOP_IB_GID_INDEX names one. */
#define HOOP__IBV_GID_MAX (HOOP__CONFIG_GID_INDEX_MAX + 1)

typedef enum {
    HOOP__IBV_GID_IB = 0,
    HOOP__IBV_GID_ROCE_V1,
    HOOP__IBV_GID_ROCE_V2,
    HOOP__IBV_GID_OTHER, /* the library or kernel did not say */
} hoop__ibv_gid_type_t;

typedef struct hoop__ibv_gid {
    uint8_t raw[16];
    hoop__ibv_gid_type_t type;
} hoop__ibv_gid_t;

/* The GID index to use among a port's n entries (an all-zero entry is empty). want >= 0 is
 * HOOP_IB_GID_INDEX and must name a filled entry. Otherwise, on InfiniBand, index 0; on Ethernet
 * the first RoCE v2 entry holding an IPv4 address (::ffff:a.b.c.d: routable, and what RoCE
 * deployments configure), then RoCE v2 with a global IPv6 address, then any RoCE v2, then any
 * entry. Returns the index, or -1 with a sentence. */
int hoop__ibv_gid_pick(const hoop__ibv_gid_t *g, int n, int ethernet, int want, char *err,
                       size_t errlen);
/* "::ffff:10.11.0.1", "fe80::...": the GID as an IPv6 address. */
void hoop__ibv_gid_str(const uint8_t raw[16], char *buf, size_t len);
const char *hoop__ibv_gid_type_str(hoop__ibv_gid_type_t type);

/* One port hoop may use, as discovery found it. */
typedef struct hoop__ibv_port {
    char dev[HOOP__IBV_NAME_MAX];
    int port;
    int ethernet; /* link layer Ethernet (RoCE, iWARP) rather than InfiniBand */
    int iwarp;    /* iWARP transport: its queue pairs connect through the RDMA CM */
    uint16_t lid; /* InfiniBand only */
    int mtu;      /* active MTU, bytes */
    int gid_index;
    hoop__ibv_gid_t gid;
} hoop__ibv_port_t;

/* Reads port's GID table (at most max entries) into g; returns how many entries were read. The type
 * comes from the library where it can say (rdma-core 32 and later), else from sysfs. */
int hoop__ibv_read_gids(const hoop__ibv_t *v, struct ibv_context *ctx, int port, int tbl_len,
                        hoop__ibv_gid_t *g, int max);

/* Every active port of every device that hca selects, with its GID chosen (gid_index as for
 * hoop__ibv_gid_pick), in device order, at most max. Says each port and what became of it at INFO.
 * Returns the number found; 0 or -1 (the device list could not be read) come with a sentence saying
 * why none is usable. */
int hoop__ibv_discover(const hoop__ibv_t *v, const hoop__ibv_hca_t *hca, int gid_index,
                       hoop__ibv_port_t *out, int max, const hoop__log_t *log, char *err,
                       size_t errlen);
/* "rxe0:1 RoCE v2 GID 1 ::ffff:10.11.0.1 MTU 1024": what a port was given, for INFO lines. */
/* Opens the device called name (exactly), or NULL when there is none or it cannot be opened. */
struct ibv_context *hoop__ibv_open_by_name(const hoop__ibv_t *v, const char *name);

void hoop__ibv_port_str(const hoop__ibv_port_t *p, char *buf, size_t len);

/* MTU in bytes of a verbs MTU value (IBV_MTU_256 ... IBV_MTU_4096); 0 for anything else. */
int hoop__ibv_mtu_bytes(int mtu);

#endif
