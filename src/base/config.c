/* The one reader of the HOOP_* variables (config.h): each is read once, here, into
 * hoop__config_t, and a malformed value is a sentence naming it. Every variable read is one line
 * below; docs/configuration.md lists them all. */
#include "base/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/hca.h"
#include "base/log.h"
#include "base/wire.h"

/* clang-format off: the registry's order (transport/registry.c) */
const char *const hoop__transport_words[] = {"shm", "ibverbs", "tcp", NULL};
/* clang-format on */

void hoop__config_defaults(hoop__config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->log_level = HOOP__LOG_WARN;
    c->log_subsys = HOOP__SUB_ALL;
    strcpy(c->transport, "auto");
    strcpy(c->algo, "auto");
    c->sockets_per_peer = 1;
    c->chunk_bytes = 512 * 1024;
    c->small_bytes = 16 * 1024;
    c->timeout_s = 300.0;
    c->shm_ring_bytes = 1024 * 1024;
    /* Off: on the machines measured (docs/performance.md) the ring beat process_vm_readv at
     * every size, 2 and 4 ranks. */
    c->shm_cma_bytes = 0;
    strcpy(c->cma, "auto");
    c->shm_spin_us = 200;
    c->shm_stream_bytes = (size_t)16 << 20;
    c->cuda_ipc_bytes = (size_t)32 << 20;
    c->cuda_ipc_oneshot_bytes = (size_t)256 << 10;
    c->ib_gid_index = -1;
    c->record = 2048;
    strcpy(c->ib_reg_cache, "auto");
}

int hoop__parse_size(const char *s, size_t *out)
{
    if (s == NULL) return -1;
    while (isspace((unsigned char)*s)) s++;
    if (!isdigit((unsigned char)*s)) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0) return -1;
    unsigned long long mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        mul = 1ull << 10;
        end++;
        break;
    case 'M':
        mul = 1ull << 20;
        end++;
        break;
    case 'G':
        mul = 1ull << 30;
        end++;
        break;
    case 'T':
        mul = 1ull << 40;
        end++;
        break;
    default: break;
    }
    if (toupper((unsigned char)*end) == 'B' || toupper((unsigned char)*end) == 'I') end++;
    if (toupper((unsigned char)*end) == 'B') end++;
    while (isspace((unsigned char)*end)) end++;
    if (*end != '\0') return -1;
    if (v != 0 && mul > (unsigned long long)SIZE_MAX / v) return -1;
    *out = (size_t)(v * mul);
    return 0;
}

const char *hoop__words_join(const char *const *list, int n, char *buf, size_t cap)
{
    if (n < 0)
        for (n = 0; list[n] != NULL; n++) continue;
    size_t o = 0;
    if (cap > 0) buf[0] = '\0';
    for (int i = 0; i < n && o < cap; i++) {
        const char *sep = i == 0 ? "" : i == n - 1 ? " or " : ", ";
        int w = snprintf(buf + o, cap - o, "%s%s", sep, list[i]);
        if (w < 0) break;
        o += (size_t)w;
    }
    return buf;
}

const char *hoop__algo_words(char *buf, size_t cap)
{
    const char *names[HOOP__WIRE_ALGO_COUNT];
    for (int i = 0; i < HOOP__WIRE_ALGO_COUNT; i++) names[i] = hoop__wire_algo_name(i);
    return hoop__words_join(names, HOOP__WIRE_ALGO_COUNT, buf, cap);
}

/* ---- the reader ---- */

typedef struct reader {
    hoop__getenv_fn get;
    void *ctx;
    char *err;
    size_t errlen;
    hoop_result_t rc; /* the first bad value's; later ones keep their defaults silently */
} reader_t;

