/*
 * selene cluster-demo: one rank of the store across ranks, through the public
 * API only (include/selene/store.h). Rank zero opens the store (forming the
 * cluster); every other rank is a peer (sel_peer_start). Two phases:
 *
 *   1. rank zero publishes a conversation's five checkpoints (every rank
 *      copies its share of the pages and rows to its own record files),
 *      looks the conversation up and restores it into other page ids;
 *   2. every rank restarts with its device memory cleared: the store is
 *      formed again from the files on every rank, and the conversation is
 *      restored from disk.
 *
 * After each phase every rank checks the restored pages and row byte-exact
 * against the synthetic model (bytes are a function of rank, plane and
 * position) and exits non-zero if any differs. The rank, world, rank zero's
 * address and the secret come from MPI or the environment (launch/bootstrap/bootstrap.h).
 */
#include "launch/commands.h"
#include "launch/bootstrap/bootstrap.h"
#include "launch/worker/synth.h"

#include "common/base.h"
#include "common/log.h"
#include "selene/store.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define CD_PLANES 4u
#define CD_UNIT (32u * 1024u)
#define CD_ROW (64u * 1024u)
#define CD_PAGES 256u
#define CD_ROWS 8u
#define CD_PAGE_TOKENS 64u
#define CD_CHECKPOINTS 5u
#define CD_STEP 128u /* tokens between checkpoints */
#define CD_TOKENS (CD_CHECKPOINTS * CD_STEP)
#define CD_CHAIN_PAGES (CD_TOKENS / CD_PAGE_TOKENS)

struct cluster_demo {
	struct launch_bootstrap boot;
	char dir[1024];
	const char *device;
	uint8_t *planes[CD_PLANES];
	uint8_t *rows;
	struct sel_plane page_planes[CD_PLANES];
	char plane_names[CD_PLANES][16];
	struct sel_store_config config;
};

/* The model's device memory: chain page i in page id i, checkpoint c's row in slot c. */
static void cd_fill_sources(struct cluster_demo *d)
{
	uint32_t rank = d->boot.cluster.rank;

	for (uint32_t p = 0; p < CD_PLANES; p++) {
		memset(d->planes[p], 0, (size_t)CD_PAGES * CD_UNIT);
		for (uint32_t i = 0; i < CD_CHAIN_PAGES; i++)
			launch_synth_page(d->planes[p] + (size_t)i * CD_UNIT, CD_UNIT, rank, p, i);
	}
	memset(d->rows, 0, (size_t)CD_ROWS * CD_ROW);
	for (uint32_t c = 0; c < CD_CHECKPOINTS; c++)
		launch_synth_row(d->rows + (size_t)c * CD_ROW, CD_ROW, rank, (c + 1) * CD_STEP);
}

/* Where phase p restores the conversation. */
static uint32_t cd_dest_page(uint32_t phase) { return phase == 1 ? 100 : 150; }
static uint32_t cd_dest_slot(uint32_t phase) { return phase == 1 ? 6 : 7; }

/* This rank's restored pages and row against the model; 0 or -EIO. */
static int cd_verify(struct cluster_demo *d, uint32_t phase)
{
	uint32_t rank = d->boot.cluster.rank, bad = 0;
	uint8_t *expect = malloc(CD_ROW);

	if (!expect)
		return -ENOMEM;
	for (uint32_t p = 0; p < CD_PLANES; p++) {
		for (uint32_t i = 0; i < CD_CHAIN_PAGES; i++) {
			launch_synth_page(expect, CD_UNIT, rank, p, i);
			bad += memcmp(expect, d->planes[p] +
					      (size_t)(cd_dest_page(phase) + i) * CD_UNIT,
				      CD_UNIT) != 0;
		}
	}
	launch_synth_row(expect, CD_ROW, rank, CD_TOKENS);
	bad += memcmp(expect, d->rows + (size_t)cd_dest_slot(phase) * CD_ROW, CD_ROW) != 0;
	free(expect);
	printf("rank %u: phase %u: %s: %u pages x %u planes and the state row restored "
	       "into page ids %u.. and slot %u\n", rank, phase, bad ? "WRONG BYTES" : "verified",
	       CD_CHAIN_PAGES, CD_PLANES, cd_dest_page(phase), cd_dest_slot(phase));
	fflush(stdout);
	return bad ? -EIO : 0;
}

/* Polls until the event for id; 0, or -EIO after a failure event. */
static int cd_wait(sel_store *store, enum sel_event_kind kind, uint64_t id)
{
	uint64_t deadline = sel_monotonic_ns() + 120ull * 1000000000ull;

	while (sel_monotonic_ns() < deadline) {
		struct sel_event ev;

		if (sel_poll(store, &ev, 1) == 0) {
			usleep(1000);
			continue;
		}
		if (ev.kind == kind && ev.id == id)
			return 0;
		if (ev.kind != SEL_EVENT_STORED && ev.kind != SEL_EVENT_FETCHED) {
			fprintf(stderr, "selene cluster-demo: job %" PRIu64 ": %s\n", ev.id,
				ev.why[0] ? ev.why : sel_strerror(ev.error));
			return -EIO;
		}
	}
	fprintf(stderr, "selene cluster-demo: no event for job %" PRIu64 " in 120 s\n", id);
	return -ETIMEDOUT;
}

