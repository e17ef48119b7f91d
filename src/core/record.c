/*
 * The flight recorder (record.h): the ring of a communicator's last calls, its JSON dump, and the
 * SIGUSR2 opt-in that asks for dumps while a job runs.
 *
 * The dump follows the field layout of PyTorch's flight recorder (its c10d dumps: version,
 * pg_config, pg_status, entries with record_id, collective_seq_id, profiling_name, state and the
 * discovery times), so that tools written for those read ours; what only hoop knows (algorithm,
 * op, root, memory, the failure) is added under names of its own. Times are the monotonic clock's
 * nanoseconds; the header gives that clock and the wall clock at the dump, to convert.
 */
#include "core/record.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "base/tables.h"
#include "collectives/plan.h"
#include "runtime/comm.h"

#define RLX memory_order_relaxed

/* ---- the clock ----
 * Ticks become nanoseconds through two readings of both clocks: one as the first communicator
 * opens its recorder, one as a dump is written (at least CALIBRATE_NS later). */

#define CALIBRATE_NS 20000000ull

int hoop__rec_tsc;
static uint64_t tsc0, ns0;
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

static void clock_start(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    /* CPUID 0x80000007, EDX bit 8: the TSC runs at one rate in every state, on every core. */
    if (__get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8))) {
        ns0 = hoop__rec_ns();
        tsc0 = __builtin_ia32_rdtsc();
        hoop__rec_tsc = 1;
    }
#endif
}

/* What the ticks of a dump read now are in nanoseconds: ns0 + (t - tsc0) * rate. */
typedef struct ticks {
    double rate;
} ticks_t;

static ticks_t ticks_now(void)
{
    ticks_t k = {1.0};
    if (!hoop__rec_tsc) return k;
    uint64_t ns = hoop__rec_ns();
    if (ns - ns0 < CALIBRATE_NS) {
        uint64_t left = CALIBRATE_NS - (ns - ns0);
        struct timespec ts = {0, (long)left};
        nanosleep(&ts, NULL);
    }
    uint64_t t = hoop__rec_clock();
    ns = hoop__rec_ns();
    k.rate = (double)(ns - ns0) / (double)(t - tsc0);
    return k;
}

static uint64_t ticks_ns(const ticks_t *k, uint64_t t)
{
    if (t == 0 || !hoop__rec_tsc) return t;
    return ns0 + (uint64_t)((double)(t - tsc0) * k->rate);
}

/* ---- the ring ---- */

hoop_result_t hoop__rec_open(hoop_comm_t *c, uint32_t cap, const char *name)
{
    pthread_once(&clock_once, clock_start);
    hoop__rec_t *r = calloc(1, sizeof(*r));
    if (r == NULL) return HOOP_ERR_NO_MEMORY;
    if (cap > 0) {
        r->ring = calloc(cap, sizeof(*r->ring));
        if (r->ring == NULL) {
            free(r);
            return HOOP_ERR_NO_MEMORY;
        }
    }
    r->cap = cap;
    snprintf(r->name, sizeof(r->name), "%s", name);
    c->rec = r;
    return HOOP_OK;
}

void hoop__rec_close(hoop_comm_t *c)
{
    if (c->rec == NULL) return;
    free(c->rec->ring);
    free(c->rec);
    c->rec = NULL;
}

/* kind, dtype, op, algo, engine, mem, receive, small: 8 bits each. */
static uint64_t desc_of(const hoop__call_t *call)
{
    return (uint64_t)(call->kind & 0xff) | (uint64_t)(call->dtype & 0xff) << 8 |
           (uint64_t)(call->op & 0xff) << 16 | (uint64_t)call->plan.algo << 24 |
           (uint64_t)call->plan.engine << 32 | (uint64_t)(call->mem & 0xff) << 40 |
           (uint64_t)(call->is_recv != 0) << 48 | (uint64_t)call->plan.small << 56;
}

