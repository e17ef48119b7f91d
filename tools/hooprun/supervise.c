/*
 * hooprun's supervision of the job: the signals it gets and forwards, the loop that waits for the
 * ranks and pumps their output, stopping them (SIGTERM, then SIGKILL), ending what they leave
 * behind, the exit status of the first failed rank, the timeout, and the restarts after a failure.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../common/clock.h"
#include "hooprun.h"

struct signame {
    int sig;
    const char *name;
};

static const struct signame signames[] = {
    {SIGHUP, "SIGHUP"},       {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"},     {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"},     {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"},     {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
    {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
    {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGSYS, "SIGSYS"},
};

static const char *signal_name(int sig)
{
    for (size_t i = 0; i < sizeof signames / sizeof signames[0]; i++)
        if (signames[i].sig == sig) return signames[i].name;
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
    if (group_alive) (void)kill(-j->pgid, sig);
    for (int r = 0; r < j->started; r++) {
        struct rank *rk = &j->ranks[r];
        if (rk->running && (!group_alive || getpgid(rk->pid) != j->pgid)) (void)kill(rk->pid, sig);
    }
}

/* A grace period in seconds, as the messages give it. */
static const char *seconds(char buf[32], int64_t ms)
{
    snprintf(buf, 32, "%.10g", (double)ms / 1000.0);
    return buf;
}

/* Sends sig to every running rank and gives them grace_ms before SIGKILL. */
static void stop_with(struct job *j, int sig, int64_t grace_ms)
{
    if (j->phase != RUNNING) return;
    j->phase = STOPPING;
    j->phase_deadline = now_ms() + grace_ms;
    j->stop_sent = sig;
    j->stop_grace_ms = grace_ms;
    signal_all(j, sig);
}

void begin_stop(struct job *j) { stop_with(j, SIGTERM, j->o->grace_ms); }

static void begin_kill(struct job *j, bool interrupted)
{
    if (j->nrunning > 0 && j->phase != KILLING) {
        char s[32];
        if (interrupted)
            say(j->err, "interrupted while stopping; sending SIGKILL to %d rank(s)", j->nrunning);
        else if (j->phase == STOPPING)
            say(j->err, "%d rank(s) still running %s s after %s; sending SIGKILL", j->nrunning,
                seconds(s, j->stop_grace_ms), signal_name(j->stop_sent));
    }
    if (interrupted) j->hurry = true;
    j->phase = KILLING;
    j->phase_deadline = now_ms() + KILL_WAIT_MS;
    signal_all(j, SIGKILL);
}

/* Whether PROGRAM is timeout(1), whose status 124 means that its time ran out. */
static bool is_timeout_cmd(const char *path)
{
    const char *base = strrchr(path, '/');
    return strcmp(base != NULL ? base + 1 : path, "timeout") == 0;
}

/* How many such failures are named one by one before the rest are only counted. */
#define ALSO_NAMED 8

/*
 * A rank found ended in the same look as the failure that ends the attempt, before hooprun
 * stopped the others, is named too: which of two ranks already gone ended first cannot be told,
 * so the one reported first is only the one the kernel listed first. Every rank of a job that
 * the user stopped ended for that reason and is not named (nor any of an attempt that a timeout
 * or a start error ended: it has no failed rank).
 */
static void also_failed(struct job *j, const struct rank *rk, int wstatus)
{
    if (j->interrupted || j->failed_rank < 0) return;
    if (++j->also_failed > ALSO_NAMED) {
        if (j->also_failed == ALSO_NAMED + 1)
            say(j->err, "more ranks had failed too; not naming them one by one");
        return;
    }
    int sig = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
    const char *name = signal_name(sig);
    if (sig != 0 && name != NULL)
        say(j->err, "rank %d (pid %ld) had failed too: killed by signal %d (%s)", rk->rank,
            (long)rk->pid, sig, name);
    else if (sig != 0)
        say(j->err, "rank %d (pid %ld) had failed too: killed by signal %d", rk->rank,
            (long)rk->pid, sig);
    else
        say(j->err, "rank %d (pid %ld) had failed too: exited with status %d", rk->rank,
            (long)rk->pid, WEXITSTATUS(wstatus));
}

