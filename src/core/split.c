/*
 * hoop_comm_split: two exchanges over the parent, in named steps, and the out-of-band exchange the
 * new communicator's transport gets over the parent (the parent's store is closed by then). The
 * entry point (api.c) has checked the arguments; the scheduler (sched.c) runs the exchanges.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lifecycle.h"
#include "core/record.h"
#include "core/sched.h"
#include "core/shrink.h"
#include "transport/transport.h"

#define ADDR_LEN HOOP__ADDR_LEN

/* ---- the out-of-band exchange of a communicator made by split, over its parent ----
 * The parent's store is closed by then, so a put is a nonblocking send of one fixed-size frame to
 * the peer's rank in the parent, a get the matching receive; both ends of a pair put and get in the
 * same order, which the parent's point-to-point matching (posting order per peer) keeps. The
 * sends are waited for when the new communicator's connect is through (split_oob_end). */
#define SPLIT_OOB_FRAME 1064
#define SPLIT_OOB_HDR 72                      /* magic, length, tag */
#define SPLIT_OOB_MAGIC 0x424f4f5450494c53ull /* "SPLITOOB" */
#define SPLIT_OOB_SENDS 64

typedef struct split_oob {
    hoop_comm_t *parent;
    const int *parent_of; /* new rank -> parent rank */
    int rank, size;
    hoop_request_t *req[SPLIT_OOB_SENDS];
    unsigned char *frame[SPLIT_OOB_SENDS];
    int nreq;
    char err[320];
} split_oob_t;

/* A point-to-point frame over the parent, marked with an algorithm that no point-to-point call of
 * the program carries: a receive of the program's that meets a frame (or a frame receive that
 * meets the program's message) fails as a mismatch instead of taking the other's bytes. */
static hoop_result_t split_oob_p2p(split_oob_t *o, void *frame, int peer, int is_recv,
                                   hoop_request_t **req)
{
    hoop__call_t call = {.comm = o->parent,
                         .kind = HOOP__K_SEND,
                         .sendbuf = is_recv ? NULL : frame,
                         .recvbuf = is_recv ? frame : NULL,
                         .count = SPLIT_OOB_FRAME,
                         .dtype = HOOP_UINT8,
                         .op = HOOP_SUM,
                         .root = o->parent_of[peer],
                         .algo = HOOP__ALGO_RING,
                         .mem = HOOP__MEM_HOST,
                         .is_recv = is_recv};
    return hoop__sched_post(o->parent, &call, req, "hoop_comm_split");
}

static hoop_result_t split_oob_fail(split_oob_t *o, hoop_result_t rc, const char *what)
{
    snprintf(o->err, sizeof(o->err), "out-of-band exchange over the parent communicator: %s: %s",
             what,
             hoop__comm_last(o->parent)[0] ? hoop__comm_last(o->parent) : hoop__error_string(rc));
    return rc;
}

static hoop_result_t split_oob_put(void *ctx, const char *tag, int peer, const void *buf,
                                   size_t len)
{
    split_oob_t *o = ctx;
    if (peer < 0 || peer >= o->size || peer == o->rank || strlen(tag) > HOOP__TP_OOB_TAG_MAX ||
        len > SPLIT_OOB_FRAME - SPLIT_OOB_HDR || o->nreq == SPLIT_OOB_SENDS) {
        snprintf(o->err, sizeof(o->err),
                 "out-of-band exchange over the parent communicator: a put of %zu bytes to rank "
                 "%d (at most %d bytes, %d puts)",
                 len, peer, SPLIT_OOB_FRAME - SPLIT_OOB_HDR, SPLIT_OOB_SENDS);
        return HOOP_ERR_INTERNAL;
    }
    unsigned char *f = calloc(1, SPLIT_OOB_FRAME);
    if (f == NULL) return HOOP_ERR_NO_MEMORY;
    uint64_t m = SPLIT_OOB_MAGIC, l = len;
    memcpy(f, &m, 8);
    memcpy(f + 8, &l, 8);
    memcpy(f + 16, tag, strlen(tag));
    memcpy(f + SPLIT_OOB_HDR, buf, len);
    hoop_result_t rc = split_oob_p2p(o, f, peer, 0, &o->req[o->nreq]);
    if (rc != HOOP_OK) {
        free(f);
        return split_oob_fail(o, rc, "send");
    }
    o->frame[o->nreq++] = f;
    return HOOP_OK;
}