static uint64_t moved(const hoop_comm_t *c)
{
    return atomic_load_explicit(&c->bytes_sent, RLX) +
           atomic_load_explicit(&c->bytes_received, RLX);
}

/* The entry of record id + 1 rec, NULL where none (off, or overwritten by a newer call: one
 * that was still pending HOOP_RECORD calls later). */
static hoop__rec_entry_t *entry_of(const hoop_comm_t *c, const hoop__call_t *call)
{
    const hoop__rec_t *r = c->rec;
    if (call->rec == 0) return NULL;
    hoop__rec_entry_t *e = &r->ring[call->rec_slot];
    return atomic_load_explicit(&e->id, RLX) == call->rec ? e : NULL;
}

void hoop__rec_post(hoop_comm_t *c, hoop__call_t *call, int started)
{
    hoop__rec_t *r = c->rec;
    call->rec = 0;
    if (r->ring == NULL) return;
    uint64_t id = atomic_load_explicit(&r->next, RLX);
    uint32_t slot = r->slot;
    hoop__rec_entry_t *e = &r->ring[slot];
    r->slot = slot + 1 == r->cap ? 0 : slot + 1;
    /* A seqlock's writer: the entry reads as being written until its new id is stored. */
    atomic_store_explicit(&e->id, 0, RLX);
    atomic_thread_fence(memory_order_release);
    uint64_t now = hoop__rec_clock();
    int p2p = call->kind == HOOP__K_SEND;
    atomic_store_explicit(&e->seq, p2p ? r->p2p_next++ : call->seq, RLX);
    atomic_store_explicit(&e->desc, desc_of(call), RLX);
    atomic_store_explicit(&e->root, call->root, RLX);
    atomic_store_explicit(&e->count, call->count, RLX);
    atomic_store_explicit(&e->state, started ? HOOP__REC_STARTED : HOOP__REC_POSTED, RLX);
    atomic_store_explicit(&e->t_posted, now, RLX);
    atomic_store_explicit(&e->t_started, started ? now : 0, RLX);
    atomic_store_explicit(&e->t_finished, 0, RLX);
    atomic_store_explicit(&e->bytes0, started ? moved(c) : 0, RLX);
    atomic_store_explicit(&e->bytes, 0, RLX);
    atomic_store_explicit(&e->id, id + 1, memory_order_release);
    atomic_store_explicit(&r->next, id + 1, memory_order_release);
    call->rec = id + 1;
    call->rec_slot = slot;
}

void hoop__rec_start(hoop_comm_t *c, const hoop__call_t *call)
{
    hoop__rec_entry_t *e = entry_of(c, call);
    if (e == NULL || atomic_load_explicit(&e->state, RLX) != HOOP__REC_POSTED) return;
    atomic_store_explicit(&e->bytes0, moved(c), RLX);
    atomic_store_explicit(&e->t_started, hoop__rec_clock(), RLX);
    atomic_store_explicit(&e->state, HOOP__REC_STARTED, memory_order_release);
}

void hoop__rec_end(hoop_comm_t *c, const hoop__call_t *call, hoop_result_t st)
{
    if (st == HOOP_ERR_TIMEOUT) atomic_store(&c->rec_dump_due, 1);
    hoop__rec_entry_t *e = entry_of(c, call);
    if (e == NULL || atomic_load_explicit(&e->state, RLX) >= HOOP__REC_FINISHED) return;
    uint64_t now = hoop__rec_clock(), bytes = 0;
    if (call->kind == HOOP__K_SEND)
        bytes = st == HOOP_OK ? call->count * hoop__dtype_size(call->dtype) : 0;
    else if (atomic_load_explicit(&e->t_started, RLX) != 0)
        bytes = moved(c) - atomic_load_explicit(&e->bytes0, RLX);
    if (atomic_load_explicit(&e->t_started, RLX) == 0)
        atomic_store_explicit(&e->t_started, now, RLX);
    /* The plan as it ran (an agreement step may have changed it), the peer a receive from any
     * source matched. */
    atomic_store_explicit(&e->desc, desc_of(call), RLX);
    atomic_store_explicit(&e->root, call->root, RLX);
    atomic_store_explicit(&e->bytes, bytes, RLX);
    atomic_store_explicit(&e->t_finished, now, RLX);
    uint32_t state = st == HOOP_OK ? HOOP__REC_FINISHED : HOOP__REC_FAILED | (uint32_t)st << 8;
    atomic_store_explicit(&e->state, state, memory_order_release);
}

