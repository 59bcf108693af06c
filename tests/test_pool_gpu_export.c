/*
 * Exports of GPU checkpoints on loopback (pool/PROTOCOL.md R-POOL-77 ..
 * R-POOL-79; docs/DESIGN.md section 13; include/selene/store.h from
 * sel_gpu_hold on): a manager (a child process, its counters copied to
 * shared memory) and single-rank instances on the host device, here
 * through the public store API. Instance A stores nothing: it only offers
 * a checkpoint its "GPU" holds; instance B's lookup makes the manager ask
 * A, A's poll hands the request to the engine (this test), which pins
 * and answers; the store copies the pinned pages into a put, and B
 * restores them byte-exact into other page ids. Refusals, bad answers, a
 * put the manager refuses and a manager killed mid-export each end the
 * export once, never with a second release.
 */
#include "tests/pool_fixture.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/limits.h"
#include "common/log.h"
#include "pool/manager.h"
#include "selene/store.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define UNIT 8192u
#define PAGES 96u
#define ROWS 4u
#define ROW 8192u
#define TOKENS 6000u
#define PAGE_TOKENS 64u
#define CKPT_PAGES 40u /* the offered checkpoint: 40 pages, 40 * 16 KiB */
#define CKPT 4242u     /* its id */
#define MANAGER_NAME "gpu-export-test"

struct rank_memory {
	uint8_t planes[2][PAGES * UNIT];
	uint8_t rows[ROWS * ROW];
};

struct instance {
	char dir[400];
	struct rank_memory *mem;
	sel_store *store;
	sel_history *h;
};

/* What the test's "engine" saw of A's exports. */
struct engine {
	uint32_t requested, ended, ended_ok;
	uint64_t last_export, ended_export, ended_checkpoint, requested_tokens;
	int ended_error;
	int answer;          /* 0: pin and answer; else refuse with it */
	uint32_t pins;       /* pins it holds (each until its EXPORT_ENDED) */
	uint32_t pins_taken; /* exports sel_export_pinned took */
	uint64_t slowest_call_ns; /* the longest Selene call it made */
};

struct fixture {
	char *base;
	struct pf_manager manager; /* its counters copied */
	char secret[512];
	uint32_t tokens[TOKENS];
	struct instance inst[2];
	struct engine engine;
};

static uint8_t page_byte(uint32_t page, int plane)
{
	return (uint8_t)(page * 8 + (uint32_t)plane + 1);
}

/* Opens instance i (one rank, the host device) and its history of f->tokens. */
static void instance_open(struct fixture *f, uint32_t i)
{
	struct instance *in = &f->inst[i];
	struct rec_identity model;
	struct sel_plane planes[2];
	struct sel_store_config c;
	char err[512] = "";

	snprintf(in->dir, sizeof(in->dir), "%.300s/instance%u", f->base, i);
	in->mem = calloc(1, sizeof(*in->mem));
	assert_non_null(in->mem);
	tu_identities(&model, NULL);
	for (int p = 0; p < 2; p++)
		planes[p] = (struct sel_plane){ p ? "v" : "k", UNIT, (uintptr_t)in->mem->planes[p] };
	c = (struct sel_store_config){
		.dir = in->dir, .page_tokens = PAGE_TOKENS, .page_plane_count = 2,
		.page_planes = planes, .row_plane = { "state", ROW, (uintptr_t)in->mem->rows },
		.page_count = PAGES, .row_count = ROWS, .device = "host",
		.disk_limit_bytes = 64u << 20, .durable = false, .records_max = 1000,
		.pool = f->manager.address, .pool_secret_file = f->secret,
	};
	memcpy(c.model_identity, model.bytes, 32);
	if (sel_store_open(&c, &in->store, err, sizeof(err)) != 0)
		fail_msg("instance %u: %s", i, err);
	assert_int_equal(sel_history_create(in->store, f->tokens, TOKENS, &in->h), 0);
}

