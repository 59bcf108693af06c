/*
 * A worker rank's device memory (launch/worker/run.h): page planes and a row plane
 * on the CUDA device or in host memory, and the fill, poison and verify
 * steps over them. Device memory goes through shard/device.h, the only place
 * that knows the CUDA driver API.
 */
#include "launch/worker/run.h"

#include "launch/worker/synth.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t launch_run_step_bytes(const struct launch_run_step *s)
{
	return offsetof(struct launch_run_step, pages) + (size_t)s->page_count * sizeof(s->pages[0]);
}

static int alloc_plane(struct launch_run_planes *p, uint64_t bytes, uint64_t *address)
{
	void *host;

	if (p->cuda)
		return shard_device_cuda_alloc(p->cuda, bytes, address);
	host = aligned_alloc(4096, (bytes + 4095) & ~4095ull);
	if (!host)
		return -ENOMEM;
	*address = (uintptr_t)host;
	return 0;
}

static void free_plane(struct launch_run_planes *p, uint64_t address)
{
	if (!address)
		return;
	if (p->cuda)
		shard_device_cuda_free(p->cuda, address);
	else
		free((void *)(uintptr_t)address);
}

static int open_device(struct launch_run_planes *p, const char *device, int ordinal, char *err,
		       size_t err_size)
{
	char why[256];
	int ret;

	if (strcmp(device, "host") == 0)
		return 0;
	if (strcmp(device, "cuda") != 0 && strcmp(device, "auto") != 0) {
		snprintf(err, err_size, "--device %s: auto, cuda or host", device);
		return -EINVAL;
	}
	ret = shard_device_open_cuda(ordinal, &p->cuda, why, sizeof(why));
	if (ret && strcmp(device, "cuda") == 0) {
		snprintf(err, err_size, "--device cuda: %s", why);
		return ret;
	}
	if (ret) {
		fprintf(stderr, "selene run: rank %u: no CUDA device (%s); using host memory\n",
			p->rank, why);
		p->cuda = NULL;
		return 0;
	}
	return shard_device_bind(p->cuda);
}

int launch_run_planes_open(struct launch_run_planes *p, uint32_t rank, const char *device,
			   int ordinal,
			   const struct launch_run_plane_spec *specs, uint32_t spec_count,
			   uint32_t page_count, uint64_t row_bytes, uint32_t row_count,
			   uint64_t host_budget_bytes, char *err, size_t err_size)
{
	uint64_t largest = row_bytes, page_bytes = 0, plane_bytes, row_plane_bytes;
	int ret;

	memset(p, 0, sizeof(*p));
	p->rank = rank;
	p->page_count = page_count;
	p->row_count = row_count;
	p->row_bytes = row_bytes;
	for (uint32_t s = 0; s < spec_count; s++) {
		for (uint32_t i = 0; i < specs[s].count; i++) {
			if (p->plane_count == RUN_PLANES_MAX) {
				snprintf(err, err_size, "--planes: more than %u planes (the record "
					 "format's limit)", RUN_PLANES_MAX);
				return -EINVAL;
			}
			snprintf(p->names[p->plane_count], sizeof(p->names[0]), "plane.%03u",
				 p->plane_count);
			p->unit_bytes[p->plane_count++] = specs[s].unit_bytes;
			page_bytes += specs[s].unit_bytes;
			if (specs[s].unit_bytes > largest)
				largest = specs[s].unit_bytes;
		}
	}
	ret = open_device(p, device, ordinal, err, err_size);
	if (ret)
		return ret;
	if (!p->cuda && (__builtin_mul_overflow(page_bytes, page_count, &plane_bytes) ||
			 __builtin_mul_overflow(row_bytes, row_count, &row_plane_bytes) ||
			 __builtin_add_overflow(plane_bytes, row_plane_bytes, &plane_bytes) ||
			 plane_bytes > host_budget_bytes)) {
		snprintf(err, err_size, "%u pages of %" PRIu64 " bytes and %u rows of %" PRIu64
			 " bytes do not fit the %.1f GiB of host memory left for this rank's "
			 "planes: lower --gpu-pages, --gpu-rows or --planes", page_count,
			 page_bytes, row_count, row_bytes, (double)host_budget_bytes / (1u << 30));
		launch_run_planes_close(p);
		return -ENOMEM;
	}
	p->scratch = malloc(largest);
	p->expect = malloc(largest);
	ret = p->scratch && p->expect ? 0 : -ENOMEM;
	for (uint32_t i = 0; !ret && i < p->plane_count; i++)
		ret = alloc_plane(p, p->unit_bytes[i] * page_count, &p->page_base[i]);
	if (!ret)
		ret = alloc_plane(p, row_bytes * row_count, &p->row_base);
	if (ret) {
		snprintf(err, err_size, "cannot allocate the %s planes (%u pages of %" PRIu64
			 " bytes, %u rows of %" PRIu64 " bytes): %s", launch_run_planes_device(p),
			 page_count, page_bytes, row_count, row_bytes, strerror(-ret));
		launch_run_planes_close(p);
	}
	return ret;
}

