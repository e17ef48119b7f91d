/* Helpers the tests share (header-only, so each test program stays one file to build). */
#ifndef HOOP_TESTING_H
#define HOOP_TESTING_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../common/clock.h" /* now_s(), for deadlines and the times tests report */
#include "../../src/base/port.h"
#include "hoop.h"

/* Binds loopback port (0: the kernel's choice) and lets it go: the port it got, or -1. */
static inline int test_probe_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)port)};
    socklen_t len = sizeof a;
    int got = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        got = ntohs(a.sin_port);
    close(fd);
    return got;
}

/* A loopback TCP port that was free a moment ago (for MASTER_PORT), or -1; drawn below the
 * ephemeral range (src/base/port.h, the library's own draw), where no test's connect() beside this one can take it. */
static inline int test_free_port(void)
{
    hoop__port_draw_t d;
    hoop__port_draw_start(&d, 64);
    for (int port; (port = hoop__port_draw_next(&d)) > 0;)
        if (test_probe_port(port) == port) return port;
    return test_probe_port(0);
}

/* "HOOP_ERR_TIMEOUT": a result code by its name in hoop.h, for messages that quote it. */
static inline const char *test_code_name(int code)
{
    static const char *const names[] = {"HOOP_OK",
                                        "HOOP_ERR_INVALID_ARGUMENT",
                                        "HOOP_ERR_SYSTEM",
                                        "HOOP_ERR_TIMEOUT",
                                        "HOOP_ERR_PEER_LOST",
                                        "HOOP_ERR_MISMATCH",
                                        "HOOP_ERR_AUTH",
                                        "HOOP_ERR_UNSUPPORTED",
                                        "HOOP_ERR_ABORTED",
                                        "HOOP_ERR_NO_MEMORY",
                                        "HOOP_ERR_INTERNAL"};
    return code >= 0 && code <= HOOP_ERR_INTERNAL ? names[code] : "unknown";
}

/* hoop_init_from_env in a program hooprun starts: 0, or the status the program ends with, the
 * reason printed: 77 (skipped) where HOOP_TRANSPORT names a transport this build does not accept
 * (a row added for a transport to come), else 1 ("FAIL: <what>: <the error>"). */
static inline int test_init_from_env(hoop_comm_t **c, const char *what)
{
    const char *tp = getenv("HOOP_TRANSPORT");
    hoop_result_t rc = hoop_init_from_env(c);
    if (rc == HOOP_OK) return 0;
    if ((rc == HOOP_ERR_INVALID_ARGUMENT || rc == HOOP_ERR_UNSUPPORTED) && tp != NULL &&
        strcmp(tp, "tcp") != 0 && strcmp(tp, "auto") != 0) {
        printf("SKIP: this build of hoop does not accept HOOP_TRANSPORT=%s\n", tp);
        return 77;
    }
    printf("FAIL: %s: %s\n", what, hoop_error_string(rc));
    return 1;
}

/* One line to a rank's report pipe fd, its newlines turned to spaces, in one write() below
 * PIPE_BUF, which the pipe never interleaves with another rank's. A rank that cannot report ends
 * (exit status 101): its driver would read a lie by omission. */
static inline void test_vsay(int fd, const char *fmt, va_list ap)
{
    char line[3000];
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    if (n < 0) return;
    if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
    for (int i = 0; i < n; i++)
        if (line[i] == '\n') line[i] = ' ';
    line[n++] = '\n';
    if (write(fd, line, (size_t)n) != n) _exit(101);
}

/* "FAIL: <message>" on stdout, flushed at once (children of a test print there too). */
static inline void vsay_fail(const char *fmt, va_list ap)
{
    fputs("FAIL: ", stdout);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout);
}

/* ---- CHECK(ok, fmt, ...): the one check of the multi-process test programs ----
 * Counts a check; where ok is false, counts a failure and prints "rank R: FAIL line L (ok): <the
 * sentence>" on stdout, flushed (the first TEST_FAILS_SHOWN of them). test_rank is what the
 * program sets once it knows its rank; it reports and exits by test_failures. */
#define TEST_FAILS_SHOWN 20
static int test_rank __attribute__((unused)) = -1;
static long test_checks __attribute__((unused)), test_failures __attribute__((unused));

static inline void test_check_at(int line, const char *cond, int ok, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline void test_check_at(int line, const char *cond, int ok, const char *fmt, ...)
{
    test_checks++;
    if (ok) return;
    if (++test_failures > TEST_FAILS_SHOWN) return;
    va_list ap;
    va_start(ap, fmt);
    printf("rank %d: FAIL line %d (%s): ", test_rank, line, cond);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout);
    va_end(ap);
}
#define CHECK(ok, ...) test_check_at(__LINE__, #ok, (ok) != 0, __VA_ARGS__)
/* A failure found without one condition to name (a branch that should not be taken). */
#define TEST_FAIL(...) test_check_at(__LINE__, "failed", 0, __VA_ARGS__)

#endif
