/* Transport conformance: the cases of failures (peers that die, close, abort or never come),
 * waiting and set-up. */
#include "conformance.h"

/* Rank 0 dies (exit, or SIGKILL) in the middle of a large send while rank 1 waits on receives
 * from it: rank 1 must fail within 2 s, naming rank 0. */
int case_peer_exit(ctx_t *c)
{
    const size_t big = 16 * (size_t)MIB, second = 1 * (size_t)MIB;
    if (c->rank == 0) {
        uint8_t *out = malloc(big), *in = malloc(big);
        REQUIRE(c, out != NULL && in != NULL, "out of memory");
        fill(out, big, seed_of(c, 0, 1, 1));
        hoop__xfer_t x, y;
        hoop__wire_hdr_t h = mkhdr(c, 0, 1, 1, big);
        xinit(&x, HOOP__XFER_SEND, 1, &h, out, big);
        h = mkhdr(c, 1, 3, 3, big);
        xinit(&y, HOOP__XFER_RECV, 1, &h, in, big);
        REQUIRE(c, board_wait(c, B_POSTED, 1, 10) == 0, "rank 1 never posted");
        c->ops->post(c->tp, &x);
        c->ops->post(c->tp, &y);
        double until = now_s() + 0.003;
        while (now_s() < until && !x.done) c->ops->progress(c->tp, 0);
        atomic_store(&c->board->v[B_SENT_DONE], x.done);
        atomic_store(&c->board->v[B_T_EVENT], now_ns());
        if (c->variant == 0) _exit(0);
        raise(SIGKILL);
        return 1;
    }
    uint8_t *a = rbuf_new(big), *b = rbuf_new(second), *s = malloc(big);
    REQUIRE(c, a != NULL && b != NULL && s != NULL, "out of memory");
    fill(s, big, seed_of(c, 1, 0, 3));
    hoop__xfer_t xa, xb, xs;
    hoop__wire_hdr_t ha = mkhdr(c, 0, 1, 1, big), hb = mkhdr(c, 0, 2, 2, second);
    hoop__wire_hdr_t hs = mkhdr(c, 1, 3, 3, big);
    xinit(&xa, HOOP__XFER_RECV, 0, &ha, a, big);
    xinit(&xb, HOOP__XFER_RECV, 0, &hb, b, second);
    xinit(&xs, HOOP__XFER_SEND, 0, &hs, s, big);
    c->ops->post(c->tp, &xa);
    c->ops->post(c->tp, &xb);
    c->ops->post(c->tp, &xs);
    atomic_store(&c->board->v[B_POSTED], 1);
    hoop__xfer_t *all[3] = {&xa, &xb, &xs};
    double end = now_s() + lim(c, 15), t_b = 0;
    while (!(xa.done && xb.done && xs.done) && now_s() < end) {
        c->ops->progress(c->tp, 50);
        if (xb.done && t_b == 0) t_b = now_s();
    }
    TRY(drive(c, all, 3, 0, "transfers with the rank that died"));
    if (t_b == 0) t_b = now_s();
    int64_t t_dead = atomic_load(&c->board->v[B_T_EVENT]);
    REQUIRE(c, t_dead != 0, "transfers ended before rank 0 died");
    double late = t_b - (double)t_dead * 1e-9;
    REQUIRE(c, is_fail_code(xb.status), "the receive rank 0 never sent: %s, expected %s or %s",
            hoop_error_string(xb.status), hoop_error_string(HOOP_ERR_PEER_LOST),
            hoop_error_string(HOOP_ERR_ABORTED));
    REQUIRE(c, late < lim(c, 2.0), "failed %.2f s after rank 0 died (at most 2 s)", late);
    if (xa.status == HOOP_OK) {
        /* It got through before the end: then it must be whole. */
        TRY(check_recv(c, &xa, &ha, seed_of(c, 0, 1, 1), "the large message before the exit"));
    } else {
        REQUIRE(c, is_fail_code(xa.status), "the interrupted receive: %s",
                hoop_error_string(xa.status));
    }
    REQUIRE(c, xs.status == HOOP_OK || is_fail_code(xs.status), "the send to the dead rank: %s",
            hoop_error_string(xs.status));
    REQUIRE(c, c->rep.n > 0 && c->rep.peer == 0 && strstr(c->rep.msg, "rank 0") != NULL,
            "report should name rank 0: %d report(s), peer %d, \"%s\"", c->rep.n, c->rep.peer,
            c->rep.msg);
    if (c->o->verbose)
        notef(c,
              "failed %.3f s after the death; large send %s before it; large receive %s; "
              "report: %s",
              late, atomic_load(&c->board->v[B_SENT_DONE]) ? "done" : "not done",
              hoop_error_string(xa.status), c->rep.msg);
    /* Later transfers to the dead rank fail too, without waiting. */
    hoop__xfer_t z;
    hoop__wire_hdr_t hz = mkhdr(c, 1, 4, 4, 8);
    xinit(&z, HOOP__XFER_SEND, 0, &hz, s, 8);
    c->ops->post(c->tp, &z);
    TRY(drive1(c, &z, 1, "a send posted after the peer died"));
    REQUIRE(c, z.status != HOOP_OK, "a send to the dead rank succeeded");
    free(a);
    free(b);
    free(s);
    return 0;
}

