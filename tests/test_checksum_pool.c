/*
 * The checksum pool (shard/checksum_pool.h): every unit of a pass runs
 * exactly once, with no helpers and with several, pass after pass; the
 * caller owns the context again when run returns; batches submitted
 * without waiting run on the helpers meanwhile, several queued at once,
 * each unit once, every wait returning with its batch done; help never
 * waits and a batch's on_done is told once; a stores' pool's helpers
 * run SCHED_BATCH at nice 10 and a restores' pool's at nice 1; the default
 * helper count follows SELENE_CHECKSUM_THREADS and ignores a malformed value,
 * and otherwise one rule by the cores the process may run on, for both pools.
 */
#include "tests/testutil.h"

#include "common/log.h"
#include "shard/checksum_pool.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

struct pass {
	uint32_t runs[257];
};

static void count_unit(void *ctx, uint32_t i)
{
	struct pass *p = ctx;

	__atomic_add_fetch(&p->runs[i], 1, __ATOMIC_RELAXED);
}

/* 200 passes of 1 to 257 units each run every unit once, for 0, 1, 3 helpers. */
static void test_checksum_pool_every_unit_once(void **state)
{
	static const uint32_t helpers[] = { 0, 1, 3 };

	(void)state;
	for (size_t h = 0; h < sizeof(helpers) / sizeof(helpers[0]); h++) {
		struct shard_checksum_pool pool;

		assert_int_equal(shard_checksum_pool_init(&pool, helpers[h], h % 2), 0);
		assert_int_equal(pool.helper_count, helpers[h]);
		for (uint32_t round = 0; round < 200; round++) {
			struct pass p;
			uint32_t count = 1 + round * 37 % 257;

			memset(&p, 0, sizeof(p));
			shard_checksum_pool_run(&pool, count_unit, &p, count);
			for (uint32_t i = 0; i < 257; i++)
				if (p.runs[i] != (i < count ? 1u : 0u))
					fail_msg("helpers %u, pass %u: unit %u ran %u times",
						 helpers[h], round, i, p.runs[i]);
		}
		shard_checksum_pool_run(&pool, count_unit, NULL, 0); /* nothing to do */
		shard_checksum_pool_destroy(&pool);
	}
}

/*
 * A submitted batch runs on the helpers while its submitter does not wait
 * (as a fetch's verification runs while the transfer thread copies): with
 * one helper, every unit of a batch is done before the wait is called.
 */
