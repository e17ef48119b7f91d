/*
 * hooprun's private header: its limits and timings, the options, the output sinks and streams,
 * and the job that every part works on.
 *
 *   options.c    the command line and the usage text
 *   spawn.c      what the ranks run and are given: the program, the master port, the
 *                environment (launcher variables, key, job id), fork and exec
 *   output.c     our own stdout/stderr (sinks) and the ranks' pipes read line by line (streams)
 *   supervise.c  signals, waiting for the ranks, stopping them and what they leave behind, exit
 *                statuses, restarts
 *   state.c      the state file of a running job, and --status (the live view)
 *   main.c       the attempts, from set-up to the exit status
 */
#ifndef HOOPRUN_H
#define HOOPRUN_H

#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

enum {
    STREAM_START = 4096,      /* a stream's first buffer, doubled while a line needs more */
    LINE_KEEP = 64 * 1024,    /* and shrunk back to this once a longer line is out */
    LINE_HOLD = 4 << 20,      /* a line longer than this goes out in pieces as it comes */
    SINK_CAP = 2 * LINE_KEEP, /* lines are gathered up to this; a longer one is written directly */
    MAX_NPROC = 4096,
    GRACE_MS = 3000,         /* default --kill-after for a failed rank or --timeout */
    SIGNAL_GRACE_MS = 30000, /* and for a signal forwarded from outside, as torchrun waits */
    REPEAT_MS = 200,         /* a signal this soon after the first is the same request */
    KILL_WAIT_MS = 5000,     /* after SIGKILL, how long to wait for the kernel to reap */
    STRAY_POLL_MS = 50,      /* how often to look for what the ranks left behind */
    STRAY_CAP = 1024,        /* of those, how many are signalled per look */
    EXEC_WAIT_MS = 10000,    /* fork -> exec */
    DRAIN_MS = 2000,         /* after the last rank exits, for output still in the pipes */
    WRITE_STALL_MS = 30000,  /* our own stdout/stderr refusing data */
    POLL_CAP_MS = 1000,
    PORT_WAIT_MS = 10000, /* before a restart, for a given master port to be free again */
    MAX_RESTARTS = 1000000,
    READS_PER_ROUND = 8, /* fairness between chatty and quiet ranks */
};

/* ---- options.c ---------------------------------------------------------------------------- */

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
    bool no_bind; /* --bind none */
    bool has_timeout;
    double timeout_s;
    const char *timeout_text;
    int64_t grace_ms;        /* --kill-after: after a failed rank or --timeout */
    int64_t signal_grace_ms; /* --kill-after: after a forwarded signal */
    char **prog_argv;
};

/* Returns -1 to go on, or an exit status (0 after --help/--version, 2 on bad usage). */
int parse_args(int argc, char **argv, struct opts *o);

/* ---- output.c ----------------------------------------------------------------------------- */

/* One of our own output streams. Whole lines are appended, so ranks never interleave mid-line. */
struct sink {
    int fd;
    bool broken;   /* the reader went away: output is dropped, the job goes on */
    bool mid_line; /* the last byte out was not a newline (a rank's last line, --no-prefix) */
    size_t len;
    char buf[SINK_CAP];
};

/* One pipe from a rank (its stdout or its stderr). */
struct stream {
    int fd; /* -1 once closed */
    struct sink *sink;
    struct sink *notes; /* where to say that a line had to be cut */
    int rank;
    const char *prefix;
    size_t plen;
    bool cut; /* part of the current line is out already (no memory to hold it whole) */
    char *buf;
    size_t len, cap, scanned;
    /* The rank's first line that explained a failed call (hoop's WARN "... waits for rank N;
     * ..."), without its prefix: for the report at the end of the job, kept past stream_close
     * until stream_forget_explained. NULL for none. */
    char *explained;
};

void sink_flush(struct sink *s);
void sink_put(struct sink *s, const char *prefix, size_t plen, const char *data, size_t dlen,
              bool add_newline);
