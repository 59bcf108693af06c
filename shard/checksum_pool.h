/*
 * The checksum pool of a rank's shard engine (docs/DESIGN.md section 6):
 * helper threads that share checksum work with the transfer thread, so
 * pages are hashed (store) or verified (fetch) on several cores while the
 * disk thread keeps reading or writing. Work comes in batches of units (a
 * unit is a page): a store's window is one batch run fork-join
 * (shard_checksum_pool_run); a fetch submits each group of windows as soon
 * as their reads land (shard_checksum_pool_submit) and waits for the oldest
 * (shard_checksum_pool_wait), so several windows are verified at once, on
 * as many threads as they have pages, while the transfer thread copies
 * verified windows to the device and reaps reads. Units are claimed oldest
 * batch first. Every helper runs below the model's threads (seed 2.12): a
 * background pool's (stores) SCHED_BATCH at nice 10, a restore pool's at
 * nice 1, as the transfer thread, so a restore's verification is not kept
 * waiting by the stores' kernel workers and hashing, at nice 10 (restores
 * first). With no helpers the waiting thread does every unit itself.
 */
#ifndef SELENE_SHARD_CHECKSUM_POOL_H
#define SELENE_SHARD_CHECKSUM_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Helper threads a rank's pool may have (a compile-time ceiling). */
#define SHARD_CHECKSUM_HELPERS_MAX 15u

/* One unit of a batch: the checksum work for unit index of ctx. */
typedef void (*shard_checksum_fn)(void *ctx, uint32_t index);

/*
 * Told once a batch's last unit is done, under the pool's lock, by the
 * thread that finished it (a fetch pokes its transfer thread's wait for
 * disk replies). It must not call into the pool.
 */
typedef void (*shard_checksum_done_fn)(void *arg);

/*
 * A batch of units, owned by its submitter; the pool's fields are under
 * the pool's lock from submit until the batch is done. A zeroed batch (or
 * one of no units) is done: waiting for it returns at once.
 */
struct shard_checksum_batch {
	shard_checksum_fn fn;
	void *ctx;
	uint32_t count;
	uint32_t next; /* next unit to claim */
	uint32_t done; /* units finished */
	struct shard_checksum_batch *queued; /* the next batch with units to claim */
	shard_checksum_done_fn on_done;      /* NULL, or told when done */
	void *on_done_arg;
};

struct shard_checksum_pool {
	pthread_t helpers[SHARD_CHECKSUM_HELPERS_MAX];
	uint32_t helper_count;
	pthread_mutex_t lock;
	pthread_cond_t work_ready; /* a batch submitted, or stop */
	pthread_cond_t batch_done;
	/* Batches with units left to claim, oldest first (one submitter). */
	struct shard_checksum_batch *head, *tail;
	bool restore;        /* helpers at nice 1, else SCHED_BATCH at nice 10 */
	bool stopping;
};

/*
 * Starts helper_count helpers (at most SHARD_CHECKSUM_HELPERS_MAX), at a
 * restore's priority (restore) or the background's. Returns 0, or a
 * negative errno; on failure nothing is left running.
 */
int shard_checksum_pool_init(struct shard_checksum_pool *pool, uint32_t helper_count,
			     bool restore);

/* Stops and joins the helpers. */
void shard_checksum_pool_destroy(struct shard_checksum_pool *pool);

/*
 * Runs fn(ctx, i) for every i in [0, count) on the caller and the helpers;
 * returns when all have returned. fn must be safe to run concurrently for
 * different i. Called by one thread at a time (the pool's submitter).
 */
void shard_checksum_pool_run(struct shard_checksum_pool *pool, shard_checksum_fn fn,
			     void *ctx, uint32_t count);

/*
 * Queues batch: fn(ctx, i) for every i in [0, count), taken by the helpers
 * at once and by shard_checksum_pool_wait. batch and ctx stay the
 * caller's to keep alive, untouched, until a wait for batch returns.
 */
void shard_checksum_pool_submit(struct shard_checksum_pool *pool,
				struct shard_checksum_batch *batch, shard_checksum_fn fn,
				void *ctx, uint32_t count);

/*
 * shard_checksum_pool_submit, and on_done(on_done_arg) once the batch's
 * last unit is done (a batch of no units is done at once: never told).
 */
void shard_checksum_pool_submit_told(struct shard_checksum_pool *pool,
				     struct shard_checksum_batch *batch, shard_checksum_fn fn,
				     void *ctx, uint32_t count, shard_checksum_done_fn on_done,
				     void *on_done_arg);

/*
 * Never sleeps: runs units (oldest batch first, as shard_checksum_pool_wait)
 * until every unit of batch is claimed, then at most one more, and says
 * whether batch is done. False means the helpers hold its last units: a
 * caller that sleeps until on_done tells it (shard_checksum_pool_submit_told)
 * can wait for something else meanwhile. With no helpers it is always
 * true. No helper touches batch or its ctx once it returned true.
 */
bool shard_checksum_pool_help(struct shard_checksum_pool *pool,
			      struct shard_checksum_batch *batch);

/*
 * Returns once every unit of batch is done; meanwhile the caller runs
 * units itself, oldest batch first: batch's own, those of a batch
 * submitted before it, and once every unit of batch is claimed, those of
 * later batches (it then returns after at most one more unit). No helper
 * touches batch or its ctx after.
 */
void shard_checksum_pool_wait(struct shard_checksum_pool *pool,
			      struct shard_checksum_batch *batch);

/*
 * The online cores this process may run on (its affinity, where a
 * launcher binds each rank to its share), at least 1.
 */
uint32_t shard_checksum_pool_cores(void);

/*
 * Helpers for a pool on cores usable cores: none under four cores; else
 * for the stores' pool a quarter of them, at most 3, for a restore pool
 * (restore) half of them less one, at most 7.
 */
uint32_t shard_checksum_pool_helpers_for(uint32_t cores, bool restore);

/*
 * Helpers for a rank's stores' pool when nothing says otherwise:
 * SELENE_CHECKSUM_THREADS (helper threads, 0 to SHARD_CHECKSUM_HELPERS_MAX)
 * when set and valid, else shard_checksum_pool_helpers_for the cores
 * shard_checksum_pool_cores counts.
 */
uint32_t shard_checksum_pool_default_helpers(void);

/* The same for a rank's restore pool (restore set). */
uint32_t shard_checksum_pool_default_verifiers(void);

#endif