/* Rank 0 sends one last message and closes its instance while rank 1 waits on a second one;
 * rank 0's process stays: rank 1 gets the message that was sent, then fails within 2 s. */
int case_peer_close(ctx_t *c)
{
    uint8_t b[100 + GUARD];
    hoop__wire_hdr_t h1 = mkhdr(c, 0, 1, 1, 100);
    if (c->rank == 0) {
        REQUIRE(c, board_wait(c, B_POSTED, 1, 10) == 0, "rank 1 never posted");
        fill(b, 100, seed_of(c, 0, 1, 1));
        hoop__xfer_t x;
        xinit(&x, HOOP__XFER_SEND, 1, &h1, b, 100);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 10, "the last send"));
        REQUIRE(c, x.status == HOOP_OK, "the last send: %s", hoop_error_string(x.status));
        sleep_s(0.1);
        atomic_store(&c->board->v[B_T_EVENT], now_ns());
        c->ops->close(c->tp);
        c->tp = NULL;
        REQUIRE(c, board_wait(c, B_RELEASE, 1, 10) == 0, "rank 1 did not finish");
        return 0;
    }
    const size_t len = MIB;
    uint8_t *r = rbuf_new(len);
    REQUIRE(c, r != NULL, "out of memory");
    memset(b, GUARD_BYTE, sizeof(b));
    hoop__xfer_t x1, x2;
    hoop__wire_hdr_t h2 = mkhdr(c, 0, 2, 2, len);
    xinit(&x1, HOOP__XFER_RECV, 0, &h1, b, 100);
    xinit(&x2, HOOP__XFER_RECV, 0, &h2, r, len);
    c->ops->post(c->tp, &x1);
    c->ops->post(c->tp, &x2);
    atomic_store(&c->board->v[B_POSTED], 1);
    double end = now_s() + lim(c, 5);
    while (!x2.done && now_s() < end) c->ops->progress(c->tp, 100);
    double t_fail = now_s();
    atomic_store(&c->board->v[B_RELEASE], 1);
    TRY(check_recv(c, &x1, &h1, seed_of(c, 0, 1, 1), "the message sent before close()"));
    REQUIRE(c, x2.done, "still waiting %.0f s after rank 0 closed", lim(c, 5));
    double late = t_fail - (double)atomic_load(&c->board->v[B_T_EVENT]) * 1e-9;
    REQUIRE(c, is_fail_code(x2.status), "receive from the closed rank: %s",
            hoop_error_string(x2.status));
    REQUIRE(c, late < lim(c, 2.0), "failed %.2f s after rank 0 closed (at most 2 s)", late);
    REQUIRE(c, c->rep.n > 0 && c->rep.peer == 0 && strstr(c->rep.msg, "rank 0") != NULL,
            "report should name rank 0: %d report(s), peer %d, \"%s\"", c->rep.n, c->rep.peer,
            c->rep.msg);
    free(r);
    return 0;
}

/* Rank 1 aborts with a reason while rank 0 sleeps waiting on it: rank 0 fails within 2 s with
 * HOOP_ERR_ABORTED and "rank 1 aborted: reason text". Rank 1 stays alive without progressing, so
 * the reason has to travel, not the exit. */
