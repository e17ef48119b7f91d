/*
 * The communicator's life: init (configuration, rendezvous, agreement, transport, addresses,
 * connections, ring order, one step each), abort and destroy, and what split.c shares with init
 * (making and freeing a communicator, its listener, its ring). The entry points (api.c) have
 * checked the arguments.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/tree.h"
#include "collectives/coll.h"
#include "core/agree.h"
#include "runtime/comm.h"
#include "core/lifecycle.h"
#include "core/explain.h"
#include "core/record.h"
#include "core/sched.h"
#include "core/shrink.h"
#include "rendezvous/store.h"

#define ADDR_LEN HOOP__ADDR_LEN

static void report_from_transport(void *ctx, hoop_result_t code, int peer, const char *msg)
{
    hoop_comm_t *c = ctx;
    (void)peer;
    /* A lost peer while the communicator is healthy is the root cause worth reporting; later
     * failures are consequences of the abort, but still fail the call in flight. */
    if (!atomic_load(&c->aborted))
        hoop__comm_fail(c, code, "%s", msg);
    else
        hoop__comm_fail_calls(c, 0);
}

/* A peer's abort notice: the calls it had finished may still end here. */
static void notice_from_transport(void *ctx, hoop_result_t code, int peer, const char *msg,
                                  uint64_t done)
{
    hoop_comm_t *c = ctx;
    (void)peer;
    if (!atomic_load(&c->aborted)) {
        if (code != HOOP_ERR_MISMATCH) atomic_store(&c->notice_first, 1);
        hoop__comm_fail_from(c, code, done, "%s", msg);
    } else {
        hoop__comm_fail_calls(c, done);
    }
}

#define MAX_RANKS HOOP__MAX_RANKS

/* NULL when out of memory (or size out of range), with the reason logged. */
hoop_comm_t *hoop__comm_alloc(const hoop__config_t *cfg, int rank, int size)
{
    if (size < 1 || size > MAX_RANKS) {
        hoop__log_t log;
        hoop__log_open(&log, cfg->log_level, NULL, rank);
        HOOP__WARN(&log, "a communicator of %d ranks is more than hoop supports (1 to %d)", size,
                   MAX_RANKS);
        hoop__log_close(&log);
        return NULL;
    }
    hoop_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL) return NULL;
    c->rank = rank;
    c->size = size;
    c->shrink_fd = -1;
    c->cfg = *cfg;
    hoop__agreed_from(&c->agreed, cfg);
    c->algo = hoop__wire_algo_parse(c->agreed.algo);
    c->timeout_s = cfg->timeout_s;
    atomic_init(&c->fail_from, UINT64_MAX);
    c->p2p_send_seq = calloc((size_t)size, sizeof(uint64_t));
    c->p2p_recv_seq = calloc((size_t)size, sizeof(uint64_t));
    if (c->p2p_send_seq == NULL || c->p2p_recv_seq == NULL) {
        hoop__log_t log;
        hoop__log_open(&log, cfg->log_level, NULL, rank);
        HOOP__WARN(&log,
                   "out of memory: cannot allocate 2 x %zu bytes for the message numbers of "
                   "%d ranks",
                   (size_t)size * sizeof(uint64_t), size);
        hoop__log_close(&log);
        free(c->p2p_send_seq);
        free(c->p2p_recv_seq);
        hoop__config_wipe(&c->cfg);
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->err_mu, NULL);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->exec, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    /* Timed waits count on the monotonic clock: a step of the wall clock must not stretch them. */
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_cond_init(&c->tcv, &ca);
    pthread_condattr_destroy(&ca);
    hoop__log_open(&c->log, cfg->log_level, cfg->log_file, rank);
    c->log.subsys = cfg->log_subsys;
    snprintf(c->host, sizeof(c->host), "%s", c->log.host);
    if (cfg->trace) {
        c->trace_fn = hoop__trace_to_log;
        c->trace_ctx = c;
    }
    c->tp_ops = &hoop__mux_transport;
    c->reap = hoop__sched_reap;
    if (hoop__rec_open(c, (uint32_t)cfg->record, "0") != HOOP_OK) {
        HOOP__WARN(&c->log,
                   "out of memory: cannot allocate the flight recorder's %d entries "
                   "(HOOP_RECORD)",
                   cfg->record);
        hoop__comm_free(c);
        return NULL;
    }
    return c;
}

/* The communicators whose rank 0 this process is and that keep their tcp store (see keep_store):
 * a new init here on the same port takes the port over, and the older one is then no longer
 * discoverable, but runs on. Past KEPT_MAX at once, a new one closes its store as before. */
#define KEPT_MAX 16
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static hoop_comm_t *kept[KEPT_MAX];

static void unkeep(hoop_comm_t *c)
{
    pthread_mutex_lock(&kept_mu);
    for (int i = 0; i < KEPT_MAX; i++)
        if (kept[i] == c) kept[i] = NULL;
    hoop__store_t *st = c->kept_store;
    c->kept_store = NULL;
    pthread_mutex_unlock(&kept_mu);
    hoop__store_close(st);
}

/* Rank 0, before it serves a store on port: a store of this process's on it goes. */
static void release_port(int port)
{
    hoop__store_t *gone[KEPT_MAX];
    int n = 0;
    pthread_mutex_lock(&kept_mu);
    for (int i = 0; i < KEPT_MAX; i++)
        if (kept[i] != NULL && kept[i]->kept_port == port) {
            gone[n++] = kept[i]->kept_store;
            kept[i]->kept_store = NULL;
            kept[i] = NULL;
        }
    pthread_mutex_unlock(&kept_mu);
    for (int i = 0; i < n; i++) hoop__store_close(gone[i]);
}

