/*
 * A stranger at a shrink listener: someone who knows a communicator's id and a rank's shrink
 * address (both cross the network in the clear) but not HOOP_AUTH_KEY. Three ranks over TCP
 * shrink with rank 2 excluded; rank 0 then plays the stranger against rank 1's old listener,
 * which answers SHRUNK to any rank that was left out and asks later: a JOIN with the right magic
 * and id, sent without the key's handshake. Under a key the listener must not answer it; without
 * one (--no-key, the control that shows the test can see an answer) it does. Either way the
 * survivors' communicator must work: its all-reduce is checked.
 *
 *   stranger [--no-key]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/testing.h"
#include "base/clock.h"
#include "base/sock.h"
#include "core/shrink.h"
#include "hoop.h"

#define RANKS 3

static int no_key;

/* 1 when rank 1's old listener answered the stranger's JOIN with SHRUNK. */
static int knock(hoop_comm_t *c)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (hoop__sock_parse(c->shrink_addrs[1], &ss, &sl) != 0) return -1;
    int fd = hoop__sock_stream(ss.ss_family);
    double dl = hoop__now() + 2;
    if (fd < 0) return -1;
    if (hoop__sock_connect(fd, (struct sockaddr *)&ss, sl, dl) != 0) {
        close(fd);
        return -1;
    }
    hoop__smsg_t m = {
        .magic = HOOP__SHRINK_MAGIC, .comm_id = c->id, .type = HOOP__SM_JOIN, .rank = 2};
    int answered = 0;
    if (hoop__sock_io(fd, &m, sizeof(m), HOOP__SOCK_SEND, dl) == HOOP__SOCK_DONE) {
        memset(&m, 0, sizeof(m));
        answered = hoop__sock_io(fd, &m, sizeof(m), 0, dl) == HOOP__SOCK_DONE &&
                   m.magic == HOOP__SHRINK_MAGIC && m.type == HOOP__SM_SHRUNK;
    }
    close(fd);
    return answered;
}

static int child(int me, int port)
{
    test_rank = me;
    setenv("HOOP_TRANSPORT", "tcp", 1);
    setenv("HOOP_TIMEOUT", "10", 1);
    char job[32], method[64];
    snprintf(job, sizeof(job), "stranger-%d", port);
    setenv("HOOP_JOB_ID", job, 1);
    if (no_key)
        unsetenv("HOOP_AUTH_KEY");
    else
        setenv("HOOP_AUTH_KEY", "a shrink listener's test key", 1);
    snprintf(method, sizeof(method), "tcp://127.0.0.1:%d", port);
    hoop_comm_t *c = NULL;
    hoop_result_t rc = hoop_init(&c, method, me, RANKS);
    if (rc != HOOP_OK) {
        printf("FAIL: rank %d: hoop_init: %s\n", me, hoop_error_string(rc));
        return 1;
    }
    int out = 2;
    hoop_comm_t *nc = NULL;
    rc = hoop_comm_shrink_exclude(c, &out, 1, &nc);
    CHECK(rc == HOOP_OK, "shrink: %s: %s", hoop_error_string(rc), hoop_comm_last_error(c));
    if (me == 2) {
        CHECK(nc == NULL, "the excluded rank got a communicator");
    } else if (nc != NULL) {
        if (me == 0) {
            int a = knock(c);
            CHECK(a >= 0, "could not reach rank 1's old shrink listener");
            if (no_key)
                CHECK(a == 1, "without a key the listener did not answer (the test sees nothing)");
            else
                CHECK(a == 0, "under HOOP_AUTH_KEY the listener answered a stranger");
        }
        /* rank 1 keeps its old listener until rank 0 has knocked */
        uint32_t x = (uint32_t)me + 1;
        rc = hoop_allreduce(nc, &x, &x, 1, HOOP_UINT32, HOOP_SUM);
        CHECK(rc == HOOP_OK && x == 3, "the survivors' all-reduce: %s, %u (want 3)",
              hoop_error_string(rc), x);
        hoop_comm_destroy(nc);
    } else {
        CHECK(0, "a survivor got no communicator");
    }
    hoop_comm_destroy(c);
    return test_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    no_key = argc > 1 && strcmp(argv[1], "--no-key") == 0;
    int port = test_free_port();
    if (port < 0) return 1;
    pid_t pid[RANKS];
    fflush(stdout);
    for (int r = 0; r < RANKS; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            int st = child(r, port);
            fflush(stdout);
            exit(st);
        }
    }
    int fail = 0;
    for (int r = 0; r < RANKS; r++) {
        int st = 0;
        if (waitpid(pid[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("FAIL: rank %d ended with status %d\n", r, st);
            fail = 1;
        }
    }
    printf("%s\n", fail ? "FAIL" : "PASS");
    return fail;
}
