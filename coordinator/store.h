/*
 * The disk store's policy on rank zero (docs/DESIGN.md section 5, seed 2.2, 2.3,
 * 2.10): publication outcomes, the disk budget with pending unlinks and
 * truncates charged until they finish, eviction and compaction to make
 * room, dedupe, row drop once a record's only child commits, fetch planning
 * with waiters, and the events the caller polls. It drives jobs through a
 * small table of functions (struct coord_jobs) so that event sequencing can
 * be tested with a stub; the public API (coordinator/api.c) plugs in the
 * shard engine. Single-threaded: the model worker's thread owns it.
 */
#ifndef SELENE_COORDINATOR_STORE_H
#define SELENE_COORDINATOR_STORE_H

#include "common/limits.h"
#include "coordinator/index.h"
#include "coordinator/warm.h"
#include "record/geometry.h"
#include "record/key.h"
#include "selene/store.h"
#include "shard/engine.h"

#include <stdbool.h>
#include <stdint.h>

/* Waiters one fetch can serve. */
#define COORD_WAITERS_MAX 16u
/* Jobs in flight through the store at once. */
#define COORD_JOBS_MAX 64u
/* Max-age sweeps: at most one per this (or per max age, if shorter), */
#define COORD_EXPIRE_EVERY_NS (60ull * 1000000000ull)
/* dropping at most this many records each (seed 2.5). */
#define COORD_EXPIRE_SWEEP_MAX 64u
/* Writes from warm in flight at once: the rest of the job table is the model's. */
#define COORD_WARM_WRITES_MAX (COORD_JOBS_MAX / 4)
/* After a write from warm failed on some rank, none is tried for this long. */
#define COORD_WARM_WRITE_BACKOFF_NS 1000000000ull
/* Events waiting for sel_poll: one per job waiter at most. */
#define COORD_EVENTS_MAX (COORD_JOBS_MAX * COORD_WAITERS_MAX)
/* How long a full disk answers SEL_RETRY before a store is tried again. */
#define COORD_DISK_FULL_BACKOFF_NS (1000000000ull)
/*
 * How long, after a store found a disk full, the records may take no more
 * than they held then: new stores evict the least recently used to make
 * room, as under the limit, instead of failing on the full disk again.
 * Then the configured limit applies again (a disk that is still full
 * costs one failed store a minute).
 */
#define COORD_DISK_FULL_HOLD_NS (60000000000ull)

/*
 * Pool puts in flight at once (the cascade, docs/DESIGN.md section 13):
 * the rest of the job table is the model's.
 */
#define COORD_POOL_PUTS_MAX (COORD_JOBS_MAX / 16)
/*
 * With a pool, the cascade keeps 1/COORD_POOL_HEADROOM_DIVISOR of the disk
 * limit (and of the index) free: records past it are put to the pool, then
 * dropped, before a publication has to evict one synchronously (which
 * drops it without a put, as without a pool).
 */
#define COORD_POOL_HEADROOM_DIVISOR 8u

/*
 * A record put to the pool from every rank (seed 2.15; cluster/PROTOCOL.md
 * R-WIRE-21's pool put): its chain position and each rank's share length,
 * equal on every rank (the join compares layouts).
 */
struct coord_pool_put {
	struct rec_key key;
	struct rec_key parent;      /* consumed 0: a root record */
	uint32_t first_page_index;
	uint32_t tail_page_count;
	bool row;
	uint64_t share_bytes;       /* the record file's length on each rank */
};

/* Where a record stands with the pool (coord_store.pool_state, per node id). */
enum coord_pool_state {
	COORD_POOL_NONE = 0,    /* not known to the pool */
	COORD_POOL_PUTTING = 1, /* a put is in flight (the node is pinned) */
	COORD_POOL_HELD = 2,    /* the pool accepted it (or held it already) */
	COORD_POOL_FAILED = 3,  /* its put was refused or failed: dropped as without one */
};

/* Pool answers a store remembers for sel_fetch (a pool hit names one). */
#define COORD_POOL_HITS_MAX 16u
/* Pool lookups in flight at once; past it a lookup asks nothing. */
#define COORD_POOL_TICKETS_MAX 64u
/*
 * Candidate keys one lookup sends, longest first: each is a hash over at
 * most 63 tokens on the model thread (about a microsecond), so a lookup's
 * pool request costs at most a few hundred of them.
 */