/* Rank 0 of a tcp store keeps it serving while the communicator lives: it holds every rank's
 * address, which is where hoop-status finds the ranks' status sockets. 0 where it was kept. */
static int keep_store(hoop_comm_t *c, hoop__store_t *st, const hoop__rdv_t *rdv)
{
    if (c->rank != 0 || strcmp(rdv->method, "tcp") != 0) return -1;
    pthread_mutex_lock(&kept_mu);
    int slot = -1;
    for (int i = 0; i < KEPT_MAX && slot < 0; i++)
        if (kept[i] == NULL) slot = i;
    if (slot >= 0) {
        kept[slot] = c;
        c->kept_store = st;
        c->kept_port = rdv->port;
    }
    pthread_mutex_unlock(&kept_mu);
    return slot >= 0 ? 0 : -1;
}

void hoop__comm_free(hoop_comm_t *c)
{
    /* Under the lock: a new init on another thread may be taking the port over. */
    unkeep(c);
    /* No dump of it may start once it begins to go. */
    hoop__rec_forget(c);
    /* Its thread reads the recorder: gone before anything it reads. */
    hoop__explain_close(c);
    hoop__shrink_close(c);
    hoop__sched_stop(c);
    /* No call runs now: peers still mapping this rank's device memory are waited for. */
    hoop__mem_release(c);
    if (c->tp != NULL) c->tp_ops->close(c->tp);
    hoop__log_close(&c->log);
    hoop__config_wipe(&c->cfg);
    pthread_mutex_destroy(&c->err_mu);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->exec);
    pthread_cond_destroy(&c->cv);
    pthread_cond_destroy(&c->tcv);
    free(c->p2p_send_seq);
    free(c->p2p_recv_seq);
    hoop__collectives_close(c);
    hoop__mem_close(c);
    free(c->ring);
    hoop__rec_close(c);
    free(c);
}

/* Orders the ring host by host (hosts in order of their lowest rank, ranks ascending inside one),
 * from the host identity the transport reads in the addresses every rank published (all on one
 * host where it has none); ptrs[rank] is NULL (own is used). */
hoop_result_t hoop__comm_set_ring(hoop_comm_t *c, const char *const *ptrs, const char *own)
{
    int p = c->size;
    hoop__explain_peers(c, ptrs, own);
    char(*keys)[40] = calloc((size_t)p, sizeof(*keys));
    int *placed = calloc((size_t)p, sizeof(int));
    c->ring = malloc((size_t)p * sizeof(int));
    if (keys == NULL || placed == NULL || c->ring == NULL) {
        free(keys);
        free(placed);
        return HOOP_ERR_NO_MEMORY;
    }
    for (int j = 0; j < p && c->tp_ops->host_key != NULL; j++)
        c->tp_ops->host_key(j == c->rank ? own : ptrs[j], keys[j], sizeof(keys[j]));
    int pos = 0, identity = 1;
    int one_host = 1;
    for (int j = 1; j < p; j++)
        if (strcmp(keys[j], keys[0]) != 0) one_host = 0;
    c->shm_auto = one_host && (strcmp(c->agreed.transport, "auto") == 0 ||
                               strcmp(c->agreed.transport, "shm") == 0);
    for (int h = 0; h < p; h++) {
        if (placed[h]) continue;
        for (int j = h; j < p; j++) {
            if (placed[j] || strcmp(keys[j], keys[h]) != 0) continue;
            placed[j] = 1;
            if (j != pos) identity = 0;
            if (j == c->rank) c->ring_pos = pos;
            c->ring[pos++] = j;
        }
    }
    /* Hosts in ring order, and whether each holds as many ranks (the hierarchical algorithms). */
    c->nhosts = 0;
    c->local_size = 0;
    for (int i = 0, run = 0; i < p; i++) {
        run++;
        if (i + 1 < p && strcmp(keys[c->ring[i + 1]], keys[c->ring[i]]) == 0) continue;
        c->nhosts++;
        c->local_size = c->nhosts == 1 ? run : (c->local_size == run ? run : -1);
        run = 0;
    }
    if (c->local_size < 0) c->local_size = 0;
    if (!identity) {
        char line[256];
        size_t o = 0;
        for (int i = 0; i < p && o + 12 < sizeof(line); i++)
            o += (size_t)snprintf(line + o, sizeof(line) - o, "%s%d", i ? " " : "", c->ring[i]);
        HOOP__INFO(&c->log, "ring order %s: each host's ranks together", line);
    }
    free(keys);
    free(placed);
    return HOOP_OK;
}

/* ---- the transports' out-of-band exchange, over the store ---- */

/* The store key of tag from rank from to rank to (to < 0: for everyone); -1 with the sentence in
 * ctx->err for a tag that breaks the rules of transport.h. */
