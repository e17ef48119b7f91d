/* TEST DOUBLE of the verbs function table (src/transport/ibv_sym.h), for what the soft RDMA devices
 * cannot be made to do on demand. Loaded by the library itself where HOOP_TEST_IBV_DOUBLE names
 * this shared object (tests only): it keeps the real libibverbs functions the library loaded and
 * replaces a few entries with its own, which forward to them and inject one fault at a chosen
 * point, set by
 *
 *   HOOP_TEST_IBV_FAULT=KIND@RANK:N    in the process whose RANK (hooprun's variable) is RANK, at
 *                                      its N-th successful work completion (any kind, counted as
 *                                      ibv_poll_cq returns them):
 *     wc_err   that completion comes with IBV_WC_REM_ACCESS_ERR and its queue pair goes to error,
 *              as an adapter's does after an error completion
 *     rnr      the same with IBV_WC_RNR_RETRY_EXC_ERR (receiver not ready, retries exceeded)
 *     retry    the same with IBV_WC_RETRY_EXC_ERR
 *     cq_overflow  ibv_poll_cq fails from then on, as on a completion queue that overran
 *     qp_err   that completion's queue pair is moved to the error state (real ibv_modify_qp): the
 *              real stack then flushes its work requests, and the peer's sends to it fail
 *   HOOP_TEST_IBV_FAULT=hold_ready@RANK:N  the N-th ready notice that process sends (settle()'s,
 *              one per peer and connection) is posted 1 s late, as a slow link or a preempted
 *              rank would deliver it: its peers hear of other ranks first
 *
 * Everything else (and every other process) goes to libibverbs untouched. The state is this test
 * object's own (one fault per process); nothing of it is in the library. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/ibv_sym.h"
#include "transport/ibverbs.h"

#define MAXQP 256

enum { K_NONE, K_WCERR, K_RNR, K_RETRY, K_CQ, K_QPERR, K_HOLD };

static hoop__ibv_t real;
static int kind = K_NONE, fired;
static long at, seen;
static struct ibv_qp *qps[MAXQP];

static struct ibv_qp *qp_of(uint32_t num)
{
    for (int i = 0; i < MAXQP; i++)
        if (qps[i] != NULL && qps[i]->qp_num == num) return qps[i];
    return NULL;
}

static void to_error(uint32_t num)
{
    struct ibv_qp *qp = qp_of(num);
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    if (qp != NULL && real.modify_qp(qp, &a, IBV_QP_STATE) != 0)
        fprintf(stderr, "ibv double: cannot move QP %u to error\n", num);
}

static int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    if (kind == K_NONE || kind == K_HOLD) return real.poll_cq(cq, n, wc);
    if (fired && kind == K_CQ) return -1;
    int got = real.poll_cq(cq, n, wc);
    for (int k = 0; k < got && !fired; k++) {
        if (wc[k].status != IBV_WC_SUCCESS || ++seen < at) continue;
        fired = 1;
        fprintf(stderr, "ibv double: fault at completion %ld (QP %u)\n", seen, wc[k].qp_num);
        switch (kind) {
        case K_CQ: return -1;
        case K_QPERR: to_error(wc[k].qp_num); break;
        default:
            wc[k].status = kind == K_WCERR ? IBV_WC_REM_ACCESS_ERR
                           : kind == K_RNR ? IBV_WC_RNR_RETRY_EXC_ERR
                                           : IBV_WC_RETRY_EXC_ERR;
            to_error(wc[k].qp_num);
        }
    }
    return got;
}

static int post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    if (kind == K_HOLD && !fired && wr->opcode == IBV_WR_SEND && wr->num_sge > 0 &&
        wr->sg_list[0].length > 0 && *(const uint8_t *)(uintptr_t)wr->sg_list[0].addr == F_READY &&
        ++seen == at) {
        fired = 1;
        fprintf(stderr, "ibv double: ready notice %ld on QP %u held 1 s\n", seen, qp->qp_num);
        nanosleep(&(struct timespec){.tv_sec = 1}, NULL);
    }
    return real.post_send(qp, wr, bad);
}

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    struct ibv_qp *qp = real.create_qp(pd, attr);
    for (int i = 0; qp != NULL && i < MAXQP; i++)
        if (qps[i] == NULL) {
            qps[i] = qp;
            break;
        }
    return qp;
}

static int destroy_qp(struct ibv_qp *qp)
{
    for (int i = 0; i < MAXQP; i++)
        if (qps[i] == qp) qps[i] = NULL;
    return real.destroy_qp(qp);
}

__attribute__((visibility("default"))) int hoop_test_ibv_double(hoop__ibv_t *t);
int hoop_test_ibv_double(hoop__ibv_t *t)
{
    real = *t;
    const char *spec = getenv("HOOP_TEST_IBV_FAULT"), *rank = getenv("RANK");
    char name[32];
    int r;
    if (spec == NULL || sscanf(spec, "%31[a-z_]@%d:%ld", name, &r, &at) != 3 || at < 1) return -1;
    static const char *const names[] = {"",       "wc_err",    "rnr", "retry", "cq_overflow",
                                        "qp_err", "hold_ready"};
    for (int k = 1; k < 7; k++)
        if (strcmp(name, names[k]) == 0) kind = k;
    if (kind == K_NONE) return -1;
    if (rank == NULL || atoi(rank) != r) kind = K_NONE; /* another rank: all real */
    t->poll_cq = poll_cq;
    t->post_send = post_send;
    t->create_qp = create_qp;
    t->destroy_qp = destroy_qp;
    return 0;
}