static void instance_close(struct fixture *f, uint32_t i)
{
	struct instance *in = &f->inst[i];

	sel_history_destroy(in->h);
	in->h = NULL;
	if (in->store)
		assert_int_equal(sel_store_close(in->store, 10000), 0);
	in->store = NULL;
	free(in->mem);
	in->mem = NULL;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->base = tu_make_temp_dir("pool-gpu-export");
	assert_true(strlen(f->base) < 300);
	pf_manager_view_open(&f->manager);
	tu_tokens(f->tokens, TOKENS, 31337);
	snprintf(f->secret, sizeof(f->secret), "%s/pool.secret", f->base);
	pf_write_secret(f->secret, 0x5a);
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	for (uint32_t i = 0; i < 2; i++) {
		sel_history_destroy(f->inst[i].h);
		if (f->inst[i].store)
			sel_store_close(f->inst[i].store, 5000);
		free(f->inst[i].mem);
	}
	pf_manager_kill(&f->manager);
	sel_failpoints_configure(NULL);
	pf_manager_view_close(&f->manager);
	tu_remove_tree(f->base);
	sel_log_set_level(SEL_LOG_INFO);
	free(f);
	return 0;
}

/* A's "GPU": page p's planes hold their pattern, row slot 1 its own. */
static void fill(struct instance *in)
{
	for (uint32_t p = 0; p < PAGES; p++)
		for (int k = 0; k < 2; k++)
			tu_fill(in->mem->planes[k] + p * UNIT, UNIT, page_byte(p, k));
	tu_fill(in->mem->rows + 1 * ROW, ROW, 777);
}

static void note_call(struct engine *e, uint64_t start)
{
	uint64_t took = sel_monotonic_ns() - start;

	if (took > e->slowest_call_ns)
		e->slowest_call_ns = took;
}

/*
 * The engine's side of A's poll: an export request is answered in the same
 * iteration (pages 10 .. 10 + n - 1 pinned: the checkpoint's pages live
 * there, row slot 1), and an end releases the pin.
 */
static void engine_poll(struct fixture *f)
{
	struct engine *e = &f->engine;
	sel_store *s = f->inst[0].store;
	struct sel_event ev;
	uint64_t start = sel_monotonic_ns();
	uint32_t got = sel_poll(s, &ev, 1);

	note_call(e, start);
	if (got == 0)
		return;
	if (ev.kind == SEL_EVENT_EXPORT_REQUESTED) {
		uint32_t ids[PAGES];

		assert_int_equal(ev.checkpoint, CKPT);
		e->requested++;
		e->last_export = ev.id;
		e->requested_tokens = ev.tokens;
		if (e->answer) {
			start = sel_monotonic_ns();
			assert_int_equal(sel_export_refuse(s, ev.id, e->answer), 0);
			note_call(e, start);
			return;
		}
		for (uint32_t p = 0; p < ev.tokens / PAGE_TOKENS; p++)
			ids[p] = 10 + p;
		start = sel_monotonic_ns();
		if (sel_export_pinned(s, ev.id, ids, (uint32_t)(ev.tokens / PAGE_TOKENS), 1) == 0) {
			e->pins++;
			e->pins_taken++;
		} /* else not taken: released at once */
		note_call(e, start);
	} else if (ev.kind == SEL_EVENT_EXPORT_ENDED) {
		if (e->pins == 0)
			fail_msg("EXPORT_ENDED for export %llu with no pin held",
				 (unsigned long long)ev.id);
		e->pins--;
		e->ended++;
		e->ended_ok += ev.error == 0;
		e->ended_export = ev.id;
		e->ended_checkpoint = ev.checkpoint;
		e->ended_error = ev.error;
	} else {
		fail_msg("A: unexpected event %d (%s)", ev.kind, ev.why);
	}
}

/* Polls A (the holder) for ms milliseconds. */
static void holder_polls(struct fixture *f, uint32_t ms)
{
	for (uint32_t i = 0; i < ms; i++) {
		engine_poll(f);
		usleep(1000);
	}
}

/* Polls A until the manager holds want announcements, or 10 s. */
static void wait_holds(struct fixture *f, uint64_t want)
{
	for (int k = 0; k < 10000 && pf_manager_stats(&f->manager).holds != want; k++) {
		engine_poll(f);
		usleep(1000);
	}
	assert_int_equal(pf_manager_stats(&f->manager).holds, want);
}

/*
 * B asks the pool with a fresh history of the tokens, A polling meanwhile
 * (its engine answering), until a pool hit or ms pass.
 */
static bool lookup_while_holder_polls(struct fixture *f, struct sel_hit *hit, uint32_t ms)
{
	struct instance *b = &f->inst[1];
	uint64_t end = sel_monotonic_ns() + ms * 1000000ull;
	struct sel_event ev;

	while (sel_monotonic_ns() < end) {
		sel_history_destroy(b->h);
		assert_int_equal(sel_history_create(b->store, f->tokens, TOKENS, &b->h), 0);
		for (;;) {
			if (sel_lookup(b->store, b->h, 0, hit))
				return true;
			if (!sel_lookup_pending(b->store, b->h))
				break;
			usleep(100);
			sel_poll(b->store, &ev, 0);
		}
		for (int i = 0; i < 10; i++) {
			engine_poll(f);
			sel_poll(b->store, &ev, 0);
			usleep(1000);
		}
	}
	return false;
}