static int oob_key(hoop__oob_ctx_t *o, char *key, size_t n, const char *tag, int from, int to)
{
    size_t len = strlen(tag);
    int ok = len > 0 && len <= HOOP__TP_OOB_TAG_MAX &&
             strspn(tag, "abcdefghijklmnopqrstuvwxyz"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == len;
    if (!ok) {
        snprintf(o->err, sizeof(o->err), "out-of-band exchange: bad tag \"%.80s\"", tag);
        return -1;
    }
    if (to < 0)
        snprintf(key, n, "hoop/oob/%s/%d", tag, from);
    else
        snprintf(key, n, "hoop/oob/%s/%d/%d", tag, from, to);
    return 0;
}

static hoop_result_t oob_failed(hoop__oob_ctx_t *o, hoop_result_t rc)
{
    snprintf(o->err, sizeof(o->err), "out-of-band exchange: %s", hoop__store_error(o->st));
    return rc;
}

static hoop_result_t oob_put(void *ctx, const char *tag, int peer, const void *buf, size_t len)
{
    hoop__oob_ctx_t *o = ctx;
    char key[HOOP__STORE_MAX_KEY];
    if (oob_key(o, key, sizeof(key), tag, o->rank, peer) != 0) return HOOP_ERR_INVALID_ARGUMENT;
    hoop_result_t rc = hoop__store_set(o->st, key, buf, len);
    return rc == HOOP_OK ? rc : oob_failed(o, rc);
}

static hoop_result_t oob_get(void *ctx, const char *tag, int peer, void *buf, size_t cap,
                             size_t *len, double deadline)
{
    hoop__oob_ctx_t *o = ctx;
    char key[HOOP__STORE_MAX_KEY];
    if (oob_key(o, key, sizeof(key), tag, peer, o->rank) != 0) return HOOP_ERR_INVALID_ARGUMENT;
    double left = deadline - hoop__now();
    hoop_result_t rc = hoop__store_get(o->st, key, buf, cap, len, left > 0 ? left : 0);
    return rc == HOOP_OK ? rc : oob_failed(o, rc);
}

static hoop_result_t oob_allgather(void *ctx, const char *tag, const void *mine, void *all,
                                   size_t len, double deadline)
{
    hoop__oob_ctx_t *o = ctx;
    char key[HOOP__STORE_MAX_KEY];
    if (oob_key(o, key, sizeof(key), tag, o->rank, -1) != 0) return HOOP_ERR_INVALID_ARGUMENT;
    hoop_result_t rc = hoop__store_set(o->st, key, mine, len);
    if (rc != HOOP_OK) return oob_failed(o, rc);
    memcpy((char *)all + (size_t)o->rank * len, mine, len);
    for (int j = 0; j < o->size; j++) {
        if (j == o->rank) continue;
        size_t got = 0;
        double left = deadline - hoop__now();
        oob_key(o, key, sizeof(key), tag, j, -1);
        rc = hoop__store_get(o->st, key, (char *)all + (size_t)j * len, len, &got,
                             left > 0 ? left : 0);
        if (rc != HOOP_OK) return oob_failed(o, rc);
        if (got != len) {
            snprintf(o->err, sizeof(o->err),
                     "out-of-band exchange \"%s\": rank %d gave %zu bytes "
                     "where rank %d gave %zu",
                     tag, j, got, o->rank, len);
            return HOOP_ERR_MISMATCH;
        }
    }
    return HOOP_OK;
}

static const char *oob_error(void *ctx) { return ((hoop__oob_ctx_t *)ctx)->err; }

void hoop__oob_over_store(hoop__oob_ctx_t *ctx, hoop__store_t *st, int rank, int size,
                          hoop__tp_oob_t *oob)
{
    *ctx = (hoop__oob_ctx_t){.st = st, .rank = rank, .size = size};
    *oob = (hoop__tp_oob_t){
        .allgather = oob_allgather, .put = oob_put, .get = oob_get, .error = oob_error, .ctx = ctx};
}

/* oob: the out-of-band exchange for the transport, or NULL where there is none. */
hoop_result_t hoop__comm_listen(hoop_comm_t *c, char *addr, const hoop__tp_oob_t *oob)
{
    const char *route_hint = c->route_hint[0] != '\0' ? c->route_hint : NULL;
    hoop__tp_params_t p = {
        .rank = c->rank,
        .size = c->size,
        .comm_id = c->id,
        .cfg = &c->cfg,
        .log = &c->log,
        .route_hint = route_hint,
        .report = report_from_transport,
        .report_notice = notice_from_transport,
        .report_ctx = c,
        .peer_timed_out = &c->abort_dumps,
        .calls_done = &c->calls_done,
    };
    if (oob != NULL) p.oob = *oob;
    hoop_result_t rc = c->tp_ops->listen(&p, &c->tp, addr, ADDR_LEN);
    if (rc == HOOP_OK) hoop__explain_open(c, addr, ADDR_LEN);
    return rc;
}

/* ---- init ---- */

/* What init carries from one step to the next. Every step returns HOOP_OK or the failure, with
 * its reason in err; init_fail then undoes what the steps left. */
typedef struct init {
    const char *method;
    int rank, size;      /* as the caller gave them (-1: from the environment) */
    hoop__config_t *cfg; /* hoop__comm_init's: it wipes the key they hold, whatever happens */
    hoop__rdv_t *rdv;
    hoop__log_t boot; /* the log of a rank that has no communicator yet */
    hoop_comm_t *c;
    hoop__agree_t *ag;
    hoop__store_t *st;
    double deadline;
    char addr[ADDR_LEN];     /* where this rank's transport listens */
    char (*addrs)[ADDR_LEN]; /* everyone's, as published */
    const char **ptrs;       /* addrs for the transport, NULL for this rank */
    int have_all;            /* every address was read: this rank may vouch for its subtree */
    int kids[HOOP__TREE_MAX_KIDS], nkids; /* its children in init's tree (base/tree.h) */
    int first_kid_done;      /* 1: its first child's done key was read before connect */
    hoop__oob_ctx_t oob_ctx; /* the transport's out-of-band exchange, until connect returns */
    hoop__tp_oob_t oob;
    char err[512];
} init_t;

static hoop_result_t init_fail(init_t *in, hoop_result_t rc, const char *msg)
{
    /* A rank with a malformed setting fails with its sentence, whatever else went wrong: it is
     * why (the others learnt it from its hello). */
    if (in->cfg->invalid[0] != '\0') {
        rc = HOOP_ERR_INVALID_ARGUMENT;
        msg = in->cfg->invalid;
    }
    free(in->ag);
    free(in->addrs);
    free(in->ptrs);
    hoop__store_close(in->st);
    /* No communicator reaches the caller, so the reason goes to the log (WARN is on by default). */
    HOOP__WARN(&in->boot, "hoop_init failed: %s: %s", hoop__error_string(rc), msg);
    if (in->c != NULL) hoop__comm_free(in->c);
    return rc;
}

/* Step 1: the HOOP_* settings, and a log to say why init fails. A malformed setting (cfg.invalid)
 * is not the end yet: the rank meets the others, its bad settings at their defaults, so that its
 * hello makes init fail on every rank with the sentence (agree.c); init_fail then says it here. A
 * key that cannot be read is this rank's failure alone: it could not meet anyone. */
static hoop_result_t load_config(init_t *in)
{
    hoop_result_t rc = hoop__config_load(in->cfg, in->err, sizeof(in->err));
    if (rc != HOOP_OK && in->cfg->invalid[0] != '\0') rc = HOOP_OK;
    hoop__log_open(&in->boot, rc == HOOP_OK ? in->cfg->log_level : HOOP__LOG_WARN, NULL, in->rank);
    if (rc == HOOP_OK) {
        in->boot.subsys = in->cfg->log_subsys;
        hoop__log_banner(&in->boot, in->cfg->auth.set);
    }
    return rc;
}

/* A program started without any launcher (no env:// variables at all) runs as a single rank, as
 * nccl-tests and MPI programs do. */
static int standalone(const char *method, int rank, int size)
{
    if (method != NULL && method[0] != '\0' && strcasecmp(method, "env://") != 0) return 0;
    if (rank > 0 || size > 1) return 0;
    static const char *const vars[] = {"RANK",        "WORLD_SIZE",   "MASTER_ADDR",
                                       "MASTER_PORT", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL && v[0] != '\0') return 0;
    }
    return 1;
}

