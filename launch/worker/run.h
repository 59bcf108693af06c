/*
 * One rank of the reference TP worker (selene run, docs/DESIGN.md section 8):
 * the steps rank zero broadcasts, and this rank's device memory that
 * executes them. Rank zero decides every step (its GPU prefix cache and the
 * store choose ids); every rank, rank zero included, fills, poisons and
 * checks its own planes with the synthetic model (launch/worker/synth.h), so a
 * restore is checked byte-exact on every rank.
 */
#ifndef SELENE_LAUNCH_RUN_H
#define SELENE_LAUNCH_RUN_H

#include "common/limits.h"
#include "shard/device.h"

#include <stddef.h>
#include <stdint.h>

/* page planes one worker allocates: what one record file can describe */
#define RUN_PLANES_MAX REC_PAGE_PLANES_MAX
#define RUN_STEP_PAGES_MAX 4096u    /* pages one step names (larger ones split) */
#define RUN_NO_SLOT UINT32_MAX
#define RUN_REPORTS_MAX 8u          /* wrong units one rank describes per step */

enum launch_run_op {
	RUN_STEP_FILL = 1,   /* prefill: write the model's pages and row */
	RUN_STEP_POISON,     /* a restore's destination: overwrite with junk first */
	RUN_STEP_VERIFY,     /* compare pages and row with the model */
	RUN_STEP_END,        /* rank zero is done (failed: it failed) */
};

struct launch_run_step_page {
	uint32_t id;
	uint32_t reserved;
	uint64_t hash;       /* the page's prefix hash */
};

struct launch_run_step {
	uint32_t op;
	uint32_t page_count;
	uint32_t slot;       /* the state row, RUN_NO_SLOT for none */
	uint32_t failed;     /* RUN_STEP_END: rank zero's outcome */
	uint64_t row_hash;   /* the row's prefix hash */
	struct launch_run_step_page pages[RUN_STEP_PAGES_MAX];
};

/* Bytes of s that travel: the header and its pages. */
size_t launch_run_step_bytes(const struct launch_run_step *s);

struct launch_run_plane_spec {
	uint32_t count;
	uint64_t unit_bytes;
};

struct launch_run_planes {
	uint32_t rank;
	uint32_t plane_count;
	uint32_t page_count, row_count;
	uint64_t unit_bytes[RUN_PLANES_MAX];
	uint64_t page_base[RUN_PLANES_MAX]; /* device addresses */
	uint64_t row_bytes, row_base;
	struct shard_device *cuda;          /* NULL: planes in host memory */
	uint8_t *scratch, *expect;          /* the largest unit each */
	char names[RUN_PLANES_MAX][16];     /* "plane.000" ... */
};

/*
 * Allocates this rank's planes: for each spec, count page planes of
 * page_count units; one row plane of row_count rows. device is "auto"
 * (cuda where it opens, else host, saying why), "cuda" or "host". Planes
 * in host memory may take at most host_budget_bytes (UINT64_MAX: no
 * limit); more is refused before anything is allocated. Returns 0, or a
 * negative code (-ENOMEM past the budget) with err.
 */
int launch_run_planes_open(struct launch_run_planes *p, uint32_t rank, const char *device,
			   int ordinal,
			   const struct launch_run_plane_spec *specs, uint32_t spec_count,
			   uint32_t page_count, uint64_t row_bytes, uint32_t row_count,
			   uint64_t host_budget_bytes, char *err, size_t err_size);
void launch_run_planes_close(struct launch_run_planes *p);

/* "cuda" or "host": what the store must be told. */
const char *launch_run_planes_device(const struct launch_run_planes *p);

/*
 * Executes s on this rank's planes. Returns the number of wrong pages and
 * rows (RUN_STEP_VERIFY; each of the first RUN_REPORTS_MAX described on
 * stderr), 0, or a negative code when the device fails.
 */
int64_t launch_run_planes_execute(struct launch_run_planes *p, const struct launch_run_step *s);

#endif
