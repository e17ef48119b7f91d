/*
 * The one socket layer, under the rendezvous store and the TCP transport: stream sockets that are
 * non-blocking throughout and bounded by deadlines (monotonic seconds, as hoop__now() gives them).
 *
 *   connecting   hoop__sock_stream, hoop__sock_connect (with the self-connect guard)
 *   listening    hoop__sock_listen, hoop__sock_accept
 *   moving bytes hoop__sock_io (a whole buffer, or why not), hoop__sock_wait
 *   addresses    "host:port" and "[v6addr]:port": hoop__sock_hostport, hoop__sock_format,
 *                hoop__sock_parse, hoop__sock_resolve
 *   the gate     accepted connections that must identify themselves (a key's handshake, with
 *                whatever their protocol sends first) within HOOP__SOCK_AUTH_WINDOW seconds, at most
 *                HOOP__SOCK_PENDING_MAX at once, so that strangers cannot hold a server
 *
 * Nothing here logs or writes error sentences: callers know whom they talk to and say so.
 * Sending always passes MSG_NOSIGNAL: a peer that is gone is an EPIPE, never a SIGPIPE.
 */
#ifndef HOOP_SOCK_H
#define HOOP_SOCK_H

#include <netdb.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/auth.h"

/* Milliseconds left until deadline, for poll(): 0 once it has passed, rounded up so that a short
 * wait does not spin, at most an hour (callers loop and look at the deadline again). */
int hoop__sock_ms_left(double deadline);

/* Waits until fd is ready for events (POLLIN, POLLOUT) or the deadline passes; looks at least
 * once, even at a deadline already gone. 1: ready (or in error, which the next call on fd tells);
 * 0: the deadline passed; -1: poll() failed (errno). */
int hoop__sock_wait(int fd, short events, double deadline);

/* What every stream socket here gets: no Nagle delay (headers and store requests are small and
 * latency-bound) and non-blocking I/O. */
void hoop__sock_tune(int fd);

/* A new, tuned, close-on-exec TCP socket of family (AF_INET, AF_INET6); -1 with errno. */
int hoop__sock_stream(int family);

/* Connects fd (from hoop__sock_stream) to addr, waiting until deadline. 0, or -1 with errno:
 * ETIMEDOUT at the deadline, connect()'s error, or ECONNREFUSED for a connection that came back to
 * fd itself (connecting to a local port in the ephemeral range that nobody listens on can end up
 * connected to itself by TCP simultaneous open: no server is there). The caller closes fd on
 * failure. */
int hoop__sock_connect(int fd, const struct sockaddr *addr, socklen_t len, double deadline);

/* For hoop__sock_listen: the port is a fixed, well-known one (the store's, not a kernel-chosen
 * one). SO_REUSEADDR lets a new job bind it while the last one's connections linger in TIME_WAIT,
 * and an IPv6 socket leaves the IPv4 port to a socket of its own. */
#define HOOP__SOCK_FIXED_PORT 1

/* A non-blocking, close-on-exec socket listening on addr (backlog 1024); -1 with errno. */
int hoop__sock_listen(const struct sockaddr *addr, socklen_t len, int flags);

/* Accepts one connection from the listening lfd: tuned, close-on-exec; its address goes into
 * peer as hoop__sock_format writes it (peer may be NULL). -1 with errno (EAGAIN when none is
 * queued; EINTR is retried here, ECONNABORTED and running out of descriptors are the caller's). */
int hoop__sock_accept(int lfd, char *peer, size_t cap);

/* hoop__sock_io's flags: send (else receive), and more follows at once (MSG_MORE: the kernel
 * may hold this part back to send it with the next). */
#define HOOP__SOCK_SEND 1
#define HOOP__SOCK_MORE 2

/* Why hoop__sock_io stopped. */
typedef enum {
    HOOP__SOCK_DONE = 0,    /* every byte moved */
    HOOP__SOCK_CLOSED,      /* receiving: the peer closed its end (an orderly end of stream) */
    HOOP__SOCK_TIMEOUT,     /* the deadline passed first */
    HOOP__SOCK_WAIT_FAILED, /* poll() failed (errno) */
    HOOP__SOCK_FAILED       /* send() or recv() failed (errno; hoop__sock_gone tells a lost peer) */
} hoop__sock_io_t;

