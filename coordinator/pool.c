/*
 * Rank zero's pool session driver: see pool.h.
 */
#include "coordinator/pool.h"

#include "common/base.h"
#include "common/log.h"
#include "selene/selene.h"
#include "shard/pool_share.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum step {
	STEP_NONE,          /* not a pool job: the inner jobs' */
	STEP_PUT_ASKED,     /* put begun, waiting for the manager's put id */
	STEP_PUT_SHARES,    /* every rank sends its share */
	STEP_PUT_OUTCOME,   /* committed or abandoned, waiting for the outcome */
	STEP_CLAIM_ASKED,   /* claim begun, waiting for its grant */
	STEP_CLAIM_SHARES,  /* every rank receives its share */
	STEP_ATTACH,        /* every rank reattaches (a reconnect) */
};

struct pool_job {
	enum step step;
	uint64_t request;       /* put request, put id, or claim id */
	int failure;            /* a failed put's, reported once its outcome came */
	char why[200];
	struct coord_pool_put put;
	/* a claim's request, kept until its grant */
	uint32_t claim_slot;    /* in claims[] */
	struct rec_key first_key;  /* the first record past resident */
	uint32_t first_page_index;
	uint32_t skip_pages, page_id_count, state_slot;
	/*
	 * A local claim whose rank zero share began before the grant
	 * (R-POOL-22): the ranks' completion may come before the grant is
	 * polled (parts_*), and a claim that fails before its peers' shares
	 * went keeps its failure until rank zero's share ended.
	 */
	bool early;
	bool refused;          /* the claim ended with its refusal: nothing to end */
	bool parts_done;
	int parts_result;
	uint64_t parts_bytes;
	char parts_why[200];
	/* a GPU export's (a put whose shares come from the devices) */
	bool exporting;
	uint32_t export_slot;   /* in export_ids[] */
};

struct coord_pool {
	struct coord_jobs inner;
	struct coord_pool_session session;
	struct coord_pool_ranks ranks;
	uint32_t world_size;
	uint32_t page_count;
	uint64_t *refusals;
	struct pool_job jobs[COORD_JOBS_MAX];
	uint32_t *claim_ids[COORD_POOL_CLAIMS_MAX]; /* each page_count page ids */
	bool claim_used[COORD_POOL_CLAIMS_MAX];
	/* each POOL_CHAIN_RECORDS_MAX: an early claim's places, borrowed by rank zero's job */
	struct shard_pool_early *early_places[COORD_POOL_CLAIMS_MAX];
	uint32_t *export_ids[COORD_POOL_GPU_EXPORTS_MAX]; /* each page_count page ids */
	struct rec_header export_header[COORD_POOL_GPU_EXPORTS_MAX];
	uint32_t export_state_slot[COORD_POOL_GPU_EXPORTS_MAX];
	bool export_used[COORD_POOL_GPU_EXPORTS_MAX];
	struct coord_pool_record *chain;            /* a grant's (scratch) */
	struct shard_pool_record *share_chain;      /* the same, for the ranks */
	struct shard_completion done[COORD_JOBS_MAX]; /* pool jobs ended, for poll */
	uint32_t done_count;
	bool attach_done;      /* the reattach job's completion came */
	int attach_result;
	char attach_why[200];
};

uint64_t coord_pool_grace_ns(bool same_host, uint32_t rtt_us)
{
	uint64_t remote = (uint64_t)rtt_us * 1000u * COORD_POOL_GRACE_ROUND_TRIPS;

	if (same_host)
		return COORD_POOL_GRACE_LOCAL_NS;
	return rtt_us == 0 || remote > COORD_POOL_GRACE_MAX_NS ? COORD_POOL_GRACE_MAX_NS : remote;
}

static void finish(struct coord_pool *p, uint64_t job_id, int result, uint64_t bytes,
		   const char *why)
{
	struct pool_job *j = &p->jobs[job_id];

	SEL_ASSERT(p->done_count < COORD_JOBS_MAX);
	if (j->step == STEP_CLAIM_ASKED || j->step == STEP_CLAIM_SHARES)
		p->claim_used[j->claim_slot] = false;
	if (j->exporting)
		p->export_used[j->export_slot] = false;
	j->exporting = false;
	j->step = STEP_NONE;
	p->done[p->done_count++] = (struct shard_completion){
		.job_id = job_id, .result = result, .bytes = result ? 0 : bytes };
	if (result)
		snprintf(p->done[p->done_count - 1].why, sizeof(p->done[0].why), "%s",
			 why && why[0] ? why : sel_strerror(result));
}

