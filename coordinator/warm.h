/*
 * The warm tier's policy on rank zero (docs/DESIGN.md section 5, seed 2.4):
 * which records every rank holds in warm slots (shard/warm.h), how many
 * slots they take, and which goes first. Every rank has the same slots
 * (warm_bytes is agreed at the join) and runs the same jobs in the same
 * order, so one count here stands for every rank's pool: a store is sent
 * warm only when its slots are free here, and slots are given back here
 * when the job that frees them on the ranks (a warm drop, an unlink, a
 * truncate of the row, a failed store, a store of the same key) is
 * submitted, which every rank runs before any store submitted after it.
 * Eviction is LRU of its own, apart from the disk's, and takes only
 * records on disk on every rank (clean) that no fetch or write has pinned
 * and no dirty record depends on; dirty records (warm only, their files
 * still to write) are tracked here too. A fetch's read-through charges
 * its records' slots when it is submitted and lists them once it
 * succeeded on every rank (coordinator/store.c); they are clean, read
 * from their files. Single-threaded: the model worker's thread.
 */
#ifndef SELENE_COORDINATOR_WARM_H
#define SELENE_COORDINATOR_WARM_H

#include "common/idlist.h"
#include "coordinator/index.h"

#include <stdbool.h>
#include <stdint.h>

struct coord_warm {
	uint32_t slots_total;  /* every rank's; 0: no warm tier */
	uint32_t slots_used;   /* held by warm records and stores in flight */
	/*
	 * Of the free ones, those a background job in flight (an unlink, a
	 * truncate, a rewrite, a failed store's unlink) gives back on each
	 * rank only when it runs there: a fetch is taken before every queued
	 * background job, so a read-through counts them as held.
	 */
	uint32_t slots_releasing;
	/*
	 * Of the used ones, those a failed store holds on the ranks where it
	 * succeeded, its unlink not sent: held there until the next start.
	 */
	uint32_t slots_stranded;
	uint32_t row_slots;    /* a row's pieces */
	uint64_t slot_bytes;
	uint32_t nodes_max;
	uint32_t *slots;       /* per node id: the slots it holds or is charged */
	struct sel_idlink *links; /* per node id: its place on the list */
	struct sel_idlist list;   /* warm records, least recently used at the head */
	uint32_t records;      /* on the list */
	uint64_t listed_slots; /* their slots */
	bool *listed;
	uint64_t hits, evictions;
	uint64_t partial_hits;       /* fetches with some records warm, not all */
	uint64_t read_throughs;      /* records read from disk into warm on every rank */
	uint64_t read_through_bytes; /* their slots' bytes, a rank's */
	uint64_t read_failures;      /* read-throughs whose fetch failed somewhere */
	/*
	 * Dirty records (warm on every rank, their file not yet committed on
	 * every rank, docs/DESIGN.md section 6): never a warm victim, nor is
	 * an ancestor of one (dirty_below), warm or on disk: a chain keeps
	 * every record a dirty one needs.
	 */
	uint8_t *dirty;        /* per node id: enum coord_warm_dirty */
	uint32_t *dirty_below; /* per node id: dirty records under it */
	uint64_t *checkpoint;  /* per node id: a dirty record's checkpoint id */
	/* per node id: the only child whose commit left its row until its
	 * own file is on disk, or COORD_NONE */
	uint32_t *row_drop_child;
	uint32_t dirty_records;
	uint64_t dirty_slots;  /* their slots */
};

enum coord_warm_dirty {
	COORD_WARM_CLEAN = 0,   /* on disk, or not warm */
	COORD_WARM_DIRTY = 1,   /* warm only: no write submitted */
	COORD_WARM_WRITING = 2, /* its write from warm is in flight */
};

/* No warm tier: everything zero, every call below a no-op. */
void coord_warm_init_off(struct coord_warm *w);

/* A warm tier of slots_total slots for an index of nodes_max nodes. */
int coord_warm_init(struct coord_warm *w, uint32_t nodes_max, uint32_t slots_total,
		    uint32_t row_slots, uint64_t slot_bytes);
