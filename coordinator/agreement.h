/*
 * The startup agreement (docs/DESIGN.md section 7): from every rank's scan
 * summary, rank zero decides which records the store keeps, which of them
 * keep their rows, and what each rank does to every file it holds. Pure
 * functions over arrays; no files and no links (a peer applies its actions,
 * the wire form of a summary belongs to cluster/).
 *
 * The rules, for a world of W ranks:
 *  1. A key is listed everywhere when each of the W ranks lists it exactly
 *     once and every listing has the same header: equal agreement digests
 *     (FORMAT.md R-AGREE-1) and equal parent, bucket, first page, page count
 *     and creation time. A key that is not is deleted on every rank that
 *     lists it (a rank listing a key twice sent a malformed summary; the key
 *     is not listed everywhere).
 *  2. Its row is kept only when every rank's file has its row.
 *  3. A root record (parent consumed 0) listed everywhere is kept. Any other
 *     record listed everywhere is kept only when its parent is kept (R-DIR-5
 *     over the agreed set): dropping a record drops its descendants.
 *  4. A kept record without its row and with no kept child is dropped, and
 *     so, in turn, is a page-only ancestor that this leaves childless
 *     (R-DIR-6 over the agreed set).
 *  5. Each rank's file of a kept record is kept, or truncated when the rank
 *     has the row but rule 2 drops it; every other file is deleted.
 *  6. At most records_max records are kept (rank zero's index holds no
 *     more, and a file outside the index would be outside the disk limit
 *     for good): beyond that, the least recently used leaf by rank zero's
 *     mtime goes, in turn, and with it each page-only ancestor that this
 *     leaves childless (rule 4). Decided before rule 5.
 *  7. Never delete what could not be read (FORMAT.md R-AGREE-2: R-DIR-7
 *     across ranks, cluster/PROTOCOL.md R-WIRE-18): a key that any rank lists as
 *     held (its file there could not be read, or one it depends on could
 *     not) is held on every rank: every rank's file of it is kept as it is,
 *     and it is not an agreed record (no index may serve it while a rank
 *     cannot). So is a record whose parent is held (a child that cannot
 *     be restored now, and must not be taken for an orphan); while any key
 *     is held, a record rule 4 would drop (a held key may be its child);
 *     and a record rule 6 would drop that is the parent of a held key, or
 *     any, while a held key's parent is unknown (no rank read its
 *     header). A later start that reads it decides it by rules 1 to 6.
 */
#ifndef SELENE_COORDINATOR_AGREEMENT_H
#define SELENE_COORDINATOR_AGREEMENT_H

#include "record/dir.h"

#include <stddef.h>
#include <stdint.h>

/* One rank's scan summary: the records it holds, in any order. */
struct coord_rank_records {
	const struct rec_record_info *records; /* may be NULL when count is 0 */
	size_t count;                          /* at most REC_DIR_RECORDS_MAX */
	const struct rec_key *held;            /* keys it holds unread (rule 7) */
	size_t held_count;                     /* at most REC_DIR_RECORDS_MAX */
};

/* What a rank does to one file it holds. */
enum coord_action {
	COORD_ACTION_KEEP = 0,     /* leave the file as it is */
	COORD_ACTION_TRUNCATE_ROW, /* truncate at the row segment (R-REC-10) */
	COORD_ACTION_DELETE,       /* unlink the file */
};

struct coord_agreement {
	/*
	 * The agreed records, oldest first by rank zero's mtime (the order
	 * coord_store_load takes): rank zero's info, with row_present set when
	 * every rank keeps the row and file_bytes the smallest among ranks
	 * (the page-only length when any rank lacks the row).
	 */
	struct rec_record_info *records;
	size_t record_count;
	/*
	 * Every rank's actions, rank-major; see coord_agreement_actions. Keys
	 * a rank lists as held have none: they are never touched.
	 */
	enum coord_action *actions;
	size_t *action_first; /* world_size + 1 offsets into actions */
	uint32_t world_size;
	uint64_t key_count;         /* distinct keys listed by any rank */
	uint64_t disagreed;         /* keys not listed everywhere (rule 1), but
				       those rule 7 holds */
	uint64_t held;              /* keys left in place unindexed (rule 7) */
	uint64_t orphans_dropped;   /* listed everywhere, parent not kept (rule 3) */
	uint64_t page_only_dropped; /* rule 4 */
	uint64_t rows_dropped;      /* kept; some rank truncates its row */
	uint64_t capacity_dropped;  /* leaves past records_max (rule 6) */
};

/*
 * Decides the agreement of world_size ranks (1 .. REC_WORLD_SIZE_MAX),
 * keeping at most records_max records (SIZE_MAX: no limit); ranks[r] is
 * rank r's summary, read only during the call. Allocates a
 * few arrays sized from the input counts, nothing per record, and runs in
 * expected O(n + k log k) for n records in all and k keys listed everywhere
 * (a hash of keys, seeded afresh each call, so no summary can make it
 * quadratic). Returns 0 and fills out (free with coord_agreement_destroy),
 * SEL_ETOOBIG when world_size or a rank's count is past its maximum or the
 * counts add up to 2^31 - 1 or more, or -ENOMEM; on failure out holds nothing
 * to free.
 */
int coord_agreement_decide(struct coord_agreement *out,
			   const struct coord_rank_records *ranks,
			   uint32_t world_size, size_t records_max);

/*
 * Rank's actions, one per record of ranks[rank] in the order given to
 * coord_agreement_decide; valid until coord_agreement_destroy.
 */
const enum coord_action *coord_agreement_actions(const struct coord_agreement *a,
						 uint32_t rank);

/* Frees what coord_agreement_decide allocated; a zeroed struct is fine. */
void coord_agreement_destroy(struct coord_agreement *a);

#endif
