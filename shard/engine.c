/*
 * The shard engine: see engine.h. The transfer thread drives each job as a
 * sequence of disk requests (record/disk.h) interleaved with device copies,
 * through window buffers and a row buffer leased from the slab pool at open.
 * It has two lanes, each with its own staging, requests and reply queue: the
 * restore lane runs fetches, the background lane everything else. A fetch
 * is taken before any queued background job, and running stores run every
 * queued fetch between two of their windows and while they wait for the
 * disk (their writes, creates and commits continue meanwhile, at a lower
 * priority on the disk thread and on its control thread), so a restore
 * waits for at most one window's copy and checksum pass of a store, or one
 * truncate or unlink. Up to stores_max stores run at once (run_stores),
 * each its own record file, one step of each in turn; a store window's
 * copy from the device runs while the window before it is hashed
 * (store_window, store_sum). A warm store's windows and row use its warm
 * slots (stage_warm) in place of staging; a fetch of warm records skips
 * the files altogether, pipelined with the fetches of warm records queued
 * behind it (run_fetches_warm).
 */
#include "shard/engine.h"
#include "shard/pool_share.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "record/dir.h"
#include "record/disk.h"
#include "record/format.h"
#include "record/file.h"
#include "selene/selene.h"
#include "shard/checksum_pool.h"
#include "shard/device.h"
#include "shard/slab.h"
#include "shard/warm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct shard_job {
	uint64_t id;
	enum shard_job_kind kind;
	struct rec_header header;
	struct rec_key key;
	uint32_t *page_ids; /* geometry.page_count entries */
	uint32_t page_id_count;
	struct shard_chain_record *chain; /* SHARD_CHAIN_RECORDS_MAX entries */
	uint32_t chain_count;
	uint32_t skip_pages;
	uint32_t state_slot;
	uint8_t warm;       /* a store: enum shard_store_warm */
	bool read_through;  /* a fetch: cold records into warm slots (run_fetch) */
	uint64_t pool_id;   /* a pool put's put id, a pool claim's claim id */
	uint64_t share_bytes; /* a pool put's file length */
	uint64_t rows[SHARD_CHAIN_RECORDS_MAX / 64]; /* a pool claim's row flags */
	const struct shard_pool_early *early; /* a pool claim's before its grant; borrowed */
	struct shard_job *next;
};

struct store_run;

/* One staging buffer: a window of page slots and its disk request. */
struct stage {
	struct shard_slab_lease lease;
	uint32_t slots[SHARD_WINDOW_PAGES_MAX];
	/*
	 * The window's slots now: the stage's own staging slots, or (warm) a
	 * warm record's slots (warm_slots), which the disk writes from or
	 * reads into, laid out as req.spread says.
	 */
	bool warm;
	const uint32_t *cur;
	uint32_t warm_slots[SHARD_WINDOW_PAGES_MAX];
	struct rec_disk_request req;
	struct store_run *owner; /* background: the store whose window it holds */
	bool read_here; /* fetch: read by its verifying threads, not the disk's */
};

/* One lane's staging buffers and disk requests (see the top of this file). */
struct lane {
	struct stage stages[SHARD_STORE_STAGES_MAX];
	uint32_t stage_count; /* restore: SHARD_STAGES; background: see open_staging */
	/*
	 * Background: stage_count stages with no staging of their own, for
	 * the windows of warm stores, which go through their warm slots
	 * (stage_warm), so a warm store leaves the staging to cold ones.
	 */
	struct stage warm_stages[SHARD_STORE_STAGES_MAX];
	struct shard_slab_lease row_lease;
	uint32_t *row_slots;
	struct rec_disk_request row_req;
	struct rec_disk_request control_req;
	/* a fetch alternates per record; truncates and unlinks use [0] */
	struct rec_disk_file files[2];
	uint32_t file_record[2];       /* the chain record open in each, or UINT32_MAX */
	/* a fetch's open of files[f] (restore lane), sent ahead of its first read */
	struct rec_disk_request open_req[2];
	/*
	 * While stores run on the background lane, their waits for the disk
	 * run every fetch submitted meanwhile (a fetch pokes replies): a
	 * restore never waits for a store's write, create or commit to finish.
	 */
	struct rec_disk_replies replies;
	uint64_t next_seq;
	struct shard_copy *copies; /* window_pages * planes, or row pieces */
};

enum { LANE_RESTORE, LANE_BACKGROUND, LANE_COUNT };

/*
 * Device marks: 0 and 1 are the pipelined warm fetches' (run_fetches_warm)
 * and an export's; the stores' window copies take the two after them, so
 * neither pipeline records over a mark the other may still wait for.
 */
#define STORE_MARK_FIRST 2u
_Static_assert(STORE_MARK_FIRST + 2 <= SHARD_DEVICE_MARKS, "the store pipeline's marks");

/* What the running job has learned about its failure, first one first. */
struct job_outcome {
	int result;
	uint64_t seq; /* submission order of the failing request */
	char why[200];
	uint64_t bytes;
};

/*
 * One store in progress on the background lane, its own record file open:
 * several run at once (stores_max), their windows interleaved on the
 * lane's staging, so their writes go to several files at once.
 */
struct store_run {
	struct shard_job *job; /* NULL: a free slot */
	struct job_outcome o;
	struct rec_disk_file file;
	struct rec_disk_request control_req; /* its create, then commit or abort */
	struct rec_disk_request row_req;
	uint64_t seed;       /* R-KEY-7's s */
	uint32_t next_first; /* the next window's first page */
	uint32_t writes;     /* its windows on the disk */
	struct stage *held;  /* a window copied before its create came back */
	bool row_done;       /* its row was sent, or its failure made it moot */
	bool row_copied;     /* its row's copy went behind its last window's (warm) */
	uint32_t warm;       /* its warm entry (shard/warm.h), or SHARD_WARM_NONE */
	uint32_t *warm_row;  /* that entry's row pieces' slots */
	bool warm_only;      /* SHARD_STORE_WARM_ONLY: no file, no disk request */
	bool from_warm;      /* SHARD_STORE_WARM_WRITE: the file from warm, no copy */
	bool closing;        /* its commit or abort was sent */
};

struct job_queue {
	struct shard_job *head;
	struct shard_job *tail;
};

struct shard_engine {
	struct rec_geometry geometry;
	bool pool_on;                       /* shard_engine_set_pool */
	struct shard_pool_conn pool_conn;
	struct shard_pool_share pool_share; /* the claim the transfer thread runs */
	struct shard_pool_record *pool_chain; /* its chain (SHARD_CHAIN_RECORDS_MAX) */
	struct shard_pool_early *pool_early;  /* its early places (SHARD_CHAIN_RECORDS_MAX) */
	struct shard_planes planes;
	struct rec_dir *dir;
	/*
	 * A fetch's windows of a memory-backed directory are read by the
	 * threads that verify them (fetch_issue), where the restores' pool
	 * has helpers.
	 */
	bool fetch_reads_here;
	struct shard_device *device;
	struct rec_disk *disk;
	uint32_t window_pages;
	uint64_t read_ahead_bytes;
	uint32_t jobs_max;

	struct shard_slab_pool pool;
	uint32_t row_piece_count;
	struct shard_warm warm;     /* the warm tier; pool.base NULL when off */
	uint32_t warm_entries[SHARD_CHAIN_RECORDS_MAX]; /* a warm fetch's records */
	/*
	 * A fetch's plan (fetch_plan): per chain record, where its pages come
	 * from (enum fetch_tier), and whether the last record's row is warm.
	 */
	uint8_t fetch_tier[SHARD_CHAIN_RECORDS_MAX];
	bool fetch_row_warm;
	uint32_t fetch_row_slots[REC_DISK_BUFFERS_MAX]; /* a read-through's row */
	struct lane lanes[LANE_COUNT];
	struct store_run runs[SHARD_STORES_MAX];
	uint32_t stores_max;        /* stores in progress at once */
	uint32_t stores_active;     /* runs holding a job now */
	struct store_run *row_user; /* whose row the background row staging holds */
	struct shard_checksum_pool checksums;  /* stores' checksum passes */
	struct shard_checksum_pool verifies;   /* restores' (at their priority) */
	bool checksums_started, verifies_started;
	/*
	 * The stores' copy pipeline (run_stores, docs/DESIGN.md section 6):
	 * background windows whose copies from the device were issued and
	 * whose checksum pass and write are still to come, oldest first, at
	 * most two. Where the device keeps marks (store_pipelined), a window's
	 * copies are issued while the window before it still copies, each
	 * with its own mark, and each is waited for by its mark alone;
	 * elsewhere one copy at a time, waited for before the next is issued.
	 * Anything else that uses the device waits for every one first
	 * (store_copy_settle).
	 */
	struct store_flight {
		struct stage *s;
		uint32_t mark;       /* STORE_MARK_FIRST or the one after it */
		bool marked;         /* else a synchronize waits for it */
		bool settled;        /* waited for, and copied: its pass comes next */
		bool summed_beside;  /* a checksum pass ran while it copied */
		bool behind;         /* the next window was issued before its wait */
		uint64_t issued_at;  /* its issue ended then */
	} store_pipe[2];
	uint32_t store_pipe_count;
	uint32_t store_marks_used; /* marks recorded, for the next one's number */
	bool store_pipelined;

	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock;
	pthread_cond_t work_ready;
	pthread_cond_t completion_ready;
	struct shard_job *jobs;
	struct shard_job *free_jobs;
	struct job_queue restores;   /* fetches: taken first */
	struct job_queue background; /* stores, truncates, unlinks, noops */
	struct shard_completion *completions; /* ring of jobs_max */
	uint32_t completion_head;
	uint32_t completion_count;
	uint32_t unpolled; /* submitted and not yet polled */
	shard_completion_hook hook; /* when set, completions go here, not the ring */
	void *hook_ctx;
	uint32_t hook_calls;        /* hook calls running (outside the lock) */
	pthread_cond_t hook_idle;
	bool stopping;
	/* closings for the transfer thread (shard_engine_retire), oldest first */
	struct {
		void (*close)(void *ctx);
		void *ctx;
	} retires[SHARD_RETIRES_MAX];
	uint32_t retire_count;   /* waiting in retires */
	uint32_t retire_running; /* taken by the transfer thread, not finished */
	struct shard_engine_stats stats;
	/* The store_*_ns stats, kept by the transfer thread; stats copies them. */
	struct store_clock {
		uint64_t run_ns, copy_ns, sum_ns, wait_ns;
		uint64_t since; /* while run_stores runs: when run_ns was last added to */
		uint64_t copies, overlapped, pipelined, alone, issue_ns, wait_copy_ns, gap_ns;
	} store_clock;
	/* The fetch_* stats, kept by the transfer thread; stats copies them. */
	struct fetch_clock {
		uint64_t run_ns, open_ns, wait_ns, verify_ns, copy_ns, end_ns;
		uint64_t opens_ahead;
		uint64_t windows, verify_passes;
		uint64_t hash_ns, bytes_verified, verify_groups_max;
		uint64_t end_copy_ns, end_row_ns, end_close_ns;
		uint64_t windows_read_here;
		uint64_t warm_pipelined;
		uint64_t lead_ns, span_ns, tail_ns;
		/*
		 * The running fetch's first page verification's start and last
		 * one's end (verify_unit, on any verifying thread), or
		 * UINT64_MAX and 0 before any.
		 */
		uint64_t unit_first, unit_last;
	} fetch_clock;
};

