/* The communicator's error state, which every layer writes (the entry points, the lifecycle, the
 * scheduler, the runtime). */
#include <stdarg.h>
#include <stdio.h>

#include "runtime/comm.h"

hoop_result_t hoop__comm_error(hoop_comm_t *c, hoop_result_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[400];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->err_mu);
    snprintf(c->last_error, sizeof(c->last_error), "%s", msg);
    pthread_mutex_unlock(&c->err_mu);
    HOOP_INFO(&c->log, "%s: %s", hoop_error_string(code), msg);
    return code;
}

void hoop__comm_fail(hoop_comm_t *c, hoop_result_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[400];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->err_mu);
    int first = atomic_load(&c->aborted) == 0;
    if (first) {
        snprintf(c->fatal_msg, sizeof(c->fatal_msg), "%s", msg);
        atomic_store(&c->aborted, (int)code);
    }
    snprintf(c->last_error, sizeof(c->last_error), "%s", c->fatal_msg);
    pthread_mutex_unlock(&c->err_mu);
    if (first) HOOP_WARN(&c->log, "%s: %s; the communicator is aborted", hoop_error_string(code), msg);
}
