/*
 * selene bench restore: a restore's latency with the disk idle and while
 * stores keep every rank's disk thread busy (issue 11 item 1, docs/DESIGN.md
 * section 6: restores first). For one rank, then for the requested number
 * of ranks under the fan-out (rank zero in this process through the public
 * API, every other rank a forked peer on loopback), it stores a few target
 * records, restores them one at a time with nothing else running, then
 * again while RESTORE_STORES_IN_FLIGHT stores of records of the same size
 * are kept in flight, and prints p50 and p99 of both and their ratios.
 * Before that it measures the disk alone the same way (restore_floor), so
 * each run says how much of a loaded restore's extra time the disk itself
 * takes.
 */
#include "launch/commands.h"
#include "launch/bench_ranks.h"
#include "launch/bench_store.h"
#include "launch/run.h"

#include "common/base.h"
#include "common/log.h"
#include "record/io.h"
#include "selene/store.h"

#include <liburing.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RESTORE_WORLD_MAX 8u
_Static_assert(RESTORE_WORLD_MAX <= BENCH_RANKS_MAX, "bench_ranks forks every rank");
#define RESTORE_PLANES 2u
#define RESTORE_UNIT (256u << 10)        /* one plane of one page */
#define RESTORE_TOKENS_PER_PAGE 64u
#define RESTORE_PAGES 32u                /* a record: 16 MiB a rank */
#define RESTORE_DEVICE_PAGES (4u * RESTORE_PAGES)
#define RESTORE_ROW (64u << 10)
#define RESTORE_ROWS 4u
#define RESTORE_TARGETS 4u               /* records restored in turn */
#define RESTORE_STORES_IN_FLIGHT 4u      /* background stores kept queued */
#define RESTORE_WARM_STORES 4u           /* stores done before timing starts */
#define RESTORE_TOKENS (RESTORE_PAGES * RESTORE_TOKENS_PER_PAGE)

struct restore_run {
	const char *base;
	const char *device;
	uint32_t world;
	uint32_t samples;
	uint32_t warmup; /* untimed loaded passes of samples restores, first */
	struct bench_ranks ranks;
	struct launch_run_planes planes;
	int ordinal; /* the device this process's rank uses */
	uint64_t *idle_ns, *loaded_ns;
	uint64_t stores_done;
	double store_seconds;
};

struct restore_result {
	uint32_t world;
	double idle50, idle99, loaded50, loaded99, store_gbps;
};

static int restore_planes(struct restore_run *r, uint32_t rank, char *err, size_t err_size)
{
	struct launch_run_plane_spec spec = { RESTORE_PLANES, RESTORE_UNIT };
	int ret;

	r->ordinal = (int)rank;
	ret = launch_run_planes_open(&r->planes, rank, r->device, r->ordinal, &spec, 1,
				     RESTORE_DEVICE_PAGES, RESTORE_ROW, RESTORE_ROWS, UINT64_MAX,
				     err, err_size);
	/* Every rank on GPU 0 where the host has fewer GPUs than ranks. */
	if (ret && rank > 0 && strcmp(r->device, "host") != 0) {
		r->ordinal = 0;
		ret = launch_run_planes_open(&r->planes, rank, r->device, r->ordinal, &spec,
					     1, RESTORE_DEVICE_PAGES, RESTORE_ROW,
					     RESTORE_ROWS, UINT64_MAX, err, err_size);
	}
	return ret;
}

static void restore_config(struct restore_run *r, uint32_t rank, struct sel_store_config *c,
			   struct sel_plane planes[RESTORE_PLANES], char *dir, size_t dir_size)
{
	snprintf(dir, dir_size, "%s/rank%u", r->base, rank);
	for (uint32_t p = 0; p < RESTORE_PLANES; p++)
		planes[p] = (struct sel_plane){ r->planes.names[p], RESTORE_UNIT,
						r->planes.page_base[p] };
	*c = (struct sel_store_config){
		.dir = dir, .page_tokens = RESTORE_TOKENS_PER_PAGE,
		.page_plane_count = RESTORE_PLANES, .page_planes = planes,
		.row_plane = { "state", RESTORE_ROW, r->planes.row_base },
		.page_count = RESTORE_DEVICE_PAGES, .row_count = RESTORE_ROWS,
		.device = launch_run_planes_device(&r->planes),
		.device_ordinal = r->ordinal,
		.disk_limit_bytes = 8ull << 30, .durable = false, .records_max = 100000,
		.cluster = r->world > 1 ? &r->ranks.cluster : NULL,
	};
	memset(c->model_identity, 0x7e, sizeof(c->model_identity));
}

