/* The verbs probe: loads libibverbs through hoop's table (ibv_sym), lists every device, port and GID,
 * says which port hoop's discovery (ibv_dev, HOOP_IB_HCA, HOOP_IB_GID_INDEX) would use, then on that
 * port connects two RC queue pairs of this one process to each other and moves bytes over them:
 * RDMA WRITE, SEND/RECV, RDMA WRITE WITH IMMEDIATE and RDMA READ, each checked byte for byte, with
 * completions taken through the completion channel the way the transport will sleep on them.
 *
 *   probe [--dev NAME]     exit 0 all moved and checked, 1 something failed (or NAME has no usable
 *                          port), 77 no library, or no usable port and no NAME (a "SKIP:" line
 *                          says which)
 *
 * An iWARP port (siw) connects its queue pairs through the RDMA CM, which the probe does not use:
 * there it stops after registering memory. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "transport/ibv_dev.h"
#include "transport/ibv_sym.h"
#include "../common/testing.h"

#define BUF_BYTES (256 * 1024)
#define WRITE_BYTES 100003 /* not a multiple of any MTU: the last packet is short */
#define SEND_BYTES 4001
#define IMM_BYTES 777
#define READ_BYTES 65536
#define IMM_VALUE 0x686f6f70u /* "hoop" */

typedef struct {
    hoop__ibv_t v;
    hoop__ibv_port_t port;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    struct ibv_qp *qa, *qb; /* qa posts, qb is its peer */
    unsigned char *a, *b;   /* a's buffer and b's buffer, each registered */
    struct ibv_mr *mra, *mrb;
    unsigned events; /* CQ events taken, acknowledged at the end */
} probe_t;

static int failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int failf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay_fail(fmt, ap);
    va_end(ap);
    return -1;
}

static const char *transport_str(enum ibv_transport_type t)
{
    return t == IBV_TRANSPORT_IB ? "InfiniBand" : t == IBV_TRANSPORT_IWARP ? "iWARP" : "other";
}

/* Every device, port and non-empty GID, as the library reports them. */
static void list_devices(const hoop__ibv_t *v)
{
    int n = 0;
    struct ibv_device **list = v->get_device_list(&n);
    if (list == NULL) return;
    printf("%d RDMA device(s)\n", n);
    for (int d = 0; d < n; d++) {
        const char *name = v->get_device_name(list[d]);
        struct ibv_context *ctx = v->open_device(list[d]);
        struct ibv_device_attr da;
        if (ctx == NULL || v->query_device(ctx, &da) != 0) {
            printf("  %s: cannot open or query: %s\n", name, strerror(errno));
            if (ctx != NULL) v->close_device(ctx);
            continue;
        }
        printf("  %s: transport %s, %d port(s), max %d QPs, max MR %llu bytes, fw %s\n", name,
               transport_str(list[d]->transport_type), da.phys_port_cnt, da.max_qp,
               (unsigned long long)da.max_mr_size, da.fw_ver);
        for (int p = 1; p <= da.phys_port_cnt; p++) {
            struct ibv_port_attr pa;
            if (v->query_port(ctx, (uint8_t)p, &pa) != 0) continue;
            printf(
                "    port %d: %s, link layer %s, active MTU %d (max %d), LID %u, %d GID entries\n",
                p, v->port_state_str(pa.state),
                pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand",
                hoop__ibv_mtu_bytes(pa.active_mtu), hoop__ibv_mtu_bytes(pa.max_mtu), pa.lid,
                pa.gid_tbl_len);
            hoop__ibv_gid_t g[HOOP__IBV_GID_MAX];
            int ng = hoop__ibv_read_gids(v, ctx, p, pa.gid_tbl_len, g, HOOP__IBV_GID_MAX);
            for (int i = 0; i < ng; i++) {
                static const uint8_t zero[16];
                if (memcmp(g[i].raw, zero, 16) == 0) continue;
                char text[64];
                hoop__ibv_gid_str(g[i].raw, text, sizeof(text));
                printf("      GID %d: %s (%s)\n", i, text, hoop__ibv_gid_type_str(g[i].type));
            }
        }
        v->close_device(ctx);
    }
    v->free_device_list(list);
}

