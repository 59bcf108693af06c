/*
 * selene bench: throughput of Selene's staged store and fetch beside the raw
 * io_uring O_DIRECT write and read of the same bytes on the same directory,
 * and of batched scattered device copies beside one bulk copy, each pair
 * measured in one run so the ratio means something on a shared machine.
 */
#include "launch/commands.h"
#include "launch/bench/pool.h"
#include "launch/bench/ranks.h"
#include "launch/bench/store.h"

#include "common/base.h"
#include "common/limits.h"
#include "common/log.h"
#include "launch/args.h"
#include "launch/scratch.h"
#include "record/dir.h"
#include "record/disk.h"
#include "record/format.h"
#include "record/geometry.h"
#include "record/key.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/engine.h"
#include "shard/slab.h"
#include "shard/warm.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RAW_CHUNK_BYTES (8u << 20)
#define RAW_QUEUE_DEPTH 8u
/* With kernel workers, as the disk thread: 2 MiB requests, 32 in flight. */
#define RAW_WORKER_CHUNK_BYTES REC_DISK_WORKER_CHUNK_BYTES
#define RAW_WORKER_QUEUE_DEPTH 32u
/* The raw side's buffer: every request in flight, either way. */
#define RAW_BUFFER_BYTES                                                             \
	((size_t)RAW_CHUNK_BYTES * RAW_QUEUE_DEPTH >                                 \
			 (size_t)RAW_WORKER_CHUNK_BYTES * RAW_WORKER_QUEUE_DEPTH ?    \
		 (size_t)RAW_CHUNK_BYTES * RAW_QUEUE_DEPTH :                         \
		 (size_t)RAW_WORKER_CHUNK_BYTES * RAW_WORKER_QUEUE_DEPTH)
/* Made where missing; a --dir or DIR given must exist already. */
#define BENCH_DIR_DEFAULT "/var/tmp/selene-bench"

struct bench_args {
	const char *dir;
	const char *device;
	uint32_t planes;
	uint64_t plane_bytes;
	uint64_t row_bytes;
	uint32_t pages;   /* per record */
	uint32_t records; /* per round */
	uint32_t rounds;
	uint32_t warmup;  /* store, fetch: untimed rounds first; restore: passes */
	uint32_t window_pages;
	uint64_t read_ahead;
	uint32_t ranks;   /* restore, startup */
	uint32_t pre_reads; /* warm: untimed reads of a round's files (WARM_PRE_READS) */
	bool pre_reads_set; /* --pre-reads given */
	bool durable;
	bool keep;        /* startup */
	bool cold;        /* startup */
	bool rounds_set;  /* --rounds given (startup's default differs) */
	bool chain;       /* fetch: a round's records are one chain, one job */
	bool warm_only;   /* warm: stores into warm slots only, files written after */
	bool file_in_job; /* warm: --file-in-job given (each store writes its file) */
	uint64_t warm_bytes; /* warm: the engine's warm tier (a round's records) */
	const char *pool_manager; /* pool: a running manager, or NULL */
	const char *pool_secret;  /* pool: its secret file */
};

struct bench {
	struct bench_args a;
	const char *what;       /* store, fetch, copy, api, fanout or restore */
	struct rec_geometry g;
	struct rec_identity ns;
	struct rec_dir *dir;
	struct shard_device *dev;
	struct shard_engine *engine;
	struct shard_engine_stats warm_stats; /* the engine's, after the warm-up rounds */
	struct shard_planes planes;
	uint64_t device_pages; /* allocations on the device or in host memory */
	uint64_t device_rows;
	struct shard_slab_pool raw_pool;
	uint8_t *raw_buffer; /* raw_pool's one slot, or NULL */
	uint64_t record_bytes;
	uint32_t io_workers;       /* the engine's disk thread's, and the raw side's */
	uint32_t checksum_threads; /* the engine's */
	uint32_t stores_max;       /* the engine's stores at once */
	const char *disk_engine;   /* the engine's: io_uring or pread/pwrite */
	const char *tag;           /* warm: its lines' prefix ("warm", "warm rank 1") */
	struct warm_barrier *barrier; /* warm --ranks: its ranks' steps in step */
};

/*
 * warm --ranks N: the ranks (forked processes sharing the device) wait for
 * each other before each timed step, so their copies overlap; a rank that
 * fails breaks it and the others stop too, and a wait gives up after 120 s.
 */
struct warm_barrier {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	uint32_t parties, waiting, generation;
	bool broken;
};

#define WARM_BARRIER_TIMEOUT_S 120

static struct warm_barrier *warm_barrier_new(uint32_t parties)
{
	struct warm_barrier *w = mmap(NULL, sizeof(*w), PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pthread_mutexattr_t ma;
	pthread_condattr_t ca;

	if (w == MAP_FAILED)
		return NULL;
	memset(w, 0, sizeof(*w));
	w->parties = parties;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutex_init(&w->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_condattr_init(&ca);
	pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->changed, &ca);
	pthread_condattr_destroy(&ca);
	return w;
}

/* Waits for every rank (none: returns 0 at once); -ECANCELED once broken. */
static int warm_barrier_wait(struct warm_barrier *w)
{
	struct timespec until;
	uint32_t generation;
	int ret = 0;

	if (!w)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += WARM_BARRIER_TIMEOUT_S;
	pthread_mutex_lock(&w->lock);
	generation = w->generation;
	if (++w->waiting == w->parties) {
		w->waiting = 0;
		w->generation++;
		pthread_cond_broadcast(&w->changed);
	}
	while (!w->broken && w->generation == generation && !ret)
		ret = pthread_cond_timedwait(&w->changed, &w->lock, &until);
	if (w->generation == generation) {
		w->broken = true;
		pthread_cond_broadcast(&w->changed);
		ret = -ECANCELED;
	} else {
		ret = 0;
	}
	pthread_mutex_unlock(&w->lock);
	return ret;
}

/* A failed rank lets the others go. */
static void warm_barrier_break(struct warm_barrier *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->broken = true;
	pthread_cond_broadcast(&w->changed);
	pthread_mutex_unlock(&w->lock);
}

static double seconds(uint64_t ns)
{
	return (double)ns / 1e9;
}

/*
 * Writes (or reads) one file of len bytes with 8 MiB requests, 8 in flight
 * or, with kernel workers, as the disk thread then does (record/disk.h):
 * 2 MiB requests, 32 in flight, each handed to a worker.
 */
static int raw_file_io(struct io_uring *ring, int fd, uint8_t *buf, uint64_t len,
		       bool write, bool workers)
{
	uint64_t submitted = 0, completed = 0;
	uint32_t in_flight = 0;
	uint32_t depth = workers ? RAW_WORKER_QUEUE_DEPTH : RAW_QUEUE_DEPTH;
	uint64_t chunk = workers ? RAW_WORKER_CHUNK_BYTES : RAW_CHUNK_BYTES;

	while (completed < len) {
		while (in_flight < depth && submitted < len) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
			uint64_t n = len - submitted < chunk ? len - submitted : chunk;
			uint8_t *p = buf + (submitted / chunk % depth) * chunk;

			if (write)
				io_uring_prep_write(sqe, fd, p, (unsigned)n, submitted);
			else
				io_uring_prep_read(sqe, fd, p, (unsigned)n, submitted);
			if (workers)
				io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
			submitted += n;
			in_flight++;
		}
		io_uring_submit(ring);
		struct io_uring_cqe *cqe;
		int ret = io_uring_wait_cqe(ring, &cqe);

		if (ret)
			return ret;
		if (cqe->res <= 0)
			return cqe->res ? cqe->res : -EIO;
		completed += (uint64_t)cqe->res;
		in_flight--;
		io_uring_cqe_seen(ring, cqe);
	}
	return 0;
}

static void record_key(struct rec_key *key, const struct bench *b, uint32_t round,
		       uint32_t i);

/*
 * The raw baseline: the same number of files of the same size; with
 * files_of a round (not UINT32_MAX), reads of that round's record files.
 */
static int raw_round_of(struct bench *b, bool write, uint32_t files_of, uint64_t *ns)
{
	struct io_uring ring;
	char path[1200];
	uint64_t t0;
	int ret = io_uring_queue_init(RAW_WORKER_QUEUE_DEPTH * 2, &ring, 0);

	if (ret)
		return ret;
	if (b->io_workers) {
		unsigned int workers[2] = { b->io_workers, b->io_workers };

		ret = io_uring_register_iowq_max_workers(&ring, workers);
		if (ret) {
			io_uring_queue_exit(&ring);
			return ret;
		}
	}
	t0 = sel_monotonic_ns();
	for (uint32_t i = 0; !ret && i < b->a.records; i++) {
		int fd;

		if (files_of != UINT32_MAX) {
			struct rec_key key;
			char name[REC_FILE_NAME_BYTES];

			record_key(&key, b, files_of, i);
			rec_file_name(name, &key);
			snprintf(path, sizeof(path), "%s/%s", rec_dir_path(b->dir), name);
		} else {
			snprintf(path, sizeof(path), "%s/raw-%u.bench", rec_dir_path(b->dir), i);
		}
		fd = open(path, write ? O_CREAT | O_TRUNC | O_WRONLY | O_DIRECT :
					O_RDONLY | O_DIRECT, 0644);
		if (fd < 0) {
			ret = -errno;
			break;
		}
		if (write && fallocate(fd, 0, 0, (off_t)b->record_bytes) != 0)
			ret = -errno;
		if (!ret)
			ret = raw_file_io(&ring, fd, b->raw_buffer, b->record_bytes, write,
					  b->io_workers > 0);
		if (!ret && write && b->a.durable && fdatasync(fd) != 0)
			ret = -errno;
		close(fd);
	}
	*ns = sel_monotonic_ns() - t0;
	io_uring_queue_exit(&ring);
	return ret;
}

static int raw_round(struct bench *b, bool write, uint64_t *ns)
{
	return raw_round_of(b, write, UINT32_MAX, ns);
}

/*
 * The host's ceiling beside one file's: a round's bytes split over one
 * file per online core (at most RAW_SPREAD_FILES), each written (or read)
 * by a thread of its own (pwrite, pread: 8 MiB requests, O_DIRECT), all at
 * once. Selene writes one record file at a time
 * per rank, so where one file's I/O serialises in the kernel (tmpfs takes
 * the file's lock for each write) this says how far several ranks, or
 * several stores, could go.
 */
#define RAW_SPREAD_FILES 8u

struct raw_spread {
	struct bench *b;
	uint32_t index;
	bool write;
	uint64_t bytes;
	uint8_t *buffer;
	int result;
	pthread_t thread;
};

static void *raw_spread_main(void *arg)
{
	struct raw_spread *t = arg;
	char path[1200];
	int fd, ret = 0;

	snprintf(path, sizeof(path), "%s/spread-%u.bench", rec_dir_path(t->b->dir), t->index);
	fd = open(path, t->write ? O_CREAT | O_TRUNC | O_WRONLY | O_DIRECT :
				   O_RDONLY | O_DIRECT, 0644);
	if (fd < 0) {
		t->result = -errno;
		return NULL;
	}
	if (t->write && fallocate(fd, 0, 0, (off_t)t->bytes) != 0)
		ret = -errno;
	for (uint64_t done = 0; !ret && done < t->bytes;) {
		size_t n = t->bytes - done < RAW_CHUNK_BYTES ? (size_t)(t->bytes - done) :
							       RAW_CHUNK_BYTES;
		ssize_t got = t->write ? pwrite(fd, t->buffer, n, (off_t)done) :
					 pread(fd, t->buffer, n, (off_t)done);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			ret = got < 0 ? -errno : -EIO;
		else
			done += (uint64_t)got;
	}
	if (!ret && t->write && t->b->a.durable && fdatasync(fd) != 0)
		ret = -errno;
	close(fd);
	t->result = ret;
	return NULL;
}

