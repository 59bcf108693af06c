/*
 * A randomized stress of the shard engine (shard/engine.h) against a model
 * of what each record may hold, on a device whose copies run only when it
 * is synchronized (as a GPU stream's do). Each seed opens one engine with a
 * random window size, stores at once, checksum threads and disk path, then
 * runs batches of random stores, fetches, truncates and unlinks, each batch
 * with up to two injected faults: a failed synchronization, a failed device
 * copy, a disk or record failpoint (EIO or ENOSPC), a copy call held at a
 * gate while later jobs are submitted, or the engine closed with its jobs in
 * flight and opened again. After each batch it checks that every job
 * completed exactly once, every failure has a reason, no temporary file is
 * left, a fetch that succeeded restored bytes some store of that key wrote,
 * every record restores byte for byte as the model allows, and a clean store
 * and fetch still work.
 *
 * It is not a benchmark and asserts no timing. By default it runs a few
 * seeds (seconds); SELENE_STRESS=FIRST:COUNT:BATCHES runs more, and a
 * failure names the seed and batch that reproduce it.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/engine.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STRESS_UNIT_BYTES 4096u
#define STRESS_PLANES_MAX 130u     /* a wide geometry: a window spans device calls */
#define STRESS_DEVICE_PAGES 256u
#define STRESS_SOURCE_PAGES 128u   /* stores copy from here; fetches land above */
#define STRESS_FETCH_PAGES 32u     /* device pages a fetch's destination spans */
#define STRESS_FETCHES_MAX 4u      /* fetches in one batch */
#define STRESS_KEYS 12u            /* keys the batches use, and one spare */
#define STRESS_JOBS_MAX 24u        /* jobs in one batch */
#define STRESS_VERSIONS_MAX 8u     /* contents a key may hold after faults */
#define STRESS_STORE_SLOTS 4u      /* row slots stores read; fetches write 4.. */
#define STRESS_VERIFY_SLOT 7u      /* the row slot of the model's clean fetches */

/* The deferred test device (testutil.h) and its jobs' completions. */
struct stress_device {
	struct tu_deferred_device dev;
	/* Completions of the batch's jobs, job id - first_job_id. */
	uint64_t first_job_id;
	uint32_t completions;
	uint32_t completed[STRESS_JOBS_MAX + 8];
	int result[STRESS_JOBS_MAX + 8];
	char why[STRESS_JOBS_MAX + 8][200];
	uint32_t queued_at_completion[STRESS_JOBS_MAX + 8];
	uint32_t stray_completions;
};

enum stress_content { STRESS_ABSENT, STRESS_TRUNCATED, STRESS_STORED };

/* What a record may hold: nothing, a page-only record, or these bytes. */
struct stress_version {
	enum stress_content content;
	uint8_t *pages; /* tail_pages page records, plane by plane */
	uint8_t *row;   /* one unit */
};

struct stress_key {
	struct rec_key key;
	uint32_t tail_pages;
	struct stress_version versions[STRESS_VERSIONS_MAX];
	uint32_t version_count;
};

enum stress_job_kind { STRESS_STORE, STRESS_FETCH, STRESS_TRUNCATE, STRESS_UNLINK };

struct stress_job {
	enum stress_job_kind kind;
	uint32_t key;
	uint32_t skip_pages, destination, slot;
	uint32_t page_ids[STRESS_FETCH_PAGES];
	struct rec_header header;
	struct stress_version stored;           /* a store: what it writes */
	struct shard_chain_record chain;        /* a fetch: its record */
	struct stress_version acceptable[STRESS_VERSIONS_MAX]; /* a fetch: borrowed */
	uint32_t acceptable_count;
};

/* One seed's engine, its model, and what identifies a failure. */
struct stress_run {
	uint64_t seed;
	uint64_t random_state;
	uint32_t batch;
	char batch_text[2048];
	uint32_t plane_count;
	struct stress_device device;
	struct rec_geometry geometry;
	struct rec_identity namespace_id;
	struct shard_planes planes;
	uint8_t *plane_memory[STRESS_PLANES_MAX];
	uint8_t *row_memory;
	struct rec_dir *dir;
	struct shard_engine_options options;
	struct shard_engine *engine;
	struct stress_key keys[STRESS_KEYS + 1];
	uint64_t next_job_id;
	uint64_t jobs_run, faults_injected, jobs_failed, reopens;
};

/* The run a SIGALRM names: a hang is a failure too. */
static struct stress_run *stress_current;

