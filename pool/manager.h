/*
 * The pool manager (pool/PROTOCOL.md; docs/DESIGN.md, "The pool manager"):
 * library code that `selene pool` (launch/cmd_pool.c) drives and tests run
 * in-process. One thread runs an epoll loop over a listener and every
 * connection (non-blocking sockets): the handshake and ATTACH, per-instance
 * sessions, an index of records per scope, an arena in one /dev/shm file
 * with a first-fit allocator, LRU eviction and max-age expiry, puts that
 * commit only when every share verified, and claims that pin chains until
 * they end or their deadline passes. With config.rdma and a verbs device,
 * claim windows go by RDMA WRITEs into slots the ranks lend (R-POOL-90 ..;
 * pool/rdma.h), and while a WRITE is in flight the loop polls its
 * completions every 100 us at most, sleeping between, never spinning.
 *
 * The disk tier (config.dir) is read and written on a thread of its own
 * with a bounded queue (POOL_DISK_JOBS_MAX jobs, POOL_DISK_QUEUE_BYTES_MAX
 * bytes of spill copies): a spill copies its record out of the arena and
 * queues the write (each share file synced before its rename and its
 * directory after), a claim of a record on disk is answered once its
 * load read and verified it, and the loop never waits for the disk; a
 * spill that cannot be queued is refused, and the put or claim that
 * needed its room with it. The metrics endpoint is the program's
 * (launch/cmd_pool.c).
 */
#ifndef SELENE_POOL_MANAGER_H
#define SELENE_POOL_MANAGER_H

#include "pool/wire.h"

#include <stdbool.h>

#include <stddef.h>
#include <stdint.h>

struct pool_manager;

struct pool_manager_config {
	const char *listen;  /* "host:port", "[v6]:port" or ":port"; port 0 picks one */
	const char *name;    /* 1 .. POOL_NAME_BYTES_MAX printable bytes */
	uint8_t secret[POOL_SECRET_BYTES];
	uint64_t memory_bytes;  /* the arena, past its 4096-byte header */
	uint64_t max_age_ms;    /* 0: records never expire */
	uint32_t window_bytes;  /* 0: POOL_WINDOW_BYTES_DEFAULT */
	uint32_t claim_setup_ms; /* 0: POOL_CLAIM_SETUP_MS */
	/*
	 * How long an export may stay unanswered before the manager forgets it
	 * and counts it failed (R-POOL-74); 0: POOL_EXPORT_MS, which is also
	 * the most. Tests shorten it.
	 */
	uint32_t export_ms;
	/*
	 * The disk tier, or NULL: records the arena evicts move here as record
	 * files (one directory per scope, one per rank), come back for a claim,
	 * and are found again when a manager of the same name starts on it.
	 */
	const char *dir;
	/*
	 * The most bytes the disk tier's share files may take, 0: no limit.
	 * Past it the least recently used record on disk that no claim pins
	 * and no record extends is deleted to make room for a spill; a record
	 * larger than the limit is dropped instead of spilled.
	 */
	uint64_t disk_limit_bytes;
	/* Connections served at once, 0: POOL_CONNECTIONS_MAX (at most that). */
	uint32_t connections_max;
	/*
	 * --rdma: offer RDMA claims (pool/PROTOCOL.md, R-POOL-90 ..) through the
	 * verbs device named rdma_device (NULL: the first with an active port).
	 * Without a device, one warning and every claim streams by TCP.
	 */
	bool rdma;
	const char *rdma_device;
};

/* Counters, for logs, tests and metrics. */
struct pool_manager_stats {
	uint64_t connections;      /* accepted */
	uint64_t refused;          /* connections refused (any reason) */
	uint64_t auth_failures;    /* a MAC or tag that did not verify */
	uint64_t records;          /* committed, all scopes */
	uint64_t arena_used_bytes;
	uint64_t puts_committed;
	uint64_t puts_failed;
	uint64_t claims_granted;
	uint64_t claims_refused;
	uint64_t lookups;
	uint64_t lookup_hits;
	uint64_t evicted;          /* dropped for room */
	uint64_t expired;
	uint64_t expire_sweeps;    /* max-age sweeps run */
	uint64_t expire_examined;  /* records those sweeps looked at */
	uint64_t timer_walks;      /* walks of every deadline by the loop */
	uint64_t spilled;          /* moved from the arena to the disk tier */
	uint64_t loaded;           /* moved back from the disk tier for a claim */
	uint64_t disk_failures;    /* a share file unreadable or failing its checks */
	uint64_t spill_failures;   /* spills whose files could not be written */
	/* holders and exports (R-POOL-70 .. R-POOL-75) */
	uint64_t holds;            /* (key, instance) announcements kept, all scopes */
	uint64_t holds_dropped;    /* adds past a scope's POOL_HOLDS_SCOPE_MAX */
	uint64_t exports_requested;
	uint64_t exports_completed; /* EXPORT_END 0 and the record held */
	uint64_t exports_refused;   /* EXPORT_END -ENOENT: the holder lost the record */
	uint64_t exports_failed;    /* any other end, the deadline, or the holder gone */
	uint64_t rdma_connections; /* connections whose lent slots were connected (R-POOL-92) */
	uint64_t rdma_windows;     /* claim windows written by RDMA (R-POOL-94) */
	uint64_t rdma_failures;    /* RDMA transfers or connects that failed (R-POOL-97) */
	uint64_t disk_used_bytes;  /* share files the disk tier holds */
	uint64_t disk_evicted;     /* deleted from the disk tier for room (disk_limit_bytes) */
	uint64_t disk_queued;      /* jobs the disk thread holds now (POOL_DISK_JOBS_MAX) */
	uint64_t disk_queue_full;  /* spills refused: the disk thread's queue was full */
	/*
	 * The last claim answered as it was read (CLOCK_MONOTONIC ns, for
	 * benches): the loop woke for its frame, decoded it, queued its answer.
	 */
	uint64_t claim_woken_ns, claim_read_ns, claim_answered_ns;
};

/*
 * Binds the listener, creates the arena file (/dev/shm/selene-pool-<name>-
 * <pid>-<n>, mode 0600) and maps it. Returns 0 and *out, or a negative
 * errno with the reason in why. Nothing is served until pool_manager_run.
 */
int pool_manager_open(const struct pool_manager_config *config, struct pool_manager **out,
		      char *why, size_t why_size);

/* The port the listener is bound to. */
uint16_t pool_manager_port(const struct pool_manager *m);

/* The arena file's path. */
const char *pool_manager_arena_path(const struct pool_manager *m);

/*
 * Serves until pool_manager_stop: then drains (R-POOL-45: refuses new
 * connections and requests, lets live claims and puts finish until their
 * deadlines), sends BYE everywhere and returns 0. Call from one thread.
 */
int pool_manager_run(struct pool_manager *m);

/* Asks the loop to drain and return; async-signal-safe, any thread. */
void pool_manager_stop(struct pool_manager *m);

/* A copy of the counters, from any thread. */
void pool_manager_stats(struct pool_manager *m, struct pool_manager_stats *out);

/* Closes every connection, unlinks the arena and frees m. NULL does nothing. */
void pool_manager_close(struct pool_manager *m);

#endif
