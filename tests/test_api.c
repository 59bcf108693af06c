/*
 * The public store API (include/selene/store.h) end to end on the host
 * device: a conversation's checkpoints published from device planes,
 * the GPU cache poisoned, a longer history looked up and fetched into other
 * ids byte-exact; the same after closing and reopening the store; metrics;
 * no disk store; a second opener refused; a full filesystem answering
 * Retry until room returns; every thread the open starts refused in turn;
 * NULL arguments refused; a record file replaced by a symlink or FIFO
 * dropped like a missing one; a forked child's calls on its parent's store
 * refused; staging past the machine's memory refused at open.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "selene/store.h"
#include "shard/slab.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define UNIT 5000u
#define ROW 20000u
#define PAGES 64u
#define ROWS 8u
#define TOKENS 1200u

struct fixture {
	char *base;
	uint8_t *planes[2];
	uint8_t *rows;
	struct sel_plane page_planes[2];
	struct sel_store_config config;
	sel_store *store;
	uint32_t tokens[TOKENS];
	sel_history *history;
};

static void fill_page(struct fixture *f, uint32_t id, uint64_t index)
{
	for (int p = 0; p < 2; p++)
		tu_fill(f->planes[p] + (uint64_t)UNIT * id, UNIT, index * 8 + (uint64_t)p);
}

static bool page_is(struct fixture *f, uint32_t id, uint64_t index)
{
	uint8_t expect[UNIT];

	for (int p = 0; p < 2; p++) {
		tu_fill(expect, UNIT, index * 8 + (uint64_t)p);
		if (memcmp(expect, f->planes[p] + (uint64_t)UNIT * id, UNIT) != 0)
			return false;
	}
	return true;
}

static void open_store(struct fixture *f)
{
	char err[512];

	if (sel_store_open(&f->config, &f->store, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
}

static int setup_at(void **state, char *base)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct rec_identity model;

	f->base = base;
	for (int p = 0; p < 2; p++) {
		f->planes[p] = tu_alloc((uint64_t)UNIT * PAGES);
		f->page_planes[p] = (struct sel_plane){ .name = p ? "v" : "k", .unit_bytes = UNIT,
							.device_address = (uintptr_t)f->planes[p] };
	}
	f->rows = tu_alloc((uint64_t)ROW * ROWS);
	tu_identities(&model, NULL);
	f->config = (struct sel_store_config){
		.dir = f->base, .page_tokens = 64, .page_plane_count = 2,
		.page_planes = f->page_planes,
		.row_plane = { .name = "state", .unit_bytes = ROW,
			       .device_address = (uintptr_t)f->rows },
		.page_count = PAGES, .row_count = ROWS, .device = "host",
		.disk_limit_bytes = 1ull << 30, .durable = true, .records_max = 1000,
	};
	memcpy(f->config.model_identity, model.bytes, 32);
	tu_tokens(f->tokens, TOKENS, 4242);
	sel_log_set_level(SEL_LOG_WARN);
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return setup_at(state, tu_make_temp_dir("api"));
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sel_history_destroy(f->history);
	sel_store_close(f->store, 10000);
	for (int p = 0; p < 2; p++)
		free(f->planes[p]);
	free(f->rows);
	tu_remove_tree(f->base);
	sel_log_set_level(SEL_LOG_INFO);
	free(f);
	return 0;
}

/* Polls until count events arrived (10 s at most). */
static uint32_t wait_events(struct fixture *f, struct sel_event *events, uint32_t count)
{
	uint32_t got = 0;

	for (int i = 0; i < 10000 && got < count; i++) {
		struct timespec pause = { 0, 1000000 };

		got += sel_poll(f->store, events + got, count - got);
		if (got < count)
			nanosleep(&pause, NULL);
	}
	return got;
}

/* The engine prefills the conversation, and publishes checkpoints. */
static void publish_conversation(struct fixture *f)
{
	static const uint64_t points[] = { 300, 700, 1000 };
	uint32_t ids[PAGES];
	struct sel_event ev[3];

	assert_int_equal(sel_history_create(f->store, f->tokens, TOKENS, &f->history), 0);
	for (uint32_t i = 0; i < 1000 / 64; i++) {
		ids[i] = i;
		fill_page(f, i, i);
	}
	for (uint32_t k = 0; k < 3; k++) {
		struct sel_publication pub = { .checkpoint = 10 + k, .history = f->history,
					       .consumed = points[k],
					       .parent_consumed = k ? points[k - 1] : 0,
					       .page_ids = ids, .state_slot = k };
		enum sel_outcome outcome;

		tu_fill(f->rows + (uint64_t)ROW * k, ROW, points[k]);
		assert_int_equal(sel_store_publish(f->store, &pub, &outcome), 0);
		assert_int_equal(outcome, SEL_QUEUED);
		/* the parent must be committed before its child attaches */
		assert_int_equal(wait_events(f, ev, 1), 1);
		assert_int_equal(ev[0].kind, SEL_EVENT_STORED);
		assert_int_equal(ev[0].id, 10 + k);
	}
}

