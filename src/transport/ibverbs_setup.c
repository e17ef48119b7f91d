/* RDMA verbs transport: listening (the port, the completion queue and channel), connecting the
 * queue pairs through the out-of-band exchange, settling, and close. ibverbs.h says how it works. */
#define HOOP__LOG_SUBSYS HOOP__SUB_TRANSPORT /* of its INFO and TRACE lines (base/log.h) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/clock.h"
#include "transport/transport.h"

#include "transport/ibverbs.h"

/* A peer that is gone fails a send after QP_TIMEOUT (4.096 us * 2^14: 67 ms) times 1 + QP_RETRY
 * tries, about half a second. 7 would mean retry for ever, on soft-RoCE at least. */
#define QP_TIMEOUT 14
#define QP_RETRY 6
/* Credits keep receivers ready, so receiver-not-ready means something is wrong: 6 tries, each
 * after the 41 ms that MIN_RNR_TIMER 24 asks for. */
#define QP_RNR_RETRY 6
#define MIN_RNR_TIMER 24

/* Whether this machine has an RDMA device at all (sysfs): without one, auto does not even load the
 * library. */
static int any_device(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    if (d == NULL) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n > 0;
}

/* Finds the port and makes what every peer shares. 0, or -1 with the sentence in err. */
static int open_port(hoop__tp_t *tp, char *err, size_t errlen)
{
    const hoop__config_t *cfg = tp->p.cfg;
    if (hoop__ibv_load(&tp->v, cfg->test_ibv_double, err, errlen) != 0) return -1;
    tp->loaded = 1;
    hoop__ibv_hca_t hca;
    int gidx = cfg->ib_gid_index;
    if (hoop__ibv_hca_parse(cfg->ib_hca, &hca, err, errlen) != 0) return -1;
    hoop__ibv_port_t ports[8];
    int n = hoop__ibv_discover(&tp->v, &hca, gidx, ports, 8, tp->p.log, err, errlen);
    if (n <= 0) return -1;
    int k = 0;
    while (k < n && ports[k].iwarp) k++; /* iWARP connects through the RDMA CM: not here yet */
    if (k == n) {
        snprintf(err, errlen,
                 "the only usable RDMA ports are iWARP (%s:%d), which this transport "
                 "cannot connect yet",
                 ports[0].dev, ports[0].port);
        return -1;
    }
    tp->port = ports[k];
    snprintf(tp->where, sizeof(tp->where), "%s:%d", tp->port.dev, tp->port.port);
    const char *what = "";
    if ((tp->ctx = hoop__ibv_open_by_name(&tp->v, tp->port.dev)) == NULL)
        what = "ibv_open_device";
    else if ((tp->pd = tp->v.alloc_pd(tp->ctx)) == NULL)
        what = "ibv_alloc_pd";
    else if ((tp->ch = tp->v.create_comp_channel(tp->ctx)) == NULL)
        what = "ibv_create_comp_channel";
    else if (fcntl(tp->ch->fd, F_SETFL, fcntl(tp->ch->fd, F_GETFL) | O_NONBLOCK) != 0 ||
             fcntl(tp->ctx->async_fd, F_SETFL, fcntl(tp->ctx->async_fd, F_GETFL) | O_NONBLOCK) != 0)
        what = "fcntl";
    if (what[0] != '\0') {
        snprintf(err, errlen, "%s: %s: %s", tp->where, what, strerror(errno));
        return -1;
    }
    tp->probe_word = calloc(1, 64);
    tp->probe_mr = tp->probe_word == NULL
                       ? NULL
                       : tp->v.reg_mr(tp->pd, tp->probe_word, 64,
                                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (tp->probe_mr == NULL) {
        snprintf(err, errlen, "%s: ibv_reg_mr: %s", tp->where, strerror(errno));
        return -1;
    }
    const char *why;
    if (hoop__ibv_mrc_init(&tp->mrc, &tp->v, tp->pd, tp->p.cfg->ib_reg_cache, tp->probe_word, &why,
                           err, errlen) != 0)
        return -1;
    if (why != NULL)
        HOOP__INFO(tp->p.log,
                   "ibverbs: no registration cache (%s): zero-copy buffers are "
                   "registered per message",
                   why);
    return 0;
}

hoop_result_t hoop__ibt_listen(const hoop__tp_params_t *p, hoop__tp_t **out, char *addr,
                               size_t addrlen)
{
    hoop__tp_t *tp = calloc(1, sizeof(*tp));
    if (tp == NULL) return HOOP_ERR_NO_MEMORY;
    tp->p = *p;
    tp->wake_fd = tp->epfd = -1;
    *out = tp;
    addr[0] = '\0';
    tp->peers = calloc((size_t)p->size, sizeof(peer_t));
    if (tp->peers == NULL) {
        p->report(p->report_ctx, HOOP_ERR_NO_MEMORY, -1, "ibverbs: out of memory");
        return HOOP_ERR_NO_MEMORY;
    }
    const int forced = strcmp(p->cfg->transport, "ibverbs") == 0;
    char err[400] = "";
    if (p->size > 1 && (p->oob.put == NULL || p->oob.get == NULL))
        snprintf(err, sizeof(err), "no out-of-band exchange to connect queue pairs with");
    else if (p->size > 1 && !forced && !any_device())
        snprintf(err, sizeof(err), "no RDMA device on this host");
    else if (p->size > 1 && open_port(tp, err, sizeof(err)) == 0) {
        /* Descriptors only for an instance that can have peers: under auto every communicator
         * makes one, and most reach nobody this way. */
        char why[300];
        tp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        tp->epfd = tp->wake_fd < 0 ? -1 : epoll_create1(EPOLL_CLOEXEC);
        if (tp->epfd < 0) {
            snprintf(err, sizeof(err), "ibverbs: %s", hoop__fd_error(errno, why, sizeof(why)));
            p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, err);
            return HOOP_ERR_SYSTEM;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
        int e = epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->wake_fd, &ev);
        ev.data.u32 = 1;
        e = e != 0 ? e : epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->ch->fd, &ev);
        ev.data.u32 = 2;
        if (e != 0 || epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->ctx->async_fd, &ev) != 0) {
            p->report(p->report_ctx, HOOP_ERR_SYSTEM, -1, "ibverbs: epoll_ctl failed");
            return HOOP_ERR_SYSTEM;
        }
        char gid[64];
        hoop__ibv_gid_str(tp->port.gid.raw, gid, sizeof(gid));
        snprintf(addr, addrlen, "%s/%s", tp->where, gid);
        return HOOP_OK;
    }
    if (p->size == 1) return HOOP_OK;
    /* Forced, it is an error; under auto this rank just reaches nobody over verbs. */
    char msg[480];
    snprintf(msg, sizeof(msg), "ibverbs: %s", err);
    if (forced) {
        p->report(p->report_ctx, HOOP_ERR_UNSUPPORTED, -1, msg);
        return HOOP_ERR_UNSUPPORTED;
    }
    HOOP__INFO(p->log, "%s: not used", msg);
    return HOOP_OK;
}

