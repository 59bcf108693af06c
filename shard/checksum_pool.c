/*
 * The checksum pool: see checksum_pool.h. Units are claimed one at a time
 * under the pool's lock; a unit is a page (tens of microseconds and more),
 * so the lock is never the bottleneck.
 */
#include "shard/checksum_pool.h"

#include "common/base.h"
#include "common/log.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/*
 * Claims the oldest queued batch's next unit, runs it without the lock and
 * accounts it; false when no batch has a unit to claim. Under the lock.
 */
static bool run_one(struct shard_checksum_pool *p)
{
	struct shard_checksum_batch *b = p->head;
	shard_checksum_fn fn;
	void *ctx;
	uint32_t i;

	if (!b)
		return false;
	fn = b->fn;
	ctx = b->ctx;
	i = b->next++;
	if (b->next == b->count) {
		/* Every unit claimed: off the queue, so nobody claims past it. */
		p->head = b->queued;
		if (!p->head)
			p->tail = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	fn(ctx, i);
	pthread_mutex_lock(&p->lock);
	/* The last touch of b: its waiter may free it once it sees done. */
	if (++b->done == b->count) {
		if (b->on_done)
			b->on_done(b->on_done_arg);
		pthread_cond_broadcast(&p->batch_done);
	}
	return true;
}

static void *helper_main(void *arg)
{
	struct shard_checksum_pool *p = arg;

	/* Below the model's threads (seed 2.12); no lock: set before the start. */
	if (p->restore)
		sel_thread_lower_priority(1, "restore checksum helper");
	else
		sel_thread_batch_priority("checksum helper");
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stopping && !p->head)
			pthread_cond_wait(&p->work_ready, &p->lock);
		if (p->stopping)
			break;
		run_one(p);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int shard_checksum_pool_init(struct shard_checksum_pool *p, uint32_t helper_count,
			     bool restore)
{
	int ret = 0;

	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work_ready, NULL);
	pthread_cond_init(&p->batch_done, NULL);
	p->restore = restore;
	if (helper_count > SHARD_CHECKSUM_HELPERS_MAX)
		helper_count = SHARD_CHECKSUM_HELPERS_MAX;
	for (uint32_t i = 0; i < helper_count; i++) {
		ret = sel_thread_start(&p->helpers[i], helper_main, p);
		if (ret)
			break;
		p->helper_count++;
	}
	if (ret)
		shard_checksum_pool_destroy(p);
	return ret;
}

void shard_checksum_pool_destroy(struct shard_checksum_pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->work_ready);
	pthread_mutex_unlock(&p->lock);
	for (uint32_t i = 0; i < p->helper_count; i++)
		pthread_join(p->helpers[i], NULL);
	p->helper_count = 0;
	pthread_cond_destroy(&p->batch_done);
	pthread_cond_destroy(&p->work_ready);
	pthread_mutex_destroy(&p->lock);
}

void shard_checksum_pool_submit(struct shard_checksum_pool *p,
				struct shard_checksum_batch *batch, shard_checksum_fn fn,
				void *ctx, uint32_t count)
{
	shard_checksum_pool_submit_told(p, batch, fn, ctx, count, NULL, NULL);
}

void shard_checksum_pool_submit_told(struct shard_checksum_pool *p,
				     struct shard_checksum_batch *batch, shard_checksum_fn fn,
				     void *ctx, uint32_t count, shard_checksum_done_fn on_done,
				     void *on_done_arg)
{
	*batch = (struct shard_checksum_batch){ .fn = fn, .ctx = ctx, .count = count,
						.on_done = on_done, .on_done_arg = on_done_arg };
	if (count == 0)
		return;
	pthread_mutex_lock(&p->lock);
	if (p->tail)
		p->tail->queued = batch;
	else
		p->head = batch;
	p->tail = batch;
	/* As many helpers as it has units (a page-long batch wakes one). */
	if (count >= p->helper_count)
		pthread_cond_broadcast(&p->work_ready);
	else
		for (uint32_t i = 0; i < count; i++)
			pthread_cond_signal(&p->work_ready);
	pthread_mutex_unlock(&p->lock);
}