void launch_run_planes_close(struct launch_run_planes *p)
{
	for (uint32_t i = 0; i < p->plane_count; i++)
		free_plane(p, p->page_base[i]);
	free_plane(p, p->row_base);
	free(p->scratch);
	free(p->expect);
	shard_device_close(p->cuda);
	memset(p, 0, sizeof(*p));
}

const char *launch_run_planes_device(const struct launch_run_planes *p)
{
	return p->cuda ? "cuda" : "host";
}

/* Writes bytes at address from the scratch buffer (host: in place already). */
static int put_unit(struct launch_run_planes *p, uint64_t address, uint64_t bytes)
{
	if (!p->cuda)
		return 0;
	return shard_device_cuda_memcpy(p->cuda, SHARD_HOST_TO_DEVICE, address, p->scratch,
					bytes);
}

/* Where a unit's bytes are produced: on the host device, in place. */
static void *unit_target(struct launch_run_planes *p, uint64_t address)
{
	return p->cuda ? (void *)p->scratch : (void *)(uintptr_t)address;
}

static int fill_page(struct launch_run_planes *p, const struct launch_run_step_page *pg,
		     bool poison)
{
	int ret = 0;

	for (uint32_t i = 0; !ret && i < p->plane_count; i++) {
		uint64_t address = p->page_base[i] + pg->id * p->unit_bytes[i];
		void *to = unit_target(p, address);

		if (poison)
			launch_synth_poison(to, p->unit_bytes[i], (uint64_t)pg->id << 8 | i);
		else
			launch_synth_page(to, p->unit_bytes[i], p->rank, i, pg->hash);
		ret = put_unit(p, address, p->unit_bytes[i]);
	}
	return ret;
}

static int fill_row(struct launch_run_planes *p, uint32_t slot, uint64_t hash, bool poison)
{
	uint64_t address = p->row_base + slot * p->row_bytes;
	void *to = unit_target(p, address);

	if (poison)
		launch_synth_poison(to, p->row_bytes, ~(uint64_t)slot);
	else
		launch_synth_row(to, p->row_bytes, p->rank, hash);
	return put_unit(p, address, p->row_bytes);
}

/* Compares the unit at address with p->expect; 1 when it differs. */
static int check_unit(struct launch_run_planes *p, uint64_t address, uint64_t bytes,
		      uint64_t *first_wrong)
{
	const uint8_t *have = (const uint8_t *)(uintptr_t)address;
	int ret;

	if (p->cuda) {
		ret = shard_device_cuda_memcpy(p->cuda, SHARD_DEVICE_TO_HOST, address, p->scratch,
					       bytes);
		if (ret)
			return ret;
		have = p->scratch;
	}
	if (memcmp(have, p->expect, bytes) == 0)
		return 0;
	for (*first_wrong = 0; have[*first_wrong] == p->expect[*first_wrong]; (*first_wrong)++)
		;
	return 1;
}

static int64_t verify(struct launch_run_planes *p, const struct launch_run_step *s)
{
	int64_t wrong = 0;
	uint64_t at;
	int ret;

	for (uint32_t k = 0; k < s->page_count; k++) {
		const struct launch_run_step_page *pg = &s->pages[k];

		for (uint32_t i = 0; i < p->plane_count; i++) {
			launch_synth_page(p->expect, p->unit_bytes[i], p->rank, i, pg->hash);
			ret = check_unit(p, p->page_base[i] + pg->id * p->unit_bytes[i],
					 p->unit_bytes[i], &at);
			if (ret < 0)
				return ret;
			if (ret && wrong++ < RUN_REPORTS_MAX)
				fprintf(stderr, "selene run: rank %u: WRONG BYTES in page id %u of "
					"%s from byte %" PRIu64 "\n", p->rank, pg->id, p->names[i], at);
		}
	}
	if (s->slot != RUN_NO_SLOT) {
		launch_synth_row(p->expect, p->row_bytes, p->rank, s->row_hash);
		ret = check_unit(p, p->row_base + s->slot * p->row_bytes, p->row_bytes, &at);
		if (ret < 0)
			return ret;
		if (ret && wrong++ < RUN_REPORTS_MAX)
			fprintf(stderr, "selene run: rank %u: WRONG BYTES in state slot %u from "
				"byte %" PRIu64 "\n", p->rank, s->slot, at);
	}
	return wrong;
}

int64_t launch_run_planes_execute(struct launch_run_planes *p, const struct launch_run_step *s)
{
	bool poison = s->op == RUN_STEP_POISON;
	int ret = 0;

	if (s->page_count > RUN_STEP_PAGES_MAX ||
	    (s->slot != RUN_NO_SLOT && s->slot >= p->row_count))
		return -EINVAL;
	for (uint32_t k = 0; k < s->page_count; k++)
		if (s->pages[k].id >= p->page_count)
			return -EINVAL;
	switch (s->op) {
	case RUN_STEP_FILL:
	case RUN_STEP_POISON:
		for (uint32_t k = 0; !ret && k < s->page_count; k++)
			ret = fill_page(p, &s->pages[k], poison);
		if (!ret && s->slot != RUN_NO_SLOT)
			ret = fill_row(p, s->slot, s->row_hash, poison);
		return ret;
	case RUN_STEP_VERIFY:
		return verify(p, s);
	default:
		return -EINVAL;
	}
}
