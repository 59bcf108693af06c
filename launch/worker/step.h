/*
 * The reference worker's own step channel (docs/DESIGN.md section 8): rank zero
 * broadcasts each step to every rank, and the ranks sum their findings.
 * Under mpirun this is MPI (the only use of MPI besides the bootstrap),
 * standing in for a real engine's execution protocol; a world of one needs
 * no channel. Waiting polls with short sleeps rather than spinning, so that
 * ranks sharing cores leave them to the store's threads.
 */
#ifndef SELENE_LAUNCH_STEP_H
#define SELENE_LAUNCH_STEP_H

#include "launch/bootstrap/bootstrap.h"

#include <stddef.h>
#include <stdint.h>

/* Whether b can carry steps for its world (MPI, or a world of one). */
bool launch_step_available(const struct launch_bootstrap *b);

/*
 * Rank zero: sends *bytes of buf to every rank. Others: receives the step
 * into buf (capacity bytes) and sets *bytes. Every rank calls it. Returns 0,
 * -EMSGSIZE when the step exceeds capacity, -ENOTSUP without a channel, or
 * -EIO when MPI fails.
 */
int launch_step_broadcast(const struct launch_bootstrap *b, void *buf, size_t capacity,
			  size_t *bytes);

/* Sums count values across every rank, in place on every rank. */
int launch_step_sum(const struct launch_bootstrap *b, uint64_t *values, uint32_t count);

/*
 * The same, giving up after timeout_ms with -ETIMEDOUT (the sum then never
 * completes: the caller ends the job with launch_step_abort). For a rank
 * whose start failed where the others may never hear of it (a peer that
 * could not reach rank zero waits out no join timeout of its own).
 */
int launch_step_sum_within(const struct launch_bootstrap *b, uint64_t *values, uint32_t count,
			   uint32_t timeout_ms);

/* Ends every rank of the job (MPI_Abort) with status; returns only without MPI. */
void launch_step_abort(const struct launch_bootstrap *b, int status);

#endif
