/* RDMA device and port discovery: the ports HOOP_IB_HCA selects, HOOP_IB_GID_INDEX, the GID. */
#define HOOP__LOG_SUBSYS HOOP__SUB_TRANSPORT /* of its INFO and TRACE lines (base/log.h) */
#include "transport/ibv_dev.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gid_empty(const uint8_t *r)
{
    for (int i = 0; i < 16; i++)
        if (r[i] != 0) return 0;
    return 1;
}

static int gid_ipv4(const uint8_t *r)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(r, prefix, sizeof(prefix)) == 0;
}

static int gid_link_local(const uint8_t *r) { return r[0] == 0xfe && (r[1] & 0xc0) == 0x80; }

/* How much an Ethernet port wants this entry; the highest wins, the lowest index among equals. */
static int gid_rank(const hoop__ibv_gid_t *g)
{
    if (gid_empty(g->raw)) return 0;
    if (g->type == HOOP__IBV_GID_ROCE_V2) {
        if (gid_ipv4(g->raw)) return 4;
        return gid_link_local(g->raw) ? 2 : 3;
    }
    return 1;
}

int hoop__ibv_gid_pick(const hoop__ibv_gid_t *g, int n, int ethernet, int want, char *err,
                       size_t errlen)
{
    if (want >= 0) {
        if (want >= n) {
            hoop__say(err, errlen, "HOOP_IB_GID_INDEX=%d, but the port's GID table has %d entries",
                      want, n);
            return -1;
        }
        if (gid_empty(g[want].raw)) {
            hoop__say(err, errlen, "HOOP_IB_GID_INDEX=%d names an empty GID table entry", want);
            return -1;
        }
        return want;
    }
    if (!ethernet) {
        if (n > 0 && !gid_empty(g[0].raw)) return 0;
        hoop__say(err, errlen, "the port has no GID at index 0");
        return -1;
    }
    int best = -1, best_rank = 0;
    for (int i = 0; i < n; i++) {
        int r = gid_rank(&g[i]);
        if (r > best_rank) {
            best = i;
            best_rank = r;
        }
    }
    if (best < 0)
        hoop__say(err, errlen,
                  "no GID on the port (%d empty entries): give its network interface an IP "
                  "address",
                  n);
    return best;
}

void hoop__ibv_gid_str(const uint8_t raw[16], char *buf, size_t len)
{
    if (len == 0) return;
    if (inet_ntop(AF_INET6, raw, buf, (socklen_t)len) == NULL) buf[0] = '\0';
}

const char *hoop__ibv_gid_type_str(hoop__ibv_gid_type_t type)
{
    switch (type) {
    case HOOP__IBV_GID_IB: return "IB";
    case HOOP__IBV_GID_ROCE_V1: return "RoCE v1";
    case HOOP__IBV_GID_ROCE_V2: return "RoCE v2";
    default: return "GID";
    }
}

int hoop__ibv_mtu_bytes(int mtu)
{
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0;
}

/* The kernel's word for a GID's type, where the library cannot say: "IB/RoCE v1" or "RoCE v2". */
static hoop__ibv_gid_type_t sysfs_gid_type(struct ibv_device *dev, int port, int index)
{
    char path[IBV_SYSFS_PATH_MAX + 64], word[32] = "";
    snprintf(path, sizeof(path), "%s/ports/%d/gid_attrs/types/%d", dev->ibdev_path, port, index);
    FILE *f = fopen(path, "r");
    if (f == NULL) return HOOP__IBV_GID_OTHER;
    if (fgets(word, sizeof(word), f) == NULL) word[0] = '\0';
    fclose(f);
    if (strncmp(word, "RoCE v2", 7) == 0) return HOOP__IBV_GID_ROCE_V2;
    if (strncmp(word, "IB/RoCE v1", 10) == 0) return HOOP__IBV_GID_ROCE_V1;
    return HOOP__IBV_GID_OTHER;
}

int hoop__ibv_read_gids(const hoop__ibv_t *v, struct ibv_context *ctx, int port, int tbl_len,
                        hoop__ibv_gid_t *g, int max)
{
    int n = tbl_len < max ? tbl_len : max;
    for (int i = 0; i < n; i++) {
        memset(&g[i], 0, sizeof(g[i]));
        g[i].type = HOOP__IBV_GID_OTHER;
        if (v->query_gid_ex != NULL) {
            struct ibv_gid_entry e;
            /* An empty entry is an error here (ENODATA): it stays all zeros. */
            if (v->query_gid_ex(ctx, (uint32_t)port, (uint32_t)i, &e, 0, sizeof(e)) == 0) {
                memcpy(g[i].raw, e.gid.raw, 16);
                g[i].type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? HOOP__IBV_GID_ROCE_V2
                            : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? HOOP__IBV_GID_ROCE_V1
                                                                 : HOOP__IBV_GID_IB;
            }
            continue;
        }
        union ibv_gid gid;
        if (v->query_gid(ctx, (uint8_t)port, i, &gid) != 0) continue;
        memcpy(g[i].raw, gid.raw, 16);
        g[i].type = sysfs_gid_type(ctx->device, port, i);
    }
    return n;
}

void hoop__ibv_port_str(const hoop__ibv_port_t *p, char *buf, size_t len)
{
    char gid[64];
    hoop__ibv_gid_str(p->gid.raw, gid, sizeof(gid));
    if (!p->ethernet)
        snprintf(buf, len, "%s:%d InfiniBand LID %u GID %d %s MTU %d", p->dev, p->port, p->lid,
                 p->gid_index, gid, p->mtu);
    else
        snprintf(buf, len, "%s:%d %s GID %d %s MTU %d", p->dev, p->port,
                 p->iwarp ? "iWARP" : hoop__ibv_gid_type_str(p->gid.type), p->gid_index, gid,
                 p->mtu);
}

