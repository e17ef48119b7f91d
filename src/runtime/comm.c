/* The communicator's error state, which every layer writes (the entry points, the lifecycle, the
 * scheduler, the runtime). */
#define HOOP__LOG_SUBSYS HOOP__SUB_COLL /* of its INFO and TRACE lines (base/log.h) */
#include <stdarg.h>
#include <stdio.h>

#include "runtime/comm.h"

/* Under err_mu. */
static void show_last(hoop_comm_t *c, const char *msg)
{
    int next = 1 - atomic_load(&c->last_shown);
    snprintf(c->last_error[next], sizeof(c->last_error[next]), "%s", msg);
    atomic_store(&c->last_shown, next);
}

const char *hoop__comm_last(const hoop_comm_t *c)
{
    return c->last_error[atomic_load(&c->last_shown)];
}

void hoop__comm_set_last(hoop_comm_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[sizeof(c->last_error[0])];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->err_mu);
    show_last(c, msg);
    pthread_mutex_unlock(&c->err_mu);
}

hoop_result_t hoop__comm_error(hoop_comm_t *c, hoop_result_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[400];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->err_mu);
    show_last(c, msg);
    pthread_mutex_unlock(&c->err_mu);
    HOOP__INFO(&c->log, "%s: %s", hoop__error_string(code), msg);
    return code;
}

void hoop__comm_fail_calls(hoop_comm_t *c, uint64_t from)
{
    uint64_t cur = atomic_load(&c->fail_from);
    while (from < cur && !atomic_compare_exchange_weak(&c->fail_from, &cur, from)) {
    }
}

static void fail_v(hoop_comm_t *c, hoop_result_t code, uint64_t from, const char *fmt, va_list ap)
{
    char msg[400];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    /* Before aborted shows: a wait that sees the abort reads which calls it fails. */
    hoop__comm_fail_calls(c, from);
    pthread_mutex_lock(&c->err_mu);
    int first = atomic_load(&c->aborted) == 0;
    if (first) {
        snprintf(c->fatal_msg, sizeof(c->fatal_msg), "%s", msg);
        atomic_store(&c->aborted, (int)code);
        /* A timeout or a disagreement, here or at a peer that said so: the flight recorder's
         * dump is wanted (core/record.c). */
        if (code == HOOP_ERR_TIMEOUT || code == HOOP_ERR_MISMATCH) atomic_store(&c->abort_dumps, 1);
    }
    show_last(c, c->explained[0] != '\0' ? c->explained : c->fatal_msg);
    pthread_mutex_unlock(&c->err_mu);
    if (first)
        HOOP__WARN(&c->log, "%s: %s; the communicator is aborted", hoop__error_string(code), msg);
}

void hoop__comm_fail(hoop_comm_t *c, hoop_result_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(c, code, 0, fmt, ap);
    va_end(ap);
}

void hoop__comm_fail_from(hoop_comm_t *c, hoop_result_t code, uint64_t from, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(c, code, from, fmt, ap);
    va_end(ap);
}

void hoop__comm_explained(hoop_comm_t *c, const char *line)
{
    pthread_mutex_lock(&c->err_mu);
    snprintf(c->explained, sizeof(c->explained), "%s (%s)", line, c->fatal_msg);
    show_last(c, c->explained);
    pthread_mutex_unlock(&c->err_mu);
}

void hoop__comm_show_fatal(hoop_comm_t *c)
{
    pthread_mutex_lock(&c->err_mu);
    show_last(c, c->explained[0] != '\0' ? c->explained : c->fatal_msg);
    pthread_mutex_unlock(&c->err_mu);
}