/* Sends or receives exactly n bytes of buf on fd before deadline, waiting in poll() whenever the
 * socket is full or empty. On anything but HOOP__SOCK_DONE part of buf may have moved: the stream is
 * out of step and the caller closes it. */
hoop__sock_io_t hoop__sock_io(int fd, void *buf, size_t n, int flags, double deadline);

/* Whether a send() or recv() error means that the peer went away (reset, closed, gone). */
int hoop__sock_gone(int err);

/* "host:port", with brackets around a host that has a ':' (an IPv6 address). */
void hoop__sock_hostport(char *buf, size_t cap, const char *host, int port);

/* An IPv4 or IPv6 socket address as "a.b.c.d:port" or "[v6addr]:port" ("?:0" for any other). */
void hoop__sock_format(const struct sockaddr_storage *ss, char *buf, size_t cap);

/* The numeric "a.b.c.d:port" or "[v6addr]:port" (brackets optional) that hoop__sock_format
 * writes, port 1 to 65535, as a socket address. 0, or -1 when s is not one. */
int hoop__sock_parse(const char *s, struct sockaddr_storage *ss, socklen_t *sl);

/* getaddrinfo() of host and port for stream sockets of any family; getaddrinfo's result (0, or an
 * EAI_ code). The caller frees *res with freeaddrinfo. */
int hoop__sock_resolve(const char *host, int port, struct addrinfo **res);

/* ---- the gate ---- */

/* Seconds an accepted connection has to identify itself. */
#define HOOP__SOCK_AUTH_WINDOW 10.0
/* Accepted connections that may be identifying themselves at once; the oldest goes to make room. */
#define HOOP__SOCK_PENDING_MAX 64

/* One accepted connection until it has identified itself. */
typedef struct hoop__sock_pending {
    int fd;             /* -1: a free slot */
    double deadline;    /* by when it must have identified itself */
    short events;       /* what to poll it for next */
    hoop__auth_t *auth; /* the key's handshake under way, or NULL */
    /* What its protocol sends before the handshake, if anything (the transport's hello): the
     * caller's to read; the gate only empties it. */
    uint8_t pre[32];
    size_t pre_got;
    char peer[64]; /* its address, for warnings */
} hoop__sock_pending_t;

typedef struct hoop__sock_gate {
    hoop__sock_pending_t slot[HOOP__SOCK_PENDING_MAX];
} hoop__sock_gate_t;

/* Every slot free. */
void hoop__sock_gate_init(hoop__sock_gate_t *g);

/* A slot for a new connection. When all are taken, the one whose deadline comes first (the
 * oldest) with *full set: the caller says why it goes and closes it (hoop__sock_pending_close)
 * before reusing the slot. */
hoop__sock_pending_t *hoop__sock_gate_room(hoop__sock_gate_t *g, int *full);

/* The nearest deadline of the connections in the gate, or none when it is empty. */
double hoop__sock_gate_next(const hoop__sock_gate_t *g, double none);

/* Puts the accepted fd into the free slot p, to identify itself by deadline; it is polled for
 * POLLIN until a handshake asks for something else. peer as hoop__sock_accept wrote it. */
void hoop__sock_pending_admit(hoop__sock_pending_t *p, int fd, const char *peer, double deadline);

/* Starts the key's handshake on p (key borrowed; it must outlive p's handshake). -1 when out of
 * memory. */
int hoop__sock_pending_auth(hoop__sock_pending_t *p, const hoop__auth_key_t *key, int is_server,
                            uint64_t context);

/* Moves p's handshake on, as hoop__auth_step. HOOP__AUTH_DONE: the peer holds the key, and the
 * handshake is freed (p->auth is NULL); HOOP__AUTH_MORE: p->events says what to wait for;
 * HOOP__AUTH_FAILED: why and p->auth->code say what went wrong, and the caller closes p. */
int hoop__sock_pending_step(hoop__sock_pending_t *p, char *why, size_t whylen);

/* Hands p's connection over to the caller: returns its descriptor and frees the slot. */
int hoop__sock_pending_take(hoop__sock_pending_t *p);

/* Closes p's connection, wipes its handshake and frees the slot (a free slot stays free). */
void hoop__sock_pending_close(hoop__sock_pending_t *p);

#endif