/* before_stop: the rank's end was collected before hooprun began stopping the job. */
static void rank_exited(struct job *j, struct rank *rk, int wstatus, bool before_stop)
{
    rk->running = false;
    j->nrunning--;
    /* What it wrote before dying goes out before the line that reports it. */
    stream_pump(&rk->out, 64);
    stream_pump(&rk->err, 64);
    sink_flush(j->out);

    bool failed = !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    if (!failed) return;
    if (j->ending) {
        if (before_stop) also_failed(j, rk, wstatus);
        return;
    }
    j->ending = true;
    j->failed_rank = rk->rank;
    int sig = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
    int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 1;
    const char *name = signal_name(sig);
    if (j->interrupted) {
        /* The user stopped the job (Ctrl-C, kill, a timeout(1) around hooprun) and we forwarded
         * the signal: the rank ended because it was asked to, which is no failure of its own. */
        const char *got = signal_name(j->stop_signal);
        if (sig != 0)
            say(j->err, "stopped by %s from outside hooprun: rank %d (pid %ld) ended by %s", got,
                rk->rank, (long)rk->pid, name != NULL ? name : "a signal");
        else
            say(j->err,
                "stopped by %s from outside hooprun: rank %d (pid %ld) exited with status %d", got,
                rk->rank, (long)rk->pid, code);
        j->status = 128 + j->stop_signal;
    } else if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
        /* Sent to the rank itself, not through us: someone stopped it, it did not crash. */
        say(j->err, "rank %d (pid %ld) was stopped by %s from outside hooprun", rk->rank,
            (long)rk->pid, name);
        j->status = 128 + sig;
    } else if (sig != 0) {
        const char *core = "";
#ifdef WCOREDUMP
        if (WCOREDUMP(wstatus)) core = " (core dumped)";
#endif
        if (name != NULL)
            say(j->err, "rank %d (pid %ld) was killed by signal %d (%s)%s", rk->rank, (long)rk->pid,
                sig, name, core);
        else
            say(j->err, "rank %d (pid %ld) was killed by signal %d%s", rk->rank, (long)rk->pid, sig,
                core);
        j->status = 128 + sig;
    } else if (code == 124 && is_timeout_cmd(j->prog_path)) {
        say(j->err,
            "rank %d (pid %ld) was stopped by its timeout(1): the time ran out (status 124)",
            rk->rank, (long)rk->pid);
        j->status = code;
    } else {
        say(j->err, "rank %d (pid %ld) exited with status %d", rk->rank, (long)rk->pid, code);
        j->status = code;
    }
    begin_stop(j);
}

static void reap(struct job *j)
{
    /* Every end already there is collected before any is handled: handling the first failure
     * stops the others, and those found ended beside it ended before that. */
    enum { BATCH = 64 };
    for (;;) {
        struct rank *rk[BATCH];
        int ws[BATCH], n = 0;
        bool before_stop = j->phase == RUNNING;
        while (n < BATCH) {
            int st;
            pid_t pid = waitpid(-1, &st, WNOHANG);
            if (pid < 0 && errno == EINTR) continue;
            if (pid <= 0) break;
            bool rank = false;
            for (int r = 0; r < j->started && !rank; r++) {
                if (j->ranks[r].pid == pid && j->ranks[r].running) {
                    rk[n] = &j->ranks[r];
                    ws[n++] = st;
                    rank = true;
                }
            }
            /* Something a rank left behind: its pid may be taken again by another of them. */
            for (int i = 0; i < j->nswept && !rank; i++)
                if (j->swept[i] == pid) j->swept[i--] = j->swept[--j->nswept];
            /* A child we had before the job: its pid may be taken by something a rank starts. */
            for (int i = 0; i < j->ninherited && !rank; i++)
                if (j->inherited[i] == pid) j->inherited[i--] = j->inherited[--j->ninherited];
        }
        for (int i = 0; i < n; i++) rank_exited(j, rk[i], ws[i], before_stop);
        if (n < BATCH) return;
    }
}

