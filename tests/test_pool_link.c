/*
 * A rank's pool link (shard/pool_link.h) on the manager's host, with a
 * manager in this process: a device that refuses to register the arena
 * makes claims stream (byte-exact) with one warning for the link's life;
 * the host device claims from the arena, reading no stream window; an
 * arena over the memory budget is never registered and claims stream.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "pool/manager.h"
#include "record/dir.h"
#include "record/file.h"
#include "record/format.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/pool_link.h"
#include "shard/slab.h"
#include "shard/pool_share.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define UNIT 4096u
#define ROW 6000u
#define PLANES 2u
#define PAGES 8u

struct fixture {
	char *base;
	struct pool_manager *manager;
	pthread_t thread;
	struct shard_pool_plan plan;
	struct shard_pool_link *link;
	struct shard_pool_conn conn;
	struct rec_key key;
	char record_path[600];
	uint64_t record_bytes;
	uint8_t *pages;          /* the record's pages, stored page order */
	uint8_t *row;
	uint8_t *device_planes[PLANES];
	uint8_t *device_rows;
	struct shard_planes bases;
	struct shard_pool_record chain[1];
	uint32_t page_ids[PAGES];
	struct shard_device *device; /* the test's; closed after the link, which registered with it */
	pid_t child;                 /* a manager in a child process (setup_child), or 0 */
	int child_stop;              /* written to stop the child's manager */
	uint16_t port;               /* the manager's */
	int warnings;
	char last[512];
};

static void *manager_thread(void *arg)
{
	pool_manager_run(arg);
	return NULL;
}

static void catch_warning(enum sel_log_level level, const char *message, void *user)
{
	struct fixture *f = user;

	if (level == SEL_LOG_WARN && strstr(message, "pool:")) {
		f->warnings++;
		snprintf(f->last, sizeof(f->last), "%s", message);
	}
}

/* Writes the record (PAGES pages and the row) as a record file under the base. */
static void write_record(struct fixture *f)
{
	const struct rec_geometry *g = &f->plan.geometry;
	struct rec_dir_options o = { .base_path = f->base, .namespace_id = &f->plan.namespace_id,
				     .geometry = g, .no_direct = true };
	struct rec_digest bucket = { { 0 } };
	char why[256], name[REC_FILE_NAME_BYTES];
	struct rec_dir *dir;
	struct rec_header h;
	struct rec_writer w;
	struct stat st;

	f->key.consumed = (uint64_t)PAGES * g->page_tokens;
	f->key.digest.bytes[0] = 0x51;
	f->pages = tu_alloc((size_t)g->page_record_bytes * PAGES);
	f->row = tu_alloc(g->row_record_bytes);
	tu_fill(f->pages, (size_t)g->page_record_bytes * PAGES, 77);
	tu_fill(f->row, ROW, 78);
	if (rec_dir_open(&o, &dir, why, sizeof(why)) != 0)
		fail_msg("dir: %s", why);
	assert_int_equal(rec_header_init(&h, g, &f->plan.namespace_id, &f->key, NULL, &bucket, 0,
					 PAGES, 1), 0);
	assert_int_equal(rec_writer_begin(&w, dir, &h), 0);
	assert_int_equal(rec_writer_put_pages(&w, 0, PAGES, f->pages), 0);
	assert_int_equal(rec_writer_put_row(&w, f->row), 0);
	assert_int_equal(rec_writer_commit(&w), 0);
	rec_file_name(name, &f->key);
	snprintf(f->record_path, sizeof(f->record_path), "%s/%s", rec_dir_path(dir), name);
	assert_int_equal(stat(f->record_path, &st), 0);
	f->record_bytes = (uint64_t)st.st_size;
	rec_dir_close(dir);
}

/* Polls fn until it answers (not 0), 10 s at most. */
#define POLL(expr)                                                                    \
	({                                                                            \
		int rc_ = 0;                                                          \
		for (int i_ = 0; i_ < 100000 && (rc_ = (expr)) == 0; i_++)            \
			usleep(100);                                                  \
		rc_;                                                                  \
	})

/* The link's session puts the record: its one share sent by the engine's put_share. */
static void put_record(struct fixture *f)
{
	struct pool_client *c = shard_pool_link_client(f->link);
	struct pool_put_spec spec = { .key = f->key, .first_page_index = 0,
				      .tail_page_count = PAGES, .row = true,
				      .share_bytes = &f->record_bytes };
	uint64_t request = 0, put_id = 0;
	char why[256] = "";
	int fd;

	assert_int_equal(pool_put_begin(c, &spec, &request), 0);
	assert_int_equal(POLL(pool_put_poll(c, request, &put_id)), 1);
	fd = open(f->record_path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	if (f->conn.put_share(f->conn.ctx, put_id, fd, f->record_bytes, why, sizeof(why)) != 0)
		fail_msg("put: %s", why);
	close(fd);
	assert_int_equal(pool_put_commit(c, put_id, true), 0);
	assert_int_equal(POLL(pool_put_outcome(c, put_id)), 1);
}

/* The fixture's plan (one rank) and a manager's configuration with its secret. */
static struct fixture *fixture_new(struct pool_manager_config *mc, uint64_t arena_bytes)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct rec_identity model;

	assert_non_null(f);
	f->base = tu_make_temp_dir("pool-link");
	tu_geometry(&f->plan.geometry, 16, PLANES, UNIT, ROW, 0, 1);
	tu_identities(&model, &f->plan.namespace_id);
	f->plan.world_size = 1;
	f->plan.page_bytes[0] = f->plan.geometry.page_record_bytes;
	f->plan.row_bytes[0] = f->plan.geometry.row_record_bytes;
	assert_int_equal(getrandom(f->plan.secret, sizeof(f->plan.secret), 0),
			 sizeof(f->plan.secret));
	*mc = (struct pool_manager_config){ .listen = "127.0.0.1:0", .name = "link-test",
					    .memory_bytes = arena_bytes };
	memcpy(mc->secret, f->plan.secret, sizeof(mc->secret));
	return f;
}

