/*
 * One rank's shard engine (docs/DESIGN.md section 6, seed 2.5): staged jobs that
 * move a checkpoint between device memory and its record file. A transfer
 * thread runs jobs restores first: a fetch goes before every queued store,
 * truncate, unlink or noop, and running stores yield to every queued fetch
 * before each of their device copies and whenever they wait for the disk (a
 * write, a create, commit or abort), then resume (their I/O in flight
 * continues, at a lower priority on the disk); otherwise jobs run in
 * submission order, except that up to stores_max stores run at once, and
 * no job overtakes an earlier fetch. It expands page ids
 * and the state slot into device addresses from the geometry, copies windows
 * of at most 64 pages plus the row through several staging buffers, and hands
 * each window to the disk thread (record/disk.h) so that device copies and
 * disk I/O overlap. A staging window's slots are one group of the grouped
 * layout (shard/slab.h, SELENE_STAGING_GROUP_SLOTS), so a window's run of
 * consecutive page ids is one copy entry per plane. Submission never waits; completions come back through a
 * bounded queue that shard_engine_poll drains. A job completes whole or
 * fails with a reason, and a failure is reported only after every copy and
 * I/O it started has drained. Everything is allocated at open. With a warm
 * tier (warm_bytes, shard/warm.h), a store sent warm goes through warm
 * slots instead of staging and stays in them, a fetch copies the records
 * of its chain that are warm from their slots to the device without
 * reading their files, and a fetch sent read-through reads the others
 * into warm slots, where they stay once it succeeds.
 */
#ifndef SELENE_SHARD_ENGINE_H
#define SELENE_SHARD_ENGINE_H

#include "common/limits.h"
#include "record/dir.h"
#include "record/format.h"
#include "record/geometry.h"
#include "record/key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Pages in one staging window (docs/DESIGN.md section 6). */
#define SHARD_WINDOW_PAGES_MAX 64u
/*
 * The default window holds about two 8 MiB disk requests: small enough that
 * a job's first copy (before any write) and last copy (after every read)
 * are short, large enough that the hand-offs between threads are few.
 * Measured with selene bench on 8, 16 and 32 MiB; 16 was best.
 */
#define SHARD_WINDOW_BYTES (16ull << 20)
/*
 * With the disk thread's kernel workers (memory-backed or buffered
 * directories), about 8 MiB: a window is verified while its bytes are more
 * likely still in the cache, and more windows overlap. Measured on the H200
 * from tmpfs, in one run (selene bench fetch --window-pages 1, 2, 4, 7 of
 * 2.25 MiB pages): 4.4, 6.6, 10.9, 8.5 GB/s; 10 MiB makes 4 such pages.
 */
#define SHARD_WINDOW_WORKER_BYTES (10ull << 20)
/*
 * Staging buffers: while one window is copied, the other seven are on the
 * disk, as deep as the raw baseline's eight 8 MiB requests. docs/DESIGN.md says
 * double-buffered; with two buffers the disk idled whenever a copy or a
 * checksum pass outlasted one window's I/O.
 */
#define SHARD_STAGES 8u
/*
 * Stores in progress at once on a rank, each writing its own record file,
 * their windows interleaved on the background staging. One file's writes
 * are serialised by the kernel where the disk thread uses kernel workers
 * (tmpfs takes the file's lock for each write: 2-3 GB/s on the H200, 14-16
 * for 8 files at once, selene bench fetch's ceiling line), so there 8 run at
 * once by default; elsewhere one, as a block device gains nothing. Measured
 * on the H200 into /dev/shm in one run (selene bench fetch --records 8, 4
 * pages of 2.25 MiB a window): 4 at once 6.8 and 9.0 GB/s, 8 at once 10.1
 * and 9.9, fetches unchanged (3-page windows stored at 10.4 and 11.1, but
 * fetched at 8.0 instead of 12.5-13.1).
 */