/* A job with neither a job id nor a key cannot be told from another launch that reaches its
 * rendezvous while it waits (a job restarted on the same port): their ranks could join each other
 * and compute with mixed data. Nothing can detect that, so it is said, by rank 0, once a process. */
static void warn_no_identity(init_t *in)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    const hoop__rdv_t *rdv = in->rdv;
    if (rdv->rank != 0 || rdv->size <= 1 || rdv->job[0] != '\0' || in->cfg->auth.set) return;
    if (atomic_flag_test_and_set(&said)) return;
    HOOP__WARN(&in->boot,
               "this job has no identity (no job id: HOOP_JOB_ID or a launcher's; no key: "
               "HOOP_AUTH_KEY): another launch that reaches this rendezvous while it waits (a job "
               "restarted on the same port) cannot be told apart, and its ranks could join this "
               "job's; give every rank of a launch the same HOOP_JOB_ID, unique to that launch "
               "(hooprun, srun, mpirun and torchrun --rdzv-id give one)");
}

/* Step 2: this rank's number, the world size and where to meet (rendezvous.c), then the
 * communicator itself. */
static hoop_result_t resolve_rendezvous(init_t *in)
{
    hoop__rdv_t *rdv = in->rdv;
    if (standalone(in->method, in->rank, in->size)) {
        memset(rdv, 0, sizeof(*rdv));
        rdv->size = rdv->local_size = 1;
    } else {
        hoop_result_t rc = hoop__rdv_resolve(in->method, in->rank, in->size, rdv, in->err,
                                             sizeof(in->err));
        if (rc != HOOP_OK) return rc;
        /* A PMIx launcher tells every rank where rank 0's store is (rendezvous.h). */
        in->boot.rank = rdv->rank;
        rc = hoop__rdv_exchange(rdv, in->cfg->timeout_s, &in->boot, in->err, sizeof(in->err));
        if (rc != HOOP_OK) return rc;
        /* Ranks of jobs that share a key file but not a job id cannot connect to each other.
         * The store's key stays unbound, so that a rank that reaches another job's store
         * (a stale job on the port) reads its hello and can say which job it met. */
        hoop__auth_key_bind(&in->cfg->auth, rdv->job);
        warn_no_identity(in);
    }
    in->boot.rank = rdv->rank;

    in->c = hoop__comm_alloc(in->cfg, rdv->rank, rdv->size);
    if (in->c == NULL) {
        snprintf(in->err, sizeof(in->err), "out of memory");
        return HOOP_ERR_NO_MEMORY;
    }
    /* A HOOP_DEBUG_FILE opens with the banner too (the boot log's went to stderr). */
    if (in->cfg->log_file[0] != '\0') hoop__log_banner(&in->c->log, in->cfg->auth.set);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int local = rdv->local_size > 0 ? rdv->local_size : 1;
    int crowded = ncpu > 0 && local > ncpu;
    in->c->spin_s = crowded ? 0.0 : 20e-6;
    in->c->yield_s = crowded ? in->cfg->shm_spin_us * 1e-6 : 0.0;
    return HOOP_OK;
}

