/*
 * Where this process sits among the ranks (docs/DESIGN.md section 7), from one of
 * two sources:
 *
 * The environment, for any launcher:
 *   SELENE_RANK, SELENE_WORLD_SIZE   (else OMPI_COMM_WORLD_RANK / _SIZE,
 *                                     else rank 0 of 1)
 *   SELENE_COORDINATOR=host:port     rank zero's address ([::1]:port for an
 *                                    IPv6 address); every rank
 *   SELENE_SECRET_FILE=path          exactly 32 bytes, the launch secret;
 *                                    required when the world has >1 rank;
 *                                    a regular file that neither group nor
 *                                    others may read, write or execute
 *                                    (mode 0600 or 0400), else refused
 *   SELENE_ACCEPT_EMPTY_RANKS=1      form even when a rank's record directory
 *                                    is unmarked and empty, or unmarked
 *                                    while another is marked (also under MPI)
 *
 * MPI, under mpirun when SELENE_COORDINATOR is not set (and this program
 * was built with Open MPI's headers): rank and world from MPI; rank zero
 * listens on an ephemeral port and draws a fresh secret, both broadcast
 * (over MPI's own transport, in the clear); every rank's host identity
 * (boot id and network namespace) and IPv4 interfaces are gathered, each
 * peer connects over loopback on rank zero's host, else to rank zero's
 * address on a subnet they share (no shared subnet is an error), and rank
 * zero accepts it only from that route's address. MPI is used only here.
 */
#ifndef SELENE_LAUNCH_BOOTSTRAP_H
#define SELENE_LAUNCH_BOOTSTRAP_H

#include "selene/store.h"

#include <stdbool.h>
#include <stddef.h>

struct launch_bootstrap {
	struct sel_cluster cluster;
	char host[256];
	bool mpi;                           /* MPI_Init was called here */
	const char *addresses[1024];        /* MPI: cluster.rank_addresses */
	char address_text[1024][16];
};

/*
 * Fills b from MPI or the environment (above). Returns 0, or a negative
 * code with err naming what is missing or wrong. Call
 * launch_bootstrap_finish at the end either way.
 */
int launch_bootstrap(struct launch_bootstrap *b, char *err, size_t err_size);

/*
 * Fills b from the environment. Returns 0, or -EINVAL with err naming the
 * variable that is missing or wrong. A world of one needs nothing set.
 */
int launch_bootstrap_from_env(struct launch_bootstrap *b, char *err, size_t err_size);

/* The MPI source alone; -EINVAL with err where MPI was not built in. */
bool launch_bootstrap_mpi_available(void);
int launch_bootstrap_from_mpi(struct launch_bootstrap *b, char *err, size_t err_size);

/* One rank's host and IPv4 interfaces, as the MPI bootstrap gathers them. */
#define LAUNCH_ADDRESSES_MAX 8
struct launch_interfaces {
	char host_id[64];                    /* boot id and network namespace */
	uint32_t count;
	uint32_t addr[LAUNCH_ADDRESSES_MAX]; /* network order, loopback left out */
	uint32_t mask[LAUNCH_ADDRESSES_MAX];
};

/*
 * Where peer connects to rank zero (*to) and the address it connects from
 * (*from), both in network order: loopback on rank zero's own host;
 * otherwise the first of rank zero's addresses on a subnet where the peer
 * has a different address (an address both carry, like docker0's, is no
 * route between them). False when they share no subnet: the launcher must
 * name rank zero's address (SELENE_COORDINATOR).
 */
bool launch_route(const struct launch_interfaces *zero, const struct launch_interfaces *peer,
		  uint32_t *to, uint32_t *from);

/* Closes rank zero's MPI listener and finalizes MPI where it was used. */
void launch_bootstrap_finish(struct launch_bootstrap *b);

#endif
