/*
 * The instance side of the pool, rank zero's policy (coordinator/store.h,
 * docs/DESIGN.md section 13), with a stub in place of the shard engine and
 * the pool session: every job is recorded and completed by the test. Covers
 * the cascade: records past the headroom are put (ancestors first, root
 * side first), kept and pinned until the pool answers, then dropped; a
 * refused put drops as without a pool, and so do its descendants; puts in
 * flight stay bounded; no pool means no pool job and no pool state.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/log.h"
#include "coordinator/pool.h"
#include "coordinator/store.h"
#include "shard/pool_share.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STUB_JOBS_MAX 1024
#define HISTORIES 8

struct stub_job {
	enum coord_job_kind kind;
	uint64_t id;
	struct rec_key key;          /* store (its header's), truncate, unlink, put */
	struct coord_pool_put put;   /* put */
	bool done;
};

struct stub {
	struct stub_job jobs[STUB_JOBS_MAX];
	uint32_t job_count;
	struct shard_completion done[STUB_JOBS_MAX];
	uint32_t done_count;
	/* the session's lookups */
	struct rec_key keys[COORD_POOL_CANDIDATES_MAX]; /* the last lookup's */
	uint32_t key_count;
	uint32_t lookups, forgotten;
	uint64_t next_ticket;
	int answer_result;             /* 0: not yet; 1: answer below; < 0: failed */
	struct coord_pool_record answer[8];
	uint32_t answer_count;
	struct coord_pool_claim claim; /* the last claim (chain copied) */
	struct coord_pool_record claim_chain[8];
	uint32_t claim_pages[64];
	/* holders and exports: every HOLDS sent, in order; exports to hand out; their ends */
	struct {
		uint8_t op;
		uint32_t count;
		struct rec_key first;
	} holds[64];
	uint32_t hold_count;
	uint64_t export_ids[8];
	struct rec_key export_keys[8];
	uint32_t exports_queued, exports_taken;
	uint64_t ended_ids[8];
	int ended_results[8];
	uint32_t ended_count;
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
	stub_add(ctx, COORD_JOB_STORE, id)->key = job->header->key;
	return 0;
}

static int stub_fetch(void *ctx, uint64_t id, const struct shard_fetch_job *job)
{
	(void)job;
	stub_add(ctx, COORD_JOB_FETCH, id);
	return 0;
}

static int stub_truncate(void *ctx, uint64_t id, const struct rec_key *key)
{
	stub_add(ctx, COORD_JOB_TRUNCATE, id)->key = *key;
	return 0;
}

static int stub_unlink(void *ctx, uint64_t id, const struct rec_key *key)
{
	stub_add(ctx, COORD_JOB_UNLINK, id)->key = *key;
	return 0;
}

static int stub_pool_put(void *ctx, uint64_t id, const struct coord_pool_put *put)
{
	struct stub_job *j = stub_add(ctx, COORD_JOB_POOL_PUT, id);

	j->key = put->key;
	j->put = *put;
	return 0;
}

static int stub_pool_claim(void *ctx, uint64_t id, const struct coord_pool_claim *claim)
{
	struct stub *st = ctx;

	SEL_ASSERT(claim->chain_count <= 8 && claim->page_id_count <= 64);
	stub_add(st, COORD_JOB_POOL_CLAIM, id)->key = claim->key;
	st->claim = *claim;
	memcpy(st->claim_chain, claim->chain, claim->chain_count * sizeof(*claim->chain));
	memcpy(st->claim_pages, claim->page_ids, claim->page_id_count * sizeof(uint32_t));
	return 0;
}

static int stub_lookup(void *ctx, const struct rec_key *keys, uint32_t count, uint64_t *ticket)
{
	struct stub *st = ctx;

	memcpy(st->keys, keys, count * sizeof(*keys));
	st->key_count = count;
	st->lookups++;
	*ticket = ++st->next_ticket;
	return 0;
}

static int stub_answer(void *ctx, uint64_t ticket, struct coord_pool_record *chain, uint32_t max,
		       uint32_t *count)
{
	struct stub *st = ctx;

	(void)ticket;
	if (st->answer_result != 1)
		return st->answer_result;
	SEL_ASSERT(st->answer_count <= max);
	memcpy(chain, st->answer, st->answer_count * sizeof(*chain));
	*count = st->answer_count;
	return 1;
}

static void stub_forget(void *ctx, uint64_t ticket)
{
	(void)ticket;
	((struct stub *)ctx)->forgotten++;
}

static int stub_hold(void *ctx, uint8_t op, const struct rec_key *keys, uint32_t count)
{
	struct stub *st = ctx;

	SEL_ASSERT(st->hold_count < 64);
	st->holds[st->hold_count].op = op;
	st->holds[st->hold_count].count = count;
	if (count)
		st->holds[st->hold_count].first = keys[0];
	st->hold_count++;
	return 0;
}

static int stub_export_next(void *ctx, uint64_t *id, struct rec_key *key)
{
	struct stub *st = ctx;

	if (st->exports_taken == st->exports_queued)
		return 0;
	*id = st->export_ids[st->exports_taken];
	*key = st->export_keys[st->exports_taken++];
	return 1;
}

static void stub_export_end(void *ctx, uint64_t id, int result)
{
	struct stub *st = ctx;

	SEL_ASSERT(st->ended_count < 8);
	st->ended_ids[st->ended_count] = id;
	st->ended_results[st->ended_count++] = result;
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

static void stub_complete(struct stub *st, uint32_t i, int result)
{
	struct stub_job *j = &st->jobs[i];

	SEL_ASSERT(i < st->job_count && !j->done);
	j->done = true;
	st->done[st->done_count++] = (struct shard_completion){ .job_id = j->id,
								.result = result };
	if (result)
		snprintf(st->done[st->done_count - 1].why, 200, "stub failure %d", result);
}

/* The index of the first job of kind not yet completed, or -1. */
static int stub_pending(const struct stub *st, enum coord_job_kind kind)
{
	for (uint32_t i = 0; i < st->job_count; i++)
		if (st->jobs[i].kind == kind && !st->jobs[i].done)
			return (int)i;
	return -1;
}

static uint32_t stub_pending_count(const struct stub *st, enum coord_job_kind kind)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < st->job_count; i++)
		n += st->jobs[i].kind == kind && !st->jobs[i].done;
	return n;
}

/* The pool session, as rank zero's client would answer it (pool/client.h). */
struct session {
	uint32_t begun, commits, commit_false, claims, ended;
	struct coord_pool_put put;      /* the last put begun */
	uint32_t world_size;
	int ready;                      /* put_ready: 0 pending, 1 ready, < 0 refused */
	int outcome;                    /* put_outcome's answer */
	int granted;                    /* claim_granted: 0 pending, 1 granted, < 0 refused */
	struct coord_pool_record grant[8];
	uint32_t grant_count;
	struct rec_key claimed;         /* the last claim's key */
	int end_result;                 /* the last claim_end's */
	/* what every rank was asked */
	uint64_t rank_put_id, rank_claim_id;
	struct shard_pool_record rank_chain[8];
	uint32_t rank_chain_count, rank_skip, rank_pages[64], rank_page_count;
	/* local claims (R-POOL-22): rank zero's share sent before the grant */
	bool local;                     /* claim_local's answer */
	bool early_pending;             /* early_job's peers' shares not yet sent */
	uint32_t early_claims, peer_claims, cancels;
	uint64_t early_job;             /* the job rank zero's early share is */
	int cancel_result;
	struct shard_pool_early early[8];
	uint32_t early_count, early_skip;
};

struct fixture {
	struct session session;
	struct coord_pool *driver;
	struct stub stub;
	struct coord_store store;
	struct rec_geometry g;
	struct rec_history h[HISTORIES]; /* unrelated conversations of 2000 tokens */
	uint32_t ids[64];
	uint64_t record_bytes;           /* one record of 4 pages with its row */
	struct sel_event events[64];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct coord_jobs jobs = { .ctx = &f->stub, .store = stub_store, .fetch = stub_fetch,
				   .truncate = stub_truncate, .unlink = stub_unlink,
				   .poll = stub_poll, .pool_put = stub_pool_put,
				   .pool_claim = stub_pool_claim };
	struct rec_identity model;
	uint32_t tokens[2000];