/* Looks up a longer history with nothing resident, fetches, checks. */
static void restore_and_check(struct fixture *f, uint64_t waiter)
{
	uint32_t longer[TOKENS];
	sel_history *h;
	struct sel_hit hit;
	uint32_t ids[PAGES];
	struct sel_event ev;
	bool joined;
	uint8_t expect[ROW];

	memcpy(longer, f->tokens, sizeof(longer));
	assert_int_equal(sel_history_create(f->store, longer, TOKENS, &h), 0);
	memset(f->planes[0], 0xee, (uint64_t)UNIT * PAGES);
	memset(f->planes[1], 0xee, (uint64_t)UNIT * PAGES);
	memset(f->rows, 0xee, (uint64_t)ROW * ROWS);
	assert_true(sel_lookup(f->store, h, 0, &hit));
	assert_int_equal(hit.consumed, 1000);
	assert_int_equal(hit.page_count, 1000 / 64);
	for (uint32_t i = 0; i < hit.page_count; i++)
		ids[i] = 40 + i;
	assert_int_equal(sel_fetch(f->store, &hit, ids, 6, waiter, &joined), 0);
	assert_false(joined);
	assert_int_equal(wait_events(f, &ev, 1), 1);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("fetch failed: %s", ev.why);
	assert_int_equal(ev.id, waiter);
	for (uint32_t i = 0; i < hit.page_count; i++)
		assert_true(page_is(f, 40 + i, i));
	tu_fill(expect, ROW, 1000);
	assert_memory_equal(f->rows + (uint64_t)ROW * 6, expect, ROW);
	sel_history_destroy(h);
}

/* Publish, evict the GPU copies, look up a longer history, fetch, verify. */
static void test_api_publish_evict_restore(void **state)
{
	struct fixture *f = *state;
	struct sel_stats st;
	static char metrics[SEL_METRICS_BYTES(1)];

	open_store(f);
	publish_conversation(f);
	restore_and_check(f, 77);
	sel_store_stats(f->store, &st);
	assert_int_equal(st.records, 3);
	assert_int_equal(st.stored, 3);
	assert_int_equal(st.hits, 1);
	assert_int_equal(st.reused_tokens, 1000);
	assert_true(sel_store_metrics(f->store, metrics, sizeof(metrics)) > 0);
	assert_non_null(strstr(metrics, "selene_records 3\n"));
	assert_non_null(strstr(metrics, "selene_publications_total{outcome=\"queued\"} 3\n"));
	assert_non_null(strstr(metrics, "selene_job_seconds_bucket{kind=\"store\",le=\"+Inf\"} 3\n"));
	assert_non_null(strstr(metrics, "selene_job_seconds_count{kind=\"fetch\"} 1\n"));
	assert_non_null(strstr(metrics, "selene_records_dropped_total{reason=\"checksum\"} 0\n"));
	assert_int_equal(sel_store_metrics(f->store, metrics, 16), -ENOSPC);
}

/*
 * The exposition is valid Prometheus text: every family
 * once with # HELP and # TYPE, a build-info metric, the staging gauges, the
 * pool's families (zero without a pool); one
 * rank fits in SEL_METRICS_BYTES(1). Skips where the parser is missing.
 */
static void test_api_metrics_exposition(void **state)
{
	struct fixture *f = *state;
	static char metrics[SEL_METRICS_BYTES(1)];
	int n;

	open_store(f);
	publish_conversation(f);
	n = sel_store_metrics(f->store, metrics, sizeof(metrics));
	assert_true(n > 0);
	assert_int_equal(sel_store_metrics(f->store, metrics, (size_t)n), -ENOSPC);
	assert_int_equal(sel_store_metrics(f->store, metrics, (size_t)n + 1), n);
	assert_non_null(strstr(metrics, "# HELP selene_lookups_total "));
	assert_non_null(strstr(metrics, "selene_build_info{version=\""));
	assert_non_null(strstr(metrics, "selene_staging_slots "));
	assert_non_null(strstr(metrics, "selene_staging_slots_in_use "));
	assert_non_null(strstr(metrics, "selene_staging_slots_intake "));
	assert_non_null(strstr(metrics, "# TYPE selene_store_yields_total counter"));
	assert_non_null(strstr(metrics, "selene_store_yields_total 0"));
	/* the pool's families are there, zero, without a pool */
	assert_non_null(strstr(metrics, "\nselene_pool_attached 0\n"));
	assert_non_null(strstr(metrics, "# TYPE selene_pool_claim_bytes_total counter"));
	assert_non_null(strstr(metrics, "\nselene_pool_refusals_total 0\n"));
	if (tu_check_metrics(metrics, "selene_build_info selene_staging_slots "
			     "selene_records selene_records_dropped selene_job_seconds "
			     "selene_pool_attached selene_pool_puts selene_pool_hits") == 77)
		skip();
}

/*
 * Without a pool, sel_lookup_pending is false before and after a lookup
 * (hit or miss), and for NULL handles; the lookup is the local one.
 */
