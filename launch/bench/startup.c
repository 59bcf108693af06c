/*
 * selene bench startup: how long a multi-rank store takes to open over
 * directories that already hold many records (docs/DESIGN.md section 7). Rank
 * zero runs in this process through the public API and every other rank is
 * a forked peer (sel_peer_start) on loopback, all on the host device, as in
 * selene bench fanout.
 *
 * First the records are made with the store itself: records_per_rank
 * publications of small root records (64 tokens, no page of their own, a
 * 4 KiB row), many in flight, so every rank's directory holds that many
 * files. Then, rounds times, every rank starts again on those directories
 * and the bench reports the time from the fork of the peers to
 * sel_store_open returning on rank zero, split into its phases: each
 * rank's scan, the join, the summary exchange, the agreement, applying it,
 * and the index build, with the CPU time the ranks spent (steadier than
 * wall time on a shared machine). The first restart after the records are
 * made reads their headers from the disk (they were written with
 * O_DIRECT); later ones from the page cache, as a restart without a reboot
 * does; --cold drops the files' pages before every restart, as a reboot
 * would, and runs the raw path before each: every record file opened, its
 * first 4 KiB read and closed, on as many threads as the ranks' scans use
 * together, its pages dropped before and after (the least any scan must
 * read: the disk's random-read rate is the floor for both). A population
 * left by --keep is reused when its shape matches.
 */
#include "launch/bench/ranks.h"
#include "launch/bench/store.h"
#include "launch/commands.h"
#include "launch/scratch.h"

#include "common/base.h"
#include "coordinator/bench.h"
#include "peer/bench.h"
#include "record/dir.h"
#include "selene/store.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STARTUP_WORLD_MAX 64u
_Static_assert(STARTUP_WORLD_MAX <= BENCH_RANKS_MAX, "bench_ranks forks every rank");
#define STARTUP_UNIT 4096u
#define STARTUP_PAGE_TOKENS 128u /* a 64-token record holds no page of its own */
#define STARTUP_TOKENS 64u
#define STARTUP_WINDOW 48u       /* publications in flight (COORD_JOBS_MAX is 64) */
#define STARTUP_RECORD_BYTES (3u * STARTUP_UNIT) /* header, row, slack */

struct startup_run {
	char base[512];
	uint32_t world;
	uint32_t records;
	struct bench_ranks ranks;
	struct bench_ranks_peer peer; /* what ranks' peers do; arg is this run */
	uint8_t *plane, *rows;
	/* Shared with the forked peers: each writes its own slot. */
	struct sel_bench_peer_startup *peer_times;
	uint64_t close_ns; /* the last startup_close, to every peer reaped */
};

static void startup_config(struct startup_run *r, uint32_t rank, struct sel_store_config *c,
			   struct sel_plane *plane, char *dir, size_t dir_size)
{
	snprintf(dir, dir_size, "%s/rank%u", r->base, rank);
	*plane = (struct sel_plane){ "k", STARTUP_UNIT, (uintptr_t)r->plane };
	*c = (struct sel_store_config){
		.dir = dir, .page_tokens = STARTUP_PAGE_TOKENS, .page_plane_count = 1,
		.page_planes = plane,
		.row_plane = { "state", STARTUP_UNIT, (uintptr_t)r->rows },
		.page_count = 4, .row_count = 4, .device = "host",
		.disk_limit_bytes = (uint64_t)r->records * STARTUP_RECORD_BYTES + (64ull << 20),
		.durable = false, .records_max = r->records + 1024,
		.cluster = r->world > 1 ? &r->ranks.cluster : NULL,
	};
	memset(c->model_identity, 0x5f, sizeof(c->model_identity));
}

static int startup_peer_config(void *arg, uint32_t rank, struct bench_ranks_config *c,
			       char *err, size_t err_size)
{
	(void)err;
	(void)err_size;
	startup_config(arg, rank, &c->store, c->planes, c->dir, sizeof(c->dir));
	return 0;
}