static uint32_t raw_spread_files(void)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);

	return cores < 1 ? 1 : cores > RAW_SPREAD_FILES ? RAW_SPREAD_FILES : (uint32_t)cores;
}

/* A round's bytes as files files (at most RAW_SPREAD_FILES) at once. */
static int raw_spread_round_of(struct bench *b, bool write, uint32_t files, uint64_t *ns)
{
	struct raw_spread threads[RAW_SPREAD_FILES];
	uint64_t total = b->record_bytes * b->a.records, t0;
	uint64_t share = (total / files + SEL_BLOCK_BYTES - 1) / SEL_BLOCK_BYTES *
			 SEL_BLOCK_BYTES;
	uint32_t started = 0;
	int ret = 0;

	for (uint32_t i = 0; i < files; i++) {
		threads[i] = (struct raw_spread){ .b = b, .index = i, .write = write,
						  .bytes = share };
		if (posix_memalign((void **)&threads[i].buffer, SEL_BLOCK_BYTES,
				   RAW_CHUNK_BYTES))
			threads[i].buffer = NULL;
		else
			memset(threads[i].buffer, 0x5a, RAW_CHUNK_BYTES);
	}
	t0 = sel_monotonic_ns();
	for (uint32_t i = 0; i < files; i++, started++)
		if (!threads[i].buffer ||
		    pthread_create(&threads[i].thread, NULL, raw_spread_main, &threads[i]) != 0)
			break;
	for (uint32_t i = 0; i < started; i++) {
		pthread_join(threads[i].thread, NULL);
		if (threads[i].result && !ret)
			ret = threads[i].result;
	}
	*ns = sel_monotonic_ns() - t0;
	if (started < files && !ret)
		ret = -ENOMEM;
	for (uint32_t i = 0; i < files; i++) {
		char path[1200];

		free(threads[i].buffer);
		if (!write || ret) { /* kept from a write for the read that follows */
			snprintf(path, sizeof(path), "%s/spread-%u.bench", rec_dir_path(b->dir), i);
			unlink(path);
		}
	}
	return ret;
}

static int raw_spread_round(struct bench *b, bool write, uint64_t *ns)
{
	return raw_spread_round_of(b, write, raw_spread_files(), ns);
}

/* Removes what raw_spread_round_of(files) wrote. */
static void raw_spread_remove(struct bench *b, uint32_t files)
{
	char path[1200];

	for (uint32_t i = 0; i < files; i++) {
		snprintf(path, sizeof(path), "%s/spread-%u.bench", rec_dir_path(b->dir), i);
		unlink(path);
	}
}

/* Record i of a round: a root, or with --chain the child of record i - 1. */
static void record_key(struct rec_key *key, const struct bench *b, uint32_t round,
		       uint32_t i)
{
	key->consumed = (uint64_t)(b->a.chain ? i + 1 : 1) * b->a.pages * b->g.page_tokens;
	memset(key->digest.bytes, 0, sizeof(key->digest.bytes));
	sel_put_le32(key->digest.bytes, round);
	sel_put_le32(key->digest.bytes + 4, i);
	key->digest.bytes[15] = 0x5e;
}

/* Submits record i of a round: a store or a fetch of that record. */
typedef int (*bench_submit_fn)(struct bench *b, uint32_t round, uint32_t i,
			       const uint32_t *ids);

static int submit_store(struct bench *b, uint32_t round, uint32_t i, const uint32_t *ids)
{
	struct rec_header h;
	struct rec_key key, parent;
	struct shard_store_job job = { .header = &h, .page_ids = ids,
				       .state_slot = i % (uint32_t)b->device_rows,
				       .warm = b->a.warm_bytes == 0 ? SHARD_STORE_COLD :
					       b->a.warm_only ? SHARD_STORE_WARM_ONLY :
								SHARD_STORE_WARM };
	bool child = b->a.chain && i > 0;
	int ret;

	record_key(&key, b, round, i);
	if (child)
		record_key(&parent, b, round, i - 1);
	ret = rec_header_init(&h, &b->g, &b->ns, &key, child ? &parent : NULL, &key.digest,
			      child ? i * b->a.pages : 0, b->a.pages, sel_realtime_ns());
	return ret ? ret : shard_engine_store(b->engine, i, &job);
}

/*
 * warm (without --file-in-job): record i's file written from its warm copy (a write
 * from warm, as rank zero sends once the record is warm; no device copy).
 */
static int submit_warm_write(struct bench *b, uint32_t round, uint32_t i, const uint32_t *ids)
{
	struct rec_header h;
	struct rec_key key;
	struct shard_store_job job = { .header = &h, .page_ids = ids,
				       .warm = SHARD_STORE_WARM_WRITE };
	int ret;

	record_key(&key, b, round, i);
	ret = rec_header_init(&h, &b->g, &b->ns, &key, NULL, &key.digest, 0, b->a.pages,
			      sel_realtime_ns());
	return ret ? ret : shard_engine_store(b->engine, i, &job);
}

static int submit_fetch(struct bench *b, uint32_t round, uint32_t i, const uint32_t *ids)
{
	struct shard_chain_record chain = { .first_page_index = 0,
					    .tail_page_count = b->a.pages };
	struct shard_fetch_job job = { .chain = &chain, .chain_count = 1,
				       .page_ids = ids, .state_slot = 0 };

	record_key(&chain.key, b, round, i);
	return shard_engine_fetch(b->engine, i, &job);
}

/* A fetch of record i that reads it from its file into warm slots (read-through). */
static int submit_read_through(struct bench *b, uint32_t round, uint32_t i, const uint32_t *ids)
{
	struct shard_chain_record chain = { .first_page_index = 0,
					    .tail_page_count = b->a.pages };
	struct shard_fetch_job job = { .chain = &chain, .chain_count = 1,
				       .page_ids = ids, .state_slot = 0, .read_through = true };

	record_key(&chain.key, b, round, i);
	return shard_engine_fetch(b->engine, i, &job);
}

/*
 * Runs a round's records through the engine, keeping up to three jobs
 * queued so it never idles between them; page ids are scattered by stride.
 */
static int selene_round(struct bench *b, uint32_t round, bench_submit_fn submit,
			uint32_t stride, uint64_t *ns)
{
	uint32_t *ids = malloc(b->a.pages * sizeof(uint32_t)), outstanding = 0;
	struct shard_completion c = { 0 };
	uint64_t t0;
	int ret = 0;

	if (!ids)
		return -ENOMEM;
	for (uint32_t p = 0; p < b->a.pages; p++)
		ids[p] = (p * stride) % (uint32_t)b->device_pages;
	t0 = sel_monotonic_ns();
	for (uint32_t i = 0; !ret && i < b->a.records; i++) {
		ret = submit(b, round, i, ids);
		outstanding += ret == 0;
		/* enough in flight for every store the engine runs at once */
		if (!ret && outstanding > SHARD_STORES_MAX + 1) {
			shard_engine_wait(b->engine, &c);
			outstanding--;
			ret = c.result;
		}
	}
	while (outstanding > 0) {
		struct shard_completion last;

		shard_engine_wait(b->engine, &last);
		outstanding--;
		if (!ret && last.result) {
			ret = last.result;
			c = last;
		}
	}
	*ns = sel_monotonic_ns() - t0;
	if (ret)
		fprintf(stderr, "selene bench: %s failed: %s %s\n",
			submit == submit_store ? "store" :
			submit == submit_warm_write ? "write from warm" : "fetch",
			sel_strerror(ret), c.why);
	free(ids);
	return ret;
}

/*
 * --chain: the round's records as one fetch job, root first (a long
 * prefix's restore: the reads run on across records), into distinct page
 * ids scattered by stride.
 */
static int selene_chain_round(struct bench *b, uint32_t round, uint64_t *ns)
{
	uint32_t count = b->a.records * b->a.pages;
	struct shard_chain_record *chain = calloc(b->a.records, sizeof(*chain));
	uint32_t *ids = malloc(count * sizeof(uint32_t));
	struct shard_completion c = { 0 };
	struct shard_fetch_job job = { .chain = chain, .chain_count = b->a.records,
				       .page_ids = ids };
	uint64_t t0;
	int ret = -ENOMEM;

	if (chain && ids) {
		for (uint32_t i = 0; i < b->a.records; i++) {
			record_key(&chain[i].key, b, round, i);
			chain[i].first_page_index = i * b->a.pages;
			chain[i].tail_page_count = b->a.pages;
		}
		for (uint32_t p = 0; p < count; p++)
			ids[p] = (uint32_t)((uint64_t)p * 11 % b->device_pages);
		t0 = sel_monotonic_ns();
		ret = shard_engine_fetch(b->engine, 0, &job);
		if (!ret) {
			shard_engine_wait(b->engine, &c);
			ret = c.result;
		}
		*ns = sel_monotonic_ns() - t0;
		if (ret)
			fprintf(stderr, "selene bench: the chain's fetch failed: %s %s\n",
				sel_strerror(ret), c.why);
	}
	free(chain);
	free(ids);
	return ret;
}

static int selene_fetch_round(struct bench *b, uint32_t round, uint64_t *ns)
{
	return b->a.chain ? selene_chain_round(b, round, ns) :
			    selene_round(b, round, submit_fetch, 11, ns);
}

static int bench_geometry(struct bench *b)
{
	struct rec_plane *planes = calloc(b->a.planes, sizeof(*planes));
	struct rec_geometry_spec spec = {
		.page_tokens = 64, .page_plane_count = b->a.planes, .page_planes = planes,
		/* --chain fetches every record of a round at once, each page its own */
		.page_count = b->a.pages * (b->a.chain ? b->a.records + 1 : 2), .row_count = 4,
		.rank = 0, .world_size = 1,
	};
	struct rec_identity model;
	char err[256];
	int ret;

	if (!planes)
		return -ENOMEM;
	for (uint32_t i = 0; i < b->a.planes; i++) {
		snprintf(planes[i].name, sizeof(planes[i].name), "plane.%03u", i);
		planes[i].unit_bytes = b->a.plane_bytes;
	}
	strcpy(spec.row_plane.name, "state");
	spec.row_plane.unit_bytes = b->a.row_bytes;
	ret = rec_geometry_init(&b->g, &spec, err, sizeof(err));
	free(planes);
	if (ret) {
		fprintf(stderr, "selene bench: %s\n", err);
		return ret;
	}
	rec_model_identity_from_name(&model, "selene-bench");
	rec_namespace_identity(&b->ns, &model, REC_STATE_ORDINARY);
	b->device_pages = spec.page_count;
	b->device_rows = spec.row_count;
	b->record_bytes = rec_geometry_file_bytes(&b->g, b->a.pages, true);
	return 0;
}

/* Device (or host-memory) planes the jobs copy from and to. */
static int bench_planes(struct bench *b)
{
	for (uint32_t p = 0; p < b->g.page_plane_count; p++) {
		uint64_t bytes = b->g.page_planes[p].unit_bytes * b->device_pages;
		int ret;

		if (shard_device_is_cuda(b->dev)) {
			ret = shard_device_cuda_alloc(b->dev, bytes, &b->planes.page_base[p]);
			if (ret)
				return ret;
		} else {
			void *mem = aligned_alloc(SEL_BLOCK_BYTES, sel_align_up(bytes, SEL_BLOCK_BYTES));

			if (!mem)
				return -ENOMEM;
			memset(mem, (int)p, bytes);
			b->planes.page_base[p] = (uintptr_t)mem;
		}
	}
	if (shard_device_is_cuda(b->dev))
		return shard_device_cuda_alloc(b->dev, b->g.row_plane.unit_bytes * b->device_rows,
					       &b->planes.row_base);
	b->planes.row_base = (uintptr_t)calloc(b->device_rows, b->g.row_plane.unit_bytes);
	return b->planes.row_base ? 0 : -ENOMEM;
}

