/*
 * ddp_train: data-parallel SGD on hoop, the way PyTorch's DistributedDataParallel does it.
 *
 * Every rank holds a full replica of the model. Each step, a rank takes its own shard of the global
 * batch (the distributed sampler), runs forward and backward, and averages the gradients with every
 * other rank (all-reduce, HOOP_AVG) before the same SGD update, so the replicas stay bit-identical.
 * Gradients are grouped into buckets from the last layer to the first; a bucket's all-reduce starts
 * (hoop_iallreduce) as soon as backward has produced all of its gradients, while backward goes on
 * with the earlier layers, and the step waits for all of them before the update. Rank 0 writes the
 * checkpoints; a restarted job resumes from the last one.
 *
 * See docs/ddp.md.
 */
#include <hoop.h>

#include "ddp.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)
#define FIRST_BUCKET_MIB 1.0 /* DDP's first bucket is small so that communication starts early */
#define HASH_BASIS UINT64_C(0xCBF29CE484222325)

typedef struct {
    int mlp;
    size_t hidden[DDP_MAX_LAYERS];
    int nhidden;
    int hidden_given;
    size_t samples, features;
    uint64_t seed;
    double lr;
    size_t batch;
    long epochs;
    int drop_last;
    double bucket_mb;
    const char *sync; /* NULL: whatever HOOP_ALGO says */
    int overlap;
    const char *checkpoint;
    long save_every;
    int save_every_given;
    const char *metrics;
    const char *dump_weights;
    int check_replicas;
    const char *init_method;
    int quiet;
    long stop_after;    /* -1: never */
    long fail_at_epoch; /* -1: never */
    long fail_rank;     /* -1: the last rank */
    long diverge_rank;  /* -1: never */
    int survive;
    long kill_at_epoch; /* -1: never */
    int sym_buckets;    /* gradients in symmetric memory (hoop_mem_alloc) */
} opts_t;

typedef struct {
    size_t off, count; /* range of the flat gradient array */
    int first_layer;   /* lowest layer with a tensor here: the bucket is ready once it is done */
    hoop_request_t *req;
} bucket_t;

typedef struct {
    const opts_t *o;
    hoop_comm_t *comm;
    int rank, world;
    ddp_mlp_t m;
    bucket_t *buckets;
    int nbuckets, launched;
    double wait_s;      /* seconds spent inside hoop calls during the current step */
    int kill_now;       /* --kill-at-epoch: this rank dies once its first bucket is posted */
    hoop_result_t fail; /* --survive: the step's first failed call (the step stops there) */
    char fail_what[64];
    hoop_comm_t **shrunk; /* --survive: the communicators left behind, freed at the end */
    int nshrunk;
    float *heap_grad;      /* --sym-buckets: the model's own gradient array, set aside */
    hoop_comm_t *sym_comm; /* --sym-buckets: the communicator whose memory holds them */
} trainer_t;

static void usage(FILE *f)
{
    fputs(
        "usage: ddp_train [options]      (run it under a launcher: hooprun -n N ddp_train ...)\n"
        "\n"
        "Data-parallel SGD on a synthetic regression data set (y = w.x + b + noise), with the\n"
        "gradients averaged across ranks by bucketed all-reduces that overlap the backward pass.\n"
        "\n"
        "model and data:\n"
        "  --model linear|mlp     linear regression, or a ReLU multilayer perceptron (default "
        "linear)\n"
        "  --hidden N,N,...       hidden layer widths of the mlp (default 1024,1024,1024)\n"
        "  --samples N            samples in the data set (default 2048)\n"
        "  --features N           features per sample (default 20)\n"
        "  --seed N               seed of the data, the initial weights and the shuffles (default "
        "42)\n"
        "training:\n"
        "  --lr X                 SGD learning rate (default 0.01)\n"
        "  --batch N              batch size per rank; the global batch is N x ranks (default 32)\n"
        "  --epochs N             epochs to train (default 10)\n"
        "  --drop-last            drop the tail of the shuffled data set that does not divide "
        "among\n"
        "                         the ranks, instead of padding it with repeated samples\n"
        "communication:\n"
        "  --bucket-mb X          gradient bucket size in MiB (default 25; the first bucket is at\n"
        "                         most 1 MiB, as in DDP)\n"
        "  --sync ALGO            all-reduce algorithm: ring, ps, rd, ps-sharded or auto "
        "(default:\n"
        "                         HOOP_ALGO, else auto)\n"
        "  --no-overlap           all-reduce the buckets after backward instead of during it\n"
        "  --sym-buckets          keep the gradient buckets in symmetric memory (hoop_mem_alloc;\n"
        "                         every rank on one host): their all-reduces run zero-copy\n"
        "  --init-method URL      rendezvous: env:// (default), tcp://HOST:PORT, file:///PATH\n"
        "checkpoints and output:\n"
        "  --checkpoint PATH      save the model there (rank 0) and resume from it if it exists\n"
        "  --save-every N         save after every N epochs, and after the last one (default 1)\n"
        "  --metrics FILE         rank 0 writes one CSV row per epoch (kept across resumes)\n"
        "  --dump-weights FILE    rank 0 writes the final parameters as raw float32\n"
        "  --check-replicas       after every step, check that all ranks hold bit-identical "
        "weights\n"
        "  --quiet                print errors only\n"
        "  -h, --help             show this help\n"
        "stopping and failing on purpose (tests, time-limited jobs):\n"
        "  --stop-after K         stop once K epochs are done (saving the checkpoint, if any)\n"
        "  --fail-at-epoch K      a rank exits with status 3 in the middle of epoch K, unless\n"
        "                         HOOP_RESTART_COUNT (or TORCHELASTIC_RESTART_COUNT) is set and\n"
        "                         not 0 (a restarted job)\n"
        "  --fail-rank R          the rank that fails (default: the last)\n"
        "  --test-diverge R       rank R alters one weight after the first step (--check-replicas\n"
        "                         must catch it)\n"
        "  --kill-at-epoch K      the rank of --fail-rank SIGKILLs itself in the middle of epoch\n"
        "                         K, once its first gradient all-reduce of the step is posted\n"
        "surviving a lost rank:\n"
        "  --survive              when a gradient all-reduce fails because a rank was lost, the\n"
        "                         others shrink the communicator (hoop_comm_shrink), deal the\n"
        "                         epoch's remaining samples out again among themselves, and go\n"
        "                         on (docs/ddp.md)\n"
        "\n"
        "exit status: 0 done, 1 failure (a hoop call, a file, diverged replicas), 2 bad usage,\n"
        "3 failure injected by --fail-at-epoch.\n",
        f);
}

