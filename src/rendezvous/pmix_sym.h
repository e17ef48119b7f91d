/* The libpmix functions the PMIx rendezvous uses, as a table of pointers filled at run time from
 * dlopen("libpmix.so.2"): libhoop never links against PMIx, so one binary runs where it is not
 * installed, and only a rank started by a PMIx launcher (mpirun, srun --mpi=pmix) loads it. The
 * table belongs to whoever loads it; nothing here is global. PMIx's types come from its header
 * (libpmix-dev), whose layout the standard keeps stable across releases 3 to 5. */
#ifndef HOOP_PMIX_SYM_H
#define HOOP_PMIX_SYM_H

#include <stddef.h>

#include <pmix.h>

#define HOOP__PMIX_SONAME "libpmix.so.2"

typedef struct hoop__pmix {
    void *lib; /* dlopen handle; NULL when not loaded */
    pmix_status_t (*init)(pmix_proc_t *proc, pmix_info_t info[], size_t ninfo);
    pmix_status_t (*finalize)(const pmix_info_t info[], size_t ninfo);
    pmix_status_t (*put)(pmix_scope_t scope, const pmix_key_t key, pmix_value_t *val);
    pmix_status_t (*commit)(void);
    pmix_status_t (*fence)(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                           size_t ninfo);
    pmix_status_t (*get)(const pmix_proc_t *proc, const pmix_key_t key, const pmix_info_t info[],
                         size_t ninfo, pmix_value_t **val);
    const char *(*error_string)(pmix_status_t status);
} hoop__pmix_t;

/* Fills t from libpmix.so.2. 0 on success; -1 with a sentence in err (not installed, or too old). */
int hoop__pmix_load(hoop__pmix_t *t, char *err, size_t errlen);
/* dlclose: the library stays mapped (RTLD_NODELETE), only the handle is given back. */
void hoop__pmix_unload(hoop__pmix_t *t);

#endif
