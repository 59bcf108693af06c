/*
 * Selene's store API: what a serving engine's model worker thread calls on
 * rank zero (docs/DESIGN.md sections 1, 5 and 9; seed 2.2). With a cluster
 * (struct sel_cluster) rank zero fans every store, fetch, truncate and unlink
 * out to a peer agent on every other rank (sel_peer_start, below), and a job
 * completes only when every rank has finished it; with none, the store is
 * one rank's.
 *
 * Threads: every call below is made from one thread (the model worker),
 * except sel_store_metrics and sel_store_stats, which may be called from any
 * thread at any time, also during and after sel_store_close: close waits for
 * the calls already inside, and later ones answer -ESHUTDOWN. None of
 * sel_lookup, sel_store_publish, sel_fetch, sel_cancel or
 * sel_poll waits for I/O: work goes to bounded queues, and a full queue
 * answers at once (SEL_RETRY, or SEL_EQUEUEFULL).
 *
 * A NULL handle, or a NULL pointer a call would read or write through, is
 * refused with -EINVAL and changes nothing (sel_lookup answers false,
 * sel_poll 0, sel_store_metrics and sel_store_stats -ESHUTDOWN for a NULL
 * or closed store); close and stop calls accept NULL. A call taking
 * (err, err_size) writes a NUL-terminated message of at most err_size bytes
 * into err on failure; err may be NULL only with err_size 0 (no message):
 * a NULL err with a size is refused with -EINVAL, *out untouched. Rank
 * zero's sel_store_open tells its peers why it failed whatever buffer it
 * was given (none, too small, or NULL with a size), wherever it can reach
 * them (below).
 *
 * Fork: a store or peer belongs to the process that opened or started it.
 * A child of fork() has a copy of the handle but none of its threads, so
 * every call there on the parent's handle is refused with -ECHILD and
 * touches nothing (sel_lookup answers false, sel_poll 0). That includes
 * sel_store_close, sel_peer_wait and sel_peer_stop: in the child they free
 * nothing, and the child's copy of the handle (memory, descriptors) is
 * leaked rather than torn down without its threads. The parent's store or
 * peer is unaffected and is closed by the parent.
 */
#ifndef SELENE_STORE_H
#define SELENE_STORE_H

#include "selene/selene.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sel_store sel_store;
typedef struct sel_history sel_history;

/*
 * disk_limit_bytes: one tenth of the free space at open (the store's own
 * records counted as free); on a disk so full that this holds no record of
 * one page and the row, the open (or sel_peer_start) fails with -ENOSPC
 * saying so.
 */
#define SEL_DISK_LIMIT_AUTO UINT64_MAX

/*
 * Where this process sits among the ranks, filled by the caller from
 * whatever launcher it uses (launch/ does it from MPI or the environment).
 * Every rank's record files stay on its own host; rank zero runs the store
 * API, every other rank a peer (sel_peer_start).
 */
struct sel_cluster {
	uint32_t rank;                 /* this process's rank */
	uint32_t world_size;           /* 1 .. 1024 */
	const char *coordinator_host;  /* rank zero's address (peers connect there) */
	uint16_t coordinator_port;     /* rank zero listens on it, all addresses */
	int listen_fd;                 /* rank zero: a bound, listening socket to use
					  instead (-1: bind coordinator_port); it is
					  shut down once the cluster formed (the join
					  port closes), and the caller still closes it */
	const char *const *rank_addresses; /* world_size IP literals each rank may
					  connect from (a peer binds its connection
					  to its own entry); NULL accepts any */
	uint8_t secret[32];            /* the launch secret; never sent */
	uint32_t join_timeout_ms;      /* for every rank to join and agree */
	uint32_t silence_timeout_ms;   /* a link hearing nothing this long is dead
					  (0: 10 s; else 100 and up) */
	uint32_t job_timeout_ms;       /* a job unanswered this long stops the store */
	bool accept_empty_ranks;       /* rank zero: form even when a rank's record
					  directory has no cluster marker and is
					  empty, or has none while another has,
					  while others hold records (the agreement
					  then deletes them everywhere; logged);
					  false: refuse, naming the rank. A marked
					  empty directory always forms */
};

