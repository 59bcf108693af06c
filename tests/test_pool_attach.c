/*
 * Instances attached to a real pool manager on loopback (docs/DESIGN.md
 * section 13): the manager is a child process (pool/manager.h, so it can be
 * killed), each instance is two ranks, rank zero in this process through
 * the public store API and rank one a child through sel_peer_start. Device
 * planes live in shared memory so this process checks every rank's bytes.
 * Instance A cascades records to the pool under a small disk limit;
 * instance B (other directories, other page ids) finds them by ticket and
 * restores them byte-exact on both ranks; an instance of another layout
 * finds nothing; a manager absent at open, a rank with the wrong secret,
 * and a manager killed while a claim waits each leave the store local with
 * one warning or a failed fetch, never a wrong byte; a manager restarted
 * on the same address gets the instance back, both ranks reattached. Every
 * rank is on the manager's host, so claims copy from the manager's arena
 * (counted: no stream window is read); a manager restarted with another
 * arena serves a new instance from the new arena, byte-exact. A peer rank
 * whose own connection is cut reconnects alone (R-POOL-110), and a
 * reattach closes rank zero's old link off the model thread.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "pool/manager.h"
#include "selene/store.h"
#include "shard/pool_link.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WORLD 2u
#define UNIT 4096u
#define PAGES 64u
#define ROWS 4u
#define ROW 8192u
#define TOKENS 2000u
#define PAGE_TOKENS 64u

struct rank_memory {
	uint8_t planes[2][PAGES * UNIT];
	uint8_t rows[ROWS * ROW];
	char why[256];
	struct shard_pool_link_counts counts; /* a peer's, when it stopped */
};

struct instance {
	uint32_t index;          /* its rank memory: index * WORLD + rank */
	char dir[400];           /* its ranks' directories below */
	struct sel_cluster cluster;
	int listen_fd;
	pid_t peer;
	sel_store *store;
	sel_history *h;
};

struct fixture {
	char *base;
	struct rank_memory *mem; /* shared with the children */
	pid_t manager;
	uint16_t manager_port;
	char pool[64];
	char secret[512], wrong_secret[512];
	uint32_t tokens[TOKENS];
	struct instance inst[3];
};

/* Warnings rank zero logged (its lines only: peers are other processes). */
struct warn_catch {
	pthread_mutex_t lock;
	uint32_t pool_warnings;
	char last[512];
};

static void catch_warning(enum sel_log_level level, const char *message, void *user)
{
	struct warn_catch *wc = user;

	if (level != SEL_LOG_WARN || !strstr(message, "pool"))
		return;
	pthread_mutex_lock(&wc->lock);
	wc->pool_warnings++;
	snprintf(wc->last, sizeof(wc->last), "%s", message);
	pthread_mutex_unlock(&wc->lock);
}

static void write_secret(const char *path, uint8_t byte)
{
	uint8_t secret[32];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	memset(secret, byte, sizeof(secret));
	assert_true(fd >= 0);
	assert_int_equal(write(fd, secret, sizeof(secret)), (ssize_t)sizeof(secret));
	close(fd);
}

/*
 * The manager as a child process on port (0: any); its port comes back
 * through a pipe. False when it could not listen there (the port taken).
 */
