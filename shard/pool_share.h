/*
 * A rank's share of a pool claim, into the device (docs/DESIGN.md section
 * 12; cluster/PROTOCOL.md R-WIRE-21's pool claim): where each stored page
 * and the row of a claimed chain go among the claim's page ids and state
 * slot, and the batched device copies that put them there, from windows a
 * pool connection delivered (already verified against the record's
 * checksums by the client, pool/client.h) or from record images in the
 * manager's shared-memory arena on this host (verified when put; their
 * headers are checked again here). It checks that every destination page
 * and the row arrived exactly once before it calls a claim complete, so a
 * claim that stopped early is a failure, never a half-written success.
 *
 * What it is not: it opens no connection and reads no socket (the caller
 * feeds it windows), and it decides nothing about the chain (rank zero did).
 * One claim at a time per struct, on one thread (the caller's transfer
 * thread), which owns the device while it copies.
 */
#ifndef SELENE_SHARD_POOL_SHARE_H
#define SELENE_SHARD_POOL_SHARE_H

#include "record/geometry.h"
#include "record/key.h"
#include "shard/device.h"
#include "shard/engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A window's part of a record image (pool/PROTOCOL.md R-POOL-33's sections). */
enum shard_pool_section {
	SHARD_POOL_SECTION_HEADER = 0,
	SHARD_POOL_SECTION_CHECKSUMS = 1,
	SHARD_POOL_SECTION_PAGES = 2,
	SHARD_POOL_SECTION_ROW = 3,
};

/* A share image's range in the manager's arena (R-POOL-34). */
struct shard_pool_place {
	uint64_t offset;
	uint64_t bytes;
};

/* One record of the claimed chain, root side first, as rank zero sent it. */
struct shard_pool_record {
	struct rec_key key;
	uint32_t first_page_index;
	uint32_t tail_page_count;
	bool row;
};

struct shard_pool_share {
	const struct rec_geometry *geometry;    /* this rank's; borrowed */
	const struct rec_identity *namespace_id; /* borrowed */
	struct shard_planes planes;              /* device bases, copied */
	struct shard_device *device;            /* borrowed; bound by the caller */
	uint64_t plane_offset[REC_PAGE_PLANES_MAX]; /* within a stored page */
	/*
	 * SHARD_WINDOW_PAGES_MAX * planes + row pieces: one entry per plane per
	 * run of stored pages going to consecutive page ids
	 */
	struct shard_copy_strided *copies;
	uint32_t copies_max;
	uint64_t *arrived;            /* a bit per destination page (geometry page count) */
	/* the claim in progress */
	const struct shard_pool_record *chain; /* borrowed for the claim */
	uint32_t chain_count;
	uint32_t skip_pages;
	const uint32_t *page_ids;     /* page_id_count; borrowed for the claim */
	uint32_t page_id_count;
	uint32_t state_slot;
	uint32_t pages_arrived;
	uint64_t row_bytes_arrived;   /* of the row unit, from offset 0, in order */
	uint64_t bytes_copied;
	bool unsynced;                /* arena copies issued, not yet waited for */
	/* a same-host claim's records (shard_pool_share_early, _granted) */
	uint32_t records_early;       /* copied before the grant and kept */
	uint32_t records_redone;      /* copied before the grant, stale: copied again */
	uint32_t records_waited;      /* copied only once the grant came */
};

/*
 * One record's place in the manager's arena as a lookup's ANSWER named it
 * for the session rank, with its image's stamp (pool/PROTOCOL.md R-POOL-22,
 * R-POOL-53; stamp 0: the record lay on the manager's disk tier).
 */
struct shard_pool_early {
	uint64_t offset;
	uint64_t bytes;
	uint64_t stamp;
	bool issued; /* shard_pool_share_early issued its copies */
};

/*
 * Allocates the copy list and the page bitmap for geometry (borrowed, as
 * are namespace_id and device; planes is copied). Returns 0 or -ENOMEM.
 * Release with shard_pool_share_destroy.
 */
int shard_pool_share_init(struct shard_pool_share *p, const struct rec_geometry *geometry,
			  const struct rec_identity *namespace_id,
			  const struct shard_planes *planes, struct shard_device *device);
void shard_pool_share_destroy(struct shard_pool_share *p);

