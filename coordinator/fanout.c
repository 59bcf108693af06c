/*
 * Rank zero's job transport across ranks: see fanout.h. The model thread
 * submits and polls; the links' reader threads only queue the peers'
 * answers (under a mutex) for the next poll to apply.
 */
#include "coordinator/fanout.h"
#include "shard/pool_share.h"

#include "cluster/link.h"
#include "common/base.h"
#include "common/log.h"
#include "record/format.h"
#include "selene/selene.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Wire ids: the store's job id, and a bit for cleanup unlinks. */
#define CLEANUP_BIT (1ull << 62)

struct pending {
	bool active;
	bool cleaning;        /* unlinking a failed store where it was written */
	bool replaces;        /* a rewrite: never unlinked (shard_store_job) */
	bool peers_unsent;    /* a pool claim begun early: the peers' shares not yet sent */
	bool done_now;        /* every answer counted outside apply: the next poll reports */
	enum coord_job_kind kind;
	uint32_t remaining;   /* answers still expected */
	int result;           /* the first failure */
	char why[200];
	char cleanup_why[200];
	uint64_t bytes;       /* rank zero's */
	uint64_t deadline_ns;
	struct rec_key key;   /* a store's, for cleanup */
	bool *wrote;          /* world entries: the rank answered a store with 0 */
	bool *answered;       /* world entries: this round's answer came (the job's,
				 then its cleanup's); a second one stops the transport */
};

struct answer {
	uint32_t rank;
	struct shard_completion c;
};

struct link_ctx {
	struct coord_fanout *f;
	uint32_t rank;
};

struct coord_fanout {
	struct coord_fanout_options o;
	uint32_t world;
	struct cluster_link **links;    /* by rank - 1 */
	struct link_ctx *link_ctx;
	struct pending pending[COORD_JOBS_MAX];
	uint8_t *frame;                 /* one encoded JOB */
	struct cluster_chain_record chain[COORD_CHAIN_MAX]; /* a fetch's, for encoding */
	struct cluster_pool_chain_record pool_chain[COORD_CHAIN_MAX]; /* a pool claim's */
	pthread_mutex_t lock;           /* answers and stop */
	struct answer *answers;         /* ring of answers_max */
	uint32_t answers_max, answer_head, answer_count;
	bool stopped;
	char stop_why[200];
};

static void stop(struct coord_fanout *f, const char *fmt, const char *what)
{
	pthread_mutex_lock(&f->lock);
	if (!f->stopped) {
		f->stopped = true;
		snprintf(f->stop_why, sizeof(f->stop_why), fmt, what);
		sel_error("transport stopped: %s", f->stop_why);
	}
	pthread_mutex_unlock(&f->lock);
}

static void on_frame(void *ctx, uint16_t type, const uint8_t *payload, uint32_t length)
{
	struct link_ctx *lc = ctx;
	struct coord_fanout *f = lc->f;
	struct cluster_job_done done;
	char why[200];
	bool full;

	if (type != CLUSTER_MSG_JOB_DONE ||
	    cluster_job_done_decode(payload, length, &done, why, sizeof(why)) != 0) {
		stop(f, "%s", "a peer sent a frame out of place");
		return;
	}
	pthread_mutex_lock(&f->lock);
	full = f->answer_count == f->answers_max;
	if (!full) {
		struct answer *a = &f->answers[(f->answer_head + f->answer_count++) %
					       f->answers_max];

		a->rank = lc->rank;
		a->c = (struct shard_completion){ .job_id = done.job_id, .result = done.result,
						  .bytes = done.bytes };
		snprintf(a->c.why, sizeof(a->c.why), "%.190s", done.reason);
	}
	pthread_mutex_unlock(&f->lock);
	/* more answers than jobs could ask for: a peer is answering twice */
	if (full)
		stop(f, "%s", "a peer sent more answers than jobs outstanding");
}

static void on_close(void *ctx, int reason, const char *why)
{
	struct link_ctx *lc = ctx;
	char text[200];

	if (reason == SEL_ESTOPPED)
		return; /* we closed it */
	snprintf(text, sizeof(text), "the link to rank %u ended: %s", lc->rank, why);
	stop(lc->f, "%s", text);
}

static bool is_stopped(struct coord_fanout *f)
{
	bool s;

	pthread_mutex_lock(&f->lock);
	s = f->stopped;
	pthread_mutex_unlock(&f->lock);
	return s;
}