	tu_geometry(&f->g, 64, 2, 4096, 4096, 0, 1);
	tu_identities(&model, NULL);
	assert_int_equal(coord_store_init(&f->store, &f->g, &model, REC_STATE_ORDINARY,
					  1ull << 30, 1000, &jobs), 0);
	for (uint32_t i = 0; i < HISTORIES; i++) {
		tu_tokens(tokens, 2000, 77 + i);
		assert_int_equal(rec_history_init(&f->h[i], &model, tokens, 2000), 0);
	}
	for (uint32_t i = 0; i < 64; i++)
		f->ids[i] = 100 + i;
	f->record_bytes = rec_geometry_file_bytes(&f->g, 4, true);
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sel_log_set_level(SEL_LOG_INFO);
	for (uint32_t i = 0; i < HISTORIES; i++)
		rec_history_free(&f->h[i]);
	coord_store_destroy(&f->store);
	free(f);
	return 0;
}

static uint32_t poll_all(struct fixture *f)
{
	return coord_store_poll(&f->store, f->events, 64);
}

/* Completes every pending unlink and truncate. */
static void complete_reclaims(struct fixture *f)
{
	int job;

	while ((job = stub_pending(&f->stub, COORD_JOB_UNLINK)) >= 0 ||
	       (job = stub_pending(&f->stub, COORD_JOB_TRUNCATE)) >= 0)
		stub_complete(&f->stub, (uint32_t)job, 0);
	poll_all(f);
}

/* Publishes history i's checkpoint at consumed (4 pages past parent) and stores it. */
static void store_record(struct fixture *f, uint32_t i, uint64_t consumed, uint64_t parent)
{
	struct sel_publication pub = { .checkpoint = consumed, .consumed = consumed,
				       .parent_consumed = parent, .page_ids = f->ids };
	enum sel_outcome outcome;
	int job;

	assert_int_equal(coord_store_publish(&f->store, &f->h[i], &pub, &outcome), 0);
	assert_int_equal(outcome, SEL_QUEUED);
	job = stub_pending(&f->stub, COORD_JOB_STORE);
	assert_true(job >= 0);
	stub_complete(&f->stub, (uint32_t)job, 0);
	poll_all(f);
	complete_reclaims(f); /* the parent's row, dropped once its child committed */
}

static bool indexed(struct fixture *f, uint32_t i, uint64_t consumed)
{
	struct rec_key key;

	rec_history_key_at(&f->h[i], consumed, &key);
	return coord_index_find(&f->store.index, &key) != COORD_NONE;
}

/* The limit that holds n records of 4 pages below the cascade's headroom, and no more. */
static uint64_t limit_for(const struct fixture *f, uint32_t n)
{
	/* keep = limit - limit / 8 must hold n records and not n + 1 */
	return (f->record_bytes * n + f->record_bytes / 2) * COORD_POOL_HEADROOM_DIVISOR /
	       (COORD_POOL_HEADROOM_DIVISOR - 1);
}

/*
 * A chain of four records past the headroom: its leaf is the victim, and
 * the pool takes a record only after its parent, so the root is put
 * first, then each child, one at a time, each pinned while its put is in
 * flight; once the leaf is accepted it is unlinked, and its ancestors
 * stay on disk, known to the pool (never put again).
 */
static void test_pool_store_cascade_puts_ancestors_first(void **state)
{
	struct fixture *f = *state;
	static const uint64_t points[4] = { 256, 512, 768, 1024 };
	const struct coord_node *node;
	uint32_t jobs;
	int job;

	for (uint32_t i = 0; i < 4; i++)
		store_record(f, 0, points[i], i ? points[i - 1] : 0);
	/* dropping the leaf (the only one, with its row) fits the headroom */
	f->store.limit_bytes = (f->store.used_bytes - f->record_bytes / 2) *
			       COORD_POOL_HEADROOM_DIVISOR / (COORD_POOL_HEADROOM_DIVISOR - 1);
	assert_int_equal(coord_store_set_pool(&f->store, true), 0);
	assert_int_equal(f->store.stats.pool_attached, 1);
	for (uint32_t i = 0; i < 4; i++) {
		poll_all(f);
		assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_PUT), 1);
		job = stub_pending(&f->stub, COORD_JOB_POOL_PUT);
		assert_int_equal(f->stub.jobs[job].put.key.consumed, points[i]);
		assert_int_equal(f->stub.jobs[job].put.parent.consumed, i ? points[i - 1] : 0);
		assert_int_equal(f->stub.jobs[job].put.tail_page_count, 4);
		/* as the record is on disk: a parent's row may have been dropped */
		node = &f->store.index.nodes[coord_index_find(&f->store.index,
							      &f->stub.jobs[job].key)];
		assert_int_equal(f->stub.jobs[job].put.row, node->row_present);
		assert_true(i < 3 || node->row_present);
		assert_int_equal(f->stub.jobs[job].put.share_bytes,
				 rec_geometry_file_bytes(&f->g, 4, node->row_present));
		assert_int_equal(node->bytes, f->stub.jobs[job].put.share_bytes);
		/* kept, pinned, until the pool answers: nothing is unlinked yet */
		assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_UNLINK), 0);
		assert_int_equal(node->pins, 1);
		stub_complete(&f->stub, (uint32_t)job, 0);
	}
	poll_all(f);
	assert_int_equal(f->store.stats.pool_puts, 4);
	job = stub_pending(&f->stub, COORD_JOB_UNLINK);
	assert_true(job >= 0);
	assert_int_equal(f->stub.jobs[job].key.consumed, 1024);
	complete_reclaims(f);
	assert_false(indexed(f, 0, 1024));
	/*
	 * Page-only ancestors left without a child go as without a pool (no
	 * lookup can match them); the rest stay on disk, known to the pool.
	 */
	assert_true(indexed(f, 0, 256));
	assert_true(f->store.index.node_count >= 1);
	for (uint32_t i = 0; i < f->store.index.nodes_max; i++)
		if (f->store.index.nodes[i].in_use)
			assert_int_equal(f->store.pool_state[i], COORD_POOL_HELD);
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_PUT), 0);
	assert_int_equal(f->store.stats.evictions, 4 - f->store.index.node_count);
	/* Under the headroom now: nothing more goes. */
	jobs = f->stub.job_count;
	poll_all(f);
	assert_int_equal(f->stub.job_count, jobs);
	/* The next to go is already in the pool: dropped without a second put. */
	f->store.limit_bytes = (f->store.used_bytes - 1) * COORD_POOL_HEADROOM_DIVISOR /
			       (COORD_POOL_HEADROOM_DIVISOR - 1);
	poll_all(f);
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_PUT), 0);
	job = stub_pending(&f->stub, COORD_JOB_UNLINK);
	if (job < 0)
		job = stub_pending(&f->stub, COORD_JOB_TRUNCATE);
	assert_true(job >= 0);
	assert_true(indexed(f, 0, f->stub.jobs[job].key.consumed) ||
		    f->stub.jobs[job].kind == COORD_JOB_UNLINK);
	complete_reclaims(f);
	assert_int_equal(f->store.stats.pool_puts, 4);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
}

/*
 * Unrelated records past the headroom go least recently used first, at
 * most COORD_POOL_PUTS_MAX puts in flight; each is dropped once accepted,
 * and the cascade stops when the records fit the headroom again.
 */
static void test_pool_store_cascade_bounded_in_flight(void **state)
{
	struct fixture *f = *state;
	uint32_t accepted = 0;
	int job;

	for (uint32_t i = 0; i < HISTORIES; i++)
		store_record(f, i, 256, 0);
	f->store.limit_bytes = limit_for(f, 2);
	assert_int_equal(coord_store_set_pool(&f->store, true), 0);
	poll_all(f);
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_PUT), COORD_POOL_PUTS_MAX);
	/* the oldest first */
	job = stub_pending(&f->stub, COORD_JOB_POOL_PUT);
	{
		struct rec_key oldest;

		rec_history_key_at(&f->h[0], 256, &oldest);
		assert_true(rec_key_equal(&f->stub.jobs[job].key, &oldest));
	}
	while ((job = stub_pending(&f->stub, COORD_JOB_POOL_PUT)) >= 0) {
		assert_true(stub_pending_count(&f->stub, COORD_JOB_POOL_PUT) <= COORD_POOL_PUTS_MAX);
		stub_complete(&f->stub, (uint32_t)job, accepted % 2 ? -EEXIST : 0);
		accepted++;
		poll_all(f);
		complete_reclaims(f);
	}
	assert_int_equal(accepted, HISTORIES - 2);
	assert_int_equal(f->store.stats.pool_puts, (HISTORIES - 2) / 2);
	assert_int_equal(f->store.stats.pool_put_failures, 0);
	assert_int_equal(f->store.index.node_count, 2);
	assert_true(indexed(f, HISTORIES - 1, 256) && indexed(f, HISTORIES - 2, 256));
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
}

/*
 * A put the pool refuses (or that fails on a rank) drops its record as
 * without a pool, counted; a descendant of a refused record cannot go to
 * the pool (its parent is not there) and is dropped without a put.
 */
