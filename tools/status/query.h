/* The live view of a running job (docs/reliability.md), shared by hoop-status and
 * hooprun --status: reads the ranks' addresses from the job's rendezvous store (kept by rank 0
 * while its communicator lives), asks every rank's status socket where it is (core/explain.c's
 * datagrams, sealed with the job's key where it has one) and says it, one line per rank and a
 * summary, or as JSON. Read-only: a rank answers from its flight recorder on a thread of its
 * own, and nothing here waits past its deadline. */
#ifndef HOOP_STATUS_QUERY_H
#define HOOP_STATUS_QUERY_H

#include <stdint.h>
#include <stdio.h>

#include "base/auth.h"
#include "base/wire.h"
#include "hoop.h"

enum { HOOP__SQ_SILENT, HOOP__SQ_ANSWERED, HOOP__SQ_REFUSED, HOOP__SQ_UNKNOWN };

typedef struct hoop__sq_rank {
    int how;              /* HOOP__SQ_* */
    hoop__status_msg_t a; /* the answer, with HOOP__SQ_ANSWERED */
    char host[64];        /* as the rank published it ("" where it did not) */
    int pid;
} hoop__sq_rank_t;

typedef struct hoop__sq {
    char where[300]; /* the store, HOST:PORT */
    uint64_t comm_id;
    char job[128]; /* "" for none */
    int size;
    int sealed; /* the questions were sealed with the job's key */
    hoop__sq_rank_t *ranks;
    double took_s; /* from the first connect to the last answer or the deadline */
    int strays;    /* datagrams that came back but were no answer (unsealed, another key...) */
} hoop__sq_t;

typedef struct hoop__sq_opts {
    const char *host;
    int port;
    double timeout_s; /* the whole query's, store included */
    const hoop__auth_key_t
        *key; /* HOOP_AUTH_KEY as the ranks read it (unbound); NULL or unset: none */
    /* Tests: seal the questions with this key instead of the job's (a wrong one gets no answer). */
    const hoop__auth_key_t *seal_override;
} hoop__sq_opts_t;

/* Runs the query into out (free with hoop__sq_free). HOOP_OK once the addresses were read, whatever
 * the ranks answered; otherwise a sentence in err (no store there, a wrong key, no communicator
 * published yet). Bounded by o->timeout_s (and a second's grace per store exchange). */
hoop_result_t hoop__sq_run(const hoop__sq_opts_t *o, hoop__sq_t *out, char *err, size_t errlen);
void hoop__sq_free(hoop__sq_t *q);
/* One line per rank and a summary (the slowest rank, the ranks not answering); or JSON. */
void hoop__sq_print(const hoop__sq_t *q, int json, FILE *out);
/* The slowest rank: furthest behind (lowest call number, a finished call behind an unfinished
 * one of the next number), the oldest among equals; -1 where no rank answered with a call, or
 * where every answering rank is at the same place. */
int hoop__sq_slowest(const hoop__sq_t *q);

/* The command line both tools share: [--json] [--timeout S]; argv[*i] onward. 0, or -1 with a
 * sentence on stderr. */
int hoop__sq_options(int argc, char **argv, int *i, int *json, double *timeout_s, const char *prog);

#endif
