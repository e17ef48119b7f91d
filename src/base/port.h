/* The port rank 0's rendezvous store listens on, where nobody gave one: drawn below the kernel's
 * ephemeral range. A port that bind(0) hands out lies inside that range, where any process's
 * outgoing connection may take it as its local port in the moment between the probe and the
 * store's bind (jobs and tests started side by side met exactly that). Header-only, without
 * state: the library's PMIx rendezvous (which picks rank 0's port itself), hooprun and the tests
 * (through common/port.h) each probe the candidates their own way. */
#ifndef HOOP_BASE_PORT_H
#define HOOP_BASE_PORT_H

#include <stdio.h>
#include <time.h>
#include <unistd.h>

typedef struct hoop__port_draw {
    unsigned x; /* the generator's state */
    int lo;     /* the first ephemeral port; candidates lie in [10000, lo) */
    int left;   /* candidates still to give */
} hoop__port_draw_t;

/* Starts a draw of up to tries candidates, seeded by the pid and the clock so that processes
 * started together draw apart; none where the ephemeral range starts too low to leave room. */
static inline void hoop__port_draw_start(hoop__port_draw_t *d, int tries)
{
    d->lo = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f != NULL) {
        if (fscanf(f, "%d", &d->lo) != 1) d->lo = 32768;
        fclose(f);
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    d->x = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
    d->left = d->lo > 12000 ? tries : 0;
}

/* The next candidate, or 0 once the draw is over (then let the kernel choose: port 0). */
static inline int hoop__port_draw_next(hoop__port_draw_t *d)
{
    if (d->left <= 0) return 0;
    d->left--;
    d->x = d->x * 1103515245u + 12345u;
    return 10000 + (int)((d->x >> 8) % (unsigned)(d->lo - 10000));
}

#endif