static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ddp_train: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (see ddp_train -h)\n", stderr);
    va_end(ap);
    exit(2);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A failed hoop call ends the job: this rank says why and drops its connections, so that the others
 * fail at once with "peer lost" instead of waiting for their timeout. */
static void hcheck(trainer_t *t, hoop_result_t rc, const char *what)
{
    if (rc == HOOP_OK) return;
    fprintf(stderr, "ddp_train: rank %d: %s failed: %s: %s\n", t->rank, what, hoop_error_string(rc),
            hoop_comm_last_error(t->comm));
    hoop_comm_abort(t->comm);
    hoop_comm_destroy(t->comm);
    exit(1);
}

static void vstop(trainer_t *t, int abort_comm, const char *fmt, va_list ap)
{
    fprintf(stderr, "ddp_train: rank %d: ", t->rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    if (t->comm != NULL) {
        if (abort_comm) hoop_comm_abort(t->comm);
        hoop_comm_destroy(t->comm);
    }
    exit(1);
}

/* A failure the other ranks do not know about: abort, so that they stop too. */
static void die(trainer_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vstop(t, 1, fmt, ap);
    va_end(ap);
}

/* A failure every rank has just been told about: leave without aborting, which could drop the
 * message that told them before it is delivered. */
static void stop(trainer_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vstop(t, 0, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- options */

static long parse_long(const char *opt, const char *s, long min, long max)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        usage_error("%s '%s': want an integer from %ld to %ld", opt, s, min, max);
    return v;
}

static double parse_double(const char *opt, const char *s, double min, double max)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= min && v <= max))
        usage_error("%s '%s': want a number from %g to %g", opt, s, min, max);
    return v;
}

static void parse_hidden(opts_t *o, const char *s)
{
    o->nhidden = 0;
    const char *p = s;
    for (;;) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno != 0 || v < 1 || v > 65536 || (*end != ',' && *end != '\0'))
            usage_error("--hidden '%s': want widths from 1 to 65536 separated by commas", s);
        if (o->nhidden == DDP_MAX_LAYERS - 1)
            usage_error("--hidden '%s': at most %d hidden layers", s, DDP_MAX_LAYERS - 1);
        o->hidden[o->nhidden++] = (size_t)v;
        if (*end == '\0') break;
        p = end + 1;
    }
}

