/*
 * File-descriptor exhaustion. The driver starts N ranks (default 8) under a small RLIMIT_NOFILE
 * (default 64, as `ulimit -n 64` does), each with HOOP_TIMEOUT=20; every rank initialises, then
 * splits its communicator again and again, keeping every child, until a call fails. Every rank
 * must then fail within 5 s (no wait for the timeout, no busy loop), by itself, and its message or
 * its log must say "Too many open files" and that `ulimit -n` is what to raise.
 *
 *   fdlimit [--ranks N] [--limit L] [--transport T] [--hosts ID,ID,...]
 *
 * --hosts gives rank r the r-th HOOP_HOSTID (fake hosts: shared memory and TCP mixed). Every rank
 * authenticates with one key, as under hooprun.
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"
#include "../common/testing.h"

#define MAX_RANKS 16
#define MAX_SPLITS 200
#define TIMEOUT_S "20"
#define LIMIT_S 5.0 /* seconds from the start to the last rank's exit */

/* A rank: prints one line, "rank R: <call> failed after N splits: <code>: <message>". */
static int rank_main(void)
{
    int rank = atoi(getenv("RANK"));
    hoop_comm_t *c = NULL, *kids[MAX_SPLITS];
    hoop_result_t rc = hoop_init_from_env(&c);
    if (rc != HOOP_OK) {
        /* hoop_init's sentence is in the log (stderr). */
        printf("rank %d: hoop_init failed: %s\n", rank, hoop_error_string(rc));
        return 0;
    }
    int n = 0;
    while (n < MAX_SPLITS && (rc = hoop_comm_split(c, 0, rank, &kids[n])) == HOOP_OK) n++;
    if (rc == HOOP_OK)
        printf("rank %d: no failure after %d splits\n", rank, n);
    else
        printf("rank %d: hoop_comm_split failed after %d splits: %s: %s\n", rank, n,
               hoop_error_string(rc), hoop_comm_last_error(c));
    fflush(stdout);
    for (int i = 0; i < n; i++) hoop_comm_destroy(kids[i]);
    hoop_comm_destroy(c);
    return rc == HOOP_OK;
}

/* Item i of a comma-separated list into out. */
static void list_item(const char *list, int i, char *out, size_t n)
{
    for (int k = 0;; k++) {
        size_t len = strcspn(list, ",");
        if (k == i) {
            snprintf(out, n, "%.*s", (int)len, list);
            return;
        }
        if (list[len] == '\0') {
            snprintf(out, n, "%s", "");
            return;
        }
        list += len + 1;
    }
}

static int file_has(const char *path, const char *a, const char *b)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    char line[2048];
    int hit = 0;
    while (!hit && fgets(line, sizeof line, f) != NULL) hit = strstr(line, a) && strstr(line, b);
    fclose(f);
    return hit;
}

static void print_file(const char *path, int rank)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    char line[2048];
    while (fgets(line, sizeof line, f) != NULL) printf("  [%d] %s", rank, line);
    fclose(f);
}