static bool manager_try_start(struct fixture *f, uint16_t port)
{
	char listen[32];
	int fds[2], status;

	snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);

	assert_int_equal(pipe(fds), 0);
	f->manager = fork();
	assert_true(f->manager >= 0);
	if (f->manager == 0) {
		struct pool_manager_config c = { .listen = listen, .name = "attach-test",
						 .memory_bytes = 64u << 20 };
		struct pool_manager *m;
		char why[256];

		close(fds[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a crashed test */
		memset(c.secret, 0x5a, sizeof(c.secret));
		if (pool_manager_open(&c, &m, why, sizeof(why)) != 0)
			_exit(2);
		port = pool_manager_port(m);
		if (write(fds[1], &port, sizeof(port)) != sizeof(port))
			_exit(3);
		close(fds[1]);
		pool_manager_run(m);
		pool_manager_close(m);
		_exit(0);
	}
	close(fds[1]);
	if (read(fds[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
		close(fds[0]);
		waitpid(f->manager, &status, 0);
		f->manager = 0;
		return false;
	}
	close(fds[0]);
	f->manager_port = port;
	snprintf(f->pool, sizeof(f->pool), "127.0.0.1:%u", port);
	return true;
}

static void manager_start(struct fixture *f)
{
	assert_true(manager_try_start(f, 0));
}

/*
 * A manager on a port below the ephemeral range (32768 up), so that no
 * connection of another test on this host takes it as its local port
 * while the test restarts a manager there: the port it listens on.
 */
static uint16_t manager_start_fixed(struct fixture *f)
{
	for (uint32_t i = 0; i < 64; i++) {
		uint16_t port = (uint16_t)(20000 + (getpid() * 64 + i) % 12000);

		if (manager_try_start(f, port))
			return port;
	}
	fail_msg("no free port for the manager below the ephemeral range");
	return 0;
}

static void manager_kill(struct fixture *f)
{
	int status;

	if (f->manager <= 0)
		return;
	kill(f->manager, SIGKILL);
	waitpid(f->manager, &status, 0);
	f->manager = 0;
}

/* What differs between the instances of a test. */
struct variant {
	uint32_t row_bytes;       /* ROW, or another layout */
	uint64_t disk_limit;
	bool wrong_secret_peer;   /* rank one proves another secret */
	const char *peer_failpoints; /* armed in rank one's process only */
};

static void config_for(struct fixture *f, struct instance *in, uint32_t rank,
		       const struct variant *v, struct sel_store_config *c,
		       struct sel_plane planes[2], char *dir, size_t dir_size)
{
	struct rank_memory *m = &f->mem[in->index * WORLD + rank];
	struct rec_identity model;

	tu_identities(&model, NULL);
	snprintf(dir, dir_size, "%.400s/rank%u", in->dir, rank);
	for (int p = 0; p < 2; p++)
		planes[p] = (struct sel_plane){ p ? "v" : "k", UNIT, (uintptr_t)m->planes[p] };
	*c = (struct sel_store_config){
		.dir = dir, .page_tokens = PAGE_TOKENS, .page_plane_count = 2,
		.page_planes = planes, .row_plane = { "state", v->row_bytes, (uintptr_t)m->rows },
		.page_count = PAGES, .row_count = ROWS, .device = "host",
		.disk_limit_bytes = v->disk_limit, .durable = false, .records_max = 1000,
		.cluster = &in->cluster, .pool = f->pool,
		.pool_secret_file = rank && v->wrong_secret_peer ? f->wrong_secret : f->secret,
	};
	memcpy(c->model_identity, model.bytes, 32);
}

static void peer_main(struct fixture *f, struct instance *in, const struct variant *v)
{
	struct shard_pool_link_counts before, after, *counts = &f->mem[in->index * WORLD + 1].counts;
	struct sel_store_config c;
	struct sel_plane planes[2];
	char dir[512];
	sel_peer *peer;
	int ret;

	shard_pool_link_counts(&before);
	close(in->listen_fd);
	in->cluster.rank = 1;
	in->cluster.listen_fd = -1;
	config_for(f, in, 1, v, &c, planes, dir, sizeof(dir));
	if (v->peer_failpoints && sel_failpoints_configure(v->peer_failpoints) != 0)
		_exit(5);
	if (sel_peer_start(&c, &peer, f->mem[in->index * WORLD + 1].why,
			   sizeof(f->mem[0].why)) != 0)
		_exit(2);
	ret = sel_peer_wait(peer);
	shard_pool_link_counts(&after);
	/* this child inherited this process's counts at fork: its own are the difference */
	*counts = (struct shard_pool_link_counts){
		.arena_claims = after.arena_claims - before.arena_claims,
		.arena_records = after.arena_records - before.arena_records,
		.stream_claims = after.stream_claims - before.stream_claims,
		.stream_windows = after.stream_windows - before.stream_windows,
		.arena_refusals = after.arena_refusals - before.arena_refusals };
	if (sel_peer_stop(peer) != 0)
		_exit(4);
	_exit(ret ? 3 : 0);
}

/* Opens instance i: its peer a child, rank zero here; the history of f->tokens. */
static void instance_open(struct fixture *f, uint32_t i, const struct variant *v)
{
	struct instance *in = &f->inst[i];
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	struct sel_store_config c;
	struct sel_plane planes[2];
	char dir[512], err[512] = "";

	in->index = i;
	snprintf(in->dir, sizeof(in->dir), "%.300s/instance%u", f->base, i);
	mkdir(in->dir, 0755);
	in->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	assert_int_equal(bind(in->listen_fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(in->listen_fd, 4), 0);
	assert_int_equal(getsockname(in->listen_fd, (struct sockaddr *)&addr, &len), 0);
	in->cluster = (struct sel_cluster){
		.rank = 0, .world_size = WORLD, .coordinator_host = "127.0.0.1",
		.coordinator_port = ntohs(addr.sin_port), .listen_fd = in->listen_fd,
		.join_timeout_ms = 10000, .silence_timeout_ms = 5000, .job_timeout_ms = 20000 };
	memset(in->cluster.secret, 0x6b, sizeof(in->cluster.secret));
	in->peer = fork();
	assert_true(in->peer >= 0);
	if (in->peer == 0)
		peer_main(f, in, v);
	config_for(f, in, 0, v, &c, planes, dir, sizeof(dir));
	if (sel_store_open(&c, &in->store, err, sizeof(err)) != 0)
		fail_msg("instance %u: %s", i, err);
	close(in->listen_fd);
	in->listen_fd = -1;
	assert_int_equal(sel_history_create(in->store, f->tokens, TOKENS, &in->h), 0);
}

static void instance_close(struct fixture *f, uint32_t i)
{
	struct instance *in = &f->inst[i];
	int status;

	sel_history_destroy(in->h);
	in->h = NULL;
	if (in->store)
		assert_int_equal(sel_store_close(in->store, 10000), 0);
	in->store = NULL;
	if (in->peer > 0) {
		assert_int_equal(waitpid(in->peer, &status, 0), in->peer);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	in->peer = 0;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->base = tu_make_temp_dir("pool-attach");
	assert_true(strlen(f->base) < 300);
	f->mem = mmap(NULL, 3 * WORLD * sizeof(struct rank_memory), PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(f->mem != MAP_FAILED);
	tu_tokens(f->tokens, TOKENS, 2718);
	snprintf(f->secret, sizeof(f->secret), "%s/pool.secret", f->base);
	snprintf(f->wrong_secret, sizeof(f->wrong_secret), "%s/wrong.secret", f->base);
	write_secret(f->secret, 0x5a);
	write_secret(f->wrong_secret, 0x5b);
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sel_log_set_callback(NULL, NULL);
	for (uint32_t i = 0; i < 3; i++) {
		struct instance *in = &f->inst[i];

		sel_history_destroy(in->h);
		if (in->store)
			sel_store_close(in->store, 5000);
		if (in->peer > 0) {
			kill(in->peer, SIGKILL);
			waitpid(in->peer, NULL, 0);
		}
	}
	manager_kill(f);
	munmap(f->mem, 3 * WORLD * sizeof(struct rank_memory));
	tu_remove_tree(f->base);
	sel_log_set_level(SEL_LOG_INFO);
	free(f);
	return 0;
}

static uint8_t page_seed_byte(uint32_t rank, uint32_t page, int plane)
{
	return (uint8_t)(page * 8 + (uint32_t)plane + rank * 100);
}

/* Instance i's device: page p of rank r holds its pattern; rows 555 + r. */
static void fill(struct fixture *f, uint32_t i)
{
	for (uint32_t r = 0; r < WORLD; r++) {
		struct rank_memory *m = &f->mem[i * WORLD + r];

		for (uint32_t p = 0; p < PAGES; p++)
			for (int k = 0; k < 2; k++)
				tu_fill(m->planes[k] + p * UNIT, UNIT, page_seed_byte(r, p, k));
		tu_fill(m->rows, ROW, 555 + r);
	}
}

static struct sel_event next_event(sel_store *s, uint32_t ms)
{
	struct sel_event ev = { .kind = SEL_EVENT_STORE_FAILED, .error = -ETIMEDOUT };

	for (uint32_t i = 0; i < ms; i++) {
		if (sel_poll(s, &ev, 1) == 1)
			return ev;
		usleep(1000);
	}
	return ev;
}

/* Publishes checkpoints of 5 pages each up to pages_total pages; each stored. */
static void publish_chain(struct fixture *f, uint32_t i, uint32_t pages_total)
{
	struct instance *in = &f->inst[i];
	uint32_t ids[PAGES];

	for (uint32_t p = 0; p < PAGES; p++)
		ids[p] = p;
	for (uint32_t pages = 5; pages <= pages_total; pages += 5) {
		struct sel_publication pub = { .checkpoint = pages, .history = in->h,
					       .consumed = (uint64_t)pages * PAGE_TOKENS,
					       .page_ids = ids, .state_slot = 0 };
		enum sel_outcome outcome = SEL_RETRY;
		struct sel_event ev;

		/* RETRY while the cascade's puts hold the records that would make room */
		for (int tries = 0; tries < 10000 && outcome == SEL_RETRY; tries++) {
			int ret = sel_store_publish(in->store, &pub, &outcome);

			if (ret)
				fail_msg("publish of %u pages: %s", pages, sel_strerror(ret));
			if (outcome == SEL_RETRY) {
				sel_poll(in->store, &ev, 0);
				usleep(1000);
			}
		}
		assert_int_equal(outcome, SEL_QUEUED);
		ev = next_event(in->store, 10000);
		if (ev.kind != SEL_EVENT_STORED)
			fail_msg("store of %u pages: %d %s", pages, ev.kind, ev.why);
	}
}

/* Polls until no pool put is in flight (the cascade settled) or 10 s pass. */
static void settle(sel_store *s, uint64_t puts_min)
{
	struct sel_stats st;
	struct sel_event ev;

	for (int i = 0; i < 10000; i++) {
		sel_poll(s, &ev, 0);
		assert_int_equal(sel_store_stats(s, &st), 0);
		if (st.pool_puts + st.pool_put_failures >= puts_min && i > 200)
			return;
		usleep(1000);
	}
}

/*
 * Asks the pool until its answer came within the grace period: the hit, or
 * false with none. On the manager's host the grace is 2 ms, which a busy
 * test machine can miss; an answer that came late is dropped, so each try
 * asks again with a fresh history of the same tokens (in->h replaced).
 */
static bool lookup_pool(struct fixture *f, struct instance *in, struct sel_hit *hit)
{
	struct sel_event ev;

	for (int tries = 0; tries < 50; tries++) {
		sel_history_destroy(in->h);
		assert_int_equal(sel_history_create(in->store, f->tokens, TOKENS, &in->h), 0);
		/* an engine asks again while the answer may still come */
		for (;;) {
			if (sel_lookup(in->store, in->h, 0, hit))
				return true;
			if (!sel_lookup_pending(in->store, in->h))
				break;
			usleep(100);
			sel_poll(in->store, &ev, 0);
		}
	}
	return false;
}

/* Instance i's pages from id first on and row slot hold the hit's bytes, every rank. */
static void check_restored(struct fixture *f, uint32_t i, const struct sel_hit *hit,
			   uint32_t first, uint32_t slot)
{
	uint8_t expect[ROW];

	for (uint32_t r = 0; r < WORLD; r++) {
		struct rank_memory *m = &f->mem[i * WORLD + r];

		for (uint32_t p = 0; p < hit->page_count; p++)
			for (int k = 0; k < 2; k++) {
				tu_fill(expect, UNIT, page_seed_byte(r, p, k));
				if (memcmp(expect, m->planes[k] + (first + p) * UNIT, UNIT) != 0)
					fail_msg("rank %u page %u plane %d differs", r, p, k);
			}
		tu_fill(expect, ROW, 555 + r);
		if (memcmp(expect, m->rows + slot * ROW, ROW) != 0)
			fail_msg("rank %u row differs", r);
	}
}

static const struct variant small_disk = { .row_bytes = ROW, .disk_limit = 320u << 10 };
static const struct variant big_disk = { .row_bytes = ROW, .disk_limit = 64u << 20 };

/* Instance A cascades to the pool; checks it put some and kept its limit. */
static uint64_t cascade_from_a(struct fixture *f)
{
	struct sel_stats st;

	instance_open(f, 0, &small_disk);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_attached, 1);
	fill(f, 0);
	publish_chain(f, 0, 30);
	settle(f->inst[0].store, 1);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	if (st.pool_puts == 0)
		fail_msg("no pool put (failures %llu, refusals %llu)",
			 (unsigned long long)st.pool_put_failures,
			 (unsigned long long)st.pool_refusals);
	assert_int_equal(st.pool_put_failures, 0);
	return st.pool_puts;
}

/*
 * Instance A (two ranks, a 320 KiB disk limit) puts the records leaving its
 * disk to the manager; instance B (other directories) finds them through a
 * lookup ticket and restores them byte-exact on both ranks into other page
 * ids and another row slot.
 */
static void test_pool_attach_cascade_then_restore_elsewhere(void **state)
{
	struct fixture *f = *state;
	struct sel_stats st;
	struct sel_event ev;
	struct sel_hit hit;
	uint32_t ids[PAGES];
	bool joined;

	manager_start(f);
	cascade_from_a(f);
	instance_close(f, 0);
	instance_open(f, 1, &big_disk);
	for (uint32_t r = 0; r < WORLD; r++)
		memset(&f->mem[1 * WORLD + r], 0xee, offsetof(struct rank_memory, why));
	if (!lookup_pool(f, &f->inst[1], &hit))
		fail_msg("instance B found nothing in the pool");
	assert_true(hit.consumed >= 5 * PAGE_TOKENS);
	for (uint32_t p = 0; p < hit.page_count; p++)
		ids[p] = 20 + p;
	assert_int_equal(sel_fetch(f->inst[1].store, &hit, ids, 3, 7, &joined), 0);
	ev = next_event(f->inst[1].store, 20000);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("pool fetch: %d %s", ev.kind, ev.why);
	check_restored(f, 1, &hit, 20, 3);
	assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
	assert_int_equal(st.pool_hits, 1);
	assert_int_equal(st.pool_claims, 1);
	assert_true(st.pool_claim_bytes > 0);
	instance_close(f, 1);
}

/*
 * Instance i finds the chain in the pool and restores it byte-exact on both
 * ranks, from the manager's arena: rank zero (this process) and rank one
 * (counted when its peer stops, at instance_close) read no stream window.
 */
static void claim_from_arena(struct fixture *f, uint32_t i)
{
	struct shard_pool_link_counts before, after;
	struct sel_event ev;
	struct sel_hit hit;
	uint32_t ids[PAGES];
	bool joined;

	for (uint32_t r = 0; r < WORLD; r++)
		memset(&f->mem[i * WORLD + r], 0xee, offsetof(struct rank_memory, why));
	shard_pool_link_counts(&before);
	if (!lookup_pool(f, &f->inst[i], &hit))
		fail_msg("instance %u found nothing in the pool", i);
	for (uint32_t p = 0; p < hit.page_count; p++)
		ids[p] = 20 + p;
	assert_int_equal(sel_fetch(f->inst[i].store, &hit, ids, 3, 7, &joined), 0);
	ev = next_event(f->inst[i].store, 20000);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("pool fetch: %d %s", ev.kind, ev.why);
	check_restored(f, i, &hit, 20, 3);
	shard_pool_link_counts(&after);
	assert_int_equal(after.arena_claims, before.arena_claims + 1);
	assert_true(after.arena_records > before.arena_records);
	assert_int_equal(after.stream_windows, before.stream_windows);
	assert_int_equal(after.stream_claims, before.stream_claims);
	assert_int_equal(after.arena_refusals, before.arena_refusals);
}

/* Rank one of instance i (stopped) claimed from the arena and streamed nothing. */
static void peer_claimed_from_arena(struct fixture *f, uint32_t i, uint64_t claims)
{
	const struct shard_pool_link_counts *c = &f->mem[i * WORLD + 1].counts;

	assert_int_equal(c->arena_claims, claims);
	assert_int_equal(c->stream_windows, 0);
	assert_int_equal(c->arena_refusals, 0);
}

/*
 * Same host: B's claim copies each rank's share from the manager's arena
 * into the device (the host device: memory), byte-exact, reading no stream
 * window on either rank.
 */
static void test_pool_attach_same_host_claims_from_arena(void **state)
{
	struct fixture *f = *state;

	manager_start(f);
	cascade_from_a(f);
	instance_close(f, 0);
	instance_open(f, 1, &big_disk);
	claim_from_arena(f, 1);
	instance_close(f, 1);
	peer_claimed_from_arena(f, 1, 1);
}

/*
 * The manager is restarted: a new arena (another file, id and generation).
 * The instance attached to the old one loses its pool and finds nothing
 * (never the old arena's bytes); a new instance claims from the new arena,
 * byte-exact, after A put the chain there again.
 */
static void test_pool_attach_restarted_manager_new_arena(void **state)
{
	struct fixture *f = *state;
	struct sel_stats st;
	struct sel_event ev;
	struct sel_hit hit;

	manager_start(f);
	cascade_from_a(f);
	instance_close(f, 0);
	instance_open(f, 1, &big_disk);
	claim_from_arena(f, 1);
	manager_kill(f);
	manager_start(f);
	/* B's connection is gone: its pool turns off and answers nothing */
	for (int i = 0; i < 200; i++) {
		assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
		if (!st.pool_attached)
			break;
		sel_poll(f->inst[1].store, &ev, 10);
	}
	assert_int_equal(st.pool_attached, 0);
	sel_history_destroy(f->inst[1].h);
	assert_int_equal(sel_history_create(f->inst[1].store, f->tokens, TOKENS, &f->inst[1].h),
			 0);
	assert_false(sel_lookup(f->inst[1].store, f->inst[1].h, 0, &hit));
	assert_false(sel_lookup_pending(f->inst[1].store, f->inst[1].h));
	instance_close(f, 1);
	peer_claimed_from_arena(f, 1, 1);
	/* the new manager's arena serves, once A (its disk emptied) put the chain again */
	tu_remove_tree(strdup(f->inst[0].dir));
	cascade_from_a(f);
	instance_close(f, 0);
	instance_open(f, 2, &big_disk);
	claim_from_arena(f, 2);
	instance_close(f, 2);
	peer_claimed_from_arena(f, 2, 1);
}

/* An instance of another layout (a larger row) attaches and never matches A's records. */
static void test_pool_attach_other_layout_never_matches(void **state)
{
	struct fixture *f = *state;
	struct variant other = big_disk;
	struct sel_stats st;
	struct sel_hit hit;

	manager_start(f);
	cascade_from_a(f);
	instance_close(f, 0);
	other.row_bytes = 2 * ROW;
	instance_open(f, 2, &other);
	assert_int_equal(sel_store_stats(f->inst[2].store, &st), 0);
	assert_int_equal(st.pool_attached, 1); /* attached, to a scope of its own */
	assert_false(lookup_pool(f, &f->inst[2], &hit));
	instance_close(f, 2);
}

/* No manager at the address: one warning at open, local tiers only, which serve. */
static void test_pool_attach_manager_absent(void **state)
{
	struct fixture *f = *state;
	struct warn_catch wc = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct sel_stats st;
	struct sel_hit hit;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);

	/* a port nobody listens on: bound, then closed */
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
	close(fd);
	snprintf(f->pool, sizeof(f->pool), "127.0.0.1:%u", ntohs(addr.sin_port));
	sel_log_set_level(SEL_LOG_WARN);
	sel_log_set_callback(catch_warning, &wc);
	instance_open(f, 0, &small_disk);
	sel_log_set_callback(NULL, NULL);
	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(wc.pool_warnings, 1);
	assert_non_null(strstr(wc.last, "not attached"));
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_attached, 0);
	fill(f, 0);
	publish_chain(f, 0, 10);
	assert_true(sel_lookup(f->inst[0].store, f->inst[0].h, 0, &hit));
	assert_false(sel_lookup_pending(f->inst[0].store, f->inst[0].h));
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_puts, 0);
	instance_close(f, 0);
}

/* Rank one proves another secret: the manager refuses it, the instance runs local. */
static void test_pool_attach_wrong_secret_on_a_peer(void **state)
{
	struct fixture *f = *state;
	struct warn_catch wc = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct variant v = small_disk;
	struct sel_stats st;

	manager_start(f);
	v.wrong_secret_peer = true;
	sel_log_set_level(SEL_LOG_WARN);
	sel_log_set_callback(catch_warning, &wc);
	instance_open(f, 0, &v);
	sel_log_set_callback(NULL, NULL);
	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(wc.pool_warnings, 1);
	assert_non_null(strstr(wc.last, "rank 1"));
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_attached, 0);
	fill(f, 0);
	publish_chain(f, 0, 30); /* evicts as without a pool */
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_puts, 0);
	instance_close(f, 0);
}