/*
 * Keeps a job's first failure, except that a fetch's or a truncate's
 * failure saying a record is bad (R-READ-4) replaces one that did not (EIO
 * on another rank): rank zero drops the record only on the answer that
 * names it.
 */
static void fail_pending(struct pending *p, int result, const char *why)
{
	bool reads_record = p->kind == COORD_JOB_FETCH || p->kind == COORD_JOB_TRUNCATE;

	if (p->result && (!reads_record || rec_failure_condemns(p->result) ||
			  !rec_failure_condemns(result)))
		return;
	p->result = result;
	snprintf(p->why, sizeof(p->why), "%s", why);
}

/*
 * Sends an encoded JOB to every peer; a refused send is that rank's failure.
 * Every writer but the last rank's is woken first, and this thread writes to
 * the last link itself while they send in parallel.
 */
static void send_all(struct coord_fanout *f, struct pending *p, int length)
{
	for (uint32_t r = 1; r < f->world; r++) {
		int (*send)(struct cluster_link *, uint16_t, const uint8_t *, uint32_t) =
			r + 1 < f->world ? cluster_link_post : cluster_link_send;
		int ret = length < 0 ? length :
			  send(f->links[r - 1], CLUSTER_MSG_JOB, f->frame, (uint32_t)length);

		if (ret) {
			char why[200];

			snprintf(why, sizeof(why), "rank %u: %s", r, sel_strerror(ret));
			fail_pending(p, ret, why);
			p->answered[r] = true; /* counted: an answer from it now is one too many */
			p->remaining--;
		}
	}
}

static struct pending *begin(struct coord_fanout *f, uint64_t job_id, enum coord_job_kind kind)
{
	struct pending *p = &f->pending[job_id];
	bool *wrote = p->wrote, *answered = p->answered;

	SEL_ASSERT(job_id < COORD_JOBS_MAX && !p->active);
	memset(p, 0, sizeof(*p));
	p->wrote = wrote;
	p->answered = answered;
	memset(p->wrote, 0, f->world * sizeof(bool));
	memset(p->answered, 0, f->world * sizeof(bool));
	p->active = true;
	p->kind = kind;
	p->remaining = f->world;
	p->deadline_ns = sel_monotonic_ns() + (uint64_t)f->o.job_timeout_ms * 1000000ull;
	return p;
}

static int fan_store(void *ctx, uint64_t job_id, const struct shard_store_job *job)
{
	struct coord_fanout *f = ctx;
	uint8_t header[REC_HEADER_BYTES];
	struct pending *p;
	int ret;

	if (is_stopped(f))
		return SEL_ESTOPPED;
	/* Rank zero first: if it refuses, nothing went anywhere. */
	ret = shard_engine_store(f->o.local, job_id, job);
	if (ret)
		return ret;
	p = begin(f, job_id, COORD_JOB_STORE);
	p->key = job->header->key;
	p->replaces = job->replaces;
	rec_header_encode(job->header, header);
	send_all(f, p, cluster_job_encode(&(struct cluster_job){
		.job_id = job_id, .kind = CLUSTER_JOB_STORE, .record_header = header,
		.state_slot = job->state_slot, .page_ids = job->page_ids,
		.page_id_count = job->header->tail_page_count, .warm = job->warm }, f->frame,
		CLUSTER_FRAME_PAYLOAD_BYTES_MAX));
	return 0;
}

static int fan_fetch(void *ctx, uint64_t job_id, const struct shard_fetch_job *job)
{
	struct coord_fanout *f = ctx;
	struct cluster_chain_record *chain = f->chain;
	uint32_t pages = 0;
	struct pending *p;
	int ret;

	if (is_stopped(f))
		return SEL_ESTOPPED;
	ret = shard_engine_fetch(f->o.local, job_id, job);
	if (ret)
		return ret;
	p = begin(f, job_id, COORD_JOB_FETCH);
	for (uint32_t i = 0; i < job->chain_count; i++) {
		chain[i] = (struct cluster_chain_record){ job->chain[i].key,
							  job->chain[i].first_page_index,
							  job->chain[i].tail_page_count };
		pages += job->chain[i].tail_page_count;
	}
	send_all(f, p, cluster_job_encode(&(struct cluster_job){
		.job_id = job_id, .kind = CLUSTER_JOB_FETCH, .chain = chain,
		.chain_count = job->chain_count, .skip_pages = job->skip_pages,
		.state_slot = job->state_slot, .page_ids = job->page_ids,
		.page_id_count = pages - job->skip_pages,
		.read_through = job->read_through }, f->frame,
		CLUSTER_FRAME_PAYLOAD_BYTES_MAX));
	return 0;
}

