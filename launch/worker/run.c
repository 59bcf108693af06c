/*
 * selene run: one rank of the reference TP worker (docs/DESIGN.md section 8).
 *
 * Rank zero plays the engine's scheduler: for each request of a trace it
 * looks the prompt up in its GPU prefix cache, then in the store (beyond
 * what the GPU holds) and restores the hit into page ids it chose, then
 * "prefills" the rest with the synthetic model and publishes a checkpoint
 * at every span boundary. Every rank executes the device side of each step
 * on its own planes (launch/worker/run.h) and checks every restored or reused page
 * and row byte-exact; the steps travel over MPI (launch/worker/step.h). Rank zero
 * owns the store (sel_store_open); every other rank runs a peer agent
 * (sel_peer_start) that executes the store's jobs on that rank's planes.
 *
 * Output (rank zero): one JSON line per request and a summary line in
 * --results, and a readable summary on stdout. The exit status is non-zero
 * when any rank found a wrong byte, a store or fetch failed, the transport
 * stopped, or a request's "expect" was not met.
 */
#include "launch/commands.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/limits.h"
#include "launch/args.h"
#include "launch/bootstrap/bootstrap.h"
#include "launch/worker/gpu_cache.h"
#include "launch/metrics/http.h"
#include "launch/worker/run.h"
#include "launch/worker/step.h"
#include "launch/worker/synth.h"
#include "launch/worker/trace.h"
#include "shard/config.h"
#include "shard/engine.h"
#include "shard/slab.h"
#include "selene/store.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RUN_EVENT_WAIT_MS 120000u /* default: a store or fetch event */
#define RUN_CLOSE_DRAIN_MS 60000u
#define RUN_POOL_QUIET_MS 1000u /* see run_pool_offer_until_quiet */
#define RUN_START_FAILURE_MS 10000u /* a failed start waits this long for the rest */

/* SIGINT or SIGTERM: rank zero admits no more requests, drains and ends
 * with its summary; the other ranks follow it to the end as usual. The
 * handler runs once (a second signal ends the process at once). */
static volatile sig_atomic_t run_signal;

static void run_on_signal(int sig)
{
	run_signal = sig;
}

struct run_options {
	uint32_t page_tokens;
	uint32_t spec_count;
	struct launch_run_plane_spec specs[RUN_PLANES_MAX];
	uint64_t row_bytes;
	uint32_t gpu_pages, gpu_rows;
	const char *device;
	int device_ordinal;      /* -1 until parsed: OMPI_COMM_WORLD_LOCAL_RANK, or 0 */
	const char *dir;
	uint64_t disk_limit;
	uint64_t warm_bytes;      /* --warm: every rank's warm tier (0: none) */
	uint8_t warm_policy;      /* --warm-policy: enum sel_warm_policy */
	uint64_t max_age_ms;      /* --max-age-ms: 0 none */
	const char *pool;         /* --pool: the pool manager's host:port, or NULL */
	const char *pool_secret;  /* --pool-secret: its secret file */
	const char *trace_path, *results_path;
	const char *stored_log_path;
	uint32_t event_timeout_ms;
	bool accept_empty_ranks;  /* --accept-empty-ranks */
	bool metrics;                /* --metrics-port given */
	uint16_t metrics_port;       /* 0: one the kernel picks */
	const char *metrics_address; /* NULL: 127.0.0.1 */
};

struct run_totals {
	uint32_t requests, gpu_hits, host_hits, expectations_missed;
	uint64_t gpu_reused, host_reused, prefilled;
	uint64_t restored_bytes; /* every rank's */
	uint64_t restore_ns;
	uint64_t outcomes[4];    /* by enum sel_outcome */
	uint64_t stored, store_failures, fetch_failures;
	uint64_t retries_queued, offer_failures;
	/* checkpoints answered Retry and never stored, by why */
	uint64_t retries_left_gpu;    /* evicted from the GPU before room came */
	uint64_t retries_at_end;      /* still refused when the trace ended (full disk) */
	uint64_t retries_unremembered; /* no memory to keep the history */
	uint64_t wrong_units;    /* pages and rows, every rank */
	uint64_t requests_failed;
	uint64_t capacity_misses; /* requests the GPU cache had no room for */
	uint64_t checks_failed;   /* verify steps that could not run (a device failed) */
};

/* What one request did, for its results line. */
struct run_request_result {
	uint64_t gpu_reused, host_reused, prefilled, restore_ns, wrong_units;
	uint32_t checkpoints;
	bool failed;       /* some step of it failed or an expectation was missed */
	bool check_failed; /* a verify step could not run */
};

/* A checkpoint the store answered Retry: offered again after store
 * progress while it is still in the GPU cache (seed 2.2). One per slot. */
struct run_retry {
	bool pending;
	uint64_t consumed, prefix_hash, parent_consumed;
	sel_history *history; /* the prompt through consumed */
};

/* --stored-log: a checkpoint this run stored or restored, watched so that
 * the log also says when the store evicts it or drops its row. */
struct run_watch {
	char *id;             /* the request's id */
	uint64_t consumed, prefix_hash;
	sel_history *history; /* the prompt through consumed */
};

struct run {
	struct run_options opt;
	struct launch_bootstrap boot;
	struct launch_run_planes planes;
	struct launch_run_step step;
	char dir[1024];
	struct sel_plane sel_planes[RUN_PLANES_MAX];
	struct sel_store_config config;
	/* rank zero */
	sel_store *store;
	struct launch_gpu_cache cache;
	struct launch_trace trace;
	FILE *results;
	char results_buffer[65536]; /* line-buffered: each line is one write */
	FILE *stored_log; /* --stored-log: a line per checkpoint reported stored */
	/* Stored, not yet reported on disk: for the stored log's on-disk lines. */
	struct run_unwritten {
		uint64_t store_id;
		const struct launch_trace_request *q;
		uint64_t consumed;
	} *unwritten;
	uint32_t unwritten_count, unwritten_capacity;
	/* --warm: the store's warm figures as the run ends, for the summary */
	struct sel_stats warm_end;
	bool warm_end_taken;
	struct run_watch *watches; /* --stored-log: what may yet be evicted */
	uint32_t watch_count, watch_max;
	uint64_t watch_reclaims, watch_drops; /* the stats when last looked at */
	const struct launch_trace_request **slot_request; /* gpu_rows: who prefilled it */
	uint64_t next_store_id, next_waiter, fetch_waiter;
	int fetch_state; /* 0 in flight, 1 done, negative failed */
	bool stopped;    /* the transport stopped: no more jobs */
	bool interrupted; /* SIGINT or SIGTERM: admit no more requests */
	uint64_t page_bytes; /* one page across every plane, one rank */
	struct run_retry *retries; /* gpu_rows, by state slot */
	uint32_t retry_count;
	bool progress;       /* a store finished since the last re-offer */
	struct run_totals totals;
	/* --metrics-port: the server's thread reads a copy of the totals */
	struct launch_metrics_http *metrics;
	pthread_mutex_t shown_lock;
	struct run_totals shown;
};

/* Every rank: rank zero's r->step travels, runs here, and the ranks sum what
 * they found. Returns the wrong units across every rank (verify), 0,
 * -EREMOTEIO when some rank's device failed the step, or another negative
 * code when the step channel itself failed (no later step can run). The sum is
 * also a barrier: no job is sent before every rank has done the step. */
static int64_t run_step_all(struct run *r)
{
	size_t bytes = launch_run_step_bytes(&r->step);
	uint64_t sums[2] = { 0, 0 }; /* wrong units; ranks whose device failed */
	int64_t got;
	int ret = launch_step_broadcast(&r->boot, &r->step, sizeof(r->step), &bytes);

	if (ret)
		return ret;
	if (r->step.op == RUN_STEP_END)
		return 0;
	got = launch_run_planes_execute(&r->planes, &r->step);
	if (got < 0)
		fprintf(stderr, "selene run: rank %u: a device step failed: %s\n",
			r->boot.cluster.rank, sel_strerror((int)got));
	sums[got < 0] = got < 0 ? 1 : (uint64_t)got;
	ret = launch_step_sum(&r->boot, sums, 2);
	if (ret)
		return ret;
	return sums[1] ? -EREMOTEIO : (int64_t)sums[0];
}

/* Rank zero: op over chain pages [from, to) of ids (hashes from the prompt)
 * and, with the last piece, the row. Returns the wrong units, or negative. */
static int64_t run_pages(struct run *r, enum launch_run_op op,
			 const struct launch_synth_prompt *prompt,
			 const uint32_t *ids, uint32_t from, uint32_t to, uint32_t slot,
			 uint64_t row_consumed)
{
	int64_t wrong = 0;
	uint32_t at = from;

	do {
		uint32_t n = to - at < RUN_STEP_PAGES_MAX ? to - at : RUN_STEP_PAGES_MAX;
		int64_t got;

		r->step.op = op;
		r->step.page_count = n;
		r->step.slot = at + n == to ? slot : RUN_NO_SLOT;
		r->step.row_hash = slot == RUN_NO_SLOT ? 0 : launch_synth_prefix_hash(prompt, row_consumed);
		for (uint32_t i = 0; i < n; i++)
			r->step.pages[i] = (struct launch_run_step_page){
				.id = ids[at + i], .hash = prompt->page_hashes[at + i] };
		got = run_step_all(r);
		if (got < 0) {
			r->stopped |= got != -EREMOTEIO; /* no step can reach the ranks */
			return got;
		}
		wrong += got;
		at += n;
	} while (at < to);
	return wrong;
}

static void run_json_string(FILE *f, const char *s);

/*
 * A line for a checkpoint the store reported stored, flushed at once:
 * {"id": REQUEST, "consumed": TOKENS}. Without a warm tier it is on disk
 * then; with one it is restorable while the run lives, and a second line
 * adding "on_disk": true follows once its record file committed on every
 * rank (SEL_EVENT_ON_DISK): a harness that kills this run counts on the
 * records of those lines restoring after a restart.
 */
static void run_log_line(struct run *r, const struct launch_trace_request *q,
			 uint64_t consumed, bool on_disk)
{
	fprintf(r->stored_log, "{\"id\": ");
	run_json_string(r->stored_log, q->id);
	fprintf(r->stored_log, ", \"consumed\": %" PRIu64 "%s}\n", consumed,
		on_disk ? ", \"on_disk\": true" : "");
	fflush(r->stored_log);
}