/*
 * The manager stops answering once B asked for a claim, then is killed:
 * the fetch fails (the caller recomputes, no byte is claimed restored) and
 * B keeps serving from its local tiers.
 */
static void test_pool_attach_manager_killed_mid_claim(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;
	struct warn_catch wc = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct sel_hit hit, local;
	struct sel_stats st;
	uint32_t ids[PAGES];
	bool joined;

	manager_start(f);
	cascade_from_a(f);
	instance_close(f, 0);
	instance_open(f, 1, &big_disk);
	if (!lookup_pool(f, &f->inst[1], &hit))
		fail_msg("instance B found nothing in the pool");
	kill(f->manager, SIGSTOP);
	for (uint32_t p = 0; p < hit.page_count; p++)
		ids[p] = 20 + p;
	assert_int_equal(sel_fetch(f->inst[1].store, &hit, ids, 3, 7, &joined), 0);
	usleep(100000);
	sel_log_set_level(SEL_LOG_WARN);
	sel_log_set_callback(catch_warning, &wc);
	manager_kill(f);
	ev = next_event(f->inst[1].store, 30000);
	assert_int_equal(ev.kind, SEL_EVENT_FETCH_FAILED);
	assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
	assert_int_equal(st.pool_claim_failures, 1);
	assert_int_equal(st.pool_claims, 0);
	/* the lost connection turned the pool off, said once */
	for (int i = 0; i < 100; i++)
		sel_poll(f->inst[1].store, &ev, 0);
	sel_log_set_callback(NULL, NULL);
	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
	assert_int_equal(st.pool_attached, 0);
	assert_int_equal(wc.pool_warnings, 1);
	assert_non_null(strstr(wc.last, "connection lost"));
	/* the local tiers still store and restore (a new history: no pool answer) */
	fill(f, 1);
	publish_chain(f, 1, 10);
	sel_history_destroy(f->inst[1].h);
	assert_int_equal(sel_history_create(f->inst[1].store, f->tokens, TOKENS, &f->inst[1].h),
			 0);
	assert_true(sel_lookup(f->inst[1].store, f->inst[1].h, 0, &local));
	assert_int_equal(local.consumed, 10 * PAGE_TOKENS);
	for (uint32_t p = 0; p < local.page_count; p++)
		ids[p] = 20 + p;
	assert_int_equal(sel_fetch(f->inst[1].store, &local, ids, 1, 8, &joined), 0);
	ev = next_event(f->inst[1].store, 10000);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("local fetch: %d %s", ev.kind, ev.why);
	check_restored(f, 1, &local, 20, 1);
	instance_close(f, 1);
}