static int restore_peer_config(void *arg, uint32_t rank, struct bench_ranks_config *c,
			       char *err, size_t err_size)
{
	struct restore_run *r = arg;
	int ret = restore_planes(r, rank, err, err_size);

	if (!ret)
		restore_config(r, rank, &c->store, c->planes, c->dir, sizeof(c->dir));
	return ret;
}

static void restore_peer_stopped(void *arg, uint32_t rank)
{
	struct restore_run *r = arg;

	(void)rank;
	launch_run_planes_close(&r->planes);
}

static void restore_tokens(uint32_t *tokens, uint64_t record)
{
	for (uint32_t i = 0; i < RESTORE_TOKENS; i++)
		tokens[i] = (uint32_t)((record * 2654435761u + i * 40503u) % 151936u);
	tokens[0] = (uint32_t)record; /* a distinct first block for every record */
}

static void restore_pause(void)
{
	struct timespec ts = { 0, 20000 };

	nanosleep(&ts, NULL);
}

/* What the benchmark loop is waiting for. */
struct restore_state {
	sel_history *targets[RESTORE_TARGETS];
	uint64_t next_store;    /* checkpoint id of the next background store */
	uint32_t stores_in_flight;
	uint64_t stores_done;
	bool restore_running;
	bool failed;
};

/* Publishes record as checkpoint id from pages [0, RESTORE_PAGES), slot 0. */
static int restore_publish(sel_store *store, uint64_t id, sel_history **kept,
			   enum sel_outcome *outcome)
{
	static uint32_t ids[RESTORE_PAGES];
	uint32_t tokens[RESTORE_TOKENS];
	struct sel_publication pub;
	sel_history *h;
	int ret;

	for (uint32_t i = 0; i < RESTORE_PAGES; i++)
		ids[i] = i;
	restore_tokens(tokens, id);
	ret = sel_history_create(store, tokens, RESTORE_TOKENS, &h);
	if (ret)
		return ret;
	pub = (struct sel_publication){ .checkpoint = id, .history = h,
					.consumed = RESTORE_TOKENS, .page_ids = ids };
	ret = sel_store_publish(store, &pub, outcome);
	if (kept)
		*kept = h;
	else
		sel_history_destroy(h);
	return ret;
}

/* Takes events: counts stores, ends the restore; fails on any failure. */
static void restore_drain_events(sel_store *store, struct restore_state *s)
{
	struct sel_event ev[16];
	uint32_t n = sel_poll(store, ev, SEL_ARRAY_SIZE(ev));

	for (uint32_t i = 0; i < n; i++) {
		switch (ev[i].kind) {
		case SEL_EVENT_STORED:
			s->stores_in_flight--;
			s->stores_done++;
			break;
		case SEL_EVENT_FETCHED:
			s->restore_running = false;
			break;
		default:
			fprintf(stderr, "selene bench restore: event %d for %" PRIu64 ": %s\n",
				(int)ev[i].kind, ev[i].id, ev[i].why);
			s->failed = true;
			break;
		}
	}
	if (n == 0)
		restore_pause();
}

/* Keeps RESTORE_STORES_IN_FLIGHT background stores queued. */
static void restore_top_up(sel_store *store, struct restore_state *s)
{
	while (!s->failed && s->stores_in_flight < RESTORE_STORES_IN_FLIGHT) {
		enum sel_outcome outcome;
		int ret = restore_publish(store, s->next_store, NULL, &outcome);

		if (ret || outcome == SEL_OVERSIZE) {
			fprintf(stderr, "selene bench restore: store: %s\n",
				ret ? sel_strerror(ret) : "oversize");
			s->failed = true;
			return;
		}
		if (outcome == SEL_RETRY)
			return;
		s->next_store++;
		s->stores_in_flight += outcome == SEL_QUEUED;
	}
}

