/* The communicator: init through the rendezvous store, split, destroy, abort, errors, and the
 * public entry points, which validate their arguments and hand a call to the engine. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "core/agree.h"
#include "core/comm.h"
#include "core/store.h"

#define ADDR_LEN 320

const char *hoop_error_string(hoop_result_t r)
{
    switch (r) {
    case HOOP_OK: return "success";
    case HOOP_ERR_INVALID_ARGUMENT: return "invalid argument";
    case HOOP_ERR_SYSTEM: return "system error";
    case HOOP_ERR_TIMEOUT: return "timed out";
    case HOOP_ERR_PEER_LOST: return "peer lost";
    case HOOP_ERR_MISMATCH: return "ranks disagree (mismatched calls or settings)";
    case HOOP_ERR_AUTH: return "authentication failed";
    case HOOP_ERR_UNSUPPORTED: return "unsupported";
    case HOOP_ERR_ABORTED: return "communicator aborted";
    case HOOP_ERR_NO_MEMORY: return "out of memory";
    case HOOP_ERR_INTERNAL: return "internal error";
    }
    return "unknown error";
}

const char *hoop_dtype_name(hoop_dtype_t dt)
{
    static const char *const names[] = {"int8",    "uint8",    "int32",   "uint32",  "int64",
                                        "uint64",  "float16",  "bfloat16", "float32", "float64"};
    return (unsigned)dt < HOOP_DTYPE_COUNT ? names[dt] : "invalid-dtype";
}

const char *hoop_op_name(hoop_op_t op)
{
    static const char *const names[] = {"sum", "prod", "min", "max", "avg"};
    return (unsigned)op < HOOP_OP_COUNT ? names[op] : "invalid-op";
}

size_t hoop_dtype_size(hoop_dtype_t dt)
{
    static const unsigned char sizes[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
    return (unsigned)dt < HOOP_DTYPE_COUNT ? sizes[dt] : 0;
}

const char *hoop_version(void) { return "0.1.0"; }

const char *hoop_comm_last_error(const hoop_comm_t *c)
{
    if (c == NULL) return "communicator is NULL";
    return c->last_error;
}

int hoop_comm_rank(const hoop_comm_t *c) { return c != NULL ? c->rank : -1; }
int hoop_comm_size(const hoop_comm_t *c) { return c != NULL ? c->size : -1; }

hoop_result_t hoop__comm_error(hoop_comm_t *c, hoop_result_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[400];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->err_mu);
    snprintf(c->last_error, sizeof(c->last_error), "%s", msg);
    pthread_mutex_unlock(&c->err_mu);
    HOOP_INFO(&c->log, "%s: %s", hoop_error_string(code), msg);
    return code;
}

void hoop__comm_fail(hoop_comm_t *c, hoop_result_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[400];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->err_mu);
    int first = atomic_load(&c->aborted) == 0;
    if (first) {
        snprintf(c->fatal_msg, sizeof(c->fatal_msg), "%s", msg);
        atomic_store(&c->aborted, (int)code);
    }
    snprintf(c->last_error, sizeof(c->last_error), "%s", c->fatal_msg);
    pthread_mutex_unlock(&c->err_mu);
    if (first) HOOP_WARN(&c->log, "%s: %s; the communicator is aborted", hoop_error_string(code), msg);
}

/* HOOP_TRACE=1: schedule lines go to the log, whatever HOOP_DEBUG says. */
static void trace_to_log(void *ctx, const char *line)
{
    const hoop_comm_t *c = ctx;
    if (c->log.out == NULL) return;
    fprintf(c->log.out, "%s:%d trace %s\n", c->host, c->rank, line);
    fflush(c->log.out);
}

hoop_result_t hoop_comm_set_trace(hoop_comm_t *c, hoop_trace_fn fn, void *ctx)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    /* Under exec: a running collective never sees a half-changed tracer. */
    pthread_mutex_lock(&c->exec);
    c->trace_fn = fn;
    c->trace_ctx = ctx;
    pthread_mutex_unlock(&c->exec);
    return HOOP_OK;
}

