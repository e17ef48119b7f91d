/* The live view of a running job (query.h). */
#include "status/query.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/tables.h"
#include "collectives/plan.h"
#include "core/agree.h"
#include "core/lifecycle.h"
#include "core/record.h"
#include "rendezvous/store.h"
#include "runtime/comm.h"

/* Questions go again to the silent ranks this often (a datagram may be lost); and the ranks
 * get at least this long, however much of the timeout the store took. */
#define ASK_AGAIN_S 0.3
#define ASK_MIN_S 0.3
#define ADDR_MAX 1024

static hoop_result_t read_hello(hoop__store_t *st, hoop__sq_t *q, double deadline, char *err,
                                size_t errlen)
{
    char hello[HOOP__HELLO_MAX], f[160];
    size_t len = 0;
    hoop_result_t rc = hoop__store_get(st, "hoop/rank/0", hello, sizeof(hello) - 1, &len,
                                       deadline - hoop__now());
    if (rc != HOOP_OK) {
        hoop__say(err, errlen, "cannot read rank 0's hello from the store at %s: %s", q->where,
                  hoop__store_error(st));
        return rc;
    }
    hello[len < sizeof(hello) ? len : sizeof(hello) - 1] = '\0';
    /* hoop__agree_field: 1 where the field is there. */
    if (hoop__agree_field(hello, "job", f, sizeof(f)) && strcmp(f, "-") != 0)
        snprintf(q->job, sizeof(q->job), "%.127s", f);
    char *end = NULL;
    if (hoop__agree_field(hello, "WORLD_SIZE", f, sizeof(f))) q->size = (int)strtol(f, &end, 10);
    if (end == NULL || *end != '\0' || q->size < 1 || q->size > HOOP__MAX_RANKS ||
        !hoop__agree_field(hello, "comm", f, sizeof(f)) ||
        sscanf(f, "%16" SCNx64, &q->comm_id) != 1) {
        hoop__say(err, errlen, "the store at %s holds no hoop communicator's hello", q->where);
        return HOOP_ERR_MISMATCH;
    }
    return HOOP_OK;
}

/* Every rank's address into addrs (size of ADDR_MAX bytes): rank 0's one value, or one by one
 * where that was too large to publish. */
static hoop_result_t read_addrs(hoop__store_t *st, hoop__sq_t *q, char (*addrs)[ADDR_MAX],
                                double deadline, char *err, size_t errlen)
{
    size_t cap = HOOP__STORE_MAX_VALUE, len = 0;
    char *all = malloc(cap);
    if (all == NULL) {
        hoop__say(err, errlen, "out of memory");
        return HOOP_ERR_NO_MEMORY;
    }
    hoop_result_t rc = hoop__store_get(st, "hoop/addrs", all, cap, &len, deadline - hoop__now());
    if (rc == HOOP_OK && len > 0) {
        size_t at = 0;
        for (int j = 0; j < q->size && rc == HOOP_OK; j++) {
            const char *end = at < len ? memchr(all + at, '\0', len - at) : NULL;
            if (end == NULL || (size_t)(end - (all + at)) >= ADDR_MAX)
                rc = HOOP_ERR_MISMATCH;
            else
                memcpy(addrs[j], all + at, (size_t)(end - (all + at)) + 1);
            at = end != NULL ? (size_t)(end - all) + 1 : len;
        }
        if (rc != HOOP_OK || at != len) {
            free(all);
            hoop__say(err, errlen, "the addresses in the store at %s are not %d ranks'", q->where,
                      q->size);
            return HOOP_ERR_MISMATCH;
        }
    }
    for (int j = 0; rc == HOOP_OK && len == 0 && j < q->size; j++) {
        char key[64];
        size_t n = 0;
        snprintf(key, sizeof(key), "hoop/addr/%d", j);
        rc = hoop__store_get(st, key, addrs[j], ADDR_MAX - 1, &n, deadline - hoop__now());
        addrs[j][n < ADDR_MAX ? n : ADDR_MAX - 1] = '\0';
    }
    free(all);
    if (rc != HOOP_OK)
        hoop__say(err, errlen, "the ranks' addresses are not in the store at %s yet (%s)", q->where,
                  hoop__store_error(st));
    return rc;
}

