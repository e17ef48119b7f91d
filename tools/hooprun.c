/*
 * hooprun: start the local ranks of a hoop job.
 *
 * Sets the same variables as torchrun (RANK, WORLD_SIZE, LOCAL_RANK, ...), so programs written for
 * either launcher run under both. Output of every rank is read through pipes and written line by line
 * with a "[RANK] " prefix; the first rank to fail brings the whole job down, so a crashed rank never
 * leaves its peers blocked in a collective forever.
 *
 * Standalone: C11 + POSIX (+ signalfd and PR_SET_PDEATHSIG on Linux), no libhoop.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h" /* HOOP_VERSION_STRING only: the launcher does not link libhoop */
#include "../common/clock.h"

extern char **environ;

enum {
    LINE_CAP = 64 * 1024,       /* longest line kept whole; longer ones are split */
    SINK_CAP = 2 * LINE_CAP,    /* one prefixed line always fits after a flush */
    MAX_NPROC = 4096,
    GRACE_MS = 3000,            /* SIGTERM -> SIGKILL */
    KILL_WAIT_MS = 5000,        /* after SIGKILL, how long to wait for the kernel to reap */
    EXEC_WAIT_MS = 10000,       /* fork -> exec */
    DRAIN_MS = 2000,            /* after the last rank exits, for output still in the pipes */
    WRITE_STALL_MS = 30000,     /* our own stdout/stderr refusing data */
    POLL_CAP_MS = 1000,
    PORT_WAIT_MS = 10000,       /* before a restart, for a given master port to be free again */
    MAX_RESTARTS = 1000000,
    READS_PER_ROUND = 8,        /* fairness between chatty and quiet ranks */
};

/* ---------------------------------------------------------------------------------------------- */
/* Options                                                                                        */

struct opts {
    long nproc;
    long nnodes;
    long node_rank;
    const char *master_addr;
    char master_port[8];
    bool port_given;
    long max_restarts;
    bool prefix;
    bool no_auth;
    bool has_timeout;
    double timeout_s;
    const char *timeout_text;
    char **prog_argv;
};

static void usage(FILE *f)
{
    fputs("usage: hooprun [options] -n N PROGRAM [ARGS...]\n"
          "\n"
          "Start N local ranks of PROGRAM with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
          "GROUP_RANK, GROUP_WORLD_SIZE, NODE_RANK, MASTER_ADDR and MASTER_PORT set as torchrun\n"
          "sets them, and HOOP_LAUNCHER=hooprun.\n"
          "\n"
          "options:\n"
          "  -n, --nproc-per-node N  ranks to start on this node (required)\n"
          "  --nnodes M              nodes in the job (default 1)\n"
          "  --node-rank K           index of this node, 0..M-1 (default 0)\n"
          "  --master-addr A         address of the node of rank 0 (default 127.0.0.1)\n"
          "  --master-port P         port on the master (default: a free port; required if M > 1)\n"
          "  --max-restarts N        times to restart all ranks after a failure (default 0)\n"
          "  --timeout S             stop the job after S seconds, restarts included, and exit\n"
          "                          with status 124\n"
          "  --no-prefix             do not prefix output lines with \"[RANK] \"\n"
          "  --no-auth               no authentication key: the ranks get neither HOOP_AUTH_KEY nor\n"
          "                          HOOP_AUTH_KEY_FILE, and their connections are not authenticated\n"
          "  -h, --help              show this help and exit\n"
          "  --version               show the version and exit\n"
          "\n"
          "Options end at PROGRAM or after \"--\". The standard input of the ranks is /dev/null.\n"
          "SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every rank. When a rank fails the\n"
          "others get SIGTERM, then SIGKILL after 3 s.\n"
          "\n"
          "Unless HOOP_AUTH_KEY or HOOP_AUTH_KEY_FILE is set (then it is passed on as it is), a\n"
          "single-node job gets a fresh random key in HOOP_AUTH_KEY, so that every connection\n"
          "between its ranks proves that it belongs to the job. With --nnodes > 1 the nodes cannot\n"
          "share such a key: set the same HOOP_AUTH_KEY or HOOP_AUTH_KEY_FILE on every node.\n"
          "\n"
          "With --max-restarts, once the ranks of a failed attempt are gone all ranks start again\n"
          "with a fresh rendezvous: a new free MASTER_PORT (a given --master-port is kept, after\n"
          "waiting up to 10 s for it to be free), and HOOP_RESTART_COUNT and\n"
          "TORCHELASTIC_RESTART_COUNT set to the number of restarts so far (0 at first). A job\n"
          "stopped by a signal to hooprun, or by --timeout, is not restarted.\n"
          "\n"
          "exit status: 0 if every rank of the last attempt exits 0; else the status of the first\n"
          "rank that failed in the last attempt (128+S if it was killed by signal S); 124 on\n"
          "timeout; 126 or 127 if PROGRAM cannot be run; 2 on bad usage.\n",
          f);
}

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("hooprun: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n\n", stderr);
    va_end(ap);
    usage(stderr);
    return 2;
}

static bool parse_long(const char *s, long min, long max, long *out)
{
    if (s == NULL || *s == '\0')
        return false;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* Option names compare with '_' and '-' equivalent, so torchrun spellings (--nproc_per_node) work. */
static bool opt_is(const char *name, size_t len, const char *want)
{
    if (strlen(want) != len)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i] == '_' ? '-' : name[i];
        if (c != want[i])
            return false;
    }
    return true;
}