static void handle_signals(struct job *j)
{
    struct signalfd_siginfo si;
    for (;;) {
        ssize_t n = read(j->sigfd, &si, sizeof si);
        if (n < 0 && errno == EINTR) continue;
        if (n != (ssize_t)sizeof si) return;
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD || sig == SIGPIPE || !sigismember(&j->forward, sig)) continue;
        int64_t now = now_ms();
        if (j->interrupted && now - j->signal_ms < REPEAT_MS)
            continue; /* timeout(1) signals us and then our process group: one request */
        if (!j->interrupted) {
            j->stop_signal = sig;
            j->signal_ms = now;
        }
        j->interrupted = true;
        if (j->nrunning == 0) {
            /* The ranks are gone; what they left behind is being ended: now. */
            j->hurry = true;
        } else if (j->phase != RUNNING && (sig == SIGINT || sig == SIGTERM)) {
            /* Once the job is being stopped, another interrupt means "now". */
            begin_kill(j, true);
        } else if (j->phase != RUNNING) {
            signal_all(j, sig);
        } else {
            /* The ranks may handle it as they like, within the grace period. */
            stop_with(j, sig, j->o->signal_grace_ms);
        }
    }
}

/* Whether pid is a rank of this attempt that has not been reaped. */
static bool is_running_rank(const struct job *j, pid_t pid)
{
    for (int r = 0; r < j->started; r++)
        if (j->ranks[r].running && j->ranks[r].pid == pid) return true;
    return false;
}

/* Whether /proc/<pid>/stat shows a process that has not ended and whose parent is parent. */
static bool live_child(long pid, long parent)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) return false;
    buf[len] = '\0';
    /* "pid (comm) state ppid ...": comm may hold anything, so read from its last ')'. */
    const char *rp = strrchr(buf, ')');
    char state;
    long ppid;
    if (rp == NULL || sscanf(rp + 1, " %c %ld", &state, &ppid) != 2) return false;
    return ppid == parent && state != 'Z' && state != 'X';
}

/* Children from /proc/self/task/<tid>/children (we have one thread): only our own are read, not
 * the whole of /proc. Returns how many (at most cap in out), or -1 if the kernel lacks the file. */
static int children_file(pid_t *out, int cap, long self)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/children", self);
    FILE *f = fopen(path, "re");
    if (f == NULL) return -1;
    int n = 0;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1) {
        if (!live_child(pid, self)) continue;
        if (n < cap) out[n] = (pid_t)pid;
        n++;
    }
    fclose(f);
    return n;
}

/*
 * Our children that are alive, at most cap of them in out. Returns how many there are, or -1 if
 * /proc cannot be read. Only direct children are listed, and each is signalled before we reap it,
 * so no pid here can be someone else's.
 */
static int list_children(pid_t *out, int cap)
{
    long self = (long)getpid();
    int n = children_file(out, cap, self);
    if (n >= 0) return n;
    DIR *d = opendir("/proc");
    if (d == NULL) return -1;
    n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        long pid = strtol(e->d_name, NULL, 10);
        if (!live_child(pid, self)) continue;
        if (n < cap) out[n] = (pid_t)pid;
        n++;
    }
    closedir(d);
    return n;
}

static bool inherited(const struct job *j, pid_t pid)
{
    for (int i = 0; i < j->ninherited; i++)
        if (j->inherited[i] == pid) return true;
    return false;
}

/*
 * The processes the ranks started that outlived them (we are their subreaper): our children
 * that are alive and are neither running ranks nor children we had before the first rank (a
 * shell that runs "sleep 100 & exec hooprun ..." hands us its own). At most cap of them in out;
 * returns how many there are, or -1 if /proc cannot be read. What they started becomes ours in
 * turn once they are gone.
 */
static int list_strays(const struct job *j, pid_t *out, int cap)
{
    int n = list_children(out, cap);
    if (n <= 0) return n;
    int seen = n < cap ? n : cap, kept = 0;
    for (int i = 0; i < seen; i++)
        if (!is_running_rank(j, out[i]) && !inherited(j, out[i])) out[kept++] = out[i];
    return kept + (n - seen); /* those past cap are sorted out next time */
}

