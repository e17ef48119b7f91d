/*
 * What hooprun's ranks run and are given: the program (looked up before anything starts), the
 * master port, the environment (torchrun's variables, the key, the job id), then fork and exec.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "../../common/clock.h"
#include "../../src/base/port.h"
#include "hooprun.h"

extern char **environ;

/* ---- program lookup and master port ---- */

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
char *resolve_program(const char *prog, int *status)
{
    int err = ENOENT;
    if (strchr(prog, '/') != NULL) {
        if (is_exec_file(prog, &err)) return strdup(prog);
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
    int found_err = 0; /* a match that exists but cannot be executed */
    for (const char *p = path;; p++) {
        const char *end = strchr(p, ':');
        size_t dlen = end ? (size_t)(end - p) : strlen(p);
        /* An empty entry means the current directory. */
        const char *dir = dlen ? p : ".";
        if (!dlen) dlen = 1;
        char *cand = malloc(dlen + 1 + plen + 1);
        if (cand == NULL) {
            fprintf(stderr, "hooprun: out of memory\n");
            *status = 1;
            return NULL;
        }
        memcpy(cand, dir, dlen);
        cand[dlen] = '/';
        memcpy(cand + dlen + 1, prog, plen + 1);
        if (is_exec_file(cand, &err)) return cand;
        free(cand);
        if (err != ENOENT && err != ENOTDIR && found_err == 0) found_err = err;
        if (end == NULL) break;
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

/* Binds each address of addr at port (a number, "0" for any) and returns the port the first bind
 * got, in out: 0 on success, -1 if addr does not resolve (getaddrinfo's code in *gai), else the
 * last errno. */
static int probe_port(const char *addr, const char *port, char out[8], int *gai)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(addr, port, &hints, &res);
    if (rc != 0) {
        *gai = rc;
        return -1;
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
                            NI_NUMERICSERV) == 0 &&
                strlen(serv) < 8) {
                memcpy(out, serv, strlen(serv) + 1);
                ok = true;
            }
        } else {
            last_err = errno;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return ok ? 0 : last_err;
}

/* A port that was free a moment ago, drawn below the kernel's ephemeral range (src/base/port.h, the library's own draw). */
bool find_free_port(const char *addr, char out[8])
{
    int rc = EADDRNOTAVAIL, gai = 0;
    hoop__port_draw_t d;
    hoop__port_draw_start(&d, 32);
    for (int want; (want = hoop__port_draw_next(&d)) > 0;) {
        char port[16];
        snprintf(port, sizeof port, "%d", want);
        rc = probe_port(addr, port, out, &gai);
        if (rc == 0 && strcmp(out, port) == 0) return true;
        if (rc < 0) break; /* the address does not resolve: no port will do */
    }
    if (rc >= 0) rc = probe_port(addr, "0", out, &gai);
    if (rc == 0) return true;
    if (rc < 0)
        fprintf(stderr, "hooprun: cannot resolve master address '%s': %s\n", addr,
                gai_strerror(gai));
    else
        fprintf(stderr, "hooprun: cannot find a free port on '%s': %s (use --master-port)\n", addr,
                strerror(rc));
    return false;
}

/*
 * Whether the master port can be listened on here, as the rendezvous store will (SO_REUSEADDR, so
 * connections of a finished job lingering in TIME_WAIT do not count). Returns 1 if it can, 0 if
 * something listens on it, -1 if the address is not one of this host's (nothing to check).
 */
int port_bindable(const char *addr, const char *port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *res = NULL;
    if (getaddrinfo(addr, port, &hints, &res) != 0) return -1;
    int result = -1;
    for (struct addrinfo *ai = res; ai != NULL && result != 1; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
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

/* ---- the key and the job id ---- */

static bool env_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0';
}

void setup_threads(const struct job *j)
{
    /* N ranks that each start an OpenMP (or BLAS) pool of every core oversubscribe the machine,
     * and a script run under torchrun, which sets 1, would compute differently here. */
    if (getenv("OMP_NUM_THREADS") != NULL || j->o->nproc < 2) return;
    if (setenv("OMP_NUM_THREADS", "1", 1) != 0) return;
    fprintf(stderr, "hooprun: note: OMP_NUM_THREADS=1 for every rank, as torchrun sets it (set "
                    "OMP_NUM_THREADS to choose another number)\n");
}

void setup_bind(struct job *j)
{
    /* Two spinning ranks that start on one CPU can stay there for thousands of calls before the
     * kernel moves one (an 8-byte all-reduce then costs 20-40 us instead of 0.6): give each its
     * own CPUs from the start, as mpirun does. */
    j->bind = NULL;
    long n = j->o->nproc;
    cpu_set_t all;
    if (j->o->no_bind || n < 2 || sched_getaffinity(0, sizeof all, &all) != 0) return;
    int cpus[CPU_SETSIZE], ncpu = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) cpus[ncpu++] = c;
    if (n > ncpu) return;
    cpu_set_t *b = calloc((size_t)n, sizeof *b);
    if (b == NULL) return;
    int share = ncpu / (int)n;
    for (long r = 0; r < n; r++) {
        CPU_ZERO(&b[r]);
        for (int k = 0; k < share; k++) CPU_SET(cpus[r * share + k], &b[r]);
    }
    j->bind = b;
}

bool setup_auth(struct job *j)
{
    const struct opts *o = j->o;
    if (o->no_auth) {
        j->strip_auth = true;
        return true;
    }
    if (env_set("HOOP_AUTH_KEY") || env_set("HOOP_AUTH_KEY_FILE")) return true;
    if (o->nnodes > 1) {
        fprintf(stderr,
                "hooprun: note: no HOOP_AUTH_KEY or HOOP_AUTH_KEY_FILE: the ranks' connections "
                "are not authenticated (set the same key on every node)\n");
        return true;
    }
    /* The kernel's CSPRNG, as libsodium's randombytes_buf uses on Linux. */
    unsigned char key[32];
    size_t got = 0;
    while (got < sizeof key) {
        ssize_t r = getrandom(key + got, sizeof key - got, 0);
        if (r < 0 && errno == EINTR) continue;
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
void setup_job_id(struct job *j)
{
    uint64_t id = 0;
    if (env_set("HOOP_JOB_ID") || j->o->nnodes > 1 ||
        getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
        return;
    snprintf(j->job_env, sizeof j->job_env, "HOOP_JOB_ID=hooprun-%016llx", (unsigned long long)id);
}

/* ---- the environment and the start ---- */

static const char *const launcher_vars[] = {
    "RANK",        "WORLD_SIZE",       "LOCAL_RANK",         "LOCAL_WORLD_SIZE",
    "GROUP_RANK",  "GROUP_WORLD_SIZE", "NODE_RANK",          "MASTER_ADDR",
    "MASTER_PORT", "HOOP_LAUNCHER",    "HOOP_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"};
enum { NVARS = sizeof launcher_vars / sizeof launcher_vars[0] };

static void free_env(char **env)
{
    if (env == NULL) return;
    /* Only the first NVARS entries are ours; the rest belong to environ. */
    for (size_t i = 0; i < NVARS && env[i] != NULL; i++) free(env[i]);
    free(env);
}

/* Builds the environment of one rank: the launcher variables first, then ours without them. */
static char **rank_env(const struct job *j, int local)
{
    const struct opts *o = j->o;
    const long nums[] = {o->node_rank * o->nproc + local,
                         o->nnodes * o->nproc,
                         local,
                         o->nproc,
                         o->node_rank,
                         o->nnodes,
                         o->node_rank};
    enum { NNUMS = sizeof nums / sizeof nums[0] };

    size_t n = 0;
    while (environ != NULL && environ[n] != NULL) n++;
    char **env = calloc(n + NVARS + 3, sizeof *env);
    if (env == NULL) return NULL;
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
        if (!ours) env[k++] = environ[i];
    }
    if (j->auth_env != NULL) env[k++] = j->auth_env;
    if (j->job_env[0] != '\0') env[k++] = (char *)j->job_env;
    env[k] = NULL;
    return env;
}

/* In the child, between fork and exec. Only plain system calls here. */
static void child_exec(const struct job *j, int local, pid_t parent, int out_w, int err_w,
                       int errpipe_w, char **env)
{
    (void)setpgid(0, j->pgid);
    if (j->bind != NULL) (void)sched_setaffinity(0, sizeof j->bind[local], &j->bind[local]);
#ifdef PR_SET_PDEATHSIG
    /* If the launcher is killed outright, the ranks must not run on unsupervised. */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
#else
    (void)parent;
#endif
    int e = 0;
    if (dup2(j->devnull, STDIN_FILENO) < 0 || dup2(out_w, STDOUT_FILENO) < 0 ||
        dup2(err_w, STDERR_FILENO) < 0)
        e = errno;
    if (e == 0) {
        if (j->nofile_raised) (void)setrlimit(RLIMIT_NOFILE, &j->orig_nofile);
        (void)sigaction(SIGCHLD, &j->orig_chld, NULL);
        (void)sigprocmask(SIG_SETMASK, &j->orig_mask, NULL);
        execvpe(j->prog_path, j->o->prog_argv, env);
        e = errno;
    }
    /* The launcher stops reading this pipe after EXEC_WAIT_MS: a late failure must still exit
     * with 126/127, not die of SIGPIPE (the mask was restored above). Every other write of the
     * launcher goes to its own output with SIGPIPE blocked (see the signal set-up). */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    (void)sigaction(SIGPIPE, &ign, NULL);
    ssize_t w;
    do {
        w = write(errpipe_w, &e, sizeof e);
    } while (w < 0 && errno == EINTR);
    _exit(e == ENOENT ? 127 : 126);
}

bool start_rank(struct job *j, int local)
{
    struct rank *rk = &j->ranks[local];
    const struct opts *o = j->o;
    rk->out = rk->err = (struct stream){.fd = -1}; /* nothing to close if the start fails */
    rk->rank = (int)(o->node_rank * o->nproc + local);
    if (o->prefix) snprintf(rk->prefix, sizeof rk->prefix, "[%d] ", rk->rank);
    size_t plen = strlen(rk->prefix);

    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, exp[2] = {-1, -1};
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
    what = "output buffers";
    bool out_ok = stream_init(&rk->out, j->out, j->err, rk->rank, rk->prefix, plen);
    if (!stream_init(&rk->err, j->err, j->err, rk->rank, rk->prefix, plen) || !out_ok) {
        errno = ENOMEM;
        goto fail;
    }
    what = "fork";
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) goto fail;
    if (pid == 0) child_exec(j, local, parent, outp[1], errp[1], exp[1], env);

    if (j->pgid == 0) j->pgid = pid;
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
    rk->out.fd = outp[0];
    rk->err.fd = errp[0];
    /* Read by await_execs once every rank is forked: waiting here for each exec in turn made
     * the launch as slow as p scheduling delays on a busy host (docs/performance.md). */
    rk->exec_fd = exp[0];
    return true;

fail:;
    int e = errno;
    say(j->err, "cannot start rank %d: %s: %s", rk->rank, what, strerror(e));
    (void)await_execs(j); /* the ranks started before this one */
    free_env(env);
    stream_close(&rk->out);
    stream_close(&rk->err);
    for (int i = 0; i < 2; i++) {
        if (outp[i] >= 0) close(outp[i]);
        if (errp[i] >= 0) close(errp[i]);
        if (exp[i] >= 0) close(exp[i]);
    }
    j->ending = true;
    j->status = 1;
    return false;
}

bool await_execs(struct job *j)
{
    const int n = j->o->nproc;
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    int *who = calloc((size_t)n, sizeof *who);
    const int64_t deadline = now_ms() + EXEC_WAIT_MS;
    int failed = -1, failed_err = 0;
    for (;;) {
        int np = 0;
        for (int i = 0; i < n && p != NULL && who != NULL; i++)
            if (j->ranks[i].exec_fd >= 0) {
                who[np] = i;
                p[np++] = (struct pollfd){.fd = j->ranks[i].exec_fd, .events = POLLIN};
            }
        const int64_t left = deadline - now_ms();
        /* Nothing left to hear, or a very slow start: carry on, a failure will still show as
         * its exit status. Without memory for the poll, the same. */
        if (np == 0 || left <= 0) break;
        int pr = poll(p, (nfds_t)np, (int)left);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) break;
        for (int k = 0; k < np; k++) {
            if (p[k].revents == 0) continue;
            struct rank *rk = &j->ranks[who[k]];
            int child_err = 0;
            ssize_t got = read(rk->exec_fd, &child_err, sizeof child_err);
            if (got < 0 && errno == EINTR) continue;
            if (got != (ssize_t)sizeof child_err) child_err = 0;
            close(rk->exec_fd);
            rk->exec_fd = -1;
            if (child_err != 0 && (failed < 0 || who[k] < failed)) {
                failed = who[k];
                failed_err = child_err;
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (j->ranks[i].exec_fd >= 0) {
            close(j->ranks[i].exec_fd);
            j->ranks[i].exec_fd = -1;
        }
    free(p);
    free(who);
    if (failed < 0) return true;
    /* One sentence, for the first rank: the others failed the same way or were stopped. */
    say(j->err, "rank %d: cannot execute '%s': %s", j->ranks[failed].rank, j->prog_path,
        strerror(failed_err));
    j->ending = true;
    j->status = failed_err == ENOENT ? 127 : 126;
    return false;
}