/* Returns -1 to go on, or an exit status (0 after --help/--version, 2 on bad usage). */
static int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){ .nproc = -1, .nnodes = 1, .node_rank = 0, .master_addr = "127.0.0.1",
                        .prefix = true };
    bool have_nproc = false;
    int i = 1;
    while (i < argc) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break;

        const char *name, *val = NULL;
        size_t nlen;
        bool inline_val = false;
        if (a[1] == '-') {
            name = a + 2;
            const char *eq = strchr(name, '=');
            nlen = eq ? (size_t)(eq - name) : strlen(name);
            if (eq) {
                val = eq + 1;
                inline_val = true;
            }
        } else {
            /* Short options: -h, -n N, -nN. */
            name = a + 1;
            nlen = 1;
            if (a[2] != '\0') {
                val = a + 2;
                inline_val = true;
            }
        }

        enum { O_NPROC, O_NNODES, O_NODE_RANK, O_ADDR, O_PORT, O_RESTARTS, O_TIMEOUT, O_NOPREFIX,
               O_NOAUTH, O_HELP, O_VERSION, O_UNKNOWN } id = O_UNKNOWN;
        bool is_short = a[1] != '-';
        if (is_short) {
            if (name[0] == 'n')
                id = O_NPROC;
            else if (name[0] == 'h' && !inline_val)
                id = O_HELP;
        } else {
            static const struct {
                const char *name;
                int id;
            } longs[] = {{"nproc-per-node", O_NPROC}, {"nnodes", O_NNODES},
                         {"node-rank", O_NODE_RANK},   {"master-addr", O_ADDR},
                         {"master-port", O_PORT},      {"max-restarts", O_RESTARTS},
                         {"timeout", O_TIMEOUT},       {"no-prefix", O_NOPREFIX},
                         {"no-auth", O_NOAUTH},        {"help", O_HELP},
                         {"version", O_VERSION}};
            for (size_t k = 0; k < sizeof(longs) / sizeof(longs[0]); k++)
                if (opt_is(name, nlen, longs[k].name)) id = longs[k].id;
        }
        if (id == O_UNKNOWN)
            return usage_error("unknown option '%s'", a);

        bool takes_value = id != O_NOPREFIX && id != O_NOAUTH && id != O_HELP && id != O_VERSION;
        if (!takes_value && inline_val)
            return usage_error("option '%s' takes no value", a);
        if (takes_value && !inline_val) {
            if (i + 1 >= argc)
                return usage_error("option '%s' needs a value", a);
            val = argv[++i];
        }
        i++;

        long v;
        switch (id) {
        case O_NPROC:
            if (!parse_long(val, 1, MAX_NPROC, &v))
                return usage_error("bad number of processes per node '%s' (want 1..%d)", val,
                                   MAX_NPROC);
            o->nproc = v;
            have_nproc = true;
            break;
        case O_NNODES:
            if (!parse_long(val, 1, INT_MAX / MAX_NPROC, &v))
                return usage_error("bad number of nodes '%s'", val);
            o->nnodes = v;
            break;
        case O_NODE_RANK:
            if (!parse_long(val, 0, INT_MAX / MAX_NPROC, &v))
                return usage_error("bad node rank '%s'", val);
            o->node_rank = v;
            break;
        case O_ADDR:
            if (*val == '\0')
                return usage_error("empty master address");
            o->master_addr = val;
            break;
        case O_PORT:
            if (!parse_long(val, 1, 65535, &v))
                return usage_error("bad master port '%s' (want 1..65535)", val);
            snprintf(o->master_port, sizeof o->master_port, "%ld", v);
            o->port_given = true;
            break;
        case O_RESTARTS:
            if (!parse_long(val, 0, MAX_RESTARTS, &v))
                return usage_error("bad number of restarts '%s' (want 0..%d)", val, MAX_RESTARTS);
            o->max_restarts = v;
            break;
        case O_TIMEOUT: {
            char *end = NULL;
            errno = 0;
            double t = *val ? strtod(val, &end) : -1.0;
            if (errno != 0 || end == NULL || *end != '\0' || !isfinite(t) || t <= 0 || t > 1e9)
                return usage_error("bad timeout '%s' (want seconds > 0)", val);
            o->timeout_s = t;
            o->timeout_text = val;
            o->has_timeout = true;
            break;
        }
        case O_NOPREFIX:
            o->prefix = false;
            break;
        case O_NOAUTH:
            o->no_auth = true;
            break;
        case O_HELP:
            usage(stdout);
            return 0;
        case O_VERSION:
            printf("hooprun (hoop) %s\n", HOOP_VERSION_STRING);
            return 0;
        case O_UNKNOWN:
            break;
        }
    }

    if (!have_nproc)
        return usage_error("the number of processes is required (-n N or --nproc-per-node N)");
    if (i >= argc)
        return usage_error("no program to run");
    if (o->node_rank >= o->nnodes)
        return usage_error("node rank %ld is out of range for %ld node(s)", o->node_rank, o->nnodes);
    if (o->nnodes > 1 && !o->port_given)
        return usage_error("--master-port is required when --nnodes is more than 1");
    if (o->nnodes * o->nproc > INT_MAX)
        return usage_error("job too large");
    o->prog_argv = argv + i;
    return -1;
}

/* ---------------------------------------------------------------------------------------------- */
/* Program lookup and master port                                                                 */

static bool is_exec_file(const char *path, int *err)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        *err = errno;
        return false;
    }
    if (S_ISDIR(st.st_mode)) {
        *err = EISDIR;
        return false;
    }
    if (access(path, X_OK) != 0) {
        *err = errno;
        return false;
    }
    return true;
}

/*
 * Resolves PROGRAM as execvp would, before anything is started, so a typo gets one clear message
 * instead of N failing ranks. Returns a malloc'ed path, or NULL with *status set (126 or 127).
 */