/* A peer says how its start went. */
static void startup_peer_started(void *arg, uint32_t rank, sel_peer *peer)
{
	struct startup_run *r = arg;

	sel_bench_peer_startup(peer, &r->peer_times[rank]);
}

/* Forks the peers and opens rank zero's store: every rank starts. */
static int startup_open(struct startup_run *r, sel_store **store)
{
	struct sel_store_config c;
	struct sel_plane plane;
	char dir[600], err[512];
	int ret;

	memset(r->peer_times, 0, STARTUP_WORLD_MAX * sizeof(*r->peer_times));
	r->peer = (struct bench_ranks_peer){
		.configure = startup_peer_config, .started = startup_peer_started, .arg = r,
	};
	bench_ranks_init(&r->ranks, "startup", r->world, 600000, 60000, 120000, 0x3d, &r->peer);
	ret = bench_ranks_start(&r->ranks);
	if (!ret) {
		startup_config(r, 0, &c, &plane, dir, sizeof(dir));
		ret = sel_store_open(&c, store, err, sizeof(err));
		if (ret)
			fprintf(stderr, "selene bench startup: %u ranks: %s\n", r->world, err);
	}
	return ret;
}

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

/*
 * Closes rank zero's store (the peers then close theirs and exit; each
 * close saves its scan cache, after a syncfs on a directory neither
 * durable nor in memory) and reaps the peers; r->close_ns is how long.
 */
static int startup_close(struct startup_run *r, sel_store *store, int ret)
{
	uint64_t t0 = sel_monotonic_ns();

	if (store && sel_store_close(store, 120000) && !ret)
		ret = -EIO;
	ret = bench_ranks_stop(&r->ranks, ret);
	r->close_ns = sel_monotonic_ns() - t0;
	return ret;
}

static void startup_pause(void)
{
	struct timespec ts = { 0, 20000 };

	nanosleep(&ts, NULL);
}

/* Takes events; a failed store fails the population. */
static int startup_take_events(sel_store *store, sel_history **histories, uint32_t *in_flight)
{
	struct sel_event ev[STARTUP_WINDOW];
	uint32_t n = sel_poll(store, ev, SEL_ARRAY_SIZE(ev));
	int ret = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (ev[i].kind != SEL_EVENT_STORED) {
			fprintf(stderr, "selene bench startup: store %" PRIu64 " failed: %s\n",
				ev[i].id, ev[i].why);
			ret = -EIO;
			continue;
		}
		sel_history_destroy(histories[ev[i].id]);
		histories[ev[i].id] = NULL;
		(*in_flight)--;
	}
	if (n == 0)
		startup_pause();
	return ret;
}

/* Publishes one small root record per index, STARTUP_WINDOW in flight. */
static int startup_publish_all(struct startup_run *r, sel_store *store)
{
	sel_history **histories = calloc(r->records, sizeof(*histories));
	uint32_t tokens[STARTUP_TOKENS], page = 0, in_flight = 0;
	uint64_t next = 0;
	int ret = histories ? 0 : -ENOMEM;

	while (!ret && (next < r->records || in_flight > 0)) {
		while (!ret && in_flight < STARTUP_WINDOW && next < r->records) {
			struct sel_publication pub;
			enum sel_outcome outcome;

			for (uint32_t i = 0; i < STARTUP_TOKENS; i++)
				tokens[i] = (uint32_t)((next * 2654435761u + i * 40503u) % 151936u);
			tokens[0] = (uint32_t)next; /* a distinct first block: a root */
			tokens[1] = (uint32_t)(next >> 32);
			ret = sel_history_create(store, tokens, STARTUP_TOKENS, &histories[next]);
			if (ret)
				break;
			pub = (struct sel_publication){ .checkpoint = next,
							.history = histories[next],
							.consumed = STARTUP_TOKENS, .page_ids = &page };
			ret = sel_store_publish(store, &pub, &outcome);
			if (ret == SEL_EQUEUEFULL || (!ret && outcome == SEL_RETRY)) {
				sel_history_destroy(histories[next]);
				histories[next] = NULL;
				ret = 0;
				break;
			}
			if (!ret && outcome != SEL_QUEUED)
				ret = -EEXIST;
			if (ret)
				break;
			in_flight++;
			next++;
		}
		if (!ret)
			ret = startup_take_events(store, histories, &in_flight);
	}
	for (uint32_t i = 0; i < r->records; i++)
		sel_history_destroy(histories[i]);
	free(histories);
	return ret;
}

