/*
 * The disk alone under selene bench restore (launch/bench/floor.h): a
 * reader and a writer thread a rank, each with its own ring; the main
 * thread starts every sample and times it. Phase, the reading flag and the
 * stop flag change under the lock with a broadcast, so a writer held back
 * (floor_hold) or a reader waiting for its next sample never misses one.
 */
#include "launch/bench/floor.h"
#include "launch/bench/store.h"
#include "launch/scratch.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "record/disk.h"
#include "record/io.h"
#include "selene/selene.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define FLOOR_CHUNK (8u << 20)  /* without kernel workers: 8 MiB requests */
#define FLOOR_TARGETS 4u        /* the files a rank's reads take in turn */
#define FLOOR_WRITE_FILES 4u    /* a writer's files, rewritten in turn */
#define FLOOR_WARM_FILES 4u     /* a rank's files written before a phase's first sample */
#define FLOOR_RING_ENTRIES 64u  /* a file's requests, all at once */
#define FLOOR_ALIGN (2u << 20)

struct floor;

struct floor_rank {
	struct floor *f;
	uint32_t rank;
	uint8_t *read_buffer;
	int target_fd[FLOOR_TARGETS];
	struct io_uring read_ring, write_ring; /* made before the threads start */
	bool rings_made;
	struct iovec read_iov[FLOOR_RING_ENTRIES], write_iov[FLOOR_RING_ENTRIES];
	pthread_t reader, writer;
	bool reader_started, writer_started;
};

struct floor {
	int dirfd;
	uint32_t world;
	uint64_t bytes;              /* a read's, and a written file's */
	struct bench_floor_io io;
	uint8_t *write_buffer;       /* one file's bytes, every writer's source */
	pthread_mutex_t lock;
	pthread_cond_t changed;
	uint64_t sample;             /* under lock: readers run each new one */
	uint32_t readers_done;       /* under lock */
	int phase;                   /* atomic; changed under lock */
	bool reading;                /* atomic; changed under lock: a sample runs */
	bool stop;                   /* atomic; set under lock */
	int error;                   /* atomic: the first failure */
	uint64_t written;            /* atomic: bytes the writers completed */
	struct floor_rank ranks[BENCH_FLOOR_RANKS_MAX];
};

static bool floor_stopped(struct floor *f)
{
	return __atomic_load_n(&f->stop, __ATOMIC_RELAXED);
}

/* Records the first failure and stops every thread; says what failed. */
static void floor_fail(struct floor *f, const char *what, int err)
{
	int none = 0;

	fprintf(stderr, "selene bench restore: the disk alone, %s: %s\n", what,
		sel_strerror(err));
	__atomic_compare_exchange_n(&f->error, &none, err, false, __ATOMIC_RELAXED,
				    __ATOMIC_RELAXED);
	pthread_mutex_lock(&f->lock);
	__atomic_store_n(&f->stop, true, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&f->changed);
	pthread_mutex_unlock(&f->lock);
}

