/* TCP transport: the data path, settling, abort and close. tcp_setup.c says how it works. */
#define HOOP__LOG_SUBSYS HOOP__SUB_TRANSPORT /* of its INFO and TRACE lines (base/log.h) */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/part.h"
#include "transport/transport.h"

#include "transport/tcp.h"

/* ---- data path ---- */

static seg_t *seg_new(hoop__tp_t *tp)
{
    seg_t *s = tp->free_segs;
    if (s != NULL) {
        tp->free_segs = s->next;
        return s;
    }
    return malloc(sizeof(seg_t));
}

static void seg_free(hoop__tp_t *tp, seg_t *s)
{
    s->next = tp->free_segs;
    tp->free_segs = s;
}

static void finish(hoop__xfer_t *x, hoop_result_t st)
{
    if (x->done) return;
    if (x->status == HOOP_OK) x->status = st;
    if (st != HOOP_OK || --*tcp_parts_left(x) == 0) x->done = 1;
}

static int stripes(const hoop__tp_t *tp, size_t len)
{
    return len >= (size_t)tp->nsock * STRIPE_MIN ? tp->nsock : 1;
}

static void fail_queue(hoop__tp_t *tp, seg_t **head, seg_t **tail, hoop_result_t code)
{
    for (seg_t *s = *head, *n; s != NULL; s = n) {
        n = s->next;
        s->x->status = s->x->status ? s->x->status : code;
        s->x->done = 1;
        seg_free(tp, s);
    }
    *head = *tail = NULL;
}

static void send_abort(hoop__tp_t *tp, int j, hoop_result_t code, const char *text, size_t len);

/* Fails everything queued for peer with code, shuts its sockets and reports msg once (as the
 * peer's notice where it came in one). A peer whose connection still works (it sent a mismatched
 * message, say) is told msg first, so that it fails with the cause too. The descriptors stay
 * open until close(): closing a socket with unread data would reset the connection, and the peer
 * could lose that notice. Once settled, the other peers' transfers go on: the communicator
 * aborts the transport (telling them why) as soon as no call it still runs can end, at the latest
 * as the thread that read this gives the engine back. While connecting, the first failure of a
 * peer aborts the whole transport at once. */
static void peer_fail(hoop__tp_t *tp, int peer, hoop_result_t code, const char *msg)
{
    peer_t *pe = &tp->peers[peer];
    if (pe->lost) return;
    pe->lost = 1;
    /* Not back to a peer whose own notice this is (ab_code is set once one came). */
    if (code != HOOP_ERR_PEER_LOST && code != HOOP_ERR_ABORTED && pe->ab_code == HOOP_OK) {
        size_t len = strlen(msg);
        send_abort(tp, peer, code, msg, len < ABORT_MAX ? len : ABORT_MAX);
    }
    for (int k = 0; k < tp->nsock; k++) {
        sock_t *s = &pe->socks[k];
        fail_queue(tp, &s->sq, &s->sq_tail, code);
        fail_queue(tp, &s->rq, &s->rq_tail, code);
        if (s->fd >= 0) shutdown(s->fd, SHUT_RDWR);
    }
    if (pe->ab_heard)
        hoop__tp_report_notice(&tp->p, code, peer, msg, pe->ab_done);
    else
        tp->p.report(tp->p.report_ctx, code, peer, msg);
    if (!tp->abort_sent && !tp->settled) hoop__tcp_abort(tp, code, msg);
}

static void salvage_abort(hoop__tp_t *tp, int peer);

static void peer_lost(hoop__tp_t *tp, int peer, const char *why)
{
    peer_t *pe = &tp->peers[peer];
    if (pe->lost) return;
    char msg[256];
    snprintf(msg, sizeof(msg), "lost connection to rank %d (%s)", peer, why);
    /* A peer that aborted said why before its connections went: that is the error to report. */
    if (!pe->salvaging) {
        pe->salvaging = 1;
        salvage_abort(tp, peer);
        pe->salvaging = 0;
        if (pe->lost) return;
    }
    peer_fail(tp, peer, HOOP_ERR_PEER_LOST, msg);
}

/* Reads header bytes on socket 0 into so->hb until a whole header is there (1), the socket has no
 * more for now (0), or the peer is gone (-1). A peer that said goodbye and then closed, while
 * idle (no receive posted), only marks the socket hung up, for a receive that comes later to
 * report; without a goodbye it died, and is lost at once, as with any end while a receive waits. */