/* Opens the link to the manager at port, puts the record, prepares the device memory. */
static void fixture_attach(struct fixture *f, uint16_t port)
{
	uint8_t instance[POOL_INSTANCE_ID_BYTES];
	char address[64], why[256] = "";

	f->port = port;
	snprintf(address, sizeof(address), "127.0.0.1:%u", port);
	memset(instance, 0x3c, sizeof(instance));
	if (shard_pool_link_open(&f->plan, address, instance, 10000, &f->link, why,
				 sizeof(why)) != 0)
		fail_msg("link: %s", why);
	shard_pool_link_conn(f->link, &f->conn);
	write_record(f);
	put_record(f);
	for (uint32_t p = 0; p < PLANES; p++) {
		f->device_planes[p] = tu_alloc((size_t)UNIT * f->plan.geometry.page_count);
		f->bases.page_base[p] = (uintptr_t)f->device_planes[p];
	}
	f->device_rows = tu_alloc((size_t)ROW * f->plan.geometry.row_count);
	f->bases.row_base = (uintptr_t)f->device_rows;
	f->chain[0] = (struct shard_pool_record){ .key = f->key, .first_page_index = 0,
						  .tail_page_count = PAGES, .row = true };
	for (uint32_t j = 0; j < PAGES; j++)
		f->page_ids[j] = 40 - j; /* other page ids, in reverse */
}

/* A manager of arena_bytes in this process, the link attached, the record put. */
static int setup_arena(void **state, uint64_t arena_bytes)
{
	struct pool_manager_config mc;
	struct fixture *f = fixture_new(&mc, arena_bytes);
	char why[256] = "";

	if (pool_manager_open(&mc, &f->manager, why, sizeof(why)) != 0) {
		if (arena_bytes > (16u << 20)) {
			/* /dev/shm too small for even a sparse file of that size */
			print_message("skipped: no arena of %llu bytes: %s\n",
				      (unsigned long long)arena_bytes, why);
			tu_remove_tree(f->base);
			shard_pool_plan_destroy(&f->plan);
			free(f);
			*state = NULL;
			return 0;
		}
		fail_msg("manager: %s", why);
	}
	assert_int_equal(pthread_create(&f->thread, NULL, manager_thread, f->manager), 0);
	fixture_attach(f, pool_manager_port(f->manager));
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return setup_arena(state, 16u << 20);
}

/*
 * An arena as large as the memory this process could take (a sparse file:
 * nothing but the record is ever written), so it and the claim staging
 * need more than the budget allows.
 */
static int setup_huge(void **state)
{
	uint64_t available;

	*state = NULL;
	if (shard_slab_memory_available(&available) != 0)
		return 0; /* the test skips: no figure to exceed */
	return setup_arena(state, sel_align_up(available, 4096));
}

/*
 * The manager in a child process, so a test can stop it (SIGSTOP) as a
 * hung manager: its connections stay open and it answers nothing. The
 * child stops its manager cleanly (its arena file removed) when the
 * parent writes to child_stop.
 */
static int setup_child(void **state)
{
	struct pool_manager_config mc;
	struct fixture *f = fixture_new(&mc, 16u << 20);
	int to_parent[2], to_child[2];
	uint16_t port = 0;

	assert_int_equal(pipe(to_parent), 0);
	assert_int_equal(pipe(to_child), 0);
	f->child = fork();
	assert_true(f->child >= 0);
	if (f->child == 0) {
		char why[256], byte;
		int ok;

		close(to_parent[0]);
		close(to_child[1]);
		ok = pool_manager_open(&mc, &f->manager, why, sizeof(why)) == 0 &&
		     pthread_create(&f->thread, NULL, manager_thread, f->manager) == 0;
		port = ok ? pool_manager_port(f->manager) : 0;
		if (write(to_parent[1], &port, sizeof(port)) != sizeof(port) || !ok)
			_exit(1);
		if (read(to_child[0], &byte, 1) < 0)
			byte = 0;
		pool_manager_stop(f->manager);
		pthread_join(f->thread, NULL);
		pool_manager_close(f->manager);
		_exit(0);
	}
	close(to_parent[1]);
	close(to_child[0]);
	f->child_stop = to_child[1];
	assert_int_equal(read(to_parent[0], &port, sizeof(port)), sizeof(port));
	close(to_parent[0]);
	assert_true(port != 0);
	fixture_attach(f, port);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (!f)
		return 0;

	shard_pool_link_close(f->link);
	if (f->device)
		shard_device_close(f->device);
	if (f->child) {
		int status = 0;

		kill(f->child, SIGCONT);
		assert_int_equal(write(f->child_stop, "", 1), 1);
		close(f->child_stop);
		assert_int_equal(waitpid(f->child, &status, 0), f->child);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	} else {
		pool_manager_stop(f->manager);
		pthread_join(f->thread, NULL);
		pool_manager_close(f->manager);
	}
	for (uint32_t p = 0; p < PLANES; p++)
		free(f->device_planes[p]);
	free(f->device_rows);
	free(f->pages);
	free(f->row);
	tu_remove_tree(f->base);
	shard_pool_plan_destroy(&f->plan);
	free(f);
	return 0;
}

