/* The communicator's scratch space, which algorithms stage data in. */
#include <stdint.h>
#include <stdlib.h>

#include "runtime/runtime.h"

void *hoop__scratch(hoop_comm_t *c, size_t bytes)
{
    if (bytes == 0) bytes = 1; /* a valid pointer even for empty buffers */
    if (bytes <= c->scratch_len) return c->scratch;
    /* Nothing in it outlives a call, so no copy; doubling keeps regrowth (and the page faults
     * of fresh memory, 20 us apiece on some VMs) to a few times in a job. */
    size_t want = c->scratch_len > 0 ? c->scratch_len : 4096;
    while (want < bytes && want <= SIZE_MAX / 2) want *= 2;
    if (want < bytes) want = bytes;
    void *p = malloc(want);
    if (p == NULL) p = malloc(want = bytes);
    if (p == NULL) {
        /* Asked for in the middle of a collective: its peers are in the call too, so the
         * communicator cannot go on. */
        hoop__comm_fail(c, HOOP_ERR_NO_MEMORY,
                        "cannot allocate %zu bytes of scratch space for a collective on rank %d",
                        bytes, c->rank);
        return NULL;
    }
    free(c->scratch);
    c->scratch = p;
    c->scratch_len = want;
    return p;
}
