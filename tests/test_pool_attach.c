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
 * (counted: no stream window is read), and a claim the manager refuses
 * after rank zero's early copies fails its fetch, rank one never asked; a
 * manager restarted with another arena serves a new instance from the new
 * arena, byte-exact. A peer rank
 * whose own connection is cut reconnects alone (R-POOL-110), and a
 * reattach closes rank zero's old link off the model thread.
 */
#include "tests/pool_fixture.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "pool/manager.h"
#include "selene/store.h"
#include "shard/pool_link.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MANAGER_NAME "attach-test"
#define MANAGER_ARENA_BYTES (64u << 20)

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
 * asks again with a fresh history of the same tokens (instance i's
 * history replaced).
 */
static bool lookup_pool(struct pf_fixture *f, uint32_t i, struct sel_hit *hit)
{
	for (int tries = 0; tries < 50; tries++)
		if (pf_lookup_fresh(f, i, hit))
			return true;
	return false;
}

static const struct pf_variant small_disk = { .row_bytes = PF_ROW, .disk_limit = 320u << 10 };
static const struct pf_variant big_disk = { .row_bytes = PF_ROW, .disk_limit = 64u << 20 };

/* Instance A cascades to the pool; checks it put some and kept its limit. */
static uint64_t cascade_from_a(struct pf_fixture *f)
{
	struct sel_stats st;

	pf_instance_open(f, 0, &small_disk);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_attached, 1);
	pf_fill(f, 0);
	pf_publish_chain(f, 0, 30, true);
	settle(f->inst[0].store, 1);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	if (st.pool_puts == 0)
		fail_msg("no pool put (failures %llu, refusals %llu)",
			 (unsigned long long)st.pool_put_failures,
			 (unsigned long long)st.pool_refusals);
	assert_int_equal(st.pool_put_failures, 0);
	return st.pool_puts;
}

/* Instance A cascades its chain to the pool and closes; instance i opens as v. */
static void cascade_then_open(struct pf_fixture *f, uint32_t i, const struct pf_variant *v)
{
	cascade_from_a(f);
	pf_instance_close(f, 0);
	pf_instance_open(f, i, v);
}

/*
 * Instance A (two ranks, a 320 KiB disk limit) puts the records leaving its
 * disk to the manager; instance B (other directories) finds them through a
 * lookup ticket and restores them byte-exact on both ranks into other page
 * ids and another row slot.
 */
static void test_pool_attach_cascade_then_restore_elsewhere(void **state)
{
	struct pf_fixture *f = *state;
	struct sel_stats st;
	struct sel_hit hit;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	cascade_then_open(f, 1, &big_disk);
	pf_wipe(f, 1);
	if (!lookup_pool(f, 1, &hit))
		fail_msg("instance B found nothing in the pool");
	assert_true(hit.consumed >= 5 * PF_PAGE_TOKENS);
	pf_fetch_restores(f, 1, &hit, 20, 3, 7, 20000, "pool fetch");
	assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
	assert_int_equal(st.pool_hits, 1);
	assert_int_equal(st.pool_claims, 1);
	assert_true(st.pool_claim_bytes > 0);
	pf_instance_close(f, 1);
}

/*
 * Instance i finds the chain in the pool and restores it byte-exact on both
 * ranks, from the manager's arena: rank zero (this process) and rank one
 * (counted when its peer stops, at instance_close) read no stream window.
 */
static void claim_from_arena(struct pf_fixture *f, uint32_t i)
{
	struct shard_pool_link_counts before, after;
	struct sel_hit hit;

	pf_wipe(f, i);
	shard_pool_link_counts(&before);
	if (!lookup_pool(f, i, &hit))
		fail_msg("instance %u found nothing in the pool", i);
	pf_fetch_restores(f, i, &hit, 20, 3, 7, 20000, "pool fetch");
	shard_pool_link_counts(&after);
	assert_int_equal(after.arena_claims, before.arena_claims + 1);
	assert_true(after.arena_records > before.arena_records);
	assert_int_equal(after.stream_windows, before.stream_windows);
	assert_int_equal(after.stream_claims, before.stream_claims);
	assert_int_equal(after.arena_refusals, before.arena_refusals);
}

/* Rank one of instance i (stopped) claimed from the arena and streamed nothing. */
static void peer_claimed_from_arena(struct pf_fixture *f, uint32_t i, uint64_t claims)
{
	const struct shard_pool_link_counts *c = &f->mem[i * PF_WORLD + 1].counts;

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
	struct pf_fixture *f = *state;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	cascade_then_open(f, 1, &big_disk);
	claim_from_arena(f, 1);
	pf_instance_close(f, 1);
	peer_claimed_from_arena(f, 1, 1);
}

