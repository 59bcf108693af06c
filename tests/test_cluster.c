/*
 * Multi-process tests on loopback (docs/DESIGN.md section 7): rank zero in this
 * process through the public store API, every other rank a child process
 * through sel_peer_start. Device planes live in shared memory so this
 * process can check every rank's bytes. Covers store and fetch byte-exact
 * on every rank with 3 and 4 ranks, kill -9 of a peer with a job
 * outstanding, SIGSTOP of a peer, a wrong secret, a rank claimed twice, a
 * different geometry and an unannounced address each refused at startup with
 * the reason on both sides, a peer whose drain outlives its deadline, and a store that fails on one rank (its filesystem
 * full) leaving no file on any rank, a monitor thread polling metrics
 * across close, and a peer's forked child refused its parent's peer. A
 * peer's own failures: its socket or its dup refused, its connect to a port
 * that never answers (given up at the join timeout); a peer socket on
 * descriptor 0 on rank zero; rank zero's open failing after the cluster
 * formed (no BYE: every peer fails).
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "selene/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WORLD_MAX 4
#define UNIT 4096u
#define PAGES 64u
#define ROWS 4u
#define ROW 8192u
#define TOKENS 2000u

struct rank_memory {
	uint8_t planes[2][PAGES * UNIT];
	uint8_t rows[ROWS * ROW];
	char why[256];
};

/* A peer process: joins, runs until rank zero's connection ends. */
enum child_fault {
	FAULT_NONE,
	FAULT_SECRET,   /* one bit of the launch secret flipped */
	FAULT_RANK,     /* claims rank 1 (a rank another process holds) */
	FAULT_GEOMETRY, /* a row plane of half the size */
	FAULT_STALL,    /* every disk write sleeps 8 s */
	FAULT_JOIN_EIO, /* the join's second and third sends fail with EIO */
	FAULT_NO_DISK,  /* a disk limit of 0: no disk store */
	FAULT_DEVICE,   /* storage that cannot open: its startup fails */
	FAULT_DEVICE_NO_MESSAGE, /* the same, started with no err buffer (NULL, 0) */
	FAULT_DEVICE_SMALL_MESSAGE, /* the same, started with an 8-byte err buffer */
	FAULT_CONFIG,   /* rank zero: a configuration open refuses (its device) */
	FAULT_PAGES,    /* a device of a quarter of the pages (joins: the layout is equal) */
	FAULT_FORK,     /* once joined, forks a child that calls wait and stop on it */
	FAULT_SOCKET,   /* every socket it opens to reach rank zero fails (EMFILE) */
	FAULT_DUP,      /* duplicating its joined socket fails (EMFILE) */
};

struct fixture {
	char *base;
	uint32_t world;
	struct rank_memory *mem; /* shared with the children */
	pid_t children[WORLD_MAX];
	uint16_t port;
	int listen_fd;
	bool own_listener; /* rank zero binds coordinator_port (listen_fd -1) */
	struct sel_cluster cluster;
	uint32_t tokens[TOKENS];
	sel_store *store;
	sel_history *h;
	uint32_t job_timeout_ms; /* 0: 10 s */
	uint32_t join_timeout_ms; /* 0: 10 s */
	enum child_fault zero_fault; /* FAULT_NO_DISK or FAULT_DEVICE on rank zero */
	const char *const *addresses; /* every rank's announced addresses, or NULL */
};

/*
 * SELENE_TEST_TIME_SCALE (make check-tsan sets it) stretches the link
 * silence timeout for sanitizer builds, whose threads run many times slower.
 */
static uint32_t time_scale(void)
{
	const char *env = getenv("SELENE_TEST_TIME_SCALE");
	unsigned long scale = env ? strtoul(env, NULL, 10) : 1;

	return scale >= 1 && scale <= 100 ? (uint32_t)scale : 1;
}

static void config_for(struct fixture *f, uint32_t rank, struct sel_store_config *c,
		       struct sel_plane planes[2], char *dir, size_t dir_size)
{
	struct rec_identity model;

	tu_identities(&model, NULL);
	snprintf(dir, dir_size, "%s/rank%u", f->base, rank);
	for (int p = 0; p < 2; p++)
		planes[p] = (struct sel_plane){ p ? "v" : "k", UNIT,
						(uintptr_t)f->mem[rank].planes[p] };
	*c = (struct sel_store_config){
		.dir = dir, .page_tokens = 64, .page_plane_count = 2, .page_planes = planes,
		.row_plane = { "state", ROW, (uintptr_t)f->mem[rank].rows },
		.page_count = PAGES, .row_count = ROWS, .device = "host",
		.disk_limit_bytes = 1ull << 30, .durable = false, .records_max = 1000,
		.cluster = &f->cluster,
	};
	memcpy(c->model_identity, model.bytes, 32);
}

/*
 * Forks a child that calls sel_peer_wait and sel_peer_stop on this
 * process's peer: both must answer -ECHILD at once (the agent thread is not
 * in the child). Returns 0 when they did, else nonzero (a child still
 * running after 10 s, hung on that thread, is killed).
 */
static int forked_child_calls(sel_peer *peer)
{
	pid_t child = fork();
	int status = 0;

	if (child < 0)
		return -1;
	if (child == 0)
		_exit(sel_peer_wait(peer) == -ECHILD && sel_peer_stop(peer) == -ECHILD &&
		      sel_peer_wait(peer) == -ECHILD ? 0 : 1);
	for (int i = 0; i < 10000; i++) {
		if (waitpid(child, &status, WNOHANG) == child)
			return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		usleep(1000);
	}
	kill(child, SIGKILL);
	waitpid(child, &status, 0);
	return -1;
}