/* Asks every rank with a status address, until each answered or refused, or deadline. */
static void ask(hoop__sq_t *q, const struct sockaddr_in *sa, const hoop__auth_key_t *seal,
                double deadline)
{
    int p = q->size;
    int *fds = malloc((size_t)p * sizeof(int));
    struct pollfd *pf = malloc((size_t)p * sizeof(struct pollfd));
    uint64_t base = 0;
    if (fds == NULL || pf == NULL || getrandom(&base, sizeof(base), 0) != (ssize_t)sizeof(base))
        base ^= (uint64_t)getpid() << 32 ^ (uint64_t)(hoop__now() * 1e9);
    int waiting = 0;
    for (int j = 0; fds != NULL && j < p; j++) {
        fds[j] = -1;
        if (q->ranks[j].how != HOOP__SQ_SILENT) continue;
        fds[j] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fds[j] < 0 || connect(fds[j], (const struct sockaddr *)&sa[j], sizeof(sa[j])) != 0) {
            if (fds[j] >= 0) close(fds[j]);
            fds[j] = -1;
            q->ranks[j].how = HOOP__SQ_UNKNOWN;
            continue;
        }
        waiting++;
    }
    double again = 0;
    while (pf != NULL && fds != NULL && waiting > 0) {
        double t = hoop__now();
        if (t >= deadline) break;
        if (t >= again) {
            for (int j = 0; j < p; j++) {
                if (fds[j] < 0 || q->ranks[j].how != HOOP__SQ_SILENT) continue;
                hoop__status_msg_t m = {.type = HOOP__STATUS_REQ,
                                        .rank = HOOP__STATUS_TOOL,
                                        .pid = (uint32_t)getpid(),
                                        .comm_id = q->comm_id,
                                        .nonce = base + (uint64_t)j};
                uint8_t b[HOOP__STATUS_SIZE + HOOP__AUTH_SEAL_BYTES];
                size_t n = HOOP__STATUS_SIZE;
                hoop__status_encode(&m, b);
                if (seal != NULL) {
                    hoop__auth_seal(seal, 0, b, n, 0, b);
                    n += HOOP__AUTH_SEAL_BYTES;
                }
                if (send(fds[j], b, n, MSG_NOSIGNAL) < 0 && errno == ECONNREFUSED) {
                    q->ranks[j].how = HOOP__SQ_REFUSED;
                    waiting--;
                }
            }
            again = t + ASK_AGAIN_S;
        }
        int m = 0;
        for (int j = 0; j < p; j++)
            if (fds[j] >= 0 && q->ranks[j].how == HOOP__SQ_SILENT)
                pf[m++] = (struct pollfd){fds[j], POLLIN, 0};
        double until = again < deadline ? again : deadline;
        if (m == 0 || poll(pf, (nfds_t)m, (int)((until - t) * 1e3) + 1) <= 0) continue;
        for (int i = 0, j = 0; i < m; i++) {
            if (pf[i].revents == 0) continue;
            while (fds[j] != pf[i].fd) j++;
            uint8_t b[HOOP__STATUS_SIZE + HOOP__AUTH_SEAL_BYTES + 1];
            ssize_t r = recv(fds[j], b, sizeof(b), MSG_DONTWAIT);
            if (r < 0) {
                if (errno == ECONNREFUSED) {
                    q->ranks[j].how = HOOP__SQ_REFUSED;
                    waiting--;
                }
                continue;
            }
            size_t len = (size_t)r;
            if (seal != NULL)
                len = hoop__auth_unseal(seal, 1, b, len, 0, NULL) == 0 ? len - HOOP__AUTH_SEAL_BYTES
                                                                       : 0;
            hoop__status_msg_t a;
            if (hoop__status_decode(b, len, &a) == HOOP_OK && a.type == HOOP__STATUS_ANS &&
                a.nonce == base + (uint64_t)j && a.comm_id == q->comm_id && a.rank == (uint32_t)j) {
                q->ranks[j].how = HOOP__SQ_ANSWERED;
                q->ranks[j].a = a;
                waiting--;
            } else {
                q->strays++;
            }
        }
    }
    for (int j = 0; fds != NULL && j < p; j++)
        if (fds[j] >= 0) close(fds[j]);
    free(fds);
    free(pf);
}