/* ---- the dump ---- */

/* An entry as a dump reads it. */
typedef struct snap {
    uint64_t id, seq, desc, count, t_posted, t_started, t_finished, bytes0, bytes;
    int64_t root;
    uint32_t state;
} snap_t;

/* The seqlock's reader: 0 where the entry was being rewritten (a newer call took it). */
static int snap_read(const hoop__rec_entry_t *e, uint64_t want, snap_t *s)
{
    uint64_t id = atomic_load_explicit(&e->id, memory_order_acquire);
    if (id != want) return 0;
    s->id = id - 1;
    s->seq = atomic_load_explicit(&e->seq, RLX);
    s->desc = atomic_load_explicit(&e->desc, RLX);
    s->root = atomic_load_explicit(&e->root, RLX);
    s->count = atomic_load_explicit(&e->count, RLX);
    s->state = atomic_load_explicit(&e->state, RLX);
    s->t_posted = atomic_load_explicit(&e->t_posted, RLX);
    s->t_started = atomic_load_explicit(&e->t_started, RLX);
    s->t_finished = atomic_load_explicit(&e->t_finished, RLX);
    s->bytes0 = atomic_load_explicit(&e->bytes0, RLX);
    s->bytes = atomic_load_explicit(&e->bytes, RLX);
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&e->id, RLX) == want;
}

#define D_KIND(d) ((int)((d)&0xff))
#define D_DTYPE(d) ((hoop_dtype_t)(((d) >> 8) & 0xff))
#define D_OP(d) ((hoop_op_t)(((d) >> 16) & 0xff))
#define D_ALGO(d) ((uint8_t)(((d) >> 24) & 0xff))
#define D_ENGINE(d) ((uint8_t)(((d) >> 32) & 0xff))
#define D_MEM(d) ((int)(((d) >> 40) & 0xff))
#define D_RECV(d) ((int)(((d) >> 48) & 1))
#define D_SMALL(d) ((uint8_t)(((d) >> 56) & 0xff))

/* torch's names: profiling names after its collectives, dtypes after its scalar types. */
static const char *profiling_name(int kind, int recv)
{
    static const char *const names[HOOP__K_COUNT] = {
        [HOOP__K_ALLREDUCE] = "hoop:all_reduce",
        [HOOP__K_BROADCAST] = "hoop:broadcast",
        [HOOP__K_REDUCE] = "hoop:reduce",
        [HOOP__K_ALLGATHER] = "hoop:all_gather",
        [HOOP__K_GATHER] = "hoop:gather",
        [HOOP__K_SCATTER] = "hoop:scatter",
        [HOOP__K_REDUCE_SCATTER] = "hoop:reduce_scatter",
        [HOOP__K_ALLTOALL] = "hoop:all_to_all",
        [HOOP__K_BARRIER] = "hoop:barrier",
        [HOOP__K_SEND] = "hoop:send",
        [HOOP__K_SPLIT] = "hoop:split",
    };
    if (kind == HOOP__K_SEND && recv) return "hoop:recv";
    return kind > 0 && kind < HOOP__K_COUNT && names[kind] != NULL ? names[kind] : "hoop:unknown";
}

