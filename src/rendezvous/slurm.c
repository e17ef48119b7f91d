/* Slurm's variables as a rendezvous: the host list expander, the derived port and the checks. */
#include "rendezvous/slurm.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* More hosts than any cluster has: keeps every product below overflow. */
#define MAX_HOSTS (1L << 24)
#define MAX_NUM 999999999UL
#define MAX_GROUPS 8

static int bad(char *err, size_t errlen, const char *list, const char *why)
{
    hoop__say(err, errlen, "Slurm host list \"%.200s\" is malformed: %s", list, why);
    return -1;
}

/* A decimal of at most 9 digits at *s; *width gets its length (the zero padding it implies). */
static int number(const char **s, unsigned long *v, int *width)
{
    const char *p = *s;
    unsigned long x = 0;
    while (isdigit((unsigned char)*p) && p - *s < 10) x = x * 10 + (unsigned long)(*p++ - '0');
    if (p == *s || p - *s > 9 || isdigit((unsigned char)*p)) return -1;
    *v = x;
    *width = (int)(p - *s);
    *s = p;
    return 0;
}

/* One bracket group: "a", "a-b" joined by commas, from just after '[' to its ']'. With pick < 0
 * counts the numbers into *n; otherwise puts number pick (and its padding) into *v, *w. The end
 * (the ']') is left in *s. -1: malformed; -2: too many numbers. */
static int group(const char **s, long pick, long *n, unsigned long *v, int *w)
{
    const char *p = *s;
    long total = 0;
    for (;;) {
        unsigned long lo, hi;
        int wl, wh;
        if (number(&p, &lo, &wl) != 0) return -1;
        hi = lo;
        if (*p == '-') {
            p++;
            if (number(&p, &hi, &wh) != 0 || hi < lo) return -1;
        }
        const long span = (long)(hi - lo) + 1;
        if (span > MAX_HOSTS || total > MAX_HOSTS - span) return -2;
        if (pick >= total && pick < total + span) {
            *v = lo + (unsigned long)(pick - total);
            *w = wl;
        }
        total += span;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p != ']') return -1;
        break;
    }
    *s = p;
    *n = total;
    return 0;
}

int hoop__nodelist_host(const char *list, long index, char *out, size_t cap, long *count, char *err,
                        size_t errlen)
{
    if (cap > 0) out[0] = '\0'; /* what a failure leaves */
    if (list == NULL || *list == '\0') return bad(err, errlen, "", "it is empty");
    long seen = 0; /* hosts in the items before this one */
    int found = 0;
    const char *p = list;
    for (;;) {
        /* One item: text and bracket groups up to a comma outside brackets. First pass: the
         * size of each group. */
        const char *start = p;
        long sizes[MAX_GROUPS];
        int ngroups = 0;
        long hosts = 1;
        while (*p != '\0' && *p != ',') {
            unsigned char c = (unsigned char)*p;
            if (c == '[') {
                if (ngroups == MAX_GROUPS)
                    return bad(err, errlen, list, "a host has more than 8 bracket groups");
                p++;
                long n = 0;
                unsigned long v;
                int w;
                const int g = group(&p, -1, &n, &v, &w);
                if (g == -2) return bad(err, errlen, list, "it names too many hosts");
                if (g != 0)
                    return bad(err, errlen, list,
                               "a bracket must hold numbers or ranges LOW-HIGH (LOW <= HIGH, at "
                               "most 9 digits) joined by commas, then ']'");
                if (hosts > MAX_HOSTS / n) return bad(err, errlen, list, "it names too many hosts");
                hosts *= n;
                sizes[ngroups++] = n;
                p++; /* the ']' */
            } else if (c == ']') {
                return bad(err, errlen, list, "a ']' has no '['");
            } else if (c <= ' ' || c >= 0x7f) {
                return bad(err, errlen, list, "it has a space or an unprintable character");
            } else {
                p++;
            }
        }
        if (p == start) return bad(err, errlen, list, "it has an empty host name");
        if (seen > MAX_HOSTS - hosts) return bad(err, errlen, list, "it names too many hosts");
        if (!found && index >= seen && index < seen + hosts) {
            /* Second pass: host (index - seen) of this item, the last group varying fastest. */
            long digit[MAX_GROUPS];
            long rest = index - seen;
            for (int g = ngroups - 1; g >= 0; g--) {
                digit[g] = rest % sizes[g];
                rest /= sizes[g];
            }
            size_t len = 0;
            int g = 0;
            for (const char *q = start; q < p;) {
                char piece[32];
                size_t plen;
                if (*q == '[') {
                    q++;
                    long n;
                    unsigned long v = 0;
                    int w = 1;
                    (void)group(&q, digit[g++], &n, &v, &w);
                    q++;
                    plen = (size_t)snprintf(piece, sizeof piece, "%0*lu", w, v);
                    if (len + plen >= cap) goto toolong;
                    memcpy(out + len, piece, plen);
                } else {
                    if (len + 1 >= cap) goto toolong;
                    out[len] = *q++;
                    plen = 1;
                }
                len += plen;
            }
            out[len] = '\0';
            found = 1;
        }
        seen += hosts;
        if (*p == '\0') break;
        p++; /* the ',' */
        if (*p == '\0') return bad(err, errlen, list, "it ends with a comma");
    }
    *count = seen;
    if (!found) {
        hoop__say(err, errlen, "Slurm host list \"%.200s\" has %ld host(s), not a host number %ld",
                  list, seen, index);
        return -1;
    }
    return 0;
toolong:
    out[0] = '\0';
    hoop__say(err, errlen, "Slurm host list \"%.200s\" has a host name longer than %zu characters",
              list, cap - 1);
    return -1;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return (v != NULL && *v != '\0') ? v : NULL;
}

