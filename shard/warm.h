/*
 * A rank's warm tier (docs/DESIGN.md section 6, seed 2.4, 2.5): one
 * populated mapping of equal slots, one page record each (every page
 * plane's page), registered with the device once, in chunks of at most
 * SHARD_WARM_REGISTER_CHUNK_BYTES, at open. Slots are laid out in groups
 * of G, plane-major within a group, every slot in a group (the layout of
 * shard/slab.h: shard_slab_page, shard_slab_plane, shard_slab_spread and
 * shard_slab_follows on the tier's pool give every address), so plane p
 * of consecutive slots of one group is one range of memory, as plane p of
 * consecutive device pages is. G is 1 (a slot is a page record in one
 * piece, as the file's page segment) unless every page plane has the same
 * bytes, a multiple of 4 KiB (shard_slab_group_slots), and a row fits
 * REC_DISK_BUFFERS_MAX pieces of one plane's bytes. A record held warm is
 * its tail pages in slots, in order, and its row in row_piece_count slots,
 * found by key; with G > 1 the row's bytes lie in its slots' plane
 * segments in order (shard_warm_row_buffers). Free slots are handed out
 * lowest first, and a record's slots go back so that the next record of
 * the same size takes them in the same order, so a record's pages mostly
 * lie in consecutive slots. Allocation never blocks: a record that does
 * not fit fails at once (SEL_EQUEUEFULL) and its store goes through
 * staging instead. It is not the policy: rank zero decides which records
 * are warm and which go (coordinator/warm.h); this only holds them. One
 * thread (the engine's transfer thread) changes it; the counters may be
 * read from any thread.
 */
#ifndef SELENE_SHARD_WARM_H
#define SELENE_SHARD_WARM_H

#include "common/limits.h"
#include "record/format.h"
#include "record/key.h"
#include "shard/slab.h"

#include <stdbool.h>
#include <stdint.h>

struct shard_device;

/*
 * Registration in chunks below the drivers' per-call limit (a call of 512
 * GiB fails on R580 drivers; LMCache and vLLM register at most 64 GiB a
 * call), each a whole number of slots so no slot spans two registrations.
 */
#define SHARD_WARM_REGISTER_CHUNK_BYTES (32ull << 30)
/* Chunks of one warm mapping: 2^46 bytes (shard_slab_init's bound) / 32 GiB. */
#define SHARD_WARM_CHUNKS_MAX 2048u

/*
 * Slots a group lays out plane-major at most: a run of 64 pages is 64 x
 * 128 KiB = 8 MiB a plane for a typical plane, past the 2 MiB at which
 * batched host-to-device copies stop slowing a decode beside them.
 */
#define SHARD_WARM_GROUP_SLOTS 64u

#define SHARD_WARM_NONE UINT32_MAX
/* A warm tier's bytes at most: shard_slab_init's bound on one mapping. */
#define SHARD_WARM_BYTES_MAX (1ull << 46)

/* One record held warm. */
struct shard_warm_entry {
	struct rec_key key;
	uint32_t first_page_index;
	uint32_t tail_page_count;
	uint32_t page_first; /* first page's slot, then next[] in page order */
	uint32_t row_first;  /* first row piece's slot, or SHARD_WARM_NONE */
	bool committed;      /* findable (its store completed) */
	bool read_in;        /* committed by a read-through: its file is on this rank's disk */
	uint32_t hash_next;  /* entry index in its bucket chain */
	uint32_t free_next;
};

struct shard_warm_stats {
	uint64_t records, bytes;       /* committed records and their slots' bytes */
	uint32_t slots_used, slots_total;
	uint32_t row_slots;            /* slots a row takes (row_piece_count) */
	uint64_t stores;               /* stores that went into warm slots */
	uint64_t store_fallbacks;      /* warm stores that found no room: staged */
	uint64_t hits;                 /* fetches served from warm slots whole */
	uint64_t partial_hits;         /* fetches with some records from warm slots,
					  the rest from files */
	uint64_t read_throughs;        /* records a fetch read from their files into
					  warm slots, which then stayed warm */
	uint64_t read_through_bytes;   /* their slots' bytes */
	uint64_t read_fallbacks;       /* read-throughs that found no room: staged */
	uint64_t read_failures;        /* read-throughs whose fetch failed: slots freed */
	uint64_t reads_dropped;        /* read-through records dropped here to seat a
					  warm-only store (shard_warm_free_reads) */
	uint64_t drops;                /* records dropped (by rank zero, unlink, rewrite) */
	uint64_t register_ns;          /* what registering the mapping took */
	uint32_t register_chunks;
};

/* A warm tier's shape (shard_warm_init). */
struct shard_warm_shape {
	const uint64_t *plane_bytes; /* each page plane's unit bytes, plane order */
	uint32_t plane_count;
	uint64_t row_bytes;          /* a row's bytes */
	uint32_t slot_count;         /* rounded down to whole groups */
	uint32_t pages_max;          /* a record's tail pages at most */
	uint32_t group_slots_max;    /* SHARD_WARM_GROUP_SLOTS; 1: G = 1 always */
};