static const char *torch_dtype(hoop_dtype_t dt)
{
    static const char *const names[HOOP_DTYPE_COUNT] = {
        "Char", "Byte", "Int", "UInt32", "Long", "UInt64", "Half", "BFloat16", "Float", "Double"};
    return (unsigned)dt < HOOP_DTYPE_COUNT ? names[dt] : "Undefined";
}

/* Elements in and out of this rank's buffers, as torch's input_sizes and output_sizes. */
static void sizes(int kind, uint64_t n, int p, uint64_t *in, uint64_t *out)
{
    *in = *out = n;
    switch (kind) {
    case HOOP__K_ALLGATHER:
    case HOOP__K_GATHER: *out = n * (uint64_t)p; break;
    case HOOP__K_SCATTER:
    case HOOP__K_REDUCE_SCATTER: *in = n * (uint64_t)p; break;
    case HOOP__K_ALLTOALL: *in = *out = n * (uint64_t)p; break;
    case HOOP__K_BARRIER: *in = *out = 0; break;
    default: break;
    }
}

static const char *state_word(uint32_t st)
{
    switch (st & 0xff) {
    case HOOP__REC_POSTED: return "scheduled";
    case HOOP__REC_STARTED: return "started";
    default: return "completed";
    }
}

/* Our own strings only (names, host, the failure's sentence), escaped all the same. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_ns(FILE *f, const char *key, uint64_t ns)
{
    if (ns == 0)
        fprintf(f, ", \"%s\": null", key);
    else
        fprintf(f, ", \"%s\": %" PRIu64, key, ns);
}

static void write_entry(FILE *f, const hoop_comm_t *c, const snap_t *s, uint64_t bytes_now)
{
    int kind = D_KIND(s->desc), p2p = kind == HOOP__K_SEND, recv = D_RECV(s->desc);
    hoop_dtype_t dt = D_DTYPE(s->desc);
    uint64_t in, out;
    sizes(kind, s->count, c->size, &in, &out);
    int done = (s->state & 0xff) >= HOOP__REC_FINISHED;
    hoop_result_t code = (hoop_result_t)(s->state >> 8);
    fprintf(f, "    {\"record_id\": %" PRIu64 ", \"pg_id\": ", s->id);
    json_str(f, c->rec->name);
    fprintf(f, ", \"process_group\": [");
    json_str(f, c->rec->name);
    fprintf(f,
            ", \"hoop\"], \"collective_seq_id\": %" PRIu64 ", \"p2p_seq_id\": %" PRIu64
            ", \"op_id\": %" PRIu64 ", \"profiling_name\": \"%s\"",
            p2p ? 0 : s->seq, p2p ? s->seq : 0, s->id, profiling_name(kind, recv));
    fprintf(f, ", \"input_sizes\": [[%" PRIu64 "]], \"output_sizes\": [[%" PRIu64 "]]", in, out);
    fprintf(f, ", \"input_dtypes\": [\"%s\"], \"output_dtypes\": [\"%s\"]", torch_dtype(dt),
            torch_dtype(dt));
    fprintf(f, ", \"state\": \"%s\"", state_word(s->state));
    json_ns(f, "time_created_ns", s->t_posted);
    json_ns(f, "time_discovered_started_ns", s->t_started);
    json_ns(f, "time_discovered_completed_ns", done ? s->t_finished : 0);
    if (done && s->t_started != 0)
        fprintf(f, ", \"duration_ms\": %.6f", (double)(s->t_finished - s->t_started) * 1e-6);
    else
        fprintf(f, ", \"duration_ms\": null");
    fprintf(f, ", \"timeout_ms\": %.0f, \"is_p2p\": %s, \"retired\": %s, \"frames\": []",
            c->timeout_s * 1e3, p2p ? "true" : "false", done ? "true" : "false");
    /* hoop's own. */
    hoop__call_t call = {
        .kind = (hoop__kind_t)kind,
        .plan = {.engine = D_ENGINE(s->desc), .algo = D_ALGO(s->desc), .small = D_SMALL(s->desc)}};
    fprintf(f, ", \"hoop_state\": \"%s\"",
            (s->state & 0xff) == HOOP__REC_FAILED    ? "failed"
            : done                                   ? "finished"
            : (s->state & 0xff) == HOOP__REC_STARTED ? "started"
                                                     : "posted");
    if ((s->state & 0xff) == HOOP__REC_FAILED) {
        fprintf(f, ", \"error\": \"%s\"", hoop__error_name(code));
    } else {
        fprintf(f, ", \"error\": null");
    }
    fprintf(f, ", \"kind\": \"%s\", \"dtype\": \"%s\", \"count\": %" PRIu64,
            p2p ? (recv ? "recv" : "send") : hoop__kind_name(kind), hoop__dtype_name(dt), s->count);
    if (kind == HOOP__K_ALLREDUCE || kind == HOOP__K_REDUCE || kind == HOOP__K_REDUCE_SCATTER)
        fprintf(f, ", \"op\": \"%s\"", hoop__op_name(D_OP(s->desc)));
    else
        fprintf(f, ", \"op\": null");
    fprintf(f, ", \"%s\": %" PRId64 ", \"algorithm\": \"%s\", \"memory\": \"%s\"",
            p2p ? "peer" : "root", s->root, hoop__plan_schedule(&call),
            D_MEM(s->desc) == HOOP__MEM_CUDA ? "cuda" : "host");
    /* Bytes so far: what a running collective has moved through the transport up to now. */
    uint64_t bytes = done                                             ? s->bytes
                     : (s->state & 0xff) == HOOP__REC_STARTED && !p2p ? bytes_now - s->bytes0
                                                                      : 0;
    fprintf(f, ", \"bytes\": %" PRIu64 "}", bytes);
}

