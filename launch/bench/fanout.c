/*
 * selene bench fanout: what the multi-rank transport adds to a job (docs/DESIGN.md
 * section 7). For each world size, rank zero runs in this process through
 * the public API and every other rank is a forked peer (sel_peer_start) on
 * loopback, all on the host device.
 *
 * The control path first: noop jobs, which move no bytes and touch no file
 * but pass every rank's engine queue and thread, the fan-out and the
 * answers like any job (sel_bench_noop), one at a time and then 32 in
 * flight. A job's control overhead at N ranks is its p50 there minus its
 * p50 with one rank. Then jobs that move bytes: store-then-fetch of one
 * small page per rank, one at a time, and stores 32 in flight.
 */
#include "launch/commands.h"
#include "launch/bench/ranks.h"
#include "launch/bench/store.h"
#include "launch/scratch.h"

#include "common/base.h"
#include "coordinator/bench.h"
#include "common/log.h"
#include "selene/store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define FANOUT_UNIT 4096u
#define FANOUT_PAGES 64u
#define FANOUT_ROWS 4u
#define FANOUT_TOKENS 64u /* one page per record */
#define FANOUT_WINDOW 32u /* stores in flight in the pipelined phase */

struct fanout_run {
	const char *base;
	uint32_t world;
	uint32_t jobs;
	struct bench_ranks ranks;
	uint8_t *planes[2], *rows;
	uint64_t *noop_ns, *store_ns, *fetch_ns;
	double noops_per_second, stores_per_second;
};

/* One world size's figures: latencies in microseconds, rates per second. */
struct fanout_result {
	uint32_t world;
	double noop50, noop99, store50, store99, fetch50, fetch99;
	double noops_per_second, stores_per_second;
};

static void fanout_config(struct fanout_run *r, uint32_t rank, struct sel_store_config *c,
			  struct sel_plane planes[2], char *dir, size_t dir_size)
{
	snprintf(dir, dir_size, "%s/rank%u", r->base, rank);
	for (int p = 0; p < 2; p++)
		planes[p] = (struct sel_plane){ p ? "v" : "k", FANOUT_UNIT,
						(uintptr_t)r->planes[p] };
	*c = (struct sel_store_config){
		.dir = dir, .page_tokens = FANOUT_TOKENS, .page_plane_count = 2,
		.page_planes = planes,
		.row_plane = { "state", FANOUT_UNIT, (uintptr_t)r->rows },
		.page_count = FANOUT_PAGES, .row_count = FANOUT_ROWS, .device = "host",
		.disk_limit_bytes = 4ull << 30, .durable = false, .records_max = 200000,
		.cluster = r->world > 1 ? &r->ranks.cluster : NULL,
	};
	memset(c->model_identity, 0x5e, sizeof(c->model_identity));
}

static int fanout_peer_config(void *arg, uint32_t rank, struct bench_ranks_config *c,
			      char *err, size_t err_size)
{
	(void)err;
	(void)err_size;
	fanout_config(arg, rank, &c->store, c->planes, c->dir, sizeof(c->dir));
	return 0;
}

/*
 * Between empty polls: a 10 us sleep with 1 us timer slack, which leaves the
 * cores to the peers (a sched_yield loop spends them in the kernel) and
 * adds at most a few microseconds to a measured job.
 */
static void fanout_pause(void)
{
	struct timespec ts = { 0, 10000 };

	nanosleep(&ts, NULL);
}

/* Polls until the event for id arrives. */
static int fanout_wait(sel_store *store, enum sel_event_kind kind, uint64_t id)
{
	for (;;) {
		struct sel_event ev[8];
		uint32_t n = sel_poll(store, ev, SEL_ARRAY_SIZE(ev));

		for (uint32_t i = 0; i < n; i++) {
			if (ev[i].kind == SEL_EVENT_FATAL || ev[i].kind == SEL_EVENT_STORE_FAILED ||
			    ev[i].kind == SEL_EVENT_FETCH_FAILED) {
				fprintf(stderr, "selene bench fanout: job %" PRIu64 " failed: %s\n",
					ev[i].id, ev[i].why);
				return -EIO;
			}
			if (ev[i].kind == kind && ev[i].id == id)
				return 0;
		}
		if (n == 0)
			fanout_pause();
	}
}

