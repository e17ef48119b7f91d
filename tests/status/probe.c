/* The live-view query with its questions sealed otherwise than the job's key says (check.py):
 * probe HOST PORT MODE, MODE "unsealed" (no seal at all) or "wrongkey" (another key). The store
 * is read with the job's HOOP_AUTH_KEY, as hoop-status does; prints the query's JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status/query.h"

int main(int argc, char **argv)
{
    if (argc != 4) return 2;
    char err[1024];
    hoop__auth_key_t key = {0}, other = {0};
    const char *k = getenv("HOOP_AUTH_KEY");
    if (k == NULL || hoop__auth_key_from_string(&key, k, err, sizeof(err)) != HOOP_OK) return 2;
    if (strcmp(argv[3], "wrongkey") == 0 &&
        hoop__auth_key_from_string(&other, "not the job's key", err, sizeof(err)) != HOOP_OK)
        return 2;
    hoop__sq_opts_t o = {.host = argv[1],
                         .port = atoi(argv[2]),
                         .timeout_s = 1.5,
                         .key = &key,
                         .seal_override = &other};
    hoop__sq_t q;
    if (hoop__sq_run(&o, &q, err, sizeof(err)) != HOOP_OK) {
        fprintf(stderr, "probe: %s\n", err);
        return 1;
    }
    hoop__sq_print(&q, 1, stdout);
    hoop__sq_free(&q);
    return 0;
}