/* A refusal by the manager (not a failure of the connection or of a rank). */
static void count_refusal(struct coord_pool *p, int result)
{
	if (result == -EEXIST || result == -ENOENT || result == -ENOSPC ||
	    result == SEL_EQUEUEFULL || result == -EINVAL || result == -ESHUTDOWN)
		(*p->refusals)++;
}

static int pool_put(void *ctx, uint64_t job_id, const struct coord_pool_put *put)
{
	struct coord_pool *p = ctx;
	struct pool_job *j = &p->jobs[job_id];
	int ret;

	SEL_ASSERT(job_id < COORD_JOBS_MAX && j->step == STEP_NONE);
	ret = p->session.put_begin(p->session.ctx, put, p->world_size, &j->request);
	if (ret)
		return ret;
	j->step = STEP_PUT_ASKED;
	j->put = *put;
	j->failure = 0;
	j->exporting = false;
	return 0;
}

/* A GPU export: a put whose shares every rank builds from its device. */
static int pool_export(void *ctx, uint64_t job_id, const struct coord_pool_put *put,
		       const struct shard_pool_export_job *export)
{
	struct coord_pool *p = ctx;
	struct pool_job *j = &p->jobs[job_id];
	uint32_t slot;
	int ret;

	SEL_ASSERT(job_id < COORD_JOBS_MAX && j->step == STEP_NONE);
	for (slot = 0; slot < COORD_POOL_GPU_EXPORTS_MAX && p->export_used[slot]; slot++)
		;
	if (slot == COORD_POOL_GPU_EXPORTS_MAX)
		return SEL_EQUEUEFULL;
	if (export->header->tail_page_count > p->page_count)
		return -EINVAL;
	ret = pool_put(ctx, job_id, put);
	if (ret)
		return ret;
	p->export_used[slot] = true;
	memcpy(p->export_ids[slot], export->page_ids,
	       export->header->tail_page_count * sizeof(uint32_t));
	p->export_header[slot] = *export->header;
	p->export_state_slot[slot] = export->state_slot;
	j->exporting = true;
	j->export_slot = slot;
	return 0;
}

/* Every rank's share of put job j (put_id): from its files, or its device. */
static int put_shares(struct coord_pool *p, uint64_t id, struct pool_job *j, uint64_t put_id)
{
	if (!j->exporting)
		return p->ranks.put(p->ranks.ctx, id, &j->put.key, put_id, j->put.share_bytes);
	return p->ranks.export(p->ranks.ctx, id, &(struct shard_pool_export_job){
		.header = &p->export_header[j->export_slot],
		.page_ids = p->export_ids[j->export_slot],
		.state_slot = p->export_state_slot[j->export_slot], .put_id = put_id });
}

static bool claim_early(struct coord_pool *p, uint64_t job_id, struct pool_job *j,
			const struct coord_pool_claim *claim);

static int pool_claim(void *ctx, uint64_t job_id, const struct coord_pool_claim *claim)
{
	struct coord_pool *p = ctx;
	struct pool_job *j = &p->jobs[job_id];
	uint32_t slot;
	int ret;

	SEL_ASSERT(job_id < COORD_JOBS_MAX && j->step == STEP_NONE && claim->chain_count > 0);
	for (slot = 0; slot < COORD_POOL_CLAIMS_MAX && p->claim_used[slot]; slot++)
		;
	if (slot == COORD_POOL_CLAIMS_MAX)
		return SEL_EQUEUEFULL;
	ret = p->session.claim_begin(p->session.ctx, &claim->key, &j->request);
	if (ret)
		return ret;
	p->claim_used[slot] = true;
	memcpy(p->claim_ids[slot], claim->page_ids, claim->page_id_count * sizeof(uint32_t));
	j->step = STEP_CLAIM_ASKED;
	j->claim_slot = slot;
	j->first_key = claim->chain[0].key;
	j->first_page_index = claim->chain[0].first_page_index;
	j->skip_pages = claim->skip_pages;
	j->page_id_count = claim->page_id_count;
	j->state_slot = claim->state_slot;
	j->failure = 0;
	j->refused = false;
	j->parts_done = false;
	j->early = claim_early(p, job_id, j, claim);
	return 0;
}