static void bench_free_planes(struct bench *b)
{
	for (uint32_t p = 0; p < b->g.page_plane_count; p++) {
		if (!b->planes.page_base[p])
			continue;
		if (shard_device_is_cuda(b->dev))
			shard_device_cuda_free(b->dev, b->planes.page_base[p]);
		else
			free((void *)(uintptr_t)b->planes.page_base[p]);
	}
	if (b->planes.row_base) {
		if (shard_device_is_cuda(b->dev))
			shard_device_cuda_free(b->dev, b->planes.row_base);
		else
			free((void *)(uintptr_t)b->planes.row_base);
	}
}

static int bench_open(struct bench *b)
{
	struct rec_dir_options dir_options = { .base_path = b->a.dir, .namespace_id = &b->ns,
					       .geometry = &b->g, .durable = b->a.durable };
	struct shard_engine_options options = { .geometry = &b->g, .planes = &b->planes,
						.register_pool = true,
						.window_pages = b->a.window_pages,
						.read_ahead_bytes = b->a.read_ahead,
						.warm_bytes = b->a.warm_bytes };
	char err[512];
	int ret;

	ret = bench_geometry(b);
	if (ret)
		return ret;
	if (strcmp(b->what, "warm") == 0) {
		/* A round's records: pages and row pieces each. */
		uint64_t row_pieces = (b->g.row_record_bytes + b->g.page_record_bytes - 1) /
				      b->g.page_record_bytes;

		uint64_t slots = (b->a.pages + row_pieces) * b->a.records;

		/* Whole groups of slots: a tier's slots are rounded down to them. */
		if (slots > SHARD_WARM_GROUP_SLOTS)
			slots = sel_align_up(slots, SHARD_WARM_GROUP_SLOTS);
		b->a.warm_bytes = slots * b->g.page_record_bytes;
		options.warm_bytes = b->a.warm_bytes;
	}
	ret = shard_device_open(b->a.device, 0, &b->dev, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "selene bench: device %s: %s\n", b->a.device, err);
		return ret;
	}
	ret = bench_planes(b);
	if (!ret)
		ret = rec_dir_open(&dir_options, &b->dir, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "selene bench: %s\n", ret == -ENOMEM ? "out of memory" : err);
		return ret;
	}
	if (!rec_dir_direct(b->dir))
		fprintf(stderr, "selene bench: O_DIRECT is refused in %s; the raw "
			"baseline needs it\n", rec_dir_path(b->dir));
	options.dir = b->dir;
	options.device = b->dev;
	ret = shard_engine_open(&options, &b->engine, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "selene bench: %s\n", err);
		return ret;
	}
	{
		struct shard_engine_stats stats;

		shard_engine_stats(b->engine, &stats);
		b->io_workers = stats.io_workers;
		b->checksum_threads = stats.checksum_threads;
		b->stores_max = stats.stores_max;
		b->disk_engine = stats.disk_engine;
	}
	/* Huge pages, as Selene's staging has: the same cost to pin for O_DIRECT. */
	ret = shard_slab_init(&b->raw_pool, RAW_BUFFER_BYTES, 1);
	if (ret)
		return ret;
	b->raw_buffer = shard_slab_slot(&b->raw_pool, 0);
	memset(b->raw_buffer, 0x5a, RAW_BUFFER_BYTES);
	return 0;
}

static void bench_close(struct bench *b)
{
	shard_engine_close(b->engine);
	bench_free_planes(b);
	shard_device_close(b->dev);
	rec_dir_close(b->dir);
	if (b->raw_buffer)
		shard_slab_destroy(&b->raw_pool);
}

static void remove_round_files(struct bench *b, uint32_t round)
{
	char path[1200];

	for (uint32_t i = 0; i < b->a.records; i++) {
		struct rec_key key;
		char name[REC_FILE_NAME_BYTES];

		record_key(&key, b, round, i);
		rec_file_name(name, &key);
		snprintf(path, sizeof(path), "%s/%s", rec_dir_path(b->dir), name);
		unlink(path);
		snprintf(path, sizeof(path), "%s/raw-%u.bench", rec_dir_path(b->dir), i);
		unlink(path);
	}
}

#define BENCH_ROUNDS_MAX 1000u

static int compare_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * Totals over all rounds, and the median of the per-round ratios: each
 * round runs raw and Selene back to back, so its ratio saw one disk state.
 */
static void report(const char *what, const struct bench *b, const uint64_t *selene_ns,
		   const uint64_t *raw_ns, uint32_t rounds)
{
	double bytes = (double)b->record_bytes * b->a.records, ratios[BENCH_ROUNDS_MAX];
	uint64_t selene_total = 0, raw_total = 0;

	for (uint32_t r = 0; r < rounds; r++) {
		selene_total += selene_ns[r];
		raw_total += raw_ns[r];
		ratios[r] = (double)raw_ns[r] / (double)selene_ns[r];
	}
	qsort(ratios, rounds, sizeof(ratios[0]), compare_double);
	printf("%s: selene %.3f GB/s, raw io_uring O_DIRECT %.3f GB/s, ratio %.3f "
	       "(median of rounds %.3f, range %.3f-%.3f; %u %s of %u %s%s of "
	       "%.1f MiB, %u %s of %u %s x %" PRIu64 " bytes, device %s, disk "
	       "thread %s with %u kernel %s (raw side too), %u checksum %s, "
	       "%u %s at once, %s)\n",
	       what, bytes * rounds / seconds(selene_total) / 1e9,
	       bytes * rounds / seconds(raw_total) / 1e9,
	       (double)raw_total / (double)selene_total, ratios[rounds / 2], ratios[0],
	       ratios[rounds - 1], rounds, launch_plural(rounds, "round", "rounds"),
	       b->a.records, launch_plural(b->a.records, "record", "records"),
	       b->a.chain && strcmp(what, "fetch") == 0 ? " (one chain, one job)" : "",
	       (double)b->record_bytes / 1048576.0, b->a.pages,
	       launch_plural(b->a.pages, "page", "pages"), b->a.planes,
	       launch_plural(b->a.planes, "plane", "planes"), b->a.plane_bytes,
	       b->dev->ops->name, b->disk_engine, b->io_workers,
	       launch_plural(b->io_workers, "worker", "workers"), b->checksum_threads,
	       launch_plural(b->checksum_threads, "thread", "threads"), b->stores_max,
	       launch_plural(b->stores_max, "store", "stores"),
	       b->a.durable ? "durable" : "not durable");
}

/* The host's ceiling (raw_spread_round), best of three, after the rounds. */
static int report_spread(struct bench *b)
{
	uint64_t write_ns = UINT64_MAX, read_ns = UINT64_MAX, ns;
	double bytes = (double)b->record_bytes * b->a.records;
	int ret = 0;

	for (int i = 0; !ret && i < 3; i++) {
		ret = raw_spread_round(b, true, &ns);
		if (!ret && ns < write_ns)
			write_ns = ns;
		if (!ret)
			ret = raw_spread_round(b, false, &ns);
		if (!ret && ns < read_ns)
			read_ns = ns;
	}
	if (ret) {
		fprintf(stderr, "selene bench: the raw ceiling: %s\n", sel_strerror(ret));
		return ret;
	}
	printf("ceiling: raw, a round's bytes as %u files at once (a thread each, "
	       "pwrite/pread of 8 MiB): write %.3f GB/s, read %.3f GB/s (best of 3); Selene "
	       "runs up to %u stores at once on a rank, each its own file, and one fetch at a "
	       "time\n",
	       raw_spread_files(), bytes / seconds(write_ns) / 1e9, bytes / seconds(read_ns) / 1e9,
	       b->stores_max);
	return 0;
}

/* One part of the transfer thread's time: what it did, and for how long. */
struct time_part {
	const char *what;
	uint64_t ns;
};

/*
 * "LEAD for S s: P% what, ..., P% the rest": where run_ns went, the timed
 * rounds only (the warm-up's share taken off, as warm_* says).
 */
static void report_time_split(const char *lead, uint64_t run_ns, uint64_t warm_run_ns,
			      const struct time_part *parts, const uint64_t *warm_ns,
			      uint32_t count)
{
	double run = (double)(run_ns - warm_run_ns), rest = run;

	if (run_ns <= warm_run_ns)
		return;
	printf("%s for %.3f s:", lead, run / 1e9);
	for (uint32_t i = 0; i < count; i++) {
		double ns = (double)(parts[i].ns - warm_ns[i]);

		printf(" %.1f%% %s,", 100.0 * ns / run, parts[i].what);
		rest -= ns;
	}
	printf(" %.1f%% the rest\n", 100.0 * rest / run);
}

/* Where the transfer thread's time went while the stores ran (engine stats). */
static void report_store_time(const struct bench *b)
{
	const struct shard_engine_stats *w = &b->warm_stats;
	struct shard_engine_stats st;
	char sums[64];

	shard_engine_stats(b->engine, &st);
	snprintf(sums, sizeof(sums), "in checksum passes (%u %s)", st.checksum_threads,
		 launch_plural(st.checksum_threads, "thread", "threads"));
	report_time_split("store: the transfer thread ran stores", st.store_run_ns,
			  w->store_run_ns,
			  (const struct time_part[]){ { "copying from the device", st.store_copy_ns },
						      { sums, st.store_sum_ns },
						      { "waiting for the disk", st.store_wait_ns } },
			  (const uint64_t[]){ w->store_copy_ns, w->store_sum_ns, w->store_wait_ns },
			  3);
}

/*
 * Where the transfer thread's time went in fetches (the engine stats of
 * after less those of before), and how the verification ran on the
 * restore pool: what bounds a fetch is the part that dominates, and a
 * thread's hash rate well under xxh3's in-cache rate says its pages came
 * from memory (or that the cores were shared). records: the fetches' records.
 */
static void report_fetch_split(const char *tag, const struct shard_engine_stats *w,
			       const struct shard_engine_stats *st, uint64_t records)
{
	char lead[96], verifying[96];
	double hash_ns = (double)(st->fetch_hash_ns - w->fetch_hash_ns);
	double run_ns = (double)(st->fetch_run_ns - w->fetch_run_ns);
	double hashed = (double)(st->fetch_bytes_verified - w->fetch_bytes_verified);

	snprintf(lead, sizeof(lead), "%s: the transfer thread ran fetches", tag);
	snprintf(verifying, sizeof(verifying), "waiting for verification (%u %s)",
		 st->verify_threads, launch_plural(st->verify_threads, "thread", "threads"));
	report_time_split(lead, st->fetch_run_ns, w->fetch_run_ns,
			  (const struct time_part[]){
				  { "opening records", st->fetch_open_ns },
				  { "waiting for reads", st->fetch_wait_ns },
				  { verifying, st->fetch_verify_ns },
				  { "device copies", st->fetch_copy_ns },
				  { "ending fetches after their last window", st->fetch_end_ns } },
			  (const uint64_t[]){ w->fetch_open_ns, w->fetch_wait_ns, w->fetch_verify_ns,
					      w->fetch_copy_ns, w->fetch_end_ns },
			  5);
	if (st->fetch_end_ns > w->fetch_end_ns)
		printf("%s: the ends of fetches: %.1f%% waiting for the last window's copy, "
		       "%.1f%% the row (its read and copy), %.1f%% closing files\n", tag,
		       100.0 * (double)(st->fetch_end_copy_ns - w->fetch_end_copy_ns) /
			       (double)(st->fetch_end_ns - w->fetch_end_ns),
		       100.0 * (double)(st->fetch_end_row_ns - w->fetch_end_row_ns) /
			       (double)(st->fetch_end_ns - w->fetch_end_ns),
		       100.0 * (double)(st->fetch_end_close_ns - w->fetch_end_close_ns) /
			       (double)(st->fetch_end_ns - w->fetch_end_ns));
	printf("%s: %" PRIu64 " of %" PRIu64 " records opened ahead of their first "
	       "window (a chain's next record, while the one before was read)\n", tag,
	       st->fetch_opens_ahead - w->fetch_opens_ahead, records);
	printf("%s: %" PRIu64 " windows verified in %" PRIu64 " groups (a group takes "
	       "every window whose read has landed; up to %" PRIu64 " queued at once), "
	       "on %u %s\n", tag, st->fetch_windows - w->fetch_windows,
	       st->fetch_verify_passes - w->fetch_verify_passes, st->fetch_verify_groups_max,
	       st->verify_threads, launch_plural(st->verify_threads, "thread", "threads"));
	if (st->fetch_windows_read_here > w->fetch_windows_read_here)
		printf("%s: %" PRIu64 " windows read by their verifying threads (memory-backed "
		       "files: each page read in chunks and hashed while in cache; its reads "
		       "count as verification)\n", tag,
		       st->fetch_windows_read_here - w->fetch_windows_read_here);
	if (hash_ns > 0 && run_ns > 0)
		printf("%s: verification hashed %.2f GB in %.3f thread-seconds: %.2f GB/s a "
		       "thread, %.2f threads busy hashing on average while fetches ran\n",
		       tag, hashed / 1e9, hash_ns / 1e9, hashed / hash_ns, hash_ns / run_ns);
	{
		double before = (double)(st->fetch_verify_lead_ns - w->fetch_verify_lead_ns);
		double span = (double)(st->fetch_verify_span_ns - w->fetch_verify_span_ns);
		double tail = (double)(st->fetch_verify_tail_ns - w->fetch_verify_tail_ns);

		if (span > 0 && run_ns > 0)
			printf("%s: of the fetches' time, %.1f%% before their first page's "
			       "verification (plan, open, first reads, wake-ups), %.1f%% from it "
			       "to their last page's end (%.2f of %u threads busy then), %.1f%% "
			       "after it (last copy, row, closes)\n", tag, 100.0 * before / run_ns,
			       100.0 * span / run_ns, hash_ns / span, st->verify_threads,
			       100.0 * tail / run_ns);
	}
}

