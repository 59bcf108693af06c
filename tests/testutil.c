/* Test helpers: see testutil.h. */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

char *tu_make_temp_dir(const char *tag)
{
	const char *base = getenv("TMPDIR");
	char *path;

	if (!base || !*base)
		base = "/tmp";
	if (asprintf(&path, "%s/selene-%s-XXXXXX", base, tag) < 0)
		abort();
	if (!mkdtemp(path)) {
		perror("mkdtemp");
		abort();
	}
	return path;
}

static int remove_entry(const char *path, const struct stat *st, int flag,
			struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void tu_remove_tree(char *path)
{
	if (!path)
		return;
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(path);
}

void tu_geometry(struct rec_geometry *g, uint32_t page_tokens,
		 uint32_t plane_count, uint64_t unit_bytes, uint64_t row_bytes,
		 uint32_t rank, uint32_t world_size)
{
	struct rec_plane *planes = calloc(plane_count, sizeof(*planes));
	struct rec_geometry_spec spec = {
		.page_tokens = page_tokens,
		.page_plane_count = plane_count,
		.page_planes = planes,
		.page_count = 64,
		.row_count = 8,
		.rank = rank,
		.world_size = world_size,
	};
	char err[256];

	SEL_ASSERT(planes);
	for (uint32_t i = 0; i < plane_count; i++) {
		snprintf(planes[i].name, sizeof(planes[i].name), "plane.%03u", i);
		planes[i].unit_bytes = unit_bytes;
	}
	snprintf(spec.row_plane.name, sizeof(spec.row_plane.name), "state");
	spec.row_plane.unit_bytes = row_bytes;
	if (rec_geometry_init(g, &spec, err, sizeof(err)) != 0) {
		fprintf(stderr, "tu_geometry: %s\n", err);
		abort();
	}
	free(planes);
}

void tu_identities(struct rec_identity *model, struct rec_identity *namespace_id)
{
	struct rec_identity m;

	rec_model_identity_from_name(&m, "test-model");
	if (model)
		*model = m;
	if (namespace_id)
		rec_namespace_identity(namespace_id, &m, REC_STATE_ORDINARY);
}

void *tu_alloc(size_t len)
{
	void *p = NULL;

	if (posix_memalign(&p, SEL_BLOCK_BYTES, len ? len : 1) != 0)
		abort();
	memset(p, 0, len);
	return p;
}

/* splitmix64: a fixed, portable generator for test data. */
static uint64_t splitmix(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void tu_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t state = seed;

	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = splitmix(&state);
		size_t n = len - i < 8 ? len - i : 8;

		memcpy(p + i, &v, n);
	}
}

void tu_tokens(uint32_t *out, size_t count, uint64_t seed)
{
	uint64_t state = seed;

	for (size_t i = 0; i < count; i++)
		out[i] = (uint32_t)(splitmix(&state) % 151936);
}

void tu_record_make(struct tu_record *rec, const struct rec_geometry *g,
		    uint64_t history_seed, uint64_t consumed,
		    const struct tu_record *parent, uint64_t payload_seed)
{
	struct rec_identity model;
	struct rec_history history;
	uint32_t *tokens = calloc(consumed, sizeof(uint32_t));

	SEL_ASSERT(tokens);
	tu_identities(&model, NULL);
	tu_tokens(tokens, consumed, history_seed);
	SEL_ASSERT(rec_history_init(&history, &model, tokens, consumed) == 0);
	memset(rec, 0, sizeof(*rec));
	rec_history_key_at(&history, consumed, &rec->key);
	rec_history_free(&history);
	free(tokens);
	if (parent) {
		rec->parent = parent->key;
		rec->has_parent = true;
		rec->first_page_index = (uint32_t)(parent->key.consumed / g->page_tokens);
	}
	rec->tail_page_count =
		(uint32_t)(consumed / g->page_tokens) - rec->first_page_index;
	rec->stride = g->page_record_bytes;
	rec->row_length = g->row_record_bytes;
	rec->pages = tu_alloc(rec->stride * rec->tail_page_count);
	rec->row = tu_alloc(rec->row_length);
	tu_fill(rec->pages, rec->stride * rec->tail_page_count, payload_seed);
	tu_fill(rec->row, rec->row_length, payload_seed ^ 0x5eed);
}

void tu_record_free(struct tu_record *rec)
{
	free(rec->pages);
	free(rec->row);
	rec->pages = rec->row = NULL;
}

void tu_record_header(struct rec_header *h, struct rec_dir *dir,
		      const struct tu_record *rec)
{
	struct rec_digest bucket;

	memset(&bucket, 0xb5, sizeof(bucket));
	SEL_ASSERT(rec_header_init(h, rec_dir_geometry(dir), rec_dir_namespace(dir),
				   &rec->key, rec->has_parent ? &rec->parent : NULL,
				   &bucket, rec->first_page_index,
				   rec->tail_page_count, 1700000000000000000ull) == 0);
}