static void test_api_lookup_pending_without_pool(void **state)
{
	struct fixture *f = *state;
	struct sel_hit hit;

	open_store(f);
	publish_conversation(f);
	assert_false(sel_lookup_pending(f->store, f->history));
	assert_true(sel_lookup(f->store, f->history, 0, &hit));
	assert_int_equal(hit.consumed, 1000);
	assert_false(sel_lookup_pending(f->store, f->history));
	assert_false(sel_lookup_pending(NULL, f->history));
	assert_false(sel_lookup_pending(f->store, NULL));
}

/* sel_touch through the public API: a committed record and its ancestors
 * (0), a count where nothing ends (SEL_ENOTFOUND), bad counts (-EINVAL). */
static void test_api_touch(void **state)
{
	struct fixture *f = *state;

	open_store(f);
	publish_conversation(f);
	assert_int_equal(sel_touch(f->store, f->history, 700), 0);
	assert_int_equal(sel_touch(f->store, f->history, 1000), 0);
	assert_int_equal(sel_touch(f->store, f->history, 500), SEL_ENOTFOUND);
	assert_int_equal(sel_touch(f->store, f->history, 0), -EINVAL);
	assert_int_equal(sel_touch(f->store, f->history, TOKENS + 1), -EINVAL);
	assert_int_equal(sel_touch(f->store, NULL, 300), -EINVAL);
	restore_and_check(f, 79);
}

/* NULL handles and NULL out-pointers are refused and change nothing. */
static void test_api_null_arguments(void **state)
{
	struct fixture *f = *state;
	static char metrics[SEL_METRICS_BYTES(1)];
	struct sel_publication pub = { .consumed = 300, .page_ids = (uint32_t[64]){ 0 } };
	struct sel_event ev[4];
	struct sel_stats st;
	struct sel_hit hit;
	enum sel_outcome outcome;
	sel_history *h = (sel_history *)&h;
	sel_store *none = (sel_store *)&none;
	sel_peer *peer = (sel_peer *)&peer;
	uint32_t ids[64] = { 0 };
	bool joined = true;
	char err[256] = "";

	assert_int_equal(sel_store_open(&f->config, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "out is NULL"));
	assert_int_equal(sel_store_open(NULL, &none, err, sizeof(err)), -EINVAL);
	assert_null(none);
	assert_int_equal(sel_peer_start(&f->config, NULL, err, sizeof(err)), -EINVAL);
	assert_int_equal(sel_peer_start(NULL, &peer, err, sizeof(err)), -EINVAL);
	assert_null(peer);
	assert_int_equal(sel_peer_wait(NULL), -EINVAL);
	sel_peer_stop(NULL);
	open_store(f);
	publish_conversation(f);
	assert_int_equal(sel_history_create(NULL, f->tokens, 10, &h), -EINVAL);
	assert_null(h);
	assert_int_equal(sel_history_create(f->store, NULL, 10, &h), -EINVAL);
	assert_int_equal(sel_history_create(f->store, f->tokens, 10, NULL), -EINVAL);
	assert_false(sel_lookup(NULL, f->history, 0, &hit));
	assert_false(sel_lookup(f->store, NULL, 0, &hit));
	assert_false(sel_lookup(f->store, f->history, 0, NULL));
	assert_true(sel_lookup(f->store, f->history, 0, &hit));
	assert_int_equal(sel_fetch(f->store, &hit, ids, 0, 1, NULL), -EINVAL);
	assert_int_equal(sel_fetch(NULL, &hit, ids, 0, 1, &joined), -EINVAL);
	assert_false(joined);
	assert_int_equal(sel_fetch(f->store, NULL, ids, 0, 1, &joined), -EINVAL);
	assert_int_equal(sel_cancel(NULL, 1), -EINVAL);
	assert_int_equal(sel_touch(NULL, f->history, 300), -EINVAL);
	pub.history = f->history;
	assert_int_equal(sel_store_publish(NULL, &pub, &outcome), -EINVAL);
	assert_int_equal(sel_store_publish(f->store, &pub, NULL), -EINVAL);
	assert_int_equal(sel_poll(NULL, ev, 4), 0);
	assert_int_equal(sel_poll(f->store, NULL, 4), 0);
	assert_int_equal(sel_store_stats(f->store, NULL), -EINVAL);
	assert_int_equal(sel_store_stats(NULL, &st), -ESHUTDOWN);
	assert_int_equal(sel_store_metrics(f->store, NULL, 100), -EINVAL);
	assert_int_equal(sel_store_metrics(NULL, metrics, sizeof(metrics)), -ESHUTDOWN);
	assert_int_equal(sel_store_close(NULL, 0), 0);
	/* nothing above changed the store: the restore still works */
	restore_and_check(f, 80);
}

/*
 * An err of NULL with a nonzero err_size is refused with -EINVAL before
 * anything is written through it; NULL with size 0 means no message wanted.
 */
