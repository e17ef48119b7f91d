/*
 * Survivors continue: hoop_comm_shrink under injected faults, with real processes. The program
 * forks its ranks (no launcher: hooprun would end the job at the first death), injects the fault
 * and checks what every rank saw.
 *
 *   shrink --transport T --ranks N --mode kill|stop|exclude|mismatch|split --victims A[,B]
 *          [--when between|during] [--timeout S] [--repeat K]
 *
 * T is a HOOP_TRANSPORT value, or mixed: two fake hosts (HOOP_HOSTID by rank parity), shared
 * memory inside each and TCP between.
 *
 * kill: the victims SIGKILL themselves, between two collectives or (during) from a thread while
 * their main thread is in a loop of 4 MiB all-reduces. The survivors' call fails; they shrink and
 * their next all-reduce is checked against the sum over the surviving old ranks, computed here.
 * stop: the victims SIGSTOP themselves between collectives; the survivors time out, shrink and
 * check; then they are continued together: each one's next call on the old communicator and its
 * own shrink must fail, and the survivors' second all-reduce on the new communicator must still
 * count only them.
 * exclude: a healthy communicator; every rank calls hoop_comm_shrink_exclude with the victims,
 * which get HOOP_OK and no communicator. mismatch: as exclude, but rank 0 leaves one victim out
 * of its list: every non-excluded caller must fail. split: as kill between collectives, on a
 * communicator split from the first (every rank, one color); the survivors shrink it, check it,
 * then shrink and check the first.
 * A transport the library does not accept makes the test skip (exit 77).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/testing.h"
#include "hoop.h"

#define MAX_RANKS 16
#define BIG (1024 * 1024) /* uint32 elements: 4 MiB */
#define SMALL 4099

static int ranks = 4, nvictims, victims[MAX_RANKS], repeat = 1;
static double timeout_s = 4;
static const char *mode = "kill", *when = "between", *transport = "tcp";
static int report_fd = -1; /* children -> parent: one line per event */

static int is_victim(int r)
{
    for (int i = 0; i < nvictims; i++)
        if (victims[i] == r) return 1;
    return 0;
}

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof(line) - 2) n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if (write(report_fd, line, (size_t)n) != n) _exit(3);
}

/* What old rank r contributes at element i of round k: distinct per rank, so that a sum that
 * counted a rank too many or too few shows. */
static uint32_t value(int r, size_t i, int k)
{
    return (uint32_t)(i * 2654435761u) ^ (uint32_t)((r + 1) * 40503u + (unsigned)k * 977u);
}

/* The new communicator's all-reduce, checked against the sum over the survivors (old ranks). */
static int check_new(hoop_comm_t *nc, int old_rank, int k)
{
    int n = 0, expect_rank = -1;
    for (int r = 0; r < ranks; r++) {
        if (is_victim(r)) continue;
        if (r == old_rank) expect_rank = n;
        n++;
    }
    CHECK(hoop_comm_size(nc) == n, "new size %d, want %d", hoop_comm_size(nc), n);
    CHECK(hoop_comm_rank(nc) == expect_rank, "new rank %d, want %d", hoop_comm_rank(nc),
          expect_rank);
    uint32_t *v = malloc(SMALL * sizeof(*v));
    if (v == NULL) return -1;
    for (size_t i = 0; i < SMALL; i++) v[i] = value(old_rank, i, k);
    hoop_result_t rc = hoop_allreduce(nc, v, v, SMALL, HOOP_UINT32, HOOP_SUM);
    CHECK(rc == HOOP_OK, "all-reduce on the new communicator: %s: %s", hoop_error_string(rc),
          hoop_comm_last_error(nc));
    size_t bad = 0;
    for (size_t i = 0; rc == HOOP_OK && i < SMALL; i++) {
        uint32_t want = 0;
        for (int r = 0; r < ranks; r++)
            if (!is_victim(r)) want += value(r, i, k);
        if (v[i] != want) bad++;
    }
    CHECK(bad == 0, "%zu of %d elements differ from the survivors' sum", bad, SMALL);
    /* Who is in it, by old rank: an all-gather of them. */
    int32_t me = old_rank, all[MAX_RANKS] = {0};
    rc = hoop_allgather(nc, &me, all, 1, HOOP_INT32);
    CHECK(rc == HOOP_OK, "all-gather on the new communicator: %s", hoop_error_string(rc));
    for (int i = 0, j = 0; rc == HOOP_OK && i < ranks; i++)
        if (!is_victim(i)) {
            CHECK(all[j] == i, "new rank %d is old rank %d, want %d", j, all[j], i);
            j++;
        }
    free(v);
    return 0;
}

