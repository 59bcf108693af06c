/*
 * The disk store's policy (coordinator/store.h) with a stub in place of the
 * shard engine: every job is recorded and completed by the test, in any
 * order, with success or failure. Covers outcomes, dedupe, row drop, root
 * records, eviction and compaction under the limit, waiters sharing a
 * fetch, cancellation, a full disk, stale hits, and that pins, jobs and
 * bytes balance on every path.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/log.h"
#include "coordinator/store.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STUB_JOBS_MAX 4096

struct stub_job {
	enum coord_job_kind kind;
	uint64_t id;
	struct rec_header header;    /* store */
	uint32_t page_ids[64];
	uint32_t page_count;
	uint8_t warm;                /* store: enum shard_store_warm */
	uint32_t chain_count;        /* fetch */
	uint32_t skip_pages;
	bool read_through;
	struct rec_key key;          /* truncate, unlink, warm drop */
	bool done;
};

struct stub {
	struct stub_job jobs[STUB_JOBS_MAX];
	uint32_t job_count;
	struct shard_completion done[STUB_JOBS_MAX];
	uint32_t done_count;
	bool refuse;                 /* the engine's queue is full */
	bool refuse_unlinks;         /* for unlinks only */
	bool refuse_warm_drops;      /* for warm drops only */
	int refuse_error;            /* what refusing returns (SEL_EQUEUEFULL if 0) */
};

static struct stub_job *stub_add(struct stub *st, enum coord_job_kind kind, uint64_t id)
{
	struct stub_job *j;

	SEL_ASSERT(st->job_count < STUB_JOBS_MAX);
	j = &st->jobs[st->job_count++];
	memset(j, 0, sizeof(*j));
	j->kind = kind;
	j->id = id;
	return j;
}

static int stub_store(void *ctx, uint64_t id, const struct shard_store_job *job)
{
	struct stub *st = ctx;
	struct stub_job *j;

	if (st->refuse)
		return st->refuse_error ? st->refuse_error : SEL_EQUEUEFULL;
	j = stub_add(st, COORD_JOB_STORE, id);
	j->header = *job->header;
	j->warm = job->warm;
	j->page_count = job->header->tail_page_count;
	memcpy(j->page_ids, job->page_ids, j->page_count * sizeof(uint32_t));
	return 0;
}

static int stub_fetch(void *ctx, uint64_t id, const struct shard_fetch_job *job)
{
	struct stub *st = ctx;
	struct stub_job *j;

	if (st->refuse)
		return st->refuse_error ? st->refuse_error : SEL_EQUEUEFULL;
	j = stub_add(st, COORD_JOB_FETCH, id);
	j->chain_count = job->chain_count;
	j->skip_pages = job->skip_pages;
	j->read_through = job->read_through;
	return 0;
}

static int stub_truncate(void *ctx, uint64_t id, const struct rec_key *key)
{
	struct stub *st = ctx;

	if (st->refuse)
		return st->refuse_error ? st->refuse_error : SEL_EQUEUEFULL;
	stub_add(st, COORD_JOB_TRUNCATE, id)->key = *key;
	return 0;
}

static int stub_unlink(void *ctx, uint64_t id, const struct rec_key *key)
{
	struct stub *st = ctx;

	if (st->refuse || st->refuse_unlinks)
		return st->refuse_error ? st->refuse_error : SEL_EQUEUEFULL;
	stub_add(st, COORD_JOB_UNLINK, id)->key = *key;
	return 0;
}

static int stub_warm_drop(void *ctx, uint64_t id, const struct rec_key *key)
{
	struct stub *st = ctx;

	if (st->refuse || st->refuse_warm_drops)
		return st->refuse_error ? st->refuse_error : SEL_EQUEUEFULL;
	stub_add(st, COORD_JOB_WARM_DROP, id)->key = *key;
	return 0;
}

static int stub_noop(void *ctx, uint64_t id)
{
	struct stub *st = ctx;

	if (st->refuse)
		return st->refuse_error ? st->refuse_error : SEL_EQUEUEFULL;
	stub_add(st, COORD_JOB_NOOP, id);
	return 0;
}

static uint32_t stub_poll(void *ctx, struct shard_completion *out, uint32_t max)
{
	struct stub *st = ctx;
	uint32_t n = st->done_count < max ? st->done_count : max;

	memcpy(out, st->done, n * sizeof(*out));
	memmove(st->done, st->done + n, (st->done_count - n) * sizeof(*out));
	st->done_count -= n;
	return n;
}

/* Completes the i-th submitted job (in submission order). */
static void stub_complete(struct stub *st, uint32_t i, int result)
{
	struct stub_job *j = &st->jobs[i];

	SEL_ASSERT(i < st->job_count && !j->done);
	j->done = true;
	st->done[st->done_count++] = (struct shard_completion){
		.job_id = j->id, .result = result, .bytes = result ? 0 : 4096,
	};
	if (result)
		snprintf(st->done[st->done_count - 1].why, 200, "stub failure %d", result);
}

/* Completes job i with a checksum failure whose reason names key's file. */
static void stub_fail_naming(struct stub *st, uint32_t i, const struct rec_key *key)
{
	char name[REC_FILE_NAME_BYTES];

	stub_complete(st, i, SEL_ECHECKSUM);
	rec_file_name(name, key);
	snprintf(st->done[st->done_count - 1].why, 200, "rank 2: %s: page 5 fails its checksum",
		 name);
}

struct fixture {
	struct stub stub;
	struct coord_store store;
	struct rec_geometry g;
	struct rec_history h; /* one conversation of 2000 tokens */
	uint32_t ids[64];
	uint64_t record_bytes_per_page;
};

static int setup_with(void **state, uint64_t limit, uint32_t records_max)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct coord_jobs jobs = { .ctx = &f->stub, .store = stub_store, .fetch = stub_fetch,
				   .truncate = stub_truncate, .unlink = stub_unlink,
				   .noop = stub_noop, .warm_drop = stub_warm_drop,
				   .poll = stub_poll };
	struct rec_identity model;
	uint32_t tokens[2000];

	tu_geometry(&f->g, 64, 2, 4096, 4096, 0, 1);
	tu_identities(&model, NULL);
	assert_int_equal(coord_store_init(&f->store, &f->g, &model, REC_STATE_ORDINARY,
					  limit, records_max, &jobs), 0);
	tu_tokens(tokens, 2000, 77);
	assert_int_equal(rec_history_init(&f->h, &model, tokens, 2000), 0);
	for (uint32_t i = 0; i < 64; i++)
		f->ids[i] = 100 + i;
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

static int setup_limit(void **state, uint64_t limit)
{
	return setup_with(state, limit, 1000);
}

/* Room in the index for two records. */
static int setup_two_records(void **state)
{
	return setup_with(state, 1ull << 30, 2);
}

static int setup(void **state)
{
	return setup_limit(state, 1ull << 30);
}

/* Room for two records of 4 pages (4096 + 4096 + 4 * 8192 + 4096 bytes). */
static int setup_small(void **state)
{
	return setup_limit(state, 2 * 45056 + 10000);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sel_log_set_level(SEL_LOG_INFO);
	rec_history_free(&f->h);
	coord_store_destroy(&f->store);
	free(f);
	return 0;
}

/* A full disk's backoff has passed; its hold has not. */
static void backoff_passed(struct fixture *f)
{
	f->store.disk_full_ns = sel_monotonic_ns() - COORD_DISK_FULL_BACKOFF_NS - 1;
}

static enum sel_outcome publish(struct fixture *f, uint64_t checkpoint, uint64_t consumed,
				uint64_t parent)
{
	struct sel_publication pub = { .checkpoint = checkpoint, .consumed = consumed,
				       .parent_consumed = parent, .page_ids = f->ids,
				       .state_slot = 0 };
	enum sel_outcome outcome;

	assert_int_equal(coord_store_publish(&f->store, &f->h, &pub, &outcome), 0);
	return outcome;
}

static uint32_t poll_events(struct fixture *f, struct sel_event *events)
{
	return coord_store_poll(&f->store, events, 64);
}

/* Stores the 300-token root record (the first job) and finds it. */
static void store_root_and_find(struct fixture *f, struct sel_event *events,
				struct sel_hit *hit)
{
	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, events);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, hit));
}

/* Every pin released, every job done, bytes equal to the records'. */
static void assert_balanced(struct fixture *f)
{
	uint64_t bytes = 0;

	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
	for (uint32_t i = 0; i < f->store.index.nodes_max; i++) {
		if (!f->store.index.nodes[i].in_use)
			continue;
		assert_int_equal(f->store.index.nodes[i].pins, 0);
		bytes += f->store.index.nodes[i].bytes;
	}
	assert_int_equal(f->store.used_bytes, bytes);
	assert_int_equal(f->store.reclaiming_bytes, 0);
	assert_int_equal(f->store.warm.slots_releasing, 0);
}

/* Queued, in-flight dedupe (Retry), Stored, then Present. */
static void test_store_outcomes_and_dedupe(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	assert_int_equal(f->stub.job_count, 1);
	assert_int_equal(f->stub.jobs[0].header.tail_page_count, 4);
	assert_int_equal(f->stub.jobs[0].page_ids[0], 100);
	assert_int_equal(publish(f, 2, 300, 0), SEL_RETRY);
	assert_int_equal(poll_events(f, ev), 0);
	stub_complete(&f->stub, 0, 0);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_STORED);
	assert_int_equal(ev[0].id, 1);
	assert_int_equal(publish(f, 3, 300, 0), SEL_PRESENT);
	assert_int_equal(f->stub.job_count, 1);
	assert_int_equal(f->store.stats.published_queued, 1);
	assert_int_equal(f->store.stats.published_retry, 1);
	assert_int_equal(f->store.stats.published_present, 1);
	assert_balanced(f);
}

/* A failed store reports why, leaves nothing, and can be tried again. */
static void test_store_failure(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, -EIO);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_STORE_FAILED);
	assert_int_equal(ev[0].error, -EIO);
	assert_non_null(strstr(ev[0].why, "stub failure"));
	assert_int_equal(f->store.index.node_count, 0);
	assert_int_equal(f->stub.jobs[1].kind, COORD_JOB_UNLINK); /* see below */
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	assert_balanced(f);
	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 2, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/*
 * A store that failed on some rank may have left its file where it
 * succeeded: its key is unlinked on every rank, charging nothing, whatever
 * the failure (a rewrite's failure is undone by a truncate instead). When
 * that unlink cannot be submitted the failure is still reported.
 */