static int id(const char *name, unsigned long *v)
{
    const char *s = env(name);
    if (s == NULL || !isdigit((unsigned char)*s)) return -1;
    char *end = NULL;
    errno = 0;
    unsigned long x = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0') return -1;
    *v = x;
    return 0;
}

int hoop__slurm_tasks_on_node(const char *spec, long node, long *tasks)
{
    if (spec == NULL || node < 0) return -1;
    const char *p = spec;
    long seen = 0;
    int found = 0;
    /* The whole list is read: a malformed one is not half trusted. */
    for (;;) {
        unsigned long n, k = 1;
        int w;
        if (number(&p, &n, &w) != 0) return -1;
        if (*p == '(') {
            if (p[1] != 'x') return -1;
            p += 2;
            if (number(&p, &k, &w) != 0 || k == 0 || *p != ')') return -1;
            p++;
        }
        if (!found && node < seen + (long)k) {
            *tasks = (long)n;
            found = 1;
        }
        seen += (long)k;
        if (*p == '\0') break;
        if (*p != ',') return -1;
        p++;
    }
    return found ? 0 : -1;
}

int hoop__slurm_local_size(long *ls, const char **from, char *err, size_t errlen)
{
    const char *spec = env("SLURM_STEP_TASKS_PER_NODE");
    const char *nodeid = env("SLURM_NODEID");
    if (!hoop__slurm_in_step() || spec == NULL || nodeid == NULL) return 0;
    unsigned long node;
    long n = 0;
    if (id("SLURM_NODEID", &node) != 0 || hoop__slurm_tasks_on_node(spec, (long)node, &n) != 0 ||
        n < 1) {
        hoop__say(err, errlen,
                  "SLURM_STEP_TASKS_PER_NODE=\"%.64s\" has no task count for SLURM_NODEID=%.16s",
                  spec, nodeid);
        return -1;
    }
    *ls = n;
    *from = "SLURM_STEP_TASKS_PER_NODE";
    return 1;
}

int hoop__slurm_in_step(void)
{
    return env("SLURM_JOB_ID") != NULL && env("SLURM_STEP_ID") != NULL &&
           env("SLURM_PROCID") != NULL;
}

int hoop__slurm_port(unsigned long job, unsigned long step)
{
    unsigned long long k = (unsigned long long)job * 16u + step % 16u;
    return HOOP__SLURM_PORT_BASE + (int)(k % HOOP__SLURM_PORT_SPAN);
}

hoop_result_t hoop__slurm_address(hoop__rdv_t *out, int host_set, int port_set, char *err,
                                  size_t errlen)
{
    if (!host_set) {
        const char *from = "SLURM_STEP_NODELIST";
        const char *list = env(from);
        if (list == NULL) list = env(from = "SLURM_JOB_NODELIST");
        if (list == NULL) list = env(from = "SLURM_NODELIST");
        if (list == NULL) {
            hoop__say(err, errlen,
                      "under Slurm hoop meets rank 0 on the first host of the step, but neither "
                      "SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set: set MASTER_ADDR");
            return HOOP_ERR_INVALID_ARGUMENT;
        }
        long n = 0;
        char why[400];
        if (hoop__nodelist_host(list, 0, out->host, sizeof out->host, &n, why, sizeof why) != 0) {
            hoop__say(err, errlen, "%s: %s (set MASTER_ADDR to rank 0's host instead)", from, why);
            return HOOP_ERR_INVALID_ARGUMENT;
        }
        /* Block and cyclic distributions put task 0 on the first node; an arbitrary one
         * (SLURM_HOSTFILE) may not. Rank 0 says so rather than failing to bind. */
        const char *me = env("SLURMD_NODENAME");
        if (out->rank == 0 && me != NULL && strcmp(me, out->host) != 0) {
            hoop__say(err, errlen,
                      "rank 0 runs on %s, not on %s, the first host of %s=\"%.200s\": with this "
                      "task distribution set MASTER_ADDR to rank 0's host",
                      me, out->host, from, list);
            return HOOP_ERR_INVALID_ARGUMENT;
        }
    }
    if (!port_set) {
        unsigned long job, step;
        if (id("SLURM_JOB_ID", &job) != 0 || id("SLURM_STEP_ID", &step) != 0) {
            hoop__say(err, errlen,
                      "under Slurm hoop derives the rendezvous port from SLURM_JOB_ID and "
                      "SLURM_STEP_ID, which must be whole numbers: set MASTER_PORT instead");
            return HOOP_ERR_INVALID_ARGUMENT;
        }
        out->port = hoop__slurm_port(job, step);
    }
    snprintf(out->method, sizeof out->method, "tcp");
    return HOOP_OK;
}