static bool swept_already(const struct job *j, pid_t pid)
{
    for (int i = 0; i < j->nswept; i++)
        if (j->swept[i] == pid) return true;
    return false;
}

/*
 * Once the ranks are gone, ends what they started that is still there: SIGTERM, then SIGKILL
 * when the grace period is over (the one the ranks were given, if they were being stopped); at
 * once on a signal from outside that comes once the ranks are gone, or on a second one that came
 * while they were being stopped (see handle_signals). Returns false when nothing is left (or we
 * give up).
 */
static bool sweep_strays(struct job *j, int64_t now)
{
    if (j->sweep == SWEEP_DONE) return false;
    if (j->nrunning == 0) {
        /* No child at all, which is the usual end: nothing to look for in /proc. */
        siginfo_t si;
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 && errno == ECHILD) {
            j->sweep = SWEEP_DONE;
            return false;
        }
    }
    pid_t kids[STRAY_CAP];
    int n = list_strays(j, kids, STRAY_CAP);
    if (n < 0) {
        say(j->err, "cannot look for processes that the ranks started: /proc: %s", strerror(errno));
        j->sweep = SWEEP_DONE;
        return false;
    }
    if (n == 0) {
        /* What is left has ended and waits to be reaped, or is a rank we gave up on, or cannot
         * be seen in /proc (then only until the deadline). */
        if (j->sweep == SWEEP_NONE || j->nrunning > 0 || now >= j->sweep_deadline)
            j->sweep = SWEEP_DONE;
        return j->sweep != SWEEP_DONE;
    }
    if (n > STRAY_CAP) n = STRAY_CAP; /* the others next time */

    if (j->sweep == SWEEP_NONE) {
        bool at_once = j->hurry || j->phase == KILLING ||
                       (j->phase == STOPPING && now >= j->phase_deadline);
        say(j->err, "%d process(es) that the ranks started outlived them; sending %s", n,
            at_once ? "SIGKILL" : "SIGTERM");
        if (at_once) {
            j->sweep = SWEEP_KILL;
            j->sweep_deadline = now + KILL_WAIT_MS;
        } else {
            j->sweep = SWEEP_TERM;
            j->sweep_deadline = j->phase == STOPPING ? j->phase_deadline : now + j->o->grace_ms;
        }
    } else if (j->sweep == SWEEP_TERM && (j->hurry || now >= j->sweep_deadline)) {
        char s[32];
        if (j->hurry)
            say(j->err, "interrupted; sending SIGKILL to %d process(es) that the ranks started", n);
        else
            say(j->err,
                "%d process(es) that the ranks started still running after the %s s grace period; "
                "sending SIGKILL",
                n, seconds(s, j->phase == STOPPING ? j->stop_grace_ms : j->o->grace_ms));
        j->sweep = SWEEP_KILL;
        j->sweep_deadline = now + KILL_WAIT_MS;
    } else if (j->sweep == SWEEP_KILL && now >= j->sweep_deadline) {
        say(j->err,
            "%d process(es) that the ranks started did not exit after SIGKILL; giving up "
            "on them",
            n);
        j->sweep = SWEEP_DONE;
        return false;
    }

    for (int i = 0; i < n; i++) {
        if (j->sweep == SWEEP_KILL) {
            (void)kill(kids[i], SIGKILL);
        } else if (!swept_already(j, kids[i]) && j->nswept < STRAY_CAP) {
            (void)kill(kids[i], SIGTERM);
            j->swept[j->nswept++] = kids[i];
        }
    }
    return true;
}

/* Appends a pollfd for every open pipe of the ranks at pfd[np], with map[np] naming its stream.
 * Returns the new count. */
static int poll_streams(const struct job *j, struct pollfd *pfd, struct stream **map, int np)
{
    for (int r = 0; r < j->started; r++) {
        struct stream *s2[2] = {&j->ranks[r].out, &j->ranks[r].err};
        for (int k = 0; k < 2; k++) {
            if (s2[k]->fd >= 0) {
                map[np] = s2[k];
                pfd[np++] = (struct pollfd){.fd = s2[k]->fd, .events = POLLIN};
            }
        }
    }
    return np;
}