static void test_store_failed_store_unlinked_on_every_rank(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	uint64_t used;

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, -ENOSPC);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_STORE_FAILED);
	assert_int_equal(f->stub.job_count, 2);
	assert_int_equal(f->stub.jobs[1].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[1].key, &f->stub.jobs[0].header.key));
	used = f->store.used_bytes;
	stub_complete(&f->stub, 1, -ENOENT); /* not written anywhere: fine */
	poll_events(f, ev);
	assert_int_equal(f->store.used_bytes, used);
	assert_balanced(f);

	backoff_passed(f);
	assert_int_equal(publish(f, 2, 300, 0), SEL_QUEUED);
	f->stub.refuse_unlinks = true;
	stub_complete(&f->stub, 2, -EIO);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_STORE_FAILED);
	assert_int_equal(f->stub.job_count, 3);
	assert_int_equal(f->store.index.node_count, 0);
	assert_balanced(f);
}

/*
 * A child stores only its tail; a non-root parent's row goes once its only
 * child commits; a root keeps its row (seed 2.3).
 */
static void test_store_child_and_row_drop(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	uint32_t root, middle;

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 2, 700, 300), SEL_QUEUED);
	assert_int_equal(f->stub.jobs[1].header.first_page_index, 4);
	assert_int_equal(f->stub.jobs[1].header.tail_page_count, 6);
	assert_int_equal(f->stub.jobs[1].page_ids[0], 104); /* chain page 4 */
	root = coord_index_find(&f->store.index, &f->stub.jobs[0].header.key);
	assert_int_equal(coord_index_node(&f->store.index, root)->pins, 1);
	assert_int_equal(publish(f, 3, 900, 700), SEL_RETRY); /* parent writing */
	stub_complete(&f->stub, 1, 0);
	assert_int_equal(poll_events(f, ev), 1);
	/* the root keeps its row: no truncate went out */
	assert_int_equal(f->stub.job_count, 2);
	assert_true(coord_index_node(&f->store.index, root)->row_present);
	assert_int_equal(publish(f, 3, 900, 700), SEL_QUEUED);
	stub_complete(&f->stub, 2, 0);
	assert_int_equal(poll_events(f, ev), 1);
	/* the middle record's row drop went out as a truncate */
	middle = coord_index_find(&f->store.index, &f->stub.jobs[1].header.key);
	assert_int_equal(f->stub.job_count, 4);
	assert_int_equal(f->stub.jobs[3].kind, COORD_JOB_TRUNCATE);
	assert_true(rec_key_equal(&f->stub.jobs[3].key, &f->stub.jobs[1].header.key));
	assert_false(coord_index_node(&f->store.index, middle)->row_present);
	stub_complete(&f->stub, 3, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/* Publishes checkpoint (Queued), completes its store, job number job, and takes the event. */
static void store_done(struct fixture *f, uint64_t checkpoint, uint64_t consumed,
		       uint64_t parent, uint32_t job)
{
	struct sel_event ev[64];

	assert_int_equal(publish(f, checkpoint, consumed, parent), SEL_QUEUED);
	stub_complete(&f->stub, job, 0);
	poll_events(f, ev);
}

/* Stores 300, 700 (parent 300) and 900 (parent 700); 700's row goes. */
static void store_chain_of_three(struct fixture *f)
{
	struct sel_event ev[64];

	store_done(f, 1, 300, 0, 0);
	store_done(f, 2, 700, 300, 1);
	store_done(f, 3, 900, 700, 2);
	assert_int_equal(f->stub.jobs[3].kind, COORD_JOB_TRUNCATE);
	stub_complete(&f->stub, 3, 0);
	poll_events(f, ev);
}

/*
 * A record whose row was dropped is not Present: its
 * publication rewrites it whole with the same parent and pages plus the
 * row (Retry while that runs), and then it is Present and restorable at
 * its own endpoint.
 */
static void test_store_row_dropped_record_stored_again(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct rec_history shorter;
	struct sel_hit hit;
	uint32_t middle;

	store_chain_of_three(f);
	middle = coord_index_find(&f->store.index, &f->stub.jobs[1].header.key);
	assert_false(coord_index_node(&f->store.index, middle)->row_present);
	assert_int_equal(rec_history_init(&shorter, &f->store.model, f->h.tokens, 700), 0);
	assert_false(coord_store_lookup(&f->store, &shorter, 0, &hit) && hit.consumed == 700);

	assert_int_equal(publish(f, 4, 700, 300), SEL_QUEUED);
	assert_int_equal(f->stub.job_count, 5);
	assert_int_equal(f->stub.jobs[4].kind, COORD_JOB_STORE);
	assert_true(rec_key_equal(&f->stub.jobs[4].header.key, &f->stub.jobs[1].header.key));
	assert_int_equal(f->stub.jobs[4].header.parent.consumed, 300);
	assert_int_equal(f->stub.jobs[4].header.first_page_index, 4);
	assert_int_equal(f->stub.jobs[4].header.tail_page_count, 6);
	assert_int_equal(f->stub.jobs[4].page_ids[0], 104);
	assert_int_equal(publish(f, 5, 700, 300), SEL_RETRY);
	/* the chain through it still restores meanwhile */
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 900);
	stub_complete(&f->stub, 4, 0);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_STORED);
	assert_int_equal(ev[0].id, 4);
	assert_true(coord_index_node(&f->store.index, middle)->row_present);
	assert_int_equal(publish(f, 6, 700, 300), SEL_PRESENT);
	assert_true(coord_store_lookup(&f->store, &shorter, 0, &hit));
	assert_int_equal(hit.consumed, 700);
	assert_int_equal(f->stub.job_count, 5);
	assert_balanced(f);
	rec_history_free(&shorter);
}

/*
 * A failed rewrite leaves each rank the old page-only file or the new one:
 * a truncate of the row on every rank makes them agree, and the committed
 * record stays (its chain restores; it can be rewritten again). Only when
 * that truncate fails too (a rank lost its file) are the record and what
 * depends on it dropped everywhere, to be stored anew.
 */
static void test_store_failed_row_rewrite_keeps_record(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit;
	uint32_t middle;

	store_chain_of_three(f);
	middle = coord_index_find(&f->store.index, &f->stub.jobs[1].header.key);
	assert_int_equal(publish(f, 4, 700, 300), SEL_QUEUED);
	stub_complete(&f->stub, 4, -EIO);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_STORE_FAILED);
	assert_int_equal(f->stub.job_count, 6); /* the undo: a truncate, not unlinks */
	assert_int_equal(f->stub.jobs[5].kind, COORD_JOB_TRUNCATE);
	assert_true(rec_key_equal(&f->stub.jobs[5].key, &f->stub.jobs[1].header.key));
	assert_int_equal(publish(f, 5, 700, 300), SEL_RETRY); /* while it runs */
	stub_complete(&f->stub, 5, 0);
	poll_events(f, ev);
	assert_int_equal(f->store.index.node_count, 3);
	assert_false(coord_index_node(&f->store.index, middle)->row_present);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 900);
	assert_balanced(f);
	assert_int_equal(publish(f, 6, 700, 300), SEL_QUEUED); /* the row, again */
	stub_complete(&f->stub, 6, 0);
	poll_events(f, ev);
	assert_true(coord_index_node(&f->store.index, middle)->row_present);
	assert_balanced(f);
}

static void test_store_failed_row_rewrite_and_undo_drops_record(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];

	store_chain_of_three(f);
	assert_int_equal(publish(f, 4, 700, 300), SEL_QUEUED);
	stub_complete(&f->stub, 4, -EIO);
	poll_events(f, ev);
	assert_int_equal(f->stub.jobs[5].kind, COORD_JOB_TRUNCATE);
	stub_complete(&f->stub, 5, -ENOENT);
	poll_events(f, ev);
	assert_int_equal(f->stub.job_count, 8); /* unlinks of 900, then 700 */
	assert_int_equal(f->stub.jobs[6].kind, COORD_JOB_UNLINK);
	assert_int_equal(f->stub.jobs[7].kind, COORD_JOB_UNLINK);
	stub_complete(&f->stub, 6, 0);
	stub_complete(&f->stub, 7, 0);
	poll_events(f, ev);
	assert_int_equal(f->store.index.node_count, 1);
	assert_balanced(f);
	assert_int_equal(publish(f, 8, 700, 300), SEL_QUEUED);
	stub_complete(&f->stub, 8, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/* One record as the scan (or the agreement) lists it, for coord_store_load. */
static struct rec_record_info loaded_record(struct fixture *f, uint64_t consumed,
					    uint64_t parent, bool row, uint64_t created_ns)
{
	struct rec_record_info r = { .row_present = row, .created_ns = created_ns };
	uint32_t first = (uint32_t)(parent / f->g.page_tokens);

	rec_history_key_at(&f->h, consumed, &r.key);
	if (parent)
		rec_history_key_at(&f->h, parent, &r.parent);
	r.bucket = *rec_history_bucket(&f->h, consumed);
	r.first_page_index = first;
	r.tail_page_count = (uint32_t)(consumed / f->g.page_tokens) - first;
	r.file_bytes = REC_HEADER_BYTES + 4096 + f->g.page_record_bytes * r.tail_page_count +
		       (row ? f->g.row_record_bytes : 0);
	return r;
}

/*
 * A committed record whose parent link names another history's record
 * (checksummed, not proven: section 5) is not Present for its checkpoint,
 * since no restore at that endpoint can use it: it is dropped, and the
 * checkpoint is stored again. Before, Present kept it young for good while
 * every lookup missed.
 */
static void test_store_present_needs_a_restorable_chain(void **state)
{
	struct fixture *f = *state;
	struct rec_identity model;
	struct rec_history other;
	uint32_t tokens[2000];
	struct rec_record_info loaded[2];
	struct sel_event ev[64];
	struct sel_hit hit;

	tu_identities(&model, NULL);
	tu_tokens(tokens, 2000, 78);
	assert_int_equal(rec_history_init(&other, &model, tokens, 2000), 0);
	loaded[0] = loaded_record(f, 300, 0, true, 1111);
	rec_history_key_at(&other, 300, &loaded[0].key); /* the other history's root */
	loaded[0].bucket = *rec_history_bucket(&other, 300);
	loaded[1] = loaded_record(f, 700, 300, true, 2222);
	loaded[1].parent = loaded[0].key; /* this history's 700 under it: forged */
	assert_int_equal(coord_store_load(&f->store, loaded, 2), 0);
	assert_int_equal(f->store.index.node_count, 2);
	assert_false(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(publish(f, 1, 700, 300), SEL_RETRY);
	/* the forged record goes on every rank (an unlink), the other history's stays */
	assert_int_equal(f->stub.job_count, 1);
	assert_int_equal(f->stub.jobs[0].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[0].key, &loaded[1].key));
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_int_equal(f->store.index.node_count, 1);
	/* stored again, as a root of its own: its parent 300 is not this history's */
	assert_int_equal(publish(f, 2, 700, 0), SEL_QUEUED);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 700);
	rec_history_free(&other);
}