/*
 * A local claim (its grant brings rank zero's places, R-POOL-51): rank
 * zero's share starts now with the lookup's whole chain (claim->answer)
 * and each record's place and stamp, its skip counting the records at or
 * below resident as the grant's will. True when it went; false leaves
 * every share to the grant (not local, no answer places, a chain whose
 * pages do not add up, or a job refused). A chain with a record on the
 * manager's disk tier (stamp 0) goes at the grant too: its grant waits
 * for that record's read back, and rank zero's transfer thread, which an
 * early share holds until the grant, must not wait for a disk.
 */
static bool claim_early(struct coord_pool *p, uint64_t job_id, struct pool_job *j,
			const struct coord_pool_claim *claim)
{
	struct shard_pool_early *early = p->early_places[j->claim_slot];
	uint32_t count = claim->answer_count, first;
	uint64_t pages = 0, before = 0;

	if (!p->ranks.claim_early || !p->session.claim_local || !claim->answer ||
	    count < claim->chain_count || count > POOL_CHAIN_RECORDS_MAX ||
	    !p->session.claim_local(p->session.ctx, j->request))
		return false;
	first = count - claim->chain_count;
	for (uint32_t i = 0; i < count; i++) {
		const struct coord_pool_record *r = &claim->answer[i];

		if (r->stamp == 0)
			return false; /* on the manager's disk: R-POOL-22 */
		if (i < first)
			before += r->tail_page_count;
		pages += r->tail_page_count;
		p->share_chain[i] = (struct shard_pool_record){
			.key = r->key, .first_page_index = r->first_page_index,
			.tail_page_count = r->tail_page_count, .row = r->row };
		early[i] = (struct shard_pool_early){ .offset = r->place_offset,
						      .bytes = r->place_bytes, .stamp = r->stamp };
	}
	if (before + j->skip_pages > pages || pages - before - j->skip_pages != j->page_id_count)
		return false;
	return p->ranks.claim_early(p->ranks.ctx, job_id, &(struct shard_pool_claim_job){
		.claim_id = j->request, .chain = p->share_chain, .chain_count = count,
		.skip_pages = (uint32_t)(before + j->skip_pages),
		.page_ids = p->claim_ids[j->claim_slot], .state_slot = j->state_slot,
		.early = early }) == 0;
}

/*
 * A claim that failed with result (why) on the session's side: every share
 * that went must end before the claim ends and the job completes (rank
 * zero's early share may be copying into the page ids); the peers' that
 * did not go never will.
 */
static void claim_fail(struct coord_pool *p, uint64_t job_id, int result, const char *why,
		       bool end_claim)
{
	struct pool_job *j = &p->jobs[job_id];

	if (!j->early || j->parts_done) {
		if (end_claim)
			p->session.claim_end(p->session.ctx, j->request, result);
		finish(p, job_id, result, 0, why);
		return;
	}
	if (p->world_size > 1)
		p->ranks.claim_cancel(p->ranks.ctx, job_id, result, why);
	j->failure = result;
	j->refused = !end_claim;
	snprintf(j->why, sizeof(j->why), "%s", why);
	j->step = STEP_CLAIM_SHARES; /* ends with rank zero's share */
}

/*
 * A grant of count records (p->chain, root first): the claim goes to every
 * rank with the whole chain, its skip counting the records at or below
 * resident, when the chain still holds the hit's records; otherwise the
 * pool changed since the lookup and the claim fails (the caller
 * recomputes).
 */