/* One restore of target t; times it from sel_fetch to its event. */
static int restore_one(sel_store *store, struct restore_state *s, uint32_t t, bool loaded,
		       uint64_t *ns)
{
	static uint32_t dest[RESTORE_PAGES];
	struct sel_hit hit;
	bool joined;
	uint64_t t0;
	int ret;

	for (uint32_t i = 0; i < RESTORE_PAGES; i++)
		dest[i] = RESTORE_PAGES * 2 + i;
	if (!sel_lookup(store, s->targets[t], 0, &hit) || hit.page_count != RESTORE_PAGES) {
		fprintf(stderr, "selene bench restore: target %u is not restorable\n", t);
		return -ENOENT;
	}
	t0 = sel_monotonic_ns();
	ret = sel_fetch(store, &hit, dest, 1, 1000000 + t, &joined);
	if (ret)
		return ret;
	s->restore_running = true;
	while (s->restore_running && !s->failed) {
		restore_drain_events(store, s);
		if (loaded)
			restore_top_up(store, s);
	}
	*ns = sel_monotonic_ns() - t0;
	return s->failed ? -EIO : 0;
}

/* Stores the targets, restores them idle, then under stores. */
static int restore_measure(struct restore_run *r, sel_store *store)
{
	struct restore_state s = { .next_store = 100 };
	uint64_t t0, stores_before;
	int ret = 0;

	for (uint32_t t = 0; !ret && t < RESTORE_TARGETS; t++) {
		enum sel_outcome outcome;

		ret = restore_publish(store, t + 1, &s.targets[t], &outcome);
		if (!ret && outcome != SEL_QUEUED)
			ret = -EAGAIN;
		s.stores_in_flight++;
	}
	while (!ret && !s.failed && s.stores_in_flight > 0)
		restore_drain_events(store, &s);
	/* One untimed pass over the targets: the first reads of a file pay for
	 * its open and metadata, not what is measured here. */
	for (uint32_t t = 0; !ret && t < RESTORE_TARGETS; t++)
		ret = restore_one(store, &s, t, false, &t0);
	/*
	 * --warmup: whole loaded passes, untimed, then the stores drained so
	 * the idle phase is idle. A freshly started virtual machine pays for
	 * its first touch of the memory the stores' files take; the first
	 * loaded pass of a call measured slower than the later ones.
	 */
	for (uint32_t i = 0; !ret && !s.failed && i < r->warmup * r->samples; i++) {
		restore_top_up(store, &s);
		ret = restore_one(store, &s, i % RESTORE_TARGETS, true, &t0);
	}
	while (!ret && !s.failed && s.stores_in_flight > 0)
		restore_drain_events(store, &s);
	for (uint32_t i = 0; !ret && !s.failed && i < r->samples; i++)
		ret = restore_one(store, &s, i % RESTORE_TARGETS, false, &r->idle_ns[i]);
	/* The disk thread saturated with stores before the first timed restore. */
	stores_before = s.stores_done;
	while (!ret && !s.failed && s.stores_done < stores_before + RESTORE_WARM_STORES) {
		restore_top_up(store, &s);
		restore_drain_events(store, &s);
	}
	stores_before = s.stores_done;
	t0 = sel_monotonic_ns();
	for (uint32_t i = 0; !ret && !s.failed && i < r->samples; i++) {
		restore_top_up(store, &s);
		ret = restore_one(store, &s, i % RESTORE_TARGETS, true, &r->loaded_ns[i]);
	}
	r->store_seconds = (double)(sel_monotonic_ns() - t0) / 1e9;
	r->stores_done = s.stores_done - stores_before;
	while (!s.failed && s.stores_in_flight > 0)
		restore_drain_events(store, &s);
	for (uint32_t t = 0; t < RESTORE_TARGETS; t++)
		sel_history_destroy(s.targets[t]);
	return ret ? ret : s.failed ? -EIO : 0;
}

static int restore_remove_one(const char *path, const struct stat *st, int flag,
			      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) && errno != ENOENT ? -1 : 0;
}

/*
 * The disk's own floor, no Selene in it: the bytes one restore reads (a
 * file of a record's payload a rank) read by a thread a rank, all ranks at
 * once, through io_uring (O_DIRECT where the directory takes it, as the
 * disk thread does; elsewhere through kernel workers, as it does there),
 * while a writer thread a rank is idle, streams files of the same size on
 * (loaded), or issues nothing new while a read runs (yielding: what a store
 * that yields at once leaves, the writes already in flight still finishing).
 * A sample is timed from its start to the last rank's last byte, restores
 * back to back as the phases above. Its loaded/idle ratios are what the disk
 * itself allows a restore under stores.
 */