/* The queue pair, buffers and receives of peer j, its queue pair in INIT. */
static hoop_result_t make_peer(hoop__tp_t *tp, int j, conn_info_t *mine)
{
    peer_t *pe = &tp->peers[j];
    const hoop__ibv_t *v = &tp->v;
    char msg[320];
    const char *what = NULL;
    int rc = 0;
    pe->rbuf = aligned_alloc(4096, (size_t)NRECV * SLOT_BYTES);
    pe->sbuf = aligned_alloc(4096, (size_t)NSEND * SLOT_BYTES);
    if (pe->rbuf == NULL || pe->sbuf == NULL) {
        hoop__ibt_report(tp, HOOP_ERR_NO_MEMORY, j, "ibverbs: out of memory for the slots");
        return HOOP_ERR_NO_MEMORY;
    }
    pe->rmr = v->reg_mr(tp->pd, pe->rbuf, (size_t)NRECV * SLOT_BYTES, IBV_ACCESS_LOCAL_WRITE);
    pe->smr = pe->rmr == NULL ? NULL : v->reg_mr(tp->pd, pe->sbuf, (size_t)NSEND * SLOT_BYTES, 0);
    if (pe->smr == NULL) {
        snprintf(msg, sizeof(msg),
                 "ibverbs: %s: ibv_reg_mr of %d KiB for rank %d: %s (is the "
                 "locked-memory limit, ulimit -l, large enough?)",
                 tp->where, (NRECV + NSEND) * SLOT_BYTES / 1024, j, strerror(errno));
        hoop__ibt_report(tp, HOOP_ERR_SYSTEM, j, msg);
        return HOOP_ERR_SYSTEM;
    }
    struct ibv_qp_init_attr qia = {
        .send_cq = tp->cq,
        .recv_cq = tp->cq,
        .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = NSEND + ZC_WR + 2,
                .max_recv_wr = NRECV,
                .max_send_sge = 1,
                .max_recv_sge = 1},
    };
    pe->qp = v->create_qp(tp->pd, &qia);
    if (pe->qp == NULL) {
        rc = errno;
        what = "ibv_create_qp";
    } else {
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                                .pkey_index = 0,
                                .port_num = (uint8_t)tp->port.port,
                                .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
        rc = v->modify_qp(pe->qp, &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        what = "queue pair to INIT";
        for (int i = 0; i < NRECV && rc == 0; i++) {
            rc = hoop__ibt_post_slot(tp, j, i);
            what = "ibv_post_recv";
        }
        if (rc == 0) what = NULL;
    }
    if (what != NULL) {
        snprintf(msg, sizeof(msg), "ibverbs: %s: %s for rank %d: %s", tp->where, what, j,
                 strerror(rc));
        hoop__ibt_report(tp, HOOP_ERR_SYSTEM, j, msg);
        return HOOP_ERR_SYSTEM;
    }
    pe->nsfree = NSEND;
    for (int i = 0; i < NSEND; i++) pe->sfree[i] = NSEND - 1 - i;
    pe->credits = NSLOTS;
    uint64_t h = tp->p.comm_id ^ ((uint64_t)tp->p.rank << 40) ^ ((uint64_t)j << 20) ^
                 (uint64_t)pe->qp->qp_num;
    h = (h ^ (h >> 31)) * 0x9e3779b97f4a7c15ull;
    *mine = (conn_info_t){.magic = CONN_MAGIC,
                          .comm_id = tp->p.comm_id,
                          .probe_addr = (uintptr_t)tp->probe_word,
                          .rank = (uint32_t)tp->p.rank,
                          .qpn = pe->qp->qp_num,
                          .psn = (uint32_t)(h >> 40) & 0xffffff,
                          .probe_rkey = tp->probe_mr->rkey,
                          .nslots = NSLOTS,
                          .slot_bytes = SLOT_BYTES,
                          .lid = tp->port.lid};
    struct ibv_port_attr pa;
    mine->mtu = tp->v.query_port(tp->ctx, (uint8_t)tp->port.port, &pa) == 0 ? (uint8_t)pa.active_mtu
                                                                            : (uint8_t)IBV_MTU_1024;
    memcpy(mine->gid, tp->port.gid.raw, 16);
    return HOOP_OK;
}