/*
 * Max-age (seed 2.5): one sweep drops at most 64 expired leaves, oldest
 * first, and stops at the first fresh one; the next comes only after the
 * sweep interval (here the max age, shorter than a minute), and a
 * record's parent is a leaf, and may expire, once its child has gone.
 */
static void test_store_max_age_sweeps_64_leaves(void **state)
{
	struct fixture *f = *state;
	struct rec_record_info loaded[71];
	struct sel_event ev[64];

	/* 70 one-page roots, loaded with an ancient mtime, and one fresh. */
	for (uint32_t i = 0; i < 71; i++) {
		loaded[i] = loaded_record(f, 64 + i, 0, true, 1000 + i);
		loaded[i].mtime_ns = i < 70 ? 1 + i : sel_realtime_ns();
	}
	assert_int_equal(coord_store_load(&f->store, loaded, 71), 0);
	f->store.max_age_ns = 10ull * 1000000000ull;
	poll_events(f, ev);
	assert_int_equal(f->store.stats.expired, 64);
	assert_int_equal(f->store.stats.evictions, 0);
	assert_int_equal(f->store.index.node_count, 7);
	assert_int_equal(f->stub.job_count, 64);
	for (uint32_t i = 0; i < 64; i++) {
		assert_int_equal(f->stub.jobs[i].kind, COORD_JOB_UNLINK);
		assert_true(rec_key_equal(&f->stub.jobs[i].key, &loaded[i].key));
		stub_complete(&f->stub, i, 0);
	}
	/* Within the interval: no sweep. */
	poll_events(f, ev);
	assert_int_equal(f->store.stats.expired, 64);
	f->store.last_sweep_ns -= f->store.max_age_ns;
	poll_events(f, ev);
	assert_int_equal(f->store.stats.expired, 70);
	assert_int_equal(f->store.index.node_count, 1);
	assert_int_not_equal(coord_index_find(&f->store.index, &loaded[70].key), COORD_NONE);
	for (uint32_t i = 64; i < 70; i++)
		stub_complete(&f->stub, i, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/*
 * A use refreshes a record for max-age (sel_touch here; a store, a
 * Present answer and a fetch too), its ancestors with it: the touched
 * chain stays. Expired, the leaf goes first, then its parent.
 */
static void test_store_max_age_touch_refreshes(void **state)
{
	struct fixture *f = *state;
	struct rec_record_info loaded[2] = {
		loaded_record(f, 300, 0, true, 1111),
		loaded_record(f, 700, 300, true, 2222),
	};
	struct sel_event ev[64];

	loaded[0].mtime_ns = loaded[1].mtime_ns = 1;
	assert_int_equal(coord_store_load(&f->store, loaded, 2), 0);
	f->store.max_age_ns = 10ull * 1000000000ull;
	assert_int_equal(coord_store_touch(&f->store, &f->h, 700), 0);
	poll_events(f, ev);
	assert_int_equal(f->store.stats.expired, 0);
	assert_int_equal(f->store.index.node_count, 2);
	/* Old again: the leaf goes, then its parent, a leaf now, after it. */
	f->store.used_ns[coord_index_find(&f->store.index, &loaded[0].key)] = 1;
	f->store.used_ns[coord_index_find(&f->store.index, &loaded[1].key)] = 1;
	f->store.last_sweep_ns -= f->store.max_age_ns;
	poll_events(f, ev);
	assert_int_equal(f->store.stats.expired, 2);
	assert_int_equal(f->store.index.node_count, 0);
	assert_int_equal(f->stub.job_count, 2);
	assert_true(rec_key_equal(&f->stub.jobs[0].key, &loaded[1].key));
	assert_true(rec_key_equal(&f->stub.jobs[1].key, &loaded[0].key));
	stub_complete(&f->stub, 0, 0);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/*
 * Parent links are proven where the index learns them from a history: a
 * publication's link from its insert, a scanned record's by the first
 * check that hashes it (here the Present check); never from the header.
 */
static void test_store_links_proven_where_learned(void **state)
{
	struct fixture *f = *state;
	struct rec_record_info loaded[2] = {
		loaded_record(f, 300, 0, true, 1111),
		loaded_record(f, 700, 300, true, 2222),
	};
	struct sel_event ev[64];
	struct sel_hit hit;
	struct rec_key key;

	assert_int_equal(coord_store_load(&f->store, loaded, 2), 0);
	rec_history_key_at(&f->h, 700, &key);
	assert_false(f->store.index.nodes[coord_index_find(&f->store.index, &key)].parent_proven);
	assert_int_equal(publish(f, 1, 700, 300), SEL_PRESENT);
	assert_true(f->store.index.nodes[coord_index_find(&f->store.index, &key)].parent_proven);
	assert_int_equal(publish(f, 2, 900, 700), SEL_QUEUED);
	rec_history_key_at(&f->h, 900, &key);
	assert_true(f->store.index.nodes[coord_index_find(&f->store.index, &key)].parent_proven);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 900);
}

/*
 * R-AGREE-1: a rewrite keeps the record's creation time, so that where it
 * fails on some ranks only, the old page-only file and the new one have
 * equal headers once the undo truncates the row; a new creation time made
 * the agreement at the next start drop the committed record, and every
 * record under it (torture: record.after_create on rank 0).
 */
static void test_store_row_rewrite_keeps_creation_time(void **state)
{
	struct fixture *f = *state;
	struct rec_record_info loaded[3] = {
		loaded_record(f, 300, 0, true, 1111),
		loaded_record(f, 700, 300, false, 2222),
		loaded_record(f, 900, 700, true, 3333),
	};
	struct sel_event ev[64];
	struct sel_hit hit;

	assert_int_equal(coord_store_load(&f->store, loaded, 3), 0);
	assert_int_equal(f->store.index.node_count, 3);
	assert_int_equal(publish(f, 1, 700, 300), SEL_QUEUED);
	assert_int_equal(f->stub.jobs[0].kind, COORD_JOB_STORE);
	assert_true(rec_key_equal(&f->stub.jobs[0].header.key, &loaded[1].key));
	assert_int_equal(f->stub.jobs[0].header.created_ns, 2222);
	stub_complete(&f->stub, 0, -EIO); /* on some ranks */
	poll_events(f, ev);
	assert_int_equal(f->stub.jobs[1].kind, COORD_JOB_TRUNCATE);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	assert_int_equal(f->store.index.node_count, 3);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 900);
	assert_balanced(f);

	/* A record this store wrote: its rewrite has the first header's time. */
	assert_int_equal(publish(f, 2, 1200, 900), SEL_QUEUED);
	stub_complete(&f->stub, 2, 0);
	poll_events(f, ev); /* 900's row goes: its only child committed */
	assert_int_equal(f->stub.jobs[3].kind, COORD_JOB_TRUNCATE);
	stub_complete(&f->stub, 3, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 3, 900, 700), SEL_QUEUED);
	assert_int_equal(f->stub.jobs[4].kind, COORD_JOB_STORE);
	assert_int_equal(f->stub.jobs[4].header.created_ns, 3333);
	stub_complete(&f->stub, 4, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 4, 1300, 1200), SEL_QUEUED);
	stub_complete(&f->stub, 5, 0);
	poll_events(f, ev); /* 1200's row goes */
	stub_complete(&f->stub, 6, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 5, 1200, 900), SEL_QUEUED);
	assert_int_equal(f->stub.jobs[7].kind, COORD_JOB_STORE);
	assert_int_equal(f->stub.jobs[7].header.created_ns, f->stub.jobs[2].header.created_ns);
	stub_complete(&f->stub, 7, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/* A publication whose parent is absent becomes a root with its chain. */
static void test_store_root_when_parent_absent(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];

	assert_int_equal(publish(f, 1, 700, 300), SEL_QUEUED);
	assert_int_equal(f->stub.jobs[0].header.first_page_index, 0);
	assert_int_equal(f->stub.jobs[0].header.tail_page_count, 10);
	assert_int_equal(f->stub.jobs[0].header.parent.consumed, 0);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/* Too big alone: Oversize; no disk store at all: Oversize too. */
static void test_store_oversize(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(publish(f, 1, 64 * 30, 0), SEL_OVERSIZE);
	f->store.limit_bytes = 0;
	assert_int_equal(publish(f, 2, 300, 0), SEL_OVERSIZE);
	assert_int_equal(f->stub.job_count, 0);
}

/*
 * A child that fits alone but not beside the parent it
 * needs (pinned while it is written) is Oversize, not Retry forever.
 */
static void test_store_oversize_counts_ancestors(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED); /* 45056 bytes */
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	/* 6 tail pages: 61440 bytes alone, 106496 with the root (limit 100112) */
	assert_int_equal(publish(f, 2, 700, 300), SEL_OVERSIZE);
	assert_int_equal(f->stub.job_count, 1);
	/* a root record of 700 (its whole chain, 94208 bytes) still fits, once
	 * the root that no longer helps is evicted */
	assert_int_equal(publish(f, 3, 700, 0), SEL_RETRY);
	stub_complete(&f->stub, 1, 0); /* the unlink of 300 */
	poll_events(f, ev);
	assert_int_equal(publish(f, 3, 700, 0), SEL_QUEUED);
	stub_complete(&f->stub, 2, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/*
 * A full index (records_max) evicts the LRU leaf for a
 * new record, as bytes do, instead of answering Retry forever; a chain
 * longer than the index can hold is Oversize.
 */
static void test_store_full_index_evicts(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit;

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 2, 700, 300), SEL_QUEUED);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	/* 300 -> 700 fill the index: 900 needs three records */
	assert_int_equal(publish(f, 3, 900, 700), SEL_OVERSIZE);
	/* a new root evicts the leaf 700 (300 holds a child) */
	assert_int_equal(publish(f, 4, 130, 0), SEL_QUEUED);
	assert_int_equal(f->stub.jobs[2].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[2].key, &f->stub.jobs[1].header.key));
	assert_int_equal(f->store.stats.evictions, 1);
	stub_complete(&f->stub, 2, 0);
	stub_complete(&f->stub, 3, 0);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_STORED);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 300);
	assert_balanced(f);
}

/* Under the limit, the LRU leaf is unlinked; its bytes count until done. */
static void test_store_eviction_under_limit(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct rec_key first;

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	first = f->stub.jobs[0].header.key;
	assert_int_equal(publish(f, 2, 310, 0), SEL_QUEUED);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	/* a third does not fit: the least recent (checkpoint 1) goes */
	assert_int_equal(publish(f, 3, 320, 0), SEL_RETRY);
	assert_int_equal(f->stub.jobs[2].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[2].key, &first));
	assert_int_equal(publish(f, 3, 320, 0), SEL_RETRY); /* still pending */
	assert_int_equal(f->stub.job_count, 3);             /* nothing more evicted */
	stub_complete(&f->stub, 2, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 3, 320, 0), SEL_QUEUED);
	stub_complete(&f->stub, 3, 0);
	poll_events(f, ev);
	assert_int_equal(f->store.stats.evictions, 1);
	assert_balanced(f);
}