/* One claim of the record into page ids 40 .. 33 and slot 2 on device; its bytes checked. */
/* The device's page ids and state slot 2 hold the record's pages and row, as share placed them. */
static void assert_device_holds_record(const struct fixture *f, const struct shard_pool_share *share)
{
	const struct rec_geometry *g = share->geometry;

	for (uint32_t j = 0; j < PAGES; j++)
		for (uint32_t k = 0; k < PLANES; k++)
			if (memcmp(f->device_planes[k] + (size_t)UNIT * f->page_ids[j],
				   f->pages + g->page_record_bytes * j + share->plane_offset[k],
				   UNIT) != 0)
				fail_msg("page %u plane %u differs", j, k);
	assert_memory_equal(f->device_rows + 2 * ROW, f->row, ROW);
}

static void claim(struct fixture *f, struct shard_device *device)
{
	const struct rec_geometry *g = &f->plan.geometry;
	struct pool_client *c = shard_pool_link_client(f->link);
	struct pool_chain_entry entries[4];
	struct pool_claim_grant grant;
	struct shard_pool_share share;
	uint64_t claim_id = 0, bytes = 0;
	uint32_t count = 0;
	char why[256] = "";

	for (uint32_t p = 0; p < PLANES; p++)
		memset(f->device_planes[p], 0xee, (size_t)UNIT * g->page_count);
	assert_int_equal(pool_claim_begin(c, &f->key, &claim_id), 0);
	assert_int_equal(POLL(pool_claim_poll(c, claim_id, &grant, entries, 4, &count)), 1);
	assert_int_equal(count, 1);
	assert_int_equal(shard_pool_share_init(&share, g, &f->plan.namespace_id, &f->bases,
					       device), 0);
	assert_int_equal(shard_pool_share_begin(&share, f->chain, 1, 0, f->page_ids, PAGES, 2,
						why, sizeof(why)), 0);
	if (f->conn.claim_share(f->conn.ctx, claim_id, f->chain, 1, 0, &share, why,
				sizeof(why)) != 0)
		fail_msg("claim: %s", why);
	assert_int_equal(shard_pool_share_finish(&share, &bytes, why, sizeof(why)), 0);
	shard_pool_share_destroy(&share);
	assert_int_equal(pool_claim_end(c, claim_id, 0), 0);
	assert_device_holds_record(f, &share);
}

/* The places and stamps of the lookup's answer for the record (R-POOL-22), as early. */
static void lookup_early(struct fixture *f, struct shard_pool_early *early)
{
	struct pool_client *c = shard_pool_link_client(f->link);
	struct pool_chain_entry *entries = tu_alloc(POOL_CHAIN_RECORDS_MAX * sizeof(*entries));
	uint64_t ticket = 0;
	uint32_t count = 0;

	assert_int_equal(pool_lookup_begin(c, &f->key, 1, &ticket), 0);
	assert_int_equal(POLL(pool_lookup_poll(c, ticket, entries, POOL_CHAIN_RECORDS_MAX,
					       &count)), 1);
	assert_int_equal(count, 1);
	assert_true(entries[0].stamp != 0 && entries[0].place.bytes != 0);
	*early = (struct shard_pool_early){ .offset = entries[0].place.offset,
					    .bytes = entries[0].place.bytes,
					    .stamp = entries[0].stamp };
	free(entries);
}

/*
 * One claim of claim_key as rank zero's engine runs it on the manager's
 * host (R-POOL-22, R-POOL-51): its share begun with the record's chain,
 * the copies from the lookup's place issued before the grant (early, as
 * the lookup gave it or as the test edits it), the grant waited for
 * through the client on this thread, the share finished and the claim
 * ended by the session. Returns the claim's result (why); on 0 the
 * record's bytes are checked at page ids 40 .. 33 and slot 2.
 */
static int early_claim(struct fixture *f, const struct rec_key *claim_key,
		       const struct shard_pool_early *edited, char *why, size_t why_size)
{
	const struct rec_geometry *g = &f->plan.geometry;
	struct pool_client *c = shard_pool_link_client(f->link);
	struct pool_chain_entry entries[4];
	struct pool_claim_grant grant;
	struct shard_pool_share share;
	struct shard_pool_early early;
	uint64_t claim_id = 0, bytes = 0;
	uint32_t count = 0;
	int ret, polled;

	for (uint32_t p = 0; p < PLANES; p++)
		memset(f->device_planes[p], 0xee, (size_t)UNIT * g->page_count);
	memset(f->device_rows, 0xee, (size_t)ROW * g->row_count);
	lookup_early(f, &early);
	if (edited)
		early = *edited;
	assert_int_equal(pool_claim_begin(c, claim_key, &claim_id), 0);
	assert_true(pool_claim_is_local(c, claim_id));
	assert_int_equal(shard_pool_share_init(&share, g, &f->plan.namespace_id, &f->bases,
					       f->device), 0);
	assert_int_equal(shard_pool_share_begin(&share, f->chain, 1, 0, f->page_ids, PAGES, 2,
						why, why_size), 0);
	ret = f->conn.claim_early(f->conn.ctx, claim_id, &early, &share, why, why_size);
	if (!ret)
		ret = shard_pool_share_finish(&share, &bytes, why, why_size);
	else
		shard_pool_share_finish(&share, &bytes, NULL, 0);
	shard_pool_share_destroy(&share);
	/* the session's own poll sees the same grant, or the refusal, which ends the claim */
	polled = POLL(pool_claim_poll(c, claim_id, &grant, entries, 4, &count));
	if (polled == 1)
		assert_int_equal(pool_claim_end(c, claim_id, ret), 0);
	if (ret)
		return ret;
	assert_int_equal(polled, 1);
	assert_device_holds_record(f, &share);
	return 0;
}

