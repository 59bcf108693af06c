/*
 * selene bench restore: a restore's latency with the disk idle and while
 * stores keep every rank's disk thread busy (docs/DESIGN.md
 * section 6: restores first). For one rank, then for the requested number
 * of ranks under the fan-out (rank zero in this process through the public
 * API, every other rank a forked peer on loopback), it stores a few target
 * records, restores them one at a time with nothing else running, then
 * again while RESTORE_STORES_IN_FLIGHT stores of records of the same size
 * are kept in flight, and prints p50 and p99 of both and their ratios.
 * Before that it measures the disk alone the same way (launch/bench/floor.h),
 * so each run says how much of a loaded restore's extra time the disk
 * itself takes.
 */
#include "launch/commands.h"
#include "launch/bench/floor.h"
#include "launch/bench/ranks.h"
#include "launch/bench/store.h"
#include "launch/scratch.h"
#include "launch/worker/run.h"

#include "common/base.h"
#include "common/log.h"
#include "selene/store.h"

#include <errno.h>
#include <inttypes.h>
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
#define RESTORE_BYTES ((uint64_t)RESTORE_PAGES * RESTORE_PLANES * RESTORE_UNIT) /* a rank's */
_Static_assert(RESTORE_WORLD_MAX <= BENCH_FLOOR_RANKS_MAX, "the disk alone at every world");

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
	launch_remove_tree(r->base);
	return ret;
}

/* The disk alone at each of the worlds (launch/bench/floor.h), before Selene. */
struct restore_floors {
	struct bench_floor_result res[2];
	struct bench_floor_io io;
	uint32_t done;
};

static int restore_floors_measure(const char *dir, const uint32_t *worlds,
				  uint32_t world_count, uint32_t samples, uint64_t *ns,
				  struct restore_floors *out)
{
	int ret = 0;

	for (uint32_t w = 0; !ret && !out->io.unavailable && w < world_count; w++) {
		ret = bench_floor_measure(dir, worlds[w], RESTORE_BYTES, samples, ns,
					  &out->res[w], &out->io);
		out->done += !ret && !out->io.unavailable;
	}
	return ret;
}

/* "p50/p99" in ms, right-aligned in width. */
static void restore_print_pair(int width, double p50_us, double p99_us)
{
	char pair[48];

	snprintf(pair, sizeof(pair), "%.2f/%.2f", p50_us / 1e3, p99_us / 1e3);
	printf("  %*s", width, pair);
}

static void restore_floors_print(const struct restore_floors *fl, const uint32_t *worlds)
{
	const struct bench_floor_io *io = &fl->io;

	if (io->unavailable) {
		printf("raw: the disk alone not measured: io_uring is unavailable here (%s)\n",
		       sel_strerror(io->unavailable));
		return;
	}
	if (fl->done == 0)
		return;
	printf("raw: the disk alone, no Selene: the same bytes a restore reads, read by a "
	       "thread a rank at once (%s, %u MiB requests%s, all in flight), idle, while a "
	       "thread a rank writes files of the same size on (loaded), and while those "
	       "writes issue nothing new during a read (yielding)\n",
	       io->direct ? "O_DIRECT" : "buffered", io->chunk_bytes >> 20,
	       io->workers ? ", to kernel workers" : "");
	printf("raw: ranks  idle p50/p99 ms  loaded p50/p99 ms  yielding p50/p99 ms  "
	       "loaded/idle p50   p99  yielding/idle p50   p99  writes GB/s a rank, loaded "
	       "and yielding\n");
	for (uint32_t i = 0; i < fl->done; i++) {
		const struct bench_floor_result *x = &fl->res[i];

		printf("raw: %5u", worlds[i]);
		restore_print_pair(15, x->p50[BENCH_FLOOR_IDLE], x->p99[BENCH_FLOOR_IDLE]);
		restore_print_pair(17, x->p50[BENCH_FLOOR_LOADED], x->p99[BENCH_FLOOR_LOADED]);
		restore_print_pair(19, x->p50[BENCH_FLOOR_YIELDING],
				   x->p99[BENCH_FLOOR_YIELDING]);
		printf("  %15.2f  %4.2f  %17.2f  %4.2f  %.2f, %.2f\n",
		       x->p50[BENCH_FLOOR_LOADED] / x->p50[BENCH_FLOOR_IDLE],
		       x->p99[BENCH_FLOOR_LOADED] / x->p99[BENCH_FLOOR_IDLE],
		       x->p50[BENCH_FLOOR_YIELDING] / x->p50[BENCH_FLOOR_IDLE],
		       x->p99[BENCH_FLOOR_YIELDING] / x->p99[BENCH_FLOOR_IDLE],
		       x->write_gbps[BENCH_FLOOR_LOADED], x->write_gbps[BENCH_FLOOR_YIELDING]);
	}
}

int bench_restore(const char *dir, const char *device, uint32_t ranks, uint32_t samples,
		  uint32_t warmup)
{
	struct restore_result res[2];
	struct restore_floors floors = { .done = 0 };
	char base[LAUNCH_SCRATCH_PATH_MAX + LAUNCH_SCRATCH_NAMES_MAX];
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
	/* Cut short, it would name another directory, which the end removes. */
	if ((size_t)snprintf(base, sizeof(base), "%s/restore-%d", dir, (int)getpid()) >=
	    sizeof(base) - 16) { /* and "/rank7" under it */
		fprintf(stderr, "selene bench restore: %s: too long a path\n", dir);
		return -ENAMETOOLONG;
	}
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
	       (double)RESTORE_BYTES / 1048576.0,
	       RESTORE_STORES_IN_FLIGHT, warmup, device, sysconf(_SC_NPROCESSORS_ONLN));
	fflush(stdout);
	/* The disk alone first: no thread of it runs when the peers fork. */
	ret = restore_floors_measure(dir, worlds, world_count, samples, r.idle_ns, &floors);
	if (ret) /* said */
		goto out;
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
		x->store_gbps = (double)r.stores_done * RESTORE_BYTES / r.store_seconds / 1e9;
		done++;
	}
	if (done > 0)
		printf("restore: ranks  idle p50/p99 ms  loaded p50/p99 ms  loaded/idle p50   p99"
		       "  stores meanwhile GB/s a rank\n");
	for (uint32_t i = 0; i < done; i++) {
		printf("restore: %5u", res[i].world);
		restore_print_pair(15, res[i].idle50, res[i].idle99);
		restore_print_pair(17, res[i].loaded50, res[i].loaded99);
		printf("  %15.2f  %4.2f  %.2f\n", res[i].loaded50 / res[i].idle50,
		       res[i].loaded99 / res[i].idle99, res[i].store_gbps);
	}
	restore_floors_print(&floors, worlds);
	if (ret)
		fprintf(stderr, "selene bench restore: %s\n", sel_strerror(ret));
out:
	free(r.idle_ns);
	free(r.loaded_ns);
	return ret;
}