/*
 * R-AGREE-2: a record that may be the parent of a key held unread since
 * startup (fewer tokens than it) is not evicted, though the least
 * recently used: the next leaf goes instead, so the next start that reads
 * the held key does not find it orphaned.
 */
static void test_store_held_parent_not_evicted(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct rec_key held, second;

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	assert_int_equal(publish(f, 2, 310, 0), SEL_QUEUED);
	stub_complete(&f->stub, 1, 0);
	second = f->stub.jobs[1].header.key;
	poll_events(f, ev);
	rec_history_key_at(&f->h, 305, &held);
	assert_int_equal(coord_store_hold(&f->store, &held, 1), 0);
	/* a third does not fit: 300 is the least recent, but may be 305's parent */
	assert_int_equal(publish(f, 3, 320, 0), SEL_RETRY);
	assert_int_equal(f->stub.job_count, 3);
	assert_int_equal(f->stub.jobs[2].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[2].key, &second));
	stub_complete(&f->stub, 2, 0);
	poll_events(f, ev);
	/* with only 300 left to evict, nothing goes */
	assert_int_equal(publish(f, 3, 320, 0), SEL_QUEUED);
	stub_complete(&f->stub, 3, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 4, 330, 0), SEL_RETRY);
	assert_int_equal(f->stub.jobs[4].kind, COORD_JOB_UNLINK);
	assert_int_not_equal(rec_key_compare(&f->stub.jobs[4].key, &f->stub.jobs[0].header.key),
			     0);
	stub_complete(&f->stub, 4, 0);
	poll_events(f, ev);
	assert_int_not_equal(coord_index_find(&f->store.index, &f->stub.jobs[0].header.key),
			     COORD_NONE);
	assert_balanced(f);
}

/*
 * R-AGREE-2: max-age expiry skips records that may be a held key's parent,
 * and a page-only record among them stays when its last child expires.
 */
static void test_store_held_parent_not_expired(void **state)
{
	struct fixture *f = *state;
	struct rec_record_info loaded[3];
	struct sel_event ev[64];
	struct rec_key held;

	loaded[0] = loaded_record(f, 128, 0, false, 1000);  /* page-only */
	loaded[1] = loaded_record(f, 256, 128, true, 1001); /* its child */
	loaded[2] = loaded_record(f, 320, 0, true, 1002);
	for (uint32_t i = 0; i < 3; i++)
		loaded[i].mtime_ns = 1 + i;
	assert_int_equal(coord_store_load(&f->store, loaded, 3), 0);
	rec_history_key_at(&f->h, 200, &held);
	assert_int_equal(coord_store_hold(&f->store, &held, 1), 0);
	f->store.max_age_ns = 10ull * 1000000000ull;
	poll_events(f, ev);
	assert_int_equal(f->store.stats.expired, 2);
	assert_int_equal(f->stub.job_count, 2);
	assert_true(rec_key_equal(&f->stub.jobs[0].key, &loaded[1].key));
	assert_true(rec_key_equal(&f->stub.jobs[1].key, &loaded[2].key));
	for (uint32_t i = 0; i < 2; i++)
		stub_complete(&f->stub, i, 0);
	poll_events(f, ev);
	assert_int_equal(f->store.index.node_count, 1);
	assert_int_not_equal(coord_index_find(&f->store.index, &loaded[0].key), COORD_NONE);
	assert_balanced(f);
}

/*
 * Seed 2.10: sel_touch on a GPU-cache hit makes the record the most
 * recently used, so the other one is evicted instead; a key never stored,
 * a record still being written, and a count of 0 or past the history are
 * refused.
 */
static void test_store_touch_keeps_record_from_eviction(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct rec_key second;

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	assert_int_equal(publish(f, 2, 310, 0), SEL_QUEUED);
	assert_int_equal(coord_store_touch(&f->store, &f->h, 310), SEL_ENOTFOUND); /* writing */
	stub_complete(&f->stub, 1, 0);
	second = f->stub.jobs[1].header.key;
	poll_events(f, ev);
	assert_int_equal(coord_store_touch(&f->store, &f->h, 300), 0);
	assert_int_equal(coord_store_touch(&f->store, &f->h, 320), SEL_ENOTFOUND);
	assert_int_equal(coord_store_touch(&f->store, &f->h, 0), -EINVAL);
	assert_int_equal(coord_store_touch(&f->store, &f->h, 2001), -EINVAL);
	/* a third does not fit: without the touch 300 would go; now 310 does */
	assert_int_equal(publish(f, 3, 320, 0), SEL_RETRY);
	assert_int_equal(f->stub.jobs[2].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[2].key, &second));
	stub_complete(&f->stub, 2, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 3, 320, 0), SEL_QUEUED);
	stub_complete(&f->stub, 3, 0);
	poll_events(f, ev);
	assert_int_equal(coord_store_touch(&f->store, &f->h, 310), SEL_ENOTFOUND); /* evicted */
	assert_int_equal(coord_store_touch(&f->store, &f->h, 300), 0);
	assert_balanced(f);
}

/* A touch of a child refreshes its ancestors too: the child's parent, not
 * an untouched root, is the last to be compacted. */
static void test_store_touch_refreshes_ancestors(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	uint32_t root, child;
	struct rec_key key;

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 2, 700, 300), SEL_QUEUED);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 3, 130, 0), SEL_QUEUED);
	stub_complete(&f->stub, 2, 0);
	poll_events(f, ev);
	rec_history_key_at(&f->h, 300, &key);
	root = coord_index_find(&f->store.index, &key);
	rec_history_key_at(&f->h, 700, &key);
	child = coord_index_find(&f->store.index, &key);
	assert_int_equal(coord_store_touch(&f->store, &f->h, 700), 0);
	assert_int_equal(f->store.index.lru.tail, root);
	assert_int_equal(f->store.index.nodes[root].lru.prev, child);
	assert_balanced(f);
}

/* When every leaf is pinned, the LRU single-child ancestor is compacted. */
static void test_store_compaction_when_leaves_pinned(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit;
	bool joined;

	f->store.limit_bytes = 1ull << 30;
	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 2, 700, 300), SEL_QUEUED);
	f->stub.refuse = true; /* the row drop after it cannot be sent */
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	f->stub.refuse = false;
	/* the GPU holds 300 tokens: the fetch pins only the leaf */
	assert_true(coord_store_lookup(&f->store, &f->h, 300, &hit));
	assert_int_equal(hit.consumed, 700);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 0, 9, &joined), 0);
	/* shrink the limit to force room for a small record */
	f->store.limit_bytes = f->store.used_bytes + 1000;
	assert_int_equal(publish(f, 3, 200, 0), SEL_RETRY);
	assert_int_equal(f->stub.jobs[3].kind, COORD_JOB_TRUNCATE);
	assert_true(rec_key_equal(&f->stub.jobs[3].key, &f->stub.jobs[0].header.key));
	/* compaction removes the match but not the chain's pages */
	assert_false(coord_store_lookup(&f->store, &f->h, 0, &hit) && hit.consumed == 300);
	stub_complete(&f->stub, 2, 0); /* the fetch */
	stub_complete(&f->stub, 3, 0); /* the truncate */
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_FETCHED);
	assert_balanced(f);
}

/* Two waiters share one fetch; a cancelled one gets no event. */
static void test_store_waiters_and_cancel(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit;
	bool joined;

	store_root_and_find(f, ev, &hit);
	assert_int_equal(hit.page_count, 4);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 10, &joined), 0);
	assert_false(joined);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 2, 11, &joined), 0);
	assert_true(joined);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 2, 12, &joined), 0);
	assert_int_equal(f->stub.job_count, 2);
	assert_int_equal(coord_store_cancel(&f->store, 12), 0);
	assert_int_equal(coord_store_cancel(&f->store, 12), SEL_ENOTFOUND);
	stub_complete(&f->stub, 1, 0);
	assert_int_equal(poll_events(f, ev), 2);
	assert_int_equal(ev[0].kind, SEL_EVENT_FETCHED);
	assert_int_equal(ev[0].id, 10);
	assert_int_equal(ev[1].id, 11);
	assert_balanced(f);
}

/*
 * Cancelling after the fetch completed (sel_poll took its completion, with
 * max 0 here, so its events are queued but not yet returned) answers
 * SEL_ENOTFOUND for the owner and a joined waiter alike and removes
 * nothing: both events still come; once they came, still SEL_ENOTFOUND.
 */
static void test_store_cancel_after_completion(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit;
	bool joined;

	store_root_and_find(f, ev, &hit);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 10, &joined), 0);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 2, 11, &joined), 0);
	assert_true(joined);
	stub_complete(&f->stub, 1, 0);
	assert_int_equal(coord_store_poll(&f->store, ev, 0), 0);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
	assert_int_equal(coord_store_cancel(&f->store, 10), SEL_ENOTFOUND);
	assert_int_equal(coord_store_cancel(&f->store, 11), SEL_ENOTFOUND);
	assert_int_equal(poll_events(f, ev), 2);
	assert_int_equal(ev[0].kind, SEL_EVENT_FETCHED);
	assert_int_equal(ev[0].id, 10);
	assert_int_equal(ev[1].kind, SEL_EVENT_FETCHED);
	assert_int_equal(ev[1].id, 11);
	assert_int_equal(coord_store_cancel(&f->store, 10), SEL_ENOTFOUND);
	assert_int_equal(poll_events(f, ev), 0);
	assert_balanced(f);
}

/*
 * Hits of one endpoint with the same skip but chains that start at
 * different records (the GPU holds different prefixes) are not equal: the
 * second is a fetch of its own, not a waiter on the first's destination.
 */
static void test_store_join_needs_the_same_chain(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit first, hit;
	bool joined, found = false;

	store_done(f, 1, 300, 0, 0);
	store_done(f, 2, 700, 300, 1);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &first));
	for (uint64_t resident = 1; resident < 700 && !found; resident++)
		found = coord_store_lookup(&f->store, &f->h, resident, &hit) &&
			hit.endpoint == first.endpoint && hit.skip_pages == first.skip_pages &&
			hit.page_count != first.page_count;
	assert_true(found);
	assert_int_equal(coord_store_fetch(&f->store, &first, f->ids, 1, 30, &joined), 0);
	assert_false(joined);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids + 16, 2, 31, &joined), 0);
	assert_false(joined);
	assert_int_equal(f->stub.job_count, 4);
	assert_int_equal(f->stub.jobs[3].kind, COORD_JOB_FETCH);
	stub_complete(&f->stub, 2, 0);
	stub_complete(&f->stub, 3, 0);
	assert_int_equal(poll_events(f, ev), 2);
	assert_balanced(f);
}