hoop_result_t hoop_comm_stats(const hoop_comm_t *c, hoop_stats_t *st)
{
    if (c == NULL || st == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    st->bytes_sent = atomic_load(&c->bytes_sent);
    st->bytes_received = atomic_load(&c->bytes_received);
    st->messages_sent = atomic_load(&c->messages_sent);
    st->messages_received = atomic_load(&c->messages_received);
    return HOOP_OK;
}

hoop_result_t hoop_reduce_local(void *out, const void *a, const void *b, size_t count,
                                hoop_dtype_t dt, hoop_op_t op)
{
    if ((unsigned)dt >= HOOP_DTYPE_COUNT || (unsigned)op >= HOOP_OP_COUNT) return HOOP_ERR_INVALID_ARGUMENT;
    if (count > 0 && (out == NULL || a == NULL || b == NULL)) return HOOP_ERR_INVALID_ARGUMENT;
    if (count > SIZE_MAX / hoop_dtype_size(dt)) return HOOP_ERR_INVALID_ARGUMENT;
    hoop__reduce(out, a, b, count, dt, op);
    return HOOP_OK;
}

static void report_from_transport(void *ctx, hoop_result_t code, int peer, const char *msg)
{
    hoop_comm_t *c = ctx;
    (void)peer;
    /* A lost peer while the communicator is healthy is the root cause worth reporting; later
     * failures are consequences of the abort. */
    if (!atomic_load(&c->aborted)) hoop__comm_fail(c, code, "%s", msg);
}

#define MAX_RANKS HOOP__MAX_RANKS

/* NULL when out of memory (or size out of range), with the reason logged. */
static hoop_comm_t *comm_alloc(const hoop__config_t *cfg, int rank, int size)
{
    if (size < 1 || size > MAX_RANKS) {
        hoop__log_t log;
        hoop__log_open(&log, cfg->log_level, NULL, rank);
        HOOP_WARN(&log, "a communicator of %d ranks is more than hoop supports (1 to %d)", size,
                  MAX_RANKS);
        hoop__log_close(&log);
        return NULL;
    }
    hoop_comm_t *c = calloc(1, sizeof(*c));
    if (c == NULL) return NULL;
    c->rank = rank;
    c->size = size;
    c->cfg = *cfg;
    hoop__agreed_from(&c->agreed, cfg);
    c->timeout_s = cfg->timeout_s;
    c->p2p_send_seq = calloc((size_t)size, sizeof(uint64_t));
    c->p2p_recv_seq = calloc((size_t)size, sizeof(uint64_t));
    if (c->p2p_send_seq == NULL || c->p2p_recv_seq == NULL) {
        hoop__log_t log;
        hoop__log_open(&log, cfg->log_level, NULL, rank);
        HOOP_WARN(&log, "out of memory: cannot allocate 2 x %zu bytes for the message numbers of "
                        "%d ranks", (size_t)size * sizeof(uint64_t), size);
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
    pthread_cond_init(&c->cv, &ca);
    pthread_cond_init(&c->tcv, &ca);
    pthread_condattr_destroy(&ca);
    hoop__log_open(&c->log, cfg->log_level, cfg->log_file, rank);
    snprintf(c->host, sizeof(c->host), "%s", c->log.host);
    if (cfg->trace) {
        c->trace_fn = trace_to_log;
        c->trace_ctx = c;
    }
    c->tp_ops = &hoop__mux_transport;
    return c;
}

static void comm_free(hoop_comm_t *c)
{
    hoop__engine_stop(c);
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
    free(c->scratch);
    free(c->ring);
    free(c);
}

/* Orders the ring host by host (hosts in order of their lowest rank, ranks ascending inside one),
 * from the host keys in the addresses every rank published; ptrs[rank] is NULL (own is used). */
static hoop_result_t set_ring(hoop_comm_t *c, const char *const *ptrs, const char *own)
{
    int p = c->size;
    char(*keys)[40] = calloc((size_t)p, sizeof(*keys));
    int *placed = calloc((size_t)p, sizeof(int));
    c->ring = malloc((size_t)p * sizeof(int));
    if (keys == NULL || placed == NULL || c->ring == NULL) {
        free(keys);
        free(placed);
        return HOOP_ERR_NO_MEMORY;
    }
    for (int j = 0; j < p; j++) hoop__mux_host_key(j == c->rank ? own : ptrs[j], keys[j], sizeof(keys[j]));
    int pos = 0, identity = 1;
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
    if (!identity) {
        char line[256];
        size_t o = 0;
        for (int i = 0; i < p && o + 12 < sizeof(line); i++)
            o += (size_t)snprintf(line + o, sizeof(line) - o, "%s%d", i ? " " : "", c->ring[i]);
        HOOP_INFO(&c->log, "ring order %s: each host's ranks together", line);
    }
    free(keys);
    free(placed);
    return HOOP_OK;
}

static hoop_result_t open_transport(hoop_comm_t *c, char *addr)
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
        .report_ctx = c,
    };
    return c->tp_ops->listen(&p, &c->tp, addr, ADDR_LEN);
}

static hoop_result_t init_fail(hoop_comm_t *c, hoop__log_t *log, hoop_result_t rc, const char *msg)
{
    /* No communicator reaches the caller, so the reason goes to the log (WARN is on by default). */
    HOOP_WARN(log, "hoop_init failed: %s: %s", hoop_error_string(rc), msg);
    if (c != NULL) comm_free(c);
    return rc;
}

/* A program started without any launcher (no env:// variables at all) runs as a single rank, as
 * nccl-tests and MPI programs do. */
static int standalone(const char *method, int rank, int size)
{
    if (method != NULL && method[0] != '\0' && strcasecmp(method, "env://") != 0) return 0;
    if (rank > 0 || size > 1) return 0;
    static const char *const vars[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                       "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL && v[0] != '\0') return 0;
    }
    return 1;
}

