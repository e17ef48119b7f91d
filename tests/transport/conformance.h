/*
 * Transport conformance: the same cases against any transport's ops, in real processes.
 *
 *   conformance --transport NAME|auto [--sockets N] [--ring BYTES] [--cma BYTES]
 *               [--case NAME[,...]] [--skip NAME[,...]] [--time-scale F] [--seed S] [--verbose]
 *               [--list]
 *
 * NAME is a transport of the registry (transport/registry.h), auto the per-peer chooser over them.
 * For each case the parent forks its ranks (1 to 3). Each rank creates its instance with listen(),
 * sends the address up a pipe, reads every rank's address back and connects; then the case runs
 * and the rank exits with 0 on success. The parent kills the ranks of a case that outlive its
 * deadline and counts the case failed. Ranks share one anonymous page (the board) for flags and
 * timestamps that must not travel over the transport under test.
 *
 * Every received payload is checked against a pattern the receiver computes on its own from
 * (sender, receiver, sequence number), and the bytes past the end of every receive buffer must
 * stay untouched. --time-scale stretches every time limit (for valgrind).
 *
 * conformance.c holds the driver and the helpers every case uses, conformance_data.c the cases
 * that move data (and refuse what cannot move), conformance_faults.c those of failures, waiting
 * and set-up; this header what they share.
 */
#ifndef HOOP_CONFORMANCE_H
#define HOOP_CONFORMANCE_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/wire.h"
#include "transport/registry.h"
#include "transport/transport.h"
#include "../common/testing.h"

#define MAX_RANKS 3
#define ADDR_MAX 512
#define GUARD 64
#define GUARD_BYTE 0xA5
#define MIB (1024u * 1024u)

/* ---- options and shared state ---- */

typedef struct opts {
    const char *transport;
    const hoop__transport_ops_t *ops;
    int sockets; /* 0: default */
    long ring;   /* -1: default */
    long cma;    /* -1: default */
    double scale;
    uint64_t seed;
    int verbose;
} opts_t;

enum {
    B_POSTED,    /* a rank has posted what the other waits on */
    B_STEP_DONE, /* a rank finished the step the other waits for (bit per rank) */
    B_RELEASE,   /* the waiting rank may go on */
    B_T_EVENT,   /* monotonic ns of the fault (death, abort) */
    B_SENT_DONE, /* the dying rank's send had completed before it died */
    B_FAILED,    /* a rank has failed: the others stop waiting for it */
    B_CONNECTED, /* connect() has returned (bit per rank) */
    B_N = 16
};

/* One entry of the out-of-band exchange the driver offers transports (hoop__tp_oob_t), in the
 * board: what rank from left for rank to (-1: for every rank) under tag. */
#define OOB_ENTRIES 64
#define OOB_DATA 512
typedef struct oob_entry {
    _Atomic int state; /* 0 free, 1 being written, 2 ready */
    int from, to;
    char tag[HOOP__TP_OOB_TAG_MAX + 1];
    size_t len;
    uint8_t data[OOB_DATA];
} oob_entry_t;

typedef struct board {
    _Atomic int64_t v[B_N];
    oob_entry_t oob[OOB_ENTRIES];
} board_t;

/* The first report() of a rank, and how many came. */
typedef struct rep {
    int n;
    hoop_result_t code;
    int peer;
    char msg[512];
} rep_t;

typedef struct ctx {
    const opts_t *o;
    int rank, size, variant;
    uint64_t comm_id;
    const hoop__transport_ops_t *ops;
    hoop__tp_t *tp;
    hoop__config_t cfg;
    hoop__log_t log;
    hoop__tp_params_t p;
    board_t *board;
    rep_t rep;
    char addr[ADDR_MAX];
    const char *cname;
    char oob_err[200];
} ctx_t;

/* A condition the case cannot go on without: where it fails, the case fails and returns. */
#define REQUIRE(c, cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failf((c), __LINE__, __VA_ARGS__);                                                     \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        if ((expr) != 0) return 1;                                                                 \
    } while (0)

/* ---- helpers (conformance.c) ---- */

int64_t now_ns(void);
double cpu_s(void);
void sleep_s(double s);
void failf(const ctx_t *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void notef(const ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void on_report(void *ctx, hoop_result_t code, int peer, const char *msg);
double lim(const ctx_t *c, double s);
/* Waits (not through the transport) until board slot k has all bits of want, or the limit. */
int board_wait(const ctx_t *c, int k, int64_t want, double limit_s);

/* ---- payload patterns and headers ---- */

uint64_t mix(uint64_t z);
uint64_t seed_of(const ctx_t *c, int src, int dst, uint64_t seq);
/* Word by word: both ends run on one host, so the byte order of a word needs no fixing. */
void fill(void *buf, size_t len, uint64_t seed);
/* Offset of the first byte that differs from the pattern, or -1. */
long check_pattern(const void *buf, size_t len, uint64_t seed);
/* A receive buffer of len bytes plus a guard that must stay untouched. */
uint8_t *rbuf_new(size_t len);
int guard_ok(const uint8_t *b, size_t len);
/* A header whose every field varies with i, so that a field lost on the way shows. Never the
 * abort kind, which a transport may treat as control. */
hoop__wire_hdr_t mkhdr(const ctx_t *c, int src, uint64_t seq, uint64_t i, size_t len);
void xinit(hoop__xfer_t *x, int dir, int peer, const hoop__wire_hdr_t *h, void *buf, size_t len);
/* Progresses until every transfer is done, or fails naming the ones that are not. */
int drive(ctx_t *c, hoop__xfer_t *const *xs, int n, double limit_s, const char *what);
int drive1(ctx_t *c, hoop__xfer_t *x, double limit_s, const char *what);
/* A completed receive: status, every header field, the payload and the guard. */
int check_recv(ctx_t *c, const hoop__xfer_t *x, const hoop__wire_hdr_t *sent, uint64_t seed,
               const char *what);
int is_fail_code(hoop_result_t r);
/* The out-of-band exchange of rank c->p.rank (of c->p.size) over the board, for c->p.oob. */
void oob_over_board(ctx_t *c);

/* ---- cases (conformance_data.c, conformance_faults.c) ---- */

enum { MM_SEQ, MM_KIND, MM_COUNT, MM_LEN, MM_N };
extern const char *const mm_name[MM_N]; /* the variants of the mismatch case */

int case_exchange(ctx_t *c);
int case_huge(ctx_t *c);
int case_many(ctx_t *c);
int case_three(ctx_t *c);
int case_mismatch(ctx_t *c);
int case_badpeer(ctx_t *c);
int case_memory(ctx_t *c);
int case_realloc(ctx_t *c);
int case_peer_exit(ctx_t *c);
int case_peer_close(ctx_t *c);
int case_abort(ctx_t *c);
int case_noconnect(ctx_t *c);
int case_wake(ctx_t *c);
int case_wake_pending(ctx_t *c);
int case_idle(ctx_t *c);
int case_close(ctx_t *c);
int case_late(ctx_t *c);
int case_probe(ctx_t *c);

#endif