/* Appends "name, " to a list of what was seen, for the sentence when nothing is usable. */
static void seen_add(char *seen, size_t len, const char *what)
{
    size_t n = strlen(seen);
    if (n + 1 < len) snprintf(seen + n, len - n, "%s%s", n > 0 ? ", " : "", what);
}

/* Looks at the ports of one open device; adds those usable to out. */
static void discover_ports(const hoop__ibv_t *v, struct ibv_context *ctx, const char *name,
                           const hoop__ibv_hca_t *hca, int gid_index, hoop__ibv_port_t *out,
                           int max, int *found, const hoop__log_t *log, char *seen, size_t seenlen)
{
    struct ibv_device_attr da;
    if (v->query_device(ctx, &da) != 0) {
        HOOP__INFO(log, "ibverbs: %s: ibv_query_device failed: %s", name, strerror(errno));
        seen_add(seen, seenlen, name);
        return;
    }
    for (int port = 1; port <= da.phys_port_cnt; port++) {
        char what[HOOP__IBV_NAME_MAX + 192];
        if (!hoop__ibv_hca_match(hca, name, port)) {
            HOOP__INFO(log, "ibverbs: %s:%d not used: HOOP_IB_HCA leaves it out", name, port);
            snprintf(what, sizeof(what), "%s:%d (HOOP_IB_HCA)", name, port);
            seen_add(seen, seenlen, what);
            continue;
        }
        struct ibv_port_attr pa;
        int qrc = v->query_port(ctx, (uint8_t)port, &pa);
        if (qrc != 0 || pa.state != IBV_PORT_ACTIVE) {
            const char *st = qrc != 0 ? "cannot be queried" : v->port_state_str(pa.state);
            HOOP__INFO(log, "ibverbs: %s:%d not used: port %s", name, port, st);
            snprintf(what, sizeof(what), "%s:%d (%s)", name, port, st);
            seen_add(seen, seenlen, what);
            continue;
        }
        if (*found == max) return;
        hoop__ibv_port_t *p = &out[*found];
        memset(p, 0, sizeof(*p));
        snprintf(p->dev, sizeof(p->dev), "%s", name);
        p->port = port;
        p->ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
        p->iwarp = ctx->device->transport_type == IBV_TRANSPORT_IWARP;
        p->lid = pa.lid;
        p->mtu = hoop__ibv_mtu_bytes(pa.active_mtu);
        hoop__ibv_gid_t gids[HOOP__IBV_GID_MAX];
        int n = hoop__ibv_read_gids(v, ctx, port, pa.gid_tbl_len, gids, HOOP__IBV_GID_MAX);
        char why[160] = "";
        /* iWARP addresses by IP through the RDMA CM; its GID is only informative. */
        p->gid_index = hoop__ibv_gid_pick(gids, n, p->ethernet && !p->iwarp,
                                          p->iwarp ? -1 : gid_index, why, sizeof(why));
        if (p->gid_index < 0) {
            HOOP__INFO(log, "ibverbs: %s:%d not used: %s", name, port, why);
            snprintf(what, sizeof(what), "%s:%d (%s)", name, port, why);
            seen_add(seen, seenlen, what);
            continue;
        }
        p->gid = gids[p->gid_index];
        char desc[160];
        hoop__ibv_port_str(p, desc, sizeof(desc));
        HOOP__INFO(log, "ibverbs: %s would be used", desc);
        (*found)++;
    }
}

int hoop__ibv_discover(const hoop__ibv_t *v, const hoop__ibv_hca_t *hca, int gid_index,
                       hoop__ibv_port_t *out, int max, const hoop__log_t *log, char *err,
                       size_t errlen)
{
    int ndev = 0;
    struct ibv_device **list = v->get_device_list(&ndev);
    if (list == NULL && errno == ENOSYS) {
        hoop__say(err, errlen,
                  "no RDMA device: this kernel has no RDMA support loaded (no "
                  "/sys/class/infiniband)");
        return 0;
    }
    if (list == NULL) {
        hoop__say(err, errlen, "cannot list RDMA devices: %s", strerror(errno));
        return -1;
    }
    int found = 0;
    char seen[512] = "";
    for (int d = 0; d < ndev; d++) {
        const char *name = v->get_device_name(list[d]);
        struct ibv_context *ctx = v->open_device(list[d]);
        if (ctx == NULL) {
            HOOP__INFO(log, "ibverbs: %s not used: cannot open it: %s", name, strerror(errno));
            seen_add(seen, sizeof(seen), name);
            continue;
        }
        discover_ports(v, ctx, name, hca, gid_index, out, max, &found, log, seen, sizeof(seen));
        v->close_device(ctx);
    }
    v->free_device_list(list);
    if (found == 0) {
        if (ndev == 0)
            hoop__say(err, errlen,
                      "no RDMA device (none in /sys/class/infiniband, or no provider for it: "
                      "ibverbs-providers)");
        else
            hoop__say(err, errlen, "no usable RDMA port among %s", seen);
    }
    return found;
}

struct ibv_context *hoop__ibv_open_by_name(const hoop__ibv_t *v, const char *name)
{
    int n = 0;
    struct ibv_device **list = v->get_device_list(&n);
    struct ibv_context *ctx = NULL;
    for (int d = 0; list != NULL && d < n && ctx == NULL; d++)
        if (strcmp(v->get_device_name(list[d]), name) == 0) ctx = v->open_device(list[d]);
    if (list != NULL) v->free_device_list(list);
    return ctx;
}