/* cfg and rdv belong to the caller, which wipes the key they hold whatever happens here. */
static hoop_result_t init_comm(hoop_comm_t **out, const char *init_method, int rank, int world_size,
                               hoop__config_t *cfg, hoop__rdv_t *rdv)
{
    char err[512] = "";
    if (out == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    *out = NULL;
    hoop__log_t boot;
    hoop_result_t rc = hoop__config_load(cfg, err, sizeof(err));
    hoop__log_open(&boot, rc == HOOP_OK ? cfg->log_level : HOOP_LOG_WARN, NULL, rank);
    if (rc != HOOP_OK) return init_fail(NULL, &boot, rc, err);

    if (standalone(init_method, rank, world_size)) {
        memset(rdv, 0, sizeof(*rdv));
        rdv->size = rdv->local_size = 1;
    } else {
        rc = hoop__rdv_resolve(init_method, rank, world_size, rdv, err, sizeof(err));
        if (rc != HOOP_OK) return init_fail(NULL, &boot, rc, err);
        /* Ranks of jobs that share a key file but not a job id cannot connect to each other.
         * The store's key stays unbound, so that a rank that reaches another job's store
         * (a stale job on the port) reads its hello and can say which job it met. */
        hoop__auth_key_bind(&cfg->auth, rdv->job);
    }
    boot.rank = rdv->rank;

    hoop_comm_t *c = comm_alloc(cfg, rdv->rank, rdv->size);
    if (c == NULL) return init_fail(NULL, &boot, HOOP_ERR_NO_MEMORY, "out of memory");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int local = rdv->local_size > 0 ? rdv->local_size : 1;
    c->spin_s = ncpu > 0 && local > ncpu ? 0.0 : 20e-6;

    if (rdv->size == 1) {
        /* Nobody to meet: no store, no connections. */
        char addr[ADDR_LEN];
        if (getrandom(&c->id, sizeof(c->id), 0) != (ssize_t)sizeof(c->id)) c->id = (uint64_t)getpid();
        rc = open_transport(c, addr);
        if (rc != HOOP_OK) return init_fail(c, &boot, rc, c->last_error);
        *out = c;
        return HOOP_OK;
    }
    double deadline = hoop__now() + cfg->timeout_s;
    hoop__store_t *st = NULL;
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
        nonce = ((uint64_t)getpid() << 32) ^ (uint64_t)(hoop__now() * 1e9);
    /* Everything ranks must agree on is compared before any data moves (agree.c); the
     * communicator id comes with rank 0's verdict. */
    hoop__agree_t *ag = calloc(1, sizeof(*ag));
    if (ag == NULL) return init_fail(c, &boot, HOOP_ERR_NO_MEMORY, "out of memory");
    ag->in = (hoop__agree_in_t){.cfg = cfg, .job = rdv->job, .rank = c->rank, .size = c->size,
                                .nonce = nonce, .deadline = deadline};
    /* A store that goes away before this rank has claimed its number may be this process's
     * previous one closing (init, then init again at once): retry for a second before saying
     * the store was lost. */
    double lost_until = 0;
    char lost_err[512] = "";
    for (;;) {
        double until = lost_until > 0 && lost_until < deadline ? lost_until : deadline;
        rc = hoop__store_open(rdv, until - hoop__now(), &c->log, &st, err, sizeof(err));
        if (rc != HOOP_OK) {
            free(ag);
            if (lost_until > 0) return init_fail(c, &boot, HOOP_ERR_PEER_LOST, lost_err);
            return init_fail(c, &boot, rc, err);
        }
        int stale = 0;
        rc = hoop__agree_claim(st, ag, &c->id, &stale, err, sizeof(err));
        int lost = rc == HOOP_ERR_PEER_LOST && c->rank != 0;
        if (lost && lost_until == 0) {
            lost_until = hoop__now() + 1.0;
            snprintf(lost_err, sizeof(lost_err), "%s", err);
        }
        if (!(stale || (lost && hoop__now() < lost_until)) || hoop__now() >= deadline) break;
        /* This process's previous communicator still serves the store: it closes once its
         * ranks are through; meet the next one. */
        hoop__store_close(st);
        st = NULL;
        usleep(20 * 1000);
    }
    c->sched = hoop__agree_digest(&c->cfg);
    size_t len = 0;
    /* Listening while the others arrive costs nothing and lets them connect at once. */
    char addr[ADDR_LEN];
    if (rc == HOOP_OK) {
        if (rdv->method[0] == 't') snprintf(c->route_hint, sizeof(c->route_hint), "%s", rdv->host);
        rc = open_transport(c, addr);
        if (rc != HOOP_OK) snprintf(err, sizeof(err), "%.500s", c->last_error);
    }
    if (rc == HOOP_OK) rc = hoop__agree_verdict(st, ag, err, sizeof(err));
    free(ag);
    if (rc != HOOP_OK) {
        hoop__store_close(st);
        return init_fail(c, &boot, rc, err);
    }
    char key[64];
    snprintf(key, sizeof(key), "hoop/addr/%d", c->rank);
    rc = hoop__store_set(st, key, addr, strlen(addr) + 1);
    if (rc != HOOP_OK) goto store_error;

    char(*addrs)[ADDR_LEN] = calloc((size_t)c->size, ADDR_LEN);
    const char **ptrs = calloc((size_t)c->size, sizeof(char *));
    if (addrs == NULL || ptrs == NULL) {
        free(addrs);
        free(ptrs);
        hoop__store_close(st);
        return init_fail(c, &boot, HOOP_ERR_NO_MEMORY, "out of memory");
    }
    for (int j = 0; j < c->size && rc == HOOP_OK; j++) {
        if (j == c->rank) continue;
        snprintf(key, sizeof(key), "hoop/addr/%d", j);
        rc = hoop__store_get(st, key, addrs[j], ADDR_LEN - 1, &len, deadline - hoop__now());
        ptrs[j] = addrs[j];
    }
    /* Rank 0 serves the store: it may only go away once every rank has read all it needs, even
     * when its own connect fails, or the others would report the store's loss instead of the
     * cause they are about to find themselves (a peer on another host, say). */
    int have_all = rc == HOOP_OK;
    if (rc == HOOP_OK) {
        snprintf(key, sizeof(key), "hoop/done/%d", c->rank);
        rc = hoop__store_set(st, key, "1", 1);
    }
    if (rc == HOOP_OK) {
        rc = c->tp_ops->connect(c->tp, ptrs, deadline);
        if (rc != HOOP_OK) snprintf(err, sizeof(err), "%.500s", c->last_error);
        else if ((rc = set_ring(c, ptrs, addr)) != HOOP_OK) snprintf(err, sizeof(err), "out of memory");
    } else {
        snprintf(err, sizeof(err), "%s", hoop__store_error(st));
    }
    free(addrs);
    free(ptrs);
    if (c->rank == 0 && have_all) {
        hoop_result_t wrc = HOOP_OK;
        char one[2];
        for (int j = 1; j < c->size && wrc == HOOP_OK; j++) {
            snprintf(key, sizeof(key), "hoop/done/%d", j);
            wrc = hoop__store_get(st, key, one, sizeof(one), &len, deadline - hoop__now());
        }
        if (rc == HOOP_OK && wrc != HOOP_OK) {
            rc = wrc;
            snprintf(err, sizeof(err), "%s", hoop__store_error(st));
        }
        /* A process that claimed a taken rank after the hellos were compared: the rank that
         * joined may be a stranger (another job on a stale address). Every rank hears it. */
        if (rc == HOOP_OK && (rc = hoop__agree_conflict(st, err, sizeof(err))) != HOOP_OK)
            c->tp_ops->abort(c->tp, rc, err);
    }
    if (rc != HOOP_OK) {
        hoop__store_close(st);
        return init_fail(c, &boot, rc, err);
    }
    hoop__store_close(st);
    HOOP_INFO(&c->log, "communicator %016llx ready: rank %d of %d, transport %s",
              (unsigned long long)c->id, c->rank, c->size, c->tp_ops->name);
    if (hoop__algo_parse(cfg->algo) > 0)
        HOOP_INFO(&c->log, "all-reduce algorithm: %s (HOOP_ALGO)", cfg->algo);
    else
        HOOP_INFO(&c->log, "all-reduce algorithm: rd up to %zu bytes, ring above; chunks of %zu bytes",
                  cfg->small_bytes, cfg->chunk_bytes);
    *out = c;
    return HOOP_OK;

store_error:
    snprintf(err, sizeof(err), "%s", hoop__store_error(st));
    hoop__store_close(st);
    return init_fail(c, &boot, rc, err);
}

hoop_result_t hoop_init(hoop_comm_t **out, const char *init_method, int rank, int world_size)
{
    hoop__config_t cfg;
    hoop__rdv_t rdv;
    memset(&cfg, 0, sizeof(cfg));
    memset(&rdv, 0, sizeof(rdv));
    hoop_result_t rc = init_comm(out, init_method, rank, world_size, &cfg, &rdv);
    /* The communicator holds its own copy of the key: no other may outlive this call. */
    hoop__config_wipe(&cfg);
    hoop__auth_key_wipe(&rdv.auth);
    return rc;
}

hoop_result_t hoop_init_from_env(hoop_comm_t **comm) { return hoop_init(comm, NULL, -1, -1); }

hoop_result_t hoop_comm_set_timeout(hoop_comm_t *c, double seconds)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    if (!(seconds >= 1e-3 && seconds <= 1e7))
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "hoop_comm_set_timeout: %g is not a timeout in seconds (from 0.001 "
                                "to 10000000)", seconds);
    c->timeout_s = seconds;
    return HOOP_OK;
}

