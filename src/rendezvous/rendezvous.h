/* The rendezvous: where a rank finds the others at init, and who it is among them. An init method
 * ("env://", "tcp://HOST:PORT", "file:///PATH") and the variables launchers export resolve to a
 * hoop__rdv_t; its method names the kind of store (store.h) that the ranks then meet in. */
#ifndef HOOP_RENDEZVOUS_H
#define HOOP_RENDEZVOUS_H

#include <stddef.h>

#include "base/auth.h"
#include "base/log.h"
#include "hoop.h"

/* The most ranks a communicator may have: far more than any job runs, and little enough that its
 * per-rank tables are allocated at once rather than failing later. */
#define HOOP__MAX_RANKS (1 << 20)

/* Where and who: what an init method resolves to. */
typedef struct hoop__rdv {
    char method[8];  /* the store's kind: "tcp" or "file" */
    char host[256];  /* tcp: host name or address of rank 0's store */
    int port;        /* tcp */
    char path[1024]; /* file */
    int rank, size;
    int local_rank, local_size; /* -1 where unknown */
    hoop__auth_key_t auth;      /* tcp: every connection to the store proves this key (auth.set) */
    /* The job this rank belongs to, from the launcher ("" where none says): HOOP_JOB_ID, else
     * torchrun's TORCHELASTIC_RUN_ID, else Slurm's SLURM_JOB_ID.SLURM_STEP_ID, else Open MPI's
     * PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid. job_from names the variable. */
    char job[128];
    char job_from[48];
    /* env:// without both MASTER_ADDR and MASTER_PORT: the launcher gives what they do not.
     * "slurm": host and port were derived from Slurm's variables at resolve (slurm.h); "pmix":
     * rank 0 publishes its store's address through PMIx in hoop__rdv_exchange (pmix.h), with
     * slurm_ok where Slurm's derivation stands ready should libpmix not load. "" otherwise. */
    char via[8];
    int addr_given, port_given; /* MASTER_ADDR / MASTER_PORT set: explicit wins over a launcher */
    int slurm_ok;
} hoop__rdv_t;

/* Resolves init_method ("env://", "tcp://H:P", "file:///P", NULL = "env://"; "slurm://" and "pmix://"
 * force that launcher's way for env://) and rank/size (-1 = from
 * the environment: RANK/WORLD_SIZE, then SLURM_PROCID/SLURM_NTASKS, then OMPI_COMM_WORLD_RANK/SIZE),
 * and the key of HOOP_AUTH_KEY / HOOP_AUTH_KEY_FILE into out->auth (the caller wipes it with
 * hoop__auth_key_wipe). On error writes a sentence into err. */
hoop_result_t hoop__rdv_resolve(const char *init_method, int rank, int size, hoop__rdv_t *out,
                                char *err, size_t errlen);

/* What a resolved rendezvous needs from its launcher before the store opens: nothing except for
 * via "pmix", where every process of the launch takes part (within timeout_s) and rank 0's store
 * address arrives in host and port. A launcher without a loadable libpmix falls back to Slurm's
 * variables where there are some, and is otherwise a sentence saying what is missing. */
hoop_result_t hoop__rdv_exchange(hoop__rdv_t *rdv, double timeout_s, const hoop__log_t *log,
                                 char *err, size_t errlen);

#endif
