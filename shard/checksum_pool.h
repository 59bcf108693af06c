/*
 * The checksum pool of a rank's shard engine (docs/DESIGN.md section 6):
 * helper threads that share a window's checksum pass with the
 * transfer thread, so a window of pages is hashed (store) or verified
 * (fetch) on several cores while the disk thread keeps reading or writing
 * the next windows. A pass is fork-join: shard_checksum_pool_run returns
 * once every unit is done, so the caller owns the window again. Every
 * helper runs below the model's threads (seed 2.12): a background pool's
 * (stores) SCHED_BATCH at nice 10, a restore pool's at nice 1, as the
 * transfer thread, so a restore's verification is not kept waiting by the
 * stores' kernel workers and hashing, at nice 10 (restores first). With no
 * helpers the caller does every unit itself.
 */
#ifndef SELENE_SHARD_CHECKSUM_POOL_H
#define SELENE_SHARD_CHECKSUM_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Helper threads a rank's pool may have (a compile-time ceiling). */
#define SHARD_CHECKSUM_HELPERS_MAX 15u

/* One unit of a pass: the checksum work for unit index of ctx. */
typedef void (*shard_checksum_fn)(void *ctx, uint32_t index);

struct shard_checksum_pool {
	pthread_t helpers[SHARD_CHECKSUM_HELPERS_MAX];
	uint32_t helper_count;
	pthread_mutex_t lock;
	pthread_cond_t work_ready; /* a pass started, or stop */
	pthread_cond_t pass_done;
	/* The running pass (one at a time: the transfer thread's). */
	shard_checksum_fn fn;
	void *ctx;
	uint32_t count;
	uint32_t next;       /* next unit to claim */
	uint32_t done;       /* units finished */
	uint64_t pass;       /* pass number, so a helper joins each pass once */
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
 * different i. Called by one thread at a time.
 */
void shard_checksum_pool_run(struct shard_checksum_pool *pool, shard_checksum_fn fn,
			     void *ctx, uint32_t count);

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