/*
 * R-POOL-22: a claim of rank zero on the manager's host copies from the
 * lookup's place before the grant and keeps the copies when the grant's
 * stamp is the lookup's: one arena claim, its record copied early, none
 * redone or waited for, byte-exact.
 */
static void test_pool_link_early_claim_keeps_copies(void **state)
{
	struct fixture *f = *state;
	struct shard_pool_link_counts before, after;
	char why[256] = "";

	assert_int_equal(shard_device_open_host(&f->device), 0);
	claim(f, f->device); /* maps and registers the arena: later claims are local */
	shard_pool_link_counts(&before);
	if (early_claim(f, &f->key, NULL, why, sizeof(why)) != 0)
		fail_msg("early claim: %s", why);
	shard_pool_link_counts(&after);
	assert_int_equal(after.early_claims, before.early_claims + 1);
	assert_int_equal(after.records_early, before.records_early + 1);
	assert_int_equal(after.records_redone, before.records_redone);
	assert_int_equal(after.records_waited, before.records_waited);
	assert_int_equal(after.arena_claims, before.arena_claims + 1);
	assert_int_equal(after.stream_windows, before.stream_windows);
}

/*
 * R-POOL-36: a record whose image changed between the lookup and the grant
 * (another stamp: evicted and put again) is copied again from its granted
 * place after the early copies; one whose answered place no longer holds
 * its image (a stale place) is copied only at the grant. Either way the
 * claim restores byte-exact.
 */
static void test_pool_link_early_claim_stale_redone(void **state)
{
	struct fixture *f = *state;
	struct shard_pool_link_counts before, after;
	struct shard_pool_early stale;
	char why[256] = "";

	assert_int_equal(shard_device_open_host(&f->device), 0);
	claim(f, f->device);
	lookup_early(f, &stale);
	stale.stamp++;
	shard_pool_link_counts(&before);
	if (early_claim(f, &f->key, &stale, why, sizeof(why)) != 0)
		fail_msg("early claim, stale stamp: %s", why);
	shard_pool_link_counts(&after);
	assert_int_equal(after.records_redone, before.records_redone + 1);
	assert_int_equal(after.records_early, before.records_early);

	lookup_early(f, &stale);
	stale.offset += 4096; /* the range holds no image of the record */
	shard_pool_link_counts(&before);
	if (early_claim(f, &f->key, &stale, why, sizeof(why)) != 0)
		fail_msg("early claim, stale place: %s", why);
	shard_pool_link_counts(&after);
	assert_int_equal(after.records_waited, before.records_waited + 1);
	assert_int_equal(after.records_early + after.records_redone,
			 before.records_early + before.records_redone);
	assert_int_equal(after.arena_claims, before.arena_claims + 1);
}

/*
 * A claim refused after rank zero's early copies went (the pool holds no
 * such key): the share fails with the refusal, nothing is kept, and the
 * link claims again afterwards.
 */
/*
 * The failpoint pool.link_cut before an early claim's share (a network
 * fault on rank zero's connection): the share fails with the cut named,
 * before any copy, and no grant is waited for.
 */
static void test_pool_link_early_claim_cut_fails(void **state)
{
	struct fixture *f = *state;
	struct shard_pool_link_counts before, after;
	char why[256] = "";
	int ret;

	assert_int_equal(shard_device_open_host(&f->device), 0);
	claim(f, f->device);
	shard_pool_link_counts(&before);
	assert_int_equal(sel_failpoints_configure("pool.link_cut=1*return"), 0);
	ret = early_claim(f, &f->key, NULL, why, sizeof(why));
	assert_int_equal(sel_failpoint_fired(SEL_FP_POOL_LINK_CUT), 1);
	sel_failpoints_configure(NULL);
	shard_pool_link_counts(&after);
	print_message("cut: %s (%s)\n", sel_strerror(ret), why);
	assert_true(ret != 0);
	assert_non_null(strstr(why, "pool.link_cut"));
	assert_int_equal(after.early_claims, before.early_claims);
	assert_int_equal(after.records_early, before.records_early);
}

static void test_pool_link_early_claim_refused_fails(void **state)
{
	struct fixture *f = *state;
	struct shard_pool_link_counts before, after;
	struct rec_key missing = f->key;
	char why[256] = "";
	int ret;

	assert_int_equal(shard_device_open_host(&f->device), 0);
	claim(f, f->device);
	missing.digest.bytes[0] ^= 0xff;
	shard_pool_link_counts(&before);
	ret = early_claim(f, &missing, NULL, why, sizeof(why));
	shard_pool_link_counts(&after);
	print_message("refused: %s (%s)\n", sel_strerror(ret), why);
	assert_true(ret == -ENOENT);
	assert_int_equal(after.early_claims, before.early_claims + 1);
	assert_int_equal(after.records_early, before.records_early);
	assert_int_equal(after.arena_claims, before.arena_claims);
	if (early_claim(f, &f->key, NULL, why, sizeof(why)) != 0)
		fail_msg("early claim after a refusal: %s", why);
}