static char *resolve_program(const char *prog, int *status)
{
    int err = ENOENT;
    if (strchr(prog, '/') != NULL) {
        if (is_exec_file(prog, &err))
            return strdup(prog);
        fprintf(stderr, "hooprun: cannot run '%s': %s\n", prog, strerror(err));
        *status = err == ENOENT || err == ENOTDIR ? 127 : 126;
        return NULL;
    }

    const char *path = getenv("PATH");
    char defpath[256];
    if (path == NULL) {
        size_t n = confstr(_CS_PATH, defpath, sizeof defpath);
        path = n > 0 && n <= sizeof defpath ? defpath : "/bin:/usr/bin";
    }
    size_t plen = strlen(prog);
    int found_err = 0;  /* a match that exists but cannot be executed */
    for (const char *p = path;; p++) {
        const char *end = strchr(p, ':');
        size_t dlen = end ? (size_t)(end - p) : strlen(p);
        /* An empty entry means the current directory. */
        const char *dir = dlen ? p : ".";
        if (!dlen)
            dlen = 1;
        char *cand = malloc(dlen + 1 + plen + 1);
        if (cand == NULL) {
            fprintf(stderr, "hooprun: out of memory\n");
            *status = 1;
            return NULL;
        }
        memcpy(cand, dir, dlen);
        cand[dlen] = '/';
        memcpy(cand + dlen + 1, prog, plen + 1);
        if (is_exec_file(cand, &err))
            return cand;
        free(cand);
        if (err != ENOENT && err != ENOTDIR && found_err == 0)
            found_err = err;
        if (end == NULL)
            break;
        p = end;
    }
    if (found_err != 0) {
        fprintf(stderr, "hooprun: cannot run '%s': %s\n", prog, strerror(found_err));
        *status = 126;
    } else {
        fprintf(stderr, "hooprun: '%s': command not found in PATH\n", prog);
        *status = 127;
    }
    return NULL;
}

/* Binds port 0 on the master address and keeps the number the kernel picked. */
static bool find_free_port(const char *addr, char out[8])
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV | AI_PASSIVE };
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(addr, "0", &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "hooprun: cannot resolve master address '%s': %s\n", addr,
                gai_strerror(rc));
        return false;
    }
    int last_err = EADDRNOTAVAIL;
    bool ok = false;
    for (struct addrinfo *ai = res; ai != NULL && !ok; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last_err = errno;
            continue;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
            char serv[NI_MAXSERV];
            if (getnameinfo((struct sockaddr *)&ss, sl, NULL, 0, serv, sizeof serv,
                            NI_NUMERICSERV) == 0 && strlen(serv) < 8) {
                memcpy(out, serv, strlen(serv) + 1);
                ok = true;
            }
        } else {
            last_err = errno;
        }
        close(fd);
    }
    freeaddrinfo(res);
    if (!ok)
        fprintf(stderr, "hooprun: cannot find a free port on '%s': %s (use --master-port)\n", addr,
                strerror(last_err));
    return ok;
}

/*
 * Whether the master port can be listened on here, as the rendezvous store will (SO_REUSEADDR, so
 * connections of a finished job lingering in TIME_WAIT do not count). Returns 1 if it can, 0 if
 * something listens on it, -1 if the address is not one of this host's (nothing to check).
 */
static int port_bindable(const char *addr, const char *port)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV | AI_PASSIVE };
    struct addrinfo *res = NULL;
    if (getaddrinfo(addr, port, &hints, &res) != 0)
        return -1;
    int result = -1;
    for (struct addrinfo *ai = res; ai != NULL && result != 1; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        int one = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1) == 0)
            result = 1;
        else if (errno == EADDRINUSE)
            result = 0;
        close(fd);
    }
    freeaddrinfo(res);
    return result;
}

/* ---------------------------------------------------------------------------------------------- */
/* Output                                                                                         */

/* One of our own output streams. Whole lines are appended, so ranks never interleave mid-line. */
struct sink {
    int fd;
    bool broken;  /* the reader went away: output is dropped, the job goes on */
    size_t len;
    char buf[SINK_CAP];
};

static void sink_flush(struct sink *s)
{
    size_t off = 0;
    int64_t stall_start = -1;
    while (off < s->len && !s->broken) {
        ssize_t n = write(s->fd, s->buf + off, s->len - off);
        if (n > 0) {
            off += (size_t)n;
            stall_start = -1;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* Our stdout may be non-blocking when shared with another program. */
            int64_t t = now_ms();
            if (stall_start < 0)
                stall_start = t;
            if (t - stall_start > WRITE_STALL_MS) {
                s->broken = true;
                break;
            }
            struct pollfd p = { .fd = s->fd, .events = POLLOUT };
            (void)poll(&p, 1, 100);
        } else {
            s->broken = true;
        }
    }
    s->len = 0;
}

static void sink_put(struct sink *s, const char *prefix, size_t plen, const char *data, size_t dlen,
                     bool add_newline)
{
    size_t need = plen + dlen + (add_newline ? 1 : 0);
    if (s->len + need > SINK_CAP)
        sink_flush(s);
    if (need > SINK_CAP) {  /* cannot happen with LINE_CAP lines; keep the bound anyway */
        dlen = SINK_CAP - plen - 1;
        add_newline = true;
    }
    memcpy(s->buf + s->len, prefix, plen);
    memcpy(s->buf + s->len + plen, data, dlen);
    s->len += plen + dlen;
    if (add_newline)
        s->buf[s->len++] = '\n';
}

/* A message of the launcher itself, ordered with the rank output already read. */
static void say(struct sink *err, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    sink_put(err, "hooprun: ", 9, line, len, true);
    sink_flush(err);
}

/* One pipe from a rank (its stdout or its stderr). */
struct stream {
    int fd;  /* -1 once closed */
    struct sink *sink;
    const char *prefix;
    size_t plen;
    char *buf;
    size_t len, cap, scanned;
};

static void stream_emit_lines(struct stream *st)
{
    size_t start = 0;
    char *nl;
    while ((nl = memchr(st->buf + st->scanned, '\n', st->len - st->scanned)) != NULL) {
        size_t end = (size_t)(nl - st->buf) + 1;
        sink_put(st->sink, st->prefix, st->plen, st->buf + start, end - start, false);
        start = end;
        st->scanned = end;
    }
    if (start > 0) {
        memmove(st->buf, st->buf + start, st->len - start);
        st->len -= start;
    }
    st->scanned = st->len;
}

static void stream_close(struct stream *st)
{
    if (st->fd < 0)
        return;
    if (st->len > 0)  /* a last line without its newline */
        sink_put(st->sink, st->prefix, st->plen, st->buf, st->len, true);
    st->len = st->scanned = 0;
    close(st->fd);
    st->fd = -1;
    free(st->buf);
    st->buf = NULL;
    st->cap = 0;
}