hoop_result_t hoop__sq_run(const hoop__sq_opts_t *o, hoop__sq_t *q, char *err, size_t errlen)
{
    memset(q, 0, sizeof(*q));
    double t0 = hoop__now(), deadline = t0 + o->timeout_s;
    hoop__rdv_t rdv;
    memset(&rdv, 0, sizeof(rdv));
    snprintf(rdv.method, sizeof(rdv.method), "tcp");
    snprintf(rdv.host, sizeof(rdv.host), "%s", o->host);
    rdv.port = o->port;
    rdv.rank = 1; /* a client only: never serves a store */
    rdv.size = 2;
    if (o->key != NULL && o->key->set) rdv.auth = *o->key;
    hoop__sock_hostport(q->where, sizeof(q->where), o->host, o->port);
    hoop__store_t *st = NULL;
    char why[512] = "";
    hoop_result_t rc = hoop__store_open(&rdv, o->timeout_s, NULL, &st, why, sizeof(why));
    hoop__auth_key_wipe(&rdv.auth);
    if (rc != HOOP_OK) {
        hoop__say(err, errlen, "cannot read the job's store at %s: %s", q->where, why);
        return rc;
    }
    char(*addrs)[ADDR_MAX] = NULL;
    rc = read_hello(st, q, deadline, err, errlen);
    if (rc == HOOP_OK) {
        addrs = calloc((size_t)q->size, ADDR_MAX);
        q->ranks = calloc((size_t)q->size, sizeof(hoop__sq_rank_t));
        if (addrs == NULL || q->ranks == NULL) {
            hoop__say(err, errlen, "out of memory for %d ranks", q->size);
            rc = HOOP_ERR_NO_MEMORY;
        }
    }
    if (rc == HOOP_OK) rc = read_addrs(st, q, addrs, deadline, err, errlen);
    hoop__store_close(st);
    struct sockaddr_in *sa = rc == HOOP_OK ? calloc((size_t)q->size, sizeof(*sa)) : NULL;
    if (rc == HOOP_OK && sa == NULL) {
        hoop__say(err, errlen, "out of memory for %d ranks", q->size);
        rc = HOOP_ERR_NO_MEMORY;
    }
    if (rc != HOOP_OK) {
        free(addrs);
        hoop__sq_free(q);
        return rc;
    }
    for (int j = 0; j < q->size; j++) {
        hoop__sq_rank_t *r = &q->ranks[j];
        char part[160], ip[INET_ADDRSTRLEN];
        int port = 0;
        hoop__addr_part(addrs[j], "h", r->host, sizeof(r->host));
        /* "x=a.b.c.d:PORT:PID": a rank without one has no status socket. */
        if (hoop__addr_part(addrs[j], "x", part, sizeof(part)) != 0 ||
            sscanf(part, "%15[0-9.]:%d:%d", ip, &port, &r->pid) != 3 || port <= 0 || port > 65535 ||
            inet_pton(AF_INET, ip, &sa[j].sin_addr) != 1) {
            r->how = HOOP__SQ_UNKNOWN;
            continue;
        }
        sa[j].sin_family = AF_INET;
        sa[j].sin_port = htons((uint16_t)port);
        r->how = HOOP__SQ_SILENT;
    }
    free(addrs);
    /* The ranks seal with the key bound to their job (lifecycle.c); the store's is unbound. */
    hoop__auth_key_t bound = {0};
    const hoop__auth_key_t *seal = o->seal_override;
    if (seal == NULL && o->key != NULL && o->key->set) {
        bound = *o->key;
        hoop__auth_key_bind(&bound, q->job);
        seal = &bound;
    }
    q->sealed = seal != NULL && seal->set;
    double left = deadline - hoop__now();
    ask(q, sa, q->sealed ? seal : NULL, hoop__now() + (left > ASK_MIN_S ? left : ASK_MIN_S));
    hoop__auth_key_wipe(&bound);
    free(sa);
    q->took_s = hoop__now() - t0;
    return HOOP_OK;
}

void hoop__sq_free(hoop__sq_t *q)
{
    free(q->ranks);
    q->ranks = NULL;
}

/* Where a rank is, as a number that grows as it goes: a finished call counts as past it, an
 * unfinished one as in it. */
static uint64_t progress(const hoop__status_msg_t *a)
{
    if (!(a->flags & HOOP__STATUS_HAS_CALL)) return 0;
    return a->seq * 2 + (a->state == HOOP__REC_FINISHED || a->state == HOOP__REC_FAILED ? 2 : 1);
}