int tu_record_write(struct rec_dir *dir, const struct tu_record *rec,
		    uint32_t window_pages)
{
	struct rec_header h;
	struct rec_writer w;
	uint32_t done = 0;
	int ret;

	tu_record_header(&h, dir, rec);
	ret = rec_writer_begin(&w, dir, &h);
	if (ret)
		return ret;
	if (window_pages == 0)
		window_pages = rec->tail_page_count ? rec->tail_page_count : 1;
	while (done < rec->tail_page_count) {
		uint32_t n = rec->tail_page_count - done;

		n = n < window_pages ? n : window_pages;
		ret = rec_writer_put_pages(&w, done, n, rec->pages + rec->stride * done);
		if (ret)
			goto err_abort;
		done += n;
	}
	ret = rec_writer_put_row(&w, rec->row);
	if (ret)
		goto err_abort;
	return rec_writer_commit(&w);
err_abort:
	rec_writer_abort(&w);
	return ret;
}

static struct rec_dir *dir_open(const char *base, const struct rec_geometry *g,
				bool durable, bool no_direct)
{
	struct rec_identity namespace_id;
	struct rec_dir_options options = {
		.base_path = base,
		.namespace_id = &namespace_id,
		.geometry = g,
		.durable = durable,
		.no_direct = no_direct,
	};
	struct rec_dir *dir;
	char err[256];

	tu_identities(NULL, &namespace_id);
	if (rec_dir_open(&options, &dir, err, sizeof(err)) != 0) {
		fprintf(stderr, "tu_dir_open: %s\n", err);
		abort();
	}
	return dir;
}

struct rec_dir *tu_dir_open(const char *base, const struct rec_geometry *g,
			    bool durable)
{
	return dir_open(base, g, durable, false);
}

struct rec_dir *tu_dir_open_buffered(const char *base,
				     const struct rec_geometry *g)
{
	return dir_open(base, g, false, true);
}

void tu_assert_info_equal(const struct rec_record_info *a, const struct rec_record_info *b)
{
	assert_true(rec_key_equal(&a->key, &b->key));
	assert_true(rec_key_equal(&a->parent, &b->parent));
	assert_true(rec_digest_equal(&a->bucket, &b->bucket));
	assert_int_equal(a->first_page_index, b->first_page_index);
	assert_int_equal(a->tail_page_count, b->tail_page_count);
	assert_int_equal(a->row_present, b->row_present);
	assert_int_equal(a->file_bytes, b->file_bytes);
	assert_int_equal(a->mtime_ns, b->mtime_ns);
	assert_int_equal(a->created_ns, b->created_ns);
	assert_true(rec_digest_equal(&a->agreement, &b->agreement));
}

char *tu_record_path(struct rec_dir *dir, const struct rec_key *key)
{
	char name[REC_FILE_NAME_BYTES];
	char *path;

	rec_file_name(name, key);
	if (asprintf(&path, "%s/%s", rec_dir_path(dir), name) < 0)
		abort();
	return path;
}

void tu_flip_bit(const char *path, uint64_t offset)
{
	int fd = open(path, O_RDWR);
	uint8_t byte;

	SEL_ASSERT(fd >= 0);
	SEL_ASSERT(pread(fd, &byte, 1, (off_t)offset) == 1);
	byte ^= 0x10;
	SEL_ASSERT(pwrite(fd, &byte, 1, (off_t)offset) == 1);
	close(fd);
}

int tu_count_suffix(const char *dir_path, const char *suffix)
{
	DIR *d = opendir(dir_path);
	struct dirent *e;
	size_t suffix_len = strlen(suffix);
	int count = 0;

	SEL_ASSERT(d);
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);

		if (len >= suffix_len &&
		    strcmp(e->d_name + len - suffix_len, suffix) == 0)
			count++;
	}
	closedir(d);
	return count;
}

int tu_check_metrics(const char *text, const char *required)
{
	char path[] = "/tmp/selene-metrics-XXXXXX", cmd[1024];
	int fd = mkstemp(path), status;
	size_t len = strlen(text);

	SEL_ASSERT(fd >= 0);
	SEL_ASSERT(write(fd, text, len) == (ssize_t)len);
	close(fd);
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 tests/metrics_check.py %s %s", path,
		 required);
	status = system(cmd);
	unlink(path);
	status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
	if (status == 77)
		print_message("metrics: python3-prometheus-client is missing; not parsed\n");
	else if (status != 0)
		fail_msg("the metrics exposition is not valid (above):\n%s", text);
	return status;
}

static void tu_die_at_failpoint(bool abort_it)
{
	if (abort_it)
		abort();
	raise(SIGKILL);
	_exit(137);
}