int case_abort(ctx_t *c)
{
    const char *reason = "reason text";
    if (c->rank == 1) {
        /* The receive for rank 0's send, never progressed: abort() must fail it. */
        const size_t slen = 8 * (size_t)MIB;
        uint8_t *q = rbuf_new(slen);
        REQUIRE(c, q != NULL, "out of memory");
        hoop__xfer_t x, y;
        hoop__wire_hdr_t h = mkhdr(c, 0, 2, 2, slen);
        xinit(&x, HOOP__XFER_RECV, 0, &h, q, slen);
        c->ops->post(c->tp, &x);
        REQUIRE(c, board_wait(c, B_POSTED, 1, 10) == 0, "rank 0 never posted");
        sleep_s(0.1); /* rank 0 is asleep in progress() by now */
        atomic_store(&c->board->v[B_T_EVENT], now_ns());
        c->ops->abort(c->tp, HOOP_ERR_ABORTED, reason);
        REQUIRE(c, x.done && x.status == HOOP_ERR_ABORTED,
                "a queued receive after abort(): %s, expected %s at once",
                x.done ? hoop_error_string(x.status) : "not done",
                hoop_error_string(HOOP_ERR_ABORTED));
        c->ops->abort(c->tp, HOOP_ERR_TIMEOUT, "a second reason");
        h = mkhdr(c, 1, 1, 1, 16);
        xinit(&y, HOOP__XFER_SEND, 0, &h, q, 16);
        c->ops->post(c->tp, &y);
        REQUIRE(c, y.done && y.status == HOOP_ERR_ABORTED,
                "a send posted after abort(): %s, expected %s at once",
                y.done ? hoop_error_string(y.status) : "not done",
                hoop_error_string(HOOP_ERR_ABORTED));
        REQUIRE(c, board_wait(c, B_RELEASE, 1, 10) == 0, "rank 0 did not finish");
        free(q);
        return 0;
    }
    const size_t rlen = MIB, slen = 8 * (size_t)MIB;
    uint8_t *r = rbuf_new(rlen), *s = malloc(slen);
    REQUIRE(c, r != NULL && s != NULL, "out of memory");
    fill(s, slen, seed_of(c, 0, 1, 2));
    hoop__xfer_t xr, xs;
    hoop__wire_hdr_t hr = mkhdr(c, 1, 1, 1, rlen), hs = mkhdr(c, 0, 2, 2, slen);
    xinit(&xr, HOOP__XFER_RECV, 1, &hr, r, rlen);
    xinit(&xs, HOOP__XFER_SEND, 1, &hs, s, slen);
    c->ops->post(c->tp, &xr);
    c->ops->post(c->tp, &xs);
    atomic_store(&c->board->v[B_POSTED], 1);
    double end = now_s() + lim(c, 10), t_fail = 0;
    while (!xr.done && now_s() < end) c->ops->progress(c->tp, 1000);
    t_fail = now_s();
    atomic_store(&c->board->v[B_RELEASE], 1);
    REQUIRE(c, xr.done, "the receive from the aborted rank is still waiting after %.0f s",
            lim(c, 10));
    int64_t t_ab = atomic_load(&c->board->v[B_T_EVENT]);
    double late = t_fail - (double)t_ab * 1e-9;
    REQUIRE(c, t_ab != 0, "the receive ended before rank 1 aborted: %s",
            hoop_error_string(xr.status));
    REQUIRE(c, late < lim(c, 2.0), "failed %.2f s after rank 1 aborted (at most 2 s)", late);
    REQUIRE(c, c->rep.n > 0 && c->rep.peer == 1, "report: %d call(s), peer %d, expected peer 1",
            c->rep.n, c->rep.peer);
    REQUIRE(c, xr.status == HOOP_ERR_ABORTED, "receive from the aborting rank: %s, expected %s",
            hoop_error_string(xr.status), hoop_error_string(HOOP_ERR_ABORTED));
    REQUIRE(c, c->rep.code == HOOP_ERR_ABORTED, "report code %s, expected %s",
            hoop_error_string(c->rep.code), hoop_error_string(HOOP_ERR_ABORTED));
    REQUIRE(c, strstr(c->rep.msg, "rank 1 aborted: reason text") != NULL,
            "report \"%s\" should contain \"rank 1 aborted: reason text\"", c->rep.msg);
    hoop__xfer_t *xsp = &xs;
    TRY(drive(c, &xsp, 1, 2, "the send to the aborted rank"));
    free(r);
    free(s);
    return 0;
}

