/*
 * The peer agent's job loop: see agent.h. The link's reader thread decodes
 * each JOB and submits it to the shard engine (a job it cannot submit is
 * answered at once); the engine's transfer thread answers each job as it
 * finishes (a completion hook: no hand-off between a job's end and its
 * answer); this thread waits for the link to end and the jobs to drain.
 */
#include "peer/agent.h"

#include "cluster/link.h"
#include "common/base.h"
#include "common/log.h"
#include "record/format.h"
#include "selene/selene.h"
#include "shard/pool_share.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

struct agent {
	const struct peer_agent_options *o;
	struct cluster_link *link;
	uint32_t *page_ids;                       /* geometry.page_count entries */
	struct shard_chain_record *chain;         /* SHARD_CHAIN_RECORDS_MAX */
	struct shard_pool_record *pool_chain;     /* SHARD_CHAIN_RECORDS_MAX */
	pthread_mutex_t lock;
	pthread_cond_t changed; /* closed, or the last job in flight answered */
	bool closed;
	bool bye;       /* rank zero said BYE: its close is the clean end */
	int close_reason;
	char close_why[256];
	uint64_t in_flight;
	struct shard_pool_link *pool_link; /* this rank's, once rank zero asked */
};

/*
 * R-WIRE-21's pool attach: this rank's own connection, given to the engine
 * (a second attach replaces the first: rank zero sends it with no pool job
 * in flight). The answer comes as the noop's completion.
 */
static int pool_attach(struct agent *a, const struct cluster_job_view *v, char *why,
		       size_t why_size)
{
	struct shard_pool_conn conn;
	struct shard_pool_link *link;
	int ret;

	if (!a->o->pool_plan)
		return sel_fail(-ENOTSUP, why, why_size, "rank %u has no pool configured",
				a->o->geometry->rank);
	/*
	 * A reattach after rank zero's session was lost: this rank's old
	 * connection may still be attached, and the manager refuses a second
	 * one of the same rank (R-POOL-18). It ends first.
	 */
	shard_pool_link_cut(a->pool_link, "replaced by rank zero's reattach");
	ret = shard_pool_link_open(a->o->pool_plan, v->pool_address, v->instance_id,
				   POOL_HANDSHAKE_MS, &link, why, why_size);
	if (ret)
		return ret;
	shard_engine_set_pool(a->o->engine, NULL, NULL);
	/* the replaced link closes on the transfer thread, which owns the device */
	if (a->pool_link &&
	    shard_engine_retire(a->o->engine, shard_pool_link_close_ctx, a->pool_link) != 0)
		shard_pool_link_close(a->pool_link);
	a->pool_link = link;
	shard_pool_link_conn(link, &conn);
	ret = shard_engine_set_pool(a->o->engine, &conn, a->o->namespace_id);
	if (ret)
		return sel_fail(ret, why, why_size, "rank %u: out of memory for the pool",
				a->o->geometry->rank);
	return shard_engine_noop(a->o->engine, v->job_id);
}

static void reply(struct agent *a, uint64_t job_id, int result, uint64_t bytes,
		  const char *reason)
{
	struct cluster_job_done done = { .job_id = job_id, .result = result, .bytes = bytes };
	uint8_t buf[512];
	int n;

	/*
	 * Printable text only (R-WIRE-22): a reason may hold a path or
	 * another layer's text, which the encoder would refuse, and the job
	 * would go unanswered.
	 */
	snprintf(done.reason, sizeof(done.reason), "%s", reason ? reason : "");
	cluster_text_make_printable(done.reason);
	n = cluster_job_done_encode(&done, buf, sizeof(buf));
	if (n > 0 && cluster_link_send(a->link, CLUSTER_MSG_JOB_DONE, buf, (uint32_t)n) != 0)
		sel_warn("peer: cannot answer job %llu: the link is full or down",
			 (unsigned long long)job_id);
}

/* A store's header comes from rank zero: made this rank's before use. */
static int store_header(struct agent *a, const struct cluster_job_view *v,
			struct rec_header *h, char *why, size_t why_size)
{
	struct rec_expect expect = { .namespace_id = a->o->namespace_id };
	int ret = rec_header_decode(v->record_header, h, why, why_size);