static void run_log_stored(struct run *r, const struct launch_gpu_checkpoint *k,
			   uint64_t store_id)
{
	const struct launch_trace_request *q = r->slot_request[k->slot];

	if (!r->stored_log || !q)
		return;
	run_log_line(r, q, k->consumed, false);
	if (!r->opt.warm_bytes)
		return; /* no warm tier: STORED says it is on disk */
	if (r->unwritten_count == r->unwritten_capacity) {
		uint32_t capacity = r->unwritten_capacity ? 2 * r->unwritten_capacity : 64;
		struct run_unwritten *more = realloc(r->unwritten, capacity * sizeof(*more));

		if (!more) {
			fprintf(stderr, "selene run: out of memory for the stored log: checkpoint "
				"%" PRIu64 " gets no on-disk line\n", store_id);
			return;
		}
		r->unwritten = more;
		r->unwritten_capacity = capacity;
	}
	r->unwritten[r->unwritten_count++] = (struct run_unwritten){ store_id, q, k->consumed };
}

static void run_log_on_disk(struct run *r, uint64_t store_id)
{
	for (uint32_t i = 0; i < r->unwritten_count; i++) {
		if (r->unwritten[i].store_id != store_id)
			continue;
		run_log_line(r, r->unwritten[i].q, r->unwritten[i].consumed, true);
		r->unwritten[i] = r->unwritten[--r->unwritten_count];
		return;
	}
}

/* A line for a watched checkpoint the store no longer restores whole. */
static void run_log_gone(struct run *r, const struct run_watch *w, bool dropped)
{
	fprintf(r->stored_log, "{\"id\": ");
	run_json_string(r->stored_log, w->id);
	fprintf(r->stored_log, ", \"consumed\": %" PRIu64 ", \"%s\": true}\n", w->consumed,
		dropped ? "dropped" : "evicted");
}

/*
 * Watches the checkpoint of q's prompt through consumed (stored or restored
 * by this run) for --stored-log; a checkpoint already watched is
 * left as it is. Returns 0 or -ENOMEM.
 */
static int run_watch_add(struct run *r, const struct launch_trace_request *q,
			 const struct launch_synth_prompt *prompt, uint64_t consumed)
{
	uint64_t hash = launch_synth_prefix_hash(prompt, consumed);
	struct run_watch *w;

	if (!r->stored_log)
		return 0;
	for (uint32_t i = 0; i < r->watch_count; i++)
		if (r->watches[i].consumed == consumed && r->watches[i].prefix_hash == hash)
			return 0;
	/* at most one store per span boundary and one restore per request */
	SEL_ASSERT(r->watch_count < r->watch_max);
	w = &r->watches[r->watch_count];
	w->id = strdup(q->id);
	if (!w->id)
		return -ENOMEM;
	if (sel_history_create(r->store, prompt->tokens, consumed, &w->history)) {
		free(w->id);
		return -ENOMEM;
	}
	w->consumed = consumed;
	w->prefix_hash = hash;
	r->watch_count++;
	return 0;
}

/* The watch of a checkpoint whose STORED event came: its prompt is rebuilt
 * from the request that prefilled it. */
static void run_watch_stored(struct run *r, const struct launch_trace_request *q,
			     uint64_t consumed)
{
	struct launch_synth_prompt prompt;

	if (!r->stored_log || launch_synth_prompt_build(&prompt, q->spans, q->span_count,
							r->opt.page_tokens)) {
		if (r->stored_log)
			fprintf(stderr, "selene run: out of memory watching a checkpoint; "
				"--stored-log may miss its eviction\n");
		return;
	}
	if (run_watch_add(r, q, &prompt, consumed))
		fprintf(stderr, "selene run: out of memory watching a checkpoint; "
			"--stored-log may miss its eviction\n");
	launch_synth_prompt_free(&prompt);
}

/*
 * After the store evicted, compacted or dropped records (its counters
 * moved), logs each watched checkpoint that a lookup no longer reaches
 * whole and stops watching it. A drop (a record found bad, or a failed
 * truncate) is told apart from the policy's evictions only when nothing
 * else moved in between; otherwise the lines say "dropped".
 */
static void run_watch_check(struct run *r)
{
	struct sel_stats st;
	uint64_t reclaims, drops;
	bool dropped;

	if (!r->stored_log || sel_store_stats(r->store, &st))
		return;
	reclaims = st.evictions + st.truncations;
	drops = st.records_dropped_checksum + st.records_dropped_header +
		st.records_dropped_missing;
	if (reclaims == r->watch_reclaims && drops == r->watch_drops)
		return;
	/* (taken even with nothing watched: an old drop must not label later lines) */
	dropped = drops != r->watch_drops;
	r->watch_reclaims = reclaims;
	r->watch_drops = drops;
	if (!r->watch_count)
		return;
	for (uint32_t i = 0; i < r->watch_count;) {
		struct run_watch *w = &r->watches[i];
		struct sel_hit hit;

		if (sel_lookup(r->store, w->history, 0, &hit) && hit.consumed >= w->consumed) {
			i++;
			continue;
		}
		run_log_gone(r, w, dropped);
		free(w->id);
		sel_history_destroy(w->history);
		*w = r->watches[--r->watch_count];
	}
	fflush(r->stored_log);
}

/*
 * --stored-log's last line: what the index holds as the store closes, so
 * that a harness can hold every rank's record files against it (the
 * unlinks still in flight finish before the close returns).
 */
static void run_log_index(struct run *r)
{
	struct sel_stats st;

	if (!r->stored_log || sel_store_stats(r->store, &st))
		return;
	run_watch_check(r);
	fprintf(r->stored_log, "{\"index\": {\"records\": %" PRIu64 ", \"disk_bytes\": %"
		PRIu64 ", \"scanned_records\": %" PRIu64 ", \"evictions\": %" PRIu64
		", \"truncations\": %" PRIu64 ", \"unlinks\": %" PRIu64 "}}\n", st.records,
		st.disk_bytes, st.scanned_records, st.evictions, st.truncations, st.unlinks);
	fflush(r->stored_log);
}

static void run_watch_free(struct run *r)
{
	for (uint32_t i = 0; i < r->watch_count; i++) {
		free(r->watches[i].id);
		sel_history_destroy(r->watches[i].history);
	}
	free(r->watches);
	r->watches = NULL;
	r->watch_count = 0;
}

/* Handles one store event; 1 when there was one, 0 none, SEL_ESTOPPED. */
static int run_poll(struct run *r)
{
	struct sel_event ev;
	struct launch_gpu_checkpoint *k;
	uint32_t got = sel_poll(r->store, &ev, 1);

	run_watch_check(r); /* a commit drops its parent's row (seed 2.3) */
	if (got == 0)
		return 0;
	switch (ev.kind) {
	case SEL_EVENT_STORED:
	case SEL_EVENT_STORE_FAILED:
		k = launch_gpu_cache_find_store(&r->cache, ev.id);
		if (k) {
			k->pins--;
			k->store_id = 0;
		}
		r->progress = true;
		if (ev.kind == SEL_EVENT_STORED) {
			r->totals.stored++;
			if (k) {
				run_log_stored(r, k, ev.id);
				if (r->slot_request[k->slot])
					run_watch_stored(r, r->slot_request[k->slot], k->consumed);
			}
			break;
		}
		r->totals.store_failures++;
		fprintf(stderr, "selene run: checkpoint %" PRIu64 " was not stored: %s\n", ev.id,
			ev.why[0] ? ev.why : sel_strerror(ev.error));
		break;
	case SEL_EVENT_ON_DISK:
		run_log_on_disk(r, ev.id);
		break;
	case SEL_EVENT_FETCHED:
	case SEL_EVENT_FETCH_FAILED:
		if (ev.id == r->fetch_waiter)
			r->fetch_state = ev.kind == SEL_EVENT_FETCHED ? 1 :
				(ev.error ? ev.error : -EIO);
		if (ev.kind == SEL_EVENT_FETCH_FAILED)
			fprintf(stderr, "selene run: a restore failed: %s\n",
				ev.why[0] ? ev.why : sel_strerror(ev.error));
		break;
	case SEL_EVENT_EXPORT_REQUESTED:
		/* this worker offers no GPU checkpoint (sel_gpu_hold): none to pin */
		sel_export_refuse(r->store, ev.id, SEL_ENOTFOUND);
		break;
	case SEL_EVENT_EXPORT_ENDED:
		break; /* only for exports it pinned: none */
	case SEL_EVENT_FATAL:
		r->stopped = true;
		fprintf(stderr, "selene run: the store stopped: %s\n",
			ev.why[0] ? ev.why : sel_strerror(ev.error));
		return SEL_ESTOPPED;
	}
	return 1;
}

static void run_offer_again(struct run *r);

/* Waits for the next event (until one arrives), or for the fetch to end. */
static int run_wait(struct run *r, bool for_fetch)
{
	uint64_t deadline = sel_monotonic_ns() + r->opt.event_timeout_ms * 1000000ull;

	while (sel_monotonic_ns() < deadline) {
		int got = run_poll(r);

		if (got < 0)
			return got;
		if (r->progress)
			run_offer_again(r);
		if (got && (!for_fetch || r->fetch_state != 0))
			return 0;
		if (!got)
			usleep(200);
	}
	fprintf(stderr, "selene run: no store event in %u ms\n", r->opt.event_timeout_ms);
	return -ETIMEDOUT;
}

/* Page ids (or a slot when slot is not NULL), waiting for pinned
 * checkpoints' stores where only they stand in the way. */
static int run_alloc(struct run *r, uint32_t count, uint32_t *ids, uint32_t *slot)
{
	for (;;) {
		int ret = slot ? launch_gpu_cache_alloc_row(&r->cache, slot) :
			launch_gpu_cache_alloc_pages(&r->cache, count, ids);

		if (ret != -EAGAIN)
			return ret;
		ret = run_wait(r, false);
		if (ret)
			return ret;
	}
}