/* Makes the records unless a kept population of this shape is there. */
static int startup_populate(struct startup_run *r)
{
	char done_path[600];
	sel_store *store = NULL;
	struct stat st;
	uint64_t t0 = sel_monotonic_ns();
	int ret;
	FILE *f;

	snprintf(done_path, sizeof(done_path), "%s/populated", r->base);
	if (stat(done_path, &st) == 0) {
		printf("startup: reusing the %u x %u records in %s\n", r->world, r->records,
		       r->base);
		return 0;
	}
	launch_remove_tree(r->base);
	if (mkdir(r->base, 0755) && errno != EEXIST)
		return -errno;
	ret = startup_open(r, &store);
	if (!ret)
		ret = startup_publish_all(r, store);
	ret = startup_close(r, store, ret);
	if (ret)
		return ret;
	printf("startup: made %u %s on each of %u %s in %.1f s, of which closing "
	       "(a syncfs of each rank's directory and its scan cache saved) %.1f ms\n",
	       r->records, launch_plural(r->records, "record", "records"), r->world,
	       launch_plural(r->world, "rank", "ranks"), (double)(sel_monotonic_ns() - t0) / 1e9,
	       ms(r->close_ns));
	f = fopen(done_path, "w");
	if (!f)
		return -errno;
	fclose(f);
	return 0;
}

/* User and system CPU time of a rusage. */
static uint64_t cpu_ns(const struct rusage *u)
{
	return ((uint64_t)u->ru_utime.tv_sec + (uint64_t)u->ru_stime.tv_sec) * 1000000000ull +
	       ((uint64_t)u->ru_utime.tv_usec + (uint64_t)u->ru_stime.tv_usec) * 1000ull;
}

/*
 * Drops every file's pages under path from the page cache (what a reboot
 * does to them; the inodes stay cached), so the next scan reads each
 * header from the disk.
 */
static int startup_evict_one(const char *path, const struct stat *st, int flag,
			     struct FTW *ftw)
{
	int fd;

	(void)st;
	(void)ftw;
	if (flag != FTW_F)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	return 0;
}

/* The raw path's list of record files, and how far its threads are. */
struct startup_raw {
	char **paths;
	size_t count, capacity;
	size_t next;    /* the next path no thread took */
	uint64_t reads; /* full 4 KiB reads */
};

static struct startup_raw *raw_listing; /* nftw has no argument */

static int startup_list_one(const char *path, const struct stat *st, int flag,
			    struct FTW *ftw)
{
	struct startup_raw *raw = raw_listing;

	(void)st;
	(void)ftw;
	if (flag != FTW_F || strstr(path, "/.selene"))
		return 0;
	if (raw->count == raw->capacity) {
		size_t capacity = raw->capacity ? raw->capacity * 2 : 4096;
		char **grown = realloc(raw->paths, capacity * sizeof(*grown));

		if (!grown)
			return -1;
		raw->paths = grown;
		raw->capacity = capacity;
	}
	raw->paths[raw->count] = strdup(path);
	return raw->paths[raw->count++] ? 0 : -1;
}