#define COORD_POOL_CANDIDATES_MAX 256u
/* A pool hit's endpoint: this bit, then the slot of its answer. */
#define COORD_POOL_HIT_BIT 0x80000000u

/*
 * One record of a chain the pool answered (R-POOL-21), root side first;
 * a lookup's answer also names the session rank's share image in the
 * manager's arena and its stamp (R-POOL-22; 0 where none: the disk tier,
 * or a grant).
 */
struct coord_pool_record {
	struct rec_key key;
	uint32_t first_page_index;
	uint32_t tail_page_count;
	bool row;
	uint64_t place_offset;
	uint64_t place_bytes;
	uint64_t stamp;
};

/* A claim of a chain the pool holds into the device (R-WIRE-21's pool claim). */
struct coord_pool_claim {
	struct rec_key key;                     /* the endpoint */
	const struct coord_pool_record *chain;  /* from the first record past resident */
	uint32_t chain_count;
	/* the lookup's whole answer, root first, chain its tail; NULL: not known */
	const struct coord_pool_record *answer;
	uint32_t answer_count;
	uint32_t skip_pages;
	const uint32_t *page_ids;               /* page_id_count */
	uint32_t page_id_count;
	uint32_t state_slot;
};

/*
 * The session's lookups (rank zero's pool client, or a test's stub); none
 * waits. lookup sends count candidate keys (longest first) and sets
 * *ticket; answer returns 0 while the answer has not come, 1 with the
 * matched chain (*count 0: no candidate matched), or a failure (the ticket
 * ends on 1 and on failure); forget drops a ticket.
 */
struct coord_pool_ops {
	void *ctx;
	int (*lookup)(void *ctx, const struct rec_key *keys, uint32_t count, uint64_t *ticket);
	int (*answer)(void *ctx, uint64_t ticket, struct coord_pool_record *chain,
		      uint32_t max, uint32_t *count);
	void (*forget)(void *ctx, uint64_t ticket);
	/*
	 * Holders and exports (pool/PROTOCOL.md R-POOL-70 .. R-POOL-75), NULL
	 * for none: hold announces (op 0), withdraws (1) count keys
	 * (1 .. POOL_HOLDS_KEYS_MAX) or resets (2, no key), SEL_EQUEUEFULL when
	 * it cannot now; export_next takes the manager's next export request
	 * (1 and *id, *key; 0: none); export_end answers one.
	 */
	int (*hold)(void *ctx, uint8_t op, const struct rec_key *keys, uint32_t count);
	int (*export_next)(void *ctx, uint64_t *id, struct rec_key *key);
	void (*export_end)(void *ctx, uint64_t id, int result);
};

/* The ops of coord_pool_ops.hold: R-POOL-70's. */
enum coord_pool_hold_op {
	COORD_POOL_HOLD_ADD = 0,
	COORD_POOL_HOLD_WITHDRAW = 1,
	COORD_POOL_HOLD_RESET = 2,
};

/* Announcements (adds, withdrawals) queued before a full re-announce instead. */
#define COORD_POOL_HOLDS_QUEUE_MAX 4096u
/* HOLDS frames one poll sends at most (a re-announce goes on at the next). */
#define COORD_POOL_HOLDS_FRAMES_PER_POLL 4u
/* Exports the store runs at once (the manager asks at most this many). */
#define COORD_POOL_EXPORTS_MAX POOL_EXPORTS_LIVE_MAX

/*
 * Hash chains over the offers, one by checkpoint and one by key, so that no
 * call on the model thread scans the table (a power of two, twice the
 * offers: chains of about one).
 */
#define COORD_GPU_HOLD_BUCKETS (2u * POOL_GPU_HOLDS_MAX)
_Static_assert((COORD_GPU_HOLD_BUCKETS & (COORD_GPU_HOLD_BUCKETS - 1)) == 0,
	       "COORD_GPU_HOLD_BUCKETS is a power of two");

/* A GPU checkpoint the engine offered (sel_gpu_hold). */
struct coord_gpu_hold {
	bool used;
	uint64_t checkpoint;
	struct rec_key key;
	struct rec_digest bucket;
	/* the chains it is on (COORD_NONE ends one); an unused entry's next free */
	uint32_t checkpoint_prev, checkpoint_next;
	uint32_t key_prev, key_next;
};