/*
 * A fetch whose owner cancelled is not joined: the owner frees its
 * destination at its event, the one a joiner would read; an equal hit then
 * gets a fetch of its own.
 */
static void test_store_no_join_after_owner_cancelled(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit;
	bool joined;

	store_done(f, 1, 300, 0, 0);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 30, &joined), 0);
	assert_false(joined);
	assert_int_equal(coord_store_cancel(&f->store, 30), 0);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids + 16, 2, 31, &joined), 0);
	assert_false(joined);
	assert_int_equal(f->stub.job_count, 3);
	assert_int_equal(f->stub.jobs[2].kind, COORD_JOB_FETCH);
	stub_complete(&f->stub, 1, 0);
	stub_complete(&f->stub, 2, 0);
	assert_int_equal(poll_events(f, ev), 2); /* the owner hears, cancelled or not */
	assert_balanced(f);
}

/*
 * The chain 300 <- 700 <- 900 (700 page-only once 900 committed), then a
 * publication at consumed over parent, then 900 failing verification on a
 * fetch (dropped, its unlink submitted). Returns the publication's job;
 * middle and leaf get 700's and 900's keys.
 */
static uint32_t chain_then_leaf_fails(struct fixture *f, uint64_t consumed, uint64_t parent,
				      struct rec_key *middle, struct rec_key *leaf)
{
	struct sel_event ev[64];
	struct sel_hit hit;
	uint32_t job;
	bool joined;

	store_chain_of_three(f);
	*middle = f->stub.jobs[1].header.key;
	*leaf = f->stub.jobs[2].header.key;
	assert_false(coord_index_node(&f->store.index,
				      coord_index_find(&f->store.index, middle))->row_present);
	job = f->stub.job_count;
	assert_int_equal(publish(f, 4, consumed, parent), SEL_QUEUED);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 900);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 50, &joined), 0);
	stub_fail_naming(&f->stub, f->stub.job_count - 1, leaf);
	poll_events(f, ev);
	assert_int_equal(f->stub.jobs[f->stub.job_count - 1].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[f->stub.job_count - 1].key, leaf));
	return job;
}

/*
 * A page-only record whose last child leaves another way than by eviction
 * goes too (seed 2.3): 300 <- 700 (page-only once 900 committed) <- 900;
 * 800 is stored under 700; 900 fails verification and is dropped; then
 * 800's store fails: 700 is left with no child and no row, and is unlinked
 * (before, it stayed, its bytes charged, until LRU pressure took it).
 */
static void test_store_page_only_record_goes_with_its_last_child(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct rec_key middle, leaf;
	uint32_t d_job = chain_then_leaf_fails(f, 800, 700, &middle, &leaf);

	stub_complete(&f->stub, f->stub.job_count - 1, 0);
	poll_events(f, ev);
	stub_complete(&f->stub, d_job, -EIO); /* 800's store */
	poll_events(f, ev);
	/* 800's key on every rank (a failed store), then 700 */
	assert_int_equal(f->stub.jobs[f->stub.job_count - 2].kind, COORD_JOB_UNLINK);
	assert_int_equal(f->stub.jobs[f->stub.job_count - 2].key.consumed, 800);
	assert_int_equal(f->stub.jobs[f->stub.job_count - 1].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[f->stub.job_count - 1].key, &middle));
	stub_complete(&f->stub, f->stub.job_count - 2, 0);
	stub_complete(&f->stub, f->stub.job_count - 1, 0);
	poll_events(f, ev);
	assert_int_equal(f->store.index.node_count, 1); /* the root at 300 */
	assert_balanced(f);
}

/*
 * As above, but the engine's queue is full when 800's store fails, so the
 * unlink of the page-only 700 is refused: it goes at the next poll instead
 * of staying, childless, with its bytes charged for good.
 */
static void test_store_bare_page_only_unlink_refused_goes_later(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct rec_key middle, leaf;
	uint32_t d_job = chain_then_leaf_fails(f, 800, 700, &middle, &leaf), before;

	stub_complete(&f->stub, f->stub.job_count - 1, 0); /* 900's unlink */
	poll_events(f, ev);
	stub_complete(&f->stub, d_job, -EIO); /* 800's store */
	f->stub.refuse = true;
	before = f->stub.job_count;
	poll_events(f, ev);
	assert_int_equal(f->stub.job_count, before); /* every unlink refused */
	assert_int_equal(f->store.index.node_count, 2);
	f->stub.refuse = false;
	poll_events(f, ev); /* no completion: no sweep (nothing made room) */
	assert_int_equal(f->stub.job_count, before);
	assert_int_equal(coord_store_noop(&f->store), 0);
	stub_complete(&f->stub, before, 0); /* a completion: room again */
	poll_events(f, ev);
	assert_int_equal(f->stub.jobs[f->stub.job_count - 1].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[f->stub.job_count - 1].key, &middle));
	assert_int_equal(f->store.index.node_count, 1); /* the root at 300 */
	for (uint32_t i = before + 1; i < f->stub.job_count; i++)
		stub_complete(&f->stub, i, 0);
	poll_events(f, ev);
	assert_false(f->store.bare_pending);
	assert_balanced(f);
}

/*
 * 700's row is being put back (pinned) when its only child 900 fails
 * verification and goes; the rewrite then fails and its undo truncates
 * the row again: 700, page-only and childless, is unlinked once the undo
 * unpins it (before, it stayed with its bytes charged).
 */
static void test_store_bare_page_only_goes_after_rewrite_undone(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct rec_key middle, leaf;
	uint32_t rewrite = chain_then_leaf_fails(f, 700, 300, &middle, &leaf);

	stub_complete(&f->stub, f->stub.job_count - 1, 0);
	poll_events(f, ev);
	assert_int_equal(f->store.index.node_count, 2); /* 700 is pinned */
	stub_complete(&f->stub, rewrite, -EIO);
	poll_events(f, ev);
	assert_int_equal(f->stub.jobs[f->stub.job_count - 1].kind, COORD_JOB_TRUNCATE);
	stub_complete(&f->stub, f->stub.job_count - 1, 0); /* the undo */
	poll_events(f, ev);
	assert_int_equal(f->stub.jobs[f->stub.job_count - 1].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[f->stub.job_count - 1].key, &middle));
	assert_int_equal(f->store.index.node_count, 1); /* the root at 300 */
	stub_complete(&f->stub, f->stub.job_count - 1, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/*
 * A row truncate (700's row drop) that fails because a rank lost the file
 * (or finds its header bad) drops 700 and its child 900 on every rank, as
 * a failed fetch does (R-READ-4); before, 700 stayed in the index and
 * every restore through it failed. An I/O error drops nothing.
 */
static void test_store_failed_truncate_condemns_record(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit;

	store_done(f, 1, 300, 0, 0);
	store_done(f, 2, 700, 300, 1);
	store_done(f, 3, 900, 700, 2);
	assert_int_equal(f->stub.jobs[3].kind, COORD_JOB_TRUNCATE);
	stub_complete(&f->stub, 3, -EIO);
	poll_events(f, ev);
	assert_int_equal(f->stub.job_count, 4);
	assert_int_equal(f->store.index.node_count, 3);
	assert_balanced(f);

	store_done(f, 4, 1100, 900, 4); /* 900's row drop: a truncate that finds no file */
	assert_int_equal(f->stub.jobs[5].kind, COORD_JOB_TRUNCATE);
	assert_int_equal(f->stub.jobs[5].key.consumed, 900);
	stub_complete(&f->stub, 5, -ENOENT);
	poll_events(f, ev);
	assert_int_equal(f->store.stats.records_dropped_missing, 1);
	/* 1100 first, then 900, then 700 (page-only since the first truncate) */
	assert_int_equal(f->stub.job_count, 9);
	assert_int_equal(f->stub.jobs[6].key.consumed, 1100);
	assert_int_equal(f->stub.jobs[7].key.consumed, 900);
	assert_int_equal(f->stub.jobs[8].key.consumed, 700);
	for (uint32_t i = 6; i < 9; i++) {
		assert_int_equal(f->stub.jobs[i].kind, COORD_JOB_UNLINK);
		stub_complete(&f->stub, i, 0);
	}
	poll_events(f, ev);
	assert_int_equal(f->store.index.node_count, 1);
	assert_balanced(f);

	store_done(f, 5, 700, 300, 9);
	store_done(f, 6, 900, 700, 10); /* 700's row drop: a header that fails */
	assert_int_equal(f->stub.jobs[11].kind, COORD_JOB_TRUNCATE);
	stub_complete(&f->stub, 11, SEL_EBADHEADER);
	poll_events(f, ev);
	assert_int_equal(f->store.stats.records_dropped_header, 1);
	assert_int_equal(f->stub.job_count, 14); /* 900, then 700 */
	assert_int_equal(f->stub.jobs[12].key.consumed, 900);
	assert_int_equal(f->stub.jobs[13].key.consumed, 700);
	for (uint32_t i = 12; i < 14; i++) {
		assert_int_equal(f->stub.jobs[i].kind, COORD_JOB_UNLINK);
		stub_complete(&f->stub, i, 0);
	}
	poll_events(f, ev);
	assert_int_equal(f->store.index.node_count, 1);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 300); /* the root alone */
	assert_balanced(f);
}

/* A failed fetch tells every waiter and releases the chain. */
static void test_store_fetch_failure(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit;
	bool joined;

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_true(coord_store_lookup(&f->store, &f->h, 100, &hit));
	assert_int_equal(hit.skip_pages, 1);
	assert_int_equal(hit.page_count, 3);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 20, &joined), 0);
	assert_int_equal(f->stub.jobs[1].skip_pages, 1);
	stub_complete(&f->stub, 1, SEL_ECHECKSUM);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(ev[0].error, SEL_ECHECKSUM);
	/* a reason naming no record of the chain drops nothing (R-READ-4) */
	assert_int_equal(f->stub.job_count, 2);
	assert_int_equal(f->store.index.node_count, 1);
	assert_int_equal(f->store.stats.records_dropped_checksum, 0);
	assert_balanced(f);
}

/*
 * A child of a record that is not warm (on disk only) is stored warm only,
 * as any store with room: STORED once its copy is in every rank's slots,
 * its file written from warm after (ON_DISK); the parent keeps its file.
 */