static void write_dump(FILE *f, hoop_comm_t *c)
{
    hoop__rec_t *r = c->rec;
    uint64_t next = atomic_load_explicit(&r->next, memory_order_acquire);
    uint64_t first = r->cap > 0 && next > r->cap ? next - r->cap : 0;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    ticks_t k = ticks_now();
    uint64_t mono = hoop__rec_ns(), bytes_now = moved(c);
    char fatal[sizeof(c->fatal_msg)];
    pthread_mutex_lock(&c->err_mu);
    memcpy(fatal, c->fatal_msg, sizeof(fatal));
    pthread_mutex_unlock(&c->err_mu);
    fatal[sizeof(fatal) - 1] = '\0';
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);

    fprintf(f, "{\n  \"version\": \"2.4\",\n  \"pg_config\": {");
    json_str(f, r->name);
    fprintf(f, ": {\"name\": ");
    json_str(f, r->name);
    fprintf(f, ", \"desc\": \"hoop\", \"ranks\": \"[");
    for (int i = 0; i < c->size; i++) fprintf(f, "%s%d", i ? ", " : "", i);
    fprintf(f, "]\"}},\n");

    /* Entries first into memory order, pg_status from them: the last collective posted, started
     * and ended among those the ring holds. */
    int64_t enq = -1, sta = -1, com = -1;
    for (uint64_t id = first; id < next; id++) {
        snap_t s;
        if (!snap_read(&r->ring[id % r->cap], id + 1, &s) || D_KIND(s.desc) == HOOP__K_SEND)
            continue;
        enq = (int64_t)s.seq;
        if ((s.state & 0xff) >= HOOP__REC_STARTED) sta = (int64_t)s.seq;
        if ((s.state & 0xff) >= HOOP__REC_FINISHED) com = (int64_t)s.seq;
    }
    fprintf(f, "  \"pg_status\": {");
    json_str(f, r->name);
    fprintf(f,
            ": {\"last_enqueued_collective\": %" PRId64 ", \"last_started_collective\": %" PRId64
            ", \"last_completed_collective\": %" PRId64 "}},\n",
            enq, sta, com);

    fprintf(f, "  \"hoop\": {\"version\": \"%s\", \"rank\": %d, \"size\": %d, \"host\": ",
            HOOP_VERSION_STRING, c->rank, c->size);
    json_str(f, c->host);
    fprintf(f,
            ", \"pid\": %d, \"comm_id\": \"%016" PRIx64 "\", \"record\": %u, \"recorded\": %" PRIu64
            ", \"clock\": \"monotonic\", \"monotonic_ns\": %" PRIu64 ", \"wall_ns\": %" PRIu64,
            (int)getpid(), c->id, r->cap, next, mono,
            (uint64_t)wall.tv_sec * UINT64_C(1000000000) + (uint64_t)wall.tv_nsec);
    if (r->ring == NULL)
        fprintf(f, ", \"note\": \"the flight recorder is off (HOOP_RECORD=0): no call was "
                   "recorded\"");
    fprintf(f, ", \"aborted\": ");
    if (ab != HOOP_OK) {
        fprintf(f, "\"%s\", \"reason\": ", hoop__error_name(ab));
        json_str(f, fatal);
    } else {
        fprintf(f, "null, \"reason\": null");
    }
    fprintf(f, "},\n  \"entries\": [");
    int any = 0;
    for (uint64_t id = first; id < next; id++) {
        snap_t s;
        if (!snap_read(&r->ring[id % r->cap], id + 1, &s)) continue;
        s.t_posted = ticks_ns(&k, s.t_posted);
        s.t_started = ticks_ns(&k, s.t_started);
        s.t_finished = ticks_ns(&k, s.t_finished);
        fprintf(f, "%s\n", any ? "," : "");
        write_entry(f, c, &s, bytes_now);
        any = 1;
    }
    fprintf(f, "%s]\n}\n", any ? "\n  " : "");
}