static void run_fail(struct run_request_result *res, const struct launch_trace_request *q,
		     const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Marks the request failed and says why, naming it. */
static void run_fail(struct run_request_result *res, const struct launch_trace_request *q,
		     const char *fmt, ...)
{
	char what[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	fprintf(stderr, "selene run: request \"%s\" (line %u): %s\n", q->id, q->line, what);
	res->failed = true;
}

static uint64_t run_hash_at(const void *prompt, uint64_t consumed)
{
	return launch_synth_prefix_hash(prompt, consumed);
}

/* The GPU cache's deepest prefix of the prompt: its pages join the chain
 * (held) and are checked on every rank. Returns its token count. */
static uint64_t run_gpu_reuse(struct run *r, const struct launch_trace_request *q,
			      const struct launch_synth_prompt *prompt, uint32_t *chain,
			      uint32_t *chain_len, struct run_request_result *res)
{
	struct launch_gpu_checkpoint *k = launch_gpu_cache_lookup(&r->cache, prompt->token_count,
								  run_hash_at, prompt);
	int64_t wrong;

	if (!k)
		return 0;
	memcpy(chain, k->page_ids, k->page_count * sizeof(uint32_t));
	*chain_len = k->page_count;
	launch_gpu_cache_hold(&r->cache, chain, *chain_len);
	wrong = run_pages(r, RUN_STEP_VERIFY, prompt, chain, 0, *chain_len, k->slot,
			  k->consumed);
	if (wrong < 0) {
		r->totals.checks_failed++;
		res->check_failed = true;
		run_fail(res, q, "checking the GPU cache's pages failed: %s",
			 sel_strerror((int)wrong));
	} else
		res->wrong_units += (uint64_t)wrong;
	res->gpu_reused = k->consumed;
	return k->consumed;
}

/*
 * Fetches hit into ids and slot and waits for its event, waiting for a job
 * to finish while the store's job table is full. Returns 0, SEL_ENOTFOUND
 * (evicted since the lookup: a miss), or a negative code. With *unsafe set
 * the store may still write the destination (the transport stopped, or the
 * event did not come in time): those ids must never be handed out again.
 */
static int run_fetch(struct run *r, const struct sel_hit *hit, const uint32_t *ids,
		     uint32_t slot, bool *unsafe)
{
	bool joined = false;
	int ret;

	*unsafe = false;
	r->fetch_waiter = ++r->next_waiter;
	r->fetch_state = 0;
	while ((ret = sel_fetch(r->store, hit, ids, slot, r->fetch_waiter, &joined)) ==
	       SEL_EQUEUEFULL) {
		ret = run_wait(r, false); /* a job ends, and its slot with it */
		if (ret)
			return ret;
	}
	if (ret)
		return ret; /* nothing was submitted */
	if (joined) {
		/* one fetch at a time: nothing in flight to join, unless the store
		   is wrong; the pages would go to another destination */
		fprintf(stderr, "selene run: a restore joined another in flight\n");
		return -EALREADY;
	}
	ret = run_wait(r, true);
	if (ret) {
		*unsafe = true;
		return ret;
	}
	return r->fetch_state < 0 ? r->fetch_state : 0;
}

/* Fresh histories asked of the pool before a request goes without it. */
#define RUN_POOL_LOOKUP_TRIES 20

/*
 * The store's deepest prefix beyond resident. With a pool, a lookup that
 * missed is asked again while its answer may still come (as an engine that
 * holds the request a step); an answer that came past its grace period is
 * dropped, so each further try asks with a fresh history of the same tokens
 * (*asked, destroyed by the caller once the hit was restored).
 */
static bool run_lookup(struct run *r, const struct launch_synth_prompt *prompt,
		       const sel_history *h, uint64_t resident, sel_history **asked,
		       struct sel_hit *hit)
{
	const sel_history *cur = h;

	for (int tries = 0;; tries++) {
		for (;;) {
			if (sel_lookup(r->store, cur, resident, hit) && hit->consumed > resident)
				return true;
			if (!r->opt.pool || !sel_lookup_pending(r->store, cur))
				break;
			if (run_poll(r) < 0)
				return false;
			if (r->progress) /* the cascade freed room: refused offers again */
				run_offer_again(r);
			usleep(100);
		}
		if (!r->opt.pool || tries + 1 >= RUN_POOL_LOOKUP_TRIES)
			return false;
		sel_history_destroy(*asked);
		*asked = NULL;
		if (sel_history_create(r->store, prompt->tokens, prompt->token_count, asked))
			return false;
		cur = *asked;
	}
}

/* A hit beyond resident restored into new ids and a slot, checked on every
 * rank, cached. Returns the tokens now held. */
static uint64_t run_restore_hit(struct run *r, const struct launch_trace_request *q,
				const struct launch_synth_prompt *prompt, const struct sel_hit *found,
				uint64_t resident, uint32_t *chain, uint32_t *chain_len,
				struct run_request_result *res)
{
	struct sel_hit hit = *found;
	uint32_t slot, first = *chain_len;
	uint64_t t0;
	int64_t wrong;
	bool unsafe = false;
	int ret;

	SEL_ASSERT(first + hit.page_count == hit.consumed / r->opt.page_tokens);
	ret = run_alloc(r, hit.page_count, chain + first, NULL);
	if (!ret) {
		*chain_len = first + hit.page_count;
		ret = run_alloc(r, 0, NULL, &slot);
	}
	if (ret) {
		r->totals.capacity_misses += ret == -ENOSPC;
		run_fail(res, q, "no room on the GPU to restore %u pages and a row: %s",
			 hit.page_count, sel_strerror(ret));
		return resident;
	}
	/* junk first, so that a restore that wrote nothing cannot pass */
	ret = (int)run_pages(r, RUN_STEP_POISON, prompt, chain, first, *chain_len, slot, 0);
	t0 = sel_monotonic_ns();
	if (!ret)
		ret = run_fetch(r, &hit, chain + first, slot, &unsafe);
	if (ret == SEL_ENOTFOUND) {
		launch_gpu_cache_free_row(&r->cache, slot);
		launch_gpu_cache_release(&r->cache, chain + first, hit.page_count);
		*chain_len = first;
		return resident;
	}
	if (ret && unsafe) {
		/* quarantined: held by nobody, never handed out again */
		*chain_len = first;
		r->stopped = true;
		r->totals.fetch_failures++;
		run_fail(res, q, "the restore of %" PRIu64 " tokens did not end (%s); stopping, "
			 "and page ids %u.. and slot %u are never reused", hit.consumed,
			 sel_strerror(ret), chain[first], slot);
		return resident;
	}
	if (ret) {
		launch_gpu_cache_free_row(&r->cache, slot);
		r->totals.fetch_failures++;
		run_fail(res, q, "the restore of %" PRIu64 " tokens failed: %s", hit.consumed,
			 sel_strerror(ret));
		return resident;
	}
	res->restore_ns = sel_monotonic_ns() - t0;
	wrong = run_pages(r, RUN_STEP_VERIFY, prompt, chain, first, *chain_len, slot,
			  hit.consumed);
	if (wrong < 0) {
		launch_gpu_cache_free_row(&r->cache, slot);
		r->totals.checks_failed++;
		res->check_failed = true;
		run_fail(res, q, "checking the restore failed: %s", sel_strerror((int)wrong));
		return resident;
	}
	res->wrong_units += (uint64_t)wrong;
	res->host_reused = hit.consumed - resident;
	if (run_watch_add(r, q, prompt, hit.consumed))
		fprintf(stderr, "selene run: out of memory watching a checkpoint; "
			"--stored-log may miss its eviction\n");
	r->totals.restored_bytes += ((uint64_t)hit.page_count * r->page_bytes +
				     r->opt.row_bytes) * r->boot.cluster.world_size;
	if (!launch_gpu_cache_insert(&r->cache, hit.consumed,
				     launch_synth_prefix_hash(prompt, hit.consumed), chain, slot)) {
		run_fail(res, q, "out of memory caching a checkpoint");
		return resident;
	}
	return hit.consumed;
}

/* The store's deepest prefix beyond resident, restored (run_restore_hit). */
static uint64_t run_host_restore(struct run *r, const struct launch_trace_request *q,
				 const struct launch_synth_prompt *prompt, const sel_history *h,
				 uint64_t resident, uint32_t *chain, uint32_t *chain_len,
				 struct run_request_result *res)
{
	sel_history *asked = NULL; /* a pool lookup's fresh history, while its hit is used */
	struct sel_hit hit;
	uint64_t held = resident;

	if (run_lookup(r, prompt, h, resident, &asked, &hit))
		held = run_restore_hit(r, q, prompt, &hit, resident, chain, chain_len, res);
	sel_history_destroy(asked);
	return held;
}

/* Offers checkpoint k to the store; pins it while it is copied. */
static int run_offer(struct run *r, struct launch_gpu_checkpoint *k, const sel_history *h,
		     uint64_t parent, enum sel_outcome *outcome)
{
	uint64_t id = ++r->next_store_id;
	struct sel_publication pub = {
		.checkpoint = id, .history = h, .consumed = k->consumed,
		.parent_consumed = parent, .page_ids = k->page_ids, .state_slot = k->slot };
	int ret;

	/*
	 * A publication may evict or compact (seed 2.3): a harness that kills
	 * this run between the two lines cannot know what went, and a line
	 * for each watched checkpoint that went comes between them.
	 */
	if (r->stored_log) {
		fprintf(r->stored_log, "{\"publishing\": true}\n");
		fflush(r->stored_log);
	}
	ret = sel_store_publish(r->store, &pub, outcome);
	run_watch_check(r);
	if (r->stored_log) {
		fprintf(r->stored_log, "{\"published\": true}\n");
		fflush(r->stored_log);
	}
	if (ret) {
		fprintf(stderr, "selene run: publishing %" PRIu64 " tokens failed: %s\n",
			k->consumed, sel_strerror(ret));
		r->stopped |= ret == SEL_ESTOPPED;
		return ret;
	}
	if (*outcome == SEL_QUEUED) {
		k->pins++;
		k->store_id = id;
	}
	return 0;
}

static void run_forget_retry(struct run *r, struct run_retry *t)
{
	sel_history_destroy(t->history);
	memset(t, 0, sizeof(*t));
	r->retry_count--;
}

/* Offers again, parents first, what was answered Retry and is still on the
 * GPU; drops what left it. Called after store progress. */
static void run_offer_again(struct run *r)
{
	r->progress = false;
	while (r->retry_count && !r->stopped) {
		struct run_retry *t = NULL;
		struct launch_gpu_checkpoint *k;
		enum sel_outcome outcome;

		for (uint32_t i = 0; i < r->opt.gpu_rows; i++)
			if (r->retries[i].pending && (!t || r->retries[i].consumed < t->consumed))
				t = &r->retries[i];
		if (!t)
			break;
		k = &r->cache.checkpoints[t - r->retries];
		if (!k->live || k->consumed != t->consumed || k->prefix_hash != t->prefix_hash) {
			r->totals.retries_left_gpu++; /* evicted from the GPU first */
			run_forget_retry(r, t);
			continue;
		}
		if (run_offer(r, k, t->history, t->parent_consumed, &outcome)) {
			r->totals.offer_failures++;
			run_forget_retry(r, t);
			continue;
		}
		if (outcome == SEL_RETRY)
			return; /* still no room or parent: wait for more progress */
		r->totals.retries_queued += outcome == SEL_QUEUED;
		run_forget_retry(r, t);
	}
}

/* Publishes the checkpoint just prefilled; a Retry is kept for later. */
static int run_publish(struct run *r, struct launch_gpu_checkpoint *k, const sel_history *h,
		       const struct launch_synth_prompt *prompt, uint64_t parent)
{
	struct run_retry *t = &r->retries[k->slot];
	enum sel_outcome outcome;
	int ret = run_offer(r, k, h, parent, &outcome);

	if (ret)
		return ret;
	r->totals.outcomes[outcome]++;
	if (outcome != SEL_RETRY)
		return 0;
	/* a slot holds one checkpoint, so its retry entry is free or stale */
	if (t->pending)
		run_forget_retry(r, t);
	ret = sel_history_create(r->store, prompt->tokens, k->consumed, &t->history);
	if (ret) {
		r->totals.retries_unremembered++; /* no memory to remember it */
		return 0;
	}
	t->pending = true;
	t->consumed = k->consumed;
	t->prefix_hash = k->prefix_hash;
	t->parent_consumed = parent;
	r->retry_count++;
	return 0;
}

/* Nothing in flight and nothing to offer again, or the store stopped. */
static int run_settle(struct run *r)
{
	for (;;) {
		bool in_flight = false;
		int ret;

		if (r->progress)
			run_offer_again(r);
		for (uint32_t i = 0; i < r->opt.gpu_rows; i++)
			in_flight |= r->cache.checkpoints[i].live && r->cache.checkpoints[i].pins;
		if (r->stopped)
			return SEL_ESTOPPED;
		if (!in_flight)
			return 0; /* retries left now wait for a later store */
		ret = run_wait(r, false);
		if (ret)
			return ret;
	}
}

/*
 * Attached to a pool, checkpoints the store refused for room are offered
 * again while its cascade puts records to the pool and so makes room, as
 * a serving engine would go on offering them: until none is left, the
 * store stops, or the pool's puts and the store's evictions stand still
 * for RUN_POOL_QUIET_MS (then they stay refused, as without a pool).
 * Returns 0, or the failure of a wait for a store that never ended.
 */
static int run_pool_offer_until_quiet(struct run *r)
{
	struct sel_stats st;
	uint64_t moved = UINT64_MAX, quiet_since = sel_monotonic_ns();
	int ret;

	if (!r->opt.pool)
		return 0;
	while (r->retry_count && !r->stopped) {
		uint64_t now;

		if (sel_store_stats(r->store, &st) || !st.pool_attached)
			return 0;
		now = sel_monotonic_ns();
		if (st.pool_puts + st.pool_put_failures + st.evictions != moved) {
			moved = st.pool_puts + st.pool_put_failures + st.evictions;
			quiet_since = now;
		} else if (now - quiet_since > RUN_POOL_QUIET_MS * 1000000ull) {
			return 0;
		}
		while (run_poll(r) > 0)
			;
		run_offer_again(r);
		ret = run_settle(r);
		if (ret)
			return ret; /* a store that never ended: the run fails */
		usleep(500);
	}
	return 0;
}

/*
 * Written through, every warm record reaches the disk soon after it is
 * stored: its ON_DISK events are taken (for the stored log) before the
 * close, up to the event timeout. Written behind, they reach it in the
 * close's drain, which reports no events.
 */
static void run_await_disk(struct run *r)
{
	uint64_t deadline = sel_monotonic_ns() + r->opt.event_timeout_ms * 1000000ull;
	struct sel_stats st;

	if (!r->opt.warm_bytes || r->opt.warm_policy != SEL_WARM_WRITE_THROUGH)
		return;
	for (;;) {
		while (run_poll(r) == 1)
			;
		if (sel_store_stats(r->store, &st) != 0 || st.warm_dirty_records == 0 ||
		    sel_monotonic_ns() > deadline)
			break;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	while (run_poll(r) == 1)
		;
}

/* Prefills from resume to the prompt's end: a checkpoint at every span
 * boundary past resume, each cached and published. */
static void run_prefill(struct run *r, const struct launch_trace_request *q,
			const struct launch_synth_prompt *prompt, const sel_history *h,
			uint64_t resume, uint32_t *chain, uint32_t *chain_len,
			struct run_request_result *res)
{
	uint64_t boundary = 0, parent = resume;

	for (uint32_t s = 0; s < q->span_count && !res->failed && !r->stopped; s++) {
		uint32_t pages, first = *chain_len, slot;
		struct launch_gpu_checkpoint *k;
		int ret;

		boundary += q->spans[s].count;
		if (boundary <= resume)
			continue;
		pages = (uint32_t)(boundary / r->opt.page_tokens);
		ret = run_alloc(r, pages - first, chain + first, NULL);
		if (!ret) {
			*chain_len = pages;
			ret = run_alloc(r, 0, NULL, &slot);
		}
		if (ret) {
			r->totals.capacity_misses += ret == -ENOSPC;
			run_fail(res, q, "no room on the GPU for %u pages and a row (%s)",
				 pages - first, ret == -ENOSPC ? "--gpu-pages or --gpu-rows too "
				 "small for this prompt" : sel_strerror(ret));
			break;
		}
		ret = (int)run_pages(r, RUN_STEP_FILL, prompt, chain, first, pages, slot, boundary);
		if (ret < 0) {
			launch_gpu_cache_free_row(&r->cache, slot);
			run_fail(res, q, "the prefill step failed: %s", sel_strerror(ret));
			break;
		}
		k = launch_gpu_cache_insert(&r->cache, boundary, launch_synth_prefix_hash(prompt, boundary),
					    chain, slot);
		if (!k) {
			run_fail(res, q, "out of memory caching a checkpoint");
			break;
		}
		res->prefilled = boundary - resume;
		r->slot_request[k->slot] = q;
		if (run_publish(r, k, h, prompt, parent)) {
			run_fail(res, q, "publishing %" PRIu64 " tokens failed", boundary);
			break;
		}
		res->checkpoints++;
		parent = boundary;
	}
}

static bool run_check_expect(const struct launch_trace_request *q, const char *what, bool has,
			     uint64_t want, uint64_t got)
{
	if (!has || want == got)
		return true;
	fprintf(stderr, "selene run: request \"%s\" (line %u): expected %s %" PRIu64
		", found %" PRIu64 "\n", q->id, q->line, what, want, got);
	return false;
}

static void run_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void run_record(struct run *r, const struct launch_trace_request *q,
		       const struct run_request_result *res)
{
	const struct launch_trace_expect *e = &q->expect;
	bool met = run_check_expect(q, "gpu_reused", e->has_gpu_reused, e->gpu_reused,
				    res->gpu_reused);

	met &= run_check_expect(q, "host_reused", e->has_host_reused, e->host_reused,
				res->host_reused);
	met &= run_check_expect(q, "prefilled", e->has_prefilled, e->prefilled, res->prefilled);
	r->totals.expectations_missed += !met;
	r->totals.requests++;
	r->totals.gpu_hits += res->gpu_reused > 0;
	r->totals.host_hits += res->host_reused > 0;
	r->totals.gpu_reused += res->gpu_reused;
	r->totals.host_reused += res->host_reused;
	r->totals.prefilled += res->prefilled;
	r->totals.restore_ns += res->restore_ns;
	r->totals.wrong_units += res->wrong_units;
	r->totals.requests_failed += res->failed;
	pthread_mutex_lock(&r->shown_lock);
	r->shown = r->totals;
	pthread_mutex_unlock(&r->shown_lock);
	printf("  %-16s %10" PRIu64 " %11" PRIu64 " %9" PRIu64 " %10.2f  %s\n", q->id,
	       res->gpu_reused, res->host_reused, res->prefilled, (double)res->restore_ns / 1e6,
	       res->wrong_units ? "WRONG BYTES" : res->check_failed ? "NOT CHECKED" :
	       res->failed ? "yes (request failed)" : !met ? "yes (expectation missed)" : "yes");
	if (!r->results)
		return;
	fprintf(r->results, "{\"id\": ");
	run_json_string(r->results, q->id);
	fprintf(r->results, ", \"gpu_reused\": %" PRIu64 ", \"host_reused\": %" PRIu64
		", \"prefilled\": %" PRIu64 ", \"restore_ms\": %.3f, \"checkpoints\": %u"
		", \"verified\": %s, \"ok\": %s}\n", res->gpu_reused, res->host_reused,
		res->prefilled, (double)res->restore_ns / 1e6, res->checkpoints,
		!res->check_failed && !res->wrong_units ? "true" : "false",
		!res->failed && !res->wrong_units && met ? "true" : "false");
}

static int run_request(struct run *r, const struct launch_trace_request *q)
{
	struct run_request_result res = { 0 };
	struct launch_synth_prompt prompt;
	uint32_t *chain, chain_len = 0;
	sel_history *h = NULL;
	uint64_t resume;
	int ret = launch_synth_prompt_build(&prompt, q->spans, q->span_count, r->opt.page_tokens);

	if (ret)
		return ret;
	/* the engine polls every step: take what finished, offer retries again */
	while (run_poll(r) > 0)
		;
	if (q->settle && (ret = run_settle(r)) != 0)
		run_fail(&res, q, "waiting for the stores in flight: %s", sel_strerror(ret));
	if (r->progress)
		run_offer_again(r);
	chain = malloc((prompt.full_pages + 1) * sizeof(*chain));
	ret = chain ? sel_history_create(r->store, prompt.tokens, prompt.token_count, &h) :
		-ENOMEM;
	if (ret)
		goto out_free_prompt;
	resume = res.failed ? 0 : run_gpu_reuse(r, q, &prompt, chain, &chain_len, &res);
	if (!res.failed && resume < prompt.token_count)
		resume = run_host_restore(r, q, &prompt, h, resume, chain, &chain_len, &res);
	if (!res.failed && resume < prompt.token_count)
		run_prefill(r, q, &prompt, h, resume, chain, &chain_len, &res);
	launch_gpu_cache_release(&r->cache, chain, chain_len);
	run_record(r, q, &res);
	sel_history_destroy(h);
	ret = res.failed ? -EIO : 0;
out_free_prompt:
	free(chain);
	launch_synth_prompt_free(&prompt);
	return ret;
}

static void run_summary(struct run *r, bool ok, double seconds)
{
	const struct run_totals *t = &r->totals;
	double restore_s = (double)t->restore_ns / 1e9;
	double gbps = restore_s > 0 ? (double)t->restored_bytes / restore_s / 1e9 : 0;

	printf("\nselene run: %u %s on %u %s (%s device) in %.2f s\n", t->requests,
	       launch_plural(t->requests, "request", "requests"), r->boot.cluster.world_size,
	       launch_plural(r->boot.cluster.world_size, "rank", "ranks"),
	       launch_run_planes_device(&r->planes), seconds);
	printf("  GPU cache hits   %u (%" PRIu64 " tokens reused)\n", t->gpu_hits, t->gpu_reused);
	printf("  host restores    %u (%" PRIu64 " tokens; %.1f MB moved to the GPUs of all "
	       "ranks at %.2f GB/s)\n", t->host_hits, t->host_reused,
	       (double)t->restored_bytes / 1e6, gbps);
	printf("  prefilled        %" PRIu64 " tokens\n", t->prefilled);
	printf("  checkpoints      %" PRIu64 " offered: %" PRIu64 " queued, %" PRIu64
	       " already stored, %" PRIu64 " retry (%" PRIu64 " queued later, %" PRIu64
	       " left the GPU first, %" PRIu64 " still refused at the end, %" PRIu64
	       " not kept for lack of memory), %" PRIu64 " too large; %" PRIu64 " stored, %"
	       PRIu64 " failed\n", t->outcomes[SEL_QUEUED] + t->outcomes[SEL_PRESENT] +
	       t->outcomes[SEL_RETRY] + t->outcomes[SEL_OVERSIZE], t->outcomes[SEL_QUEUED],
	       t->outcomes[SEL_PRESENT], t->outcomes[SEL_RETRY], t->retries_queued,
	       t->retries_left_gpu, t->retries_at_end, t->retries_unremembered,
	       t->outcomes[SEL_OVERSIZE], t->stored, t->store_failures);
	/* "verified" speaks of bytes only; every other shortfall has its own line */
	if (t->wrong_units)
		printf("  verified         NO: %" PRIu64 " restored or reused pages and rows differ "
		       "from what was stored (see the messages above)\n", t->wrong_units);
	else if (t->checks_failed)
		printf("  verified         NO: %" PRIu64 " checks could not run (a device step "
		       "failed; see above)\n", t->checks_failed);
	else
		printf("  verified         every reused page and row, byte-exact on every rank\n");
	if (t->expectations_missed || t->capacity_misses || t->store_failures ||
	    t->fetch_failures || t->offer_failures || r->stopped || r->interrupted)
		printf("  not met          %u %s missed, %" PRIu64 " %s without room on the "
		       "GPU, %" PRIu64 " %s and %" PRIu64 " %s failed, %" PRIu64 " %s refused%s%s\n",
		       t->expectations_missed,
		       launch_plural(t->expectations_missed, "expectation", "expectations"),
		       t->capacity_misses, launch_plural(t->capacity_misses, "request", "requests"),
		       t->store_failures, launch_plural(t->store_failures, "store", "stores"),
		       t->fetch_failures, launch_plural(t->fetch_failures, "restore", "restores"),
		       t->offer_failures, launch_plural(t->offer_failures, "offer", "offers"),
		       r->stopped ? "; the store stopped" : "",
		       r->interrupted ? "; interrupted before the trace ended" : "");
	if (r->warm_end_taken && r->opt.pool)
		printf("  pool             %s; %" PRIu64 " %s, %" PRIu64 " %s restored (%"
		       PRIu64 " failed), %" PRIu64 " records put (%" PRIu64 " failed), %"
		       PRIu64 " refusals\n", r->warm_end.pool_attached ? "attached" : "not attached",
		       r->warm_end.pool_hits, launch_plural(r->warm_end.pool_hits, "hit", "hits"),
		       r->warm_end.pool_claims,
		       launch_plural(r->warm_end.pool_claims, "claim", "claims"),
		       r->warm_end.pool_claim_failures, r->warm_end.pool_puts,
		       r->warm_end.pool_put_failures, r->warm_end.pool_refusals);
	if (r->warm_end_taken && r->opt.warm_bytes)
		printf("  warm tier        %" PRIu64 " restores from warm slots, %" PRIu64
		       " partly, %" PRIu64 " records read through; %" PRIu64 " written from "
		       "warm\n", r->warm_end.warm_hits, r->warm_end.warm_partial_hits,
		       r->warm_end.warm_read_throughs, r->warm_end.warm_writes);
	printf("  result           %s\n", ok ? "ok" : "FAILED");
	fflush(stdout);
	if (!r->results)
		return;
	fprintf(r->results, "{\"summary\": {\"requests\": %u, \"ranks\": %u, \"gpu_hits\": %u, "
		"\"gpu_reused\": %" PRIu64 ", \"host_hits\": %u, \"host_reused\": %" PRIu64
		", \"prefilled\": %" PRIu64 ", \"restored_bytes\": %" PRIu64
		", \"restore_ms\": %.3f, \"restore_gbps\": %.3f, \"published\": %" PRIu64
		", \"stored\": %" PRIu64 ", \"store_failures\": %" PRIu64
		", \"fetch_failures\": %" PRIu64 ", \"retries_left_gpu\": %" PRIu64
		", \"retries_refused_at_end\": %" PRIu64 ", \"wrong_units\": %" PRIu64
		", \"expectations_missed\": %u, \"capacity_misses\": %" PRIu64
		", \"interrupted\": %s, \"verified\": %s, \"ok\": %s", t->requests,
		r->boot.cluster.world_size, t->gpu_hits, t->gpu_reused, t->host_hits,
		t->host_reused, t->prefilled, t->restored_bytes, (double)t->restore_ns / 1e6,
		gbps, t->outcomes[SEL_QUEUED] + t->outcomes[SEL_PRESENT] +
		t->outcomes[SEL_RETRY] + t->outcomes[SEL_OVERSIZE], t->stored,
		t->store_failures, t->fetch_failures, t->retries_left_gpu, t->retries_at_end,
		t->wrong_units, t->expectations_missed, t->capacity_misses,
		r->interrupted ? "true" : "false",
		!t->wrong_units && !t->checks_failed ? "true" : "false", ok ? "true" : "false");
	if (r->warm_end_taken && r->opt.pool)
		fprintf(r->results, ", \"pool\": {\"attached\": %s, \"hits\": %" PRIu64
			", \"claims\": %" PRIu64 ", \"claim_bytes\": %" PRIu64
			", \"claim_failures\": %" PRIu64 ", \"puts\": %" PRIu64
			", \"put_failures\": %" PRIu64 ", \"refusals\": %" PRIu64 "}",
			r->warm_end.pool_attached ? "true" : "false", r->warm_end.pool_hits,
			r->warm_end.pool_claims, r->warm_end.pool_claim_bytes,
			r->warm_end.pool_claim_failures, r->warm_end.pool_puts,
			r->warm_end.pool_put_failures, r->warm_end.pool_refusals);
	if (r->warm_end_taken && r->opt.warm_bytes)
		fprintf(r->results, ", \"warm\": {\"hits\": %" PRIu64 ", \"partial_hits\": %"
			PRIu64 ", \"read_throughs\": %" PRIu64 ", \"writes\": %" PRIu64
			", \"dirty_at_close\": %" PRIu64 "}", r->warm_end.warm_hits,
			r->warm_end.warm_partial_hits, r->warm_end.warm_read_throughs,
			r->warm_end.warm_writes, r->warm_end.warm_dirty_records);
	fputs("}}\n", r->results);
}

/* The page --metrics-port serves (launch/metrics/http.h), on the server's
 * thread: the store's exposition, then the worker's own families. */
static int run_render_metrics(void *ctx, char *buf, size_t size)
{
	struct run *r = ctx;
	struct run_totals t;
	int n = sel_store_metrics(r->store, buf, size), m;

	if (n < 0)
		return n;
	pthread_mutex_lock(&r->shown_lock);
	t = r->shown;
	pthread_mutex_unlock(&r->shown_lock);
	m = snprintf(buf + n, size - (size_t)n,
		     "# HELP selene_run_requests_total Trace requests the worker served.\n"
		     "# TYPE selene_run_requests_total counter\n"
		     "selene_run_requests_total %u\n"
		     "# HELP selene_run_wrong_units_total Restored or reused pages and rows that "
		     "differed from what was stored.\n"
		     "# TYPE selene_run_wrong_units_total counter\n"
		     "selene_run_wrong_units_total %" PRIu64 "\n"
		     "# HELP selene_run_retries_abandoned_total Checkpoints answered Retry and "
		     "never stored, by why.\n"
		     "# TYPE selene_run_retries_abandoned_total counter\n"
		     "selene_run_retries_abandoned_total{reason=\"left_gpu\"} %" PRIu64 "\n"
		     "selene_run_retries_abandoned_total{reason=\"refused_at_end\"} %" PRIu64 "\n"
		     "selene_run_retries_abandoned_total{reason=\"no_memory\"} %" PRIu64 "\n",
		     t.requests, t.wrong_units, t.retries_left_gpu, t.retries_at_end,
		     t.retries_unremembered);
	if (m < 0 || (size_t)m >= size - (size_t)n)
		return -ENOSPC;
	return n + m;
}

/* --metrics-port: serves until the store closes. Returns 0 or 1 (said). */
static uint64_t run_metrics_start(struct run *r)
{
	char err[512];
	uint16_t port;

	if (!r->opt.metrics)
		return 0;
	if (launch_metrics_http_start(r->opt.metrics_address, r->opt.metrics_port,
				      run_render_metrics, r, &r->metrics, &port, err,
				      sizeof(err))) {
		fprintf(stderr, "selene run: --metrics-port: %s\n", err);
		return 1;
	}
	printf("selene run: metrics at http://%s%s%s:%u/metrics\n",
	       r->opt.metrics_address && strchr(r->opt.metrics_address, ':') ? "[" : "",
	       r->opt.metrics_address ? r->opt.metrics_address : "127.0.0.1",
	       r->opt.metrics_address && strchr(r->opt.metrics_address, ':') ? "]" : "", port);
	fflush(stdout);
	return 0;
}

/* Rank zero after the store opened: the trace, then close. Returns the
 * number of failures. */
static uint64_t run_rank_zero(struct run *r)
{
	uint64_t t0 = sel_monotonic_ns(), failures = 0;
	int closed;

	printf("  %-16s %10s %11s %9s %10s  %s\n", "request", "gpu_reused", "host_reused",
	       "prefilled", "restore_ms", "verified");
	for (uint32_t i = 0; i < r->trace.request_count && !r->stopped && !run_signal; i++)
		failures += run_request(r, &r->trace.requests[i]) != 0;
	if (run_signal) {
		r->interrupted = true;
		failures++;
		fprintf(stderr, "selene run: %s after %u of %u requests: admitting no more, "
			"draining the store\n", strsignal(run_signal), r->totals.requests,
			r->trace.request_count);
	}
	/* what was offered is stored before the ranks exit */
	if (!r->stopped)
		failures += run_settle(r) != 0;
	if (!r->stopped)
		failures += run_pool_offer_until_quiet(r) != 0;
	if (!r->stopped)
		run_await_disk(r);
	for (uint32_t i = 0; i < r->opt.gpu_rows; i++)
		if (r->retries[i].pending) {
			r->totals.retries_at_end++; /* the store had no room until the end */
			run_forget_retry(r, &r->retries[i]);
		}
	launch_metrics_http_stop(r->metrics); /* it reads the store */
	r->metrics = NULL;
	r->warm_end_taken = (r->opt.warm_bytes || r->opt.pool) &&
			    sel_store_stats(r->store, &r->warm_end) == 0;
	run_log_index(r);
	run_watch_free(r);
	closed = sel_store_close(r->store, RUN_CLOSE_DRAIN_MS);
	r->store = NULL;
	if (closed) {
		fprintf(stderr, "selene run: closing the store: %s\n", sel_strerror(closed));
		failures++;
		r->stopped |= closed == SEL_ESTOPPED;
	}
	failures += r->totals.wrong_units + r->totals.store_failures +
		    r->totals.fetch_failures + r->totals.offer_failures +
		    r->totals.expectations_missed + r->stopped;
	run_summary(r, failures == 0, (double)(sel_monotonic_ns() - t0) / 1e9);
	if (r->results && (fflush(r->results) != 0 || ferror(r->results))) {
		fprintf(stderr, "selene run: writing %s failed: %s\n", r->opt.results_path,
			strerror(errno));
		failures++;
	}
	return failures;
}

/* Every other rank: serve the store's jobs and rank zero's steps. */
static uint64_t run_follow(struct run *r)
{
	uint64_t failures = 0;

	for (;;) {
		int64_t got = run_step_all(r);

		if (got < 0 && got != -EREMOTEIO) {
			failures++; /* the channel failed: rank zero cannot reach us */
			break;
		}
		if (r->step.op == RUN_STEP_END) {
			failures += r->step.failed;
			break;
		}
	}
	return failures;
}

/* COUNTxSIZE[,COUNTxSIZE...], at most RUN_PLANES_MAX planes in all, each
 * unit at most REC_UNIT_BYTES_MAX (the record format's limits). */
static bool run_parse_planes(const char *text, struct run_options *o)
{
	char copy[512], *save = NULL, why[128];
	uint32_t total = 0;
	uint64_t count;

	o->spec_count = 0;
	if (strlen(text) >= sizeof(copy)) {
		fprintf(stderr, "selene run: --planes: longer than %zu characters\n",
			sizeof(copy) - 1);
		return false;
	}
	strcpy(copy, text);
	/* strsep, not strtok_r: an empty item ("2x4K,", ",,") is an error, not skipped */
	save = copy;
	for (char *item = strsep(&save, ","); item; item = strsep(&save, ",")) {
		char *x = strchr(item, 'x');
		struct launch_run_plane_spec *s = &o->specs[o->spec_count];

		if (!x || o->spec_count == RUN_PLANES_MAX) {
			fprintf(stderr, "selene run: --planes %s: not COUNTxSIZE[,COUNTxSIZE...]\n",
				text);
			return false;
		}
		*x = '\0';
		if (launch_parse_number(item, LAUNCH_COUNT, 1, RUN_PLANES_MAX, &count, why,
					sizeof(why)) ||
		    launch_parse_number(x + 1, LAUNCH_SIZE, 1, REC_UNIT_BYTES_MAX, &s->unit_bytes,
					why, sizeof(why))) {
			fprintf(stderr, "selene run: --planes %s: %s (planes at most %u, a unit "
				"at most %llu bytes: the record format's limits)\n", text, why,
				RUN_PLANES_MAX, (unsigned long long)REC_UNIT_BYTES_MAX);
			return false;
		}
		if (count > RUN_PLANES_MAX - total) {
			fprintf(stderr, "selene run: --planes %s: more than %u planes in all "
				"(the record format's limit)\n", text, RUN_PLANES_MAX);
			return false;
		}
		s->count = (uint32_t)count;
		total += s->count;
		o->spec_count++;
	}
	if (o->spec_count == 0)
		fprintf(stderr, "selene run: --planes %s: not COUNTxSIZE[,COUNTxSIZE...]\n", text);
	return o->spec_count > 0;
}

static void run_usage(FILE *out)
{
	fprintf(out,
		"usage: selene run --trace FILE --dir BASE [options]\n\n"
		"One rank of the reference tensor-parallel worker. Launch every rank with\n"
		"mpirun (MPI carries the worker's steps); a single rank needs no launcher.\n"
		"Rank zero runs the trace: a GPU prefix-cache lookup, a lookup in the store\n"
		"and a restore of what the GPU lacks, a synthetic prefill of the rest and a\n"
		"checkpoint published at every span boundary; every rank checks every\n"
		"reused page and row byte-exact. Exits 1 when any check fails on any rank.\n\n"
		"  --trace FILE        JSON lines: {\"id\": \"..\", \"spans\": [[seed, count], ..],\n"
		"                      \"expect\": {\"gpu_reused\": N, \"host_reused\": N,\n"
		"                      \"prefilled\": N}} (expect optional)\n"
		"  --dir BASE          the store's base directory; %%r becomes the rank\n"
		"  --results FILE      one JSON line per request, then a summary line\n"
		"                      (with --warm its \"warm\" figures: hits, partial_hits,\n"
		"                      read_throughs, writes, dirty_at_close)\n"
		"  --stored-log FILE   a JSON line per checkpoint reported stored, flushed:\n"
		"                      {\"id\": REQUEST, \"consumed\": TOKENS} (on disk;\n"
		"                      with --warm restorable, and once its file is on\n"
		"                      every rank's disk the same with \"on_disk\": true);\n"
		"                      one with \"evicted\": true (or \"dropped\": true)\n"
		"                      when one this run stored or restored no longer\n"
		"                      restores whole; {\"publishing\": true} and\n"
		"                      {\"published\": true} around each publication,\n"
		"                      which may evict\n"
		"  --page-tokens N     tokens per page (default 64)\n"
		"  --planes LIST       page planes, COUNTxBYTES[,...] (default 8x32K)\n"
		"  --row-bytes SIZE    the state row (default 128K)\n"
		"  --gpu-pages N       page ids in the GPU cache (default 256)\n"
		"  --gpu-rows N        state slots in the GPU cache (default 16)\n"
		"  --device KIND       auto (default), cuda or host\n"
		"  --device-ordinal N  the CUDA device (default OMPI_COMM_WORLD_LOCAL_RANK)\n"
		"  --disk-limit SIZE   auto (a tenth of the free space, default), 0 or a size\n"
		"  --event-timeout-ms N  how long rank zero waits for the next store or\n"
		"                      restore event before it fails the run (default 120000)\n"
		"  --warm SIZE         a warm tier of SIZE host memory on every rank, in\n"
		"                      front of the disk (default 0: none; the same on\n"
		"                      every rank)\n"
		"  --warm-policy P     write-through (default: a record's file is written\n"
		"                      as soon as it is warm) or write-behind (only when\n"
		"                      its slots are needed, or at close); every rank the same\n"
		"  --max-age-ms N      drop records not used for N ms from every tier (swept\n"
		"                      at most once a minute; default 0: never)\n"
		"  --pool ADDR         attach to the pool manager at host:port ([IPv6]:port):\n"
		"                      records evicted from the local tiers go to the pool,\n"
		"                      and lookups find what other instances of the same\n"
		"                      model and layout put there; a manager that does not\n"
		"                      answer within 10 s leaves the run local (one warning)\n"
		"  --pool-secret FILE  the pool's 32-byte secret (mode 600); needs --pool\n"
		"  --accept-empty-ranks  form even when a rank's record directory is unmarked\n"
		"                      (no .selene-cluster, or all its records unreadable)\n"
		"                      and empty, or unmarked while another is marked, while\n"
		"                      others hold records: the agreement then deletes them\n"
		"                      on every rank (also SELENE_ACCEPT_EMPTY_RANKS=1); a\n"
		"                      marked empty directory forms without it\n"
		"  --metrics-port P    rank zero serves http://ADDRESS:P/metrics while it runs\n"
		"                      (0: a free port, printed); the store's metrics and the\n"
		"                      worker's selene_run_* families\n"
		"  --metrics-address A where to listen (default 127.0.0.1)\n\n"
		"Sizes take K, M, G, T (binary). Exit status: 0 every check passed, 1 a\n"
		"check or the run failed (or it was interrupted), 2 bad arguments.\n");
}

static int run_parse_args(struct run_options *o, int argc, char **argv)
{
	static const struct option options[] = {
		{ "trace", required_argument, NULL, 't' },
		{ "dir", required_argument, NULL, 'd' },
		{ "results", required_argument, NULL, 'o' },
		{ "page-tokens", required_argument, NULL, 'p' },
		{ "planes", required_argument, NULL, 'P' },
		{ "row-bytes", required_argument, NULL, 'R' },
		{ "gpu-pages", required_argument, NULL, 'g' },
		{ "gpu-rows", required_argument, NULL, 'G' },
		{ "device", required_argument, NULL, 'D' },
		{ "disk-limit", required_argument, NULL, 'L' },
		{ "warm", required_argument, NULL, 'W' },
		{ "warm-policy", required_argument, NULL, 'K' },
		{ "max-age-ms", required_argument, NULL, 'X' },
		{ "device-ordinal", required_argument, NULL, 'O' },
		{ "event-timeout-ms", required_argument, NULL, 'E' },
		{ "accept-empty-ranks", no_argument, NULL, 'a' },
		{ "metrics-port", required_argument, NULL, 'M' },
		{ "metrics-address", required_argument, NULL, 'A' },
		{ "stored-log", required_argument, NULL, 'S' },
		{ "pool", required_argument, NULL, 'Q' },
		{ "pool-secret", required_argument, NULL, 'q' },
		{ NULL, 0, NULL, 0 },
	};
	int opt, which = 0;
	bool ok = true;

	*o = (struct run_options){ .page_tokens = 64, .row_bytes = 128 << 10, .gpu_pages = 256,
				   .gpu_rows = 16, .device = "auto", .device_ordinal = -1,
				   .event_timeout_ms = RUN_EVENT_WAIT_MS,
				   .disk_limit = SEL_DISK_LIMIT_AUTO };
	run_parse_planes("8x32K", o);
	optind = 1;
	while (ok && (opt = getopt_long(argc, argv, "", options, &which)) != -1) {
		const char *flag = options[which].name;

		switch (opt) {
		case 't': o->trace_path = optarg; break;
		case 'd': o->dir = optarg; break;
		case 'o': o->results_path = optarg; break;
		case 'S': o->stored_log_path = optarg; break;
		case 'p': ok = launch_option_u32("run", flag, optarg, LAUNCH_COUNT, 1,
						 REC_PAGE_TOKENS_MAX, &o->page_tokens); break;
		case 'P': ok = run_parse_planes(optarg, o); break;
		case 'R': ok = launch_option_u64("run", flag, optarg, LAUNCH_SIZE, 1,
						 REC_ROW_BYTES_MAX, &o->row_bytes); break;
		case 'g': ok = launch_option_u32("run", flag, optarg, LAUNCH_COUNT, 1,
						 UINT32_MAX - 1, &o->gpu_pages); break;
		case 'G': ok = launch_option_u32("run", flag, optarg, LAUNCH_COUNT, 1,
						 UINT32_MAX - 1, &o->gpu_rows); break;
		case 'D':
			o->device = optarg;
			ok = strcmp(optarg, "auto") == 0 || strcmp(optarg, "cuda") == 0 ||
			     strcmp(optarg, "host") == 0;
			if (!ok)
				fprintf(stderr, "selene run: --device %s: auto, cuda or host\n",
					optarg);
			break;
		case 'L':
			ok = strcmp(optarg, "auto") == 0 ||
			     launch_option_u64("run", flag, optarg, LAUNCH_SIZE, 0, UINT64_MAX - 1,
					       &o->disk_limit);
			break;
		case 'W': ok = launch_option_u64("run", flag, optarg, LAUNCH_SIZE, 0, 1ull << 46,
						 &o->warm_bytes); break;
		case 'X': ok = launch_option_u64("run", flag, optarg, LAUNCH_COUNT, 0,
						 UINT64_MAX / 1000000u, &o->max_age_ms); break;
		case 'K':
			if (strcmp(optarg, "write-through") == 0) {
				o->warm_policy = SEL_WARM_WRITE_THROUGH;
			} else if (strcmp(optarg, "write-behind") == 0) {
				o->warm_policy = SEL_WARM_WRITE_BEHIND;
			} else {
				fprintf(stderr, "selene run: --warm-policy %s: write-through or "
					"write-behind\n", optarg);
				ok = false;
			}
			break;
		case 'E': ok = launch_option_u32("run", flag, optarg, LAUNCH_COUNT, 1,
						 UINT32_MAX, &o->event_timeout_ms); break;
		case 'M': {
			uint32_t port = 0;

			ok = launch_option_u32("run", flag, optarg, LAUNCH_COUNT, 0, 65535, &port);
			o->metrics = true;
			o->metrics_port = (uint16_t)port;
			break;
		}
		case 'A': o->metrics_address = optarg; break;
		case 'Q': o->pool = optarg; break;
		case 'q': o->pool_secret = optarg; break;
		case 'a': o->accept_empty_ranks = true; break;
		case 'O': {
			uint32_t v = 0;

			ok = launch_option_u32("run", flag, optarg, LAUNCH_COUNT, 0, 1023, &v);
			o->device_ordinal = (int)v;
			break;
		}
		default: ok = false; break;
		}
		which = 0;
	}
	if (ok && (!o->trace_path || !o->dir || optind != argc)) {
		fprintf(stderr, "selene run: --trace and --dir are required\n");
		ok = false;
	}
	if (ok && (!o->pool != !o->pool_secret)) {
		fprintf(stderr, "selene run: %s\n", o->pool ? "--pool needs --pool-secret FILE" :
			"--pool-secret needs --pool ADDR");
		ok = false;
	}
	if (ok && o->pool) {
		char host[SHARD_POOL_ADDRESS_BYTES_MAX + 1], why[256];
		uint16_t port;

		ok = shard_config_pool_address(o->pool, host, sizeof(host), &port, why,
					       sizeof(why)) == 0;
		if (!ok)
			fprintf(stderr, "selene run: --pool: %s\n", why);
	}
	if (ok && o->metrics_address && !o->metrics) {
		fprintf(stderr, "selene run: --metrics-address needs --metrics-port\n");
		ok = false;
	}
	/* Open MPI's local rank picks the GPU where --device-ordinal does not. */
	if (ok && o->device_ordinal < 0) {
		const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
		uint64_t v = 0;
		char why[128];

		if (local && launch_parse_number(local, LAUNCH_COUNT, 0, INT32_MAX, &v, why,
						 sizeof(why))) {
			fprintf(stderr, "selene run: OMPI_COMM_WORLD_LOCAL_RANK '%.40s': %s\n",
				local, why);
			ok = false;
		}
		o->device_ordinal = (int)v;
	}
	if (ok && getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) {
		uint64_t v;
		char why[128];

		if (launch_parse_number(getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), LAUNCH_COUNT, 1,
					REC_WORLD_SIZE_MAX, &v, why, sizeof(why))) {
			fprintf(stderr, "selene run: OMPI_COMM_WORLD_LOCAL_SIZE '%.40s': %s\n",
				getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), why);
			ok = false;
		}
	}
	return ok ? 0 : -EINVAL;
}


/* The store's configuration over this rank's planes. */
static int run_configure(struct run *r)
{
	struct launch_run_planes *p = &r->planes;

	if (launch_expand_rank(r->dir, sizeof(r->dir), r->opt.dir, r->boot.cluster.rank))
		return -ENAMETOOLONG;
	r->page_bytes = 0;
	for (uint32_t i = 0; i < p->plane_count; i++) {
		r->sel_planes[i] = (struct sel_plane){ p->names[i], p->unit_bytes[i],
						       p->page_base[i] };
		r->page_bytes += p->unit_bytes[i];
	}
	r->config = (struct sel_store_config){
		.dir = r->dir, .page_tokens = r->opt.page_tokens,
		.page_plane_count = p->plane_count, .page_planes = r->sel_planes,
		.row_plane = { "state", p->row_bytes, p->row_base },
		.page_count = p->page_count, .row_count = p->row_count,
		.device = launch_run_planes_device(p), .device_ordinal = r->opt.device_ordinal,
		.disk_limit_bytes = r->opt.disk_limit, .durable = true,
		.cluster = r->boot.cluster.world_size > 1 ? &r->boot.cluster : NULL,
		.warm_bytes = r->opt.warm_bytes, .warm_policy = r->opt.warm_policy,
		.max_age_ms = r->opt.max_age_ms,
		.pool = r->opt.pool, .pool_secret_file = r->opt.pool_secret,
	};
	/* one synthetic model: its identity names the worker and the page size */
	memset(r->config.model_identity, 0x5e, sizeof(r->config.model_identity));
	memcpy(r->config.model_identity, &r->opt.page_tokens, sizeof(r->opt.page_tokens));
	return 0;
}


/* The base directory, made where missing; it must be a writable directory
 * before the ranks join (a bad one would leave the others waiting for the
 * whole join timeout). */
static int run_check_dir(const char *dir, char *err, size_t err_size)
{
	char path[1024];
	struct stat st;

	snprintf(path, sizeof(path), "%s", dir);
	for (char *slash = strchr(path + 1, '/'); ; slash = strchr(slash + 1, '/')) {
		if (slash)
			*slash = '\0';
		if (mkdir(path, 0755) != 0 && errno != EEXIST) {
			int ret = -errno;

			snprintf(err, err_size, "cannot make %.400s: %s", path, strerror(-ret));
			return ret;
		}
		if (!slash)
			break;
		*slash = '/';
	}
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, err_size, "--dir %.400s is not a directory", dir);
		return -ENOTDIR;
	}
	if (access(dir, W_OK | X_OK) != 0) {
		snprintf(err, err_size, "--dir %.400s is not writable: %s", dir, strerror(errno));
		return -EACCES;
	}
	return 0;
}

