/*
 * Exports on loopback (pool/PROTOCOL.md R-POOL-70 .. R-POOL-76; docs/DESIGN.md
 * sections 12 and 13): a manager (a child process, its counters copied to
 * shared memory) and instances of two ranks each, rank zero here through
 * the public store API and rank one a child through sel_peer_start.
 * Instance A stores a chain that stays local (a large disk limit: nothing
 * cascades) and announces it; instance B's lookup misses the manager's
 * records, is answered at once, and makes the manager ask A to export;
 * A's ranks put the chain through their ordinary put path while A keeps
 * every record; B then finds the chain and restores it byte-exact into
 * other page ids on both ranks. An instance of another layout never
 * triggers an export, and a stranger without the secret is refused before
 * it can. A GPU checkpoint A only offers (never stored) reaches B too, each
 * of A's ranks copying its own share from its own device.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/log.h"
#include "pool/client.h"
#include "pool/manager.h"
#include "selene/store.h"
#include "shard/pool_link.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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

/* The manager child's counters, copied every millisecond. */
struct manager_view {
	pthread_mutex_t lock; /* process-shared */
	struct pool_manager_stats stats;
};

struct fixture {
	char *base;
	struct rank_memory *mem; /* shared with the children */
	struct manager_view *view; /* shared with the manager child */
	pid_t manager;
	uint16_t manager_port;
	char pool[64];
	char secret[512], wrong_secret[512];
	uint32_t tokens[TOKENS];
	struct instance inst[3];
};

/* What differs between the instances of a test. */
struct variant {
	uint32_t row_bytes;       /* ROW, or another layout */
	uint64_t disk_limit;
	bool wrong_secret_peer;   /* rank one proves another secret */
};

static void write_secret(const char *path, uint8_t byte)
{
	uint8_t secret[32];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	memset(secret, byte, sizeof(secret));
	assert_true(fd >= 0);
	assert_int_equal(write(fd, secret, sizeof(secret)), (ssize_t)sizeof(secret));
	close(fd);
}


static _Atomic bool manager_stopping;

static void *manager_loop(void *arg)
{
	pool_manager_run(arg);
	manager_stopping = true;
	return NULL;
}

/* The manager as a child process; its port comes back through a pipe. */
static void manager_start(struct fixture *f)
{
	int fds[2];
	uint16_t port;

	assert_int_equal(pipe(fds), 0);
	f->manager = fork();
	assert_true(f->manager >= 0);
	if (f->manager == 0) {
		struct pool_manager_config c = { .listen = "127.0.0.1:0", .name = "export-test",
						 .memory_bytes = 64u << 20 };
		struct pool_manager *m;
		pthread_t loop;
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
		if (pthread_create(&loop, NULL, manager_loop, m) != 0)
			_exit(4);
		/* killed by the test; copies its counters meanwhile */
		for (;;) {
			struct pool_manager_stats st;

			pool_manager_stats(m, &st);
			pthread_mutex_lock(&f->view->lock);
			f->view->stats = st;
			pthread_mutex_unlock(&f->view->lock);
			usleep(1000);
		}
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &port, sizeof(port)), (ssize_t)sizeof(port));
	close(fds[0]);
	f->manager_port = port;
	snprintf(f->pool, sizeof(f->pool), "127.0.0.1:%u", port);
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

static struct pool_manager_stats manager_stats(struct fixture *f)
{
	struct pool_manager_stats st;

	pthread_mutex_lock(&f->view->lock);
	st = f->view->stats;
	pthread_mutex_unlock(&f->view->lock);
	return st;
}

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
	pthread_mutexattr_t attr;

	f->base = tu_make_temp_dir("pool-export");
	assert_true(strlen(f->base) < 300);
	f->mem = mmap(NULL, 3 * WORLD * sizeof(struct rank_memory), PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(f->mem != MAP_FAILED);
	f->view = mmap(NULL, sizeof(*f->view), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		       -1, 0);
	assert_true(f->view != MAP_FAILED);
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	pthread_mutex_init(&f->view->lock, &attr);
	pthread_mutexattr_destroy(&attr);
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
	pthread_mutex_destroy(&f->view->lock);
	munmap(f->view, sizeof(*f->view));
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
		enum sel_outcome outcome;
		struct sel_event ev;

		assert_int_equal(sel_store_publish(in->store, &pub, &outcome), 0);
		assert_int_equal(outcome, SEL_QUEUED);
		ev = next_event(in->store, 10000);
		if (ev.kind != SEL_EVENT_STORED)
			fail_msg("store of %u pages: %d %s", pages, ev.kind, ev.why);
	}
}

