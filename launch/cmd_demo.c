/*
 * selene demo: one rank's share of a conversation's checkpoints, written to
 * record files, found again after a restart, restored and checked byte-exact
 * against a synthetic model. It exercises the record layer on its own; the
 * coordinator, links and the reference TP worker (selene run) come later.
 * Under mpirun each rank takes its rank and world from Open MPI's
 * environment (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE); MPI itself is
 * not linked.
 */
#include "launch/commands.h"

#include "common/base.h"
#include "common/log.h"
#include "record/dir.h"
#include "record/file.h"
#include "record/format.h"
#include "record/geometry.h"
#include "record/key.h"

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
	uint8_t *window; /* DEMO_WINDOW_PAGES page records or one row */
	uint64_t bytes_written;
	uint64_t bytes_read;
};

/* Page bytes are a function of rank, plane and the token prefix (DESIGN 8). */
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

static int demo_write_one(struct demo *d, uint32_t index)
{
	const struct rec_geometry *g = &d->geometry;
	const struct rec_key *parent = index ? &d->keys[index - 1] : NULL;
	uint32_t first = parent ? (uint32_t)(parent->consumed / g->page_tokens) : 0;
	uint32_t tail = (uint32_t)(d->keys[index].consumed / g->page_tokens) - first;
	struct rec_header h;
	struct rec_writer w;
	int ret;

	ret = rec_header_init(&h, g, &d->namespace_id, &d->keys[index], parent,
			      rec_history_bucket(&d->history, d->keys[index].consumed),
			      first, tail, sel_realtime_ns());
	if (!ret)
		ret = rec_writer_begin(&w, d->dir, &h);
	if (ret)
		return ret;
	for (uint32_t done = 0; done < tail;) {
		uint32_t n = tail - done < DEMO_WINDOW_PAGES ? tail - done : DEMO_WINDOW_PAGES;

		for (uint32_t i = 0; i < n; i++)
			synth_page(d, first + done + i, d->window + i * g->page_record_bytes);
		ret = rec_writer_put_pages(&w, done, n, d->window);
		if (ret)
			goto err_abort;
		done += n;
	}
	synth_row(d, &d->keys[index], d->window);
	ret = rec_writer_put_row(&w, d->window);
	if (ret)
		goto err_abort;
	d->bytes_written += h.row_offset + h.row_length;
	return rec_writer_commit(&w);
err_abort:
	rec_writer_abort(&w);
	return ret;
}

/* Writes the chain; a parent's row is dropped once its only child commits. */
static int demo_store(struct demo *d)
{
	for (uint32_t i = 0; i < d->checkpoint_count; i++) {
		int ret = demo_write_one(d, i);

		if (ret) {
			sel_error("storing checkpoint %u: %s", i, sel_strerror(ret));
			return ret;
		}
		if (i > 0 && (ret = rec_truncate_row(d->dir, &d->keys[i - 1])) != 0) {
			sel_error("dropping row of checkpoint %u: %s", i - 1,
				  sel_strerror(ret));
			return ret;
		}
	}
	return 0;
}

/* Reads one record's pages (and row when wanted) and compares every byte. */
static int demo_restore_one(struct demo *d, uint32_t index, bool row,
			    uint64_t *mismatches)
{
	const struct rec_geometry *g = &d->geometry;
	uint8_t *expect = malloc(g->page_record_bytes > g->row_record_bytes ?
					 g->page_record_bytes : g->row_record_bytes);
	char name[REC_FILE_NAME_BYTES], why[256];
	struct rec_expect expectation;
	struct rec_reader r;
	int ret;

	if (!expect)
		return -ENOMEM;
	rec_file_name(name, &d->keys[index]);
	rec_dir_expect(d->dir, &d->keys[index], &expectation);
	ret = rec_reader_open(&r, rec_dir_fd(d->dir), name, rec_dir_direct(d->dir),
			      &expectation, why, sizeof(why));
	for (uint32_t done = 0; !ret && done < r.header.tail_page_count;) {
		uint32_t n = r.header.tail_page_count - done;

		n = n < DEMO_WINDOW_PAGES ? n : DEMO_WINDOW_PAGES;
		ret = rec_reader_read_pages(&r, done, n, d->window, why, sizeof(why));
		for (uint32_t i = 0; !ret && i < n; i++) {
			synth_page(d, r.header.first_page_index + done + i, expect);
			*mismatches += memcmp(expect, d->window + i * g->page_record_bytes,
					      g->page_record_bytes) != 0;
		}
		d->bytes_read += (uint64_t)n * g->page_record_bytes;
		done += n;
	}
	if (!ret && row) {
		ret = rec_reader_read_row(&r, d->window, why, sizeof(why));
		synth_row(d, &d->keys[index], expect);
		*mismatches += !ret && memcmp(expect, d->window, g->row_record_bytes) != 0;
		d->bytes_read += g->row_record_bytes;
	}
	if (ret)
		sel_error("restoring %s: %s", name,
			  sel_is_selene_error(ret) ? why : sel_strerror(ret));
	if (r.fd >= 0 || ret == 0)
		rec_reader_close(&r);
	free(expect);
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
	struct rec_scan scan;
	char err[512];
	int ret;

	ret = rec_dir_open(&options, &d->dir, err, sizeof(err));
	if (ret) {
		sel_error("%s", err);
		return ret;
	}
	ret = rec_dir_scan(d->dir, &scan);
	if (ret)
		return ret;
	*found = 0;
	for (size_t i = 0; i < scan.record_count; i++)
		for (uint32_t k = 0; k < d->checkpoint_count; k++)
			*found += rec_key_equal(&scan.records[i].key, &d->keys[k]);
	rec_scan_free(&scan);
	return 0;
}

