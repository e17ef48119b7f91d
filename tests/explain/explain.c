/*
 * One rank of a job whose call cannot complete, for check.py (which starts the ranks itself, so
 * that a rank may be stopped or killed without the job being ended by a launcher).
 *
 *   explain --scenario S --victim V [--calls N] [--at K]
 *
 * Every rank makes N all-reduces of 1000 float32 (checked against the sum computed here); rank V,
 * at call K, instead:
 *   skip  sleeps in its own code for HOOP_TIMEOUT + 3 s, then leaves
 *   stop  stops itself (SIGSTOP); check.py continues it once the others are done
 *   kill  kills itself (SIGKILL)
 * The others' call K fails; each prints on stdout
 *   RESULT rank=R call=K rc=NAME waited=W past=T t0=E t1=F
 * (W: seconds in the call; T: seconds from its timeout, entry + HOOP_TIMEOUT, to the return, which
 * comes after the explanation; E, F: entry and return on the monotonic clock, the same for every
 * rank of the host) and
 *   LASTERROR rank=R <hoop_comm_last_error()>
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoop.h"
#include "../common/testing.h"

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    const char *scen = "skip";
    int victim = 1, calls = 6, at = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--scenario") == 0)
            scen = argv[i + 1];
        else if (strcmp(argv[i], "--victim") == 0)
            victim = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--calls") == 0)
            calls = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--at") == 0)
            at = atoi(argv[i + 1]);
    }
    const char *t = getenv("HOOP_TIMEOUT");
    double timeout = t != NULL ? atof(t) : 300;
    hoop_comm_t *comm = NULL;
    if (hoop_init_from_env(&comm) != HOOP_OK) {
        printf("INITFAILED\n");
        return 1;
    }
    int r = hoop_comm_rank(comm), p = hoop_comm_size(comm);
    enum { N = 1000 };
    static float buf[N];
    for (int i = 0; i < calls; i++) {
        if (i == at && r == victim) {
            fflush(stdout);
            if (strcmp(scen, "skip") == 0) {
                /* Back after the others gave up: what its next call returns is not this test's
                 * (docs/reliability.md, "A rank that arrives after its peers gave up"). */
                sleep_s(timeout + 3);
                break;
            } else if (strcmp(scen, "stop") == 0) {
                raise(SIGSTOP);
                break; /* continued after the others gave up: as skip */
            } else if (strcmp(scen, "kill") == 0) {
                raise(SIGKILL);
            }
            continue;
        }
        for (int k = 0; k < N; k++) buf[k] = (float)(r + k % 7 + i);
        double t0 = now_s();
        hoop_result_t rc = hoop_allreduce(comm, buf, buf, N, HOOP_FLOAT32, HOOP_SUM);
        double t1 = now_s();
        if (rc != HOOP_OK) {
            if (r == victim) break; /* its next call, after the others gave up */
            printf("RESULT rank=%d call=%d rc=%s waited=%.3f past=%.3f t0=%.6f t1=%.6f\n", r, i,
                   test_code_name(rc), t1 - t0, t1 - t0 - timeout, t0, t1);
            printf("LASTERROR rank=%d %s\n", r, hoop_comm_last_error(comm));
            fflush(stdout);
            /* Still there while the others ask where it is (one that has gone reads as dead). */
            sleep_s(1.5);
            break;
        }
        /* sum over ranks of (r + k%7 + i) */
        for (int k = 0; k < N; k++) {
            float want = (float)(p * (p - 1) / 2 + p * (k % 7 + i));
            if (buf[k] != want) {
                printf("WRONG rank=%d call=%d element=%d got=%g want=%g\n", r, i, k, buf[k], want);
                return 1;
            }
        }
    }
    hoop_comm_destroy(comm);
    return 0;
}
