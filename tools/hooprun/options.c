/* hooprun's command line: the usage text, and the options parsed into struct opts. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h" /* HOOP_VERSION_STRING; libhoop itself is not linked, only --status's query */
#include "hooprun.h"

/* clang-format off */
static void usage(FILE *f)
{
    fputs(
        "usage: hooprun [options] -n N PROGRAM [ARGS...]\n"
        "       hooprun --status [--json] [--timeout S] [PID|JOBID]\n"
        "\n"
        "Start N local ranks of PROGRAM with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
        "GROUP_RANK, GROUP_WORLD_SIZE, NODE_RANK, MASTER_ADDR and MASTER_PORT set as torchrun\n"
        "sets them, and HOOP_LAUNCHER=hooprun.\n"
        "\n"
        "options:\n"
        "  -n, --nproc-per-node N  ranks to start on this node (required)\n"
        "  --nnodes M              nodes in the job (default 1)\n"
        "  --node-rank K           index of this node, 0..M-1 (default 0)\n"
        "  --master-addr A         address of the node of rank 0 (default 127.0.0.1)\n"
        "  --master-port P         port on the master (default: a free port; required if M > 1)\n"
        "  --max-restarts N        times to restart all ranks after a failure (default 0)\n"
        "  --timeout S             stop the job after S seconds, restarts included, and exit\n"
        "                          with status 124\n"
        "  --kill-after S          grace period: once the job is being stopped (a failed rank,\n"
        "                          --timeout, a signal to hooprun), SIGKILL what still runs of it\n"
        "                          S seconds later (default: 30 after a signal, as torchrun\n"
        "                          waits; 3 after a failed rank or --timeout; 0: at once)\n"
        "  --no-prefix             do not prefix output lines with \"[RANK] \"\n"
        "  --no-auth               no authentication key: the ranks get neither HOOP_AUTH_KEY nor\n"
        "                          HOOP_AUTH_KEY_FILE, and their connections are not "
        "authenticated\n"
        "  --bind auto|none        auto (default): when the ranks are no more than the CPUs hooprun\n"
        "                          may run on, each rank is bound to its own equal share of them\n"
        "                          (rank i of N to the i-th of N contiguous blocks), as mpirun binds;\n"
        "                          none: the kernel places them\n"
        "  -h, --help              show this help and exit\n"
        "  --version               show the version and exit\n"
        "\n"
        "Options end at PROGRAM or after \"--\". The standard input of the ranks is /dev/null.\n"
        "Each output line of a rank up to 4 MiB is written whole after \"[RANK] \"; a longer one\n"
        "goes out in pieces as it comes. A last line without newline gets one. With --no-prefix\n"
        "the bytes are the rank's own.\n"
        "\n"
        "SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every rank, and ranks that end then\n"
        "are reported as stopped, not failed; ranks still running after the grace period get\n"
        "SIGKILL, and at once on a second SIGINT or SIGTERM (one within 0.2 s of the first counts\n"
        "as the same). When a rank fails the others get SIGTERM, then SIGKILL after the grace\n"
        "period; ranks found already ended with it, before that, are named too. Processes that\n"
        "the ranks started and that outlive them (in the background, or in a session of their\n"
        "own) are ended when the ranks are gone: SIGTERM, then SIGKILL after the grace period.\n"
        "\n"
        "OMP_NUM_THREADS is set to 1 for the ranks when it is not set and N > 1, as torchrun does\n"
        "(said on stderr at start): N ranks with a thread per core each would oversubscribe.\n"
        "\n"
        "Unless HOOP_AUTH_KEY or HOOP_AUTH_KEY_FILE is set (then it is passed on as it is), a\n"
        "single-node job gets a fresh random key in HOOP_AUTH_KEY, so that every connection\n"
        "between its ranks proves that it belongs to the job. With --nnodes > 1 the nodes cannot\n"
        "share such a key: set the same HOOP_AUTH_KEY or HOOP_AUTH_KEY_FILE on every node.\n"
        "\n"
        "With --max-restarts, once the ranks of a failed attempt are gone all ranks start again\n"
        "with a fresh rendezvous: a new free MASTER_PORT (a given --master-port is kept, after\n"
        "waiting up to 10 s for it to be free), and HOOP_RESTART_COUNT and\n"
        "TORCHELASTIC_RESTART_COUNT set to the number of restarts so far (0 at first). A job\n"
        "stopped by a signal to hooprun, or by --timeout, is not restarted.\n"
        "\n"
        "exit status: 0 if every rank of the last attempt exits 0; else the status of the first\n"
        "rank that failed in the last attempt (128+S if it was killed by signal S); 128+S when\n"
        "signal S to hooprun stopped the job; 124 on timeout; 126 or 127 if PROGRAM cannot be\n"
        "run; 2 on bad usage.\n",
        f);
}
/* clang-format on */

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("hooprun: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n\n", stderr);
    va_end(ap);
    usage(stderr);
    return 2;
}