/* Two claims on device, the warnings they log caught by catch_warning. */
static void claim_twice_warnings_caught(struct fixture *f, struct shard_device *device)
{
	sel_log_set_level(SEL_LOG_WARN);
	sel_log_set_callback(catch_warning, f);
	claim(f, device);
	claim(f, device);
	sel_log_set_callback(NULL, NULL);
	sel_log_set_level(SEL_LOG_ERROR);
}

static int refusing_register(struct shard_device *dev, const void *ptr, uint64_t bytes)
{
	(void)dev;
	(void)ptr;
	(void)bytes;
	return -EPERM;
}

/* The host device, its read-only registration refused. */
static const struct shard_device_ops *refusing_ops(const struct shard_device *host)
{
	static struct shard_device_ops ops;

	ops = *host->ops;
	ops.name = "refusing";
	ops.register_read_only = refusing_register;
	return &ops;
}

/* A device that refuses the arena: claims stream, byte-exact, one warning for the link. */
static void test_pool_link_refused_registration_streams(void **state)
{
	struct fixture *f = *state;
	struct shard_pool_link_counts before, after;
	struct shard_device *dev;

	assert_int_equal(shard_device_open_host(&f->device), 0);
	dev = f->device;
	dev->ops = refusing_ops(dev);
	shard_pool_link_counts(&before);
	claim_twice_warnings_caught(f, dev);
	shard_pool_link_counts(&after);
	assert_int_equal(after.arena_refusals, before.arena_refusals + 1);
	assert_int_equal(after.stream_claims, before.stream_claims + 2);
	assert_true(after.stream_windows > before.stream_windows);
	assert_int_equal(after.arena_claims, before.arena_claims);
	assert_int_equal(f->warnings, 1);
	assert_non_null(strstr(f->last, "refused to register"));
}

/*
 * With failpoints configured (one that keeps the arena from registering),
 * two claims on the host device stream, one refusal counted and one
 * warning, which holds words.
 */
static void claims_stream_with(struct fixture *f, const char *failpoints, const char *words)
{
	struct shard_pool_link_counts before, after;

	assert_int_equal(shard_device_open_host(&f->device), 0);
	assert_int_equal(sel_failpoints_configure(failpoints), 0);
	shard_pool_link_counts(&before);
	claim_twice_warnings_caught(f, f->device);
	shard_pool_link_counts(&after);
	sel_failpoints_configure(NULL);
	assert_int_equal(after.arena_refusals, before.arena_refusals + 1);
	assert_int_equal(after.stream_claims, before.stream_claims + 2);
	assert_int_equal(after.arena_claims, before.arena_claims);
	assert_int_equal(f->warnings, 1);
	assert_non_null(strstr(f->last, words));
}

/* The failpoint pool.arena_register refuses as a device would: claims stream, one warning. */
static void test_pool_link_registration_failpoint_streams(void **state)
{
	claims_stream_with(*state, "pool.arena_register=1*return(ENOMEM)", "refused to register");
}

/* No thread for the arena's registration (failpoint thread.start): claims stream, one warning. */
static void test_pool_link_no_registration_thread_streams(void **state)
{
	claims_stream_with(*state, "thread.start=1*return(EAGAIN)", "no thread to register");
}

/* A registration that holds until the test opens its gate; unregistrations counted. */
static atomic_bool register_gate, register_entered;
static atomic_int unregistrations;

static int gated_register(struct shard_device *dev, const void *ptr, uint64_t bytes)
{
	(void)dev;
	(void)ptr;
	(void)bytes;
	atomic_store(&register_entered, true);
	while (!atomic_load(&register_gate))
		usleep(1000);
	return 0;
}

static void counting_unregister(struct shard_device *dev, void *ptr)
{
	(void)dev;
	(void)ptr;
	atomic_fetch_add(&unregistrations, 1);
}

/* Opens the registration's gate 200 ms from now. */
static void *gate_open_later(void *arg)
{
	(void)arg;
	usleep(200000);
	atomic_store(&register_gate, true);
	return NULL;
}

/*
 * A registration that takes long (a large arena's pinning) runs on a
 * thread of its own: the first claim waits LINK_ARENA_WAIT_MS for it, then
 * streams, byte-exact, and so do later claims until it is done; then
 * claims copy from the arena. The transfer thread is never held longer.
 */
static void test_pool_link_slow_registration_streams_meanwhile(void **state)
{
	struct fixture *f = *state;
	struct shard_pool_link_counts before, after;
	static struct shard_device_ops ops;
	uint64_t start, ms;
	int tries = 0;

	assert_int_equal(shard_device_open_host(&f->device), 0);
	ops = *f->device->ops;
	ops.name = "slow";
	ops.register_read_only = gated_register;
	f->device->ops = &ops;
	atomic_store(&register_gate, false);
	atomic_store(&register_entered, false);
	shard_pool_link_counts(&before);
	start = sel_monotonic_ns();
	claim(f, f->device);
	ms = (sel_monotonic_ns() - start) / 1000000u;
	claim(f, f->device);
	shard_pool_link_counts(&after);
	assert_true(atomic_load(&register_entered));
	assert_int_equal(after.stream_claims, before.stream_claims + 2);
	assert_int_equal(after.arena_claims, before.arena_claims);
	print_message("the first claim, its registration held: %llu ms\n",
		      (unsigned long long)ms);
	atomic_store(&register_gate, true);
	do {
		usleep(10000);
		claim(f, f->device);
		shard_pool_link_counts(&after);
	} while (after.arena_claims == before.arena_claims && ++tries < 500);
	assert_int_equal(after.arena_claims, before.arena_claims + 1);
	assert_int_equal(after.arena_refusals, before.arena_refusals);
}