int hoop__sq_slowest(const hoop__sq_t *q)
{
    int slow = -1, differ = 0;
    for (int j = 0; j < q->size; j++) {
        const hoop__sq_rank_t *r = &q->ranks[j];
        if (r->how != HOOP__SQ_ANSWERED) continue;
        if (slow < 0) {
            slow = j;
            continue;
        }
        uint64_t pj = progress(&r->a), ps = progress(&q->ranks[slow].a);
        differ |= pj != ps;
        if (pj < ps || (pj == ps && r->a.age_ms > q->ranks[slow].a.age_ms)) slow = j;
    }
    return differ ? slow : -1;
}

static const char *state_name(int state)
{
    static const char *const names[] = {"none", "posted", "started", "finished", "failed"};
    return state >= 0 && state <= 4 ? names[state] : "?";
}

static const char *schedule(const hoop__status_msg_t *a)
{
    if (a->engine >= HOOP__ENGINE_COUNT || a->algo >= HOOP__ALGO_COUNT) return "?";
    hoop__call_t call = {.kind = (hoop__kind_t)a->kind,
                         .plan = {.engine = a->engine, .algo = a->algo, .small = a->small}};
    return hoop__plan_schedule(&call);
}

static const char *kind_word(int kind)
{
    return kind == HOOP__K_SEND ? "send/recv" : hoop__kind_name(kind);
}

static void human_bytes(uint64_t b, char *buf, size_t n)
{
    if (b >= 1000000000)
        snprintf(buf, n, "%.1f GB", (double)b / 1e9);
    else if (b >= 1000000)
        snprintf(buf, n, "%.1f MB", (double)b / 1e6);
    else if (b >= 1000)
        snprintf(buf, n, "%.1f kB", (double)b / 1e3);
    else
        snprintf(buf, n, "%" PRIu64 " B", b);
}

static const char *how_word(int how)
{
    return how == HOOP__SQ_REFUSED   ? "gone (its status socket is closed)"
           : how == HOOP__SQ_UNKNOWN ? "unknown (no status address)"
                                     : "not answering (stopped, or a wrong key)";
}

/* "#12 allreduce (float32, 4.0 kB, ring) started 1.2 s ago" */
static void call_text(const hoop__status_msg_t *a, char *buf, size_t n)
{
    if (!(a->flags & HOOP__STATUS_HAS_CALL)) {
        snprintf(buf, n, "no collective call %s",
                 (a->flags & HOOP__STATUS_REC_OFF) ? "on record (HOOP_RECORD=0)" : "yet");
        return;
    }
    char size[32];
    human_bytes(a->count * (uint64_t)hoop__dtype_size((hoop_dtype_t)a->dtype), size, sizeof(size));
    int done = a->state == HOOP__REC_FINISHED || a->state == HOOP__REC_FAILED;
    snprintf(buf, n, "#%" PRIu64 " %s (%s, %s, %s) %s%s%s %.1f s %s", a->seq, kind_word(a->kind),
             hoop__dtype_name((hoop_dtype_t)a->dtype), size, schedule(a), state_name(a->state),
             a->state == HOOP__REC_FAILED ? " with " : "",
             a->state == HOOP__REC_FAILED ? hoop__error_name((hoop_result_t)a->code) : "",
             a->age_ms / 1e3, done ? "ago, outside hoop since" : "ago");
}

static void text(const hoop__sq_t *q, FILE *out)
{
    fprintf(out, "communicator %016" PRIx64 " of job %s: %d ranks (store %s%s)\n", q->comm_id,
            q->job[0] != '\0' ? q->job : "(none)", q->size, q->where,
            q->sealed ? ", questions sealed with HOOP_AUTH_KEY" : "");
    char line[256];
    int silent = 0;
    for (int j = 0; j < q->size; j++) {
        const hoop__sq_rank_t *r = &q->ranks[j];
        if (r->how == HOOP__SQ_ANSWERED)
            call_text(&r->a, line, sizeof(line));
        else
            snprintf(line, sizeof(line), "%s", how_word(r->how));
        silent += r->how != HOOP__SQ_ANSWERED;
        fprintf(out, "rank %d (pid %d, %s): %s\n", j, r->pid, r->host[0] ? r->host : "?", line);
    }
    int s = hoop__sq_slowest(q);
    if (s >= 0) {
        call_text(&q->ranks[s].a, line, sizeof(line));
        fprintf(out, "slowest: rank %d, %s\n", s, line);
    } else {
        fprintf(out, "slowest: none (every rank that answered is at the same place)\n");
    }
    if (silent > 0) {
        fprintf(out, "not answering:");
        for (int j = 0; j < q->size; j++)
            if (q->ranks[j].how != HOOP__SQ_ANSWERED) fprintf(out, " %d", j);
        fprintf(out, "\n");
    }
    fprintf(out, "asked in %.3f s\n", q->took_s);
}