/* Polls until done noops have completed on every rank. */
static int fanout_wait_noops(sel_store *store, uint64_t done)
{
	for (;;) {
		struct sel_event ev[8];
		uint32_t n = sel_poll(store, ev, SEL_ARRAY_SIZE(ev));
		uint64_t now_done, failed;

		for (uint32_t i = 0; i < n; i++) {
			fprintf(stderr, "selene bench fanout: unexpected event %d: %s\n",
				(int)ev[i].kind, ev[i].why);
			return -EIO;
		}
		sel_bench_noops(store, &now_done, &failed);
		if (failed) {
			fprintf(stderr, "selene bench fanout: %" PRIu64 " noop jobs failed\n",
				failed);
			return -EIO;
		}
		if (now_done >= done)
			return 0;
		fanout_pause();
	}
}

/* Noops one at a time, each timed from submit to its completion. */
static int fanout_noops(struct fanout_run *r, sel_store *store)
{
	uint64_t done, failed;
	int ret = 0;

	sel_bench_noops(store, &done, &failed);
	for (uint32_t i = 0; !ret && i < r->jobs; i++) {
		uint64_t t0 = sel_monotonic_ns();

		ret = sel_bench_noop(store);
		if (!ret)
			ret = fanout_wait_noops(store, ++done);
		r->noop_ns[i] = sel_monotonic_ns() - t0;
	}
	return ret;
}

/* Noops with FANOUT_WINDOW in flight; completed noops per second. */
static int fanout_noops_pipelined(struct fanout_run *r, sel_store *store)
{
	uint64_t first, done, failed, submitted = 0, t0 = sel_monotonic_ns();
	int ret = 0;

	sel_bench_noops(store, &first, &failed);
	done = first;
	while (!ret && done - first < r->jobs) {
		while (submitted - (done - first) < FANOUT_WINDOW && submitted < r->jobs) {
			ret = sel_bench_noop(store);
			if (ret == SEL_EQUEUEFULL) {
				ret = 0;
				break;
			}
			if (ret)
				break;
			submitted++;
		}
		if (!ret && submitted > done - first)
			ret = fanout_wait_noops(store, done + 1);
		else if (!ret)
			fanout_pause(); /* refused with none of ours in flight: retry */
		sel_bench_noops(store, &done, &failed);
	}
	r->noops_per_second = (double)(done - first) /
			      ((double)(sel_monotonic_ns() - t0) / 1e9);
	return ret;
}

static void fanout_tokens(uint32_t *tokens, uint64_t job)
{
	for (uint32_t i = 0; i < FANOUT_TOKENS; i++)
		tokens[i] = (uint32_t)((job * 2654435761u + i * 40503u) % 151936u);
	tokens[0] = (uint32_t)job; /* distinct first block for every job */
}

/* One store then one fetch of it, each timed from submit to its event. */
static int fanout_job(struct fanout_run *r, sel_store *store, uint64_t job)
{
	uint32_t tokens[FANOUT_TOKENS], src = 0, dst = 1;
	struct sel_publication pub;
	enum sel_outcome outcome;
	struct sel_hit hit;
	sel_history *h;
	uint64_t t0;
	bool joined;
	int ret;

	fanout_tokens(tokens, job);
	ret = sel_history_create(store, tokens, FANOUT_TOKENS, &h);
	if (ret)
		return ret;
	pub = (struct sel_publication){ .checkpoint = job, .history = h,
					.consumed = FANOUT_TOKENS, .page_ids = &src };
	t0 = sel_monotonic_ns();
	ret = sel_store_publish(store, &pub, &outcome);
	if (!ret && outcome != SEL_QUEUED)
		ret = -EAGAIN;
	if (!ret)
		ret = fanout_wait(store, SEL_EVENT_STORED, job);
	r->store_ns[job] = sel_monotonic_ns() - t0;
	if (!ret && !sel_lookup(store, h, 0, &hit))
		ret = -ENOENT;
	if (!ret) {
		t0 = sel_monotonic_ns();
		ret = sel_fetch(store, &hit, &dst, 1, job, &joined);
		if (!ret)
			ret = fanout_wait(store, SEL_EVENT_FETCHED, job);
		r->fetch_ns[job] = sel_monotonic_ns() - t0;
	}
	sel_history_destroy(h);
	return ret;
}

