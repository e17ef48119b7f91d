/* What the one-host engines share (local.h): their state per communicator, the agreement step of
 * the calls they do not run, and the verdicts' words. */
#include <stdlib.h>

#include "local/shm_coll.h"

const char *hoop__verdict_text(hoop__verdict_t v)
{
    static const char *const text[HOOP__VERDICT_COUNT] = {
        "the engine ran it",
        "every rank's buffers are host memory",
        "every rank's buffers are device memory that may go over CUDA IPC",
        "not every rank's buffers are host memory, nor all device memory that CUDA IPC may take",
        "no shared area (a rank could not map it)",
        "CUDA IPC cannot run it on every rank",
    };
    return (unsigned)v < HOOP__VERDICT_COUNT ? text[v] : "?";
}

void hoop__local_close(hoop_comm_t *c)
{
    if (c->local == NULL) return;
    hoop__shc_close(c);
    hoop__ipc_close(c);
    hoop__sym_close(c);
    free(c->local);
    c->local = NULL;
}

void hoop__local_abort(hoop_comm_t *c) { hoop__shc_abort(c); }

hoop_result_t hoop__local_agree(hoop__call_t *call, int make, hoop__verdict_t *v)
{
    hoop__shc_t *a = NULL;
    *v = HOOP__VERDICT_NO_AREA;
    if (make) {
        hoop_result_t rc = hoop__shc_get(call, &a);
        if (rc != HOOP_OK) return rc;
    } else {
        a = hoop__shc_ready(call->comm);
    }
    if (a == NULL) return HOOP_OK;
    hoop_result_t rc = hoop__shc_step(call, a, hoop__shc_flags(call));
    *v = a->verdict;
    return rc;
}
