/*
 * A seeded randomized simulation of the warm tier's slot accounting across
 * ranks (docs/DESIGN.md section 6, "Policy (rank zero ...)"): rank zero's
 * real struct coord_store, with a warm tier, drives jobs through a stub
 * fan-out that copies each one to 2 to 4 simulated ranks. Each rank holds
 * a real struct shard_warm and runs its jobs as the shard engine's
 * transfer thread does (shard/engine.c): jobs arrive in submission order;
 * fetches and warm drops go on the restore lane, taken before every
 * queued background job; stores begin only with the restore lane dry, up
 * to stores_max at once, a second store of a key after the first, and a
 * truncate or unlink only once every store before it completed. A random
 * scheduler interleaves rank zero's calls and polls, each rank's steps and
 * the ranks' answers; a job completes at rank zero once every rank
 * answered (a failed store first unlinked where it was written, as the
 * fan-out does), with failures injected on single ranks (an I/O error, a
 * checksum that condemns a record, a full disk). Publications are of a few
 * histories' points (roots, children, page-less records, two histories
 * sharing a prefix, page-only records published again: rewrites) under a
 * small disk limit and index, so evictions, compaction and warm drops run
 * all the time, and max-age sweeps now and then; each rank keeps its
 * record files (a store's or a write from warm's, truncated, unlinked),
 * which outlive a restart: now and then, every job done, the ranks
 * restart (the index loaded cold from the files on every rank, less
 * those whose parent's file goes, R-DIR-6; the warm tiers empty).
 *
 * What it asserts, at every step: no read-through falls back for want of
 * slots, no warm store (field 1 or 2) finds too few free, no warm-only
 * store drops read-through records or fails with -ENOBUFS, no warm drop
 * finds its write from warm in flight, no write from warm finds no warm
 * copy, no rank holds a file whose parent's file it lacks, and every
 * record rank zero has on disk (READY, clean) has its file on every rank;
 * a restart loads every such record; whenever every job is done, each
 * rank holds exactly the records rank zero counts warm, each with the
 * slots it counts, and nothing else but slots_stranded, and nothing stays
 * releasing; the closing drain writes every dirty record. It is not a
 * test of bytes: the shard engine's own tests cover what the slots hold.
 *
 * SELENE_SIM_SEED=n replays seed n alone (SELENE_SIM_TRACE=1 prints every
 * event); SELENE_SIM_SEEDS and SELENE_SIM_STEPS change the defaults.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/log.h"
#include "coordinator/store.h"
#include "selene/selene.h"
#include "shard/engine.h"
#include "shard/warm.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SIM_RANKS_MAX 4u
#define SIM_STORES_MAX 4u
#define SIM_QUEUE_MAX 1024u       /* a rank's queue: far above the jobs in flight */
#define SIM_FILES_MAX 512u        /* a rank's record files: far above the index */
#define SIM_HISTORIES 5u
#define SIM_TOKENS 4000u
#define SIM_POINTS 12u            /* publication points of a history */
#define SIM_PAGE_TOKENS 64u
#define SIM_SLOT_BYTES 4096u
#define SIM_SEEDS_DEFAULT 200u
#define SIM_STEPS_DEFAULT 5000u
/* Rank zero calls the API only below this many jobs in flight (of COORD_JOBS_MAX). */
#define SIM_API_JOBS_MAX 40u

/* A ring of job (or answer) indexes. */
struct sim_queue {
	uint32_t items[SIM_QUEUE_MAX];
	uint32_t head, count;
};

/* One job as every rank got it, and the fan-out's state for it. */
struct sim_job {
	enum coord_job_kind kind;       /* STORE, FETCH, TRUNCATE, UNLINK, WARM_DROP */
	uint64_t coord_id;              /* rank zero's job id */
	struct rec_key key;             /* a store's, truncate's, unlink's or drop's */
	struct rec_key parent;          /* a store's header's (consumed 0: a root) */
	struct rec_digest bucket;       /* a store's */
	uint64_t created_ns;            /* a store's */
	uint32_t first_page_index, tail_page_count; /* a store's */
	uint8_t warm;                   /* a store's enum shard_store_warm */
	bool replaces;
	struct shard_chain_record *chain; /* a fetch's */
	uint32_t chain_count, skip_pages;
	bool read_through;
	uint32_t cleanup_of;            /* the fan-out's unlink of that failed store, or NONE */
	/* the fan-out */
	uint32_t remaining;
	int result;
	char why[200];
	bool wrote[SIM_RANKS_MAX];
};

/* A store in progress on a rank (the engine's store_run). */
struct sim_run {
	uint32_t job;                   /* SIM_NONE: free */
	uint32_t entry;                 /* its warm entry, or SHARD_WARM_NONE */
	bool from_warm;
	int result;
};

struct sim_answer {
	uint32_t job;
	int result;
	char why[200];
};

/* A record file on a rank's disk: what a startup scan would list. */
struct sim_file {
	struct rec_record_info info;
	bool present;
};

struct sim_rank {
	struct shard_warm warm;
	struct sim_file files[SIM_FILES_MAX]; /* its disk, outliving restarts */
	struct sim_queue inbox;         /* sent, not yet queued by the engine */
	struct sim_queue restores, background;
	struct sim_run runs[SIM_STORES_MAX];
	uint32_t active;
	struct sim_answer answers[SIM_QUEUE_MAX]; /* on the link to rank zero */
	uint32_t answer_head, answer_count;
};

struct sim {
	uint32_t ranks, stores_max, fail_per_mille;
	uint32_t speed[SIM_RANKS_MAX], speed_total; /* how often each rank moves */
	uint32_t refuse_per_mille;      /* submissions refused (a full engine queue) */
	uint32_t slots_total, records_max;
	uint64_t limit_bytes;
	uint8_t policy;
	struct rec_geometry g;
	struct rec_identity model;
	struct rec_history h[SIM_HISTORIES];
	uint64_t points[SIM_POINTS];
	struct coord_store *store;
	struct sim_rank rank[SIM_RANKS_MAX];
	struct sim_job *jobs;
	uint32_t job_count, job_capacity;
	struct shard_completion *done; /* completed at rank zero, not yet polled */
	uint32_t done_count, done_capacity;
	uint32_t page_ids[64];
	uint64_t checkpoint, waiter;
	bool lossy;                     /* rank zero's job table filled at some point */
	char failure[512];
	/* counters, for the summary */
	uint64_t quiescent_checks, read_throughs, warm_stores, injected, rewrites;
	uint64_t file_writes, expiry_sweeps;
	uint64_t mtime;                 /* the disks' clock: each file write ticks it */
	struct sel_stats stats;         /* rank zero's, summed over its starts */
	struct tu_seeded run;           /* seed, generator, step and last events */
};

#define SIM_NONE UINT32_MAX

static uint32_t sim_below(struct sim *sim, uint32_t n)
{
	return tu_seeded_below(&sim->run, n);
}

