/* Schedule tracing (hoop_comm_set_trace, HOOP_TRACE=1): the line of one step of one call. */
#include <stdarg.h>
#include <stdio.h>

#include "runtime/runtime.h"

void hoop__trace_emit(const hoop__call_t *call, int step, const char *fmt, ...)
{
    hoop_comm_t *c = call->comm;
    char line[512];
    int n;
    if (step >= 0)
        n = snprintf(line, sizeof(line), "%s#%llu %s step %d: ", hoop__kind_name(call->kind),
                     (unsigned long long)call->seq, hoop__wire_algo_name(call->algo), step);
    else
        n = snprintf(line, sizeof(line), "%s#%llu %s: ", hoop__kind_name(call->kind),
                     (unsigned long long)call->seq, hoop__wire_algo_name(call->algo));
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line)) vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    c->trace_fn(c->trace_ctx, line);
}

void hoop__trace_to_log(void *ctx, const char *line)
{
    const hoop_comm_t *c = ctx;
    if (c->log.out == NULL) return;
    char buf[700];
    snprintf(buf, sizeof(buf), "%s:%d trace %s\n", c->host, c->rank, line);
    hoop__log_put(c->log.out, buf);
}
