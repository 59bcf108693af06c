/*
 * selene demo: one rank's share of a conversation's checkpoints, copied from
 * device planes (host memory, or a GPU with --device cuda) through the shard
 * engine into record files, found again after a restart, restored into other
 * page ids and checked byte-exact against a synthetic model. It exercises
 * the record layer and the shard engine; the coordinator, links and the
 * reference TP worker (selene run) come later.
 * Under mpirun each rank takes its rank and world from Open MPI's
 * environment (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE); MPI itself is
 * not linked.
 */
#include "launch/commands.h"

#include "common/base.h"
#include "common/limits.h"
#include "common/log.h"
#include "launch/args.h"
#include "record/dir.h"
#include "record/file.h"
#include "record/format.h"
#include "record/geometry.h"
#include "record/key.h"
#include "shard/device.h"
#include "shard/engine.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define DEMO_CHECKPOINTS_MAX 16
#define DEMO_WINDOW_PAGES 64

struct demo {
	struct rec_geometry geometry;
	struct rec_identity model;
	struct rec_identity namespace_id;
	struct rec_history history;
	struct rec_dir *dir;
	char base[1024];
	uint64_t checkpoints[DEMO_CHECKPOINTS_MAX];
	struct rec_key keys[DEMO_CHECKPOINTS_MAX];
	uint32_t checkpoint_count;
	uint8_t *window; /* one page record or one row, for the model */
	uint8_t *expect;
	struct shard_device *dev;
	struct shard_engine *engine;
	struct shard_planes planes;
	const char *device_kind;
	uint64_t bytes_written;
	uint64_t bytes_read;
	uint64_t store_ns;   /* time in store jobs, not in the synthetic model */
	uint64_t restore_ns; /* time in fetch jobs */
};

/* Page bytes: a function of rank, plane and token prefix (docs/DESIGN.md 8). */
static void synth_page(const struct demo *d, uint64_t prefix_index, uint8_t *out)
{
	const struct rec_geometry *g = &d->geometry;
	struct rec_key boundary;

	rec_history_key_at(&d->history, (prefix_index + 1) * g->page_tokens,
			   &boundary);
	memset(out, 0, g->page_record_bytes);
	for (uint32_t p = 0; p < g->page_plane_count; p++) {
		uint64_t state = XXH3_64bits_withSeed(boundary.digest.bytes, 16,
						      (uint64_t)g->rank << 32 | p);

		for (uint64_t i = 0; i + 8 <= g->page_planes[p].unit_bytes; i += 8) {
			state = state * 6364136223846793005ull + 1442695040888963407ull;
			memcpy(out + i, &state, 8);
		}
		out += sel_align_up(g->page_planes[p].unit_bytes, SEL_BLOCK_BYTES);
	}
}

static void synth_row(const struct demo *d, const struct rec_key *key, uint8_t *out)
{
	uint64_t state = XXH3_64bits_withSeed(key->digest.bytes, 16,
					      0xa0a0ull << 32 | d->geometry.rank);

	memset(out, 0, d->geometry.row_record_bytes);
	for (uint64_t i = 0; i + 8 <= d->geometry.row_plane.unit_bytes; i += 8) {
		state = state * 6364136223846793005ull + 1442695040888963407ull;
		memcpy(out + i, &state, 8);
	}
}

/* Writes (or reads back) page id's planes, or a state slot's row. */
static int device_page(struct demo *d, uint32_t id, uint8_t *record, bool put)
{
	const struct rec_geometry *g = &d->geometry;

	for (uint32_t p = 0; p < g->page_plane_count; p++) {
		uint64_t unit = g->page_planes[p].unit_bytes;
		uint64_t address = d->planes.page_base[p] + unit * id;
		int ret = 0;

		if (shard_device_is_cuda(d->dev))
			ret = shard_device_cuda_memcpy(d->dev, put ? SHARD_HOST_TO_DEVICE :
								 SHARD_DEVICE_TO_HOST,
						       address, record, unit);
		else if (put)
			memcpy((void *)(uintptr_t)address, record, unit);
		else
			memcpy(record, (void *)(uintptr_t)address, unit);
		if (ret)
			return ret;
		record += sel_align_up(unit, SEL_BLOCK_BYTES);
	}
	return 0;
}