/* Reads what the pipe holds (at most max_reads reads). Returns false on allocation failure. */
static bool stream_pump(struct stream *st, int max_reads)
{
    for (int r = 0; r < max_reads && st->fd >= 0; r++) {
        if (st->len == st->cap) {
            if (st->cap < LINE_CAP) {
                size_t ncap = st->cap ? st->cap * 2 : 4096;
                char *nb = realloc(st->buf, ncap);
                if (nb == NULL)
                    return false;
                st->buf = nb;
                st->cap = ncap;
            } else {
                /* A line longer than LINE_CAP: emit this part as a line of its own. */
                sink_put(st->sink, st->prefix, st->plen, st->buf, st->len, true);
                st->len = st->scanned = 0;
            }
        }
        ssize_t n = read(st->fd, st->buf + st->len, st->cap - st->len);
        if (n > 0) {
            st->len += (size_t)n;
            stream_emit_lines(st);
        } else if (n == 0) {
            stream_close(st);
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            break;
        } else {
            stream_close(st);
        }
    }
    return true;
}

/* ---------------------------------------------------------------------------------------------- */
/* The job                                                                                        */

struct rank {
    pid_t pid;
    int rank;
    bool running;
    char prefix[24];
    struct stream out, err;
};

enum phase { RUNNING, STOPPING, KILLING };

struct job {
    const struct opts *o;
    const char *prog_path;
    struct rank *ranks;
    int started;
    int nrunning;
    pid_t pgid;
    int sigfd;
    int devnull;
    sigset_t orig_mask;
    sigset_t forward;  /* forwarded signals that were not ignored when we started */
    struct sigaction orig_chld;
    struct rlimit orig_nofile;
    bool nofile_raised;
    enum phase phase;
    int64_t phase_deadline;
    int64_t timeout_deadline;  /* -1: none */
    bool ending;               /* a failure, a timeout or a start error decided the status */
    int status;
    int failed_rank;           /* the rank whose failure ended this attempt; -1: none */
    bool timed_out;
    bool interrupted;          /* a signal came to us: the user wants the job over */
    long restart;              /* restarts made so far */
    char master_port[8];       /* of this attempt */
    struct sink *out, *err;
    bool strip_auth;           /* leave HOOP_AUTH_KEY(_FILE) of our environment out of the ranks' */
    char *auth_env;            /* "HOOP_AUTH_KEY=<64 hex digits>" made for this job, or NULL */
    char job_env[64];          /* "HOOP_JOB_ID=hooprun-<16 hex digits>", or "" */
};

struct signame {
    int sig;
    const char *name;
};

static const struct signame signames[] = {
    { SIGHUP, "SIGHUP" },   { SIGINT, "SIGINT" },   { SIGQUIT, "SIGQUIT" }, { SIGILL, "SIGILL" },
    { SIGTRAP, "SIGTRAP" }, { SIGABRT, "SIGABRT" }, { SIGBUS, "SIGBUS" },   { SIGFPE, "SIGFPE" },
    { SIGKILL, "SIGKILL" }, { SIGUSR1, "SIGUSR1" }, { SIGSEGV, "SIGSEGV" }, { SIGUSR2, "SIGUSR2" },
    { SIGPIPE, "SIGPIPE" }, { SIGALRM, "SIGALRM" }, { SIGTERM, "SIGTERM" }, { SIGCHLD, "SIGCHLD" },
    { SIGCONT, "SIGCONT" }, { SIGSTOP, "SIGSTOP" }, { SIGTSTP, "SIGTSTP" }, { SIGTTIN, "SIGTTIN" },
    { SIGTTOU, "SIGTTOU" }, { SIGURG, "SIGURG" },   { SIGXCPU, "SIGXCPU" }, { SIGXFSZ, "SIGXFSZ" },
    { SIGVTALRM, "SIGVTALRM" }, { SIGPROF, "SIGPROF" }, { SIGSYS, "SIGSYS" },
};

static const char *signal_name(int sig)
{
    for (size_t i = 0; i < sizeof signames / sizeof signames[0]; i++)
        if (signames[i].sig == sig)
            return signames[i].name;
    return NULL;
}

/*
 * Sends sig to every running rank: to their process group (which also reaches what they started),
 * and directly to any rank that left the group. A rank in the group gets it exactly once.
 */
static void signal_all(struct job *j, int sig)
{
    /* The group is signalled only while one of our unreaped ranks is in it: only then is its id
     * sure not to have been recycled for someone else's group. */
    bool group_alive = false;
    for (int r = 0; r < j->started && !group_alive; r++)
        group_alive = j->ranks[r].running && getpgid(j->ranks[r].pid) == j->pgid;
    if (group_alive)
        (void)kill(-j->pgid, sig);
    for (int r = 0; r < j->started; r++) {
        struct rank *rk = &j->ranks[r];
        if (rk->running && (!group_alive || getpgid(rk->pid) != j->pgid))
            (void)kill(rk->pid, sig);
    }
}

static void begin_stop(struct job *j)
{
    if (j->phase != RUNNING)
        return;
    j->phase = STOPPING;
    j->phase_deadline = now_ms() + GRACE_MS;
    signal_all(j, SIGTERM);
}

static void begin_kill(struct job *j, bool interrupted)
{
    if (j->nrunning > 0 && j->phase != KILLING) {
        if (interrupted)
            say(j->err, "interrupted while stopping; sending SIGKILL to %d rank(s)", j->nrunning);
        else
            say(j->err, "%d rank(s) still running %d s after SIGTERM; sending SIGKILL",
                j->nrunning, GRACE_MS / 1000);
    }
    j->phase = KILLING;
    j->phase_deadline = now_ms() + KILL_WAIT_MS;
    signal_all(j, SIGKILL);
}

