/*
 * A rank's share of a pool claim, into the device: see pool_share.h.
 */
#include "shard/pool_share.h"

#include "common/base.h"
#include "record/format.h"
#include "selene/selene.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Row pieces a copy list keeps room for: the row goes in one copy. */
#define SHARE_ROW_COPIES 1u

int shard_pool_share_init(struct shard_pool_share *p, const struct rec_geometry *geometry,
			  const struct rec_identity *namespace_id,
			  const struct shard_planes *planes, struct shard_device *device)
{
	uint64_t offset = 0;

	memset(p, 0, sizeof(*p));
	p->geometry = geometry;
	p->namespace_id = namespace_id;
	p->planes = *planes;
	p->device = device;
	for (uint32_t i = 0; i < geometry->page_plane_count; i++) {
		p->plane_offset[i] = offset;
		offset += sel_align_up(geometry->page_planes[i].unit_bytes, SEL_BLOCK_BYTES);
	}
	p->copies_max = SHARD_WINDOW_PAGES_MAX * geometry->page_plane_count + SHARE_ROW_COPIES;
	p->copies = calloc(p->copies_max, sizeof(*p->copies));
	p->arrived = calloc(geometry->page_count / 64 + 1, sizeof(*p->arrived));
	if (!p->copies || !p->arrived) {
		shard_pool_share_destroy(p);
		return -ENOMEM;
	}
	return 0;
}

void shard_pool_share_destroy(struct shard_pool_share *p)
{
	free(p->copies);
	free(p->arrived);
	p->copies = NULL;
	p->arrived = NULL;
}

int shard_pool_share_begin(struct shard_pool_share *p, const struct shard_pool_record *chain,
			   uint32_t chain_count, uint32_t skip_pages, const uint32_t *page_ids,
			   uint32_t page_id_count, uint32_t state_slot, char *why,
			   size_t why_size)
{
	const struct rec_geometry *g = p->geometry;
	uint64_t pages = 0;

	if (chain_count == 0 || !chain[chain_count - 1].row)
		return sel_fail(-EINVAL, why, why_size, "a claim of %u records whose last has %s",
				chain_count, chain_count ? "no row" : "nothing");
	for (uint32_t i = 0; i < chain_count; i++) {
		if (i && chain[i].first_page_index !=
				 (uint64_t)chain[i - 1].first_page_index + chain[i - 1].tail_page_count)
			return sel_fail(-EINVAL, why, why_size, "claim record %u does not follow "
					"record %u", i, i - 1);
		pages += chain[i].tail_page_count;
	}
	if (skip_pages > pages || pages - skip_pages != page_id_count)
		return sel_fail(-EINVAL, why, why_size, "a claim of %" PRIu64 " pages skipping %u "
				"names %u page ids", pages, skip_pages, page_id_count);
	if (page_id_count > g->page_count || state_slot >= g->row_count)
		return sel_fail(-EINVAL, why, why_size, "a claim of %u pages into slot %u: this "
				"rank has %u pages and %u rows", page_id_count, state_slot,
				g->page_count, g->row_count);
	for (uint32_t i = 0; i < page_id_count; i++)
		if (page_ids[i] >= g->page_count)
			return sel_fail(-EINVAL, why, why_size, "page id %u is past this rank's %u "
					"pages", page_ids[i], g->page_count);
	memset(p->arrived, 0, (g->page_count / 64 + 1) * sizeof(*p->arrived));
	p->chain = chain;
	p->chain_count = chain_count;
	p->skip_pages = skip_pages;
	p->page_ids = page_ids;
	p->page_id_count = page_id_count;
	p->state_slot = state_slot;
	p->pages_arrived = 0;
	p->row_bytes_arrived = 0;
	p->bytes_copied = 0;
	p->unsynced = false;
	p->records_early = p->records_redone = p->records_waited = 0;
	return 0;
}

/* Issues n copies of the list; waits only at the end of a window (share_sync). */
static int share_issue(struct shard_pool_share *p, uint32_t n)
{
	int ret = n ? shard_device_copy_strided(p->device, SHARD_HOST_TO_DEVICE, p->copies, n) :
		      0;

	for (uint32_t i = 0; !ret && i < n; i++)
		p->bytes_copied += p->copies[i].bytes * p->copies[i].rows;
	return ret;
}

/*
 * A failure to issue does not skip the wait: copies issued before may still
 * read the window, which the caller reuses once this returns.
 */