/* One plane of the rank's cache: its name, unit size and device address. */
struct sel_plane {
	const char *name;        /* copied at open */
	uint64_t unit_bytes;     /* one page (or one row) */
	uint64_t device_address; /* base of the plane: a CUdeviceptr, or a host
				    address for the "host" device */
};

enum sel_warm_policy {
	SEL_WARM_WRITE_THROUGH = 0,
	SEL_WARM_WRITE_BEHIND = 1,
};

struct sel_store_config {
	const char *dir;                 /* base directory; copied */
	uint8_t model_identity[32];
	uint8_t state_mode;              /* 0 ordinary, 1 learned, 2 copy speculation */
	uint32_t page_tokens;
	uint32_t page_plane_count;
	const struct sel_plane *page_planes; /* any order; copied */
	struct sel_plane row_plane;
	uint32_t page_count;             /* pages per page plane on the device */
	uint32_t row_count;              /* state slots in the row plane */
	const char *device;              /* "auto" (NULL), "cuda" or "host" */
	int device_ordinal;
	uint64_t disk_limit_bytes;       /* SEL_DISK_LIMIT_AUTO, 0 (no disk store), or bytes */
	bool durable;                    /* fdatasync and directory fsync per record */
	uint32_t records_max;            /* index capacity; 0: 1 << 20 */
	const struct sel_cluster *cluster; /* NULL: one rank; copied at open */
	/* new fields go last, so the layout of those above never changes
	   (python/selene/_lib.py mirrors the struct) */
	/*
	 * The warm tier: this many bytes of each rank's host memory hold
	 * records in page-record slots (one page of every page plane each; a
	 * row takes several), registered with the device once at open, in
	 * front of the disk. 0 (the default): none. Needs a disk store;
	 * every rank the same (the join refuses a rank whose differs), and at
	 * least one page and a row; with staging at most half of the memory
	 * available to the process (refused with both figures otherwise).
	 * A store is copied from the GPU into warm slots and is restorable
	 * (SEL_EVENT_STORED) once they hold it on every rank; its record
	 * file is written from the slots after (SEL_EVENT_ON_DISK), as
	 * warm_policy says, and it stays warm. Fetches of warm records copy
	 * from the slots to the GPU and read no file. A restart starts it
	 * empty, and loses what was warm and not yet on disk.
	 * docs/DESIGN.md section 6.
	 */
	uint64_t warm_bytes;
	/*
	 * When a warm record's file is written (with warm_bytes; every rank
	 * the same, the join refuses a rank whose differs):
	 * SEL_WARM_WRITE_THROUGH (0, the default) as soon as it is warm,
	 * SEL_WARM_WRITE_BEHIND (1) only when its slots are needed for
	 * another record, or at sel_store_close's drain.
	 */
	uint8_t warm_policy;
	/*
	 * Max-age expiry (seed 2.5): a record not used (stored, found
	 * Present, fetched, touched; a loaded one since its file's mtime)
	 * for this many milliseconds is dropped from every tier, on every
	 * rank, by a sweep at most once a minute (or once per max age, if
	 * shorter) of at most 64 leaves. 0 (the default): none.
	 */
	uint64_t max_age_ms;
	/*
	 * The pool (docs/DESIGN.md section 13): a pool manager's address,
	 * "host:port" ("[IPv6]:port" for an IPv6 literal), that this
	 * instance attaches to at open, sharing records with other instances
	 * of an identical scope (pool name, model_identity, layout, world
	 * size and every rank's plane sizes). NULL (the default): no pool,
	 * and none of the pool's code runs. Copied at open; rank zero's
	 * counts (peers attach to the address rank zero gives them).
	 * At open rank zero waits up to 10 s for the manager's hello: a
	 * manager that does not answer, or refuses a rank, leaves the store
	 * on its local tiers with one warning saying why (the open still
	 * succeeds), and it never attaches later; an attached instance
	 * reconnects after a lost connection.
	 */
	const char *pool;
	/*
	 * The pool secret: a regular file of exactly 32 bytes that neither
	 * group nor others may read or write (refused otherwise, as the
	 * cluster's launch secret), proven to the manager and never sent.
	 * Required with pool; read by every rank at open.
	 */
	const char *pool_secret_file;
};