/* Connecting to a rank that never shows up, or to a bad address: a clear error within the
 * deadline, and transfers on the failed instance complete at once with an error. */
static int try_connect(ctx_t *c, int me, const char *peer_addr, hoop_result_t want,
                       const char *want_text, double deadline_s, const char *what)
{
    memset(&c->rep, 0, sizeof(c->rep));
    c->p.rank = me;
    c->p.size = 2;
    char own[ADDR_MAX];
    hoop__tp_t *tp = NULL;
    hoop_result_t rc = c->ops->listen(&c->p, &tp, own, sizeof(own));
    REQUIRE(c, rc == HOOP_OK && tp != NULL, "%s: listen: %s", what, hoop_error_string(rc));
    const char *addrs[2];
    addrs[me] = own;
    addrs[1 - me] = peer_addr;
    double t0 = now_s();
    rc = c->ops->connect(tp, addrs, t0 + deadline_s);
    double dt = now_s() - t0;
    if (rc != want || dt > deadline_s + lim(c, 1.0) || c->rep.n == 0 ||
        strstr(c->rep.msg, want_text) == NULL) {
        failf(c, __LINE__,
              "%s: connect returned %s after %.2f s (expected %s within %.1f s), "
              "report: %d call(s), \"%s\" (expected to contain \"%s\")",
              what, hoop_error_string(rc), dt, hoop_error_string(want), deadline_s, c->rep.n,
              c->rep.msg, want_text);
        c->ops->close(tp);
        return 1;
    }
    uint8_t b[8 + GUARD];
    hoop__xfer_t x;
    hoop__wire_hdr_t h = mkhdr(c, 1 - me, 1, 1, 8);
    xinit(&x, HOOP__XFER_RECV, 1 - me, &h, b, 8);
    c->ops->post(c->tp = tp, &x);
    int r = drive1(c, &x, 1, "a receive on an instance that failed to connect");
    c->tp = NULL;
    if (r == 0 && x.status == HOOP_OK) {
        failf(c, __LINE__, "%s: a receive after the failed connect succeeded", what);
        r = 1;
    }
    c->ops->close(tp);
    if (c->o->verbose)
        notef(c, "%s: %s in %.2f s: %s", what, hoop_error_string(want), dt, c->rep.msg);
    return r;
}

/* A loopback port that nobody listens on (bound, then closed). */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(a);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &sl) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* The pid of a process that has exited and been reaped. */
static int dead_pid(void)
{
    pid_t p = fork();
    if (p == 0) _exit(0);
    if (p > 0) waitpid(p, NULL, 0);
    return (int)p;
}

/* An address that connect() must refuse, as rank me of 2, and what it must say. */
typedef struct bad_addr {
    char addr[ADDR_MAX];
    int me;
    hoop_result_t code;
    const char *text; /* the report contains it */
    double deadline_s;
    const char *what;
} bad_addr_t;

#define BAD_MAX 8

static int tcp_bad_addrs(ctx_t *c, bad_addr_t *bad, int *n)
{
    int port = dead_port();
    REQUIRE(c, port > 0, "no free loopback port");
    bad_addr_t b[] = {
        {"", 1, HOOP_ERR_TIMEOUT, "rank 0", 0.5, "connect to a closed port"},
        {"", 0, HOOP_ERR_TIMEOUT, "1", 0.5, "wait for a rank that never connects"},
        {"not-an-address", 1, HOOP_ERR_INTERNAL, "rank 0", 1.0, "a malformed address"},
        {"127.0.0.1:99999", 1, HOOP_ERR_INTERNAL, "rank 0", 1.0, "a port out of range"},
    };
    snprintf(b[0].addr, ADDR_MAX, "127.0.0.1:%d", port);
    snprintf(b[1].addr, ADDR_MAX, "127.0.0.1:%d", port);
    *n = (int)(sizeof(b) / sizeof(b[0]));
    memcpy(bad, b, sizeof(b));
    return 0;
}