static int share_sync(struct shard_pool_share *p, int issued)
{
	int drained = shard_device_synchronize(p->device);

	p->unsynced = false;
	return issued ? issued : drained;
}

/*
 * After copies out of the arena: they read bytes the claim pins, which stay
 * put until every rank ended it, so the wait is left to
 * shard_pool_share_finish (once per claim, as warm fetches do).
 */
static int share_defer(struct shard_pool_share *p, int issued)
{
	p->unsynced = true;
	return issued;
}

/*
 * Copies count stored pages of record i, from stored page first, whose
 * bytes start at src with stride bytes between pages. From a window (arena
 * false) pages before the claim's skip are refused and the copies are
 * waited for; from an arena image (arena true) they are passed over (the
 * image holds them) and the wait is deferred to the claim's finish. Each
 * plane of a run of stored pages going to consecutive page ids is one
 * strided entry (its rows the pages, a stride apart in the image).
 */
static int share_pages(struct shard_pool_share *p, uint32_t i, uint32_t first, uint32_t count,
		       const uint8_t *src, uint64_t stride, bool arena, char *why,
		       size_t why_size)
{
	const struct rec_geometry *g = p->geometry;
	uint64_t start = (uint64_t)p->chain[0].first_page_index + p->skip_pages;
	uint32_t n = 0;
	bool run = false; /* the last entries end at the previous stored page */
	int ret = 0;

	if ((uint64_t)first + count > p->chain[i].tail_page_count)
		return sel_fail(SEL_EMISMATCH, why, why_size, "claim record %u: pages %u .. %u "
				"past its %u", i, first, first + count - 1,
				p->chain[i].tail_page_count);
	for (uint32_t j = first; !ret && j < first + count; j++) {
		uint64_t q = (uint64_t)p->chain[i].first_page_index + j, d = q - start;

		if (q < start) {
			if (arena)
				continue;
			ret = sel_fail(SEL_EMISMATCH, why, why_size, "claim record %u: page %u "
				       "lies within the %u pages skipped", i, j, p->skip_pages);
			break;
		}
		if (p->arrived[d / 64] & (1ull << (d % 64))) {
			ret = sel_fail(SEL_EMISMATCH, why, why_size, "claim record %u: page %u "
				       "arrived twice", i, j);
			break;
		}
		p->arrived[d / 64] |= 1ull << (d % 64);
		p->pages_arrived++;
		/* the next stored page to the next page id: one more row of each plane's entry */
		if (run && d > 0 && p->page_ids[d] == p->page_ids[d - 1] + 1) {
			for (uint32_t k = 0; k < g->page_plane_count; k++)
				p->copies[n - g->page_plane_count + k].rows++;
			continue;
		}
		if (n + g->page_plane_count > p->copies_max) {
			ret = share_issue(p, n);
			n = 0;
		}
		for (uint32_t k = 0; k < g->page_plane_count; k++) {
			uint64_t unit = g->page_planes[k].unit_bytes;

			p->copies[n++] = (struct shard_copy_strided){
				.device_address = p->planes.page_base[k] + unit * p->page_ids[d],
				.device_pitch = unit,
				.host = (void *)(src + stride * (j - first) + p->plane_offset[k]),
				.host_pitch = stride,
				.bytes = unit,
				.rows = 1,
			};
		}
		run = true;
	}
	if (!ret)
		ret = share_issue(p, n);
	return arena ? share_defer(p, ret) : share_sync(p, ret);
}

/*
 * Bytes [offset, offset + bytes) of the last record's row segment, in
 * order; waited for as share_pages says.
 */
static int share_row(struct shard_pool_share *p, uint32_t i, uint64_t offset,
		     const uint8_t *data, uint64_t bytes, bool arena, char *why,
		     size_t why_size)
{
	uint64_t unit = p->geometry->row_plane.unit_bytes;
	uint32_t n = 0;

	if (i + 1 != p->chain_count || offset != p->row_bytes_arrived ||
	    offset + bytes > p->geometry->row_record_bytes)
		return sel_fail(SEL_EMISMATCH, why, why_size, "claim record %u: row bytes %" PRIu64
				" .. %" PRIu64 " out of place (%" PRIu64 " arrived, the row is "
				"the last record's)", i, offset, offset + bytes, p->row_bytes_arrived);
	p->row_bytes_arrived += bytes;
	if (offset < unit)
		p->copies[n++] = (struct shard_copy_strided){
			.device_address = p->planes.row_base + unit * p->state_slot + offset,
			.host = (void *)data,
			.bytes = offset + bytes < unit ? bytes : unit - offset,
			.rows = 1,
		};
	return arena ? share_defer(p, share_issue(p, n)) : share_sync(p, share_issue(p, n));
}