/*
 * Opens the store: the record directory (an exclusive lock: a second
 * process fails here), its startup scan, the index rebuilt from it (LRU
 * order from mtime), the device and the shard engine's threads. Returns 0
 * and *out, or a negative code with a message in err. With a disk limit of
 * zero there is no disk store: no directory is opened, publications answer
 * SEL_OVERSIZE and lookups miss; in a cluster every rank has a disk store
 * or none, which the join checks (a mismatch is refused, the reason on both
 * sides). In a cluster, a failure here is told to every peer (they stop at
 * once instead of at their join timeout), and so is a peer's: its reason
 * comes back in err. The shard engine's staging (host memory for its
 * copies, mapped and populated here) and warm tier (warm_bytes, mapped,
 * populated and registered here) are refused with -ENOMEM, naming both
 * figures, when together they are more than half of the memory available
 * to the process (MemAvailable, bounded by its cgroup's room; docs/DESIGN.md
 * section 6); so are a peer's, by sel_peer_start, and a peer whose
 * warm_bytes differ from rank zero's is refused at the join.
 */
int sel_store_open(const struct sel_store_config *config, sel_store **out,
		   char *err, size_t err_size);

typedef struct sel_peer sel_peer;

/*
 * A peer rank (config->cluster->rank > 0): opens this rank's record
 * directory (its lock, its scan), device and shard engine, connects to rank
 * zero, joins (proving the secret), applies the startup agreement, and then
 * executes rank zero's jobs on threads of its own. Returns once the
 * agreement is applied: 0 and *out, or a negative code with the reason in
 * err (a refusal says why; so does a failure of rank zero or of another
 * rank at startup). A failure of its own startup is told to rank zero.
 * With a disk limit of zero it has no disk store and runs no jobs (the
 * join refuses it where rank zero has one).
 */
int sel_peer_start(const struct sel_store_config *config, sel_peer **out, char *err,
		   size_t err_size);

/*
 * Waits until rank zero's connection ends and every job drained. Returns 0
 * when rank zero closed it cleanly (with BYE, from sel_store_close after a
 * clean drain), or why it ended otherwise (a silent rank zero, a malformed
 * frame, a close without BYE: rank zero stopped its transport, failed, or
 * gave up on this rank, say while it was stopped past its timeout: never
 * 0). SEL_ESTOPPED when jobs were still running
 * job_timeout_ms after the end: their copies may still write the buffers
 * and GPU ids, so sel_peer_stop then frees nothing and the process should
 * exit non-zero. -ECHILD in a child of the process that started it.
 */
int sel_peer_wait(sel_peer *peer);

/*
 * Ends the peer (closing its link if still up), drains and frees. Returns
 * 0 when it freed everything, or SEL_ESTOPPED after an unconfirmed drain
 * (above, whether or not sel_peer_wait ran first): jobs were still running,
 * so it left everything allocated, and the planes' memory must stay
 * valid. NULL is fine (0). -ECHILD, freeing nothing, in a child of the
 * process that started it (Fork, above).
 */
int sel_peer_stop(sel_peer *peer);

/*
 * Runs every submitted job to its end (waiting up to drain_timeout_ms),
 * then stops the threads and frees the store. Returns 0; SEL_ESTOPPED
 * after a transport stop (the store is freed once every local copy ended;
 * peers may still write their GPU ids); or SEL_ESTOPPED when local jobs
 * were still running at the deadline: the store is then left allocated,
 * threads and buffers included, rather than freed under outstanding copies
 * (the handle must not be used again). NULL is fine. -ECHILD, freeing
 * nothing, in a child of the process that opened it (Fork, above).
 */
int sel_store_close(sel_store *store, uint64_t drain_timeout_ms);

/*
 * A request's token history with its 64-token block digests, computed once
 * (tokens are copied). Caller frees with sel_history_destroy.
 */
int sel_history_create(sel_store *store, const uint32_t *tokens, uint64_t count,
		       sel_history **out);
void sel_history_destroy(sel_history *history);

/* A lookup's answer; valid for one sel_fetch while the store lives. */
struct sel_hit {
	uint64_t consumed;     /* the restored endpoint's token count */
	uint32_t page_count;   /* destination page ids sel_fetch needs */
	uint32_t skip_pages;   /* leading pages of the restored chain left
				  out because they lie within resident: the
				  chain starts after its deepest record at
				  or below resident (p), so this is
				  resident / page_tokens - p / page_tokens,
				  not the pages the GPU holds (0 when a
				  record ends at resident); informational */
	uint64_t resident;     /* the resident count the lookup was given */
	uint32_t endpoint;     /* opaque */
	uint64_t generation;   /* opaque */
};

