/*
 * A rank for the hooprun tests: each mode shows one behaviour the tests then check from outside.
 *
 *   env                     one line with the launcher variables (and how many are duplicated)
 *   args ARG...             one line per argument
 *   pgrp                    its pid and process group
 *   lines K                 K numbered lines on stdout and on stderr, each written in two pieces
 *   partial                 a last line without newline, on stdout and stderr
 *   long BYTES              one line of BYTES letters, then "after"
 *   bigline BYTES           on stdout one line of BYTES letters, then "tail R" without newline;
 *                           on stderr "errtail R" without newline
 *   fail R CODE             rank R exits CODE after 300 ms; the others sleep 60 s
 *   selfkill R              rank R kills itself with SIGKILL after 300 ms; the others sleep 60 s
 *   stubborn R CODE         like fail, but the others ignore SIGTERM
 *   fail-when FILE CODE R.. ranks R.. exit CODE once FILE exists (looked for every 10 ms, for
 *                           at most 30 s); the others sleep 60 s
 *   wait-signal [MS]        waits up to 30 s for SIGTERM/SIGHUP/SIGINT and reports which came;
 *                           then takes MS ms to exit 0, as a rank that saves its state would
 *   deaf                    ignores SIGINT, SIGTERM and SIGHUP, says "ready", sleeps 60 s
 *   strays CODE R [FILE]    leaves four processes behind, each reported as "rank R stray P":
 *                           a child in the job's process group with a grandchild, and a child
 *                           in a session of its own (without the job's pipes) with a grandchild,
 *                           both ignoring SIGTERM; all sleep 60 s. Then rank R (every rank if R is
 *                           -1) exits CODE (once FILE exists, if given: looked for every 10 ms,
 *                           for at most 30 s), the others sleep 60 s
 *   holder SOCK HOLD_MS     outside the job: listens on the unix socket SOCK, says "ready", and
 *                           keeps each listening socket a rank hands it for HOLD_MS ms, one at a
 *                           time; exits after two, or after 30 s without one
 *   sleep S                 says "ready", then sleeps S seconds
 *   flaky R [SOCK]          reports its restart counts and MASTER_PORT; while HOOP_RESTART_COUNT < 2
 *                           rank R exits 3 after 200 ms and the others sleep 10 s. Rank 0 (if not R)
 *                           first listens on MASTER_PORT, as a rendezvous store would, and exits 4
 *                           if it cannot; with SOCK, on a failing attempt, it hands its listening
 *                           socket to the holder there (outside the job), which keeps the port
 *
 * Ranks that start long sleeps first print "rank R pid P" so the tests can check they are gone.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static void out(int fd, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, buf + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) exit(90);
        off += (size_t)w;
    }
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int my_rank(void)
{
    const char *r = getenv("RANK");
    return r ? atoi(r) : -1;
}

static const char *var(const char *name)
{
    const char *v = getenv(name);
    return v ? v : "(unset)";
}

static int mode_env(void)
{
    static const char *const names[] = {
        "RANK",      "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE", "GROUP_RANK",
        "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "HOOP_LAUNCHER"};
    int dups = 0;
    for (size_t v = 0; v < sizeof names / sizeof names[0]; v++) {
        int seen = 0;
        size_t len = strlen(names[v]);
        for (char **e = environ; *e != NULL; e++)
            if (strncmp(*e, names[v], len) == 0 && (*e)[len] == '=') seen++;
        if (seen > 1) dups += seen - 1;
    }
    out(1,
        "RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s GROUP_RANK=%s NODE_RANK=%s "
        "MASTER_ADDR=%s MASTER_PORT=%s HOOP_LAUNCHER=%s dups=%d\n",
        var("RANK"), var("WORLD_SIZE"), var("LOCAL_RANK"), var("LOCAL_WORLD_SIZE"),
        var("GROUP_RANK"), var("NODE_RANK"), var("MASTER_ADDR"), var("MASTER_PORT"),
        var("HOOP_LAUNCHER"), dups);
    return 0;
}

/* Two writes per line, with a yield between, so the launcher sees pieces of lines. */
static int mode_lines(int k)
{
    int r = my_rank();
    for (int i = 0; i < k; i++) {
        out(1, "rank %d ", r);
        sched_yield();
        out(1, "line %d\n", i);
        out(2, "rank %d e", r);
        sched_yield();
        out(2, "rr %d\n", i);
    }
    return 0;
}

