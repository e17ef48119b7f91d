/* What every transport shares: the check of a transfer's memory type at post(), and the sentence
 * for a descriptor that could not be had. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "transport/transport.h"

int hoop__tp_refuse(const char *name, uint32_t caps, const hoop__tp_params_t *p, hoop__xfer_t *x)
{
    int type = (int)x->mem.type;
    int known = type >= 0 && type < HOOP__MEM_COUNT;
    if (known && (caps & HOOP__TP_MEM(type))) return 0;
    char msg[320], takes[96] = "";
    const char *what = x->dir == HOOP__XFER_SEND ? "a send to" : "a receive from";
    if (!known) {
        snprintf(msg, sizeof(msg), "%s: %s rank %d names memory type %d, which does not exist",
                 name, what, x->peer, type);
    } else {
        size_t o = 0;
        for (int t = 0; t < HOOP__MEM_COUNT && o + 16 < sizeof(takes); t++)
            if (caps & HOOP__TP_MEM(t))
                o += (size_t)snprintf(takes + o, sizeof(takes) - o, "%s%s", o ? ", " : "",
                                      hoop__mem_type_name(t));
        snprintf(msg, sizeof(msg), "%s cannot move %s memory (%s rank %d): it takes %s memory only",
                 name, hoop__mem_type_name(type), what, x->peer, o ? takes : "no");
    }
    x->status = known ? HOOP_ERR_UNSUPPORTED : HOOP_ERR_INVALID_ARGUMENT;
    x->done = 1;
    p->report(p->report_ctx, x->status, x->peer, msg);
    return 1;
}

const char *hoop__fd_error(int err, char *buf, size_t n)
{
    struct rlimit rl;
    char hard[32] = "unlimited";
    if (err == ENFILE) {
        snprintf(buf, n, "%s: the system as a whole is out of file descriptors (fs.file-max)",
                 strerror(err));
    } else if (err == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_max != RLIM_INFINITY)
            snprintf(hard, sizeof(hard), "%llu", (unsigned long long)rl.rlim_max);
        snprintf(buf, n,
                 "%s: this process may have %llu open (hard limit %s): raise the limit "
                 "(ulimit -n, or LimitNOFILE= for a service), or use fewer communicators",
                 strerror(err), (unsigned long long)rl.rlim_cur, hard);
    } else
        snprintf(buf, n, "%s", strerror(err));
    return buf;
}