/* Where the transfer thread's time went in the fetches (engine stats). */
static void report_fetch_time(const struct bench *b)
{
	struct shard_engine_stats st;

	shard_engine_stats(b->engine, &st);
	report_fetch_split("fetch", &b->warm_stats, &st, (uint64_t)b->a.rounds * b->a.records);
}

/*
 * One round: raw writes and Selene's stores, and with and_fetch raw reads
 * and Selene's fetches, back to back so both see the same disk conditions;
 * ns: raw write, store, raw read, fetch. Odd rounds run Selene's side
 * first: what one side leaves the disk to do (a virtual disk's host still
 * writing back, a cache still warm) falls on the other side in turn.
 */
static int bench_round(struct bench *b, uint32_t round, bool and_fetch, uint64_t ns[4])
{
	bool selene_first = round % 2 == 1;
	int ret = 0;

	if (selene_first)
		ret = selene_round(b, round, submit_store, 7, &ns[1]);
	if (!ret)
		ret = raw_round(b, true, &ns[0]);
	if (!ret && !selene_first)
		ret = selene_round(b, round, submit_store, 7, &ns[1]);
	if (!ret && and_fetch) {
		if (selene_first)
			ret = selene_fetch_round(b, round, &ns[3]);
		if (!ret)
			ret = raw_round(b, false, &ns[2]);
		if (!ret && !selene_first)
			ret = selene_fetch_round(b, round, &ns[3]);
	}
	remove_round_files(b, round);
	return ret;
}

/*
 * --warmup rounds, untimed (their records under round numbers of their
 * own), then the timed rounds; the stores' time split counts only these.
 */
static int bench_store(struct bench *b, bool and_fetch)
{
	static uint64_t selene_ns[BENCH_ROUNDS_MAX], raw_ns[BENCH_ROUNDS_MAX];
	static uint64_t fetch_ns[BENCH_ROUNDS_MAX], raw_read_ns[BENCH_ROUNDS_MAX];
	uint64_t ns[4] = { 0 }; /* without fetches, [2] and [3] stay 0 */
	int ret = 0;

	for (uint32_t w = 0; !ret && w < b->a.warmup; w++)
		ret = bench_round(b, BENCH_ROUNDS_MAX + w, and_fetch, ns);
	shard_engine_stats(b->engine, &b->warm_stats);
	for (uint32_t r = 0; !ret && r < b->a.rounds; r++) {
		ret = bench_round(b, r, and_fetch, ns);
		raw_ns[r] = ns[0];
		selene_ns[r] = ns[1];
		raw_read_ns[r] = ns[2];
		fetch_ns[r] = ns[3];
	}
	if (ret) {
		fprintf(stderr, "selene bench: %s\n", sel_strerror(ret));
		return ret;
	}
	report("store", b, selene_ns, raw_ns, b->a.rounds);
	report_store_time(b);
	if (!and_fetch)
		return 0;
	report("fetch", b, fetch_ns, raw_read_ns, b->a.rounds);
	report_fetch_time(b);
	return report_spread(b);
}

/* Scattered page planes through batched copies, beside one bulk copy. */
static int bench_copy(struct bench *b)
{
	uint32_t count = b->a.pages * b->g.page_plane_count;
	struct shard_copy *copies = calloc(count, sizeof(*copies));
	uint64_t bytes = b->a.plane_bytes * count, t0, ns[4] = { 0 }, bulk_device = 0;
	uint8_t *host;
	int ret = 0;

	if (!copies || posix_memalign((void **)&host, SEL_BLOCK_BYTES, (size_t)bytes))
		return -ENOMEM;
	/* The bulk side moves the same bytes to and from one device range. */
	if (shard_device_is_cuda(b->dev)) {
		ret = shard_device_cuda_alloc(b->dev, bytes, &bulk_device);
	} else {
		bulk_device = (uintptr_t)aligned_alloc(SEL_BLOCK_BYTES, (size_t)bytes);
		ret = bulk_device ? 0 : -ENOMEM;
		if (!ret)
			memset((void *)(uintptr_t)bulk_device, 0, (size_t)bytes);
	}
	memset(host, 1, (size_t)bytes);
	if (!ret)
		ret = shard_device_bind(b->dev);
	if (!ret)
		ret = b->dev->ops->register_host(b->dev, host, bytes);
	for (uint32_t i = 0; i < count; i++) {
		uint32_t page = i / b->g.page_plane_count, plane = i % b->g.page_plane_count;

		copies[i] = (struct shard_copy){
			.device_address = b->planes.page_base[plane] +
					  b->a.plane_bytes * ((page * 7) % b->device_pages),
			.host = host + b->a.plane_bytes * i,
			.bytes = b->a.plane_bytes,
		};
	}
	for (uint32_t r = 0; !ret && r < b->a.rounds; r++) {
		struct shard_copy bulk = { .device_address = bulk_device, .host = host,
					   .bytes = bytes };

		for (int dir = 0; dir < 2 && !ret; dir++) {
			t0 = sel_monotonic_ns();
			ret = shard_device_copy(b->dev, (enum shard_copy_direction)dir, copies, count);
			if (!ret)
				ret = shard_device_synchronize(b->dev);
			ns[dir] += sel_monotonic_ns() - t0;
			t0 = sel_monotonic_ns();
			if (!ret)
				ret = shard_device_copy(b->dev, (enum shard_copy_direction)dir, &bulk, 1);
			if (!ret)
				ret = shard_device_synchronize(b->dev);
			ns[2 + dir] += sel_monotonic_ns() - t0;
		}
	}
	if (!ret)
		printf("copy: device to host %.2f GB/s batched scattered, %.2f GB/s bulk "
		       "(ratio %.3f); host to device %.2f GB/s batched scattered, %.2f GB/s "
		       "bulk (ratio %.3f); %u entries of %" PRIu64 " bytes, device %s\n",
		       (double)bytes * b->a.rounds / (double)ns[0],
		       (double)bytes * b->a.rounds / (double)ns[2],
		       (double)ns[2] / (double)ns[0],
		       (double)bytes * b->a.rounds / (double)ns[1],
		       (double)bytes * b->a.rounds / (double)ns[3],
		       (double)ns[3] / (double)ns[1], count, b->a.plane_bytes,
		       b->dev->ops->name);
	b->dev->ops->unregister_host(b->dev, host);
	if (shard_device_is_cuda(b->dev))
		shard_device_cuda_free(b->dev, bulk_device);
	else
		free((void *)(uintptr_t)bulk_device);
	free(host);
	free(copies);
	return ret;
}

/*
 * Unlinks a round's records through the engine (their warm slots go too),
 * or with drop_only drops their warm copies (their files stay).
 */
static int warm_unlink_round(struct bench *b, uint32_t round, bool drop_only)
{
	struct shard_completion c;
	int ret = 0;

	for (uint32_t i = 0; i < b->a.records; i++) {
		struct rec_key key;
		int submitted;

		record_key(&key, b, round, i);
		submitted = drop_only ? shard_engine_warm_drop(b->engine, i, &key) :
					shard_engine_unlink(b->engine, i, &key);
		if (submitted) {
			ret = ret ? ret : submitted;
			continue;
		}
		shard_engine_wait(b->engine, &c);
		ret = ret ? ret : c.result;
	}
	return ret;
}

/* A bulk copy of bytes between one device range and registered host memory; ns. */
static int bulk_copy(struct bench *b, enum shard_copy_direction dir, uint64_t device,
		     uint8_t *host, uint64_t bytes, uint64_t *ns)
{
	struct shard_copy bulk = { .device_address = device, .host = host, .bytes = bytes };
	uint64_t t0 = sel_monotonic_ns();
	int ret = shard_device_copy(b->dev, dir, &bulk, 1);
	int drained = shard_device_synchronize(b->dev);

	*ns = sel_monotonic_ns() - t0;
	return ret ? ret : drained;
}

static void report_warm(const char *tag, const char *what, const char *bulk_what,
			double bytes, const double *selene_ns, const double *bulk_ns,
			uint32_t rounds)
{
	double selene = 0, bulk = 0, ratios[BENCH_ROUNDS_MAX];

	for (uint32_t r = 0; r < rounds; r++) {
		selene += selene_ns[r];
		bulk += bulk_ns[r];
		ratios[r] = bulk_ns[r] / selene_ns[r];
	}
	qsort(ratios, rounds, sizeof(ratios[0]), compare_double);
	printf("%s: %s %.2f GB/s, %s %.2f GB/s, ratio %.3f (median of rounds %.3f, "
	       "range %.3f-%.3f)\n", tag, what, bytes * rounds / selene, bulk_what,
	       bytes * rounds / bulk, bulk / selene, ratios[rounds / 2], ratios[0],
	       ratios[rounds - 1]);
}

/*
 * The quiet pause before each timed read of a round's files, on either
 * side: both start from a host that has run nothing for as long (the
 * first read follows the GPU steps, the second the first read).
 */
#define WARM_READ_SETTLE_MS 50u
/*
 * Untimed reads of a round's files before either timed one: the first
 * read of a freshly written tmpfs file is slower than the next (about 20%
 * for dd on the VM), so without them whichever side went first paid it
 * (on the VM the read-through's ratio was 0.45 over its rounds first
 * against 1.18 over those raw first); after two, a third read runs as
 * the second did, so both timed sides meet the same page cache
 * (--pre-reads N sets it, 0 to see the difference).
 */
#define WARM_PRE_READS 2u

/*
 * The read-through's ratio over the rounds that read through first (odd
 * timed rounds, with no warm-up: the round number's parity) and over those
 * that read raw first: a side that pays for going first shows here.
 */
static void report_warm_order(const struct bench *b, const double *read_ns,
			      const double *raw_read_ns)
{
	double sel[2] = { 0, 0 }, raw[2] = { 0, 0 };
	uint32_t n[2] = { 0, 0 };

	for (uint32_t at = 0; at < b->a.rounds; at++) {
		int first = (at + b->a.warmup) % 2 == 1; /* 1: read-through first */

		sel[first] += read_ns[at];
		raw[first] += raw_read_ns[at];
		n[first]++;
	}
	printf("%s: read-through ratio by order: %.3f over %u %s read-through first, "
	       "%.3f over %u raw read first (the files read %u times untimed first; each "
	       "side after the same %u ms pause, Selene idle)\n", b->tag,
	       n[1] ? raw[1] / sel[1] : 0.0, n[1], launch_plural(n[1], "round", "rounds"),
	       n[0] ? raw[0] / sel[0] : 0.0, n[0], b->a.pre_reads, WARM_READ_SETTLE_MS);
}