/*
 * R-POOL-22, R-POOL-51: once rank zero's link registered the arena (its
 * first claim), the instance's next claim is local and rank zero's share
 * starts at sel_fetch, from the lookup's places, before the grant; with
 * nothing changed since the lookup every record copied early is kept.
 * Rank one pulls after the grant; both restore byte-exact.
 */
static void test_pool_attach_same_host_claim_copies_early(void **state)
{
	struct pf_fixture *f = *state;
	struct shard_pool_link_counts before, after;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	cascade_then_open(f, 1, &big_disk);
	shard_pool_link_counts(&before);
	claim_from_arena(f, 1); /* registers the arena: not early */
	shard_pool_link_counts(&after);
	assert_int_equal(after.early_claims, before.early_claims);
	before = after;
	claim_from_arena(f, 1);
	shard_pool_link_counts(&after);
	assert_int_equal(after.early_claims, before.early_claims + 1);
	assert_int_equal(after.records_early - before.records_early,
			 after.arena_records - before.arena_records);
	assert_int_equal(after.records_redone, before.records_redone);
	assert_int_equal(after.records_waited, before.records_waited);
	pf_instance_close(f, 1);
	peer_claimed_from_arena(f, 1, 2);
}

/*
 * R-POOL-22: a claim the manager refuses after rank zero's copies from the
 * lookup's places went (failpoint pool.claim_refuse in the manager, as a
 * record gone since the lookup) fails the fetch, saying the pool refused
 * it, and rank one is never asked for its share. The instance stays
 * attached; its next claim restores byte-exact on both ranks.
 */
static void test_pool_attach_early_claim_refused(void **state)
{
	struct pf_fixture *f = *state;
	struct shard_pool_link_counts before, after;
	struct sel_stats st;
	struct sel_event ev;
	struct sel_hit hit;

	/* the manager, forked with this configuration, refuses its second claim */
	assert_int_equal(sel_failpoints_configure("pool.claim_refuse=1*off->1*return(ENOENT)"),
			 0);
	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	assert_int_equal(sel_failpoints_configure(NULL), 0);
	cascade_then_open(f, 1, &big_disk);
	claim_from_arena(f, 1); /* registers the arena: not early */
	pf_wipe(f, 1);
	shard_pool_link_counts(&before);
	if (!lookup_pool(f, 1, &hit))
		fail_msg("instance B found nothing in the pool");
	pf_fetch(f, 1, &hit, 20, 3, 7);
	ev = pf_next_event(f->inst[1].store, 30000);
	assert_int_equal(ev.kind, SEL_EVENT_FETCH_FAILED);
	if (!strstr(ev.why, "refused"))
		fail_msg("the refused claim's fetch says: %s", ev.why);
	print_message("the refused claim: %s\n", ev.why);
	shard_pool_link_counts(&after);
	assert_int_equal(after.early_claims, before.early_claims + 1);
	assert_int_equal(after.arena_claims, before.arena_claims);
	assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
	assert_int_equal(st.pool_attached, 1);
	assert_int_equal(st.pool_claims, 1);
	assert_int_equal(st.pool_refusals, 1);
	claim_from_arena(f, 1);
	pf_instance_close(f, 1);
	peer_claimed_from_arena(f, 1, 2); /* never asked for the refused claim's share */
}

/*
 * The manager is restarted: a new arena (another file, id and generation).
 * The instance attached to the old one loses its pool and finds nothing
 * (never the old arena's bytes); a new instance claims from the new arena,
 * byte-exact, after A put the chain there again.
 */
static void test_pool_attach_restarted_manager_new_arena(void **state)
{
	struct pf_fixture *f = *state;
	struct sel_stats st;
	struct sel_event ev;
	struct sel_hit hit;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	cascade_then_open(f, 1, &big_disk);
	claim_from_arena(f, 1);
	pf_manager_kill(&f->manager);
	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	/* B's connection is gone: its pool turns off and answers nothing */
	for (int i = 0; i < 200; i++) {
		assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
		if (!st.pool_attached)
			break;
		sel_poll(f->inst[1].store, &ev, 10);
	}
	assert_int_equal(st.pool_attached, 0);
	pf_history_renew(f, 1);
	assert_false(sel_lookup(f->inst[1].store, f->inst[1].h, 0, &hit));
	assert_false(sel_lookup_pending(f->inst[1].store, f->inst[1].h));
	pf_instance_close(f, 1);
	peer_claimed_from_arena(f, 1, 1);
	/* the new manager's arena serves, once A (its disk emptied) put the chain again */
	tu_remove_tree(strdup(f->inst[0].dir));
	cascade_then_open(f, 2, &big_disk);
	claim_from_arena(f, 2);
	pf_instance_close(f, 2);
	peer_claimed_from_arena(f, 2, 1);
}