/* Step 3: everything ranks must agree on is compared before any data moves (agree.c). This rank
 * claims its number in the store; the communicator id comes with rank 0's verdict (step 5). */
static hoop_result_t agree_claim(init_t *in)
{
    hoop_comm_t *c = in->c;
    in->deadline = hoop__now() + in->cfg->timeout_s;
    in->ag = calloc(1, sizeof(*in->ag));
    if (in->ag == NULL) {
        snprintf(in->err, sizeof(in->err), "out of memory");
        return HOOP_ERR_NO_MEMORY;
    }
    in->ag->in = (hoop__agree_in_t){.cfg = in->cfg,
                                    .job = in->rdv->job,
                                    .rank = c->rank,
                                    .size = c->size,
                                    .deadline = in->deadline};
    /* A store that goes away before this rank has claimed its number may be this process's
     * previous one closing (init, then init again at once): retry for a second before saying
     * the store was lost. */
    double lost_until = 0;
    char lost_err[512] = "";
    hoop_result_t rc;
    if (c->rank == 0 && strcmp(in->rdv->method, "tcp") == 0) release_port(in->rdv->port);
    for (;;) {
        double until = lost_until > 0 && lost_until < in->deadline ? lost_until : in->deadline;
        rc = hoop__store_open(in->rdv, until - hoop__now(), &c->log, &in->st, in->err,
                              sizeof(in->err));
        if (rc != HOOP_OK) {
            if (lost_until > 0) {
                snprintf(in->err, sizeof(in->err), "%s", lost_err);
                return HOOP_ERR_PEER_LOST;
            }
            return rc;
        }
        int stale = 0;
        rc = hoop__agree_claim(in->st, in->ag, &c->id, &stale, in->err, sizeof(in->err));
        int lost = rc == HOOP_ERR_PEER_LOST && c->rank != 0;
        if (lost && lost_until == 0) {
            lost_until = hoop__now() + 1.0;
            snprintf(lost_err, sizeof(lost_err), "%s", in->err);
        }
        if (!(stale || (lost && hoop__now() < lost_until)) || hoop__now() >= in->deadline) break;
        /* This process's previous communicator still serves the store: it closes once its
         * ranks are through; meet the next one. */
        hoop__store_close(in->st);
        in->st = NULL;
        usleep(20 * 1000);
    }
    c->sched = hoop__agree_digest(&c->cfg);
    return rc;
}

int hoop__addr_part(const char *addr, const char *name, char *out, size_t n)
{
    size_t k = strlen(name);
    for (const char *p = addr; p != NULL && *p != '\0'; p = strchr(p, ' ')) {
        while (*p == ' ') p++;
        if (strncmp(p, name, k) == 0 && p[k] == '=') {
            size_t len = strcspn(p + k + 1, " ");
            if (len >= n) return -1;
            memcpy(out, p + k + 1, len);
            out[len] = '\0';
            return 0;
        }
    }
    return -1;
}

/* Step 4: listening while the others arrive costs nothing and lets them connect at once. */
static hoop_result_t listen_step(init_t *in)
{
    hoop_comm_t *c = in->c;
    if (in->rdv->method[0] == 't')
        snprintf(c->route_hint, sizeof(c->route_hint), "%s", in->rdv->host);
    hoop__oob_over_store(&in->oob_ctx, in->st, c->rank, c->size, &in->oob);
    hoop_result_t rc = hoop__comm_listen(c, in->addr, &in->oob);
    if (rc != HOOP_OK) snprintf(in->err, sizeof(in->err), "%.500s", hoop__comm_last(c));
    /* Shrink's listener faces the rendezvous host too; without one, shrink fails later. */
    if (rc == HOOP_OK && hoop__shrink_open(c, in->rdv->host, NULL) == HOOP_ERR_NO_MEMORY) {
        snprintf(in->err, sizeof(in->err), "out of memory");
        rc = HOOP_ERR_NO_MEMORY;
    }
    /* Published inside this rank's address, which the transports read only their parts of. */
    size_t o = strlen(in->addr);
    if (rc == HOOP_OK && c->shrink_addrs[c->rank][0] != '\0' &&
        o + 3 + strlen(c->shrink_addrs[c->rank]) < sizeof(in->addr))
        snprintf(in->addr + o, sizeof(in->addr) - o, " s=%s", c->shrink_addrs[c->rank]);
    return rc;
}

/* Step 5: rank 0's verdict on what every rank claimed. */
static hoop_result_t agree_verdict(init_t *in)
{
    hoop_result_t rc = hoop__agree_verdict(in->st, in->ag, in->err, sizeof(in->err));
    free(in->ag);
    in->ag = NULL;
    return rc;
}

/* Rank 0's part of step 6: reads every other rank's address and publishes them all as one value,
 * one after another with their NULs; an empty value where they would not fit one (then every rank
 * reads them one by one). */
