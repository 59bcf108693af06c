/*
 * A rank's connection to a pool manager (docs/DESIGN.md section 13): one
 * pool/client.h client opened for this rank of an instance, with its scope
 * computed from the store's configuration (every rank's geometry), and the
 * engine's struct shard_pool_conn over it: a put sends the rank's record
 * file as its share, a claim pulls the rank's share window by window into
 * slots of its own and hands each verified window to shard/pool_share.c,
 * or, on the manager's host, copies the share from the manager's arena
 * (mapped read-only at the first claim and registered with the device on
 * a thread of the link's own; the first claim waits up to a second for
 * it, and claims stream until it is done);
 * rank zero's later same-host claims begin their copies from the lookup's
 * places before the grant, which the transfer thread then waits for by
 * claim id (claim_early, pool_claim_wait).
 * Each blocks the transfer thread within the seed's deadline: 10 s plus
 * the share's bytes at 8 MiB/s.
 *
 * What it is not: it decides nothing (rank zero's session does). Rank
 * zero's link does not reconnect (its client is the session, which the
 * store reopens): after a lost connection every transfer fails with the
 * connection's reason until the link is closed and another opened. A peer
 * rank's link whose own connection was lost opens it again, with backoff,
 * on a thread of its own started by the share that met the loss; shares
 * fail at once until it succeeded, so the transfer thread never waits for
 * the manager (DESIGN section 13). Opening blocks the caller up to its
 * deadline, and closing waits for a reconnect try still running (2 s at
 * most); the transfers are safe
 * from the transfer thread while another thread uses the client's
 * never-waiting calls (rank zero's session).
 */
#ifndef SELENE_SHARD_POOL_LINK_H
#define SELENE_SHARD_POOL_LINK_H

#include "pool/client.h"
#include "selene/store.h"
#include "shard/engine.h"

#include <stddef.h>
#include <stdint.h>

/* The seed's transfer deadline (2.15): this much setup, */
#define SHARD_POOL_SETUP_MS 10000u
/* then the share's bytes at this rate. */
#define SHARD_POOL_BYTES_PER_S (8ull << 20)

struct shard_pool_link;

/*
 * What a rank needs to attach, prepared when the store or the peer starts
 * (the configuration is the caller's only for that call): the secret, this
 * rank's geometry and every rank's scope parts (R-POOL-16).
 */
struct shard_pool_plan {
	int failure; /* 0, or why this rank cannot attach (why says) */
	char why[200];
	uint8_t secret[POOL_SECRET_BYTES];
	struct rec_identity namespace_id;
	struct rec_geometry geometry; /* this rank's */
	uint32_t world_size;
	uint64_t page_bytes[REC_WORLD_SIZE_MAX];
	uint64_t row_bytes[REC_WORLD_SIZE_MAX];
};

/*
 * Prepares plan for rank of world_size from store (pool_secret_file and the
 * planes). A failure (a secret file missing or too open, a geometry) is
 * kept in plan->failure and why, and also returned: the attach answers it.
 */
int shard_pool_plan_init(struct shard_pool_plan *plan, const struct sel_store_config *store,
			 uint32_t rank, uint32_t world_size,
			 const struct rec_identity *namespace_id);

/* Forgets the secret. */
void shard_pool_plan_destroy(struct shard_pool_plan *plan);

/*
 * Opens the client to address as a member of instance_id (plan is
 * borrowed until the link closes: a peer rank's reconnects use it)
 * (POOL_INSTANCE_ID_BYTES, equal on every rank), within deadline_ms for
 * connect, handshake and attach (pool_client_open). Returns 0 and *out,
 * or the plan's or the client's failure with why; -ENOMEM also when the
 * claim staging does not fit the memory budget (shard_slab_memory_fits),
 * checked before it is allocated. The manager's arena is held to the same
 * budget at the first claim: one that does not fit is never registered
 * and claims stream.
 */
int shard_pool_link_open(const struct shard_pool_plan *plan, const char *address,
			 const uint8_t *instance_id, uint32_t deadline_ms,
			 struct shard_pool_link **out, char *why, size_t why_size);

/*
 * Closes the client and frees the link; NULL does nothing. A registration
 * of the manager's arena still running is waited for; a link whose
 * arena is registered with a device undoes that (making the device
 * current on the calling thread): close it before that device, with no
 * transfer running on it.
 */
void shard_pool_link_close(struct shard_pool_link *link);

/*
 * Never waits. Ends the link's connection now (pool_client_cut), so the
 * manager frees the rank's place before a replacing link attaches
 * (R-POOL-18); the link is still to be closed. NULL does nothing.
 */
void shard_pool_link_cut(struct shard_pool_link *link, const char *why);

/*
 * shard_pool_link_close as shard_engine_retire takes it: a replaced link
 * is closed on the transfer thread, which owns the device, never on the
 * model thread (its unregistration of the arena can take long).
 */
void shard_pool_link_close_ctx(void *link);

/* The client (rank zero's session uses it too); NULL while a peer's reconnect waits. */
struct pool_client *shard_pool_link_client(struct shard_pool_link *link);

/* The engine's connection over the link (shard_engine_set_pool). */
void shard_pool_link_conn(struct shard_pool_link *link, struct shard_pool_conn *conn);

/*
 * What this process's links did (every link together; tests and bench read
 * them): claims copied from the manager's arena and their records, claims
 * streamed and their windows, arenas that could not be mapped or
 * registered (each also warned once), and what the session rank's claims
 * begun before their grant did with each record.
 */
struct shard_pool_link_counts {
	uint64_t arena_claims;
	uint64_t arena_records;
	uint64_t stream_claims;  /* by TCP or by RDMA */
	uint64_t rdma_claims;    /* of those, pulled by RDMA (pool/PROTOCOL.md, R-POOL-93) */
	uint64_t stream_windows;
	uint64_t arena_refusals;
	/*
	 * The session rank's same-host claims begun before their grant
	 * (R-POOL-22) and their records: copied early and kept, copied early
	 * but stale and copied again, copied only once the grant came.
	 */
	uint64_t early_claims;
	uint64_t records_early;
	uint64_t records_redone;
	uint64_t records_waited;
};

void shard_pool_link_counts(struct shard_pool_link_counts *out);

/* The deadline of a transfer of bytes (SHARD_POOL_SETUP_MS plus 8 MiB/s). */
int shard_pool_link_deadline_ms(uint64_t bytes);

#endif
