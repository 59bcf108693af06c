/*
 * A peer agent's steady state (docs/DESIGN.md section 7): after the startup
 * (peer/join.h), it executes the jobs rank zero sends on this rank's shard
 * engine and replies to each with JOB_DONE, over a link. It stops when rank
 * zero's connection ends; jobs already submitted drain first, for at most
 * drain_timeout_ms.
 */
#ifndef SELENE_PEER_AGENT_H
#define SELENE_PEER_AGENT_H

#include "cluster/join.h"
#include "record/geometry.h"
#include "record/key.h"
#include "shard/engine.h"
#include "shard/pool_link.h"

#include <stdbool.h>
#include <stdint.h>

struct peer_agent_options {
	int fd;                               /* joined; owned by the agent */
	struct cluster_sequences seq;         /* where the join left the numbers */
	struct shard_engine *engine;          /* this rank's; not owned */
	const struct rec_geometry *geometry;  /* this rank's */
	const struct rec_identity *namespace_id;
	uint32_t heartbeat_ms;
	uint32_t silence_timeout_ms;
	uint64_t queue_bytes_max;             /* the link's writer queue */
	uint32_t drain_timeout_ms;            /* after the link ends; 0: 60000 */
	/* what a pool attach needs (shard/pool_link.h); NULL: no pool configured */
	const struct shard_pool_plan *pool_plan;
};

/*
 * Runs until rank zero's connection ends and every submitted job ended.
 * Returns 0 when rank zero closed it cleanly (BYE, then end of file), or a
 * negative code with the reason in why (a silent rank zero, a malformed
 * frame, a close without BYE: -ECONNRESET). When jobs are
 * still running drain_timeout_ms after the end, returns SEL_ESTOPPED with
 * *undrained set: the engine may still be copying into its buffers and the
 * device, so it must not be closed or freed.
 */
int peer_agent_run(const struct peer_agent_options *options, bool *undrained, char *why,
		   size_t why_size);

#endif
