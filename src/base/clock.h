/* The one clock of the library: monotonic seconds, for every deadline and timeout. */
#ifndef HOOP_CLOCK_H
#define HOOP_CLOCK_H

#include <time.h>

static inline double hoop__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