#define FLOOR_BYTES ((uint64_t)RESTORE_PAGES * RESTORE_PLANES * RESTORE_UNIT)
#define FLOOR_CHUNK (8u << 20)       /* O_DIRECT: 8 MiB requests */
#define FLOOR_WORKER_CHUNK (2u << 20) /* elsewhere: 2 MiB, each to a kernel worker */
#define FLOOR_WRITE_FILES 4u          /* a writer's files, rewritten in turn */
_Static_assert(FLOOR_BYTES % FLOOR_CHUNK == 0, "whole requests");
_Static_assert(FLOOR_BYTES / FLOOR_WORKER_CHUNK <= 64, "one ring holds a file's requests");

enum floor_phase { FLOOR_IDLE, FLOOR_LOADED, FLOOR_YIELDING, FLOOR_PHASES };

struct floor;

struct floor_rank {
	struct floor *f;
	uint32_t rank;
	uint8_t *read_buffer;
	int target_fd[RESTORE_TARGETS];
	pthread_t reader, writer;
	bool reader_started, writer_started;
};

struct floor {
	int dirfd;
	bool direct;
	uint32_t world;
	const uint8_t *write_buffer; /* one file's bytes, every writer's source */
	pthread_mutex_t lock;
	pthread_cond_t changed;
	uint64_t sample;       /* under lock: readers run each new one */
	uint32_t readers_done; /* under lock */
	int phase;             /* atomic */
	bool reading;          /* atomic: a sample runs (yielding writers wait) */
	bool stop;             /* atomic */
	int error;             /* atomic: the first failure */
	uint64_t written;      /* atomic: bytes the writers completed */
	struct floor_rank ranks[RESTORE_WORLD_MAX];
};

static void floor_fail(struct floor *f, int err)
{
	int none = 0;

	__atomic_compare_exchange_n(&f->error, &none, err, false, __ATOMIC_RELAXED,
				    __ATOMIC_RELAXED);
	pthread_mutex_lock(&f->lock);
	__atomic_store_n(&f->stop, true, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&f->changed);
	pthread_mutex_unlock(&f->lock);
}

static bool floor_stopped(struct floor *f)
{
	return __atomic_load_n(&f->stop, __ATOMIC_RELAXED);
}

/* Whether a writer may issue a request now. */
static bool floor_may_write(struct floor *f)
{
	int phase = __atomic_load_n(&f->phase, __ATOMIC_RELAXED);

	return phase == FLOOR_LOADED ||
	       (phase == FLOOR_YIELDING && !__atomic_load_n(&f->reading, __ATOMIC_RELAXED));
}

/* Waits until a writer may write; false once the floor stops. */
static bool floor_hold(struct floor *f)
{
	pthread_mutex_lock(&f->lock);
	while (!floor_may_write(f) && !floor_stopped(f))
		pthread_cond_wait(&f->changed, &f->lock);
	pthread_mutex_unlock(&f->lock);
	return !floor_stopped(f);
}

/* Moves to phase or stops (FLOOR_PHASES), waking whoever waits on either. */
static void floor_set_phase(struct floor *f, int phase)
{
	pthread_mutex_lock(&f->lock);
	if (phase == FLOOR_PHASES)
		__atomic_store_n(&f->stop, true, __ATOMIC_RELAXED);
	else
		__atomic_store_n(&f->phase, phase, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&f->changed);
	pthread_mutex_unlock(&f->lock);
}

static uint32_t floor_chunk(const struct floor *f)
{
	return f->direct ? FLOOR_CHUNK : FLOOR_WORKER_CHUNK;
}

/* Takes one completion of ring; 0, or the request's failure. */
static int floor_complete(struct io_uring *ring, uint32_t chunk)
{
	struct io_uring_cqe *cqe;
	int ret = io_uring_wait_cqe(ring, &cqe);

	if (ret)
		return ret;
	ret = cqe->res < 0 ? cqe->res : (uint32_t)cqe->res != chunk ? -EIO : 0;
	io_uring_cqe_seen(ring, cqe);
	return ret;
}

/*
 * Reads or writes fd's FLOOR_BYTES with every request in flight; a writer
 * (may_write) issues each only while floor_may_write says so.
 */