hoop_result_t hoop_comm_set_algo(hoop_comm_t *c, const char *algo)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    if (algo == NULL || hoop__algo_parse(algo) < 0)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "hoop_comm_set_algo: \"%s\" is not auto, ring, rd, ps or ps-sharded",
                                algo ? algo : "(null)");
    /* Posting reads it on the posting thread; running calls already hold their choice. */
    snprintf(c->agreed.algo, sizeof(c->agreed.algo), "%s", hoop__algo_name(hoop__algo_parse(algo)));
    return HOOP_OK;
}

/* After hoop__comm_fail from outside the engine: makes the abort take effect now. */
static void abort_now(hoop_comm_t *c, hoop_result_t code)
{
    /* Whoever drives the transport notices the flag; if nobody does, shut it down here so that
     * peers see the connections go. */
    if (pthread_mutex_trylock(&c->exec) == 0) {
        if (c->tp != NULL) c->tp_ops->abort(c->tp, code, c->fatal_msg);
        pthread_mutex_unlock(&c->exec);
    }
    if (c->tp != NULL) c->tp_ops->wake(c->tp);
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    pthread_cond_broadcast(&c->tcv);
    pthread_mutex_unlock(&c->mu);
}

hoop_result_t hoop_comm_abort(hoop_comm_t *c)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    hoop__comm_fail(c, HOOP_ERR_ABORTED, "hoop_comm_abort was called on rank %d", c->rank);
    abort_now(c, HOOP_ERR_ABORTED);
    return HOOP_OK;
}