static int device_row(struct demo *d, uint32_t slot, uint8_t *row, bool put)
{
	uint64_t unit = d->geometry.row_plane.unit_bytes;
	uint64_t address = d->planes.row_base + unit * slot;

	if (shard_device_is_cuda(d->dev))
		return shard_device_cuda_memcpy(d->dev, put ? SHARD_HOST_TO_DEVICE :
							    SHARD_DEVICE_TO_HOST,
						address, row, unit);
	if (put)
		memcpy((void *)(uintptr_t)address, row, unit);
	else
		memcpy(row, (void *)(uintptr_t)address, unit);
	return 0;
}

/* Runs one engine job to its completion. */
static int demo_wait(struct demo *d, const char *what)
{
	struct shard_completion c;

	shard_engine_wait(d->engine, &c);
	if (c.result)
		sel_error("%s: %s", what, c.why[0] ? c.why : sel_strerror(c.result));
	return c.result;
}

/*
 * The "prefill": page i of the conversation lands at device page id i; the
 * checkpoint's row at state slot index. Then the store copies them out.
 */
static int demo_store_one(struct demo *d, uint32_t index, uint32_t *ids)
{
	const struct rec_geometry *g = &d->geometry;
	const struct rec_key *parent = index ? &d->keys[index - 1] : NULL;
	uint32_t first = parent ? (uint32_t)(parent->consumed / g->page_tokens) : 0;
	uint32_t tail = (uint32_t)(d->keys[index].consumed / g->page_tokens) - first;
	struct shard_store_job job = { .page_ids = ids, .state_slot = index % g->row_count };
	struct rec_header h;
	uint64_t t0;
	int ret;

	for (uint32_t i = 0; i < tail; i++) {
		ids[i] = first + i;
		synth_page(d, first + i, d->window);
		ret = device_page(d, ids[i], d->window, true);
		if (ret)
			return ret;
	}
	synth_row(d, &d->keys[index], d->window);
	ret = device_row(d, job.state_slot, d->window, true);
	if (!ret)
		ret = rec_header_init(&h, g, &d->namespace_id, &d->keys[index], parent,
				      rec_history_bucket(&d->history, d->keys[index].consumed),
				      first, tail, sel_realtime_ns());
	job.header = &h;
	t0 = sel_monotonic_ns();
	if (!ret)
		ret = shard_engine_store(d->engine, index, &job);
	if (!ret)
		ret = demo_wait(d, "store");
	d->store_ns += sel_monotonic_ns() - t0;
	if (!ret)
		d->bytes_written += h.row_offset + h.row_length;
	return ret;
}

/* Stores the chain; a parent's row is dropped once its only child commits. */
static int demo_store(struct demo *d)
{
	uint32_t *ids = malloc(d->geometry.page_count * sizeof(uint32_t));
	int ret = ids ? 0 : -ENOMEM;

	for (uint32_t i = 0; !ret && i < d->checkpoint_count; i++) {
		ret = demo_store_one(d, i, ids);
		if (!ret && i > 0)
			ret = shard_engine_truncate(d->engine, 100 + i, &d->keys[i - 1]);
		if (!ret && i > 0)
			ret = demo_wait(d, "dropping a row");
	}
	free(ids);
	return ret;
}

/* Poisons the device, as if the GPU cache had evicted everything. */
static int demo_evict(struct demo *d)
{
	const struct rec_geometry *g = &d->geometry;
	int ret = 0;

	memset(d->window, 0xee, g->page_record_bytes > g->row_record_bytes ?
					g->page_record_bytes : g->row_record_bytes);
	for (uint32_t id = 0; !ret && id < g->page_count; id++)
		ret = device_page(d, id, d->window, true);
	for (uint32_t slot = 0; !ret && slot < g->row_count; slot++)
		ret = device_row(d, slot, d->window, true);
	return ret;
}

/*
 * Restores the chain from record skip_records on, minus skip_pages, into
 * page ids from dest_base and the last state slot, and checks every byte.
 */