static hoop_result_t split_oob_get(void *ctx, const char *tag, int peer, void *buf, size_t cap,
                                   size_t *len, double deadline)
{
    (void)deadline; /* the parent's timeout bounds the wait */
    split_oob_t *o = ctx;
    unsigned char f[SPLIT_OOB_FRAME];
    if (peer < 0 || peer >= o->size || peer == o->rank) return HOOP_ERR_INTERNAL;
    hoop_result_t rc = split_oob_p2p(o, f, peer, 1, NULL);
    if (rc != HOOP_OK) return split_oob_fail(o, rc, "receive");
    uint64_t m, l;
    memcpy(&m, f, 8);
    memcpy(&l, f + 8, 8);
    if (m != SPLIT_OOB_MAGIC || l > SPLIT_OOB_FRAME - SPLIT_OOB_HDR ||
        strncmp((const char *)f + 16, tag, SPLIT_OOB_HDR - 16) != 0) {
        snprintf(o->err, sizeof(o->err),
                 "out-of-band exchange over the parent communicator: rank %d sent something else "
                 "than \"%s\"",
                 o->parent_of[peer], tag);
        return HOOP_ERR_MISMATCH;
    }
    *len = (size_t)l;
    memcpy(buf, f + SPLIT_OOB_HDR, l < cap ? (size_t)l : cap);
    return HOOP_OK;
}

static hoop_result_t split_oob_allgather(void *ctx, const char *tag, const void *mine, void *all,
                                         size_t len, double deadline)
{
    split_oob_t *o = ctx;
    memcpy((char *)all + (size_t)o->rank * len, mine, len);
    for (int j = 0; j < o->size; j++) {
        hoop_result_t rc = j == o->rank ? HOOP_OK : split_oob_put(o, tag, j, mine, len);
        if (rc != HOOP_OK) return rc;
    }
    for (int j = 0; j < o->size; j++) {
        size_t got = 0;
        hoop_result_t rc = j == o->rank ? HOOP_OK
                                        : split_oob_get(o, tag, j, (char *)all + (size_t)j * len,
                                                        len, &got, deadline);
        if (rc != HOOP_OK) return rc;
        if (j != o->rank && got != len) {
            snprintf(o->err, sizeof(o->err), "out-of-band exchange \"%s\": %zu bytes from rank %d",
                     tag, got, o->parent_of[j]);
            return HOOP_ERR_MISMATCH;
        }
    }
    return HOOP_OK;
}

static const char *split_oob_error(void *ctx) { return ((split_oob_t *)ctx)->err; }

/* Waits for the sends (each either completes or fails with the parent's timeout) and frees them. */
static hoop_result_t split_oob_end(split_oob_t *o)
{
    hoop_result_t rc = HOOP_OK;
    for (int i = 0; i < o->nreq; i++) {
        hoop_result_t r = hoop__sched_wait(o->req[i]);
        if (rc == HOOP_OK) rc = r;
        free(o->frame[i]);
    }
    o->nreq = 0;
    return rc;
}

/* ---- split ---- */

typedef struct split_entry {
    int32_t color, key, rank, pad;
} split_entry_t;

static int cmp_entry(const void *a, const void *b)
{
    const split_entry_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* An all-gather of fixed-size host records over c, for the library's own bookkeeping (a split,
 * symmetric memory): kind says which call it is in the record and to the peers. */
hoop_result_t hoop__comm_exchange(hoop_comm_t *c, hoop__kind_t kind, const void *mine, void *all,
                                  size_t bytes, const char *fn)
{
    hoop__call_t call = {.comm = c,
                         .kind = kind,
                         .sendbuf = mine,
                         .recvbuf = all,
                         .count = bytes,
                         .dtype = HOOP_UINT8,
                         .op = HOOP_SUM,
                         .root = -1,
                         .algo = HOOP__ALGO_RING,
                         .mem = HOOP__MEM_HOST};
    return hoop__sched_post(c, &call, NULL, fn);
}

/* A sentence of the new communicator (its transport's) in the parent's numbering, which is the one
 * the caller knows: every rank number N after "rank", "ranks" or "rank(s)" becomes
 * "P (new rank N)", P being that rank's number in the parent. */