static void test_api_null_err_with_size(void **state)
{
	struct fixture *f = *state;
	sel_store *store = (sel_store *)&store;
	sel_peer *peer = (sel_peer *)&peer;

	assert_int_equal(sel_store_open(&f->config, &store, NULL, 64), -EINVAL);
	assert_ptr_equal(store, (sel_store *)&store);
	assert_int_equal(sel_store_open(NULL, &store, NULL, 64), -EINVAL);
	assert_int_equal(sel_peer_start(&f->config, &peer, NULL, 64), -EINVAL);
	assert_ptr_equal(peer, (sel_peer *)&peer);
	assert_int_equal(sel_peer_start(NULL, &peer, NULL, 1), -EINVAL);
	/* a failure with no buffer at all is still only a code */
	assert_int_equal(sel_store_open(NULL, &store, NULL, 0), -EINVAL);
	assert_null(store);
	assert_int_equal(sel_store_open(&f->config, &f->store, NULL, 0), 0);
	assert_non_null(f->store);
}

/* In a forked child: exits with step when cond fails. */
#define CHILD_EXPECT(step, cond) \
	do { \
		if (!(cond)) \
			_exit(step); \
	} while (0)

/* A forked child's calls on its parent's store: each refused, none touching it. */
static void child_calls_parent_store(struct fixture *f, const struct sel_hit *hit)
{
	static char metrics[SEL_METRICS_BYTES(1)];
	uint32_t ids[PAGES] = { 0 };
	struct sel_publication pub = { .checkpoint = 99, .history = f->history,
				       .consumed = 300, .page_ids = ids, .state_slot = 7 };
	enum sel_outcome outcome;
	struct sel_event ev[4];
	struct sel_stats st;
	struct sel_hit found;
	sel_history *h = NULL;
	bool joined = true;

	CHILD_EXPECT(10, !sel_lookup(f->store, f->history, 0, &found));
	CHILD_EXPECT(11, sel_fetch(f->store, hit, ids, 5, 500, &joined) == -ECHILD);
	CHILD_EXPECT(12, !joined);
	CHILD_EXPECT(13, sel_cancel(f->store, 500) == -ECHILD);
	CHILD_EXPECT(14, sel_touch(f->store, f->history, 300) == -ECHILD);
	CHILD_EXPECT(15, sel_store_publish(f->store, &pub, &outcome) == -ECHILD);
	CHILD_EXPECT(16, sel_poll(f->store, ev, 4) == 0);
	CHILD_EXPECT(17, sel_history_create(f->store, f->tokens, 10, &h) == -ECHILD);
	CHILD_EXPECT(18, h == NULL);
	CHILD_EXPECT(19, sel_store_stats(f->store, &st) == -ECHILD);
	CHILD_EXPECT(20, sel_store_metrics(f->store, metrics, sizeof(metrics)) == -ECHILD);
	CHILD_EXPECT(21, sel_store_close(f->store, 1000) == -ECHILD);
	/* still refused after the refused close: it freed nothing */
	CHILD_EXPECT(22, sel_cancel(f->store, 500) == -ECHILD);
	_exit(0);
}

/*
 * Waits up to 20 s for child; returns its exit status, or -signal (it is
 * killed when it hangs: a call that waited on a thread the child lacks).
 */
static int reap_child(pid_t child)
{
	int status = 0;

	for (int i = 0; i < 20000; i++) {
		pid_t done = waitpid(child, &status, WNOHANG);

		assert_true(done >= 0);
		if (done == child)
			return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
		usleep(1000);
	}
	kill(child, SIGKILL);
	waitpid(child, &status, 0);
	return -SIGKILL;
}

/*
 * After fork(), the child's calls on the parent's store are refused with
 * -ECHILD (close too, freeing nothing), and the parent's store works on.
 */
static void test_api_calls_from_forked_child(void **state)
{
	struct fixture *f = *state;
	struct sel_stats st;
	struct sel_hit hit;
	pid_t child;

	open_store(f);
	publish_conversation(f);
	assert_true(sel_lookup(f->store, f->history, 0, &hit));
	child = fork();
	assert_true(child >= 0);
	if (child == 0)
		child_calls_parent_store(f, &hit);
	assert_int_equal(reap_child(child), 0);
	assert_int_equal(sel_store_stats(f->store, &st), 0);
	assert_int_equal(st.stored, 3);
	restore_and_check(f, 81);
}

/*
 * Staging larger than the machine's memory (page planes of 1 GiB units,
 * enough of them for twice MemTotal: every window holds at least one page
 * record, and there are at least 16 windows) fails the open with -ENOMEM
 * and both figures, quickly and before mapping any of it.
 */