static hoop_result_t publish_addresses(init_t *in)
{
    hoop_comm_t *c = in->c;
    char key[64];
    size_t len = 0, total = 0;
    hoop_result_t rc = HOOP_OK;
    for (int j = 1; j < c->size && rc == HOOP_OK; j++) {
        snprintf(key, sizeof(key), "hoop/addr/%d", j);
        rc = hoop__store_get(in->st, key, in->addrs[j], ADDR_LEN - 1, &len,
                             in->deadline - hoop__now());
    }
    if (rc != HOOP_OK) return rc;
    for (int j = 0; j < c->size; j++) total += strlen(in->addrs[j]) + 1;
    char *all = total <= HOOP__STORE_MAX_VALUE ? malloc(total) : NULL;
    size_t at = 0;
    for (int j = 0; all != NULL && j < c->size; j++) {
        size_t n = strlen(in->addrs[j]) + 1;
        memcpy(all + at, in->addrs[j], n);
        at += n;
    }
    rc = hoop__store_set(in->st, "hoop/addrs", all != NULL ? all : "", all != NULL ? total : 0);
    free(all);
    return rc;
}

/* The addresses of rank 0's value into in->addrs: 1, or 0 where it does not hold size of them
 * with this rank's own in its place. */
static int take_addresses(init_t *in, const char *all, size_t len)
{
    hoop_comm_t *c = in->c;
    size_t at = 0;
    for (int j = 0; j < c->size; j++) {
        const char *end = at < len ? memchr(all + at, '\0', len - at) : NULL;
        if (end == NULL || (size_t)(end - (all + at)) >= ADDR_LEN) return 0;
        memcpy(in->addrs[j], all + at, (size_t)(end - (all + at)) + 1);
        at = (size_t)(end - all) + 1;
    }
    return at == len && strcmp(in->addrs[c->rank], in->addr) == 0;
}

/* How long a rank with children waits for its first child's done key before connect. */
#define FIRST_KID_WAIT_S 1.0

/* A rank's done key says that it and every rank under it in init's tree (base/tree.h) have read
 * the addresses, so that rank 0 reads only its children's keys before the store may go: each rank
 * waits for its children's keys (held reads, until the deadline) before it sets its own (a leaf
 * sets its own once it has read them, the others after connect: release_store). At most
 * log2(p) reads and one write a rank, where rank 0 alone used to read p - 1 keys one after
 * another while it served every other rank's requests. A rank that fails before it has read the
 * addresses never sets its key, and every rank above it waits to its deadline and names the
 * child it waited for. */
static hoop_result_t wait_subtree(init_t *in)
{
    char key[64], one[2];
    size_t len = 0;
    for (int i = in->first_kid_done; i < in->nkids; i++) {
        snprintf(key, sizeof(key), "hoop/done/%d", in->kids[i]);
        hoop_result_t rc = hoop__store_get(in->st, key, one, sizeof(one), &len,
                                           in->deadline - hoop__now());
        if (rc == HOOP_OK) continue;
        int k = in->kids[i], last = hoop__tree_last(k, in->c->size);
        if (last > k)
            snprintf(in->err, sizeof(in->err),
                     "rank %d did not say that it and the ranks under it in init's tree (ranks "
                     "%d-%d) had read the addresses: %.300s",
                     k, k + 1, last, hoop__store_error(in->st));
        else
            snprintf(in->err, sizeof(in->err),
                     "rank %d did not say it had read the addresses: %.300s", k,
                     hoop__store_error(in->st));
        return rc;
    }
    return HOOP_OK;
}

/* Step 6: publish this rank's address and learn everyone else's; then say so. The store serves
 * about 3p requests for it, not p²: rank 0 reads the p addresses and publishes them as one
 * value, which every other rank reads once. */