static void *startup_raw_main(void *arg)
{
	struct startup_raw *raw = arg;
	uint8_t block[4096];
	size_t i;

	while ((i = __atomic_fetch_add(&raw->next, 1, __ATOMIC_RELAXED)) < raw->count) {
		int fd = open(raw->paths[i], O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

		if (fd < 0)
			continue;
		if (pread(fd, block, sizeof(block), 0) == (ssize_t)sizeof(block))
			__atomic_fetch_add(&raw->reads, 1, __ATOMIC_RELAXED);
		close(fd);
	}
	return NULL;
}

/*
 * The raw path of a cold restart: the first 4 KiB of every record file,
 * read cold, on as many threads as the ranks' scans use together
 * (rec_dir_scan_threads for each rank's records).
 */
static int startup_raw_round(struct startup_run *r, uint64_t *ns, uint32_t *threads_out)
{
	struct startup_raw raw = { 0 };
	uint32_t threads = rec_dir_scan_threads(r->records) * r->world, started = 0;
	pthread_t *tids = calloc(threads, sizeof(*tids));
	int ret = 0;

	raw_listing = &raw;
	if (!tids || nftw(r->base, startup_list_one, 16, FTW_PHYS) != 0)
		ret = -ENOMEM;
	nftw(r->base, startup_evict_one, 16, FTW_PHYS);
	*ns = sel_monotonic_ns();
	for (uint32_t t = 0; !ret && t + 1 < threads; t++) /* and this thread */
		if (pthread_create(&tids[t], NULL, startup_raw_main, &raw) == 0)
			started++;
	startup_raw_main(&raw);
	for (uint32_t t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	*ns = sel_monotonic_ns() - *ns;
	*threads_out = started + 1;
	if (!ret && raw.reads != (uint64_t)r->records * r->world) {
		fprintf(stderr, "selene bench startup: the raw path read %" PRIu64 " record "
			"headers, not %" PRIu64 "\n", raw.reads, (uint64_t)r->records * r->world);
		ret = -EIO;
	}
	for (size_t i = 0; i < raw.count; i++)
		free(raw.paths[i]);
	free(raw.paths);
	free(tids);
	raw_listing = NULL;
	return ret;
}

/* One restart of every rank over the populated directories. */
static int startup_round(struct startup_run *r, uint32_t round, bool cold)
{
	struct sel_bench_startup z = { 0 };
	struct rusage self0, self1, children0, children1;
	uint64_t t0 = sel_monotonic_ns(), ready_ns, peer_scan_max = 0;
	sel_store *store = NULL;
	struct sel_stats stats;
	uint64_t raw_ns = 0, headers, cached;
	uint32_t raw_threads = 0;
	int ret;

	if (cold) {
		ret = startup_raw_round(r, &raw_ns, &raw_threads);
		if (ret)
			return ret;
		nftw(r->base, startup_evict_one, 16, FTW_PHYS);
	}
	t0 = sel_monotonic_ns();
	getrusage(RUSAGE_SELF, &self0);
	getrusage(RUSAGE_CHILDREN, &children0);
	ret = startup_open(r, &store);
	ready_ns = sel_monotonic_ns() - t0;
	getrusage(RUSAGE_SELF, &self1);
	if (!ret) {
		sel_bench_startup(store, &z);
		sel_store_stats(store, &stats);
		if (stats.records != r->records) {
			fprintf(stderr, "selene bench startup: %" PRIu64 " records after the "
				"restart, not %u\n", stats.records, r->records);
			ret = -EIO;
		}
	}
	ret = startup_close(r, store, ret);
	if (ret)
		return ret;
	headers = z.scan_headers_read;
	cached = z.scan_cache_hits;
	getrusage(RUSAGE_CHILDREN, &children1);
	for (uint32_t rank = 1; rank < r->world; rank++) {
		if (r->peer_times[rank].scan_ns > peer_scan_max)
			peer_scan_max = r->peer_times[rank].scan_ns;
		headers += r->peer_times[rank].scan_headers_read;
		cached += r->peer_times[rank].scan_cache_hits;
	}
	printf("startup: %5u  %8.1f  %8.1f %9.1f %7.1f %9.1f %10.1f %7.1f %6.1f %8.1f %8.1f\n",
	       round, ms(ready_ns), ms(z.scan_ns), ms(peer_scan_max), ms(z.join_ns),
	       ms(z.summary_ns), ms(z.agreement_ns), ms(z.apply_ns), ms(z.index_ns),
	       ms(cpu_ns(&self1) - cpu_ns(&self0)),
	       ms(cpu_ns(&children1) - cpu_ns(&children0)));
	printf("startup: %5u  record files: %" PRIu64 " headers read, %" PRIu64 " taken from "
	       "the ranks' scan caches; closing every rank took %.1f ms\n", round, headers,
	       cached, ms(r->close_ns));
	if (cold) {
		uint64_t scan_ns = z.scan_ns > peer_scan_max ? z.scan_ns : peer_scan_max;

		printf("startup: %5u  raw: the first 4 KiB of each of %" PRIu64 " record files, "
		       "cold, on %u %s: %.1f ms (%.0f files/s); raw / slowest scan %.2f, "
		       "raw / ready %.2f\n",
		       round, (uint64_t)r->records * r->world, raw_threads,
		       launch_plural(raw_threads, "thread", "threads"), ms(raw_ns),
		       (double)r->records * r->world / ((double)raw_ns / 1e9),
		       (double)raw_ns / (double)scan_ns, (double)raw_ns / (double)ready_ns);
	}
	fflush(stdout);
	return 0;
}

int bench_startup(const char *dir, uint32_t world, uint32_t records, uint32_t rounds,
		  bool keep, bool cold)
{
	struct startup_run r = { .world = world, .records = records };
	int ret = 0;

	if (world == 0 || world > STARTUP_WORLD_MAX || records == 0 || rounds == 0) {
		fprintf(stderr, "selene bench startup: ranks 1 .. %u, records and rounds at "
			"least 1\n", STARTUP_WORLD_MAX);
		return -EINVAL;
	}
	/* Cut short, it would name another directory, which the end removes. */
	if ((size_t)snprintf(r.base, sizeof(r.base), "%s/startup-%ux%u", dir, world,
			     records) >= sizeof(r.base) - 16) { /* and "/rank63" */
		fprintf(stderr, "selene bench startup: %s: too long a path\n", dir);
		return -ENAMETOOLONG;
	}
	r.plane = calloc(4, STARTUP_UNIT);
	r.rows = calloc(4, STARTUP_UNIT);
	r.peer_times = mmap(NULL, STARTUP_WORLD_MAX * sizeof(*r.peer_times),
			    PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!r.plane || !r.rows || r.peer_times == MAP_FAILED) {
		ret = -ENOMEM;
		goto out;
	}
	if (mkdir(dir, 0755) && errno != EEXIST) {
		ret = -errno;
		goto out;
	}
	printf("startup: %u %s per rank on %u %s (forked peers on loopback, host "
	       "device), %ld cores online; then %u %s over the same files%s\n", records,
	       launch_plural(records, "record", "records"), world,
	       launch_plural(world, "rank", "ranks"), sysconf(_SC_NPROCESSORS_ONLN), rounds,
	       launch_plural(rounds, "restart", "restarts"),
	       cold ? ", each with their pages dropped from the page cache" : "");
	fflush(stdout);
	ret = startup_populate(&r);
	if (ret)
		goto out;
	printf("startup: times in ms; ready: from the fork of the peers to sel_store_open\n"
	       "startup: returning on rank zero; scan: rank zero's, and the slowest peer's\n"
	       "startup: (they overlap); join: until every peer joined, so it waits for\n"
	       "startup: the peers' scans; summaries: receiving every peer's; apply: every\n"
	       "startup: rank applies its share and confirms; cpu r0: rank zero's CPU time\n"
	       "startup: until ready; cpu peers: the peers' whole lives, their CPU time\n");
	printf("startup: round     ready  scan r0 scan peer    join summaries agreement   "
	       "apply  index   cpu r0 cpu peers\n");
	for (uint32_t i = 0; !ret && i < rounds; i++)
		ret = startup_round(&r, i, cold);
	if (!ret)
		printf("startup: target: ready under 2000 ms for 8 ranks x 100000 records on "
		       "the H200 host\n");
out:
	if (!keep || ret)
		launch_remove_tree(r.base);
	if (ret)
		fprintf(stderr, "selene bench startup: %s\n", sel_strerror(ret));
	free(r.plane);
	free(r.rows);
	if (r.peer_times != MAP_FAILED && r.peer_times)
		munmap(r.peer_times, STARTUP_WORLD_MAX * sizeof(*r.peer_times));
	return ret;
}