static int set_up(probe_t *p)
{
    const hoop__ibv_t *v = &p->v;
    p->ctx = hoop__ibv_open_by_name(v, p->port.dev);
    if (p->ctx == NULL) return failf("cannot open %s: %s\n", p->port.dev, strerror(errno));
    p->pd = v->alloc_pd(p->ctx);
    if (p->pd == NULL) return failf("ibv_alloc_pd: %s\n", strerror(errno));
    p->a = calloc(1, BUF_BYTES);
    p->b = calloc(1, BUF_BYTES);
    if (p->a == NULL || p->b == NULL) return failf("out of memory\n");
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    p->mra = v->reg_mr(p->pd, p->a, BUF_BYTES, access);
    p->mrb = v->reg_mr(p->pd, p->b, BUF_BYTES, access);
    if (p->mra == NULL || p->mrb == NULL)
        return failf("ibv_reg_mr of %d bytes: %s (is `ulimit -l` large enough?)\n", BUF_BYTES,
                     strerror(errno));
    printf("registered 2 x %d bytes: lkey 0x%x rkey 0x%x, lkey 0x%x rkey 0x%x\n", BUF_BYTES,
           p->mra->lkey, p->mra->rkey, p->mrb->lkey, p->mrb->rkey);
    if (p->port.iwarp) return 0;

    p->ch = v->create_comp_channel(p->ctx);
    if (p->ch == NULL) return failf("ibv_create_comp_channel: %s\n", strerror(errno));
    p->cq = v->create_cq(p->ctx, 32, NULL, p->ch, 0);
    if (p->cq == NULL) return failf("ibv_create_cq: %s\n", strerror(errno));
    struct ibv_qp_init_attr qia = {
        .send_cq = p->cq,
        .recv_cq = p->cq,
        .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    p->qa = v->create_qp(p->pd, &qia);
    p->qb = v->create_qp(p->pd, &qia);
    if (p->qa == NULL || p->qb == NULL) return failf("ibv_create_qp: %s\n", strerror(errno));
    return 0;
}

/* RESET -> INIT -> RTR -> RTS towards the queue pair numbered dest on this same port. */
static int connect_qp(probe_t *p, struct ibv_qp *qp, uint32_t dest, uint32_t my_psn,
                      uint32_t dest_psn, enum ibv_mtu mtu)
{
    const hoop__ibv_t *v = &p->v;
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT,
        .pkey_index = 0,
        .port_num = (uint8_t)p->port.port,
        .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
    };
    int rc = v->modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) return failf("QP %u to INIT: %s\n", qp->qp_num, strerror(rc));

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = dest;
    a.rq_psn = dest_psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = (uint8_t)p->port.port;
    if (p->port.ethernet) {
        /* RoCE routes by GID: the peer's is our own here. */
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, p->port.gid.raw, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)p->port.gid_index;
        a.ah_attr.grh.hop_limit = 1;
    } else {
        a.ah_attr.dlid = p->port.lid;
    }
    rc = v->modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) return failf("QP %u to RTR: %s\n", qp->qp_num, strerror(rc));

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = my_psn;
    a.max_rd_atomic = 1;
    rc = v->modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) return failf("QP %u to RTS: %s\n", qp->qp_num, strerror(rc));

    struct ibv_qp_attr q;
    struct ibv_qp_init_attr qi;
    rc = v->query_qp(qp, &q, IBV_QP_STATE, &qi);
    if (rc != 0 || q.qp_state != IBV_QPS_RTS)
        return failf("QP %u is not in RTS after connecting (%s)\n", qp->qp_num, strerror(rc));
    return 0;
}