/* Stores with FANOUT_WINDOW in flight; jobs per second of completed stores. */
static int fanout_pipelined(struct fanout_run *r, sel_store *store, uint64_t first)
{
	sel_history *ring[FANOUT_WINDOW] = { 0 };
	uint64_t next = first, done = 0, t0 = sel_monotonic_ns();
	uint32_t in_flight = 0, tokens[FANOUT_TOKENS], src = 2;
	int ret = 0;

	while (!ret && done < r->jobs) {
		struct sel_event ev[FANOUT_WINDOW];
		uint32_t n;

		while (!ret && in_flight < FANOUT_WINDOW && next - first < r->jobs) {
			struct sel_publication pub;
			enum sel_outcome outcome;
			sel_history **h = &ring[next % FANOUT_WINDOW];

			fanout_tokens(tokens, next);
			sel_history_destroy(*h);
			ret = sel_history_create(store, tokens, FANOUT_TOKENS, h);
			if (ret)
				break;
			pub = (struct sel_publication){ .checkpoint = next, .history = *h,
							.consumed = FANOUT_TOKENS,
							.page_ids = &src };
			ret = sel_store_publish(store, &pub, &outcome);
			if (ret || outcome == SEL_RETRY)
				break;
			if (outcome != SEL_QUEUED) {
				ret = -EAGAIN;
				break;
			}
			in_flight++;
			next++;
		}
		n = sel_poll(store, ev, SEL_ARRAY_SIZE(ev));
		for (uint32_t i = 0; i < n; i++) {
			if (ev[i].kind != SEL_EVENT_STORED) {
				fprintf(stderr, "selene bench fanout: store %" PRIu64 " failed: %s\n",
					ev[i].id, ev[i].why);
				ret = -EIO;
			}
			in_flight--;
			done++;
		}
		if (n == 0)
			fanout_pause();
	}
	r->stores_per_second = (double)done / ((double)(sel_monotonic_ns() - t0) / 1e9);
	for (uint32_t i = 0; i < FANOUT_WINDOW; i++)
		sel_history_destroy(ring[i]);
	return ret;
}

/* Runs one world size; fills r's samples. */
static int fanout_world(struct fanout_run *r)
{
	struct sel_store_config c;
	struct sel_plane planes[2];
	char dir[512], err[512];
	struct bench_ranks_peer peer = { .configure = fanout_peer_config, .arg = r };
	sel_store *store = NULL;
	int ret;

	bench_ranks_init(&r->ranks, "fanout", r->world, 20000, 5000, 20000, 0x3c, &peer);
	ret = bench_ranks_start(&r->ranks);
	if (!ret) {
		fanout_config(r, 0, &c, planes, dir, sizeof(dir));
		ret = sel_store_open(&c, &store, err, sizeof(err));
		if (ret)
			fprintf(stderr, "selene bench fanout: %u ranks: %s\n", r->world, err);
	}
	if (!ret)
		ret = fanout_noops(r, store);
	if (!ret)
		ret = fanout_noops_pipelined(r, store);
	for (uint64_t job = 0; !ret && job < r->jobs; job++)
		ret = fanout_job(r, store, job);
	if (!ret)
		ret = fanout_pipelined(r, store, r->jobs);
	if (store && sel_store_close(store, 60000) && !ret)
		ret = -EIO;
	ret = bench_ranks_stop(&r->ranks, ret);
	launch_remove_tree(r->base);
	return ret;
}