/* A message of the launcher itself, ordered with the rank output already read. */
void say(struct sink *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A stream not open yet (fd -1) with its first buffer; false without memory for it. */
bool stream_init(struct stream *st, struct sink *sink, struct sink *notes, int rank,
                 const char *prefix, size_t plen);
/* Puts out a last line without newline, closes the pipe and frees the buffer. */
void stream_close(struct stream *st);
/* Reads what the pipe holds (at most max_reads reads). */
void stream_pump(struct stream *st, int max_reads);
/* The report at the end of a job whose ranks explained failed calls: per call, the ranks that
 * failed in it and what the first of them said of the others. Nothing where none did. */
void report_explained(struct sink *err, struct stream *const *streams, int n);
/* Frees what note of an explanation the stream kept (it outlives stream_close, for the report). */
void stream_forget_explained(struct stream *st);

/* ---- the job ------------------------------------------------------------------------------ */

struct rank {
    pid_t pid;
    int rank;
    bool running;
    char prefix[24];
    struct stream out, err;
    int exec_fd; /* closes when the rank has exec'd, or carries exec's errno; -1 once read */
};

enum phase { RUNNING, STOPPING, KILLING };

/* Ending what the ranks left behind, once they are gone. */
enum sweep { SWEEP_NONE, SWEEP_TERM, SWEEP_KILL, SWEEP_DONE };

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
    sigset_t forward; /* forwarded signals that were not ignored when we started */
    struct sigaction orig_chld;
    struct rlimit orig_nofile;
    bool nofile_raised;
    enum phase phase;
    int64_t phase_deadline;
    int stop_sent;         /* what began STOPPING: SIGTERM, or the signal forwarded from outside */
    int64_t stop_grace_ms; /* the grace period STOPPING was given */
    bool hurry;            /* a second signal from outside: SIGKILL for everything now */
    enum sweep sweep;
    int64_t sweep_deadline;
    int nswept;             /* entries in swept */
    pid_t swept[STRAY_CAP]; /* children of ours already sent SIGTERM */
    pid_t *inherited;       /* children we had before the first rank: never ended */
    int ninherited;
    int64_t timeout_deadline; /* -1: none */
    bool ending;              /* a failure, a timeout or a start error decided the status */
    int status;
    int failed_rank; /* the rank whose failure ended this attempt; -1: none */
    int also_failed; /* ranks of this attempt that failed after (or with) failed_rank */
    bool timed_out;
    bool interrupted;    /* a signal came to us: the user wants the job over */
    int stop_signal;     /* the first such signal */
    int64_t signal_ms;   /* when it came */
    long restart;        /* restarts made so far */
    char master_port[8]; /* of this attempt */
    struct sink *out, *err;
    bool strip_auth;  /* leave HOOP_AUTH_KEY(_FILE) of our environment out of the ranks' */
    char *auth_env;   /* "HOOP_AUTH_KEY=<64 hex digits>" made for this job, or NULL */
    char job_env[64]; /* "HOOP_JOB_ID=hooprun-<16 hex digits>", or "" */
    cpu_set_t *bind;  /* per local rank, the CPUs it is bound to; NULL: no binding */
};

/* ---- spawn.c ------------------------------------------------------------------------------ */

/* PROGRAM resolved as execvp would: a malloc'ed path, or NULL with *status set (126 or 127). */
char *resolve_program(const char *prog, int *status);
/* Binds port 0 on the master address and keeps the number the kernel picked. */
bool find_free_port(const char *addr, char out[8]);
/* 1 if the master port can be listened on here, 0 if something listens on it, -1 if the
 * address is not one of this host's. */
int port_bindable(const char *addr, const char *port);
/* Decides the ranks' key: none (--no-auth), the one in our environment, or a fresh one. */
bool setup_auth(struct job *j);
/* OMP_NUM_THREADS=1 for the ranks unless it is set or there is one rank, as torchrun does. */
void setup_threads(const struct job *j);
/* The CPUs of each rank (--bind auto): set when there are 2 ranks or more and no more ranks than
 * CPUs in our own affinity mask. Silent; no binding when it cannot be had. */
void setup_bind(struct job *j);
/* Names a single-node job (HOOP_JOB_ID) unless the environment already does. */
void setup_job_id(struct job *j);
/* Starts one rank. Returns false (after saying why and setting the job status) on failure. */
bool start_rank(struct job *j, int local);
/* After the ranks were started: waits (at most EXEC_WAIT_MS) for each to have exec'd. false
 * when one could not, said once, with the job ending. */
bool await_execs(struct job *j);

/* ---- supervise.c -------------------------------------------------------------------------- */

/* Blocks the signals we handle and opens the signalfd that delivers them; makes us the reaper
 * of what the ranks leave behind. */
bool setup_signals(struct job *j);
/* SIGTERM to every rank, SIGKILL after the grace period (--kill-after). */
void begin_stop(struct job *j);
/* Until every rank of the attempt is gone, and what they started, and their output is out. */
void run_loop(struct job *j);
/* Whether the attempt that just ended is one to restart after. */
bool may_restart(struct job *j);
/* A fresh rendezvous for the next attempt; false, having said why, if the job cannot go on. */
bool prepare_restart(struct job *j);

/* ---- state.c ------------------------------------------------------------------------------ */

/* Writes this hooprun's state file (where the store is, the key): at each attempt's start. */
void state_write(struct job *j);
/* Removes it, at exit. */
void state_remove(void);
/* hooprun --status [--json] [--timeout S] [PID|JOBID]: the exit status. */
int status_main(int argc, char **argv);

#endif
