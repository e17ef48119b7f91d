/* hoop-status HOST:PORT: the live view of a running job through its rendezvous store
 * (status/query.h, docs/reliability.md). The key is the job's HOOP_AUTH_KEY or
 * HOOP_AUTH_KEY_FILE, as its ranks read it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/auth.h"
#include "status/query.h"

static const char *get_env(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

static int usage(void)
{
    fprintf(stderr,
            "usage: hoop-status [--json] [--timeout S] HOST:PORT\n"
            "Prints every rank's current call of the job whose rendezvous store listens at\n"
            "HOST:PORT (MASTER_ADDR:MASTER_PORT), and the slowest rank. With the job's key in\n"
            "HOOP_AUTH_KEY or HOOP_AUTH_KEY_FILE where it has one. --timeout: the longest the\n"
            "whole query waits (default 2 s).\n");
    return 2;
}

int main(int argc, char **argv)
{
    int i = 1, as_json = 0;
    double timeout_s = 2.0;
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage();
        return 0;
    }
    if (hoop__sq_options(argc, argv, &i, &as_json, &timeout_s, "hoop-status") != 0) return 2;
    if (i != argc - 1) return usage();
    /* HOST:PORT, or [V6]:PORT */
    char host[256];
    const char *a = argv[i], *colon = strrchr(a, ':');
    char *end = NULL;
    long port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
    size_t hl = colon != NULL ? (size_t)(colon - a) : 0;
    if (hl >= 2 && a[0] == '[' && a[hl - 1] == ']') {
        a++;
        hl -= 2;
    }
    if (colon == NULL || hl == 0 || hl >= sizeof(host) || end == colon + 1 || *end != '\0' ||
        port < 1 || port > 65535) {
        fprintf(stderr,
                "hoop-status: \"%s\" is not HOST:PORT (the job's MASTER_ADDR:MASTER_PORT)\n",
                argv[i]);
        return 2;
    }
    memcpy(host, a, hl);
    host[hl] = '\0';
    hoop__auth_key_t key = {0};
    char err[1024];
    if (hoop__auth_key_from_env(&key, get_env, NULL, err, sizeof(err)) != HOOP_OK) {
        fprintf(stderr, "hoop-status: %s\n", err);
        return 2;
    }
    hoop__sq_opts_t o = {.host = host, .port = (int)port, .timeout_s = timeout_s, .key = &key};
    hoop__sq_t q;
    hoop_result_t rc = hoop__sq_run(&o, &q, err, sizeof(err));
    hoop__auth_key_wipe(&key);
    if (rc != HOOP_OK) {
        fprintf(stderr, "hoop-status: %s\n", err);
        return 1;
    }
    hoop__sq_print(&q, as_json, stdout);
    hoop__sq_free(&q);
    return 0;
}