/* An instance of another layout (a larger row) attaches and never matches A's records. */
static void test_pool_attach_other_layout_never_matches(void **state)
{
	struct pf_fixture *f = *state;
	struct pf_variant other = big_disk;
	struct sel_stats st;
	struct sel_hit hit;

	other.row_bytes = 2 * PF_ROW;
	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	cascade_then_open(f, 2, &other);
	assert_int_equal(sel_store_stats(f->inst[2].store, &st), 0);
	assert_int_equal(st.pool_attached, 1); /* attached, to a scope of its own */
	assert_false(lookup_pool(f, 2, &hit));
	pf_instance_close(f, 2);
}

/* No manager at the address: one warning at open, local tiers only, which serve. */
static void test_pool_attach_manager_absent(void **state)
{
	struct pf_fixture *f = *state;
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
	snprintf(f->manager.address, sizeof(f->manager.address), "127.0.0.1:%u", ntohs(addr.sin_port));
	sel_log_set_level(SEL_LOG_WARN);
	sel_log_set_callback(catch_warning, &wc);
	pf_instance_open(f, 0, &small_disk);
	sel_log_set_callback(NULL, NULL);
	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(wc.pool_warnings, 1);
	assert_non_null(strstr(wc.last, "not attached"));
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_attached, 0);
	pf_fill(f, 0);
	pf_publish_chain(f, 0, 10, true);
	assert_true(sel_lookup(f->inst[0].store, f->inst[0].h, 0, &hit));
	assert_false(sel_lookup_pending(f->inst[0].store, f->inst[0].h));
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_puts, 0);
	pf_instance_close(f, 0);
}

/* Rank one proves another secret: the manager refuses it, the instance runs local. */
static void test_pool_attach_wrong_secret_on_a_peer(void **state)
{
	struct pf_fixture *f = *state;
	struct warn_catch wc = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct pf_variant v = small_disk;
	struct sel_stats st;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	v.wrong_secret_peer = true;
	sel_log_set_level(SEL_LOG_WARN);
	sel_log_set_callback(catch_warning, &wc);
	pf_instance_open(f, 0, &v);
	sel_log_set_callback(NULL, NULL);
	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(wc.pool_warnings, 1);
	assert_non_null(strstr(wc.last, "rank 1"));
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_attached, 0);
	pf_fill(f, 0);
	pf_publish_chain(f, 0, 30, true); /* evicts as without a pool */
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_puts, 0);
	pf_instance_close(f, 0);
}

/*
 * The manager stops answering once B asked for a claim, then is killed:
 * the fetch fails (the caller recomputes, no byte is claimed restored) and
 * B keeps serving from its local tiers.
 */
static void test_pool_attach_manager_killed_mid_claim(void **state)
{
	struct pf_fixture *f = *state;
	struct sel_event ev;
	struct warn_catch wc = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct sel_hit hit, local;
	struct sel_stats st;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	cascade_then_open(f, 1, &big_disk);
	if (!lookup_pool(f, 1, &hit))
		fail_msg("instance B found nothing in the pool");
	kill(f->manager.pid, SIGSTOP);
	pf_fetch(f, 1, &hit, 20, 3, 7);
	usleep(100000);
	sel_log_set_level(SEL_LOG_WARN);
	sel_log_set_callback(catch_warning, &wc);
	pf_manager_kill(&f->manager);
	ev = pf_next_event(f->inst[1].store, 30000);
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
	pf_fill(f, 1);
	pf_publish_chain(f, 1, 10, true);
	pf_history_renew(f, 1);
	assert_true(sel_lookup(f->inst[1].store, f->inst[1].h, 0, &local));
	assert_int_equal(local.consumed, 10 * PF_PAGE_TOKENS);
	pf_fetch_restores(f, 1, &local, 20, 1, 8, 10000, "local fetch");
	pf_instance_close(f, 1);
}

/*
 * R-POOL-52: the manager stops answering (stopped, not killed: its
 * connections stay open) once B asked for a claim: the fetch fails within
 * the no-progress timeout, saying the manager sent nothing, not at a
 * deadline of seconds more or never.
 */