/* The registration still held when the link closes: the close waits for it, then undoes it. */
static void test_pool_link_close_waits_for_registration(void **state)
{
	struct fixture *f = *state;
	static struct shard_device_ops ops;
	pthread_t opener;

	assert_int_equal(shard_device_open_host(&f->device), 0);
	ops = *f->device->ops;
	ops.register_read_only = gated_register;
	ops.unregister_host = counting_unregister;
	f->device->ops = &ops;
	atomic_store(&register_gate, false);
	atomic_store(&register_entered, false);
	atomic_store(&unregistrations, 0);
	claim(f, f->device);
	assert_true(atomic_load(&register_entered));
	assert_int_equal(pthread_create(&opener, NULL, gate_open_later, NULL), 0);
	shard_pool_link_close(f->link);
	f->link = NULL;
	assert_true(atomic_load(&register_gate)); /* it waited for the registration */
	assert_int_equal(atomic_load(&unregistrations), 1);
	pthread_join(opener, NULL);
}

static int synchronizes;
static int (*host_synchronize)(struct shard_device *dev);

static int counting_synchronize(struct shard_device *dev)
{
	synchronizes++;
	return host_synchronize(dev);
}

/* The host device, its synchronizations counted. */
static const struct shard_device_ops *counting_ops(const struct shard_device *host)
{
	static struct shard_device_ops ops;

	ops = *host->ops;
	host_synchronize = host->ops->synchronize;
	ops.synchronize = counting_synchronize;
	return &ops;
}

/* A claim from the arena waits for the device once, not once per record or row. */
static void test_pool_link_arena_claim_waits_once(void **state)
{
	struct fixture *f = *state;
	struct shard_device *dev;

	assert_int_equal(shard_device_open_host(&f->device), 0);
	dev = f->device;
	dev->ops = counting_ops(dev);
	claim(f, dev); /* maps and registers the arena */
	synchronizes = 0;
	claim(f, dev);
	assert_int_equal(synchronizes, 1);
}

static int failing_synchronize(struct shard_device *dev)
{
	(void)dev;
	return -EIO;
}

/* A claim from the arena whose device copies fail is no success: finish says so. */
static void test_pool_link_arena_claim_copy_failure_fails(void **state)
{
	struct fixture *f = *state;
	const struct rec_geometry *g = &f->plan.geometry;
	struct pool_client *c = shard_pool_link_client(f->link);
	struct pool_chain_entry entries[4];
	struct pool_claim_grant grant;
	struct shard_pool_share share;
	struct shard_device_ops *ops;
	uint64_t claim_id = 0, bytes = 0;
	uint32_t count = 0;
	char why[256] = "";

	assert_int_equal(shard_device_open_host(&f->device), 0);
	f->device->ops = counting_ops(f->device);
	claim(f, f->device); /* maps and registers the arena */
	ops = (struct shard_device_ops *)f->device->ops;
	ops->synchronize = failing_synchronize;
	assert_int_equal(pool_claim_begin(c, &f->key, &claim_id), 0);
	assert_int_equal(POLL(pool_claim_poll(c, claim_id, &grant, entries, 4, &count)), 1);
	assert_int_equal(shard_pool_share_init(&share, g, &f->plan.namespace_id, &f->bases,
					       f->device), 0);
	assert_int_equal(shard_pool_share_begin(&share, f->chain, 1, 0, f->page_ids, PAGES, 2,
						why, sizeof(why)), 0);
	assert_int_equal(f->conn.claim_share(f->conn.ctx, claim_id, f->chain, 1, 0, &share, why,
					     sizeof(why)), 0);
	assert_int_equal(shard_pool_share_finish(&share, &bytes, why, sizeof(why)), -EIO);
	assert_non_null(strstr(why, "device copies"));
	shard_pool_share_destroy(&share);
	assert_int_equal(pool_claim_end(c, claim_id, -EIO), 0);
	ops->synchronize = counting_synchronize;
}

/* The control frames a claim sent that wait for the manager's answer. */
static uint64_t requests_sent(struct pool_client *c)
{
	return pool_client_frames_sent(c, POOL_MSG_CLAIM) +
	       pool_client_frames_sent(c, POOL_MSG_CLAIM_LOCAL) +
	       pool_client_frames_sent(c, POOL_MSG_CLAIM_PULL);
}

/* R-POOL-51: a same-host claim is one round trip (its grant brings the places) and one end. */
static void test_pool_link_arena_claim_one_round_trip(void **state)
{
	struct fixture *f = *state;
	struct pool_client *c = shard_pool_link_client(f->link);
	uint64_t requests, ends;

	assert_int_equal(shard_device_open_host(&f->device), 0);
	claim(f, f->device); /* maps and registers the arena: a claim and a pull */
	requests = requests_sent(c);
	ends = pool_client_frames_sent(c, POOL_MSG_CLAIM_END);
	claim(f, f->device);
	claim(f, f->device);
	assert_int_equal(requests_sent(c) - requests, 2);
	assert_int_equal(pool_client_frames_sent(c, POOL_MSG_CLAIM_LOCAL), 2);
	assert_int_equal(pool_client_frames_sent(c, POOL_MSG_CLAIM_END) - ends, 2);
}

