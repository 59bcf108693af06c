/*
 * selene bench lookup and selene bench api: the coordinator's costs. lookup
 * times index lookups against index size and history length; api times
 * every public call while the disk thread is kept busy with stores.
 */
#include "launch/commands.h"
#include "launch/bench/store.h"

#include "common/base.h"
#include "common/log.h"
#include "coordinator/index.h"
#include "record/key.h"
#include "selene/store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t splitmix(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int compare_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void bench_percentiles(uint64_t *ns, size_t n, double *p50, double *p99)
{
	qsort(ns, n, sizeof(*ns), compare_u64);
	*p50 = (double)ns[n / 2] / 1000.0;
	*p99 = (double)ns[n * 99 / 100] / 1000.0;
}

/*
 * Fills the index with records whose keys and buckets are random (they
 * exercise the hash tables and caches like real ones; no history reaches
 * them), chains of ten per conversation.
 */
static int fill_index(struct coord_index *ix, uint32_t count, uint64_t *seed)
{
	struct rec_key parent = { 0 };

	for (uint32_t i = 0; i < count; i++) {
		struct coord_node_spec spec = { .state = COORD_READY, .row_present = true,
						.bytes = 1 };
		uint32_t id;
		int ret;

		spec.key.consumed = parent.consumed && i % 10 ? parent.consumed + 64 + i % 50 :
								 64 + splitmix(seed) % 1000;
		for (int b = 0; b < 16; b += 8) {
			uint64_t r = splitmix(seed);

			memcpy(spec.key.digest.bytes + b, &r, 8);
			r = splitmix(seed);
			memcpy(spec.bucket.bytes + b, &r, 8);
		}
		spec.parent = parent.consumed && i % 10 ? &parent : NULL;
		spec.first_page_index = spec.parent ? (uint32_t)(parent.consumed / 64) : 0;
		spec.tail_page_count = (uint32_t)(spec.key.consumed / 64) - spec.first_page_index;
		ret = coord_index_insert(ix, &spec, &id);
		if (ret)
			return ret;
		parent = spec.key;
	}
	return 0;
}

/*
 * One conversation of length tokens, with checkpoints every 1000 tokens:
 * a hit at the end has a chain of tokens / 1000 records. Inserted as a
 * scan inserts (links unproven); *ids gets the node ids, *count of them.
 */
static int add_conversation(struct coord_index *ix, const struct rec_history *h,
			    uint32_t *ids, uint32_t *count)
{
	struct rec_key parent = { 0 };

	*count = 0;
	for (uint64_t c = 1000; c <= h->token_count; c += 1000) {
		struct coord_node_spec spec = { .state = COORD_READY, .row_present = true,
						.bytes = 1 };
		uint32_t id;
		int ret;

		rec_history_key_at(h, c, &spec.key);
		spec.bucket = *rec_history_bucket(h, c);
		spec.parent = parent.consumed ? &parent : NULL;
		spec.first_page_index = (uint32_t)(parent.consumed / 64);
		spec.tail_page_count = (uint32_t)(c / 64) - spec.first_page_index;
		ret = coord_index_insert(ix, &spec, &id);
		if (ret)
			return ret;
		ids[(*count)++] = id;
		parent = spec.key;
	}
	return 0;
}

/*
 * Times lookups of h and miss (2000 each), and of h with its chain's links
 * unproven before each (what the first lookup after a scan pays: a hash
 * per link); one line with p50 and p99 of each.
 */