#define SHARD_STORES_MAX 8u
/*
 * The background lane's staging: SHARD_STAGES, or two windows for each
 * store in progress where more run at once (one on the disk while the next
 * is copied and summed).
 */
#define SHARD_STORE_STAGES_MAX (2u * SHARD_STORES_MAX)
_Static_assert(SHARD_STAGES <= SHARD_STORE_STAGES_MAX, "the lanes' staging");
/*
 * A fetch keeps at most this many bytes of reads in flight (as the raw
 * baseline does: eight 8 MiB requests). With more, the reads of a whole
 * record complete together and every checksum pass and copy waits for the
 * end; with this, they overlap the reads still in flight.
 */
#define SHARD_READ_AHEAD_BYTES (64ull << 20)
/* Records in one fetch chain: a chain holds at most one record per page,
 * plus page-less records; 4096 is far past any conversation's turns. */
#define SHARD_CHAIN_RECORDS_MAX 4096u
/* Jobs submitted and not yet polled. */
#define SHARD_JOBS_MAX 256u
/*
 * Closings handed to the transfer thread at once (shard_engine_retire): a
 * replaced pool connection waits there for the transfer running now; rank
 * zero hands one at a time, a peer one per reattach.
 */
#define SHARD_RETIRES_MAX 4u

struct shard_device;
struct shard_engine;

/* Where the rank's planes live on the device. */
struct shard_planes {
	uint64_t page_base[REC_PAGE_PLANES_MAX]; /* geometry (name) order */
	uint64_t row_base;
};

struct shard_engine_options {
	const struct rec_geometry *geometry; /* copied */
	struct rec_dir *dir;                 /* not owned; outlives the engine */
	struct shard_device *device;         /* not owned; outlives the engine */
	const struct shard_planes *planes;   /* copied */
	uint32_t jobs_max;                   /* 1 .. SHARD_JOBS_MAX; 0 means 64 */
	uint32_t window_pages;               /* 1 .. 64; 0: SELENE_WINDOW_PAGES where
						set, else about SHARD_WINDOW_BYTES */
	uint64_t read_ahead_bytes;           /* a fetch's reads in flight; 0: SHARD_READ_AHEAD_BYTES */
	bool no_uring;                       /* the disk thread's fallback path */
	bool register_pool;                  /* register staging with the device */
	/*
	 * Threads that hash or verify a window's pages: the transfer thread
	 * and checksum_threads - 1 helpers (shard/checksum_pool.h), from the
	 * stores' pool or the restores' (each that many); 0 means
	 * shard_checksum_pool_default_helpers() helpers for the stores and
	 * shard_checksum_pool_default_verifiers() for the restores.
	 */
	uint32_t checksum_threads;
	/*
	 * The disk thread's kernel workers (record/disk.h, io_workers): 0
	 * means rec_disk_default_io_workers(dir), SHARD_IO_WORKERS_NONE none.
	 */
	uint32_t io_workers;
	/*
	 * Stores in progress at once, 1 .. SHARD_STORES_MAX; 0:
	 * shard_default_stores_max(). Stores of one key never overlap, and a
	 * truncate, unlink or noop runs after every store queued before it.
	 */
	uint32_t stores_max;
	/*
	 * The warm tier (shard/warm.h): bytes of host memory held as page-
	 * record slots, registered with the device (with register_pool) at
	 * open; 0: none. At least one page and the row.
	 */
	uint64_t warm_bytes;
	/*
	 * The warm tier's groups of plane-major slots at most (shard/warm.h);
	 * 0: SELENE_WARM_GROUP_SLOTS where set (1 to SHARD_WARM_GROUP_SLOTS;
	 * 0 reads as 1), else SHARD_WARM_GROUP_SLOTS. 1 lays every slot out
	 * as one page record, as staging, so the two can be compared.
	 */
	uint32_t warm_group_slots_max;
};

