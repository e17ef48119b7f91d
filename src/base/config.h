/* Configuration from the environment (HOOP_*), parsed once per communicator. config.c is the one
 * place the library reads a HOOP_ variable; the rest reads this struct. */
#ifndef HOOP_CONFIG_H
#define HOOP_CONFIG_H

#include <stddef.h>

#include "base/auth.h"
#include "hoop.h"

#define HOOP__CONFIG_PATH 512 /* the longest path a setting or test hook may name, NUL included */
/* HOOP_IB_GID_INDEX's largest: the verbs transport reads 256 entries of a port's GID table. */
#define HOOP__CONFIG_GID_INDEX_MAX 255
/* HOOP_RECORD's largest: a flight recorder entry is under 128 bytes, so at most 128 MiB a
 * communicator. */
#define HOOP__CONFIG_RECORD_MAX (1 << 20)

typedef struct hoop__config {
    int log_level;       /* HOOP_DEBUG: WARN (default), INFO, TRACE, NONE */
    unsigned log_subsys; /* HOOP_DEBUG_SUBSYS: HOOP__SUB_* bits (default all) */
    char log_file[256];  /* HOOP_DEBUG_FILE: "" = stderr */
    char transport[16];  /* HOOP_TRANSPORT: auto (default) or a transport's name */
    char algo[16];       /* HOOP_ALGO: auto (default) or an algorithm's name (base/wire.c) */
    char ifname[128]; /* HOOP_SOCKET_IFNAME: "" = automatic; prefix list, '^' excludes, '=' exact */
    int sockets_per_peer;  /* HOOP_SOCKETS_PER_PEER: 1..16 */
    size_t chunk_bytes;    /* HOOP_CHUNK_BYTES: pipelining unit of large collectives */
    size_t small_bytes;    /* HOOP_SMALL_BYTES: at or below, latency-bound algorithms are chosen */
    double timeout_s;      /* HOOP_TIMEOUT: seconds, every blocking wait */
    int trace;             /* HOOP_TRACE: 1 = log every collective's schedule */
    size_t shm_ring_bytes; /* HOOP_SHM_RING_BYTES: per peer and direction, a power of two */
    size_t shm_cma_bytes;  /* HOOP_SHM_CMA_BYTES: single copy from this size up; 0 = never */
    /* HOOP_CMA: auto (default), on or off: whether the area's large all-reduce may read the
     * peers' buffers with process_vm_readv (local/shm_coll.c) */
    char cma[16];
    int shm_spin_us; /* HOOP_SHM_SPIN_US: spin before sleeping (when cores allow) */
    /* HOOP_SHM_STREAM_BYTES: the shared-area collectives write outputs of this size and larger
     * with streaming stores (hoop__copy_stream); 0 = never. Local: it changes no byte. */
    size_t shm_stream_bytes;
    char host_id[64]; /* HOOP_HOSTID: overrides the host identity ("" = hostname, boot id and
                       * namespaces); ranks with equal ids are on one host */
    /* The CUDA IPC engine (local/ipc.c): each rank's device area (HOOP_CUDA_IPC_BYTES), and the
     * largest chunk its all-reduce and reduce take in one shot (HOOP_CUDA_IPC_ONESHOT_BYTES; the
     * smallest of all ranks' applies). */
    size_t cuda_ipc_bytes, cuda_ipc_oneshot_bytes;
    /* RDMA verbs (transport/ibverbs_setup.c): HOOP_IB_HCA as given, once its list of devices and
     * ports parses (base/hca.h), HOOP_IB_GID_INDEX (-1: chosen per port), HOOP_IB_REG_CACHE (auto
     * or off). */
    char ib_hca[256];
    int ib_gid_index;
    char ib_reg_cache[8];
    /* Test hooks, HOOP_TEST_* (docs/configuration.md, "Test hooks"): what the tests put in place
     * of the CUDA module and driver and of libibverbs' table ("" = none), and a rank's failure. */
    char test_cuda_module[HOOP__CONFIG_PATH];
    char test_cuda_driver[HOOP__CONFIG_PATH];
    char test_ibv_double[HOOP__CONFIG_PATH];
    /* HOOP_TEST_SKIP_DONE=1: init fails on this rank once it has read the addresses, before it
     * says so (its done key; core/lifecycle.c). */
    int test_skip_done;
    /* The flight recorder (core/record.c): HOOP_RECORD, the calls each communicator keeps (0:
     * off); HOOP_RECORD_DIR, where dumps go by default ("" = the current directory);
     * HOOP_RECORD_SIGNAL, 1 = SIGUSR2 dumps every communicator. */
    int record;
    char record_dir[HOOP__CONFIG_PATH];
    int record_signal;
    hoop__auth_key_t auth; /* HOOP_AUTH_KEY or HOOP_AUTH_KEY_FILE; auth.set = 0 when neither */
    /* The first malformed setting's sentence, "" when every one was read. Such a rank still
     * meets the others (its bad settings at their defaults), so that init fails on every rank
     * with this sentence (core/agree.c); a bad key leaves it empty, as that rank cannot meet. */
    char invalid[320];
} hoop__config_t;

/* Looks a variable up; returns NULL when unset. */
typedef const char *(*hoop__getenv_fn)(const char *name, void *ctx);

void hoop__config_defaults(hoop__config_t *c);
/* Fills c from get (defaults for what is unset). On a bad value returns HOOP_ERR_INVALID_ARGUMENT
 * and writes a sentence naming the variable into err (the first bad one's; the others are read
 * all the same, a bad one keeping its default). */
hoop_result_t hoop__config_parse(hoop__config_t *c, hoop__getenv_fn get, void *ctx, char *err,
                                 size_t errlen);
/* Wipes the secrets of c (the key) before it goes away. */
void hoop__config_wipe(hoop__config_t *c);
/* hoop__config_parse over the process environment. */
hoop_result_t hoop__config_load(hoop__config_t *c, char *err, size_t errlen);

/* "64", "512K", "4M", "1G" (powers of 1024). Returns 0 on success. */
int hoop__parse_size(const char *s, size_t *out);

/* The words HOOP_TRANSPORT takes besides auto: every transport there is, in the registry's
 * order (transport/registry.c; unit-config checks that each row's name is here). NULL-ended. */
extern const char *const hoop__transport_words[];
/* "a, b or c": the n words of list (n < 0: up to its NULL), for sentences. Returns buf. */
const char *hoop__words_join(const char *const *list, int n, char *buf, size_t cap);
/* "auto, ring, rd, ... or hier": every word HOOP_ALGO and hoop_comm_set_algo take (the wire's
 * table of algorithms). Returns buf. */
const char *hoop__algo_words(char *buf, size_t cap);

#endif