/* a * b + c into *out; false on overflow. */
static bool run_mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
	return !__builtin_mul_overflow(a, b, out) && !__builtin_add_overflow(*out, c, out);
}

/*
 * Host memory this rank may give its planes: what the
 * host has available (shard_slab_memory_available: MemAvailable within the
 * memory cgroup's room), shared by every rank on it (OMPI_COMM_WORLD_LOCAL_SIZE),
 * less what the rank needs besides its planes: its shard engine's staging
 * (at most SHARD_STAGES restore windows and SHARD_STORE_STAGES_MAX store
 * windows of page records, as shard/engine.c sizes it),
 * the worker's scratch units and rank zero's GPU-cache bookkeeping. Planes
 * on a CUDA device are checked by their allocation there, which fails
 * cleanly. Returns 0 with *budget, or -ENOMEM with err when even the rest
 * does not fit.
 */
static int run_host_budget(const struct run *r, uint64_t *budget, char *err, size_t err_size)
{
	const struct run_options *o = &r->opt;
	uint64_t largest = o->row_bytes, record_bytes = 0, window, need = 0;
	uint64_t available = 0, ranks = 1;
	const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	bool ok;

	for (uint32_t s = 0; s < o->spec_count; s++) {
		record_bytes += o->specs[s].count * sel_align_up(o->specs[s].unit_bytes,
								 SEL_BLOCK_BYTES);
		largest = o->specs[s].unit_bytes > largest ? o->specs[s].unit_bytes : largest;
	}
	window = SHARD_WINDOW_BYTES / record_bytes;
	window = window == 0 ? 1 : window > SHARD_WINDOW_PAGES_MAX ? SHARD_WINDOW_PAGES_MAX : window;
	ok = run_mul_add((SHARD_STAGES + SHARD_STORE_STAGES_MAX) * window, record_bytes,
			 2 * largest + sel_align_up(o->row_bytes, SEL_BLOCK_BYTES), &need);
	if (r->boot.cluster.rank == 0)
		ok = ok && run_mul_add(o->gpu_pages, 3 * sizeof(uint32_t), need, &need) &&
		     run_mul_add(o->gpu_rows, sizeof(struct launch_gpu_checkpoint) +
				 sizeof(struct run_retry) + sizeof(uint32_t), need, &need);
	if (local && launch_parse_number(local, LAUNCH_COUNT, 1, REC_WORLD_SIZE_MAX, &ranks,
					 NULL, 0))
		ranks = 1; /* never: run_parse_args refused it */
	if (shard_slab_memory_available(&available) != 0) {
		*budget = UINT64_MAX; /* unknown: the allocations will say */
		return 0;
	}
	if (ok && need <= available / ranks) {
		*budget = available / ranks - need;
		return 0;
	}
	snprintf(err, err_size, "staging, scratch and cache bookkeeping for %u pages and %u "
		 "rows need %s%.1f GiB of host memory per rank; this host has %.1f GiB available "
		 "for %" PRIu64 " rank(s): lower --gpu-pages, --gpu-rows or --planes",
		 o->gpu_pages, o->gpu_rows, ok ? "" : "more than ",
		 (double)(ok ? need : UINT64_MAX) / (1u << 30), (double)available / (1u << 30),
		 ranks);
	return -ENOMEM;
}