static int demo_restore(struct demo *d, uint32_t skip_pages, uint32_t dest_base,
			uint64_t *mismatches)
{
	const struct rec_geometry *g = &d->geometry;
	struct shard_chain_record chain[DEMO_CHECKPOINTS_MAX];
	uint32_t *ids = malloc(g->page_count * sizeof(uint32_t)), pages = 0;
	uint32_t slot = g->row_count - 1;
	uint64_t t0;
	struct shard_fetch_job job = { .chain = chain, .chain_count = d->checkpoint_count,
				       .skip_pages = skip_pages, .page_ids = ids,
				       .state_slot = slot };
	int ret;

	if (!ids)
		return -ENOMEM;
	for (uint32_t k = 0; k < d->checkpoint_count; k++) {
		uint32_t first = k ? (uint32_t)(d->keys[k - 1].consumed / g->page_tokens) : 0;

		chain[k] = (struct shard_chain_record){
			.key = d->keys[k], .first_page_index = first,
			.tail_page_count = (uint32_t)(d->keys[k].consumed / g->page_tokens) - first,
		};
		pages += chain[k].tail_page_count;
	}
	for (uint32_t i = 0; i + skip_pages < pages; i++)
		ids[i] = dest_base + i;
	t0 = sel_monotonic_ns();
	ret = shard_engine_fetch(d->engine, 1000 + skip_pages, &job);
	if (!ret)
		ret = demo_wait(d, "restore");
	d->restore_ns += sel_monotonic_ns() - t0;
	for (uint32_t i = 0; !ret && i + skip_pages < pages; i++) {
		synth_page(d, skip_pages + i, d->expect);
		ret = device_page(d, ids[i], d->window, false);
		for (uint32_t p = 0, off = 0; !ret && p < g->page_plane_count; p++) {
			*mismatches += memcmp(d->expect + off, d->window + off,
					      g->page_planes[p].unit_bytes) != 0;
			off += (uint32_t)sel_align_up(g->page_planes[p].unit_bytes, SEL_BLOCK_BYTES);
		}
	}
	if (!ret) {
		synth_row(d, &d->keys[d->checkpoint_count - 1], d->expect);
		ret = device_row(d, slot, d->window, false);
		*mismatches += !ret && memcmp(d->expect, d->window, g->row_plane.unit_bytes) != 0;
		d->bytes_read += (uint64_t)(pages - skip_pages) * g->page_record_bytes +
				 g->row_record_bytes;
	}
	free(ids);
	return ret;
}

static int demo_open(struct demo *d, size_t *found)
{
	struct rec_dir_options options = {
		.base_path = d->base,
		.namespace_id = &d->namespace_id,
		.geometry = &d->geometry,
		.durable = true,
	};
	struct shard_engine_options engine_options = {
		.geometry = &d->geometry, .device = d->dev, .planes = &d->planes,
		.register_pool = true,
	};
	struct rec_scan scan;
	char err[512];
	int ret;

	ret = rec_dir_open(&options, &d->dir, err, sizeof(err));
	if (ret) {
		sel_error("%s", err);
		return ret;
	}
	ret = rec_dir_scan(d->dir, &scan);
	if (ret) {
		rec_dir_scan_failed(d->dir, &scan, ret, err, sizeof(err));
		sel_error("%s", err);
		return ret;
	}
	*found = 0;
	for (size_t i = 0; i < scan.record_count; i++)
		for (uint32_t k = 0; k < d->checkpoint_count; k++)
			*found += rec_key_equal(&scan.records[i].key, &d->keys[k]);
	rec_scan_free(&scan);
	engine_options.dir = d->dir;
	ret = shard_engine_open(&engine_options, &d->engine, err, sizeof(err));
	if (ret)
		sel_error("%s", err);
	return ret;
}

static void demo_close(struct demo *d)
{
	shard_engine_close(d->engine);
	d->engine = NULL;
	rec_dir_close(d->dir);
	d->dir = NULL;
}

struct demo_args {
	const char *dir;
	const char *model;
	const char *device;
	uint32_t rank, world, page_tokens, planes, tokens;
	uint64_t plane_bytes, row_bytes;
};

