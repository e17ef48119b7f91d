/* Slurm as a launcher: who and where from the variables srun exports, with no MASTER_ADDR or
 * MASTER_PORT. Private to src/rendezvous (rendezvous.c calls it; the unit tests call the
 * expander directly). */
#ifndef HOOP_SLURM_H
#define HOOP_SLURM_H

#include <stddef.h>

#include "hoop.h"
#include "rendezvous/rendezvous.h"

/* Expands a Slurm host list ("node[01-04,07]", "a[1-2],b3", "r[1-2]-n[1-2]": commas between
 * hosts, brackets of numbers and ranges with the width of a range's first bound kept as zero
 * padding, several bracket groups multiplying) and copies host number index (from 0) into out.
 * *count gets the number of hosts in the list. 0 on success; -1 with a sentence in err for a
 * malformed list, a host longer than cap-1 or an index beyond the list (out is then ""). */
int hoop__nodelist_host(const char *list, long index, char *out, size_t cap, long *count, char *err,
                        size_t errlen);

/* The number of tasks on node number node (from 0) of a Slurm tasks-per-node list such as "4",
 * "2(x3),1" (SLURM_STEP_TASKS_PER_NODE). 0 on success; -1 for a malformed list or a node beyond
 * it. */
int hoop__slurm_tasks_on_node(const char *spec, long node, long *tasks);

/* This task's local world size in its step: SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID (the
 * inherited SLURM_NTASKS_PER_NODE of an allocation may not be the step's). 1: *ls and *from set;
 * 0: not in a step or the variables are missing; -1: malformed (a sentence in err). */
int hoop__slurm_local_size(long *ls, const char **from, char *err, size_t errlen);

/* Whether this process is a task of a Slurm step (SLURM_JOB_ID, SLURM_STEP_ID, SLURM_PROCID). */
int hoop__slurm_in_step(void);

/* Fills what MASTER_ADDR and MASTER_PORT do not give (out->host where host_set is 0, out->port
 * where port_set is 0): the first host of the step's node list, and a port derived from the job
 * and step ids. Also checks that rank 0 runs on that host. */
hoop_result_t hoop__slurm_address(hoop__rdv_t *out, int host_set, int port_set, char *err,
                                  size_t errlen);

/* The port a job and step meet on: HOOP__SLURM_PORT_BASE + (job * 16 + step % 16) mod
 * HOOP__SLURM_PORT_SPAN. Consecutive jobs get different ports (1250 jobs apart before the range
 * wraps), and so do a job's first 16 concurrent steps; below Linux's ephemeral range. */
#define HOOP__SLURM_PORT_BASE 12000
#define HOOP__SLURM_PORT_SPAN 20000
int hoop__slurm_port(unsigned long job, unsigned long step);

#endif
