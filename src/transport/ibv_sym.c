/* Filling the verbs function table (ibv_sym.h) from libibverbs.so.1 at run time. */
#include "transport/ibv_sym.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* The data path of verbs.h is static inline (it calls through the context's ops, which the provider
 * filled), so there is no symbol to resolve: these do what the header's inlines do, and the table
 * points at them like at everything else, so that a test double can replace them too. */
static int query_port_ops(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
    memset(a, 0, sizeof(*a));
    struct verbs_context *vc = verbs_get_ctx_op(c, query_port);
    if (vc != NULL) return vc->query_port(c, port, a, sizeof(*a));
    /* A provider from before the extended context: the old entry fills the leading, older part of
     * the struct, which holds every field hoop reads. */
    return c->ops._compat_query_port(c, port, (struct _compat_ibv_port_attr *)a);
}

static int req_notify_cq_ops(struct ibv_cq *cq, int solicited_only)
{
    return cq->context->ops.req_notify_cq(cq, solicited_only);
}

static int poll_cq_ops(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    return cq->context->ops.poll_cq(cq, n, wc);
}

static int post_send_ops(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    return qp->context->ops.post_send(qp, wr, bad);
}

static int post_recv_ops(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return qp->context->ops.post_recv(qp, wr, bad);
}

typedef struct {
    const char *name;
    size_t off; /* of the pointer in hoop__ibv_t */
    int required;
} sym_t;

/* clang-format off */
#define SYM(field, name, required) {name, offsetof(hoop__ibv_t, field), required}
/* clang-format on */

/* Every exported function of the table, with the name it has in the library (query_gid_ex's is the
 * exported worker behind the header's inline of the same name). The versions are the defaults a
 * link would pick. */
static const sym_t syms[] = {
    SYM(get_device_list, "ibv_get_device_list", 1),
    SYM(free_device_list, "ibv_free_device_list", 1),
    SYM(get_device_name, "ibv_get_device_name", 1),
    SYM(open_device, "ibv_open_device", 1),
    SYM(close_device, "ibv_close_device", 1),
    SYM(query_device, "ibv_query_device", 1),
    SYM(query_gid, "ibv_query_gid", 1),
    SYM(query_gid_ex, "_ibv_query_gid_ex", 0),
    SYM(get_async_event, "ibv_get_async_event", 1),
    SYM(ack_async_event, "ibv_ack_async_event", 1),
    SYM(alloc_pd, "ibv_alloc_pd", 1),
    SYM(dealloc_pd, "ibv_dealloc_pd", 1),
    SYM(reg_mr, "ibv_reg_mr", 1),
    SYM(reg_mr_iova2, "ibv_reg_mr_iova2", 0),
    SYM(dereg_mr, "ibv_dereg_mr", 1),
    SYM(create_comp_channel, "ibv_create_comp_channel", 1),
    SYM(destroy_comp_channel, "ibv_destroy_comp_channel", 1),
    SYM(create_cq, "ibv_create_cq", 1),
    SYM(destroy_cq, "ibv_destroy_cq", 1),
    SYM(get_cq_event, "ibv_get_cq_event", 1),
    SYM(ack_cq_events, "ibv_ack_cq_events", 1),
    SYM(create_qp, "ibv_create_qp", 1),
    SYM(modify_qp, "ibv_modify_qp", 1),
    SYM(query_qp, "ibv_query_qp", 1),
    SYM(destroy_qp, "ibv_destroy_qp", 1),
    SYM(wc_status_str, "ibv_wc_status_str", 1),
    SYM(event_type_str, "ibv_event_type_str", 1),
    SYM(port_state_str, "ibv_port_state_str", 1),
    SYM(fork_init, "ibv_fork_init", 1),
    SYM(is_fork_initialized, "ibv_is_fork_initialized", 0),
};

/* The test double at path, if any (HOOP_TEST_IBV_DOUBLE; ibv_sym.h). 0, or -1 with t unloaded. */
static int load_double(hoop__ibv_t *t, const char *path, char *err, size_t errlen)
{
    if (path == NULL || path[0] == '\0') return 0;
    void *d = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    void *fn = d != NULL ? dlsym(d, HOOP__IBV_DOUBLE_FN) : NULL;
    hoop__ibv_double_fn wrap;
    memcpy(&wrap, &fn, sizeof(wrap));
    if (fn == NULL || wrap(t) != 0) {
        hoop__say(err, errlen, "HOOP_TEST_IBV_DOUBLE=%s: %s", path,
                  d == NULL ? dlerror() : "not a verbs test double");
        if (d != NULL) dlclose(d);
        hoop__ibv_unload(t);
        return -1;
    }
    t->dbl = d;
    return 0;
}

int hoop__ibv_load(hoop__ibv_t *t, const char *test_double, char *err, size_t errlen)
{
    memset(t, 0, sizeof(*t));
    dlerror();
    /* RTLD_LOCAL: the providers libibverbs loads find it on their own; nothing else should. */
    void *lib = dlopen(HOOP__IBV_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        if (why == NULL || strstr(why, "No such file") != NULL)
            hoop__say(err, errlen,
                      HOOP__IBV_SONAME " not found: install rdma-core (Debian: libibverbs1 "
                                       "ibverbs-providers)");
        else
            hoop__say(err, errlen, "cannot load " HOOP__IBV_SONAME ": %s", why);
        return -1;
    }
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        dlerror();
        void *p = dlsym(lib, syms[i].name);
        if (p == NULL && syms[i].required) {
            hoop__say(err, errlen, HOOP__IBV_SONAME " has no %s: is rdma-core installed whole?",
                      syms[i].name);
            dlclose(lib);
            memset(t, 0, sizeof(*t));
            return -1;
        }
        /* POSIX makes a data pointer from dlsym and a function pointer the same size and form. */
        memcpy((char *)t + syms[i].off, &p, sizeof(p));
    }
    t->query_port = query_port_ops;
    t->req_notify_cq = req_notify_cq_ops;
    t->poll_cq = poll_cq_ops;
    t->post_send = post_send_ops;
    t->post_recv = post_recv_ops;
    t->lib = lib;
    return load_double(t, test_double, err, errlen);
}

void hoop__ibv_unload(hoop__ibv_t *t)
{
    if (t->dbl != NULL) dlclose(t->dbl);
    if (t->lib != NULL) dlclose(t->lib);
    memset(t, 0, sizeof(*t));
}