/* Where an export of the manager's stands with the engine (R-POOL-78). */
enum coord_gpu_export {
	COORD_GPU_EXPORT_NONE = 0,   /* a host record's export, or none */
	COORD_GPU_EXPORT_ASKED = 1,  /* EXPORT_REQUESTED is out: the engine answers */
	COORD_GPU_EXPORT_PUTTING = 2, /* its job runs; EXPORT_ENDED comes at its end */
};

/* A history's pool lookup (in its sel_history): zeroed at creation. */
enum coord_ticket_state { COORD_TICKET_NONE, COORD_TICKET_ASKED, COORD_TICKET_DONE };
struct coord_pool_ticket {
	enum coord_ticket_state state;
	uint32_t slot;     /* in coord_store.pool_tickets */
	uint64_t id;       /* the session's ticket */
};

/* Where jobs go: the shard engine, or a test's stub. */
struct coord_jobs {
	void *ctx;
	int (*store)(void *ctx, uint64_t job_id, const struct shard_store_job *job);
	int (*fetch)(void *ctx, uint64_t job_id, const struct shard_fetch_job *job);
	int (*truncate)(void *ctx, uint64_t job_id, const struct rec_key *key);
	int (*unlink)(void *ctx, uint64_t job_id, const struct rec_key *key);
	/* Optional: a job that moves no bytes (see shard_engine_noop). */
	int (*noop)(void *ctx, uint64_t job_id);
	/* With a warm tier: drops key's warm copy on every rank (shard_engine_warm_drop). */
	int (*warm_drop)(void *ctx, uint64_t job_id, const struct rec_key *key);
	uint32_t (*poll)(void *ctx, struct shard_completion *out, uint32_t max);
	/* Optional: true once the transport stopped for good, with why. */
	bool (*stopped)(void *ctx, char *why, size_t why_size);
	/*
	 * With a pool: puts a committed record's shares from every rank
	 * (its files stay until the completion); the completion's result is
	 * 0 once the pool accepted it, -EEXIST when the pool held it already,
	 * or why it was refused or failed.
	 */
	int (*pool_put)(void *ctx, uint64_t job_id, const struct coord_pool_put *put);
	/*
	 * With a pool: claims a chain and restores it on every rank (each
	 * rank's share verified before its device copy); the completion is
	 * 0 once every rank copied, or why it failed (the destination is to
	 * be discarded).
	 */
	int (*pool_claim)(void *ctx, uint64_t job_id, const struct coord_pool_claim *claim);
	/*
	 * With a pool, optional: puts a GPU checkpoint as put describes (a
	 * root record with its row, R-POOL-78), every rank's share built from
	 * its device pages and row as export says (its put id unused); the
	 * completion as pool_put's.
	 */
	int (*pool_export)(void *ctx, uint64_t job_id, const struct coord_pool_put *put,
			   const struct shard_pool_export_job *export);
};

enum coord_job_kind {
	COORD_JOB_STORE, COORD_JOB_FETCH, COORD_JOB_TRUNCATE, COORD_JOB_UNLINK, COORD_JOB_NOOP,
	COORD_JOB_WARM_DROP,
	COORD_JOB_WARM_WRITE, /* a warm record's file written from its slots */
	COORD_JOB_POOL_PUT,   /* a record's shares put to the pool (the cascade) */
	COORD_JOB_POOL_CLAIM, /* a pool hit restored from the pool */
	COORD_JOB_POOL_EXPORT, /* a GPU checkpoint put to the pool (R-POOL-78) */
};

struct coord_job {
	bool in_use;
	enum coord_job_kind kind;
	uint32_t node;          /* the stored or fetched endpoint */
	uint32_t parent;        /* a store's pinned parent, or COORD_NONE */
	uint64_t checkpoint;    /* a store's checkpoint id */
	uint64_t bytes;         /* what the job charges until it finishes */
	uint64_t waiters[COORD_WAITERS_MAX]; /* [0]: the owner of the destination */
	uint32_t waiter_count;
	bool owner_cancelled;   /* the owner still hears when its ids are quiet */
	bool rewrite;           /* a store that puts a page-only record's row back */
	bool warm;              /* a store sent warm; a fetch of warm records only */
	bool read_through;      /* a fetch that reads records into warm slots */
	bool warm_partial;      /* a fetch with some records warm, not all */
	/* a read-through fetch: the chain records (by index) it charged slots for */
	uint64_t read_charged[COORD_CHAIN_MAX / 64];
	bool warm_only;         /* a store into warm slots only: its file comes later */
	uint32_t skip_pages;    /* a fetch's skip and pages: only equal hits */
	uint32_t page_count;    /* (same endpoint, pages and skip) join */
	uint32_t chain_count;   /* a fetch's pinned chain */
	uint32_t warm_releasing; /* warm slots the ranks give back as they run it */
	uint32_t chain[COORD_CHAIN_MAX];
	struct rec_key key;     /* a truncate's or unlink's record */
	uint64_t export_id;     /* a GPU export's (the engine's id) */
	uint64_t submitted_ns;  /* for the latency histograms */
};

