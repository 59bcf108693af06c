/*
 * Fixtures shared by the pool instance tests (tests/pool_fixture.h): the
 * pool manager child, and two-rank instances on loopback. Not a test of
 * its own; each test binary that links it says what it proves.
 */
#include "tests/pool_fixture.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void pf_manager_view_open(struct pf_manager *m)
{
	pthread_mutexattr_t attr;

	m->view = mmap(NULL, sizeof(*m->view), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		       -1, 0);
	assert_true(m->view != MAP_FAILED);
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	pthread_mutex_init(&m->view->lock, &attr);
	pthread_mutexattr_destroy(&attr);
}

void pf_manager_view_close(struct pf_manager *m)
{
	if (!m->view)
		return;
	pthread_mutex_destroy(&m->view->lock);
	munmap(m->view, sizeof(*m->view));
	m->view = NULL;
}

static void *manager_loop(void *arg)
{
	pool_manager_run(arg);
	return NULL;
}

/* The manager child's life after it listens: killed by the test, never returns. */
static void manager_child_run(struct pool_manager *pm, struct pf_manager_view *view)
{
	pthread_t loop;

	if (!view) {
		pool_manager_run(pm);
		pool_manager_close(pm);
		_exit(0);
	}
	if (pthread_create(&loop, NULL, manager_loop, pm) != 0)
		_exit(4);
	/* copies its counters until killed */
	for (;;) {
		struct pool_manager_stats st;

		pool_manager_stats(pm, &st);
		pthread_mutex_lock(&view->lock);
		view->stats = st;
		pthread_mutex_unlock(&view->lock);
		usleep(1000);
	}
}