/* Polls A until the engine saw want requests, or ms. */
static void wait_requests(struct fixture *f, uint32_t want, uint32_t ms)
{
	struct sel_hit hit;

	/* B's lookups make the manager ask */
	for (uint64_t end = sel_monotonic_ns() + ms * 1000000ull;
	     f->engine.requested < want && sel_monotonic_ns() < end;)
		(void)lookup_while_holder_polls(f, &hit, 50);
	assert_true(f->engine.requested >= want);
}

/* A offers its checkpoint of pages pages and the manager knows of it. */
static void offer(struct fixture *f, uint32_t pages)
{
	struct instance *a = &f->inst[0];

	fill(a);
	assert_int_equal(sel_gpu_hold(a->store, CKPT, a->h, pages * PAGE_TOKENS), 0);
	wait_holds(f, 1);
}

/*
 * Polls A until every export whose pin it took has ended, or 5 s: at
 * least one was taken, each ended, none well, the last with error.
 */
static void wait_failed_ends(struct fixture *f, int error)
{
	for (int k = 0; k < 5000 && f->engine.ended < f->engine.pins_taken; k++) {
		engine_poll(f);
		usleep(1000);
	}
	assert_true(f->engine.pins_taken >= 1);
	assert_int_equal(f->engine.ended, f->engine.pins_taken);
	assert_int_equal(f->engine.ended_ok, 0);
	assert_int_equal(f->engine.ended_error, error);
}

/*
 * Takes A's next export request by hand: B asks again with a fresh
 * history every 2 ms while A is polled, for up to ms. With strict, any
 * other event A takes fails the test; without, it is passed over.
 */
static struct sel_event take_request_by_hand(struct fixture *f, uint32_t ms, bool strict)
{
	struct instance *b = &f->inst[1];
	uint64_t end = sel_monotonic_ns() + ms * 1000000ull;
	struct sel_event ev;
	struct sel_hit hit;

	for (;;) {
		assert_true(sel_monotonic_ns() < end);
		sel_history_destroy(b->h);
		assert_int_equal(sel_history_create(b->store, f->tokens, TOKENS, &b->h), 0);
		(void)sel_lookup(b->store, b->h, 0, &hit);
		usleep(2000);
		if (sel_poll(f->inst[0].store, &ev, 1) != 1)
			continue;
		if (strict)
			assert_int_equal(ev.kind, SEL_EVENT_EXPORT_REQUESTED);
		if (ev.kind == SEL_EVENT_EXPORT_REQUESTED)
			return ev;
	}
}

/*
 * A GPU checkpoint A offered, and never stored, reaches B: A's engine
 * sees the request through sel_poll, pins and answers; the store copies
 * the pinned pages and row into a put; EXPORT_ENDED comes once, with the
 * checkpoint; B restores the chain byte-exact into other page ids and
 * another row slot. No Selene call of A's engine waited for the put.
 */