static void default_path(const hoop_comm_t *c, char *buf, size_t n)
{
    const char *dir = c->cfg.record_dir[0] != '\0' ? c->cfg.record_dir : ".";
    if (strcmp(c->rec->name, "0") == 0)
        snprintf(buf, n, "%s/hoop-trace-%d.json", dir, c->rank);
    else
        snprintf(buf, n, "%s/hoop-trace-%s-%d.json", dir, c->rec->name, c->rank);
}

hoop_result_t hoop__rec_dump(hoop_comm_t *c, const char *path)
{
    char def[HOOP__CONFIG_PATH + 64], tmp[sizeof(def) + 32];
    if (path == NULL) {
        default_path(c, def, sizeof(def));
        path = def;
    }
    /* Whole or not at all: a reader never sees half a dump; and two dumps at once (the signal's
     * thread and the application's) each write a file of their own. */
    static atomic_uint nth;
    int w = snprintf(tmp, sizeof(tmp), "%s.%d-%u.tmp", path, (int)getpid(),
                     atomic_fetch_add(&nth, 1));
    if (w < 0 || (size_t)w >= sizeof(tmp))
        return hoop__comm_error(c, HOOP_ERR_INVALID_ARGUMENT,
                                "hoop_comm_dump: the path \"%.200s\" is too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        int e = errno;
        if (fd >= 0) close(fd);
        return hoop__comm_error(c, HOOP_ERR_SYSTEM, "hoop_comm_dump: cannot write %.300s: %s", tmp,
                                strerror(e));
    }
    write_dump(f, c);
    int bad = ferror(f);
    int e = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (!bad && rename(tmp, path) != 0) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlink(tmp);
        return hoop__comm_error(c, HOOP_ERR_SYSTEM, "hoop_comm_dump: cannot write %.300s: %s", path,
                                strerror(e));
    }
    HOOP__INFO(&c->log, "flight recorder: %" PRIu64 " call(s) dumped to %s",
               atomic_load(&c->rec->next), path);
    return HOOP_OK;
}