static int mode_long(long bytes)
{
    char c = (char)('a' + my_rank() % 26);
    char chunk[4096];
    memset(chunk, c, sizeof chunk);
    for (long done = 0; done < bytes;) {
        long n = bytes - done < (long)sizeof chunk ? bytes - done : (long)sizeof chunk;
        ssize_t w = write(1, chunk, (size_t)n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return 90;
        done += w;
    }
    out(1, "\nafter\n");
    return 0;
}

static int mode_fail(int bad, int code, int how)
{
    int r = my_rank();
    out(1, "rank %d pid %ld\n", r, (long)getpid());
    if (r == bad) {
        sleep_ms(300);
        if (how == 1) raise(SIGKILL);
        return code;
    }
    if (how == 2) signal(SIGTERM, SIG_IGN);
    sleep_ms(60000);
    return 0;
}

static int mode_fail_when(const char *file, int code, char **bad, int nbad)
{
    int r = my_rank();
    out(1, "rank %d pid %ld\n", r, (long)getpid());
    for (int i = 0; i < nbad; i++) {
        if (atoi(bad[i]) != r) continue;
        for (int t = 0; t < 3000 && access(file, F_OK) != 0; t++) sleep_ms(10);
        return code;
    }
    sleep_ms(60000);
    return 0;
}

static int mode_wait_signal(long linger_ms)
{
    int r = my_rank();
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    out(1, "rank %d ready pid %ld\n", r, (long)getpid());
    struct timespec limit = {.tv_sec = 30, .tv_nsec = 0};
    int sig;
    do {
        sig = sigtimedwait(&set, NULL, &limit);
    } while (sig < 0 && errno == EINTR);
    if (sig < 0) {
        out(1, "rank %d no signal\n", r);
        return 1;
    }
    out(1, "rank %d got signal %d\n", r, sig);
    sleep_ms(linger_ms);
    return 0;
}

/* Listens on 127.0.0.1:MASTER_PORT with SO_REUSEADDR, like the store; -1 if it cannot. */
static int listen_master_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_port = htons((uint16_t)atoi(var("MASTER_PORT")));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 8) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A unix socket listening at path, or connected to it; -1 if it cannot be had. */
static int unix_socket(const char *path, bool listening)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) return -1;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int rc = listening ? bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 ? listen(fd, 4) : -1
                       : connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (rc != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Hands fd to the holder at path (SCM_RIGHTS). */
static bool hand_over(const char *path, int fd)
{
    int s = unix_socket(path, false);
    if (s < 0) return false;
    char byte = 'h';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    bool ok = sendmsg(s, &msg, 0) == 1;
    /* Wait for the holder's answer, so that the socket is its own before this rank goes on. */
    ok = ok && read(s, &byte, 1) == 1;
    close(s);
    return ok;
}

static int mode_holder(const char *path, long hold_ms)
{
    int ls = unix_socket(path, true);
    if (ls < 0) {
        out(2, "holder: cannot listen on %s: %s\n", path, strerror(errno));
        return 1;
    }
    out(1, "ready\n");
    for (int held = 0; held < 2;) {
        struct pollfd p = {.fd = ls, .events = POLLIN};
        if (poll(&p, 1, 30000) <= 0) break;
        int s = accept(ls, NULL, NULL);
        if (s < 0) continue;
        char byte;
        struct iovec iov = {.iov_base = &byte, .iov_len = 1};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = ctl.buf,
                             .msg_controllen = sizeof ctl.buf};
        int fd = -1;
        if (recvmsg(s, &msg, 0) == 1) {
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            if (c != NULL && c->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(c), sizeof fd);
        }
        (void)!write(s, "k", 1);
        close(s);
        if (fd < 0) continue;
        sleep_ms(hold_ms);
        close(fd);
        held++;
    }
    close(ls);
    unlink(path);
    return 0;
}

static int mode_flaky(int bad, const char *holder)
{
    int r = my_rank();
    const char *rc = var("HOOP_RESTART_COUNT");
    int attempt = atoi(rc);
    out(1, "rank %d restart %s torchelastic %s port %s pid %ld\n", r, rc,
        var("TORCHELASTIC_RESTART_COUNT"), var("MASTER_PORT"), (long)getpid());
    if (r == 0 && bad != 0) {
        int fd = listen_master_port();
        if (fd < 0) {
            out(1, "rank 0 restart %d cannot listen on the master port: %s\n", attempt,
                strerror(errno));
            return 4;
        }
        out(1, "rank 0 restart %d listening\n", attempt);
        /* Something outside the job keeps the port after this attempt ends: the job's own
         * processes cannot, as hooprun ends them all. */
        if (holder != NULL && attempt < 2 && !hand_over(holder, fd)) {
            out(1, "rank 0 restart %d cannot reach the holder: %s\n", attempt, strerror(errno));
            return 5;
        }
    }
    if (attempt >= 2) return 0;
    if (r == bad) {
        sleep_ms(200);
        return 3;
    }
    sleep_ms(10000);
    return 0;
}

static int mode_deaf(void)
{
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    out(1, "rank %d ready pid %ld\n", my_rank(), (long)getpid());
    sleep_ms(60000);
    return 0;
}