struct coord_store {
	struct rec_geometry geometry;
	struct rec_identity model;
	struct rec_identity namespace_id;
	struct coord_index index;
	struct coord_warm warm; /* the warm tier's records (off unless coord_store_set_warm) */
	uint8_t warm_policy;    /* enum sel_warm_policy */
	uint32_t *zero_ids;     /* a warm write's page ids (unused): page_count zeros */
	uint32_t warm_writes_in_flight;
	uint64_t warm_write_retry_ns; /* a write failed: none until then (monotonic) */
	uint64_t *generation;   /* per node id, bumped on insert */
	uint64_t *used_ns;      /* per node id: last use, realtime (a loaded one's mtime) */
	uint64_t max_age_ns;    /* sel_store_config.max_age_ms; 0: no expiry */
	/*
	 * Keys some rank holds in place out of the index (R-AGREE-2: a file
	 * a rank could not read at startup, what depends on it), sorted: a
	 * publication of one answers Retry for the whole run, since a failed
	 * store's unlink on every rank would delete the copies no rank could
	 * read. The next start that reads them indexes them.
	 */
	struct rec_key *held_keys;
	size_t held_key_count;
	bool held_warned;       /* the one warning a run about them */
	/*
	 * The most tokens of a held key: an indexed record of fewer may be a
	 * held key's parent (whose parent no rank may have read), and is
	 * never evicted, expired or dropped as a bare page-only record, so
	 * the next start does not orphan the held key (R-AGREE-2).
	 */
	uint64_t held_consumed_max;
	uint64_t last_sweep_ns; /* monotonic; 0: none yet */
	bool expiring;          /* reclaim counts an expiry, not an eviction */
	uint64_t next_generation;
	struct coord_jobs jobs_ops;
	struct coord_job jobs[COORD_JOBS_MAX];
	struct sel_event events[COORD_EVENTS_MAX];
	uint32_t event_head, event_count;
	uint64_t limit_bytes;   /* 0: no disk store */
	uint64_t used_bytes;    /* records, in-flight stores, pending unlinks/truncates */
	uint64_t reclaiming_bytes; /* the part of used_bytes pending unlinks/truncates free */
	uint64_t disk_full_ns;      /* when a store last found a disk full; 0: never */
	uint64_t disk_full_bytes;   /* what the records held then (the hold's limit) */
	uint32_t condemned_count; /* COORD_CONDEMNED nodes still in the index */
	bool bare_pending;      /* a childless page-only record whose unlink could
				   not be submitted may be left: swept at poll */
	bool stopped;           /* the transport stopped: no new jobs (FATAL sent) */
	bool pool_on;           /* attached: the cascade runs (coord_store_set_pool) */
	uint8_t *pool_state;    /* per node id: enum coord_pool_state */
	uint32_t pool_puts_in_flight;
	uint64_t pool_putting_bytes; /* of records whose accepted put drops them */
	struct coord_pool_ops pool_ops; /* lookups: none without coord_store_set_pool_lookups */
	uint64_t pool_grace_ns;     /* how long a lookup may wait for its answer */
	struct {
		uint64_t id;
		uint64_t asked_ns;
		bool live;
	} pool_tickets[COORD_POOL_TICKETS_MAX];
	struct {
		uint64_t generation;   /* 0: free */
		uint32_t chain_count;  /* the answer's */
		uint32_t start;        /* its first record past resident */
		struct coord_pool_record *chain; /* the answer; POOL chain max, allocated once */
	} pool_hits[COORD_POOL_HITS_MAX];
	uint32_t pool_hit_next;
	/* what the session announced it holds (R-POOL-71): a ring of changes */
	struct {
		struct rec_key key;
		uint8_t op; /* 0 add, 1 withdraw */
	} *pool_holds;                          /* COORD_POOL_HOLDS_QUEUE_MAX */
	uint32_t pool_holds_head, pool_holds_count;
	bool pool_holds_resync;  /* reset, then announce every record from the cursor */
	bool pool_holds_reset_sent;
	uint32_t pool_holds_cursor;
	struct rec_key *pool_hold_keys;         /* one HOLDS frame's keys (scratch) */
	/* exports the manager asked of this instance (R-POOL-74) */
	struct {
		uint64_t id;     /* 0: free */
		struct rec_key key;
		uint64_t asked_ns;
		uint8_t gpu;     /* enum coord_gpu_export */
		uint64_t export_id; /* a GPU export's, the engine's */
		uint64_t checkpoint; /* a GPU export's offer (it may go meanwhile) */
		struct rec_digest bucket;
	} pool_exports[COORD_POOL_EXPORTS_MAX];
	/* GPU checkpoints the engine offered for export (sel_gpu_hold) */
	struct coord_gpu_hold *gpu_holds;      /* POOL_GPU_HOLDS_MAX, from gpu_exports on */
	uint32_t *gpu_hold_by_checkpoint;      /* COORD_GPU_HOLD_BUCKETS chain heads */
	uint32_t *gpu_hold_by_key;             /* COORD_GPU_HOLD_BUCKETS chain heads */
	uint32_t gpu_hold_free;                /* first unused entry, or COORD_NONE */
	uint32_t gpu_hold_count;
	bool gpu_holds_on;       /* the engine may be asked (a pool, one rank) */
	uint32_t gpu_holds_cursor; /* a re-announce's, past the index's */
	uint64_t next_export_id;
	struct rec_key *pool_keys;             /* a lookup's candidates (scratch) */
	struct coord_pool_record *pool_answer; /* an answer (scratch) */
	uint64_t noops_done;    /* noops answered by every rank (coord_store_noop) */
	uint64_t noops_failed;  /* of those, answered with an error somewhere */
	struct sel_stats stats;
	struct coord_lookup lookup; /* scratch for one lookup (large) */
	struct shard_chain_record fetch_records[COORD_CHAIN_MAX]; /* scratch */
};