int shard_pool_share_window(struct shard_pool_share *p, uint32_t chain_index,
			    enum shard_pool_section section, uint32_t first, uint32_t count,
			    const uint8_t *data, size_t bytes, char *why, size_t why_size)
{
	uint64_t page_bytes = p->geometry->page_record_bytes;

	SEL_ASSERT(p->chain);
	if (chain_index >= p->chain_count)
		return sel_fail(SEL_EMISMATCH, why, why_size, "a window of claim record %u of %u",
				chain_index, p->chain_count);
	switch (section) {
	case SHARD_POOL_SECTION_HEADER:
	case SHARD_POOL_SECTION_CHECKSUMS:
		return 0;
	case SHARD_POOL_SECTION_PAGES:
		if (count == 0 || bytes != page_bytes * count)
			return sel_fail(SEL_EMISMATCH, why, why_size, "a window of %u pages holds "
					"%zu bytes, not %" PRIu64, count, bytes, page_bytes * count);
		return share_pages(p, chain_index, first, count, data, page_bytes, false, why,
				   why_size);
	case SHARD_POOL_SECTION_ROW:
		if (bytes != count)
			return sel_fail(SEL_EMISMATCH, why, why_size, "a row window of %u bytes "
					"holds %zu", count, bytes);
		return share_row(p, chain_index, first, data, bytes, false, why, why_size);
	}
	return sel_fail(SEL_EMISMATCH, why, why_size, "a window of section %d", (int)section);
}

/* The header of record chain_index's arena image (bytes long), checked into *h. */
static int image_check(const struct shard_pool_share *p, uint32_t chain_index,
		       const uint8_t *image, uint64_t bytes, struct rec_header *h, char *why,
		       size_t why_size)
{
	const struct shard_pool_record *r;
	struct rec_expect expect = { .namespace_id = p->namespace_id, .geometry = p->geometry };
	bool row_present;
	int ret;

	if (chain_index >= p->chain_count || bytes < REC_HEADER_BYTES)
		return sel_fail(SEL_EMISMATCH, why, why_size, "an arena image of %" PRIu64
				" bytes for claim record %u of %u", bytes, chain_index,
				p->chain_count);
	r = &p->chain[chain_index];
	ret = rec_header_decode(image, h, why, why_size);
	if (!ret)
		ret = rec_header_check_expected(h, &expect, why, why_size);
	if (!ret)
		ret = rec_header_check_length(h, bytes, &row_present, why, why_size);
	if (ret)
		return ret;
	if (!rec_key_equal(&h->key, &r->key) || h->first_page_index != r->first_page_index ||
	    h->tail_page_count != r->tail_page_count || (r->row && !row_present))
		return sel_fail(SEL_EMISMATCH, why, why_size, "claim record %u: the arena holds "
				"another record (%" PRIu64 " tokens, pages %u + %u%s)", chain_index,
				h->key.consumed, h->first_page_index, h->tail_page_count,
				row_present ? ", row" : "");
	return 0;
}

int shard_pool_share_place(struct shard_pool_share *p, uint32_t chain_index,
			   const uint8_t *image, uint64_t bytes, char *why, size_t why_size)
{
	const struct shard_pool_record *r;
	struct rec_header h;
	int ret;

	SEL_ASSERT(p->chain);
	ret = image_check(p, chain_index, image, bytes, &h, why, why_size);
	if (ret)
		return ret;
	r = &p->chain[chain_index];
	if (r->tail_page_count) {
		ret = share_pages(p, chain_index, 0, r->tail_page_count, image + h.page_offset,
				  h.page_stride, true, why, why_size);
		if (ret)
			return ret;
	}
	if (chain_index + 1 < p->chain_count)
		return 0;
	return share_row(p, chain_index, 0, image + h.row_offset, p->geometry->row_record_bytes,
			 true, why, why_size);
}

/* Whether place lies inside an arena of arena_bytes (R-POOL-34). */
static bool place_inside(uint64_t offset, uint64_t bytes, uint64_t arena_bytes)
{
	return offset <= arena_bytes && bytes <= arena_bytes - offset;
}