/* Reads the pipes that poll found ready, from pfd[from] to pfd[np - 1]. */
static void pump_ready(const struct pollfd *pfd, struct stream **map, int from, int np)
{
    for (int i = from; i < np; i++)
        if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) stream_pump(map[i], READS_PER_ROUND);
}

void run_loop(struct job *j)
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

    bool gave_up = false; /* on ranks that SIGKILL did not end */
    for (;;) {
        reap(j);
        int64_t now = now_ms();
        bool ranks_gone = j->nrunning == 0 || gave_up;
        if (ranks_gone && !sweep_strays(j, now)) break;
        if (!ranks_gone && j->timeout_deadline >= 0 && now >= j->timeout_deadline &&
            j->phase == RUNNING) {
            say(j->err, "timeout: the job is still running after %s s; stopping all ranks",
                j->o->timeout_text);
            j->ending = true;
            j->status = 124;
            j->timed_out = true;
            begin_stop(j);
        }
        if (!ranks_gone && j->phase == STOPPING && now >= j->phase_deadline) begin_kill(j, false);
        if (!ranks_gone && j->phase == KILLING && now >= j->phase_deadline) {
            say(j->err, "%d rank(s) did not exit after SIGKILL; giving up on them", j->nrunning);
            gave_up = true;
            continue;
        }

        int64_t wait = POLL_CAP_MS;
        if (ranks_gone) {
            /* What a stray started becomes ours without a SIGCHLD when the stray ends: look
             * again soon. */
            wait = STRAY_POLL_MS;
            if (j->sweep_deadline - now < wait) wait = j->sweep_deadline - now;
        } else {
            if (j->phase == RUNNING && j->timeout_deadline >= 0 && j->timeout_deadline - now < wait)
                wait = j->timeout_deadline - now;
            if (j->phase != RUNNING && j->phase_deadline - now < wait)
                wait = j->phase_deadline - now;
        }
        if (wait < 0) wait = 0;

        if (pfd == NULL || map == NULL) {
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        int np = 0;
        pfd[np++] = (struct pollfd){.fd = j->sigfd, .events = POLLIN};
        np = poll_streams(j, pfd, map, np);
        int pr = poll(pfd, (nfds_t)np, (int)wait);
        if (pr < 0 && errno != EINTR) {
            say(j->err, "poll: %s", strerror(errno));
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        if (pr <= 0) continue;
        if (pfd[0].revents & POLLIN) handle_signals(j);
        pump_ready(pfd, map, 1, np);
        sink_flush(j->out);
        sink_flush(j->err);
    }

    /* Every rank is gone, and what they started; what they wrote is in the pipes, unless
     * something we could not end still holds a pipe open, which must not keep us here. */
    int64_t end = now_ms() + DRAIN_MS;
    if (pfd != NULL && map != NULL) {
        for (;;) {
            int np = poll_streams(j, pfd, map, 0);
            int64_t left = end - now_ms();
            if (np == 0 || left <= 0) break;
            int pr = poll(pfd, (nfds_t)np, left > 100 ? 100 : (int)left);
            if (pr < 0 && errno == EINTR) continue;
            if (pr <= 0)
                break; /* nothing more is coming right now: whoever holds the pipe is not us */
            pump_ready(pfd, map, 0, np);
        }
    }
    /* Explanations come on the ranks' stderr (hoop's log). */
    struct stream **errs = malloc((size_t)(j->started > 0 ? j->started : 1) * sizeof(*errs));
    if (errs != NULL) {
        for (int r = 0; r < j->started; r++) errs[r] = &j->ranks[r].err;
        report_explained(j->err, errs, j->started);
        free(errs);
    }
    for (int r = 0; r < j->started; r++) {
        stream_close(&j->ranks[r].out);
        stream_close(&j->ranks[r].err);
        stream_forget_explained(&j->ranks[r].err);
    }
    sink_flush(j->out);
    sink_flush(j->err);
    free(pfd);
    free(map);
}

bool may_restart(struct job *j)
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
    struct pollfd p = {.fd = j->sigfd, .events = POLLIN};
    int pr = poll(&p, 1, ms);
    if (pr > 0) handle_signals(j);
    return !j->interrupted;
}