/* RESET..INIT done: to RTR and RTS towards what peer j left us. */
static hoop_result_t join_peer(hoop__tp_t *tp, int j, const conn_info_t *mine)
{
    peer_t *pe = &tp->peers[j];
    const conn_info_t *r = &pe->remote;
    char msg[400];
    if (r->magic != CONN_MAGIC || r->comm_id != tp->p.comm_id || r->rank != (uint32_t)j ||
        r->nslots != NSLOTS || r->slot_bytes != SLOT_BYTES) {
        snprintf(msg, sizeof(msg),
                 "ibverbs: rank %d left connection data that is not this "
                 "communicator's or this version's (%u slots of %u bytes)",
                 j, r->nslots, r->slot_bytes);
        hoop__ibt_report(tp, HOOP_ERR_INTERNAL, j, msg);
        return HOOP_ERR_INTERNAL;
    }
    enum ibv_mtu mtu = r->mtu < mine->mtu ? (enum ibv_mtu)r->mtu : (enum ibv_mtu)mine->mtu;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
                            .path_mtu = mtu,
                            .dest_qp_num = r->qpn,
                            .rq_psn = r->psn,
                            .max_dest_rd_atomic = 1,
                            .min_rnr_timer = MIN_RNR_TIMER};
    a.ah_attr.port_num = (uint8_t)tp->port.port;
    if (tp->port.ethernet) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)tp->port.gid_index;
        a.ah_attr.grh.hop_limit = 64;
    } else {
        a.ah_attr.dlid = r->lid;
    }
    int rc = tp->v.modify_qp(pe->qp, &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    const char *what = "RTR";
    if (rc == 0) {
        memset(&a, 0, sizeof(a));
        a.qp_state = IBV_QPS_RTS;
        a.timeout = QP_TIMEOUT;
        a.retry_cnt = QP_RETRY;
        a.rnr_retry = QP_RNR_RETRY;
        a.sq_psn = mine->psn;
        a.max_rd_atomic = 1;
        rc = tp->v.modify_qp(pe->qp, &a,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
        what = "RTS";
    }
    char gid[64];
    hoop__ibv_gid_str(r->gid, gid, sizeof(gid));
    if (rc != 0) {
        snprintf(msg, sizeof(msg),
                 "ibverbs: %s: queue pair for rank %d (its QP %u, GID %s) to %s: %s", tp->where, j,
                 r->qpn, gid, what, strerror(rc));
        hoop__ibt_report(tp, HOOP_ERR_SYSTEM, j, msg);
        return HOOP_ERR_SYSTEM;
    }
    pe->up = 1;
    char port[160];
    hoop__ibv_port_str(&tp->port, port, sizeof(port));
    HOOP__INFO(tp->p.log,
               "ibverbs: rank %d over %s (GID index %d), QP %u to its QP %u at GID %s, "
               "path MTU %d",
               j, port, tp->port.gid_index, pe->qp->qp_num, r->qpn, gid, hoop__ibv_mtu_bytes(mtu));
    return HOOP_OK;
}

static hoop_result_t oob_failed(hoop__tp_t *tp, hoop_result_t rc, int j, const char *what)
{
    char msg[480];
    snprintf(msg, sizeof(msg), "ibverbs: %s with rank %d: %s", what, j,
             tp->p.oob.error != NULL ? tp->p.oob.error(tp->p.oob.ctx) : hoop__error_string(rc));
    hoop__ibt_report(tp, rc, j, msg);
    return rc;
}

/* A failed connect tells the peers already connected why (best effort). */
static hoop_result_t connect_failed(hoop__tp_t *tp, hoop_result_t rc)
{
    hoop__ibt_abort(tp, rc, tp->conn_err);
    return rc;
}

hoop_result_t hoop__ibt_connect(hoop__tp_t *tp, const char *const *addrs, double deadline)
{
    const int n = tp->p.size;
    for (int j = 0; j < n; j++)
        if (j != tp->p.rank && addrs[j] != NULL) {
            tp->peers[j].used = 1;
            tp->npeers++;
        }
    if (tp->npeers == 0) return HOOP_OK;
    if (tp->ch == NULL) {
        hoop__ibt_report(tp, HOOP_ERR_INTERNAL, -1, "ibverbs: peers to connect but no RDMA port");
        return HOOP_ERR_INTERNAL;
    }
    tp->cq = tp->v.create_cq(tp->ctx, tp->npeers * (NSEND + ZC_WR + 2 + NRECV) + 16, NULL, tp->ch,
                             0);
    if (tp->cq == NULL) {
        char msg[200];
        snprintf(msg, sizeof(msg), "ibverbs: %s: ibv_create_cq: %s", tp->where, strerror(errno));
        hoop__ibt_report(tp, HOOP_ERR_SYSTEM, -1, msg);
        return HOOP_ERR_SYSTEM;
    }
    conn_info_t *mine = calloc((size_t)n, sizeof(*mine));
    if (mine == NULL) return HOOP_ERR_NO_MEMORY;
    hoop_result_t rc = HOOP_OK;
    /* Ours first, to everyone, and only then theirs: nobody waits on a peer that waits on it. */
    for (int j = 0; j < n && rc == HOOP_OK; j++) {
        if (!tp->peers[j].used) continue;
        rc = make_peer(tp, j, &mine[j]);
        if (rc == HOOP_OK) {
            rc = tp->p.oob.put(tp->p.oob.ctx, "ibverbs-qp", j, &mine[j], sizeof(mine[j]));
            if (rc != HOOP_OK) oob_failed(tp, rc, j, "leaving connection data");
        }
    }
    for (int j = 0; j < n && rc == HOOP_OK; j++) {
        if (!tp->peers[j].used) continue;
        size_t len = 0;
        rc = tp->p.oob.get(tp->p.oob.ctx, "ibverbs-qp", j, &tp->peers[j].remote,
                           sizeof(conn_info_t), &len, deadline);
        if (rc != HOOP_OK)
            oob_failed(tp, rc, j, "waiting for connection data");
        else if (len != sizeof(conn_info_t))
            memset(&tp->peers[j].remote, 0, sizeof(conn_info_t));
        if (rc == HOOP_OK) rc = join_peer(tp, j, &mine[j]);
    }
    free(mine);
    /* Every queue pair of a pair is ready to receive before either end sends. */
    const uint8_t one = 1;
    for (int j = 0; j < n && rc == HOOP_OK; j++)
        if (tp->peers[j].used) {
            rc = tp->p.oob.put(tp->p.oob.ctx, "ibverbs-rtr", j, &one, 1);
            if (rc != HOOP_OK) oob_failed(tp, rc, j, "saying its queue pair is ready");
        }
    for (int j = 0; j < n && rc == HOOP_OK; j++)
        if (tp->peers[j].used) {
            uint8_t b;
            size_t len;
            rc = tp->p.oob.get(tp->p.oob.ctx, "ibverbs-rtr", j, &b, 1, &len, deadline);
            if (rc != HOOP_OK) oob_failed(tp, rc, j, "waiting for its queue pair to be ready");
        }
    return rc == HOOP_OK ? HOOP_OK : connect_failed(tp, rc);
}

/* settle()'s verdict once the transport failed after this rank sent its ready notices: a peer
 * that aborted after it had said ready (on the same queue pair, so in that order) leaves a
 * connected, aborted transport, as TCP and shared memory do. */
static hoop_result_t settled_failed(const hoop__tp_t *tp)
{
    return tp->aborted_ready ? HOOP_OK : tp->failed;
}

hoop_result_t hoop__ibt_settle(hoop__tp_t *tp, double deadline)
{
    if (tp->failed) return tp->failed;
    for (int j = 0; j < tp->p.size; j++)
        if (tp->peers[j].up && hoop__ibt_send_ctrl(tp, j, F_READY, 0, NULL, 0) != 0 &&
            !tp->failed) {
            char msg[200];
            snprintf(msg, sizeof(msg), "ibverbs: cannot send rank %d the ready notice", j);
            hoop__ibt_report(tp, HOOP_ERR_SYSTEM, j, msg);
            return connect_failed(tp, HOOP_ERR_SYSTEM);
        }
    for (;;) {
        if (tp->failed) return settled_failed(tp);
        char missing[128] = "";
        size_t o = 0;
        for (int j = 0; j < tp->p.size && o + 12 < sizeof(missing); j++)
            if (tp->peers[j].used && !tp->peers[j].ready)
                o += (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%d", o ? "," : "", j);
        if (o == 0) {
            tp->settled = 1;
            return HOOP_OK;
        }
        double left = deadline - hoop__now();
        if (left <= 0) {
            char msg[200];
            snprintf(msg, sizeof(msg), "timed out waiting for rank(s) %s to finish connecting",
                     missing);
            hoop__ibt_report(tp, HOOP_ERR_TIMEOUT, -1, msg);
            return connect_failed(tp, HOOP_ERR_TIMEOUT);
        }
        hoop__ibt_progress(tp, left > 0.1 ? 100 : (int)(left * 1000) + 1);
    }
}

/* The goodbyes of close(), and time for them to leave before the queue pairs go. */
static void goodbyes(hoop__tp_t *tp)
{
    if (tp->failed || tp->cq == NULL) return;
    for (int j = 0; j < tp->p.size; j++)
        if (tp->peers[j].up && !tp->peers[j].lost && !tp->peers[j].gone)
            (void)hoop__ibt_send_ctrl(tp, j, F_BYE, 0, NULL, 0);
    double end = hoop__now() + GOODBYE_WAIT;
    for (;;) {
        int busy = 0;
        for (int j = 0; j < tp->p.size; j++) busy |= tp->peers[j].up && tp->peers[j].inflight > 0;
        if (!busy || hoop__now() > end) return;
        (void)hoop__ibt_poll(tp);
    }
}

void hoop__ibt_close(hoop__tp_t *tp)
{
    if (tp == NULL) return;
    /* Queued transfers are dropped without completion: their memory may be gone already. */
    for (int j = 0; tp->peers != NULL && j < tp->p.size; j++) {
        peer_t *pe = &tp->peers[j];
        pe->sq = pe->sq_tail = pe->rq = pe->rq_tail = pe->zx = NULL;
        memset(pe->sx, 0, sizeof(pe->sx));
    }
    goodbyes(tp);
    const hoop__ibv_t *v = &tp->v;
    for (int j = 0; tp->peers != NULL && j < tp->p.size; j++) {
        peer_t *pe = &tp->peers[j];
        if (pe->qp != NULL) v->destroy_qp(pe->qp);
        hoop__ibt_zc_drop(tp, j);
        if (pe->rmr != NULL) v->dereg_mr(pe->rmr);
        if (pe->smr != NULL) v->dereg_mr(pe->smr);
        free(pe->rbuf);
        free(pe->sbuf);
    }
    if (tp->cq != NULL) {
        if (tp->notify) { /* an event may be pending: take it, or destroying the CQ waits */
            struct pollfd pf = {.fd = tp->ch->fd, .events = POLLIN};
            struct ibv_cq *cq;
            void *ctx;
            if (poll(&pf, 1, 0) == 1 && v->get_cq_event(tp->ch, &cq, &ctx) == 0)
                v->ack_cq_events(cq, 1);
        }
        v->destroy_cq(tp->cq);
    }
    if (tp->ch != NULL) v->destroy_comp_channel(tp->ch);
    if (tp->mrc.on)
        HOOP__INFO(tp->p.log,
                   "ibverbs: registration cache: %llu hits, %llu misses, %llu stale, %llu "
                   "registered per message",
                   (unsigned long long)tp->mrc.hits, (unsigned long long)tp->mrc.misses,
                   (unsigned long long)tp->mrc.stale, (unsigned long long)tp->mrc.transient);
    hoop__ibv_mrc_fini(&tp->mrc);
    if (tp->probe_mr != NULL) v->dereg_mr(tp->probe_mr);
    free(tp->probe_word);
    if (tp->pd != NULL) v->dealloc_pd(tp->pd);
    if (tp->ctx != NULL) v->close_device(tp->ctx);
    if (tp->loaded) hoop__ibv_unload(&tp->v);
    if (tp->wake_fd >= 0) close(tp->wake_fd);
    if (tp->epfd >= 0) close(tp->epfd);
    free(tp->peers);
    free(tp);
}