static int floor_file_io(struct floor *f, struct io_uring *ring, int fd, uint8_t *buf,
			 bool write)
{
	uint32_t chunk = floor_chunk(f), in_flight = 0;
	uint64_t submitted = 0, completed = 0;
	int ret = 0;

	while (!ret && completed < FLOOR_BYTES) {
		while (submitted < FLOOR_BYTES && (!write || floor_may_write(f))) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

			if (write)
				io_uring_prep_write(sqe, fd, buf + submitted, chunk, submitted);
			else
				io_uring_prep_read(sqe, fd, buf + submitted, chunk, submitted);
			if (!f->direct)
				io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
			submitted += chunk;
			in_flight++;
		}
		if (in_flight == 0) { /* a writer held back */
			if (!floor_hold(f))
				return -ECANCELED;
			continue;
		}
		ret = io_uring_submit(ring);
		if (ret < 0)
			return ret; /* the ring's exit takes what it holds */
		ret = floor_complete(ring, chunk);
		in_flight--;
		completed += chunk;
		if (write && !ret)
			__atomic_add_fetch(&f->written, chunk, __ATOMIC_RELAXED);
	}
	while (in_flight-- > 0) /* after a failure: the ring holds none of buf */
		(void)floor_complete(ring, chunk);
	return ret;
}

static void *floor_writer(void *arg)
{
	struct floor_rank *fr = arg;
	struct floor *f = fr->f;
	struct io_uring ring;
	int ret = io_uring_queue_init(64, &ring, 0);
	bool ring_made = !ret;

	for (uint64_t n = 0; !ret && floor_hold(f); n++) {
		char name[64];
		int fd;

		snprintf(name, sizeof(name), "write-%u-%u", fr->rank,
			 (unsigned)(n % FLOOR_WRITE_FILES));
		fd = rec_io_open(f->dirfd, name, O_CREAT | O_TRUNC | O_WRONLY, f->direct);
		if (fd < 0) {
			ret = fd;
			break;
		}
		ret = floor_file_io(f, &ring, fd, (uint8_t *)f->write_buffer, true);
		close(fd);
	}
	if (ret && ret != -ECANCELED) {
		fprintf(stderr, "selene bench restore: the raw floor's writes: %s\n",
			sel_strerror(ret));
		floor_fail(f, ret);
	}
	if (ring_made)
		io_uring_queue_exit(&ring);
	return NULL;
}

static void *floor_reader(void *arg)
{
	struct floor_rank *fr = arg;
	struct floor *f = fr->f;
	struct io_uring ring;
	uint64_t seen = 0;
	int ret = io_uring_queue_init(64, &ring, 0);
	bool ring_made = !ret;

	if (!ring_made)
		floor_fail(f, ret);
	for (;;) {
		uint64_t sample;

		pthread_mutex_lock(&f->lock);
		while (f->sample == seen && !floor_stopped(f))
			pthread_cond_wait(&f->changed, &f->lock);
		sample = seen = f->sample;
		pthread_mutex_unlock(&f->lock);
		if (floor_stopped(f))
			break;
		ret = floor_file_io(f, &ring, fr->target_fd[sample % RESTORE_TARGETS],
				    fr->read_buffer, false);
		if (ret) {
			fprintf(stderr, "selene bench restore: the raw floor's reads: %s\n",
				sel_strerror(ret));
			floor_fail(f, ret);
		}
		pthread_mutex_lock(&f->lock);
		f->readers_done++;
		pthread_cond_broadcast(&f->changed);
		pthread_mutex_unlock(&f->lock);
	}
	if (ring_made)
		io_uring_queue_exit(&ring);
	return NULL;
}

/* One sample: every reader reads a target at once; its time in *ns. */
static int floor_sample(struct floor *f, uint64_t *ns)
{
	uint64_t t0;

	pthread_mutex_lock(&f->lock);
	f->readers_done = 0;
	__atomic_store_n(&f->reading, true, __ATOMIC_RELAXED);
	t0 = sel_monotonic_ns();
	f->sample++;
	pthread_cond_broadcast(&f->changed);
	while (f->readers_done < f->world && !floor_stopped(f))
		pthread_cond_wait(&f->changed, &f->lock);
	*ns = sel_monotonic_ns() - t0;
	__atomic_store_n(&f->reading, false, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&f->changed); /* the writers held back */
	pthread_mutex_unlock(&f->lock);
	return __atomic_load_n(&f->error, __ATOMIC_RELAXED);
}