/*
 * One restore at a time from warm slots: each record's fetch timed from its
 * submit to its completion (nothing else queued), into lat; beside it, one
 * bulk host to device copy of a record's bytes, into bulk_lat. Their
 * difference is what a restore costs beyond its bytes.
 */
static int warm_latency_round(struct bench *b, uint32_t round, uint64_t device,
			      uint8_t *host, double *lat, double *bulk_lat)
{
	uint64_t one = (uint64_t)b->a.pages * b->g.page_record_bytes + b->g.row_record_bytes;
	uint32_t *ids = malloc(b->a.pages * sizeof(uint32_t));
	struct shard_completion c = { 0 };
	int ret = ids ? 0 : -ENOMEM;

	for (uint32_t p = 0; ids && p < b->a.pages; p++)
		ids[p] = (p * 11) % (uint32_t)b->device_pages;
	for (uint32_t i = 0; !ret && i < b->a.records; i++) {
		uint64_t t0 = sel_monotonic_ns(), ns;

		ret = submit_fetch(b, round, i, ids);
		if (!ret) {
			shard_engine_wait(b->engine, &c);
			ret = c.result;
		}
		lat[i] = (double)(sel_monotonic_ns() - t0);
		if (!ret)
			ret = bulk_copy(b, SHARD_HOST_TO_DEVICE, device, host, one, &ns);
		bulk_lat[i] = (double)ns;
	}
	if (ret)
		fprintf(stderr, "selene bench warm: a restore on its own failed: %s %s\n",
			sel_strerror(ret), c.why);
	free(ids);
	return ret;
}

/*
 * Before each timed read of round's files: the engine idle (no job queued
 * or running: every store has committed its file, every drop has run),
 * before a read-through (through) no record warm (it reads every file), and
 * each record file whole on the disk; then the quiet pause. -EBUSY (and a
 * line saying what) when the engine is not idle, -EIO when a file is not
 * whole; a bench that fails here measured nothing.
 */
static int warm_read_settle(struct bench *b, uint32_t round, bool through)
{
	struct shard_engine_stats st;
	struct shard_warm_stats ws;
	struct timespec pause = { .tv_sec = WARM_READ_SETTLE_MS / 1000,
				  .tv_nsec = (long)(WARM_READ_SETTLE_MS % 1000) * 1000000L };

	shard_engine_stats(b->engine, &st);
	if (st.jobs_in_flight) {
		fprintf(stderr, "selene bench %s: %u engine %s still in flight before a timed "
			"read\n", b->tag, st.jobs_in_flight,
			launch_plural(st.jobs_in_flight, "job", "jobs"));
		return -EBUSY;
	}
	shard_engine_warm_stats(b->engine, &ws);
	if (through && ws.records) {
		fprintf(stderr, "selene bench %s: %" PRIu64 " records still warm before a timed "
			"read-through\n", b->tag, ws.records);
		return -EBUSY;
	}
	for (uint32_t i = 0; i < b->a.records; i++) {
		struct rec_key key;
		struct stat sb;
		char name[REC_FILE_NAME_BYTES], path[1200];

		record_key(&key, b, round, i);
		rec_file_name(name, &key);
		snprintf(path, sizeof(path), "%s/%s", rec_dir_path(b->dir), name);
		errno = 0;
		if (stat(path, &sb) != 0 || (uint64_t)sb.st_size != b->record_bytes) {
			fprintf(stderr, "selene bench %s: %s is not whole before a timed read "
				"(%s)\n", b->tag, path, errno ? strerror(errno) : "short");
			return -EIO;
		}
	}
	while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
		;
	return 0;
}

/* The median of count values (sorted in place). */
static double median(double *v, uint64_t count)
{
	qsort(v, count, sizeof(v[0]), compare_double);
	return count ? v[count / 2] : 0;
}

/* Adds the fetch_* stats that a step moved (after less before) to sum. */
static void add_fetch_stats(struct shard_engine_stats *sum, const struct shard_engine_stats *before,
			    const struct shard_engine_stats *after)
{
	sum->fetch_run_ns += after->fetch_run_ns - before->fetch_run_ns;
	sum->fetch_open_ns += after->fetch_open_ns - before->fetch_open_ns;
	sum->fetch_wait_ns += after->fetch_wait_ns - before->fetch_wait_ns;
	sum->fetch_verify_ns += after->fetch_verify_ns - before->fetch_verify_ns;
	sum->fetch_copy_ns += after->fetch_copy_ns - before->fetch_copy_ns;
	sum->fetch_end_ns += after->fetch_end_ns - before->fetch_end_ns;
	sum->fetch_end_copy_ns += after->fetch_end_copy_ns - before->fetch_end_copy_ns;
	sum->fetch_end_row_ns += after->fetch_end_row_ns - before->fetch_end_row_ns;
	sum->fetch_end_close_ns += after->fetch_end_close_ns - before->fetch_end_close_ns;
	sum->fetch_opens_ahead += after->fetch_opens_ahead - before->fetch_opens_ahead;
	sum->fetch_windows += after->fetch_windows - before->fetch_windows;
	sum->fetch_verify_passes += after->fetch_verify_passes - before->fetch_verify_passes;
	sum->fetch_hash_ns += after->fetch_hash_ns - before->fetch_hash_ns;
	sum->fetch_bytes_verified += after->fetch_bytes_verified - before->fetch_bytes_verified;
	if (after->fetch_verify_groups_max > sum->fetch_verify_groups_max)
		sum->fetch_verify_groups_max = after->fetch_verify_groups_max;
	sum->fetch_windows_read_here +=
		after->fetch_windows_read_here - before->fetch_windows_read_here;
	sum->fetch_verify_lead_ns += after->fetch_verify_lead_ns - before->fetch_verify_lead_ns;
	sum->fetch_verify_span_ns += after->fetch_verify_span_ns - before->fetch_verify_span_ns;
	sum->fetch_verify_tail_ns += after->fetch_verify_tail_ns - before->fetch_verify_tail_ns;
	sum->verify_threads = after->verify_threads;
}

/*
 * The stores' window copies over the timed rounds (the engine's store_copy
 * stats), and the warm tier's stores and fallbacks to staging: what says
 * why the stores' copies ran below the bulk copy (docs/PERFORMANCE.md).
 */
struct warm_store_copies {
	uint64_t copies, overlapped, pipelined, alone, issue_ns, wait_ns, gap_ns;
	uint64_t stores, fallbacks, stores_at_once;
};

static void warm_store_copies_add(struct warm_store_copies *c,
				  const struct shard_engine_stats *before,
				  const struct shard_engine_stats *after,
				  const struct shard_warm_stats *warm_before,
				  const struct shard_warm_stats *warm_after)
{
	c->copies += after->store_copies - before->store_copies;
	c->overlapped += after->store_copies_overlapped - before->store_copies_overlapped;
	c->pipelined += after->store_copies_pipelined - before->store_copies_pipelined;
	c->alone += after->store_copies_alone - before->store_copies_alone;
	c->issue_ns += after->store_copy_issue_ns - before->store_copy_issue_ns;
	c->wait_ns += after->store_copy_wait_ns - before->store_copy_wait_ns;
	c->gap_ns += after->store_copy_gap_ns - before->store_copy_gap_ns;
	c->stores += warm_after->stores - warm_before->stores;
	c->fallbacks += warm_after->store_fallbacks - warm_before->store_fallbacks;
	c->stores_at_once = after->stores_at_once;
}

/* A timed round's store: its copies' time, how many were overlapped, its ratio. */
static void warm_store_round_line(const struct bench *b, uint32_t at,
				  const struct shard_engine_stats *before,
				  const struct shard_engine_stats *after, double copy_ns,
				  double bulk_ns, double whole_ns)
{
	uint64_t copies = after->store_copies - before->store_copies;

	printf("%s: round %u, store: device copies %.2f ms (%" PRIu64 " windows, %" PRIu64
	       " overlapped by a checksum pass; waits %.2f ms), bulk %.2f ms, ratio %.3f; "
	       "the stores' jobs %.2f ms\n", b->tag, at, copy_ns / 1e6, copies,
	       after->store_copies_overlapped - before->store_copies_overlapped,
	       (double)(after->store_copy_wait_ns - before->store_copy_wait_ns) / 1e6,
	       bulk_ns / 1e6, bulk_ns / copy_ns, whole_ns / 1e6);
}

/*
 * The stores' copies per window beside a bulk device-to-host copy of a
 * window's bytes (the rounds' bytes over their copies) with its own wait,
 * p50 of WARM_WINDOW_BULK_COPIES, timed with the engine idle: per window,
 * issue + wait near the bulk one says each window paid its own wait (the
 * fewer copies a checksum pass overlapped, the more of the copies' time
 * shows); well above it, that the copies ran slower beside the stores'
 * hashing and writes. Then the warm stores and their fallbacks.
 */
#define WARM_WINDOW_BULK_COPIES 32u
/* The most window copies timed beside the raw writers. */
#define WARM_WINDOW_LOADED_COPIES 4096u

/* The raw writers the window copies are timed beside: files at once. */
struct warm_writers {
	struct bench *b;
	uint32_t files;
	int result;
	uint64_t ns;
	int done;
};