static void test_pool_store_refused_put_drops_as_without(void **state)
{
	struct fixture *f = *state;
	int job;

	store_record(f, 0, 256, 0);
	store_record(f, 0, 512, 256);
	f->store.limit_bytes = limit_for(f, 1);
	assert_int_equal(coord_store_set_pool(&f->store, true), 0);
	poll_all(f);
	job = stub_pending(&f->stub, COORD_JOB_POOL_PUT);
	assert_int_equal(f->stub.jobs[job].key.consumed, 256);
	stub_complete(&f->stub, (uint32_t)job, -ENOSPC);
	poll_all(f);
	assert_int_equal(f->store.stats.pool_put_failures, 1);
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_PUT), 0);
	job = stub_pending(&f->stub, COORD_JOB_UNLINK);
	assert_true(job >= 0);
	assert_int_equal(f->stub.jobs[job].key.consumed, 512);
	complete_reclaims(f);
	assert_true(indexed(f, 0, 256));
	assert_false(indexed(f, 0, 512));
	assert_int_equal(f->store.stats.pool_puts, 0);
	assert_int_equal(f->store.stats.pool_put_failures, 1);
	assert_int_equal(f->store.stats.evictions, 1);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
}

/*
 * A record whose put is in flight is pinned: a publication that needs
 * room evicts around it, never the record whose files every rank reads.
 */
static void test_pool_store_put_in_flight_is_not_evicted(void **state)
{
	struct fixture *f = *state;
	struct sel_publication pub = { .checkpoint = 9, .consumed = 256, .page_ids = f->ids };
	enum sel_outcome outcome;
	struct rec_key first;
	int job;

	store_record(f, 0, 256, 0);
	store_record(f, 1, 256, 0);
	f->store.limit_bytes = limit_for(f, 1);
	assert_int_equal(coord_store_set_pool(&f->store, true), 0);
	poll_all(f);
	job = stub_pending(&f->stub, COORD_JOB_POOL_PUT);
	rec_history_key_at(&f->h[0], 256, &first);
	assert_true(rec_key_equal(&f->stub.jobs[job].key, &first));
	/* Room for a third record is made by evicting the second, not the first. */
	f->store.limit_bytes = 2 * f->record_bytes;
	assert_int_equal(coord_store_publish(&f->store, &f->h[2], &pub, &outcome), 0);
	assert_true(indexed(f, 0, 256));
	assert_false(indexed(f, 1, 256));
	stub_complete(&f->stub, (uint32_t)job, 0);
	poll_all(f);
	complete_reclaims(f);
	while ((job = stub_pending(&f->stub, COORD_JOB_STORE)) >= 0)
		stub_complete(&f->stub, (uint32_t)job, 0);
	poll_all(f);
	complete_reclaims(f);
	assert_int_equal(f->store.stats.pool_puts, 1);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
}

/*
 * Without a pool the cascade does nothing: no pool job, no pool state,
 * records past the headroom stay until a publication needs their room;
 * a store whose jobs cannot put refuses to turn the pool on; turned off,
 * the cascade stops at once.
 */
static void test_pool_store_no_pool_no_work(void **state)
{
	struct fixture *f = *state;

	for (uint32_t i = 0; i < 4; i++)
		store_record(f, i, 256, 0);
	f->store.limit_bytes = limit_for(f, 2);
	poll_all(f);
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_PUT), 0);
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_UNLINK), 0);
	assert_null(f->store.pool_state);
	assert_int_equal(f->store.stats.pool_attached, 0);
	assert_int_equal(coord_store_set_pool(&f->store, true), 0);
	assert_int_equal(coord_store_set_pool(&f->store, false), 0);
	poll_all(f);
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_PUT), 0);
	assert_int_equal(f->store.stats.pool_attached, 0);
	f->store.jobs_ops.pool_put = NULL;
	assert_int_equal(coord_store_set_pool(&f->store, true), -ENOTSUP);
	assert_int_equal(f->store.index.node_count, 4);
}

/* The manager asks the instance to export history i's record at consumed, as id. */
static void ask_export(struct fixture *f, uint64_t id, uint32_t i, uint64_t consumed)
{
	struct stub *st = &f->stub;

	st->export_ids[st->exports_queued] = id;
	rec_history_key_at(&f->h[i], consumed, &st->export_keys[st->exports_queued++]);
}

/*
 * Holders and exports (R-POOL-71, R-POOL-74, R-POOL-75): attaching resets
 * the session's announcements and announces every committed record with
 * its row (not a page-only one); a record committed later is announced as
 * it commits. An export puts the chain root side first, each put not the
 * victim's (nothing is dropped: the records stay indexed), and ends 0 once
 * the record is held; an export of a key the store does not hold, or holds
 * page-only, is refused with -ENOENT at once.
 */
static void test_pool_store_exports_and_holds(void **state)
{
	struct fixture *f = *state;
	struct coord_pool_ops ops = { .ctx = &f->stub, .lookup = stub_lookup,
				      .answer = stub_answer, .forget = stub_forget,
				      .hold = stub_hold, .export_next = stub_export_next,
				      .export_end = stub_export_end };
	int job;

	store_record(f, 0, 256, 0);
	store_record(f, 0, 512, 256);
	store_record(f, 0, 768, 512); /* 512 keeps its pages only (a root keeps its row) */
	assert_int_equal(coord_store_set_pool(&f->store, true), 0);
	assert_int_equal(coord_store_set_pool_lookups(&f->store, &ops, 2000000), 0);
	poll_all(f);
	assert_int_equal(f->stub.hold_count, 2);
	assert_int_equal(f->stub.holds[0].op, COORD_POOL_HOLD_RESET);
	assert_int_equal(f->stub.holds[1].op, COORD_POOL_HOLD_ADD);
	assert_int_equal(f->stub.holds[1].count, 2); /* 256 and 768 */
	/* a record committed now is announced as it commits */
	store_record(f, 1, 256, 0);
	assert_int_equal(f->stub.hold_count, 3);
	assert_int_equal(f->stub.holds[2].op, COORD_POOL_HOLD_ADD);
	assert_int_equal(f->stub.holds[2].count, 1);
	assert_true(indexed(f, 1, 256));

	/* the export of 768: its ancestors first, root side first, then itself */
	ask_export(f, 7, 0, 768);
	for (uint64_t consumed = 256; consumed <= 768; consumed += 256) {
		poll_all(f);
		job = stub_pending(&f->stub, COORD_JOB_POOL_PUT);
		assert_true(job >= 0);
		assert_int_equal(f->stub.jobs[job].key.consumed, consumed);
		assert_int_equal(f->stub.jobs[job].put.row, consumed != 512);
		assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_PUT), 1);
		assert_int_equal(f->stub.ended_count, 0);
		stub_complete(&f->stub, (uint32_t)job, 0);
	}
	poll_all(f);
	poll_all(f);
	assert_int_equal(f->stub.ended_count, 1);
	assert_int_equal(f->stub.ended_ids[0], 7);
	assert_int_equal(f->stub.ended_results[0], 0);
	/* the holder's copy is untouched: the records stay, nothing is unlinked */
	assert_true(indexed(f, 0, 256));
	assert_true(indexed(f, 0, 512));
	assert_true(indexed(f, 0, 768));
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_UNLINK), 0);
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_TRUNCATE), 0);
	assert_int_equal(f->store.stats.pool_puts, 3);

	/* refusals: a key never held, and a page-only record */
	ask_export(f, 8, 2, 256);
	ask_export(f, 9, 0, 512);
	poll_all(f);
	assert_int_equal(f->stub.ended_count, 3);
	assert_int_equal(f->stub.ended_ids[1], 8);
	assert_int_equal(f->stub.ended_results[1], -ENOENT);
	assert_int_equal(f->stub.ended_ids[2], 9);
	assert_int_equal(f->stub.ended_results[2], -ENOENT);
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_PUT), 0);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);

	/* records the cascade drops are withdrawn */
	{
		uint32_t withdrawn = 0;

		f->store.limit_bytes = limit_for(f, 1);
		for (int i = 0; i < 20; i++) {
			poll_all(f);
			while ((job = stub_pending(&f->stub, COORD_JOB_POOL_PUT)) >= 0)
				stub_complete(&f->stub, (uint32_t)job, 0);
			complete_reclaims(f);
		}
		for (uint32_t i = 3; i < f->stub.hold_count; i++)
			if (f->stub.holds[i].op == COORD_POOL_HOLD_WITHDRAW)
				withdrawn += f->stub.holds[i].count;
		assert_false(indexed(f, 0, 768));
		assert_true(withdrawn >= 1);
	}
}