static void test_pool_gpu_export_restores_an_offered_checkpoint(void **state)
{
	struct fixture *f = *state;
	struct instance *a, *b;
	struct sel_stats st;
	struct sel_event ev;
	struct sel_hit hit;
	uint8_t expect[UNIT];
	uint32_t ids[PAGES];
	bool joined;

	pf_manager_start(&f->manager, MANAGER_NAME, 16u << 20);
	instance_open(f, 0);
	instance_open(f, 1);
	a = &f->inst[0];
	b = &f->inst[1];
	memset(b->mem, 0xee, sizeof(*b->mem));
	/* bad offers change nothing */
	assert_int_equal(sel_gpu_hold(a->store, 1, a->h, 0), -EINVAL);
	assert_int_equal(sel_gpu_hold(a->store, 1, a->h, TOKENS + 1), -EINVAL);
	assert_int_equal(sel_gpu_hold(a->store, 1, a->h, PAGE_TOKENS - 1), -EINVAL);
	assert_int_equal(sel_gpu_hold(NULL, 1, a->h, 64), -EINVAL);
	assert_int_equal(sel_gpu_evicted(a->store, 99), SEL_ENOTFOUND);
	offer(f, CKPT_PAGES);
	assert_int_equal(sel_gpu_hold(a->store, CKPT, a->h, 64), -EEXIST);

	if (!lookup_while_holder_polls(f, &hit, 20000))
		fail_msg("B never found A's checkpoint (asked %u, ended %u, manager failed %llu)",
			 f->engine.requested, f->engine.ended,
			 (unsigned long long)pf_manager_stats(&f->manager).exports_failed);
	assert_int_equal(hit.consumed, CKPT_PAGES * PAGE_TOKENS);
	assert_int_equal(f->engine.requested, 1);
	assert_int_equal(f->engine.requested_tokens, CKPT_PAGES * PAGE_TOKENS);
	holder_polls(f, 200);
	assert_int_equal(f->engine.ended, 1);
	assert_int_equal(f->engine.ended_ok, 1);
	assert_int_equal(f->engine.ended_export, f->engine.last_export);
	assert_int_equal(f->engine.ended_checkpoint, CKPT);
	assert_int_equal(f->engine.pins, 0);
	/* answering again, or an unknown export, is refused and changes nothing */
	ids[0] = 0;
	assert_int_equal(sel_export_pinned(a->store, f->engine.last_export, ids, 1, 0),
			 SEL_ENOTFOUND);
	assert_int_equal(sel_export_refuse(a->store, f->engine.last_export, SEL_ENOTFOUND),
			 SEL_ENOTFOUND);
	assert_int_equal(sel_export_pinned(a->store, 987654, ids, 1, 0), SEL_ENOTFOUND);
	assert_int_equal(sel_export_pinned(a->store, 0, NULL, 0, 0), SEL_ENOTFOUND);
	/* never waited: each call well below one round of the put's work */
	if (f->engine.slowest_call_ns > 100000000ull)
		fail_msg("a call of A's engine took %llu ns",
			 (unsigned long long)f->engine.slowest_call_ns);

	/* B restores it into pages 50.. and row slot 3, byte-exact */
	for (uint32_t p = 0; p < hit.page_count; p++)
		ids[p] = 50 + p;
	assert_int_equal(sel_fetch(b->store, &hit, ids, 3, 7, &joined), 0);
	for (int k = 0; k < 20000; k++) {
		if (sel_poll(b->store, &ev, 1) == 1)
			break;
		usleep(1000);
	}
	if (ev.kind != SEL_EVENT_FETCHED)
		fail_msg("pool fetch: %d %s", ev.kind, ev.why);
	for (uint32_t p = 0; p < CKPT_PAGES; p++)
		for (int k = 0; k < 2; k++) {
			tu_fill(expect, UNIT, page_byte(10 + p, k));
			if (memcmp(expect, b->mem->planes[k] + (50 + p) * UNIT, UNIT) != 0)
				fail_msg("page %u plane %d differs", p, k);
		}
	tu_fill(expect, ROW, 777);
	assert_memory_equal(expect, b->mem->rows + 3 * ROW, ROW);
	assert_int_equal(sel_store_stats(b->store, &st), 0);
	assert_int_equal(st.pool_claims, 1);
	assert_int_equal(sel_store_stats(a->store, &st), 0);
	assert_int_equal(st.pool_puts, 1);
	assert_int_equal(st.records, 0); /* A stored nothing: the GPU's bytes went */

	/* evicted: withdrawn from the manager */
	assert_int_equal(sel_gpu_evicted(a->store, CKPT), 0);
	wait_holds(f, 0);
	assert_int_equal(sel_gpu_evicted(a->store, CKPT), SEL_ENOTFOUND);
	instance_close(f, 1);
	instance_close(f, 0);
}

/*
 * The engine refuses: no headroom keeps the offer (the manager counts a
 * failed export), not found withdraws it (a refusal); bad answers are
 * refused without ending anything twice, and an export whose pinned answer
 * was refused gets no end event.
 */