/*
 * Stores at once when nothing says otherwise: SELENE_STORES_AT_ONCE (1 to
 * SHARD_STORES_MAX; 0, unset or malformed, which is warned about: the
 * default), else SHARD_STORES_MAX with the disk thread's kernel workers
 * (io_workers > 0) and 1 without.
 */
uint32_t shard_default_stores_max(uint32_t io_workers);

#define SHARD_IO_WORKERS_NONE UINT32_MAX

enum shard_job_kind {
	SHARD_JOB_STORE,
	SHARD_JOB_FETCH,
	SHARD_JOB_TRUNCATE,
	SHARD_JOB_UNLINK,
	SHARD_JOB_NOOP,
	SHARD_JOB_WARM_DROP,
	SHARD_JOB_POOL_PUT,   /* this rank's share of a pool put (R-WIRE-21) */
	SHARD_JOB_POOL_CLAIM, /* this rank's share of a pool claim (R-WIRE-21) */
	SHARD_JOB_POOL_EXPORT, /* a put's share built from device pages (R-POOL-78) */
};

/*
 * A store's use of the warm tier (the JOB store's warm field, R-WIRE-21):
 * none (through staging to the file), through (into warm slots where
 * enough are free, else staging; the file is written from them and the
 * record stays warm), only (into warm slots, no file: the job completes
 * when the bytes are in the slots; too few free fails it with -ENOBUFS), or
 * write (no device copy: the file is written from the committed warm copy
 * of the header's key, which stays warm; none fails it with -ENOENT; the
 * page ids are not used).
 */
enum shard_store_warm {
	SHARD_STORE_COLD = 0,
	SHARD_STORE_WARM = 1,
	SHARD_STORE_WARM_ONLY = 2,
	SHARD_STORE_WARM_WRITE = 3,
};

/* Store: page ids and state slot on the device -> slots -> record file. */
struct shard_store_job {
	const struct rec_header *header; /* from rec_header_init; copied */
	const uint32_t *page_ids;        /* header->tail_page_count ids; copied */
	uint32_t state_slot;
	uint8_t warm;                    /* enum shard_store_warm (true: WARM) */
	bool replaces;                   /* it puts a page-only record's row back:
					    a rank that fails keeps the old file,
					    so the fan-out does not unlink where it
					    was written (the store then truncates
					    the row everywhere instead) */
};

/* One record of a fetch chain, as the index knows it. */
struct shard_chain_record {
	struct rec_key key;
	uint32_t first_page_index;
	uint32_t tail_page_count;
};

/*
 * Fetch: a chain of records, root side first, minus the first skip_pages
 * pages, -> verify -> slots -> destination page ids and state slot; the row
 * is the last record's.
 */
struct shard_fetch_job {
	const struct shard_chain_record *chain; /* copied */
	uint32_t chain_count;
	uint32_t skip_pages;
	const uint32_t *page_ids; /* the chain's pages minus skip_pages; copied */
	uint32_t state_slot;
	/*
	 * Read-through: each record not warm on this rank that the fetch reads
	 * whole goes into warm slots, where enough are free, is verified and
	 * copied to the device from there, and stays warm once the fetch
	 * succeeds (else its slots go back). Records warm already are copied
	 * from their slots either way.
	 */
	bool read_through;
};

struct shard_completion {
	uint64_t job_id;
	enum shard_job_kind kind;
	int result;      /* 0, a negative errno, or a SEL_E* code */
	char why[200];   /* the reason, when result is not 0 */
	uint64_t bytes;  /* payload bytes moved */
};