/* Whether a writer may issue a request now. */
static bool floor_may_write(struct floor *f)
{
	int phase = __atomic_load_n(&f->phase, __ATOMIC_RELAXED);

	return phase == BENCH_FLOOR_LOADED ||
	       (phase == BENCH_FLOOR_YIELDING && !__atomic_load_n(&f->reading, __ATOMIC_RELAXED));
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

/* Moves to phase, or stops (BENCH_FLOOR_PHASES), waking whoever waits on either. */
static void floor_set_phase(struct floor *f, int phase)
{
	pthread_mutex_lock(&f->lock);
	if (phase == BENCH_FLOOR_PHASES)
		__atomic_store_n(&f->stop, true, __ATOMIC_RELAXED);
	else
		__atomic_store_n(&f->phase, phase, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&f->changed);
	pthread_mutex_unlock(&f->lock);
}

/*
 * A ring as the disk thread's would be here, its kernel workers bounded
 * (behind the same failpoint as record/disk.c's): 0 or a negative errno.
 */
static int floor_ring(const struct floor *f, struct io_uring *ring)
{
	int ret = io_uring_queue_init(FLOOR_RING_ENTRIES, ring, 0);

	if (!ret && f->io.workers) {
		unsigned int workers[2] = { f->io.workers, f->io.workers };

		ret = SEL_FAILPOINT(SEL_FP_DISK_IO_WORKERS);
		if (ret >= 0)
			ret = io_uring_register_iowq_max_workers(ring, workers);
		if (ret)
			io_uring_queue_exit(ring);
	}
	return ret < 0 ? ret : 0;
}

/* Hands prepared requests to the kernel, counting them in *in_kernel. */
static int floor_submit(struct io_uring *ring, uint32_t prepared, uint32_t *in_kernel)
{
	while (prepared > 0) {
		int n = io_uring_submit(ring);

		if (n == -EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? n : -EIO;
		*in_kernel += (uint32_t)n;
		prepared -= (uint32_t)n < prepared ? (uint32_t)n : prepared;
	}
	return 0;
}

/*
 * Takes one completion: *taken says whether one was taken; 0, or the
 * request's failure (or the wait's, when none was taken).
 */
static int floor_complete(struct io_uring *ring, uint32_t chunk, bool *taken)
{
	struct io_uring_cqe *cqe;
	int ret;

	do
		ret = io_uring_wait_cqe(ring, &cqe);
	while (ret == -EINTR);
	*taken = ret == 0;
	if (ret)
		return ret;
	ret = cqe->res < 0 ? cqe->res : (uint32_t)cqe->res != chunk ? -EIO : 0;
	io_uring_cqe_seen(ring, cqe);
	return ret;
}

/*
 * Reads or writes fd's f->bytes with every request in flight, each a
 * one-buffer readv or writev as the disk thread's (iov holds them); a
 * writer issues each only while floor_may_write says so, read without the
 * lock, so one may go out just as a sample starts. However it ends, the
 * kernel holds none of buf after (unless a wait itself failed, which
 * leaves nothing to wait with).
 */
static int floor_file_io(struct floor *f, struct io_uring *ring, struct iovec *iov, int fd,
			 uint8_t *buf, bool write)
{
	uint32_t chunk = f->io.chunk_bytes, in_kernel = 0;
	uint64_t prepared_bytes = 0, completed = 0;
	bool taken = true;
	int ret = 0;

	while (!ret && completed < f->bytes) {
		uint32_t prepared = 0;
		struct io_uring_sqe *sqe;

		while (prepared_bytes < f->bytes && (!write || floor_may_write(f)) &&
		       (sqe = io_uring_get_sqe(ring)) != NULL) {
			struct iovec *v = &iov[prepared_bytes / chunk];

			*v = (struct iovec){ buf + prepared_bytes, chunk };
			if (write)
				io_uring_prep_writev(sqe, fd, v, 1, prepared_bytes);
			else
				io_uring_prep_readv(sqe, fd, v, 1, prepared_bytes);
			if (f->io.workers)
				io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
			prepared_bytes += chunk;
			prepared++;
		}
		ret = floor_submit(ring, prepared, &in_kernel);
		if (ret)
			break;
		if (in_kernel == 0) { /* a writer held back */
			if (!floor_hold(f))
				ret = -ECANCELED;
			continue;
		}
		ret = floor_complete(ring, chunk, &taken);
		if (!taken)
			return ret;
		in_kernel--;
		completed += chunk;
		if (write && !ret)
			__atomic_add_fetch(&f->written, chunk, __ATOMIC_RELAXED);
	}
	while (in_kernel > 0 && taken) {
		(void)floor_complete(ring, chunk, &taken);
		in_kernel -= taken;
	}
	return ret;
}

static void *floor_writer(void *arg)
{
	struct floor_rank *fr = arg;
	struct floor *f = fr->f;
	int ret;

	for (uint64_t n = 0; floor_hold(f); n++) {
		char name[64];
		int fd;

		snprintf(name, sizeof(name), "write-%u-%u", fr->rank,
			 (unsigned)(n % FLOOR_WRITE_FILES));
		fd = rec_io_open(f->dirfd, name, O_CREAT | O_TRUNC | O_WRONLY, f->io.direct);
		ret = fd < 0 ? fd : rec_io_fallocate(fd, f->bytes); /* as a record's create */
		if (!ret)
			ret = floor_file_io(f, &fr->write_ring, fr->write_iov, fd,
					    f->write_buffer, true);
		if (fd >= 0)
			close(fd);
		if (ret) {
			if (ret != -ECANCELED)
				floor_fail(f, "writing", ret);
			break;
		}
	}
	return NULL;
}

static void *floor_reader(void *arg)
{
	struct floor_rank *fr = arg;
	struct floor *f = fr->f;
	uint64_t seen = 0;

	for (;;) {
		int ret;
		uint64_t sample;

		pthread_mutex_lock(&f->lock);
		while (f->sample == seen && !floor_stopped(f))
			pthread_cond_wait(&f->changed, &f->lock);
		sample = seen = f->sample;
		pthread_mutex_unlock(&f->lock);
		if (floor_stopped(f))
			break;
		ret = floor_file_io(f, &fr->read_ring, fr->read_iov,
				    fr->target_fd[sample % FLOOR_TARGETS], fr->read_buffer, false);
		if (ret)
			floor_fail(f, "reading", ret);
		pthread_mutex_lock(&f->lock);
		f->readers_done++;
		pthread_cond_broadcast(&f->changed);
		pthread_mutex_unlock(&f->lock);
	}
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

/* The phases in turn, samples samples each, into *out. */
static int floor_phases(struct floor *f, uint32_t samples, uint64_t *ns,
			struct bench_floor_result *out)
{
	int ret = 0;

	for (int phase = BENCH_FLOOR_IDLE; !ret && phase < BENCH_FLOOR_PHASES; phase++) {
		uint64_t written, t0;

		floor_set_phase(f, phase);
		/* The writers well under way first, as the stores are. */
		written = __atomic_load_n(&f->written, __ATOMIC_RELAXED);
		while (phase != BENCH_FLOOR_IDLE && !floor_stopped(f) &&
		       __atomic_load_n(&f->written, __ATOMIC_RELAXED) <
			       written + FLOOR_WARM_FILES * f->bytes * f->world)
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

/* Makes rank's target files (a restore's bytes each) and its read buffer. */
static int floor_rank_setup(struct floor *f, struct floor_rank *fr)
{
	if (posix_memalign((void **)&fr->read_buffer, FLOOR_ALIGN, f->bytes)) {
		fr->read_buffer = NULL;
		return -ENOMEM;
	}
	for (uint32_t t = 0; t < FLOOR_TARGETS; t++) {
		char name[64];
		int ret;

		snprintf(name, sizeof(name), "target-%u-%u", fr->rank, t);
		ret = rec_io_open(f->dirfd, name, O_CREAT | O_TRUNC | O_RDWR, f->io.direct);
		if (ret < 0)
			return ret;
		fr->target_fd[t] = ret;
		ret = rec_io_write_full(ret, f->write_buffer, f->bytes, 0);
		if (ret)
			return ret;
	}
	return 0;
}

/* How the disk thread would do I/O in f->dirfd; io->unavailable without io_uring. */
static int floor_probe(struct floor *f)
{
	struct io_uring ring;
	int reason, ret = rec_io_probe_direct(f->dirfd, &reason);

	if (ret < 0)
		return ret;
	f->io.direct = ret == 1;
	f->io.workers = rec_disk_default_io_workers_for(rec_io_memory_backed(f->dirfd),
							f->io.direct);
	ret = floor_ring(f, &ring);
	if (ret && f->io.workers) {
		/* Where the kernel refuses the bound, the disk thread goes inline. */
		f->io.workers = 0;
		ret = floor_ring(f, &ring);
	}
	if (ret) {
		f->io.unavailable = ret;
		return 0;
	}
	io_uring_queue_exit(&ring);
	f->io.chunk_bytes = f->io.workers ? REC_DISK_WORKER_CHUNK_BYTES : FLOOR_CHUNK;
	if (f->bytes % f->io.chunk_bytes || f->bytes / f->io.chunk_bytes > FLOOR_RING_ENTRIES)
		return -EINVAL;
	return 0;
}

/* Starts every rank's reader and writer, then runs the phases. */
static int floor_run(struct floor *f, uint32_t samples, uint64_t *ns,
		     struct bench_floor_result *out)
{
	int ret = 0;

	for (uint32_t r = 0; !ret && r < f->world; r++) {
		struct floor_rank *fr = &f->ranks[r];

		ret = floor_rank_setup(f, fr);
		if (!ret) {
			/* Made here, so a ring the kernel refuses is said as such. */
			ret = floor_ring(f, &fr->read_ring);
			if (!ret && (ret = floor_ring(f, &fr->write_ring)) != 0)
				io_uring_queue_exit(&fr->read_ring);
			fr->rings_made = !ret;
			if (ret) {
				f->io.unavailable = ret;
				break;
			}
		}
		if (!ret)
			ret = -pthread_create(&fr->reader, NULL, floor_reader, fr);
		fr->reader_started = !ret;
		if (!ret)
			ret = -pthread_create(&fr->writer, NULL, floor_writer, fr);
		fr->writer_started = !ret;
	}
	if (!ret)
		ret = floor_phases(f, samples, ns, out);
	floor_set_phase(f, BENCH_FLOOR_PHASES);
	for (uint32_t r = 0; r < f->world; r++) {
		struct floor_rank *fr = &f->ranks[r];

		if (fr->reader_started)
			pthread_join(fr->reader, NULL);
		if (fr->writer_started)
			pthread_join(fr->writer, NULL);
		if (fr->rings_made) {
			io_uring_queue_exit(&fr->read_ring);
			io_uring_queue_exit(&fr->write_ring);
		}
	}
	if (f->io.unavailable)
		return 0; /* nothing measured; the caller says why */
	/* A failure after the last sample still fails the measurement. */
	return ret ? ret : __atomic_load_n(&f->error, __ATOMIC_RELAXED);
}

int bench_floor_measure(const char *dir, uint32_t world, uint64_t bytes, uint32_t samples,
			uint64_t *ns, struct bench_floor_result *out,
			struct bench_floor_io *io)
{
	char path[1024];
	struct floor *f;
	bool made = false;
	int ret = 0;

	memset(out, 0, sizeof(*out));
	memset(io, 0, sizeof(*io));
	if (world == 0 || world > BENCH_FLOOR_RANKS_MAX || samples == 0 || bytes == 0)
		return -EINVAL;
	/* Cut short, it would name another directory, which the end removes. */
	if ((size_t)snprintf(path, sizeof(path), "%s/floor", dir) >= sizeof(path)) {
		fprintf(stderr, "selene bench restore: %s: too long a path\n", dir);
		return -ENAMETOOLONG;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->world = world;
	f->bytes = bytes;
	f->dirfd = -1;
	for (uint32_t r = 0; r < BENCH_FLOOR_RANKS_MAX; r++) {
		f->ranks[r] = (struct floor_rank){ .f = f, .rank = r };
		for (uint32_t t = 0; t < FLOOR_TARGETS; t++)
			f->ranks[r].target_fd[t] = -1;
	}
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->changed, NULL);
	if (mkdir(path, 0755) != 0)
		ret = -errno;
	made = ret == 0;
	if (!ret) {
		f->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		ret = f->dirfd < 0 ? -errno : floor_probe(f);
	}
	if (!ret && !f->io.unavailable) {
		if (posix_memalign((void **)&f->write_buffer, FLOOR_ALIGN, bytes)) {
			f->write_buffer = NULL;
			ret = -ENOMEM;
		} else {
			memset(f->write_buffer, 0x5a, bytes);
			ret = floor_run(f, samples, ns, out);
		}
	}
	if (ret)
		fprintf(stderr, "selene bench restore: the disk alone in %s: %s\n", path,
			sel_strerror(ret));
	*io = f->io;
	for (uint32_t r = 0; r < world; r++) {
		for (uint32_t t = 0; t < FLOOR_TARGETS; t++)
			if (f->ranks[r].target_fd[t] >= 0)
				close(f->ranks[r].target_fd[t]);
		free(f->ranks[r].read_buffer);
	}
	if (f->dirfd >= 0)
		close(f->dirfd);
	if (made) /* only what this call made */
		launch_remove_tree(path);
	free(f->write_buffer);
	pthread_cond_destroy(&f->changed);
	pthread_mutex_destroy(&f->lock);
	free(f);
	return ret;
}