/* What every rank sets up before the store: rank zero's trace, results
 * file and cache; every rank's planes. Returns 0, or 1 with a message. */
static uint64_t run_prepare(struct run *r)
{
	uint32_t rank = r->boot.cluster.rank;
	uint64_t host_budget;
	char err[512];

	if (run_host_budget(r, &host_budget, err, sizeof(err))) {
		fprintf(stderr, "selene run: rank %u: %s\n", rank, err);
		return 1;
	}
	if (rank == 0) {
		if (launch_trace_load(r->opt.trace_path, &r->trace, err, sizeof(err))) {
			fprintf(stderr, "selene run: %s\n", err);
			return 1;
		}
		r->retries = calloc(r->opt.gpu_rows, sizeof(*r->retries));
		r->slot_request = calloc(r->opt.gpu_rows, sizeof(*r->slot_request));
		if (!r->retries || !r->slot_request || launch_gpu_cache_init(&r->cache, r->opt.page_tokens,
							 r->opt.gpu_pages, r->opt.gpu_rows)) {
			fprintf(stderr, "selene run: out of memory for the GPU cache\n");
			return 1;
		}
		if (r->opt.results_path && !(r->results = fopen(r->opt.results_path, "w"))) {
			fprintf(stderr, "selene run: cannot write %s: %s\n", r->opt.results_path,
				strerror(errno));
			return 1;
		}
		/* a line is written whole or not at all, even if the run is killed */
		if (r->results)
			setvbuf(r->results, r->results_buffer, _IOLBF, sizeof(r->results_buffer));
		if (r->opt.stored_log_path &&
		    !(r->stored_log = fopen(r->opt.stored_log_path, "w"))) {
			fprintf(stderr, "selene run: cannot write %s: %s\n",
				r->opt.stored_log_path, strerror(errno));
			return 1;
		}
		if (r->stored_log) {
			/* a store per span boundary and a restore per request */
			for (uint32_t i = 0; i < r->trace.request_count; i++)
				r->watch_max += r->trace.requests[i].span_count + 1;
			r->watches = calloc(r->watch_max ? r->watch_max : 1, sizeof(*r->watches));
			if (!r->watches) {
				fprintf(stderr, "selene run: out of memory for --stored-log\n");
				return 1;
			}
		}
	}
	if (launch_run_planes_open(&r->planes, rank, r->opt.device, r->opt.device_ordinal,
				   r->opt.specs, r->opt.spec_count, r->opt.gpu_pages, r->opt.row_bytes,
				   r->opt.gpu_rows, host_budget, err, sizeof(err))) {
		fprintf(stderr, "selene run: rank %u: %s\n", rank, err);
		return 1;
	}
	if (run_configure(r)) {
		fprintf(stderr, "selene run: rank %u: --dir is too long (at most %zu bytes with "
			"%%r expanded)\n", rank, sizeof(r->dir) - 12);
		return 1;
	}
	if (run_check_dir(r->dir, err, sizeof(err))) {
		fprintf(stderr, "selene run: rank %u: %s\n", rank, err);
		return 1;
	}
	return 0;
}