/*
 * R-POOL-52: the manager stops answering (stopped, not killed: its
 * connections stay open) once B asked for a claim: the fetch fails within
 * the no-progress timeout, saying the manager sent nothing, not at a
 * deadline of seconds more or never.
 */
static void test_pool_attach_silent_manager_fails_claim(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;
	struct sel_hit hit;
	struct sel_stats st;
	uint32_t ids[PAGES];
	uint64_t start;
	bool joined;

	manager_start(f);
	cascade_from_a(f);
	instance_close(f, 0);
	instance_open(f, 1, &big_disk);
	if (!lookup_pool(f, &f->inst[1], &hit))
		fail_msg("instance B found nothing in the pool");
	kill(f->manager, SIGSTOP);
	for (uint32_t p = 0; p < hit.page_count; p++)
		ids[p] = 20 + p;
	start = sel_monotonic_ns();
	assert_int_equal(sel_fetch(f->inst[1].store, &hit, ids, 3, 7, &joined), 0);
	ev = next_event(f->inst[1].store, 30000);
	assert_int_equal(ev.kind, SEL_EVENT_FETCH_FAILED);
	assert_true(sel_monotonic_ns() - start < (POOL_NO_PROGRESS_MS + 2000ull) * 1000000ull);
	if (!strstr(ev.why, "sent nothing"))
		fail_msg("the failed claim says: %s", ev.why);
	assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
	assert_int_equal(st.pool_claim_failures, 1);
	assert_int_equal(st.pool_claims, 0);
	manager_kill(f);
	instance_close(f, 1);
}