struct floor_result {
	double p50[FLOOR_PHASES], p99[FLOOR_PHASES];
	double write_gbps[FLOOR_PHASES]; /* a rank */
};

/* The phases in turn, samples samples each, into *out. */
static int floor_phases(struct floor *f, uint32_t samples, uint64_t *ns,
			struct floor_result *out)
{
	int ret = 0;

	for (int phase = FLOOR_IDLE; !ret && phase < FLOOR_PHASES; phase++) {
		uint64_t written, t0;

		floor_set_phase(f, phase);
		/* The writers well under way first, as the stores are. */
		written = __atomic_load_n(&f->written, __ATOMIC_RELAXED);
		while (phase != FLOOR_IDLE && !floor_stopped(f) &&
		       __atomic_load_n(&f->written, __ATOMIC_RELAXED) <
			       written + RESTORE_WARM_STORES * FLOOR_BYTES * f->world)
			usleep(1000);
		written = __atomic_load_n(&f->written, __ATOMIC_RELAXED);
		t0 = sel_monotonic_ns();
		for (uint32_t i = 0; !ret && i < samples; i++)
			ret = floor_sample(f, &ns[i]);
		ret = ret ? ret : __atomic_load_n(&f->error, __ATOMIC_RELAXED);
		out->write_gbps[phase] =
			(double)(__atomic_load_n(&f->written, __ATOMIC_RELAXED) - written) /
			f->world / (double)(sel_monotonic_ns() - t0);
		if (!ret)
			bench_percentiles(ns, samples, &out->p50[phase], &out->p99[phase]);
	}
	return ret;
}

/* Makes rank's target files (the restore's bytes) and its read buffer. */
static int floor_rank_setup(struct floor *f, struct floor_rank *fr)
{
	for (uint32_t t = 0; t < RESTORE_TARGETS; t++)
		fr->target_fd[t] = -1;
	if (posix_memalign((void **)&fr->read_buffer, 2u << 20, FLOOR_BYTES))
		return -ENOMEM;
	for (uint32_t t = 0; t < RESTORE_TARGETS; t++) {
		char name[64];
		int ret;

		snprintf(name, sizeof(name), "target-%u-%u", fr->rank, t);
		ret = rec_io_open(f->dirfd, name, O_CREAT | O_TRUNC | O_RDWR, f->direct);
		if (ret < 0)
			return ret;
		fr->target_fd[t] = ret;
		ret = rec_io_write_full(ret, f->write_buffer, FLOOR_BYTES, 0);
		if (ret)
			return ret;
	}
	return 0;
}

/* The floor at world ranks in dir (made and removed here), into *out. */
static int restore_floor(const char *dir, uint32_t world, uint32_t samples, uint64_t *ns,
			 struct floor_result *out, bool *direct)
{
	struct floor *f = calloc(1, sizeof(*f));
	uint8_t *source = NULL;
	int reason, ret;

	if (!f)
		return -ENOMEM;
	f->world = world;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->changed, NULL);
	f->dirfd = -1;
	ret = mkdir(dir, 0755) ? -errno : 0;
	if (!ret) {
		f->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		ret = f->dirfd < 0 ? -errno : rec_io_probe_direct(f->dirfd, &reason);
	}
	if (ret >= 0) {
		f->direct = *direct = ret == 1;
		ret = posix_memalign((void **)&source, 2u << 20, FLOOR_BYTES) ? -ENOMEM : 0;
	}
	if (!ret) {
		memset(source, 0x5a, FLOOR_BYTES);
		f->write_buffer = source;
	}
	for (uint32_t r = 0; !ret && r < world; r++) {
		f->ranks[r] = (struct floor_rank){ .f = f, .rank = r };
		ret = floor_rank_setup(f, &f->ranks[r]);
		if (!ret)
			ret = -pthread_create(&f->ranks[r].reader, NULL, floor_reader,
					      &f->ranks[r]);
		f->ranks[r].reader_started = !ret;
		if (!ret)
			ret = -pthread_create(&f->ranks[r].writer, NULL, floor_writer,
					      &f->ranks[r]);
		f->ranks[r].writer_started = !ret;
	}
	if (!ret)
		ret = floor_phases(f, samples, ns, out);
	floor_set_phase(f, FLOOR_PHASES);
	for (uint32_t r = 0; r < world; r++) {
		struct floor_rank *fr = &f->ranks[r];

		if (fr->reader_started)
			pthread_join(fr->reader, NULL);
		if (fr->writer_started)
			pthread_join(fr->writer, NULL);
		for (uint32_t t = 0; fr->read_buffer && t < RESTORE_TARGETS; t++)
			if (fr->target_fd[t] >= 0)
				close(fr->target_fd[t]);
		free(fr->read_buffer);
	}
	if (f->dirfd >= 0)
		close(f->dirfd);
	nftw(dir, restore_remove_one, 16, FTW_DEPTH | FTW_PHYS);
	free(source);
	pthread_cond_destroy(&f->changed);
	pthread_mutex_destroy(&f->lock);
	free(f);
	return ret;
}

