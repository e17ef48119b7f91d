/* The monotonic clock of the programs outside the library (hooprun, hoop-perf and its peers, the
 * tests). They link only the public API, so the library's own clock is not theirs to use. Header-
 * only, so that a peer program of bench/ still builds from its one source file. */
#ifndef HOOP_COMMON_CLOCK_H
#define HOOP_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic seconds, for timings and deadlines. */
static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Monotonic whole milliseconds, for deadlines counted in poll() timeouts. */
static inline int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