/* Polls until the store's pool_attached is want or ms pass; whether it is. */
static bool poll_attached(sel_store *s, uint64_t want, uint32_t ms)
{
	struct sel_stats st;
	struct sel_event ev;

	for (uint32_t i = 0; i < ms; i++) {
		sel_poll(s, &ev, 0);
		assert_int_equal(sel_store_stats(s, &st), 0);
		if (st.pool_attached == want)
			return true;
		usleep(1000);
	}
	return false;
}

/*
 * The manager is killed and another starts on the same address: instance
 * A reattaches (both ranks) on its own, a later cascade reaches the new
 * manager and instance B restores it byte-exact from there.
 */
static void test_pool_attach_reattaches_after_manager_restart(void **state)
{
	struct fixture *f = *state;
	uint16_t port;
	struct sel_stats st;
	struct sel_event ev;
	struct sel_hit hit;
	uint32_t ids[PAGES];
	bool joined;

	port = manager_start_fixed(f);
	instance_open(f, 0, &small_disk);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_attached, 1);
	manager_kill(f);
	if (!poll_attached(f->inst[0].store, 0, 10000))
		fail_msg("instance A did not see its session end");
	/* the port stays free: below the ephemeral range, and A's tries only connect */
	if (!manager_try_start(f, port))
		fail_msg("the manager could not listen on port %u again", port);
	if (!poll_attached(f->inst[0].store, 1, 20000))
		fail_msg("instance A did not reattach to the restarted manager");
	fill(f, 0);
	publish_chain(f, 0, 30);
	settle(f->inst[0].store, 1);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	if (st.pool_puts == 0)
		fail_msg("no pool put after the reattach (failures %llu, refusals %llu)",
			 (unsigned long long)st.pool_put_failures,
			 (unsigned long long)st.pool_refusals);
	assert_int_equal(st.pool_put_failures, 0);
	instance_close(f, 0);
	instance_open(f, 1, &big_disk);
	if (!lookup_pool(f, &f->inst[1], &hit))
		fail_msg("instance B found nothing in the restarted pool");
	for (uint32_t p = 0; p < hit.page_count; p++)
		ids[p] = 20 + p;
	assert_int_equal(sel_fetch(f->inst[1].store, &hit, ids, 3, 7, &joined), 0);
	ev = next_event(f->inst[1].store, 20000);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("pool fetch after the restart: %d %s", ev.kind, ev.why);
	check_restored(f, 1, &hit, 20, 3);
	instance_close(f, 1);
}

