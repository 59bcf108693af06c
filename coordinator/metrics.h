/*
 * The Prometheus text exposition of a store (docs/DESIGN.md section 9), apart
 * from the store so the format's rules live in one place: every family
 * once, with # HELP and # TYPE before its samples, and each family's
 * samples together (per-peer link families grouped by family, never
 * interleaved by peer). It formats what it is given and reads nothing
 * else, except the fan-out's link counters.
 */
#ifndef SELENE_COORDINATOR_METRICS_H
#define SELENE_COORDINATOR_METRICS_H

#include "selene/store.h"

#include <stddef.h>
#include <stdint.h>

struct coord_fanout;

/* Rank zero's staging pool (shard/slab.h), the seed's staging gauges. */
struct coord_metrics_staging {
	uint32_t slots_total, slots_in_use, slots_intake;
	uint64_t exhausted; /* allocations refused for lack of slots */
	uint64_t store_yields; /* rank zero's engine: restores run inside a store */
	uint64_t warm_fallbacks; /* rank zero's engine: warm stores that found no slots */
	uint64_t warm_read_fallbacks; /* and read-throughs that found none */
};

/*
 * Writes the exposition of st, staging (NULL: no engine) and, with a
 * fan-out, every peer link into buf. Returns the length (without the NUL),
 * or -ENOSPC when size is too small (buf then holds a truncated text).
 */
int coord_metrics_write(char *buf, size_t size, const struct sel_stats *st,
			const struct coord_metrics_staging *staging,
			struct coord_fanout *fanout, uint32_t world_size);

#endif