struct shard_engine_stats {
	uint64_t jobs_done;
	uint64_t jobs_failed;
	/*
	 * Jobs submitted and not yet completed (queued or running) when the
	 * stats were taken: 0 means the engine is idle, every copy and disk
	 * request of its jobs done (a job completes only after them).
	 */
	uint32_t jobs_in_flight;
	uint64_t bytes_stored;
	uint64_t bytes_fetched;
	uint64_t queue_full;
	uint64_t store_yields; /* fetches run while a store was in progress */
	uint32_t stores_at_once; /* the most stores that were in progress at once */
	/*
	 * Where the transfer thread's time went while stores ran (run_ns, from
	 * the first store's start to the last one's completion): copying their
	 * windows and rows from the device, their checksum passes, and waiting
	 * for the disk with nothing else to do; the rest went to fetches run
	 * between windows and to the steps themselves.
	 */
	uint64_t store_run_ns, store_copy_ns, store_sum_ns, store_wait_ns;
	/*
	 * The stores' window copies from the device (store_copy_ns less the
	 * rows copied through staging): how many, the time issuing them and
	 * the time waiting for them, and between each one's issue and its
	 * wait, the transfer thread's other work while it ran (gap: a
	 * checksum pass of the window before it, other stores' steps). A copy
	 * overlapped is one a checksum pass ran beside; one neither that nor
	 * pipelined (below) was waited for right after its issue, so its
	 * wait holds the whole copy and the device's completion wake-up. issue + gap + wait of a copy is at
	 * least its time on the device: a copy time per window well above a
	 * bulk copy of a window's bytes with its own wait says the copies
	 * themselves ran slower (the link, host memory, the transfer thread
	 * waiting for a core), one near it that each window paid its own
	 * wait.
	 */
	uint64_t store_copies, store_copies_overlapped;
	/*
	 * Copies whose next window's copies were issued before their wait
	 * (docs/DESIGN.md section 6: the copy engine ran on while the
	 * transfer thread waited), and copies neither that nor overlapped by
	 * a checksum pass: waited for right after their issue.
	 */
	uint64_t store_copies_pipelined, store_copies_alone;
	uint64_t store_copy_issue_ns, store_copy_wait_ns, store_copy_gap_ns;
	/*
	 * Where the transfer thread's time went in fetches (fetch_run_ns, the
	 * sum of their runs): opening records (header and checksum table:
	 * closing the file's last record, sending the open, and waiting for
	 * its reply where it was not sent ahead or is not back yet), waiting
	 * for the oldest window's reads, waiting for its verification (which
	 * started on the restore pool as its read landed; the transfer thread
	 * verifies pages meanwhile), starting and waiting for their device copies, and the end of each
	 * fetch after its last window was verified (its last copy, the row,
	 * closing its files) while no read of it was in flight.
	 */
	uint64_t fetch_run_ns, fetch_open_ns, fetch_wait_ns, fetch_verify_ns,
		fetch_copy_ns, fetch_end_ns;
	/*
	 * fetch_end_ns in parts: waiting for the last window's copy (and the
	 * warm records' copies), the row (waiting for its read, copying it),
	 * and closing the files (with every reply still out); the rest of it
	 * is scrubbing staging after a failure and settling read-throughs.
	 */
	uint64_t fetch_end_copy_ns, fetch_end_row_ns, fetch_end_close_ns;
	/*
	 * Records whose open a fetch sent ahead, while windows of records
	 * before them were still to be issued or verified, instead of when
	 * their first window was issued.
	 */
	uint64_t fetch_opens_ahead;
	/*
	 * Windows read from files and verified, and the groups that verified
	 * them: a group takes every window whose read has landed since the
	 * last group, and is verified while later windows read and earlier
	 * ones copy.
	 */
	uint64_t fetch_windows;
	uint64_t fetch_verify_passes;
	/*
	 * The verification itself, on every thread of the restore pool: the
	 * time its units took, summed over threads (a page each), the page
	 * bytes verified, and the most groups of windows queued or being verified at
	 * once. fetch_verify_ns is only the transfer thread's wait for the
	 * oldest window's group (helping with pages meanwhile); bytes over
	 * hash_ns is one thread's rate.
	 */
	uint64_t fetch_hash_ns;
	uint64_t fetch_bytes_verified;
	uint64_t fetch_verify_groups_max;
	/*
	 * Of fetch_windows, those its verifying threads read themselves (a
	 * memory-backed directory), each page in chunks hashed while in cache.
	 */
	uint64_t fetch_windows_read_here;
	/*
	 * Where the verifying threads' idle time falls, summed over the
	 * fetches that verified pages: from a fetch's start to its first
	 * page's verification (the plan, the first open, the first windows
	 * issued, a helper's wake-up: no thread verifies), from its first
	 * page's start to its last page's end (the span: fetch_hash_ns over
	 * it is how many threads were busy while there was verification to
	 * do), and from its last page's end to the fetch's end (its last
	 * copy, the row, the closes).
	 */
	uint64_t fetch_verify_lead_ns, fetch_verify_span_ns, fetch_verify_tail_ns;
	/*
	 * Fetches of warm records whose copies were issued while the fetch
	 * before them was still in flight (pipelined, docs/DESIGN.md section 6).
	 */
	uint64_t fetch_warm_pipelined;
	const char *disk_engine; /* "io_uring" or "pread/pwrite" */
	uint32_t io_workers;       /* the disk thread's kernel workers (0: inline) */
	uint32_t checksum_threads; /* a store's pass: the transfer thread and its pool's helpers */
	uint32_t verify_threads;   /* a restore's pass: likewise, the restore pool's */
	uint32_t stores_max;       /* stores in progress at once */
	uint64_t staging_bytes;  /* the staging pool's size */
};