void hoop__rec_dump_due(hoop_comm_t *c)
{
    /* A call that timed out alone (the communicator usable) dumps each time; an abort, once. */
    int due = atomic_load_explicit(&c->rec_dump_due, RLX) && atomic_exchange(&c->rec_dump_due, 0);
    int abort_due = atomic_load_explicit(&c->abort_dumps, RLX) &&
                    !atomic_exchange(&c->rec_dumped, 1);
    if (!due && !abort_due) return;
    char path[HOOP__CONFIG_PATH + 64];
    default_path(c, path, sizeof(path));
    /* The abort that dumps may come from a disagreement, not a timeout: the line says so. */
    const char *what = due ? "a call timed out"
                           : "the communicator failed on a timeout or a disagreement";
    if (hoop__rec_dump(c, NULL) == HOOP_OK)
        HOOP__WARN(&c->log, "%s: the flight recorder's last calls are in %s", what, path);
    else
        HOOP__WARN(&c->log, "%s, and the flight recorder could not be dumped: %s", what,
                   hoop__comm_last(c));
}

/* ---- the newest call, for core/explain.c ---- */

/* How far back from the newest entry a collective is looked for among point-to-point calls. */
#define LATEST_SCAN 256

void hoop__rec_latest(const hoop_comm_t *c, hoop__rec_latest_t *out)
{
    memset(out, 0, sizeof(*out));
    const hoop__rec_t *r = c->rec;
    if (r == NULL || r->ring == NULL) {
        out->off = 1;
        return;
    }
    uint64_t next = atomic_load_explicit(&r->next, memory_order_acquire);
    ticks_t k = ticks_now();
    uint64_t now = hoop__rec_ns();
    for (uint64_t back = 0; back < next && back < r->cap && back < LATEST_SCAN; back++) {
        uint64_t id = next - 1 - back;
        snap_t s;
        if (!snap_read(&r->ring[id % r->cap], id + 1, &s)) continue;
        if (D_KIND(s.desc) == HOOP__K_SEND) continue;
        out->have = 1;
        out->seq = s.seq;
        out->count = s.count;
        out->kind = D_KIND(s.desc);
        out->dtype = (int)D_DTYPE(s.desc);
        out->state = s.state;
        uint64_t since = s.t_finished != 0 ? ticks_ns(&k, s.t_finished) : ticks_ns(&k, s.t_posted);
        out->age_ns = now > since ? now - since : 0;
        hoop__call_t call = {
            .kind = (hoop__kind_t)out->kind,
            .plan = {.engine = D_ENGINE(s.desc), .algo = D_ALGO(s.desc), .small = D_SMALL(s.desc)}};
        snprintf(out->schedule, sizeof(out->schedule), "%s", hoop__plan_schedule(&call));
        out->engine = call.plan.engine;
        out->algo = call.plan.algo;
        out->small = call.plan.small != 0;
        return;
    }
}

/* ---- SIGUSR2 (HOOP_RECORD_SIGNAL=1) ----
 * The handler writes a byte to a pipe and calls the handler it replaced; a thread of hoop's reads
 * the pipe and dumps every registered communicator. life_mu orders registrations (the thread is
 * started and joined under it); reg_mu guards the list, which the thread walks as it dumps. */

static pthread_mutex_t life_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static hoop_comm_t *registered; /* under reg_mu */
static int sig_stop;            /* under reg_mu */
static pthread_t sig_thread;
static int sig_thread_on; /* under life_mu */
/* Made once and kept: a handler may still run on another thread as the last communicator goes. */
static int sig_pipe[2] = {-1, -1};
static struct sigaction sig_old;

static void on_sigusr2(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    char b = 1;
    ssize_t w = write(sig_pipe[1], &b, 1); /* full: a dump is asked for already */
    (void)w;
    errno = saved;
    if (sig_old.sa_flags & SA_SIGINFO) {
        if (sig_old.sa_sigaction != NULL) sig_old.sa_sigaction(sig, si, uc);
    } else if (sig_old.sa_handler != SIG_DFL && sig_old.sa_handler != SIG_IGN) {
        sig_old.sa_handler(sig);
    }
}