hoop_result_t hoop_comm_destroy(hoop_comm_t *c)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    /* A pending call would hold the progress thread, and so this call, until its timeout: abort
     * first, here and towards the peers (who learn why), so that every pending call ends at once
     * with HOOP_ERR_ABORTED. An idle communicator is closed without an abort. */
    pthread_mutex_lock(&c->mu);
    int pending = c->busy + atomic_load(&c->n_inflight);
    for (const hoop_request_t *r = c->head; r != NULL; r = r->next) pending++;
    pthread_mutex_unlock(&c->mu);
    if (pending > 0) {
        hoop__comm_fail(c, HOOP_ERR_ABORTED,
                        "hoop_comm_destroy was called on rank %d with %d call(s) pending", c->rank,
                        pending);
        hoop_comm_abort(c);
    }
    comm_free(c);
    return HOOP_OK;
}

/* ---- argument checks ---- */

static hoop_result_t check_comm(hoop_comm_t *c, const char *fn)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
    if (ab) {
        pthread_mutex_lock(&c->err_mu);
        snprintf(c->last_error, sizeof(c->last_error), "%s: the communicator was aborted: %.500s", fn,
                 c->fatal_msg);
        pthread_mutex_unlock(&c->err_mu);
        return ab == HOOP_ERR_ABORTED ? HOOP_ERR_ABORTED : ab;
    }
    return HOOP_OK;
}

/* Validates a call: buffers, dtype, op, root, and that count * dtype size * mult fits. */
static hoop_result_t check_call(hoop_comm_t *c, const char *fn, const void *sbuf, const void *rbuf,
                                int need_rbuf, size_t count, size_t mult, hoop_dtype_t dt,
                                int has_op, hoop_op_t op, int root)
{
    hoop_result_t rc = check_comm(c, fn);
    if (rc != HOOP_OK) return rc;
    if ((unsigned)dt >= HOOP_DTYPE_COUNT)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "%s: invalid dtype %d", fn, (int)dt);
    if (has_op && (unsigned)op >= HOOP_OP_COUNT)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "%s: invalid op %d", fn, (int)op);
    if (root != -1 && (root < 0 || root >= c->size))
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "%s: root %d is outside the communicator (size %d)", fn, root,
                                c->size);
    size_t es = hoop_dtype_size(dt);
    if (count > SIZE_MAX / es / mult || count * es * mult > (size_t)1 << 62)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "%s: count %zu of %s is too large", fn, count, hoop_dtype_name(dt));
    if (count > 0 && sbuf == NULL)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "%s: sendbuf is NULL", fn);
    if (count > 0 && need_rbuf && rbuf == NULL)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "%s: recvbuf is NULL", fn);
    return HOOP_OK;
}

/* One posting thread at a time (hoop.h); the second one gets an error, not a reordered call. */
static hoop_result_t post_enter(hoop_comm_t *c, const char *what)
{
    if (atomic_exchange_explicit(&c->posting, 1, memory_order_acquire) == 0) return HOOP_OK;
    /* The calls already posted may be in another order than on the other ranks: only an abort
     * keeps that from becoming wrong data. */
    hoop__comm_fail(c, HOOP_ERR_INVALID_ARGUMENT,
                    "%s on rank %d: another thread was posting on this communicator at the same "
                    "time; calls on one communicator must come from one thread at a time (or be "
                    "serialized by the caller), else ranks see them in different orders", what,
                    c->rank);
    abort_now(c, HOOP_ERR_INVALID_ARGUMENT);
    return HOOP_ERR_INVALID_ARGUMENT;
}

static void post_leave(hoop_comm_t *c) { atomic_store_explicit(&c->posting, 0, memory_order_release); }

static hoop_result_t submit(hoop_comm_t *c, hoop__kind_t kind, const void *sbuf, void *rbuf,
                            size_t count, hoop_dtype_t dt, hoop_op_t op, int root,
                            hoop_request_t **req)
{
    char what[48];
    snprintf(what, sizeof(what), "hoop_%s%s", req != NULL ? "i" : "", hoop__kind_name(kind));
    hoop_result_t prc = post_enter(c, what);
    if (prc != HOOP_OK) return prc;
    hoop__call_t call = {
        .comm = c,
        .kind = kind,
        .sendbuf = sbuf,
        .recvbuf = rbuf,
        .count = count,
        .dtype = dt,
        .op = op,
        .root = root,
    };
    call.algo = hoop__algo_choose(&call);
    hoop_result_t rc = hoop__engine_submit(c, &call, req);
    post_leave(c);
    if (rc != HOOP_OK && req == NULL) {
        /* The error text is the communicator's; make sure last_error holds it. */
        pthread_mutex_lock(&c->err_mu);
        if (atomic_load(&c->aborted) && c->fatal_msg[0] != '\0')
            snprintf(c->last_error, sizeof(c->last_error), "%s", c->fatal_msg);
        pthread_mutex_unlock(&c->err_mu);
    }
    return rc;
}

#define NEED_REQ(req, fn)                                                                          \
    do {                                                                                           \
        if ((req) == NULL && c != NULL)                                                            \
            return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "%s: req is NULL", fn);          \
    } while (0)

static int is_root(hoop_comm_t *c, int root) { return c != NULL && c->rank == root; }

static hoop_result_t allreduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                               hoop_op_t op, hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, s, r, 1, n, 1, dt, 1, op, -1);
    return rc != HOOP_OK ? rc : submit(c, HOOP_K_ALLREDUCE, s, r, n, dt, op, -1, req);
}

