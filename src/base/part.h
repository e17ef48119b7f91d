/* The one balanced split of n items into parts, shared by the schedules (segments of a ring) and the
 * transports (stripes of a message over several sockets), so that both ends of a pair always cut
 * alike. */
#ifndef HOOP_PART_H
#define HOOP_PART_H

#include <stddef.h>

/* Part i of n items cut into parts: it starts at *off and holds *len items; the first n % parts
 * parts hold one more. */
static inline void hoop__part(size_t n, int parts, int i, size_t *off, size_t *len)
{
    size_t q = n / (size_t)parts, r = n % (size_t)parts, ui = (size_t)i;
    *off = ui * q + (ui < r ? ui : r);
    *len = q + (ui < r ? 1 : 0);
}

#endif