/*
 * Gets a fresh rendezvous for the next attempt and resets the job for it. Returns false, having
 * said why where the reason is new, if the job cannot go on.
 */
bool prepare_restart(struct job *j)
{
    const struct opts *o = j->o;
    if (!o->port_given) {
        /* The old port may still be held by something the ranks started, or be reached by a
         * late peer of the old attempt: always take a different one. */
        char port[8];
        bool ok = false;
        for (int tries = 0; tries < 16 && !ok; tries++) {
            if (!find_free_port(o->master_addr, port)) return false;
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
            if (port_bindable(o->master_addr, j->master_port) != 0) break;
            int64_t left = deadline - now_ms();
            if (left <= 0 && !timeout_over(j)) {
                say(j->err, "not restarting: master port %s is still in use", j->master_port);
                return false;
            }
            if (left <= 0) break; /* said below */
            if (!said) {
                say(j->err, "waiting for master port %s to be free before restarting",
                    j->master_port);
                said = true;
            }
            if (!pause_ms(j, left < 100 ? (int)left : 100)) return false;
        }
    }
    if (timeout_over(j)) {
        say(j->err, "timeout: the job is past its %s s; not restarting", o->timeout_text);
        j->status = 124;
        return false;
    }
    if (j->interrupted) return false;

    j->restart++;
    say(j->err, "restarting all ranks (restart %ld of %ld) after rank %d failed; MASTER_PORT=%s",
        j->restart, o->max_restarts, j->failed_rank, j->master_port);
    memset(j->ranks, 0, (size_t)o->nproc * sizeof *j->ranks);
    j->started = 0;
    j->nrunning = 0;
    j->pgid = 0;
    j->phase = RUNNING;
    j->phase_deadline = 0;
    j->stop_sent = 0;
    j->stop_grace_ms = 0;
    j->hurry = false;
    j->sweep = SWEEP_NONE;
    j->sweep_deadline = 0;
    j->nswept = 0;
    j->ending = false;
    j->status = 0;
    j->failed_rank = -1;
    j->also_failed = 0;
    return true;
}

/* The children we have before starting a rank (a shell may exec us with its own): they are not
 * the job's, and are never ended with it. */
static bool note_inherited(struct job *j)
{
    for (int cap = 16;; cap *= 2) {
        pid_t *kids = malloc((size_t)cap * sizeof *kids);
        if (kids == NULL) return false;
        int n = list_children(kids, cap);
        if (n <= cap) {
            j->inherited = kids;
            j->ninherited = n > 0 ? n : 0;
            return true;
        }
        free(kids);
    }
}

bool setup_signals(struct job *j)
{
    static const int fwd[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    sigset_t block;
    sigemptyset(&block);
    sigemptyset(&j->forward);
    for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++) {
        struct sigaction cur;
        /* An ignored signal (nohup, a background job of a script) stays ignored for everyone. */
        if (sigaction(fwd[i], NULL, &cur) == 0 && cur.sa_handler == SIG_IGN) continue;
        sigaddset(&block, fwd[i]);
        sigaddset(&j->forward, fwd[i]);
    }
    /* SIGCHLD wakes the loop. A write to a closed stdout must fail with EPIPE, not kill us. */
    sigaddset(&block, SIGCHLD);
    sigaddset(&block, SIGPIPE);

    /* An inherited SIG_IGN on SIGCHLD would make the kernel reap the ranks behind our back. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    if (sigaction(SIGCHLD, &dfl, &j->orig_chld) != 0) return false;
    if (sigprocmask(SIG_BLOCK, &block, &j->orig_mask) != 0) return false;
    j->sigfd = signalfd(-1, &block, SFD_NONBLOCK | SFD_CLOEXEC);
    if (!note_inherited(j)) return false;
#ifdef PR_SET_CHILD_SUBREAPER
    /* What a rank starts and leaves behind becomes our child, not init's: we can find it and
     * end it with the job, and it cannot slip away by leaving the ranks' process group. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        say(j->err,
            "cannot be the subreaper of the ranks' processes (%s): what they leave behind "
            "outside their process group may outlive the job",
            strerror(errno));
#endif
    return j->sigfd >= 0;
}