static hoop_result_t exchange_addresses(init_t *in)
{
    hoop_comm_t *c = in->c;
    char key[64];
    size_t len = 0;
    snprintf(key, sizeof(key), "hoop/addr/%d", c->rank);
    hoop_result_t rc = hoop__store_set(in->st, key, in->addr, strlen(in->addr) + 1);
    if (rc != HOOP_OK) {
        snprintf(in->err, sizeof(in->err), "%s", hoop__store_error(in->st));
        return rc;
    }
    in->addrs = calloc((size_t)c->size, ADDR_LEN);
    in->ptrs = calloc((size_t)c->size, sizeof(char *));
    size_t cap = (size_t)c->size * ADDR_LEN;
    if (cap > HOOP__STORE_MAX_VALUE) cap = HOOP__STORE_MAX_VALUE;
    char *all = c->rank != 0 ? malloc(cap) : NULL;
    if (in->addrs == NULL || in->ptrs == NULL || (c->rank != 0 && all == NULL)) {
        free(all);
        snprintf(in->err, sizeof(in->err), "out of memory");
        return HOOP_ERR_NO_MEMORY;
    }
    /* The transport's connect takes no address for this rank itself. */
    for (int j = 0; j < c->size; j++) in->ptrs[j] = j != c->rank ? in->addrs[j] : NULL;
    snprintf(in->addrs[c->rank], ADDR_LEN, "%s", in->addr);
    if (c->rank == 0) {
        rc = publish_addresses(in);
    } else {
        rc = hoop__store_get(in->st, "hoop/addrs", all, cap, &len, in->deadline - hoop__now());
        if (rc == HOOP_OK && len == 0) { /* too many to publish at once: one by one */
            for (int j = 0; j < c->size && rc == HOOP_OK; j++) {
                if (j == c->rank) continue;
                snprintf(key, sizeof(key), "hoop/addr/%d", j);
                rc = hoop__store_get(in->st, key, in->addrs[j], ADDR_LEN - 1, &len,
                                     in->deadline - hoop__now());
            }
        } else if (rc == HOOP_OK && !take_addresses(in, all, len)) {
            free(all);
            snprintf(in->err, sizeof(in->err),
                     "the addresses rank 0 published are not the %d of this communicator "
                     "(%zu bytes)",
                     c->size, len);
            return HOOP_ERR_INTERNAL;
        }
    }
    free(all);
    /* Shrink's listeners came with the addresses (" s=HOST:PORT"; none where one could not
     * open). */
    for (int j = 0; j < c->size && rc == HOOP_OK; j++)
        if (j != c->rank &&
            hoop__addr_part(in->addrs[j], "s", c->shrink_addrs[j], HOOP__SHRINK_ADDR_LEN) != 0)
            c->shrink_addrs[j][0] = '\0';
    /* Rank 0 serves the store: it may only go away once every rank has read all it needs, even
     * when its own connect fails, or the others would report the store's loss instead of the
     * cause they are about to find themselves (a peer on another host, say). */
    if (rc != HOOP_OK) {
        snprintf(in->err, sizeof(in->err), "%s", hoop__store_error(in->st));
        return rc;
    }
    if (in->cfg->test_skip_done) {
        snprintf(in->err, sizeof(in->err),
                 "HOOP_TEST_SKIP_DONE: rank %d fails after reading the addresses, before it says "
                 "so",
                 c->rank);
        return HOOP_ERR_INTERNAL;
    }
    in->have_all = 1;
    in->nkids = hoop__tree_kids(c->rank, c->size, in->kids);
    /* A leaf of init's tree speaks for itself alone: it says so at once, so that its death in
     * connect costs nobody a wait. Ranks with children say it after connect (release_store). */
    if (in->nkids == 0) {
        snprintf(key, sizeof(key), "hoop/done/%d", c->rank);
        rc = hoop__store_set(in->st, key, "1", 1);
        if (rc != HOOP_OK) snprintf(in->err, sizeof(in->err), "%s", hoop__store_error(in->st));
    } else if (c->rank != 0) {
        /* Its first child, a leaf, sets its key as soon as it has read the addresses: waiting
         * for it a short while keeps this rank out of connect's waits, which look at the peers
         * every millisecond, while rank 0's store thread still serves the ranks around it
         * (where ranks outnumber cores, the leaves' keys came late without it:
         * docs/performance.md). Past that while it connects anyway, so that a child that failed
         * delays it little, and reads the key again after connect. */
        char one[2];
        size_t got = 0;
        double left = in->deadline - hoop__now();
        snprintf(key, sizeof(key), "hoop/done/%d", in->kids[0]);
        in->first_kid_done = hoop__store_get(in->st, key, one, sizeof(one), &got,
                                             left < FIRST_KID_WAIT_S ? left : FIRST_KID_WAIT_S) ==
                             HOOP_OK;
    }
    return rc;
}

/* Step 7: connect to every peer, then order the ring by host. */
static hoop_result_t connect_peers(init_t *in)
{
    hoop_comm_t *c = in->c;
    hoop_result_t rc = c->tp_ops->connect(c->tp, in->ptrs, in->deadline);
    if (rc != HOOP_OK)
        snprintf(in->err, sizeof(in->err), "%.500s", hoop__comm_last(c));
    else if ((rc = hoop__comm_set_ring(c, in->ptrs, in->addr)) != HOOP_OK)
        snprintf(in->err, sizeof(in->err), "out of memory");
    return rc;
}

/* Step 8, every rank with children in init's tree, whether or not its own steps succeeded, once
 * it has read the addresses: it waits for its children's done keys (wait_subtree), then sets its
 * own, so that rank 0, which waits for its children, keeps the store until every rank has read
 * the addresses. Waiting after connect, not before, lets a rank whose child failed reach connect
 * and say what went wrong there, as every other rank does. Then rank 0 says a rank claimed
 * twice to everyone. rc is the outcome so far. */
static hoop_result_t release_store(init_t *in, hoop_result_t rc)
{
    hoop_comm_t *c = in->c;
    if (!in->have_all || in->nkids == 0) return rc;
    char err[sizeof(in->err)];
    snprintf(err, sizeof(err), "%s", in->err);
    hoop_result_t wrc = wait_subtree(in);
    if (wrc == HOOP_OK && c->rank != 0) {
        char key[64];
        snprintf(key, sizeof(key), "hoop/done/%d", c->rank);
        wrc = hoop__store_set(in->st, key, "1", 1);
        if (wrc != HOOP_OK) snprintf(in->err, sizeof(in->err), "%s", hoop__store_error(in->st));
    }
    /* The first failure is the one worth saying. */
    if (rc != HOOP_OK) snprintf(in->err, sizeof(in->err), "%s", err);
    if (rc == HOOP_OK && wrc != HOOP_OK) rc = wrc;
    if (c->rank != 0) return rc;
    /* A process that claimed a taken rank after the hellos were compared: the rank that
     * joined may be a stranger (another job on a stale address). Every rank hears it. */
    if (rc == HOOP_OK && (rc = hoop__agree_conflict(in->st, in->err, sizeof(in->err))) != HOOP_OK)
        c->tp_ops->abort(c->tp, rc, in->err);
    return rc;
}