static void stress_on_alarm(int signal_number)
{
	char text[2400];
	int n;

	(void)signal_number;
	n = snprintf(text, sizeof(text), "engine stress: seed %" PRIu64 " batch %u hung: %s\n",
		     stress_current->seed, stress_current->batch, stress_current->batch_text);
	if (write(2, text, (size_t)n) < 0)
		_exit(1);
	_exit(1);
}

#define STRESS_FAIL(run, ...)                                                        \
	fail_msg("seed %" PRIu64 " batch %u: %s; %s", (run)->seed, (run)->batch,       \
		 stress_text(__VA_ARGS__), (run)->batch_text)

static const char *stress_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static const char *stress_text(const char *fmt, ...)
{
	static char text[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	return text;
}

/* splitmix64: the seed alone decides every choice. */
static uint32_t stress_random(struct stress_run *run, uint32_t bound)
{
	uint64_t z = (run->random_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return bound ? (uint32_t)(z % bound) : 0;
}

/* Runs on the transfer thread: notes a job's completion. */
static void stress_hook(void *ctx, const struct shard_completion *c)
{
	struct stress_device *d = ctx;
	uint64_t i = c->job_id - d->first_job_id;

	if (c->job_id < d->first_job_id || i >= SEL_ARRAY_SIZE(d->completed)) {
		d->stray_completions++;
	} else {
		d->completed[i]++;
		d->result[i] = c->result;
		snprintf(d->why[i], sizeof(d->why[i]), "%s", c->why);
		d->queued_at_completion[i] = d->dev.queued_count;
	}
	__atomic_add_fetch(&d->completions, 1, __ATOMIC_RELEASE);
}

static uint64_t stress_page_bytes(const struct stress_run *run)
{
	return (uint64_t)run->plane_count * STRESS_UNIT_BYTES;
}

/* The bytes a store of page_ids and row slot writes. */
static struct stress_version stress_version_of(const struct stress_run *run, uint32_t tail_pages,
					       const uint32_t *page_ids, uint32_t slot)
{
	struct stress_version v = { .content = STRESS_STORED };

	v.pages = tu_alloc((size_t)(tail_pages * stress_page_bytes(run)) + 1);
	v.row = tu_alloc(STRESS_UNIT_BYTES);
	for (uint32_t i = 0; i < tail_pages; i++)
		for (uint32_t p = 0; p < run->plane_count; p++)
			memcpy(v.pages + (size_t)(i * stress_page_bytes(run)) + p * STRESS_UNIT_BYTES,
			       run->plane_memory[p] + (size_t)STRESS_UNIT_BYTES * page_ids[i],
			       STRESS_UNIT_BYTES);
	memcpy(v.row, run->row_memory + (size_t)STRESS_UNIT_BYTES * slot, STRESS_UNIT_BYTES);
	return v;
}

static struct stress_version stress_version_copy(const struct stress_run *run,
						 const struct stress_version *from,
						 uint32_t tail_pages)
{
	struct stress_version v = *from;

	if (from->content == STRESS_STORED) {
		size_t bytes = (size_t)(tail_pages * stress_page_bytes(run));

		v.pages = tu_alloc(bytes + 1);
		memcpy(v.pages, from->pages, bytes);
		v.row = tu_alloc(STRESS_UNIT_BYTES);
		memcpy(v.row, from->row, STRESS_UNIT_BYTES);
	}
	return v;
}

static void stress_version_free(struct stress_version *v)
{
	free(v->pages);
	free(v->row);
	*v = (struct stress_version){ .content = STRESS_ABSENT };
}

/* The key now holds exactly v (taken over). */
static void stress_key_set(struct stress_key *k, struct stress_version v)
{
	for (uint32_t i = 0; i < k->version_count; i++)
		stress_version_free(&k->versions[i]);
	k->versions[0] = v;
	k->version_count = 1;
}

/* The key may also hold v (taken over): a job whose outcome is unknown. */
static void stress_key_allow(struct stress_run *run, struct stress_key *k,
			     struct stress_version v)
{
	if (k->version_count == STRESS_VERSIONS_MAX)
		STRESS_FAIL(run, "the model allows too many versions of one key");
	k->versions[k->version_count++] = v;
}

static bool stress_key_allows(const struct stress_key *k, enum stress_content content)
{
	for (uint32_t i = 0; i < k->version_count; i++)
		if (k->versions[i].content == content)
			return true;
	return false;
}

/* Whether the fetch destination holds v's pages from skip_pages on and its row. */
static bool stress_restored(const struct stress_run *run, const struct stress_version *v,
			    uint32_t tail_pages, uint32_t skip_pages, uint32_t destination,
			    uint32_t slot)
{
	if (v->content != STRESS_STORED)
		return false;
	for (uint32_t i = skip_pages; i < tail_pages; i++)
		for (uint32_t p = 0; p < run->plane_count; p++)
			if (memcmp(run->plane_memory[p] +
					   (size_t)STRESS_UNIT_BYTES * (destination + i - skip_pages),
				   v->pages + (size_t)(i * stress_page_bytes(run)) +
					   p * STRESS_UNIT_BYTES,
				   STRESS_UNIT_BYTES) != 0)
				return false;
	return memcmp(run->row_memory + (size_t)STRESS_UNIT_BYTES * slot, v->row,
		      STRESS_UNIT_BYTES) == 0;
}

static void stress_poison(struct stress_run *run, uint32_t destination, uint32_t slot)
{
	for (uint32_t p = 0; p < run->plane_count; p++)
		memset(run->plane_memory[p] + (size_t)STRESS_UNIT_BYTES * destination, 0xee,
		       (size_t)STRESS_UNIT_BYTES * STRESS_FETCH_PAGES);
	memset(run->row_memory + (size_t)STRESS_UNIT_BYTES * slot, 0xee, STRESS_UNIT_BYTES);
}

/* Starts a batch of job_count jobs from the next job id. */
static uint32_t stress_batch_begin(struct stress_run *run)
{
	run->device.first_job_id = run->next_job_id;
	memset(run->device.completed, 0, sizeof(run->device.completed));
	return __atomic_load_n(&run->device.completions, __ATOMIC_ACQUIRE);
}

static void stress_wait(struct stress_run *run, uint32_t before, uint32_t count)
{
	alarm(120);
	while (__atomic_load_n(&run->device.completions, __ATOMIC_ACQUIRE) < before + count)
		usleep(100);
	alarm(0);
}

/* A fetch of all of k's record alone, no faults armed: its result. */
static int stress_fetch_alone(struct stress_run *run, struct stress_key *k)
{
	struct shard_chain_record chain = { k->key, 0, k->tail_pages };
	uint32_t page_ids[STRESS_FETCH_PAGES];
	struct shard_fetch_job job = { .chain = &chain, .chain_count = 1, .page_ids = page_ids,
				       .state_slot = STRESS_VERIFY_SLOT };
	uint32_t before = stress_batch_begin(run);

	for (uint32_t i = 0; i < k->tail_pages; i++)
		page_ids[i] = STRESS_SOURCE_PAGES + i;
	stress_poison(run, STRESS_SOURCE_PAGES, STRESS_VERIFY_SLOT);
	if (shard_engine_fetch(run->engine, run->next_job_id++, &job) != 0)
		STRESS_FAIL(run, "a clean fetch was refused");
	stress_wait(run, before, 1);
	if (run->device.completed[0] != 1 || run->device.queued_at_completion[0])
		STRESS_FAIL(run, "a clean fetch completed %u times, %u copies still queued",
			    run->device.completed[0], run->device.queued_at_completion[0]);
	return run->device.result[0];
}

/* Restores every key alone; the model narrows to what each holds. */
static void stress_check_records(struct stress_run *run)
{
	for (uint32_t i = 0; i < STRESS_KEYS; i++) {
		struct stress_key *k = &run->keys[i];
		char *path = tu_record_path(run->dir, &k->key);
		bool exists = access(path, F_OK) == 0;
		uint32_t v;
		int ret;

		free(path);
		if (!exists && !stress_key_allows(k, STRESS_ABSENT))
			STRESS_FAIL(run, "key %u: its record is gone", i);
		if (exists && k->version_count == 1 && k->versions[0].content == STRESS_ABSENT)
			STRESS_FAIL(run, "key %u: a record the model says is absent", i);
		if (!exists) {
			stress_key_set(k, (struct stress_version){ .content = STRESS_ABSENT });
			continue;
		}
		ret = stress_fetch_alone(run, k);
		if (ret == SEL_EMISMATCH && stress_key_allows(k, STRESS_TRUNCATED)) {
			stress_key_set(k, (struct stress_version){ .content = STRESS_TRUNCATED });
			continue;
		}
		if (ret != 0)
			STRESS_FAIL(run, "key %u: a clean restore failed: %s", i, run->device.why[0]);
		for (v = 0; v < k->version_count; v++)
			if (stress_restored(run, &k->versions[v], k->tail_pages, 0,
					    STRESS_SOURCE_PAGES, STRESS_VERIFY_SLOT))
				break;
		if (v == k->version_count)
			STRESS_FAIL(run, "key %u: restored bytes no store of it wrote", i);
		stress_key_set(k, stress_version_copy(run, &k->versions[v], k->tail_pages));
	}
}

/* Fills the batch's jobs; returns how many. */
static uint32_t stress_plan(struct stress_run *run, struct stress_job *jobs)
{
	uint32_t count = 1 + stress_random(run, STRESS_JOBS_MAX - 4), fetches = 0, stores = 0;
	bool removed[STRESS_KEYS] = { false }, stored[STRESS_KEYS] = { false };
	uint32_t n = 0;

	for (uint32_t tries = 0; n < count && tries < 4 * count; tries++) {
		struct stress_job *job = &jobs[n];
		uint32_t choice = stress_random(run, 100), key = stress_random(run, STRESS_KEYS);
		struct stress_key *k = &run->keys[key];

		*job = (struct stress_job){ .key = key };
		if (choice < 55) {
			/* A store of a key this batch truncates or unlinks would race it. */
			if (removed[key])
				continue;
			job->kind = STRESS_STORE;
			stored[key] = true;
			for (uint32_t i = 0; i < k->tail_pages; i++)
				job->page_ids[i] = stress_random(run, STRESS_SOURCE_PAGES);
			job->slot = stores++ % STRESS_STORE_SLOTS;
			job->stored = stress_version_of(run, k->tail_pages, job->page_ids, job->slot);
			if (rec_header_init(&job->header, &run->geometry, &run->namespace_id, &k->key,
					    NULL, &k->key.digest, 0, k->tail_pages, 1) != 0)
				STRESS_FAIL(run, "rec_header_init refused key %u", key);
		} else if (choice < 80) {
			if (fetches == STRESS_FETCHES_MAX || removed[key] || k->version_count != 1 ||
			    k->versions[0].content != STRESS_STORED)
				continue;
			job->kind = STRESS_FETCH;
			job->skip_pages = stress_random(run, k->tail_pages + 1);
			job->destination = STRESS_SOURCE_PAGES + STRESS_FETCH_PAGES * fetches;
			job->slot = STRESS_STORE_SLOTS + fetches++;
			for (uint32_t i = 0; i + job->skip_pages < k->tail_pages; i++)
				job->page_ids[i] = job->destination + i;
			job->chain = (struct shard_chain_record){ k->key, 0, k->tail_pages };
			stress_poison(run, job->destination, job->slot);
		} else {
			if (removed[key] || stored[key] || k->version_count != 1)
				continue;
			job->kind = choice < 90 ? STRESS_TRUNCATE : STRESS_UNLINK;
			removed[key] = true;
		}
		n++;
	}
	/* A fetch may restore what the key held or what any store of it here writes. */
	for (uint32_t j = 0; j < n; j++) {
		struct stress_job *job = &jobs[j];

		if (job->kind != STRESS_FETCH)
			continue;
		job->acceptable[job->acceptable_count++] = run->keys[job->key].versions[0];
		for (uint32_t i = 0; i < n && job->acceptable_count < STRESS_VERSIONS_MAX; i++)
			if (jobs[i].kind == STRESS_STORE && jobs[i].key == job->key)
				job->acceptable[job->acceptable_count++] = jobs[i].stored;
	}
	return n;
}

static const char *const stress_disk_failpoints[] = {
	"disk.write", "disk.read", "disk.fallocate", "disk.fdatasync", "disk.rename",
	"disk.open", "record.before_write", "record.after_write", "record.before_create",
	"record.after_create", "record.before_header", "record.after_header",
	"record.before_fdatasync", "record.before_rename", "disk.truncate", "disk.unlink",
	"record.before_truncate", "record.before_unlink", "disk.fsync_dir",
	"record.after_rename", "disk.submit", "disk.wait",
};

/* Failpoints that can fail a store after its rename: the new record may stay. */
static bool stress_after_rename(const char *name)
{
	return strcmp(name, "disk.fsync_dir") == 0 || strcmp(name, "record.after_rename") == 0 ||
	       strcmp(name, "disk.submit") == 0 || strcmp(name, "disk.wait") == 0;
}

/* The batch's faults. */
struct stress_faults {
	char failpoints[512];
	bool synchronize;   /* a synchronization fails */
	bool after_rename;  /* a failed store may have left its record */
	uint32_t gate;      /* the copy call, from now, held at the gate; 0: none */
};

static void stress_arm(struct stress_run *run, struct stress_faults *f)
{
	uint32_t count = stress_random(run, 3);
	size_t n = 0;

	*f = (struct stress_faults){ .failpoints = "" };
	for (uint32_t i = 0; i < count; i++) {
		uint32_t which = stress_random(run, 4), skip, times = 1 + stress_random(run, 2);
		const char *name = "device.copy", *error = "EIO";

		run->faults_injected++;
		if (which == 0) {
			f->synchronize = true;
			run->device.dev.fail_synchronize_at = run->device.dev.synchronize_calls + 1 +
							  stress_random(run, 40);
			continue;
		}
		if (which == 3) {
			f->gate = 1 + stress_random(run, 20);
			continue;
		}
		skip = stress_random(run, which == 1 ? 40 : 12);
		if (which == 2) {
			name = stress_disk_failpoints[stress_random(
				run, SEL_ARRAY_SIZE(stress_disk_failpoints))];
			error = stress_random(run, 4) ? "EIO" : "ENOSPC";
		}
		if (strstr(f->failpoints, name)) {
			run->faults_injected--;
			continue;
		}
		f->after_rename |= stress_after_rename(name);
		if (skip)
			n += (size_t)snprintf(f->failpoints + n, sizeof(f->failpoints) - n,
					      "%s%s=%u*off->%u*return(%s)", n ? ";" : "", name,
					      skip, times, error);
		else
			n += (size_t)snprintf(f->failpoints + n, sizeof(f->failpoints) - n,
					      "%s%s=%u*return(%s)", n ? ";" : "", name, times,
					      error);
	}
	if (sel_failpoints_configure(f->failpoints[0] ? f->failpoints : NULL) != 0)
		STRESS_FAIL(run, "failpoints '%s' refused", f->failpoints);
}

/* Says which jobs and faults the batch runs, for a failure's message. */
static void stress_describe(struct stress_run *run, const struct stress_job *jobs,
			    uint32_t count, const struct stress_faults *f)
{
	int n = snprintf(run->batch_text, sizeof(run->batch_text),
			 "failpoints '%s', a failed synchronization %s, gate %u; jobs:",
			 f->failpoints, f->synchronize ? "armed" : "not armed", f->gate);

	for (uint32_t j = 0; j < count && n < (int)sizeof(run->batch_text) - 40; j++)
		n += snprintf(run->batch_text + n, sizeof(run->batch_text) - (size_t)n,
			      " %c%u/%u", "SFTU"[jobs[j].kind], jobs[j].key,
			      run->keys[jobs[j].key].tail_pages);
}

static int stress_submit(struct stress_run *run, struct stress_job *job, uint64_t id)
{
	struct stress_key *k = &run->keys[job->key];

	switch (job->kind) {
	case STRESS_STORE: {
		struct shard_store_job store = { .header = &job->header, .page_ids = job->page_ids,
						 .state_slot = job->slot };

		return shard_engine_store(run->engine, id, &store);
	}
	case STRESS_FETCH: {
		struct shard_fetch_job fetch = { .chain = &job->chain, .chain_count = 1,
						 .skip_pages = job->skip_pages,
						 .page_ids = job->page_ids, .state_slot = job->slot };

		return shard_engine_fetch(run->engine, id, &fetch);
	}
	case STRESS_TRUNCATE:
		return shard_engine_truncate(run->engine, id, &k->key);
	case STRESS_UNLINK:
		return shard_engine_unlink(run->engine, id, &k->key);
	}
	return -EINVAL;
}

/*
 * Submits the jobs (with random gaps; with a gate, the rest once a copy
 * call waits there), then sometimes closes the engine with them in flight
 * and opens it again.
 */
static void stress_run_jobs(struct stress_run *run, struct stress_job *jobs, uint32_t count,
			    const struct stress_faults *f)
{
	uint32_t before = stress_batch_begin(run);
	uint32_t split = f->gate ? stress_random(run, count + 1) : count;
	uint32_t gap_us = stress_random(run, 2) ? 0 : stress_random(run, 3) ? 300 : 3000;

	if (f->gate)
		__atomic_store_n(&run->device.dev.gate_at, run->device.dev.copy_calls + f->gate,
				 __ATOMIC_RELEASE);
	for (uint32_t j = 0; j < count; j++) {
		if (j == split) {
			alarm(120);
			while (!__atomic_load_n(&run->device.dev.gate_blocked, __ATOMIC_ACQUIRE) &&
			       __atomic_load_n(&run->device.completions, __ATOMIC_ACQUIRE) <
				       before + split)
				usleep(100);
			alarm(0);
		}
		if (gap_us && j)
			usleep(stress_random(run, gap_us));
		if (stress_submit(run, &jobs[j], run->next_job_id + j) != 0)
			STRESS_FAIL(run, "job %u was refused", j);
	}
	if (f->gate) {
		usleep(stress_random(run, 3) * 1000);
		__atomic_store_n(&run->device.dev.gate_at, 0, __ATOMIC_RELEASE);
	}
	if (stress_random(run, 8) == 0) {
		char err[256];

		alarm(120);
		shard_engine_close(run->engine);
		alarm(0);
		if (__atomic_load_n(&run->device.completions, __ATOMIC_ACQUIRE) != before + count)
			STRESS_FAIL(run, "the close returned before every job completed");
		if (shard_engine_open(&run->options, &run->engine, err, sizeof(err)) != 0)
			STRESS_FAIL(run, "the engine did not open again: %s", err);
		shard_engine_set_completion_hook(run->engine, stress_hook, &run->device);
		run->reopens++;
	}
	stress_wait(run, before, count);
	sel_failpoints_configure(NULL);
	run->device.dev.fail_synchronize_at = 0;
	run->jobs_run += count;
}

/* Every job completed once, with a reason if it failed; fetches restored right. */
static void stress_check_jobs(struct stress_run *run, const struct stress_job *jobs,
			      uint32_t count, const struct stress_faults *f)
{
	const struct stress_device *d = &run->device;
	bool faults = f->failpoints[0] || f->synchronize;

	for (uint32_t j = 0; j < SEL_ARRAY_SIZE(d->completed); j++)
		if (d->completed[j] != (j < count))
			STRESS_FAIL(run, "job %u completed %u times", j, d->completed[j]);
	if (d->stray_completions)
		STRESS_FAIL(run, "a completion of a job never submitted");
	if (tu_count_suffix(rec_dir_path(run->dir), ".tmp") != 0)
		STRESS_FAIL(run, "a temporary file is left");
	for (uint32_t j = 0; j < count; j++) {
		const struct stress_job *job = &jobs[j];
		bool absent_ok = (job->kind == STRESS_TRUNCATE || job->kind == STRESS_UNLINK) &&
				 d->result[j] == -ENOENT;
		uint32_t v;

		/*
		 * Another store's window copy may be queued when a store
		 * completes (the store pipeline); never one of its own.
		 */
		if (d->queued_at_completion[j] &&
		    (job->kind != STRESS_STORE || run->options.stores_max == 1))
			STRESS_FAIL(run, "job %u completed with %u copies still queued", j,
				    d->queued_at_completion[j]);
		if (d->result[j] && !d->why[j][0])
			STRESS_FAIL(run, "job %u failed (%d) without a reason", j, d->result[j]);
		if (d->result[j] && !absent_ok && !faults)
			STRESS_FAIL(run, "job %u failed without a fault: %s", j, d->why[j]);
		if (d->result[j])
			run->jobs_failed++;
		if (job->kind != STRESS_FETCH || d->result[j])
			continue;
		for (v = 0; v < job->acceptable_count; v++)
			if (stress_restored(run, &job->acceptable[v],
					    run->keys[job->key].tail_pages, job->skip_pages,
					    job->destination, job->slot))
				break;
		if (v == job->acceptable_count)
			STRESS_FAIL(run, "fetch %u of key %u succeeded with wrong bytes", j, job->key);
	}
}

/* What a removal's outcome leaves: result 0 it is, a failure it may be. */
static void stress_note_removal(struct stress_run *run, const struct stress_job *job,
				int result, bool faults, enum stress_content removed)
{
	struct stress_key *k = &run->keys[job->key];
	enum stress_content before = k->versions[0].content;

	if (before == STRESS_ABSENT) {
		if (result != -ENOENT && !(result && faults))
			STRESS_FAIL(run, "removing absent key %u gave %d", job->key, result);
		return;
	}
	if (before == STRESS_TRUNCATED && removed == STRESS_TRUNCATED)
		return; /* truncating a page-only record: either outcome */
	if (result == 0)
		stress_key_set(k, (struct stress_version){ .content = removed });
	else if (faults)
		stress_key_allow(run, k, (struct stress_version){ .content = removed });
	else
		STRESS_FAIL(run, "removing key %u failed without a fault", job->key);
}

/* Updates the model in submission order; the stores' bytes are taken over. */
static void stress_note_outcomes(struct stress_run *run, struct stress_job *jobs,
				 uint32_t count, const struct stress_faults *f)
{
	bool faults = f->failpoints[0] || f->synchronize;

	for (uint32_t j = 0; j < count; j++) {
		struct stress_job *job = &jobs[j];
		int result = run->device.result[j];

		if (job->kind == STRESS_STORE) {
			if (result == 0)
				stress_key_set(&run->keys[job->key], job->stored);
			else if (f->after_rename)
				stress_key_allow(run, &run->keys[job->key], job->stored);
			else
				stress_version_free(&job->stored);
			job->stored = (struct stress_version){ .content = STRESS_ABSENT };
		} else if (job->kind == STRESS_TRUNCATE) {
			stress_note_removal(run, job, result, faults, STRESS_TRUNCATED);
		} else if (job->kind == STRESS_UNLINK) {
			stress_note_removal(run, job, result, faults, STRESS_ABSENT);
		}
	}
}

/* After the faults: a store and a fetch of the spare key both work. */
static void stress_check_clean_store(struct stress_run *run)
{
	struct stress_key *k = &run->keys[STRESS_KEYS];
	struct stress_job job = { .key = STRESS_KEYS };
	struct shard_store_job store = { .header = &job.header, .page_ids = job.page_ids };
	uint32_t before;

	for (uint32_t i = 0; i < k->tail_pages; i++)
		job.page_ids[i] = stress_random(run, STRESS_SOURCE_PAGES);
	if (rec_header_init(&job.header, &run->geometry, &run->namespace_id, &k->key, NULL,
			    &k->key.digest, 0, k->tail_pages, 1) != 0)
		STRESS_FAIL(run, "rec_header_init refused the spare key");
	job.stored = stress_version_of(run, k->tail_pages, job.page_ids, 0);
	before = stress_batch_begin(run);
	if (shard_engine_store(run->engine, run->next_job_id++, &store) != 0)
		STRESS_FAIL(run, "a clean store was refused");
	stress_wait(run, before, 1);
	if (run->device.result[0] != 0)
		STRESS_FAIL(run, "a clean store after the faults failed: %s", run->device.why[0]);
	if (stress_fetch_alone(run, k) != 0 ||
	    !stress_restored(run, &job.stored, k->tail_pages, 0, STRESS_SOURCE_PAGES,
			     STRESS_VERIFY_SLOT))
		STRESS_FAIL(run, "a clean fetch after the faults failed: %s", run->device.why[0]);
	stress_version_free(&job.stored);
	run->jobs_run += 2;
}

static void stress_batch(struct stress_run *run)
{
	struct stress_job *jobs = calloc(STRESS_JOBS_MAX, sizeof(*jobs));
	struct stress_faults faults;
	uint32_t count;

	assert_non_null(jobs);
	/* Fresh bytes to store, so a stale restore cannot pass for a new one. */
	for (uint32_t p = 0; p < run->plane_count; p++)
		tu_fill(run->plane_memory[p], (size_t)STRESS_UNIT_BYTES * STRESS_SOURCE_PAGES,
			run->seed * 1000003u + run->batch * 131u + p);
	tu_fill(run->row_memory, (size_t)STRESS_UNIT_BYTES * STRESS_STORE_SLOTS,
		run->seed * 7u + run->batch);
	count = stress_plan(run, jobs);
	stress_arm(run, &faults);
	stress_describe(run, jobs, count, &faults);
	stress_run_jobs(run, jobs, count, &faults);
	stress_check_jobs(run, jobs, count, &faults);
	stress_note_outcomes(run, jobs, count, &faults);
	stress_check_records(run);
	stress_check_clean_store(run);
	run->next_job_id += STRESS_JOBS_MAX + 8;
	free(jobs);
}

/* Opens the seed's engine on a fresh directory; run->keys start absent. */
static void stress_open(struct stress_run *run, char **base)
{
	bool in_memory = stress_random(run, 2) && access("/dev/shm", W_OK) == 0;
	char err[256];

	run->plane_count = stress_random(run, 4) == 0 ? STRESS_PLANES_MAX : 4;
	tu_deferred_device_init(&run->device.dev);
	if (in_memory)
		setenv("TMPDIR", "/dev/shm", 1);
	*base = tu_make_temp_dir("engine-stress");
	unsetenv("TMPDIR");
	tu_geometry(&run->geometry, 64, run->plane_count, STRESS_UNIT_BYTES, STRESS_UNIT_BYTES,
		    0, 1);
	run->geometry.page_count = STRESS_DEVICE_PAGES;
	tu_identities(NULL, &run->namespace_id);
	for (uint32_t p = 0; p < run->plane_count; p++) {
		run->plane_memory[p] = tu_alloc((size_t)STRESS_UNIT_BYTES * STRESS_DEVICE_PAGES);
		run->planes.page_base[p] = (uintptr_t)run->plane_memory[p];
	}
	run->row_memory = tu_alloc((size_t)STRESS_UNIT_BYTES * run->geometry.row_count);
	run->planes.row_base = (uintptr_t)run->row_memory;
	run->dir = tu_dir_open(*base, &run->geometry, stress_random(run, 2));
	if (stress_random(run, 2)) {
		struct rec_scan scan;

		/* A scanned directory: commits and removals also update its catalogue. */
		assert_int_equal(rec_dir_scan(run->dir, &scan), 0);
		rec_scan_free(&scan);
	}
	run->options = (struct shard_engine_options){
		.geometry = &run->geometry, .dir = run->dir, .device = &run->device.dev.base,
		.planes = &run->planes, .window_pages = 1 + stress_random(run, 4),
		.jobs_max = 64, .no_uring = stress_random(run, 4) == 0,
		.io_workers = stress_random(run, 3) == 0 ? SHARD_IO_WORKERS_NONE :
			      stress_random(run, 2) ? 3 : 0,
		.stores_max = 1 + stress_random(run, SHARD_STORES_MAX),
		.checksum_threads = 1 + stress_random(run, 3),
	};
	snprintf(run->batch_text, sizeof(run->batch_text),
		 "opening: %u planes, windows of %u pages, %u stores at once, %s, %s",
		 run->plane_count, run->options.window_pages, run->options.stores_max,
		 run->options.no_uring ? "pread/pwrite" : "io_uring",
		 in_memory ? "/dev/shm" : "TMPDIR");
	if (shard_engine_open(&run->options, &run->engine, err, sizeof(err)) != 0)
		STRESS_FAIL(run, "the engine did not open: %s", err);
	shard_engine_set_completion_hook(run->engine, stress_hook, &run->device);
	for (uint32_t i = 0; i <= STRESS_KEYS; i++) {
		struct stress_key *k = &run->keys[i];
		uint32_t tail_pages = stress_random(run, run->plane_count > 4 ? 7 : 21);

		*k = (struct stress_key){ .tail_pages = tail_pages, .version_count = 1 };
		k->key.consumed = 64ull * tail_pages + 1 + stress_random(run, 63);
		memset(k->key.digest.bytes, (int)(run->seed * 13 + i), sizeof(k->key.digest.bytes));
		k->key.digest.bytes[0] = (uint8_t)i;
	}
}

static void stress_close(struct stress_run *run, char *base)
{
	shard_engine_set_completion_hook(run->engine, NULL, NULL);
	shard_engine_close(run->engine);
	rec_dir_close(run->dir);
	for (uint32_t p = 0; p < run->plane_count; p++)
		free(run->plane_memory[p]);
	free(run->row_memory);
	for (uint32_t i = 0; i <= STRESS_KEYS; i++)
		for (uint32_t v = 0; v < run->keys[i].version_count; v++)
			stress_version_free(&run->keys[i].versions[v]);
	tu_remove_tree(base); /* frees base */
}

static void stress_seed(struct stress_run *run, uint64_t seed, uint32_t batches)
{
	char *base;

	run->seed = seed;
	run->random_state = seed * 7919 + 1;
	run->next_job_id = 1;
	run->batch = 0;
	stress_open(run, &base);
	for (run->batch = 0; run->batch < batches; run->batch++)
		stress_batch(run);
	stress_close(run, base);
}

/*
 * Random stores, fetches, truncates and unlinks with random faults keep
 * every completion, byte and file as the model allows (see the top of this
 * file); SELENE_STRESS=FIRST:COUNT:BATCHES sets the seeds.
 */
static void test_engine_stress_random_faults(void **state)
{
	struct stress_run *run = calloc(1, sizeof(*run));
	uint64_t first = 1, count = 6;
	uint32_t batches = 10;
	const char *knob = getenv("SELENE_STRESS");

	(void)state;
	assert_non_null(run);
	if (knob && sscanf(knob, "%" SCNu64 ":%" SCNu64 ":%u", &first, &count, &batches) != 3)
		fail_msg("SELENE_STRESS=%s: expected FIRST:COUNT:BATCHES", knob);
	stress_current = run;
	signal(SIGALRM, stress_on_alarm);
	for (uint64_t seed = first; seed < first + count; seed++) {
		uint64_t jobs = run->jobs_run, faults = run->faults_injected;
		uint64_t failed = run->jobs_failed, reopens = run->reopens;

		memset(run, 0, sizeof(*run));
		run->jobs_run = jobs;
		run->faults_injected = faults;
		run->jobs_failed = failed;
		run->reopens = reopens;
		stress_seed(run, seed, batches);
	}
	print_message("engine stress: seeds %" PRIu64 "..%" PRIu64 ", %u batches each: %" PRIu64
		      " jobs, %" PRIu64 " faults injected, %" PRIu64 " jobs failed, %" PRIu64
		      " closes with jobs in flight\n", first, first + count - 1, batches,
		      run->jobs_run, run->faults_injected, run->jobs_failed, run->reopens);
	signal(SIGALRM, SIG_DFL);
	free(run);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_engine_stress_random_faults),
	};

	sel_log_set_level(SEL_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