static void test_store_child_of_cold_parent_goes_warm_only(void **state)
{
	struct fixture *f = *state;
	struct rec_record_info root = loaded_record(f, 256, 0, true, 1);
	struct sel_event ev[64];

	assert_int_equal(coord_store_load(&f->store, &root, 1), 0);
	assert_int_equal(coord_store_set_warm(&f->store, 64, 1, 8192, SEL_WARM_WRITE_THROUGH), 0);
	assert_int_equal(publish(f, 7, 512, 256), SEL_QUEUED);
	assert_int_equal(f->stub.jobs[0].kind, COORD_JOB_STORE);
	assert_int_equal(f->stub.jobs[0].warm, SHARD_STORE_WARM_ONLY);
	stub_complete(&f->stub, 0, 0);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_STORED);
	assert_int_equal(f->store.warm.dirty_records, 1);
	/* Write-through: its write from warm goes at once, its parent on disk. */
	assert_int_equal(f->stub.job_count, 2);
	assert_int_equal(f->stub.jobs[1].warm, SHARD_STORE_WARM_WRITE);
	stub_complete(&f->stub, 1, 0);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_ON_DISK);
	assert_int_equal(f->store.warm.dirty_records, 0);
	assert_balanced(f);
}

/*
 * A warm-only child's commit leaves its parent's row in place until the
 * child's file is on every rank: a kill before that would otherwise find
 * the parent's row gone and the child's file missing, and lose the
 * parent's committed restore. The row goes when the child's write lands.
 */
static void test_store_row_drop_waits_for_child_on_disk(void **state)
{
	struct fixture *f = *state;
	struct rec_record_info loaded[2] = { loaded_record(f, 256, 0, true, 1),
					     loaded_record(f, 512, 256, true, 2) };
	struct sel_event ev[64];
	uint32_t middle;

	assert_int_equal(coord_store_load(&f->store, loaded, 2), 0);
	middle = coord_index_find(&f->store.index, &loaded[1].key);
	assert_int_equal(coord_store_set_warm(&f->store, 64, 1, 8192, SEL_WARM_WRITE_THROUGH), 0);
	assert_int_equal(publish(f, 7, 768, 512), SEL_QUEUED);
	assert_int_equal(f->stub.jobs[0].warm, SHARD_STORE_WARM_ONLY);
	stub_complete(&f->stub, 0, 0);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_STORED);
	/* Only its write from warm went: the middle record keeps its row. */
	assert_int_equal(f->stub.job_count, 2);
	assert_int_equal(f->stub.jobs[1].warm, SHARD_STORE_WARM_WRITE);
	assert_true(coord_index_node(&f->store.index, middle)->row_present);
	stub_complete(&f->stub, 1, 0);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_ON_DISK);
	assert_int_equal(f->stub.job_count, 3);
	assert_int_equal(f->stub.jobs[2].kind, COORD_JOB_TRUNCATE);
	assert_true(rec_key_equal(&f->stub.jobs[2].key, &loaded[1].key));
	assert_false(coord_index_node(&f->store.index, middle)->row_present);
	stub_complete(&f->stub, 2, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/*
 * Warm slots a background job gives back on each rank only when it runs
 * there (here a failed warm store's unlink: the ranks where it succeeded
 * hold its slots until then) are no room for a read-through submitted
 * before it completes, since each rank runs a fetch before its queued
 * background jobs; once it completes, the same fetch reads through.
 */
static void test_store_read_through_waits_for_released_slots(void **state)
{
	struct fixture *f = *state;
	struct rec_record_info root = loaded_record(f, 256, 0, true, 1);
	struct coord_warm *w = &f->store.warm;
	struct sel_event ev[64];
	struct sel_hit hit;
	bool joined;

	assert_int_equal(coord_store_load(&f->store, &root, 1), 0);
	/* Room for one record of 4 pages and its row, not two. */
	assert_int_equal(coord_store_set_warm(&f->store, 9, 1, 8192, SEL_WARM_WRITE_THROUGH), 0);
	assert_int_equal(publish(f, 7, 512, 256), SEL_QUEUED);
	assert_int_equal(w->slots_used, 4 + 1);
	stub_complete(&f->stub, 0, -EIO);
	poll_events(f, ev);
	assert_int_equal(f->stub.jobs[1].kind, COORD_JOB_UNLINK);
	assert_int_equal(w->slots_used, 0);
	assert_int_equal(w->slots_releasing, 4 + 1);
	/* Only the root is left: its 5 slots are free in the count, held on a rank. */
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 256);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 20, &joined), 0);
	assert_int_equal(f->stub.jobs[2].kind, COORD_JOB_FETCH);
	assert_false(f->stub.jobs[2].read_through);
	assert_int_equal(w->slots_used, 0);
	stub_complete(&f->stub, 2, 0);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	assert_int_equal(w->slots_releasing, 0);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 21, &joined), 0);
	assert_true(f->stub.jobs[3].read_through);
	assert_int_equal(w->slots_used, 4 + 1);
	stub_complete(&f->stub, 3, 0);
	poll_events(f, ev);
	assert_int_equal(w->read_throughs, 1);
	assert_balanced(f);
}

/*
 * A fetch through a record whose rewrite is in flight reads nothing
 * through: a rank may run the fetch before the rewrite begins there, find
 * the record's old warm copy and reserve nothing for it, then lose that
 * copy as the rewrite begins, while the count lists it warm. Once the
 * rewrite completed the record is read through again.
 */
static void test_store_no_read_through_past_a_rewrite(void **state)
{
	struct fixture *f = *state;
	struct rec_record_info loaded[2];
	struct coord_warm *w = &f->store.warm;
	struct sel_event ev[64];
	struct sel_hit hit;
	uint32_t ids[2];
	bool joined;

	loaded[0] = loaded_record(f, 256, 0, false, 1); /* page-only: its row dropped */
	loaded[1] = loaded_record(f, 512, 256, true, 2);
	assert_int_equal(coord_store_load(&f->store, loaded, 2), 0);
	assert_int_equal(coord_store_set_warm(&f->store, 64, 1, 8192, SEL_WARM_WRITE_THROUGH),
			 0);
	for (uint32_t i = 0; i < 2; i++)
		ids[i] = coord_index_find(&f->store.index, &loaded[i].key);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 512);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 20, &joined), 0);
	assert_true(f->stub.jobs[0].read_through);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_true(coord_warm_holds(w, ids[0]) && coord_warm_holds(w, ids[1]));
	/* Its row put back: every rank drops its warm pages as the rewrite begins. */
	assert_int_equal(publish(f, 7, 256, 0), SEL_QUEUED);
	assert_int_equal(f->stub.jobs[1].kind, COORD_JOB_STORE);
	assert_false(coord_warm_charged(w, ids[0]));
	assert_int_equal(w->slots_releasing, 4);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 21, &joined), 0);
	assert_int_equal(f->stub.jobs[2].kind, COORD_JOB_FETCH);
	assert_false(f->stub.jobs[2].read_through);
	assert_false(coord_warm_charged(w, ids[0]));
	stub_complete(&f->stub, 2, 0);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	assert_false(coord_warm_holds(w, ids[0]));
	assert_int_equal(w->slots_used, 4 + 1);
	assert_int_equal(w->slots_releasing, 0);
	/* The rewrite done, its pages are read through again. */
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 22, &joined), 0);
	assert_true(f->stub.jobs[3].read_through);
	stub_complete(&f->stub, 3, 0);
	poll_events(f, ev);
	assert_true(coord_warm_holds(w, ids[0]));
	assert_int_equal(w->slots_used, 4 + 4 + 1);
	assert_balanced(f);
}

/*
 * A failed warm store whose unlink cannot be sent leaves its slots on the
 * ranks where it succeeded: the count keeps them used (stranded) until the
 * next start, so no later store or read-through is planned on them.
 */
static void test_store_failed_warm_store_unsent_unlink_strands_slots(void **state)
{
	struct fixture *f = *state;
	struct rec_record_info root = loaded_record(f, 256, 0, true, 1);
	struct coord_warm *w = &f->store.warm;
	struct sel_event ev[64];

	assert_int_equal(coord_store_load(&f->store, &root, 1), 0);
	assert_int_equal(coord_store_set_warm(&f->store, 9, 1, 8192, SEL_WARM_WRITE_THROUGH), 0);
	assert_int_equal(publish(f, 7, 512, 256), SEL_QUEUED);
	assert_int_equal(w->slots_used, 4 + 1);
	f->stub.refuse_unlinks = true;
	stub_complete(&f->stub, 0, -EIO);
	poll_events(f, ev);
	f->stub.refuse_unlinks = false;
	assert_int_equal(f->stub.job_count, 1); /* no unlink went out */
	assert_int_equal(w->slots_stranded, 4 + 1);
	assert_int_equal(w->slots_used, 4 + 1);
	assert_int_equal(w->slots_releasing, 0);
	assert_balanced(f);
}

/*
 * A read-through fetch that fails drops its records' warm copies on every
 * rank; where those drops cannot be submitted it lists them warm instead
 * (the count then holds more than a rank does, never less), counted as a
 * read failure and not a read-through; a later fetch of the chain is then
 * a warm one, and pins, jobs and bytes balance throughout.
 */
static void test_store_read_through_failed_drop_refused(void **state)
{
	struct fixture *f = *state;
	struct rec_record_info loaded[2];
	struct coord_warm *w = &f->store.warm;
	struct sel_event ev[64];
	struct sel_hit hit;
	uint32_t ids[2];
	bool joined;

	loaded[0] = loaded_record(f, 256, 0, true, 1);
	loaded[1] = loaded_record(f, 512, 256, true, 2);
	assert_int_equal(coord_store_load(&f->store, loaded, 2), 0);
	assert_int_equal(coord_store_set_warm(&f->store, 64, 1, 8192, SEL_WARM_WRITE_THROUGH),
			 0);
	for (uint32_t i = 0; i < 2; i++)
		ids[i] = coord_index_find(&f->store.index, &loaded[i].key);
	/* Dropped where the drops go out: nothing stays charged. */
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 512);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 20, &joined), 0);
	assert_true(f->stub.jobs[0].read_through);
	assert_int_equal(w->slots_used, 8 + 1);
	stub_complete(&f->stub, 0, -EIO);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(f->stub.job_count, 3);
	for (uint32_t i = 1; i < 3; i++) {
		assert_int_equal(f->stub.jobs[i].kind, COORD_JOB_WARM_DROP);
		stub_complete(&f->stub, i, 0);
	}
	poll_events(f, ev);
	assert_int_equal(w->slots_used, 0);
	assert_false(coord_warm_holds(w, ids[0]) || coord_warm_holds(w, ids[1]));
	/* Listed where they cannot: warm in the count, not read through. */
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 21, &joined), 0);
	assert_true(f->stub.jobs[3].read_through);
	f->stub.refuse_warm_drops = true;
	stub_complete(&f->stub, 3, -EIO);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_FETCH_FAILED);
	f->stub.refuse_warm_drops = false;
	assert_int_equal(f->stub.job_count, 4);
	assert_true(coord_warm_holds(w, ids[0]) && coord_warm_holds(w, ids[1]));
	assert_int_equal(w->slots_used, 8 + 1);
	assert_int_equal(w->listed_slots, 8 + 1);
	assert_int_equal(w->read_failures, 2);
	assert_int_equal(w->read_throughs, 0);
	/* The next fetch is warm whole: no read-through, a warm hit. */
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 22, &joined), 0);
	assert_false(f->stub.jobs[4].read_through);
	stub_complete(&f->stub, 4, 0);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_FETCHED);
	assert_int_equal(w->hits, 1);
	assert_balanced(f);
}