static void test_pool_attach_silent_manager_fails_claim(void **state)
{
	struct pf_fixture *f = *state;
	struct sel_event ev;
	struct sel_hit hit;
	struct sel_stats st;
	uint64_t start;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	cascade_then_open(f, 1, &big_disk);
	if (!lookup_pool(f, 1, &hit))
		fail_msg("instance B found nothing in the pool");
	kill(f->manager.pid, SIGSTOP);
	start = sel_monotonic_ns();
	pf_fetch(f, 1, &hit, 20, 3, 7);
	ev = pf_next_event(f->inst[1].store, 30000);
	assert_int_equal(ev.kind, SEL_EVENT_FETCH_FAILED);
	assert_true(sel_monotonic_ns() - start < (POOL_NO_PROGRESS_MS + 2000ull) * 1000000ull);
	if (!strstr(ev.why, "sent nothing"))
		fail_msg("the failed claim says: %s", ev.why);
	assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
	assert_int_equal(st.pool_claim_failures, 1);
	assert_int_equal(st.pool_claims, 0);
	pf_manager_kill(&f->manager);
	pf_instance_close(f, 1);
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
	struct pf_fixture *f = *state;
	uint16_t port;
	struct sel_stats st;
	struct sel_hit hit;

	port = pf_manager_start_fixed(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	pf_instance_open(f, 0, &small_disk);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_attached, 1);
	pf_manager_kill(&f->manager);
	if (!poll_attached(f->inst[0].store, 0, 10000))
		fail_msg("instance A did not see its session end");
	/* the port stays free: below the ephemeral range, and A's tries only connect */
	if (!pf_manager_try_start(&f->manager, port, MANAGER_NAME, MANAGER_ARENA_BYTES))
		fail_msg("the manager could not listen on port %u again", port);
	if (!poll_attached(f->inst[0].store, 1, 20000))
		fail_msg("instance A did not reattach to the restarted manager");
	pf_fill(f, 0);
	pf_publish_chain(f, 0, 30, true);
	settle(f->inst[0].store, 1);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	if (st.pool_puts == 0)
		fail_msg("no pool put after the reattach (failures %llu, refusals %llu)",
			 (unsigned long long)st.pool_put_failures,
			 (unsigned long long)st.pool_refusals);
	assert_int_equal(st.pool_put_failures, 0);
	pf_instance_close(f, 0);
	pf_instance_open(f, 1, &big_disk);
	if (!lookup_pool(f, 1, &hit))
		fail_msg("instance B found nothing in the restarted pool");
	pf_fetch_restores(f, 1, &hit, 20, 3, 7, 20000, "pool fetch after the restart");
	pf_instance_close(f, 1);
}

/*
 * R-POOL-110: rank one's own connection is cut (failpoint pool.link_cut,
 * in its process only) before its first share on instance A, and again
 * before its first on instance B, while rank zero's session stays up: each
 * time the rank reconnects and the instance keeps using the pool. A's puts
 * after the cut reach the manager, and B's claims, its rank one cut just
 * before its first share (which fails without waiting for the reconnect),
 * restore them byte-exact on both ranks. The reconnect runs on a thread of
 * rank one's own, so a put or fetch may fail until it is done (each
 * failure is the cut's): they are tried again, 100 ms apart, up to
 * RECONNECT_TRIES_MAX times, so the order is what is tested, not a time.
 */
