#include "base/config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "base/wire.h"

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
    c->shm_spin_us = 200;
    c->shm_stream_bytes = (size_t)16 << 20;
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

static hoop_result_t bad(char *err, size_t errlen, const char *name, const char *val,
                         const char *expect)
{
    snprintf(err, errlen, "%s=\"%s\" is not valid: expected %s", name, val, expect);
    return HOOP_ERR_INVALID_ARGUMENT;
}

static int copy_word(char *dst, size_t cap, const char *src, const char *const *allowed)
{
    for (const char *const *a = allowed; *a != NULL; a++) {
        if (strcasecmp(src, *a) == 0) {
            snprintf(dst, cap, "%s", *a);
            return 0;
        }
    }
    return -1;
}

hoop_result_t hoop__config_parse(hoop__config_t *c, hoop__getenv_fn get, void *ctx, char *err,
                                 size_t errlen)
{
    hoop__config_defaults(c);
    const char *v;

    if ((v = get("HOOP_DEBUG", ctx)) != NULL && v[0] != '\0') {
        static const char *const names[] = {"NONE", "WARN", "INFO", "TRACE"};
        int lvl = -1;
        for (int i = 0; i < 4; i++)
            if (strcasecmp(v, names[i]) == 0) lvl = i;
        if (strcasecmp(v, "VERSION") == 0 || strcasecmp(v, "ERROR") == 0) lvl = HOOP__LOG_WARN;
        if (lvl < 0) return bad(err, errlen, "HOOP_DEBUG", v, "NONE, WARN, INFO or TRACE");
        c->log_level = lvl;
    }
    if ((v = get("HOOP_DEBUG_SUBSYS", ctx)) != NULL &&
        hoop__log_subsys_parse(v, &c->log_subsys, err, errlen) != 0)
        return HOOP_ERR_INVALID_ARGUMENT;
    if ((v = get("HOOP_DEBUG_FILE", ctx)) != NULL) {
        if (strlen(v) >= sizeof(c->log_file))
            return bad(err, errlen, "HOOP_DEBUG_FILE", v, "a path shorter than 256 bytes");
        strcpy(c->log_file, v);
    }
    if ((v = get("HOOP_TRANSPORT", ctx)) != NULL && v[0] != '\0') {
        static const char *const names[] = {"auto", "tcp", "shm", "ibverbs", NULL};
        if (copy_word(c->transport, sizeof(c->transport), v, names) != 0)
            return bad(err, errlen, "HOOP_TRANSPORT", v, "auto, tcp, shm or ibverbs");
    }
    if ((v = get("HOOP_ALGO", ctx)) != NULL && v[0] != '\0') {
        /* The wire's table is the one list of algorithm names. */
        const char *names[HOOP__WIRE_ALGO_COUNT + 1];
        for (int i = 0; i < HOOP__WIRE_ALGO_COUNT; i++) names[i] = hoop__wire_algo_name(i);
        names[HOOP__WIRE_ALGO_COUNT] = NULL;
        if (copy_word(c->algo, sizeof(c->algo), v, names) != 0)
            return bad(err, errlen, "HOOP_ALGO", v,
                       "auto, ring, rd, rabenseifner, ps, ps-sharded, ipc, shm, p2p or hier");
    }
    if ((v = get("HOOP_SOCKET_IFNAME", ctx)) != NULL) {
        if (strlen(v) >= sizeof(c->ifname))
            return bad(err, errlen, "HOOP_SOCKET_IFNAME", v, "a list shorter than 128 bytes");
        strcpy(c->ifname, v);
    }
    if ((v = get("HOOP_SOCKETS_PER_PEER", ctx)) != NULL && v[0] != '\0') {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end != '\0' || n < 1 || n > 16)
            return bad(err, errlen, "HOOP_SOCKETS_PER_PEER", v, "an integer from 1 to 16");
        c->sockets_per_peer = (int)n;
    }
    if ((v = get("HOOP_CHUNK_BYTES", ctx)) != NULL && v[0] != '\0') {
        size_t n;
        if (hoop__parse_size(v, &n) != 0 || n < 4096 || n > (1u << 30))
            return bad(err, errlen, "HOOP_CHUNK_BYTES", v, "a size from 4K to 1G, e.g. 512K");
        c->chunk_bytes = n;
    }
    if ((v = get("HOOP_SMALL_BYTES", ctx)) != NULL && v[0] != '\0') {
        size_t n;
        if (hoop__parse_size(v, &n) != 0 || n > (1u << 30))
            return bad(err, errlen, "HOOP_SMALL_BYTES", v, "a size up to 1G, e.g. 16K");
        c->small_bytes = n;
    }
    if ((v = get("HOOP_TIMEOUT", ctx)) != NULL && v[0] != '\0') {
        char *end;
        errno = 0;
        double t = strtod(v, &end);
        /* Below a millisecond no wait can see its peer at all; above 1e7 s (four months) is
         * "never" spelt out, which the default already is in practice. NaN fails both tests. */
        if (errno != 0 || end == v || *end != '\0' || !(t >= 1e-3 && t <= 1e7))
            return bad(err, errlen, "HOOP_TIMEOUT", v,
                       "seconds, a number from 0.001 (1 ms) to 10000000");
        c->timeout_s = t;
    }
    if ((v = get("HOOP_TRACE", ctx)) != NULL && v[0] != '\0') {
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            return bad(err, errlen, "HOOP_TRACE", v, "0 or 1");
        c->trace = v[0] == '1';
    }
    if ((v = get("HOOP_HOSTID", ctx)) != NULL) {
        if (strlen(v) >= sizeof(c->host_id))
            return bad(err, errlen, "HOOP_HOSTID", v, "an id shorter than 64 bytes");
        strcpy(c->host_id, v);
    }
    if ((v = get("HOOP_SHM_RING_BYTES", ctx)) != NULL && v[0] != '\0') {
        size_t n;
        if (hoop__parse_size(v, &n) != 0 || n < 4096 || n > (1u << 30) || (n & (n - 1)) != 0)
            return bad(err, errlen, "HOOP_SHM_RING_BYTES", v, "a power of two from 4K to 1G");
        c->shm_ring_bytes = n;
    }
    if ((v = get("HOOP_SHM_CMA_BYTES", ctx)) != NULL && v[0] != '\0') {
        size_t n;
        if (hoop__parse_size(v, &n) != 0)
            return bad(err, errlen, "HOOP_SHM_CMA_BYTES", v, "a size, e.g. 256K, or 0 for never");
        c->shm_cma_bytes = n;
    }
    if ((v = get("HOOP_SHM_STREAM_BYTES", ctx)) != NULL && v[0] != '\0') {
        size_t n;
        if (hoop__parse_size(v, &n) != 0)
            return bad(err, errlen, "HOOP_SHM_STREAM_BYTES", v, "a size, e.g. 24M, or 0 for never");
        c->shm_stream_bytes = n;
    }
    if ((v = get("HOOP_SHM_SPIN_US", ctx)) != NULL && v[0] != '\0') {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end != '\0' || n < 0 || n > 1000000)
            return bad(err, errlen, "HOOP_SHM_SPIN_US", v, "microseconds from 0 to 1000000");
        c->shm_spin_us = (int)n;
    }
    return hoop__auth_key_from_env(&c->auth, get, ctx, err, errlen);
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
