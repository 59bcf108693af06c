/*
 * Rank zero's pool session driver (docs/DESIGN.md section 13): it sits
 * between the store's policy and its jobs. The policy asks for a record's
 * put or a hit's claim as one job (struct coord_jobs' pool_put and
 * pool_claim); this layer turns each into the session's steps (put begin,
 * every rank's share, commit, outcome; claim, every rank's share, end;
 * a local claim's rank zero share starts with the claim, from the lookup's
 * places, and the peers' at its grant) and
 * hands the policy one completion per job, through the same poll as every
 * other job, which it forwards to the inner jobs (the fan-out, or rank
 * zero's engine alone). Lookups go straight to the session.
 *
 * What it is not: it opens no connection (the session is given, over
 * pool/client.h or a test's), decides nothing the policy decides, and never
 * waits: every session call it makes is one that never waits.
 * Single-threaded, as the policy: the model thread owns it.
 */
#ifndef SELENE_COORDINATOR_POOL_H
#define SELENE_COORDINATOR_POOL_H

#include "coordinator/store.h"
#include "shard/engine.h"

#include <stdbool.h>
#include <stdint.h>

/* Claims between their request and their end at once: each keeps its page ids. */
#define COORD_POOL_CLAIMS_MAX 4u

/*
 * The session (rank zero's connection, pool/client.h's session calls, or a
 * test's). None waits. Polls return 0 while the answer has not come, 1
 * when it came, or the refusal or failure (which ends the request).
 */
struct coord_pool_session {
	void *ctx;
	int (*put_begin)(void *ctx, const struct coord_pool_put *put, uint32_t world_size,
			 uint64_t *request);
	int (*put_ready)(void *ctx, uint64_t request, uint64_t *put_id);
	int (*put_commit)(void *ctx, uint64_t put_id, bool commit);
	int (*put_outcome)(void *ctx, uint64_t put_id);
	int (*claim_begin)(void *ctx, const struct rec_key *key, uint64_t *claim_id);
	/*
	 * Optional (NULL: never): whether claim_id's grant brings the session
	 * rank's arena places (R-POOL-51), so that its share may begin before
	 * the grant from the lookup's places (R-POOL-22).
	 */
	bool (*claim_local)(void *ctx, uint64_t claim_id);
	int (*claim_granted)(void *ctx, uint64_t claim_id, struct coord_pool_record *chain,
			     uint32_t max, uint32_t *count);
	void (*claim_end)(void *ctx, uint64_t claim_id, int result);
};

/* Every rank's share of a put or a claim: coord_fanout_pool_* or one engine's. */
struct coord_pool_ranks {
	void *ctx;
	int (*put)(void *ctx, uint64_t job_id, const struct rec_key *key, uint64_t put_id,
		   uint64_t share_bytes);
	int (*claim)(void *ctx, uint64_t job_id, const struct shard_pool_claim_job *claim,
		     uint32_t page_id_count);
	/*
	 * Optional (NULL: every share goes at the grant): rank zero's share
	 * of a local claim before its grant (claim->early set). In a world of
	 * more than one rank, claim then sends the peers' shares only, or
	 * claim_cancel (required with claim_early) fails them unsent; either
	 * way job_id completes once, when every rank's share did. In a world
	 * of one the grant sends nothing more.
	 */
	int (*claim_early)(void *ctx, uint64_t job_id, const struct shard_pool_claim_job *claim);
	void (*claim_cancel)(void *ctx, uint64_t job_id, int result, const char *why);
	/* Optional (NULL: no GPU exports): a GPU checkpoint's share on every rank. */
	int (*export)(void *ctx, uint64_t job_id, const struct shard_pool_export_job *export);
};

/* GPU exports between their request and their end at once: each keeps its page ids. */
#define COORD_POOL_GPU_EXPORTS_MAX COORD_POOL_EXPORTS_MAX

/* A lookup's grace period (seed 2.15): on the manager's host, */
#define COORD_POOL_GRACE_LOCAL_NS 2000000ull
/* elsewhere this many control round trips, */
#define COORD_POOL_GRACE_ROUND_TRIPS 4u
/* and never more than this (also while no round trip was measured yet). */
#define COORD_POOL_GRACE_MAX_NS 250000000ull

/*
 * How long a lookup waits for the pool's answer (coord_store_set_pool_lookups):
 * 2 ms with the manager on this host (its arena maps here), else four of
 * the session's smoothed round trips (rtt_us; 0: not measured yet), at
 * most 250 ms.
 */
uint64_t coord_pool_grace_ns(bool same_host, uint32_t rtt_us);

struct coord_pool;

/*
 * A driver over inner (copied: the jobs every other job goes to), session
 * and ranks (copied), for a world of world_size ranks whose devices hold
 * page_count pages; refusals counts the manager's refusals (borrowed, the
 * store's pool_refusals). Returns 0 and *out, or -ENOMEM.
 */
int coord_pool_open(const struct coord_jobs *inner, const struct coord_pool_session *session,
		    const struct coord_pool_ranks *ranks, uint32_t world_size,
		    uint32_t page_count, uint64_t *refusals, struct coord_pool **out);
void coord_pool_close(struct coord_pool *pool);

/*
 * The jobs table for the policy: inner's, with pool_put, pool_claim, poll
 * and (where the ranks can export) pool_export its own.
 */
void coord_pool_jobs(struct coord_pool *pool, struct coord_jobs *jobs);

/* Whether a put or claim is in flight (a reconnect swaps connections only when none is). */
bool coord_pool_busy(const struct coord_pool *pool);

/*
 * The ranks' reattach job job_id (a reserved id, coord_store_job_reserve)
 * was sent: its completion is taken by the driver's poll, not handed out.
 * coord_pool_attach_result answers 0 while it runs, then 1 once with
 * *result (0 or a negative errno) and why.
 */
void coord_pool_expect_attach(struct coord_pool *pool, uint64_t job_id);
int coord_pool_attach_result(struct coord_pool *pool, int *result, char *why, size_t why_size);

#endif