static int outcome_fail(struct job_outcome *o, int err, uint64_t seq,
			const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Keeps the failure of the earliest request; later ones follow from it. */
static int outcome_fail(struct job_outcome *o, int err, uint64_t seq,
			const char *fmt, ...)
{
	va_list ap;

	if (o->result && o->seq <= seq)
		return o->result;
	o->result = err;
	o->seq = seq;
	va_start(ap, fmt);
	vsnprintf(o->why, sizeof(o->why), fmt, ap);
	va_end(ap);
	return err;
}

static void disk_send(struct shard_engine *e, struct lane *l, struct rec_disk_request *req)
{
	int ret;

	req->tag = ++l->next_seq;
	ret = rec_disk_submit(e->disk, req);
	/*
	 * Outstanding at most: its stages, one row and a create or commit of
	 * each store on the background lane (16 + 1 + 8), 12 on the restore
	 * lane (its stages, the row, a control request and two opens); the
	 * disk takes REC_DISK_QUEUE_MAX (disk_queue_room).
	 */
	SEL_ASSERT(ret == 0);
}

/* Notes a reply: its failure, if any, and that it is back (tag 0). */
static void disk_note(struct rec_disk_request *done, struct job_outcome *o)
{
	if (done->result)
		outcome_fail(o, done->result, done->tag, "%s",
			     done->why[0] ? done->why : sel_strerror(done->result));
	done->tag = 0;
}

/* Waits until req has come back, noting every reply's failure. */
static void disk_await(struct lane *l, struct rec_disk_request *req,
		       struct job_outcome *o)
{
	while (req->tag)
		disk_note(rec_disk_wait(&l->replies), o);
}

/* Notes every reply that has already come back, without waiting. */
static void disk_reap(struct lane *l, struct job_outcome *o)
{
	struct rec_disk_request *done;

	while ((done = rec_disk_take(&l->replies)))
		disk_note(done, o);
}

static void disk_await_all(struct lane *l, struct job_outcome *o)
{
	for (uint32_t b = 0; b < l->stage_count; b++) {
		disk_await(l, &l->stages[b].req, o);
		disk_await(l, &l->warm_stages[b].req, o);
	}
	disk_await(l, &l->row_req, o);
	disk_await(l, &l->control_req, o);
	disk_await(l, &l->open_req[0], o);
	disk_await(l, &l->open_req[1], o);
}

_Static_assert(2 * SHARD_STORE_STAGES_MAX + 1 + SHARD_STORES_MAX + SHARD_STAGES + 4 <=
		       REC_DISK_QUEUE_MAX, "disk_queue_room");

/* Runs one control request on file to its reply. */
static int disk_control(struct shard_engine *e, struct lane *l, struct rec_disk_file *file,
			enum rec_disk_op op, const struct rec_key *key,
			struct job_outcome *o)
{
	struct rec_disk_request *req = &l->control_req;

	disk_await(l, req, o);
	req->file = file;
	req->op = op;
	if (key)
		req->key = *key;
	disk_send(e, l, req);
	disk_await(l, req, o);
	return req->result;
}

static int device_fail(struct job_outcome *o, int ret, const char *what)
{
	return outcome_fail(o, ret, 0, "device copy %s failed: %s", what,
			    sel_strerror(ret));
}

/*
 * Issues copies and waits for them. A batch that fails to issue does not
 * skip the wait: the batches before it may still be running, and the
 * failure is reported only once they are done, so staging is never scrubbed
 * under a copy that reads it and page ids are never handed back while a
 * copy writes them. Returns the first failure.
 */
static int copy_drained(struct shard_engine *e, struct lane *l,
			enum shard_copy_direction dir, uint32_t count)
{
	int ret = shard_device_copy(e->device, dir, l->copies, count);
	int drained = shard_device_synchronize(e->device);

	return ret ? ret : drained;
}

/* The slots the window's pages lie in: staging's, or (warm) the warm tier's. */
static const struct shard_slab_pool *stage_pool(const struct shard_engine *e,
						const struct stage *s)
{
	return s->warm ? &e->warm.pool : &e->pool;
}

/* Where plane p of the window's page i lies in host memory. */
static uint8_t *stage_plane(const struct shard_engine *e, const struct stage *s, uint32_t i,
			    uint32_t p)
{
	return shard_slab_plane(stage_pool(e, s), s->cur[i], p);
}

/* Where the window's page i begins (laid out as s->req.spread says). */
static uint8_t *stage_page(const struct shard_engine *e, const struct stage *s, uint32_t i)
{
	return shard_slab_page(stage_pool(e, s), s->cur[i]);
}

/*
 * A run of slots of one pool (staging's or the warm tier's) whose planes
 * follow one another (shard_slab_follows) going to consecutive page ids:
 * plane p of its pages is one range on both sides (slots are grouped only
 * where a plane has no padding, shard/slab.h), so it is one copy entry per
 * plane.
 */
struct copy_run {
	const struct shard_slab_pool *pool;
	uint32_t slot;    /* its first page's */
	uint32_t page_id; /* its first page's */
	uint32_t pages;   /* 0: no run */
};

/* Whether slot going to page_id extends r. */
static bool run_extends(const struct copy_run *r, uint32_t slot, uint32_t page_id)
{
	return r->pages && page_id == r->page_id + r->pages &&
	       shard_slab_follows(r->pool, r->slot + r->pages - 1, slot);
}

/* Fills copies with r's entries, one per plane; returns how many. */
static uint32_t run_copies(const struct shard_engine *e, const struct copy_run *r,
			   struct shard_copy *copies)
{
	const struct rec_geometry *g = &e->geometry;

	for (uint32_t p = 0; p < g->page_plane_count; p++) {
		uint64_t unit = g->page_planes[p].unit_bytes;

		copies[p] = (struct shard_copy){
			.device_address = e->planes.page_base[p] + unit * r->page_id,
			.host = shard_slab_plane(r->pool, r->slot, p),
			.bytes = unit * r->pages,
		};
	}
	return g->page_plane_count;
}

/*
 * Adds slot (of r->pool) going to page_id to *r, filling copies with the
 * run it ends; returns how many.
 */
static uint32_t run_add(const struct shard_engine *e, struct copy_run *r, uint32_t slot,
			uint32_t page_id, struct shard_copy *copies)
{
	uint32_t n = 0;

	if (run_extends(r, slot, page_id)) {
		r->pages++;
		return 0;
	}
	if (r->pages)
		n = run_copies(e, r, copies);
	*r = (struct copy_run){ .pool = r->pool, .slot = slot, .page_id = page_id, .pages = 1 };
	return n;
}

/*
 * Fills l->copies for the window's slots and pages[0, count); returns how
 * many: one per plane for each run of its slots (struct copy_run; with G
 * = 1 every run is a page, so one entry per page and plane).
 */
static uint32_t window_copies(struct shard_engine *e, struct lane *l, struct stage *s,
			      const uint32_t *page_ids, uint32_t count)
{
	struct copy_run r = { .pool = stage_pool(e, s) };
	uint32_t n = 0;

	for (uint32_t i = 0; i < count; i++)
		n += run_add(e, &r, s->cur[i], page_ids[i], l->copies + n);
	return r.pages ? n + run_copies(e, &r, l->copies + n) : n;
}

/*
 * Starts copying a verified window to the device without waiting, so the
 * next window is verified meanwhile; copy_finish waits. A batch that fails
 * to issue is drained here (see copy_drained) and fails the job.
 */
static int copy_start(struct shard_engine *e, struct lane *l, struct stage *s,
		      const uint32_t *page_ids, uint32_t count, struct job_outcome *o)
{
	int ret = shard_device_copy(e->device, SHARD_HOST_TO_DEVICE, l->copies,
				    window_copies(e, l, s, page_ids, count));

	if (ret) {
		shard_device_synchronize(e->device);
		return device_fail(o, ret, "host to device");
	}
	return 0;
}

/* Waits for the copy copy_start began, if one runs (*stage is its stage). */
static int copy_finish(struct shard_engine *e, int *stage, struct job_outcome *o)
{
	int ret;

	if (*stage < 0)
		return 0;
	*stage = -1;
	ret = shard_device_synchronize(e->device);
	return ret ? device_fail(o, ret, "host to device") : 0;
}

/*
 * A row's pieces: staging's row slots, slot_bytes each, or (warm) a warm
 * entry's row slots as shard_warm_row_buffers lays them out. Fills pieces
 * (REC_DISK_BUFFERS_MAX) and *piece_bytes; returns the count.
 */
static uint32_t row_buffers(const struct shard_engine *e, bool warm, const uint32_t *slots,
			    void **pieces, uint64_t *piece_bytes)
{
	if (warm)
		return shard_warm_row_buffers(&e->warm, slots, pieces, piece_bytes);
	for (uint32_t k = 0; k < e->row_piece_count; k++)
		pieces[k] = shard_slab_page(&e->pool, slots[k]);
	*piece_bytes = e->pool.slot_bytes;
	return e->row_piece_count;
}

/* Fills l->copies for the row at state_slot and its slots; returns how many. */
static uint32_t row_copies(struct shard_engine *e, struct lane *l, bool warm,
			   const uint32_t *slots, uint32_t state_slot)
{
	uint64_t unit = e->geometry.row_plane.unit_bytes, piece;
	void *pieces[REC_DISK_BUFFERS_MAX];
	uint32_t count = row_buffers(e, warm, slots, pieces, &piece), n = 0;

	for (uint32_t k = 0; k < count && (uint64_t)k * piece < unit; k++) {
		uint64_t left = unit - (uint64_t)k * piece;

		l->copies[n++] = (struct shard_copy){
			.device_address = e->planes.row_base + unit * state_slot + piece * k,
			.host = pieces[k],
			.bytes = left < piece ? left : piece,
		};
	}
	return n;
}

/* Device <-> the row slots for the row at state_slot. */
static int copy_row(struct shard_engine *e, struct lane *l, bool warm, const uint32_t *slots,
		    uint32_t state_slot, enum shard_copy_direction dir, struct job_outcome *o)
{
	int ret = copy_drained(e, l, dir, row_copies(e, l, warm, slots, state_slot));

	return ret ? device_fail(o, ret, "of the row") : 0;
}

static void stage_pages(struct shard_engine *e, struct stage *s,
			struct rec_disk_file *file, enum rec_disk_op op,
			uint32_t first, uint32_t count)
{
	s->req.file = file;
	s->req.op = op;
	s->req.first = first;
	s->req.count = count;
	shard_slab_spread(&e->pool, &s->req.spread);
	s->warm = false;
	s->cur = s->slots;
	for (uint32_t i = 0; i < count; i++)
		s->req.buffers[i] = shard_slab_page(&e->pool, s->slots[i]);
}

/* The window's pages go through the warm entry's slots instead of staging. */
static void stage_warm(struct shard_engine *e, struct stage *s, uint32_t entry)
{
	shard_warm_page_slots(&e->warm, entry, s->req.first, s->req.count, s->warm_slots);
	s->warm = true;
	s->cur = s->warm_slots;
	shard_slab_spread(&e->warm.pool, &s->req.spread);
	for (uint32_t i = 0; i < s->req.count; i++)
		s->req.buffers[i] = shard_slab_page(&e->warm.pool, s->warm_slots[i]);
}

static void stage_row(struct shard_engine *e, bool warm, const uint32_t *slots,
		      struct rec_disk_request *req, struct rec_disk_file *file,
		      enum rec_disk_op op)
{
	req->file = file;
	req->op = op;
	req->piece_count = row_buffers(e, warm, slots, req->buffers, &req->piece_bytes);
}

/* Zeroes staging after a failed read, so its padding is zero again. */
static void stage_scrub(struct shard_engine *e, struct lane *l)
{
	for (uint32_t b = 0; b < l->stage_count; b++)
		for (uint32_t i = 0; i < e->window_pages; i++)
			shard_slab_scrub(&e->pool, l->stages[b].slots[i]);
	for (uint32_t k = 0; k < e->row_piece_count; k++)
		shard_slab_scrub(&e->pool, l->row_slots[k]);
}

/* A window's checksum pass, shared with the checksum pool's helpers. */
struct window_sums {
	struct shard_engine *e;
	struct stage *s;
	const struct rec_reader *reader; /* fetch: verify against its table */
	uint64_t seed;                   /* store: R-KEY-7's s */
	uint64_t prefix_index;           /* store: the window's first page in the prefix */
	uint32_t first;                  /* fetch: the window's first stored page */
	uint32_t bad;                    /* fetch: lowest failing page, or UINT32_MAX */
	int read_err;                    /* fetch, read here: a read's failure, or 0 */
};

/*
 * A page read by its verifying thread goes in chunks this large, each
 * hashed at once while it is still in that core's cache (256 KiB: well
 * within a core's L2).
 */
#define FETCH_READ_CHUNK_BYTES (256ull << 10)

/* Store: page i's R-REC-9 checksum, for the disk thread to note. */
static void sum_page(void *ctx, uint32_t i)
{
	struct window_sums *w = ctx;
	const uint8_t *page = stage_page(w->e, w->s, i);

	w->s->req.page_checksums[i] =
		rec_page_checksum_spread(page, &w->s->req.spread, w->e->geometry.page_record_bytes,
					 w->seed, w->prefix_index + i);
}

/* Fetch: page i against the record's checksum table (R-READ-2). */
static void verify_page(void *ctx, uint32_t i)
{
	struct window_sums *w = ctx;
	uint8_t *page = stage_page(w->e, w->s, i);
	uint32_t bad = __atomic_load_n(&w->bad, __ATOMIC_RELAXED);
	int err = 0;

	if (w->s->read_here) {
		bool ok;
		int ret = rec_reader_read_page_ok_spread(w->reader, w->first + i, page,
							 &w->s->req.spread,
							 FETCH_READ_CHUNK_BYTES, &ok);

		if (ret)
			__atomic_compare_exchange_n(&w->read_err, &err, ret, false,
						    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		else if (ok)
			return;
	} else if (rec_reader_page_ok_spread(w->reader, w->first + i, page, &w->s->req.spread)) {
		return;
	}
	while (i < bad && !__atomic_compare_exchange_n(&w->bad, &bad, i, false,
						       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static void yield_to_restores(struct shard_engine *e);

static void queue_push(struct job_queue *q, struct shard_job *job)
{
	job->next = NULL;
	if (q->tail)
		q->tail->next = job;
	else
		q->head = job;
	q->tail = job;
}

static struct shard_job *queue_pop(struct job_queue *q)
{
	struct shard_job *job = q->head;

	if (job) {
		q->head = job->next;
		if (!q->head)
			q->tail = NULL;
	}
	return job;
}

/* Hands c to the hook or the ring and frees job; on the transfer thread. */
static void finish_job(struct shard_engine *e, struct shard_job *job,
		       const struct shard_completion *c)
{
	shard_completion_hook hook;
	void *hook_ctx;

	pthread_mutex_lock(&e->lock);
	hook = e->hook;
	hook_ctx = e->hook_ctx;
	if (hook) {
		e->unpolled--; /* handed over below, never polled */
		e->hook_calls++;
	} else {
		SEL_ASSERT(e->completion_count < e->jobs_max);
		e->completions[(e->completion_head + e->completion_count++) %
			       e->jobs_max] = *c;
	}
	job->next = e->free_jobs;
	e->free_jobs = job;
	e->stats.store_run_ns = e->store_clock.run_ns +
		(e->store_clock.since ? sel_monotonic_ns() - e->store_clock.since : 0);
	e->stats.store_copy_ns = e->store_clock.copy_ns;
	e->stats.store_sum_ns = e->store_clock.sum_ns;
	e->stats.store_wait_ns = e->store_clock.wait_ns;
	e->stats.store_copies = e->store_clock.copies;
	e->stats.store_copies_overlapped = e->store_clock.overlapped;
	e->stats.store_copies_pipelined = e->store_clock.pipelined;
	e->stats.store_copies_alone = e->store_clock.alone;
	e->stats.store_copy_issue_ns = e->store_clock.issue_ns;
	e->stats.store_copy_wait_ns = e->store_clock.wait_copy_ns;
	e->stats.store_copy_gap_ns = e->store_clock.gap_ns;
	e->stats.fetch_run_ns = e->fetch_clock.run_ns;
	e->stats.fetch_open_ns = e->fetch_clock.open_ns;
	e->stats.fetch_wait_ns = e->fetch_clock.wait_ns;
	e->stats.fetch_verify_ns = e->fetch_clock.verify_ns;
	e->stats.fetch_copy_ns = e->fetch_clock.copy_ns;
	e->stats.fetch_end_ns = e->fetch_clock.end_ns;
	e->stats.fetch_opens_ahead = e->fetch_clock.opens_ahead;
	e->stats.fetch_windows = e->fetch_clock.windows;
	e->stats.fetch_verify_passes = e->fetch_clock.verify_passes;
	e->stats.fetch_hash_ns = e->fetch_clock.hash_ns;
	e->stats.fetch_bytes_verified = e->fetch_clock.bytes_verified;
	e->stats.fetch_verify_groups_max = e->fetch_clock.verify_groups_max;
	e->stats.fetch_windows_read_here = e->fetch_clock.windows_read_here;
	e->stats.fetch_verify_lead_ns = e->fetch_clock.lead_ns;
	e->stats.fetch_verify_span_ns = e->fetch_clock.span_ns;
	e->stats.fetch_verify_tail_ns = e->fetch_clock.tail_ns;
	e->stats.fetch_warm_pipelined = e->fetch_clock.warm_pipelined;
	e->stats.fetch_end_copy_ns = e->fetch_clock.end_copy_ns;
	e->stats.fetch_end_row_ns = e->fetch_clock.end_row_ns;
	e->stats.fetch_end_close_ns = e->fetch_clock.end_close_ns;
	if (c->result) {
		e->stats.jobs_failed++;
	} else {
		e->stats.jobs_done++;
		if (c->kind == SHARD_JOB_STORE)
			e->stats.bytes_stored += c->bytes;
		if (c->kind == SHARD_JOB_FETCH)
			e->stats.bytes_fetched += c->bytes;
	}
	pthread_cond_broadcast(&e->completion_ready);
	pthread_mutex_unlock(&e->lock);
	if (hook) {
		hook(hook_ctx, c);
		pthread_mutex_lock(&e->lock);
		if (--e->hook_calls == 0)
			pthread_cond_broadcast(&e->hook_idle);
		pthread_mutex_unlock(&e->lock);
	}
}

/* Reports job's outcome and frees it. */
static void complete_job(struct shard_engine *e, struct shard_job *job,
			 const struct job_outcome *o)
{
	struct shard_completion c;

	memset(&c, 0, sizeof(c));
	c.job_id = job->id;
	c.kind = job->kind;
	c.result = o->result;
	c.bytes = o->result ? 0 : o->bytes;
	snprintf(c.why, sizeof(c.why), "%s", o->why);
	finish_job(e, job, &c);
}

/*
 * The running write from warm (SHARD_STORE_WARM_WRITE) of key, or NULL. Its
 * windows hash and write the warm slots of key's entry until it completes,
 * so nothing may free them meanwhile (docs/DESIGN.md section 6).
 */
static const struct store_run *warm_writer(const struct shard_engine *e,
					   const struct rec_key *key)
{
	for (uint32_t i = 0; i < e->stores_max; i++)
		if (e->runs[i].job && e->runs[i].from_warm &&
		    rec_key_equal(&e->runs[i].job->header.key, key))
			return &e->runs[i];
	return NULL;
}

/*
 * A warm drop: it runs on the restore lane, so possibly while a write from
 * warm of its key is in flight on the background lane (between two of that
 * store's steps). Such a drop fails with -EBUSY and frees nothing: the
 * write goes on reading the slots, and the record stays warm.
 */
static void run_warm_drop(struct shard_engine *e, const struct shard_job *job,
			  struct job_outcome *o)
{
	if (warm_writer(e, &job->key)) {
		char name[REC_FILE_NAME_BYTES];

		rec_file_name(name, &job->key);
		outcome_fail(o, -EBUSY, 0,
			     "%s: its write from warm is in flight; the warm copy stays", name);
		return;
	}
	shard_warm_drop(&e->warm, &job->key, false);
}

/* Starts job on the free slot run: its create goes to the disk first. */
static void store_begin(struct shard_engine *e, struct lane *l, struct store_run *run,
			struct shard_job *job)
{
	pthread_mutex_lock(&e->lock);
	if (++e->stores_active > e->stats.stores_at_once)
		e->stats.stores_at_once = e->stores_active;
	pthread_mutex_unlock(&e->lock);
	run->job = job;
	run->o = (struct job_outcome){ 0 };
	run->seed = rec_checksum_seed(&job->header.key);
	run->next_first = 0;
	run->writes = 0;
	run->held = NULL;
	run->row_done = false;
	run->row_copied = false;
	run->closing = false;
	run->warm = SHARD_WARM_NONE;
	run->warm_only = false;
	run->from_warm = false;
	if (job->warm == SHARD_STORE_WARM_WRITE) {
		/* The file of a record already warm: its copy stays, and is read. */
		run->warm = e->warm.pool.base ? shard_warm_find(&e->warm, &job->header.key) :
						SHARD_WARM_NONE;
		if (run->warm == SHARD_WARM_NONE) {
			char name[REC_FILE_NAME_BYTES];

			rec_file_name(name, &job->header.key);
			outcome_fail(&run->o, -ENOENT, 0, "%s: no warm copy to write", name);
			run->row_done = true;
			run->closing = true;
			return;
		}
		run->from_warm = true;
		shard_warm_row_slots(&e->warm, run->warm, run->warm_row);
	} else {
		/*
		 * A warm copy of an earlier store of this key goes: the file is
		 * being replaced, and rank zero charges warm slots from this
		 * store on. No copy reads it: fetches run whole on this
		 * thread, between steps; no write from warm of it runs, as
		 * a second store of a key waits for the first (next_store).
		 */
		SEL_ASSERT(!warm_writer(e, &job->header.key));
		shard_warm_drop(&e->warm, &job->header.key, false);
	}
	if (job->warm != SHARD_STORE_WARM_WRITE && job->warm != SHARD_STORE_COLD &&
	    e->warm.pool.base) {
		run->warm = shard_warm_reserve(&e->warm, &job->header.key,
					       job->header.first_page_index,
					       job->header.tail_page_count);
		if (run->warm != SHARD_WARM_NONE)
			shard_warm_row_slots(&e->warm, run->warm, run->warm_row);
	}
	/*
	 * Rank zero counted room for this warm-only store; where this rank's
	 * slots are held after all (a read-through here reserved a record
	 * that rank zero lists warm but this rank had not kept), records this
	 * rank read through make the room: clean, so their files serve them.
	 */
	if (job->warm == SHARD_STORE_WARM_ONLY && run->warm == SHARD_WARM_NONE &&
	    e->warm.pool.base &&
	    shard_warm_free_reads(&e->warm, shard_warm_slots_for(&e->warm,
								 job->header.tail_page_count,
								 true))) {
		run->warm = shard_warm_reserve(&e->warm, &job->header.key,
					       job->header.first_page_index,
					       job->header.tail_page_count);
		if (run->warm != SHARD_WARM_NONE)
			shard_warm_row_slots(&e->warm, run->warm, run->warm_row);
	}
	if (job->warm == SHARD_STORE_WARM_ONLY) {
		/* Warm only, no file: nothing goes to the disk. */
		run->warm_only = true;
		if (run->warm == SHARD_WARM_NONE) {
			outcome_fail(&run->o, -ENOBUFS, 0, "too few free warm slots on this rank");
			run->row_done = true;
			run->closing = true;
		}
		return;
	}
	run->file.header = job->header;
	run->control_req.file = &run->file;
	run->control_req.op = REC_DISK_CREATE;
	disk_send(e, l, &run->control_req);
}

/*
 * A background stage holding no window (neither on the disk nor held):
 * for a warm store's window, one without staging.
 */
static struct stage *free_stage(struct lane *l, bool warm)
{
	struct stage *stages = warm ? l->warm_stages : l->stages;

	for (uint32_t b = 0; b < l->stage_count; b++)
		if (!stages[b].owner)
			return &stages[b];
	return NULL;
}

/* The background stage whose request done is, or NULL. */
static struct stage *stage_of(struct lane *l, struct rec_disk_request *done)
{
	for (uint32_t b = 0; b < l->stage_count; b++)
		if (done == &l->stages[b].req || done == &l->warm_stages[b].req)
			return (struct stage *)((char *)done - offsetof(struct stage, req));
	return NULL;
}

/* Windows of run in the copy pipeline (e->store_pipe): 0 to 2. */
static uint32_t store_piped(const struct shard_engine *e, const struct store_run *run)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < e->store_pipe_count; i++)
		n += e->store_pipe[i].s->owner == run;
	return n;
}

/* Takes the pipeline's entry i out. */
static void store_pipe_remove(struct shard_engine *e, uint32_t i)
{
	SEL_ASSERT(i < e->store_pipe_count);
	e->store_pipe_count--;
	memmove(&e->store_pipe[i], &e->store_pipe[i + 1],
		(e->store_pipe_count - i) * sizeof(e->store_pipe[0]));
}

/*
 * Waits for the pipeline's entry i, the oldest not yet waited for: by its
 * own mark, so a failure of a window issued after it is not its. Its
 * window is then copied (settled), or its store failed with the device's
 * reason and the entry is gone, its stage free. True when it is settled.
 */
static bool store_flight_wait(struct shard_engine *e, uint32_t i)
{
	struct store_flight *f = &e->store_pipe[i];
	uint64_t t = sel_monotonic_ns();
	int ret;

	SEL_ASSERT(!f->settled && (i == 0 || e->store_pipe[i - 1].settled));
	e->store_clock.copies++;
	e->store_clock.overlapped += f->summed_beside;
	e->store_clock.pipelined += f->behind;
	e->store_clock.alone += !f->summed_beside && !f->behind;
	e->store_clock.gap_ns += t - f->issued_at;
	ret = f->marked ? shard_device_wait_mark(e->device, f->mark) :
			  shard_device_synchronize(e->device);
	t = sel_monotonic_ns() - t;
	e->store_clock.copy_ns += t;
	e->store_clock.wait_copy_ns += t;
	if (ret) {
		device_fail(&f->s->owner->o, ret, "device to host");
		f->s->owner = NULL;
		store_pipe_remove(e, i);
		return false;
	}
	f->settled = true;
	return true;
}

/* Waits for the pipeline's oldest window, if it was not waited for yet. */
static void store_copy_settle_oldest(struct shard_engine *e)
{
	if (e->store_pipe_count && !e->store_pipe[0].settled)
		store_flight_wait(e, 0);
}

/*
 * Waits for every store window copy in flight, oldest first, each by its
 * own mark: the device is then free for another job's copies and
 * synchronizations. The windows' checksum passes are still to come.
 */
static void store_copy_settle(struct shard_engine *e)
{
	for (uint32_t i = 0; i < e->store_pipe_count;)
		if (e->store_pipe[i].settled || store_flight_wait(e, i))
			i++;
}

/*
 * The oldest window's checksum pass, if it is copied (settled), then its
 * write sent, or held until its create has come back (the create runs on
 * the disk's control thread beside the first window's copy). A window of
 * a store that failed meanwhile is let go.
 */
static void store_sum(struct shard_engine *e, struct lane *l)
{
	struct stage *s;
	struct store_run *run;

	if (!e->store_pipe_count || !e->store_pipe[0].settled)
		return;
	s = e->store_pipe[0].s;
	store_pipe_remove(e, 0);
	run = s->owner;
	/* The checksum pass is as long as a copy: a restore first. */
	yield_to_restores(e);
	if (run->o.result) {
		s->owner = NULL;
		return;
	}
	if (run->warm_only) {
		/* In its warm slots now; the file's checksums come with its write. */
		run->o.bytes += e->geometry.page_record_bytes * s->req.count;
		s->owner = NULL;
		return;
	}
	{
		struct window_sums w = {
			.e = e, .s = s, .seed = run->seed,
			.prefix_index = (uint64_t)run->job->header.first_page_index + s->req.first,
		};
		uint64_t t = sel_monotonic_ns();

		shard_checksum_pool_run(&e->checksums, sum_page, &w, s->req.count);
		e->store_clock.sum_ns += sel_monotonic_ns() - t;
		for (uint32_t i = 0; i < e->store_pipe_count; i++)
			if (!e->store_pipe[i].settled)
				e->store_pipe[i].summed_beside = true;
	}
	run->o.bytes += e->geometry.page_record_bytes * s->req.count;
	if (run->control_req.tag) {
		SEL_ASSERT(!run->held);
		run->held = s;
	} else {
		disk_send(e, l, &s->req);
		run->writes++;
	}
}

/*
 * Issues the copies of run's window in s (a warm store's last one with
 * its row) and records the window's mark behind them; returns 0 or the
 * device's failure, what was issued still running.
 */
static int store_window_issue(struct shard_engine *e, struct lane *l, struct store_run *run,
			      struct stage *s, struct store_flight *f)
{
	struct shard_job *job = run->job;
	int ret;

	ret = shard_device_copy(e->device, SHARD_DEVICE_TO_HOST, l->copies,
				window_copies(e, l, s, job->page_ids + s->req.first, s->req.count));
	/*
	 * A warm store's row goes into its own warm slots, which nothing else
	 * uses: its copy goes behind the last window's on the same stream and
	 * is settled with it, no synchronization of its own (store_row).
	 */
	if (!ret && run->warm != SHARD_WARM_NONE &&
	    run->next_first == job->header.tail_page_count) {
		ret = shard_device_copy(e->device, SHARD_DEVICE_TO_HOST, l->copies,
					row_copies(e, l, true, run->warm_row, job->state_slot));
		run->row_copied = ret == 0;
	}
	if (!ret && e->store_pipelined) {
		f->mark = STORE_MARK_FIRST + e->store_marks_used++ % 2;
		f->marked = shard_device_mark(e->device, f->mark) == 0;
	}
	return ret;
}

/*
 * Starts copying run's next window (a warm store's last one with its row)
 * from the device to a free stage, then, once two windows are in flight
 * (one where the device has no marks), waits for the older one alone and
 * runs its checksum pass while the newer one copies (store_sum): the copy
 * engine runs the newer window's copies while the transfer thread waits,
 * wakes and hashes. False when no stage is free.
 */
static bool store_window(struct shard_engine *e, struct lane *l, struct store_run *run)
{
	struct shard_job *job = run->job;
	uint32_t tail = job->header.tail_page_count, first = run->next_first;
	uint32_t n = tail - first < e->window_pages ? tail - first : e->window_pages;
	uint32_t piped = store_piped(e, run);
	struct store_flight *f;
	struct stage *s;
	uint64_t t, now;
	int ret;

	/*
	 * Each store holds its share of the stages at most (a warm store of
	 * the warm ones): the first store would otherwise take every stage
	 * as it comes back, and the others' files would wait while its
	 * file's writes queue behind one another.
	 */
	if (run->writes + piped + (run->held != NULL) >= l->stage_count / e->stores_active)
		return false;
	/* Before its create has come back, a store copies one window (held). */
	if (run->control_req.tag && (piped || run->held))
		return false;
	s = free_stage(l, run->warm != SHARD_WARM_NONE);
	if (!s)
		return false;
	/* No copy of a store goes before a fetch submitted earlier. */
	yield_to_restores(e);
	/* Without marks, one copy on the device at a time: the one before is done first. */
	if (!e->store_pipelined)
		store_copy_settle(e);
	if (run->o.result)
		return true; /* a copy of this store failed */
	run->next_first += n;
	s->owner = run;
	stage_pages(e, s, &run->file, REC_DISK_WRITE_PAGES, first, n);
	if (run->warm != SHARD_WARM_NONE)
		stage_warm(e, s, run->warm);
	SEL_ASSERT(e->store_pipe_count < SEL_ARRAY_SIZE(e->store_pipe));
	f = &e->store_pipe[e->store_pipe_count];
	*f = (struct store_flight){ .s = s };
	if (run->from_warm) {
		/* Already in its warm slots: no copy, its checksum pass and write. */
		store_copy_settle(e);
		while (e->store_pipe_count)
			store_sum(e, l);
		f = &e->store_pipe[e->store_pipe_count++];
		*f = (struct store_flight){ .s = s, .settled = true };
		store_sum(e, l);
		return true;
	}
	t = sel_monotonic_ns();
	ret = store_window_issue(e, l, run, s, f);
	if (ret) {
		/*
		 * Issued in part: the windows before it are waited for by their
		 * own marks, then everything issued (see copy_drained), so the
		 * failure is this store's alone.
		 */
		store_copy_settle(e);
		shard_device_synchronize(e->device);
		device_fail(&run->o, ret, "device to host");
		s->owner = NULL;
	}
	now = sel_monotonic_ns();
	e->store_clock.copy_ns += now - t;
	e->store_clock.issue_ns += now - t;
	if (!ret) {
		f->issued_at = now;
		e->store_pipe_count++;
		if (e->store_pipe_count == 2)
			e->store_pipe[0].behind = !e->store_pipe[0].settled;
		/*
		 * No mark to wait for it by alone: it is waited for now, before
		 * anything is issued behind it (the ones before it by theirs).
		 */
		if (e->store_pipelined && !f->marked)
			store_copy_settle(e);
	}
	/* The older window alone is waited for; the newer one copies on. */
	if (e->store_pipe_count == 2 || (e->store_pipe_count && e->store_pipe[0].settled)) {
		store_copy_settle_oldest(e);
		store_sum(e, l);
	}
	return true;
}

/* Copies run's row to the row staging and sends its write; false while busy. */
static bool store_row(struct shard_engine *e, struct lane *l, struct store_run *run)
{
	uint64_t t;
	int failed;

	bool warm = run->warm != SHARD_WARM_NONE;
	const uint32_t *slots = warm ? run->warm_row : l->row_slots;

	/* Another store's row is still on its way to the disk from staging. */
	if (!warm && e->row_user && e->row_user->row_req.tag)
		return false;
	run->row_done = true;
	yield_to_restores(e);
	store_copy_settle(e); /* the row's copy uses the device too */
	if (run->o.result)
		return true; /* that copy was this store's, and failed: no row */
	t = sel_monotonic_ns();
	/* Settled above, where it went with the last window's copy. */
	failed = !run->from_warm && !run->row_copied &&
		 copy_row(e, l, warm, slots, run->job->state_slot, SHARD_DEVICE_TO_HOST,
			  &run->o);
	e->store_clock.copy_ns += sel_monotonic_ns() - t;
	if (failed)
		return true;
	if (run->warm_only) {
		run->o.bytes += e->geometry.row_record_bytes;
		return true;
	}
	stage_row(e, warm, slots, &run->row_req, &run->file, REC_DISK_WRITE_ROW);
	if (!warm)
		e->row_user = run;
	disk_send(e, l, &run->row_req);
	run->o.bytes += e->geometry.row_record_bytes;
	return true;
}

/*
 * Moves run on by one step: a held window sent, the next window copied
 * and sent, its row, its commit (or, after a failure, its abort) once every
 * write of it has come back, its completion. True when it did something.
 */
static bool store_step(struct shard_engine *e, struct lane *l, struct store_run *run)
{
	uint32_t tail = run->job->header.tail_page_count;
	bool created = run->control_req.tag == 0;

	if (run->closing) {
		if (!created)
			return false;
		/*
		 * Committed: the record stays warm; failed: its slots go back.
		 * A write from warm leaves the warm copy as it was.
		 */
		if (run->warm != SHARD_WARM_NONE && !run->from_warm && !run->o.result)
			shard_warm_commit(&e->warm, run->warm);
		else if (run->warm != SHARD_WARM_NONE && !run->from_warm)
			shard_warm_abort(&e->warm, run->warm);
		run->warm = SHARD_WARM_NONE;
		complete_job(e, run->job, &run->o);
		run->job = NULL;
		e->stores_active--;
		return true;
	}
	if (run->held) {
		if (!created)
			return false;
		if (!run->o.result) {
			disk_send(e, l, &run->held->req);
			run->writes++;
		} else {
			run->held->owner = NULL; /* the create failed: never written */
		}
		run->held = NULL;
		return true;
	}
	if (!run->o.result && run->next_first < tail)
		return store_window(e, l, run);
	/* The file exists before its row is sent (a record without pages). */
	if (!run->o.result && !run->row_done)
		return created && store_row(e, l, run);
	if (!created || run->writes || store_piped(e, run) || run->row_req.tag)
		return false;
	if (run->warm_only) {
		run->closing = true; /* in its warm slots: nothing to commit */
		return true;
	}
	/* Every write has drained: commit, or let the temporary file go. */
	run->control_req.op = run->o.result ? REC_DISK_ABORT : REC_DISK_COMMIT;
	disk_send(e, l, &run->control_req);
	run->closing = true;
	return true;
}

/* Notes a background reply against the store it belongs to. */
static void store_reply(struct shard_engine *e, struct lane *l, struct rec_disk_request *done)
{
	struct store_run *run = NULL;
	struct stage *s = stage_of(l, done);

	if (s) {
		run = s->owner;
		s->owner = NULL;
		run->writes--;
	} else {
		for (uint32_t i = 0; i < e->stores_max && !run; i++)
			if (done == &e->runs[i].control_req || done == &e->runs[i].row_req)
				run = &e->runs[i];
	}
	SEL_ASSERT(run && run->job);
	/* An abort's failure is logged by the disk; the store's own stands. */
	if (done->result && !(run->closing && run->o.result))
		outcome_fail(&run->o, done->result, done->tag, "%s",
			     done->why[0] ? done->why : sel_strerror(done->result));
	done->tag = 0;
}

/* The queued store that may start beside the running ones, or NULL. */
static struct shard_job *next_store(struct shard_engine *e)
{
	struct shard_job *job = NULL;

	pthread_mutex_lock(&e->lock);
	if (e->background.head && e->background.head->kind == SHARD_JOB_STORE) {
		job = e->background.head;
		/* A key is one file: a second store of it waits for the first. */
		for (uint32_t i = 0; i < e->stores_max && job; i++)
			if (e->runs[i].job &&
			    rec_key_equal(&e->runs[i].job->header.key, &job->header.key))
				job = NULL;
		if (job)
			queue_pop(&e->background);
	}
	pthread_mutex_unlock(&e->lock);
	return job;
}

/*
 * Runs the store job and every store queued behind it, stores_max at once
 * (docs/DESIGN.md section 6): round robin, one step of each at a time,
 * every queued fetch run first, and while nothing can move, the disk's
 * next reply awaited (a fetch submitted meanwhile wakes that wait). A job
 * that is not a store stops the admissions: it runs after every store
 * before it has completed.
 */
static void run_stores(struct shard_engine *e, struct shard_job *job)
{
	struct lane *l = &e->lanes[LANE_BACKGROUND];

	e->store_clock.since = sel_monotonic_ns();
	/*
	 * Before a store begins, the restore lane runs dry: a warm drop rank
	 * zero sent before this store (to make room for it) arrived before
	 * it and frees the slots its reservation counts on.
	 */
	yield_to_restores(e);
	store_begin(e, l, &e->runs[0], job);
	while (e->stores_active) {
		bool moved = false;

		yield_to_restores(e);
		for (uint32_t i = 0; i < e->stores_max && e->stores_active < e->stores_max; i++) {
			if (e->runs[i].job || !(job = next_store(e)))
				continue;
			yield_to_restores(e);
			store_begin(e, l, &e->runs[i], job);
			moved = true;
		}
		for (uint32_t i = 0; i < e->stores_max; i++)
			if (e->runs[i].job && store_step(e, l, &e->runs[i]))
				moved = true;
		/* Nothing else moves: the last window copied is summed and sent. */
		if (!moved && e->store_pipe_count) {
			store_copy_settle_oldest(e);
			store_sum(e, l);
			moved = true;
		}
		if (!moved) {
			struct rec_disk_request *done;
			uint64_t waited = sel_monotonic_ns();

			done = rec_disk_wait_or_poke(&l->replies);
			e->store_clock.wait_ns += sel_monotonic_ns() - waited;
			if (done)
				store_reply(e, l, done);
		}
	}
	SEL_ASSERT(e->store_pipe_count == 0);
	e->store_clock.run_ns += sel_monotonic_ns() - e->store_clock.since;
	e->store_clock.since = 0;
}

/* A window of a fetch: pages [first, first + count) of chain[record]. */
struct fetch_window {
	uint32_t record;
	uint32_t first;
	uint32_t count;
	uint32_t dest; /* index into page_ids */
};

/* Where a fetch takes a chain record's pages from (fetch_plan). */
enum fetch_tier {
	TIER_FILE,  /* its file, through staging */
	TIER_WARM,  /* its warm slots: no file */
	TIER_READ,  /* its file, read into warm slots it keeps (read-through) */
};

/* Which windows next_window yields. */
enum window_filter { WINDOWS_ALL, WINDOWS_WARM, WINDOWS_FILES };

static bool window_wanted(const struct shard_engine *e, enum window_filter f,
			  uint32_t record)
{
	if (f == WINDOWS_ALL)
		return true;
	return (e->fetch_tier[record] == TIER_WARM) == (f == WINDOWS_WARM);
}

/*
 * The next window after w of the records filter takes (every record's, the
 * warm ones' or those read from files), or false at the end of the chain.
 */
static bool next_window(const struct shard_engine *e, const struct shard_job *job,
			enum window_filter filter, struct fetch_window *w)
{
	uint32_t skip = w->record == UINT32_MAX ? job->skip_pages : 0;

	if (w->record == UINT32_MAX) {
		w->record = 0;
		w->first = 0;
		w->dest = 0;
	} else {
		w->first += w->count;
		w->dest += w->count;
	}
	/* Skip whole records (and page-less ones) until pages remain. */
	while (w->record < job->chain_count) {
		uint32_t tail = job->chain[w->record].tail_page_count;

		if (skip >= tail - w->first) {
			skip -= tail - w->first;
			w->record++;
			w->first = 0;
			continue;
		}
		w->first += skip;
		skip = 0;
		if (!window_wanted(e, filter, w->record)) {
			w->dest += tail - w->first;
			w->record++;
			w->first = 0;
			continue;
		}
		w->count = tail - w->first < e->window_pages ? tail - w->first :
							       e->window_pages;
		return true;
	}
	return false;
}

/* Closes file f once no read of its record is still in flight. */
static void fetch_close(struct shard_engine *e, struct lane *l, uint32_t f,
			struct job_outcome *o)
{
	if (l->file_record[f] == UINT32_MAX)
		return;
	disk_await(l, &l->open_req[f], o);
	for (uint32_t b = 0; b < l->stage_count; b++)
		if (l->stages[b].req.file == &l->files[f])
			disk_await(l, &l->stages[b].req, o);
	if (l->row_req.file == &l->files[f])
		disk_await(l, &l->row_req, o);
	/*
	 * A close never fails, but its wait takes every reply that comes back
	 * meanwhile (the other file's reads, its open sent ahead): their
	 * failures are the fetch's. They were once dropped here, and a failed
	 * open sent ahead then looked like an open file.
	 */
	disk_control(e, l, &l->files[f], REC_DISK_CLOSE, NULL, o);
	l->file_record[f] = UINT32_MAX;
}

/*
 * Sends the open of chain[record] into its file (record % 2), checking its
 * header against the index, once the record that file held is closed.
 * Records alternate between two files, so the next record's open and reads
 * can start while the last ones finish.
 */
static void fetch_open_send(struct shard_engine *e, struct lane *l,
			    const struct shard_job *job, uint32_t record,
			    struct job_outcome *o)
{
	const struct shard_chain_record *r = &job->chain[record];
	uint32_t f = record % 2;
	struct rec_disk_request *req = &l->open_req[f];
	uint64_t t = sel_monotonic_ns();

	fetch_close(e, l, f, o);
	req->key = r->key;
	req->expect_first_page = r->first_page_index;
	req->expect_tail_pages = r->tail_page_count;
	req->expect_row = record + 1 == job->chain_count;
	l->file_record[f] = record;
	disk_send(e, l, req);
	e->fetch_clock.open_ns += sel_monotonic_ns() - t;
}

/* The file holding chain[record] open, opening it or awaiting its open. */
static struct rec_disk_file *fetch_file(struct shard_engine *e, struct lane *l,
					const struct shard_job *job,
					uint32_t record, struct job_outcome *o)
{
	uint32_t f = record % 2;

	if (l->file_record[f] != record)
		fetch_open_send(e, l, job, record, o);
	if (l->open_req[f].tag) {
		uint64_t t = sel_monotonic_ns();

		disk_await(l, &l->open_req[f], o);
		e->fetch_clock.open_ns += sel_monotonic_ns() - t;
	}
	return &l->files[f];
}

/* Whether the fetch reads chain[r]'s file: its pages or its row. */
static bool record_reads_file(const struct shard_engine *e, const struct shard_job *job,
			      uint32_t r)
{
	if (r + 1 == job->chain_count && !e->fetch_row_warm)
		return true;
	return job->chain[r].tail_page_count > 0 && e->fetch_tier[r] != TIER_WARM;
}

/* The record after chain[record] that the fetch opens: pages or the row. */
static uint32_t next_open_record(const struct shard_engine *e, const struct shard_job *job,
				 uint32_t record)
{
	for (uint32_t r = record + 1; r < job->chain_count; r++)
		if (record_reads_file(e, job, r))
			return r;
	return UINT32_MAX;
}

/* Sends the read of window w into stage s. */
static void fetch_issue(struct shard_engine *e, struct lane *l,
			const struct shard_job *job,
			struct stage *s, const struct fetch_window *w,
			struct job_outcome *o)
{
	struct rec_disk_file *file = fetch_file(e, l, job, w->record, o);

	if (o->result)
		return;
	stage_pages(e, s, file, REC_DISK_READ_PAGES, w->first, w->count);
	/* A read-through reads into the record's warm slots: no staging copy. */
	if (e->fetch_tier[w->record] == TIER_READ)
		stage_warm(e, s, e->warm_entries[w->record]);
	/*
	 * Memory-backed: the verifying threads read it, each page in chunks
	 * hashed while still in cache (verify_page), instead of the kernel
	 * workers copying it and the hash reading it again from memory. It
	 * counts as landed at once (no tag), so it is queued at the next look.
	 * With O_DIRECT (tmpfs takes it) every chunk stays 4 KiB-aligned:
	 * slots are, and a page's stride is a multiple of 4 KiB (R-REC-7).
	 */
	s->read_here = e->fetch_reads_here;
	if (s->read_here) {
		e->fetch_clock.windows_read_here++;
		return;
	}
	disk_send(e, l, &s->req);
}

/* Sends the last record's row read as soon as that record is open. */
static void fetch_row_early(struct shard_engine *e, struct lane *l,
			    const struct shard_job *job,
			    bool *row_sent, struct job_outcome *o)
{
	uint32_t last = job->chain_count - 1;
	struct rec_disk_file *file;

	if (*row_sent || e->fetch_row_warm || o->result || l->file_record[last % 2] != last ||
	    l->open_req[last % 2].tag)
		return;
	file = &l->files[last % 2];
	if (e->fetch_tier[last] == TIER_READ)
		stage_row(e, true, e->fetch_row_slots, &l->row_req, file, REC_DISK_READ_ROW);
	else
		stage_row(e, false, l->row_slots, &l->row_req, file, REC_DISK_READ_ROW);
	disk_send(e, l, &l->row_req);
	*row_sent = true;
}

/*
 * Whether issuing a window of record would close a file whose record still
 * has windows read and not yet verified: they are verified against that
 * file's checksum table, so it stays open until they are.
 */
static bool file_in_use(const struct fetch_window *windows, uint32_t done,
			uint32_t issued, uint32_t record)
{
	for (uint32_t j = done; j < issued; j++) {
		uint32_t other = windows[j % SHARD_STAGES].record;

		if (other != record && other % 2 == record % 2)
			return true;
	}
	return false;
}

/*
 * Sends the open of the record after the one the cursor reads, into the
 * other file, once that file's record has no window left to verify: the
 * open waits behind the reads queued on the device, mostly while the
 * transfer thread verifies and issues other windows (before, it waited for
 * the open at the record's first window, doing neither). A next record in
 * the cursor's own file (a page-less record between them) is still opened
 * at its first window.
 */
static void fetch_open_ahead(struct shard_engine *e, struct lane *l,
			     const struct shard_job *job, const struct fetch_window *windows,
			     uint32_t done, uint32_t issued, const struct fetch_window *cursor,
			     struct job_outcome *o)
{
	uint32_t next = next_open_record(e, job, cursor->record);

	if (o->result || next == UINT32_MAX || next % 2 == cursor->record % 2 ||
	    l->file_record[next % 2] == next || file_in_use(windows, done, issued, next))
		return;
	fetch_open_send(e, l, job, next, o);
	e->fetch_clock.opens_ahead++;
}

/*
 * A group of a fetch's windows whose reads landed together, verified as
 * one batch on the checksum pool, one unit a page, while the transfer
 * thread goes on: several groups are verified at once, each window on as
 * many threads as it has pages, and every helper has pages to take.
 */
struct fetch_group {
	struct shard_checksum_batch batch;
	uint32_t window_count;
	uint32_t units_before[SHARD_STAGES + 1]; /* pages of the windows before j */
	struct window_sums w[SHARD_STAGES];
	uint64_t hash_ns; /* the units' time, summed over threads */
	bool alone;       /* one page, verified by fetch_check itself */
};

static void verify_unit(void *ctx, uint32_t u)
{
	struct fetch_group *g = ctx;
	struct fetch_clock *clock = &g->w[0].e->fetch_clock;
	uint64_t t = sel_monotonic_ns(), end, seen;
	uint32_t j = 0;

	while (u >= g->units_before[j + 1])
		j++;
	verify_page(&g->w[j], u - g->units_before[j]);
	end = sel_monotonic_ns();
	__atomic_fetch_add(&g->hash_ns, end - t, __ATOMIC_RELAXED);
	/* The fetch's verification span (run_fetch adds it up). */
	seen = __atomic_load_n(&clock->unit_first, __ATOMIC_RELAXED);
	while (t < seen && !__atomic_compare_exchange_n(&clock->unit_first, &seen, t, false,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	seen = __atomic_load_n(&clock->unit_last, __ATOMIC_RELAXED);
	while (end > seen && !__atomic_compare_exchange_n(&clock->unit_last, &seen, end, false,
							  __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/*
 * A fetch's verification in flight: groups[j % SHARD_STAGES] is the group
 * whose first window is j. Windows [done, verified) are verified,
 * [verified, submitted) queued on the pool in groups, [submitted, issued)
 * still reading (R-READ-2: no byte reaches the device unverified).
 */
struct fetch_checks {
	struct fetch_group groups[SHARD_STAGES];
	uint32_t verified, submitted;
};

/* A group is verified: the transfer thread's wait (fetch_check) wakes. */
static void fetch_group_done(void *replies)
{
	rec_disk_replies_poke(replies);
}

/*
 * Queues the verification of the windows after the last one queued whose
 * reads have landed (in order: the first still reading ends the group).
 */
static bool fetch_submit_group(struct shard_engine *e, struct lane *l,
			       const struct fetch_window *windows, uint32_t issued,
			       struct fetch_checks *c)
{
	uint32_t from = c->submitted, to = from, queued = 0;
	struct fetch_group *g = &c->groups[from % SHARD_STAGES];

	/*
	 * A window its verifying threads read is a group of its own: it is
	 * queued as soon as it is issued, and the transfer thread waits for
	 * one window's pages, not for every window issued with it.
	 */
	while (to < issued && !l->stages[to % SHARD_STAGES].req.tag &&
	       (to == from || (!l->stages[to % SHARD_STAGES].read_here &&
			       !l->stages[(to - 1) % SHARD_STAGES].read_here)))
		to++;
	if (to == from)
		return false;
	g->window_count = to - from;
	g->units_before[0] = 0;
	g->hash_ns = 0;
	for (uint32_t j = 0; j < g->window_count; j++) {
		const struct fetch_window *w = &windows[(from + j) % SHARD_STAGES];

		g->w[j] = (struct window_sums){ .e = e, .s = &l->stages[(from + j) % SHARD_STAGES],
						.reader = &l->files[w->record % 2].reader,
						.first = w->first, .bad = UINT32_MAX,
						.read_err = 0 };
		g->units_before[j + 1] = g->units_before[j] + w->count;
	}
	/*
	 * One page, the one the transfer thread waits for next: fetch_check
	 * verifies it there, waking no helper (a small record's restore pays
	 * no wake-up, as with a one-page pass); a zeroed batch is done.
	 */
	g->alone = g->units_before[g->window_count] == 1 && from == c->verified;
	if (g->alone) {
		g->batch = (struct shard_checksum_batch){ 0 };
	} else {
		shard_checksum_pool_submit_told(&e->verifies, &g->batch, verify_unit, g,
						g->units_before[g->window_count],
						fetch_group_done, &l->replies);
	}
	c->submitted = to;
	e->fetch_clock.verify_passes++;
	for (uint32_t j = c->verified; j < c->submitted;
	     j += c->groups[j % SHARD_STAGES].window_count)
		queued++;
	if (queued > e->fetch_clock.verify_groups_max)
		e->fetch_clock.verify_groups_max = queued;
	return true;
}

/* Queues every window whose read has landed, in groups (fetch_submit_group). */
static void fetch_submit_landed(struct shard_engine *e, struct lane *l,
				const struct fetch_window *windows, uint32_t issued,
				struct fetch_checks *c)
{
	while (fetch_submit_group(e, l, windows, issued, c))
		;
}

/*
 * Waits for the group that starts at window verified (helping with its
 * pages) and takes its result: its windows are verified, or the fetch
 * fails naming the first failing window's lowest page. While the helpers
 * finish its last pages it waits for disk replies instead, and queues
 * each window whose read lands meanwhile, so the helpers never idle with
 * landed pages that no one queued (the group's end pokes the wait).
 */
static int fetch_check(struct shard_engine *e, struct lane *l,
		       const struct fetch_window *windows, uint32_t issued,
		       struct fetch_checks *c, struct job_outcome *o)
{
	struct fetch_group *g = &c->groups[c->verified % SHARD_STAGES];
	char name[REC_FILE_NAME_BYTES];

	SEL_ASSERT(c->submitted > c->verified);
	if (g->alone)
		verify_unit(g, 0);
	while (!shard_checksum_pool_help(&e->verifies, &g->batch)) {
		struct rec_disk_request *done = rec_disk_wait_or_poke(&l->replies);

		if (!done)
			continue;
		disk_note(done, o);
		disk_reap(l, o);
		if (!o->result)
			fetch_submit_landed(e, l, windows, issued, c);
	}
	c->verified += g->window_count;
	e->fetch_clock.windows += g->window_count;
	e->fetch_clock.bytes_verified +=
		(uint64_t)g->units_before[g->window_count] * e->geometry.page_record_bytes;
	e->fetch_clock.hash_ns += __atomic_load_n(&g->hash_ns, __ATOMIC_RELAXED);
	for (uint32_t j = 0; j < g->window_count; j++) {
		const struct window_sums *w = &g->w[j];

		if (w->bad == UINT32_MAX)
			continue;
		rec_file_name(name, &w->reader->header.key);
		/*
		 * Read here and the file ended first: cut short since it was
		 * opened, a length check's failure naming the file first, as
		 * the disk thread's read reports it (R-READ-1, R-READ-4).
		 */
		if (w->read_err == -ENODATA)
			return outcome_fail(o, SEL_EBADHEADER, 0, "%s: the file ends before "
					    "stored page %u ends, before its header's length "
					    "(cut short while open)", name, w->first + w->bad);
		if (w->read_err)
			return outcome_fail(o, w->read_err, 0, "%s: reading stored page %u: %s",
					    name, w->first + w->bad, sel_strerror(w->read_err));
		return outcome_fail(o, SEL_ECHECKSUM, 0, "%s: page %" PRIu64 " (stored page "
				    "%u) fails its checksum", name,
				    (uint64_t)w->reader->header.first_page_index + w->first +
					    w->bad,
				    w->first + w->bad);
	}
	return 0;
}

/* Waits for every group still queued: no helper reads staging after. */
static void fetch_checks_drain(struct shard_engine *e, struct fetch_checks *c)
{
	while (c->verified < c->submitted) {
		struct fetch_group *g = &c->groups[c->verified % SHARD_STAGES];

		shard_checksum_pool_wait(&e->verifies, &g->batch);
		c->verified += g->window_count;
	}
}

/*
 * Whether every record of the chain is warm, as the index knows it (first
 * page and tail count), with the last one's row: the fetch then reads no
 * file. entries gets each record's entry.
 */
static bool fetch_is_warm(struct shard_engine *e, const struct shard_job *job,
			  uint32_t *entries)
{
	if (!e->warm.pool.base)
		return false;
	for (uint32_t r = 0; r < job->chain_count; r++) {
		const struct shard_chain_record *c = &job->chain[r];
		uint32_t at = shard_warm_find(&e->warm, &c->key);
		const struct shard_warm_entry *w;

		if (at == SHARD_WARM_NONE)
			return false;
		w = shard_warm_at(&e->warm, at);
		if (w->first_page_index != c->first_page_index ||
		    w->tail_page_count != c->tail_page_count ||
		    (r + 1 == job->chain_count && w->row_first == SHARD_WARM_NONE))
			return false;
		entries[r] = at;
	}
	return true;
}

/*
 * Issues the copies of the windows filter takes (every record's, or the
 * warm ones') from their records' warm slots (e->warm_entries) to the
 * destination ids, back to back, without waiting for any. Returns 0 or the
 * device's failure; what was issued may still run (the caller
 * synchronizes).
 */
static int warm_copies_issue(struct shard_engine *e, struct shard_job *job,
			     enum window_filter filter, struct job_outcome *o)
{
	struct lane *l = &e->lanes[LANE_RESTORE];
	struct fetch_window cursor = { .record = UINT32_MAX };
	uint32_t planes = e->geometry.page_plane_count, call = planes, n = 0;
	uint32_t call_max = e->window_pages * planes;
	uint32_t slots[SHARD_WINDOW_PAGES_MAX];
	/*
	 * Grouped slots: a run goes on past a window's end (nothing is read
	 * here, windows only pace the calls), up to a group's end, and the
	 * next record's pages may extend it too. With G = 1 no run does:
	 * each window's entries go at once.
	 */
	bool carry = e->warm.pool.group_slots > 1, more = true;
	struct copy_run r = { .pool = &e->warm.pool };
	int ret = 0;

	while (!ret && more) {
		more = next_window(e, job, filter, &cursor);
		if (more)
			shard_warm_page_slots(&e->warm, e->warm_entries[cursor.record],
					      cursor.first, cursor.count, slots);
		for (uint32_t i = 0; more && i < cursor.count; i++)
			n += run_add(e, &r, slots[i], job->page_ids[cursor.dest + i], l->copies + n);
		if ((!more || !carry) && r.pages) {
			n += run_copies(e, &r, l->copies + n);
			r.pages = 0;
		}
		/*
		 * The job's first call is one page's entries, each next one
		 * twice the last up to a window's: the copy engine starts on the
		 * first entries while the driver takes in the next call's, and
		 * is not left idle behind one call of thousands of entries.
		 * Entries wait for a full call while a run is open: fewer than
		 * a window's, so with the window's added they fit l->copies
		 * (lease_lane).
		 */
		while (!ret && n > 0 && (n >= call || !more || !carry)) {
			uint32_t count = n < call ? n : call;

			ret = shard_device_copy(e->device, SHARD_HOST_TO_DEVICE, l->copies, count);
			n -= count;
			memmove(l->copies, l->copies + count, n * sizeof(*l->copies));
			call = call < call_max / 2 ? call * 2 : call_max;
		}
		if (more && !ret)
			o->bytes += e->geometry.page_record_bytes * cursor.count;
	}
	return ret;
}

/*
 * A fetch of warm records whose copies were issued (warm_fetch_issue) and
 * not yet awaited: its job, its outcome and the device mark behind its
 * copies.
 */
struct warm_flight {
	struct shard_job *job;
	struct job_outcome o;
	uint32_t mark;
	bool marked; /* its mark was recorded: else a synchronize waits for it */
};

/*
 * Issues a fetch of warm records (docs/DESIGN.md section 6): straight from
 * their slots (e->warm_entries) to the destination ids, in batched copies
 * issued back to back, the last record's row behind the pages on the same
 * stream, and the flight's mark behind them all; no file, no staging, no
 * pass over the bytes. The slots are trusted as staging is between its
 * checksum pass and its copy: their checksums were computed when the bytes
 * landed and nothing writes a warm slot after its store. A failure is
 * noted; what was issued may still run (warm_fetch_finish waits for it).
 */
static void warm_fetch_issue(struct shard_engine *e, struct warm_flight *f)
{
	struct lane *l = &e->lanes[LANE_RESTORE];
	struct shard_job *job = f->job;
	uint32_t row[REC_DISK_BUFFERS_MAX];
	int ret;

	ret = warm_copies_issue(e, job, WINDOWS_ALL, &f->o);
	if (!ret) {
		shard_warm_row_slots(&e->warm, e->warm_entries[job->chain_count - 1], row);
		ret = shard_device_copy(e->device, SHARD_HOST_TO_DEVICE, l->copies,
					row_copies(e, l, true, row, job->state_slot));
	}
	if (ret)
		device_fail(&f->o, ret, "host to device");
	f->marked = shard_device_mark(e->device, f->mark) == 0;
}

/*
 * Waits for the flight's own copies (its mark), then reports it: a
 * failure of its copies fails it alone; copies issued after its mark may
 * still run.
 */
static void warm_fetch_finish(struct shard_engine *e, struct warm_flight *f)
{
	int ret = f->marked ? shard_device_wait_mark(e->device, f->mark) :
			      shard_device_synchronize(e->device);

	if (ret && !f->o.result)
		device_fail(&f->o, ret, "host to device");
	if (!f->o.result) {
		f->o.bytes += e->geometry.row_record_bytes;
		shard_warm_note_hit(&e->warm); /* a hit is a restore served */
	}
	complete_job(e, f->job, &f->o);
}

/*
 * The restore queue's head when it is a fetch of warm records whole (its
 * entries in e->warm_entries), taken; else NULL and the queue as it was.
 * Only the transfer thread takes jobs, and a queued job does not change,
 * so the head seen under the lock is still the head after it.
 */
static struct shard_job *take_warm_fetch(struct shard_engine *e)
{
	struct shard_job *job, *taken;

	pthread_mutex_lock(&e->lock);
	job = e->restores.head;
	pthread_mutex_unlock(&e->lock);
	if (!job || job->kind != SHARD_JOB_FETCH || !fetch_is_warm(e, job, e->warm_entries))
		return NULL;
	pthread_mutex_lock(&e->lock);
	taken = queue_pop(&e->restores);
	SEL_ASSERT(taken == job);
	if (e->stores_active)
		e->stats.store_yields++;
	pthread_mutex_unlock(&e->lock);
	return job;
}

/*
 * Runs the fetch of warm records job (e->warm_entries) and every fetch of
 * warm records queued right behind it, pipelined (docs/DESIGN.md section
 * 6): once a fetch's copies are issued, the next one's are issued too
 * before the first is awaited, so the copy engine runs the second's while
 * the transfer thread wakes, reports the first and takes the third. Each
 * is awaited by its own mark and reported only once its own copies
 * finished; at most two are in flight. Any other job at the queue's head
 * (a fetch not warm whole, a warm drop, a pool claim), an empty queue, a
 * failed issue or mark, or a device whose copies finish as they are
 * issued drains the pipeline first, so nothing that frees warm slots runs
 * while a copy reads them.
 */
static void run_fetches_warm(struct shard_engine *e, struct shard_job *job)
{
	struct warm_flight flights[2] = { { .job = job, .mark = 0 }, { .mark = 1 } };
	bool pipelined = !e->device->ops->copies_synchronous;
	uint64_t since = sel_monotonic_ns(), now;
	uint32_t cur = 0;

	warm_fetch_issue(e, &flights[0]);
	for (;;) {
		struct warm_flight *f = &flights[cur], *n = &flights[cur ^ 1];
		struct shard_job *next = NULL;

		if (pipelined && !f->o.result && f->marked)
			next = take_warm_fetch(e);
		if (next) {
			*n = (struct warm_flight){ .job = next, .mark = cur ^ 1 };
			warm_fetch_issue(e, n);
			e->fetch_clock.warm_pipelined++;
		}
		warm_fetch_finish(e, f);
		/* The transfer thread's time, each moment counted once. */
		now = sel_monotonic_ns();
		e->fetch_clock.copy_ns += now - since;
		e->fetch_clock.run_ns += now - since;
		since = now;
		if (!next)
			return;
		cur ^= 1;
	}
}

/*
 * Plans a fetch that is not warm whole (docs/DESIGN.md section 6): each
 * record whose pages are warm on this rank, as the index knows it, is
 * copied from its slots (TIER_WARM; the last one's row too where it is
 * warm); with read_through, each other record the fetch reads whole (none
 * of its pages skipped; pages, or the last record's row) takes warm slots
 * and is read into them (TIER_READ), where enough are free; the rest go
 * through staging as without a warm tier. Returns whether any record is
 * warm.
 */
static bool fetch_plan(struct shard_engine *e, const struct shard_job *job)
{
	uint64_t before = 0; /* pages of the records before r */
	bool any = false;

	e->fetch_row_warm = false;
	for (uint32_t r = 0; r < job->chain_count; r++) {
		const struct shard_chain_record *c = &job->chain[r];
		bool last = r + 1 == job->chain_count;
		uint32_t at = e->warm.pool.base ? shard_warm_find(&e->warm, &c->key) :
						  SHARD_WARM_NONE;

		e->fetch_tier[r] = TIER_FILE;
		e->warm_entries[r] = SHARD_WARM_NONE;
		if (at != SHARD_WARM_NONE) {
			const struct shard_warm_entry *w = shard_warm_at(&e->warm, at);

			if (w->first_page_index == c->first_page_index &&
			    w->tail_page_count == c->tail_page_count) {
				e->fetch_tier[r] = TIER_WARM;
				e->warm_entries[r] = at;
				if (last && w->row_first != SHARD_WARM_NONE)
					e->fetch_row_warm = true;
				any = any || c->tail_page_count > 0 || e->fetch_row_warm;
			}
		} else if (job->read_through && e->warm.pool.base && before >= job->skip_pages &&
			   (c->tail_page_count > 0 || last)) {
			at = shard_warm_reserve_read(&e->warm, &c->key, c->first_page_index,
						     c->tail_page_count, last);
			if (at != SHARD_WARM_NONE) {
				e->fetch_tier[r] = TIER_READ;
				e->warm_entries[r] = at;
				if (last)
					shard_warm_row_slots(&e->warm, at, e->fetch_row_slots);
			}
		}
		before += c->tail_page_count;
	}
	return any;
}

/*
 * Starts the copies of the plan's warm records' pages from their slots to
 * the device, back to back; the fetch's first wait for a copy (or its
 * last) synchronizes them. Returns 0 or the device's failure, after
 * draining what was issued.
 */
static int fetch_warm_copies(struct shard_engine *e, struct shard_job *job,
			     struct job_outcome *o)
{
	int ret = warm_copies_issue(e, job, WINDOWS_WARM, o);

	if (ret) {
		shard_device_synchronize(e->device);
		return device_fail(o, ret, "host to device");
	}
	return 0;
}

/* A fetch's read-throughs stay warm if it succeeded; else their slots go. */
static void fetch_settle_reads(struct shard_engine *e, const struct shard_job *job,
			       const struct job_outcome *o)
{
	for (uint32_t r = 0; r < job->chain_count; r++) {
		if (e->fetch_tier[r] != TIER_READ)
			continue;
		if (o->result)
			shard_warm_abort_read(&e->warm, e->warm_entries[r]);
		else
			shard_warm_commit_read(&e->warm, e->warm_entries[r]);
		e->fetch_tier[r] = TIER_FILE;
	}
}

/* A fetch not warm whole; one warm whole goes to run_fetches_warm (run_job). */
static void run_fetch(struct shard_engine *e, struct shard_job *job,
		      struct job_outcome *o)
{
	struct lane *l = &e->lanes[LANE_RESTORE];
	bool row_sent = false, pending = false;
	int copying = -1; /* the stage whose copy to the device may still run */
	struct fetch_window windows[SHARD_STAGES], cursor = { .record = UINT32_MAX };
	struct fetch_checks checks, *c = &checks;
	uint64_t stride = e->geometry.page_record_bytes;
	uint32_t issued = 0, done = 0, ahead;
	bool more = true, partial, into_warm, copies_unawaited = false;
	uint64_t start = sel_monotonic_ns(), end, row_at, close_at;

	__atomic_store_n(&e->fetch_clock.unit_first, UINT64_MAX, __ATOMIC_RELAXED);
	__atomic_store_n(&e->fetch_clock.unit_last, 0, __ATOMIC_RELAXED);
	partial = fetch_plan(e, job);
	if (partial)
		fetch_warm_copies(e, job, o);
	ahead = (uint32_t)(e->read_ahead_bytes / (stride * e->window_pages));
	ahead = ahead < 2 ? 2 : ahead > SHARD_STAGES ? SHARD_STAGES : ahead;
	c->verified = 0;
	c->submitted = 0;
	/*
	 * Keep up to STAGES windows reading while those whose reads landed are
	 * verified on the checksum pool, as they land, and the oldest verified
	 * one is copied to the device; a window waits (pending) while its file
	 * still serves windows not yet verified, and a stage is read into again
	 * only once its copy is done.
	 */
	while (!o->result && (done < issued || more)) {
		while (!o->result && more && issued - done < ahead) {
			if (!pending) {
				more = next_window(e, job, WINDOWS_FILES, &cursor);
				if (!more)
					break;
				pending = true;
			}
			if (file_in_use(windows, done, issued, cursor.record))
				break;
			if ((int)(issued % SHARD_STAGES) == copying && copy_finish(e, &copying, o))
				break;
			windows[issued % SHARD_STAGES] = cursor;
			fetch_issue(e, l, job, &l->stages[issued % SHARD_STAGES], &cursor, o);
			fetch_row_early(e, l, job, &row_sent, o);
			issued++;
			pending = false;
		}
		if (more && cursor.record != UINT32_MAX)
			fetch_open_ahead(e, l, job, windows, done, issued, &cursor, o);
		if (o->result || done == issued)
			break;
		struct stage *s = &l->stages[done % SHARD_STAGES];
		const struct fetch_window *w = &windows[done % SHARD_STAGES];
		uint64_t t = sel_monotonic_ns(), t2;

		/* Every window whose read landed is queued for verification. */
		disk_reap(l, o);
		if (o->result)
			break;
		fetch_submit_landed(e, l, windows, issued, c);
		if (c->verified == done) {
			/* Verified first; the copy of the window before ran meanwhile. */
			if (c->submitted == done) {
				disk_await(l, &s->req, o);
				disk_reap(l, o);
				if (o->result)
					break;
				fetch_submit_landed(e, l, windows, issued, c);
			}
			t2 = sel_monotonic_ns();
			e->fetch_clock.wait_ns += t2 - t;
			if (fetch_check(e, l, windows, issued, c, o))
				break;
			t = sel_monotonic_ns();
			e->fetch_clock.verify_ns += t - t2;
			/* What landed meanwhile is verified while this window copies. */
			disk_reap(l, o);
			if (o->result)
				break;
			fetch_submit_landed(e, l, windows, issued, c);
		}
		/*
		 * A window read through into warm slots is copied from those
		 * slots, not from its stage, and nothing writes them until the
		 * fetch ends: its copy is not waited for here (the stage may be
		 * read into again while it runs), and the fetch waits for all
		 * of them once, before it settles or reports anything.
		 */
		into_warm = e->fetch_tier[w->record] == TIER_READ;
		if ((!into_warm && copy_finish(e, &copying, o)) ||
		    copy_start(e, l, s, job->page_ids + w->dest, w->count, o))
			break;
		e->fetch_clock.copy_ns += sel_monotonic_ns() - t;
		if (into_warm)
			copies_unawaited = true;
		else
			copying = (int)(done % SHARD_STAGES);
		o->bytes += stride * w->count;
		done++;
	}
	/* After a failure, no helper may still read a stage or a file's table. */
	fetch_checks_drain(e, c);
	end = sel_monotonic_ns();
	/* Also after a failure: staging is scrubbed only once no copy reads it. */
	copy_finish(e, &copying, o);
	/*
	 * The warm records' copies and the read-through windows', where no
	 * window's wait synchronized them.
	 */
	if (partial || copies_unawaited) {
		int drained = shard_device_synchronize(e->device);

		if (drained && !o->result)
			device_fail(o, drained, "host to device");
	}
	row_at = sel_monotonic_ns();
	e->fetch_clock.end_copy_ns += row_at - end;
	if (!o->result && e->fetch_row_warm) {
		uint32_t last = job->chain_count - 1;

		shard_warm_row_slots(&e->warm, e->warm_entries[last], e->fetch_row_slots);
		if (!copy_row(e, l, true, e->fetch_row_slots, job->state_slot,
			      SHARD_HOST_TO_DEVICE, o))
			o->bytes += e->geometry.row_record_bytes;
	} else if (!o->result) {
		bool read = e->fetch_tier[job->chain_count - 1] == TIER_READ;

		fetch_file(e, l, job, job->chain_count - 1, o);
		fetch_row_early(e, l, job, &row_sent, o);
		disk_await(l, &l->row_req, o);
		if (!o->result && !copy_row(e, l, read,
					    read ? e->fetch_row_slots : l->row_slots,
					    job->state_slot, SHARD_HOST_TO_DEVICE, o))
			o->bytes += e->geometry.row_record_bytes;
	}
	close_at = sel_monotonic_ns();
	e->fetch_clock.end_row_ns += close_at - row_at;
	disk_await_all(l, o);
	fetch_close(e, l, 0, o);
	fetch_close(e, l, 1, o);
	e->fetch_clock.end_close_ns += sel_monotonic_ns() - close_at;
	if (o->result)
		stage_scrub(e, l);
	/* Every read and copy of the fetch is done: no slot is in use. */
	fetch_settle_reads(e, job, o);
	if (partial && !o->result)
		shard_warm_note_partial(&e->warm); /* a partial hit is a restore served */
	close_at = sel_monotonic_ns();
	e->fetch_clock.end_ns += close_at - end;
	e->fetch_clock.run_ns += close_at - start;
	{
		/* Every group is done (fetch_checks_drain): no unit runs now. */
		uint64_t first = __atomic_load_n(&e->fetch_clock.unit_first, __ATOMIC_RELAXED);
		uint64_t last = __atomic_load_n(&e->fetch_clock.unit_last, __ATOMIC_RELAXED);

		if (first != UINT64_MAX && first >= start && last >= first && close_at >= last) {
			e->fetch_clock.lead_ns += first - start;
			e->fetch_clock.span_ns += last - first;
			e->fetch_clock.tail_ns += close_at - last;
		}
	}
}

/* This rank's record file of the key, sent as its share of a pool put. */
static void run_pool_put(struct shard_engine *e, struct shard_job *job, struct job_outcome *o)
{
	char name[REC_FILE_NAME_BYTES], why[200] = "";
	uint8_t head[REC_HEADER_BYTES];
	struct rec_header h;
	struct stat st;
	int fd, ret;

	if (!e->pool_on) {
		outcome_fail(o, -ENOTSUP, 0, "rank %u has no pool connection", e->geometry.rank);
		return;
	}
	rec_file_name(name, &job->key);
	fd = openat(rec_dir_fd(e->dir), name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		outcome_fail(o, -errno, 0, "%s: %s", name, strerror(errno));
		return;
	}
	/* The manager checks every byte; a file of another length or key is not sent. */
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != job->share_bytes)
		ret = outcome_fail(o, SEL_EMISMATCH, 0, "%s is %lld bytes, the put's share %llu",
				   name, (long long)st.st_size,
				   (unsigned long long)job->share_bytes);
	else if (pread(fd, head, sizeof(head), 0) != (ssize_t)sizeof(head) ||
		 rec_header_decode(head, &h, why, sizeof(why)) != 0 ||
		 !rec_key_equal(&h.key, &job->key))
		ret = outcome_fail(o, SEL_EBADHEADER, 0, "%s: %s", name,
				   why[0] ? why : "its header names another record");
	else
		ret = e->pool_conn.put_share(e->pool_conn.ctx, job->pool_id, fd, job->share_bytes,
					     why, sizeof(why));
	close(fd);
	if (ret && !o->result)
		outcome_fail(o, ret, 0, "pool put of %s: %s", name, why[0] ? why : sel_strerror(ret));
	if (!ret)
		o->bytes = job->share_bytes;
}

/* Copies a staged export window's planes (pages [first, first + count)) into the image. */
static void export_unstage(struct shard_engine *e, const struct stage *s, uint8_t *image,
			   const struct rec_layout *layout, uint32_t first, uint32_t count)
{
	const struct rec_geometry *g = &e->geometry;

	for (uint32_t i = 0; i < count; i++) {
		uint8_t *page = image + layout->page_offset + layout->page_stride * (first + i);

		for (uint32_t p = 0; p < g->page_plane_count; p++)
			memcpy(page + e->pool.plane_offset[p], stage_plane(e, s, i, p),
			       g->page_planes[p].unit_bytes);
	}
}

/*
 * An export's pages and row, device to host through the background lane's
 * staging, which is registered with the device at open (register_pool),
 * so the DMA runs at pinned speed rather than through pageable memory;
 * each window's planes are then copied into the image while the next
 * window's DMA runs (two stages, marks 0 and 1). Exports run between
 * store batches (run_stores returns with no store active), so the lane's
 * stages and row slots are free. Returns 0 or the device's failure, every
 * copy issued having finished either way.
 */
static int export_copy(struct shard_engine *e, struct shard_job *job, uint8_t *image,
		       const struct rec_layout *layout)
{
	struct lane *l = &e->lanes[LANE_BACKGROUND];
	uint32_t pages = job->header.tail_page_count, width = e->window_pages;
	uint32_t windows = (pages + width - 1) / width, count_before = 0;
	uint64_t unit = e->geometry.row_plane.unit_bytes, piece = e->pool.slot_bytes;
	int ret, done;

	SEL_ASSERT(l->stage_count >= 2 && SHARD_DEVICE_MARKS >= 2);
	/* Copies issued before (a store's) have drained: the device is this job's. */
	ret = shard_device_synchronize(e->device);
	for (uint32_t k = 0; !ret && k <= windows; k++) {
		uint32_t first = k * width, count = k < windows && pages - first < width ?
							    pages - first : width;

		if (k < windows) {
			struct stage *s = &l->stages[k % 2];

			s->warm = false;
			s->cur = s->slots;
			ret = shard_device_copy(e->device, SHARD_DEVICE_TO_HOST, l->copies,
						window_copies(e, l, s, job->page_ids + first,
							      count));
			if (!ret)
				ret = shard_device_mark(e->device, k % 2);
		}
		if (!ret && k > 0)
			ret = shard_device_wait_mark(e->device, (k - 1) % 2);
		if (!ret && k > 0)
			export_unstage(e, &l->stages[(k - 1) % 2], image, layout,
				       (k - 1) * width, count_before);
		count_before = count;
	}
	if (!ret)
		ret = copy_drained(e, l, SHARD_DEVICE_TO_HOST,
				   row_copies(e, l, false, l->row_slots, job->state_slot));
	for (uint32_t k = 0; !ret && (uint64_t)k * piece < unit; k++) {
		uint64_t left = unit - (uint64_t)k * piece;

		memcpy(image + layout->row_offset + piece * k,
		       shard_slab_page(&e->pool, l->row_slots[k]), left < piece ? left : piece);
	}
	done = shard_device_synchronize(e->device);
	return ret ? ret : done;
}

/*
 * This rank's share of a GPU checkpoint's export (R-POOL-78): the record
 * image built in an anonymous file (the header, the checksums, the pages
 * and row copied from the device through staging, export_copy), then sent
 * as any put's share.
 */
static void run_pool_export(struct shard_engine *e, struct shard_job *job,
			    struct job_outcome *o)
{
	const struct rec_geometry *g = &e->geometry;
	struct rec_header h = job->header;
	struct rec_layout layout;
	uint64_t seed = rec_checksum_seed(&h.key);
	uint32_t pages = h.tail_page_count;
	char why[200] = "";
	uint8_t *image;
	int fd, ret;

	if (!e->pool_on) {
		outcome_fail(o, -ENOTSUP, 0, "rank %u has no pool connection", g->rank);
		return;
	}
	ret = SEL_FAILPOINT(SEL_FP_POOL_EXPORT_COPY);
	if (ret < 0) {
		outcome_fail(o, ret, 0, "failpoint pool.export_copy: %s", sel_strerror(ret));
		return;
	}
	ret = rec_layout_from_header(&h, &layout);
	if (ret) {
		outcome_fail(o, ret, 0, "the export's header has no layout");
		return;
	}
	fd = memfd_create("selene-export", MFD_CLOEXEC);
	if (fd < 0) {
		outcome_fail(o, -errno, 0, "memfd_create: %s", strerror(errno));
		return;
	}
	if (ftruncate(fd, (off_t)layout.file_length) != 0) {
		outcome_fail(o, -errno, 0, "a %" PRIu64 "-byte export image: %s",
			     layout.file_length, strerror(errno));
		goto out_close_fd;
	}
	image = mmap(NULL, layout.file_length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (image == MAP_FAILED) {
		outcome_fail(o, -errno, 0, "mapping the export image: %s", strerror(errno));
		goto out_close_fd;
	}
	ret = export_copy(e, job, image, &layout);
	if (ret) {
		device_fail(o, ret, "device to host (export)");
		goto out_unmap;
	}
	for (uint32_t i = 0; i < pages; i++)
		sel_put_le64(image + layout.checksum_offset + 8ull * i,
			     rec_page_checksum(image + layout.page_offset + layout.page_stride * i,
					       layout.page_stride, seed, i));
	h.row_checksum = rec_row_checksum(image + layout.row_offset, layout.row_length, seed);
	rec_header_encode(&h, image);
	ret = e->pool_conn.put_share(e->pool_conn.ctx, job->pool_id, fd, layout.file_length,
				     why, sizeof(why));
	if (ret)
		outcome_fail(o, ret, 0, "pool export of %" PRIu64 " tokens: %s", h.key.consumed,
			     why[0] ? why : sel_strerror(ret));
	else
		o->bytes = layout.file_length;
out_unmap:
	munmap(image, layout.file_length);
out_close_fd:
	close(fd);
}

/* This rank's share of a pool claim into the job's page ids and state slot. */
static void run_pool_claim(struct shard_engine *e, struct shard_job *job, struct job_outcome *o)
{
	uint64_t bytes = 0;
	char why[200] = "";
	bool begun;
	int ret;

	if (!e->pool_on) {
		outcome_fail(o, -ENOTSUP, 0, "rank %u has no pool connection", e->geometry.rank);
		return;
	}
	for (uint32_t i = 0; i < job->chain_count; i++)
		e->pool_chain[i] = (struct shard_pool_record){
			.key = job->chain[i].key, .first_page_index = job->chain[i].first_page_index,
			.tail_page_count = job->chain[i].tail_page_count,
			.row = (job->rows[i / 64] >> (i % 64)) & 1 };
	ret = shard_pool_share_begin(&e->pool_share, e->pool_chain, job->chain_count,
				     job->skip_pages, job->page_ids, job->page_id_count,
				     job->state_slot, why, sizeof(why));
	begun = ret == 0;
	if (!ret && job->early) {
		/* the session rank before the grant: the lookup's places, then the grant's */
		memcpy(e->pool_early, job->early, job->chain_count * sizeof(*e->pool_early));
		ret = e->pool_conn.claim_early
			      ? e->pool_conn.claim_early(e->pool_conn.ctx, job->pool_id,
							 e->pool_early, &e->pool_share, why,
							 sizeof(why))
			      : sel_fail(-ENOTSUP, why, sizeof(why), "rank %u's pool connection "
					 "cannot claim before the grant", e->geometry.rank);
	} else if (!ret) {
		ret = e->pool_conn.claim_share(e->pool_conn.ctx, job->pool_id, e->pool_chain,
					       job->chain_count, job->skip_pages, &e->pool_share,
					       why, sizeof(why));
	}
	if (begun) {
		/* finish always: it releases the claim; a failure before it says why */
		if (!ret)
			ret = shard_pool_share_finish(&e->pool_share, &bytes, why, sizeof(why));
		else
			shard_pool_share_finish(&e->pool_share, &bytes, NULL, 0);
	}
	if (ret)
		outcome_fail(o, ret, 0, "pool claim: %s", why[0] ? why : sel_strerror(ret));
	else
		o->bytes = bytes;
}

static void run_job(struct shard_engine *e, struct shard_job *job)
{
	struct lane *l = &e->lanes[LANE_BACKGROUND];
	struct job_outcome o = { 0 };

	switch (job->kind) {
	case SHARD_JOB_STORE:
		run_stores(e, job);
		return;
	case SHARD_JOB_FETCH:
		if (fetch_is_warm(e, job, e->warm_entries)) {
			run_fetches_warm(e, job); /* it reports them */
			return;
		}
		run_fetch(e, job, &o);
		break;
	case SHARD_JOB_TRUNCATE:
		/*
		 * Background jobs run only after every store before them has
		 * completed (run_stores), writes from warm included.
		 */
		SEL_ASSERT(!warm_writer(e, &job->key));
		shard_warm_drop(&e->warm, &job->key, true);
		disk_control(e, l, &l->files[0], REC_DISK_TRUNCATE, &job->key, &o);
		break;
	case SHARD_JOB_UNLINK:
		/* No copy reads warm slots here: fetches run whole on this thread. */
		SEL_ASSERT(!warm_writer(e, &job->key));
		shard_warm_drop(&e->warm, &job->key, false);
		disk_control(e, l, &l->files[0], REC_DISK_UNLINK, &job->key, &o);
		break;
	case SHARD_JOB_WARM_DROP:
		run_warm_drop(e, job, &o);
		break;
	case SHARD_JOB_NOOP:
		break;
	case SHARD_JOB_POOL_PUT:
		run_pool_put(e, job, &o);
		break;
	case SHARD_JOB_POOL_CLAIM:
		run_pool_claim(e, job, &o);
		break;
	case SHARD_JOB_POOL_EXPORT:
		run_pool_export(e, job, &o);
		break;
	}
	complete_job(e, job, &o);
}

/*
 * Runs every queued fetch to its completion on the restore lane, while the
 * store that calls this keeps its own writes in flight.
 */
static void yield_to_restores(struct shard_engine *e)
{
	for (;;) {
		struct shard_job *job;

		pthread_mutex_lock(&e->lock);
		job = queue_pop(&e->restores);
		if (job)
			e->stats.store_yields++;
		pthread_mutex_unlock(&e->lock);
		if (!job)
			return;
		/* The fetch's copies and synchronizations are its own. */
		store_copy_settle(e);
		run_job(e, job);
	}
}

/*
 * Runs the oldest closing handed to shard_engine_retire, if one waits: the
 * lock is held on entry and, when it ran one (true), released on return.
 */
static bool retire_next(struct shard_engine *e)
{
	void (*close)(void *ctx);
	void *ctx;

	if (!e->retire_count)
		return false;
	close = e->retires[0].close;
	ctx = e->retires[0].ctx;
	e->retire_count--;
	memmove(&e->retires[0], &e->retires[1], e->retire_count * sizeof(e->retires[0]));
	e->retire_running++;
	pthread_mutex_unlock(&e->lock);
	close(ctx);
	pthread_mutex_lock(&e->lock);
	e->retire_running--;
	pthread_mutex_unlock(&e->lock);
	return true;
}

int shard_engine_retire(struct shard_engine *e, void (*close)(void *ctx), void *ctx)
{
	int ret = 0;

	pthread_mutex_lock(&e->lock);
	if (e->stopping || !e->thread_started)
		ret = SEL_ESTOPPED;
	else if (e->retire_count == SHARD_RETIRES_MAX)
		ret = SEL_EQUEUEFULL;
	if (!ret) {
		e->retires[e->retire_count].close = close;
		e->retires[e->retire_count].ctx = ctx;
		e->retire_count++;
		pthread_cond_signal(&e->work_ready);
	}
	pthread_mutex_unlock(&e->lock);
	return ret;
}

uint32_t shard_engine_retiring(struct shard_engine *e)
{
	uint32_t n;

	pthread_mutex_lock(&e->lock);
	n = e->retire_count + e->retire_running;
	pthread_mutex_unlock(&e->lock);
	return n;
}

static void *transfer_main(void *arg)
{
	struct shard_engine *e = arg;
	int ret = shard_device_bind(e->device);

	sel_thread_lower_priority(1, "transfer"); /* below the model (seed 2.12) */
	if (ret)
		sel_error("transfer thread: cannot bind the device: %s", sel_strerror(ret));
	for (;;) {
		struct shard_job *job;

		pthread_mutex_lock(&e->lock);
		while (!e->restores.head && !e->background.head && !e->retire_count &&
		       !e->stopping)
			pthread_cond_wait(&e->work_ready, &e->lock);
		if (retire_next(e))
			continue; /* it took and released the lock */
		/* A fetch goes before every queued background job. */
		job = queue_pop(&e->restores);
		if (!job)
			job = queue_pop(&e->background);
		pthread_mutex_unlock(&e->lock);
		if (!job)
			break;
		run_job(e, job);
	}
	return NULL;
}

/* Takes a free job, or fails with SEL_EQUEUEFULL; the lock is held. */
static struct shard_job *job_take(struct shard_engine *e, int *err)
{
	struct shard_job *job;

	if (e->stopping) {
		*err = SEL_ESTOPPED;
		return NULL;
	}
	if (e->unpolled == e->jobs_max || !e->free_jobs) {
		e->stats.queue_full++;
		*err = SEL_EQUEUEFULL;
		return NULL;
	}
	job = e->free_jobs;
	e->free_jobs = job->next;
	job->next = NULL;
	return job;
}

/* Restores go first: fetches, warm drops (see job_submit_from) and pool claims. */
static bool restore_lane(enum shard_job_kind kind)
{
	return kind == SHARD_JOB_FETCH || kind == SHARD_JOB_WARM_DROP ||
	       kind == SHARD_JOB_POOL_CLAIM;
}

/* fill's chain is pool_chain's (a pool claim's) when given, else fill->chain. */
static int job_submit_from(struct shard_engine *e, struct shard_job *fill,
			   const struct shard_pool_record *pool_chain)
{
	struct shard_job *job;
	uint32_t *ids;
	struct shard_chain_record *chain;
	int err = 0;

	pthread_mutex_lock(&e->lock);
	job = job_take(e, &err);
	if (!job) {
		pthread_mutex_unlock(&e->lock);
		return err;
	}
	ids = job->page_ids;
	chain = job->chain;
	*job = *fill;
	job->page_ids = ids;
	job->chain = chain;
	if (fill->page_id_count && fill->page_ids)
		memcpy(ids, fill->page_ids, fill->page_id_count * sizeof(uint32_t));
	for (uint32_t i = 0; pool_chain && i < fill->chain_count; i++)
		chain[i] = (struct shard_chain_record){ pool_chain[i].key,
							pool_chain[i].first_page_index,
							pool_chain[i].tail_page_count };
	if (fill->chain_count && !pool_chain)
		memcpy(chain, fill->chain, fill->chain_count * sizeof(*chain));
	/*
	 * A warm drop goes with the fetches: rank zero drops records to make
	 * room for a fetch's read-through just before it, and a fetch is taken
	 * before every queued background job (the store it makes room for runs
	 * after it either way).
	 */
	queue_push(restore_lane(job->kind) ? &e->restores : &e->background, job);
	e->unpolled++;
	pthread_cond_signal(&e->work_ready);
	/*
	 * A store waiting for the disk runs it now (restores first). Under the
	 * lock: once it is released the fetch may complete and the engine close.
	 */
	if (restore_lane(job->kind))
		rec_disk_replies_poke(&e->lanes[LANE_BACKGROUND].replies);
	pthread_mutex_unlock(&e->lock);
	return 0;
}

static int job_submit(struct shard_engine *e, struct shard_job *fill)
{
	return job_submit_from(e, fill, NULL);
}

static bool page_ids_fit(const struct shard_engine *e, const uint32_t *ids,
			 uint32_t count)
{
	for (uint32_t i = 0; i < count; i++)
		if (ids[i] >= e->geometry.page_count)
			return false;
	return true;
}

int shard_engine_store(struct shard_engine *e, uint64_t job_id,
		       const struct shard_store_job *store)
{
	const struct rec_header *h = store->header;
	struct shard_job fill = {
		.id = job_id, .kind = SHARD_JOB_STORE, .header = *h,
		.page_ids = (uint32_t *)store->page_ids,
		.page_id_count = h->tail_page_count, .state_slot = store->state_slot,
		.warm = store->warm,
	};

	if (h->tail_page_count > e->geometry.page_count ||
	    store->state_slot >= e->geometry.row_count || store->warm > SHARD_STORE_WARM_WRITE ||
	    (store->warm != SHARD_STORE_WARM_WRITE &&
	     !page_ids_fit(e, store->page_ids, h->tail_page_count)))
		return -EINVAL;
	if (!rec_digest_equal(&h->fingerprint, &e->geometry.fingerprint) ||
	    h->page_stride != e->geometry.page_record_bytes ||
	    h->row_length != e->geometry.row_record_bytes)
		return SEL_EMISMATCH;
	return job_submit(e, &fill);
}

int shard_engine_fetch(struct shard_engine *e, uint64_t job_id,
		       const struct shard_fetch_job *fetch)
{
	struct shard_job fill = {
		.id = job_id, .kind = SHARD_JOB_FETCH,
		.chain = (struct shard_chain_record *)fetch->chain,
		.chain_count = fetch->chain_count, .skip_pages = fetch->skip_pages,
		.page_ids = (uint32_t *)fetch->page_ids, .state_slot = fetch->state_slot,
		.read_through = fetch->read_through,
	};
	uint64_t pages = 0;

	if (fetch->chain_count == 0 || fetch->chain_count > SHARD_CHAIN_RECORDS_MAX ||
	    fetch->state_slot >= e->geometry.row_count)
		return -EINVAL;
	for (uint32_t i = 0; i < fetch->chain_count; i++) {
		const struct shard_chain_record *r = &fetch->chain[i];

		/* A chain is contiguous: each record starts where the last ended. */
		if (i > 0 && r->first_page_index != fetch->chain[i - 1].first_page_index +
							    fetch->chain[i - 1].tail_page_count)
			return SEL_EMISMATCH;
		pages += r->tail_page_count;
	}
	if (fetch->skip_pages > pages || pages - fetch->skip_pages > e->geometry.page_count)
		return -EINVAL;
	fill.page_id_count = (uint32_t)(pages - fetch->skip_pages);
	if (!page_ids_fit(e, fetch->page_ids, fill.page_id_count))
		return -EINVAL;
	return job_submit(e, &fill);
}

int shard_engine_truncate(struct shard_engine *e, uint64_t job_id,
			  const struct rec_key *key)
{
	struct shard_job fill = { .id = job_id, .kind = SHARD_JOB_TRUNCATE, .key = *key };

	return job_submit(e, &fill);
}

int shard_engine_unlink(struct shard_engine *e, uint64_t job_id,
			const struct rec_key *key)
{
	struct shard_job fill = { .id = job_id, .kind = SHARD_JOB_UNLINK, .key = *key };

	return job_submit(e, &fill);
}

int shard_engine_warm_drop(struct shard_engine *e, uint64_t job_id,
			   const struct rec_key *key)
{
	struct shard_job fill = { .id = job_id, .kind = SHARD_JOB_WARM_DROP, .key = *key };

	return job_submit(e, &fill);
}

int shard_engine_set_pool(struct shard_engine *e, const struct shard_pool_conn *conn,
			  const struct rec_identity *namespace_id)
{
	int ret;

	if (!conn) {
		e->pool_on = false;
		return 0;
	}
	if (!e->pool_chain) {
		e->pool_chain = calloc(SHARD_CHAIN_RECORDS_MAX, sizeof(*e->pool_chain));
		e->pool_early = calloc(SHARD_CHAIN_RECORDS_MAX, sizeof(*e->pool_early));
		ret = e->pool_chain && e->pool_early ? 0 : -ENOMEM;
		if (!ret)
			ret = shard_pool_share_init(&e->pool_share, &e->geometry, namespace_id,
						    &e->planes, e->device);
		if (ret) {
			free(e->pool_chain);
			free(e->pool_early);
			e->pool_chain = NULL;
			e->pool_early = NULL;
			return ret;
		}
	}
	e->pool_conn = *conn;
	e->pool_on = true;
	return 0;
}

int shard_engine_pool_put(struct shard_engine *e, uint64_t job_id, const struct rec_key *key,
			  uint64_t put_id, uint64_t share_bytes)
{
	struct shard_job fill = { .id = job_id, .kind = SHARD_JOB_POOL_PUT, .key = *key,
				  .pool_id = put_id, .share_bytes = share_bytes };

	return job_submit(e, &fill);
}

int shard_engine_pool_export(struct shard_engine *e, uint64_t job_id,
			     const struct shard_pool_export_job *export)
{
	const struct rec_header *h = export->header;
	struct shard_job fill = {
		.id = job_id, .kind = SHARD_JOB_POOL_EXPORT, .header = *h, .key = h->key,
		.page_ids = (uint32_t *)export->page_ids, .page_id_count = h->tail_page_count,
		.state_slot = export->state_slot, .pool_id = export->put_id,
	};

	if (h->parent.consumed != 0 || h->first_page_index != 0 ||
	    h->tail_page_count > e->geometry.page_count ||
	    export->state_slot >= e->geometry.row_count ||
	    !page_ids_fit(e, export->page_ids, h->tail_page_count))
		return -EINVAL;
	if (!rec_digest_equal(&h->fingerprint, &e->geometry.fingerprint) ||
	    h->page_stride != e->geometry.page_record_bytes ||
	    h->row_length != e->geometry.row_record_bytes)
		return SEL_EMISMATCH;
	fill.share_bytes = rec_geometry_file_bytes(&e->geometry, h->tail_page_count, true);
	if (fill.share_bytes > POOL_GPU_EXPORT_SHARE_BYTES_MAX)
		return SEL_ETOOBIG;
	return job_submit(e, &fill);
}

int shard_engine_pool_claim(struct shard_engine *e, uint64_t job_id,
			    const struct shard_pool_claim_job *claim)
{
	struct shard_job fill = {
		.id = job_id, .kind = SHARD_JOB_POOL_CLAIM, .pool_id = claim->claim_id,
		.chain_count = claim->chain_count, .skip_pages = claim->skip_pages,
		.page_ids = (uint32_t *)claim->page_ids, .state_slot = claim->state_slot,
		.early = claim->early,
	};
	uint64_t pages = 0;

	if (claim->chain_count == 0 || claim->chain_count > SHARD_CHAIN_RECORDS_MAX ||
	    claim->state_slot >= e->geometry.row_count)
		return -EINVAL;
	for (uint32_t i = 0; i < claim->chain_count; i++) {
		if (i > 0 && claim->chain[i].first_page_index !=
				     claim->chain[i - 1].first_page_index +
					     claim->chain[i - 1].tail_page_count)
			return SEL_EMISMATCH;
		pages += claim->chain[i].tail_page_count;
		if (claim->chain[i].row)
			fill.rows[i / 64] |= 1ull << (i % 64);
	}
	if (claim->skip_pages > pages || pages - claim->skip_pages > e->geometry.page_count)
		return -EINVAL;
	fill.page_id_count = (uint32_t)(pages - claim->skip_pages);
	if (!page_ids_fit(e, claim->page_ids, fill.page_id_count))
		return -EINVAL;
	return job_submit_from(e, &fill, claim->chain);
}

int shard_engine_noop(struct shard_engine *e, uint64_t job_id)
{
	struct shard_job fill = { .id = job_id, .kind = SHARD_JOB_NOOP };

	return job_submit(e, &fill);
}

/* Takes up to max completions; under e->lock. */
static uint32_t take_completions(struct shard_engine *e, struct shard_completion *out,
				 uint32_t max)
{
	uint32_t n = 0;

	while (n < max && e->completion_count > 0) {
		out[n++] = e->completions[e->completion_head];
		e->completion_head = (e->completion_head + 1) % e->jobs_max;
		e->completion_count--;
		e->unpolled--;
	}
	return n;
}

uint32_t shard_engine_poll(struct shard_engine *e, struct shard_completion *out,
			   uint32_t max)
{
	uint32_t n;

	pthread_mutex_lock(&e->lock);
	n = take_completions(e, out, max);
	pthread_mutex_unlock(&e->lock);
	return n;
}

/*
 * The completion is taken under the lock it was waited for under: another
 * waiter or poller between the two would leave this one with nothing.
 */
void shard_engine_wait(struct shard_engine *e, struct shard_completion *out)
{
	pthread_mutex_lock(&e->lock);
	SEL_ASSERT(e->unpolled > 0);
	while (e->completion_count == 0)
		pthread_cond_wait(&e->completion_ready, &e->lock);
	take_completions(e, out, 1);
	pthread_mutex_unlock(&e->lock);
}

int shard_engine_wait_for(struct shard_engine *e, struct shard_completion *out,
			  uint32_t timeout_ms)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	uint32_t n;

	pthread_mutex_lock(&e->lock);
	while (e->completion_count == 0 &&
	       pthread_cond_timedwait(&e->completion_ready, &e->lock, &until) == 0)
		;
	n = take_completions(e, out, 1);
	pthread_mutex_unlock(&e->lock);
	return (int)n;
}

void shard_engine_set_completion_hook(struct shard_engine *e, shard_completion_hook hook,
				      void *ctx)
{
	pthread_mutex_lock(&e->lock);
	e->hook = hook;
	e->hook_ctx = ctx;
	while (!hook && e->hook_calls > 0)
		pthread_cond_wait(&e->hook_idle, &e->lock);
	pthread_mutex_unlock(&e->lock);
}

void shard_engine_stats(struct shard_engine *e, struct shard_engine_stats *out)
{
	pthread_mutex_lock(&e->lock);
	*out = e->stats;
	/* Unpolled less completed (with a hook, completions are never polled). */
	out->jobs_in_flight = e->unpolled - e->completion_count;
	pthread_mutex_unlock(&e->lock);
	out->disk_engine = rec_disk_engine(e->disk);
	out->io_workers = rec_disk_io_workers(e->disk);
	out->checksum_threads = e->checksums.helper_count + 1;
	out->verify_threads = e->verifies.helper_count + 1;
	out->stores_max = e->stores_max;
	out->staging_bytes = e->pool.slot_bytes * e->pool.slot_count;
}

void shard_engine_warm_stats(struct shard_engine *e, struct shard_warm_stats *out)
{
	shard_warm_get_stats(&e->warm, out);
}

void shard_engine_describe_warm(struct shard_engine *e, char *out, size_t size)
{
	struct shard_warm_stats ws;
	char groups[48] = "";

	shard_warm_get_stats(&e->warm, &ws);
	if (!ws.slots_total) {
		snprintf(out, size, "warm off");
		return;
	}
	if (e->warm.pool.group_slots > 1)
		snprintf(groups, sizeof(groups), " in groups of %u by plane",
			 e->warm.pool.group_slots);
	snprintf(out, size, "warm %.1f MiB, %u slots of %" PRIu64 " KiB%s, registered "
		 "in %.1f ms (%u call%s)",
		 (double)(e->warm.pool.slot_bytes * ws.slots_total) / (1 << 20),
		 ws.slots_total, e->warm.pool.slot_bytes >> 10, groups, ws.register_ns / 1e6,
		 ws.register_chunks, ws.register_chunks == 1 ? "" : "s");
}

void shard_engine_describe_staging(struct shard_engine *e, char *out, size_t size)
{
	char groups[48] = "";

	if (e->pool.group_slots > 1)
		snprintf(groups, sizeof(groups), " in groups of %u by plane", e->pool.group_slots);
	snprintf(out, size, "staging %" PRIu64 " MiB, windows of %u page%s%s",
		 (e->pool.slot_bytes * e->pool.slot_count) >> 20, e->window_pages,
		 e->window_pages == 1 ? "" : "s", groups);
}

void shard_engine_staging_stats(struct shard_engine *e, struct shard_staging_stats *out)
{
	pthread_mutex_lock(&e->pool.lock);
	*out = (struct shard_staging_stats){ .slots_total = e->pool.slot_count,
					     .slots_free = e->pool.free_count,
					     .slots_intake = e->pool.reserved_count,
					     .exhausted = e->pool.exhausted };
	pthread_mutex_unlock(&e->pool.lock);
}

/*
 * One lane's windows, leased from the pool for the engine's life. Every
 * lane's windows are leased before any row, from a fresh pool that hands
 * out its lowest slots first, so each window is the slots of whole groups
 * of the staging's layout, in order (open_staging), and the rows lie
 * after the groups.
 */
static int lease_lane(struct shard_engine *e, struct lane *l)
{
	const struct rec_geometry *g = &e->geometry;
	uint32_t group = e->pool.group_slots;
	int ret = 0;

	l->row_slots = calloc(e->row_piece_count, sizeof(uint32_t));
	/*
	 * A window's planes, or a row's pieces (a warm row's may be its slots'
	 * planes); a warm fetch holds up to a call's entries back while a
	 * run is open, and adds a window's (warm_copies_issue).
	 */
	l->copies = calloc(2ull * e->window_pages * g->page_plane_count + REC_DISK_BUFFERS_MAX,
			   sizeof(*l->copies));
	if (!l->row_slots || !l->copies)
		return -ENOMEM;
	for (uint32_t b = 0; !ret && b < l->stage_count; b++) {
		struct stage *s = &l->stages[b];

		s->lease = (struct shard_slab_lease){ .slots = s->slots,
						      .capacity = SHARD_WINDOW_PAGES_MAX };
		ret = shard_slab_alloc_intake(&e->pool, e->window_pages, &s->lease);
		SEL_ASSERT(ret == 0); /* the pool was sized for exactly these */
		for (uint32_t i = 0; group > 1 && i < e->window_pages; i++)
			SEL_ASSERT(s->slots[i] == s->slots[0] + i && s->slots[0] % group == 0 &&
				   s->slots[i] < e->pool.grouped_slots);
	}
	return 0;
}

/* One lane's row slots, leased after every lane's windows (lease_lane). */
static void lease_row(struct shard_engine *e, struct lane *l)
{
	int ret;

	l->row_lease = (struct shard_slab_lease){ .slots = l->row_slots,
						  .capacity = e->row_piece_count };
	ret = shard_slab_alloc_intake(&e->pool, e->row_piece_count, &l->row_lease);
	SEL_ASSERT(ret == 0); /* the pool was sized for exactly these */
}

/*
 * Staging's groups (shard/slab.h): a window's slots, so that plane p of a
 * window's pages is one range (G, the window's pages), capped by
 * SELENE_STAGING_GROUP_SLOTS (1 to SHARD_WINDOW_PAGES_MAX; 1 or 0: every
 * slot a page record in one piece, to compare; else the largest divisor of
 * the window's pages within the cap, so a window is whole groups;
 * malformed: unset), and 1 where the planes allow no groups.
 */
static uint32_t staging_group_slots(const struct shard_engine *e)
{
	const struct rec_geometry *g = &e->geometry;
	uint64_t plane_bytes[REC_PAGE_PLANES_MAX];
	uint32_t group, cap = 0;

	if (sel_env_count("SELENE_STAGING_GROUP_SLOTS", SHARD_WINDOW_PAGES_MAX, &cap) && cap == 0)
		cap = 1;
	if (!cap || cap > e->window_pages)
		cap = e->window_pages;
	for (group = cap; e->window_pages % group != 0; group--)
		;
	for (uint32_t p = 0; p < g->page_plane_count; p++)
		plane_bytes[p] = g->page_planes[p].unit_bytes;
	return shard_slab_group_slots(plane_bytes, g->page_plane_count, group);
}

/*
 * Staging is mapped and populated at open (shard/slab.h): more than half
 * of the memory this process could take (shard_slab_memory_available)
 * would leave the host or its cgroup to the OOM killer, at the mapping or
 * at the first copy (shard_slab_memory_fits, the budget a pool link's
 * claims are held to too). Refused before anything is mapped, naming both
 * figures; when the available memory cannot be read, nothing is refused.
 */
static int check_staging_memory(uint64_t slot_bytes, uint32_t slots, uint64_t warm_bytes,
				char *err, size_t err_size)
{
	uint64_t staging, available;

	if (!sel_mul_u64(sel_align_up(slot_bytes, SEL_BLOCK_BYTES), slots, &staging) ||
	    staging + warm_bytes < staging)
		return 0; /* shard_slab_init refuses it */
	if (shard_slab_memory_fits(staging + warm_bytes, &available))
		return 0;
	if (warm_bytes) {
		snprintf(err, err_size, "staging (%" PRIu64 " MiB) and the warm tier (%"
			 PRIu64 " MiB) need %" PRIu64 " MiB, more than half of the %" PRIu64
			 " MiB of memory available to this process (MemAvailable, bounded by "
			 "its cgroup's room); a smaller warm_bytes needs less",
			 staging >> 20, warm_bytes >> 20, (staging + warm_bytes) >> 20,
			 available >> 20);
		return -ENOMEM;
	}
	snprintf(err, err_size, "staging needs %" PRIu64 " MiB (%u slots of %" PRIu64
		 " bytes), more than half of the %" PRIu64 " MiB of memory available to "
		 "this process (MemAvailable, bounded by its cgroup's room); fewer or smaller "
		 "planes, or fewer stores at once (SELENE_STORES_AT_ONCE), need less",
		 staging >> 20, slots, slot_bytes, available >> 20);
	return -ENOMEM;
}

/*
 * The staging pool: each lane's windows and row, leased for the engine's
 * life; the windows' slots in groups of staging_group_slots, plane-major,
 * the rows' after them, each a page record in one piece.
 */
static int open_staging(struct shard_engine *e, const struct shard_engine_options *options,
			char *err, size_t err_size)
{
	const struct rec_geometry *g = &e->geometry;
	uint64_t plane_bytes[REC_PAGE_PLANES_MAX];
	uint32_t row_pieces, slots, window_slots;
	int ret;

	row_pieces = (uint32_t)((g->row_record_bytes + g->page_record_bytes - 1) /
				g->page_record_bytes);
	if (row_pieces > REC_DISK_BUFFERS_MAX) {
		snprintf(err, err_size, "a row of %" PRIu64 " bytes spans more than %u "
			 "page-record slots", g->row_record_bytes, REC_DISK_BUFFERS_MAX);
		return SEL_ETOOBIG;
	}
	window_slots = (e->lanes[LANE_RESTORE].stage_count +
			e->lanes[LANE_BACKGROUND].stage_count) * e->window_pages;
	slots = window_slots + LANE_COUNT * row_pieces;
	ret = check_staging_memory(g->page_record_bytes, slots, options->warm_bytes, err,
				   err_size);
	if (ret)
		return ret;
	ret = shard_slab_init(&e->pool, g->page_record_bytes, slots);
	if (ret) {
		snprintf(err, err_size, "cannot map %u staging slots: %s", slots,
			 strerror(-ret));
		return ret;
	}
	for (uint32_t p = 0; p < g->page_plane_count; p++)
		plane_bytes[p] = g->page_planes[p].unit_bytes;
	shard_slab_layout(&e->pool, plane_bytes, g->page_plane_count,
			  staging_group_slots(e), window_slots);
	e->row_piece_count = row_pieces;
	ret = shard_slab_reserve_intake(&e->pool, slots);
	SEL_ASSERT(ret == 0);
	for (uint32_t i = 0; !ret && i < LANE_COUNT; i++)
		ret = lease_lane(e, &e->lanes[i]);
	if (ret) {
		snprintf(err, err_size, "out of memory for staging");
		return ret;
	}
	for (uint32_t i = 0; i < LANE_COUNT; i++)
		lease_row(e, &e->lanes[i]);
	if (options->register_pool) {
		ret = shard_slab_register(&e->pool, e->device);
		if (ret)
			snprintf(err, err_size, "cannot register %" PRIu64 " staging bytes "
				 "with the device", g->page_record_bytes * slots);
	}
	return ret;
}

/*
 * The warm tier (shard/warm.h): warm_bytes in page-record slots, mapped,
 * populated and, with register_pool, registered now, once; its memory was
 * checked with staging's (check_staging_memory).
 */
static int open_warm(struct shard_engine *e, const struct shard_engine_options *options,
		     char *err, size_t err_size)
{
	const struct rec_geometry *g = &e->geometry;
	uint64_t slots = options->warm_bytes / g->page_record_bytes;
	uint64_t plane_bytes[REC_PAGE_PLANES_MAX];
	uint32_t group_max;
	int ret;

	if (!options->warm_bytes)
		return 0;
	if (slots < 1 + (uint64_t)e->row_piece_count || slots > UINT32_MAX) {
		snprintf(err, err_size, "a warm tier of %" PRIu64 " bytes holds %" PRIu64
			 " slots of %" PRIu64 " bytes: from %u (one page and the row) to %u",
			 options->warm_bytes, slots, g->page_record_bytes,
			 1 + e->row_piece_count, UINT32_MAX);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < SHARD_STORES_MAX; i++) {
		e->runs[i].warm = SHARD_WARM_NONE;
		e->runs[i].warm_row = calloc(e->row_piece_count, sizeof(uint32_t));
		if (!e->runs[i].warm_row) {
			snprintf(err, err_size, "out of memory for the warm tier");
			return -ENOMEM;
		}
	}
	for (uint32_t p = 0; p < g->page_plane_count; p++)
		plane_bytes[p] = g->page_planes[p].unit_bytes;
	group_max = options->warm_group_slots_max;
	/* SELENE_WARM_GROUP_SLOTS=1 lays the tier out as staging, to compare. */
	if (!group_max && sel_env_count("SELENE_WARM_GROUP_SLOTS", SHARD_WARM_GROUP_SLOTS,
					&group_max) && group_max == 0)
		group_max = 1;
	ret = shard_warm_init(&e->warm, &(struct shard_warm_shape){
					.plane_bytes = plane_bytes,
					.plane_count = g->page_plane_count,
					.row_bytes = g->row_record_bytes,
					.slot_count = (uint32_t)slots,
					.pages_max = g->page_count,
					.group_slots_max = group_max ? group_max :
								       SHARD_WARM_GROUP_SLOTS });
	if (ret) {
		snprintf(err, err_size, "cannot map a warm tier of %" PRIu64 " slots: %s",
			 slots, strerror(-ret));
		return ret;
	}
	SEL_ASSERT(e->warm.pool.slot_bytes == g->page_record_bytes &&
		   e->warm.row_piece_count == e->row_piece_count);
	/* Whole groups: a tier of a few groups may hold less than it was given. */
	slots = e->warm.pool.slot_count;
	if (slots < 1 + (uint64_t)e->row_piece_count) {
		snprintf(err, err_size, "a warm tier of %" PRIu64 " bytes holds %" PRIu64
			 " slots in groups of %u: fewer than %u (one page and the row)",
			 options->warm_bytes, slots, e->warm.pool.group_slots, 1 + e->row_piece_count);
		return -EINVAL;
	}
	if (options->register_pool) {
		ret = shard_warm_register(&e->warm, e->device);
		if (ret)
			snprintf(err, err_size, "cannot register the warm tier's %" PRIu64
				 " bytes with the device: %s",
				 g->page_record_bytes * slots, sel_strerror(ret));
	}
	return ret;
}

static int open_jobs(struct shard_engine *e)
{
	e->jobs = calloc(e->jobs_max, sizeof(*e->jobs));
	e->completions = calloc(e->jobs_max, sizeof(*e->completions));
	if (!e->jobs || !e->completions)
		return -ENOMEM;
	for (uint32_t i = 0; i < e->jobs_max; i++) {
		struct shard_job *job = &e->jobs[i];

		job->page_ids = calloc(e->geometry.page_count, sizeof(uint32_t));
		job->chain = calloc(SHARD_CHAIN_RECORDS_MAX, sizeof(*job->chain));
		if (!job->page_ids || !job->chain)
			return -ENOMEM;
		job->next = e->free_jobs;
		e->free_jobs = job;
	}
	return 0;
}

uint32_t shard_default_stores_max(uint32_t io_workers)
{
	uint32_t n;

	if (sel_env_count("SELENE_STORES_AT_ONCE", SHARD_STORES_MAX, &n)) {
		if (n > 0)
			return n;
		sel_warn("SELENE_STORES_AT_ONCE=0 is not 1..%u; using the default",
			 SHARD_STORES_MAX);
	}
	/* Several stores at once where one file's writes are the bound. */
	return io_workers ? SHARD_STORES_MAX : 1;
}

/* The restore lane's requests go first on the disk thread. */
static void init_requests(struct shard_engine *e, struct lane *l, bool urgent)
{
	for (uint32_t b = 0; b < l->stage_count; b++) {
		struct stage *both[2] = { &l->stages[b], &l->warm_stages[b] };

		for (uint32_t k = 0; k < 2; k++) {
			both[k]->req.file = &l->files[0];
			both[k]->req.replies = &l->replies;
			both[k]->req.urgent = urgent;
			/* Page checksums are this engine's, on the checksum pool. */
			both[k]->req.requester_checksums = true;
		}
	}
	l->row_req.file = &l->files[0];
	l->row_req.replies = &l->replies;
	l->row_req.urgent = urgent;
	l->control_req.file = &l->files[0];
	l->control_req.replies = &l->replies;
	l->control_req.urgent = urgent;
	for (uint32_t f = 0; f < 2; f++)
		l->open_req[f] = (struct rec_disk_request){ .op = REC_DISK_OPEN,
							    .file = &l->files[f],
							    .replies = &l->replies,
							    .urgent = urgent };
	l->file_record[0] = l->file_record[1] = UINT32_MAX;
	if (urgent)
		return;
	for (uint32_t i = 0; i < e->stores_max; i++) {
		struct store_run *run = &e->runs[i];

		run->control_req = (struct rec_disk_request){ .file = &run->file,
							      .replies = &l->replies };
		run->row_req = run->control_req;
	}
}

int shard_engine_open(const struct shard_engine_options *options,
		      struct shard_engine **out, char *err, size_t err_size)
{
	struct rec_disk_options disk_options = { .dir = options->dir,
						 .no_uring = options->no_uring };
	struct shard_engine *e = calloc(1, sizeof(*e));
	uint32_t helpers, verifiers;
	int ret = 0;

	*out = NULL;
	if (!e)
		return -ENOMEM;
	e->geometry = *options->geometry;
	e->planes = *options->planes;
	e->dir = options->dir;
	e->device = options->device;
	e->jobs_max = options->jobs_max ? options->jobs_max : 64;
	e->read_ahead_bytes = options->read_ahead_bytes ? options->read_ahead_bytes :
							  SHARD_READ_AHEAD_BYTES;
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->work_ready, NULL);
	pthread_cond_init(&e->completion_ready, NULL);
	pthread_cond_init(&e->hook_idle, NULL);
	for (uint32_t i = 0; i < LANE_COUNT; i++)
		rec_disk_replies_init(&e->lanes[i].replies);
	if (options->io_workers != SHARD_IO_WORKERS_NONE &&
	    options->io_workers > REC_DISK_IO_WORKERS_MAX) {
		snprintf(err, err_size, "%u kernel I/O workers past the maximum of %u",
			 options->io_workers, REC_DISK_IO_WORKERS_MAX);
		ret = -EINVAL;
		goto err_close;
	}
	disk_options.io_workers = options->io_workers == SHARD_IO_WORKERS_NONE ? 0 :
				  options->io_workers ? options->io_workers :
				  rec_disk_default_io_workers(options->dir);
	/* First: the window's size depends on the workers it really has. */
	ret = rec_disk_start(&disk_options, &e->disk, err, err_size);
	if (ret)
		goto err_close;
	/*
	 * By default a window is about SHARD_WINDOW_BYTES (SHARD_WINDOW_WORKER_BYTES
	 * with kernel workers), and 64 pages at most; SELENE_WINDOW_PAGES (1 to
	 * 64) sets its pages where the option does not (0 or malformed: the
	 * default), to compare: a staged copy entry is at most a window's pages
	 * of one plane.
	 */
	e->window_pages = options->window_pages;
	if (!e->window_pages)
		sel_env_count("SELENE_WINDOW_PAGES", SHARD_WINDOW_PAGES_MAX, &e->window_pages);
	if (!e->window_pages) {
		uint64_t pages = (rec_disk_io_workers(e->disk) ? SHARD_WINDOW_WORKER_BYTES :
								 SHARD_WINDOW_BYTES) /
				 e->geometry.page_record_bytes;

		e->window_pages = pages == 0 ? 1 : pages > SHARD_WINDOW_PAGES_MAX ?
							  SHARD_WINDOW_PAGES_MAX : (uint32_t)pages;
	}
	e->stores_max = options->stores_max ? options->stores_max :
						shard_default_stores_max(rec_disk_io_workers(e->disk));
	if (e->stores_max > SHARD_STORES_MAX) {
		snprintf(err, err_size, "%u stores at once past the maximum of %u",
			 e->stores_max, SHARD_STORES_MAX);
		ret = -EINVAL;
		goto err_close;
	}
	if (e->window_pages > SHARD_WINDOW_PAGES_MAX || e->jobs_max > SHARD_JOBS_MAX) {
		snprintf(err, err_size, "window of %u pages or %u jobs past the maximum",
			 e->window_pages, e->jobs_max);
		ret = -EINVAL;
		goto err_close;
	}
	e->lanes[LANE_RESTORE].stage_count = SHARD_STAGES;
	e->lanes[LANE_BACKGROUND].stage_count =
		2 * e->stores_max > SHARD_STAGES ? 2 * e->stores_max : SHARD_STAGES;
	for (uint32_t i = 0; !ret && i < LANE_COUNT; i++) {
		ret = rec_disk_file_init(&e->lanes[i].files[0], e->geometry.page_count);
		if (!ret)
			ret = rec_disk_file_init(&e->lanes[i].files[1], e->geometry.page_count);
	}
	for (uint32_t i = 0; !ret && i < e->stores_max; i++)
		ret = rec_disk_file_init(&e->runs[i].file, e->geometry.page_count);
	if (!ret)
		ret = open_jobs(e);
	if (ret) {
		snprintf(err, err_size, "out of memory for %u jobs", e->jobs_max);
		goto err_close;
	}
	ret = open_staging(e, options, err, err_size);
	if (ret)
		goto err_close;
	ret = open_warm(e, options, err, err_size);
	if (ret)
		goto err_close;
	init_requests(e, &e->lanes[LANE_RESTORE], true);
	init_requests(e, &e->lanes[LANE_BACKGROUND], false);
	helpers = options->checksum_threads ? options->checksum_threads - 1 :
					      shard_checksum_pool_default_helpers();
	verifiers = options->checksum_threads ? options->checksum_threads - 1 :
						shard_checksum_pool_default_verifiers();
	ret = shard_checksum_pool_init(&e->checksums, helpers, false);
	if (!ret) {
		e->checksums_started = true;
		ret = shard_checksum_pool_init(&e->verifies, verifiers, true);
		e->verifies_started = !ret;
	}
	/*
	 * Memory-backed files are read by their verifying threads where there
	 * are helpers (alone, the transfer thread would read and hash every
	 * page itself, with no read overlapping it); SELENE_FETCH_READS_HERE=0
	 * leaves every read to the disk thread.
	 */
	/*
	 * Store windows are pipelined where the device keeps marks and its
	 * copies run after their issue; SELENE_STORE_PIPELINE=0 copies one
	 * window at a time, to compare.
	 */
	{
		uint32_t on = 1;

		if (!sel_env_count("SELENE_STORE_PIPELINE", 1, &on))
			on = 1;
		e->store_pipelined = on && !e->device->ops->copies_synchronous &&
				     e->device->ops->mark && e->device->ops->wait_mark;
	}
	{
		uint32_t here = 1;

		if (!sel_env_count("SELENE_FETCH_READS_HERE", 1, &here))
			here = 1;
		e->fetch_reads_here = here && !ret && e->verifies.helper_count > 0 &&
				      rec_dir_memory_backed(e->dir);
	}
	if (ret) {
		snprintf(err, err_size, "cannot start %u + %u checksum helpers: %s", helpers,
			 verifiers, strerror(-ret));
		goto err_close;
	}
	ret = sel_thread_start(&e->thread, transfer_main, e);
	if (ret) {
		snprintf(err, err_size, "cannot start the transfer thread: %s",
			 strerror(-ret));
		goto err_close;
	}
	e->thread_started = true;
	*out = e;
	return 0;
err_close:
	shard_engine_close(e);
	return ret;
}

void shard_engine_close(struct shard_engine *e)
{
	struct shard_device_binding binding;
	bool bound = false;

	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	pthread_cond_broadcast(&e->work_ready);
	pthread_mutex_unlock(&e->lock);
	if (e->thread_started)
		pthread_join(e->thread, NULL);
	/* closings the transfer thread did not reach run here, as it has stopped */
	pthread_mutex_lock(&e->lock);
	while (retire_next(e))
		pthread_mutex_lock(&e->lock);
	pthread_mutex_unlock(&e->lock);
	if (e->checksums_started)
		shard_checksum_pool_destroy(&e->checksums);
	if (e->verifies_started)
		shard_checksum_pool_destroy(&e->verifies);
	if (rec_disk_stop(e->disk, REC_DISK_STOP_TIMEOUT_MS) != 0) {
		/*
		 * Its I/O may still use the staging and files: keep them. A late
		 * commit may still change the directory, so its close must not
		 * vouch for it (R-DIR-10).
		 */
		rec_dir_forget_catalog(e->dir);
		return;
	}
	/*
	 * The staging's and the warm tier's registrations are undone with the
	 * device current on this (the closing) thread, whose own is put back.
	 */
	if (e->device && shard_device_bind_for(e->device, &binding) == 0)
		bound = true;
	if (e->pool.base) {
		shard_slab_unregister(&e->pool);
		shard_slab_destroy(&e->pool);
	}
	shard_warm_destroy(&e->warm);
	if (bound)
		shard_device_unbind(e->device, &binding);
	for (uint32_t i = 0; i < SHARD_STORES_MAX; i++)
		free(e->runs[i].warm_row);
	for (uint32_t i = 0; i < LANE_COUNT; i++) {
		struct lane *l = &e->lanes[i];

		for (int f = 0; f < 2; f++)
			if (l->files[f].buffers.header_block)
				rec_disk_file_destroy(&l->files[f]);
		free(l->row_slots);
		free(l->copies);
		rec_disk_replies_destroy(&l->replies);
	}
	for (uint32_t i = 0; i < SHARD_STORES_MAX; i++)
		if (e->runs[i].file.buffers.header_block)
			rec_disk_file_destroy(&e->runs[i].file);
	for (uint32_t i = 0; e->jobs && i < e->jobs_max; i++) {
		free(e->jobs[i].page_ids);
		free(e->jobs[i].chain);
	}
	free(e->jobs);
	free(e->completions);
	if (e->pool_chain)
		shard_pool_share_destroy(&e->pool_share);
	free(e->pool_chain);
	free(e->pool_early);
	pthread_cond_destroy(&e->completion_ready);
	pthread_cond_destroy(&e->hook_idle);
	pthread_cond_destroy(&e->work_ready);
	pthread_mutex_destroy(&e->lock);
	free(e);
}