static void test_pool_gpu_export_refusals(void **state)
{
	struct fixture *f = *state;
	struct instance *a;
	uint32_t ids[PAGES];
	uint64_t failed;

	pf_manager_start(&f->manager, MANAGER_NAME, 16u << 20);
	instance_open(f, 0);
	instance_open(f, 1);
	a = &f->inst[0];
	offer(f, CKPT_PAGES);

	f->engine.answer = -ENOSPC;
	wait_requests(f, 1, 10000);
	for (int k = 0; k < 5000 && pf_manager_stats(&f->manager).exports_failed == 0; k++)
		usleep(1000);
	assert_true(pf_manager_stats(&f->manager).exports_failed >= 1);
	assert_int_equal(pf_manager_stats(&f->manager).exports_refused, 0);
	assert_int_equal(pf_manager_stats(&f->manager).holds, 1); /* still offered */

	/* a bad answer: a reason the API does not know; then a page count that is wrong */
	f->engine.answer = 0;
	f->engine.requested = 0;
	{
		/* take the next request by hand */
		struct sel_event ev = take_request_by_hand(f, 10000, true);

		failed = pf_manager_stats(&f->manager).exports_failed;
		assert_int_equal(sel_export_refuse(a->store, ev.id, -EIO), -EINVAL);
		for (uint32_t p = 0; p < PAGES; p++)
			ids[p] = p;
		assert_int_equal(sel_export_pinned(a->store, ev.id, ids, CKPT_PAGES - 1, 1),
				 -EINVAL);
		/* over: a second answer finds nothing, and no end event comes */
		assert_int_equal(sel_export_pinned(a->store, ev.id, ids, CKPT_PAGES, 1),
				 SEL_ENOTFOUND);
		for (int k = 0; k < 300; k++) {
			assert_int_equal(sel_poll(a->store, &ev, 1), 0);
			usleep(1000);
		}
	}
	for (int k = 0; k < 5000 && pf_manager_stats(&f->manager).exports_failed <= failed; k++)
		usleep(1000);
	assert_int_equal(pf_manager_stats(&f->manager).exports_failed, failed + 1);

	/* not found: the offer goes with it */
	f->engine.answer = SEL_ENOTFOUND;
	f->engine.requested = 0;
	wait_requests(f, 1, 10000);
	for (int k = 0; k < 5000 && pf_manager_stats(&f->manager).exports_refused == 0; k++)
		usleep(1000);
	assert_int_equal(pf_manager_stats(&f->manager).exports_refused, 1);
	wait_holds(f, 0);
	assert_int_equal(sel_gpu_evicted(a->store, CKPT), SEL_ENOTFOUND);
	assert_int_equal(f->engine.ended, 0);
	instance_close(f, 1);
	instance_close(f, 0);
}

/*
 * A put that fails still ends the export, exactly once: the manager's
 * arena cannot take the share (PUT_READY -ENOSPC), a rank's copy fails
 * (failpoint pool.export_copy: the manager keeps nothing), and a manager
 * is killed while the copy runs. The engine's pin is released by the end
 * event only; evictions lost withdraw every offer,
 * and offers past POOL_GPU_HOLDS_MAX are refused.
 */