static int fill_hdr(hoop__tp_t *tp, int peer, sock_t *so, int idle)
{
    while (so->hb_len < HOOP__WIRE_HDR_SIZE) {
        ssize_t r = recv(so->fd, so->hb + so->hb_len, HOOP__WIRE_HDR_SIZE - so->hb_len, 0);
        if (r > 0) {
            so->hb_len += (size_t)r;
            tp->peers[peer].moved += (uint64_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        char why[128];
        snprintf(why, sizeof(why), "%s", r == 0 ? "connection closed by peer" : strerror(errno));
        if (idle && ((r == 0 && tp->peers[peer].bye) || tp->peers[peer].salvaging))
            so->hup = 1;
        else
            peer_lost(tp, peer, why);
        return -1;
    }
    return 1;
}

/* The header in hb is an abort notice from peer to this communicator. */
static int is_abort(const hoop__tp_t *tp, int peer, const uint8_t *hb, hoop__wire_hdr_t *h)
{
    return hoop__wire_decode(hb, UINT64_MAX, h) == HOOP_OK && h->kind == HOOP__K_ABORT &&
           h->comm_id == tp->p.comm_id && h->src == (uint32_t)peer;
}

static void finish_abort(hoop__tp_t *tp, int peer)
{
    peer_t *pe = &tp->peers[peer];
    pe->ab_active = 0;
    /* The reason is text from a peer: printable characters only. */
    for (size_t i = 0; i < pe->ab_got; i++) {
        unsigned char c = (unsigned char)pe->ab_text[i];
        if (c < ' ' || c >= 0x7f) pe->ab_text[i] = '?';
    }
    pe->ab_text[pe->ab_got] = '\0';
    /* The peers this rank still waited on: when the notice is a timeout that this rank's own wait
     * caused, they lead to the rank really at fault. */
    char waiting[96] = "";
    size_t o = 0;
    for (int j = 0; j < tp->p.size && o + 12 < sizeof(waiting); j++) {
        const peer_t *q = &tp->peers[j];
        if (j == peer || q->lost || q->socks == NULL) continue;
        int busy = 0;
        for (int k = 0; k < tp->nsock; k++)
            busy |= q->socks[k].rq != NULL || q->socks[k].sq != NULL;
        if (busy) o += (size_t)snprintf(waiting + o, sizeof(waiting) - o, "%s%d", o ? "," : "", j);
    }
    char msg[400];
    int n = snprintf(msg, sizeof(msg), "rank %d aborted: %s", peer,
                     pe->ab_got > 0 ? pe->ab_text : "(no reason given)");
    if (o > 0 && n > 0 && (size_t)n < sizeof(msg))
        snprintf(msg + n, sizeof(msg) - (size_t)n, "; rank %d was still waiting on rank(s) %s",
                 tp->p.rank, waiting);
    pe->ab_heard = 1;
    peer_fail(tp, peer, pe->ab_code, msg);
}

/* Peer said goodbye (see the top): a receive waiting for its next header will never get one. */
static void goodbye_in(hoop__tp_t *tp, int peer)
{
    peer_t *pe = &tp->peers[peer];
    pe->bye = 1;
    if (pe->socks[0].rq != NULL) peer_lost(tp, peer, "it closed its communicator");
}

/* Reads the reason of an abort notice on socket 0; fails the peer once it is in, or once the
 * connection ends (with as much of the reason as came). */
static void read_abort(hoop__tp_t *tp, int peer)
{
    peer_t *pe = &tp->peers[peer];
    sock_t *so = &pe->socks[0];
    while (pe->ab_got < pe->ab_need) {
        ssize_t r = recv(so->fd, pe->ab_text + pe->ab_got, pe->ab_need - pe->ab_got, 0);
        if (r > 0) {
            pe->ab_got += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        break;
    }
    finish_abort(tp, peer);
}

static void start_abort(hoop__tp_t *tp, int peer, const hoop__wire_hdr_t *h)
{
    peer_t *pe = &tp->peers[peer];
    pe->socks[0].hb_len = 0;
    if (h->flags == HOOP_OK && h->payload_len == 0) {
        goodbye_in(tp, peer);
        return;
    }
    if (h->payload_len > ABORT_MAX) {
        char why[128];
        snprintf(why, sizeof(why), "it sent an abort notice of %" PRIu64 " bytes", h->payload_len);
        pe->salvaging = 1; /* nothing more to read from it */
        peer_lost(tp, peer, why);
        return;
    }
    pe->ab_active = 1;
    if (h->flags == HOOP_ERR_TIMEOUT && tp->p.peer_timed_out != NULL)
        atomic_store(tp->p.peer_timed_out, 1);
    /* A disagreement stays one on every rank; any other cause is an abort here. */
    pe->ab_code = h->flags == HOOP_ERR_MISMATCH ? HOOP_ERR_MISMATCH : HOOP_ERR_ABORTED;
    pe->ab_need = (size_t)h->payload_len;
    pe->ab_got = 0;
    pe->ab_done = h->seq;
    read_abort(tp, peer);
}

/* A message of peer's whose header socket 0 has taken (no receive of socket 0 is left) still has
 * stripes to come on the other sockets. */
static int stripes_pending(const hoop__tp_t *tp, int peer)
{
    const peer_t *pe = &tp->peers[peer];
    for (int k = 1; k < tp->nsock; k++)
        if (pe->socks[k].rq != NULL) return 1;
    return 0;
}

/* Socket 0 of peer while no receive of it is reading a payload: takes in the next header. An
 * abort notice fails the peer; any other header is held for the receive it belongs to. Not while
 * stripes of the last message are still coming: the peer sent them before what follows on socket
 * 0, and a notice read first would fail a message that arrives whole (unless the connection is
 * ending: then the notice is all that can still be read). */
void hoop__tcp_idle_read(hoop__tp_t *tp, int peer)
{
    peer_t *pe = &tp->peers[peer];
    sock_t *so = &pe->socks[0];
    if (pe->lost || so->fd < 0) return;
    if (!pe->salvaging && !pe->ab_active && stripes_pending(tp, peer)) return;
    if (pe->ab_active) {
        read_abort(tp, peer);
        return;
    }
    if (so->hb_len == HOOP__WIRE_HDR_SIZE || fill_hdr(tp, peer, so, 1) != 1) return;
    hoop__wire_hdr_t h;
    /* A ready notice (read while connecting) is held for settle(). */
    if (is_abort(tp, peer, so->hb, &h) && !hoop__tcp_is_ready(&h)) start_abort(tp, peer, &h);
}

static void salvage_abort(hoop__tp_t *tp, int peer)
{
    peer_t *pe = &tp->peers[peer];
    if (pe->socks == NULL) return;
    const sock_t *so = &pe->socks[0];
    /* In the middle of a message nothing else can come next. */
    if (so->fd < 0 || (so->rq != NULL && so->rq->pos != 0)) return;
    hoop__tcp_idle_read(tp, peer);
}

static void tcp_post(hoop__tp_t *tp, hoop__xfer_t *x)
{
    x->done = 0;
    x->status = HOOP_OK;
    *tcp_hdr_ok(x) = 0;
    int n = stripes(tp, x->len);
    *tcp_parts_left(x) = n;
    if (tp->failed || x->peer < 0 || x->peer >= tp->p.size || x->peer == tp->p.rank ||
        tp->peers[x->peer].lost) {
        x->status = tp->failed ? tp->failed : HOOP_ERR_PEER_LOST;
        x->done = 1;
        return;
    }
    if (hoop__tp_refuse_mem("tcp", TCP_CAPS, &tp->p, x)) return;
    peer_t *pe = &tp->peers[x->peer];
    for (int k = 0; k < n; k++) {
        seg_t *s = seg_new(tp);
        if (s == NULL) {
            /* Earlier stripes are queued already; the stream cannot be kept consistent. */
            x->status = HOOP_ERR_NO_MEMORY;
            peer_lost(tp, x->peer, "out of memory");
            return;
        }
        size_t off, len;
        hoop__part(x->len, n, k, &off, &len);
        s->x = x;
        s->off = off;
        s->len = len;
        s->pos = 0;
        s->hlen = k == 0 ? HOOP__WIRE_HDR_SIZE : 0;
        s->next = NULL;
        if (k == 0 && x->dir == HOOP__XFER_SEND) {
            x->hdr.payload_len = x->len;
            hoop__wire_encode(&x->hdr, s->hdr);
        }
        sock_t *so = &pe->socks[k];
        seg_t **head = x->dir == HOOP__XFER_SEND ? &so->sq : &so->rq;
        seg_t **tail = x->dir == HOOP__XFER_SEND ? &so->sq_tail : &so->rq_tail;
        if (*tail)
            (*tail)->next = s;
        else
            *head = s;
        *tail = s;
    }
}

/* Moves what can move on one socket without blocking. Returns 1 if any byte moved. */
static int sock_io(hoop__tp_t *tp, int peer, int k)
{
    sock_t *so = &tp->peers[peer].socks[k];
    int moved = 0;
    while (so->sq != NULL) {
        seg_t *s = so->sq;
        struct iovec iov[2];
        int cnt = 0;
        if (s->pos < s->hlen) {
            iov[cnt].iov_base = s->hdr + s->pos;
            iov[cnt++].iov_len = s->hlen - s->pos;
        }
        size_t pdone = s->pos > s->hlen ? s->pos - s->hlen : 0;
        if (pdone < s->len) {
            iov[cnt].iov_base = (uint8_t *)s->x->buf + s->off + pdone;
            iov[cnt++].iov_len = s->len - pdone;
        }
        if (cnt > 0) {
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
            ssize_t r = sendmsg(so->fd, &mh, MSG_NOSIGNAL);
            if (r < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
                char why[128];
                snprintf(why, sizeof(why), "%s", strerror(errno));
                peer_lost(tp, peer, why);
                return 1;
            }
            s->pos += (size_t)r;
            tp->peers[peer].moved += (uint64_t)r;
            moved = 1;
        }
        if (s->pos < s->hlen + s->len) break;
        so->sq = s->next;
        if (so->sq == NULL) so->sq_tail = NULL;
        finish(s->x, HOOP_OK);
        seg_free(tp, s);
    }
    if (k == 0 && tp->peers[peer].ab_active) {
        read_abort(tp, peer);
        return 1;
    }
    while (so->rq != NULL) {
        seg_t *s = so->rq;
        hoop__xfer_t *x = s->x;
        if (s->hlen == 0 && !*tcp_hdr_ok(x)) break; /* wait for socket 0 to check the header */
        ssize_t r;
        if (s->pos < s->hlen) {
            /* Headers come through hb, where one may already wait (read while idle). */
            int f = fill_hdr(tp, peer, so, 0);
            if (f < 0) return 1;
            if (f == 0) break;
            hoop__wire_hdr_t ab;
            if (is_abort(tp, peer, so->hb, &ab)) {
                start_abort(tp, peer, &ab);
                return 1;
            }
            memcpy(s->hdr, so->hb, HOOP__WIRE_HDR_SIZE);
            so->hb_len = 0;
            r = (ssize_t)(s->hlen - s->pos);
        } else {
            size_t pdone = s->pos - s->hlen;
            if (pdone == s->len) {
                r = 0;
                goto complete;
            }
            r = recv(so->fd, (uint8_t *)x->buf + s->off + pdone, s->len - pdone, 0);
            if (r > 0) tp->peers[peer].moved += (uint64_t)r;
        }
        if (r == 0) {
            peer_lost(tp, peer, "connection closed by peer");
            return 1;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            char why[128];
            snprintf(why, sizeof(why), "%s", strerror(errno));
            peer_lost(tp, peer, why);
            return 1;
        }
        s->pos += (size_t)r;
        moved = 1;
        if (s->pos == s->hlen && s->hlen > 0) {
            char msg[400];
            int valid = hoop__wire_decode(s->hdr, UINT64_MAX, &x->got) == HOOP_OK;
            if (hoop__wire_check_recv(&x->hdr, x->len, &x->got, valid, peer, tp->p.rank, msg,
                                      sizeof(msg)) != HOOP_OK) {
                /* The stream is out of step from here on: fail this transfer and the peer. */
                x->status = HOOP_ERR_MISMATCH;
                x->done = 1;
                so->rq = s->next;
                if (so->rq == NULL) so->rq_tail = NULL;
                seg_free(tp, s);
                peer_fail(tp, peer, HOOP_ERR_MISMATCH, msg);
                return 1;
            }
            *tcp_hdr_ok(x) = 1;
        }
        if (s->pos < s->hlen + s->len) continue;
    complete:
        so->rq = s->next;
        if (so->rq == NULL) so->rq_tail = NULL;
        finish(x, HOOP_OK);
        seg_free(tp, s);
    }
    /* The last stripe is in: what waits behind it on socket 0 may be read now. */
    if (k > 0 && moved && so->rq == NULL && tp->peers[peer].socks[0].rq == NULL &&
        !stripes_pending(tp, peer))
        hoop__tcp_idle_read(tp, peer);
    return moved;
}

/* Runs every socket that has transfers queued. Returns 1 if any byte moved. */
static int move_queued(hoop__tp_t *tp)
{
    int moved = 0;
    for (int j = 0; j < tp->p.size; j++) {
        if (tp->peers[j].lost) continue;
        for (int k = 0; k < tp->nsock; k++) {
            sock_t *so = &tp->peers[j].socks[k];
            if (so->fd >= 0 && (so->sq != NULL || so->rq != NULL)) moved |= sock_io(tp, j, k);
        }
    }
    return moved;
}

/* What a sleep watches on socket k of peer j (poll() events), 0 for nothing. */
static short sock_events(const hoop__tp_t *tp, int j, int k)
{
    const peer_t *pe = &tp->peers[j];
    const sock_t *so = &pe->socks[k];
    if (pe->lost || so->fd < 0) return 0;
    short ev = 0;
    if (so->sq != NULL) ev |= POLLOUT;
    if (k == 0 && pe->ab_active)
        ev |= POLLIN;
    else if (so->rq != NULL && (so->rq->hlen > 0 || *tcp_hdr_ok(so->rq->x)))
        ev |= POLLIN;
    /* Idle socket 0: watch for an abort notice (and take the next header in early). */
    else if (k == 0 && so->rq == NULL && !so->hup && so->hb_len < HOOP__WIRE_HDR_SIZE &&
             !stripes_pending(tp, j))
        ev |= POLLIN;
    else if (!so->hup)
        ev |= POLLRDHUP;
    return ev;
}

/* A descriptor a sleep found ready with events re: owner is peer * nsock + socket index, -1 the
 * wake fd. */
static void on_ready(hoop__tp_t *tp, int owner, short re)
{
    if (owner < 0) {
        uint64_t v;
        if (read(tp->wake_fd, &v, sizeof(v)) < 0) { /* nothing to do: only a wake-up */
        }
        return;
    }
    int j = owner / tp->nsock, k = owner % tp->nsock;
    sock_t *so = &tp->peers[j].socks[k];
    if (tp->peers[j].lost) return;
    if (k == 0 && (tp->peers[j].ab_active || so->rq == NULL) &&
        (re & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))) {
        hoop__tcp_idle_read(tp, j);
        if (tp->peers[j].lost) return;
    }
    if (so->sq == NULL && so->rq == NULL) {
        /* The peer closed while we expect nothing from it here (socket 0 decides whether it said
         * goodbye; see fill_hdr): a later transfer will notice. A reset means it ended with bytes
         * of ours unread, inside a call: that fails the communicator now. */
        int err = 0;
        socklen_t el = sizeof(err);
        if ((re & POLLERR) && getsockopt(so->fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err) {
            peer_lost(tp, j, strerror(err));
            return;
        }
        if (re & (POLLRDHUP | POLLHUP | POLLERR)) so->hup = 1;
        return;
    }
    sock_io(tp, j, k);
}

/* epoll and poll() name their events alike on Linux: one set of bits serves both. */
_Static_assert(EPOLLIN == POLLIN && EPOLLOUT == POLLOUT && EPOLLRDHUP == POLLRDHUP &&
                   EPOLLHUP == POLLHUP && EPOLLERR == POLLERR,
               "epoll and poll() events differ");

/* The events of a sleep that arm() announced (see tcp_arm). */
static void take_armed(hoop__tp_t *tp)
{
    tp->armed = 0;
    int n = epoll_wait(tp->epfd, tp->evs, tp->nevs, 0);
    for (int i = 0; i < n; i++)
        on_ready(tp, tp->evs[i].data.u32 == UINT32_MAX ? -1 : (int)tp->evs[i].data.u32,
                 (short)tp->evs[i].events);
}

static void tcp_progress(hoop__tp_t *tp, int timeout_ms)
{
    if (tp->armed) {
        take_armed(tp);
        if (timeout_ms == 0) return;
    }
    if (move_queued(tp) || timeout_ms == 0) return;

    int n = 0;
    tp->pfds[n].fd = tp->wake_fd;
    tp->pfds[n].events = POLLIN;
    tp->pfd_owner[n++] = -1;
    for (int j = 0; j < tp->p.size; j++) {
        for (int k = 0; k < tp->nsock; k++) {
            short ev = sock_events(tp, j, k);
            if (ev == 0) continue;
            tp->pfds[n].fd = tp->peers[j].socks[k].fd;
            tp->pfds[n].events = ev;
            tp->pfd_owner[n++] = j * tp->nsock + k;
        }
    }
    if (poll(tp->pfds, (nfds_t)n, timeout_ms) <= 0) return;
    for (int i = 0; i < n; i++)
        if (tp->pfds[i].revents != 0) on_ready(tp, tp->pfd_owner[i], tp->pfds[i].revents);
}

/* The epoll set of a sleep in another poll() (mux.c): the wake fd and, while armed, each socket
 * with what it watches. Made at the first sleep, which only a rank with peers on several
 * transports has; -1 if it cannot be (the caller then sleeps a millisecond at a time). */
static int tcp_wait_fd(hoop__tp_t *tp)
{
    if (tp->ep_state != 0) return tp->ep_state > 0 ? tp->epfd : -1;
    tp->ep_state = -1;
    tp->nevs = tp->p.size * tp->nsock + 1;
    tp->evs = calloc((size_t)tp->nevs, sizeof(*tp->evs));
    tp->epfd = tp->evs != NULL ? epoll_create1(EPOLL_CLOEXEC) : -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    if (tp->epfd >= 0 && epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->wake_fd, &ev) == 0) {
        tp->ep_state = 1;
        return tp->epfd;
    }
    if (tp->epfd >= 0) close(tp->epfd);
    HOOP__INFO(tp->p.log,
               "tcp: no epoll set for sleeping beside other transports (%s): they look "
               "every millisecond",
               strerror(errno));
    return -1;
}

/* Moves what can move; then brings the epoll set up to what each socket watches now (only the
 * sockets whose events changed since the last sleep cost a call). */
static int tcp_arm(hoop__tp_t *tp)
{
    if (move_queued(tp) || tcp_wait_fd(tp) < 0) return 1;
    for (int j = 0; j < tp->p.size; j++) {
        for (int k = 0; tp->peers[j].socks != NULL && k < tp->nsock; k++) {
            sock_t *so = &tp->peers[j].socks[k];
            uint32_t ev = (uint32_t)(uint16_t)sock_events(tp, j, k);
            if (so->fd < 0 || ev == so->ep_ev) continue;
            struct epoll_event e = {.events = ev, .data.u32 = (uint32_t)(j * tp->nsock + k)};
            int op = ev == 0 ? EPOLL_CTL_DEL : so->ep_ev == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
            if (epoll_ctl(tp->epfd, op, so->fd, &e) != 0) {
                /* Out of watches or memory: sleep without the set from now on. */
                HOOP__INFO(tp->p.log,
                           "tcp: epoll_ctl: %s: other transports' sleeps look every "
                           "millisecond",
                           strerror(errno));
                close(tp->epfd);
                tp->ep_state = -1;
                return 1;
            }
            so->ep_ev = ev;
        }
    }
    tp->armed = 1;
    return 0;
}

/* The notice of settle(), and its test. */
static void ready_notice(const hoop__tp_t *tp, uint8_t *b)
{
    hoop__tcp_notice_hdr(tp, HOOP_OK, 1, 0, b);
}

int hoop__tcp_is_ready(const hoop__wire_hdr_t *h)
{
    return h->flags == HOOP_OK && h->payload_len == 0 && h->count == 1;
}

static hoop_result_t tcp_settle(hoop__tp_t *tp, double deadline)
{
    if (tp->failed) return tp->failed;
    int n = tp->p.size, waiting = 0;
    uint8_t b[HOOP__WIRE_HDR_SIZE];
    ready_notice(tp, b);
    char *ready = calloc((size_t)n, 1);
    struct pollfd *pf = calloc((size_t)n, sizeof(*pf));
    int *who = calloc((size_t)n, sizeof(*who));
    if (ready == NULL || pf == NULL || who == NULL) {
        free(ready);
        free(pf);
        free(who);
        hoop__tcp_connect_report(tp, HOOP_ERR_NO_MEMORY, -1,
                                 "out of memory settling the connections");
        return hoop__tcp_connect_failed(tp, NULL, HOOP_ERR_NO_MEMORY, NULL);
    }
    hoop_result_t rc = HOOP_OK;
    char msg[400];
    for (int j = 0; j < n && rc == HOOP_OK; j++) {
        sock_t *so = &tp->peers[j].socks[0];
        if (j == tp->p.rank || so->fd < 0) {
            ready[j] = 1;
            continue;
        }
        waiting++;
        if (hoop__sock_io(so->fd, b, sizeof(b), HOOP__SOCK_SEND, deadline) != HOOP__SOCK_DONE) {
            snprintf(msg, sizeof(msg), "lost connection to rank %d while connecting (%s)", j,
                     strerror(errno));
            hoop__tcp_connect_report(tp, HOOP_ERR_PEER_LOST, j, msg);
            rc = HOOP_ERR_PEER_LOST;
        }
    }
    while (rc == HOOP_OK && waiting > 0) {
        double left = deadline - hoop__now();
        if (left <= 0) {
            char missing[128] = "";
            size_t o = 0;
            for (int j = 0; j < n && o + 12 < sizeof(missing); j++)
                if (!ready[j])
                    o += (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%d", o ? "," : "",
                                          j);
            snprintf(msg, sizeof(msg), "timed out waiting for rank(s) %s to finish connecting",
                     missing);
            hoop__tcp_connect_report(tp, HOOP_ERR_TIMEOUT, -1, msg);
            rc = HOOP_ERR_TIMEOUT;
            break;
        }
        int m = 0, held = 0;
        for (int j = 0; j < n; j++)
            if (!ready[j]) {
                pf[m].fd = tp->peers[j].socks[0].fd;
                pf[m].events = POLLIN;
                held |= tp->peers[j].socks[0].hb_len == HOOP__WIRE_HDR_SIZE;
                who[m++] = j;
            }
        if (poll(pf, (nfds_t)m,
                 held         ? 0
                 : left > 1.0 ? 1000
                              : (int)(left * 1000) + 1) < 0 &&
            errno != EINTR) {
            snprintf(msg, sizeof(msg), "settling the connections: poll: %s", strerror(errno));
            hoop__tcp_connect_report(tp, HOOP_ERR_SYSTEM, -1, msg);
            rc = HOOP_ERR_SYSTEM;
            break;
        }
        for (int i = 0; i < m && !tp->failed; i++) {
            int j = who[i];
            if (pf[i].revents == 0 && tp->peers[j].socks[0].hb_len < HOOP__WIRE_HDR_SIZE) continue;
            peer_t *pe = &tp->peers[j];
            sock_t *so = &pe->socks[0];
            if (pe->ab_active) {
                read_abort(tp, j);
                continue;
            }
            /* The header may be in already (read while connecting, see hoop__tcp_idle_read). */
            if (so->hb_len < HOOP__WIRE_HDR_SIZE && fill_hdr(tp, j, so, 0) != 1) continue;
            hoop__wire_hdr_t h;
            if (is_abort(tp, j, so->hb, &h) && hoop__tcp_is_ready(&h)) {
                so->hb_len = 0;
                ready[j] = 1;
                waiting--;
            } else if (is_abort(tp, j, so->hb, &h)) {
                start_abort(tp, j, &h); /* it failed to connect: its reason */
            } else {
                snprintf(msg, sizeof(msg), "rank %d sent a message before it finished connecting",
                         j);
                hoop__tcp_connect_report(tp, HOOP_ERR_INTERNAL, j, msg);
                rc = HOOP_ERR_INTERNAL;
                break;
            }
        }
        if (tp->failed) rc = tp->failed;
    }
    free(ready);
    free(pf);
    free(who);
    tp->settled = rc == HOOP_OK;
    return rc == HOOP_OK ? HOOP_OK : hoop__tcp_connect_failed(tp, NULL, rc, NULL);
}

static uint64_t tcp_moved(hoop__tp_t *tp, int peer)
{
    return peer >= 0 && peer < tp->p.size ? tp->peers[peer].moved : 0;
}

static void tcp_memory(const hoop__tp_t *tp, hoop__tp_mem_t *m)
{
    size_t nfd = (size_t)tp->p.size * (size_t)tp->nsock + 2;
    m->heap += sizeof(*tp) + nfd * (sizeof(struct pollfd) + sizeof(int)) +
               (size_t)tp->nevs * sizeof(struct epoll_event);
    for (int j = 0; j < tp->p.size; j++) {
        const peer_t *pe = &tp->peers[j];
        m->heap += sizeof(*pe) + (pe->socks != NULL ? (size_t)tp->nsock * sizeof(sock_t) : 0);
        for (int k = 0; pe->socks != NULL && k < tp->nsock; k++) m->conns += pe->socks[k].fd >= 0;
    }
}

static void tcp_wake(hoop__tp_t *tp)
{
    uint64_t one = 1;
    if (write(tp->wake_fd, &one, sizeof(one)) < 0) { /* already pending: fine */
    }
}

/* Tells peer j why we abort, if its socket 0 is between two messages and has room: one send that
 * never waits. A half-sent notice ends in the close, and the peer reports what came. */
static void send_abort(hoop__tp_t *tp, int j, hoop_result_t code, const char *text, size_t len)
{
    sock_t *so = &tp->peers[j].socks[0];
    if (so->fd < 0 || (so->sq != NULL && so->sq->pos != 0)) return;
    uint8_t msg[HOOP__WIRE_HDR_SIZE + ABORT_MAX];
    hoop__tcp_notice_hdr(tp, hoop__tp_notice_code(&tp->p, code), len, len, msg);
    memcpy(msg + HOOP__WIRE_HDR_SIZE, text, len);
    /* Best effort: a full or broken socket just goes without the reason. */
    (void)send(so->fd, msg, HOOP__WIRE_HDR_SIZE + len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void hoop__tcp_abort(hoop__tp_t *tp, hoop_result_t code, const char *reason)
{
    if (!tp->failed) tp->failed = code;
    const int first = !tp->abort_sent;
    tp->abort_sent = 1;
    size_t len;
    const char *text = hoop__tp_abort_text(code, reason, ABORT_MAX, &len);
    for (int j = 0; j < tp->p.size; j++) {
        if (tp->peers[j].socks == NULL) continue;
        if (first && !tp->peers[j].lost && j != tp->p.rank) send_abort(tp, j, code, text, len);
        for (int k = 0; k < tp->nsock; k++) {
            sock_t *so = &tp->peers[j].socks[k];
            fail_queue(tp, &so->sq, &so->sq_tail, code);
            fail_queue(tp, &so->rq, &so->rq_tail, code);
            /* shutdown, not close: the fd stays valid for a concurrent poll(). */
            if (so->fd >= 0) shutdown(so->fd, SHUT_RDWR);
        }
        tp->peers[j].lost = 1;
    }
}

/* close()'s goodbye (see the top): after everything sent so far, on socket 0 of every peer still
 * connected, unless a message is half sent there. Not after an abort: the peers were told why. */
static void send_goodbyes(hoop__tp_t *tp)
{
    if (tp->failed) return;
    uint8_t b[HOOP__WIRE_HDR_SIZE];
    hoop__tcp_notice_hdr(tp, HOOP_OK, 0, 0, b);
    double deadline = hoop__now() + GOODBYE_WAIT;
    for (int j = 0; j < tp->p.size; j++) {
        const peer_t *pe = &tp->peers[j];
        if (j == tp->p.rank || pe->lost || pe->socks == NULL) continue;
        const sock_t *so = &pe->socks[0];
        if (so->fd < 0 || (so->sq != NULL && so->sq->pos != 0)) continue;
        /* Its peer normally reads whatever fills the socket; one that does not gets a bare close. */
        (void)hoop__sock_io(so->fd, b, sizeof(b), HOOP__SOCK_SEND, deadline);
    }
}

static void tcp_close(hoop__tp_t *tp)
{
    if (tp == NULL) return;
    send_goodbyes(tp);
    for (int j = 0; j < tp->p.size; j++) {
        if (tp->peers[j].socks == NULL) continue;
        for (int k = 0; k < tp->nsock; k++) {
            sock_t *so = &tp->peers[j].socks[k];
            for (seg_t *s = so->sq, *n; s != NULL; s = n) {
                n = s->next;
                free(s);
            }
            for (seg_t *s = so->rq, *n; s != NULL; s = n) {
                n = s->next;
                free(s);
            }
            if (so->fd >= 0) close(so->fd);
        }
        free(tp->peers[j].socks);
    }
    for (seg_t *s = tp->free_segs, *n; s != NULL; s = n) {
        n = s->next;
        free(s);
    }
    if (tp->listen_fd >= 0) close(tp->listen_fd);
    if (tp->wake_fd >= 0) close(tp->wake_fd);
    if (tp->ep_state > 0) close(tp->epfd);
    free(tp->evs);
    free(tp->peers);
    free(tp->pfds);
    free(tp->pfd_owner);
    free(tp);
}

/* The next message from peer shows by its header, which an idle socket 0 takes in early into hb
 * (posting a receive then takes it from there). */
static int tcp_probe(hoop__tp_t *tp, int peer, hoop__wire_hdr_t *hdr)
{
    if (tp->failed || peer < 0 || peer >= tp->p.size || peer == tp->p.rank) return 0;
    peer_t *pe = &tp->peers[peer];
    if (pe->lost || pe->socks == NULL) return 0;
    for (int k = 0; k < tp->nsock; k++)
        if (pe->socks[k].rq != NULL) return 0;
    hoop__tcp_idle_read(tp, peer);
    const sock_t *so = &pe->socks[0];
    if (pe->lost || pe->ab_active || so->hb_len < HOOP__WIRE_HDR_SIZE) return 0;
    if (hoop__wire_decode(so->hb, UINT64_MAX, hdr) != HOOP_OK)
        return hoop__tp_probe_unreadable(hdr, peer, tp->p.comm_id);
    return 1;
}

const hoop__transport_ops_t hoop__tcp_transport = {
    .name = "tcp",
    .caps = TCP_CAPS,
    .listen = hoop__tcp_listen,
    .connect = hoop__tcp_connect,
    .post = tcp_post,
    .progress = tcp_progress,
    .wake = tcp_wake,
    .abort = hoop__tcp_abort,
    .close = tcp_close,
    .moved = tcp_moved,
    .settle = tcp_settle,
    .wait_fd = tcp_wait_fd,
    .arm = tcp_arm,
    .probe = tcp_probe,
    .memory = tcp_memory,
};