/*
 * Sets up an empty store over geometry with room for records_max records.
 * Returns 0 or -ENOMEM. jobs is copied.
 */
int coord_store_init(struct coord_store *s, const struct rec_geometry *geometry,
		     const struct rec_identity *model, enum rec_state_mode mode,
		     uint64_t limit_bytes, uint32_t records_max,
		     const struct coord_jobs *jobs);
void coord_store_destroy(struct coord_store *s);

/*
 * Turns the warm tier on: slots_total slots of slot_bytes on every rank,
 * a row taking row_slots of them (shard/warm.h). Stores go warm from now
 * on where their slots can be made free, their files written as policy
 * (enum sel_warm_policy) says. Returns 0 or -ENOMEM.
 */
int coord_store_set_warm(struct coord_store *s, uint32_t slots_total, uint32_t row_slots,
			 uint64_t slot_bytes, uint8_t policy);

/*
 * Turns the cascade on (an attached pool, jobs_ops.pool_put set) or off
 * (the pool was disabled or lost: records are dropped as without one).
 * Turning it on forgets what the pool was known to hold (a manager
 * attached again may have lost it). Returns 0, -ENOTSUP without
 * jobs_ops.pool_put, or -ENOMEM.
 */
int coord_store_set_pool(struct coord_store *s, bool on);

/*
 * Turns pool lookups on (ops copied) with their grace period: how long a
 * lookup's answer may take before the store stops waiting for it (seed
 * 2.15: 2 ms on the manager's host, four round trips elsewhere, at most
 * 250 ms). Allocates the answers' room once. Returns 0 or -ENOMEM.
 */
int coord_store_set_pool_lookups(struct coord_store *s, const struct coord_pool_ops *ops,
				 uint64_t grace_ns);

/*
 * coord_store_lookup, and the pool: a history's first lookup with a pool
 * sends the keys of h longer than what the local index found (and than
 * resident) to the pool and answers from the local index; a later lookup
 * of the same history whose ticket has its answer answers with the pool's
 * chain instead when it is longer (a pool hit: sel_fetch claims it).
 * Never waits; without a pool it is coord_store_lookup.
 */
bool coord_store_lookup_pool(struct coord_store *s, const struct rec_history *h,
			     uint64_t resident, struct coord_pool_ticket *ticket,
			     struct sel_hit *hit);

/*
 * Whether ticket still waits for the pool's answer within the grace
 * period: a lookup of its history may find more if made again.
 */
bool coord_store_lookup_pending(const struct coord_store *s,
				const struct coord_pool_ticket *ticket);

