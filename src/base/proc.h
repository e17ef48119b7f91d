/* Whether another process still runs, for waits on a peer that has no pidfd (kernels before 5.3,
 * valgrind). */
#ifndef HOOP_BASE_PROC_H
#define HOOP_BASE_PROC_H

#include <sys/types.h>

/* 1 where pid is gone or a zombie, 0 where it runs (or cannot be told). */
int hoop__process_gone(pid_t pid);

#endif
