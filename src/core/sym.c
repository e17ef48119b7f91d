/*
 * The entry points of symmetric memory (hoop.h: hoop_mem_alloc, hoop_mem_free), apart from api.c
 * because they are collective exchanges of their own rather than calls of a kind: the checks a
 * call gets in api.c, then the allocation itself (local/sym.c), whose all-gathers are posted here
 * as calls, so that a rank in another call fails them as a mismatch and a lost rank fails them
 * on the others.
 */
#include "collectives/coll.h"
#include "runtime/comm.h"
#include "core/lifecycle.h"
#include "core/sched.h"

static hoop_result_t exchange(hoop_comm_t *c, const void *mine, void *all, size_t bytes,
                              const char *fn)
{
    return hoop__comm_exchange(c, HOOP__K_ALLGATHER, mine, all, bytes, fn);
}

static hoop_result_t check_comm(hoop_comm_t *c, const char *fn)
{
    if (c == NULL) return HOOP_ERR_INVALID_ARGUMENT;
    hoop_result_t ab = (hoop_result_t)atomic_load(&c->aborted);
    if (ab == HOOP_OK) return HOOP_OK;
    hoop__comm_set_last(c, "%s: the communicator was aborted: %.500s", fn, c->fatal_msg);
    return ab;
}

/* An allocation that ran out of memory aborted c outside a call: the abort takes effect now. */
static hoop_result_t after(hoop_comm_t *c, hoop_result_t rc)
{
    if (rc == HOOP_ERR_NO_MEMORY && atomic_load(&c->aborted)) hoop__sched_abort(c);
    return rc;
}

hoop_result_t hoop_mem_alloc(hoop_comm_t *c, size_t bytes, void **ptr)
{
    hoop_result_t rc = check_comm(c, "hoop_mem_alloc");
    if (rc != HOOP_OK) return rc;
    return after(c, hoop__collectives_mem_alloc(c, bytes, ptr, exchange));
}

hoop_result_t hoop_mem_register_fd(hoop_comm_t *c, int fd, size_t offset, size_t bytes, void **ptr)
{
    hoop_result_t rc = check_comm(c, "hoop_mem_register_fd");
    if (rc != HOOP_OK) return rc;
    return after(c, hoop__collectives_mem_register(c, fd, offset, bytes, ptr, exchange));
}

hoop_result_t hoop_mem_free(hoop_comm_t *c, void *ptr)
{
    hoop_result_t rc = check_comm(c, "hoop_mem_free");
    if (rc != HOOP_OK) return rc;
    return after(c, hoop__collectives_mem_free(c, ptr, exchange));
}