static int bench_lookup_case(uint32_t records, uint64_t tokens, struct coord_lookup *lk)
{
	enum { SAMPLES = 2000 };
	static uint64_t hit_ns[SAMPLES], miss_ns[SAMPLES], cold_ns[SAMPLES];
	struct coord_index ix;
	struct rec_identity model;
	struct rec_history h, miss;
	uint32_t *t = malloc(tokens * sizeof(uint32_t));
	uint32_t *conv = malloc((tokens / 1000 + 1) * sizeof(uint32_t)), conv_count = 0;
	uint64_t seed = 0x5e1e4e + records + tokens;
	double hit50, hit99, miss50, miss99, cold50, cold99;
	int ret;

	if (!t || !conv) {
		free(t);
		free(conv);
		return -ENOMEM;
	}
	rec_model_identity_from_name(&model, "bench");
	for (uint64_t i = 0; i < tokens; i++)
		t[i] = (uint32_t)(splitmix(&seed) % 151936);
	ret = rec_history_init(&h, &model, t, tokens);
	t[tokens - 1500] ^= 1; /* diverges 1500 tokens before the end */
	if (!ret)
		ret = rec_history_init(&miss, &model, t, tokens);
	free(t);
	if (ret) {
		free(conv);
		return ret;
	}
	ret = coord_index_init(&ix, records + (uint32_t)(tokens / 1000) + 1, 64);
	if (!ret)
		ret = fill_index(&ix, records, &seed);
	if (!ret)
		ret = add_conversation(&ix, &h, conv, &conv_count);
	for (int i = 0; !ret && i < SAMPLES; i++) {
		/* a new user message after the last checkpoint: the usual case */
		uint64_t t0 = sel_monotonic_ns();
		bool found = coord_index_lookup(&ix, &h, 0, lk);

		hit_ns[i] = sel_monotonic_ns() - t0;
		if (!found || lk->chain_count != conv_count)
			ret = -EIO;
		/* a history that left the stored one 1500 tokens back */
		t0 = sel_monotonic_ns();
		coord_index_lookup(&ix, &miss, 0, lk);
		miss_ns[i] = sel_monotonic_ns() - t0;
	}
	for (int i = 0; !ret && i < SAMPLES; i++) {
		uint64_t t0;
		bool found;

		for (uint32_t c = 0; c < conv_count; c++)
			coord_index_node(&ix, conv[c])->parent_proven = false;
		t0 = sel_monotonic_ns();
		found = coord_index_lookup(&ix, &h, 0, lk);
		cold_ns[i] = sel_monotonic_ns() - t0;
		if (!found || lk->chain_count != conv_count)
			ret = -EIO;
	}
	if (!ret) {
		bench_percentiles(hit_ns, SAMPLES, &hit50, &hit99);
		bench_percentiles(miss_ns, SAMPLES, &miss50, &miss99);
		bench_percentiles(cold_ns, SAMPLES, &cold50, &cold99);
		printf("lookup: %8u records, %6" PRIu64 " tokens, chain of %4u: hit p50 %6.2f us "
		       "p99 %6.2f us; diverged p50 %6.2f us p99 %6.2f us; links unproven: hit "
		       "p50 %6.2f us p99 %6.2f us\n", records, tokens, conv_count, hit50, hit99,
		       miss50, miss99, cold50, cold99);
	}
	free(conv);
	coord_index_destroy(&ix);
	rec_history_free(&h);
	rec_history_free(&miss);
	return ret;
}

int bench_lookup(void)
{
	static const uint32_t sizes[] = { 1000, 10000, 100000, 1000000 };
	static const uint64_t lengths[] = { 4096, 32768, 131072 };
	struct coord_lookup *lk = malloc(sizeof(*lk));
	int ret = lk ? 0 : -ENOMEM;

	for (size_t s = 0; !ret && s < SEL_ARRAY_SIZE(sizes); s++)
		for (size_t l = 0; !ret && l < SEL_ARRAY_SIZE(lengths); l++)
			ret = bench_lookup_case(sizes[s], lengths[l], lk);
	free(lk);
	return ret;
}

/* Latency samples of one call type. */
struct call_samples {
	const char *name;
	uint64_t *ns;
	size_t count, capacity;
};

static void sample(struct call_samples *c, uint64_t ns)
{
	if (c->count < c->capacity)
		c->ns[c->count++] = ns;
}