static void test_api_staging_beyond_memory_is_refused(void **state)
{
	struct fixture *f = *state;
	const uint64_t unit = 1ull << 30;
	uint64_t total = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t count = 2 * total / (16 * unit) + 1, available, t0;
	static char names[64][16];
	struct sel_plane planes[SEL_ARRAY_SIZE(names)];
	struct sel_store_config c = f->config;
	char err[512] = "";
	uint8_t *space;
	int ret;

	if (count > SEL_ARRAY_SIZE(names))
		skip(); /* more than 512 GiB of memory: not worth more planes */
	if (shard_slab_memory_available(&available) != 0)
		skip(); /* unknown: nothing is refused, and the mapping would OOM */
	/* address space for the planes, never touched: the open must fail first */
	space = mmap(NULL, (size_t)(count * unit), PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	assert_true(space != MAP_FAILED);
	for (uint32_t p = 0; p < count; p++) {
		snprintf(names[p], sizeof(names[p]), "p%u", p);
		planes[p] = (struct sel_plane){ .name = names[p], .unit_bytes = unit,
						.device_address = (uintptr_t)(space + p * unit) };
	}
	c.page_planes = planes;
	c.page_plane_count = (uint32_t)count;
	c.page_count = 1;
	t0 = sel_monotonic_ns();
	ret = sel_store_open(&c, &f->store, err, sizeof(err));
	munmap(space, (size_t)(count * unit));
	assert_int_equal(ret, -ENOMEM);
	assert_null(f->store);
	assert_non_null(strstr(err, "staging needs"));
	assert_non_null(strstr(err, "MiB of memory available"));
	print_message("%s\n", err);
	assert_true(sel_monotonic_ns() - t0 < 10000000000ull);
}

/* Reopening the directory finds every committed record (seed step 12). */
static void test_api_restart(void **state)
{
	struct fixture *f = *state;
	struct sel_stats st;

	open_store(f);
	publish_conversation(f);
	sel_history_destroy(f->history);
	f->history = NULL;
	assert_int_equal(sel_store_close(f->store, 10000), 0);
	f->store = NULL;
	open_store(f);
	sel_store_stats(f->store, &st);
	assert_int_equal(st.scanned_records, 3);
	assert_int_equal(st.records, 3);
	restore_and_check(f, 78);
}

/* Calls fn(path, arg) for every record file in dir's subdirectories; a count. */
static uint32_t each_record_file(const char *dir, void (*fn)(const char *path, void *arg),
				 void *arg)
{
	char sub[1024], path[2048];
	struct dirent *e, *r;
	DIR *d = opendir(dir), *records;
	uint32_t count = 0;

	assert_non_null(d);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
		records = opendir(sub);
		if (!records)
			continue;
		while ((r = readdir(records))) {
			size_t len = strlen(r->d_name);

			if (len < 5 || strcmp(r->d_name + len - 5, ".ckpt") != 0)
				continue;
			snprintf(path, sizeof(path), "%s/%s", sub, r->d_name);
			fn(path, arg);
			count++;
		}
		closedir(records);
	}
	closedir(d);
	return count;
}

static void add_size(const char *path, void *arg)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	*(uint64_t *)arg += (uint64_t)st.st_size;
}

/* The record files under dir's subdirectories: how many, and their bytes. */
static uint32_t record_files(const char *dir, uint64_t *bytes)
{
	*bytes = 0;
	return each_record_file(dir, add_size, bytes);
}

/*
 * Reopened with a smaller records_max than its directory holds: the least
 * recently used leaves are deleted (agreement rule 6), so every file left
 * is in the index and counted against the disk limit; before, the excess
 * stayed on disk outside both, for good.
 */
static void test_api_reopen_with_fewer_records_max(void **state)
{
	struct fixture *f = *state;
	struct sel_stats st;
	struct sel_hit hit;
	uint64_t bytes;

	open_store(f);
	publish_conversation(f);
	sel_history_destroy(f->history);
	f->history = NULL;
	assert_int_equal(sel_store_close(f->store, 10000), 0);
	f->store = NULL;
	assert_int_equal(record_files(f->base, &bytes), 3);
	f->config.records_max = 2;
	open_store(f);
	/*
	 * The chain's leaf (1000) went, and with it its parent (700), page-only
	 * since 1000 was stored and childless now: the root at 300 stays.
	 */
	assert_int_equal(sel_store_stats(f->store, &st), 0);
	assert_int_equal(st.records, 1);
	assert_int_equal(record_files(f->base, &bytes), 1);
	assert_int_equal(st.disk_bytes, bytes);
	assert_int_equal(sel_history_create(f->store, f->tokens, TOKENS, &f->history), 0);
	assert_true(sel_lookup(f->store, f->history, 0, &hit));
	assert_int_equal(hit.consumed, 300);
}

/* Moves a record file aside, and puts a symlink to it or a FIFO in its place. */
static void replace_one(const char *path, void *arg)
{
	bool fifo = *(bool *)arg;
	char moved[2100];

	snprintf(moved, sizeof(moved), "%s.moved", path);
	assert_int_equal(rename(path, moved), 0);
	if (fifo)
		assert_int_equal(mkfifo(path, 0600), 0);
	else
		assert_int_equal(symlink(moved, path), 0);
}

/* Replaces every record file under dir: a symlink to a copy, or a FIFO. */
static void replace_records(const char *dir, bool fifo)
{
	assert_true(each_record_file(dir, replace_one, &fifo) > 0);
}

/*
 * A record file replaced behind the store by a symlink (never followed) or
 * a FIFO: the restore fails naming it, the record leaves the index on every
 * rank as a missing one would (R-READ-4), and its checkpoint is stored
 * again instead of answered Present over a file that cannot be read.
 */