/* Opens the store (rank zero) or starts the peer agent (the others). */
static uint64_t run_start(struct run *r, sel_peer **peer)
{
	char err[512];
	int ret;

	if (r->boot.cluster.rank == 0)
		ret = sel_store_open(&r->config, &r->store, err, sizeof(err));
	else
		ret = sel_peer_start(&r->config, peer, err, sizeof(err));
	if (ret)
		fprintf(stderr, "selene run: rank %u: %s\n", r->boot.cluster.rank, err);
	else if (r->boot.cluster.rank == 0)
		printf("selene run: %u %s, %s device, %u page %s (%" PRIu64 " bytes a page "
		       "per rank), %" PRIu64 "-byte rows, GPU cache of %u %s and %u %s, "
		       "trace %s (%u %s)\n", r->boot.cluster.world_size,
		       launch_plural(r->boot.cluster.world_size, "rank", "ranks"),
		       launch_run_planes_device(&r->planes), r->planes.plane_count,
		       launch_plural(r->planes.plane_count, "plane", "planes"), r->page_bytes,
		       r->opt.row_bytes, r->opt.gpu_pages,
		       launch_plural(r->opt.gpu_pages, "page", "pages"), r->opt.gpu_rows,
		       launch_plural(r->opt.gpu_rows, "row", "rows"), r->opt.trace_path,
		       r->trace.request_count,
		       launch_plural(r->trace.request_count, "request", "requests"));
	return ret != 0;
}