/* A truncate, an unlink or a noop (key NULL): rank zero's engine, then every peer. */
static int fan_key_job(struct coord_fanout *f, uint64_t job_id, const struct rec_key *key,
		       enum coord_job_kind kind)
{
	struct cluster_job wire = { .job_id = job_id };
	struct pending *p;
	int ret;

	if (is_stopped(f))
		return SEL_ESTOPPED;
	switch (kind) {
	case COORD_JOB_TRUNCATE:
		wire.kind = CLUSTER_JOB_TRUNCATE;
		ret = shard_engine_truncate(f->o.local, job_id, key);
		break;
	case COORD_JOB_UNLINK:
		wire.kind = CLUSTER_JOB_UNLINK;
		ret = shard_engine_unlink(f->o.local, job_id, key);
		break;
	case COORD_JOB_WARM_DROP:
		wire.kind = CLUSTER_JOB_WARM_DROP;
		ret = shard_engine_warm_drop(f->o.local, job_id, key);
		break;
	default:
		SEL_ASSERT(kind == COORD_JOB_NOOP && !key);
		wire.kind = CLUSTER_JOB_NOOP;
		ret = shard_engine_noop(f->o.local, job_id);
		break;
	}
	if (ret)
		return ret;
	if (key)
		wire.key = *key;
	p = begin(f, job_id, kind);
	send_all(f, p, cluster_job_encode(&wire, f->frame, CLUSTER_FRAME_PAYLOAD_BYTES_MAX));
	return 0;
}

static int fan_truncate(void *ctx, uint64_t job_id, const struct rec_key *key)
{
	return fan_key_job(ctx, job_id, key, COORD_JOB_TRUNCATE);
}

static int fan_unlink(void *ctx, uint64_t job_id, const struct rec_key *key)
{
	return fan_key_job(ctx, job_id, key, COORD_JOB_UNLINK);
}

static int fan_warm_drop(void *ctx, uint64_t job_id, const struct rec_key *key)
{
	return fan_key_job(ctx, job_id, key, COORD_JOB_WARM_DROP);
}

static int fan_noop(void *ctx, uint64_t job_id)
{
	return fan_key_job(ctx, job_id, NULL, COORD_JOB_NOOP);
}

int coord_fanout_pool_attach(struct coord_fanout *f, uint64_t job_id,
			     const uint8_t *instance_id, const char *address)
{
	struct cluster_job job = { .job_id = job_id, .kind = CLUSTER_JOB_POOL_ATTACH,
				   .pool_address = address };
	struct pending *p;

	if (is_stopped(f))
		return SEL_ESTOPPED;
	memcpy(job.instance_id, instance_id, sizeof(job.instance_id));
	p = begin(f, job_id, COORD_JOB_NOOP);
	p->answered[0] = true; /* rank zero attached itself */
	p->remaining--;
	send_all(f, p, cluster_job_encode(&job, f->frame, CLUSTER_FRAME_PAYLOAD_BYTES_MAX));
	if (p->remaining > 0)
		return 0;
	p->active = false;
	return p->result;
}

int coord_fanout_pool_put(struct coord_fanout *f, uint64_t job_id, const struct rec_key *key,
			  uint64_t put_id, uint64_t share_bytes)
{
	struct pending *p;
	int ret;

	if (is_stopped(f))
		return SEL_ESTOPPED;
	ret = shard_engine_pool_put(f->o.local, job_id, key, put_id, share_bytes);
	if (ret)
		return ret;
	p = begin(f, job_id, COORD_JOB_POOL_PUT);
	send_all(f, p, cluster_job_encode(&(struct cluster_job){
		.job_id = job_id, .kind = CLUSTER_JOB_POOL_PUT, .key = *key, .pool_id = put_id,
		.share_bytes = share_bytes }, f->frame, CLUSTER_FRAME_PAYLOAD_BYTES_MAX));
	return 0;
}