static void fanout_report(const struct fanout_result *res, size_t count)
{
	const struct fanout_result *one = &res[0], *last = &res[count - 1];

	printf("fanout: control path, noop jobs (no bytes, no file; every rank's engine)\n");
	printf("fanout: ranks  noop p50/p99 us  overhead p50 us  noops/s (%u in flight)\n",
	       FANOUT_WINDOW);
	for (size_t i = 0; i < count; i++)
		printf("fanout: %5u  %7.1f/%-8.1f  %15.1f  %8.0f\n", res[i].world, res[i].noop50,
		       res[i].noop99, res[i].noop50 - one->noop50, res[i].noops_per_second);
	printf("fanout: jobs that move one %u-byte page in 2 planes and a %u-byte row per "
	       "rank\n", FANOUT_UNIT, FANOUT_UNIT);
	printf("fanout: ranks  store p50/p99 us  fetch p50/p99 us  overhead store/fetch "
	       "p50 us  stores/s (%u in flight)\n", FANOUT_WINDOW);
	for (size_t i = 0; i < count; i++)
		printf("fanout: %5u  %7.1f/%-8.1f  %7.1f/%-8.1f  %9.1f/%-9.1f      %8.0f\n",
		       res[i].world, res[i].store50, res[i].store99, res[i].fetch50,
		       res[i].fetch99, res[i].store50 - one->store50,
		       res[i].fetch50 - one->fetch50, res[i].stores_per_second);
	if (count > 1)
		printf("fanout: control overhead at %u ranks: %.1f us p50 (target: under "
		       "100 us)\n", last->world, last->noop50 - one->noop50);
}

int bench_fanout(const char *dir, uint32_t jobs)
{
	static const uint32_t worlds[] = { 1, 2, 4, 8 };
	struct fanout_result res[SEL_ARRAY_SIZE(worlds)];
	char base[LAUNCH_SCRATCH_PATH_MAX + LAUNCH_SCRATCH_NAMES_MAX];
	struct fanout_run r = { .base = base, .jobs = jobs };
	size_t done = 0;
	int ret = 0;

	/* Cut short, it would name another directory, which the end removes. */
	if ((size_t)snprintf(base, sizeof(base), "%s/fanout-%d", dir, (int)getpid()) >=
	    sizeof(base) - 16) { /* and room for "/rank7" under it */
		fprintf(stderr, "selene bench fanout: %s: too long a path\n", dir);
		return -ENAMETOOLONG;
	}
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	r.noop_ns = calloc(jobs, sizeof(uint64_t));
	r.store_ns = calloc(jobs, sizeof(uint64_t));
	r.fetch_ns = calloc(jobs, sizeof(uint64_t));
	for (int p = 0; p < 2; p++)
		r.planes[p] = calloc(FANOUT_PAGES, FANOUT_UNIT);
	r.rows = calloc(FANOUT_ROWS, FANOUT_UNIT);
	if (!r.noop_ns || !r.store_ns || !r.fetch_ns || !r.planes[0] || !r.planes[1] ||
	    !r.rows) {
		ret = -ENOMEM;
		goto out;
	}
	memset(r.planes[0], 0xa5, FANOUT_PAGES * FANOUT_UNIT);
	printf("fanout: per world size, %u noop jobs one at a time, %u with %u in flight, "
	       "then %u store-then-fetch jobs one at a time and %u stores with %u in "
	       "flight; host device, loopback TCP, %ld cores online\n", jobs, jobs,
	       FANOUT_WINDOW, jobs, jobs, FANOUT_WINDOW, sysconf(_SC_NPROCESSORS_ONLN));
	fflush(stdout);
	for (size_t w = 0; !ret && w < SEL_ARRAY_SIZE(worlds); w++) {
		struct fanout_result *x = &res[w];

		r.world = worlds[w];
		if ((mkdir(dir, 0755) && errno != EEXIST) || (mkdir(base, 0755) && errno != EEXIST)) {
			ret = -errno;
			break;
		}
		ret = fanout_world(&r);
		if (ret)
			break;
		x->world = r.world;
		bench_percentiles(r.noop_ns, jobs, &x->noop50, &x->noop99);
		bench_percentiles(r.store_ns, jobs, &x->store50, &x->store99);
		bench_percentiles(r.fetch_ns, jobs, &x->fetch50, &x->fetch99);
		x->noops_per_second = r.noops_per_second;
		x->stores_per_second = r.stores_per_second;
		done++;
		/* progress, should a larger world not finish; the tables follow */
		fprintf(stderr, "fanout: %u ranks: noop p50 %.1f us, store p50 %.1f us\n",
			x->world, x->noop50, x->store50);
	}
	if (done)
		fanout_report(res, done);
	if (ret)
		fprintf(stderr, "selene bench fanout: %s\n", sel_strerror(ret));
out:
	free(r.noop_ns);
	free(r.store_ns);
	free(r.fetch_ns);
	for (int p = 0; p < 2; p++)
		free(r.planes[p]);
	free(r.rows);
	return ret;
}
