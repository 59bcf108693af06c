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
#include "tests/pool_fixture.h"

#include "common/base.h"
#include "common/log.h"
#include "pool/client.h"
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

#define MANAGER_NAME "export-test"
#define MANAGER_ARENA_BYTES (64u << 20)

/*
 * Asks the pool from instance asker with a fresh history of the tokens,
 * polling instance holder meanwhile (it answers exports on its polls),
 * until a pool hit or ms pass.
 */
static bool lookup_while_holder_polls(struct pf_fixture *f, uint32_t asker, uint32_t holder,
				      struct sel_hit *hit, uint32_t ms)
{
	struct pf_instance *in = &f->inst[asker];
	uint64_t end = sel_monotonic_ns() + ms * 1000000ull;
	struct sel_event ev;

	while (sel_monotonic_ns() < end) {
		if (pf_lookup_fresh(f, asker, hit))
			return true;
		for (int i = 0; i < 10; i++) {
			sel_poll(f->inst[holder].store, &ev, 0);
			sel_poll(in->store, &ev, 0);
			usleep(1000);
		}
	}
	return false;
}

/* Polls instance i until the manager holds want announcements, or 10 s. */
static void wait_holds(struct pf_fixture *f, uint32_t i, uint64_t want)
{
	struct sel_event ev;

	for (int k = 0; k < 10000 && pf_manager_stats(&f->manager).holds != want; k++) {
		sel_poll(f->inst[i].store, &ev, 0);
		usleep(1000);
	}
	assert_int_equal(pf_manager_stats(&f->manager).holds, want);
}

static const struct pf_variant big_disk = { .row_bytes = PF_ROW, .disk_limit = 64u << 20 };

/*
 * A's chain stays local and is announced; another layout looks it up and
 * asks nothing of A; B's lookup is answered at once without it, the
 * manager asks A, A's two ranks put the chain (A keeps every record), and
 * B restores it byte-exact into other page ids and another row slot. A
 * then still restores the chain from its own disk, byte-exact.
 */
static void test_pool_export_restores_a_holders_records(void **state)
{
	struct pf_fixture *f = *state;
	struct pf_variant other = big_disk;
	struct pool_manager_stats ms;
	struct sel_stats a_before, a_after, st;
	struct sel_event ev;
	struct sel_hit hit;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	pf_instance_open(f, 0, &big_disk);
	pf_fill(f, 0);
	pf_publish_chain(f, 0, 30, false);
	assert_int_equal(sel_store_stats(f->inst[0].store, &a_before), 0);
	assert_int_equal(a_before.pool_attached, 1);
	assert_int_equal(a_before.pool_puts, 0); /* nothing cascades */
	/* every record of the chain has its row here (a root's and an endpoint's kept) */
	wait_holds(f, 0, a_before.records - a_before.truncations);

	/* another layout: attached to a scope of its own, it triggers nothing */
	other.row_bytes = 2 * PF_ROW;
	pf_instance_open(f, 2, &other);
	assert_false(lookup_while_holder_polls(f, 2, 0, &hit, 300));
	assert_int_equal(pf_manager_stats(&f->manager).exports_requested, 0);
	pf_instance_close(f, 2);

	/* B: not yet, at once; then the chain A exported */
	pf_instance_open(f, 1, &big_disk);
	pf_wipe(f, 1);
	pf_history_renew(f, 1);
	if (!lookup_while_holder_polls(f, 1, 0, &hit, 20000))
		fail_msg("instance B never found A's chain (exports asked %llu, refused %llu, "
			 "failed %llu)", (unsigned long long)pf_manager_stats(&f->manager).exports_requested,
			 (unsigned long long)pf_manager_stats(&f->manager).exports_refused,
			 (unsigned long long)pf_manager_stats(&f->manager).exports_failed);
	assert_int_equal(hit.consumed, 30 * PF_PAGE_TOKENS);
	pf_fetch_restores(f, 1, &hit, 20, 3, 7, 20000, "pool fetch");
	assert_int_equal(sel_store_stats(f->inst[1].store, &st), 0);
	assert_int_equal(st.pool_hits, 1);
	assert_int_equal(st.pool_claims, 1);
	for (int k = 0; k < 5000 && pf_manager_stats(&f->manager).exports_completed == 0; k++) {
		sel_poll(f->inst[0].store, &ev, 0);
		usleep(1000);
	}
	ms = pf_manager_stats(&f->manager);
	assert_true(ms.exports_requested >= 1);
	assert_true(ms.exports_completed >= 1);
	assert_int_equal(ms.exports_refused, 0);

	/* A put the chain and kept it: every record, restorable from its own disk */
	assert_int_equal(sel_store_stats(f->inst[0].store, &a_after), 0);
	assert_true(a_after.pool_puts >= 1);
	assert_int_equal(a_after.pool_put_failures, 0);
	assert_int_equal(a_after.records, a_before.records);
	assert_int_equal(a_after.evictions, a_before.evictions);
	pf_wipe(f, 0);
	pf_history_renew(f, 0);
	assert_true(sel_lookup(f->inst[0].store, f->inst[0].h, 0, &hit));
	assert_int_equal(hit.consumed, 30 * PF_PAGE_TOKENS);
	pf_fetch_restores(f, 0, &hit, 20, 2, 7, 20000, "A's local fetch");
	assert_int_equal(sel_store_stats(f->inst[0].store, &st), 0);
	assert_int_equal(st.pool_hits, 0); /* its own disk, not the pool */
	pf_instance_close(f, 1);
	pf_instance_close(f, 0);
	/* the session's end forgot A's announcements */
	for (int k = 0; k < 5000 && pf_manager_stats(&f->manager).holds != 0; k++)
		usleep(1000);
	assert_int_equal(pf_manager_stats(&f->manager).holds, 0);
}