/* Pool lookups on, with a grace period of grace_ms. */
static void lookups_on(struct fixture *f, uint64_t grace_ms)
{
	struct coord_pool_ops ops = { .ctx = &f->stub, .lookup = stub_lookup,
				      .answer = stub_answer, .forget = stub_forget };

	assert_int_equal(coord_store_set_pool(&f->store, true), 0);
	assert_int_equal(coord_store_set_pool_lookups(&f->store, &ops, grace_ms * 1000000ull), 0);
}

/* The pool answers history i's chain: a page-only root at 512, then 1024 with its row. */
static void answer_chain(struct fixture *f, uint32_t i)
{
	f->stub.answer_result = 1;
	f->stub.answer_count = 2;
	f->stub.answer[0] = (struct coord_pool_record){ .first_page_index = 0,
							.tail_page_count = 8, .row = false };
	rec_history_key_at(&f->h[i], 512, &f->stub.answer[0].key);
	f->stub.answer[1] = (struct coord_pool_record){ .first_page_index = 8,
							.tail_page_count = 8, .row = true };
	rec_history_key_at(&f->h[i], 1024, &f->stub.answer[1].key);
}

/*
 * A lookup never waits for the pool: the first sends the history's
 * candidate keys (its length, then each page boundary, longest first) and
 * answers from the local index; while the answer has not come the lookup
 * is pending and asks nothing more; once it has, the next lookup answers
 * with the pool's chain (a pool hit), counted once.
 */
static void test_pool_store_lookup_ticket(void **state)
{
	struct fixture *f = *state;
	struct coord_pool_ticket t = { 0 };
	struct sel_hit hit;

	lookups_on(f, 250);
	assert_false(coord_store_lookup_pool(&f->store, &f->h[0], 0, &t, &hit));
	assert_int_equal(f->stub.lookups, 1);
	assert_int_equal(f->stub.key_count, 1 + 1984 / 64);
	assert_int_equal(f->stub.keys[0].consumed, 2000);
	assert_int_equal(f->stub.keys[1].consumed, 1984);
	assert_int_equal(f->stub.keys[f->stub.key_count - 1].consumed, 64);
	for (uint32_t i = 0; i < f->stub.key_count; i++) {
		struct rec_key want;

		rec_history_key_at(&f->h[0], f->stub.keys[i].consumed, &want);
		assert_true(rec_key_equal(&want, &f->stub.keys[i]));
	}
	assert_true(coord_store_lookup_pending(&f->store, &t));
	assert_false(coord_store_lookup_pool(&f->store, &f->h[0], 0, &t, &hit));
	assert_int_equal(f->stub.lookups, 1);
	answer_chain(f, 0);
	assert_true(coord_store_lookup_pool(&f->store, &f->h[0], 0, &t, &hit));
	assert_int_equal(hit.consumed, 1024);
	assert_int_equal(hit.page_count, 16);
	assert_int_equal(hit.skip_pages, 0);
	assert_true(hit.endpoint & COORD_POOL_HIT_BIT);
	assert_false(coord_store_lookup_pending(&f->store, &t));
	assert_int_equal(f->store.stats.lookups, 3);
	assert_int_equal(f->store.stats.hits, 1);
	assert_int_equal(f->store.stats.pool_hits, 1);
	assert_int_equal(f->store.stats.reused_tokens, 1024);
	/* answered: later lookups of the history are the local index's alone */
	assert_false(coord_store_lookup_pool(&f->store, &f->h[0], 0, &t, &hit));
	assert_int_equal(f->stub.lookups, 1);
}

/*
 * Local tiers first: the pool is asked only for keys longer than the
 * local hit, and a pool chain no longer than it leaves the local answer;
 * a longer one replaces it, its tokens counted once.
 */
static void test_pool_store_lookup_local_first(void **state)
{
	struct fixture *f = *state;
	struct coord_pool_ticket t = { 0 }, t2 = { 0 };
	struct sel_hit hit;

	store_record(f, 0, 1024, 0);
	lookups_on(f, 250);
	assert_true(coord_store_lookup_pool(&f->store, &f->h[0], 0, &t, &hit));
	assert_int_equal(hit.consumed, 1024);
	assert_false(hit.endpoint & COORD_POOL_HIT_BIT);
	assert_int_equal(f->stub.keys[f->stub.key_count - 1].consumed, 1088);
	answer_chain(f, 0); /* ends at 1024: nothing beyond the local hit */
	assert_true(coord_store_lookup_pool(&f->store, &f->h[0], 0, &t, &hit));
	assert_false(hit.endpoint & COORD_POOL_HIT_BIT);
	assert_int_equal(f->store.stats.pool_hits, 0);
	/* another history, whose local hit is shorter than the pool's chain */
	f->stub.answer_result = 0;
	store_record(f, 1, 512, 0);
	assert_true(coord_store_lookup_pool(&f->store, &f->h[1], 0, &t2, &hit));
	assert_int_equal(hit.consumed, 512);
	answer_chain(f, 1);
	assert_true(coord_store_lookup_pool(&f->store, &f->h[1], 0, &t2, &hit));
	assert_int_equal(hit.consumed, 1024);
	assert_true(hit.endpoint & COORD_POOL_HIT_BIT);
	assert_int_equal(f->store.stats.pool_hits, 1);
	assert_int_equal(f->store.stats.reused_tokens, 1024 + 1024 + 512 + 1024);
}

/*
 * A lookup whose answer does not come within the grace period stops
 * waiting: a poll makes the session forget it, it is no longer pending,
 * and its history's lookups answer from the local index. A failed ticket
 * does the same at once.
 */
static void test_pool_store_lookup_grace_period(void **state)
{
	struct fixture *f = *state;
	struct coord_pool_ticket t = { 0 }, t2 = { 0 };
	struct sel_hit hit;

	lookups_on(f, 1);
	assert_false(coord_store_lookup_pool(&f->store, &f->h[0], 0, &t, &hit));
	assert_true(coord_store_lookup_pending(&f->store, &t));
	usleep(3000);
	assert_false(coord_store_lookup_pending(&f->store, &t));
	poll_all(f);
	assert_int_equal(f->stub.forgotten, 1);
	answer_chain(f, 0); /* too late */
	assert_false(coord_store_lookup_pool(&f->store, &f->h[0], 0, &t, &hit));
	assert_int_equal(f->store.stats.pool_hits, 0);
	f->stub.answer_result = -ECONNRESET;
	assert_false(coord_store_lookup_pool(&f->store, &f->h[1], 0, &t2, &hit));
	assert_false(coord_store_lookup_pool(&f->store, &f->h[1], 0, &t2, &hit));
	assert_false(coord_store_lookup_pending(&f->store, &t2));
	assert_int_equal(f->stub.lookups, 2);
}

/*
 * sel_fetch of a pool hit claims its chain (from the first record past
 * resident, skipping the pages resident holds) into the caller's page
 * ids; its completion is FETCHED through poll, counted as a pool claim
 * with its bytes. A hit is claimed once; a failed claim is FETCH_FAILED.
 */
static void test_pool_store_claim(void **state)
{
	struct fixture *f = *state;
	struct coord_pool_ticket t = { 0 }, t2 = { 0 };
	struct sel_hit hit;
	bool joined;
	int job;

	lookups_on(f, 250);
	assert_false(coord_store_lookup_pool(&f->store, &f->h[0], 600, &t, &hit));
	answer_chain(f, 0);
	assert_true(coord_store_lookup_pool(&f->store, &f->h[0], 600, &t, &hit));
	/* the root at 512 lies within resident: the chain starts after it */
	assert_int_equal(hit.skip_pages, 600 / 64 - 512 / 64);
	assert_int_equal(hit.page_count, 8 - 1);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 2, 77, &joined), 0);
	assert_false(joined);
	job = stub_pending(&f->stub, COORD_JOB_POOL_CLAIM);
	assert_true(job >= 0);
	assert_int_equal(f->stub.claim.chain_count, 1);
	assert_int_equal(f->stub.claim_chain[0].key.consumed, 1024);
	assert_true(rec_key_equal(&f->stub.claim.key, &f->stub.answer[1].key));
	assert_int_equal(f->stub.claim.skip_pages, 1);
	assert_int_equal(f->stub.claim.page_id_count, 7);
	assert_int_equal(f->stub.claim_pages[6], 106);
	assert_int_equal(f->stub.claim.state_slot, 2);
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 2, 78, &joined),
			 SEL_ENOTFOUND);
	f->stub.done[f->stub.done_count++] = (struct shard_completion){
		.job_id = f->stub.jobs[job].id, .result = 0, .bytes = 7 * 8192 + 4096 };
	f->stub.jobs[job].done = true;
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCHED);
	assert_int_equal(f->events[0].id, 77);
	assert_int_equal(f->store.stats.pool_claims, 1);
	assert_int_equal(f->store.stats.pool_claim_bytes, 7 * 8192 + 4096);
	assert_int_equal(f->store.stats.fetches, 1);
	/* a claim that fails on some rank fails the fetch: the caller recomputes */
	f->stub.answer_result = 0;
	assert_false(coord_store_lookup_pool(&f->store, &f->h[1], 0, &t2, &hit));
	answer_chain(f, 1);
	assert_true(coord_store_lookup_pool(&f->store, &f->h[1], 0, &t2, &hit));
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 0, 79, &joined), 0);
	job = stub_pending(&f->stub, COORD_JOB_POOL_CLAIM);
	stub_complete(&f->stub, (uint32_t)job, SEL_ECHECKSUM);
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(f->events[0].error, SEL_ECHECKSUM);
	assert_int_equal(f->store.stats.pool_claim_failures, 1);
	assert_int_equal(f->store.stats.fetch_failures, 1);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
}