/*
 * Allocates the staging pool, the job pool and the queues, starts the disk
 * and transfer threads. Returns 0, or a negative code with err.
 */
int shard_engine_open(const struct shard_engine_options *options,
		      struct shard_engine **out, char *err, size_t err_size);

/* Runs every job already submitted, stops the threads, frees. NULL is fine. */
void shard_engine_close(struct shard_engine *engine);

/*
 * Submissions: validated and copied into a preallocated job; never wait.
 * Return 0, SEL_EQUEUEFULL when jobs_max jobs are unpolled, -EINVAL (or
 * SEL_EMISMATCH) for a job that does not fit the geometry, or SEL_ESTOPPED.
 */
int shard_engine_store(struct shard_engine *engine, uint64_t job_id,
		       const struct shard_store_job *job);
int shard_engine_fetch(struct shard_engine *engine, uint64_t job_id,
		       const struct shard_fetch_job *job);
int shard_engine_truncate(struct shard_engine *engine, uint64_t job_id,
			  const struct rec_key *key);
int shard_engine_unlink(struct shard_engine *engine, uint64_t job_id,
			const struct rec_key *key);
/*
 * Drops key's warm copy, if this rank holds one (its file stays), once
 * every fetch submitted before it has run and before every fetch
 * submitted after it: it is queued with the fetches, so it may run before
 * background jobs submitted earlier (rank zero drops only records no
 * store is writing). Rank zero decides which record goes; every rank
 * drops the same. A drop that finds a write from warm of key in flight
 * fails with -EBUSY and frees nothing (the write reads those slots). A
 * store, a truncate (the row's slots) and an unlink drop warm copies of
 * their key too, after any write from warm of it has completed (they run
 * in order with the stores).
 */
int shard_engine_warm_drop(struct shard_engine *engine, uint64_t job_id,
			   const struct rec_key *key);

/*
 * A job that moves no bytes and touches no file: it takes a job, passes the
 * queue and the transfer thread, and completes with 0, as any job does.
 * What a job costs the engine and the transport alone (selene bench fanout).
 */
int shard_engine_noop(struct shard_engine *engine, uint64_t job_id);

struct shard_pool_share;
struct shard_pool_record;
struct shard_pool_early;