/*
 * R-POOL-110: rank one's own connection is cut (failpoint pool.link_cut,
 * in its process only) before its first share on instance A, and again
 * before its first on instance B, while rank zero's session stays up: each
 * time the rank reconnects and the instance keeps using the pool. A's puts
 * after the cut reach the manager, and B's claim, its rank one cut just
 * before its share, restores them byte-exact on both ranks.
 */
static void test_pool_attach_peer_reconnects_alone(void **state)
{
	static const struct variant cut_small = { .row_bytes = ROW, .disk_limit = 320u << 10,
						   .peer_failpoints = "pool.link_cut=1*return" };
	static const struct variant cut_big = { .row_bytes = ROW, .disk_limit = 64u << 20,
						 .peer_failpoints = "pool.link_cut=1*return" };
	struct fixture *f = *state;
	struct sel_stats st;
	struct sel_event ev;
	struct sel_hit hit;
	uint32_t ids[PAGES];
	bool joined;

	manager_start(f);
	instance_open(f, 0, &cut_small);
	fill(f, 0);
	publish_chain(f, 0, 30);
	settle(f->inst[0].store, 1);
	/*
	 * The put whose share met the cut may fail, dropping its record and
	 * what extends it: the chain is published again, and goes through.
	 */
	publish_chain(f, 0, 30);
	settle(f->inst[0].store, 2);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	print_message("puts %llu, failures %llu\n", (unsigned long long)st.pool_puts,
		      (unsigned long long)st.pool_put_failures);
	assert_int_equal(st.pool_attached, 1);
	assert_true(st.pool_put_failures <= 1);
	if (st.pool_puts < 1)
		fail_msg("%llu pool puts after rank one's cut (failures %llu)",
			 (unsigned long long)st.pool_puts,
			 (unsigned long long)st.pool_put_failures);
	instance_close(f, 0);
	instance_open(f, 1, &cut_big);
	for (uint32_t r = 0; r < WORLD; r++)
		memset(&f->mem[1 * WORLD + r], 0xee, offsetof(struct rank_memory, why));
	if (!lookup_pool(f, &f->inst[1], &hit))
		fail_msg("instance B found nothing in the pool");
	for (uint32_t p = 0; p < hit.page_count; p++)
		ids[p] = 20 + p;
	assert_int_equal(sel_fetch(f->inst[1].store, &hit, ids, 3, 7, &joined), 0);
	ev = next_event(f->inst[1].store, 20000);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("pool fetch after rank one's cut: %d %s", ev.kind, ev.why);
	check_restored(f, 1, &hit, 20, 3);
	assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
	assert_int_equal(st.pool_attached, 1);
	assert_int_equal(st.pool_claim_failures, 0);
	instance_close(f, 1);
}