void hoop__comm_memory(hoop_comm_t *c, hoop_memory_t *m)
{
    memset(m, 0, sizeof(*m));
    /* Under exec: a call being made changes the engines' lists. */
    pthread_mutex_lock(&c->exec);
    hoop__collectives_memory(c, &m->area, &m->area_next, &m->sym);
    pthread_mutex_unlock(&c->exec);
    hoop__tp_mem_t t = {0};
    if (c->tp != NULL && c->tp_ops->memory != NULL) c->tp_ops->memory(c->tp, &t);
    m->rings = t.shared;
    m->connections = t.heap;
    m->nconnections = t.conns;
    if (c->rec != NULL)
        m->recorder = sizeof(*c->rec) + (uint64_t)c->rec->cap * sizeof(*c->rec->ring);
}

/* The INFO line of what c holds, as nccl-tests' -M counts it: hoop_comm_memory's figures. */
static void say_memory(hoop_comm_t *c)
{
    if (c->log.level < HOOP__LOG_INFO) return;
    hoop_memory_t m;
    hoop__comm_memory(c, &m);
    double mib = 1024.0 * 1024.0;
    HOOP__INFO(&c->log,
               "memory: %.2f MiB shared mapped (area %.2f MiB, %.2f MiB once a call makes it; "
               "rings %.2f MiB; symmetric %.2f MiB), connections %" PRIu64 " holding %.1f KiB, "
               "recorder %.1f KiB",
               (double)(m.area + m.rings + m.sym) / mib, (double)m.area / mib,
               (double)m.area_next / mib, (double)m.rings / mib, (double)m.sym / mib,
               m.nconnections, (double)m.connections / 1024.0, (double)m.recorder / 1024.0);
}

static hoop_result_t init_comm(init_t *in)
{
    hoop_result_t rc = load_config(in);
    if (rc == HOOP_OK) rc = resolve_rendezvous(in);
    if (rc != HOOP_OK) return init_fail(in, rc, in->err);
    hoop_comm_t *c = in->c;

    if (in->rdv->size == 1 && in->cfg->invalid[0] != '\0')
        return init_fail(in, HOOP_ERR_INVALID_ARGUMENT, in->cfg->invalid);
    if (in->rdv->size == 1) {
        /* Nobody to meet: no store, no connections. */
        if (getrandom(&c->id, sizeof(c->id), 0) != (ssize_t)sizeof(c->id))
            c->id = (uint64_t)getpid();
        rc = hoop__comm_listen(c, in->addr, NULL);
        if (rc == HOOP_OK) rc = hoop__shrink_open(c, NULL, NULL);
        if (rc != HOOP_OK) return init_fail(in, rc, hoop__comm_last(c));
        hoop__rec_register(c);
        return HOOP_OK;
    }
    rc = agree_claim(in);
    if (rc == HOOP_OK) rc = listen_step(in);
    if (rc == HOOP_OK) rc = agree_verdict(in);
    /* A malformed setting never gets further (the verdict failed already). */
    if (rc == HOOP_OK && in->cfg->invalid[0] != '\0') rc = HOOP_ERR_INVALID_ARGUMENT;
    if (rc == HOOP_OK) rc = exchange_addresses(in);
    if (rc == HOOP_OK) rc = connect_peers(in);
    rc = release_store(in, rc);
    if (rc != HOOP_OK) return init_fail(in, rc, in->err);

    free(in->addrs);
    free(in->ptrs);
    if (keep_store(c, in->st, in->rdv) != 0) hoop__store_close(in->st);
    in->st = NULL;
    hoop__rec_register(c);
    HOOP__INFO(&c->log, "communicator %016llx ready: rank %d of %d, transport %s",
               (unsigned long long)c->id, c->rank, c->size, c->tp_ops->name);
    HOOP__INFO(&c->log,
               "collectives: HOOP_ALGO=%s, HOOP_SMALL_BYTES=%zu, HOOP_CHUNK_BYTES=%zu; each "
               "collective's plan is said at its first call",
               c->agreed.algo, c->agreed.small_bytes, c->agreed.chunk_bytes);
    say_memory(c);
    return HOOP_OK;
}

hoop_result_t hoop__comm_init(hoop_comm_t **out, const char *method, int rank, int size)
{
    hoop__config_t cfg;
    hoop__rdv_t rdv;
    memset(&cfg, 0, sizeof(cfg));
    memset(&rdv, 0, sizeof(rdv));
    init_t in = {.method = method, .rank = rank, .size = size, .cfg = &cfg, .rdv = &rdv};
    hoop_result_t rc = init_comm(&in);
    *out = rc == HOOP_OK ? in.c : NULL;
    /* The communicator holds its own copy of the key: no other may outlive this call. */
    hoop__config_wipe(&cfg);
    hoop__auth_key_wipe(&rdv.auth);
    return rc;
}

/* ---- abort, destroy ---- */

void hoop__comm_abort(hoop_comm_t *c)
{
    hoop__comm_fail(c, HOOP_ERR_ABORTED, "hoop_comm_abort was called on rank %d", c->rank);
    hoop__sched_abort(c);
}

void hoop__comm_destroy(hoop_comm_t *c)
{
    /* A pending call would hold the progress thread, and so this call, until its timeout: abort
     * first, here and towards the peers (who learn why), so that every pending call ends at once
     * with HOOP_ERR_ABORTED. An idle communicator is closed without an abort. Stream-ordered
     * calls that returned once queued are let finish first (with the timeout). */
    hoop__sched_drain(c);
    int pending = hoop__sched_pending(c);
    if (pending > 0) {
        hoop__comm_fail(c, HOOP_ERR_ABORTED,
                        "hoop_comm_destroy was called on rank %d with %d call(s) pending", c->rank,
                        pending);
        hoop__comm_abort(c);
    }
    hoop__comm_free(c);
}