static void *killer(void *arg)
{
    (void)arg;
    usleep(30 * 1000);
    report("K %.6f", now_s());
    raise(SIGKILL);
    return NULL;
}

/* A victim's end, in stop mode, once continued. */
static int stopped_victim(hoop_comm_t *c, int me)
{
    uint32_t v[SMALL];
    for (size_t i = 0; i < SMALL; i++) v[i] = value(me, i, 1);
    hoop_result_t rc = hoop_allreduce(c, v, v, SMALL, HOOP_UINT32, HOOP_SUM);
    CHECK(rc != HOOP_OK, "the old communicator's call after the survivors shrank succeeded");
    CHECK(hoop_comm_last_error(c)[0] != '\0', "its error has no sentence");
    double t = now_s();
    hoop_comm_t *nc = NULL;
    rc = hoop_comm_shrink(c, &nc);
    double took = now_s() - t;
    CHECK(rc != HOOP_OK && nc == NULL, "the stopped rank's shrink gave %s and %s",
          hoop_error_string(rc), nc ? "a communicator" : "none");
    CHECK(took < timeout_s + 1, "its shrink took %.2f s", took);
    printf("rank %d (continued): old call and shrink failed as they must: %s\n", me,
           hoop_comm_last_error(c));
    if (nc != NULL) hoop_comm_destroy(nc);
    hoop_comm_destroy(c);
    return 0;
}