static void to_parent_ranks(const char *msg, const int *parent_of, int n, char *out, size_t cap)
{
    size_t o = 0;
    const char *p = msg;
    while (*p != '\0' && o + 1 < cap) {
        const char *q = NULL;
        if (strncmp(p, "rank", 4) == 0 && (p == msg || !isalnum((unsigned char)p[-1]))) {
            q = p + 4;
            if (strncmp(q, "(s)", 3) == 0)
                q += 3;
            else if (*q == 's')
                q++;
            if (*q == ' ')
                q++;
            else
                q = NULL;
            if (q != NULL && *q == '[') q++;
            if (q != NULL && !isdigit((unsigned char)*q)) q = NULL;
        }
        if (q == NULL) {
            out[o++] = *p++;
            continue;
        }
        while (p < q && o + 1 < cap) out[o++] = *p++;
        /* A list: numbers separated by "," or ", ". */
        for (;;) {
            char *end;
            long k = strtol(p, &end, 10);
            int w = k >= 0 && k < n
                        ? snprintf(out + o, cap - o, "%d (new rank %ld)", parent_of[k], k)
                        : snprintf(out + o, cap - o, "%.*s", (int)(end - p), p);
            o = w < 0 ? o : (size_t)w < cap - o ? o + (size_t)w : cap - 1;
            p = end;
            size_t sep = p[0] == ',' ? (p[1] == ' ' ? 2 : 1) : 0;
            if (sep == 0 || !isdigit((unsigned char)p[sep])) break;
            for (size_t i = 0; i < sep && o + 1 < cap; i++) out[o++] = *p++;
        }
    }
    out[o] = '\0';
}

/* What a split carries from one step to the next (hoop__comm_split). */
typedef struct split {
    hoop_comm_t *c; /* the parent */
    int color;
    size_t p;                /* the parent's size */
    split_entry_t *all;      /* every rank's (color, key, rank) */
    split_entry_t *members;  /* those of this rank's color, in the new order */
    char (*addrs)[ADDR_LEN]; /* every rank's new listener, as the parent numbers them */
    const char **ptrs;       /* the members' addresses for connect, NULL for this rank */
    int *parent_of;          /* new rank -> parent rank */
    int n, newrank;          /* the new communicator's size, this rank's place in it */
    hoop_comm_t *nc;         /* the new communicator while it is being made */
    char addr[ADDR_LEN];     /* this rank's new listener ("" where it has none) */
    split_oob_t oob_ctx;     /* the new transport's out-of-band exchange, over the parent */
    hoop__tp_oob_t oob;
} split_t;

/* Step 1: what the exchanges need, refused at once (as bad arguments are) without memory. */
static hoop_result_t split_alloc(split_t *sp)
{
    size_t p = sp->p;
    sp->all = calloc(p, sizeof(*sp->all));
    sp->members = calloc(p, sizeof(*sp->members));
    sp->addrs = calloc(p, ADDR_LEN);
    sp->ptrs = calloc(p, sizeof(char *));
    sp->parent_of = calloc(p, sizeof(int));
    if (sp->all != NULL && sp->members != NULL && sp->addrs != NULL && sp->ptrs != NULL &&
        sp->parent_of != NULL)
        return HOOP_OK;
    return hoop__comm_error(sp->c, HOOP_ERR_NO_MEMORY,
                            "hoop_comm_split: out of memory: cannot allocate %zu bytes for the "
                            "exchange among %zu ranks",
                            p * (2 * sizeof(*sp->all) + ADDR_LEN + sizeof(char *) + sizeof(int)),
                            p);
}

/* Step 2, after the first exchange: the members of this rank's color, ordered by key then
 * parent rank, and this rank's place among them. */
static void split_members(split_t *sp)
{
    sp->n = 0;
    for (size_t i = 0; i < sp->p; i++)
        if (sp->color != HOOP_SPLIT_NONE && sp->all[i].color == sp->color)
            sp->members[sp->n++] = sp->all[i];
    qsort(sp->members, (size_t)sp->n, sizeof(*sp->members), cmp_entry);
    sp->newrank = -1;
    for (int i = 0; i < sp->n; i++) {
        sp->parent_of[i] = sp->members[i].rank;
        if (sp->members[i].rank == sp->c->rank) sp->newrank = i;
    }
}

/* Step 3, for a member: the new communicator, with the parent's agreed settings, and its
 * transport listening (its address in sp->addr, "" where it could not open). nth: the parent's
 * split count, which with the color makes the new id. */