/* A peer's end: rank zero closed the store; confirm the drain. */
static uint64_t run_stop_peer(struct run *r, sel_peer *peer)
{
	int ret = sel_peer_wait(peer);

	if (ret)
		fprintf(stderr, "selene run: rank %u: the peer stopped: %s\n",
			r->boot.cluster.rank, sel_strerror(ret));
	/* an undrained peer frees nothing, and its planes stay too */
	sel_peer_stop(peer);
	if (ret == SEL_ESTOPPED)
		r->stopped = true;
	return ret != 0;
}

/* With SELENE_FAILPOINTS set, says which fired here and how often, so
 * that a fault loop knows an armed error was met. */
static void run_report_failpoints(const struct run *r)
{
	const char *armed = getenv("SELENE_FAILPOINTS");

	if (!armed || !armed[0])
		return;
	for (int i = 0; i < SEL_FAILPOINT_COUNT; i++) {
		uint64_t fired = sel_failpoint_fired((enum sel_failpoint)i);

		if (fired)
			fprintf(stderr, "selene run: rank %u: failpoint %s fired %" PRIu64
				" time(s)\n", r->boot.cluster.rank,
				sel_failpoint_name((enum sel_failpoint)i), fired);
	}
}

/* Every rank: the whole run. Returns the failures summed over every rank. */
static uint64_t run_all(struct run *r)
{
	sel_peer *peer = NULL;
	uint64_t failed = run_prepare(r), total = failed;
	int ret;

	if (launch_step_sum(&r->boot, &total, 1) || total)
		return total ? total : 1;
	failed = run_start(r, &peer);
	total = failed;
	/*
	 * A rank whose start failed may be one the others never hear of (a
	 * peer that could open no socket to rank zero: rank zero would wait
	 * out its join timeout): the sum waits RUN_START_FAILURE_MS, then the
	 * job ends.
	 */
	ret = failed ? launch_step_sum_within(&r->boot, &total, 1, RUN_START_FAILURE_MS) :
		       launch_step_sum(&r->boot, &total, 1);
	if (ret == -ETIMEDOUT) {
		fprintf(stderr, "selene run: rank %u: the other ranks did not learn of this "
			"failure within %u ms; ending the job\n", r->boot.cluster.rank,
			RUN_START_FAILURE_MS);
		run_report_failpoints(r); /* the abort ends this process */
		launch_step_abort(&r->boot, 1);
	}
	if (ret || total) {
		sel_store_close(r->store, RUN_CLOSE_DRAIN_MS);
		r->store = NULL;
		if (peer)
			run_stop_peer(r, peer);
		return total ? total : 1;
	}
	if (r->boot.cluster.rank == 0) {
		failed = run_metrics_start(r);
		failed = failed ? failed : run_rank_zero(r);
		if (r->store) { /* the metrics server could not start */
			sel_store_close(r->store, RUN_CLOSE_DRAIN_MS);
			r->store = NULL;
		}
		r->step.op = RUN_STEP_END;
		r->step.page_count = 0;
		r->step.failed = failed != 0;
		failed += run_step_all(r) != 0;
	} else {
		failed = run_follow(r);
		failed += run_stop_peer(r, peer);
	}
	total = failed;
	if (launch_step_sum(&r->boot, &total, 1))
		return failed ? failed : 1;
	return total;
}