/* A child that sleeps 60 s after forking a grandchild that does the same; both pids go to the
 * pipe w. With own_session, the child first leaves the job's session and process group, lets go
 * of the job's output pipes and ignores SIGTERM (which the grandchild inherits). */
static void spawn_stray(int w, bool own_session)
{
    pid_t pid = fork();
    if (pid != 0) return;
    if (own_session) {
        (void)setsid();
        signal(SIGTERM, SIG_IGN);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 1);
        dup2(null, 2);
        close(null);
    }
    pid_t me = getpid();
    pid_t g = fork();
    if (g == 0) {
        close(w);
        sleep_ms(60000);
        _exit(0);
    }
    pid_t both[2] = {me, g};
    (void)!write(w, both, sizeof both);
    close(w);
    sleep_ms(60000);
    _exit(0);
}

static int mode_strays(int code, int bad, const char *file)
{
    int r = my_rank();
    int p[2];
    if (pipe(p) != 0) return 91;
    spawn_stray(p[1], false);
    spawn_stray(p[1], true);
    close(p[1]);
    pid_t pids[4];
    size_t got = 0;
    while (got < sizeof pids) {
        ssize_t n = read(p[0], (char *)pids + got, sizeof pids - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 92;
        got += (size_t)n;
    }
    close(p[0]);
    for (int i = 0; i < 4; i++) out(1, "rank %d stray %ld\n", r, (long)pids[i]);
    out(1, "rank %d pid %ld\n", r, (long)getpid());
    if (bad != -1 && bad != r) {
        sleep_ms(60000);
        return 0;
    }
    for (int t = 0; file != NULL && t < 3000 && access(file, F_OK) != 0; t++) sleep_ms(10);
    return code;
}

static int mode_bigline(long bytes)
{
    int r = my_rank();
    char c = (char)('a' + r % 26);
    char chunk[4096];
    memset(chunk, c, sizeof chunk);
    for (long done = 0; done < bytes;) {
        long n = bytes - done < (long)sizeof chunk ? bytes - done : (long)sizeof chunk;
        ssize_t w = write(1, chunk, (size_t)n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return 90;
        done += w;
    }
    out(1, "\ntail %d", r);
    out(2, "errtail %d", r);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "launcher_child: no mode\n");
        return 99;
    }
    const char *m = argv[1];
    if (strcmp(m, "env") == 0) return mode_env();
    if (strcmp(m, "args") == 0) {
        for (int i = 2; i < argc; i++) out(1, "arg=%s\n", argv[i]);
        return 0;
    }
    if (strcmp(m, "pgrp") == 0) {
        out(1, "rank %d pid %ld pgid %ld\n", my_rank(), (long)getpid(), (long)getpgid(0));
        return 0;
    }
    if (strcmp(m, "lines") == 0 && argc == 3) return mode_lines(atoi(argv[2]));
    if (strcmp(m, "partial") == 0) {
        out(1, "rank %d tail", my_rank());
        out(2, "rank %d errtail", my_rank());
        return 0;
    }
    if (strcmp(m, "long") == 0 && argc == 3) return mode_long(atol(argv[2]));
    if (strcmp(m, "fail") == 0 && argc == 4) return mode_fail(atoi(argv[2]), atoi(argv[3]), 0);
    if (strcmp(m, "selfkill") == 0 && argc == 3) return mode_fail(atoi(argv[2]), 0, 1);
    if (strcmp(m, "stubborn") == 0 && argc == 4) return mode_fail(atoi(argv[2]), atoi(argv[3]), 2);
    if (strcmp(m, "fail-when") == 0 && argc >= 5)
        return mode_fail_when(argv[2], atoi(argv[3]), argv + 4, argc - 4);
    if (strcmp(m, "wait-signal") == 0 && argc <= 3)
        return mode_wait_signal(argc == 3 ? atol(argv[2]) : 0);
    if (strcmp(m, "sleep") == 0 && argc == 3) {
        out(1, "rank %d ready pid %ld\n", my_rank(), (long)getpid());
        sleep_ms(atol(argv[2]) * 1000);
        return 0;
    }
    if (strcmp(m, "flaky") == 0 && (argc == 3 || argc == 4))
        return mode_flaky(atoi(argv[2]), argc == 4 ? argv[3] : NULL);
    if (strcmp(m, "holder") == 0 && argc == 4) return mode_holder(argv[2], atol(argv[3]));
    if (strcmp(m, "deaf") == 0) return mode_deaf();
    if (strcmp(m, "strays") == 0 && (argc == 4 || argc == 5))
        return mode_strays(atoi(argv[2]), atoi(argv[3]), argc == 5 ? argv[4] : NULL);
    if (strcmp(m, "bigline") == 0 && argc == 3) return mode_bigline(atol(argv[2]));
    fprintf(stderr, "launcher_child: bad mode '%s'\n", m);
    return 99;
}