/*
 * Rank zero's own connection (the session) is cut before a share while the
 * manager and rank one's connection live: the instance reattaches every
 * rank (rank one's old connection ends before its new ATTACH, R-POOL-18),
 * and puts reach the manager again.
 */
static void catch_reattached(enum sel_log_level level, const char *message, void *user)
{
	(void)level;
	if (strstr(message, "reattached as"))
		__atomic_add_fetch((uint32_t *)user, 1, __ATOMIC_RELAXED);
}

static void test_pool_attach_session_cut_reattaches(void **state)
{
	struct fixture *f = *state;
	uint32_t reattached = 0;
	struct sel_stats st;
	struct sel_event ev;
	uint64_t puts;

	manager_start(f);
	instance_open(f, 0, &small_disk);
	fill(f, 0);
	/* after the peer's fork: rank zero's link only */
	assert_int_equal(sel_failpoints_configure("pool.link_cut=1*return"), 0);
	sel_log_set_level(SEL_LOG_INFO);
	sel_log_set_callback(catch_reattached, &reattached);
	publish_chain(f, 0, 30);
	assert_int_equal(sel_failpoint_fired(SEL_FP_POOL_LINK_CUT), 1);
	for (uint32_t i = 0; i < 20000 && !__atomic_load_n(&reattached, __ATOMIC_RELAXED); i++) {
		sel_poll(f->inst[0].store, &ev, 0);
		usleep(1000);
	}
	sel_log_set_callback(NULL, NULL);
	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(sel_failpoints_configure(""), 0);
	if (!reattached)
		fail_msg("the instance did not reattach while the manager lived");
	if (!poll_attached(f->inst[0].store, 1, 1000))
		fail_msg("reattached but not attached");
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	puts = st.pool_puts;
	publish_chain(f, 0, 30);
	settle(f->inst[0].store, puts + 1);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	if (st.pool_puts <= puts)
		fail_msg("no pool put after the reattach (failures %llu)",
			 (unsigned long long)st.pool_put_failures);
	instance_close(f, 0);
}