/*
 * Asks the pool from instance asker with a fresh history of the tokens,
 * polling instance holder meanwhile (it answers exports on its polls),
 * until a pool hit or ms pass.
 */
static bool lookup_while_holder_polls(struct fixture *f, uint32_t asker, uint32_t holder,
				      struct sel_hit *hit, uint32_t ms)
{
	struct instance *in = &f->inst[asker];
	uint64_t end = sel_monotonic_ns() + ms * 1000000ull;
	struct sel_event ev;

	while (sel_monotonic_ns() < end) {
		sel_history_destroy(in->h);
		assert_int_equal(sel_history_create(in->store, f->tokens, TOKENS, &in->h), 0);
		for (;;) {
			if (sel_lookup(in->store, in->h, 0, hit))
				return true;
			if (!sel_lookup_pending(in->store, in->h))
				break;
			usleep(100);
			sel_poll(in->store, &ev, 0);
		}
		for (int i = 0; i < 10; i++) {
			sel_poll(f->inst[holder].store, &ev, 0);
			sel_poll(in->store, &ev, 0);
			usleep(1000);
		}
	}
	return false;
}

/* Polls instance i until the manager holds want announcements, or 10 s. */
static void wait_holds(struct fixture *f, uint32_t i, uint64_t want)
{
	struct sel_event ev;

	for (int k = 0; k < 10000 && manager_stats(f).holds != want; k++) {
		sel_poll(f->inst[i].store, &ev, 0);
		usleep(1000);
	}
	assert_int_equal(manager_stats(f).holds, want);
}

static const struct variant big_disk = { .row_bytes = ROW, .disk_limit = 64u << 20 };

/*
 * A's chain stays local and is announced; another layout looks it up and
 * asks nothing of A; B's lookup is answered at once without it, the
 * manager asks A, A's two ranks put the chain (A keeps every record), and
 * B restores it byte-exact into other page ids and another row slot. A
 * then still restores the chain from its own disk, byte-exact.
 */