static void sim_trace(struct sim *sim, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void sim_trace(struct sim *sim, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tu_seeded_vtrace(&sim->run, fmt, ap);
	va_end(ap);
}

/* Notes the first violation; the run stops at the end of the step. */
static void sim_fail(struct sim *sim, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void sim_fail(struct sim *sim, const char *fmt, ...)
{
	va_list ap;

	if (sim->failure[0])
		return;
	va_start(ap, fmt);
	vsnprintf(sim->failure, sizeof(sim->failure), fmt, ap);
	va_end(ap);
	sim_trace(sim, "FAIL %s", sim->failure);
}

static void queue_push(struct sim_queue *q, uint32_t item)
{
	SEL_ASSERT(q->count < SIM_QUEUE_MAX);
	q->items[(q->head + q->count++) % SIM_QUEUE_MAX] = item;
}

static uint32_t queue_peek(const struct sim_queue *q)
{
	return q->count ? q->items[q->head] : SIM_NONE;
}

static uint32_t queue_pop(struct sim_queue *q)
{
	uint32_t item = queue_peek(q);

	if (q->count) {
		q->head = (q->head + 1) % SIM_QUEUE_MAX;
		q->count--;
	}
	return item;
}

/* A key for the trace: its tokens and its digest's first bytes. */
static const char *key_text(const struct rec_key *key, char *out, size_t size)
{
	snprintf(out, size, "%llu.%02x%02x", (unsigned long long)key->consumed,
		 key->digest.bytes[0], key->digest.bytes[1]);
	return out;
}

/* key_text in a buffer of the calling expression's own. */
#define KEY(k) key_text(&(k), (char[40]){ 0 }, 40)

static const char *kind_name(enum coord_job_kind kind)
{
	switch (kind) {
	case COORD_JOB_STORE: return "store";
	case COORD_JOB_FETCH: return "fetch";
	case COORD_JOB_TRUNCATE: return "truncate";
	case COORD_JOB_UNLINK: return "unlink";
	case COORD_JOB_WARM_DROP: return "warm-drop";
	default: return "other";
	}
}

/* ---- the fan-out: jobs to every rank, answers back ---- */

static uint32_t job_new(struct sim *sim, enum coord_job_kind kind, uint64_t coord_id)
{
	struct sim_job *j;

	if (sim->job_count == sim->job_capacity) {
		sim->job_capacity = sim->job_capacity ? 2 * sim->job_capacity : 1024;
		sim->jobs = realloc(sim->jobs, sim->job_capacity * sizeof(*sim->jobs));
		SEL_ASSERT(sim->jobs);
	}
	j = &sim->jobs[sim->job_count];
	memset(j, 0, sizeof(*j));
	j->kind = kind;
	j->coord_id = coord_id;
	j->cleanup_of = SIM_NONE;
	return sim->job_count++;
}

/* Sends job to the ranks in mask (every rank's bit: all of them). */
static void job_send(struct sim *sim, uint32_t job, uint32_t mask)
{
	sim->jobs[job].remaining = 0;
	for (uint32_t r = 0; r < sim->ranks; r++) {
		if (!(mask >> r & 1))
			continue;
		queue_push(&sim->rank[r].inbox, job);
		sim->jobs[job].remaining++;
	}
}

static void complete_to_zero(struct sim *sim, const struct sim_job *j)
{
	if (sim->done_count == sim->done_capacity) {
		sim->done_capacity = sim->done_capacity ? 2 * sim->done_capacity : 64;
		sim->done = realloc(sim->done, sim->done_capacity * sizeof(*sim->done));
		SEL_ASSERT(sim->done);
	}
	sim->done[sim->done_count++] = (struct shard_completion){
		.job_id = j->coord_id, .kind = SHARD_JOB_NOOP, .result = j->result,
		.bytes = j->result ? 0 : 4096 };
	snprintf(sim->done[sim->done_count - 1].why, 200, "%s", j->why);
}

/* One rank's answer reaches the fan-out (coordinator/fanout.c apply). */
static void fanout_apply(struct sim *sim, uint32_t rank, const struct sim_answer *a)
{
	struct sim_job *j = &sim->jobs[a->job];
	struct sim_job *owner = j->cleanup_of == SIM_NONE ? j : &sim->jobs[j->cleanup_of];
	uint32_t mask = 0;

	if (j->cleanup_of == SIM_NONE) {
		if (a->result && !j->result) {
			j->result = a->result;
			snprintf(j->why, sizeof(j->why), "rank %u: %.180s", rank, a->why);
		} else if (!a->result) {
			j->wrote[rank] = true;
		}
	}
	SEL_ASSERT(owner->remaining > 0);
	if (--owner->remaining > 0)
		return;
	/* A failed store is unlinked where it was written before it is reported. */
	if (j->cleanup_of == SIM_NONE && j->kind == COORD_JOB_STORE && j->result &&
	    !j->replaces) {
		for (uint32_t r = 0; r < sim->ranks; r++)
			mask |= (uint32_t)j->wrote[r] << r;
		if (mask) {
			uint32_t cleanup = job_new(sim, COORD_JOB_UNLINK, j->coord_id);

			j = &sim->jobs[a->job]; /* job_new may move the table */
			sim->jobs[cleanup].key = j->key;
			sim->jobs[cleanup].cleanup_of = a->job;
			job_send(sim, cleanup, mask);
			j->remaining = sim->jobs[cleanup].remaining;
			sim->jobs[cleanup].remaining = 0;
			sim_trace(sim, "fanout: store job %llu failed: cleanup unlink to ranks %#x",
				  (unsigned long long)j->coord_id, mask);
			return;
		}
	}
	sim_trace(sim, "fanout: %s job %llu done (%d)", kind_name(owner->kind),
		  (unsigned long long)owner->coord_id, owner->result);
	complete_to_zero(sim, owner);
}

/*
 * Whether rank zero's engine refuses this submission (its queue full).
 * Never a warm drop: one refused after a failed read-through leaves the
 * records listed warm where a rank may not hold them (docs/DESIGN.md
 * section 6), which a later read-through there then reserves uncounted.
 */
static bool refuse(struct sim *sim, enum coord_job_kind kind)
{
	bool refused = sim_below(sim, 1000) < sim->refuse_per_mille;

	if (refused)
		sim_trace(sim, "zero: %s refused", kind_name(kind));
	return refused;
}

static int stub_store(void *ctx, uint64_t id, const struct shard_store_job *store)
{
	struct sim *sim = ctx;
	uint32_t job;
	struct sim_job *j;

	if (refuse(sim, COORD_JOB_STORE))
		return SEL_EQUEUEFULL;
	job = job_new(sim, COORD_JOB_STORE, id);
	j = &sim->jobs[job];
	j->key = store->header->key;
	j->parent = store->header->parent;
	j->bucket = store->header->bucket;
	j->created_ns = store->header->created_ns;
	j->first_page_index = store->header->first_page_index;
	j->tail_page_count = store->header->tail_page_count;
	j->warm = store->warm;
	j->replaces = store->replaces;
	sim->rewrites += j->replaces && j->warm == SHARD_STORE_COLD;
	sim_trace(sim, "zero: store job %llu key %s first %u tail %u warm %u%s",
		  (unsigned long long)id, KEY(j->key),
		  j->first_page_index, j->tail_page_count, j->warm,
		  j->replaces ? " replaces" : "");
	job_send(sim, job, UINT32_MAX);
	return 0;
}

static int stub_fetch(void *ctx, uint64_t id, const struct shard_fetch_job *fetch)
{
	struct sim *sim = ctx;
	uint32_t job;
	struct sim_job *j;
	char line[120];
	int n = 0;

	if (refuse(sim, COORD_JOB_FETCH))
		return SEL_EQUEUEFULL;
	job = job_new(sim, COORD_JOB_FETCH, id);
	j = &sim->jobs[job];
	j->chain = malloc(fetch->chain_count * sizeof(*j->chain));
	SEL_ASSERT(j->chain);
	memcpy(j->chain, fetch->chain, fetch->chain_count * sizeof(*j->chain));
	j->chain_count = fetch->chain_count;
	j->skip_pages = fetch->skip_pages;
	j->read_through = fetch->read_through;
	sim->read_throughs += j->read_through;
	line[0] = 0;
	for (uint32_t i = 0; i < j->chain_count && n < (int)sizeof(line) - 16; i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, " %s/%u",
			      KEY(j->chain[i].key),
			      j->chain[i].tail_page_count);
	sim_trace(sim, "zero: fetch job %llu skip %u%s chain%s", (unsigned long long)id,
		  j->skip_pages, j->read_through ? " read-through" : "", line);
	job_send(sim, job, UINT32_MAX);
	return 0;
}

static int stub_keyed(struct sim *sim, enum coord_job_kind kind, uint64_t id,
		      const struct rec_key *key)
{
	uint32_t job;

	if (kind != COORD_JOB_WARM_DROP && refuse(sim, kind))
		return SEL_EQUEUEFULL;
	job = job_new(sim, kind, id);
	sim->jobs[job].key = *key;
	sim_trace(sim, "zero: %s job %llu key %s", kind_name(kind), (unsigned long long)id,
		  KEY(*key));
	job_send(sim, job, UINT32_MAX);
	return 0;
}

static int stub_truncate(void *ctx, uint64_t id, const struct rec_key *key)
{
	return stub_keyed(ctx, COORD_JOB_TRUNCATE, id, key);
}

static int stub_unlink(void *ctx, uint64_t id, const struct rec_key *key)
{
	return stub_keyed(ctx, COORD_JOB_UNLINK, id, key);
}

static int stub_warm_drop(void *ctx, uint64_t id, const struct rec_key *key)
{
	return stub_keyed(ctx, COORD_JOB_WARM_DROP, id, key);
}

static uint32_t stub_poll(void *ctx, struct shard_completion *out, uint32_t max)
{
	struct sim *sim = ctx;
	uint32_t n = sim->done_count < max ? sim->done_count : max;

	if (n == 0)
		return 0;
	memcpy(out, sim->done, n * sizeof(*out));
	memmove(sim->done, sim->done + n, (sim->done_count - n) * sizeof(*out));
	sim->done_count -= n;
	return n;
}

/* ---- a rank's disk: its record files ---- */

/* Rank r's file of key, or NULL. */
static struct sim_file *file_find(struct sim *sim, uint32_t r, const struct rec_key *key)
{
	for (uint32_t i = 0; i < SIM_FILES_MAX; i++) {
		struct sim_file *f = &sim->rank[r].files[i];

		if (f->present && rec_key_equal(&f->info.key, key))
			return f;
	}
	return NULL;
}

/* Rank r's file of info's key is info (a new one, or one replacing the key's). */
static void file_put(struct sim *sim, uint32_t r, const struct rec_record_info *info)
{
	struct sim_file *f = file_find(sim, r, &info->key);

	for (uint32_t i = 0; !f && i < SIM_FILES_MAX; i++)
		if (!sim->rank[r].files[i].present)
			f = &sim->rank[r].files[i];
	SEL_ASSERT(f);
	f->present = true;
	f->info = *info;
	f->info.mtime_ns = ++sim->mtime;
}

/* A store's file (with its row, as every store writes it) committed on rank r. */
static void file_write(struct sim *sim, uint32_t r, const struct sim_job *j)
{
	file_put(sim, r, &(struct rec_record_info){
			 .key = j->key, .parent = j->parent, .bucket = j->bucket,
			 .first_page_index = j->first_page_index,
			 .tail_page_count = j->tail_page_count, .row_present = true,
			 .file_bytes = rec_geometry_file_bytes(&sim->g, j->tail_page_count, true),
			 .created_ns = j->created_ns });
	sim->file_writes++;
	sim_trace(sim, "rank %u: file %s written (parent %s)", r, KEY(j->key), KEY(j->parent));
}

/* A truncate (row false) or an unlink of key's file on rank r, where there is one. */
static void file_reclaim(struct sim *sim, uint32_t r, const struct rec_key *key, bool truncate)
{
	struct sim_file *f = file_find(sim, r, key);

	if (!f)
		return;
	if (!truncate) {
		f->present = false;
		return;
	}
	f->info.row_present = false;
	f->info.file_bytes = rec_geometry_file_bytes(&sim->g, f->info.tail_page_count, false);
	f->info.mtime_ns = ++sim->mtime;
}

/* ---- a rank: its engine's lanes over a real warm tier ---- */

static void rank_answer(struct sim *sim, uint32_t r, uint32_t job, int result, const char *why)
{
	struct sim_rank *rk = &sim->rank[r];
	struct sim_answer *a;

	SEL_ASSERT(rk->answer_count < SIM_QUEUE_MAX);
	a = &rk->answers[(rk->answer_head + rk->answer_count++) % SIM_QUEUE_MAX];
	a->job = job;
	a->result = result;
	snprintf(a->why, sizeof(a->why), "%s", why ? why : "");
}

/* Whether this rank fails this job (an injected I/O or copy failure). */
static bool inject(struct sim *sim)
{
	bool fail = sim_below(sim, 1000) < sim->fail_per_mille;

	sim->injected += fail;
	return fail;
}

static bool restore_lane(enum coord_job_kind kind)
{
	return kind == COORD_JOB_FETCH || kind == COORD_JOB_WARM_DROP;
}

/* The slots entry e holds: its pages and, with one, its row. */
static uint32_t entry_slots(const struct shard_warm *w, uint32_t e)
{
	const struct shard_warm_entry *entry = shard_warm_at(w, e);

	return shard_warm_slots_for(w, entry->tail_page_count,
				    entry->row_first != SHARD_WARM_NONE);
}

/* fetch_is_warm (shard/engine.c): every record warm as the index knows it, the last with its row. */
static bool fetch_is_warm(struct shard_warm *w, const struct sim_job *j)
{
	for (uint32_t i = 0; i < j->chain_count; i++) {
		uint32_t at = shard_warm_find(w, &j->chain[i].key);
		const struct shard_warm_entry *e;

		if (at == SHARD_WARM_NONE)
			return false;
		e = shard_warm_at(w, at);
		if (e->first_page_index != j->chain[i].first_page_index ||
		    e->tail_page_count != j->chain[i].tail_page_count ||
		    (i + 1 == j->chain_count && e->row_first == SHARD_WARM_NONE))
			return false;
	}
	return true;
}

/* A fetch, whole (run_job: fetch_is_warm, else run_fetch's fetch_plan and settle). */
static void rank_fetch(struct sim *sim, uint32_t r, uint32_t job)
{
	struct shard_warm *w = &sim->rank[r].warm;
	const struct sim_job *j = &sim->jobs[job];
	uint32_t *entries = calloc(j->chain_count, sizeof(*entries));
	uint64_t before = 0;
	char why[200] = "";
	int result = 0;

	SEL_ASSERT(entries);
	if (inject(sim)) {
		/* a checksum naming a record now and then (it condemns), else EIO */
		if (sim_below(sim, 4) == 0) {
			char name[REC_FILE_NAME_BYTES];

			rec_file_name(name, &j->chain[sim_below(sim, j->chain_count)].key);
			result = SEL_ECHECKSUM;
			snprintf(why, sizeof(why), "%s: page 0 fails its checksum", name);
		} else {
			result = -EIO;
			snprintf(why, sizeof(why), "injected read failure");
		}
	}
	if (fetch_is_warm(w, j)) {
		sim_trace(sim, "rank %u: fetch job %llu warm whole (%d)", r,
			  (unsigned long long)j->coord_id, result);
		goto out_answer;
	}
	for (uint32_t i = 0; i < j->chain_count; i++) {
		const struct shard_chain_record *c = &j->chain[i];
		bool last = i + 1 == j->chain_count;
		uint32_t at = shard_warm_find(w, &c->key);

		entries[i] = SHARD_WARM_NONE;
		if (at == SHARD_WARM_NONE && j->read_through && before >= j->skip_pages &&
		    (c->tail_page_count > 0 || last)) {
			entries[i] = shard_warm_reserve_read(w, &c->key, c->first_page_index,
							     c->tail_page_count, last);
			if (entries[i] == SHARD_WARM_NONE)
				sim_fail(sim, "rank %u: read-through of key %s (%u slots) fell back: "
					 "%u of %u slots free", r, KEY(c->key),
					 shard_warm_slots_for(w, c->tail_page_count, last),
					 w->stats.slots_total - w->stats.slots_used,
					 w->stats.slots_total);
		}
		before += c->tail_page_count;
	}
	for (uint32_t i = 0; i < j->chain_count; i++) {
		if (entries[i] == SHARD_WARM_NONE)
			continue;
		if (result)
			shard_warm_abort_read(w, entries[i]);
		else
			shard_warm_commit_read(w, entries[i]);
	}
	sim_trace(sim, "rank %u: fetch job %llu (%d), %u slots used", r,
		  (unsigned long long)j->coord_id, result, w->stats.slots_used);
out_answer:
	free(entries);
	rank_answer(sim, r, job, result, why);
}

/* The running write from warm of key on rank r (warm_writer), if any. */
static bool rank_writing(const struct sim *sim, uint32_t r, const struct rec_key *key)
{
	const struct sim_rank *rk = &sim->rank[r];

	for (uint32_t i = 0; i < sim->stores_max; i++)
		if (rk->runs[i].job != SIM_NONE && rk->runs[i].from_warm &&
		    rec_key_equal(&sim->jobs[rk->runs[i].job].key, key))
			return true;
	return false;
}

/* A restore-lane job: a fetch or a warm drop (run_job, run_warm_drop). */
static void rank_run_restore(struct sim *sim, uint32_t r)
{
	struct sim_rank *rk = &sim->rank[r];
	uint32_t job = queue_pop(&rk->restores);
	const struct sim_job *j = &sim->jobs[job];

	if (j->kind == COORD_JOB_FETCH) {
		rank_fetch(sim, r, job);
		return;
	}
	SEL_ASSERT(j->kind == COORD_JOB_WARM_DROP);
	if (rank_writing(sim, r, &j->key)) {
		sim_fail(sim, "rank %u: warm drop of key %s found its write from warm in flight",
			 r, KEY(j->key));
		rank_answer(sim, r, job, -EBUSY, "its write from warm is in flight");
		return;
	}
	shard_warm_drop(&rk->warm, &j->key, false);
	sim_trace(sim, "rank %u: warm drop job %llu key %s, %u slots used", r,
		  (unsigned long long)j->coord_id, KEY(j->key),
		  rk->warm.stats.slots_used);
	rank_answer(sim, r, job, 0, NULL);
}

/* A background job that is not a store: a truncate or an unlink (run_job). */
static void rank_run_background(struct sim *sim, uint32_t r)
{
	struct sim_rank *rk = &sim->rank[r];
	uint32_t job = queue_pop(&rk->background);
	const struct sim_job *j = &sim->jobs[job];

	SEL_ASSERT(rk->active == 0 && !rank_writing(sim, r, &j->key));
	shard_warm_drop(&rk->warm, &j->key, j->kind == COORD_JOB_TRUNCATE);
	file_reclaim(sim, r, &j->key, j->kind == COORD_JOB_TRUNCATE);
	sim_trace(sim, "rank %u: %s%s job %llu key %s, %u slots used", r,
		  j->cleanup_of != SIM_NONE ? "cleanup " : "", kind_name(j->kind),
		  (unsigned long long)j->coord_id, KEY(j->key),
		  rk->warm.stats.slots_used);
	rank_answer(sim, r, job, 0, NULL);
}

/* store_begin (shard/engine.c) of the background lane's head on a free run. */
static void rank_store_begin(struct sim *sim, uint32_t r)
{
	struct sim_rank *rk = &sim->rank[r];
	struct shard_warm *w = &rk->warm;
	uint32_t job = queue_pop(&rk->background), i;
	const struct sim_job *j = &sim->jobs[job];
	uint64_t fallbacks = w->stats.store_fallbacks, dropped = w->stats.reads_dropped;
	struct sim_run *run;

	for (i = 0; i < sim->stores_max && rk->runs[i].job != SIM_NONE; i++)
		;
	SEL_ASSERT(i < sim->stores_max);
	run = &rk->runs[i];
	*run = (struct sim_run){ .job = job, .entry = SHARD_WARM_NONE };
	rk->active++;
	if (j->warm == SHARD_STORE_WARM_WRITE) {
		run->entry = shard_warm_find(w, &j->key);
		run->from_warm = true;
		if (run->entry == SHARD_WARM_NONE) {
			sim_fail(sim, "rank %u: write from warm of key %s found no warm copy", r,
				 KEY(j->key));
			run->result = -ENOENT;
		}
	} else {
		shard_warm_drop(w, &j->key, false);
	}
	if (j->warm == SHARD_STORE_WARM || j->warm == SHARD_STORE_WARM_ONLY)
		run->entry = shard_warm_reserve(w, &j->key, j->first_page_index,
						j->tail_page_count);
	if (j->warm == SHARD_STORE_WARM_ONLY && run->entry == SHARD_WARM_NONE &&
	    shard_warm_free_reads(w, shard_warm_slots_for(w, j->tail_page_count, true)))
		run->entry = shard_warm_reserve(w, &j->key, j->first_page_index,
						j->tail_page_count);
	if (w->stats.store_fallbacks != fallbacks || w->stats.reads_dropped != dropped)
		sim_fail(sim, "rank %u: warm store (field %u) of key %s (%u slots) found too few "
			 "free slots%s", r, j->warm, KEY(j->key),
			 shard_warm_slots_for(w, j->tail_page_count, true),
			 w->stats.reads_dropped != dropped ? ": dropped read-throughs" : "");
	if (j->warm == SHARD_STORE_WARM_ONLY && run->entry == SHARD_WARM_NONE)
		run->result = -ENOBUFS;
	/* now and then a full disk: rank zero holds stores back, then evicts to fit */
	if (!run->result && inject(sim))
		run->result = sim_below(sim, 4) ? -EIO : -ENOSPC;
	sim->warm_stores += run->entry != SHARD_WARM_NONE && !run->from_warm;
	sim_trace(sim, "rank %u: store job %llu key %s warm %u begins%s, %u slots used", r,
		  (unsigned long long)j->coord_id, KEY(j->key), j->warm,
		  run->result ? " (to fail)" : "", w->stats.slots_used);
}

/* A store in progress completes (store_step's closing). */
static void rank_store_end(struct sim *sim, uint32_t r, uint32_t i)
{
	struct sim_rank *rk = &sim->rank[r];
	struct sim_run *run = &rk->runs[i];
	const struct sim_job *j = &sim->jobs[run->job];

	if (run->entry != SHARD_WARM_NONE && !run->from_warm && !run->result)
		shard_warm_commit(&rk->warm, run->entry);
	else if (run->entry != SHARD_WARM_NONE && !run->from_warm)
		shard_warm_abort(&rk->warm, run->entry);
	/* Every store but a warm-only one commits its file (a failed one none). */
	if (!run->result && j->warm != SHARD_STORE_WARM_ONLY)
		file_write(sim, r, j);
	sim_trace(sim, "rank %u: store job %llu key %s ends (%d), %u slots used", r,
		  (unsigned long long)j->coord_id, KEY(j->key),
		  run->result, rk->warm.stats.slots_used);
	rank_answer(sim, r, run->job, run->result,
		    run->result ? "injected store failure" : NULL);
	run->job = SIM_NONE;
	rk->active--;
}

/* Whether the background lane's head is a store that may begin now (run_stores, next_store). */
static bool rank_store_may_begin(const struct sim *sim, uint32_t r)
{
	const struct sim_rank *rk = &sim->rank[r];
	uint32_t head = queue_peek(&rk->background);

	if (head == SIM_NONE || sim->jobs[head].kind != COORD_JOB_STORE || rk->restores.count ||
	    rk->active == sim->stores_max)
		return false;
	for (uint32_t i = 0; i < sim->stores_max; i++)
		if (rk->runs[i].job != SIM_NONE &&
		    rec_key_equal(&sim->jobs[rk->runs[i].job].key, &sim->jobs[head].key))
			return false;
	return true;
}

static bool rank_background_may_run(const struct sim *sim, uint32_t r)
{
	const struct sim_rank *rk = &sim->rank[r];
	uint32_t head = queue_peek(&rk->background);

	return head != SIM_NONE && sim->jobs[head].kind != COORD_JOB_STORE &&
	       rk->restores.count == 0 && rk->active == 0;
}

/* One step of rank r's engine, chosen at random among those it could take; false: none. */
static bool rank_step(struct sim *sim, uint32_t r)
{
	struct sim_rank *rk = &sim->rank[r];
	uint32_t choices[4 + SIM_STORES_MAX], n = 0, pick;

	if (rk->inbox.count)
		choices[n++] = 0;
	if (rk->restores.count)
		choices[n++] = 1;
	if (rank_store_may_begin(sim, r))
		choices[n++] = 2;
	if (rank_background_may_run(sim, r))
		choices[n++] = 3;
	for (uint32_t i = 0; i < sim->stores_max; i++)
		if (rk->runs[i].job != SIM_NONE)
			choices[n++] = 4 + i;
	if (n == 0)
		return false;
	pick = choices[sim_below(sim, n)];
	if (pick == 0) {
		uint32_t job = queue_pop(&rk->inbox);

		queue_push(restore_lane(sim->jobs[job].kind) ? &rk->restores : &rk->background,
			   job);
	} else if (pick == 1) {
		rank_run_restore(sim, r);
	} else if (pick == 2) {
		rank_store_begin(sim, r);
	} else if (pick == 3) {
		rank_run_background(sim, r);
	} else {
		rank_store_end(sim, r, pick - 4);
	}
	return true;
}

/* Rank r's oldest answer reaches the fan-out; false: none. */
static bool rank_deliver(struct sim *sim, uint32_t r)
{
	struct sim_rank *rk = &sim->rank[r];
	struct sim_answer a;

	if (!rk->answer_count)
		return false;
	a = rk->answers[rk->answer_head];
	rk->answer_head = (rk->answer_head + 1) % SIM_QUEUE_MAX;
	rk->answer_count--;
	fanout_apply(sim, r, &a);
	return true;
}

/* A rank, the faster ones more often: a slow rank lags far behind the rest. */
static uint32_t pick_rank(struct sim *sim)
{
	uint32_t at = sim_below(sim, sim->speed_total), r = 0;

	while (at >= sim->speed[r])
		at -= sim->speed[r++];
	return r;
}

static bool rank_busy(const struct sim_rank *rk)
{
	return rk->inbox.count || rk->restores.count || rk->background.count || rk->active ||
	       rk->answer_count;
}

/* ---- rank zero: the model's calls ---- */

static void zero_note_table(struct sim *sim)
{
	if (coord_store_jobs_in_flight(sim->store) >= COORD_JOBS_MAX - 1)
		sim->lossy = true;
}

static void zero_poll(struct sim *sim)
{
	struct sel_event events[64];
	uint32_t n = coord_store_poll(sim->store, events, 64);

	for (uint32_t i = 0; i < n; i++)
		if (events[i].kind == SEL_EVENT_FATAL)
			sim_fail(sim, "a FATAL event: %s", events[i].why);
	zero_note_table(sim);
}

/*
 * A history and point of a page-only record in the index (its row
 * dropped), to publish again (a rewrite); false when there is none.
 */
static bool page_only_point(struct sim *sim, uint32_t *h, uint32_t *p)
{
	const struct coord_index *ix = &sim->store->index;
	uint32_t start = sim_below(sim, ix->nodes_max);

	for (uint32_t i = 0; i < ix->nodes_max; i++) {
		const struct coord_node *n = &ix->nodes[(start + i) % ix->nodes_max];
		struct rec_key key;

		if (!n->in_use || n->state != COORD_READY || n->row_present)
			continue;
		for (*h = 0; *h < SIM_HISTORIES; (*h)++) {
			for (*p = 0; *p < SIM_POINTS; (*p)++) {
				if (sim->points[*p] != n->key.consumed)
					continue;
				rec_history_key_at(&sim->h[*h], sim->points[*p], &key);
				if (rec_key_equal(&key, &n->key))
					return true;
			}
		}
	}
	return false;
}

static void zero_publish(struct sim *sim)
{
	uint32_t h = sim_below(sim, SIM_HISTORIES), p = sim_below(sim, SIM_POINTS);
	uint64_t parent = 0;
	struct sel_publication pub;
	enum sel_outcome outcome = SEL_RETRY;
	int ret;

	if (sim_below(sim, 10) == 0 && !page_only_point(sim, &h, &p)) {
		h = sim_below(sim, SIM_HISTORIES);
		p = sim_below(sim, SIM_POINTS);
	}
	/* Mostly the point before (a chain grows), sometimes an older one or none. */
	if (p > 0 && sim_below(sim, 8) != 0)
		parent = sim->points[sim_below(sim, 4) ? p - 1 : sim_below(sim, p)];
	pub = (struct sel_publication){ .checkpoint = ++sim->checkpoint,
					.consumed = sim->points[p], .parent_consumed = parent,
					.page_ids = sim->page_ids, .state_slot = 0 };
	ret = coord_store_publish(sim->store, &sim->h[h], &pub, &outcome);
	if (ret)
		sim_fail(sim, "publish failed: %s", sel_strerror(ret));
	sim_trace(sim, "zero: publish h%u %llu <- %llu: %d, %u of %u slots used, %u releasing",
		  h, (unsigned long long)pub.consumed, (unsigned long long)parent, outcome,
		  sim->store->warm.slots_used, sim->slots_total, sim->store->warm.slots_releasing);
	zero_note_table(sim);
}

static void zero_fetch(struct sim *sim)
{
	uint32_t h = sim_below(sim, SIM_HISTORIES);
	uint64_t resident = sim_below(sim, 3) ? 0 : (uint64_t)sim_below(sim, 12) * SIM_PAGE_TOKENS;
	struct sel_hit hit;
	bool joined;
	int ret;

	if (!coord_store_lookup(sim->store, &sim->h[h], resident, &hit))
		return;
	ret = coord_store_fetch(sim->store, &hit, sim->page_ids, 0, ++sim->waiter, &joined);
	sim_trace(sim, "zero: fetch h%u %llu from %llu: %d%s, %u of %u slots used, %u releasing",
		  h, (unsigned long long)hit.consumed, (unsigned long long)resident, ret,
		  joined ? " joined" : "", sim->store->warm.slots_used, sim->slots_total,
		  sim->store->warm.slots_releasing);
	zero_note_table(sim);
}

static void zero_touch(struct sim *sim)
{
	uint32_t h = sim_below(sim, SIM_HISTORIES);

	coord_store_touch(sim->store, &sim->h[h], sim->points[sim_below(sim, SIM_POINTS)]);
}

static void zero_act(struct sim *sim)
{
	uint32_t pick = sim_below(sim, 100);

	if (pick < 45) {
		zero_publish(sim);
	} else if (pick < 85) {
		zero_fetch(sim);
	} else if (pick < 92) {
		zero_touch(sim);
	} else if (pick < 96) {
		/* a drain (write-behind's close), or write-through's own poll */
		coord_store_write_dirty(sim->store);
		zero_note_table(sim);
	} else if (pick < 97) {
		/* a max-age sweep that finds every record expired: leaves go */
		sim->store->max_age_ns = 1;
		sim->store->last_sweep_ns = 0;
		sim->expiry_sweeps++;
		zero_poll(sim);
		sim->store->max_age_ns = 0;
	} else {
		/*
		 * A second passes: a failed write from warm may be tried again,
		 * and a full disk's backoff is over (its hold, half the time, too).
		 */
		sim->store->warm_write_retry_ns = 0;
		if (sim->store->disk_full_ns)
			sim->store->disk_full_ns = sim_below(sim, 2) ? 0 :
				sel_monotonic_ns() - COORD_DISK_FULL_BACKOFF_NS - 1;
	}
}

/* ---- invariants ---- */

/*
 * What a kill now would leave: on every rank, a file whose parent's file
 * is missing (the startup scan deletes it, R-DIR-6); and a record rank
 * zero has committed on disk (READY and clean) whose file some rank lacks
 * or holds otherwise (the next start's agreement drops it).
 */
static void check_disks(struct sim *sim)
{
	const struct coord_index *ix = &sim->store->index;

	for (uint32_t r = 0; r < sim->ranks; r++) {
		for (uint32_t i = 0; i < SIM_FILES_MAX; i++) {
			const struct sim_file *f = &sim->rank[r].files[i];

			if (f->present && f->info.parent.consumed &&
			    !file_find(sim, r, &f->info.parent))
				sim_fail(sim, "rank %u: file %s has no parent file %s (R-DIR-6)", r,
					 KEY(f->info.key), KEY(f->info.parent));
		}
	}
	for (uint32_t id = 0; id < ix->nodes_max; id++) {
		const struct coord_node *n = &ix->nodes[id];

		if (!n->in_use || n->state != COORD_READY ||
		    coord_warm_dirty_state(&sim->store->warm, id) != COORD_WARM_CLEAN)
			continue;
		for (uint32_t r = 0; r < sim->ranks; r++) {
			const struct sim_file *f = file_find(sim, r, &n->key);

			if (!f || f->info.first_page_index != n->first_page_index ||
			    f->info.tail_page_count != n->tail_page_count ||
			    !rec_key_equal(&f->info.parent, &n->parent) ||
			    (n->row_present && !f->info.row_present))
				sim_fail(sim, "rank %u: record %s, committed on disk, %s", r,
					 KEY(n->key), f ? "has another file" : "has no file");
		}
	}
}

static void check_step(struct sim *sim)
{
	for (uint32_t r = 0; r < sim->ranks; r++) {
		const struct shard_warm_stats *st = &sim->rank[r].warm.stats;

		if (st->slots_used > st->slots_total)
			sim_fail(sim, "rank %u holds %u slots of %u", r, st->slots_used,
				 st->slots_total);
		if (st->read_fallbacks || st->store_fallbacks || st->reads_dropped)
			sim_fail(sim, "rank %u: read fallbacks %llu, store fallbacks %llu, reads "
				 "dropped %llu", r, (unsigned long long)st->read_fallbacks,
				 (unsigned long long)st->store_fallbacks,
				 (unsigned long long)st->reads_dropped);
	}
	check_disks(sim);
}

/*
 * Every job done: each rank holds what rank zero counts, record by record,
 * and nothing else but the slots a failed store strands (held where it
 * succeeded, its unlink not sent). Where rank zero's job table filled, a
 * drop it could not send leaves a record listed that a rank may not hold
 * (documented: the count then holds more, never less).
 */
static void check_quiescent(struct sim *sim)
{
	const struct coord_warm *w = &sim->store->warm;
	const struct coord_index *ix = &sim->store->index;
	uint64_t counted = 0;

	sim->quiescent_checks++;
	if (w->slots_releasing)
		sim_fail(sim, "quiescent with %u slots releasing", w->slots_releasing);
	for (uint32_t id = 0; id < ix->nodes_max; id++) {
		if (!coord_warm_charged(w, id))
			continue;
		counted += w->slots[id];
		if (!ix->nodes[id].in_use || !w->listed[id])
			sim_fail(sim, "quiescent: node %u charged %u slots, %s", id, w->slots[id],
				 ix->nodes[id].in_use ? "not listed" : "not in the index");
	}
	if (counted + w->slots_stranded != w->slots_used)
		sim_fail(sim, "quiescent: rank zero counts %u slots used, its records %llu, %u "
			 "stranded", w->slots_used, (unsigned long long)counted, w->slots_stranded);
	for (uint32_t r = 0; r < sim->ranks; r++) {
		struct shard_warm *rw = &sim->rank[r].warm;
		uint32_t held = 0;

		for (uint32_t id = 0; id < ix->nodes_max; id++) {
			uint32_t e;

			if (!coord_warm_charged(w, id))
				continue;
			e = shard_warm_find(rw, &ix->nodes[id].key);
			if (e == SHARD_WARM_NONE ? !sim->lossy : entry_slots(rw, e) != w->slots[id])
				sim_fail(sim, "quiescent: key %s: rank zero counts %u slots, rank %u "
					 "holds %u", KEY(ix->nodes[id].key),
					 w->slots[id], r,
					 e == SHARD_WARM_NONE ? 0 : entry_slots(rw, e));
			if (e != SHARD_WARM_NONE)
				held += entry_slots(rw, e);
		}
		if (rw->stats.slots_used - held > w->slots_stranded)
			sim_fail(sim, "quiescent: rank %u holds %u slots, %u of them for records rank "
				 "zero counts (%u used, %u stranded)", r, rw->stats.slots_used, held,
				 w->slots_used, w->slots_stranded);
	}
}

/* Runs ranks, answers and polls (no new calls) until every job is done. */
static void drain(struct sim *sim)
{
	for (uint64_t guard = 0; guard < 1000000 && !sim->failure[0]; guard++) {
		bool busy = sim->done_count > 0 || coord_store_jobs_in_flight(sim->store) > 0;
		uint32_t r = pick_rank(sim);

		for (uint32_t i = 0; i < sim->ranks && !busy; i++)
			busy = rank_busy(&sim->rank[i]);
		if (!busy) {
			check_quiescent(sim);
			return;
		}
		sim->run.step++;
		switch (sim_below(sim, 3)) {
		case 0:
			rank_step(sim, r);
			break;
		case 1:
			rank_deliver(sim, r);
			break;
		default:
			zero_poll(sim);
		}
		check_step(sim);
	}
	sim_fail(sim, "the jobs never drained");
}

/* ---- one seed ---- */

/* Rank zero's store and every rank's warm tier, empty (a start). */
static int sim_start(struct sim *sim)
{
	struct coord_jobs jobs = { .ctx = sim, .store = stub_store, .fetch = stub_fetch,
				   .truncate = stub_truncate, .unlink = stub_unlink,
				   .warm_drop = stub_warm_drop, .poll = stub_poll };
	uint64_t slot_bytes = SIM_SLOT_BYTES;
	int ret;

	sim->store = calloc(1, sizeof(*sim->store));
	if (!sim->store)
		return -ENOMEM;
	ret = coord_store_init(sim->store, &sim->g, &sim->model, REC_STATE_ORDINARY,
			       sim->limit_bytes, sim->records_max, &jobs);
	if (ret)
		return ret;
	ret = coord_store_set_warm(sim->store, sim->slots_total, 1, slot_bytes, sim->policy);
	if (ret)
		return ret;
	for (uint32_t r = 0; r < sim->ranks; r++) {
		ret = shard_warm_init(&sim->rank[r].warm, &(struct shard_warm_shape){
					      .plane_bytes = &slot_bytes, .plane_count = 1,
					      .row_bytes = slot_bytes, .slot_count = sim->slots_total,
					      .pages_max = sim->g.page_count, .group_slots_max = 1 });
		if (ret)
			return ret;
		for (uint32_t i = 0; i < SIM_STORES_MAX; i++)
			sim->rank[r].runs[i].job = SIM_NONE;
	}
	return 0;
}

/* Adds rank zero's counters of this start to the seed's. */
static void stats_add(struct sel_stats *sum, const struct sel_stats *s)
{
	sum->published_queued += s->published_queued;
	sum->fetches += s->fetches;
	sum->evictions += s->evictions;
	sum->truncations += s->truncations;
	sum->warm_hits += s->warm_hits;
	sum->warm_partial_hits += s->warm_partial_hits;
	sum->warm_evictions += s->warm_evictions;
	sum->warm_read_throughs += s->warm_read_throughs;
	sum->warm_spills += s->warm_spills;
	sum->warm_retry_dirty += s->warm_retry_dirty;
	sum->warm_writes += s->warm_writes;
}

static void sim_stop(struct sim *sim)
{
	for (uint32_t r = 0; r < SIM_RANKS_MAX; r++)
		shard_warm_destroy(&sim->rank[r].warm);
	if (sim->store) {
		struct sel_stats stats = sim->store->stats;

		/* the warm tier's, as a poll would copy them */
		stats.warm_hits = sim->store->warm.hits;
		stats.warm_partial_hits = sim->store->warm.partial_hits;
		stats.warm_evictions = sim->store->warm.evictions;
		stats.warm_read_throughs = sim->store->warm.read_throughs;
		stats_add(&sim->stats, &stats);
		coord_store_destroy(sim->store);
		free(sim->store);
		sim->store = NULL;
	}
}

static int compare_mtime(const void *a, const void *b)
{
	const struct rec_record_info *x = a, *y = b;

	return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns;
}

/* Whether count records hold key. */
static bool records_hold(const struct rec_record_info *records, uint32_t count,
			 const struct rec_key *key)
{
	for (uint32_t i = 0; i < count; i++)
		if (rec_key_equal(&records[i].key, key))
			return true;
	return false;
}

/*
 * A restart, every job done: what every rank's disk holds (the files on
 * every rank, the agreement; less those whose parent's file goes,
 * R-DIR-6) is loaded cold, least recently written first, and the rest is
 * deleted; every warm tier starts empty, and the dirty records are lost.
 * No record rank zero had committed on disk may be missing.
 */
static int sim_restart(struct sim *sim)
{
	const struct coord_index *ix = &sim->store->index;
	struct rec_record_info *records = calloc(SIM_FILES_MAX, sizeof(*records));
	uint32_t count = 0;
	bool dropped = true;
	int ret;

	if (!records)
		return -ENOMEM;
	for (uint32_t r = 0; r < sim->ranks; r++)
		SEL_ASSERT(!rank_busy(&sim->rank[r]));
	for (uint32_t i = 0; i < SIM_FILES_MAX; i++) {
		const struct sim_file *f = &sim->rank[0].files[i];
		bool everywhere = f->present;

		for (uint32_t r = 1; r < sim->ranks && everywhere; r++) {
			const struct sim_file *o = file_find(sim, r, &f->info.key);

			everywhere = o && o->info.row_present == f->info.row_present &&
				     o->info.created_ns == f->info.created_ns;
		}
		if (everywhere)
			records[count++] = f->info;
	}
	while (dropped) {
		dropped = false;
		for (uint32_t i = 0; i < count; i++) {
			if (records[i].parent.consumed &&
			    !records_hold(records, count, &records[i].parent)) {
				records[i--] = records[--count];
				dropped = true;
			}
		}
	}
	for (uint32_t id = 0; id < ix->nodes_max; id++) {
		const struct coord_node *n = &ix->nodes[id];

		if (n->in_use && n->state == COORD_READY &&
		    coord_warm_dirty_state(&sim->store->warm, id) == COORD_WARM_CLEAN &&
		    !records_hold(records, count, &n->key))
			sim_fail(sim, "restart: record %s, committed on disk, is not loaded",
				 KEY(n->key));
	}
	for (uint32_t r = 0; r < sim->ranks; r++)
		for (uint32_t i = 0; i < SIM_FILES_MAX; i++)
			if (sim->rank[r].files[i].present &&
			    !records_hold(records, count, &sim->rank[r].files[i].info.key))
				sim->rank[r].files[i].present = false;
	qsort(records, count, sizeof(*records), compare_mtime);
	sim_stop(sim);
	ret = sim_start(sim);
	if (!ret)
		ret = coord_store_load(sim->store, records, count);
	sim_trace(sim, "restart: %u records loaded", count);
	free(records);
	return ret;
}

/*
 * What a start found on every rank's disk, cold: a chain of the first
 * points of some histories, its last record with its row, the others with
 * or without (page-only, as a row drop leaves them).
 */
static int sim_load(struct sim *sim)
{
	struct rec_record_info loaded[SIM_HISTORIES * 4];
	uint32_t count = 0;
	int ret;

	for (uint32_t h = 0; h < SIM_HISTORIES; h++) {
		uint32_t length = sim_below(sim, 5);

		for (uint32_t p = 0; p < length; p++) {
			uint64_t parent = p ? sim->points[p - 1] : 0;
			uint32_t first = (uint32_t)(parent / SIM_PAGE_TOKENS);
			struct rec_record_info *r = &loaded[count++];

			*r = (struct rec_record_info){ .row_present = p + 1 == length ||
								       sim_below(sim, 2),
						       .created_ns = 1 + p,
						       .mtime_ns = 1 + p };
			rec_history_key_at(&sim->h[h], sim->points[p], &r->key);
			if (parent)
				rec_history_key_at(&sim->h[h], parent, &r->parent);
			r->bucket = *rec_history_bucket(&sim->h[h], sim->points[p]);
			r->first_page_index = first;
			r->tail_page_count = (uint32_t)(sim->points[p] / SIM_PAGE_TOKENS) - first;
			r->file_bytes = rec_geometry_file_bytes(&sim->g, r->tail_page_count,
								r->row_present);
			/* A prefix two histories share is one file. */
			if (records_hold(loaded, count - 1, &r->key)) {
				count--;
				continue;
			}
			for (uint32_t k = 0; k < sim->ranks; k++)
				file_put(sim, k, r);
		}
	}
	ret = coord_store_load(sim->store, loaded, count);
	sim_trace(sim, "zero: loaded %u records", count);
	return ret;
}

static int sim_open(struct sim *sim, uint64_t seed)
{
	uint32_t tokens[SIM_TOKENS], records_max, pages;
	uint64_t limit;
	int ret;

	tu_seeded_init(&sim->run, "test_store_ranks", "SELENE_SIM_SEED", "SELENE_SIM_TRACE", seed);
	sim->ranks = 2 + (uint32_t)(seed % 3);
	sim->policy = (seed / 3) % 2 ? SEL_WARM_WRITE_BEHIND : SEL_WARM_WRITE_THROUGH;
	sim->stores_max = 1 + sim_below(sim, SIM_STORES_MAX);
	sim->slots_total = 6 + sim_below(sim, 35);
	sim->fail_per_mille = sim_below(sim, 3) * 15;
	sim->refuse_per_mille = sim_below(sim, 2) * 20;
	for (uint32_t r = 0; r < sim->ranks; r++) {
		sim->speed[r] = sim_below(sim, 2) ? 4 : 1 + sim_below(sim, 8);
		sim->speed_total += sim->speed[r];
	}
	records_max = 16 + sim_below(sim, 49);
	pages = 8 + sim_below(sim, 41);
	tu_geometry(&sim->g, SIM_PAGE_TOKENS, 1, SIM_SLOT_BYTES, SIM_SLOT_BYTES, 0, 1);
	tu_identities(&sim->model, NULL);
	limit = rec_geometry_file_bytes(&sim->g, pages, true);
	/* History 1 shares history 0's first 400 tokens: two branches of one prefix. */
	for (uint32_t h = 0; h < SIM_HISTORIES; h++) {
		tu_tokens(tokens, SIM_TOKENS, seed * 7 + h + 1);
		if (h == 1)
			tu_tokens(tokens, 400, seed * 7 + 1);
		ret = rec_history_init(&sim->h[h], &sim->model, tokens, SIM_TOKENS);
		if (ret)
			return ret;
	}
	/* Points 1 to 4 pages apart, some inside the page of the one before (no pages). */
	for (uint32_t p = 0, at = 0; p < SIM_POINTS; p++) {
		at += sim_below(sim, 5) ? SIM_PAGE_TOKENS * (1 + sim_below(sim, 4)) + sim_below(sim, 40) :
					  1 + sim_below(sim, 20);
		sim->points[p] = at;
	}
	SEL_ASSERT(sim->points[SIM_POINTS - 1] <= SIM_TOKENS);
	for (uint32_t i = 0; i < 64; i++)
		sim->page_ids[i] = i;
	sim->limit_bytes = limit;
	sim->records_max = records_max;
	ret = sim_start(sim);
	if (ret)
		return ret;
	ret = sim_load(sim);
	if (ret)
		return ret;
	sim_trace(sim, "seed %llu: %u ranks, %s, %u slots, stores at once %u, failures %u/1000, "
		  "refusals %u/1000, %u records, %u pages of disk", (unsigned long long)seed,
		  sim->ranks, sim->policy == SEL_WARM_WRITE_BEHIND ? "write-behind" : "write-through",
		  sim->slots_total, sim->stores_max, sim->fail_per_mille, sim->refuse_per_mille,
		  records_max, pages);
	return 0;
}

static void sim_close(struct sim *sim)
{
	sim_stop(sim);
	for (uint32_t i = 0; i < sim->job_count; i++)
		free(sim->jobs[i].chain);
	free(sim->jobs);
	free(sim->done);
	for (uint32_t h = 0; h < SIM_HISTORIES; h++)
		rec_history_free(&sim->h[h]);
}

/* Runs seed for steps; false with sim->failure set on a violation. */
static bool sim_run(struct sim *sim, uint64_t seed, uint64_t steps)
{
	tu_seeded_catch_aborts(&sim->run);
	assert_int_equal(sim_open(sim, seed), 0);
	for (sim->run.step = 1; sim->run.step <= steps && !sim->failure[0]; sim->run.step++) {
		uint32_t pick = sim_below(sim, 100), r = pick_rank(sim);

		if (pick < 20) {
			if (coord_store_jobs_in_flight(sim->store) < SIM_API_JOBS_MAX)
				zero_act(sim);
		} else if (pick < 32) {
			zero_poll(sim);
		} else if (pick < 80) {
			rank_step(sim, r);
		} else if (pick < 99) {
			rank_deliver(sim, r);
		} else {
			drain(sim);
			if (!sim->failure[0] && sim_below(sim, 4) == 0)
				assert_int_equal(sim_restart(sim), 0);
		}
		check_step(sim);
	}
	if (!sim->failure[0]) {
		/*
		 * write-behind's close: every dirty record written, parents
		 * first, a failed write tried again after its backoff (a
		 * second passes each round), then quiescent again
		 */
		drain(sim);
		for (uint32_t round = 0; round < 1000 && !sim->failure[0] &&
		     sim->store->warm.dirty_records > 0; round++) {
			sim->store->warm_write_retry_ns = 0;
			coord_store_write_dirty(sim->store);
			drain(sim);
		}
		if (!sim->failure[0] && sim->store->warm.dirty_records > 0)
			sim_fail(sim, "close: %u dirty records never written",
				 sim->store->warm.dirty_records);
	}
	tu_seeded_catch_aborts(NULL);
	return !sim->failure[0];
}

static uint64_t env_u64(const char *name, uint64_t fallback)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 10) : fallback;
}