int coord_fanout_pool_export(struct coord_fanout *f, uint64_t job_id,
			     const struct shard_pool_export_job *export)
{
	uint8_t header[REC_HEADER_BYTES];
	struct pending *p;
	int ret;

	if (is_stopped(f))
		return SEL_ESTOPPED;
	ret = shard_engine_pool_export(f->o.local, job_id, export);
	if (ret)
		return ret;
	/* a put's kind: a failure leaves no file to clean up */
	p = begin(f, job_id, COORD_JOB_POOL_PUT);
	rec_header_encode(export->header, header);
	send_all(f, p, cluster_job_encode(&(struct cluster_job){
		.job_id = job_id, .kind = CLUSTER_JOB_POOL_EXPORT, .pool_id = export->put_id,
		.record_header = header, .state_slot = export->state_slot,
		.page_ids = export->page_ids, .page_id_count = export->header->tail_page_count },
		f->frame, CLUSTER_FRAME_PAYLOAD_BYTES_MAX));
	return 0;
}

int coord_fanout_pool_claim_early(struct coord_fanout *f, uint64_t job_id,
				  const struct shard_pool_claim_job *claim)
{
	struct pending *p;
	int ret;

	SEL_ASSERT(claim->early);
	if (is_stopped(f))
		return SEL_ESTOPPED;
	ret = shard_engine_pool_claim(f->o.local, job_id, claim);
	if (ret)
		return ret;
	p = begin(f, job_id, COORD_JOB_POOL_CLAIM);
	p->peers_unsent = true;
	return 0;
}

void coord_fanout_pool_claim_cancel(struct coord_fanout *f, uint64_t job_id, int result,
				    const char *why)
{
	struct pending *p = &f->pending[job_id];

	SEL_ASSERT(job_id < COORD_JOBS_MAX);
	if (!p->active || !p->peers_unsent)
		return;
	p->peers_unsent = false;
	fail_pending(p, result, why);
	for (uint32_t r = 1; r < f->world; r++) {
		p->answered[r] = true; /* an answer from it now is one too many */
		p->remaining--;
	}
	p->done_now = p->remaining == 0;
}

int coord_fanout_pool_claim(struct coord_fanout *f, uint64_t job_id,
			    const struct shard_pool_claim_job *claim, uint32_t page_id_count)
{
	struct pending *p;
	bool peers_only;
	int ret;

	if (is_stopped(f))
		return SEL_ESTOPPED;
	if (claim->chain_count > COORD_CHAIN_MAX)
		return -EINVAL;
	SEL_ASSERT(job_id < COORD_JOBS_MAX && !claim->early);
	peers_only = f->pending[job_id].active && f->pending[job_id].peers_unsent;
	if (peers_only) {
		p = &f->pending[job_id];
		p->peers_unsent = false;
	} else {
		ret = shard_engine_pool_claim(f->o.local, job_id, claim);
		if (ret)
			return ret;
		p = begin(f, job_id, COORD_JOB_POOL_CLAIM);
	}
	for (uint32_t i = 0; i < claim->chain_count; i++)
		f->pool_chain[i] = (struct cluster_pool_chain_record){
			.key = claim->chain[i].key, .first_page_index = claim->chain[i].first_page_index,
			.tail_page_count = claim->chain[i].tail_page_count, .row = claim->chain[i].row };
	send_all(f, p, cluster_job_encode(&(struct cluster_job){
		.job_id = job_id, .kind = CLUSTER_JOB_POOL_CLAIM, .pool_id = claim->claim_id,
		.pool_chain = f->pool_chain, .chain_count = claim->chain_count,
		.skip_pages = claim->skip_pages, .state_slot = claim->state_slot,
		.page_ids = claim->page_ids, .page_id_count = page_id_count }, f->frame,
		CLUSTER_FRAME_PAYLOAD_BYTES_MAX));
	return 0;
}