/*
 * Open MPI's rank or size variable into *out, or fallback where it is
 * unset; false (said on stderr) when it is set but not a number.
 */
static bool env_u32(const char *name, uint32_t fallback, uint32_t *out)
{
	const char *text = getenv(name);
	char why[128];
	uint64_t v;

	*out = fallback;
	if (!text)
		return true;
	if (launch_parse_number(text, LAUNCH_COUNT, 0, UINT32_MAX, &v, why, sizeof(why))) {
		fprintf(stderr, "selene demo: %s '%.40s': %s\n", name, text, why);
		return false;
	}
	*out = (uint32_t)v;
	return true;
}

static void demo_usage(FILE *out)
{
	fprintf(out,
		"usage: selene demo --dir BASE [options]\n\n"
		"Stores one rank's share of a conversation's checkpoints in BASE,\n"
		"reopens the directory as a restarted process would, restores the\n"
		"whole chain and checks every byte against the synthetic model.\n"
		"Under mpirun, rank and world come from Open MPI's environment.\n\n"
		"  --dir BASE         base directory ('%%r' becomes the rank)\n"
		"  --rank R           this rank (default $OMPI_COMM_WORLD_RANK or 0)\n"
		"  --world N          world size (default $OMPI_COMM_WORLD_SIZE or 1)\n"
		"  --model NAME       model name for the identity (default demo-model)\n"
		"  --page-tokens N    tokens per page (default 64)\n"
		"  --planes N         page planes (default 8)\n"
		"  --plane-bytes SIZE bytes of one plane of one page (default 64K)\n"
		"  --row-bytes SIZE   bytes of the state row (default 256K)\n"
		"  --tokens N         conversation length (default 8192)\n"
		"  --device KIND      auto, cuda or host (default host)\n"
		"  --help             this help\n\n"
		"Sizes take K, M, G, T (binary). Exit status: 0 verified, 1 failed,\n"
		"2 bad arguments.\n");
}

static int demo_parse(int argc, char **argv, struct demo_args *a)
{
	static const struct option options[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "rank", required_argument, NULL, 'r' },
		{ "world", required_argument, NULL, 'w' },
		{ "model", required_argument, NULL, 'm' },
		{ "page-tokens", required_argument, NULL, 'p' },
		{ "planes", required_argument, NULL, 'n' },
		{ "plane-bytes", required_argument, NULL, 'b' },
		{ "row-bytes", required_argument, NULL, 'R' },
		{ "tokens", required_argument, NULL, 't' },
		{ "device", required_argument, NULL, 'D' },
		{ NULL, 0, NULL, 0 },
	};
	int opt, which = 0;

	*a = (struct demo_args){
		.model = "demo-model",
		.device = "host",
		.page_tokens = 64, .planes = 8, .tokens = 8192,
		.plane_bytes = 65536, .row_bytes = 262144,
	};
	if (!env_u32("OMPI_COMM_WORLD_RANK", 0, &a->rank) ||
	    !env_u32("OMPI_COMM_WORLD_SIZE", 1, &a->world))
		return -2;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", options, &which)) != -1) {
		const char *flag = options[which].name;
		bool ok = true;

		switch (opt) {
		case 'd': a->dir = optarg; break;
		case 'r': ok = launch_option_u32("demo", flag, optarg, LAUNCH_COUNT, 0,
						 REC_WORLD_SIZE_MAX - 1, &a->rank); break;
		case 'w': ok = launch_option_u32("demo", flag, optarg, LAUNCH_COUNT, 1,
						 REC_WORLD_SIZE_MAX, &a->world); break;
		case 'm': a->model = optarg; break;
		case 'p': ok = launch_option_u32("demo", flag, optarg, LAUNCH_COUNT, 1,
						 REC_PAGE_TOKENS_MAX, &a->page_tokens); break;
		case 'n': ok = launch_option_u32("demo", flag, optarg, LAUNCH_COUNT, 1,
						 REC_PAGE_PLANES_MAX, &a->planes); break;
		case 'b': ok = launch_option_u64("demo", flag, optarg, LAUNCH_SIZE, 1,
						 REC_UNIT_BYTES_MAX, &a->plane_bytes); break;
		case 'R': ok = launch_option_u64("demo", flag, optarg, LAUNCH_SIZE, 1,
						 REC_ROW_BYTES_MAX, &a->row_bytes); break;
		case 't': ok = launch_option_u32("demo", flag, optarg, LAUNCH_COUNT, 1,
						 UINT32_MAX, &a->tokens); break;
		case 'D': a->device = optarg; break;
		default: return -1;
		}
		if (!ok)
			return -2;
		which = 0;
	}
	if (!a->dir || optind != argc)
		return -1;
	if (!a->dir[0]) {
		fprintf(stderr, "selene demo: --dir is empty\n");
		return -2;
	}
	if (a->rank >= a->world) {
		fprintf(stderr, "selene demo: --rank %u: not below --world %u\n", a->rank,
			a->world);
		return -2;
	}
	if (a->tokens < 5 * a->page_tokens) {
		fprintf(stderr, "selene demo: --tokens %u: less than 5 pages of %u tokens\n",
			a->tokens, a->page_tokens);
		return -2;
	}
	return 0;
}