int main(int argc, char **argv)
{
    if (getenv("FDLIMIT_RANK") != NULL) return rank_main();
    int ranks = 8;
    long limit = 64;
    const char *transport = "auto", *hosts = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--ranks") == 0)
            ranks = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--limit") == 0)
            limit = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--transport") == 0)
            transport = argv[i + 1];
        else if (strcmp(argv[i], "--hosts") == 0)
            hosts = argv[i + 1];
        else
            return fprintf(stderr, "fdlimit: unknown option %s\n", argv[i]), 2;
    }
    if (ranks < 2 || ranks > MAX_RANKS || limit < 16) return 2;
    char dir[] = "/tmp/hoop-fdlimit-XXXXXX", v[64];
    if (mkdtemp(dir) == NULL) return 2;
    int port = test_free_port();
    printf("fdlimit: %d ranks, RLIMIT_NOFILE %ld, HOOP_TRANSPORT=%s%s%s, HOOP_TIMEOUT=%s\n", ranks,
           limit, transport, hosts ? ", HOOP_HOSTID " : "", hosts ? hosts : "", TIMEOUT_S);
    fflush(stdout);
    pid_t pid[MAX_RANKS];
    double t0 = now_s();
    for (int q = 0; q < ranks; q++) {
        pid[q] = fork();
        if (pid[q] < 0) return 2;
        if (pid[q] > 0) continue;
        char out[128], err[128];
        snprintf(out, sizeof out, "%s/rank%d.out", dir, q);
        snprintf(err, sizeof err, "%s/rank%d.log", dir, q);
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600),
            e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(126);
        close(o);
        close(e);
        setenv("FDLIMIT_RANK", "1", 1);
        snprintf(v, sizeof v, "%d", q);
        setenv("RANK", v, 1);
        snprintf(v, sizeof v, "%d", ranks);
        setenv("WORLD_SIZE", v, 1);
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        snprintf(v, sizeof v, "%d", port);
        setenv("MASTER_PORT", v, 1);
        setenv("HOOP_TRANSPORT", transport, 1);
        setenv("HOOP_TIMEOUT", TIMEOUT_S, 1);
        setenv("HOOP_AUTH_KEY", "fdlimit test key", 1);
        if (hosts != NULL) {
            list_item(hosts, q, v, sizeof v);
            setenv("HOOP_HOSTID", v, 1);
        }
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(126);
        rl.rlim_cur = (rlim_t)limit;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(126);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int failures = 0, status[MAX_RANKS], left = ranks;
    double t_exit[MAX_RANKS];
    for (int q = 0; q < ranks; q++) status[q] = -1;
    while (left > 0 && now_s() - t0 < 60) {
        for (int q = 0; q < ranks; q++) {
            if (status[q] != -1) continue;
            int st;
            if (waitpid(pid[q], &st, WNOHANG) == pid[q]) {
                status[q] = st;
                t_exit[q] = now_s() - t0;
                left--;
            }
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (int q = 0; q < ranks; q++) {
        char out[128], err[128];
        snprintf(out, sizeof out, "%s/rank%d.out", dir, q);
        snprintf(err, sizeof err, "%s/rank%d.log", dir, q);
        if (status[q] == -1) {
            printf("FAIL: rank %d still running after 60 s; killing it\n", q);
            kill(pid[q], SIGKILL);
            waitpid(pid[q], &status[q], 0);
            failures++;
            continue;
        }
        print_file(out, q);
        int says = (file_has(out, "Too many open files", "ulimit -n") ||
                    file_has(err, "Too many open files", "ulimit -n"));
        if (WIFSIGNALED(status[q])) {
            printf("FAIL: rank %d died of signal %d\n", q, WTERMSIG(status[q]));
            failures++;
        } else if (WEXITSTATUS(status[q]) != 0) {
            printf("FAIL: rank %d exited with status %d (no failure: the limit is too high?)\n", q,
                   WEXITSTATUS(status[q]));
            failures++;
        }
        if (!says) {
            printf("FAIL: rank %d does not say \"Too many open files\" and \"ulimit -n\"\n", q);
            failures++;
        }
        if (t_exit[q] > LIMIT_S) {
            printf("FAIL: rank %d ended %.2f s after the start (limit %.0f s, timeout %s s)\n", q,
                   t_exit[q], LIMIT_S, TIMEOUT_S);
            failures++;
        }
    }
    double last = 0;
    for (int q = 0; q < ranks; q++) last = t_exit[q] > last ? t_exit[q] : last;
    for (int q = 0; q < ranks && failures > 0; q++) {
        char err[128];
        snprintf(err, sizeof err, "%s/rank%d.log", dir, q);
        print_file(err, q);
    }
    for (int q = 0; q < ranks; q++) {
        char path[128];
        snprintf(path, sizeof path, "%s/rank%d.out", dir, q);
        unlink(path);
        snprintf(path, sizeof path, "%s/rank%d.log", dir, q);
        unlink(path);
    }
    rmdir(dir);
    printf("%s: the last rank ended %.2f s after the start\n", failures ? "FAILED" : "PASSED",
           last);
    return failures ? 1 : 0;
}