static void rank_exited(struct job *j, struct rank *rk, int wstatus)
{
    rk->running = false;
    j->nrunning--;
    /* What it wrote before dying goes out before the line that reports it. */
    stream_pump(&rk->out, 64);
    stream_pump(&rk->err, 64);
    sink_flush(j->out);

    bool failed = !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    if (!failed || j->ending)
        return;
    j->ending = true;
    j->failed_rank = rk->rank;
    if (WIFSIGNALED(wstatus)) {
        int sig = WTERMSIG(wstatus);
        const char *name = signal_name(sig);
        const char *core = "";
#ifdef WCOREDUMP
        if (WCOREDUMP(wstatus))
            core = " (core dumped)";
#endif
        if (name != NULL)
            say(j->err, "rank %d (pid %ld) was killed by signal %d (%s)%s", rk->rank,
                (long)rk->pid, sig, name, core);
        else
            say(j->err, "rank %d (pid %ld) was killed by signal %d%s", rk->rank, (long)rk->pid,
                sig, core);
        j->status = 128 + sig;
    } else {
        int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 1;
        say(j->err, "rank %d (pid %ld) exited with status %d", rk->rank, (long)rk->pid, code);
        j->status = code;
    }
    begin_stop(j);
}

static void reap(struct job *j)
{
    for (;;) {
        int ws;
        pid_t pid = waitpid(-1, &ws, WNOHANG);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            return;
        for (int r = 0; r < j->started; r++) {
            if (j->ranks[r].pid == pid && j->ranks[r].running) {
                rank_exited(j, &j->ranks[r], ws);
                break;
            }
        }
    }
}

static void handle_signals(struct job *j)
{
    struct signalfd_siginfo si;
    for (;;) {
        ssize_t n = read(j->sigfd, &si, sizeof si);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof si)
            return;
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD || sig == SIGPIPE || !sigismember(&j->forward, sig))
            continue;
        j->interrupted = true;
        /* Once the job is being stopped, another interrupt means "now". */
        if (j->phase != RUNNING && (sig == SIGINT || sig == SIGTERM))
            begin_kill(j, true);
        else
            signal_all(j, sig);
    }
}

static const char *const launcher_vars[] = { "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                              "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                                              "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                                              "HOOP_LAUNCHER", "HOOP_RESTART_COUNT",
                                              "TORCHELASTIC_RESTART_COUNT" };
enum { NVARS = sizeof launcher_vars / sizeof launcher_vars[0] };

static void free_env(char **env)
{
    if (env == NULL)
        return;
    /* Only the first NVARS entries are ours; the rest belong to environ. */
    for (size_t i = 0; i < NVARS && env[i] != NULL; i++)
        free(env[i]);
    free(env);
}

/* Builds the environment of one rank: the launcher variables first, then ours without them. */
static char **rank_env(const struct job *j, int local)
{
    const struct opts *o = j->o;
    const long nums[] = { o->node_rank * o->nproc + local, o->nnodes * o->nproc, local, o->nproc,
                          o->node_rank, o->nnodes, o->node_rank };
    enum { NNUMS = sizeof nums / sizeof nums[0] };

    size_t n = 0;
    while (environ != NULL && environ[n] != NULL)
        n++;
    char **env = calloc(n + NVARS + 3, sizeof *env);
    if (env == NULL)
        return NULL;
    for (size_t v = 0; v < NVARS; v++) {
        char num[32];
        const char *val = num;
        if (v < NNUMS)
            snprintf(num, sizeof num, "%ld", nums[v]);
        else if (strstr(launcher_vars[v], "RESTART_COUNT") != NULL)
            snprintf(num, sizeof num, "%ld", j->restart);
        else if (strcmp(launcher_vars[v], "MASTER_ADDR") == 0)
            val = o->master_addr;
        else if (strcmp(launcher_vars[v], "MASTER_PORT") == 0)
            val = j->master_port;
        else
            val = "hooprun";
        size_t len = strlen(launcher_vars[v]) + 1 + strlen(val) + 1;
        env[v] = malloc(len);
        if (env[v] == NULL) {
            free_env(env);
            return NULL;
        }
        snprintf(env[v], len, "%s=%s", launcher_vars[v], val);
    }
    size_t k = NVARS;
    for (size_t i = 0; i < n; i++) {
        bool ours = false;
        for (size_t v = 0; v < NVARS && !ours; v++) {
            size_t len = strlen(launcher_vars[v]);
            ours = strncmp(environ[i], launcher_vars[v], len) == 0 && environ[i][len] == '=';
        }
        if (!ours && j->strip_auth)
            ours = strncmp(environ[i], "HOOP_AUTH_KEY=", 14) == 0 ||
                   strncmp(environ[i], "HOOP_AUTH_KEY_FILE=", 19) == 0;
        if (!ours)
            env[k++] = environ[i];
    }
    if (j->auth_env != NULL)
        env[k++] = j->auth_env;
    if (j->job_env[0] != '\0')
        env[k++] = (char *)j->job_env;
    env[k] = NULL;
    return env;
}

/* In the child, between fork and exec. Only plain system calls here. */
static void child_exec(const struct job *j, pid_t parent, int out_w, int err_w, int errpipe_w,
                       char **env)
{
    (void)setpgid(0, j->pgid);
#ifdef PR_SET_PDEATHSIG
    /* If the launcher is killed outright, the ranks must not run on unsupervised. */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
#else
    (void)parent;
#endif
    int e = 0;
    if (dup2(j->devnull, STDIN_FILENO) < 0 || dup2(out_w, STDOUT_FILENO) < 0 ||
        dup2(err_w, STDERR_FILENO) < 0)
        e = errno;
    if (e == 0) {
        if (j->nofile_raised)
            (void)setrlimit(RLIMIT_NOFILE, &j->orig_nofile);
        (void)sigaction(SIGCHLD, &j->orig_chld, NULL);
        (void)sigprocmask(SIG_SETMASK, &j->orig_mask, NULL);
        execvpe(j->prog_path, j->o->prog_argv, env);
        e = errno;
    }
    /* The launcher stops reading this pipe after EXEC_WAIT_MS: a late failure must still exit
     * with 126/127, not die of SIGPIPE (the mask was restored above). Every other write of the
     * launcher goes to its own output with SIGPIPE blocked (see the signal set-up). */
    struct sigaction ign = { .sa_handler = SIG_IGN };
    sigemptyset(&ign.sa_mask);
    (void)sigaction(SIGPIPE, &ign, NULL);
    ssize_t w;
    do {
        w = write(errpipe_w, &e, sizeof e);
    } while (w < 0 && errno == EINTR);
    _exit(e == ENOENT ? 127 : 126);
}