static hoop_result_t split_open(split_t *sp, uint32_t nth)
{
    hoop_comm_t *c = sp->c;
    hoop__config_t cfg = c->cfg;
    /* A debug file the parent could not open was reported then; its children stay quiet. */
    if (!c->log.own_out) cfg.log_file[0] = '\0';
    hoop_comm_t *nc = sp->nc = hoop__comm_alloc(&cfg, sp->newrank, sp->n);
    hoop__config_wipe(&cfg);
    if (nc == NULL)
        return hoop__comm_error(c, HOOP_ERR_NO_MEMORY,
                                "hoop_comm_split: out of memory: cannot create the new "
                                "communicator of %d ranks (color %d)",
                                sp->n, sp->color);
    /* Same id on every member, distinct per split and color. */
    nc->id = (c->id ^ (0x9e3779b97f4a7c15ull * (nth + 1))) + ((uint64_t)(uint32_t)sp->color << 32);
    /* Its name in the flight recorder's dumps: the same on every member. */
    snprintf(nc->rec->name, sizeof(nc->rec->name), "%016llx", (unsigned long long)nc->id);
    nc->timeout_s = c->timeout_s;
    nc->sched = c->sched;
    nc->agreed = c->agreed; /* hoop_comm_set_algo's choice too */
    nc->algo = c->algo;
    nc->spin_s = c->spin_s;
    nc->yield_s = c->yield_s;
    memcpy(nc->route_hint, c->route_hint, sizeof(nc->route_hint));
    sp->oob_ctx = (split_oob_t){
        .parent = c, .parent_of = sp->parent_of, .rank = sp->newrank, .size = sp->n};
    sp->oob = (hoop__tp_oob_t){.allgather = split_oob_allgather,
                               .put = split_oob_put,
                               .get = split_oob_get,
                               .error = split_oob_error,
                               .ctx = &sp->oob_ctx};
    hoop_result_t orc = hoop__comm_listen(nc, sp->addr, &sp->oob);
    /* Shrink's listener, on the parent's interface, its address inside the transport's (as
     * init publishes it). A split that cannot open it fails, as one that cannot open its
     * transport does: descriptors are what runs out. */
    const char *like = c->shrink_addrs != NULL && c->shrink_fd >= 0 ? c->shrink_addrs[c->rank]
                                                                    : NULL;
    if (orc == HOOP_OK && (orc = hoop__shrink_open(nc, NULL, like)) == HOOP_ERR_SYSTEM) {
        char why[256];
        hoop__comm_error(nc, orc, "cannot open the listener for hoop_comm_shrink: %s",
                         hoop__fd_error(errno, why, sizeof(why)));
    }
    size_t o = strlen(sp->addr);
    if (orc == HOOP_OK && nc->shrink_addrs[nc->rank][0] != '\0' &&
        o + 3 + strlen(nc->shrink_addrs[nc->rank]) < sizeof(sp->addr))
        snprintf(sp->addr + o, sizeof(sp->addr) - o, " s=%s", nc->shrink_addrs[nc->rank]);
    if (orc == HOOP_OK) return HOOP_OK;
    char why[sizeof(c->last_error[0])];
    to_parent_ranks(hoop__comm_last(nc)[0] ? hoop__comm_last(nc) : hoop__error_string(orc),
                    sp->parent_of, sp->n, why, sizeof(why));
    /* The others learn why in the second exchange: in a job short of descriptors, one rank may
     * run out first, and every rank is to say what to raise. */
    snprintf(sp->addr, sizeof(sp->addr), "!%.300s", why);
    return hoop__comm_error(c, orc == HOOP_ERR_NO_MEMORY ? orc : HOOP_ERR_SYSTEM,
                            "hoop_comm_split: rank %d of the parent communicator cannot open the "
                            "new communicator (color %d): %s",
                            c->rank, sp->color, why);
}

/* Step 4, after the second exchange: connect the members, in the parent's numbering where it
 * fails, and order the new ring. */