bool shard_checksum_pool_help(struct shard_checksum_pool *p, struct shard_checksum_batch *batch)
{
	bool done;

	pthread_mutex_lock(&p->lock);
	/* Its own units (and those of batches before it) while any is unclaimed. */
	while (batch->next < batch->count && run_one(p))
		;
	done = batch->done == batch->count;
	/* Then one more, as a wait would, while the helpers finish its last. */
	if (!done && run_one(p))
		done = batch->done == batch->count;
	pthread_mutex_unlock(&p->lock);
	return done;
}

void shard_checksum_pool_wait(struct shard_checksum_pool *p, struct shard_checksum_batch *batch)
{
	pthread_mutex_lock(&p->lock);
	while (batch->done < batch->count)
		if (!run_one(p))
			pthread_cond_wait(&p->batch_done, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

void shard_checksum_pool_run(struct shard_checksum_pool *p, shard_checksum_fn fn,
			     void *ctx, uint32_t count)
{
	struct shard_checksum_batch batch;

	if (count == 0)
		return;
	/* Alone, or a single unit: no lock, no wake-ups. */
	if (p->helper_count == 0 || count == 1) {
		for (uint32_t i = 0; i < count; i++)
			fn(ctx, i);
		return;
	}
	shard_checksum_pool_submit(p, &batch, fn, ctx, count);
	shard_checksum_pool_wait(p, &batch);
}

uint32_t shard_checksum_pool_cores(void)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t allowed;

	/* The cores this process may run on: a launcher binding ranks splits them. */
	if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) > 0 &&
	    CPU_COUNT(&allowed) < cores)
		cores = CPU_COUNT(&allowed);
	return cores < 1 ? 1 : (uint32_t)cores;
}

uint32_t shard_checksum_pool_helpers_for(uint32_t cores, bool restore)
{
	/*
	 * None on a machine of under four: helpers run below the model's
	 * threads, so on a busy small machine a helper that claimed a page
	 * can be kept off the CPU while the transfer thread waits for it
	 * (measured on the 2-core VM under load: store at 0.45-0.72 of raw
	 * with one helper, 0.92-1.00 without).
	 */
	if (cores < 4)
		return 0;
	/*
	 * A restore's: three quarters of the cores less the transfer thread,
	 * at most 11: a restore is short and the model waits for it, and
	 * where its files are memory-backed the verifying threads read the
	 * pages themselves (no kernel worker does), so they are all the
	 * reading there is: on 16 cores, 8 verifying threads gave a
	 * read-through from /dev/shm 0.84 of the raw read with 8 kernel
	 * workers, 12 gave 0.99 (an H100 host, selene bench warm). From a
	 * disk, the disk bounds it and the extra threads wait. The stores'
	 * pool runs for as long as stores come: a quarter of the cores, at
	 * most 3.
	 */
	if (restore) {
		uint32_t n = cores * 3 / 4 - 1;

		return n > 11 ? 11 : n;
	}
	return cores / 4 > 3 ? 3 : cores / 4;
}

/* SELENE_CHECKSUM_THREADS when set and valid, else the rule for the usable cores. */
static uint32_t default_helpers(bool restore)
{
	uint32_t n;

	if (sel_env_count("SELENE_CHECKSUM_THREADS", SHARD_CHECKSUM_HELPERS_MAX, &n))
		return n;
	return shard_checksum_pool_helpers_for(shard_checksum_pool_cores(), restore);
}

uint32_t shard_checksum_pool_default_helpers(void)
{
	return default_helpers(false);
}

uint32_t shard_checksum_pool_default_verifiers(void)
{
	return default_helpers(true);
}