/*
 * A rank's connection to the pool manager as the engine uses it (over
 * pool/client.h, or a test's): each call blocks the transfer thread for
 * one share's transfer, bounded by the pool's deadlines. put_share sends
 * the share image of put_id held in fd (length bytes, a record file) and
 * returns once the manager verified it; claim_share pulls claim_id's share
 * of chain (skipping skip_pages pages) and hands every window, or arena
 * place, to share (shard/pool_share.h), stopping at its first failure.
 * Both return 0 or the failure with why.
 */
struct shard_pool_conn {
	void *ctx;
	int (*put_share)(void *ctx, uint64_t put_id, int fd, uint64_t length, char *why,
			 size_t why_size);
	int (*claim_share)(void *ctx, uint64_t claim_id, const struct shard_pool_record *chain,
			   uint32_t chain_count, uint32_t skip_pages,
			   struct shard_pool_share *share, char *why, size_t why_size);
	/*
	 * Optional (NULL: a claim job with early places fails -ENOTSUP): the
	 * session rank's share of a same-host claim whose grant is still to
	 * come (R-POOL-22, R-POOL-51), begun in share with the lookup's chain:
	 * issues the copies from early's places (one per chain record; its
	 * issued flags are set), waits for the grant within the claim's
	 * deadline, then keeps or redoes each record by the grant's stamps
	 * (shard_pool_share_granted, R-POOL-36). Returns 0 or the failure with
	 * why; the caller finishes the share either way.
	 */
	int (*claim_early)(void *ctx, uint64_t claim_id, struct shard_pool_early *early,
			   struct shard_pool_share *share, char *why, size_t why_size);
};

/*
 * Gives the engine this rank's pool connection (conn copied; namespace_id
 * borrowed while the engine lives), or takes it away (NULL), before any
 * pool job is submitted and after every one completed. Returns 0 or
 * -ENOMEM (the claim's copy list and page bitmap).
 */
int shard_engine_set_pool(struct shard_engine *engine, const struct shard_pool_conn *conn,
			  const struct rec_identity *namespace_id);

/*
 * Hands close(ctx) to the transfer thread, which runs it after the job it
 * runs now and before the next, with the device current on it; the engine's
 * close runs what is left on its caller's thread, once the transfer thread
 * stopped. For what must not run on the model thread and must not run
 * under a transfer: closing a replaced pool connection (its registration
 * of the manager's arena, its I/O thread). Never waits. Returns 0,
 * SEL_EQUEUEFULL with SHARD_RETIRES_MAX waiting, or SEL_ESTOPPED once the
 * engine stops; then nothing was taken and the caller closes it.
 */
int shard_engine_retire(struct shard_engine *engine, void (*close)(void *ctx), void *ctx);

/* Never waits. Closings handed to shard_engine_retire that have not finished. */
uint32_t shard_engine_retiring(struct shard_engine *engine);

/*
 * Pool put: this rank's record file of key, whose length must be
 * share_bytes (else SEL_EMISMATCH; a missing file -ENOENT), sent as the
 * share of put_id. Runs with the background jobs; without a pool
 * connection it fails with -ENOTSUP.
 */
int shard_engine_pool_put(struct shard_engine *engine, uint64_t job_id,
			  const struct rec_key *key, uint64_t put_id, uint64_t share_bytes);

/*
 * Pool export of a GPU checkpoint (pool/PROTOCOL.md R-POOL-78): this rank's
 * share of put_id is the record header describes (a root record: first
 * page 0, with its row), its pages copied from page_ids (the header's tail
 * page count of them) and its row from state_slot on this rank's device,
 * its page and row checksums computed from those bytes, and sent as any
 * put's share, verified by the manager. The page ids and slot must stay
 * pinned by the engine's owner until the completion. Runs with the
 * background jobs. Returns 0, -EINVAL for ids outside the device or a
 * header that is not a root record with its row, SEL_EMISMATCH for one of
 * another geometry, or SEL_ETOOBIG for a share past
 * POOL_GPU_EXPORT_SHARE_BYTES_MAX; without a pool connection the job fails
 * with -ENOTSUP.
 */