void coord_warm_destroy(struct coord_warm *w);

static inline bool coord_warm_enabled(const struct coord_warm *w)
{
	return w->slots_total > 0;
}

/* Whether node id is warm on every rank (its store committed warm). */
bool coord_warm_holds(const struct coord_warm *w, uint32_t id);

/* Whether node id holds or is charged warm slots (warm, or on its way). */
static inline bool coord_warm_charged(const struct coord_warm *w, uint32_t id)
{
	return w->slots_total && id < w->nodes_max && w->slots[id] != 0;
}

/* The warm slots node id holds or is charged; 0 where it has none. */
static inline uint32_t coord_warm_slots_of(const struct coord_warm *w, uint32_t id)
{
	return coord_warm_charged(w, id) ? w->slots[id] : 0;
}

/* A warm store (or read-through) of node id was submitted: slots charged, not yet listed. */
void coord_warm_charge(struct coord_warm *w, uint32_t id, uint32_t slots);
/* Its store committed on every rank: listed as the most recently used. */
void coord_warm_ready(struct coord_warm *w, uint32_t id);
/* Its slots are given back (a drop, unlink, failed store or a new store of it). */
void coord_warm_forget(struct coord_warm *w, uint32_t id);
/*
 * Its row's slots are given back (a row truncate of a record of
 * tail_pages pages); its pages stay warm, a page-less record goes.
 */
void coord_warm_drop_row(struct coord_warm *w, uint32_t id, uint32_t tail_pages);
/* A use: the most recently used, if it is warm. */
void coord_warm_touch(struct coord_warm *w, uint32_t id);

/*
 * The least recently used warm record that is READY, unpinned, clean and
 * no dirty record's ancestor, from list position from on (w->list.head: the
 * whole list; a caller that takes several victims passes the position
 * after the last one, so that one pass walks the list once), or
 * COORD_NONE.
 */
uint32_t coord_warm_victim(const struct coord_warm *w, const struct coord_index *ix,
			   uint32_t from);

/* Node id (warm, charged) is dirty: committed warm, its file not yet written. */
void coord_warm_set_dirty(struct coord_warm *w, const struct coord_index *ix, uint32_t id,
			  uint64_t checkpoint);
/* Node id's file is committed on every rank, or it left the tier: clean. */
void coord_warm_set_clean(struct coord_warm *w, const struct coord_index *ix, uint32_t id);
/* Node id (dirty) has its write from warm submitted: no dirty victim while it runs. */
void coord_warm_set_writing(struct coord_warm *w, uint32_t id);
/* Node id's write from warm failed on some rank: dirty again, to be written again. */
void coord_warm_write_failed(struct coord_warm *w, uint32_t id);
/*
 * Node id (not clean) drops its row for its only child, child, once its
 * file is on disk (coord_warm_set_clean forgets it).
 */
void coord_warm_want_row_drop(struct coord_warm *w, uint32_t id, uint32_t child);

/* The child node id's row waits to be dropped for, or COORD_NONE. */
static inline uint32_t coord_warm_row_drop_child(const struct coord_warm *w, uint32_t id)
{
	return w->slots_total && id < w->nodes_max ? w->row_drop_child[id] : COORD_NONE;
}

/* The dirty records under node id (0 without a warm tier). */
static inline uint32_t coord_warm_dirty_below(const struct coord_warm *w, uint32_t id)
{
	return w->slots_total && id < w->nodes_max ? w->dirty_below[id] : 0;
}

static inline enum coord_warm_dirty coord_warm_dirty_state(const struct coord_warm *w,
							   uint32_t id)
{
	return w->slots_total && id < w->nodes_max ? (enum coord_warm_dirty)w->dirty[id] :
						     COORD_WARM_CLEAN;
}

/*
 * The least recently used dirty record with no write in flight whose
 * parent is clean (a file is written only after its parent's, R-DIR-6),
 * from list position from on (as coord_warm_victim), or COORD_NONE.
 */
uint32_t coord_warm_dirty_victim(const struct coord_warm *w, const struct coord_index *ix,
				 uint32_t from);

#endif