	if (ret)
		return ret;
	h->fingerprint = a->o->geometry->fingerprint;
	h->first_rank = a->o->geometry->rank;
	expect.geometry = a->o->geometry;
	ret = rec_header_check_expected(h, &expect, why, why_size);
	if (!ret && v->page_id_count != h->tail_page_count)
		ret = SEL_EMISMATCH;
	return ret;
}

static int submit(struct agent *a, const struct cluster_job_view *v, char *why,
		  size_t why_size)
{
	struct rec_header h;
	int ret;

	const struct rec_geometry *g = a->o->geometry;

	/*
	 * The join compares the planes' layout, not how many pages and rows
	 * each rank's device holds: a rank configured with fewer says so here.
	 */
	if (v->page_id_count > g->page_count)
		return sel_fail(-EINVAL, why, why_size,
				"a job of %u pages is more than this rank's %u (page_count must "
				"be the same on every rank)", v->page_id_count, g->page_count);
	if (v->chain_count > SHARD_CHAIN_RECORDS_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < v->page_id_count; i++) {
		a->page_ids[i] = cluster_job_view_page_id(v, i);
		if (a->page_ids[i] >= g->page_count)
			return sel_fail(-EINVAL, why, why_size,
					"page id %u is past this rank's %u pages (page_count must "
					"be the same on every rank)", a->page_ids[i], g->page_count);
	}
	if ((v->kind == CLUSTER_JOB_STORE || v->kind == CLUSTER_JOB_FETCH ||
	     v->kind == CLUSTER_JOB_POOL_CLAIM || v->kind == CLUSTER_JOB_POOL_EXPORT) &&
	    v->state_slot >= g->row_count)
		return sel_fail(-EINVAL, why, why_size,
				"state slot %u is past this rank's %u rows (row_count must be "
				"the same on every rank)", v->state_slot, g->row_count);
	switch (v->kind) {
	case CLUSTER_JOB_STORE:
		ret = store_header(a, v, &h, why, why_size);
		if (ret)
			return ret;
		return shard_engine_store(a->o->engine, v->job_id,
					  &(struct shard_store_job){ .header = &h,
								     .page_ids = a->page_ids,
								     .state_slot = v->state_slot,
								     .warm = v->warm });
	case CLUSTER_JOB_FETCH:
		for (uint32_t i = 0; i < v->chain_count; i++) {
			struct cluster_chain_record r;

			cluster_job_view_chain_record(v, i, &r);
			a->chain[i] = (struct shard_chain_record){ r.key, r.first_page_index,
								   r.tail_page_count };
		}
		return shard_engine_fetch(a->o->engine, v->job_id,
					  &(struct shard_fetch_job){
						  .chain = a->chain, .chain_count = v->chain_count,
						  .skip_pages = v->skip_pages, .page_ids = a->page_ids,
						  .state_slot = v->state_slot,
						  .read_through = v->read_through });
	case CLUSTER_JOB_TRUNCATE:
		return shard_engine_truncate(a->o->engine, v->job_id, &v->key);
	case CLUSTER_JOB_UNLINK:
		return shard_engine_unlink(a->o->engine, v->job_id, &v->key);
	case CLUSTER_JOB_NOOP:
		return shard_engine_noop(a->o->engine, v->job_id);
	case CLUSTER_JOB_WARM_DROP:
		return shard_engine_warm_drop(a->o->engine, v->job_id, &v->key);
	case CLUSTER_JOB_POOL_PUT:
		/* the engine answers -ENOTSUP without a pool connection (R-WIRE-21) */
		return shard_engine_pool_put(a->o->engine, v->job_id, &v->key, v->pool_id,
					     v->share_bytes);
	case CLUSTER_JOB_POOL_CLAIM:
		for (uint32_t i = 0; i < v->chain_count; i++) {
			struct cluster_pool_chain_record r;

			cluster_job_view_pool_chain_record(v, i, &r);
			a->pool_chain[i] = (struct shard_pool_record){
				.key = r.key, .first_page_index = r.first_page_index,
				.tail_page_count = r.tail_page_count, .row = r.row };
		}
		return shard_engine_pool_claim(a->o->engine, v->job_id,
					       &(struct shard_pool_claim_job){
						       .claim_id = v->pool_id,
						       .chain = a->pool_chain,
						       .chain_count = v->chain_count,
						       .skip_pages = v->skip_pages,
						       .page_ids = a->page_ids,
						       .state_slot = v->state_slot });
	case CLUSTER_JOB_POOL_EXPORT:
		/* rank zero's header, made this rank's, as a store's (R-WIRE-21) */
		ret = store_header(a, v, &h, why, why_size);
		if (ret)
			return ret;
		return shard_engine_pool_export(a->o->engine, v->job_id,
						&(struct shard_pool_export_job){
							.header = &h, .page_ids = a->page_ids,
							.state_slot = v->state_slot,
							.put_id = v->pool_id });
	case CLUSTER_JOB_POOL_ATTACH:
		/* a refusal here disables the pool for the instance (R-WIRE-21) */
		return pool_attach(a, v, why, why_size);
	}
	return -EINVAL;
}