static void *sig_main(void *arg)
{
    (void)arg;
    (void)pthread_setname_np(pthread_self(), "hoop-record");
    for (;;) {
        struct pollfd p = {.fd = sig_pipe[0], .events = POLLIN};
        int n = poll(&p, 1, 1000); /* the stop flag is looked at every second at least */
        pthread_mutex_lock(&reg_mu);
        if (sig_stop) {
            pthread_mutex_unlock(&reg_mu);
            break;
        }
        if (n > 0) {
            char buf[64];
            while (read(sig_pipe[0], buf, sizeof(buf)) > 0) continue;
            for (hoop_comm_t *c = registered; c != NULL; c = c->rec->next_registered)
                if (hoop__rec_dump(c, NULL) != HOOP_OK)
                    HOOP__WARN(&c->log, "SIGUSR2: %s", hoop__comm_last(c));
        }
        pthread_mutex_unlock(&reg_mu);
    }
    return NULL;
}

/* Under life_mu: the pipe, the thread and the handler, for the first communicator. */
static int sig_begin(hoop_comm_t *c)
{
    if (sig_pipe[0] < 0 && pipe2(sig_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        HOOP__WARN(&c->log, "HOOP_RECORD_SIGNAL: no pipe for the SIGUSR2 dumps: %s",
                   strerror(errno));
        return -1;
    }
    sig_stop = 0;
    /* The thread takes no signal: they go to the application's threads, as before. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&sig_thread, NULL, sig_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        HOOP__WARN(&c->log, "HOOP_RECORD_SIGNAL: cannot start the dump thread: %s", strerror(rc));
        return -1;
    }
    sig_thread_on = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigusr2;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    /* The handler in place is read first: ours may run as soon as it is installed. */
    sigaction(SIGUSR2, NULL, &sig_old);
    sigaction(SIGUSR2, &sa, NULL);
    return 0;
}

/* Under life_mu, once the last communicator is gone: the handler that was there goes back
 * (unless another was installed after ours: it is left alone), and the thread stops. */
static void sig_end(void)
{
    struct sigaction cur;
    if (sigaction(SIGUSR2, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == on_sigusr2)
        sigaction(SIGUSR2, &sig_old, NULL);
    pthread_mutex_lock(&reg_mu);
    sig_stop = 1;
    pthread_mutex_unlock(&reg_mu);
    char b = 0;
    ssize_t w = write(sig_pipe[1], &b, 1);
    (void)w;
    pthread_join(sig_thread, NULL);
    sig_thread_on = 0;
}

void hoop__rec_register(hoop_comm_t *c)
{
    if (!c->cfg.record_signal || c->rec->on_signal) return;
    pthread_mutex_lock(&life_mu);
    if (sig_thread_on || sig_begin(c) == 0) {
        pthread_mutex_lock(&reg_mu);
        c->rec->next_registered = registered;
        registered = c;
        c->rec->on_signal = 1;
        pthread_mutex_unlock(&reg_mu);
    }
    pthread_mutex_unlock(&life_mu);
}

void hoop__rec_forget(hoop_comm_t *c)
{
    if (c->rec == NULL || !c->rec->on_signal) return;
    pthread_mutex_lock(&life_mu);
    pthread_mutex_lock(&reg_mu);
    for (hoop_comm_t **pp = &registered; *pp != NULL; pp = &(*pp)->rec->next_registered)
        if (*pp == c) {
            *pp = c->rec->next_registered;
            break;
        }
    c->rec->on_signal = 0;
    int last = registered == NULL;
    pthread_mutex_unlock(&reg_mu);
    if (last && sig_thread_on) sig_end();
    pthread_mutex_unlock(&life_mu);
}