/*
 * Finds the deepest stored prefix of history beyond resident tokens (the
 * deepest ready GPU checkpoint's count) that can be restored (seed 2.3).
 * Returns true and fills hit, or false on a miss.
 *
 * With a pool (sel_store_config.pool, attached), a lookup never waits for
 * the manager either. The first lookup of a history answers from the local
 * tiers as without a pool and sends the history's longer candidates (its
 * whole length, then each page boundary, longest first, at most 256) to
 * the manager; its answer is kept with the history. A later sel_lookup of
 * the same history, once the answer came, returns the pool's chain
 * instead when it is longer than the local hit (a pool hit: sel_fetch
 * claims it from the pool; local tiers first otherwise). Each history
 * asks once. Without a pool nothing of this runs.
 */
bool sel_lookup(sel_store *store, const sel_history *history, uint64_t resident,
		struct sel_hit *hit);

/*
 * Whether the pool may still answer history's lookup: true while its
 * candidates were sent and the answer has not come within the grace
 * period (2 ms with the manager on this host, four control round trips
 * with a remote one, at most 250 ms). An engine that can hold the request
 * a step calls sel_lookup again later (never waiting in between); false
 * means sel_lookup's answer is final. Always false without a pool, before
 * the history's first lookup, and after its answer came or its grace
 * period ran out. Never waits.
 */
bool sel_lookup_pending(sel_store *store, const sel_history *history);

/*
 * Restores a hit into page_ids (hit->page_count ids, copied) and
 * state_slot; waiter then owns that destination. The event for waiter
 * comes through sel_poll. When the same endpoint is already being fetched
 * with the same pages and skip (an equal hit: the same chain), and that
 * fetch's owner has not cancelled, waiter joins that fetch instead
 * (*joined true; page_ids and state_slot are ignored: the waiter shares the
 * owner's destination). Returns 0, SEL_ENOTFOUND when the hit went stale
 * (its record was evicted), SEL_EQUEUEFULL, or the engine's reason for
 * refusing the job (-EINVAL for page ids outside the device).
 */
int sel_fetch(sel_store *store, const struct sel_hit *hit, const uint32_t *page_ids,
	      uint32_t state_slot, uint64_t waiter, bool *joined);

/*
 * Removes a joined waiter: it gets no event. The owner of a fetch's
 * destination cannot leave it: its event still comes, since only that event
 * says the destination ids are no longer being written. The fetch completes
 * either way (and is useful on its own); no later fetch joins it, and
 * waiters that joined before still get their events with the owner's, so
 * an owner that cancels keeps its destination until those waiters are done
 * with it. SEL_ENOTFOUND for an unknown waiter, and for one whose fetch has
 * completed: a fetch completes when a sel_poll call (any, max 0 included)
 * takes its completion from the engine, and from then on cancel changes
 * nothing: its events (owner's and joined waiters' alike) still come
 * through sel_poll if not already returned. Until then the fetch counts as
 * running, even if its copies are done.
 */
int sel_cancel(sel_store *store, uint64_t waiter);

/*
 * A GPU-cache hit on the checkpoint of history's first consumed tokens
 * (seed 2.10): its record and every ancestor become the most recently
 * used, so a prefix the engine keeps reusing from its GPU cache does not
 * age off disk. Returns 0, -EINVAL for a consumed count of 0 or past the
 * history, or SEL_ENOTFOUND when no committed record ends there (never
 * stored, still being written, or evicted).
 */
int sel_touch(sel_store *store, const sel_history *history, uint64_t consumed);

enum sel_outcome {
	SEL_QUEUED,   /* copying; keep the GPU checkpoint pinned until its event */
	SEL_PRESENT,  /* a committed copy exists, row included (one whose row
			 was dropped is stored again whole: SEL_QUEUED) */
	SEL_RETRY,    /* room or queue space is short for now; no copy taken */
	SEL_OVERSIZE, /* cannot fit even alone with its required ancestors */
};

struct sel_publication {
	uint64_t checkpoint;          /* the engine's id, echoed in the event */
	const sel_history *history;   /* holds at least consumed tokens */
	uint64_t consumed;            /* the checkpoint's endpoint */
	uint64_t parent_consumed;     /* nearest offered ancestor, 0 for none */
	const uint32_t *page_ids;     /* every page of the chain from the root:
					 consumed / page_tokens ids; copied */
	uint32_t state_slot;          /* the checkpoint's row */
};