/* Milliseconds since start_ns. */
static uint64_t ms_since(uint64_t start_ns)
{
	return (sel_monotonic_ns() - start_ns) / 1000000u;
}

/*
 * Stops the manager's process and returns once it has stopped: kill alone
 * returns before the signal reaches every thread, and a busy machine can
 * let the manager answer one more request meanwhile.
 */
static void stop_child(struct fixture *f)
{
	int status = 0;

	assert_int_equal(kill(f->child, SIGSTOP), 0);
	assert_int_equal(waitpid(f->child, &status, WUNTRACED), f->child);
	assert_true(WIFSTOPPED(status));
}

/* R-POOL-52: a manager that stops answering fails the session's wait for a grant in 3 s, saying why. */
static void test_pool_link_silent_manager_fails_grant(void **state)
{
	struct fixture *f = *state;
	struct pool_client *c = shard_pool_link_client(f->link);
	struct pool_chain_entry entries[4];
	struct pool_claim_grant grant;
	uint64_t claim_id = 0, start;
	uint32_t count = 0;
	char why[256] = "";

	stop_child(f);
	start = sel_monotonic_ns();
	assert_int_equal(pool_claim_begin(c, &f->key, &claim_id), 0);
	assert_int_equal(POLL(pool_claim_poll(c, claim_id, &grant, entries, 4, &count)),
			 -ETIMEDOUT);
	assert_true(ms_since(start) >= POOL_NO_PROGRESS_MS);
	assert_true(ms_since(start) < POOL_NO_PROGRESS_MS + 2000u);
	assert_int_equal(pool_client_status(c, why, sizeof(why)), -ETIMEDOUT);
	assert_non_null(strstr(why, "sent nothing"));
	assert_non_null(strstr(why, "its grant"));
}

/* Grants a claim of the record, then stops the manager; the rank's share must fail within 3 s, saying why. */
static void silent_after_grant(struct fixture *f, const char *waiting)
{
	const struct rec_geometry *g = &f->plan.geometry;
	struct pool_client *c = shard_pool_link_client(f->link);
	struct pool_chain_entry entries[4];
	struct pool_claim_grant grant;
	struct shard_pool_share share;
	uint64_t claim_id = 0, bytes = 0, start;
	uint32_t count = 0;
	char why[256] = "";

	assert_int_equal(pool_claim_begin(c, &f->key, &claim_id), 0);
	assert_int_equal(POLL(pool_claim_poll(c, claim_id, &grant, entries, 4, &count)), 1);
	stop_child(f);
	assert_int_equal(shard_pool_share_init(&share, g, &f->plan.namespace_id, &f->bases,
					       f->device), 0);
	assert_int_equal(shard_pool_share_begin(&share, f->chain, 1, 0, f->page_ids, PAGES, 2,
						why, sizeof(why)), 0);
	start = sel_monotonic_ns();
	assert_int_equal(f->conn.claim_share(f->conn.ctx, claim_id, f->chain, 1, 0, &share, why,
					     sizeof(why)), -ETIMEDOUT);
	assert_true(ms_since(start) >= POOL_NO_PROGRESS_MS);
	assert_true(ms_since(start) < POOL_NO_PROGRESS_MS + 2000u);
	assert_non_null(strstr(why, "sent nothing"));
	assert_non_null(strstr(why, waiting));
	assert_int_equal(shard_pool_share_finish(&share, &bytes, NULL, 0), SEL_EMISMATCH);
	shard_pool_share_destroy(&share);
}

/* R-POOL-52: a rank streaming a claim from a manager that stops answering fails in 3 s, not at the claim's deadline. */
static void test_pool_link_silent_manager_fails_stream(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(shard_device_open_host(&f->device), 0);
	f->device->ops = refusing_ops(f->device);
	silent_after_grant(f, "a window of its stream");
}

/* R-POOL-52: a same-host rank waiting for its places from a manager that stops answering fails in 3 s. */
static void test_pool_link_silent_manager_fails_places(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(shard_device_open_host(&f->device), 0);
	silent_after_grant(f, "its places");
}

/*
 * A share of rank one's link: fd -1, so a connection that is up answers
 * -EBADF from reading the file (nothing is sent); a lost one, the loss's
 * failure. Returns it and how long the call took in *ms.
 */
static int peer_share(struct shard_pool_conn *conn, uint64_t *ms)
{
	char why[256] = "";
	uint64_t start = sel_monotonic_ns();
	int ret = conn->put_share(conn->ctx, 1, -1, 4096, why, sizeof(why));

	*ms = ms_since(start);
	return ret;
}

/*
 * A share's bound: a share that waited for a reconnect's try to a manager
 * that answers nothing would take its whole 2 s handshake deadline
 * (LINK_RECONNECT_MS); one that does not takes microseconds, and the rest
 * is slack for a loaded machine.
 */
#define SHARE_WAIT_MS_MAX 1500

/*
 * R-POOL-110: a peer rank's reconnect to a manager that accepts
 * connections and answers nothing (stopped) never holds up its transfer
 * thread: each share fails at once while the try waits on a thread of its
 * own, and once the manager answers, the link is up again.
 */
