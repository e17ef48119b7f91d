/* The library's log must never raise SIGPIPE: stderr is a pipe whose reader is gone (a launcher or
 * a pager that exited), and an init that fails logs its reason there. The process must get the
 * error code back and go on, and a SIGPIPE the program itself had pending must stay pending. */
#include <hoop.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void)
{
    int p[2];
    if (pipe(p) != 0) return 2;
    close(p[0]);
    int saved = dup(2);
    if (saved < 0 || dup2(p[1], 2) < 0) return 2;
    setenv("HOOP_TIMEOUT", "not-a-number", 1); /* init fails and says why, at WARN */
    hoop_comm_t *c = NULL;
    hoop_result_t rc = hoop_init_from_env(&c);
    dup2(saved, 2);
    if (rc != HOOP_ERR_INVALID_ARGUMENT) {
        fprintf(stderr, "FAIL: hoop_init returned %s, expected invalid argument\n",
                hoop_error_string(rc));
        return 1;
    }
    /* A SIGPIPE of the program's own, blocked and pending, is left alone by the log. */
    sigset_t set, pending;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigprocmask(SIG_BLOCK, &set, NULL);
    raise(SIGPIPE);
    dup2(p[1], 2);
    rc = hoop_init_from_env(&c);
    dup2(saved, 2);
    sigpending(&pending);
    if (!sigismember(&pending, SIGPIPE)) {
        fprintf(stderr, "FAIL: the program's own pending SIGPIPE was taken\n");
        return 1;
    }
    printf("PASS: the failed init's log line went to a closed pipe without a signal\n");
    return 0;
}