static void stream_init(struct stream *st, int fd, struct sink *sink, const char *prefix, size_t plen)
{
    *st = (struct stream){ .fd = fd, .sink = sink, .prefix = prefix, .plen = plen };
}

/* Starts one rank. Returns false (after saying why and setting the job status) on failure. */
static bool start_rank(struct job *j, int local)
{
    struct rank *rk = &j->ranks[local];
    const struct opts *o = j->o;
    rk->rank = (int)(o->node_rank * o->nproc + local);
    if (o->prefix)
        snprintf(rk->prefix, sizeof rk->prefix, "[%d] ", rk->rank);
    size_t plen = strlen(rk->prefix);

    int outp[2] = { -1, -1 }, errp[2] = { -1, -1 }, exp[2] = { -1, -1 };
    char **env = NULL;
    const char *what = "pipe";
    if (pipe2(outp, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0 || pipe2(exp, O_CLOEXEC) != 0)
        goto fail;
    what = "environment";
    env = rank_env(j, local);
    if (env == NULL) {
        errno = ENOMEM;
        goto fail;
    }
    what = "fork";
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        goto fail;
    if (pid == 0)
        child_exec(j, parent, outp[1], errp[1], exp[1], env);

    if (j->pgid == 0)
        j->pgid = pid;
    /* Also done by the child; whichever runs first wins, so no signal can miss the rank. */
    (void)setpgid(pid, j->pgid);
    rk->pid = pid;
    rk->running = true;
    j->started++;
    j->nrunning++;
    free_env(env);
    env = NULL;
    close(outp[1]);
    close(errp[1]);
    close(exp[1]);
    (void)fcntl(outp[0], F_SETFL, O_NONBLOCK);
    (void)fcntl(errp[0], F_SETFL, O_NONBLOCK);
    stream_init(&rk->out, outp[0], j->out, rk->prefix, plen);
    stream_init(&rk->err, errp[0], j->err, rk->prefix, plen);

    /* The error pipe closes on a successful exec, or carries errno if it failed. */
    int child_err = 0;
    struct pollfd p = { .fd = exp[0], .events = POLLIN };
    int64_t deadline = now_ms() + EXEC_WAIT_MS;
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            break;  /* very slow start: carry on, a failure will still show as its exit status */
        int pr = poll(&p, 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;
        ssize_t n = read(exp[0], &child_err, sizeof child_err);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof child_err)
            child_err = 0;
        break;
    }
    close(exp[0]);
    if (child_err != 0) {
        say(j->err, "rank %d: cannot execute '%s': %s", rk->rank, j->prog_path,
            strerror(child_err));
        j->ending = true;
        j->status = child_err == ENOENT ? 127 : 126;
        return false;
    }
    return true;

fail:;
    int e = errno;
    say(j->err, "cannot start rank %d: %s: %s", rk->rank, what, strerror(e));
    free_env(env);
    for (int i = 0; i < 2; i++) {
        if (outp[i] >= 0)
            close(outp[i]);
        if (errp[i] >= 0)
            close(errp[i]);
        if (exp[i] >= 0)
            close(exp[i]);
    }
    j->ending = true;
    j->status = 1;
    return false;
}

static void run_loop(struct job *j)
{
    int nstreams = 2 * j->started;
    struct pollfd *pfd = calloc((size_t)nstreams + 1, sizeof *pfd);
    struct stream **map = calloc((size_t)nstreams + 1, sizeof *map);
    if (pfd == NULL || map == NULL) {
        say(j->err, "out of memory");
        if (!j->ending) {
            j->ending = true;
            j->status = 1;
        }
        begin_kill(j, false);
    }

    for (;;) {
        reap(j);
        if (j->nrunning == 0)
            break;
        int64_t now = now_ms();
        if (j->timeout_deadline >= 0 && now >= j->timeout_deadline && j->phase == RUNNING) {
            say(j->err, "timeout: the job is still running after %s s; stopping all ranks",
                j->o->timeout_text);
            j->ending = true;
            j->status = 124;
            j->timed_out = true;
            begin_stop(j);
        }
        if (j->phase == STOPPING && now >= j->phase_deadline)
            begin_kill(j, false);
        if (j->phase == KILLING && now >= j->phase_deadline) {
            say(j->err, "%d rank(s) did not exit after SIGKILL; giving up on them", j->nrunning);
            break;
        }

        int64_t wait = POLL_CAP_MS;
        if (j->phase == RUNNING && j->timeout_deadline >= 0 && j->timeout_deadline - now < wait)
            wait = j->timeout_deadline - now;
        if (j->phase != RUNNING && j->phase_deadline - now < wait)
            wait = j->phase_deadline - now;
        if (wait < 0)
            wait = 0;

        if (pfd == NULL || map == NULL) {
            struct timespec ts = { .tv_sec = 0, .tv_nsec = 100 * 1000000L };
            nanosleep(&ts, NULL);
            continue;
        }
        int np = 0;
        pfd[np++] = (struct pollfd){ .fd = j->sigfd, .events = POLLIN };
        for (int r = 0; r < j->started; r++) {
            struct stream *s2[2] = { &j->ranks[r].out, &j->ranks[r].err };
            for (int k = 0; k < 2; k++) {
                if (s2[k]->fd >= 0) {
                    map[np] = s2[k];
                    pfd[np++] = (struct pollfd){ .fd = s2[k]->fd, .events = POLLIN };
                }
            }
        }
        int pr = poll(pfd, (nfds_t)np, (int)wait);
        if (pr < 0 && errno != EINTR) {
            say(j->err, "poll: %s", strerror(errno));
            struct timespec ts = { .tv_sec = 0, .tv_nsec = 100 * 1000000L };
            nanosleep(&ts, NULL);
            continue;
        }
        if (pr <= 0)
            continue;
        if (pfd[0].revents & POLLIN)
            handle_signals(j);
        for (int i = 1; i < np; i++) {
            if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                if (!stream_pump(map[i], READS_PER_ROUND))
                    stream_close(map[i]);
            }
        }
        sink_flush(j->out);
        sink_flush(j->err);
    }

    /* Every rank is gone; what they wrote is in the pipes, unless something they started still
     * holds a pipe open, which must not keep us here. */
    int64_t end = now_ms() + DRAIN_MS;
    if (pfd != NULL && map != NULL) {
        for (;;) {
            int np = 0;
            for (int r = 0; r < j->started; r++) {
                struct stream *s2[2] = { &j->ranks[r].out, &j->ranks[r].err };
                for (int k = 0; k < 2; k++) {
                    if (s2[k]->fd >= 0) {
                        map[np] = s2[k];
                        pfd[np++] = (struct pollfd){ .fd = s2[k]->fd, .events = POLLIN };
                    }
                }
            }
            int64_t left = end - now_ms();
            if (np == 0 || left <= 0)
                break;
            int pr = poll(pfd, (nfds_t)np, left > 100 ? 100 : (int)left);
            if (pr < 0 && errno == EINTR)
                continue;
            if (pr <= 0)
                break;  /* nothing more is coming right now: whoever holds the pipe is not us */
            for (int i = 0; i < np; i++)
                if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
                    if (!stream_pump(map[i], READS_PER_ROUND))
                        stream_close(map[i]);
        }
    }
    for (int r = 0; r < j->started; r++) {
        stream_close(&j->ranks[r].out);
        stream_close(&j->ranks[r].err);
    }
    sink_flush(j->out);
    sink_flush(j->err);
    free(pfd);
    free(map);
}