static int shm_bad_addrs(ctx_t *c, bad_addr_t *bad, int *n)
{
    /* Our own address gives the segment length a peer's must have. */
    char own[ADDR_MAX];
    hoop__tp_t *tp = NULL;
    c->p.rank = 0;
    c->p.size = 2;
    const hoop__transport_ops_t *shm = hoop__tp_registry[hoop__tp_find("shm")].ops;
    REQUIRE(c, shm->listen(&c->p, &tp, own, sizeof(own)) == HOOP_OK, "shm listen");
    shm->close(tp);
    int pid, fd;
    uint64_t nonce;
    size_t len;
    REQUIRE(c, sscanf(own, "%d:%d:%" SCNx64 ":%zu", &pid, &fd, &nonce, &len) == 4,
            "unexpected shm address \"%s\"", own);
    /* Left open: the process ends with the case. */
    int memfd = memfd_create("not-a-segment", MFD_CLOEXEC);
    REQUIRE(c, memfd >= 0 && ftruncate(memfd, (off_t)len) == 0, "memfd: %s", strerror(errno));
    bad_addr_t b[] = {
        {"garbage", 1, HOOP_ERR_INTERNAL, "rank 0", 1.0, "a malformed address"},
        {"", 1, HOOP_ERR_PEER_LOST, "lost rank 0", 1.0, "the pid of an exited process"},
        {"", 1, HOOP_ERR_INTERNAL, "not rank 0's", 1.0, "a memfd that is not a segment"},
        {"", 1, HOOP_ERR_SYSTEM, "rank 0", 1.0, "an fd that is not open"},
        {"", 1, HOOP_ERR_INTERNAL, "rank 0", 1.0, "a segment of another length"},
    };
    snprintf(b[1].addr, ADDR_MAX, "%d:%d:%016" PRIx64 ":%zu", dead_pid(), 3, nonce, len);
    snprintf(b[2].addr, ADDR_MAX, "%d:%d:%016" PRIx64 ":%zu", (int)getpid(), memfd, nonce, len);
    snprintf(b[3].addr, ADDR_MAX, "%d:%d:%016" PRIx64 ":%zu", (int)getpid(), 1000, nonce, len);
    snprintf(b[4].addr, ADDR_MAX, "%d:%d:%016" PRIx64 ":%zu", (int)getpid(), memfd, nonce,
             len + 4096);
    *n = (int)(sizeof(b) / sizeof(b[0]));
    memcpy(bad, b, sizeof(b));
    return 0;
}

/* Verbs connects through the out-of-band exchange: a peer that never leaves its data there. */
static int ibverbs_bad_addrs(ctx_t *c, bad_addr_t *bad, int *n)
{
    (void)c;
    bad_addr_t b[] = {
        {"rxe0:1/::ffff:10.11.0.1", 1, HOOP_ERR_TIMEOUT, "rank 0", 0.5,
         "wait for a rank that never leaves its connection data"},
    };
    *n = (int)(sizeof(b) / sizeof(b[0]));
    memcpy(bad, b, sizeof(b));
    return 0;
}

/* The bad addresses this suite knows for the transport of a registry row (*n = 0 for one it does
 * not: its own parser goes untested here). */
static int bad_addrs(ctx_t *c, const char *name, bad_addr_t *bad, int *n)
{
    *n = 0;
    if (strcmp(name, "tcp") == 0) return tcp_bad_addrs(c, bad, n);
    if (strcmp(name, "shm") == 0) return shm_bad_addrs(c, bad, n);
    if (strcmp(name, "ibverbs") == 0) return ibverbs_bad_addrs(c, bad, n);
    return 0;
}

/* Through mux, every row's bad addresses as the only part of an address on this host, so that
 * mux must give the peer that row; a malformed address; and another host, where the first row
 * that reaches another host is chosen whatever the others publish. */