/*
 * Starts a claim: chain (chain_count records, root side first, contiguous:
 * each record's first page index the previous one's end), whose first
 * skip_pages pages are resident, into page_ids (the chain's pages after
 * skip, page_id_count of them, each below the geometry's page count) and
 * state_slot (the last record's row, which it must hold). Everything is
 * borrowed until shard_pool_share_finish. Returns 0, or -EINVAL with the
 * reason in why (a chain that does not follow, counts that do not match,
 * an id or slot past the device).
 */
int shard_pool_share_begin(struct shard_pool_share *p, const struct shard_pool_record *chain,
			   uint32_t chain_count, uint32_t skip_pages, const uint32_t *page_ids,
			   uint32_t page_id_count, uint32_t state_slot, char *why,
			   size_t why_size);

/*
 * Copies one delivered window into the device and waits for the copies:
 * pages (first: stored page index in record chain_index, count whole
 * pages of data, each the geometry's page_record_bytes) to their page ids;
 * the last record's row (first: byte offset in the row segment, in order)
 * to the state slot; header and checksum windows move nothing. Returns 0,
 * SEL_EMISMATCH with why for a window the claim does not expect (a record
 * outside the chain, pages before skip or past a record's end, a page that
 * arrived already, a row out of order or of another record, a size that is
 * not whole pages), or the device's failure.
 */
int shard_pool_share_window(struct shard_pool_share *p, uint32_t chain_index,
			    enum shard_pool_section section, uint32_t first, uint32_t count,
			    const uint8_t *data, size_t bytes, char *why, size_t why_size);

/*
 * Copies record chain_index from its share image in the manager's arena
 * (image, bytes: header, checksums, pages, row as record/FORMAT.md lays
 * them out), after checking its header against the chain and this rank's
 * geometry and namespace (R-REC-12) and its length (R-REC-10). The copies
 * are issued, not waited for: the image must stay put (the claim pins it)
 * until shard_pool_share_finish, which waits once for every record's
 * copies. Returns 0, SEL_EBADHEADER or SEL_EMISMATCH with why, or the
 * device's failure.
 */
int shard_pool_share_place(struct shard_pool_share *p, uint32_t chain_index,
			   const uint8_t *image, uint64_t bytes, char *why, size_t why_size);

/*
 * A same-host claim's copies, issued before its grant (R-POOL-22): for each
 * of the begun claim's records (count, the chain's) whose stamp is not 0,
 * whose place lies inside the arena (arena, arena_bytes: the mapping) and
 * whose image there has the record's header, issues its copies as
 * shard_pool_share_place does and sets issued; any other record is left
 * for its grant. A place may be stale (the record evicted since the
 * answer, its range reused): what is copied from it is undone by
 * shard_pool_share_granted, which the caller runs before it reports
 * anything. Returns 0 or the device's failure.
 */
int shard_pool_share_early(struct shard_pool_share *p, const uint8_t *arena,
			   uint64_t arena_bytes, struct shard_pool_early *early, uint32_t count);

/*
 * The grant of a claim begun with shard_pool_share_early: its chain
 * (granted, count records, with each image's stamp in stamps, R-POOL-36)
 * must be the begun one's, else SEL_ENOTFOUND (the pool changed since the
 * lookup); places are the session rank's granted places (R-POOL-34,
 * bounds-checked: SEL_EPROTO). A record issued early whose stamp and
 * place equal the grant's keeps its copies (counted in records_early);
 * any other is
 * copied from its granted place, after the early copies on the same
 * device stream, so the later bytes are the ones that stay (records_redone
 * or records_waited). Returns 0, SEL_ENOTFOUND, SEL_EPROTO, SEL_EBADHEADER
 * or SEL_EMISMATCH with why, or the device's failure; finish the claim
 * either way.
 */
int shard_pool_share_granted(struct shard_pool_share *p, const uint8_t *arena,
			     uint64_t arena_bytes, const struct shard_pool_early *early,
			     const struct shard_pool_record *granted, const uint64_t *stamps,
			     const struct shard_pool_place *places, uint32_t count, char *why,
			     size_t why_size);

/*
 * Ends the claim: waits for copies out of the arena still in flight, then
 * returns 0 when they finished and every destination page and the whole
 * row arrived (*bytes: what was copied to the device), the device's
 * failure, or SEL_EMISMATCH with why when something is missing. Either way
 * no copy of the claim is in flight on return and the claim's borrowed
 * pointers are released: call it on every claim begun, failed or not,
 * before the images it read from may move.
 */
int shard_pool_share_finish(struct shard_pool_share *p, uint64_t *bytes, char *why,
			    size_t why_size);

#endif