int bench_api(const char *dir, double seconds)
{
	enum { PLANES = 8, UNIT = 65536, PAGES = 512, ROWS = 8, TOKENS = 16384,
	       HISTORY_RING = 256 };
	struct sel_plane planes[PLANES];
	struct call_samples calls[4] = { { .name = "publish" }, { .name = "lookup" },
					 { .name = "fetch" }, { .name = "poll" } };
	struct sel_store_config config = {
		.dir = dir, .page_tokens = 64, .page_plane_count = PLANES, .page_planes = planes,
		.row_plane = { .name = "state", .unit_bytes = 1 << 20 },
		.page_count = PAGES, .row_count = ROWS, .device = "host",
		.disk_limit_bytes = 4ull << 30, .durable = false, .records_max = 100000,
	};
	uint32_t *tokens = malloc(TOKENS * sizeof(uint32_t)), ids[PAGES];
	uint64_t seed = 99, deadline, conversation = 0, stored_last = 0;
	sel_store *store = NULL;
	sel_history *ring[HISTORY_RING] = { 0 };
	char err[512];
	int ret;

	for (int p = 0; p < PLANES; p++) {
		planes[p] = (struct sel_plane){ .name = NULL, .unit_bytes = UNIT,
						.device_address = (uintptr_t)calloc(PAGES, UNIT) };
	}
	{
		static char names[PLANES][32];

		for (int p = 0; p < PLANES; p++) {
			snprintf(names[p], sizeof(names[p]), "plane.%d", p);
			planes[p].name = names[p];
		}
	}
	config.row_plane.device_address = (uintptr_t)calloc(ROWS, 1 << 20);
	for (int i = 0; i < 4; i++) {
		calls[i].capacity = 1 << 20;
		calls[i].ns = malloc(calls[i].capacity * sizeof(uint64_t));
	}
	for (uint32_t i = 0; i < PAGES; i++)
		ids[i] = i;
	ret = sel_store_open(&config, &store, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "selene bench api: %s\n", err);
		goto out;
	}
	deadline = sel_monotonic_ns() + (uint64_t)(seconds * 1e9);
	/*
	 * The model thread's loop: new conversations keep the disk thread busy
	 * with 16 MiB records; every iteration publishes, looks up, fetches
	 * what it finds and polls, timing each call.
	 */
	while (!ret && sel_monotonic_ns() < deadline) {
		struct sel_publication pub;
		struct sel_event events[32];
		enum sel_outcome outcome;
		struct sel_hit hit;
		uint64_t t0;
		uint32_t n;
		bool found, joined;

		sel_history **h = &ring[++conversation % HISTORY_RING];
		const sel_history *lookup_h;

		for (uint32_t i = 0; i < TOKENS; i++)
			tokens[i] = (uint32_t)(splitmix(&seed) % 151936);
		sel_history_destroy(*h);
		ret = sel_history_create(store, tokens, TOKENS, h);
		if (ret)
			break;
		pub = (struct sel_publication){ .checkpoint = conversation, .history = *h,
						.consumed = 2048, .page_ids = ids };
		t0 = sel_monotonic_ns();
		ret = sel_store_publish(store, &pub, &outcome);
		sample(&calls[0], sel_monotonic_ns() - t0);
		/* half the lookups are for a conversation that was stored: hits */
		lookup_h = conversation % 2 && stored_last &&
				   conversation - stored_last < HISTORY_RING ?
				   ring[stored_last % HISTORY_RING] : *h;
		t0 = sel_monotonic_ns();
		found = sel_lookup(store, lookup_h, 0, &hit);
		sample(&calls[1], sel_monotonic_ns() - t0);
		if (found) {
			t0 = sel_monotonic_ns();
			sel_fetch(store, &hit, ids + 256, ROWS - 1, conversation, &joined);
			sample(&calls[2], sel_monotonic_ns() - t0);
		}
		t0 = sel_monotonic_ns();
		n = sel_poll(store, events, SEL_ARRAY_SIZE(events));
		sample(&calls[3], sel_monotonic_ns() - t0);
		for (uint32_t e = 0; e < n; e++)
			if (events[e].kind == SEL_EVENT_STORED)
				stored_last = events[e].id;
	}
	for (int i = 0; !ret && i < 4; i++) {
		double p50, p99;

		if (calls[i].count == 0)
			continue;
		bench_percentiles(calls[i].ns, calls[i].count, &p50, &p99);
		printf("api: %-8s %8zu calls, p50 %7.2f us, p99 %7.2f us (disk thread busy "
		       "with stores of 16 MiB records)\n", calls[i].name, calls[i].count, p50, p99);
	}
	{
		struct sel_stats st;

		sel_store_stats(store, &st);
		printf("api: %" PRIu64 " queued, %" PRIu64 " retried, %" PRIu64 " stored, %.2f GB "
		       "written during the run\n", st.published_queued, st.published_retry,
		       st.stored, (double)st.bytes_stored / 1e9);
	}
out:
	sel_store_close(store, 60000);
	for (int i = 0; i < HISTORY_RING; i++)
		sel_history_destroy(ring[i]);
	for (int p = 0; p < PLANES; p++)
		free((void *)(uintptr_t)planes[p].device_address);
	free((void *)(uintptr_t)config.row_plane.device_address);
	for (int i = 0; i < 4; i++)
		free(calls[i].ns);
	free(tokens);
	return ret;
}