struct shard_warm {
	struct shard_slab_pool pool;
	uint32_t row_piece_count;  /* slots a row takes */
	uint64_t row_bytes;
	uint32_t *next;            /* per slot: the next slot of its record, or NONE */
	uint32_t *scratch;         /* a lease's array: one record's slots */
	uint32_t scratch_capacity;
	struct shard_warm_entry *entries; /* pool.slot_count: each holds a slot */
	uint32_t *buckets;         /* bucket_mask + 1 heads */
	uint32_t bucket_mask;
	uint32_t free_entry;
	/* Where shard_warm_page_slots stopped: entry (or NONE), page, slot. */
	uint32_t walk_entry, walk_page, walk_slot;
	struct shard_device *registered;
	uint32_t chunks_registered;
	uint64_t chunk_bytes;          /* each registration's (whole slots) */
	uint64_t register_chunk_bytes; /* at most: SHARD_WARM_REGISTER_CHUNK_BYTES
					  (tests set less) */
	struct shard_warm_stats stats; /* under the pool's lock for readers */
};

/*
 * Maps the slots of shape (each a page record of its planes, 4 KiB-rounded
 * each; slot_count rounded down to a multiple of G, which is at most
 * min(group_slots_max, slot_count) and 1 where the planes differ, see
 * above) for records of up to pages_max tail pages and rows of row_bytes.
 * Returns 0, -EINVAL, or -ENOMEM.
 */
int shard_warm_init(struct shard_warm *w, const struct shard_warm_shape *shape);
/* Unregisters (if registered) and unmaps. A zeroed w is fine. */
void shard_warm_destroy(struct shard_warm *w);

/*
 * Registers the mapping with dev in chunks of at most
 * SHARD_WARM_REGISTER_CHUNK_BYTES (whole groups each, so a copy of a run
 * of a group's slots never spans two registrations); on a failure, the
 * chunks registered are unregistered again. Notes the time it took in the
 * stats. Returns 0 or the device's error.
 */
int shard_warm_register(struct shard_warm *w, struct shard_device *dev);

/* Slots one record takes: its tail pages and, with a row, the row's pieces. */
uint32_t shard_warm_slots_for(const struct shard_warm *w, uint32_t tail_pages, bool row);

/*
 * Takes slots for a record about to be stored (not findable until
 * shard_warm_commit). Returns its entry index, or SHARD_WARM_NONE when too
 * few slots are free (counted in store_fallbacks). Never blocks.
 */
uint32_t shard_warm_reserve(struct shard_warm *w, const struct rec_key *key,
			    uint32_t first_page_index, uint32_t tail_pages);
/*
 * Takes slots for a record a fetch reads from its file (read-through): its
 * tail pages and, with row, its row. As shard_warm_reserve, counted in
 * read_fallbacks when too few are free.
 */
uint32_t shard_warm_reserve_read(struct shard_warm *w, const struct rec_key *key,
				 uint32_t first_page_index, uint32_t tail_pages, bool row);
/* Makes a reserved entry findable, dropping an older one of its key. */
void shard_warm_commit(struct shard_warm *w, uint32_t entry);
/* The same for a read-through whose fetch succeeded (counted as one). */
void shard_warm_commit_read(struct shard_warm *w, uint32_t entry);
/* Gives a reserved entry's slots back (its store failed). */
void shard_warm_abort(struct shard_warm *w, uint32_t entry);
/* Zeroes a read-through's slots and gives them back (its fetch failed). */
void shard_warm_abort_read(struct shard_warm *w, uint32_t entry);

/*
 * Frees committed records this rank read through (clean: their files are
 * on this rank's disk; a write from warm never reads them), lowest entry
 * first, until need slots are free; counted in reads_dropped. For a store
 * rank zero counted room for that finds this rank's slots held (docs/
 * DESIGN.md section 6). Only on the transfer thread, between jobs. Returns
 * whether need slots are free.
 */
bool shard_warm_free_reads(struct shard_warm *w, uint32_t need);

/* The committed entry of key, or SHARD_WARM_NONE. */
uint32_t shard_warm_find(const struct shard_warm *w, const struct rec_key *key);

/*
 * Drops key's committed entry, or only its row (row_only), giving its
 * slots back. The caller guarantees that no copy reads them (the transfer
 * thread, between jobs). Returns whether an entry was there.
 */
bool shard_warm_drop(struct shard_warm *w, const struct rec_key *key, bool row_only);

/*
 * The slots of pages [first, first + count) of entry into out, and its
 * row's pieces (row_first's chain) into out. Page slots go on from where
 * the last call stopped when it was the same entry, so calls in page
 * order walk the chain once.
 */
void shard_warm_page_slots(struct shard_warm *w, uint32_t entry, uint32_t first,
			   uint32_t count, uint32_t *out);
void shard_warm_row_slots(const struct shard_warm *w, uint32_t entry, uint32_t *out);

void shard_warm_get_stats(struct shard_warm *w, struct shard_warm_stats *out);

/* Counts a fetch served (it succeeded) from warm slots whole, or in part. */
void shard_warm_note_hit(struct shard_warm *w);
void shard_warm_note_partial(struct shard_warm *w);

/*
 * A row's pieces in its slots (row_slots, row_piece_count of them): with
 * G = 1 each slot, slot_bytes each; else each slot's planes in order, one
 * plane's bytes each; as many as row_bytes takes. Fills pieces (at most
 * REC_DISK_BUFFERS_MAX) and *piece_bytes; returns the count.
 */
uint32_t shard_warm_row_buffers(const struct shard_warm *w, const uint32_t *row_slots,
				void **pieces, uint64_t *piece_bytes);

static inline struct shard_warm_entry *shard_warm_at(const struct shard_warm *w,
						      uint32_t entry)
{
	return &w->entries[entry];
}

#endif