/* A failed store: unlink it where it was written, then report (seed 2.14). */
static void start_cleanup(struct coord_fanout *f, uint64_t job_id, struct pending *p)
{
	uint64_t wire = job_id | CLEANUP_BIT;
	int length;

	p->cleaning = true;
	p->remaining = 0;
	memset(p->answered, 0, f->world * sizeof(bool));
	if (p->wrote[0]) {
		if (shard_engine_unlink(f->o.local, wire, &p->key) == 0)
			p->remaining++;
		else
			snprintf(p->cleanup_why, sizeof(p->cleanup_why),
				 "cleanup on rank 0 could not be queued");
	}
	length = cluster_job_encode(&(struct cluster_job){ .job_id = wire,
							   .kind = CLUSTER_JOB_UNLINK,
							   .key = p->key },
				    f->frame, CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	for (uint32_t r = 1; r < f->world; r++) {
		if (!p->wrote[r])
			continue;
		if (length > 0 && cluster_link_send(f->links[r - 1], CLUSTER_MSG_JOB, f->frame,
						    (uint32_t)length) == 0)
			p->remaining++;
		else
			snprintf(p->cleanup_why, sizeof(p->cleanup_why),
				 "cleanup on rank %u could not be sent", r);
	}
}

static void report(struct pending *p, uint64_t job_id, struct shard_completion *out);

/* Applies one rank's answer; fills *out and returns true when a job is done. */
static bool apply(struct coord_fanout *f, uint32_t rank, const struct shard_completion *c,
		  struct shard_completion *out)
{
	uint64_t job_id = c->job_id & ~CLEANUP_BIT;
	bool cleanup = c->job_id & CLEANUP_BIT;
	struct pending *p;

	if (job_id >= COORD_JOBS_MAX || !f->pending[job_id].active ||
	    cleanup != f->pending[job_id].cleaning) {
		stop(f, "%s", "an answer to no job in flight");
		return false;
	}
	p = &f->pending[job_id];
	/* Counting a second answer would complete the job before another rank's. */
	if (p->answered[rank]) {
		stop(f, "%s", "a rank answered a job twice");
		return false;
	}
	p->answered[rank] = true;
	if (cleanup) {
		if (c->result && c->result != -ENOENT)
			snprintf(p->cleanup_why, sizeof(p->cleanup_why),
				 "cleanup failed on rank %u: %.150s", rank, c->why);
	} else if (c->result) {
		char why[200];

		snprintf(why, sizeof(why), "rank %u: %.180s", rank,
			 c->why[0] ? c->why : sel_strerror(c->result));
		fail_pending(p, c->result, why);
	} else {
		p->wrote[rank] = true;
		if (rank == 0)
			p->bytes = c->bytes;
	}
	if (--p->remaining > 0)
		return false;
	if (!cleanup && p->kind == COORD_JOB_STORE && p->result && !p->replaces) {
		start_cleanup(f, job_id, p);
		if (p->remaining > 0)
			return false;
	}
	report(p, job_id, out);
	return true;
}

/* Job job_id (p) is done on every rank: its one completion in out. */
static void report(struct pending *p, uint64_t job_id, struct shard_completion *out)
{
	memset(out, 0, sizeof(*out));
	out->job_id = job_id;
	out->result = p->result;
	out->bytes = p->result ? 0 : p->bytes;
	snprintf(out->why, sizeof(out->why), "%.120s%s%.70s", p->why,
		 p->cleanup_why[0] ? "; " : "", p->cleanup_why);
	p->active = false;
	p->done_now = false;
}

static uint32_t fan_poll(void *ctx, struct shard_completion *out, uint32_t max)
{
	struct coord_fanout *f = ctx;
	struct shard_completion local;
	uint32_t n = 0;
	uint64_t now = sel_monotonic_ns();

	if (is_stopped(f))
		return 0; /* no completion for jobs outstanding: ids may be busy */
	for (uint32_t i = 0; i < COORD_JOBS_MAX && n < max; i++)
		if (f->pending[i].active && f->pending[i].done_now)
			report(&f->pending[i], i, &out[n++]);
	while (n < max && shard_engine_poll(f->o.local, &local, 1) == 1)
		n += apply(f, 0, &local, &out[n]);
	pthread_mutex_lock(&f->lock);
	while (n < max && f->answer_count > 0) {
		struct answer a = f->answers[f->answer_head];

		f->answer_head = (f->answer_head + 1) % f->answers_max;
		f->answer_count--;
		pthread_mutex_unlock(&f->lock);
		n += apply(f, a.rank, &a.c, &out[n]);
		pthread_mutex_lock(&f->lock);
	}
	pthread_mutex_unlock(&f->lock);
	for (uint32_t i = 0; i < COORD_JOBS_MAX; i++)
		if (f->pending[i].active && now > f->pending[i].deadline_ns)
			stop(f, "%s", "a job outlived its timeout");
	return is_stopped(f) ? 0 : n;
}

static bool fan_stopped(void *ctx, char *why, size_t why_size)
{
	struct coord_fanout *f = ctx;
	bool s;

	pthread_mutex_lock(&f->lock);
	s = f->stopped;
	if (s)
		snprintf(why, why_size, "%s", f->stop_why);
	pthread_mutex_unlock(&f->lock);
	return s;
}

void coord_fanout_jobs(struct coord_fanout *f, struct coord_jobs *jobs)
{
	*jobs = (struct coord_jobs){ .ctx = f, .store = fan_store, .fetch = fan_fetch,
				     .truncate = fan_truncate, .unlink = fan_unlink,
				     .noop = fan_noop, .warm_drop = fan_warm_drop,
				     .poll = fan_poll, .stopped = fan_stopped };
}

int coord_fanout_open(const struct coord_fanout_options *o, struct coord_fanout **out)
{
	struct coord_fanout *f = calloc(1, sizeof(*f));
	int ret = 0;

	*out = NULL;
	if (!f)
		return -ENOMEM;
	f->o = *o;
	f->world = o->peer_count + 1;
	pthread_mutex_init(&f->lock, NULL);
	f->links = calloc(o->peer_count ? o->peer_count : 1, sizeof(*f->links));
	f->link_ctx = calloc(o->peer_count ? o->peer_count : 1, sizeof(*f->link_ctx));
	/*
	 * Every peer answers each outstanding job once, and each job may add
	 * one cleanup job: twice the jobs times the peers is never exceeded.
	 */
	f->answers_max = COORD_JOBS_MAX * f->world * 2;
	f->answers = calloc(f->answers_max, sizeof(*f->answers));
	f->frame = malloc(CLUSTER_FRAME_PAYLOAD_BYTES_MAX);
	if (!f->links || !f->link_ctx || !f->answers || !f->frame)
		ret = -ENOMEM;
	for (uint32_t i = 0; !ret && i < COORD_JOBS_MAX; i++) {
		f->pending[i].wrote = calloc(2 * (size_t)f->world, sizeof(bool));
		if (!f->pending[i].wrote)
			ret = -ENOMEM;
		else
			f->pending[i].answered = f->pending[i].wrote + f->world;
	}
	for (uint32_t i = 0; !ret && i < o->peer_count; i++) {
		struct cluster_link_options lo = {
			.fd = o->peers[i].fd, .queue_bytes_max = o->queue_bytes_max,
			.heartbeat_ms = o->heartbeat_ms, .silence_timeout_ms = o->silence_timeout_ms,
			.send_sequence = o->peers[i].seq.send, .recv_sequence = o->peers[i].seq.recv,
			.on_frame = on_frame, .on_close = on_close, .ctx = &f->link_ctx[i],
		};

		f->link_ctx[i] = (struct link_ctx){ .f = f, .rank = o->peers[i].rank };
		o->peers[i].fd = -1; /* the link owns it now */
		ret = cluster_link_start(&lo, &f->links[o->peers[i].rank - 1]);
	}
	if (ret) {
		/* no BYE: to every peer, rank zero's open failed (R-WIRE-23) */
		pthread_mutex_lock(&f->lock);
		f->stopped = true;
		pthread_mutex_unlock(&f->lock);
		coord_fanout_close(f);
		return ret;
	}
	*out = f;
	return 0;
}

void coord_fanout_close(struct coord_fanout *f)
{
	bool clean;

	if (!f)
		return;
	/* BYE only on a clean end: after a stop, every peer must see a failure */
	clean = !is_stopped(f);
	for (uint32_t i = 0; f->links && i < f->o.peer_count; i++)
		cluster_link_close(f->links[i], clean ? 1000 : 0);
	for (uint32_t i = 0; i < COORD_JOBS_MAX; i++)
		free(f->pending[i].wrote);
	free(f->links);
	free(f->link_ctx);
	free(f->answers);
	free(f->frame);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

bool coord_fanout_link_stats(struct coord_fanout *f, uint32_t rank,
			     struct cluster_link_stats *out, bool *alive)
{
	if (rank == 0 || rank >= f->world || !f->links[rank - 1])
		return false;
	cluster_link_stats(f->links[rank - 1], out);
	*alive = cluster_link_alive(f->links[rank - 1]);
	return true;
}