static void *warm_writers_main(void *arg)
{
	struct warm_writers *w = arg;

	w->result = raw_spread_round_of(w->b, true, w->files, &w->ns);
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Bulk device-to-host copies of len bytes, each with its own wait, each at
 * the next window's place in the round's bytes (as the stores' are), until
 * count are done or, with writers, they have written (one at least);
 * lat[i] each, *done how many. Returns 0 or the first failure.
 */
static int window_bulk_copies(struct bench *b, uint64_t device, uint8_t *host, uint64_t bytes,
			      uint64_t len, double *lat, uint32_t count,
			      const struct warm_writers *writers, uint32_t *done)
{
	int ret = 0;

	*done = 0;
	for (uint32_t k = 0; !ret && *done < count; k++) {
		uint64_t ns = 0;

		/* one at least: a round small enough is written before it */
		if (writers && *done && __atomic_load_n(&writers->done, __ATOMIC_ACQUIRE))
			break;
		if ((k + 1) * len > bytes)
			k = 0;
		ret = bulk_copy(b, SHARD_DEVICE_TO_HOST, device + k * len, host + k * len, len, &ns);
		lat[(*done)++] = (double)ns;
	}
	return ret;
}

static int report_warm_store_copies(struct bench *b, const struct warm_store_copies *c,
				    uint64_t device, uint8_t *host, uint64_t bytes)
{
	double lat[WARM_WINDOW_BULK_COPIES], window, n = (double)c->copies;
	double *loaded = malloc(WARM_WINDOW_LOADED_COPIES * sizeof(double));
	struct warm_writers writers = { .b = b };
	uint32_t idle = 0, under = 0;
	uint64_t len;
	pthread_t thread;
	int ret = loaded ? 0 : -ENOMEM;

	if (!c->copies) {
		free(loaded);
		return 0;
	}
	window = (double)bytes * b->a.rounds / n;
	len = (uint64_t)window / SEL_BLOCK_BYTES * SEL_BLOCK_BYTES;
	len = len ? len : SEL_BLOCK_BYTES; /* a round's bytes are a page record at least */
	if (!ret)
		ret = window_bulk_copies(b, device, host, bytes, len, lat, WARM_WINDOW_BULK_COPIES,
					 NULL, &idle);
	/*
	 * The same beside the load the stores' writes put on the host: a
	 * round's bytes written by as many threads as stores ran at once,
	 * each its own file (raw pwrite), with no copy of Selene's running.
	 */
	writers.files = (uint32_t)(c->stores_at_once < b->a.records ? c->stores_at_once :
								      b->a.records);
	writers.files = writers.files < 1 ? 1 : writers.files > RAW_SPREAD_FILES ?
			RAW_SPREAD_FILES : writers.files;
	if (!ret && pthread_create(&thread, NULL, warm_writers_main, &writers) != 0)
		ret = -EAGAIN;
	else if (!ret) {
		ret = window_bulk_copies(b, device, host, bytes, len, loaded,
					 WARM_WINDOW_LOADED_COPIES, &writers, &under);
		pthread_join(thread, NULL);
		raw_spread_remove(b, writers.files);
		ret = ret ? ret : writers.result;
	}
	if (ret) {
		fprintf(stderr, "selene bench %s: a bulk copy of a window's bytes failed: %s\n",
			b->tag, sel_strerror(ret));
		free(loaded);
		return ret;
	}
	printf("%s: store copies: %" PRIu64 " windows of %.2f MiB (%" PRIu64 " at once at "
	       "most), %" PRIu64 " overlapped by a checksum pass, %" PRIu64 " with the "
	       "next window issued before their wait, %" PRIu64 " waited for "
	       "right after their issue; a window: issue %.1f us, other work while it ran "
	       "%.1f us, wait %.1f us (issue + wait %.1f us: %.2f GB/s); a bulk device to "
	       "host copy of a window's bytes with its own wait, p50 of %u: %.1f us (%.2f "
	       "GB/s)\n", b->tag, c->copies, window / 1048576.0, c->stores_at_once,
	       c->overlapped, c->pipelined, c->alone, (double)c->issue_ns / n / 1e3,
	       (double)c->gap_ns / n / 1e3, (double)c->wait_ns / n / 1e3,
	       (double)(c->issue_ns + c->wait_ns) / n / 1e3,
	       window * n / (double)(c->issue_ns + c->wait_ns),
	       idle, median(lat, idle) / 1e3, (double)len / median(lat, idle));
	if (under)
		printf("%s: the same bulk copy of a window's bytes while %u %s wrote a "
		       "round's bytes, a file each (raw pwrite, as the stores' writes; %.2f "
		       "GB/s): p50 of %u: %.1f us (%.2f GB/s)\n", b->tag, writers.files,
		       launch_plural(writers.files, "thread", "threads"),
		       (double)b->record_bytes * b->a.records / (double)writers.ns, under,
		       median(loaded, under) / 1e3, (double)len / median(loaded, under));
	free(loaded);
	printf("%s: %" PRIu64 " stores into warm slots, %" PRIu64 " found too few free and "
	       "went through staging (the bench drives the engine itself: no Retry; %s)\n",
	       b->tag, c->stores, c->fallbacks,
	       b->a.warm_only ? "the writes from warm run after each round's stores" :
				"each store writes its own file in its job, warm field 1");
	return 0;
}

/*
 * The warm tier (docs/DESIGN.md section 6): each round stores its records
 * into warm slots (and through them to their files), fetches them back
 * from the slots, drops them from the slots and fetches them again by
 * read-through (file -> warm slots, verified there -> device), and unlinks
 * them; beside it, one bulk copy of the same bytes each way between one
 * device range and registered host memory, and a raw read of the same
 * record files (odd rounds read through first, as bench_round alternates).
 * The store's side is its device copies into the slots (the engine's
 * store copy time), the part a GPU waits for; the whole store, with its
 * checksum pass and disk writes, is printed after.
 */
static int bench_warm(struct bench *b)
{
	static double fetch_ns[BENCH_ROUNDS_MAX], store_ns[BENCH_ROUNDS_MAX];
	static double h2d_ns[BENCH_ROUNDS_MAX], d2h_ns[BENCH_ROUNDS_MAX];
	static double read_ns[BENCH_ROUNDS_MAX], raw_read_ns[BENCH_ROUNDS_MAX];
	static double whole_store_ns[BENCH_ROUNDS_MAX];
	uint64_t bytes = ((uint64_t)b->a.pages * b->g.page_record_bytes +
			  b->g.row_record_bytes) * b->a.records;
	uint64_t device = 0, ns, whole_ns = 0, write_ns = 0;
	struct warm_store_copies copies = { 0 };
	uint64_t lat_count = (uint64_t)b->a.rounds * b->a.records;
	double *lat = malloc(lat_count * sizeof(double));
	double *bulk_lat = malloc(lat_count * sizeof(double));
	struct shard_slab_pool host = { 0 };
	struct shard_engine_stats st, rt_before, rt = { 0 }, none = { 0 }, round_rt = { 0 };
	struct shard_engine_stats store_before;
	struct shard_warm_stats ws, ws_before;
	int ret;

	ret = lat && bulk_lat ? shard_device_bind(b->dev) : -ENOMEM; /* current here */
	if (!ret)
		ret = shard_slab_init(&host, bytes, 1);
	if (!ret)
		ret = shard_slab_register(&host, b->dev);
	if (!ret && shard_device_is_cuda(b->dev)) {
		ret = shard_device_cuda_alloc(b->dev, bytes, &device);
	} else if (!ret) {
		device = (uintptr_t)aligned_alloc(SEL_BLOCK_BYTES, sel_align_up(bytes, SEL_BLOCK_BYTES));
		ret = device ? 0 : -ENOMEM;
		if (!ret)
			memset((void *)(uintptr_t)device, 3, (size_t)bytes);
	}
	for (uint32_t r = 0; !ret && r < b->a.warmup + b->a.rounds; r++) {
		uint32_t at = r < b->a.warmup ? 0 : r - b->a.warmup, round = r;

		ret = warm_barrier_wait(b->barrier);
		if (!ret)
			ret = bulk_copy(b, SHARD_DEVICE_TO_HOST, device, shard_slab_slot(&host, 0),
					bytes, &ns);
		d2h_ns[at] = (double)ns;
		shard_engine_stats(b->engine, &store_before);
		shard_engine_warm_stats(b->engine, &ws_before);
		if (!ret)
			ret = warm_barrier_wait(b->barrier);
		if (!ret)
			ret = selene_round(b, round, submit_store, 7, &ns);
		shard_engine_stats(b->engine, &st);
		shard_engine_warm_stats(b->engine, &ws);
		store_ns[at] = (double)(st.store_copy_ns - store_before.store_copy_ns);
		whole_store_ns[at] = (double)ns;
		if (r >= b->a.warmup) {
			whole_ns += ns;
			warm_store_copies_add(&copies, &store_before, &st, &ws_before, &ws);
			warm_store_round_line(b, at, &store_before, &st, store_ns[at], d2h_ns[at],
					      whole_store_ns[at]);
		}
		/* Warm only: each file written from its warm copy, as rank zero does. */
		if (!ret && b->a.warm_only) {
			ret = selene_round(b, round, submit_warm_write, 7, &ns);
			if (r >= b->a.warmup)
				write_ns += ns;
		}
		if (!ret)
			ret = warm_barrier_wait(b->barrier);
		if (!ret)
			ret = bulk_copy(b, SHARD_HOST_TO_DEVICE, device, shard_slab_slot(&host, 0),
					bytes, &ns);
		h2d_ns[at] = (double)ns;
		if (!ret)
			ret = warm_barrier_wait(b->barrier);
		if (!ret)
			ret = selene_round(b, round, submit_fetch, 11, &ns);
		fetch_ns[at] = (double)ns;
		if (!ret)
			ret = warm_barrier_wait(b->barrier);
		if (!ret && r >= b->a.warmup)
			ret = warm_latency_round(b, round, device, shard_slab_slot(&host, 0),
						 lat + (uint64_t)at * b->a.records,
						 bulk_lat + (uint64_t)at * b->a.records);
		if (!ret)
			ret = warm_unlink_round(b, round, true);
		/*
		 * Read-through and raw read of the same files, each after the
		 * same settling (warm_read_settle), odd rounds read-through first.
		 */
		for (uint32_t pre = 0; !ret && pre < b->a.pre_reads; pre++)
			ret = raw_round_of(b, false, round, &ns); /* untimed */
		for (int side = 0; !ret && side < 2; side++) {
			bool through = (side == 0) == (r % 2 == 1);

			ret = warm_read_settle(b, round, through);
			if (!ret && through) {
				shard_engine_stats(b->engine, &rt_before);
				ret = selene_round(b, round, submit_read_through, 11, &ns);
				read_ns[at] = (double)ns;
				/* The read-throughs' share of the fetch stats (timed rounds). */
				shard_engine_stats(b->engine, &st);
				round_rt = (struct shard_engine_stats){ 0 };
				add_fetch_stats(&round_rt, &rt_before, &st);
				if (r >= b->a.warmup)
					add_fetch_stats(&rt, &rt_before, &st);
			} else if (!ret) {
				ret = raw_round_of(b, false, round, &ns);
				raw_read_ns[at] = (double)ns;
			}
		}
		/*
		 * Each round's read-through: its time, the verification's threads
		 * busy over it, and its fetches' time before their first page's
		 * verification, from it to their last page's end (threads busy
		 * then) and after it: what makes a slow round slow.
		 */
		if (!ret && r >= b->a.warmup)
			printf("%s: round %u, %s first: read-through %.2f ms (%.2f threads busy "
			       "verifying; fetches %.2f ms before the first page, %.2f ms to the "
			       "last page's end with %.2f busy, %.2f ms after), raw read %.2f ms, "
			       "ratio %.3f\n", b->tag, at,
			       r % 2 == 1 ? "read-through" : "raw read", read_ns[at] / 1e6,
			       (double)round_rt.fetch_hash_ns / (double)(round_rt.fetch_run_ns + 1),
			       (double)round_rt.fetch_verify_lead_ns / 1e6,
			       (double)round_rt.fetch_verify_span_ns / 1e6,
			       (double)round_rt.fetch_hash_ns /
				       (double)(round_rt.fetch_verify_span_ns + 1),
			       (double)round_rt.fetch_verify_tail_ns / 1e6, raw_read_ns[at] / 1e6,
			       raw_read_ns[at] / read_ns[at]);
		if (!ret)
			ret = warm_unlink_round(b, round, false);
	}
	if (ret)
		warm_barrier_break(b->barrier);
	shard_engine_warm_stats(b->engine, &ws);
	if (!ret && ws.read_throughs != (uint64_t)(b->a.warmup + b->a.rounds) * b->a.records) {
		fprintf(stderr, "selene bench warm: %" PRIu64 " of %" PRIu64 " fetches read "
			"through into warm slots\n", ws.read_throughs,
			(uint64_t)(b->a.warmup + b->a.rounds) * b->a.records);
		ret = -EIO;
	}
	/* each round's fetches, then (timed rounds) one at a time again */
	if (!ret && ws.hits != (uint64_t)(b->a.warmup + 2 * b->a.rounds) * b->a.records) {
		fprintf(stderr, "selene bench warm: %" PRIu64 " of %" PRIu64 " fetches were "
			"served from warm slots\n", ws.hits,
			(uint64_t)(b->a.warmup + 2 * b->a.rounds) * b->a.records);
		ret = -EIO;
	}
	if (!ret) {
		printf("%s: %u rounds of %u records of %.1f MiB (%u pages of %u planes x %"
		       PRIu64 " bytes and a %" PRIu64 "-byte row), device %s, warm tier %.1f "
		       "MiB registered in %.1f ms\n", b->tag, b->a.rounds, b->a.records,
		       (double)bytes / b->a.records / 1048576.0, b->a.pages, b->a.planes,
		       b->a.plane_bytes, b->a.row_bytes, b->dev->ops->name,
		       (double)b->a.warm_bytes / 1048576.0, ws.register_ns / 1e6);
		report_warm(b->tag, "restore from warm slots", "bulk host to device", (double)bytes,
			    fetch_ns, h2d_ns, b->a.rounds);
		{
			double one = (double)bytes / b->a.records;
			double p50 = median(lat, lat_count), bulk_p50 = median(bulk_lat, lat_count);

			printf("%s: one restore at a time: p50 %.1f us (%.2f GB/s), bulk host "
			       "to device of a record's bytes p50 %.1f us (%.2f GB/s); a restore's "
			       "fixed cost about %.1f us\n", b->tag, p50 / 1e3, one / p50, bulk_p50 / 1e3,
			       one / bulk_p50, (p50 - bulk_p50) / 1e3);
		}
		report_warm(b->tag, "store into warm slots (device copies)", "bulk device to host",
			    (double)bytes, store_ns, d2h_ns, b->a.rounds);
		if (b->a.warm_only)
			report_warm(b->tag, "store into warm slots only (whole jobs, submit to "
				    "completion)", "bulk device to host", (double)bytes,
				    whole_store_ns, d2h_ns, b->a.rounds);
		ret = report_warm_store_copies(b, &copies, device, shard_slab_slot(&host, 0),
					       bytes);
	}
	if (!ret) {
		report_warm(b->tag, "read-through (files -> warm slots, verified -> device)",
			    "raw read of the same files", (double)b->record_bytes * b->a.records,
			    read_ns, raw_read_ns, b->a.rounds);
		report_warm_order(b, read_ns, raw_read_ns);
		report_fetch_split("read-through", &none, &rt,
				   (uint64_t)b->a.rounds * b->a.records);
		if (b->a.warm_only)
			printf("%s: the stores into warm slots only %.2f GB/s; their writes from "
			       "warm (checksums, %s writes to disk) %.2f GB/s\n", b->tag,
			       (double)bytes * b->a.rounds / (double)whole_ns,
			       b->a.durable ? "durable" : "not durable",
			       (double)bytes * b->a.rounds / (double)write_ns);
		else
			printf("%s: the whole store (copies, checksums, %s writes to disk) "
			       "%.2f GB/s\n", b->tag, b->a.durable ? "durable" : "not durable",
			       (double)bytes * b->a.rounds / (double)whole_ns);
	} else {
		fprintf(stderr, "selene bench %s: %s\n", b->tag, sel_strerror(ret));
	}
	if (shard_device_is_cuda(b->dev) && device)
		shard_device_cuda_free(b->dev, device);
	else
		free((void *)(uintptr_t)device);
	if (host.base) {
		shard_slab_unregister(&host);
		shard_slab_destroy(&host);
	}
	free(lat);
	free(bulk_lat);
	return ret;
}

static void bench_usage(FILE *out)
{
	fprintf(out,
		"usage: selene bench store [options]\n"
		"       selene bench fetch [options] DIR\n"
		"       selene bench copy [options]\n"
		"       selene bench warm [options]\n"
		"       selene bench lookup\n"
		"       selene bench api [--dir DIR]\n"
		"       selene bench fanout [--dir DIR] [--records N]\n"
		"       selene bench restore [--dir DIR] [--ranks N] [--device KIND] [--records N]\n"
		"                            [--warmup N]\n"
		"       selene bench startup [--dir DIR] [--ranks N] [--records N] [--rounds N]\n"
		"                            [--keep] [--cold]\n"
		"       selene bench pool [--dir DIR] [--pages N] [--rounds N] [--device KIND]\n"
		"                         [--manager HOST:PORT --pool-secret FILE]\n"
		"         (on the GPU: selene bench pool --device cuda --pages 256)\n\n"
		"store: Selene's staged store (device -> slots -> record files) beside\n"
		"  raw io_uring O_DIRECT writes of the same bytes (8 MiB requests, 8 in\n"
		"  flight, one file per record) in the same directory, alternating; where\n"
		"  the disk thread uses kernel workers (tmpfs), the raw side does too\n"
		"  (2 MiB requests, 32 in flight, as many workers).\n"
		"fetch: the same for store then fetch (files -> verify -> device),\n"
		"  beside raw io_uring O_DIRECT reads of the same files, in DIR; then\n"
		"  the host's ceiling: the same bytes as one file per core (at most 8),\n"
		"  written and read back by a thread each, all at once.\n"
		"copy: scattered page planes through batched device copies beside one\n"
		"  bulk copy of the same bytes, both directions.\n"
		"warm: records stored into a warm tier (device -> warm slots -> files)\n"
		"  and restored from it (warm slots -> device, no file read), beside one\n"
		"  bulk copy of the same bytes each way with registered host memory; the\n"
		"  store's rate is its device copies (the engine's own time). Then each\n"
		"  round is dropped from the slots and restored by read-through (files ->\n"
		"  warm slots, verified there -> device), beside raw O_DIRECT reads of the\n"
		"  same record files (--dir: where; e.g. /dev/shm), both after\n"
		"  --pre-reads untimed reads of the files, each after the engine is idle\n"
		"  (no job in flight, every file whole) and a 50 ms pause, either side\n"
		"  first in turn; a line a round, and the ratio by order.\n"
		"  Also one restore at a time (p50, beside a bulk copy of one record's\n"
		"  bytes: the difference is a restore's fixed cost). --ranks N: N\n"
		"  processes on the same device (default 1), each its own engine and\n"
		"  directory, their steps in step.\n"
		"  The stores' copies are split per window (issued, waited for, and\n"
		"  how many a checksum pass overlapped) beside a bulk copy of a\n"
		"  window's bytes with its own wait, with a line a round.\n"
		"  Each store goes into warm slots only and completes there (as rank\n"
		"  zero sends every store with warm room; --warm-only says so), then\n"
		"  each file is written from the slots by a write from warm; the\n"
		"  stores' whole jobs are timed beside the bulk copy too.\n"
		"  --file-in-job: each store writes its own file in its job instead\n"
		"  (the engine's warm field 1, which rank zero does not send).\n"
		"lookup: index lookups (p50, p99) for 1K to 1M records and histories\n"
		"  of 4K to 128K tokens, stored every 1000 tokens (a chain of 4 to 131\n"
		"  records): a hit in the last turn, a history that diverged 1500\n"
		"  tokens back, and the hit with its chain's links unproven (the first\n"
		"  lookup after a scan: a hash per link).\n"
		"api: the latency (p50, p99) of publish, lookup, fetch and poll for 10\n"
		"  seconds while stores of 16 MiB records keep the disk thread busy.\n"
		"fanout: what the multi-rank transport adds to a job, at 1, 2, 4 and 8\n"
		"  ranks (forked peers on loopback): noop jobs, which move no bytes but\n"
		"  pass every rank's engine, one at a time (p50, p99, overhead over one\n"
		"  rank) and 32 in flight (jobs/s); then store-then-fetch of one small\n"
		"  page per rank, the same way.\n"
		"restore: a 32-page restore's latency (p50, p99) with the disk idle and\n"
		"  while 4 stores of the same size are kept queued, and their ratio, at\n"
		"  --ranks ranks (forked peers on loopback; default 2) and at one;\n"
		"  --records restores each way (default 40), after --warmup untimed\n"
		"  passes of as many under stores (default 0); first the disk alone\n"
		"  the same way (raw io_uring reads of the same bytes, a thread a rank,\n"
		"  idle, under a writer a rank, and with the writers holding back during\n"
		"  each read), so the disk's own share of the slowdown is printed too.\n\n"
		"startup: startup at scale: --records small records per rank (default\n"
		"  100000) made with the store on --ranks ranks (default 8; forked peers\n"
		"  on loopback), then --rounds restarts (default 3), each timed from the\n"
		"  fork of the peers to a store ready to serve, split into the scan, the\n"
		"  join, the summary exchange, the agreement, applying it and the index\n"
		"  build. --keep leaves the records for the next run of the same shape;\n"
		"  --cold drops their pages from the page cache before each restart.\n"
		"pool: claims over TCP on loopback from a pool manager in this process:\n"
		"  one record of --pages pages of 4 planes of 64K (default 64: 16 MiB)\n"
		"  put once, then claimed --rounds times (default 12), each window\n"
		"  verified and copied out, beside a raw TCP stream of the same bytes in\n"
		"  the same windows, alternating; prints both and their ratio. With\n"
		"  --manager, a running manager (selene pool) instead, whose secret file\n"
		"  --pool-secret names; a record it holds already is claimed as it is.\n"
		"  Then, when the manager is on this host, the same-host claim: the\n"
		"  manager's arena mapped read-only and registered with --device once\n"
		"  (the cost printed), each claim's pages and row copied arena -> device\n"
		"  page ids in batched copies, beside one bulk host-to-device copy of the\n"
		"  same bytes from registered memory; prints both and their ratio\n"
		"  (target >= 0.80 on the GPU). Then an instance on this host: a store\n"
		"  of one rank looks the record's tokens up and sel_fetch restores the\n"
		"  pool hit, timed to its FETCHED event, beside the same bulk copy;\n"
		"  prints both, their ratio, and how many records rank zero copied\n"
		"  before the claim's grant.\n\n"
		"  --dir DIR          base directory (store, copy, warm; default /var/tmp/selene-bench)\n"
		"  --device KIND      auto, cuda or host (default auto)\n"
		"  --planes N         page planes (default 36)\n"
		"  --plane-bytes SIZE bytes of one plane of one page (default 64K)\n"
		"  --row-bytes SIZE   bytes of the state row (default 1M)\n"
		"  --pages N          pages per record (default 64)\n"
		"  --records N        records per round (default 1; with more, the engine's\n"
		"                     stores at once run together, SELENE_STORES_AT_ONCE);\n"
		"                     fanout: jobs per phase (default 2000)\n"
		"  --rounds N         rounds, raw and Selene in each, each side first in\n"
		"                     turn (default 12)\n"
		"  --warmup N         store, fetch: untimed rounds first; restore: untimed\n"
		"                     loaded passes first (default 0), so a\n"
		"                     freshly booted machine's first touch of its memory\n"
		"                     is not timed\n"
		"  --no-durable       skip fdatasync and directory fsync on both sides\n"
		"  --window-pages N   pages per staging window (default: the engine's)\n"
		"  --read-ahead SIZE  bytes a fetch keeps reading ahead (default: the engine's)\n"
		"  --pre-reads N      warm: untimed reads of a round's files before its\n"
		"                     timed read-through and raw read (default 2, 0 to 8;\n"
		"                     the first read of a freshly written tmpfs file is\n"
		"                     the slowest)\n"
		"  --chain            fetch: each round's records are one chain (record i\n"
		"                     the parent of i + 1) restored as one job, as a long\n"
		"                     prefix is, instead of one job a record\n"
		"  --help             this help\n\n"
		"Every file goes into DIR/selene-bench.PID, removed at the end, also\n"
		"when the bench is interrupted (SIGINT, SIGTERM). Sizes take K, M, G,\n"
		"T (binary). Exit status: 0 done, 1 failed, 2 bad arguments.\n");
}

/* One rank of warm --ranks: the bench in its own directory; an exit status. */
static int bench_warm_rank(struct bench *b, const char *scratch, uint32_t rank, char *tag,
			   size_t tag_size, char *dir, size_t dir_size)
{
	int ret;

	snprintf(tag, tag_size, "warm rank %u of %u", rank, b->a.ranks);
	snprintf(dir, dir_size, "%s/rank-%u", scratch, rank);
	if (mkdir(dir, 0755) && errno != EEXIST) {
		fprintf(stderr, "selene bench warm: cannot make %s: %s\n", dir, strerror(errno));
		warm_barrier_break(b->barrier);
		return LAUNCH_EXIT_BAD;
	}
	b->tag = tag;
	b->a.dir = dir;
	ret = bench_open(b);
	if (!ret)
		ret = bench_warm(b);
	else
		warm_barrier_break(b->barrier);
	bench_close(b);
	return ret ? LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
}

/*
 * warm --ranks N: N processes (this one and N - 1 forked before any
 * device call) each run the warm bench on the same device in a directory
 * of its own, their steps in step (struct warm_barrier), as N ranks of
 * one host share a GPU.
 */
static int bench_warm_ranks(struct bench *b, const char *scratch)
{
	pid_t pids[BENCH_RANKS_MAX] = { 0 };
	char tag[64], dir[1100];
	int status = LAUNCH_EXIT_OK;

	b->barrier = warm_barrier_new(b->a.ranks);
	if (!b->barrier) {
		fprintf(stderr, "selene bench warm: cannot map the ranks' barrier\n");
		return LAUNCH_EXIT_BAD;
	}
	fflush(stdout);
	fflush(stderr);
	for (uint32_t r = 1; r < b->a.ranks; r++) {
		pids[r] = fork();
		if (pids[r] == 0) {
			int ret = bench_warm_rank(b, scratch, r, tag, sizeof(tag), dir,
						  sizeof(dir));

			fflush(stdout);
			fflush(stderr);
			_exit(ret);
		}
		if (pids[r] < 0) {
			fprintf(stderr, "selene bench warm: fork: %s\n", strerror(errno));
			warm_barrier_break(b->barrier);
			status = LAUNCH_EXIT_BAD;
			break;
		}
	}
	if (status == LAUNCH_EXIT_OK)
		status = bench_warm_rank(b, scratch, 0, tag, sizeof(tag), dir, sizeof(dir));
	fflush(stdout);
	for (uint32_t r = 1; r < b->a.ranks; r++) {
		int child;

		if (pids[r] <= 0)
			continue;
		if (waitpid(pids[r], &child, 0) < 0 || !WIFEXITED(child) ||
		    WEXITSTATUS(child) != LAUNCH_EXIT_OK)
			status = LAUNCH_EXIT_BAD;
	}
	munmap(b->barrier, sizeof(*b->barrier));
	b->barrier = NULL;
	return status;
}

/* One benchmark in its scratch directory (launch/scratch.h); an exit status. */
static int bench_in_scratch(const char *scratch, void *arg)
{
	struct bench *b = arg;
	int ret;

	b->a.dir = scratch;
	if (strcmp(b->what, "api") == 0)
		return bench_api(scratch, 10.0) ? LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
	if (strcmp(b->what, "fanout") == 0) /* --records: jobs per phase */
		return bench_fanout(scratch, b->a.records ? b->a.records : 2000) ?
			       LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
	if (strcmp(b->what, "pool") == 0) {
		struct bench_pool_options o = {
			.pages = b->a.pages, .rounds = b->a.rounds,
			.manager = b->a.pool_manager, .secret_file = b->a.pool_secret,
			.device = b->a.device,
		};

		return bench_pool(scratch, &o) ? LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
	}
	if (strcmp(b->what, "restore") == 0) /* --records: restores per phase */
		return bench_restore(scratch, b->a.device, b->a.ranks ? b->a.ranks : 2,
				     b->a.records ? b->a.records : 40, b->a.warmup) ?
			       LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
	if (!b->a.records)
		b->a.records = 1;
	b->tag = b->what;
	if (strcmp(b->what, "warm") == 0 && b->a.ranks > 1)
		return bench_warm_ranks(b, scratch);
	ret = bench_open(b);
	if (!ret)
		ret = strcmp(b->what, "copy") == 0 ? bench_copy(b) :
		      strcmp(b->what, "warm") == 0 ? bench_warm(b) :
						     bench_store(b, strcmp(b->what, "fetch") == 0);
	bench_close(b);
	return ret ? LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
}

int launch_cmd_bench(int argc, char **argv)
{
	static const struct option options[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "device", required_argument, NULL, 'D' },
		{ "planes", required_argument, NULL, 'n' },
		{ "plane-bytes", required_argument, NULL, 'b' },
		{ "row-bytes", required_argument, NULL, 'R' },
		{ "pages", required_argument, NULL, 'p' },
		{ "records", required_argument, NULL, 'r' },
		{ "rounds", required_argument, NULL, 'k' },
		{ "warmup", required_argument, NULL, 'u' },
		{ "no-durable", no_argument, NULL, 'N' },
		{ "window-pages", required_argument, NULL, 'w' },
		{ "read-ahead", required_argument, NULL, 'A' },
		{ "ranks", required_argument, NULL, 'W' },
		{ "keep", no_argument, NULL, 'K' },
		{ "cold", no_argument, NULL, 'C' },
		{ "chain", no_argument, NULL, 'H' },
		{ "pre-reads", required_argument, NULL, 'P' },
		{ "warm-only", no_argument, NULL, 'O' },
		{ "file-in-job", no_argument, NULL, 'J' },
		{ "manager", required_argument, NULL, 'M' },
		{ "pool-secret", required_argument, NULL, 'S' },
		{ NULL, 0, NULL, 0 },
	};
	struct bench b = { .a = { .dir = BENCH_DIR_DEFAULT, .device = "auto",
				  .planes = 36, .plane_bytes = 65536, .row_bytes = 1 << 20,
				  .pages = 64, .rounds = 12, .durable = true,
				  .pre_reads = WARM_PRE_READS } };
	const char *what;
	char cmd[48];
	int opt, which = 0;

	if (launch_wants_help(argc, argv)) {
		bench_usage(stdout);
		return LAUNCH_EXIT_OK;
	}
	if (argc < 2) {
		bench_usage(stderr);
		return LAUNCH_EXIT_USAGE;
	}
	what = argv[1];
	if (strcmp(what, "lookup") == 0) {
		if (argc > 2) {
			fprintf(stderr, "selene bench lookup: takes no arguments (got %s)\n",
				argv[2]);
			return LAUNCH_EXIT_USAGE;
		}
		return bench_lookup() ? LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
	}
	optind = 2;
	snprintf(cmd, sizeof(cmd), "bench %.20s", what);
	while ((opt = getopt_long(argc, argv, "", options, &which)) != -1) {
		const char *flag = options[which].name;
		bool ok = true;

		switch (opt) {
		case 'd': b.a.dir = optarg; break;
		case 'D': b.a.device = optarg; break;
		case 'n': ok = launch_option_u32(cmd, flag, optarg, LAUNCH_COUNT, 1,
						 REC_PAGE_PLANES_MAX, &b.a.planes); break;
		case 'b': ok = launch_option_u64(cmd, flag, optarg, LAUNCH_SIZE, 1,
						 REC_UNIT_BYTES_MAX, &b.a.plane_bytes); break;
		case 'R': ok = launch_option_u64(cmd, flag, optarg, LAUNCH_SIZE, 1,
						 REC_ROW_BYTES_MAX, &b.a.row_bytes); break;
		case 'p': ok = launch_option_u32(cmd, flag, optarg, LAUNCH_COUNT, 1,
						 REC_RECORD_PAGES_MAX, &b.a.pages); break;
		case 'r': ok = launch_option_u32(cmd, flag, optarg, LAUNCH_COUNT, 1,
						 UINT32_MAX, &b.a.records); break;
		case 'k': ok = launch_option_u32(cmd, flag, optarg, LAUNCH_COUNT, 1,
						 BENCH_ROUNDS_MAX, &b.a.rounds);
			b.a.rounds_set = true;
			break;
		case 'u': ok = launch_option_u32(cmd, flag, optarg, LAUNCH_COUNT, 0, 100,
						 &b.a.warmup); break;
		case 'N': b.a.durable = false; break;
		case 'w': ok = launch_option_u32(cmd, flag, optarg, LAUNCH_COUNT, 1,
						 REC_RECORD_PAGES_MAX, &b.a.window_pages); break;
		case 'A': ok = launch_option_u64(cmd, flag, optarg, LAUNCH_SIZE, 1,
						 1ull << 30, &b.a.read_ahead); break;
		case 'W': ok = launch_option_u32(cmd, flag, optarg, LAUNCH_COUNT, 1, 64,
						 &b.a.ranks); break;
		case 'K': b.a.keep = true; break;
		case 'C': b.a.cold = true; break;
		case 'H': b.a.chain = true; break;
		case 'P': ok = launch_option_u32(cmd, flag, optarg, LAUNCH_COUNT, 0, 8,
						 &b.a.pre_reads);
			b.a.pre_reads_set = true;
			break;
		case 'O': b.a.warm_only = true; break;
		case 'J': b.a.file_in_job = true; break;
		case 'M': b.a.pool_manager = optarg; break;
		case 'S': b.a.pool_secret = optarg; break;
		default: bench_usage(stderr); return LAUNCH_EXIT_USAGE;
		}
		if (!ok)
			return LAUNCH_EXIT_USAGE;
		which = 0;
	}
	if (strcmp(what, "fetch") == 0 && optind == argc - 1)
		b.a.dir = argv[optind++];
	if (optind != argc || (strcmp(what, "store") && strcmp(what, "fetch") &&
			       strcmp(what, "copy") && strcmp(what, "api") && strcmp(what, "warm") &&
			       strcmp(what, "fanout") && strcmp(what, "restore") &&
			       strcmp(what, "startup") && strcmp(what, "pool"))) {
		bench_usage(stderr);
		return LAUNCH_EXIT_USAGE;
	}
	if ((b.a.pool_manager || b.a.pool_secret) &&
	    (strcmp(what, "pool") != 0 || !b.a.pool_manager || !b.a.pool_secret)) {
		fprintf(stderr, "selene %s: --manager and --pool-secret go together, with bench "
			"pool\n", cmd);
		return LAUNCH_EXIT_USAGE;
	}
	if (b.a.pre_reads_set && strcmp(what, "warm") != 0) {
		fprintf(stderr, "selene %s: --pre-reads is for bench warm\n", cmd);
		return LAUNCH_EXIT_USAGE;
	}
	if ((b.a.warm_only || b.a.file_in_job) && strcmp(what, "warm") != 0) {
		fprintf(stderr, "selene %s: --%s is for bench warm\n", cmd,
			b.a.warm_only ? "warm-only" : "file-in-job");
		return LAUNCH_EXIT_USAGE;
	}
	if (b.a.warm_only && b.a.file_in_job) {
		fprintf(stderr, "selene %s: --warm-only and --file-in-job exclude each other\n",
			cmd);
		return LAUNCH_EXIT_USAGE;
	}
	/* Rank zero sends every store with warm room warm only: so does the bench. */
	if (strcmp(what, "warm") == 0)
		b.a.warm_only = !b.a.file_in_job;
	/* one chain is one fetch job: its records and pages within a job's */
	if (b.a.chain && (strcmp(what, "fetch") != 0 ||
			  b.a.records > SHARD_CHAIN_RECORDS_MAX ||
			  (uint64_t)b.a.records * b.a.pages > REC_RECORD_PAGES_MAX)) {
		fprintf(stderr, "selene %s: --chain is for bench fetch, with at most %u records "
			"and %u pages in all\n", cmd, SHARD_CHAIN_RECORDS_MAX, REC_RECORD_PAGES_MAX);
		return LAUNCH_EXIT_USAGE;
	}
	/* the default directory is made where missing; a named one must exist */
	if (strcmp(b.a.dir, BENCH_DIR_DEFAULT) == 0 && mkdir(b.a.dir, 0755) && errno != EEXIST) {
		fprintf(stderr, "selene %s: cannot make %s: %s\n", cmd, b.a.dir, strerror(errno));
		return LAUNCH_EXIT_BAD;
	}
	sel_log_set_level(SEL_LOG_WARN);
	b.what = what;
	if (strcmp(what, "startup") == 0) /* in DIR itself: --keep leaves its records */
		return bench_startup(b.a.dir, b.a.ranks ? b.a.ranks : 8,
				     b.a.records ? b.a.records : 100000,
				     b.a.rounds_set ? b.a.rounds : 3, b.a.keep, b.a.cold) ?
			       LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
	snprintf(cmd, sizeof(cmd), "selene bench %.20s", what);
	return launch_scratch_run(cmd, b.a.dir, "selene-bench", bench_in_scratch, &b);
}