static int child(int me, int port, int go_fd)
{
    test_rank = me;
    char tb[32];
    snprintf(tb, sizeof(tb), "%g", timeout_s);
    setenv("HOOP_TIMEOUT", tb, 1);
    /* mixed: two fake hosts by rank parity, shared memory inside each and TCP between. */
    int mixed = strcmp(transport, "mixed") == 0;
    setenv("HOOP_TRANSPORT", mixed ? "auto" : transport, 1);
    if (mixed) {
        char host[32];
        snprintf(host, sizeof(host), "shrink-host-%d", me % 2);
        setenv("HOOP_HOSTID", host, 1);
    }
    char job[32];
    snprintf(job, sizeof(job), "shrink-%d", port);
    setenv("HOOP_JOB_ID", job, 1);
    char method[64];
    snprintf(method, sizeof(method), "tcp://127.0.0.1:%d", port);
    hoop_comm_t *c = NULL;
    hoop_result_t rc = hoop_init(&c, method, me, ranks);
    if (rc != HOOP_OK) {
        if (rc == HOOP_ERR_INVALID_ARGUMENT || rc == HOOP_ERR_UNSUPPORTED) return 77;
        printf("FAIL: rank %d: hoop_init: %s\n", me, hoop_error_string(rc));
        return 1;
    }
    uint32_t *v = malloc(BIG * sizeof(*v));
    if (v == NULL) return 1;
    for (size_t i = 0; i < BIG; i++) v[i] = value(me, i, 0);
    rc = hoop_allreduce(c, v, v, BIG, HOOP_UINT32, HOOP_SUM);
    CHECK(rc == HOOP_OK, "warm-up all-reduce: %s", hoop_error_string(rc));

    /* split: the victims die and the survivors shrink a split's communicator (all of the ranks,
     * in the parent's order), then the parent. */
    hoop_comm_t *w = c, *sc = NULL;
    if (strcmp(mode, "split") == 0) {
        rc = hoop_comm_split(c, 0, me, &sc);
        CHECK(rc == HOOP_OK && sc != NULL, "split: %s", hoop_error_string(rc));
        if (sc == NULL) return 1;
        rc = hoop_allreduce(sc, v, v, BIG, HOOP_UINT32, HOOP_SUM);
        CHECK(rc == HOOP_OK, "warm-up all-reduce on the split: %s", hoop_error_string(rc));
        w = sc;
    }
    int healthy = strcmp(mode, "exclude") == 0 || strcmp(mode, "mismatch") == 0;
    if (healthy) {
        int list[MAX_RANKS], n = nvictims;
        memcpy(list, victims, sizeof(list));
        if (strcmp(mode, "mismatch") == 0 && me == 0) n--; /* rank 0 leaves one out */
        hoop_comm_t *nc = NULL;
        rc = hoop_comm_shrink_exclude(c, list, n, &nc);
        int excluded = 0;
        for (int i = 0; i < n; i++) excluded |= list[i] == me;
        if (excluded) {
            CHECK(rc == HOOP_OK && nc == NULL, "an excluded rank got %s and %s",
                  hoop_error_string(rc), nc ? "a communicator" : "none");
        } else if (strcmp(mode, "mismatch") == 0) {
            CHECK(rc == HOOP_ERR_MISMATCH && nc == NULL,
                  "shrink with different exclude lists gave %s (want HOOP_ERR_MISMATCH): %s",
                  hoop_error_string(rc), hoop_comm_last_error(c));
        } else {
            CHECK(rc == HOOP_OK && nc != NULL, "shrink_exclude: %s: %s", hoop_error_string(rc),
                  hoop_comm_last_error(c));
            if (nc != NULL) check_new(nc, me, 1);
        }
        if (nc != NULL) hoop_comm_destroy(nc);
        hoop_comm_destroy(c);
        free(v);
        return test_failures ? 1 : 0;
    }

    int stop = strcmp(mode, "stop") == 0;
    /* A victim's end waits until every survivor is through the warm-up: else a survivor could
     * still be finishing it as the victim goes (a failure, but not the one tested here). */
    if (!is_victim(me)) report("W %d", me);
    if (is_victim(me)) {
        char b;
        struct pollfd pf = {.fd = go_fd, .events = POLLIN};
        CHECK(poll(&pf, 1, (int)(timeout_s * 4000)) == 1 && read(go_fd, &b, 1) == 1,
              "no word from the test after the warm-up");
        if (stop) {
            report("K %.6f", now_s());
            raise(SIGSTOP);
            free(v);
            return stopped_victim(c, me);
        }
        if (strcmp(when, "during") == 0) {
            pthread_t th;
            pthread_create(&th, NULL, killer, NULL);
            for (;;) (void)hoop_allreduce(w, v, v, BIG, HOOP_UINT32, HOOP_SUM);
        }
        report("K %.6f", now_s());
        raise(SIGKILL);
    }
    /* A survivor: calls until one fails (the first, between collectives). */
    int calls = 0;
    do {
        rc = hoop_allreduce(w, v, v, BIG, HOOP_UINT32, HOOP_SUM);
        calls++;
    } while (rc == HOOP_OK && calls < 10000);
    CHECK(rc != HOOP_OK, "no call failed after the victims' end");
    hoop_comm_t *nc = NULL;
    rc = hoop_comm_shrink(w, &nc);
    CHECK(rc == HOOP_OK && nc != NULL, "shrink: %s: %s", hoop_error_string(rc),
          hoop_comm_last_error(w));
    if (nc != NULL) {
        check_new(nc, me, 1);
        report("T %.6f %d", now_s(), me);
    }
    if (sc != NULL) {
        /* The parent lost the same ranks: it shrinks too, beside the split's. */
        hoop_comm_t *pc = NULL;
        rc = hoop_comm_shrink(c, &pc);
        CHECK(rc == HOOP_OK && pc != NULL, "shrink of the parent: %s: %s", hoop_error_string(rc),
              hoop_comm_last_error(c));
        if (pc != NULL) check_new(pc, me, 2);
        if (pc != NULL) hoop_comm_destroy(pc);
        hoop_comm_destroy(sc);
    }
    if (stop) {
        /* The victim is continued now; the new communicator must not see it. */
        report("S %d", me);
        char b;
        struct pollfd pf = {.fd = go_fd, .events = POLLIN};
        CHECK(poll(&pf, 1, (int)(timeout_s * 4000)) == 1 && read(go_fd, &b, 1) == 1,
              "no word from the test after the stopped rank went on");
        if (nc != NULL) check_new(nc, me, 2);
    }
    if (nc != NULL) hoop_comm_destroy(nc);
    hoop_comm_destroy(c);
    free(v);
    return test_failures ? 1 : 0;
}