/*
 * Answers that cannot be restored are not hits: a last record without its
 * row, or a chain whose first record past resident does not start where
 * the record it follows ends.
 */
static void test_pool_store_unusable_answers(void **state)
{
	struct fixture *f = *state;
	struct coord_pool_ticket t = { 0 }, t2 = { 0 };
	struct sel_hit hit;

	lookups_on(f, 250);
	assert_false(coord_store_lookup_pool(&f->store, &f->h[0], 0, &t, &hit));
	answer_chain(f, 0);
	f->stub.answer[1].row = false;
	assert_false(coord_store_lookup_pool(&f->store, &f->h[0], 0, &t, &hit));
	assert_false(coord_store_lookup_pool(&f->store, &f->h[1], 0, &t2, &hit));
	answer_chain(f, 1);
	f->stub.answer[0].first_page_index = 1;
	assert_false(coord_store_lookup_pool(&f->store, &f->h[1], 0, &t2, &hit));
	assert_int_equal(f->store.stats.pool_hits, 0);
	assert_int_equal(f->store.stats.hits, 0);
}

/* Without a pool, a lookup with a ticket is the local lookup: no request, no state. */
static void test_pool_store_lookup_without_pool(void **state)
{
	struct fixture *f = *state;
	struct coord_pool_ticket t = { 0 };
	struct sel_hit hit;

	store_record(f, 0, 512, 0);
	assert_true(coord_store_lookup_pool(&f->store, &f->h[0], 0, &t, &hit));
	assert_int_equal(hit.consumed, 512);
	assert_int_equal(t.state, COORD_TICKET_NONE);
	assert_false(coord_store_lookup_pending(&f->store, &t));
	assert_int_equal(f->stub.lookups, 0);
	assert_null(f->store.pool_keys);
}

static int session_put_begin(void *ctx, const struct coord_pool_put *put, uint32_t world_size,
			     uint64_t *request)
{
	struct session *ss = ctx;

	ss->put = *put;
	ss->world_size = world_size;
	*request = 1000 + ++ss->begun;
	return 0;
}

static int session_put_ready(void *ctx, uint64_t request, uint64_t *put_id)
{
	struct session *ss = ctx;

	(void)request;
	*put_id = 77;
	return ss->ready;
}

static int session_put_commit(void *ctx, uint64_t put_id, bool commit)
{
	struct session *ss = ctx;

	assert_int_equal(put_id, 77);
	ss->commits++;
	ss->commit_false += !commit;
	return 0;
}

static int session_put_outcome(void *ctx, uint64_t put_id)
{
	(void)put_id;
	return ((struct session *)ctx)->outcome;
}

static int session_claim_begin(void *ctx, const struct rec_key *key, uint64_t *claim_id)
{
	struct session *ss = ctx;

	ss->claimed = *key;
	*claim_id = 500 + ++ss->claims;
	return 0;
}

static int session_claim_granted(void *ctx, uint64_t claim_id, struct coord_pool_record *chain,
				 uint32_t max, uint32_t *count)
{
	struct session *ss = ctx;

	(void)claim_id;
	if (ss->granted != 1)
		return ss->granted;
	SEL_ASSERT(ss->grant_count <= max);
	memcpy(chain, ss->grant, ss->grant_count * sizeof(*chain));
	*count = ss->grant_count;
	return 1;
}

static void session_claim_end(void *ctx, uint64_t claim_id, int result)
{
	struct session *ss = ctx;

	(void)claim_id;
	ss->ended++;
	ss->end_result = result;
}

/* Every rank's share: a job in the stub engine, completed by the test. */
static int ranks_put(void *ctx, uint64_t job_id, const struct rec_key *key, uint64_t put_id,
		     uint64_t share_bytes)
{
	struct fixture *f = ctx;

	(void)share_bytes;
	stub_add(&f->stub, COORD_JOB_POOL_PUT, job_id)->key = *key;
	f->session.rank_put_id = put_id;
	return 0;
}

static int ranks_claim(void *ctx, uint64_t job_id, const struct shard_pool_claim_job *claim,
		       uint32_t page_id_count)
{
	struct fixture *f = ctx;
	struct session *ss = &f->session;

	SEL_ASSERT(claim->chain_count <= 8 && page_id_count <= 64 && !claim->early);
	if (ss->early_pending && ss->early_job == job_id) {
		ss->peer_claims++; /* the peers' shares: the job is rank zero's already */
		ss->early_pending = false;
	} else {
		stub_add(&f->stub, COORD_JOB_POOL_CLAIM, job_id);
	}
	ss->rank_claim_id = claim->claim_id;
	memcpy(ss->rank_chain, claim->chain, claim->chain_count * sizeof(*claim->chain));
	ss->rank_chain_count = claim->chain_count;
	ss->rank_skip = claim->skip_pages;
	memcpy(ss->rank_pages, claim->page_ids, page_id_count * sizeof(uint32_t));
	ss->rank_page_count = page_id_count;
	return 0;
}

static bool session_claim_local(void *ctx, uint64_t claim_id)
{
	(void)claim_id;
	return ((struct session *)ctx)->local;
}

/* Rank zero's share before the grant: the stub job every rank's share completes. */
static int ranks_claim_early(void *ctx, uint64_t job_id, const struct shard_pool_claim_job *claim)
{
	struct fixture *f = ctx;
	struct session *ss = &f->session;

	SEL_ASSERT(claim->chain_count <= 8 && claim->early);
	stub_add(&f->stub, COORD_JOB_POOL_CLAIM, job_id);
	ss->early_claims++;
	ss->early_pending = true;
	ss->early_job = job_id;
	ss->rank_claim_id = claim->claim_id;
	memcpy(ss->rank_chain, claim->chain, claim->chain_count * sizeof(*claim->chain));
	memcpy(ss->early, claim->early, claim->chain_count * sizeof(*claim->early));
	ss->early_count = claim->chain_count;
	ss->early_skip = claim->skip_pages;
	return 0;
}

static void ranks_claim_cancel(void *ctx, uint64_t job_id, int result, const char *why)
{
	struct fixture *f = ctx;

	assert_int_equal(job_id, f->session.early_job);
	assert_non_null(why);
	f->session.cancels++;
	f->session.cancel_result = result;
	f->session.early_pending = false;
}

/* The store's jobs go through the session driver of world ranks, over the stub engine. */
static int setup_driver_world(void **state, uint32_t world)
{
	struct fixture *f;
	struct coord_jobs inner, jobs;
	struct coord_pool_ops ops;

	setup(state);
	f = *state;
	inner = f->store.jobs_ops;
	inner.pool_put = NULL;
	inner.pool_claim = NULL;
	assert_int_equal(coord_pool_open(&inner, &(struct coord_pool_session){
		.ctx = &f->session, .put_begin = session_put_begin,
		.put_ready = session_put_ready, .put_commit = session_put_commit,
		.put_outcome = session_put_outcome, .claim_begin = session_claim_begin,
		.claim_local = session_claim_local, .claim_granted = session_claim_granted,
		.claim_end = session_claim_end },
		&(struct coord_pool_ranks){ .ctx = f, .put = ranks_put, .claim = ranks_claim,
					    .claim_early = ranks_claim_early,
					    .claim_cancel = ranks_claim_cancel },
		world, f->g.page_count, &f->store.stats.pool_refusals, &f->driver), 0);
	coord_pool_jobs(f->driver, &jobs);
	f->store.jobs_ops = jobs;
	ops = (struct coord_pool_ops){ .ctx = &f->stub, .lookup = stub_lookup,
				       .answer = stub_answer, .forget = stub_forget };
	assert_int_equal(coord_store_set_pool(&f->store, true), 0);
	assert_int_equal(coord_store_set_pool_lookups(&f->store, &ops, 250000000ull), 0);
	return 0;
}

static int setup_driver(void **state)
{
	return setup_driver_world(state, 2);
}