int launch_cmd_run(int argc, char **argv)
{
	struct run *r;
	char err[512];
	uint64_t failures;
	int ret;

	if (launch_wants_help(argc, argv)) {
		run_usage(stdout);
		return LAUNCH_EXIT_OK;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return LAUNCH_EXIT_BAD;
	pthread_mutex_init(&r->shown_lock, NULL);
	if (run_parse_args(&r->opt, argc, argv)) {
		fprintf(stderr, "selene run: 'selene run --help' lists the options\n");
		free(r);
		return LAUNCH_EXIT_USAGE;
	}
	ret = launch_bootstrap(&r->boot, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "selene run: %s\n", err);
		launch_bootstrap_finish(&r->boot);
		free(r);
		/* -EINVAL: the launch's variables are wrong; else MPI failed */
		return ret == -EINVAL ? LAUNCH_EXIT_USAGE : LAUNCH_EXIT_BAD;
	}
	r->boot.cluster.accept_empty_ranks |= r->opt.accept_empty_ranks;
	if (!launch_step_available(&r->boot)) {
		fprintf(stderr, "selene run: %u ranks need MPI for the worker's steps: launch "
			"with mpirun and leave SELENE_COORDINATOR unset%s\n",
			r->boot.cluster.world_size, launch_bootstrap_mpi_available() ? "" :
			" (and this selene was built without Open MPI)");
		launch_bootstrap_finish(&r->boot);
		free(r);
		return LAUNCH_EXIT_USAGE;
	}
	{
		struct sigaction on_signal = { .sa_handler = run_on_signal,
					       .sa_flags = SA_RESTART | SA_RESETHAND };

		sigemptyset(&on_signal.sa_mask);
		sigaction(SIGINT, &on_signal, NULL);
		sigaction(SIGTERM, &on_signal, NULL);
	}
	failures = run_all(r);
	run_report_failpoints(r);
	run_watch_free(r);
	if (r->results)
		fclose(r->results);
	if (r->stored_log)
		fclose(r->stored_log);
	free(r->unwritten);
	free(r->slot_request);
	launch_trace_free(&r->trace);
	launch_gpu_cache_destroy(&r->cache);
	free(r->retries);
	/* a stopped transport may still copy into the planes: keep them */
	if (!r->stopped)
		launch_run_planes_close(&r->planes);
	launch_bootstrap_finish(&r->boot);
	if (failures)
		fprintf(stderr, "selene run: rank %u: %" PRIu64 " %s across the ranks\n",
			r->boot.cluster.rank, failures,
			launch_plural(failures, "failure", "failures"));
	pthread_mutex_destroy(&r->shown_lock);
	free(r);
	return failures ? LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
}