static void on_frame(void *ctx, uint16_t type, const uint8_t *payload, uint32_t length)
{
	struct agent *a = ctx;
	struct cluster_job_view v = { 0 };
	char why[200] = "";
	int ret;

	if (type == CLUSTER_MSG_BYE) {
		pthread_mutex_lock(&a->lock);
		a->bye = true;
		pthread_mutex_unlock(&a->lock);
		return;
	}
	if (type != CLUSTER_MSG_JOB) {
		sel_warn("peer: ignoring %s", cluster_msg_name(type));
		return;
	}
	ret = cluster_job_decode(payload, length, &v, why, sizeof(why));
	if (ret) {
		/*
		 * The job id is read before anything can be malformed (the link
		 * passes no JOB shorter than its 9-byte head, and checksums the
		 * payload), so the failure goes to the job rank zero sent.
		 */
		reply(a, v.job_id, ret, 0, why[0] ? why : sel_strerror(ret));
		return;
	}
	/* counted before the engine can complete it, so the count never wraps */
	pthread_mutex_lock(&a->lock);
	a->in_flight++;
	pthread_mutex_unlock(&a->lock);
	ret = submit(a, &v, why, sizeof(why));
	if (ret) {
		pthread_mutex_lock(&a->lock);
		a->in_flight--;
		pthread_mutex_unlock(&a->lock);
		reply(a, v.job_id, ret, 0, why[0] ? why : sel_strerror(ret));
	}
}

/* The engine's transfer thread: answer the job as soon as it finished. */
static void on_complete(void *ctx, const struct shard_completion *c)
{
	struct agent *a = ctx;

	reply(a, c->job_id, c->result, c->bytes, c->why);
	pthread_mutex_lock(&a->lock);
	if (--a->in_flight == 0)
		pthread_cond_signal(&a->changed);
	pthread_mutex_unlock(&a->lock);
}

/* Waits up to 20 ms for the link to close or the last job to be answered. */
static void wait_changed(struct agent *a)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += 20000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&a->lock);
	if (!a->closed || a->in_flight > 0)
		pthread_cond_timedwait(&a->changed, &a->lock, &until);
	pthread_mutex_unlock(&a->lock);
}

/* Answers the completions that reached the engine's ring before the hook. */
static void answer_ring(struct agent *a)
{
	struct shard_completion done[16];
	uint32_t n;

	while ((n = shard_engine_poll(a->o->engine, done, SEL_ARRAY_SIZE(done))) > 0)
		for (uint32_t i = 0; i < n; i++)
			on_complete(a, &done[i]);
}

/*
 * The link never started: waits for the jobs its reader submitted to end
 * (nobody to answer). Returns whether they all did within drain_ns.
 */