/* Takes n completions: polls, and when the queue is empty arms it and sleeps on the channel's
 * descriptor, as the transport will in the mux's poll. */
static int wait_wc(probe_t *p, struct ibv_wc *wc, int n, const char *what)
{
    const hoop__ibv_t *v = &p->v;
    int got = 0;
    double deadline = now_s() + 30;
    while (got < n) {
        int k = v->poll_cq(p->cq, n - got, wc + got);
        if (k < 0) return failf("%s: ibv_poll_cq failed\n", what);
        got += k;
        if (got == n) break;
        if (v->req_notify_cq(p->cq, 0) != 0) return failf("%s: ibv_req_notify_cq failed\n", what);
        /* A completion that came between the poll and arming raised no event: look once more. */
        k = v->poll_cq(p->cq, n - got, wc + got);
        if (k < 0) return failf("%s: ibv_poll_cq failed\n", what);
        got += k;
        if (got == n) break;
        struct pollfd pfd = {.fd = p->ch->fd, .events = POLLIN};
        int left = (int)((deadline - now_s()) * 1000);
        if (left <= 0 || poll(&pfd, 1, left) <= 0)
            return failf("%s: %d of %d completions within 30 s\n", what, got, n);
        struct ibv_cq *ev_cq;
        void *ev_ctx;
        if (v->get_cq_event(p->ch, &ev_cq, &ev_ctx) != 0)
            return failf("%s: ibv_get_cq_event: %s\n", what, strerror(errno));
        p->events++;
    }
    for (int i = 0; i < n; i++)
        if (wc[i].status != IBV_WC_SUCCESS)
            return failf("%s: completion %d (wr %llu) failed: %s\n", what, i,
                         (unsigned long long)wc[i].wr_id, v->wc_status_str(wc[i].status));
    return 0;
}

static struct ibv_wc *wc_of(struct ibv_wc *wc, int n, uint64_t wr_id)
{
    for (int i = 0; i < n; i++)
        if (wc[i].wr_id == wr_id) return &wc[i];
    return NULL;
}

static void fill(unsigned char *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)((i * 131 + seed) ^ (i >> 8));
}

static int check(const unsigned char *got, const unsigned char *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            return failf("%s: byte %zu is 0x%02x, sent 0x%02x\n", what, i, got[i], want[i]);
    return 0;
}

static int post_send(probe_t *p, enum ibv_wr_opcode op, uint64_t id, void *local, uint32_t len,
                     uint32_t lkey, void *remote, uint32_t rkey)
{
    struct ibv_sge sge = {.addr = (uintptr_t)local, .length = len, .lkey = lkey};
    struct ibv_send_wr wr = {
        .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = (uintptr_t)remote;
    wr.wr.rdma.rkey = rkey;
    if (op == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htonl(IMM_VALUE);
    struct ibv_send_wr *bad;
    int rc = p->v.post_send(p->qa, &wr, &bad);
    return rc == 0 ? 0 : failf("ibv_post_send: %s\n", strerror(rc));
}

static int post_recv(probe_t *p, uint64_t id, void *buf, uint32_t len)
{
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = p->mrb->lkey};
    struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = len > 0 ? 1 : 0};
    struct ibv_recv_wr *bad;
    int rc = p->v.post_recv(p->qb, &wr, &bad);
    return rc == 0 ? 0 : failf("ibv_post_recv: %s\n", strerror(rc));
}