/* Expands %r in the base path to the rank. */
/* The rank's page planes and row plane, on the device. */
static int demo_device_planes(struct demo *d)
{
	const struct rec_geometry *g = &d->geometry;

	for (uint32_t p = 0; p <= g->page_plane_count; p++) {
		bool row = p == g->page_plane_count;
		uint64_t bytes = row ? g->row_plane.unit_bytes * g->row_count :
				       g->page_planes[p].unit_bytes * g->page_count;
		uint64_t *address = row ? &d->planes.row_base : &d->planes.page_base[p];

		if (shard_device_is_cuda(d->dev)) {
			if (shard_device_cuda_alloc(d->dev, bytes, address))
				return -ENOMEM;
		} else {
			*address = (uintptr_t)calloc(1, bytes);
			if (!*address)
				return -ENOMEM;
		}
	}
	return 0;
}

static void demo_free_planes(struct demo *d)
{
	const struct rec_geometry *g = &d->geometry;

	for (uint32_t p = 0; d->dev && p <= g->page_plane_count; p++) {
		uint64_t address = p == g->page_plane_count ? d->planes.row_base :
							      d->planes.page_base[p];

		if (!address)
			continue;
		if (shard_device_is_cuda(d->dev))
			shard_device_cuda_free(d->dev, address);
		else
			free((void *)(uintptr_t)address);
	}
}

static int demo_setup(struct demo *d, const struct demo_args *a)
{
	struct rec_plane *planes = calloc(a->planes ? a->planes : 1, sizeof(*planes));
	struct rec_geometry_spec spec = {
		.page_tokens = a->page_tokens, .page_plane_count = a->planes,
		/* Room for the chain, and for restoring it at other ids. */
		.page_planes = planes, .page_count = 2 * (a->tokens / a->page_tokens) + 8,
		.row_count = 8,
		.rank = a->rank, .world_size = a->world,
	};
	uint32_t *tokens = malloc((size_t)a->tokens * sizeof(uint32_t));
	uint64_t state = 0x5e1e4e;
	char err[256];
	int ret;

	if (!planes || !tokens)
		return -ENOMEM;
	for (uint32_t i = 0; i < a->planes; i++) {
		snprintf(planes[i].name, sizeof(planes[i].name), "layer.%02u.%s",
			 i / 2, i % 2 ? "value" : "key");
		planes[i].unit_bytes = a->plane_bytes;
	}
	strcpy(spec.row_plane.name, "state");
	spec.row_plane.unit_bytes = a->row_bytes;
	ret = rec_geometry_init(&d->geometry, &spec, err, sizeof(err));
	free(planes);
	if (ret) {
		fprintf(stderr, "selene demo: %s\n", err);
		free(tokens);
		return ret;
	}
	rec_model_identity_from_name(&d->model, a->model);
	rec_namespace_identity(&d->namespace_id, &d->model, REC_STATE_ORDINARY);
	for (uint32_t i = 0; i < a->tokens; i++) {
		state = state * 6364136223846793005ull + 1442695040888963407ull;
		tokens[i] = (uint32_t)(state >> 33) % 151936;
	}
	ret = rec_history_init(&d->history, &d->model, tokens, a->tokens);
	free(tokens);
	if (ret)
		return ret;
	/* Five turns; the endpoints fall inside pages, as real ones do. */
	d->checkpoint_count = 5;
	for (uint32_t i = 0; i < 5; i++) {
		d->checkpoints[i] = (uint64_t)a->tokens * (i + 1) / 5 - (i < 4 ? 7 * i + 3 : 0);
		rec_history_key_at(&d->history, d->checkpoints[i], &d->keys[i]);
	}
	if (launch_expand_rank(d->base, sizeof(d->base), a->dir, a->rank)) {
		fprintf(stderr, "selene demo: --dir is too long (at most %zu bytes with %%r "
			"expanded)\n", sizeof(d->base) - 12);
		return -ENAMETOOLONG;
	}
	{
		uint64_t bytes = d->geometry.page_record_bytes > d->geometry.row_record_bytes ?
					 d->geometry.page_record_bytes :
					 d->geometry.row_record_bytes;

		d->window = aligned_alloc(SEL_BLOCK_BYTES, bytes);
		d->expect = aligned_alloc(SEL_BLOCK_BYTES, bytes);
	}
	if (!d->window || !d->expect)
		return -ENOMEM;
	ret = shard_device_open(a->device, 0, &d->dev, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "selene demo: device %s: %s\n", a->device, err);
		return ret;
	}
	return demo_device_planes(d);
}

