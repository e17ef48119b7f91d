/* libFuzzer target: Slurm's host list expander and tasks-per-node reader, which read what srun
 * exports (SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE) before any rank meets another. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rendezvous/slurm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char list[1024];
    size_t n = size < sizeof(list) - 1 ? size : sizeof(list) - 1;
    memcpy(list, data, n);
    list[n] = '\0';
    char host[256], err[512];
    long count = -1;
    if (hoop__nodelist_host(list, 0, host, sizeof(host), &count, err, sizeof(err)) == 0) {
        /* Accepted: at least one host, every index below the count expands to a printable name
         * and the count is the same each time; the count itself is refused. */
        if (count < 1 || host[0] == '\0') __builtin_trap();
        const long probe[] = {count - 1, count / 2, count / 3};
        for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]); i++) {
            long again = -1;
            if (hoop__nodelist_host(list, probe[i], host, sizeof(host), &again, err, sizeof(err)) !=
                0) {
                /* Only a host too long for the buffer may fail, and it leaves "" behind. */
                if (strstr(err, "longer than") == NULL || host[0] != '\0') __builtin_trap();
                continue;
            }
            if (again != count || host[0] == '\0') __builtin_trap();
            for (const char *c = host; *c; c++)
                if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f || *c == ',' ||
                    *c == '[' || *c == ']')
                    __builtin_trap();
        }
        long again = -1;
        if (hoop__nodelist_host(list, count, host, sizeof(host), &again, err, sizeof(err)) == 0)
            __builtin_trap();
    } else if (err[0] == '\0') {
        __builtin_trap(); /* refused without a sentence */
    }
    long tasks = -1;
    if (hoop__slurm_tasks_on_node(list, (long)(size % 7), &tasks) == 0 && tasks < 0)
        __builtin_trap();
    return 0;
}