static int traffic(probe_t *p)
{
    struct ibv_wc wc[4];
    double t;

    t = now_s();
    fill(p->a, WRITE_BYTES, 1);
    if (post_send(p, IBV_WR_RDMA_WRITE, 1, p->a, WRITE_BYTES, p->mra->lkey, p->b, p->mrb->rkey) ||
        wait_wc(p, wc, 1, "RDMA WRITE") || check(p->b, p->a, WRITE_BYTES, "RDMA WRITE"))
        return -1;
    printf("RDMA WRITE of %d bytes: ok (%.1f ms)\n", WRITE_BYTES, (now_s() - t) * 1e3);

    t = now_s();
    fill(p->a, SEND_BYTES, 2);
    memset(p->b, 0, BUF_BYTES);
    if (post_recv(p, 10, p->b, BUF_BYTES) ||
        post_send(p, IBV_WR_SEND, 11, p->a, SEND_BYTES, p->mra->lkey, NULL, 0) ||
        wait_wc(p, wc, 2, "SEND/RECV"))
        return -1;
    struct ibv_wc *r = wc_of(wc, 2, 10);
    if (r == NULL || r->opcode != IBV_WC_RECV || r->byte_len != SEND_BYTES)
        return failf("SEND/RECV: the receive completed as opcode %d with %u bytes, not %d bytes\n",
                     r ? (int)r->opcode : -1, r ? r->byte_len : 0, SEND_BYTES);
    if (check(p->b, p->a, SEND_BYTES, "SEND/RECV")) return -1;
    printf("SEND/RECV of %d bytes: ok (%.1f ms)\n", SEND_BYTES, (now_s() - t) * 1e3);

    /* The eager path's candidate: data lands by RDMA, the immediate wakes a posted receive. */
    t = now_s();
    fill(p->a, IMM_BYTES, 3);
    memset(p->b, 0, BUF_BYTES);
    unsigned char *dst = p->b + 4096;
    if (post_recv(p, 20, NULL, 0) ||
        post_send(p, IBV_WR_RDMA_WRITE_WITH_IMM, 21, p->a, IMM_BYTES, p->mra->lkey, dst,
                  p->mrb->rkey) ||
        wait_wc(p, wc, 2, "RDMA WRITE WITH IMM"))
        return -1;
    r = wc_of(wc, 2, 20);
    if (r == NULL || r->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(r->wc_flags & IBV_WC_WITH_IMM) ||
        ntohl(r->imm_data) != IMM_VALUE || r->byte_len != IMM_BYTES)
        return failf("RDMA WRITE WITH IMM: the receive completed as opcode %d, immediate 0x%x, %u "
                     "bytes\n",
                     r ? (int)r->opcode : -1, r ? ntohl(r->imm_data) : 0, r ? r->byte_len : 0);
    if (check(dst, p->a, IMM_BYTES, "RDMA WRITE WITH IMM")) return -1;
    printf("RDMA WRITE WITH IMM of %d bytes, immediate 0x%x: ok (%.1f ms)\n", IMM_BYTES, IMM_VALUE,
           (now_s() - t) * 1e3);

    t = now_s();
    fill(p->b, READ_BYTES, 4);
    memset(p->a, 0, BUF_BYTES);
    if (post_send(p, IBV_WR_RDMA_READ, 30, p->a, READ_BYTES, p->mra->lkey, p->b, p->mrb->rkey) ||
        wait_wc(p, wc, 1, "RDMA READ") || check(p->a, p->b, READ_BYTES, "RDMA READ"))
        return -1;
    printf("RDMA READ of %d bytes: ok (%.1f ms)\n", READ_BYTES, (now_s() - t) * 1e3);
    return 0;
}

static void tear_down(probe_t *p)
{
    const hoop__ibv_t *v = &p->v;
    if (p->qa != NULL) v->destroy_qp(p->qa);
    if (p->qb != NULL) v->destroy_qp(p->qb);
    if (p->cq != NULL) {
        v->ack_cq_events(p->cq, p->events); /* destroying a CQ waits for every event's ack */
        v->destroy_cq(p->cq);
    }
    if (p->ch != NULL) v->destroy_comp_channel(p->ch);
    if (p->mra != NULL) v->dereg_mr(p->mra);
    if (p->mrb != NULL) v->dereg_mr(p->mrb);
    if (p->pd != NULL) v->dealloc_pd(p->pd);
    if (p->ctx != NULL) v->close_device(p->ctx);
    free(p->a);
    free(p->b);
}