struct demo_args {
	const char *dir;
	const char *model;
	uint32_t rank, world, page_tokens, planes, tokens;
	uint64_t plane_bytes, row_bytes;
};

static int env_u32(const char *name, uint32_t fallback)
{
	const char *v = getenv(name);

	return v && *v ? atoi(v) : (int)fallback;
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
		"  --plane-bytes N    bytes of one plane of one page (default 65536)\n"
		"  --row-bytes N      bytes of the state row (default 262144)\n"
		"  --tokens N         conversation length (default 8192)\n"
		"  --help             this help\n");
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
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	*a = (struct demo_args){
		.model = "demo-model",
		.rank = (uint32_t)env_u32("OMPI_COMM_WORLD_RANK", 0),
		.world = (uint32_t)env_u32("OMPI_COMM_WORLD_SIZE", 1),
		.page_tokens = 64, .planes = 8, .tokens = 8192,
		.plane_bytes = 65536, .row_bytes = 262144,
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'd': a->dir = optarg; break;
		case 'r': a->rank = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'w': a->world = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'm': a->model = optarg; break;
		case 'p': a->page_tokens = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'n': a->planes = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'b': a->plane_bytes = strtoull(optarg, NULL, 0); break;
		case 'R': a->row_bytes = strtoull(optarg, NULL, 0); break;
		case 't': a->tokens = (uint32_t)strtoul(optarg, NULL, 0); break;
		default: return -1;
		}
	}
	return a->dir && optind == argc && a->tokens >= 5 * a->page_tokens ? 0 : -1;
}

/* Expands %r in the base path to the rank. */
static void expand_base(char *out, size_t size, const char *pattern, uint32_t rank)
{
	size_t n = 0;

	for (const char *p = pattern; *p && n + 12 < size; p++) {
		if (p[0] == '%' && p[1] == 'r') {
			n += (size_t)snprintf(out + n, size - n, "%u", rank);
			p++;
		} else {
			out[n++] = *p;
		}
	}
	out[n] = '\0';
}

static int demo_setup(struct demo *d, const struct demo_args *a)
{
	struct rec_plane *planes = calloc(a->planes ? a->planes : 1, sizeof(*planes));
	struct rec_geometry_spec spec = {
		.page_tokens = a->page_tokens, .page_plane_count = a->planes,
		.page_planes = planes, .page_count = 1024, .row_count = 16,
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
	expand_base(d->base, sizeof(d->base), a->dir, a->rank);
	d->window = aligned_alloc(SEL_BLOCK_BYTES,
				  sel_align_up(DEMO_WINDOW_PAGES * d->geometry.page_record_bytes +
						       d->geometry.row_record_bytes,
					       SEL_BLOCK_BYTES));
	return d->window ? 0 : -ENOMEM;
}

static double gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0.0;
}

int launch_cmd_demo(int argc, char **argv)
{
	struct demo d = { 0 };
	struct demo_args a;
	uint64_t t0, store_ns, restore_ns, mismatches = 0;
	size_t found_before, found_after;
	int ret;

	if (launch_wants_help(argc, argv)) {
		demo_usage(stdout);
		return LAUNCH_EXIT_OK;
	}
	if (demo_parse(argc, argv, &a) != 0) {
		demo_usage(stderr);
		return LAUNCH_EXIT_USAGE;
	}
	ret = demo_setup(&d, &a);
	if (ret)
		return LAUNCH_EXIT_USAGE;
	ret = demo_open(&d, &found_before);
	if (ret)
		goto out;
	t0 = sel_monotonic_ns();
	ret = demo_store(&d);
	store_ns = sel_monotonic_ns() - t0;
	rec_dir_close(d.dir); /* a restart: the next open scans from scratch */
	d.dir = NULL;
	if (!ret)
		ret = demo_open(&d, &found_after);
	if (ret)
		goto out;
	t0 = sel_monotonic_ns();
	for (uint32_t i = 0; !ret && i < d.checkpoint_count; i++)
		ret = demo_restore_one(&d, i, i + 1 == d.checkpoint_count, &mismatches);
	restore_ns = sel_monotonic_ns() - t0;
	if (ret)
		goto out;
	printf("rank %u/%u: stored %u checkpoints of one conversation (%" PRIu64
	       " tokens, %.1f MiB) at %.2f GB/s (%s I/O, durable); after restart "
	       "found %zu/%u; restored %" PRIu64 " tokens (%.1f MiB) at %.2f GB/s; "
	       "%s\n",
	       a.rank, a.world, d.checkpoint_count, d.checkpoints[d.checkpoint_count - 1],
	       (double)d.bytes_written / 1048576.0, gbps(d.bytes_written, store_ns),
	       rec_dir_direct(d.dir) ? "O_DIRECT" : "buffered", found_after,
	       d.checkpoint_count, d.checkpoints[d.checkpoint_count - 1],
	       (double)d.bytes_read / 1048576.0, gbps(d.bytes_read, restore_ns),
	       mismatches ? "MISMATCH" : "verified byte-exact");
	(void)found_before;
	ret = mismatches || found_after != d.checkpoint_count ? -EIO : 0;
out:
	rec_dir_close(d.dir);
	rec_history_free(&d.history);
	free(d.window);
	return ret ? LAUNCH_EXIT_BAD : LAUNCH_EXIT_OK;
}