static void test_pool_export_restores_a_holders_records(void **state)
{
	struct fixture *f = *state;
	struct variant other = big_disk;
	struct pool_manager_stats ms;
	struct sel_stats a_before, a_after, st;
	struct sel_event ev;
	struct sel_hit hit;
	uint32_t ids[PAGES];
	bool joined;

	manager_start(f);
	instance_open(f, 0, &big_disk);
	fill(f, 0);
	publish_chain(f, 0, 30);
	assert_int_equal(sel_store_stats(f->inst[0].store, &a_before), 0);
	assert_int_equal(a_before.pool_attached, 1);
	assert_int_equal(a_before.pool_puts, 0); /* nothing cascades */
	/* every record of the chain has its row here (a root's and an endpoint's kept) */
	wait_holds(f, 0, a_before.records - a_before.truncations);

	/* another layout: attached to a scope of its own, it triggers nothing */
	other.row_bytes = 2 * ROW;
	instance_open(f, 2, &other);
	assert_false(lookup_while_holder_polls(f, 2, 0, &hit, 300));
	assert_int_equal(manager_stats(f).exports_requested, 0);
	instance_close(f, 2);

	/* B: not yet, at once; then the chain A exported */
	instance_open(f, 1, &big_disk);
	for (uint32_t r = 0; r < WORLD; r++)
		memset(&f->mem[1 * WORLD + r], 0xee, offsetof(struct rank_memory, why));
	sel_history_destroy(f->inst[1].h);
	assert_int_equal(sel_history_create(f->inst[1].store, f->tokens, TOKENS, &f->inst[1].h),
			 0);
	if (!lookup_while_holder_polls(f, 1, 0, &hit, 20000))
		fail_msg("instance B never found A's chain (exports asked %llu, refused %llu, "
			 "failed %llu)", (unsigned long long)manager_stats(f).exports_requested,
			 (unsigned long long)manager_stats(f).exports_refused,
			 (unsigned long long)manager_stats(f).exports_failed);
	assert_int_equal(hit.consumed, 30 * PAGE_TOKENS);
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
	for (int k = 0; k < 5000 && manager_stats(f).exports_completed == 0; k++) {
		sel_poll(f->inst[0].store, &ev, 0);
		usleep(1000);
	}
	ms = manager_stats(f);
	assert_true(ms.exports_requested >= 1);
	assert_true(ms.exports_completed >= 1);
	assert_int_equal(ms.exports_refused, 0);

	/* A put the chain and kept it: every record, restorable from its own disk */
	assert_int_equal(sel_store_stats(f->inst[0].store, &a_after), 0);
	assert_true(a_after.pool_puts >= 1);
	assert_int_equal(a_after.pool_put_failures, 0);
	assert_int_equal(a_after.records, a_before.records);
	assert_int_equal(a_after.evictions, a_before.evictions);
	for (uint32_t r = 0; r < WORLD; r++)
		memset(&f->mem[0 * WORLD + r], 0xee, offsetof(struct rank_memory, why));
	sel_history_destroy(f->inst[0].h);
	assert_int_equal(sel_history_create(f->inst[0].store, f->tokens, TOKENS, &f->inst[0].h),
			 0);
	assert_true(sel_lookup(f->inst[0].store, f->inst[0].h, 0, &hit));
	assert_int_equal(hit.consumed, 30 * PAGE_TOKENS);
	assert_int_equal(sel_fetch(f->inst[0].store, &hit, ids, 2, 7, &joined), 0);
	ev = next_event(f->inst[0].store, 20000);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("A's local fetch: %d %s", ev.kind, ev.why);
	check_restored(f, 0, &hit, 20, 2);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_hits, 0); /* its own disk, not the pool */
	instance_close(f, 1);
	instance_close(f, 0);
	/* the session's end forgot A's announcements */
	for (int k = 0; k < 5000 && manager_stats(f).holds != 0; k++)
		usleep(1000);
	assert_int_equal(manager_stats(f).holds, 0);
}

/*
 * Holder i's engine answers its export requests (pinning pages 0 .. n - 1
 * and row slot 0, where fill put them) and counts the ends; 1 when it
 * took an event.
 */
static int gpu_engine_poll(struct fixture *f, uint32_t i, uint32_t *pinned, uint32_t *ended,
			   int *ended_error)
{
	struct sel_event ev;
	uint32_t ids[PAGES];

	if (sel_poll(f->inst[i].store, &ev, 1) != 1)
		return 0;
	if (ev.kind == SEL_EVENT_EXPORT_REQUESTED) {
		assert_int_equal(ev.checkpoint, 77);
		for (uint32_t p = 0; p < ev.tokens / PAGE_TOKENS; p++)
			ids[p] = p;
		if (sel_export_pinned(f->inst[i].store, ev.id, ids,
				      (uint32_t)(ev.tokens / PAGE_TOKENS), 0) == 0)
			(*pinned)++;
	} else if (ev.kind == SEL_EVENT_EXPORT_ENDED) {
		assert_true(*ended < *pinned); /* never an end without a pin */
		(*ended)++;
		*ended_error = ev.error;
	} else {
		fail_msg("holder: unexpected event %d (%s)", ev.kind, ev.why);
	}
	return 1;
}

/*
 * A GPU checkpoint of a two-rank instance (R-POOL-77 .. R-POOL-79): A
 * stores nothing and offers a checkpoint its "GPUs" hold; B's lookup makes
 * the manager ask A; A's engine pins and answers; each of A's ranks builds
 * its own share from its own device (rank one through the pool export
 * JOB, R-WIRE-21); the end comes once; B restores every rank's bytes into
 * other page ids and another row slot.
 */