static void test_pool_link_peer_reconnect_never_waits(void **state)
{
	struct fixture *f = *state;
	struct shard_pool_plan plan = f->plan;
	uint8_t instance[POOL_INSTANCE_ID_BYTES];
	struct shard_pool_link *link = NULL;
	struct shard_pool_conn conn;
	char address[64], why[256] = "";
	uint64_t ms = 0;
	int ret = 0, reconnected = 0;

	tu_geometry(&plan.geometry, 16, PLANES, UNIT, ROW, 1, 2);
	plan.world_size = 2;
	plan.page_bytes[1] = plan.geometry.page_record_bytes;
	plan.row_bytes[1] = plan.geometry.row_record_bytes;
	memset(instance, 0x5d, sizeof(instance)); /* another instance: rank one of two */
	snprintf(address, sizeof(address), "127.0.0.1:%u", f->port);
	if (shard_pool_link_open(&plan, address, instance, 10000, &link, why, sizeof(why)) != 0)
		fail_msg("rank one's link: %s", why);
	shard_pool_link_conn(link, &conn);
	assert_int_equal(peer_share(&conn, &ms), -EBADF);
	stop_child(f);
	shard_pool_link_cut(link, "cut by the test");
	for (int i = 0; i < 5; i++) {
		ret = peer_share(&conn, &ms);
		assert_true(ret != 0 && ret != -EBADF);
		if (ms >= SHARE_WAIT_MS_MAX)
			fail_msg("share %d waited %llu ms for a manager that answers nothing", i,
				 (unsigned long long)ms);
		usleep(50000);
	}
	assert_int_equal(kill(f->child, SIGCONT), 0);
	for (int i = 0; i < 1000 && !reconnected; i++) {
		ret = peer_share(&conn, &ms);
		if (ms >= SHARE_WAIT_MS_MAX)
			fail_msg("a share waited %llu ms for the reconnect",
				 (unsigned long long)ms);
		reconnected = ret == -EBADF;
		usleep(10000);
	}
	if (!reconnected)
		fail_msg("rank one did not reconnect once the manager answered: %s",
			 sel_strerror(ret));
	shard_pool_link_close(link);
	shard_pool_plan_destroy(&plan);
}

/* The host device: claims copy from the arena and read no stream window. */
static void test_pool_link_claims_from_arena(void **state)
{
	struct fixture *f = *state;
	struct shard_pool_link_counts before, after;
	struct shard_device *dev;

	assert_int_equal(shard_device_open_host(&f->device), 0);
	dev = f->device;
	shard_pool_link_counts(&before);
	claim(f, dev);
	claim(f, dev);
	shard_pool_link_counts(&after);
	assert_int_equal(after.arena_claims, before.arena_claims + 2);
	assert_int_equal(after.arena_records, before.arena_records + 2);
	assert_int_equal(after.stream_windows, before.stream_windows);
	assert_int_equal(after.arena_refusals, before.arena_refusals);
}

static int registrations;

static int counting_register(struct shard_device *dev, const void *ptr, uint64_t bytes)
{
	(void)dev;
	(void)ptr;
	(void)bytes;
	registrations++;
	return 0;
}

/*
 * An arena that with the claim staging needs more than half of the memory
 * available is never registered: claims stream, byte-exact, and one
 * warning names both figures.
 */
static void test_pool_link_arena_over_budget_streams(void **state)
{
	struct fixture *f = *state;
	struct shard_pool_link_counts before, after;
	static struct shard_device_ops ops;
	struct shard_device *dev;

	if (!f) {
		skip(); /* no memory figure, or /dev/shm cannot hold the sparse arena */
		return;
	}
	assert_int_equal(shard_device_open_host(&f->device), 0);
	dev = f->device;
	ops = *dev->ops;
	ops.name = "counting";
	ops.register_read_only = counting_register;
	dev->ops = &ops;
	registrations = 0;
	shard_pool_link_counts(&before);
	claim_twice_warnings_caught(f, dev);
	shard_pool_link_counts(&after);
	assert_int_equal(registrations, 0);
	assert_int_equal(after.arena_claims, before.arena_claims);
	assert_int_equal(after.stream_claims, before.stream_claims + 2);
	assert_int_equal(after.arena_refusals, before.arena_refusals + 1);
	assert_int_equal(f->warnings, 1);
	print_message("%s\n", f->last);
	assert_non_null(strstr(f->last, "MiB of memory available"));
	assert_non_null(strstr(f->last, "does not register the manager's arena"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pool_link_refused_registration_streams, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_registration_failpoint_streams,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_no_registration_thread_streams,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_slow_registration_streams_meanwhile,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_close_waits_for_registration,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_claims_from_arena, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_arena_over_budget_streams,
						setup_huge, teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_arena_claim_waits_once, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_early_claim_keeps_copies, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_early_claim_stale_redone, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_early_claim_cut_fails, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_early_claim_refused_fails, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_arena_claim_one_round_trip, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_arena_claim_copy_failure_fails,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_silent_manager_fails_grant,
						setup_child, teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_silent_manager_fails_stream,
						setup_child, teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_peer_reconnect_never_waits,
						setup_child, teardown),
		cmocka_unit_test_setup_teardown(test_pool_link_silent_manager_fails_places,
						setup_child, teardown),
	};

	sel_log_set_level(SEL_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