static void child_main(struct fixture *f, uint32_t rank, enum child_fault fault,
		       bool full_disk)
{
	struct sel_store_config c;
	struct sel_plane planes[2];
	struct sel_cluster cluster = f->cluster;
	char dir[512];
	sel_peer *peer;
	int ret;

	close(f->listen_fd);
	cluster.rank = fault == FAULT_RANK ? 1 : rank;
	cluster.listen_fd = -1;
	if (fault == FAULT_SECRET)
		cluster.secret[0] ^= 1;
	f->cluster = cluster;
	config_for(f, rank, &c, planes, dir, sizeof(dir));
	if (fault == FAULT_GEOMETRY)
		c.row_plane.unit_bytes = ROW / 2;
	if (fault == FAULT_PAGES)
		c.page_count = PAGES / 4;
	if (fault == FAULT_NO_DISK)
		c.disk_limit_bytes = 0;
	if (fault == FAULT_DEVICE || fault == FAULT_DEVICE_NO_MESSAGE ||
	    fault == FAULT_DEVICE_SMALL_MESSAGE)
		c.dir = "/dev/null/no-such-device"; /* valid, but it cannot be made */
	if (fault == FAULT_STALL && sel_failpoints_configure("disk.write=sleep(8000)") != 0)
		_exit(6);
	if (fault == FAULT_JOIN_EIO &&
	    sel_failpoints_configure("cluster.send=1*off->2*return(EIO)") != 0)
		_exit(6);
	if (fault == FAULT_SOCKET &&
	    sel_failpoints_configure("peer.socket=return(EMFILE)") != 0)
		_exit(6);
	if (fault == FAULT_DUP && sel_failpoints_configure("peer.dup=return(EMFILE)") != 0)
		_exit(6);
	if (full_disk) {
		mkdir(dir, 0755);
		if (mount("selene-test", dir, "tmpfs", 0, "size=64k") != 0)
			_exit(5);
	}
	ret = fault == FAULT_DEVICE_NO_MESSAGE ? sel_peer_start(&c, &peer, NULL, 0) :
	      fault == FAULT_DEVICE_SMALL_MESSAGE ? sel_peer_start(&c, &peer, f->mem[rank].why, 8) :
		      sel_peer_start(&c, &peer, f->mem[rank].why, sizeof(f->mem[rank].why));
	if (ret)
		_exit(2);
	if (fault == FAULT_FORK && forked_child_calls(peer) != 0)
		_exit(7);
	ret = sel_peer_wait(peer);
	/* stop frees only a peer whose jobs drained, and says which it did */
	if (sel_peer_stop(peer) != (fault == FAULT_STALL ? SEL_ESTOPPED : 0))
		_exit(4);
	if (full_disk)
		umount(dir);
	_exit(ret ? 3 : 0);
}

/* Starts world - 1 children; fault applies to rank fault_rank, a full disk to full_rank. */
static void start_with(struct fixture *f, uint32_t world, int fault_rank, enum child_fault fault,
		       int full_rank)
{
	uint16_t port;

	f->world = world;
	f->listen_fd = tu_listen_loopback(WORLD_MAX, &port);
	if (f->own_listener) {
		/* rank zero binds the port itself; the peers retry until it does */
		close(f->listen_fd);
		f->listen_fd = -1;
	}
	f->cluster = (struct sel_cluster){
		.rank = 0, .world_size = world, .coordinator_host = "127.0.0.1",
		.coordinator_port = port, .listen_fd = f->listen_fd,
		.join_timeout_ms = f->join_timeout_ms ? f->join_timeout_ms : 10000,
		.silence_timeout_ms = 1500 * time_scale(),
		.job_timeout_ms = f->job_timeout_ms ? f->job_timeout_ms : 10000,
	};
	memset(f->cluster.secret, 0x6b, sizeof(f->cluster.secret));
	f->cluster.rank_addresses = f->addresses; /* every rank's view */
	for (uint32_t r = 1; r < world; r++) {
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (pid == 0)
			child_main(f, r, (int)r == fault_rank ? fault : FAULT_NONE,
				   (int)r == full_rank);
		f->children[r] = pid;
	}
}

static void start(struct fixture *f, uint32_t world, int wrong_secret_rank, int full_rank)
{
	start_with(f, world, wrong_secret_rank, FAULT_SECRET, full_rank);
}

/* Waits for every child; returns the exit status of rank r (or -signal). */
static int reap(struct fixture *f, uint32_t r)
{
	return tu_reap(&f->children[r]);
}