static void test_checksum_pool_batch_runs_without_wait(void **state)
{
	struct shard_checksum_pool pool;
	struct shard_checksum_batch batch;
	struct pass p;
	uint32_t done = 0;

	(void)state;
	memset(&p, 0, sizeof(p));
	assert_int_equal(shard_checksum_pool_init(&pool, 1, true), 0);
	shard_checksum_pool_submit(&pool, &batch, count_unit, &p, 16);
	/* Up to 10 s for a helper to be scheduled on a busy machine. */
	for (uint32_t i = 0; i < 10000 && done < 16; i++) {
		done = 0;
		for (uint32_t u = 0; u < 16; u++)
			done += __atomic_load_n(&p.runs[u], __ATOMIC_RELAXED);
		if (done < 16)
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	assert_int_equal(done, 16);
	shard_checksum_pool_wait(&pool, &batch);
	for (uint32_t u = 0; u < 257; u++)
		assert_int_equal(p.runs[u], u < 16 ? 1 : 0);
	shard_checksum_pool_destroy(&pool);
}

/*
 * Eight batches queued at once, waited for oldest first, then again in
 * reverse: each wait returns with its batch whole, every unit of every
 * batch ran once, with 0, 1 and 3 helpers (none: the waits run them all).
 */
static void test_checksum_pool_batches_queued_together(void **state)
{
	static const uint32_t helpers[] = { 0, 1, 3 };

	(void)state;
	for (size_t h = 0; h < sizeof(helpers) / sizeof(helpers[0]); h++) {
		struct shard_checksum_pool pool;
		struct shard_checksum_batch batch[8];
		struct pass p[8];

		assert_int_equal(shard_checksum_pool_init(&pool, helpers[h], true), 0);
		for (uint32_t round = 0; round < 50; round++) {
			bool reverse = round % 2;

			memset(p, 0, sizeof(p));
			for (uint32_t b = 0; b < 8; b++)
				shard_checksum_pool_submit(&pool, &batch[b], count_unit, &p[b],
							   (round * 7 + b * 31) % 257);
			for (uint32_t k = 0; k < 8; k++) {
				uint32_t b = reverse ? 7 - k : k;
				uint32_t count = (round * 7 + b * 31) % 257;

				shard_checksum_pool_wait(&pool, &batch[b]);
				for (uint32_t u = 0; u < 257; u++)
					if (__atomic_load_n(&p[b].runs[u], __ATOMIC_RELAXED) !=
					    (u < count ? 1u : 0u))
						fail_msg("helpers %u, round %u, batch %u: unit %u "
							 "ran %u times", helpers[h], round, b, u,
							 p[b].runs[u]);
			}
		}
		shard_checksum_pool_destroy(&pool);
	}
}

static void count_told(void *arg)
{
	__atomic_add_fetch((uint32_t *)arg, 1, __ATOMIC_RELAXED);
}

/*
 * shard_checksum_pool_help never sleeps: with no helpers its first call
 * runs every unit and says the batch is done; with 2 helpers calls return
 * until it is; either way on_done is told exactly once, before help says
 * done, and every unit ran once (a fetch sleeps on its disk replies
 * between calls, poked by on_done).
 */
static void test_checksum_pool_help_and_told(void **state)
{
	(void)state;
	for (uint32_t helpers = 0; helpers < 3; helpers += 2) {
		struct shard_checksum_pool pool;

		assert_int_equal(shard_checksum_pool_init(&pool, helpers, true), 0);
		for (uint32_t round = 0; round < 50; round++) {
			struct shard_checksum_batch batch;
			struct pass p;
			uint32_t told = 0, calls = 0;

			memset(&p, 0, sizeof(p));
			shard_checksum_pool_submit_told(&pool, &batch, count_unit, &p, 16,
							count_told, &told);
			while (!shard_checksum_pool_help(&pool, &batch))
				calls++;
			if (helpers == 0)
				assert_int_equal(calls, 0);
			assert_int_equal(__atomic_load_n(&told, __ATOMIC_RELAXED), 1);
			assert_true(shard_checksum_pool_help(&pool, &batch));
			for (uint32_t u = 0; u < 257; u++)
				assert_int_equal(p.runs[u], u < 16 ? 1 : 0);
		}
		shard_checksum_pool_destroy(&pool);
	}
}

/* Where each unit of a pass ran, and at what priority. */
struct unit_seen {
	pid_t tid[8];
	int nice[8];
	int policy[8];
};

static void note_priority(void *ctx, uint32_t i)
{
	struct unit_seen *u = ctx;

	errno = 0;
	u->tid[i] = gettid();
	u->nice[i] = getpriority(PRIO_PROCESS, (id_t)u->tid[i]);
	u->policy[i] = sched_getscheduler(0);
	nanosleep(&(struct timespec){ 0, 2000000 }, NULL); /* so the helpers take some */
}

/*
 * Each pool's helpers run at its priority: the stores' SCHED_BATCH at nice
 * 10, the restores' SCHED_OTHER at nice 1 (the transfer thread's). Skipped
 * where this process already runs above nice 1 (a helper cannot go back).
 */
static void test_checksum_pool_priority(void **state)
{
	pid_t caller = gettid();

	(void)state;
	if (getpriority(PRIO_PROCESS, (id_t)caller) > 1)
		skip();
	for (int restore = 0; restore < 2; restore++) {
		struct shard_checksum_pool pool;
		uint32_t helped = 0;

		assert_int_equal(shard_checksum_pool_init(&pool, 2, restore), 0);
		for (uint32_t pass = 0; pass < 50 && helped < 4; pass++) {
			struct unit_seen u;

			memset(&u, 0, sizeof(u));
			shard_checksum_pool_run(&pool, note_priority, &u, 8);
			for (uint32_t i = 0; i < 8; i++) {
				if (u.tid[i] == caller)
					continue;
				helped++;
				assert_int_equal(u.nice[i], restore ? 1 : 10);
				assert_int_equal(u.policy[i], restore ? SCHED_OTHER : SCHED_BATCH);
			}
		}
		shard_checksum_pool_destroy(&pool);
		if (helped == 0)
			fail_msg("no unit of 50 passes ran on a helper (restore %d)", restore);
	}
}

/* More helpers than the ceiling are capped; SELENE_CHECKSUM_THREADS is read. */
static void test_checksum_pool_helper_count(void **state)
{
	struct shard_checksum_pool pool;
	uint32_t fallback;

	(void)state;
	assert_int_equal(shard_checksum_pool_init(&pool, 1000, false), 0);
	assert_int_equal(pool.helper_count, SHARD_CHECKSUM_HELPERS_MAX);
	shard_checksum_pool_destroy(&pool);
	unsetenv("SELENE_CHECKSUM_THREADS");
	fallback = shard_checksum_pool_default_helpers();
	assert_in_range(fallback, 0, 3);
	setenv("SELENE_CHECKSUM_THREADS", "0", 1);
	assert_int_equal(shard_checksum_pool_default_helpers(), 0);
	setenv("SELENE_CHECKSUM_THREADS", "7", 1);
	assert_int_equal(shard_checksum_pool_default_helpers(), 7);
	sel_log_set_level(SEL_LOG_ERROR);
	setenv("SELENE_CHECKSUM_THREADS", "7x", 1);
	assert_int_equal(shard_checksum_pool_default_helpers(), fallback);
	setenv("SELENE_CHECKSUM_THREADS", "99", 1);
	assert_int_equal(shard_checksum_pool_default_helpers(), fallback);
	sel_log_set_level(SEL_LOG_INFO);
	unsetenv("SELENE_CHECKSUM_THREADS");
}

/*
 * The restore pool's default: at least the stores' pool's, at most 7 (a
 * pass of 8 threads), none under four cores; SELENE_CHECKSUM_THREADS sets
 * both pools.
 */
static void test_checksum_pool_verifier_count(void **state)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t allowed;
	uint32_t n;

	(void)state;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) > 0 &&
	    CPU_COUNT(&allowed) < cores)
		cores = CPU_COUNT(&allowed);
	unsetenv("SELENE_CHECKSUM_THREADS");
	n = shard_checksum_pool_default_verifiers();
	assert_in_range(n, shard_checksum_pool_default_helpers(), 11);
	if (cores < 4)
		assert_int_equal(n, 0);
	else
		assert_int_equal(n, cores * 3 / 4 - 1 > 11 ? 11 : (uint32_t)(cores * 3 / 4 - 1));
	setenv("SELENE_CHECKSUM_THREADS", "5", 1);
	assert_int_equal(shard_checksum_pool_default_verifiers(), 5);
	unsetenv("SELENE_CHECKSUM_THREADS");
}