/*
 * A fetch failing verification drops the record its reason names, and what
 * depends on it, with unlinks on every rank; the root above it stays. A
 * failure that is not a verification (EIO) drops nothing.
 */
static void test_store_failed_verification_drops_record(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit;
	struct rec_key middle;
	bool joined;

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 2, 700, 300), SEL_QUEUED);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 3, 900, 700), SEL_QUEUED);
	stub_complete(&f->stub, 2, 0);
	poll_events(f, ev);
	stub_complete(&f->stub, 3, 0); /* the middle's row drop */
	poll_events(f, ev);
	middle = f->stub.jobs[1].header.key;

	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 20, &joined), 0);
	stub_complete(&f->stub, 4, -EIO);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(f->store.index.node_count, 3);

	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 21, &joined), 0);
	stub_fail_naming(&f->stub, 5, &middle);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(f->store.stats.records_dropped_checksum, 1);
	/* the leaf went first, then the middle: two unlinks */
	assert_int_equal(f->stub.job_count, 8);
	assert_int_equal(f->stub.jobs[6].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[6].key, &f->stub.jobs[2].header.key));
	assert_int_equal(f->stub.jobs[7].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[7].key, &middle));
	assert_int_equal(f->store.index.node_count, 1);
	assert_int_equal(f->store.stats.evictions, 0);
	stub_complete(&f->stub, 6, 0);
	stub_complete(&f->stub, 7, 0);
	poll_events(f, ev);
	assert_balanced(f);
	/* the root still restores; the dropped checkpoint stores again */
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(hit.consumed, 300);
	assert_int_equal(publish(f, 4, 700, 300), SEL_QUEUED);
	stub_complete(&f->stub, 8, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/* A full disk answers Retry for a while, then stores again. */
static void test_store_full_disk_retry(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, -ENOSPC);
	poll_events(f, ev);
	assert_int_equal(ev[0].error, -ENOSPC);
	assert_int_equal(publish(f, 1, 300, 0), SEL_RETRY);
	assert_int_equal(f->stub.job_count, 2); /* the failed store's unlink */
	stub_complete(&f->stub, 1, 0);
	backoff_passed(f);
	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 2, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/* Makes f's conversation another one of 2000 tokens (seed). */
static void other_conversation(struct fixture *f, uint32_t seed)
{
	struct rec_identity model = f->h.model;
	uint32_t tokens[2000];

	rec_history_free(&f->h);
	tu_tokens(tokens, 2000, seed);
	assert_int_equal(rec_history_init(&f->h, &model, tokens, 2000), 0);
}

/*
 * A disk full under the limit: for a while the records take no more than
 * they held then, so after the backoff a new record evicts the least
 * recently used instead of failing on the full disk again; after the hold,
 * the limit applies again.
 */
static void test_store_full_disk_evicts_under_the_limit(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct rec_key first;
	uint64_t held, lowered;
	uint32_t jobs;

	sel_log_set_level(SEL_LOG_ERROR); /* the full disk's warning */
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(publish(f, 1 + i, 300, 0), SEL_QUEUED);
		stub_complete(&f->stub, i, 0);
		other_conversation(f, 900 + i); /* roots of the same size */
	}
	poll_events(f, ev);
	first = f->stub.jobs[0].header.key;
	held = f->store.used_bytes;
	assert_true(held < f->store.limit_bytes / 4);
	assert_int_equal(publish(f, 4, 300, 0), SEL_QUEUED);
	other_conversation(f, 1002);
	stub_complete(&f->stub, 3, -ENOSPC);
	assert_int_equal(poll_events(f, ev), 1);
	assert_int_equal(ev[0].error, -ENOSPC);
	assert_int_equal(f->store.disk_full_bytes, held);
	stub_complete(&f->stub, 4, 0); /* the failed store's unlink */
	poll_events(f, ev);

	/* after the backoff, the least recently used makes room */
	backoff_passed(f);
	assert_int_equal(publish(f, 5, 300, 0), SEL_RETRY);
	assert_int_equal(f->stub.job_count, 6);
	assert_int_equal(f->stub.jobs[5].kind, COORD_JOB_UNLINK);
	assert_true(rec_key_equal(&f->stub.jobs[5].key, &first));
	stub_complete(&f->stub, 5, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 5, 300, 0), SEL_QUEUED);
	other_conversation(f, 1003);
	stub_complete(&f->stub, 6, 0);
	poll_events(f, ev);
	assert_int_equal(f->store.used_bytes, held);
	assert_int_equal(f->store.stats.evictions, 1);

	/* a second full disk within the hold lowers it to what is held then */
	assert_int_equal(publish(f, 6, 300, 0), SEL_RETRY); /* evicts one more */
	stub_complete(&f->stub, 7, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 6, 300, 0), SEL_QUEUED);
	other_conversation(f, 1004);
	stub_complete(&f->stub, 8, -EDQUOT);
	poll_events(f, ev);
	stub_complete(&f->stub, 9, 0);
	poll_events(f, ev);
	lowered = f->store.disk_full_bytes;
	assert_true(lowered < held);
	assert_int_equal(f->store.used_bytes, lowered);

	/* after the hold, the limit applies again: nothing is evicted */
	f->store.disk_full_ns = 0; /* the hold has passed too */
	jobs = f->stub.job_count;
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(publish(f, 7 + i, 300, 0), SEL_QUEUED);
		other_conversation(f, 950 + i);
		stub_complete(&f->stub, jobs + i, 0);
	}
	poll_events(f, ev);
	assert_int_equal(f->stub.job_count, jobs + 3);
	assert_int_equal(f->store.used_bytes, lowered + held);
	assert_int_equal(f->store.stats.evictions, 2);
	assert_balanced(f);
}

/* A hit whose record went away is stale; a full engine queue is Retry. */
static void test_store_stale_hit_and_full_queue(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit;
	bool joined;

	store_root_and_find(f, ev, &hit);
	f->stub.refuse = true;
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 1, &joined),
			 SEL_EQUEUEFULL);
	assert_int_equal(publish(f, 2, 400, 300), SEL_RETRY);
	f->stub.refuse = false;
	/* evict it (a tiny limit), then use the old hit */
	f->store.limit_bytes = 60000;
	assert_int_equal(publish(f, 3, 320, 0), SEL_RETRY);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 1, &joined),
			 SEL_ENOTFOUND);
	assert_balanced(f);
}

/* Lookups count hits and reused tokens. */
static void test_store_lookup_stats(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit;

	assert_false(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(publish(f, 1, 1000, 0), SEL_QUEUED);
	assert_false(coord_store_lookup(&f->store, &f->h, 0, &hit)); /* still writing */
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_true(coord_store_lookup(&f->store, &f->h, 200, &hit));
	assert_int_equal(hit.consumed, 1000);
	assert_int_equal(f->store.stats.lookups, 3);
	assert_int_equal(f->store.stats.hits, 1);
	assert_int_equal(f->store.stats.reused_tokens, 800);
}

/* A failed unlink stops charging its bytes: the store does not wedge. */
static void test_store_failed_reclaim_releases_budget(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];

	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	assert_int_equal(publish(f, 2, 310, 0), SEL_QUEUED);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 3, 320, 0), SEL_RETRY); /* unlinks record 1 */
	assert_int_equal(f->stub.jobs[2].kind, COORD_JOB_UNLINK);
	stub_complete(&f->stub, 2, -EIO);
	poll_events(f, ev);
	assert_balanced(f);
	assert_int_equal(publish(f, 3, 320, 0), SEL_QUEUED);
	stub_complete(&f->stub, 3, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/* A caller that takes one event at a time loses none and never overflows. */
static void test_store_event_ring_never_overflows(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	uint32_t got = 0, round;

	f->stub.refuse_unlinks = true; /* failed stores' unlinks: about events here */

	for (round = 0; round < 90; round++) {
		for (uint32_t i = 0; i < COORD_JOBS_MAX; i++) {
			uint32_t before = f->stub.job_count;

			if (publish(f, round * 100 + i, 300 + i, 0) != SEL_QUEUED)
				break;
			stub_complete(&f->stub, before, -EIO);
		}
		got += coord_store_poll(&f->store, ev, 1);
	}
	/* the ring filled up to its margin (one completion's events and the
	 * slot kept for FATAL); the rest waited in the engine */
	assert_true(f->store.event_count + COORD_WAITERS_MAX + 1 >= COORD_EVENTS_MAX);
	assert_true(f->stub.done_count > 0);
	while (coord_store_poll(&f->store, ev, 1) == 1)
		got++;
	assert_int_equal(got, f->store.stats.store_failures);
	assert_int_equal(got, f->store.stats.published_queued);
	assert_balanced(f);
}

static bool stub_stopped(void *ctx, char *why, size_t why_size)
{
	(void)ctx;
	snprintf(why, why_size, "rank 2's link closed");
	return true;
}

/*
 * The ring one short of full (1023 events: 1007 failed stores and a fetch's
 * 16 waiters), one more completion waiting, then the transport stops: the
 * FATAL event takes the kept slot and nothing more is taken until the
 * caller drains (the room left was computed past zero, and the next
 * completion's event ended the process in an assertion).
 */
static void test_store_fatal_event_then_no_more_room(void **state)
{
	struct fixture *f = *state;
	static struct sel_event ev[COORD_EVENTS_MAX];
	uint32_t fetch_job, stores = 0, got = 0, fatal = 0;
	struct sel_hit hit;
	bool joined;

	f->stub.refuse_unlinks = true; /* failed stores' unlinks: about events here */

	store_root_and_find(f, ev, &hit);
	fetch_job = f->stub.job_count;
	for (uint32_t w = 0; w < COORD_WAITERS_MAX; w++)
		assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 10 + w, &joined),
				 0);
	while (stores < COORD_EVENTS_MAX - 1 - COORD_WAITERS_MAX) {
		for (uint32_t i = 0; i < COORD_JOBS_MAX - 2 &&
				     stores < COORD_EVENTS_MAX - 1 - COORD_WAITERS_MAX; i++) {
			uint32_t before = f->stub.job_count;

			assert_int_equal(publish(f, 5000 + stores, 400 + i, 0), SEL_QUEUED);
			stub_complete(&f->stub, before, -EIO);
			stores++;
		}
		assert_int_equal(coord_store_poll(&f->store, ev, 0), 0);
	}
	stub_complete(&f->stub, fetch_job, 0);
	assert_int_equal(coord_store_poll(&f->store, ev, 0), 0);
	assert_int_equal(f->store.event_count, COORD_EVENTS_MAX - 1);
	assert_int_equal(publish(f, 9999, 499, 0), SEL_QUEUED);
	stub_complete(&f->stub, f->stub.job_count - 1, -EIO);
	f->store.jobs_ops.stopped = stub_stopped;
	assert_int_equal(coord_store_poll(&f->store, ev, 0), 0);
	for (uint32_t n; (n = coord_store_poll(&f->store, ev, COORD_EVENTS_MAX)) > 0;) {
		for (uint32_t i = 0; i < n; i++)
			fatal += ev[i].kind == SEL_EVENT_FATAL;
		got += n;
	}
	assert_int_equal(fatal, 1);
	assert_int_equal(got, 1 + stores + 1 + COORD_WAITERS_MAX);
}