static void test_pool_export_gpu_checkpoint_of_two_ranks(void **state)
{
	struct fixture *f = *state;
	struct instance *a, *b;
	struct sel_event ev;
	struct sel_hit hit;
	uint32_t ids[PAGES], pinned = 0, ended = 0;
	int ended_error = -1;
	uint64_t end;
	bool found = false, joined;

	manager_start(f);
	instance_open(f, 0, &big_disk);
	instance_open(f, 1, &big_disk);
	a = &f->inst[0];
	b = &f->inst[1];
	fill(f, 0);
	for (uint32_t r = 0; r < WORLD; r++)
		memset(&f->mem[1 * WORLD + r], 0xee, offsetof(struct rank_memory, why));
	assert_int_equal(sel_gpu_hold(a->store, 77, a->h, 20 * PAGE_TOKENS), 0);
	wait_holds(f, 0, 1);
	end = sel_monotonic_ns() + 20000000000ull;
	while (!found && sel_monotonic_ns() < end) {
		sel_history_destroy(b->h);
		assert_int_equal(sel_history_create(b->store, f->tokens, TOKENS, &b->h), 0);
		for (;;) {
			found = sel_lookup(b->store, b->h, 0, &hit);
			if (found || !sel_lookup_pending(b->store, b->h))
				break;
			usleep(100);
			sel_poll(b->store, &ev, 0);
		}
		for (int i = 0; !found && i < 10; i++) {
			while (gpu_engine_poll(f, 0, &pinned, &ended, &ended_error))
				;
			sel_poll(b->store, &ev, 0);
			usleep(1000);
		}
	}
	if (!found)
		fail_msg("B never found A's GPU checkpoint (pinned %u, ended %u, failed %llu)",
			 pinned, ended, (unsigned long long)manager_stats(f).exports_failed);
	assert_int_equal(hit.consumed, 20 * PAGE_TOKENS);
	for (int k = 0; k < 5000 && ended < pinned; k++) {
		gpu_engine_poll(f, 0, &pinned, &ended, &ended_error);
		usleep(1000);
	}
	assert_int_equal(pinned, 1);
	assert_int_equal(ended, 1);
	assert_int_equal(ended_error, 0);
	for (uint32_t p = 0; p < hit.page_count; p++)
		ids[p] = 30 + p;
	assert_int_equal(sel_fetch(b->store, &hit, ids, 3, 9, &joined), 0);
	ev = next_event(b->store, 20000);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("pool fetch: %d %s", ev.kind, ev.why);
	check_restored(f, 1, &hit, 30, 3);
	assert_int_equal(sel_gpu_evicted(a->store, 77), 0);
	wait_holds(f, 0, 0);
	instance_close(f, 1);
	instance_close(f, 0);
}

/*
 * A stranger (the wrong secret) is refused before it can announce or ask
 * anything: the manager requests no export for it and counts an
 * authentication failure.
 */
static void test_pool_export_stranger_refused(void **state)
{
	struct fixture *f = *state;
	struct pool_client_config c = { 0 };
	struct pool_client *client = NULL;
	struct rec_geometry g;
	uint64_t page_bytes[WORLD], row_bytes[WORLD];
	uint8_t wrong[32];
	char why[256];
	int ret;

	manager_start(f);
	instance_open(f, 0, &big_disk);
	fill(f, 0);
	publish_chain(f, 0, 10);
	tu_geometry(&g, PAGE_TOKENS, 2, UNIT, ROW, 0, WORLD);
	for (uint32_t r = 0; r < WORLD; r++) {
		page_bytes[r] = g.page_record_bytes;
		row_bytes[r] = g.row_record_bytes;
	}
	memset(wrong, 0x5b, sizeof(wrong));
	c.address = f->pool;
	c.secret = wrong;
	c.rank = 0;
	memset(c.instance_id, 0x77, sizeof(c.instance_id));
	c.scope = (struct pool_scope_parts){ .world_size = WORLD, .page_tokens = PAGE_TOKENS,
					     .plane_count = 2, .page_bytes = page_bytes,
					     .row_bytes = row_bytes };
	c.geometry = &g;
	ret = pool_client_open(&c, &client, why, sizeof(why));
	assert_int_equal(ret, -EACCES);
	assert_null(client);
	for (int k = 0; k < 1000 && manager_stats(f).auth_failures == 0; k++)
		usleep(1000);
	assert_true(manager_stats(f).auth_failures >= 1);
	assert_int_equal(manager_stats(f).exports_requested, 0);
	instance_close(f, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pool_export_restores_a_holders_records, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_export_stranger_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_export_gpu_checkpoint_of_two_ranks, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