static void test_pool_gpu_export_failed_put_ends_once(void **state)
{
	struct fixture *f = *state;
	struct instance *a;

	/* 1 MiB of arena; the share is 80 pages of 16 KiB and more */
	pf_manager_start(&f->manager, MANAGER_NAME, 1u << 20);
	instance_open(f, 0);
	instance_open(f, 1);
	a = &f->inst[0];
	offer(f, 80);
	wait_requests(f, 1, 10000);
	wait_failed_ends(f, -ENOSPC);
	assert_int_equal(f->engine.pins, 0);
	holder_polls(f, 300);
	assert_int_equal(f->engine.ended, f->engine.pins_taken); /* each once */

	/* evictions lost: every offer withdrawn, the engine offers again */
	assert_int_equal(sel_gpu_evictions_lost(a->store), 0);
	wait_holds(f, 0);
	assert_int_equal(sel_gpu_evicted(a->store, CKPT), SEL_ENOTFOUND);
	/* offers are bounded: the one past POOL_GPU_HOLDS_MAX is refused */
	for (uint64_t ckpt = 1; ckpt <= POOL_GPU_HOLDS_MAX; ckpt++)
		assert_int_equal(sel_gpu_hold(a->store, ckpt, a->h, PAGE_TOKENS), 0);
	assert_int_equal(sel_gpu_hold(a->store, 0, a->h, PAGE_TOKENS), SEL_EQUEUEFULL);
	assert_int_equal(sel_gpu_evicted(a->store, POOL_GPU_HOLDS_MAX), 0);
	/* unpolled, this add finds the HOLDS queue full: a re-announce follows */
	assert_int_equal(sel_gpu_hold(a->store, 0, a->h, PAGE_TOKENS), 0);
	wait_holds(f, 1); /* one key, offered many times */
	assert_int_equal(sel_gpu_evictions_lost(a->store), 0);
	wait_holds(f, 0);
	instance_close(f, 1);
	instance_close(f, 0);
	pf_manager_kill(&f->manager);

	/* a rank's share fails (the copy): the put is abandoned, the end comes once */
	memset(&f->engine, 0, sizeof(f->engine));
	pf_manager_start(&f->manager, MANAGER_NAME, 16u << 20);
	instance_open(f, 0);
	instance_open(f, 1);
	offer(f, CKPT_PAGES);
	assert_int_equal(sel_failpoints_configure("pool.export_copy=return(EIO)"), 0);
	wait_requests(f, 1, 10000);
	wait_failed_ends(f, -EIO);
	holder_polls(f, 300);
	assert_int_equal(f->engine.ended, f->engine.pins_taken);
	assert_int_equal(pf_manager_stats(&f->manager).records, 0); /* nothing partial kept */

	/* the manager dies while the export's copy runs: the end still comes, once */
	assert_int_equal(sel_failpoints_configure("pool.export_copy=sleep(1500)"), 0);
	memset(&f->engine, 0, sizeof(f->engine));
	{
		struct sel_event ev = take_request_by_hand(f, 20000, false);
		uint32_t ids[PAGES];

		for (uint32_t p = 0; p < CKPT_PAGES; p++)
			ids[p] = 10 + p;
		assert_int_equal(sel_export_pinned(f->inst[0].store, ev.id, ids, CKPT_PAGES, 1), 0);
		f->engine.pins = 1;
		f->engine.pins_taken = 1;
		for (int k = 0; k < 300 && sel_failpoint_fired(SEL_FP_POOL_EXPORT_COPY) == 0; k++)
			holder_polls(f, 10);
		assert_true(sel_failpoint_fired(SEL_FP_POOL_EXPORT_COPY) >= 1);
		pf_manager_kill(&f->manager);
		for (int k = 0; k < 15000 && f->engine.ended == 0; k++) {
			engine_poll(f);
			usleep(1000);
		}
		assert_int_equal(f->engine.ended, 1);
		assert_int_not_equal(f->engine.ended_error, 0);
		holder_polls(f, 300);
		assert_int_equal(f->engine.ended, 1);
		assert_int_equal(f->engine.pins, 0);
	}
	assert_int_equal(sel_failpoints_configure(NULL), 0);
	instance_close(f, 1);
	instance_close(f, 0);
}

/* Without a pool every GPU export call answers -ENOTSUP and changes nothing. */
static void test_pool_gpu_export_needs_a_pool(void **state)
{
	struct fixture *f = *state;
	struct rec_identity model;
	struct sel_plane planes[2];
	struct sel_store_config c;
	struct rank_memory *mem = calloc(1, sizeof(*mem));
	char dir[512], err[256];
	sel_store *s;
	sel_history *h;
	uint32_t ids[1] = { 0 };

	assert_non_null(mem);
	snprintf(dir, sizeof(dir), "%.400s/alone", f->base);
	tu_identities(&model, NULL);
	for (int p = 0; p < 2; p++)
		planes[p] = (struct sel_plane){ p ? "v" : "k", UNIT, (uintptr_t)mem->planes[p] };
	c = (struct sel_store_config){
		.dir = dir, .page_tokens = PAGE_TOKENS, .page_plane_count = 2,
		.page_planes = planes, .row_plane = { "state", ROW, (uintptr_t)mem->rows },
		.page_count = PAGES, .row_count = ROWS, .device = "host",
		.disk_limit_bytes = 8u << 20, .records_max = 100,
	};
	memcpy(c.model_identity, model.bytes, 32);
	if (sel_store_open(&c, &s, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(sel_history_create(s, f->tokens, TOKENS, &h), 0);
	assert_int_equal(sel_gpu_hold(s, 1, h, 640), -ENOTSUP);
	assert_int_equal(sel_gpu_evicted(s, 1), -ENOTSUP);
	assert_int_equal(sel_gpu_evictions_lost(s), -ENOTSUP);
	assert_int_equal(sel_export_pinned(s, 1, ids, 1, 0), SEL_ENOTFOUND);
	assert_int_equal(sel_export_refuse(s, 1, SEL_ENOTFOUND), SEL_ENOTFOUND);
	assert_int_equal(sel_export_pinned(NULL, 1, ids, 1, 0), -EINVAL);
	assert_int_equal(sel_export_pinned(s, 1, NULL, 1, 0), -EINVAL);
	sel_history_destroy(h);
	assert_int_equal(sel_store_close(s, 5000), 0);
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pool_gpu_export_restores_an_offered_checkpoint,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_gpu_export_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_gpu_export_failed_put_ends_once, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_gpu_export_needs_a_pool, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
