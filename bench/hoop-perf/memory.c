/*
 * -M: what the run costs each rank in memory, read from /proc as nccl-tests' -M reports its own:
 * resident memory, shared memory mapped (memfd and /dev/shm mappings: hoop's one-host area and
 * rings) and file descriptors, taken before hoop_init, after it, once hoop-perf's buffers are
 * allocated and touched, and at the end. The report is the largest value over ranks. It is measured
 * from outside the library: what init and the collectives add, whoever in the process added it.
 * Beside it, the library's own count at the end (hoop_comm_memory): the part of each that the
 * communicator holds (area, rings, symmetric memory, connections, recorder).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"
#include "../procmem.h"
#include "hoop-perf.h"

enum { AT_START, AT_INIT, AT_BUFFERS, AT_END, NSNAP };

typedef struct snap {
    int64_t rss, shm_size, shm_rss, fds; /* bytes, bytes, bytes, count */
} snap_t;

/* The figures reported, in this order (bytes unless said). */
enum {
    M_INIT_RSS,
    M_INIT_SHM,
    M_INIT_SHM_RSS,
    M_INIT_FDS,
    M_USER,
    M_COLL_RSS,
    M_COLL_SHM,
    M_COLL_FDS,
    M_LIB_AREA,
    M_LIB_RINGS,
    M_LIB_SYM,
    M_LIB_CONN,
    M_LIB_NCONN,
    M_LIB_REC,
    NFIG
};

struct perf_mem {
    snap_t at[NSNAP];
    int64_t user; /* bytes of hoop-perf's own buffers */
    int64_t fig[NFIG];
};

static void take(snap_t *s)
{
    s->rss = procmem_rss();
    procmem_shm(&s->shm_size, &s->shm_rss);
    s->fds = procmem_fds();
}

int memory_start(bench_t *b)
{
    if (!b->memory) return 1;
    b->mem = calloc(1, sizeof *b->mem);
    if (!b->mem) {
        fprintf(stderr, "hoop-perf: out of memory\n");
        return 0;
    }
    take(&b->mem->at[AT_START]);
    return 1;
}

void memory_after_init(bench_t *b)
{
    if (b->mem) take(&b->mem->at[AT_INIT]);
}

/* The buffers' pages touched first, so that the collectives' figure is the library's. */
void memory_after_buffers(bench_t *b, unsigned char *const *bufs, const size_t *sizes, int n)
{
    if (!b->mem) return;
    for (int i = 0; i < n; i++) {
        volatile unsigned char *p = bufs[i];
        for (size_t j = 0; p && j < sizes[i]; j += 4096) p[j] = p[j];
        b->mem->user += (int64_t)sizes[i];
    }
    take(&b->mem->at[AT_BUFFERS]);
}

static double mib(int64_t v) { return (double)v / (1024.0 * 1024.0); }

int memory_report(bench_t *b)
{
    if (!b->mem) return 1;
    struct perf_mem *m = b->mem;
    take(&m->at[AT_END]);
    hoop_memory_t lib = {0};
    if (!checked(b, "hoop_comm_memory", hoop_comm_memory(b->comm, &lib))) return 0;
    const snap_t *s0 = &m->at[AT_START], *s1 = &m->at[AT_INIT], *s2 = &m->at[AT_BUFFERS],
                 *s3 = &m->at[AT_END];
    int64_t f[NFIG] = {s1->rss - s0->rss,
                       s1->shm_size - s0->shm_size,
                       s1->shm_rss - s0->shm_rss,
                       s1->fds - s0->fds,
                       m->user,
                       s3->rss - s2->rss,
                       s3->shm_size - s1->shm_size,
                       s3->fds - s2->fds,
                       (int64_t)lib.area,
                       (int64_t)lib.rings,
                       (int64_t)lib.sym,
                       (int64_t)lib.connections,
                       (int64_t)lib.nconnections,
                       (int64_t)lib.recorder};
    if (!checked(b, "combining the memory figures",
                 hoop_allreduce(b->comm, f, m->fig, NFIG, HOOP_INT64, HOOP_MAX)))
        return 0;
    if (b->rank == 0) {
        const int64_t *g = m->fig;
        printf("# Memory per rank (-M; the largest over ranks, from /proc):\n");
        printf("#   Initialization  resident %+.1f MiB, shared memory %+.1f MiB mapped "
               "(%+.1f MiB resident), %+" PRId64 " file descriptors\n",
               mib(g[M_INIT_RSS]), mib(g[M_INIT_SHM]), mib(g[M_INIT_SHM_RSS]), g[M_INIT_FDS]);
        printf("#   User-Allocated  %.1f MiB (hoop-perf's buffers)\n", mib(g[M_USER]));
        printf("#   Collective      resident %+.1f MiB, shared memory %+.1f MiB mapped, "
               "%+" PRId64 " file descriptors\n",
               mib(g[M_COLL_RSS]), mib(g[M_COLL_SHM]), g[M_COLL_FDS]);
        printf("#   Communicator    %.1f MiB shared memory mapped: area %.1f MiB, rings %.1f MiB, "
               "symmetric %.1f MiB; %" PRId64 " connections holding %.1f KiB; recorder %.1f KiB "
               "(hoop_comm_memory)\n",
               mib(g[M_LIB_AREA] + g[M_LIB_RINGS] + g[M_LIB_SYM]), mib(g[M_LIB_AREA]),
               mib(g[M_LIB_RINGS]), mib(g[M_LIB_SYM]), g[M_LIB_NCONN], g[M_LIB_CONN] / 1024.0,
               g[M_LIB_REC] / 1024.0);
        fflush(stdout);
    }
    return 1;
}

void write_memory_json(const bench_t *b, FILE *f)
{
    const int64_t *g = b->mem->fig;
    fprintf(f,
            "  \"memory\": {\"init_rss_bytes\": %" PRId64 ", \"init_shm_mapped_bytes\": %" PRId64
            ", \"init_shm_rss_bytes\": %" PRId64 ", \"init_fds\": %" PRId64
            ", \"user_bytes\": %" PRId64 ", \"collective_rss_bytes\": %" PRId64
            ", \"collective_shm_mapped_bytes\": %" PRId64 ", \"collective_fds\": %" PRId64
            ", \"comm_area_bytes\": %" PRId64 ", \"comm_rings_bytes\": %" PRId64
            ", \"comm_sym_bytes\": %" PRId64 ", \"comm_connection_bytes\": %" PRId64
            ", \"comm_connections\": %" PRId64 ", \"comm_recorder_bytes\": %" PRId64 "},\n",
            g[M_INIT_RSS], g[M_INIT_SHM], g[M_INIT_SHM_RSS], g[M_INIT_FDS], g[M_USER],
            g[M_COLL_RSS], g[M_COLL_SHM], g[M_COLL_FDS], g[M_LIB_AREA], g[M_LIB_RINGS],
            g[M_LIB_SYM], g[M_LIB_CONN], g[M_LIB_NCONN], g[M_LIB_REC]);
}

void memory_free(bench_t *b)
{
    free(b->mem);
    b->mem = NULL;
}
