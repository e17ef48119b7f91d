/* Small helpers shared by hoop-perf and the programs it is compared with (bench/peers/): the
 * same clock, the same size syntax on the command line and the same time column in the tables.
 * Header-only, so that bench/vs-peers.sh can still build a peer program from its one source file. */
#ifndef HOOP_BENCH_UTIL_H
#define HOOP_BENCH_UTIL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/clock.h"

/* "64", "64K", "16M", "1G" (binary multiples), each also with a B after it ("64KB"). Returns 0,
 * or 1 if s is not such a size. */
static inline int bench_parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || s[0] == '-') return 1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift) end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0' || v > (SIZE_MAX >> shift)) return 1;
    *out = (size_t)(v << shift);
    return 0;
}

/* A whole number from lo to hi. Returns 0, or 1 if s is not one. */
static inline int bench_parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno || v < lo || v > hi) return 1;
    *out = (int)v;
    return 0;
}

/* A time in microseconds, three significant digits or more, 7 columns wide. */
static inline void bench_time_str(double us, char *out, size_t len)
{
    if (us >= 10000.0)
        snprintf(out, len, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(out, len, "%7.1f", us);
    else
        snprintf(out, len, "%7.2f", us);
}

#endif