static int noconnect_mux(ctx_t *c)
{
    char own[ADDR_MAX], key[40], addr[ADDR_MAX];
    hoop__tp_t *tp = NULL;
    c->p.rank = 0;
    c->p.size = 2;
    REQUIRE(c, c->ops->listen(&c->p, &tp, own, sizeof(own)) == HOOP_OK, "listen");
    c->ops->close(tp);
    c->ops->host_key(own, key, sizeof(key));
    REQUIRE(c, key[0] != '\0', "no host identity in \"%s\"", own);
    /* A row this rank publishes nothing for (verbs without an RDMA port) cannot be chosen. */
    char split[ADDR_MAX];
    const char *own_host, *own_parts[HOOP__TP_ROWS_MAX];
    REQUIRE(c, hoop__mux_addr_split(own, split, sizeof(split), &own_host, own_parts) == 0,
            "cannot split \"%s\"", own);
    TRY(try_connect(c, 1, "garbage", HOOP_ERR_INTERNAL, "rank 0", 1.0, "a malformed address"));
    static bad_addr_t bad[HOOP__TP_ROWS_MAX][BAD_MAX];
    int nbad[HOOP__TP_ROWS_MAX], far = -1;
    const char *parts[HOOP__TP_ROWS_MAX] = {NULL};
    for (int t = 0; t < hoop__tp_registry_n; t++) {
        nbad[t] = 0;
        if (own_parts[t][0] != '\0') TRY(bad_addrs(c, hoop__tp_registry[t].name, bad[t], &nbad[t]));
        for (int i = 0; i < nbad[t]; i++) {
            const char *one[HOOP__TP_ROWS_MAX] = {NULL};
            one[t] = bad[t][i].addr;
            REQUIRE(c, hoop__mux_addr(key, one, addr, sizeof(addr)) == 0, "address too long");
            TRY(try_connect(c, bad[t][i].me, addr, bad[t][i].code, bad[t][i].text,
                            bad[t][i].deadline_s, bad[t][i].what));
        }
        hoop__tp_pub_t me = {key, "-"}, other = {"0000000000005eed", "-"};
        if (nbad[t] > 0) parts[t] = bad[t][0].addr;
        if (far < 0 && nbad[t] > 0 && hoop__tp_registry[t].reaches(&me, &other)) far = t;
    }
    if (far < 0) return 0;
    REQUIRE(c, bad[far][0].me == 1, "the first bad address of %s is not for rank 1",
            hoop__tp_registry[far].name);
    REQUIRE(c, hoop__mux_addr("0000000000005eed", parts, addr, sizeof(addr)) == 0,
            "address too long");
    char what[96];
    snprintf(what, sizeof(what), "another host, through %s: %s", hoop__tp_registry[far].name,
             bad[far][0].what);
    return try_connect(c, 1, addr, bad[far][0].code, bad[far][0].text, bad[far][0].deadline_s,
                       what);
}

int case_noconnect(ctx_t *c)
{
    if (c->ops == &hoop__mux_transport) return noconnect_mux(c);
    bad_addr_t bad[BAD_MAX];
    int n;
    TRY(bad_addrs(c, c->ops->name, bad, &n));
    if (n == 0) notef(c, "no bad addresses known for %s", c->ops->name);
    for (int i = 0; i < n; i++)
        TRY(try_connect(c, bad[i].me, bad[i].addr, bad[i].code, bad[i].text, bad[i].deadline_s,
                        bad[i].what));
    return 0;
}

/* wake() from another thread ends a progress(5000) soon; a wake() just before progress() is
 * not lost. */
typedef struct waker {
    ctx_t *c;
    double delay;
    _Atomic int64_t at;
} waker_t;

static void *waker_main(void *arg)
{
    waker_t *w = arg;
    sleep_s(w->delay);
    atomic_store(&w->at, now_ns());
    w->c->ops->wake(w->c->tp);
    return NULL;
}

static int wake_round(ctx_t *c, double delay, const char *what)
{
    waker_t w = {.c = c, .delay = delay};
    atomic_store(&w.at, 0);
    pthread_t th;
    REQUIRE(c, pthread_create(&th, NULL, waker_main, &w) == 0, "pthread_create");
    double t0 = now_s();
    int calls = 0;
    while (atomic_load(&w.at) == 0 && now_s() - t0 < lim(c, 10)) {
        c->ops->progress(c->tp, 5000);
        calls++;
    }
    double t_end = now_s();
    pthread_join(th, NULL);
    int64_t at = atomic_load(&w.at);
    REQUIRE(c, at != 0, "%s: the waker never ran", what);
    double late = t_end - (double)at * 1e-9;
    REQUIRE(c, late < lim(c, 1.0), "%s: progress(5000) returned %.2f s after wake()", what, late);
    if (c->o->verbose)
        notef(c, "%s: returned %.1f ms after wake() (%d progress call(s))", what, late * 1e3,
              calls);
    return 0;
}

/* A wake() that comes just before progress() goes to sleep must still end that sleep: a thread
 * that posts work and then wakes the progressing one cannot know how far it has got. */