static int cd_publish_all(sel_store *store, const sel_history *h)
{
	uint32_t ids[CD_CHAIN_PAGES];
	int ret = 0;

	for (uint32_t i = 0; i < CD_CHAIN_PAGES; i++)
		ids[i] = i;
	for (uint32_t c = 0; !ret && c < CD_CHECKPOINTS; c++) {
		struct sel_publication pub = {
			.checkpoint = c + 1, .history = h, .consumed = (c + 1) * CD_STEP,
			.parent_consumed = c * CD_STEP, .page_ids = ids, .state_slot = c };
		enum sel_outcome outcome;

		ret = sel_store_publish(store, &pub, &outcome);
		if (!ret && outcome != SEL_QUEUED && outcome != SEL_PRESENT) {
			fprintf(stderr, "selene cluster-demo: checkpoint %u not taken (%d)\n",
				c + 1, (int)outcome);
			ret = -EIO;
		}
		if (!ret && outcome == SEL_QUEUED)
			ret = cd_wait(store, SEL_EVENT_STORED, c + 1);
	}
	return ret;
}

/* Rank zero's phase: form the store, (store), look up, restore, verify. */
static int cd_rank_zero(struct cluster_demo *d, uint32_t phase)
{
	uint32_t tokens[CD_TOKENS], ids[CD_CHAIN_PAGES];
	uint64_t seed = 4242, t0, restore_ns;
	sel_history *h = NULL;
	sel_store *store = NULL;
	struct sel_stats st;
	struct sel_hit hit;
	char err[512];
	bool joined;
	int ret, closed;

	for (uint32_t i = 0; i < CD_TOKENS; i++)
		tokens[i] = (uint32_t)(XXH64(&seed, sizeof(seed), i) % 151936);
	t0 = sel_monotonic_ns();
	ret = sel_store_open(&d->config, &store, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "selene cluster-demo: rank 0: %s\n", err);
		return ret;
	}
	printf("rank 0: phase %u: store formed across %u %s in %.1f ms\n", phase,
	       d->boot.cluster.world_size,
	       launch_plural(d->boot.cluster.world_size, "rank", "ranks"),
	       (double)(sel_monotonic_ns() - t0) / 1e6);
	ret = sel_history_create(store, tokens, CD_TOKENS, &h);
	if (!ret && phase == 1)
		ret = cd_publish_all(store, h);
	if (!ret && !sel_lookup(store, h, 0, &hit)) {
		fprintf(stderr, "selene cluster-demo: the conversation was not found\n");
		ret = -ENOENT;
	}
	if (!ret && (hit.consumed != CD_TOKENS || hit.page_count != CD_CHAIN_PAGES)) {
		fprintf(stderr, "selene cluster-demo: found %" PRIu64 " tokens, expected %u\n",
			hit.consumed, CD_TOKENS);
		ret = -EIO;
	}
	for (uint32_t i = 0; i < CD_CHAIN_PAGES; i++)
		ids[i] = cd_dest_page(phase) + i;
	t0 = sel_monotonic_ns();
	if (!ret)
		ret = sel_fetch(store, &hit, ids, cd_dest_slot(phase), 1000 + phase, &joined);
	if (!ret)
		ret = cd_wait(store, SEL_EVENT_FETCHED, 1000 + phase);
	restore_ns = sel_monotonic_ns() - t0;
	sel_store_stats(store, &st);
	if (!ret)
		printf("rank 0: phase %u: %" PRIu64 " %s on disk; %s %u tokens restored "
		       "on every rank in %.2f ms (%.2f MB on each rank)\n", phase, st.records,
		       launch_plural(st.records, "record", "records"),
		       phase == 1 ? "stored 5 checkpoints," : "after restarting every rank,",
		       CD_TOKENS, (double)restore_ns / 1e6, (double)st.bytes_fetched / 1e6);
	sel_history_destroy(h);
	closed = sel_store_close(store, 60000);
	if (closed == SEL_ESTOPPED)
		ret = SEL_ESTOPPED; /* copies may still land: keep the planes */
	else if (closed && !ret)
		ret = closed;
	return ret ? ret : cd_verify(d, phase);
}

