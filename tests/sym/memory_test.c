/*
 * hoop_comm_memory and the INFO line at init against /proc: the program forks its ranks (file://
 * rendezvous), each with HOOP_DEBUG=INFO and its stderr in a file of its own.
 *
 *   memory_test --ranks N [--tcp]
 *
 * Each rank checks, after init, after a collective (which makes the area) and a hoop_mem_alloc,
 * and after hoop_mem_free, that the shared memory the library says it maps equals the sizes of
 * its mappings in /proc/self/maps: the area (memfd hoop-coll), the rings (hoop-shm) and
 * symmetric memory (hoop-sym); that the area made is what init said it would be; that the open
 * connections are one per peer (shm) or per socket (--tcp: no rings, and at least as many
 * sockets open in /proc/self/fd); and that the INFO line says the same figures as the call.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include "hoop.h"
#include "../common/forked.h"

/* Bytes of this process's mappings of the memfd named name. */
static uint64_t mapped(const char *name)
{
    char want[64], line[512];
    snprintf(want, sizeof(want), "/memfd:%s ", name);
    FILE *f = fopen("/proc/self/maps", "r");
    uint64_t n = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        if (strstr(line, want) != NULL && sscanf(line, "%lx-%lx", &lo, &hi) == 2) n += hi - lo;
    }
    if (f != NULL) fclose(f);
    return n;
}

static int sockets_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    char path[300], to[64];
    while (d != NULL && (e = readdir(d)) != NULL) {
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, to, sizeof(to) - 1);
        if (k > 0) {
            to[k] = '\0';
            n += strncmp(to, "socket:", 7) == 0;
        }
    }
    if (d != NULL) closedir(d);
    return n;
}

static void check_maps(const hoop_memory_t *m, const char *when)
{
    CHECK(m->area == mapped("hoop-coll"), "%s: area %llu bytes, /proc maps %llu", when,
          (unsigned long long)m->area, (unsigned long long)mapped("hoop-coll"));
    CHECK(m->rings == mapped("hoop-shm"), "%s: rings %llu bytes, /proc maps %llu", when,
          (unsigned long long)m->rings, (unsigned long long)mapped("hoop-shm"));
    CHECK(m->sym == mapped("hoop-sym"), "%s: symmetric %llu bytes, /proc maps %llu", when,
          (unsigned long long)m->sym, (unsigned long long)mapped("hoop-sym"));
}

/* The INFO line's figures (MiB and KiB, as printed) against m. */
static void check_line(const char *log, const hoop_memory_t *m)
{
    FILE *f = fopen(log, "r");
    char line[1024];
    int found = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        const char *s = strstr(line, "hoop INFO memory: ");
        if (s == NULL) continue;
        double shared, area, next, rings, sym, conn_kib, rec_kib;
        unsigned long long nconn;
        found = sscanf(s,
                       "hoop INFO memory: %lf MiB shared mapped (area %lf MiB, %lf MiB once a "
                       "call makes it; rings %lf MiB; symmetric %lf MiB), connections %llu "
                       "holding %lf KiB, recorder %lf KiB",
                       &shared, &area, &next, &rings, &sym, &nconn, &conn_kib, &rec_kib) == 8;
        CHECK(found, "the INFO line does not read as expected: %s", s);
        if (!found) break;
        double mib = 1024.0 * 1024.0, kib = 1024.0;
        /* Printed with 2 decimals of MiB and 1 of KiB: within half of the last digit. */
#define NEAR(x, v, unit, digit)                                                                    \
    ((x) * (unit) - (double)(v) <= (digit) * (unit) / 2 + 1 &&                                     \
     (double)(v) - (x) * (unit) <= (digit) * (unit) / 2 + 1)
        CHECK(NEAR(shared, m->area + m->rings + m->sym, mib, 0.01) &&
                  NEAR(area, m->area, mib, 0.01) && NEAR(next, m->area_next, mib, 0.01) &&
                  NEAR(rings, m->rings, mib, 0.01) && NEAR(sym, m->sym, mib, 0.01) &&
                  nconn == m->nconnections && NEAR(conn_kib, m->connections, kib, 0.1) &&
                  NEAR(rec_kib, m->recorder, kib, 0.1),
              "the INFO line says other figures than hoop_comm_memory: %s", s);
        break;
    }
    if (f != NULL) fclose(f);
    CHECK(found, "no INFO line of the memory at init in %s", log);
}

typedef struct launch_arg {
    const test_launch_t *launch;
    const char *url;
    int tcp;
} launch_arg_t;

/* Rank r's stderr: the INFO lines it checks, and what the parent shows where the rank failed. */
static void log_path(const test_launch_t *l, int r, char *path, size_t n)
{
    snprintf(path, n, "%.*s/rank%d.log", (int)sizeof l->dir, l->dir, r);
}

