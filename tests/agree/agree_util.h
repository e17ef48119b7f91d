/*
 * Shared by the agreement tests (agree.c, scenarios.c): starting a job of rank processes with
 * fork() (no hooprun: it stops a job at its first failure, before the others report), collecting
 * their report lines, and running one collective from one rank's point of view with its result
 * checked against a reference computed here, never by the library.
 *
 * A "view" is what one rank believes the call is (collective, count, dtype, op, root, algorithm).
 * When ranks disagree no answer is right for all of them; a rank that returns HOOP_OK must at least
 * hold what its own view says, or it returned wrong data. Inputs depend only on (rank, element,
 * salt), so every rank can compute what any other rank contributed.
 */
#ifndef AGREE_UTIL_H
#define AGREE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hoop.h"

#define AG_MAXPROC 8

int ag_free_port(void);
const char *ag_code_name(int code);
/* Unsets every launcher and HOOP_* variable a rank could inherit from the test's caller. */
void ag_clean_environment(void);
/* A hash of the launcher's job-id variables: inputs salted with it differ between two jobs, so a
 * rank that joined another job's ranks gets a result its own view calls wrong. */
uint32_t ag_job_salt(void);
/* One report line to the driver (one write() below PIPE_BUF, so lines never interleave). */
void ag_say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- jobs ---- */

/* Sets the environment of one slot, in the child, before the rank function runs. */
typedef void (*ag_env_fn)(void *ctx, int slot);
/* The rank's program; fd is its report pipe. Its return value is the exit status. */
typedef int (*ag_rank_fn)(void *ctx, int slot, int fd);

typedef struct ag_job {
    int nproc, port;
    pid_t pid[AG_MAXPROC];
    int exited[AG_MAXPROC], wstatus[AG_MAXPROC];
    int rfd;   /* read end of the report pipe; -1 once every writer is gone */
    char *out; /* every report line so far */
    size_t len, cap;
    size_t used;            /* how far a consumer has read out */
    double t_start, t_last; /* start, last report line */
    char dir[64];           /* slotN.log: each process's stderr (the library's log) */
} ag_job_t;

/* Forks nproc processes with MASTER_ADDR=127.0.0.1, MASTER_PORT=port, then env(ctx, slot), then
 * exits each with fn(ctx, slot, fd). Returns 0, or -1 (the job is then empty). */
int ag_job_start(ag_job_t *j, int nproc, int port, ag_env_fn env, ag_rank_fn fn, void *ctx);
/* Reads reports of every job and reaps their processes, waiting at most ms for something. */
void ag_jobs_pump(ag_job_t **jobs, int n, int ms);
int ag_job_done(const ag_job_t *j); /* every process exited and every line read */
void ag_job_kill(ag_job_t *j);
/* The next complete report line after j->used (NUL-terminated in place), or NULL. */
char *ag_job_next_line(ag_job_t *j);
void ag_job_log_path(const ag_job_t *j, int slot, char *buf, size_t n);
/* Prints every slot's log, indented; removes the logs and the directory unless keep. */
void ag_job_dump_logs(ag_job_t *j, int print);
void ag_job_free(ag_job_t *j);

/* Whether one WARN line of the log holds every needle; a needle "a|b" takes either. */
int ag_log_has_warn(const char *path, const char *const *needles, int n);
/* The first line of the log holding needle, copied into buf (without the newline); 0 if none. */
int ag_log_line(const char *path, const char *needle, char *buf, size_t n);

/* ---- calls ---- */

enum ag_coll {
    AG_ALLREDUCE,
    AG_BROADCAST,
    AG_REDUCE,
    AG_ALLGATHER,
    AG_GATHER,
    AG_SCATTER,
    AG_REDUCE_SCATTER,
    AG_ALLTOALL,
    AG_BARRIER,
    AG_NCOLL
};
extern const char *const ag_coll_names[AG_NCOLL];
enum { AG_NALGO = 5 };
extern const char *const ag_algo_names[AG_NALGO]; /* ring, rd, ps, ps-sharded, rabenseifner */

/* Input values: any 32-bit pattern (uint32 sums wrap, exact); small non-negative integers, exact
 * in every dtype; small signed integers (int32, for every op); 21-bit signed (int32 sums). */
enum ag_vk { AG_VK_FULL, AG_VK_SMALL, AG_VK_SIGNED, AG_VK_MED };

typedef struct ag_spec {
    int coll; /* enum ag_coll */
    hoop_dtype_t dtype;
    hoop_op_t op;
    int root;
    int algo; /* index into ag_algo_names, or -1: leave the communicator's choice */
    size_t count;
    int vk;          /* enum ag_vk */
    uint32_t salt;   /* varies the inputs from call to call */
    int nonblocking; /* the i-variant and hoop_wait */
} ag_spec_t;

typedef struct ag_outcome {
    hoop_result_t rc;
    int wrong; /* HOOP_OK with a result that differs from the view's reference, or a
                          * send buffer or a guard byte changed (whatever rc says) */
    double ms;
    char why[200]; /* what was wrong */
    char msg[600]; /* hoop_comm_last_error() when rc != HOOP_OK */
} ag_outcome_t;

int64_t ag_val(int vk, int rank, size_t j, uint32_t salt);
/* Runs s on c from this rank's view (hoop_comm_set_algo first when s->algo >= 0) and checks it. */
hoop_result_t ag_run(hoop_comm_t *c, const ag_spec_t *s, ag_outcome_t *o);
/* Where ag_run's buffers come from: two regions of cap bytes each (symmetric memory, say), used
 * where a call's buffers and their guards fit; NULL: malloc, as without. */
void ag_use_buffers(uint8_t *send, uint8_t *recv, size_t cap);
/* "allreduce(count=8, uint32, sum, algo=rd)" */
const char *ag_spec_describe(const ag_spec_t *s, char *buf, size_t n);

#endif