static int setup_driver_one_rank(void **state)
{
	return setup_driver_world(state, 1);
}

static int teardown_driver(void **state)
{
	struct fixture *f = *state;

	coord_pool_close(f->driver);
	return teardown(state);
}

/*
 * A cascade's put through the session: begun with the record's place and
 * share length for every rank, sent to every rank once the manager gave a
 * put id, committed once every rank's share went, and complete (the
 * record dropped) once the pool said it committed.
 */
static void test_pool_store_driver_put(void **state)
{
	struct fixture *f = *state;
	struct session *ss = &f->session;
	int job;

	store_record(f, 0, 256, 0);
	store_record(f, 1, 256, 0);
	f->store.limit_bytes = limit_for(f, 1);
	poll_all(f);
	assert_int_equal(ss->begun, 1);
	assert_int_equal(ss->world_size, 2);
	assert_int_equal(ss->put.key.consumed, 256);
	assert_int_equal(ss->put.share_bytes, f->record_bytes);
	poll_all(f); /* the manager has not answered: nothing moves */
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_PUT), 0);
	ss->ready = 1;
	poll_all(f);
	job = stub_pending(&f->stub, COORD_JOB_POOL_PUT);
	assert_true(job >= 0);
	assert_int_equal(ss->rank_put_id, 77);
	stub_complete(&f->stub, (uint32_t)job, 0);
	poll_all(f);
	assert_int_equal(ss->commits, 1);
	assert_int_equal(ss->commit_false, 0);
	assert_int_equal(f->store.stats.pool_puts, 0); /* not visible until committed */
	ss->outcome = 1;
	poll_all(f);
	assert_int_equal(f->store.stats.pool_puts, 1);
	job = stub_pending(&f->stub, COORD_JOB_UNLINK);
	assert_true(job >= 0);
	complete_reclaims(f);
	assert_int_equal(f->store.index.node_count, 1);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
}

/*
 * A put the manager refuses is a refusal (counted) and a failed put; one
 * whose share fails on a rank is abandoned (commit 0) and fails with the
 * rank's reason once the manager ends it: either way the record drops as
 * without a pool.
 */
static void test_pool_store_driver_put_failures(void **state)
{
	struct fixture *f = *state;
	struct session *ss = &f->session;
	int job;

	store_record(f, 0, 256, 0);
	store_record(f, 1, 256, 0);
	store_record(f, 2, 256, 0);
	f->store.limit_bytes = limit_for(f, 1);
	ss->ready = -ENOSPC;
	poll_all(f);
	poll_all(f);
	/* two had to go: both put, both refused, both dropped */
	assert_int_equal(ss->begun, 2);
	assert_int_equal(f->store.stats.pool_refusals, 2);
	assert_int_equal(f->store.stats.pool_put_failures, 2);
	complete_reclaims(f);
	assert_int_equal(f->store.index.node_count, 1);
	f->store.limit_bytes = 1ull << 30;
	store_record(f, 3, 256, 0);
	f->store.limit_bytes = limit_for(f, 1);
	ss->ready = 1;
	poll_all(f); /* the put begins */
	poll_all(f); /* its put id came: every rank sends its share */
	job = stub_pending(&f->stub, COORD_JOB_POOL_PUT);
	assert_true(job >= 0);
	stub_complete(&f->stub, (uint32_t)job, -EIO);
	poll_all(f);
	assert_int_equal(ss->commit_false, 1);
	assert_int_equal(f->store.stats.pool_put_failures, 2);
	ss->outcome = -ECANCELED;
	poll_all(f);
	assert_int_equal(f->store.stats.pool_put_failures, 3);
	assert_int_equal(f->store.stats.pool_refusals, 2);
	complete_reclaims(f);
	assert_int_equal(f->store.index.node_count, 1);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
}

/*
 * A claim through the session: begun for the hit's endpoint, and once
 * granted sent to every rank with the whole chain the pool pinned (the
 * records within resident counted in the skip) and the caller's page ids;
 * FETCHED once every rank copied, the claim ended with 0. A grant whose
 * chain no longer holds the hit's records fails the fetch; so does a
 * rank's failure (a manager killed mid-claim), the claim ended with it.
 */
static void test_pool_store_driver_claim(void **state)
{
	struct fixture *f = *state;
	struct session *ss = &f->session;
	struct coord_pool_ticket t = { 0 }, t2 = { 0 }, t3 = { 0 };
	struct sel_hit hit;
	bool joined;
	int job;

	assert_false(coord_store_lookup_pool(&f->store, &f->h[0], 600, &t, &hit));
	answer_chain(f, 0);
	assert_true(coord_store_lookup_pool(&f->store, &f->h[0], 600, &t, &hit));
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 2, 77, &joined), 0);
	assert_int_equal(ss->claims, 1);
	assert_true(rec_key_equal(&ss->claimed, &f->stub.answer[1].key));
	poll_all(f);
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_CLAIM), 0);
	ss->granted = 1;
	ss->grant_count = 2;
	memcpy(ss->grant, f->stub.answer, 2 * sizeof(ss->grant[0]));
	assert_int_equal(poll_all(f), 0);
	job = stub_pending(&f->stub, COORD_JOB_POOL_CLAIM);
	assert_true(job >= 0);
	assert_int_equal(ss->rank_claim_id, 501);
	assert_int_equal(ss->rank_chain_count, 2);
	assert_int_equal(ss->rank_skip, 8 + 1);
	assert_int_equal(ss->rank_page_count, 7);
	assert_int_equal(ss->rank_pages[0], 100);
	assert_true(ss->rank_chain[1].row && !ss->rank_chain[0].row);
	f->stub.done[f->stub.done_count++] = (struct shard_completion){
		.job_id = f->stub.jobs[job].id, .bytes = 1234 };
	f->stub.jobs[job].done = true;
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCHED);
	assert_int_equal(ss->ended, 1);
	assert_int_equal(ss->end_result, 0);
	assert_int_equal(f->store.stats.pool_claim_bytes, 1234);

	/* the pool's chain changed since the lookup */
	f->stub.answer_result = 0;
	assert_false(coord_store_lookup_pool(&f->store, &f->h[1], 0, &t2, &hit));
	answer_chain(f, 1);
	assert_true(coord_store_lookup_pool(&f->store, &f->h[1], 0, &t2, &hit));
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 2, 78, &joined), 0);
	ss->grant_count = 1;
	ss->grant[0] = f->stub.answer[1];
	ss->grant[0].first_page_index = 0;
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(f->events[0].error, SEL_ENOTFOUND);
	assert_int_equal(ss->ended, 2);

	/* a rank fails mid-claim */
	f->stub.answer_result = 0;
	assert_false(coord_store_lookup_pool(&f->store, &f->h[2], 0, &t3, &hit));
	answer_chain(f, 2);
	assert_true(coord_store_lookup_pool(&f->store, &f->h[2], 0, &t3, &hit));
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 2, 79, &joined), 0);
	ss->grant_count = 2;
	memcpy(ss->grant, f->stub.answer, 2 * sizeof(ss->grant[0]));
	poll_all(f);
	job = stub_pending(&f->stub, COORD_JOB_POOL_CLAIM);
	assert_true(job >= 0);
	assert_int_equal(ss->rank_skip, 0);
	stub_complete(&f->stub, (uint32_t)job, -ECONNRESET);
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(f->events[0].error, -ECONNRESET);
	assert_int_equal(ss->end_result, -ECONNRESET);
	assert_int_equal(f->store.stats.pool_claim_failures, 2);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
}

/* The answer's places and stamps for the session rank (R-POOL-22), record i at 1000 * (i + 1). */
static void answer_places(struct fixture *f)
{
	for (uint32_t i = 0; i < f->stub.answer_count; i++) {
		f->stub.answer[i].place_offset = 1000u * (i + 1);
		f->stub.answer[i].place_bytes = 4096;
		f->stub.answer[i].stamp = 40 + i;
	}
}

/* No record of the answer lies on the manager's disk (fetch_answered). */
#define NONE_ON_DISK UINT32_MAX

/*
 * A fetch of h[i]'s pool hit, above resident tokens, for waiter: its
 * lookup asks, the answer comes with places (answer_places; answer
 * record on_disk, unless NONE_ON_DISK, on the manager's disk tier: stamp
 * and place 0), the lookup finds it and the fetch claims it.
 */