/* Forgets what record i's copies delivered, so that they can come again. */
static void share_unmark(struct shard_pool_share *p, uint32_t i)
{
	uint64_t start = (uint64_t)p->chain[0].first_page_index + p->skip_pages;

	for (uint32_t j = 0; j < p->chain[i].tail_page_count; j++) {
		uint64_t q = (uint64_t)p->chain[i].first_page_index + j, d = q - start;

		if (q < start || !(p->arrived[d / 64] & (1ull << (d % 64))))
			continue;
		p->arrived[d / 64] &= ~(1ull << (d % 64));
		p->pages_arrived--;
	}
	if (i + 1 == p->chain_count)
		p->row_bytes_arrived = 0;
}

int shard_pool_share_early(struct shard_pool_share *p, const uint8_t *arena,
			   uint64_t arena_bytes, struct shard_pool_early *early, uint32_t count)
{
	struct rec_header h;
	int ret = 0;

	SEL_ASSERT(p->chain && count == p->chain_count);
	for (uint32_t i = 0; !ret && i < count; i++) {
		struct shard_pool_early *e = &early[i];

		e->issued = false;
		/* a stale place may hold anything: a header that is not the record's skips it */
		if (e->stamp == 0 || !place_inside(e->offset, e->bytes, arena_bytes) ||
		    image_check(p, i, arena + e->offset, e->bytes, &h, NULL, 0))
			continue;
		ret = shard_pool_share_place(p, i, arena + e->offset, e->bytes, NULL, 0);
		if (ret == SEL_EBADHEADER || ret == SEL_EMISMATCH) {
			/* the manager rewrote the header since: nothing was issued for it */
			share_unmark(p, i);
			ret = 0;
			continue;
		}
		e->issued = ret == 0;
	}
	return ret;
}

int shard_pool_share_granted(struct shard_pool_share *p, const uint8_t *arena,
			     uint64_t arena_bytes, const struct shard_pool_early *early,
			     const struct shard_pool_record *granted, const uint64_t *stamps,
			     const struct shard_pool_place *places, uint32_t count, char *why,
			     size_t why_size)
{
	int ret = 0;

	SEL_ASSERT(p->chain);
	if (count != p->chain_count)
		return sel_fail(SEL_ENOTFOUND, why, why_size, "the grant names %u records, the "
				"lookup %u: the pool's chain changed", count, p->chain_count);
	for (uint32_t i = 0; i < count; i++) {
		const struct shard_pool_record *a = &p->chain[i], *g = &granted[i];

		if (!rec_key_equal(&a->key, &g->key) || a->first_page_index != g->first_page_index ||
		    a->tail_page_count != g->tail_page_count || a->row != g->row)
			return sel_fail(SEL_ENOTFOUND, why, why_size, "the grant's record %u is not "
					"the lookup's: the pool's chain changed", i);
	}
	for (uint32_t i = 0; !ret && i < count; i++) {
		const struct shard_pool_place *pl = &places[i];

		if (early[i].issued && early[i].stamp == stamps[i] &&
		    early[i].offset == pl->offset && early[i].bytes == pl->bytes) {
			p->records_early++;
			continue;
		}
		if (!place_inside(pl->offset, pl->bytes, arena_bytes))
			return sel_fail(SEL_EPROTO, why, why_size, "claim record %u: %" PRIu64
					" bytes at %" PRIu64 " past the %" PRIu64 "-byte arena", i,
					pl->bytes, pl->offset, arena_bytes);
		if (early[i].issued) {
			share_unmark(p, i);
			p->records_redone++;
		} else {
			p->records_waited++;
		}
		ret = shard_pool_share_place(p, i, arena + pl->offset, pl->bytes, why, why_size);
	}
	return ret;
}

int shard_pool_share_finish(struct shard_pool_share *p, uint64_t *bytes, char *why,
			    size_t why_size)
{
	int ret = 0;

	/* every copy out of the arena has finished before anything is reported */
	if (p->unsynced)
		ret = share_sync(p, 0);
	if (ret)
		sel_fail(ret, why, why_size, "the device copies of the claim failed: %s",
			 sel_strerror(ret));
	else if (p->pages_arrived != p->page_id_count ||
	    p->row_bytes_arrived < p->geometry->row_plane.unit_bytes)
		ret = sel_fail(SEL_EMISMATCH, why, why_size, "the claim ended with %u of %u pages "
			       "and %" PRIu64 " of %" PRIu64 " row bytes", p->pages_arrived,
			       p->page_id_count, p->row_bytes_arrived,
			       p->geometry->row_plane.unit_bytes);
	*bytes = p->bytes_copied;
	p->chain = NULL;
	p->page_ids = NULL;
	return ret;
}