/* A peer's phase: join, serve rank zero's jobs until it closes, verify. */
static int cd_peer(struct cluster_demo *d, uint32_t phase)
{
	sel_peer *peer;
	char err[512];
	int ret = sel_peer_start(&d->config, &peer, err, sizeof(err));

	if (ret) {
		fprintf(stderr, "selene cluster-demo: rank %u: %s\n", d->boot.cluster.rank, err);
		return ret;
	}
	ret = sel_peer_wait(peer);
	sel_peer_stop(peer);
	return ret ? ret : cd_verify(d, phase);
}

static int cd_setup(struct cluster_demo *d, const char *dir_pattern)
{
	if (launch_expand_rank(d->dir, sizeof(d->dir), dir_pattern, d->boot.cluster.rank)) {
		fprintf(stderr, "selene cluster-demo: --dir is too long (at most %zu bytes with "
			"%%r expanded)\n", sizeof(d->dir) - 12);
		return -ENAMETOOLONG;
	}
	for (uint32_t p = 0; p < CD_PLANES; p++) {
		d->planes[p] = aligned_alloc(4096, (size_t)CD_PAGES * CD_UNIT);
		if (!d->planes[p])
			return -ENOMEM;
		snprintf(d->plane_names[p], sizeof(d->plane_names[p]), "%c.%u", p % 2 ? 'v' : 'k',
			 p / 2);
		d->page_planes[p] = (struct sel_plane){ d->plane_names[p], CD_UNIT,
							(uintptr_t)d->planes[p] };
	}
	d->rows = aligned_alloc(4096, (size_t)CD_ROWS * CD_ROW);
	if (!d->rows)
		return -ENOMEM;
	d->config = (struct sel_store_config){
		.dir = d->dir, .page_tokens = CD_PAGE_TOKENS, .page_plane_count = CD_PLANES,
		.page_planes = d->page_planes,
		.row_plane = { "state", CD_ROW, (uintptr_t)d->rows },
		.page_count = CD_PAGES, .row_count = CD_ROWS, .device = d->device,
		.disk_limit_bytes = 1ull << 30, .durable = true,
		.cluster = d->boot.cluster.world_size > 1 ? &d->boot.cluster : NULL,
	};
	memset(d->config.model_identity, 0xc1, sizeof(d->config.model_identity));
	return 0;
}

static void cd_usage(FILE *out)
{
	fprintf(out,
		"usage: selene cluster-demo --dir BASE [--device host]\n\n"
		"One rank of a store across ranks, through the public API: store a\n"
		"conversation's checkpoints on every rank, restore them, restart every\n"
		"rank and restore them from disk, checking every byte. BASE may hold %%r\n"
		"(the rank). Environment: SELENE_RANK and SELENE_WORLD_SIZE (or Open\n"
		"MPI's), SELENE_COORDINATOR=host:port, SELENE_SECRET_FILE (32 bytes).\n");
}

int launch_cmd_cluster_demo(int argc, char **argv)
{
	static const struct option options[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "device", required_argument, NULL, 'D' },
		{ NULL, 0, NULL, 0 },
	};
	struct cluster_demo d = { .device = "host" };
	const char *dir = NULL;
	char err[512];
	int opt, ret;

	if (launch_wants_help(argc, argv)) {
		cd_usage(stdout);
		return LAUNCH_EXIT_OK;
	}
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'd': dir = optarg; break;
		case 'D': d.device = optarg; break;
		default: cd_usage(stderr); return LAUNCH_EXIT_USAGE;
		}
	}
	if (!dir || optind != argc) {
		cd_usage(stderr);
		return LAUNCH_EXIT_USAGE;
	}
	if (strcmp(d.device, "host") != 0) {
		/* its planes are malloc'd and checked in place; a GPU needs selene run */
		fprintf(stderr, "selene cluster-demo: only --device host: the demo's planes are "
			"host memory it checks in place (make test-gpu covers the CUDA path)\n");
		return LAUNCH_EXIT_USAGE;
	}
	ret = launch_bootstrap(&d.boot, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "selene cluster-demo: %s\n", err);
		launch_bootstrap_finish(&d.boot);
		/* -EINVAL: the launch's variables are wrong; else MPI failed */
		return ret == -EINVAL ? LAUNCH_EXIT_USAGE : LAUNCH_EXIT_BAD;
	}
	ret = cd_setup(&d, dir);
	for (uint32_t phase = 1; !ret && phase <= 2; phase++) {
		/* phase 2 is a restart: device memory starts over */
		cd_fill_sources(&d);
		ret = d.boot.cluster.rank == 0 ? cd_rank_zero(&d, phase) : cd_peer(&d, phase);
	}
	if (ret)
		fprintf(stderr, "selene cluster-demo: rank %u failed: %s\n", d.boot.cluster.rank,
			sel_strerror(ret));
	/* a stopped store or an undrained peer may still copy into the planes */
	if (ret != SEL_ESTOPPED) {
		for (uint32_t p = 0; p < CD_PLANES; p++)
			free(d.planes[p]);
		free(d.rows);
	}
	launch_bootstrap_finish(&d.boot);
	return ret ? LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
}