int main(int argc, char **argv)
{
    const char *want = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dev") == 0 && i + 1 < argc) {
            want = argv[++i];
        } else {
            fprintf(stderr, "usage: probe [--dev NAME]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    static probe_t p;
    char err[512];
    /* HOOP_IB_HCA and HOOP_IB_GID_INDEX as the library reads them. */
    hoop__config_t cfg;
    if (hoop__config_load(&cfg, err, sizeof(err)) != HOOP_OK) {
        printf("FAIL: %s\n", err);
        return 1;
    }
    hoop__config_wipe(&cfg);
    if (hoop__ibv_load(&p.v, NULL, err, sizeof(err)) != 0) {
        printf("SKIP: %s\n", err);
        return 77;
    }
    hoop__ibv_hca_t hca;
    int gid_index = cfg.ib_gid_index;
    if (hoop__ibv_hca_parse(cfg.ib_hca, &hca, err, sizeof(err)) != 0) {
        printf("FAIL: %s\n", err);
        return 1;
    }
    enum ibv_fork_status fork = p.v.is_fork_initialized ? p.v.is_fork_initialized()
                                                        : IBV_FORK_DISABLED;
    printf("libibverbs loaded; fork safety: %s\n",
           fork == IBV_FORK_UNNEEDED  ? "the kernel's (ibv_fork_init unneeded)"
           : fork == IBV_FORK_ENABLED ? "ibv_fork_init done"
                                      : "needs ibv_fork_init before registering");
    list_devices(&p.v);

    /* Discovery says at INFO which port, GID and MTU hoop would use: always, here. */
    hoop__log_t log;
    hoop__log_open(&log, HOOP__LOG_INFO, "", -1);
    hoop__ibv_port_t ports[16];
    int n = hoop__ibv_discover(&p.v, &hca, gid_index, ports, 16, &log, err, sizeof(err));
    hoop__log_close(&log);
    /* Without --dev: the first port that connects without the RDMA CM, else the first. A device
     * asked for by name must be there: its absence is a failure, not a skip. */
    int pick = -1;
    for (int i = 0; i < n && pick < 0; i++)
        if (want != NULL ? strcmp(ports[i].dev, want) == 0 : !ports[i].iwarp) pick = i;
    if (pick < 0 && want == NULL && n > 0) pick = 0;
    if (pick < 0) {
        hoop__ibv_unload(&p.v);
        if (want == NULL) {
            printf("SKIP: %s\n", err);
            return 77;
        }
        printf("FAIL: no usable port on %s%s%s\n", want, n <= 0 ? ": " : "", n <= 0 ? err : "");
        return 1;
    }
    p.port = ports[pick];
    char desc[160];
    hoop__ibv_port_str(&p.port, desc, sizeof(desc));
    printf("probing %s\n", desc);

    int rc = set_up(&p);
    if (rc == 0 && p.port.iwarp) {
        printf("%s is iWARP: its queue pairs connect through the RDMA CM, which the probe does not "
               "use; stopping after registration\n",
               p.port.dev);
    } else if (rc == 0) {
        enum ibv_mtu mtu = IBV_MTU_256;
        while (mtu < IBV_MTU_4096 && hoop__ibv_mtu_bytes(mtu + 1) <= p.port.mtu) mtu++;
        rc = connect_qp(&p, p.qa, p.qb->qp_num, 100, 200, mtu);
        if (rc == 0) rc = connect_qp(&p, p.qb, p.qa->qp_num, 200, 100, mtu);
        if (rc == 0) printf("QPs %u and %u connected (RTS)\n", p.qa->qp_num, p.qb->qp_num);
        if (rc == 0) rc = traffic(&p);
    }
    tear_down(&p);
    hoop__ibv_unload(&p.v);
    printf("%s\n", rc == 0 ? "PASS" : "FAIL");
    return rc == 0 ? 0 : 1;
}