/* Where pool.link_close's print was logged: the model thread (this one) or another. */
struct close_catch {
	pthread_mutex_t lock;
	pthread_t model;
	uint32_t on_model, elsewhere;
};

static void catch_close(enum sel_log_level level, const char *message, void *user)
{
	struct close_catch *cc = user;

	(void)level;
	if (!strstr(message, "failpoint pool.link_close reached"))
		return;
	pthread_mutex_lock(&cc->lock);
	if (pthread_equal(pthread_self(), cc->model))
		cc->on_model++;
	else
		cc->elsewhere++;
	pthread_mutex_unlock(&cc->lock);
}

/*
 * A reattach swaps rank zero's link without closing the old one on the
 * model thread: the old link (its arena registration, its I/O thread) is
 * closed on the transfer thread, and the poll that swapped it never did it.
 */
static void test_pool_attach_swap_closes_off_the_model_thread(void **state)
{
	struct fixture *f = *state;
	struct close_catch cc = { .lock = PTHREAD_MUTEX_INITIALIZER, .model = pthread_self() };
	struct sel_stats st;
	struct sel_event ev;
	uint32_t closed = 0;
	uint16_t port;

	port = manager_start_fixed(f);
	instance_open(f, 0, &small_disk);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_attached, 1);
	/* after the peer's fork: only this process's links log it */
	assert_int_equal(sel_failpoints_configure("pool.link_close=print"), 0);
	sel_log_set_level(SEL_LOG_INFO);
	sel_log_set_callback(catch_close, &cc);
	manager_kill(f);
	if (!poll_attached(f->inst[0].store, 0, 10000))
		fail_msg("instance A did not see its session end");
	if (!manager_try_start(f, port))
		fail_msg("the manager could not listen on port %u again", port);
	if (!poll_attached(f->inst[0].store, 1, 20000))
		fail_msg("instance A did not reattach to the restarted manager");
	for (uint32_t i = 0; i < 5000 && closed == 0; i++) {
		sel_poll(f->inst[0].store, &ev, 0);
		pthread_mutex_lock(&cc.lock);
		closed = cc.on_model + cc.elsewhere;
		pthread_mutex_unlock(&cc.lock);
		usleep(1000);
	}
	sel_log_set_callback(NULL, NULL);
	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(sel_failpoints_configure(""), 0);
	assert_int_equal(cc.on_model, 0);
	assert_int_equal(cc.elsewhere, 1);
	instance_close(f, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pool_attach_cascade_then_restore_elsewhere,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_same_host_claims_from_arena,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_restarted_manager_new_arena,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_other_layout_never_matches,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_manager_absent, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_wrong_secret_on_a_peer, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_manager_killed_mid_claim, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_silent_manager_fails_claim, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_peer_reconnects_alone, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_session_cut_reattaches, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_swap_closes_off_the_model_thread,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_reattaches_after_manager_restart,
						setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("pool_attach", tests, NULL, NULL);
}