/*
 * The cascade (docs/DESIGN.md section 13): while the records take more than
 * the limit less its headroom, the least recently used record the disk
 * store would evict is put to the pool (its ancestors the pool does not
 * hold first, root side first: the pool takes a record only after its
 * parent), then dropped once the pool accepted it; a record whose put was
 * refused or failed is dropped as without a pool. At most
 * COORD_POOL_PUTS_MAX puts in flight; never waits. coord_store_poll runs
 * it; without a pool it does nothing.
 */
void coord_store_cascade(struct coord_store *s);

/*
 * The keys left in place unindexed (R-AGREE-2), copied; publications of
 * them answer Retry, and records that may be their parents (fewer tokens
 * than the longest) are not evicted. Returns 0 or -ENOMEM.
 */
int coord_store_hold(struct coord_store *s, const struct rec_key *keys, size_t count);

/*
 * GPU checkpoint exports (include/selene/store.h, sel_gpu_hold and on;
 * docs/DESIGN.md section 13): coord_store_gpu_exports turns them on (a
 * pool whose jobs have pool_export: offers are taken) and allocates the
 * offers' table the first time, so that no offer allocates; it returns 0,
 * or -ENOMEM with them left off. The rest answer as the public calls say,
 * -ENOTSUP while they are off, and take constant time.
 */
int coord_store_gpu_exports(struct coord_store *s, bool on);
int coord_store_gpu_hold(struct coord_store *s, uint64_t checkpoint,
			 const struct rec_history *h, uint64_t consumed);
int coord_store_gpu_evicted(struct coord_store *s, uint64_t checkpoint);
int coord_store_gpu_evictions_lost(struct coord_store *s);
int coord_store_export_pinned(struct coord_store *s, uint64_t export_id,
			      const uint32_t *page_ids, uint32_t page_count,
			      uint32_t state_slot);
int coord_store_export_refuse(struct coord_store *s, uint64_t export_id, int reason);

/* Adds the records a startup scan kept: parents first, LRU order by mtime. */
int coord_store_load(struct coord_store *s, const struct rec_record_info *records,
		     size_t count);

bool coord_store_lookup(struct coord_store *s, const struct rec_history *h,
			uint64_t resident, struct sel_hit *hit);
int coord_store_publish(struct coord_store *s, const struct rec_history *h,
			const struct sel_publication *pub, enum sel_outcome *outcome);
int coord_store_fetch(struct coord_store *s, const struct sel_hit *hit,
		      const uint32_t *page_ids, uint32_t state_slot, uint64_t waiter,
		      bool *joined);
int coord_store_cancel(struct coord_store *s, uint64_t waiter);

/*
 * sel_touch (seed 2.10): the READY record at h's consumed count and its
 * ancestors become the most recently used. Returns 0, -EINVAL for a count
 * of 0 or past the history, SEL_ENOTFOUND when no ready record has that key.
 */
int coord_store_touch(struct coord_store *s, const struct rec_history *h, uint64_t consumed);

/*
 * A job that moves no bytes and touches no file, through every rank's
 * engine (jobs_ops.noop): what a job costs the transport alone, for selene
 * bench fanout. Its completion, taken by coord_store_poll, counts in
 * noops_done (and noops_failed) and makes no event. Returns 0, -ENOTSUP
 * without jobs_ops.noop, SEL_EQUEUEFULL or SEL_ESTOPPED.
 */
int coord_store_noop(struct coord_store *s);

/*
 * Submits writes from warm of dirty records (a parent's first, at most
 * COORD_WARM_WRITES_MAX in flight), as the write-through policy does after
 * every poll and close's drain does for either policy. Returns the dirty
 * records left without a write in flight.
 */
uint32_t coord_store_write_dirty(struct coord_store *s);

/* Takes job completions, applies them, and hands out events. */
uint32_t coord_store_poll(struct coord_store *s, struct sel_event *events, uint32_t max);

/* Jobs not yet completed. */
uint32_t coord_store_jobs_in_flight(const struct coord_store *s);

/*
 * Takes a job id for work outside the store (the pool's reattach of every
 * rank), not counted in flight: 0 and *id, or -EBUSY when every id is
 * taken. coord_store_job_unreserve gives it back.
 */
int coord_store_job_reserve(struct coord_store *s, uint32_t *id);
void coord_store_job_unreserve(struct coord_store *s, uint32_t id);

#endif
