/*
 * Where this process sits among the ranks, from the environment (DESIGN.md
 * section 7; issue 6's launcher-neutral bootstrap):
 *
 *   SELENE_RANK, SELENE_WORLD_SIZE   (else OMPI_COMM_WORLD_RANK / _SIZE,
 *                                     else rank 0 of 1)
 *   SELENE_COORDINATOR=host:port     rank zero's address; every rank
 *   SELENE_SECRET_FILE=path          exactly 32 bytes, the launch secret;
 *                                    required when the world has >1 rank
 *
 * MPI itself is not linked: mpirun only starts the processes.
 */
#ifndef SELENE_LAUNCH_BOOTSTRAP_H
#define SELENE_LAUNCH_BOOTSTRAP_H

#include "selene/store.h"

#include <stddef.h>

struct launch_bootstrap {
	struct sel_cluster cluster;
	char host[256];
};

/*
 * Fills b from the environment. Returns 0, or -EINVAL with err naming the
 * variable that is missing or wrong. A world of one needs nothing set.
 */
int launch_bootstrap_from_env(struct launch_bootstrap *b, char *err, size_t err_size);

#endif
