/* Helpers the tests share (header-only, so each test program stays one file to build). */
#ifndef HOOP_TESTING_H
#define HOOP_TESTING_H

#include <time.h>

/* Monotonic seconds, for deadlines and the times tests report. */
static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