/*
 * A caller polling with max 0 lets the event ring fill: 1008 failed stores
 * (63 jobs at a time), then a fetch with 16 waiters, then the transport
 * stops. The ring keeps a slot for that FATAL event: it is delivered (it
 * was an assertion that ended the process), and every other event after it.
 */
static void test_store_fatal_event_fits_a_full_ring(void **state)
{
	struct fixture *f = *state;
	static struct sel_event ev[COORD_EVENTS_MAX];
	uint32_t fetch_job, got = 0, fatal = 0, fetched = 0;
	struct sel_hit hit;
	bool joined;

	f->stub.refuse_unlinks = true; /* failed stores' unlinks: about events here */

	store_root_and_find(f, ev, &hit);
	fetch_job = f->stub.job_count;
	for (uint32_t w = 0; w < COORD_WAITERS_MAX; w++) {
		assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 10 + w, &joined),
				 0);
		assert_int_equal(joined, w > 0);
	}
	for (uint32_t round = 0; round < 16; round++) {
		for (uint32_t i = 0; i < COORD_JOBS_MAX - 1; i++) {
			uint32_t before = f->stub.job_count;

			assert_int_equal(publish(f, 1000 + round * 100 + i, 400 + i, 0),
					 SEL_QUEUED);
			stub_complete(&f->stub, before, -EIO);
		}
		assert_int_equal(coord_store_poll(&f->store, ev, 0), 0);
	}
	stub_complete(&f->stub, fetch_job, 0);
	assert_int_equal(coord_store_poll(&f->store, ev, 0), 0);
	f->store.jobs_ops.stopped = stub_stopped;
	assert_int_equal(coord_store_poll(&f->store, ev, 0), 0);
	for (uint32_t n; (n = coord_store_poll(&f->store, ev, COORD_EVENTS_MAX)) > 0;) {
		for (uint32_t i = 0; i < n; i++) {
			fatal += ev[i].kind == SEL_EVENT_FATAL;
			fetched += ev[i].kind == SEL_EVENT_FETCHED;
		}
		got += n;
	}
	assert_int_equal(fatal, 1);
	assert_int_equal(fetched, COORD_WAITERS_MAX);
	assert_int_equal(got, 1 + 16 * (COORD_JOBS_MAX - 1) + COORD_WAITERS_MAX);
}

/* The owner keeps its event after cancelling; a joined waiter does not. */
static void test_store_cancel_owner_still_hears(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];
	struct sel_hit hit, other;
	bool joined;

	assert_int_equal(publish(f, 1, 700, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_true(coord_store_lookup(&f->store, &f->h, 0, &hit));
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 30, &joined), 0);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 31, &joined), 0);
	assert_true(joined);
	/* a hit with another resident count is another fetch, not a join */
	assert_true(coord_store_lookup(&f->store, &f->h, 300, &other));
	assert_int_equal(coord_store_fetch(&f->store, &other, f->ids, 2, 32, &joined), 0);
	assert_false(joined);
	assert_int_equal(coord_store_cancel(&f->store, 30), 0);
	assert_int_equal(coord_store_cancel(&f->store, 31), 0);
	stub_complete(&f->stub, 1, 0);
	stub_complete(&f->stub, 2, 0);
	assert_int_equal(poll_events(f, ev), 2);
	assert_int_equal(ev[0].id, 30); /* the owner: its ids are quiet now */
	assert_int_equal(ev[1].id, 32);
	assert_balanced(f);
}

/* A page-only ancestor goes with its last child. */
static void test_store_page_only_ancestor_goes_with_child(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev[64];

	f->store.limit_bytes = 1ull << 30;
	assert_int_equal(publish(f, 1, 300, 0), SEL_QUEUED);
	stub_complete(&f->stub, 0, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 2, 500, 300), SEL_QUEUED);
	stub_complete(&f->stub, 1, 0);
	poll_events(f, ev);
	assert_int_equal(publish(f, 3, 700, 500), SEL_QUEUED);
	stub_complete(&f->stub, 2, 0);
	poll_events(f, ev);          /* 500's row is dropped (job 3) */
	stub_complete(&f->stub, 3, 0);
	poll_events(f, ev);
	/* a tiny limit evicts the leaf 700; page-only 500 goes with it */
	f->store.limit_bytes = f->store.used_bytes;
	assert_int_equal(publish(f, 4, 1200, 0), SEL_OVERSIZE);
	assert_int_equal(publish(f, 5, 130, 0), SEL_RETRY);
	assert_int_equal(f->stub.jobs[4].kind, COORD_JOB_UNLINK);
	assert_int_equal(f->stub.jobs[5].kind, COORD_JOB_UNLINK);
	assert_int_equal(f->stub.jobs[5].key.consumed, 500);
	assert_int_equal(f->store.index.node_count, 1); /* the root, with its row */
	stub_complete(&f->stub, 4, 0);
	stub_complete(&f->stub, 5, 0);
	poll_events(f, ev);
	assert_balanced(f);
}

/* An engine that refuses a job for a reason other than room says so. */
static void test_store_engine_refusal_is_reported(void **state)
{
	struct fixture *f = *state;
	struct sel_publication pub = { .checkpoint = 1, .consumed = 300, .page_ids = f->ids };
	struct sel_event ev[64];
	enum sel_outcome outcome;
	struct sel_hit hit;
	bool joined;

	f->stub.refuse = true;
	f->stub.refuse_error = -EINVAL;
	assert_int_equal(coord_store_publish(&f->store, &f->h, &pub, &outcome), -EINVAL);
	f->stub.refuse = false;
	store_root_and_find(f, ev, &hit);
	f->stub.refuse = true;
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 1, 1, &joined), -EINVAL);
	f->stub.refuse = false;
	assert_balanced(f);
}

/*
 * A noop takes a job slot until it completes, makes no event, and counts;
 * a refusal frees its slot; a full job table refuses; without the noop
 * operation it is not supported.
 */
static void test_store_noop(void **state)
{
	struct fixture *f = *state;
	struct coord_jobs no_noop = f->store.jobs_ops;
	struct sel_event ev[4];
	uint32_t n;

	assert_int_equal(coord_store_noop(&f->store), 0);
	assert_int_equal(coord_store_noop(&f->store), 0);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 2);
	assert_int_equal(f->stub.jobs[0].kind, COORD_JOB_NOOP);
	stub_complete(&f->stub, 0, 0);
	stub_complete(&f->stub, 1, -EIO);
	assert_int_equal(coord_store_poll(&f->store, ev, 4), 0);
	assert_int_equal(f->store.noops_done, 2);
	assert_int_equal(f->store.noops_failed, 1);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);

	f->stub.refuse = true;
	assert_int_equal(coord_store_noop(&f->store), SEL_EQUEUEFULL);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
	f->stub.refuse = false;
	for (n = 0; coord_store_noop(&f->store) == 0; n++)
		;
	assert_int_equal(n, COORD_JOBS_MAX);
	assert_int_equal(coord_store_noop(&f->store), SEL_EQUEUEFULL);
	for (uint32_t i = 0; i < n; i++)
		stub_complete(&f->stub, 2 + i, 0);
	assert_int_equal(coord_store_poll(&f->store, ev, 4), 0);
	assert_int_equal(f->store.noops_done, 2 + COORD_JOBS_MAX);

	no_noop.noop = NULL;
	f->store.jobs_ops = no_noop;
	assert_int_equal(coord_store_noop(&f->store), -ENOTSUP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_store_outcomes_and_dedupe, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_failure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_failed_store_unlinked_on_every_rank, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_child_and_row_drop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_root_when_parent_absent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_row_dropped_record_stored_again, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_failed_row_rewrite_keeps_record, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_failed_row_rewrite_and_undo_drops_record, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_present_needs_a_restorable_chain, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_max_age_sweeps_64_leaves, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_max_age_touch_refreshes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_held_parent_not_expired, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_held_parent_not_evicted, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_links_proven_where_learned, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_row_rewrite_keeps_creation_time, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_oversize, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_store_oversize_counts_ancestors, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_full_index_evicts, setup_two_records,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_eviction_under_limit, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_store_full_disk_evicts_under_the_limit, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_touch_keeps_record_from_eviction, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_touch_refreshes_ancestors, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_compaction_when_leaves_pinned, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_store_join_needs_the_same_chain, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_waiters_and_cancel, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_cancel_after_completion, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_no_join_after_owner_cancelled, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_page_only_record_goes_with_its_last_child,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_bare_page_only_unlink_refused_goes_later,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_bare_page_only_goes_after_rewrite_undone,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_failed_truncate_condemns_record, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_fetch_failure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_child_of_cold_parent_goes_warm_only,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_row_drop_waits_for_child_on_disk, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_read_through_waits_for_released_slots,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_no_read_through_past_a_rewrite, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_failed_warm_store_unsent_unlink_strands_slots,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_read_through_failed_drop_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_failed_verification_drops_record, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_full_disk_retry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_stale_hit_and_full_queue, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_lookup_stats, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_failed_reclaim_releases_budget, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_store_event_ring_never_overflows, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_fatal_event_fits_a_full_ring, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_fatal_event_then_no_more_room, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_store_cancel_owner_still_hears, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_page_only_ancestor_goes_with_child, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_engine_refusal_is_reported, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_noop, setup, teardown),
	};

	return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