static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}

static void json(const hoop__sq_t *q, FILE *out)
{
    fprintf(out, "{\"store\": ");
    json_str(out, q->where);
    fprintf(out, ", \"comm\": \"%016" PRIx64 "\", \"job\": ", q->comm_id);
    json_str(out, q->job);
    fprintf(out, ", \"size\": %d, \"sealed\": %s, \"took_s\": %.6f, \"strays\": %d, \"ranks\": [",
            q->size, q->sealed ? "true" : "false", q->took_s, q->strays);
    for (int j = 0; j < q->size; j++) {
        const hoop__sq_rank_t *r = &q->ranks[j];
        const hoop__status_msg_t *a = &r->a;
        fprintf(out, "%s\n  {\"rank\": %d, \"pid\": %d, \"host\": ", j ? "," : "", j, r->pid);
        json_str(out, r->host);
        fprintf(out, ", \"answered\": %s", r->how == HOOP__SQ_ANSWERED ? "true" : "false");
        if (r->how != HOOP__SQ_ANSWERED) {
            fprintf(out, ", \"state\": \"%s\"}",
                    r->how == HOOP__SQ_REFUSED   ? "gone"
                    : r->how == HOOP__SQ_UNKNOWN ? "unknown"
                                                 : "not answering");
            continue;
        }
        if (!(a->flags & HOOP__STATUS_HAS_CALL)) {
            fprintf(out, ", \"state\": \"none\", \"recorder\": %s}",
                    (a->flags & HOOP__STATUS_REC_OFF) ? "false" : "true");
            continue;
        }
        fprintf(out,
                ", \"seq\": %" PRIu64 ", \"collective\": \"%s\", \"dtype\": \"%s\", "
                "\"count\": %" PRIu64 ", \"bytes\": %" PRIu64
                ", \"algorithm\": \"%s\", \"state\": \"%s\", \"age_s\": %.3f",
                a->seq, kind_word(a->kind), hoop__dtype_name((hoop_dtype_t)a->dtype), a->count,
                a->count * (uint64_t)hoop__dtype_size((hoop_dtype_t)a->dtype), schedule(a),
                state_name(a->state), a->age_ms / 1e3);
        if (a->state == HOOP__REC_FAILED)
            fprintf(out, ", \"error\": \"%s\"", hoop__error_name((hoop_result_t)a->code));
        fprintf(out, "}");
    }
    int s = hoop__sq_slowest(q);
    fprintf(out, "\n], \"slowest\": ");
    if (s >= 0)
        fprintf(out, "%d", s);
    else
        fprintf(out, "null");
    fprintf(out, ", \"not_answering\": [");
    for (int j = 0, first = 1; j < q->size; j++)
        if (q->ranks[j].how != HOOP__SQ_ANSWERED) {
            fprintf(out, "%s%d", first ? "" : ", ", j);
            first = 0;
        }
    fprintf(out, "]}\n");
}

void hoop__sq_print(const hoop__sq_t *q, int as_json, FILE *out)
{
    if (as_json)
        json(q, out);
    else
        text(q, out);
}

int hoop__sq_options(int argc, char **argv, int *i, int *as_json, double *timeout_s,
                     const char *prog)
{
    for (; *i < argc; (*i)++) {
        const char *a = argv[*i];
        if (strcmp(a, "--json") == 0) {
            *as_json = 1;
        } else if (strcmp(a, "--timeout") == 0 || strncmp(a, "--timeout=", 10) == 0) {
            const char *v = a[9] == '=' ? a + 10 : (*i + 1 < argc ? argv[++*i] : NULL);
            char *end = NULL;
            double t = v != NULL ? strtod(v, &end) : 0;
            if (v == NULL || end == v || *end != '\0' || !(t > 0 && t <= 3600)) {
                fprintf(stderr,
                        "%s: --timeout needs a number of seconds, above 0 and at most "
                        "3600\n",
                        prog);
                return -1;
            }
            *timeout_s = t;
        } else {
            break;
        }
    }
    return 0;
}