/* Whether the attempt that just ended is one to restart after. */
static bool may_restart(struct job *j)
{
    /* A signal may still be waiting: it was meant for a job that was already going down. */
    handle_signals(j);
    if (j->failed_rank < 0 || j->timed_out || j->interrupted || j->restart >= j->o->max_restarts)
        return false;
    if (j->nrunning > 0) {
        say(j->err, "not restarting: %d rank(s) of the failed attempt are still there",
            j->nrunning);
        return false;
    }
    return true;
}

static bool timeout_over(const struct job *j)
{
    return j->timeout_deadline >= 0 && now_ms() >= j->timeout_deadline;
}

/* Sleeps up to ms, waking early for a signal to us. Returns false if one came. */
static bool pause_ms(struct job *j, int ms)
{
    struct pollfd p = { .fd = j->sigfd, .events = POLLIN };
    int pr = poll(&p, 1, ms);
    if (pr > 0)
        handle_signals(j);
    return !j->interrupted;
}

/*
 * Gets a fresh rendezvous for the next attempt and resets the job for it. Returns false, having
 * said why where the reason is new, if the job cannot go on.
 */
static bool prepare_restart(struct job *j)
{
    const struct opts *o = j->o;
    if (!o->port_given) {
        /* The old port may still be held by something the ranks started, or be reached by a
         * late peer of the old attempt: always take a different one. */
        char port[8];
        bool ok = false;
        for (int tries = 0; tries < 16 && !ok; tries++) {
            if (!find_free_port(o->master_addr, port))
                return false;
            ok = strcmp(port, j->master_port) != 0;
        }
        if (!ok) {
            say(j->err, "not restarting: no new free port on '%s'", o->master_addr);
            return false;
        }
        memcpy(j->master_port, port, sizeof port);
    } else if (o->node_rank == 0) {
        /* Only the master node hosts the store; elsewhere the port is another host's. */
        int64_t deadline = now_ms() + PORT_WAIT_MS;
        if (j->timeout_deadline >= 0 && j->timeout_deadline < deadline)
            deadline = j->timeout_deadline;
        bool said = false;
        for (;;) {
            if (port_bindable(o->master_addr, j->master_port) != 0)
                break;
            int64_t left = deadline - now_ms();
            if (left <= 0 && !timeout_over(j)) {
                say(j->err, "not restarting: master port %s is still in use", j->master_port);
                return false;
            }
            if (left <= 0)
                break;  /* said below */
            if (!said) {
                say(j->err, "waiting for master port %s to be free before restarting",
                    j->master_port);
                said = true;
            }
            if (!pause_ms(j, left < 100 ? (int)left : 100))
                return false;
        }
    }
    if (timeout_over(j)) {
        say(j->err, "timeout: the job is past its %s s; not restarting",
            o->timeout_text);
        j->status = 124;
        return false;
    }
    if (j->interrupted)
        return false;

    j->restart++;
    say(j->err, "restarting all ranks (restart %ld of %ld) after rank %d failed; MASTER_PORT=%s",
        j->restart, o->max_restarts, j->failed_rank, j->master_port);
    memset(j->ranks, 0, (size_t)o->nproc * sizeof *j->ranks);
    j->started = 0;
    j->nrunning = 0;
    j->pgid = 0;
    j->phase = RUNNING;
    j->phase_deadline = 0;
    j->ending = false;
    j->status = 0;
    j->failed_rank = -1;
    return true;
}

/* Blocks the signals we handle and opens the signalfd that delivers them. */
static bool setup_signals(struct job *j)
{
    static const int fwd[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
    sigset_t block;
    sigemptyset(&block);
    sigemptyset(&j->forward);
    for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++) {
        struct sigaction cur;
        /* An ignored signal (nohup, a background job of a script) stays ignored for everyone. */
        if (sigaction(fwd[i], NULL, &cur) == 0 && cur.sa_handler == SIG_IGN)
            continue;
        sigaddset(&block, fwd[i]);
        sigaddset(&j->forward, fwd[i]);
    }
    /* SIGCHLD wakes the loop. A write to a closed stdout must fail with EPIPE, not kill us. */
    sigaddset(&block, SIGCHLD);
    sigaddset(&block, SIGPIPE);

    /* An inherited SIG_IGN on SIGCHLD would make the kernel reap the ranks behind our back. */
    struct sigaction dfl = { .sa_handler = SIG_DFL };
    sigemptyset(&dfl.sa_mask);
    if (sigaction(SIGCHLD, &dfl, &j->orig_chld) != 0)
        return false;
    if (sigprocmask(SIG_BLOCK, &block, &j->orig_mask) != 0)
        return false;
    j->sigfd = signalfd(-1, &block, SFD_NONBLOCK | SFD_CLOEXEC);
    return j->sigfd >= 0;
}