int case_wake_pending(ctx_t *c)
{
    if (c->rank == 1) return board_wait(c, B_STEP_DONE, 1, 30) == 0 ? 0 : 1;
    uint8_t b[32 + GUARD];
    hoop__xfer_t x;
    hoop__wire_hdr_t h = mkhdr(c, 1, 1, 1, 32);
    xinit(&x, HOOP__XFER_RECV, 1, &h, b, 32);
    for (int posted = 0; posted < 2; posted++) {
        if (posted) c->ops->post(c->tp, &x);
        for (int i = 0; i < 3; i++) {
            c->ops->wake(c->tp);
            double t0 = now_s();
            c->ops->progress(c->tp, 2000);
            double dt = now_s() - t0;
            REQUIRE(c, dt < lim(c, 1.0),
                    "progress(2000) right after wake() slept %.2f s with %s: "
                    "the wake-up was lost",
                    dt, posted ? "a receive waiting" : "nothing posted");
        }
    }
    atomic_store(&c->board->v[B_STEP_DONE], 1);
    return 0;
}

int case_wake(ctx_t *c)
{
    if (c->rank == 1) {
        REQUIRE(c, board_wait(c, B_STEP_DONE, 1, 30) == 0, "rank 0 did not finish its wake tests");
        uint8_t b[32];
        fill(b, 32, seed_of(c, 1, 0, 1));
        hoop__xfer_t x;
        hoop__wire_hdr_t h = mkhdr(c, 1, 1, 1, 32);
        xinit(&x, HOOP__XFER_SEND, 0, &h, b, 32);
        c->ops->post(c->tp, &x);
        TRY(drive1(c, &x, 10, "send after the wake tests"));
        REQUIRE(c, x.status == HOOP_OK, "send: %s", hoop_error_string(x.status));
        return 0;
    }
    TRY(wake_round(c, 0.1, "nothing posted"));
    uint8_t b[32 + GUARD];
    memset(b, GUARD_BYTE, sizeof(b));
    hoop__xfer_t x;
    hoop__wire_hdr_t h = mkhdr(c, 1, 1, 1, 32);
    xinit(&x, HOOP__XFER_RECV, 1, &h, b, 32);
    c->ops->post(c->tp, &x);
    for (int i = 0; i < 3; i++) TRY(wake_round(c, 0.05 + 0.05 * i, "a receive waiting"));
    REQUIRE(c, !x.done, "the receive completed before rank 1 sent");
    atomic_store(&c->board->v[B_STEP_DONE], 1);
    TRY(drive1(c, &x, 10, "receive after the wake tests"));
    TRY(check_recv(c, &x, &h, seed_of(c, 1, 0, 1), "after the wake tests"));
    return 0;
}

/* progress(t) with nothing to do sleeps: at most about t, and without burning the CPU. The case
 * runs with shm_spin_us = 0. */
static int idle_round(ctx_t *c, const char *what)
{
    const int t_ms = 200;
    double wall0 = now_s(), cpu0 = cpu_s(), worst = 0;
    int calls = 0;
    while (now_s() - wall0 < 0.6) {
        double t = now_s();
        c->ops->progress(c->tp, t_ms);
        t = now_s() - t;
        worst = t > worst ? t : worst;
        calls++;
    }
    double wall = now_s() - wall0, cpu = cpu_s() - cpu0;
    REQUIRE(c, worst < t_ms * 1e-3 + lim(c, 0.25), "%s: progress(%d) took %.0f ms", what, t_ms,
            worst * 1e3);
    REQUIRE(c, cpu < 0.1 * wall + lim(c, 0.03),
            "%s: %.0f ms of CPU in %.0f ms of progress(%d) "
            "(%d calls): it spins",
            what, cpu * 1e3, wall * 1e3, t_ms, calls);
    if (c->o->verbose)
        notef(c, "%s: %d call(s) in %.0f ms, longest %.0f ms, CPU %.1f ms", what, calls, wall * 1e3,
              worst * 1e3, cpu * 1e3);
    return 0;
}