/* The variable's value, NULL where it is unset or empty (an empty one means its default). */
static const char *value(const reader_t *r, const char *name)
{
    const char *v = r->get(name, r->ctx);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* The first bad value's sentence, said as the variable's own parser words it, but with no byte
 * that would break a log line or a rank's hello (one "name value" a line: core/agree.c). */
static void said(reader_t *r, const char *sentence)
{
    if (r->rc != HOOP_OK) return;
    r->rc = HOOP_ERR_INVALID_ARGUMENT;
    snprintf(r->err, r->errlen, "%s", sentence);
    for (char *p = r->err; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}

static void bad(reader_t *r, const char *name, const char *val, const char *expect)
{
    char s[600];
    snprintf(s, sizeof(s), "%s=\"%.160s%s\" is not valid: expected %s", name, val,
             strlen(val) > 160 ? "..." : "", expect);
    said(r, s);
}

/* A size in [lo, hi] (a power of two where pow2). */
static void size_var(reader_t *r, const char *name, size_t *field, size_t lo, size_t hi, int pow2,
                     const char *expect)
{
    const char *v = value(r, name);
    size_t n;
    if (v == NULL) return;
    if (hoop__parse_size(v, &n) != 0 || n < lo || n > hi || (pow2 && (n & (n - 1)) != 0))
        bad(r, name, v, expect);
    else
        *field = n;
}

/* A decimal integer in [lo, hi], digits only (no sign, no blank). */
static void int_var(reader_t *r, const char *name, int *field, long lo, long hi, const char *expect)
{
    const char *v = value(r, name);
    if (v == NULL) return;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (!isdigit((unsigned char)v[0]) || *end != '\0' || errno != 0 || n < lo || n > hi)
        bad(r, name, v, expect);
    else
        *field = (int)n;
}

/* Text shorter than cap bytes, kept as typed. */
static void text_var(reader_t *r, const char *name, char *field, size_t cap, const char *expect)
{
    const char *v = value(r, name);
    if (v == NULL) return;
    if (strlen(v) >= cap)
        bad(r, name, v, expect);
    else
        snprintf(field, cap, "%s", v);
}

/* One of words (any case), kept as the list spells it. */
static void word_var(reader_t *r, const char *name, char *field, size_t cap,
                     const char *const *words, int n)
{
    const char *v = value(r, name);
    if (v == NULL) return;
    for (int i = 0; i < n; i++)
        if (strcasecmp(v, words[i]) == 0) {
            snprintf(field, cap, "%s", words[i]);
            return;
        }
    char expect[200];
    bad(r, name, v, hoop__words_join(words, n, expect, sizeof(expect)));
}

/* 0 or 1 into *field, left as it was when unset. */
static void flag_var(reader_t *r, const char *name, int *field)
{
    static const char *const onoff[] = {"0", "1"};
    char s[2] = {*field ? '1' : '0', '\0'};
    word_var(r, name, s, sizeof(s), onoff, 2);
    *field = s[0] == '1';
}

static void read_debug(reader_t *r, hoop__config_t *c)
{
    const char *v = value(r, "HOOP_DEBUG");
    if (v != NULL) {
        static const char *const names[] = {"NONE", "WARN", "INFO", "TRACE"};
        int lvl = -1;
        for (int i = 0; i < 4; i++)
            if (strcasecmp(v, names[i]) == 0) lvl = i;
        /* NCCL's words for its default level. */
        if (strcasecmp(v, "VERSION") == 0 || strcasecmp(v, "ERROR") == 0) lvl = HOOP__LOG_WARN;
        if (lvl < 0)
            bad(r, "HOOP_DEBUG", v, "NONE, WARN, INFO or TRACE");
        else
            c->log_level = lvl;
    }
    if ((v = r->get("HOOP_DEBUG_SUBSYS", r->ctx)) != NULL) {
        char why[256];
        unsigned mask;
        if (hoop__log_subsys_parse(v, &mask, why, sizeof(why)) == 0)
            c->log_subsys = mask;
        else
            said(r, why);
    }
    text_var(r, "HOOP_DEBUG_FILE", c->log_file, sizeof(c->log_file),
             "a path shorter than 256 bytes");
    flag_var(r, "HOOP_TRACE", &c->trace);
}

static void read_choices(reader_t *r, hoop__config_t *c)
{
    const char *transports[8] = {"auto"};
    int nt = 1;
    for (int i = 0; hoop__transport_words[i] != NULL && nt < 8; i++)
        transports[nt++] = hoop__transport_words[i];
    word_var(r, "HOOP_TRANSPORT", c->transport, sizeof(c->transport), transports, nt);
    const char *v = value(r, "HOOP_ALGO");
    int algo = hoop__wire_algo_parse(v);
    char words[200];
    if (algo >= 0)
        snprintf(c->algo, sizeof(c->algo), "%s", hoop__wire_algo_name(algo));
    else if (v != NULL)
        bad(r, "HOOP_ALGO", v, hoop__algo_words(words, sizeof(words)));
    size_var(r, "HOOP_CHUNK_BYTES", &c->chunk_bytes, 4096, 1u << 30, 0,
             "a size from 4K to 1G, e.g. 512K");
    size_var(r, "HOOP_SMALL_BYTES", &c->small_bytes, 0, 1u << 30, 0, "a size up to 1G, e.g. 16K");
    v = value(r, "HOOP_TIMEOUT");
    if (v != NULL) {
        char *end;
        errno = 0;
        double t = strtod(v, &end);
        /* Below a millisecond no wait can see its peer at all; above 1e7 s (four months) is
         * "never" spelt out, which the default already is in practice. NaN fails both tests. */
        if (errno != 0 || end == v || *end != '\0' || !(t >= 1e-3 && t <= 1e7))
            bad(r, "HOOP_TIMEOUT", v, "seconds, a number from 0.001 (1 ms) to 10000000");
        else
            c->timeout_s = t;
    }
}

static void read_transports(reader_t *r, hoop__config_t *c)
{
    text_var(r, "HOOP_SOCKET_IFNAME", c->ifname, sizeof(c->ifname),
             "a list shorter than 128 bytes");
    int_var(r, "HOOP_SOCKETS_PER_PEER", &c->sockets_per_peer, 1, 16, "an integer from 1 to 16");
    text_var(r, "HOOP_HOSTID", c->host_id, sizeof(c->host_id), "an id shorter than 64 bytes");
    size_var(r, "HOOP_SHM_RING_BYTES", &c->shm_ring_bytes, 4096, 1u << 30, 1,
             "a power of two from 4K to 1G");
    size_var(r, "HOOP_SHM_CMA_BYTES", &c->shm_cma_bytes, 0, SIZE_MAX, 0,
             "a size, e.g. 256K, or 0 for never");
    size_var(r, "HOOP_SHM_STREAM_BYTES", &c->shm_stream_bytes, 0, SIZE_MAX, 0,
             "a size, e.g. 24M, or 0 for never");
    static const char *const cma[] = {"auto", "on", "off"};
    word_var(r, "HOOP_CMA", c->cma, sizeof(c->cma), cma, 3);
    int_var(r, "HOOP_SHM_SPIN_US", &c->shm_spin_us, 0, 1000000, "microseconds from 0 to 1000000");
    text_var(r, "HOOP_IB_HCA", c->ib_hca, sizeof(c->ib_hca), "a list shorter than 256 bytes");
    /* Parsed here too, not only by the verbs transport: under auto its failure would only make the
     * rank use TCP, and a build without verbs would never look at it. */
    hoop__ibv_hca_t hca;
    char why[300];
    if (hoop__ibv_hca_parse(c->ib_hca, &hca, why, sizeof(why)) != 0) {
        said(r, why);
        c->ib_hca[0] = '\0';
    }
    int_var(r, "HOOP_IB_GID_INDEX", &c->ib_gid_index, 0, HOOP__CONFIG_GID_INDEX_MAX,
            "a GID table index from 0 to 255 (unset chooses one per port)");
    static const char *const reg[] = {"auto", "off"};
    word_var(r, "HOOP_IB_REG_CACHE", c->ib_reg_cache, sizeof(c->ib_reg_cache), reg, 2);
}

static void read_devices(reader_t *r, hoop__config_t *c)
{
    /* The area must hold one element of every rank in each half: 8K covers 256 ranks of 16. */
    size_var(r, "HOOP_CUDA_IPC_BYTES", &c->cuda_ipc_bytes, 8192, SIZE_MAX, 0,
             "a size of at least 8K, e.g. 32M");
    size_var(r, "HOOP_CUDA_IPC_ONESHOT_BYTES", &c->cuda_ipc_oneshot_bytes, 0, SIZE_MAX, 0,
             "a size, e.g. 256K, or 0 for never");
}

static void read_record(reader_t *r, hoop__config_t *c)
{
    int_var(r, "HOOP_RECORD", &c->record, 0, HOOP__CONFIG_RECORD_MAX,
            "a count of calls from 0 (off) to 1048576");
    text_var(r, "HOOP_RECORD_DIR", c->record_dir, sizeof(c->record_dir),
             "a path shorter than 512 bytes");
    flag_var(r, "HOOP_RECORD_SIGNAL", &c->record_signal);
}

static void read_test_hooks(reader_t *r, hoop__config_t *c)
{
    static const char path[] = "a path shorter than 512 bytes";
    text_var(r, "HOOP_TEST_CUDA_MODULE", c->test_cuda_module, sizeof(c->test_cuda_module), path);
    text_var(r, "HOOP_TEST_CUDA_DRIVER", c->test_cuda_driver, sizeof(c->test_cuda_driver), path);
    text_var(r, "HOOP_TEST_IBV_DOUBLE", c->test_ibv_double, sizeof(c->test_ibv_double), path);
    flag_var(r, "HOOP_TEST_SKIP_DONE", &c->test_skip_done);
}

hoop_result_t hoop__config_parse(hoop__config_t *c, hoop__getenv_fn get, void *ctx, char *err,
                                 size_t errlen)
{
    hoop__config_defaults(c);
    reader_t r = {.get = get, .ctx = ctx, .err = err, .errlen = errlen, .rc = HOOP_OK};
    read_debug(&r, c);
    read_choices(&r, c);
    read_transports(&r, c);
    read_devices(&r, c);
    read_record(&r, c);
    read_test_hooks(&r, c);
    if (r.rc != HOOP_OK) snprintf(c->invalid, sizeof(c->invalid), "%s", err);
    char why[512];
    hoop_result_t krc = hoop__auth_key_from_env(&c->auth, get, ctx, why, sizeof(why));
    if (krc != HOOP_OK) {
        /* A rank that cannot authenticate cannot tell the others anything: its own failure. */
        c->invalid[0] = '\0';
        snprintf(err, errlen, "%s", why);
        return krc;
    }
    return r.rc;
}

void hoop__config_wipe(hoop__config_t *c)
{
    if (c != NULL) hoop__auth_key_wipe(&c->auth);
}

static const char *from_environ(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

hoop_result_t hoop__config_load(hoop__config_t *c, char *err, size_t errlen)
{
    return hoop__config_parse(c, from_environ, NULL, err, errlen);
}