static void show_log(int r, void *arg)
{
    char path[160], line[1024];
    log_path(((launch_arg_t *)arg)->launch, r, path, sizeof path);
    printf("its log:\n");
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) fputs(line, stdout);
    if (f != NULL) fclose(f);
}

static int rank_main(int rank, int size, void *varg)
{
    const launch_arg_t *arg = varg;
    const char *url = arg->url;
    int tcp = arg->tcp;
    char log[160];
    log_path(arg->launch, rank, log, sizeof log);
    test_rank = rank;
    if (freopen(log, "w", stderr) == NULL) return 1;
    hoop_comm_t *c;
    if (hoop_init(&c, url, rank, size) != HOOP_OK) {
        printf("FAIL (rank %d): hoop_init\n", rank);
        return 1;
    }
    fflush(stderr);
    hoop_memory_t m0, m1, m2;
    CHECK(hoop_comm_memory(c, &m0) == HOOP_OK, "hoop_comm_memory");
    CHECK(hoop_comm_memory(c, NULL) == HOOP_ERR_INVALID_ARGUMENT, "NULL accepted");
    check_maps(&m0, "after init");
    check_line(log, &m0);
    CHECK(m0.area == 0, "an area before any call");
    CHECK(m0.recorder > 0, "no recorder counted");
    CHECK(m0.connections > 0, "no connection state counted");
    if (tcp) {
        CHECK(m0.rings == 0 && m0.area_next == 0, "tcp: rings %llu, area to come %llu",
              (unsigned long long)m0.rings, (unsigned long long)m0.area_next);
        CHECK(m0.nconnections >= (uint64_t)(size - 1) && (int)m0.nconnections <= sockets_open(),
              "tcp: %llu connections, %d sockets open", (unsigned long long)m0.nconnections,
              sockets_open());
    } else {
        CHECK(m0.nconnections == (uint64_t)(size - 1), "shm: %llu connections for %d peers",
              (unsigned long long)m0.nconnections, size - 1);
        CHECK(m0.rings > 0 && m0.area_next > 0, "shm: rings %llu, area to come %llu",
              (unsigned long long)m0.rings, (unsigned long long)m0.area_next);
    }
    size_t n = 1 << 18;
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)rank;
    CHECK(hoop_allreduce(c, x, x, n, HOOP_FLOAT32, HOOP_SUM) == HOOP_OK, "allreduce");
    CHECK(x[n - 1] == (float)(size * (size - 1) / 2), "allreduce: wrong sum");
    free(x);
    void *p = NULL;
    hoop_result_t rc = hoop_mem_alloc(c, (3u << 20) + 5000, &p);
    CHECK(rc == HOOP_OK, "hoop_mem_alloc: %s", hoop_comm_last_error(c));
    CHECK(hoop_comm_memory(c, &m1) == HOOP_OK, "hoop_comm_memory");
    check_maps(&m1, "after a call and an allocation");
    CHECK(m1.area == m0.area_next, "the area maps %llu bytes, init said %llu",
          (unsigned long long)m1.area, (unsigned long long)m0.area_next);
    CHECK(m1.sym >= (uint64_t)size * ((3u << 20) + 5000), "symmetric: %llu bytes for %d ranks",
          (unsigned long long)m1.sym, size);
    if (rc == HOOP_OK) CHECK(hoop_mem_free(c, p) == HOOP_OK, "hoop_mem_free");
    CHECK(hoop_comm_memory(c, &m2) == HOOP_OK, "hoop_comm_memory");
    check_maps(&m2, "after the free");
    CHECK(m2.sym == 0, "symmetric memory left: %llu", (unsigned long long)m2.sym);
    return test_rank_end(c, 0);
}

int main(int argc, char **argv)
{
    int ranks = 2, tcp = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc)
            ranks = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tcp") == 0)
            tcp = 1;
    }
    /* The time tests/sym/meson.build gives a row: past it, under a timeout multiplier, the ranks
     * still running are named and killed. */
    test_launch_t l;
    char url[160];
    if (test_launch_open(&l, "memory-test", 120) != 0) return 1;
    test_launch_url(&l, "rdv", url, sizeof url);
    setenv("HOOP_DEBUG", "INFO", 1);
    if (tcp) setenv("HOOP_TRANSPORT", "tcp", 1);
    launch_arg_t arg = {&l, url, tcp};
    int bad = test_launch_fork(&l, ranks, 0, rank_main, &arg) != 0;
    if (l.nranks > 0) bad |= test_launch_wait(&l, -1, show_log, &arg);
    test_launch_close(&l);
    printf("%s: %d ranks%s\n", bad ? "FAIL" : "ok", ranks, tcp ? " over tcp" : "");
    return bad;
}