static void claim_granted(struct coord_pool *p, uint64_t job_id, uint32_t count)
{
	struct pool_job *j = &p->jobs[job_id];
	uint64_t pages = 0, before = 0;
	uint32_t first = count;
	int ret;

	for (uint32_t i = 0; i < count; i++) {
		if (rec_key_equal(&p->chain[i].key, &j->first_key) &&
		    p->chain[i].first_page_index == j->first_page_index)
			first = i;
		if (first == count)
			before += p->chain[i].tail_page_count;
		pages += p->chain[i].tail_page_count;
		p->share_chain[i] = (struct shard_pool_record){
			.key = p->chain[i].key, .first_page_index = p->chain[i].first_page_index,
			.tail_page_count = p->chain[i].tail_page_count, .row = p->chain[i].row };
	}
	if (first == count || before + j->skip_pages > pages ||
	    pages - before - j->skip_pages != j->page_id_count) {
		claim_fail(p, job_id, SEL_ENOTFOUND, "the pool's chain changed since the lookup",
			   true);
		return;
	}
	/* an early claim in a world of one: rank zero's share is the claim */
	ret = j->early && p->world_size == 1 ? 0 :
	      p->ranks.claim(p->ranks.ctx, job_id, &(struct shard_pool_claim_job){
		.claim_id = j->request, .chain = p->share_chain, .chain_count = count,
		.skip_pages = (uint32_t)(before + j->skip_pages),
		.page_ids = p->claim_ids[j->claim_slot], .state_slot = j->state_slot },
		j->page_id_count);
	if (ret) {
		claim_fail(p, job_id, ret, "the claim could not reach every rank", true);
		return;
	}
	j->step = STEP_CLAIM_SHARES;
	if (j->early && j->parts_done) {
		p->session.claim_end(p->session.ctx, j->request, j->parts_result);
		finish(p, job_id, j->parts_result, j->parts_bytes, j->parts_why);
	}
}

/*
 * Why a claim got no grant: a refusal, or the session's connection failed
 * meanwhile; a manager that sent nothing for POOL_NO_PROGRESS_MS while the
 * grant was awaited ended it (R-POOL-52, -ETIMEDOUT), so the claim never
 * waits longer than that for a silent manager.
 */
static const char *claim_failure_why(int result, char *why, size_t why_size)
{
	if (result == -ETIMEDOUT)
		snprintf(why, why_size, "the pool manager sent nothing for %u ms while the claim "
			 "waited for its grant (no progress)", POOL_NO_PROGRESS_MS);
	else if (result == -EEXIST || result == -ENOENT || result == -ENOSPC ||
		 result == SEL_EQUEUEFULL || result == -EINVAL || result == -ESHUTDOWN)
		snprintf(why, why_size, "the pool refused the claim");
	else
		snprintf(why, why_size, "the pool connection failed before the claim's grant");
	return why;
}

/* Moves every pool job waiting on the session one step, where its answer came. */
static void advance(struct coord_pool *p)
{
	for (uint64_t id = 0; id < COORD_JOBS_MAX; id++) {
		struct pool_job *j = &p->jobs[id];
		uint64_t put_id;
		uint32_t count;
		int ret;

		switch (j->step) {
		case STEP_PUT_ASKED:
			ret = p->session.put_ready(p->session.ctx, j->request, &put_id);
			if (ret == 0)
				break;
			if (ret < 0) {
				count_refusal(p, ret);
				finish(p, id, ret, 0, "the pool refused the put");
				break;
			}
			j->request = put_id;
			ret = put_shares(p, id, j, put_id);
			if (ret) {
				/* the put is abandoned; its outcome ends it */
				p->session.put_commit(p->session.ctx, put_id, false);
				j->failure = ret;
				snprintf(j->why, sizeof(j->why), "the put could not reach every rank");
				j->step = STEP_PUT_OUTCOME;
				break;
			}
			j->step = STEP_PUT_SHARES;
			break;
		case STEP_PUT_OUTCOME:
			ret = p->session.put_outcome(p->session.ctx, j->request);
			if (ret == 0)
				break;
			if (j->failure)
				finish(p, id, j->failure, 0, j->why);
			else
				finish(p, id, ret == 1 ? 0 : ret, j->put.share_bytes,
				       "the pool did not commit the put");
			break;
		case STEP_CLAIM_ASKED:
			ret = p->session.claim_granted(p->session.ctx, j->request, p->chain,
						       POOL_CHAIN_RECORDS_MAX, &count);
			if (ret == 0)
				break;
			if (ret < 0) {
				char why[200];

				count_refusal(p, ret);
				/* the claim ended with its refusal: nothing to end */
				claim_fail(p, id, ret, claim_failure_why(ret, why, sizeof(why)),
					   false);
				break;
			}
			claim_granted(p, id, count);
			break;
		default:
			break;
		}
	}
}