static hoop_result_t broadcast(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int root,
                               hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, b, b, 1, n, 1, dt, 0, HOOP_SUM, root < 0 ? -2 : root);
    return rc != HOOP_OK ? rc : submit(c, HOOP_K_BROADCAST, b, b, n, dt, HOOP_SUM, root, req);
}

static hoop_result_t reduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                            hoop_op_t op, int root, hoop_request_t **req, const char *fn)
{
    hoop_result_t rc =
        check_call(c, fn, s, r, is_root(c, root), n, 1, dt, 1, op, root < 0 ? -2 : root);
    return rc != HOOP_OK ? rc : submit(c, HOOP_K_REDUCE, s, r, n, dt, op, root, req);
}

static hoop_result_t allgather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                               hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, s, r, 1, n, c ? (size_t)c->size : 1, dt, 0, HOOP_SUM, -1);
    return rc != HOOP_OK ? rc : submit(c, HOOP_K_ALLGATHER, s, r, n, dt, HOOP_SUM, -1, req);
}

static hoop_result_t gather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                            int root, hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, s, r, is_root(c, root), n, c ? (size_t)c->size : 1, dt,
                                  0, HOOP_SUM, root < 0 ? -2 : root);
    return rc != HOOP_OK ? rc : submit(c, HOOP_K_GATHER, s, r, n, dt, HOOP_SUM, root, req);
}

static hoop_result_t scatter(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                             int root, hoop_request_t **req, const char *fn)
{
    /* Only the root reads sendbuf; every rank writes recvbuf. */
    hoop_result_t rc = check_call(c, fn, is_root(c, root) ? s : r, r, 1, n,
                                  c ? (size_t)c->size : 1, dt, 0, HOOP_SUM, root < 0 ? -2 : root);
    return rc != HOOP_OK ? rc : submit(c, HOOP_K_SCATTER, s, r, n, dt, HOOP_SUM, root, req);
}

static hoop_result_t reduce_scatter(hoop_comm_t *c, const void *s, void *r, size_t n,
                                    hoop_dtype_t dt, hoop_op_t op, hoop_request_t **req,
                                    const char *fn)
{
    hoop_result_t rc = check_call(c, fn, s, r, 1, n, c ? (size_t)c->size : 1, dt, 1, op, -1);
    return rc != HOOP_OK ? rc : submit(c, HOOP_K_REDUCE_SCATTER, s, r, n, dt, op, -1, req);
}

static hoop_result_t alltoall(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                              hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, s, r, 1, n, c ? (size_t)c->size : 1, dt, 0, HOOP_SUM, -1);
    return rc != HOOP_OK ? rc : submit(c, HOOP_K_ALLTOALL, s, r, n, dt, HOOP_SUM, -1, req);
}

static hoop_result_t barrier(hoop_comm_t *c, hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_comm(c, fn);
    return rc != HOOP_OK ? rc : submit(c, HOOP_K_BARRIER, NULL, NULL, 0, HOOP_UINT8, HOOP_SUM, -1, req);
}

static hoop_result_t p2p(hoop_comm_t *c, void *buf, size_t n, hoop_dtype_t dt, int peer, int is_recv,
                         hoop_request_t **req, const char *fn)
{
    hoop_result_t rc = check_call(c, fn, buf, buf, 1, n, 1, dt, 0, HOOP_SUM, -1);
    if (rc != HOOP_OK) return rc;
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "%s: peer %d is not another rank of the communicator (size %d)", fn,
                                peer, c->size);
    hoop__call_t call = {
        .comm = c,
        .kind = HOOP_K_SEND,
        .sendbuf = is_recv ? NULL : buf,
        .recvbuf = is_recv ? buf : NULL,
        .count = n,
        .dtype = dt,
        .op = HOOP_SUM,
        .root = peer,
        .is_recv = is_recv,
    };
    if ((rc = post_enter(c, fn)) != HOOP_OK) return rc;
    rc = hoop__engine_submit(c, &call, req);
    post_leave(c);
    return rc;
}

hoop_result_t hoop_allreduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                             hoop_op_t op)
{
    return allreduce(c, s, r, n, dt, op, NULL, "hoop_allreduce");
}
hoop_result_t hoop_broadcast(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int root)
{
    return broadcast(c, b, n, dt, root, NULL, "hoop_broadcast");
}
hoop_result_t hoop_reduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                          hoop_op_t op, int root)
{
    return reduce(c, s, r, n, dt, op, root, NULL, "hoop_reduce");
}
hoop_result_t hoop_allgather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt)
{
    return allgather(c, s, r, n, dt, NULL, "hoop_allgather");
}
hoop_result_t hoop_gather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                          int root)
{
    return gather(c, s, r, n, dt, root, NULL, "hoop_gather");
}
hoop_result_t hoop_scatter(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                           int root)
{
    return scatter(c, s, r, n, dt, root, NULL, "hoop_scatter");
}
hoop_result_t hoop_reduce_scatter(hoop_comm_t *c, const void *s, void *r, size_t n,
                                  hoop_dtype_t dt, hoop_op_t op)
{
    return reduce_scatter(c, s, r, n, dt, op, NULL, "hoop_reduce_scatter");
}
hoop_result_t hoop_alltoall(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt)
{
    return alltoall(c, s, r, n, dt, NULL, "hoop_alltoall");
}
hoop_result_t hoop_barrier(hoop_comm_t *c) { return barrier(c, NULL, "hoop_barrier"); }
hoop_result_t hoop_send(hoop_comm_t *c, const void *b, size_t n, hoop_dtype_t dt, int peer)
{
    return p2p(c, (void *)b, n, dt, peer, 0, NULL, "hoop_send");
}
hoop_result_t hoop_recv(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int peer)
{
    return p2p(c, b, n, dt, peer, 1, NULL, "hoop_recv");
}