static void parse_options(opts_t *o, int argc, char **argv)
{
    enum {
        O_MODEL = 256,
        O_HIDDEN,
        O_SAMPLES,
        O_FEATURES,
        O_SEED,
        O_LR,
        O_BATCH,
        O_EPOCHS,
        O_DROP,
        O_BUCKET,
        O_SYNC,
        O_NO_OVERLAP,
        O_INIT,
        O_CKPT,
        O_SAVE,
        O_METRICS,
        O_DUMP,
        O_CHECK,
        O_QUIET,
        O_STOP,
        O_FAIL,
        O_FAIL_RANK,
        O_DIVERGE,
        O_KILL,
        O_SURVIVE,
        O_SYM
    };
    static const struct option longs[] = {
        {"model", required_argument, 0, O_MODEL},
        {"hidden", required_argument, 0, O_HIDDEN},
        {"samples", required_argument, 0, O_SAMPLES},
        {"features", required_argument, 0, O_FEATURES},
        {"seed", required_argument, 0, O_SEED},
        {"lr", required_argument, 0, O_LR},
        {"batch", required_argument, 0, O_BATCH},
        {"epochs", required_argument, 0, O_EPOCHS},
        {"drop-last", no_argument, 0, O_DROP},
        {"bucket-mb", required_argument, 0, O_BUCKET},
        {"sync", required_argument, 0, O_SYNC},
        {"no-overlap", no_argument, 0, O_NO_OVERLAP},
        {"init-method", required_argument, 0, O_INIT},
        {"checkpoint", required_argument, 0, O_CKPT},
        {"save-every", required_argument, 0, O_SAVE},
        {"metrics", required_argument, 0, O_METRICS},
        {"dump-weights", required_argument, 0, O_DUMP},
        {"check-replicas", no_argument, 0, O_CHECK},
        {"quiet", no_argument, 0, O_QUIET},
        {"stop-after", required_argument, 0, O_STOP},
        {"fail-at-epoch", required_argument, 0, O_FAIL},
        {"fail-rank", required_argument, 0, O_FAIL_RANK},
        {"test-diverge", required_argument, 0, O_DIVERGE},
        {"kill-at-epoch", required_argument, 0, O_KILL},
        {"survive", no_argument, 0, O_SURVIVE},
        {"sym-buckets", no_argument, 0, O_SYM},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    *o = (opts_t){.hidden = {1024, 1024, 1024},
                  .nhidden = 3,
                  .samples = 2048,
                  .features = 20,
                  .seed = 42,
                  .lr = 0.01,
                  .batch = 32,
                  .epochs = 10,
                  .bucket_mb = 25.0,
                  .overlap = 1,
                  .save_every = 1,
                  .stop_after = -1,
                  .fail_at_epoch = -1,
                  .fail_rank = -1,
                  .diverge_rank = -1,
                  .kill_at_epoch = -1};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        switch (c) {
        case O_MODEL:
            if (strcmp(optarg, "linear") == 0)
                o->mlp = 0;
            else if (strcmp(optarg, "mlp") == 0)
                o->mlp = 1;
            else
                usage_error("--model '%s': want linear or mlp", optarg);
            break;
        case O_HIDDEN:
            parse_hidden(o, optarg);
            o->hidden_given = 1;
            break;
        case O_SAMPLES: o->samples = (size_t)parse_long("--samples", optarg, 1, 1L << 24); break;
        case O_FEATURES: o->features = (size_t)parse_long("--features", optarg, 1, 65536); break;
        case O_SEED: o->seed = (uint64_t)parse_long("--seed", optarg, 0, LONG_MAX); break;
        case O_LR: o->lr = parse_double("--lr", optarg, 0.0, 1e6); break;
        case O_BATCH: o->batch = (size_t)parse_long("--batch", optarg, 1, 1L << 20); break;
        case O_EPOCHS: o->epochs = parse_long("--epochs", optarg, 0, 1000000); break;
        case O_DROP: o->drop_last = 1; break;
        case O_BUCKET: o->bucket_mb = parse_double("--bucket-mb", optarg, 0.0, 1e6); break;
        case O_SYNC:
            if (strcmp(optarg, "ring") != 0 && strcmp(optarg, "ps") != 0 &&
                strcmp(optarg, "rd") != 0 && strcmp(optarg, "ps-sharded") != 0 &&
                strcmp(optarg, "auto") != 0)
                usage_error("--sync '%s': want ring, ps, rd, ps-sharded or auto", optarg);
            o->sync = optarg;
            break;
        case O_NO_OVERLAP: o->overlap = 0; break;
        case O_INIT: o->init_method = optarg; break;
        case O_CKPT: o->checkpoint = optarg; break;
        case O_SAVE:
            o->save_every = parse_long("--save-every", optarg, 1, 1000000);
            o->save_every_given = 1;
            break;
        case O_METRICS: o->metrics = optarg; break;
        case O_DUMP: o->dump_weights = optarg; break;
        case O_CHECK: o->check_replicas = 1; break;
        case O_QUIET: o->quiet = 1; break;
        case O_SYM: o->sym_buckets = 1; break;
        case O_STOP: o->stop_after = parse_long("--stop-after", optarg, 1, 1000000); break;
        case O_FAIL: o->fail_at_epoch = parse_long("--fail-at-epoch", optarg, 0, 1000000); break;
        case O_FAIL_RANK: o->fail_rank = parse_long("--fail-rank", optarg, 0, 1 << 20); break;
        case O_DIVERGE: o->diverge_rank = parse_long("--test-diverge", optarg, 0, 1 << 20); break;
        case O_KILL: o->kill_at_epoch = parse_long("--kill-at-epoch", optarg, 0, 1000000); break;
        case O_SURVIVE: o->survive = 1; break;
        case 'h': usage(stdout); exit(0);
        case ':': usage_error("%s needs a value", argv[optind - 1]); break;
        default:
            if (optopt != 0) usage_error("unknown option '-%c'", optopt);
            usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) usage_error("unexpected argument '%s'", argv[optind]);
    if (o->hidden_given && !o->mlp) usage_error("--hidden applies to --model mlp");
    if (o->save_every_given && o->checkpoint == NULL)
        usage_error("--save-every needs --checkpoint");
    if (!o->mlp) o->nhidden = 0;
}

/* Everything that must be the same on every rank, hashed: ranks started with different options
 * would otherwise fail later with a less obvious mismatch, or worse, train different models. */
static uint64_t options_fingerprint(const opts_t *o)
{
    char s[1024];
    int n = snprintf(s, sizeof(s),
                     "%d|%zu|%zu|%" PRIu64
                     "|%a|%zu|%ld|%d|%a|%s|%d|%d|%ld|%d|%ld|%ld|%ld|%ld|%d|%ld|",
                     o->mlp, o->samples, o->features, o->seed, o->lr, o->batch, o->epochs,
                     o->drop_last, o->bucket_mb, o->sync ? o->sync : "-", o->overlap,
                     o->checkpoint != NULL, o->save_every, o->check_replicas, o->stop_after,
                     o->fail_at_epoch, o->fail_rank, o->diverge_rank, o->survive, o->kill_at_epoch);
    uint64_t h = ddp_hash(s, (size_t)n, HASH_BASIS);
    for (int k = 0; k < o->nhidden; k++) h = ddp_hash(&o->hidden[k], sizeof(size_t), h);
    h = ddp_hash(&o->sym_buckets, sizeof(o->sym_buckets), h);
    return h;
}

/* ---------------------------------------------------------------- buckets */

/* DDP's assignment: tensors in reverse order (the order backward produces them); a bucket closes as
 * soon as it holds at least its cap, the first one with a smaller cap. A tensor never straddles two
 * buckets, so a bucket may be larger than the cap. */
static void make_buckets(trainer_t *t)
{
    const ddp_mlp_t *m = &t->m;
    size_t cap_bytes = (size_t)(t->o->bucket_mb * MIB);
    size_t first_bytes = (size_t)(FIRST_BUCKET_MIB * MIB);
    size_t cap = first_bytes < cap_bytes ? first_bytes : cap_bytes;
    t->buckets = calloc(2 * (size_t)m->layers, sizeof(bucket_t));
    if (t->buckets == NULL) die(t, "out of memory");
    t->nbuckets = 0;
    bucket_t cur = {.off = m->params, .count = 0};
    for (int l = m->layers - 1; l >= 0; l--) {
        size_t lens[2] = {m->dims[l + 1], m->dims[l + 1] * m->dims[l]};
        size_t offs[2] = {m->b_off[l], m->w_off[l]};
        for (int k = 0; k < 2; k++) {
            cur.off = offs[k];
            cur.count += lens[k];
            cur.first_layer = l;
            if (cur.count * sizeof(float) >= cap) {
                t->buckets[t->nbuckets++] = cur;
                cur = (bucket_t){.off = offs[k], .count = 0};
                cap = cap_bytes;
            }
        }
    }
    if (cur.count > 0) t->buckets[t->nbuckets++] = cur;
}

/* With --survive a failed call does not end the job: it is kept in t->fail, no later bucket of the
 * step is posted, and the step is given up once the posted ones are over (finish_gradients). */
static void step_check(trainer_t *t, hoop_result_t rc, const char *what)
{
    if (!t->o->survive) hcheck(t, rc, what);
    if (rc == HOOP_OK || t->fail != HOOP_OK) return;
    t->fail = rc;
    snprintf(t->fail_what, sizeof(t->fail_what), "%s", what);
}

/* --sym-buckets: the flat gradient array, which the buckets are ranges of, moves to symmetric
 * memory (collective: every rank here, after the options were compared), so that every bucket's
 * all-reduce finds its buffers symmetric on every rank. */
static void gradients_to_sym(trainer_t *t)
{
    size_t bytes = t->m.params * sizeof(float);
    void *p = NULL;
    hcheck(t, hoop_mem_alloc(t->comm, bytes, &p),
           "hoop_mem_alloc of the gradients (--sym-buckets)");
    memcpy(p, t->m.grad, bytes);
    t->heap_grad = t->m.grad;
    t->m.grad = p;
    t->sym_comm = t->comm;
}

static void gradients_from_sym(trainer_t *t)
{
    if (t->heap_grad == NULL) return;
    /* After a shrink (--survive) the memory is the old communicator's, which lost a rank and
     * cannot free it collectively: it goes when that one is destroyed, after this. */
    if (t->comm == t->sym_comm)
        hcheck(t, hoop_mem_free(t->comm, t->m.grad), "hoop_mem_free of the gradients");
    t->m.grad = t->heap_grad;
    t->heap_grad = NULL;
}

static void launch_bucket(trainer_t *t, bucket_t *b)
{
    float *g = t->m.grad + b->off;
    char what[64];
    snprintf(what, sizeof(what), "all-reduce of gradient bucket %d", (int)(b - t->buckets));
    b->req = NULL;
    if (t->fail != HOOP_OK) return;
    double t0 = now();
    if (t->o->overlap) {
        step_check(t, hoop_iallreduce(t->comm, g, g, b->count, HOOP_FLOAT32, HOOP_AVG, &b->req),
                   what);
    } else {
        step_check(t, hoop_allreduce(t->comm, g, g, b->count, HOOP_FLOAT32, HOOP_AVG), what);
    }
    t->wait_s += now() - t0;
    if (t->kill_now) {
        fprintf(stderr, "ddp_train: rank %d: SIGKILL now, at %.6f (CLOCK_MONOTONIC)\n", t->rank,
                now());
        fflush(NULL);
        raise(SIGKILL);
    }
}

/* Called by backward once a layer's gradients are final: start every bucket that is now complete. */
static void on_layer_ready(int layer, void *ctx)
{
    trainer_t *t = ctx;
    if (!t->o->overlap) return;
    while (t->launched < t->nbuckets && t->buckets[t->launched].first_layer >= layer)
        launch_bucket(t, &t->buckets[t->launched++]);
}

static void finish_gradients(trainer_t *t)
{
    while (t->launched < t->nbuckets) launch_bucket(t, &t->buckets[t->launched++]);
    if (!t->o->overlap) return;
    for (int k = 0; k < t->nbuckets; k++) {
        char what[64];
        snprintf(what, sizeof(what), "wait for the all-reduce of gradient bucket %d", k);
        double t0 = now();
        hoop_request_t *req = t->buckets[k].req;
        t->buckets[k].req = NULL;
        /* Every posted request is waited for, a failed step's too: none may still be running
         * on the gradients when the step is given up. */
        if (req != NULL) step_check(t, hoop_wait(req), what);
        t->wait_s += now() - t0;
    }
}

/* ---------------------------------------------------------------- replica check */

static void describe_param(const ddp_mlp_t *m, size_t k, char *buf, size_t len)
{
    for (int l = 0; l < m->layers; l++) {
        if (k >= m->w_off[l] && k < m->b_off[l]) {
            size_t i = k - m->w_off[l];
            snprintf(buf, len, "layer %d weight[%zu][%zu]", l, i / m->dims[l], i % m->dims[l]);
            return;
        }
        if (k >= m->b_off[l] && k < m->b_off[l] + m->dims[l + 1]) {
            snprintf(buf, len, "layer %d bias[%zu]", l, k - m->b_off[l]);
            return;
        }
    }
    snprintf(buf, len, "parameter %zu", k);
}

static void check_replicas(trainer_t *t, long epoch, size_t step)
{
    const ddp_mlp_t *m = &t->m;
    uint64_t h = ddp_hash(m->param, m->params * sizeof(float), HASH_BASIS);
    uint64_t *all = malloc((size_t)t->world * sizeof(uint64_t));
    if (all == NULL) die(t, "out of memory");
    hcheck(t, hoop_allgather(t->comm, &h, all, 1, HOOP_UINT64), "all-gather of the weight hashes");
    int differ = 0;
    for (int r = 1; r < t->world; r++) differ |= all[r] != all[0];
    if (!differ) {
        free(all);
        return;
    }
    /* Find where: the minimum and maximum of the bit patterns agree exactly where all ranks do. */
    int32_t *lo = malloc(m->params * sizeof(int32_t)), *hi = malloc(m->params * sizeof(int32_t));
    if (lo == NULL || hi == NULL) die(t, "replicas differ, and there is no memory to find where");
    memcpy(lo, m->param, m->params * sizeof(float));
    memcpy(hi, m->param, m->params * sizeof(float));
    hcheck(t, hoop_allreduce(t->comm, lo, lo, m->params, HOOP_INT32, HOOP_MIN), "all-reduce (min)");
    hcheck(t, hoop_allreduce(t->comm, hi, hi, m->params, HOOP_INT32, HOOP_MAX), "all-reduce (max)");
    size_t first = 0, count = 0;
    for (size_t k = 0; k < m->params; k++)
        if (lo[k] != hi[k] && count++ == 0) first = k;
    if (t->rank == 0) {
        char where[96];
        describe_param(m, first, where, sizeof(where));
        float a, b;
        memcpy(&a, &lo[first], 4);
        memcpy(&b, &hi[first], 4);
        fprintf(
            stderr,
            "ddp_train: replicas differ after epoch %ld step %zu: %zu of %zu parameters are not "
            "bit-identical on all ranks; the first is %s, %.9g on some ranks and %.9g on others\n",
            epoch, step, count, m->params, where, (double)a, (double)b);
        for (int r = 0; r < t->world; r++)
            fprintf(stderr, "ddp_train:   rank %d weight hash %016" PRIx64 "\n", r, all[r]);
    }
    /* Rank 0 has said where before any rank exits (the launcher may stop the others then). */
    hcheck(t, hoop_barrier(t->comm), "barrier");
    free(lo);
    free(hi);
    free(all);
    stop(t, "replicas differ after epoch %ld step %zu", epoch, step);
}

/* ---------------------------------------------------------------- checkpoints and files */

static void fill_info(const trainer_t *t, ddp_ckpt_info_t *info, uint64_t epochs_done)
{
    memset(info, 0, sizeof(*info));
    info->epochs_done = epochs_done;
    info->seed = t->o->seed;
    info->samples = t->o->samples;
    info->layers = (uint32_t)t->m.layers;
    for (int l = 0; l <= t->m.layers; l++) info->dims[l] = t->m.dims[l];
    info->batch = t->o->batch;
    info->world = (uint32_t)t->world;
    info->drop_last = (uint32_t)t->o->drop_last;
    info->lr = t->o->lr;
}

/* Rank 0 reads the checkpoint; returns the epochs it holds (0 for a fresh start) or -1 with a
 * sentence in err. Another model, data set or seed is an error; another batch, learning rate or
 * rank count only changes how training goes on, so it is a warning. */
static long load_checkpoint(trainer_t *t, char *err, size_t errlen)
{
    const char *path = t->o->checkpoint;
    if (access(path, F_OK) != 0 && errno == ENOENT) return 0; /* a fresh start */
    ddp_ckpt_info_t got, want;
    float *p = NULL;
    size_t n = 0;
    if (ddp_ckpt_load(path, &got, &p, &n, err, errlen) != 0) return -1;
    fill_info(t, &want, 0);
    int same_model = got.layers == want.layers;
    for (uint32_t l = 0; same_model && l <= got.layers; l++)
        same_model = got.dims[l] == want.dims[l];
    if (!same_model || got.seed != want.seed || got.samples != want.samples) {
        char a[256] = "", b[256] = "";
        for (uint32_t l = 0; l <= got.layers; l++)
            snprintf(a + strlen(a), sizeof(a) - strlen(a), "%s%" PRIu64, l ? "-" : "", got.dims[l]);
        for (uint32_t l = 0; l <= want.layers; l++)
            snprintf(b + strlen(b), sizeof(b) - strlen(b), "%s%" PRIu64, l ? "-" : "",
                     want.dims[l]);
        snprintf(err, errlen,
                 "%s holds another job: model %s, %" PRIu64 " samples, seed %" PRIu64
                 "; this run has model %s, %" PRIu64 " samples, seed %" PRIu64
                 " (remove the file or pass another --checkpoint)",
                 path, a, got.samples, got.seed, b, want.samples, want.seed);
        free(p);
        return -1;
    }
    if (got.batch != want.batch || got.world != want.world || got.lr != want.lr ||
        got.drop_last != want.drop_last)
        fprintf(stderr,
                "ddp_train: warning: %s was written with batch %" PRIu64
                " per rank on %u ranks, lr "
                "%g%s; this run uses batch %" PRIu64 " on %u ranks, lr %g%s\n",
                path, got.batch, got.world, got.lr, got.drop_last ? ", drop-last" : "", want.batch,
                want.world, want.lr, want.drop_last ? ", drop-last" : "");
    if (got.epochs_done > (uint64_t)t->o->epochs && t->o->epochs > 0)
        fprintf(stderr, "ddp_train: warning: %s holds %" PRIu64 " epochs, more than --epochs %ld\n",
                path, got.epochs_done, t->o->epochs);
    memcpy(t->m.param, p, n * sizeof(float));
    free(p);
    return got.epochs_done > 1000000 ? 1000000 : (long)got.epochs_done;
}

/* Rank 0 saves; every rank learns whether it worked, so that all of them stop together. */
static void save_checkpoint(trainer_t *t, long epochs_done)
{
    int32_t status = 0;
    char err[512] = "";
    if (t->rank == 0) {
        ddp_ckpt_info_t info;
        fill_info(t, &info, (uint64_t)epochs_done);
        status = ddp_ckpt_save(t->o->checkpoint, &info, t->m.param, t->m.params, err, sizeof(err));
        /* Said before the others learn of it: once they exit, the launcher may stop this rank. */
        if (status != 0) fprintf(stderr, "ddp_train: rank 0: checkpoint: %s\n", err);
    }
    hcheck(t, hoop_broadcast(t->comm, &status, 1, HOOP_INT32, 0),
           "broadcast of the checkpoint status");
    if (status != 0) stop(t, t->rank == 0 ? "stopping" : "rank 0 could not write the checkpoint");
}

/* On a fresh start the metrics file starts over; on a resume it keeps the rows of the epochs the
 * checkpoint holds and drops any later ones (epochs run again after the failure). */
static FILE *open_metrics(trainer_t *t, long start_epoch)
{
    const char *path = t->o->metrics;
    char *kept = NULL;
    size_t kept_len = 0;
    FILE *mem = open_memstream(&kept, &kept_len);
    if (mem == NULL) die(t, "out of memory");
    FILE *old = start_epoch > 0 ? fopen(path, "r") : NULL;
    if (old != NULL) {
        char line[512];
        while (fgets(line, sizeof(line), old) != NULL) {
            char *end;
            long e = strtol(line, &end, 10);
            if (end != line && *end == ',' && e < start_epoch) fputs(line, mem);
        }
        fclose(old);
    }
    fclose(mem);
    FILE *f = fopen(path, "w");
    if (f == NULL) die(t, "cannot write %s: %s", path, strerror(errno));
    fputs("epoch,loss,samples_per_s,step_ms,compute_ms,wait_ms\n", f);
    fputs(kept, f);
    free(kept);
    fflush(f);
    return f;
}

static void dump_weights(trainer_t *t)
{
    FILE *f = fopen(t->o->dump_weights, "wb");
    if (f == NULL || fwrite(t->m.param, sizeof(float), t->m.params, f) != t->m.params ||
        fclose(f) != 0)
        die(t, "cannot write %s: %s", t->o->dump_weights, strerror(errno));
}

/* ---------------------------------------------------------------- training */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    if (n == 0) return 0.0;
    qsort(v, n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The attempt number a launcher that restarts failed jobs gives (hooprun, torchrun); 0 if none. */
static long restart_count(void)
{
    const char *s = getenv("HOOP_RESTART_COUNT");
    if (s == NULL || *s == '\0') s = getenv("TORCHELASTIC_RESTART_COUNT");
    if (s == NULL || *s == '\0') return 0;
    char *end;
    long v = strtol(s, &end, 10);
    return *end == '\0' && v >= 0 ? v : 0;
}

/* ---------------------------------------------------------------- surviving a lost rank */

/* Whether an injected failure (--fail-at-epoch, --kill-at-epoch) falls in this epoch. */
static int epoch_hits(const opts_t *o, long epoch)
{
    return epoch == o->fail_at_epoch || epoch == o->kill_at_epoch;
}

/* Where a rank is in the current epoch. A segment is the part of the epoch run on one world. */
typedef struct {
    long epoch;
    size_t step, steps; /* steps of the segment done, and its length */
    size_t e_steps;     /* steps of the epoch done, over all its segments */
    double loss_sum, last_loss;
    double samples, last_samples; /* trained on in the epoch by all ranks, and in the last step */
    float *snap;                  /* --survive: the parameters before the last step's update */
    int can_undo;                 /* snap holds them */
    int shrinks;
} place_t;

static int is_loss(hoop_result_t rc)
{
    return rc == HOOP_ERR_PEER_LOST || rc == HOOP_ERR_ABORTED || rc == HOOP_ERR_TIMEOUT;
}

/* --survive: a call of the epoch failed because a rank was lost. The ranks still running shrink
 * the communicator and agree on how far they got: a rank can be one step ahead of another (its
 * all-reduce completed where the other's failed, as the dead rank had sent all of its part), and
 * then it undoes that step. The parameters are compared, then the rest of the epoch is dealt out
 * again (ddp_sampler_reshard): the first `step` batches of every old rank's share are done, and
 * the rest of the epoch's list, the dead rank's share included, goes to the survivors. */
static void survive(trainer_t *t, place_t *pl, ddp_sampler_t *sampler, hoop_result_t rc,
                    const char *what)
{
    fprintf(stderr, "ddp_train: rank %d: %s failed: %s: %s\n", t->rank, what, hoop_error_string(rc),
            hoop_comm_last_error(t->comm));
    if (!is_loss(rc)) die(t, "stopping: the failure is not the loss of a rank");
    int old_world = t->world;
    size_t old_steps = pl->steps;
    double t0 = now();
    for (;;) {
        hoop_comm_t *nc = NULL;
        hoop_result_t r = hoop_comm_shrink(t->comm, &nc);
        if (r != HOOP_OK) {
            fprintf(stderr, "ddp_train: rank %d: hoop_comm_shrink failed: %s: %s\n", t->rank,
                    hoop_error_string(r), hoop_comm_last_error(t->comm));
            hoop_comm_destroy(t->comm);
            exit(1);
        }
        /* The old communicator is kept until the end: freeing it costs time the survivors are
         * waiting through, and while it lives it tells a rank that was only stopped, and
         * comes back, that it was left out. */
        hoop_comm_t **keep = realloc(t->shrunk, ((size_t)t->nshrunk + 1) * sizeof(*keep));
        if (keep == NULL) {
            hoop_comm_destroy(t->comm);
            t->comm = nc;
            die(t, "out of memory");
        }
        t->shrunk = keep;
        t->shrunk[t->nshrunk++] = t->comm;
        t->comm = nc;
        t->rank = hoop_comm_rank(nc);
        t->world = hoop_comm_size(nc);
        pl->shrinks++;
        /* The lowest and the highest place, in one all-reduce (the highest negated). */
        int64_t me = ((int64_t)pl->epoch << 32) | (int64_t)pl->step;
        int64_t mm[2] = {me, -me};
        r = hoop_allreduce(t->comm, mm, mm, 2, HOOP_INT64, HOOP_MIN);
        if (r != HOOP_OK) {
            if (!is_loss(r)) hcheck(t, r, "all-reduce of the survivors' places");
            fprintf(stderr, "ddp_train: rank %d: lost another rank while agreeing: %s\n", t->rank,
                    hoop_comm_last_error(t->comm));
            continue;
        }
        int64_t lo = mm[0], hi = -mm[1];
        if (hi - lo > 1 || (hi >> 32) != (lo >> 32) || (me > lo && !pl->can_undo))
            die(t,
                "the survivors are further apart than one step (epoch %lld step %lld to epoch "
                "%lld step %lld): they cannot go on together",
                (long long)(lo >> 32), (long long)(lo & 0xffffffff), (long long)(hi >> 32),
                (long long)(hi & 0xffffffff));
        if (me > lo) {
            memcpy(t->m.param, pl->snap, t->m.params * sizeof(float));
            pl->can_undo = 0;
            pl->step--;
            pl->e_steps--;
            pl->loss_sum -= pl->last_loss;
            pl->samples -= pl->last_samples;
        }
        uint64_t h = ddp_hash(t->m.param, t->m.params * sizeof(float), HASH_BASIS);
        uint64_t *all = malloc((size_t)t->world * sizeof(uint64_t));
        if (all == NULL) die(t, "out of memory");
        r = hoop_allgather(t->comm, &h, all, 1, HOOP_UINT64);
        int differ = 0;
        for (int k = 1; r == HOOP_OK && k < t->world; k++) differ |= all[k] != all[0];
        free(all);
        if (r != HOOP_OK) {
            if (!is_loss(r)) hcheck(t, r, "all-gather of the survivors' weight hashes");
            fprintf(stderr, "ddp_train: rank %d: lost another rank while agreeing: %s\n", t->rank,
                    hoop_comm_last_error(t->comm));
            continue;
        }
        if (differ) stop(t, "the survivors' replicas differ after the shrink");
        break;
    }
    size_t done = pl->step;
    if (ddp_sampler_reshard(sampler, done * t->o->batch, t->world, t->rank) != 0)
        die(t, "out of memory for the sampler");
    pl->steps = (sampler->per_rank + t->o->batch - 1) / t->o->batch;
    pl->step = 0;
    if (t->rank == 0)
        fprintf(stderr,
                "ddp_train: survived: epoch %ld goes on after step %zu of %zu on %d of %d ranks: "
                "%zu samples per rank in %zu steps (shrink and agreement %.1f ms, done at "
                "%.6f CLOCK_MONOTONIC)\n",
                pl->epoch, done, old_steps, t->world, old_world, sampler->per_rank, pl->steps,
                1e3 * (now() - t0), now());
}

static void print_model(const trainer_t *t, const ddp_sampler_t *s, size_t steps)
{
    const opts_t *o = t->o;
    const ddp_mlp_t *m = &t->m;
    char shape[256] = "";
    for (int l = 0; l <= m->layers; l++)
        snprintf(shape + strlen(shape), sizeof(shape) - strlen(shape), "%s%zu", l ? "-" : "",
                 m->dims[l]);
    printf("ddp_train: %d rank%s, %s %s, %zu parameters, %.2f MiB of gradients in %d bucket%s "
           "(cap %g MiB, first %g MiB)\n",
           t->world, t->world > 1 ? "s" : "", o->mlp ? "mlp" : "linear", shape, m->params,
           (double)m->params * 4 / MIB, t->nbuckets, t->nbuckets > 1 ? "s" : "", o->bucket_mb,
           o->bucket_mb < FIRST_BUCKET_MIB ? o->bucket_mb : FIRST_BUCKET_MIB);
    const char *algo = o->sync ? o->sync : getenv("HOOP_ALGO") ? getenv("HOOP_ALGO") : "auto";
    printf("ddp_train: %zu samples (%zu per rank per epoch%s), batch %zu per rank (%zu global), "
           "%zu steps per epoch, lr %g, all-reduce %s, %s\n",
           o->samples, s->per_rank,
           s->per_rank * (size_t)t->world == o->samples ? ""
           : o->drop_last                               ? ", tail dropped"
                                                        : ", padded",
           o->batch, o->batch * (size_t)t->world, steps, o->lr, algo,
           o->overlap ? "overlapped with backward" : "after backward (no overlap)");
}

int main(int argc, char **argv)
{
    opts_t o;
    parse_options(&o, argc, argv);
    trainer_t t = {.o = &o, .rank = -1};

    hoop_result_t rc = hoop_init(&t.comm, o.init_method, -1, -1);
    if (rc != HOOP_OK) {
        fprintf(stderr, "ddp_train: hoop_init failed: %s (the lines above say why)\n",
                hoop_error_string(rc));
        return 1;
    }
    t.rank = hoop_comm_rank(t.comm);
    t.world = hoop_comm_size(t.comm);
    if (o.sync != NULL) hcheck(&t, hoop_comm_set_algo(t.comm, o.sync), "hoop_comm_set_algo");
    int quiet = o.quiet || t.rank != 0;

    uint64_t fp = options_fingerprint(&o);
    uint64_t *fps = malloc((size_t)t.world * sizeof(uint64_t));
    if (fps == NULL) die(&t, "out of memory");
    hcheck(&t, hoop_allgather(t.comm, &fp, fps, 1, HOOP_UINT64), "all-gather of the options");
    for (int r = 0; r < t.world; r++)
        if (fps[r] != fps[0])
            stop(&t,
                 "rank %d was started with other options than rank 0 (every rank needs the same)",
                 r);
    free(fps);

    size_t dims[DDP_MAX_LAYERS + 1];
    int layers = o.nhidden + 1;
    dims[0] = o.features;
    for (int k = 0; k < o.nhidden; k++) dims[k + 1] = o.hidden[k];
    dims[layers] = 1;
    char err[1024];
    if (ddp_mlp_init(&t.m, layers, dims, o.batch, err, sizeof(err)) != 0) die(&t, "model: %s", err);
    ddp_data_t data;
    if (ddp_data_make(&data, o.samples, o.features, o.seed) != 0)
        die(&t, "out of memory for the data");
    ddp_sampler_t sampler;
    if (ddp_sampler_init(&sampler, o.samples, t.world, t.rank, o.drop_last) != 0)
        die(&t, "out of memory for the sampler");
    if (sampler.per_rank == 0)
        die(&t, "--drop-last with %zu samples leaves nothing for %d ranks", o.samples, t.world);
    size_t steps = (sampler.per_rank + o.batch - 1) / o.batch;
    make_buckets(&t);
    if (o.sym_buckets) gradients_to_sym(&t);

    /* As DDP does at construction, every replica starts from rank 0's parameters: its fresh ones, or
     * the ones of its checkpoint. */
    int64_t head[2] = {0, 0}; /* status (0 ok, -1 failed), epochs done */
    ddp_mlp_init_params(&t.m, o.seed);
    if (t.rank == 0 && o.checkpoint != NULL) {
        long e = load_checkpoint(&t, err, sizeof(err));
        head[0] = e < 0 ? -1 : 0;
        head[1] = e < 0 ? 0 : e;
        if (e < 0) fprintf(stderr, "ddp_train: rank 0: checkpoint: %s\n", err);
    }
    hcheck(&t, hoop_broadcast(t.comm, head, 2, HOOP_INT64, 0),
           "broadcast of the checkpoint header");
    if (head[0] != 0) stop(&t, t.rank == 0 ? "stopping" : "rank 0 could not load the checkpoint");
    hcheck(&t, hoop_broadcast(t.comm, t.m.param, t.m.params, HOOP_FLOAT32, 0),
           "broadcast of the parameters");
    long start = (long)head[1];
    long attempt = restart_count();

    if (!quiet) {
        print_model(&t, &sampler, steps);
        if (start > 0)
            printf("ddp_train: resuming from %s after epoch %ld (restart %ld)\n", o.checkpoint,
                   start - 1, attempt);
    }
    FILE *metrics = t.rank == 0 && o.metrics != NULL ? open_metrics(&t, start) : NULL;

    long end = o.epochs;
    if (o.stop_after > 0 && o.stop_after < end) end = o.stop_after;
    /* Step times for the medians of the summary: those of the last TIMED_STEPS steps at most. */
    enum { TIMED_STEPS = 1 << 16 };
    double *step_ms = malloc(TIMED_STEPS * sizeof(double)),
           *wait_ms = malloc(TIMED_STEPS * sizeof(double));
    double *comp_ms = malloc(TIMED_STEPS * sizeof(double));
    float *bx = malloc(o.batch * o.features * sizeof(float)), *by = malloc(o.batch * sizeof(float));
    if (step_ms == NULL || wait_ms == NULL || comp_ms == NULL || bx == NULL || by == NULL)
        die(&t, "out of memory");
    long fail_rank = o.fail_rank >= 0 ? o.fail_rank : t.world - 1;
    size_t nsteps = 0;
    double last_loss = NAN, run_t0 = now(), run_samples = 0;
    place_t pl = {.steps = steps};
    int sampler_shrinks = 0; /* pl.shrinks when the sampler was made */
    if (o.survive) {
        pl.snap = malloc(t.m.params * sizeof(float));
        if (pl.snap == NULL) die(&t, "out of memory");
    }

    if (!quiet && end > start)
        printf("%6s %14s %11s %9s %11s %9s %7s\n", "epoch", "loss", "samples/s", "step ms",
               "compute ms", "wait ms", "wait %");
    for (long epoch = start; epoch < end; epoch++) {
        double e_t0 = now(), e_step = 0, e_wait = 0;
        if (pl.shrinks != sampler_shrinks) { /* survivors: the epoch is dealt to them alone */
            sampler_shrinks = pl.shrinks;
            ddp_sampler_free(&sampler);
            if (ddp_sampler_init(&sampler, o.samples, t.world, t.rank, o.drop_last) != 0)
                die(&t, "out of memory for the sampler");
            if (sampler.per_rank == 0)
                die(&t, "--drop-last with %zu samples leaves nothing for %d ranks", o.samples,
                    t.world);
        }
        ddp_sampler_set_epoch(&sampler, o.seed, (uint64_t)epoch);
        pl.epoch = epoch;
        pl.step = pl.e_steps = 0;
        pl.steps = (sampler.per_rank + o.batch - 1) / o.batch;
        pl.loss_sum = pl.samples = 0;
        pl.can_undo = 0;
        double st[4];
        for (;;) {
            while (pl.step < pl.steps) {
                size_t s = pl.step;
                /* Injected failures hit the first world only (a survivor's new rank may be the
                 * number given). */
                int injected = epoch_hits(&o, epoch) && pl.shrinks == 0 && t.rank == fail_rank &&
                               s == pl.steps / 2 && attempt == 0;
                if (injected && epoch == o.fail_at_epoch) {
                    fprintf(stderr,
                            "ddp_train: rank %d: failing on purpose in epoch %ld, step %zu "
                            "(--fail-at-epoch)\n",
                            t.rank, epoch, s);
                    fflush(NULL);
                    _exit(3);
                }
                t.kill_now = injected && epoch == o.kill_at_epoch;
                if (t.kill_now)
                    fprintf(stderr,
                            "ddp_train: rank %d: SIGKILL on purpose in epoch %ld, step %zu "
                            "(--kill-at-epoch)\n",
                            t.rank, epoch, s);
                size_t b0 = s * o.batch;
                size_t bsz = sampler.per_rank - b0 < o.batch ? sampler.per_rank - b0 : o.batch;
                double t0 = now();
                for (size_t i = 0; i < bsz; i++) {
                    size_t idx = sampler.mine[b0 + i];
                    memcpy(bx + i * o.features, data.x + idx * o.features,
                           o.features * sizeof(float));
                    by[i] = data.y[idx];
                }
                t.wait_s = 0;
                t.launched = 0;
                t.fail = HOOP_OK;
                double loss = ddp_mlp_forward(&t.m, bx, by, bsz);
                ddp_mlp_backward(&t.m, by, bsz, on_layer_ready, &t);
                finish_gradients(&t);
                if (t.fail != HOOP_OK) {
                    survive(&t, &pl, &sampler, t.fail, t.fail_what);
                    quiet = o.quiet || t.rank != 0;
                    continue;
                }
                if (pl.snap != NULL) {
                    memcpy(pl.snap, t.m.param, t.m.params * sizeof(float));
                    pl.can_undo = 1;
                }
                ddp_mlp_sgd(&t.m, (float)o.lr);
                double dt = now() - t0;
                step_ms[nsteps % TIMED_STEPS] = 1e3 * dt;
                wait_ms[nsteps % TIMED_STEPS] = 1e3 * t.wait_s;
                comp_ms[nsteps % TIMED_STEPS] = 1e3 * (dt - t.wait_s);
                nsteps++;
                e_step += dt;
                e_wait += t.wait_s;
                pl.loss_sum += loss;
                pl.last_loss = loss;
                pl.last_samples = (double)bsz * t.world;
                pl.samples += pl.last_samples;
                pl.e_steps++;
                pl.step++;
                if (o.diverge_rank == t.rank && epoch == start && s == 0) {
                    uint32_t bits;
                    memcpy(&bits, &t.m.param[t.m.params / 2], 4);
                    bits ^= 1;
                    memcpy(&t.m.param[t.m.params / 2], &bits, 4);
                }
                if (o.check_replicas) check_replicas(&t, epoch, s);
            }
            /* Loss and times, averaged over the ranks. */
            double n = pl.e_steps > 0 ? (double)pl.e_steps : 1.0;
            st[0] = pl.loss_sum / n;
            st[1] = 1e3 * e_step / n;
            st[2] = 1e3 * (e_step - e_wait) / n;
            st[3] = 1e3 * e_wait / n;
            rc = hoop_allreduce(t.comm, st, st, 4, HOOP_FLOAT64, HOOP_AVG);
            if (rc == HOOP_OK) break;
            if (!o.survive) hcheck(&t, rc, "all-reduce of the epoch's loss");
            survive(&t, &pl, &sampler, rc, "all-reduce of the epoch's loss");
            quiet = o.quiet || t.rank != 0;
        }
        last_loss = st[0];
        run_samples += pl.samples;
        double rate = pl.samples / (now() - e_t0);
        if (!quiet) {
            printf("%6ld %14.8f %11.1f %9.2f %11.2f %9.2f %7.1f\n", epoch, st[0], rate, st[1],
                   st[2], st[3], st[1] > 0 ? 100.0 * st[3] / st[1] : 0.0);
            fflush(stdout);
        }
        if (metrics != NULL) {
            fprintf(metrics, "%ld,%.17g,%.1f,%.3f,%.3f,%.3f\n", epoch, st[0], rate, st[1], st[2],
                    st[3]);
            fflush(metrics);
        }
        long done = epoch + 1;
        if (o.checkpoint != NULL && (done % o.save_every == 0 || done == end))
            save_checkpoint(&t, done);
    }
    double run_s = now() - run_t0;

    if (metrics != NULL && fclose(metrics) != 0) die(&t, "cannot write %s", o.metrics);
    size_t timed = nsteps < TIMED_STEPS ? nsteps : TIMED_STEPS;
    double med[3] = {median(step_ms, timed), median(comp_ms, timed), median(wait_ms, timed)};
    hcheck(&t, hoop_allreduce(t.comm, med, med, 3, HOOP_FLOAT64, HOOP_AVG),
           "all-reduce of the step times");
    if (!quiet) {
        if (end <= start && start > 0)
            printf("ddp_train: nothing to do: %s already holds %ld epochs\n", o.checkpoint, start);
        else if (end <= start)
            printf("ddp_train: nothing to do: --epochs 0\n");
        else {
            char range[64];
            if (end - start == 1)
                snprintf(range, sizeof(range), "epoch %ld", start);
            else
                snprintf(range, sizeof(range), "epochs %ld-%ld", start, end - 1);
            printf("ddp_train: %s: %zu steps, %.1f samples/s, median step %.2f ms "
                   "(compute %.2f ms, waiting %.2f ms), final loss %.8f%s\n",
                   range, nsteps, run_samples / run_s, med[0], med[1], med[2], last_loss,
                   end < o.epochs ? " (stopped early)" : "");
        }
    }
    if (t.rank == 0 && o.dump_weights != NULL) dump_weights(&t);

    free(step_ms);
    free(wait_ms);
    free(comp_ms);
    free(bx);
    free(by);
    free(pl.snap);
    free(t.buckets);
    gradients_from_sym(&t);
    ddp_sampler_free(&sampler);
    ddp_data_free(&data);
    ddp_mlp_free(&t.m);
    for (int k = 0; k < t.nshrunk; k++) (void)hoop_comm_destroy(t.shrunk[k]);
    free(t.shrunk);
    rc = hoop_comm_destroy(t.comm);
    if (rc != HOOP_OK) {
        fprintf(stderr, "ddp_train: rank %d: hoop_comm_destroy failed: %s\n", t.rank,
                hoop_error_string(rc));
        return 1;
    }
    return 0;
}