static hoop_result_t split_connect(split_t *sp)
{
    hoop_comm_t *c = sp->c, *nc = sp->nc;
    for (int i = 0; i < sp->n; i++) {
        sp->addrs[sp->parent_of[i]][ADDR_LEN - 1] = '\0';
        sp->ptrs[i] = i == sp->newrank ? NULL : sp->addrs[sp->parent_of[i]];
        if (i != sp->newrank && nc->shrink_addrs != NULL &&
            hoop__addr_part(sp->addrs[sp->parent_of[i]], "s", nc->shrink_addrs[i],
                            HOOP__SHRINK_ADDR_LEN) != 0)
            nc->shrink_addrs[i][0] = '\0';
        if (sp->ptrs[i] != NULL && (sp->ptrs[i][0] == '\0' || sp->ptrs[i][0] == '!'))
            return hoop__comm_error(c, HOOP_ERR_SYSTEM,
                                    "hoop_comm_split: rank %d of the parent communicator could "
                                    "not open its part of the new communicator (color %d)%s%s",
                                    sp->parent_of[i], sp->color, sp->ptrs[i][0] ? ": " : "",
                                    sp->ptrs[i][0] ? sp->ptrs[i] + 1 : "");
    }
    /* The new communicator's own warnings number ranks its way: at the default level, a failure
     * is said once, below, in the parent's numbering (INFO and TRACE keep everything). */
    int level = nc->log.level;
    if (level == HOOP__LOG_WARN) nc->log.level = HOOP__LOG_NONE;
    hoop_result_t rc = nc->tp_ops->connect(nc->tp, sp->ptrs, hoop__now() + c->timeout_s);
    nc->log.level = level;
    hoop_result_t orc = split_oob_end(&sp->oob_ctx);
    if (rc == HOOP_OK) rc = orc;
    if (rc != HOOP_OK) {
        char why[sizeof(c->last_error[0])];
        to_parent_ranks(hoop__comm_last(nc)[0] ? hoop__comm_last(nc) : hoop__error_string(rc),
                        sp->parent_of, sp->n, why, sizeof(why));
        rc = hoop__comm_error(c, rc,
                              "hoop_comm_split: connecting the new communicator (color %d, %d "
                              "ranks) failed; ranks as numbered in the parent communicator: %s",
                              sp->color, sp->n, why);
        HOOP__WARN(&c->log, "%s", hoop__comm_last(c));
        return rc;
    }
    if (hoop__comm_set_ring(nc, sp->ptrs, sp->addr) != HOOP_OK)
        return hoop__comm_error(c, HOOP_ERR_NO_MEMORY,
                                "hoop_comm_split: out of memory: cannot allocate the ring order "
                                "of %d ranks",
                                sp->n);
    return HOOP_OK;
}

/*
 * Two exchanges over the parent: (color, key) to learn the new numbering, then the addresses of the
 * new communicators' listeners. Every rank of the parent takes part, members or not, in both,
 * whatever failed on it before the second. Errors name ranks in the parent's numbering.
 */
hoop_result_t hoop__comm_split(hoop_comm_t *c, int color, int key, hoop_comm_t **newcomm)
{
    split_t sp = {.c = c, .color = color, .p = (size_t)c->size};
    sp.oob_ctx = (split_oob_t){.parent = c};
    hoop_result_t rc = split_alloc(&sp);
    if (rc == HOOP_OK) {
        split_entry_t me = {.color = color, .key = key, .rank = c->rank};
        uint32_t nth = c->splits++;
        rc = hoop__comm_exchange(c, HOOP__K_SPLIT, &me, sp.all, sizeof(me), "hoop_comm_split");
        if (rc == HOOP_OK) {
            split_members(&sp);
            /* A member that fails to open still takes part in the second exchange, with its
             * reason for an address, so that the others do not hang. */
            if (color != HOOP_SPLIT_NONE) rc = split_open(&sp, nth);
            hoop_result_t rc2 = hoop__comm_exchange(c, HOOP__K_SPLIT, sp.addr, sp.addrs, ADDR_LEN,
                                                    "hoop_comm_split");
            if (rc2 != HOOP_OK) rc = rc2;
        }
    }
    if (rc == HOOP_OK && sp.nc != NULL) rc = split_connect(&sp);
    if (rc == HOOP_OK && sp.nc != NULL) {
        HOOP__INFO(&c->log, "split: color %d key %d -> rank %d of %d", color, key, sp.newrank,
                   sp.n);
        hoop__rec_register(sp.nc);
        *newcomm = sp.nc;
        sp.nc = NULL;
    }
    (void)split_oob_end(&sp.oob_ctx);
    if (sp.nc != NULL) hoop__comm_free(sp.nc);
    free(sp.all);
    free(sp.members);
    free(sp.addrs);
    free(sp.ptrs);
    free(sp.parent_of);
    return rc;
}