/* A rank job of a pool job ended on every rank: its next step. */
static void shares_done(struct coord_pool *p, const struct shard_completion *c)
{
	struct pool_job *j = &p->jobs[c->job_id];

	if (j->step == STEP_CLAIM_ASKED) {
		/* an early claim's shares ended before its grant was polled */
		SEL_ASSERT(j->early);
		j->parts_done = true;
		j->parts_result = c->result;
		j->parts_bytes = c->bytes;
		snprintf(j->parts_why, sizeof(j->parts_why), "%s", c->why);
		return;
	}
	if (j->step == STEP_CLAIM_SHARES) {
		int result = j->failure ? j->failure : c->result;

		if (!j->refused)
			p->session.claim_end(p->session.ctx, j->request, result);
		finish(p, c->job_id, result, c->bytes, j->failure ? j->why : c->why);
		return;
	}
	SEL_ASSERT(j->step == STEP_PUT_SHARES);
	p->session.put_commit(p->session.ctx, j->request, c->result == 0);
	if (c->result) {
		j->failure = c->result;
		snprintf(j->why, sizeof(j->why), "%s", c->why);
	}
	j->step = STEP_PUT_OUTCOME;
}

static uint32_t pool_poll(void *ctx, struct shard_completion *out, uint32_t max)
{
	struct coord_pool *p = ctx;
	struct shard_completion c;
	uint32_t n = 0;

	advance(p);
	/* One at a time: a rank job of a pool job is taken here, never handed out. */
	while (n < max && p->inner.poll(p->inner.ctx, &c, 1) == 1) {
		if (c.job_id < COORD_JOBS_MAX && p->jobs[c.job_id].step == STEP_ATTACH) {
			p->jobs[c.job_id].step = STEP_NONE;
			p->attach_done = true;
			p->attach_result = c.result;
			snprintf(p->attach_why, sizeof(p->attach_why), "%s", c.why);
		} else if (c.job_id < COORD_JOBS_MAX &&
		    (p->jobs[c.job_id].step == STEP_PUT_SHARES ||
		     p->jobs[c.job_id].step == STEP_CLAIM_SHARES ||
		     (p->jobs[c.job_id].step == STEP_CLAIM_ASKED && p->jobs[c.job_id].early)))
			shares_done(p, &c);
		else
			out[n++] = c;
	}
	advance(p);
	while (n < max && p->done_count > 0) {
		out[n++] = p->done[0];
		memmove(p->done, p->done + 1, --p->done_count * sizeof(p->done[0]));
	}
	return n;
}

static int fwd_store(void *ctx, uint64_t id, const struct shard_store_job *job)
{
	struct coord_pool *p = ctx;

	return p->inner.store(p->inner.ctx, id, job);
}

static int fwd_fetch(void *ctx, uint64_t id, const struct shard_fetch_job *job)
{
	struct coord_pool *p = ctx;

	return p->inner.fetch(p->inner.ctx, id, job);
}

static int fwd_truncate(void *ctx, uint64_t id, const struct rec_key *key)
{
	struct coord_pool *p = ctx;

	return p->inner.truncate(p->inner.ctx, id, key);
}

static int fwd_unlink(void *ctx, uint64_t id, const struct rec_key *key)
{
	struct coord_pool *p = ctx;

	return p->inner.unlink(p->inner.ctx, id, key);
}

static int fwd_noop(void *ctx, uint64_t id)
{
	struct coord_pool *p = ctx;

	return p->inner.noop ? p->inner.noop(p->inner.ctx, id) : -ENOTSUP;
}

static int fwd_warm_drop(void *ctx, uint64_t id, const struct rec_key *key)
{
	struct coord_pool *p = ctx;

	return p->inner.warm_drop ? p->inner.warm_drop(p->inner.ctx, id, key) : -ENOTSUP;
}