/*
 * Offers a published checkpoint (seed 2.2). Returns 0 with *outcome, or a
 * negative code for an invalid publication (or one the engine refused,
 * such as page ids outside the device).
 */
int sel_store_publish(sel_store *store, const struct sel_publication *pub,
		      enum sel_outcome *outcome);

enum sel_event_kind {
	SEL_EVENT_STORED,       /* id: checkpoint; the GPU pin may go */
	SEL_EVENT_STORE_FAILED, /* id: checkpoint; error says why; the pin may go */
	SEL_EVENT_FETCHED,      /* id: waiter; pages and row are in place */
	SEL_EVENT_FETCH_FAILED, /* id: waiter; the destination ids are quiescent */
	SEL_EVENT_FATAL,        /* the transport stopped (a rank died or a job timed
				   out): stop serving from the store; jobs in
				   flight get no event, and their GPU ids may
				   still be written by a peer, so keep them */
	SEL_EVENT_ON_DISK,      /* with a warm tier only (warm_bytes), id:
				   checkpoint, after its STORED: its record file
				   is committed on every rank, so it survives a
				   restart (right after STORED for one stored
				   cold; never for one dropped first). Without a
				   warm tier STORED says so itself */
	SEL_EVENT_EXPORT_REQUESTED, /* id: an export (below); checkpoint and
				   tokens: the offered GPU checkpoint the pool
				   asks for. Answer it with sel_export_pinned
				   or sel_export_refuse, in the same iteration
				   where the engine can */
	SEL_EVENT_EXPORT_ENDED, /* id: an export sel_export_pinned took;
				   checkpoint: its checkpoint; error 0 when the
				   pool holds it now, else why not. The pin
				   may go: exactly once per accepted export */
};

struct sel_event {
	enum sel_event_kind kind;
	uint64_t id;
	int error;
	char why[200];
	uint64_t checkpoint;   /* the export events' checkpoint, else 0 */
	uint64_t tokens;       /* EXPORT_REQUESTED: the checkpoint's tokens, else 0 */
};

/*
 * Takes up to max events without waiting; returns how many. Completions
 * wait in the engine while undelivered events fill the store's event ring,
 * so a caller that polls less than it submits sees SEL_RETRY and
 * SEL_EQUEUEFULL, never lost events.
 */
uint32_t sel_poll(sel_store *store, struct sel_event *events, uint32_t max);

/*
 * Exports of GPU checkpoints through the pool (docs/DESIGN.md section 13,
 * pool/PROTOCOL.md R-POOL-77 .. R-POOL-79). An attached instance tells the
 * manager which records it holds so that another instance's lookup can
 * make it put them (an export). Its host tiers' records are exported
 * without the engine; a checkpoint the engine keeps only in its GPU cache
 * is exported with its help, through the calls below, all made on the
 * model thread and none waiting for anything:
 *
 *   1. sel_gpu_hold offers a checkpoint the engine holds on its GPU
 *      (any it published, whatever the outcome); sel_gpu_evicted
 *      withdraws it when the engine evicts it (and sel_gpu_evictions_lost
 *      withdraws every one, when the engine lost track of its evictions:
 *      it then offers again what it holds).
 *   2. A request comes as SEL_EVENT_EXPORT_REQUESTED through sel_poll:
 *      the export's id, the checkpoint and its tokens. The engine pins
 *      the checkpoint's pages (tokens / page_tokens of them, the chain
 *      from page 0) and row so that nothing evicts or rewrites them, and
 *      calls sel_export_pinned with them; or it refuses with
 *      sel_export_refuse (SEL_ENOTFOUND: it no longer holds it; -ENOSPC:
 *      no headroom to pin it now).
 *   3. The store copies the pinned pages and row from the device of
 *      every rank into a put to the manager, which verifies every byte.
 *   4. SEL_EVENT_EXPORT_ENDED comes exactly once for every export that
 *      sel_export_pinned accepted (returned 0), whatever happened: the
 *      put committed, failed, or the manager went away. Only then may the
 *      engine unpin. An export sel_export_pinned did not accept is over
 *      at once (the engine unpins; no event comes).
 *
 * Only a store opened with a pool runs any of this; an engine that never
 * calls sel_gpu_hold sees no export event.
 */

