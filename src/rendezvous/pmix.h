/* PMIx as a launcher (mpirun, srun --mpi=pmix): rank 0 picks a free port for its tcp store and
 * publishes "PORT HOST" under the key "hoop.store" (PMIx_Put, PMIx_Commit); every process of the
 * launch takes part in one PMIx_Fence that collects it; the others read it back with PMIx_Get.
 * Private to src/rendezvous. */
#ifndef HOOP_PMIX_H
#define HOOP_PMIX_H

#include <stddef.h>

#include "hoop.h"
#include "rendezvous/rendezvous.h"

/* Fills rdv->host and rdv->port (each unless MASTER_ADDR / MASTER_PORT gave it) from rank 0,
 * within timeout_s, libpmix's calls included: they run on a helper thread, left behind where the
 * server does not answer in time (HOOP_ERR_TIMEOUT, naming the call and the server). *missing = 1
 * when libpmix cannot be loaded or its server reached at all (the caller may fall back); 0 for a
 * failure of the exchange itself. A sentence into err. */
hoop_result_t hoop__pmix_exchange(hoop__rdv_t *rdv, double timeout_s, char *err, size_t errlen,
                                  int *missing);

#endif
