/*
 * Rank zero's job transport across ranks (docs/DESIGN.md section 7): every
 * store, fetch, truncate and unlink runs on rank zero's own shard engine
 * and is sent, identical, to every peer over its link. A job completes
 * when every rank has answered. A store that failed anywhere is unlinked
 * from the ranks that wrote it before the failure is reported. A link that
 * dies, or a job past its timeout, stops the transport: no completion for
 * the jobs outstanding (a peer may still be copying into their GPU ids),
 * no new jobs, and stopped() says why. It implements struct coord_jobs for
 * the store policy (coordinator/store.h).
 */
#ifndef SELENE_COORDINATOR_FANOUT_H
#define SELENE_COORDINATOR_FANOUT_H

#include "coordinator/cluster.h"
#include "cluster/link.h"
#include "coordinator/store.h"
#include "shard/engine.h"

#include <stdbool.h>
#include <stdint.h>

struct coord_fanout;

struct coord_fanout_options {
	struct shard_engine *local;     /* rank zero's; not owned */
	struct coord_peer *peers;       /* world - 1 joined sockets; taken over (a failed
					 * open closes those it took without BYE and
					 * leaves the rest, fd >= 0, to the caller) */
	uint32_t peer_count;
	uint32_t heartbeat_ms;
	uint32_t silence_timeout_ms;
	uint32_t job_timeout_ms;        /* a job unanswered this long stops it */
	uint64_t queue_bytes_max;       /* each link's writer queue */
};

int coord_fanout_open(const struct coord_fanout_options *options,
		      struct coord_fanout **out);

/*
 * Closes every link (peers then stop) and frees; NULL is fine. The links
 * end with BYE unless the transport stopped (R-WIRE-23).
 */
void coord_fanout_close(struct coord_fanout *fanout);

/*
 * The link to rank (1 .. world - 1): its counters and queue, and whether it
 * is still up. False for a rank out of range. Any thread.
 */
bool coord_fanout_link_stats(struct coord_fanout *fanout, uint32_t rank,
			     struct cluster_link_stats *out, bool *alive);

/*
 * Asks every peer to open its own pool connection (R-WIRE-21's pool
 * attach) to address as a member of instance_id (16 bytes); rank zero's
 * connection is the caller's. Completes through the jobs' poll once every
 * peer answered, with the first failure and its rank; a job no peer could
 * be sent fails here at once.
 */
int coord_fanout_pool_attach(struct coord_fanout *fanout, uint64_t job_id,
			     const uint8_t *instance_id, const char *address);

/*
 * Every rank's share of a pool put (R-WIRE-21): rank zero's engine, then a
 * JOB to every peer; the job completes, through the jobs' poll, once every
 * rank sent its share (0) or one failed (the first failure, with its
 * rank). Returns 0, SEL_ESTOPPED or rank zero's engine's refusal.
 */
int coord_fanout_pool_put(struct coord_fanout *fanout, uint64_t job_id,
			  const struct rec_key *key, uint64_t put_id, uint64_t share_bytes);

/*
 * Every rank's share of a GPU checkpoint's export (R-WIRE-21's pool
 * export, pool/PROTOCOL.md R-POOL-78): rank zero's engine, then a JOB
 * with the header, page ids and state slot to every peer, whose share is
 * built from its own device; completes as a put does.
 */
int coord_fanout_pool_export(struct coord_fanout *fanout, uint64_t job_id,
			     const struct shard_pool_export_job *export);

/*
 * Every rank's share of a pool claim (R-WIRE-21), into the same page ids
 * and state slot on every rank (page_id_count: the chain's pages after
 * skip); completes as a fetch does. After coord_fanout_pool_claim_early
 * of job_id, the peers' shares only.
 */
int coord_fanout_pool_claim(struct coord_fanout *fanout, uint64_t job_id,
			    const struct shard_pool_claim_job *claim, uint32_t page_id_count);

/*
 * Rank zero's share of a same-host pool claim before its grant (claim->early
 * set, R-POOL-22): its engine's job now; the peers' come with
 * coord_fanout_pool_claim at the grant, or never (coord_fanout_pool_claim_cancel).
 * The job completes once, when every rank's share did.
 */
int coord_fanout_pool_claim_early(struct coord_fanout *fanout, uint64_t job_id,
				  const struct shard_pool_claim_job *claim);

/*
 * The claim job_id begun early got no grant for its peers (refused, or
 * the chain changed): they get no share and count as failed with result
 * and why; the job completes once rank zero's share did.
 */
void coord_fanout_pool_claim_cancel(struct coord_fanout *fanout, uint64_t job_id, int result,
				    const char *why);

/* The table of functions the store policy drives jobs through. */
void coord_fanout_jobs(struct coord_fanout *fanout, struct coord_jobs *jobs);

#endif
