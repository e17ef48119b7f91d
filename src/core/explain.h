/* A timeout that explains itself (explain.c): when a call of a communicator fails on a timeout
 * (its own, or a peer's that aborted it) or on a lost peer, the rank asks every peer where it is
 * and says, in one WARN line that also heads hoop_comm_last_error(), which ranks the call waits
 * for and where each of them is: in an earlier call, finished and back in the program, stopped,
 * not answering, dead. Every rank answers such questions on a thread of its own, whatever its
 * caller is doing. */
#ifndef HOOP_EXPLAIN_H
#define HOOP_EXPLAIN_H

#include <stddef.h>

struct hoop_comm;

/* As c listens (init, split): opens the status socket, starts the thread that answers on it, and
 * appends " x=PORT:PID" to the address addr (n bytes) that c publishes; the transports ignore the
 * part. Without a socket c still explains, with every peer unknown. */
void hoop__explain_open(struct hoop_comm *c, char *addr, size_t n);
/* Once every rank's address is read (ptrs[j], NULL for this rank; own: this rank's): where each
 * peer answers. */
void hoop__explain_peers(struct hoop_comm *c, const char *const *ptrs, const char *own);
/* As c is freed: stops the thread, closes the socket. */
void hoop__explain_close(struct hoop_comm *c);
/* Whether a failed call of c should explain itself (a load or two). */
int hoop__explain_wanted(struct hoop_comm *c);
/* Where a failed call returns to its caller, on the caller's thread: gathers the peers' answers
 * (at most about a second), logs the line and makes it the head of hoop_comm_last_error(). Once
 * per communicator; cheap where nothing is due. */
void hoop__explain_due(struct hoop_comm *c);

#endif