static void record_replaced_at_runtime(struct fixture *f, bool fifo)
{
	struct sel_event ev;
	struct sel_stats st;
	struct sel_hit hit;
	uint32_t ids[PAGES];
	enum sel_outcome outcome;
	bool joined;

	open_store(f);
	publish_conversation(f);
	/*
	 * 700's row drop (a truncate) must land first: one that meets the
	 * replaced file drops 700 itself (R-READ-4), and this is about the fetch.
	 */
	for (int i = 0; i < 10000; i++) {
		assert_int_equal(sel_store_stats(f->store, &st), 0);
		if (st.jobs_in_flight == 0)
			break;
		assert_int_equal(sel_poll(f->store, &ev, 1), 0);
		usleep(1000);
	}
	assert_int_equal(st.jobs_in_flight, 0);
	replace_records(f->base, fifo);
	assert_true(sel_lookup(f->store, f->history, 0, &hit));
	for (uint32_t i = 0; i < hit.page_count; i++)
		ids[i] = 40 + i;
	assert_int_equal(sel_fetch(f->store, &hit, ids, 6, 91, &joined), 0);
	assert_int_equal(wait_events(f, &ev, 1), 1);
	assert_int_equal(ev.kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(ev.error, -ENXIO);
	assert_non_null(strstr(ev.why, ".ckpt"));
	/* every record of the chain goes: the one named and what depends on it */
	for (int i = 0; i < 2000; i++) {
		assert_int_equal(sel_store_stats(f->store, &st), 0);
		if (st.records == 0)
			break;
		sel_poll(f->store, &ev, 1);
		usleep(1000);
	}
	assert_int_equal(st.records, 0);
	/* the record named, and its child when a rank's read of it failed too */
	assert_in_range(st.records_dropped_missing, 1, 2);
	assert_false(sel_lookup(f->store, f->history, 0, &hit));
	{
		uint32_t page_ids[PAGES];
		struct sel_publication pub = { .checkpoint = 30, .history = f->history,
					       .consumed = 300, .page_ids = page_ids };

		for (uint32_t i = 0; i < PAGES; i++)
			page_ids[i] = i;
		assert_int_equal(sel_store_publish(f->store, &pub, &outcome), 0);
		assert_int_equal(outcome, SEL_QUEUED);
		assert_int_equal(wait_events(f, &ev, 1), 1);
		assert_int_equal(ev.kind, SEL_EVENT_STORED);
	}
}

static void test_api_record_replaced_by_symlink(void **state)
{
	record_replaced_at_runtime(*state, false);
}

static void test_api_record_replaced_by_fifo(void **state)
{
	record_replaced_at_runtime(*state, true);
}

/* A second process (or opener) on the same directory is refused. */
static void test_api_second_opener(void **state)
{
	struct fixture *f = *state;
	sel_store *second;
	char err[512];

	open_store(f);
	assert_int_equal(sel_store_open(&f->config, &second, err, sizeof(err)), SEL_ELOCKED);
	assert_non_null(strstr(err, "in use by another process"));
}

/* Without a disk store every publication is Oversize and lookups miss. */
static void test_api_no_disk_store(void **state)
{
	struct fixture *f = *state;
	struct sel_publication pub = { .consumed = 300, .page_ids = (uint32_t[64]){ 0 } };
	enum sel_outcome outcome;
	struct sel_hit hit;

	f->config.disk_limit_bytes = 0;
	open_store(f);
	assert_int_equal(sel_history_create(f->store, f->tokens, TOKENS, &f->history), 0);
	pub.history = f->history;
	assert_int_equal(sel_store_publish(f->store, &pub, &outcome), 0);
	assert_int_equal(outcome, SEL_OVERSIZE);
	assert_false(sel_lookup(f->store, f->history, 0, &hit));
}

/*
 * The host is out of threads: each thread the open starts (the engine's
 * transfer thread, the disk thread and its control threads, the checksum
 * helpers) is refused in turn. Every such open fails with its reason and
 * leaves nothing behind (no thread, no lock, no leak under the sanitizer),
 * and the next open works.
 */
static void test_api_thread_refused(void **state)
{
	struct fixture *f = *state;
	uint32_t refused = 0;

	setenv("SELENE_CHECKSUM_THREADS", "3", 1); /* checksum helpers to refuse too */
	for (uint32_t n = 0; n < 64; n++) {
		char config[96], err[512] = "";
		sel_store *store = NULL;
		int ret;

		snprintf(config, sizeof(config), n ? "thread.start=%u*off->1*return(EAGAIN)" :
						     "thread.start=1*return(EAGAIN)", n);
		assert_int_equal(sel_failpoints_configure(config), 0);
		ret = sel_store_open(&f->config, &store, err, sizeof(err));
		if (sel_failpoint_fired(SEL_FP_THREAD_START) == 0) {
			/* n is past the last thread: the open had all it asked for */
			assert_int_equal(ret, 0);
			sel_store_close(store, 10000);
			break;
		}
		assert_int_not_equal(ret, 0);
		assert_null(store);
		assert_true(strlen(err) > 0);
		print_message("open with thread %u refused: %s\n", n, err);
		refused++;
	}
	sel_failpoints_configure(NULL);
	unsetenv("SELENE_CHECKSUM_THREADS");
	assert_true(refused >= 5);
	open_store(f);
	publish_conversation(f);
	restore_and_check(f, 77);
}

/* A full filesystem fails a store, answers Retry, then recovers. */
static void test_api_full_disk(void **state)
{
	struct fixture *f = *state;
	struct sel_publication pub;
	enum sel_outcome outcome;
	struct sel_event ev;
	uint32_t ids[PAGES];
	char filler[600];
	FILE *fp;

	if (mount("selene-test", f->base, "tmpfs", 0, "size=512k") != 0) {
		fprintf(stderr, "skip: cannot mount a small tmpfs (%s)\n", strerror(errno));
		skip();
	}
	snprintf(filler, sizeof(filler), "%s/filler", f->base);
	fp = fopen(filler, "w");
	for (int i = 0; i < 400 * 1024 / 64; i++)
		fwrite("filler filler filler filler filler filler filler filler filler!\n", 1, 64, fp);
	fclose(fp);
	open_store(f);
	assert_int_equal(sel_history_create(f->store, f->tokens, TOKENS, &f->history), 0);
	for (uint32_t i = 0; i < PAGES; i++)
		ids[i] = i;
	pub = (struct sel_publication){ .checkpoint = 1, .history = f->history,
					.consumed = 1000, .page_ids = ids, .state_slot = 0 };
	assert_int_equal(sel_store_publish(f->store, &pub, &outcome), 0);
	assert_int_equal(outcome, SEL_QUEUED);
	assert_int_equal(wait_events(f, &ev, 1), 1);
	assert_int_equal(ev.kind, SEL_EVENT_STORE_FAILED);
	assert_int_equal(ev.error, -ENOSPC);
	assert_int_equal(sel_store_publish(f->store, &pub, &outcome), 0);
	assert_int_equal(outcome, SEL_RETRY);
	/* room returns; after the backoff the same publication is stored */
	unlink(filler);
	sleep(1);
	assert_int_equal(sel_store_publish(f->store, &pub, &outcome), 0);
	assert_int_equal(outcome, SEL_QUEUED);
	assert_int_equal(wait_events(f, &ev, 1), 1);
	assert_int_equal(ev.kind, SEL_EVENT_STORED);
	sel_history_destroy(f->history);
	f->history = NULL;
	sel_store_close(f->store, 10000);
	f->store = NULL;
	umount(f->base);
}

/*
 * A disk that fills with records below the limit (a 1 MiB tmpfs under a
 * limit of 1 GiB): once a store fails there, the next one after the
 * backoff evicts the least recently used record and is stored, instead of
 * failing on the full disk again.
 */
static void test_api_full_disk_evicts_below_the_limit(void **state)
{
	struct fixture *f = *state;
	struct sel_publication pub;
	enum sel_outcome outcome = SEL_RETRY;
	struct sel_event ev;
	sel_history *histories[8] = { 0 };
	uint32_t ids[PAGES], tokens[TOKENS], stored = 0, n = 0;
	struct sel_hit hit;

	if (mount("selene-test", f->base, "tmpfs", 0, "size=1m") != 0) {
		fprintf(stderr, "skip: cannot mount a small tmpfs (%s)\n", strerror(errno));
		skip();
	}
	sel_log_set_level(SEL_LOG_ERROR); /* the full disk's warning */
	open_store(f);
	for (uint32_t i = 0; i < PAGES; i++)
		ids[i] = i;
	/* conversations of 1000 tokens (about 270 KiB a record) until one fails */
	for (; n < 8; n++) {
		tu_tokens(tokens, TOKENS, 500 + n);
		assert_int_equal(sel_history_create(f->store, tokens, TOKENS, &histories[n]), 0);
		pub = (struct sel_publication){ .checkpoint = 1 + n, .history = histories[n],
						.consumed = 1000, .page_ids = ids, .state_slot = 0 };
		assert_int_equal(sel_store_publish(f->store, &pub, &outcome), 0);
		assert_int_equal(outcome, SEL_QUEUED);
		assert_int_equal(wait_events(f, &ev, 1), 1);
		if (ev.kind != SEL_EVENT_STORED)
			break;
		stored++;
	}
	assert_true(n < 8 && stored >= 2);
	assert_int_equal(ev.kind, SEL_EVENT_STORE_FAILED);
	assert_int_equal(ev.error, -ENOSPC);

	/* after the backoff, the same publication evicts the oldest and is stored */
	sleep(1);
	for (int i = 0; i < 2000; i++) {
		struct timespec pause = { 0, 1000000 };

		assert_int_equal(sel_store_publish(f->store, &pub, &outcome), 0);
		if (outcome != SEL_RETRY)
			break;
		assert_int_equal(sel_poll(f->store, &ev, 1), 0);
		nanosleep(&pause, NULL);
	}
	assert_int_equal(outcome, SEL_QUEUED);
	assert_int_equal(wait_events(f, &ev, 1), 1);
	assert_int_equal(ev.kind, SEL_EVENT_STORED);
	/* the least recently used went; the newest records stay */
	assert_false(sel_lookup(f->store, histories[0], 0, &hit));
	assert_true(sel_lookup(f->store, histories[n], 0, &hit));
	assert_int_equal(hit.consumed, 1000);
	for (uint32_t i = 0; i <= n; i++)
		sel_history_destroy(histories[i]);
	sel_store_close(f->store, 10000);
	f->store = NULL;
	umount(f->base);
}

struct log_catch {
	pthread_mutex_t lock;
	uint32_t lines, info_lines;
	char last[256];
	bool saw_store;
};

static void catch_line(enum sel_log_level level, const char *message, void *user)
{
	struct log_catch *lc = user;

	pthread_mutex_lock(&lc->lock);
	lc->lines++;
	if (level == SEL_LOG_INFO)
		lc->info_lines++;
	if (strstr(message, "store"))
		lc->saw_store = true;
	snprintf(lc->last, sizeof(lc->last), "%s", message);
	pthread_mutex_unlock(&lc->lock);
}

struct warn_catch {
	pthread_mutex_t lock;
	uint32_t warnings;
	char last[256];
};

static void catch_warning(enum sel_log_level level, const char *message, void *user)
{
	struct warn_catch *wc = user;

	if (level != SEL_LOG_WARN)
		return;
	pthread_mutex_lock(&wc->lock);
	wc->warnings++;
	snprintf(wc->last, sizeof(wc->last), "%s", message);
	pthread_mutex_unlock(&wc->lock);
}

/* A 32-byte secret file at path with mode. */
static void write_secret(const char *path, mode_t mode)
{
	uint8_t secret[32];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	memset(secret, 0x5c, sizeof(secret));
	assert_true(fd >= 0);
	assert_int_equal(write(fd, secret, sizeof(secret)), (ssize_t)sizeof(secret));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

/*
 * A pool secret file that is missing, too open or not 32 bytes fails the
 * open, naming pool_secret_file; a good one opens the store on its local
 * tiers with one warning that it is not attached (pool_attached 0).
 */
static void test_api_pool_config_at_open(void **state)
{
	struct fixture *f = *state;
	struct warn_catch wc = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct sel_stats st;
	char path[512], err[512] = "";

	snprintf(path, sizeof(path), "%s/pool.secret", f->base);
	f->config.pool = "127.0.0.1:9";
	f->config.pool_secret_file = path;
	assert_int_equal(sel_store_open(&f->config, &f->store, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "pool_secret_file"));
	write_secret(path, 0644);
	assert_int_equal(sel_store_open(&f->config, &f->store, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "pool_secret_file: permissions 0644"));
	write_secret(path, 0600);
	sel_log_set_callback(catch_warning, &wc);
	open_store(f);
	sel_log_set_callback(NULL, NULL);
	assert_int_equal(wc.warnings, 1);
	assert_non_null(strstr(wc.last, "pool 127.0.0.1:9: not attached"));
	assert_int_equal(sel_store_stats(f->store, &st), 0);
	assert_int_equal(st.pool_attached, 0);
	publish_conversation(f);
	{
		struct sel_hit hit;

		assert_true(sel_lookup(f->store, f->history, 0, &hit));
		assert_false(sel_lookup_pending(f->store, f->history));
	}
}

/*
 * sel_log_set_callback takes every line (level, message without prefix or
 * newline) from the store's threads; NULL restores stderr, whose lines
 * carry a UTC timestamp and the rank.
 */
static void test_api_log_callback(void **state)
{
	struct fixture *f = *state;
	struct log_catch lc = { .lock = PTHREAD_MUTEX_INITIALIZER };
	char path[] = "/tmp/selene-log-XXXXXX", text[512] = "";
	int fd = mkstemp(path), saved = dup(STDERR_FILENO);
	ssize_t n;

	sel_log_set_level(SEL_LOG_INFO);
	sel_log_set_callback(catch_line, &lc);
	open_store(f);
	sel_warn("a warning with %d", 42);
	sel_log_set_callback(NULL, NULL);
	pthread_mutex_lock(&lc.lock);
	assert_true(lc.saw_store);
	assert_true(lc.info_lines >= 1);
	assert_string_equal(lc.last, "a warning with 42");
	pthread_mutex_unlock(&lc.lock);
	/* the default sink: "YYYY-MM-DDTHH:MM:SS.mmmZ selene[rank 0]: warn: ..." */
	assert_true(fd >= 0);
	dup2(fd, STDERR_FILENO);
	sel_warn("to stderr");
	dup2(saved, STDERR_FILENO);
	close(saved);
	n = pread(fd, text, sizeof(text) - 1, 0);
	close(fd);
	unlink(path);
	assert_true(n > 0);
	text[n] = '\0';
	assert_int_equal(strlen(text), 24 + strlen(" selene[rank 0]: warn: to stderr\n"));
	assert_true(text[4] == '-' && text[10] == 'T' && text[19] == '.' && text[23] == 'Z');
	assert_non_null(strstr(text, " selene[rank 0]: warn: to stderr\n"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_api_publish_evict_restore, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_metrics_exposition, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_reopen_with_fewer_records_max, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_record_replaced_by_symlink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_record_replaced_by_fifo, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_touch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_lookup_pending_without_pool, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_api_pool_config_at_open, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_null_arguments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_null_err_with_size, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_calls_from_forked_child, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_staging_beyond_memory_is_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_api_second_opener, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_no_disk_store, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_full_disk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_full_disk_evicts_below_the_limit, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_api_thread_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_api_log_callback, setup, teardown),
	};

	return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}