/* One job; the time from the kill to the slowest survivor's checked all-reduce into *took. */
static int run_once(double *took)
{
    int port = test_free_port();
    int rp[2];
    if (port < 0 || pipe(rp) != 0) return 1;
    pid_t pid[MAX_RANKS];
    int go[MAX_RANKS][2];
    fflush(stdout);
    for (int r = 0; r < ranks; r++) {
        if (pipe(go[r]) != 0) return 1;
        pid[r] = fork();
        if (pid[r] == 0) {
            /* The library must never raise SIGPIPE: the ranks keep its default action. */
            signal(SIGPIPE, SIG_DFL);
            close(rp[0]);
            report_fd = rp[1];
            int st = child(r, port, go[r][0]);
            fflush(stdout);
            exit(st); /* exit, not _exit: a sanitizer build checks for leaks */
        }
        close(go[r][0]);
    }
    close(rp[1]);
    FILE *in = fdopen(rp[0], "r");
    double t_kill = 0, t_done = 0;
    int survivors_stopped = 0, warmed = 0, want_s = ranks - nvictims, fail = 0;
    int stop = strcmp(mode, "stop") == 0;
    char line[256];
    double give_up = now_s() + 6 * timeout_s + 20;
    while (fgets(line, sizeof(line), in) != NULL) {
        double t;
        if (sscanf(line, "K %lf", &t) == 1 && (t_kill == 0 || t < t_kill)) t_kill = t;
        if (sscanf(line, "T %lf", &t) == 1 && t > t_done) t_done = t;
        if (line[0] == 'W' && ++warmed == want_s)
            for (int r = 0; r < ranks; r++)
                if (is_victim(r) && write(go[r][1], "g", 1) != 1) fail = 1;
        if (line[0] == 'S' && ++survivors_stopped == want_s && stop) {
            /* Every survivor has shrunk: the stopped ranks go on, together, and once they are
             * through, the survivors run their second call. */
            for (int i = 0; i < nvictims; i++) kill(pid[victims[i]], SIGCONT);
            for (int i = 0; i < nvictims; i++) {
                int st = 0, v = victims[i];
                while (waitpid(pid[v], &st, 0) < 0 && errno == EINTR) {
                }
                pid[v] = -1;
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                    printf("FAIL: the continued rank %d ended with status %d\n", v, st);
                    fail = 1;
                }
            }
            for (int r = 0; r < ranks; r++)
                if (!is_victim(r) && write(go[r][1], "g", 1) != 1) fail = 1;
        }
        if (now_s() > give_up) break;
    }
    fclose(in);
    int skipped = 0;
    for (int r = 0; r < ranks; r++) {
        if (pid[r] < 0) continue;
        int st = 0;
        while (waitpid(pid[r], &st, 0) < 0 && errno == EINTR) {
        }
        close(go[r][1]);
        int killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 77) skipped = 1;
        if ((strcmp(mode, "kill") == 0 || strcmp(mode, "split") == 0) && is_victim(r)) {
            if (!killed) fail = 1;
        } else if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 77)) {
            printf("FAIL: rank %d ended with status %d\n", r, st);
            fail = 1;
        }
    }
    if (skipped) return 77;
    *took = t_kill > 0 && t_done > 0 ? t_done - t_kill : -1;
    return fail;
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--transport") == 0)
            transport = argv[i + 1];
        else if (strcmp(argv[i], "--ranks") == 0)
            ranks = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--mode") == 0)
            mode = argv[i + 1];
        else if (strcmp(argv[i], "--when") == 0)
            when = argv[i + 1];
        else if (strcmp(argv[i], "--timeout") == 0)
            timeout_s = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--repeat") == 0)
            repeat = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--victims") == 0) {
            for (char *p = argv[i + 1]; *p && nvictims < MAX_RANKS;) {
                victims[nvictims++] = (int)strtol(p, &p, 10);
                if (*p == ',') p++;
            }
        } else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (ranks < 2 || ranks > MAX_RANKS || nvictims < 1 || nvictims >= ranks) return 2;
    signal(SIGPIPE, SIG_IGN);
    double *took = calloc((size_t)repeat, sizeof(double));
    if (took == NULL) return 1;
    for (int k = 0; k < repeat; k++) {
        int rc = run_once(&took[k]);
        if (rc == 77) {
            printf("SKIP: this build of hoop does not accept HOOP_TRANSPORT=%s\n", transport);
            return 77;
        }
        if (rc != 0) {
            printf("FAIL: %s %s, %d ranks, victims %d..., transport %s, run %d\n", mode, when,
                   ranks, victims[0], transport, k);
            return 1;
        }
        if (took[k] >= 0)
            printf("run %d: %d ranks, %s: kill to a checked all-reduce of the survivors: %.3f s\n",
                   k, ranks, transport, took[k]);
    }
    printf("PASS\n");
    free(took);
    return 0;
}