static void fetch_answered(struct fixture *f, uint32_t i, uint64_t resident, uint64_t waiter,
			   uint32_t on_disk)
{
	struct coord_pool_ticket t = { 0 };
	struct sel_hit hit;
	bool joined;

	f->session.granted = 0;
	f->stub.answer_result = 0;
	assert_false(coord_store_lookup_pool(&f->store, &f->h[i], resident, &t, &hit));
	answer_chain(f, i);
	answer_places(f);
	if (on_disk != NONE_ON_DISK)
		f->stub.answer[on_disk] = (struct coord_pool_record){
			.key = f->stub.answer[on_disk].key,
			.first_page_index = f->stub.answer[on_disk].first_page_index,
			.tail_page_count = f->stub.answer[on_disk].tail_page_count,
			.row = f->stub.answer[on_disk].row };
	assert_true(coord_store_lookup_pool(&f->store, &f->h[i], resident, &t, &hit));
	assert_int_equal(coord_store_fetch(&f->store, &hit, f->ids, 2, waiter, &joined), 0);
}

/* A claim no share of which went before its grant: granted, its job done, FETCHED. */
static void claim_at_grant(struct fixture *f)
{
	struct session *ss = &f->session;
	int job;

	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_CLAIM), 0);
	ss->granted = 1;
	memcpy(ss->grant, f->stub.answer, 2 * sizeof(ss->grant[0]));
	poll_all(f);
	job = stub_pending(&f->stub, COORD_JOB_POOL_CLAIM);
	assert_true(job >= 0);
	stub_complete(&f->stub, (uint32_t)job, 0);
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCHED);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
}

/*
 * A local claim (R-POOL-22, R-POOL-51): rank zero's share goes with the
 * claim, before its grant, with the lookup's whole chain, its places and
 * stamps and the skip the grant's will have; at the grant only the peers'
 * shares go, and the fetch completes once, when every rank's did. A claim
 * that is not local waits for its grant as before.
 */
static void test_pool_store_driver_claim_early(void **state)
{
	struct fixture *f = *state;
	struct session *ss = &f->session;
	int job;

	ss->local = true;
	fetch_answered(f, 0, 600, 77, NONE_ON_DISK);
	assert_int_equal(ss->early_claims, 1);
	assert_int_equal(ss->rank_claim_id, 501);
	assert_int_equal(ss->early_count, 2);
	assert_int_equal(ss->early_skip, 8 + 1);
	assert_true(rec_key_equal(&ss->rank_chain[0].key, &f->stub.answer[0].key));
	assert_true(ss->rank_chain[1].row && !ss->rank_chain[0].row);
	assert_int_equal(ss->early[0].offset, 1000);
	assert_int_equal(ss->early[1].offset, 2000);
	assert_int_equal(ss->early[1].bytes, 4096);
	assert_int_equal(ss->early[1].stamp, 41);
	job = stub_pending(&f->stub, COORD_JOB_POOL_CLAIM);
	assert_true(job >= 0);
	assert_int_equal(poll_all(f), 0); /* no grant yet: nothing more */
	assert_int_equal(ss->peer_claims, 0);
	ss->granted = 1;
	ss->grant_count = 2;
	memcpy(ss->grant, f->stub.answer, 2 * sizeof(ss->grant[0]));
	assert_int_equal(poll_all(f), 0);
	assert_int_equal(ss->peer_claims, 1);
	assert_int_equal(stub_pending_count(&f->stub, COORD_JOB_POOL_CLAIM), 1);
	assert_int_equal(ss->ended, 0);
	f->stub.done[f->stub.done_count++] = (struct shard_completion){
		.job_id = f->stub.jobs[job].id, .bytes = 1234 };
	f->stub.jobs[job].done = true;
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCHED);
	assert_int_equal(ss->ended, 1);
	assert_int_equal(ss->end_result, 0);
	assert_int_equal(ss->cancels, 0);

	/* not local: every share waits for the grant */
	ss->local = false;
	fetch_answered(f, 1, 600, 78, NONE_ON_DISK);
	assert_int_equal(ss->early_claims, 1);
	claim_at_grant(f);

	/* local, but a record lies on the manager's disk (stamp 0): at the grant */
	ss->local = true;
	fetch_answered(f, 0, 600, 79, 0);
	assert_int_equal(ss->early_claims, 1);
	claim_at_grant(f);
}

/*
 * A local claim refused after rank zero's share began, or whose grant's
 * chain is not the lookup's: the peers' shares are cancelled, and the
 * fetch fails with the refusal only once rank zero's share ended (its
 * early copies land in the caller's pages until then); rank zero's own
 * success does not make it a success.
 */
static void test_pool_store_driver_claim_early_refused(void **state)
{
	struct fixture *f = *state;
	struct session *ss = &f->session;
	int job;

	ss->local = true;
	fetch_answered(f, 0, 600, 77, NONE_ON_DISK);
	job = stub_pending(&f->stub, COORD_JOB_POOL_CLAIM);
	assert_true(job >= 0);
	ss->granted = -ENOENT;
	assert_int_equal(poll_all(f), 0); /* rank zero's share still runs */
	assert_int_equal(ss->cancels, 1);
	assert_int_equal(ss->cancel_result, -ENOENT);
	assert_int_equal(ss->peer_claims, 0);
	assert_int_equal(f->store.stats.pool_refusals, 1);
	stub_complete(&f->stub, (uint32_t)job, 0);
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(f->events[0].error, -ENOENT);
	assert_int_equal(ss->ended, 0); /* the refusal ended it */

	/* granted, but the chain changed since the lookup */
	fetch_answered(f, 1, 0, 78, NONE_ON_DISK);
	job = stub_pending(&f->stub, COORD_JOB_POOL_CLAIM);
	assert_true(job >= 0);
	ss->granted = 1;
	ss->grant_count = 1;
	ss->grant[0] = f->stub.answer[1];
	ss->grant[0].first_page_index = 0;
	assert_int_equal(poll_all(f), 0);
	assert_int_equal(ss->cancels, 2);
	assert_int_equal(ss->cancel_result, SEL_ENOTFOUND);
	assert_int_equal(ss->ended, 0); /* the pins stay until rank zero's share ended */
	stub_complete(&f->stub, (uint32_t)job, -EIO);
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(f->events[0].error, SEL_ENOTFOUND);
	assert_int_equal(ss->ended, 1);
	assert_int_equal(ss->end_result, SEL_ENOTFOUND);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
}

/* A fetch of h[i]'s pool hit (the answer with places) for waiter: rank zero's job index. */
static int fetch_early(struct fixture *f, uint32_t i, uint64_t waiter)
{
	int job;

	fetch_answered(f, i, 600, waiter, NONE_ON_DISK);
	job = stub_pending(&f->stub, COORD_JOB_POOL_CLAIM);
	assert_true(job >= 0);
	return job;
}

/*
 * One rank: rank zero's early share is the whole claim. Done before the
 * grant was polled, the fetch completes at the grant with its result; a
 * refusal outranks rank zero's own result, before or after it ended; the
 * grant sends nothing more and nothing is cancelled.
 */
static void test_pool_store_driver_claim_early_one_rank(void **state)
{
	struct fixture *f = *state;
	struct session *ss = &f->session;
	int job;

	ss->local = true;
	job = fetch_early(f, 0, 77);
	f->stub.done[f->stub.done_count++] = (struct shard_completion){
		.job_id = f->stub.jobs[job].id, .bytes = 1234 };
	f->stub.jobs[job].done = true;
	assert_int_equal(poll_all(f), 0); /* no grant yet */
	ss->granted = 1;
	ss->grant_count = 2;
	memcpy(ss->grant, f->stub.answer, 2 * sizeof(ss->grant[0]));
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCHED);
	assert_int_equal(f->store.stats.pool_claim_bytes, 1234);
	assert_int_equal(ss->ended, 1);
	assert_int_equal(ss->end_result, 0);

	job = fetch_early(f, 1, 78);
	stub_complete(&f->stub, (uint32_t)job, 0);
	assert_int_equal(poll_all(f), 0);
	ss->granted = -ENOENT;
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(f->events[0].error, -ENOENT);

	job = fetch_early(f, 2, 79);
	ss->granted = -ENOENT;
	assert_int_equal(poll_all(f), 0); /* rank zero's copies may still land */
	stub_complete(&f->stub, (uint32_t)job, 0);
	assert_int_equal(poll_all(f), 1);
	assert_int_equal(f->events[0].kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(f->events[0].error, -ENOENT);
	assert_int_equal(ss->ended, 1); /* refusals end their claims themselves */
	assert_int_equal(ss->peer_claims + ss->cancels, 0);
	assert_int_equal(coord_store_jobs_in_flight(&f->store), 0);
}

/*
 * The grace period: 2 ms on the manager's host, four round trips
 * elsewhere, at most 250 ms (also before a round trip was measured).
 */