/*
 * Offers checkpoint (the engine's id, unique among those offered) whose
 * history's first consumed tokens the engine holds on its GPU: pages
 * 0 .. consumed / page_tokens - 1 and a row. Returns 0; -EINVAL for a
 * consumed count of 0, past the history, or shorter than one page;
 * -EEXIST for a checkpoint id already offered; SEL_EQUEUEFULL when
 * POOL_GPU_HOLDS_MAX (4096) are offered; -ENOTSUP for a store without a
 * pool (or whose pool did not attach at open). Offers made while the pool
 * is detached (a lost connection) are announced when it attaches again.
 * Every rank copies its own share from its own device: the same page ids
 * and slot on every rank, as for sel_store_publish.
 */
int sel_gpu_hold(sel_store *store, uint64_t checkpoint, const sel_history *history,
		 uint64_t consumed);

/*
 * The engine evicted (or will no longer export) checkpoint. Returns 0, or
 * SEL_ENOTFOUND for one not offered. An export of it in flight (accepted
 * by sel_export_pinned) goes on: its pages stay pinned until its end.
 */
int sel_gpu_evicted(sel_store *store, uint64_t checkpoint);

/*
 * The engine lost its record of evictions: every offered checkpoint is
 * withdrawn (the manager hears a reset and the host records again); the
 * engine offers again those it holds. Returns 0, or -ENOTSUP as
 * sel_gpu_hold.
 */
int sel_gpu_evictions_lost(sel_store *store);

/*
 * Answers export export_id (from SEL_EVENT_EXPORT_REQUESTED): the engine
 * pinned page_count page ids (the checkpoint's tokens / page_tokens,
 * copied) and state_slot. Returns 0: the store took the export, and
 * SEL_EVENT_EXPORT_ENDED will come for it exactly once (keep the pin
 * until then). Any failure means the export is over and no event will
 * come: SEL_ENOTFOUND for an export id not waiting for an answer
 * (unknown, answered already, or forgotten: past its deadline, or the
 * manager's session ended); -EINVAL for a page count other than the
 * checkpoint's, ids outside the device or a slot past row_count;
 * SEL_EQUEUEFULL when no job can take it now; SEL_ESTOPPED after the
 * transport stopped.
 */
int sel_export_pinned(sel_store *store, uint64_t export_id, const uint32_t *page_ids,
		      uint32_t page_count, uint32_t state_slot);

/*
 * Refuses export export_id: reason SEL_ENOTFOUND (the engine no longer
 * holds the checkpoint: its offer is withdrawn too) or -ENOSPC (it cannot
 * pin it now without starving its running requests; the offer stays).
 * Returns 0, SEL_ENOTFOUND for an export id not waiting for an answer,
 * or -EINVAL for another reason (the export still waits).
 */
int sel_export_refuse(sel_store *store, uint64_t export_id, int reason);

/* Upper bounds, in seconds, of the job latency histograms' buckets. */
#define SEL_LATENCY_BUCKETS 12
#define SEL_LATENCY_BOUNDS \
	{ 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0 }

struct sel_latency_histogram {
	uint64_t counts[SEL_LATENCY_BUCKETS + 1]; /* the last: above every bound */
	uint64_t count;
	double sum_seconds;
};