/*
 * Many seeds of random orderings across 2 to 4 ranks, both write
 * policies: every rank's warm slots agree with rank zero's count.
 */
static void test_store_ranks_random_orderings(void **state)
{
	uint64_t seeds = env_u64("SELENE_SIM_SEEDS", SIM_SEEDS_DEFAULT);
	uint64_t steps = env_u64("SELENE_SIM_STEPS", SIM_STEPS_DEFAULT);
	uint64_t first = 1, checks = 0, read_throughs = 0, warm_stores = 0, injected = 0;
	uint64_t rewrites = 0, file_writes = 0, sweeps = 0;
	struct sel_stats sum = { 0 };
	uint32_t failed = 0, lossy = 0;

	(void)state;
	if (getenv("SELENE_SIM_SEED")) {
		first = env_u64("SELENE_SIM_SEED", 1);
		seeds = 1;
	}
	for (uint64_t seed = first; seed < first + seeds; seed++) {
		struct sim *sim = calloc(1, sizeof(*sim));

		assert_non_null(sim);
		if (!sim_run(sim, seed, steps)) {
			if (!sim->run.trace_all)
				tu_seeded_dump(&sim->run);
			fprintf(stderr, "test_store_ranks: seed %llu failed at step %llu: %s (replay: "
				"SELENE_SIM_SEED=%llu SELENE_SIM_TRACE=1)\n",
				(unsigned long long)seed, (unsigned long long)sim->run.step, sim->failure,
				(unsigned long long)seed);
			failed++;
		}
		checks += sim->quiescent_checks;
		read_throughs += sim->read_throughs;
		warm_stores += sim->warm_stores;
		injected += sim->injected;
		lossy += sim->lossy;
		rewrites += sim->rewrites;
		file_writes += sim->file_writes;
		sweeps += sim->expiry_sweeps;
		sim_close(sim);
		stats_add(&sum, &sim->stats);
		free(sim);
	}
	fprintf(stderr, "test_store_ranks: rank zero: %llu stores queued, %llu fetches (%llu warm "
		"hits, %llu partial), %llu records read through, %llu evictions, %llu truncations, "
		"%llu warm evictions, %llu writes from warm, %llu spills, %llu Retry for dirty "
		"slots, %llu rewrites\n", (unsigned long long)sum.published_queued,
		(unsigned long long)sum.fetches, (unsigned long long)sum.warm_hits,
		(unsigned long long)sum.warm_partial_hits,
		(unsigned long long)sum.warm_read_throughs, (unsigned long long)sum.evictions,
		(unsigned long long)sum.truncations, (unsigned long long)sum.warm_evictions,
		(unsigned long long)sum.warm_writes, (unsigned long long)sum.warm_spills,
		(unsigned long long)sum.warm_retry_dirty, (unsigned long long)rewrites);
	fprintf(stderr, "test_store_ranks: %llu seeds x %llu steps: %llu quiescent checks, %llu "
		"read-through fetches, %llu warm stores on ranks, %llu injected failures, %u "
		"seeds with a full job table, %llu files written on ranks, %llu expiry sweeps, %u "
		"seeds failed\n", (unsigned long long)seeds,
		(unsigned long long)steps, (unsigned long long)checks,
		(unsigned long long)read_throughs, (unsigned long long)warm_stores,
		(unsigned long long)injected, lossy, (unsigned long long)file_writes,
		(unsigned long long)sweeps, failed);
	assert_int_equal(failed, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_ranks_random_orderings),
	};

	sel_log_set_level(SEL_LOG_ERROR);
	return cmocka_run_group_tests_name("store_ranks", tests, NULL, NULL);
}