static int restore_world(struct restore_run *r)
{
	struct sel_store_config c;
	struct sel_plane planes[RESTORE_PLANES];
	char dir[512], err[512];
	struct bench_ranks_peer peer = {
		.configure = restore_peer_config, .stopped = restore_peer_stopped, .arg = r,
	};
	sel_store *store = NULL;
	int ret;

	bench_ranks_init(&r->ranks, "restore", r->world, 60000, 20000, 60000, 0x5a, &peer);
	ret = bench_ranks_start(&r->ranks);
	if (!ret) {
		ret = restore_planes(r, 0, err, sizeof(err));
		if (!ret) {
			restore_config(r, 0, &c, planes, dir, sizeof(dir));
			ret = sel_store_open(&c, &store, err, sizeof(err));
		}
		if (ret)
			fprintf(stderr, "selene bench restore: %u ranks: %s\n", r->world, err);
	}
	if (!ret)
		ret = restore_measure(r, store);
	if (store && sel_store_close(store, 60000) && !ret)
		ret = -EIO;
	ret = bench_ranks_stop(&r->ranks, ret);
	if (r->planes.plane_count)
		launch_run_planes_close(&r->planes);
	nftw(r->base, restore_remove_one, 16, FTW_DEPTH | FTW_PHYS);
	return ret;
}

/* The disk's floor at each of the worlds, measured before Selene's figures. */
struct restore_floors {
	struct floor_result res[2];
	uint32_t done;
	bool direct;
};

static int restore_floors_measure(const char *dir, const uint32_t *worlds,
				  uint32_t world_count, uint32_t samples, uint64_t *ns,
				  struct restore_floors *out)
{
	char floor_dir[512];
	int ret = 0;

	snprintf(floor_dir, sizeof(floor_dir), "%s/floor", dir);
	for (uint32_t w = 0; !ret && w < world_count; w++) {
		ret = restore_floor(floor_dir, worlds[w], samples, ns, &out->res[w],
				    &out->direct);
		out->done += !ret;
	}
	if (ret)
		fprintf(stderr, "selene bench restore: the raw floor in %s: %s\n", floor_dir,
			sel_strerror(ret));
	return ret;
}

static void restore_floors_print(const struct restore_floors *fl, const uint32_t *worlds)
{
	if (fl->done == 0)
		return;
	printf("raw: the disk alone, no Selene: the same bytes a restore reads, read by a "
	       "thread a rank at once (%s, %u MiB requests, all in flight), idle, while a "
	       "thread a rank writes files of the same size on (loaded), and while those "
	       "writes issue nothing new during a read (yielding)\n",
	       fl->direct ? "O_DIRECT" : "kernel workers, no O_DIRECT",
	       (fl->direct ? FLOOR_CHUNK : FLOOR_WORKER_CHUNK) >> 20);
	printf("raw: ranks  idle p50/p99 ms  loaded p50/p99 ms  yielding p50/p99 ms  "
	       "loaded/idle p50  p99  yielding/idle p50  p99  writes GB/s a rank, loaded "
	       "and yielding\n");
	for (uint32_t i = 0; i < fl->done; i++) {
		const struct floor_result *x = &fl->res[i];

		printf("raw: %5u  %6.2f/%-7.2f  %6.2f/%-7.2f    %6.2f/%-7.2f    %15.2f  %4.2f  "
		       "%17.2f  %4.2f  %.2f, %.2f\n", worlds[i],
		       x->p50[FLOOR_IDLE] / 1e3, x->p99[FLOOR_IDLE] / 1e3,
		       x->p50[FLOOR_LOADED] / 1e3, x->p99[FLOOR_LOADED] / 1e3,
		       x->p50[FLOOR_YIELDING] / 1e3, x->p99[FLOOR_YIELDING] / 1e3,
		       x->p50[FLOOR_LOADED] / x->p50[FLOOR_IDLE],
		       x->p99[FLOOR_LOADED] / x->p99[FLOOR_IDLE],
		       x->p50[FLOOR_YIELDING] / x->p50[FLOOR_IDLE],
		       x->p99[FLOOR_YIELDING] / x->p99[FLOOR_IDLE],
		       x->write_gbps[FLOOR_LOADED], x->write_gbps[FLOOR_YIELDING]);
	}
}