static bool parse_long(const char *s, long min, long max, long *out)
{
    if (s == NULL || *s == '\0') return false;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max) return false;
    *out = v;
    return true;
}

/* Option names compare with '_' and '-' equivalent, so torchrun spellings (--nproc_per_node) work. */
static bool opt_is(const char *name, size_t len, const char *want)
{
    if (strlen(want) != len) return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i] == '_' ? '-' : name[i];
        if (c != want[i]) return false;
    }
    return true;
}

int parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.nproc = -1,
                       .nnodes = 1,
                       .node_rank = 0,
                       .master_addr = "127.0.0.1",
                       .prefix = true,
                       .grace_ms = GRACE_MS,
                       .signal_grace_ms = SIGNAL_GRACE_MS};
    bool have_nproc = false;
    int i = 1;
    while (i < argc) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') break;

        const char *name, *val = NULL;
        size_t nlen;
        bool inline_val = false;
        if (a[1] == '-') {
            name = a + 2;
            const char *eq = strchr(name, '=');
            nlen = eq ? (size_t)(eq - name) : strlen(name);
            if (eq) {
                val = eq + 1;
                inline_val = true;
            }
        } else {
            /* Short options: -h, -n N, -nN. */
            name = a + 1;
            nlen = 1;
            if (a[2] != '\0') {
                val = a + 2;
                inline_val = true;
            }
        }

        enum {
            O_NPROC,
            O_NNODES,
            O_NODE_RANK,
            O_ADDR,
            O_PORT,
            O_RESTARTS,
            O_TIMEOUT,
            O_KILL_AFTER,
            O_NOPREFIX,
            O_NOAUTH,
            O_BIND,
            O_HELP,
            O_VERSION,
            O_UNKNOWN
        } id = O_UNKNOWN;
        bool is_short = a[1] != '-';
        if (is_short) {
            if (name[0] == 'n')
                id = O_NPROC;
            else if (name[0] == 'h' && !inline_val)
                id = O_HELP;
        } else {
            static const struct {
                const char *name;
                int id;
            } longs[] = {{"nproc-per-node", O_NPROC}, {"nnodes", O_NNODES},
                         {"node-rank", O_NODE_RANK},  {"master-addr", O_ADDR},
                         {"master-port", O_PORT},     {"max-restarts", O_RESTARTS},
                         {"timeout", O_TIMEOUT},      {"no-prefix", O_NOPREFIX},
                         {"no-auth", O_NOAUTH},       {"help", O_HELP},
                         {"version", O_VERSION},      {"bind", O_BIND},
                         {"kill-after", O_KILL_AFTER}};
            for (size_t k = 0; k < sizeof(longs) / sizeof(longs[0]); k++)
                if (opt_is(name, nlen, longs[k].name)) id = longs[k].id;
        }
        if (id == O_UNKNOWN) return usage_error("unknown option '%s'", a);

        bool takes_value = id != O_NOPREFIX && id != O_NOAUTH && id != O_HELP && id != O_VERSION;
        if (!takes_value && inline_val) return usage_error("option '%s' takes no value", a);
        if (takes_value && !inline_val) {
            if (i + 1 >= argc) return usage_error("option '%s' needs a value", a);
            val = argv[++i];
        }
        i++;

        long v;
        switch (id) {
        case O_NPROC:
            if (!parse_long(val, 1, MAX_NPROC, &v))
                return usage_error("bad number of processes per node '%s' (want 1..%d)", val,
                                   MAX_NPROC);
            o->nproc = v;
            have_nproc = true;
            break;
        case O_NNODES:
            if (!parse_long(val, 1, INT_MAX / MAX_NPROC, &v))
                return usage_error("bad number of nodes '%s'", val);
            o->nnodes = v;
            break;
        case O_NODE_RANK:
            if (!parse_long(val, 0, INT_MAX / MAX_NPROC, &v))
                return usage_error("bad node rank '%s'", val);
            o->node_rank = v;
            break;
        case O_ADDR:
            if (*val == '\0') return usage_error("empty master address");
            o->master_addr = val;
            break;
        case O_PORT:
            if (!parse_long(val, 1, 65535, &v))
                return usage_error("bad master port '%s' (want 1..65535)", val);
            snprintf(o->master_port, sizeof o->master_port, "%ld", v);
            o->port_given = true;
            break;
        case O_RESTARTS:
            if (!parse_long(val, 0, MAX_RESTARTS, &v))
                return usage_error("bad number of restarts '%s' (want 0..%d)", val, MAX_RESTARTS);
            o->max_restarts = v;
            break;
        case O_TIMEOUT: {
            char *end = NULL;
            errno = 0;
            double t = *val ? strtod(val, &end) : -1.0;
            if (errno != 0 || end == NULL || *end != '\0' || !isfinite(t) || t <= 0 || t > 1e9)
                return usage_error("bad timeout '%s' (want seconds > 0)", val);
            o->timeout_s = t;
            o->timeout_text = val;
            o->has_timeout = true;
            break;
        }
        case O_KILL_AFTER: {
            char *end = NULL;
            errno = 0;
            double t = *val ? strtod(val, &end) : -1.0;
            if (errno != 0 || end == NULL || *end != '\0' || !isfinite(t) || t < 0 || t > 1e6)
                return usage_error("bad --kill-after '%s' (want seconds >= 0)", val);
            o->grace_ms = (int64_t)(t * 1000.0 + 0.999);
            o->signal_grace_ms = o->grace_ms;
            break;
        }
        case O_NOPREFIX: o->prefix = false; break;
        case O_NOAUTH: o->no_auth = true; break;
        case O_BIND:
            if (strcmp(val, "auto") == 0)
                o->no_bind = false;
            else if (strcmp(val, "none") == 0)
                o->no_bind = true;
            else
                return usage_error("bad --bind '%s' (want auto or none)", val);
            break;
        case O_HELP: usage(stdout); return 0;
        case O_VERSION: printf("hooprun (hoop) %s\n", HOOP_VERSION_STRING); return 0;
        case O_UNKNOWN: break;
        }
    }

    if (!have_nproc)
        return usage_error("the number of processes is required (-n N or --nproc-per-node N)");
    if (i >= argc) return usage_error("no program to run");
    if (o->node_rank >= o->nnodes)
        return usage_error("node rank %ld is out of range for %ld node(s)", o->node_rank,
                           o->nnodes);
    if (o->nnodes > 1 && !o->port_given)
        return usage_error("--master-port is required when --nnodes is more than 1");
    if (o->nnodes * o->nproc > INT_MAX) return usage_error("job too large");
    o->prog_argv = argv + i;
    return -1;
}