void tu_failpoints_may_kill(void)
{
	sel_failpoints_set_fatal(tu_die_at_failpoint);
	setenv("SELENE_FAILPOINTS_ALLOW_FATAL", "1", 1);
}

double tu_cpu_seconds(int who)
{
	struct rusage u;

	getrusage(who, &u);
	return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
	       ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) / 1e6;
}

int tu_device_bind(struct shard_device *dev)
{
	(void)dev;
	return 0;
}

int tu_device_register(struct shard_device *dev, void *ptr, uint64_t bytes)
{
	(void)dev;
	(void)ptr;
	(void)bytes;
	return 0;
}

void tu_device_unregister(struct shard_device *dev, void *ptr)
{
	(void)dev;
	(void)ptr;
}

void tu_device_close(struct shard_device *dev)
{
	(void)dev;
}

int tu_device_mark_none(struct shard_device *dev, uint32_t mark)
{
	(void)dev;
	SEL_ASSERT(mark < SHARD_DEVICE_MARKS);
	return 0;
}

uint64_t tu_entries_to_host, tu_entries_to_device;
static int (*counted_copy)(struct shard_device *dev, enum shard_copy_direction dir,
			   const struct shard_copy *copies, uint32_t count);

static int entry_counting_copy(struct shard_device *dev, enum shard_copy_direction dir,
			       const struct shard_copy *copies, uint32_t count)
{
	if (dir == SHARD_DEVICE_TO_HOST)
		tu_entries_to_host += count;
	else
		tu_entries_to_device += count;
	return counted_copy(dev, dir, copies, count);
}

void tu_count_copy_entries(struct shard_device *dev)
{
	static struct shard_device_ops ops;

	tu_entries_to_host = tu_entries_to_device = 0;
	if (dev->ops == &ops)
		return; /* counting already */
	ops = *dev->ops;
	counted_copy = dev->ops->copy;
	ops.copy = entry_counting_copy;
	dev->ops = &ops;
}

static int deferred_copy(struct shard_device *dev, enum shard_copy_direction direction,
			 const struct shard_copy *copies, uint32_t count)
{
	struct tu_deferred_device *d = (struct tu_deferred_device *)dev;
	uint32_t call;

	SEL_ASSERT(d->queued_count + count <= SEL_ARRAY_SIZE(d->queued));
	call = __atomic_add_fetch(&d->copy_calls, 1, __ATOMIC_RELAXED);
	if (call == __atomic_load_n(&d->gate_at, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&d->gate_blocked, 1, __ATOMIC_RELEASE);
		while (__atomic_load_n(&d->gate_at, __ATOMIC_ACQUIRE))
			usleep(200);
		__atomic_store_n(&d->gate_blocked, 0, __ATOMIC_RELEASE);
	}
	for (uint32_t i = 0; i < count; i++) {
		d->directions[d->queued_count] = direction;
		d->batch_of[d->queued_count] = call;
		d->queued[d->queued_count++] = copies[i];
	}
	d->queued_batches++;
	return 0;
}

/*
 * Runs the first n queued copies (none when this wait is the one to fail)
 * and drops them from the queue. Returns 0 or -EIO.
 */
static int deferred_drain(struct tu_deferred_device *d, uint32_t n)
{
	bool fail = __atomic_add_fetch(&d->synchronize_calls, 1, __ATOMIC_RELAXED) ==
		    __atomic_load_n(&d->fail_synchronize_at, __ATOMIC_RELAXED);

	/* A failed stream ran none of its copies. */
	for (uint32_t i = 0; i < n && !fail; i++)
		shard_copy_in_memory(d->directions[i], &d->queued[i], 1);
	memmove(d->directions, d->directions + n, (d->queued_count - n) * sizeof(d->directions[0]));
	memmove(d->queued, d->queued + n, (d->queued_count - n) * sizeof(d->queued[0]));
	memmove(d->batch_of, d->batch_of + n, (d->queued_count - n) * sizeof(d->batch_of[0]));
	d->queued_count -= n;
	d->consumed += n;
	d->queued_batches = d->queued_count ?
		d->batch_of[d->queued_count - 1] - d->batch_of[0] + 1 : 0;
	return fail ? -EIO : 0;
}

static int deferred_synchronize(struct shard_device *dev)
{
	struct tu_deferred_device *d = (struct tu_deferred_device *)dev;

	return deferred_drain(d, d->queued_count);
}

static int deferred_mark(struct shard_device *dev, uint32_t mark)
{
	struct tu_deferred_device *d = (struct tu_deferred_device *)dev;

	SEL_ASSERT(mark < SHARD_DEVICE_MARKS);
	d->marks[mark] = d->consumed + d->queued_count;
	d->mark_calls++;
	return 0;
}