#define RECONNECT_TRIES_MAX 100
static void test_pool_attach_peer_reconnects_alone(void **state)
{
	static const struct pf_variant cut_small = { .row_bytes = PF_ROW, .disk_limit = 320u << 10,
						   .peer_failpoints = "pool.link_cut=1*return" };
	static const struct pf_variant cut_big = { .row_bytes = PF_ROW, .disk_limit = 64u << 20,
						 .peer_failpoints = "pool.link_cut=1*return" };
	struct pf_fixture *f = *state;
	struct sel_stats st;
	struct sel_event ev;
	struct sel_hit hit;
	uint32_t tries;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	pf_instance_open(f, 0, &cut_small);
	pf_fill(f, 0);
	pf_publish_chain(f, 0, 30, true);
	settle(f->inst[0].store, 1);
	/*
	 * The put whose share met the cut may fail, dropping its record and
	 * what extends it: the chain is published again, and goes through.
	 */
	for (tries = 0; tries < RECONNECT_TRIES_MAX; tries++) {
		pf_publish_chain(f, 0, 30, true);
		settle(f->inst[0].store, 2);
		assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
		if (st.pool_puts >= 1)
			break;
		usleep(100000);
	}
	print_message("puts %llu, failures %llu, chain published %u times after the cut\n",
		      (unsigned long long)st.pool_puts, (unsigned long long)st.pool_put_failures,
		      tries + 1);
	assert_int_equal(st.pool_attached, 1);
	if (st.pool_puts < 1)
		fail_msg("%llu pool puts after rank one's cut (failures %llu)",
			 (unsigned long long)st.pool_puts,
			 (unsigned long long)st.pool_put_failures);
	pf_instance_close(f, 0);
	pf_instance_open(f, 1, &cut_big);
	pf_wipe(f, 1);
	if (!lookup_pool(f, 1, &hit))
		fail_msg("instance B found nothing in the pool");
	/*
	 * Rank one meets the cut and fails its share at once, reconnecting
	 * meanwhile on a thread of its own (its transfer thread never waits
	 * for the manager): the claim fails and the request would recompute.
	 * The next fetch of the chain finds the rank reconnected.
	 */
	pf_fetch(f, 1, &hit, 20, 3, 7);
	ev = pf_next_event(f->inst[1].store, 20000);
	for (tries = 0; ev.kind == SEL_EVENT_FETCH_FAILED; tries++) {
		assert_non_null(strstr(ev.why, "pool.link_cut"));
		if (tries == RECONNECT_TRIES_MAX)
			fail_msg("rank one did not reconnect: %s", ev.why);
		usleep(100000);
		pf_wipe(f, 1);
		if (!lookup_pool(f, 1, &hit))
			fail_msg("instance B found nothing in the pool after rank one's cut");
		pf_fetch(f, 1, &hit, 20, 3, 8 + tries);
		ev = pf_next_event(f->inst[1].store, 20000);
	}
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("pool fetch across rank one's cut: %d %s", ev.kind, ev.why);
	pf_check_restored(f, 1, &hit, 20, 3);
	assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
	assert_int_equal(st.pool_attached, 1);
	/* the failed fetches', and the cut share's */
	assert_true(st.pool_claim_failures <= tries + 1);
	pf_instance_close(f, 1);
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
	struct pf_fixture *f = *state;
	uint32_t reattached = 0;
	struct sel_stats st;
	struct sel_event ev;
	uint64_t puts;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	pf_instance_open(f, 0, &small_disk);
	pf_fill(f, 0);
	/* after the peer's fork: rank zero's link only */
	assert_int_equal(sel_failpoints_configure("pool.link_cut=1*return"), 0);
	sel_log_set_level(SEL_LOG_INFO);
	sel_log_set_callback(catch_reattached, &reattached);
	pf_publish_chain(f, 0, 30, true);
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
	pf_publish_chain(f, 0, 30, true);
	settle(f->inst[0].store, puts + 1);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	if (st.pool_puts <= puts)
		fail_msg("no pool put after the reattach (failures %llu)",
			 (unsigned long long)st.pool_put_failures);
	pf_instance_close(f, 0);
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
	struct pf_fixture *f = *state;
	struct close_catch cc = { .lock = PTHREAD_MUTEX_INITIALIZER, .model = pthread_self() };
	struct sel_stats st;
	struct sel_event ev;
	uint32_t closed = 0;
	uint16_t port;

	port = pf_manager_start_fixed(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	pf_instance_open(f, 0, &small_disk);
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_attached, 1);
	/* after the peer's fork: only this process's links log it */
	assert_int_equal(sel_failpoints_configure("pool.link_close=print"), 0);
	sel_log_set_level(SEL_LOG_INFO);
	sel_log_set_callback(catch_close, &cc);
	pf_manager_kill(&f->manager);
	if (!poll_attached(f->inst[0].store, 0, 10000))
		fail_msg("instance A did not see its session end");
	if (!pf_manager_try_start(&f->manager, port, MANAGER_NAME, MANAGER_ARENA_BYTES))
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
	pf_instance_close(f, 0);
}

static int setup(void **state)
{
	return pf_setup(state, "pool-attach", false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pool_attach_cascade_then_restore_elsewhere,
						setup, pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_same_host_claim_copies_early,
						setup, pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_early_claim_refused, setup,
						pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_same_host_claims_from_arena,
						setup, pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_restarted_manager_new_arena,
						setup, pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_other_layout_never_matches,
						setup, pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_manager_absent, setup,
						pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_wrong_secret_on_a_peer, setup,
						pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_manager_killed_mid_claim, setup,
						pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_silent_manager_fails_claim, setup,
						pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_peer_reconnects_alone, setup,
						pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_session_cut_reattaches, setup,
						pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_swap_closes_off_the_model_thread,
						setup, pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_attach_reattaches_after_manager_restart,
						setup, pf_teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("pool_attach", tests, NULL, NULL);
}
