/* The CUDA IPC areas at hoop_comm_destroy (docs/cuda.md, "What peers open"): a rank frees its
 * area only once every peer that opened it has closed it, or has died. The test double aborts an
 * exporter that frees an allocation a live process still has open, and an importer that reads one
 * after its free, so a destroy without that handshake fails here.
 *
 * usage: ipc_close MODULE MODE, run alone (it starts its 3 ranks itself, on one host, so that a
 * rank may die without a launcher stopping the others). Every rank first makes an all-reduce over
 * CUDA IPC (HOOP_ALGO=ipc), checked against the sum computed here, which opens every peer's area;
 * then, by MODE:
 *   destroy        every rank destroys, the last one 300 ms after the others;
 *   failed         an all-reduce that fails on every rank (rank 0 gives another count), then as
 *                  destroy;
 *   kill-importer  the last rank is killed 300 ms after the call, without closing anything;
 *   kill-exporter  rank 0 is killed at once, and the last rank destroys 300 ms after rank 1;
 *   importer-stays the last rank never destroys and exits 2 timeouts later: the others' destroy
 *                  gives up waiting for it after one timeout and leaves their areas allocated.
 * Every survivor's destroy must return HOOP_OK within the timeout (importer-stays: after one
 * timeout, within 5 s more), and the process exit 0; the killed rank must have died of SIGKILL. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devbuf.h"
#include "hoop.h"
#include "../common/forked.h"
#include "../common/testing.h"

#define RANKS 3
#define COUNT 4099

static float input(int r, size_t i) { return (float)((r + 1) * 1000 + (int)(i % 997)); }

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int run_rank(const char *module, const char *mode)
{
    char err[512];
    if (devbuf_open(module, err, sizeof err) != 0) {
        fprintf(stderr, "ipc_close: %s: %s\n", module, err);
        return devbuf_no_device(err) ? 77 : 1;
    }
    hoop_comm_t *c;
    hoop_result_t rc = hoop_init_from_env(&c);
    if (rc != HOOP_OK) {
        fprintf(stderr, "ipc_close: hoop_init_from_env: %s\n", hoop_error_string(rc));
        return 1;
    }
    int rank = test_rank = hoop_comm_rank(c), size = hoop_comm_size(c), last = size - 1;
    float *h = malloc(COUNT * sizeof(float)), *o = malloc(COUNT * sizeof(float));
    float *d = devbuf_alloc(COUNT * sizeof(float));
    if (h == NULL || o == NULL) return 1;
    for (size_t i = 0; i < COUNT; i++) h[i] = input(rank, i);
    devbuf_copy(d, h, COUNT * sizeof(float));
    rc = hoop_allreduce(c, d, d, COUNT, HOOP_FLOAT32, HOOP_SUM);
    CHECK(rc == HOOP_OK, "allreduce over CUDA IPC: %s", hoop_comm_last_error(c));
    devbuf_copy(o, d, COUNT * sizeof(float));
    size_t bad = 0;
    for (size_t i = 0; i < COUNT; i++) {
        float e = 0;
        for (int r = 0; r < size; r++) e += input(r, i);
        bad += o[i] != e;
    }
    CHECK(bad == 0, "allreduce over CUDA IPC: %zu wrong element(s)", bad);

    if (!strcmp(mode, "failed")) {
        rc = hoop_allreduce(c, d, d, rank == 0 ? COUNT - 1 : COUNT, HOOP_FLOAT32, HOOP_SUM);
        CHECK(rc != HOOP_OK, "an all-reduce whose counts differ returned HOOP_OK");
    }
    /* A rank is killed only once every rank's all-reduce is over: what is tested is destroy
     * with a dead peer. A rank that dies while a peer's call still waits for its device work
     * fails that call (cuda-double-fault-kill-*-ipc test that), and rank 0 could otherwise die
     * before rank 1's all-reduce had returned. */
    if (!strncmp(mode, "kill-", 5)) {
        rc = hoop_barrier(c);
        CHECK(rc == HOOP_OK, "barrier before the kill: %s", hoop_comm_last_error(c));
    }
    if (!strcmp(mode, "kill-importer") && rank == last) {
        nap_ms(300);
        raise(SIGKILL);
    }
    if (!strcmp(mode, "kill-exporter") && rank == 0) raise(SIGKILL);
    const char *limit = getenv("HOOP_TIMEOUT");
    double timeout = limit != NULL ? atof(limit) : 60;
    int stays = !strcmp(mode, "importer-stays");
    if (stays && rank == last) {
        /* Its mappings of the peers' areas go with the process, not before. */
        nap_ms((long)(2000 * timeout));
        printf("rank %d: %s: exits without hoop_comm_destroy\n", rank, mode);
        fflush(stdout);
        _exit(test_failures ? 1 : 0);
    }
    if (rank == last) nap_ms(300);
    double t0 = now_s();
    rc = hoop_comm_destroy(c);
    double took = now_s() - t0;
    CHECK(rc == HOOP_OK, "hoop_comm_destroy: %s", hoop_error_string(rc));
    if (stays)
        CHECK(took >= 0.9 * timeout && took < timeout + 5,
              "hoop_comm_destroy took %.1f s where a peer kept the area open: it must wait one "
              "timeout (%.0f s) for it, and no more",
              took, timeout);
    else
        CHECK(took < timeout, "hoop_comm_destroy took %.1f s, more than the timeout (%.0f s)", took,
              timeout);
    devbuf_free(d);
    free(h);
    free(o);
    printf("rank %d: %s: %s (destroy took %.3f s)\n", rank, mode, test_failures ? "FAILED" : "ok",
           took);
    fflush(stdout);
    return test_failures ? 1 : 0;
}

typedef struct {
    const char *module, *mode;
    int port;
} rank_arg_t;

/* A rank as a launcher starts it: its place in the environment, the store on rank 0. */
static int rank_main(int rank, int size, void *varg)
{
    const rank_arg_t *a = varg;
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", size);
    setenv("WORLD_SIZE", v, 1);
    setenv("LOCAL_WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", a->port);
    setenv("MASTER_PORT", v, 1);
    return run_rank(a->module, a->mode);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: ipc_close MODULE "
                        "destroy|failed|kill-importer|kill-exporter|importer-stays\n");
        return 2;
    }
    rank_arg_t arg = {argv[1], argv[2], test_free_port()};
    const char *mode = arg.mode;
    int victim = !strcmp(mode, "kill-importer")   ? RANKS - 1
                 : !strcmp(mode, "kill-exporter") ? 0
                                                  : -1;
    if (arg.port < 0) {
        fprintf(stderr, "ipc_close: no free port\n");
        return 1;
    }
    /* Every rank within a deadline well past the timeout; what is left then is killed. */
    test_launch_t l;
    if (test_launch_open(&l, "ipc-close", 150) != 0) return 1;
    l.may_skip = 1; /* a rank that finds no device exits 77 */
    int failed = test_launch_fork(&l, RANKS, 0, rank_main, &arg) != 0;
    if (l.nranks > 0) failed |= test_launch_wait(&l, victim, NULL, NULL);
    int skipped = l.skipped > 0;
    test_launch_close(&l);
    printf("ipc_close %s: %s\n", mode, failed ? "FAILED" : skipped ? "skipped" : "ok");
    return failed ? 1 : skipped ? 77 : 0;
}