static bool drain_unanswered(struct agent *a, uint64_t drain_ns)
{
	uint64_t deadline = sel_monotonic_ns() + drain_ns;
	struct shard_completion done[16];
	uint32_t left;

	for (;;) {
		uint32_t n = shard_engine_poll(a->o->engine, done, SEL_ARRAY_SIZE(done));

		pthread_mutex_lock(&a->lock);
		a->in_flight -= n;
		left = a->in_flight;
		pthread_mutex_unlock(&a->lock);
		if (left == 0)
			return true;
		if (sel_monotonic_ns() > deadline)
			return false;
		if (n == 0)
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
}

static void on_close(void *ctx, int reason, const char *why)
{
	struct agent *a = ctx;

	pthread_mutex_lock(&a->lock);
	a->closed = true;
	a->close_reason = reason;
	snprintf(a->close_why, sizeof(a->close_why), "%s", why);
	pthread_cond_signal(&a->changed);
	pthread_mutex_unlock(&a->lock);
}

int peer_agent_run(const struct peer_agent_options *o, bool *undrained, char *why,
		   size_t why_size)
{
	uint64_t drain_ns = (uint64_t)(o->drain_timeout_ms ? o->drain_timeout_ms : 60000) *
			    1000000u, drain_deadline = 0;
	uint32_t left = 0;
	struct agent a = { .o = o };
	struct cluster_link_options lo = {
		.fd = o->fd, .queue_bytes_max = o->queue_bytes_max ? o->queue_bytes_max : 8u << 20,
		.heartbeat_ms = o->heartbeat_ms, .silence_timeout_ms = o->silence_timeout_ms,
		.send_sequence = o->seq.send, .recv_sequence = o->seq.recv,
		.on_frame = on_frame, .on_close = on_close, .ctx = &a,
	};
	int ret;

	*undrained = false;
	pthread_mutex_init(&a.lock, NULL);
	pthread_cond_init(&a.changed, NULL);
	a.page_ids = calloc(o->geometry->page_count, sizeof(uint32_t));
	a.chain = calloc(SHARD_CHAIN_RECORDS_MAX, sizeof(*a.chain));
	a.pool_chain = calloc(SHARD_CHAIN_RECORDS_MAX, sizeof(*a.pool_chain));
	if (!a.page_ids || !a.chain || !a.pool_chain) {
		close(o->fd); /* owned here until the link takes it */
		ret = -ENOMEM;
		goto out;
	}
	/*
	 * The hook goes in only once the link has started: if one of its
	 * threads cannot be created the link is freed inside the start, and a
	 * job the reader already submitted must not answer on it. Until then
	 * completions wait in the engine's ring, answered just below, or
	 * drained without an answer when the link never came up.
	 */
	ret = cluster_link_start(&lo, &a.link); /* owns the fd, even on failure */
	if (ret) {
		*undrained = !drain_unanswered(&a, drain_ns);
		goto out;
	}
	shard_engine_set_completion_hook(o->engine, on_complete, &a);
	answer_ring(&a);
	for (;;) {
		bool closed;

		wait_changed(&a);
		pthread_mutex_lock(&a.lock);
		closed = a.closed;
		left = a.in_flight;
		pthread_mutex_unlock(&a.lock);
		if (closed && left == 0)
			break;
		if (closed && drain_deadline == 0)
			drain_deadline = sel_monotonic_ns() + drain_ns;
		if (closed && sel_monotonic_ns() > drain_deadline) {
			*undrained = true;
			break;
		}
	}
	if (*undrained) {
		ret = SEL_ESTOPPED;
		snprintf(why, why_size, "%s; %u jobs still running %u ms later: their buffers "
			 "stay allocated", a.close_why[0] ? a.close_why : "rank zero's link ended",
			 left, (unsigned)(drain_ns / 1000000u));
	} else {
		/*
		 * Rank zero closing between frames after BYE is the clean end of a
		 * peer's life; without BYE it stopped or failed (or this peer was
		 * stopped past its timeout and rank zero gave up on it).
		 */
		ret = a.close_reason;
		snprintf(why, why_size, "%s", a.close_why);
		if (ret == 0 && !a.bye) {
			ret = -ECONNRESET;
			snprintf(why, why_size, "rank zero closed the link without BYE: it "
				 "stopped, failed, or gave up on this rank");
		}
	}
	/* no answer may start on a link being closed */
	shard_engine_set_completion_hook(o->engine, NULL, NULL);
	cluster_link_close(a.link, 0);
	if (!*undrained) {
		/* no transfer runs on it any more */
		shard_engine_set_pool(o->engine, NULL, NULL);
		shard_pool_link_close(a.pool_link);
	}
out:
	free(a.page_ids);
	free(a.chain);
	free(a.pool_chain);
	pthread_cond_destroy(&a.changed);
	pthread_mutex_destroy(&a.lock);
	return ret;
}