static void test_pool_store_grace_period_figures(void **state)
{
	(void)state;
	assert_int_equal(coord_pool_grace_ns(true, 0), 2000000);
	assert_int_equal(coord_pool_grace_ns(true, 90000), 2000000);
	assert_int_equal(coord_pool_grace_ns(false, 500), 2000000);
	assert_int_equal(coord_pool_grace_ns(false, 10000), 40000000);
	assert_int_equal(coord_pool_grace_ns(false, 62500), 250000000);
	assert_int_equal(coord_pool_grace_ns(false, 90000), 250000000);
	assert_int_equal(coord_pool_grace_ns(false, 0), 250000000);
	assert_int_equal(coord_pool_grace_ns(false, UINT32_MAX), 250000000);
}

/* A pool export job that must not run: no test here answers the engine's request. */
static int stub_pool_export_unused(void *ctx, uint64_t job_id, const struct coord_pool_put *put,
				   const struct shard_pool_export_job *export)
{
	(void)ctx;
	(void)job_id;
	(void)put;
	(void)export;
	fail_msg("a GPU export's job ran though the engine never pinned it");
	return -EIO;
}

/*
 * R-POOL-79: a GPU export the engine never answers is ended -ETIMEDOUT
 * at POOL_EXPORT_MS (its ask is aged here, not waited for), frees its
 * export slot, and a later answer finds nothing; the manager's next ask of
 * the same key reaches the engine again.
 */
static void test_pool_store_gpu_export_unanswered_ends(void **state)
{
	struct fixture *f = *state;
	struct coord_pool_ops ops = { .ctx = &f->stub, .lookup = stub_lookup,
				      .answer = stub_answer, .forget = stub_forget,
				      .hold = stub_hold, .export_next = stub_export_next,
				      .export_end = stub_export_end };
	uint64_t first = 0, second = 0;
	uint32_t ids[4] = { 1, 2, 3, 4 }, n;

	assert_int_equal(coord_store_set_pool(&f->store, true), 0);
	assert_int_equal(coord_store_set_pool_lookups(&f->store, &ops, 2000000), 0);
	f->store.jobs_ops.pool_export = stub_pool_export_unused;
	assert_int_equal(coord_store_gpu_exports(&f->store, true), 0);
	assert_int_equal(coord_store_gpu_hold(&f->store, 7, &f->h[2], 256), 0);
	ask_export(f, 99, 2, 256);
	n = poll_all(f);
	for (uint32_t k = 0; k < n; k++)
		if (f->events[k].kind == SEL_EVENT_EXPORT_REQUESTED) {
			assert_int_equal(f->events[k].checkpoint, 7);
			first = f->events[k].id;
		}
	assert_true(first != 0);
	/* the engine says nothing: POOL_EXPORT_MS later the export ends */
	for (uint32_t i = 0; i < COORD_POOL_EXPORTS_MAX; i++)
		if (f->store.pool_exports[i].id == 99)
			f->store.pool_exports[i].asked_ns -= (POOL_EXPORT_MS + 1) * 1000000ull;
	poll_all(f);
	assert_int_equal(f->stub.ended_count, 1);
	assert_int_equal(f->stub.ended_ids[0], 99);
	assert_int_equal(f->stub.ended_results[0], -ETIMEDOUT);
	for (uint32_t i = 0; i < COORD_POOL_EXPORTS_MAX; i++)
		assert_true(f->store.pool_exports[i].id == 0);
	/* a late answer finds nothing, pins nothing */
	assert_int_equal(coord_store_export_pinned(&f->store, first, ids, 4, 0), SEL_ENOTFOUND);
	assert_int_equal(coord_store_export_refuse(&f->store, first, -ENOSPC), SEL_ENOTFOUND);
	/* the offer stays: the manager's next ask reaches the engine, under a new id */
	ask_export(f, 100, 2, 256);
	n = poll_all(f);
	for (uint32_t k = 0; k < n; k++)
		if (f->events[k].kind == SEL_EVENT_EXPORT_REQUESTED)
			second = f->events[k].id;
	assert_true(second != 0 && second != first);
	assert_int_equal(coord_store_export_refuse(&f->store, second, SEL_ENOTFOUND), 0);
	poll_all(f);
	assert_int_equal(f->stub.ended_count, 2);
	assert_int_equal(f->stub.ended_results[1], -ENOENT);
	assert_int_equal(f->store.gpu_hold_count, 0); /* gone with the refusal */
}

/*
 * R rounds of an offer of a new checkpoint, the same offer again (-EEXIST)
 * and its eviction, with the table already holding what it holds: the
 * fastest of 5 runs, in ns.
 */
static uint64_t gpu_hold_rounds_ns(struct fixture *f, uint64_t first_checkpoint, uint32_t rounds)
{
	uint64_t best = UINT64_MAX;

	for (int run = 0; run < 5; run++) {
		uint64_t start = sel_monotonic_ns();

		for (uint32_t k = 0; k < rounds; k++) {
			uint64_t ckpt = first_checkpoint + k;

			assert_int_equal(coord_store_gpu_hold(&f->store, ckpt, &f->h[1], 128), 0);
			assert_int_equal(coord_store_gpu_hold(&f->store, ckpt, &f->h[1], 128),
					 -EEXIST);
			assert_int_equal(coord_store_gpu_evicted(&f->store, ckpt), 0);
		}
		if (sel_monotonic_ns() - start < best)
			best = sel_monotonic_ns() - start;
	}
	return best;
}

/*
 * The model thread's offer calls (sel_gpu_hold, sel_gpu_evicted) cost the
 * same with POOL_GPU_HOLDS_MAX - 1 offers held as with 16: no call scans
 * the table (docs/DESIGN.md section 13).
 */
static void test_pool_store_gpu_holds_constant_time(void **state)
{
	struct fixture *f = *state;
	uint64_t few_ns, full_ns;

	assert_int_equal(coord_store_gpu_exports(&f->store, true), 0);
	for (uint64_t c = 1; c <= 16; c++)
		assert_int_equal(coord_store_gpu_hold(&f->store, c, &f->h[0], 64 * (1 + c % 31)), 0);
	few_ns = gpu_hold_rounds_ns(f, 1u << 20, 2000);
	for (uint64_t c = 17; c < POOL_GPU_HOLDS_MAX; c++)
		assert_int_equal(coord_store_gpu_hold(&f->store, c, &f->h[c % HISTORIES],
						      64 * (1 + c % 31)), 0);
	assert_int_equal(coord_store_gpu_hold(&f->store, 1u << 30, &f->h[0], 64), 0);
	assert_int_equal(coord_store_gpu_hold(&f->store, 1u << 31, &f->h[0], 64), SEL_EQUEUEFULL);
	assert_int_equal(coord_store_gpu_evicted(&f->store, 1u << 30), 0);
	full_ns = gpu_hold_rounds_ns(f, 1u << 21, 2000);
	print_message("2000 rounds: %.2f ms with 16 offers, %.2f ms with %u\n", few_ns / 1e6,
		      full_ns / 1e6, POOL_GPU_HOLDS_MAX - 1);
	if (full_ns > 8 * few_ns + 2000000)
		fail_msg("offers cost %.1fx as much with a full table", (double)full_ns / few_ns);
	/* every offer is still found: each evicts once */
	for (uint64_t c = 1; c < POOL_GPU_HOLDS_MAX; c++)
		assert_int_equal(coord_store_gpu_evicted(&f->store, c), 0);
	assert_int_equal(coord_store_gpu_evicted(&f->store, 1), SEL_ENOTFOUND);
	assert_int_equal(f->store.gpu_hold_count, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pool_store_cascade_puts_ancestors_first, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_cascade_bounded_in_flight, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_refused_put_drops_as_without, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_put_in_flight_is_not_evicted, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_no_pool_no_work, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_lookup_ticket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_exports_and_holds, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_lookup_local_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_lookup_grace_period, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_claim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_unusable_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_lookup_without_pool, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_driver_put, setup_driver,
						teardown_driver),
		cmocka_unit_test_setup_teardown(test_pool_store_driver_put_failures, setup_driver,
						teardown_driver),
		cmocka_unit_test_setup_teardown(test_pool_store_driver_claim_early, setup_driver,
						teardown_driver),
		cmocka_unit_test_setup_teardown(test_pool_store_driver_claim_early_refused,
						setup_driver, teardown_driver),
		cmocka_unit_test_setup_teardown(test_pool_store_driver_claim_early_one_rank,
						setup_driver_one_rank, teardown_driver),
		cmocka_unit_test_setup_teardown(test_pool_store_driver_claim, setup_driver,
						teardown_driver),
		cmocka_unit_test(test_pool_store_grace_period_figures),
		cmocka_unit_test_setup_teardown(test_pool_store_gpu_holds_constant_time, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_store_gpu_export_unanswered_ends, setup,
						teardown),
	};

	return cmocka_run_group_tests_name("pool_store", tests, NULL, NULL);
}