int bench_restore(const char *dir, const char *device, uint32_t ranks, uint32_t samples,
		  uint32_t warmup)
{
	struct restore_result res[2];
	struct restore_floors floors = { .done = 0 };
	char base[512];
	struct restore_run r = { .base = base, .device = device, .samples = samples,
				 .warmup = warmup };
	/* Several ranks first: their peers fork before this process uses a GPU. */
	uint32_t worlds[2] = { ranks, 1 }, world_count = ranks > 1 ? 2 : 1, done = 0;
	int ret = 0;

	if (ranks == 0 || ranks > RESTORE_WORLD_MAX || samples == 0) {
		fprintf(stderr, "selene bench restore: --ranks 1..%u, --records 1 or more\n",
			RESTORE_WORLD_MAX);
		return -EINVAL;
	}
	snprintf(base, sizeof(base), "%s/restore-%d", dir, (int)getpid());
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	r.idle_ns = calloc(samples, sizeof(uint64_t));
	r.loaded_ns = calloc(samples, sizeof(uint64_t));
	if (!r.idle_ns || !r.loaded_ns) {
		ret = -ENOMEM;
		goto out;
	}
	printf("restore: %u restores of a %u-page record (%.1f MiB a rank) idle, then as "
	       "many while %u stores of the same size are kept queued (after %u untimed "
	       "such passes); device %s, %ld cores online\n", samples, RESTORE_PAGES,
	       (double)RESTORE_PAGES * RESTORE_PLANES * RESTORE_UNIT / 1048576.0,
	       RESTORE_STORES_IN_FLIGHT, warmup, device, sysconf(_SC_NPROCESSORS_ONLN));
	fflush(stdout);
	/* The disk alone first: no thread of it runs when the peers fork. */
	ret = restore_floors_measure(dir, worlds, world_count, samples, r.idle_ns, &floors);
	for (uint32_t w = 0; !ret && w < world_count; w++) {
		struct restore_result *x = &res[w];

		r.world = worlds[w];
		if ((mkdir(dir, 0755) && errno != EEXIST) ||
		    (mkdir(base, 0755) && errno != EEXIST)) {
			ret = -errno;
			break;
		}
		ret = restore_world(&r);
		if (ret)
			break;
		x->world = r.world;
		bench_percentiles(r.idle_ns, samples, &x->idle50, &x->idle99);
		bench_percentiles(r.loaded_ns, samples, &x->loaded50, &x->loaded99);
		x->store_gbps = (double)r.stores_done * RESTORE_PAGES * RESTORE_PLANES *
				RESTORE_UNIT / r.store_seconds / 1e9;
		done++;
	}
	printf("restore: ranks  idle p50/p99 ms  loaded p50/p99 ms  loaded/idle p50  p99  "
	       "stores meanwhile GB/s a rank\n");
	for (uint32_t i = 0; i < done; i++)
		printf("restore: %5u  %6.2f/%-7.2f  %6.2f/%-7.2f  %15.2f  %4.2f  %.2f\n",
		       res[i].world, res[i].idle50 / 1e3, res[i].idle99 / 1e3,
		       res[i].loaded50 / 1e3, res[i].loaded99 / 1e3,
		       res[i].loaded50 / res[i].idle50, res[i].loaded99 / res[i].idle99,
		       res[i].store_gbps);
	restore_floors_print(&floors, worlds);
	if (ret)
		fprintf(stderr, "selene bench restore: %s\n", sel_strerror(ret));
out:
	free(r.idle_ns);
	free(r.loaded_ns);
	return ret;
}