/* Both pools' rule by usable cores: none under four, a quarter (3 most), three quarters less one (11 most). */
static void test_checksum_pool_rule_by_cores(void **state)
{
	static const uint32_t cores[] = { 1, 3, 4, 8, 12, 16, 17, 64 };
	static const uint32_t stores[] = { 0, 0, 1, 2, 3, 3, 3, 3 };
	static const uint32_t restores[] = { 0, 0, 2, 5, 8, 11, 11, 11 };

	(void)state;
	for (uint32_t i = 0; i < sizeof(cores) / sizeof(cores[0]); i++) {
		assert_int_equal(shard_checksum_pool_helpers_for(cores[i], false), stores[i]);
		assert_int_equal(shard_checksum_pool_helpers_for(cores[i], true), restores[i]);
	}
}

/*
 * Both pools count the cores this process may run on: bound to 4 of 8 or
 * more, the stores' pool takes 1 helper and the restore pool 1, whatever
 * the machine has online. Skipped under 8 usable cores, where the online
 * count and the affinity give the same figures.
 */
static void test_checksum_pool_follows_affinity(void **state)
{
	cpu_set_t before, four;
	uint32_t taken = 0;

	(void)state;
	unsetenv("SELENE_CHECKSUM_THREADS");
	assert_int_equal(sched_getaffinity(0, sizeof(before), &before), 0);
	assert_int_equal(shard_checksum_pool_default_helpers(),
			 shard_checksum_pool_helpers_for(shard_checksum_pool_cores(), false));
	assert_int_equal(shard_checksum_pool_default_verifiers(),
			 shard_checksum_pool_helpers_for(shard_checksum_pool_cores(), true));
	if (CPU_COUNT(&before) < 8) {
		print_message("skipped: %d usable cores, under 8: binding to 4 changes no figure\n",
			      CPU_COUNT(&before));
		skip();
	}
	CPU_ZERO(&four);
	for (int c = 0; c < CPU_SETSIZE && taken < 4; c++)
		if (CPU_ISSET(c, &before)) {
			CPU_SET(c, &four);
			taken++;
		}
	assert_int_equal(sched_setaffinity(0, sizeof(four), &four), 0);
	assert_int_equal(shard_checksum_pool_cores(), 4);
	taken = shard_checksum_pool_default_helpers() * 10 + shard_checksum_pool_default_verifiers();
	assert_int_equal(sched_setaffinity(0, sizeof(before), &before), 0);
	assert_int_equal(taken, 11);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_checksum_pool_every_unit_once),
		cmocka_unit_test(test_checksum_pool_batch_runs_without_wait),
		cmocka_unit_test(test_checksum_pool_batches_queued_together),
		cmocka_unit_test(test_checksum_pool_help_and_told),
		cmocka_unit_test(test_checksum_pool_helper_count),
		cmocka_unit_test(test_checksum_pool_verifier_count),
		cmocka_unit_test(test_checksum_pool_rule_by_cores),
		cmocka_unit_test(test_checksum_pool_follows_affinity),
		cmocka_unit_test(test_checksum_pool_priority),
	};

	return cmocka_run_group_tests_name("checksum_pool", tests, NULL, NULL);
}