static bool env_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0';
}

/* Decides the ranks' key: none (--no-auth), the one in our environment, or a fresh one. */
static bool setup_auth(struct job *j)
{
    const struct opts *o = j->o;
    if (o->no_auth) {
        j->strip_auth = true;
        return true;
    }
    if (env_set("HOOP_AUTH_KEY") || env_set("HOOP_AUTH_KEY_FILE"))
        return true;
    if (o->nnodes > 1) {
        fprintf(stderr, "hooprun: note: no HOOP_AUTH_KEY or HOOP_AUTH_KEY_FILE: the ranks' connections "
                        "are not authenticated (set the same key on every node)\n");
        return true;
    }
    /* The kernel's CSPRNG, as libsodium's randombytes_buf uses on Linux. */
    unsigned char key[32];
    size_t got = 0;
    while (got < sizeof key) {
        ssize_t r = getrandom(key + got, sizeof key - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            fprintf(stderr, "hooprun: cannot make an authentication key: getrandom: %s\n",
                    strerror(errno));
            return false;
        }
        got += (size_t)r;
    }
    static const char hex[] = "0123456789abcdef";
    const size_t len = 14 + 2 * sizeof key + 1;
    j->auth_env = malloc(len);
    if (j->auth_env == NULL) {
        explicit_bzero(key, sizeof key);
        fprintf(stderr, "hooprun: out of memory\n");
        return false;
    }
    memcpy(j->auth_env, "HOOP_AUTH_KEY=", 14);
    for (size_t i = 0; i < sizeof key; i++) {
        j->auth_env[14 + 2 * i] = hex[key[i] >> 4];
        j->auth_env[15 + 2 * i] = hex[key[i] & 15];
    }
    j->auth_env[len - 1] = '\0';
    explicit_bzero(key, sizeof key);
    /* An empty HOOP_AUTH_KEY(_FILE) of ours must not sit beside the new one. */
    j->strip_auth = true;
    return true;
}

/* A single-node job is one job: name it, so that its ranks cannot join another job's rendezvous
 * (hoop compares job ids at init). Across nodes each launcher would make up another name, so
 * there the user's HOOP_JOB_ID (or the batch system's) is passed on as it is. */
static void setup_job_id(struct job *j)
{
    uint64_t id = 0;
    if (env_set("HOOP_JOB_ID") || j->o->nnodes > 1 || getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
        return;
    snprintf(j->job_env, sizeof j->job_env, "HOOP_JOB_ID=hooprun-%016llx", (unsigned long long)id);
}

int main(int argc, char **argv)
{
    /* With 0, 1 or 2 closed, a pipe could land there and be clobbered by the child's dup2. */
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && open("/dev/null", O_RDWR) != fd)
            return 1;

    struct opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;

    int status = 1;
    char *prog_path = resolve_program(o.prog_argv[0], &status);
    if (prog_path == NULL)
        return status;
    if (!o.port_given && !find_free_port(o.master_addr, o.master_port)) {
        free(prog_path);
        return 1;
    }

    struct job j = { .o = &o, .prog_path = prog_path, .sigfd = -1, .devnull = -1,
                     .timeout_deadline = -1, .failed_rank = -1 };
    j.ranks = calloc((size_t)o.nproc, sizeof *j.ranks);
    j.out = malloc(sizeof *j.out);
    j.err = malloc(sizeof *j.err);
    if (j.ranks == NULL || j.out == NULL || j.err == NULL) {
        fprintf(stderr, "hooprun: out of memory\n");
        free(j.ranks);
        free(j.out);
        free(j.err);
        free(prog_path);
        return 1;
    }
    memcpy(j.master_port, o.master_port, sizeof j.master_port);
    j.out->fd = STDOUT_FILENO;
    j.out->broken = false;
    j.out->len = 0;
    j.err->fd = STDERR_FILENO;
    j.err->broken = false;
    j.err->len = 0;
    fflush(NULL);

    setup_job_id(&j);
    if (!setup_auth(&j)) {
        status = 1;
        goto out;
    }
    if (!setup_signals(&j)) {
        fprintf(stderr, "hooprun: cannot set up signal handling: %s\n", strerror(errno));
        status = 1;
        goto out;
    }
    j.devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (j.devnull < 0) {
        fprintf(stderr, "hooprun: /dev/null: %s\n", strerror(errno));
        status = 1;
        goto out;
    }
    /* Three descriptors per rank: large jobs can pass the usual soft limit of 1024. The ranks get
     * the limit they would have had without us. */
    if (getrlimit(RLIMIT_NOFILE, &j.orig_nofile) == 0) {
        rlim_t need = (rlim_t)o.nproc * 3 + 64;
        if (j.orig_nofile.rlim_cur != RLIM_INFINITY && j.orig_nofile.rlim_cur < need) {
            struct rlimit raised = j.orig_nofile;
            raised.rlim_cur = j.orig_nofile.rlim_max == RLIM_INFINITY || j.orig_nofile.rlim_max > need
                                  ? need
                                  : j.orig_nofile.rlim_max;
            j.nofile_raised = setrlimit(RLIMIT_NOFILE, &raised) == 0;
        }
    }
    if (o.has_timeout)
        j.timeout_deadline = now_ms() + (int64_t)(o.timeout_s * 1000.0 + 0.999);

    for (;;) {
        for (int local = 0; local < o.nproc; local++) {
            if (!start_rank(&j, local)) {
                begin_stop(&j);
                break;
            }
        }
        run_loop(&j);
        if (!j.ending || !may_restart(&j) || !prepare_restart(&j)) {
            status = j.ending ? j.status : 0;
            break;
        }
    }

out:
    if (j.auth_env != NULL) {
        explicit_bzero(j.auth_env, strlen(j.auth_env));
        free(j.auth_env);
    }
    if (j.sigfd >= 0)
        close(j.sigfd);
    if (j.devnull >= 0)
        close(j.devnull);
    free(j.ranks);
    free(j.out);
    free(j.err);
    free(prog_path);
    return status;
}
