/* The libibverbs functions the verbs transport uses, as a table of pointers filled at run time from
 * dlopen("libibverbs.so.1"): libhoop never links against rdma-core, so one binary runs on machines
 * without it and only a rank that wants verbs finds out, with a sentence, that it is missing.
 *
 * The table belongs to whoever loads it (a transport instance, a probe, a test); nothing here is
 * global. A test double fills the same struct with its own functions (lib stays NULL) to make the
 * verbs calls fail where the soft devices cannot be made to. */
#ifndef HOOP_IBV_SYM_H
#define HOOP_IBV_SYM_H

#include <stddef.h>

#include <infiniband/verbs.h>

#define HOOP__IBV_SONAME "libibverbs.so.1"

typedef struct hoop__ibv {
    void *lib; /* dlopen handle; NULL when not loaded or for a test double */
    void *dbl; /* the test double wrapped around the table (HOOP_TEST_IBV_DOUBLE), or NULL */

    /* Devices */
    struct ibv_device **(*get_device_list)(int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
    /* NULL before rdma-core 32: the GID's type then comes from sysfs (ibv_dev.c) */
    int (*query_gid_ex)(struct ibv_context *context, uint32_t port, uint32_t index,
                        struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
    int (*get_async_event)(struct ibv_context *context, struct ibv_async_event *event);
    void (*ack_async_event)(struct ibv_async_event *event);

    /* Memory */
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    /* NULL before rdma-core 22; needed only for the optional access flags (relaxed ordering) */
    struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                   unsigned int access);
    int (*dereg_mr)(struct ibv_mr *mr);

    /* Completions */
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
    int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
    int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
    int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);

    /* Queue pairs */
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                    struct ibv_qp_init_attr *init_attr);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);

    /* Words for what went wrong */
    const char *(*wc_status_str)(enum ibv_wc_status status);
    const char *(*event_type_str)(enum ibv_event_type event);
    const char *(*port_state_str)(enum ibv_port_state state);

    /* Fork safety: where the kernel does not make it unnecessary, ibv_fork_init must run before any
     * registration for a process that forks. is_fork_initialized is NULL before rdma-core 35. */
    int (*fork_init)(void);
    enum ibv_fork_status (*is_fork_initialized)(void);
} hoop__ibv_t;

/* Opens libibverbs.so.1 and fills t. Returns 0, or -1 with t zeroed and a sentence in err: the
 * library is not installed ("libibverbs.so.1 not found: install rdma-core ..."), cannot be loaded,
 * or lacks a function hoop needs. */
int hoop__ibv_load(hoop__ibv_t *t, const char *test_double, char *err, size_t errlen);
/* Tests only: where test_double (HOOP_TEST_IBV_DOUBLE; NULL or "": none) names a shared object,
 * hoop__ibv_load opens it after filling the table and calls its HOOP__IBV_DOUBLE_FN(t), which may
 * replace entries with its own (tests/rdma/ibv_double.c injects faults at chosen points while
 * forwarding to libibverbs). */
#define HOOP__IBV_DOUBLE_FN "hoop_test_ibv_double"
typedef int (*hoop__ibv_double_fn)(hoop__ibv_t *t);

/* Closes what hoop__ibv_load opened and zeroes t; a zeroed or never-loaded t is fine. Every object
 * made through t must be destroyed first. */
void hoop__ibv_unload(hoop__ibv_t *t);

#endif