struct shard_pool_export_job {
	const struct rec_header *header; /* from rec_header_init; copied */
	const uint32_t *page_ids;        /* header->tail_page_count ids; copied */
	uint32_t state_slot;
	uint64_t put_id;
};

int shard_engine_pool_export(struct shard_engine *engine, uint64_t job_id,
			     const struct shard_pool_export_job *job);

/* Pool claim: a chain the pool holds, into page ids and a state slot. */
struct shard_pool_claim_job {
	uint64_t claim_id;
	const struct shard_pool_record *chain; /* root side first; copied */
	uint32_t chain_count;
	uint32_t skip_pages;
	const uint32_t *page_ids;              /* the chain's pages after skip; copied */
	uint32_t state_slot;
	/*
	 * NULL: the claim was granted and chain is the grant's. Else (the
	 * session rank, on the manager's host, before the grant) chain is the
	 * lookup's answer and early its places and stamps, chain_count of
	 * them, borrowed until the job's completion: the job begins its copies
	 * at once and waits for the grant itself (shard_pool_conn.claim_early).
	 */
	const struct shard_pool_early *early;
};

/*
 * Runs with the fetches (restores first); its share verified window by
 * window before any device copy, and a claim that ends short fails: the
 * destination is then to be discarded. Without a pool connection it fails
 * with -ENOTSUP.
 */
int shard_engine_pool_claim(struct shard_engine *engine, uint64_t job_id,
			    const struct shard_pool_claim_job *claim);

/* Takes up to max completions without waiting; returns how many. */
uint32_t shard_engine_poll(struct shard_engine *engine,
			   struct shard_completion *out, uint32_t max);

/* Waits for one completion (tests, benchmarks and tools; not a model thread). */
void shard_engine_wait(struct shard_engine *engine, struct shard_completion *out);

/* Waits up to timeout_ms for one completion; 1 when out was filled, else 0. */
int shard_engine_wait_for(struct shard_engine *engine, struct shard_completion *out,
			  uint32_t timeout_ms);

/* Receives one completion on the engine's transfer thread; must not block. */
typedef void (*shard_completion_hook)(void *ctx, const struct shard_completion *c);

/*
 * From now on, completions go to hook on the transfer thread as each job
 * finishes, instead of to the ring that poll and wait read; NULL goes back
 * to the ring, and returns only once no call of the old hook is running,
 * so ctx may be freed after it. While a hook is set, poll and wait find
 * nothing. For a caller that answers each job at once (the peer agent),
 * one thread hand-off less per job.
 */
void shard_engine_set_completion_hook(struct shard_engine *engine,
				      shard_completion_hook hook, void *ctx);

void shard_engine_stats(struct shard_engine *engine,
			struct shard_engine_stats *out);

/* The staging pool now (shard/slab.h): for the metrics' staging gauges. */
struct shard_staging_stats {
	uint32_t slots_total, slots_free, slots_intake;
	uint64_t exhausted; /* allocations refused for lack of slots */
};

struct shard_warm_stats;

/* The warm tier's counters (shard/warm.h); zero without one. Any thread. */
void shard_engine_warm_stats(struct shard_engine *engine, struct shard_warm_stats *out);

/*
 * "warm 1024 MiB, 455 slots of 2304 KiB, registered in 12.3 ms (1 call)",
 * or "warm off": for the startup lines.
 */
void shard_engine_describe_warm(struct shard_engine *engine, char *out, size_t size);

/*
 * "staging 42 MiB, windows of 4 pages in groups of 4 by plane" (or
 * without the groups where G is 1): for the startup lines.
 */
void shard_engine_describe_staging(struct shard_engine *engine, char *out, size_t size);

/* Any thread, while the engine is open. */
void shard_engine_staging_stats(struct shard_engine *engine, struct shard_staging_stats *out);

#endif