static int deferred_wait_mark(struct shard_device *dev, uint32_t mark)
{
	struct tu_deferred_device *d = (struct tu_deferred_device *)dev;

	SEL_ASSERT(mark < SHARD_DEVICE_MARKS);
	d->mark_waits++;
	return deferred_drain(d, d->marks[mark] > d->consumed ?
				       (uint32_t)(d->marks[mark] - d->consumed) : 0);
}

static const struct shard_device_ops deferred_ops = {
	.name = "deferred",
	.bind = tu_device_bind,
	.register_host = tu_device_register,
	.unregister_host = tu_device_unregister,
	.copy = deferred_copy,
	.synchronize = deferred_synchronize,
	.close = tu_device_close,
	.mark = deferred_mark,
	.wait_mark = deferred_wait_mark,
};

void tu_deferred_device_init(struct tu_deferred_device *d)
{
	memset(d, 0, sizeof(*d));
	d->base.ops = &deferred_ops;
}

void tu_deferred_gate_wait(struct tu_deferred_device *d)
{
	alarm(60);
	while (!__atomic_load_n(&d->gate_blocked, __ATOMIC_ACQUIRE))
		usleep(200);
	alarm(0);
}

int tu_listen_loopback(int backlog, uint16_t *port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(fd, backlog), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
	*port = ntohs(addr.sin_port);
	return fd;
}

int tu_reap(pid_t *pid)
{
	int status;

	if (*pid <= 0)
		return 0;
	assert_int_equal(waitpid(*pid, &status, 0), *pid);
	*pid = 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

void tu_assert_aborts(void (*fn)(void *arg), void *arg)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (!freopen("/dev/null", "w", stderr))
			_exit(2);
		fn(arg);
		_exit(0);
	}
	assert_int_equal(tu_reap(&pid), -SIGABRT);
}

void tu_seeded_init(struct tu_seeded *s, const char *test, const char *seed_env,
		    const char *trace_env, uint64_t seed)
{
	s->test = test;
	s->seed_env = seed_env;
	s->trace_env = trace_env;
	s->seed = seed;
	s->rng = seed * 0x9e3779b97f4a7c15ull + 1;
	s->step = 0;
	s->next = 0;
	s->trace_all = getenv(trace_env) != NULL;
}

uint64_t tu_seeded_rand(struct tu_seeded *s)
{
	s->rng ^= s->rng >> 12;
	s->rng ^= s->rng << 25;
	s->rng ^= s->rng >> 27;
	return s->rng * 2685821657736338717ull;
}

uint32_t tu_seeded_below(struct tu_seeded *s, uint32_t n)
{
	return (uint32_t)((tu_seeded_rand(s) >> 33) % n);
}

void tu_seeded_vtrace(struct tu_seeded *s, const char *fmt, va_list ap)
{
	char *line = s->lines[s->next++ % TU_SEEDED_LINES];
	int n = snprintf(line, TU_SEEDED_LINE_BYTES, "%6llu ", (unsigned long long)s->step);

	vsnprintf(line + n, TU_SEEDED_LINE_BYTES - (size_t)n, fmt, ap);
	if (s->trace_all)
		fprintf(stderr, "%s\n", line);
}

void tu_seeded_trace(struct tu_seeded *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tu_seeded_vtrace(s, fmt, ap);
	va_end(ap);
}

/* write(2) only: it also runs in the abort handler. */
void tu_seeded_dump(const struct tu_seeded *s)
{
	uint32_t n = s->next < TU_SEEDED_LINES ? s->next : TU_SEEDED_LINES;

	if (s->trace_all)
		return;
	for (uint32_t i = s->next - n; i < s->next; i++) {
		const char *line = s->lines[i % TU_SEEDED_LINES];

		if (write(STDERR_FILENO, line, strlen(line)) < 0 ||
		    write(STDERR_FILENO, "\n", 1) < 0)
			return;
	}
}

static struct tu_seeded *seeded_aborting;

static void seeded_on_abort(int sig)
{
	const struct tu_seeded *s = seeded_aborting;
	char line[256];
	ssize_t written;
	int n;

	(void)sig;
	if (s) {
		tu_seeded_dump(s);
		n = snprintf(line, sizeof(line), "%s: aborted in seed %llu at step %llu (replay: "
			     "%s=%llu %s=1)\n", s->test, (unsigned long long)s->seed,
			     (unsigned long long)s->step, s->seed_env,
			     (unsigned long long)s->seed, s->trace_env);
		written = write(STDERR_FILENO, line, (size_t)n);
		(void)written; /* nothing more to do about it while aborting */
	}
	signal(SIGABRT, SIG_DFL);
	abort();
}

void tu_seeded_catch_aborts(struct tu_seeded *s)
{
	seeded_aborting = s;
	signal(SIGABRT, s ? seeded_on_abort : SIG_DFL);
}