bool pf_manager_try_start(struct pf_manager *m, uint16_t port, const char *name,
			  uint64_t memory_bytes)
{
	char listen[32];
	int fds[2];

	snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
	assert_int_equal(pipe(fds), 0);
	m->pid = fork();
	assert_true(m->pid >= 0);
	if (m->pid == 0) {
		struct pool_manager_config c = { .listen = listen, .name = name,
						 .memory_bytes = memory_bytes };
		struct pool_manager *pm;
		char why[256];

		close(fds[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a crashed test */
		memset(c.secret, 0x5a, sizeof(c.secret));
		if (pool_manager_open(&c, &pm, why, sizeof(why)) != 0)
			_exit(2);
		port = pool_manager_port(pm);
		if (write(fds[1], &port, sizeof(port)) != sizeof(port))
			_exit(3);
		close(fds[1]);
		manager_child_run(pm, m->view);
	}
	close(fds[1]);
	if (read(fds[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
		close(fds[0]);
		waitpid(m->pid, NULL, 0);
		m->pid = 0;
		return false;
	}
	close(fds[0]);
	m->port = port;
	snprintf(m->address, sizeof(m->address), "127.0.0.1:%u", port);
	return true;
}

void pf_manager_start(struct pf_manager *m, const char *name, uint64_t memory_bytes)
{
	assert_true(pf_manager_try_start(m, 0, name, memory_bytes));
}

uint16_t pf_manager_start_fixed(struct pf_manager *m, const char *name, uint64_t memory_bytes)
{
	for (uint32_t i = 0; i < 64; i++) {
		uint16_t port = (uint16_t)(20000 + (getpid() * 64 + i) % 12000);

		if (pf_manager_try_start(m, port, name, memory_bytes))
			return port;
	}
	fail_msg("no free port for the manager below the ephemeral range");
	return 0;
}

void pf_manager_kill(struct pf_manager *m)
{
	char pattern[64];
	glob_t found;

	if (m->pid <= 0)
		return;
	kill(m->pid, SIGKILL);
	waitpid(m->pid, NULL, 0);
	/* A killed manager leaves its arena file (pool/manager.c arena_create). */
	snprintf(pattern, sizeof(pattern), "/dev/shm/selene-pool-*-%d-*", (int)m->pid);
	if (glob(pattern, 0, NULL, &found) == 0) {
		for (size_t i = 0; i < found.gl_pathc; i++)
			unlink(found.gl_pathv[i]);
		globfree(&found);
	}
	m->pid = 0;
}

struct pool_manager_stats pf_manager_stats(struct pf_manager *m)
{
	struct pool_manager_stats st;

	SEL_ASSERT(m->view);
	pthread_mutex_lock(&m->view->lock);
	st = m->view->stats;
	pthread_mutex_unlock(&m->view->lock);
	return st;
}

void pf_write_secret(const char *path, uint8_t byte)
{
	uint8_t secret[32];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	memset(secret, byte, sizeof(secret));
	assert_true(fd >= 0);
	assert_int_equal(write(fd, secret, sizeof(secret)), (ssize_t)sizeof(secret));
	close(fd);
}

int pf_setup(void **state, const char *tag, bool with_view)
{
	struct pf_fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->base = tu_make_temp_dir(tag);
	assert_true(strlen(f->base) < 300);
	f->mem = mmap(NULL, PF_INSTANCES * PF_WORLD * sizeof(struct pf_rank_memory),
		      PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(f->mem != MAP_FAILED);
	if (with_view)
		pf_manager_view_open(&f->manager);
	tu_tokens(f->tokens, PF_TOKENS, 2718);
	snprintf(f->secret, sizeof(f->secret), "%s/pool.secret", f->base);
	snprintf(f->wrong_secret, sizeof(f->wrong_secret), "%s/wrong.secret", f->base);
	pf_write_secret(f->secret, 0x5a);
	pf_write_secret(f->wrong_secret, 0x5b);
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

int pf_teardown(void **state)
{
	struct pf_fixture *f = *state;

	sel_log_set_callback(NULL, NULL);
	for (uint32_t i = 0; i < PF_INSTANCES; i++) {
		struct pf_instance *in = &f->inst[i];

		sel_history_destroy(in->h);
		if (in->store)
			sel_store_close(in->store, 5000);
		if (in->peer > 0) {
			kill(in->peer, SIGKILL);
			waitpid(in->peer, NULL, 0);
		}
	}
	pf_manager_kill(&f->manager);
	pf_manager_view_close(&f->manager);
	munmap(f->mem, PF_INSTANCES * PF_WORLD * sizeof(struct pf_rank_memory));
	tu_remove_tree(f->base);
	sel_log_set_level(SEL_LOG_INFO);
	free(f);
	return 0;
}

static void config_for(struct pf_fixture *f, struct pf_instance *in, uint32_t rank,
		       const struct pf_variant *v, struct sel_store_config *c,
		       struct sel_plane planes[2], char *dir, size_t dir_size)
{
	struct pf_rank_memory *m = &f->mem[in->index * PF_WORLD + rank];
	struct rec_identity model;

	tu_identities(&model, NULL);
	snprintf(dir, dir_size, "%.400s/rank%u", in->dir, rank);
	for (int p = 0; p < 2; p++)
		planes[p] = (struct sel_plane){ p ? "v" : "k", PF_UNIT, (uintptr_t)m->planes[p] };
	*c = (struct sel_store_config){
		.dir = dir, .page_tokens = PF_PAGE_TOKENS, .page_plane_count = 2,
		.page_planes = planes, .row_plane = { "state", v->row_bytes, (uintptr_t)m->rows },
		.page_count = PF_PAGES, .row_count = PF_ROWS, .device = "host",
		.disk_limit_bytes = v->disk_limit, .durable = false, .records_max = 1000,
		.cluster = &in->cluster, .pool = f->manager.address,
		.pool_secret_file = rank && v->wrong_secret_peer ? f->wrong_secret : f->secret,
	};
	memcpy(c->model_identity, model.bytes, 32);
}

static void peer_main(struct pf_fixture *f, struct pf_instance *in, const struct pf_variant *v)
{
	struct pf_rank_memory *m = &f->mem[in->index * PF_WORLD + 1];
	struct shard_pool_link_counts before, after;
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
	if (sel_peer_start(&c, &peer, m->why, sizeof(m->why)) != 0)
		_exit(2);
	ret = sel_peer_wait(peer);
	shard_pool_link_counts(&after);
	/* this child inherited this process's counts at fork: its own are the difference */
	m->counts = (struct shard_pool_link_counts){
		.arena_claims = after.arena_claims - before.arena_claims,
		.arena_records = after.arena_records - before.arena_records,
		.stream_claims = after.stream_claims - before.stream_claims,
		.stream_windows = after.stream_windows - before.stream_windows,
		.arena_refusals = after.arena_refusals - before.arena_refusals };
	if (sel_peer_stop(peer) != 0)
		_exit(4);
	_exit(ret ? 3 : 0);
}

void pf_instance_open(struct pf_fixture *f, uint32_t i, const struct pf_variant *v)
{
	struct pf_instance *in = &f->inst[i];
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
		.rank = 0, .world_size = PF_WORLD, .coordinator_host = "127.0.0.1",
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
	assert_int_equal(sel_history_create(in->store, f->tokens, PF_TOKENS, &in->h), 0);
}

void pf_instance_close(struct pf_fixture *f, uint32_t i)
{
	struct pf_instance *in = &f->inst[i];
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

uint8_t pf_page_seed_byte(uint32_t rank, uint32_t page, int plane)
{
	return (uint8_t)(page * 8 + (uint32_t)plane + rank * 100);
}

void pf_fill(struct pf_fixture *f, uint32_t i)
{
	for (uint32_t r = 0; r < PF_WORLD; r++) {
		struct pf_rank_memory *m = &f->mem[i * PF_WORLD + r];

		for (uint32_t p = 0; p < PF_PAGES; p++)
			for (int k = 0; k < 2; k++)
				tu_fill(m->planes[k] + p * PF_UNIT, PF_UNIT,
					pf_page_seed_byte(r, p, k));
		tu_fill(m->rows, PF_ROW, 555 + r);
	}
}

void pf_check_restored(struct pf_fixture *f, uint32_t i, const struct sel_hit *hit,
		       uint32_t first, uint32_t slot)
{
	uint8_t expect[PF_ROW];

	for (uint32_t r = 0; r < PF_WORLD; r++) {
		struct pf_rank_memory *m = &f->mem[i * PF_WORLD + r];

		for (uint32_t p = 0; p < hit->page_count; p++)
			for (int k = 0; k < 2; k++) {
				tu_fill(expect, PF_UNIT, pf_page_seed_byte(r, p, k));
				if (memcmp(expect, m->planes[k] + (first + p) * PF_UNIT,
					   PF_UNIT) != 0)
					fail_msg("rank %u page %u plane %d differs", r, p, k);
			}
		tu_fill(expect, PF_ROW, 555 + r);
		if (memcmp(expect, m->rows + slot * PF_ROW, PF_ROW) != 0)
			fail_msg("rank %u row differs", r);
	}
}

void pf_history_renew(struct pf_fixture *f, uint32_t i)
{
	struct pf_instance *in = &f->inst[i];

	sel_history_destroy(in->h);
	in->h = NULL;
	assert_int_equal(sel_history_create(in->store, f->tokens, PF_TOKENS, &in->h), 0);
}

bool pf_lookup_fresh(struct pf_fixture *f, uint32_t i, struct sel_hit *hit)
{
	struct pf_instance *in = &f->inst[i];
	struct sel_event ev;

	pf_history_renew(f, i);
	/* an engine asks again while the answer may still come */
	for (;;) {
		if (sel_lookup(in->store, in->h, 0, hit))
			return true;
		if (!sel_lookup_pending(in->store, in->h))
			return false;
		usleep(100);
		sel_poll(in->store, &ev, 0);
	}
}

void pf_wipe(struct pf_fixture *f, uint32_t i)
{
	for (uint32_t r = 0; r < PF_WORLD; r++)
		memset(&f->mem[i * PF_WORLD + r], 0xee, offsetof(struct pf_rank_memory, why));
}

void pf_fetch(struct pf_fixture *f, uint32_t i, const struct sel_hit *hit, uint32_t first,
	      uint32_t slot, uint64_t waiter)
{
	uint32_t ids[PF_PAGES];
	bool joined;

	SEL_ASSERT(hit->page_count <= PF_PAGES);
	for (uint32_t p = 0; p < hit->page_count; p++)
		ids[p] = first + p;
	assert_int_equal(sel_fetch(f->inst[i].store, hit, ids, slot, waiter, &joined), 0);
}

void pf_fetch_restores(struct pf_fixture *f, uint32_t i, const struct sel_hit *hit,
		       uint32_t first, uint32_t slot, uint64_t waiter, uint32_t ms,
		       const char *what)
{
	struct sel_event ev;

	pf_fetch(f, i, hit, first, slot, waiter);
	ev = pf_next_event(f->inst[i].store, ms);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("%s: %d %s", what, ev.kind, ev.why);
	pf_check_restored(f, i, hit, first, slot);
}

struct sel_event pf_next_event(sel_store *s, uint32_t ms)
{
	struct sel_event ev = { .kind = SEL_EVENT_STORE_FAILED, .error = -ETIMEDOUT };

	for (uint32_t i = 0; i < ms; i++) {
		if (sel_poll(s, &ev, 1) == 1)
			return ev;
		usleep(1000);
	}
	return ev;
}

/* Publishes pub; with retry, polls and publishes again while the outcome is RETRY. */
static enum sel_outcome publish_one(sel_store *s, const struct sel_publication *pub, bool retry)
{
	enum sel_outcome outcome = SEL_RETRY;
	struct sel_event ev;

	if (!retry) {
		assert_int_equal(sel_store_publish(s, pub, &outcome), 0);
		return outcome;
	}
	for (int tries = 0; tries < 10000 && outcome == SEL_RETRY; tries++) {
		int ret = sel_store_publish(s, pub, &outcome);

		if (ret)
			fail_msg("publish of %llu pages: %s",
				 (unsigned long long)pub->checkpoint, sel_strerror(ret));
		if (outcome == SEL_RETRY) {
			sel_poll(s, &ev, 0);
			usleep(1000);
		}
	}
	return outcome;
}

void pf_publish_chain(struct pf_fixture *f, uint32_t i, uint32_t pages_total, bool retry)
{
	struct pf_instance *in = &f->inst[i];
	uint32_t ids[PF_PAGES];

	for (uint32_t p = 0; p < PF_PAGES; p++)
		ids[p] = p;
	for (uint32_t pages = 5; pages <= pages_total; pages += 5) {
		struct sel_publication pub = { .checkpoint = pages, .history = in->h,
					       .consumed = (uint64_t)pages * PF_PAGE_TOKENS,
					       .page_ids = ids, .state_slot = 0 };
		struct sel_event ev;

		assert_int_equal(publish_one(in->store, &pub, retry), SEL_QUEUED);
		ev = pf_next_event(in->store, 10000);
		if (ev.kind != SEL_EVENT_STORED)
			fail_msg("store of %u pages: %d %s", pages, ev.kind, ev.why);
	}
}