struct sel_stats {
	uint64_t lookups, hits, reused_tokens;
	uint64_t published_queued, published_present, published_retry, published_oversize;
	uint64_t stored, store_failures, fetches, fetch_failures;
	uint64_t bytes_stored, bytes_fetched;
	uint64_t evictions, truncations, unlinks;
	uint64_t records, disk_bytes, disk_limit_bytes;
	uint64_t jobs_in_flight;
	uint64_t scanned_records;
	/* submit-to-completion time of store and fetch jobs */
	struct sel_latency_histogram store_latency, fetch_latency;
	/*
	 * Records a restore found bad on some rank, removed from the index and
	 * unlinked on every rank, with the records that depend on them (counted
	 * in the first one's reason): a page or row checksum, a header (or
	 * identity, key, layout or length) check, a file missing on a rank
	 * (or its name taken by a symlink, FIFO or other non-regular file).
	 */
	uint64_t records_dropped_checksum, records_dropped_header, records_dropped_missing;
	/*
	 * The warm tier (sel_store_config.warm_bytes), the same on every rank:
	 * records held warm and their slots' bytes, slots in use (warm records
	 * and warm stores in flight) and in all, fetches served from warm slots
	 * on every rank, and records dropped from warm to make room (their
	 * files stay); fetches that took some records from warm slots and
	 * read the rest from files, records a fetch read from their files into
	 * warm slots on every rank (read-through) and those slots' bytes (a
	 * rank's), and read-through fetches that failed (their slots freed).
	 */
	uint64_t warm_records, warm_bytes, warm_slots_used, warm_slots_total;
	uint64_t warm_hits, warm_evictions;
	uint64_t warm_partial_hits, warm_read_throughs, warm_read_through_bytes;
	uint64_t warm_read_failures;
	/*
	 * Warm records not yet on disk on every rank (dirty: never dropped
	 * from warm, lost by a restart) and their slots' bytes; warm records'
	 * files written (warm_writes), of which spills: written because
	 * their slots were needed; writes that failed on some rank (the
	 * record stays dirty and is tried again); publications answered
	 * Retry because dirty records held the slots they needed; dirty
	 * records dropped unwritten (condemned, or left at close).
	 */
	uint64_t warm_dirty_records, warm_dirty_bytes;
	uint64_t warm_writes, warm_spills, warm_write_failures, warm_retry_dirty;
	uint64_t warm_dirty_dropped;
	/* Records dropped by max-age expiry, and of those, ones that were warm. */
	uint64_t expired, warm_expired;
	/*
	 * The pool (sel_store_config.pool): 1 while the instance is attached
	 * (every rank's connection up), else 0; records put to the pool as
	 * they left the local tiers, accepted with every rank's share
	 * (pool_puts), and those the manager refused or that failed on some
	 * rank (pool_put_failures: dropped as without a pool); lookups
	 * answered from the pool (pool_hits); restores claimed from the pool
	 * that completed on every rank (pool_claims) and their bytes, a
	 * rank's (pool_claim_bytes), and claims that failed (the fetch
	 * failed: the caller recomputes); refusals by the manager of any
	 * kind, the attach's included (pool_refusals).
	 */
	uint64_t pool_attached;
	uint64_t pool_puts, pool_put_failures, pool_hits;
	uint64_t pool_claims, pool_claim_bytes, pool_claim_failures, pool_refusals;
};

/*
 * Copies the counters into out. Returns 0, or -ESHUTDOWN (out zeroed) once
 * sel_store_close has begun on store, or for a handle that is not open;
 * -ECHILD (out zeroed) in a child of the process that opened it.
 */
int sel_store_stats(sel_store *store, struct sel_stats *out);

/*
 * Prometheus text exposition of the stats into buf (every family once,
 * with # HELP and # TYPE; README lists them). Returns the length written
 * (without the NUL), -ENOSPC when size is too small, or -ESHUTDOWN or
 * -ECHILD as sel_store_stats does. SEL_METRICS_BYTES of a world size is always
 * enough, whatever the counters hold.
 */
int sel_store_metrics(sel_store *store, char *buf, size_t size);
#define SEL_METRICS_BYTES(world_size) (12288u + 512u * (world_size))

enum sel_log_level {
	SEL_LOG_ERROR = 0,
	SEL_LOG_WARN = 1,
	SEL_LOG_INFO = 2,
	SEL_LOG_DEBUG = 3,
};

/*
 * Where Selene's log lines go: level and one line of text without its
 * newline (valid only during the call), and the user pointer given below.
 * Called from any of Selene's threads, one call per line; it must not call
 * back into Selene.
 */
typedef void (*sel_log_fn)(enum sel_log_level level, const char *message, void *user);

/*
 * Sends every log line at or above the level SELENE_LOG sets (default info)
 * to fn instead of stderr; NULL restores the default sink, which writes
 * "TIME selene[rank R]: LEVEL: message" lines to stderr (UTC time, ISO 8601
 * with milliseconds; the rank once a store or peer opened). Process-wide;
 * may be called at any time from any thread; a line being written when it
 * changes goes to the old sink or the new one.
 */
void sel_log_set_callback(sel_log_fn fn, void *user);

#ifdef __cplusplus
}
#endif

#endif