int case_idle(ctx_t *c)
{
    int me = c->rank, peer = 1 - me;
    double t0 = now_s();
    for (int i = 0; i < 100; i++) c->ops->progress(c->tp, 0);
    double dt = now_s() - t0;
    REQUIRE(c, dt < lim(c, 0.2), "100 calls of progress(0) took %.0f ms", dt * 1e3);
    TRY(idle_round(c, "nothing posted"));
    uint8_t in[100 + GUARD], out[100];
    memset(in, GUARD_BYTE, sizeof(in));
    fill(out, 100, seed_of(c, me, peer, 1));
    hoop__xfer_t r, s;
    hoop__wire_hdr_t hr = mkhdr(c, peer, 1, 1, 100), hs = mkhdr(c, me, 1, 1, 100);
    xinit(&r, HOOP__XFER_RECV, peer, &hr, in, 100);
    xinit(&s, HOOP__XFER_SEND, peer, &hs, out, 100);
    c->ops->post(c->tp, &r);
    TRY(idle_round(c, "a receive waiting"));
    REQUIRE(c, !r.done, "the receive completed before the peer sent");
    atomic_fetch_or(&c->board->v[B_STEP_DONE], 1 << me);
    REQUIRE(c, board_wait(c, B_STEP_DONE, 3, 10) == 0, "the peer did not finish");
    c->ops->post(c->tp, &s);
    hoop__xfer_t *both[2] = {&r, &s};
    TRY(drive(c, both, 2, 10, "the exchange after idling"));
    REQUIRE(c, s.status == HOOP_OK, "send: %s", hoop_error_string(s.status));
    TRY(check_recv(c, &r, &hr, seed_of(c, peer, me, 1), "after idling"));
    return 0;
}

/* close() with transfers still queued (large and small, both directions, some half moved):
 * no crash, no leak. Then instances that never connected, and one closed after abort(). */
int case_close(ctx_t *c)
{
    int me = c->rank, peer = 1 - me;
    enum { NB = 4, NS = 40 };
    const size_t big = 2 * (size_t)MIB;
    hoop__xfer_t xb[2 * NB], xsm[NS];
    uint8_t *bufs[2 * NB], small[NS][64];
    for (int i = 0; i < 2 * NB; i++) {
        bufs[i] = malloc(big);
        REQUIRE(c, bufs[i] != NULL, "out of memory");
        memset(bufs[i], i, big);
        int send = (i % 2) == me;
        /* Receives expect other sequence numbers than the peer sends: nothing finishes cleanly. */
        hoop__wire_hdr_t h = mkhdr(c, send ? me : peer, (uint64_t)(send ? i : 100 + i), 1, big);
        xinit(&xb[i], send ? HOOP__XFER_SEND : HOOP__XFER_RECV, peer, &h, bufs[i], big);
        c->ops->post(c->tp, &xb[i]);
    }
    for (int i = 0; i < NS; i++) {
        hoop__wire_hdr_t h = mkhdr(c, me, 500 + (uint64_t)i, 1, 64);
        xinit(&xsm[i], HOOP__XFER_SEND, peer, &h, small[i], 64);
        memset(small[i], i, 64);
        c->ops->post(c->tp, &xsm[i]);
    }
    for (int i = 0; i < 20; i++) c->ops->progress(c->tp, 0);
    atomic_fetch_or(&c->board->v[B_STEP_DONE], 1 << me);
    REQUIRE(c, board_wait(c, B_STEP_DONE, 3, 10) == 0, "the peer did not get here");
    c->ops->close(c->tp);
    c->tp = NULL;
    for (int i = 0; i < 2 * NB; i++) free(bufs[i]);

    /* Listen only, never connected. */
    char addr[ADDR_MAX];
    hoop__tp_t *tp = NULL;
    REQUIRE(c, c->ops->listen(&c->p, &tp, addr, sizeof(addr)) == HOOP_OK, "listen");
    c->ops->close(tp);
    /* Listen, a transfer posted before any connect, abort, close. */
    tp = NULL;
    REQUIRE(c, c->ops->listen(&c->p, &tp, addr, sizeof(addr)) == HOOP_OK, "listen");
    uint8_t b[8];
    hoop__xfer_t x;
    hoop__wire_hdr_t h = mkhdr(c, peer, 1, 1, 8);
    xinit(&x, HOOP__XFER_RECV, peer, &h, b, 8);
    c->ops->post(tp, &x);
    c->ops->abort(tp, HOOP_ERR_ABORTED, "closing");
    REQUIRE(c, x.done && x.status != HOOP_OK, "a receive posted before connect survived abort()");
    c->ops->close(tp);
    return 0;
}

/* Rank 1 calls connect() 0.3 s after rank 0, and rank 0 closes and exits as soon as its
 * connect() returns: connect() means connected both ways, so rank 1's must still succeed. */
int case_late(ctx_t *c)
{
    (void)c;
    return 0;
}