static double gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0.0;
}

int launch_cmd_demo(int argc, char **argv)
{
	struct demo d = { 0 };
	struct demo_args a;
	uint64_t mismatches = 0;
	uint32_t suffix_skip;
	size_t found_before = 0, found_after = 0;
	int ret;

	if (launch_wants_help(argc, argv)) {
		demo_usage(stdout);
		return LAUNCH_EXIT_OK;
	}
	ret = demo_parse(argc, argv, &a);
	if (ret) {
		if (ret == -1) /* a bad value was named already */
			demo_usage(stderr);
		return LAUNCH_EXIT_USAGE;
	}
	ret = demo_setup(&d, &a);
	if (!ret)
		ret = demo_open(&d, &found_before);
	if (ret)
		goto out;
	ret = demo_store(&d);
	/* A restart: the next open scans the directory from scratch. */
	demo_close(&d);
	if (!ret)
		ret = demo_open(&d, &found_after);
	/* The GPU cache loses everything; then the whole chain comes back
	 * into other page ids, and a suffix after a resident first turn. */
	if (!ret)
		ret = demo_evict(&d);
	if (!ret)
		ret = demo_restore(&d, 0, d.geometry.page_count / 2, &mismatches);
	suffix_skip = (uint32_t)(d.keys[0].consumed / d.geometry.page_tokens);
	if (!ret)
		ret = demo_restore(&d, suffix_skip, d.geometry.page_count / 2, &mismatches);
	if (ret)
		goto out;
	printf("rank %u/%u: stored %u checkpoints of one conversation (%" PRIu64
	       " tokens, %.1f MiB) at %.2f GB/s (%s device, %s I/O, durable); after "
	       "restart found %zu/%u; restored the chain and a suffix (%.1f MiB) at "
	       "%.2f GB/s; %s\n",
	       a.rank, a.world, d.checkpoint_count, d.checkpoints[d.checkpoint_count - 1],
	       (double)d.bytes_written / 1048576.0, gbps(d.bytes_written, d.store_ns),
	       d.dev->ops->name, rec_dir_direct(d.dir) ? "O_DIRECT" : "buffered",
	       found_after, d.checkpoint_count, (double)d.bytes_read / 1048576.0,
	       gbps(d.bytes_read, d.restore_ns),
	       mismatches ? "MISMATCH" : "verified byte-exact");
	(void)found_before;
	ret = mismatches || found_after != d.checkpoint_count ? -EIO : 0;
out:
	demo_close(&d);
	demo_free_planes(&d);
	shard_device_close(d.dev);
	rec_history_free(&d.history);
	free(d.window);
	free(d.expect);
	return ret ? LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
}