static int open_rank_zero(struct fixture *f, char *err, size_t err_size)
{
	struct sel_store_config c;
	struct sel_plane planes[2];
	char dir[512];
	int ret;

	config_for(f, 0, &c, planes, dir, sizeof(dir));
	if (f->zero_fault == FAULT_NO_DISK)
		c.disk_limit_bytes = 0;
	if (f->zero_fault == FAULT_DEVICE)
		c.dir = "/dev/null/no-such-device";
	if (f->zero_fault == FAULT_CONFIG)
		c.device = "no-such-device";
	ret = sel_store_open(&c, &f->store, err, err_size);
	if (!ret) {
		/* the join port closed once the cluster formed */
		struct sockaddr_in addr = { .sin_family = AF_INET,
					    .sin_port = htons(f->cluster.coordinator_port) };
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
		assert_int_not_equal(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
		assert_int_equal(errno, ECONNREFUSED);
		close(fd);
	}
	close(f->listen_fd);
	f->listen_fd = -1;
	if (!ret && f->store && c.disk_limit_bytes)
		assert_int_equal(sel_history_create(f->store, f->tokens, TOKENS, &f->h), 0);
	return ret;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->base = tu_make_temp_dir("cluster");
	f->mem = mmap(NULL, WORLD_MAX * sizeof(struct rank_memory), PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(f->mem != MAP_FAILED);
	tu_tokens(f->tokens, TOKENS, 2718);
	f->listen_fd = -1;
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sel_history_destroy(f->h);
	if (f->store)
		sel_store_close(f->store, 5000);
	for (uint32_t r = 1; r < WORLD_MAX; r++) {
		if (f->children[r] > 0) {
			kill(f->children[r], SIGKILL);
			reap(f, r);
		}
	}
	munmap(f->mem, WORLD_MAX * sizeof(struct rank_memory));
	tu_remove_tree(f->base);
	sel_log_set_level(SEL_LOG_INFO);
	free(f);
	return 0;
}

static void fill(struct fixture *f, uint32_t pages)
{
	for (uint32_t r = 0; r < f->world; r++) {
		for (uint32_t i = 0; i < pages; i++)
			for (int p = 0; p < 2; p++)
				tu_fill(f->mem[r].planes[p] + i * UNIT, UNIT, i * 8 + p + r * 1000);
		tu_fill(f->mem[r].rows, ROW, 555 + r);
	}
}

static struct sel_event next_event(struct fixture *f, uint32_t ms)
{
	struct sel_event ev = { .kind = SEL_EVENT_STORE_FAILED, .error = -ETIMEDOUT };

	for (uint32_t i = 0; i < ms; i++) {
		if (sel_poll(f->store, &ev, 1) == 1)
			return ev;
		usleep(1000);
	}
	return ev;
}

/*
 * Publishes from page ids first_id on; returns the outcome, or the error
 * when the call failed.
 */
static int publish_raw_ids(struct fixture *f, uint64_t checkpoint, uint64_t consumed,
			   uint32_t first_id)
{
	uint32_t ids[PAGES];
	struct sel_publication pub = { .checkpoint = checkpoint, .history = f->h,
				       .consumed = consumed, .page_ids = ids, .state_slot = 0 };
	enum sel_outcome outcome;
	int ret;

	for (uint32_t i = 0; i < PAGES; i++)
		ids[i] = (first_id + i) % PAGES;
	ret = sel_store_publish(f->store, &pub, &outcome);
	return ret ? ret : (int)outcome;
}

static int publish_raw(struct fixture *f, uint64_t checkpoint, uint64_t consumed)
{
	return publish_raw_ids(f, checkpoint, consumed, 0);
}

static enum sel_outcome publish(struct fixture *f, uint64_t checkpoint, uint64_t consumed)
{
	int ret = publish_raw(f, checkpoint, consumed);

	assert_true(ret >= 0);
	return (enum sel_outcome)ret;
}

static void store_and_fetch(struct fixture *f)
{
	struct sel_event ev;
	struct sel_hit hit;
	uint32_t ids[PAGES];
	bool joined;
	char err[512];

	if (open_rank_zero(f, err, sizeof(err)) != 0)
		fail_msg("rank zero: %s", err);
	fill(f, 1000 / 64);
	assert_int_equal(publish(f, 1, 1000), SEL_QUEUED);
	ev = next_event(f, 10000);
	if (ev.kind != SEL_EVENT_STORED)
		fail_msg("store: %d %s", ev.kind, ev.why);
	for (uint32_t r = 0; r < f->world; r++) {
		memset(f->mem[r].planes, 0xee, sizeof(f->mem[r].planes));
		memset(f->mem[r].rows, 0xee, sizeof(f->mem[r].rows));
	}
	assert_true(sel_lookup(f->store, f->h, 0, &hit));
	for (uint32_t i = 0; i < hit.page_count; i++)
		ids[i] = 30 + i;
	assert_int_equal(sel_fetch(f->store, &hit, ids, 2, 42, &joined), 0);
	ev = next_event(f, 10000);
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("fetch: %d %s", ev.kind, ev.why);
	for (uint32_t r = 0; r < f->world; r++) {
		uint8_t expect[UNIT > ROW ? UNIT : ROW];

		for (uint32_t i = 0; i < hit.page_count; i++)
			for (int p = 0; p < 2; p++) {
				tu_fill(expect, UNIT, i * 8 + p + r * 1000);
				if (memcmp(expect, f->mem[r].planes[p] + (30 + i) * UNIT, UNIT) != 0)
					fail_msg("rank %u page %u plane %d differs", r, i, p);
			}
		tu_fill(expect, ROW, 555 + r);
		assert_memory_equal(f->mem[r].rows + 2 * ROW, expect, ROW);
	}
	/* every peer's link in the metrics: up, frames both ways, queue drained */
	{
		static char text[16384];
		char want[128];

		assert_true(sel_store_metrics(f->store, text, sizeof(text)) > 0);
		for (uint32_t r = 1; r < f->world; r++) {
			snprintf(want, sizeof(want), "selene_link_up{rank=\"%u\"} 1\n", r);
			assert_non_null(strstr(text, want));
			snprintf(want, sizeof(want), "selene_link_queue_full_total{rank=\"%u\"} 0\n", r);
			assert_non_null(strstr(text, want));
			snprintf(want, sizeof(want),
				 "selene_link_frames_total{rank=\"%u\",direction=\"received\"} ", r);
			assert_non_null(strstr(text, want));
			assert_true(atoi(strstr(text, want) + strlen(want)) >= 2);
		}
		snprintf(want, sizeof(want), "selene_link_up{rank=\"%u\"}", f->world);
		assert_null(strstr(text, want));
		/* link families grouped, not interleaved by peer */
		assert_true(sel_store_metrics(f->store, text, SEL_METRICS_BYTES(f->world)) > 0);
		tu_check_metrics(text, "selene_link_up selene_link_queued_bytes "
				 "selene_link_frames selene_link_queue_full");
	}
	/* closing rank zero ends every peer cleanly */
	sel_history_destroy(f->h);
	f->h = NULL;
	assert_int_equal(sel_store_close(f->store, 10000), 0);
	f->store = NULL;
	for (uint32_t r = 1; r < f->world; r++)
		assert_int_equal(reap(f, r), 0);
}

/* Three ranks: store and fetch byte-exact on every rank. */
static void test_cluster_three_ranks(void **state)
{
	struct fixture *f = *state;

	start(f, 3, -1, -1);
	store_and_fetch(f);
}

/*
 * A peer's forked child calls sel_peer_wait and sel_peer_stop on the
 * parent's peer: -ECHILD, touching nothing; the peer then serves a store
 * and fetch and ends cleanly (its exit status 0 says all of it).
 */
static void test_cluster_peer_calls_from_forked_child(void **state)
{
	struct fixture *f = *state;

	start_with(f, 2, 1, FAULT_FORK, -1);
	store_and_fetch(f);
}

/* Four ranks: the same. */
static void test_cluster_four_ranks(void **state)
{
	struct fixture *f = *state;

	start(f, 4, -1, -1);
	store_and_fetch(f);
}

/* kill -9 of a peer with a job outstanding stops the transport. */
static void test_cluster_kill_peer(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;
	char err[512];
	int ret;

	start(f, 3, -1, -1);
	assert_int_equal(open_rank_zero(f, err, sizeof(err)), 0);
	fill(f, 1000 / 64);
	kill(f->children[2], SIGKILL);
	/* The transport may already have seen the link close: then it is stopped. */
	ret = publish_raw(f, 1, 1000);
	assert_true(ret >= 0 || ret == SEL_ESTOPPED);
	ev = next_event(f, 10000);
	assert_int_equal(ev.kind, SEL_EVENT_FATAL);
	assert_non_null(strstr(ev.why, "rank 2"));
	assert_int_equal(publish_raw(f, 2, 1500), SEL_ESTOPPED);
}

/*
 * SIGSTOP of a peer: rank zero's calls keep returning at once while the
 * stalled link's queue fills; the silent link then stops the transport.
 */
static void test_cluster_stopped_peer(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev = { 0 };
	char err[512];
	uint32_t calls = 0;
	bool fatal = false;

	start(f, 3, -1, -1);
	assert_int_equal(open_rank_zero(f, err, sizeof(err)), 0);
	fill(f, 1000 / 64);
	kill(f->children[1], SIGSTOP);
	for (uint32_t i = 0; i < 5000 * time_scale() && !fatal; i++) {
		int ret = publish_raw(f, 100 + i, 64 + i % 900);

		calls++;
		assert_true(ret == SEL_QUEUED || ret == SEL_RETRY || ret == SEL_PRESENT ||
			    ret == SEL_ESTOPPED);
		while (sel_poll(f->store, &ev, 1) == 1)
			fatal = fatal || ev.kind == SEL_EVENT_FATAL;
		usleep(1000);
	}
	assert_true(fatal);
	assert_non_null(strstr(ev.why, "rank 1"));
	assert_int_equal(sel_store_close(f->store, 1000), SEL_ESTOPPED);
	f->store = NULL;
	/* resumed, it finds its link closed without BYE: never a success */
	kill(f->children[1], SIGCONT);
	assert_int_equal(reap(f, 1), 3);
	assert_int_equal(reap(f, 2), 3);
}

/*
 * A wrong secret is refused at startup, with the reason on both sides; to
 * rank zero that connection is a stranger's, so it waits for rank 2 until
 * its join timeout, and then names it and the refusal.
 */
static void test_cluster_wrong_secret(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";

	f->join_timeout_ms = 2000;
	start(f, 3, 2, -1);
	assert_int_equal(open_rank_zero(f, err, sizeof(err)), -ETIMEDOUT);
	assert_non_null(strstr(err, "rank 2 is missing"));
	assert_non_null(strstr(err, "launch secret"));
	assert_int_equal(reap(f, 2), 2); /* its start failed */
	assert_non_null(strstr(f->mem[2].why, "launch secret"));
	assert_true(reap(f, 1) != 0);    /* the others end with rank zero */
}

/* A rank claimed twice is refused: rank zero and the refused process say so. */
static void test_cluster_wrong_rank(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";
	int refused;

	start_with(f, 3, 2, FAULT_RANK, -1);
	assert_int_equal(open_rank_zero(f, err, sizeof(err)), SEL_EMISMATCH);
	assert_non_null(strstr(err, "rank 1 joined twice"));
	/* whichever of the two claimants came second was refused; both end */
	assert_true(reap(f, 1) != 0);
	assert_true(reap(f, 2) != 0);
	refused = strstr(f->mem[1].why, "already joined") ? 1 : 2;
	assert_non_null(strstr(f->mem[refused].why, "that rank already joined"));
}

/* A rank with a different cache geometry is refused, the reason on both sides. */
static void test_cluster_wrong_geometry(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";

	start_with(f, 3, 2, FAULT_GEOMETRY, -1);
	assert_int_equal(open_rank_zero(f, err, sizeof(err)), SEL_EMISMATCH);
	assert_non_null(strstr(err, "rank 2 has a different cache geometry"));
	assert_int_equal(reap(f, 2), 2);
	assert_non_null(strstr(f->mem[2].why, "different cache geometry"));
	assert_true(reap(f, 1) != 0);
}

/*
 * A rank configured with fewer pages than rank zero joins (the layout is
 * the same), and a store of pages past its count fails saying so, naming
 * the rank and the setting, rather than with a bare "Invalid argument".
 */
static void test_cluster_fewer_pages_on_a_rank(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;
	char err[512] = "";

	start_with(f, 3, 2, FAULT_PAGES, -1);
	if (open_rank_zero(f, err, sizeof(err)) != 0)
		fail_msg("rank zero: %s", err);
	fill(f, 20);
	assert_int_equal(publish(f, 1, 64 * 20), SEL_QUEUED);
	ev = next_event(f, 10000);
	assert_int_equal(ev.kind, SEL_EVENT_STORE_FAILED);
	if (!strstr(ev.why, "rank 2: a job of 20 pages is more than this rank's 16") ||
	    !strstr(ev.why, "page_count must be the same"))
		fail_msg("why: %s", ev.why);
	/* 16 pages fit its count, but the ids past 15 do not */
	assert_int_equal(publish_raw_ids(f, 2, 64 * 16, 40), SEL_QUEUED);
	ev = next_event(f, 10000);
	assert_int_equal(ev.kind, SEL_EVENT_STORE_FAILED);
	if (!strstr(ev.why, "rank 2: page id 40 is past this rank's 16 pages"))
		fail_msg("why: %s", ev.why);
}

/* A rank connecting from an address it did not announce is refused. */
static void test_cluster_wrong_address(void **state)
{
	static const char *const addresses[] = { "127.0.0.1", "127.0.0.1", "127.0.0.2" };
	struct fixture *f = *state;
	char err[512] = "";

	start(f, 3, -1, -1);
	f->cluster.rank_addresses = addresses; /* rank zero's view; rank 2 uses 127.0.0.1 */
	assert_int_equal(open_rank_zero(f, err, sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "rank 2 connected from an address it did not announce"));
	assert_int_equal(reap(f, 2), 2);
	assert_non_null(strstr(f->mem[2].why, "did not announce"));
	assert_true(reap(f, 1) != 0);
}

/*
 * Rank zero's own listener (listen_fd -1) is dual stack: an IPv4 peer
 * arrives as ::ffff:127.0.0.1 and still matches its announced 127.0.0.1.
 */
static void test_cluster_announced_address_own_listener(void **state)
{
	static const char *const addresses[] = { "127.0.0.1", "127.0.0.1", "127.0.0.1" };
	struct fixture *f = *state;

	f->addresses = addresses;
	f->own_listener = true;
	start(f, 3, -1, -1);
	store_and_fetch(f);
}

/*
 * A peer binds its connection to the address it announced: rank 2's is
 * 127.0.0.2, where the route's default source would be 127.0.0.1 (and be
 * refused, as above), so store and fetch work only if it bound.
 */
static void test_cluster_peer_binds_announced_address(void **state)
{
	static const char *const addresses[] = { "127.0.0.1", "127.0.0.1", "127.0.0.2" };
	struct fixture *f = *state;

	f->addresses = addresses;
	start(f, 3, -1, -1);
	store_and_fetch(f);
}

/*
 * A peer whose jobs outlive its drain after rank zero went away exits
 * non-zero at its deadline, without waiting for the copy (its buffers stay).
 */
static void test_cluster_peer_drain_unconfirmed(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;
	char err[512];
	uint64_t t0;

	f->job_timeout_ms = 1000;
	start_with(f, 3, 1, FAULT_STALL, -1);
	if (open_rank_zero(f, err, sizeof(err)) != 0)
		fail_msg("rank zero: %s", err);
	fill(f, 1000 / 64);
	assert_int_equal(publish(f, 1, 1000), SEL_QUEUED);
	ev = next_event(f, 10000);
	assert_int_equal(ev.kind, SEL_EVENT_FATAL);
	assert_int_equal(sel_store_close(f->store, 5000), SEL_ESTOPPED);
	f->store = NULL;
	t0 = sel_monotonic_ns();
	assert_int_equal(reap(f, 1), 3);
	/* the stalled write sleeps 8 s; the drain deadline is 1 s */
	assert_true(sel_monotonic_ns() - t0 < 6000000000ull);
	/* the transport stopped: rank zero closed without BYE, a failure for rank 2 too */
	assert_int_equal(reap(f, 2), 3);
}

/* A store that fails on one rank (its filesystem full) leaves no file anywhere. */
static void test_cluster_store_fails_on_one_rank(void **state)
{
	struct fixture *f = *state;
	struct sel_event ev;
	char err[512], path[512];

	start(f, 3, -1, 2);
	if (open_rank_zero(f, err, sizeof(err)) != 0)
		fail_msg("rank zero: %s (rank 2: %s)", err, f->mem[2].why);
	fill(f, 1000 / 64);
	assert_int_equal(publish(f, 1, 1000), SEL_QUEUED);
	ev = next_event(f, 10000);
	assert_int_equal(ev.kind, SEL_EVENT_STORE_FAILED);
	assert_int_equal(ev.error, -ENOSPC);
	assert_non_null(strstr(ev.why, "rank 2"));
	for (uint32_t r = 0; r < 3; r++) {
		char cmd[600];

		snprintf(path, sizeof(path), "%s/rank%u", f->base, r);
		snprintf(cmd, sizeof(cmd), "test -z \"$(find %s -name '*.ckpt*')\"", path);
		if (system(cmd) != 0)
			fail_msg("rank %u still holds a record file", r);
	}
}

struct monitor {
	sel_store *store;
	bool stop;
	uint32_t answered, shut_down, other;
};

/* A monitor thread: metrics and stats as fast as it can, until told to stop. */
static void *monitor_main(void *arg)
{
	struct monitor *m = arg;
	static char buf[1 << 16];
	struct sel_stats st;

	while (!__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE)) {
		int n = sel_store_metrics(m->store, buf, sizeof(buf));
		int r = sel_store_stats(m->store, &st);

		if (n > 0 && r == 0)
			__atomic_fetch_add(&m->answered, 1, __ATOMIC_RELAXED);
		else if (n == -ESHUTDOWN && r == -ESHUTDOWN)
			__atomic_fetch_add(&m->shut_down, 1, __ATOMIC_RELAXED);
		else if (n != -ESHUTDOWN && r != -ESHUTDOWN)
			m->other++;
	}
	return NULL;
}

/*
 * A monitor thread polling metrics and stats across sel_store_close on
 * three ranks: the calls before close answer, those during and after it
 * answer -ESHUTDOWN, and nothing reads freed memory (ASan, TSan).
 */
static void test_cluster_metrics_during_close(void **state)
{
	struct fixture *f = *state;
	struct monitor m = { 0 };
	char err[256];
	pthread_t thread;

	start(f, 3, -1, -1);
	if (open_rank_zero(f, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
	m.store = f->store;
	assert_int_equal(pthread_create(&thread, NULL, monitor_main, &m), 0);
	while (__atomic_load_n(&m.answered, __ATOMIC_RELAXED) < 50)
		usleep(1000);
	sel_history_destroy(f->h);
	f->h = NULL;
	assert_int_equal(sel_store_close(f->store, 5000), 0);
	f->store = NULL;
	while (__atomic_load_n(&m.shut_down, __ATOMIC_RELAXED) < 50)
		usleep(1000);
	__atomic_store_n(&m.stop, true, __ATOMIC_RELEASE);
	pthread_join(thread, NULL);
	assert_int_equal(m.other, 0);
	for (uint32_t r = 1; r < 3; r++)
		assert_int_equal(reap(f, r), 0);
}

/*
 * A rank with a disk limit of 0 (no disk store) where
 * rank zero has one is refused at the join, the reason on both sides.
 */
static void test_cluster_peer_without_disk_store(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";

	start_with(f, 3, 2, FAULT_NO_DISK, -1);
	assert_int_equal(open_rank_zero(f, err, sizeof(err)), SEL_EMISMATCH);
	assert_non_null(strstr(err, "rank 2 has no disk store"));
	assert_int_equal(reap(f, 2), 2);
	assert_non_null(strstr(f->mem[2].why, "rank 2 has no disk store"));
	assert_non_null(strstr(f->mem[2].why, "every rank has a disk store, or none"));
	assert_true(reap(f, 1) != 0);
}

/* The other way round: rank zero without a disk store, the peers with one. */
static void test_cluster_rank_zero_without_disk_store(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";
	int refused;

	f->zero_fault = FAULT_NO_DISK;
	start(f, 3, -1, -1);
	assert_int_equal(open_rank_zero(f, err, sizeof(err)), SEL_EMISMATCH);
	assert_non_null(strstr(err, "has a disk store and rank zero has none"));
	assert_true(reap(f, 1) != 0);
	assert_true(reap(f, 2) != 0);
	refused = strstr(f->mem[1].why, "rank zero has none") ? 1 : 2;
	assert_non_null(strstr(f->mem[refused].why, "has a disk store and rank zero has none"));
}

/* No rank with a disk store: the cluster forms, and ends cleanly. */
static void test_cluster_no_disk_store_anywhere(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";

	f->zero_fault = FAULT_NO_DISK;
	start_with(f, 2, 1, FAULT_NO_DISK, -1);
	if (open_rank_zero(f, err, sizeof(err)) != 0)
		fail_msg("rank zero: %s (rank 1: %s)", err, f->mem[1].why);
	assert_int_equal(sel_store_close(f->store, 1000), 0);
	f->store = NULL;
	assert_int_equal(reap(f, 1), 0);
}

/*
 * A send that fails before WELCOME (found by make torture: the peer gave up
 * unproven, and rank zero waited out its join timeout): the peer joins
 * again on a new connection, and the cluster forms.
 */
static void test_cluster_peer_joins_again_after_send_error(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";

	f->join_timeout_ms = 60000;
	start_with(f, 3, 2, FAULT_JOIN_EIO, -1);
	if (open_rank_zero(f, err, sizeof(err)) != 0)
		fail_msg("rank zero: %s (rank 2: %s)", err, f->mem[2].why);
	assert_int_equal(sel_store_close(f->store, 1000), 0);
	f->store = NULL;
	assert_int_equal(reap(f, 1), 0);
	assert_int_equal(reap(f, 2), 0);
}

/*
 * Every rank of a start at t0 with a 60 s join timeout stopped within 20 s:
 * they were told, not left to time out.
 */
static void assert_stopped_before_join_timeout(uint64_t t0)
{
	uint64_t took = sel_monotonic_ns() - t0;

	print_message("every rank stopped %llu ms after the start (join timeout 60 s)\n",
		      (unsigned long long)(took / 1000000));
	assert_true(took < 20000000000ull);
}

/*
 * A peer whose startup fails (its device) tells rank zero,
 * which fails the formation with that reason and tells the other peers:
 * every rank stops long before the join timeout (60 s here).
 */
static void test_cluster_peer_startup_failure_stops_everyone(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";
	uint64_t t0 = sel_monotonic_ns();

	f->join_timeout_ms = 60000;
	start_with(f, 3, 2, FAULT_DEVICE, -1);
	if (open_rank_zero(f, err, sizeof(err)) != SEL_ESTOPPED)
		fail_msg("rank zero: %s", err);
	assert_non_null(strstr(err, "rank 2 failed at startup"));
	assert_non_null(strstr(err, "no-such-device"));
	assert_int_equal(reap(f, 2), 2);
	assert_int_equal(reap(f, 1), 2);
	assert_non_null(strstr(f->mem[1].why, "rank 2 failed at startup"));
	assert_stopped_before_join_timeout(t0);
}

/*
 * The same from a peer started without an err buffer (NULL, 0): rank zero
 * still hears the reason; before, the peer sent what its NULL err held.
 */
static void test_cluster_peer_startup_failure_without_err(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";

	start_with(f, 3, 2, FAULT_DEVICE_NO_MESSAGE, -1);
	if (open_rank_zero(f, err, sizeof(err)) != SEL_ESTOPPED)
		fail_msg("rank zero: %s", err);
	if (!strstr(err, "rank 2 failed at startup") || !strstr(err, "no-such-device"))
		fail_msg("rank zero: %s", err);
	assert_int_equal(reap(f, 2), 2);
	assert_int_equal(reap(f, 1), 2);
}

/*
 * ...and with an err buffer of 8 bytes: the peer's caller gets 7, rank zero
 * all of the reason (before, only what fitted the caller's buffer).
 */
static void test_cluster_peer_startup_failure_with_small_err(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";

	start_with(f, 3, 2, FAULT_DEVICE_SMALL_MESSAGE, -1);
	if (open_rank_zero(f, err, sizeof(err)) != SEL_ESTOPPED)
		fail_msg("rank zero: %s", err);
	if (!strstr(err, "rank 2 failed at startup") || !strstr(err, "no-such-device"))
		fail_msg("rank zero: %s", err);
	assert_int_equal(reap(f, 2), 2);
	assert_int_equal(strlen(f->mem[2].why), 7);
	assert_int_equal(reap(f, 1), 2);
}

/* Rank zero's own startup failure reaches every peer, as fast. */
static void test_cluster_rank_zero_startup_failure_stops_everyone(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";
	uint64_t t0 = sel_monotonic_ns();

	f->join_timeout_ms = 60000;
	f->zero_fault = FAULT_DEVICE;
	start(f, 3, -1, -1);
	assert_true(open_rank_zero(f, err, sizeof(err)) != 0);
	assert_non_null(strstr(err, "no-such-device"));
	for (uint32_t r = 1; r < 3; r++) {
		assert_int_equal(reap(f, r), 2);
		assert_non_null(strstr(f->mem[r].why, "rank zero stopped"));
		assert_non_null(strstr(f->mem[r].why, "no-such-device"));
	}
	assert_stopped_before_join_timeout(t0);
}

/* A configuration rank zero refuses at open (a device it does not know). */
static void test_cluster_rank_zero_bad_config_stops_everyone(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";
	uint64_t t0 = sel_monotonic_ns();

	f->join_timeout_ms = 60000;
	f->zero_fault = FAULT_CONFIG;
	start(f, 3, -1, -1);
	assert_int_equal(open_rank_zero(f, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "no-such-device"));
	for (uint32_t r = 1; r < 3; r++) {
		assert_int_equal(reap(f, r), 2);
		assert_non_null(strstr(f->mem[r].why, "no-such-device"));
	}
	assert_stopped_before_join_timeout(t0);
}

/*
 * Rank zero's open given an err size but no buffer (NULL) is refused, and
 * the peers are still told why at once; before, they waited out their
 * join timeout.
 */
static void test_cluster_rank_zero_null_err_stops_everyone(void **state)
{
	struct fixture *f = *state;
	uint64_t t0 = sel_monotonic_ns();

	f->join_timeout_ms = 60000;
	start(f, 3, -1, -1);
	assert_int_equal(open_rank_zero(f, NULL, 64), -EINVAL);
	for (uint32_t r = 1; r < 3; r++) {
		assert_int_equal(reap(f, r), 2);
		if (!strstr(f->mem[r].why, "rank zero stopped") ||
		    !strstr(f->mem[r].why, "err is NULL"))
			fail_msg("rank %u: %s", r, f->mem[r].why);
	}
	assert_stopped_before_join_timeout(t0);
}

/*
 * A caller's err too small for the reason (8 bytes) gets its share; the
 * peers are told all of it (before, only what fitted the caller's buffer).
 */
static void test_cluster_rank_zero_small_err_tells_peers_all(void **state)
{
	struct fixture *f = *state;
	char err[8] = "";

	f->join_timeout_ms = 60000;
	f->zero_fault = FAULT_CONFIG;
	start(f, 3, -1, -1);
	assert_int_equal(open_rank_zero(f, err, sizeof(err)), -EINVAL);
	assert_int_equal(strlen(err), sizeof(err) - 1);
	for (uint32_t r = 1; r < 3; r++) {
		assert_int_equal(reap(f, r), 2);
		if (!strstr(f->mem[r].why, "no-such-device"))
			fail_msg("rank %u: %s", r, f->mem[r].why);
	}
}

/*
 * A peer whose socket() fails (out of descriptors) fails its start with the
 * reason; it dereferenced the absent address table (NULL) and crashed.
 */
static void test_cluster_peer_socket_fails(void **state)
{
	struct fixture *f = *state;

	start_with(f, 2, 1, FAULT_SOCKET, -1);
	assert_int_equal(reap(f, 1), 2);
	assert_non_null(strstr(f->mem[1].why, "cannot open a socket to reach rank zero"));
	assert_non_null(strstr(f->mem[1].why, strerror(EMFILE)));
}

/*
 * Rank zero's open fails after the cluster formed (a link's thread refused,
 * the first link's or the last's): every peer sees its link end without
 * BYE and fails. Before, the peers whose links had started, or not yet,
 * were told BYE and reported a clean end of a store that never opened.
 */
static void test_cluster_open_failing_after_forming_fails_every_peer(void **state)
{
	struct fixture *f = *state;
	char err[512] = "", config[128];
	uint64_t threads;

	/* how many threads an open starts; the links' two each come last */
	start(f, 3, -1, -1);
	assert_int_equal(sel_failpoints_configure("thread.start=off"), 0);
	if (open_rank_zero(f, err, sizeof(err)) != 0)
		fail_msg("rank zero: %s", err);
	threads = sel_failpoint_evaluations(SEL_FP_THREAD_START);
	assert_int_equal(sel_failpoints_configure(NULL), 0);
	sel_history_destroy(f->h);
	f->h = NULL;
	assert_int_equal(sel_store_close(f->store, 10000), 0);
	f->store = NULL;
	assert_int_equal(reap(f, 1), 0);
	assert_int_equal(reap(f, 2), 0);
	assert_true(threads > 4);
	for (uint64_t passed = threads - 4; passed < threads; passed += 2) {
		start(f, 3, -1, -1); /* the children fork without the failpoint */
		snprintf(config, sizeof(config), "thread.start=%llu*off->1*return(EAGAIN)",
			 (unsigned long long)passed);
		assert_int_equal(sel_failpoints_configure(config), 0);
		assert_int_equal(open_rank_zero(f, err, sizeof(err)), -EAGAIN);
		assert_int_equal(sel_failpoints_configure(NULL), 0);
		assert_non_null(strstr(err, "starting the links"));
		/* 3: sel_peer_wait failed ("rank zero closed the link without BYE") */
		for (uint32_t r = 1; r < 3; r++)
			assert_int_equal(reap(f, r), 3);
	}
}

/*
 * A joined peer that cannot duplicate its socket (out of descriptors) fails
 * its start with the reason and closes the link, which stops rank zero's
 * transport. Before, it ran on with no descriptor to end the link by, and
 * served until rank zero closed.
 */
static void test_cluster_peer_dup_fails(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";

	start_with(f, 2, 1, FAULT_DUP, -1);
	/* the peer confirmed the agreement before its dup: the cluster may form */
	if (open_rank_zero(f, err, sizeof(err)) == 0) {
		sel_history_destroy(f->h);
		f->h = NULL;
		sel_store_close(f->store, 1000);
		f->store = NULL;
	}
	assert_int_equal(reap(f, 1), 2);
	if (!strstr(f->mem[1].why, "cannot duplicate the link's socket to rank zero") ||
	    !strstr(f->mem[1].why, strerror(EMFILE)))
		fail_msg("rank 1: %s", f->mem[1].why);
}

/*
 * The peer's socket on rank zero lands on descriptor 0 (the host closed
 * stdin): the close still ends its link with BYE and the peer ends
 * cleanly. Before, descriptor 0 counted as no socket: no BYE, no close.
 */
static void test_cluster_peer_socket_on_descriptor_zero(void **state)
{
	struct fixture *f = *state;
	char err[512] = "";
	int saved_stdin = fcntl(0, F_DUPFD_CLOEXEC, 3), type, opened, closed = -1;
	socklen_t len = sizeof(type);
	bool zero_is_socket = false;

	assert_true(saved_stdin >= 0);
	f->zero_fault = FAULT_NO_DISK; /* no fan-out: sel_store_close says BYE itself */
	start_with(f, 2, 1, FAULT_NO_DISK, -1);
	close(0);
	opened = open_rank_zero(f, err, sizeof(err));
	if (opened == 0) {
		/* the peer's socket took descriptor 0 */
		zero_is_socket = getsockopt(0, SOL_SOCKET, SO_TYPE, &type, &len) == 0;
		closed = sel_store_close(f->store, 1000);
		f->store = NULL;
	}
	/* stdin back before any assertion; it closes a socket left on 0 */
	assert_int_equal(dup2(saved_stdin, 0), 0);
	close(saved_stdin);
	if (opened != 0)
		fail_msg("rank zero: %s (rank 1: %s)", err, f->mem[1].why);
	assert_true(zero_is_socket);
	assert_int_equal(closed, 0);
	assert_int_equal(reap(f, 1), 0);
}

/*
 * Rank zero's port answers no handshake (its accept queue is full, its
 * process stalled): a peer gives up at its join timeout, 1 s here, saying
 * it cannot reach rank zero. A blocking connect() waited out the kernel's
 * SYN retries instead, about 130 s.
 */
static void test_cluster_peer_connect_gives_up_at_join_timeout(void **state)
{
	struct fixture *f = *state;
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t len = sizeof(addr);
	int fillers[4];
	struct sel_store_config c;
	struct sel_plane planes[2];
	char dir[512], err[512] = "";
	sel_peer *peer = NULL;
	uint64_t t0, took_ms;
	int ret;

	/* a listener that never accepts, its queue of one filled */
	f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	assert_int_equal(bind(f->listen_fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(f->listen_fd, 0), 0);
	assert_int_equal(getsockname(f->listen_fd, (struct sockaddr *)&addr, &len), 0);
	for (size_t i = 0; i < SEL_ARRAY_SIZE(fillers); i++) {
		fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		assert_true(fillers[i] >= 0);
		connect(fillers[i], (struct sockaddr *)&addr, sizeof(addr)); /* EINPROGRESS */
	}
	usleep(100000);
	f->cluster = (struct sel_cluster){
		.rank = 1, .world_size = 2, .coordinator_host = "127.0.0.1",
		.coordinator_port = ntohs(addr.sin_port), .listen_fd = -1,
		.join_timeout_ms = 1000, .silence_timeout_ms = 1500, .job_timeout_ms = 10000,
	};
	memset(f->cluster.secret, 0x6b, sizeof(f->cluster.secret));
	config_for(f, 1, &c, planes, dir, sizeof(dir));
	c.disk_limit_bytes = 0; /* nothing to open: the join alone */
	t0 = sel_monotonic_ns();
	ret = sel_peer_start(&c, &peer, err, sizeof(err));
	took_ms = (sel_monotonic_ns() - t0) / 1000000;
	for (size_t i = 0; i < SEL_ARRAY_SIZE(fillers); i++)
		close(fillers[i]);
	close(f->listen_fd);
	f->listen_fd = -1;
	print_message("the peer gave up after %llu ms (join timeout 1000 ms): %s\n",
		      (unsigned long long)took_ms, err);
	assert_int_not_equal(ret, 0);
	assert_null(peer);
	assert_non_null(strstr(err, "cannot reach rank zero"));
	assert_true(took_ms < 10000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_cluster_three_ranks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_four_ranks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_calls_from_forked_child, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cluster_kill_peer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_stopped_peer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_wrong_secret, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_wrong_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_wrong_geometry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_fewer_pages_on_a_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_wrong_address, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_announced_address_own_listener, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_binds_announced_address, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_drain_unconfirmed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_store_fails_on_one_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_metrics_during_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_without_disk_store, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_rank_zero_without_disk_store, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cluster_no_disk_store_anywhere, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_joins_again_after_send_error,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_startup_failure_stops_everyone,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_startup_failure_with_small_err,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_startup_failure_without_err,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_rank_zero_startup_failure_stops_everyone,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_rank_zero_bad_config_stops_everyone,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_rank_zero_null_err_stops_everyone,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_rank_zero_small_err_tells_peers_all,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_socket_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_dup_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_socket_on_descriptor_zero, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cluster_peer_connect_gives_up_at_join_timeout,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_cluster_open_failing_after_forming_fails_every_peer, setup, teardown),
	};

	return cmocka_run_group_tests_name("cluster", tests, NULL, NULL);
}

