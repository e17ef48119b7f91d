/*
 * A receive posted after its sender has gone, beyond 16 peers a host (where the shm transport
 * maps a peer's segment at its first transfer with it):
 *
 *   hooprun -n N late_recv        (N >= 18)
 *
 * Rank 1 sends 1000 bytes to rank 2 and 8 to rank 3, destroys its communicator and stays alive
 * 1.5 s; rank 2 waits 0.5 s and only then posts its first receive from rank 1 (rank 1 has
 * closed its segment, its process is still there), rank 3 waits 2.5 s (rank 1 has exited). Both
 * must get the bytes rank 1 sent, which lie in their own rings: a sender that closed or exited
 * after sending is no error.
 * Ranks 1, 2 and 3 are not neighbours in the host's tree, so neither receiver had mapped rank 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hoop.h"

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static uint8_t byte_at(int to, size_t i) { return (uint8_t)(i * 31u + (unsigned)to * 7u + 1u); }

int main(void)
{
    hoop_comm_t *c;
    if (hoop_init_from_env(&c) != HOOP_OK) {
        fprintf(stderr, "late_recv: hoop_init failed\n");
        return 1;
    }
    int rank = hoop_comm_rank(c), size = hoop_comm_size(c), bad = 0;
    if (size < 18) {
        fprintf(stderr, "late_recv: needs 18 ranks or more, not %d\n", size);
        hoop_comm_destroy(c);
        return 1;
    }
    size_t n[4] = {0, 0, 1000, 8};
    uint8_t buf[1000];
    if (rank == 1) {
        for (int to = 2; to <= 3; to++) {
            for (size_t i = 0; i < n[to]; i++) buf[i] = byte_at(to, i);
            hoop_result_t e = hoop_send(c, buf, n[to], HOOP_UINT8, to);
            if (e != HOOP_OK) {
                fprintf(stderr, "rank 1: send to %d: %s: %s\n", to, hoop_error_string(e),
                        hoop_comm_last_error(c));
                bad = 1;
            }
        }
        hoop_comm_destroy(c);
        sleep_s(1.5);
        return bad;
    }
    if (rank == 2 || rank == 3) {
        sleep_s(rank == 2 ? 0.5 : 2.5);
        memset(buf, 0, sizeof(buf));
        hoop_result_t e = hoop_recv(c, buf, n[rank], HOOP_UINT8, 1);
        if (e != HOOP_OK) {
            fprintf(stderr, "rank %d: receive from rank 1 (%s): %s: %s\n", rank,
                    rank == 2 ? "closed" : "exited", hoop_error_string(e), hoop_comm_last_error(c));
            bad = 1;
        }
        for (size_t i = 0; e == HOOP_OK && i < n[rank]; i++)
            if (buf[i] != byte_at(rank, i)) {
                fprintf(stderr, "rank %d: byte %zu is %u, not %u\n", rank, i, buf[i],
                        byte_at(rank, i));
                bad = 1;
                break;
            }
        if (!bad)
            printf("rank %d: %zu bytes from rank 1 after it %s\n", rank, n[rank],
                   rank == 2 ? "closed" : "exited");
    }
    hoop_comm_destroy(c);
    return bad;
}