static bool fwd_stopped(void *ctx, char *why, size_t why_size)
{
	struct coord_pool *p = ctx;

	return p->inner.stopped && p->inner.stopped(p->inner.ctx, why, why_size);
}

bool coord_pool_busy(const struct coord_pool *p)
{
	for (uint32_t id = 0; id < COORD_JOBS_MAX; id++)
		if (p->jobs[id].step != STEP_NONE && p->jobs[id].step != STEP_ATTACH)
			return true;
	return p->done_count > 0;
}

void coord_pool_expect_attach(struct coord_pool *p, uint64_t job_id)
{
	SEL_ASSERT(job_id < COORD_JOBS_MAX && p->jobs[job_id].step == STEP_NONE);
	p->jobs[job_id].step = STEP_ATTACH;
	p->attach_done = false;
}

int coord_pool_attach_result(struct coord_pool *p, int *result, char *why, size_t why_size)
{
	if (!p->attach_done)
		return 0;
	p->attach_done = false;
	*result = p->attach_result;
	snprintf(why, why_size, "%s", p->attach_why);
	return 1;
}

void coord_pool_jobs(struct coord_pool *p, struct coord_jobs *jobs)
{
	*jobs = (struct coord_jobs){
		.ctx = p, .store = fwd_store, .fetch = fwd_fetch, .truncate = fwd_truncate,
		.unlink = fwd_unlink, .noop = p->inner.noop ? fwd_noop : NULL,
		.warm_drop = p->inner.warm_drop ? fwd_warm_drop : NULL, .poll = pool_poll,
		.stopped = p->inner.stopped ? fwd_stopped : NULL,
		.pool_put = pool_put, .pool_claim = pool_claim,
		.pool_export = p->ranks.export ? pool_export : NULL,
	};
}

int coord_pool_open(const struct coord_jobs *inner, const struct coord_pool_session *session,
		    const struct coord_pool_ranks *ranks, uint32_t world_size,
		    uint32_t page_count, uint64_t *refusals, struct coord_pool **out)
{
	struct coord_pool *p = calloc(1, sizeof(*p));
	bool allocated = p != NULL;

	SEL_ASSERT(!ranks->claim_early || world_size == 1 || ranks->claim_cancel);
	*out = NULL;
	if (p) {
		p->inner = *inner;
		p->session = *session;
		p->ranks = *ranks;
		p->world_size = world_size;
		p->page_count = page_count;
		p->refusals = refusals;
		p->chain = calloc(POOL_CHAIN_RECORDS_MAX, sizeof(*p->chain));
		p->share_chain = calloc(POOL_CHAIN_RECORDS_MAX, sizeof(*p->share_chain));
		allocated = p->chain && p->share_chain;
		for (uint32_t i = 0; i < COORD_POOL_CLAIMS_MAX; i++) {
			p->claim_ids[i] = calloc(page_count ? page_count : 1, sizeof(uint32_t));
			allocated = allocated && p->claim_ids[i];
			if (ranks->claim_early) {
				p->early_places[i] = calloc(POOL_CHAIN_RECORDS_MAX,
							   sizeof(*p->early_places[i]));
				allocated = allocated && p->early_places[i];
			}
		}
		for (uint32_t i = 0; i < COORD_POOL_GPU_EXPORTS_MAX; i++) {
			p->export_ids[i] = calloc(page_count ? page_count : 1, sizeof(uint32_t));
			allocated = allocated && p->export_ids[i];
		}
	}
	if (!allocated) {
		coord_pool_close(p);
		return -ENOMEM;
	}
	*out = p;
	return 0;
}

void coord_pool_close(struct coord_pool *p)
{
	if (!p)
		return;
	for (uint32_t i = 0; i < COORD_POOL_CLAIMS_MAX; i++) {
		free(p->claim_ids[i]);
		free(p->early_places[i]);
	}
	for (uint32_t i = 0; i < COORD_POOL_GPU_EXPORTS_MAX; i++)
		free(p->export_ids[i]);
	free(p->chain);
	free(p->share_chain);
	free(p);
}