/*
 * Holder i's engine answers its export requests (pinning pages 0 .. n - 1
 * and row slot 0, where fill put them) and counts the ends; 1 when it
 * took an event.
 */
static int gpu_engine_poll(struct pf_fixture *f, uint32_t i, uint32_t *pinned, uint32_t *ended,
			   int *ended_error)
{
	struct sel_event ev;
	uint32_t ids[PF_PAGES];

	if (sel_poll(f->inst[i].store, &ev, 1) != 1)
		return 0;
	if (ev.kind == SEL_EVENT_EXPORT_REQUESTED) {
		assert_int_equal(ev.checkpoint, 77);
		for (uint32_t p = 0; p < ev.tokens / PF_PAGE_TOKENS; p++)
			ids[p] = p;
		if (sel_export_pinned(f->inst[i].store, ev.id, ids,
				      (uint32_t)(ev.tokens / PF_PAGE_TOKENS), 0) == 0)
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
	struct pf_fixture *f = *state;
	struct pf_instance *a, *b;
	struct sel_event ev;
	struct sel_hit hit;
	uint32_t pinned = 0, ended = 0;
	int ended_error = -1;
	uint64_t end;
	bool found = false;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	pf_instance_open(f, 0, &big_disk);
	pf_instance_open(f, 1, &big_disk);
	a = &f->inst[0];
	b = &f->inst[1];
	pf_fill(f, 0);
	pf_wipe(f, 1);
	assert_int_equal(sel_gpu_hold(a->store, 77, a->h, 20 * PF_PAGE_TOKENS), 0);
	wait_holds(f, 0, 1);
	end = sel_monotonic_ns() + 20000000000ull;
	while (!found && sel_monotonic_ns() < end) {
		found = pf_lookup_fresh(f, 1, &hit);
		for (int i = 0; !found && i < 10; i++) {
			while (gpu_engine_poll(f, 0, &pinned, &ended, &ended_error))
				;
			sel_poll(b->store, &ev, 0);
			usleep(1000);
		}
	}
	if (!found)
		fail_msg("B never found A's GPU checkpoint (pinned %u, ended %u, failed %llu)",
			 pinned, ended, (unsigned long long)pf_manager_stats(&f->manager).exports_failed);
	assert_int_equal(hit.consumed, 20 * PF_PAGE_TOKENS);
	for (int k = 0; k < 5000 && ended < pinned; k++) {
		gpu_engine_poll(f, 0, &pinned, &ended, &ended_error);
		usleep(1000);
	}
	assert_int_equal(pinned, 1);
	assert_int_equal(ended, 1);
	assert_int_equal(ended_error, 0);
	pf_fetch_restores(f, 1, &hit, 30, 3, 9, 20000, "pool fetch");
	assert_int_equal(sel_gpu_evicted(a->store, 77), 0);
	wait_holds(f, 0, 0);
	pf_instance_close(f, 1);
	pf_instance_close(f, 0);
}

/*
 * A stranger (the wrong secret) is refused before it can announce or ask
 * anything: the manager requests no export for it and counts an
 * authentication failure.
 */
static void test_pool_export_stranger_refused(void **state)
{
	struct pf_fixture *f = *state;
	struct pool_client_config c = { 0 };
	struct pool_client *client = NULL;
	struct rec_geometry g;
	uint64_t page_bytes[PF_WORLD], row_bytes[PF_WORLD];
	uint8_t wrong[32];
	char why[256];
	int ret;

	pf_manager_start(&f->manager, MANAGER_NAME, MANAGER_ARENA_BYTES);
	pf_instance_open(f, 0, &big_disk);
	pf_fill(f, 0);
	pf_publish_chain(f, 0, 10, false);
	tu_geometry(&g, PF_PAGE_TOKENS, 2, PF_UNIT, PF_ROW, 0, PF_WORLD);
	for (uint32_t r = 0; r < PF_WORLD; r++) {
		page_bytes[r] = g.page_record_bytes;
		row_bytes[r] = g.row_record_bytes;
	}
	memset(wrong, 0x5b, sizeof(wrong));
	c.address = f->manager.address;
	c.secret = wrong;
	c.rank = 0;
	memset(c.instance_id, 0x77, sizeof(c.instance_id));
	c.scope = (struct pool_scope_parts){ .world_size = PF_WORLD, .page_tokens = PF_PAGE_TOKENS,
					     .plane_count = 2, .page_bytes = page_bytes,
					     .row_bytes = row_bytes };
	c.geometry = &g;
	ret = pool_client_open(&c, &client, why, sizeof(why));
	assert_int_equal(ret, -EACCES);
	assert_null(client);
	for (int k = 0; k < 1000 && pf_manager_stats(&f->manager).auth_failures == 0; k++)
		usleep(1000);
	assert_true(pf_manager_stats(&f->manager).auth_failures >= 1);
	assert_int_equal(pf_manager_stats(&f->manager).exports_requested, 0);
	pf_instance_close(f, 0);
}

static int setup(void **state)
{
	return pf_setup(state, "pool-export", true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pool_export_restores_a_holders_records, setup,
						pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_export_stranger_refused, setup,
						pf_teardown),
		cmocka_unit_test_setup_teardown(test_pool_export_gpu_checkpoint_of_two_ranks, setup,
						pf_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