hoop_result_t hoop_iallreduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                              hoop_op_t op, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_iallreduce");
    return allreduce(c, s, r, n, dt, op, req, "hoop_iallreduce");
}
hoop_result_t hoop_ibroadcast(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int root,
                              hoop_request_t **req)
{
    NEED_REQ(req, "hoop_ibroadcast");
    return broadcast(c, b, n, dt, root, req, "hoop_ibroadcast");
}
hoop_result_t hoop_ireduce(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                           hoop_op_t op, int root, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_ireduce");
    return reduce(c, s, r, n, dt, op, root, req, "hoop_ireduce");
}
hoop_result_t hoop_iallgather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                              hoop_request_t **req)
{
    NEED_REQ(req, "hoop_iallgather");
    return allgather(c, s, r, n, dt, req, "hoop_iallgather");
}
hoop_result_t hoop_igather(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                           int root, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_igather");
    return gather(c, s, r, n, dt, root, req, "hoop_igather");
}
hoop_result_t hoop_iscatter(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                            int root, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_iscatter");
    return scatter(c, s, r, n, dt, root, req, "hoop_iscatter");
}
hoop_result_t hoop_ireduce_scatter(hoop_comm_t *c, const void *s, void *r, size_t n,
                                   hoop_dtype_t dt, hoop_op_t op, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_ireduce_scatter");
    return reduce_scatter(c, s, r, n, dt, op, req, "hoop_ireduce_scatter");
}
hoop_result_t hoop_ialltoall(hoop_comm_t *c, const void *s, void *r, size_t n, hoop_dtype_t dt,
                             hoop_request_t **req)
{
    NEED_REQ(req, "hoop_ialltoall");
    return alltoall(c, s, r, n, dt, req, "hoop_ialltoall");
}
hoop_result_t hoop_ibarrier(hoop_comm_t *c, hoop_request_t **req)
{
    NEED_REQ(req, "hoop_ibarrier");
    return barrier(c, req, "hoop_ibarrier");
}
hoop_result_t hoop_isend(hoop_comm_t *c, const void *b, size_t n, hoop_dtype_t dt, int peer,
                         hoop_request_t **req)
{
    NEED_REQ(req, "hoop_isend");
    return p2p(c, (void *)b, n, dt, peer, 0, req, "hoop_isend");
}
hoop_result_t hoop_irecv(hoop_comm_t *c, void *b, size_t n, hoop_dtype_t dt, int peer,
                         hoop_request_t **req)
{
    NEED_REQ(req, "hoop_irecv");
    return p2p(c, b, n, dt, peer, 1, req, "hoop_irecv");
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

/* An all-gather of fixed-size records over c, as part of a split. */
static hoop_result_t split_exchange(hoop_comm_t *c, const void *mine, void *all, size_t bytes)
{
    hoop__call_t call = {.comm = c, .kind = HOOP_K_SPLIT, .sendbuf = mine, .recvbuf = all,
                         .count = bytes, .dtype = HOOP_UINT8, .op = HOOP_SUM, .root = -1};
    call.algo = HOOP_ALGO_RING;
    hoop_result_t rc = post_enter(c, "hoop_comm_split");
    if (rc != HOOP_OK) return rc;
    rc = hoop__engine_submit(c, &call, NULL);
    post_leave(c);
    return rc;
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
            if (strncmp(q, "(s)", 3) == 0) q += 3;
            else if (*q == 's') q++;
            if (*q == ' ') q++;
            else q = NULL;
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
            int w = k >= 0 && k < n ? snprintf(out + o, cap - o, "%d (new rank %ld)", parent_of[k], k)
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

/*
 * Two exchanges over the parent: (color, key) to learn the new numbering, then the addresses of the
 * new communicators' listeners. Every rank of the parent takes part, members or not. Errors name
 * ranks in the parent's numbering.
 */
hoop_result_t hoop_comm_split(hoop_comm_t *c, int color, int key, hoop_comm_t **newcomm)
{
    hoop_result_t rc = check_comm(c, "hoop_comm_split");
    if (rc != HOOP_OK) return rc;
    if (newcomm == NULL)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT, "hoop_comm_split: newcomm is NULL");
    *newcomm = NULL;
    if (color < HOOP_SPLIT_NONE)
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "hoop_comm_split: color %d is negative (use HOOP_SPLIT_NONE)", color);

    size_t p = (size_t)c->size;
    split_entry_t *all = calloc(p, sizeof(*all));
    split_entry_t *members = calloc(p, sizeof(*members));
    char(*addrs)[ADDR_LEN] = calloc(p, ADDR_LEN);
    const char **ptrs = calloc(p, sizeof(char *));
    int *parent_of = calloc(p, sizeof(int));
    hoop_comm_t *nc = NULL;
    char addr[ADDR_LEN] = "", why[sizeof(c->last_error)];
    if (all == NULL || members == NULL || addrs == NULL || ptrs == NULL || parent_of == NULL) {
        /* Before the first exchange: the call is refused, as one with bad arguments is. */
        rc = hoop__comm_error(c, HOOP_ERR_NO_MEMORY,
                              "hoop_comm_split: out of memory: cannot allocate %zu bytes for the "
                              "exchange among %zu ranks",
                              p * (2 * sizeof(*all) + ADDR_LEN + sizeof(char *) + sizeof(int)), p);
        goto out;
    }
    split_entry_t me = {.color = color, .key = key, .rank = c->rank};
    uint32_t nth = c->splits++;
    rc = split_exchange(c, &me, all, sizeof(me));
    if (rc != HOOP_OK) goto out;

    int n = 0;
    for (size_t i = 0; i < p; i++)
        if (color != HOOP_SPLIT_NONE && all[i].color == color) members[n++] = all[i];
    qsort(members, (size_t)n, sizeof(*members), cmp_entry);
    int newrank = -1;
    for (int i = 0; i < n; i++) {
        parent_of[i] = members[i].rank;
        if (members[i].rank == c->rank) newrank = i;
    }
    if (color != HOOP_SPLIT_NONE) {
        hoop__config_t cfg = c->cfg;
        /* A debug file the parent could not open was reported then; its children stay quiet. */
        if (!c->log.own_out) cfg.log_file[0] = '\0';
        nc = comm_alloc(&cfg, newrank, n);
        hoop__config_wipe(&cfg);
        if (nc == NULL) {
            rc = hoop__comm_error(c, HOOP_ERR_NO_MEMORY,
                                  "hoop_comm_split: out of memory: cannot create the new "
                                  "communicator of %d ranks (color %d)", n, color);
            /* Still take part in the second exchange so the others do not hang. */
        } else {
            /* Same id on every member, distinct per split and color. */
            nc->id = (c->id ^ (0x9e3779b97f4a7c15ull * (nth + 1))) + ((uint64_t)(uint32_t)color << 32);
            nc->timeout_s = c->timeout_s;
            nc->sched = c->sched;
            nc->agreed = c->agreed; /* hoop_comm_set_algo's choice too */
            nc->spin_s = c->spin_s;
            memcpy(nc->route_hint, c->route_hint, sizeof(nc->route_hint));
            hoop_result_t orc = open_transport(nc, addr);
            if (orc != HOOP_OK) {
                to_parent_ranks(nc->last_error[0] ? nc->last_error : hoop_error_string(orc),
                                parent_of, n, why, sizeof(why));
                rc = hoop__comm_error(c, orc == HOOP_ERR_NO_MEMORY ? orc : HOOP_ERR_SYSTEM,
                                      "hoop_comm_split: rank %d of the parent communicator cannot "
                                      "open the new communicator (color %d): %s", c->rank, color,
                                      why);
                addr[0] = '\0';
            }
        }
    }
    hoop_result_t rc2 = split_exchange(c, addr, addrs, ADDR_LEN);
    if (rc2 != HOOP_OK) rc = rc2;
    if (rc != HOOP_OK || nc == NULL) goto out;
    for (int i = 0; i < n; i++) {
        addrs[parent_of[i]][ADDR_LEN - 1] = '\0';
        ptrs[i] = i == newrank ? NULL : addrs[parent_of[i]];
        if (ptrs[i] != NULL && ptrs[i][0] == '\0') {
            rc = hoop__comm_error(c, HOOP_ERR_SYSTEM,
                                  "hoop_comm_split: rank %d of the parent communicator could not "
                                  "open its part of the new communicator (color %d)",
                                  parent_of[i], color);
            goto out;
        }
    }
    /* The new communicator's own warnings number ranks its way: at the default level, a failure
     * is said once, below, in the parent's numbering (INFO and TRACE keep everything). */
    int level = nc->log.level;
    if (level == HOOP_LOG_WARN) nc->log.level = HOOP_LOG_NONE;
    rc = nc->tp_ops->connect(nc->tp, ptrs, hoop__now() + c->timeout_s);
    nc->log.level = level;
    if (rc != HOOP_OK) {
        to_parent_ranks(nc->last_error[0] ? nc->last_error : hoop_error_string(rc), parent_of, n,
                        why, sizeof(why));
        rc = hoop__comm_error(c, rc,
                              "hoop_comm_split: connecting the new communicator (color %d, %d ranks) "
                              "failed; ranks as numbered in the parent communicator: %s",
                              color, n, why);
        HOOP_WARN(&c->log, "%s", c->last_error);
        goto out;
    }
    if (set_ring(nc, ptrs, addr) != HOOP_OK) {
        rc = hoop__comm_error(c, HOOP_ERR_NO_MEMORY,
                              "hoop_comm_split: out of memory: cannot allocate the ring order of "
                              "%d ranks", n);
        goto out;
    }
    HOOP_INFO(&c->log, "split: color %d key %d -> rank %d of %d", color, key, newrank, n);
    *newcomm = nc;
    nc = NULL;
out:
    if (nc != NULL) comm_free(nc);
    free(all);
    free(members);
    free(addrs);
    free(ptrs);
    free(parent_of);
    return rc;
}
